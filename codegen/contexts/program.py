"""generated/<backend>/gpt.py: a model program (derivations/language/program.py) laid out for
its template — every section's statements, grouped by their guard, and the derived backward.

Nothing here prints a formula: a statement is a call of a kernel by its role (the template's
`Kernels` adapts the role to the op's signature), an index map, a residual add or an alias;
the template prints each kind's forward and backward line (its macros `fwd` and `bwd`).
"""

from __future__ import annotations

from derivations.language.program import KINDS, Program, Section, reverse

from .common import backend_title, source_path


def _guard_text(when: tuple) -> str:
    """The printed condition of a guard: options read off `ops.options`."""
    parts = []
    for option, values in when:
        if len(values) == 1:
            parts.append(f'o["{option}"] == "{values[0]}"')
        else:
            parts.append(f'o["{option}"] in ({", ".join(repr(v) for v in values)})')
    return " and ".join(parts)


def _scope_text(section: Section, scope: str | None, ties: dict) -> str | None:
    """The parameters' prefix as printed: a block's under f"h.{layer}.", a tied scope by option."""
    if scope is None:
        return None
    if scope in ties:
        option, other = ties[scope]
        return f'("{other}" if ops.config.{option} else "{scope}")'
    return f'p + "{scope}"' if section.name == "block" else f'"{scope}"'


def _groups(items: list[dict]) -> list[dict]:
    """Consecutive statements under the same guard, together (one `if` each)."""
    out: list[dict] = []
    for it in items:
        if out and out[-1]["guard"] == it["guard"]:
            out[-1]["stmts"].append(it)
        else:
            out.append({"guard": it["guard"], "stmts": [it]})
    return out


def _stmt(section: Section, s, ties: dict, grads=()) -> dict:
    return {
        "kind": s.kind,
        "out": list(s.out),
        "args": list(s.args),
        "grads": list(grads),
        "scope": _scope_text(section, s.scope, ties),
        "guard": _guard_text(s.when),
        "note": s.note,
        "which": s.which,
        "rule": KINDS[s.kind][1],
    }


# the adjoint each section's backward starts from: the loss's (the seed), a block's output's,
# the embedding's output's (both handed on from the section after it)
GIVEN = {"embed": "x", "block": "y", "head": "loss"}


def section_context(section: Section, ties: dict) -> dict:
    """The section's forward (the loss apart: a forward without targets stops before it), its
    derived backward, and the adjoints that backward starts at None (every one but the given)."""
    forward = [_stmt(section, s, ties) for s in section.body if s.kind != "loss"]
    loss = [_stmt(section, s, ties) for s in section.body if s.kind == "loss"]
    backward = [_stmt(section, a.stmt, ties, a.grads) for a in reverse(section)]
    adjoints = []
    for a in reverse(section):
        for n in (*a.stmt.out, *a.grads):
            if n not in adjoints and n != GIVEN[section.name]:
                adjoints.append(n)
    return {
        "name": section.name,
        "forward": _groups(forward),
        "loss": _groups(loss),
        "backward": _groups(backward),
        "adjoints": adjoints,
    }


def program_context(program: Program, backend: str, module: str) -> dict:
    return {
        "name": program.name,
        "title": program.title,
        "backend": backend,
        "backend_title": backend_title(backend),
        "source": source_path(module),
        "options": program.options,
        "decay_min_axes": program.decay_min_axes,
        "sections": {s.name: section_context(s, program.ties) for s in program.sections()},
    }

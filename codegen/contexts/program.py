"""generated/<backend>/gpt.py: a model program (derivations/language/program.py) laid out for
its template — every section's statements, grouped by their guard, and the derived backward.

Nothing here prints a formula: a statement is a call of a kernel by its role (the template's
`Kernels` adapts the role to the op's signature), an index map, a residual add or an alias;
the template prints each kind's forward and backward line (its macros `fwd` and `bwd`).
"""

from __future__ import annotations

from derivations.language.program import KINDS, Program, Section, exclusive, reverse

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


def _stmt(section: Section, s, ties: dict, grads=(), modes=()) -> dict:
    return {
        "kind": s.kind,
        "out": list(s.out),
        "d_out": ["d_" + o for o in s.out],
        "modes": list(modes),
        "args": list(s.args),
        "grads": list(grads),
        "scope": _scope_text(section, s.scope, ties),
        # a dropout statement's site, the name its masks are drawn by: its value's, per block
        "site": (f'p + "{s.out[0]}"' if section.name == "block" else f'"{s.out[0]}"'),
        "guard": _guard_text(s.when),
        "note": s.note,
        "which": s.which,
        "rule": KINDS[s.kind][1],
    }


# the adjoint each section's backward starts from: the loss's (the seed), a block's output's,
# the embedding's output's (both handed on from the section after it)
GIVEN = {"embed": "x", "block": "y", "head": "loss"}


def _implies(a: tuple, b: tuple) -> bool:
    """Guard a implies guard b: b restricts no option that a does not restrict to a subset."""
    da = dict(a)
    return all(k in da and set(da[k]) <= set(values) for k, values in b)


def share_modes(section: Section) -> list[tuple[str, ...]]:
    """How each backward statement adds each input's share to its adjoint: "first" where no
    statement before it (in reverse order) can have given that adjoint a share under its guard,
    "add" where one surely has (its guard implies an earlier share's), else "acc" (it depends on
    the options: the adjoint starts at None and `_acc` adds)."""
    shares: dict[str, list[tuple]] = {}
    out = []
    for a in reverse(section):
        modes = []
        for g in a.grads:
            before = shares.setdefault(g, [])
            if any(_implies(a.stmt.when, h) for h in before):
                modes.append("add")
            elif all(exclusive(a.stmt.when, h) for h in before):
                modes.append("first")
            else:
                modes.append("acc")
            before.append(a.stmt.when)
        out.append(tuple(modes))
    return out


def section_context(section: Section, ties: dict) -> dict:
    """The section's forward (the loss apart: a forward without targets stops before it), its
    derived backward with how each share is added, and the adjoints that start at None (those
    with an `_acc` share)."""
    forward = [_stmt(section, s, ties) for s in section.body if s.kind != "loss"]
    loss = [_stmt(section, s, ties) for s in section.body if s.kind == "loss"]
    modes = share_modes(section)
    backward = [_stmt(section, a.stmt, ties, a.grads, m) for a, m in zip(reverse(section), modes)]
    adjoints = []
    for a, m in zip(reverse(section), modes):
        for n, mode in zip(a.grads, m):
            if mode == "acc" and n not in adjoints:
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
        "sections": (sections := {s.name: section_context(s, program.ties) for s in program.sections()}),
        "uses_acc": any(sec["adjoints"] for sec in sections.values()),
    }

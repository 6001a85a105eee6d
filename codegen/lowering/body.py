"""Lowering a function body: the assignments of a forward or a backward, in order, to lines.

Three passes over the sequence of assignments, then one per statement:

* ownership: which arrays a line reads for the last time that it may take over as its result
  (an array computed above as a new array that nothing views), and which `S = CausalMask(S)`
  may mask S in place (`owned`, `masks_own_array`);
* liveness: with `keep` (the arrays still needed after the body: outputs and saved arrays, or
  the gradients), an intermediate is deleted (`del`) after the line that reads it last, and the
  temporaries of a line after that line: a large m×n intermediate is freed as soon as it is dead
  instead of when the function returns (the peak memory of attention's backward);
* each assignment lowered to statements (statements.py), then its comments: its note (the why,
  `Assign.note`) and its formula (the formula printer, from the same expression) above it, the
  stored shape after it; a `when` guard prints as `if <flag>:`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from derivations.language.arrays import Array, CausalMask, ColSum, Contract, Gather, OneHot, T, Take, shape_of

from ..analysis import keeps_leading_axes, storage_text
from ..printers import formula_comment
from .statements import Lowering

__all__ = ["Block", "lower_body", "stored_shape", "shape_comment", "masks_own_array", "owned"]

_VIEW_NODES = (T, Gather, Take, CausalMask, OneHot)  # may print as views of their argument


@dataclass
class Block:
    """One assignment, lowered: its statements, the temporaries they define, the arrays dead
    after it."""

    when: str | None
    formula: str
    lines: list[str]
    note: str = ""
    temps: list[str] = field(default_factory=list)
    frees: list[str] = field(default_factory=list)


def shape_comment(arr: Array, batched: bool, printer) -> str:
    return storage_text(arr, arr.integer_valued, batched and arr.shape[0] != 1, printer)


def stored_shape(batched: dict, carriers=None):
    """The stored shape of a subexpression, for in-place printing: (rows, cols, its leading
    axes), or None where that is not known (a scalar). The leading axes are "has them or not"
    where every batched input has the same ones; for an op whose inputs' leading axes broadcast
    against each other (`carriers` given), they are the set of inputs whose leading axes the
    value carries: cos ⊙ x is not of the full shape of cos ⊙ x + sin ⊙ (x @ rot) when sin's
    leading axes are longer than x's and cos's, so it is no array to accumulate the sum into."""

    def full(e):
        try:
            shape = shape_of(e)
        except Exception:  # noqa: BLE001 - an ill-formed part: no in-place
            return None
        if shape == ():
            return None
        return (*shape, carriers(e) if carriers is not None else keeps_leading_axes(e, batched))

    return full


def leading_carriers(assigns, batched: dict, upstream=(), before=()):
    """For a broadcasting op: a function giving, for an expression over the body `assigns`, the
    batched inputs whose leading axes its value carries (outside ColSum and Contract, which
    sum them away), through the body's intermediates and those of `before` (the forward, for
    the values a backward reads from the cache). An upstream gradient has the outputs' leading
    axes, the broadcast of every input's: it carries them all."""
    assigns = list(before) + list(assigns)
    targets = {a.target for a in assigns}
    everyone = frozenset(a for a, b in batched.items() if b and a not in targets)
    known: dict = {u: everyone for u in upstream}

    def carriers(e) -> frozenset:
        e = sp.sympify(e)
        if isinstance(e, Array):
            if e in known:
                return known[e]
            return frozenset({e}) if batched.get(e, False) and e not in targets else frozenset()
        if isinstance(e, (ColSum, Contract)):
            return frozenset()
        return frozenset().union(*(carriers(a) for a in e.args)) if e.args else frozenset()

    for a in assigns:
        known[a.target] = known.get(a.target, frozenset()) | carriers(a.expr)
    return carriers


def masks_own_array(assigns, k: int) -> bool:
    """Whether assignment k is `S = CausalMask(S)` with S computed earlier in this body as a
    new array that nothing else views: then the mask may be applied to S in place."""
    asg = assigns[k]
    expr, target = asg.expr, asg.target
    if not (isinstance(expr, CausalMask) and expr.args[0] == target):
        return False
    earlier = [a for a in assigns[:k] if a.target == target]
    if (
        not earlier
        or isinstance(earlier[-1].expr, (Array, *_VIEW_NODES))
        or earlier[-1].when != asg.when
        and earlier[-1].when is not None
    ):
        return False
    return not any(
        isinstance(node, _VIEW_NODES) and target in node.args
        for a in assigns[:k]
        for node in sp.preorder_traversal(a.expr)
    )


def owned(assigns, k: int, a: Array) -> bool:
    """Whether `a`, as assignment k reads it, is a new array computed earlier in this body
    (not an input, not a view of anything) that no other name views."""
    for j in range(k - 1, -1, -1):
        if assigns[j].target != a:
            continue
        if masks_own_array(assigns, j):  # masked in place: still its own array
            continue
        if assigns[j].when is not None or isinstance(assigns[j].expr, (Array, *_VIEW_NODES)):
            return False
        return not any(
            isinstance(node, _VIEW_NODES) and a in node.args
            for i, b in enumerate(assigns[:k])
            if not masks_own_array(assigns, i)
            for node in sp.preorder_traversal(b.expr)
        )
    return False


def last_reads(assigns, keep) -> dict:
    """name -> the index of the line that reads it last, for the body's own intermediates (not
    kept, first assigned unguarded); empty without `keep`."""
    if keep is None:
        return {}
    last_read: dict = {}
    first_guard: dict = {}
    for k, asg in enumerate(assigns):
        for a in sp.sympify(asg.expr).free_symbols:
            if isinstance(a, Array):
                last_read[a.name] = k
        first_guard.setdefault(asg.target.name, asg.when)
    local = {n for n, w in first_guard.items() if w is None and n not in {a.name for a in keep}}
    return {n: k for n, k in last_read.items() if n in local}


def blocks(assigns, printer, batched: dict, keep=None, taken=frozenset(), broadcast=None) -> list[Block]:
    """Each assignment lowered to statements, with its temporaries and the arrays it frees;
    `taken`: the names the function uses (no temporary may take one); `broadcast`: None, or the
    inputs' leading axes broadcast against each other: (the upstream gradients, the forward's
    assignments) for a backward, ((), ()) for a forward (`stored_shape`)."""
    lowering = Lowering(printer, taken)
    printer.definitions = {asg.target: asg.expr for asg in assigns}  # what each line's array reads
    carriers = leading_carriers(assigns, batched, *broadcast) if broadcast is not None else None
    full = stored_shape(batched, carriers)
    last_read = last_reads(assigns, keep)
    out = []
    for k, asg in enumerate(assigns):
        if masks_own_array(assigns, k):  # S = mask(S) on S computed just above
            lines, temps = printer.causal_in_place(asg.target.name), []
        elif isinstance(asg.expr, Array):  # a new name for an array (m = m′ in a loop)
            lines, temps = [f"{asg.target.name} = {asg.expr.name}"], []
        else:
            # arrays this line reads for the last time, computed above as new arrays: the line
            # may take one over as its result (S − max S written into S's array)
            dead = {
                a
                for a in sp.sympify(asg.expr).free_symbols
                if isinstance(a, Array) and last_read.get(a.name) == k and owned(assigns, k, a)
            }
            lines = lowering.assign(asg.target.name, asg.expr, full=full, dead=dead)
            temps = list(lowering.defined)
        lines[-1] += f"  # {shape_comment(asg.target, batched[asg.target], printer)}"
        out.append(
            Block(
                when=asg.when,
                lines=lines,
                temps=temps if keep is not None else [],
                note=f"# {asg.note}" if asg.note else "",
                formula=formula_comment(asg.target.name, asg.expr, indent=8 if asg.when is not None else 4),
                frees=sorted(n for n, last in last_read.items() if last == k),
            )
        )
    return out


def lower_body(assigns, printer, batched: dict, keep=None, taken=frozenset(), broadcast=None) -> list[str]:
    """The lines of a sequence of assignments (see the module's docstring)."""
    lines: list[str] = []
    for b in blocks(assigns, printer, batched, keep, taken, broadcast):
        printed = (
            ([b.note] if b.note else []) + [b.formula] + b.lines + (["del " + ", ".join(b.temps)] if b.temps else [])
        )
        if b.when is not None:
            lines.append(f"if {b.when}:")
            printed = ["    " + p for p in printed]
        lines.extend(printed)
        if b.frees:
            lines.append("del " + ", ".join(b.frees))
    return lines

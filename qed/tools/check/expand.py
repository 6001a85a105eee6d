"""Definitions unfolded, gradients by the chain rule, differentials, Jacobians — in index form.

A step is elaborated with every name opaque (an `Array`'s entries are `IndexedBase` entries, a
scalar a `Symbol`, `∂L/∂X` an array of its own, `dX` too). `expand` then unfolds them, at one of
two levels:

* **local** — only what the step's calculus needs: the names that depend on a variable the step
  differentiates by; `∂L/∂X` by one application of the chain rule through X's consumers
  (`Σ_Y Σ_ab ∂L/∂Y_ab ∂Y_ab/∂X`), each consumer's gradient kept opaque, for the X that no other
  differentiated name of the step lies upstream of; `dY` one level (`Σ_X ∂Y/∂X dX`) for the Y
  no other lies downstream of. A proof at this level holds for any loss and any value of what
  stays opaque: the step's own argument (seed A §6 keeps ∂L/∂S opaque while it derives ∂L/∂Q).
* **full** — every definition unfolded down to the inputs, every gradient down to the outputs'
  (opaque: the loss is any function of them, unless the document defines it), every differential
  down to the inputs'. A refutation is searched for only at this level, so that a counterexample
  is one of the document's own meanings, not of an opaque stand-in.

A Jacobian `∂Y_ij/∂X_kl` is taken when the step is elaborated (elaborate.py, `derivative`): Y
unfolded through the names that depend on X (X itself held as the variable), then `sympy.diff`
on the `Indexed` entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derivations.language.arrays import Array, ArrayNode, document_form, entry

from .context import PARAMETERS, UNFOLDED, Context, basic
from .grammar import NotUnderstood

MAX_ROUNDS = 60


@dataclass(frozen=True)
class Policy:
    level: str  # "local" or "full"
    grads: frozenset = frozenset()  # X of every ∂L/∂X in the step
    diffs: frozenset = frozenset()  # X of every dX in the step
    jac: frozenset = frozenset()  # X of every ∂·/∂X_{..} in the step


class Ones(ArrayNode):
    """A row of n ones (𝟏ᵀ): every entry 1."""

    nargs = 1

    def node_shape(self, shapes):
        return (sp.Integer(1), self.args[0])

    def node_entry(self, idx, env):
        return sp.Integer(1)


def ones_row(n) -> Ones:
    return Ones(n)


# ------------------------------------------------------------------------------ the graph
def labels_in(expr) -> set[str]:
    """The labels of the names an expression reads (arrays, their entries, scalars)."""
    out = set()
    e = basic(expr)
    for a in e.atoms(sp.Indexed):
        out.add(str(a.base.label))
    base_labels = {a.base.label for a in e.atoms(sp.Indexed)}
    for s in e.free_symbols:
        if isinstance(s, Array):
            out.add(s.name)
        elif isinstance(s, sp.Symbol) and not isinstance(s, sp.Dummy) and s not in base_labels:
            out.add(s.name)
    for s in e.atoms(Array):
        out.add(s.name)
    return out


def deps(ctx: Context, label: str) -> set[str]:
    """The names `label`'s definition reads (a recurrence's too: it is a consumer of its inputs,
    and the chain rule through it refuses to unfold it)."""
    d = ctx.definition(label)
    if d is None:
        return set()
    expr = d.expr
    named = {lab for lab in labels_in(expr) if ctx.binding_of_label(lab) is not None}
    return {lab for lab in named if ctx.binding_of_label(lab).kind in ("array", "scalar", "loss")} - {label}


def consumers(ctx: Context, label: str) -> list[str]:
    """The names computed directly from `label`. A definition of the convention table counts only
    once the document has used a name of its group (S, A, O: attention; p: the probabilities): a
    document that never mentions p = softmax(x) has no p, one that mentions S has A and O."""
    return sorted(lab for lab, d in ctx.defs.items() if label in deps(ctx, lab) and ctx.active(lab))


def upstream(ctx: Context, label: str) -> set[str]:
    """Every name `label` depends on, transitively."""
    seen: set[str] = set()
    todo = [label]
    while todo:
        for d in deps(ctx, todo.pop()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


# ------------------------------------------------------------------------------ entries
def _positions(ctx: Context, label: str, idx: tuple) -> tuple:
    """An `Indexed`'s indices as (row, col) positions of its array."""
    b = ctx.binding_of_label(label)
    rows, cols = b.shape
    if len(idx) == 2:
        return idx
    if len(idx) == 1:
        return (sp.Integer(0), idx[0]) if rows == 1 else (idx[0], sp.Integer(0))
    return (sp.Integer(0), sp.Integer(0))


def def_entry(ctx: Context, label: str, pos: tuple) -> sp.Expr:
    """The definition of `label` at (row, col) positions, in index form (names inside opaque)."""
    d = ctx.definition(label)
    if d.kind == "array":
        return entry(d.expr, pos)
    if d.kind == "entries":
        b = ctx.binding_of_label(label)
        rows, cols = b.shape
        axes = [p for p, s in zip(pos, (rows, cols)) if s != 1]
        return d.expr.xreplace(dict(zip(d.vars, axes)))
    if d.kind == "scalar":
        return d.expr
    raise NotUnderstood(f"{label} is defined by {_KEPT[d.kind]}: it cannot be unfolded")


_KEPT = {  # the definitions `expand` keeps opaque, in words
    "recurrence": "a recurrence",
    "family": "a family of arrays (one per index)",
    "argmax": "an argmax (an index)",
}


def _entry_of(ctx: Context, label: str, pos: tuple):
    """The opaque entry of a named array (or the Symbol of a scalar) at positions."""
    b = ctx.binding_of_label(label)
    if b.kind in ("scalar", "loss"):
        return b.symbol() if b.kind == "scalar" else sp.Symbol(label, real=True)
    return entry(Array(label, b.shape), pos)


# ------------------------------------------------------------------------------ expansion
def _expandable(ctx: Context, policy: Policy) -> set[str]:
    defined = {lab for lab, d in ctx.defs.items() if d.kind in UNFOLDED}
    if policy.level == "full":
        return defined
    w = set(policy.grads) | set(policy.diffs) | set(policy.jac)
    return {lab for lab in defined if upstream(ctx, lab) & w}


def _grad_expandable(ctx: Context, policy: Policy, label: str) -> bool:
    b = ctx.binding_of_label(label)
    if b is not None and b.name in PARAMETERS and b.origin == "convention" and label not in upstream(ctx, "L"):
        # any parameter of the model (gradient descent's W): the loss depends on it through a
        # model the document does not write out, so ∂L/∂W stays opaque (never the 0 that the
        # loss as written would give)
        return False
    if policy.level == "full":
        return True
    if label not in policy.grads:
        return False
    return not (upstream(ctx, label) & (set(policy.grads) - {label}))


def _diff_expandable(ctx: Context, policy: Policy, label: str) -> bool:
    if ctx.definition(label) is None or ctx.definition(label).kind not in UNFOLDED:
        return False
    if policy.level == "full":
        return True
    if label not in policy.diffs:
        return False
    return not any(label in upstream(ctx, other) for other in policy.diffs if other != label)


def expand(expr, ctx: Context, policy: Policy) -> sp.Expr:
    """Unfold `expr` (index form) as `policy` says; see the module docstring."""
    names = _expandable(ctx, policy)
    e = basic(expr)
    for _ in range(MAX_ROUNDS):
        new = _round(e, ctx, policy, names)
        if new == e:
            return e
        e = new
    raise NotUnderstood("definitions that unfold without end (a name defined through itself?)")


def _round(e, ctx: Context, policy: Policy, names: set[str]) -> sp.Expr:
    reps = {}
    for a in e.atoms(sp.Indexed):
        lab = str(a.base.label)
        if lab in names:
            reps[a] = def_entry(ctx, lab, _positions(ctx, lab, a.indices))
        elif lab.startswith("dL/d"):
            target = lab[4:]
            if ctx.binding_of_label(target) is not None and _grad_expandable(ctx, policy, target):
                g = gradient_entry(ctx, target, _positions(ctx, target, a.indices), policy)
                if g is not None:
                    reps[a] = g
        elif lab.startswith("d(") and lab.endswith(")") and ctx.binding_of_label(lab[2:-1]) is not None:
            target = lab[2:-1]
            if _diff_expandable(ctx, policy, target):
                reps[a] = differential_entry(ctx, target, _positions(ctx, target, a.indices))
    base_labels = {a.base.label for a in e.atoms(sp.Indexed)}
    for s in e.free_symbols:
        if not isinstance(s, sp.Symbol) or isinstance(s, (sp.Dummy, Array)) or s in base_labels:
            continue
        lab = s.name
        b = ctx.binding_of_label(lab)
        if lab in names and b is not None and b.kind in ("scalar", "loss"):
            reps[s] = def_entry(ctx, lab, ())
        elif lab.startswith("dL/d") and ctx.binding_of_label(lab[4:]) is not None:
            target = lab[4:]
            if _grad_expandable(ctx, policy, target):
                g = gradient_entry(ctx, target, (), policy)
                if g is not None:
                    reps[s] = g
        elif lab.startswith("d(") and lab.endswith(")") and ctx.binding_of_label(lab[2:-1]) is not None:
            target = lab[2:-1]
            if _diff_expandable(ctx, policy, target):
                reps[s] = differential_entry(ctx, target, ())
    if not reps:
        return e
    return e.xreplace(reps)


# ------------------------------------------------------------------------------ calculus
def loss_defined(ctx: Context) -> bool:
    return ctx.definition("L") is not None


def gradient_entry(ctx: Context, target: str, pos: tuple, policy: Policy):
    """Entry `pos` of ∂L/∂target by the chain rule through target's consumers (their
    gradients opaque); None where target has no consumer and the loss is not defined (then
    ∂L/∂target is the opaque upstream gradient)."""
    if target == "L":
        return sp.Integer(1)
    cons = consumers(ctx, target)
    if not cons:
        if loss_defined(ctx):
            return sp.Integer(0)
        return None
    x = _entry_of(ctx, target, pos)
    total = sp.Integer(0)
    for y in cons:
        yb = ctx.binding_of_label(y)
        if yb.kind in ("scalar", "loss"):
            dy = sp.diff(document_form(def_entry(ctx, y, ())), x)
            g = sp.Integer(1) if y == "L" else sp.Symbol(f"dL/d{y}", real=True)
            total += g * dy
            continue
        rows, cols = yb.shape
        c, f = sp.Dummy("c", integer=True), sp.Dummy("f", integer=True)
        at = (c if rows != 1 else sp.Integer(0), f if cols != 1 else sp.Integer(0))
        dy = sp.diff(document_form(def_entry(ctx, y, at)), x)
        if dy == 0:
            continue
        g = entry(Array(f"dL/d{y}", yb.shape), at)
        limits = [(v, 0, n - 1) for v, n in zip(at, (rows, cols)) if isinstance(v, sp.Dummy)]
        total += sp.Sum(g * dy, *limits) if limits else g * dy
    return total


def differential_entry(ctx: Context, target: str, pos: tuple) -> sp.Expr:
    """Entry `pos` of d(target) = Σ_X ∂target/∂X dX over target's direct inputs X."""
    y = document_form(def_entry(ctx, target, pos))
    total = sp.Integer(0)
    for xl in sorted(deps(ctx, target)):
        xb = ctx.binding_of_label(xl)
        if xb.kind in ("scalar", "loss"):
            x = _entry_of(ctx, xl, ())
            total += sp.diff(y, x) * sp.Symbol(f"d({xl})", real=True)
            continue
        rows, cols = xb.shape
        c, f = sp.Dummy("c", integer=True), sp.Dummy("f", integer=True)
        at = (c if rows != 1 else sp.Integer(0), f if cols != 1 else sp.Integer(0))
        dy = sp.diff(y, entry(Array(xl, xb.shape), at))
        if dy == 0:
            continue
        dx = entry(Array(f"d({xl})", xb.shape), at)
        limits = [(v, 0, n - 1) for v, n in zip(at, (rows, cols)) if isinstance(v, sp.Dummy)]
        total += sp.Sum(dy * dx, *limits) if limits else dy * dx
    return total


def unfold_once(expr, ctx: Context, label: str) -> sp.Expr:
    """`expr` with each entry of `label` replaced by its definition's body there, once (a
    recurrence too: the entries its body reads stay as they are)."""
    d = ctx.definition(label)
    if d is None or d.kind not in ("entries", "recurrence"):
        raise NotUnderstood(f"{label} has no definition by entries to unfold")
    b = ctx.binding_of_label(label)
    e = basic(expr)
    reps = {}
    for a in e.atoms(sp.Indexed):
        if str(a.base.label) == label:
            pos = _positions(ctx, label, a.indices)
            axes = [p for p, s in zip(pos, b.shape) if s != 1]
            reps[a] = d.expr.xreplace(dict(zip(d.vars, axes)))
    return e.xreplace(reps)

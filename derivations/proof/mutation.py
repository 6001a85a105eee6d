"""Wrong variants of the printed expressions: the mutants of `qed audit` and of every generated
claim.

A mutant is one edit to one printed assignment (of an op's forward or backward, a table entry
or a step's update), of the kinds a person makes when typing a formula by hand:

    sign        a term's or the whole value's sign flipped
    factor      a term or the whole value multiplied by 2
    drop        one term of a sum dropped
    transpose   a matrix operand transposed, or a transpose removed
    swap        the two operands of a product, matrix product or power swapped
    reduce      a mean taken as a sum, a row sum as a row max, a column sum as a mean
    mask        the causal mask removed, or shifted by one (j < i, j ≤ i + 1)
    constant    an exact constant changed (½ → ⅓, 2 → 3, √ dropped)
    array       another array of the same shape read in place of one (a different cached
                array, the forward's input in place of an intermediate)
    function    exp ↔ a plain argument, the sign of a Heaviside flipped

Every mutant that type-checks is kept; whether it is equivalent to the original (the same
function, so no claim can or should refute it) is decided by the normaliser in the audit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import sympy as sp

from ..language.arrays import (
    Array,
    ArrayError,
    ArrayNode,
    Assign,
    CausalMask,
    ColSum,
    Contract,
    MatMul,
    RowMax,
    RowMean,
    RowSum,
    T,
    entry,
    shape_of,
)
from ..language.ops import Op


class ShiftedCausalMask(ArrayNode):
    """A wrong causal mask that keeps j ≤ i + s (s = −1: the diagonal masked too; s = 1: one
    future key let through). Never printed: it exists only as a mutant."""

    nargs = 2

    def node_shape(self, shapes):
        return shapes[0]

    def node_entry(self, idx, env):
        i, j = idx
        return sp.Piecewise((entry(self.args[0], idx, env), sp.Le(j, i + self.args[1])), (-sp.oo, True))


@dataclass(frozen=True)
class PrintedMutant:
    """Assignment `where` (("forward" | "backward"), position) of an op, with a wrong value."""

    name: str
    mistake: str
    scope: str
    position: int
    expr: sp.Expr

    def apply(self, op: Op) -> Op:
        lines = list(getattr(op, self.scope))
        old = lines[self.position]
        lines[self.position] = Assign(old.target, self.expr, old.when)
        return dataclasses.replace(op, **{self.scope: lines})


# ---------------------------------------------------------------------------------------------
# Sub-expression edits: each yields (kind, description, new subexpression).


def _edits(e, arrays_like: Callable) -> Iterator[tuple[str, str, sp.Expr]]:
    if isinstance(e, sp.Add) and len(e.args) >= 2:
        for k, term in enumerate(e.args):
            rest = e.args[:k] + e.args[k + 1 :]
            yield "drop", f"the term {_s(term)} dropped", sp.Add(*rest)
            yield "sign", f"the sign of {_s(term)} flipped", sp.Add(*rest) - term
            yield "factor", f"the term {_s(term)} doubled", sp.Add(*rest) + 2 * term
    if isinstance(e, sp.Pow):
        base, power = e.args
        if power == sp.S.Half:
            yield "constant", f"√ dropped from √({_s(base)})", base
        elif power == -sp.S.Half:
            yield "constant", f"1/√ became 1/ in 1/√({_s(base)})", 1 / base
        elif power.is_Number and power != -1:
            yield "constant", f"power {power} became {power + 1}", base ** (power + 1)
        elif power == -1:
            yield "constant", f"1/({_s(base)}) became {_s(base)}", base
        if not power.is_Number:
            yield "swap", f"base and exponent swapped in {_s(e)}", power**base
    if isinstance(e, sp.Rational) and e not in (0, 1, -1):
        yield "constant", f"the constant {e} became {e + 1}", e + 1
    if isinstance(e, sp.exp):
        yield "function", f"exp dropped from exp({_s(e.args[0])})", e.args[0]
    if isinstance(e, sp.Heaviside):
        yield "function", "the step function's side flipped", sp.Heaviside(-e.args[0], *e.args[1:])
    if isinstance(e, MatMul):
        a, b = e.args
        yield "swap", "the matrix product's operands swapped", MatMul(b, a)
        for k, x in enumerate((a, b)):
            other = [a, b]
            if isinstance(x, T):
                other[k] = x.args[0]
                yield "transpose", f"the transpose of {_s(x.args[0])} removed", MatMul(*other)
            else:
                other[k] = T(x)
                yield "transpose", f"{_s(x)} transposed", MatMul(*other)
    if isinstance(e, Contract):
        a, b = e.args
        yield "swap", "the contraction's operands swapped", Contract(b, a)
    if isinstance(e, T):
        yield "transpose", f"the transpose of {_s(e.args[0])} removed", e.args[0]
    if isinstance(e, RowMean):
        yield "reduce", "the row mean taken as a row sum", RowSum(e.args[0])
    if isinstance(e, RowSum):
        yield "reduce", "the row sum taken as a row mean", RowMean(e.args[0])
        yield "reduce", "the row sum taken as a row max", RowMax(e.args[0])
    if isinstance(e, ColSum):
        rows = shape_of(e.args[0])[0]
        yield "reduce", "the column sum divided by the row count", ColSum(e.args[0]) / rows
    if isinstance(e, CausalMask):
        yield "mask", "the causal mask removed", e.args[0]
        yield "mask", "the causal mask shifted (the diagonal masked too)", ShiftedCausalMask(e.args[0], -1)
        yield "mask", "the causal mask shifted (one future key kept)", ShiftedCausalMask(e.args[0], 1)
    if isinstance(e, Array):
        for other in arrays_like(e):
            yield "array", f"{other.name} read in place of {e.name}", other


def _rebuild(e, path: tuple, new):
    if not path:
        return new
    k, rest = path[0], path[1:]
    args = list(e.args)
    args[k] = _rebuild(args[k], rest, new)
    return e.func(*args)


def _walk(e, path=()):
    yield path, e
    if isinstance(e, Array) or not e.args:
        return
    for k, a in enumerate(e.args):
        yield from _walk(a, path + (k,))


def expression_mutants(expr, arrays_like: Callable) -> list[tuple[str, str, sp.Expr]]:
    """Every edit of every subexpression of `expr`, plus the whole value's sign and factor."""
    expr = sp.sympify(expr)
    out = [("sign", "the whole value negated", -expr), ("factor", "the whole value doubled", 2 * expr)]
    seen = {expr}
    for path, sub in _walk(expr):
        for kind, what, new in _edits(sub, arrays_like):
            try:
                mutated = _rebuild(expr, path, new)
            except (TypeError, ValueError, ArrayError):
                continue
            if mutated in seen:
                continue
            seen.add(mutated)
            out.append((kind, what, mutated))
    return out


def _same_shape(available: list) -> Callable:
    def like(a: Array):
        return [b for b in available if b != a and b.shape == a.shape and b.integer_valued == a.integer_valued]

    return like


def op_mutants(op: Op) -> list[PrintedMutant]:
    """Every mutant of every printed assignment of an op that still type-checks."""
    out = []
    for scope, start in (
        ("forward", list(op.inputs) + list(op.params)),
        ("backward", list(op.saved) + list(op.upstream)),
    ):
        available = list(dict.fromkeys(start))
        for pos, a in enumerate(getattr(op, scope)):
            for n, (kind, what, new) in enumerate(expression_mutants(a.expr, _same_shape(available))):
                try:
                    Assign(a.target, new, a.when)
                    shape_of(new)
                except (ArrayError, TypeError, ValueError):
                    continue
                out.append(
                    PrintedMutant(
                        f"{scope}.{pos}.{a.target.name}.{kind}{n}", f"{a.target.name} = …: {what}", scope, pos, new
                    )
                )
            if a.target not in available:
                available.append(a.target)
    return out


def sample_for(op: Op, obligation) -> list:
    """The mutants a generated claim carries: the op's classic mistakes that bear on it, and
    the whole-value sign and factor edits of the line that computes its target (never
    equivalent unless the value is 0)."""
    out = []
    for name, (mistake, scope, target, expr) in op.mistakes.items():
        lines = getattr(op, scope)
        pos = max(k for k, a in enumerate(lines) if a.target.name == target)
        if _on_path(op, obligation, scope, pos):
            out.append(PrintedMutant(name, mistake, scope, pos, expr))
    scope = "forward" if obligation.kind == "forward" else "backward"
    lines = getattr(op, scope)
    pos = max(k for k, a in enumerate(lines) if a.target == obligation.target)
    a = lines[pos]
    out.append(PrintedMutant("auto-sign", f"{a.target.name}: the whole value negated", scope, pos, -a.expr))
    out.append(PrintedMutant("auto-factor", f"{a.target.name}: the whole value doubled", scope, pos, 2 * a.expr))
    if obligation.kind == "backward":
        out += kink_mutants(op, obligation)
    return out


def kink_mutants(op: Op, obligation) -> list[PrintedMutant]:
    """A step's value at its jump changed, in each backward line on the obligation's path where
    that value is read (the step's cofactor is not 0 at the jump): the derivative's midpoint
    H(u) = (1 + sign u)/2 taken as H(u, 0) where the specification has no kink at u (what
    reverse mode prints if its step is SymPy's H(u, 0): 0 at x = 0 in softplus' backward, whose
    derivative there is ½; at a kink of the specification H(u, 0) is a subgradient too), and a
    printed subgradient H(u, 0) or H(u, 1) taken as H(u, 4), outside the subdifferential [0, 1]
    of max(0, ·) even where a midpoint ½ multiplies it (max(x, 0)·H(x, 0)'s derivative
    H(x)·H(x, 0): ½·2 = 1 lay inside). Only the points on the kink (`proof/kinks.py`) can refute them."""
    from ..language.arrays import HalfStep
    from .kinks import same_up_to_indices, subjects
    from .obligations import cache_values, spec_scope

    spec = spec_scope(op)
    kinked = [u for o in op.outputs if o in spec for u, _, _ in subjects(spec[o])]
    cache = cache_values(op)
    out = []
    on = path(op, obligation)
    for pos, a in enumerate(op.backward):
        if ("backward", pos) not in on:
            continue
        expr = sp.sympify(a.expr)
        for step in sorted(expr.atoms(sp.Heaviside, HalfStep), key=sp.default_sort_key):
            u = step.args[0]
            if isinstance(step, HalfStep):
                if any(same_up_to_indices(sp.sympify(u).xreplace(cache), k) for k in kinked):
                    continue  # the specification's own kink: H(u, 0) is a subgradient too
                new, what = sp.Heaviside(u, 0), f"the step H({_s(u)}) with H(0) = ½ printed as H({_s(u)}, 0)"
            elif len(step.args) == 2 and step.args[1] in (0, 1):
                new, what = sp.Heaviside(u, 4), f"the step H({_s(u)}, {step.args[1]}) given the value 4 at 0"
            else:
                continue
            s = sp.Dummy("s")
            cofactor = sp.diff(expr.xreplace({step: s}), s)
            if isinstance(u, Array) and (
                cofactor.subs(u, 0) == 0 or _zero_at(_target_cofactor(op, obligation, pos, step, cache), u)
            ):
                continue  # the step's value at 0 is never read (max(0, x)² at 0; two branches whose slopes meet)
            out.append(
                PrintedMutant(
                    f"kink-{pos}-{len(out)}",
                    f"{a.target.name} = …: {what}",
                    "backward",
                    pos,
                    expr.xreplace({step: new}),
                )
            )
    return out


def _target_cofactor(op: Op, obligation, pos: int, step, cache: dict):
    """∂(the obligation's target)/∂(the step in backward line `pos`), every backward line and cached
    array written out: how much the step's value reaches the gradient."""
    s = sp.Dummy("s")
    values: dict = {}
    for k, a in enumerate(op.backward):
        expr = sp.sympify(a.expr)
        if k == pos:
            expr = expr.xreplace({step: s})
        values[a.target] = expr.xreplace(values)
        if a.target == obligation.target:
            break
    target = values.get(obligation.target)
    return None if target is None else sp.diff(target, s).xreplace(cache)


def _zero_at(expr, u) -> bool:
    """expr is 0 at u = 0 (exactly: the value simplified)."""
    if expr is None:
        return False
    try:
        return sp.simplify(sp.sympify(expr).subs(u, 0)) == 0
    except (TypeError, ValueError):
        return False


def path(op: Op, obligation) -> set:
    """The printed lines ((scope, position)) that the obligation's target depends on."""
    from .obligations import arrays_in

    def deps(scope: str, wanted: set) -> tuple[set, set]:
        lines = getattr(op, scope)
        on, need = set(), set(wanted)
        for pos in range(len(lines) - 1, -1, -1):
            a = lines[pos]
            if a.target in need:
                on.add((scope, pos))
                if not _redefines(a):
                    need.discard(a.target)
                need |= arrays_in(a.expr)
        return on, need

    if obligation.kind == "forward":
        on, _ = deps("forward", {obligation.target})
        return on
    on, need = deps("backward", {obligation.target})
    cached = {s for s in op.saved if s in need}
    more, _ = deps("forward", cached)
    return on | more


def _redefines(a: Assign) -> bool:
    from .obligations import arrays_in

    return a.target in arrays_in(a.expr)


def _on_path(op: Op, obligation, scope: str, pos: int) -> bool:
    return (scope, pos) in path(op, obligation)


def _s(e) -> str:
    text = sp.sstr(e)
    return text if len(text) <= 40 else text[:37] + "…"


# ---------------------------------------------------------------------------------------------
# The audit: every mutant of every printed line against the generated claims.


@dataclass
class AuditResult:
    """What became of one mutant: `killed` (a claim's counterexample refutes it), `equivalent`
    (every claim still proved: the edit computes the same function, so it is no wrong edit), or
    `survived` (neither: a gap between the printed code and the proofs)."""

    unit: str  # op / table / step name
    mutant: str
    mistake: str
    outcome: str
    by: str | None = None  # the claim that refuted it
    counterexample: dict | None = None


def audit_op(op: Op, limit: int | None = None, pick=None) -> list[AuditResult]:
    """Run every mutant of `op`'s printed lines (or `limit` of them, evenly spread) against the
    op's generated claims."""
    from .core import prove_index_identity
    from .obligations import obligations

    obs = obligations(op)
    mutants = op_mutants(op)
    if limit is not None and len(mutants) > limit:
        step = len(mutants) / limit
        mutants = [mutants[int(k * step)] for k in range(limit)]
    out = []
    for m in mutants:
        try:
            mop = m.apply(op)
        except (ArrayError, TypeError, ValueError) as exc:  # rejected at build time: caught
            out.append(AuditResult(op.name, m.name, m.mistake, "killed", f"build: {exc}"))
            continue
        on = [ob for ob in obs if (m.scope, m.position) in path(op, ob)]
        result = None
        for ob in on:
            cx = ob.refute(mop)
            if cx is not None:
                result = AuditResult(op.name, m.name, m.mistake, "killed", ob.id, cx)
                break
        if result is None:
            proved = all(
                prove_index_identity(ob.printed(mop), ob.required(), ob.setting).status == "proved-general" for ob in on
            )
            result = AuditResult(op.name, m.name, m.mistake, "equivalent" if proved and on else "survived")
        out.append(result)
    return out

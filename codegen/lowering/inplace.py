"""The in-place memory plan: `target = expr` as a sequence of in-place updates of one array.

NumPy and PyTorch allocate a new array for every operation of an expression. Where the value
of a sum or product can be accumulated into one fresh array instead, the plan says how: the
first operand that is itself computed (not an input, not a view) and has the result's full
stored shape becomes `target`, and the other operands are applied with `+=`, `-=`, `*=`, `/=`, an
elementwise function written into it (`np.exp(t, out=t)`), or a division into it. One
allocation instead of one per operation; the value is the same expression, evaluated in the
same order of operations.

`plan(expr, facts)` is a pure function of the expression and of what the lowering knows about
the statement (`Facts`): the stored shape of each subexpression, which subexpressions are the
statement's temporaries, which arrays it reads for the last time. It returns `Update`s, which
the lowering prints (codegen/lowering/statements.py), or None where nothing is gained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp

from derivations.language.arrays import Array

from ..printers.code import gates_first, powers_spread, reciprocal_power, split_sign, square_over

__all__ = ["Update", "Facts", "plan", "reads", "fuse_multiply_add", "scale_first", "VIEWS"]

VIEWS = ("T", "Gather", "Take", "CausalMask", "OneHot")  # nodes whose value may be a view


@dataclass(frozen=True)
class Update:
    """One step of the plan of `target = expr`:

    "="            target = value        (fresh: value is computed, never just a name)
    "+=" "-=" "*=" "/="   target op= value
    "call"         target = f(target), written into target (value: f's name)
    "divide-into"  target = value / target, written into target
    "subtract-from" target = value − target, written into target ((−t) + b is b − t exactly)
    "scale"        target = c·u, a new array (value: (c, u); u is named once: it is read again)
    "muladd"       target = b + c·target·a, written into target (value: (c, a, b); a may
                   be None: b + c·target) — only from `fuse_multiply_add`
    """

    op: str
    value: object
    fresh: bool = False


@dataclass(frozen=True)
class Facts:
    """What the plan may assume about the statement `whole` it is part of."""

    full: Callable  # stored shape of a subexpression (None: unknown, a scalar)
    repeated: frozenset  # the statement's temporaries still to be named (read again)
    computed_once: frozenset  # every temporary of the statement (each computed once)
    dead: frozenset  # arrays read here for the last time, new arrays computed above
    whole: object  # the statement's whole expression
    scalar: Callable  # no array inside (the printer's notion: index grids are arrays)
    out_funcs: dict  # elementwise functions the backend applies in place


def reads(tree, a, computed_once) -> int:
    """How many times the statement's code reads `a` in `tree`: each repeated subtree (a
    temporary, computed once) counted once."""
    seen: set = set()

    def count(e) -> int:
        if e == a:
            return 1
        if e in computed_once:
            if e in seen:
                return 0
            seen.add(e)
        return sum(count(x) for x in e.args)

    return count(sp.sympify(tree))


def scale_first(pick, scale, scalar: Callable) -> bool:
    """Whether c·u^k is computed as (c·u)·u·…: u^k (k = 2…4) of an array u, and a scalar c ≠ 1
    (a number or an option). No intermediate then leaves the range where c·u^k is in it: for
    |c| < 1, u^k = ∞ is never formed ((x − z)²/2 at 2e19 in float32, a z-loss's α·(log Z)²);
    for |c| > 1, u^k = 0 is never formed (c·u is larger than u, and c·u·u is the result); and
    c·u overflows only where c·u^k does too, at |u| ≥ 1 (below 1 it would take |c| > 3e38)."""
    return (
        pick.is_Pow
        and pick.exp.is_Integer
        and 2 <= pick.exp <= 4
        and not scalar(pick.base)
        and scalar(scale)
        and scale != 1
        and scale != 0
    )


def plan(expr, facts: Facts) -> list[Update] | None:
    """The in-place updates computing `expr` into one fresh array (None: nothing to gain)."""
    full, scalar = facts.full, facts.scalar
    want = full(expr)
    if want is None or isinstance(expr, (Array, sp.Symbol)):  # a name: nothing to compute
        return None
    out: list[Update] = []

    def computed(e) -> bool:
        """A new array of the result's full shape (never an input, a view or a temporary
        that is read again)."""
        return (
            not (scalar(e) or isinstance(e, (Array, sp.Symbol)) or e in facts.repeated or type(e).__name__ in VIEWS)
            and full(e) == want
        )

    def taken_over(pick, other) -> bool:
        """`target = pick ∘ other` on a temporary `pick` that this statement alone reads,
        in one in-place operation: the other operand (which may read the temporary, as
        softmax's row sum does) is evaluated before the write, so the temporary's array can
        become the target's. Not with a view operand (it would overlap the write)."""
        own = pick in facts.repeated or (isinstance(pick, Array) and pick in facts.dead)
        if not (own and full(pick) == want and not scalar(other)):
            return False
        # every read of `pick` in the whole statement is in this one operation
        if reads(facts.whole, pick, facts.computed_once) != reads(
            sp.Add(pick, other, evaluate=False), pick, facts.computed_once
        ):
            return False
        return not any(type(a).__name__ in VIEWS for a in sp.preorder_traversal(other))

    def add(e) -> bool:
        terms = list(e.as_ordered_terms())
        fresh = [t for t in terms if computed(split_sign(t)[1])]
        pick = next((t for t in fresh if not split_sign(t)[0]), None) or next(iter(fresh), None)
        if pick is None and len(terms) == 2:
            for a, b in (terms, terms[::-1]):
                if not split_sign(a)[0] and taken_over(a, split_sign(b)[1]):
                    out.append(Update("=", a))
                    neg, mag = split_sign(b)
                    out.append(Update("-=" if neg else "+=", mag))
                    return True
        if pick is None:
            return False
        neg, mag = split_sign(pick)
        build(mag)
        rest = [t for t in terms if t is not pick]
        if neg and rest and not split_sign(rest[0])[0]:
            out.append(Update("subtract-from", rest.pop(0)))  # −a + b …: b − a in one pass (exact)
        elif neg:  # −a − b …: a, negated in place
            out.append(Update("call", "negative"))
        for t in rest:
            neg, mag = split_sign(t)
            out.append(Update("-=" if neg else "+=", mag))
        return True

    def mul(e) -> bool:
        coeff, rest = e.as_coeff_Mul()
        factors = [
            f if scalar(f) else reciprocal_power(f) for f in (rest.as_ordered_factors() if rest.is_Mul else [rest])
        ]
        factors = square_over(factors, lambda f: f in facts.repeated or scalar(f))  # u²/g as u·(u/g)
        factors = powers_spread(factors, lambda f: f in facts.repeated or scalar(f))  # x²σ as x·σ·x
        if any(f.is_Pow and f.base.is_Pow and f.base.exp == -1 for f in factors):
            # (1/g)^k: printed whole, left to right (u·(1/g)·(1/g): u/g first); started in place
            # from (1/g)·(1/g) it would underflow where u/g² is a normal number
            return False
        numer = [f for f in factors if not (f.is_Pow and f.exp.is_Number and f.exp < 0)]
        # an integer power of an array below as one division per factor (t /= g; t /= g: g² is
        # never formed, which overflows where t/g² is in range)
        denom = [
            b
            for f in factors
            if f not in numer
            for b in (
                [f.base] * int(-f.exp)
                if f.exp.is_Integer and -8 <= f.exp <= -2 and not scalar(f.base)
                else [f.base if f.exp == -1 else sp.Pow(f.base, -f.exp)]
            )
        ]
        pick = next((f for f in numer if computed(f)), None)
        arrays = [f for f in numer + denom if not scalar(f)]
        if pick is None and coeff == 1 and len(factors) == 2 and len(arrays) == 2:
            for own, other in (arrays, arrays[::-1]):  # a·b: either may be taken over
                if own in numer and taken_over(own, other):
                    out.append(Update("=", own))
                    out.append(Update("*=" if other in numer else "/=", other))
                    return True
        dpick = next((f for f in denom if computed(f)), None)
        if pick is None and dpick is not None and sum(not scalar(f) for f in numer) <= 1:
            # a / (computed d): d in place, then target = a / target (one new array)
            build(dpick)
            for k, f in enumerate(denom):
                if k != denom.index(dpick) and not scalar(f):  # a factor may repeat: skip one
                    out.append(Update("*=", f))
            s = coeff * sp.Mul(*[f for f in numer if scalar(f)]) / sp.Mul(*[f for f in denom if scalar(f)])
            a = next((f for f in numer if not scalar(f)), None)
            if s != 1 and a is not None:  # fold the scalar into the denominator
                out.append(Update("*=", 1 / s))
            out.append(Update("divide-into", a if a is not None else s))
            return True
        if pick is None:
            return False
        s_num = coeff * sp.Mul(*[f for f in numer if scalar(f)])
        s_den = sp.Mul(*[f for f in denom if scalar(f)])
        shrink = s_num / s_den
        if scale_first(pick, shrink, scalar):
            # c·u^k with |c| < 1: (c·u)·u…, the scale applied to the first u, so that u^k is
            # never formed where c·u^k is in range ((x − z)²/2 at 2e19 in float32)
            out.append(Update("scale", (shrink, pick.base)))
            out.extend(Update("*=", pick.base) for _ in range(int(pick.exp) - 1))
            s_num = s_den = sp.Integer(1)
        else:
            build(pick)
        if s_num != 1:  # the scalar factors: one pass
            out.append(Update("*=", s_num / s_den))
        elif s_den != 1:
            out.append(Update("/=", s_den))
        rest = [f for k, f in enumerate(numer) if k != numer.index(pick) and not scalar(f)]  # x·σ·x: one x
        for f in gates_first(rest):
            out.append(Update("*=", f))
        for f in denom:
            if not scalar(f):
                out.append(Update("/=", f))
        return True

    def build(e) -> None:
        if isinstance(e, sp.Add) and add(e):
            return
        if isinstance(e, sp.Mul) and mul(e):
            return
        if e.is_Pow and e.exp == sp.S.Half and computed(e.base):  # √ in place
            build(e.base)
            out.append(Update("call", "sqrt"))
            return
        if type(e) in facts.out_funcs and len(e.args) == 1 and computed(e.args[0]):
            build(e.args[0])
            out.append(Update("call", facts.out_funcs[type(e)]))
            return
        out.append(Update("=", e, fresh=True))  # the start: a new array

    build(expr)
    return out


def fuse_multiply_add(updates: list[Update], scalar: Callable) -> list[Update]:
    """Each run `t *= c` (a scalar), `t *= a` (an array), `t += b` of the plan as one
    Update("muladd", (c, a, b)): t = b + c·t·a in one pass over t (PyTorch's addcmul/add with
    `out=t`) instead of one pass for each: ((c·t)·a) + b, the last step possibly one fused
    multiply-add (one rounding where there were two). A negation before the `+=` (b − t·a, the
    cancelling form of LayerNorm's backward) is not folded: there the plan's own order, the same
    as NumPy's, is kept."""
    out: list[Update] = []
    k = 0
    while k < len(updates):
        c, a, j = sp.Integer(1), None, k
        if j < len(updates) and updates[j].op == "*=" and scalar(updates[j].value):
            c = updates[j].value  # (a division t /= d stays as it is: t·(1/d) rounds apart)
            j += 1
        if j < len(updates) and updates[j].op == "*=" and not scalar(updates[j].value):
            a = updates[j].value
            j += 1
        folded = j - k
        b = updates[j].value if j < len(updates) and updates[j].op == "+=" else None
        scaled = isinstance(b, sp.Mul) and b.as_coeff_Mul()[0] != 1  # printed as one add_(b, alpha) already
        if k > 0 and folded and b is not None and not scalar(b) and not scaled:
            out.append(Update("muladd", (c, a, updates[j].value)))
            k = j + 1
            continue
        out.append(updates[k])
        k += 1
    return out

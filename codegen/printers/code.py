"""Printed text with its precedence, the sign rules every printer shares, and the import line
of each module printed text may call."""

from __future__ import annotations

import sympy as sp

__all__ = [
    "Code",
    "ADD",
    "MUL",
    "UNARY",
    "POW",
    "ATOM",
    "MODULE_IMPORTS",
    "show",
    "split_sign",
    "positive_first",
    "reciprocal_power",
    "max_beside_its_argument",
    "square_over",
]

# the import line of each module that printed text may call (a printer's `modules`)
MODULE_IMPORTS = {
    "math": "import math",
    "np": "import numpy as np",
    "_special": "from . import _special",
    "_support": "from . import _support",
    "scipy.special": "import scipy.special",
    "torch": "import torch",
}

# Python precedence levels (higher binds tighter).
ADD, MUL, UNARY, POW, ATOM = 10, 20, 30, 40, 100


class Code(str):
    """Printed text that remembers the precedence of its outermost operation."""

    prec: int

    def __new__(cls, text: str, prec: int):
        obj = super().__new__(cls, text)
        obj.prec = prec
        return obj


def show(expr) -> str:
    """SymPy's text for an expression, for error messages (never fails)."""
    try:
        return sp.sstr(expr)
    except Exception:  # noqa: BLE001 - sstr has no rule for some custom nodes (MatMul)
        return sp.srepr(expr)


def split_sign(expr):
    """(negative, |expr|) for a term whose numeric coefficient is negative."""
    if expr.is_Number:
        return (True, -expr) if expr < 0 else (False, expr)
    if expr.is_Mul:
        c, rest = expr.as_coeff_Mul()
        if c.is_Number and c < 0:
            if c == -1:
                return True, rest
            return True, sp.Mul(-c, rest, evaluate=False)
    return False, expr


def positive_first(terms: list) -> list:
    """A positive term first reads better: x - max(x) rather than -max(x) + x."""
    for t, term in enumerate(terms):
        if not split_sign(term)[0]:
            return [term] + terms[:t] + terms[t + 1 :]
    return terms


def max_beside_its_argument(terms: list, definitions: dict | None = None) -> list[list]:
    """A sum's terms in groups: each c·max(v) (a row max, or an elementwise max; an array a line
    above assigned one) with the term −c·v it cancels, the pairs first, then one group of each
    other term. Printed (−x − max(−x)) + (z − max z) − log …, each pair in parentheses, so that
    the large values cancel before the small ones are added (a log-softmin at 1e30 gave 0 where
    −log 3 is exact; KL(softmax x ‖ softmax z) 3.4× off at 1e20). Exact algebra: only the order."""
    from derivations.language.arrays import Array, RowMax

    definitions = definitions or {}

    def max_node(term):
        c, node = term.as_coeff_Mul()
        node = definitions.get(node, node) if isinstance(node, Array) else node
        return (c, node) if isinstance(node, (RowMax, sp.Max)) else None

    def cancels(other, c, node) -> bool:
        args = [node.args[0]] if isinstance(node, RowMax) else list(node.args)
        return any(sp.expand(other + c * a) == 0 for a in args)

    pairs, rest = [], list(terms)
    for term in terms:
        found = max_node(term)
        if term not in rest or found is None:
            continue
        partner = next((o for o in rest if o is not term and cancels(o, *found)), None)
        if partner is not None:
            pairs.append(positive_first([partner, term]))
            rest = [o for o in rest if o is not term and o is not partner]
    return pairs + [[t] for t in rest]


def reciprocal_power(f):
    """1/g^k (k = 2..8, g computed: neither a number nor one array) as (1/g)^k, a factor of the
    numerator (1/g is formed once, a temporary of its own): g squared or cubed
    overflows (g ~ 1e20 in float32: a hypot's |x|) where the quotient underflows to its correctly
    rounded 0. Any other factor as it is."""
    if f.is_Pow and f.exp.is_Integer and -8 <= f.exp < -1 and not f.base.is_number:
        return sp.Pow(sp.Pow(f.base, -1, evaluate=False), -f.exp, evaluate=False)
    return f


def powers_spread(factors: list, scalar) -> list:
    """A product's factors with an array power u^m (m ≥ 2) beside other array factors as u, the
    others, then u^{m−1}: x²σ(x) is printed x·σ(x)·x, left to right, so that x² = ∞ (|x| > 1.8e19
    in float32) never meets σ(x) = 0 (∞·0 = NaN where the product is 0), nor x² = 0 (|x| < 1e-23)
    a large factor. Every intermediate lies between the factors' partial products."""
    arrays = [f for f in factors if not scalar(f)]
    power = next(
        (
            f
            for f in arrays
            if f.is_Pow
            and f.exp.is_Integer
            and f.exp >= 2
            and not f.base.is_number
            and not (f.base.is_Pow and f.base.exp.is_negative)  # (1/g)^k: interleaved by the printer
        ),
        None,
    )
    if power is None or not any(f is not power and f.as_base_exp()[0] != power.base for f in arrays):
        return factors
    u, m = power.base, int(power.exp)
    rest = u if m == 2 else sp.Pow(u, m - 1, evaluate=False)
    return [u if f is power else f for f in factors] + [rest]


def gates_first(factors: list) -> list:
    """The factors of a product to multiply in, the gates first: σ(u), Φ(u), the Gaussian and
    e^{u} with u ≤ 0 lie in [0, 1], so a partial product never grows by them, and one that is 0
    (σ(−1e20)) is 0 before two large factors meet: x·(xσ(−x) + 2)·σ(x) at x = −1e20 in float32 is
    printed (xσ(−x) + 2)·σ(x)·x, not x² = ∞ times σ(x) = 0. A gate is tiny only where e^{u} is,
    where no polynomial factor brings the product back into range."""
    from derivations.language.arrays import Gaussian, NormalCDF, Sigmoid

    def gate(f):
        return isinstance(f, (Sigmoid, NormalCDF, Gaussian)) or (isinstance(f, sp.exp) and f.args[0].is_nonpositive)

    return [f for f in factors if gate(f)] + [f for f in factors if not gate(f)]


def square_over(factors: list, scalar) -> list:
    """A product's factors with u^m/g^k (u and g array expressions, m ≥ 2 or k ≥ 2: a
    rationalised root's v²/(hypot(v, s) + s), Geman–McClure's x²/hypot(x, 2)²) as (u/g)^q·u^{m−q}
    /g^{k−q}, q = min(m, k): the quotients first, then the products. u² overflows (|u| > 1.8e19 in
    float32) where u/g is about 1 and the product is finite; (u/g)^q is never out of range where
    u^m/g^k is in it and its own factors are. The quotient is an unevaluated product (printed in
    parentheses); any other product as it is."""
    powers = [f for f in factors if f.is_Pow and f.exp.is_Integer and f.exp >= 2 and not f.base.is_number]
    powers = [f for f in powers if not scalar(f)]
    over = [f for f in factors if f.is_Pow and f.exp.is_Integer and f.exp < 0 and not scalar(f)]
    if len(powers) != 1 or len(over) != 1:
        return factors
    (power,), (inverse,) = powers, over
    u, m, g, k = power.base, int(power.exp), inverse.base, -int(inverse.exp)
    q = min(m, k)
    quotient = sp.Mul(u, sp.Pow(g, -1), evaluate=False)
    out = []
    for f in factors:
        if f is power:
            if m > q:
                out.append(u if m - q == 1 else sp.Pow(u, m - q, evaluate=False))
            out.append(sp.Pow(quotient, q, evaluate=False) if q > 1 else quotient)
        elif f is not inverse:
            out.append(f)
        elif k > q:
            out.append(sp.Pow(g, q - k))
    return out

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


def reciprocal_power(f):
    """1/g^k (k = 2..4, g computed: neither a number nor one array) as (1/g)^k, a factor of the
    numerator (1/g is formed once, a temporary of its own): g squared or cubed
    overflows (g ~ 1e20 in float32: a hypot's |x|) where the quotient underflows to its correctly
    rounded 0. Any other factor as it is."""
    if f.is_Pow and f.exp.is_Integer and -4 <= f.exp < -1 and not (f.base.is_number or f.base.is_Symbol):
        return sp.Pow(sp.Pow(f.base, -1, evaluate=False), -f.exp, evaluate=False)
    return f


def square_over(factors: list, scalar) -> list:
    """A product's factors with u²/g (u and g array expressions: a rationalised root's
    v²/(hypot(v, s) + s)) as u·(u/g): the quotient first, then the product.
    u² overflows (|u| > 1.8e19 in float32) or underflows where u/g is about 1 and the product is
    finite; u·(u/g) is never out of range where (u·u)/g is in it, with as many roundings. The
    quotient is an unevaluated product, printed in parentheses; any other product as it is."""
    squares = [f for f in factors if f.is_Pow and f.exp == 2 and not f.base.is_number and not scalar(f)]
    over = [f for f in factors if f.is_Pow and f.exp == -1 and not scalar(f)]
    if len(squares) != 1 or len(over) != 1:
        return factors
    (square,), (inverse,) = squares, over
    u = square.base
    out = []
    for f in factors:
        if f is square:
            out.append(u)
        elif f is inverse:
            out.append(sp.Mul(u, inverse, evaluate=False))
        else:
            out.append(f)
    return out

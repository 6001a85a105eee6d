"""Printed text with its precedence, the sign rules every printer shares, and the import line
of each module printed text may call."""

from __future__ import annotations

import sympy as sp

__all__ = ["Code", "ADD", "MUL", "UNARY", "POW", "ATOM", "MODULE_IMPORTS", "show", "split_sign", "positive_first"]

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

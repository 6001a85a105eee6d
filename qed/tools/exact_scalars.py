"""The exact scalars that the judges' shims of NumPy and PyTorch share: a value of the printed
code as an exact number (`exact_value`), a printed comparison as 0/1 or a Heaviside step
(`comparison`), a strict namespace (`Namespace`), and the error of a construct no shim models."""

from __future__ import annotations

import types

import numpy as _np
import sympy as sp

__all__ = ["ShimError", "exact_value", "comparison", "Namespace"]


class ShimError(RuntimeError):
    """The printed text used something the shim does not model (or modelled inexactly)."""


def exact_value(v):
    """A kernel value as an exact SymPy object (booleans 0/1); a float is an error. An exact value
    of a judge of its own (`__qed_function__`) is itself."""
    if getattr(type(v), "__qed_function__", None) is not None:
        return v
    if isinstance(v, (bool, _np.bool_)):
        return sp.Integer(int(v))
    if isinstance(v, (float, _np.floating)):
        raise ShimError(f"an inexact float {v!r} reached an array entry")
    if isinstance(v, (int, _np.integer)):
        return sp.Integer(int(v))
    if isinstance(v, sp.Basic):
        if v.atoms(sp.Float):
            raise ShimError(f"an inexact Float in {v}")
        return v
    raise ShimError(f"an array entry of type {type(v).__name__}: {v!r}")


def comparison(a, b, how):
    """The printed comparison `a <how> b`, cast to the float dtype: 1 where it holds, else 0. An
    exact value of a judge of its own (`__qed_function__`: the field judge's) is compared by its
    own order; a SymPy one that its assumptions cannot decide is a Heaviside step."""
    if any(getattr(type(v), "__qed_function__", None) is not None for v in (a, b)):
        holds = {"gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b}[how]
        return sp.Integer(1 if bool(holds) else 0)
    d = sp.sympify(a) - sp.sympify(b)
    if d.is_number and d.is_comparable:
        holds = {"gt": d > 0, "ge": d >= 0, "lt": d < 0, "le": d <= 0, "eq": d == 0, "ne": d != 0}[how]
        return sp.Integer(1 if bool(holds) else 0)
    if how in ("eq", "ne") and d.is_zero is not None:  # decided by the assumptions: √(x² + b) + |x| ≠ 0, b > 0
        return sp.Integer(1 if d.is_zero == (how == "eq") else 0)
    if how == "gt":
        return sp.Heaviside(d, 0)
    if how == "ge":
        return sp.Heaviside(d, 1)
    if how == "lt":
        return sp.Heaviside(-d, 0)
    if how == "le":
        return sp.Heaviside(-d, 1)
    raise ShimError(f"an equality test of symbolic entries: {a} vs {b}")


class Namespace(types.SimpleNamespace):
    """A strict namespace: an attribute it does not have names the shim's gap."""

    def __getattr__(self, name):
        raise ShimError(
            f"the printed text uses {self.__dict__.get('_label', '?')}.{name}, which "
            "the translation-validation shim does not model"
        )

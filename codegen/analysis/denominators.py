"""What must not be 0: the denominators of an op's printed formulas, sorted into three kinds.

Every denominator (a negative power's base, a log's argument, a mean's row length) is, from the
expressions alone:

* 0 when a size is 0 (1/√d_k; a row sum over n keys; a mean over n): that size must be ≥ 1,
  checked from the shapes (`_v.nonzero_size`), unless every output is empty (then the kernel
  computes nothing);
* provably positive (a sum of exps; √(σ² + ε) with ε > 0, the option's domain): nothing;
* neither (Σ mask, a count of the inputs): it is computed from the inputs and checked at run
  time (`_v.nonzero`).
"""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array, MatMul, shape_of
from derivations.language.denominators import SUMS as _SUMS
from derivations.language.denominators import classified
from derivations.language.ops import Op

from ..names import CodegenError
from .storage import size_symbols

__all__ = ["denominator_guards"]


def _zero_when(den, options: set) -> set:
    """The sizes s such that `den` is 0 when s is 0: a size itself, a sum over an axis of length
    s, a product with such a factor, a sum of terms that all are."""
    den = sp.sympify(den)
    if isinstance(den, Array):
        return set()
    if isinstance(den, sp.Symbol):
        return {den} if den not in options else set()
    if type(den) in _SUMS:
        return size_symbols(shape_of(den.args[0])[_SUMS[type(den)]], options)
    if isinstance(den, MatMul):
        return size_symbols(shape_of(den.args[0])[1], options)
    if isinstance(den, sp.Mul):
        return set().union(*(_zero_when(a, options) for a in den.args))
    if isinstance(den, sp.Pow) and den.exp.is_positive:
        return _zero_when(den.base, options)
    if isinstance(den, sp.Add):
        return set.intersection(*(_zero_when(a, options) for a in den.args))
    return set()


def denominator_guards(op: Op, options: set, where: str):
    """(zero_sizes, data_denominators): [(size, why)], [(expanded denominator, why)], from every
    forward and backward line with every flag on (the one classification of
    derivations/language/denominators.py, which the proofs' preconditions read too)."""
    zero: dict = {}
    data: dict = {}
    for asg, den, shown, full, kind in classified(op):
        for s in sorted(_zero_when(full, options), key=lambda s: s.name):
            zero.setdefault(s, shown)
        if kind == "other":
            raise CodegenError(
                f"{where}: the denominator {sp.sstr(den)} of line "
                f"{asg.target.name} is not provably nonzero and is not a "
                "function of the inputs alone (it cannot be checked before "
                "the forward runs)"
            )
        if kind == "inputs":
            data.setdefault(sp.sstr(full), (full, shown))
    return sorted(zero.items(), key=lambda kv: kv[0].name), list(data.values())

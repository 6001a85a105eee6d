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

from derivations.language.arrays import (DOCUMENT_NODES, Array, CausalMask, ColSum, Contract, MatMul,
                                         RowMax, RowMean, RowSum, shape_of)
from derivations.language.ops import Op

from ..names import CodegenError
from .storage import arrays_in, size_symbols

__all__ = ["denominator_guards"]

_SUMS = {RowSum: 1, RowMean: 1, RowMax: 1, ColSum: 0, Contract: 0}


def _denominators(expr) -> list:
    """The denominators of `expr`: bases of negative powers, log arguments, each mean's count;
    as (denominator, the node that divides by it or takes its log, as text)."""
    out = []
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, sp.Pow) and node.exp.is_negative:
            out.append((node.base, sp.sstr(node)))
        elif isinstance(node, sp.log):
            out.append((node.args[0], sp.sstr(node)))
        elif isinstance(node, RowMean):                 # RowMean(A) = RowSum(A)/cols
            out.append((shape_of(node.args[0])[1], sp.sstr(node)))
    return out


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


def _sign(expr, positive_symbols: set, memo: dict) -> str | None:
    """"+" if `expr` is provably > 0, "0+" if provably ≥ 0, else None (for every value of the
    inputs, with every size ≥ 1 and every option in its domain). Intermediates are expanded."""
    if expr in memo:
        return memo[expr]
    e, out = expr, None
    if not e.free_symbols:                                 # 2, π, √2: SymPy decides
        out = "+" if e.is_positive else "0+" if e.is_zero else None
    elif isinstance(e, Array):
        out = None                                         # an input's values: anything
    elif isinstance(e, sp.Symbol):
        out = "+" if e in positive_symbols else "0+" if e.is_nonnegative else None
    elif isinstance(e, (sp.exp,)) or isinstance(e, DOCUMENT_NODES):
        out = "+"
    elif isinstance(e, sp.Pow):
        b = _sign(e.base, positive_symbols, memo)
        out = b if b == "+" else "0+" if (b == "0+" and e.exp.is_positive) or \
            (e.exp.is_integer and e.exp.is_even) else None
    elif isinstance(e, (sp.Add, sp.Mul, MatMul, Contract)) or type(e) in _SUMS:
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        if all(x is not None for x in signs):
            strict = all(x == "+" for x in signs) if not isinstance(e, sp.Add) else "+" in signs
            out = "+" if strict else "0+"
    elif isinstance(e, sp.Max):
        signs = [_sign(a, positive_symbols, memo) for a in e.args]
        out = "+" if "+" in signs else "0+" if "0+" in signs else None
    memo[expr] = out
    return out


def _expanded(expr, env: dict, memo: dict):
    """`expr` with every intermediate array replaced by its definition, recursively; a causal
    mask read as its argument (no row is fully masked: key 0 is always seen, attention.causal)."""
    expr = sp.sympify(expr)
    if expr in memo:
        return memo[expr]
    if isinstance(expr, Array):
        out = _expanded(env[expr], env, memo) if expr in env else expr
    elif isinstance(expr, CausalMask):
        out = _expanded(expr.args[0], env, memo)
    elif expr.args:
        out = expr.func(*[_expanded(a, env, memo) for a in expr.args])
    else:
        out = expr
    memo[expr] = out
    return out


def denominator_guards(op: Op, options: set, where: str):
    """(zero_sizes, data_denominators): [(size, why)], [(expanded denominator, why)], from every
    forward and backward line with every flag on."""
    env = op.env(frozenset(o.name for o in op.options))
    positive = {o.symbol for o in op.options if o.symbol is not None
                and o.allowed().is_subset(sp.Interval.open(0, sp.oo))}
    inputs = set(op.inputs) | set(op.params)
    zero: dict = {}
    data: dict = {}
    memo: dict = {}
    signs: dict = {}
    for asg in op.forward + op.backward:
        for den, shown in _denominators(asg.expr):
            full = _expanded(den, env, memo)
            for s in sorted(_zero_when(full, options), key=lambda s: s.name):
                zero.setdefault(s, shown)
            if _sign(full, positive | (size_symbols(full, options)), signs) == "+":
                continue
            if size_symbols(full, options) and not arrays_in(full):
                continue                                   # sizes alone: the size checks
            if not arrays_in(full) <= inputs:
                raise CodegenError(f"{where}: the denominator {sp.sstr(den)} of line "
                                   f"{asg.target.name} is not provably nonzero and is not a "
                                   "function of the inputs alone (it cannot be checked before "
                                   "the forward runs)")
            data.setdefault(sp.sstr(full), (full, shown))
    return sorted(zero.items(), key=lambda kv: kv[0].name), list(data.values())

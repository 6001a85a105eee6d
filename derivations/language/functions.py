"""The one table of scalar functions that the printed code may call, and how each is evaluated.

Every judge of the printed text (the symbolic run of `qed/tools/translation.py`, the exact run
over rationals of `qed/tools/field_judge.py`), the counterexample search and the numerical-edge
check read this table: a function's SymPy meaning, the spellings the NumPy and PyTorch printers
emit for it, and its exact value on each kind of number is written here once.

    name      the table's key ("exp")
    sympy     the exact symbolic meaning: a callable on SymPy objects
    numpy     the spellings a printed NumPy file uses (`np.exp`, `scipy.special.expit`)
    torch     the spellings a printed PyTorch file uses (`torch.exp`, `Tensor.exp_`)
    arity     1 or 2
    mpmath    the mpmath function of the same name (the proofs' 40-digit evaluator, the symbolic
              run's quick rejection), where the row is a SymPy function of one argument
    kind      "algebraic" (exact on rationals where defined), "transcendental" (an
              uninterpreted function of its exact argument in the rational judge), "order"
              (needs a total order: max, |·|, sign, a step)

`apply(name, *args)` evaluates one entry: an argument that is an exact value of a judge of its
own (any object with a `__qed_function__(name, *args)` method) decides; anything else is read as
SymPy. So the shims of the printed libraries are written once and run on either kind of number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

__all__ = ["Function", "FUNCTIONS", "apply", "by_sympy", "spelled", "mpmath_functions"]


@dataclass(frozen=True)
class Function:
    name: str
    sympy: Callable
    numpy: tuple = ()
    torch: tuple = ()
    arity: int = 1
    kind: str = "transcendental"
    mpmath: str = ""


def _sigmoid(u):
    return 1 / (1 + sp.exp(-u))


def _ndtr(u):
    return (1 + sp.erf(u / sp.sqrt(2))) / 2


def _rsqrt(u):
    return 1 / sp.sqrt(u)


def _max(a, b):
    return sp.Max(a, b)


def _min(a, b):
    return sp.Min(a, b)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("exp", sp.exp, ("np.exp", "math.exp"), ("torch.exp", "Tensor.exp", "Tensor.exp_"), mpmath="exp"),
        Function("log", sp.log, ("np.log", "math.log"), ("torch.log", "Tensor.log", "Tensor.log_"), mpmath="log"),
        Function("log1p", log1p, ("np.log1p",), ("torch.log1p", "Tensor.log1p", "Tensor.log1p_"), mpmath="log1p"),
        Function("expm1", expm1, ("np.expm1",), ("torch.expm1", "Tensor.expm1", "Tensor.expm1_"), mpmath="expm1"),
        Function(
            "tanh", sp.tanh, ("np.tanh", "math.tanh"), ("torch.tanh", "Tensor.tanh", "Tensor.tanh_"), mpmath="tanh"
        ),
        Function("sin", sp.sin, ("np.sin", "math.sin"), ("torch.sin", "Tensor.sin", "Tensor.sin_"), mpmath="sin"),
        Function("cos", sp.cos, ("np.cos", "math.cos"), ("torch.cos", "Tensor.cos", "Tensor.cos_"), mpmath="cos"),
        Function(
            "erf", sp.erf, ("scipy.special.erf", "math.erf"), ("torch.erf", "Tensor.erf", "Tensor.erf_"), mpmath="erf"
        ),
        Function("sigmoid", _sigmoid, ("scipy.special.expit",), ("torch.sigmoid", "Tensor.sigmoid", "Tensor.sigmoid_")),
        Function("ndtr", _ndtr, ("scipy.special.ndtr", "_special.ndtr"), ("torch.special.ndtr",)),
        Function(
            "sqrt", sp.sqrt, ("np.sqrt", "math.sqrt"), ("torch.sqrt", "Tensor.sqrt", "Tensor.sqrt_"), kind="algebraic"
        ),
        Function("rsqrt", _rsqrt, (), ("torch.rsqrt", "Tensor.rsqrt", "Tensor.rsqrt_"), kind="algebraic"),
        Function("abs", sp.Abs, ("np.abs",), ("torch.abs", "Tensor.abs", "Tensor.abs_"), kind="order", mpmath="fabs"),
        Function(
            "sign", sp.sign, ("np.sign",), ("torch.sign", "Tensor.sign", "Tensor.sign_"), kind="order", mpmath="sign"
        ),
        Function("maximum", _max, ("np.maximum",), ("torch.maximum", "torch.clamp"), arity=2, kind="order"),
        Function("minimum", _min, ("np.minimum",), ("torch.minimum", "torch.clamp"), arity=2, kind="order"),
    )
}

_BY_SYMPY = {f.sympy: f for f in FUNCTIONS.values() if isinstance(f.sympy, type)}


def by_sympy(func) -> Function | None:
    """The table's row of a SymPy function class (sp.exp → "exp"), or None."""
    return _BY_SYMPY.get(func)


def spelled(backend: str) -> dict[str, Function]:
    """Every spelling of `backend` ("numpy" or "torch") and its row."""
    return {s: f for f in FUNCTIONS.values() for s in getattr(f, backend)}


def apply(name: str, *args):
    """`name` of `args`, exactly: a judge's own exact value decides (`__qed_function__`); any
    other argument is read as SymPy."""
    for a in args:
        hook = getattr(type(a), "__qed_function__", None)
        if hook is not None:
            return hook(a, name, *args)
    f = FUNCTIONS[name]
    return f.sympy(*(sp.sympify(a) for a in args))


def mpmath_functions() -> dict:
    """SymPy function class -> its mpmath function, for every row that names one."""
    import mpmath

    return {f.sympy: getattr(mpmath, f.mpmath) for f in FUNCTIONS.values() if f.mpmath and isinstance(f.sympy, type)}

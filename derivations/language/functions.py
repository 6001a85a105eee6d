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
    mpmath    the mpmath function of the same name, where the row is a SymPy function of one
              argument
    value     its value at mpmath numbers, at the working precision and for every magnitude
              (e^x for |x| ≥ 1000 as 2^k·e^r; sech² without 1 − tanh² rounding to 0): the one
              high-precision evaluation that the counterexample search and spot-checks
              (derivations/proof/numeric.py), the symbolic run's quick rejection and the
              numerical-edge check (qed/tools/edges.py) all call, through `mp_value`
    slope     its derivative at x, given x and the value there (`mp_slope`), for the
              numerical-edge check's reverse mode; tests/test_functions_table.py holds it to
              `sp.diff` of the row's meaning
    kind      "algebraic" (exact on rationals where defined), "transcendental" (an
              uninterpreted function of its exact argument in the rational judge), "order"
              (needs a total order: max, |·|, sign, a step)

`apply(name, *args)` evaluates one entry exactly: an argument that is an exact value of a judge
of its own (the rational run's numbers, with a `__qed_function__(name, *args)` method: its field
evaluation) decides; anything else is read as SymPy. So the shims of the printed libraries are
written once and run on either kind of number. `printed(backend)` is what the printers emit for
each SymPy function: the first spelling of the backend's array library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mpmath
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

__all__ = [
    "Function",
    "FUNCTIONS",
    "apply",
    "by_sympy",
    "spelled",
    "printed",
    "mp_value",
    "mp_slope",
    "mp_exp",
    "printed_scalar",
    "in_place",
]


@dataclass(frozen=True)
class Function:
    name: str
    sympy: Callable
    numpy: tuple = ()
    torch: tuple = ()
    arity: int = 1
    kind: str = "transcendental"
    mpmath: str = ""
    value: Callable | None = None  # mpmath numbers -> mpmath number (default: mpmath.<mpmath>)
    slope: Callable | None = None  # (x, f(x)) -> f′(x), mpmath numbers


def _sigmoid(u):
    return 1 / (1 + sp.exp(-u))


def _ndtr(u):
    return (1 + sp.erf(u / sp.sqrt(2))) / 2


def _rsqrt(u):
    return 1 / sp.sqrt(u)


def _hypot(a, b):
    return sp.sqrt(a**2 + b**2)


def _max(a, b):
    return sp.Max(a, b)


def _min(a, b):
    return sp.Min(a, b)


# ---------------------------------------------------------------------------------------------
# Values and slopes at mpmath numbers, correct at every magnitude.


def mp_exp(x):
    """e^x at the working precision; for |x| ≥ 1000 as 2^k·e^r, r = x − k·ln 2 (mpmath's own exp
    is slow for huge arguments at high precision: e^{1e300} at 400 digits takes 0.1 s)."""
    if not mpmath.isfinite(x) or abs(x) < 1000:
        return mpmath.exp(x)
    if mpmath.mag(x) > 4096:
        # |x| > 2^4096 (an exponential of an exponential, tanh(e^x) at x = 1e4): e^x is 0 or ∞ in
        # every float format by a margin no precision changes (e^{−2^4096} < 2^{−1074} by far),
        # and the 2^k·e^r split would need 2^4096 / 3.3 digits
        return mpmath.mpf(0) if x < 0 else mpmath.inf
    with mpmath.workdps(mpmath.mp.dps + int(int(mpmath.mag(x)) * 0.302) + 15):
        ln2 = +mpmath.ln2
        k = int(mpmath.nint(x / ln2))
        e = mpmath.exp(x - k * ln2)
    return mpmath.ldexp(+e, k)


def _saturated(x):
    """±1 for |x| > 2^4096, where tanh x and erf x are ±1 to every precision a check uses (mpmath's
    own tanh overflows on such an x: tanh(e^{x}) at x = 1e30); else None."""
    if mpmath.isfinite(x) and x != 0 and mpmath.mag(x) > 4096:
        return mpmath.sign(x)
    return None


def _mp_sech2(x):
    """sech² x = 4e^{−2|x|}/(1 + e^{−2|x|})², without 1 − tanh² x rounding to 0."""
    e = mp_exp(-2 * abs(x))
    return 4 * e / (1 + e) ** 2


def _mp(name):
    def value(*args):
        import mpmath

        return getattr(mpmath, name)(*args)

    return value


def _mp_sigmoid(x):
    return 1 / (1 + mp_exp(-x))


def _mp_ndtr(x):
    return (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2


def _mp_erf_slope(x, y):
    return 2 / mpmath.sqrt(mpmath.pi) * mp_exp(-x * x)


def _mp_ndtr_slope(x, y):
    return mp_exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)


def _mp_rsqrt(x):
    return 1 / mpmath.sqrt(x)


def _zero_slope(x, y):
    return 0 * x


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function(
            "exp",
            sp.exp,
            ("np.exp", "math.exp"),
            ("torch.exp", "Tensor.exp", "Tensor.exp_"),
            mpmath="exp",
            value=mp_exp,
            slope=lambda x, y: y,
        ),
        Function(
            "log",
            sp.log,
            ("np.log", "math.log"),
            ("torch.log", "Tensor.log", "Tensor.log_"),
            mpmath="log",
            slope=lambda x, y: 1 / x,
        ),
        Function(
            "log1p",
            log1p,
            ("np.log1p",),
            ("torch.log1p", "Tensor.log1p", "Tensor.log1p_"),
            mpmath="log1p",
            slope=lambda x, y: 1 / (1 + x),
        ),
        Function(
            "expm1",
            expm1,
            ("np.expm1",),
            ("torch.expm1", "Tensor.expm1", "Tensor.expm1_"),
            mpmath="expm1",
            value=lambda x: mpmath.expm1(x) if abs(x) < 1000 else mp_exp(x) - 1,
            slope=lambda x, y: y + 1,
        ),
        Function(
            "tanh",
            sp.tanh,
            ("np.tanh", "math.tanh"),
            ("torch.tanh", "Tensor.tanh", "Tensor.tanh_"),
            mpmath="tanh",
            value=lambda x: _saturated(x) or mpmath.tanh(x),
            slope=lambda x, y: _mp_sech2(x),
        ),
        Function(
            "cosh",
            sp.cosh,
            ("np.cosh", "math.cosh"),
            ("torch.cosh", "Tensor.cosh", "Tensor.cosh_"),
            mpmath="cosh",
            slope=lambda x, y: mpmath.sinh(x),
        ),
        Function(
            "sinh",
            sp.sinh,
            ("np.sinh", "math.sinh"),
            ("torch.sinh", "Tensor.sinh", "Tensor.sinh_"),
            mpmath="sinh",
            slope=lambda x, y: mpmath.cosh(x),
        ),
        Function(
            "sin",
            sp.sin,
            ("np.sin", "math.sin"),
            ("torch.sin", "Tensor.sin", "Tensor.sin_"),
            mpmath="sin",
            slope=lambda x, y: mpmath.cos(x),
        ),
        Function(
            "cos",
            sp.cos,
            ("np.cos", "math.cos"),
            ("torch.cos", "Tensor.cos", "Tensor.cos_"),
            mpmath="cos",
            slope=lambda x, y: -mpmath.sin(x),
        ),
        Function(
            "erf",
            sp.erf,
            ("scipy.special.erf", "math.erf"),
            ("torch.erf", "Tensor.erf", "Tensor.erf_"),
            mpmath="erf",
            value=lambda x: _saturated(x) or mpmath.erf(x),
            slope=_mp_erf_slope,
        ),
        Function(
            "sigmoid",
            _sigmoid,
            ("scipy.special.expit",),
            ("torch.sigmoid", "Tensor.sigmoid", "Tensor.sigmoid_"),
            value=_mp_sigmoid,
            slope=lambda x, y: y * (1 - y),
        ),
        Function(
            "ndtr",
            _ndtr,
            ("scipy.special.ndtr", "_special.ndtr"),
            ("torch.special.ndtr",),
            value=_mp_ndtr,
            slope=_mp_ndtr_slope,
        ),
        Function(
            "sqrt",
            sp.sqrt,
            ("np.sqrt", "math.sqrt"),
            ("torch.sqrt", "Tensor.sqrt", "Tensor.sqrt_"),
            kind="algebraic",
            value=mpmath.sqrt,
            slope=lambda x, y: 1 / (2 * y),
        ),
        Function(
            "rsqrt",
            _rsqrt,
            (),
            ("torch.rsqrt", "Tensor.rsqrt", "Tensor.rsqrt_"),
            kind="algebraic",
            value=_mp_rsqrt,
            slope=lambda x, y: -y / (2 * x),
        ),
        Function(
            "abs",
            sp.Abs,
            ("np.abs",),
            ("torch.abs", "Tensor.abs", "Tensor.abs_"),
            kind="order",
            mpmath="fabs",
            slope=lambda x, y: mpmath.sign(x),
        ),
        Function(
            "sign",
            sp.sign,
            ("np.sign",),
            ("torch.sign", "Tensor.sign", "Tensor.sign_"),
            kind="order",
            mpmath="sign",
            slope=_zero_slope,
        ),
        Function(
            "hypot",
            _hypot,
            ("np.hypot", "math.hypot"),
            ("torch.hypot",),
            arity=2,
            kind="algebraic",
            value=lambda a, b: mpmath.hypot(a, b),
        ),
        Function("maximum", _max, ("np.maximum",), ("torch.maximum", "torch.clamp"), arity=2, kind="order", value=max),
        Function("minimum", _min, ("np.minimum",), ("torch.minimum", "torch.clamp"), arity=2, kind="order", value=min),
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


def mp_value(name: str, *args):
    """Row `name` at mpmath numbers, at the working precision (the one high-precision evaluation)."""
    f = FUNCTIONS[name]
    if f.value is not None:
        return f.value(*args)
    return getattr(mpmath, f.mpmath)(*args)


def mp_slope(name: str, x, y):
    """The derivative of row `name` (one argument) at x, where its value is y."""
    f = FUNCTIONS[name]
    if f.slope is None:
        raise KeyError(f"the functions table's {name} has no slope")
    return f.slope(x, y)


_PREFIX = {"numpy": "np.", "torch": "torch."}


def printed(backend: str) -> dict:
    """SymPy function class -> what the `backend` printer emits for it: the row's first spelling
    in the backend's array library (`np.exp`, `torch.log1p`)."""
    out = {}
    for f in FUNCTIONS.values():
        if not isinstance(f.sympy, type):
            continue
        for s in getattr(f, backend):
            if s.startswith(_PREFIX[backend]):
                out[f.sympy] = s
                break
    return out


def in_place(backend: str) -> dict:
    """SymPy function class -> the name the `backend` printer applies in place on a fresh array:
    NumPy's ufunc with `out=` (`np.exp(t, out=t)`), PyTorch's `Tensor.<name>_()`."""
    out = {}
    for f in FUNCTIONS.values():
        if not isinstance(f.sympy, type) or f.arity != 1:
            continue
        for s in getattr(f, backend):
            if backend == "numpy" and s.startswith("np."):
                out[f.sympy] = s.removeprefix("np.")
            elif backend == "torch" and s.startswith("Tensor.") and s.endswith("_"):
                out[f.sympy] = s.removeprefix("Tensor.")[:-1]
    return out


def printed_scalar() -> dict:
    """SymPy function class -> the `math.` spelling of a scalar (a size, a constant)."""
    out = {}
    for f in FUNCTIONS.values():
        if isinstance(f.sympy, type):
            for s in f.numpy:
                if s.startswith("math."):
                    out[f.sympy] = s
                    break
    return out

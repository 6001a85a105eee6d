"""Translation validation: the printed NumPy text, executed on exact symbolic inputs.

The generated claims (derivations/proof/obligations.py) prove the SymPy objects that codegen prints:
the printed forward equals the specification, the printed backward its derivative. What the
printer makes of those objects is text; this module checks the text. It executes every
generated NumPy kernel — the very file in generated/numpy/, not a re-rendering — on object
arrays whose entries are SymPy symbols (`x_0_0`, `x_0_1`, …) at small concrete sizes, and
compares every output and every gradient, entry by entry and exactly, with the expressions the
claims are about:

    forward   `forward_scope(op, when)[output]`  (the printed forward's SymPy object)
    backward  `backward_scope(op, when)[grad]`   (the printed backward's, cache expanded)
    steps     `Step.value(output)`               (derivations/optim.py: what *_update builds)
    tables    `Table.value(array, row, col)`     (derivations/language/ops.py: the entry formula)

each at the same concrete sizes, its sums unrolled, its entries `x[i, j]` mapped to the same
symbols. Scalar options (eps, lr, β₁, base, …) are passed as the op's own SymPy symbols, so the
comparison holds for every value of them; the step count `t` and integer inputs (token ids,
targets, the loss mask) are concrete integers; flags (`causal`) run both ways.

The kernel runs in a module namespace of its own (`load`), with the names the printed text
calls replaced by exact ones:

* `np` — a strict shim (`NUMPY`): the elementwise functions the printer emits (`np.exp`,
  `np.log`, `np.log1p`, `np.expm1`, `np.sqrt`, `np.tanh`, `np.sin`, `np.cos`, `np.abs`, `np.sign`, `np.negative`,
  `np.divide`, `np.multiply`, `np.add`, `np.subtract`, with `out=`) map to SymPy's functions;
  `np.max` to `Max` of the row, `np.errstate` to a context that does nothing, `np.maximum`/`np.minimum` to `Max`/`Min`; `np.arange` gives
  exact integers (the printed `dtype=np.float64` grid holds integers exactly); structural
  functions (`np.ones`, `np.zeros`, `np.full`, `np.where`, `np.tri`, `np.broadcast_to`,
  `np.take_along_axis`, `np.swapaxes`, `np.split`, `np.concatenate`, `np.asarray`, `np.sum`,
  `np.mean`, `np.dtype`, …) are NumPy's own on object arrays. Any other attribute is an error.
* `math` — `math.sqrt`, `math.exp`, `math.log`, … as SymPy's, `math.pi`, `math.e`, `math.inf` as
  π, e, ∞; `math.prod` is Python's.
* `scipy.special` — `expit(u)` as 1/(1 + e^{−u}), `erf` as erf, `ndtr(u)` as (1 + erf(u/√2))/2.
* `_special` — generated/numpy/_special.py itself, loaded the same way: its `erf`/`ndtr` see a
  non-float32 dtype and take the SciPy branch (above); its float32 rational erf blocks are not
  reached (see TRUSTED); its `causal_mask` runs as printed (`np.where(np.tri(…), 0, −math.inf)`).
* `_v` — generated/numpy/_validate.py's own checks, except that `floats` and `float_dtype`
  accept object arrays (returning the object dtype) instead of requiring a float dtype.
* `float` — exact: `eps = float(eps)` keeps the symbol.
* arrays — `Sym`, an object-array subclass whose comparisons give the printed comparison's
  value as a number: `a > b` is Heaviside(a − b) with H(0) = 0, `a >= b` with H(0) = 1, `a == b`
  on integers 1 or 0 (exactly what `(…).astype(dtype)` of the boolean is); `.astype(float
  dtype)` turns booleans into 0/1.
* literals — the printed text's numeric literals are read as the exact numbers they spell
  (`0.044715` as 44715/10⁶, `1e-05` as 1/10⁵, `(1/2)` as ½, `2**-1` as ½): the source is parsed,
  each float literal replaced by the Rational of its text and each integer literal under `/` or
  `**` by a SymPy Integer, then compiled. Everything else is the printed text, unchanged.

Matrix products, transposes (`.mT`, `.T`), reshapes, indexing, broadcasting and in-place
operators are NumPy's own, on object arrays: they run as printed.

The expected side is the claims' own index form (`derivations.language.arrays.entry`), built once per
array for free indices (i, j) and then evaluated at each concrete (i, j): every `Sum` written out
as its loop, sizes and scalars substituted, `x[i, j]` replaced by the run's symbol, an integer
input's entry by its value, RowMax's opaque per-row `max_<label>[i]` by `Max` of that row (what
the kernel's `np.max` computes), and `CausalMask(X)` read as X + B with B_ij = 0 (j ≤ i), −∞
(j > i) — the same entries for finite X. (CausalMask's own index form is a Piecewise, and
SymPy's `Sum` constructor runs `piecewise_fold`, which pulls a Piecewise out of an *inner* Sum
and leaks that sum's bound index into the condition: `Sum(exp(P(K))/Sum(Piecewise((e_p, p <= K),
(0, True)), (p, 0, n-1)), (K, 0, m-1))` comes out with a condition `K >= p` outside the sum over
p. The rewrite keeps every Piecewise out of the index form.)

Each comparison is exact: the residual expected − got passes only when it is 0 structurally,
after SymPy's `expand` (arguments of exp, √, erf, Max, Heaviside expanded inside), or by the
proofs' normaliser (`derivations.proof.rewriting.Normaliser().residual`). A residual that is clearly
non-zero at a pseudo-random point (30-digit mpmath over the expression's DAG) is reported at
once, without the slower normal forms: numbers only ever reject, never accept. A kernel output
that holds a Python or SymPy float is an error (an inexact constant leaked).
"""
from __future__ import annotations

import ast
import contextlib
import copy
import math as _math
import time
import types
from dataclasses import dataclass, field

import numpy as _np
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from derivations import registry
from derivations.language.arrays import Array, CausalMask, RowMax, _label, document_form, entry, shape_of
from derivations.proof.obligations import backward_scope, flag_sets, forward_scope, setting_for
from derivations.language.ops import Op, Table, grad_of

from . import ROOT

__all__ = ["ShimError", "Sym", "NUMPY", "MATH", "SCIPY", "load", "Check", "validate_op",
           "validate_step", "validate_table", "validate_all", "residual", "TRUSTED",
           "STEP_NAMES", "SIZES"]

GENERATED = ROOT / "generated" / "numpy"

# What translation validation does not reach: it is trusted (docs/trusted.md says the same).
TRUSTED = (
    "NumPy itself on object arrays: matrix products, transposes, reshapes, indexing, "
    "broadcasting and in-place operators are executed, not modelled, so their float kernels "
    "(BLAS) are trusted to compute what they compute on objects",
    "the shim's reading of each NumPy/SciPy/math function as its SymPy function (np.exp as "
    "exp, scipy.special.expit as 1/(1 + e^{-u}), scipy.special.ndtr as (1 + erf(u/√2))/2, "
    "np.max as Max, a comparison cast to the float dtype as Heaviside), and the libraries' "
    "float implementations of them",
    "floating-point rounding: literals are read as the exact numbers they spell, sizes and "
    "index grids as exact integers, no operation rounds",
    "the float32 branches of generated/numpy/_special.py (the rational erf evaluated in "
    "blocks): object arrays take the SciPy branch; the float32 erf's accuracy is the "
    "measured evidence of the special.* claims",
    "the dtype checks of generated/numpy/_validate.py (`floats`, `float_dtype` accept object "
    "arrays here), and its option-domain checks on a symbolic option where its assumptions "
    "leave a bound open (β₁ < 1 of a non-negative β₁: the run holds under that hypothesis)",
    "leading batch/head axes, absent optional axes, broadcasting and empty outputs: kernels "
    "are validated on 2-D slices (the proofs' form), where `_validate`'s shape handling "
    "(`promoted`, `restored`, `sum_to`) is the identity; it runs as printed, and "
    "tests/test_kernel_edges.py checks it numerically against torch",
    "the torch kernels (generated/torch/): only their numeric agreement with NumPy "
    "(tests/test_kernels.py)",
    "the mha template (head split and merge, the fused QKV projection): not executed here",
)

# step modules of generated/numpy/ and their Step objects (derivations/optim.py)
STEP_NAMES = ("sgd", "adam", "adamw")

# concrete sizes per op (default: the sizes where the generated claims search counterexamples,
# derivations.proof.obligations.setting_for); smaller where the symbolic expressions grow
SIZES: dict[str, dict[str, int]] = {
    # pairwise distinct, so that an axis read from the wrong argument (√n for √d_k) shows
    "attention": {"m": 2, "n": 3, "d_k": 5, "d_v": 4},
    "attention_lse": {"m": 2, "n": 3, "d_k": 5, "d_v": 4},
}
TABLE_SIZES: dict[str, dict[str, int]] = {
    "rope_tables": {"T": 3, "d": 4},
    "sinusoidal_table": {"T": 3, "d": 4},
}
STEP_SHAPE = (2, 2)
STEP_T = 3


class ShimError(RuntimeError):
    """The printed text used something the shim does not model (or modelled inexactly)."""


# ---------------------------------------------------------------------------------------------
# Exact scalars and arrays.


def _exact(v):
    """A kernel value as an exact SymPy object (booleans 0/1); a float is an error."""
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


class Sym(_np.ndarray):
    """An object array of SymPy entries whose comparisons and float casts are exact numbers."""

    __array_priority__ = 1000.0

    def astype(self, dtype, *args, **kwargs):
        if _np.dtype(dtype) != _np.dtype(object):
            raise ShimError(f"astype({dtype}): the symbolic arrays' float dtype is object")
        return _apply(_exact, self)

    def _compare(self, other, how):
        return _apply2(lambda a, b: _comparison(a, b, how), self, other)

    def __gt__(self, other):
        return self._compare(other, "gt")

    def __ge__(self, other):
        return self._compare(other, "ge")

    def __lt__(self, other):
        return self._compare(other, "lt")

    def __le__(self, other):
        return self._compare(other, "le")

    def __eq__(self, other):  # type: ignore[override]
        return self._compare(other, "eq")

    def __ne__(self, other):  # type: ignore[override]
        return self._compare(other, "ne")

    __hash__ = None  # type: ignore[assignment]


def _comparison(a, b, how):
    """The printed comparison `a <how> b`, cast to the float dtype: 1 where it holds, else 0."""
    d = sp.sympify(a) - sp.sympify(b)
    if d.is_number and d.is_comparable:
        holds = {"gt": d > 0, "ge": d >= 0, "lt": d < 0, "le": d <= 0, "eq": d == 0, "ne": d != 0}[how]
        return sp.Integer(1 if bool(holds) else 0)
    if how == "gt":
        return sp.Heaviside(d, 0)
    if how == "ge":
        return sp.Heaviside(d, 1)
    if how == "lt":
        return sp.Heaviside(-d, 0)
    if how == "le":
        return sp.Heaviside(-d, 1)
    raise ShimError(f"an equality test of symbolic entries: {a} vs {b}")


def sym(a) -> Sym:
    """`a` as an object array viewed as Sym."""
    arr = _np.asarray(a, dtype=object)
    return arr.view(Sym)


def _apply(f, x):
    out = _np.frompyfunc(f, 1, 1)(_np.asarray(x, dtype=object))
    return sym(out)


def _apply2(f, x, y):
    out = _np.frompyfunc(f, 2, 1)(_np.asarray(x, dtype=object), _np.asarray(y, dtype=object))
    return sym(out)


def _ufunc(name, f, arity: int):
    """np.<name> on object arrays: `f` entry by entry (one or two operands), `out=` in place."""
    apply = _apply if arity == 1 else _apply2

    def ufunc(*args, out=None, **kwargs):
        if kwargs:
            raise ShimError(f"np.{name}: arguments {sorted(kwargs)} are not modelled")
        if len(args) != arity:
            raise ShimError(f"np.{name}: {len(args)} operands, expected {arity}")
        res = apply(f, *args)
        if out is not None:
            out[...] = res
            return out
        return res
    ufunc.__name__ = name
    return ufunc


def _elementwise(name, f):
    return _ufunc(name, f, 1)


def _binary(name, f):
    return _ufunc(name, f, 2)


def _np_max(a, axis=None, keepdims=False, **kwargs):
    if kwargs or axis is None:
        raise ShimError(f"np.max: only axis=<int>, keepdims are modelled (got axis={axis}, {kwargs})")
    a = _np.moveaxis(_np.asarray(a, dtype=object), axis, -1)
    rows = a.reshape(-1, a.shape[-1])
    out = _np.empty(rows.shape[0], dtype=object)
    for k, row in enumerate(rows):
        out[k] = sp.Max(*[_exact(v) for v in row])
    out = out.reshape(a.shape[:-1])
    if keepdims:
        out = _np.moveaxis(out[..., None], -1, axis)
    return sym(out)


def _arange(*args, dtype=None, **kwargs):
    if kwargs:
        raise ShimError(f"np.arange: arguments {sorted(kwargs)} are not modelled")
    ints = [int(a) for a in args]
    return sym([sp.Integer(v) for v in range(*ints)])


def _passthrough(name):
    f = getattr(_np, name)

    def call(*args, **kwargs):
        res = f(*args, **kwargs)
        if isinstance(res, _np.ndarray) and res.dtype == object:
            return res.view(Sym)
        if isinstance(res, list):
            return [r.view(Sym) if isinstance(r, _np.ndarray) and r.dtype == object else r for r in res]
        return res
    call.__name__ = name
    return call


def _structural_dtype(f, name):
    """np.ones/zeros/full/empty: a float dtype of the symbolic arrays is object."""
    def call(*args, dtype=None, **kwargs):
        if dtype is not None and _np.dtype(dtype) not in (_np.dtype(object), _np.dtype(bool)):
            if _np.dtype(dtype).kind == "f":
                raise ShimError(f"np.{name}(dtype={dtype}): a float array next to symbolic ones")
        res = f(*args, dtype=dtype, **kwargs)
        return res.view(Sym) if res.dtype == object else res
    call.__name__ = name
    return call


class _Namespace(types.SimpleNamespace):
    """A strict namespace: an attribute it does not have names the shim's gap."""

    def __getattr__(self, name):
        raise ShimError(f"the printed text uses {self.__dict__.get('_label', '?')}.{name}, which "
                        "the translation-validation shim does not model")


def _sigmoid(u):
    return 1 / (1 + sp.exp(-u))


def _ndtr(u):
    return (1 + sp.erf(u / sp.sqrt(2))) / 2


NUMPY = _Namespace(
    _label="np",
    # elementwise, exact
    exp=_elementwise("exp", sp.exp), log=_elementwise("log", sp.log),
    sqrt=_elementwise("sqrt", sp.sqrt), tanh=_elementwise("tanh", sp.tanh),
    sin=_elementwise("sin", sp.sin), cos=_elementwise("cos", sp.cos),
    abs=_elementwise("abs", sp.Abs), sign=_elementwise("sign", sp.sign),
    log1p=_elementwise("log1p", log1p), expm1=_elementwise("expm1", expm1),
    negative=_elementwise("negative", lambda a: -a),
    divide=_binary("divide", lambda a, b: sp.sympify(a) / sp.sympify(b)),
    multiply=_binary("multiply", lambda a, b: sp.sympify(a) * sp.sympify(b)),
    add=_binary("add", lambda a, b: sp.sympify(a) + sp.sympify(b)),
    subtract=_binary("subtract", lambda a, b: sp.sympify(a) - sp.sympify(b)),
    maximum=_binary("maximum", lambda a, b: sp.Max(_exact(a), _exact(b))),
    minimum=_binary("minimum", lambda a, b: sp.Min(_exact(a), _exact(b))),
    max=_np_max,
    arange=_arange,
    errstate=lambda **flags: contextlib.nullcontext(),   # no floating point here: nothing to report
    # structural: NumPy's own on object arrays
    ones=_structural_dtype(_np.ones, "ones"), zeros=_structural_dtype(_np.zeros, "zeros"),
    full=_structural_dtype(_np.full, "full"), empty=_structural_dtype(_np.empty, "empty"),
    where=_passthrough("where"), tri=_passthrough("tri"), broadcast_to=_passthrough("broadcast_to"),
    take_along_axis=_passthrough("take_along_axis"), swapaxes=_passthrough("swapaxes"),
    split=_passthrough("split"), concatenate=_passthrough("concatenate"),
    sum=_passthrough("sum"), mean=_passthrough("mean"), asarray=_passthrough("asarray"),
    ravel=_passthrough("ravel"),
    dtype=_np.dtype, ndarray=_np.ndarray, integer=_np.integer, floating=_np.floating,
    float32=_np.float32, float64=_np.float64, bool_=_np.bool_, issubdtype=_np.issubdtype,
)

MATH = _Namespace(
    _label="math",
    sqrt=sp.sqrt, exp=sp.exp, log=sp.log, tanh=sp.tanh, erf=sp.erf, sin=sp.sin, cos=sp.cos,
    pi=sp.pi, e=sp.E, inf=sp.oo, prod=_math.prod,
)

SCIPY = _Namespace(_label="scipy", special=_Namespace(
    _label="scipy.special",
    expit=lambda u: _apply(_sigmoid, u),
    erf=lambda u: _apply(sp.erf, u),
    ndtr=lambda u: _apply(_ndtr, u),
))


def _exact_float(v):
    """`float(eps)` in the printed text: the option's exact value (a Symbol or a Rational)."""
    return sp.sympify(v)


def _validate_shim():
    """generated/numpy/_validate.py with its float-dtype checks opened to object arrays."""
    from generated.numpy import _validate as real

    def floats(op, *args):
        for name, a, ndim, exact, declared in args:
            if not isinstance(a, _np.ndarray):
                raise TypeError(f"{op}: {name} must be a numpy array, got {type(a).__name__}")
            if a.dtype != object:
                raise ShimError(f"{op}: {name} has dtype {a.dtype}; the symbolic run needs object")
            if a.ndim < ndim or (exact and a.ndim != ndim):
                raise ValueError(f"{op}: {name} has shape {a.shape}; expected "
                                 f"{'exactly' if exact else 'at least'} {ndim} axes {declared}")
        return _np.dtype(object)

    def float_dtype(op, dtype):
        return _np.dtype(object)

    def in_domain(op, name, value, lo, hi, lo_open, hi_open):
        """The real check for a number; for a symbol (every value of it at once), each bound its
        assumptions decide must hold, and one they leave open (β₁ < 1 of a non-negative β₁) is
        the hypothesis the run is made under (TRUSTED)."""
        if not isinstance(value, sp.Basic) or value.is_number:
            return real.in_domain(op, name, value, lo, hi, lo_open, hi_open)
        holds = []
        if lo is not None:
            holds.append(value > lo if lo_open else value >= lo)
        if hi is not None:
            holds.append(value < hi if hi_open else value <= hi)
        if any(h is sp.false for h in holds):
            raise ValueError(f"{op}: the symbol {name} lies outside its domain")
        return None

    scope = dict(vars(real), floats=floats, float_dtype=float_dtype, in_domain=in_domain)
    for k, f in list(scope.items()):     # the module's own calls (`checked`) reach the shims too
        if isinstance(f, types.FunctionType) and f.__module__ == real.__name__:
            scope[k] = types.FunctionType(f.__code__, scope, k, f.__defaults__, f.__closure__)
    through = scope["checked"]

    def checked(sig, **args):
        """A SIGNATURE holds the real module's check functions: run the shim's of the same names."""
        shimmed = copy.copy(sig)
        shimmed.steps = tuple(scope[step.__name__] for step in sig.steps)
        return through(shimmed, **args)

    scope["checked"] = checked
    ns = {k: v for k, v in scope.items() if not k.startswith("__")}
    ns["_label"] = "_v"
    return _Namespace(**ns)


# ---------------------------------------------------------------------------------------------
# Loading a generated module with the shims.

_EXACT_NUMBER = "__qed_exact_number__"
_EXACT_INT = "__qed_exact_int__"


class _ExactLiterals(ast.NodeTransformer):
    """Float literals → the Rational of their text; integer literals under / and ** → Integer."""

    def __init__(self, text: str):
        self.text = text

    def visit_Constant(self, node):
        if isinstance(node.value, float):
            spelled = ast.get_source_segment(self.text, node) or repr(node.value)
            return ast.copy_location(ast.Call(ast.Name(_EXACT_NUMBER, ast.Load()),
                                              [ast.Constant(spelled)], []), node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Div, ast.Pow)):
            for side in ("left", "right"):
                v = getattr(node, side)
                if isinstance(v, ast.Constant) and type(v.value) is int:
                    setattr(node, side, ast.copy_location(ast.Call(
                        ast.Name(_EXACT_INT, ast.Load()), [ast.Constant(v.value)], []), v))
        return node


def _compile(name: str, text: str):
    tree = ast.parse(text)
    tree = ast.fix_missing_locations(_ExactLiterals(text).visit(tree))
    return compile(tree, f"<generated/numpy/{name}.py, exact>", "exec")


_LOADED: dict = {}


def load(name: str, source: str | None = None) -> types.ModuleType:
    """generated/numpy/<name>.py (or `source`, an edited copy of its text) as a module whose
    NumPy, math, SciPy, _special, _validate and `float` are the exact shims. Not entered in
    sys.modules; the real module is untouched."""
    key = name if source is None else None
    if key is not None and key in _LOADED:
        return _LOADED[key]
    text = source if source is not None else (GENERATED / f"{name}.py").read_text()
    mod = types.ModuleType(f"generated.numpy.{name}")
    mod.__package__ = "generated.numpy"
    mod.__file__ = str(GENERATED / f"{name}.py")
    ns = mod.__dict__
    ns[_EXACT_NUMBER] = sp.Rational
    ns[_EXACT_INT] = sp.Integer
    exec(_compile(name, text), ns)
    for var, val in list(ns.items()):
        if not isinstance(val, types.ModuleType):
            continue
        real = val.__name__
        if real == "numpy":
            ns[var] = NUMPY
        elif real == "math":
            ns[var] = MATH
        elif real in ("scipy", "scipy.special"):
            ns[var] = SCIPY if real == "scipy" else SCIPY.special
        elif real == "generated.numpy._validate":
            ns[var] = _validate_shim()
        elif real.startswith("generated.numpy."):
            ns[var] = load(real.rsplit(".", 1)[1])
        else:
            raise ShimError(f"generated/numpy/{name}.py imports {real}, which the shim does not model")
    ns["float"] = _exact_float     # shadows the builtin for this module's functions only
    if key is not None:
        _LOADED[key] = mod
    return mod


# ---------------------------------------------------------------------------------------------
# Exact comparison.


_MP_FUNCS = {sp.exp: "exp", sp.log: "log", sp.tanh: "tanh", sp.erf: "erf", sp.sin: "sin",
             sp.cos: "cos", sp.Abs: "fabs", log1p: "log1p", expm1: "expm1"}


def _mp_value(e, point: dict, memo: dict):
    """`e` evaluated with mpmath over its DAG (each shared subexpression once)."""
    import mpmath

    if e in memo:
        return memo[e]
    if e in point:
        v = point[e]
    elif e.is_Number or e.is_NumberSymbol:
        v = mpmath.mpf(sp.N(e, mpmath.mp.dps)) if e.is_finite else (
            mpmath.inf if e == sp.oo else -mpmath.inf if e == -sp.oo else None)
        if v is None:
            raise ValueError(f"not a number: {e}")
    elif isinstance(e, sp.Add):
        v = mpmath.fsum(_mp_value(a, point, memo) for a in e.args)
    elif isinstance(e, sp.Mul):
        v = mpmath.mpf(1)
        for a in e.args:
            v *= _mp_value(a, point, memo)
    elif isinstance(e, sp.Pow):
        v = mpmath.power(_mp_value(e.base, point, memo), _mp_value(e.exp, point, memo))
    elif type(e) in _MP_FUNCS:
        v = getattr(mpmath, _MP_FUNCS[type(e)])(_mp_value(e.args[0], point, memo))
    elif isinstance(e, (sp.Max, sp.Min)):
        vals = [_mp_value(a, point, memo) for a in e.args]
        v = max(vals) if isinstance(e, sp.Max) else min(vals)
    elif isinstance(e, sp.Heaviside):
        x = _mp_value(e.args[0], point, memo)
        h0 = _mp_value(e.args[1], point, memo) if len(e.args) > 1 else mpmath.mpf(0.5)
        v = mpmath.mpf(1) if x > 0 else mpmath.mpf(0) if x < 0 else h0
    else:
        raise ValueError(f"no numeric rule for {type(e).__name__}")
    memo[e] = v
    return v


def _probe(d, seed: int) -> float | None:
    """|d| at a pseudo-random point (positive symbols get positive values), 30 digits; None
    where it does not evaluate to a real number. Only ever used to *reject* fast: a check
    passes on an exact 0 alone."""
    import random

    import mpmath

    rng = random.Random(seed)
    point = {}
    with mpmath.workdps(30):
        for s in sorted(d.free_symbols, key=lambda x: x.name):
            k = rng.randint(1, 96)
            point[s] = mpmath.mpf(k) / 97 if (s.is_positive or s.is_nonnegative) \
                else mpmath.mpf(2 * k - 97) / 97
        try:
            v = _mp_value(d, point, {})
            return float(abs(v)) if mpmath.isfinite(v) else None
        except (TypeError, ValueError, ZeroDivisionError):
            return None


def residual(expected, got) -> sp.Expr:
    """expected − got decided exactly: 0 when it is proved 0 (structurally, after SymPy's
    `expand`, or by the proofs' normaliser), otherwise what is left. A residual that is clearly
    non-zero at a pseudo-random point is returned at once, without the slower normal forms."""
    d = sp.sympify(expected) - sp.sympify(got)
    if d == 0:
        return sp.Integer(0)
    gaps = [_probe(d, seed) for seed in (1, 2)]
    scale = max([_probe(sp.sympify(expected), 1) or 0.0, 1.0])
    if any(g is not None and g > 1e-25 * scale for g in gaps):
        return d
    e = sp.expand(d)
    if e == 0:
        return sp.Integer(0)
    from derivations.proof.rewriting import Normaliser, NormaliserError

    try:
        norm = Normaliser(ranges={})      # checked mode: no side condition is ever assumed
        r = norm.residual(expected, got)
    except NormaliserError:
        return e
    return sp.Integer(0) if r == 0 and not norm.undischarged else e


# ---------------------------------------------------------------------------------------------
# Symbolic inputs and the expected side.


def _stored_shape(shape: tuple) -> tuple:
    r, c = (int(s) for s in shape)
    if r == 1:
        return (c,)
    return (r, c)


def _positions(shape: tuple):
    """(i, j) of every entry of a declared (r, c) array, with its stored index."""
    r, c = (int(s) for s in shape)
    for i in range(r):
        for j in range(c):
            yield (i, j), ((j,) if r == 1 else (i, j))


class _Inputs:
    """The symbolic (and integer) arrays of one run, and the map from their index-form entries
    to the same symbols."""

    def __init__(self, sizes: dict):
        self.sizes = sizes                   # size Symbol -> int
        self.arrays: dict = {}               # name -> ndarray (Sym for floats)
        self.entries: dict = {}              # Indexed (concrete) -> SymPy value
        self.integer_names: set = set()

    def shape(self, a) -> tuple:
        return tuple(int(sp.sympify(s).xreplace(self.sizes)) for s in a.shape)

    def float_array(self, a) -> Sym:
        shape = self.shape(a)
        out = _np.empty(_stored_shape(shape), dtype=object)
        for (i, j), pos in _positions(shape):
            name = f"{a.name}_{i}_{j}" if shape[0] != 1 else f"{a.name}_{j}"
            s = sp.Symbol(name, real=True)
            out[pos] = s
            self.entries[entry(a, (sp.Integer(i), sp.Integer(j)))] = s
        self.arrays[a.name] = out.view(Sym)
        return self.arrays[a.name]

    def integer_array(self, a, values) -> _np.ndarray:
        shape = self.shape(a)
        if shape[1] != 1:
            raise ShimError(f"integer input {a.name} must be (T, 1), got {shape}")
        out = _np.array(values, dtype=_np.int64).reshape(shape[0])
        for i in range(shape[0]):
            self.entries[entry(a, (sp.Integer(i), sp.Integer(0)))] = sp.Integer(int(out[i]))
        self.integer_names.add(a.name)
        self.arrays[a.name] = out
        return out


# the free indices of an entry: distinct from the proofs' own (i, j), e, f and every Dummy
_I, _J = sp.Symbol("_tv_row", integer=True), sp.Symbol("_tv_col", integer=True)


class _Expected:
    """Concrete values of index-form expressions: sizes substituted, sums unrolled, entries
    mapped to the run's symbols, RowMax's opaque `max_<label>[i]` to Max of that row."""

    def __init__(self, inputs: _Inputs, scalars: dict):
        self.inputs = inputs
        self.scalars = scalars               # option Symbol -> value (t -> 3)
        self.maxes: dict = {}                # IndexedBase name -> (argument, columns)
        self._memo: dict = {}

    def note_maxes(self, expr) -> None:
        for node in sp.preorder_traversal(sp.sympify(expr)):
            if isinstance(node, RowMax):
                arg = node.args[0]
                cols = int(sp.sympify(shape_of(arg)[1]).xreplace(self.inputs.sizes))
                self.maxes["max_" + _label(arg)] = (arg, cols)

    def unmask(self, expr):
        """CausalMask(X) as X + B, B_ij = 0 (j ≤ i), −∞ (j > i): the same entries for finite X
        (CausalMask's own index form, a Piecewise, is not used: SymPy's Sum constructor folds a
        Piecewise out of an inner Sum and leaks its bound index: see the module docstring)."""
        def bias(node):
            shape = shape_of(node.args[0])
            b = Array("causal_bias__", shape)
            rows, cols = (int(sp.sympify(s).xreplace(self.inputs.sizes)) for s in shape)
            for i in range(rows):
                for j in range(cols):
                    self.inputs.entries[entry(b, (sp.Integer(i), sp.Integer(j)))] = \
                        sp.Integer(0) if j <= i else -sp.oo
            return node.args[0] + b
        return sp.sympify(expr).replace(lambda e: isinstance(e, CausalMask), bias)

    def values(self, expr, shape: tuple) -> dict:
        """Every entry of array expression `expr` of declared shape (r, c) at the run's sizes:
        its index form for free indices (i, j), once, then each (i, j) substituted."""
        expr = self.unmask(expr)
        self.note_maxes(expr)
        form = entry(expr, (_I, _J))
        return {pos: self.concrete(form, {_I: sp.Integer(i), _J: sp.Integer(j)})
                for (i, j), pos in _positions(shape)}

    def concrete(self, e, env: dict | None = None):
        """The value of index expression `e` with the bound indices of `env` (Dummy -> int):
        every `Sum` with concrete limits written out as the loop it is (hi < lo: 0), sizes and
        scalars substituted, each entry `x[i, j]` replaced by the run's symbol, an integer
        input's entry by its value, `max_<label>[i]` by Max of that row."""
        env = {} if env is None else env
        value = self._walk(sp.sympify(e), env)
        if value.atoms(sp.Indexed) or any(isinstance(v, sp.Dummy) for v in value.free_symbols):
            raise ShimError(f"unresolved entries or bound indices in {value}")
        return document_form(value)

    def _walk(self, e, env):
        if e.is_Atom and not isinstance(e, sp.Indexed):   # (SymPy counts an Indexed as an atom)
            if isinstance(e, sp.Symbol):
                if e in env:
                    return env[e]
                if e in self.inputs.sizes:
                    return sp.Integer(self.inputs.sizes[e])
                return self.scalars.get(e, e)
            return e
        free = tuple(sorted(((k, v) for k, v in env.items() if e.has(k)), key=lambda kv: kv[0].sort_key()))
        key = (e, free)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if isinstance(e, sp.Sum):
            out = self._sum(e.function, list(e.limits), env)
        elif isinstance(e, sp.Indexed):
            out = self._entry(e, env)
        else:
            out = e.func(*[self._walk(a, env) for a in e.args])
        self._memo[key] = out
        return out

    def _sum(self, body, limits, env):
        if not limits:
            return self._walk(body, env)
        (k, lo, hi), rest = limits[0], limits[1:]
        lo, hi = self._walk(sp.sympify(lo), env), self._walk(sp.sympify(hi), env)
        if not (lo.is_Integer and hi.is_Integer):
            raise ShimError(f"a sum over {k} from {lo} to {hi} is not concrete")
        terms = []
        for v in range(int(lo), int(hi) + 1):
            inner = dict(env)
            inner[k] = sp.Integer(v)
            terms.append(self._sum(body, rest, inner))
        return sp.Add(*terms)

    def _entry(self, e, env):
        idx = tuple(self._walk(sp.sympify(x), env) for x in e.indices)
        if not all(x.is_Integer for x in idx):
            raise ShimError(f"the entry {e} has no concrete index: {idx}")
        name = e.base.name
        found = self.inputs.entries.get(e.base[idx])
        if found is not None:
            return found
        if name in self.maxes:
            arg, cols = self.maxes[name]
            (row,) = idx
            return sp.Max(*[self._walk(entry(arg, (row, sp.Integer(k))), {}) for k in range(cols)])
        raise ShimError(f"the expected value reads {name}{list(idx)}, which is no input entry")


# ---------------------------------------------------------------------------------------------
# Checks.


@dataclass
class Check:
    """One validated array: `kernel` (op, step or table), `what` ("forward y", "backward dx",
    "table cos", "step p_new"), the flags on, the sizes, and the entries that differ."""

    kernel: str
    what: str
    flags: tuple = ()
    sizes: dict = field(default_factory=dict)
    entries: int = 0
    mismatches: list = field(default_factory=list)     # (stored index, expected, got, residual)
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.error and self.entries > 0

    def __str__(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        head = f"{self.kernel} {self.what}{flags} at {self.sizes}: "
        if self.error:
            return head + "ERROR " + self.error
        if self.mismatches:
            idx, want, got, res = self.mismatches[0]
            return (head + f"{len(self.mismatches)}/{self.entries} entries differ; first at {idx}: "
                    f"expected {want}, got {got}, residual {res}")
        return head + f"{self.entries} entries equal exactly ({self.seconds:.2f} s)"


def _compare(check: Check, got, expected: dict, stored: tuple) -> None:
    got = _np.asarray(got, dtype=object) if not isinstance(got, _np.ndarray) else got
    if tuple(got.shape) != tuple(stored):
        check.error = f"shape {tuple(got.shape)}, expected {tuple(stored)}"
        return
    for pos, want in expected.items():
        try:
            value = _exact(got[pos])
        except ShimError as exc:
            check.mismatches.append((pos, want, got[pos], str(exc)))
            continue
        r = residual(want, value)
        check.entries += 1
        if r != 0:
            check.mismatches.append((pos, want, value, r))


def _op_sizes(op: Op, sizes: dict | None) -> dict:
    setting = setting_for(op, {})
    named = {s.name: s for s in setting.sizes}
    chosen = {s: int(v) for s, v in setting.sizes.items()}
    for k, v in (SIZES.get(op.name, {}) if sizes is None else sizes).items():
        chosen[named[k]] = int(v)
    return chosen


def _integer_values(lo: int, hi: int, count: int) -> list[int]:
    """Deterministic ids in [lo, hi], every value used where count allows (a 0/1 mask: 1, 0, 1)."""
    span = hi - lo + 1
    return [lo + (hi - lo - k) % span for k in range(count)]


def validate_op(op: Op | str, sizes: dict | None = None, source: str | None = None,
                flags=None) -> list[Check]:
    """Run generated/numpy/<op>.py (or `source`) forward and backward on symbolic inputs, for
    every flag combination, and compare each output and gradient with the printed SymPy
    objects."""
    op = registry.op(op) if isinstance(op, str) else op
    size_map = _op_sizes(op, sizes)
    by_name = {s.name: v for s, v in size_map.items()}
    setting = setting_for(op, {})
    mod = load(op.name, source)
    fwd_fn = getattr(mod, f"{op.name}_forward")
    bwd_fn = getattr(mod, f"{op.name}_backward")
    out: list[Check] = []
    for when in (flag_sets(op) if flags is None else flags):
        t0 = time.perf_counter()
        inputs = _Inputs(size_map)
        args = []
        for a in op.inputs + op.params:
            if a in op.integer_inputs:
                lo, hi = setting.integer_arrays[a.name]
                lo, hi = int(sp.sympify(lo).xreplace(size_map)), int(sp.sympify(hi).xreplace(size_map))
                args.append(inputs.integer_array(a, _integer_values(lo, hi, inputs.shape(a)[0])))
            else:
                args.append(inputs.float_array(a))
        kwargs = {}
        scalars = {}
        for o in op.options:
            if o.symbol is None:
                kwargs[o.name] = o.name in when
            elif o.symbol.is_integer:
                v = int(setting.scalars.get(o.symbol, 2))
                kwargs[o.name] = v
                scalars[o.symbol] = sp.Integer(v)
            else:
                kwargs[o.name] = o.symbol
        flags_on = tuple(sorted(when))
        try:
            result, cache = fwd_fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the run itself failing is a finding
            out.append(Check(op.name, "forward", flags_on, by_name, error=f"{type(exc).__name__}: {exc}"))
            continue
        results = result if isinstance(result, tuple) else (result,)
        expected = _Expected(inputs, scalars)
        out += _checks(op.name, "forward", flags_on, by_name, op.outputs, results,
                       forward_scope(op, when), inputs, expected, t0)
        t1 = time.perf_counter()
        ups = [inputs.float_array(grad_of(o)) for o in op.outputs]
        try:
            grads = bwd_fn(*ups, cache)
        except Exception as exc:  # noqa: BLE001
            out.append(Check(op.name, "backward", flags_on, by_name, error=f"{type(exc).__name__}: {exc}"))
            continue
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(op.grads):
            out.append(Check(op.name, "backward", flags_on, by_name,
                             error=f"{len(grads)} gradients returned, {len(op.grads)} declared"))
            continue
        out += _checks(op.name, "backward", flags_on, by_name, op.grads, grads,
                       backward_scope(op, when), inputs, expected, t1)
    return out


def _checks(kernel, what, flags_on, sizes, targets, results, scope, inputs, expected, t0) -> list:
    """One Check per returned array: its entries against the proved expression in `scope`."""
    out = []
    for a, got in zip(targets, results):
        check = Check(kernel, f"{what} {a.name}", flags_on, sizes)
        shape = inputs.shape(a)
        _compare(check, got, expected.values(scope[a], shape), _stored_shape(shape))
        check.seconds = time.perf_counter() - t0
        out.append(check)
    return out


def _steps() -> dict:
    from derivations.optim import STEPS

    return STEPS


def validate_step(name: str, source: str | None = None, shape: tuple = STEP_SHAPE,
                  t: int = STEP_T) -> list[Check]:
    """Run generated/numpy/<name>.py's `<name>_step` on symbolic p, g, m, v (and symbolic
    hyperparameters, t concrete) and compare each returned array with `Step.value`."""
    step = _steps()[name]
    t0 = time.perf_counter()
    mod = load(name, source)
    fn = getattr(mod, f"{name}_step")
    r, c = shape
    sizes = {}
    for a in step.inputs + step.outputs:
        rs, cs = a.shape
        sizes[rs], sizes[cs] = sp.Integer(r), sp.Integer(c)
    inputs = _Inputs(sizes)
    args = [inputs.float_array(a) for a in step.inputs]
    kwargs, scalars = {}, {}
    for o in step.options:
        if o.symbol.is_integer:
            kwargs[o.name] = t
            scalars[o.symbol] = sp.Integer(t)
        else:
            kwargs[o.name] = o.symbol
    sz = {"rows": r, "cols": c, "t": t}
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return [Check(name, "step", (), sz, error=f"{type(exc).__name__}: {exc}")]
    results = result if isinstance(result, tuple) else (result,)
    expected = _Expected(inputs, scalars)
    out = []
    for o, got in zip(step.outputs, results):
        check = Check(name, f"step {o.name}", (), sz)
        want = expected.values(step.value(o), (r, c))
        _compare(check, got, want, (r, c))
        check.seconds = time.perf_counter() - t0
        out.append(check)
    if len(results) != len(step.outputs):
        out.append(Check(name, "step", (), sz, error=f"{len(results)} arrays returned, "
                                                      f"{len(step.outputs)} declared"))
    return out


def validate_table(table: Table | str, sizes: dict | None = None,
                   source: str | None = None) -> list[Check]:
    """Call the generated table function at concrete sizes with a symbolic `base` (every option
    a Symbol) and compare every entry with `Table.value`."""
    table = registry.table(table) if isinstance(table, str) else table
    t0 = time.perf_counter()
    sizes = dict(TABLE_SIZES.get(table.name, {}) if sizes is None else sizes)
    mod = load(table.file, source)
    fn = getattr(mod, table.name)
    options = {o.name: o.symbol for o in table.options if o.symbol is not None}
    try:
        result = fn(*[sizes[s.name] for s in table.sizes], **options)
    except Exception as exc:  # noqa: BLE001
        return [Check(table.name, "table", (), sizes, error=f"{type(exc).__name__}: {exc}")]
    results = result if isinstance(result, tuple) else (result,)
    subs = {s: sp.Integer(sizes[s.name]) for s in table.sizes}
    out = []
    for a, got in zip(table.arrays, results):
        check = Check(table.name, f"table {a.name}", (), sizes)
        rows, cols = (int(sp.sympify(x).xreplace(subs)) for x in a.shape)
        want = {(i, j): table.value(a.name, i, j, sizes, options) for i in range(rows) for j in range(cols)}
        _compare(check, got, want, (rows, cols))
        check.seconds = time.perf_counter() - t0
        out.append(check)
    return out


def _symbols(name: str, shape: tuple) -> Sym:
    out = _np.empty(shape, dtype=object)
    for pos in _np.ndindex(*shape):
        out[pos] = sp.Symbol(f"{name}_{'_'.join(map(str, pos))}", real=True)
    return out.view(Sym)


def _compare_arrays(check: Check, got, want) -> None:
    """Entry by entry, exactly (`residual`), two object arrays of the same shape."""
    got, want = _np.asarray(got, dtype=object), _np.asarray(want, dtype=object)
    if got.shape != want.shape:
        check.error = f"shape {got.shape}, expected {want.shape}"
        return
    for pos in _np.ndindex(*want.shape):
        value = _exact(got[pos])
        d = sp.sympify(want[pos]) - sp.sympify(value)
        if d != 0 and sp.count_ops(d) > 2000:
            # the layout moves entries, it computes nothing: the right text gives the very same
            # expression. A large difference is not expanded (that can take minutes); it counts
            # as a mismatch, even where it vanishes at sample points — never as equal.
            r = d
        else:
            r = residual(want[pos], value)
        check.entries += 1
        if r != 0:
            check.mismatches.append((pos, want[pos], got[pos], r))
            return            # one wrong entry fails the array; the rest need not be decided


def validate_mha(T: int = 2, n_head: int = 2, d: int = 2, source: str | None = None) -> list[Check]:
    """The multi-head attention template's layout, run as printed on symbolic inputs, against
    the index map of `mha.concat` written out by hand: head η of Q, K and V is the fused
    projection's columns η·d + c, C + η·d + c and 2C + η·d + c (c < d); the merge puts head η's
    column c at η·d + c. Forward and backward, causal on and off; the kernels it calls are the
    (validated) generated linear and attention, so what this checks is the template's text."""
    C = n_head * d
    mod = load("mha", source)
    lin, att = load("linear"), load("attention")
    sizes = {"T": T, "C": C, "n_head": n_head, "d": d}
    out = []
    for causal in (False, True):
        flags = ("causal",) if causal else ()
        x, w_qkv, b_qkv = _symbols("x", (T, C)), _symbols("w_qkv", (3 * C, C)), _symbols("b_qkv", (3 * C,))
        w_o, b_o, dout = _symbols("w_o", (C, C)), _symbols("b_o", (C,)), _symbols("dout", (T, C))
        got, cache = mod.mha_forward(x, w_qkv, b_qkv, w_o, b_o, n_head=n_head, causal=causal)
        got_grads = mod.mha_backward(dout, cache)
        # the same computation with the index map of mha.concat in explicit loops
        qkv, c_qkv = lin.linear_forward(x, w_qkv, b_qkv)
        heads = _np.empty((n_head, 3, T, d), dtype=object)
        for eta, part, t, c in _np.ndindex(n_head, 3, T, d):
            heads[eta, part, t, c] = qkv[t, part * C + eta * d + c]
        y = _np.empty((T, C), dtype=object)
        c_att = []
        for eta in range(n_head):
            q, k, v = (heads[eta, part].view(Sym) for part in range(3))
            y_eta, cache_eta = att.attention_forward(q, k, v, causal=causal)
            c_att.append(cache_eta)
            for t, c in _np.ndindex(T, d):
                y[t, eta * d + c] = y_eta[t, c]
        want, c_o = lin.linear_forward(y.view(Sym), w_o, b_o)
        check = Check("mha", "forward out", flags, sizes)
        _compare_arrays(check, got, want)
        out.append(check)
        dy, dw_o, db_o = lin.linear_backward(dout, c_o)
        dqkv = _np.empty((T, 3 * C), dtype=object)
        for eta in range(n_head):
            dy_eta = _np.empty((T, d), dtype=object)
            for t, c in _np.ndindex(T, d):
                dy_eta[t, c] = dy[t, eta * d + c]
            for part, g in enumerate(att.attention_backward(dy_eta.view(Sym), c_att[eta])):
                for t, c in _np.ndindex(T, d):
                    dqkv[t, part * C + eta * d + c] = g[t, c]
        dx, dw_qkv, db_qkv = lin.linear_backward(dqkv.view(Sym), c_qkv)
        for name, g, w in zip(("dx", "dw_qkv", "db_qkv", "dw_o", "db_o"), got_grads,
                              (dx, dw_qkv, db_qkv, dw_o, db_o)):
            check = Check("mha", f"backward {name}", flags, sizes)
            _compare_arrays(check, g, w)
            out.append(check)
    return out


def validate_all() -> list[Check]:
    """Every op of the registry, every step and every table, and the mha template's layout."""
    out: list[Check] = []
    out.extend(validate_mha())
    for op in registry.ops():
        out.extend(validate_op(op))
    for name in STEP_NAMES:
        out.extend(validate_step(name))
    for t in registry.tables():
        out.extend(validate_table(t))
    return out


def main() -> int:  # pragma: no cover - a convenience: python -m qed.tools.translation
    bad = 0
    for c in validate_all():
        print(c)
        bad += not c.ok
    print(f"{'FAILED' if bad else 'ok'}: {bad} check(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

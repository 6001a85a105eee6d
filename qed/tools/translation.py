"""Translation validation: the printed NumPy and PyTorch text, executed on exact symbolic inputs.

The generated claims (derivations/proof/obligations.py) prove the SymPy objects that codegen prints:
the printed forward equals the specification, the printed backward its derivative. What the
printer makes of those objects is text; this module checks the text. It executes every
generated kernel of both backends — the very files in generated/numpy/ and generated/torch/,
not a re-rendering — on arrays whose entries are SymPy symbols (`x_0_0`, `x_0_1`, …) at small
concrete sizes, and compares every output and every gradient, entry by entry and exactly, with
the expressions the claims are about:

    forward   `forward_scope(op, when)[output]`  (the printed forward's SymPy object)
    backward  `backward_scope(op, when)[grad]`   (the printed backward's, cache expanded)
    steps     `Step.value(output)`               (derivations/optim.py: what *_update builds)
    tables    `Table.value(array, row, col)`     (derivations/language/ops.py: the entry formula)

each at the same concrete sizes, its sums unrolled, its entries `x[i, j]` mapped to the same
symbols. Scalar options (eps, lr, β₁, base, …) are passed as the op's own SymPy symbols, so the
comparison holds for every value of them; the step count `t` and integer inputs (token ids,
targets, the loss mask) are concrete integers; flags (`causal`) run both ways.

A NumPy kernel runs in a module namespace of its own (`load`), with the names the printed text
calls replaced by exact ones:

* `np` — a strict shim (`NUMPY`): the elementwise functions the printer emits (`np.exp`,
  `np.log`, `np.log1p`, `np.expm1`, `np.sqrt`, `np.tanh`, `np.cosh`, `np.sinh`, `np.sin`, `np.cos`, `np.abs`, `np.sign`, `np.negative`,
  `np.divide`, `np.multiply`, `np.add`, `np.subtract`, with `out=`) map to SymPy's functions;
  `np.max` to `Max` of the row, `np.errstate` to a context that does nothing, `np.maximum`/`np.minimum` to `Max`/`Min`, `np.hypot` to √(a² + b²); `np.arange` gives
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

Every scalar function above (np.exp, math.sqrt, scipy.special.expit, np.maximum, the row max's
fold) is evaluated by its row of derivations/language/functions.py (`functions.apply`), the one
table that every judge of the printed text reads.

A PyTorch kernel runs the same way (`load_torch`, `backend="torch"` of every `validate_*`): its
text with exact literals, compiled under its real path, its imports answered while it runs —
`torch` by the exact torch of qed/tools/torch_shim.py (a `Tensor` over an object ndarray, torch's
view, in-place, `out=` and promotion semantics, every elementwise function through the same
table, anything unmodelled an error), `math` by the same MATH, `_support`, `_validate` and the
kernels it calls (mha's linear and attention) by the generated files themselves, loaded the same
way and run as printed (`_validate`'s dtype checks hold of the shim's float dtype as written; its
`in_domain` decides a symbolic option as above). Beyond the kernels, the printed wrappers run
too: `<Op>Function.forward(ctx, …)` with a fresh context and `.backward(ctx, …)` (a gradient per
argument, in order, None for the integer inputs and options), the functional `<op>` through
`Function.apply`, and the `nn.Module` of an op with parameters (constructed from the sizes, its
Parameters set to the symbolic inputs); each against the same expected arrays.

The tiled attention (attention_tiled.py, both backends; `validate_tiled`) runs its loops at
blocks of 1 and 2 keys against attention_lse: its output against the forward expression, every
entry of its cache against the attention_lse kernel's, its backward on that cache against the
backward expressions.

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
proofs' normaliser (`derivations.proof.rewriting.Normaliser().residual`); before `expand`, products of
sums are multiplied out through sums and products only (`_distributed`: the same terms grouped
otherwise, a sum over key blocks against the whole row's). A residual that is clearly
non-zero at a pseudo-random point (30 digits, by the proofs' one evaluator `numeric.evaluate`
over the expression's DAG) is reported at
once, without the slower normal forms: numbers only ever reject, never accept. A kernel output
that holds a Python or SymPy float is an error (an inexact constant leaked).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import functools
import math as _math
import time
import types
from dataclasses import dataclass, field

import numpy as _np
import sympy as sp

from derivations import registry
from derivations.language import functions
from derivations.language.arrays import Array, CausalMask, RowMax, _label, document_form, entry, shape_of
from derivations.language.ops import Op, Table, grad_of
from derivations.proof import numeric
from derivations.proof.obligations import backward_scope, flag_sets, forward_scope, setting_for

from . import ROOT
from .exact_scalars import Namespace as _Namespace
from .exact_scalars import ShimError
from .exact_scalars import comparison as _comparison
from .exact_scalars import exact_value as _exact

__all__ = [
    "ShimError",
    "Sym",
    "NUMPY",
    "MATH",
    "SCIPY",
    "load",
    "load_torch",
    "Check",
    "validate_op",
    "validate_step",
    "validate_table",
    "validate_mha",
    "validate_tiled",
    "validate_all",
    "residual",
    "TRUSTED",
    "STEP_NAMES",
    "SIZES",
    "BACKENDS",
]

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
    "PyTorch's own semantics as qed/tools/torch_shim.py models them: views, in-place and out= "
    "writes, type promotion, masked_fill, take_along_dim, one_hot, chunk, cat, addmm and the "
    "reductions are written after torch's documented behaviour and executed on NumPy object "
    "arrays, not by torch; autograd itself (the graph, once_differentiable, a Module's "
    "registration) is modelled only as far as the printed wrappers call it",
    "the mha template's generality: its head split and merge are run at T = 2, n_head = 2, "
    "d = 2 only (the claim mha.concat justifies the index map for symbolic sizes)",
)

# step modules of generated/numpy/ and their Step objects (derivations/optim.py)
STEP_NAMES = ("sgd", "adam", "adamw")

# concrete sizes per op (default: the sizes where the generated claims search counterexamples,
# derivations.proof.obligations.setting_for); smaller where the symbolic expressions grow
SIZES: dict[str, dict[str, int]] = {
    # pairwise distinct, so that an axis read from the wrong argument (√n for √d_k) shows
    "attention": {"m": 2, "n": 3, "d_k": 5, "d_v": 4},
    "attention_lse": {"m": 2, "n": 3, "d_k": 5, "d_v": 4},
    "attention_dropout": {"m": 2, "n": 3, "d_k": 5, "d_v": 4},
}
TABLE_SIZES: dict[str, dict[str, int]] = {
    "rope_tables": {"T": 3, "d": 4},
    "sinusoidal_table": {"T": 3, "d": 4},
}
STEP_SHAPE = (2, 2)
STEP_T = 3


# ---------------------------------------------------------------------------------------------
# Exact scalars and arrays.


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


def _table(row: str):
    """Entry by entry, the row `row` of the functions table (derivations/language/functions.py):
    every scalar function of the printed text is evaluated there, on SymPy entries or on the
    exact values of another judge."""
    f = functions.FUNCTIONS[row]

    def entry(*args):
        return functions.apply(row, *args)

    entry.__name__ = row
    if f.arity not in (1, 2):
        raise ShimError(f"the functions table's {row} has arity {f.arity}")
    return entry


def _elementwise(name, row=None):
    return _ufunc(name, _table(row or name), 1)


def _binary(name, f):
    return _ufunc(name, f, 2)


def _operand(v):
    """An entry as an exact operand of arithmetic: Python and NumPy integers as SymPy Integers
    (so that / is exact); SymPy objects and other judges' values as they are."""
    if isinstance(v, (bool, _np.bool_, int, _np.integer)):
        return sp.Integer(int(v))
    return v


def _np_max(a, axis=None, keepdims=False, **kwargs):
    if kwargs or axis is None:
        raise ShimError(f"np.max: only axis=<int>, keepdims are modelled (got axis={axis}, {kwargs})")
    a = _np.moveaxis(_np.asarray(a, dtype=object), axis, -1)
    rows = a.reshape(-1, a.shape[-1])
    out = _np.empty(rows.shape[0], dtype=object)
    for k, row in enumerate(rows):
        out[k] = functools.reduce(_table("maximum"), [_exact(v) for v in row])  # Max(Max(a, b), c) = Max(a, b, c)
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


NUMPY = _Namespace(
    _label="np",
    # elementwise, exact: the functions table's rows
    exp=_elementwise("exp"),
    log=_elementwise("log"),
    sqrt=_elementwise("sqrt"),
    tanh=_elementwise("tanh"),
    cosh=_elementwise("cosh"),
    sinh=_elementwise("sinh"),
    sin=_elementwise("sin"),
    cos=_elementwise("cos"),
    abs=_elementwise("abs"),
    sign=_elementwise("sign"),
    log1p=_elementwise("log1p"),
    expm1=_elementwise("expm1"),
    maximum=_ufunc("maximum", _table("maximum"), 2),
    minimum=_ufunc("minimum", _table("minimum"), 2),
    hypot=_ufunc("hypot", _table("hypot"), 2),
    # arithmetic, exact
    negative=_ufunc("negative", lambda a: -_operand(a), 1),
    divide=_binary("divide", lambda a, b: _operand(a) / _operand(b)),
    multiply=_binary("multiply", lambda a, b: _operand(a) * _operand(b)),
    add=_binary("add", lambda a, b: _operand(a) + _operand(b)),
    subtract=_binary("subtract", lambda a, b: _operand(a) - _operand(b)),
    max=_np_max,
    arange=_arange,
    errstate=lambda **flags: contextlib.nullcontext(),  # no floating point here: nothing to report
    # structural: NumPy's own on object arrays
    ones=_structural_dtype(_np.ones, "ones"),
    zeros=_structural_dtype(_np.zeros, "zeros"),
    full=_structural_dtype(_np.full, "full"),
    empty=_structural_dtype(_np.empty, "empty"),
    where=_passthrough("where"),
    tri=_passthrough("tri"),
    broadcast_to=_passthrough("broadcast_to"),
    take_along_axis=_passthrough("take_along_axis"),
    swapaxes=_passthrough("swapaxes"),
    broadcast_shapes=_np.broadcast_shapes,
    split=_passthrough("split"),
    concatenate=_passthrough("concatenate"),
    sum=_passthrough("sum"),
    mean=_passthrough("mean"),
    asarray=_passthrough("asarray"),
    ravel=_passthrough("ravel"),
    dtype=_np.dtype,
    ndarray=_np.ndarray,
    integer=_np.integer,
    floating=_np.floating,
    float32=_np.float32,
    float64=_np.float64,
    bool_=_np.bool_,
    issubdtype=_np.issubdtype,
)

MATH = _Namespace(
    _label="math",
    sqrt=_table("sqrt"),
    exp=_table("exp"),
    log=_table("log"),
    tanh=_table("tanh"),
    cosh=_table("cosh"),
    sinh=_table("sinh"),
    hypot=_table("hypot"),
    erf=_table("erf"),
    sin=_table("sin"),
    cos=_table("cos"),
    pi=sp.pi,
    e=sp.E,
    inf=sp.oo,
    prod=_math.prod,
)

SCIPY = _Namespace(
    _label="scipy",
    special=_Namespace(
        _label="scipy.special",
        expit=lambda u: _apply(_table("sigmoid"), u),
        erf=lambda u: _apply(_table("erf"), u),
        ndtr=lambda u: _apply(_table("ndtr"), u),
    ),
)


def _exact_float(v):
    """`float(eps)` in the printed text: the option's exact value (a Symbol or a Rational)."""
    return sp.sympify(v)


def _symbolic_in_domain(real):
    """`_validate.in_domain` (`real`) for a number; for a symbol (every value of it at once),
    each bound its assumptions decide must hold, and one they leave open (β₁ < 1 of a
    non-negative β₁) is the hypothesis the run is made under (TRUSTED)."""

    def in_domain(op, name, value, lo, hi, lo_open, hi_open):
        if not isinstance(value, sp.Basic) or value.is_number:
            return real(op, name, value, lo, hi, lo_open, hi_open)
        holds = []
        if lo is not None:
            holds.append(value > lo if lo_open else value >= lo)
        if hi is not None:
            holds.append(value < hi if hi_open else value <= hi)
        if any(h is sp.false for h in holds):
            raise ValueError(f"{op}: the symbol {name} lies outside its domain")
        return None

    return in_domain


_VALIDATE_NUMPY: dict = {}


def _numpy_validate_module():
    """generated/numpy/_validate.py (or its edited text: `edited`) executed as that module, its
    statements counted for the judges' line coverage; the unedited one loaded once."""
    path = (GENERATED / "_validate.py").resolve()
    if path not in _EDITED and "module" in _VALIDATE_NUMPY:
        return _VALIDATE_NUMPY["module"]
    mod = types.ModuleType("generated.numpy._validate")
    mod.__file__ = str(path)
    mod.__package__ = "generated.numpy"
    _run_module(path, printed_text(path), mod.__dict__)
    if path not in _EDITED:
        _VALIDATE_NUMPY["module"] = mod
    return mod


def _validate_shim():
    """generated/numpy/_validate.py with its float-dtype checks opened to object arrays."""
    real = _numpy_validate_module()

    def floats(op, *args):
        for name, a, ndim, exact, declared in args:
            if not isinstance(a, _np.ndarray):
                raise TypeError(f"{op}: {name} must be a numpy array, got {type(a).__name__}")
            if a.dtype != object:
                raise ShimError(f"{op}: {name} has dtype {a.dtype}; the symbolic run needs object")
            if a.ndim < ndim or (exact and a.ndim != ndim):
                raise ValueError(
                    f"{op}: {name} has shape {a.shape}; expected "
                    f"{'exactly' if exact else 'at least'} {ndim} axes {declared}"
                )
        return _np.dtype(object)

    def float_dtype(op, dtype):
        return _np.dtype(object)

    scope = dict(vars(real), floats=floats, float_dtype=float_dtype, in_domain=_symbolic_in_domain(real.in_domain))
    for k, f in list(scope.items()):  # the module's own calls (`checked`) reach the shims too
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
            return ast.copy_location(ast.Call(ast.Name(_EXACT_NUMBER, ast.Load()), [ast.Constant(spelled)], []), node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Div, ast.Pow)):
            for side in ("left", "right"):
                v = getattr(node, side)
                if isinstance(v, ast.Constant) and type(v.value) is int:
                    setattr(
                        node,
                        side,
                        ast.copy_location(ast.Call(ast.Name(_EXACT_INT, ast.Load()), [ast.Constant(v.value)], []), v),
                    )
        return node


def _compile(path, text: str, ns: dict | None = None):
    """`text` with exact literals, compiled under the generated file's real path, so that a
    line of the code object (a traceback's) is that line of the printed file; with `ns`, a
    statement counter of line_coverage's before every statement (bound in `ns`), so a judge's
    Tracer sees which printed lines ran."""
    tree = ast.fix_missing_locations(_ExactLiterals(text).visit(ast.parse(text)))
    if ns is not None:
        from .line_coverage import HIT, instrument

        tree, ns[HIT] = instrument(tree, path)
    return compile(tree, str(path), "exec")


def _run_module(path, text: str, ns: dict) -> None:
    """Execute printed text as a module body, its statements counted (`_compile`)."""
    exec(_compile(path, text, ns), ns)


_LOADED: dict = {}

# edited texts of generated files, by path, that every loader of the judges reads instead of the
# file (`edited`: qed audit --text); empty outside that
_EDITED: dict = {}


def printed_text(path) -> str:
    """The text of a generated file as the judges read it: an edited copy inside `edited`."""
    from pathlib import Path

    path = Path(path).resolve()
    return _EDITED[path] if path in _EDITED else path.read_text()


def editing() -> bool:
    """Whether an edited text is in force (then no loader uses or fills its cache)."""
    return bool(_EDITED)


@contextlib.contextmanager
def edited(path, text: str):
    """Inside this block every judge's loader (this module's, the torch loader's, the field
    judge's) reads `text` for the generated file `path`, and everything that imports it is
    loaded afresh: one wrong edit of the printed text, judged as if it were on disk."""
    from pathlib import Path

    path = Path(path).resolve()
    _EDITED[path] = text
    try:
        yield
    finally:
        del _EDITED[path]


def load(name: str, source: str | None = None) -> types.ModuleType:
    """generated/numpy/<name>.py (or `source`, an edited copy of its text) as a module whose
    NumPy, math, SciPy, _special, _validate and `float` are the exact shims, compiled under the
    file's real path (a tracer's or a traceback's line is the printed file's). Not entered in
    sys.modules; the real module is untouched."""
    key = name if source is None and not _EDITED else None
    if key is not None and key in _LOADED:
        return _LOADED[key]
    text = source if source is not None else printed_text(GENERATED / f"{name}.py")
    mod = types.ModuleType(f"generated.numpy.{name}")
    mod.__package__ = "generated.numpy"
    mod.__file__ = str(GENERATED / f"{name}.py")
    ns = mod.__dict__
    ns[_EXACT_NUMBER] = sp.Rational
    ns[_EXACT_INT] = sp.Integer
    _run_module(GENERATED / f"{name}.py", text, ns)
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
        elif real == "copy":
            pass  # the standard library's (attention_tiled copies a SIGNATURE)
        elif real.startswith("generated.numpy."):
            ns[var] = load(real.rsplit(".", 1)[1])
        else:
            raise ShimError(f"generated/numpy/{name}.py imports {real}, which the shim does not model")
    ns["float"] = _exact_float  # shadows the builtin for this module's functions only
    if key is not None:
        _LOADED[key] = mod
    return mod


GENERATED_TORCH = ROOT / "generated" / "torch"
_LOADED_TORCH: dict = {}
_TORCH_IMPORTS = ("copy", "__future__")  # the standard modules a printed torch file may import


def load_torch(name: str, source: str | None = None, sources: dict | None = None) -> types.ModuleType:
    """generated/torch/<name>.py (or `source`, an edited copy of its text) as a module run on the
    exact torch (qed/tools/torch_shim.py): its literals exact, compiled under the real path, its
    imports answered while it runs — `torch` by the shim's namespace, `math` by MATH, a module of
    its own package (`from . import _support`, `_validate`, `linear`) by that generated file
    loaded the same way (its text from `sources[<module>]` where given: an edited helper), the
    standard `copy` and `__future__` by themselves; any other import is an error. `_validate` is
    generated/torch/_validate.py executed as printed: the shim's float dtype is a floating dtype,
    so its dtype checks hold of the exact tensors as written; only `in_domain` decides a symbolic
    option by its assumptions (as for NumPy). `float` is exact. Not entered in sys.modules."""
    sources = dict(sources or {})
    if source is not None:
        sources[name] = source
    return _TorchLoader(sources).load(name)


class _TorchLoader:
    """One tree of printed torch modules: each loaded once (the unedited ones cached across
    loads), the edited ones (`sources`) and everything that imports them afresh."""

    def __init__(self, sources: dict):
        self.sources = sources
        self.memo: dict = {}

    def load(self, name: str) -> types.ModuleType:
        if name in self.memo:
            return self.memo[name]
        cacheable = not self.sources and not _EDITED
        if cacheable and name in _LOADED_TORCH:
            return _LOADED_TORCH[name]
        from .torch_shim import TORCH

        text = self.sources.get(name)
        if text is None:
            text = printed_text(GENERATED_TORCH / f"{name}.py")
        mod = types.ModuleType(f"generated.torch.{name}")
        mod.__package__ = "generated.torch"
        mod.__file__ = str(GENERATED_TORCH / f"{name}.py")
        ns = mod.__dict__

        def imported(module, globals=None, locals=None, fromlist=(), level=0):
            if level == 1 and module == "":
                return types.SimpleNamespace(**{n: self.load(n) for n in fromlist})
            if level == 0 and module == "torch":
                return TORCH
            if level == 0 and module == "math":
                return MATH
            if level == 0 and module in _TORCH_IMPORTS:
                return builtins.__import__(module, globals, locals, fromlist, level)
            raise ShimError(
                f"generated/torch/{name}.py imports {'.' * level}{module}, which the torch shim does not model"
            )

        ns["__builtins__"] = dict(vars(builtins), __import__=imported)
        ns[_EXACT_NUMBER] = sp.Rational
        ns[_EXACT_INT] = sp.Integer
        ns["float"] = _exact_float  # shadows the builtin for this module's functions only
        self.memo[name] = mod
        _run_module(GENERATED_TORCH / f"{name}.py", text, ns)
        if name == "_validate":
            ns["in_domain"] = _symbolic_in_domain(ns["in_domain"])
        if cacheable:
            _LOADED_TORCH[name] = mod
        return mod


# ---------------------------------------------------------------------------------------------
# Exact comparison.


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
            point[s] = mpmath.mpf(k) / 97 if (s.is_positive or s.is_nonnegative) else mpmath.mpf(2 * k - 97) / 97
        try:
            # the proofs' one high-precision evaluator, over the residual's DAG
            v = numeric.evaluate(d, numeric.Point(symbols=point), memo={})
            return float(abs(v)) if mpmath.isfinite(v) else None
        except (TypeError, ValueError, ZeroDivisionError, numeric.EvaluationError):
            return None


class _TooLarge(Exception):
    pass


def _distributed(e, budget: int = 20000):
    """`e` with every product of sums multiplied out and, in each product, the exponentials
    merged (e^a·e^b = e^{a+b}), through sums, products, integer powers (a denominator's base)
    and exp's argument; every other function (Max, erf, …) is an atom, left as it is. Only
    those identities, so 0 only where `e` is 0; it decides in a blink what the same terms
    grouped otherwise give (a sum over key blocks against the whole row's, the online
    softmax's rescaling e^{m_1 − m}·e^{s − m_1} against e^{s − m}), where `expand` would open
    every argument and rebuild every Max. None past `budget` terms."""
    memo: dict = {}

    def merged(t):
        if not t.is_Mul:
            return t
        exps = [a for a in t.args if isinstance(a, sp.exp)]
        if len(exps) < 2:
            return t
        rest = [a for a in t.args if not isinstance(a, sp.exp)]
        return sp.Mul(*rest) * sp.exp(sp.Add(*[a.args[0] for a in exps]))

    def walk(x):
        hit = memo.get(x)
        if hit is not None:
            return hit
        if x.is_Add:
            r = sp.Add(*[walk(a) for a in x.args])
        elif x.is_Mul:
            terms = [sp.Integer(1)]
            for f in x.args:
                f = walk(f)
                fs = f.args if f.is_Add else (f,)
                if len(terms) * len(fs) > budget:
                    raise _TooLarge
                terms = [t * u for t in terms for u in fs]
            r = sp.Add(*[merged(t) for t in terms])
        elif x.is_Pow and x.exp.is_Integer:
            r = sp.Pow(walk(x.base), x.exp)
        elif isinstance(x, sp.exp):
            r = sp.exp(walk(x.args[0]))
        else:
            r = x
        memo[x] = r
        return r

    try:
        return walk(sp.sympify(e))
    except _TooLarge:
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
    if _distributed(d) == 0:
        return sp.Integer(0)
    e = sp.expand(d)
    if e == 0:
        return sp.Integer(0)
    from derivations.proof.rewriting import Normaliser, NormaliserError

    try:
        norm = Normaliser(ranges={})  # checked mode: no side condition is ever assumed
        r = norm.residual(expected, got)
    except NormaliserError:
        return e
    # a residual 0 only where no side condition was left open and no kink point recorded
    return sp.Integer(0) if r == 0 and not norm.undischarged and not getattr(norm, "kinks", ()) else e


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
        self.sizes = sizes  # size Symbol -> int
        self.arrays: dict = {}  # name -> ndarray (Sym for floats)
        self.entries: dict = {}  # Indexed (concrete) -> SymPy value
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
        self.scalars = scalars  # option Symbol -> value (t -> 3)
        self.maxes: dict = {}  # IndexedBase name -> (argument, columns)
        self._memo: dict = {}
        self._symbols: dict = {}  # expression -> the symbols that occur in it (bound ones too)

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
                    self.inputs.entries[entry(b, (sp.Integer(i), sp.Integer(j)))] = sp.Integer(0) if j <= i else -sp.oo
            return node.args[0] + b

        return sp.sympify(expr).replace(lambda e: isinstance(e, CausalMask), bias)

    def values(self, expr, shape: tuple) -> dict:
        """Every entry of array expression `expr` of declared shape (r, c) at the run's sizes:
        its index form for free indices (i, j), once, then each (i, j) substituted."""
        expr = self.unmask(expr)
        self.note_maxes(expr)
        form = entry(expr, (_I, _J))
        return {pos: self.concrete(form, {_I: sp.Integer(i), _J: sp.Integer(j)}) for (i, j), pos in _positions(shape)}

    def concrete(self, e, env: dict | None = None):
        """The value of index expression `e` with the bound indices of `env` (Dummy -> int):
        every `Sum` with concrete limits written out as the loop it is (hi < lo: 0), sizes and
        scalars substituted, each entry `x[i, j]` replaced by the run's symbol, an integer
        input's entry by its value, `max_<label>[i]` by Max of that row."""
        env = {} if env is None else env
        value = self._walk(sp.sympify(e), env)  # raises on an entry or a bound index it cannot resolve
        return document_form(value)

    def _occurring(self, e) -> frozenset:
        """The symbols that occur anywhere in `e` (what `e.has(s)` asks of each), once per node."""
        hit = self._symbols.get(e)
        if hit is None:
            if isinstance(e, sp.Symbol):
                hit = frozenset((e,))
            elif not e.args:
                hit = frozenset()
            else:
                hit = frozenset().union(*(self._occurring(a) for a in e.args if isinstance(a, sp.Basic)))
            self._symbols[e] = hit
        return hit

    def _walk(self, e, env):
        if e.is_Atom and not isinstance(e, sp.Indexed):  # (SymPy counts an Indexed as an atom)
            if isinstance(e, sp.Symbol):
                if e in env:
                    return env[e]
                if e in self.inputs.sizes:
                    return sp.Integer(self.inputs.sizes[e])
                if isinstance(e, sp.Dummy) and e not in self.scalars:
                    raise ShimError(f"the bound index {e} is unresolved")
                return self.scalars.get(e, e)
            return e
        occurring = self._occurring(e)
        free = tuple(sorted(((k, v) for k, v in env.items() if k in occurring), key=lambda kv: kv[0].sort_key()))
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
    "table cos", "step p_new", and for torch "Function.forward y", "Function.backward dx",
    "functional y", "Module.forward y"), the flags on, the sizes, the backend whose printed text
    ran ("numpy" or "torch"), and the entries that differ."""

    kernel: str
    what: str
    flags: tuple = ()
    sizes: dict = field(default_factory=dict)
    entries: int = 0
    mismatches: list = field(default_factory=list)  # (stored index, expected, got, residual)
    error: str = ""
    seconds: float = 0.0
    backend: str = "numpy"

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.error and self.entries > 0

    def __str__(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        where = "" if self.backend == "numpy" else f"({self.backend}) "
        head = f"{where}{self.kernel} {self.what}{flags} at {self.sizes}: "
        if self.error:
            return head + "ERROR " + self.error
        if self.mismatches:
            idx, want, got, res = self.mismatches[0]
            return (
                head + f"{len(self.mismatches)}/{self.entries} entries differ; first at {idx}: "
                f"expected {want}, got {got}, residual {res}"
            )
        return head + f"{self.entries} entries equal exactly ({self.seconds:.2f} s)"


BACKENDS = ("numpy", "torch")


class _Backend:
    """How the harness hands arrays to one backend's printed text and reads its results: NumPy's
    are the object arrays themselves; torch's are exact tensors (qed/tools/torch_shim.py) over
    a copy of their entries, and a result must be a float tensor."""

    def __init__(self, name: str, sources: dict | None = None):
        if name not in BACKENDS:
            raise ValueError(f"backend {name!r}: expected one of {BACKENDS}")
        self.name = name
        self.sources = sources

    def load(self, name: str, source: str | None = None):
        if self.name == "numpy":
            if self.sources:
                raise ValueError("sources= (edited helpers) is modelled for the torch backend")
            return load(name, source)
        return load_torch(name, source, self.sources)

    def wrap(self, a):
        if self.name == "numpy":
            return a
        from .torch_shim import tensor

        return tensor(a)

    error = ShimError  # what a result of the wrong kind raises

    def unwrap(self, got):
        """A result as an object ndarray; a result of the wrong kind is `self.error`."""
        if self.name == "numpy":
            return got
        from .torch_shim import unwrap_result

        return unwrap_result(got, self.error)


def _compare(check: Check, got, expected: dict, stored: tuple, backend: _Backend | None = None) -> None:
    if backend is not None:
        try:
            got = backend.unwrap(got)
        except ShimError as exc:
            check.error = str(exc)
            return
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
    """The op's concrete sizes: `sizes` if given, else its setting's made pairwise distinct (a
    size equal to an earlier one moved up by 2, its parity kept: an axis read from the wrong
    argument shows), with `SIZES`'s choices for the ops listed there."""
    setting = setting_for(op, {})
    named = {s.name: s for s in setting.sizes}
    chosen = {s: int(v) for s, v in setting.sizes.items()}
    if sizes is None:
        taken: set = set()
        for s in sorted(chosen, key=lambda s: (chosen[s], s.name)):
            while chosen[s] in taken:
                chosen[s] += 2
            taken.add(chosen[s])
    for k, v in (SIZES.get(op.name, {}) if sizes is None else sizes).items():
        chosen[named[k]] = int(v)
    return chosen


def _integer_values(lo: int, hi: int, count: int) -> list[int]:
    """Deterministic ids in [lo, hi], every value used where count allows (a 0/1 mask: 1, 0, 1)."""
    span = hi - lo + 1
    return [lo + (hi - lo - k) % span for k in range(count)]


def _camel(name: str) -> str:
    """The printed class name of an op: gelu_tanh -> GeluTanh (codegen's `camel`)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def option_arguments(op, when, setting, real, integer=int, reals_too=False) -> tuple[dict, dict]:
    """The keyword arguments of one call of `op`'s printed forward, and the values its integer
    options take in the expected side: a flag on where `when` names it, an integer option the
    setting's concrete value (`integer` of it), a real option `real(option)` (its Symbol in the
    symbolic run, a drawn number in the rational one, which also records it: `reals_too`)."""
    kwargs, scalars = {}, {}
    for o in op.options:
        if o.symbol is None:
            kwargs[o.name] = o.name in when
        elif o.symbol.is_integer:
            v = int(setting.scalars.get(o.symbol, 2))
            kwargs[o.name] = v
            scalars[o.symbol] = integer(v)
        else:
            kwargs[o.name] = real(o)
            if reals_too:
                scalars[o.symbol] = kwargs[o.name]
    return kwargs, scalars


def validate_op(
    op: Op | str,
    sizes: dict | None = None,
    source: str | None = None,
    flags=None,
    backend: str = "numpy",
    sources: dict | None = None,
) -> list[Check]:
    """Run generated/<backend>/<op>.py (or `source`) forward and backward on symbolic inputs,
    for every flag combination, and compare each output and gradient with the printed SymPy
    objects. For torch also the printed wrappers, against the same expected arrays: the
    `<Op>Function`'s static forward and backward (a fresh ctx), the functional `<op>` (through
    `Function.apply`) and, for an op with parameters, its `nn.Module` (constructed from the
    sizes, its parameters set to the symbolic ones). `sources` (torch): edited texts of other
    generated files by module name (`{"_support": …}`)."""
    op = registry.op(op) if isinstance(op, str) else op
    be = _Backend(backend, sources)
    return _validate_kernels(op, be, be.load(op.name, source), op.name, sizes, flags)


# the tiled attention (generated/<backend>/attention_tiled.py) computes attention_lse's outputs
# and gradients, with attention_lse's cache; its block sizes, at attention_lse's m = 2, n = 3:
# blocks of 1 (causal: the rows R = P … m − 1 of each block, the last block skipped) and 2
# (an uneven partition, 2 + 1)
TILED_BLOCKS = (1, 2)


def validate_tiled(
    backend: str = "numpy",
    blocks: tuple = TILED_BLOCKS,
    sizes: dict | None = None,
    source: str | None = None,
    sources: dict | None = None,
    flags=None,
) -> list[Check]:
    """generated/<backend>/attention_tiled.py (or `source`), its loops run as printed at each
    block size of `blocks`, causal off and on, against attention_lse (the claim
    attention_tiled.induction proves them equal for every partition of the keys):

    * `forward o` against attention_lse's forward expression;
    * `cache <entry>`: every entry of the tiled forward's cache equals the (validated)
      attention_lse kernel's, exactly (the running max and log-sum as the whole row's; the
      shared cache layout, so either backward takes the other's forward);
    * `backward <grad>`: the tiled backward on that attention_lse cache against attention_lse's
      backward expressions (the backward reads nothing but its cache: with the entries equal,
      on the tiled forward's own cache it is the same function of the same values);
    * torch: `AttentionTiledFunction` (block last) forward against the forward expression, its
      backward against the tiled backward of its own forward's cache, None for causal and
      block; the functional form, forward."""
    op = registry.op("attention_lse")
    be = _Backend(backend, sources)
    mod, lse = be.load("attention_tiled", source), be.load("attention_lse")
    size_map = _op_sizes(op, sizes)
    by_name = {s.name: v for s, v in size_map.items()}
    W, U = be.wrap, be.unwrap
    out: list[Check] = []
    for when in flag_sets(op) if flags is None else flags:
        inputs = _Inputs(size_map)
        args = [inputs.float_array(a) for a in op.inputs]
        ups = [inputs.float_array(grad_of(o)) for o in op.outputs]
        causal = "causal" in when
        expected = _Expected(inputs, {})
        fwd_scope, bwd_scope = forward_scope(op, when), backward_scope(op, when)
        want_fwd = {a.name: expected.values(fwd_scope[a], inputs.shape(a)) for a in op.outputs}
        want_bwd = {g.name: expected.values(bwd_scope[g], inputs.shape(g)) for g in op.grads}
        _, lse_cache = lse.attention_lse_forward(*[W(a) for a in args], causal=causal)
        for b in blocks:
            flags_on = tuple(sorted(when)) + (f"block={b}",)

            def check(what, flags_on=flags_on, **kw):
                return Check("attention_tiled", what, flags_on, by_name, backend=backend, **kw)

            t0 = time.perf_counter()
            try:
                o, cache = mod.attention_tiled_forward(*[W(a) for a in args], causal=causal, block=b)
            except Exception as exc:  # noqa: BLE001 - the run itself failing is a finding
                out.append(check("forward", error=f"{type(exc).__name__}: {exc}"))
                continue
            out += _checks(
                lambda what, _f: check(what), "forward", flags_on, op.outputs, (o,), want_fwd, inputs, be, t0
            )
            out += _same_cache(check, cache, lse_cache, U)
            t1 = time.perf_counter()
            try:
                grads = mod.attention_tiled_backward(*[W(u) for u in ups], lse_cache, block=b)
            except Exception as exc:  # noqa: BLE001
                out.append(check("backward", error=f"{type(exc).__name__}: {exc}"))
                continue
            out += _checks(
                lambda what, _f: check(what), "backward", flags_on, op.grads, grads, want_bwd, inputs, be, t1
            )
            if backend == "torch":
                own = [U(g) for g in mod.attention_tiled_backward(*[W(u) for u in ups], cache, block=b)]
                out += _torch_tiled_wrappers(mod, check, args, ups, causal, b, want_fwd, own, inputs, op, be)
    return out


def _same_cache(check, got: tuple, want: tuple, unwrap) -> list:
    """Each entry of cache `got` equals `want`'s: arrays entry by entry exactly, the rest (flags,
    sizes, the layout) equal."""
    if len(got) != len(want):
        return [check("cache", error=f"{len(got)} cache entries, expected {len(want)}")]
    out = []
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, (tuple, bool, int)) or w is None:
            if g != w:
                out.append(check(f"cache {k}", error=f"{g!r}, expected {w!r}"))
            continue
        c = check(f"cache {k}")
        try:
            _compare_arrays(c, unwrap(g), unwrap(w), shortcut=False)
        except ShimError as exc:
            c.error = str(exc)
        out.append(c)
    return out


def _torch_tiled_wrappers(mod, check, args, ups, causal, block, want_fwd, own, inputs, op, be):
    from .torch_shim import FunctionCtx

    W, U = be.wrap, be.unwrap
    out = []
    ctx = FunctionCtx()
    t0 = time.perf_counter()
    try:
        o = mod.AttentionTiledFunction.forward(ctx, *[W(a) for a in args], causal, block)
        out += _checks(lambda what, _f: check(what), "Function.forward", (), op.outputs, (o,), want_fwd, inputs, be, t0)
        gs = mod.AttentionTiledFunction.backward(ctx, *[W(u) for u in ups])
        if len(gs) != len(op.grads) + 2 or gs[-2:] != (None, None):
            raise ShimError(f"{len(gs)} gradients, expected {len(op.grads)} and None for causal, block")
        for g, name, w in zip(gs, [g.name for g in op.grads], own):
            c = check(f"Function.backward {name}")
            _compare_arrays(c, U(g), w)
            out.append(c)
        o = mod.attention_tiled(*[W(a) for a in args], causal=causal, block=block)
        out += _checks(
            lambda what, _f: check(what), "functional", (), op.outputs, (o,), want_fwd, inputs, be, time.perf_counter()
        )
    except Exception as exc:  # noqa: BLE001
        out.append(check("Function", error=f"{type(exc).__name__}: {exc}"))
    return out


def _validate_kernels(op: Op, be: _Backend, mod, file: str, sizes, flags) -> list[Check]:
    """The kernels `<file>_forward`, `<file>_backward` of module `mod` (and for torch its
    wrappers) against `op`'s expressions, every flag combination."""
    size_map = _op_sizes(op, sizes)
    by_name = {s.name: v for s, v in size_map.items()}
    setting = setting_for(op, {})
    fwd_fn = getattr(mod, f"{file}_forward")
    bwd_fn = getattr(mod, f"{file}_backward")
    out: list[Check] = []

    def check(what, flags_on, **kw):
        return Check(file, what, flags_on, by_name, backend=be.name, **kw)

    for when in flag_sets(op) if flags is None else flags:
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
        kwargs, scalars = option_arguments(op, when, setting, lambda o: o.symbol, sp.Integer)
        flags_on = tuple(sorted(when))
        expected = _Expected(inputs, scalars)
        fwd_scope = forward_scope(op, when)
        want_fwd = {a.name: expected.values(fwd_scope[a], inputs.shape(a)) for a in op.outputs}
        try:
            result, cache = fwd_fn(*[be.wrap(a) for a in args], **kwargs)
        except Exception as exc:  # noqa: BLE001 - the run itself failing is a finding
            out.append(check("forward", flags_on, error=f"{type(exc).__name__}: {exc}"))
            continue
        results = result if isinstance(result, tuple) else (result,)
        out += _checks(check, "forward", flags_on, op.outputs, results, want_fwd, inputs, be, t0)
        t1 = time.perf_counter()
        ups = [inputs.float_array(grad_of(o)) for o in op.outputs]
        bwd_scope = backward_scope(op, when)
        want_bwd = {g.name: expected.values(bwd_scope[g], inputs.shape(g)) for g in op.grads}
        try:
            grads = bwd_fn(*[be.wrap(u) for u in ups], cache)
        except Exception as exc:  # noqa: BLE001
            out.append(check("backward", flags_on, error=f"{type(exc).__name__}: {exc}"))
            continue
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(op.grads):
            out.append(check("backward", flags_on, error=f"{len(grads)} gradients returned, {len(op.grads)} declared"))
            continue
        out += _checks(check, "backward", flags_on, op.grads, grads, want_bwd, inputs, be, t1)
        if be.name == "torch":
            out += _torch_wrappers(
                op, mod, file, check, flags_on, by_name, args, kwargs, ups, inputs, want_fwd, want_bwd, be
            )
    return out


def _checks(check, what, flags_on, targets, results, want: dict, inputs, be, t0) -> list:
    """One Check per returned array: its entries against the proved expression's values."""
    out = []
    for a, got in zip(targets, results):
        c = check(f"{what} {a.name}", flags_on)
        _compare(c, got, want[a.name], _stored_shape(inputs.shape(a)), be)
        c.seconds = time.perf_counter() - t0
        out.append(c)
    return out


def _torch_wrappers(op, mod, file, check, flags_on, by_name, args, kwargs, ups, inputs, want_fwd, want_bwd, be) -> list:
    """The printed torch wrappers of one op, against the expected arrays of its kernels:

    * `<Op>Function.forward(ctx, *args, *options)` with a fresh ctx, then
      `<Op>Function.backward(ctx, *upstream)`: one gradient (or None) per argument, in the
      forward's argument order — None exactly for the integer inputs, the inputs without a
      gradient (rope's tables) and the options;
    * the functional `<op>(*args, **options)`, through `Function.apply`;
    * for an op with parameters, `<Op>(*sizes, **options)` (the nn.Module), its parameters
      (named by `op.module_params`) set to the symbolic ones, called on the inputs."""
    from .torch_shim import Function, FunctionCtx, Module, Parameter

    out: list[Check] = []
    t0 = time.perf_counter()
    fcls = getattr(mod, f"{_camel(file)}Function", None)
    if not (isinstance(fcls, type) and issubclass(fcls, Function)):
        return [check("Function", flags_on, error=f"no {_camel(file)}Function printed")]
    options = [kwargs[o.name] for o in op.options]
    ctx = FunctionCtx()
    try:
        y = fcls.forward(ctx, *[be.wrap(a) for a in args], *options)
    except Exception as exc:  # noqa: BLE001
        return [check("Function.forward", flags_on, error=f"{type(exc).__name__}: {exc}")]
    ys = y if isinstance(y, tuple) else (y,)
    out += _checks(check, "Function.forward", flags_on, op.outputs, ys, want_fwd, inputs, be, t0)
    t1 = time.perf_counter()
    try:
        gs = fcls.backward(ctx, *[be.wrap(u) for u in ups])
    except Exception as exc:  # noqa: BLE001
        return out + [check("Function.backward", flags_on, error=f"{type(exc).__name__}: {exc}")]
    gs = gs if isinstance(gs, tuple) else (gs,)
    arguments = list(op.inputs + op.params) + list(op.options)
    if len(gs) != len(arguments):
        return out + [
            check("Function.backward", flags_on, error=f"{len(gs)} gradients returned for {len(arguments)} arguments")
        ]
    grads = {g.name: g for g in op.grads}
    for a, g in zip(arguments, gs):
        name = grad_of(a).name if a in op.inputs + op.params else None
        if name in grads:
            c = check(f"Function.backward {name}", flags_on)
            if g is None:
                c.error = f"None where {name} is due (argument {a.name})"
            else:
                _compare(c, g, want_bwd[name], _stored_shape(inputs.shape(grads[name])), be)
            c.seconds = time.perf_counter() - t1
            out.append(c)
        elif g is not None:
            out.append(check("Function.backward", flags_on, error=f"a gradient returned for {a.name}, which has none"))
    # the functional form, through Function.apply (its argument order)
    fn = getattr(mod, file, None)
    t2 = time.perf_counter()
    try:
        y = fn(*[be.wrap(a) for a in args], **kwargs)
    except Exception as exc:  # noqa: BLE001
        out.append(check("functional", flags_on, error=f"{type(exc).__name__}: {exc}"))
    else:
        ys = y if isinstance(y, tuple) else (y,)
        out += _checks(check, "functional", flags_on, op.outputs, ys, want_fwd, inputs, be, t2)
    if not op.params:
        return out
    # the nn.Module
    mcls = getattr(mod, _camel(file), None)
    if not (isinstance(mcls, type) and issubclass(mcls, Module)):
        return out + [check("Module", flags_on, error=f"no nn.Module {_camel(file)} printed")]
    t3 = time.perf_counter()
    try:
        m = _construct(mcls, by_name, kwargs)
        named = dict(m.named_parameters())
        attr = dict(getattr(op, "module_params", None) or {})
        want_names = [attr.get(p.name, p.name) for p in op.params]
        if sorted(named) != sorted(want_names):
            raise ShimError(f"parameters {sorted(named)}, expected {sorted(want_names)}")
        for p, a in zip(op.params, args[len(op.inputs) :]):
            param = named[attr.get(p.name, p.name)]
            if not isinstance(param, Parameter) or param.shape != tuple(a.shape):
                raise ShimError(
                    f"parameter {attr.get(p.name, p.name)} has shape {param.shape}, expected {tuple(a.shape)}"
                )
            param._a[...] = a
        y = m(*[be.wrap(a) for a in args[: len(op.inputs)]])
    except Exception as exc:  # noqa: BLE001
        return out + [check("Module.forward", flags_on, error=f"{type(exc).__name__}: {exc}")]
    ys = y if isinstance(y, tuple) else (y,)
    out += _checks(check, "Module.forward", flags_on, op.outputs, ys, want_fwd, inputs, be, t3)
    return out


def _construct(mcls, by_name: dict, kwargs: dict):
    """The printed nn.Module built from the run's sizes (its positional parameters are size
    names) and options (keyword-only, as the kernel's)."""
    import inspect

    pos, kw = [], {}
    for p in list(inspect.signature(mcls.__init__).parameters.values())[1:]:
        if p.kind is p.POSITIONAL_OR_KEYWORD:
            if p.name not in by_name:
                raise ShimError(f"{mcls.__name__}({p.name}): not a size of the op")
            pos.append(by_name[p.name])
        elif p.kind is p.KEYWORD_ONLY and p.name in kwargs:
            kw[p.name] = kwargs[p.name]
    return mcls(*pos, **kw)


def _steps() -> dict:
    from derivations.optim import STEPS

    return STEPS


def validate_step(
    name: str,
    source: str | None = None,
    shape: tuple = STEP_SHAPE,
    t: int = STEP_T,
    backend: str = "numpy",
    sources: dict | None = None,
) -> list[Check]:
    """Run generated/<backend>/<name>.py's `<name>_step` on symbolic p, g, m, v (and symbolic
    hyperparameters, t concrete) and compare each returned array with `Step.value`."""
    step = _steps()[name]
    be = _Backend(backend, sources)
    t0 = time.perf_counter()
    mod = be.load(name, source)
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
        result = fn(*[be.wrap(a) for a in args], **kwargs)
    except Exception as exc:  # noqa: BLE001
        return [Check(name, "step", (), sz, error=f"{type(exc).__name__}: {exc}", backend=backend)]
    results = result if isinstance(result, tuple) else (result,)
    expected = _Expected(inputs, scalars)
    out = []
    for o, got in zip(step.outputs, results):
        check = Check(name, f"step {o.name}", (), sz, backend=backend)
        want = expected.values(step.value(o), (r, c))
        _compare(check, got, want, (r, c), be)
        check.seconds = time.perf_counter() - t0
        out.append(check)
    if len(results) != len(step.outputs):
        out.append(
            Check(
                name,
                "step",
                (),
                sz,
                error=f"{len(results)} arrays returned, {len(step.outputs)} declared",
                backend=backend,
            )
        )
    return out


def validate_table(
    table: Table | str,
    sizes: dict | None = None,
    source: str | None = None,
    backend: str = "numpy",
    sources: dict | None = None,
) -> list[Check]:
    """Call the generated table function at concrete sizes with a symbolic `base` (every option
    a Symbol) and compare every entry with `Table.value`."""
    table = registry.table(table) if isinstance(table, str) else table
    be = _Backend(backend, sources)
    t0 = time.perf_counter()
    sizes = dict(TABLE_SIZES.get(table.name, {}) if sizes is None else sizes)
    mod = be.load(table.file, source)
    fn = getattr(mod, table.name)
    options = {o.name: o.symbol for o in table.options if o.symbol is not None}
    try:
        result = fn(*[sizes[s.name] for s in table.sizes], **options)
    except Exception as exc:  # noqa: BLE001
        return [Check(table.name, "table", (), sizes, error=f"{type(exc).__name__}: {exc}", backend=backend)]
    results = result if isinstance(result, tuple) else (result,)
    subs = {s: sp.Integer(sizes[s.name]) for s in table.sizes}
    out = []
    for a, got in zip(table.arrays, results):
        check = Check(table.name, f"table {a.name}", (), sizes, backend=backend)
        rows, cols = (int(sp.sympify(x).xreplace(subs)) for x in a.shape)
        want = {(i, j): table.value(a.name, i, j, sizes, options) for i in range(rows) for j in range(cols)}
        _compare(check, got, want, (rows, cols), be)
        check.seconds = time.perf_counter() - t0
        out.append(check)
    return out


def _symbols(name: str, shape: tuple) -> Sym:
    out = _np.empty(shape, dtype=object)
    for pos in _np.ndindex(*shape):
        out[pos] = sp.Symbol(f"{name}_{'_'.join(map(str, pos))}", real=True)
    return out.view(Sym)


def _compare_arrays(check: Check, got, want, shortcut: bool = True) -> None:
    """Entry by entry, exactly (`residual`), two object arrays of the same shape (`shortcut`:
    a difference of more than 2000 operations counts as a mismatch without being decided)."""
    got, want = _np.asarray(got, dtype=object), _np.asarray(want, dtype=object)
    if got.shape != want.shape:
        check.error = f"shape {got.shape}, expected {want.shape}"
        return
    for pos in _np.ndindex(*want.shape):
        value = _exact(got[pos])
        d = sp.sympify(want[pos]) - sp.sympify(value)
        if d != 0 and shortcut and sp.count_ops(d) > 2000:
            # the layout moves entries, it computes nothing: the right text gives the very same
            # expression. A large difference is not expanded (that can take minutes); it counts
            # as a mismatch, even where it vanishes at sample points — never as equal.
            r = d
        else:
            r = residual(want[pos], value)
        check.entries += 1
        if r != 0:
            check.mismatches.append((pos, want[pos], got[pos], r))
            return  # one wrong entry fails the array; the rest need not be decided


def validate_mha(
    T: int = 2,
    n_head: int = 2,
    d: int = 2,
    source: str | None = None,
    backend: str = "numpy",
    sources: dict | None = None,
) -> list[Check]:
    """The multi-head attention template's layout, run as printed on symbolic inputs, against
    the index map of `mha.concat` written out by hand: head η of Q, K and V is the fused
    projection's columns η·d + c, C + η·d + c and 2C + η·d + c (c < d); the merge puts head η's
    column c at η·d + c. Forward and backward, causal on and off; the kernels it calls are the
    (validated) generated linear and attention of the same backend, so what this checks is the
    template's text. For torch also the functional `mha` (through the Functions' `apply`) and
    the `MultiHeadAttention` module (its two Linear submodules' parameters set to the symbolic
    ones), forward."""
    be = _Backend(backend, sources)
    C = n_head * d
    mod = be.load("mha", source)
    lin, att = be.load("linear"), be.load("attention")
    W, U = be.wrap, be.unwrap
    sizes = {"T": T, "C": C, "n_head": n_head, "d": d}
    out = []
    for causal in (False, True):
        flags = ("causal",) if causal else ()

        def check(what, flags=flags):
            return Check("mha", what, flags, sizes, backend=backend)

        x, w_qkv, b_qkv = _symbols("x", (T, C)), _symbols("w_qkv", (3 * C, C)), _symbols("b_qkv", (3 * C,))
        w_o, b_o, dout = _symbols("w_o", (C, C)), _symbols("b_o", (C,)), _symbols("dout", (T, C))
        try:
            got, cache = mod.mha_forward(W(x), W(w_qkv), W(b_qkv), W(w_o), W(b_o), n_head=n_head, causal=causal)
            got_grads = mod.mha_backward(W(dout), cache)
            got, got_grads = U(got), [U(g) for g in got_grads]
        except Exception as exc:  # noqa: BLE001 - the run itself failing is a finding
            out.append(check("forward", error=f"{type(exc).__name__}: {exc}"))
            continue
        # the same computation with the index map of mha.concat in explicit loops
        qkv, c_qkv = lin.linear_forward(W(x), W(w_qkv), W(b_qkv))
        qkv = U(qkv)
        heads = _np.empty((n_head, 3, T, d), dtype=object)
        for eta, part, t, c in _np.ndindex(n_head, 3, T, d):
            heads[eta, part, t, c] = qkv[t, part * C + eta * d + c]
        y = _np.empty((T, C), dtype=object)
        c_att = []
        for eta in range(n_head):
            q, k, v = (W(heads[eta, part].copy().view(Sym)) for part in range(3))
            y_eta, cache_eta = att.attention_forward(q, k, v, causal=causal)
            y_eta = U(y_eta)
            c_att.append(cache_eta)
            for t, c in _np.ndindex(T, d):
                y[t, eta * d + c] = y_eta[t, c]
        want, c_o = lin.linear_forward(W(y.view(Sym)), W(w_o), W(b_o))
        want = U(want)
        c = check("forward out")
        _compare_arrays(c, got, want)
        out.append(c)
        dy, dw_o, db_o = (U(g) for g in lin.linear_backward(W(dout), c_o))
        dqkv = _np.empty((T, 3 * C), dtype=object)
        for eta in range(n_head):
            dy_eta = _np.empty((T, d), dtype=object)
            for t, c in _np.ndindex(T, d):
                dy_eta[t, c] = dy[t, eta * d + c]
            for part, g in enumerate(att.attention_backward(W(dy_eta.view(Sym)), c_att[eta])):
                g = U(g)
                for t, c in _np.ndindex(T, d):
                    dqkv[t, part * C + eta * d + c] = g[t, c]
        dx, dw_qkv, db_qkv = (U(g) for g in lin.linear_backward(W(dqkv.view(Sym)), c_qkv))
        for name, g, w in zip(("dx", "dw_qkv", "db_qkv", "dw_o", "db_o"), got_grads, (dx, dw_qkv, db_qkv, dw_o, db_o)):
            c = check(f"backward {name}")
            _compare_arrays(c, g, w)
            out.append(c)
        if backend == "torch":
            out += _torch_mha_wrappers(mod, check, x, w_qkv, b_qkv, w_o, b_o, n_head, C, causal, want, be)
    return out


def _torch_mha_wrappers(mod, check, x, w_qkv, b_qkv, w_o, b_o, n_head, C, causal, want, be):
    """The functional `mha` and the `MultiHeadAttention` module, forward, against `want`."""
    W, U = be.wrap, be.unwrap
    out = []
    c = check("functional out")
    try:
        _compare_arrays(c, U(mod.mha(W(x), W(w_qkv), W(b_qkv), W(w_o), W(b_o), n_head=n_head, causal=causal)), want)
    except Exception as exc:  # noqa: BLE001
        c.error = f"{type(exc).__name__}: {exc}"
    out.append(c)
    c = check("Module.forward out")
    try:
        m = mod.MultiHeadAttention(C, n_head, causal=causal)
        named = dict(m.named_parameters())
        values = {"c_attn.weight": w_qkv, "c_attn.bias": b_qkv, "c_proj.weight": w_o, "c_proj.bias": b_o}
        if sorted(named) != sorted(values):
            raise ShimError(f"parameters {sorted(named)}, expected {sorted(values)}")
        for k, v in values.items():
            if named[k].shape != tuple(v.shape):
                raise ShimError(f"parameter {k} has shape {named[k].shape}, expected {v.shape}")
            named[k]._a[...] = v
        _compare_arrays(c, U(m(W(x))), want)
    except Exception as exc:  # noqa: BLE001
        c.error = f"{type(exc).__name__}: {exc}"
    out.append(c)
    return out


def validate_all(backend: str | None = None) -> list[Check]:
    """Every op of the registry, every step and every table, and the mha template's layout, for
    `backend` ("numpy" or "torch"; None: both)."""
    out: list[Check] = []
    for be in BACKENDS if backend is None else (backend,):
        out.extend(validate_mha(backend=be))
        for op in registry.ops():
            out.extend(validate_op(op, backend=be))
        out.extend(validate_tiled(backend=be))
        for name in STEP_NAMES:
            out.extend(validate_step(name, backend=be))
        for t in registry.tables():
            out.extend(validate_table(t, backend=be))
    return out


def main() -> int:  # pragma: no cover - a convenience: python -m qed.tools.translation
    import sys

    bad = 0
    for c in validate_all(sys.argv[1] if len(sys.argv) > 1 else None):
        print(c)
        bad += not c.ok
    print(f"{'FAILED' if bad else 'ok'}: {bad} check(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""An exact PyTorch: the subset of `torch` that the printed generated/torch/ text calls, on exact
entries.

Translation validation (qed/tools/translation.py) runs every file of generated/torch/, as printed,
with its `torch` replaced by `TORCH`, this module's namespace. A `Tensor` holds an object ndarray
of exact entries (SymPy objects, or the exact values of another judge) and a `dtype`:

    FLOAT   the one floating dtype: torch.float, float32, float64 (and the default dtype) alike;
            every entry exact, no operation rounds
    LONG    int64 ids (token ids, targets, the loss mask): an int64 ndarray
    BOOL    a boolean mask (`torch.ones(…, dtype=torch.bool).triu(1)`), or the value of a
            comparison: `a > b` is Heaviside(a − b) with H(0) = 0, `a >= b` with H(0) = 1, `==`
            on numbers 1 or 0 (translation.py's `_comparison`), i.e. exactly what `.to(dtype)` of
            the boolean is; used as a mask its entries must be decided (0 or 1)

Torch's own semantics are kept where the printed text relies on them: basic indexing, `reshape`,
`transpose`, `.mT`, `chunk` and `expand` give views (NumPy views of the same entries; an expanded
view is read-only, as writing through torch's overlapping memory is an error), in-place methods
(`exp_`, `mul_`, `add_(b, alpha=α)`: t ← t + α·b, `addcmul_(a, b, value=v)`: t ← t + v·a·b,
`addcdiv_`: t ← t + v·a/b, `neg_`, `masked_fill_`) and in-place operators write into the
tensor's own entries (so into every view of them), `out=` writes into `out`, `.to(dtype)` and
`.long()` return the tensor itself when nothing changes, comparisons and reductions follow
torch's type promotion (an int tensor with a float scalar is float, `/` is true division).

Every elementwise scalar function (`torch.exp`, `Tensor.tanh_`, `torch.sigmoid`, `torch.rsqrt`,
`torch.clamp`, `torch.maximum`, …) is a row of derivations/language/functions.py, evaluated by
`functions.apply(name, entry)`: the spellings of its `torch` column are this namespace's, so a
row added there is modelled here. A row-wise max (`torch.amax`) folds the table's `maximum` over
the row (Max(Max(a, b), c) is Max(a, b, c)).

`torch.autograd.Function`, `torch.nn.Module`, `torch.nn.Parameter` and `torch.nn.init.*` are
modelled minimally: `Function.apply` calls the printed `forward` with a fresh context
(`FunctionCtx`: `save_for_backward`, `saved_tensors`, attributes; a saved tensor changed in place
before `saved_tensors` is read is an error, as torch's version counter makes it), a `Module`
records its `Parameter`s and submodules in assignment order and calls `forward`, `init.normal_`
and `init.uniform_` leave no value (an entry that is read later is an error), `init.zeros_` and
`init.ones_` write 0 and 1.

Anything else — an attribute of `torch` or of a tensor that is not modelled, an argument not
modelled (`rounding_mode=`, `dtype=` of a reduction), a float that is not exact — raises
`ShimError` naming it: never a silent pass.
"""

from __future__ import annotations

import functools
import math as _math

import numpy as _np
import sympy as sp

from derivations.language import functions

from .exact_scalars import Namespace as _Namespace
from .exact_scalars import ShimError
from .exact_scalars import comparison as _comparison
from .exact_scalars import exact_value as _exact

__all__ = [
    "Tensor",
    "Parameter",
    "Module",
    "Function",
    "FunctionCtx",
    "dtype",
    "FLOAT",
    "LONG",
    "BOOL",
    "TORCH",
    "ShimAttributeError",
    "tensor",
    "as_array",
]


class ShimAttributeError(ShimError, AttributeError):
    """An attribute the shim does not model (an AttributeError too, so that `hasattr` probes of
    other libraries see none)."""


# ---------------------------------------------------------------------------------------------
# dtypes and devices.


class dtype:
    """torch.dtype: FLOAT (every float dtype), LONG, BOOL."""

    __slots__ = ("name", "is_floating_point", "is_complex", "is_signed")

    def __init__(self, name, is_floating_point):
        self.name = name
        self.is_floating_point = is_floating_point
        self.is_complex = False
        self.is_signed = name != "bool"

    def __repr__(self):
        return f"torch.{self.name}"

    def __getattr__(self, name):
        raise ShimAttributeError(f"the printed text uses dtype.{name}, which the torch shim does not model")


FLOAT = dtype("float_exact", True)
LONG = dtype("int64", False)
BOOL = dtype("bool", False)


class device:
    """torch.device: one, where the exact entries live."""

    type = "exact"

    def __repr__(self):
        return "device(type='exact')"


DEVICE = device()


def _device(d):
    if d is None or d is DEVICE or d == "cpu":
        return DEVICE
    raise ShimError(f"device={d!r}: the torch shim models one device")


def _dtype(d, default=FLOAT):
    if d is None:
        return default
    if not isinstance(d, dtype):
        raise ShimError(f"dtype={d!r} is not a torch dtype of the shim")
    return d


# ---------------------------------------------------------------------------------------------
# Entries.


def _exact_entries(a) -> _np.ndarray:
    """An int or bool array (or one of comparison values) as an object array of exact entries."""
    a = _np.asarray(a)
    out = _np.empty(a.shape, dtype=object)
    for pos in _np.ndindex(*a.shape):
        out[pos] = _exact(a[pos])
    return out


def _as_float(t: Tensor) -> _np.ndarray:
    return t._a if t.dtype is FLOAT else _exact_entries(t._a)


def _decided(v) -> bool:
    """A mask entry: a boolean, or a comparison's value that is 0 or 1."""
    if isinstance(v, (bool, _np.bool_)):
        return bool(v)
    if isinstance(v, (int, _np.integer)) and v in (0, 1):
        return bool(v)
    if isinstance(v, sp.Basic) and v.is_Integer and v in (0, 1):
        return bool(v)
    raise ShimError(f"a mask entry {v!r} is not decided (0 or 1): a symbolic comparison used as a boolean")


def _mask(t) -> _np.ndarray:
    if not isinstance(t, Tensor) or t.dtype is not BOOL:
        raise ShimError(f"a mask must be a bool tensor, got {t!r}")
    if t._a.dtype == bool:
        return t._a
    return _np.frompyfunc(_decided, 1, 1)(t._a).astype(bool)


def _scalar(x):
    """A Python or exact scalar operand: (value, dtype it promotes like)."""
    if isinstance(x, (bool, _np.bool_)):
        return bool(x), BOOL
    if isinstance(x, (int, _np.integer)):
        return int(x), LONG
    if isinstance(x, (float, _np.floating)):
        raise ShimError(f"an inexact float {x!r} reached a tensor operation")
    if isinstance(x, sp.Basic):
        if x.atoms(sp.Float):
            raise ShimError(f"an inexact Float in {x}")
        return x, (LONG if x.is_Integer else FLOAT)
    if getattr(type(x), "__qed_function__", None) is not None:
        return x, FLOAT
    raise ShimError(f"an operand of type {type(x).__name__}: {x!r}")


def _promote(*kinds) -> dtype:
    """torch's promotion among tensors and scalars: float over int over bool."""
    if FLOAT in kinds:
        return FLOAT
    if LONG in kinds:
        return LONG
    return BOOL


def _operands(*xs):
    """The operands' arrays (or scalars) converted to the promoted dtype's kind, and that dtype."""
    vals, kinds = [], []
    for x in xs:
        if isinstance(x, Tensor):
            vals.append(x)
            kinds.append(x.dtype)
        else:
            v, k = _scalar(x)
            vals.append(v)
            kinds.append(k)
    out = _promote(*kinds)
    arrays = []
    for v, k in zip(vals, kinds):
        if isinstance(v, Tensor):
            arrays.append(
                _as_float(v) if out is FLOAT else v._a.astype(_np.int64) if out is LONG and v.dtype is BOOL else v._a
            )
        elif out is FLOAT and k is not FLOAT:
            arrays.append(sp.Integer(int(v)))
        else:
            arrays.append(v)
    return arrays, out


def _wrap(a, dt: dtype) -> Tensor:
    if not isinstance(a, _np.ndarray):
        arr = _np.empty((), dtype=object if dt is FLOAT else _np.int64 if dt is LONG else bool)
        arr[()] = a
        a = arr
    if dt is FLOAT and a.dtype != object:
        a = _exact_entries(a)
    return Tensor(a, dt)


def _binary(f, x, y, *, true_div=False):
    (a, b), dt = _operands(x, y)
    if true_div and dt is not FLOAT:
        (a, b), dt = _operands(_to_float(x), _to_float(y))
    return _wrap(f(a, b), dt)


def _to_float(x):
    if isinstance(x, Tensor):
        return x if x.dtype is FLOAT else Tensor(_exact_entries(x._a), FLOAT)
    v, _ = _scalar(x)
    return sp.Integer(int(v)) if isinstance(v, (bool, int)) else v


def _compare(x, y, how) -> Tensor:
    (a, b), _ = _operands(x, y)
    out = _np.frompyfunc(lambda u, v: _comparison(u, v, how), 2, 1)(a, b)
    return _wrap(_np.asarray(out, dtype=object), BOOL)


def _tensor(x) -> Tensor:
    if isinstance(x, Tensor):
        return x
    v, k = _scalar(x)
    return _wrap(v, k)


def _axis(dim, ndim) -> int:
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ShimError(f"dim={dim!r}: an integer axis is modelled")
    if not -ndim <= dim < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % max(ndim, 1)


# ---------------------------------------------------------------------------------------------
# The table's functions.


def _table(name: str):
    """Entry by entry, the table's row `name` (functions.apply)."""
    return _np.frompyfunc(lambda v: functions.apply(name, v), 1, 1)


def _table2(name: str):
    return _np.frompyfunc(lambda u, v: functions.apply(name, u, v), 2, 1)


def _unary(name: str, t) -> Tensor:
    t = _tensor(t)
    return Tensor(_np.asarray(_table(name)(_as_float(t)), dtype=object), FLOAT)


def _maximum(a, b) -> Tensor:
    return _binary(lambda u, v: _np.asarray(_table2("maximum")(u, v), dtype=object), a, b)


def _minimum(a, b) -> Tensor:
    return _binary(lambda u, v: _np.asarray(_table2("minimum")(u, v), dtype=object), a, b)


def _hypot(a, b) -> Tensor:
    return _binary(lambda u, v: _np.asarray(_table2("hypot")(u, v), dtype=object), a, b)


def _clamp(t, min=None, max=None):
    if min is None and max is None:
        raise ShimError("torch.clamp without a bound")
    out = _tensor(t)
    if min is not None:
        out = _maximum(out, min)
    if max is not None:
        out = _minimum(out, max)
    return out


def _write(out: Tensor, res: Tensor, what: str) -> Tensor:
    """`res` into `out`'s own entries (out= and in-place forms): the shapes must agree."""
    if not isinstance(out, Tensor):
        raise ShimError(f"{what}: out= must be a tensor")
    if tuple(res._a.shape) != tuple(out._a.shape):
        raise RuntimeError(f"{what}: the result has shape {tuple(res._a.shape)}, the output {tuple(out._a.shape)}")
    if out.dtype is not res.dtype and out.dtype is not FLOAT:
        raise RuntimeError(f"{what}: result type {res.dtype} can't be cast to {out.dtype}")
    out._a[...] = _as_float(res) if out.dtype is FLOAT else res._a
    return out


def _result(res, out, what):
    return res if out is None else _write(out, res, what)


def _reduce_rows(a: _np.ndarray, axis: int, keepdim: bool, fold):
    """`fold` over axis `axis` of object array `a`, one row at a time."""
    moved = _np.moveaxis(a, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    if rows.shape[-1] == 0:
        raise RuntimeError("a max over an empty axis")
    out = _np.empty(rows.shape[0], dtype=object)
    for k, row in enumerate(rows):
        out[k] = functools.reduce(fold, list(row))
    out = out.reshape(moved.shape[:-1])
    if keepdim:
        out = _np.expand_dims(out, axis)
    return out


def _fold(name):
    return lambda u, v: functions.apply(name, u, v)


# ---------------------------------------------------------------------------------------------
# Tensor.


class Tensor:
    """An exact tensor: an ndarray of exact entries (`_a`; object for FLOAT) and its dtype."""

    __slots__ = ("_a", "dtype")
    _op_priority = 1000.0  # SymPy defers its operators to ours (sp.sqrt(2) * t)
    __array_priority__ = 1000.0

    def __init__(self, a, dt: dtype):
        self._a = a
        self.dtype = dt

    def __getattr__(self, name):
        raise ShimAttributeError(f"the printed text uses Tensor.{name}, which the torch shim does not model")

    def __repr__(self):
        return f"tensor({self._a.tolist()!r}, dtype={self.dtype!r})"

    __hash__ = object.__hash__

    # -- shape
    @property
    def shape(self) -> tuple:
        return tuple(int(s) for s in self._a.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self._a.ndim

    ndim = property(dim)

    def numel(self) -> int:
        return int(self._a.size)

    def __len__(self):
        if self._a.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._a.shape[0]

    @property
    def device(self):
        return DEVICE

    @property
    def mT(self):
        if self._a.ndim < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices")
        return Tensor(_np.swapaxes(self._a, -1, -2), self.dtype)

    @property
    def T(self):
        if self._a.ndim != 2:
            raise ShimError(f"Tensor.T of a {self._a.ndim}-D tensor (deprecated in torch): only 2-D is modelled")
        return Tensor(self._a.T, self.dtype)

    def transpose(self, d0, d1):
        n = self._a.ndim
        return Tensor(_np.swapaxes(self._a, _axis(d0, n), _axis(d1, n)), self.dtype)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        for s in shape:
            if not isinstance(s, int) or isinstance(s, bool):
                raise ShimError(f"reshape to {shape}: integer sizes are modelled")
        return Tensor(self._a.reshape(shape), self.dtype)

    def expand(self, *sizes):
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        cur = self._a.shape
        lead = len(sizes) - len(cur)
        if lead < 0:
            raise RuntimeError(f"expand{sizes}: fewer sizes than the tensor's {len(cur)} axes")
        shape = tuple(cur[k - lead] if s == -1 and k >= lead else s for k, s in enumerate(sizes))
        if shape == cur:
            return Tensor(self._a[...], self.dtype)
        return Tensor(_np.broadcast_to(self._a, shape), self.dtype)  # read-only: overlapping

    def contiguous(self):
        if self._a.flags.c_contiguous:
            return self
        return Tensor(_np.ascontiguousarray(self._a), self.dtype)

    def chunk(self, chunks, dim=0):
        n = self._a.shape[_axis(dim, self._a.ndim)]
        step = -(-n // chunks)
        ax = _axis(dim, self._a.ndim)
        out = []
        for lo in range(0, n, step):
            idx = [slice(None)] * self._a.ndim
            idx[ax] = slice(lo, min(lo + step, n))
            out.append(Tensor(self._a[tuple(idx)], self.dtype))
        return tuple(out)

    def triu(self, diagonal=0):
        if self._a.ndim < 2:
            raise RuntimeError("triu: the tensor must have at least 2 dimensions")
        return Tensor(_np.triu(self._a, int(diagonal)), self.dtype)

    def sum_to_size(self, *size):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        a = self._a
        lead = a.ndim - len(size)
        if lead < 0:
            raise RuntimeError(f"size {size} is not expandable to {a.shape}")
        axes = tuple(range(lead)) + tuple(lead + k for k, s in enumerate(size) if s == 1 and a.shape[lead + k] != 1)
        for k, s in enumerate(size):
            if s not in (1, a.shape[lead + k]):
                raise RuntimeError(f"size {size} is not expandable to {a.shape}")
        out = _np.sum(a, axis=axes, keepdims=True) if axes else a
        return _wrap(_np.asarray(out).reshape(size), self.dtype if self.dtype is not BOOL else LONG)

    # -- dtype
    def to(self, *args, **kwargs):
        target = self.dtype
        for k, v in kwargs.items():
            if k == "dtype":
                target = _dtype(v)
            elif k == "device":
                _device(v)
            else:
                raise ShimError(f"Tensor.to({k}=…) is not modelled")
        for v in args:
            if isinstance(v, dtype):
                target = v
            elif isinstance(v, Tensor):
                target = v.dtype
            else:
                _device(v)
        return self._cast(target)

    def _cast(self, target: dtype):
        if target is self.dtype:
            return self
        if target is FLOAT:
            return Tensor(_exact_entries(self._a), FLOAT)
        if target is LONG:
            return Tensor(_np.frompyfunc(_integer, 1, 1)(self._a).astype(_np.int64), LONG)
        return Tensor(
            _mask(self)
            if self.dtype is BOOL
            else _np.frompyfunc(lambda v: _decided(_comparison(v, 0, "ne")), 1, 1)(self._a).astype(bool),
            BOOL,
        )

    def long(self):
        return self._cast(LONG)

    # -- indexing
    def __getitem__(self, idx):
        out = self._a[_index(idx)]
        return _wrap(out, self.dtype)

    def __setitem__(self, idx, value):
        if isinstance(value, Tensor):
            v = _as_float(value) if self.dtype is FLOAT else value._a
        else:
            v, k = _scalar(value)
            if self.dtype is FLOAT and k is not FLOAT:
                v = sp.Integer(int(v))
        self._a[_index(idx)] = v

    # -- conversions
    def __bool__(self):
        if self._a.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return (
            _decided(_comparison(self._a.reshape(-1)[0], 0, "ne"))
            if self.dtype is not BOOL
            else _decided(self._a.reshape(-1)[0])
        )

    def __int__(self):
        if self._a.size != 1:
            raise RuntimeError("only one element tensors can be converted to Python scalars")
        return _integer(self._a.reshape(-1)[0])

    def __float__(self):
        raise ShimError("float() of a tensor: the exact run has no floats")

    # -- reductions
    def sum(self, dim=None, keepdim=False, **kwargs):
        return _sum(self, dim, keepdim, **kwargs)

    def max(self, dim=None, keepdim=False):
        return self._extreme("maximum", dim)

    def min(self, dim=None, keepdim=False):
        return self._extreme("minimum", dim)

    def _extreme(self, name, dim):
        if dim is not None:
            raise ShimError("Tensor.max/min(dim=…) (values and indices) is not modelled")
        flat = list(self._a.reshape(-1))
        if not flat:
            raise RuntimeError("max(): an empty tensor")
        if self.dtype is FLOAT:
            return _wrap(functools.reduce(_fold(name), flat), FLOAT)
        return _wrap((max if name == "maximum" else min)(int(v) for v in flat), self.dtype)

    def any(self):
        flat = self._a.reshape(-1)
        if self.dtype is BOOL:
            return _wrap(bool(_mask(self).any()), BOOL)
        return _wrap(any(_decided(_comparison(v, 0, "ne")) for v in flat), BOOL)

    # -- elementwise, not in place
    def clamp(self, min=None, max=None):
        return _clamp(self, min, max)

    def masked_fill(self, mask, value):
        return self.clone().masked_fill_(mask, value)

    def new_tensor(self, data):
        """A 0-dim tensor of one number, with this tensor's dtype (torch.hypot's number operand)."""
        v, _ = _scalar(data)
        return _filled((), sp.Integer(v) if isinstance(v, int) and self.dtype is FLOAT else v, self.dtype)

    def clone(self):
        return Tensor(self._a.copy(), self.dtype)

    # -- in place
    def copy_(self, src):
        """self ← src, entry by entry (src broadcast to self's shape, converted to its dtype)."""
        src = _tensor(src)
        a = _as_float(src) if self.dtype is FLOAT else src._a
        self._a[...] = _np.broadcast_to(a, self._a.shape)
        return self

    def masked_fill_(self, mask, value):
        m = _mask(mask)
        v = _tensor(value)
        if v._a.ndim != 0:
            raise ShimError("masked_fill_ with a tensor value: only a scalar is modelled")
        fill = _as_float(v)[()] if self.dtype is FLOAT else v._a[()]
        m = _np.broadcast_to(m, self._a.shape)
        self._a[m] = fill
        return self

    def add_(self, other, *, alpha=None):
        return _write(self, _add(self, other, alpha), "add_")

    def sub_(self, other, *, alpha=None):
        return _write(self, _sub(self, other, alpha), "sub_")

    def mul_(self, other):
        return _write(self, self * other, "mul_")

    def div_(self, other, **kwargs):
        if kwargs:
            raise ShimError(f"Tensor.div_({sorted(kwargs)}) is not modelled")
        return _write(self, self / other, "div_")

    def neg_(self):
        return _write(self, -self, "neg_")

    def addcmul_(self, t1, t2, *, value=1):
        return _write(self, _addcmul(self, t1, t2, value), "addcmul_")

    def addcdiv_(self, t1, t2, *, value=1):
        return _write(self, _addcdiv(self, t1, t2, value), "addcdiv_")

    # -- operators
    def __add__(self, o):
        return _binary(_np.add, self, o)

    def __radd__(self, o):
        return _binary(_np.add, o, self)

    def __sub__(self, o):
        return _binary(_np.subtract, self, o)

    def __rsub__(self, o):
        return _binary(_np.subtract, o, self)

    def __mul__(self, o):
        return _binary(_np.multiply, self, o)

    def __rmul__(self, o):
        return _binary(_np.multiply, o, self)

    def __truediv__(self, o):
        return _binary(_np.true_divide, self, o, true_div=True)

    def __rtruediv__(self, o):
        return _binary(_np.true_divide, o, self, true_div=True)

    def __pow__(self, o):
        return _binary(_np.power, self, o)

    def __rpow__(self, o):
        return _binary(_np.power, o, self)

    def __mod__(self, o):
        return _binary(_np.remainder, self, o)

    def __neg__(self):
        if self.dtype is BOOL:
            raise RuntimeError("negation of a bool tensor")
        return Tensor(-self._a, self.dtype)

    def __matmul__(self, o):
        if not isinstance(o, Tensor) or self.dtype is not FLOAT or o.dtype is not FLOAT:
            raise ShimError("@ of tensors other than two float ones")
        return Tensor(_np.matmul(self._a, o._a), FLOAT)

    def __iadd__(self, o):
        return _write(self, self + o, "+=")

    def __isub__(self, o):
        return _write(self, self - o, "-=")

    def __imul__(self, o):
        return _write(self, self * o, "*=")

    def __itruediv__(self, o):
        return _write(self, self / o, "/=")

    def __gt__(self, o):
        return _compare(self, o, "gt")

    def __ge__(self, o):
        return _compare(self, o, "ge")

    def __lt__(self, o):
        return _compare(self, o, "lt")

    def __le__(self, o):
        return _compare(self, o, "le")

    def __eq__(self, o):  # type: ignore[override]
        return _compare(self, o, "eq")

    def __ne__(self, o):  # type: ignore[override]
        return _compare(self, o, "ne")


def _integer(v) -> int:
    if isinstance(v, (bool, _np.bool_, int, _np.integer)):
        return int(v)
    if isinstance(v, sp.Basic) and v.is_Integer:
        return int(v)
    raise ShimError(f"an entry {v!r} converted to an integer is not an integer")


def _index(idx):
    """Tensor indices as arrays (ids as int64, masks as booleans)."""
    if isinstance(idx, tuple):
        return tuple(_index(i) for i in idx)
    if isinstance(idx, Tensor):
        if idx.dtype is LONG:
            return idx._a
        if idx.dtype is BOOL:
            return _mask(idx)
        raise IndexError("tensors used as indices must be long, int or bool tensors")
    return idx


# ---------------------------------------------------------------------------------------------
# Functions of the namespace.


def _add(a, b, alpha=None):
    return a + (b if alpha is None else _times(alpha, b))


def _sub(a, b, alpha=None):
    return _tensor(a) - (b if alpha is None else _times(alpha, b))


def _times(s, b):
    return _tensor(b) * s


def _addcmul(t, t1, t2, value=1):
    return _tensor(t) + _tensor(t1) * t2 * value if value != 1 else _tensor(t) + _tensor(t1) * t2


def _addcdiv(t, t1, t2, value=1):
    return _tensor(t) + (_tensor(t1) / t2) * value if value != 1 else _tensor(t) + _tensor(t1) / t2


def torch_add(a, b, *, alpha=None, out=None):
    return _result(_tensor(a) + (b if alpha is None else _times(alpha, b)), out, "torch.add")


def torch_sub(a, b, *, alpha=None, out=None):
    return _result(_sub(a, b, alpha), out, "torch.sub")


def torch_div(a, b, *, out=None, **kwargs):
    if kwargs:
        raise ShimError(f"torch.div({sorted(kwargs)}) is not modelled")
    return _result(_tensor(a) / b, out, "torch.div")


def torch_addcmul(t, t1, t2, *, value=1, out=None):
    return _result(_addcmul(t, t1, t2, value), out, "torch.addcmul")


def torch_addmm(b, m1, m2, *, beta=1, alpha=1, out=None):
    prod = m1 @ m2
    if alpha != 1:
        prod = prod * alpha
    res = (_tensor(b) * beta if beta != 1 else _tensor(b)) + prod
    return _result(res, out, "torch.addmm")


def _dims(dim, ndim):
    if dim is None or dim == ():
        return None
    if isinstance(dim, (tuple, list)):
        return tuple(_axis(d, ndim) for d in dim)
    return _axis(dim, ndim)


def _sum(t, dim=None, keepdim=False, **kwargs):
    if kwargs:
        raise ShimError(f"torch.sum({sorted(kwargs)}) is not modelled")
    t = _tensor(t)
    a = t._a if t.dtype is not BOOL else t._a.astype(_np.int64)
    axes = _dims(dim, a.ndim)
    out = _np.sum(a, axis=axes, keepdims=keepdim)
    return _wrap(_np.asarray(out) if isinstance(out, _np.ndarray) else out, FLOAT if t.dtype is FLOAT else LONG)


def _mean(t, dim=None, keepdim=False, **kwargs):
    if kwargs:
        raise ShimError(f"torch.mean({sorted(kwargs)}) is not modelled")
    t = _tensor(t)
    if t.dtype is not FLOAT:
        raise RuntimeError("mean(): the input must be a floating tensor")
    axes = _dims(dim, t._a.ndim)
    count = (
        t._a.size if axes is None else _math.prod(t._a.shape[a] for a in (axes if isinstance(axes, tuple) else (axes,)))
    )
    s = _sum(t, dim, keepdim)
    return s / count


def _amax(t, dim=(), keepdim=False):
    t = _tensor(t)
    if dim is None or dim == () or isinstance(dim, (tuple, list)):
        raise ShimError("torch.amax over several (or all) axes is not modelled")
    if t.dtype is not FLOAT:
        raise ShimError("torch.amax of a non-float tensor is not modelled")
    return Tensor(_reduce_rows(t._a, _axis(dim, t._a.ndim), keepdim, _fold("maximum")), FLOAT)


def _shape_args(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, int) or isinstance(s, bool):
            raise ShimError(f"a size {s!r} that is not an integer")
    return tuple(size)


def _filled(shape, value, dt):
    if dt is FLOAT:
        a = _np.empty(shape, dtype=object)
        a[...] = value
        return Tensor(a, FLOAT)
    return Tensor(_np.full(shape, value, dtype=_np.int64 if dt is LONG else bool), dt)


def _factory(name, value):
    def make(*size, dtype=None, device=None, **kwargs):
        if kwargs:
            raise ShimError(f"torch.{name}({sorted(kwargs)}) is not modelled")
        _device(device)
        dt = _dtype(dtype)
        v = value if dt is not FLOAT or value is None else sp.Integer(value)
        if value is None and dt is not FLOAT:
            v = 0
        return _filled(_shape_args(size), v, dt)

    make.__name__ = name
    return make


def torch_ones_like(t, *, dtype=None, device=None):
    """Ones of t's shape and (unless given) dtype."""
    _device(device)
    dt = t.dtype if dtype is None else _dtype(dtype)
    return _filled(t.shape, sp.Integer(1) if dt is FLOAT else 1, dt)


def torch_full(size, fill_value, *, dtype=None, device=None, **kwargs):
    if kwargs:
        raise ShimError(f"torch.full({sorted(kwargs)}) is not modelled")
    _device(device)
    v, k = _scalar(fill_value)
    dt = _dtype(dtype, default=FLOAT if k is FLOAT else LONG if k is LONG else BOOL)
    if dt is FLOAT and k is not FLOAT:
        v = sp.Integer(int(v))
    return _filled(_shape_args((size,)), v, dt)


def torch_arange(start, end=None, step=1, *, dtype=None, device=None, **kwargs):
    if kwargs:
        raise ShimError(f"torch.arange({sorted(kwargs)}) is not modelled")
    _device(device)
    if end is None:
        start, end = 0, start
    vals = list(range(_integer(start), _integer(end), _integer(step)))
    dt = _dtype(dtype, default=LONG)
    if dt is FLOAT:
        a = _np.empty(len(vals), dtype=object)
        for k, v in enumerate(vals):
            a[k] = sp.Integer(v)
        return Tensor(a, FLOAT)
    return Tensor(_np.array(vals, dtype=_np.int64), LONG)


def torch_cat(tensors, dim=0):
    tensors = [_tensor(t) for t in tensors]
    dt = _promote(*[t.dtype for t in tensors])
    arrs = [_as_float(t) if dt is FLOAT else t._a for t in tensors]
    return Tensor(_np.concatenate(arrs, axis=_axis(dim, arrs[0].ndim)), dt)


def torch_take_along_dim(t, indices, dim=None):
    if dim is None:
        raise ShimError("torch.take_along_dim without dim is not modelled")
    if not isinstance(indices, Tensor) or indices.dtype is not LONG:
        raise RuntimeError("take_along_dim: indices must be a long tensor")
    t = _tensor(t)
    a, i = t._a, indices._a
    ax = _axis(dim, a.ndim)
    shape = list(
        _np.broadcast_shapes(
            tuple(s for k, s in enumerate(a.shape) if k != ax), tuple(s for k, s in enumerate(i.shape) if k != ax)
        )
    )
    sa, si = list(shape), list(shape)
    sa.insert(ax, a.shape[ax])
    si.insert(ax, i.shape[ax])
    return Tensor(_np.take_along_axis(_np.broadcast_to(a, sa), _np.broadcast_to(i, si), axis=ax), t.dtype)


def torch_broadcast_shapes(*shapes):
    try:
        return tuple(int(s) for s in _np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None


def one_hot(t, num_classes=-1):
    if not isinstance(t, Tensor) or t.dtype is not LONG:
        raise RuntimeError("one_hot is only applicable to index tensor")
    if num_classes < 0:
        raise ShimError("one_hot without num_classes is not modelled")
    if t._a.size and (t._a.min() < 0 or t._a.max() >= num_classes):
        raise RuntimeError("Class values must be smaller than num_classes.")
    return Tensor((t._a[..., None] == _np.arange(num_classes)).astype(_np.int64), LONG)


def tensor(a, dtype_=None) -> Tensor:
    """An exact tensor from an ndarray (object entries: FLOAT; integers: LONG; booleans: BOOL)."""
    a = _np.asarray(a)
    if dtype_ is None:
        dtype_ = FLOAT if a.dtype == object else BOOL if a.dtype == bool else LONG
    if dtype_ is FLOAT:
        return Tensor(_np.array(a, dtype=object), FLOAT) if a.dtype == object else Tensor(_exact_entries(a), FLOAT)
    return Tensor(a.astype(_np.int64 if dtype_ is LONG else bool), dtype_)


def as_array(t) -> _np.ndarray:
    """A result of the printed code as an object ndarray (a tensor's own entries)."""
    if isinstance(t, Tensor):
        return _np.asarray(t._a, dtype=object)
    raise ShimError(f"a result of type {type(t).__name__}, not a tensor")


# ---------------------------------------------------------------------------------------------
# autograd.Function, nn.Module, nn.Parameter, nn.init.


class FunctionCtx:
    """The context of a `torch.autograd.Function`: `save_for_backward`, `saved_tensors`, any
    attribute set on it. A tensor saved and then changed in place is an error when it is read
    back (torch's version counter)."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save tensors, but argument of type {type(t).__name__} was given"
                )
        object.__setattr__(self, "_saved", tensors)
        object.__setattr__(self, "_versions", tuple(None if t is None else t._a.copy() for t in tensors))

    @property
    def saved_tensors(self):
        saved = self.__dict__.get("_saved")
        if saved is None:
            raise ShimError("ctx.saved_tensors read before save_for_backward")
        for k, (t, snap) in enumerate(zip(saved, self._versions)):
            if t is not None and not _unchanged(t._a, snap):
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has "
                    f"been modified by an inplace operation (saved tensor {k})"
                )
        return saved

    def mark_non_differentiable(self, *tensors):
        """Outputs without a gradient, recorded (`non_differentiable`) for a checker to read: a
        backward that ignores an output's gradient must have marked that output."""
        object.__setattr__(self, "non_differentiable", tensors)

    def __getattr__(self, name):
        raise ShimAttributeError(f"ctx.{name} was never set (or is not modelled by the shim)")


def _unchanged(a: _np.ndarray, snap: _np.ndarray) -> bool:
    """The same entries as at `save_for_backward`: the very objects (exact entries), or equal
    numbers (ids, masks)."""
    if a.shape != snap.shape:
        return False
    if a.dtype != object:
        return bool(_np.array_equal(a, snap))
    return all(u is v for u, v in zip(a.reshape(-1), snap.reshape(-1)))


class Function:
    """torch.autograd.Function: `apply` calls the printed static `forward` with a fresh ctx
    (kept on the class as `last_ctx`, so that a checker can run `backward` on it)."""

    @classmethod
    def apply(cls, *args):
        ctx = FunctionCtx()
        out = cls.forward(ctx, *args)
        cls.last_ctx = ctx
        return out


def once_differentiable(fn):
    """The values of a backward are its own: a decorator that changes nothing here."""
    return fn


class Parameter(Tensor):
    """torch.nn.Parameter: the tensor's own entries, registered by a Module."""

    def __new__(cls, data=None, requires_grad=True):
        return object.__new__(cls)

    def __init__(self, data=None, requires_grad=True):
        if not isinstance(data, Tensor):
            raise ShimError("nn.Parameter of something other than a tensor")
        super().__init__(data._a, data.dtype)


class Module:
    """torch.nn.Module: parameters and submodules in assignment order; calling it calls
    `forward`."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise ShimError("a Module attribute set before Module.__init__")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __getattr__(self, name):
        raise ShimAttributeError(f"Module.{name} is not set (or is not modelled by the shim)")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix=""):
        for name, p in self._parameters.items():
            yield prefix + name, p
        for name, m in self._modules.items():
            yield from m.named_parameters(prefix + name + ".")

    def parameters(self):
        for _, p in self.named_parameters():
            yield p


def _init_fill(name, value):
    def init(t, *args, **kwargs):
        if not isinstance(t, Tensor):
            raise ShimError(f"torch.nn.init.{name} of something other than a tensor")
        t._a[...] = value
        return t

    init.__name__ = name
    return init


# ---------------------------------------------------------------------------------------------
# The namespace.


def _table_namespace():
    """torch.<f> and Tensor.<f>/<f>_ for every spelling in the functions table's torch column."""
    top, special = {}, {}
    for spelling, row in functions.spelled("torch").items():
        owner, _, attr = spelling.rpartition(".")
        if row.arity == 2 or attr == "clamp":
            continue  # binary: torch.maximum, torch.hypot, torch.clamp below
        if owner == "Tensor":
            if attr.endswith("_"):

                def method(self, _name=row.name, _attr=attr):
                    return _write(self, _unary(_name, self), f"Tensor.{_attr}")
            else:

                def method(self, _name=row.name):
                    return _unary(_name, self)

            method.__name__ = attr
            setattr(Tensor, attr, method)
        elif owner == "torch":
            top[attr] = functools.partial(_unary, row.name)
        elif owner == "torch.special":
            special[attr] = functools.partial(_unary, row.name)
        else:
            raise ShimError(f"the functions table spells {spelling}, which the shim cannot place")
    return top, special


_TOP, _SPECIAL = _table_namespace()

TORCH = _Namespace(
    _label="torch",
    **_TOP,
    special=_Namespace(_label="torch.special", **_SPECIAL),
    maximum=_maximum,
    minimum=_minimum,
    clamp=_clamp,
    hypot=_hypot,
    add=torch_add,
    sub=torch_sub,
    div=torch_div,
    addcmul=torch_addcmul,
    addmm=torch_addmm,
    amax=_amax,
    sum=_sum,
    mean=_mean,
    ones=_factory("ones", 1),
    zeros=_factory("zeros", 0),
    ones_like=torch_ones_like,
    empty=_factory("empty", None),
    full=torch_full,
    arange=torch_arange,
    cat=torch_cat,
    take_along_dim=torch_take_along_dim,
    broadcast_shapes=torch_broadcast_shapes,
    Tensor=Tensor,
    dtype=dtype,
    device=device,
    float=FLOAT,
    float32=FLOAT,
    float64=FLOAT,
    long=LONG,
    int64=LONG,
    bool=BOOL,
    get_default_dtype=lambda: FLOAT,
    compiler=_Namespace(_label="torch.compiler", is_compiling=lambda: False),
    autograd=_Namespace(
        _label="torch.autograd",
        Function=Function,
        function=_Namespace(_label="torch.autograd.function", once_differentiable=once_differentiable),
    ),
    nn=_Namespace(
        _label="torch.nn",
        Module=Module,
        Parameter=Parameter,
        functional=_Namespace(_label="torch.nn.functional", one_hot=one_hot),
        init=_Namespace(
            _label="torch.nn.init",
            zeros_=_init_fill("zeros_", sp.Integer(0)),
            ones_=_init_fill("ones_", sp.Integer(1)),
            normal_=_init_fill("normal_", None),
            uniform_=_init_fill("uniform_", None),
        ),
    ),
)


def unwrap_result(got, error=ShimError) -> _np.ndarray:
    """A printed torch function's result as the object ndarray of its entries; a result that is
    no tensor of the float dtype is `error` (each judge raises its own)."""
    if not isinstance(got, Tensor):
        raise error(f"a result of type {type(got).__name__}, not a torch tensor")
    if got.dtype is not FLOAT:
        raise error(f"a result of dtype {got.dtype}, not the float dtype")
    return _np.asarray(got._a, dtype=object)

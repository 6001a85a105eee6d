"""The NumPy printer: array-language expressions as NumPy (float32-safe: no NumPy scalars, no
upcasts), with the BLAS forms of the row and column sums and of products with weight matrices."""

from __future__ import annotations

import sympy as sp

from derivations.language import functions
from derivations.language.arrays import NormalCDF

from .base import ArrayPrinter
from .code import ATOM, Code

__all__ = ["NumpyPrinter"]


class NumpyPrinter(ArrayPrinter):
    """Array-language expressions as NumPy (float32-safe: no NumPy scalars, no upcasts)."""

    backend = "numpy"
    sqrt_name = "np.sqrt"
    sigmoid_name = "scipy.special.expit"
    ndtr_name = "_special.ndtr"
    table_params: tuple = ()
    table_param_docs: dict = {}
    default_dtype_doc = "float64, as np.dtype(None)"
    # erf: generated/numpy/_special.py, which calls SciPy's erf (`library_funcs`) for float64 and
    # evaluates derivations/special.py's rational for float32 (SciPy's float32 loop is scalar)
    library_funcs = {sp.erf: "scipy.special.erf", NormalCDF: "scipy.special.ndtr"}
    inplace = True
    # every function of the one table (derivations/language/functions.py), as NumPy spells it;
    # erf through generated/numpy/_special.py (float32: derivations/special.py's rational)
    out_funcs = functions.in_place("numpy")
    funcs = {**functions.printed("numpy"), sp.erf: "_special.erf"}

    def in_place_call(self, name, target):
        return self._call(f"np.{name}", target, f"out={target}")

    def in_place_divide(self, numerator, target):
        return self._call("np.divide", numerator, target, f"out={target}")

    def in_place_subtract_from(self, minuend, target):
        return self._call("np.subtract", minuend, target, f"out={target}")

    def _cast(self, boolean):
        return f"{boolean}.astype({self._dtype()})"

    fold_leading = True

    def _row_max(self, arg):
        # the max has no BLAS form (the row sums do: _support.rowsum)
        return self._call("np.max", arg, "axis=-1", "keepdims=True")

    def _hypot(self, u, s):
        return Code(self._call("np.hypot", self._print(u), self._print(s)), ATOM)

    _hypot_arrays = _hypot

    def _pair(self, which, a, b):
        return self._call(f"np.{which}imum", a, b)

    def _with_scalar(self, which, a, s):
        return self._call(f"np.{which}imum", a, s)

    def _causal(self, s):
        self._need("np")
        self._need("math")
        return f"np.where(np.tri({s}.shape[-2], {s}.shape[-1], dtype=bool), {s}, -math.inf)"

    def _block_causal(self, s, start):
        self._need("np")
        self._need("math")
        return f"np.where(np.tri({s}.shape[-2], {s}.shape[-1], -({start}), dtype=bool), {s}, -math.inf)"

    def causal_in_place(self, target):
        # s += B with B_ij = 0 (j ≤ i), −∞ (j > i), in s's dtype: s_ij + 0 = s_ij exactly and
        # s_ij + (−∞) = −∞ for finite s_ij; one pass, broadcast over the leading axes. B is
        # built once per dtype (generated/numpy/_special.py), not on every call.
        self._need("_special")
        t = target
        return [f"{t} += _special.causal_mask({t}.shape[-2], {t}.shape[-1], {t}.dtype)"]

    def _one_hot(self, ids, n):
        self._need("np")
        return f"({ids}[..., None] == np.arange({n})).astype({self._dtype()})"

    def _take(self, a, ids):
        return self._call("np.take_along_axis", a, f"{ids}[..., None]", "axis=-1")

    def _grid(self, n):
        return self._call("np.arange", n, "dtype=np.float64")

    def full_of(self, dims, value):
        return self._call("np.full", f"({dims})", value, f"dtype={self._dtype()}")

    def broadcast_cast(self, value, dims):
        return f"{self._call('np.broadcast_to', value, f'({dims})')}.astype({self._dtype()})"

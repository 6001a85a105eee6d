"""The printers' rules for functions and for the array language's own nodes.

* `Sigmoid(u)` (σ, the array language's logistic node) prints as the library's overflow-free
  `scipy.special.expit(u)` / `torch.sigmoid(u)`, never as `1/(1 + exp(-u))`; `NormalCDF(u)` (Φ)
  as one library call where the backend has a fast one, else as its formula; `Gaussian(u)`
  (e^{−u²/2}) as `_support.gaussian(u)`; `Hypot(u, s)` (√(u² + s²)) as the backend's `hypot`;
* integer arithmetic on index grids (a table's `row`, `col`, see `arrays`): `KroneckerDelta(a, b)`
  prints as the equality `(a == b)` cast to the float dtype, `(-1)**c` as the parity sign
  `(1 - 2*(c % 2))`, `floor(a/q)` as `(a // q)` and `Mod(a, q)` as `(a % q)` (integer arguments
  only: anything else is an error);
* `MatMul`, `T`, the row reductions, `ColSum`, `Contract`, `CausalMask`, `Gather`, `OneHot` and
  `Take` print through the backend hooks at the end (each backend's spelling); the sums and the
  products with weight matrices as calls of the backend's support module, `_support.rowsum(x)`,
  `_support.colsum(x)`, `_support.matmul_rows(x, w)`, ... (codegen/support/: the speed idioms,
  named and tested once).

`NodeRules` is mixed into `ArrayPrinter` (base.py), whose helpers (`_call`, `_atomic`,
`_paren`, ...) these rules use.
"""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array, MatMul, T, shape_of

from ..names import PrinterError
from .code import ATOM, MUL, Code, show

__all__ = ["NodeRules"]


class NodeRules:
    """Functions, index-grid arithmetic and the array language's nodes (a mixin)."""

    # elementwise functions ---------------------------------------------------------------
    def _print_elementwise(self, expr):
        fn = type(expr)
        if self._scalar(expr):
            name = self.scalar_funcs.get(fn)
            if name is None:
                raise PrinterError(f"{self.backend} printer: no scalar form for {fn.__name__} in {show(expr)}")
            if name.startswith("math."):
                self._need("math")
            return Code(f"{name}({self._print(expr.args[0])})", ATOM)
        name = self.funcs.get(fn)
        if name is None or len(expr.args) != 1:
            return self.emptyPrinter(expr)
        return Code(self._call(name, self._print(expr.args[0])), ATOM)

    _print_exp = _print_tanh = _print_cosh = _print_sinh = _print_erf = _print_sin = _print_cos = _print_Abs = (
        _print_sign
    ) = _print_log1p = _print_expm1 = _print_elementwise

    def _print_Sigmoid(self, expr):
        """σ(u) = 1/(1 + e^{−u}) as the library's overflow-free logistic function."""
        (u,) = expr.args
        if self._scalar(expr):
            raise PrinterError(f"{self.backend} printer: no scalar form for Sigmoid in {show(expr)}")
        return Code(self._call(self.sigmoid_name, self._print(u)), ATOM)

    ndtr_name = ""

    def _print_HalfStep(self, expr):
        """H(u) with H(0) = ½ as its formula (1 + sign u)/2: a sign and two in-place passes,
        measured 6x faster than np.heaviside(u, 0.5) and 3x faster than torch.heaviside on
        65k float32 (neither library vectorises its step function)."""
        return self._print(expr.document_form())

    def _print_NormalCDF(self, expr):
        """Φ(u) = (1 + erf(u/√2))/2 as one library call where the backend has a fast one (a
        scalar, or no such call: the formula itself)."""
        (u,) = expr.args
        if self._scalar(expr) or not self.ndtr_name:
            return self._print(expr.document_form())
        return Code(self._call(self.ndtr_name, self._print(u)), ATOM)

    def _print_Gaussian(self, expr):
        """G(u) = e^{−u²/2} as the support module's `gaussian(u)`: u² formed once and
        exponentiated in place, its overflow to ∞ (|u| > 1.8e19 in float32) expected, e^{−∞} = 0
        (a scalar: its formula)."""
        (u,) = expr.args
        if self._scalar(expr):
            return self._print(expr.document_form())
        return self._support("gaussian", u)

    def _print_Hypot(self, expr):
        """√(u² + s²) as the library's hypot, which scales before it squares: no u² = ∞ where the
        root is finite (|u| > 1.8e19 in float32). s is a number; a scalar u: `math.hypot`."""
        u, s = expr.args
        if not self._scalar(s):  # √(u² + w²), both arrays: the library's hypot of two arrays
            if self._scalar(u):
                raise PrinterError(f"{self.backend} printer: Hypot of a number and an array: {show(expr)}")
            return self._hypot_arrays(u, s)
        if self._scalar(u):
            return Code(self._call("math.hypot", self._print(u), self._print(s)), ATOM)
        return self._hypot(u, s)

    def _print_log(self, expr):
        if len(expr.args) != 1:
            raise PrinterError(f"{self.backend} printer: log with a base: {show(expr)}")
        return self._print_elementwise(expr)

    def _print_Heaviside(self, expr):
        x, h0 = expr.args if len(expr.args) == 2 else (expr.args[0], None)
        if h0 == 0:
            op = ">"
        elif h0 == 1:
            op = ">="
        else:
            raise PrinterError(f"{self.backend} printer: Heaviside needs H(0) = 0 or 1, got {show(expr)}")
        if self._scalar(x):
            raise PrinterError(f"{self.backend} printer: Heaviside of a scalar: {show(expr)}")
        return Code(self._cast(f"({self._print(x)} {op} 0)"), ATOM)

    def _print_Max(self, expr):
        return self._minmax(expr, "max")

    def _print_Min(self, expr):
        return self._minmax(expr, "min")

    def _minmax(self, expr, which: str) -> Code:
        if self._scalar(expr):
            return Code(f"{which}({', '.join(self._print(a) for a in expr.args)})", ATOM)
        arrays = [a for a in expr.args if not self._scalar(a)]
        scalars = [a for a in expr.args if self._scalar(a)]
        code = str(self._print(arrays[0]))
        for a in arrays[1:]:
            code = self._pair(which, code, str(self._print(a)))
        if scalars:
            s = (
                self._print(scalars[0])
                if len(scalars) == 1
                else f"{which}({', '.join(self._print(a) for a in scalars)})"
            )
            code = self._with_scalar(which, code, str(s))
        return Code(code, ATOM)

    # integer arithmetic on index grids --------------------------------------------------
    def _print_KroneckerDelta(self, expr):
        a, b = expr.args
        if self._scalar(expr):
            raise PrinterError(f"{self.backend} printer: KroneckerDelta of scalars: {show(expr)}")
        return Code(self._cast(f"({self._print(a)} == {self._print(b)})"), ATOM)

    def _integer_operands(self, expr, what: str):
        args = expr.args
        if self._scalar(expr) or not all(sp.sympify(a).is_integer for a in args):
            raise PrinterError(f"{self.backend} printer: {what} needs integer-valued array arguments, got {show(expr)}")
        return args

    def _print_Mod(self, expr):
        a, q = self._integer_operands(expr, "Mod")
        if not (q.is_Integer and q > 0):
            raise PrinterError(f"{self.backend} printer: Mod needs a positive integer modulus, got {show(expr)}")
        return Code(f"({self._operand(self._print(a), MUL)} % {self._print(q)})", ATOM)

    def _print_floor(self, expr):
        (arg,) = expr.args
        num, den = sp.fraction(sp.together(arg))
        if self._scalar(expr) or not num.is_integer or not (den.is_Integer and den > 0):
            raise PrinterError(
                f"{self.backend} printer: floor needs (integer array)/(positive integer), got {show(expr)}"
            )
        return Code(f"({self._operand(self._print(num), MUL)} // {self._print(den)})", ATOM)

    # tables: index grids and the finished array -----------------------------------------
    def grid(self, size, axis: int) -> str:
        """The integers 0..size-1 along `axis` (0: a column (size, 1), 1: a row (1, size)),
        held as float64: integer-valued floats are exact up to 2**53, and float64 keeps
        `row*omega` from being computed in float32 (torch promotes an int tensor times a
        Python float to its default dtype, float32)."""
        text = self._grid(str(self._print(sp.sympify(size))))
        return text + ("[:, None]" if axis == 0 else "[None, :]")

    # array-language nodes ----------------------------------------------------------------
    # The sums print as calls of the backend's support module (codegen/support/): each the sum
    # its name says, computed the fast way (`_support.rowsum(x)`: one BLAS gemv in NumPy).
    def _support(self, helper: str, *args) -> Code:
        self._need("_support")
        return Code(f"_support.{helper}({', '.join(str(self._print(a)) for a in args)})", ATOM)

    def _print_MatMul(self, expr):
        left, right = expr.args
        if self.fold_leading and self._matrix(right) and not self._matrix(left):
            # (..., r, k) @ (k, c) as one 2-D product over all rows of every leading axis
            return self._support("matmul_rows", left, right)
        a, b = (self._operand(self._print(x), MUL) for x in expr.args)
        return Code(f"({a} @ {b})", ATOM)

    fold_leading = False  # print (..., r, k) @ (k, c) as one (Σr, k) @ (k, c) product
    fuses_bias = False  # b + A @ B in one BLAS call (beta = 1), where the backend has it

    multiply_add = False  # t = b + c·t·a in one call (lowering/inplace.py: fuse_multiply_add)

    def multiply_add_text(self, target: str, c, a: str | None, b: str) -> str:
        """`target = b + c·target·a` (a None: b + c·target) written into target."""
        raise NotImplementedError(f"{self.backend} printer: no multiply-add")

    def fused_update(self, target: str, op: str, value) -> str | None:
        """`target op= value` as one fused call of the backend, or None (the update as written)."""
        return None

    def fused_statement(self, expr) -> str | None:
        """`X @ W + b` (W a weight matrix, b a row vector) as one `addmm(b, X, W)` on the rows
        of every leading index: the bias is the GEMM's initial C, no second pass over the
        output. None where the expression is not of that form or the backend has no addmm."""
        if not self.fuses_bias or not isinstance(expr, sp.Add) or len(expr.args) != 2:
            return None
        prod = next((t for t in expr.args if isinstance(t, MatMul)), None)
        bias = next((t for t in expr.args if t is not prod), None)
        if prod is None or not (isinstance(bias, Array) and bias.shape[0] == 1 and bias.shape[1] != 1):
            return None
        left, right = prod.args
        if not self._matrix(right) or self._matrix(left):
            return None
        return str(self._support("addmm_rows", bias, left, right))

    def _matrix(self, expr) -> bool:
        """A weight matrix (or its transpose): stored with exactly two axes."""
        while isinstance(expr, T):
            expr = expr.args[0]
        return expr in self._settings["matrices"]

    def _print_T(self, expr):
        (a,) = expr.args
        rows, cols = shape_of(a)
        code = self._print(a)
        text = self._paren(code, ATOM - 1)
        if rows == 1:  # a row vector, stored 1-D: (n,) -> (n, 1)
            return Code(f"{text}[:, None]", ATOM)
        if cols == 1:
            raise PrinterError(
                f"{self.backend} printer: T of a column vector {show(a)} has "
                "no storage convention (it would be a row vector with batch axes)"
            )
        return Code(f"{text}.mT", ATOM)

    def _print_RowSum(self, expr):
        return self._support("rowsum", expr.args[0])

    def _print_RowMean(self, expr):
        return self._support("rowmean", expr.args[0])

    def _print_RowMax(self, expr):
        return Code(self._row_max(str(self._print(expr.args[0]))), ATOM)

    def _print_ColSum(self, expr):
        return self._support("colsum", expr.args[0])

    def _print_Contract(self, expr):
        return self._support("contract", *expr.args)

    def _print_CausalMask(self, expr):
        return Code(self._causal(self._atomic(expr.args[0])), ATOM)

    # the key blocks of a tiled loop (derivations/attention_tiled.py) --------------------------
    def _print_RowBlock(self, expr):
        """Rows start … start + size − 1 of x: a view, x[..., start:start + size, :]."""
        x, start, size = expr.args
        lo = self._print(start)
        return Code(f"{self._atomic(x)}[..., {lo}:{lo} + {self._print(size)}, :]", ATOM)

    def _print_BlockCausalMask(self, expr):
        """−∞ where key start + w comes after query i: w > i − start."""
        s, start = expr.args
        return Code(self._block_causal(self._atomic(s), str(self._print(start))), ATOM)

    def _print_Gather(self, expr):
        table, ids = expr.args
        t = self._paren(self._print(table), ATOM - 1)
        return Code(f"{t}[{self._ids(ids)}]", ATOM)

    def _print_OneHot(self, expr):
        ids, n = expr.args
        if not self._scalar(n):
            raise PrinterError(f"{self.backend} printer: OneHot size must be a scalar: {show(n)}")
        return Code(self._one_hot(self._ids(ids), self._print(n)), ATOM)

    def _print_Take(self, expr):
        a, ids = expr.args
        return Code(self._take(str(self._print(a)), self._ids(ids)), ATOM)

    # backend hooks: each backend defines _cast(boolean), _row_max(arg), _pair(which, a, b),
    # _with_scalar(which, a, s), _causal(s), _one_hot(ids, n), _take(a, ids), _grid(n),
    # full_of(dims, value) and broadcast_cast(value, dims) (numpy_printer.py, torch_printer.py)
    sqrt_name = ""
    rsqrt_name = ""  # 1/√u as one call, where the backend has it (torch.rsqrt)
    sigmoid_name = ""

"""The PyTorch printer: array-language expressions as PyTorch (Python numbers for scalars,
device-aware masks, `torch.addmm` for a product with a weight matrix plus a bias)."""
from __future__ import annotations

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from .base import ArrayPrinter
from .code import ATOM

__all__ = ["TorchPrinter"]


class TorchPrinter(ArrayPrinter):
    """Array-language expressions as PyTorch (Python numbers for scalars, device-aware masks)."""

    # In place on fresh tensors (`t *= x`, `t.exp_()`): the generated functions run inside
    # autograd.Function.forward/backward, where autograd records nothing.
    inplace = True
    out_funcs = {sp.exp: "exp", sp.log: "log", sp.tanh: "tanh", sp.sin: "sin", sp.cos: "cos",
                 sp.Abs: "abs"}

    def in_place_call(self, name, target):
        return f"{target}.{'neg' if name == 'negative' else name}_()"

    def in_place_divide(self, numerator, target):
        self._need("torch")
        return f"torch.div({numerator}, {target}, out={target})"

    fuses_bias = True         # _support.addmm_rows: the bias as the GEMM's initial C
    backend = "torch"
    sqrt_name = "torch.sqrt"
    sigmoid_name = "torch.sigmoid"
    # no ndtr: torch.special.ndtr measured slower than erf and two in-place passes (578 vs 541 µs
    # on 393k float32), so Φ prints as its formula
    table_params = ("device=None",)
    table_param_docs = {"device=None": "the torch device of the result (default: the CPU)"}
    default_dtype_doc = "torch.get_default_dtype()"
    funcs = {sp.exp: "torch.exp", sp.log: "torch.log", sp.tanh: "torch.tanh", sp.erf: "torch.erf",
             sp.sin: "torch.sin", sp.cos: "torch.cos", sp.Abs: "torch.abs", sp.sign: "torch.sign",
             log1p: "torch.log1p", expm1: "torch.expm1"}

    def _cast(self, boolean):
        return f"{boolean}.to({self._dtype()})"

    def _row_max(self, arg):
        return self._call("torch.amax", arg, "dim=-1", "keepdim=True")

    def _pair(self, which, a, b):
        return self._call(f"torch.{which}imum", a, b)

    def _with_scalar(self, which, a, s):
        # Max(x, s) clamps from below (min=s), Min(x, s) from above (max=s)
        return self._call("torch.clamp", a, f"{'min' if which == 'max' else 'max'}={s}")

    def _causal(self, s):
        self._need("torch")
        self._need("math")
        return (f"{s}.masked_fill(torch.ones({s}.shape[-2], {s}.shape[-1], dtype=torch.bool, "
                f"device={s}.device).triu(1), -math.inf)")

    def _block_causal(self, s, start):
        self._need("torch")
        self._need("math")
        return (f"{s}.masked_fill(torch.ones({s}.shape[-2], {s}.shape[-1], dtype=torch.bool, "
                f"device={s}.device).triu(1 - ({start})), -math.inf)")

    def causal_in_place(self, target):
        self._need("torch")
        self._need("math")
        t = target
        return [f"{t}.masked_fill_(torch.ones({t}.shape[-2], {t}.shape[-1], dtype=torch.bool, "
                f"device={t}.device).triu(1), -math.inf)"]

    def _one_hot(self, ids, n):
        self._need("torch")
        return f"torch.nn.functional.one_hot({ids}.long(), {n}).to({self._dtype()})"

    def _take(self, a, ids):
        return self._call("torch.take_along_dim", a, f"{ids}[..., None].long()", "dim=-1")

    def _grid(self, n):
        return self._call("torch.arange", n, "dtype=torch.float64", "device=device")

    def full_of(self, dims, value):
        return self._call("torch.full", f"({dims})", value, f"dtype={self._dtype()}",
                          "device=device")

    def broadcast_cast(self, value, dims):
        # expand is a view; .to(dtype) copies unless the dtype is float64 already, and then
        # .contiguous() copies an expanded view (a full-shape value is a fresh temporary)
        return f"{self._paren(value, ATOM - 1)}.expand({dims}).to({self._dtype()}).contiguous()"

"""The PyTorch printer: array-language expressions as PyTorch (Python numbers for scalars,
device-aware masks, `torch.addmm` for a product with a weight matrix plus a bias)."""

from __future__ import annotations

import sympy as sp

from derivations.language import functions

from .base import ArrayPrinter
from .code import ATOM, Code

__all__ = ["TorchPrinter"]


class TorchPrinter(ArrayPrinter):
    """Array-language expressions as PyTorch (Python numbers for scalars, device-aware masks)."""

    # In place on fresh tensors (`t *= x`, `t.exp_()`): the generated functions run inside
    # autograd.Function.forward/backward, where autograd records nothing.
    inplace = True
    out_funcs = functions.in_place("torch")  # the one table's `Tensor.<f>_` spellings

    def in_place_call(self, name, target):
        return f"{target}.{'neg' if name == 'negative' else name}_()"

    def in_place_divide(self, numerator, target):
        self._need("torch")
        return f"torch.div({numerator}, {target}, out={target})"

    def in_place_subtract_from(self, minuend, target):
        self._need("torch")
        return f"torch.sub({minuend}, {target}, out={target})"

    multiply_add = True

    def multiply_add_text(self, target, c, a, b):
        """t = b + c·t·a as `torch.addcmul(b, t, a, value=c, out=t)`, b + c·t as
        `torch.add(b, t, alpha=c, out=t)`: one pass over t where the plan had one per operation."""
        self._need("torch")
        if a is None:
            return f"torch.add({b}, {target}, alpha={self._print(c)}, out={target})"
        value = "" if c == 1 else f", value={self._print(c)}"
        return f"torch.addcmul({b}, {target}, {a}{value}, out={target})"

    def fused_update(self, target, op, value):
        """`target += c·a` as `target.add_(a, alpha=c)`, `target += c·a·b` as
        `target.addcmul_(a, b, value=c)`, `target += c·a/b` as `target.addcdiv_(a, b, value=c)`
        (−c for `-=`): one pass over target, no temporary for the product, where the update is
        exactly that form (c a scalar, a and b arrays). None otherwise."""
        if op not in ("+=", "-=") or not isinstance(value, sp.Mul):
            return None
        scalars, numer, denom = [], [], []
        for f in value.args:
            if self._scalar(f):
                scalars.append(f)
            elif isinstance(f, sp.Pow) and f.exp == -1:
                denom.append(f.base)
            else:
                numer.append(f)
        if any(f.is_Pow and f.exp.is_Integer and f.exp < -1 for f in numer):
            return None  # 1/g^k: its 1/g interleaved with the numerator's factors by the product printer
        c = sp.Mul(*scalars) * (1 if op == "+=" else -1)
        if len(numer) == 1 and not denom and c not in (1, -1):
            call = f"add_({self._print(numer[0])}, alpha={self._print(c)})"
        elif len(numer) == 2 and not denom:
            call = f"addcmul_({self._print(numer[0])}, {self._print(numer[1])}"
            call += ")" if c == 1 else f", value={self._print(c)})"
        elif len(numer) == 1 and len(denom) == 1:
            call = f"addcdiv_({self._print(numer[0])}, {self._print(denom[0])}"
            call += ")" if c == 1 else f", value={self._print(c)})"
        else:
            return None
        return f"{target}.{call}"

    fuses_bias = True  # _support.addmm_rows: the bias as the GEMM's initial C
    backend = "torch"
    sqrt_name = "torch.sqrt"
    rsqrt_name = "torch.rsqrt"
    sigmoid_name = "torch.sigmoid"
    # no ndtr: torch.special.ndtr measured slower than erf and two in-place passes (578 vs 541 µs
    # on 393k float32), so Φ prints as its formula
    table_params = ("device=None",)
    table_param_docs = {"device=None": "the torch device of the result (default: the CPU)"}
    default_dtype_doc = "torch.get_default_dtype()"
    funcs = functions.printed("torch")  # the one table (derivations/language/functions.py)

    def _cast(self, boolean):
        return f"{boolean}.to({self._dtype()})"

    def _row_max(self, arg):
        return self._call("torch.amax", arg, "dim=-1", "keepdim=True")

    def _hypot(self, u, s):
        return self._support("hypot", u, s)  # torch.hypot takes no number: the support module's 0-dim tensor

    def _hypot_arrays(self, u, w):
        return Code(self._call("torch.hypot", self._print(u), self._print(w)), ATOM)

    def _pair(self, which, a, b):
        return self._call(f"torch.{which}imum", a, b)

    def _with_scalar(self, which, a, s):
        # Max(x, s) clamps from below (min=s), Min(x, s) from above (max=s)
        return self._call("torch.clamp", a, f"{'min' if which == 'max' else 'max'}={s}")

    def _causal(self, s):
        self._need("torch")
        self._need("math")
        return (
            f"{s}.masked_fill(torch.ones({s}.shape[-2], {s}.shape[-1], dtype=torch.bool, "
            f"device={s}.device).triu(1), -math.inf)"
        )

    def _block_causal(self, s, start):
        self._need("torch")
        self._need("math")
        return (
            f"{s}.masked_fill(torch.ones({s}.shape[-2], {s}.shape[-1], dtype=torch.bool, "
            f"device={s}.device).triu(1 - ({start})), -math.inf)"
        )

    def causal_in_place(self, target):
        # s += B with B_ij = 0 (j ≤ i), −∞ (j > i), as NumPy's: added, not filled in, so that a NaN
        # score stays NaN under the mask in both backends (the NaN policy, docs/cli.md)
        self._need("torch")
        self._need("math")
        t = target
        return [
            f"{t} += torch.full(({t}.shape[-2], {t}.shape[-1]), -math.inf, dtype={t}.dtype, device={t}.device).triu(1)"
        ]

    def _one_hot(self, ids, n):
        self._need("torch")
        return f"torch.nn.functional.one_hot({ids}.long(), {n}).to({self._dtype()})"

    def _take(self, a, ids):
        return self._call("torch.take_along_dim", a, f"{ids}[..., None].long()", "dim=-1")

    def _grid(self, n):
        return self._call("torch.arange", n, "dtype=torch.float64", "device=device")

    def full_of(self, dims, value):
        return self._call("torch.full", f"({dims})", value, f"dtype={self._dtype()}", "device=device")

    def broadcast_cast(self, value, dims):
        # expand is a view; .to(dtype) copies unless the dtype is float64 already, and then
        # .contiguous() copies an expanded view (a full-shape value is a fresh temporary)
        return f"{self._paren(value, ATOM - 1)}.expand({dims}).to({self._dtype()}).contiguous()"

"""TorchGPT: the same GPT as NumpyGPT, built only from the generated PyTorch kernels.

Every layer is a generated `torch.autograd.Function` (called through its functional wrapper
`generated.torch.<op>.<op>(...)`), whose backward is the proved formula printed into PyTorch;
torch autograd only chains them together. What is written here is bookkeeping that autograd
differentiates exactly: the residual add, reshapes/transposes for head split and merge, the
split of the fused QKV projection.

Parameters have nanoGPT's names (`state_dict()` keys equal NumpyGPT's `params` keys), and with
the same `seed` both backends start from the same weights (`qed.params.init_params`).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .config import GPTConfig, check_idx, ffn_weights, norm_call
from .cpu import tune_malloc
from .errors import CompileError
from .flat import flat_layout, flat_params, flat_views
from .kernels import NORM_EPS, kernel, load_kernels
from .params import check_params, init_params, param_shapes
from .positions import PositionTables


class _Node(nn.Module):
    """A plain container, so that parameters get dotted names like h.0.attn.c_attn.weight."""


class TorchGPT(nn.Module):
    backend = "torch"

    def __init__(self, config: GPTConfig, dtype=torch.float32, seed: int = 0, compile: bool = False, device=None):
        """`compile=True`: the loss path (forward with targets, and the backward of what it
        computes) runs as one graph compiled by torch.compile — the same generated forward and
        backward expressions, fused by inductor into loops (see `_compiled_loss`). `device`: where
        the parameters live ("cpu", "cuda", "cuda:1"; None: the CPU)."""
        super().__init__()
        config.validate()
        tune_malloc()  # a step's freed temporaries kept for the next (qed/cpu.py: page faults)
        self.config = config
        self.compiled = bool(compile)
        self._compiled = None
        # the functional wrapper `<op>(...)` of every generated/torch/<op>.py the config calls
        self._kfn = {name: getattr(module, name) for name, module in load_kernels("torch", config).items()}
        # read once: the MLP op's weights and the norm's parameters (generated/model_ops.py); a
        # lookup inside the step would break torch.compile's graph at its import
        self._norm_all, self._norm_kw = norm_call(config.norm, NORM_EPS)
        self._ffn_weights = ffn_weights(config.ffn)
        # every parameter is a view of one flat buffer (matrices first, as NumpyGPT), so that
        # TorchAdamW can update them all with one kernel call per weight-decay group
        flat = flat_params(init_params(config, seed), np.float64)
        _, offsets = flat_layout(flat)
        buffer = torch.as_tensor(next(iter(flat.values())).base, dtype=dtype, device=device)
        views = flat_views(buffer, offsets, {k: v.shape for k, v in flat.items()})
        for name in flat:
            *path, leaf = name.split(".")
            node = self
            for part in path:
                if part not in node._modules:
                    node.add_module(part, _Node())
                node = node._modules[part]
            node.register_parameter(leaf, nn.Parameter(views[name]))
        self._positions = PositionTables("torch", config)

    def _k(self, name):
        return self._kfn[name]

    # ------------------------------------------------------------------ params
    @property
    def num_params(self) -> int:
        return int(sum(p.numel() for p in self.parameters()))

    def load_params(self, params: dict) -> None:
        """Copy {name: array or tensor} into the parameters (names and shapes checked)."""
        check_params(params, param_shapes(self.config))
        own = dict(self.named_parameters())
        with torch.no_grad():
            for k, p in own.items():
                src = params[k]
                src = src.detach() if isinstance(src, torch.Tensor) else torch.as_tensor(np.asarray(src))
                p.copy_(src.to(device=p.device, dtype=p.dtype))

    # ------------------------------------------------------------------ layers
    def _linear(self, P, prefix, x, bias):
        if bias:
            return self._k("linear")(x, P[prefix + ".weight"], P[prefix + ".bias"])
        return self._k("linear_nobias")(x, P[prefix + ".weight"])

    def _norm(self, P, prefix, x):
        """The norm op of the config (generated/model_ops.py): its gains and shifts by name, a
        shift held at 0 in a model without biases."""
        c = self.config
        args = [
            P[f"{prefix}.{name}"] if f"{prefix}.{name}" in P else x.new_zeros(c.n_embd) for name, _ in self._norm_all
        ]
        return self._k(c.norm)(x, *args, **self._norm_kw)

    def _attn(self, P, prefix, x):
        c = self.config
        B, T, C = x.shape
        nh, hd = c.n_head, c.head_dim
        qkv = self._linear(P, prefix + ".c_attn", x, c.bias)  # (B, T, 3C)
        q, k, v = (t.reshape(B, T, nh, hd).transpose(1, 2) for t in qkv.split(C, dim=-1))
        if c.pos == "rope":
            q, k = self._rope(q), self._rope(k)
        y = self._k(c.attention)(q, k, v, causal=True)  # (B, nh, T, hd)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self._linear(P, prefix + ".c_proj", y, c.bias)

    def _mlp(self, P, prefix, x):
        c = self.config
        weights = self._ffn_weights
        if weights is not None:  # one MLP op
            return self._k(c.ffn)(x, *(P[f"{prefix}.{name}.weight"] for name, _ in weights))
        h = self._linear(P, prefix + ".c_fc", x, c.bias)
        return self._linear(P, prefix + ".c_proj", self._k(c.ffn)(h), c.bias)

    def _rope(self, x):
        """RoPE on (B, nh, T, hd) through the generated kernel; the tables are its constant
        inputs (no gradient), expanded (views) to x's leading axes as the kernel expects."""
        cos, sin, rot = self._positions.rope(x.shape[-2], x.dtype, x.device)
        return self._k("rope")(x, cos.expand(x.shape), sin.expand(x.shape), rot.expand(*x.shape[:-2], *rot.shape))

    # ------------------------------------------------------------------ forward
    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logits (B, T, V), and the mean cross-entropy over the tokens whose target is not −1
        (None without targets). With compile=True the loss path runs the compiled graph; logits
        alone (sampling, where T grows by one a call) run as written."""
        B, T = check_idx(self.config, idx, targets)
        if targets is None:
            return self._logits(idx), None
        mask = (targets >= 0).long()  # target -1: ignored (ignore_index)
        targets = torch.where(mask == 1, targets, torch.zeros_like(targets))
        if not self.compiled:
            return self._with_loss(idx, targets, mask)
        # the compiled graph does not read the ids' values (that would split it): check them here,
        # with the kernels' own messages
        check = kernel("torch", "_validate").in_range
        check("embedding", "ids", idx, self.config.vocab_size, "V")
        check("cross_entropy", "targets", targets, self.config.vocab_size, "V")
        try:
            return self._compiled_loss()(idx, targets, mask)
        except Exception as e:
            if not _compile_failure(e):
                raise
            first = (str(e).strip().splitlines() or [""])[0]
            raise CompileError(
                f"torch.compile failed ({type(e).__name__}: {first[:300]}); train without --compile (compile=False)"
            ) from e

    def _with_loss(self, idx, targets, mask):
        logits = self._logits(idx)
        return logits, self._k("cross_entropy")(logits, targets, mask).reshape(())  # mean over scored tokens

    def _compiled_loss(self):
        """torch.compile(_with_loss), built on first use (inductor; the first call compiles, tens of
        seconds). Inductor's pattern matcher is off, so that no pattern of the generated
        expressions is swapped for a kernel of PyTorch's own (it has attention patterns that
        rewrite to scaled_dot_product_attention): what runs is the printed formulas, fused."""
        if self._compiled is None:
            self._compiled = torch.compile(self._with_loss, dynamic=False, options={"pattern_matcher": False})
        return self._compiled

    def _logits(self, idx):
        c = self.config
        P = dict(self.named_parameters())
        B, T = idx.shape
        x = self._k("embedding")(idx, P["wte.weight"])  # (B, T, C)
        if c.pos == "learned":
            pos = torch.arange(T, device=idx.device).expand(B, T)
            x = x + self._k("embedding")(pos, P["wpe.weight"])
        elif c.pos == "sinusoidal":
            x = x + self._positions.sinusoid(T, x.dtype, x.device)  # fixed, no gradient
        for layer in range(c.n_layer):
            p = f"h.{layer}"
            if c.norm_position == "pre":
                x = x + self._attn(P, p + ".attn", self._norm(P, p + ".ln_1", x))
                x = x + self._mlp(P, p + ".mlp", self._norm(P, p + ".ln_2", x))
            else:
                x = self._norm(P, p + ".ln_1", x + self._attn(P, p + ".attn", x))
                x = self._norm(P, p + ".ln_2", x + self._mlp(P, p + ".mlp", x))
        if c.norm_position == "pre":
            x = self._norm(P, "ln_f", x)
        head = P["wte.weight"] if c.tie_weights else P["lm_head.weight"]
        return self._k("linear_nobias")(x, head)  # (B, T, V)


def _compile_failure(e: BaseException) -> bool:
    """An error of torch.compile's own machinery (dynamo, inductor, the C++ toolchain) rather
    than one the model raised: those propagate unchanged."""
    return type(e).__module__.startswith(("torch._dynamo", "torch._inductor"))

"""TorchGPT: the GPT of derivations/gpt.py, run by its printed PyTorch program.

generated/torch/gpt.py is the model's whole computation: `forward` (embedding, blocks, head,
the loss over the targets that are not −1) with every kernel's cache on a tape, `backward` (the
composition rule over the same statements) and the AdamW step. `GPTFunction` makes the program
one autograd node, so `loss.backward()` runs the printed backward rather than autograd's. This
module holds the parameters (views of one flat buffer, nanoGPT's names: `state_dict()` keys equal
NumpyGPT's `params` keys), checks the batch and compiles the loss path on request; it does no
arithmetic on model tensors itself.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .autocast import low_precision
from .config import GPTConfig, check_idx
from .cpu import tune_malloc
from .dropout import DropoutMasks, Noise
from .errors import CompileError
from .flat import flat_layout, flat_params, flat_views
from .kernels import NORM_EPS, kernel, load_kernels
from .params import check_params, init_params, param_shapes
from .positions import PositionTables


class _Node(nn.Module):
    """A plain container, so that parameters get dotted names like h.0.attn.c_attn.weight."""


class TorchGPT(nn.Module):
    backend = "torch"

    def __init__(
        self,
        config: GPTConfig,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        compile: bool = False,
        device: object = None,
        autocast: torch.dtype | None = None,
    ):
        """`compile=True`: the loss path (forward with targets, and the backward of what it
        computes) runs as one graph compiled by torch.compile — the same generated forward and
        backward expressions, fused by inductor into loops (see `_compiled_loss`). `device`: where
        the parameters live ("cpu", "cuda", "cuda:1"; None: the CPU). `autocast`
        (torch.bfloat16): the matrix products in that dtype, the rest and the weights in
        `dtype` (float32): qed/autocast.py."""
        super().__init__()
        config.validate()
        if compile and config.dropout > 0:  # the masks are drawn on the host, row by row
            raise CompileError(f"dropout={config.dropout} is not compiled: train with --dropout 0 or without --compile")
        tune_malloc()  # a step's freed temporaries kept for the next (qed/cpu.py: page faults)
        self.config = config
        self.compiled = bool(compile)
        self._compiled = None
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
        # the printed program (generated/torch/gpt.py) and the kernels it calls, by role
        self._program = kernel("torch", "gpt")
        modules = load_kernels("torch", config)
        if autocast is not None:
            if dtype != torch.float32:
                raise ValueError(f"autocast={autocast} keeps float32 weights, not {dtype}")
            modules = low_precision(modules, config, autocast)
        self.autocast = autocast
        self._ops = self._program.Kernels(
            config,
            modules,
            PositionTables("torch", config),
            NORM_EPS,
            DropoutMasks(config.dropout) if config.dropout > 0 else None,
        )
        self._names = tuple(name for name, _ in self.named_parameters())

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

    # ------------------------------------------------------------------ forward
    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, noise: Noise | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """logits (B, T, V), and the config's mean loss over the tokens whose target is not −1
        (None without targets). With compile=True the loss path runs the compiled graph; logits
        alone (sampling, where T grows by one a call) run as written. `noise`: a training step's
        dropout masks (qed/dropout.py; None: no dropout)."""
        B, T = check_idx(self.config, idx, targets)
        if targets is None:
            return self._logits(idx), None
        if not self.compiled:
            return self._with_loss(idx, targets, noise)
        # the compiled graph does not read the ids' values (that would split it): check them here,
        # with the kernels' own messages
        check = kernel("torch", "_validate").in_range
        check("embedding", "ids", idx, self.config.vocab_size, "V")
        check(self.config.loss, "targets", targets.clamp(min=0), self.config.vocab_size, "V")
        try:
            return self._compiled_loss()(idx, targets)
        except Exception as e:
            if not _compile_failure(e):
                raise
            first = (str(e).strip().splitlines() or [""])[0]
            raise CompileError(
                f"torch.compile failed ({type(e).__name__}: {first[:300]}); train without --compile (compile=False)"
            ) from e

    def _with_loss(self, idx, targets, noise=None):
        """(logits, mean loss over the scored tokens): the printed program as one autograd node,
        whose backward is the printed backward (generated/torch/gpt.py's GPTFunction)."""
        params = [p for _, p in self.named_parameters()]  # in the order of self._names
        logits, loss = self._program.GPTFunction.apply(self._ops, self._names, idx, targets, noise, *params)
        return logits, loss.reshape(())

    def _compiled_loss(self):
        """torch.compile(_with_loss), built on first use (inductor; the first call compiles, tens of
        seconds). Inductor's pattern matcher is off, so that no pattern of the generated
        expressions is swapped for a kernel of PyTorch's own (it has attention patterns that
        rewrite to scaled_dot_product_attention): what runs is the printed formulas, fused."""
        if self._compiled is None:
            self._compiled = torch.compile(self._with_loss, dynamic=False, options={"pattern_matcher": False})
        return self._compiled

    def _logits(self, idx):
        """Logits alone (sampling): the printed forward, no tape, nothing to differentiate."""
        with torch.no_grad():
            return self._program.forward(self._ops, dict(self.named_parameters()), idx)[0]


def _compile_failure(e: BaseException) -> bool:
    """An error of torch.compile's own machinery (dynamo, inductor, the C++ toolchain) rather
    than one the model raised: those propagate unchanged."""
    return type(e).__module__.startswith(("torch._dynamo", "torch._inductor"))

"""The fixed position tables of a GPT — RoPE's cos, sin and rotation, the sinusoidal PE of
seed A §5 — from the generated table functions (the formulas of derivations/positional.py; no
formula is typed here). Built once per dtype and device at the config's block size, sliced to
the sequence length; constant inputs of the kernels, with no gradient."""

from __future__ import annotations

import numpy as np

from .config import GPTConfig
from .kernels import ROPE_BASE, SINUSOID_BASE, table_fn


class PositionTables:
    def __init__(self, backend: str, config: GPTConfig):
        self.backend, self.config = backend, config
        self._built: dict = {}

    def ids(self, ids: object) -> object:
        """The position of every token of ids (B, T): 0, 1, …, T − 1 in each row."""
        B, T = ids.shape
        if self.backend == "numpy":
            return np.broadcast_to(np.arange(T), (B, T))
        import torch

        return torch.arange(T, device=ids.device).expand(B, T)

    def rope(self, T: int, dtype: object, device: object = None) -> tuple:
        """cos, sin (T, hd) and rot (hd, hd) for RoPE."""
        cos, sin, rot = self._table("rope", "rope_tables", self.config.head_dim, ROPE_BASE, dtype, device)
        return cos[:T], sin[:T], rot

    def sinusoid(self, T: int, dtype: object, device: object = None) -> object:
        """PE (T, C), added to the token embeddings."""
        return self._table("sinusoidal", "sinusoidal_table", self.config.n_embd, SINUSOID_BASE, dtype, device)[:T]

    def _table(self, module: str, name: str, width: int, base: float, dtype, device):
        key = (name, dtype, device)
        if key not in self._built:
            fn = table_fn(self.backend, module, name)
            if self.backend == "numpy":
                made = fn(self.config.block_size, width, base=base, dtype=dtype)

                def convert(a):
                    return np.asarray(a, dtype=dtype)
            else:
                import torch

                made = fn(self.config.block_size, width, base=base, dtype=dtype, device=device)

                def convert(a):
                    return torch.as_tensor(a).to(device=device, dtype=dtype)

            self._built[key] = tuple(map(convert, made)) if isinstance(made, (tuple, list)) else convert(made)
        return self._built[key]

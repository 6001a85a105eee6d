"""Dropout's masks: which units a training step drops, drawn so that a run is reproducible.

The printed program (generated/<backend>/gpt.py) applies dropout, y = x ⊙ m/(1 − p), at its
sites: the embedding's output ("x"), each block's attention weights ("h.<l>.att_h", the
attention_dropout op: one mask per batch row, head, query and key) and its residual branches
("h.<l>.att_d", "h.<l>.m_d"); its kernels are the dropout ops' (derivations/dropout.py: E[y] = x
proved; derivations/attention_dropout.py). This module only draws m ∈ {0, 1}, P(m = 1) = 1 − p,
as data:

    noise = Noise(seed, step)              a training step's masks; a forward without one drops nothing
    noise.rows(k)                          the same masks, for a batch whose first row is row k
    DropoutMasks(p).keep(site, noise, shape, like)   one site's keep mask, in the dtype of `like`

Each row of the global batch draws its mask from a stream of its own, keyed by (seed, step,
row, site) (NumPy's SeedSequence over those numbers; Philox-like counter keys need no state).
So a step's masks depend on nothing else: not on how the batch was cut into micro-batches,
threads, worker processes or ranks, not on the backend, and not on what ran before — a resumed
run draws, at step k, exactly the masks the uninterrupted run drew.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Noise:
    """The masks of one training step: the run's seed, the step and the global index of the
    first row of the batch the forward is given."""

    seed: int
    step: int
    row: int = 0

    def rows(self, start: int) -> Noise:
        """The noise of the rows from `start` on (a slice, micro-batch or rank of the batch)."""
        return replace(self, row=self.row + int(start))


class DropoutMasks:
    """Keep masks of inverted dropout at drop rate p, row by row (axis 0 of the value)."""

    def __init__(self, p: float):
        if not 0 <= p < 1:
            raise ValueError(f"dropout p must satisfy 0 <= p < 1, got {p!r}")
        self.p = float(p)

    def keep_numpy(self, site: str, noise: Noise, shape: tuple, dtype: np.dtype | type) -> np.ndarray:
        """m (shape, dtype) with m = 1 where the row's uniform draw u ≥ p: P(m = 1) = 1 − p."""
        key = zlib.crc32(site.encode())
        out = np.empty(shape, dtype=dtype)
        for b in range(shape[0]):
            rng = np.random.default_rng([noise.seed, noise.step, noise.row + b, key])
            np.greater_equal(rng.random(shape[1:]), self.p, out=out[b], casting="unsafe")
        return out

    def keep(self, site: str, noise: Noise, shape: tuple, like: object) -> object:
        """The keep mask of `site` for `noise`, of `shape`, in the dtype of `like` (a NumPy array
        or a torch tensor, then on its device)."""
        shape = tuple(int(n) for n in shape)
        if isinstance(like, np.ndarray):
            return self.keep_numpy(site, noise, shape, like.dtype)
        import torch

        m = self.keep_numpy(site, noise, shape, np.float32)
        return torch.from_numpy(m).to(device=like.device, dtype=like.dtype)

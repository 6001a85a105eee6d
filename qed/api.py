"""`qed.load(run_dir)`: a trained run's model, for use outside the command line.

    model = qed.load("runs/sort")              # the latest checkpoint, verified before use
    logits = model.logits(ids)                  # (B, T, V) for ids (B, T)
    loss = model.loss(ids, targets)             # the mean cross-entropy (targets −1: ignored)
    ids = model.generate(ids, 8, greedy=True)   # ids with 8 tokens appended
    model.encode("hello"), model.decode(ids[0]) # the run's vocabulary (text runs, sort runs)

The model is the run's backend (or `backend=`) running the printed program
(generated/<backend>/gpt.py) on the checkpoint's weights, exactly as `qed sample` does.
"""

from __future__ import annotations

import os

import numpy as np


class LoadedModel:
    """A run's model: its config, the checkpoint it came from, logits, loss and generation."""

    def __init__(self, runner, checkpoint):
        self._runner = runner
        self.checkpoint = checkpoint
        self.config = runner.config
        self.step = checkpoint.step
        self.backend = runner.backend
        self._task = None

    def __repr__(self) -> str:
        c = self.config
        return (
            f"LoadedModel({self.backend}, step {self.step}, {c.n_layer} layers, {c.n_head} heads, "
            f"n_embd={c.n_embd}, vocab {c.vocab_size}, from {self.checkpoint.path})"
        )

    def _ids(self, ids, what: str = "ids") -> np.ndarray:
        a = np.asarray(ids)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{what} must be integer token ids of shape (T,) or (B, T), got {a.dtype} {a.shape}")
        return a.astype(np.int64)

    def logits(self, ids: object) -> np.ndarray:
        """(B, T, V) logits of ids (B, T) (or (T,): B = 1); T at most the block size."""
        return np.asarray(self._runner.logits(self._ids(ids)))

    def loss(self, ids: object, targets: object) -> float:
        """The mean cross-entropy of the next-token targets (same shape as ids; −1 ignored)."""
        return float(self._runner.loss(self._ids(ids), self._ids(targets, "targets")))

    def generate(
        self,
        ids: object,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        greedy: bool = False,
        seed: int = 0,
    ) -> np.ndarray:
        """ids with max_new_tokens tokens appended, each from the last block_size tokens."""
        from .train import generate

        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        return generate(
            self._runner,
            self._ids(ids),
            int(max_new_tokens),
            self.config.block_size,
            temperature=temperature,
            top_k=top_k,
            greedy=greedy,
            rng=np.random.default_rng(seed),
        )

    # ------------------------------------------------------------------ the run's vocabulary
    def _vocabulary(self):
        if self._task is None:
            from .sample import _task_for_sampling

            self._task = _task_for_sampling(self.checkpoint.meta["task"])
        return self._task

    def encode(self, text: str) -> np.ndarray:
        """Token ids of `text` in the run's vocabulary."""
        return np.asarray(self._vocabulary().encode(text), dtype=np.int64)

    def decode(self, ids: object) -> str:
        """The text of token ids in the run's vocabulary."""
        return self._vocabulary().decode(np.asarray(ids).tolist())

    def close(self) -> None:
        self._runner.close()


def load(run_dir: str | os.PathLike, *, backend: str | None = None, best: bool = False) -> LoadedModel:
    """The model of a run directory's latest (or best) checkpoint, verified before it is used."""
    from .checkpoint import BEST, LATEST
    from .train import load_for_inference

    runner, c = load_for_inference(run_dir, backend=backend, which=BEST if best else LATEST)
    return LoadedModel(runner, c)

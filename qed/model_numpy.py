"""NumpyGPT: the GPT of derivations/gpt.py, run by its printed program, with no autograd.

The model's whole computation is generated/numpy/gpt.py: `forward` (embedding, blocks, head,
the loss over the targets that are not −1) keeping every kernel's cache on a tape, `backward`
(the composition rule over the same statements) and the AdamW step. This class holds the
parameters (views of one flat buffer), cuts a batch into slices for threads or worker processes
(qed/parallel.py) and hands each slice to the printed program; it does no arithmetic on model
tensors itself.
"""

from __future__ import annotations

import numpy as np

from .config import GPTConfig, check_idx
from .cpu import default_threads, tune_malloc
from .dropout import DropoutMasks, Noise
from .flat import flat_layout, flat_params, flat_views
from .kernels import NORM_EPS, kernel, load_kernels
from .parallel import DataParallel, check_mode
from .params import check_params, init_params, param_shapes
from .positions import PositionTables


# --------------------------------------------------------------------------- the model
class NumpyGPT:
    """A GPT whose forward and backward are generated NumPy kernels (no autograd)."""

    backend = "numpy"

    def __init__(
        self, config: GPTConfig, dtype=np.float32, seed: int = 0, threads: int | None = None, parallel: str = "threads"
    ):
        """`threads`: into how many slices of rows a batch is cut (forward and backward; the
        slices' gradients are summed). None: min(2, CPU count); 1: no slicing. `parallel`: who
        runs the slices after the first, "threads" or "processes" (qed/parallel.py)."""
        check_mode(parallel)
        config.validate()
        tune_malloc()
        self.config = config
        self.dtype = np.dtype(dtype)
        initial = {k: v.astype(self.dtype) for k, v in init_params(config, seed).items()}
        self.parallel = DataParallel(
            default_threads() if threads is None else max(1, int(threads)),
            parallel,
            sum(v.size for v in initial.values()),
            self.dtype,
        )
        self.params: dict[str, np.ndarray] = flat_params(initial, self.dtype, buffer=self.parallel.buffer)
        self.flat_views = dict(self.params)  # the flat layout (and what workers read)
        self.offsets = flat_layout(self.flat_views)[1]
        self._tape = None
        # the printed program and the kernels it calls, by role (fail now, not mid-forward, if
        # one is missing)
        self._program = kernel("numpy", "gpt")
        self._ops = self._program.Kernels(
            config,
            load_kernels("numpy", config),
            PositionTables("numpy", config),
            NORM_EPS,
            DropoutMasks(config.dropout) if config.dropout > 0 else None,
        )

    # ------------------------------------------------------------------ params
    @property
    def num_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def load_params(self, params: dict) -> None:
        """Copy {name: array} into the parameters, in place (an optimizer holding
        `self.params` keeps seeing them); names and shapes must match the config."""
        check_params(params, param_shapes(self.config))
        for k in param_shapes(self.config):
            self.params[k][...] = np.asarray(params[k], dtype=self.dtype)
        self._tape = None

    # ------------------------------------------------------------------ forward / backward
    def forward(
        self, idx: np.ndarray, targets: np.ndarray | None = None, noise: Noise | None = None
    ) -> tuple[np.ndarray, float | None]:
        """logits (B, T, V) and the mean cross-entropy over the tokens whose target is not −1
        (None without targets). With targets, keeps every cache for `backward`. `noise`: a
        training step's dropout masks (qed/dropout.py; None: no dropout).

        With `threads` > 1 the batch is cut into that many slices of rows, run side by side
        (qed/parallel.py); the loss is the mean over all scored tokens, Σ_s n_s·loss_s / Σ_s n_s."""
        idx = np.asarray(idx)
        targets = None if targets is None else np.asarray(targets)
        check_idx(self.config, idx, targets)
        logits, loss, self._tape = self.parallel.forward(self, idx, targets, noise)
        return logits, loss

    def forward_slice(
        self, idx: np.ndarray, targets: np.ndarray | None, noise: Noise | None = None
    ) -> tuple[np.ndarray, float | None, dict]:
        """(logits, mean loss or None, tape) of one slice of the batch (thread-safe: no state):
        the printed program's forward (generated/numpy/gpt.py)."""
        logits, loss, tape = self._program.forward(self._ops, self.params, idx, targets, noise)
        return logits, (None if loss is None else float(loss.reshape(()))), tape

    def backward(self, scale: float = 1.0) -> dict[str, np.ndarray]:
        """∂(scale · mean loss)/∂param for every parameter, from the tape of the last forward.

        The gradients are views of one new flat buffer laid out like the parameters (so the
        optimizer updates them all at once); each slice of the batch contributes
        ∂(n_s·loss_s/N)/∂param: its upstream gradient is n_s/N instead of 1 (times `scale`: a
        micro-batch's weight in gradient accumulation, qed/parallel.py's micro_batches)."""
        tape = self._tape
        if not tape:
            raise RuntimeError("backward() needs a forward(idx, targets) with targets first")
        self._tape = None
        if scale != 1.0:
            tape = [(t, w * scale) for t, w in tape]
        buf = np.empty(sum(p.size for p in self.flat_views.values()), dtype=self.dtype)
        grads = flat_views(buf, self.offsets, {k: p.shape for k, p in self.flat_views.items()})
        return self.parallel.backward(self, tape, grads)

    def backward_slice(self, tape: dict, weight: float) -> dict[str, np.ndarray]:
        """The gradients of one slice's loss times `weight` (n_s/N), from its forward's tape: the
        printed program's backward (generated/numpy/gpt.py)."""
        return self._program.backward(self._ops, tape, weight)

    # ------------------------------------------------------------------ worker processes
    def close(self) -> None:
        """Stop the worker processes (parallel="processes"); the next step starts new ones."""
        self.parallel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    __call__ = forward

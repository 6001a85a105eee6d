"""Data parallelism for NumpyGPT on the CPU: a batch cut into slices of rows, each slice run
through the same model — the first in this thread, the others by Python threads or by worker
processes (qed/workers.py) — and the slices' losses and gradients combined.

With N scored tokens in the batch and n_s in slice s (targets of −1 are not scored):

    loss       = Σ_s (n_s/N) · loss_s              the mean over every scored token
    ∂loss/∂θ   = Σ_s ∂((n_s/N) · loss_s)/∂θ        each slice's backward starts from n_s/N, not 1

The model provides `forward_slice(idx, targets) -> (logits, loss_s, tape)` and
`backward_slice(tape, weight) -> {name: gradient}` and holds no state between them; this module
imports no model (NumpyGPT imports it, and the worker process builds the model itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from .cpu import blas_single_thread
from .dropout import Noise
from .errors import QedError

MODES = ("threads", "processes")


def check_mode(parallel: str) -> str:
    """ "threads" or "processes", or a ValueError."""
    if parallel not in MODES:
        raise ValueError(f"parallel must be 'threads' or 'processes', got {parallel!r}")
    return parallel


def shards(B: int, n: int) -> list[slice]:
    """B rows cut into min(n, B) slices whose sizes differ by at most one."""
    n = min(n, B)
    bounds = [B * s // n for s in range(n + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def micro_batches(x: np.ndarray, y: np.ndarray, n: int, rows: bool = False) -> list[tuple]:
    """A step's batch as `n` micro-batches (gradient accumulation, `--grad-accum n`): consecutive
    rows, sizes differing by at most one, each with its weight n_i/N, its share of the batch's N
    scored tokens (targets of -1 are not scored); one with no scored token is left out.

    The batch's mean loss is Σ_i (n_i/N)·loss_i, so the gradients of the micro-batches' losses,
    each weighted by n_i/N and summed, are the gradient of the whole batch: the update equals
    that of one step on the whole batch, to rounding. When every micro-batch scores as many
    tokens (every row of qed's tasks scores the same number) each weight is 1/n: nanoGPT's
    loss / gradient_accumulation_steps. `rows`: each tuple also gives its first row's index in
    the batch (the dropout masks' `Noise.rows`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"accum must be a positive integer, got {n!r}")
    x, y = np.asarray(x), np.asarray(y)
    if n == 1:
        return [(x, y, 1.0, 0) if rows else (x, y, 1.0)]
    if x.shape[0] < n:
        raise QedError(f"a batch of {x.shape[0]} row(s) cannot be cut into {n} micro-batches (--grad-accum {n})")
    scored = y >= 0
    total = int(np.count_nonzero(scored))
    if total == 0:
        raise ValueError("every target is -1 (ignored): there is no token to score")
    out = []
    for part in shards(x.shape[0], n):
        count = int(np.count_nonzero(scored[part]))
        if count:
            out.append((x[part], y[part], count / total, part.start) if rows else (x[part], y[part], count / total))
    return out


class DataParallel:
    """Who runs the slices of a batch after the first, which runs in the calling thread:

      "threads":   Python threads of this process. NumPy releases the GIL inside BLAS and
                   ufuncs, so they overlap, but they hand the GIL over at every call;
      "processes": worker processes (qed/workers.py), started at the first forward with
                   targets, each with a copy of the model whose parameters live in shared
                   memory (`buffer`: the model builds its parameters as views of it). Measured
                   faster on two cores; `close()` stops them (so does exiting). POSIX only:
                   elsewhere this falls back to threads.
    BLAS runs on one thread meanwhile (threadpoolctl), so the two do not oversubscribe.
    `threads`: into how many slices a batch is cut; 1: no slicing."""

    def __init__(self, threads: int, parallel: str, n_params: int, dtype):
        check_mode(parallel)
        if parallel == "processes" and os.name != "posix":  # pipes passed to a child: POSIX only
            parallel = "threads"
        self.threads, self.mode = threads, parallel
        self.pool = None  # (workers, ThreadPoolExecutor) for the slices after the first
        self.workers = None  # ShardWorkers (mode "processes"), started on first use
        self.shared = None  # SharedArray holding the flat parameters (mode "processes")
        if parallel == "processes" and threads > 1:
            from .workers import SharedArray

            self.shared = SharedArray(n_params, dtype, keep_fd=True)

    @property
    def buffer(self) -> np.ndarray | None:
        """The 1-D buffer the model's parameters must live in (shared memory), or None."""
        return None if self.shared is None else self.shared.array

    # ------------------------------------------------------------------ one step
    def forward(
        self, model: object, idx: np.ndarray, targets: np.ndarray | None, noise: Noise | None = None
    ) -> tuple[np.ndarray, float | None, list | None]:
        """(logits (B, T, V), the mean loss or None, the tape for `backward` or None). `noise`:
        the dropout masks' (qed/dropout.py), each slice's from its first row on."""
        B = idx.shape[0]
        parts = shards(B, self.threads)
        counts = None
        if targets is not None:
            scored = targets >= 0
            counts = [int(np.count_nonzero(scored[sl])) for sl in parts]
            if min(counts) == 0:  # a slice with nothing to score: no split
                parts, counts = [slice(0, B)], [int(np.count_nonzero(scored))]

        def noise_of(sl):
            return None if noise is None else noise.rows(sl.start)

        if self.shared is not None and targets is not None and len(parts) > 1:
            results = self._forward_processes(model, idx, targets, parts, noise_of)
        else:
            results = self.map(
                lambda sl: model.forward_slice(idx[sl], None if targets is None else targets[sl], noise_of(sl)), parts
            )
        logits = results[0][0] if len(results) == 1 else np.concatenate([r[0] for r in results])
        if targets is None:
            return logits, None, None  # caches only when a backward can follow
        total = sum(counts)
        weights = [n / total for n in counts]
        loss = results[0][1] if len(results) == 1 else float(sum(w * r[1] for w, r in zip(weights, results)))
        return logits, loss, [(r[2], w) for r, w in zip(results, weights)]

    def backward(self, model: object, tape: list, out: dict) -> dict:
        """Σ over slices of the gradients of (n_s/N)·loss_s, written into `out` ({name: array})."""
        if any(isinstance(t, int) for t, _ in tape):  # slices held by worker processes
            parts = self._backward_processes(model, tape)
        else:
            parts = self.map(lambda tw: model.backward_slice(*tw), tape)
        for k, g in out.items():  # slice 0 + slice 1 (+ …): one pass each
            if len(parts) == 1:
                np.copyto(g, parts[0][k])
                continue
            np.add(parts[0][k], parts[1][k], out=g)
            for p in parts[2:]:
                np.add(g, p[k], out=g)
        return out

    # ------------------------------------------------------------------ threads
    def map(self, fn: Callable, items: list) -> list:
        """[fn(x) for x in items]: the first in this thread, the others in the pool, BLAS on
        one thread while they run together."""
        if len(items) == 1:
            return [fn(items[0])]
        if self.pool is None or self.pool[0] < len(items) - 1:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = (len(items) - 1, ThreadPoolExecutor(max_workers=len(items) - 1, thread_name_prefix="qed-shard"))
        errstate = np.geterr()  # np.errstate is per thread: carry the caller's

        def in_pool(x):
            with np.errstate(**errstate):
                return fn(x)

        with blas_single_thread():
            futures = [self.pool[1].submit(in_pool, x) for x in items[1:]]
            first = fn(items[0])
            return [first] + [f.result() for f in futures]

    # ------------------------------------------------------------------ worker processes
    def _start_workers(self, model, n: int):
        if self.workers is None or len(self.workers.procs) < n:
            from .workers import ShardWorkers

            self.close()
            self.workers = ShardWorkers(
                n,
                model.config,
                model.dtype,
                self.shared,
                model.offsets,
                {k: v.shape for k, v in model.flat_views.items()},
            )
        return self.workers

    def _forward_processes(self, model, idx, targets, parts, noise_of):
        """The first slice here, slice s ≥ 1 in worker s−1; each worker keeps its own tape (the
        tape here records its number)."""
        workers = self._start_workers(model, len(parts) - 1)
        for k, view in model.flat_views.items():  # parameters replaced, not updated in place:
            if model.params[k] is not view:  # copy them where the workers read
                view[...] = model.params[k]
        for w, sl in enumerate(parts[1:]):
            workers.start_forward(w, idx[sl], targets[sl], noise_of(sl))
        return self._own_then_workers(
            lambda: model.forward_slice(idx[parts[0]], targets[parts[0]], noise_of(parts[0])),
            workers.finish_forward,
            len(parts) - 1,
            lambda r, w: (*r, w),
        )

    def _backward_processes(self, model, tape):
        workers = self.workers
        for t, weight in tape[1:]:
            workers.start_backward(t, weight)
        return self._own_then_workers(
            lambda: model.backward_slice(*tape[0]), workers.finish_backward, len(tape) - 1, lambda r, w: r
        )

    @staticmethod
    def _own_then_workers(own, finish, n, wrap):
        """[own(), wrap(finish(0), 0), …]: every worker's reply is read even when `own` fails, so
        the next command starts in step; the first failure is raised after."""
        err, results = None, []
        try:
            with blas_single_thread():
                results.append(own())
        except BaseException as e:
            err = e
        for w in range(n):
            try:
                results.append(wrap(finish(w), w))
            except BaseException as e:
                err = err or e
        if err is not None:
            raise err
        return results

    def close(self) -> None:
        """Stop the worker processes; the next step starts new ones."""
        if self.workers is not None:
            self.workers.close()
            self.workers = None

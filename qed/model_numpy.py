"""NumpyGPT: a GPT assembled from the generated NumPy kernels, with no autograd of any kind.

llm.c style: `forward` calls each layer's `<op>_forward` and keeps its cache on a tape;
`backward` walks the tape in reverse and calls the matching `<op>_backward`. Every formula —
embedding, linear, norms, attention, activations, SwiGLU, RoPE, sinusoidal table, cross-entropy
— is a generated kernel (generated/numpy/<op>.py, printed from a proved SymPy expression). The
only arithmetic written here is bookkeeping: the residual add and its gradient fan-out
(`dx = dy + d(sublayer input)`), splitting/merging heads (reshape/transpose) and its inverse,
and accumulating a gradient that reaches a parameter twice (tied wte). The loss is the
cross_entropy kernel's mean over the tokens whose target is not -1 (the kernel's mask; -1 is
nanoGPT's / F.cross_entropy's ignore_index).

Block flows (see qed/config.py):

    pre-norm  (GPT-2):     x = x + attn(ln_1(x));  x = x + mlp(ln_2(x));  ...;  x = ln_f(x)
    post-norm (document):  x = ln_1(x + attn(x));  x = ln_2(x + mlp(x));  ...   (no ln_f: the
                           last block already ends with a norm)

Shapes in comments: B batch, T time, C = n_embd, nh heads, hd = C/nh, V vocab, H = 4C.
"""
from __future__ import annotations

import contextlib
import os
from collections import OrderedDict

import numpy as np

from .config import GPTConfig
from .kernels import NORM_EPS, ROPE_BASE, SINUSOID_BASE, kernel, kernels_for, table_fn
from .params import check_params, init_params, param_shapes



# --------------------------------------------------------------------------- parameters
def flat_params(arrays: dict, dtype, buffer: np.ndarray | None = None) -> "OrderedDict[str, np.ndarray]":
    """The same values as views of one contiguous 1-D buffer, matrices (the weight-decayed
    parameters) first, then vectors; the dict keeps the given order. An optimizer can then
    update every parameter with one kernel call per weight-decay group (see `flat_layout`).
    `buffer`: a 1-D array of that many elements to use (e.g. shared memory) instead of a new one."""
    order = sorted(arrays, key=lambda k: np.ndim(arrays[k]) < 2)             # stable: 2-D first
    size = sum(int(np.size(a)) for a in arrays.values())
    buf = np.empty(size, dtype=dtype) if buffer is None else buffer
    if buf.shape != (size,) or buf.dtype != np.dtype(dtype):
        raise ValueError(f"flat_params: buffer must be ({size},) {np.dtype(dtype)}, got {buf.shape} {buf.dtype}")
    views, off = {}, 0
    for k in order:
        a = np.asarray(arrays[k])
        views[k] = buf[off:off + a.size].reshape(a.shape)
        views[k][...] = a
        off += a.size
    return OrderedDict((k, views[k]) for k in arrays)


def flat_layout(arrays: dict):
    """(buffer, {name: offset}) if the arrays are contiguous views that tile one 1-D buffer
    exactly, else None."""
    vals = list(arrays.values())
    if not vals or not all(isinstance(a, np.ndarray) for a in vals):
        return None
    base = vals[0].base
    if base is None or base.ndim != 1 or not base.flags.c_contiguous:
        return None
    if any(a.base is not base or not a.flags.c_contiguous or a.dtype != base.dtype for a in vals):
        return None
    start, size = base.__array_interface__["data"][0], base.itemsize
    offsets = {k: (a.__array_interface__["data"][0] - start) // size for k, a in arrays.items()}
    pos = 0
    for k in sorted(arrays, key=offsets.get):
        if offsets[k] != pos:
            return None
        pos += arrays[k].size
    return (base, offsets) if pos == base.size else None


def default_threads() -> int:
    """Threads per batch for NumpyGPT: the CPU count, at most 2 (QED_NUMPY_THREADS overrides)."""
    env = os.environ.get("QED_NUMPY_THREADS")
    if env:
        return max(1, int(env))
    return max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1)))


_MALLOC_TUNED = []


def tune_malloc() -> bool:
    """Keep freed memory in the process instead of returning it to the OS after every step.

    A training step allocates and frees the same large temporaries every time; with glibc's
    defaults each one above the mmap threshold is a fresh mmap and its first touch page-faults
    (thousands of faults a step, measured). Raising M_MMAP_THRESHOLD (to its 32 MiB maximum),
    M_TRIM_THRESHOLD and M_TOP_PAD makes the heap keep and reuse them. Once per process, glibc
    only, and not where the user set MALLOC_* variables or QED_MALLOC_TUNE=0. True if applied."""
    if _MALLOC_TUNED:
        return _MALLOC_TUNED[0]
    ok = False
    if os.environ.get("QED_MALLOC_TUNE", "1") != "0" and not any(k.startswith("MALLOC_") for k in os.environ):
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt
            M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
            ok = bool(mallopt(M_MMAP_THRESHOLD, 32 * 2**20)) & bool(mallopt(M_TRIM_THRESHOLD, 512 * 2**20)) \
                & bool(mallopt(M_TOP_PAD, 64 * 2**20))
        except (OSError, AttributeError):              # not glibc: nothing to tune
            ok = False
    _MALLOC_TUNED.append(ok)
    return ok


_BLAS_CONTROLLER = []


def blas_single_thread():
    """A context in which BLAS runs on one thread (threadpoolctl), or a no-op without it."""
    if not _BLAS_CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS_CONTROLLER.append(ThreadpoolController())
        except ImportError:                                  # pragma: no cover - a dependency
            _BLAS_CONTROLLER.append(None)
    ctl = _BLAS_CONTROLLER[0]
    return contextlib.nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")


def check_idx(config: GPTConfig, idx, targets=None) -> tuple[int, int]:
    """(B, T) of a batch of token ids, or a ValueError saying what is wrong."""
    shape = tuple(idx.shape)
    if len(shape) != 2:
        raise ValueError(f"idx must have shape (batch, time), got {shape}")
    B, T = shape
    if T > config.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size={config.block_size}")
    if T < 1 or B < 1:
        raise ValueError(f"idx must be non-empty, got shape {shape}")
    if targets is not None and tuple(targets.shape) != shape:
        raise ValueError(f"targets must have the shape of idx {shape}, got {tuple(targets.shape)}")
    return B, T


# --------------------------------------------------------------------------- the model
class NumpyGPT:
    """A GPT whose forward and backward are generated NumPy kernels (no autograd)."""

    backend = "numpy"

    def __init__(self, config: GPTConfig, dtype=np.float32, seed: int = 0, threads: int | None = None,
                 parallel: str = "threads"):
        """`threads`: into how many slices of rows a batch is cut (forward and backward; the
        slices' gradients are summed). None: min(2, CPU count); 1: no slicing.

        `parallel`: who runs the slices after the first, which runs in this thread —
          "threads":   Python threads of this process. NumPy releases the GIL inside BLAS and
                       ufuncs, so they overlap, but they hand the GIL over at every call;
          "processes": worker processes (qed/workers.py), started at the first forward with
                       targets, each with a copy of the model whose parameters live in shared
                       memory (this model's own parameters are views of it). Measured faster on
                       two cores; `close()` stops them (so does exiting). POSIX only: elsewhere
                       this falls back to threads.
        BLAS runs on one thread meanwhile (threadpoolctl), so the two do not oversubscribe."""
        if parallel not in ("threads", "processes"):
            raise ValueError(f"parallel must be 'threads' or 'processes', got {parallel!r}")
        config.validate()
        tune_malloc()
        self.config = config
        self.dtype = np.dtype(dtype)
        self.threads = default_threads() if threads is None else max(1, int(threads))
        self.parallel = parallel
        self._pool = None            # (workers, ThreadPoolExecutor) for the slices after the first
        self._workers = None         # ShardWorkers (parallel="processes"), started on first use
        self._shared = None          # SharedArray holding the flat parameters (parallel="processes")
        initial = {k: v.astype(self.dtype) for k, v in init_params(config, seed).items()}
        if parallel == "processes" and os.name != "posix":  # pipes passed to a child: POSIX only
            self.parallel = parallel = "threads"
        if parallel == "processes" and self.threads > 1:
            from .workers import SharedArray
            self._shared = SharedArray(sum(v.size for v in initial.values()), self.dtype, keep_fd=True)
        self.params: dict[str, np.ndarray] = flat_params(
            initial, self.dtype, buffer=None if self._shared is None else self._shared.array)
        self._flat_views = dict(self.params)               # the flat layout (and what workers read)
        self._offsets = flat_layout(self._flat_views)[1]
        self._tape = None
        self._k = {}                 # loaded kernel modules by op name
        self._sinusoid = None        # the fixed table (T_max, C), from the generated kernel
        self._rope = None            # cos, sin (T_max, hd), rot (hd, hd)
        self._kernels_needed()       # fail now, not mid-forward, if a kernel is missing

    # ------------------------------------------------------------------ kernels
    def _kernels_needed(self) -> list[str]:
        names, tables = kernels_for(self.config)
        for n in names:
            self._kern(n)
        for module, fn in tables:
            table_fn("numpy", module, fn)
        return names

    def _kern(self, name):
        if name not in self._k:
            self._k[name] = kernel("numpy", name)
        return self._k[name]

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

    # ------------------------------------------------------------------ layers
    # Each *_fwd returns (out, cache); each *_bwd takes (dout, cache, grads), adds the
    # parameter gradients into `grads` and returns the gradient of the layer's input.

    def _linear_fwd(self, prefix, x, bias):
        P = self.params
        if bias:
            return self._kern("linear").linear_forward(x, P[prefix + ".weight"], P[prefix + ".bias"])
        return self._kern("linear_nobias").linear_nobias_forward(x, P[prefix + ".weight"])

    def _linear_bwd(self, prefix, dy, cache, bias, grads):
        if bias:
            dx, dw, db = self._kern("linear").linear_backward(dy, cache)
            _acc(grads, prefix + ".bias", db)
        else:
            dx, dw = self._kern("linear_nobias").linear_nobias_backward(dy, cache)
        _acc(grads, prefix + ".weight", dw)
        return dx

    def _norm_fwd(self, prefix, x):
        P, c = self.params, self.config
        if c.norm == "layernorm":
            beta = P[prefix + ".bias"] if c.bias else np.zeros(c.n_embd, self.dtype)  # bias=False: β = 0
            return self._kern("layernorm").layernorm_forward(x, P[prefix + ".weight"], beta, eps=NORM_EPS)
        return self._kern("rmsnorm").rmsnorm_forward(x, P[prefix + ".weight"], eps=NORM_EPS)

    def _norm_bwd(self, prefix, dy, cache, grads):
        c = self.config
        if c.norm == "layernorm":
            dx, dgamma, dbeta = self._kern("layernorm").layernorm_backward(dy, cache)
            if c.bias:
                _acc(grads, prefix + ".bias", dbeta)
        else:
            dx, dgamma = self._kern("rmsnorm").rmsnorm_backward(dy, cache)
        _acc(grads, prefix + ".weight", dgamma)
        return dx

    def _rope_tables(self, T):
        """cos, sin (T, hd) and rot (hd, hd) for RoPE, from the generated table function."""
        if self._rope is None or self._rope[0].shape[0] < T:
            cos, sin, rot = table_fn("numpy", "rope", "rope_tables")(
                self.config.block_size, self.config.head_dim, base=ROPE_BASE, dtype=self.dtype)
            self._rope = tuple(np.asarray(a, dtype=self.dtype) for a in (cos, sin, rot))
        cos, sin, rot = self._rope
        return cos[:T], sin[:T], rot

    def _rope_fwd(self, x):
        """RoPE on (B, nh, T, hd): the kernel wants the tables at x's leading axes (views)."""
        cos, sin, rot = self._rope_tables(x.shape[-2])
        lead = x.shape[:-2]
        return self._kern("rope").rope_forward(
            x, np.broadcast_to(cos, x.shape), np.broadcast_to(sin, x.shape),
            np.broadcast_to(rot, lead + rot.shape))

    def _rope_bwd(self, dy, cache):
        return self._kern("rope").rope_backward(dy, cache)      # dx only: the tables are constant inputs

    def _attn_fwd(self, prefix, x):
        c = self.config
        B, T, C = x.shape
        nh, hd = c.n_head, c.head_dim
        qkv, c_attn = self._linear_fwd(prefix + ".c_attn", x, c.bias)          # (B, T, 3C)

        def heads(t):                                                         # (B, T, C) -> (B, nh, T, hd)
            return t.reshape(B, T, nh, hd).transpose(0, 2, 1, 3)

        q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
        c_rope = None
        if c.pos == "rope":
            (q, cq), (k, ck) = self._rope_fwd(q), self._rope_fwd(k)
            c_rope = (cq, ck)
        y, c_sdpa = getattr(self._kern(c.attention), c.attention + "_forward")(
            q, k, v, causal=True)                                              # (B, nh, T, hd)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)                          # merge heads
        out, c_proj = self._linear_fwd(prefix + ".c_proj", y, c.bias)
        return out, (c_attn, c_rope, c_sdpa, c_proj, (B, T, C))

    def _attn_bwd(self, prefix, dout, cache, grads):
        c = self.config
        c_attn, c_rope, c_sdpa, c_proj, (B, T, C) = cache
        nh, hd = c.n_head, c.head_dim
        dy = self._linear_bwd(prefix + ".c_proj", dout, c_proj, c.bias, grads)
        dy = dy.reshape(B, T, nh, hd).transpose(0, 2, 1, 3)                  # undo the merge
        dq, dk, dv = getattr(self._kern(c.attention), c.attention + "_backward")(dy, c_sdpa)
        if c_rope is not None:
            dq, dk = self._rope_bwd(dq, c_rope[0]), self._rope_bwd(dk, c_rope[1])
        dqkv = np.empty((B, T, 3, nh, hd), dtype=dq.dtype)                   # undo split + heads:
        for part, g in enumerate((dq, dk, dv)):                               # one copy each
            dqkv[:, :, part] = g.transpose(0, 2, 1, 3)
        dqkv = dqkv.reshape(B, T, 3 * C)
        return self._linear_bwd(prefix + ".c_attn", dqkv, c_attn, c.bias, grads)

    def _mlp_fwd(self, prefix, x):
        c, P = self.config, self.params
        if c.ffn == "swiglu":
            return self._kern("swiglu").swiglu_forward(
                x, P[prefix + ".w_gate.weight"], P[prefix + ".w_up.weight"], P[prefix + ".w_down.weight"])
        h, c_fc = self._linear_fwd(prefix + ".c_fc", x, c.bias)                 # (B, T, H)
        a, c_act = getattr(self._kern(c.ffn), c.ffn + "_forward")(h)
        out, c_proj = self._linear_fwd(prefix + ".c_proj", a, c.bias)           # (B, T, C)
        return out, (c_fc, c_act, c_proj)

    def _mlp_bwd(self, prefix, dout, cache, grads):
        c = self.config
        if c.ffn == "swiglu":
            dx, dwg, dwu, dwd = self._kern("swiglu").swiglu_backward(dout, cache)
            _acc(grads, prefix + ".w_gate.weight", dwg)
            _acc(grads, prefix + ".w_up.weight", dwu)
            _acc(grads, prefix + ".w_down.weight", dwd)
            return dx
        c_fc, c_act, c_proj = cache
        da = self._linear_bwd(prefix + ".c_proj", dout, c_proj, c.bias, grads)
        dh = getattr(self._kern(c.ffn), c.ffn + "_backward")(da, c_act)
        return self._linear_bwd(prefix + ".c_fc", dh, c_fc, c.bias, grads)

    def _block_fwd(self, layer, x):
        p = f"h.{layer}"
        if self.config.norm_position == "pre":
            h, c1 = self._norm_fwd(p + ".ln_1", x)
            a, ca = self._attn_fwd(p + ".attn", h)
            x = _residual(x, a)
            h, c2 = self._norm_fwd(p + ".ln_2", x)
            m, cm = self._mlp_fwd(p + ".mlp", h)
            x = _residual(x, m)
        else:
            a, ca = self._attn_fwd(p + ".attn", x)
            x, c1 = self._norm_fwd(p + ".ln_1", _residual(x, a))                # norm(residual)
            m, cm = self._mlp_fwd(p + ".mlp", x)
            x, c2 = self._norm_fwd(p + ".ln_2", _residual(x, m))
        return x, (c1, ca, c2, cm)

    def _block_bwd(self, layer, dx, cache, grads):
        p = f"h.{layer}"
        c1, ca, c2, cm = cache
        if self.config.norm_position == "pre":
            # x2 = x1 + mlp(ln_2(x1)):  dx1 = dx2 + ln_2ᵀ(mlpᵀ(dx2))
            dx = _residual(dx, self._norm_bwd(p + ".ln_2", self._mlp_bwd(p + ".mlp", dx, cm, grads), c2, grads))
            # x1 = x0 + attn(ln_1(x0)): dx0 = dx1 + ln_1ᵀ(attnᵀ(dx1))
            dx = _residual(dx, self._norm_bwd(p + ".ln_1", self._attn_bwd(p + ".attn", dx, ca, grads), c1, grads))
        else:
            # x2 = ln_2(x1 + mlp(x1)):  dz = ln_2ᵀ(dx2);  dx1 = dz + mlpᵀ(dz)
            dz = self._norm_bwd(p + ".ln_2", dx, c2, grads)
            dx = _residual(dz, self._mlp_bwd(p + ".mlp", dz, cm, grads))
            # x1 = ln_1(x0 + attn(x0)): dz = ln_1ᵀ(dx1);  dx0 = dz + attnᵀ(dz)
            dz = self._norm_bwd(p + ".ln_1", dx, c1, grads)
            dx = _residual(dz, self._attn_bwd(p + ".attn", dz, ca, grads))
        return dx

    def _sinusoid_table(self, T):
        """PE (T, C) of seed A §5, from the generated table function (fixed, no gradient)."""
        if self._sinusoid is None or self._sinusoid.shape[0] < T:
            table = table_fn("numpy", "sinusoidal", "sinusoidal_table")(
                self.config.block_size, self.config.n_embd, base=SINUSOID_BASE, dtype=self.dtype)
            self._sinusoid = np.asarray(table, dtype=self.dtype)
        return self._sinusoid[:T]

    # ------------------------------------------------------------------ forward / backward
    def forward(self, idx: np.ndarray, targets: np.ndarray | None = None):
        """logits (B, T, V) and the mean cross-entropy over the tokens whose target is not −1
        (None without targets). With targets, keeps every cache for `backward`.

        With `threads` > 1 the batch is cut into that many slices of rows, each run by its own
        thread; the loss is the mean over all scored tokens, Σ_s n_s·loss_s / Σ_s n_s."""
        c = self.config
        idx = np.asarray(idx)
        targets = None if targets is None else np.asarray(targets)
        B, T = check_idx(c, idx, targets)
        counts = None
        if targets is not None:
            scored = targets >= 0                              # target -1: ignored (nanoGPT's ignore_index)
            if not scored.any():
                raise ValueError("every target is -1 (ignored): there is no token to score")
        shards = self._shards(B)
        if targets is not None:
            counts = [int(np.count_nonzero(scored[sl])) for sl in shards]
            if min(counts) == 0:                               # a slice with nothing to score: no split
                shards, counts = [slice(0, B)], [int(np.count_nonzero(scored))]
        if self._shared is not None and targets is not None and len(shards) > 1:
            results = self._forward_processes(idx, targets, shards)
        else:
            results = self._map(lambda sl: self.forward_slice(idx[sl], None if targets is None else targets[sl]),
                                shards)
        logits = results[0][0] if len(results) == 1 else np.concatenate([r[0] for r in results])
        loss = None
        if targets is not None:
            total = sum(counts)
            weights = [n / total for n in counts]
            loss = results[0][1] if len(results) == 1 else float(sum(w * r[1] for w, r in zip(weights, results)))
            self._tape = [(r[2], w) for r, w in zip(results, weights)]
        else:
            self._tape = None                                  # caches only when a backward can follow
        return logits, loss

    def forward_slice(self, idx, targets):
        """(logits, mean loss or None, tape) of one slice of the batch (thread-safe: no state)."""
        c, P = self.config, self.params
        B, T = idx.shape
        tape = {}
        x, tape["wte"] = self._kern("embedding").embedding_forward(idx, P["wte.weight"])   # (B, T, C)
        if c.pos == "learned":
            pos = np.broadcast_to(np.arange(T), (B, T))
            pe, tape["wpe"] = self._kern("embedding").embedding_forward(pos, P["wpe.weight"])
            x = x + pe
        elif c.pos == "sinusoidal":
            x = x + self._sinusoid_table(T)                                    # fixed, no gradient
        tape["blocks"] = []
        for layer in range(c.n_layer):
            x, cache = self._block_fwd(layer, x)
            tape["blocks"].append(cache)
        if c.norm_position == "pre":
            x, tape["ln_f"] = self._norm_fwd("ln_f", x)
        head = "wte.weight" if c.tie_weights else "lm_head.weight"
        logits, tape["lm_head"] = self._kern("linear_nobias").linear_nobias_forward(x, P[head])  # (B, T, V)
        if targets is None:
            return logits, None, None
        mask = (targets >= 0).astype(np.int64)
        targets = np.where(mask == 1, targets, 0)
        loss_arr, tape["loss"] = self._kern("cross_entropy").cross_entropy_forward(logits, targets, mask)
        return logits, float(loss_arr.reshape(())), tape                        # (1,): the mean over tokens

    def backward(self) -> dict[str, np.ndarray]:
        """∂(mean loss)/∂param for every parameter, from the tape of the last forward.

        The gradients are views of one new flat buffer laid out like the parameters (so the
        optimizer updates them all at once); each slice of the batch contributes
        ∂(n_s·loss_s/N)/∂param: its upstream gradient is n_s/N instead of 1."""
        tapes = self._tape
        if not tapes:
            raise RuntimeError("backward() needs a forward(idx, targets) with targets first")
        self._tape = None
        if any(isinstance(tape, int) for tape, _ in tapes):   # slices held by worker processes
            parts = self._backward_processes(tapes)
        else:
            parts = self._map(lambda tw: self.backward_slice(*tw), tapes)
        out = self._grad_buffer()
        for k, g in out.items():                              # shard 0 + shard 1 (+ …): one pass each
            if len(parts) == 1:
                np.copyto(g, parts[0][k])
                continue
            np.add(parts[0][k], parts[1][k], out=g)
            for p in parts[2:]:
                np.add(g, p[k], out=g)
        return out

    def _grad_buffer(self) -> dict[str, np.ndarray]:
        """Fresh arrays shaped like the parameters, views of one flat buffer in the same layout."""
        offsets = self._offsets                    # the layout the parameters were built with
        buf = np.empty(sum(p.size for p in self._flat_views.values()), dtype=self.dtype)
        return OrderedDict((k, buf[offsets[k]:offsets[k] + p.size].reshape(p.shape))
                           for k, p in self._flat_views.items())

    def backward_slice(self, tape, weight):
        """The gradients of one slice's loss times `weight` (n_s/N), from its forward's tape."""
        c = self.config
        grads: dict[str, np.ndarray] = {}
        dloss = np.full((1,), weight, dtype=self.dtype)                        # ∂loss/∂loss_s = n_s/N
        dlogits = self._kern("cross_entropy").cross_entropy_backward(dloss, tape["loss"])
        head = "wte.weight" if c.tie_weights else "lm_head.weight"
        dx, dw = self._kern("linear_nobias").linear_nobias_backward(dlogits, tape["lm_head"])
        _acc(grads, head, dw)
        if c.norm_position == "pre":
            dx = self._norm_bwd("ln_f", dx, tape["ln_f"], grads)
        for layer in reversed(range(c.n_layer)):
            dx = self._block_bwd(layer, dx, tape["blocks"][layer], grads)
        if c.pos == "learned":
            _acc(grads, "wpe.weight", self._kern("embedding").embedding_backward(dx, tape["wpe"]))
        _acc(grads, "wte.weight", self._kern("embedding").embedding_backward(dx, tape["wte"]))
        return grads

    # ------------------------------------------------------------------ threads
    def _shards(self, B: int) -> list[slice]:
        n = min(self.threads, B)
        bounds = [B * s // n for s in range(n + 1)]
        return [slice(a, b) for a, b in zip(bounds, bounds[1:])]

    def _map(self, fn, items: list) -> list:
        """[fn(x) for x in items]: the first in this thread, the others in the pool, BLAS on
        one thread while they run together."""
        if len(items) == 1:
            return [fn(items[0])]
        if self._pool is None or self._pool[0] < len(items) - 1:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = (len(items) - 1, ThreadPoolExecutor(max_workers=len(items) - 1,
                                                             thread_name_prefix="qed-shard"))
        errstate = np.geterr()                    # np.errstate is per thread: carry the caller's

        def in_pool(x):
            with np.errstate(**errstate):
                return fn(x)

        with blas_single_thread():
            futures = [self._pool[1].submit(in_pool, x) for x in items[1:]]
            first = fn(items[0])
            return [first] + [f.result() for f in futures]

    # ------------------------------------------------------------------ worker processes
    def _start_workers(self, n: int):
        if self._workers is None or len(self._workers.procs) < n:
            from .workers import ShardWorkers
            self.close()
            self._workers = ShardWorkers(n, self.config, self.dtype, self._shared, self._offsets,
                                         {k: v.shape for k, v in self._flat_views.items()})
        return self._workers

    def _forward_processes(self, idx, targets, shards):
        """The first slice here, slice s ≥ 1 in worker s−1; each worker keeps its own tape (the
        tape here records its number)."""
        workers = self._start_workers(len(shards) - 1)
        for k, view in self._flat_views.items():    # parameters replaced, not updated in place:
            if self.params[k] is not view:            # copy them where the workers read
                view[...] = self.params[k]
        for w, sl in enumerate(shards[1:]):
            workers.start_forward(w, idx[sl], targets[sl])
        return self._own_then_workers(lambda: self.forward_slice(idx[shards[0]], targets[shards[0]]),
                                      workers.finish_forward, len(shards) - 1, lambda r, w: (*r, w))

    def _backward_processes(self, tapes):
        workers = self._workers
        for tape, weight in tapes[1:]:
            workers.start_backward(tape, weight)
        return self._own_then_workers(lambda: self.backward_slice(*tapes[0]), workers.finish_backward,
                                      len(tapes) - 1, lambda r, w: r)

    def _own_then_workers(self, own, finish, n, wrap):
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
        """Stop the worker processes (parallel="processes"); the next step starts new ones."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pool"] = state["_workers"] = None
        if state["_shared"] is not None:              # a copy has its own, private parameters
            state["_shared"] = None
            state["params"] = OrderedDict((k, np.array(v)) for k, v in self.params.items())
            state["_flat_views"] = dict(state["params"])
        return state

    __call__ = forward


def _residual(x: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """x + fresh, written into `fresh`: a sublayer's output (or a layer's input gradient) that
    was just computed and that no cache holds, so no new array is needed."""
    if fresh.shape == x.shape and fresh.dtype == x.dtype and fresh.flags.writeable:
        fresh += x
        return fresh
    return x + fresh


def _acc(grads: dict, name: str, g) -> None:
    """Add a gradient contribution (a parameter reached twice, e.g. tied wte, gets both)."""
    if name in grads:
        grads[name] = grads[name] + g
    else:
        grads[name] = g

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

import numpy as np

from .config import GPTConfig, check_idx, ffn_weights, norm_call
from .cpu import default_threads, tune_malloc
from .flat import flat_layout, flat_params, flat_views
from .kernels import NORM_EPS, load_kernels
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
        self._k = load_kernels("numpy", config)  # fail now, not mid-forward, if one is missing
        # read once: the MLP op's weights and the norm's parameters (generated/model_ops.py); a
        # lookup inside the step would break torch.compile's graph at its import
        self._norm_all, self._norm_kw = norm_call(config.norm, NORM_EPS)
        self._ffn_weights = ffn_weights(config.ffn)
        self._positions = PositionTables("numpy", config)

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
            return self._k["linear"].linear_forward(x, P[prefix + ".weight"], P[prefix + ".bias"])
        return self._k["linear_nobias"].linear_nobias_forward(x, P[prefix + ".weight"])

    def _linear_bwd(self, prefix, dy, cache, bias, grads):
        if bias:
            dx, dw, db = self._k["linear"].linear_backward(dy, cache)
            _acc(grads, prefix + ".bias", db)
        else:
            dx, dw = self._k["linear_nobias"].linear_nobias_backward(dy, cache)
        _acc(grads, prefix + ".weight", dw)
        return dx

    def _norm_fwd(self, prefix, x):
        """The norm op of the config (generated/model_ops.py): its gains and shifts by name, a
        shift held at 0 in a model without biases."""
        P, c = self.params, self.config
        args = [
            P[f"{prefix}.{name}"] if f"{prefix}.{name}" in P else np.zeros(c.n_embd, self.dtype)
            for name, _ in self._norm_all
        ]
        return getattr(self._k[c.norm], c.norm + "_forward")(x, *args, **self._norm_kw)

    def _norm_bwd(self, prefix, dy, cache, grads):
        c = self.config
        dx, *dps = getattr(self._k[c.norm], c.norm + "_backward")(dy, cache)
        for (name, _), dp in zip(self._norm_all, dps):
            if f"{prefix}.{name}" in self.params:
                _acc(grads, f"{prefix}.{name}", dp)
        return dx

    def _rope_fwd(self, x):
        """RoPE on (B, nh, T, hd): the kernel wants the tables at x's leading axes (views)."""
        cos, sin, rot = self._positions.rope(x.shape[-2], self.dtype)
        lead = x.shape[:-2]
        return self._k["rope"].rope_forward(
            x, np.broadcast_to(cos, x.shape), np.broadcast_to(sin, x.shape), np.broadcast_to(rot, lead + rot.shape)
        )

    def _rope_bwd(self, dy, cache):
        return self._k["rope"].rope_backward(dy, cache)  # dx only: the tables are constant inputs

    def _attn_fwd(self, prefix, x):
        c = self.config
        B, T, C = x.shape
        nh, hd = c.n_head, c.head_dim
        qkv, c_attn = self._linear_fwd(prefix + ".c_attn", x, c.bias)  # (B, T, 3C)

        def heads(t):  # (B, T, C) -> (B, nh, T, hd)
            return t.reshape(B, T, nh, hd).transpose(0, 2, 1, 3)

        q, k, v = (heads(t) for t in np.split(qkv, 3, axis=-1))
        c_rope = None
        if c.pos == "rope":
            (q, cq), (k, ck) = self._rope_fwd(q), self._rope_fwd(k)
            c_rope = (cq, ck)
        y, c_sdpa = getattr(self._k[c.attention], c.attention + "_forward")(q, k, v, causal=True)  # (B, nh, T, hd)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # merge heads
        out, c_proj = self._linear_fwd(prefix + ".c_proj", y, c.bias)
        return out, (c_attn, c_rope, c_sdpa, c_proj, (B, T, C))

    def _attn_bwd(self, prefix, dout, cache, grads):
        c = self.config
        c_attn, c_rope, c_sdpa, c_proj, (B, T, C) = cache
        nh, hd = c.n_head, c.head_dim
        dy = self._linear_bwd(prefix + ".c_proj", dout, c_proj, c.bias, grads)
        dy = dy.reshape(B, T, nh, hd).transpose(0, 2, 1, 3)  # undo the merge
        dq, dk, dv = getattr(self._k[c.attention], c.attention + "_backward")(dy, c_sdpa)
        if c_rope is not None:
            dq, dk = self._rope_bwd(dq, c_rope[0]), self._rope_bwd(dk, c_rope[1])
        dqkv = np.empty((B, T, 3, nh, hd), dtype=dq.dtype)  # undo split + heads:
        for part, g in enumerate((dq, dk, dv)):  # one copy each
            dqkv[:, :, part] = g.transpose(0, 2, 1, 3)
        dqkv = dqkv.reshape(B, T, 3 * C)
        return self._linear_bwd(prefix + ".c_attn", dqkv, c_attn, c.bias, grads)

    def _mlp_fwd(self, prefix, x):
        c, P = self.config, self.params
        weights = self._ffn_weights
        if weights is not None:  # one MLP op
            return getattr(self._k[c.ffn], c.ffn + "_forward")(
                x, *(P[f"{prefix}.{name}.weight"] for name, _ in weights)
            )
        h, c_fc = self._linear_fwd(prefix + ".c_fc", x, c.bias)  # (B, T, H)
        a, c_act = getattr(self._k[c.ffn], c.ffn + "_forward")(h)
        out, c_proj = self._linear_fwd(prefix + ".c_proj", a, c.bias)  # (B, T, C)
        return out, (c_fc, c_act, c_proj)

    def _mlp_bwd(self, prefix, dout, cache, grads):
        c = self.config
        weights = self._ffn_weights
        if weights is not None:
            dx, *dws = getattr(self._k[c.ffn], c.ffn + "_backward")(dout, cache)
            for (name, _), dw in zip(weights, dws):
                _acc(grads, f"{prefix}.{name}.weight", dw)
            return dx
        c_fc, c_act, c_proj = cache
        da = self._linear_bwd(prefix + ".c_proj", dout, c_proj, c.bias, grads)
        dh = getattr(self._k[c.ffn], c.ffn + "_backward")(da, c_act)
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
            x, c1 = self._norm_fwd(p + ".ln_1", _residual(x, a))  # norm(residual)
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

    # ------------------------------------------------------------------ forward / backward
    def forward(self, idx: np.ndarray, targets: np.ndarray | None = None) -> tuple[np.ndarray, float | None]:
        """logits (B, T, V) and the mean cross-entropy over the tokens whose target is not −1
        (None without targets). With targets, keeps every cache for `backward`.

        With `threads` > 1 the batch is cut into that many slices of rows, run side by side
        (qed/parallel.py); the loss is the mean over all scored tokens, Σ_s n_s·loss_s / Σ_s n_s."""
        idx = np.asarray(idx)
        targets = None if targets is None else np.asarray(targets)
        check_idx(self.config, idx, targets)
        logits, loss, self._tape = self.parallel.forward(self, idx, targets)
        return logits, loss

    def forward_slice(self, idx: np.ndarray, targets: np.ndarray | None) -> tuple[np.ndarray, float | None, list]:
        """(logits, mean loss or None, tape) of one slice of the batch (thread-safe: no state)."""
        c, P = self.config, self.params
        B, T = idx.shape
        tape = {}
        x, tape["wte"] = self._k["embedding"].embedding_forward(idx, P["wte.weight"])  # (B, T, C)
        if c.pos == "learned":
            pos = np.broadcast_to(np.arange(T), (B, T))
            pe, tape["wpe"] = self._k["embedding"].embedding_forward(pos, P["wpe.weight"])
            x = x + pe
        elif c.pos == "sinusoidal":
            x = x + self._positions.sinusoid(T, self.dtype)  # fixed, no gradient
        tape["blocks"] = []
        for layer in range(c.n_layer):
            x, cache = self._block_fwd(layer, x)
            tape["blocks"].append(cache)
        if c.norm_position == "pre":
            x, tape["ln_f"] = self._norm_fwd("ln_f", x)
        head = "wte.weight" if c.tie_weights else "lm_head.weight"
        logits, tape["lm_head"] = self._k["linear_nobias"].linear_nobias_forward(x, P[head])  # (B, T, V)
        if targets is None:
            return logits, None, None
        mask = (targets >= 0).astype(np.int64)
        targets = np.where(mask == 1, targets, 0)
        loss_arr, tape["loss"] = self._k["cross_entropy"].cross_entropy_forward(logits, targets, mask)
        return logits, float(loss_arr.reshape(())), tape  # (1,): the mean over tokens

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

    def backward_slice(self, tape: list, weight: float) -> dict[str, np.ndarray]:
        """The gradients of one slice's loss times `weight` (n_s/N), from its forward's tape."""
        c = self.config
        grads: dict[str, np.ndarray] = {}
        dloss = np.full((1,), weight, dtype=self.dtype)  # ∂loss/∂loss_s = n_s/N
        dlogits = self._k["cross_entropy"].cross_entropy_backward(dloss, tape["loss"])
        head = "wte.weight" if c.tie_weights else "lm_head.weight"
        dx, dw = self._k["linear_nobias"].linear_nobias_backward(dlogits, tape["lm_head"])
        _acc(grads, head, dw)
        if c.norm_position == "pre":
            dx = self._norm_bwd("ln_f", dx, tape["ln_f"], grads)
        for layer in reversed(range(c.n_layer)):
            dx = self._block_bwd(layer, dx, tape["blocks"][layer], grads)
        if c.pos == "learned":
            _acc(grads, "wpe.weight", self._k["embedding"].embedding_backward(dx, tape["wpe"]))
        _acc(grads, "wte.weight", self._k["embedding"].embedding_backward(dx, tape["wte"]))
        return grads

    # ------------------------------------------------------------------ worker processes
    def close(self) -> None:
        """Stop the worker processes (parallel="processes"); the next step starts new ones."""
        self.parallel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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

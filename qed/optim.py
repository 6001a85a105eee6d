"""Optimisers for both backends: AdamW (decoupled weight decay), gradient clipping, LR schedule.

The AdamW update is the generated step kernel `adamw_step` (printed from
`derivations/optim.py`, where `adamw_update` is proved):

    adamw_step(p, g, m, v, *, t, lr, beta1, beta2, eps, weight_decay) -> (p_new, m_new, v_new)

with `t` the 1-based number of the step being taken (incremented before the call) and m, v
starting at zero — PyTorch's convention. Weight decay applies to the parameters the printed
program's `decays` names (generated/<backend>/gpt.py, declared in derivations/gpt.py: the
matrices, embeddings and linear weights); biases and norm gains get weight_decay = 0, as nanoGPT.

If the generated step kernel is missing, building an optimiser raises MissingKernelError (one
line from the command line: run `make codegen`): no other update ever runs in its place, since
any other would be unproven code.

`clip_grad_norm` and `cosine_lr` are bookkeeping around the update, not layer formulas.
torch is imported only where a torch object is handled: NumPy training never loads it.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .cpu import default_threads
from .flat import flat_layout, flat_views
from .kernels import MissingKernelError, kernel


def _step_kernel(backend: str):
    """generated/<backend>/adamw.py's `adamw_step` (MissingKernelError if it is not generated)."""
    fn = getattr(kernel(backend, "adamw"), "adamw_step", None)
    if fn is None:
        raise MissingKernelError(f"generated/{backend}/adamw.py has no adamw_step: run `make codegen`")
    return fn


def _init_step(opt, backend: str, lr, betas, eps, weight_decay) -> None:
    """The hyperparameters, the step count and the generated step kernel of either AdamW."""
    opt.lr = float(lr)
    opt.beta1, opt.beta2 = (float(b) for b in betas)
    opt.eps = float(eps)
    opt.weight_decay = float(weight_decay)
    opt.t = 0
    opt._kernel = _step_kernel(backend)


def _chunks(runs, size: int) -> list[tuple[int, int, bool]]:
    """Runs (start, stop, decays?) of a flat buffer cut into pieces of at most `size` elements."""
    return [(a, min(a + size, b), d) for start, b, d in runs for a in range(start, b, size)]


def decays(name: str, shape: tuple[int, ...]) -> bool:
    """Whether a parameter gets weight decay: the printed program's rule (generated/numpy/gpt.py's
    `decays`, from derivations/gpt.py: the matrices yes, biases and norm parameters no)."""
    return kernel("numpy", "gpt").decays(name, tuple(shape))


# --------------------------------------------------------------------------- numpy AdamW
class AdamW:
    """AdamW over a dict of NumPy arrays (updated in place, so the model sees the new values)."""

    # Elements per kernel call on the flat buffer: p, g, m, v and the step's temporaries of a
    # chunk stay in cache (131072 float32: 0.5 MiB each), measured 30% faster than one call over
    # 800k parameters; with two threads each takes every other chunk (-45%).
    CHUNK = 131072

    def __init__(self, params: dict, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, threads: int | None = None):
        """`threads`: how many threads share the update of a flat buffer (None: as NumpyGPT,
        min(2, CPUs)); NumPy releases the GIL inside each ufunc."""
        if not params:
            raise ValueError("AdamW needs at least one parameter")
        self.threads = default_threads() if threads is None else max(1, int(threads))
        self._pool = None
        self.params = params  # the model's own dict: read at each step
        _init_step(self, "numpy", lr, betas, eps, weight_decay)
        # Parameters that tile one flat buffer (NumpyGPT's do) are updated with one kernel call
        # per run of equal weight decay, on slices of flat p, g, m, v; otherwise one per parameter.
        layout = flat_layout(params)
        self._runs = None
        if layout is not None:
            base, offsets = layout
            self._flat = (base, offsets, np.zeros_like(base), np.zeros_like(base), np.empty_like(base))
            _, _, m_flat, v_flat, _ = self._flat
            shapes = {k: p.shape for k, p in params.items()}
            self.m = dict(flat_views(m_flat, offsets, shapes))
            self.v = dict(flat_views(v_flat, offsets, shapes))
            self._runs = []  # (start, stop, decays?) in buffer order
            for k in sorted(params, key=offsets.get):
                a, b, d = offsets[k], offsets[k] + params[k].size, decays(k, params[k].shape)
                if self._runs and self._runs[-1][2] == d and self._runs[-1][1] == a:
                    self._runs[-1] = (self._runs[-1][0], b, d)
                else:
                    self._runs.append((a, b, d))
        else:
            self.m = {k: np.zeros_like(p) for k, p in params.items()}
            self.v = {k: np.zeros_like(p) for k, p in params.items()}

    def step(self, grads: dict, lr: float | None = None) -> None:
        """One AdamW step with these gradients (every parameter must have one)."""
        missing = [k for k in self.m if k not in grads]
        if missing:
            raise KeyError(f"AdamW.step: no gradient for {', '.join(missing)}")
        lr = self.lr if lr is None else float(lr)
        self.t += 1  # 1-based number of this step
        if self._runs is not None:
            layout = flat_layout(self.params)  # still the buffer it was built on?
            if layout is not None and layout[0] is self._flat[0]:
                return self._flat_step(grads, lr)
        for name in self.m:
            p, g = self.params[name], np.asarray(grads[name], dtype=self.params[name].dtype)
            wd = self.weight_decay if decays(name, p.shape) else 0.0
            p_new, m_new, v_new = self._kernel(
                p,
                g,
                self.m[name],
                self.v[name],
                t=self.t,
                lr=lr,
                beta1=self.beta1,
                beta2=self.beta2,
                eps=self.eps,
                weight_decay=wd,
            )
            p[...] = p_new
            self.m[name], self.v[name] = m_new, v_new

    def _flat_step(self, grads: dict, lr: float) -> None:
        base, offsets, m_flat, v_flat, g_flat = self._flat
        layout = flat_layout(grads)
        if layout is not None and layout[1] == offsets and layout[0].dtype == base.dtype:
            g_flat = layout[0]  # NumpyGPT.backward's gradients: already flat
        else:
            for k, g in grads.items():
                if k in offsets:
                    g_flat[offsets[k] : offsets[k] + np.size(g)] = np.ravel(g)
        chunks = _chunks(self._runs, self.CHUNK)

        def update(part):
            for a, b, d in part:
                wd = self.weight_decay if d else 0.0
                p_new, m_new, v_new = self._kernel(
                    base[a:b],
                    g_flat[a:b],
                    m_flat[a:b],
                    v_flat[a:b],
                    t=self.t,
                    lr=lr,
                    beta1=self.beta1,
                    beta2=self.beta2,
                    eps=self.eps,
                    weight_decay=wd,
                )
                base[a:b], m_flat[a:b], v_flat[a:b] = p_new, m_new, v_new

        n = min(self.threads, len(chunks))
        if n == 1:
            return update(chunks)
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="qed-adamw")
        futures = [self._pool.submit(update, chunks[k::n]) for k in range(1, n)]
        update(chunks[0::n])
        for f in futures:
            f.result()

    def state_dict(self) -> dict:
        """Flat: hyperparameters, the step count t, and m.<name>, v.<name> arrays."""
        d: dict = {
            "t": self.t,
            "lr": self.lr,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
        }
        for k in self.m:
            d[f"m.{k}"] = self.m[k].copy()
            d[f"v.{k}"] = self.v[k].copy()
        return d

    def load_state_dict(self, d: dict) -> None:
        need = [f"{s}.{k}" for k in self.m for s in ("m", "v")] + ["t"]
        missing = [k for k in need if k not in d]
        if missing:
            raise KeyError(f"optimizer state lacks {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
        for k in self.m:
            for s, store in (("m", self.m), ("v", self.v)):
                a = np.asarray(d[f"{s}.{k}"])
                if a.shape != store[k].shape:
                    raise ValueError(f"optimizer state {s}.{k}: shape {a.shape}, expected {store[k].shape}")
                store[k][...] = a  # in place: m, v may be views of one buffer
        self.t = int(d["t"])
        for key in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            if key in d:
                setattr(self, key, float(d[key]))


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """Scale all gradients in place so that their global L2 norm is at most max_norm
    (PyTorch's clip_grad_norm_: coefficient max_norm/(norm + 1e-6), capped at 1). Works on
    NumPy arrays and torch tensors; returns the norm before clipping."""
    vals = list(grads.values())
    if not vals:
        return 0.0
    torch = sys.modules.get("torch")  # a tensor exists only if torch is loaded
    is_tensor = (lambda g: False) if torch is None else (lambda g: isinstance(g, torch.Tensor))
    if is_tensor(vals[0]):
        total = math.sqrt(sum(float(torch.sum(g.detach().double() ** 2)) for g in vals))
    else:
        total = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in vals))
    if max_norm is not None and max_norm > 0 and math.isfinite(total):
        coef = float(max_norm) / (total + 1e-6)
        if coef < 1.0:
            for k, g in grads.items():
                if is_tensor(g):
                    g.mul_(coef)
                else:
                    grads[k] = g * g.dtype.type(coef)
    return total


def torch_clip_grad_norm(model: object, max_norm: float) -> float:
    """clip_grad_norm over the .grad of a torch module's (or an iterable's) parameters."""
    import torch

    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    grads = {i: p.grad for i, p in enumerate(params) if p.grad is not None}
    return clip_grad_norm(grads, max_norm)


def cosine_lr(step: int, *, lr: float, warmup: int, max_steps: int, min_lr: float) -> float:
    """nanoGPT's schedule: linear warmup over `warmup` steps to lr, cosine decay to min_lr at
    max_steps, min_lr afterwards. `step` counts from 0."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= max_steps or max_steps <= warmup:
        return min_lr
    ratio = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# --------------------------------------------------------------------------- torch AdamW
class TorchAdamW:
    """AdamW for TorchGPT: the generated torch `adamw_step` on every parameter (weight decay on
    2-D matrices only).

    `params`: an nn.Module, a dict {name: Parameter}, or an iterable of (name, Parameter).
    """

    CHUNK = 2**20  # elements per kernel call on the flat buffer (4 MiB of float32)

    def __init__(self, params, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        import torch

        if isinstance(params, torch.nn.Module):
            named = list(params.named_parameters())
        elif isinstance(params, dict):
            named = list(params.items())
        else:
            named = list(params)
        if not named:
            raise ValueError("TorchAdamW needs at least one parameter")
        self.named = named
        _init_step(self, "torch", lr, betas, eps, weight_decay)
        self._flat = _torch_flat(named)
        if self._flat is not None:  # TorchGPT's parameters tile one buffer: flat m, v, one call per run
            buf, offsets, self._runs = self._flat
            m_flat, v_flat = torch.zeros_like(buf), torch.zeros_like(buf)
            self._flat = (buf, offsets, m_flat, v_flat)
            shapes = {k: tuple(p.shape) for k, p in named}
            self.m = dict(flat_views(m_flat, offsets, shapes))
            self.v = dict(flat_views(v_flat, offsets, shapes))
        else:
            self.m = {k: torch.zeros_like(p) for k, p in named}
            self.v = {k: torch.zeros_like(p) for k, p in named}

    def zero_grad(self) -> None:
        for _, p in self.named:
            p.grad = None

    def step(self, lr: float | None = None) -> None:
        import torch

        with torch.no_grad():
            self._step(lr)

    def _step(self, lr: float | None) -> None:
        import torch

        lr = self.lr if lr is None else float(lr)
        self.t += 1
        if self._flat is not None and all(p.grad is not None for _, p in self.named):
            buf, offsets, m_flat, v_flat = self._flat
            order = sorted(self.named, key=lambda kp: offsets[kp[0]])
            g_flat = torch.cat([p.grad.reshape(-1) for _, p in order])  # buffer order: one copy
            # runs cut into CHUNK elements: the step's temporaries stay below glibc's mmap
            # threshold and are reused, instead of fresh zero-filled pages every step
            chunks = _chunks(self._runs, self.CHUNK)
            for a, b, d in chunks:
                wd = self.weight_decay if d else 0.0
                p_new, m_new, v_new = self._kernel(
                    buf[a:b],
                    g_flat[a:b],
                    m_flat[a:b],
                    v_flat[a:b],
                    t=self.t,
                    lr=lr,
                    beta1=self.beta1,
                    beta2=self.beta2,
                    eps=self.eps,
                    weight_decay=wd,
                )
                buf[a:b].copy_(p_new)
                m_flat[a:b].copy_(m_new)
                v_flat[a:b].copy_(v_new)
            return
        for name, p in self.named:
            if p.grad is None:
                continue
            wd = self.weight_decay if decays(name, p.shape) else 0.0
            p_new, m_new, v_new = self._kernel(
                p.detach(),
                p.grad,
                self.m[name],
                self.v[name],
                t=self.t,
                lr=lr,
                beta1=self.beta1,
                beta2=self.beta2,
                eps=self.eps,
                weight_decay=wd,
            )
            p.copy_(p_new)
            self.m[name].copy_(m_new)  # in place: m, v may be views of one buffer
            self.v[name].copy_(v_new)

    def state_dict(self) -> dict:
        """The same flat layout as AdamW.state_dict (NumPy arrays)."""
        d: dict = {
            "t": self.t,
            "lr": self.lr,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
        }
        for name, _p in self.named:
            m, v = self.m[name], self.v[name]
            d[f"m.{name}"] = m.detach().cpu().numpy().copy()
            d[f"v.{name}"] = v.detach().cpu().numpy().copy()
        return d

    def load_state_dict(self, d: dict) -> None:
        import torch

        self.t = int(d["t"])
        for key in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            if key in d:
                setattr(self, key, float(d[key]))
        for name, p in self.named:
            m = torch.as_tensor(np.asarray(d[f"m.{name}"])).to(device=p.device, dtype=p.dtype)
            v = torch.as_tensor(np.asarray(d[f"v.{name}"])).to(device=p.device, dtype=p.dtype)
            if m.shape != p.shape or v.shape != p.shape:
                raise ValueError(f"optimizer state for {name}: shape {tuple(m.shape)}, expected {tuple(p.shape)}")
            self.m[name].copy_(m)  # in place: m, v may be views of one buffer
            self.v[name].copy_(v)


def _torch_flat(named):
    """(flat buffer, {name: offset}, runs) if the parameters are contiguous views that tile one
    storage exactly (TorchGPT's), runs = [(start, stop, decays?)] in buffer order; else None."""
    import torch

    ps = [p for _, p in named]
    p0 = ps[0]
    storage = p0.untyped_storage()
    if any(
        p.untyped_storage().data_ptr() != storage.data_ptr()
        or not p.is_contiguous()
        or p.dtype != p0.dtype
        or p.device != p0.device
        for p in ps
    ):
        return None
    total = storage.nbytes() // p0.element_size()
    offsets = {k: p.storage_offset() for k, p in named}
    pos, runs = 0, []
    for k, p in sorted(named, key=lambda kp: offsets[kp[0]]):
        if offsets[k] != pos:
            return None
        d = decays(k, p.shape)
        if runs and runs[-1][2] == d:
            runs[-1] = (runs[-1][0], pos + p.numel(), d)
        else:
            runs.append((pos, pos + p.numel(), d))
        pos += p.numel()
    if pos != total:
        return None
    with torch.no_grad():
        buf = torch.empty(0, dtype=p0.dtype, device=p0.device).set_(storage, 0, (total,))
    return buf, offsets, runs


def build_optimizer(
    model: object, *, lr: float, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1
) -> AdamW | TorchAdamW:
    """AdamW for a NumpyGPT (over model.params) or TorchGPT (over its parameters)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return TorchAdamW(model, lr, betas=betas, eps=eps, weight_decay=weight_decay)
    return AdamW(model.params, lr, betas=betas, eps=eps, weight_decay=weight_decay)

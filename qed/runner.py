"""One runner protocol: a model and its optimiser behind one interface, for everything that
trains or scores a GPT — `qed train`, `qed sample` and `qed eval` (qed/train.py, qed/sample.py)
and every row of `qed bench` (qed/tools/bench.py).

    runner = build_runner(config, backend, dtype, seed=0, compile=False, threads=None,
                          parallel="threads", optimizer=None, device="cpu")
    runner.step(x, y, lr=None, grad_clip=0.0, accum=1, noise=None) -> loss
                                                        one training step on one batch:
                                                        forward, loss, backward, clip, AdamW;
                                                        `accum` > 1: the batch run as that many
                                                        micro-batches (parallel.micro_batches), their
                                                        gradients summed before the update
    runner.loss(x, y) -> float                          the mean loss, no gradient, no update
    runner.logits(idx) -> (B, T, V) NumPy array         no gradient
    runner.params() / param_shapes() / load_params(…)   {name: NumPy array} (copies)
    runner.optimizer_state() / load_optimizer_state(…)
    runner.restart()                                    the seed's weights and a fresh optimiser
    runner.worker_peak_bytes(), runner.close()          the NumPy backend's worker processes

Backends: "numpy" (NumpyGPT, the generated NumPy kernels, with AdamW) and "torch" (TorchGPT, the
generated torch.autograd.Functions, with TorchAdamW; `compile=True`: the loss path under
torch.compile). Batches are int64 NumPy arrays (B, T). `optimizer`: AdamW's hyperparameters
{lr, betas, eps, weight_decay}, or None for a runner that only scores (sampling, evaluation);
`lr` of a step overrides the optimiser's (the schedule). `threads` and `parallel` apply to the
NumPy backend (qed/parallel.py); `device` ("cpu", "cuda", "cuda:N") to the torch backend, whose
batches and results still cross as NumPy arrays. torch is imported only by the torch backend.
A runner made a rank of a torch.distributed run is qed/distributed.py's RankRunner.
"""

from __future__ import annotations

import sys

import numpy as np

from .autocast import LOW_DTYPES
from .config import GPTConfig
from .dropout import Noise
from .errors import QedError
from .parallel import micro_batches
from .params import check_params, init_params


# --------------------------------------------------------------------------- models
def numpy_dtype(dtype: object) -> np.dtype:
    """A NumPy dtype from a name ("float32"), a NumPy dtype or a torch dtype; None: float32."""
    if dtype is None:
        return np.dtype(np.float32)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).numpy().dtype
    return np.dtype(dtype)


def torch_dtype(dtype: object) -> object:
    """A torch dtype from a name, a NumPy dtype or a torch dtype; None: torch.float32."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    return {np.dtype("float32"): torch.float32, np.dtype("float64"): torch.float64, np.dtype("float16"): torch.float16}[
        numpy_dtype(dtype)
    ]


def build_model(
    config: GPTConfig,
    backend: str = "numpy",
    dtype: object = None,
    seed: int = 0,
    *,
    compile: bool = False,
    threads: int | None = None,
    parallel: str = "threads",
    device: object = None,
) -> object:
    """A NumpyGPT ("numpy") or TorchGPT ("torch"); dtype defaults to float32, and may be given
    as a NumPy dtype, a torch dtype or a name ("float32", "float64"); "bfloat16" (torch only):
    float32 weights with the matrix products in bfloat16 (qed/autocast.py)."""
    if dtype in LOW_DTYPES:
        if backend != "torch":
            raise QedError(
                f"--dtype {dtype}: NumPy has no {dtype}; mixed precision runs on --backend torch "
                "(float32 weights, the matrix products in bfloat16)"
            )
        import torch

        from .model_torch import TorchGPT

        return TorchGPT(config, seed=seed, compile=compile, device=device, autocast=getattr(torch, dtype))
    if backend == "numpy":
        from .model_numpy import NumpyGPT

        return NumpyGPT(config, dtype=numpy_dtype(dtype), seed=seed, threads=threads, parallel=parallel)
    if backend == "torch":
        from .model_torch import TorchGPT

        return TorchGPT(config, dtype=torch_dtype(dtype), seed=seed, compile=compile, device=device)
    raise ValueError(f"unknown backend {backend!r}: choose 'numpy' or 'torch'")


# --------------------------------------------------------------------------- micro-batches
def _accumulate(into: dict, more: dict) -> None:
    """into[k] += more[k] for every gradient, in place: one add when both tile a flat buffer
    (NumpyGPT.backward's gradients do), so `into` stays the flat buffer AdamW reads at once."""
    from .flat import flat_layout

    a, b = flat_layout(into), flat_layout(more)
    if a is not None and b is not None and a[1] == b[1]:
        np.add(a[0], b[0], out=a[0])
        return
    for k, g in more.items():
        into[k] += g


# --------------------------------------------------------------------------- runners
class Runner:
    """What every runner shares; a backend provides the model, its optimiser and the step."""

    backend = ""

    def __init__(self, config, model, seed: int, optimizer: dict | None):
        self.config, self.model, self.seed = config, model, seed
        self.hyper = None if optimizer is None else dict(optimizer)
        self.opt = None if optimizer is None else self.new_optimizer()

    def new_optimizer(self) -> object:
        raise NotImplementedError

    def step(
        self,
        x: np.ndarray,
        y: np.ndarray,
        lr: float | None = None,
        grad_clip: float = 0.0,
        accum: int = 1,
        noise: Noise | None = None,
    ) -> float:
        """One update on the batch (x, y); `noise`: the step's dropout masks (qed/dropout.py)."""
        raise NotImplementedError

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        raise NotImplementedError

    def logits(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def params(self) -> dict:
        raise NotImplementedError

    def set_params(self, params: dict) -> None:
        raise NotImplementedError

    def param_shapes(self) -> dict:
        return {k: tuple(v.shape) for k, v in self.params().items()}

    def load_params(self, params: dict) -> None:
        check_params(params, self.param_shapes(), where="checkpoint weights")
        self.set_params(params)

    def optimizer_state(self) -> dict:
        return self.opt.state_dict()

    def load_optimizer_state(self, state: dict) -> None:
        self.opt.load_state_dict(state)

    def restart(self) -> None:
        """The weights of `seed` again and a fresh optimiser: as built, whatever ran since."""
        self.set_params(init_params(self.config, self.seed))
        self.opt = None if self.hyper is None else self.new_optimizer()

    def worker_peak_bytes(self) -> int:
        """Peak RSS of the worker processes (0 without any)."""
        return 0

    def close(self) -> None:
        """Stop worker processes, if any (the next step starts new ones)."""


class NumpyRunner(Runner):
    """NumpyGPT (generated NumPy kernels, no autograd) with the NumPy AdamW."""

    backend = "numpy"

    def new_optimizer(self) -> object:
        from .optim import AdamW

        return AdamW(self.model.params, **self.hyper)

    def step(
        self,
        x: np.ndarray,
        y: np.ndarray,
        lr: float | None = None,
        grad_clip: float = 0.0,
        accum: int = 1,
        noise: Noise | None = None,
    ) -> float:
        from .optim import clip_grad_norm

        if accum == 1:
            _, loss = self.model.forward(x, y, noise)
            grads = self.model.backward()
        else:  # gradient accumulation: Σ_i ∂((n_i/N)·loss_i)/∂θ, one micro-batch's caches at a time
            grads, loss = None, 0.0
            for xi, yi, weight, row in micro_batches(x, y, accum, rows=True):
                _, loss_i = self.model.forward(xi, yi, None if noise is None else noise.rows(row))
                g = self.model.backward(scale=weight)  # each slice's backward starts from weight·n_s/n_i
                loss += weight * float(loss_i)
                if grads is None:
                    grads = g
                else:
                    _accumulate(grads, g)
        if grad_clip > 0:
            clip_grad_norm(grads, grad_clip)
        self.opt.step(grads, lr=lr)
        return float(loss)

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self.model.forward(x, y)[1])

    def logits(self, idx: np.ndarray) -> np.ndarray:
        return self.model.forward(idx)[0]

    def params(self) -> dict:
        return {k: np.array(v) for k, v in self.model.params.items()}

    def param_shapes(self) -> dict:
        return {k: tuple(v.shape) for k, v in self.model.params.items()}

    def set_params(self, params: dict) -> None:
        # copy in place: the optimizer holds the model's own arrays
        for k, p in self.model.params.items():
            p[...] = np.asarray(params[k], dtype=p.dtype)

    def worker_peak_bytes(self) -> int:
        workers = self.model.parallel.workers
        return 0 if workers is None else workers.peak_rss_bytes()

    def close(self) -> None:
        self.model.close()


class TorchRunner(Runner):
    """A torch module with autograd: the gradients are each parameter's .grad, the batch and the
    results cross as NumPy arrays. `TorchGPT` (generated kernels) with TorchAdamW here; the
    torch.nn reference of `qed bench` (qed/tools/reference.py) is a runner of this kind too."""

    backend = "torch"

    def __init__(self, config, model, seed, optimizer):
        import torch

        self.torch = torch
        self.device = next(model.parameters()).device
        super().__init__(config, model, seed, optimizer)

    def new_optimizer(self) -> object:
        from .optim import TorchAdamW

        return TorchAdamW(self.model, **self.hyper)

    def _t(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.device)

    def step(
        self,
        x: np.ndarray,
        y: np.ndarray,
        lr: float | None = None,
        grad_clip: float = 0.0,
        accum: int = 1,
        noise: Noise | None = None,
    ) -> float:
        from .optim import torch_clip_grad_norm

        self.opt.zero_grad()
        if accum == 1:
            _, loss = self.model(self._t(x), self._t(y), **self._noise(noise))
            loss.backward()
            loss = float(loss.item())
        else:  # gradient accumulation: .grad sums ∂((n_i/N)·loss_i)/∂θ over the micro-batches
            loss = 0.0
            for xi, yi, weight, row in micro_batches(x, y, accum, rows=True):
                _, loss_i = self.model(self._t(xi), self._t(yi), **self._noise(noise, row))
                (loss_i * weight).backward()
                loss += weight * float(loss_i.item())
        if grad_clip > 0:
            torch_clip_grad_norm(self.model, grad_clip)
        self.update(lr)
        return loss

    def _noise(self, noise: Noise | None, row: int = 0) -> dict:
        """The model's `noise` argument: none for a model without dropout (the torch.nn reference
        of qed bench takes none)."""
        return {} if noise is None or self.config.dropout == 0 else {"noise": noise.rows(row)}

    def update(self, lr: float | None) -> None:
        """The optimiser's step on the gradients in .grad (`lr`: None keeps its own)."""
        self.opt.step(lr=lr)

    def loss(self, x: np.ndarray, y: np.ndarray) -> float:
        with self.torch.no_grad():
            return float(self.model(self._t(x), self._t(y))[1].item())

    def logits(self, idx: np.ndarray) -> np.ndarray:
        with self.torch.no_grad():
            return self.model(self._t(idx))[0].cpu().numpy()

    def params(self) -> dict:
        return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def param_shapes(self) -> dict:
        return {k: tuple(v.shape) for k, v in self.model.state_dict().items()}

    def set_params(self, params: dict) -> None:
        self.model.load_params(params)

    def restart(self) -> None:
        self.model.zero_grad(set_to_none=True)  # no gradient left from the steps before
        super().restart()


def build_runner(
    config: GPTConfig,
    backend: str,
    dtype: object = "float32",
    *,
    seed: int = 0,
    compile: bool = False,
    threads: int | None = None,
    parallel: str = "threads",
    optimizer: dict | None = None,
    device: str = "cpu",
) -> Runner:
    """The runner of `backend` ("numpy" or "torch"); QedError for another, for torch without
    PyTorch installed, or for a device that the backend cannot use here."""
    if backend == "numpy" and device != "cpu":
        raise QedError(f"--device {device}: the NumPy backend runs on the CPU; use --backend torch for a GPU")
    if device != "cpu":
        from .distributed import check_device

        check_device(device.split(":")[0])
    if backend == "numpy":
        model = build_model(config, "numpy", dtype, seed, threads=threads, parallel=parallel)
        return NumpyRunner(config, model, seed, optimizer)
    if backend == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise QedError("--backend torch needs PyTorch installed") from None
        model = build_model(config, "torch", dtype, seed, compile=compile, device=device)
        return TorchRunner(config, model, seed, optimizer)
    raise QedError(f"unknown backend {backend!r}")

"""Data parallelism across processes and machines with torch.distributed: every rank draws the
same global batch, trains on its own rows of it, and the ranks sum their gradients.

    world = World.join(env, device, timeout)     this process as rank r of N (gloo on CPUs, NCCL on GPUs)
    runner = world.shard(runner)                 a runner (qed/runner.py) whose step is the global batch's
    with world.setting_up() as setup: …          every rank learns whether every other one got this far
    with world.talking("during step 7"): …       a peer that died or hangs: PeerLost, one line

With N scored tokens in the global batch and n_r of them in rank r's rows (targets of −1 are not
scored), the loss of the global batch and its gradient are

    loss       = Σ_r (n_r/N) · loss_r          loss_r: the mean over rank r's scored tokens
    ∂loss/∂θ   = Σ_r ∂((n_r/N) · loss_r)/∂θ    each rank's backward starts from n_r/N, not 1

so each rank weights its own loss by n_r/N (it counts N itself: it holds the whole batch) and the
ranks' gradients are summed, never averaged. Every rank then clips the same summed gradient and
takes the same AdamW step, so the parameters stay equal on every rank without being sent again.

    NumPy backend:  the gradients are written into one flat buffer with two more elements,
                    [loss share, stop flag]; one all_reduce(SUM) of it per step, on the NumPy
                    memory itself (torch.from_numpy: no copy, nothing pickled).
    torch backend:  DistributedDataParallel around TorchGPT: its hooks all-reduce buckets of
                    gradients while the generated backward still runs; a comm hook sums instead
                    of averaging, and the step's last bucket carries [loss share, stop flag].

The stop flag is a rank's Ctrl-C (or SIGTERM): summed with the gradients, every rank learns in
the same step that one of them was asked to stop, and all stop after that step.

A rank that dies closes its connections: the others' next collective fails at once; a rank that
hangs is noticed when a collective waits longer than the timeout. Either way the survivors raise
PeerLost, which the command line prints as one line (rank 0 first saves the last whole step).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from .errors import QedError
from .parallel import shards

DEFAULT_TIMEOUT = 300.0  # seconds a collective may wait for the other ranks
ENV_RANK = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets, and env:// reads
LAUNCHED_BY = "QED_NPROC"  # set by `qed train --nproc N` in the ranks it starts (qed/launch.py)


class PeerLost(QedError):
    """Another rank stopped (its process ended) or did not answer within the timeout:
    "<who> stopped <during>: <reason><after>", where the trainer fills in `during` (the step)
    and `after` (the checkpoint it saved)."""

    def __init__(self, who: str, during: str, reason: str, after: str = ""):
        self.who, self.during, self.reason, self.after = who, during, reason, after
        super().__init__()

    def __str__(self) -> str:
        return f"{self.who} stopped {self.during}: {self.reason}{self.after}"


# --------------------------------------------------------------------------- the environment
def rank_env(environ: Mapping[str, str] | None = None) -> dict | None:
    """{rank, size, local_rank, local_size, addr, port} from torchrun's variables (RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), None where none is set;
    QedError where they are incomplete or inconsistent."""
    environ = os.environ if environ is None else environ
    present = [k for k in ENV_RANK + ("LOCAL_RANK",) if k in environ]
    if not present:
        return None
    missing = [k for k in ENV_RANK if k not in environ]
    if missing:
        raise QedError(
            f"torch.distributed environment: {', '.join(present)} set but {', '.join(missing)} not "
            "(start the ranks with torchrun, or with qed train --nproc N)"
        )

    def integer(name, default=None):
        text = environ.get(name)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            raise QedError(f"torch.distributed environment: {name}={text!r} is not an integer") from None

    rank, size, port = integer("RANK"), integer("WORLD_SIZE"), integer("MASTER_PORT")
    local_rank, local_size = integer("LOCAL_RANK", 0), integer("LOCAL_WORLD_SIZE", size)
    problems = []
    if size < 1:
        problems.append(f"WORLD_SIZE={size} is below 1")
    elif not 0 <= rank < size:
        problems.append(f"RANK={rank} is not in [0, WORLD_SIZE={size})")
    if not 1 <= local_size <= max(size, 1):
        problems.append(f"LOCAL_WORLD_SIZE={local_size} is not in [1, WORLD_SIZE={size}]")
    elif not 0 <= local_rank < local_size:
        problems.append(f"LOCAL_RANK={local_rank} is not in [0, LOCAL_WORLD_SIZE={local_size})")
    if not 0 < port < 65536:
        problems.append(f"MASTER_PORT={port} is not a TCP port")
    if not environ["MASTER_ADDR"].strip():
        problems.append("MASTER_ADDR is empty")
    if problems:
        raise QedError("torch.distributed environment: " + "; ".join(problems))
    return dict(
        rank=rank, size=size, local_rank=local_rank, local_size=local_size, addr=environ["MASTER_ADDR"], port=port
    )


def check_device(device: str) -> None:
    """QedError unless `device` ("cpu" or "cuda") can be used here."""
    if device == "cpu":
        return
    if device != "cuda":
        raise QedError(f"--device must be cpu or cuda, got {device!r}")
    try:
        import torch
    except ImportError:
        raise QedError("--device cuda needs PyTorch installed") from None
    if not torch.cuda.is_available():
        raise QedError(
            "--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); "
            "leave out --device to train on the CPU"
        )


def message_hash(e: BaseException) -> int:
    """A 63-bit digest of an error's type and message: ranks compare these, not the text."""
    text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


def text_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def _is_collective_failure(e: BaseException) -> bool:
    """A failure of the transport (a peer gone, a timeout), not of the model's own code."""
    try:
        from torch.distributed import DistError
    except ImportError:  # pragma: no cover - torch < 2.1
        DistError = ()
    if DistError and isinstance(e, DistError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and any(
        s in text
        for s in (
            "gloo/",
            "Connection closed by peer",
            "Connection reset by peer",
            "Timed out waiting",
            "NCCL",
            "ProcessGroup",
            "Socket Timeout",
            "Broken pipe",
        )
    )


def _reason(e: BaseException, timeout: float) -> str:
    text = " ".join(str(e).split())
    if "Connection closed by peer" in text or "Connection reset" in text or "Broken pipe" in text:
        return "its process ended (connection closed)"
    if "Timed out" in text or "timed out" in text or "Timeout" in text:
        return f"no answer within {timeout:g} s (--dist-timeout)"
    return text[:200]


def within(timeout: float, fn: Callable[[], object]) -> object:
    """fn()'s result (or its exception), waited for at most `timeout` seconds; TimeoutError
    after that. For the waits whose own timeout does not hold: torch's rendezvous, connected
    to an address that accepts the connection and never answers, waits for ever whatever its
    timeout says. fn runs in a daemon thread, left behind when it does not return (a call
    blocked in C++ cannot be cancelled): the process then ends with its one line without it."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e

    worker = threading.Thread(target=run, name="qed-bounded-wait", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"no result within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# --------------------------------------------------------------------------- the world
class World:
    """This process's place among the ranks of one run: rank r of N, on `device`. The default,
    World(), is a run of one process, where every method below is a no-op."""

    def __init__(
        self,
        rank: int = 0,
        size: int = 1,
        local_rank: int = 0,
        device: str = "cpu",
        timeout: float = DEFAULT_TIMEOUT,
        local_size: int | None = None,
    ):
        self.rank, self.size, self.local_rank = rank, size, local_rank
        self.local_size = size if local_size is None else local_size
        self.device, self.timeout = device, float(timeout)
        self.stop_source = lambda: False  # this rank's "asked to stop?" (the trainer's Ctrl-C flag)
        self.stopping = False  # some rank was asked to stop: agreed in the last step
        self.joined = False

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that evaluates and writes metrics, plots and checkpoints."""
        return self.rank == 0

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.local_rank}" if self.device == "cuda" else "cpu"

    def __repr__(self) -> str:
        return f"World(rank {self.rank} of {self.size}, {self.torch_device})"

    @classmethod
    def join(cls, env: dict, device: str = "cpu", timeout: float = DEFAULT_TIMEOUT) -> World:
        """Become rank env["rank"] of env["size"]: init_process_group over env:// (rank 0 holds the
        rendezvous store at MASTER_ADDR:MASTER_PORT), gloo on CPUs, NCCL on GPUs."""
        import datetime

        import torch
        import torch.distributed as dist

        check_device(device)
        world = cls(env["rank"], env["size"], env["local_rank"], device, timeout, env["local_size"])
        if device == "cuda":
            if env["local_rank"] >= torch.cuda.device_count():
                raise QedError(
                    f"LOCAL_RANK={env['local_rank']} but this machine has {torch.cuda.device_count()} "
                    "CUDA device(s): one rank per GPU"
                )
            torch.cuda.set_device(env["local_rank"])
            os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")  # a timeout raises in this thread
        backend = "nccl" if device == "cuda" else "gloo"

        def rendezvous():
            if device == "cuda":
                torch.cuda.set_device(env["local_rank"])  # the device is per thread
            dist.init_process_group(
                backend,
                init_method="env://",
                rank=env["rank"],
                world_size=env["size"],
                timeout=datetime.timedelta(seconds=timeout),
            )

        try:
            within(timeout, rendezvous)
        except TimeoutError:
            raise QedError(
                f"rank {env['rank']} of {env['size']}: no answer from the rendezvous at "
                f"{env['addr']}:{env['port']} within {timeout:g} s (--dist-timeout): is rank 0 "
                "running there, and are MASTER_ADDR and MASTER_PORT its address?"
            ) from None
        except (RuntimeError, ValueError) as e:
            first = (" ".join(str(e).split()) or type(e).__name__)[:300]
            raise QedError(
                f"rank {env['rank']} of {env['size']}: could not join the other ranks at "
                f"{env['addr']}:{env['port']} ({backend}) within {timeout:g} s: {first}"
            ) from None
        world.joined = True
        return world

    def use_threads(self, backend: str) -> str:
        """This rank's share of the machine's CPUs for torch's intra-op pool (QED_TORCH_THREADS
        overrides); in words, for the run header."""
        import torch

        from . import env
        from .cpu import cpu_count

        own = env.get("QED_TORCH_THREADS")
        n = own if own is not None else max(1, cpu_count() // self.local_size)
        torch.set_num_threads(n)
        comm = "nccl" if self.device == "cuda" else "gloo"
        each = "BLAS 1 thread" if backend == "numpy" else f"torch {n} thread{'s' * (n > 1)}"
        return f"{self.size} ranks ({comm}, {self.local_size} on this machine), {each} each"

    def close(self) -> None:
        """Leave the process group (after a run that ended well; a failed one just exits)."""
        if self.joined:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.joined = False

    # ------------------------------------------------------------------ agreeing
    def agreed_stop(self, requested: bool) -> bool:
        """Whether the run stops now: this rank's own request in a run of one, else what the
        ranks agreed in the last step's all-reduce."""
        return self.stopping if self.distributed else requested

    @contextlib.contextmanager
    def talking(self, during: str) -> Iterator[None]:
        """Turn the failure of a collective inside the block into PeerLost."""
        try:
            yield
        except RuntimeError as e:
            if not (self.distributed and _is_collective_failure(e)):
                raise
            who = f"rank {1 - self.rank}" if self.size == 2 else "another rank"
            raise PeerLost(who, during, _reason(e, self.timeout)) from None

    def barrier(self, during: str = "at the end of the run") -> None:
        if not self.distributed:
            return
        import torch
        import torch.distributed as dist

        with self.talking(during):  # an all_reduce, not dist.barrier(): gloo's barrier has no timeout of its own
            dist.all_reduce(torch.zeros(1, device=self.torch_device))

    def broadcast_(self, tensor: object) -> None:
        """Rank 0's values into `tensor` on every rank."""
        if self.distributed:
            import torch.distributed as dist

            with self.talking("while the ranks started"):
                dist.broadcast(tensor, src=0)

    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        """Around the part of a start that may fail on some ranks and not on others. At its end
        every rank sends [failed?, digest of its error, digest of what must be the same on every
        rank] in one all-reduce; then

          - a rank that failed raises its error; one whose error is rank 0's, word for word,
            marks it `same_as_rank_0` (the command line then prints it once, from rank 0);
          - a rank that did not fail raises PeerLost naming the ranks that did;
          - if the ranks' `agree_on(...)` values differ, every rank raises that in one line."""
        setup = _Setup()
        error = None
        try:
            yield setup
        except BaseException as e:  # KeyboardInterrupt too: the others must not wait for us
            error = e
        if not self.distributed:
            if error is not None:
                raise error
            return
        import torch
        import torch.distributed as dist

        table = torch.zeros(self.size, 3, dtype=torch.int64)
        table[self.rank] = torch.tensor(
            [int(error is not None), 0 if error is None else message_hash(error), setup.value]
        )
        table = table.to(self.torch_device)
        try:
            with self.talking("while the ranks started"):
                dist.all_reduce(table)
        except PeerLost:
            if error is not None:
                raise error from None
            raise
        table = table.cpu()
        failed = [r for r in range(self.size) if table[r, 0]]
        if error is not None:
            if self.rank != 0 and table[0, 0] and table[0, 1] == table[self.rank, 1]:
                error.same_as_rank_0 = True
            raise error
        if failed:
            many = len(failed) > 1
            raise PeerLost(
                f"rank{'s' * many} {', '.join(map(str, failed))}",
                "before training",
                f"{'their' if many else 'its'} own message says why; nothing was trained",
            )
        differ = [r for r in range(self.size) if table[r, 2] != table[0, 2]]
        if differ:
            err = QedError(
                f"rank{'s' * (len(differ) > 1)} {', '.join(map(str, differ))} see a different {setup.what} "
                "from rank 0's; every rank must be given the same options and see the same files"
            )
            err.same_as_rank_0 = self.rank != 0
            raise err

    # ------------------------------------------------------------------ runners
    def shard(self, runner: object) -> object:
        """`runner` (qed/runner.py) made a rank of this world: its step takes this rank's rows of a
        global batch and sums the gradients over the ranks."""
        if not self.distributed:
            return runner
        if runner.backend == "numpy":
            return NumpyRankRunner(runner, self)
        return TorchRankRunner(runner, self)


class _Setup:
    """What `World.setting_up` compares across ranks (one digest, and what it is of)."""

    def __init__(self):
        self.value, self.what = 0, ""

    def agree_on(self, text: str, what: str) -> None:
        self.value, self.what = text_hash(text), what


# --------------------------------------------------------------------------- rank runners
class RankRunner:
    """A runner as one rank of a world. step(x, y) takes the whole global batch (every rank draws
    the same one) and trains on its own rows of it; everything else — loss, logits, params,
    optimizer state, restart, close — is the rank's own runner's, unchanged and local."""

    def __init__(self, runner, world: World):
        self.inner, self.world = runner, world
        self.comm_seconds = 0.0  # NumPy: time in the step's all-reduce (qed bench)

    def __getattr__(self, name):  # the rest of the runner protocol: the rank's own runner
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def own_rows(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, int]:
        """(this rank's rows of x and y, n_r/N: its share of the batch's scored tokens, the index
        of its first row in the batch)."""
        B = x.shape[0]
        if B < self.world.size:
            raise QedError(
                f"a batch of {B} row(s) cannot be shared by {self.world.size} ranks: "
                "each needs at least one (raise --batch-size)"
            )
        rows = shards(B, self.world.size)[self.world.rank]
        scored = np.asarray(y) >= 0
        n_all, n_own = int(np.count_nonzero(scored)), int(np.count_nonzero(scored[rows]))
        if n_own == 0:
            raise QedError(f"rank {self.world.rank}'s rows of the batch have no scored token")
        return x[rows], y[rows], n_own / n_all, rows.start

    def own_micro_rows(self, x: np.ndarray, y: np.ndarray, accum: int) -> list:
        """[(this rank's rows of micro-batch i, n_ri/N, their first row's index in the batch), …]:
        the global batch cut into `accum`
        micro-batches (qed/parallel.py's micro_batches), each shared by the ranks as a whole batch
        is; the shares are of the whole batch's N scored tokens, so they sum to 1 over ranks and
        micro-batches. With accum 1: [own_rows(x, y)]."""
        if accum == 1:
            return [self.own_rows(x, y)]
        from .parallel import micro_batches

        out = []
        for xi, yi, weight, row in micro_batches(x, y, accum, rows=True):
            xs, ys, share, start = self.own_rows(xi, yi)
            out.append((xs, ys, share * weight, row + start))
        return out


class NumpyRankRunner(RankRunner):
    """NumpyGPT as a rank: forward and backward on its rows, one all_reduce(SUM) of
    [gradients…, loss share, stop flag] over the ranks, then clipping and AdamW as in one
    process."""

    def __init__(self, runner, world):
        import torch

        super().__init__(runner, world)
        model = runner.model
        n = model.num_params
        shapes = {k: v.shape for k, v in model.flat_views.items()}
        self.packed = np.zeros(n + 2, dtype=model.dtype)  # gradients, then [loss share, stop]
        from .flat import flat_layout, flat_views

        self.grads = flat_views(self.packed[:n], model.offsets, shapes)
        self.wire = torch.from_numpy(self.packed)  # the same memory, as gloo sees it
        layout = flat_layout(model.params)
        if layout is None:
            raise RuntimeError("NumpyGPT's parameters do not tile one flat buffer")
        world.broadcast_(torch.from_numpy(layout[0]))  # every rank starts from rank 0's weights

    def step(
        self,
        x: np.ndarray,
        y: np.ndarray,
        lr: float | None = None,
        grad_clip: float = 0.0,
        accum: int = 1,
        noise: object = None,
    ) -> float:
        from .config import check_idx
        from .optim import clip_grad_norm

        model, world = self.inner.model, self.world
        check_idx(model.config, np.asarray(x), np.asarray(y))
        local = 0.0  # Σ over this rank's micro-batches of share · loss
        for i, (xs, ys, share, row) in enumerate(self.own_micro_rows(np.asarray(x), np.asarray(y), accum)):
            _, loss, tape = model.forward_slice(xs, ys, None if noise is None else noise.rows(row))
            mine = model.backward_slice(tape, share)  # ∂(share · loss_r)/∂θ
            for k, g in self.grads.items():
                if k in mine:
                    if i == 0:
                        np.copyto(g, mine[k])
                    else:
                        g += mine[k]
                elif i == 0:
                    g.fill(0)  # a parameter this batch does not reach
            local += share * loss
        self.packed[-2] = local
        self.packed[-1] = float(world.stop_source())
        t0 = time.perf_counter()
        import torch.distributed as dist

        with world.talking("during a step"):
            dist.all_reduce(self.wire)  # Σ_r: the global batch's gradient and loss
        self.comm_seconds += time.perf_counter() - t0
        loss, world.stopping = float(self.packed[-2]), bool(self.packed[-1] > 0)
        grads = dict(self.grads)  # clipping may replace entries
        if grad_clip > 0:
            clip_grad_norm(grads, grad_clip)
        self.inner.opt.step(grads, lr=lr)
        return loss


class _HookState:
    """The comm hook's state: the [loss share, stop flag] that ride on a step's last bucket. Its
    own object, not the rank runner: DDP's reducer keeps the state alive, and a runner held by its
    own DDP is a cycle that only the garbage collector frees, possibly after the process group is
    gone (a rank then aborted at exit: `terminate called without an active exception`)."""

    extras = None


def _sum_buckets(state, bucket):
    """DDP's communication hook: all_reduce(SUM) of one bucket of gradients — summed, not DDP's
    mean, since each rank's loss already carries its share n_r/N. The last bucket of a step also
    carries [loss share, stop flag], so a step needs no other collective."""
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    if not bucket.is_last():
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
    n = buf.numel()
    packed = torch.cat([buf, state.extras.to(device=buf.device, dtype=buf.dtype)])

    def unpack(fut):
        out = fut.value()[0]
        state.extras = out[n:].detach().cpu()
        return out[:n]

    return dist.all_reduce(packed, async_op=True).get_future().then(unpack)


class TorchRankRunner(RankRunner):
    """TorchGPT as a rank: DistributedDataParallel around it (the generated autograd Functions
    under DDP's gradient hooks; its start broadcasts rank 0's parameters), the sum hook above, then
    clipping and the generated AdamW as in one process."""

    def __init__(self, runner, world):
        from torch.nn.parallel import DistributedDataParallel

        super().__init__(runner, world)
        device_ids = [world.local_rank] if world.device == "cuda" else None
        with world.talking("while the ranks started"):
            self.ddp = DistributedDataParallel(runner.model, device_ids=device_ids)
        self.hook = _HookState()
        self.ddp.register_comm_hook(self.hook, _sum_buckets)

    def step(
        self,
        x: np.ndarray,
        y: np.ndarray,
        lr: float | None = None,
        grad_clip: float = 0.0,
        accum: int = 1,
        noise: object = None,
    ) -> float:
        import torch

        from .optim import torch_clip_grad_norm

        inner, world = self.inner, self.world
        parts = self.own_micro_rows(np.asarray(x), np.asarray(y), accum)
        inner.opt.zero_grad()
        local = 0.0
        for xs, ys, share, row in parts[:-1]:  # gradient accumulation: .grad sums, no all-reduce yet
            with self.ddp.no_sync():
                _, loss = self.ddp(inner._t(xs), inner._t(ys), **inner._noise(noise, row))
                (loss * share).backward()
            local += share * float(loss.item())
        xs, ys, share, row = parts[-1]  # the last micro-batch's backward all-reduces the sum
        _, loss = self.ddp(inner._t(xs), inner._t(ys), **inner._noise(noise, row))
        local += share * float(loss.item())
        self.hook.extras = torch.tensor([local, float(world.stop_source())], dtype=torch.float64)
        with world.talking("during a step"):
            (loss * share).backward()  # ∂(share · loss_r)/∂θ, summed by the hook
        loss_all, stop = (float(v) for v in self.hook.extras)
        world.stopping = stop > 0
        if grad_clip > 0:
            torch_clip_grad_norm(inner.model, grad_clip)
        inner.update(lr)
        return loss_all

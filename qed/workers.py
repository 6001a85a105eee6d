"""Data-parallel worker processes for NumpyGPT (`parallel="processes"`, qed/parallel.py).

Why processes and not threads: NumPy releases the GIL inside each ufunc and BLAS call, but a
training step makes thousands of calls, and two threads hand the GIL back and forth at every
one of them. Measured on a 2-core machine at the default bench config, a step split across two
threads ran 1.57x slower per thread than alone (LayerNorm 2.5x, GELU 1.8x, matmuls 1.35x); two
processes, each with half the batch, ran 1.2x slower than one alone. So the batch is cut into
slices as with threads: this process runs the first slice, and each worker process runs one
other slice of the same model — forward, loss, backward — and hands back its gradients.

Nothing is pickled. The arrays travel through shared memory (an mmap'ed file, unlinked as soon as
both sides have mapped it); the commands are JSON lines on a pair of pipes:

    parent -> worker                                    worker -> parent
    {"op": "attach", config, dtype, layout, paths}      {"ok": true}
    {"op": "forward", "B", "T", "targets", [io path]}   {"ok": true, "loss": float | null}
    {"op": "backward", "weight": n_s / N}               {"ok": true}   (gradients in shared memory)
    EOF (the parent closed the pipe, or exited)         the worker exits
    any failure                                          {"error": "<traceback>"}

Shared memory per worker:
    params  the model's flat parameter buffer, one for all workers: the parent's NumpyGPT keeps
            its parameters in it, so an optimizer's in-place update is what the workers read;
            its file is unlinked as soon as it is made, and each worker inherits its descriptor;
    grads   (N,) this worker's slice gradients, in the parameters' flat layout;
    io      idx, targets (B_s, T) int64 and logits (B_s, T, V): grown when a batch needs more.

A worker (qed/shard_worker.py, the process side: it builds the model) ignores SIGINT and
SIGTERM (the parent handles them; its exit closes the pipes) and runs BLAS on one thread. This
module is the parent side and the shared memory, and imports no model: qed/parallel.py (NumpyGPT's
data parallelism) imports it, never the other way round.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import select
import subprocess
import sys
import tempfile
import weakref

import numpy as np

from .dropout import Noise
from .errors import QedError
from .flat import flat_views


class WorkerError(RuntimeError):
    """A worker process failed (its traceback is in the message) or exited."""


class WorkerTimeout(QedError):
    """A worker process did not answer within REPLY_TIMEOUT seconds (it hangs, or was stopped)."""


# how long the parent waits for a worker's reply: `qed train` sets it from --dist-timeout, the
# bound of every wait on another process
REPLY_TIMEOUT = 300.0


# --------------------------------------------------------------------------- shared memory
def _shm_dir() -> str | None:
    """$QED_SHM_DIR, else /dev/shm (memory), else the temporary directory (None)."""
    from . import env

    own = env.get("QED_SHM_DIR")  # a bad one is refused, not passed over for the next
    if own is not None:
        return own
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


class SharedArray:
    """A 1-D array of `size` elements of `dtype` in an mmap'ed file that other processes can map.
    `path` is the file's name until `unlink()` (after every process has mapped it).

    `keep_fd=True`: the file is unlinked at once and only its descriptor `fd` is kept (closed
    when this object goes), for processes started later to map: a parent killed with SIGKILL
    then leaves nothing behind. `fd=`: map such a descriptor (in a process that inherited it),
    then close it (the mapping stays)."""

    def __init__(self, size: int, dtype, path: str | None = None, *, keep_fd: bool = False, fd: int | None = None):
        self.dtype = np.dtype(dtype)
        nbytes = max(1, int(size) * self.dtype.itemsize)
        created = path is None and fd is None
        if created:
            fd, path = tempfile.mkstemp(prefix="qed-shm-", dir=_shm_dir())
            os.ftruncate(fd, nbytes)
        elif fd is None:
            fd = os.open(path, os.O_RDWR)
        keep = created and keep_fd
        try:
            self._map = mmap.mmap(fd, nbytes)
        finally:
            if not keep:
                os.close(fd)
        self.fd = fd if keep else None
        self.path = path
        self.array = np.frombuffer(self._map, dtype=self.dtype, count=int(size))
        # the file goes when this object does (or at exit), if `unlink` has not removed it yet
        self._unlink = weakref.finalize(self, _unlink, path) if created else None
        if keep:
            self.unlink()
            self._close_fd = weakref.finalize(self, os.close, fd)

    def unlink(self) -> None:
        """Remove the file's name: processes that mapped it keep their mapping."""
        if self._unlink is not None:
            self._unlink()
        self.path = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _io_layout(B: int, T: int, V: int, dtype) -> tuple[int, dict]:
    """Bytes of the io segment and the (offset, count, dtype, shape) of idx, targets, logits."""
    parts, off = {}, 0
    for name, dt, shape in (
        ("idx", np.int64, (B, T)),
        ("targets", np.int64, (B, T)),
        ("logits", np.dtype(dtype), (B, T, V)),
    ):
        dt = np.dtype(dt)
        off = -(-off // 64) * 64  # 64-byte aligned
        parts[name] = (off, math.prod(shape), dt, shape)
        off += math.prod(shape) * dt.itemsize
    return off, parts


def _io_views(raw: np.ndarray, parts: dict) -> dict:
    return {k: raw[o : o + n * dt.itemsize].view(dt).reshape(shape) for k, (o, n, dt, shape) in parts.items()}


# --------------------------------------------------------------------------- parent side
class ShardWorkers:
    """`n` worker processes that each run one slice of a batch through a copy of the model whose
    parameters live in `params` (a SharedArray the parent's model also uses)."""

    def __init__(self, n: int, config, dtype, params: SharedArray, offsets: dict, shapes: dict):
        self.config, self.dtype = config, np.dtype(dtype)
        self.params, self.offsets, self.shapes = params, dict(offsets), {k: tuple(s) for k, s in shapes.items()}
        self.procs: list[subprocess.Popen] = []
        self.chans: list[tuple] = []  # (write file, read file) per worker
        self.grads: list[dict] = []  # per worker: {name: view of its grads}
        self._grad_bufs: list[SharedArray] = []
        self._io: list[tuple[SharedArray, tuple, dict] | None] = []  # (segment, (B, T), views)
        env = dict(
            os.environ,
            OPENBLAS_NUM_THREADS="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            QED_MALLOC_TUNE=os.environ.get("QED_MALLOC_TUNE", "1"),
        )
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._finalizer = weakref.finalize(self, _shutdown, self.procs, self.chans)
        try:
            for _ in range(n):
                self._start(env)
        except BaseException:
            self.close()
            raise

    def _start(self, env) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        shared = () if self.params.fd is None else (self.params.fd,)  # the parameters' file, by descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "qed.shard_worker", str(to_child_r), str(to_parent_w)],
            pass_fds=(to_child_r, to_parent_w, *shared),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(to_parent_w)
        self.procs.append(proc)
        chan = (
            os.fdopen(to_child_w, "w", buffering=1, encoding="utf-8"),
            os.fdopen(to_parent_r, "r", encoding="utf-8"),
        )
        self.chans.append(chan)
        grads = SharedArray(self.params.array.size, self.dtype)
        self._grad_bufs.append(grads)
        self.grads.append(flat_views(grads.array, self.offsets, self.shapes))
        self._io.append(None)
        w = len(self.procs) - 1
        try:
            self._send(
                w,
                {
                    "op": "attach",
                    "config": self.config.to_dict(),
                    "dtype": self.dtype.name,
                    "offsets": self.offsets,
                    "shapes": {k: list(s) for k, s in self.shapes.items()},
                    "params": self.params.path,
                    "params_fd": self.params.fd,
                    "grads": grads.path,
                },
            )
            self._reply(w)
        finally:
            grads.unlink()

    # ------------------------------------------------------------------ protocol
    def _send(self, w: int, msg: dict) -> None:
        msg = dict(msg, errstate=np.geterr())  # the worker computes under the caller's np.errstate
        try:
            self.chans[w][0].write(json.dumps(msg) + "\n")
        except (BrokenPipeError, OSError) as e:
            raise WorkerError(self._died(w)) from e

    def _reply(self, w: int) -> dict:
        # the protocol has one reply in flight, so nothing is left buffered between replies:
        # waiting on the pipe itself bounds the wait
        ready, _, _ = select.select([self.chans[w][1]], [], [], REPLY_TIMEOUT)
        if not ready:
            raise WorkerTimeout(
                f"NumPy worker process {w + 1} (pid {self.procs[w].pid}) did not answer within "
                f"{REPLY_TIMEOUT:g} s (--dist-timeout); it was stopped or hangs"
            )
        line = self.chans[w][1].readline()
        if not line:
            raise WorkerError(self._died(w))
        msg = json.loads(line)
        if "error" in msg:
            raise WorkerError(f"NumPy worker process {w + 1} failed:\n{msg['error']}")
        return msg

    def _died(self, w: int) -> str:
        proc = self.procs[w]
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return f"NumPy worker process {w + 1} (pid {proc.pid}) exited (code {code}); see its stderr above"

    # ------------------------------------------------------------------ one step
    def start_forward(self, w: int, idx: np.ndarray, targets: np.ndarray | None, noise: Noise | None = None) -> None:
        """Send slice `idx` (B_s, T) (and targets; the dropout masks' `Noise`, qed/dropout.py) to
        worker w; `finish_forward` collects it."""
        B, T = idx.shape
        msg = {"op": "forward", "B": B, "T": T, "targets": targets is not None}
        if noise is not None:
            msg["noise"] = [noise.seed, noise.step, noise.row]
        io = self._io[w]
        if io is None or io[1][0] < B or io[1][1] < T:
            cap = (max(B, io[1][0] if io else 0), max(T, io[1][1] if io else 0))
            nbytes, parts = _io_layout(*cap, self.config.vocab_size, self.dtype)
            seg = SharedArray(nbytes, np.uint8)
            io = self._io[w] = (seg, cap, parts)
            msg["io"] = seg.path
            msg["cap"] = list(cap)
        views = _io_views(io[0].array, _io_layout(B, T, self.config.vocab_size, self.dtype)[1])
        views["idx"][...] = idx
        if targets is not None:
            views["targets"][...] = targets
        self._send(w, msg)

    def finish_forward(self, w: int) -> tuple[np.ndarray, float | None]:
        """(logits (B_s, T, V), a copy; mean loss of the slice or None) of worker w."""
        try:
            msg = self._reply(w)
        finally:
            self._io[w][0].unlink()
        B, T = msg["B"], msg["T"]
        views = _io_views(self._io[w][0].array, _io_layout(B, T, self.config.vocab_size, self.dtype)[1])
        return views["logits"].copy(), msg["loss"]

    def start_backward(self, w: int, weight: float) -> None:
        self._send(w, {"op": "backward", "weight": float(weight)})

    def finish_backward(self, w: int) -> dict:
        """{name: gradient} of worker w's slice: views of its shared buffer (valid until its next
        backward)."""
        self._reply(w)
        return self.grads[w]

    def peak_rss_bytes(self) -> int:
        """Σ VmHWM of the worker processes (Linux /proc; 0 where it cannot be read)."""
        total = 0
        for p in self.procs:
            try:
                with open(f"/proc/{p.pid}/status", encoding="utf-8") as f:
                    total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
            except OSError:
                pass
        return total

    def close(self) -> None:
        self._finalizer()


def _shutdown(procs, chans) -> None:
    for w, r in chans:
        for f in (w, r):
            try:
                f.close()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

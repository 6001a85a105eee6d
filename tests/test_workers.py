"""NumpyGPT with parallel="processes": the batch slices run in worker processes (qed/workers.py)
and give, bit for bit, what the same slices give in threads; failures surface; nothing is left
behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from qed.config import GPTConfig
from qed.model_numpy import NumpyGPT
from qed.optim import AdamW
from qed.workers import SharedArray, WorkerError

TINY = dict(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11)


def batch(B, cfg, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, cfg.vocab_size, (B, cfg.block_size))
    tgt = rng.integers(0, cfg.vocab_size, (B, cfg.block_size))
    tgt[0, :3] = -1  # slices with different numbers of scored tokens
    return idx, tgt


@pytest.mark.parametrize("threads,B", [(2, 5), (3, 7)])
def test_processes_equal_threads_bit_for_bit(threads, B):
    """Three AdamW steps: logits, loss, every gradient and the updated parameters are equal."""
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(B, cfg)
    runs = {}
    for parallel in ("threads", "processes"):
        with NumpyGPT(cfg, threads=threads, parallel=parallel) as m:
            opt = AdamW(m.params, lr=1e-2)
            trace = []
            for _ in range(3):
                logits, loss = m.forward(idx, tgt)
                grads = m.backward()
                trace.append((logits.copy(), loss, {k: g.copy() for k, g in grads.items()}))
                opt.step(grads)
            runs[parallel] = (trace, {k: p.copy() for k, p in m.params.items()})
    (ta, pa), (tb, pb) = runs["threads"], runs["processes"]
    for (la, lossa, ga), (lb, lossb, gb) in zip(ta, tb):
        assert np.array_equal(la, lb) and lossa == lossb
        assert ga.keys() == gb.keys() and all(np.array_equal(ga[k], gb[k]) for k in ga)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_replaced_parameters_reach_the_workers():
    """A parameter replaced by a new array (not updated in place) is what the workers use."""
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(4, cfg, seed=1)
    out = []
    for parallel in ("threads", "processes"):
        with NumpyGPT(cfg, threads=2, parallel=parallel) as m:
            m.forward(idx, tgt)  # workers started on the old values
            m.backward()
            m.params["h.0.attn.c_attn.weight"] = m.params["h.0.attn.c_attn.weight"] * 3.0
            out.append(m.forward(idx, tgt)[1])
            m.backward()
    assert out[0] == out[1]


def test_a_worker_failure_is_raised_with_its_traceback():
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(4, cfg)
    with NumpyGPT(cfg, threads=2, parallel="processes") as m:
        m.forward(idx, tgt)
        m.backward()
        m.parallel.workers._send(0, {"op": "no-such-op"})
        with pytest.raises(WorkerError, match="unknown op 'no-such-op'"):
            m.parallel.workers._reply(0)


def test_a_dead_worker_is_reported_and_close_recovers():
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(4, cfg)
    with NumpyGPT(cfg, threads=2, parallel="processes") as m:
        loss0 = m.forward(idx, tgt)[1]
        m.backward()
        m.parallel.workers.procs[0].kill()
        m.parallel.workers.procs[0].wait()
        with pytest.raises(WorkerError, match="exited"):
            m.forward(idx, tgt)
        m.close()  # the next step starts a new worker
        assert m.forward(idx, tgt)[1] == loss0


def test_no_shared_memory_left_behind():
    """The per-step files are unlinked once both sides have mapped them; the parameters' file
    as soon as it is made (the workers inherit its descriptor), which is closed when the model
    goes."""
    import gc

    cfg = GPTConfig(**TINY)
    idx, tgt = batch(4, cfg)
    m = NumpyGPT(cfg, threads=2, parallel="processes")
    fd = m.parallel.shared.fd
    assert m.parallel.shared.path is None and os.fstat(fd).st_nlink == 0  # a file with no name
    m.forward(idx, tgt)
    m.backward()
    workers = m.parallel.workers
    assert all(g.path is None for g in workers._grad_bufs) and all(io[0].path is None for io in workers._io)
    procs = list(workers.procs)
    m.close()
    assert all(p.poll() is not None for p in procs)  # the workers have exited
    assert m.forward(idx, tgt)[1] is not None  # new workers map the same descriptor
    m.close()
    del m, workers
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with the model


def test_sigkill_leaves_no_shared_file(tmp_path):
    """A training process killed with SIGKILL after a step leaves no file in the shared-memory
    directory, and its worker exits (its pipe closes)."""
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import os, signal, sys, numpy as np\n"
        "from qed.config import GPTConfig\n"
        "from qed.model_numpy import NumpyGPT\n"
        f"cfg = GPTConfig(**{TINY!r})\n"
        "m = NumpyGPT(cfg, threads=2, parallel='processes')\n"
        "rng = np.random.default_rng(0)\n"
        "idx = rng.integers(0, cfg.vocab_size, (4, cfg.block_size))\n"
        "m.forward(idx, idx); m.backward()\n"
        "print(m.parallel.workers.procs[0].pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, QED_SHM_DIR=str(tmp_path), PYTHONPATH=root)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    worker = int(proc.stdout.split()[0])
    for _ in range(100):  # the worker sees EOF and exits
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"worker {worker} still running")
    assert list(tmp_path.iterdir()) == []


def test_forward_without_targets_and_one_row_stay_in_this_process():
    cfg = GPTConfig(**TINY)
    idx, tgt = batch(3, cfg)
    m = NumpyGPT(cfg, threads=2, parallel="processes")
    ref = NumpyGPT(cfg, threads=2, parallel="threads")
    assert np.array_equal(m.forward(idx)[0], ref.forward(idx)[0])
    assert m.forward(idx[:1], tgt[:1])[1] == ref.forward(idx[:1], tgt[:1])[1]
    assert m.parallel.workers is None  # nothing needed a worker
    m.close()


def test_bad_parallel_and_bad_buffer():
    with pytest.raises(ValueError, match="parallel must be"):
        NumpyGPT(GPTConfig(**TINY), parallel="gpu")
    from qed.flat import flat_params

    with pytest.raises(ValueError, match="buffer must be"):
        flat_params({"w": np.ones((2, 2))}, np.float32, buffer=np.empty(3, np.float32))


def test_shared_array_is_shared_between_mappings():
    a = SharedArray(5, np.float32)
    b = SharedArray(5, np.float32, a.path)  # a second mapping of the same file
    a.array[:] = np.arange(5)
    assert np.array_equal(b.array, np.arange(5, dtype=np.float32))
    path = a.path
    a.unlink()
    assert not os.path.exists(path) and a.path is None

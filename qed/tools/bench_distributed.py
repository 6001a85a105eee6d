"""`qed bench --nproc N`: N ranks of torch.distributed (gloo) against one process, per backend.

Rows, each training the same GPT on the same global batches (float32, AdamW with bench.HP):

    numpy  1 process, N threads     NumpyGPT, the batch in N slices run by Python threads
    numpy  1 process + workers      the same slices, N−1 of them in worker processes (shared memory)
    numpy  N ranks                  one process per rank, its rows of the batch, one all_reduce per step
    torch  1 process, N threads     TorchGPT with torch's intra-op pool at N threads
    torch  N ranks                  DistributedDataParallel, one thread per rank

The single-process rows are interleaved with each other (bench.time_interleaved); the ranks run
as their own block of rounds (N processes, started by qed/launch.py), before them. A rank times
each step after a tiny all-reduce that lines the ranks up; the NumPy rank also times its
gradient all-reduce inside the step. Last, the ranks time an all_reduce of as many float32
values as the model has parameters on its own: with a ring all-reduce each rank sends and
receives

    bytes per step = parameters × 4 × 2(N−1)/N

(a reduce-scatter then an all-gather, each passing (N−1)/N of the buffer), which is what a step
costs on a network for planning runs on many machines (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

from . import ROOT
from .bench import HP, _log, build_config, build_impl, make_batches, set_threads, summarize, time_interleaved

ROWS = {
    "numpy-threads": "numpy, 1 process, the batch in {n} threads",
    "numpy-processes": "numpy, 1 process + {workers} worker process(es) (the existing split)",
    "numpy-ranks": "numpy, {n} ranks (gloo), one all_reduce a step",
    "torch-threads": "torch (generated), 1 process, {n} intra-op threads",
    "torch-ranks": "torch (generated), {n} ranks (gloo), DistributedDataParallel",
}
ALLREDUCE_REPEATS = 20


def ring_bytes(n_params: int, nproc: int, itemsize: int = 4) -> float:
    """Bytes each rank sends (and receives) in one ring all-reduce of the gradients."""
    return n_params * itemsize * 2 * (nproc - 1) / nproc


# --------------------------------------------------------------------------- one rank
def rank_main(spec: dict) -> int:
    """Run in each rank (python -m qed.tools.bench_distributed SPEC): time `steps` training steps
    of each backend on this rank's rows, then a bare all-reduce; rank 0 writes the result."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from ..config import GPTConfig
    from ..distributed import World, rank_env
    from ..runner import build_runner

    torch.set_num_threads(1)
    world = World.join(rank_env(), timeout=600)
    cfg = GPTConfig.from_dict(spec["config"])
    batches = make_batches(cfg, spec["batch"], spec["warmup"] + spec["steps"], spec.get("data"))
    line_up = torch.zeros(1)
    out = {}
    for backend in spec["backends"]:
        runner = world.shard(build_runner(cfg, backend, "float32", threads=1, optimizer=HP))
        times, comm = [], []
        for r, (x, y) in enumerate(batches):
            dist.all_reduce(line_up)  # every rank starts the step together
            before = runner.comm_seconds
            t0 = time.perf_counter()
            runner.step(x, y)
            if r >= spec["warmup"]:
                times.append(time.perf_counter() - t0)
                comm.append(runner.comm_seconds - before)
        runner.close()
        out[f"{backend}-ranks"] = dict(
            summarize(times), comm_ms=1e3 * statistics.median(comm) if backend == "numpy" else None
        )
    n = sum(int(np.prod(s)) for s in runner.param_shapes().values())
    buf = torch.zeros(n, dtype=torch.float32)
    dist.all_reduce(buf)
    ts = []
    for _ in range(ALLREDUCE_REPEATS):
        dist.all_reduce(line_up)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        ts.append(time.perf_counter() - t0)
    out["allreduce"] = dict(summarize(ts), params=n, bytes=ring_bytes(n, world.size))
    if world.is_main:
        with open(spec["result"], "w", encoding="utf-8") as f:
            json.dump(out, f)
    world.close()
    return 0


# --------------------------------------------------------------------------- the comparison
def bench_distributed(
    overrides: dict | None = None,
    *,
    nproc: int = 2,
    steps: int = 20,
    warmup: int = 3,
    data: str | None = None,
    progress: bool = True,
) -> dict:
    """Step times of N ranks against one process with N threads (and, for NumPy, with worker
    processes), and the all-reduce's share; a JSON-able dict."""
    from ..launch import launch

    cfg, batch = build_config(overrides or {}, None)
    if batch < nproc:
        from ..errors import QedError

        raise QedError(f"--nproc {nproc}: the bench batch of {batch} rows cannot be shared by {nproc} ranks")
    result = {
        "nproc": nproc,
        "config": cfg.to_dict(),
        "batch_size": batch,
        "steps": steps,
        "warmup": warmup,
        "rows": {},
    }
    _log(f"qed bench --nproc {nproc}: {nproc} ranks (gloo), {warmup} warm-up + {steps} steps per backend ...")
    with tempfile.TemporaryDirectory(prefix="qed-bench-") as tmp:
        spec = {
            "config": cfg.to_dict(),
            "batch": batch,
            "steps": steps,
            "warmup": warmup,
            "data": data,
            "backends": ["numpy", "torch"],
            "result": os.path.join(tmp, "ranks.json"),
        }
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            OPENBLAS_NUM_THREADS="1",
            PYTHONPATH=str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        )
        rc = launch([sys.executable, "-m", "qed.tools.bench_distributed", json.dumps(spec)], nproc, 600, env=env)
        if rc != 0:
            raise RuntimeError(f"qed bench --nproc {nproc}: the ranks failed (exit status {rc})")
        with open(spec["result"], encoding="utf-8") as f:
            ranks = json.load(f)
    _log(f"qed bench --nproc {nproc}: one process, {nproc} threads / worker processes, interleaved ...")
    set_threads(nproc)
    batches = make_batches(cfg, batch, warmup + steps, data)
    impls = {
        "numpy-threads": build_impl("numpy", cfg, nproc, parallel="threads"),
        "numpy-processes": build_impl("numpy", cfg, nproc, parallel="processes"),
        "torch-threads": build_impl("torch-gen", cfg, nproc),
    }
    try:
        timed = time_interleaved(impls, batches, warmup, steps, progress)
    finally:
        for runner in impls.values():
            runner.close()
    rows = {name: summarize(timed["times"][name]) for name in impls}
    rows.update({k: v for k, v in ranks.items() if k.endswith("-ranks")})
    tokens = batch * cfg.block_size
    for name, row in rows.items():
        ref = rows[name.split("-")[0] + "-threads"]["median_ms"]
        row.update(
            label=ROWS[name].format(n=nproc, workers=nproc - 1),
            ratio_to_threads=row["median_ms"] / ref,
            tokens_per_s=tokens / (row["median_ms"] / 1e3),
        )
    rows["numpy-processes"]["ratio_to_ranks"] = rows["numpy-processes"]["median_ms"] / rows["numpy-ranks"]["median_ms"]
    result["rows"] = {name: rows[name] for name in ROWS}
    result["allreduce"] = ranks["allreduce"]
    return result


def render_distributed(res: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = console or Console(width=max(132, Console().width))
    cfg, n = res["config"], res["nproc"]
    t = Table(
        title=f"qed bench --nproc {n}: {cfg['n_layer']} layers, n_embd {cfg['n_embd']}, block "
        f"{cfg['block_size']}, batch {res['batch_size']}, float32 (ratio: to the 1-process, "
        f"{n}-thread row of the same backend)"
    )
    for col in ("row", "median ms", "min–max ms", "tokens/s", "all-reduce ms", "ratio"):
        t.add_column(col, justify="left" if col == "row" else "right")
    for _name, r in res["rows"].items():
        comm = r.get("comm_ms")
        t.add_row(
            r["label"],
            f"{r['median_ms']:.1f}",
            f"{r['min_ms']:.1f}–{r['max_ms']:.1f}",
            f"{r['tokens_per_s']:,.0f}",
            "—" if comm is None else f"{comm:.2f}",
            f"{r['ratio_to_threads']:.2f}",
        )
    con.print(t)
    a = res["allreduce"]
    con.print(
        f"all_reduce of {a['params']:,} float32 alone: median {a['median_ms']:.2f} ms; a ring all-reduce "
        f"moves parameters × 4 × 2(N−1)/N = {a['bytes'] / 2**20:.2f} MiB per rank per step "
        f"({a['bytes'] / (a['median_ms'] / 1e3) / 1e9:.2f} GB/s here). The ranks ran as one block before the "
        "interleaved single-process rows; the torch ranks' all-reduce overlaps their backward."
    )


def _from_cli(overrides: dict, args) -> dict:
    return bench_distributed(overrides, nproc=args.nproc, steps=args.steps, warmup=args.warmup, data=args.data)


SECTION = ("distributed", _from_cli, render_distributed)  # bench.run_cli's part for --nproc


if __name__ == "__main__":
    sys.exit(rank_main(json.loads(sys.argv[1])))

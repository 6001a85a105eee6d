"""Where a training step's time goes: one bench row, profiled.

    python -m qed.tools.profile_step --row torch-gen     # torch.profiler: the ops by self CPU time
    python -m qed.tools.profile_step --row eager
    python -m qed.tools.profile_step --row numpy         # cProfile: the generated kernels by own time

The row is built as `qed bench` builds it (qed/tools/bench.py: float32, AdamW, the default bench
config unless --config says otherwise, every thread of the machine), a few untimed steps run
first, then `--steps` steps are profiled. The NumPy row runs its batch in one process here (the
worker process would hide its half of the kernels from the profiler), so its total is one
process's, not the bench's.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys


def profile_torch(runner, batches, steps: int, top: int) -> str:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for x, y in batches[:steps]:
            runner.step(x, y)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def profile_numpy(runner, batches, steps: int, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for x, y in batches[:steps]:
        runner.step(x, y)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    from . import bench

    p = argparse.ArgumentParser(prog="python -m qed.tools.profile_step", description=__doc__.split("\n")[0])
    p.add_argument("--row", choices=("numpy", "torch-gen", "eager"), default="torch-gen")
    p.add_argument("--config", default=None, help="model overrides, as `qed bench --config`")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    threads = bench.cpu_count()
    bench.set_threads(threads)
    cfg, batch = bench.build_config(bench.parse_config(args.config))
    runner = bench.build_impl(args.row, cfg, threads, parallel="threads")
    batches = bench.make_batches(cfg, batch, args.warmup + args.steps)
    try:
        for x, y in batches[: args.warmup]:
            runner.step(x, y)
        run = profile_numpy if args.row == "numpy" else profile_torch
        text = run(runner, batches[args.warmup :], args.steps, args.top)
    finally:
        runner.close()
    m = bench.machine()
    sys.stdout.write(
        f"# {args.row}: {cfg.n_layer} layers, {cfg.n_head} heads, n_embd {cfg.n_embd}, block "
        f"{cfg.block_size}, batch {batch}, {threads} threads, {args.steps} steps; "
        f"{m.get('cpu_model', '?')} ({m.get('simd', '?')})\n{text}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

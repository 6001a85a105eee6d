"""`qed bench --attention-scaling`: attention's peak memory and time as T doubles, per kernel.

One forward + backward of causal attention at batch 1, 4 heads, head dim 64, float32, for
T = 256 … 4096, each kernel in a fresh process (so that one's peak is not another's):

    numpy attention        generated/numpy/attention.py: keeps the T×T weights for the backward
    numpy attention_lse    one log-sum-exp per row kept; each pass still forms T×T scores
    numpy attention_tiled  the keys in blocks of 128: the largest temporary is T × 128
    torch attention_tiled  the same, generated PyTorch
    torch sdpa             F.scaled_dot_product_attention (is_causal=True) under autograd

Peak: VmHWM after resetting it once the inputs exist (/proc/self/clear_refs = 5), minus the RSS
then; time: the best of three forward + backward calls after one untimed call. A fitted
exponent (peak ∝ T^k over the points) says how each grows: 2 for the T×T kernels, 1 for the
tiled one (its q, k, v, o and gradients are T × 64 each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

TS = (256, 512, 1024, 2048, 4096)
KERNELS = ("numpy attention", "numpy attention_lse", "numpy attention_tiled", "torch attention_tiled", "torch sdpa")
HEADS, HEAD_DIM = 4, 64


def probe(kernel: str, T: int, threads: int) -> dict:
    from .bench import _read_status, _reset_peak, set_threads

    set_threads(threads)
    backend, name = kernel.split()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, HEADS, T, HEAD_DIM)).astype(np.float32) for _ in range(4)]
    if backend == "torch":
        import torch

        q, k, v = (torch.from_numpy(a).requires_grad_() for a in arrays[:3])
        do = torch.from_numpy(arrays[3])
        if name == "sdpa":

            def step():
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                o.backward(do)
        else:
            import importlib

            fn = getattr(importlib.import_module(f"generated.torch.{name}"), name)

            def step():
                fn(q, k, v, causal=True).backward(do)
    else:
        import importlib

        mod = importlib.import_module(f"generated.numpy.{name}")
        fwd, bwd = getattr(mod, name + "_forward"), getattr(mod, name + "_backward")
        q, k, v, do = arrays

        def step():
            o, cache = fwd(q, k, v, causal=True)
            bwd(do, cache)

    step()
    reset = _reset_peak()
    before = _read_status().get("VmRSS", 0)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    peak = _read_status().get("VmHWM", 0)
    return {"kernel": kernel, "T": T, "peak_mb": (peak - before) / 2**20 if reset else None, "seconds": best}


def scaling(Ts=TS, kernels=KERNELS, threads: int | None = None, timeout: float = 900) -> dict:
    from ..cpu import cpu_count

    threads = threads or cpu_count()
    rows = []
    for T in Ts:
        for kernel in kernels:
            print(f"qed bench --attention-scaling: {kernel} at T = {T} ...", file=sys.stderr, flush=True)
            out = subprocess.run(
                [sys.executable, "-m", "qed.tools.bench_attention", "--probe", kernel, str(T), str(threads)],
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ},
            )
            if out.returncode != 0:
                rows.append({"kernel": kernel, "T": T, "error": out.stderr.strip()[-500:]})
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    fits = {}
    for kernel in kernels:
        pts = [r for r in rows if r["kernel"] == kernel and r.get("peak_mb")]
        if len(pts) >= 2:
            xs = np.log2([r["T"] for r in pts])
            fits[kernel] = {
                "peak_exponent": float(np.polyfit(xs, np.log2([r["peak_mb"] for r in pts]), 1)[0]),
                "time_exponent": float(np.polyfit(xs, np.log2([r["seconds"] for r in pts]), 1)[0]),
            }
    return {
        "batch": 1,
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "dtype": "float32",
        "causal": True,
        "threads": threads,
        "rows": rows,
        "fits": fits,
    }


def render(result: dict) -> None:
    print(
        f"attention, causal, batch 1, {result['heads']} heads, head dim {result['head_dim']}, float32, "
        f"{result['threads']} threads: peak MB above the inputs / ms for forward + backward"
    )
    kernels = list(dict.fromkeys(r["kernel"] for r in result["rows"]))
    print(f"{'T':>6}" + "".join(f"{k:>24}" for k in kernels))
    for T in sorted({r["T"] for r in result["rows"]}):
        cells = []
        for k in kernels:
            r = next(x for x in result["rows"] if x["T"] == T and x["kernel"] == k)
            cells.append("error" if "error" in r else f"{r['peak_mb']:.1f} / {1e3 * r['seconds']:.1f}")
        print(f"{T:>6}" + "".join(f"{c:>24}" for c in cells))
    print(
        "fitted exponents (peak, time ∝ T^k): "
        + ", ".join(f"{k} {f['peak_exponent']:.2f}, {f['time_exponent']:.2f}" for k, f in result["fits"].items())
    )


def _compute(overrides, args):
    return scaling(threads=args.threads)


SECTION = ("attention_scaling", _compute, render)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        kernel, T, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(probe(kernel, T, threads)))
    else:
        result = scaling()
        render(result)

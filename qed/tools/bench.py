"""`qed bench`: training steps of the NumPy backend, the generated-PyTorch backend and PyTorch
eager, measured side by side in one process.

The three implementations train the same GPT (same config, same initial weights, float32, AdamW
with the same hyperparameters, the same batches):

    numpy      NumpyGPT — the generated NumPy kernels, no autograd; the batch split into
               `threads` slices, run by worker processes (default; qed/workers.py) or Python
               threads (--numpy-parallel threads), BLAS at one thread each;
               AdamW = the generated adamw_step over one flat buffer (qed/optim.py)
    torch-gen  TorchGPT — the generated torch.autograd.Functions, chained by autograd;
               AdamW = the generated adamw_step per parameter (TorchAdamW)
    torch-compiled  the same TorchGPT with compile=True: forward, loss and the generated
               backward traced into one graph and fused by torch.compile (inductor, pattern
               matcher off); compiled on a throwaway step, after which the weights and AdamW's
               state are reset. Left out with --no-compile (and by the memory run).
    eager      ReferenceGPT (qed/tools/reference.py) — torch.nn with F.scaled_dot_product_attention,
               F.layer_norm, F.gelu, F.cross_entropy under eager autograd; torch.optim.AdamW
    eager-compiled  the same ReferenceGPT, its forward under torch.compile with torch-compiled's
               flags: the peer a user would pick instead of the compiled qed backend. Left out
               with --no-compile (and by the memory run).

One step = forward + loss + backward + AdamW update (no gradient clipping). After `warmup`
rounds the steps are interleaved (numpy, torch-gen, eager, numpy, …) so that a slow spell of
the machine hits all three alike, each timed step after an untimed one of the same
implementation (`SETTLE_STEPS`), so that no step is timed while the previous implementation's
thread pools still spin, and each finds its own as a training loop does; the table gives the median step time, its spread (min–max
and the interquartile range), tokens per second, model GFLOP/s against the machine's measured
float32 matmul rate, peak memory and each ratio to eager.

Peak memory is measured in a fresh subprocess per implementation (a process has one RSS
high-water mark): the model, optimizer and data are built, the kernel's peak-RSS counter is
reset (`echo 5 > /proc/self/clear_refs`), and after the steps VmHWM from /proc/self/status is
read; "peak" is that high-water mark and "step" is the part above the RSS just before the first
step (activations, gradients, optimizer state, temporaries). Where clear_refs is not writable,
ru_maxrss (peak since the process started) is reported instead, and the method says so.

Model FLOPs per step (dense, the causal mask not exploited, as all three compute it):
6 · N_matmul · tokens + 12 · n_layer · T · n_embd · tokens, with N_matmul the parameters used
in matrix products (every linear weight and the lm_head) — forward 2·N per token, backward 4·N;
attention QKᵀ and AV: 4·T·C per token per layer forward, twice that backward.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

from ..cli_types import MEMORY_BATCH, MEMORY_T, NUMPY_PARALLEL, SWEEP_C, SWEEP_FIGURE, SWEEP_T  # the --help defaults
from ..cpu import cpu_count
from . import ROOT

DEFAULT_MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65)
DEFAULT_BATCH = 12
LARGE_MODEL = dict(DEFAULT_MODEL, n_embd=384, n_head=6, block_size=256)
IMPLS = ("numpy", "torch-gen", "eager")
COMPILED = "torch-compiled"  # optional row: torch-gen under torch.compile
COMPILED_REF = "eager-compiled"  # optional row: the torch.nn reference under the same torch.compile
COMPILED_ROWS = (COMPILED, COMPILED_REF)
# Untimed steps of the same implementation before each timed one. PyTorch's OpenMP threads spin
# for some milliseconds after a parallel region: a step timed right after another
# implementation's shared the CPUs with them (NumPy's step measured 4-5 ms slower right after
# eager's than with OMP_WAIT_POLICY=PASSIVE), while eager's own steps find its threads awake.
# One untimed step first puts every implementation in the state of a training loop.
SETTLE_STEPS = 1
LABELS = {
    "numpy": "(a) NumPy backend (the printed program generated/numpy/gpt.py)",
    "torch-gen": "(b) PyTorch backend (the printed program generated/torch/gpt.py, its printed backward)",
    COMPILED: "(b′) the same, compiled by torch.compile (inductor fuses the generated expressions)",
    "eager": "(c) PyTorch eager (torch.nn, F.scaled_dot_product_attention)",
    COMPILED_REF: "(c′) the same torch.nn model, compiled by torch.compile with (b′)'s flags",
}
SHORT = {
    "numpy": "(a) numpy",
    "torch-gen": "(b) torch-gen",
    COMPILED: "(b′) compiled",
    "eager": "(c) eager",
    COMPILED_REF: "(c′) eager compiled",
}
HP = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- configuration
def parse_config(text: str | None) -> dict:
    """`--config`: a JSON object, a path to a JSON file, or key=value pairs (comma- or
    space-separated). Keys: GPTConfig fields, plus batch_size."""
    from ..errors import QedError

    if not text:
        return {}
    text = text.strip()
    if text.startswith("{") or (os.path.exists(text) and text.endswith(".json")):
        try:
            raw = json.loads(text if text.startswith("{") else open(text, encoding="utf-8").read())
        except (json.JSONDecodeError, OSError) as e:
            raise QedError(f"--config: not a JSON object: {e}") from None
        if not isinstance(raw, dict):
            raise QedError("--config: expected a JSON object")
        return raw
    out = {}
    for part in text.replace(",", " ").split():
        if "=" not in part:
            raise QedError(f"--config: expected key=value, got {part!r}")
        k, v = part.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def build_config(overrides: dict, vocab_size: int | None = None):
    """(GPTConfig, batch_size) from the defaults and the overrides."""
    from ..config import ConfigError, GPTConfig

    d = dict(DEFAULT_MODEL)
    over = dict(overrides)
    batch = int(over.pop("batch_size", over.pop("batch", DEFAULT_BATCH)))
    d.update(over)
    if vocab_size is not None:
        d["vocab_size"] = vocab_size
    cfg = GPTConfig.from_dict(d)
    if batch < 1:
        raise ConfigError(f"batch_size={batch} must be a positive integer")
    from ..memory import check_fits

    check_fits(
        cfg,
        batch_size=batch,
        seq_len=cfg.block_size,
        itemsize=4,
        backend="torch",
        what="n_embd, n_layer, block_size or batch_size in --config",
    )
    return cfg, batch


def make_batches(cfg, batch: int, n: int, data: str | None = None, seed: int = 0) -> list:
    """n batches (x, y) of int64 ids (B, T): random tokens, or windows of a text file."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if data is not None:
        from ..data import load_text

        task = load_text(data)
        task.check_block_size(cfg.block_size)
        return [task.batch("train", batch, rng, cfg.block_size) for _ in range(n)]
    out = []
    for _ in range(n):
        seq = rng.integers(0, cfg.vocab_size, size=(batch, cfg.block_size + 1), dtype=np.int64)
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out


def data_vocab(data: str | None) -> int | None:
    if data is None:
        return None
    from ..data import load_text

    return load_text(data).vocab_size


# --------------------------------------------------------------------------- threads
def set_threads(threads: int) -> dict:
    """torch intra-op threads = threads; BLAS (OpenBLAS) and OpenMP pools = threads; the NumPy
    backend splits its batch across `threads` Python threads with BLAS at 1 inside. glibc's malloc
    keeps the memory a step frees (`qed.cpu.tune_malloc`, as `qed train` does), for every row
    alike. Returns what each library reports."""
    import torch

    from ..cpu import tune_malloc

    torch.set_num_threads(threads)
    info = {"threads": threads, "torch_threads": torch.get_num_threads(), "pools": [], "malloc_tuned": tune_malloc()}
    try:
        from threadpoolctl import threadpool_info, threadpool_limits

        threadpool_limits(limits=threads)
        for p in threadpool_info():
            info["pools"].append(
                {
                    "library": p.get("internal_api"),
                    "version": p.get("version"),
                    "num_threads": p.get("num_threads"),
                    "file": os.path.basename(p.get("filepath", "")),
                }
            )
    except ImportError:  # pragma: no cover - a dependency
        info["pools"].append({"library": "threadpoolctl missing", "num_threads": None})
    return info


def machine() -> dict:
    """What a figure was measured on: CPU model, SIMD level (and the level torch's kernels were
    dispatched to), CPU count, library versions, load."""
    import numpy as np
    import torch

    from ..cpu import cpu_model, simd_level

    return {
        "cpu": cpu_model(),
        "simd": simd_level(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpus": cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "loadavg": _loadavg(),
    }


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return None


# --------------------------------------------------------------------------- implementations
def build_impl(name: str, cfg, threads: int, seed: int = 0, parallel: str = NUMPY_PARALLEL):
    """The runner (qed/runner.py) of one row: float32, AdamW with `HP`, no gradient clipping."""
    from ..runner import build_runner

    if name == "numpy":
        return build_runner(cfg, "numpy", "float32", seed=seed, threads=threads, parallel=parallel, optimizer=HP)
    if name in ("torch-gen", COMPILED):
        return build_runner(cfg, "torch", "float32", seed=seed, compile=name == COMPILED, optimizer=HP)
    if name in ("eager", COMPILED_REF):
        from .reference import ReferenceRunner

        return ReferenceRunner(cfg, seed=seed, optimizer=HP, compile=name == COMPILED_REF)
    raise ValueError(f"unknown implementation {name!r}: choose one of {', '.join(IMPLS + COMPILED_ROWS)}")


def build_impls(names, cfg, threads: int, parallel: str = NUMPY_PARALLEL) -> dict:
    return {name: build_impl(name, cfg, threads, parallel=parallel) for name in names}


def compile_first(runner, x, y) -> float:
    """torch-compiled: compile now, on one throwaway step, then put the weights and AdamW's
    state back to where they started (so every implementation trains the same steps); the
    seconds it took."""
    t0 = time.perf_counter()
    runner.step(x, y)
    seconds = time.perf_counter() - t0
    runner.restart()
    return seconds


def compile_rows(impls: dict, batches: list, result: dict) -> None:
    """Compile the rows (b′) and (c′) in `impls` on one throwaway step each; a row whose compile
    fails is left out, its error in `result["compile_errors"]`, the seconds in
    `result["compile_seconds_by_row"]`."""
    for name in [n for n in COMPILED_ROWS if n in impls]:
        tag = SHORT[name].split()[0]
        _log(f"qed bench: compiling {tag} (torch.compile, inductor) ...")
        try:
            result.setdefault("compile_seconds_by_row", {})[name] = compile_first(impls[name], *batches[0])
        except Exception as e:  # no C++ compiler, an unsupported platform, ...
            error = f"{type(e).__name__}: {e}"[:2000]
            result.setdefault("compile_errors", {})[name] = error
            _log(f"qed bench: torch.compile failed, row {tag} left out: {error[:300]}")
            impls.pop(name).close()
        else:
            _log(f"qed bench: compiled in {result['compile_seconds_by_row'][name]:.1f} s")


def close_all(impls: dict) -> None:
    """Stop the NumPy backend's worker processes, if any."""
    for runner in impls.values():
        runner.close()


def summarize(times: list[float]) -> dict:
    ts = sorted(times)
    q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) >= 2 else (ts[0],) * 3
    return {
        "median_ms": 1e3 * statistics.median(ts),
        "min_ms": 1e3 * ts[0],
        "max_ms": 1e3 * ts[-1],
        "iqr_ms": [1e3 * q1, 1e3 * q3],
        "steps": len(ts),
    }


def time_interleaved(impls: list, batches: list, warmup: int, steps: int, progress: bool = True) -> dict:
    """Median-friendly timings: `warmup` untimed rounds, then `steps` rounds of one step of
    each implementation ({name: runner}) in turn, all on the same batch per round."""
    times = {name: [] for name in impls}
    losses = {name: [] for name in impls}
    for r in range(warmup + steps):
        x, y = batches[r % len(batches)]
        last = []
        for name, runner in impls.items():
            for _ in range(SETTLE_STEPS):  # untimed: this one's threads in their stride
                runner.step(x, y)
            t0 = time.perf_counter()
            loss = runner.step(x, y)
            dt = time.perf_counter() - t0
            last.append(dt)
            if r >= warmup:
                times[name].append(dt)
            losses[name].append(float(loss))
        if progress:
            _log(
                f"  round {r + 1}/{warmup + steps}"
                + ("" if r >= warmup else " (warm-up)")
                + ": "
                + ", ".join(f"{name} {1e3 * t:.0f} ms" for name, t in zip(impls, last))
            )
    return {"times": times, "losses": losses}


# --------------------------------------------------------------------------- FLOPs and matmul rate
def model_flops(cfg, batch: int) -> dict:
    """Dense model FLOPs of one training step (see the module docstring)."""
    from ..params import param_shapes

    shapes = param_shapes(cfg)
    n_matmul = sum(
        math.prod(s)
        for k, s in shapes.items()  # every linear weight ...
        if len(s) == 2 and k not in ("wte.weight", "wpe.weight", "lm_head.weight")
    )
    n_matmul += cfg.vocab_size * cfg.n_embd  # ... and the lm_head (tied or not)
    tokens = batch * cfg.block_size
    attn = 12 * cfg.n_layer * cfg.block_size * cfg.n_embd * tokens
    dense = 6 * n_matmul * tokens
    return {
        "params": int(sum(math.prod(s) for s in shapes.values())),
        "matmul_params": int(n_matmul),
        "tokens": tokens,
        "flops": int(dense + attn),
        "flops_matmul": int(dense),
        "flops_attention": int(attn),
    }


def matmul_rate(cfg, batch: int, threads: int, repeats: int = 20) -> dict:
    """Measured float32 GFLOP/s of (B·T, C) @ (C, 4C), the MLP's matmul, in NumPy (BLAS at
    `threads` threads) and in torch; the best of `repeats`."""
    import numpy as np
    import torch

    M, K, N = batch * cfg.block_size, cfg.n_embd, 4 * cfg.n_embd
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    out = {}
    for lib, fn in (
        ("numpy", lambda: a @ b),
        ("torch", (lambda ta, tb: lambda: ta @ tb)(torch.from_numpy(a), torch.from_numpy(b))),
    ):
        fn()
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[lib] = 2 * M * K * N / best / 1e9
    return {
        "shape": [M, K, N],
        "gflops": out,
        "peak_gflops": max(out.values()),
        "method": f"best of {repeats}: float32 ({M}×{K}) @ ({K}×{N})",
    }


# --------------------------------------------------------------------------- memory (subprocess)
def _read_status() -> dict:
    out = {}
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def probe(spec: dict) -> dict:
    """Run in a fresh process: build one implementation, reset the peak-RSS counter, run the
    steps, report peak memory and the step times."""
    threads = int(spec["threads"])
    set_threads(threads)
    from ..config import GPTConfig

    cfg = GPTConfig.from_dict(spec["config"])
    batches = make_batches(cfg, spec["batch"], max(1, spec["steps"]), spec.get("data"), seed=0)
    runner = build_impl(spec["impl"], cfg, threads, parallel=spec.get("parallel", NUMPY_PARALLEL))
    if spec["impl"] in COMPILED_ROWS:
        compile_first(runner, *batches[0])  # compile before the peak reset
    reset = _reset_peak()
    before = _read_status().get("VmRSS", 0)
    times = []
    for r in range(spec["steps"]):
        x, y = batches[r % len(batches)]
        t0 = time.perf_counter()
        runner.step(x, y)
        times.append(time.perf_counter() - t0)
    st = _read_status()
    workers = runner.worker_peak_bytes()  # worker processes: their whole peak counts
    runner.close()
    if reset and "VmHWM" in st:
        peak, method = st["VmHWM"], "VmHWM after resetting it (/proc/self/clear_refs = 5) once the model was built"
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        method = "ru_maxrss (peak since the process started, imports included)"
    if workers:
        peak += workers
        method += " + the worker processes' VmHWM"
    return {
        "impl": spec["impl"],
        "peak_rss_mb": peak / 2**20,
        "baseline_rss_mb": before / 2**20,
        "step_mb": max(0.0, (peak - before) / 2**20),
        "method": method,
        "times": times,
        "summary": summarize(times[spec.get("skip", 1) :] or times),
    }


def run_probe(spec: dict, timeout: float = 1800) -> dict:
    env = dict(os.environ)
    root = str(ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", "qed.tools.bench", "--probe", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=root,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory probe of {spec['impl']} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- proofs and codegen
def timed_command(args: list[str], timeout: float = 3600) -> dict:
    root = str(ROOT)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=root
        )
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = None
    return {"command": "python " + " ".join(args), "seconds": time.perf_counter() - t0, "returncode": rc}


# --------------------------------------------------------------------------- the benchmark
def bench(
    overrides: dict | None = None,
    *,
    data: str | None = None,
    steps: int = 20,
    warmup: int = 3,
    threads: int | None = None,
    proofs: bool = True,
    codegen: bool = True,
    memory: bool = True,
    progress: bool = True,
    parallel: str = NUMPY_PARALLEL,
    compile: bool = True,
) -> dict:
    """The side-by-side benchmark at one config; a JSON-able dict. `compile`: also time the
    generated-PyTorch backend under torch.compile (a fourth row, after its compilation)."""
    threads = threads or cpu_count()
    cfg, batch = build_config(overrides or {}, data_vocab(data))
    result: dict = {
        "config": cfg.to_dict(),
        "batch_size": batch,
        "dtype": "float32",
        "data": data or "random tokens",
        "steps": steps,
        "warmup": warmup,
        "settle_steps": SETTLE_STEPS,
        "step": "forward + loss + backward + AdamW (lr 1e-3, betas (0.9, 0.95), wd 0.1 on matrices)",
    }
    result["threads"] = set_threads(threads)
    result["threads"]["numpy_parallel"] = parallel
    result["machine"] = machine()
    if proofs:
        _log("qed bench: timing `python -m qed prove` ...")
        result["prove"] = timed_command(["-m", "qed", "prove"])
    if codegen:
        _log("qed bench: timing `python -m codegen --check` ...")
        result["codegen_check"] = timed_command(["-m", "codegen", "--check"])
    set_threads(threads)
    result["flops"] = model_flops(cfg, batch)
    result["matmul"] = matmul_rate(cfg, batch, threads)
    batches = make_batches(cfg, batch, warmup + steps, data)
    _log(
        f"qed bench: {cfg.n_layer} layers, {cfg.n_head} heads, n_embd {cfg.n_embd}, block {cfg.block_size}, "
        f"batch {batch}, {threads} threads: {warmup} warm-up + {steps} interleaved rounds ..."
    )
    names = IMPLS[:2] + ((COMPILED,) if compile else ()) + IMPLS[2:] + ((COMPILED_REF,) if compile else ())
    impls = build_impls(names, cfg, threads, parallel=parallel)
    try:
        compile_rows(impls, batches, result)
        if COMPILED in result.get("compile_seconds_by_row", {}):  # the keys of earlier results
            result["compile_seconds"] = result["compile_seconds_by_row"][COMPILED]
        if COMPILED in result.get("compile_errors", {}):
            result["compile_error"] = result["compile_errors"][COMPILED]
        names = tuple(impls)
        result["impls"] = list(names)
        timed = time_interleaved(impls, batches, warmup, steps, progress)
    finally:
        close_all(impls)
    result["machine"]["loadavg_after"] = _loadavg()
    rows = {}
    ref = statistics.median(timed["times"]["eager"])
    for name in names:
        s = summarize(timed["times"][name])
        med = s["median_ms"] / 1e3
        s.update(
            label=LABELS[name],
            ratio_to_eager=statistics.median(timed["times"][name]) / ref,
            tokens_per_s=result["flops"]["tokens"] / med,
            gflops=result["flops"]["flops"] / med / 1e9,
            fraction_of_matmul_peak=result["flops"]["flops"] / med / 1e9 / result["matmul"]["peak_gflops"],
            first_loss=timed["losses"][name][0],
            last_loss=timed["losses"][name][-1],
        )
        rows[name] = s
    result["results"] = rows
    if memory:
        _log("qed bench: peak memory, one fresh process per implementation ...")
        for name in names:
            m = run_probe(
                {
                    "impl": name,
                    "config": cfg.to_dict(),
                    "batch": batch,
                    "threads": threads,
                    "steps": 3,
                    "data": data,
                    "parallel": parallel,
                }
            )
            rows[name]["memory"] = {k: m[k] for k in ("peak_rss_mb", "baseline_rss_mb", "step_mb", "method")}
    return result


def memory_comparison(
    overrides: dict | None = None,
    *,
    T: int = MEMORY_T,
    batch: int = MEMORY_BATCH,
    threads: int | None = None,
    steps: int = 3,
    data: str | None = None,
    parallel: str = NUMPY_PARALLEL,
) -> dict:
    """Peak memory and step time of attention vs attention_lse at block size T, for both
    generated backends (a fresh process each: one peak-RSS counter per process)."""
    threads = threads or cpu_count()
    over = dict(overrides or {})
    over.setdefault("block_size", T)
    over.setdefault("batch_size", batch)
    out = {"T": over["block_size"], "batch_size": over["batch_size"], "threads": threads, "steps": steps, "rows": []}
    for backend in ("numpy", "torch-gen"):
        pair = {}
        for attn in ("attention", "attention_lse"):
            cfg, b = build_config(dict(over, attention=attn), data_vocab(data))
            _log(f"qed bench --memory: {backend} {attn} T={cfg.block_size} batch {b} ...")
            m = run_probe(
                {
                    "impl": backend,
                    "config": cfg.to_dict(),
                    "batch": b,
                    "threads": threads,
                    "steps": steps + 1,
                    "data": data,
                    "skip": 1,
                    "parallel": parallel,
                }
            )
            pair[attn] = m
        a, l = pair["attention"], pair["attention_lse"]
        # what the standard op keeps and the lse op does not: n_layer · B · heads · T² weights
        cfg, b = build_config(over, data_vocab(data))
        att_bytes = cfg.n_layer * b * cfg.n_head * cfg.block_size**2 * 4
        out["rows"].append(
            {
                "backend": backend,
                "attention_peak_mb": a["peak_rss_mb"],
                "lse_peak_mb": l["peak_rss_mb"],
                "attention_step_mb": a["step_mb"],
                "lse_step_mb": l["step_mb"],
                "saving_mb": a["peak_rss_mb"] - l["peak_rss_mb"],
                "saving_fraction_of_step": (a["step_mb"] - l["step_mb"]) / a["step_mb"] if a["step_mb"] else None,
                "saved_weights_mb": att_bytes / 2**20,
                "attention_median_ms": a["summary"]["median_ms"],
                "lse_median_ms": l["summary"]["median_ms"],
                "time_cost": l["summary"]["median_ms"] / a["summary"]["median_ms"] - 1.0,
                "method": a["method"],
            }
        )
    return out


def sweep(
    overrides: dict | None = None,
    *,
    out_png: str = SWEEP_FIGURE,
    Ts=SWEEP_T,
    Cs=SWEEP_C,
    steps: int = 5,
    warmup: int = 2,
    threads: int | None = None,
    progress: bool = False,
    parallel: str = NUMPY_PARALLEL,
    compile: bool = True,
) -> dict:
    """Step time as T doubles (n_embd fixed) and as n_embd doubles (T fixed), every row
    interleaved at each point (with `compile`, the rows (b′) and (c′) too, each compiled afresh
    at the point's shapes); a PNG of both; fitted growth exponents per row."""
    threads = threads or cpu_count()
    set_threads(threads)
    base, batch = build_config(overrides or {})
    points = []
    for axis, values in (("block_size", Ts), ("n_embd", Cs)):
        for val in values:
            over = dict(base.to_dict(), batch_size=batch)
            over[axis] = val
            if axis == "n_embd" and val % over["n_head"]:
                over["n_head"] = 1
            cfg, b = build_config(over)
            _log(f"qed bench --sweep: {axis} = {val} ...")
            names = IMPLS[:2] + ((COMPILED,) if compile else ()) + IMPLS[2:] + ((COMPILED_REF,) if compile else ())
            impls = build_impls(names, cfg, threads, parallel=parallel)
            batches = make_batches(cfg, b, warmup + steps)
            row = {"axis": axis, "value": val}
            try:
                compile_rows(impls, batches, row)
                timed = time_interleaved(impls, batches, warmup, steps, progress)
            finally:
                close_all(impls)
            for name in impls:
                row[name] = summarize(timed["times"][name])["median_ms"]
            row["ratios"] = {name: row[name] / row["eager"] for name in impls}
            points.append(row)
    import numpy as np

    growth = {}
    for axis in ("block_size", "n_embd"):
        pts = [p for p in points if p["axis"] == axis]
        xs = np.log2([p["value"] for p in pts])
        growth[axis] = {}
        for name in [n for n in names if all(n in p for p in pts)]:
            ys = np.log2([p[name] for p in pts])
            slope_all = float(np.polyfit(xs, ys, 1)[0]) if len(pts) >= 2 else None
            slope_last = float((ys[-1] - ys[-2]) / (xs[-1] - xs[-2])) if len(pts) >= 2 else None
            growth[axis][name] = {
                "exponent_fit": slope_all,
                "exponent_last_doubling": slope_last,
                "per_doubling_last": 2**slope_last if slope_last is not None else None,
            }
    result = {
        "base": base.to_dict(),
        "batch_size": batch,
        "threads": threads,
        "steps": steps,
        "points": points,
        "growth": growth,
        "figure": out_png,
    }
    plot_sweep(result, out_png)
    return result


def plot_sweep(result: dict, out_png: str) -> str:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = {"block_size": "block size T (n_embd {n_embd})", "n_embd": "n_embd (T {block_size})"}
    for ax, axis in zip(axes, ("block_size", "n_embd")):
        pts = [p for p in result["points"] if p["axis"] == axis]
        for name, style in zip(
            IMPLS[:2] + COMPILED_ROWS[:1] + IMPLS[2:] + COMPILED_ROWS[1:], ("o-", "s-", "s:", "^--", "^:")
        ):
            if not all(name in p for p in pts):
                continue
            ax.plot([p["value"] for p in pts], [p[name] for p in pts], style, label=SHORT[name])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(names[axis].format(**result["base"]))
        ax.set_ylabel("median step time (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    b = result["base"]
    fig.suptitle(
        f"qed bench --sweep: {b['n_layer']} layers, batch {result['batch_size']}, {result['threads']} threads, float32",
        fontsize=9,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    fig.savefig(out_png, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return out_png


# --------------------------------------------------------------------------- printing
def _fmt_mb(x):
    return "—" if x is None else f"{x:,.0f}"


def render(result: dict, console=None) -> None:
    """The rich table(s) of a `bench`/`memory_comparison`/`sweep` result, on stdout."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console(width=max(132, Console().width))
    if "results" in result:
        cfg, fl, mm = result["config"], result["flops"], result["matmul"]
        th = result["threads"]
        pools = ", ".join(
            f"{p['library']} {p.get('version') or ''} {p['num_threads']} threads".replace("  ", " ")
            for p in th["pools"]
        )
        con.print(
            f"[bold]qed bench[/bold] — {cfg['n_layer']} layers, {cfg['n_head']} heads, n_embd {cfg['n_embd']}, "
            f"block {cfg['block_size']}, vocab {cfg['vocab_size']}, batch {result['batch_size']}, "
            f"{result['dtype']}, data: {result['data']}"
        )
        how = {"processes": "this process and {} worker process(es)", "threads": "{} more Python thread(s)"}
        par = th.get("numpy_parallel", "threads")
        con.print(
            f"threads: torch.set_num_threads({th['torch_threads']}); {pools}; NumPy backend: the batch in "
            f"{th['threads']} slices, run by "
            + how[par].format(th["threads"] - 1)
            + ", BLAS at 1 thread in each"
            + ("; glibc malloc keeps freed memory (every row)" if th.get("malloc_tuned") else "")
        )
        m = result["machine"]
        con.print(
            f"machine: {m['cpu']} ({m.get('simd', '?')}; torch kernels {m.get('torch_cpu_capability', '?')}), "
            f"{m['cpus']} CPUs; load average {m['loadavg']} before, "
            f"{m.get('loadavg_after')} after; numpy {m['numpy']}, torch {m['torch']}"
        )
        con.print(
            f"step: {result['step']}; {result['warmup']} warm-up + {result['steps']} interleaved rounds "
            f"(each timed step after {result.get('settle_steps', 0)} untimed step(s) of the same implementation)"
        )
        con.print(
            f"model: {fl['params']:,} parameters ({fl['matmul_params']:,} in matmuls); "
            f"{fl['flops'] / 1e9:.2f} GFLOP per step = 6·N·tokens {fl['flops_matmul'] / 1e9:.2f} + attention "
            f"{fl['flops_attention'] / 1e9:.2f} ({fl['tokens']} tokens)"
        )
        con.print(
            f"matmul rate: {mm['method']}: NumPy {mm['gflops']['numpy']:.0f}, torch {mm['gflops']['torch']:.0f} GFLOP/s"
        )
        t = Table(title="training step, float32 (ratios: median step time / eager's)")
        for col, just in (
            ("implementation", "left"),
            ("median ms", "right"),
            ("min–max ms", "right"),
            ("IQR ms", "right"),
            ("tokens/s", "right"),
            ("GFLOP/s (% matmul)", "right"),
            ("peak RSS MB (step)", "right"),
            ("ratio to (c)", "right"),
        ):
            t.add_column(col, justify=just)
        names = result.get("impls", IMPLS)
        for name in names:
            r = result["results"][name]
            mem = r.get("memory")
            t.add_row(
                SHORT[name],
                f"{r['median_ms']:.1f}",
                f"{r['min_ms']:.1f}–{r['max_ms']:.1f}",
                f"{r['iqr_ms'][0]:.1f}–{r['iqr_ms'][1]:.1f}",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['gflops']:.1f} ({100 * r['fraction_of_matmul_peak']:.0f}%)",
                "—" if mem is None else f"{_fmt_mb(mem['peak_rss_mb'])} ({_fmt_mb(mem['step_mb'])})",
                f"{r['ratio_to_eager']:.2f}",
            )
        con.print(t)
        con.print("; ".join(LABELS[n] for n in names))
        for name, seconds in result.get("compile_seconds_by_row", {}).items():
            con.print(f"{SHORT[name].split()[0]} compile: {seconds:.1f} s, on one throwaway step before the warm-up")
        for name, error in result.get("compile_errors", {}).items():
            con.print(f"{SHORT[name].split()[0]} left out: torch.compile failed: {error[:300]}")
        if any("memory" in r for r in result["results"].values()):
            con.print(
                "peak memory: "
                + next(r["memory"]["method"] for r in result["results"].values() if "memory" in r)
                + "; (step) = peak − RSS before the first step"
            )
        for key, what in (("prove", "proof suite"), ("codegen_check", "codegen --check")):
            if key in result:
                p = result[key]
                con.print(f"{what}: `{p['command']}` {p['seconds']:.1f} s (exit {p['returncode']})")
    if "memory_comparison" in result:
        mc = result["memory_comparison"]
        t = Table(
            title=f"attention vs attention_lse at T = {mc['T']}, batch {mc['batch_size']} "
            f"(peak RSS, fresh process each)"
        )
        for col in (
            "backend",
            "attention peak MB (step)",
            "attention_lse peak MB (step)",
            "saving MB",
            "T×T weights kept MB",
            "attention ms",
            "attention_lse ms",
            "time cost",
        ):
            t.add_column(col, justify="left" if col == "backend" else "right")
        for r in mc["rows"]:
            t.add_row(
                r["backend"],
                f"{r['attention_peak_mb']:,.0f} ({r['attention_step_mb']:,.0f})",
                f"{r['lse_peak_mb']:,.0f} ({r['lse_step_mb']:,.0f})",
                f"{r['saving_mb']:,.0f}",
                f"{r['saved_weights_mb']:,.0f}",
                f"{r['attention_median_ms']:,.0f}",
                f"{r['lse_median_ms']:,.0f}",
                f"{100 * r['time_cost']:+.0f}%",
            )
        con.print(t)
    if "sweep" in result:
        sw = result["sweep"]
        for axis in ("block_size", "n_embd"):
            t = Table(title=f"sweep over {axis} (median ms per step; ratio to eager)")
            t.add_column(axis, justify="right")
            g = sw["growth"][axis]
            rows = list(g)  # the rows timed at every point
            for name in rows:
                t.add_column(SHORT[name], justify="right")
            for p in sw["points"]:
                if p["axis"] == axis:
                    t.add_row(str(p["value"]), *[f"{p[n]:.1f} ({p['ratios'][n]:.2f})" for n in rows])
            t.caption = "growth exponent (time ∝ size^k), fit over all points / last doubling: " + ", ".join(
                f"{SHORT[n]} {g[n]['exponent_fit']:.2f}/{g[n]['exponent_last_doubling']:.2f}" for n in rows
            )
            con.print(t)
        con.print(f"figure: {sw['figure']}")


# --------------------------------------------------------------------------- command line
def run_cli(args, sections=()) -> int:
    """`sections`: more parts of the result, as (key, compute(overrides, args), render(part)),
    e.g. `--nproc`'s (qed/tools/bench_distributed.py)."""
    overrides = parse_config(args.config)
    progress = True
    result: dict = {}
    if not (args.only_extra and (args.memory or args.sweep or sections)):
        result.update(
            bench(
                overrides,
                data=args.data,
                steps=args.steps,
                warmup=args.warmup,
                threads=args.threads,
                proofs=not args.no_proofs,
                codegen=not args.no_codegen,
                memory=not args.no_peak_memory,
                progress=progress,
                parallel=args.numpy_parallel,
                compile=not args.no_compile,
            )
        )
    if args.memory:
        over = {k: v for k, v in overrides.items() if k != "block_size"}
        result["memory_comparison"] = memory_comparison(
            over, T=args.memory_T, threads=args.threads, data=args.data, parallel=args.numpy_parallel
        )
    if args.sweep:
        result["sweep"] = sweep(
            overrides,
            out_png=args.sweep,
            threads=args.threads,
            steps=args.sweep_steps,
            Ts=args.sweep_T,
            Cs=args.sweep_embd,
            parallel=args.numpy_parallel,
            compile=not args.no_compile,
        )
    for key, compute, _ in sections:
        result[key] = compute(overrides, args)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True, default=_json_default) + "\n")
    else:
        render(result)
        for key, _, show in sections:
            show(result[key])
    return 0


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        res = probe(json.loads(sys.argv[2]))
        sys.stdout.write(json.dumps(res, default=_json_default) + "\n")
        sys.exit(0)
    sys.exit("usage: python -m qed bench (this module's own entry point is for its memory probes)")

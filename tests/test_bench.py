"""`qed bench` runs at a tiny size and prints valid JSON: the expected keys, the FLOPs of the config
counted by hand, and derived columns (tokens/s, GFLOP/s, ratios) consistent with the medians.

No timing is asserted: benchmarks are measured side by side by `qed bench`, not by tests
(DESIGN.md). The attention_lse kernel is checked with every other op by tests/test_kernels.py
(registry-parametrized) and inside the GPT by tests/test_model_equivalence.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "n_layer=1,n_head=2,n_embd=8,block_size=8,batch_size=2"
IMPLS = ("numpy", "torch-gen", "eager")


def qed_bench(*args: str, timeout: int = 600) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "qed",
            "bench",
            "--config",
            TINY,
            "--threads",
            "1",
            "--no-proofs",
            "--no-compile",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)  # the whole of stdout is one JSON document


def test_bench_json():
    out = qed_bench("--steps", "2", "--warmup", "1")
    for key in ("config", "batch_size", "threads", "machine", "flops", "matmul", "results", "codegen_check"):
        assert key in out, key
    assert out["config"]["n_embd"] == 8 and out["batch_size"] == 2
    assert out["codegen_check"]["returncode"] == 0
    # what the figures were measured on, so that runs on different kinds of machine can be read
    # side by side
    from qed.cpu import SIMD_LEVELS, cpu_count

    m = out["machine"]
    assert m["cpu"] and m["cpus"] == cpu_count()
    assert m["simd"] in {name for _, name in SIMD_LEVELS} | {"unknown"}
    assert m["torch_cpu_capability"]
    # the FLOPs of the tiny config, counted here by hand: per layer the four linear weights hold
    # 3C² + C² + 4C² + 4C² = 12C² = 768 multiply-adds per token, the lm_head V·C = 65·8 = 520;
    # 6 FLOPs per weight and token (forward 2, backward 4) over B·T = 16 tokens; attention
    # 12·L·T·C per token (QKᵀ and AV, forward and backward)
    assert out["config"]["vocab_size"] == 65
    assert out["flops"] == {
        "params": 1472,
        "matmul_params": 1288,
        "tokens": 16,
        "flops_matmul": 6 * 1288 * 16,
        "flops_attention": 12 * 1 * 8 * 8 * 16,
        "flops": 6 * 1288 * 16 + 12 * 8 * 8 * 16,
    }
    assert set(out["results"]) == set(IMPLS) and out["impls"] == list(IMPLS)  # --no-compile: no row (b′)
    for name in IMPLS:
        r = out["results"][name]
        for key in ("median_ms", "min_ms", "max_ms", "iqr_ms", "tokens_per_s", "gflops", "ratio_to_eager", "memory"):
            assert key in r, (name, key)
        assert r["steps"] == 2 and r["min_ms"] <= r["median_ms"] <= r["max_ms"]
        assert r["memory"]["peak_rss_mb"] > 0 and "method" in r["memory"]
        # the derived columns are what the median says
        assert r["tokens_per_s"] == pytest.approx(16 / (r["median_ms"] / 1e3), rel=1e-9)
        assert r["gflops"] == pytest.approx(out["flops"]["flops"] / (r["median_ms"] / 1e3) / 1e9, rel=1e-9)
        assert r["ratio_to_eager"] == pytest.approx(r["median_ms"] / out["results"]["eager"]["median_ms"], rel=1e-9)
        assert r["fraction_of_matmul_peak"] == pytest.approx(r["gflops"] / out["matmul"]["peak_gflops"], rel=1e-9)


@pytest.mark.slow  # two more bench runs (a minute on 2 cores); the JSON's keys are checked above
def test_bench_numpy_worker_processes():
    """With two slices the NumPy backend's second runs in a worker process, whose peak memory
    is counted with the probe's own."""
    out = qed_bench("--steps", "1", "--warmup", "0", "--no-codegen", "--threads", "2")
    assert out["threads"]["numpy_parallel"] == "processes"
    assert "worker processes" in out["results"]["numpy"]["memory"]["method"]
    assert "worker processes" not in out["results"]["eager"]["memory"]["method"]
    threads = qed_bench(
        "--steps",
        "1",
        "--warmup",
        "0",
        "--no-codegen",
        "--no-peak-memory",
        "--threads",
        "2",
        "--numpy-parallel",
        "threads",
    )
    assert threads["threads"]["numpy_parallel"] == "threads"


@pytest.mark.slow  # a memory probe and a sweep (40 s on 2 cores)
def test_bench_memory_and_sweep(tmp_path):
    png = tmp_path / "sweep.png"
    out = qed_bench(
        "--only-extra",
        "--memory",
        "--memory-T",
        "16",
        "--sweep",
        str(png),
        "--sweep-T",
        "4,8",
        "--sweep-embd",
        "8,16",
        "--sweep-steps",
        "1",
        "--no-compile",
    )
    assert "results" not in out
    rows = out["memory_comparison"]["rows"]
    assert [r["backend"] for r in rows] == ["numpy", "torch-gen"]
    for r in rows:
        for key in (
            "attention_peak_mb",
            "lse_peak_mb",
            "saving_mb",
            "attention_median_ms",
            "lse_median_ms",
            "time_cost",
            "saved_weights_mb",
        ):
            assert key in r, key
    sw = out["sweep"]
    assert [(p["axis"], p["value"]) for p in sw["points"]] == [
        ("block_size", 4),
        ("block_size", 8),
        ("n_embd", 8),
        ("n_embd", 16),
    ]
    assert set(sw["growth"]) == {"block_size", "n_embd"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_compiled_row():
    """Rows (b′) and (c′): the generated-PyTorch backend and the torch.nn reference under the same
    torch.compile, each compiled before the timing, each training from the same weights."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "qed",
            "bench",
            "--config",
            TINY,
            "--threads",
            "1",
            "--no-proofs",
            "--no-codegen",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["impls"] == ["numpy", "torch-gen", "torch-compiled", "eager", "eager-compiled"]
    assert out["compile_seconds"] > 0 and "compile_errors" not in out
    assert set(out["compile_seconds_by_row"]) == {"torch-compiled", "eager-compiled"}
    for name, twin in (("torch-compiled", "torch-gen"), ("eager-compiled", "eager")):
        r = out["results"][name]
        assert r["steps"] == 2 and r["memory"]["peak_rss_mb"] > 0
        assert r["first_loss"] == pytest.approx(out["results"][twin]["first_loss"], rel=1e-4)


def test_config_parsing():
    from qed.errors import QedError
    from qed.tools.bench import build_config, parse_config

    assert parse_config('{"n_embd": 16, "batch_size": 3}') == {"n_embd": 16, "batch_size": 3}
    assert parse_config("n_embd=16, ffn=relu bias=false") == {"n_embd": 16, "ffn": "relu", "bias": False}
    cfg, batch = build_config({"n_embd": 16, "batch_size": 3})
    assert (cfg.n_embd, cfg.n_layer, batch) == (16, 4, 3)
    with pytest.raises(QedError):
        parse_config("n_embd")
    with pytest.raises(QedError):
        build_config({"n_embd": 10, "n_head": 4})

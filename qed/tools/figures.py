"""`make figures` (`python -m qed.tools.figures`): the PNGs under docs/figures/, shown in docs/figures.md.

* `saturation.png` — the experiment behind seed A §1.B (`derivations.variance.saturation_table`):
  softmax Jacobian and gradient norms against d_k with and without 1/√d_k, beside the proved law
  Var(q·k) = d_k (and a seeded sample of it);
* `training.png` — loss, held-out accuracy and learning rate of a training run (metrics.jsonl);
* `attention.png` — the attention weights of every head of the trained model on one held-out
  example, read from the generated attention kernel's cache (`att`);
* `bench.png` — the benchmark sweep, drawn by `bench()` from a results file once a benchmark
  writes one (a hook: skipped until then).

A figure whose input is missing (no run, no benchmark results) is skipped with a message; the
others are still drawn. Output is deterministic for the same inputs (seeded, no timestamps).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import ROOT

OUT = ROOT / "docs" / "figures"
RUNS = ROOT / "runs"
BENCH_RESULTS = RUNS / "bench" / "results.json"
PNG_META = {"Software": None}  # no matplotlib version in the file: same bytes for the same figure


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "font.size": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "svg.hashsalt": "qed",
        }
    )
    return plt


def _save(fig, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, metadata=PNG_META)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


# ------------------------------------------------------------------------------ (a) saturation
def variance_sample(dims, samples: int = 20000, seed: int = 0) -> dict:
    """Seeded sample variance of q·k and q·k/√d_k, q, k with i.i.d. N(0, 1) components."""
    rng = np.random.default_rng(seed)
    out = {"d_k": list(dims), "var_unscaled": [], "var_scaled": []}
    for d in dims:
        dots = np.empty(samples)
        for start in range(0, samples, 2000):  # bounded memory at d_k = 1024
            q = rng.standard_normal((2000, d))
            k = rng.standard_normal((2000, d))
            dots[start : start + 2000] = np.einsum("nd,nd->n", q, k)
        out["var_unscaled"].append(float(dots.var()))
        out["var_scaled"].append(float((dots / np.sqrt(d)).var()))
    return out


def saturation(out: Path = OUT / "saturation.png") -> Path:
    from derivations.variance import saturation_table

    plt = _plt()
    t = saturation_table()
    d = np.array(t["d_k"], dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(d, t["jacobian_unscaled"], "o-", color="tab:red", label=r"$\|J\|_F$, logits $q\cdot k$")
    ax1.plot(d, t["jacobian_scaled"], "o-", color="tab:blue", label=r"$\|J\|_F$, logits $q\cdot k/\sqrt{d_k}$")
    ax1.plot(d, t["grad_unscaled"], "s--", color="tab:red", alpha=0.7, label=r"$\|\partial L/\partial S\|$, unscaled")
    ax1.plot(d, t["grad_scaled"], "s--", color="tab:blue", alpha=0.7, label=r"$\|\partial L/\partial S\|$, scaled")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel(r"$d_k$")
    ax1.set_ylabel("mean norm")
    ax1.set_ylim(bottom=0)
    ax1.set_title(
        f"Softmax saturates without $1/\\sqrt{{d_k}}$\n(one query, {t['n_keys'][0]} keys, "
        f"{t['trials'][0]} trials per $d_k$, seed {t['seed'][0]}: evidence, not proof)"
    )
    ax1.legend(fontsize=7.5, loc="lower left")

    v = variance_sample(t["d_k"])
    ax2.plot(d, d, "-", color="tab:red", label=r"proved: $\mathrm{Var}(q\cdot k) = d_k$")
    ax2.plot(d, np.ones_like(d), "-", color="tab:blue", label=r"proved: $\mathrm{Var}(q\cdot k/\sqrt{d_k}) = 1$")
    ax2.plot(d, v["var_unscaled"], "o", color="tab:red", label="sample variance, unscaled")
    ax2.plot(d, v["var_scaled"], "o", color="tab:blue", label="sample variance, scaled")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log", base=2)
    ax2.set_xlabel(r"$d_k$")
    ax2.set_ylabel("variance of the logit")
    ax2.set_title("The variance law (proved for symbolic $d_k$)\nand 20,000 seeded Gaussian samples per $d_k$")
    ax2.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    return _save(fig, out)


# ------------------------------------------------------------------------------ (b) training
def find_run(runs: Path = RUNS) -> Path | None:
    """The newest run directory (by its metrics.jsonl) under runs/, or None."""
    cands = [p.parent for p in runs.glob("*/metrics.jsonl") if p.stat().st_size > 0]
    return max(cands, key=lambda p: (p / "metrics.jsonl").stat().st_mtime) if cands else None


def read_metrics(run_dir: Path) -> list[dict]:
    out = []
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a torn last line
    return out


def training(run_dir: Path | None, out: Path = OUT / "training.png") -> Path | None:
    if run_dir is None or not read_metrics(run_dir):
        print(
            f"figures: training curves skipped: no run with metrics.jsonl "
            f"({run_dir or RUNS / '*'}); run `qed train` first",
            file=sys.stderr,
        )
        return None
    recs = read_metrics(run_dir)
    plt = _plt()
    steps = [r["step"] for r in recs]
    fig, (ax, axl) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    floor = 1e-8  # a loss that underflowed to 0 (float32) is drawn at the floor of the log axis
    floored = False
    for key, style, label in (("train_loss", "o-", "train loss"), ("val_loss", "s-", "validation loss")):
        pts = [(s, r[key]) for s, r in zip(steps, recs) if r.get(key) is not None]
        if pts:
            floored |= any(v < floor for _, v in pts)
            ax.plot([s for s, _ in pts], [max(v, floor) for _, v in pts], style, ms=3, label=label)
    ax.set_yscale("log")
    if floored:
        ax.axhline(floor, color="grey", lw=0.6, ls=":")
        ax.text(steps[0], floor * 1.6, "below 1e-8 (0 in float32) drawn at 1e-8", fontsize=7, color="grey")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    handles, labels = ax.get_legend_handles_labels()
    acc = [(s, 100 * r["accuracy"]) for s, r in zip(steps, recs) if r.get("accuracy") is not None]
    if acc:
        ax2 = ax.twinx()
        ax2.grid(False)
        ax2.plot(*zip(*acc), "^-", color="tab:green", ms=3, label="held-out exact-match accuracy (%)")
        ax2.set_ylim(0, 101)
        ax2.set_ylabel("accuracy (%)")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize=8, loc="center right")
    ax.set_title(f"Training run {Path(run_dir).name}")
    lr = [(s, r["lr"]) for s, r in zip(steps, recs) if r.get("lr") is not None]
    if lr:
        axl.plot(*zip(*lr), ".-", color="tab:purple")
    axl.set_xlabel("step")
    axl.set_ylabel("learning rate")
    axl.set_title("schedule (at each evaluation)")
    fig.tight_layout()
    return _save(fig, out)


# ------------------------------------------------------------------------------ (c) attention
def _attention_caches(tree, found=None) -> list:
    """The generated attention kernel's caches `(q, k, v, att, o, d_k, layout)` inside a model's
    tape, in the order the layers ran."""
    found = [] if found is None else found
    if isinstance(tree, dict):
        for key in tree:
            _attention_caches(tree[key], found)
    elif isinstance(tree, (list, tuple)):
        if (
            len(tree) in (6, 7)
            and all(isinstance(a, np.ndarray) for a in tree[:5])
            and isinstance(tree[5], (int, np.integer))
            and tree[3].ndim >= 2
            and tree[3].shape[-1] == tree[1].shape[-2]
            and tree[3].shape[-2] == tree[0].shape[-2]
        ):
            found.append(tree)
        else:
            for item in tree:
                _attention_caches(item, found)
    return found


def attention(run_dir: Path | None, out: Path = OUT / "attention.png") -> Path | None:
    """Heat maps of the attention weights of every layer and head on one held-out example."""
    if run_dir is None:
        print("figures: attention heatmap skipped: no trained run (run `qed train` first)", file=sys.stderr)
        return None
    try:
        from ..data import task_from_info
        from ..train import load_for_inference

        runner, ck = load_for_inference(run_dir, backend="numpy", dtype="float64")
        task = task_from_info(ck.meta["task"])
        model = runner.model
    except Exception as exc:  # no checkpoint, or a model API this script does not know
        print(
            f"figures: attention heatmap skipped: cannot load {run_dir} ({type(exc).__name__}: {exc})", file=sys.stderr
        )
        return None
    if getattr(task, "kind", None) != "sort":
        print("figures: attention heatmap skipped: only the sorting task is drawn", file=sys.stderr)
        return None
    held_out = task.examples("val")
    inversions = [int(np.sum(np.triu(e[:, None] > e[None, :], 1))) for e in held_out]
    example = held_out[int(np.argmax(inversions))][None, :]  # the most shuffled held-out input
    x, y = task.sequences(example)
    try:
        logits, _ = model.forward(x, y)  # with targets the model keeps its caches (the tape)
    except Exception as exc:
        print(f"figures: attention heatmap skipped: forward failed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    caches = _attention_caches(getattr(model, "_tape", None) or {})
    if not caches:
        print("figures: attention heatmap skipped: no attention cache found on the model", file=sys.stderr)
        return None
    pred = np.argmax(logits[0], axis=-1)
    tokens = [str(int(t)) for t in x[0]]
    n_layer, n_head = len(caches), caches[0][3].shape[1]
    plt = _plt()
    fig, axes = plt.subplots(n_layer, n_head, figsize=(2.3 * n_head + 0.8, 2.3 * n_layer + 0.9), squeeze=False)
    for li, cache in enumerate(caches):
        att = cache[3][0]  # (heads, T, T)
        for h in range(n_head):
            ax = axes[li][h]
            ax.grid(False)
            ax.imshow(att[h], cmap="viridis", vmin=0, vmax=1)
            ax.set_xticks(range(len(tokens)), tokens, fontsize=7)
            ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
            ax.axvline(task.length - 0.5, color="w", lw=0.6)
            ax.axhline(task.length - 0.5, color="w", lw=0.6)
            ax.set_title(f"layer {li}, head {h}", fontsize=8)
            if h == 0:
                ax.set_ylabel("query position")
            if li == n_layer - 1:
                ax.set_xlabel("key position")
    inp = "".join(tokens[: task.length])
    out_digits = "".join(str(int(t)) for t in pred[task.length - 1 :])
    fig.suptitle(
        f"Attention weights (causal) on the held-out input {inp}: the model answers "
        f"{out_digits} (sorted: {''.join(sorted(inp))}); white lines: input | output",
        fontsize=9,
    )
    fig.tight_layout(h_pad=1.2)
    return _save(fig, out)


# ------------------------------------------------------------------------------ (d) benchmarks
def bench(results: Path = BENCH_RESULTS, out: Path = OUT / "bench.png") -> Path | None:
    """The benchmark sweep. Hook for the benchmark issue: `results` is JSON,
    `{"rows": [{"op": "attention", "size": 256, "ratio": 1.3, ...}, ...], "ratio_label": "..."}`,
    one line per op, `ratio` against `size` (log x). Skipped while no results exist."""
    if not Path(results).exists():
        print(f"figures: benchmark sweep skipped: no results at {results} (see `qed bench`)", file=sys.stderr)
        return None
    data = json.loads(Path(results).read_text(encoding="utf-8"))
    rows = data.get("rows", [])
    if not rows:
        print(f"figures: benchmark sweep skipped: {results} has no rows", file=sys.stderr)
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for op in sorted({r["op"] for r in rows}):
        pts = sorted((r["size"], r["ratio"]) for r in rows if r["op"] == op)
        ax.plot(*zip(*pts), "o-", label=op)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size")
    ax.set_ylabel(data.get("ratio_label", "time ratio"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qed.tools.figures", description=__doc__.split("\n")[0])
    p.add_argument(
        "--run",
        type=Path,
        default=None,
        help="run directory for the training and attention figures (default: newest under runs/)",
    )
    p.add_argument("--bench", type=Path, default=BENCH_RESULTS, help="benchmark results JSON")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", choices=("saturation", "training", "attention", "bench"), action="append")
    args = p.parse_args(argv)
    run = args.run or find_run()
    if args.run is not None and not args.run.is_dir():
        print(f"figures: no such run directory: {args.run}", file=sys.stderr)
        run = None
    jobs = {
        "saturation": lambda: saturation(args.out / "saturation.png"),
        "training": lambda: training(run, args.out / "training.png"),
        "attention": lambda: attention(run, args.out / "attention.png"),
        "bench": lambda: bench(args.bench, args.out / "bench.png"),
    }
    for name in args.only or jobs:
        path = jobs[name]()
        if path is not None:
            print(f"wrote {Path(path).resolve().relative_to(ROOT) if ROOT in Path(path).resolve().parents else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

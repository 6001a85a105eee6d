"""`qed bench --ops`: every op's printed backward against the one reverse mode derives, side by side.

For each op of the registry whose backward is written by hand (attention's δ = rowsum(dO ⊙ O),
LayerNorm's closed form, ...), codegen prints the derived backward too (`derived_op`: the
backward that derivations/language/autodiff.py derives from the op's own forward and cache, proved
equal to the printed one by `<op>.backward_derived.<grad>`), into a temporary package beside
copies of the generated support modules (qed/tools/scratch_kernels.py), and the two `<op>_backward`s run on the same cache and
upstream gradients, interleaved, in float32:

    time      the median of `rounds` interleaved calls (each the best of `repeats`), per backend
    arrays    the temporaries each backward allocates: statements of the printed body that
              bind a fresh array (NumPy; torch prints the same statements)
    ratio     derived / printed (the target: within 1.5×)
    agree     every derived gradient within 1e-5 of the printed one's largest entry (float32)

Ops declared by their forward alone have only the derived backward and are listed as such.
Sizes: rows 128 with 8 leading rows, features 64, hidden widths 256, vocabulary 256.
"""

from __future__ import annotations

import importlib
import itertools
import re
import statistics
import sys
import time

import numpy as np
import sympy as sp

from ..errors import QedError

SIZES = {
    "r": 128,
    "m": 128,
    "T": 128,
    "n": 64,
    "d": 64,
    "d_k": 64,
    "d_v": 64,
    "n_in": 64,
    "n_out": 64,
    "d_model": 64,
    "f": 256,
    "n_hidden": 256,
    "d_ff": 256,
    "V": 256,
}
BATCH = (8,)
TARGET = 1.5


def _sizes(op) -> dict:
    from codegen.analysis import analyse

    syms = {s for a in analyse(op).args for dim in a.array.shape for s in sp.sympify(dim).free_symbols}
    syms |= set(op.sizes)
    spare = itertools.cycle((64, 128))
    return {s: SIZES.get(s.name) or next(spare) for s in sorted(syms, key=lambda s: s.name)}


def inputs(op, seed: int = 0, dtype=np.float32) -> list:
    """Positional arguments of `<op>_forward` at the bench sizes (ids within their bounds, masks 1)."""
    from codegen.analysis import analyse, storage_shape

    an, sizes = analyse(op), _sizes(op)
    rng = np.random.default_rng(seed)
    bounds = {a.name: int(sp.sympify(b).xreplace(sizes)) for a, b in an.id_bounds}
    out = []
    for a in an.args:
        shape = storage_shape(a.array, a.integer, a.batched, sizes, BATCH)
        if a.integer:
            hi = bounds.get(a.name, 2)
            out.append(np.ones(shape, dtype=np.int64) if hi <= 2 else rng.integers(0, hi, size=shape))
        else:
            out.append(rng.standard_normal(shape).astype(dtype))
    return out


def allocations(module, name: str) -> int:
    """Statements of `<name>_backward` that bind a fresh array (`t = <expression>`, not in place)."""
    import inspect

    body = inspect.getsource(getattr(module, f"{name}_backward"))
    return sum(
        1
        for line in body.split("\n")
        if re.match(r"\s+[A-Za-z_]\w* = (?!_v\.|\(|layout)", line) and " = cache" not in line
    )


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _convert(x, backend):
    if backend == "torch":
        import torch

        return torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    return x


def compare(op, pkg, backend: str, rounds: int, repeats: int) -> dict:
    """Median time per call of the printed and the derived backward on one cache."""
    from derivations.proof.derived import derived_op

    printed = importlib.import_module(f"generated.{backend}.{op.name}")
    derived = pkg.module(derived_op(op), backend)
    args = [_convert(a, backend) for a in inputs(op)]
    outs, cache = getattr(printed, f"{op.name}_forward")(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    rng = np.random.default_rng(1)
    ups = [_convert(rng.standard_normal(tuple(o.shape)).astype(np.float32), backend) for o in outs]
    run_printed = lambda: getattr(printed, f"{op.name}_backward")(*ups, cache)  # noqa: E731
    run_derived = lambda: getattr(derived, f"{op.name}_backward")(*ups, cache)  # noqa: E731
    got, want = run_derived(), run_printed()
    got, want = (g if isinstance(g, tuple) else (g,) for g in (got, want))
    # float32 rounding of sums over 1024 rows: each gradient within 1e-5 of its largest entry
    agree = all(
        np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-5 * max(np.abs(np.asarray(b)).max(), 1e-30)
        for a, b in zip(got, want)
    )
    times = {"printed": [], "derived": []}
    for _ in range(rounds):  # interleaved: the machine's drift hits both
        times["printed"].append(_time(run_printed, repeats))
        times["derived"].append(_time(run_derived, repeats))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "printed_us": med["printed"] * 1e6,
        "derived_us": med["derived"] * 1e6,
        "ratio": med["derived"] / med["printed"],
        "agree": agree,
        "printed_arrays": allocations(printed, op.name),
        "derived_arrays": allocations(derived, op.name),
    }


def check_names(names) -> None:
    """`qed bench --ops NAME ...`: each name an op of the registry (an unknown one is refused in
    one line, not benchmarked as an empty table)."""
    from derivations import registry

    known = [o.name for o in registry.ops()]
    unknown = [n for n in names or () if n not in known]
    if unknown:
        raise QedError(f"--ops {' '.join(unknown)}: no such op (the ops: {', '.join(sorted(known))})")


def bench_ops(
    names=None, *, rounds: int = 7, repeats: int = 5, backends=("numpy", "torch"), progress: bool = True
) -> dict:
    from derivations import registry

    ops = [o for o in registry.ops() if names is None or o.name in names]
    from .scratch_kernels import ScratchKernels

    pkg = ScratchKernels()
    result = {"sizes": SIZES, "batch": BATCH, "target": TARGET, "ops": {}, "derived_only": []}
    try:
        for op in ops:
            if op.derived:
                result["derived_only"].append(op.name)
                continue
            row = {}
            for backend in backends:
                if progress:
                    print(f"# {op.name} ({backend})", file=sys.stderr, flush=True)
                row[backend] = compare(op, pkg, backend, rounds, repeats)
            result["ops"][op.name] = row
    finally:
        pkg.close()
    return result


def render(result: dict) -> None:
    print(
        f"derived vs printed backward, float32, sizes {result['sizes']} with batch {result['batch']}; "
        f"target: derived ≤ {result['target']}× printed"
    )
    print(f"{'op':<15}{'backend':<8}{'printed µs':>12}{'derived µs':>12}{'ratio':>8}{'arrays p/d':>12}  agree")
    for name, row in result["ops"].items():
        for backend, r in row.items():
            flag = "" if r["ratio"] <= result["target"] else "  over"
            print(
                f"{name:<15}{backend:<8}{r['printed_us']:>12.1f}{r['derived_us']:>12.1f}{r['ratio']:>8.2f}"
                f"{r['printed_arrays']:>6}/{r['derived_arrays']:<5}  {'yes' if r['agree'] else 'NO'}{flag}"
            )
    if result["derived_only"]:
        print(
            "declared by the forward alone (the printed backward is the derived one): "
            + ", ".join(result["derived_only"])
        )


def _compute(overrides, args):
    return bench_ops(getattr(args, "ops_names", None) or None)


SECTION = ("ops", _compute, render)

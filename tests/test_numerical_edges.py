"""Numerical edges of every generated kernel, against the exact values of its specification.

Every op and optimiser step of the registry is run through its NumPy and PyTorch kernels at
large magnitudes (±1e4 ... 1e30 in float32 and float64, 1e100 and 1e300 in float64; random,
all-equal, one-huge-entry and alternating inputs; every flag combination) and must give, wherever
the exact value is within the dtype's range, a finite value close to it, without floating-point
exceptions or warnings (qed/tools/edges.py says how the exact values are computed and what "close"
means). Nothing here is per op: a new op in the registry is covered as it is added.

Known failures are marked `xfail(strict=True)` below, each with the op and the reason, so the
suite stays green now and turns red (XPASS) when a kernel is fixed: then remove its entry.
"""

from __future__ import annotations

import random

import mpmath
import numpy as np
import pytest
import sympy as sp

from derivations.language.arrays import entry
from derivations.proof import numeric
from derivations.proof.obligations import E, F, I, J, flag_sets, obligations, spec_scope
from derivations.registry import ops, steps
from qed.tools import edges

# ---------------------------------------------------------------------------------------------
# Known failures: unit -> (backends, {dtype: the smallest failing magnitude}, reason). Every
# magnitude from that one up fails (on the backends named), every one below it passes.
BOTH = ("numpy", "torch")
KNOWN = {
    "adam": (
        BOTH,
        {"float32": 1e30, "float64": 1e300},
        "adam: beyond |g| ~ 6e20 (float32) / 1e300 (float64) v_new = β₂v + (1 − β₂)g² is itself "
        "out of range (not required) and √v_new = inf drops the step, although the exact "
        "p_new ≈ p − lr·sign g is in range: it would need √v_new from a scaled form "
        "(hypot(√(β₂v), √(1 − β₂)|g|)); up to there v_new = β₂v + ((1 − β₂)g)g and "
        "√v̂ = √v_new/√(1 − β₂^t) stay in range",
    ),
    "adamw": (
        BOTH,
        {"float32": 1e30, "float64": 1e300},
        "adamw: as adam — v_new out of range, √v_new = inf and the step is lost",
    ),
    "attention": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "attention: s = q kᵀ/√d_k overflows (|s| ~ M² with q, k ~ M) → inf − inf = NaN "
        "in s − rowmax(s); the exact attention is one-hot and o finite",
    ),
    "attention_lse": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "attention_lse: as attention — s = q kᵀ/√d_k overflows (|s| ~ M²) → inf − inf = NaN in s − rowmax(s)",
    ),
    "ffn_relu": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "ffn_relu: z = x W1ᵀ + b1 ~ M² is out of range; terms ±inf give NaN, and the "
        "ReLU mask (z > 0) of a NaN drops its row from db1 (exact db1 ~ M is finite)",
    ),
    "geglu": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "geglu: as swiglu — the pre-activations g, u ~ M² and h = GELU(g)·u ~ M⁴ overflow where "
        "y ~ h·w_down is in range (or Φ(g) = 0 meets g·u = inf: 0·inf = NaN)",
    ),
    "gelu_tanh": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "gelu_tanh: x*x*x overflows (|x| > 7e12 in float32) — an overflow warning in "
        "the forward — and the backward's (1 − tanh² u)·x·(0.134145 x² + 1) is 0·inf = "
        "NaN where the exact dx is 0 or dy",
    ),
    "layernorm": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "layernorm: the variance mean((x − μ)²) overflows (|x − μ| > 1.8e19 in "
        "float32), rstd = 1/√inf = 0 and y collapses to β; dx, dγ follow",
    ),
    "rmsnorm": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "rmsnorm: the mean square mean(x²) overflows, rrms = 0 and y = 0",
    ),
    "swiglu": (
        BOTH,
        {"float32": 1e20, "float64": 1e300},
        "swiglu: the pre-activations g = x W_gᵀ, u = x W_uᵀ ~ M² (x and the weights scaled) "
        "are out of range where y, dx are not (σ(g) ≈ e^{−|g|} cancels them; a spike's h = "
        "SiLU(g)·u ~ M² overflows where y ~ h·w_down is in range): inf·0 = NaN, as ffn_relu",
    ),
}


def known(unit: str, backend: str, dtype: str, magnitude: float) -> str | None:
    entry_ = KNOWN.get(unit)
    if entry_ is None:
        return None
    backends, first, reason = entry_
    if backend in backends and dtype in first and magnitude >= first[dtype]:
        return reason
    return None


def _param(unit, backend, dtype, magnitude):
    reason = known(unit, backend, dtype, magnitude)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(unit, backend, dtype, magnitude, marks=marks, id=f"{unit}-{backend}-{dtype}-{magnitude:g}")


CASES = [_param(*c) for c in edges.cases()]


@pytest.mark.parametrize("unit, backend, dtype, magnitude", CASES)
def test_finite_and_close_at_large_magnitudes(unit, backend, dtype, magnitude):
    findings = edges.check(unit, backend, dtype, magnitude)
    assert not findings, (
        f"{len(findings)} findings for {unit} ({backend}, {dtype}, "
        f"|x| ~ {magnitude:g}):\n" + edges.report(findings[:12])
    )


def test_every_op_and_step_is_covered():
    """The units are read off the registry, and the known failures name only existing ones."""
    names = {u.name for u in edges.units()}
    assert names == {o.name for o in ops()} | {s.name for s in steps()}
    assert set(KNOWN) <= names, f"stale KNOWN entries: {sorted(set(KNOWN) - names)}"
    for unit, (backends, first, _) in KNOWN.items():
        assert set(backends) <= set(edges.BACKENDS) and set(first) <= set(edges.DTYPES), unit


@pytest.mark.parametrize("unit", [u.name for u in edges.units()])
def test_unit_scale_agrees(unit):
    """The harness itself: at |x| ~ 1 (where the kernels are known to be right: tests/
    test_kernels.py) every output and gradient matches the exact values, on both backends."""
    findings = [f for b in edges.BACKENDS for d in edges.DTYPES for f in edges.check(unit, b, d, 1.0)]
    assert not findings, edges.report(findings[:12])


# ---------------------------------------------------------------------------------------------
# The tape (qed/tools/edges.py) against the project's own evaluator: the spec's index form
# (`entry` of `spec_scope`) and the generated obligations' required derivatives (`sp.diff` of
# Σ dO·O, derivations/proof/obligations.py), both evaluated by derivations/proof/numeric.py.

# one op per tape rule: erf (gelu), tanh (gelu_tanh), √ and powers (layernorm), exp/log and
# Take (cross_entropy), Max/Heaviside (relu), Gather (embedding), exp and ratios (softmax)
FAST_TAPE = ("gelu", "gelu_tanh", "layernorm", "cross_entropy", "relu", "embedding", "softmax")
TAPE_OPS = [pytest.param(o.name, marks=[] if o.name in FAST_TAPE else [pytest.mark.slow], id=o.name) for o in ops()]


def _point(u, values: dict, sizes: dict) -> numeric.Point:
    p = numeric.Point(symbols=dict(sizes), seed=0)
    for (name, idx), x in values.items():
        p.entries[(name, idx)] = x
    return p


@pytest.mark.parametrize("name", TAPE_OPS)
def test_tape_matches_the_projects_evaluator(name):
    u = edges.unit(name)
    op = u.obj
    rng = random.Random(0)
    args = {
        a.name: (
            u.integers[a.name]
            if a.integer
            else np.array([rng.choice([-1, 1]) * rng.randint(1, 16) / 8 for _ in range(int(np.prod(a.shape)))]).reshape(
                a.shape
            )
        )
        for a in u.args
    }
    ups = {n: np.array([rng.randint(-16, 16) / 8 for _ in range(int(np.prod(s)))]).reshape(s) for n, _, s in u.outputs}
    for label, _kw, flags in u.option_sets:
        got = edges.exact(u, args, ups, flags, 40)
        values = {}
        for a in u.args:
            for pos in np.ndindex(*a.shape):
                values[(a.name, edges.entry_index(a.array, pos))] = mpmath.mpf(float(args[a.name][pos]))
        for n, o, s in u.outputs:
            for pos in np.ndindex(*s):
                values[("d" + n, edges.entry_index(o, pos))] = mpmath.mpf(float(ups[n][pos]))
        env = spec_scope(op, flags)
        subs = {**u.sizes, **edges._option_values(op, {})}
        for n, o, s in u.outputs:
            expr = entry(o, (I, J), env).xreplace(subs)
            for pos in np.ndindex(*s):
                i, j = (0, pos[0]) if len(pos) == 1 else pos
                want = numeric.evaluate(expr, _point(u, values, {**subs, I: i, J: j}))
                assert abs(got[n][pos] - want) <= mpmath.mpf("1e-30") * max(1, abs(want)), (label, n, pos)
        for ob in obligations(op):
            if ob.kind != "backward":
                continue
            k = flag_sets(op).index(flags)
            expr = sp.sympify(ob.required()[k]).xreplace(subs)
            grad_name = ob.target.name
            arg = next(a for g, a in u.grads if g == grad_name)
            for pos in np.ndindex(*arg.shape):
                e, f = (0, pos[0]) if len(pos) == 1 else pos
                want = numeric.evaluate(expr, _point(u, values, {**subs, E: e, F: f}))
                assert abs(got[grad_name][pos] - want) <= mpmath.mpf("1e-30") * max(1, abs(want)), (
                    label,
                    grad_name,
                    pos,
                )


def test_tape_exp_and_sech2_at_huge_arguments():
    """At 1e300 the tape's exp (2^k e^r) and sech² (from e^{−2|x|}) agree with mpmath's own."""
    x = mpmath.mpf("1e300")
    with mpmath.workdps(60):
        assert edges._exp(-x) == mpmath.exp(-x) or abs(edges._exp(-x) / mpmath.exp(-x) - 1) < 1e-50
        assert abs(edges._exp(mpmath.mpf(1234.5)) / mpmath.exp(mpmath.mpf(1234.5)) - 1) < 1e-50
        assert abs(edges._sech2(mpmath.mpf(3)) / mpmath.sech(3) ** 2 - 1) < 1e-50

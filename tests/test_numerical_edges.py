"""Numerical edges of every generated kernel, against the exact values of its specification.

Every op and optimiser step of the registry is run through its NumPy and PyTorch kernels at
large magnitudes (±1e4 ... 1e30 in float32 and float64, 1e100 and 1e300 in float64) and small
ones (1e-8, then 1e-30 and the subnormal 1e-40 in float32, 1e-200 and the subnormal 1e-310 in
float64; random,
all-equal, one-huge-entry and alternating inputs; every flag combination) and must give, wherever
the exact value is within the dtype's range, a finite value close to it, without floating-point
exceptions or warnings (qed/tools/edges.py says how the exact values are computed and what "close"
means). Nothing here is per op: a new op in the registry is covered as it is added.

Known failures are declared by the op itself (`Op.range_limit`, `Step.range_limit`: from which
magnitude, on which backends, and why) and marked `xfail(strict=True)` here, so the suite stays
green now and turns red (XPASS) when a kernel is fixed: then remove its declaration.
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
# Known failures: each op or step declares where its printed kernels stop giving the exact value
# (`range_limit`: {dtype: the smallest failing magnitude}, the backends, the reason). Every
# magnitude from that one up fails (on the backends named), every one below it passes.
KNOWN = {unit.name: unit.range_limit for unit in [*ops(), *steps()] if unit.range_limit is not None}


def known(unit: str, backend: str, dtype: str, magnitude: float) -> str | None:
    limit = KNOWN.get(unit)
    if limit is not None and backend in limit.backends and limit.fails(dtype, magnitude):
        return limit.reason
    return None


def _param(unit, backend, dtype, magnitude):
    reason = known(unit, backend, dtype, magnitude)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(unit, backend, dtype, magnitude, marks=marks, id=f"{unit}-{backend}-{dtype}-{magnitude:g}")


CASES = [_param(*c) for c in edges.cases()]


@pytest.mark.parametrize("unit, backend, dtype, magnitude", CASES)
def test_finite_and_close_at_every_magnitude(unit, backend, dtype, magnitude):
    findings = edges.check(unit, backend, dtype, magnitude)
    assert not findings, (
        f"{len(findings)} findings for {unit} ({backend}, {dtype}, "
        f"|x| ~ {magnitude:g}):\n" + edges.report(findings[:12])
    )


@pytest.mark.parametrize("dtype", edges.DTYPES)
@pytest.mark.parametrize("pattern", edges.PATTERNS)
def test_every_magnitude_reaches_the_kernels(dtype, pattern):
    """The scaled inputs have the magnitude asked for: at 1e-200 and 1e-310 (below float32's
    smallest subnormal) they are float64 numbers, not float32 numbers rounded to 0; each unscaled
    entry is a float32 number, as at every other magnitude."""
    u = edges.unit("gelu")
    for magnitude in edges.magnitudes(dtype):
        x = edges.make_inputs(u, ("all", ("x",)), pattern, magnitude)["args"]["x"].astype(np.float64).ravel()
        if pattern == "spike":  # U(−1, 1) with the first row's last entry at the magnitude
            at = u.args[0].shape[-1] - 1
            spike, rest = x[at], np.delete(x, at)
            assert spike == pytest.approx(magnitude, rel=1e-3)
            assert np.array_equal(rest.astype(np.float32).astype(np.float64), rest)
        else:
            assert magnitude / 2 <= np.abs(x).max() <= magnitude * 1.001, (magnitude, np.abs(x).max())
            assert np.abs(x).min() > 0


def test_every_op_and_step_is_covered():
    """The units are read off the registry, and the known failures name only existing ones."""
    names = {u.name for u in edges.units()}
    assert names == {o.name for o in ops()} | {s.name for s in steps()}
    assert set(KNOWN) <= names, f"stale KNOWN entries: {sorted(set(KNOWN) - names)}"
    for unit, limit in KNOWN.items():
        assert set(limit.backends) <= set(edges.BACKENDS) and set(limit.first) <= set(edges.DTYPES), unit
        assert set(limit.last) <= set(limit.first), unit


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
    """At 1e300 the table's exp (2^k e^r) and tanh's slope sech² (from e^{−2|x|}), which the
    tape calls, agree with mpmath's own; at 1e4 sech² is tiny, not 1 − 1 = 0."""
    from derivations.language.functions import mp_exp, mp_slope

    x = mpmath.mpf("1e300")
    with mpmath.workdps(60):
        assert mp_exp(-x) == mpmath.exp(-x) or abs(mp_exp(-x) / mpmath.exp(-x) - 1) < 1e-50
        assert abs(mp_exp(mpmath.mpf(1234.5)) / mpmath.exp(mpmath.mpf(1234.5)) - 1) < 1e-50
        three = mpmath.mpf(3)
        assert abs(mp_slope("tanh", three, mpmath.tanh(three)) / mpmath.sech(3) ** 2 - 1) < 1e-50
        big = mpmath.mpf(10000)
        assert 0 < mp_slope("tanh", big, mpmath.tanh(big)) < mpmath.mpf(10) ** -8000

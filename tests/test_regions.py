"""Region reasoning in the normaliser (derivations/proof/rewriting.py): case splits on a sign,
logarithms by exponentiating, tanh by its exponentials, log1p/expm1, separable double sums —
what it decides, and what it must refuse."""

from __future__ import annotations

import pytest
import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from derivations.proof.rewriting import Normaliser

x_, w_, z_ = (sp.IndexedBase(s, real=True) for s in "xwz")
x, y = x_[0, 0], x_[0, 1]
n = sp.Symbol("n", integer=True, positive=True)
k, l, e = (sp.Symbol(s, integer=True) for s in "kle")


def decided(lhs, rhs):
    """(residual is 0, the normaliser) with a checked domain (goals proved or refused)."""
    norm = Normaliser(ranges={e: (0, n - 1)})
    return norm.residual(lhs, rhs) == 0, norm


@pytest.mark.parametrize(
    "lhs,rhs",
    [
        (sp.Max(x, 0) + sp.log(1 + sp.exp(-sp.Abs(x))), sp.log(1 + sp.exp(x))),  # softplus
        (sp.Min(x, 0) - log1p(sp.exp(-sp.Abs(x))), -sp.log(1 + sp.exp(-x))),  # log σ
        (sp.Max(x, y) + sp.Min(x, y), x + y),  # a compound subject
        (sp.Abs(x - y), sp.Max(x, y) - sp.Min(x, y)),
        (sp.Abs(x) * sp.sign(x), x),  # three branches
        ((1 + sp.sign(x)) / 2 * sp.Max(x, 0), sp.Max(x, 0)),
        (sp.Abs(sp.Abs(x) - 1), sp.Max(sp.Abs(x) - 1, 1 - sp.Abs(x))),  # nested splits
        (expm1(2 * x) / (expm1(2 * x) + 2), sp.tanh(x)),  # tanh, expm1
    ],
)
def test_region_identities_are_proved(lhs, rhs):
    ok, norm = decided(lhs, rhs)
    assert ok, norm.assumptions
    assert not norm.hypotheses
    assert any("case split" in a or "exp" in a for a in norm.assumptions + norm.discharged)


def test_the_branches_are_recorded():
    ok, norm = decided(sp.Abs(x) * sp.sign(x), x)
    assert ok
    split = [a for a in norm.discharged if a.startswith("case split")]
    assert split and "x[0, 0] > 0" in split[0] and "< 0" in split[0] and "= 0" in split[0]


@pytest.mark.parametrize(
    "lhs,rhs",
    [
        (sp.Abs(x), x),  # false for x < 0
        (sp.Max(x, 0) + log1p(sp.exp(-x)), sp.log(1 + sp.exp(x))),  # |x| dropped: false for x < 0
        (sp.sign(x) ** 2, sp.Integer(1)),  # false at the boundary x = 0 only
        (sp.log(1 + sp.exp(x)), x + sp.log(1 + sp.exp(x))),
        (sp.Max(x, y), x),
    ],
)
def test_false_identities_are_not_proved(lhs, rhs):
    ok, norm = decided(lhs, rhs)
    assert not ok


def test_a_kink_convention_is_a_recorded_hypothesis():
    """(1 + sign u)/2 and the printed H(u, 0) differ at u = 0 alone, where each is a subgradient
    of max(0, u): proved for u ≠ 0, which the certificate lists as a hypothesis."""
    ok, norm = decided((1 + sp.sign(x)) / 2, sp.Heaviside(x, 0))
    assert ok and any("≠ 0" in h for h in norm.hypotheses)


def test_a_split_inside_a_sum_is_per_summand():
    """Σ_k [(1 + sign z_k)/2 − H(z_k, 0)] w_k: the summed index held fixed, per summand."""
    lhs = sp.Sum((1 + sp.sign(z_[e, k])) / 2 * w_[k], (k, 0, n - 1))
    rhs = sp.Sum(sp.Heaviside(z_[e, k], 0) * w_[k], (k, 0, n - 1))
    ok, norm = decided(lhs, rhs)
    assert ok and norm.hypotheses
    assert not decided(lhs, sp.Sum(sp.Heaviside(-z_[e, k], 0) * w_[k], (k, 0, n - 1)))[0]


def test_a_nonlinear_subject_is_not_split():
    """What it cannot decide: a sign of x² − 1 (not linear in an entry) is never split on, so
    this true identity stays unproven; x³ is decided, within a split on x, by the assumptions."""
    ok, _ = decided(sp.Abs(x**2 - 1), sp.Max(x**2 - 1, 1 - x**2))
    assert not ok
    ok, _ = decided(sp.Max(x**3, 0), x**2 * sp.Max(x, 0))
    assert ok


def test_logs_are_compared_by_exponentiating():
    ok, norm = decided(sp.log(1 + sp.exp(-x)) + x, sp.log(1 + sp.exp(x)))
    assert ok
    ok, _ = decided(sp.log(1 + sp.exp(-x)) + 2 * x, sp.log(1 + sp.exp(x)))
    assert not ok


def test_a_log_of_a_possibly_negative_argument_is_not_exponentiated():
    ok, _ = decided(sp.log(x) + sp.log(y), sp.log(x * y))  # false for x, y < 0 (complex logs)
    assert not ok


def test_separable_double_sums_are_products():
    """Σ_{k,l} a_k b_l = (Σ_k a_k)(Σ_l b_l): the row max's adjoint in a softmax needs it."""
    double = sp.Sum(x_[e, k] * w_[l], (k, 0, n - 1), (l, 0, n - 1))
    ok, _ = decided(double, sp.Sum(x_[e, k], (k, 0, n - 1)) * sp.Sum(w_[l], (l, 0, n - 1)))
    assert ok
    # a coupled one is not
    coupled = sp.Sum(x_[e, k] * w_[k + l], (k, 0, n - 1), (l, 0, n - 1))
    assert not decided(coupled, sp.Sum(x_[e, k], (k, 0, n - 1)) * sp.Sum(w_[l], (l, 0, n - 1)))[0]


def test_softmax_row_max_adjoint_is_zero():
    """Σ_j G_j ∂y_j/∂m for y = e^{x − m}/Σ e^{x − m}: 0 for symbolic n (the shift invariance)."""
    m, G = sp.Symbol("m", real=True), sp.IndexedBase("G", real=True)
    j, p = sp.Symbol("j", integer=True), sp.Symbol("p", integer=True)
    yj = sp.exp(x_[e, j] - m) / sp.Sum(sp.exp(x_[e, p] - m), (p, 0, n - 1))
    adjoint = sp.diff(sp.Sum(G[e, j] * yj, (j, 0, n - 1)), m)
    ok, _ = decided(adjoint, sp.Integer(0))
    assert ok


def test_two_printed_conventions_at_a_kink_are_not_identified():
    """H(x, 0) and H(x, 1) (x > 0 and x ≥ 0 printed) differ at 0: never proved equal, not even
    under a hypothesis (translation validation relies on it)."""
    ok, _ = decided(sp.Heaviside(x, 0), sp.Heaviside(x, 1))
    assert not ok


def test_a_kink_with_a_scaled_subject_is_a_hypothesis_not_a_mistake():
    """(1 + sign x)/2 (the derived midpoint) against H(99x/100, 0) (the specification's
    subgradient): equal off the kink, the same kink (x = 0) though the subjects differ by a factor."""
    ok, norm = decided(
        (99 * sp.sign(x) + 101) / 200, sp.Heaviside(99 * x / 100, 0) + sp.Heaviside(-99 * x / 100, 0) / 100
    )
    assert ok and norm.hypotheses
    # a kink elsewhere (x = 1) is no such hypothesis: refused
    assert not decided((1 + sp.sign(x)) / 2, sp.Heaviside(x - 1, 0))[0]


def test_a_whole_sum_is_split_as_one_number():
    """A pre-activation s = Σ_k w_k x_k inside max and |·|: split on its sign as an opaque real."""
    s = sp.Sum(w_[k] * x_[e, k], (k, 0, n - 1))
    ok, norm = decided(sp.Max(s, 0) + sp.Min(s, 0), s)
    assert ok and any("case split" in a for a in norm.discharged)
    assert decided(sp.Abs(s) * sp.sign(s), s)[0]
    assert not decided(sp.Abs(s), s)[0]  # false where s < 0
    assert not decided(sp.Max(s, 0), sp.Max(s, 0) + sp.Min(s, 0))[0]

"""The normaliser discharges what it assumes.

(a) Deliberately unequal index identities (off-by-one bounds, swapped indices, out-of-range
deltas, capture of a user symbol, Σx·Σy vs Σxy, empty ranges, range-split edges, ...) must never
reach a residual of 0, and the gate must never prove them.
(b) True identities, including the kinds the claims need, must be proved by the gate.
(c) Random off-by-one families (Hypothesis): a residual of 0 only where brute force agrees at
every small size and index, and a proof wherever the side condition holds.
"""

import mpmath
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from derivations.proof import numeric
from derivations.proof.core import Setting, decide, prove_index_identity, refute_identity
from derivations.proof.rewriting import Indicator, Normaliser, NormaliserError, canonical_index

n, m, h, b = (sp.Symbol(s, integer=True, positive=True) for s in ("n", "m", "h", "b"))
i, j, k, l, u, w, c = (sp.Symbol(s, integer=True) for s in ("i", "j", "k", "l", "u", "w", "c"))
r_ = sp.Symbol("r", integer=True, nonnegative=True)
x, y = sp.IndexedBase("x", real=True), sp.IndexedBase("y", real=True)
A, B = sp.IndexedBase("A", real=True), sp.IndexedBase("B", real=True)
ids = sp.IndexedBase("ids")
user_k0 = sp.Symbol("_k0", integer=True)  # the name the old normaliser gave its bound indices
user_sum0 = sp.Symbol("_sum0")  # ... and its hidden sums
user_exp0 = sp.Symbol("_exp0")
half = sp.Rational(1, 2)
D = sp.KroneckerDelta

SIZES = {n: 3, m: 2, h: 2, b: 2}
IN_RANGE = {i: (0, n - 1), j: (0, n - 1)}


def S(body, *limits):
    return sp.Sum(body, *limits)


def setting(indices=None, arrays=None, scalars=None, domain=None):
    return Setting(
        sizes=SIZES,
        indices=dict(IN_RANGE if indices is None else indices),
        scalars=scalars or {},
        integer_arrays=arrays or {},
        domain=domain or {},
    )


# ------------------------------------------------------------------ (a) unequal pairs
# (name, lhs, rhs, setting): lhs ≠ rhs somewhere in the setting's ranges
UNEQUAL = [
    # out-of-range deltas
    ("delta-value-n", S(D(n, k) * x[k], (k, 0, n - 1)), x[n], setting()),
    ("delta-free-range-too-wide", S(D(i, k) * x[k], (k, 0, n - 1)), x[i], setting({i: (0, n)})),
    ("delta-hi-off-by-one", S(D(i, k) * x[k], (k, 0, n - 2)), x[i], setting()),
    ("delta-lo-off-by-one", S(D(i, k) * x[k], (k, 1, n - 1)), x[i], setting()),
    ("delta-shifted-up", S(D(i + 1, k) * x[k], (k, 0, n - 1)), x[i + 1], setting()),
    ("delta-shifted-down", S(D(i - 1, k) * x[k], (k, 0, n - 1)), x[i - 1], setting()),
    ("delta-other-size", S(D(i, k) * x[k], (k, 0, m - 1)), x[i], setting()),
    ("delta-no-range-known", S(D(i, k) * x[k], (k, 0, n - 1)), x[i], setting({})),
    ("delta-reversed-limits", S(D(i, k) * x[k], (k, n - 1, 0)), x[i], setting()),
    ("delta-empty-range", S(D(i, k) * x[k], (k, n, n - 1)), x[i], setting()),
    ("delta-half-integer", S(D(k, i * half) * x[k], (k, 0, n - 1)), x[i * half], setting()),
    ("delta-id-no-declared-range", S(D(ids[i], k) * x[k], (k, 0, n - 1)), x[ids[i]], setting()),
    ("delta-id-declared-too-wide", S(D(ids[i], k) * x[k], (k, 0, n - 1)), x[ids[i]], setting(arrays={"ids": (0, n)})),
    (
        "delta-block-index-too-big",
        S(D(b * u + w, k) * x[k], (k, 0, h * b - 1)),
        x[b * u + w],
        setting({u: (0, h), w: (0, b - 1)}),
    ),
    (
        "delta-block-offset-too-big",
        S(D(b * u + w, k) * x[k], (k, 0, h * b - 1)),
        x[b * u + w],
        setting({u: (0, h - 1), w: (0, b)}),
    ),
    (
        "delta-causal-position-unbounded",
        S(D(k, i + 1 + r_) * x[k], (k, 0, n - 1)),
        x[i + 1 + r_],
        setting({i: (0, n - 1)}, scalars={r_: 1}),
    ),
    # deltas with a summed index whose range excludes the value
    (
        "delta-summed-excluded-top",
        S(S(D(k, l) * x[l] * y[k], (k, 0, n - 2)), (l, 0, n - 1)),
        S(x[l] * y[l], (l, 0, n - 1)),
        setting(),
    ),
    ("delta-summed-shifted-range", S(S(D(k, l) * x[k], (k, 0, n - 1)), (l, 1, n)), S(x[l], (l, 1, n)), setting()),
    (
        "delta-summed-strictly-below",
        S(S(D(k, l) * x[k], (k, 0, l - 1)), (l, 0, n - 1)),
        S(x[l], (l, 0, n - 1)),
        setting(),
    ),
    ("delta-into-dependent-range", S(S(D(k, i) * x[l], (k, 0, l)), (l, 0, n - 1)), S(x[l], (l, 0, n - 1)), setting()),
    (
        "delta-inside-atom-excluded",
        S(sp.exp(S(D(k, l) * x[k], (k, 0, n - 2))), (l, 0, n - 1)),
        S(sp.exp(x[l]), (l, 0, n - 1)),
        setting(),
    ),
    # a delta between two free indices is not 1, and a product of deltas is not one delta
    ("delta-two-free-indices", D(i, j) * x[i], x[i], setting()),
    ("delta-two-free-indices-sum", S(D(i, k) * D(j, k) * x[k], (k, 0, n - 1)), x[i], setting()),
    # capture: a free user symbol named like a canonical index or a hidden symbol
    (
        "capture-user-_k0",
        S(x[k] * y[user_k0], (k, 0, n - 1)),
        S(x[k] * y[k], (k, 0, n - 1)),
        setting({user_k0: (0, n - 1)}),
    ),
    (
        "capture-user-_k0-combined",
        y[user_k0] * S(x[k], (k, 0, n - 1)) + S(x[k] * y[k], (k, 0, n - 1)),
        2 * S(x[k] * y[k], (k, 0, n - 1)),
        setting({user_k0: (0, n - 1)}),
    ),
    ("capture-user-_sum0", S(x[k], (k, 0, n - 1)), user_sum0, setting(scalars={user_sum0: 1})),
    ("capture-user-_exp0", sp.exp(x[i]), user_exp0, setting(scalars={user_exp0: 1})),
    # sums that are not the same sum
    ("sum-x-times-sum-y", S(x[k], (k, 0, n - 1)) * S(y[k], (k, 0, n - 1)), S(x[k] * y[k], (k, 0, n - 1)), setting()),
    ("square-of-sum", S(x[k], (k, 0, n - 1)) ** 2, S(x[k] ** 2, (k, 0, n - 1)), setting()),
    ("range-shifted", S(x[k], (k, 0, n - 1)), S(x[k], (k, 1, n)), setting()),
    ("range-one-longer", S(x[k], (k, 0, n - 1)), S(x[k], (k, 0, n)), setting()),
    ("range-reversed", S(x[k], (k, n - 1, 0)), S(x[k], (k, 0, n - 1)), setting()),
    ("count-off-by-one", S(x[i], (k, 0, n - 1)), (n - 1) * x[i], setting()),
    ("count-negative-length", S(x[i], (k, 2, n - 1)), (n - 2) * x[i], setting({i: (0, n - 1)})),
    ("count-empty-range", S(x[i], (k, n, n - 1)) + x[i], 0, setting()),
    # swapped indices
    ("swapped-matrix-entry", A[i, j], A[j, i], setting()),
    ("swapped-matmul", S(A[i, k] * B[k, j], (k, 0, n - 1)), S(A[k, i] * B[j, k], (k, 0, n - 1)), setting()),
    ("swapped-transpose-order", S(A[i, k] * B[k, j], (k, 0, n - 1)), S(B[i, k] * A[k, j], (k, 0, n - 1)), setting()),
    # range splits at their edges
    (
        "split-at-beyond-hi",
        S(sp.Piecewise((x[k], k <= i), (0, True)), (k, 0, n - 1)),
        S(x[k], (k, 0, i)),
        setting({i: (0, n)}),
    ),
    (
        "split-at-below-lo",
        S(sp.Piecewise((x[k], k >= i), (0, True)), (k, 0, n - 1)),
        S(x[k], (k, i, n - 1)),
        setting({i: (-1, n - 1)}),
    ),
    (
        "split-strict-off-by-one",
        S(sp.Piecewise((x[k], k < i), (0, True)), (k, 0, n - 1)),
        S(x[k], (k, 0, i)),
        setting(),
    ),
    (
        "split-condition-dropped",
        S(sp.Piecewise((x[k], k <= i), (0, True)), (k, 0, n - 1)),
        S(x[k], (k, 0, n - 1)),
        setting(),
    ),
    (
        "split-half-integer-threshold",
        S(sp.Piecewise((x[k], k < i * half), (0, True)), (k, 0, n - 1)),
        S(sp.Piecewise((x[k], k <= i * half - 1), (0, True)), (k, 0, n - 1)),
        setting(),
    ),
    # block reindexing (mha's concatenation), off by one
    ("block-reindex-off-by-one", S(S(x[b * u + w], (w, 0, b - 1)), (u, 0, h - 1)), S(x[c], (c, 0, h * b)), setting()),
    # exps and denominators
    ("exp-product-is-not-exp-of-product", sp.exp(x[i]) * sp.exp(y[i]), sp.exp(x[i] * y[i]), setting()),
    ("softmax-denominator-range", S(sp.exp(x[j]), (j, 0, n - 1)) / S(sp.exp(x[k]), (k, 1, n)), 1, setting({})),
    # a split on the sign of a product of entries (a learned slope y·x), read as one real number
    ("split-product-abs-is-not-the-product", sp.Abs(x[i] * y[i]), x[i] * y[i], setting()),
    ("split-product-max-of-the-wrong-one", sp.Max(x[i] * y[i], 0), sp.Max(x[i], 0) * y[i], setting()),
    ("monotone-clamp-the-wrong-side", sp.Min(0, sp.exp(x[i]) - 1), sp.exp(sp.Max(0, x[i])) - 1, setting()),
    ("monotone-negative-k-not-swapped", sp.Max(0, 3 - 3 * sp.exp(x[i])), 3 - 3 * sp.exp(sp.Max(0, x[i])), setting()),
    ("monotone-not-zero-at-zero", sp.Min(0, sp.exp(x[i])), sp.exp(sp.Min(0, x[i])), setting()),
    # a common e^{a} > 0 out of a root: only where every term has it, and with its own power
    (
        "root-exp-not-common",
        sp.sqrt(sp.exp(x[i]) * y[i] ** 2 + 1),
        sp.exp(x[i] / 2) * sp.sqrt(y[i] ** 2 + 1),
        setting(),
    ),
    (
        "root-exp-power-not-halved",
        sp.sqrt(sp.exp(x[i]) * (y[i] ** 2 + 1)),
        sp.exp(x[i]) * sp.sqrt(y[i] ** 2 + 1),
        setting(),
    ),
    (
        "exp-sum-shift-constant-unshifted",
        sp.exp(sp.Max(0, x[i], y[i]))
        * (sp.exp(x[i] - sp.Max(0, x[i], y[i])) + sp.exp(y[i] - sp.Max(0, x[i], y[i])) + 1),
        sp.exp(x[i]) + sp.exp(y[i]) + 1,
        setting(),
    ),
    # an affine function of a product of entries (a hinge's 1 − x·y), and a quadratic form that
    # is not ≥ 0 once a constant is subtracted
    ("split-affine-product-wrong-side", sp.Max(0, 1 - x[i] * y[i]), sp.Max(0, x[i] * y[i] - 1), setting()),
    (
        "log-of-a-square-of-an-indefinite-form",
        sp.log((x[i] ** 2 - 2 * x[i] * y[i] + y[i] ** 2 - 1) ** 2),
        2 * sp.log(x[i] ** 2 - 2 * x[i] * y[i] + y[i] ** 2 - 1),
        setting(),
    ),
    (
        "split-product-softplus-sign-flipped",
        sp.Max(x[i] * y[i], 0) + sp.log(1 + sp.exp(-sp.Abs(x[i] * y[i]))),
        sp.log(1 + sp.exp(-x[i] * y[i])),
        setting(),
    ),
]


@pytest.mark.parametrize("name,lhs,rhs,where", UNEQUAL, ids=[u[0] for u in UNEQUAL])
def test_unequal_pair_has_no_zero_residual_and_is_not_proved(name, lhs, rhs, where):
    norm = where.normaliser()
    assert norm.residual(lhs, rhs) != 0, f"{name}: false zero"
    assert prove_index_identity(lhs, rhs, where).status not in ("proved-general", "proved-concrete")


def test_unequal_pairs_are_many_and_the_categories_are_covered():
    names = [u[0] for u in UNEQUAL]
    assert len(names) >= 30 and len(set(names)) == len(names)
    for kind in (
        "delta-",
        "capture-",
        "sum-x-times-sum-y",
        "range-",
        "count-",
        "swapped-",
        "split-",
        "empty",
        "delta-two-free-indices",
        "delta-summed-",
    ):
        assert any(kind in nm for nm in names), kind


def test_unequal_pairs_really_are_unequal():
    """Guard against a wrong test: each pair differs at some point, found by brute force over
    the free indices at the setting's sizes with n = 1 … 4."""
    for name, lhs, rhs, where in UNEQUAL:
        assert not _equal_everywhere(lhs, rhs, where), name


# ------------------------------------------------------------------ (b) true identities
TRUE = [
    ("delta-sift", S(D(i, k) * x[k], (k, 0, n - 1)), x[i], setting()),
    ("delta-sift-edge", S(D(k, n - 1) * x[k], (k, 0, n - 1)), x[n - 1], setting()),
    ("delta-sift-shift-in-range", S(D(i + 1, k) * x[k], (k, 1, n)), x[i + 1], setting()),
    ("delta-token-id", S(D(ids[i], k) * x[k], (k, 0, n - 1)), x[ids[i]], setting(arrays={"ids": (0, n - 1)})),
    (
        "delta-block-index",
        S(D(b * u + w, k) * x[k], (k, 0, h * b - 1)),
        x[b * u + w],
        setting({u: (0, h - 1), w: (0, b - 1)}),
    ),
    ("delta-pairs-2i+1", S(D(2 * i + 1, k) * x[k], (k, 0, 2 * h - 1)), x[2 * i + 1], setting({i: (0, h - 1)})),
    (
        "delta-causal-later",
        S(D(k, i + 1 + r_) * x[k], (k, 0, n - 1)),
        x[i + 1 + r_],
        setting({i: (0, 1)}, scalars={r_: 0}, domain={i: (0, n - 1), r_: (0, n - 2 - i)}),
    ),
    (
        "delta-both-summed",
        S(S(D(k, l) * x[k] * y[l], (k, 0, n - 1)), (l, 0, n - 1)),
        S(x[l] * y[l], (l, 0, n - 1)),
        setting(),
    ),
    ("delta-dependent-range", S(S(D(k, l) * x[k], (k, 0, l)), (l, 0, n - 1)), S(x[l], (l, 0, n - 1)), setting()),
    ("delta-outer-dependent", S(S(D(k, l) * x[k], (l, 0, k)), (k, 0, n - 1)), S(x[k], (k, 0, n - 1)), setting()),
    (
        "delta-inside-atom",
        S(sp.exp(S(D(k, l) * x[k], (k, 0, n - 1))), (l, 0, n - 1)),
        S(sp.exp(x[l]), (l, 0, n - 1)),
        setting(),
    ),
    ("two-deltas", S(D(i, k) * D(j, k) * x[k], (k, 0, n - 1)), D(i, j) * x[i], setting()),
    ("causal-split", S(sp.Piecewise((x[k], k <= i), (0, True)), (k, 0, n - 1)), S(x[k], (k, 0, i)), setting()),
    ("causal-split-ge", S(sp.Piecewise((x[k], k >= i), (0, True)), (k, 0, n - 1)), S(x[k], (k, i, n - 1)), setting()),
    (
        "causal-split-strict",
        S(sp.Piecewise((x[k], k < i), (0, True)), (k, 0, n - 1)),
        S(x[k], (k, 0, i - 1)),
        setting(),
    ),
    ("constant-summand", S(x[i], (k, 0, n - 1)), n * x[i], setting()),
    ("count-dependent-range", S(1, (k, 0, i)), i + 1, setting()),
    ("alpha-equivalence", S(A[i, k] * B[k, j], (k, 0, n - 1)), S(A[i, l] * B[l, j], (l, 0, n - 1)), setting()),
    (
        "product-of-sums",
        S(x[k], (k, 0, n - 1)) * S(y[l], (l, 0, m - 1)),
        S(S(x[k] * y[l], (l, 0, m - 1)), (k, 0, n - 1)),
        setting(),
    ),
    (
        "user-_k0-outside-the-sum",
        S(x[k] * y[user_k0], (k, 0, n - 1)),
        y[user_k0] * S(x[k], (k, 0, n - 1)),
        setting({user_k0: (0, n - 1)}),
    ),
    ("block-reindex", S(S(x[b * u + w], (w, 0, b - 1)), (u, 0, h - 1)), S(x[c], (c, 0, h * b - 1)), setting({})),
    ("softmax-rows-sum-to-one", S(sp.exp(x[j]), (j, 0, n - 1)) / S(sp.exp(x[k]), (k, 0, n - 1)), 1, setting({})),
    (
        "softmax-shift",
        sp.exp(x[i] - y[0]) / S(sp.exp(x[k] - y[0]), (k, 0, n - 1)),
        sp.exp(x[i]) / S(sp.exp(x[k]), (k, 0, n - 1)),
        setting(),
    ),
    ("exp-of-sum-splits", sp.exp(x[i] + y[i]), sp.exp(x[i]) * sp.exp(y[i]), setting()),
    # the sign split on a product of entries, y_i x_i read as one real number p of each sign
    ("split-product-max-min", sp.Max(x[i] * y[i], 0) + sp.Min(x[i] * y[i], 0), x[i] * y[i], setting()),
    (
        "split-product-softplus",
        sp.Max(x[i] * y[i], 0) + sp.log(1 + sp.exp(-sp.Abs(x[i] * y[i]))),
        sp.log(1 + sp.exp(x[i] * y[i])),
        setting(),
    ),
    ("split-product-negated", sp.Abs(-2 * x[i] * y[i]), 2 * sp.Abs(x[i] * y[i]), setting()),
    # a clamp of an increasing function that is 0 at 0: k(e^u − 1), tanh u have the sign of u
    ("monotone-clamp-inside", sp.Min(0, 2 * sp.exp(x[i]) - 2), 2 * sp.exp(sp.Min(0, x[i])) - 2, setting()),
    ("monotone-abs-tanh", sp.Abs(sp.tanh(x[i])), sp.tanh(sp.Abs(x[i])), setting()),
    ("monotone-negative-k", sp.Max(0, 3 - 3 * sp.exp(x[i])), 3 - 3 * sp.exp(sp.Min(0, x[i])), setting()),
    # a root of a sum whose every term has the factor e^{a} > 0: e^{a/2} times the root of the rest
    (
        "root-common-exp",
        sp.sqrt(sp.exp(x[i] - y[i]) + sp.exp(-y[i]) * x[i] ** 2),
        sp.exp(-y[i] / 2) * sp.sqrt(sp.exp(x[i]) + x[i] ** 2),
        setting(),
    ),
    (
        "exp-sum-shift-under-a-root",
        sp.exp(sp.Max(x[i], y[i]) / 2) * sp.sqrt(sp.exp(x[i] - sp.Max(x[i], y[i])) + sp.exp(y[i] - sp.Max(x[i], y[i]))),
        sp.sqrt(sp.exp(x[i]) + sp.exp(y[i])),
        setting(),
    ),
    ("split-affine-product", sp.Max(0, 1 - x[i] * y[i]) + sp.Min(0, 1 - x[i] * y[i]), 1 - x[i] * y[i], setting()),
    (
        "log-root-of-a-difference",
        2 * sp.log(1 + (x[i] - y[i]) ** 2 / (sp.sqrt((x[i] - y[i]) ** 2 + 1) + 1)),
        sp.log(1 + (x[i] - y[i]) ** 2),
        setting(),
    ),
    (
        "exp-sum-shift-three-terms",
        sp.exp(x[i] - sp.Max(0, x[i], y[i]))
        / (
            sp.exp(x[i] - sp.Max(0, x[i], y[i])) + sp.exp(y[i] - sp.Max(0, x[i], y[i])) + sp.exp(-sp.Max(0, x[i], y[i]))
        ),
        sp.exp(x[i]) / (sp.exp(x[i]) + sp.exp(y[i]) + 1),
        setting(),
    ),
]


@pytest.mark.parametrize("name,lhs,rhs,where", TRUE, ids=[t[0] for t in TRUE])
def test_true_identity_is_proved(name, lhs, rhs, where):
    proof = prove_index_identity(lhs, rhs, where)
    assert proof.status == "proved-general", (name, proof.method, proof.residual)
    assert proof.spot_check["max_relative_gap"] <= 1e-25


def test_true_identities_are_many():
    assert len(TRUE) >= 15


# ------------------------------------------------------------------ goals and their records
def test_discharged_goal_is_listed_and_an_unprovable_one_is_guarded():
    norm = Normaliser(ranges={i: (0, n - 1)})
    assert norm.residual(S(D(i, k) * x[k], (k, 0, n - 1)), x[i]) == 0
    assert "i ∈ [0, n - 1]" in norm.assumptions and "i ∈ [0, n - 1]" in norm.discharged
    assert not norm.undischarged and not norm.guarded
    norm = Normaliser(ranges={i: (0, n)})
    out = norm.canon(S(D(i, k) * x[k], (k, 0, n - 1)))
    assert out.has(Indicator) and "i ∈ [0, n - 1]" in norm.guarded
    assert "i ∈ [0, n - 1]" not in norm.assumptions and not norm.undischarged


def test_out_of_range_guard_evaluates_to_zero():
    """Σ_{k=0}^{n-1} δ(n, k)·x_k is 0: the guard [0 ≤ n ≤ n − 1] is false."""
    assert Normaliser(ranges={}).canon(S(D(n, k) * x[k], (k, 0, n - 1))) == 0


def test_without_a_domain_goals_are_assumed_and_listed_undischarged():
    norm = Normaliser()
    assert norm.residual(S(D(n, k) * x[k], (k, 0, n - 1)), x[n]) == 0  # assumed, not proved
    assert norm.undischarged == ["n ∈ [0, n - 1]"]


def test_the_gate_refuses_undischarged_goals(monkeypatch):
    """A normaliser that assumes (no domain) cannot pass the gate: decide refuses the proof."""
    monkeypatch.setattr(Setting, "normaliser", lambda self: Normaliser())
    proof = decide(S(D(n, k) * x[k], (k, 0, n - 1)), x[n], setting())
    assert proof.status != "proved-general"


def test_the_gate_refuses_a_disagreeing_spot_check(monkeypatch):
    class Liar(Normaliser):
        def residual(self, lhs, rhs):
            return sp.Integer(0)

    monkeypatch.setattr(Setting, "normaliser", lambda self: Liar(ranges={}))
    proof = decide(S(x[k], (k, 0, n - 1)), S(x[k], (k, 0, n)), setting())
    assert proof.status == "unproven" and "spot-check disagrees" in proof.method


def test_the_gate_refuses_a_leaked_bound_index(monkeypatch):
    class Leaky(Normaliser):
        def canon(self, expr):
            return super().canon(expr) + sp.Symbol("leak")

    monkeypatch.setattr(Setting, "normaliser", lambda self: Leaky(ranges={}))
    proof = decide(x[i], x[i], setting())
    assert proof.status == "unproven" and "free symbols" in proof.method


def test_refute_identity_raises_when_a_refuted_mutant_normalises_to_zero(monkeypatch):
    class Liar(Normaliser):
        def residual(self, lhs, rhs):
            return sp.Integer(0)

    monkeypatch.setattr(Setting, "normaliser", lambda self: Liar(ranges={}))
    with pytest.raises(NormaliserError):
        refute_identity(S(x[k], (k, 0, n - 1)), S(x[k], (k, 0, n)), setting())


def test_denominators_are_discharged_where_positivity_decides():
    norm = Normaliser(ranges={})
    eps = sp.Symbol("eps", positive=True)
    rms = sp.sqrt(S(x[k] ** 2, (k, 0, n - 1)) / n + eps)  # √(mean x² + ε), ε > 0
    norm.canon(1 / S(sp.exp(x[k]), (k, 0, n - 1)) + 1 / n + 1 / rms)
    assert not norm.hypotheses and len(norm.discharged) == 3
    mask = sp.IndexedBase("mask")
    norm = Normaliser(ranges={}, integer_arrays={"mask": (0, 1)})
    norm.canon(1 / S(mask[k], (k, 0, n - 1)))  # Σ mask may be 0: a hypothesis
    assert norm.hypotheses == ["Sum(mask[_k0], (_k0, 0, n - 1)) ≠ 0"]
    assert norm.hypotheses[0] in norm.assumptions


def test_a_positive_definite_square_plus_a_positive_constant_is_discharged_and_nothing_weaker():
    """(x − z)² + 1/100 as the normaliser expands it, x² − 2xz + z² + 1/100: its quadratic part
    is positive semidefinite and its constant positive, so it is ≠ 0, and so is its root (a
    smoothed |x − z|'s backward divides by it). An indefinite form, a form with no constant and
    a square with a linear term are left as hypotheses."""
    z = sp.IndexedBase("z")
    i, j = sp.symbols("i j", integer=True)
    c = sp.Rational(1, 100)
    for denominator in (
        (x[i] - z[i]) ** 2 + c,
        sp.sqrt((x[i] - z[i]) ** 2 + c),
        (x[i] - 2 * z[j]) ** 2 + x[i] ** 2 + c,
    ):
        norm = Normaliser(ranges={})
        norm.canon(1 / denominator)
        assert not norm.hypotheses, (denominator, norm.hypotheses)
    for denominator in (
        x[i] ** 2 - z[i] ** 2 + c,
        (x[i] - z[i]) ** 2,
        sp.sqrt(x[i] ** 2 - 2 * x[i] * z[i] + z[i] ** 2 - c),
    ):
        norm = Normaliser(ranges={})
        norm.canon(1 / denominator)
        assert norm.hypotheses, denominator
    # x² − xz + z²/4 + x + 1 = (x − z/2)² + x + 1: a linear term, whose sign nothing bounds
    norm = Normaliser(ranges={})
    norm.canon(1 / (x[i] ** 2 - x[i] * z[i] + z[i] ** 2 / 4 + x[i] + 1))
    assert norm.hypotheses


def test_a_denominator_is_nonzero_when_it_is_in_every_branch_of_its_steps():
    """A sign split's branches over one denominator: H(x, 1)·(x² + 1) + (1 − H(x, 1))/(x² + 2) is
    x² + 1 where H = 1, 1/(x² + 2) where H = 0: ≠ 0 in both, so ≠ 0. Not where one branch may be
    0 (H·x + 1 − H is 0 at x = 0, where H(0, 1) = 1), nor a step's value at 0 forgotten
    (H(x, 0)·(x² + 1) + (1 − H(x, 0))·x is 0 at x = 0, where the step is 0)."""
    i = sp.Symbol("i", integer=True)
    H = sp.Heaviside
    good = H(x[i], 1) * (x[i] ** 2 + 1) + (1 - H(x[i], 1)) / (x[i] ** 2 + 2)
    norm = Normaliser(ranges={})
    norm.canon(1 / good)
    assert not norm.hypotheses, norm.hypotheses
    for bad in (H(x[i], 1) * x[i] + 1 - H(x[i], 1), H(x[i], 0) * (x[i] ** 2 + 1) + (1 - H(x[i], 0)) * x[i]):
        norm = Normaliser(ranges={})
        norm.canon(1 / bad)
        assert norm.hypotheses, bad


def test_canonical_indices_are_dummies_that_no_user_symbol_equals():
    assert canonical_index(0) == canonical_index(0) and canonical_index(0) != canonical_index(1)
    assert canonical_index(0) != user_k0 and str(canonical_index(0)) == "_k0"
    out = Normaliser(ranges={}).canon(S(x[k], (k, 0, n - 1)))
    assert list(out.variables) == [canonical_index(0)]


def test_goal_arithmetic():
    norm = Normaliser(ranges={i: (0, n - 1), u: (0, h - 1), w: (0, b - 1), r_: (0, n - 2 - i)})
    ctx = norm._context()
    assert norm.in_range(i, 0, n - 1, ctx) and not norm.in_range(i, 0, n - 2, ctx)
    assert norm.in_range(b * u + w, 0, h * b - 1, ctx) and not norm.in_range(b * u + w + 1, 0, h * b - 1, ctx)
    assert norm.in_range(i + 1 + r_, 0, n - 1, ctx) and not norm.in_range(i + 2 + r_, 0, n - 1, ctx)
    assert not norm.nonnegative(n - 2) and norm.nonnegative(n * h - 1) and norm.nonnegative(n - 1)
    assert not norm.nonnegative(i * u)  # not linear: not decided, so not proved


# ------------------------------------------------------------------ (c) random off-by-one families
def _differs_somewhere(lhs, rhs, where: Setting, sizes: dict) -> bool:
    """Brute force: some assignment of the free indices (every value of their ranges at
    `sizes`, the setting's other sizes and scalars) where lhs ≠ rhs, array entries random."""
    symbols = {**where.sizes, **sizes, **where.scalars}
    ranges = list(where.indices.items())
    ints = {
        name: (int(sp.sympify(lo).subs(symbols)), int(sp.sympify(hi).subs(symbols)))
        for name, (lo, hi) in where.integer_arrays.items()
    }

    def values(pos, env):
        if pos == len(ranges):
            yield dict(env)
            return
        v, (lo, hi) = ranges[pos]
        a, z = int(sp.sympify(lo).subs(env)), int(sp.sympify(hi).subs(env))
        for val in range(a, z + 1):
            env[v] = val
            yield from values(pos + 1, env)
        env.pop(v, None)

    for env in values(0, dict(symbols)):
        for seed in (1, 2):
            p = numeric.Point(symbols={**env}, seed=seed, integer_arrays=ints)
            try:
                a, z = numeric.evaluate(lhs, p), numeric.evaluate(rhs, p)
            except numeric.EvaluationError:
                return True
            if abs(a - z) > mpmath.mpf(10) ** -30 * (1 + abs(a) + abs(z)):
                return True
    return False


def _equal_everywhere(lhs, rhs, where: Setting) -> bool:
    return not any(_differs_somewhere(lhs, rhs, where, sizes={n: size}) for size in (1, 2, 3, 4))


offsets = st.integers(min_value=-2, max_value=2)


@settings(max_examples=40, deadline=None)
@given(lo=offsets, hi=offsets, at=offsets)
def test_random_delta_ranges(lo, hi, at):
    """Σ_{k=lo}^{n-1+hi} δ(i + at, k)·x_k vs x_{i+at}, i ∈ [0, n − 1]: true iff lo ≤ at ≤ hi."""
    lhs, rhs = S(D(i + at, k) * x[k], (k, lo, n - 1 + hi)), x[i + at]
    where = Setting(sizes={n: 3}, indices={i: (0, n - 1)})
    zero = where.normaliser().residual(lhs, rhs) == 0
    if zero:
        assert _equal_everywhere(lhs, rhs, where)
    assert zero == (lo <= at <= hi)


@settings(max_examples=40, deadline=None)
@given(lo=offsets, hi=offsets, at=offsets, strict=st.booleans())
def test_random_causal_splits(lo, hi, at, strict):
    """Σ_{k=lo}^{n-1+hi} [k ≤ i + at]·x_k vs Σ_{k=lo}^{i+at} x_k (k < i + at + 1 when strict)."""
    cond = (k < i + at + 1) if strict else (k <= i + at)
    lhs = S(sp.Piecewise((x[k], cond), (0, True)), (k, lo, n - 1 + hi))
    rhs = S(x[k], (k, lo, i + at))
    where = Setting(sizes={n: 3}, indices={i: (0, n - 1)})
    zero = where.normaliser().residual(lhs, rhs) == 0
    if zero:
        assert _equal_everywhere(lhs, rhs, where)
    if lo - 1 <= at <= hi:  # the split's goal holds: the normaliser must prove it
        assert zero


@settings(max_examples=30, deadline=None)
@given(lo=offsets, hi=offsets, at=offsets)
def test_random_nested_deltas(lo, hi, at):
    """Σ_l Σ_{k=lo}^{l+hi} δ(k, l + at)·x_k·y_l vs Σ_l x_{l+at}·y_l: true iff lo ≤ at ≤ hi."""
    lhs = S(S(D(k, l + at) * x[k] * y[l], (k, lo, l + hi)), (l, 0, n - 1))
    rhs = S(x[l + at] * y[l], (l, 0, n - 1))
    where = Setting(sizes={n: 3})
    zero = where.normaliser().residual(lhs, rhs) == 0
    if zero:
        assert _equal_everywhere(lhs, rhs, where)
    assert zero == (lo <= at <= hi)


@settings(max_examples=25, deadline=None)
@given(lo=st.integers(min_value=-1, max_value=3), hi=st.integers(min_value=-3, max_value=1))
def test_random_constant_counts(lo, hi):
    """Σ_{k=lo}^{n-1+hi} x_i vs (n + hi − lo)·x_i: true iff the range is never negative-length."""
    lhs, rhs = S(x[i], (k, lo, n - 1 + hi)), (n + hi - lo) * x[i]
    where = Setting(sizes={n: 3}, indices={i: (0, n - 1)})
    zero = where.normaliser().residual(lhs, rhs) == 0
    if zero:
        assert _equal_everywhere(lhs, rhs, where)
    assert zero == (hi - lo + 1 >= 0)

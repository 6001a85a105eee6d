"""The normaliser's rules, one at a time, on small identities with known answers."""

import pytest
import sympy as sp

from derivations.proof.rewriting import Normaliser, NormaliserError

n, d = sp.symbols("n d", integer=True, positive=True)
i, j, k, a = sp.symbols("i j k a", integer=True)
x, y = sp.IndexedBase("x", real=True), sp.IndexedBase("y", real=True)


def zero(lhs, rhs):
    return Normaliser().residual(lhs, rhs) == 0


def test_delta_is_sifted_and_range_recorded():
    norm = Normaliser()
    assert norm.residual(sp.Sum(sp.KroneckerDelta(i, k) * x[k], (k, 0, n - 1)), x[i]) == 0
    assert "i ∈ [0, n - 1]" in norm.assumptions


def test_a_free_delta_gives_its_two_indices_one_name():
    """δ(j, k)·f(j) = δ(j, k)·f(k) for free j, k: both sides 0 where j ≠ k, equal where j = k."""
    f = sp.exp(sp.Sum(x[j, a] * y[a], (a, 0, d - 1)))
    g = f.xreplace({j: k})
    assert zero(sp.KroneckerDelta(j, k) * f, sp.KroneckerDelta(j, k) * g)
    assert zero(sp.KroneckerDelta(j, k) * x[i, j] * y[k], sp.KroneckerDelta(j, k) * x[i, k] * y[j])
    # without the delta, or with another one, the two differ
    assert not zero(f, g)
    assert not zero(sp.KroneckerDelta(j, k + 1) * x[j], sp.KroneckerDelta(j, k + 1) * x[k])
    assert not zero(sp.KroneckerDelta(i, k) * x[j], sp.KroneckerDelta(i, k) * x[k])


def test_the_square_of_a_sine_is_one_minus_the_cosines():
    u = x[i] + y[j]
    assert zero(sp.sin(u) ** 2 + sp.cos(u) ** 2, 1)
    assert zero(sp.sin(u) ** 3, sp.sin(u) - sp.sin(u) * sp.cos(u) ** 2)
    assert not zero(sp.cos(u) ** 2, 1)
    assert not zero(sp.sin(u) ** 2 + sp.cos(u) ** 2, sp.sin(u))
    assert not zero(sp.sin(x[i]) ** 2 + sp.cos(y[j]) ** 2, 1)  # not one angle


def test_sines_and_cosines_of_multiples_of_one_angle_by_their_exponentials():
    """1 − cos u = 2 sin²(u/2) and sin 2u = 2 sin u cos u: e^{iu} written as (e^{iu/2})²."""
    u = x[i] + y[j]
    assert zero(1 - sp.cos(u), 2 * sp.sin(u / 2) ** 2)
    assert zero(sp.sin(2 * u), 2 * sp.sin(u) * sp.cos(u))
    assert zero(sp.cos(3 * u), 4 * sp.cos(u) ** 3 - 3 * sp.cos(u))
    assert not zero(1 - sp.cos(u), 2 * sp.sin(u) ** 2)  # the half angle dropped
    assert not zero(sp.sin(2 * u), sp.sin(u) * sp.cos(u))
    assert not zero(sp.cos(u / 3) ** 2, sp.cos(u))


def test_a_root_beside_its_square_root_is_positive():
    """x + √(x² + c) > 0 (c > 0): logarithms of it compare by exponentiating; x + √(x² − 1) is not."""
    r = sp.sqrt(x[i] ** 2 + 1)
    assert zero(sp.log(x[i] + r) + sp.log(r - x[i]), 0)  # (r + x)(r − x) = 1
    assert zero(sp.log(2 * x[i] + 2 * r), sp.log(2) + sp.log(x[i] + r))
    assert not zero(sp.log(x[i] + r) + sp.log(r - x[i]), sp.log(2))
    s = sp.sqrt(x[i] ** 2 - 1)
    assert not zero(sp.log(x[i] + s) + sp.log(x[i] - s), 0)  # not positive for x < −1


def test_bound_names_do_not_matter():
    assert zero(sp.Sum(x[i, k] * y[k], (k, 0, n - 1)), sp.Sum(x[i, j] * y[j], (j, 0, n - 1)))


def test_nested_sums_and_products_expand():
    lhs = sp.Sum(x[k], (k, 0, n - 1)) * sp.Sum(y[j], (j, 0, d - 1))
    rhs = sp.Sum(sp.Sum(x[k] * y[j], (j, 0, d - 1)), (k, 0, n - 1))
    assert zero(lhs, rhs)


def test_different_sums_are_not_equal():
    assert not zero(sp.Sum(x[k], (k, 0, n - 1)), sp.Sum(y[k], (k, 0, n - 1)))
    assert not zero(sp.Sum(x[k], (k, 0, n - 1)), sp.Sum(x[k], (k, 0, d - 1)))


def test_constant_summand_counts_terms():
    assert zero(sp.Sum(x[i], (k, 0, n - 1)), n * x[i])


def test_exp_of_sum_splits_and_cancels():
    e = sp.exp(x[i] - y[i]) / sp.Sum(sp.exp(x[k] - y[i]), (k, 0, n - 1))
    assert zero(e, sp.exp(x[i]) / sp.Sum(sp.exp(x[k]), (k, 0, n - 1)))


def test_causal_range_split():
    pw = sp.Piecewise((x[j], j <= i), (0, True))
    assert zero(sp.Sum(pw, (j, 0, n - 1)), sp.Sum(x[j], (j, 0, i)))


def test_leaked_symbol_is_an_error():
    class Leaky(Normaliser):
        def canon(self, expr):
            return super().canon(expr) + sp.Symbol("leak")

    with pytest.raises(NormaliserError):
        Leaky().residual(x[i], x[i])


def test_sigmoid_is_the_documents_formula():
    """σ(u) normalises to 1/(1 + e^{−u}); its derivative rule σ(1 − σ) agrees with sympy.diff of
    that formula; the numeric evaluator evaluates it exactly."""
    import mpmath

    from derivations.language.arrays import Sigmoid, document_form
    from derivations.proof import numeric

    u = sp.Symbol("u", real=True)
    nz = Normaliser()
    assert nz.is_zero(Sigmoid(u), 1 / (1 + sp.exp(-u)))
    assert nz.is_zero(sp.diff(Sigmoid(u), u), sp.diff(1 / (1 + sp.exp(-u)), u))
    assert nz.is_zero(sp.diff(u * Sigmoid(u), u), sp.diff(document_form(u * Sigmoid(u)), u))
    assert not nz.is_zero(Sigmoid(u), 1 / (1 + sp.exp(u)))
    assert not nz.is_zero(sp.diff(Sigmoid(u), u), Sigmoid(u))
    v = numeric.evaluate(Sigmoid(u), numeric.Point(symbols={u: sp.Rational(-3, 2)}))
    assert v == 1 / (1 + mpmath.exp(mpmath.mpf(3) / 2))


def test_a_sign_split_through_a_constant_of_known_sign():
    """max(0, βx) = β·max(0, x) and the softplus with a slope are split on the sign of x when β is
    known positive (βx has x's sign); with β of unknown sign the same identity is false (β < 0)
    and is not proved; an entry as the coefficient is never taken for a constant."""
    pos, real = sp.Symbol("beta", positive=True), sp.Symbol("beta", real=True)
    u = x[i, j]
    assert zero(sp.Max(0, pos * u), pos * sp.Max(0, u))
    softplus = sp.log(1 + sp.exp(pos * u)) / pos
    stable = (sp.Max(pos * u, 0) + sp.log(1 + sp.exp(-pos * sp.Abs(u)))) / pos
    assert zero(softplus, stable)
    assert not zero(softplus, (sp.Max(pos * u, 0) + sp.log(1 + sp.exp(-sp.Abs(u)))) / pos)  # e^{−|x|} for e^{−β|x|}
    assert not zero(sp.Max(0, real * u), real * sp.Max(0, u))
    assert not zero(sp.Max(0, y[i] * u), y[i] * sp.Max(0, u))

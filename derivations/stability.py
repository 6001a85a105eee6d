"""Numerically stable rewrites, each a proved lemma: the overflow-free form equals the document's.

A formula that is right can still overflow: log(1 + e^{x}) is ∞ for x ≥ 89 in float32, and
1/(1 + e^{−x}) divides by ∞ for x ≤ −89. The stable forms below evaluate every exponential at a
non-positive argument (e^{−|x|} ∈ (0, 1]), or use the library's accurate log1p and expm1 where a
sum would cancel. Each is proved equal to the document's formula for every real x by the index
normaliser's region reasoning (derivations/proof/rewriting.py): a case split on the sign of x,
|x|, max, min, H and sign evaluated in each branch, logarithms compared by exponentiating, tanh
written by its exponentials; log1p(u) = log(1 + u), expm1(u) = e^{u} − 1 by definition.

    softplus     log(1 + e^{x}) = max(x, 0) + log1p(e^{−|x|})
    log σ        log σ(x) = min(x, 0) − log1p(e^{−|x|})
    sigmoid      σ(x) = [x ≥ 0] 1/(1 + e^{−|x|}) + [x < 0] e^{−|x|}/(1 + e^{−|x|})
    tanh         tanh x = sign(x) · (−expm1(−2|x|)) / (2 + expm1(−2|x|))
    tanh ratio   (e^{x} − e^{−x})/(e^{x} + e^{−x}) = tanh x,  (e^{x} − 1)/(e^{x} + 1) = tanh(x/2)
    log cosh     log cosh x = |x| + log1p(e^{−2|x|}) − log 2;  sinh x / cosh x = tanh x
    centred σ    1 − 2σ(−2x) = tanh x
    1 − σ        k σ(x) − k + s = −k σ(−x) + s                (anywhere in a sum)
    σ difference k σ(x) − k σ(−x) + s = k tanh(x/2) + s         (anywhere in a sum)
    logsumexp    log Σ_j e^{x_j} = m + log Σ_j e^{x_j − m}    for any m (the row max; a row mean too)
    softmax      e^{x_j}/Σ_l e^{x_l} = e^{x_j − m}/Σ_l e^{x_l − m}   for any m (the row max)
    expectation  Σ_l a_l e^{v_l}/Σ_l b_l e^{v_l} = the same with v − m   for any m (the row max)
    expm1        k e^{x} − k + s = k expm1(x) + s             (anywhere in a sum)
    log1p        log(1 + v) = log1p(v)                        (v > −1)
    √ beside x   x + √(x² + c) = [x ≥ 0] (x + R) + [x < 0] c/(R + |x|),  R = hypot(x, √c)
    hypot        (v² + c)^{p} = hypot(v, √c)^{2p},  c > 0, p an odd multiple of ½
    squares      (v² + w² + c)^{p} = hypot(v, hypot(w, √c))^{2p},  c ≥ 0 (w, v arrays)
    clamp expm1  min(0, k(e^{u} − 1)) = k expm1(min(u, 0)),  k > 0 (max alike; swapped for k < 0)
    logaddexp    log(k e^{a} + k e^{b}) = log k + max(a, b) + log1p(e^{−|a − b|})
    exp pair     (k e^{a} + k e^{b})^{−m} = k^{−m} e^{−ma} (1 + e^{b − a})^{−m}
    exp sum      S^{p} = e^{pm} (S e^{−m})^{p},  log S = m + log(S e^{−m}),  S = Σ k_i e^{a_i} + c  (any m)
    branch clamp H(x − t, c) g(x) = H(x − t, c) g(max(x, t));  (1 − H(x − t, c)) g(x) = (…) g(min(x, t))
    root − √c    k √(v² + c) − k √c = k v²/(hypot(v, √c) + √c)
    log root     log(v² + c) = 2 log hypot(v, √c);  log(1 + v²) = 2 log1p(v²/(hypot(v, 1) + 1))
    1 − cos      k cos v − k = −2k sin²(v/2)
    exp product  e^{a} e^{b} = e^{a + b}
    GELU (tanh)  x/2 (1 + tanh u) = x σ(2u)
    Mish         tanh(softplus x) = [x ≥ 0] (1 + 2e^{−x})/(1 + 2e^{−x} + 2e^{−2x})
                                  + [x < 0] (e^{2x} + 2e^{x})/(e^{2x} + 2e^{x} + 2)
"""

from __future__ import annotations

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from .language import stabilise as rw
from .language.arrays import Array, Gaussian, Hypot, NormalCDF, RowMax, RowMean, RowSum, Sigmoid, entry, index, size
from .proof.core import Claim, Setting, index_claim

r, n = size("r"), size("n")
i, j = index("i"), index("j")
X = Array("x", (r, n))
x = entry(X, (i, j))  # one entry x_ij: a real number
setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)})
SOURCE = "numerical stability (float32 exp overflows at 88.7); seed B §13"

ax = sp.Abs(x)
small = sp.exp(-ax)  # e^{−|x|} ∈ (0, 1]: never overflows
nonneg, neg = sp.Heaviside(x, 1), sp.Heaviside(-x, 0)  # [x ≥ 0], [x < 0]


def _at_zero(lhs, rhs) -> dict | None:
    """A counterexample at x = 0, where a mistake in the boundary's branch shows."""
    a, b = (sp.sympify(e).xreplace({x: 0}) for e in (lhs, rhs))
    if sp.simplify(a - b) == 0:
        return None
    return {"at": {str(x): 0}, "lhs": float(a), "rhs": float(b)}


def _lemma(id, title, latex, stable, document, mutants, source=SOURCE) -> Claim:
    return index_claim(
        id,
        title,
        source,
        latex,
        lhs=stable,
        rhs=document,
        setting=setting,
        mutants=mutants,
        method="index normaliser with region reasoning (a case split on the sign of x)",
    )


def _rewrite_lemma(rule: rw.Rewrite, title, latex, mutants) -> Claim:
    """The lemma of a rewrite of one argument: its own stable form equals its own document form
    at u = x_ij (the very functions codegen applies), under the rewrite's claim id."""
    return _lemma(rule.lemma, title, latex, rule.stable(x), rule.document(x), mutants)


def _cases_lemma(rule: rw.Rewrite, title, latex, matches, *, setting, mutants, method) -> Claim:
    """The lemma of a rewrite at several matches (the cases as the rewrite finds them on arrays):
    its stable form equals its document form at each."""
    return index_claim(
        rule.lemma,
        title,
        SOURCE,
        latex,
        lhs=[rule.stable(m_) for m_ in matches],
        rhs=[rule.document(m_) for m_ in matches],
        setting=setting,
        mutants=mutants,
        method=method,
    )


# the rewrites that codegen applies (derivations/language/stabilise.py), each proved from its own
# document and stable functions at u = x_ij
softplus = _rewrite_lemma(
    rw.SOFTPLUS,
    "Softplus without overflow: max(x, 0) + log1p(e^{−|x|})",
    r"\log\left(1 + e^{x}\right) = \max(x, 0) + \operatorname{log1p}\left(e^{-|x|}\right)",
    {
        "no-abs": ("e^{−x} for e^{−|x|}: wrong for x < 0", sp.Max(x, 0) + log1p(sp.exp(-x))),
        "no-max": ("the max(x, 0) term dropped", log1p(small)),
    },
)

log_sigmoid = _rewrite_lemma(
    rw.LOG_SIGMOID,
    "log σ without overflow: min(x, 0) − log1p(e^{−|x|})",
    r"\log \sigma(x) = \min(x, 0) - \operatorname{log1p}\left(e^{-|x|}\right)",
    {
        "max-for-min": ("max(x, 0) for min(x, 0)", sp.Max(x, 0) - log1p(small)),
        "plus-log1p": ("+ log1p for − log1p", sp.Min(x, 0) + log1p(small)),
    },
)

sigmoid_wrong_boundary = nonneg / (1 + small) + sp.Heaviside(-x, 1) * small / (1 + small)
sigmoid = _lemma(
    "stability.sigmoid",
    "The sigmoid from e^{−|x|}: each branch divides by a number in [1, 2]",
    r"\sigma(x) = \frac{1}{1 + e^{-x}} = [x \geq 0] \frac{1}{1 + e^{-|x|}} + [x < 0] \frac{e^{-|x|}}{1 + e^{-|x|}}",
    nonneg / (1 + small) + neg * small / (1 + small),
    1 / (1 + sp.exp(-x)),
    {
        "branches-swapped": ("the two branches swapped", neg / (1 + small) + nonneg * small / (1 + small)),
        "boundary-in-both": ("[x ≤ 0] for [x < 0]: x = 0 counted twice (σ(0) = 1)", sigmoid_wrong_boundary),
    },
)
# a mistake at the boundary alone: its counterexample is x = 0 (the points drawn avoid 0)
sigmoid.mutants[-1].refute = lambda: _at_zero(sigmoid_wrong_boundary, 1 / (1 + sp.exp(-x)))

tanh_expm1 = _lemma(
    "stability.tanh",
    "tanh from expm1(−2|x|): accurate at small x, no overflow at large |x|",
    r"\tanh x = \operatorname{sign}(x) \frac{-\operatorname{expm1}(-2|x|)}{2 + \operatorname{expm1}(-2|x|)}",
    sp.sign(x) * (-expm1(-2 * ax)) / (2 + expm1(-2 * ax)),
    sp.tanh(x),
    {
        "no-sign": ("the sign(x) dropped: |tanh x|", (-expm1(-2 * ax)) / (2 + expm1(-2 * ax))),
        "one-not-two": (
            "1 + expm1 for 2 + expm1 in the denominator",
            sp.sign(x) * (-expm1(-2 * ax)) / (1 + expm1(-2 * ax)),
        ),
    },
)

# log Σ_j e^{x_ij} = m_i + log Σ_j e^{x_ij − m_i} for any per-row m (the row max: no e^{x} overflows),
# over a row sum and a row mean, from the rewrite's own functions (rw.LOGSUMEXP)
m = entry(RowMax(X), (i, 0))
lse_cases = [(RowSum, X), (RowMean, X), (RowSum, 2 * X + 1)]
lse_stable = [entry(rw.LOGSUMEXP.stable(case), (i, 0)) for case in lse_cases]
lse_document = [entry(rw.LOGSUMEXP.document(case), (i, 0)) for case in lse_cases]
m_cases = [m, m, entry(RowMax(2 * X + 1), (i, 0))]
logsumexp = index_claim(
    rw.LOGSUMEXP.lemma,
    "Log-sum-exp with the row max shifted out (a row sum or a row mean)",
    SOURCE,
    r"\log \sum_{j} e^{x_{j}} = m + \log \sum_{j} e^{x_{j} - m}, \quad "
    r"\log \frac{1}{n} \sum_{j} e^{x_{j}} = m + \log \frac{1}{n} \sum_{j} e^{x_{j} - m} "
    r"\quad \text{for any } m, \text{ in particular } m = \max_{j} x_{j}",
    lhs=lse_stable,
    rhs=lse_document,
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1)}),
    mutants={
        "not-added-back": ("the shift not added back", [e - mc for e, mc in zip(lse_stable, m_cases)]),
        "subtracted-twice": ("m − log Σ e^{x − m}", [2 * mc - e for e, mc in zip(lse_stable, m_cases)]),
    },
)

# e^{x_ij}/Σ_j e^{x_ij} = e^{x_ij − m_i}/Σ_j e^{x_ij − m_i} for any per-row m (the row max: no
# e^{x} overflows, the denominator ≥ 1), over a row sum and a row mean, from rw.SOFTMAX's functions
k_soft = sp.Symbol("k", positive=True)
softmax_cases = [(RowSum, X, sp.S.One), (RowMean, X, sp.S.One), (RowSum, 2 * X + 1, k_soft)]
soft_stable = [entry(rw.SOFTMAX.stable(case), (i, j)) for case in softmax_cases]
soft_document = [entry(rw.SOFTMAX.document(case), (i, j)) for case in softmax_cases]
softmax_shift = index_claim(
    rw.SOFTMAX.lemma,
    "A softmax written as its formula, with the row max shifted out of both sides of the ratio",
    SOURCE,
    r"\frac{e^{x_{j}}}{\sum_{l} e^{x_{l}}} = \frac{e^{x_{j} - m}}{\sum_{l} e^{x_{l} - m}}"
    r"\quad \text{for any } m, \text{ in particular } m = \max_{l} x_{l}",
    lhs=soft_stable,
    rhs=soft_document,
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={k_soft: sp.Rational(3, 2)}),
    mutants={
        "numerator-unshifted": (
            "e^{x_j}/Σ e^{x − m}: the shift left out of the numerator",
            [entry(k * sp.exp(v) / R(sp.exp(v - RowMax(v))), (i, j)) for R, v, k in softmax_cases],
        ),
        "denominator-unshifted": (
            "e^{x_j − m}/Σ e^{x}: the shift left out of the denominator",
            [entry(k * sp.exp(v - RowMax(v)) / R(sp.exp(v)), (i, j)) for R, v, k in softmax_cases],
        ),
    },
)

# Σ_j A e^{v}/Σ_j B e^{v} = Σ_j A e^{v − m}/Σ_j B e^{v − m} for any per-row m: an expectation under
# a softmax written as its formula (Σ x e^{x}/Σ e^{x}, an entropy's second term), from
# rw.SUMS_RATIO's functions; each case a row value (r, 1), read at its row
sums_cases = [
    (RowSum, X, RowSum, sp.S.One, X, sp.S.One),
    (RowMean, X**2, RowSum, k_soft, 2 * X + 1, sp.S.One),
]
sums_ratio_shift = index_claim(
    rw.SUMS_RATIO.lemma,
    "An expectation under a softmax written as its formula, the row max shifted out of both sums",
    SOURCE,
    r"\frac{\sum_{l} a_{l} e^{v_{l}}}{\sum_{l} b_{l} e^{v_{l}}} = \frac{\sum_{l} a_{l} e^{v_{l} - m}}{\sum_{l} b_{l} e^{v_{l} - m}}"
    r"\quad \text{for any } m, \text{ in particular } m = \max_{l} v_{l}",
    lhs=[entry(rw.SUMS_RATIO.stable(case), (i, 0)) for case in sums_cases],
    rhs=[entry(rw.SUMS_RATIO.document(case), (i, 0)) for case in sums_cases],
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1)}, scalars={k_soft: sp.Rational(3, 2)}),
    mutants={
        "numerator-unshifted": (
            "Σ A e^{v}/Σ B e^{v − m}: the shift left out of the numerator",
            [entry(k * R1(A * sp.exp(v)) / R2(B * sp.exp(v - RowMax(v))), (i, 0)) for R1, A, R2, B, v, k in sums_cases],
        ),
        "denominator-unshifted": (
            "Σ A e^{v − m}/Σ B e^{v}: the shift left out of the denominator",
            [entry(k * R1(A * sp.exp(v - RowMax(v))) / R2(B * sp.exp(v)), (i, 0)) for R1, A, R2, B, v, k in sums_cases],
        ),
    },
)

# log(e^{x_ij}/Σ_k e^{x_ik}) = x_ij − log Σ_k e^{x_ik}: a loss's log p_t read as log-softmax (no
# log 0 where p_t underflows), from rw.LOG_SOFTMAX's functions, at x and at a shifted 2x + 1
log_softmax_cases = [X, 2 * X + 1, X - RowMax(X)]
log_softmax = index_claim(
    rw.LOG_SOFTMAX.lemma,
    "The log of a softmax as log-softmax: v − log Σ e^{v}",
    SOURCE,
    r"\log \frac{e^{x_{j}}}{\sum_{l} e^{x_{l}}} = x_{j} - \log \sum_{l} e^{x_{l}}",
    lhs=[entry(rw.LOG_SOFTMAX.stable(v), (i, j)) for v in log_softmax_cases],
    rhs=[entry(rw.LOG_SOFTMAX.document(v), (i, j)) for v in log_softmax_cases],
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}),
    mutants={
        "plus-log": (
            "v + log Σ e^{v}",
            [entry(v + sp.log(RowSum(sp.exp(v))), (i, j)) for v in log_softmax_cases],
        ),
        "log-mean": (
            "v − log of the row's mean of e^{v}",
            [entry(v - sp.log(RowMean(sp.exp(v))), (i, j)) for v in log_softmax_cases],
        ),
    },
)

u = sp.Symbol("u", real=True)  # GELU's √(2/π)(x + 0.044715x³), any real number
gelu_setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={u: sp.Rational(3, 4)})
gelu_tanh = index_claim(
    "stability.gelu_tanh",
    "GELU's tanh form as a sigmoid: x/2 (1 + tanh u) = x σ(2u)",
    "seed B §12",
    r"\frac{x}{2}\left(1 + \tanh u\right) = x \, \sigma(2 u)",
    lhs=x * Sigmoid(2 * u),
    rhs=x / 2 * (1 + sp.tanh(u)),
    setting=gelu_setting,
    mutants={
        "sigma-of-u": ("x σ(u) for x σ(2u)", x * Sigmoid(u)),
        "half-dropped": ("x (1 + tanh u)", x * (1 + sp.tanh(u))),
    },
    method="index normaliser (tanh written by its exponentials)",
)

sp_x = sp.log(1 + sp.exp(x))  # softplus(x)
e1, e2 = sp.exp(-x), sp.exp(-2 * x)
mish_positive = (1 + 2 * e1) / (1 + 2 * e1 + 2 * e2)  # x ≥ 0: e^{−x} ≤ 1
mish_negative = (sp.exp(2 * x) + 2 * sp.exp(x)) / (sp.exp(2 * x) + 2 * sp.exp(x) + 2)  # x < 0: e^{x} < 1
mish = _lemma(
    "stability.mish",
    "Mish's tanh(softplus x) with every exponential at a non-positive argument",
    r"\tanh\left(\log\left(1 + e^{x}\right)\right) = [x \geq 0] \frac{1 + 2 e^{-x}}{1 + 2 e^{-x} + 2 e^{-2x}} + "
    r"[x < 0] \frac{e^{2x} + 2 e^{x}}{e^{2x} + 2 e^{x} + 2}",
    nonneg * mish_positive + neg * mish_negative,
    sp.tanh(sp_x),
    # (the branches swapped would be no mistake: the two forms are equal everywhere, only their
    # floating-point values differ, which no identity can tell; edges checks that)
    {
        "exponent-halved": (
            "e^{−x} for e^{−2x} in the x ≥ 0 denominator",
            nonneg * (1 + 2 * e1) / (1 + 2 * e1 + 2 * e1) + neg * mish_negative,
        ),
        "one-not-two": (
            "1 + e^{−x} for 1 + 2e^{−x} in the x ≥ 0 numerator",
            nonneg * (1 + e1) / (1 + 2 * e1 + 2 * e2) + neg * mish_negative,
        ),
    },
    source="Mish (x tanh softplus x); numerical stability",
)

sigmoid_node = _lemma(
    rw.SIGMOID.lemma,
    "1/(1 + e^{−x}) is the sigmoid, printed overflow-free (expit, torch.sigmoid)",
    r"\frac{1}{1 + e^{-x}} = \sigma(x)",
    rw.SIGMOID.stable(x),
    rw.SIGMOID.document(x),
    {"sign": ("σ(−x) for σ(x)", Sigmoid(-x)), "complement": ("1 − σ(x)", 1 - Sigmoid(x))},
)

v = sp.Symbol("v", real=True)  # the exponent of the ratio: any real number
sigmoid_ratio = index_claim(
    "stability.sigmoid_ratio",
    "A ratio e^{v}/(1 + e^{v})^{k} as sigmoids: e^{v} σ(−v) = σ(v)",
    SOURCE,
    r"\frac{e^{x}}{\left(1 + e^{x}\right)^{k}} = \sigma(x)\, \sigma(-x)^{k-1}, \quad "
    r"\frac{1}{\left(1 + e^{x}\right)^{k}} = \sigma(-x)^{k}",
    lhs=[Sigmoid(x) * Sigmoid(-x), Sigmoid(x) * Sigmoid(-x) ** 2, Sigmoid(-x) ** 3],
    rhs=[sp.exp(x) / (1 + sp.exp(x)) ** 2, sp.exp(x) / (1 + sp.exp(x)) ** 3, 1 / (1 + sp.exp(x)) ** 3],
    setting=setting,
    mutants={
        "one-power-short": ("σ(x) σ(−x)^{k−2}", [Sigmoid(x), Sigmoid(x) * Sigmoid(-x), Sigmoid(-x) ** 2]),
        "sign": (
            "σ(−x) σ(x)^{k−1} with the signs swapped at k = 3",
            [Sigmoid(x) * Sigmoid(-x), Sigmoid(-x) * Sigmoid(x) ** 2, Sigmoid(x) ** 3],
        ),
    },
    method="index normaliser (σ read as 1/(1 + e^{−u}))",
)

c = sp.Symbol("c", positive=True)  # the gaussian's rate: e^{−c u²}, c > 0
gauss_setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={c: sp.Rational(1, 2)})
gaussian = index_claim(
    rw.GAUSSIAN.lemma,
    "e^{−c x²} as the Gaussian node G(√(2c) x) = e^{−(√(2c) x)²/2}, one helper call",
    SOURCE,
    r"e^{-c x^{2}} = G\left(\sqrt{2c}\, x\right), \quad G(u) = e^{-u^{2}/2},\ c > 0",
    lhs=rw.GAUSSIAN.stable((c, x)),
    rhs=rw.GAUSSIAN.document((c, x)),
    setting=gauss_setting,
    mutants={
        "rate-doubled": ("G(2√c x) = e^{−2c x²}", Gaussian(2 * sp.sqrt(c) * x)),
        "no-two": ("G(√c x) = e^{−c x²/2}", Gaussian(sp.sqrt(c) * x)),
    },
    method="index normaliser (G read as e^{−u²/2})",
)

sech2 = _lemma(
    rw.SECH2.lemma,
    "1 − tanh² x from e^{−2|x|}: the sech² without the cancellation 1 − 1",
    r"1 - \tanh^{2} x = \frac{4 e^{-2|x|}}{\left(1 + e^{-2|x|}\right)^{2}}",
    rw.SECH2.stable((1, x)),
    rw.SECH2.document((1, x)),
    {
        "no-four": ("e^{−2|x|}/(1 + e^{−2|x|})²: the 4 forgotten", sp.exp(-2 * ax) / (1 + sp.exp(-2 * ax)) ** 2),
        "rate-halved": ("e^{−|x|} for e^{−2|x|}", 4 * sp.exp(-ax) / (1 + sp.exp(-ax)) ** 2),
    },
)

expm1_lemma = _lemma(
    rw.EXPM1.lemma,
    "e^{x} − 1 as expm1(x): no cancellation near 0",
    r"e^{x} - 1 = \operatorname{expm1}(x)",
    rw.EXPM1.stable(x),
    rw.EXPM1.document(x),
    {"plus-one": ("expm1(x) + 1", expm1(x) + 1), "sign": ("expm1(−x)", expm1(-x))},
)

normal_cdf = _lemma(
    rw.NORMAL_CDF.lemma,
    "1 + erf(x/√2) is 2Φ(x), the normal CDF, printed as one call",
    r"1 + \operatorname{erf}\left(\frac{x}{\sqrt{2}}\right) = 2 \Phi(x)",
    rw.NORMAL_CDF.stable((1, x)),
    rw.NORMAL_CDF.document((1, x)),
    {
        "unscaled": ("2Φ(√2 x): erf(x) for erf(x/√2)", 2 * NormalCDF(sp.sqrt(2) * x)),
        "no-two": ("Φ(x): the 2 forgotten", NormalCDF(x)),
    },
)

# e^{u} − 1 anywhere in a sum (ELU's max(x, 0) + e^{min(x, 0)} − 1, SELU's λα e^{min(x, 0)} − λα):
# k e^{x} − k + s = k expm1(x) + s for any k and any rest s of the sum
k_s, s_s = sp.Symbol("k", real=True), sp.Symbol("s", real=True)
sum_setting = Setting(
    sizes={r: 2, n: 3},
    indices={i: (0, r - 1), j: (0, n - 1)},
    scalars={k_s: sp.Rational(3, 2), s_s: sp.Rational(-2, 7)},
)
expm1_in_sum = index_claim(
    rw.EXPM1_SUM.lemma,
    "k e^{x} − k inside a longer sum as k expm1(x): no cancellation near 0",
    SOURCE,
    r"k e^{x} - k + s = k \operatorname{expm1}(x) + s",
    lhs=[rw.EXPM1_SUM.stable((k_s, x, s_s)), rw.EXPM1_SUM.stable((1, sp.Min(x, 0), sp.Max(x, 0)))],
    rhs=[rw.EXPM1_SUM.document((k_s, x, s_s)), rw.EXPM1_SUM.document((1, sp.Min(x, 0), sp.Max(x, 0)))],
    setting=sum_setting,
    mutants={
        "constant-kept": (
            "k expm1(x) − k + s: the −k counted twice",
            [k_s * expm1(x) - k_s + s_s, expm1(sp.Min(x, 0))],
        ),
        "unscaled": ("expm1(x) + s: the coefficient k dropped", [expm1(x) + s_s, expm1(sp.Min(x, 0)) + sp.Max(x, 0)]),
    },
    method="index normaliser with region reasoning (expm1(u) = e^{u} − 1; a case split on the sign of x)",
)

# log(1 + v) = log1p(v) for any v > −1: here v = x² ≥ 0 and v = −σ(x) ∈ (−1, 0)
log1p_cases = [x**2, -Sigmoid(x)]
log1p_lemma = index_claim(
    rw.LOG1P.lemma,
    "log(1 + v) as log1p(v): accurate where |v| is small",
    SOURCE,
    r"\log\left(1 + v\right) = \operatorname{log1p}(v), \quad v > -1 \quad "
    r"\left(v = x^{2},\ v = -\sigma(x)\right)",
    lhs=[rw.LOG1P.stable(v_) for v_ in log1p_cases],
    rhs=[rw.LOG1P.document(v_) for v_ in log1p_cases],
    setting=setting,
    mutants={
        "sign": ("log1p(−v)", [log1p(-v_) for v_ in log1p_cases]),
        "one-twice": ("log1p(1 + v) = log(2 + v)", [log1p(1 + v_) for v_ in log1p_cases]),
    },
    method="index normaliser (log1p(v) = log(1 + v))",
)

# v + √(v² + c), c > 0 (squareplus' (x + √(x² + b))/2): for v < 0 it is c/(√(v² + c) − v), a
# quotient of positive numbers, where the sum cancels (0 at v = −1e4 in float32, for c/(2|v|))
c_root = sp.Symbol("c", positive=True)
root_setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={c_root: sp.Rational(3, 4)})
root_stable = rw.SQRT_BESIDE.stable((1, x, c_root, 0))
R_root = Hypot(x, sp.sqrt(c_root))  # √(x² + c), printed hypot(x, √c)
sqrt_rationalised = index_claim(
    rw.SQRT_BESIDE.lemma,
    "x + √(x² + c) rationalised where x < 0: no cancellation, no x²",
    "squareplus (So & Kweon 2021); numerical stability",
    r"x + \sqrt{x^{2} + c} = \max(x, 0) + [x \geq 0] R + [x < 0] \frac{c}{R - \min(x, 0)}, "
    r"\quad R = \operatorname{hypot}(x, \sqrt{c}), \; c > 0",
    lhs=root_stable,
    rhs=rw.SQRT_BESIDE.document((1, x, c_root, 0)),
    setting=root_setting,
    mutants={
        "no-c": (
            "the c dropped from the numerator: 0 for x < 0",
            sp.Heaviside(x, 1) * (x + R_root) + sp.Heaviside(-x, 0) / (R_root + sp.Abs(x)),
        ),
        "plus-min": (
            "R − |x| in the denominator",
            sp.Heaviside(x, 1) * (x + R_root) + sp.Heaviside(-x, 0) * c_root / (R_root - sp.Abs(x)),
        ),
        "no-step": (
            "R without its step [x ≥ 0]: counted twice for x < 0",
            sp.Heaviside(x, 1) * x + R_root + sp.Heaviside(-x, 0) * c_root / (R_root + sp.Abs(x)),
        ),
    },
    method="index normaliser with region reasoning (a case split on the sign of x; √ squared)",
)

# (v² + c)^p for p an odd multiple of ½ as hypot(v, √c)^{2p}: v² = ∞ for |v| > 1.8e19 in float32
# where √(v² + c) is about |v|; the cases as a person writes them: √(x² + c), 1/√(1 + α x²),
# (c + (x − 1)²)^{3/2}, from the rewrite's own functions at (v, √c, p) (tests/test_stable_rewrites.py
# holds the match on arrays)
alpha_root = sp.Symbol("alpha", positive=True)
hypot_setting = Setting(
    sizes={r: 2, n: 3},
    indices={i: (0, r - 1), j: (0, n - 1)},
    scalars={c_root: sp.Rational(3, 4), alpha_root: sp.Rational(5, 2)},
)
hypot_matches = [  # (v, √c, p), as the rewrite matches them on arrays
    (x, sp.sqrt(c_root), sp.S.Half),
    (sp.sqrt(alpha_root) * x, sp.S.One, -sp.S.Half),
    (x - 1, sp.sqrt(c_root), sp.Rational(3, 2)),
]
hypot = _cases_lemma(
    rw.HYPOT,
    "√(v² + c) as hypot(v, √c): the root of a sum of squares without forming the squares",
    r"\left(v^{2} + c\right)^{p} = \operatorname{hypot}\left(v, \sqrt{c}\right)^{2p}, \quad c > 0, \; "
    r"p \in \{\pm\tfrac{1}{2}, \pm\tfrac{3}{2}, \dots\}",
    hypot_matches,
    setting=hypot_setting,
    mutants={
        "c-not-root": (
            "hypot(v, c) for hypot(v, √c)",
            [Hypot(v_, s_**2) ** (2 * p_) for v_, s_, p_ in hypot_matches],
        ),
        "alpha-outside": (
            "hypot(x, 1) for hypot(√α x, 1): the scale of v dropped",
            [Hypot(x, s_) ** (2 * p_) for _, s_, p_ in hypot_matches],
        ),
    },
    method="index normaliser (hypot(v, s) = √(v² + s²))",
)

# a root of several squares (a pair's magnitude √(x² + z²), with a smoothing c): w² = ∞ from
# |w| > 1.8e19 and w² = 0 below 1e-19 in float32 (the root 0 and its derivative's 1/0 where the
# value is |w|), as nested hypots; the cases as the rewrite finds them (`_squares_match`)
Z = Array("z", (r, n))
z = entry(Z, (i, j))
squares_matches = [  # (v, the others' root, p); for p < 0 with c = 0 the reciprocal of p > 0's
    (x, z, sp.S.Half),
    (x, Hypot(z, sp.sqrt(c_root)), sp.S.Half),
    (x, Hypot(z, sp.sqrt(c_root)), -sp.S.Half),
    (sp.sqrt(alpha_root) * x, z, sp.Rational(3, 2)),
]
hypot_squares = _cases_lemma(
    rw.SQUARES,
    "√(v² + w² + c) as hypot(v, hypot(w, √c)): a root of several squares without forming them",
    r"\left(v^{2} + w^{2} + c\right)^{p} = \operatorname{hypot}\left(v, \operatorname{hypot}(w, \sqrt{c})\right)^{2p}, "
    r"\quad c \geq 0, \; p \in \{\pm\tfrac{1}{2}, \pm\tfrac{3}{2}, \dots\}",
    squares_matches,
    setting=hypot_setting,
    mutants={
        "one-square": (
            "hypot(v, w) for the root of v² + w² + c: the smoothing c dropped",
            [Hypot(v_, s_.args[0] if isinstance(s_, Hypot) else s_) ** (2 * p_) for v_, s_, p_ in squares_matches],
        ),
        "w-for-root": (
            "hypot(v, w²) for hypot(v, w)",
            [Hypot(v_, s_**2) ** (2 * p_) for v_, s_, p_ in squares_matches],
        ),
    },
    method="index normaliser (hypot(v, s) = √(v² + s²))",
)

# two exponentials of different arrays (a two-way softmax, logaddexp): e^{x} and e^{z} overflow from
# 88 in float32 where the log of their sum, or their ratio, is in range
k_pair = sp.Symbol("k", positive=True)
logaddexp = index_claim(
    "stability.logaddexp",
    "log(k e^{a} + k e^{b}) as log k + max(a, b) + log1p(e^{−|a − b|})",
    SOURCE,
    r"\log\left(k e^{a} + k e^{b}\right) = \log k + \max(a, b) + \operatorname{log1p}\left(e^{-|a - b|}\right), \quad k > 0",
    lhs=[
        sp.log(k_pair) + sp.Max(x, z) + log1p(sp.exp(-sp.Abs(x - z))),
        sp.Max(2 * x, z + 1) + log1p(sp.exp(-sp.Abs(2 * x - z - 1))),
    ],
    rhs=[sp.log(k_pair * sp.exp(x) + k_pair * sp.exp(z)), sp.log(sp.exp(2 * x) + sp.exp(z + 1))],
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={k_pair: sp.Rational(3, 2)}),
    mutants={
        "min": (
            "min(a, b) for the max",
            [
                sp.log(k_pair) + sp.Min(x, z) + log1p(sp.exp(-sp.Abs(x - z))),
                sp.Min(2 * x, z + 1) + log1p(sp.exp(-sp.Abs(2 * x - z - 1))),
            ],
        ),
        "no-k": (
            "log k dropped",
            [
                sp.Max(x, z) + log1p(sp.exp(-sp.Abs(x - z))),
                sp.Max(2 * x, z + 1) + log1p(sp.exp(-sp.Abs(2 * x - z - 1))),
            ],
        ),
    },
    method="index normaliser with region reasoning (a case split on the sign of a − b; logarithms by exponentiating)",
)
exp_pair_factored = index_claim(
    "stability.exp_pair_factored",
    "(k e^{a} + k e^{b})^{−m} as k^{−m} e^{−ma} (1 + e^{b − a})^{−m}",
    SOURCE,
    r"\left(k e^{a} + k e^{b}\right)^{-m} = k^{-m} e^{-m a} \left(1 + e^{b - a}\right)^{-m}, \quad k > 0",
    lhs=[k_pair**-1 * sp.exp(-x) / (1 + sp.exp(z - x)), k_pair**-2 * sp.exp(-2 * x) / (1 + sp.exp(z - x)) ** 2],
    rhs=[1 / (k_pair * sp.exp(x) + k_pair * sp.exp(z)), 1 / (k_pair * sp.exp(x) + k_pair * sp.exp(z)) ** 2],
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}, scalars={k_pair: sp.Rational(3, 2)}),
    mutants={
        "no-shift": ("e^{−ma} dropped", [k_pair**-1 / (1 + sp.exp(z - x)), k_pair**-2 / (1 + sp.exp(z - x)) ** 2]),
        "swapped": (
            "e^{a − b} for e^{b − a}",
            [k_pair**-1 * sp.exp(-x) / (1 + sp.exp(x - z)), k_pair**-2 * sp.exp(-2 * x) / (1 + sp.exp(x - z)) ** 2],
        ),
    },
    method="index normaliser (exponentials multiplied out)",
)

# a sum of positive exponentials with a constant, three or more of them, or unequal weights
# (e^{x}/(e^{x} + e^{z} + 1), 1/(2e^{x} + 3e^{z}), √(e^{x} + e^{z}), log(1 + e^{x} + e^{z})): each e^{a}
# is ∞ from 88 in float32 where the ratio, the root or the log is in range
exp_sum_documents = [
    sp.exp(x) / (sp.exp(x) + sp.exp(z) + 1),
    (sp.exp(x) - sp.exp(z)) / (sp.exp(x) + sp.exp(z) + 1) ** 2,
    1 / (2 * sp.exp(x) + 3 * sp.exp(z)) ** 2,
    sp.sqrt(sp.exp(x) + sp.exp(z)),
    (sp.exp(2 * x) + sp.exp(z) + sp.Rational(1, 2)) ** sp.Rational(-3, 2),
    sp.log(1 + sp.exp(x) + sp.exp(z)),
]


def _shifts_dropped(e):
    """A mistake: every sum that holds the shift m read as if m were 0 (the factor e^{pm}
    outside kept): the sums unshifted."""
    return e.replace(
        lambda a: isinstance(a, sp.Add) and a.has(sp.Max),
        lambda a: a.xreplace({M: 0 for M in a.atoms(sp.Max)}),
    )


def _constant_unshifted(e):
    """A mistake: the constant c of a shifted sum left as c, not c·e^{−m}."""
    return e.replace(lambda a: isinstance(a, sp.exp) and isinstance(-a.args[0], sp.Max), lambda a: sp.S.One)


exp_sum_stable = [rw.EXP_SUM_SHIFT.stable(d) for d in exp_sum_documents]
exp_sum_shift = index_claim(
    rw.EXP_SUM_SHIFT.lemma,
    "A sum of positive exponentials under a power or a log, its largest exponent shifted out",
    SOURCE,
    r"S^{p} = e^{p m} \left(S e^{-m}\right)^{p}, \quad \log S = m + \log\left(S e^{-m}\right), \quad "
    r"S = \sum_{i} k_{i} e^{a_{i}} + c, \; k_{i} > 0, \; c \geq 0, \; "
    r"\text{for any } m, \text{ in particular } m = \max(a_{1}, \dots, a_{n}, 0)",
    lhs=exp_sum_stable,
    rhs=exp_sum_documents,
    setting=Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1)}),
    mutants={
        "sums-unshifted": (
            "the sums left unshifted, the factor e^{pm} kept",
            [_shifts_dropped(e) for e in exp_sum_stable],
        ),
        "constant-unshifted": (
            "the constant c of the shifted sum left as c, not c·e^{−m}",
            [_constant_unshifted(e) for e in exp_sum_stable],
        ),
    },
    method="index normaliser with region reasoning (exponentials multiplied out; a common e^{a} > 0 out of a root)",
)

# a branch weighted by a step (a piecewise activation written with steps, as the docs advise:
# ELiSH's (1 − H(x))·(e^{x} − 1)σ(x)): the branch left out is computed too, and its e^{x} is ∞·0 =
# NaN at x = 1e4 in float32 where the weight is 0
branch_documents = [
    (1 - sp.Heaviside(x, 1)) * expm1(x),
    sp.Heaviside(x - 1, 0) * sp.exp(-x),
    (1 - sp.Heaviside(2 * x - 1, 0)) * sp.cosh(x),
    sp.Heaviside(-x, sp.Rational(1, 2)) * sp.exp(-x) * x,
]
branch_stable = [rw.BRANCH_CLAMP.stable(d) for d in branch_documents]


def _clamp_swapped(e):
    """A mistake: the clamp on the other side (min for max)."""
    return e.replace(
        lambda a: isinstance(a, (sp.Max, sp.Min)),
        lambda a: (sp.Min if isinstance(a, sp.Max) else sp.Max)(*a.args),
    )


def _clamp_moved(e):
    """A mistake: the clamp's point moved by 1."""
    return e.replace(
        lambda a: isinstance(a, (sp.Max, sp.Min)),
        lambda a: a.func(*[b + 1 if b.is_number else b for b in a.args]),
    )


branch_clamp = index_claim(
    rw.BRANCH_CLAMP.lemma,
    "A growing function in a branch weighted by a step, read at its argument clamped into the branch",
    SOURCE,
    r"H(x - t, c)\, g(x) = H(x - t, c)\, g(\max(x, t)), \quad "
    r"\left(1 - H(x - t, c)\right) g(x) = \left(1 - H(x - t, c)\right) g(\min(x, t))",
    lhs=branch_stable,
    rhs=branch_documents,
    setting=setting,
    mutants={
        "other-side": ("the clamp on the branch's other side", [_clamp_swapped(e) for e in branch_stable]),
        "moved": ("the clamp's point moved by 1", [_clamp_moved(e) for e in branch_stable]),
    },
    method="index normaliser with region reasoning (a case split on the sign of x − t)",
)

# a clamp of k(e^{u} − 1) at 0 (ELU, CELU and SELU as PyTorch's documentation writes them:
# max(0, x) + min(0, α(e^{x} − 1))): e^{x} = ∞ from 88 in float32 where the min gives 0
clamp_matches = [  # (is_min, k, u), as the rewrite finds them
    (True, sp.Rational(16733, 10000), x),
    (True, sp.Integer(2), x / 2),
    (False, sp.Integer(-3), x),
    (False, sp.Integer(1), x),
]
clamp_expm1 = _cases_lemma(
    rw.CLAMP_EXPM1,
    "min(0, k(e^{u} − 1)) as k expm1(min(u, 0)): a clamp inside the increasing expm1",
    r"\min\left(0, k\left(e^{u} - 1\right)\right) = k \operatorname{expm1}\left(\min(u, 0)\right), \quad "
    r"\max\left(0, k\left(e^{u} - 1\right)\right) = k \operatorname{expm1}\left(\max(u, 0)\right), \quad k > 0 "
    r"\text{ (min and max swapped for } k < 0)",
    clamp_matches,
    setting=setting,
    mutants={
        "clamp-outside": (
            "the other clamp inside: k expm1(max(u, 0)) for min(0, …)",
            [k_ * expm1((sp.Max if m_ == bool(k_ > 0) else sp.Min)(u_, 0)) for m_, k_, u_ in clamp_matches],
        ),
        "no-k": (
            "expm1(min(u, 0)) without its k",
            [expm1((sp.Min if m_ == bool(k_ > 0) else sp.Max)(u_, 0)) for m_, k_, u_ in clamp_matches],
        ),
    },
    method="index normaliser with region reasoning (a case split on the sign of u; e^{u} − 1 has the sign of u)",
)

# √(v² + c) − √c (pseudo-Huber, the bent identity): 0 at v = 1e-4 in float32 where the value is
# v²/(2√c); rationalised, v²/(hypot(v, √c) + √c), printed v·(v/(…)) (codegen/printers/code.py)
root_minus_matches = [  # (k, v, √c, the rest of the sum)
    (sp.S.One, x, sp.sqrt(c_root), sp.S.Zero),
    (alpha_root, sp.sqrt(alpha_root) * x, sp.S.One, x),
]
root_minus = _cases_lemma(
    rw.ROOT_MINUS,
    "√(v² + c) − √c rationalised: v²/(hypot(v, √c) + √c), no cancellation where v² ≪ c",
    r"k \sqrt{v^{2} + c} - k \sqrt{c} = \frac{k v^{2}}{\operatorname{hypot}(v, \sqrt{c}) + \sqrt{c}}, \quad c > 0",
    root_minus_matches,
    setting=hypot_setting,
    mutants={
        "minus": (
            "hypot(v, √c) − √c below: the conjugate's sign",
            [k_ * v_**2 / (Hypot(v_, s_) - s_) + r_ for k_, v_, s_, r_ in root_minus_matches],
        ),
        "c-not-root": (
            "+ c below for + √c",
            [k_ * v_**2 / (Hypot(v_, s_) + s_**2) + r_ for k_, v_, s_, r_ in root_minus_matches],
        ),
    },
    method="index normaliser (hypot(v, s) = √(v² + s²))",
)

# log(v² + c): v² = ∞ at |v| > 1.8e19 in float32; as 2 log hypot(v, √c), and log(1 + v²) as
# 2 log1p(v²/(hypot(v, 1) + 1)) (log1p(hypot − 1), hypot − 1 rationalised: accurate at small v)
log_root_matches = [(x, sp.sqrt(c_root)), (sp.sqrt(alpha_root) * x, sp.S.One), (x, Hypot(z, sp.sqrt(c_root)))]
log_root = _cases_lemma(
    rw.LOG_ROOT,
    "log(v² + c) as 2 log hypot(v, √c), log(1 + v²) as 2 log1p(v²/(hypot(v, 1) + 1)): no v² = ∞",
    r"\log\left(v^{2} + c\right) = 2 \log \operatorname{hypot}\left(v, \sqrt{c}\right), \quad "
    r"\log\left(1 + v^{2}\right) = 2 \operatorname{log1p} \frac{v^{2}}{\operatorname{hypot}(v, 1) + 1}",
    log_root_matches,
    setting=hypot_setting,
    mutants={
        "not-doubled": ("log hypot for 2 log hypot", [rw.LOG_ROOT.stable(m_) / 2 for m_ in log_root_matches]),
        "c-not-root": (
            "hypot(v, c) for hypot(v, √c)",
            [
                2 * sp.log(Hypot(x, c_root)),
                2 * log1p(alpha_root * x**2 / (Hypot(sp.sqrt(alpha_root) * x, 1) + 1)),
                2 * sp.log(Hypot(x, Hypot(z, c_root))),
            ],
        ),
    },
    method="index normaliser (hypot(v, s) = √(v² + s²); logarithms compared by exponentiating)",
)

# k cos v − k: 0 at v = 1e-4 in float32 where 1 − cos v is 5e-9; −2k sin²(v/2) has no difference
one_minus_cos_matches = [(-sp.S.One, x, sp.S.Zero), (c_root, 2 * x, x)]
one_minus_cos = _cases_lemma(
    rw.ONE_MINUS_COS,
    "k cos v − k as −2k sin²(v/2): no cancellation where |v| ≪ 1",
    r"k \cos v - k = -2k \sin^{2} \frac{v}{2}",
    one_minus_cos_matches,
    setting=root_setting,
    mutants={
        "not-halved": (
            "sin² v for sin²(v/2)",
            [-2 * k_ * sp.sin(v_) ** 2 + r_ for k_, v_, r_ in one_minus_cos_matches],
        ),
        "sign": ("+2k sin²(v/2)", [2 * k_ * sp.sin(v_ / 2) ** 2 + r_ for k_, v_, r_ in one_minus_cos_matches]),
    },
    method="index normaliser (sin, cos by their complex exponentials)",
)

# k e^{u} − k e^{−u}: 0 at u = 1e-8 in float32 where (e^{u} − e^{−u})/2 is 1e-8; 2k sinh u has no
# difference (and k e^{u} + k e^{−u} is 2k cosh u, so that log((e^{x} + e^{−x})/2) is a log cosh)
exp_pair_matches = [
    (sp.S.Half, x, sp.S.NegativeOne, sp.S.Zero),
    (sp.S.Half, x, sp.S.One, sp.S.Zero),
    (c_root, 2 * x, sp.S.NegativeOne, x),
]
exp_pair = _cases_lemma(
    rw.EXP_PAIR,
    "k e^{u} ± k e^{−u} as 2k cosh u, 2k sinh u: no cancellation where |u| ≪ 1",
    r"k e^{u} - k e^{-u} = 2k \sinh u, \quad k e^{u} + k e^{-u} = 2k \cosh u",
    exp_pair_matches,
    setting=root_setting,
    mutants={
        "swapped": (
            "cosh for sinh and sinh for cosh",
            [2 * k_ * (sp.sinh(u_) if s_ == 1 else sp.cosh(u_)) + r_ for k_, u_, s_, r_ in exp_pair_matches],
        ),
        "not-doubled": (
            "k cosh u, k sinh u",
            [k_ * (sp.cosh(u_) if s_ == 1 else sp.sinh(u_)) + r_ for k_, u_, s_, r_ in exp_pair_matches],
        ),
    },
    method="index normaliser (sinh, cosh by their exponentials)",
)

# e^{a}·e^{b} with a → ∞ and b → −∞ (TanhExp's e^{x}·e^{−2e^{x}}): ∞·0 = NaN where e^{a + b} is 0
exp_product = _lemma(
    rw.EXP_PRODUCT.lemma,
    "e^{a}·e^{b} as e^{a + b}: no ∞·0",
    r"e^{x} e^{-2 e^{x}} = e^{x - 2 e^{x}}",
    rw.EXP_PRODUCT.stable((x, -2 * sp.exp(x))),
    rw.EXP_PRODUCT.document((x, -2 * sp.exp(x))),
    {
        "sign": ("e^{x + 2e^{x}}", sp.exp(x + 2 * sp.exp(x))),
        "product": ("e^{−2x e^{x}}: the exponents multiplied", sp.exp(-2 * x * sp.exp(x))),
    },
)

# a tanh written by its exponentials: ∞/∞ at |x| > 89 in float32, printed as the tanh node
tanh_ratio = _rewrite_lemma(
    rw.TANH_RATIO,
    "tanh from its exponentials, printed as tanh: no ∞/∞ at large |x|",
    r"\frac{e^{x} - e^{-x}}{e^{x} + e^{-x}} = \tanh x",
    {
        "tanh-2x": ("tanh 2x: the exponents doubled", sp.tanh(2 * x)),
        "sign": ("−tanh x: the numerator's order reversed", -sp.tanh(x)),
    },
)
tanh_ratio_half = _rewrite_lemma(
    rw.TANH_RATIO_HALF,
    "(e^{x} − 1)/(e^{x} + 1) as tanh(x/2): no ∞/∞ at large x",
    r"\frac{e^{x} - 1}{e^{x} + 1} = \tanh \frac{x}{2}",
    {
        "not-halved": ("tanh x for tanh(x/2)", sp.tanh(x)),
        "sigmoid": ("σ(x) for tanh(x/2) = 2σ(x) − 1", 1 / (1 + sp.exp(-x))),
    },
)

log_cosh = _rewrite_lemma(
    rw.LOG_COSH,
    "log cosh without overflow: |x| + log1p(e^{−2|x|}) − log 2",
    r"\log \cosh x = |x| + \operatorname{log1p}\left(e^{-2|x|}\right) - \log 2",
    {
        "one-not-two": ("e^{−|x|} for e^{−2|x|}", sp.Abs(x) + log1p(sp.exp(-sp.Abs(x))) - sp.log(2)),
        "no-log2": ("the − log 2 dropped", sp.Abs(x) + log1p(sp.exp(-2 * sp.Abs(x)))),
    },
)
centred_sigmoid = _rewrite_lemma(
    rw.CENTRED_SIGMOID,
    "1 − 2σ(−2x) as tanh x: no 1 − 1 at small x",
    r"1 - 2\sigma(-2x) = \tanh x",
    {
        "not-doubled": ("tanh 2x", sp.tanh(2 * x)),
        "sign": ("−tanh x: 2σ(−2x) − 1", -sp.tanh(x)),
    },
)


def _sum_lemma(rule: rw.Rewrite, title, latex, second, mutants, method) -> Claim:
    """The lemma of a rewrite inside a sum, matched as (k, u, s): at a symbolic coefficient k and
    rest s, and at `second` (a case of numbers and another argument)."""
    return index_claim(
        rule.lemma,
        title,
        SOURCE,
        latex,
        lhs=[rule.stable((k_s, x, s_s)), rule.stable(second)],
        rhs=[rule.document((k_s, x, s_s)), rule.document(second)],
        setting=sum_setting,
        mutants=mutants,
        method=method,
    )


# 1 − σ(u) anywhere in a sum (the derivative of σ(x)(1 − σ(x)), SiLU's x(1 − σ(x)) + 1, a learned
# gate's 1 − σ(g x)): k σ(x) − k + s = −k σ(−x) + s for any k and any rest s of the sum
one_minus_sigmoid = _sum_lemma(
    rw.ONE_MINUS_SIGMOID,
    "k σ(x) − k inside a sum as −k σ(−x): no 1 − 1 where σ(x) rounds to 1",
    r"k \sigma(x) - k + s = -k \sigma(-x) + s",
    (-1, 2 * x, x),
    {
        "argument-kept": (
            "−k σ(x) + s: the argument's sign not flipped",
            [-k_s * Sigmoid(x) + s_s, Sigmoid(2 * x) + x],
        ),
        "sign-kept": (
            "k σ(−x) + s: the coefficient's sign not flipped",
            [k_s * Sigmoid(-x) + s_s, -Sigmoid(-2 * x) + x],
        ),
    },
    "index normaliser with region reasoning (σ(u) = 1/(1 + e^{−u}); a case split on the sign of x)",
)
# σ(u) − σ(−u) anywhere in a sum (the logistic density σ(x)σ(−x)'s derivative y·(σ(−x) − σ(x))):
# k σ(x) − k σ(−x) + s = k tanh(x/2) + s
sigmoid_difference = _sum_lemma(
    rw.SIGMOID_DIFFERENCE,
    "k σ(x) − k σ(−x) inside a sum as k tanh(x/2): no σ − σ near x = 0",
    r"k \sigma(x) - k \sigma(-x) + s = k \tanh \frac{x}{2} + s",
    (-1, 2 * x, x),
    {
        "not-halved": ("k tanh(x) + s: the argument not halved", [k_s * sp.tanh(x) + s_s, -sp.tanh(2 * x) + x]),
        "sign": ("−k tanh(x/2) + s: the difference's order reversed", [-k_s * sp.tanh(x / 2) + s_s, sp.tanh(x) + x]),
    },
    "index normaliser with region reasoning (σ(u) = 1/(1 + e^{−u}), tanh by its exponentials)",
)
tanh_sinh_cosh = _rewrite_lemma(
    rw.TANH_SINH_COSH,
    "sinh x / cosh x as tanh x: no ∞/∞ at large |x|",
    r"\frac{\sinh x}{\cosh x} = \tanh x",
    {
        "coth": ("cosh/sinh: coth x", sp.cosh(x) / sp.sinh(x)),
        "tanh-2x": ("tanh 2x", sp.tanh(2 * x)),
    },
)

CLAIMS: list[Claim] = [
    normal_cdf,
    softplus,
    log_sigmoid,
    sigmoid,
    tanh_expm1,
    logsumexp,
    softmax_shift,
    sums_ratio_shift,
    log_softmax,
    gelu_tanh,
    mish,
    sigmoid_node,
    sigmoid_ratio,
    gaussian,
    sech2,
    expm1_lemma,
    expm1_in_sum,
    log1p_lemma,
    sqrt_rationalised,
    hypot,
    hypot_squares,
    logaddexp,
    exp_pair_factored,
    exp_sum_shift,
    branch_clamp,
    clamp_expm1,
    root_minus,
    log_root,
    one_minus_cos,
    exp_pair,
    exp_product,
    tanh_ratio,
    tanh_ratio_half,
    log_cosh,
    tanh_sinh_cosh,
    centred_sigmoid,
    one_minus_sigmoid,
    sigmoid_difference,
]

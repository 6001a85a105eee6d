"""LayerNorm and RMSNorm: forward statistics, the two moments of x̂, and closed-form backward.

Seed A §3, seed B §8 (LayerNorm, per row of features, population variance):

    μ = (1/n) Σ_j x_j     σ² = (1/n) Σ_j (x_j − μ)²     x̂ = (x − μ)/√(σ² + ε)     y = γ ⊙ x̂ + β

Seed B §9 (RMSNorm, ε inside the root):

    RMS(x) = √((1/n) Σ_j x_j² + ε)     y = x / RMS(x) ⊙ γ

The ops follow llm.c: the forward caches the per-row statistics (`mean`, `rstd` = 1/√(σ²+ε);
`rrms` = 1/RMS) and the backward rebuilds x̂ from x and them, then applies the closed forms

    LayerNorm:  dβ = Σ_rows dy    dγ = Σ_rows dy ⊙ x̂    dx = rstd ⊙ (dx̂ − mean(dx̂) − x̂ ⊙ mean(dx̂ ⊙ x̂)),  dx̂ = dy ⊙ γ
    RMSNorm:    dγ = Σ_rows dy ⊙ x̂    dx = rrms ⊙ (dx̂ − x̂ ⊙ mean(dx̂ ⊙ x̂)),  x̂ = x ⊙ rrms, dx̂ = dy ⊙ γ

Every backward claim differentiates L = Σ_ij G_ij y_ij through the op's own forward (index form,
`sp.diff` on `Indexed`) for symbolic n and r and compares with the very expression the code
generator prints.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, ColSum, RowMean, RowSum, entry, index, size
from .language.ops import Op, Option, Quote, RangeLimit, grad_of
from .proof.core import Claim, Mutant, Setting, index_claim, prove_index_identity, refute_identity

n, r = size("n"), size("r")  # features per row (the normalised axis), number of rows
i, j, e, f, t = (index(s) for s in "ijeft")
eps = sp.Symbol("eps", positive=True)
EPS = Option(eps, "eps", 1e-5, "added to the variance (LayerNorm) or mean square (RMSNorm) inside the root")

# ------------------------------------------------------------------------------- LayerNorm op
x = Array("x", (r, n))
gamma, beta = Array("gamma", (1, n)), Array("beta", (1, n))
mean, rstd = Array("mean", (r, 1)), Array("rstd", (r, 1))
xc = Array("xc", (r, n))  # x − μ, computed once
xhat = Array("xhat", (r, n))
y = Array("y", (r, n))
dy = grad_of(y)
dxhat = grad_of(xhat)
dx, dgamma, dbeta = grad_of(x), grad_of(gamma), grad_of(beta)


def layernorm_dx(xhat_, dxhat_, rstd_):
    """dx = rstd ⊙ (dx̂ − mean(dx̂) − x̂ ⊙ mean(dx̂ ⊙ x̂)): the projection that removes the mean
    and the x̂ direction (the two directions LayerNorm's output is insensitive to)."""
    return rstd_ * (dxhat_ - RowMean(dxhat_) - xhat_ * RowMean(dxhat_ * xhat_))


# The document's LayerNorm (seed A §3, seed B §8), in a scope of its own: what the generated
# claims prove the printed forward equal to, and differentiate for the printed backward.
mu_s = Array("mu", (r, 1), latex=r"\mu")
var_s = Array("var", (r, 1), latex=r"\sigma^{2}")
xhat_s = Array("xhat", (r, n), latex=r"\hat{x}")
LAYERNORM_SPEC = [
    Assign(mu_s, RowSum(x) / n),  # μ = (1/n) Σ_j x_j
    Assign(var_s, RowSum((x - mu_s) ** 2) / n),  # σ² = (1/n) Σ_j (x_j − μ)²
    Assign(xhat_s, (x - mu_s) / sp.sqrt(var_s + eps)),  # x̂ = (x − μ)/√(σ² + ε)
    Assign(y, gamma * xhat_s + beta),  # y = γ ⊙ x̂ + β
]

LAYERNORM = Op(
    name="layernorm",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        (
            "layernorm: the variance mean((x − μ)²) overflows (|x − μ| > 1.8e19 in "
            "float32), rstd = 1/√inf = 0 and y collapses to β; dx, dγ follow"
        ),
    ),
    module=__name__,
    title="Layer normalisation over the last axis",
    spec=LAYERNORM_SPEC,
    source="seed A §3, seed B §8",
    quotes=(
        Quote(
            "seed B §8",
            "LayerNorm",
            "\\mu = \\frac{1}{n} \\sum_{i=1}^{n}x_i\n"
            "\\sigma^2 = \\frac{1}{n} \\sum_{i=1}^{n}(x_i-\\mu)^2\n"
            "\\hat{x} = \\frac{x-\\mu} {\\sqrt{\\sigma^2+\\epsilon}}\n"
            "LayerNorm(x) = \\gamma\\hat{x}+\\beta",
        ),
    ),
    mistakes={
        "unbiased-variance": (
            "σ² with 1/(n−1) (Bessel) instead of the population 1/n",
            "forward",
            "rstd",
            1 / sp.sqrt(RowSum(xc**2) / (n - 1) + eps),
        ),
        "eps-outside-root": ("x̂ = (x − μ)/(√σ² + ε)", "forward", "rstd", 1 / (sp.sqrt(RowMean(xc**2)) + eps)),
        "no-xhat-term": ("the x̂ ⊙ mean(dx̂ ⊙ x̂) term dropped", "backward", "dx", rstd * (dxhat - RowMean(dxhat))),
        "dy-not-dxhat": (
            "dy used where dx̂ = dy ⊙ γ is needed",
            "backward",
            "dx",
            rstd * (dy - RowMean(dy) - xhat * RowMean(dy * xhat)),
        ),
    },
    claims=[
        "layernorm.forward",
        "layernorm.mean_zero",
        "layernorm.second_moment",
        "layernorm.dx",
        "layernorm.dgamma",
        "layernorm.dbeta",
    ],
    inputs=[x],
    params=[gamma, beta],
    options=[EPS],
    sizes={n: (x, 1)},
    module_params={"gamma": "weight", "beta": "bias"},  # the nn.Module looks like torch.nn.LayerNorm
    reference=lambda torch, x, g, b, eps=1e-5: torch.nn.functional.layer_norm(x, x.shape[-1:], g, b, eps),
    param_init={"gamma": "ones"},  # beta: zeros (a row vector's default)
    forward=[
        Assign(mean, RowMean(x)),  # μ = mean(x)
        Assign(xc, x - mean),  # x − μ
        Assign(rstd, 1 / sp.sqrt(RowMean(xc**2) + eps)),  # 1/√(σ² + ε), σ² with 1/n
        Assign(xhat, xc * rstd),  # x̂ = (x − μ)/√(σ² + ε)
        Assign(y, gamma * xhat + beta),  # y = γ ⊙ x̂ + β
    ],
    outputs=[y],
    saved=[x, gamma, mean, rstd],
    backward=[
        Assign(xhat, (x - mean) * rstd, note="x̂ rebuilt from the cache (llm.c: only μ, rstd kept)"),
        Assign(dxhat, dy * gamma),  # y = γ ⊙ x̂ + β  ⇒  dx̂ = dy ⊙ γ
        Assign(dgamma, ColSum(dy * xhat)),  # dγ = Σ_rows dy ⊙ x̂
        Assign(dbeta, ColSum(dy)),  # dβ = Σ_rows dy
        Assign(dx, layernorm_dx(xhat, dxhat, rstd)),  # dx = rstd(dx̂ − mean dx̂ − x̂ mean(dx̂ x̂))
    ],
    grads=[dx, dgamma, dbeta],
    optional_axes=1,  # x: any shape with at least one axis
    cache_doc="x, gamma and the per-row statistics mean (μ) and rstd = 1/√(σ²+ε), each r×1 "
    "(llm.c style: x̂ is rebuilt from them in the backward instead of being stored).",
)

# ------------------------------------------------------------------------------- RMSNorm op
rx = Array("x", (r, n))
rgamma = Array("gamma", (1, n))
rrms = Array("rrms", (r, 1))
rxhat = Array("xhat", (r, n))
ry = Array("y", (r, n))
rdy, rdxhat = grad_of(ry), grad_of(rxhat)
rdx, rdgamma = grad_of(rx), grad_of(rgamma)


def rmsnorm_dx(xhat_, dxhat_, rrms_):
    """dx = rrms ⊙ (dx̂ − x̂ ⊙ mean(dx̂ ⊙ x̂)), x̂ = x ⊙ rrms: remove the x̂ direction."""
    return rrms_ * (dxhat_ - xhat_ * RowMean(dxhat_ * xhat_))


# The document's RMSNorm (seed B §9): ε inside the root.
rms_s = Array("rms", (r, 1), latex=r"\mathrm{RMS}")
RMSNORM_SPEC = [
    Assign(rms_s, sp.sqrt(RowSum(rx**2) / n + eps)),  # RMS(x) = √((1/n) Σ_j x_j² + ε)
    Assign(ry, rx / rms_s * rgamma),  # y = x / RMS(x) ⊙ γ
]

RMSNORM = Op(
    name="rmsnorm",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        ("rmsnorm: the mean square mean(x²) overflows, rrms = 0 and y = 0"),
    ),
    module=__name__,
    title="RMS normalisation over the last axis",
    spec=RMSNORM_SPEC,
    source="seed B §9",
    quotes=(
        Quote(
            "seed B §9",
            "RMSNorm",
            "RMS(x) = \\sqrt{ \\frac{1}{n} \\sum_{i=1}^{n}x_i^2 +\\epsilon }\n"
            "RMSNorm(x) = \\frac{x}{RMS(x)} \\odot\\gamma",
        ),
    ),
    mistakes={
        "eps-outside-root": ("RMS = √(mean(x²)) + ε", "forward", "rrms", 1 / (sp.sqrt(RowMean(rx**2)) + eps)),
        "layernorm-mean-term": (
            "a LayerNorm-style − mean(dx̂) term added",
            "backward",
            "dx",
            rrms * (rdxhat - RowMean(rdxhat) - rxhat * RowMean(rdxhat * rxhat)),
        ),
    },
    claims=["rmsnorm.forward", "rmsnorm.dx", "rmsnorm.dgamma"],
    inputs=[rx],
    params=[rgamma],
    options=[EPS],
    sizes={n: (rx, 1)},
    module_params={"gamma": "weight"},  # like torch.nn.RMSNorm
    reference=lambda torch, x, g, eps=1e-5: torch.nn.functional.rms_norm(x, x.shape[-1:], g, eps),
    param_init={"gamma": "ones"},
    forward=[
        Assign(rrms, 1 / sp.sqrt(RowMean(rx**2) + eps)),  # 1/RMS(x), ε inside the root
        Assign(rxhat, rx * rrms),  # x / RMS(x)
        Assign(ry, rxhat * rgamma),  # ⊙ γ
    ],
    outputs=[ry],
    saved=[rx, rgamma, rrms],
    backward=[
        Assign(rxhat, rx * rrms, note="x̂ rebuilt from the cache (only rrms kept)"),
        Assign(rdxhat, rdy * rgamma),  # dx̂ = dy ⊙ γ
        Assign(rdgamma, ColSum(rdy * rxhat)),  # dγ = Σ_rows dy ⊙ x̂
        Assign(rdx, rmsnorm_dx(rxhat, rdxhat, rrms)),  # dx = rrms(dx̂ − x̂ mean(dx̂ x̂))
    ],
    grads=[rdx, rdgamma],
    optional_axes=1,  # x: any shape with at least one axis
    cache_doc="x, gamma and rrms = 1/√(mean(x²)+ε), r×1 (x̂ = x·rrms is rebuilt in the backward).",
)
OPS = [LAYERNORM, RMSNORM]

# ------------------------------------------------------------------------------- settings
setting = Setting(
    sizes={n: 3, r: 2},
    indices={i: (0, r - 1), j: (0, n - 1), e: (0, r - 1), f: (0, n - 1)},
    scalars={eps: sp.Rational(1, 10)},
)
ln = LAYERNORM.env()  # every intermediate as the generated code computes it
rms = RMSNORM.env()


def loss(out: Array, env: dict, upstream: Array):
    """L = Σ_ij G_ij Out_ij: any loss, through its upstream gradient G = ∂L/∂Out."""
    return sp.Sum(upstream.base[i, j] * entry(out, (i, j), env), (i, 0, r - 1), (j, 0, n - 1))


# ------------------------------------------------------------------------------- LayerNorm forward
# The document's statistics for row `row`, written out by hand (seed A §3.A, seed B §8).
def mu_doc(row):
    return sp.Sum(x.base[row, t], (t, 0, n - 1)) / n


def var_doc(row, denom=n):
    return sp.Sum((x.base[row, t] - mu_doc(row)) ** 2, (t, 0, n - 1)) / denom


def xhat_doc(row, col, denom=n):
    return (x.base[row, col] - mu_doc(row)) / sp.sqrt(var_doc(row, denom) + eps)


def y_doc(row, col, denom=n):
    return gamma.base[col] * xhat_doc(row, col, denom) + beta.base[col]


# ------------------------------------------------------------------------------- moments of x̂
mean_of_xhat = entry(RowMean(xhat), (i, 0), ln)
# the same statistic with a wrong centring constant: x − Σx/(n−1) instead of x − Σx/n
xhat_bad_centre = (x - RowMean(x) * n / (n - 1)) * rstd
mean_zero = Claim(
    id="layernorm.mean_zero",
    title="Normalised activations have mean 0 per row",
    source="seed A §3, seed B §8",
    latex=r"\frac{1}{n} \sum_{j} \hat{x}_{j} = 0",
    prove=lambda: prove_index_identity(mean_of_xhat, sp.Integer(0), setting),
    mutants=[
        Mutant(
            "wrong-centre",
            "x̂ centred with Σx/(n−1) instead of the mean Σx/n",
            lambda: refute_identity(entry(RowMean(xhat_bad_centre), (i, 0), ln), sp.Integer(0), setting),
        ),
        Mutant(
            "mean-one",
            "the claimed constant is 1 (confusing mean 0 with variance 1)",
            lambda: refute_identity(mean_of_xhat, sp.Integer(1), setting),
        ),
    ],
)

sigma2 = var_doc(i)
second_moment = index_claim(
    "layernorm.second_moment",
    "Normalised activations have second moment σ²/(σ²+ε) (≈ 1, not exactly)",
    "seed A §3, seed B §8",
    r"\frac{1}{n} \sum_{j} \hat{x}_{j}^{2} = \frac{\sigma^{2}}{\sigma^{2} + \epsilon}",
    lhs=entry(RowMean(xhat**2), (i, 0), ln),
    rhs=sigma2 / (sigma2 + eps),
    setting=setting,
    mutants={
        "exactly-one": ("mean(x̂²) = 1, forgetting ε", sp.Integer(1)),
        "unbiased-variance": ("σ² taken with 1/(n−1)", var_doc(i, n - 1) / (var_doc(i, n - 1) + eps)),
    },
)

# ------------------------------------------------------------------------------- LayerNorm backward
L_ln = loss(y, ln, dy)
grad_setting = Setting(sizes=setting.sizes, indices={e: (0, r - 1), f: (0, n - 1)}, scalars=setting.scalars)
unbiased_ln = {**ln, rstd: 1 / sp.sqrt(RowMean(xc**2) * n / (n - 1) + eps)}  # Σ(x − μ)²/(n − 1)

dx_claim = index_claim(
    "layernorm.dx",
    "LayerNorm gradient with respect to x, end to end",
    "seed A §3, seed B §8",
    r"\frac{\partial \mathcal{L}}{\partial x} = \mathrm{rstd} \odot \left(\frac{\partial \mathcal{L}}{\partial \hat{x}} - "
    r"\mathrm{mean}\left(\frac{\partial \mathcal{L}}{\partial \hat{x}}\right) - \hat{x} \odot "
    r"\mathrm{mean}\left(\frac{\partial \mathcal{L}}{\partial \hat{x}} \odot \hat{x}\right)\right), \quad "
    r"\frac{\partial \mathcal{L}}{\partial \hat{x}} = \frac{\partial \mathcal{L}}{\partial y} \odot \gamma, \quad "
    r"\mathrm{rstd} = \frac{1}{\sqrt{\sigma^{2} + \epsilon}}",
    lhs=sp.diff(L_ln, x.base[e, f]),
    rhs=entry(dx, (e, f), ln),
    setting=grad_setting,
    mutants={
        "no-mean-terms": ("dx = rstd ⊙ dx̂ (both mean terms dropped)", entry(rstd * dxhat, (e, f), ln)),
        "no-xhat-term": ("the x̂ ⊙ mean(dx̂ ⊙ x̂) term dropped", entry(rstd * (dxhat - RowMean(dxhat)), (e, f), ln)),
        "no-mean-dxhat": (
            "the mean(dx̂) term dropped",
            entry(rstd * (dxhat - xhat * RowMean(dxhat * xhat)), (e, f), ln),
        ),
        "unbiased-variance": (
            "rstd from the unbiased variance 1/(n−1)",
            entry(layernorm_dx(xhat, dxhat, rstd), (e, f), unbiased_ln),
        ),
        "dy-not-dxhat": ("dy used where dx̂ = dy ⊙ γ is needed", entry(layernorm_dx(xhat, dy, rstd), (e, f), ln)),
    },
)

dgamma_claim = index_claim(
    "layernorm.dgamma",
    "LayerNorm gradient with respect to γ, end to end",
    "seed A §3, seed B §8",
    r"\frac{\partial \mathcal{L}}{\partial \gamma_{j}} = \sum_{i} \frac{\partial \mathcal{L}}{\partial y_{ij}} \hat{x}_{ij}",
    lhs=sp.diff(L_ln, gamma.base[f]),
    rhs=entry(dgamma, (e, f), ln),
    setting=grad_setting,
    mutants={
        "forgot-xhat": ("dγ = Σ_rows dy (x̂ forgotten)", entry(ColSum(dy), (e, f), ln)),
        "raw-x": ("dγ = Σ_rows dy ⊙ x (un-normalised input)", entry(ColSum(dy * x), (e, f), ln)),
    },
)

dbeta_claim = index_claim(
    "layernorm.dbeta",
    "LayerNorm gradient with respect to β, end to end",
    "seed A §3, seed B §8",
    r"\frac{\partial \mathcal{L}}{\partial \beta_{j}} = \sum_{i} \frac{\partial \mathcal{L}}{\partial y_{ij}}",
    lhs=sp.diff(L_ln, beta.base[f]),
    rhs=entry(dbeta, (e, f), ln),
    setting=grad_setting,
    mutants={
        "row-mean": ("averaged over rows instead of summed", entry(ColSum(dy) / r, (e, f), ln)),
        "times-gamma": ("dβ = Σ_rows dy ⊙ γ", entry(ColSum(dy * gamma), (e, f), ln)),
    },
)


# ------------------------------------------------------------------------------- RMSNorm
def rms_doc(row):
    return sp.sqrt(sp.Sum(rx.base[row, t] ** 2, (t, 0, n - 1)) / n + eps)


L_rms = loss(ry, rms, rdy)
rms_dx = index_claim(
    "rmsnorm.dx",
    "RMSNorm gradient with respect to x, end to end",
    "seed B §9",
    r"\frac{\partial \mathcal{L}}{\partial x} = \mathrm{rrms} \odot \left(\frac{\partial \mathcal{L}}{\partial \hat{x}} - "
    r"\hat{x} \odot \mathrm{mean}\left(\frac{\partial \mathcal{L}}{\partial \hat{x}} \odot \hat{x}\right)\right), \quad "
    r"\hat{x} = x \odot \mathrm{rrms}, \quad \frac{\partial \mathcal{L}}{\partial \hat{x}} = "
    r"\frac{\partial \mathcal{L}}{\partial y} \odot \gamma, \quad \mathrm{rrms} = \frac{1}{\mathrm{RMS}(x)}",
    lhs=sp.diff(L_rms, rx.base[e, f]),
    rhs=entry(rdx, (e, f), rms),
    setting=grad_setting,
    mutants={
        "no-projection": ("dx = rrms ⊙ dx̂ (the x̂ ⊙ mean(dx̂ ⊙ x̂) term dropped)", entry(rrms * rdxhat, (e, f), rms)),
        "layernorm-mean-term": (
            "a LayerNorm-style − mean(dx̂) term added",
            entry(rrms * (rdxhat - RowMean(rdxhat) - rxhat * RowMean(rdxhat * rxhat)), (e, f), rms),
        ),
        "sum-not-mean": (
            "rowsum instead of rowmean in the projection",
            entry(rrms * (rdxhat - rxhat * RowMean(rdxhat * rxhat) * n), (e, f), rms),
        ),
        "eps-outside-root": (
            "rrms = 1/(√mean(x²) + ε)",
            entry(rmsnorm_dx(rxhat, rdxhat, rrms), (e, f), {**rms, rrms: 1 / (sp.sqrt(RowMean(rx**2)) + eps)}),
        ),
    },
)

rms_dgamma = index_claim(
    "rmsnorm.dgamma",
    "RMSNorm gradient with respect to γ, end to end",
    "seed B §9",
    r"\frac{\partial \mathcal{L}}{\partial \gamma_{j}} = \sum_{i} \frac{\partial \mathcal{L}}{\partial y_{ij}} "
    r"\frac{x_{ij}}{\mathrm{RMS}(x_{i})}",
    lhs=sp.diff(L_rms, rgamma.base[f]),
    rhs=entry(rdgamma, (e, f), rms),
    setting=grad_setting,
    mutants={
        "forgot-rrms": ("dγ = Σ_rows dy ⊙ x (1/RMS forgotten)", entry(ColSum(rdy * rx), (e, f), rms)),
        "forgot-xhat": ("dγ = Σ_rows dy", entry(ColSum(rdy), (e, f), rms)),
    },
)

CLAIMS: list[Claim] = [mean_zero, second_moment, dx_claim, dgamma_claim, dbeta_claim, rms_dx, rms_dgamma]

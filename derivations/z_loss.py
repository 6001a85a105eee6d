"""Cross-entropy with PaLM's auxiliary z-loss: a loss the model takes through its `loss` role.

Chowdhery et al., "PaLM" (2022), §5: besides the cross-entropy, the square of the softmax's log
normaliser log Z = log Σ_j e^{z_j} is penalised, which keeps log Z near 0 and the logits from
drifting (also in OLMo, Chameleon):

    ℓ_i = −log p_{i, t_i} + α (log Σ_j e^{z_ij})²,   L = Σ_i w_i ℓ_i / Σ_i w_i

with α = 10⁻⁴ by default. The printed forward shifts each row by its max m, as cross_entropy's:
log Z = m + log Σ_j e^{z_j − m}; its backward is ∂L/∂z = w ⊙ ((1 + 2α log Z) p − onehot(t)) / Σ w.
Both are proved against the specification by the generated claims (symbolic T and V).
"""

from __future__ import annotations

import sympy as sp

from .label_smoothing import SHIFTED
from .language.arrays import Array, Assign, ColSum, OneHot, RowSum, Take
from .language.ops import Op, Option
from .loss import (
    CROSS_ENTROPY_SPEC,
    LOSS,
    LOSS_SIGNATURE,
    MASK,
    MX,
    PROBS,
    SUMEXP,
    TGT,
    ZT,
    V,
    Z,
    dLOSS,
    dZ,
    masked_mean_reference,
    mean_over_mask,
)

alpha = sp.Symbol("alpha", nonnegative=True)  # the z-loss weight α ≥ 0

T = Z.shape[0]
P, ELL = CROSS_ENTROPY_SPEC[0].target, CROSS_ENTROPY_SPEC[1].target  # p and ℓ, cross-entropy's
LOGZ = Array("log_z", (T, 1))  # log Σ_j e^{z_j} = m + log Σ_j e^{z_j − m}
ALPHA_LOGZ = Array("alpha_log_z", (T, 1))
LOSSES = Array("losses", (T, 1))

Z_LOSS = Op(
    name="z_loss",
    title="Cross-entropy with the z-loss (mean over a mask)",
    source="Chowdhery et al. 2022 (PaLM), §5",
    **LOSS_SIGNATURE,
    spec=[
        CROSS_ENTROPY_SPEC[0],  # p_ij = e^{z_ij} / Σ_k e^{z_ik}
        # ℓ_i = −log p_{i, t_i} + α (log Σ_j e^{z_ij})²
        Assign(ELL, -sp.log(Take(P, TGT)) + alpha * sp.log(RowSum(sp.exp(Z))) ** 2),
        CROSS_ENTROPY_SPEC[-1],  # L = Σ_i w_i ℓ_i / Σ_i w_i
    ],
    forward=[
        *SHIFTED,  # m, e^{z − m}, its row sum, p, z_t − m: cross_entropy's lines
        Assign(LOGZ, MX + sp.log(SUMEXP)),  # log Z = m + log Σ e^{z − m}
        # α log Z first: (log Z)² alone overflows where α (log Z)² does not
        Assign(ALPHA_LOGZ, alpha * LOGZ),
        # log Σ e^{z − m} − (z_t − m) + (α log Z) log Z: the cross-entropy's O(1) terms, then the penalty
        Assign(LOSSES, sp.log(SUMEXP) - ZT + ALPHA_LOGZ * LOGZ),
        Assign(LOSS, mean_over_mask(LOSSES, MASK)),
    ],
    saved=[PROBS, LOGZ, TGT, MASK],
    # ∂L/∂z = dL · w ⊙ ((1 + 2α log Z) p − onehot(t)) / Σ w
    backward=[Assign(dZ, dLOSS * MASK * ((1 + 2 * alpha * LOGZ) * PROBS - OneHot(TGT, V)) / ColSum(MASK))],
    grads=[dZ],
    options=[Option(alpha, "alpha", 1e-4, "the z-loss weight α ≥ 0 (PaLM: 1e-4)")],
    cache_doc="probs (softmax of the logits), log Z per row, targets, mask (as cross_entropy's: the runtime "
    "builds mask = (targets != ignore_index) and replaces ignored targets by 0); Σ mask must be > 0.",
    # F.cross_entropy plus α logsumexp², per row
    reference=masked_mean_reference(
        lambda torch, z, t, alpha=1e-4: (
            torch.nn.functional.cross_entropy(z, t, reduction="none") + alpha * torch.logsumexp(z, dim=-1) ** 2
        )
    ),
)

OPS = [Z_LOSS]

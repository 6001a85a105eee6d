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
from .loss import LOSS, MASK, MX, PROBS, SUMEXP, TGT, ZT, V, Z, dLOSS, dZ, mean_over_mask

alpha = sp.Symbol("alpha", nonnegative=True)  # the z-loss weight α ≥ 0

T = Z.shape[0]
P = Array("p", (T, V), latex="p")
ELL = Array("ell", (T, 1), latex=r"\ell")
LOGZ = Array("log_z", (T, 1))  # log Σ_j e^{z_j} = m + log Σ_j e^{z_j − m}
ALPHA_LOGZ = Array("alpha_log_z", (T, 1))
LOSSES = Array("losses", (T, 1))

Z_LOSS = Op(
    name="z_loss",
    title="Cross-entropy with the z-loss (mean over a mask)",
    source="Chowdhery et al. 2022 (PaLM), §5",
    inputs=[Z, TGT, MASK],
    integer_inputs=[TGT, MASK],
    outputs=[LOSS],
    spec=[
        Assign(P, sp.exp(Z) / RowSum(sp.exp(Z))),  # p_ij = e^{z_ij} / Σ_k e^{z_ik}
        # ℓ_i = −log p_{i, t_i} + α (log Σ_j e^{z_ij})²
        Assign(ELL, -sp.log(Take(P, TGT)) + alpha * sp.log(RowSum(sp.exp(Z))) ** 2),
        Assign(LOSS, ColSum(MASK * ELL) / ColSum(MASK)),  # L = Σ_i w_i ℓ_i / Σ_i w_i
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
    optional_axes=1,  # logits (V,) with 0-D targets and mask: one row
    check={"sizes": {"T": 3, "V": 4}, "integers": {"targets": (0, 3), "mask": (0, 1)}},
    role="loss",
    cache_doc="probs (softmax of the logits), log Z per row, targets, mask (as cross_entropy's: the runtime "
    "builds mask = (targets != ignore_index) and replaces ignored targets by 0); Σ mask must be > 0.",
    reference=lambda torch, z, t, w, alpha=1e-4: (
        (
            (
                torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), t.long().reshape(-1), reduction="none")
                + alpha * torch.logsumexp(z.reshape(-1, z.shape[-1]), dim=-1) ** 2
            )
            * w.reshape(-1).to(z.dtype)
        ).sum()
        / w.reshape(-1).to(z.dtype).sum()
    ).reshape(1),
)

OPS = [Z_LOSS]

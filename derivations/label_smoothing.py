"""Cross-entropy with label smoothing: a loss the model takes through its `loss` role.

Szegedy et al., "Rethinking the Inception Architecture" (2016), §7: the one-hot target y is
replaced by q = (1 − ε) y + ε/V (every class keeps ε/V of the mass), so with p = softmax(z)

    ℓ_i = −Σ_j q_ij log p_ij = −(1 − ε) log p_{i, t_i} − (ε/V) Σ_j log p_ij,

and the loss is the mean of ℓ over the tokens that count, L = Σ_i w_i ℓ_i / Σ_i w_i, as for
`cross_entropy` (ε = 0 is exactly that loss). PyTorch's `F.cross_entropy(label_smoothing=ε)`
computes the same. The printed forward shifts each row by its max m, like cross_entropy's:
log p_ij = (z_ij − m) − log Σ_k e^{z_ik − m}, so

    ℓ_i = log Σ_k e^{z_ik − m} − (1 − ε)(z_{i,t_i} − m) − ε · mean_j (z_ij − m),

every term O(1)-accurate, and its backward is ∂L/∂z = w ⊙ (p − (1 − ε) onehot(t) − ε/V) / Σ w.
Both are proved against the specification by the generated claims (symbolic T and V).
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, ColSum, OneHot, RowMean, RowSum, Take
from .language.ops import Op, Option
from .loss import (
    CROSS_ENTROPY,
    CROSS_ENTROPY_SPEC,
    EXPS,
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

eps = sp.Symbol("eps", nonnegative=True)  # ε ∈ [0, 1): the mass spread over every class

T = Z.shape[0]
P, ELL = CROSS_ENTROPY_SPEC[0].target, CROSS_ENTROPY_SPEC[1].target  # p and ℓ, cross-entropy's
ZM = Array("mean_shifted", (T, 1))  # mean_j (z_j − m)
LOSSES = Array("losses", (T, 1))
# cross_entropy's printed lines up to z_t − m: the row max m, e^{z − m}, its row sum, p, z_t − m
SHIFTED = CROSS_ENTROPY.forward[:5]
if [a.target for a in SHIFTED] != [MX, EXPS, SUMEXP, PROBS, ZT]:
    raise ImportError("derivations/loss.py's cross_entropy no longer begins with m, e^{z − m}, Σ, p, z_t − m")

LABEL_SMOOTHING = Op(
    name="label_smoothing",
    title="Cross-entropy with label smoothing (mean over a mask)",
    source="Szegedy et al. 2016 (Inception v3), §7",
    **LOSS_SIGNATURE,
    spec=[
        CROSS_ENTROPY_SPEC[0],  # p_ij = e^{z_ij} / Σ_k e^{z_ik}
        # ℓ_i = −(1 − ε) log p_{i, t_i} − (ε/V) Σ_j log p_ij
        Assign(ELL, -(1 - eps) * sp.log(Take(P, TGT)) - eps / V * RowSum(sp.log(P))),
        CROSS_ENTROPY_SPEC[-1],  # L = Σ_i w_i ℓ_i / Σ_i w_i
    ],
    forward=[
        *SHIFTED,
        Assign(ZM, RowMean(Z - MX)),
        # log Σ e^{z − m} − (1 − ε)(z_t − m) − ε mean(z − m): the max never added to the O(1) log-sum
        Assign(LOSSES, sp.log(SUMEXP) - (1 - eps) * ZT - eps * ZM),
        Assign(LOSS, mean_over_mask(LOSSES, MASK)),
    ],
    saved=[PROBS, TGT, MASK],
    # ∂L/∂z = dL · w ⊙ (p − (1 − ε) onehot(t) − ε/V) / Σ w
    backward=[Assign(dZ, dLOSS * MASK * (PROBS - (1 - eps) * OneHot(TGT, V) - eps / V) / ColSum(MASK))],
    grads=[dZ],
    options=[
        Option(
            eps,
            "eps",
            0.1,
            "the smoothing ε ∈ [0, 1): each class's share of the target mass is ε/V",
            domain=sp.Interval.Ropen(0, 1),
        )
    ],
    cache_doc="probs (softmax of the logits), targets, mask (as cross_entropy's: the runtime "
    "builds mask = (targets != ignore_index) and replaces ignored targets by 0); Σ mask must be > 0.",
    # F.cross_entropy's own label smoothing, per row
    reference=masked_mean_reference(
        lambda torch, z, t, eps=0.1: torch.nn.functional.cross_entropy(z, t, reduction="none", label_smoothing=eps)
    ),
)

OPS = [LABEL_SMOOTHING]

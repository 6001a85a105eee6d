"""Attention with dropout on its weights: O = (A ⊙ M/(1 − p)) V, A = softmax(Q Kᵀ/√d_k + causal).

nanoGPT's `attn_dropout` (and `scaled_dot_product_attention(dropout_p=p)`): during training each
attention weight is kept with probability 1 − p and rescaled by 1/(1 − p), the inverted dropout
of derivations/dropout.py applied to A before it weighs the values. The keep mask M (m×n, one
per head and batch row) is an input the caller draws; p is an option, 0 ≤ p < 1.

    S = Q Kᵀ/√d_k (causal: S_ij = −∞ for j > i)    A = softmax(S)    Ā = A ⊙ M/(1 − p)    O = Ā V

Backward, from dO:

    dV = Āᵀ dO      dĀ = dO Vᵀ      dA = dĀ ⊙ M/(1 − p)
    δ = rowsum(dA ⊙ A) = rowsum(dĀ ⊙ Ā) = rowsum(dO ⊙ O)      (attention.delta's identity, with Ā)
    dS = A ⊙ (dA − δ 1ᵀ)      dQ = dS K/√d_k      dK = dSᵀ Q/√d_k

so the backward, as attention's, needs O and not dA ⊙ A to form δ (FlashAttention keeps the same
identity under dropout). The generated claims prove every printed gradient equal to the
derivative of the specification above; `attention_dropout.delta` proves δ's identity for
symbolic sizes.
"""

from __future__ import annotations

import sympy as sp

from .attention import (
    ATTENTION_SPEC,
    CAUSAL,
    A_spec,
    att,
    d_k,
    d_v,
    datt,
    dk,
    do,
    dq,
    dv,
    k,
    m,
    n,
    o,
    q,
    s,
    score_overflow,
    v,
)
from .language.arrays import Array, Assign, CausalMask, MatMul, RowSum, T, entry, index
from .language.ops import Op, Option, grad_of
from .proof.core import Setting, index_claim
from .softmax import softmax_stable

p = sp.Symbol("p", nonnegative=True)
mask = Array("mask", (m, n))
att_d = Array("att_d", (m, n))  # Ā = A ⊙ M/(1 − p), the weights that weigh the values
datt_d = grad_of(att_d)
delta = Array("delta", (m, 1))
ds = grad_of(s)
keep_scale = 1 / (1 - p)

A_bar_spec = Array("att_d", (m, n), latex=r"\bar{A}")
SPEC = ATTENTION_SPEC[:-1] + [
    Assign(A_bar_spec, A_spec * mask * keep_scale),  # Ā = A ⊙ M/(1 − p)
    Assign(o, MatMul(A_bar_spec, v)),  # O = Ā V
]

ATTENTION_DROPOUT = Op(
    name="attention_dropout",
    range_limit=score_overflow("attention_dropout"),
    module=__name__,
    title="Scaled dot-product attention with dropout on the weights",
    spec=SPEC,
    source="seed A §1 and §6; Srivastava et al. 2014 (inverted dropout); nanoGPT's attn_dropout",
    check={"sizes": {"m": 3, "n": 3}},
    mistakes={
        "dropout-after-values": (
            "the mask applied to O instead of A (Ā V read as A V)",
            "forward",
            "o",
            MatMul(att, v),
        ),
        "no-rescale": ("the kept weights not rescaled by 1/(1 − p)", "forward", "att_d", att * mask),
        "dv-undropped": ("dV = Aᵀ dO: the dropped weights' values get gradient", "backward", "dv", MatMul(T(att), do)),
        "dA-undropped": ("dA = dO Vᵀ: the mask left out of dA", "backward", "datt", MatMul(do, T(v))),
        "delta-of-dA": ("δ = rowsum(dĀ ⊙ A): the mask's rescale missed", "backward", "delta", RowSum(datt_d * att)),
    },
    claims=["attention_dropout.delta"],
    inputs=[q, k, v, mask],
    constant_inputs=[mask],  # drawn by the caller: no gradient
    options=[
        CAUSAL,
        Option(p, "p", 0.0, "the drop rate p of the weights: 0 ≤ p < 1", domain=sp.Interval.Ropen(0, 1)),
    ],
    sizes={d_k: (q, 1)},
    forward=[
        Assign(s, MatMul(q, T(k)) / sp.sqrt(d_k)),  # scores, scaled by 1/√d_k
        Assign(s, CausalMask(s), when="causal"),  # M_ij = −∞ for j > i
        Assign(att, softmax_stable(s)),  # row max subtracted: softmax.shift
        Assign(att_d, att * mask * keep_scale),  # Ā = A ⊙ M/(1 − p)
        Assign(o, MatMul(att_d, v)),  # O = Ā V
    ],
    outputs=[o],
    saved=[q, k, v, att, mask, o],
    backward=[
        Assign(att_d, att * mask * keep_scale),  # Ā again, from A and M (one m×n array less kept)
        Assign(dv, MatMul(T(att_d), do)),  # dV = Āᵀ dO
        Assign(datt_d, MatMul(do, T(v))),  # dĀ = dO Vᵀ
        Assign(datt, datt_d * mask * keep_scale),  # dA = dĀ ⊙ M/(1 − p)
        Assign(delta, RowSum(do * o), note="δ = rowsum(dA ⊙ A), from dO and O alone"),
        Assign(ds, att * (datt - delta)),  # dS = A ⊙ (dA − δ 1ᵀ)
        Assign(dq, MatMul(ds, k) / sp.sqrt(d_k)),  # dQ = dS K/√d_k
        Assign(dk, MatMul(T(ds), q) / sp.sqrt(d_k)),  # dK = dSᵀ Q/√d_k
    ],
    grads=[dq, dk, dv],
    broadcast=True,
    cache_doc="q, k, v, the attention weights att = softmax(s) (m×n) before dropout, the keep mask and "
    "the output o; Ā = att ⊙ mask/(1 − p) is formed again in the backward.",
)
OPS = [ATTENTION_DROPOUT]

# δ = rowsum(dA ⊙ A) with dA = (dO Vᵀ) ⊙ M/(1 − p) equals rowsum(dO ⊙ O) with O = Ā V
i = index("i")
through = {datt: MatMul(do, T(v)) * mask * keep_scale, o: MatMul(att * mask * keep_scale, v)}
delta_claim = index_claim(
    "attention_dropout.delta",
    "Under dropout too, rowsum(dA ⊙ A) = rowsum(dO ⊙ O)",
    "FlashAttention; seed A §6.C",
    r"\mathrm{rowsums}\left(\frac{\partial \mathcal{L}}{\partial A} \odot A\right) = "
    r"\mathrm{rowsums}\left(\frac{\partial \mathcal{L}}{\partial O} \odot O\right), \quad "
    r"O = \left(A \odot \frac{M}{1 - p}\right) V",
    lhs=entry(RowSum(datt * att), (i, 0), through),
    rhs=entry(RowSum(do * o), (i, 0), through),
    setting=Setting(sizes={m: 2, n: 3, d_v: 2}, indices={i: (0, m - 1)}, scalars={p: sp.Rational(1, 5)}),
    mutants={
        "unmasked-O": (
            "O read as A V (the mask missed in the forward)",
            entry(RowSum(do * MatMul(att, v)), (i, 0), through),
        ),
        "missing-A": ("rowsum(dA) without the A factor", entry(RowSum(datt), (i, 0), through)),
    },
)

CLAIMS = [delta_claim]

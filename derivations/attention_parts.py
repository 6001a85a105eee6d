"""Attention in two parts, so that the model may transform the scores between them.

Seed A §1, seed B §3 and §5 write attention as S = Q Kᵀ/√d_k, A = softmax(S + M), O = A V. A
score transform (Gemma 2's soft-capping S ← c·tanh(S/c), any elementwise op of the registry)
acts on S before the softmax, inside that formula; so the model's program calls the two halves
as ops of their own and the transform's op between them (`qed train --score-transform softcap`):

    attention_scores    S = Q Kᵀ/√d_k                     dQ = dS K/√d_k, dK = dSᵀ Q/√d_k
    attention_softmax   A = softmax(S + M), O = A V       dV = Aᵀ dO, dS = A ⊙ (dO Vᵀ − δ 1ᵀ),
                                                          δ = rowsum(dO ⊙ O)  (attention.delta)

Composed with the identity between them they are `attention` (its specification split at S);
the generated claims prove each printed forward and backward against its part of the
specification for all sizes, and `gpt.flow` proves the program's composition.
"""

from __future__ import annotations

import sympy as sp

from .attention import CAUSAL, A_spec, att, d_k, d_v, datt, dk, do, dq, dv, k, m, n, o, q, s, v
from .language.arrays import Array, Assign, CausalMask, MatMul, RowSum, T
from .language.ops import Op, Quote, RangeLimit, grad_of
from .softmax import softmax_math, softmax_stable

ds = grad_of(s)
ds_scaled = Array("ds_scaled", (m, n))
delta = Array("delta", (m, 1))
s_in = Array("s", (m, n), latex="S")  # the (transformed) scores, an input of the second half
sm = Array("s_masked", (m, n), latex=r"\tilde{S}")  # S + M: the causal mask on the scores

ATTENTION_SCORES = Op(
    name="attention_scores",
    title="Attention scores S = Q Kᵀ/√d_k",
    source="seed A §1, seed B §3",
    inputs=[q, k],
    outputs=[s],
    spec=[Assign(s, MatMul(q, T(k)) / sp.sqrt(d_k))],  # S = Q Kᵀ / √d_k
    quotes=(
        Quote(
            "seed A §1",
            r"\mathbf{S}",
            r"\mathbf{S} = \frac{\mathbf{Q}\mathbf{K}^T}{\sqrt{d_k}}"
            "\n"
            r"S_{ij} = \frac{1}{\sqrt{d_k}} \sum_{m=1}^{d_k} Q_{im} K_{jm}",
            args=(r"\mathbf{Q}", r"\mathbf{K}"),
        ),
        Quote("seed B §3", "S", r"S = \frac{QK^T}{\sqrt{d_k}}", args=("Q", "K")),
    ),
    # q scaled before the product: no intermediate exceeds the result (Q Kᵀ may overflow where
    # Q Kᵀ/√d_k does not)
    forward=[Assign(s, MatMul(q / sp.sqrt(d_k), T(k)))],
    saved=[q, k],
    backward=[
        Assign(ds_scaled, ds / sp.sqrt(d_k)),  # dS/√d_k, before the products (as q above)
        Assign(dq, MatMul(ds_scaled, k)),  # dQ = dS K / √d_k
        Assign(dk, MatMul(T(ds_scaled), q)),  # dK = dSᵀ Q / √d_k
    ],
    grads=[dq, dk],
    sizes={d_k: (q, 1)},
    check={"sizes": {"m": 2, "n": 3}},
    broadcast=True,  # leading axes broadcast between q and k (torch's matmul)
    range_limit=RangeLimit(
        {"float32": 1e20},
        "attention_scores: a partial sum of the product q kᵀ/√d_k overflows float32 where the whole "
        "sum, just below the largest float, does not (beyond 1e20 the exact scores are out of range too)",
        last={"float32": 1e20},
    ),
    cache_doc="q, k.",
    reference=lambda torch, q, k: q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5,
)

ATTENTION_SOFTMAX = Op(
    name="attention_softmax",
    title="Attention from scores: O = softmax(S + M) V",
    source="seed A §1 and §6, seed B §4 and §5",
    inputs=[s_in, v],
    outputs=[o],
    spec=[
        Assign(sm, s_in),
        Assign(sm, CausalMask(sm), when="causal"),  # S_ij = −∞ for j > i
        Assign(A_spec, softmax_math(sm)),  # A = e^{S} / rowsum(e^{S})
        Assign(o, MatMul(A_spec, v)),  # O = A V
    ],
    quotes=(
        Quote(
            "seed A §1",
            r"\mathbf{O}",
            r"A_{ij} = \frac{\exp(S_{ij})}{\sum_{p=1}^{n} \exp(S_{ip})}"
            "\n"
            r"\mathbf{O} = \mathbf{A}\mathbf{V}"
            "\n"
            r"O_{ij} = \sum_{q=1}^{n} A_{iq} V_{qj}",
            args=(r"\mathbf{S}", r"\mathbf{V}"),
        ),
    ),
    forward=[
        Assign(sm, s_in),
        Assign(sm, CausalMask(sm), when="causal"),  # M_ij = −∞ for j > i
        Assign(att, softmax_stable(sm)),  # row max subtracted: softmax.shift
        Assign(o, MatMul(att, v)),
    ],
    saved=[v, att, o],
    backward=[
        Assign(dv, MatMul(T(att), do)),  # dV = Aᵀ dO
        Assign(datt, MatMul(do, T(v))),  # dA = dO Vᵀ
        Assign(delta, RowSum(do * o), note="δ = rowsum(dA ⊙ A), from dO and O alone (attention.delta)"),
        Assign(grad_of(s_in), att * (datt - delta)),  # dS = A ⊙ (dA − δ 1ᵀ)
    ],
    grads=[grad_of(s_in), dv],
    options=[CAUSAL],
    check={"sizes": {"m": 3, "n": 3}},  # causal: every row sees a different count of keys
    broadcast=True,
    cache_doc="v, the attention weights att = softmax(s + M) (m×n) and the output o.",
    reference=lambda torch, s, v, causal=False: (
        torch.softmax(
            s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf")) if causal else s, dim=-1
        )
        @ v
    ),
)

OPS = [ATTENTION_SCORES, ATTENTION_SOFTMAX]
__all__ = ["ATTENTION_SCORES", "ATTENTION_SOFTMAX", "OPS", "d_v"]

"""Multi-head attention: heads are column blocks of one fused projection, and the output
projection of the concatenation is the sum of per-head projections.

Seed A §2, seed B §6-7:

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   W_i ∈ R^{d_model × d_k}
    MultiHead = Concat(head_1, …, head_h) W^O,       W^O ∈ R^{h d_v × d_model}
    d_k = d_model / h

The runtime computes one fused projection X W and reshapes it into h heads; these claims are
why that is the same model as h separate projections.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, MatMul, entry, index, size
from .language.ops import Composite
from .proof.core import Claim, Mutant, Proof, Setting, counterexample, index_claim

T_, d_model, h, d_k, d_v = size("T"), size("d_model"), size("h"), size("d_k"), size("d_v")
r, i, t, j, m, c = (index(s) for s in ("r", "i", "t", "j", "m", "c"))

x = Array("x", (T_, d_model))
w_q = Array("w_q", (d_model, h * d_k))  # fused: the h per-head W_i^Q side by side
heads = Array("heads", (T_, h * d_v))  # Concat(head_1, …, head_h)
w_o = Array("w_o", (h * d_v, d_model))

setting = Setting(
    sizes={T_: 2, d_model: 3, h: 2, d_k: 2, d_v: 2},
    indices={r: (0, T_ - 1), i: (0, h - 1), t: (0, d_k - 1), j: (0, d_model - 1)},
)

# (1) head i of the fused projection is X W_i^Q with W_i^Q = the columns i·d_k … i·d_k + d_k − 1.
fused_entry = entry(MatMul(x, w_q), (r, d_k * i + t))
per_head = sp.Sum(x.base[r, m] * w_q.base[m, d_k * i + t], (m, 0, d_model - 1))  # (X W_i^Q)_rt
# (2) Concat(heads) W^O = Σ_i head_i W_i^O with W_i^O = the rows i·d_v … i·d_v + d_v − 1.
concat_then_project = entry(MatMul(heads, w_o), (r, j))
sum_of_heads = sp.Sum(sp.Sum(heads.base[r, d_v * i + t] * w_o.base[d_v * i + t, j], (t, 0, d_v - 1)), (i, 0, h - 1))

concat = index_claim(
    "mha.concat",
    "Per-head projections are blocks of one fused projection; Concat·W^O = Σ_i head_i W_i^O",
    "seed A §2, seed B §6",
    r"\mathrm{head}_{i} = \mathrm{Attention}(Q W_{i}^{Q}, K W_{i}^{K}, V W_{i}^{V}), \quad "
    r"\mathrm{Concat}(\mathrm{head}_{1}, \ldots, \mathrm{head}_{h}) W^{O} = \sum_{i} \mathrm{head}_{i} W_{i}^{O}",
    lhs=[fused_entry, concat_then_project],
    rhs=[per_head, sum_of_heads],
    setting=setting,
    mutants={
        "head-stride": (
            "head i taken at columns i … i + d_k − 1 (stride 1 instead of d_k)",
            [sp.Sum(x.base[r, m] * w_q.base[m, i + t], (m, 0, d_model - 1)), sum_of_heads],
        ),
        "wo-columns": (
            "W_i^O sliced by columns instead of rows",
            [
                per_head,
                sp.Sum(sp.Sum(heads.base[r, d_v * i + t] * w_o.base[t, d_v * i + j], (t, 0, d_v - 1)), (i, 0, h - 1)),
            ],
        ),
        "shared-wo": (
            "every head projected with the first block of W^O",
            [per_head, sp.Sum(sp.Sum(heads.base[r, d_v * i + t] * w_o.base[t, j], (t, 0, d_v - 1)), (i, 0, h - 1))],
        ),
    },
)


def _head_dim() -> Proof:
    # with d_k = d_model / h the concatenation is d_model wide, so W^O is d_model × d_model ...
    width = sp.simplify(h * (d_model / h) - d_model)
    # ... and the document's example: 768 / 12 = 64, exactly.
    example = sp.Rational(768, 12)
    if width != 0 or example != 64:
        return Proof("unproven", "width or example failed", residual=f"{width}, {example}")
    return Proof(
        "proved-general",
        "exact arithmetic: h·(d_model/h) − d_model = 0; 768/12 = 64",
        ["h ≠ 0", "h divides d_model (the runtime rejects a config where it does not)"],
    )


head_dim = Claim(
    id="mha.head_dim",
    title="Head dimension d_k = d_model / h",
    source="seed B §7",
    latex=r"d_{k} = \frac{d_{\mathrm{model}}}{h}, \quad \frac{768}{12} = 64",
    prove=_head_dim,
    mutants=[
        Mutant(
            "no-split",
            "each head as wide as the model (d_k = d_model): concat is h·d_model wide",
            lambda: counterexample(h * d_model, d_model, Setting(sizes={h: 12, d_model: 768})),
        ),
        Mutant(
            "times-h",
            "d_k = d_model·h",
            lambda: counterexample(sp.Integer(768) * 12, sp.Integer(64), Setting(sizes={})),
        ),
    ],
)

CLAIMS: list[Claim] = [concat, head_dim]

# The generated multi-head attention layer: one fused QKV projection (linear), the head split
# that mha.concat justifies, scaled dot-product attention per head (attention), the merge, and
# the output projection (linear). Every formula in it is a kernel's; the layout is the template's.
MHA = Composite(
    name="mha",
    module=__name__,
    title="Multi-head attention (fused QKV projection)",
    latex=r"\mathrm{MHA}(X) = \mathrm{Concat}(\mathrm{head}_{1}, \ldots, \mathrm{head}_{h}) W^{O}, \quad "
    r"\mathrm{head}_{i} = \mathrm{Attention}(X W_{i}^{Q}, X W_{i}^{K}, X W_{i}^{V})",
    claims=[
        "mha.concat",
        "mha.head_dim",
        "linear.dX",
        "linear.dW",
        "linear.db",
        "attention.dQ",
        "attention.dK",
        "attention.dV",
        "attention.causal",
    ],
    kernels=["linear", "attention"],
    template="mha",
)
COMPOSITES = [MHA]

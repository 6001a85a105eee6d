"""QK-L2-norm: each head's queries and keys scaled to unit length, then by a learned gain.

Henry et al., "Query-Key Normalization for Transformers" (2020), and nGPT (Loshchilov et al.,
2024) normalise q and k along the head's features before the scores, so that q·k is a cosine
and cannot grow without bound (the attention-logit growth that QK-norm prevents):

    y = γ ⊙ x / √(Σ_j x_j² + ε)        (per row: one head's q or k at one position)

Declared by its forward alone; the backward is derived. Its role is `qk_transform`: an op on
each head's q and k (`qed train --qk-norm qk_l2norm`), never the model's norm (a row of unit
length, where LayerNorm and RMSNorm give rows of length √n). γ starts at 1; with unit q and k
the scores q·k/√d start within ±1/√d and the gains learn the temperature, as the paper's scale
g does.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, RowSum, size
from .language.ops import Op, Option, RangeLimit

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
gamma = Array("gamma", (1, n), latex=r"\gamma")
rnorm = Array("rnorm", (r, 1), latex=r"\rho")  # 1/√(Σ x² + ε), one per row
eps = sp.Symbol("epsilon", positive=True)

QK_L2NORM = Op(
    name="qk_l2norm",
    title="QK-L2-norm: unit-length rows, then a per-feature gain",
    source="Henry et al. 2020 (QKNorm); nGPT, Loshchilov et al. 2024",
    inputs=[x],
    params=[gamma],
    options=[Option(eps, "eps", 1e-5, "added to the squared length inside the root")],
    outputs=[y],
    spec=[
        Assign(rnorm, 1 / sp.sqrt(RowSum(x**2) + eps)),  # 1/‖x‖, ε inside the root
        Assign(y, gamma * (x * rnorm)),  # y = γ ⊙ x/‖x‖
    ],
    sizes={n: (x, 1)},
    optional_axes=1,
    module_params={"gamma": "weight"},
    param_init={"gamma": "ones"},
    role="qk_transform",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        "qk_l2norm: the squared length Σ x² overflows, 1/‖x‖ = 0 and y = 0",
    ),
    reference=lambda torch, x, g, eps=1e-5: g * x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps),
)

OPS = [QK_L2NORM]

"""LayerScale: a residual branch scaled per feature, y = γ ⊙ x, declared by its forward alone.

Touvron et al., "Going deeper with image transformers" (CaiT, 2021): each block's attention and
MLP outputs are multiplied by a learned per-feature vector before the residual add,
x' = x + γ ⊙ f(x). Its role in the model is `residual_scale` (`qed train --residual-scale
layerscale`); the derived backward is dx = γ ⊙ dy, dγ = Σ_rows dy ⊙ x. γ starts at 1, so a model
with it starts as the model without.
"""

from __future__ import annotations

from .language.arrays import Array, Assign, size
from .language.ops import Op

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
gamma = Array("gamma", (1, n), latex=r"\gamma")

LAYERSCALE = Op(
    name="layerscale",
    title="LayerScale: a residual branch scaled per feature",
    source="Touvron et al. 2021 (CaiT)",
    inputs=[x],
    params=[gamma],
    outputs=[y],
    spec=[Assign(y, gamma * x)],  # y = γ ⊙ x
    sizes={n: (x, 1)},
    optional_axes=1,
    module_params={"gamma": "weight"},
    param_init={"gamma": "ones"},
    role="residual_scale",
    reference=lambda torch, x, g: g * x,
)

OPS = [LAYERSCALE]

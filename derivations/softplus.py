"""Softplus: y = log(1 + e^{x}), declared by its forward alone.

The backward is derived (σ(x), as the sigmoid: `stability.sigmoid_ratio`), the printed forward is
the overflow-free max(x, 0) + log1p(e^{−|x|}) (`stability.softplus`); the generated claims
prove both against this formula for symbolic sizes.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, size
from .language.ops import Op

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))

SOFTPLUS = Op(
    name="softplus",
    title="Softplus",
    source="Dugas et al. 2001; torch.nn.Softplus",
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, sp.log(1 + sp.exp(x)))],  # y = log(1 + e^{x})
    optional_axes=2,  # elementwise: any shape
    reference=lambda torch, x: torch.nn.functional.softplus(x),
)

OPS = [SOFTPLUS]

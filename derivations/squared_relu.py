"""Squared ReLU: y = max(0, x)², declared by its forward alone (So et al. 2021, "Primer").

The derived backward is dy ⊙ 2 max(0, x) · (1 + sign x)/2: the kink at 0 has derivative 0 on
both sides, so no subgradient is chosen.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, size
from .language.ops import Op

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))

SQUARED_RELU = Op(
    name="squared_relu",
    title="Squared ReLU",
    source="So et al. 2021 (Primer)",
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, sp.Max(0, x) ** 2)],  # y = max(0, x)²
    optional_axes=2,
    reference=lambda torch, x: torch.relu(x) ** 2,
)

OPS = [SQUARED_RELU]

"""Mish: y = x · tanh(softplus(x)), declared by its forward alone (Misra 2019).

Printed with softplus overflow-free (`stability.softplus`); the derived backward is
tanh(s) + x (1 − tanh² s) σ(x), s = softplus(x), with the sigmoid from e^{−|x|}.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, size
from .language.ops import Op

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
s = Array("softplus_x", (r, n), latex=r"\mathrm{softplus}(x)")

MISH = Op(
    name="mish",
    title="Mish",
    source="Misra 2019",
    inputs=[x],
    outputs=[y],
    spec=[
        Assign(s, sp.log(1 + sp.exp(x))),  # softplus(x) = log(1 + e^{x})
        Assign(y, x * sp.tanh(s)),
    ],  # y = x tanh(softplus(x))
    optional_axes=2,
    reference=lambda torch, x: torch.nn.functional.mish(x),
)

OPS = [MISH]

"""Squareplus: y = (x + √(x² + b))/2, declared by its forward alone (Barron 2021).

A softplus-like rectifier from a square root instead of an exponential: y > 0, y → x for
x ≫ 0, y → b/(4|x|) → 0 for x ≪ 0, y(0) = √b/2. As written it fails twice in floating point:
x + √(x² + b) cancels for x ≪ 0 (0 at x = −1e4 in float32, where the value is 1e-4) and x²
overflows for |x| > 1.8e19 in float32 where the value is finite. The printed forward is the
rationalised form with the root as hypot(x, √b) (`stability.sqrt_rationalised`,
`stability.hypot`): [x ≥ 0] (x + R) + [x < 0] b/(R + |x|), R = hypot(x, √b). The smoothing b is
a keyword option (default 4, the paper's), refused unless b > 0.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, size
from .language.ops import Op, Option

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
b = sp.Symbol("b", positive=True)

SQUAREPLUS = Op(
    name="squareplus",
    title="Squareplus",
    source="Barron 2021 (Squareplus: a softplus-like algebraic rectifier)",
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, (x + sp.sqrt(x**2 + b)) / 2)],  # y = (x + √(x² + b))/2
    options=[Option(b, "b", 4.0, "the smoothing b > 0: y(0) = √b/2")],
    optional_axes=2,
    reference=lambda torch, x, b=4.0: (x + torch.sqrt(x * x + b)) / 2,
)

OPS = [SQUAREPLUS]

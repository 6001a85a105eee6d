"""Logit soft-capping: y = c · tanh(x / c), declared by its forward alone (Gemma 2).

Smoothly bounds |y| < c; the derived backward is dy ⊙ (1 − tanh²(x/c)). The cap c is a
keyword option (default 30, Gemma 2's final-logit cap), refused unless c > 0.
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, size
from .language.ops import Op, Option

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
cap = sp.Symbol("cap", positive=True)

SOFTCAP = Op(
    name="softcap",
    title="Logit soft-capping",
    source="Gemma 2 (Team Gemma 2024)",
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, cap * sp.tanh(x / cap))],  # y = c tanh(x/c)
    options=[Option(cap, "cap", 30.0, "the cap c > 0: |y| < c")],
    optional_axes=2,
    reference=lambda torch, x, cap=30.0: cap * torch.tanh(x / cap),
)

OPS = [SOFTCAP]

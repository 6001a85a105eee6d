"""GeGLU feed-forward: y = (GELU(x W_gᵀ) ⊙ x W_uᵀ) W_dᵀ, declared by its forward alone (Shazeer 2020).

GELU(g) = g Φ(g) with Φ(g) = (1 + erf(g/√2))/2 as the sources write it; printed as the normal
CDF's one library call (`stability.normal_cdf`), and the derived backward's Φ′(g) = e^{−g²/2}/√(2π)
without forming g² (`stability.gaussian`: g² overflows float32 for |g| > 1.8e19). Weights stored
out × in, as `torch.nn.Linear`; no biases (as SwiGLU).
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, MatMul, T, size
from .language.ops import Op, RangeLimit

r, d, f = size("r"), size("d"), size("f")  # rows, model width, hidden width
x, y = Array("x", (r, d)), Array("y", (r, d))
w_gate, w_up, w_down = Array("w_gate", (f, d)), Array("w_up", (f, d)), Array("w_down", (d, f))
g, u, phi, h = Array("g", (r, f)), Array("u", (r, f)), Array("Phi", (r, f), latex=r"\Phi"), Array("h", (r, f))

GEGLU = Op(
    name="geglu",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        (
            "geglu: as swiglu — the pre-activations g, u ~ M² and h = GELU(g)·u ~ M⁴ "
            "overflow where y ~ h·w_down is in range (or Φ(g) = 0 meets g·u = inf: 0·inf = "
            "NaN)"
        ),
    ),
    title="GeGLU feed-forward network",
    source="Shazeer 2020 (GLU variants)",
    inputs=[x],
    params=[w_gate, w_up, w_down],
    outputs=[y],
    spec=[
        Assign(g, MatMul(x, T(w_gate))),  # g = x W_gᵀ
        Assign(u, MatMul(x, T(w_up))),  # u = x W_uᵀ
        Assign(phi, (1 + sp.erf(g / sp.sqrt(2))) / 2),  # Φ(g) = (1 + erf(g/√2))/2
        Assign(h, g * phi * u),  # h = GELU(g) ⊙ u
        Assign(y, MatMul(h, T(w_down))),
    ],  # y = h W_dᵀ
    optional_axes=1,  # x: any shape with at least one axis
    reference=lambda torch, x, wg, wu, wd: torch.nn.functional.linear(
        torch.nn.functional.gelu(torch.nn.functional.linear(x, wg)) * torch.nn.functional.linear(x, wu), wd
    ),
)

OPS = [GEGLU]

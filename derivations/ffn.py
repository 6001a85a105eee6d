"""SwiGLU feed-forward: FFN(x) = (SiLU(x W_gᵀ) ⊙ (x W_uᵀ)) W_dᵀ, and its backward.

Seed B §14 (weights stored out × in, as `torch.nn.Linear`):

    g = x W_gᵀ    u = x W_uᵀ    h = SiLU(g) ⊙ u    y = h W_dᵀ

Backward (the SiLU derivative is the one proved in `silu.derivative`):

    dh = dy W_d      dW_d = Σ dyᵀ h
    du = dh ⊙ SiLU(g)          dg = dh ⊙ u ⊙ SiLU′(g)
    dW_u = Σ duᵀ x   dW_g = Σ dgᵀ x   dx = dg W_g + du W_u
"""

from __future__ import annotations

import sympy as sp

from .activations import silu, silu_grad
from .language.arrays import Array, Assign, Contract, MatMul, Sigmoid, T, document_form, entry, index, size
from .language.ops import Op, Quote, RangeLimit, grad_of
from .proof.core import Claim, Setting, index_claim

r, n, hid = size("r"), size("n"), size("n_hidden")
i, j, e, f = (index(s) for s in "ijef")

x = Array("x", (r, n))
w_gate, w_up, w_down = Array("w_gate", (hid, n)), Array("w_up", (hid, n)), Array("w_down", (n, hid))
g, u, hh, y = Array("g", (r, hid)), Array("u", (r, hid)), Array("h", (r, hid)), Array("y", (r, n))
dy, dh, dg, du = grad_of(y), grad_of(hh), grad_of(g), grad_of(u)
dsilu = Array("dsilu", (r, hid), latex=r"\mathrm{SiLU}'(g)")  # the backward's SiLU′(g), bounded
dx, dw_gate, dw_up, dw_down = grad_of(x), grad_of(w_gate), grad_of(w_up), grad_of(w_down)

# The document's SwiGLU (seed B §13-14), in a scope of its own, SiLU written out as
# g/(1 + e^{−g}) (SymPy differentiates exp itself): h = SiLU(x W_gᵀ) ⊙ (x W_uᵀ), y = h W_dᵀ.
g_s, u_s, hh_s = Array("g", (r, hid), latex="g"), Array("u", (r, hid), latex="u"), Array("h", (r, hid), latex="h")
silu_g_s = Array("silu_g", (r, hid), latex=r"\mathrm{SiLU}(g)")
SWIGLU_SPEC = [
    Assign(g_s, MatMul(x, T(w_gate))),  # g = x W_gᵀ
    Assign(u_s, MatMul(x, T(w_up))),  # u = x W_uᵀ
    Assign(silu_g_s, g_s / (1 + sp.exp(-g_s))),  # SiLU(g) = g/(1 + e^{−g})
    Assign(hh_s, silu_g_s * u_s),  # h = SiLU(g) ⊙ u
    Assign(y, MatMul(hh_s, T(w_down))),  # y = h W_dᵀ
]

SWIGLU = Op(
    name="swiglu",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        (
            "swiglu: the pre-activations g = x W_gᵀ, u = x W_uᵀ ~ M² (x and the weights "
            "scaled) are out of range where y, dx are not (σ(g) ≈ e^{−|g|} cancels them; a "
            "spike's h = SiLU(g)·u ~ M² overflows where y ~ h·w_down is in range): inf·0 = "
            "NaN, as ffn_relu"
        ),
    ),
    title="SwiGLU feed-forward network",
    reference=lambda torch, x, wg, wu, wd: torch.nn.functional.linear(
        torch.nn.functional.silu(torch.nn.functional.linear(x, wg)) * torch.nn.functional.linear(x, wu), wd
    ),
    spec=SWIGLU_SPEC,
    source="seed B §13-14",
    # the sources' SwiGLU and the FFN around it; the op stores each weight out × in (W_gᵀ, …)
    quotes=(
        Quote(
            "seed B §14",
            "FFN",
            "SwiGLU(x) = SiLU(xW_g) \\odot (xW_u)\nFFN(x) = SwiGLU(x)W_d",
            params=(("w_gate", "W_g^T"), ("w_up", "W_u^T"), ("w_down", "W_d^T")),
        ),
    ),
    mistakes={
        "swapped-gate": ("SiLU applied to the up projection instead of the gate", "forward", "h", silu(u) * g),
        "sigmoid-gate": ("σ(g) ⊙ u (GLU) instead of SiLU(g) ⊙ u", "forward", "h", Sigmoid(g) * u),
        "silu-not-derivative": ("SiLU(g) used where SiLU′(g) belongs", "backward", "dg", dh * u * silu(g)),
        "sigmoid-derivative": (
            "σ(g)(1 − σ(g)) used for SiLU′(g)",
            "backward",
            "dg",
            dh * u * Sigmoid(g) * (1 - Sigmoid(g)),
        ),
        "no-u": ("the u factor dropped from dg", "backward", "dg", dh * silu_grad(g)),
        "no-gate": ("the SiLU(g) factor dropped from du", "backward", "du", dh),
        "ungated": ("u (before the gate) used in place of h", "backward", "dw_down", Contract(dy, u)),
        "gate-only": ("the up branch's gradient dropped", "backward", "dx", MatMul(dg, w_gate)),
    },
    claims=["swiglu.forward", "swiglu.dx", "swiglu.dW_gate", "swiglu.dW_up", "swiglu.dW_down", "silu.derivative"],
    inputs=[x],
    params=[w_gate, w_up, w_down],
    forward=[
        Assign(g, MatMul(x, T(w_gate))),  # gate pre-activation
        Assign(u, MatMul(x, T(w_up))),  # up projection
        Assign(hh, silu(g) * u),  # SwiGLU(x) = SiLU(g) ⊙ u
        Assign(y, MatMul(hh, T(w_down))),  # down projection
    ],
    outputs=[y],
    saved=[x, g, u, hh, w_gate, w_up, w_down],
    backward=[
        Assign(dh, MatMul(dy, w_down)),  # dh = dy W_d
        Assign(dw_down, Contract(dy, hh)),  # dW_d = Σ dyᵀ h
        Assign(du, dh * silu(g)),  # du = dh ⊙ SiLU(g)
        # SiLU′(g) = σ(g)(1 + g(1 − σ(g))) ∈ [−0.1, 1.1] first: multiplying the unbounded
        # factors dh ⊙ u ⊙ (1 + g(1 − σ(g))) before σ(g) gives inf·0 = NaN at g ≪ 0
        Assign(dsilu, silu_grad(g)),
        Assign(dg, dh * u * dsilu),  # dg = dh ⊙ u ⊙ SiLU′(g)
        Assign(dw_up, Contract(du, x)),
        Assign(dw_gate, Contract(dg, x)),
        Assign(dx, MatMul(dg, w_gate) + MatMul(du, w_up)),
    ],
    grads=[dx, dw_gate, dw_up, dw_down],
    optional_axes=1,  # x: any shape with at least one axis
    cache_doc="x, the pre-activations g and u, the gated hidden h, and the three weights.",
)
OPS = [SWIGLU]

setting = Setting(sizes={r: 2, n: 2, hid: 3}, indices={i: (0, r - 1), j: (0, n - 1), e: (0, r - 1), f: (0, n - 1)})
code = SWIGLU.env()
# the loss with σ written as the document's 1/(1 + e^{−g}): sympy.diff takes the derivatives
L = sp.Sum(dy.base[i, j] * document_form(entry(y, (i, j), code)), (i, 0, r - 1), (j, 0, n - 1))


def _grad_claim(name, target, wrt, rows, cols, latex, mutants):
    return index_claim(
        f"swiglu.{name}",
        f"SwiGLU gradient with respect to {wrt.name}, end to end",
        "seed B §14",
        latex,
        lhs=sp.diff(L, wrt.base[e, f]),
        rhs=entry(target, (e, f), code),
        setting=Setting(sizes=setting.sizes, indices={e: (0, rows - 1), f: (0, cols - 1)}),
        mutants={k: (mistake, entry(wrong, (e, f), code)) for k, (mistake, wrong) in mutants.items()},
    )


dX = _grad_claim(
    "dx",
    dx,
    x,
    r,
    n,
    r"\frac{\partial L}{\partial x} = dg\, W_{g} + du\, W_{u}",
    {
        "gate-only": ("the up branch's gradient dropped", MatMul(dg, w_gate)),
        "silu-not-derivative": (
            "SiLU(g) used where SiLU′(g) belongs",
            MatMul(dh * u * silu(g), w_gate) + MatMul(du, w_up),
        ),
    },
)
dWg = _grad_claim(
    "dW_gate",
    dw_gate,
    w_gate,
    hid,
    n,
    r"\frac{\partial L}{\partial W_{g}} = \sum \left(dh \odot u \odot \mathrm{SiLU}'(g)\right)^{T} x",
    {"no-u": ("the u factor dropped", Contract(dh * silu_grad(g), x))},
)
dWu = _grad_claim(
    "dW_up",
    dw_up,
    w_up,
    hid,
    n,
    r"\frac{\partial L}{\partial W_{u}} = \sum \left(dh \odot \mathrm{SiLU}(g)\right)^{T} x",
    {"no-gate": ("the SiLU(g) factor dropped", Contract(dh, x))},
)
dWd = _grad_claim(
    "dW_down",
    dw_down,
    w_down,
    n,
    hid,
    r"\frac{\partial L}{\partial W_{d}} = \sum dy^{T} h",
    {"ungated": ("u (before the gate) used in place of h", Contract(dy, u))},
)

CLAIMS: list[Claim] = [dX, dWg, dWu, dWd]

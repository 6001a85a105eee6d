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
from .arrays import Array, Assign, Contract, MatMul, T, document_form, entry, index, size
from .core import Claim, Setting, index_claim
from .ops import Op, grad_of

r, n, hid = size("r"), size("n"), size("n_hidden")
i, j, e, f, c = (index(s) for s in "ijefc")

x = Array("x", (r, n))
w_gate, w_up, w_down = Array("w_gate", (hid, n)), Array("w_up", (hid, n)), Array("w_down", (n, hid))
g, u, hh, y = Array("g", (r, hid)), Array("u", (r, hid)), Array("h", (r, hid)), Array("y", (r, n))
dy, dh, dg, du = grad_of(y), grad_of(hh), grad_of(g), grad_of(u)
dx, dw_gate, dw_up, dw_down = grad_of(x), grad_of(w_gate), grad_of(w_up), grad_of(w_down)

SWIGLU = Op(
    name="swiglu", module=__name__, title="SwiGLU feed-forward network",
    latex=r"\mathrm{FFN}(x) = \left(\mathrm{SiLU}(x W_{g}^{T}) \odot (x W_{u}^{T})\right) W_{d}^{T}",
    claims=["swiglu.forward", "swiglu.dx", "swiglu.dW_gate", "swiglu.dW_up", "swiglu.dW_down", "silu.derivative"],
    inputs=[x], params=[w_gate, w_up, w_down],
    forward=[
        Assign(g, MatMul(x, T(w_gate))),               # gate pre-activation
        Assign(u, MatMul(x, T(w_up))),                 # up projection
        Assign(hh, silu(g) * u),                       # SwiGLU(x) = SiLU(g) ⊙ u
        Assign(y, MatMul(hh, T(w_down))),              # down projection
    ],
    outputs=[y], saved=[x, g, u, hh, w_gate, w_up, w_down],
    backward=[
        Assign(dh, MatMul(dy, w_down)),                # dh = dy W_d
        Assign(dw_down, Contract(dy, hh)),             # dW_d = Σ dyᵀ h
        Assign(du, dh * silu(g)),                      # du = dh ⊙ SiLU(g)
        Assign(dg, dh * u * silu_grad(g)),             # dg = dh ⊙ u ⊙ SiLU′(g)
        Assign(dw_up, Contract(du, x)),
        Assign(dw_gate, Contract(dg, x)),
        Assign(dx, MatMul(dg, w_gate) + MatMul(du, w_up)),
    ],
    grads=[dx, dw_gate, dw_up, dw_down],
    cache_doc="x, the pre-activations g and u, the gated hidden h, and the three weights.",
)
OPS = [SWIGLU]

setting = Setting(sizes={r: 2, n: 2, hid: 3}, indices={i: (0, r - 1), j: (0, n - 1), e: (0, r - 1), f: (0, n - 1)})
code = SWIGLU.env()
# the loss with σ written as the document's 1/(1 + e^{−g}): sympy.diff takes the derivatives
L = sp.Sum(dy.base[i, j] * document_form(entry(y, (i, j), code)), (i, 0, r - 1), (j, 0, n - 1))
sigma = lambda z: 1 / (1 + sp.exp(-z))  # noqa: E731  (the document's σ, seed B §13)

forward = index_claim(
    "swiglu.forward", "SwiGLU forward in index form", "seed B §13-14",
    r"y_{ij} = \sum_{c} \frac{g_{ic}}{1 + e^{-g_{ic}}} u_{ic} (W_{d})_{jc}",
    lhs=entry(y, (i, j), code),
    rhs=sp.Sum(entry(g, (i, c), code) * sigma(entry(g, (i, c), code)) * entry(u, (i, c), code)
               * w_down.base[j, c], (c, 0, hid - 1)),
    setting=setting,
    mutants={"swapped-gate": ("SiLU applied to the up projection instead of the gate",
                              sp.Sum(entry(u, (i, c), code) * sigma(entry(u, (i, c), code)) * entry(g, (i, c), code)
                                     * w_down.base[j, c], (c, 0, hid - 1))),
             "sigmoid-gate": ("σ(g) ⊙ u (GLU) instead of SiLU(g) ⊙ u",
                              sp.Sum(sigma(entry(g, (i, c), code)) * entry(u, (i, c), code)
                                     * w_down.base[j, c], (c, 0, hid - 1)))})


def _grad_claim(name, target, wrt, rows, cols, latex, mutants):
    return index_claim(
        f"swiglu.{name}", f"SwiGLU gradient with respect to {wrt.name}, end to end", "seed B §14",
        latex, lhs=sp.diff(L, wrt.base[e, f]), rhs=entry(target, (e, f), code),
        setting=Setting(sizes=setting.sizes, indices={e: (0, rows - 1), f: (0, cols - 1)}),
        mutants={k: (mistake, entry(wrong, (e, f), code)) for k, (mistake, wrong) in mutants.items()})


dX = _grad_claim("dx", dx, x, r, n,
                 r"\frac{\partial L}{\partial x} = dg\, W_{g} + du\, W_{u}",
                 {"gate-only": ("the up branch's gradient dropped", MatMul(dg, w_gate)),
                  "silu-not-derivative": ("SiLU(g) used where SiLU′(g) belongs",
                                          MatMul(dh * u * silu(g), w_gate) + MatMul(du, w_up))})
dWg = _grad_claim("dW_gate", dw_gate, w_gate, hid, n,
                  r"\frac{\partial L}{\partial W_{g}} = \sum \left(dh \odot u \odot \mathrm{SiLU}'(g)\right)^{T} x",
                  {"no-u": ("the u factor dropped", Contract(dh * silu_grad(g), x))})
dWu = _grad_claim("dW_up", dw_up, w_up, hid, n,
                  r"\frac{\partial L}{\partial W_{u}} = \sum \left(dh \odot \mathrm{SiLU}(g)\right)^{T} x",
                  {"no-gate": ("the SiLU(g) factor dropped", Contract(dh, x))})
dWd = _grad_claim("dW_down", dw_down, w_down, n, hid,
                  r"\frac{\partial L}{\partial W_{d}} = \sum dy^{T} h",
                  {"ungated": ("u (before the gate) used in place of h", Contract(dy, u))})

CLAIMS: list[Claim] = [forward, dX, dWg, dWu, dWd]

"""Residual connections: the gradient flows through the identity branch unchanged.

Seed B §10: X' = X + f(X)  ⇒  ∂L/∂X = ∂L/∂X' + J_fᵀ ∂L/∂X'.

f is a generic sublayer φ(X W): W mixes features, φ is an *arbitrary* differentiable function
(SymPy sees only φ and its derivative φ'). The norm in the two block flows is likewise an
arbitrary differentiable elementwise map ψ: its own Jacobian is proved in `layernorm.dx` and
`rmsnorm.dx`; here what is proved is how the residual composes with it:

    post-norm (the document's flow):  Y = ψ(X + f(X))   ⇒  dX = (I + J_f)ᵀ (ψ'(Z) ⊙ G)
    pre-norm (GPT-2's):               Y = X + f(ψ(X))   ⇒  dX = G + ψ'(X) ⊙ J_fᵀ|_{ψ(X)} G
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, MatMul, T, entry, index, size
from .proof.core import Claim, Setting, index_claim

r, n = size("r"), size("n")
i, j, e, f = (index(s) for s in "ijef")


class dphi(sp.Function):
    """φ′, the derivative of the sublayer's nonlinearity (arbitrary)."""


class phi(sp.Function):
    """An arbitrary differentiable nonlinearity."""

    def fdiff(self, argindex=1):
        return dphi(self.args[0])


class dpsi(sp.Function):
    """ψ′ (arbitrary)."""


class psi(sp.Function):
    """An arbitrary differentiable elementwise stand-in for the norm."""

    def fdiff(self, argindex=1):
        return dpsi(self.args[0])


x, w, g = Array("x", (r, n)), Array("w", (n, n)), Array("g", (r, n))  # g = ∂L/∂(block output)


def sublayer(inp):
    return phi(MatMul(inp, w))


def sublayer_vjp(inp, upstream):
    """J_fᵀ G for f(X) = φ(X W): (φ'(X W) ⊙ G) Wᵀ."""
    return MatMul(dphi(MatMul(inp, w)) * upstream, T(w))


def loss(out):
    return sp.Sum(g.base[i, j] * entry(out, (i, j)), (i, 0, r - 1), (j, 0, n - 1))


setting = Setting(sizes={r: 2, n: 2}, indices={e: (0, r - 1), f: (0, n - 1)})

plain_out = x + sublayer(x)
backward = index_claim(
    "residual.backward",
    "Residual: the upstream gradient passes through the skip unchanged",
    "seed B §10",
    r"X' = X + f(X) \Rightarrow \frac{\partial L}{\partial X} = \frac{\partial L}{\partial X'} + "
    r"J_{f}^{T} \frac{\partial L}{\partial X'}",
    lhs=sp.diff(loss(plain_out), x.base[e, f]),
    rhs=entry(g + sublayer_vjp(x, g), (e, f)),
    setting=setting,
    mutants={
        "no-skip": ("the identity branch's gradient dropped", entry(sublayer_vjp(x, g), (e, f))),
        "no-transpose": ("J_f instead of J_fᵀ", entry(g + MatMul(dphi(MatMul(x, w)) * g, w), (e, f))),
    },
)

z = x + sublayer(x)
post_out = psi(z)
post_upstream = dpsi(z) * g  # through the norm first
postnorm = index_claim(
    "residual.postnorm",
    "Post-norm block (the document's flow): Y = Norm(X + f(X))",
    "seed B §10, flow",
    r"Y = \mathrm{Norm}(X + f(X)) \Rightarrow \frac{\partial L}{\partial X} = (I + J_{f})^{T} "
    r"\left(\mathrm{Norm}'(Z) \odot \frac{\partial L}{\partial Y}\right)",
    lhs=sp.diff(loss(post_out), x.base[e, f]),
    rhs=entry(post_upstream + sublayer_vjp(x, post_upstream), (e, f)),
    setting=setting,
    mutants={
        "skip-bypasses-norm": (
            "the skip's gradient taken before the norm",
            entry(g + sublayer_vjp(x, post_upstream), (e, f)),
        )
    },
)

pre_out = x + sublayer(psi(x))
prenorm = index_claim(
    "residual.prenorm",
    "Pre-norm block: Y = X + f(Norm(X))",
    "seed B §10 (GPT-2 ordering)",
    r"Y = X + f(\mathrm{Norm}(X)) \Rightarrow \frac{\partial L}{\partial X} = \frac{\partial L}{\partial Y} + "
    r"\mathrm{Norm}'(X) \odot J_{f}^{T} \frac{\partial L}{\partial Y}",
    lhs=sp.diff(loss(pre_out), x.base[e, f]),
    rhs=entry(g + dpsi(x) * sublayer_vjp(psi(x), g), (e, f)),
    setting=setting,
    mutants={
        "norm-on-skip": (
            "the norm's Jacobian applied to the skip too",
            entry(dpsi(x) * (g + sublayer_vjp(psi(x), g)), (e, f)),
        )
    },
)

CLAIMS: list[Claim] = [backward, postnorm, prenorm]

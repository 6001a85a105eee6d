"""Softmax: normalisation, shift invariance (why code subtracts the row max), the Jacobian,
and the softmax op whose backward is the Jacobian-vector product.

Seed B §4: softmax(x_i) = e^{x_i} / Σ_j e^{x_j}.  Seed A §6.C: ∂A_ij/∂S_ik = A_ij(δ_jk − A_ik).
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, RowMax, RowSum, entry, index, size
from .language.ops import Op, Quote, grad_of
from .proof.core import (
    Claim,
    Mutant,
    Proof,
    Setting,
    counterexample,
    index_claim,
    prove_index_identity,
)
from .proof.core import (
    canonical as normal_form,
)

n, r = size("n"), size("r")  # row length (the softmax axis) and number of rows
i, j, k, a, b = (index(s) for s in "ijkab")


def softmax_math(x):
    """The document's softmax over the last axis: exp(x) / rowsum(exp(x))."""
    return sp.exp(x) / RowSum(sp.exp(x))


def softmax_stable(x):
    """What the code computes: the row max is subtracted first (justified by softmax.shift)."""
    shifted = sp.exp(x - RowMax(x))
    return shifted / RowSum(shifted)


def softmax_vjp(y, dy):
    """∂L/∂x from ∂L/∂y and y = softmax(x):  dx = y ⊙ (dy − rowsum(dy ⊙ y))."""
    return y * (dy - RowSum(dy * y))


# --------------------------------------------------------------------------------- the op
X = Array("x", (r, n))
Y = Array("y", (r, n))
dY = grad_of(Y)
dX = grad_of(X)

# The document's softmax (seed B §4), in a scope of its own: no max shift (that the printed
# forward's shift changes nothing is what the generated claim softmax.forward proves).
SOFTMAX_SPEC = [Assign(Y, softmax_math(X))]  # y = e^{x} / rowsum(e^{x})

SOFTMAX = Op(
    name="softmax",
    module=__name__,
    title="Softmax over the last axis",
    spec=SOFTMAX_SPEC,
    source="seed B §4, seed A §6.C",
    quotes=(Quote("seed B §4", "softmax", r"softmax(x_i) = \frac{e^{x_i}} {\sum_j e^{x_j}}"),),
    mistakes={
        "numerator-only-shift": (
            "max subtracted in the numerator only",
            "forward",
            "y",
            sp.exp(X - RowMax(X)) / RowSum(sp.exp(X)),
        ),
        "no-normaliser": ("exp(x) used without dividing by the row sum", "forward", "y", sp.exp(X - RowMax(X))),
        "no-rowsum": ("the rowsum term dropped: dx = y ⊙ dy", "backward", "dx", Y * dY),
        "rowsum-of-dy": ("rowsum of dy instead of dy ⊙ y", "backward", "dx", Y * (dY - RowSum(dY))),
        "sign-flip": ("+ rowsum instead of − rowsum", "backward", "dx", Y * (dY + RowSum(dY * Y))),
    },
    claims=[
        "softmax.forward",
        "softmax.backward.dx",
        "softmax.normalised",
        "softmax.shift",
        "softmax.jacobian",
        "softmax.vjp",
    ],
    inputs=[X],
    forward=[Assign(Y, softmax_stable(X))],
    outputs=[Y],
    saved=[Y],
    backward=[Assign(dX, softmax_vjp(Y, dY))],
    grads=[dX],
    optional_axes=2,  # any shape; a 0-D x is a row of one (torch's convention)
    cache_doc="y, the probabilities (the backward needs nothing else).",
)
OPS = [SOFTMAX]

# ------------------------------------------------------------------------------- the claims
setting = Setting(
    sizes={n: 4, r: 2}, indices={i: (0, r - 1), j: (0, n - 1), k: (0, n - 1), a: (0, r - 1), b: (0, n - 1)}
)
code = SOFTMAX.env()  # y defined as the code computes it
y_ij = entry(Y, (i, j), code)


def _normalised() -> Proof:
    # Σ_j y_ij = 1 for symbolic n (normaliser) ...
    proof = prove_index_identity(sp.Sum(y_ij, (j, 0, n - 1)), sp.Integer(1), setting)
    if proof.status != "proved-general":
        return proof
    # ... and y_ij > 0: a positive exp over a sum of n ≥ 1 positive exps. Hide each atom
    # behind a positive symbol and let SymPy's assumption system decide the sign.
    canonical = normal_form(y_ij, setting)  # goals proved from the setting's ranges, leak-guarded
    positive = {
        atom: sp.Symbol(f"_p{t}", positive=True)
        for t, atom in enumerate(sorted(canonical.atoms(sp.exp, sp.Sum), key=sp.default_sort_key))
        if isinstance(atom, sp.exp) or all(isinstance(f, sp.exp) for f in sp.Mul.make_args(atom.function))
    }
    if canonical.xreplace(positive).is_positive is not True:
        return Proof("unproven", "positivity not decided", proof.assumptions, sp.sstr(canonical))
    proof.method += (
        "; positivity by SymPy assumptions (exp > 0, a sum of n ≥ 1 exps > 0); "
        "with rows summing to 1 this bounds each entry by 1 (< 1 for n ≥ 2)"
    )
    return proof


def _refute_row_sum(expr):
    return counterexample(sp.Sum(expr, (j, 0, n - 1)), sp.Integer(1), setting)


normalised = Claim(
    id="softmax.normalised",
    title="Softmax rows are probability distributions",
    source="seed B §4",
    latex=r"\sum_{j} \mathrm{softmax}(x)_{j} = 1, \quad 0 < \mathrm{softmax}(x)_{j} < 1",
    prove=_normalised,
    mutants=[
        Mutant(
            "no-normaliser",
            "exp(x) used without dividing by the row sum",
            lambda: _refute_row_sum(entry(sp.exp(X), (i, j))),
        ),
        Mutant(
            "column-sum",
            "normalised over the wrong axis (the column instead of the row)",
            lambda: _refute_row_sum(sp.exp(X.base[i, j]) / sp.Sum(sp.exp(X.base[k, j]), (k, 0, r - 1))),
        ),
    ],
)

shift = index_claim(
    "softmax.shift",
    "Softmax is invariant to a per-row shift (justifies subtracting the max)",
    "used for stability (seed B §4)",
    r"\mathrm{softmax}(x - c\mathbf{1}^{T}) = \mathrm{softmax}(x) \quad \text{for any } c \in \mathbb{R}^{r}",
    lhs=y_ij,
    rhs=entry(softmax_math(X), (i, j)),
    setting=setting,
    mutants={
        "numerator-only": (
            "max subtracted in the numerator only",
            entry(sp.exp(X - RowMax(X)) / RowSum(sp.exp(X)), (i, j)),
        ),
        "additive-shift": ("max subtracted after the softmax", entry(softmax_math(X) - RowMax(X), (i, j))),
    },
)

# ∂y_ij/∂x_ab = δ_ia y_ij (δ_jb − y_ib): the row a must be the row i for a non-zero entry.
jacobian_lhs = sp.diff(y_ij, X.base[a, b])
jacobian = index_claim(
    "softmax.jacobian",
    "Softmax Jacobian",
    "seed A §6.C",
    r"\frac{\partial A_{ij}}{\partial S_{ik}} = A_{ij}\left(\delta_{jk} - A_{ik}\right)",
    lhs=jacobian_lhs,
    rhs=sp.KroneckerDelta(i, a) * y_ij * (sp.KroneckerDelta(j, b) - entry(Y, (i, b), code)),
    setting=setting,
    mutants={
        "sign-flip": (
            "sign of the off-diagonal term flipped",
            sp.KroneckerDelta(i, a) * y_ij * (sp.KroneckerDelta(j, b) + entry(Y, (i, b), code)),
        ),
        "diagonal-only": ("the −A_ij A_ik term dropped", sp.KroneckerDelta(i, a) * y_ij * sp.KroneckerDelta(j, b)),
    },
)

# The op's backward is the vector-Jacobian product: dx_ab = Σ_ij dy_ij ∂y_ij/∂x_ab.
vjp_lhs = sp.Sum(dY.base[i, j] * jacobian_lhs, (i, 0, r - 1), (j, 0, n - 1))
vjp = index_claim(
    "softmax.vjp",
    "Softmax backward (vector-Jacobian product) as generated",
    "seed A §6.C",
    r"\frac{\partial L}{\partial x} = y \odot \left(\frac{\partial L}{\partial y} - "
    r"\mathrm{rowsum}\left(\frac{\partial L}{\partial y} \odot y\right)\mathbf{1}^{T}\right)",
    lhs=vjp_lhs,
    rhs=entry(dX, (a, b), code),
    setting=setting,
    mutants={
        "no-rowsum": ("the rowsum term dropped", entry(Y * dY, (a, b), code)),
        "rowsum-of-dy": ("rowsum of dy instead of dy ⊙ y", entry(Y * (dY - RowSum(dY)), (a, b), code)),
    },
)

CLAIMS: list[Claim] = [normalised, shift, jacobian, vjp]

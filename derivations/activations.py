"""Activations: ReLU (and the ReLU FFN), GELU (exact and tanh), SiLU.

Seed B §11: FFN(x) = ReLU(xW_1 + b_1)W_2 + b_2 (seed A §4: max(0, xW_1 + b_1)W_2 + b_2).
Seed B §12: GELU(x) = xΦ(x) ≈ x/2 [1 + tanh(√(2/π)(x + 0.044715x³))].
Seed B §13: SiLU(x) = xσ(x) = x/(1 + e^{−x}); σ is the array language's `Sigmoid` node, which
the proofs read as 1/(1 + e^{−x}) and the code generator prints overflow-free.

Each activation is written once as a SymPy function of a scalar (`gelu`) together with its
derivative (`gelu_grad`). The claims check the derivative against `sympy.diff` and check the
op's backward assignment — the very object the code generator prints — against the
vector-Jacobian product of its forward in index form, for symbolic sizes.

Each op also states the sources' formula once, as its `spec` (max(0, x); Φ = (1 + erf(x/√2))/2,
y = xΦ; the tanh form with the exact 0.044715; σ = 1/(1 + e^{−x}), y = xσ; z = x W₁ᵀ + b₁,
h = max(0, z), y = h W₂ᵀ + b₂): the registry proves the printed forward equal to it and the
printed backward equal to its derivative (`<op>.forward`, `<op>.backward.<grad>`). For ReLU,
SymPy's d/dx max(0, x) is Heaviside(x), ½ at 0; the printed backward is H(x, 0) (`x > 0`): the
two agree for x ≠ 0, and at the kink the printed 0 is a subgradient (`ffn.relu.derivative`).
"""

from __future__ import annotations

import mpmath
import sympy as sp

from . import linear as _linear
from .language.arrays import (
    Array,
    Assign,
    ColSum,
    Contract,
    Gaussian,
    MatMul,
    NormalCDF,
    Sigmoid,
    T,
    document_form,
    entry,
    index,
    size,
)
from .language.ops import Op, Quote, RangeLimit, grad_of
from .proof import numeric
from .proof.core import Claim, Mutant, Proof, Setting, index_claim, prove_index_identity, refute_identity
from .proof.kinks import refute_at_kinks

# ------------------------------------------------------------------------- the formulas


def relu(z):
    """ReLU(z) = max(0, z)."""
    return sp.Max(0, z)


def relu_grad(z):
    """The derivative of max(0, z) away from 0, with the subgradient 0 chosen at z = 0."""
    return sp.Heaviside(z, 0)


def Phi(z):
    """Standard normal CDF: Φ(z) = (1 + erf(z/√2))/2."""
    return (1 + sp.erf(z / sp.sqrt(2))) / 2


def phi(z):
    """Standard normal density: φ(z) = e^{−z²/2}/√(2π)."""
    return sp.exp(-(z**2) / 2) / sp.sqrt(2 * sp.pi)


def gelu(z):
    """GELU(z) = zΦ(z)."""
    return z * Phi(z)


def gelu_grad(z):
    """GELU'(z) = Φ(z) + zφ(z)."""
    return Phi(z) + z * phi(z)


GELU_C = sp.Rational(44715, 10**6)  # 0.044715, exact


def _gelu_u(z, c=GELU_C):
    return sp.sqrt(2 / sp.pi) * (z + c * z**3)


def gelu_tanh(z, c=GELU_C):
    """The tanh approximation: z/2 (1 + tanh(√(2/π)(z + 0.044715 z³)))."""
    return z / 2 * (1 + sp.tanh(_gelu_u(z, c)))


def gelu_tanh_grad(z, c=GELU_C):
    """Its derivative: (1 + t)/2 + z/2 (1 − t²) √(2/π)(1 + 3·0.044715 z²), t = tanh(u)."""
    t = sp.tanh(_gelu_u(z, c))
    return (1 + t) / 2 + z / 2 * (1 - t**2) * sp.sqrt(2 / sp.pi) * (1 + 3 * c * z**2)


def sigmoid(z):
    """σ(z) = 1/(1 + e^{−z}), as the array language's `Sigmoid` node: the proofs see the document's
    formula (the normaliser and the numeric evaluator rewrite it; derivatives are taken of the
    rewritten form), the printers print the overflow-free `scipy.special.expit` / `torch.sigmoid`."""
    return Sigmoid(z)


def silu(z):
    """SiLU(z) = zσ(z) = z/(1 + e^{−z})."""
    return z * sigmoid(z)


def silu_grad(z):
    """SiLU'(z) = σ(z)(1 + z(1 − σ(z))), printed with 1 − σ(z) as σ(−z) (the rewrite
    `stability.one_minus_sigmoid`): 1 − σ(z) is 0 where σ(z) rounds to 1 (z > 17 in float32),
    σ(−z) is not."""
    return sigmoid(z) * (1 + z * sigmoid(-z))


# --------------------------------------------------------------------------------- the ops
r, n = size("r"), size("n")  # rows and row length of the activation input
i, j, a, b = (index(s) for s in "ijab")


# The elementwise ops' arrays: one input x and one output y of the same shape, r × n.
EX, EY = Array("x", (r, n)), Array("y", (r, n))
EDY, EDX = grad_of(EY), grad_of(EX)


def _elementwise_op(
    name, title, claims, f, f_grad, *, spec, source, mistakes, reference, range_limit=None, quotes=()
) -> Op:
    """y = f(x), dx = dy ⊙ f'(x), elementwise (the registry sets the declaring module: the one
    whose OPS lists the op)."""
    return Op(
        name=name,
        title=title,
        spec=spec,
        source=source,
        quotes=quotes,
        mistakes=mistakes,
        claims=claims,
        reference=reference,
        inputs=[EX],
        forward=[Assign(EY, f(EX))],
        outputs=[EY],
        saved=[EX],
        backward=[Assign(EDX, EDY * f_grad(EX))],
        grads=[EDX],
        optional_axes=2,  # elementwise: any shape, 0-D too
        cache_doc="x, the input (the backward evaluates the derivative at x).",
        range_limit=range_limit,
    )


# ReLU (seed A §4, seed B §11): y = max(0, x). SymPy differentiates max(0, x) to Heaviside(x),
# which is ½ at 0; the printed backward uses H(x, 0) (`x > 0`): the subgradient 0 at the kink,
# proved admissible by `ffn.relu.derivative`. The two agree wherever x ≠ 0.
RELU = _elementwise_op(
    "relu",
    "ReLU",
    ["ffn.relu.derivative", "ffn.relu.vjp"],
    relu,
    relu_grad,
    source="seed A §4, seed B §11",
    reference=lambda torch, x: torch.relu(x),
    spec=[Assign(EY, sp.Max(0, EX))],  # y = max(0, x)
    mistakes={
        "min-not-max": ("y = min(0, x)", "forward", "y", sp.Min(0, EX)),
        "identity": ("ReLU forgotten: y = x", "forward", "y", EX),
        "passes-negative": (
            "gradient passed where x < 0 (mask inverted): dy ⊙ H(−x)",
            "backward",
            "dx",
            EDY * sp.Heaviside(-EX, 0),
        ),
        "no-mask": ("mask forgotten: dx = dy", "backward", "dx", EDY),
    },
)


def _gelu_op() -> Op:
    """GELU with Φ(x) kept from the forward: the backward's Φ(x) + xφ(x) reuses it, so the
    erf (the costly function: an order of magnitude slower than exp in SciPy) is evaluated
    once per step, not twice. The proofs expand `cdf` through its definition: the claims see
    x·Φ(x) and Φ(x) + xφ(x), exactly as `gelu` and `gelu_grad` write them. Φ is the array
    language's `NormalCDF` node, which the proofs read as (1 + erf(x/√2))/2."""
    x, y, cdf = EX, EY, Array("cdf", (r, n))
    dy, dx = EDY, EDX
    assert sp.expand(document_form(NormalCDF(x)) - Phi(x)) == 0
    assert sp.expand(gelu(x) - x * Phi(x)) == 0 and sp.expand(gelu_grad(x) - (Phi(x) + x * phi(x))) == 0
    # the document's GELU (seed B §12), Φ written out: SymPy differentiates erf itself
    phi_s = Array("Phi", (r, n), latex=r"\Phi")
    spec = [
        Assign(phi_s, sp.Mul(sp.Rational(1, 2), 1 + sp.erf(x / sp.sqrt(2)), evaluate=False)),  # Φ = (1 + erf(x/√2))/2
        Assign(y, x * phi_s),  # y = x Φ(x)
    ]
    return Op(
        name="gelu",
        title="GELU (exact, erf)",
        reference=lambda torch, x: torch.nn.functional.gelu(x),
        spec=spec,
        source="seed B §12",
        quotes=(Quote("seed B §12", "GELU", r"GELU(x) = x\Phi(x)"),),
        mistakes={
            "no-x-phi": ("dx = dy ⊙ Φ(x): the xφ(x) term of the product rule dropped", "backward", "dx", dy * cdf),
            "phi-unnormalised": ("φ without the 1/√(2π)", "backward", "dx", dy * (cdf + x * sp.exp(-(x**2) / 2))),
            "phi-sign": ("Φ(x) − xφ(x)", "backward", "dx", dy * (cdf - x * phi(x))),
            "erf-unscaled": ("Φ with erf(x) instead of erf(x/√2)", "forward", "cdf", (1 + sp.erf(x)) / 2),
            "no-half": ("Φ = 1 + erf(x/√2): the ½ forgotten", "forward", "cdf", 1 + sp.erf(x / sp.sqrt(2))),
        },
        claims=["gelu.exact.derivative", "gelu.exact.vjp"],
        inputs=[x],
        forward=[Assign(cdf, NormalCDF(x)), Assign(y, x * cdf)],
        outputs=[y],
        saved=[x, cdf],
        # φ(x) = G(x)/√(2π), the Gaussian node e^{−x²/2}: one helper call (x² formed once; its
        # overflow past |x| = 1.8e19 in float32 gives e^{−∞} = 0, the correctly rounded value)
        backward=[Assign(dx, dy * (cdf + x * Gaussian(x) / sp.sqrt(2 * sp.pi)))],
        grads=[dx],
        optional_axes=2,  # elementwise: any shape, 0-D too
        cache_doc="x and cdf = Φ(x), the forward's normal CDF: the backward's Φ(x) + xφ(x) reuses it "
        "(one erf per element and step; φ needs only an exp).",
    )


GELU = _gelu_op()

# The tanh approximation (seed B §12): u = √(2/π)(x + 0.044715 x³), y = x/2 (1 + tanh u).
U_TANH = Array("u", (r, n), latex="u")
GELU_TANH = _elementwise_op(
    "gelu_tanh",
    "GELU (tanh approximation)",
    ["gelu.tanh.derivative", "gelu.tanh.vjp", "gelu.tanh.bound"],
    gelu_tanh,
    gelu_tanh_grad,
    source="seed B §12",
    quotes=(
        Quote(
            "seed B §12",
            "GELU",
            r"GELU(x) \approx \frac{x}{2} \left[ 1+ \tanh \left( \sqrt{\frac{2}{\pi}} (x+0.044715x^3) \right) \right]",
        ),
    ),
    reference=lambda torch, x: torch.nn.functional.gelu(x, approximate="tanh"),
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        "gelu_tanh: 0.044715·x·x·x overflows (|x| > 2e13 in float32) — an overflow warning in the forward — "
        "and the backward's (1 − tanh² u)·x·(0.134145 x² + 1) is 0·inf = NaN where the exact dx "
        "is 0 or dy",
    ),
    spec=[
        Assign(U_TANH, sp.sqrt(2 / sp.pi) * (EX + GELU_C * EX**3)),  # u = √(2/π)(x + 0.044715 x³)
        Assign(EY, EX / 2 * (1 + sp.tanh(U_TANH))),
    ],  # y = x/2 (1 + tanh u)
    mistakes={
        "constant-0.44715": ("0.44715 instead of 0.044715", "forward", "y", gelu_tanh(EX, sp.Rational(44715, 10**5))),
        "no-sqrt-2-over-pi": (
            "tanh(x + 0.044715x³) without the √(2/π)",
            "forward",
            "y",
            EX / 2 * (1 + sp.tanh(EX + GELU_C * EX**3)),
        ),
        "no-half": ("x (1 + tanh u): the ½ forgotten", "forward", "y", EX * (1 + sp.tanh(_gelu_u(EX)))),
        "no-chain": (
            "chain factor √(2/π)(1 + 3cx²) dropped",
            "backward",
            "dx",
            EDY * ((1 + sp.tanh(_gelu_u(EX))) / 2 + EX / 2 * (1 - sp.tanh(_gelu_u(EX)) ** 2)),
        ),
        "no-3": ("d/dx (c x³) written c x²", "backward", "dx", EDY * gelu_tanh_grad(EX, GELU_C / 3)),
        "sech-sign": (
            "1 + tanh² instead of 1 − tanh²",
            "backward",
            "dx",
            EDY * (gelu_tanh_grad(EX) + EX * sp.tanh(_gelu_u(EX)) ** 2 * sp.sqrt(2 / sp.pi) * (1 + 3 * GELU_C * EX**2)),
        ),
    },
)

# SiLU (seed B §13): σ(x) = 1/(1 + e^{−x}) written out (SymPy differentiates exp itself), y = x σ(x).
SIGMA_S = Array("sigma", (r, n), latex=r"\sigma")
SILU = _elementwise_op(
    "silu",
    "SiLU (swish)",
    ["silu.derivative", "silu.vjp"],
    silu,
    silu_grad,
    source="seed B §13",
    quotes=(
        Quote("seed B §13", "SiLU", r"SiLU(x) = x\sigma(x)"),
        Quote("seed B §13", "SiLU", r"SiLU(x) = \frac{x}{1+e^{-x}}"),
    ),
    reference=lambda torch, x: torch.nn.functional.silu(x),
    spec=[
        Assign(SIGMA_S, 1 / (1 + sp.exp(-EX))),  # σ(x) = 1/(1 + e^{−x})
        Assign(EY, EX * SIGMA_S),
    ],  # y = x σ(x)
    mistakes={
        "exp-sign": ("x/(1 + e^{x}): the exponent's sign slipped", "forward", "y", EX * sigmoid(-EX)),
        "sigmoid-only": ("y = σ(x) (the gate without the x)", "forward", "y", sigmoid(EX)),
        "no-product-rule": ("dx = dy ⊙ σ(x): the x σ(x)(1 − σ(x)) term dropped", "backward", "dx", EDY * sigmoid(EX)),
        "sigmoid-derivative": (
            "σ(x)(1 − σ(x)), the sigmoid's own derivative",
            "backward",
            "dx",
            EDY * sigmoid(EX) * (1 - sigmoid(EX)),
        ),
        "sign-slip": ("σ(x)(1 − x(1 − σ(x)))", "backward", "dx", EDY * sigmoid(EX) * (1 - EX * (1 - sigmoid(EX)))),
    },
)


def _instantiate(op: Op, mapping: dict) -> tuple[list[Assign], list[Assign]]:
    """An op's forward and backward assignments with its arrays renamed (`mapping`): how a
    composite op reuses the very expressions another op proved and prints."""

    def sub(assigns):
        return [Assign(mapping.get(a.target, a.target), a.expr.xreplace(mapping), a.when) for a in assigns]

    return sub(op.forward), sub(op.backward)


# The ReLU FFN of seed A §4 / seed B §11: linear → relu → linear, built from the `linear` op's
# own assignments (weights stored out × in, as `torch.nn.Linear`: the document's W₁ is w1ᵀ)
# and the relu op's backward.
d_model, d_ff = size("d"), size("f")
FX = Array("x", (r, d_model))
W1, B1 = Array("w1", (d_ff, d_model)), Array("b1", (1, d_ff))
W2, B2 = Array("w2", (d_model, d_ff)), Array("b2", (1, d_model))
FZ, FH, FY = Array("z", (r, d_ff)), Array("h", (r, d_ff)), Array("y", (r, d_model))
dFY, dFH, dFZ = grad_of(FY), grad_of(FH), grad_of(FZ)


def _linear_as(x, w, bias, y, dx):
    (lx,) = _linear.LINEAR.inputs
    lw, lb = _linear.LINEAR.params
    (ly,) = _linear.LINEAR.outputs
    mapping = {
        lx: x,
        lw: w,
        lb: bias,
        ly: y,
        grad_of(ly): grad_of(y),
        grad_of(lx): dx,
        grad_of(lw): grad_of(w),
        grad_of(lb): grad_of(bias),
    }
    return _instantiate(_linear.LINEAR, mapping)


def _relu_as(x, y):
    (rx,) = RELU.inputs
    (ry,) = RELU.outputs
    return _instantiate(RELU, {rx: x, ry: y, grad_of(rx): grad_of(x), grad_of(ry): grad_of(y)})


_fwd1, _bwd1 = _linear_as(FX, W1, B1, FZ, grad_of(FX))
_fwd_act, _bwd_act = _relu_as(FZ, FH)
_fwd2, _bwd2 = _linear_as(FH, W2, B2, FY, dFH)

# The document's FFN (seed A §4, seed B §11), in a scope of its own, with the stored weights
# (out × in): the document's W₁, W₂ are w1ᵀ, w2ᵀ.
SZ, SH = Array("z", (r, d_ff), latex="z"), Array("h", (r, d_ff), latex="h")
FFN_RELU_SPEC = [
    Assign(SZ, MatMul(FX, T(W1)) + B1),  # z = x W₁ᵀ + b₁
    Assign(SH, sp.Max(0, SZ)),  # h = max(0, z)
    Assign(FY, MatMul(SH, T(W2)) + B2),  # y = h W₂ᵀ + b₂
]

FFN_RELU = Op(
    name="ffn_relu",
    range_limit=RangeLimit(
        {"float32": 1e20, "float64": 1e300},
        (
            "ffn_relu: z = x W1ᵀ + b1 ~ M² is out of range; terms ±inf give NaN, and the "
            "ReLU mask (z > 0) of a NaN drops its row from db1 (exact db1 ~ M is finite)"
        ),
    ),
    module=__name__,
    title="Position-wise feed-forward network with ReLU",
    spec=FFN_RELU_SPEC,
    source="seed A §4, seed B §11",
    # the sources multiply x W₁ with W₁ of d_model × d_ff; the op stores w1 out × in (w1 = W₁ᵀ)
    quotes=tuple(
        Quote(where, "FFN", latex, params=(("w1", "W_1^T"), ("b1", "b_1"), ("w2", "W_2^T"), ("b2", "b_2")))
        for where, latex in (
            (
                "seed A §4",
                r"\mathrm{FFN}(\mathbf{x}) = \max(0, \mathbf{x}\mathbf{W}_1 + \mathbf{b}_1)\mathbf{W}_2 + \mathbf{b}_2",
            ),
            ("seed B §11", r"FFN(x) = ReLU(xW_1+b_1)W_2+b_2"),
        )
    ),
    mistakes={
        "no-b1": ("b₁ forgotten: z = x W₁ᵀ", "forward", "z", MatMul(FX, T(W1))),
        "relu-on-output": (
            "a ReLU after the second linear too: y = max(0, h W₂ᵀ + b₂)",
            "forward",
            "y",
            sp.Max(0, MatMul(FH, T(W2)) + B2),
        ),
        "residual-inside": (
            "the residual added inside the sublayer: y = h W₂ᵀ + b₂ + x",
            "forward",
            "y",
            MatMul(FH, T(W2)) + B2 + FX,
        ),
        "no-mask": ("ReLU backward skipped: dz = dh", "backward", "dz", dFH),
        "inverted-mask": ("gradient passed where z < 0: dz = dh ⊙ H(−z)", "backward", "dz", dFH * sp.Heaviside(-FZ, 0)),
        "mask-from-h-geq": (
            "mask taken from h with ≥: [h ≥ 0] is always 1 (no mask)",
            "backward",
            "dz",
            dFH * sp.Heaviside(FH, 1),
        ),
        "dw2-from-z": ("dw2 = dyᵀ z (pre-activation instead of h)", "backward", "dw2", Contract(dFY, FZ)),
        "db1-unmasked": ("db1 = Σ_rows dh (the mask forgotten for the bias)", "backward", "db1", ColSum(dFH)),
    },
    claims=["ffn.relu.backward"],
    inputs=[FX],
    params=[W1, B1, W2, B2],
    forward=_fwd1 + _fwd_act + _fwd2,
    outputs=[FY],
    saved=[FX, W1, FZ, FH, W2],
    backward=_bwd2 + _bwd_act + _bwd1,
    grads=[grad_of(FX), grad_of(W1), grad_of(B1), grad_of(W2), grad_of(B2)],
    optional_axes=1,  # x: any shape with at least one axis
    cache_doc="x, w1, the pre-activation z (for the ReLU mask), h = max(0, z) (for dw2) and w2.",
)

OPS = [RELU, GELU, GELU_TANH, SILU, FFN_RELU]

# ------------------------------------------------------------------------------- helpers
setting = Setting(sizes={r: 2, n: 3}, indices={i: (0, r - 1), j: (0, n - 1), a: (0, r - 1), b: (0, n - 1)})
XS = sp.Symbol("x", real=True)  # a scalar, for the LaTeX of the statements


def _scalar(op: Op):
    """The op's forward and derivative as functions of one entry x_ij (Indexed, real)."""
    (x,) = op.inputs
    (y,) = op.outputs
    env = op.env()
    xij = entry(x, (i, j))
    fwd = document_form(entry(y, (i, j), env))  # σ as 1/(1 + e^{−x}): sympy.diff differentiates it
    # the derivative factor of the backward: dx = dy ⊙ f'(x), read at dy = 1
    bwd = entry(grad_of(x), (i, j), env).xreplace({grad_of(y).base[i, j]: 1})
    return xij, fwd, bwd


def _vjp(op: Op):
    """Σ_ij dy_ij ∂y_ij/∂x_ab (the definition) and the op's dx_ab (what is printed)."""
    (x,) = op.inputs
    (y,) = op.outputs
    env = op.env()
    jac = sp.diff(document_form(entry(y, (i, j), env)), x.base[a, b])
    lhs = sp.Sum(grad_of(y).base[i, j] * jac, (i, 0, r - 1), (j, 0, n - 1))
    return lhs, entry(grad_of(x), (a, b), env)


def _derivative_claim(id, title, source, op, statement, mutants) -> Claim:
    """`d/dx f(x)` (sympy.diff of the op's forward) equals the op's derivative factor."""
    xij, fwd, bwd = _scalar(op)
    lhs = sp.diff(fwd, xij)
    return index_claim(
        id,
        title,
        source,
        statement,
        lhs,
        bwd,
        setting,
        {name: (mistake, wrong(xij)) for name, (mistake, wrong) in mutants.items()},
        method="sympy.diff of the op's forward vs the op's derivative factor, index normaliser "
        "(x real; exact residual 0)",
    )


def _vjp_claim(id, title, source, op, derivative_tex, mutants) -> Claim:
    """The op's backward assignment is the vector-Jacobian product of its forward."""
    lhs, rhs = _vjp(op)
    (x,) = op.inputs
    dy = grad_of(op.outputs[0])
    wrong = {name: (mistake, entry(dy * w(x), (a, b))) for name, (mistake, w) in mutants.items()}
    return index_claim(
        id,
        title,
        source,
        r"\frac{\partial L}{\partial x_{ab}} = \sum_{i,j} \frac{\partial L}{\partial y_{ij}} "
        r"\frac{\partial y_{ij}}{\partial x_{ab}} = \frac{\partial L}{\partial y_{ab}} " + derivative_tex,
        lhs,
        rhs,
        setting,
        wrong,
        method="index normaliser: the op's backward vs Σ dy ∂y/∂x for symbolic sizes",
    )


def _latex_eq(lhs, rhs) -> str:
    return sp.latex(sp.Eq(lhs, rhs, evaluate=False))


# --------------------------------------------------------------------------------- ReLU
_p = sp.Symbol("p", positive=True)
_q = sp.Symbol("q", negative=True)


def _heaviside_off_zero() -> list[str]:
    """Lemma: sympy's derivative of Max(0, u) is Heaviside(u) (value ½ at 0); the op uses
    Heaviside(u, 0). They agree wherever u ≠ 0 — checked on each region with a positive and a
    negative symbol. Returns the assumption this licenses; raises if the lemma fails."""
    for s in (_p, _q):
        if sp.diff(relu(s), s) - relu_grad(s) != 0 or sp.Heaviside(s) - sp.Heaviside(s, 0) != 0:
            raise AssertionError(f"ReLU region lemma fails at {s} (assumptions {s.assumptions0})")
    return [
        "u ≠ 0 for every ReLU argument u (Max(0,·) is differentiable there; "
        "at 0 the subgradient 0 is used, see ffn.relu.derivative)"
    ]


def _off_zero(expr):
    """Replace sympy's Heaviside(u) (½ at 0) by the op's Heaviside(u, 0): equal for u ≠ 0."""
    return expr.replace(lambda e: isinstance(e, sp.Heaviside) and e.args[1] != 0, lambda e: sp.Heaviside(e.args[0], 0))


def _relu_derivative() -> Proof:
    xij, fwd, bwd = _scalar(RELU)  # max(0, x) and H(x, 0), as the op computes them
    assumptions = ["x real"]
    # on each open region the op's factor is the derivative of the op's forward
    for s in (_p, _q):
        if sp.diff(fwd.xreplace({xij: s}), s) - bwd.xreplace({xij: s}) != 0:
            return Proof("unproven", f"region {s.assumptions0}", assumptions, "derivative differs")
    # at 0: the one-sided difference quotients max(0, h)/h are exactly 1 (h > 0) and 0 (h < 0)
    # for every h, so the subdifferential of the convex max(0, ·) at 0 is [0, 1] …
    right = sp.simplify(fwd.xreplace({xij: _p}) / _p)
    left = sp.simplify(fwd.xreplace({xij: _q}) / _q)
    at_zero = bwd.xreplace({xij: sp.Integer(0)})
    if (right, left) != (1, 0) or at_zero != 0:
        return Proof("unproven", "subgradient at 0", assumptions, f"{right}, {left}, {at_zero}")
    # … and the op's H(0, 0) = 0 lies in it: the subgradient convention.
    return Proof(
        "proved-general",
        "per region: x > 0 and x < 0 as positive/negative symbols, diff(max(0, x)) − H(x, 0) = 0 "
        "(the op's own expressions); at x = 0: one-sided quotients max(0,h)/h are 1 (h>0) and 0 (h<0), "
        "subdifferential [0, 1] ∋ H(0, 0) = 0",
        assumptions + ["at x = 0 ReLU is not differentiable: the op uses the subgradient 0 ∈ [0, 1]"],
        "0",
    )


_CX_POINTS = (-2, -1, sp.Rational(-1, 3), sp.Rational(1, 8), 1, sp.Rational(5, 2))


def _scalar_cx(f_lhs, f_rhs, xs=_CX_POINTS):
    """A counterexample to f_lhs(x) = f_rhs(x) among a few points, or None."""
    for v in map(sp.Rational, xs):
        ga = numeric.evaluate(f_lhs(v), numeric.Point())
        gc = numeric.evaluate(f_rhs(v), numeric.Point())
        if numeric.relative_gap(ga, gc) > 1e-20:
            return {"at": {"x": float(v)}, "lhs": float(ga), "rhs": float(gc)}
    return None


def _relu_diff(v):
    """d/dx max(0, x) at v ≠ 0, by sympy.diff on the region of v (x > 0 or x < 0)."""
    s = _p if v > 0 else _q
    return sp.diff(relu(s), s)


relu_derivative = Claim(
    id="ffn.relu.derivative",
    title="ReLU derivative, with the subgradient 0 at 0",
    source="seed A §4, seed B §11",
    latex=r"\frac{d}{dx} \max(0, x) = H(x) = \begin{cases} 1 & x > 0 \\ 0 & x \le 0 \end{cases} "
    r"\quad \text{(at } x = 0 \text{: subgradient } 0 \in [0, 1] \text{)}",
    prove=_relu_derivative,
    mutants=[
        Mutant(
            "passes-negative",
            "gradient passed where x < 0 (mask inverted): H(−x)",
            lambda: _scalar_cx(_relu_diff, lambda v: sp.Heaviside(-v, 0)),
        ),
        Mutant(
            "no-mask",
            "gradient passed everywhere (mask forgotten)",
            lambda: _scalar_cx(_relu_diff, lambda v: sp.Integer(1)),
        ),
    ],
)


def _relu_vjp_claim() -> Claim:
    lhs, rhs = _vjp(RELU)
    (x,) = RELU.inputs
    dy = grad_of(RELU.outputs[0])

    def prove():
        _heaviside_off_zero()  # the region lemma (raises if it fails)
        # the definition's H(u) (½ at 0) against the printed H(u, 0): equal off u = 0; the point
        # u = 0 is checked by the gate (the printed 0 between the one-sided derivatives 0 and dy)
        return prove_index_identity(
            lhs, rhs, setting, "index normaliser: equal off the kink x = 0, the kink checked", spec=lhs
        )

    wrong = {
        "passes-negative": ("gradient passed where x < 0", entry(dy * sp.Heaviside(-x, 0), (a, b))),
        "no-mask": ("mask forgotten: dx = dy", entry(dy, (a, b))),
    }
    kink_wrong = entry(dy * sp.Heaviside(x, 2), (a, b))
    return Claim(
        id="ffn.relu.vjp",
        title="ReLU backward (as generated)",
        source="seed A §4, seed B §11",
        latex=r"\frac{\partial L}{\partial x} = \frac{\partial L}{\partial y} \odot H(x)",
        prove=prove,
        mutants=[Mutant(k, m, (lambda w=w: refute_identity(_off_zero(lhs), w, setting))) for k, (m, w) in wrong.items()]
        + [
            Mutant(
                "kink-value-2",
                "the step's value at x = 0 set to 2, outside the subdifferential [0, 1]",
                lambda: refute_at_kinks(kink_wrong, lhs, setting),
            )
        ],
    )


# ------------------------------------------------------------------------- ReLU FFN backward
p_, q_, t_, c_ = (index(s) for s in ("p", "q", "t", "c"))
ffn_setting = Setting(
    sizes={r: 2, d_model: 3, d_ff: 2},
    indices={
        a: (0, r - 1),
        b: (0, d_model - 1),
        p_: (0, d_ff - 1),
        q_: (0, d_model - 1),
        t_: (0, d_model - 1),
        c_: (0, d_ff - 1),
    },
)


def _ffn_claim() -> Claim:
    env = FFN_RELU.env()
    yt = entry(FY, (i, j), env)

    def vjp(wrt):
        return sp.Sum(dFY.base[i, j] * sp.diff(yt, wrt), (i, 0, r - 1), (j, 0, d_model - 1))

    # (dx, dw1, db1, dw2, db2) at free indices: what the op computes vs Σ dy ∂y/∂θ
    at = [
        (FX, (a, b), FX.base[a, b]),
        (W1, (p_, q_), W1.base[p_, q_]),
        (B1, (0, p_), B1.base[p_]),
        (W2, (t_, c_), W2.base[t_, c_]),
        (B2, (0, t_), B2.base[t_]),
    ]
    exact = [vjp(wrt) for _, _, wrt in at]  # the definition: H(u) with H(0) = ½
    lhs = [_off_zero(e) for e in exact]  # the same read as H(u, 0), for the mutants

    def grads(e):
        return [entry(grad_of(arr), idx, e) for arr, idx, _ in at]

    def prove():
        _heaviside_off_zero()  # the region lemma (raises if it fails)
        return prove_index_identity(
            exact,
            grads(env),
            ffn_setting,
            "index normaliser (symbolic r, d, f), equal off the kinks z = 0, each "
            "kink checked: dx, dw1, db1, dw2, db2 of the composed op vs Σ dy ∂y/∂θ",
            spec=exact,
        )

    def mutated(target, expr):
        e = dict(env)
        e[target] = expr
        return e

    no_mask = mutated(dFZ, MatMul(dFY, W2))  # relu backward skipped
    inverted = mutated(dFZ, MatMul(dFY, W2) * sp.Heaviside(-FZ, 0))  # passes where z < 0
    from_z = mutated(grad_of(W2), Contract(dFY, FZ))  # dw2 from z, not h
    kink_two = mutated(dFZ, MatMul(dFY, W2) * sp.Heaviside(FZ, 2))  # 2 at z = 0, not in [0, 1]

    def refute(e, k):
        return refute_identity(lhs[k], grads(e)[k], ffn_setting)

    return Claim(
        id="ffn.relu.backward",
        title="ReLU FFN backward = linear backward ∘ ReLU backward ∘ linear backward",
        source="seed A §4, seed B §11",
        latex=r"\begin{aligned} \frac{\partial L}{\partial h} &= \frac{\partial L}{\partial y} w_{2}, \quad "
        r"\frac{\partial L}{\partial w_{2}} = \left(\frac{\partial L}{\partial y}\right)^{T} h, \quad "
        r"\frac{\partial L}{\partial b_{2}} = \sum_{i} \left(\frac{\partial L}{\partial y}\right)_{i} \\ "
        r"\frac{\partial L}{\partial z} &= \frac{\partial L}{\partial h} \odot H(z), \quad "
        r"\frac{\partial L}{\partial x} = \frac{\partial L}{\partial z} w_{1}, \quad "
        r"\frac{\partial L}{\partial w_{1}} = \left(\frac{\partial L}{\partial z}\right)^{T} x, \quad "
        r"\frac{\partial L}{\partial b_{1}} = \sum_{i} \left(\frac{\partial L}{\partial z}\right)_{i} "
        r"\end{aligned}",
        prove=prove,
        mutants=[
            Mutant("no-mask-dx", "ReLU mask forgotten (dx)", lambda: refute(no_mask, 0)),
            Mutant("no-mask-dw1", "ReLU mask forgotten (dw1)", lambda: refute(no_mask, 1)),
            Mutant("inverted-mask-db1", "gradient passed where z < 0 (db1)", lambda: refute(inverted, 2)),
            Mutant("dw2-from-z", "dw2 = dyᵀ z (pre-activation instead of h)", lambda: refute(from_z, 3)),
            Mutant(
                "kink-value-2-db1",
                "the ReLU step's value at z = 0 set to 2, outside [0, 1] (db1)",
                lambda: refute_at_kinks(grads(kink_two)[2], exact[2], ffn_setting),
            ),
        ],
    )


# ---------------------------------------------------------------------------- GELU, SiLU
gelu_exact_derivative = _derivative_claim(
    "gelu.exact.derivative",
    "GELU derivative: Φ(x) + xφ(x)",
    "seed B §12",
    GELU,
    _latex_eq(
        sp.Derivative(XS * sp.Function(r"\Phi")(XS), XS), sp.Function(r"\Phi")(XS) + XS * sp.Function(r"\varphi")(XS)
    )
    + r", \quad \Phi(x) = \frac{1}{2}\left(1 + \operatorname{erf}\left(\frac{x}{\sqrt{2}}\right)\right), "
    r"\quad \varphi(x) = \frac{e^{- x^{2}/2}}{\sqrt{2 \pi}}",
    {
        "no-x-phi": ("the xφ(x) term dropped (product rule)", Phi),
        "phi-unnormalised": ("φ without the 1/√(2π)", lambda z: Phi(z) + z * sp.exp(-(z**2) / 2)),
        "erf-unscaled": ("Φ with erf(x) instead of erf(x/√2)", lambda z: (1 + sp.erf(z)) / 2 + z * phi(z)),
    },
)

gelu_exact_vjp = _vjp_claim(
    "gelu.exact.vjp",
    "GELU backward (as generated)",
    "seed B §12",
    GELU,
    r"\left(\Phi(x_{ab}) + x_{ab} \varphi(x_{ab})\right)",
    {"no-x-phi": ("dx = dy ⊙ Φ(x): xφ(x) dropped", Phi)},
)

_C = sp.Symbol("c", positive=True)  # only for the LaTeX: the op and the proof use the exact 44715/10^6
gelu_tanh_derivative = _derivative_claim(
    "gelu.tanh.derivative",
    "Derivative of the tanh approximation of GELU",
    "seed B §12",
    GELU_TANH,
    _latex_eq(sp.Derivative(gelu_tanh(XS, _C), XS), gelu_tanh_grad(XS, _C)) + r", \quad c = 0.044715",
    {
        "no-chain": (
            "chain factor √(2/π)(1 + 3cx²) dropped",
            lambda z: (1 + sp.tanh(_gelu_u(z))) / 2 + z / 2 * (1 - sp.tanh(_gelu_u(z)) ** 2),
        ),
        "no-3": ("d/dx (c x³) written c x²", lambda z: gelu_tanh_grad(z, GELU_C / 3)),
        "constant-0.44715": ("0.44715 instead of 0.044715", lambda z: gelu_tanh_grad(z, sp.Rational(44715, 10**5))),
    },
)

gelu_tanh_vjp = _vjp_claim(
    "gelu.tanh.vjp",
    "GELU (tanh) backward (as generated)",
    "seed B §12",
    GELU_TANH,
    r"\left(\frac{1 + \tanh u}{2} + \frac{x_{ab}}{2}\left(1 - \tanh^{2} u\right)"
    r"\sqrt{\frac{2}{\pi}}\left(1 + 3 c x_{ab}^{2}\right)\right), \quad "
    r"u = \sqrt{\frac{2}{\pi}}\left(x_{ab} + c x_{ab}^{3}\right), \quad c = 0.044715",
    {
        "no-chain": (
            "chain factor dropped",
            lambda z: (1 + sp.tanh(_gelu_u(z))) / 2 + z / 2 * (1 - sp.tanh(_gelu_u(z)) ** 2),
        ),
        "sech-sign": (
            "1 + tanh² instead of 1 − tanh²",
            lambda z: gelu_tanh_grad(z) + z * sp.tanh(_gelu_u(z)) ** 2 * sp.sqrt(2 / sp.pi) * (1 + 3 * GELU_C * z**2),
        ),
    },
)

silu_derivative = _derivative_claim(
    "silu.derivative",
    "SiLU derivative: σ(x)(1 + x σ(−x)), that is σ(x)(1 + x(1 − σ(x)))",
    "seed B §13",
    SILU,
    _latex_eq(
        sp.Derivative(XS * sp.Function(r"\sigma")(XS), XS),
        sp.Function(r"\sigma")(XS) * (1 + XS * sp.Function(r"\sigma")(-XS)),
    )
    + r", \quad \sigma(x) = \frac{1}{1 + e^{- x}}",
    {
        "sign-slip": ("σ(x)(1 − x(1 − σ(x))): sign slip", lambda z: sigmoid(z) * (1 - z * (1 - sigmoid(z)))),
        "sigmoid-derivative": ("σ(x)(1 − σ(x)), the sigmoid's own derivative", lambda z: sigmoid(z) * (1 - sigmoid(z))),
        "no-product-rule": ("σ(x) only", sigmoid),
    },
)

silu_vjp = _vjp_claim(
    "silu.vjp",
    "SiLU backward (as generated)",
    "seed B §13",
    SILU,
    r"\sigma(x_{ab})\left(1 + x_{ab}\,\sigma(-x_{ab})\right)",
    {"sign-slip": ("σ(x)(1 − x(1 − σ(x)))", lambda z: sigmoid(z) * (1 - z * (1 - sigmoid(z))))},
)


# ----------------------------------------------------------------- GELU tanh: error bound
BOUND_L = 6  # the interval [−L, L]
BOUND = sp.Rational(475, 10**6)  # the claimed bound on |GELU − GELU_tanh|
_STEP = sp.Rational(1, 128)  # grid spacing for point values
_CELL = sp.Rational(1, 16)  # cells for the second-derivative enclosure
_POINT_MARGIN = mpmath.mpf("1e-15")  # slack for the rounding of each point value


_IV_CONSTANTS: dict = {}


def _iv_eval(e, X, memo: dict | None = None):
    """Enclose a SymPy expression of XS over the interval X with mpmath.iv (outward rounding).
    Supports +, ×, integer powers, rational constants, √ of constants, π, exp, tanh. Repeated
    subexpressions (tanh(u) occurs many times in e'') are enclosed once per X (`memo`)."""
    memo = {} if memo is None else memo
    if not e.has(XS):
        table = _IV_CONSTANTS
    else:
        table = memo
    if e in table:
        return table[e]
    v = _iv_node(e, X, memo)
    table[e] = v
    return v


def _iv_node(e, X, memo):
    iv = mpmath.iv
    if e == XS:
        return X
    if e.is_Rational:
        return iv.mpf(e.p) / e.q
    if e is sp.pi:
        return iv.pi
    if isinstance(e, sp.Add):
        out = iv.mpf(0)
        for arg in e.args:
            out = out + _iv_eval(arg, X, memo)
        return out
    if isinstance(e, sp.Mul):
        out = iv.mpf(1)
        for arg in e.args:
            out = out * _iv_eval(arg, X, memo)
        return out
    if isinstance(e, sp.Pow):
        base, ex = e.args
        if ex.is_Integer:
            v = _iv_eval(base, X, memo)
            out = v ** abs(int(ex))  # mpmath.iv: tight for even powers (contains 0 → [0, …])
            return out if ex >= 0 else 1 / out
        if ex == sp.Rational(1, 2) and not base.has(XS):
            return iv.sqrt(_iv_eval(base, X, memo))
        if ex == sp.Rational(-1, 2) and not base.has(XS):
            return 1 / iv.sqrt(_iv_eval(base, X, memo))
    if isinstance(e, sp.exp):
        return iv.exp(_iv_eval(e.args[0], X, memo))
    if isinstance(e, sp.tanh):
        return 1 - 2 / (iv.exp(2 * _iv_eval(e.args[0], X, memo)) + 1)
    raise ValueError(f"no interval rule for {type(e).__name__}: {e}")


def _gelu_difference():
    """GELU − GELU_tanh as a function of a scalar, taken from the two ops' forward formulas."""
    (xg,), (xt,) = GELU.inputs, GELU_TANH.inputs
    exact = document_form(entry(GELU.outputs[0], (i, j), GELU.env()))  # Φ as (1 + erf(x/√2))/2
    exact = exact.xreplace({xg.base[i, j]: XS})
    approx = GELU_TANH.value(GELU_TANH.outputs[0]).xreplace({xt: XS})
    return exact - approx


def _gelu_bound() -> Proof:
    e = _gelu_difference()
    # 1. e is even: erf and tanh are odd, so x·(odd − odd) is even; the bound on [0, L] suffices.
    parity = sp.expand(e.xreplace({XS: -XS}) - e)
    if parity != 0:
        return Proof("unproven", "parity", [], sp.sstr(parity))
    # 2. second derivative enclosure per cell, by interval arithmetic (no erf in e'': Φ'' = φ').
    e2 = sp.diff(e, XS, 2)
    if e2.has(sp.erf):
        return Proof("unproven", "e'' still contains erf", [], sp.sstr(e2))
    cells = int(BOUND_L / _CELL)
    per_cell = int(_CELL / _STEP)
    f = sp.lambdify(XS, e, "mpmath")
    worst, _worst_at, peak, peak_at = mpmath.mpf(0), None, mpmath.mpf(0), None
    m2_max = mpmath.mpf(0)
    with mpmath.workdps(25):
        values = [abs(f(mpmath.mpf(k) / _STEP.q)) for k in range(cells * per_cell + 1)]
    for c in range(cells):
        lo, hi = c * _CELL, (c + 1) * _CELL
        X = mpmath.iv.mpf([mpmath.mpf(lo.p) / lo.q, mpmath.mpf(hi.p) / hi.q])
        enc = _iv_eval(e2, X)
        m2 = max(abs(enc.a), abs(enc.b))
        m2_max = max(m2_max, mpmath.mpf(m2))
        # on each grid step [u, v] ⊂ cell: |e| ≤ max(|e(u)|, |e(v)|) + M2 (v − u)²/8
        pad = mpmath.mpf(m2) * (mpmath.mpf(1) / _STEP.q) ** 2 / 8 + _POINT_MARGIN
        for k in range(c * per_cell, (c + 1) * per_cell):
            bound = max(values[k], values[k + 1]) + pad
            if bound > worst:
                worst, _worst_at = bound, k
            if values[k] > peak:
                peak, peak_at = values[k], k
    if worst > mpmath.mpf(BOUND.p) / BOUND.q:
        return Proof(
            "unproven", f"certified bound {mpmath.nstr(worst, 6)} exceeds the claim", [], mpmath.nstr(worst, 8)
        )
    return Proof(
        "proved-general",
        f"e = GELU − GELU_tanh is even (symbolic: e(−x) − e(x) expands to 0); on [0, {BOUND_L}] the values "
        f"|e| at {len(values)} grid points (spacing 1/{_STEP.q}, mpmath at 25 digits, each widened by 1e-15) plus "
        f"the interpolation remainder M2·h²/8, with M2 ≥ |e''| enclosed per cell of width 1/{_CELL.q} by "
        "mpmath.iv interval arithmetic (outward rounding; e'' has no erf); every step's bound ≤ the claim",
        [f"x real, |x| ≤ {BOUND_L}", "mpmath point values of erf, tanh, exp accurate to 1e-15 at 25 digits"],
        "0",
        evidence={
            "claimed_bound": float(BOUND),
            "certified_upper_bound": float(worst),
            "max_on_grid": float(peak),
            "argmax_on_grid": float(peak_at / _STEP.q),
            "max_second_derivative_enclosure": float(m2_max),
            "grid_points": len(values),
            "interval": [-BOUND_L, BOUND_L],
        },
    )


def _bound_cx(e, bound=BOUND) -> dict | None:
    """A point of [0, L] where |e| exceeds `bound` (a counterexample), or None."""
    f = sp.lambdify(XS, e, "mpmath")
    b = mpmath.mpf(bound.p) / bound.q
    for k in range(0, 64 * BOUND_L + 1):
        x = mpmath.mpf(k) / 64
        v = abs(f(x))
        if v > b:
            return {"at": {"x": float(x)}, "abs_difference": float(v), "bound": float(bound)}
    return None


gelu_tanh_bound = Claim(
    id="gelu.tanh.bound",
    title="The tanh approximation is within 4.75e-4 of GELU on [−6, 6]",
    source="seed B §12",
    latex=r"\left| x \Phi(x) - \frac{x}{2}\left(1 + \tanh\left(\sqrt{\frac{2}{\pi}}\left(x + 0.044715 x^{3}\right)"
    r"\right)\right) \right| \le 4.75 \cdot 10^{-4} \quad \text{for } |x| \le 6",
    prove=_gelu_bound,
    mutants=[
        Mutant(
            "constant-0.44715",
            "tanh approximation with 0.44715 instead of 0.044715",
            lambda: _bound_cx(gelu(XS) - gelu_tanh(XS, sp.Rational(44715, 10**5))),
        ),
        Mutant(
            "sqrt-2-over-pi-missing",
            "tanh(x + 0.044715x³) without the √(2/π)",
            lambda: _bound_cx(gelu(XS) - XS / 2 * (1 + sp.tanh(XS + GELU_C * XS**3))),
        ),
        Mutant(
            "too-tight",
            "a bound of 1e-4 (the true maximum is about 4.73e-4 near |x| = 2.70)",
            lambda: _bound_cx(_gelu_difference(), sp.Rational(1, 10**4)),
        ),
    ],
)

# claim-id prefixes besides this module's ops, tables and steps: the feed-forward network's claims (ffn.relu.*) sit beside its activations
TOPICS = ("ffn",)

CLAIMS: list[Claim] = [
    relu_derivative,
    _relu_vjp_claim(),
    _ffn_claim(),
    gelu_exact_derivative,
    gelu_exact_vjp,
    gelu_tanh_derivative,
    gelu_tanh_vjp,
    gelu_tanh_bound,
    silu_derivative,
    silu_vjp,
]


def _line_breaks(tex: str) -> str:
    """Seed A's LaTeX rule: `\\\\` ends its line (nothing after it on the line)."""
    return tex.replace("\\\\ ", "\\\\\n")


for _c in CLAIMS:
    _c.latex = _line_breaks(_c.latex)

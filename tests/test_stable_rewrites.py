"""Stability by construction: the stable rewrites apply wherever their form occurs, not only to a
whole line of two terms (derivations/language/stabilise.py, lemmas in derivations/stability.py).

Ops declared here by their formula alone, as docs/adding-an-op.md tells a user to write them:

* ELU as the docs write it, max(x, 0) + e^{min(x, 0)} − 1: e^{u} − 1 inside a three-term sum,
  printed expm1 (`stability.expm1_in_sum`);
* x/2 + 3e^{x} − 3: a coefficient and a third term (`stability.expm1_in_sum`);
* log(1 + x⁴): printed log1p (`stability.log1p`);
* log(1 + x²): printed 2 log1p(x²/(hypot(x, 1) + 1)) (`stability.log_root`: no x² = ∞);
* pseudo-Huber √(1 + x²) − 1: rationalised, x²/(hypot(x, 1) + 1) printed x·(x/(…))
  (`stability.root_minus`: no 1 − 1 at small x);
* 1 − cos x: printed 2 sin²(x/2) (`stability.one_minus_cos`);
* sinh by its exponentials, (e^{x} − e^{−x})/2: printed sinh x (`stability.exp_pair`: 0 at
  x = 1e-8 in float32 where the value is 1e-8);
* TanhExp x·tanh(e^{x}): its backward's e^{x}·sech²(e^{x}) as one exponential
  (`stability.exp_product`: no ∞·0 from x > 88 in float32);
* log-softmax as its formula, x − log Σ_j e^{x_j}: printed with the row max shifted out
  (`stability.logsumexp`);
* squareplus (x + √(x² + b))/2: rationalised where x < 0 (`stability.sqrt_rationalised`), its
  root printed hypot(x, √b) (`stability.hypot`: x² = ∞ from |x| > 1.8e19 in float32);
* the inverse square root unit x/√(1 + αx²): printed x/hypot(√α x, 1) (`stability.hypot`);
* the logistic density σ(x)(1 − σ(x)), written with e^{−x}: printed σ(x)σ(−x)
  (`stability.one_minus_sigmoid`: 1 − σ(x) is 0 from x > 17 in float32, where the value is
  e^{−x}), its derivative's σ(−x) − σ(x) printed −tanh(x/2) (`stability.sigmoid_difference`: no
  σ − σ near 0).

Each is printed by codegen into a scratch package (qed/tools/scratch_kernels.py); its NumPy text
must use the stable form, its values at small magnitudes (|x| ~ 1e-7 in float32, subnormals in
float64) and at large ones must be within a few ulps of the exact value (mpmath, 60 digits or more), and
its generated claims must prove. A forward that keeps an unstable form (a hand-written line) is
named by `python -m codegen`.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from codegen.render import stability_warnings
from derivations import registry
from derivations.language.arrays import Array, Assign, Hypot, RowSum, Sigmoid, size
from derivations.language.ops import Op, Option
from derivations.proof.obligations import claims_for
from qed.tools.scratch_kernels import ScratchKernels

r, n = size("r"), size("n")
x, y = Array("x", (r, n)), Array("y", (r, n))
b = sp.Symbol("b", positive=True)
mpmath.mp.dps = 60
ULPS = 4  # the bound: |printed − exact| ≤ 4 ulps of the exact value in the dtype


def activation(name, formula, **kw) -> Op:
    return Op(name=name, module=__name__, inputs=[x], outputs=[y], spec=[Assign(y, formula)], optional_axes=2, **kw)


ELU = activation("elu_doc", sp.Max(x, 0) + sp.exp(sp.Min(x, 0)) - 1)
EXPM1_SUM = activation("expm1_sum", x / 2 + 3 * (sp.exp(x) - 1))  # SymPy: x/2 + 3e^{x} − 3
LOG1P = activation("log1p_quartic", sp.log(1 + x**4))
LOG_SQUARE = activation("log_square", sp.log(1 + x**2))
PSEUDO_HUBER = activation("pseudo_huber_doc", sp.sqrt(1 + x**2) - 1)
ONE_MINUS_COS = activation("one_minus_cos_doc", 1 - sp.cos(x))
SINH_EXPS = activation("sinh_exps_doc", (sp.exp(x) - sp.exp(-x)) / 2)
TANHEXP = activation("tanhexp_doc", x * sp.tanh(sp.exp(x)))
SOFT_FRACTION = activation("soft_fraction_doc", 2 * sp.Abs(x) / (1 + sp.Abs(x)))
SQUAREPLUS = activation(
    "squareplus_doc", (x + sp.sqrt(x**2 + b)) / 2, options=[Option(b, "b", 4.0, "the smoothing b > 0")]
)
alpha = sp.Symbol("alpha", positive=True)
ISRU = activation("isru_doc", x / sp.sqrt(1 + alpha * x**2), options=[Option(alpha, "alpha", 1.0, "α > 0")])
LOGISTIC_DENSITY = activation("logistic_density_doc", 1 / (1 + sp.exp(-x)) * (1 - 1 / (1 + sp.exp(-x))))
LOG_SOFTMAX = Op(
    name="log_softmax_doc",
    module=__name__,
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, x - sp.log(RowSum(sp.exp(x))))],
    optional_axes=1,
    sizes={n: (x, 1)},
)
SOFTMAX = Op(
    name="softmax_doc",
    module=__name__,
    inputs=[x],
    outputs=[y],
    spec=[Assign(y, sp.exp(x) / RowSum(sp.exp(x)))],
    optional_axes=1,
    sizes={n: (x, 1)},
)
OPS = [
    ELU,
    EXPM1_SUM,
    LOG1P,
    LOG_SQUARE,
    PSEUDO_HUBER,
    ONE_MINUS_COS,
    SINH_EXPS,
    TANHEXP,
    SOFT_FRACTION,
    SQUAREPLUS,
    ISRU,
    LOGISTIC_DENSITY,
    LOG_SOFTMAX,
    SOFTMAX,
]
IDS = [o.name for o in OPS]

# op -> (the lemma it cites, what its printed NumPy forward must call, what it must not print)
PRINTED = {
    "elu_doc": ("stability.expm1_in_sum", ["np.expm1("], ["np.exp("]),
    "expm1_sum": ("stability.expm1_in_sum", ["np.expm1("], ["np.exp("]),
    "log1p_quartic": ("stability.log1p", ["np.log1p("], ["np.log("]),
    "log_square": ("stability.log_root", ["np.log1p(", "np.hypot(x, 1)"], ["np.log(", "x*x"]),
    "pseudo_huber_doc": ("stability.root_minus", ["np.hypot(x, 1)"], ["np.sqrt(", "x*x", "- 1"]),
    "one_minus_cos_doc": ("stability.one_minus_cos", ["np.sin("], ["np.cos("]),
    "sinh_exps_doc": ("stability.exp_pair", ["np.sinh("], ["np.exp("]),
    "tanhexp_doc": ("stability.exp_product", ["np.tanh("], []),
    "soft_fraction_doc": (None, ["np.abs("], []),
    "squareplus_doc": ("stability.sqrt_rationalised", ["np.hypot(x, math.sqrt(b))", "np.abs(x)"], ["np.sqrt("]),
    "isru_doc": ("stability.hypot", ["np.hypot("], ["np.sqrt(", "x*x", "x**2"]),
    "logistic_density_doc": ("stability.one_minus_sigmoid", ["scipy.special.expit(-x)"], ["1 - "]),
    "log_softmax_doc": ("stability.logsumexp", ["np.max(x, axis=-1, keepdims=True)", "np.exp(x - np.max("], []),
    "softmax_doc": ("stability.softmax_shift", ["np.max(x, axis=-1, keepdims=True)"], ["np.exp(x)"]),
}


def exact(name, row):
    """The specification at the input's exact binary values, in 60 digits (800 where it cancels)."""
    v = [mpmath.mpf(float(t)) for t in row]
    if name == "elu_doc":
        return [max(t, 0) + mpmath.expm1(min(t, 0)) for t in v]
    if name == "expm1_sum":
        return [t / 2 + 3 * mpmath.expm1(t) for t in v]
    if name == "log1p_quartic":
        return [mpmath.log1p(t**4) for t in v]
    if name == "log_square":
        return [mpmath.log1p(t * t) for t in v]
    if name == "pseudo_huber_doc":  # the document's difference, in 800 digits: 1e-20² next to 1
        with mpmath.workdps(800):
            return [+(mpmath.sqrt(1 + t * t) - 1) for t in v]
    if name == "one_minus_cos_doc":
        return [2 * mpmath.sin(t / 2) ** 2 for t in v]
    if name == "sinh_exps_doc":
        return [mpmath.sinh(t) for t in v]
    if name == "tanhexp_doc":
        return [t * mpmath.tanh(mpmath.exp(t)) for t in v]
    if name == "soft_fraction_doc":
        return [2 * abs(t) / (1 + abs(t)) for t in v]
    if name == "squareplus_doc":  # the document's sum, in 800 digits: x = −1e150 cancels 300 of them
        with mpmath.workdps(800):
            return [+((t + mpmath.sqrt(t * t + 4)) / 2) for t in v]
    if name == "isru_doc":
        return [t / mpmath.sqrt(1 + t * t) for t in v]
    if name == "logistic_density_doc":
        return [1 / ((1 + mpmath.exp(-t)) * (1 + mpmath.exp(t))) for t in v]
    m = max(v)
    lse = m + mpmath.log(mpmath.fsum(mpmath.exp(t - m) for t in v))
    if name == "softmax_doc":
        return [mpmath.exp(t - lse) for t in v]
    return [t - lse for t in v]


def exact_grad(name, row):
    """∂ Σ y / ∂x at dy = 1 for the elementwise ops (where each y depends on its own x)."""
    v = [mpmath.mpf(float(t)) for t in row]
    if name == "elu_doc":
        return [mpmath.mpf(1) if t > 0 else mpmath.exp(t) for t in v]
    if name == "squareplus_doc":  # (1 + x/√(x² + 4))/2, in 800 digits (cancels for x ≪ 0)
        with mpmath.workdps(800):
            return [+((1 + t / mpmath.sqrt(t * t + 4)) / 2) for t in v]
    if name == "logistic_density_doc":  # σ(x)σ(−x)(σ(−x) − σ(x))
        return [
            (1 / (1 + mpmath.exp(t)) - 1 / (1 + mpmath.exp(-t))) / ((1 + mpmath.exp(-t)) * (1 + mpmath.exp(t)))
            for t in v
        ]
    if name == "isru_doc":  # (1 + x²)^{−3/2}
        return [(1 + t * t) ** mpmath.mpf(-1.5) for t in v]
    if name == "log_square":
        return [2 * t / (1 + t * t) for t in v]
    if name == "pseudo_huber_doc":
        return [t / mpmath.sqrt(1 + t * t) for t in v]
    if name == "one_minus_cos_doc":
        return [mpmath.sin(t) for t in v]
    if name == "sinh_exps_doc":
        return [mpmath.cosh(t) for t in v]
    if name == "soft_fraction_doc":  # 2 sign x/(1 + |x|)²
        return [2 * mpmath.sign(t) / (1 + abs(t)) ** 2 for t in v]
    if name == "tanhexp_doc":  # tanh e^{x} + x e^{x} sech²(e^{x})
        return [mpmath.tanh(mpmath.exp(t)) + t * mpmath.exp(t) * mpmath.sech(mpmath.exp(t)) ** 2 for t in v]
    return None


# per op and dtype: rows of inputs where the document's formula loses its accuracy
SMALL32 = [1e-7, -1e-7, 3e-8, -2.5e-6, 1e-20, -1e-30, -1e-40, 0.5, -3.0]  # -1e-40: a float32 subnormal
SMALL64 = [1e-7, -1e-7, 1e-17, -1e-200, -1e-300, -1e-310, 2e-320, 0.5, -3.0]  # subnormals below 2.2e-308
POINTS = {
    ("elu_doc", np.float32): SMALL32,
    ("elu_doc", np.float64): SMALL64,
    ("expm1_sum", np.float32): SMALL32,
    ("expm1_sum", np.float64): SMALL64,
    # log(1 + x⁴): x⁴ ~ 1e-8 is lost next to 1 in float32
    ("log1p_quartic", np.float32): [1e-2, -3e-2, 3e-3, 1e-5, 0.5, -3.0],
    ("log1p_quartic", np.float64): [1e-4, -3e-5, 1e-40, 0.5, -3.0],
    # log(1 + x²): x² ~ 1e-8 is lost next to 1 in float32; x² = ∞ from |x| > 1.8e19
    ("log_square", np.float32): [1e-4, -3e-4, 1e-7, 1e-20, 0.5, -3.0, 1e20, -3e30],
    ("log_square", np.float64): [1e-8, -3e-9, 1e-160, 1e-155, 0.5, -3.0, 1e160, -1e300],
    # √(1 + x²) − 1: 0 at x = 1e-4 in float32 (the value 5e-9); x² = ∞ from |x| > 1.8e19
    ("pseudo_huber_doc", np.float32): [1e-4, -3e-4, 1e-7, 1e-20, 0.5, -3.0, 1e20, -3e30],
    ("pseudo_huber_doc", np.float64): [1e-8, -3e-9, 1e-150, 0.5, -3.0, 1e160, -1e300],
    # 1 − cos x: 0 at x = 1e-4 in float32 (the value 5e-9)
    ("one_minus_cos_doc", np.float32): [1e-4, -3e-4, 1e-7, 1e-15, 0.5, -3.0],
    ("one_minus_cos_doc", np.float64): [1e-8, -3e-9, 1e-150, 0.5, -3.0],
    # (e^{x} − e^{−x})/2: 0 at x = 1e-8 in float32 (the value 1e-8)
    ("sinh_exps_doc", np.float32): [1e-8, -3e-8, 1e-5, 1e-30, 0.5, -3.0, 80.0],
    ("sinh_exps_doc", np.float64): [1e-17, -3e-18, 1e-200, 0.5, -3.0, 700.0],
    # x tanh e^{x}: its backward's e^{x}·sech²(e^{x}) is ∞·0 = NaN from x > 88 in float32 (709 in float64)
    ("tanhexp_doc", np.float32): [100.0, 89.0, 50.0, 1.0, -2.0, 0.5, -30.0],
    # 2|x|/(1 + |x|)': the quotient rule's two terms cancel (2 − y with y → 2) at large |x|
    ("soft_fraction_doc", np.float32): [1e6, -3e6, 1e4, 0.5, -1e-7, 1e20],
    ("soft_fraction_doc", np.float64): [1e15, -3e14, 1e8, 0.5, -1e-7, 1e200],
    ("tanhexp_doc", np.float64): [800.0, 710.0, 100.0, 1.0, -2.0, 0.5, -30.0],
    # (x + √(x² + 4))/2 cancels for x ≪ 0: 1e-4 at x = −1e4, not 0; x² = ∞ from |x| > 1.8e19
    # in float32 (1.3e154 in float64)
    ("squareplus_doc", np.float32): [-1e4, -3e3, -1e7, -1e-7, 1e-7, 0.0, 2.0, 1e4, 1e20, -1e20, 3e37],
    ("squareplus_doc", np.float64): [-1e4, -1e9, -1e150, -1e-7, 1e-7, 0.0, 2.0, 1e150, 1e200, -1e300],
    # x/√(1 + x²): x² = ∞ from |x| > 1.8e19 in float32, where the value is ±1
    ("isru_doc", np.float32): [1e20, -1e20, 3e30, 1e4, -0.5, 1e-7, 1e-30, 0.0],
    ("isru_doc", np.float64): [1e160, -1e200, 1e300, 1e4, -0.5, 1e-7, 1e-300, 0.0],
    # σ(x)(1 − σ(x)): 1 − σ(x) is 0 from x > 17 in float32 (37 in float64), where the value is e^{−x}
    ("logistic_density_doc", np.float32): [20.0, 30.0, 80.0, -80.0, 17.5, 1e-7, 0.5, -3.0],
    ("logistic_density_doc", np.float64): [40.0, 300.0, 700.0, -700.0, 1e-17, 0.5, -3.0],
    # log Σ e^{x}: e^{1e4} is ∞ in float64 too
    ("log_softmax_doc", np.float32): [1e4, -1e4, 3e3, 0.5, 1e-7],
    ("log_softmax_doc", np.float64): [1e4, -1e4, 3e3, 0.5, 1e-7, 700.0, 710.0],
    # e^{x}/Σ e^{x}: ∞/∞ = NaN from x ≈ 89 in float32 (710 in float64)
    ("softmax_doc", np.float32): [100.0, 99.0, -1e4, 0.5, 1e-7],
    ("softmax_doc", np.float64): [1e4, 9999.0, 710.0, -1e4, 0.5],
}


def ulps(got, want, dtype) -> float:
    """|got − want| in ulps of want rounded to the dtype (the spacing of the subnormals at 0)."""
    err = abs(mpmath.mpf(float(got)) - want)
    spacing = np.spacing(np.abs(dtype(float(want))))
    return float(err / mpmath.mpf(float(spacing)))


@pytest.fixture(scope="module")
def scratch():
    with ScratchKernels() as pkg:
        yield {(o.name, be): pkg.module(o, be) for o in OPS for be in ("numpy", "torch")}


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_printed_forward_uses_the_stable_form(scratch, op):
    from codegen.render import render_op

    lemma, must, must_not = PRINTED[op.name]
    assert lemma is None or (lemma in op.stability and lemma in op.claims)  # cited in the generated header
    text = render_op(op, "numpy")
    forward = text[text.index(f"def {op.name}_forward") : text.index(f"def {op.name}_backward")]
    for call in must:
        assert call in forward, (call, forward)
    for call in must_not:
        assert call not in forward, (call, forward)
    assert not stability_warnings([op])  # nothing unstable left in the printed lines


def test_squareplus_is_printed_without_the_cancelling_sum():
    """The document's x/2 + √(x² + b)/2 is not what is printed: the rationalised quotient is."""
    (line,) = SQUAREPLUS.forward
    assert line.expr != SQUAREPLUS.spec[0].expr
    assert line.expr.atoms(Hypot) == {Hypot(x, sp.sqrt(b))} and line.expr.atoms(sp.Heaviside)
    roots = [p for p in sp.preorder_traversal(line.expr) if isinstance(p, sp.Pow) and p.exp == sp.S.Half]
    assert all(p.is_number or p == sp.sqrt(b) for p in roots), roots  # √b only: no √(x² + b)


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_values_at_small_and_large_magnitudes_are_within_a_few_ulps(scratch, op, dtype, backend):
    row = np.array([POINTS[(op.name, dtype)]], dtype=dtype)
    if backend == "torch":
        xs = torch.from_numpy(row).requires_grad_()
        out = getattr(scratch[(op.name, backend)], op.name)(xs)
        out.sum().backward()
        got, grad = out.detach().numpy(), xs.grad.numpy()
    else:
        mod = scratch[(op.name, backend)]
        # TanhExp's e^{x} overflows on the way (tanh ∞ = 1, e^{x − 2e^{x}} = 0: the values are right)
        with np.errstate(over="ignore" if op.name == "tanhexp_doc" else "warn"):
            got, cache = getattr(mod, f"{op.name}_forward")(row)
            grad = getattr(mod, f"{op.name}_backward")(np.ones_like(got), cache)
    assert got.dtype == dtype
    want = exact(op.name, row[0])
    bad = [(float(t), float(g), float(w), ulps(g, w, dtype)) for t, g, w in zip(row[0], got[0], want)]
    assert all(u <= ULPS for *_, u in bad), [b_ for b_ in bad if b_[-1] > ULPS]
    want_grad = exact_grad(op.name, row[0])
    if want_grad is not None:
        # a gradient below the smallest normal number may come back 0: its quotient rule squares
        # R + |x| (squareplus' c/(R + |x|)² at x = −1e20 in float32 is 1e-40, subnormal)
        tiny = np.finfo(dtype).tiny
        bad = [
            (float(t), float(g), float(w), 0.0 if g == 0 and abs(w) < tiny else ulps(g, w, dtype))
            for t, g, w in zip(row[0], grad[0], want_grad)
        ]
        assert all(u <= 2 * ULPS for *_, u in bad), [b_ for b_ in bad if b_[-1] > 2 * ULPS]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_document_form_would_not_have_been_accurate(op):
    """The points above are where the formula as written fails in float32 (the check has teeth;
    for TanhExp its backward as differentiated)."""
    row = np.array(POINTS[(op.name, np.float32)], dtype=np.float32)
    with np.errstate(all="ignore"):
        naive = {
            "elu_doc": lambda t: np.maximum(t, 0) + np.exp(np.minimum(t, 0)) - 1,
            "expm1_sum": lambda t: t / 2 + 3 * np.exp(t) - 3,
            "log1p_quartic": lambda t: np.log(1 + t**4),
            "log_square": lambda t: np.log(1 + t * t),
            "pseudo_huber_doc": lambda t: np.sqrt(1 + t * t) - 1,
            "one_minus_cos_doc": lambda t: 1 - np.cos(t),
            "sinh_exps_doc": lambda t: (np.exp(t) - np.exp(-t)) / 2,
            # the backward as differentiated: tanh e^{x} + x e^{x} (1 − tanh²(e^{x}))
            "tanhexp_doc": lambda t: np.tanh(np.exp(t)) + t * np.exp(t) * (1 - np.tanh(np.exp(t)) ** 2),
            # the backward as read with y: (2 − y) sign x/(1 + |x|)
            "soft_fraction_doc": lambda t: (2 - 2 * np.abs(t) / (1 + np.abs(t))) * np.sign(t) / (1 + np.abs(t)),
            "squareplus_doc": lambda t: (t + np.sqrt(t * t + 4)) / 2,
            "isru_doc": lambda t: t / np.sqrt(1 + t * t),
            "logistic_density_doc": lambda t: 1 / (1 + np.exp(-t)) * (1 - 1 / (1 + np.exp(-t))),
            "log_softmax_doc": lambda t: t - np.log(np.sum(np.exp(t))),
            "softmax_doc": lambda t: np.exp(t) / np.sum(np.exp(t)),
        }[op.name](row)
    want = (exact_grad if op.name in ("tanhexp_doc", "soft_fraction_doc") else exact)(op.name, row)
    errors = [ulps(g, w, np.float32) if np.isfinite(g) else np.inf for g, w in zip(naive, want)]
    assert max(errors) > 1000


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_the_op_is_proved_with_the_rewrite_in_it(op):
    for claim in claims_for(op):
        cert = claim.run()
        assert cert.status == "proved-general", (claim.id, cert.method, str(cert.residual)[:300])
        assert cert.mutants and all(m.refuted for m in cert.mutants), claim.id
    assert set(op.stability) <= {c.id for c in registry.claims()}


LEMMAS = [
    "stability.expm1_in_sum",
    "stability.log1p",
    "stability.logsumexp",
    "stability.softmax_shift",
    "stability.sqrt_rationalised",
    "stability.hypot",
    "stability.root_minus",
    "stability.log_root",
    "stability.one_minus_cos",
    "stability.exp_pair",
    "stability.exp_product",
    "stability.one_minus_sigmoid",
    "stability.sigmoid_difference",
]


@pytest.mark.parametrize("lemma", LEMMAS)
def test_each_lemma_is_proved_and_its_mutants_refuted(lemma):
    cert = registry.claim(lemma).run()
    assert cert.status == "proved-general", (lemma, str(cert.residual)[:300])
    assert len(cert.mutants) >= 2 and all(m.refuted for m in cert.mutants), lemma


# lines written by hand are printed as written: the unstable forms are named at `make codegen`
BY_HAND = [
    Op(
        name="elu_by_hand",
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=[Assign(y, ELU.spec[0].expr)],
        forward=[Assign(y, ELU.spec[0].expr)],
        optional_axes=2,
    ),
    Op(
        name="log1p_by_hand",
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=[Assign(y, sp.log(1 + x**2))],
        forward=[Assign(y, sp.log(1 + x**2))],
        optional_axes=2,
    ),
    Op(
        name="log_softmax_by_hand",
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=LOG_SOFTMAX.spec,
        forward=LOG_SOFTMAX.spec,
        optional_axes=1,
        sizes={n: (x, 1)},
    ),
]


def test_an_unstable_printed_form_is_named_by_op():
    lines = stability_warnings(BY_HAND)
    assert any(ln.startswith("elu_by_hand: the printed forward has e^{u} − 1 not as expm1(u)") for ln in lines)
    assert any(ln.startswith("log1p_by_hand: the printed forward has log(1 + …) not as log1p(…)") for ln in lines)
    assert any(ln.startswith("log_softmax_by_hand: the printed forward has log Σ e^{…} without") for ln in lines)
    assert not stability_warnings()  # every op of the registry prints its stable forms


def by_hand(name, formula) -> Op:
    return Op(
        name=name,
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=[Assign(y, formula)],
        forward=[Assign(y, formula)],
        optional_axes=2,
    )


def test_a_cancellation_no_rewrite_removes_is_named_from_the_formula_alone():
    """Declared by the formula alone, tanhshrink x − tanh x (no proved rewrite removes it yet) still
    prints what cancels and is named by op and form; pseudo-Huber, 1 − cos x and log(x² + c) are
    rewritten and not named, but written by hand (a forward line as the document has it) they are;
    the forms that do not cancel (x + tanh x, √(1 + x²) + 1, 1 + cos x) are never named."""
    lines = stability_warnings([activation("tanhshrink_doc", x - sp.tanh(x))])
    assert any(ln.startswith("tanhshrink_doc: the printed forward has v − tanh v, which cancels") for ln in lines), (
        lines
    )
    named = {
        "pseudo_huber_hand": (sp.sqrt(1 + x**2) - 1, "√(v² + c) not as hypot(v, √c)"),
        "one_minus_cos_hand": (1 - sp.cos(x), "1 − cos v, which cancels where |v| ≪ 1"),
        "log_eps_hand": (sp.log(x**2 + sp.Rational(1, 10**6)), "log(v² + c), whose v² overflows"),
        "one_minus_sigmoid_hand": (
            x * (1 - Sigmoid(x)) + 1,
            "1 − σ(u), which cancels where σ(u) rounds to 1",
        ),
    }
    for name, (formula, form) in named.items():
        assert not stability_warnings([activation(name.replace("hand", "doc"), formula)]), formula
        lines = stability_warnings([by_hand(name, formula)])
        assert any(ln.startswith(f"{name}: the printed forward has {form}") for ln in lines), lines
    for formula in (x + sp.tanh(x), sp.sqrt(1 + x**2) + 1, 1 + sp.cos(x)):
        assert not stability_warnings([activation("fine_doc", formula)]), formula


def test_make_codegen_prints_the_warnings(tmp_path, monkeypatch, capsys):
    import codegen.__main__ as cli

    monkeypatch.setattr(cli, "stability_warnings", lambda: stability_warnings(BY_HAND))
    assert cli.main(["--root", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    for op in BY_HAND:
        assert f"codegen: warning: {op.name}: the printed forward has" in err


def test_a_power_of_one_plus_an_exponential_is_printed_as_sigmoids():
    """(1 + e^{−x})^{−2} is σ(x)² (`stability.sigmoid_node`): no e^{1e4} = ∞ in the forward, where
    the formula as written overflows (a floating-point exception under `np.errstate(all="raise")`)."""
    from codegen.render import render_op

    op = activation("sigmoid_squared_doc", 1 / (1 + sp.exp(-x)) ** 2)
    assert "stability.sigmoid_node" in op.stability
    text = render_op(op, "numpy")
    forward = text[text.index("def sigmoid_squared_doc_forward") : text.index("def sigmoid_squared_doc_backward")]
    assert "scipy.special.expit(" in forward and "np.exp(" not in forward, forward
    row = np.array([[-1e4, -100.0, 0.5, 100.0, 1e4]], dtype=np.float32)
    with ScratchKernels() as pkg, np.errstate(all="raise"):
        got, _ = pkg.module(op, "numpy").sigmoid_squared_doc_forward(row)
        with pytest.raises(FloatingPointError):
            1 / (1 + np.exp(-row)) ** 2  # the document's form
    want = [mpmath.mpf(1) / (1 + mpmath.exp(-mpmath.mpf(float(t)))) ** 2 for t in row[0]]
    assert all(ulps(g, w, np.float32) <= ULPS for g, w in zip(got[0], want)), got


def test_what_no_rewrite_reaches_yet_is_named_and_a_shifted_sum_is_not():
    """Declared by their formulas alone: cosh x/cosh 2x and 1/cosh x (∞/∞ from |x| > 89 in float32),
    x/(e^{x} − 1) (its derivative ∞/∞ from 88) and x − sin x (cancels near 0) are printed as
    written and named by op and form; e^{x}/(e^{x} + e^{z} + 1) written by hand is named, and
    declared by its formula it is shifted (`stability.exp_sum_shift`) and not named."""
    z = Array("z", (r, n))
    cases = {
        "cosh_ratio_doc": (sp.cosh(x) / sp.cosh(2 * x), "cosh u or sinh u below a fraction"),
        "sech_doc": (1 / sp.cosh(x), "cosh u or sinh u below a fraction"),
        "bernoulli_doc": (x / (sp.exp(x) - 1), "expm1(u) below a fraction"),
        "sine_shrink_doc": (x - sp.sin(x), "v − sin v or sinh v − v"),
    }
    for name, (formula, form) in cases.items():
        lines = stability_warnings([activation(name, formula)])
        assert any(ln.startswith(f"{name}: the printed forward has {form}") for ln in lines), (name, lines)
    formula = sp.exp(x) / (sp.exp(x) + sp.exp(z) + 1)
    two = dict(module=__name__, inputs=[x, z], outputs=[y], optional_axes=2)
    assert not stability_warnings([Op(name="sink_doc", spec=[Assign(y, formula)], **two)])
    lines = stability_warnings([Op(name="sink_hand", spec=[Assign(y, formula)], forward=[Assign(y, formula)], **two)])
    assert any(ln.startswith("sink_hand: the printed forward has a power or log of Σ k e^{a} + c") for ln in lines)

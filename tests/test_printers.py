"""Exact-string tests of every print rule, both backends, and of the printers' strictness."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch

from codegen.lowering import Lowering
from codegen.printers import NumpyPrinter, PrinterError, TorchPrinter
from codegen.support import numpy_support as np_support
from codegen.support import torch_support
from derivations.language.arrays import (
    Array,
    CausalMask,
    ColSum,
    Contract,
    Gather,
    Hypot,
    MatMul,
    NormalCDF,
    OneHot,
    RowMax,
    RowMean,
    RowSum,
    Sigmoid,
    T,
    Take,
    size,
)

r, n, d_k, V = size("r"), size("n"), size("d_k"), size("V")
x, y, a, b, c = (Array(s, (r, n)) for s in ("x", "y", "a", "b", "c"))
q, k = Array("q", (r, d_k)), Array("k", (n, d_k))
s_ = Array("s", (r, r))
g = Array("gamma", (1, n))
col = Array("mean", (r, 1))
E = Array("E", (V, n))
ids = Array("ids", (r, 1), integer=True)
eps = sp.Symbol("eps", positive=True)


def unevaluated_neg(e):
    return sp.Mul(-1, e, evaluate=False)


# (id, expression, numpy text, torch text)
CASES = [
    # names
    ("array", x, "x", "x"),
    ("size", d_k, "d_k", "d_k"),
    ("hyperparameter", eps * x, "eps*x", "eps*x"),
    # + - * / and precedence
    ("sub", x - y, "x - y", "x - y"),
    ("neg-first", -x - y, "-x - y", "-x - y"),
    ("neg-sum", unevaluated_neg(a + b), "-(a + b)", "-(a + b)"),
    (
        "sub-of-sub",
        sp.Add(a, unevaluated_neg(sp.Add(b, unevaluated_neg(c), evaluate=False)), evaluate=False),
        "a - (b - c)",
        "a - (b - c)",
    ),
    ("div-of-product", a / (b * c), "a/(b*c)", "a/(b*c)"),
    ("square-of-product", sp.Pow(a * b, 2, evaluate=False), "(a*b)*(a*b)", "(a*b)*(a*b)"),
    ("product-of-sum", a * (b + c), "a*(b + c)", "a*(b + c)"),
    ("div-by-sum", a / (b + c), "a/(b + c)", "a/(b + c)"),
    ("neg-coefficient", -2 * x, "-2*x", "-2*x"),
    ("neg-product", -x * y, "-x*y", "-x*y"),
    ("one-minus", 1 - x, "1 - x", "1 - x"),
    # powers
    ("square", x**2, "x*x", "x*x"),
    ("cube", x**3, "x*x*x", "x*x*x"),
    ("fourth", x**4, "x*x*x*x", "x*x*x*x"),
    ("fifth", x**5, "x**5", "x**5"),
    ("sqrt", sp.sqrt(x), "np.sqrt(x)", "torch.sqrt(x)"),
    ("rsqrt", 1 / sp.sqrt(x), "1/np.sqrt(x)", "torch.rsqrt(x)"),
    ("reciprocal", 1 / x, "1/x", "1/x"),
    ("inverse-square", x**-2, "(1/x)*(1/x)", "(1/x)*(1/x)"),  # no x² = ∞ where 1/x² is a number
    ("hypot", Hypot(x, 1), "np.hypot(x, 1)", "_support.hypot(x, 1)"),  # √(x² + 1) without x²
    ("hypot-of-option", Hypot(x, sp.sqrt(d_k)), "np.hypot(x, math.sqrt(d_k))", "_support.hypot(x, math.sqrt(d_k))"),
    ("scalar-hypot", Hypot(d_k, 1), "math.hypot(d_k, 1)", "math.hypot(d_k, 1)"),
    ("three-halves", x ** sp.Rational(3, 2), "x*np.sqrt(x)", "x*torch.sqrt(x)"),
    ("minus-three-halves", x ** sp.Rational(-3, 2), "1/(x*np.sqrt(x))", "1/(x*torch.sqrt(x))"),
    ("cube-root", x ** sp.Rational(1, 3), "x**(1/3)", "x**(1/3)"),
    ("symbolic-exponent", x**d_k, "x**d_k", "x**d_k"),
    ("rsqrt-of-sum", 1 / sp.sqrt(col + eps), "1/np.sqrt(mean + eps)", "torch.rsqrt(mean + eps)"),
    # scalars: Python's math and plain numbers
    ("scale", x / sp.sqrt(d_k), "x/math.sqrt(d_k)", "x/math.sqrt(d_k)"),
    ("scalar-sqrt", sp.sqrt(d_k), "math.sqrt(d_k)", "math.sqrt(d_k)"),
    ("scalar-rsqrt", 1 / sp.sqrt(d_k), "1/math.sqrt(d_k)", "1/math.sqrt(d_k)"),
    # scalar factors are combined into one number before the array: one pass over x, not two
    (
        "sqrt-2-over-pi",
        sp.sqrt(2 / sp.pi) * x,
        "math.sqrt(2)/math.sqrt(math.pi)*x",
        "math.sqrt(2)/math.sqrt(math.pi)*x",
    ),
    ("pi", sp.pi * x, "math.pi*x", "math.pi*x"),
    ("e", sp.E * x, "math.e*x", "math.e*x"),
    ("decimal-rational", sp.Rational(44715, 10**6) * x**3, "0.044715*x*x*x", "0.044715*x*x*x"),
    ("half-constant", x + sp.Rational(1, 2), "x + (1/2)", "x + (1/2)"),
    ("standalone-rational", sp.Rational(1, 3), "(1/3)", "(1/3)"),
    ("standalone-decimal", sp.Rational(1, 10), "0.1", "0.1"),
    ("half-coefficient", x / 2, "x/2", "x/2"),
    ("ratio-coefficient", 3 * x / 4, "(3/4)*x", "(3/4)*x"),
    ("float", sp.Float(0.25) * x, "0.25*x", "0.25*x"),
    ("scalar-exp", sp.exp(eps) * x, "math.exp(eps)*x", "math.exp(eps)*x"),
    ("scalar-erf", sp.erf(eps), "math.erf(eps)", "math.erf(eps)"),
    ("scalar-log", sp.log(d_k), "math.log(d_k)", "math.log(d_k)"),
    ("scalar-max", sp.Max(eps, d_k), "max(d_k, eps)", "max(d_k, eps)"),
    ("minus-infinity", -sp.oo, "-math.inf", "-math.inf"),
    # elementwise functions
    ("exp", sp.exp(-x), "np.exp(-x)", "torch.exp(-x)"),
    ("log", sp.log(x), "np.log(x)", "torch.log(x)"),
    ("tanh", sp.tanh(x), "np.tanh(x)", "torch.tanh(x)"),
    ("erf", sp.erf(x / sp.sqrt(2)), "_special.erf(math.sqrt(2)/2*x)", "torch.erf(math.sqrt(2)/2*x)"),
    ("sin", sp.sin(x), "np.sin(x)", "torch.sin(x)"),
    ("cos", sp.cos(x), "np.cos(x)", "torch.cos(x)"),
    ("abs", sp.Abs(x), "np.abs(x)", "torch.abs(x)"),
    ("sign", sp.sign(x), "np.sign(x)", "torch.sign(x)"),
    ("relu", sp.Max(0, x), "np.maximum(x, 0)", "torch.clamp(x, min=0)"),
    ("max-two-arrays", sp.Max(x, y), "np.maximum(x, y)", "torch.maximum(x, y)"),
    ("min-scalar", sp.Min(x, eps), "np.minimum(x, eps)", "torch.clamp(x, max=eps)"),
    ("heaviside", sp.Heaviside(x, 0), "(x > 0).astype(dtype)", "(x > 0).to(dtype)"),
    ("heaviside-1", sp.Heaviside(x, 1), "(x >= 0).astype(dtype)", "(x >= 0).to(dtype)"),
    ("sigmoid-as-exp", 1 / (1 + sp.exp(-x)), "1/(1 + np.exp(-x))", "1/(1 + torch.exp(-x))"),
    ("sigmoid-node", Sigmoid(x), "scipy.special.expit(x)", "torch.sigmoid(x)"),
    ("silu", x * Sigmoid(x), "x*scipy.special.expit(x)", "x*torch.sigmoid(x)"),
    (
        "sigmoid-of-sum",
        Sigmoid(x + y) * (1 - Sigmoid(x + y)),
        "(1 - scipy.special.expit(x + y))*scipy.special.expit(x + y)",
        "(1 - torch.sigmoid(x + y))*torch.sigmoid(x + y)",
    ),
    ("sigmoid-of-negation", Sigmoid(-x), "scipy.special.expit(-x)", "torch.sigmoid(-x)"),
    # Φ: one library call (NumPy: the float32 erf's blocks do the scaling and the affine map);
    # torch: the formula (torch.special.ndtr is slower than erf here)
    ("normal-cdf", NormalCDF(x), "_special.ndtr(x)", "torch.erf(math.sqrt(2)/2*x)/2 + (1/2)"),
    (
        "scalar-normal-cdf",
        NormalCDF(eps),
        "math.erf(math.sqrt(2)*eps/2)/2 + (1/2)",
        "math.erf(math.sqrt(2)*eps/2)/2 + (1/2)",
    ),
    # array-language nodes
    ("matmul", MatMul(a, y), "(a @ y)", "(a @ y)"),
    (
        "matmul-transpose-scaled",
        MatMul(q, T(k)) / sp.sqrt(d_k),
        "(q @ k.mT)/math.sqrt(d_k)",
        "(q @ k.mT)/math.sqrt(d_k)",
    ),
    ("matmul-of-sum", MatMul(a + b, T(c)), "((a + b) @ c.mT)", "((a + b) @ c.mT)"),
    ("transpose", T(x), "x.mT", "x.mT"),
    ("transpose-of-sum", T(a + b), "(a + b).mT", "(a + b).mT"),
    ("transpose-row-vector", T(g), "gamma[:, None]", "gamma[:, None]"),
    # the sums: calls of the support module (codegen/support/: NumPy's gemv with ones, BLAS)
    ("rowsum", RowSum(x), "_support.rowsum(x)", "_support.rowsum(x)"),
    ("rowsum-of-expression", RowSum(x * y), "_support.rowsum(x*y)", "_support.rowsum(x*y)"),
    ("rowmax", RowMax(x), "np.max(x, axis=-1, keepdims=True)", "torch.amax(x, dim=-1, keepdim=True)"),
    ("rowmean", RowMean(x), "_support.rowmean(x)", "_support.rowmean(x)"),
    ("shift", x - RowMax(x), "x - np.max(x, axis=-1, keepdims=True)", "x - torch.amax(x, dim=-1, keepdim=True)"),
    # each max beside the term it cancels, the pairs first and each in parentheses: the large values
    # cancel before anything small is added (KL between two softmaxes, a log-softmin)
    (
        "shifts-paired",
        x - y - RowMax(x) + RowMax(y),
        "x - np.max(x, axis=-1, keepdims=True) + (np.max(y, axis=-1, keepdims=True) - y)",
        "x - torch.amax(x, dim=-1, keepdim=True) + (torch.amax(y, dim=-1, keepdim=True) - y)",
    ),
    (
        "shift-before-the-small-term",
        -x + sp.log(y) - RowMax(-x),
        "-x - np.max(-x, axis=-1, keepdims=True) + np.log(y)",
        "-x - torch.amax(-x, dim=-1, keepdim=True) + torch.log(y)",
    ),
    ("colsum", ColSum(x), "_support.colsum(x)", "_support.colsum(x)"),
    ("colsum-of-product", ColSum(x * y), "_support.colsum(x*y)", "_support.colsum(x*y)"),
    ("contract", Contract(x, y), "_support.contract(x, y)", "_support.contract(x, y)"),
    (
        "causal-mask",
        CausalMask(s_),
        "np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -math.inf)",
        "s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, device=s.device).triu(1), -math.inf)",
    ),
    ("gather", Gather(E, ids), "E[ids]", "E[ids]"),
    (
        "one-hot",
        OneHot(ids, V),
        "(ids[..., None] == np.arange(V)).astype(dtype)",
        "torch.nn.functional.one_hot(ids.long(), V).to(dtype)",
    ),
    (
        "take",
        Take(x, ids),
        "np.take_along_axis(x, ids[..., None], axis=-1)",
        "torch.take_along_dim(x, ids[..., None].long(), dim=-1)",
    ),
    ("integer-as-value", col * ids, "ids[..., None].astype(dtype)*mean", "ids[..., None].to(dtype)*mean"),
    ("row-vector-broadcast", g * x + g, "gamma*x + gamma", "gamma*x + gamma"),
    # an array power beside another array factor is spread: x·σ(x)·x never forms x² (∞ from
    # |x| > 1.8e19 in float32) next to σ(x) = 0, which was ∞·0 = NaN where x²σ(x) is 0
    ("power-spread", x**2 * Sigmoid(x), "x*scipy.special.expit(x)*x", "x*torch.sigmoid(x)*x"),
    ("cube-spread", x**3 * sp.exp(y), "x*np.exp(y)*x*x", "x*torch.exp(y)*x*x"),
    ("lone-power", 3 * x**2, "3*x*x", "3*x*x"),
]


@pytest.mark.parametrize("expr, numpy_text, torch_text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_print_rule(expr, numpy_text, torch_text):
    assert NumpyPrinter().doprint(expr) == numpy_text
    assert TorchPrinter().doprint(expr) == torch_text


# statement mode: repeated arguments are computed once, into temporaries named after what they
# hold (or after the target); a support helper takes any argument (computed once by the call)
ASSIGN_CASES = [
    ("square-hoisted", sp.Pow(a * b, 2, evaluate=False), ["a_b = a*b", "z = a_b*a_b"], ["a_b = a*b", "z = a_b*a_b"]),
    ("colsum-of-expression", ColSum(x * y), ["z = _support.colsum(x*y)"], ["z = _support.colsum(x*y)"]),
    (
        "softmax-shares-exp",
        sp.exp(x - RowMax(x)) / RowSum(sp.exp(x - RowMax(x))),
        ["z_exp = np.exp(x - np.max(x, axis=-1, keepdims=True))", "z = z_exp/_support.rowsum(z_exp)"],
        ["z_exp = torch.exp(x - torch.amax(x, dim=-1, keepdim=True))", "z = z_exp/_support.rowsum(z_exp)"],
    ),
    (
        "shared-reciprocal",
        x * (1 - 1 / (1 + sp.exp(-x))) / (1 + sp.exp(-x)),
        ["z_recip = 1/(1 + np.exp(-x))", "z = x*(1 - z_recip)*z_recip"],
        ["z_recip = 1/(1 + torch.exp(-x))", "z = x*(1 - z_recip)*z_recip"],
    ),
    (
        "causal-of-expression",
        CausalMask(MatMul(q, T(q))),
        ["z_mm = (q @ q.mT)", "z = np.where(np.tri(z_mm.shape[-2], z_mm.shape[-1], dtype=bool), z_mm, -math.inf)"],
        [
            "z_mm = (q @ q.mT)",
            "z = z_mm.masked_fill(torch.ones(z_mm.shape[-2], z_mm.shape[-1], "
            "dtype=torch.bool, device=z_mm.device).triu(1), -math.inf)",
        ],
    ),
    (
        "contract-one-hot",
        Contract(OneHot(ids, V), x),
        ["z = _support.contract((ids[..., None] == np.arange(V)).astype(dtype), x)"],
        ["z = _support.contract(torch.nn.functional.one_hot(ids.long(), V).to(dtype), x)"],
    ),
    ("no-temporary-needed", x * y, ["z = x*y"], ["z = x*y"]),
    # a computed g in 1/g³ as (1/g)³: g³ overflows (g ~ 1e20 in float32) where the quotient is 0
    (
        "inverse-cube-of-hypot",
        y / Hypot(x, 1) ** 3,
        ["z_recip = 1/np.hypot(x, 1)", "z = y*z_recip*z_recip*z_recip"],
        ["z_recip = 1/_support.hypot(x, 1)", "z = y*z_recip*z_recip*z_recip"],
    ),
    (
        "inverse-square-of-sum",
        y * (x + Hypot(x, 1)) ** -2,
        ["z_recip = 1/(x + np.hypot(x, 1))", "z = y*z_recip*z_recip"],
        ["z_recip = 1/(x + _support.hypot(x, 1))", "z = y*z_recip*z_recip"],
    ),
    # 1/g^k with one 1/g after each array factor: x(x + 3) ~ g² is never formed whole
    (
        "reciprocal-after-each-factor",
        4 * x * (x + 3) / Hypot(x, 1) ** 4,
        ["z_recip = 1/np.hypot(x, 1)", "z = 4*x*z_recip*(x + 3)*z_recip*z_recip*z_recip"],
        ["z_recip = 1/_support.hypot(x, 1)", "z = 4*x*z_recip*(x + 3)*z_recip*z_recip*z_recip"],
    ),
    # u²/g as u·(u/g): x² overflows (|x| > 1.8e19 in float32) where x²/(hypot(x, 1) + 1) ~ |x| is finite
    (
        "square-over-computed",
        x**2 / (Hypot(x, 1) + 1),
        ["z = x*(x/(np.hypot(x, 1) + 1))"],
        ["z = x*(x/(_support.hypot(x, 1) + 1))"],
    ),
    (
        "square-over-computed-among-factors",
        3 * y * x**2 / (Hypot(x, 1) + 1),
        ["z = 3*x*(x/(np.hypot(x, 1) + 1))*y"],
        ["z = 3*x*(x/(_support.hypot(x, 1) + 1))*y"],
    ),
    # u²/g² as (u/g)²: Geman–McClure's 2x²/(x² + 4) printed 2(x/hypot(x, 2))²
    (
        "square-over-square",
        2 * x**2 / Hypot(x, 2) ** 2,
        ["z_prod = x/np.hypot(x, 2)", "z = 2*z_prod*z_prod"],
        ["z_prod = x/_support.hypot(x, 2)", "z = 2*z_prod*z_prod"],
    ),
    (
        "cube-over-cube",
        x**3 / y**3,
        ["z_prod = x/y", "z = z_prod*z_prod*z_prod"],
        ["z_prod = x/y", "z = z_prod*z_prod*z_prod"],
    ),
    # one factor over one: nothing to pair (u/g² is printed u·(1/g)·(1/g), left to right)
    (
        "square-over-two-factors",
        x**2 / (y * Hypot(x, 1)),
        ["z = x*x/(y*np.hypot(x, 1))"],
        ["z = x*x/(y*_support.hypot(x, 1))"],
    ),
    (
        "silu-grad-shares-sigmoid",
        Sigmoid(x) * (1 + x * (1 - Sigmoid(x))),
        ["sigmoid_x = scipy.special.expit(x)", "z = (x*(1 - sigmoid_x) + 1)*sigmoid_x"],
        ["sigmoid_x = torch.sigmoid(x)", "z = (x*(1 - sigmoid_x) + 1)*sigmoid_x"],
    ),
]


@pytest.mark.parametrize(
    "expr, numpy_lines, torch_lines", [c[1:] for c in ASSIGN_CASES], ids=[c[0] for c in ASSIGN_CASES]
)
def test_print_assign(expr, numpy_lines, torch_lines):
    assert Lowering(NumpyPrinter()).assign("z", expr) == numpy_lines
    assert Lowering(TorchPrinter()).assign("z", expr) == torch_lines


def test_temporaries_are_unique_within_one_function():
    p = Lowering(NumpyPrinter(), taken={"x"})
    first = p.assign("u", sp.Pow(a * b, 2, evaluate=False))
    second = p.assign("w", sp.Pow(a * b, 2, evaluate=False))
    third = p.assign("v", sp.Pow(x * y, 2, evaluate=False) + sp.Pow(x * y, 3, evaluate=False))
    assert first[0].startswith("a_b = ") and second[0].startswith("a_b_2 = ")
    assert third[0].startswith("x_y = ") and p.defined == ["x_y"]
    # a name the function uses is never a temporary's
    assert Lowering(NumpyPrinter(), taken={"a_b"}).assign("u", sp.Pow(a * b, 2, evaluate=False))[0] == "a_b_2 = a*b"


def test_symbol_renaming():
    assert NumpyPrinter({"names": {eps: "epsilon"}}).doprint(x + eps) == "x + epsilon"


def test_modules_and_dtype_are_recorded():
    p = NumpyPrinter()
    p.doprint(sp.erf(x) / sp.sqrt(d_k) + sp.Heaviside(x, 0))
    assert p.modules == {"_special", "math"} and p.uses_dtype
    t = TorchPrinter()
    t.doprint(sp.exp(x))
    assert t.modules == {"torch"} and not t.uses_dtype
    p = NumpyPrinter()
    p.doprint(x * Sigmoid(x))
    assert p.modules == {"scipy.special"}


# strictness: anything unknown is an error that names the node
i = sp.Symbol("i", integer=True)
BAD = [
    ("piecewise", sp.Piecewise((x, x > 0), (0, True)), "Piecewise"),
    ("undefined-function", sp.Function("f")(x), "unsupported node f"),
    ("sum", sp.Sum(sp.IndexedBase("A")[i], (i, 0, 3)), "Sum"),
    ("indexed", sp.IndexedBase("A")[i] * x, "Indexed"),
    ("gamma-function", sp.gamma(x), "gamma"),
    ("dummy", sp.Dummy("u") * x, "dummy"),
    ("keyword-name", sp.Symbol("lambda") * x, "not a valid Python identifier"),
    ("reserved-name", sp.Symbol("np") * x, "clashes"),
    ("temporary-name", sp.Symbol("_t0") * x, "clashes"),
    ("heaviside-half", sp.Heaviside(x), r"Heaviside needs H\(0\) = 0 or 1"),
    ("scalar-sign", sp.sign(d_k - eps), "no scalar form for sign"),
    ("scalar-sigmoid", Sigmoid(eps) * x, "no scalar form for Sigmoid"),
    ("transpose-column", T(col), "T of a column vector"),
    ("ids-not-array", Gather(E, Array("e", (r, 1))), "ids must be an integer Array"),
    ("nan", sp.nan * x, "NaN"),
    ("matrix-symbol", sp.MatrixSymbol("M", 2, 2), "MatrixSymbol"),
    ("lambda", sp.Lambda(i, i + 1), "Lambda"),
    ("derivative", sp.Derivative(sp.Function("f")(i), i), "Derivative"),
]


@pytest.mark.parametrize("expr, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("printer", [NumpyPrinter, TorchPrinter], ids=["numpy", "torch"])
def test_unsupported_raises(printer, expr, message):
    with pytest.raises(PrinterError, match=message):
        printer().doprint(expr)


# the printed scalars are Python numbers: float32 stays float32 (no NumPy float64 scalars)
FLOAT32_EXPRS = [
    x / sp.sqrt(d_k),
    sp.sqrt(2 / sp.pi) * x,
    sp.Rational(44715, 10**6) * x**3,
    x + sp.Rational(1, 3),
    sp.Max(0, x),
    sp.Heaviside(x, 0) * x,
    sp.erf(x) + sp.pi,
    CausalMask(s_),
    x / (eps + RowMean(x * x)),
    sp.exp(-x) * sp.E,
    x * Sigmoid(x) * (1 + x * (1 - Sigmoid(x))),
]


@pytest.mark.parametrize("expr", FLOAT32_EXPRS, ids=[str(t) for t in range(len(FLOAT32_EXPRS))])
def test_printed_code_keeps_float32(expr):
    import scipy.special

    from generated.numpy import _special

    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((2, 3, 3)).astype(np.float32)}
    arrays["s"] = arrays["x"]
    scalars = {"d_k": 4, "eps": 1e-5, "math": math, "scipy": scipy, "_special": _special}
    np_env = {"np": np, "dtype": np.float32, "_support": np_support, **scalars, **arrays}
    assert eval(NumpyPrinter().doprint(expr), np_env).dtype == np.float32
    t_env = {
        "torch": torch,
        "dtype": torch.float32,
        "_support": torch_support,
        **scalars,
        **{k: torch.tensor(v) for k, v in arrays.items()},
    }
    assert eval(TorchPrinter().doprint(expr), t_env).dtype == torch.float32


# ------------------------------------------------------------------------------ index grids
# A table's entry formula is printed over its row and column indices, plain integer Symbols
# that the `arrays` setting declares array-valued (grids of 0..rows-1 and 0..cols-1).
row_i, col_i = sp.Symbol("row", integer=True), sp.Symbol("col", integer=True)
GRID = {"arrays": frozenset({row_i, col_i})}
base = sp.Symbol("base", positive=True)
n_d = size("d")

GRID_CASES = [
    ("delta", sp.KroneckerDelta(col_i, row_i + 1), "(col == row + 1).astype(dtype)", "(col == row + 1).to(dtype)"),
    ("parity", (-1) ** col_i, "(1 - 2*(col % 2))", "(1 - 2*(col % 2))"),
    ("parity-of-sum", (-1) ** (row_i + col_i), "(1 - 2*((col + row) % 2))", "(1 - 2*((col + row) % 2))"),
    ("even-indicator", (1 + (-1) ** col_i) / 2, "(1 - 2*(col % 2))/2 + (1/2)", "(1 - 2*(col % 2))/2 + (1/2)"),
    ("floor-half", sp.floor(col_i / 2), "(col // 2)", "(col // 2)"),
    ("floor-of-sum", sp.floor((col_i + 1) / 3), "((col + 1) // 3)", "((col + 1) // 3)"),
    ("mod", sp.Mod(col_i, 2), "(col % 2)", "(col % 2)"),
    ("mod-of-sum", sp.Mod(row_i + col_i, 3), "((col + row) % 3)", "((col + row) % 3)"),
    (
        "grid-is-an-array",
        sp.cos(row_i * base ** (-col_i / n_d)),
        "np.cos(base**(-col/d)*row)",
        "torch.cos(base**(-col/d)*row)",
    ),
    ("scalar-parity-stays-python", (-1) ** n_d * row_i, "(-1)**d*row", "(-1)**d*row"),
]


@pytest.mark.parametrize("expr, numpy_text, torch_text", [c[1:] for c in GRID_CASES], ids=[c[0] for c in GRID_CASES])
def test_grid_print_rule(expr, numpy_text, torch_text):
    assert NumpyPrinter(GRID).doprint(expr) == numpy_text
    assert TorchPrinter(GRID).doprint(expr) == torch_text


def test_grid_and_table_array():
    from codegen.contexts.table import table_array_lines

    p, t = NumpyPrinter(GRID), TorchPrinter(GRID)
    assert p.grid(n_d, 0) == "np.arange(d, dtype=np.float64)[:, None]"
    assert p.grid(n_d, 1) == "np.arange(d, dtype=np.float64)[None, :]"
    assert t.grid(V, 1) == "torch.arange(V, dtype=torch.float64, device=device)[None, :]"
    entry = sp.KroneckerDelta(col_i, row_i + 1) * (1 + (-1) ** row_i) / 2
    assert table_array_lines(Lowering(p), "rot", entry, (n_d, n_d)) == [
        "rot = ((1 - 2*(row % 2)) + 1)*(col == row + 1).astype(dtype)/2",
        "rot = np.broadcast_to(rot, (d, d)).astype(dtype)",
    ]
    assert table_array_lines(Lowering(t), "rot", entry, (n_d, n_d)) == [
        "rot = ((1 - 2*(row % 2)) + 1)*(col == row + 1).to(dtype)/2",
        "rot = rot.expand(d, d).to(dtype).contiguous()",
    ]
    assert table_array_lines(Lowering(p), "c", sp.Rational(1, 2), (V, n_d)) == [
        "c = np.full((V, d), (1/2), dtype=dtype)"
    ]
    assert table_array_lines(Lowering(t), "c", sp.Integer(3), (V, n_d)) == [
        "c = torch.full((V, d), 3, dtype=dtype, device=device)"
    ]
    assert p.modules == {"np"} and t.modules == {"torch"} and p.uses_dtype and t.uses_dtype


def test_grid_printed_code_runs():
    """The printed grid code, evaluated: float64 grids, exact integer arithmetic, and the
    requested dtype at the end."""
    from codegen.contexts.table import table_array_lines

    entry = sp.KroneckerDelta(col_i, row_i + 1) * (-1) ** row_i + sp.floor(col_i / 2) + sp.Mod(row_i, 3)
    want = np.array([[(c == r + 1) * (-1) ** r + c // 2 + r % 3 for c in range(5)] for r in range(4)])
    for printer, env in (
        (NumpyPrinter(GRID), {"np": np, "dtype": np.float32}),
        (TorchPrinter(GRID), {"torch": torch, "dtype": torch.float32, "device": None}),
    ):
        env["row"] = eval(printer.grid(4, 0), env)
        env["col"] = eval(printer.grid(5, 1), env)
        for line in table_array_lines(Lowering(printer), "z", entry, (4, 5)):
            exec(line, env)
        z = env["z"]
        z = z.numpy() if isinstance(z, torch.Tensor) else z
        assert z.dtype == np.float32 and z.shape == (4, 5)
        np.testing.assert_array_equal(z, want)


GRID_BAD = [
    ("parity-of-array", (-1) ** x, "needs an integer-valued exponent"),
    ("parity-of-half", (-1) ** (col_i / 2), "needs an integer-valued exponent"),
    ("delta-of-scalars", sp.KroneckerDelta(d_k, n), "KroneckerDelta of scalars"),
    ("floor-of-array", sp.floor(x), "floor needs"),
    ("floor-by-symbol", sp.floor(col_i / n_d), "floor needs"),
    ("mod-of-array", sp.Mod(x, 2), "Mod needs integer-valued"),
    ("mod-by-symbol", sp.Mod(col_i, n_d), "Mod needs a positive integer modulus"),
]


@pytest.mark.parametrize("expr, message", [b[1:] for b in GRID_BAD], ids=[b[0] for b in GRID_BAD])
@pytest.mark.parametrize("printer", [NumpyPrinter, TorchPrinter], ids=["numpy", "torch"])
def test_grid_unsupported_raises(printer, expr, message):
    with pytest.raises(PrinterError, match=message):
        printer(GRID).doprint(expr)


# ------------------------------------------------------------------------------ in-place statements
def _full(e):
    """Stored shape for the in-place rule: every array here is batched; scalars have none."""
    from derivations.language.arrays import is_scalar, shape_of

    return None if is_scalar(e) else shape_of(e)


INPLACE = [
    # a value taken over as the target and read again after the target changed: the later read
    # is the value recomputed, not the target ((x − y)·((x − y)/g), not ((x − y)/g)²)
    (
        "taken-over-read-again",
        (x - y) ** 2 / (Hypot(x - y, 1) + 1),
        ["out = x - y", "out /= np.hypot(out, 1) + 1", "out_sum = x - y", "out *= out_sum"],
    ),
    # GELU's backward: one allocation, the scalar factors folded into one multiply
    (
        "gelu-backward",
        y * (c + sp.sqrt(2) * x * sp.exp(-(x**2) / 2) / (2 * sp.sqrt(sp.pi))),
        [
            "out = -x/2",  # −x²/2 as (−x/2)·x: x² is never formed
            "out *= x",
            "np.exp(out, out=out)",
            "out *= math.sqrt(2)/(2*math.sqrt(math.pi))",
            "out *= x",
            "out += c",
            "out *= y",
        ],
    ),
    (
        "layernorm-backward",
        col * (a - b * RowMean(a * b) - RowMean(a)),
        ["out = b*_support.rowmean(a*b)", "np.subtract(a, out, out=out)", "out -= _support.rowmean(a)", "out *= mean"],
    ),
    # −a − b: nothing to subtract from, a negated in place
    (
        "negated-first",
        col * (-(a * b) - RowMean(a)),
        ["out = a*b", "np.negative(out, out=out)", "out -= _support.rowmean(a)", "out *= mean"],
    ),
    ("scaled-scores", MatMul(q, T(k)) / sp.sqrt(d_k), ["out = (q @ k.mT)", "out /= math.sqrt(d_k)"]),
    ("softmax-backward", y * (x - RowSum(x * y)), ["out = x - _support.rowsum(x*y)", "out *= y"]),
    # a temporary that is read again is never the in-place start (SiLU's backward)
    (
        "read-twice",
        x * (y * (1 - Sigmoid(y)) + 1) * Sigmoid(y),
        [
            "sigmoid_y = scipy.special.expit(y)",
            "out = 1 - sigmoid_y",
            "out *= y",
            "out += 1",
            "out *= sigmoid_y",  # the gate σ ∈ [0, 1] before the other factors (`gates_first`)
            "out *= x",
        ],
    ),
    # a temporary read twice is itself computed in place: one new array for exp(x − max x); the
    # value takes it over, so it is computed as `out` from the start (no `out = <temporary>`)
    (
        "softmax-temporary",
        sp.exp(x - RowMax(x)) / RowSum(sp.exp(x - RowMax(x))),
        ["out = x - np.max(x, axis=-1, keepdims=True)", "np.exp(out, out=out)", "out /= _support.rowsum(out)"],
    ),
    # a temporary that two in-place operations would read after the first write: not taken over
    (
        "temporary-read-after-write",
        2 * sp.exp(x) * (x + RowSum(sp.exp(x))) / RowSum(sp.exp(x)),
        [
            "exp_x = np.exp(x)",
            "out_rowsum = _support.rowsum(exp_x)",
            "out = x + out_rowsum",
            "out *= 2",
            "out *= exp_x",
            "out /= out_rowsum",
        ],
    ),
    # a / (computed denominator): the denominator in place (√ too), then one divide into it (AdamW)
    (
        "divide-into-denominator",
        x / (d_k * (1 + sp.sqrt(sp.exp(a) + 1))),
        [
            "out = np.exp(a)",
            "out += 1",
            "np.sqrt(out, out=out)",
            "out += 1",
            "out *= d_k",
            "np.divide(x, out, out=out)",
        ],
    ),
    # nothing computed has the full shape: one plain statement
    ("plain", x + RowSum(y), ["out = x + _support.rowsum(y)"]),
    # a power spread: σ(x) in place, then times x twice (never x² next to σ(x) = 0)
    ("power-spread", x**2 * Sigmoid(x), ["out = scipy.special.expit(x)", "out *= x", "out *= x"]),
    # a computed factor spread (a + b)²·e^{y}: the start is one copy, the other still multiplies
    ("computed-power-spread", (a + b) ** 2 * sp.exp(y), ["out = a + b", "out *= np.exp(y)", "out *= a + b"]),
    # a scale below 1 before the square: (c·u)·u, never u² = ∞ where c·u² is in range; the
    # base named once (`scale_first`)
    ("scale-first", (a - b) ** 2 / 2, ["out_sum = a - b", "out = out_sum/2", "out *= out_sum"]),
    ("scale-first-cube", sp.Rational(1, 1000) * x**3, ["out = 0.001*x", "out *= x", "out *= x"]),
    # a scale above 1 first too: c·u² is never 0 from u² = 0 (u ~ 1e-20 in float32)
    ("scale-first-large", 3 * (a - b) ** 2, ["out_sum = a - b", "out = 3*out_sum", "out *= out_sum"]),
    # an option's value unknown: first all the same (a z-loss's α·(log Z)²)
    ("scale-first-option", d_k * (a - b) ** 2, ["out_sum = a - b", "out = d_k*out_sum", "out *= out_sum"]),
]


# PyTorch folds a run t *= c, t *= a, t += b of the plan into one multiply-add
TORCH_FUSED = {
    "gelu-backward": [
        "out = -x/2",
        "out *= x",
        "out.exp_()",
        "torch.addcmul(c, out, x, value=math.sqrt(2)/(2*math.sqrt(math.pi)), out=out)",
        "out *= y",
    ],
}


@pytest.mark.parametrize("name, expr, lines", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace_statements(name, expr, lines):
    assert Lowering(NumpyPrinter()).assign("out", expr, full=_full) == lines
    torch_lines = Lowering(TorchPrinter()).assign("out", expr, full=_full)
    if name in TORCH_FUSED:
        assert torch_lines == TORCH_FUSED[name]
        return
    # the same in-place program in torch's spelling
    import re

    in_place = {"numpy": r"[-+*/]= |out=", "torch": r"[-+*/]= |\w_\(\)$|out="}
    assert len([t for t in lines if re.search(in_place["numpy"], t)]) == len(
        [t for t in torch_lines if re.search(in_place["torch"], t)]
    )
    assert torch_lines[-1].startswith("out") or torch_lines[-1].endswith("out=out)")


@pytest.mark.parametrize(
    "updates, fused",
    [
        # t *= c; t *= a; t += b  →  t = b + c·t·a
        ([("=", "x"), ("*=", 3), ("*=", "a"), ("+=", "b")], [("=", "x"), ("muladd", (3, "a", "b"))]),
        # t *= a; t += b  →  t = b + t·a;  t *= c; t += b  →  t = b + c·t
        ([("=", "x"), ("*=", "a"), ("+=", "b")], [("=", "x"), ("muladd", (1, "a", "b"))]),
        ([("=", "x"), ("*=", 2), ("+=", "b")], [("=", "x"), ("muladd", (2, None, "b"))]),
        # a negation before the += (b − t·a, which cancels) keeps the plan's order
        ([("=", "x"), ("*=", "a"), ("call", "negative"), ("+=", "b")], None),
        # a run not ended by += stays; a scalar b stays (no tensor to add into); t −= b stays
        ([("=", "x"), ("*=", "a"), ("*=", "b")], None),
        ([("=", "x"), ("*=", "a"), ("+=", 1)], None),
        ([("=", "x"), ("*=", "a"), ("-=", "b")], None),
        # b already a scaled product (printed as one add_(b, alpha)): left as it is
        ([("=", "x"), ("*=", "a"), ("+=", sp.Rational(1, 2) * sp.Symbol("b"))], None),
        # a division by a scalar is not folded into c (t·(1/d) rounds apart from t/d)
        ([("=", "x"), ("/=", 3), ("+=", "b")], None),
    ],
)
def test_fuse_multiply_add_folds_exactly_the_runs_it_names(updates, fused):
    from codegen.lowering.inplace import Update, fuse_multiply_add

    def upd(pairs):
        def value(op, v):
            if op == "call":
                return v
            if isinstance(v, tuple):
                return tuple(sp.Symbol(x) if isinstance(x, str) else sp.sympify(x) for x in v)
            return sp.Symbol(v) if isinstance(v, str) else sp.sympify(v)

        return [Update(op, value(op, v)) for op, v in pairs]

    scalar = lambda e: not isinstance(e, sp.Symbol) or e.name not in ("x", "a", "b")  # noqa: E731
    got = fuse_multiply_add(upd(updates), scalar)
    assert got == upd(fused if fused is not None else updates)


def test_inplace_values_match_expression():
    """Every in-place program computes what the one-line expression computes."""
    import scipy.special

    rng = np.random.default_rng(0)
    env = {k: rng.standard_normal((2, 3, 4)) for k in ("x", "y", "a", "b", "c")}
    env.update(
        q=rng.standard_normal((2, 3, 5)),
        k=rng.standard_normal((2, 4, 5)),
        d_k=5,
        mean=rng.standard_normal((2, 3, 1)),
        np=np,
        math=math,
        scipy=scipy,
    )
    before = {k: v.copy() for k, v in env.items() if isinstance(v, np.ndarray)}
    tenv = {k: (torch.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in env.items()}
    env["_support"], tenv["torch"], tenv["_support"] = np_support, torch, torch_support
    backends = [
        (
            NumpyPrinter,
            env,
            np.asarray,
            lambda got, want, name: np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13, err_msg=name),
        ),
        (
            TorchPrinter,
            tenv,
            lambda t: t.numpy(),
            lambda got, want, name: torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13, msg=name),
        ),
    ]
    for printer, scope0, as_numpy, assert_close in backends:
        for name, expr, _ in INPLACE:
            ref = eval(printer().doprint(expr), dict(scope0))
            scope = dict(scope0)
            exec("\n".join(Lowering(printer()).assign("out", expr, full=_full)), scope)
            assert_close(scope["out"], ref, name)
            for k in ("x", "y", "a", "b", "c", "q", "k", "mean"):
                assert np.array_equal(as_numpy(scope[k]), before[k]), (printer.__name__, name, k)  # inputs untouched


# ------------------------------------------------------------------ weight matrices, causal mask
W = Array("weight", (n, n))


@pytest.mark.parametrize(
    "expr, numpy_text",
    [
        # a batched operand times a weight matrix (or its transpose): one 2-D product over all rows
        (MatMul(x, T(W)), "_support.matmul_rows(x, weight.mT)"),
        (MatMul(x, W), "_support.matmul_rows(x, weight)"),
        # two batched operands (attention's scores), or a matrix on the left: as written
        (MatMul(q, T(k)), "(q @ k.mT)"),
        (MatMul(W, T(x)), "(weight @ x.mT)"),
    ],
)
def test_matmul_folds_leading_axes_onto_weight_matrices(expr, numpy_text):
    assert NumpyPrinter({"matrices": frozenset({W})}).doprint(expr) == numpy_text
    assert (
        NumpyPrinter().doprint(expr) == f"({NumpyPrinter().doprint(expr.args[0])} @ "
        f"{NumpyPrinter().doprint(expr.args[1])})"
    )  # not a known matrix: as written
    assert TorchPrinter({"matrices": frozenset({W})}).doprint(expr).startswith("(")  # torch.matmul folds itself


def test_folded_matmul_values():
    """The folded product equals the batched one, for contiguous and strided operands."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 4))
    scope = {"weight": w, "math": math, "_support": np_support}
    for xv in (
        rng.standard_normal((2, 3, 5, 4)),
        rng.standard_normal((2, 5, 3, 4)).transpose(0, 2, 1, 3),
        rng.standard_normal((5, 4)),
        np.zeros((2, 0, 4)),
    ):
        scope["x"] = xv
        got = eval(NumpyPrinter({"matrices": frozenset({W})}).doprint(MatMul(x, T(W))), dict(scope))
        np.testing.assert_allclose(got, xv @ w.T, rtol=1e-14, atol=1e-14)
        assert got.shape == xv.shape[:-1] + (4,)


k_sq = Array("k", (r, d_k))


def _causal_body(assigns):
    from codegen.lowering import lower_body
    from derivations.language.arrays import Assign

    lines = lower_body(
        [Assign(t, e) for t, e in assigns], NumpyPrinter(), {a: True for a in (s_, q, k_sq, Array("v", (r, r)))}
    )
    return [ln for ln in lines if not ln.lstrip().startswith("# ")]  # the code, not the formulas


def test_cached_causal_mask():
    """generated/numpy/_special.causal_mask: B_ij = 0 for j ≤ i, −∞ for j > i at every size and
    dtype asked for, read-only, and built once per dtype (smaller masks are views of it)."""
    import math

    import numpy as np

    from generated.numpy import _special

    _special._CAUSAL_MASKS.clear()
    for m, n, dtype in [
        (4, 4, np.float32),
        (1, 1, np.float32),
        (9, 9, np.float64),
        (3, 5, np.float64),
        (16, 16, np.float32),
        (6, 6, np.float32),
    ]:
        b = _special.causal_mask(m, n, dtype)
        i, j = np.indices((m, n))
        expected = np.where(j > i, -math.inf, 0.0).astype(dtype)
        assert b.dtype == dtype and b.shape == (m, n)
        np.testing.assert_array_equal(b, expected)
        assert not b.flags.writeable
    assert sorted(a.shape for a in _special._CAUSAL_MASKS.values()) == [(9, 9), (16, 16)]
    assert _special.causal_mask(6, 6, np.float32).base is _special._CAUSAL_MASKS[np.dtype(np.float32)]


def test_causal_mask_in_place_only_on_a_fresh_array():
    # S computed just above: masked in place (no second m×n array)
    body = _causal_body([(s_, MatMul(q, T(k_sq))), (s_, CausalMask(s_))])
    assert body[-1].startswith("s += _special.causal_mask(s.shape[-2], s.shape[-1], s.dtype)")
    # S an input: never written into
    assert all("+=" not in line for line in _causal_body([(s_, CausalMask(s_))]))
    # a view of S taken before the mask would see the write: not in place
    v_ = Array("v", (r, r))
    body = _causal_body([(s_, MatMul(q, T(k_sq))), (v_, T(s_)), (s_, CausalMask(s_))])
    assert "np.where(" in body[-1]

    rng = np.random.default_rng(2)
    sv = rng.standard_normal((2, 3, 3))
    from generated.numpy import _special

    scope = {"np": np, "math": math, "_special": _special, "q": sv, "k": np.eye(3)}
    exec("\n".join(_causal_body([(s_, MatMul(q, T(k_sq))), (s_, CausalMask(s_))])), scope)
    want = np.where(np.tri(3, 3, dtype=bool), sv, -np.inf)
    assert np.array_equal(scope["s"], want) and np.array_equal(scope["q"], sv)


def _keep_body(assigns, keep):
    from codegen.lowering import lower_body
    from derivations.language.arrays import Assign

    lines = lower_body(
        [Assign(t, e) for t, e in assigns],
        NumpyPrinter(),
        {a: True for a in (s_, q, k_sq, Array("z", (r, r)))},
        keep=set(keep),
    )
    return [ln for ln in lines if not ln.lstrip().startswith("# ")]  # the code, not the formulas


def test_dead_array_taken_over_only_when_safe():
    """An array computed above and read for the last time may become the result's array, when
    every read of it is in the one in-place operation that starts from it."""
    z = Array("z", (r, r))
    scores = (s_, MatMul(q, T(k_sq)))
    shifted = _keep_body([scores, (z, sp.exp(s_ - RowMax(s_)))], keep=[z])
    taken = "  # in place: s's array, dead after this statement"
    assert shifted[1:4] == [
        "z = s" + taken,
        "z -= np.max(s, axis=-1, keepdims=True)",
        "np.exp(z, out=z)  # (..., r, r)",
    ]
    kept = _keep_body([scores, (z, sp.exp(s_ - RowMax(s_)))], keep=[z, s_])
    assert kept[1] == "z = s - np.max(s, axis=-1, keepdims=True)"  # s is saved: untouched
    row = Array("m", (r, 1))  # m·s: the dead s is taken over, whichever factor leads
    assert _keep_body([scores, (z, row * s_)], keep=[z])[1:3] == ["z = s" + taken, "z *= m  # (..., r, r)"]
    read_after = _keep_body([scores, (z, (s_ - RowMax(s_)) * s_)], keep=[z])
    assert read_after[1:3] == ["z = s - np.max(s, axis=-1, keepdims=True)", "z *= s  # (..., r, r)"]

    rng = np.random.default_rng(3)
    qv, kv = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    sv = qv @ kv.swapaxes(-1, -2)
    for body, want in (
        (shifted, np.exp(sv - sv.max(-1, keepdims=True))),
        (read_after, (sv - sv.max(-1, keepdims=True)) * sv),
    ):
        scope = {"np": np, "math": math, "q": qv.copy(), "k": kv.copy()}
        exec("\n".join(body), scope)
        np.testing.assert_allclose(scope["z"], want, rtol=1e-13)
        assert np.array_equal(scope["q"], qv) and np.array_equal(scope["k"], kv)


def test_torch_bias_matmul_is_one_addmm():
    """X Wᵀ + b on a weight matrix W and a row vector b: one torch.addmm (the bias as the GEMM's
    C), equal to the two-step form; NumPy (no addmm) keeps the product and the in-place add."""
    bias = Array("bias", (1, n))
    expr = MatMul(x, T(W)) + bias
    lines = Lowering(TorchPrinter({"matrices": frozenset({W})})).assign("y", expr, full=_full)
    assert lines == ["y = _support.addmm_rows(bias, x, weight.mT)"]
    assert Lowering(NumpyPrinter({"matrices": frozenset({W})})).assign("y", expr, full=_full)[-1] == "y += bias"
    assert Lowering(TorchPrinter()).assign("y", expr, full=_full)[-1] == "y += bias"  # W not a known matrix
    rng = np.random.default_rng(4)
    for xv in (rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 3, 2)).transpose(2, 1, 0), np.zeros((2, 0, 4))):
        scope = {
            "torch": torch,
            "math": math,
            "_support": torch_support,
            "x": torch.tensor(xv),
            "weight": torch.tensor(rng.standard_normal((4, 4))),
            "bias": torch.tensor(rng.standard_normal(4)),
        }
        want = scope["x"] @ scope["weight"].mT + scope["bias"]
        exec("\n".join(lines), scope)
        torch.testing.assert_close(scope["y"], want, rtol=1e-13, atol=1e-13)


# ------------------------------------------------------------------ the formula comments
def test_formula_printer_texts():
    from codegen.printers import formula, formula_comment

    xhat, dxhat = Array("xhat", (r, n)), Array("dxhat", (r, n))
    rstd = Array("rstd", (r, 1))
    dx = rstd * (dxhat - RowMean(dxhat) - xhat * RowMean(dxhat * xhat))
    assert formula_comment("dx", dx) == "# dx = rstd ⊙ (dx̂ − x̂ ⊙ mean(dx̂ ⊙ x̂) − mean(dx̂))"
    e = sp.exp(x - RowMax(x))
    assert formula(e / RowSum(e)) == "exp(x − rowmax(x)) / rowsum(exp(x − rowmax(x)))"
    assert formula(MatMul(q, T(k)) / sp.sqrt(d_k)) == "q @ kᵀ / √d_k"
    assert formula(1 / sp.sqrt(RowMean(x**2) + eps)) == "1 / √(mean(x²) + eps)"
    assert formula(ColSum(a * b)) == "colsum(a ⊙ b)"
    long = formula_comment("y", sum((Array(f"a{i}", (r, n)) for i in range(40)), sp.S.Zero))
    assert len(long) <= 100 and long.endswith("…")


def test_every_generated_assignment_has_its_formula():
    """Each op's forward/backward assignment, and each step's, is preceded in its generated
    file by the comment the formula printer gives for that very expression."""
    from pathlib import Path

    from codegen.printers import formula_comment
    from derivations.registry import ops, steps

    root = Path(__file__).resolve().parents[1] / "generated"
    checked = 0
    for backend in ("numpy", "torch"):
        texts = {p.stem: p.read_text() for p in (root / backend).glob("*.py")}
        lines = {s: {ln.strip() for ln in t.splitlines()} for s, t in texts.items()}
        every = set().union(*lines.values())
        for op in ops():
            for asg in list(op.forward or ()) + list(op.backward or ()):
                want = formula_comment(asg.target.name, asg.expr, indent=8 if asg.when is not None else 4)
                assert want in lines.get(op.name, every), (backend, op.name, want)
                checked += 1
        for step in steps():
            for asg in step.assigns:
                want = formula_comment(asg.target.name, asg.expr, indent=4)
                assert want in lines.get(step.name, every), (backend, step.name, want)
                checked += 1
        for stem, _ls in lines.items():
            assert all(
                len(ln) <= 100
                for t in [texts[stem]]
                for ln in t.splitlines()
                if ln.lstrip().startswith("# ") and " = " in ln
            ), stem
    assert checked > 100


# PyTorch's fused in-place updates: exactly `t += c·a`, `t += c·a·b`, `t += c·a/b` (c a scalar)
FUSED_CASES = [
    ("axpy", "+=", eps * x, "t.add_(x, alpha=eps)"),
    ("axpy-minus", "-=", eps * x, "t.add_(x, alpha=-eps)"),
    ("product", "+=", x * y, "t.addcmul_(x, y)"),
    ("scaled-product", "-=", 2 * x * y, "t.addcmul_(x, y, value=-2)"),
    ("quotient", "+=", eps * x / y, "t.addcdiv_(x, y, value=eps)"),
    ("plain-add", "+=", x, None),  # one pass already
    ("unit-scale", "-=", -x, None),
    ("three-arrays", "+=", x * y * a, None),
    ("multiply", "*=", eps * x, None),
    ("sum", "+=", x + y, None),
]


@pytest.mark.parametrize("op, value, text", [c[1:] for c in FUSED_CASES], ids=[c[0] for c in FUSED_CASES])
def test_fused_updates(op, value, text):
    assert TorchPrinter().fused_update("t", op, value) == text
    assert NumpyPrinter().fused_update("t", op, value) is None


def test_a_fused_update_computes_the_update():
    """Each fused call leaves in t what `t op= value` leaves (float64, broadcast operands)."""
    import torch

    env = {
        "x": torch.randn(3, 4, dtype=torch.float64),
        "y": torch.rand(3, 4, dtype=torch.float64) + 1,
        "a": torch.randn(3, 4, dtype=torch.float64),
        "eps": 0.3,
    }
    for _, op, value, text in FUSED_CASES:
        if text is None:
            continue
        expr = TorchPrinter().doprint(value)
        want = env["x"].clone() + 5
        exec(f"t {op} {expr}", {**env, "t": want})
        got = env["x"].clone() + 5
        exec(text, {**env, "t": got})
        torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)

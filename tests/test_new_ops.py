"""Ops declared by their forward alone, here and now, as docs/adding-an-op.md tells a user to.

None of these is in the registry: each is declared below by its specification only (no forward,
no backward, no claims, no mutants), printed by codegen into a scratch package
(qed/tools/scratch_kernels.py), and must come out

* proved: every generated claim (`<op>.forward`, `<op>.backward.<grad>`) proved for symbolic
  sizes, every mutant refuted;
* stable: the numerical-edges check of the registry (qed/tools/edges.py, the exact values of the
  specification in high precision) finds nothing at ±1e4 in float32 and float64 on both backends;
* correct: the printed torch functional's values and autograd gradients agree in float64 with
  torch autograd over the specification (`qed.tools.reference.spec_function`);
* usable in the model: the role its signature fits (an activation, an MLP op).
"""

from __future__ import annotations

import inspect
import re

import pytest
import sympy as sp
import torch

from codegen.analysis import analyse, storage_shape
from derivations import registry
from derivations.language.arrays import Array, Assign, HalfStep, MatMul, RowMean, RowSum, T, Take, size
from derivations.language.ops import Op, Option, index_bounds, model_role
from derivations.loss import CROSS_ENTROPY_SPEC, ELL_S, LOSS_SIGNATURE, P_S, TGT, Z
from derivations.proof.obligations import claims_for
from qed.tools import edges
from qed.tools.reference import spec_function
from qed.tools.scratch_kernels import ScratchKernels

r, n, d, f = size("r"), size("n"), size("d"), size("f")
x, y = Array("x", (r, n)), Array("y", (r, n))
beta = sp.Symbol("beta", positive=True)


def activation(name, formula, **kw) -> Op:
    return Op(name=name, module=__name__, inputs=[x], outputs=[y], spec=[Assign(y, formula)], optional_axes=2, **kw)


z_in = Array("z", (r, n))


def of_two(name, formula) -> Op:
    """An elementwise op of two inputs x and z."""
    return Op(name=name, module=__name__, inputs=[x, z_in], outputs=[y], spec=[Assign(y, formula)], optional_axes=2)


# the gated MLP with a ReLU gate (Shazeer 2020's ReGLU), declared like derivations/geglu.py
gx, gy = Array("x", (r, d)), Array("y", (r, d))
w_gate, w_up, w_down = Array("w_gate", (f, d)), Array("w_up", (f, d)), Array("w_down", (d, f))
g, u, h = Array("g", (r, f)), Array("u", (r, f)), Array("h", (r, f))
REGLU = Op(
    name="reglu_new",
    module=__name__,
    inputs=[gx],
    params=[w_gate, w_up, w_down],
    outputs=[gy],
    optional_axes=1,
    spec=[
        Assign(g, MatMul(gx, T(w_gate))),
        Assign(u, MatMul(gx, T(w_up))),
        Assign(h, sp.Max(0, g) * u),
        Assign(gy, MatMul(h, T(w_down))),
    ],
)

# a norm: RMS normalisation with ε inside the root and a gain, written as the sources write it
eps = sp.Symbol("eps", positive=True)
nx, ny, gain = Array("x", (r, n)), Array("y", (r, n)), Array("gain", (1, n))


def row_norm(name, formula) -> Op:
    """A norm of the rows of x with a gain and ε inside its root, written as its formula."""
    return Op(
        name=name,
        module=__name__,
        inputs=[nx],
        params=[gain],
        outputs=[ny],
        optional_axes=1,
        options=[Option(eps, "eps", 1e-5, "ε > 0 inside the root")],
        sizes={n: (nx, 1)},
        spec=[Assign(ny, formula)],
    )


RMS_NEW = row_norm("rmsnorm_new", nx / sp.sqrt(RowMean(nx**2) + eps) * gain)
# LayerNorm without a shift, as its formula: the chain rule through the variance's inner mean
# leaves Σ_j 2(mean x − x_j) = 0, which the derivation drops (`autodiff._centred`)
LN_NEW = row_norm("layernorm_no_shift_new", gain * (nx - RowMean(nx)) / sp.sqrt(RowMean((nx - RowMean(nx)) ** 2) + eps))

gain_row, zg = Array("g", (1, n)), Array("z", (r, n))
ALPHA, TAU = sp.Symbol("alpha", nonnegative=True), sp.Symbol("tau", positive=True)

NEW_OPS = [
    activation("leaky_relu_new", sp.Max(x, x / 100)),  # max(x, x/100)
    activation("softsign_new", x / (1 + sp.Abs(x))),  # x/(1 + |x|)
    activation("log_sigmoid_new", -sp.log(1 + sp.exp(-x))),  # log σ(x)
    activation("quick_gelu_new", x / (1 + sp.exp(-sp.Rational(1702, 1000) * x))),  # x σ(1.702x)
    activation("elu_new", sp.Max(x, 0) + sp.exp(sp.Min(x, 0)) - 1),  # ELU, α = 1
    activation("tanh_new", sp.tanh(x)),
    activation("shifted_tanh_new", sp.tanh(x / 2 + 1)),  # a linear argument
    activation("shifted_softplus_new", sp.log(1 + sp.exp(2 * x + 1))),
    activation("hardtanh_new", sp.Max(-1, sp.Min(1, x))),
    activation("hardswish_new", x * sp.Min(sp.Max(x + 3, 0), 6) / 6),
    activation(
        "selu_new",
        sp.Rational(10507, 10000)
        * (
            sp.Max(x, 0)  # SELU's λ, α
            + sp.Rational(16733, 10000) * (sp.exp(sp.Min(x, 0)) - 1)
        ),
    ),
    activation(
        "swish_beta_new",
        x / (1 + sp.exp(-beta * x)),  # x σ(βx), β an option
        options=[Option(beta, "beta", 1.0, "the slope β > 0")],
    ),
    activation(
        "softplus_slope_new",
        sp.log(1 + sp.exp(beta * x)) / beta,  # torch.nn.Softplus(beta): log(1 + e^{βx})/β
        options=[Option(beta, "beta", 1.0, "the slope β > 0")],
    ),
    activation(
        "celu_new",
        sp.Max(x, 0) + beta * (sp.exp(sp.Min(x, 0) / beta) - 1),  # CELU: α(e^{x/α} − 1) for x < 0
        options=[Option(beta, "alpha", 1.0, "α > 0")],
    ),
    activation("log_cosh_new", sp.log(sp.cosh(x))),  # the log-cosh loss: cosh x = ∞ at |x| > 89 in float32
    activation("tanh_by_sinh_cosh_new", sp.sinh(x) / sp.cosh(x)),
    activation("huber_new", sp.Min(sp.Abs(x), 1) ** 2 / 2 + sp.Max(sp.Abs(x) - 1, 0)),  # C¹: steps at |x| = 1
    activation("serf_new", x * sp.erf(sp.log(1 + sp.exp(x)))),  # x·erf(softplus x): a stable form inside erf
    activation("hard_sigmoid_new", sp.Min(sp.Max(x / 6 + sp.Rational(1, 2), 0), 1)),  # kinks at x = ±3 (1/6 inexact)
    activation("tanh_by_exps_new", (sp.exp(x) - sp.exp(-x)) / (sp.exp(x) + sp.exp(-x))),  # (e^x − e^−x)/(e^x + e^−x)
    activation("tanh_half_new", x * (sp.exp(x) - 1) / (sp.exp(x) + 1)),  # x·tanh(x/2), written by exps
    # roots of squares: x² = ∞ from |x| > 1.8e19 in float32 where each value is finite
    activation("pseudo_huber_new", sp.sqrt(1 + x**2) - 1),
    activation("bent_identity_new", (sp.sqrt(x**2 + 1) - 1) / 2 + x),
    activation(
        "isru_new",
        x / sp.sqrt(1 + beta * x**2),  # the inverse square root unit x/√(1 + αx²)
        options=[Option(beta, "alpha", 1.0, "α > 0")],
    ),
    activation("charbonnier_new", sp.sqrt(x**2 + sp.Rational(1, 10**6))),  # √(x² + ε²), ε = 1e-3
    # polynomials over (1 + x²)^k: a sum that grows like x² beside 1/h² distributed, (1 − x²)/h²
    # as 1/h² − (x/h)² (x² = ∞ met 1/h² = 0 at |x| = 1e20 in float32); 1/h⁴ never a line of its
    # own (0 from h > 1e10), 1/h² never a temporary (x·(1/h²) was 0 at x = 1e30)
    activation("cube_over_new", x**3 / (1 + x**2)),
    activation("abs_cube_over_new", sp.Abs(x) ** 3 / (1 + x**2)),
    activation("one_minus_over_new", (1 - x**2) / (1 + x**2)),
    # ISRLU: x for x ≥ 0, x/√(1 + x²) below; its derivative's step stays a term of its own beside
    # the reduced 1/h³ (over h³ together it was ∞·0 = NaN at x = −1e20 in float32)
    activation("isrlu_new", sp.Max(x, 0) + sp.Min(x, 0) / sp.sqrt(1 + sp.Min(x, 0) ** 2)),
    # cancellations and squares a rewrite removes: log(1 + x²) as 2 log1p(x²/(hypot(x, 1) + 1)),
    # log(x² + ε) as 2 log hypot(x, √ε) (x² = ∞ from 1.8e19 in float32), 1 − cos x as 2 sin²(x/2)
    # (0 at x = 1e-4 in float32, where the value is 5e-9)
    activation("log_square_new", sp.log(1 + x**2)),
    activation("log_eps_new", sp.log(x**2 + sp.Rational(1, 10**6))),
    activation("one_minus_cos_new", 1 - sp.cos(x)),
    # Geman–McClure 2x²/(x² + 4): a numeric coefficient in a forward value the backward reads
    # (x²/(x² + 4) is y/2, once read as y: a refuted backward); printed 2(x/hypot(x, 2))²
    activation("geman_mcclure_new", 2 * x**2 / (x**2 + 4)),
    # numbers where SymPy puts them: (2 + 2e^{−x})^{−1} is a sigmoid over 2, Σ_j 2e^{x_j} twice a
    # softmax's denominator; the quotient rule's 2 sign x/(1 + |x|) − 2|x| sign x/(1 + |x|)² put
    # over one power (it cancelled to 0.2 % at |x| = 1e6 in float32)
    activation("half_swish_new", x / (2 + 2 * sp.exp(-x))),
    Op(
        name="half_softmax_new",
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=[Assign(y, 3 * sp.exp(x) / RowSum(2 * sp.exp(x)))],
        optional_axes=1,
        sizes={n: (x, 1)},
    ),
    activation("soft_fraction_new", 2 * sp.Abs(x) / (1 + sp.Abs(x))),
    # asinh as log(x + √(x² + 1)): its sum rationalised where x < 0; proved through the log, whose
    # argument the normaliser knows positive (√(x² + 1) > |x|)
    activation("asinh_new", sp.log(x + sp.sqrt(x**2 + 1))),
    # a gain inside a fraction: its gradient's sum over rows against the specification's, one
    # written over hypot(z, 1)⁴ and one over (z² + 1)² expanded (sums over the same rows merged)
    Op(
        name="gain_fraction_new",
        module=__name__,
        inputs=[x],
        params=[gain_row],
        outputs=[y],
        spec=[Assign(zg, 2 * gain_row * x), Assign(y, zg / (1 + zg**2))],
        optional_axes=2,
    ),
    # steps written as products: the derivative's x·δ(x) and x²·2δ(x) are 0 off x = 0, the point
    # checked by the kink gate; 1/x: a denominator that is an input itself, checked nonzero
    # exponentials in pairs: sinh by them cancels at small x; log((e^x + e^{−x})/2) overflowed
    # from |x| > 89 in float32 (a log cosh once the pair is 2 cosh x)
    activation("sinh_by_exps_new", (sp.exp(x) - sp.exp(-x)) / 2),
    activation("log_cosh_by_exps_new", sp.log((sp.exp(x) + sp.exp(-x)) / 2)),
    # x²σ(x): printed x·σ(x)·x (x² = ∞ beside σ = 0 was NaN at x = −1e20 in float32), its
    # backward recomputing x²σ(1 − σ) spread rather than reading y = ∞ (∞·0 at x = 1e20)
    activation("square_gate_new", x**2 / (1 + sp.exp(-x))),
    # σ(x)(1 − σ(x)): printed σ(x)σ(−x) (1 − σ(x) = 0 from x > 17 in float32), its derivative's
    # σ(−x) − σ(x) as −tanh(x/2)
    activation("logistic_density_new", sp.exp(-x) / (1 + sp.exp(-x)) ** 2),
    activation("relu_by_step_new", x * sp.Heaviside(x, 0)),
    # max(x, 0)·H(x, 0): its derivative H(x)·H(x, 0) has a midpoint ½ beside the printed step, so a
    # wrong value 2 of that step gave 1 at 0, inside [0, 1]; the kink mutant's value is 4
    activation("relu_times_step_new", sp.Max(x, 0) * sp.Heaviside(x, 0)),
    activation("signed_square_new", sp.sign(x) * x**2),
    activation("reciprocal_new", 1 / x),
    activation("root_of_abs_new", sp.sqrt(sp.Abs(x) + 1)),
    # a learned slope g·x under a sign split (softplus, log σ, |·|): the normaliser splits on the
    # sign of the product as of one real number; the kink points solve x = 0 as well as g = 0
    # (at g = 0 the factor g of the backward hid a wrong step at g·x = 0)
    *(
        Op(name=name, module=__name__, inputs=[x], params=[gain_row], outputs=[y], spec=[Assign(y, e)], optional_axes=2)
        for name, e in (
            ("softplus_gain_new", sp.log(1 + sp.exp(gain_row * x))),
            ("log_sigmoid_gain_new", -sp.log(1 + sp.exp(-gain_row * x))),
            ("abs_gain_new", sp.Abs(gain_row * x)),
        )
    ),
    # a sum of two inputs under the split: x_ij + z_ij = p read with x_ij = p − z_ij
    of_two("softplus_sum_new", sp.log(1 + sp.exp(x + z_in))),
    # a pair's magnitude √(x² + z²) and with a smoothing ε: x² + z² = 0 below 1e-19 in float32
    # (the check of the backward's denominator refused inputs whose root is 1e-30), ∞ above 1e19
    of_two("pair_norm_new", sp.sqrt(x**2 + z_in**2)),
    of_two("pair_norm_eps_new", sp.sqrt(x**2 + 4 * z_in**2 + sp.Rational(1, 10**6))),
    # x over the pair's smoothed magnitude: ∂/∂x is 1/h − x²/h³, reduced over h³ to
    # hypot(z, √ε)²/h³ (1 − y² cancelled to 6 % where z ≪ x, z ~ 1e-8 in float32)
    of_two("pair_unit_new", x / sp.sqrt(x**2 + z_in**2 + sp.Rational(1, 10**6))),
    of_two("log_pair_new", sp.log(1 + x**2 + z_in**2)),
    # the larger of two inputs and the smaller one's square: at x = z (the edge check's "equal"
    # pattern) the derived backward gives each ½, the midpoint of the subdifferential
    of_two("max_of_two_new", sp.Max(x, z_in)),
    of_two("min_of_two_squared_new", sp.Min(x, z_in) ** 2),
    # a smoothed |x − z|: its backward divides by √((x − z)² + 1/100), expanded by the normaliser
    # into x² − 2xz + z² + 1/100, ≠ 0 as a positive semidefinite form plus a positive number
    of_two(
        "smooth_abs_difference_new", sp.sqrt((x - z_in) ** 2 + sp.Rational(1, 100))
    ),  # 2 log hypot(x, hypot(z, 1)): x² = ∞ from 1.8e19
    # exponentials of two arrays: e^{x}/(e^{x} + e^{z}) is σ(x − z), log(e^{x} + e^{z}) is
    # max(x, z) + log1p(e^{−|x − z|}) (both were ∞/∞ and ∞ from 88 in float32)
    of_two("two_way_softmax_new", sp.exp(x) / (sp.exp(x) + sp.exp(z_in))),
    of_two("logaddexp_new", sp.log(sp.exp(x) + sp.exp(z_in))),
    # sums of positive exponentials with a constant, unequal weights or under a root: the largest
    # exponent shifted out of the sum (`stability.exp_sum_shift`), the shift held constant in the
    # derivative (its steps cancel)
    of_two("softmax_with_sink_new", sp.exp(x) / (sp.exp(x) + sp.exp(z_in) + 1)),  # a softmax with a 0 logit
    of_two("weighted_two_way_new", sp.exp(x) / (2 * sp.exp(x) + 3 * sp.exp(z_in))),
    of_two("root_of_exp_sum_new", sp.sqrt(sp.exp(x) + sp.exp(z_in))),
    of_two("log_one_plus_two_exps_new", sp.log(1 + sp.exp(x) + sp.exp(z_in))),
    of_two("exp_difference_ratio_new", (sp.exp(x) - sp.exp(z_in)) / (sp.exp(x) + sp.exp(z_in) + 1)),
    activation("exp_quadratic_ratio_new", x / (1 + sp.exp(x) + sp.exp(2 * x))),
    # 1 + e^{v} beside a numerator's sum of exponentials, which takes the shift: SiLU's slope as an
    # op ((1 + e^{−x} + x e^{−x})/(1 + e^{−x})²: ∞·0 at x = −1e4), a soft clip log((1 + e^{x})/(1 + e^{x − 1}))
    activation("silu_slope_new", (1 + sp.exp(-x) + x * sp.exp(-x)) / (1 + sp.exp(-x)) ** 2),
    activation("soft_clip_new", sp.log((1 + sp.exp(x)) / (1 + sp.exp(x - 1)))),
    # a piecewise activation written with steps, as the docs advise (ELiSH: xσ(x) for x ≥ 0,
    # (e^{x} − 1)σ(x) below): the branch left out is read at x clamped into its own side
    # (`stability.branch_clamp`), no ∞·0 = NaN at x = 1e4; and SiLU squared, whose backward no
    # longer reads y = x²σ(x)² back (y = ∞ at 1e20 in float32 where the slope is 2e20)
    activation(
        "elish_steps_new",
        sp.Heaviside(x, 1) * x / (1 + sp.exp(-x)) + (1 - sp.Heaviside(x, 1)) * (sp.exp(x) - 1) / (1 + sp.exp(-x)),
    ),
    activation("silu_squared_new", (x / (1 + sp.exp(-x))) ** 2),
    # losses of two inputs: a hinge (a split on the sign of 1 − x·z), the Cauchy loss log(1 + (x − z)²)
    # (its root's argument a quadratic form ≥ 0), a log ratio whose slope's 1/g² lies beside z
    of_two("hinge_new", sp.Max(0, 1 - x * z_in)),
    of_two("cauchy_loss_new", sp.log(1 + (x - z_in) ** 2)),
    of_two("log_ratio_term_new", x * (sp.log(x**2 + 1) - sp.log(z_in**2 + 1))),
    # ELU and SELU as PyTorch's documentation writes them, the clamp outside e^x − 1 (e^x = ∞ from
    # 88 in float32 met by the min, and no split the normaliser could make on e^x − 1's sign)
    activation("elu_torch_doc_new", sp.Max(0, x) + sp.Min(0, sp.exp(x) - 1)),
    activation(
        "selu_torch_doc_new",
        sp.Rational(10507, 10000) * (sp.Max(0, x) + sp.Min(0, sp.Rational(16733, 10000) * (sp.exp(x) - 1))),
    ),
    activation("neg_clamp_new", sp.Max(0, -3 * (sp.exp(x) - 1))),  # its kink at x = 0, where e^x − 1 is
    # an expectation under a softmax and its entropy, written as formulas: Σ x e^{x}/Σ e^{x} with the
    # row max shifted out of both sums (∞/∞ from 88 in float32)
    *(
        Op(
            name=name,
            module=__name__,
            inputs=[x],
            outputs=[Array("y", (r, 1))],
            spec=[Assign(Array("y", (r, 1)), e)],
            optional_axes=1,
            sizes={n: (x, 1)},
        )
        for name, e in (
            ("softmax_mean_new", RowSum(x * sp.exp(x)) / RowSum(sp.exp(x))),
            ("softmax_entropy_new", sp.log(RowSum(sp.exp(x))) - RowSum(x * sp.exp(x)) / RowSum(sp.exp(x))),
        )
    ),
    # a log-softmin and the KL divergence between two softmaxes, written as formulas: each shift
    # printed beside the term it cancels, the pair summed first ((−x − max(−x)) − log …: 0 where
    # −log 3 is exact at 1e30 before, and 3.4× off at 1e20)
    Op(
        name="log_softmin_new",
        module=__name__,
        inputs=[x],
        outputs=[y],
        spec=[Assign(y, -x - sp.log(RowSum(sp.exp(-x))))],
        optional_axes=1,
    ),
    Op(
        name="softmax_kl_new",
        module=__name__,
        inputs=[x, z_in],
        outputs=[Array("y", (r, 1))],
        spec=[
            Assign(
                Array("y", (r, 1)),
                RowSum(
                    sp.exp(x)
                    / RowSum(sp.exp(x))
                    * ((x - sp.log(RowSum(sp.exp(x)))) - (z_in - sp.log(RowSum(sp.exp(z_in)))))
                ),
            )
        ],
        optional_axes=1,
    ),
    activation("sigmoid_square_new", sp.exp(2 * x) / (1 + sp.exp(x)) ** 2),  # σ(x)², e^{2x} = ∞ from 44
    # x·log(1 + x²): its derivative's log1p(x²/(h + 1)) + x²/h² with no x² of its own (a temporary
    # x² = ∞ from 1.8e19 in float32); proved with the common factor x set aside
    activation("x_log_square_new", x * sp.log(1 + x**2)),
    # kinks past the random points' entries (drawn from [−2, 2]): a wrong constant or sign there
    # is refuted beside the kink (`kinks.refute_at_kinks`); hard swish's 6 → 7 survived before
    activation("hard_swish_new", x * sp.Min(sp.Max(x + 3, 0), 6) / 6),
    activation("hard_sigmoid_new", sp.Min(sp.Max(x / 6 + sp.Rational(1, 2), 0), 1)),
    activation("relu6_new", sp.Min(sp.Max(x, 0), 6)),
    # a scale below 1 on a square, applied to the first factor: (x − z)²/2 as (y_sum/2)·y_sum
    # (y_sum² = ∞ from 1.8e19 in float32 where the half is still in range)
    of_two("half_square_difference_new", (x - z_in) ** 2 / 2),
    REGLU,
    RMS_NEW,
    LN_NEW,
    # losses with an option: the z-loss's weight α (the scale applied first, α·(log Z)² as
    # (α·log Z)·log Z: NaN at logits 1e20 in float32 before) and a temperature τ (−z_t/τ taken
    # with max(z/τ) before log Σ e^{z/τ − m} is added: 0 for log 4 at 1e30 in float64 before)
    *(
        Op(
            name=name,
            module=__name__,
            **LOSS_SIGNATURE,
            spec=[CROSS_ENTROPY_SPEC[0], Assign(ELL_S, ell), CROSS_ENTROPY_SPEC[-1]],
            options=[option],
        )
        for name, ell, option in (
            (
                "z_loss_weighted_new",
                -sp.log(Take(P_S, TGT)) + ALPHA * sp.log(RowSum(sp.exp(Z))) ** 2,
                Option(ALPHA, "alpha", 1e-4, "α ≥ 0"),
            ),
            (
                "cross_entropy_temperature_new",
                -Take(Z, TGT) / TAU + sp.log(RowSum(sp.exp(Z / TAU))),
                Option(TAU, "tau", 1.0, "τ > 0"),
            ),
        )
    ),
    # losses declared by their specification alone: log p_t read as log-softmax (p_t underflows to
    # 0 at logits ~1e4: log 0 and 1/p_t), its derivative onehot − p; the targets' range 0 … V − 1,
    # which the kernel checks, known to the proofs (Σ_k onehot(t)_k = 1)
    *(
        Op(
            name=name,
            module=__name__,
            **LOSS_SIGNATURE,
            spec=[CROSS_ENTROPY_SPEC[0], Assign(ELL_S, ell), CROSS_ENTROPY_SPEC[-1]],
        )
        for name, ell in (
            ("focal_loss_new", -((1 - Take(P_S, TGT)) ** 2) * sp.log(Take(P_S, TGT))),  # focal, γ = 2
            ("poly1_loss_new", -sp.log(Take(P_S, TGT)) + (1 - Take(P_S, TGT))),  # Poly-1, ε = 1
            # the textbook −z_t + log Σ e^{z}: the shift's max taken with z_t, (z − m)_t, before the
            # small log Σ e^{z − m} is added (1e30 + 1.39 − 1e30 was 0 in float64); the max's
            # adjoint 0 proved with the targets in 0 … V − 1
            ("cross_entropy_direct_new", -Take(Z, TGT) + sp.log(RowSum(sp.exp(Z)))),
            # PaLM's z-loss as a user writes it, 10⁻⁴ after the square: (10⁻⁴·log Z)·log Z
            ("z_loss_textbook_new", -sp.log(Take(P_S, TGT)) + sp.Rational(1, 10**4) * sp.log(RowSum(sp.exp(Z))) ** 2),
        )
    ),
]
# op -> the lemma that makes it stable where the formula as written is not
CANCELLING = {
    "pseudo_huber_new": "stability.root_minus",
    "bent_identity_new": "stability.root_minus",
    "log_square_new": "stability.log_root",
    "log_eps_new": "stability.log_root",
    "one_minus_cos_new": "stability.one_minus_cos",
    "geman_mcclure_new": "stability.hypot",
    "half_swish_new": "stability.sigmoid_node",
    "half_softmax_new": "stability.softmax_shift",
    "asinh_new": "stability.sqrt_rationalised",
    "sinh_by_exps_new": "stability.exp_pair",
    "log_cosh_by_exps_new": "stability.log_cosh",
    "focal_loss_new": "stability.log_softmax",
    "poly1_loss_new": "stability.log_softmax",
    "cross_entropy_direct_new": "stability.logsumexp",
    "cross_entropy_temperature_new": "stability.logsumexp",
    "log_pair_new": "stability.log_root",
    "soft_fraction_new": None,  # exact algebra in the derivative (`stabilise.quotients_combined`)
    # x²σ(x)' = xσ(x)(2 + xσ(−x)): 1 − σ(x) as σ(−x), and the gate σ(x) multiplied in before the
    # second x (x·(xσ(−x) + 2) = ∞ met σ(x) = 0 at x = −1e20 in float32)
    "square_gate_new": "stability.one_minus_sigmoid",
    "logistic_density_new": "stability.sigmoid_difference",
    "two_way_softmax_new": "stability.exp_pair_factored",
    "softmax_mean_new": "stability.softmax_sums_shift",
    "log_softmin_new": "stability.logsumexp",
    "softmax_kl_new": "stability.logsumexp",
    "softmax_entropy_new": "stability.softmax_sums_shift",
    "elu_torch_doc_new": "stability.clamp_expm1",
    "selu_torch_doc_new": "stability.clamp_expm1",
    "neg_clamp_new": "stability.clamp_expm1",
    "logaddexp_new": "stability.logaddexp",
    "softmax_with_sink_new": "stability.exp_sum_shift",
    "weighted_two_way_new": "stability.exp_sum_shift",
    "root_of_exp_sum_new": "stability.exp_sum_shift",
    "log_one_plus_two_exps_new": "stability.exp_sum_shift",
    "exp_difference_ratio_new": "stability.exp_sum_shift",
    "exp_quadratic_ratio_new": "stability.exp_sum_shift",
    "silu_slope_new": "stability.exp_sum_shift",
    "elish_steps_new": "stability.branch_clamp",
    "silu_squared_new": None,  # the forward value not read back (`autodiff._square_beside`)
    "soft_clip_new": "stability.exp_sum_shift",
    "cauchy_loss_new": "stability.log_root",
    "log_ratio_term_new": "stability.log_root",
    "sigmoid_square_new": "stability.sigmoid_ratio",
    "x_log_square_new": "stability.log_root",
}
ROOTS = [
    o
    for o in NEW_OPS
    if o.name
    in (
        "pseudo_huber_new",
        "bent_identity_new",
        "isru_new",
        "charbonnier_new",
        "isrlu_new",
        "cube_over_new",
        "abs_cube_over_new",
        "one_minus_over_new",
    )
]
IDS = [o.name for o in NEW_OPS]


@pytest.fixture(scope="module")
def scratch():
    """The new ops printed into a scratch package: (op name, backend) -> module."""
    with ScratchKernels() as pkg:
        yield {(o.name, b): pkg.module(o, b) for o in NEW_OPS for b in ("numpy", "torch")}


@pytest.fixture
def registered(scratch, monkeypatch):
    """The edges harness pointed at the new ops, as if they were in the registry and generated/
    (patched on the objects the harness itself reads, for this test only)."""
    by_name = {o.name for o in NEW_OPS}
    known = edges.units()  # the registry's units (cached by the harness)
    added = tuple(edges._op_unit(o) for o in NEW_OPS)
    monkeypatch.setattr(edges, "units", lambda: known + added)
    original = edges._module
    monkeypatch.setattr(
        edges, "_module", lambda backend, name: scratch[(name, backend)] if name in by_name else original(backend, name)
    )
    return scratch


@pytest.mark.parametrize("op", NEW_OPS, ids=IDS)
def test_declared_by_the_forward_alone_the_op_is_proved(op):
    assert op.derived
    claims = claims_for(op)
    assert claims
    lemmas = {c.id for c in registry.claims() if c.id.startswith("stability.")}
    for claim in claims:
        cert = claim.run()
        assert cert.status == "proved-general", (claim.id, cert.method, str(cert.residual)[:300])
        assert cert.mutants and all(m.refuted for m in cert.mutants), claim.id
        # a required side rewritten by the printer's lemmas names them, and each is a registry claim
        cited = cert.method.partition("rewritten by the proved lemmas ")[2]
        assert {c.strip() for c in cited.split(",") if c.strip()} <= lemmas, cert.method
    assert set(op.stability) <= lemmas  # every rewrite cites a proved lemma


def test_a_step_of_the_specification_behind_an_absolute_value_is_its_kink():
    """Huber's derivative: the specification's steps sit at 1 − |x| = 0, the split's branch x ≥ 0
    states the point as x − 1 = 0; matched through |·| (with x's sign checked at each point), the
    printed value there is held to the specification's one-sided derivatives (both 1). A
    backward that gives 0 at |x| = 1 (each step 0 at its jump) is refuted there."""
    from derivations.language.ops import grad_of

    op = next(o for o in NEW_OPS if o.name == "huber_new")
    backward = next(c for c in claims_for(op) if ".backward." in c.id).run()
    assert backward.status == "proved-general", backward.method
    assert any("kink at" in a for a in backward.assumptions), backward.assumptions
    dx, dy = grad_of(x), grad_of(y)
    wrong = activation(
        "huber_wrong_new",
        op.spec[0].expr,
        saved=[x],
        backward=[
            Assign(
                dx,
                dy
                * sp.sign(x)
                * (sp.Heaviside(1 - sp.Abs(x), 0) * sp.Min(1, sp.Abs(x)) + sp.Heaviside(sp.Abs(x) - 1, 0)),
            )
        ],
        grads=[dx],
    )
    claim = next(c for c in claims_for(wrong) if ".backward." in c.id)
    assert claim.run().status == "refuted"


def test_a_stable_form_inside_another_function_is_proved_through_its_lemma():
    """x·erf(softplus x): the printed erf(max(x, 0) + log1p(e^{−|x|})) is not decided against
    erf(log(1 + e^{x})) through the erf; the required side rewritten by the same proved lemma
    is. A printed line that is wrong stays refuted by its counterexample."""
    op = next(o for o in NEW_OPS if o.name == "serf_new")
    for claim in claims_for(op):
        cert = claim.run()
        assert cert.status == "proved-general" and "stability.softplus" in cert.method, cert.method
    wrong = activation("serf_wrong_new", x * sp.erf(sp.log(1 + sp.exp(x))))
    wrong.forward = [Assign(y, x * sp.erf(sp.log(1 + sp.exp(-sp.Abs(x))) + sp.Min(0, x)))]  # min for max
    forward = next(c for c in claims_for(wrong) if c.id.endswith(".forward"))
    assert forward.run().status == "refuted"


@pytest.mark.parametrize("op", NEW_OPS, ids=IDS)
@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_the_printed_kernels_are_stable_at_1e4_and_at_the_subnormals(registered, op, backend, dtype):
    """Large inputs (±1e4: e^{x} overflows in both dtypes) and the smallest (1e-40 in float32,
    1e-310 in float64: subnormal inputs, where a cancelling e^{x} − 1 loses every digit)."""
    for magnitude in (1e4, min(edges.magnitudes(dtype))):
        findings = edges.check(op.name, backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


def test_a_learned_slope_under_a_sign_split_is_rewritten():
    """log(1 + e^{g·x}) and log σ(g·x) with g a parameter, log(1 + e^{x + z}) of two inputs:
    printed through `stability.softplus` (before, a product or a sum of two arrays was no
    subject the stabiliser let the normaliser split on, the rewrite was skipped and
    log(1 + e^{g·x}) was ∞ from g·x > 88 in float32). Their stability at 1e4
    is the test above; from |g|, |x| ~ 1e20 the product g·x itself leaves float32."""
    for name in ("softplus_gain_new", "log_sigmoid_gain_new", "softplus_sum_new"):
        op = next(o for o in NEW_OPS if o.name == name)
        assert "stability.softplus" in op.stability, (name, op.stability)
        exps = [a for assign in op.forward for a in assign.expr.atoms(sp.exp)]
        assert exps and all(isinstance(-a.args[0], sp.Abs) for a in exps), op.forward  # e^{−|g·x|} only


@pytest.mark.parametrize("name", ["pair_norm_new", "pair_norm_eps_new"])
@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_a_root_of_several_squares_is_printed_as_nested_hypots_and_stable_at_every_magnitude(
    registered, name, backend, dtype
):
    """√(x² + z²) printed hypot(x, z), √(x² + 4z² + ε) hypot(2z, hypot(x, √ε)) (`stability.
    hypot_squares`); the backward's denominator checked at run time as the hypot, which is 0 only
    where both entries are (x² + z² was 0 from 1e-19 in float32: inputs refused whose root is
    1e-30). Every magnitude of the check, 1e-310 to 1e300, against the exact values."""
    op = next(o for o in NEW_OPS if o.name == name)
    assert "stability.hypot_squares" in op.stability
    for magnitude in edges.magnitudes(dtype):
        findings = edges.check(op.name, backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_a_quotient_rule_over_a_nested_hypot_is_reduced_and_accurate_at_small_magnitudes(registered, backend, dtype):
    """x/hypot(x, hypot(z, √ε)): its derivative 1/h − x²/h³ over one denominator, the numerator
    reduced by h² = x² + s² to s² (s = hypot(z, √ε), an array), accurate at every magnitude up
    to 1 (it cancelled to 6 % at z ~ 1e-8 in float32 as (1 − y²)/h)."""
    assert "hypot(z" in str(next(o for o in NEW_OPS if o.name == "pair_unit_new").backward).replace("Hypot", "hypot")
    for magnitude in (m for m in edges.magnitudes(dtype) if m <= 1):
        findings = edges.check("pair_unit_new", backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


@pytest.mark.parametrize("op", ROOTS, ids=[o.name for o in ROOTS])
@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_a_root_of_squares_is_printed_as_hypot_and_stable_at_every_magnitude(registered, op, backend, dtype):
    """√(x² + c) printed hypot(x, √c) (`stability.hypot`), and a quotient rule's 1/h − x²/h³
    reduced to c/h³: every magnitude of the check, 1e-310 to 1e300, against the exact values
    (x² alone overflows from 1.8e19 in float32; x/√(1 + x²)' cancelled to 0 from 4e3)."""
    assert "stability.hypot" in op.stability
    for magnitude in edges.magnitudes(dtype):
        findings = edges.check(op.name, backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


@pytest.mark.parametrize("op", [o for o in NEW_OPS if o.name in CANCELLING], ids=lambda o: o.name)
@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_a_cancelling_or_overflowing_form_is_rewritten_and_stable_at_every_magnitude(registered, op, backend, dtype):
    """√(x² + c) − √c rationalised (`stability.root_minus`), log(x² + c) and 1/(x² + c) by hypot
    (`stability.log_root`, `stability.hypot`), 1 − cos x by sin²(x/2) (`stability.one_minus_cos`),
    a number taken out of a sum or a row sum, a quotient rule put over one denominator: every
    magnitude of the check, 1e-310 to 1e300, forward and backward, against the exact values."""
    assert CANCELLING[op.name] is None or CANCELLING[op.name] in op.stability
    for magnitude in edges.magnitudes(dtype):
        findings = edges.check(op.name, backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


@pytest.mark.parametrize("name", ["half_square_difference_new", "z_loss_textbook_new", "z_loss_weighted_new"])
@pytest.mark.parametrize("backend", edges.BACKENDS)
@pytest.mark.parametrize("dtype", edges.DTYPES)
def test_a_scale_below_one_is_applied_before_the_square(registered, name, backend, dtype):
    """c·u² with |c| < 1 printed (c·u)·u (codegen/lowering/inplace.py's `scale_first`): u² is
    never formed, so nothing overflows where c·u² is in range ((x − z)²/2 at 2e19, the z-loss's
    10⁻⁴·(log Z)² at logits 1e20 in float32, both ∞ before). Every magnitude of the check."""
    source = inspect.getsource(registered[(name, backend)])
    assert re.search(r"= (\w+)/2\n\s+\w+ \*= \1\b|= (?:0\.0001|alpha)\*(\w+)\n\s+\w+ \*= \2\b", source), source
    for magnitude in edges.magnitudes(dtype):
        findings = edges.check(name, backend, dtype, magnitude)
        assert not findings, edges.report(findings[:8])


@pytest.mark.parametrize("name", ["hard_swish_new", "hard_sigmoid_new", "relu6_new"])
def test_a_mistake_past_a_kink_beyond_the_random_points_is_refuted(name):
    """The random points draw entries from [−2, 2]; hard swish's kinks lie at ±3, ReLU6's at 6.
    Every wrong edit of the printed lines is refuted all the same, beside a kink: the value
    there, on each side at 2⁻⁹⁰, 1/4 and 1 in u, must equal the required one (hard swish's
    min(…, 7) and its backward's sign flip in H(6 − max(0, 3 − x)) survived before)."""
    from derivations.proof import mutation

    op = next(o for o in NEW_OPS if o.name == name)
    results = mutation.audit_op(op)
    assert results and [r for r in results if r.outcome != "killed"] == []
    kinked = [r for r in results if "beside the kink" in str((r.counterexample or {}).get("why", ""))]
    assert kinked, "no mutant needed the points beside a kink"


@pytest.mark.parametrize("op", NEW_OPS, ids=IDS)
def test_the_printed_torch_kernel_agrees_with_autograd_over_the_specification(scratch, op):
    gen = torch.Generator().manual_seed(0)
    sizes = {r: 3, n: 4, d: 4, f: 5, size("T"): 3, size("V"): 4}
    bounds = {a.name: b.xreplace(sizes) for a, b in index_bounds(op)}
    args = []
    for a in analyse(op).args:
        shape = storage_shape(a.array, a.integer, a.batched, sizes, (2,))
        if a.integer:  # ids in 0 … B − 1, a mask of ones (Σ mask > 0)
            args.append(
                torch.randint(0, int(bounds.get(a.name, 1)), shape, generator=gen)
                if a.name in bounds
                else torch.ones(shape, dtype=torch.long)
            )
        else:
            args.append(torch.randn(shape, generator=gen, dtype=torch.float64) * 3)
    floats = [k for k, a in enumerate(args) if a.is_floating_point()]
    ours = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
    ref = [a.clone().requires_grad_() if a.is_floating_point() else a for a in args]
    out = getattr(scratch[(op.name, "torch")], op.name)(*ours)
    want = spec_function(op)(*ref).reshape(out.shape)  # a loss's (1, 1) returned as the kernel's (1,)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    dy = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    (out * dy).sum().backward()
    (want * dy).sum().backward()
    for k in floats:
        torch.testing.assert_close(ours[k].grad, ref[k].grad, rtol=1e-10, atol=1e-12)

    def of_floats(*xs):
        full = list(args)
        for k, x_ in zip(floats, xs):
            full[k] = x_
        return getattr(scratch[(op.name, "torch")], op.name)(*full)

    assert torch.autograd.gradcheck(of_floats, [args[k].detach().requires_grad_() for k in floats])


@pytest.mark.parametrize("op", NEW_OPS, ids=IDS)
def test_the_model_role_follows_from_the_signature(op):
    want = (
        "norm"
        if op in (RMS_NEW, LN_NEW)
        else "ffn"
        if op.params
        else "loss"
        if op.integer_inputs
        else ""
        if op.optional_axes == 1
        else "activation"
    )
    if op.name == "gain_fraction_new" or op.name.endswith("_gain_new"):
        want = "residual_scale"  # elementwise with one gain of the model's width: LayerScale's signature
    if len(op.inputs) == 2 and not op.integer_inputs:
        want = ""  # two inputs: no role of the model takes it
    assert model_role(op) == want  # a row-wise op (a softmax) is no elementwise activation


@pytest.mark.parametrize(
    "expr,says",
    [
        (lambda x: 0.5 * x, "sp.Rational(1, 2)"),
        (lambda x: sp.Float("0.044715") * x**3 + x, "sp.Rational(8943, 200000)"),
        (lambda x: sp.Piecewise((x, sp.Gt(x, 0)), (sp.exp(x) - 1, True)), "sp.Max(x, 0) + sp.exp(sp.Min(x, 0)) - 1"),
        # a log of what may be ≤ 0, a root of what may be < 0: NaN there, where the proofs say nothing
        (lambda x: sp.log(x), "log(x) in spec line y needs x > 0"),
        (lambda x: sp.sqrt(x), "sqrt(x) in spec line y needs x >= 0"),
        (lambda x: x * sp.log(x - 1), "log(x - 1) in spec line y needs x - 1 > 0"),
        (lambda x: sp.log(sp.Abs(x)), "log(Abs(x)) in spec line y needs Abs(x) > 0"),
        (lambda x: sp.sqrt(sp.sinh(x)), "needs sinh(x) >= 0"),
        (lambda x: sp.log(1 + sp.sin(x)), "needs sin(x) + 1 > 0"),  # 0 at x = −π/2
        (lambda x: sp.log(x**2 - 1), "needs x**2 - 1 > 0"),
    ],
    ids=[
        "float",
        "float-in-a-polynomial",
        "piecewise",
        "log",
        "sqrt",
        "log-shifted",
        "log-abs",
        "sqrt-sinh",
        "log-one-plus-sin",
        "log-square-minus-one",
    ],
)
def test_what_would_be_proved_one_way_and_printed_another_is_refused_at_declaration(expr, says):
    """A float constant (the proofs read the rational, the printed code a float), a Piecewise
    (proved, but no printer rule), and a log or root whose argument is not provably in its domain
    (the printed code would give NaN) are refused where the op is declared, naming what to write."""
    from derivations.language.arrays import ArrayError

    r, n = size("r"), size("n")
    x, y = Array("x", (r, n)), Array("y", (r, n))
    with pytest.raises(ArrayError, match="what|write|not provable from the formula") as info:
        Op(name="slip", title="slip", claims=[], inputs=[x], outputs=[y], spec=[Assign(y, expr(x))], source="here")
    assert says in str(info.value) and "op slip" in str(info.value)


def test_an_output_whose_value_has_another_shape_is_refused_at_declaration():
    """y declared (r, n) but written as a row's log-mean-exp, (r, 1): the proofs would read the
    value broadcast, the printed kernel would return (r, 1); refused with the shape to declare."""
    from derivations.language.arrays import ArrayError, RowMean

    r, n = size("r"), size("n")
    x, y = Array("x", (r, n)), Array("y", (r, n))
    with pytest.raises(ArrayError, match=r"output y is declared \(r, n\) but its value has shape \(r, 1\)"):
        Op(name="slip", title="slip", claims=[], inputs=[x], outputs=[y], spec=[Assign(y, sp.log(RowMean(sp.exp(x))))])
    row = Array("y", (r, 1))
    op = Op(name="lme", module=__name__, inputs=[x], outputs=[row], spec=[Assign(row, sp.log(RowMean(sp.exp(x))))])
    assert "stability.logsumexp" in op.stability  # and printed with the row max shifted out


def test_a_log_or_root_of_what_is_positive_is_accepted():
    """Positive by the sign analysis: sums of exps, squares plus a positive constant or option,
    cosh, k v + k √(v² + c), a row's sum of exps, as written, over one denominator, by the
    exponentials or by interval arithmetic; ≥ 0 for a root: |x|, x², 1 − cos x."""
    r, n = size("r"), size("n")
    x, y = Array("x", (r, n)), Array("y", (r, n))
    for k, expr in enumerate(
        [
            sp.log(sp.cosh(x)),
            sp.sqrt(sp.Abs(x)),
            sp.sqrt(x**2),
            sp.log(x + sp.sqrt(x**2 + 1)),
            sp.log(1 + sp.exp(x)) ** sp.Rational(3, 2),
            x - sp.log(RowSum(sp.exp(x))),
            sp.log(x**2 + beta),
            sp.log(1 - 1 / (1 + sp.exp(-x))),  # log(1 − σ(x)): e^{−x}/(1 + e^{−x}) over one denominator
            sp.log(1 + sp.tanh(x)),  # 2e^{x}/(e^{x} + e^{−x}) by the exponentials
            sp.log(2 - sp.tanh(x) ** 2),  # in [1, 2] by interval arithmetic
            sp.sqrt(1 - sp.cos(x)),  # in [0, 2]
        ]
    ):
        options = [Option(beta, "beta", 1.0, "β > 0")] if expr.has(beta) else []
        Op(name=f"fine{k}", title="fine", claims=[], inputs=[x], outputs=[y], spec=[Assign(y, expr)], options=options)


def test_a_function_no_printer_knows_is_refused_at_declaration():
    from derivations.language.arrays import ArrayError

    r, n = size("r"), size("n")
    x, y = Array("x", (r, n)), Array("y", (r, n))
    with pytest.raises(ArrayError, match=r"gamma\(…\) in spec line y is no function the printers know"):
        Op(name="slip", title="slip", claims=[], inputs=[x], outputs=[y], spec=[Assign(y, sp.gamma(x))], source="here")


def _qk_norm_scores() -> Op:
    """QK-norm's scores, declared by calling the registry's RMSNorm on q and on k (no RMS
    formula retyped): S = RMSNorm(q; g_q) RMSNorm(k; g_k)ᵀ / √d."""
    m = size("m")
    q, k, s = Array("q", (r, d)), Array("k", (m, d)), Array("s", (r, m))
    g_q, g_k = Array("g_q", (1, d)), Array("g_k", (1, d))
    rms = registry.op("rmsnorm")
    eps_value = sp.Rational(1, 10**6)
    spec = MatMul(rms.call(q, g_q, eps=eps_value), T(rms.call(k, g_k, eps=eps_value))) / sp.sqrt(d)
    return Op(
        name="qk_norm_scores_new",
        module=__name__,
        inputs=[q, k],
        params=[g_q, g_k],
        outputs=[s],
        sizes={d: (q, 1)},
        broadcast=True,
        spec=[Assign(s, spec)],
    )


def test_a_specification_may_call_a_registered_op():
    """`Op.call`: the callee's sizes become the argument's (RMSNorm's n is d here, its r is r for
    q and m for k), its option is given, and the composite is proved and printed like any op."""
    op = _qk_norm_scores()
    rms = registry.op("rmsnorm")
    assert not op.spec[0].expr.has(size("n")) and op.spec[0].expr.has(size("d"))  # RMSNorm's 1/n is 1/d
    for claim in claims_for(op):
        cert = claim.run()
        assert cert.status == "proved-general", (claim.id, cert.method, str(cert.residual)[:300])
        assert cert.mutants and all(mu.refuted for mu in cert.mutants), claim.id
    with ScratchKernels() as pkg:
        fn = getattr(pkg.module(op, "torch"), op.name)
        gen = torch.Generator().manual_seed(1)
        q, k = (
            torch.randn(2, 3, 4, generator=gen, dtype=torch.float64),
            torch.randn(2, 5, 4, generator=gen, dtype=torch.float64),
        )
        g_q, g_k = (
            torch.randn(4, generator=gen, dtype=torch.float64),
            torch.randn(4, generator=gen, dtype=torch.float64),
        )
        norm = torch.nn.functional.rms_norm
        want = norm(q, (4,), g_q, eps=1e-6) @ norm(k, (4,), g_k, eps=1e-6).mT / 2.0
        torch.testing.assert_close(fn(q, k, g_q, g_k), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(Exception, match="takes x, gamma"):
        rms.call(x)
    with pytest.raises(Exception, match="no option 'beta'"):
        rms.call(x, Array("gamma", (1, n)), beta=1)


def test_the_qk_transform_role_takes_a_row_op_or_a_scale_and_nothing_else():
    """`role="qk_transform"`: an op on each head's q and k (QK-L2-norm), offered by `--qk-norm`
    beside every norm, never as the model's norm; an activation's signature is refused."""
    from derivations.language.arrays import ArrayError, RowSum
    from generated import model_ops

    r, n = size("r"), size("n")
    x, y, g = Array("x", (r, n)), Array("y", (r, n)), Array("g", (1, n))

    def qk_op(name, expr, params=(g,), optional_axes=1):
        return Op(
            name=name,
            title=name,
            claims=[],
            inputs=[x],
            params=list(params),
            outputs=[y],
            spec=[Assign(y, expr)],
            source="here",
            optional_axes=optional_axes,
            role="qk_transform",
        )

    unit = qk_op("qk_unit", g * x / sp.sqrt(RowSum(x**2) + 1))  # a row op
    scale = qk_op("qk_gain", g * x)  # a per-feature scale
    assert model_role(unit) == model_role(scale) == "qk_transform"
    with pytest.raises(
        ArrayError, match=r"role 'qk_transform' needs its signature: x \(r, n\) -> y \(r, n\) with parameters"
    ):
        qk_op("qk_act", sp.tanh(x), params=(), optional_axes=2)  # an activation's signature
    assert set(model_ops.NORMS) < set(model_ops.QK_TRANSFORMS) and "qk_l2norm" in model_ops.QK_TRANSFORMS
    assert "qk_l2norm" not in model_ops.NORMS
    assert model_ops.QK_TRANSFORMS["qk_l2norm"] == ((("weight", "ones"),), ("eps",))


def test_a_printed_infinity_where_the_required_value_is_finite_is_a_counterexample():
    """log(x + √(x² + 1)) printed through a split on x's sign: the mutant that drops the x < 0
    branch's term reads log 0 = −∞ there. The gap between −∞ and a finite value was ∞/∞ = NaN,
    and NaN > tol is false: the mutant survived. An infinity equals only itself."""
    from derivations.proof import mutation
    from derivations.proof.numeric import mpmath, relative_gap

    inf = mpmath.inf
    assert relative_gap(-inf, 1) == inf and relative_gap(1, inf) == inf and relative_gap(inf, -inf) == inf
    assert relative_gap(inf, inf) == 0 and relative_gap(-inf, -inf) == 0
    op = activation("asinh_by_log_new", sp.log(x + sp.sqrt(x**2 + 1)))
    dropped = [m for m in mutation.op_mutants(op) if m.scope == "forward" and "dropped" in m.mistake]
    results = mutation.audit_op(op)
    by_name = {r.mutant: r for r in results}
    assert dropped and all(by_name[m.name].outcome == "killed" for m in dropped), [
        (m.name, by_name[m.name].outcome) for m in dropped
    ]
    # |x| read for x beside the x ≥ 0 branch's step is equivalent, and proved so: the backward's
    # denominator H·(h + |x|) + (1 − H)/(h + |x|) is ≠ 0 in each of the step's values
    assert [r.mutant for r in results if r.outcome == "survived"] == []


@pytest.mark.parametrize("op", NEW_OPS, ids=IDS)
def test_every_printed_forward_line_is_needed(op):
    """A line of the printed forward is an output, a value the backward reads, or read by a
    later line: a loss declared by its specification printed p = softmax(z) and never read it
    once log p came from the log-softmax rewrite (a (T, V) pass a call, and 19 wrong edits of
    that line that no claim could see)."""
    needed = set(op.outputs) | set(op.saved)
    for k, line in enumerate(op.forward):
        later = {s for a in op.forward[k + 1 :] for s in sp.sympify(a.expr).free_symbols}
        assert line.target in needed | later, f"{op.name}: {line.target.name} is computed and never read"


def test_a_loss_declared_by_its_specification_has_no_wrong_edit_left_standing():
    from derivations.proof import mutation

    op = next(o for o in NEW_OPS if o.name == "z_loss_textbook_new")
    results = mutation.audit_op(op)
    assert results and [r.mutant for r in results if r.outcome == "survived"] == []


def test_a_row_sum_that_cancels_is_not_printed():
    """The derived backward of a LayerNorm written as its formula is the textbook one, rstd·(dy·g
    − mean(dy·g)) − (x − μ)·mean(dy·y)/(var + ε), with no row sum of 2(μ − x) (0 up to rounding,
    two passes a call, and seven wrong edits of its factor that no claim could tell apart)."""
    from derivations.proof import mutation

    sums = [s for line in LN_NEW.backward for s in sp.sympify(line.expr).atoms(RowSum)]
    assert all("rowmean" not in str(s.args[0]) for s in sums), sums
    results = mutation.audit_op(LN_NEW)
    assert results and [r.mutant for r in results if r.outcome == "survived"] == []


EXP_SUMS = [o for o in NEW_OPS if CANCELLING.get(o.name) == "stability.exp_sum_shift"]


@pytest.mark.parametrize("op", EXP_SUMS, ids=lambda o: o.name)
def test_a_sum_of_exponentials_is_shifted_by_its_max_and_the_shift_carries_no_step(op):
    """e^{x}/(e^{x} + e^{z} + 1) printed as e^{x − m}/(e^{x − m} + e^{z − m} + e^{−m}), m = max(0, x, z):
    the derived backward holds m constant (the value does not depend on it), so no step of the
    max is printed, and no exponential of an unshifted array is left."""
    assert "stability.exp_sum_shift" in op.stability
    for a in op.forward + op.backward:
        expr = sp.sympify(a.expr)
        assert not expr.atoms(sp.Heaviside, HalfStep), (a.target, expr)
        assert all(f.args[0].has(sp.Max) for f in expr.atoms(sp.exp) if f.free_symbols), (a.target, expr)


def test_only_a_max_the_value_does_not_depend_on_is_a_shift():
    from derivations.language.autodiff import shifts_of

    a, b = x, z_in  # the arrays, as the derivation's elementwise lines read them
    m = sp.Max(0, a, b)
    shifted = sp.exp(a - m) / (sp.exp(a - m) + sp.exp(b - m) + sp.exp(-m))
    assert shifts_of(shifted) == [m]
    assert shifts_of(m + sp.log(sp.exp(a - m) + sp.exp(b - m) + sp.exp(-m))) == [m]
    assert shifts_of(sp.exp(a - m)) == []  # e^{x − m} alone depends on m
    assert shifts_of(sp.exp(sp.Max(a, 0))) == []  # a max inside, not a shift (e^{ReLU x})
    # a shift read with the wrong sign in one place is no shift: its steps stay in the derivative
    assert shifts_of(sp.exp(a - m) / (sp.exp(a + m) + sp.exp(b - m))) == []


def test_a_shifted_sum_of_exponentials_has_no_wrong_edit_left_standing():
    from derivations.proof import mutation

    op = next(o for o in NEW_OPS if o.name == "exp_quadratic_ratio_new")
    results = mutation.audit_op(op)
    assert len(results) > 50 and [r.mutant for r in results if r.outcome == "survived"] == []

"""Special functions as the generated NumPy code evaluates them: erf for float32 arrays.

The formulas use erf (GELU's Φ(x) = (1 + erf(x/√2))/2). NumPy has no erf; SciPy's float32 loop
runs the double-precision Cephes routine one element at a time (~25 ns an element on these
machines: GELU's forward spent more time in erf than in its matmuls). So for float32 arrays the
generated code evaluates erf as a rational function, in float32 throughout:

    erf(x) ≈ R(x) = clip(z · P(z²) / Q(z²), −1, 1),   z = clip(x, −c, c),   c = 255/64,

P and Q of degree 5 in t = z²: the minimax fit of erf(x)/x on t ∈ [0, 16] (relative error, Remez
algorithm), then rounded to float32 one coefficient at a time, the others re-fitted after each;
the decimals below are the shortest that round to those float32 values, which is what the code
computes with. float64 arrays still get SciPy's erf.

Why float32, and what it costs. Every float32 operation rounds with relative error ≤ 2⁻²⁴, up to
one ulp of a result just below 1, and the evaluation makes 23 of them per element (z², ten
Horner operations each on P and Q, z·P, the division), most of them at full weight where erf(x) ≈ 1
(every term of P and Q is positive, so none cancels, and none is damped either). They add up like
a random walk: over every positive float32 input the error is ≤ 8.3 ulp against erf (measured,
see `float32_errors`; the worst near x ≈ 3.66); uniformly over [0, c] it averages 0.96 ulp, 38 %
of points over 1 ulp and 11 % over 2 (0.56 ulp, 16 % over 1 on [0, 1]). The fit itself is within
3.1e-8 relative (half an ulp): evaluated in float64 and rounded once, as the code did before, it
stays within 1.2 ulp, but that costs twice the time (~7.5 ns an element against ~3.5 ns for the
float32 version, whose P and Q are the two rows of one (2, n) array: 15 NumPy calls per block).
No pure-float32 rearrangement we tried does better: a Möbius change of variable, a continued
fraction or partial fractions of the minimax rational all cancel (its poles are complex), and
erf(x) = z/√(t + h(t)) needs a higher degree for h. An error of a few ulp of erf is a relative
error ≤ 5e-7 in GELU's (1 + erf)/2 for x ≥ 0; for x < 0 that sum cancels, and a correctly rounded
erf loses as much there.

The clamp c = 255/64 satisfies erfc(c) < 2⁻²⁵, so erf(x) rounds to ±1 in float32 for |x| ≥ c;
and R's float32 value at ±c is ±1 exactly (with the final clip, which also keeps |R| ≤ 1 where
the evaluation error lands above 1).

This is a floating-point evaluation of erf, like np.exp's own polynomial, not a new formula: the
proofs keep the symbol erf. The evaluation is written once, as data (ARGUMENT, RATIONAL, BOUND,
AFFINE below: one NumPy operation each): codegen prints it into generated/numpy/_special.py,
`RationalApproximation.evaluate` runs it in float32 for the claim, and `_worst` runs it in mpmath
for the fit. The claim `special.erf_float32` records the measurements (numeric
evidence, not a theorem); its mutants (a perturbed coefficient, no clamp, Q dropped) fail it.
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath
import sympy as sp

from .language.arrays import NormalCDF, document_form
from .proof.core import Claim, Mutant, Proof

# erf(z)/z ≈ P(t)/Q(t), t = z²: lowest power first; float32 values (shortest decimals)
ERF_P = tuple(
    sp.Rational(c) for c in ("1.128145", "0.1933392", "0.05305922", "0.0038723636", "0.0002837446", "0.000001980919")
)
ERF_Q = tuple(
    sp.Rational(c) for c in ("0.99979246", "0.504606", "0.1152486", "0.015184794", "0.0011818252", "0.00003731548")
)
ERF_CLAMP = sp.Rational(255, 64)  # 3.984375: erfc(c) ≈ 1.8e-8 < 2⁻²⁵
ERF_REL_BOUND = sp.Rational(31, 10**9)  # the fit: |R(x) − erf(x)| ≤ 3.1e-8 |erf(x)|
ERF_ULP_BOUND = sp.Rational(17, 2)  # its float32 evaluation: ≤ 8.5 ulp of erf(x)


@dataclass(frozen=True)
class Operation:
    """One elementwise operation of an evaluation: `out = ufunc(*args)`, written into `out`.

    `ufunc` is the name of a NumPy ufunc (clip, multiply, add, divide). An operand is the name of
    a buffer (`x`: the input; `z`, `t`, `pq`, `r`), a row of one (`("pq", 0)`), a coefficient
    column (`("C", k)`: P's and Q's coefficient of t^k as a (2, 1) column), a constant of the
    approximation (`clamp`, `bound`, negated as `-clamp`, `-bound`), or a parameter of the affine
    map around it (`scale`, `outer`, `shift`). `note` is the comment its generated line carries."""

    ufunc: str
    out: str
    args: tuple
    note: str = ""


@dataclass(frozen=True)
class Loop:
    """`for <var> in <columns>: <body>`: the operations of `body` once per coefficient column of
    `columns` = ("C", start, stop, step) (a slice of the columns), `var` bound to it."""

    var: str
    columns: tuple
    body: tuple


# The evaluation of R(x), one operation a line: what generated/numpy/_special.py runs over each
# block of the input (codegen prints these lines), what the claim measures in float32
# (`RationalApproximation.evaluate` runs them with NumPy) and, without rounding, the fit's error
# (`_worst` runs them with mpmath at 30 digits). Written once, here.
ARGUMENT = (Operation("clip", "z", ("x", "-clamp", "clamp"), "z = clip(x)"),)
SCALED_ARGUMENT = (
    Operation("multiply", "z", ("x", "scale")),  # Φ: erf(x·(1/√2))
    Operation("clip", "z", ("z", "-clamp", "clamp"), "z = clip(scale·x)"),
)
RATIONAL = (
    Operation("multiply", "t", ("z", "z"), "t = z²"),
    # P(t) and Q(t) together, the two rows of pq, by Horner's rule: c_n·t + c_{n−1}, then
    # ·t + c_k for k = n−2 … 0
    Operation("multiply", "pq", ("t", ("C", -1)), "rows P(t), Q(t) by Horner's rule"),
    Operation("add", "pq", ("pq", ("C", -2))),
    Loop("c", ("C", -3, None, -1), (Operation("multiply", "pq", ("pq", "t")), Operation("add", "pq", ("pq", "c")))),
    Operation("multiply", "r", (("pq", 0), "z")),
    Operation("divide", "r", ("r", ("pq", 1)), "z·P(t)/Q(t)"),
)
BOUND = (Operation("clip", "r", ("r", "-bound", "bound"), "|R| ≤ {bound}"),)
AFFINE = (
    Operation("multiply", "r", ("r", "outer")),  # Φ: ½·erf + ½
    Operation("add", "r", ("r", "shift"), "outer·R + shift"),
)


def run(program, x, constants: dict, columns, funcs: dict):
    """The value of `r` after `program` on the input `x`: each operation `funcs[ufunc](*values)`
    (NumPy's ufuncs, or mpmath's arithmetic); `constants` give clamp, bound (None: that clip is
    skipped), scale, outer, shift; `columns` the coefficient columns."""
    env = {"x": x, "C": columns}

    def value(a):
        if isinstance(a, tuple):
            name, k = a
            return env[name][k]
        if a in env:
            return env[a]
        return -constants[a[1:]] if a.startswith("-") else constants[a]

    def execute(ops):
        for op in ops:
            if isinstance(op, Loop):
                name, start, stop, step = op.columns
                for column in env[name][start:stop:step]:
                    env[op.var] = column
                    execute(op.body)
            elif op.ufunc == "clip" and any(
                constants.get(a.lstrip("-"), 0) is None for a in op.args if isinstance(a, str)
            ):
                env[op.out] = value(op.args[0])  # no clamp (a mutant): the value itself
            else:
                env[op.out] = funcs[op.ufunc](*[value(a) for a in op.args])

    execute(program)
    return env["r"]


@dataclass(frozen=True)
class RationalApproximation:
    """f(x) ≈ clip(z · P(t)/Q(t), −bound, bound), z = clip(x, −clamp, clamp), t = z² — what codegen
    prints for `function` on arrays of `dtype`: the operations ARGUMENT, RATIONAL, BOUND above (P
    and Q by Horner's rule, evaluated together in `compute_dtype`; no final clip when bound is
    None)."""

    function: type
    dtype: str
    compute_dtype: str
    numerator: tuple
    denominator: tuple
    clamp: sp.Expr
    bound: sp.Expr | None
    doc: str

    def __post_init__(self):
        if max(len(self.numerator), len(self.denominator)) < 2:
            raise ValueError(f"{self.function.__name__}: Horner's rule above needs two coefficients")

    def coefficient_rows(self, numerator=None, denominator=None) -> list:
        """[P's, Q's] coefficients, lowest power first, zero-padded to one length."""
        p, q = numerator or self.numerator, denominator or self.denominator
        n = max(len(p), len(q))
        return [list(p) + [0] * (n - len(p)), list(q) + [0] * (n - len(q))]

    def program(self) -> tuple:
        return ARGUMENT + RATIONAL + (BOUND if self.bound is not None else ())

    def evaluate(self, x, numerator=None, denominator=None, clamp="default"):
        """R(x) for a NumPy array x, operation by operation as generated/numpy/_special.py
        computes it (`program()`), in `compute_dtype` (other coefficients or clamp to try
        variants; clamp=None: no clamp)."""
        import numpy as np

        dt = np.dtype(self.compute_dtype)
        pq = np.array([[float(c) for c in row] for row in self.coefficient_rows(numerator, denominator)], dtype=dt)
        c = self.clamp if clamp == "default" else clamp
        constants = {
            "clamp": None if c is None else float(c),
            "bound": None if self.bound is None else float(self.bound),
        }
        funcs = {name: getattr(np, name) for name in ("clip", "multiply", "add", "divide")}
        with np.errstate(over="ignore", invalid="ignore"):
            return run(
                self.program(),
                np.asarray(x, dtype=dt),
                constants,
                tuple(pq[:, k : k + 1] for k in range(pq.shape[1])),
                funcs,
            )


ERF_FLOAT32 = RationalApproximation(
    function=sp.erf,
    dtype="float32",
    compute_dtype="float32",
    numerator=ERF_P,
    denominator=ERF_Q,
    clamp=ERF_CLAMP,
    bound=sp.Integer(1),
    doc="erf for float32 arrays: clip(z·P(z²)/Q(z²), −1, 1), z = clip(x, −255/64, 255/64), in "
    "float32 (the fit within 3.1e-8 relative, its float32 evaluation within 8.5 ulp, claim "
    "special.erf_float32); float64 arrays use SciPy's erf",
)
APPROXIMATIONS = [ERF_FLOAT32]


@dataclass(frozen=True)
class AffineOfApproximation:
    """f(x) = outer_scale · g(inner_scale · x) + outer_shift with g an approximation above:
    what codegen prints for the array-language node `function`, the scaling and the affine map
    done inside g's cache-sized blocks (no extra passes over the whole array)."""

    name: str
    function: type
    approximation: RationalApproximation
    inner_scale: sp.Expr
    outer_scale: sp.Expr
    outer_shift: sp.Expr
    doc: str

    def expr(self, x) -> sp.Expr:
        """f(x) with g exact: must be the node's document formula."""
        return self.outer_scale * self.approximation.function(self.inner_scale * x) + self.outer_shift


# Φ(x) = (1 + erf(x/√2))/2 = ½·erf(x·(1/√2)) + ½: GELU's normal CDF in one call
NDTR_FLOAT32 = AffineOfApproximation(
    name="ndtr",
    function=NormalCDF,
    approximation=ERF_FLOAT32,
    inner_scale=1 / sp.sqrt(2),
    outer_scale=sp.Rational(1, 2),
    outer_shift=sp.Rational(1, 2),
    doc="the standard normal CDF Φ(x) = (1 + erf(x/√2))/2 for float32 arrays: erf above at "
    "x·(1/√2), then ½·erf + ½, inside the same blocks (absolute error ≤ ~5e-7); float64 arrays "
    "use SciPy's ndtr",
)
COMPOSED = [NDTR_FLOAT32]
_u = sp.Symbol("u", real=True)
for _f in COMPOSED:  # the printed map is the node's formula, exactly
    assert sp.simplify(_f.expr(_u) - document_form(_f.function(_u))) == 0, _f.name

# --------------------------------------------------------------------------------- the claim
GRID = 4000  # points on [0, 6] (erf is odd and R is odd: x ≥ 0 suffices)
_DPS = 30
F32_STRIDE = 257  # float32 grid: every 257th positive float32 below the clamp (4.2 M of them)


def _float32_values(coeffs) -> list:
    """The coefficients as the code holds them: rounded to float32, as exact mpmath numbers."""
    import numpy as np

    return [mpmath.mpf(float(np.float32(float(c)))) for c in coeffs]


def _worst(numerator, denominator, clamp, points=GRID) -> tuple:
    """max over the grid of |R(x) − erf(x)| / |erf(x)| (x > 0), at 30 digits, and where; R with
    float32 coefficients and no rounding otherwise (the fit, not its evaluation): the operations
    ARGUMENT and RATIONAL in mpmath."""
    funcs = {
        "clip": lambda v, lo, hi: max(lo, min(hi, v)),
        "multiply": lambda a, b: a * b,
        "add": lambda a, b: a + b,
        "divide": lambda a, b: a / b,
    }
    with mpmath.workdps(_DPS):
        rows = [_float32_values(row) for row in ERF_FLOAT32.coefficient_rows(numerator, denominator)]
        columns = [mpmath.matrix([[p], [q]]) for p, q in zip(*rows)]
        constants = {"clamp": mpmath.mpf(clamp.p) / clamp.q if clamp is not None else None}
        worst, at = mpmath.mpf(0), None
        for k in range(1, points + 1):
            x = mpmath.mpf(6) * k / points
            r = run(ARGUMENT + RATIONAL, x, constants, columns, funcs)
            e = abs(r - mpmath.erf(x)) / mpmath.erf(x)
            if e > worst:
                worst, at = e, x
    return worst, at


def float32_ulps(got, ref):
    """|got − ref| in float32 ulps of ref: 2^(e−24) for |ref| ∈ [2^(e−1), 2^e), 2⁻¹⁴⁹ below the
    normal range (so a result that rounds up to 1 is still counted in ulps below 1)."""
    import numpy as np

    _, e = np.frexp(np.abs(ref))
    return np.abs(np.asarray(got, dtype=np.float64) - ref) / np.ldexp(1.0, np.maximum(e - 24, -149))


def float32_errors(stride=F32_STRIDE, approx=ERF_FLOAT32, **mutation) -> dict:
    """The float32 evaluation against SciPy's float64 erf (within 1e-16 relative) at every
    `stride`-th positive float32 below the clamp (stride=1: all 1.08e9 of them, ~1 minute),
    at 2²⁰ points evenly spaced on [0, c], and on [c, 7] and ±inf (c included): the worst error
    in ulps and where, the share of those float32 inputs (mostly tiny ones) and of the evenly
    spaced points over 1 and 2 ulp, the largest |R|, and whether |x| ≥ c gives exactly ±1."""
    import numpy as np
    import scipy.special

    top = int(np.float32(float(approx.clamp)).view(np.int32))
    worst, at, over1, over2, biggest, n = 0.0, 0.0, 0, 0, 0.0, 0
    for start in range(1, top + 1, stride << 22):
        x = np.arange(start, min(start + (stride << 22), top + 1), stride, dtype=np.int32).view(np.float32)
        got = approx.evaluate(x, **mutation)
        u = float32_ulps(got, scipy.special.erf(x.astype(np.float64)))
        i = int(np.argmax(u))
        if u[i] > worst:
            worst, at = float(u[i]), float(x[i])
        over1, over2, n = over1 + int((u > 1).sum()), over2 + int((u > 2).sum()), n + x.size
        biggest = max(biggest, float(np.abs(got).max()))
    beyond = np.concatenate([np.linspace(float(approx.clamp), 7, 1001, dtype=np.float32), [np.inf, 1e30]])
    beyond = np.concatenate([beyond, -beyond]).astype(np.float32)
    got = approx.evaluate(beyond, **mutation)
    u = float32_ulps(got, scipy.special.erf(beyond.astype(np.float64)))
    if u.max() > worst:
        worst, at = float(u.max()), float(beyond[int(np.argmax(u))])
    saturates, biggest = bool(np.array_equal(got, np.sign(beyond))), max(biggest, float(np.abs(got).max()))
    even = np.linspace(0, float(approx.clamp), 1 << 20, dtype=np.float32)  # uniform in x
    u = float32_ulps(approx.evaluate(even, **mutation), scipy.special.erf(even.astype(np.float64)))
    if u.max() > worst:
        worst, at = float(u.max()), float(even[int(np.argmax(u))])
    return {
        "max_ulp": worst,
        "at": at,
        "points": n + beyond.size + even.size,
        "inputs_over_1_ulp": over1 / n,
        "inputs_over_2_ulp": over2 / n,
        "uniform_mean_ulp": float(u.mean()),
        "uniform_over_1_ulp": float((u > 1).mean()),
        "uniform_over_2_ulp": float((u > 2).mean()),
        "max_abs": biggest,
        "saturates": saturates,
    }


def _tail() -> mpmath.mpf:
    with mpmath.workdps(_DPS):
        return mpmath.erfc(mpmath.mpf(ERF_CLAMP.p) / ERF_CLAMP.q)


def _prove() -> Proof:
    worst, at = _worst(ERF_P, ERF_Q, ERF_CLAMP)
    tail = _tail()
    f32 = float32_errors()
    ok = (
        worst <= mpmath.mpf(ERF_REL_BOUND.p) / ERF_REL_BOUND.q
        and tail < mpmath.mpf(1) / 2**25
        and f32["max_ulp"] <= float(ERF_ULP_BOUND)
        and f32["saturates"]
        and f32["max_abs"] <= 1
    )
    status = "evidence" if ok else "unproven"
    return Proof(
        status,
        f"the fit: measured at {GRID} points of (0, 6] with mpmath at {_DPS} digits (R and erf are "
        "odd), with the float32 coefficients; plus erfc(c) < 2⁻²⁵, so erf(x) rounds to ±1 in float32 "
        f"for |x| ≥ c. Its float32 evaluation: every {F32_STRIDE}th positive float32 below c, 2²⁰ even "
        "points of [0, c], [c, 7] and ±inf, step by step as the generated code, against SciPy's "
        "float64 erf, in float32 ulps of erf(x)",
        [
            "grid measurements, not bounds between grid points (the fit's error curve is smooth, its "
            "extrema spaced ~0.1 apart, the grid 0.0015; all 1.08e9 positive float32 inputs below c, "
            "checked once with float32_errors(stride=1), gave at most 8.3 ulp, at x ≈ 3.664)",
            "NumPy's float32 add, multiply, divide and clip round as IEEE 754 does (no fused "
            "multiply-add), so the measurement holds wherever the generated code runs",
        ],
        "—",
        evidence={
            "max_relative_error": float(worst),
            "at": float(at),
            "claimed": float(ERF_REL_BOUND),
            "erfc_at_clamp": float(tail),
            "float32_half_ulp": 2.0**-24,
            "float32_max_ulp": f32["max_ulp"],
            "float32_max_ulp_at": f32["at"],
            "float32_claimed_ulp": float(ERF_ULP_BOUND),
            "float32_points": f32["points"],
            "float32_uniform_mean_ulp": f32["uniform_mean_ulp"],
            "float32_uniform_over_1_ulp": f32["uniform_over_1_ulp"],
            "float32_uniform_over_2_ulp": f32["uniform_over_2_ulp"],
            "float32_saturates": f32["saturates"],
            "float32_max_abs": f32["max_abs"],
        },
    )


def _refute(numerator, denominator, clamp):
    worst, at = _worst(numerator, denominator, clamp, points=400)
    if worst > mpmath.mpf(ERF_REL_BOUND.p) / ERF_REL_BOUND.q:
        return {"at": {"x": float(at)}, "relative_error": float(worst), "claimed": float(ERF_REL_BOUND)}
    return None


erf_float32 = Claim(
    id="special.erf_float32",
    title="float32 erf: z·P(z²)/Q(z²) is within 3.1e-8 (relative) of erf, evaluated in float32 within 8.5 ulp",
    source="numerical evaluation of erf (GELU, seed B §12)",
    latex=r"\left|\frac{z P(z^{2})}{Q(z^{2})} - \operatorname{erf}(x)\right| \le 3.1 \cdot 10^{-8} "
    r"\left|\operatorname{erf}(x)\right|, \quad z = \max(-c, \min(c, x)), \quad c = \frac{255}{64}, "
    r"\quad \operatorname{erfc}(c) < 2^{-25}, \quad \text{float32 evaluation within } 8.5 \text{ ulp}",
    prove=_prove,
    mutants=[
        Mutant(
            "coefficient-typo",
            "the t³ coefficient of P off in its fourth digit",
            lambda: _refute(ERF_P[:3] + (ERF_P[3] * sp.Rational(1001, 1000),) + ERF_P[4:], ERF_Q, ERF_CLAMP),
        ),
        Mutant(
            "no-clamp", "no clamp at ±c: the rational leaves erf for large |x|", lambda: _refute(ERF_P, ERF_Q, None)
        ),
        Mutant(
            "denominator-dropped", "erf(x) ≈ z·P(z²) (Q forgotten)", lambda: _refute(ERF_P, (sp.Integer(1),), ERF_CLAMP)
        ),
    ],
)

CLAIMS: list[Claim] = [erf_float32]

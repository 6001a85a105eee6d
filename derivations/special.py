"""Special functions as the generated NumPy code evaluates them: erf for float32 arrays.

The formulas use erf (GELU's Φ(x) = (1 + erf(x/√2))/2). NumPy has no erf; SciPy's float32 loop
runs the double-precision Cephes routine one element at a time (~25 ns an element on these
machines: GELU's forward spent more time in erf than in its matmuls). So for float32 arrays the
generated code evaluates erf as a rational function, in float64, rounded once to float32:

    erf(x) ≈ R(x) = z · P(z²) / Q(z²),   z = clamp(x, −4, 4),

P of degree 6 and Q of degree 5 in z² (a weighted least-squares fit of erf(x)/x on [0, 4]; the
coefficients below are those floats, written exactly). float64 arrays still get SciPy's erf.

This is a floating-point evaluation of erf, like np.exp's own polynomial, not a new formula:
the proofs keep the symbol erf. The claim `special.erf_float32` records the measured accuracy
(numeric evidence, not a theorem): relative error ≤ 1.2e-8 against mpmath's erf at 30 digits,
far below float32's half-ulp 2⁻²⁴ ≈ 6e-8, and erfc(4) < 2⁻²⁵ so that every |x| ≥ 4 rounds to ±1
in float32 exactly as erf(x) does. Its mutants (a perturbed coefficient, no clamp) fail it.
"""
from __future__ import annotations

from dataclasses import dataclass

import mpmath
import sympy as sp

from .core import Claim, Mutant, Proof

z, t = sp.Symbol("z", real=True), sp.Symbol("t", nonnegative=True)

# erf(z)/z ≈ P(t)/Q(t), t = z²: lowest power first
ERF_P = tuple(sp.Rational(c) for c in (
    "1.1283791694403", "0.18514524482776776", "0.054306008380244984", "0.003846897577865663",
    "0.00037942360926602374", "4.680629433973654e-06", "-1.3173701962632123e-08"))
ERF_Q = tuple(sp.Rational(c) for c in (
    "1.0", "0.49741411675007907", "0.11393161812942737", "0.015455907455415209",
    "0.0013067837291311944", "6.307351615646248e-05"))
ERF_CLAMP = sp.Integer(4)
ERF_REL_BOUND = sp.Rational(12, 10**9)          # claimed: |R(x) − erf(x)| ≤ 1.2e-8 |erf(x)|
HALF_ULP_BELOW_ONE = sp.Rational(1, 2**25)     # float32: 1 − 2⁻²⁵ is halfway to the float below 1


@dataclass(frozen=True)
class RationalApproximation:
    """f(x) ≈ z · P(t)/Q(t), z = clamp(x, −clamp, clamp), t = z² — what codegen prints for
    `function` on arrays of `dtype` (P, Q in Horner form, evaluated in `compute_dtype`)."""

    function: type
    dtype: str
    compute_dtype: str
    numerator: tuple
    denominator: tuple
    clamp: sp.Expr
    doc: str

    def polynomial(self, coeffs) -> sp.Expr:
        return sp.Add(*[c * t**k for k, c in enumerate(coeffs)])

    def expr(self, x) -> sp.Expr:
        """R(x) as a SymPy expression of x (what the code computes, before rounding)."""
        zz = sp.Max(-self.clamp, sp.Min(self.clamp, x))
        return zz * self.polynomial(self.numerator).subs(t, zz**2) / self.polynomial(self.denominator).subs(t, zz**2)


ERF_FLOAT32 = RationalApproximation(
    function=sp.erf, dtype="float32", compute_dtype="float64", numerator=ERF_P, denominator=ERF_Q,
    clamp=ERF_CLAMP,
    doc="erf for float32 arrays: z·P(z²)/Q(z²), z = clamp(x, −4, 4), evaluated in float64 and rounded "
        "once (relative error ≤ 1.2e-8, claim special.erf_float32); float64 arrays use SciPy's erf")
APPROXIMATIONS = [ERF_FLOAT32]

# --------------------------------------------------------------------------------- the claim
GRID = 4000          # points on [0, 6] (erf is odd and R is odd: x ≥ 0 suffices)
_DPS = 30


def _worst(numerator, denominator, clamp, points=GRID) -> tuple:
    """max over the grid of |R(x) − erf(x)| / |erf(x)| (x > 0), at 30 digits, and where."""
    with mpmath.workdps(_DPS):
        p = [mpmath.mpf(sp.Rational(c).p) / sp.Rational(c).q for c in numerator]
        q = [mpmath.mpf(sp.Rational(c).p) / sp.Rational(c).q for c in denominator]
        cl = mpmath.mpf(int(clamp)) if clamp is not None else None
        worst, at = mpmath.mpf(0), None
        for k in range(1, points + 1):
            x = mpmath.mpf(6) * k / points
            zz = min(x, cl) if cl is not None else x
            tt = zz * zz
            r = zz * mpmath.polyval(p[::-1], tt) / mpmath.polyval(q[::-1], tt)
            e = abs(r - mpmath.erf(x)) / mpmath.erf(x)
            if e > worst:
                worst, at = e, x
    return worst, at


def _tail() -> mpmath.mpf:
    with mpmath.workdps(_DPS):
        return mpmath.erfc(int(ERF_CLAMP))


def _prove() -> Proof:
    worst, at = _worst(ERF_P, ERF_Q, ERF_CLAMP)
    tail = _tail()
    ok = worst <= mpmath.mpf(ERF_REL_BOUND.p) / ERF_REL_BOUND.q and tail < mpmath.mpf(1) / 2**25
    status = "evidence" if ok else "unproven"
    return Proof(
        status,
        f"measured at {GRID} points of (0, 6] with mpmath at {_DPS} digits (R and erf are odd); "
        "plus erfc(4) < 2⁻²⁵, so erf(x) and R(clamp(x)) both round to ±1 in float32 for |x| ≥ 4",
        ["a grid measurement, not a bound between grid points (the fit's error curve is smooth, "
         "its extrema spaced ~0.1 apart, the grid 0.0015)"], "—",
        evidence={"max_relative_error": float(worst), "at": float(at), "claimed": float(ERF_REL_BOUND),
                  "erfc_at_clamp": float(tail), "float32_half_ulp": 2.0**-24})


def _refute(numerator, denominator, clamp):
    worst, at = _worst(numerator, denominator, clamp, points=400)
    if worst > mpmath.mpf(ERF_REL_BOUND.p) / ERF_REL_BOUND.q:
        return {"at": {"x": float(at)}, "relative_error": float(worst), "claimed": float(ERF_REL_BOUND)}
    return None


erf_float32 = Claim(
    id="special.erf_float32", title="float32 erf: z·P(z²)/Q(z²) is within 1.2e-8 (relative) of erf",
    source="numerical evaluation of erf (GELU, seed B §12)",
    latex=r"\left|\frac{z P(z^{2})}{Q(z^{2})} - \operatorname{erf}(x)\right| \le 1.2 \cdot 10^{-8} "
          r"\left|\operatorname{erf}(x)\right|, \quad z = \max(-4, \min(4, x)), \quad "
          r"\operatorname{erfc}(4) < 2^{-25}",
    prove=_prove,
    mutants=[
        Mutant("coefficient-typo", "the t³ coefficient of P off in its fourth digit",
               lambda: _refute(ERF_P[:3] + (ERF_P[3] * sp.Rational(1001, 1000),) + ERF_P[4:], ERF_Q, ERF_CLAMP)),
        Mutant("no-clamp", "no clamp at ±4: the rational leaves erf for large |x|",
               lambda: _refute(ERF_P, ERF_Q, None)),
        Mutant("denominator-dropped", "erf(x) ≈ z·P(z²) (Q forgotten)",
               lambda: _refute(ERF_P, (sp.Integer(1),), ERF_CLAMP)),
    ])

CLAIMS: list[Claim] = [erf_float32]

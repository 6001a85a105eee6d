"""Dropout (inverted): y = x ⊙ m / (1 − p), m a keep mask of i.i.d. Bernoulli(1 − p) entries.

Srivastava et al., "Dropout: A Simple Way to Prevent Neural Networks from Overfitting" (2014),
in the inverted form every framework trains with (`torch.nn.functional.dropout`): the kept
entries are scaled by 1/(1 − p) while training, so that evaluation needs no rescaling. The mask
is an input the caller draws (its randomness is data, not mathematics); the kernels are the
deterministic map y = x ⊙ m/(1 − p), and the derived backward is dx = dy ⊙ m/(1 − p). The drop
rate p is an option, refused outside 0 ≤ p < 1 (1 − p is a denominator).

Why the scale is 1/(1 − p), proved here for a symbolic row length `n`, with the mask's entries
i.i.d. Bernoulli(1 − p) (mean 1 − p, variance p(1 − p)) and every expectation taken by the
operator of `proof/expectation.py` on the op's own specification (a wrong spec is refuted):

* `dropout.expectation` — E[y_j] = x_j, and E[Σ_j w_j y_j] = Σ_j w_j x_j: every linear read-out
  of a row (the next layer's pre-activation) is unbiased, so training and evaluation agree in
  expectation;
* `dropout.variance` — Var(y_j) = x_j² p/(1 − p), and Var(Σ_j w_j y_j) = p/(1 − p) Σ_j w_j² x_j²:
  the noise dropout adds, 0 at p = 0 and unbounded as p → 1.

`sympy.stats` with `Bernoulli(1 − p)` at p = 1/5 (nanoGPT's shakespeare_char rate) and n = 3 is
recorded beside each proof as a cross-check (never as the proof).
"""

from __future__ import annotations

import sympy as sp

from .language.arrays import Array, Assign, entry, index, size
from .language.ops import Op, Option
from .proof.core import Claim, Proof, Setting, identity_mutants, prove_index_identity
from .proof.expectation import Expectation, RandomVector, with_stats_cross_check

SOURCE = "Srivastava et al. 2014 (inverted dropout, as torch.nn.functional.dropout)"

r, n = size("r"), size("n")
x, mask, y = Array("x", (r, n)), Array("mask", (r, n)), Array("y", (r, n))
p = sp.Symbol("p", nonnegative=True)

DROPOUT = Op(
    name="dropout",
    title="Dropout (inverted scaling)",
    source=SOURCE,
    inputs=[x, mask],
    constant_inputs=[mask],  # drawn by the caller: no gradient
    outputs=[y],
    spec=[Assign(y, x * mask / (1 - p))],  # y = x ⊙ m / (1 − p)
    options=[Option(p, "p", 0.0, "the drop rate p: 0 ≤ p < 1", domain=sp.Interval.Ropen(0, 1))],
    optional_axes=2,
    claims=["dropout.expectation", "dropout.variance"],  # after the generated forward and backward
    reference=lambda torch, x, mask, p=0.0: x * mask / (1 - p),
)

OPS = [DROPOUT]

# ------------------------------------------------------------------ the mask's distribution
# one row of the mask: entries i.i.d. Bernoulli(1 − p), whose cumulants are those of the
# indicator of an event of probability q = 1 − p: κ₁ = q, κ₂ = q(1 − q), κ₃ = q(1 − q)(1 − 2q)
keep = 1 - p
m = RandomVector("m", mean=keep, variance=p * keep, higher={3: keep * p * (1 - 2 * keep)})
E = Expectation(m)

i, j = index("i"), index("j")
xs = sp.IndexedBase("x", real=True)  # the row of x the mask multiplies (deterministic)
w = sp.IndexedBase("w", real=True)  # a read-out of the row (the next layer's weights)


def _row_entry(spec_expr) -> sp.Expr:
    """Entry j of row i of `spec_expr` (an expression in x and mask), the mask's entries read as
    the random row m and x's as the deterministic row x_j."""
    e = entry(spec_expr, (i, j))
    return e.xreplace({mask.base[i, j]: m[j], x.base[i, j]: xs[j]})


def _readout(y_j) -> sp.Expr:
    """Σ_j w_j y_j over the row."""
    return sp.Sum(w[j] * y_j, (j, 0, n - 1))


setting = Setting(sizes={n: 3}, indices={j: (0, n - 1)}, scalars={p: sp.Rational(1, 5)})

ASSUMPTIONS = [
    "the mask's entries i.i.d. Bernoulli(1 − p): mean 1 − p, variance p(1 − p)",
    "x and w fixed (the mask independent of them); 0 ≤ p < 1; n a symbolic positive integer",
]


def _stats_rows(stat: str, expr, claimed) -> list[dict]:
    """`sympy.stats` (`stat`: "E" or "variance") of the read-out Σ_j w_j y_j with the spec's entry
    `expr` and Bernoulli(1 − p) masks at p = 1/5 and n = 3, against the claim's value there."""
    from sympy import stats

    p0, n0 = sp.Rational(1, 5), 3
    ms = [stats.Bernoulli(f"m{k}", 1 - p0) for k in range(n0)]
    xv = [sp.Symbol(f"x{k}", real=True) for k in range(n0)]
    wv = [sp.Symbol(f"w{k}", real=True) for k in range(n0)]
    readout = sum(wv[k] * expr.xreplace({m[j]: ms[k], xs[j]: xv[k], p: p0}) for k in range(n0))
    got = sp.expand(getattr(stats, stat)(readout))
    concrete = {xs[k]: xv[k] for k in range(n0)} | {w[k]: wv[k] for k in range(n0)}
    want = sp.expand(claimed.subs({n: n0, p: p0}).doit().xreplace(concrete))
    return [
        {
            "distribution": "bernoulli(4/5)",
            "n": n0,
            "sympy.stats": str(got),
            "expected": str(want),
            "agree": got == want,
        }
    ]


def _claim(id, title, latex, lhs, rhs, stat, mutants) -> Claim:
    def prove() -> Proof:
        proof = prove_index_identity(lhs, rhs, setting, "index normaliser (symbolic n)")
        if proof.status != "proved-general":
            return proof
        rows = _stats_rows(stat, y_j, rhs[1])
        return with_stats_cross_check(proof, rows, ASSUMPTIONS, "linearity, E[m_i m_j] = κ₁² + κ₂ δ_ij")

    return Claim(
        id=id,
        title=title,
        source=SOURCE,
        latex=latex,
        prove=prove,
        mutants=identity_mutants(mutants, setting),
    )


# the specification's entry, and the classic mistakes made in it
y_j = _row_entry(DROPOUT.spec[0].expr)
_WRONG_SPECS = {
    "no-rescaling": ("the kept entries not rescaled: y = x ⊙ m", x * mask),
    "divide-by-p": ("the kept entries divided by p, not 1 − p", x * mask / p),
    "times-one-plus-p": ("the kept entries scaled by 1 + p, as if dropping added mass", x * mask * (1 + p)),
}


def _wrong(quantity, claimed):
    """Each wrong spec's `quantity` (of its entry), claimed equal to the right spec's value."""
    return {name: (mistake, quantity(_row_entry(spec)), claimed) for name, (mistake, spec) in _WRONG_SPECS.items()}


expectation = _claim(
    "dropout.expectation",
    "Inverted dropout is unbiased: E[y] = x, and so is every linear read-out of a row",
    r"\mathbb{E}[y_{j}] = \frac{\mathbb{E}[m_{j}]}{1 - p} x_{j} = x_{j}, \quad "
    r"\mathbb{E}\Big[\sum_{j} w_{j} y_{j}\Big] = \sum_{j} w_{j} x_{j}",
    [E.E(y_j), E.E(_readout(y_j))],
    [xs[j], sp.Sum(w[j] * xs[j], (j, 0, n - 1))],
    "E",
    _wrong(E.E, xs[j]),
)

variance = _claim(
    "dropout.variance",
    "The noise inverted dropout adds: Var(y_j) = x_j² p/(1 − p)",
    r"\mathrm{Var}(y_{j}) = \frac{x_{j}^{2}\,\mathrm{Var}(m_{j})}{(1 - p)^{2}} = \frac{p}{1 - p} x_{j}^{2}, \quad "
    r"\mathrm{Var}\Big(\sum_{j} w_{j} y_{j}\Big) = \frac{p}{1 - p} \sum_{j} w_{j}^{2} x_{j}^{2}",
    [E.var(y_j), E.var(_readout(y_j))],
    [p / (1 - p) * xs[j] ** 2, p / (1 - p) * sp.Sum(w[j] ** 2 * xs[j] ** 2, (j, 0, n - 1))],
    "variance",
    {
        **_wrong(E.var, p / (1 - p) * xs[j] ** 2),
        "squared-rate": ("the variance taken as p² x_j²/(1 − p)²", E.var(y_j), p**2 / (1 - p) ** 2 * xs[j] ** 2),
    },
)

CLAIMS = [expectation, variance]

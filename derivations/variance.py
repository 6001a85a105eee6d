"""Why attention divides by √d_k (seed A §1.B): the variance of a dot product, and saturation.

`attention.variance.*` — theorems, for a symbolic length `d_k` and *any* distribution of the
components with the stated moments (not only the Gaussian): q and k are independent vectors
with i.i.d. components, and every expectation is taken by the operator of `expectation.py`
(linearity, independence, `E[x_i x_j] = m₁² + s₂·δ_ij`); the normaliser sifts the deltas and
sums over the symbolic range. Higher cumulants (κ₃, κ₄, ...) stay symbols, so a proof that
does not mention them holds whatever they are. `sympy.stats` at concrete `d_k` with four
distributions (Normal, Uniform(−√3, √3), Rademacher, Laplace(0, 1/√2)) is recorded beside each
proof as a cross-check (never as the proof); set `QED_SLOW=1` for the full 4 × 4 grid.

`attention.saturation` — not a theorem: a seeded NumPy experiment, recorded as evidence, that
without the 1/√d_k the softmax Jacobian (and the gradient that flows back through it) collapses
as d_k grows, and that with it the norms stay put. `saturation_table()` returns the numbers.
"""

from __future__ import annotations

import os
from functools import cache

import sympy as sp

from .language.arrays import index, size
from .proof.core import Claim, Mutant, Proof, Setting, identity_mutants, prove_index_identity
from .proof.expectation import Expectation, RandomVector, with_stats_cross_check

SOURCE = "seed A §1.B"

d_k = size("d_k")
i = index("i")

# The seed's hypothesis: mean 0, variance 1 (higher cumulants left symbolic: any distribution).
q = RandomVector("q", mean=0, variance=1)
k = RandomVector("k", mean=0, variance=1)
E = Expectation(q, k)

dot = sp.Sum(q[i] * k[i], (i, 1, d_k))  # q·k = Σ_{i=1}^{d_k} q_i k_i

setting = Setting(
    sizes={d_k: 4},
    indices={i: (1, d_k)},
    scalars={
        sp.Symbol("kappa4_q", real=True): 0,
        sp.Symbol("kappa4_k", real=True): 0,
        sp.Symbol("kappa3_q", real=True): 0,
        sp.Symbol("kappa3_k", real=True): 0,
    },
)

ASSUMPTIONS = [
    "q and k independent; components i.i.d. within each vector",
    "E[q_i] = E[k_i] = 0, Var(q_i) = Var(k_i) = 1; higher moments arbitrary (left symbolic)",
    "d_k a symbolic positive integer",
]

# ------------------------------------------------------------------ sympy.stats cross-check
_DISTRIBUTIONS = ("normal", "uniform", "rademacher", "laplace")


def _rv(kind: str, name: str):
    from sympy import stats

    if kind == "normal":
        return stats.Normal(name, 0, 1)
    if kind == "uniform":
        return stats.Uniform(name, -sp.sqrt(3), sp.sqrt(3))
    if kind == "rademacher":
        return stats.FiniteRV(name, {-1: sp.S.Half, 1: sp.S.Half})
    if kind == "laplace":
        return stats.Laplace(name, 0, 1 / sp.sqrt(2))
    raise ValueError(kind)


def _stats_check(quantity, expected, plan, slow_plan=None) -> list[dict]:
    """Evaluate `quantity(qs, ks, d)` with `sympy.stats` at the (distribution, d_k) pairs of
    `plan` (of `slow_plan` when QED_SLOW=1) and compare with `expected(d)`."""
    from sympy import stats

    if os.environ.get("QED_SLOW") == "1" and slow_plan is not None:
        plan = slow_plan
    rows = []
    for kind, dims in plan:
        for d in dims:
            known = kind in _DISTRIBUTIONS
            qs = [_rv(kind, f"q{m}") for m in range(1, d + 1)] if known else None
            ks = [_rv(kind, f"k{m}") for m in range(1, d + 1)] if known else None
            got = sp.nsimplify(sp.simplify(quantity(stats, qs, ks, d)))
            want = sp.sympify(expected(d))
            rows.append(
                {
                    "distribution": kind,
                    "d_k": d,
                    "sympy.stats": str(got),
                    "expected": str(want),
                    "agree": bool(sp.simplify(got - want) == 0),
                }
            )
    return rows


_FULL = [(kind, (1, 2, 3, 4)) for kind in _DISTRIBUTIONS]


def _with_stats(proof: Proof, rows: list[dict]) -> Proof:
    return with_stats_cross_check(proof, rows, ASSUMPTIONS, "linearity, independence, E[x_i x_j] = m1^2 + s2 δ_ij")


def _claim(
    id, title, latex, lhs, rhs, quantity, expected, plan, mutants, slow_plan=None, setting=setting, assumptions=None
):
    def prove() -> Proof:
        proof = prove_index_identity(lhs, rhs, setting, "index normaliser (symbolic d_k)")
        if proof.status != "proved-general":
            return proof
        proof = _with_stats(proof, _stats_check(quantity, expected, plan, slow_plan))
        if assumptions is not None:
            proof.assumptions = assumptions + proof.assumptions[len(ASSUMPTIONS) :]
        return proof

    return Claim(
        id=id,
        title=title,
        source=SOURCE,
        latex=latex,
        prove=prove,
        mutants=identity_mutants(mutants, setting),
    )


# ------------------------------------------------------------------------------- the claims
term = q[i] * k[i]

term_mean = _claim(
    "attention.variance.term_mean",
    "One term of the dot product has mean 0",
    r"\mathbb{E}[q_{i} k_{i}] = \mathbb{E}[q_{i}]\,\mathbb{E}[k_{i}] = 0",
    E.E(term),
    sp.Integer(0),
    lambda st, qs, ks, d: st.E(qs[0] * ks[0]),
    lambda d: 0,
    [("normal", (1,)), ("rademacher", (1,)), ("laplace", (1,))],
    {"no-independence": ("independence forgotten: E[q_i k_i] taken as E[q_i^2]", E.E(term), E.E(q[i] ** 2))},
)

term_var = _claim(
    "attention.variance.term_var",
    "One term of the dot product has variance 1",
    r"\mathrm{Var}(q_{i} k_{i}) = \mathbb{E}[q_{i}^{2}]\,\mathbb{E}[k_{i}^{2}] - \mathbb{E}[q_{i} k_{i}]^{2} = 1",
    E.var(term),
    sp.Integer(1),
    lambda st, qs, ks, d: st.variance(qs[0] * ks[0]),
    lambda d: 1,
    [("normal", (1,)), ("rademacher", (1,)), ("laplace", (1,))],
    {
        "sum-of-variances": (
            "variance of a product taken as the sum of the variances",
            E.var(term),
            E.var(q[i]) + E.var(k[i]),
        )
    },
)

dot_mean = _claim(
    "attention.variance.dot_mean",
    "The dot product q·k has mean 0",
    r"\mathbb{E}[q \cdot k] = \sum_{i=1}^{d_{k}} \mathbb{E}[q_{i} k_{i}] = 0",
    E.E(dot),
    sp.Integer(0),
    lambda st, qs, ks, d: st.E(sum(a * b for a, b in zip(qs, ks))),
    lambda d: 0,
    [("rademacher", (1, 2, 3, 4)), ("normal", (2,))],
    {
        "no-independence": (
            "independence forgotten (k treated as q): E[q·k] = Σ E[q_i^2] = d_k",
            E.E(dot),
            E.E(dot.xreplace({k.base: q.base})),
        )
    },
    slow_plan=_FULL,
)

dot_var = _claim(
    "attention.variance.dot_var",
    "The dot product q·k has variance d_k",
    r"\mathrm{Var}(q \cdot k) = \sum_{i=1}^{d_{k}} \mathrm{Var}(q_{i} k_{i}) = d_{k}",
    E.var(dot),
    d_k,
    lambda st, qs, ks, d: st.variance(sum(a * b for a, b in zip(qs, ks))),
    lambda d: d,
    [("rademacher", (1, 2, 3, 4)), ("normal", (2,)), ("laplace", (2,))],
    {
        "squared": ("variance claimed to grow as d_k^2", E.var(dot), d_k**2),
        "no-independence": (
            "independence forgotten (k treated as q): Var(Σ q_i^2) = d_k(κ4 + 2), 8 for a Gaussian at d_k = 4",
            E.var(dot),
            E.var(dot.xreplace({k.base: q.base})),
        ),
    },
    slow_plan=_FULL,
)

scaled = _claim(
    "attention.variance.scaled",
    "Dividing by √d_k restores mean 0 and variance 1",
    r"\mathbb{E}\left[\frac{q \cdot k}{\sqrt{d_{k}}}\right] = 0, \quad "
    r"\mathrm{Var}\left(\frac{q \cdot k}{\sqrt{d_{k}}}\right) = \frac{1}{d_{k}} \mathrm{Var}(q \cdot k) = 1",
    [E.E(dot / sp.sqrt(d_k)), E.var(dot / sp.sqrt(d_k))],
    [sp.Integer(0), sp.Integer(1)],
    lambda st, qs, ks, d: st.variance(sum(a * b for a, b in zip(qs, ks)) / sp.sqrt(d)),
    lambda d: 1,
    [("uniform", (1,)), ("rademacher", (2, 3, 4))],
    {
        "divide-by-d_k": (
            "scaled by 1/d_k instead of 1/√d_k: the variance is 1/d_k, not 1",
            E.var(dot / d_k),
            sp.Integer(1),
        ),
        "no-scaling": ("no scaling at all: the variance is d_k, not 1", E.var(dot), sp.Integer(1)),
    },
    slow_plan=_FULL,
)

# The general statement: any means and variances (q and k may differ), for symbolic d_k.
qg, kg = RandomVector("q"), RandomVector("k")
Eg = Expectation(qg, kg)
dot_g = sp.Sum(qg[i] * kg[i], (i, 1, d_k))
general_setting = Setting(
    sizes={d_k: 4}, indices={i: (1, d_k)}, scalars={qg.mean: 0.5, kg.mean: -1.5, qg.variance: 2.0, kg.variance: 0.25}
)
_general_rhs = d_k * (qg.variance * kg.variance + qg.mean**2 * kg.variance + kg.mean**2 * qg.variance)
# two small two-point laws with non-zero means, for the sympy.stats cross-check
_LAW_Q = {-1: sp.Rational(1, 4), 2: sp.Rational(3, 4)}  # mean 5/4, variance 27/16
_LAW_K = {0: sp.Rational(1, 2), 3: sp.Rational(1, 2)}  # mean 3/2, variance 9/4


def _general_quantity(st, qs, ks, d):
    qs = [st.FiniteRV(f"a{m}", _LAW_Q) for m in range(d)]
    ks = [st.FiniteRV(f"b{m}", _LAW_K) for m in range(d)]
    return st.variance(sum(a * b for a, b in zip(qs, ks)))


general = _claim(
    "attention.variance.general",
    "Variance of q·k for any means and variances",
    r"\mathrm{Var}(q \cdot k) = d_{k}\left(s_{q} s_{k} + m_{q}^{2} s_{k} + m_{k}^{2} s_{q}\right)",
    Eg.var(dot_g),
    _general_rhs,
    _general_quantity,
    lambda d: _general_rhs.subs(
        {
            d_k: d,
            qg.mean: sp.Rational(5, 4),
            qg.variance: sp.Rational(27, 16),
            kg.mean: sp.Rational(3, 2),
            kg.variance: sp.Rational(9, 4),
        }
    ),
    [("two-point laws", (1, 2, 3))],
    {
        "product-of-variances": (
            "Var(q_i k_i) taken as Var(q_i)Var(k_i), true only for zero means",
            Eg.var(dot_g),
            d_k * qg.variance * kg.variance,
        )
    },
    setting=general_setting,
    assumptions=[
        "q and k independent; components i.i.d. within each vector",
        "E[q_i] = m_q, Var(q_i) = s_q, E[k_i] = m_k, Var(k_i) = s_k (all symbolic)",
        "d_k a symbolic positive integer",
    ],
)

# ------------------------------------------------------------------------- saturation
SATURATION_DIMS = (4, 16, 64, 256, 1024)


@cache
def _saturation(dims=SATURATION_DIMS, n_keys=16, trials=256, seed=0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {
        key: []
        for key in (
            "d_k",
            "logit_std_unscaled",
            "logit_std_scaled",
            "max_prob_unscaled",
            "max_prob_scaled",
            "jacobian_unscaled",
            "jacobian_scaled",
            "grad_unscaled",
            "grad_scaled",
        )
    }
    for d in dims:
        qv = rng.standard_normal((trials, d))
        kv = rng.standard_normal((trials, n_keys, d))
        upstream = rng.standard_normal((trials, n_keys))  # ∂L/∂A for one query row
        logits = np.einsum("td,tnd->tn", qv, kv)
        out["d_k"].append(d)
        for tag, z in (("unscaled", logits), ("scaled", logits / np.sqrt(d))):
            z = z - z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            jac = p[:, :, None] * (np.eye(n_keys)[None] - p[:, None, :])  # A_j(δ_jk − A_k)
            grad = p * (upstream - (upstream * p).sum(axis=1, keepdims=True))  # ∂L/∂S
            out[f"logit_std_{tag}"].append(float(np.std(logits if tag == "unscaled" else logits / np.sqrt(d))))
            out[f"max_prob_{tag}"].append(float(p.max(axis=1).mean()))
            out[f"jacobian_{tag}"].append(float(np.linalg.norm(jac, axis=(1, 2)).mean()))
            out[f"grad_{tag}"].append(float(np.linalg.norm(grad, axis=1).mean()))
    out.update(n_keys=[n_keys], trials=[trials], seed=[seed])
    return out


def saturation_table() -> dict:
    """Mean Frobenius norms of the softmax Jacobian and of ∂L/∂S (random upstream ∂L/∂A) for
    one query against 16 keys, q, k ~ N(0, 1), with and without 1/√d_k: a dict of lists
    (a copy; `d_k` is the x axis of the figure)."""
    return {key: list(v) for key, v in _saturation().items()}


def _prove_saturation() -> Proof:
    t = saturation_table()
    ju, js = t["jacobian_unscaled"], t["jacobian_scaled"]
    collapses = all(b < a for a, b in zip(ju, ju[1:])) and ju[-1] < 0.25 * ju[0]
    steady = max(js) / min(js) < 1.5 and max(t["grad_scaled"]) / min(t["grad_scaled"]) < 1.5
    method = (
        "seeded NumPy experiment (numpy.random.default_rng(0)), 256 trials per d_k, one query "
        "against 16 keys; criteria: the unscaled Jacobian norm decreases strictly with d_k and "
        "ends below 25% of its d_k = 4 value; the scaled norms vary by less than 1.5×"
    )
    status = "evidence" if collapses and steady else "unproven"
    return Proof(
        status,
        method,
        ["q, k ~ N(0, 1) i.i.d.; upstream ∂L/∂A ~ N(0, 1)", "not a theorem: an experiment"],
        residual="-",
        evidence=t,
    )


def _refute_no_difference() -> dict | None:
    t = saturation_table()
    ratio = t["jacobian_scaled"][-1] / t["jacobian_unscaled"][-1]
    if ratio < 2:
        return None
    return {
        "d_k": t["d_k"][-1],
        "jacobian_scaled": t["jacobian_scaled"][-1],
        "jacobian_unscaled": t["jacobian_unscaled"][-1],
        "ratio": ratio,
        "grad_scaled": t["grad_scaled"][-1],
        "grad_unscaled": t["grad_unscaled"][-1],
    }


def _refute_no_collapse() -> dict | None:
    t = saturation_table()
    first, last = t["jacobian_unscaled"][0], t["jacobian_unscaled"][-1]
    if last > 0.5 * first:
        return None
    return {"d_k": [t["d_k"][0], t["d_k"][-1]], "jacobian_unscaled": [first, last], "ratio": last / first}


saturation = Claim(
    id="attention.saturation",
    title="Without 1/√d_k the softmax saturates and its gradient vanishes (numeric evidence)",
    source=SOURCE,
    latex=r"\mathbb{E}\left\| \frac{\partial\, \mathrm{softmax}(s)}{\partial s} \right\|_{F} "
    r"\to 0 \text{ as } d_{k} \to \infty \text{ for } s = q^{T} K, "
    r"\text{ but not for } s = \frac{q^{T} K}{\sqrt{d_{k}}}",
    prove=_prove_saturation,
    mutants=[
        Mutant(
            "no-difference",
            "the claim that scaling by 1/√d_k makes no difference to the gradient",
            _refute_no_difference,
        ),
        Mutant("no-collapse", "the claim that the unscaled Jacobian does not shrink as d_k grows", _refute_no_collapse),
    ],
)

# claim-id prefixes besides this module's ops, tables and steps: why attention divides by √d_k: attention.variance.*
TOPICS = ("attention",)

CLAIMS: list[Claim] = [term_mean, term_var, dot_mean, dot_var, scaled, general, saturation]
OPS: list = []

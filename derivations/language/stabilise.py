"""Overflow-free forms, applied to every printed line: the document's formula in, a stable one out.

A formula can be right and still overflow in floating point: log(1 + e^{u}) is ∞ for u ≥ 89 in
float32 although its value is u; 1/(1 + e^{−u}) divides by ∞ for u ≤ −89; e^{−u²/2} squares u
first (u² = ∞ for |u| > 1.8e19 in float32, a floating-point exception in NumPy, while the
result is 0).
Each `Rewrite` below is one such form: `document(u)` (what a person writes), `stable(u)` (the
same function with every exponential at a non-positive argument, or a library function that
does not overflow) and the claim that proves the two equal for every real u
(derivations/stability.py builds each lemma from these very functions, with u an entry x_ij).

`stabilise(expr)` walks an expression bottom-up and replaces every instance of a document form
by its stable form, instantiated at the matched u (any real expression: the lemma holds for
every real number, so for every value u takes). It returns the new expression and the lemmas it
used; ops cite them (`Op.claims`), and the generated claims still prove the printed lines equal
to the specification directly (the rewrite is not trusted, only recorded).

    softplus        log(1 + e^{u})        → max(u, 0) + log1p(e^{−|u|})
    log σ           log σ(u)              → min(u, 0) − log1p(e^{−|u|})
    sigmoid         1/(1 + e^{−u})        → σ(u)              (printed expit / torch.sigmoid)
                    e^{u}/(1 + e^{u})     → σ(u)
    gaussian        e^{−c u²}, c > 0      → G(√(2c) u)        (the Gaussian node: one helper
                                                               whose u² may overflow to ∞, e^{−∞} = 0)
    normal CDF      c (1 + erf(u/√2))     → 2c Φ(u)           (one library call: ndtr)
    sech²           c (1 − tanh²(u))      → 4c e^{−2|u|}/(1 + e^{−2|u|})²  (no 1 − 1 at large |u|)
    expm1           e^{u} − 1             → expm1(u)          (accurate near 0)

What is left unstable is found by the numerical-edges check (qed/tools/edges.py), which runs
every op of the registry at ±1e4 … 1e300 against the specification in exact arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from .arrays import Gaussian, NormalCDF, Sigmoid

__all__ = ["Rewrite", "REWRITES", "stabilise", "stabilise_assigns"]


@dataclass(frozen=True)
class Rewrite:
    lemma: str  # the claim id that proves document(u) = stable(u)
    title: str
    document: Callable[[sp.Expr], sp.Expr]  # u -> the form a person writes
    stable: Callable[[sp.Expr], sp.Expr]  # u -> the overflow-free form
    match: Callable[[sp.Expr], object]  # an expression -> u where it is document(u), else None


def _one_plus_exp(e):
    """v where e is 1 + e^{v}, else None."""
    if isinstance(e, sp.Add) and len(e.args) == 2 and sp.S.One in e.args:
        rest = e.args[1] if e.args[0] == 1 else e.args[0]
        if isinstance(rest, sp.exp):
            return rest.args[0]
    return None


def _softplus_match(e):
    return _one_plus_exp(e.args[0]) if isinstance(e, sp.log) else None


def _log_sigmoid_match(e):
    return e.args[0].args[0] if isinstance(e, sp.log) and isinstance(e.args[0], Sigmoid) else None


def _sigmoid_match(e):
    """u where e is (1 + e^{−u})^{−1}."""
    if isinstance(e, sp.Pow) and e.exp == -1:
        v = _one_plus_exp(e.base)
        if v is not None:
            return -v
    return None


def _gaussian_match(e):
    """(c, u) where e is e^{−c u²} with c a positive number and u not a number."""
    if not isinstance(e, sp.exp):
        return None
    coeff, rest = e.args[0].as_coeff_Mul()
    if coeff.is_negative and isinstance(rest, sp.Pow) and rest.exp == 2 and not rest.base.is_number:
        return (-coeff, rest.base)
    return None


def _expm1_match(e):
    """u where e is e^{u} − 1."""
    if isinstance(e, sp.Add) and len(e.args) == 2 and sp.S.NegativeOne in e.args:
        rest = e.args[1] if e.args[0] == -1 else e.args[0]
        if isinstance(rest, sp.exp):
            return rest.args[0]
    return None


def _sech2_match(e):
    """(c, u) where e is c (1 − tanh²(u)), c a number (SymPy distributes c over the sum)."""
    if isinstance(e, sp.Add) and len(e.args) == 2:
        const, term = e.args if e.args[0].is_number else e.args[::-1]
        coeff, square = term.as_coeff_Mul()
        if (
            const.is_number
            and const != 0
            and coeff == -const
            and isinstance(square, sp.Pow)
            and square.exp == 2
            and isinstance(square.base, sp.tanh)
        ):
            return (const, square.base.args[0])
    return None


def _normal_cdf_match(e):
    """(c, u) where e is c (1 + erf(u/√2)), c a number (SymPy distributes c over the sum)."""
    if isinstance(e, sp.Add) and len(e.args) == 2:
        const, term = e.args if e.args[0].is_number else e.args[::-1]
        coeff, erf = term.as_coeff_Mul()
        if const.is_number and const != 0 and isinstance(erf, sp.erf) and coeff == const:
            return (const, sp.expand(erf.args[0] * sp.sqrt(2)))
    return None


SOFTPLUS = Rewrite(
    "stability.softplus",
    "softplus without overflow",
    lambda u: sp.log(1 + sp.exp(u)),
    lambda u: sp.Max(u, 0) + log1p(sp.exp(-sp.Abs(u))),
    _softplus_match,
)
LOG_SIGMOID = Rewrite(
    "stability.log_sigmoid",
    "log σ without overflow",
    lambda u: sp.log(Sigmoid(u)),
    lambda u: sp.Min(u, 0) - log1p(sp.exp(-sp.Abs(u))),
    _log_sigmoid_match,
)
SIGMOID = Rewrite(
    "stability.sigmoid_node",
    "1/(1 + e^{−u}) as the sigmoid",
    lambda u: 1 / (1 + sp.exp(-u)),
    lambda u: Sigmoid(u),
    _sigmoid_match,
)
GAUSSIAN = Rewrite(
    "stability.gaussian",
    "e^{−c u²} as the Gaussian node G(√(2c) u), one helper call",
    lambda cu: sp.exp(-cu[0] * cu[1] ** 2),
    lambda cu: Gaussian(sp.sqrt(2 * cu[0]) * cu[1]),
    _gaussian_match,
)
NORMAL_CDF = Rewrite(
    "stability.normal_cdf",
    "c (1 + erf(u/√2)) as 2c Φ(u), the normal CDF (one library call)",
    lambda cu: cu[0] * (1 + sp.erf(cu[1] / sp.sqrt(2))),
    lambda cu: 2 * cu[0] * NormalCDF(cu[1]),
    _normal_cdf_match,
)
SECH2 = Rewrite(
    "stability.sech2",
    "c (1 − tanh²(u)) from e^{−2|u|}: no cancellation at large |u|",
    lambda cu: cu[0] * (1 - sp.tanh(cu[1]) ** 2),
    lambda cu: 4 * cu[0] * sp.exp(-2 * sp.Abs(cu[1])) / (1 + sp.exp(-2 * sp.Abs(cu[1]))) ** 2,
    _sech2_match,
)
EXPM1 = Rewrite("stability.expm1", "e^{u} − 1 as expm1(u)", lambda u: sp.exp(u) - 1, lambda u: expm1(u), _expm1_match)

# in the order they are tried at each node (bottom-up: an inner rewrite comes first)
REWRITES: tuple[Rewrite, ...] = (SOFTPLUS, SIGMOID, LOG_SIGMOID, GAUSSIAN, NORMAL_CDF, SECH2, EXPM1)


# the forms that split on the sign of u (|u|, max, min): applied only where u is linear in one
# array (entry), c·a + b, the case the index normaliser's region reasoning decides (a split on
# the sign of an entry); a compound u (a cubic, a sum of arrays) is left in the document's form,
# where the numerical-edges check judges it, and is best given a line of its own
SIGN_SPLIT = (SOFTPLUS, LOG_SIGMOID, SECH2)


def sign_decidable(u) -> bool:
    """u is c·a + b: a one array (or an entry of one), c a constant of known sign (a number, a
    positive symbol such as the cap), b a number: the normaliser splits on the sign of such a u
    (a = (p − b)/c for p of either sign)."""
    from .arrays import Array

    u = sp.sympify(u)
    arrays = [s for s in u.free_symbols if isinstance(s, Array)] + list(u.atoms(sp.Indexed))
    if len(arrays) != 1:
        return False
    (a,) = arrays
    b, term = u.as_independent(a, as_Add=True)
    coeff = sp.cancel(term / a)
    return bool(
        b.is_number
        and not coeff.has(a)
        and not coeff.free_symbols & {a}
        and (coeff.is_positive or coeff.is_negative)
        and (coeff.is_number or not coeff.has(Array))
    )


def _sigmoid_ratios(e: sp.Mul, used: set) -> sp.Expr:
    """In a product, e^{v} (1 + e^{v})^{−k} → σ(v) σ(−v)^{k−1} and (1 + e^{v})^{−k} → σ(−v)^k:
    1/(1 + e^{v}) = σ(−v) and e^{v} σ(−v) = σ(v) (`stability.sigmoid_node`,
    `stability.sigmoid_ratio`)."""
    factors = list(e.args)
    changed = False
    for k, f in enumerate(factors):
        if not (isinstance(f, sp.Pow) and f.exp.is_Integer and f.exp < 0):
            continue
        v = _one_plus_exp(f.base)
        if v is None:
            continue
        power = -int(f.exp)
        numerator = next((m for m, g in enumerate(factors) if m != k and g == sp.exp(v)), None)
        if numerator is not None:
            factors[k] = Sigmoid(v) * Sigmoid(-v) ** (power - 1)
            factors[numerator] = sp.S.One
            used.add("stability.sigmoid_ratio")
        else:
            factors[k] = Sigmoid(-v) ** power
            used.add(SIGMOID.lemma)
        changed = True
    return sp.Mul(*factors) if changed else e


def stabilise(expr) -> tuple[sp.Expr, set[str]]:
    """`expr` with every document form replaced by its stable form, and the lemmas used."""
    used: set[str] = set()

    def walk(e, factor_of_product=False):
        if not isinstance(e, sp.Basic) or not e.args or e.is_Atom or isinstance(e, sp.Indexed):
            return e
        product = isinstance(e, sp.Mul)
        args = tuple(walk(a, product) for a in e.args)
        if args != e.args:
            e = e.func(*args)
        if isinstance(e, sp.Mul):
            e = _sigmoid_ratios(e, used)
        for rule in REWRITES:
            if rule is SIGMOID and factor_of_product:
                continue  # the product's own pass pairs it with an e^{v} factor
            u = rule.match(e)
            if u is not None and rule in SIGN_SPLIT and not sign_decidable(u[1] if rule is SECH2 else u):
                continue
            if u is not None:
                used.add(rule.lemma)
                return rule.stable(u)
        return e

    out = walk(sp.sympify(expr))
    return out, used


def stabilise_assigns(assigns: list) -> tuple[list, set[str]]:
    """Every line's expression stabilised (the same targets and guards), and the lemmas used."""
    import dataclasses

    out, used = [], set()
    for a in assigns:
        expr, lemmas = stabilise(a.expr)
        used |= lemmas
        out.append(a if expr == a.expr else dataclasses.replace(a, expr=expr))
    return out, used

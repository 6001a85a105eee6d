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
to the specification directly; only where the normaliser cannot see through an enclosing
function (erf of a softplus) are they proved against the specification with the same rewrites
applied, each an equality its lemma proves (derivations/proof/obligations.py, `Obligation.prove`,
naming the lemmas in the method).

    softplus        log(1 + e^{u})        → max(u, 0) + log1p(e^{−|u|})
    log σ           log σ(u)              → min(u, 0) − log1p(e^{−|u|})
    sigmoid         1/(1 + e^{−u})        → σ(u)              (printed expit / torch.sigmoid)
                    e^{ju}/(1 + e^{u})^{k} → σ(u)^j σ(−u)^{k−j}  (1 ≤ j ≤ k)
    gaussian        e^{−c u²}, c > 0      → G(√(2c) u)        (the Gaussian node: one helper
                                                               whose u² may overflow to ∞, e^{−∞} = 0)
    normal CDF      c (1 + erf(u/√2))     → 2c Φ(u)           (one library call: ndtr)
    sech²           c (1 − tanh²(u))      → 4c e^{−2|u|}/(1 + e^{−2|u|})²  (no 1 − 1 at large |u|)
    clamp expm1     min(0, k(e^{u} − 1))  → k expm1(min(u, 0))  (k > 0; max alike: no e^{u} = ∞ met by
                                                              the clamp, SELU as PyTorch writes it)
    expm1           e^{u} − 1             → expm1(u)          (accurate near 0)
                    k e^{u} − k + s       → k expm1(u) + s    (anywhere in a longer sum)
    log1p           log(1 + v)            → log1p(v)          (any v, 1 anywhere in the sum)
    logsumexp       log Σ_j e^{v_j}       → m + log Σ_j e^{v_j − m},  m = max_j v_j
                                                              (a row sum or a row mean; beside
                                                              −v_t, −(v − m)_t: no 1e30 − 1e30)
    softmax         e^{v_i}/Σ_j e^{v_j}   → e^{v_i − m}/Σ_j e^{v_j − m}  (a softmax written as
                                                              its formula: no e^{v} = ∞ over ∞)
                    Σ A e^{v}/Σ B e^{v}   → Σ A e^{v − m}/Σ B e^{v − m}  (an expectation under it)
    hypot           (v² + c)^{p}, c > 0   → hypot(v, √c)^{2p}  (p an odd multiple of ½: no v² = ∞
                                                              where the root is finite)
    squares         (v² + w² + c)^{p}     → hypot(v, hypot(w, √c))^{2p}  (v, w arrays, c ≥ 0)
    logaddexp       log(k e^{a} + k e^{b}) → log k + max(a, b) + log1p(e^{−|a − b|})  (a, b arrays)
    exp pair        (k e^{a} + k e^{b})^{−m} → k^{−m} e^{−ma} (1 + e^{b − a})^{−m}  (then σ(a − b))
    exp sum         S^{p}, log S, S = Σ k_i e^{a_i} + c → e^{pm}(S e^{−m})^{p}, m + log(S e^{−m}),
                                              m = max(a_1, …, a_n, 0)  (k_i > 0, c ≥ 0; a constant,
                                              three terms or unequal k; any p under a root; in a
                                              product the numerator's exponential sums take e^{−m})
    rationalised    v + √(v² + c), c > 0  → [v ≥ 0] (v + R) + [v < 0] c/(R + |v|),
                                              R = hypot(v, √c)  (no v + |v| cancellation at v ≪ 0)
    root − √c       k √(v² + c) − k √c    → k v²/(hypot(v, √c) + √c)  (no 1 − 1 where v² ≪ c;
                                              printed v·(v/(…)): no v² = ∞)
    log root        log(v² + c)           → 2 log hypot(v, √c);  log(1 + v²) → 2 log1p(v²/(hypot(v, 1) + 1))
    1 − cos         k cos v − k           → −2k sin²(v/2)     (anywhere in a sum)
    exp pair        k e^{u} ± k e^{−u}     → 2k cosh u, 2k sinh u (anywhere in a sum: no 1 − 1 where
                                              |u| ≪ 1; log((e^{x} + e^{−x})/2) is then a log cosh)
    exp product     e^{a}·e^{b}, b ≤ 0    → e^{a + b}          (no ∞·0: TanhExp's e^{x}·e^{−2e^{x}})
    tanh            (e^{u} − e^{−u})/(e^{u} + e^{−u}) → tanh u  (no ∞/∞ at |u| > 89 in float32;
                    (e^{w} − 1)/(e^{w} + 1) → tanh(w/2)        a factor of any product)
                    sinh u / cosh u → tanh u
    log cosh        log cosh u            → |u| + log1p(e^{−2|u|}) − log 2   (no cosh u = ∞)
    log softmax     log p, log p_t for p = e^{v}/Σ e^{v} on a line above → a line v − m, then
                    (v − m) − log Σ e^{v − m} (no log 0 where p_t underflows; `stabilise_assigns`)
    centred σ       1 − 2σ(−2v), 2σ(2v) − 1 → tanh v           (log cosh's derivative: no 1 − 1)
    1 − σ           k σ(u) − k + s        → −k σ(−u) + s      (anywhere in a sum: no 1 − 1 where
                                              σ(u) rounds to 1, u > 17 in float32)
    σ difference    k σ(u) − k σ(−u) + s  → k tanh(u/2) + s   (anywhere in a sum: no σ − σ near u = 0,
                                              the logistic density's derivative)

`unstable_forms(expr)` names what is left of the forms that cancel or overflow (a hand-written
line, a rewrite that was not applicable), and one cancellation no rewrite removes yet
(v − tanh v): codegen reports them by op (`python -m codegen`).

What is left unstable is found by the numerical-edges check (qed/tools/edges.py), which runs
every op of the registry at ±1e-310 … 1e-8 and ±1e4 … 1e300 against the specification in exact
arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from .arrays import Array, Gaussian, Hypot, NormalCDF, RowMax, RowMean, RowSum, Sigmoid, Take

__all__ = [
    "Rewrite",
    "REWRITES",
    "stabilise",
    "stabilise_assigns",
    "unstable_forms",
    "hypot_reduced",
    "quotients_combined",
]


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


def _has_array(e) -> bool:
    """Whether e reads an array (or an entry of one): not a constant of the op."""
    e = sp.sympify(e)
    return any(isinstance(s, Array) for s in e.free_symbols) or bool(e.atoms(sp.Indexed))


def _exp_term(t):
    """(k, u) where the term t is k e^{u}, k free of arrays, else None."""
    factors = sp.Mul.make_args(t)
    exps = [f for f in factors if isinstance(f, sp.exp)]
    if len(exps) != 1:
        return None
    k = sp.Mul(*[f for f in factors if f is not exps[0]])
    return None if _has_array(k) else (k, exps[0].args[0])


def _beside_its_constant(e, term_of):
    """(k, u, s) where the sum e is k f(u) − k + s: a term k f(u) (`term_of(t)` -> (k, u) or None,
    k free of arrays) and, among the constant terms, one or all of them summing to −k; s the rest."""
    if not isinstance(e, sp.Add):
        return None
    consts = [t for t in e.args if not _has_array(t)]
    for t in e.args:
        ku = None if t in consts else term_of(t)
        if ku is None:
            continue
        k, u = ku
        for pick in [[c] for c in consts] + ([consts] if len(consts) > 1 else []):
            if sp.expand(sp.Add(*pick) + k) == 0:
                return (k, u, sp.Add(*[a for a in e.args if a is not t and not any(a is c for c in pick)]))
    return None


def _expm1_sum_match(e):
    """(k, u, s) where e is k e^{u} − k + s (k free of arrays; s the rest of the sum), e not
    the plain e^{u} − 1 of `_expm1_match`: the −k is one constant term of the sum, or all of them."""
    found = _beside_its_constant(e, _exp_term)
    if found is not None and found[2] == 0 and found[0] == 1:
        return None  # the two-term form: `stability.expm1` itself
    return found


def _sigmoid_term(t):
    """(k, u) where the term t is k σ(u), k free of arrays, else None."""
    factors = sp.Mul.make_args(t)
    nodes = [f for f in factors if isinstance(f, Sigmoid)]
    if len(nodes) != 1:
        return None
    k = sp.Mul(*[f for f in factors if f is not nodes[0]])
    return None if _has_array(k) else (k, nodes[0].args[0])


def _one_minus_sigmoid_match(e):
    """(k, u, s) where e is k σ(u) − k + s (k free of arrays; s the rest of the sum). A centred σ
    (1 − 2σ(−2v), whose constant is not −k) is left to `stability.centred_sigmoid`."""
    return _beside_its_constant(e, _sigmoid_term)


def _sigmoid_difference_match(e):
    """(k, u, s) where e is k σ(u) − k σ(−u) + s (k free of arrays; s the rest of the sum)."""
    if not isinstance(e, sp.Add):
        return None
    terms = [(t, _sigmoid_term(t)) for t in e.args]
    terms = [(t, ku) for t, ku in terms if ku is not None]
    for a, (ka, ua) in terms:
        for b, (kb, ub) in terms:
            if a is not b and sp.expand(ka + kb) == 0 and sp.expand(ua + ub) == 0:
                rest = sp.Add(*[t for t in e.args if t is not a and t is not b])
                return (ka, ua, rest)
    return None


def _log1p_match(e):
    """v where e is log(1 + v), v reading an array (1 one term of a sum of any length)."""
    if isinstance(e, sp.log) and isinstance(e.args[0], sp.Add) and sp.S.One in e.args[0].args:
        v = e.args[0] - 1
        if _has_array(v):
            return v
    return None


def _shifted(v) -> bool:
    """v already has a row max subtracted (a term ±max_j w_j): its exponentials cannot overflow."""
    return any(isinstance(t, RowMax) or isinstance(-t, RowMax) for t in sp.Add.make_args(v))


def _logsumexp_match(e):
    """(R, v) where e is log R(e^{v}), R a row sum or a row mean, v not already shifted."""
    if isinstance(e, sp.log) and isinstance(e.args[0], (RowSum, RowMean)):
        inner = e.args[0].args[0]
        if isinstance(inner, sp.exp) and not _shifted(inner.args[0]):
            return (type(e.args[0]), inner.args[0])
    return None


def _softmax_match(e):
    """(v, k) where e is k·e^{v}/R(e^{v}), R a row sum or a row mean, v not already shifted."""
    if not isinstance(e, sp.Mul):
        return None
    factors = list(e.args)
    for f in factors:
        if isinstance(f, sp.Pow) and f.exp == -1 and isinstance(f.base, (RowSum, RowMean)):
            inner = f.base.args[0]
            if isinstance(inner, sp.exp) and not _shifted(inner.args[0]) and inner in factors:
                rest = list(factors)
                rest.remove(f)
                rest.remove(inner)
                return (type(f.base), inner.args[0], sp.Mul(*rest))
    return None


def _square_root_of(B):
    """w where B = w², √k·w where B = k w² (k a positive factor free of arrays), else None: the
    v of a root √(v² + c) as a person writes it (x², α x², (x − 1)²)."""
    k, square = B.as_independent(*[a for a in B.free_symbols if isinstance(a, Array)], as_Add=False)
    if not (isinstance(square, sp.Pow) and square.exp == 2 and _has_array(square.base) and k.is_positive):
        return None
    return sp.sqrt(k) * square.base


def _hypot_match(e):
    """(v, s, p) where e is (v² + s²)^p, v² a square of an array expression, s² a positive number
    free of arrays, p an odd multiple of ½ (√, 1/√, ...) or a negative integer (1/(v² + c):
    hypot(v, √c)^{−2}, printed (1/h)·(1/h), where 1/(v² + c) is 1/∞)."""
    if not (isinstance(e, sp.Pow) and e.exp.is_Rational and isinstance(e.base, sp.Add)):
        return None
    if not ((2 * e.exp).is_odd or (e.exp.is_Integer and e.exp < 0)):
        return None
    c, B = e.base.as_independent(*[a for a in e.base.free_symbols if isinstance(a, Array)])
    if c.is_positive is not True or not _has_array(B):
        return None
    v = _square_root_of(B)
    return None if v is None else (v, sp.sqrt(c), e.exp)


def _squares_match(e):
    """(v, s, p) where e is (k₁w₁² + k₂w₂² + … + c)^p: two or more squares of array
    expressions (each k > 0 free of arrays), c ≥ 0 free of arrays, p as in `_hypot_match`; v the
    first √k·w, s the root of the others as nested hypots (√(x² + z²) = hypot(x, z), √(x² + z² + c)
    = hypot(x, hypot(z, √c))), each an array expression: neither w² = ∞ nor w² = 0 (|w| < 1e-19
    in float32, a root of 0 where the value is |w|) is ever formed."""
    if not (isinstance(e, sp.Pow) and e.exp.is_Rational and isinstance(e.base, sp.Add)):
        return None
    if not ((2 * e.exp).is_odd or (e.exp.is_Integer and e.exp < 0)):
        return None
    c, B = e.base.as_independent(*[a for a in e.base.free_symbols if isinstance(a, Array)])
    if not (c.is_zero or c.is_positive is True):
        return None
    roots = [_square_root_of(t) for t in sp.Add.make_args(B)]
    if len(roots) < 2 or any(w is None for w in roots):
        return None
    v, *others = sorted(roots, key=sp.default_sort_key)
    s = others[-1] if c.is_zero else Hypot(others[-1], sp.sqrt(c))
    for w in reversed(others[:-1]):
        s = Hypot(w, s)
    return (v, s, e.exp)


def _sqrt_term(t):
    """(k, B, c) where the term t is k √(B + c): k and c free of arrays, c > 0, B reads arrays
    (a root written √(B + c), or already the node Hypot(v, s) = √(v² + s²))."""
    factors = sp.Mul.make_args(t)
    hypots = [f for f in factors if isinstance(f, Hypot) and _has_array(f.args[0])]
    roots = [f for f in factors if isinstance(f, sp.Pow) and f.exp == sp.S.Half and _has_array(f.base)]
    if len(roots) + len(hypots) != 1:
        return None
    (root,) = roots + hypots
    k = sp.Mul(*[f for f in factors if f is not root])
    if isinstance(root, Hypot):
        B, c = root.args[0] ** 2, root.args[1] ** 2
    else:
        c, B = root.base.as_independent(*[a for a in root.base.free_symbols if isinstance(a, Array)])
    if _has_array(k) or _has_array(c) or not _has_array(B) or c.is_positive is not True:
        return None
    return (k, B, c)


def _sqrt_beside_match(e, decidable=True):
    """(k, v, c, s) where e is k v + k √(v² + c) + s, c > 0 free of arrays (v + √(v² + c) cancels
    where v ≪ 0); with `decidable`, only where the sign of v splits as the normaliser decides."""
    if not isinstance(e, sp.Add):
        return None
    for t in e.args:
        kbc = _sqrt_term(t)
        if kbc is None:
            continue
        k, B, c = kbc
        for t2 in e.args:
            if t2 is t or not _has_array(t2):
                continue
            v = sp.expand(t2 / k)
            if v.is_nonnegative or sp.expand(v**2 - B) != 0 or (decidable and not sign_decidable(v)):
                continue
            rest = sp.Add(*[a for a in e.args if a is not t and a is not t2])
            return (k, v, c, rest)
    return None


def _rationalised(v, c):
    """v + √(v² + c) without cancellation and without v²: with R = hypot(v, √c) and the sign of v
    split, [v ≥ 0] v + [v ≥ 0] R + [v < 0] c/(R + |v|) (for v < 0 a quotient of positive numbers,
    c/(R − v); for v ≥ 0 a sum of two; the branch not taken is finite: R + |v| is never 0, where
    R − v is 0 in floating point for v ≫ 0). Steps, not max(v, 0): the function is smooth at
    v = 0 and so is this form's derivative there (1 + 0 from the branch v ≥ 0, where a max would
    put a kink's midpoint ½)."""
    R = Hypot(v, sp.sqrt(c))
    step = sp.Heaviside(v, 1)  # one step, [v < 0] = 1 − [v ≥ 0]: its value at 0 decides both branches
    return step * v + step * R + (1 - step) * c / (R + sp.Abs(v))


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
EXPM1_SUM = Rewrite(
    "stability.expm1_in_sum",
    "k e^{u} − k inside a longer sum as k expm1(u)",
    lambda kus: kus[0] * sp.exp(kus[1]) - kus[0] + kus[2],
    lambda kus: kus[0] * expm1(kus[1]) + kus[2],
    _expm1_sum_match,
)


def _clamp_expm1_match(e):
    """(is_min, k, u) where e is min(0, k(e^{u} − 1)) or max(0, …), k a non-zero constant, the
    inner part as written or already k·expm1(u) (SELU and ELU as PyTorch's documentation writes
    them: max(0, x) + min(0, α(e^{x} − 1)))."""
    if not (isinstance(e, (sp.Min, sp.Max)) and len(e.args) == 2 and sp.S.Zero in e.args):
        return None
    f = e.args[1] if e.args[0] == 0 else e.args[0]
    k, g = sp.factor_terms(f).as_coeff_Mul()
    if isinstance(g, expm1):
        u = g.args[0]
    else:
        u = _expm1_match(g)
    if u is None or k == 0 or not _has_array(u):
        return None
    return (isinstance(e, sp.Min), k, u)


def _clamped_expm1(mku):
    """k·expm1(min(u, 0)) for min(0, k(e^{u} − 1)) with k > 0: expm1 is increasing and 0 at 0,
    so the clamp moves inside, where e^{u} is never formed past 0 (its overflow from u > 88 in
    float32 was met by the min); max for max, and the two swapped for k < 0."""
    is_min, k, u = mku
    inner = sp.Min(u, 0) if is_min == bool(k > 0) else sp.Max(u, 0)
    return k * expm1(inner)


CLAMP_EXPM1 = Rewrite(
    "stability.clamp_expm1",
    "min(0, k(e^{u} − 1)) as k expm1(min(u, 0)): the clamp inside the increasing expm1",
    lambda mku: (sp.Min if mku[0] else sp.Max)(0, mku[1] * (sp.exp(mku[2]) - 1)),
    _clamped_expm1,
    _clamp_expm1_match,
)
LOG1P = Rewrite("stability.log1p", "log(1 + v) as log1p(v)", lambda v: sp.log(1 + v), lambda v: log1p(v), _log1p_match)
LOGSUMEXP = Rewrite(
    "stability.logsumexp",
    "log Σ_j e^{v_j} with the row max shifted out: m + log Σ_j e^{v_j − m}",
    lambda Rv: sp.log(Rv[0](sp.exp(Rv[1]))),
    lambda Rv: RowMax(Rv[1]) + sp.log(Rv[0](sp.exp(Rv[1] - RowMax(Rv[1])))),
    _logsumexp_match,
)


def _exp_factor(arg, v=None):
    """(A, v) where the row reduction's argument is A·e^{v} (v unshifted; the given v if any)."""
    for f in sp.Mul.make_args(arg):
        if isinstance(f, sp.exp) and not _shifted(f.args[0]) and (v is None or f.args[0] == v):
            return (sp.Mul(*[g for g in sp.Mul.make_args(arg) if g is not f]), f.args[0])
    return None


def _sums_ratio_match(e):
    """(R₁, A, R₂, B, v, rest) where e is rest·R₁(A e^{v})/R₂(B e^{v}), R₁, R₂ row sums or row
    means, v unshifted: an expectation under the softmax (Σ x e^{x}/Σ e^{x}), whose e^{v} = ∞ over
    ∞ from v > 88 in float32."""
    if not isinstance(e, sp.Mul):
        return None
    for f in e.args:
        if not (isinstance(f, sp.Pow) and f.exp == -1 and isinstance(f.base, (RowSum, RowMean))):
            continue
        below = _exp_factor(f.base.args[0])
        if below is None:
            continue
        B, v = below
        for g in e.args:
            if isinstance(g, (RowSum, RowMean)):
                above = _exp_factor(g.args[0], v)
                if above is not None:
                    rest = sp.Mul(*[h for h in e.args if h is not f and h is not g])
                    return (type(g), above[0], type(f.base), B, v, rest)
    return None


def _sums_ratio(m):
    R1, A, R2, B, w, rest = m
    return rest * R1(A * sp.exp(w)) / R2(B * sp.exp(w))


SUMS_RATIO = Rewrite(
    "stability.softmax_sums_shift",
    "Σ A e^{v}/Σ B e^{v} with the row max shifted out of both: Σ A e^{v − m}/Σ B e^{v − m}",
    _sums_ratio,
    lambda m: _sums_ratio((*m[:4], m[4] - RowMax(m[4]), m[5])),
    _sums_ratio_match,
)
SOFTMAX = Rewrite(
    "stability.softmax_shift",
    "e^{v}/Σ e^{v} with the row max shifted out of both: e^{v − m}/Σ e^{v − m}",
    lambda Rvk: Rvk[2] * sp.exp(Rvk[1]) / Rvk[0](sp.exp(Rvk[1])),
    lambda Rvk: Rvk[2] * sp.exp(Rvk[1] - RowMax(Rvk[1])) / Rvk[0](sp.exp(Rvk[1] - RowMax(Rvk[1]))),
    _softmax_match,
)


def _root_minus_rewrite_match(e):
    """(k, v, s, rest) where e is k·hypot(v, s) − k·s + rest: the root's own value at v = 0
    subtracted (pseudo-Huber √(1 + x²) − 1), every constant term of the sum together −k·s."""
    if not isinstance(e, sp.Add):
        return None
    consts = sp.Add(*[t for t in e.args if not _has_array(t)])
    for t in e.args:
        kn = _factor_of(t, Hypot)
        if kn is None:
            continue
        k, (v, root) = kn[0], kn[1].args
        if consts != 0 and sp.expand(consts + k * root) == 0:
            return (k, v, root, sp.Add(*[a for a in e.args if a is not t and _has_array(a)]))
    return None


def _log_root_match(e):
    """(v, s) where e is log(v² + s²), v² a square of an array expression (k w² for a positive
    k free of arrays), s² a positive number free of arrays, or s the root of further squares
    and that number as nested hypots (`_squares_match`)."""
    if not (isinstance(e, sp.log) and isinstance(e.args[0], sp.Add)):
        return None
    inner = e.args[0]
    c, B = inner.as_independent(*[a for a in inner.free_symbols if isinstance(a, Array)])
    if c.is_positive is not True or not _has_array(B):
        return None
    v = _square_root_of(B)
    if v is None:  # several squares and c > 0: log(x² + z² + c) as 2 log hypot(x, hypot(z, √c))
        several = _squares_match(sp.Pow(inner, sp.S.Half, evaluate=False))
        return None if several is None else several[:2]
    return (v, sp.sqrt(c))


def _log_root(v, s):
    """log(v² + s²) without v² and without log(1 + tiny): 2 log hypot(v, s), and where s = 1
    (log(1 + x²)), 2 log1p(v²/(hypot(v, 1) + 1)), hypot − 1 rationalised (printed v·(v/(…)))."""
    R = Hypot(v, s)
    return 2 * log1p(v**2 / (R + 1)) if s == 1 else 2 * sp.log(R)


def _cos_term(t):
    """(k, v) where the term t is k·cos v, k free of arrays, v reading arrays."""
    kn = _factor_of(t, sp.cos)
    return None if kn is None else (kn[0], kn[1].args[0])


def _one_minus_cos_rewrite_match(e):
    """(k, v, rest) where e is k cos v − k + rest: cos v beside its own value at 0."""
    if not isinstance(e, sp.Add):
        return None
    consts = sp.Add(*[t for t in e.args if not _has_array(t)])
    for t in e.args:
        kv = _cos_term(t)
        if kv is not None and consts != 0 and sp.expand(consts + kv[0]) == 0:
            return (kv[0], kv[1], sp.Add(*[a for a in e.args if a is not t and _has_array(a)]))
    return None


SQRT_BESIDE = Rewrite(
    "stability.sqrt_rationalised",
    "v + √(v² + c) rationalised where v < 0: no cancellation",
    lambda kvcs: kvcs[0] * (kvcs[1] + sp.sqrt(kvcs[1] ** 2 + kvcs[2])) + kvcs[3],
    lambda kvcs: kvcs[0] * _rationalised(kvcs[1], kvcs[2]) + kvcs[3],
    _sqrt_beside_match,
)


ROOT_MINUS = Rewrite(
    "stability.root_minus",
    "√(v² + c) − √c rationalised: v²/(√(v² + c) + √c), no cancellation where v² ≪ c",
    lambda kvsr: kvsr[0] * Hypot(kvsr[1], kvsr[2]) - kvsr[0] * kvsr[2] + kvsr[3],
    lambda kvsr: kvsr[0] * kvsr[1] ** 2 / (Hypot(kvsr[1], kvsr[2]) + kvsr[2]) + kvsr[3],
    _root_minus_rewrite_match,
)
LOG_ROOT = Rewrite(
    "stability.log_root",
    "log(v² + c) as 2 log hypot(v, √c): no v² = ∞ (and log(1 + v²) from log1p, accurate at small v)",
    lambda vs: sp.log(vs[0] ** 2 + vs[1] ** 2),
    lambda vs: _log_root(*vs),
    _log_root_match,
)
ONE_MINUS_COS = Rewrite(
    "stability.one_minus_cos",
    "k cos v − k as −2k sin²(v/2): no 1 − 1 where |v| ≪ 1",
    lambda kvr: kvr[0] * sp.cos(kvr[1]) - kvr[0] + kvr[2],
    lambda kvr: -2 * kvr[0] * sp.sin(kvr[1] / 2) ** 2 + kvr[2],
    _one_minus_cos_rewrite_match,
)


def _exp_pair_match(e):
    """(k, u, s, rest) where the sum e is k e^{u} + s·k e^{−u} + rest, s = ±1, k free of arrays."""
    if not isinstance(e, sp.Add):
        return None
    exps = [(t, _factor_of(t, sp.exp)) for t in e.args]
    exps = [(t, kn[0], kn[1].args[0]) for t, kn in exps if kn is not None]
    for a, k, u in exps:
        for b, m, w in exps:
            if b is a or sp.expand(u + w) != 0:
                continue
            for sign_ in (sp.S.One, sp.S.NegativeOne):
                if sp.expand(m - sign_ * k) == 0:
                    return (k, u, sign_, sp.Add(*[t for t in e.args if t is not a and t is not b]))
    return None


EXP_PAIR = Rewrite(
    "stability.exp_pair",
    "k e^{u} ± k e^{−u} as 2k cosh u, 2k sinh u: no 1 − 1 where |u| ≪ 1",
    lambda kusr: kusr[0] * sp.exp(kusr[1]) + kusr[2] * kusr[0] * sp.exp(-kusr[1]) + kusr[3],
    lambda kusr: 2 * kusr[0] * (sp.cosh(kusr[1]) if kusr[2] == 1 else sp.sinh(kusr[1])) + kusr[3],
    _exp_pair_match,
)


def _root_of_squares(lemma: str, what: str, match) -> Rewrite:
    """(v² + s²)^p as hypot(v, s)^{2p}, for the (v, s, p) that `match` finds."""
    return Rewrite(
        lemma,
        what,
        lambda vsp: (vsp[0] ** 2 + vsp[1] ** 2) ** vsp[2],
        lambda vsp: Hypot(vsp[0], vsp[1]) ** (2 * vsp[2]),
        match,
    )


HYPOT = _root_of_squares(
    "stability.hypot", "√(v² + c) as hypot(v, √c): the root of the squares without forming them", _hypot_match
)
SQUARES = _root_of_squares(
    "stability.hypot_squares",
    "√(v² + w² + c) as hypot(v, hypot(w, √c)): a root of several squares without forming them",
    _squares_match,
)


def hypot_reduced(d):
    """A derivative with hypot(u, s) = h in it, the terms that read h over one denominator and
    their numerator reduced by h² = u² + s²: the quotient rule's 1/h − u²/h³ (x/√(1 + x²)'s
    derivative, which cancels to 0 at |x| > 4e3 in float32) becomes (h² − u²)/h³ = s²/h³. Only
    the terms that read h are combined (a max's step beside them stays a term of its own: over
    h³ it would be ∞·0 where h overflows), only over a power of h alone (h(h + |x|)² would
    overflow where each term is finite); exact (the identity defines h), kept only where the
    numerator gets shorter."""
    for H in sorted(d.atoms(Hypot), key=sp.default_sort_key):
        d = _reduced_over(d, H)
    return d


def _reduced_over(d, H):
    if isinstance(d, sp.Mul):
        return sp.Mul(*[_reduced_over(f, H) for f in d.args])
    if isinstance(d, sp.Pow) and d.exp.is_Integer:
        return sp.Pow(_reduced_over(d.base, H), d.exp)  # a denominator: 1 + x²/(h + 1) is h
    if not isinstance(d, sp.Add):
        return d
    u, s = H.args
    reading = [t for t in d.args if t.has(H)]
    constants = [t for t in d.args if not t.has(H) and t.free_symbols <= s.free_symbols]
    groups = ([reading] if len(reading) > 1 else []) + ([reading + constants] if reading and constants else [])
    for group in groups:
        combined = _combined(group, H)
        if combined is not None:
            return sp.Add(*[t for t in d.args if not any(t is g for g in group)]) + combined
    # no group over one denominator (a log1p beside a quotient): each term reduced on its own
    return sp.Add(*[_reduced_over(t, H) for t in d.args])


def _combined(terms, H):
    """The sum of `terms` over one denominator, reduced by h² = u² + s² (h = H), where that leaves
    it over a power of h alone; else None."""
    u, s = H.args
    h = sp.Dummy("h", positive=True)
    num, den = sp.fraction(sp.together(sp.Add(*terms).xreplace({H: h})))
    num = sp.expand(num)
    free, power = den.as_independent(h, as_Add=False)
    if not num.is_polynomial(h) or not power.is_polynomial(h) or free.has(Array):
        return None

    def of_h(e):  # a power of h alone (h⁰ = 1 included)
        return e == 1 or e == h or (e.is_Pow and e.base == h)

    square = h**2 - (u**2 + s**2)
    rest = sp.rem(num, square, h)
    if of_h(power) and power != 1:
        S = sp.Dummy("s")  # s counts as one symbol: an array's root hypot(z, √c) as a number's
        if sp.count_ops(rest.xreplace({s: S})) >= sp.count_ops(num.xreplace({s: S})):
            return None
        # a term over the power of h for each power of u in the numerator: (6 − 4x²)/h⁵ as
        # 6/h⁵ − 4x²/h⁵, each printed as quotients ((x/h)²/h³), where (6 − 4x²) forms x² = ∞
        terms = sp.Add.make_args(sp.expand(rest))
        return sp.Add(*[t / den for t in terms]).xreplace({h: H})
    # otherwise u² eliminated in favour of h² − s² in numerator and denominator, and what the two
    # share cancelled: the rationalised root's v²/(h + s) has the derivative 2v/(h + s) − v³/(h (h + s)²)
    # = v (h + s)²/(h (h + s)²) = v/h, and 1 + v²/(h + 1) is h; kept only where no sum that reads h
    # is left above and a power of h alone below (h − 1 would cancel where v²/(h + 1) did not)
    leaves = sorted(u.free_symbols, key=sp.default_sort_key)
    if not leaves or not all(e.is_polynomial(*leaves, h) for e in (u, num, den)):
        return None
    G = sp.expand(h**2 - u**2 - s**2)
    powers = sp.Mul(*[f for f in sp.Mul.make_args(power) if of_h(f)])  # kept as they are
    D = sp.Mul(*[f for f in sp.Mul.make_args(power) if not of_h(f)])
    for reduce in (
        lambda e: sp.rem(sp.expand(e), square, h),  # h² eliminated
        lambda e: sp.reduced(sp.expand(e), [G], *leaves, h, order="lex")[1],  # u² eliminated
    ):
        top, bottom = sp.fraction(sp.cancel(reduce(num) / reduce(D)))
        top = sp.factor(top)
        k, below = bottom.as_independent(h, as_Add=False)
        sums_of_h = [f for f in sp.Mul.make_args(top) if isinstance(f, sp.Add) and f.has(h)]
        if not sums_of_h and of_h(below) and not k.has(*leaves):
            return (top / (free * powers * bottom)).xreplace({h: H})
    return None


def quotients_combined(d):
    """A derivative's terms over powers of one computed denominator g (a sum) put over the highest
    power, kept only where the numerator gets shorter: the quotient rule's 2 sign x/(1 + |x|) −
    2|x| sign x/(1 + |x|)² (the derivative of 2|x|/(1 + |x|), whose terms cancel to 0.2 % at
    |x| = 1e6 in float32) is 2 sign x/(1 + |x|)². Exact algebra; only terms whose denominators are
    powers of g alone (a product of different denominators could overflow where each is finite)."""
    if isinstance(d, sp.Mul):
        return sp.Mul(*[quotients_combined(f) for f in d.args])
    if isinstance(d, sp.Pow) and d.exp.is_Integer:
        return sp.Pow(quotients_combined(d.base), d.exp)
    if not isinstance(d, sp.Add):
        return d

    def over(t):  # (g, k, the rest) where t is rest·g^{−k}, g a sum, rest with no other denominator
        inverses = [f for f in sp.Mul.make_args(t) if f.is_Pow and f.exp.is_Integer and f.exp < 0]
        if len(inverses) != 1 or not isinstance(inverses[0].base, sp.Add):
            return None
        (f,) = inverses
        return f.base, -int(f.exp), sp.Mul(*[a for a in sp.Mul.make_args(t) if a is not f])

    parts = {t: over(t) for t in d.args}
    for g in {p[0] for p in parts.values() if p is not None}:
        group = [t for t, p in parts.items() if p is not None and p[0] == g]
        if len(group) < 2:
            continue
        K = max(parts[t][1] for t in group)
        num = sp.expand(sp.Add(*[parts[t][2] * g ** (K - parts[t][1]) for t in group]))
        combined = num / g**K
        if sp.count_ops(combined) < sp.count_ops(sp.Add(*group)):
            return sp.Add(*[t for t in d.args if t not in group]) + combined
    return d


def _centred_sigmoid_match(e):
    """v where e is 1 − 2σ(−2v) or 2σ(2v) − 1, that is tanh v (no 1 − 1 at small v)."""
    if not (isinstance(e, sp.Add) and len(e.args) == 2):
        return None
    const, term = e.args if e.args[0].is_number else e.args[::-1]
    coeff, node = term.as_coeff_Mul()
    if not isinstance(node, Sigmoid) or abs(const) != 1 or coeff != -2 * const:
        return None
    w = node.args[0]
    return -w / 2 if const == 1 else w / 2


CENTRED_SIGMOID = Rewrite(
    "stability.centred_sigmoid",
    "1 − 2σ(−2v) as tanh v: no 1 − 1 at small v",
    lambda v: 1 - 2 * Sigmoid(-2 * v),
    lambda v: sp.tanh(v),
    _centred_sigmoid_match,
)
ONE_MINUS_SIGMOID = Rewrite(
    "stability.one_minus_sigmoid",
    "k σ(u) − k inside a sum as −k σ(−u): no 1 − 1 where σ(u) rounds to 1",
    lambda kus: kus[0] * Sigmoid(kus[1]) - kus[0] + kus[2],
    lambda kus: -kus[0] * Sigmoid(-kus[1]) + kus[2],
    _one_minus_sigmoid_match,
)
SIGMOID_DIFFERENCE = Rewrite(
    "stability.sigmoid_difference",
    "k σ(u) − k σ(−u) inside a sum as k tanh(u/2): no σ − σ near u = 0",
    lambda kus: kus[0] * Sigmoid(kus[1]) - kus[0] * Sigmoid(-kus[1]) + kus[2],
    lambda kus: kus[0] * sp.tanh(kus[1] / 2) + kus[2],
    _sigmoid_difference_match,
)
LOG_COSH = Rewrite(
    "stability.log_cosh",
    "log cosh u from e^{−2|u|}: no cosh u = ∞",
    lambda u: sp.log(sp.cosh(u)),
    lambda u: sp.Abs(u) + log1p(sp.exp(-2 * sp.Abs(u))) - sp.log(2),
    lambda e: e.args[0].args[0] if isinstance(e, sp.log) and isinstance(e.args[0], sp.cosh) else None,
)
TANH_SINH_COSH = Rewrite(
    "stability.tanh_sinh_cosh",
    "sinh u / cosh u as tanh u: no ∞/∞",
    lambda u: sp.sinh(u) / sp.cosh(u),
    lambda u: sp.tanh(u),
    lambda e: None,  # applied by the product pass `_tanh_ratios`
)
TANH_RATIO = Rewrite(
    "stability.tanh_ratio",
    "(e^{u} − e^{−u})/(e^{u} + e^{−u}) as tanh u: no ∞/∞",
    lambda u: (sp.exp(u) - sp.exp(-u)) / (sp.exp(u) + sp.exp(-u)),
    lambda u: sp.tanh(u),
    lambda e: None,  # applied by the product pass `_tanh_ratios`
)
TANH_RATIO_HALF = Rewrite(
    "stability.tanh_ratio_half",
    "(e^{w} − 1)/(e^{w} + 1) as tanh(w/2): no ∞/∞",
    lambda w: (sp.exp(w) - 1) / (sp.exp(w) + 1),
    lambda w: sp.tanh(w / 2),
    lambda e: None,  # applied by the product pass `_tanh_ratios`
)

# in the order they are tried at each node (bottom-up: an inner rewrite comes first)
REWRITES: tuple[Rewrite, ...] = (
    SOFTPLUS,
    SIGMOID,
    LOG_SIGMOID,
    GAUSSIAN,
    NORMAL_CDF,
    SECH2,
    EXPM1,
    EXPM1_SUM,
    CLAMP_EXPM1,
    LOG_ROOT,
    LOG1P,
    LOGSUMEXP,
    SOFTMAX,
    SUMS_RATIO,
    SQRT_BESIDE,
    HYPOT,
    SQUARES,
    ROOT_MINUS,
    ONE_MINUS_COS,
    EXP_PAIR,
    LOG_COSH,
    CENTRED_SIGMOID,
    ONE_MINUS_SIGMOID,
    SIGMOID_DIFFERENCE,
)


# the forms that split on the sign of u (|u|, max, min): applied only where u is linear in one
# array (entry), c·a + b, the case the index normaliser's region reasoning decides (a split on
# the sign of an entry); a compound u (a cubic, a sum of arrays) is left in the document's form,
# where the numerical-edges check judges it, and is best given a line of its own
SIGN_SPLIT = (SOFTPLUS, LOG_SIGMOID, SECH2, LOG_COSH)


def _product_of_arrays(u) -> bool:
    """u is c·a·b·… (powers allowed), a, b, … arrays or their entries, c a number ≠ 0: the
    normaliser splits on the sign of such a product as of one opaque real number (a learned
    slope g·x)."""
    from .arrays import Array

    c, t = u.as_coeff_Mul()
    if c == 0 or not isinstance(t, sp.Mul):
        return False
    bases = [f.base if isinstance(f, sp.Pow) and f.exp.is_Integer and f.exp > 0 else f for f in t.args]
    return all(isinstance(b, (Array, sp.Indexed)) for b in bases)


def sign_decidable(u) -> bool:
    """u is c·a + b, a an array (or an entry of one), c a constant of known sign (a number, a
    positive symbol such as the cap), b free of a (a number, other arrays: x + z); or a product
    of arrays (g·x): the normaliser splits on the sign of such a u (a = (p − b)/c, the product
    read as one real number p, for p of either sign)."""
    from .arrays import Array

    u = sp.sympify(u)
    if u.is_positive or u.is_negative:
        return True  # |u|, max(u, 0) evaluate by the sign itself (e^{x}): no split is needed
    arrays = [s for s in u.free_symbols if isinstance(s, Array)] + list(u.atoms(sp.Indexed))
    if not arrays:
        return False
    for a in arrays:
        b, term = u.as_independent(a, as_Add=True)
        coeff = sp.cancel(term / a)
        if (
            not b.has(a)
            and not coeff.free_symbols & {a}
            and not coeff.has(a, Array, sp.Indexed)
            and (coeff.is_positive or coeff.is_negative)
        ):
            return True
    return _product_of_arrays(u)


def _multiple_of(g, v, most: int) -> int:
    """j where g is e^{jv} for an integer 1 ≤ j ≤ most, else 0."""
    if not isinstance(g, sp.exp):
        return 0
    j = sp.cancel(g.args[0] / v)
    return int(j) if j.is_Integer and 1 <= j <= most else 0


def _exp_pair(e):
    """(k, a, b) where e is k e^{a} + k e^{b}, k > 0 free of arrays, a and b array expressions
    that are not one another's negatives (that pair is a cosh) and differ by more than a number."""
    if not (isinstance(e, sp.Add) and len(e.args) == 2):
        return None
    parts = []
    for t in e.args:
        k, rest = t.as_independent(*[a for a in t.free_symbols if isinstance(a, Array)], as_Add=False)
        if not (isinstance(rest, sp.exp) and k.is_positive is True and _has_array(rest)):
            return None
        parts.append((k, rest.args[0]))
    (k, a), (k2, b) = sorted(parts, key=lambda p: sp.default_sort_key(p[1]))
    if k != k2 or sp.expand(a + b) == 0 or sp.expand(a - b).is_number or _shifted_exp_sum(e):
        return None
    return (k, a, b)


def _exp_pair_factored(e, used: set):
    """A sum of two exponentials of different arrays under a log or a negative power: log(k e^{a}
    + k e^{b}) = log k + max(a, b) + log1p(e^{−|a − b|}) (`stability.logaddexp`: e^{a} = ∞ from 88
    in float32, and a + softplus(b − a) would cancel a against b − a); (k e^{a} + k e^{b})^{−m} =
    k^{−m} e^{−ma} (1 + e^{b − a})^{−m} (`stability.exp_pair_factored`), a power of σ(a − b) once
    beside e^{a} (e^{x}/(e^{x} + e^{z}) is σ(x − z)). Exact algebra."""
    if isinstance(e, sp.log) and _exp_pair(e.args[0]) is not None:
        k, a, b = _exp_pair(e.args[0])
        used.add("stability.logaddexp")
        return sp.log(k) + sp.Max(a, b) + log1p(sp.exp(-sp.Abs(a - b)))
    if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp < 0 and _exp_pair(e.base) is not None:
        k, a, b = _exp_pair(e.base)
        used.add("stability.exp_pair_factored")
        return k**e.exp * sp.exp(e.exp * a) * sp.Pow(1 + sp.exp(b - a), e.exp)
    return e


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
        # e^{jv} beside (1 + e^{v})^{−k}, 1 ≤ j ≤ k: σ(v)^j σ(−v)^{k−j} (e^{2x}/(1 + e^{x})² is σ(x)²)
        numerator, j = next(
            ((m, _multiple_of(g, v, power)) for m, g in enumerate(factors) if m != k and _multiple_of(g, v, power)),
            (None, 0),
        )
        if numerator is not None:
            factors[k] = Sigmoid(v) ** j * Sigmoid(-v) ** (power - j)
            factors[numerator] = sp.S.One
            used.add("stability.sigmoid_ratio")
        else:
            factors[k] = Sigmoid(-v) ** power
            used.add(SIGMOID.lemma)
        changed = True
    return sp.Mul(*factors) if changed else e


def _tanh_parts(denominator):
    """(u, numerator) where denominator is e^{u} + e^{−u}, the numerator e^{u} − e^{−u} (then the
    ratio is tanh u); (w/2, numerators) where it is e^{w} + 1, the numerator e^{w} − 1 or its
    expm1(w) (the ratio tanh(w/2)); else None."""
    if not (isinstance(denominator, sp.Add) and len(denominator.args) == 2):
        return None
    a, b = denominator.args
    if isinstance(a, sp.exp) and isinstance(b, sp.exp) and sp.expand(a.args[0] + b.args[0]) == 0:
        u = a.args[0]
        return [(u, sp.exp(u) - sp.exp(-u)), (-u, sp.exp(-u) - sp.exp(u))]
    one_plus = _one_plus_exp(denominator)
    if one_plus is not None:
        w = one_plus
        return [(w / 2, sp.exp(w) - 1), (w / 2, expm1(w)), (-w / 2, 1 - sp.exp(w)), (-w / 2, -expm1(w))]
    return None


def _tanh_ratios(e: sp.Mul, used: set) -> sp.Expr:
    """In a product, (e^{u} − e^{−u})·(e^{u} + e^{−u})^{−1} → tanh u and (e^{w} − 1)·(e^{w} + 1)^{−1}
    → tanh(w/2), the numerator another factor of the product or −1 times one (SymPy writes a
    negated sum as −1·(…)) (`stability.tanh_ratio`, `stability.tanh_ratio_half`)."""
    factors = list(e.args)
    for k, f in enumerate(factors):
        if not (isinstance(f, sp.Pow) and f.exp == -1):
            continue
        if isinstance(f.base, sp.cosh) and sp.sinh(f.base.args[0]) in factors:
            factors[factors.index(sp.sinh(f.base.args[0]))], factors[k] = sp.tanh(f.base.args[0]), sp.S.One
            used.add(TANH_SINH_COSH.lemma)
            return _tanh_ratios(sp.Mul(*factors), used)
        parts = _tanh_parts(f.base)
        if parts is None:
            continue
        for u, numerator in parts:
            m = next((m for m, g in enumerate(factors) if m != k and sp.expand(g - numerator) == 0), None)
            if m is not None:
                factors[m], factors[k] = sp.tanh(u), sp.S.One
                used.add(
                    TANH_RATIO.lemma
                    if isinstance(f.base.args[0], sp.exp) and isinstance(f.base.args[1], sp.exp)
                    else TANH_RATIO_HALF.lemma
                )
                return _tanh_ratios(sp.Mul(*factors), used)
    return e


EXP_PRODUCT = Rewrite(
    "stability.exp_product",
    "e^{a}·e^{b} as e^{a + b}: no ∞·0 where one overflows and the other underflows",
    lambda ab: sp.exp(ab[0]) * sp.exp(ab[1]),
    lambda ab: sp.exp(ab[0] + ab[1]),
    lambda e: None,  # applied by the product pass `_exp_products`
)


def _exp_products(e: sp.Mul, used: set) -> sp.Expr:
    """The exponentials of a product as one: e^{x}·e^{−2e^{x}} (TanhExp's x e^{x} sech²(e^{x}),
    sech² from e^{−2|u|}) is ∞·0 = NaN at x > 88 in float32 where e^{x − 2e^{x}} is 0
    (`stability.exp_product`). Only where one exponent is known ≤ 0 (it may underflow while
    another overflows), before the sigmoid pass (then (1 + e^{−2e^{x}})^{−2} is σ(2e^{x})²).
    e^{a + b} overflows only where the product does."""
    exps = [f for f in e.args if isinstance(f, sp.exp) and _has_array(f)]
    if len(exps) < 2 or not any(g.args[0].is_nonpositive for g in exps):
        return e  # no exponent known ≤ 0: e^{v}·e^{w}/(1 + e^{v}) is e^{w}σ(v) as it is, where e^{v + w} may overflow
    used.add(EXP_PRODUCT.lemma)
    rest = [f for f in e.args if not any(f is g for g in exps)]
    return sp.Mul(*rest, sp.exp(sp.Add(*[g.args[0] for g in exps])))


def _weight_and_rest(t):
    """(k, rest) where t = k·rest, k free of arrays and of their entries."""
    t = sp.sympify(t)
    return t.as_independent(*[a for a in t.free_symbols if isinstance(a, Array)], *t.atoms(sp.Indexed), as_Add=False)


def _exp_sum(e, pair: bool = False, single: bool = False):
    """([(k, a)], c) where e is Σ_i k_i e^{a_i} + c, every k_i > 0 free of arrays, every a_i an array
    expression, c ≥ 0 free of arrays, with two exponentials or more; None for any other form, for
    the pair k e^{a} + k e^{b} unless `pair` (`_exp_pair_factored` takes it under a log or a
    negative integer power, not under a root) and for a sum already shifted by its max; with
    `single`, one exponential and c > 0 too (1 + e^{v}, where a numerator takes the shift)."""
    if not isinstance(e, sp.Add):
        return None
    terms, c = [], sp.S.Zero
    for t in e.args:
        if not _has_array(t):
            c += t
            continue
        k, rest = _weight_and_rest(t)
        if not (isinstance(rest, sp.exp) and k.is_positive is True and _has_array(rest.args[0])):
            return None
        terms.append((k, rest.args[0]))
    if len(terms) < (1 if single and c.is_positive else 2) or not (c.is_zero or c.is_positive):
        return None
    if c.is_zero and not pair and _exp_pair(e) is not None:
        return None
    if c.is_zero and len(terms) == 2 and sp.expand(terms[0][1] + terms[1][1]) == 0:
        return None  # e^{u} + e^{−u}: a cosh, the tanh ratios' (its shifted derivative would cancel)
    if c.is_zero and _shifted_exp_sum(e):
        return None  # Σ k e^{b − m}: shifted already
    return terms, c


def _shifted_exp_sum(e) -> bool:
    """e is Σ_i k_i e^{a_i − m}, k_i > 0, two terms or more, one max m in every exponent: a sum of
    positive exponentials shifted by its largest exponent (in [min k, Σ k])."""
    if not isinstance(e, sp.Add) or len(e.args) < 2:
        return False
    exps = []
    for t in e.args:
        k, rest = _weight_and_rest(t)
        if not (isinstance(rest, sp.exp) and k.is_positive is True):
            return False
        exps.append(rest.args[0])
    return any(all(not (a + M).has(sp.Max) for a in exps) for M in e.atoms(sp.Max))


def _exp_sum_max(s):
    """m = max(a_1, …, a_n, 0 where c > 0): the largest exponent of the sum s = ([(k, a)], c). Of
    exponents that are multiples k·u of one u (0 among them), only the least and the greatest k
    can be the max (max(0, x, 2x) = max(0, 2x)): the others are left out."""
    terms, c = s
    exponents = [a for _, a in terms] + ([sp.S.Zero] if not c.is_zero else [])
    multiples = [a.as_coeff_Mul() for a in exponents if a != 0]
    if multiples and len({u for _, u in multiples}) == 1 and all(k.is_Rational for k, _ in multiples):
        u = multiples[0][1]
        ks = sorted({k for k, _ in multiples} | ({sp.S.Zero} if len(multiples) < len(exponents) else set()))
        return sp.Max(*{ks[0] * u, ks[-1] * u})
    return sp.Max(*[a for _, a in terms], *([sp.S.Zero] if not c.is_zero else []))


def _exp_terms_shifted(e, m):
    """Σ k e^{a − m} + c e^{−m} for e = Σ k e^{a} + c (any signs): e·e^{−m}, term by term; None
    where e is not such a sum of exponentials of arrays."""
    if not isinstance(e, sp.Add) or not _has_array(e):
        return None
    out = []
    for t in e.args:
        factors = sp.Mul.make_args(t)
        exps = [f for f in factors if isinstance(f, sp.exp)]
        k = sp.Mul(*[f for f in factors if not isinstance(f, sp.exp)])
        if k.has(sp.exp):
            return None  # an exponential inside another factor: not a term k·e^{w}
        out.append(k * sp.exp(sp.Add(*[f.args[0] for f in exps]) - m))
    if not any(isinstance(f, sp.exp) and _has_array(f) for t in e.args for f in sp.Mul.make_args(t)):
        return None  # no exponential of an array: nothing the shift would bound
    return sp.Add(*out)


def _exp_sums_shifted(e, used: set):
    """A power of a sum of positive exponentials (with a positive constant, three or more terms or
    unequal weights: e^{x}/(e^{x} + e^{z} + 1), 1/(2e^{x} + 3e^{z}), √(e^{x} + e^{z})) with its
    largest exponent m shifted out: S^{p} = e^{pm} (S e^{−m})^{p} (`stability.exp_sum_shift`). S e^{−m}
    lies in [min k, Σ k + c], so it neither overflows nor vanishes; in a product the factor
    e^{pm} is taken by the numerator's sums of exponentials (one e^{−m} a power, term by term)
    and the rest joins its exponentials as one e^{Σ w + pm} (`stability.exp_product`), which
    overflows only where the product does. Exact algebra for any m."""
    factors = list(sp.Mul.make_args(e))
    changed = False
    for k in range(len(factors)):
        f = factors[k]
        if not (isinstance(f, sp.Pow) and f.exp.is_Rational and (f.exp < 0 or not f.exp.is_Integer)):
            continue
        exps = [j for j, g in enumerate(factors) if isinstance(g, sp.exp) and _has_array(g)]
        if _shifted_exp_sum(f.base) and len(exps) >= 2:
            # a sum shifted already (a derivative of a shifted forward): the product's exponentials
            # as one, e^{x}·e^{z}·e^{−2m} → e^{x + z − 2m}, whose size is the product's
            w = sp.Add(*[factors[j].args[0] for j in exps])
            for j in exps:
                factors[j] = sp.S.One
            factors.append(sp.exp(w))
            used.add(EXP_PRODUCT.lemma)
            return sp.Mul(*factors)
        # 1 + e^{v} alone is the sigmoid's; beside a numerator's sum of exponentials, which
        # takes the shift, it is shifted too ((1 + e^{−x} + x e^{−x})/(1 + e^{−x})², SiLU's slope)
        absorbs = f.exp.is_Integer and any(
            j != k
            and _exp_terms_shifted(g.base if isinstance(g, sp.Pow) and g.exp.is_Integer and g.exp > 0 else g, 0)
            is not None
            for j, g in enumerate(factors)
        )
        s = _exp_sum(f.base, pair=not f.exp.is_Integer, single=absorbs)
        if s is None:
            continue
        m = _exp_sum_max(s)
        factors[k] = sp.Pow(_exp_terms_shifted(f.base, m), f.exp)
        shift = f.exp  # the product's factor e^{shift·m}
        for j, g in enumerate(factors):
            base, q = (g.base, g.exp) if isinstance(g, sp.Pow) else (g, sp.S.One)
            if j == k or shift >= 0 or not (q.is_Integer and 0 < q <= -shift):
                continue
            shifted = _exp_terms_shifted(base, m)
            if shifted is not None:
                factors[j] = shifted**q
                shift += q
        exps = [j for j, g in enumerate(factors) if isinstance(g, sp.exp) and _has_array(g)]
        w = sp.Add(*[factors[j].args[0] for j in exps]) + shift * m
        for j in exps:
            factors[j] = sp.S.One
        factors.append(sp.exp(w))
        changed = True
    if not changed:
        return e
    used.add(EXP_SUM_SHIFT.lemma)
    return sp.Mul(*factors)


def _log_exp_sum(e, used: set):
    """log S = m + log(S e^{−m}) for a sum S of positive exponentials as `_exp_sum` takes them
    (log(1 + e^{x} + e^{z}): no log ∞) (`stability.exp_sum_shift`)."""
    if not isinstance(e, sp.log):
        return e
    s = _exp_sum(e.args[0])
    if s is None:
        return e
    m = _exp_sum_max(s)
    used.add(EXP_SUM_SHIFT.lemma)
    return m + sp.log(_exp_terms_shifted(e.args[0], m))


def _exp_sum_shifted(e):
    """The shift of `stability.exp_sum_shift` applied to e alone (a power, a product or a log):
    the lemma's stable side at a document form."""
    return _log_exp_sum(e, set()) if isinstance(e, sp.log) else _exp_sums_shifted(e, set())


EXP_SUM_SHIFT = Rewrite(
    "stability.exp_sum_shift",
    "a sum of positive exponentials under a power or a log with its largest exponent m shifted out: "
    "S^{p} = e^{pm} (S e^{−m})^{p}, log S = m + log(S e^{−m})",
    lambda e: e,
    _exp_sum_shifted,
    lambda e: None,  # applied by the product and log passes `_exp_sums_shifted`, `_log_exp_sum`
)


_GROWING = (sp.exp, expm1, sp.cosh, sp.sinh)


def _branch_of(f):
    """(u, c, +1) where f is the step H(u, c), (u, c, −1) where it is 1 − H(u, c): the weight of a
    branch, non-zero only where ±u ≥ 0."""
    if isinstance(f, sp.Heaviside) and len(f.args) == 2:
        return f.args[0], f.args[1], 1
    if isinstance(f, sp.Add) and len(f.args) == 2 and sp.S.One in f.args:
        other = f.args[0] if f.args[1] == 1 else f.args[1]
        if isinstance(other, sp.Mul) and other.args[0] == -1 and len(other.args) == 2:
            step = other.args[1]
            if isinstance(step, sp.Heaviside) and len(step.args) == 2:
                return step.args[0], step.args[1], -1
    return None


def _branch_clamped(e: sp.Mul, used: set):
    """A branch weighted by a step, H(u, c)·g(x) or (1 − H(u, c))·g(x) with u = a(x − t) (x one array,
    a ≠ 0 a number), g growing (e^{x}, expm1, cosh, sinh): g read at x clamped into the branch,
    g(max(x, t)) where the weight is non-zero for x ≥ t (min for x ≤ t), so that the branch left
    out does not overflow (ELiSH written with steps, (1 − H(x))·expm1(x)σ(x): ∞·0 = NaN at x = 1e4
    in float32). Exact: where the weight is non-zero the clamp is x itself (at x = t too), where it
    is 0 the product is 0 either way (`stability.branch_clamp`)."""
    factors = list(e.args)
    for k, f in enumerate(factors):
        branch = _branch_of(f)
        if branch is None:
            continue
        u, _, side = branch
        arrays = [a for a in u.free_symbols if isinstance(a, Array)] + list(u.atoms(sp.Indexed))
        if len(arrays) != 1:
            continue
        x = arrays[0]
        a = sp.expand(u).coeff(x)
        t = sp.cancel(-(sp.expand(u) - a * x) / a) if a.is_number and a != 0 else None
        if t is None or t.has(x) or _has_array(t) or sp.expand(u - a * (x - t)) != 0:
            continue
        above = (side * a) > 0  # the branch lives where x ≥ t
        clamp = sp.Max(x, t) if above else sp.Min(x, t)
        changed = False
        for j, g in enumerate(factors):
            if j == k or not any(h.has(x) for h in g.atoms(*_GROWING)):
                continue
            if g.has(sp.Heaviside) or g.has(clamp):
                continue
            factors[j] = g.xreplace({x: clamp})
            changed = True
        if changed:
            used.add(BRANCH_CLAMP.lemma)
            return sp.Mul(*factors)
    return e


BRANCH_CLAMP = Rewrite(
    "stability.branch_clamp",
    "a growing function in a branch weighted by a step, read at its argument clamped into the branch: "
    "H(x − t, c)·g(x) = H(x − t, c)·g(max(x, t)), (1 − H(x − t, c))·g(x) = (1 − H(x − t, c))·g(min(x, t))",
    lambda e: e,
    lambda e: _branch_clamped(e, set()) if isinstance(e, sp.Mul) else e,
    lambda e: None,  # applied by the product pass `_branch_clamped`
)


def _max_beside_take(e, used: set):
    """In a sum, +c·max_j v_j beside −c·v_t (a cross-entropy written −x_t + log Σ e^{x}, once the
    log-sum-exp is shifted; v_t may be written k·w_t, −x_t/τ beside max(x/τ)): the two as −c·(v − max v)_t, so that they cancel before the small
    log Σ e^{v − m} is added (1e30 + 1.39 − 1e30 was 0 in float64). Exact: the max is constant
    along the row, so (v − m)_t = v_t − m."""
    if not isinstance(e, sp.Add):
        return e
    for t in e.args:
        c, node = t.as_coeff_Mul()
        if not isinstance(node, RowMax):
            continue
        v = node.args[0]
        for t2 in e.args:
            takes = [f for f in sp.Mul.make_args(t2) if isinstance(f, Take)]
            if len(takes) != 1:
                continue
            take = takes[0]
            k = sp.Mul(*[f for f in sp.Mul.make_args(t2) if f is not take])
            # −c·v_t as k·w_t: −x_t beside max x, and −x_t/τ beside max(x/τ) (a temperature)
            if _has_array(k) or sp.expand(k * take.args[0] + c * v) != 0:
                continue
            used.add(LOGSUMEXP.lemma)
            rest = [a for a in e.args if a is not t and a is not t2]
            return sp.Add(*rest, -c * Take(v - node, take.args[1]))
    return e


def _numbers_out(e):
    """A number that SymPy distributed over a sum or left inside a row reduction, taken out, so
    that the forms above match with it: (2 + 2e^{−x})^{−1} is (1 + e^{−x})^{−1}/2 (a sigmoid),
    Σ_j 2e^{x_j} is 2 Σ_j e^{x_j} (a softmax's denominator). Exact algebra (the generated claims
    prove the printed line against the specification)."""
    if isinstance(e, sp.Pow) and isinstance(e.base, sp.Add) and e.exp.is_Integer and e.exp < 0:
        k, primitive = e.base.primitive()
        if k != 1 and k.is_positive and _one_plus_exp(primitive) is not None:
            return k**e.exp * sp.Pow(primitive, e.exp)
    if isinstance(e, (RowSum, RowMean)) and isinstance(e.args[0], sp.Mul):
        k, rest = e.args[0].as_coeff_Mul()
        if k != 1 and k.is_Number:
            return k * type(e)(rest)
    return e


def stabilise(expr) -> tuple[sp.Expr, set[str]]:
    """`expr` with every document form replaced by its stable form, and the lemmas used."""
    used: set[str] = set()

    def walk(e, factor_of_product=False):
        if not isinstance(e, sp.Basic) or not e.args or e.is_Atom or isinstance(e, sp.Indexed):
            return e
        e = _exp_pair_factored(_numbers_out(e), used)
        if not isinstance(e, sp.Basic) or not e.args or e.is_Atom:
            return e
        product = isinstance(e, sp.Mul)
        args = tuple(walk(a, product) for a in e.args)
        if args != e.args:
            e = e.func(*args)
        if isinstance(e, sp.Mul):
            e = _tanh_ratios(e, used)
            if not isinstance(e, sp.Mul):
                return walk(e, factor_of_product)  # a product that was just the ratio: tanh u
            e = _exp_products(e, used)
            if isinstance(e, sp.Mul):
                e = _branch_clamped(e, used)
            if isinstance(e, sp.Mul):
                e = _exp_sums_shifted(e, used)
            if isinstance(e, sp.Mul):
                e = _sigmoid_ratios(e, used)
        elif isinstance(e, sp.Pow) and not factor_of_product:
            e = _exp_sums_shifted(e, used)
        e = _log_exp_sum(e, used)
        e = _max_beside_take(e, used)
        if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp < -1 and not factor_of_product:
            v = _one_plus_exp(e.base)
            if v is not None:  # (1 + e^{v})^{−k} = σ(−v)^k (a product's own pass pairs its factors)
                used.add(SIGMOID.lemma)
                return Sigmoid(-v) ** (-e.exp)
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
    return hypot_distributed(out), used


def _growth(t, u) -> int:
    """How fast the term t grows with |u|: the total power of u, |u| and hypot(u, ·) among its
    factors (sign u, bounded, counts 0); other factors are free of u or the term is not one."""
    k = 0
    for f in sp.Mul.make_args(t):
        base, e = f.as_base_exp()
        if (
            base == u
            or (isinstance(base, sp.Abs) and base.args[0] == u)
            or (isinstance(base, Hypot) and base.args[0] == u)
        ):
            k += int(e) if e.is_Integer else 0
    return k


def hypot_distributed(e):
    """A product with hypot(u, s)^{−k} and a sum whose terms grow like u² or faster,
    distributed: (1 − x²)/h² as 1/h² − x²/h², each term printed as quotients ((x/h)²) that stay
    in range, where the sum's x² = ∞ (|x| > 1.8e19 in float32) met 1/h² = 0. Exact algebra."""
    if not isinstance(e, sp.Basic) or e.is_Atom or not e.args:
        return e
    args = tuple(hypot_distributed(a) for a in e.args)
    if args != e.args:
        e = e.func(*args)
    if not isinstance(e, sp.Mul):
        return e
    over = [
        f.base.args[0]
        for f in e.args
        if f.is_Pow and isinstance(f.base, Hypot) and f.exp.is_Integer and f.exp < 0 and _has_array(f.base.args[0])
    ]
    for A in e.args:
        if not isinstance(A, sp.Add) or len(A.args) > 8:
            continue
        if any(_growth(t, u) >= 2 for t in A.args for u in over):
            rest = sp.Mul(*[f for f in e.args if f is not A])
            return sp.Add(*[rest * t for t in A.args])
    return e


def _cancelling_pair(e, term_of):
    """(k, v) where the sum e has a term k·f(v) (`term_of(t)` -> (k, v, its value at v = 0) or None)
    and the constant −k·f(0) beside it: k f(v) − k f(0) cancels where v is small."""
    if not isinstance(e, sp.Add):
        return None
    consts = sp.Add(*[t for t in e.args if not _has_array(t)])
    for t in e.args:
        kvz = term_of(t)
        if kvz is None:
            continue
        k, v, at_zero = kvz
        if at_zero != 0 and sp.expand(consts + k * at_zero) == 0:
            return (k, v)
        if at_zero == 0:  # v − tanh v: the partner is k·v itself
            if any(sp.expand(t2 - k * v) == 0 for t2 in e.args if t2 is not t):
                return (k, v)
    return None


def _factor_of(t, kind):
    """(k, node) where the term t is k·node, node of class `kind` reading arrays, k free of them."""
    factors = sp.Mul.make_args(t)
    nodes = [f for f in factors if isinstance(f, kind) and _has_array(f)]
    if len(nodes) != 1:
        return None
    k = sp.Mul(*[f for f in factors if f is not nodes[0]])
    return None if _has_array(k) else (k, nodes[0])


def _root_minus_match(e):
    """√(v² + c) − √c (pseudo-Huber): hypot(v, s) beside −s."""

    def term(t):
        kn = _factor_of(t, Hypot)
        return None if kn is None else (kn[0], kn[1].args[0], kn[1].args[1])

    return _cancelling_pair(e, term)


def _one_minus_cos_match(e):
    """1 − cos v: cos v beside −1 (2 sin²(v/2) would not cancel)."""

    def term(t):
        kn = _factor_of(t, sp.cos)
        return None if kn is None else (kn[0], kn[1].args[0], 1)

    return _cancelling_pair(e, term)


def _v_minus_tanh_match(e):
    """v − tanh v (tanhshrink): tanh v beside v."""

    def term(t):
        kn = _factor_of(t, sp.tanh)
        return None if kn is None else (-kn[0], kn[1].args[0], 0)

    return _cancelling_pair(e, term)


def _v_minus_sin_match(e):
    """v − sin v and sinh v − v: sin v (or sinh v) beside v, which cancel where |v| ≪ 1."""

    def term(t):
        for f in (sp.sin, sp.sinh):
            kn = _factor_of(t, f)
            if kn is not None:
                return (-kn[0], kn[1].args[0], 0)
        return None

    return _cancelling_pair(e, term)


def _exp_sum_unshifted_match(e):
    """S^{p} (p < 0, or a root) or log S of a sum of positive exponentials that `_exp_sum` takes,
    left without its max shift (a hand-written line)."""
    if isinstance(e, sp.log):
        return _exp_sum(e.args[0])
    if isinstance(e, sp.Pow) and e.exp.is_Rational and (e.exp < 0 or not e.exp.is_Integer):
        return _exp_sum(e.base, pair=not e.exp.is_Integer)
    return None


def _hyperbolic_below_match(e):
    """cosh u or sinh u of an array under a negative power: ∞/∞ from |u| > 89 in float32 where the
    ratio (cosh x/cosh 2x, sech x's derivative −sinh x/cosh² x) is in range."""
    if isinstance(e, sp.Pow) and e.exp.is_negative and isinstance(e.base, (sp.cosh, sp.sinh)) and _has_array(e.base):
        return e.base
    return None


def _expm1_below_match(e):
    """expm1(u) (or e^{u} − 1) of an array under a negative power: x/(e^{x} − 1) is ∞/∞ in its
    derivative from x > 88 in float32 where the value is ~0."""
    if not (isinstance(e, sp.Pow) and e.exp.is_negative and _has_array(e.base)):
        return None
    if isinstance(e.base, expm1):
        return e.base
    return _expm1_match(e.base)


# the forms that cancel or overflow, as `unstable_forms` names them
UNSTABLE = (
    ("e^{u} − 1 not as expm1(u)", lambda e: _expm1_match(e) if _expm1_match(e) is not None else _expm1_sum_match(e)),
    ("log(1 + …) not as log1p(…)", _log1p_match),
    ("log Σ e^{…} without the max shift", _logsumexp_match),
    ("e^{v}/Σ e^{v} without the max shift", _softmax_match),
    ("Σ A e^{v}/Σ B e^{v} without the max shift", _sums_ratio_match),
    ("v + √(v² + c) not rationalised", lambda e: _sqrt_beside_match(e, decidable=False)),
    ("√(v² + c) not as hypot(v, √c)", _hypot_match),
    ("√(v² + w² + …) not as hypot(v, w)", _squares_match),
    ("log(v² + c), whose v² overflows", _log_root_match),
    # cancellations: rewritten where a document form is printed (a hand-written line keeps them);
    # v − tanh v has no proved rewrite yet: named, so that a user sees it at codegen
    ("√(v² + c) − √c, which cancels where v² ≪ c", _root_minus_match),
    ("1 − cos v, which cancels where |v| ≪ 1", _one_minus_cos_match),
    ("1 − σ(u), which cancels where σ(u) rounds to 1", _one_minus_sigmoid_match),
    ("σ(u) − σ(−u), which cancels where |u| ≪ 1", _sigmoid_difference_match),
    ("v − tanh v, which cancels where |v| ≪ 1", _v_minus_tanh_match),
    ("v − sin v or sinh v − v, which cancels where |v| ≪ 1", _v_minus_sin_match),
    ("a power or log of Σ k e^{a} + c without its max shift", _exp_sum_unshifted_match),
    ("cosh u or sinh u below a fraction, ∞/∞ from |u| > 89 in float32", _hyperbolic_below_match),
    ("expm1(u) below a fraction, ∞/∞ from u > 88 in float32", _expm1_below_match),
)


def unstable_forms(expr) -> list[tuple[str, sp.Expr]]:
    """The known-unstable forms left in `expr`: [(what it is, the subexpression)], outermost first.
    After `stabilise` only those remain whose rewrite did not apply (a compound u under a sign
    split) or that a hand-written line states."""
    found = []
    for node in sp.preorder_traversal(sp.sympify(expr)):
        if isinstance(node, sp.Basic) and node.args:
            for what, match in UNSTABLE:
                if match(node) is not None:
                    found.append((what, node))
    return found


LOG_SOFTMAX = Rewrite(
    "stability.log_softmax",
    "log of a softmax (an entry of it) as v − log Σ e^{v}: no log 0 where the entry underflows",
    lambda v: sp.log(sp.exp(v) / RowSum(sp.exp(v))),
    lambda v: v - sp.log(RowSum(sp.exp(v))),
    lambda e: None,  # applied across lines by `stabilise_assigns` (p defined above, log p read)
)


def _softmax_argument(value):
    """v where `value` is e^{v}/Σ_k e^{v_k} (a line's stabilised value), else None."""
    factors = sp.Mul.make_args(value)
    exps = [f for f in factors if isinstance(f, sp.exp)]
    sums = [f for f in factors if f.is_Pow and f.exp == -1 and isinstance(f.base, RowSum)]
    if len(factors) == 2 and len(exps) == 1 and len(sums) == 1 and sums[0].base == RowSum(exps[0]):
        return exps[0].args[0]
    return None


def _log_softmax_reads(expr, values: dict, logs: dict):
    """log P and log Take(P, t) for P = e^{v}/Σ e^{v} defined on a line above, read from the line
    log P = v − log Σ e^{v} (`logs`: P -> its line's target, None until made): the log of a softmax
    entry that underflows to 0 (p_t at logits ~1e4) is log-softmax's finite z_t − m − log Σ e^{z − m},
    and its derivative onehot − p, without 1/p_t. Returns the new expression and the lines to add
    before it."""
    lines = []

    def log_of(P):
        if P not in logs:
            v = _softmax_argument(values[P]) if P in values else None
            if v is None:
                logs[P] = None
            else:
                taken = {a.name for a in values} | {a.name for a in sp.sympify(expr).free_symbols}

                def fresh(base):
                    return Array(
                        next(f"{base}{k or ''}" for k in range(len(taken) + 2) if f"{base}{k or ''}" not in taken),
                        P.shape,
                    )

                if not isinstance(v, Array):
                    # v = z − m on a line of its own, so that it is formed first (exact at the
                    # max: z_t − m − log Σ e^{z − m}, not (z_t − log Σ) − m, rounded at |z| ~ 1e6)
                    shifted = fresh(f"{P.name}_shifted")
                    lines.append((shifted, v))
                    taken.add(shifted.name)
                    v = shifted
                logs[P] = fresh(f"log_{P.name}")
                lines.append((logs[P], LOG_SOFTMAX.stable(v)))
        return logs[P]

    def stable(node):
        arg = node.args[0]
        if isinstance(arg, Array):
            return log_of(arg)
        if isinstance(arg, Take) and isinstance(arg.args[0], Array):
            L = log_of(arg.args[0])
            return None if L is None else Take(L, arg.args[1])
        return None

    found = {n: stable(n) for n in sp.preorder_traversal(expr) if isinstance(n, sp.log)}
    found = {n: r for n, r in found.items() if r is not None}
    return (expr.xreplace(found) if found else expr), lines


def stabilise_assigns(assigns: list) -> tuple[list, set[str]]:
    """Every line's expression stabilised (the same targets and guards), and the lemmas used; a log
    of a softmax defined on a line above read from a log-softmax line put before it
    (`stability.log_softmax`)."""
    import dataclasses

    from .arrays import Assign

    out, used, values, logs = [], set(), {}, {}
    for a in assigns:
        expr, lines = _log_softmax_reads(a.expr, values, logs)
        for target, value in lines:
            used.add(LOG_SOFTMAX.lemma)
            value, lemmas = stabilise(value)
            used |= lemmas
            values[target] = value
            out.append(Assign(target, value, when=a.when, note="log-softmax: no log 0"))
        expr, lemmas = stabilise(expr)
        used |= lemmas
        values[a.target] = expr
        out.append(a if expr == a.expr else dataclasses.replace(a, expr=expr))
    return out, used

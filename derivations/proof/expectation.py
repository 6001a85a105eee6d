"""A small expectation operator over SymPy expressions (infrastructure, not a topic).

`sympy.stats` cannot take the expectation of a random vector of *symbolic* length, and it does
not use independence to split `Var(X + Y)`. The variance argument of seed A §1.B needs exactly
that, so qed carries its own operator, with only four rules:

1. **linearity** — `E[a X + b Y] = a E[X] + b E[Y]`, and `E[Σ_i f(i)] = Σ_i E[f(i)]` for a finite
   sum whose range does not depend on the random variables;
2. **independence** — distinct random variables (a vector `q`, a vector `k`, a scalar `x`) are
   independent, so the expectation of a monomial factorises over them;
3. **i.i.d. components** — the components `q[i]` of one random vector are independent and
   identically distributed, also when `i` and `j` are *symbols* that may or may not be equal;
4. **moments** — each distribution is described by its cumulants `κ₁ = m₁` (the mean),
   `κ₂ = s₂` (the variance), `κ₃`, `κ₄`, ... (symbols unless given).

Rules 2–4 are one formula, the moment–cumulant expansion: for components `x_{i_1} … x_{i_n}` of
one vector,

    E[x_{i_1} ⋯ x_{i_n}] = Σ_{π partition of {1..n}} Π_{B ∈ π} κ_{|B|} · Π_{a ∈ B} δ(i_{first(B)}, i_a)

because a joint cumulant of independent variables vanishes unless all of them are the same
variable. For two factors this is `E[x_i x_j] = m₁² + s₂·δ_ij`. The result is an index
expression (`Sum`, `KroneckerDelta`) that the normaliser of `rewriting.py` then decides.

Only polynomials in the random variables are supported; anything else (`exp(q_i)`, `√X`)
raises `ExpectationError` rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp
from sympy.utilities.iterables import multiset_partitions

__all__ = ["RandomVector", "RandomScalar", "Expectation", "ExpectationError", "with_stats_cross_check"]


class ExpectationError(ValueError):
    """The expression is outside what the operator can take the expectation of."""


@dataclass(eq=False)
class RandomVector:
    """A random vector whose components `v[i]` are i.i.d. with the given cumulants.

    `mean` and `variance` default to symbols `m_<name>`, `s_<name>`; higher cumulants default to
    symbols `kappa<n>_<name>` (so a proof that does not mention them holds for every value).
    """

    name: str
    mean: sp.Expr | None = None
    variance: sp.Expr | None = None
    higher: dict = field(default_factory=dict)  # order (≥ 3) -> cumulant

    def __post_init__(self):
        self.base = sp.IndexedBase(self.name, real=True)
        if self.mean is None:
            self.mean = sp.Symbol(f"m_{self.name}", real=True)
        if self.variance is None:
            self.variance = sp.Symbol(f"s_{self.name}", positive=True)

    def __getitem__(self, i) -> sp.Indexed:
        return self.base[i]

    def owns(self, atom) -> bool:
        return isinstance(atom, sp.Indexed) and atom.base == self.base

    def cumulant(self, order: int) -> sp.Expr:
        if order == 1:
            return sp.sympify(self.mean)
        if order == 2:
            return sp.sympify(self.variance)
        if order in self.higher:
            return sp.sympify(self.higher[order])
        return sp.Symbol(f"kappa{order}_{self.name}", real=True)

    def index_of(self, atom) -> sp.Expr:
        return atom.indices[0]


@dataclass(eq=False)
class RandomScalar(RandomVector):
    """One random variable; write it in expressions as `.symbol` (a real Symbol)."""

    def __post_init__(self):
        super().__post_init__()
        self.symbol = sp.Symbol(self.name, real=True)

    def __getitem__(self, i):  # pragma: no cover - a scalar has no components
        raise TypeError(f"random scalar {self.name} has no components")

    def owns(self, atom) -> bool:
        return atom == self.symbol

    def index_of(self, atom) -> sp.Expr:
        return sp.Integer(0)


# A term of the expansion: (constant factors, random atoms with multiplicity, sum limits).
_Term = tuple


class Expectation:
    """`E[·]`, `Var(·)`, `Cov(·,·)` for polynomials in independent random variables."""

    def __init__(self, *variables: RandomVector):
        self.variables = list(variables)

    # -------------------------------------------------------------------- public API
    def E(self, expr) -> sp.Expr:
        expr = sp.sympify(expr)
        out = []
        for consts, atoms, limits in self._expand(expr):
            value = sp.Mul(*consts) * self._moment(atoms)
            out.append(sp.Sum(value, *limits) if limits else value)
        return sp.Add(*out)

    def var(self, expr) -> sp.Expr:
        """Var(X) = E[X²] − E[X]²."""
        expr = sp.sympify(expr)
        return self.E(expr * _copy_bound(expr)) - self.E(expr) ** 2

    def cov(self, a, b) -> sp.Expr:
        a, b = sp.sympify(a), sp.sympify(b)
        return self.E(a * _copy_bound(b)) - self.E(a) * self.E(b)

    # -------------------------------------------------------------------- helpers
    def owner(self, atom):
        for v in self.variables:
            if v.owns(atom):
                return v
        return None

    def is_random(self, expr) -> bool:
        atoms = expr.atoms(sp.Indexed, sp.Symbol)
        return any(self.owner(a) is not None for a in atoms)

    # -------------------------------------------------------------------- 1. expand
    def _expand(self, e) -> list[_Term]:
        if not self.is_random(e):
            return [([e], [], [])]
        if self.owner(e) is not None:
            return [([], [e], [])]
        if isinstance(e, sp.Add):
            return [t for a in e.args for t in self._expand(a)]
        if isinstance(e, sp.Mul):
            out: list[_Term] = [([], [], [])]
            for factor in e.args:
                terms = self._expand(factor)
                out = [(c1 + c2, a1 + a2, l1 + l2) for c1, a1, l1 in out for c2, a2, l2 in terms]
            return out
        if isinstance(e, sp.Pow):
            base, power = e.args
            if power.is_Integer and power >= 0:
                return self._expand(sp.Mul(*[_copy_bound(base) for _ in range(int(power))], evaluate=False))
            raise ExpectationError(f"E of a non-polynomial power: {e}")
        if isinstance(e, sp.Sum):
            body = e.function
            limits = []
            for var, lo, hi in e.limits:
                if self.is_random(lo) or self.is_random(hi):
                    raise ExpectationError(f"random summation bound in {e}")
                fresh = sp.Dummy(var.name, integer=True)
                body = body.xreplace({var: fresh})
                limits.append((fresh, lo, hi))
            return [(c, a, lim + limits) for c, a, lim in self._expand(body)]
        raise ExpectationError(f"E of a non-polynomial expression: {type(e).__name__} {e}")

    # -------------------------------------------------------------------- 2-4. moments
    def _moment(self, atoms: list) -> sp.Expr:
        groups: dict = {}
        for atom in atoms:
            v = self.owner(atom)
            groups.setdefault(id(v), (v, []))[1].append(v.index_of(atom))
        value = sp.Integer(1)
        for v, indices in groups.values():  # independence: a product over variables
            value *= _joint_moment(v, indices)
        return value


def _joint_moment(v: RandomVector, indices: list) -> sp.Expr:
    """E[v_{i_1} ⋯ v_{i_n}] by the moment–cumulant formula (i.i.d. components)."""
    n = len(indices)
    total = sp.Integer(0)
    for partition in multiset_partitions(list(range(n))):
        term = sp.Integer(1)
        for block in partition:
            term *= v.cumulant(len(block))
            first = indices[block[0]]
            for pos in block[1:]:
                term *= sp.KroneckerDelta(first, indices[pos])
        total += term
    return total


def _copy_bound(expr):
    """The same expression with fresh bound indices (so that X·X does not share them)."""
    expr = sp.sympify(expr)
    mapping = {}
    for s in expr.atoms(sp.Sum):
        for var in s.variables:
            mapping.setdefault(var, sp.Dummy(var.name, integer=True))
    return expr.xreplace(mapping) if mapping else expr


def with_stats_cross_check(proof, rows: list[dict], assumptions: list[str], rule: str):
    """A proof by this operator, with its distributional `assumptions` first and the `sympy.stats`
    evaluations at concrete sizes (`rows`, each with "agree") recorded beside it, never as the
    proof: a disagreement makes the claim unproven (a bug of the operator or the normaliser)."""
    proof.assumptions = assumptions + [a for a in proof.assumptions if a not in assumptions]
    proof.spot_check = dict(proof.spot_check or {}, **{"sympy.stats": rows})
    proof.method += f"; expectation operator ({rule})"
    if not all(r["agree"] for r in rows):
        proof.status = "unproven"
        proof.method += " — sympy.stats cross-check DISAGREES (operator or normaliser bug)"
    return proof

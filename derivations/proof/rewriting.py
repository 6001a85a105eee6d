"""A small normaliser for index expressions: the engine behind every symbolic-size proof.

SymPy's `simplify` is unsound on sums of Kronecker deltas (it can leak a bound index into the
result) and `Sum.doit` produces `Piecewise` range conditions that `refine` cannot discharge.
So qed decides identities between index expressions with its own, deliberately simple, rules:

1. **Expand** into terms `coeff · Σ_{k1..kr} (product of factors)`: every `Sum` in a
   polynomial position is pulled to the front with a fresh bound index; `exp(a + b)` becomes
   `exp(a)·exp(b)`; the array language's `Sigmoid(u)` becomes 1/(1 + exp(−u)) and `NormalCDF(u)`
   (1 + erf(u/√2))/2; anything non-polynomial (`1/Σ…`, `√(σ²+ε)`, `exp(Σ…)`) is an opaque atom
   whose inside is normalised recursively.
2. **Sift deltas**: `Σ_{k=lo}^{hi} δ(x, k)·f(k) = f(x)`, once the goal `x ∈ [lo, hi]` (and x
   an integer) is proved; unproved, the term keeps the guard: `[lo ≤ x ≤ hi]·f(x)`.
3. **Split ranges** where a `Piecewise` tests a bound index against a free one
   (`j ≤ i` in a causal mask): `Σ_{j=0}^{n-1} = Σ_{j=0}^{i} + Σ_{j=i+1}^{n-1}`, once the goal
   `lo − 1 ≤ at ≤ hi` is proved (otherwise the range is not split).
4. **Rename** the bound indices of each term canonically (the least of all renamings), so
   that alpha-equivalent sums become the same SymPy object. The canonical indices are `Dummy`s
   with fixed `dummy_index`es: equal across terms, never equal to a user's symbol `_k0`. A sum
   whose indices fall into groups that share no factor and no range is the product of one sum
   per group (Σ_{k,l} e_k e_l = (Σ_k e_k)²), each canonical on its own.
5. **Decide**: hide each canonical sum and each `exp` behind a Dummy and `cancel` the
   resulting rational function (sums with one polynomial skeleton combined first, their
   indices renamed by the skeleton alone). The identity is proved when the residual is
   exactly 0. Where algebra leaves a residual, three rules reason beyond it:
   * **logarithms**: Σ c_k log A_k + r with rational c_k, every A_k proved positive and r real,
     is 0 iff e^{r} Π A_k^{c_k} = 1 (exp is injective on the reals): algebra again;
   * **tanh** u is written (e^{2u} − 1)/(e^{2u} + 1); log1p(u) and expm1(u) are log(1 + u) and
     e^{u} − 1 by definition;
   * **region reasoning**: a case split on the sign of the argument u of |u|, sign(u), H(u, ·)
     or max/min(a, b) (u = a − b). u must be linear, with a numeric coefficient, in an entry or
     a symbol t that is no size, and free of summed indices; t is then written in a fresh
     symbol p of the branch's sign (t = (p − rest)/c with p > 0, p < 0, or t = −rest/c), SymPy's
     assumptions evaluate the atoms (|p| = p, max(p, 0) = p, H(p) = 1, sign(p) = 1, and what
     follows, x³ > 0), and each branch is decided recursively (three nested splits at most).
     Branches u > 0, u < 0, u = 0 where an atom jumps at 0 (H, sign); the closed u ≥ 0, u ≤ 0
     otherwise. The split is exhaustive, so no assumption remains; it is recorded in
     `discharged` with its branches. One exception: a u = 0 branch that fails where one side
     takes the derivative's midpoint at a kink ((1 + sign u)/2, the derived backward's d max(0,
     u)) and the other a printed subgradient (H(u, 0) or H(u, 1)) is excluded and recorded as
     a kink (`kinks`; two printed conventions, H(u, 0) against H(u, 1), never are), never
     assumed: the gate checks that the specification has a kink at u = 0 and that the printed
     value there lies between its one-sided derivatives (`core.decide`, `proof/kinks.py`).
     Inside a sum, the coefficient of a combined summand is split the same way with the
     summed indices held fixed (per summand).
     A subject that is a whole sum (a pre-activation Σ_k w_jk x_ik, inside |·|, H or max) or
     a product of entries (a learned slope g_j x_ij) is split as one opaque real number: a
     branch proved for every p of its sign, with g and x left free, holds at p = g_j x_ij.
     Inside a branch, an atom whose subject is k(e^{w} − 1), k expm1 w, tanh w or sinh w is
     evaluated by the sign of k·w where the branch knows it (SymPy's assumptions do not see
     e^{p} − 1 > 0): min(0, α(e^{x} − 1)) is 0 on x ≥ 0. It cannot split on a non-linear subject (x² − 1), on a
     sum of summed entries inside the sum (Σ_k |x_k| needs a data-dependent split of the
     range), nor prove an inequality; and equal values
     are all it proves: whether a form overflows is a question for the numerical edge checks.

**Side conditions are goals.** Sums are read as loops (`Σ_{k=lo}^{hi}` is 0 when hi < lo, as the
numeric evaluator and the generated code have it; not SymPy's Karr convention). Every rule that
needs more than algebra states a goal and proves it at the moment it is applied, by exact linear
integer reasoning over the ranges it knows: the free indices' ranges given to the constructor
(`Normaliser(ranges={i: (0, n - 1)}, integer_arrays={"ids": (0, V - 1)})`), the limits of every
enclosing sum, the declared ranges of integer arrays (token ids), and sizes that are positive
integer Symbols. A goal `g ≥ 0` is proved by replacing, innermost index first, each index by the
end of its range that minimises g (g linear in it, with a coefficient of known sign), and then
checking the sign of what is left, a polynomial in sizes, term by term ('unknown' is not proved).

* delta sifting: `x ∈ [lo, hi]` and x an integer (else the guard `[lo ≤ x ≤ hi]` is kept, or,
  x not an integer, the delta stays);
* range split at `at`: `lo − 1 ≤ at ≤ hi` for `j ≤ at` (`lo ≤ at ≤ hi + 1` for `j ≥ at`), at an
  integer (else no split);
* block reindexing (mha's concatenation): `hi_u ≥ −1`, `hi_w ≥ −1` (else no reindexing);
* a sum over an unused index, `Σ_{k=lo}^{hi} c = (hi − lo + 1)·c`: `hi − lo + 1 ≥ 0` (else the
  sum is kept);
* a negative power: its base ≠ 0, proved where positivity decides it (a sum of exps over a
  non-empty range, a sum whose first term counts and none is negative ([k ≤ i] at k = 0), a
  mean of squares less the square of the mean plus a positive number, √(σ² + ε) with ε > 0, a
  size), otherwise recorded as a hypothesis (`nonzero`), which the gate keeps only as a
  precondition that the generated code checks at run time (`proof/preconditions.py`).

`assumptions` lists every condition used (shown in certificates); `discharged` those proved,
`hypotheses` the non-zero denominators taken as hypotheses, `kinks` the points u = 0 left to the
gate, `guarded` the goals that failed and
were answered by the sound fallback. A Normaliser built without any domain (`Normaliser()`, no
ranges at all) keeps the old behaviour for exploration: a goal it cannot prove is assumed, the
rule applied, and the goal listed in `undischarged`; the proof gate (`core.decide`) always gives
a domain and refuses a proof with an undischarged goal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp
from sympy.codegen.cfunctions import expm1, log1p

from ..language.arrays import DOCUMENT_NODES
from ..language.denominators import root_beside_positive

Term = tuple[list, list]  # (factors, limits[(var, lo, hi)])

_MAX_PERMUTATIONS = 720
_MAX_GOAL_STEPS = 40
_MAX_SPLITS = 3  # nested case splits on signs (at most 3³ branches)

# Canonical bound indices and hiding symbols are Dummies with these fixed dummy_indexes: the
# same index twice is the same object (alpha-equivalent sums compare equal across terms), and
# none can equal a user's Symbol('_k0') or a Dummy that SymPy numbers from 0.
_CANON_BASE = 7_919_000_000_000
_HIDE_BASE = 7_919_500_000_000
_GROUP_BASE = 7_919_800_000_000  # the indices of sums grouped by their polynomial skeleton


def canonical_index(n: int) -> sp.Dummy:
    """The n-th canonical bound index (printed `_k<n>`)."""
    return sp.Dummy(f"k{n}", integer=True, dummy_index=_CANON_BASE + n)


def _hidden(kind: str, n: int) -> sp.Dummy:
    return sp.Dummy(f"{kind}{n}", dummy_index=_HIDE_BASE + n)


@dataclass(frozen=True)
class Kink:
    """A point u = 0 that the normaliser excluded: `subject` u (normal form), the `ranges` of
    its indices (free, summed, or held fixed per summand), and how it arose."""

    subject: sp.Expr
    ranges: dict
    how: str


class NormaliserError(RuntimeError):
    """The normaliser met an expression it does not know how to handle soundly."""


class Normaliser:
    """`ranges`: free index -> (lo, hi); `integer_arrays`: IndexedBase name -> (lo, hi) of its
    (integer) entries. Giving either (even empty) makes every side condition a goal that is
    proved or answered soundly; giving neither assumes what cannot be proved (`undischarged`)."""

    def __init__(self, ranges: dict | None = None, integer_arrays: dict | None = None):
        self.checked = ranges is not None or integer_arrays is not None
        self.ranges = {sp.sympify(v): (sp.sympify(lo), sp.sympify(hi)) for v, (lo, hi) in (ranges or {}).items()}
        self.integer_arrays = {
            str(name): (sp.sympify(lo), sp.sympify(hi)) for name, (lo, hi) in (integer_arrays or {}).items()
        }
        self.assumptions: list[str] = []  # every condition used (discharged, hypotheses, undischarged)
        self.discharged: list[str] = []  # goals proved from the ranges and sizes
        self.hypotheses: list[str] = []  # what was not decided (denominators ≠ 0, kinks): never
        # assumed by the gate, which checks or refuses each
        self.nonzero: list = []  # … as expressions (the gate discharges or checks each)
        self.kinks: list = []  # Kink: a point u = 0 where the identity was not decided
        self._summand: dict = {}  # the summed indices held fixed (per-summand split)
        self._inverse: dict = {}  # a split's branch symbol p -> c·t + rest (what it stands for)
        self.guarded: list[str] = []  # goals not proved, answered soundly (guard kept, rule not applied)
        self.undischarged: list[str] = []  # goals not proved but assumed (only without a domain)
        self._bound: dict = {}  # every bound Dummy met -> (lo, hi) of its sum

    # ---------------------------------------------------------------- bookkeeping
    def note(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

    def _record(self, kind: str, text: str, show: bool = True) -> None:
        bucket = getattr(self, kind)
        if text not in bucket:
            bucket.append(text)
        if kind != "guarded" and (show or kind == "undischarged"):
            self.note(text)

    def _goal(self, text: str, proved: bool, show: bool = True) -> bool:
        """Settle a goal: True when the rule may be applied as is (proved, or assumed without a
        domain, then undischarged); False when the caller must fall back to a sound form.
        `show=False`: a routine goal (a range's length ≥ 0) listed in `discharged` only."""
        if proved:
            self._record("discharged", text, show)
            return True
        if not self.checked:
            self._record("undischarged", text)
            return True
        self._record("guarded", text)
        return False

    def _kink(self, u, how: str) -> None:
        """u = 0 left undecided (a step's value at its jump): recorded with the ranges of its
        indices, for the gate to check the point (proof/kinks.py), never assumed."""
        for _ in range(_MAX_SPLITS + 1):  # inside a split's branch: in the entries
            if not self._inverse or not u.has(*self._inverse):
                break
            u = sp.expand(u.xreplace(self._inverse))
        ctx = self._context()
        ctx.update(self._summand)
        ranges = {v: ctx[v] for v in sorted(u.free_symbols, key=sp.default_sort_key) if v in ctx}
        kink = Kink(u, ranges, how)
        if all(not (k.subject == u) for k in self.kinks):
            self.kinks.append(kink)
        self._record("hypotheses", f"{_show(u)} ≠ 0 (a kink: {how}; the point u = 0 is left to the gate)")

    # ---------------------------------------------------------------- goals
    def _context(self, limits=(), exclude=()) -> dict:
        """Ranges known here: free indices, every enclosing sum, this term's limits."""
        ctx = dict(self.ranges)
        ctx.update(self._bound)
        ctx.update({v: (a, b) for v, a, b in limits})
        for v in exclude:
            ctx.pop(v, None)
        return ctx

    def nonnegative(self, expr, ctx: dict | None = None) -> bool:
        """Is `expr ≥ 0` for every integer value of the indices in their ranges? Exact and
        conservative: False means 'not proved'."""
        return self._nonneg(sp.sympify(expr), self._context() if ctx is None else ctx, 0)

    def in_range(self, x, lo, hi, ctx: dict) -> bool:
        return self._nonneg(x - lo, ctx, 0) and self._nonneg(hi - x, ctx, 0)

    def _nonneg(self, expr, ctx: dict, steps: int) -> bool:
        expr = sp.expand(expr)
        if expr.is_Number:
            return bool(expr >= 0)
        if steps > _MAX_GOAL_STEPS:
            return False
        # integer-array entries first: their declared ranges mention no index
        for atom in sorted(expr.atoms(sp.Indexed), key=sp.default_sort_key):
            rng = self.integer_arrays.get(str(atom.base.label))
            if rng is None:
                continue
            t = sp.Dummy("t", integer=True)
            replaced = expr.xreplace({atom: t})
            pick = self._extreme(replaced, t, rng, ctx)
            if pick is None:
                return False
            return self._nonneg(replaced.xreplace({t: pick}), ctx, steps + 1)
        ranged = sorted((v for v in expr.free_symbols if v in ctx), key=sp.default_sort_key)
        if not ranged:
            return _nonneg_constant(expr)
        for v in ranged:
            # innermost first: no other index of the goal has a range that mentions v
            if any(ctx[u][0].has(v) or ctx[u][1].has(v) for u in ranged if u != v):
                continue
            pick = self._extreme(expr, v, ctx[v], ctx)
            if pick is None:
                return False
            return self._nonneg(expr.xreplace({v: pick}), ctx, steps + 1)
        return False

    def _extreme(self, expr, v, rng, ctx):
        """The end of v's range where `expr`, linear in v, is least; None if not decided."""
        c = sp.expand(sp.diff(expr, v))
        if c.has(v) or c.atoms(sp.Indexed) or c.atoms(sp.Derivative) or any(u in ctx for u in c.free_symbols):
            return None
        if _nonneg_constant(c):
            return rng[0]
        if _nonneg_constant(-c):
            return rng[1]
        return None

    def _is_integer(self, x) -> bool:
        x = sp.sympify(x)
        entries = {
            a: sp.Dummy("t", integer=True) for a in x.atoms(sp.Indexed) if str(a.base.label) in self.integer_arrays
        }
        return x.xreplace(entries).is_integer is True

    def _nonzero(self, e) -> bool:
        """Is `e ≠ 0`, decided by positivity: exps of reals are positive, a sum of positive
        terms over a non-empty range is positive, of non-negative ones non-negative; sizes are
        positive integers, and SymPy's assumptions decide the sign of what is left."""
        sign = self._sign_form(e, self._context())
        if sign.is_positive is True or sign.is_negative is True or sign.is_zero is False:
            return True
        if isinstance(e, sp.Pow) and e.exp.is_positive:  # u^p ≠ 0 (p > 0) where u ≠ 0: √u too
            return self._nonzero(e.base)
        if isinstance(e, sp.Mul):
            return all(self._nonzero(f) for f in e.args)
        return self._variance_plus_positive(e) or self._quadratic_plus_positive(e) or self._nonzero_per_step(e)

    def _nonzero_per_step(self, e) -> bool:
        """e ≠ 0 with each step H(u, c) in it replaced by every value it takes, 0, 1 and c (at
        most two steps): at any point e equals one of those forms, so if each is ≠ 0 everywhere,
        so is e. A sign split's two branches over one denominator (asinh's printed form:
        H·(√(x² + 1) + |x|) + (1 − H)/(√(x² + 1) + |x|))."""
        steps = sorted(e.atoms(sp.Heaviside), key=sp.default_sort_key)
        if not 0 < len(steps) <= 2 or any(a.has(sp.Heaviside) for h in steps for a in h.args):
            return False
        values = [{sp.S.Zero, sp.S.One, h.args[1] if len(h.args) > 1 else sp.S.Half} for h in steps]
        return all(self._nonzero(e.xreplace(dict(zip(steps, combo)))) for combo in itertools.product(*values))

    def _quadratic_plus_positive(self, e) -> bool:
        """e = c + vᵀAv in the array entries v, with c > 0 and A positive semidefinite (a number
        matrix): e ≥ c > 0. (x − z)² + 1/100, which the normaliser has expanded into
        x² − 2xz + z² + 1/100, where no term alone has a sign."""
        constant = _psd_quadratic_constant(e)
        return constant is not None and self._sign_form(constant, self._context()).is_positive is True

    def _variance_plus_positive(self, e) -> bool:
        """e = r + Σ_k f_k²/L − (Σ_k f_k)²/L² over a non-empty range of L terms, with r > 0: the
        mean of squares less the square of the mean is Σ_k (f_k − m)²/L ≥ 0 (m the mean), so
        e ≥ r > 0 (LayerNorm's σ² + ε written from the moments)."""
        e = sp.expand(e)
        ctx = self._context()
        for s1 in sorted(e.atoms(sp.Sum), key=sp.default_sort_key):
            if len(s1.limits) != 1:
                continue
            v, lo, hi = s1.limits[0]
            length = hi - lo + 1
            s2 = sp.Sum(s1.function**2, *s1.limits)
            if not (_real(s1.function) or s1.function.atoms(sp.Indexed)) or not e.has(s2):
                continue
            rest = sp.expand(e - (s2 / length - s1**2 / length**2))
            if rest.has(s1) or rest.has(s2) or not self._nonneg(length - 1, ctx, 0):
                continue
            if self._sign_form(rest, ctx).is_positive is True:
                return True
        return False

    def _sign_form(self, e, ctx: dict):
        if isinstance(e, sp.exp):
            return sp.Dummy("pos", positive=True) if e.args[0].is_extended_real else sp.Dummy("nz", zero=False)
        if isinstance(e, sp.Sum):
            inner = dict(ctx)
            inner.update({v: (a, b) for v, a, b in e.limits})
            body = self._sign_form(e.function, inner)
            nonempty = all(self._nonneg(b - a, {u: r for u, r in inner.items() if u != v}, 0) for v, a, b in e.limits)
            if body.is_positive is True and nonempty:
                return sp.Dummy("pos", positive=True)
            if nonempty and len(e.limits) == 1 and self._first_term_counts(e, inner):
                return sp.Dummy("pos", positive=True)
            if body.is_nonnegative is True:
                return sp.Dummy("nonneg", nonnegative=True)
            return e
        if isinstance(e, sp.Indexed):
            rng = self.integer_arrays.get(str(e.base.label))
            if rng is not None and _nonneg_constant(rng[0]):
                return sp.Dummy("nonneg", nonnegative=True)
            return e
        if isinstance(e, sp.Add) and root_beside_positive(e):
            return sp.Dummy("pos", positive=True)
        if isinstance(e, sp.Add) and e.atoms(sp.Indexed):
            plain = e.func(*[self._sign_form(a, ctx) for a in e.args])
            if plain.is_nonnegative is True or plain.is_nonpositive is True:
                return plain
            # a positive semidefinite quadratic form among the terms: ≥ 0, the other terms kept
            # ((x − z)² + 1 expanded to x² − 2xz + z² + 1, where no term alone has a sign)
            entries = e.atoms(sp.Indexed)
            quadratic = [t for t in e.args if t.is_polynomial(*entries) and t.has(sp.Indexed)]
            constant = _psd_quadratic_constant(sp.Add(*quadratic)) if len(quadratic) >= 2 else None
            if constant is not None:
                others = [t for t in e.args if t not in quadratic]
                return self._sign_form(sp.Add(constant, *others), ctx) + sp.Dummy("nonneg", nonnegative=True)
            # over one denominator (1 + x²/(h + 1) − 2xz/(h + 1) + z²/(h + 1)): the numerator's form
            together = sp.together(e)
            if isinstance(together, sp.Mul):
                return self._sign_form(together, ctx)
            return plain
        if isinstance(e, (sp.Add, sp.Mul, sp.Pow)):
            return e.func(*[self._sign_form(a, ctx) for a in e.args])
        return e

    def _first_term_counts(self, e: sp.Sum, ctx: dict) -> bool:
        """Σ_{k=lo}^{hi} [c(k)]·g(k) > 0 with g > 0 and every condition c proved at k = lo (a
        causal row's keys: [k ≤ i] holds at k = 0 for i ≥ 0): its first term is positive and
        none is negative."""
        v, lo, hi = e.limits[0]
        factors = sp.Mul.make_args(e.function)
        conds = [f.args[0] for f in factors if isinstance(f, Indicator)]
        rest = sp.Mul(*[f for f in factors if not isinstance(f, Indicator)])
        if not conds or self._sign_form(rest, ctx).is_positive is not True:
            return False
        outer = {u: r for u, r in ctx.items() if u != v}
        for c in conds:
            c = c.xreplace({v: lo})
            if c is sp.true:
                continue
            if isinstance(c, sp.LessThan):
                gap = c.rhs - c.lhs
            elif isinstance(c, sp.StrictLessThan) and (c.rhs - c.lhs).is_integer:
                gap = c.rhs - c.lhs - 1
            else:
                return False
            if not self._nonneg(gap, outer, 0):
                return False
        return True

    # ---------------------------------------------------------------- public API
    def canon(self, expr) -> sp.Expr:
        """The canonical form: a sum of `coeff · Sum(body, limits)` with deltas sifted."""
        expr = sp.sympify(expr)
        return sp.Add(*[self._finish(f, l) for f, l in self._terms(expr)])

    def residual(self, lhs, rhs) -> sp.Expr:
        """`lhs − rhs` decided to a rational function of hidden atoms; 0 means proved."""
        diff = sp.sympify(lhs) - sp.sympify(rhs)
        canonical = self.canon(diff)
        leaked = _plain_symbols(canonical) - _plain_symbols(diff)
        if leaked:
            raise NormaliserError(f"normal form has free symbols the claim did not: {sorted(map(str, leaked))}")
        return self._decide(canonical)

    def _decide(self, canonical, depth: int = 0, rewritten: bool = False) -> sp.Expr:
        """A canonical form decided: 0, or the residual left. Algebra first (hide the sums and
        exps, `cancel`); where that leaves something, the three rules that reason beyond it:
        logarithms by exponentiating, tanh by its exps, and a case split on a sign."""
        combined = self._combine_bodies(canonical)
        table: dict = {}
        result = sp.cancel(sp.together(self._hide(combined, table)))
        if result == 0:
            return sp.Integer(0)
        if self._bodies_cancel(combined):
            return sp.Integer(0)
        if canonical.has(sp.log) and self._logs_cancel(canonical):
            return sp.Integer(0)
        if canonical.has(sp.tanh, sp.cosh, sp.sinh) and not rewritten:
            # tanh u = (e^{2u} − 1)/(e^{2u} + 1), cosh u = (e^u + e^{−u})/2, sinh u = (e^u − e^{−u})/2,
            # exactly: then the exps cancel as any others
            exps = canonical.replace(
                lambda e: isinstance(e, sp.tanh), lambda e: (sp.exp(2 * e.args[0]) - 1) / (sp.exp(2 * e.args[0]) + 1)
            )
            exps = exps.replace(
                lambda e: isinstance(e, sp.cosh), lambda e: (sp.exp(e.args[0]) + sp.exp(-e.args[0])) / 2
            )
            exps = exps.replace(
                lambda e: isinstance(e, sp.sinh), lambda e: (sp.exp(e.args[0]) - sp.exp(-e.args[0])) / 2
            )
            if self._decide(self.canon(exps), depth, rewritten=True) == 0:
                self._record("discharged", "tanh, cosh, sinh by their exponentials", show=False)
                return sp.Integer(0)
        if canonical.has(sp.sin, sp.cos) and not rewritten and self._trig_cancels(canonical):
            return sp.Integer(0)
        if depth < _MAX_SPLITS and self._split_on_sign(canonical, depth):
            return sp.Integer(0)
        return self._unhide(result, table)

    def _bodies_cancel(self, expr) -> bool:
        """Σ_k a(k) + Σ_k b(k) = Σ_k (a(k) + b(k)) for identical limits, whatever the bodies'
        skeletons (a rational function written with its denominator expanded on one side and
        squared on the other, 1/(4x² + 1)² and 1/(16x⁴ + 8x² + 1)): the whole residual is 0 where
        every term is such a sum and each limits' merged body cancels to 0."""
        groups: dict = {}
        for term in sp.Add.make_args(expr):
            sums = [f for f in sp.Mul.make_args(term) if isinstance(f, sp.Sum)]
            if len(sums) != 1:
                return False
            coeff = term / sums[0]
            bound = {v for v, *_ in sums[0].limits}
            if coeff.free_symbols & bound:
                return False
            groups.setdefault(sums[0].limits, []).append(coeff * sums[0].function)
        if len(groups) == len(sp.Add.make_args(expr)):
            return False  # no two sums over the same limits: nothing to merge
        for bodies in groups.values():
            table: dict = {}
            if sp.cancel(sp.together(self._hide(sp.Add(*bodies), table))) != 0:
                return False
        self._record("discharged", "sums over the same limits merged: their bodies cancel", show=False)
        return True

    def _trig_cancels(self, canonical) -> bool:
        """sin u and cos u by the complex exponentials, cos u = (z + 1/z)/2 and
        sin u = (z − 1/z)/(2i) with z = e^{iu}, and the exponentials of rational multiples of one
        argument as powers of one root (e^{iu} = (e^{iu/2})²): an exact rational function of the
        roots, 0 iff the identity holds (1 − cos x = 2 sin²(x/2), sin² + cos² = 1)."""

        def by_exps(e):
            z = sp.exp(sp.I * e.args[0])
            return (z + 1 / z) / 2 if isinstance(e, sp.cos) else (z - 1 / z) / (2 * sp.I)

        exps = canonical.replace(lambda e: isinstance(e, (sp.sin, sp.cos)), by_exps)
        table: dict = {}
        hidden = sp.together(self._hide(self._combine_bodies(self.canon(exps)), table))
        roots: dict = {}  # the argument w of e^{c·w} (c rational) -> the lcm of the c's denominators
        parts = {}
        for atom, dummy in table.items():
            if isinstance(atom, sp.exp):
                c, w = atom.args[0].as_coeff_Mul()
                if c.is_Rational:
                    parts[dummy] = (c, w)
                    roots[w] = sp.ilcm(roots.get(w, 1), c.q)
        names = {w: sp.Dummy("root") for w in roots}
        powers = {dummy: names[w] ** (c * roots[w]) for dummy, (c, w) in parts.items()}
        if sp.cancel(sp.together(hidden.xreplace(powers))) != 0:
            return False
        self._record("discharged", "sin, cos by their complex exponentials", show=False)
        return True

    # ---------------------------------------------------------------- region reasoning
    def _logs_cancel(self, canonical) -> bool:
        """Σ_k c_k log A_k + r = 0 with rational c_k, every A_k proved > 0 and r real: it holds
        iff exp of it, r's exps times Π A_k^{c_k}, is 1 (exp is injective on the reals), which
        is algebra again. (log(1 + e^{−x}) + x − log(1 + e^{x}) = 0: e^{x}(1 + e^{−x}) = 1 + e^{x}.)
        A factor common to every term that is a constant of fixed sign (1/β, β > 0: softplus with
        a slope) is set aside first: K·R = 0 iff R = 0 for K ≠ 0."""
        common = sp.factor_terms(canonical)
        if isinstance(common, sp.Mul) and any(_fixed_sign(f) for f in common.args):
            inner = sp.Mul(*[f for f in common.args if not _fixed_sign(f)])
            if isinstance(inner, sp.Add) and inner != canonical:
                return self._logs_cancel(sp.expand(inner))
        # a factor common to every term that may be 0 (x·log(1 + x²) against x·2 log1p(…)):
        # K·R = 0 where R = 0, so R = 0 suffices (if not iff: a failure here proves nothing)
        if isinstance(common, sp.Mul):
            sums = [f for f in common.args if isinstance(f, sp.Add) and f.has(sp.log)]
            if len(sums) == 1 and sums[0] != canonical:
                return self._logs_cancel(sp.expand(sums[0]))
        factors, rest = [], []
        for term in sp.Add.make_args(canonical):
            logs = [f for f in sp.Mul.make_args(term) if isinstance(f, sp.log)]
            if len(logs) == 1 and not (term / logs[0]).has(sp.log):
                coeff, arg = term / logs[0], logs[0].args[0]
                if not coeff.is_Rational or self._sign_form(arg, self._context()).is_positive is not True:
                    return False
                factors.append(arg**coeff)
            elif term.has(sp.log):
                return False
            else:
                rest.append(term)
        r = sp.Add(*rest)
        if r.has(sp.log) or not all(_real(t) for t in rest):
            return False
        if rest and self._decide(self.canon(r)) == 0:
            r = sp.Integer(0)  # the terms without a log cancel on their own (through √ algebra too)
        product = self.canon(sp.Mul(*factors) * sp.exp(r) - 1)
        table: dict = {}
        if sp.cancel(sp.together(self._hide(self._combine_bodies(product), table))) != 0:
            return False
        self._record("discharged", "the logarithms' arguments > 0: equal as exps (exp is injective on ℝ)", show=False)
        return True

    def _split_on_sign(self, canonical, depth: int) -> bool:
        """A case split on the sign of u, the argument of |u|, sign(u), H(u) or max/min(a, b)
        (u = a − b): each branch with its assumption, decided with the atoms evaluated. u must be
        linear in an entry or a symbol t with a numeric coefficient (t is then written in a fresh
        symbol p of that sign, and SymPy's assumptions evaluate the atoms), or a whole sum or a
        product of entries (then itself written p), and free of summed indices. Branches: u > 0, u < 0 and u = 0 where an atom jumps at 0 (H, sign), u ≥ 0 and
        u ≤ 0 otherwise (|u|, max, min are continuous). A u = 0 branch that fails where one
        side is the midpoint (1 + sign u)/2 and the other a printed H(u, 0) or H(u, 1) is
        excluded and recorded as a kink, for the gate to check. True when every branch is 0
        (the branches cover ℝ, the kink's point checked apart)."""
        bound = set()
        for s in canonical.atoms(sp.Sum):
            bound |= {v for v, _, _ in s.limits}
        for u, jumps in _sign_subjects(canonical, bound):
            solved = _linear_atom(u, bound)
            if solved is None:
                continue
            t, c, rest = solved
            strict = sp.Dummy("p", positive=True)
            closed = sp.Dummy("p", nonnegative=True)
            if jumps:
                branches = [("> 0", (strict - rest) / c), ("< 0", (-strict - rest) / c), ("= 0", -rest / c)]
            else:
                branches = [("≥ 0", (closed - rest) / c), ("≤ 0", (-closed - rest) / c)]
            # the derivative's midpoint (1 + sign u)/2 against a printed subgradient H(u, 0|1)
            kink = any(
                len(h.args) == 2 and h.args[1] in (0, 1) and _same_subject(h.args[0], u)
                for h in canonical.atoms(sp.Heaviside)
            ) and any(_same_subject(g.args[0], u) for g in canonical.atoms(sp.sign))
            done = []
            recorded = len(self.kinks)
            for where, value in branches:
                branch = self.canon(_monotone_atoms_decided(_replace_subject(canonical, t, value)))
                # a kink met inside the branch is stated in the entries again: p = ±(c·t + rest)
                sign = -1 if where in ("< 0", "≤ 0") else 1
                self._inverse.update({q: sign * (c * t + rest) for q in (strict, closed) if value.has(q)})
                try:
                    zero = self._decide(branch, depth + 1) == 0
                finally:
                    self._inverse.pop(strict, None)
                    self._inverse.pop(closed, None)
                if zero:
                    done.append(where)
                elif where == "= 0" and kink:
                    # not decided here: the gate checks the point (core.decide, proof/kinks.py)
                    self._kink(u, "the two sides take different values at 0")
                    done.append("= 0 a kink, checked apart")
                else:
                    del self.kinks[recorded:]  # a failed split leaves no kink to check
                    break
            else:
                self._record(
                    "discharged",
                    f"case split on the sign of {_show(u)}: "
                    + ", ".join(f"{_show(u)} {w}" for w in done)
                    + ", each branch 0",
                )
                return True
        return False

    def is_zero(self, lhs, rhs) -> bool:
        return self.residual(lhs, rhs) == 0

    # ---------------------------------------------------------------- 1. expand
    def _terms(self, e) -> list[Term]:
        if isinstance(e, sp.Add):
            return [t for a in e.args for t in self._terms(a)]
        if isinstance(e, sp.Mul):
            return self._product([self._terms(a) for a in e.args])
        if isinstance(e, sp.Sum):
            return self._sum_terms(e)
        if isinstance(e, sp.Pow):
            base, power = e.args
            if isinstance(base, sp.KroneckerDelta) and power.is_Integer and power > 0:
                return [([base], [])]  # δ^n = δ
            if isinstance(base, sp.sin) and power.is_Integer and power >= 2:
                # sin²u = 1 − cos²u (any u): with no sin² left, cos²u + sin²u − 1 cancels as a
                # polynomial (a rotation's Rᵀ R = I)
                return self._terms(base ** (power - 2) * (1 - sp.cos(base.args[0]) ** 2))
            if power.is_Integer and power > 0 and (base.has(sp.Sum) or isinstance(base, (sp.Add, sp.Mul))):
                return self._product([self._terms(base) for _ in range(int(power))])
            inner = self.canon(base)
            if power.is_negative:
                # a denominator: proved ≠ 0 where positivity decides it, else the claim's hypothesis
                if self._nonzero(inner):
                    self._record("discharged", f"{_show(inner)} ≠ 0")
                else:
                    self._record("hypotheses", f"{_show(inner)} ≠ 0")
                    if inner not in self.nonzero:
                        self.nonzero.append(inner)
            if inner.has(sp.Sum) and isinstance(inner, sp.Mul):
                # (c · Σ)^p = c^p · Σ^p keeps the atom canonical (for a non-integer p only if c > 0)
                coeff, rest = inner.as_independent(sp.Sum, as_Add=False)
                if power.is_integer or coeff.is_positive:
                    return [([coeff**power, rest**power], [])]
            common = _common_exponentials(inner) if not power.is_integer else None
            if common is not None:
                # (e^{a}·u + e^{a}·v)^p = e^{pa}·(u + v)^p: e^{a} > 0 for real a, so the root of
                # a product of positives is the product of their roots (a shifted sum's root)
                self._record("discharged", "a common e^{a} > 0 taken out of a root", show=False)
                out = sp.Mul(*[sp.exp(power * a) for a in common])
                rest = sp.expand(inner * sp.Mul(*[sp.exp(-a) for a in common]))
                return self._product([self._terms(out), self._terms(rest**power)])
            return [([inner**power], [])]
        if isinstance(e, DOCUMENT_NODES):  # σ(u), Φ(u): the document's formulas, nothing else
            return self._terms(e.document_form())
        if isinstance(e, log1p):  # log1p(u) = log(1 + u), expm1(u) = e^u − 1: C's
            return self._terms(sp.log(1 + e.args[0]))  # accurate forms, the same functions
        if isinstance(e, expm1):
            return self._terms(sp.exp(e.args[0]) - 1)
        if isinstance(e, sp.exp):
            arg = self.canon(e.args[0])
            parts = sp.Add.make_args(arg)
            masked = [p for p in parts if isinstance(p, sp.Piecewise) and _two_branch(p) and p.args[1][0] == -sp.oo]
            if masked:
                # e^{a + Piecewise((y, c), (−∞, …))} = e^{a}·[c]·e^{y}, exactly (e^{−∞} = 0): a score a
                # causal mask removes weighs 0, also where its indices are free (no range to split)
                rest = [([sp.exp(p) for p in parts if p not in masked], [])]
                return self._product(
                    [rest] + [self._terms(Indicator(p.args[0][1]) * sp.exp(p.args[0][0])) for p in masked]
                )
            return [([sp.exp(part) for part in parts], [])]
        if isinstance(e, sp.log):
            return self._log_terms(e)
        if isinstance(e, sp.Heaviside):
            return self._step_terms(e)
        if isinstance(e, sp.DiracDelta):
            # a step's derivative δ(u) (or δ⁽ᵏ⁾(u)) is 0 off u = 0: no term; the point u = 0 is
            # recorded as a kink, and the gate checks the printed value there (proof/kinks.py)
            self._kink(self.canon(e.args[0]), "δ(u), a step's derivative, 0 off u = 0")
            return []
        if isinstance(e, sp.Piecewise):
            if _two_branch(e) and not any(v.has(sp.oo, -sp.oo, sp.zoo) for v, _ in e.args):
                # [c]·yes + (1 − [c])·no: the branches' sums and deltas are expanded like any other
                (yes, cond), (no, _) = e.args
                ind = Indicator(cond)
                return self._terms(ind * yes) + self._terms((1 - ind) * no) if no != 0 else self._terms(ind * yes)
            return [([sp.Piecewise(*[(self.canon(v), c) for v, c in e.args])], [])]
        if isinstance(e, (sp.Indexed, sp.Symbol, sp.Number, sp.KroneckerDelta, sp.NumberSymbol, Indicator)):
            return [([e], [])]
        if isinstance(e, sp.Subs):  # f'(u) at a point: normalise the point
            expr, variables, points = e.args
            return [([sp.Subs(expr, variables, sp.Tuple(*[self.canon(p) for p in points]))], [])]
        if isinstance(e, (sp.Function, sp.Max, sp.Min)) and all(isinstance(a, sp.Expr) for a in e.args):
            return [([e.func(*[self.canon(a) for a in e.args])], [])]
        if not e.args:
            return [([e], [])]
        raise NormaliserError(f"cannot normalise node {type(e).__name__}: {e}")

    def _log_terms(self, e) -> list[Term]:
        """log(Π b_k^{p_k}) = Σ p_k log b_k when every b_k is proved positive and every p_k is
        real, with log(exp(u)) = u for real u (the log-sum-exp of cross-entropy:
        m + log Σ e^{z−m} = log Σ e^{z}). Otherwise log stays an atom of its normalised inside."""
        inner = self.canon(e.args[0])
        if isinstance(inner, sp.Add):
            return [([sp.log(inner)], [])]
        exps, logs = [], []
        for factor in sp.Mul.make_args(inner):
            base, power = factor.as_base_exp()
            if power.is_extended_real is not True:
                return [([sp.log(inner)], [])]
            if isinstance(base, sp.exp) and base.args[0].is_extended_real:
                exps.append(power * base.args[0])
            elif self._sign_form(base, self._context()).is_positive is True:
                self._record("discharged", f"{_show(base)} > 0", show=False)
                logs.append((power, base))
            else:
                return [([sp.log(inner)], [])]
        out = self._terms(sp.Add(*exps)) if exps else []
        for power, base in logs:
            out.append(([power, sp.log(base)], []))
        return out

    def _step_terms(self, e) -> list[Term]:
        """The step function H(u, h0) (h0 its value at 0). Two rules:
        H(max(0, v), 0) = H(v, 0) exactly (max(0, v) > 0 ⇔ v > 0); and SymPy's derivative of
        max(0, u), H(u) = H(u, ½), read as the printed H(u, 0), equal off u = 0 — max(0, ·) has no
        derivative at its kink: the point u = 0 is recorded as a kink, and the gate checks that
        the printed value there lies in the subdifferential (`proof/kinks.py`)."""
        u = e.args[0]
        at_zero = e.args[1] if len(e.args) > 1 else sp.S.Half
        if isinstance(u, sp.Max) and len(u.args) == 2 and 0 in u.args and at_zero == 0:
            (v,) = [a for a in u.args if a != 0]
            return self._terms(sp.Heaviside(v, 0))
        inner = self.canon(u)
        if at_zero == sp.S.Half:
            # equal off u = 0; the point u = 0 itself is checked apart by the gate
            self._kink(inner, "H(u) with H(0) = ½ read as H(u, 0)")
            return [([sp.Heaviside(inner, 0)], [])]
        return [([sp.Heaviside(inner, at_zero)], [])]

    @staticmethod
    def _product(factor_terms: list[list[Term]]) -> list[Term]:
        out: list[Term] = [([], [])]
        for terms in factor_terms:
            out = [(f1 + f2, l1 + l2) for f1, l1 in out for f2, l2 in terms]
        return out

    def _sum_terms(self, s: sp.Sum) -> list[Term]:
        body = s.function
        limits: list = []
        for var, lo, hi in s.limits:
            fresh = sp.Dummy(var.name, integer=True)
            body = body.xreplace({var: fresh})
            limits = [(v, a.xreplace({var: fresh}), b.xreplace({var: fresh})) for v, a, b in limits]
            limits.append((fresh, lo, hi))
        for v, lo, hi in limits:  # known to the goals of everything inside this sum
            self._bound[v] = (lo, hi)
        return [(f, l + limits) for f, l in self._terms(body)]

    # ---------------------------------------------------------------- 2-4. finish a term
    def _finish(self, factors: list, limits: list) -> sp.Expr:
        factors, limits = self._sift_deltas(list(factors), list(limits))
        if any(f == 0 for f in factors):
            return sp.Integer(0)
        factors, limits = self._merge_blocks(factors, limits)
        split = self._split_piecewise(factors, limits)
        if split is not None:
            # a chosen branch is raw (SymPy folds exp into Piecewise): expand it again
            out = []
            for piece_factors, piece_limits in split:
                for f, l in self._product([self._terms(g) for g in piece_factors]):
                    out.append(self._finish(f, l + piece_limits))
            return sp.Add(*out)
        return self._rename(factors, limits)

    def _sift_deltas(self, factors: list, limits: list):
        """Σ_{k=lo}^{hi} δ(x, k)·f(k) = f(x) for x ∈ [lo, hi] proved, else [lo ≤ x ≤ hi]·f(x).
        k is sifted only if x mentions neither k nor an index whose range depends on k."""
        done: set = set()  # deltas left in place (x not an integer): not tried again
        while True:
            bound = {v: (lo, hi) for v, lo, hi in limits}
            for n, f in enumerate(factors):
                if not isinstance(f, sp.KroneckerDelta) or f in done:
                    continue
                step = None
                for var, value in ((f.args[1], f.args[0]), (f.args[0], f.args[1])):
                    if var not in bound or value.has(var):
                        continue
                    inside = _dependents(var, limits)
                    if value.free_symbols & inside:
                        continue
                    step = (var, value, inside)
                    break
                if step is None:
                    continue
                var, value, inside = step
                lo, hi = bound[var]
                ctx = self._context(limits, exclude={var} | inside)
                proved = self._is_integer(value) and self.in_range(value, lo, hi, ctx)
                guard = None
                if not self._goal(f"{_show(value)} ∈ [{_show(lo)}, {_show(hi)}]", proved):
                    if not self._is_integer(value):
                        done.add(f)  # δ(x, k) with x perhaps not an integer: keep the delta
                        continue
                    guard = Indicator(sp.And(sp.Le(lo, value), sp.Le(value, hi)))
                sub = {var: value}
                factors = [g.xreplace(sub) for m, g in enumerate(factors) if m != n]
                if guard is not None:
                    factors.append(guard)
                limits = [(v, a.xreplace(sub), b.xreplace(sub)) for v, a, b in limits if v != var]
                break
            else:
                return _free_deltas(factors, limits)

    def _merge_blocks(self, factors: list, limits: list):
        """Σ_{u=0}^{h-1} Σ_{w=0}^{b-1} f(b·u + w) = Σ_{c=0}^{h·b-1} f(c): a bijection of ranges
        (how a concatenation of h blocks of width b is indexed). Applied only when u and w
        occur nowhere but inside b·u + w."""
        merged = True
        while merged:
            merged = False
            for u, lo_u, hi_u in limits:
                for w, lo_w, hi_w in limits:
                    if u == w or lo_u != 0 or lo_w != 0:
                        continue
                    block = hi_w + 1
                    combo = block * u + w
                    c = sp.Dummy("c", integer=True)
                    new_factors = [g.xreplace({combo: c}) for g in factors]
                    others = [(v, a, b) for v, a, b in limits if v not in (u, w)]
                    if (
                        any(g.has(u) or g.has(w) for g in new_factors)
                        or any((a.has(u) or a.has(w) or b.has(u) or b.has(w)) for _, a, b in others)
                        or hi_u.has(w)
                        or hi_w.has(u)
                    ):
                        continue
                    # a bijection (u, w) ↔ c when both ranges are loops, possibly empty: hi ≥ −1
                    ctx = self._context(others, exclude=(u, w))
                    proved = all(self._is_integer(h) and self._nonneg(h + 1, ctx, 0) for h in (hi_u, hi_w))
                    if not self._goal(
                        f"block reindexing c = {_show(block)}·u + w over {_show(hi_u + 1)} blocks", proved
                    ):
                        continue
                    factors = new_factors
                    limits = others + [(c, sp.Integer(0), (hi_u + 1) * block - 1)]
                    merged = True
                    break
                if merged:
                    break
        return factors, limits

    def _split_piecewise(self, factors: list, limits: list):
        """Σ_k over a Piecewise that tests k against a free bound: split the range in two."""
        for var, lo, hi in limits:
            for f in factors:
                for pw in f.atoms(sp.Piecewise, Indicator):
                    if isinstance(pw, Indicator):
                        yes, cond, no = sp.Integer(1), pw.args[0], sp.Integer(0)
                    elif _two_branch(pw):
                        (yes, cond), (no, _) = pw.args
                    else:
                        continue
                    cut = _threshold(cond, var)
                    if cut is None:
                        continue
                    upper, at = cut  # cond ⇔ var ≤ at (upper) or var ≥ at (not upper)
                    if at.free_symbols & _dependents(var, limits):
                        continue
                    # the pieces partition [lo, hi] when lo − 1 ≤ at ≤ hi (upper) or
                    # lo ≤ at ≤ hi + 1; the stronger lo ≤ at ≤ hi is what is shown when it holds
                    ctx = self._context(limits, exclude={var} | _dependents(var, limits))
                    low, high = (lo - 1, hi) if upper else (lo, hi + 1)
                    integer = self._is_integer(at)
                    whole = self._whole_range(upper, at, lo, hi, ctx, integer)
                    if whole is not None:  # the condition holds on all of [lo, hi]: no split
                        new_factors = [g.xreplace({pw: yes}) for g in factors]
                        return [(new_factors, limits)]
                    if integer and self.in_range(at, lo, hi, ctx):
                        self._goal(f"{_show(lo)} ≤ {_show(at)} ≤ {_show(hi)}", True)
                    elif not self._goal(
                        f"{_show(low)} ≤ {_show(at)} ≤ {_show(high)}", integer and self.in_range(at, low, high, ctx)
                    ):
                        continue
                    if upper:
                        pieces = [((var, lo, at), yes), ((var, at + 1, hi), no)]
                    else:
                        pieces = [((var, lo, at - 1), no), ((var, at, hi), yes)]
                    out = []
                    for limit, branch in pieces:
                        new_factors = [g.xreplace({pw: branch}) for g in factors]
                        new_limits = [limit if v == var else (v, a, b) for v, a, b in limits]
                        out.append((new_factors, new_limits))
                    return out
        return None

    def _whole_range(self, upper: bool, at, lo, hi, ctx: dict, integer: bool):
        """`var ≤ at` on all of [lo, hi] when hi ≤ at (`var ≥ at` when at ≤ lo), at an integer,
        proved from the ranges: then the Piecewise is its first branch on the whole range (a
        causal mask's query after the last key sees every key). None when not proved; a failed
        attempt is no goal (the split below is tried next)."""
        if not (integer and self.checked):
            return None
        holds = self._nonneg(at - hi, ctx, 0) if upper else self._nonneg(lo - at, ctx, 0)
        if not holds:
            return None
        text = f"{_show(hi)} ≤ {_show(at)}" if upper else f"{_show(at)} ≤ {_show(lo)}"
        self._goal(text + " (the condition holds on the whole range)", True)
        return True

    def _rename(self, factors: list, limits: list) -> sp.Expr:
        coeff = sp.Integer(1)
        kept: list = []  # unused summations whose length is not proved ≥ 0
        # drop summations whose index appears nowhere: Σ_{k=lo}^{hi} c = (hi − lo + 1)·c
        while True:
            used = set()
            for f in factors:
                used |= f.free_symbols
            for _v, a, b in limits:
                used |= a.free_symbols | b.free_symbols
            unused = [(v, a, b) for v, a, b in limits if v not in used and (v, a, b) not in kept]
            if not unused:
                break
            for v, a, b in unused:
                # a loop of hi − lo + 1 ≥ 0 steps (a sum over a negative-length range is 0)
                proved = self._nonneg(b - a + 1, self._context(limits, exclude=[v]), 0)
                if self._goal(f"{_show(b - a + 1)} ≥ 0 (length of the range of {_show(v)})", proved, show=False):
                    coeff *= b - a + 1
                    limits = [lim for lim in limits if lim != (v, a, b)]
                else:
                    kept.append((v, a, b))
        if not limits:
            return coeff * sp.Mul(*factors)
        groups = [] if kept else _separable(factors, limits)
        if len(groups) > 1:
            # Σ_{k,l} f(k) g(l) = (Σ_k f(k)) (Σ_l g(l)) over independent ranges: each sum
            # canonical on its own (so that Σ_{k,l} e_k e_l is (Σ_k e_k)², a power of one atom)
            bound_set = {v for v, _, _ in limits}
            out = coeff * sp.Mul(*[f for f in factors if not f.free_symbols & bound_set])
            for group_factors, group_limits in groups:
                out *= self._canonical_sum(group_factors, group_limits)
            return out
        return coeff * self._canonical_sum(factors, limits)

    def _canonical_sum(self, factors: list, limits: list) -> sp.Expr:
        """One sum with its bound indices renamed canonically (the least of all renamings);
        the factors free of them stay outside."""
        bound = [v for v, _, _ in limits]
        bound_set = set(bound)
        dependent = [f for f in factors if f.free_symbols & bound_set]
        independent = [f for f in factors if not f.free_symbols & bound_set]
        body = sp.Mul(*dependent)
        # canonical Dummies never equal a user symbol; only inner sums' own indices are taken
        taken = set()
        for inner in body.atoms(sp.Sum):
            taken |= set(inner.variables)
        names = []
        n = 0
        while len(names) < len(bound):
            if canonical_index(n) not in taken:
                names.append(canonical_index(n))
            n += 1
        best, best_key = None, None
        perms = itertools.permutations(names)
        for count, perm in enumerate(perms):
            if count >= _MAX_PERMUTATIONS:
                raise NormaliserError(f"too many bound indices to rename canonically: {len(bound)}")
            mapping = dict(zip(bound, perm))
            new_body = body.xreplace(mapping)
            new_limits = [(mapping[v], a.xreplace(mapping), b.xreplace(mapping)) for v, a, b in limits]
            candidate = sp.Sum(new_body, *_order_limits(new_limits))
            key = sp.srepr(candidate)
            if best_key is None or key < best_key:
                best, best_key = candidate, key
        return sp.Mul(*independent) * best

    # ---------------------------------------------------------------- 5. decide
    def _combine_bodies(self, expr):
        """Σ_k P(k)·a(k) + Σ_k P(k)·b(k) = Σ_k P(k)·(a(k) + b(k)) for identical limits and the
        same polynomial skeleton P: lets `cancel` see through non-polynomial factors of the
        bound index (σ(g_k) and σ(g_k)² from an elementwise nonlinearity)."""
        groups: dict = {}
        rest = []
        for term in sp.Add.make_args(expr):
            factors = sp.Mul.make_args(term)
            sums = [f for f in factors if isinstance(f, sp.Sum)]
            if len(sums) != 1:
                rest.append(term)
                continue
            total = sums[0]
            coeff = sp.Mul(*[f for f in factors if f is not total])
            body = sp.Mul.make_args(total.function)
            skeleton = sp.Mul(*[f for f in body if _polynomial_atom(f)])
            other = sp.Mul(*[f for f in body if not _polynomial_atom(f)])
            limits, skeleton, other = _by_skeleton(total.limits, skeleton, other)
            groups.setdefault((limits, skeleton), []).append(coeff * other)
        out = list(rest)
        for (limits, skeleton), parts in groups.items():
            if len(parts) == 1 and not _has_sign_atoms(parts[0]):
                out.append(
                    sp.Sum(skeleton * parts[0], *limits)
                    if parts[0].free_symbols & {v for v, *_ in limits}
                    else parts[0] * self._sum(skeleton, limits)
                )
                continue
            table: dict = {}
            combined = sp.cancel(sp.together(self._hide(sp.Add(*parts), table)))
            if combined != 0:
                combined = self._unhide(combined, table)
                # the summand's coefficient, the summed indices held fixed: a case split on the
                # sign of an entry that depends on them decides it per summand
                saved, self._summand = self._summand, {v: (a, b) for v, a, b in limits}
                try:
                    split = _has_sign_atoms(combined) and self._split_on_sign(self.canon(combined), 1)
                finally:
                    self._summand = saved
                if split:
                    continue
                out.append(self._sum(skeleton * combined, limits))
        return sp.Add(*out)

    def _sum(self, body, limits):
        """Σ_limits body; over indices the body does not read (its summed factors cancelled,
        e^{z_k}·e^{−z_k} = 1), the product of the ranges' lengths times the body, each length
        hi − lo + 1 ≥ 0 a goal proved as in `_rename` (a range that depends on another summed
        index, or a length not proved, keeps the sum)."""
        bound = {v for v, *_ in limits}
        if body.free_symbols & bound or any((a.free_symbols | b.free_symbols) & bound for _, a, b in limits):
            return sp.Sum(body, *limits)
        ctx = self._context(list(limits))
        lengths = [b - a + 1 for _, a, b in limits]
        for v, n in zip(bound, lengths):
            if not self._goal(
                f"{_show(n)} ≥ 0 (length of the range of {_show(v)})", self._nonneg(n, ctx, 0), show=False
            ):
                return sp.Sum(body, *limits)
        return body * sp.Mul(*lengths)

    def _hide(self, e, table: dict):
        if isinstance(e, sp.Sum):
            return table[e] if e in table else table.setdefault(e, _hidden("sum", len(table)))
        if isinstance(e, sp.exp):
            arg = e.args[0]
            if arg.could_extract_minus_sign():
                return 1 / self._hide(sp.exp(-arg), table)
            return table[e] if e in table else table.setdefault(e, _hidden("exp", len(table)))
        if isinstance(e, (sp.Indexed, sp.Symbol, sp.Number, sp.NumberSymbol)) or not e.args:
            return e
        return e.func(*[self._hide(a, table) for a in e.args])

    @staticmethod
    def _unhide(e, table: dict):
        return e.xreplace({v: k for k, v in table.items()})


class Indicator(sp.Function):
    """[cond]: 1 where the condition holds, 0 elsewhere (evaluates when the condition does)."""

    nargs = 1
    is_commutative = True  # a number: [a]·[b] − [b]·[a] must cancel

    @classmethod
    def eval(cls, cond):
        if cond is sp.true:
            return sp.Integer(1)
        if cond is sp.false:
            return sp.Integer(0)
        if isinstance(cond, (sp.GreaterThan, sp.StrictGreaterThan)):
            return cls(cond.reversed)  # one orientation: [k ≤ e] and [e ≥ k] are one atom
        return None


def _common_exponentials(e):
    """The exponents a of the factors e^{a} that every term of the sum e has (its exponentials
    split by the canonical form: e^{x − m} is e^{x}·e^{−m}); None where they share none."""
    if not isinstance(e, sp.Add):
        return None
    common = None
    for t in e.args:
        exps = {f.args[0] for f in sp.Mul.make_args(t) if isinstance(f, sp.exp)}
        common = exps if common is None else common & exps
        if not common:
            return None
    return sorted(common, key=sp.default_sort_key)


def _psd_quadratic_constant(e):
    """c where e = c + vᵀAv in the array entries v (two to eight of them), A a positive
    semidefinite number matrix and c free of them: then e ≥ c. None for any other form."""
    e = sp.expand(e)
    entries = sorted(e.atoms(sp.Indexed), key=sp.default_sort_key)
    if not 2 <= len(entries) <= 8:
        return None
    try:
        poly = sp.Poly(e, *entries)
    except sp.PolynomialError:
        return None
    if any(sum(m) not in (0, 2) for m in poly.monoms()):
        return None
    k = len(entries)
    A = sp.zeros(k, k)
    for m, c in poly.terms():
        nz = [i for i, d in enumerate(m) if d]
        if len(nz) == 1:
            A[nz[0], nz[0]] = c
        elif len(nz) == 2:
            A[nz[0], nz[1]] = A[nz[1], nz[0]] = c / 2
    if not all(a.is_number for a in A) or A.is_positive_semidefinite is not True:
        return None
    return poly.coeff_monomial(1)


def _two_branch(pw) -> bool:
    return len(pw.args) == 2 and pw.args[1][1] is sp.true


def _order_limits(limits: list) -> list:
    """Sort limits by name, but a limit whose bounds use another bound index goes inside it."""
    limits = sorted(limits, key=lambda lim: lim[0].name)
    ordered: list = []
    pending = list(limits)
    while pending:
        for lim in pending:
            # innermost first: a limit may go next only if no pending limit's bounds mention it
            if not any(lim[0] in (a.free_symbols | b.free_symbols) for v, a, b in pending if v != lim[0]):
                ordered.append(lim)
                pending.remove(lim)
                break
        else:  # pragma: no cover - cyclic bounds cannot come from a valid Sum
            raise NormaliserError(f"cyclic summation bounds: {limits}")
    return ordered


def _threshold(cond, var):
    """If `cond` is `var ≤ e` or `var ≥ e` with e free of var, return (is_upper, e)."""
    if not isinstance(cond, sp.core.relational.Relational) or var not in cond.free_symbols:
        return None
    if isinstance(cond, (sp.LessThan, sp.StrictLessThan)):
        diff = cond.lhs - cond.rhs  # cond ⇔ diff ≤ 0 (or < 0)
    elif isinstance(cond, (sp.GreaterThan, sp.StrictGreaterThan)):
        diff = cond.rhs - cond.lhs
    else:
        return None
    strict = isinstance(cond, (sp.StrictLessThan, sp.StrictGreaterThan))
    coeff = diff.coeff(var)
    rest = sp.expand(diff - coeff * var)
    if rest.has(var) or coeff not in (1, -1):
        return None
    if strict:  # integers: d < 0 ⇔ d + 1 ≤ 0
        rest += 1
    if coeff == 1:  # var + rest ≤ 0 ⇔ var ≤ −rest
        return True, -rest
    return False, rest  # −var + rest ≤ 0 ⇔ var ≥ rest


def _dependents(var, limits) -> set:
    """The bound indices whose ranges depend on `var`, directly or through another."""
    out: set = set()
    frontier = {var}
    while frontier:
        new = {v for v, a, b in limits if v not in out and v != var and (a.free_symbols | b.free_symbols) & frontier}
        out |= new
        frontier = new
    return out


def _nonneg_constant(expr) -> bool:
    """`expr ≥ 0` for every value of its symbols, decided term by term after writing each
    positive-integer symbol (a size) as 1 + s and each non-negative integer one as s, s ≥ 0."""
    expr = sp.sympify(expr)
    if expr.is_nonnegative is True:
        return True
    sub = {}
    for sym in expr.free_symbols:
        if isinstance(sym, sp.Indexed) or not sym.is_integer:
            continue
        if sym.is_positive:
            sub[sym] = 1 + sp.Dummy("s", integer=True, nonnegative=True)
        elif sym.is_nonnegative:
            sub[sym] = sp.Dummy("s", integer=True, nonnegative=True)
    if not sub:
        return False
    shifted = sp.expand(expr.xreplace(sub))
    return all(t.is_nonnegative is True for t in sp.Add.make_args(shifted))


def _separable(factors: list, limits: list) -> list:
    """The summations in groups that share nothing: no factor reads indices of two groups, no
    range mentions another group's index. [(factors, limits)] per group (one group: not
    separable)."""
    bound = [v for v, _, _ in limits]
    parent = {v: v for v in bound}

    def find(v):
        while parent[v] != v:
            v = parent[v]
        return v

    def join(vs):
        vs = [find(v) for v in vs]
        for v in vs[1:]:
            parent[v] = vs[0]

    for f in factors:
        join([v for v in bound if v in f.free_symbols])
    for v, a, b in limits:
        join([v] + [u for u in bound if u in (a.free_symbols | b.free_symbols)])
    roots = list(dict.fromkeys(find(v) for v in bound))
    if len(roots) < 2:
        return []
    groups = []
    for root in roots:
        members = {v for v in bound if find(v) == root}
        group_factors = [f for f in factors if f.free_symbols & members]
        groups.append((group_factors, [lim for lim in limits if lim[0] in members]))
    return groups


def _has_sign_atoms(e) -> bool:
    return bool(e.atoms(sp.Abs, sp.sign, sp.Heaviside, sp.Max, sp.Min))


def _by_skeleton(limits, skeleton, other):
    """The summation's indices renamed so that Σ skeleton is canonical (the least renaming of it
    alone), `other` renamed alike: terms with one skeleton then have one set of limits, whatever
    their non-polynomial factors."""
    bound = [v for v, _, _ in limits]
    if len(bound) > 5:
        return tuple(limits), skeleton, other
    names = [sp.Dummy(f"g{n}", integer=True, dummy_index=_GROUP_BASE + n) for n in range(len(bound))]
    best, best_key = None, None
    for perm in itertools.permutations(names):
        mapping = dict(zip(bound, perm))
        new_limits = _order_limits([(mapping[v], a.xreplace(mapping), b.xreplace(mapping)) for v, a, b in limits])
        key = sp.srepr(sp.Sum(skeleton.xreplace(mapping), *new_limits))
        if best_key is None or key < best_key:
            best, best_key = (mapping, tuple(sp.Tuple(*lim) for lim in new_limits)), key
    mapping, new_limits = best
    return new_limits, skeleton.xreplace(mapping), other.xreplace(mapping)


def _sign_subjects(expr, bound: set) -> list:
    """[(u, jumps)] for the atoms whose value depends on the sign of u: |u|, sign(u), H(u, ·),
    max/min(a, b) (u = a − b); `jumps` when one of them is discontinuous at 0 (sign, H). One u
    per ±u, those free of summed indices only, in a fixed order."""
    found: dict = {}
    for atom in sorted(expr.atoms(sp.Abs, sp.sign, sp.Heaviside, sp.Max, sp.Min), key=sp.default_sort_key):
        if isinstance(atom, (sp.Max, sp.Min)):
            if len(atom.args) != 2:
                continue
            u = atom.args[0] - atom.args[1]
        else:
            u = atom.args[0]
        if u.free_symbols & bound or u.is_number:
            continue
        key = -u if u.could_extract_minus_sign() else u
        jumps = isinstance(atom, (sp.sign, sp.Heaviside))
        found[key] = found.get(key, False) or jumps
    return sorted(found.items(), key=lambda kv: (sp.count_ops(kv[0]), sp.default_sort_key(kv[0])))


def _fixed_sign(c) -> bool:
    """c is a non-zero number, or a constant whose sign its symbols' assumptions decide (β with
    β > 0; no entry of an array): c·u then has u's sign, or the opposite, everywhere."""
    if c.is_number:
        return c != 0
    return not c.atoms(sp.Indexed) and (c.is_positive is True or c.is_negative is True)


def _same_subject(a, b) -> bool:
    """a = c·b for a constant c ≠ 0 of fixed sign (`_fixed_sign`): the same sign, or the
    opposite, everywhere (H(99x/100), H(βx) for β > 0 and sign(x) jump at the same point)."""
    if sp.expand(a - b) == 0 or sp.expand(a + b) == 0:
        return True
    if _fixed_sign(sp.cancel(a / b)):
        return True
    # k(e^{w} − 1), expm1 w, tanh w have w's sign (or the opposite): the same point 0
    inner_a, inner_b = monotone_argument(a), monotone_argument(b)
    return (inner_a is not None and _same_subject(inner_a[1], b)) or (
        inner_b is not None and _same_subject(a, inner_b[1])
    )


def _linear_atom(u, bound: set):
    """(t, c, rest) with u = c·t + rest, t an entry or a symbol (not a size) that rest does not
    contain, c a non-zero constant of fixed sign (`_fixed_sign`: a number, or β with β > 0, as
    in softplus with a slope, log(1 + e^{βx})/β); None if there is none. Every real value of u
    is then c·t + rest at exactly one t, so the branches on u's sign cover every t."""
    candidates = [
        a
        for a in u.atoms(sp.Indexed, sp.Symbol)
        if a not in bound
        and not (isinstance(a, sp.Symbol) and a.is_integer)
        and not any(x in bound for x in getattr(a, "indices", ()))
    ]
    for t in sorted(candidates, key=sp.default_sort_key):
        if isinstance(t, sp.Symbol) and any(t in ind.indices for ind in u.atoms(sp.Indexed)):
            continue
        rest, dependent = sp.expand(u).as_independent(t, as_Add=True)
        c = sp.cancel(dependent / t)
        if _fixed_sign(c) and not c.has(t) and not rest.has(t):
            return t, c, rest
    # a whole sum as the subject (a pre-activation Σ_k w_jk x_ik): an opaque real number, each
    # of its occurrences replaced by the branch's symbol
    c, t = sp.sympify(u).as_coeff_Mul()
    if isinstance(t, sp.Sum) and c != 0 and not (t.free_symbols & bound):
        return t, c, sp.Integer(0)
    # a product of entries (a learned slope: g_j x_ij): an opaque real number as well. Proving
    # the branch for an independent p of the branch's sign proves it at p = g_j x_ij too (a
    # more general statement), whatever occurrences of g_j and x_ij the replacement leaves
    if _product_of_entries(t) and c != 0 and not (t.free_symbols & bound):
        return t, c, sp.Integer(0)
    # a product of entries plus a constant (a hinge's 1 − y_ij x_ij): the same opaque number p,
    # its branch's value (±q − rest)/c
    entries = sp.sympify(u).atoms(sp.Indexed)
    rest, dependent = sp.expand(u).as_independent(*entries, as_Add=True) if entries else (u, 0)
    c, t = sp.sympify(dependent).as_coeff_Mul()
    if rest != 0 and _product_of_entries(t) and c != 0 and not ((t.free_symbols | rest.free_symbols) & bound):
        if not rest.has(sp.Indexed) and _fixed_sign(c):
            return t, c, rest
    return None


def monotone_argument(s):
    """(k, w) where s is k·f(w), k a non-zero number, f increasing with f(0) = 0 (e^{w} − 1,
    expm1 w, tanh w, sinh w): s has the sign of k·w; else None."""
    from sympy.codegen.cfunctions import expm1

    k, f = sp.factor_terms(s).as_coeff_Mul()
    if k == 0:
        return None
    if isinstance(f, (expm1, sp.tanh, sp.sinh)):
        return k, f.args[0]
    if isinstance(f, sp.Add) and len(f.args) == 2:  # b e^{w} − b, either way round
        c, term = f.args if f.args[0].is_number else f.args[::-1]
        b, g = term.as_coeff_Mul()
        if c.is_number and isinstance(g, sp.exp) and b + c == 0:
            return k * b, g.args[0]
    return None


def _monotone_sign(s):
    """1, −1 or 0: the sign of s = k·f(w) (`monotone_argument`) where w's sign is known to
    SymPy's assumptions (a branch's p > 0); else None. (min(0, α(e^{x} − 1)) has the sign of x:
    SELU as PyTorch writes it.)"""
    kw = monotone_argument(s)
    if kw is None:
        return None
    k, w = kw
    # ±½: only ≥ 0 or ≤ 0 known (a closed branch's p ≥ 0), enough for max, min and |·|
    sign = (
        1
        if w.is_positive
        else -1
        if w.is_negative
        else 0
        if w.is_zero
        else sp.S.Half
        if w.is_nonnegative
        else -sp.S.Half
        if w.is_nonpositive
        else None
    )
    return None if sign is None else sign * (1 if k > 0 else -1)


def _monotone_atoms_decided(expr):
    """expr with max, min, |·|, sign and H of a subject whose sign `_monotone_sign` knows
    evaluated (SymPy's assumptions do not see that e^{p} − 1 > 0 for p > 0)."""

    def decided(a):
        if isinstance(a, (sp.Max, sp.Min)) and len(a.args) == 2:
            sgn = _monotone_sign(a.args[0] - a.args[1])
            if sgn is None:
                return a
            first = (sgn >= 0) if isinstance(a, sp.Max) else (sgn <= 0)
            return a.args[0] if first else a.args[1]
        sgn = _monotone_sign(a.args[0])
        if sgn is None:
            return a
        if isinstance(a, sp.Abs):
            return (1 if sgn > 0 else -1 if sgn < 0 else 0) * a.args[0]
        if abs(sgn) == sp.S.Half:  # not strict: sign and H stay as they are
            return a
        if isinstance(a, sp.sign):
            return sp.Integer(sgn)
        if sgn != 0:  # a step: its value at 0 stays the step's own
            return sp.Integer(1 if sgn > 0 else 0)
        return a

    atoms = (sp.Max, sp.Min, sp.Abs, sp.sign, sp.Heaviside)
    if not expr.has(*atoms):
        return expr
    return expr.replace(lambda a: isinstance(a, atoms), decided)


def _product_of_entries(t) -> bool:
    """t is a product of two or more powers of entries (g_j x_ij, x_ij² y_ij), nothing else."""
    if not isinstance(t, sp.Mul):
        return False
    bases = [f.base if isinstance(f, sp.Pow) and f.exp.is_Integer and f.exp > 0 else f for f in t.args]
    return len(bases) >= 2 and all(isinstance(b, sp.Indexed) for b in bases)


def _replace_subject(expr, t, value):
    """expr with the subject t written as `value`: an atom or a whole sum by structure; a product
    of entries algebraically (subs: −g_j x_ij and e^{−g_j x_ij} read as −t and e^{−t} too)."""
    return expr.subs(t, value) if isinstance(t, sp.Mul) else expr.xreplace({t: value})


def _real(e) -> bool:
    return e.is_extended_real is True


def _polynomial_atom(f) -> bool:
    if isinstance(f, (sp.Indexed, sp.KroneckerDelta)):
        return True
    return isinstance(f, sp.Pow) and isinstance(f.base, sp.Indexed) and f.exp.is_Integer and f.exp > 0


def _plain_symbols(e) -> set:
    """Free symbols, without the Indexed objects SymPy also lists (with bound indices)."""
    return {s for s in e.free_symbols if not isinstance(s, sp.Indexed)}


def _show(e) -> str:
    return sp.sstr(e)


def _free_deltas(factors: list, limits: list):
    """δ(x, y)·f(x) = δ(x, y)·f(y) for a free index x (not summed in this term): where x ≠ y both
    sides are 0, where x = y the substitution changes nothing. So the term is written with one
    name for the two: x is replaced by y in every other factor and bound (of two free indices the
    later in name order gives way, so that A_ij δ_jk and A_ik δ_jk reach one form). No side
    condition: the identity holds for any values, integers or not."""
    bound = {v for v, _, _ in limits}
    done: set = set()
    for _ in range(4 * len(factors) + 1):  # each pass removes a name from every factor but one
        for n, f in enumerate(factors):
            if not isinstance(f, sp.KroneckerDelta) or f in done:
                continue
            done.add(f)
            a, b = f.args
            pairs = [
                (x, y) for x, y in ((a, b), (b, a)) if isinstance(x, sp.Symbol) and x not in bound and not y.has(x)
            ]
            if not pairs:
                continue
            if len(pairs) == 2:  # two free names: the later one gives way
                pairs.sort(key=lambda p: sp.default_sort_key(p[0]), reverse=True)
            x, y = pairs[0]
            if not any(g.has(x) for m, g in enumerate(factors) if m != n) and not any(
                lo.has(x) or hi.has(x) for _, lo, hi in limits
            ):
                continue
            sub = {x: y}
            factors = [g if m == n else g.xreplace(sub) for m, g in enumerate(factors)]
            limits = [(v, lo.xreplace(sub), hi.xreplace(sub)) for v, lo, hi in limits]
            break
        else:
            return factors, limits
    return factors, limits

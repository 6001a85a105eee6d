"""A small normaliser for index expressions: the engine behind every symbolic-size proof.

SymPy's `simplify` is unsound on sums of Kronecker deltas (it can leak a bound index into the
result) and `Sum.doit` produces `Piecewise` range conditions that `refine` cannot discharge.
So qed decides identities between index expressions with its own, deliberately simple, rules:

1. **Expand** into terms `coeff · Σ_{k1..kr} (product of factors)`: every `Sum` in a
   polynomial position is pulled to the front with a fresh bound index; `exp(a + b)` becomes
   `exp(a)·exp(b)`; the array language's `Sigmoid(u)` becomes 1/(1 + exp(−u)) and `NormalCDF(u)`
   (1 + erf(u/√2))/2; anything non-polynomial (`1/Σ…`, `√(σ²+ε)`, `exp(Σ…)`) is an opaque atom
   whose inside is normalised recursively.
2. **Sift deltas**: `Σ_k δ(x, k)·f(k) = f(x)`, recording the assumption `x ∈ [lo, hi]`.
3. **Split ranges** where a `Piecewise` tests a bound index against a free one
   (`j ≤ i` in a causal mask): `Σ_{j=0}^{n-1} = Σ_{j=0}^{i} + Σ_{j=i+1}^{n-1}`.
4. **Rename** the bound indices of each term canonically (the least of all renamings), so
   that alpha-equivalent sums become the same SymPy object.
5. **Decide**: hide each canonical sum and each `exp` behind a symbol and `cancel` the
   resulting rational function. The identity is proved when the residual is exactly 0.

Every assumption used is recorded in `Normaliser.assumptions`.
"""
from __future__ import annotations

import itertools

import sympy as sp

from .arrays import DOCUMENT_NODES

Term = tuple[list, list]  # (factors, limits[(var, lo, hi)])

_MAX_PERMUTATIONS = 720


class NormaliserError(RuntimeError):
    """The normaliser met an expression it does not know how to handle soundly."""


class Normaliser:
    def __init__(self):
        self.assumptions: list[str] = []

    # ---------------------------------------------------------------- bookkeeping
    def note(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)

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
        canonical = self._combine_bodies(canonical)
        table: dict = {}
        hidden = self._hide(canonical, table)
        result = sp.cancel(sp.together(hidden))
        return self._unhide(result, table) if result != 0 else sp.Integer(0)

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
            if power.is_Integer and power > 0 and (base.has(sp.Sum) or isinstance(base, (sp.Add, sp.Mul))):
                return self._product([self._terms(base) for _ in range(int(power))])
            inner = self.canon(base)
            if power.is_negative:
                self.note(f"{_show(inner)} ≠ 0")
            if inner.has(sp.Sum) and isinstance(inner, sp.Mul):
                # (c · Σ)^p = c^p · Σ^p keeps the atom canonical
                coeff, rest = inner.as_independent(sp.Sum, as_Add=False)
                return [([coeff ** power, rest ** power], [])]
            return [([inner ** power], [])]
        if isinstance(e, DOCUMENT_NODES):   # σ(u), Φ(u): the document's formulas, nothing else
            return self._terms(e.document_form())
        if isinstance(e, sp.exp):
            arg = self.canon(e.args[0])
            return [([sp.exp(part) for part in sp.Add.make_args(arg)], [])]
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
        while True:
            bound = {v: (lo, hi) for v, lo, hi in limits}
            for n, f in enumerate(factors):
                if not isinstance(f, sp.KroneckerDelta):
                    continue
                x, y = f.args
                if y in bound and not x.has(y):
                    var, value = y, x
                elif x in bound and not y.has(x):
                    var, value = x, y
                else:
                    continue
                lo, hi = bound[var]
                self.note(f"{_show(value)} ∈ [{_show(lo)}, {_show(hi)}]")
                sub = {var: value}
                factors = [g.xreplace(sub) for m, g in enumerate(factors) if m != n]
                limits = [(v, a.xreplace(sub), b.xreplace(sub)) for v, a, b in limits if v != var]
                break
            else:
                return factors, limits

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
                    if any(g.has(u) or g.has(w) for g in new_factors) or \
                            any((a.has(u) or a.has(w) or b.has(u) or b.has(w)) for _, a, b in others):
                        continue
                    self.note(f"block reindexing c = {_show(block)}·u + w over {_show(hi_u + 1)} blocks")
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
                    if upper:
                        pieces = [((var, lo, at), yes), ((var, at + 1, hi), no)]
                    else:
                        pieces = [((var, lo, at - 1), no), ((var, at, hi), yes)]
                    self.note(f"{_show(lo)} ≤ {_show(at)} ≤ {_show(hi)}")
                    out = []
                    for limit, branch in pieces:
                        new_factors = [g.xreplace({pw: branch}) for g in factors]
                        new_limits = [limit if v == var else (v, a, b) for v, a, b in limits]
                        out.append((new_factors, new_limits))
                    return out
        return None

    def _rename(self, factors: list, limits: list) -> sp.Expr:
        coeff = sp.Integer(1)
        # drop summations whose index appears nowhere: Σ_{k=lo}^{hi} c = (hi − lo + 1)·c
        while True:
            used = set()
            for f in factors:
                used |= f.free_symbols
            for v, a, b in limits:
                used |= a.free_symbols | b.free_symbols
            unused = [(v, a, b) for v, a, b in limits if v not in used]
            if not unused:
                break
            for v, a, b in unused:
                coeff *= b - a + 1
            limits = [lim for lim in limits if lim not in unused]
        if not limits:
            return coeff * sp.Mul(*factors)
        bound = [v for v, _, _ in limits]
        bound_set = set(bound)
        dependent = [f for f in factors if f.free_symbols & bound_set]
        independent = [f for f in factors if not f.free_symbols & bound_set]
        body = sp.Mul(*dependent)
        taken = {s.name for s in body.free_symbols - bound_set}
        for v, a, b in limits:
            taken |= {s.name for s in (a.free_symbols | b.free_symbols) - bound_set}
        for inner in body.atoms(sp.Sum):
            taken |= {v.name for v in inner.variables}
        names = []
        n = 0
        while len(names) < len(bound):
            if f"_k{n}" not in taken:
                names.append(sp.Symbol(f"_k{n}", integer=True))
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
        return coeff * sp.Mul(*independent) * best

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
            groups.setdefault((total.limits, skeleton), []).append(coeff * other)
        out = list(rest)
        for (limits, skeleton), parts in groups.items():
            if len(parts) == 1:
                out.append(sp.Sum(skeleton * parts[0], *limits) if parts[0].free_symbols & {v for v, *_ in limits}
                           else parts[0] * sp.Sum(skeleton, *limits))
                continue
            table: dict = {}
            combined = sp.cancel(sp.together(self._hide(sp.Add(*parts), table)))
            if combined != 0:
                out.append(sp.Sum(skeleton * self._unhide(combined, table), *limits))
        return sp.Add(*out)

    def _hide(self, e, table: dict):
        if isinstance(e, sp.Sum):
            return table.setdefault(e, sp.Symbol(f"_sum{len(table)}"))
        if isinstance(e, sp.exp):
            arg = e.args[0]
            if arg.could_extract_minus_sign():
                return 1 / self._hide(sp.exp(-arg), table)
            return table.setdefault(e, sp.Symbol(f"_exp{len(table)}"))
        if isinstance(e, (sp.Indexed, sp.Symbol, sp.Number, sp.NumberSymbol)) or not e.args:
            return e
        return e.func(*[self._hide(a, table) for a in e.args])

    @staticmethod
    def _unhide(e, table: dict):
        return e.xreplace({v: k for k, v in table.items()})


class Indicator(sp.Function):
    """[cond]: 1 where the condition holds, 0 elsewhere (evaluates when the condition does)."""

    nargs = 1

    @classmethod
    def eval(cls, cond):
        if cond is sp.true:
            return sp.Integer(1)
        if cond is sp.false:
            return sp.Integer(0)
        return None


def _two_branch(pw) -> bool:
    return len(pw.args) == 2 and pw.args[1][1] is sp.true


def _order_limits(limits: list) -> list:
    """Sort limits by name, but a limit whose bounds use another bound index goes inside it."""
    limits = sorted(limits, key=lambda lim: lim[0].name)
    ordered: list = []
    pending = list(limits)
    while pending:
        for lim in pending:
            others = {v for v, _, _ in pending if v != lim[0]}
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


def _polynomial_atom(f) -> bool:
    if isinstance(f, (sp.Indexed, sp.KroneckerDelta)):
        return True
    return isinstance(f, sp.Pow) and isinstance(f.base, sp.Indexed) and f.exp.is_Integer and f.exp > 0


def _plain_symbols(e) -> set:
    """Free symbols, without the Indexed objects SymPy also lists (with bound indices)."""
    return {s for s in e.free_symbols if not isinstance(s, sp.Indexed)}


def _show(e) -> str:
    return sp.sstr(e)

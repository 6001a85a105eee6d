"""Generated claims for what codegen prints that is not an op: constant tables and optimiser
steps.

A `Table` (derivations/language/ops.py) states the sources' entries once, as `Table.spec` (array name ->
the document's formula in the (row, col) index symbols); a `Step` (derivations/optim.py) states
the sources' rule once, as `Step.spec` (assignments in the document's form: m_t, v_t, m̂_t, v̂_t,
θ_t). From them and from what codegen prints, the registry generates

    <table>.entries     every printed entry (`TableArray.entry`) equals the spec's, for symbolic
                        sizes, options, rows and columns: each index that a floor, a Mod or a
                        (−1)^x reads is split by parity (x = 2k or 2k + 1, k an integer), after
                        which SymPy evaluates ⌊k + ½⌋ = k, (2k + 1) mod 2 = 1, (−1)^{2k} = 1;
                        Kronecker deltas of integer-linear arguments are decided exactly
                        (δ(2a, 2b + 1) = 0, δ(2a + 1, 2b + 1) = δ(a, b)); then both sides are
                        expanded and must agree term by term;
    <step>.update       every output of the printed `assigns` (p_new, m_new, v_new), with the
                        earlier lines substituted, equals the spec's, elementwise (entry (a, b)
                        of an (r × n) array, symbolic r and n), exactly: the insides of square
                        roots put in lowest terms, then expand and cancel (no `simplify`).

Each claim carries the unit's classic mistakes (`Table.mistakes`, `Step.mistakes`) and the
whole-value sign and factor edits of every printed entry or output line; `audit_table` and
`audit_step` run every automatic edit of `mutation.expression_mutants` against the claim:
killed (a concrete counterexample: an entry of the table at small sizes, or the step at
exact rational points), equivalent (the claim still proves: the same function), survived.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from math import gcd, lcm

import sympy as sp

from ..language.arrays import Assign, entry, index
from .core import Claim, Mutant, Proof
from .mutation import AuditResult, expression_mutants

PRECISION = 50  # digits of the exact evaluations that decide a counterexample
TOLERANCE = 1e-30  # relative gap above which two exact values differ

# ---------------------------------------------------------------------------------------------
# Tables: the decision procedure.


def _parity_split(exprs, indices) -> list[dict]:
    """Substitutions {x: 2k_x + r_x} over every parity combination of the indices that a floor,
    ceiling, Mod or power of −1 reads (no split when none does)."""
    need = []
    for x in indices:
        for e in exprs:
            hit = any(
                x in node.free_symbols
                for node in sp.preorder_traversal(sp.sympify(e))
                if isinstance(node, (sp.floor, sp.ceiling, sp.Mod)) or (isinstance(node, sp.Pow) and node.base == -1)
            )
            if hit:
                need.append(x)
                break
    cases = [{}]
    for x in need:
        k = sp.Dummy(f"{x.name}_pair", integer=True)
        cases = [{**c, x: 2 * k + r} for c in cases for r in (0, 1)]
    return cases


def _integer_delta(delta: sp.KroneckerDelta):
    """δ(a, b) for integer-valued a, b linear in integer symbols with rational coefficients:
    0 when a − b = 0 has no integer solution (the gcd of the coefficients does not divide the
    constant), else δ(c, 0) with c = (a − b) scaled to coprime integer coefficients, its sign
    fixed (so that δ(a, b) and δ(b, a) meet). Anything else is left as it is."""
    if not isinstance(delta, sp.KroneckerDelta) or len(delta.args) != 2:
        return delta
    diff = sp.expand(delta.args[0] - delta.args[1])
    syms = sorted(diff.free_symbols, key=sp.default_sort_key)
    if not syms:
        return delta
    if not all(s.is_integer for s in syms):
        return delta
    try:
        poly = sp.Poly(diff, *syms)
    except sp.PolynomialError:
        return delta
    if poly.total_degree() > 1:
        return delta
    coeffs = [poly.coeff_monomial(s) for s in syms]
    const = poly.coeff_monomial(1)
    if not all(c.is_Rational for c in coeffs + [const]):
        return delta
    scale = lcm(*[int(c.q) for c in coeffs + [const]])
    ints = [int(c * scale) for c in coeffs]
    c0 = int(const * scale)
    g = 0
    for c in ints:
        g = gcd(g, c)
    if g == 0:
        return delta
    if c0 % g:
        return sp.Integer(0)
    canon = sp.expand(diff * scale / g)
    if canon.could_extract_minus_sign():
        canon = -canon
    return sp.KroneckerDelta(canon, 0)


def _canon(e) -> sp.Expr:
    e = sp.expand(sp.sympify(e))
    e = e.replace(lambda x: isinstance(x, sp.KroneckerDelta), _integer_delta)
    e = sp.expand(e)
    # δ^k = δ for k ≥ 1
    e = e.replace(
        lambda x: isinstance(x, sp.Pow) and isinstance(x.base, sp.KroneckerDelta) and x.exp.is_Integer and x.exp > 0,
        lambda x: x.base,
    )
    return sp.expand(e)


def entry_residuals(printed, spec, indices) -> list[tuple[dict, sp.Expr]]:
    """(case, residual) for every parity case of `printed − spec`; all 0 means proved."""
    out = []
    for case in _parity_split([printed, spec], indices):
        res = _canon(sp.sympify(printed).xreplace(case)) - _canon(sp.sympify(spec).xreplace(case))
        out.append((case, sp.expand(res)))
    return out


# ---------------------------------------------------------------------------------------------
# Tables: concrete points (counterexamples and spot-checks).


def _table_points(table) -> list[tuple[dict, dict]]:
    """(sizes, options) at which entries are compared exactly: every size 6 unless
    `Table.check` says otherwise; the options' defaults, then 7/3 for each."""
    sizes = {s.name: table.check.get("sizes", {}).get(s.name, 6) for s in table.sizes}
    given = table.check.get("options", {})
    first = {o.name: given.get(o.name, o.default) for o in table.options if o.symbol is not None}
    second = {o.name: sp.Rational(7, 3) for o in table.options if o.symbol is not None}
    return [(sizes, first)] + ([(sizes, second)] if second else [])


def _subs(table, arr, sizes, options, row, col) -> dict:
    subs = {s: sp.Integer(sizes[s.name]) for s in table.sizes}
    for o in table.options:
        if o.symbol is not None:
            subs[o.symbol] = sp.nsimplify(options[o.name])
    subs[arr.index[0]], subs[arr.index[1]] = sp.Integer(row), sp.Integer(col)
    return subs


def _exact(expr, subs):
    """The value of `expr` at `subs`, to PRECISION digits; None where it is not a finite real
    number (a division by zero, a complex root: the printed table would hold inf or NaN)."""
    try:
        v = sp.N(sp.sympify(expr).xreplace(subs), PRECISION)
    except (ZeroDivisionError, TypeError, ValueError):
        return None
    if v.has(sp.zoo, sp.nan, sp.oo, -sp.oo) or not v.is_number or v.is_real is not True:
        return None
    return v


def _differ(got, want) -> bool:
    if got is None:
        return True
    return abs(got - want) > TOLERANCE * max(1, abs(want))


class _TableCheck:
    """The spec's values on the grids of the check points, computed once per table."""

    def __init__(self, table):
        self.table = table
        self.points = _table_points(table)
        self._want: dict = {}

    def grid(self, arr, sizes):
        rows, cols = (
            int(sp.sympify(dim).xreplace({s: sp.Integer(sizes[s.name]) for s in self.table.sizes})) for dim in arr.shape
        )
        return [(r, c) for r in range(rows) for c in range(cols)]

    def want(self, k, arr, r, c):
        key = (k, arr.name, r, c)
        if key not in self._want:
            sizes, options = self.points[k]
            self._want[key] = _exact(self.table.spec[arr.name], _subs(self.table, arr, sizes, options, r, c))
        return self._want[key]

    def refute(self, entries: dict) -> dict | None:
        """The first entry where the printed formulas `entries` (array name -> entry) differ from
        the spec, or None. Only the arrays in `entries` are compared (the others are the printed
        ones, which `prove_entries` proves); all of them when `entries` is empty."""
        for k, (sizes, options) in enumerate(self.points):
            for arr in self.table.arrays:
                if entries and arr.name not in entries:
                    continue
                printed = entries.get(arr.name, arr.entry)
                for r, c in self.grid(arr, sizes):
                    want = self.want(k, arr, r, c)
                    got = _exact(printed, _subs(self.table, arr, sizes, options, r, c))
                    if _differ(got, want):
                        return {
                            "array": arr.name,
                            "row": r,
                            "col": c,
                            "sizes": dict(sizes),
                            "options": {n: str(v) for n, v in options.items()},
                            "printed": "not a finite real" if got is None else float(got),
                            "spec": float(want),
                        }
        return None

    def spot_check(self) -> dict:
        worst, n = 0.0, 0
        sizes, options = self.points[0]
        for arr in self.table.arrays:
            for r, c in self.grid(arr, sizes):
                got = _exact(arr.entry, _subs(self.table, arr, sizes, options, r, c))
                want = self.want(0, arr, r, c)
                worst = max(worst, float(abs(got - want)) if got is not None else float("inf"))
                n += 1
        return {
            "entries": n,
            "max_abs_gap": worst,
            "sizes": dict(sizes),
            "options": {k: str(v) for k, v in options.items()},
        }


_TABLE_CHECKS: dict = {}


def _table_check(table) -> _TableCheck:
    key = id(table)
    if key not in _TABLE_CHECKS or _TABLE_CHECKS[key].table is not table:
        _TABLE_CHECKS[key] = _TableCheck(table)
    return _TABLE_CHECKS[key]


TABLE_METHOD = (
    "exact: each index read by floor, Mod or (−1)^x split by parity (x = 2k or 2k + 1, "
    "k an integer symbol); integer-linear Kronecker deltas decided; both sides expanded, "
    "for symbolic sizes, options, rows and columns"
)


def prove_entries(table, entries: dict | None = None) -> Proof:
    """Every printed entry (or the `entries` given instead) equals the table's spec."""
    if not table.spec:
        return Proof("unproven", f"table {table.name} has no specification")
    entries = entries or {}
    for arr in table.arrays:
        printed = entries.get(arr.name, arr.entry)
        for case, res in entry_residuals(printed, table.spec[arr.name], arr.index):
            if res != 0:
                cx = _table_check(table).refute({arr.name: printed})
                where = ", ".join(f"{k} = {sp.sstr(v)}" for k, v in case.items()) or "no split"
                return Proof(
                    "refuted" if cx else "unproven",
                    TABLE_METHOD,
                    [],
                    f"{arr.name} ({where}): {sp.sstr(res)}",
                    counterexample=cx,
                )
    assumptions = [
        "row, col integers (every entry of the grid; the identity needs no range)",
        "sizes and options symbolic",
    ]
    return Proof("proved-general", TABLE_METHOD, assumptions, "0", spot_check=_table_check(table).spot_check())


@dataclass(frozen=True)
class EntryMutant:
    """The printed entry of table array `array`, replaced by `expr`."""

    name: str
    mistake: str
    array: str
    expr: sp.Expr


def table_mutants(table) -> list[EntryMutant]:
    """Every automatic edit (derivations/proof/mutation.py) of every printed entry of `table`."""
    out = []
    for arr in table.arrays:
        for n, (kind, what, new) in enumerate(expression_mutants(arr.entry, lambda a: [])):
            out.append(EntryMutant(f"{arr.name}.{kind}{n}", f"{arr.name}[row, col] = …: {what}", arr.name, new))
    return out


def _table_sample(table) -> list[EntryMutant]:
    """The mutants a table's claim carries: its classic mistakes, and the whole-value sign and
    factor edits of every entry."""
    out = [
        EntryMutant(name, mistake, target, sp.sympify(expr)) for name, (mistake, target, expr) in table.mistakes.items()
    ]
    for arr in table.arrays:
        out.append(EntryMutant(f"auto-sign.{arr.name}", f"{arr.name}: the whole entry negated", arr.name, -arr.entry))
        out.append(
            EntryMutant(f"auto-factor.{arr.name}", f"{arr.name}: the whole entry doubled", arr.name, 2 * arr.entry)
        )
    return out


def table_claim_id(table) -> str:
    return f"{table.name}.entries"


def table_claims(table) -> list[Claim]:
    """`<table>.entries`: the printed entries equal the sources' (one claim for all arrays)."""
    if not table.spec:
        return []
    check = _table_check(table)
    mutants = [Mutant(m.name, m.mistake, (lambda m=m: check.refute({m.array: m.expr}))) for m in _table_sample(table)]
    return [
        Claim(
            id=table_claim_id(table),
            title=f"{table.title}: every printed entry equals the sources' formula",
            source=table.source or table.module,
            latex=table.latex,
            prove=lambda: prove_entries(table),
            mutants=mutants,
            module=table.module,
        )
    ]


def _spread(mutants: list, limit: int | None) -> list:
    if limit is not None and len(mutants) > limit:
        step = len(mutants) / limit
        return [mutants[int(k * step)] for k in range(limit)]
    return mutants


def audit_table(table, limit: int | None = None) -> list[AuditResult]:
    """Every automatic mutant of the table's printed entries against `<table>.entries`."""
    check = _table_check(table)
    cid = table_claim_id(table)
    out = []
    for m in _spread(table_mutants(table), limit):
        cx = check.refute({m.array: m.expr})
        if cx is not None:
            out.append(AuditResult(table.name, m.name, m.mistake, "killed", cid, cx))
            continue
        proved = prove_entries(table, {m.array: m.expr}).status == "proved-general"
        out.append(AuditResult(table.name, m.name, m.mistake, "equivalent" if proved else "survived"))
    return out


# ---------------------------------------------------------------------------------------------
# Steps.


def _close(assigns) -> dict:
    env: dict = {}
    for a in assigns:
        env[a.target] = sp.sympify(a.expr).xreplace(env)
    return env


def _is_zero(expr) -> bool:
    """Exact zero test: the inside of every square root in lowest terms (√(g²c/c) becomes |g|),
    then expand and cancel. No `simplify`."""
    expr = sp.sympify(expr)
    expr = expr.replace(
        lambda e: isinstance(e, sp.Pow) and e.exp == sp.S.Half, lambda e: sp.sqrt(sp.factor(sp.cancel(e.base)))
    )
    return sp.cancel(sp.expand(sp.together(expr))) == 0


_A, _B = index("a"), index("b")
STEP_METHOD = (
    "exact algebra, elementwise: entry (a, b) of every output of the printed lines (earlier "
    "lines substituted) minus the spec's (its own intermediates substituted); square-root "
    "insides in lowest terms, then expand and cancel"
)


def _bias_corrections(step) -> tuple[dict, list[str]]:
    """β^t → 1 − c with c a positive symbol, for every option β whose domain lies in [0, 1) and
    every option t whose domain lies in the integers ≥ 1: the fact 0 < 1 − β^t ≤ 1 (β^t =
    β·β^{t−1} ∈ [0, β] ⊂ [0, 1)), which is what lets √(v/(1 − β^t)) be √v / √(1 − β^t) (a
    root of a quotient by a positive number splits, for any v). The domains are the options'
    own, which the generated code checks at run time (`_validate.in_domain`)."""
    unit = sp.Interval.Ropen(0, 1)
    betas = [o for o in step.options if o.symbol is not None and o.allowed().is_subset(unit)]
    steps_ = [
        o
        for o in step.options
        if o.symbol is not None and o.symbol.is_integer and o.allowed().is_subset(sp.Range(1, sp.oo))
    ]
    subs, facts = {}, []
    for b in betas:
        for t in steps_:
            subs[b.symbol**t.symbol] = 1 - sp.Dummy(f"c_{b.name}", positive=True)
            facts.append(
                f"1 − {b.name}^{t.name} > 0: proved from the options' domain 0 ≤ {b.name} < 1, "
                f"{t.name} ≥ 1 ({b.name}^{t.name} ∈ [0, {b.name}]), a precondition the generated "
                "code checks at run time (_validate.in_domain)"
            )
    return subs, facts


def prove_update(step, assigns: list | None = None) -> Proof:
    """Every output of the printed `assigns` (or the ones given) equals the spec's, where each
    bias correction 1 − β^t is a positive number (`_bias_corrections`)."""
    if not step.spec:
        return Proof("unproven", f"step {step.name} has no specification")
    printed = _close(step.assigns if assigns is None else assigns)
    spec = _close(step.spec)
    corrections, facts = _bias_corrections(step)
    for o in step.outputs:
        if o not in printed:
            return Proof("unproven", STEP_METHOD, residual=f"{o.name} is never computed")
        diff = entry(printed[o], (_A, _B)) - entry(spec[o], (_A, _B))
        if not _is_zero(diff.xreplace(corrections)):
            cx = _step_check(step).refute(step.assigns if assigns is None else assigns)
            return Proof(
                "refuted" if cx else "unproven", STEP_METHOD, [], f"{o.name}: {sp.sstr(diff)}", counterexample=cx
            )
    assumptions = [
        "r, n symbolic sizes (the step is elementwise: any shape)",
        "every divisor of the rule is positive: 1 − β₁^t and 1 − β₂^t (below), "
        "√v̂ + ε ≥ ε > 0 (ε's domain, checked at run time by _validate.in_domain)"
        if len(step.spec) > 1
        else "η, W, ∂L/∂W real",
    ] + facts
    return Proof("proved-general", STEP_METHOD, assumptions, "0", spot_check=_step_check(step).spot_check())


_SCALARS = (
    sp.Rational(1, 10),
    sp.Rational(4, 5),
    sp.Rational(9, 10),
    sp.Rational(1, 7),
    sp.Rational(1, 5),
    sp.Rational(2, 3),
)


class _StepCheck:
    """Exact rational points for a step: every input a random non-zero rational in [−3, 3] (in
    [0, 3] for the inputs `Step.check["nonnegative"]` names: Adam's second moment, ≥ 0 as it is
    from v_0 = 0), t cycling through 1, 2, 3, 5 (`check["t"]`), the other options distinct values
    in (0, 1) (`check["scalars"]`: {name: value})."""

    def __init__(self, step, tries: int = 8):
        self.step = step
        self.spec = _close(step.spec)
        self.points = [self._point(seed) for seed in range(tries)]
        self._want: dict = {}

    def _point(self, seed: int) -> dict:
        rng = random.Random(seed)
        pt = {}
        nonneg = set(self.step.check.get("nonnegative", ()))
        for a in self.step.inputs:
            lo = 0 if a.name in nonneg else -24
            pt[a] = sp.Rational(rng.randint(lo, 24) or 5, 8)
        given = self.step.check.get("scalars", {})
        ts = self.step.check.get("t", (1, 2, 3, 5))
        k = 0
        for o in self.step.options:
            if o.symbol is None:
                continue
            if o.symbol.is_integer:
                pt[o.symbol] = sp.Integer(ts[seed % len(ts)])
            else:
                pt[o.symbol] = sp.nsimplify(given.get(o.name, _SCALARS[k % len(_SCALARS)]))
                k += 1
        return pt

    def want(self, k, o):
        if (k, o) not in self._want:
            self._want[(k, o)] = _exact(self.spec[o], self.points[k])
        return self._want[(k, o)]

    def refute(self, assigns) -> dict | None:
        printed = _close(assigns)
        for k, pt in enumerate(self.points):
            for o in self.step.outputs:
                want = self.want(k, o)
                if want is None:
                    continue
                got = _exact(printed[o], pt) if o in printed else None
                if _differ(got, want):
                    return {
                        "output": o.name,
                        "at": {str(s): str(v) for s, v in pt.items()},
                        "printed": "not a finite real" if got is None else float(got),
                        "spec": float(want),
                    }
        return None

    def spot_check(self) -> dict:
        printed = _close(self.step.assigns)
        worst = 0.0
        for k, pt in enumerate(self.points[:2]):
            for o in self.step.outputs:
                got, want = _exact(printed[o], pt), self.want(k, o)
                worst = max(worst, float(abs(got - want)) if got is not None else float("inf"))
        return {"points": 2, "max_abs_gap": worst}


_STEP_CHECKS: dict = {}


def _step_check(step) -> _StepCheck:
    key = id(step)
    if key not in _STEP_CHECKS or _STEP_CHECKS[key].step is not step:
        _STEP_CHECKS[key] = _StepCheck(step)
    return _STEP_CHECKS[key]


@dataclass(frozen=True)
class LineMutant:
    """Printed line `position` of a step, its value replaced by `expr`."""

    name: str
    mistake: str
    position: int
    expr: sp.Expr

    def apply(self, step) -> list:
        lines = list(step.assigns)
        old = lines[self.position]
        lines[self.position] = Assign(old.target, self.expr, old.when)
        return lines


def step_mutants(step) -> list[LineMutant]:
    """Every automatic edit (derivations/proof/mutation.py) of every printed line of `step`: another
    array read in place of one ranges over the inputs and the earlier lines (all of one shape)."""
    out = []
    available = list(step.inputs)
    for pos, a in enumerate(step.assigns):
        like = (lambda av: lambda x: [b for b in av if b != x])(list(available))
        for n, (kind, what, new) in enumerate(expression_mutants(a.expr, like)):
            out.append(LineMutant(f"{pos}.{a.target.name}.{kind}{n}", f"{a.target.name} = …: {what}", pos, new))
        if a.target not in available:
            available.append(a.target)
    return out


def _step_sample(step) -> list[LineMutant]:
    """A step claim's mutants: its classic mistakes, and the whole-value sign and factor edits of
    every output's line."""

    def line_of(name):
        return max(k for k, a in enumerate(step.assigns) if a.target.name == name)

    out = [
        LineMutant(name, mistake, line_of(target), sp.sympify(expr))
        for name, (mistake, target, expr) in step.mistakes.items()
    ]
    for o in step.outputs:
        pos = line_of(o.name)
        a = step.assigns[pos]
        out.append(LineMutant(f"auto-sign.{o.name}", f"{o.name}: the whole value negated", pos, -a.expr))
        out.append(LineMutant(f"auto-factor.{o.name}", f"{o.name}: the whole value doubled", pos, 2 * a.expr))
    return out


def step_claim_id(step) -> str:
    return f"{step.name}.update"


def step_claims(step) -> list[Claim]:
    """`<step>.update`: every printed output equals the sources' rule."""
    if not step.spec:
        return []
    check = _step_check(step)
    mutants = [Mutant(m.name, m.mistake, (lambda m=m: check.refute(m.apply(step)))) for m in _step_sample(step)]
    return [
        Claim(
            id=step_claim_id(step),
            title=f"{step.title}: the printed update equals the sources' rule",
            source=step.source or step.module,
            latex=step.latex,
            prove=lambda: prove_update(step),
            mutants=mutants,
            module=step.module,
        )
    ]


def audit_step(step, limit: int | None = None) -> list[AuditResult]:
    """Every automatic mutant of the step's printed lines against `<step>.update`."""
    check = _step_check(step)
    cid = step_claim_id(step)
    out = []
    for m in _spread(step_mutants(step), limit):
        lines = m.apply(step)
        cx = check.refute(lines)
        if cx is not None:
            out.append(AuditResult(step.name, m.name, m.mistake, "killed", cid, cx))
            continue
        proved = prove_update(step, lines).status == "proved-general"
        out.append(AuditResult(step.name, m.name, m.mistake, "equivalent" if proved else "survived"))
    return out


__all__ = [
    "table_claims",
    "step_claims",
    "table_mutants",
    "step_mutants",
    "audit_table",
    "audit_step",
    "prove_entries",
    "prove_update",
    "entry_residuals",
    "EntryMutant",
    "LineMutant",
]

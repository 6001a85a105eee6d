"""Kinks: the points u = 0 that an identity was decided off, checked rather than assumed.

The normaliser decides a step's value at its jump only where both sides agree there; where they
do not (the specification's derivative of max(0, u) is H(u) with H(0) = ½, the printed code takes
H(u, 0); or a case split whose u = 0 branch fails) it proves the identity off u = 0 and records
the point (`rewriting.Kink`). The gate (`core.decide`) then checks each such point:

1. **Admissible.** A claim may hold "where u ≠ 0" only if the *specification* is not
   differentiable at u = 0: it has a max/min, |·|, sign or step whose argument is c·u for a
   non-zero number c (normal forms compared up to a renaming of the indices). Where a case
   split's branch restates u (x − 3 for max(x + 3, 0) − 6 on x + 3 > 0) and no argument
   matches as written, the specification's derivative must jump (different limits from the
   two sides) at every point tried on u = 0, and the certificate says so. A kink that only
   the printed code has (a step in the backward of the smooth log(1 + e^{x})) is no hypothesis:
   the claim is refuted at a point on it, or left unproven.
2. **In the subdifferential.** At points on the kink (one entry of u solved for so that u = 0
   exactly — its root where u is affine in it, else by `solveset` at the point, a rational
   root only — the others drawn as for any counterexample) the printed value must lie between the
   specification's one-sided derivatives there, S₋ and S₊: the specification evaluated with every
   step and sign at its jump read from the side of u < 0 and of u > 0 (`numeric.Point.toward`),
   every other atom, continuous there, at the point itself. For a kink of an elementwise
   max(0, u) or |u| that interval is the subdifferential (ReLU: [0, dy]); where the kinks
   cancel (a smooth function written with max and |·|) it is a single value, the derivative.

The same points refute a mutant whose only error is its value at a kink (`refute_at_kinks`):
the ordinary counterexample search draws entries away from 0 and never meets one.
"""

from __future__ import annotations

import itertools

import mpmath
import sympy as sp

from ..language.arrays import HalfStep
from . import numeric

_STEP = 2**-90  # the one-sided points: u = ±2⁻⁹⁰·slope, exact in 40 digits
_TOL = 1e-25  # relative slack on the bounds (40-digit arithmetic)
_SEEDS = range(12)
_FALLBACKS = 3  # points per seed on a kink that no side jumps across, each with another entry solved for
_MAX_RENAMINGS = 729


def subjects(expr) -> list[tuple[sp.Expr, dict, str]]:
    """[(u, ranges, kind)] for every atom of `expr` that is not differentiable where u = 0 —
    max/min(a, b) (u = a − b), |u|, sign u, a step H(u) — with the ranges of the sums around it."""
    out: list = []

    def walk(e, ranges):
        if isinstance(e, sp.Sum):
            inner = dict(ranges)
            inner.update({v: (lo, hi) for v, lo, hi in e.limits})
            walk(e.function, inner)
            return
        if isinstance(e, (sp.Max, sp.Min)) and len(e.args) == 2:
            out.append((e.args[0] - e.args[1], ranges, "max" if isinstance(e, sp.Max) else "min"))
        elif isinstance(e, sp.Abs):
            out.append((e.args[0], ranges, "|·|"))
        elif isinstance(e, sp.sign):
            out.append((e.args[0], ranges, "sign"))
        elif isinstance(e, (sp.Heaviside, HalfStep)):
            out.append((e.args[0], ranges, "step"))
        for a in e.args:
            if isinstance(a, sp.Basic) and not isinstance(a, (sp.Tuple,)):
                walk(a, ranges)

    walk(sp.sympify(expr), {})
    return out


def _indices(e, sizes) -> list:
    return sorted(
        (s for s in e.free_symbols if isinstance(s, sp.Symbol) and s.is_integer and s not in sizes),
        key=sp.default_sort_key,
    )


def same_up_to_indices(a, b, sizes=frozenset()) -> bool:
    """a = c·b' for a non-zero number c and b' the renaming of b's indices by some map of a's
    indices to b's (sizes are not indices)."""
    from .rewriting import _same_subject

    a, b = sp.sympify(a), sp.sympify(b)
    ia, ib = _indices(a, sizes), _indices(b, sizes)
    if not ia:
        return _same_subject(a, b)
    if not ib or len(ib) ** len(ia) > _MAX_RENAMINGS:
        return False
    for image in itertools.product(ib, repeat=len(ia)):
        try:
            if _same_subject(a.xreplace(dict(zip(ia, image))), b):
                return True
        except (TypeError, ZeroDivisionError):
            continue
    return False


def _renaming(a, b, sizes) -> dict | None:
    """The map of a's indices to b's under which a = c·b (`same_up_to_indices`), or None."""
    from .rewriting import _same_subject

    ia, ib = _indices(a, sizes), _indices(b, sizes)
    if not ia:
        return {} if _same_subject(a, b) else None
    if not ib or len(ib) ** len(ia) > _MAX_RENAMINGS:
        return None
    for image in itertools.product(ib, repeat=len(ia)):
        mapping = dict(zip(ia, image))
        try:
            if _same_subject(a.xreplace(mapping), b):
                return mapping
        except (TypeError, ZeroDivisionError):
            continue
    return None


def admitted_through_abs(u, spec, setting, points) -> str | None:
    """The kind of a step of the specification at u = 0 whose subject holds |a| (Huber's
    H(1 − |x|) against the x − 1 of a split's branch x ≥ 0): the subject with each |a| written
    σ·a is c·u, and at every point a has the sign σ (so there the subject is that one, and
    the point lies on the specification's own step). None otherwise."""
    sizes = set(setting.sizes)
    for s, _, kind in subjects(spec):
        absolutes = sorted(s.atoms(sp.Abs), key=sp.default_sort_key)
        if not absolutes or len(absolutes) > 2:
            continue
        for signs in itertools.product((1, -1), repeat=len(absolutes)):
            resolved = s.xreplace({a: sigma * a.args[0] for a, sigma in zip(absolutes, signs)})
            mapping = _renaming(resolved, u, sizes)
            if mapping is None:
                continue
            try:
                inside = all(
                    sigma * numeric.evaluate(a.args[0].xreplace(mapping), p0) > 0
                    for _, p0, _, _, _ in points
                    for a, sigma in zip(absolutes, signs)
                )
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                inside = False
            if inside and points:
                return kind
    return None


def admitted_by(u, spec, setting) -> str | None:
    """The kind of the specification's non-differentiable atom at u = 0 ('max', '|·|', …), or
    None when the specification has none there."""
    norm = setting.normaliser()
    sizes = set(setting.sizes)
    for s, _, kind in subjects(spec):
        try:
            s = norm.canon(s)
        except Exception:  # a subject the normaliser refuses: compared as written
            pass
        if same_up_to_indices(s, u, sizes):
            return kind
    return None


def _knobs(u, p: numeric.Point) -> list:
    """The float entries of u at the point (a summed index at its first value): each a
    candidate to solve u = 0 for."""
    first = {}
    for s in u.atoms(sp.Sum):
        first.update({v: lo for v, lo, _ in s.limits})
    out = []
    for a in sorted(u.atoms(sp.Indexed), key=sp.default_sort_key):
        base = str(a.base.label)
        if base in p.integer_arrays:
            continue
        try:
            idx = tuple(int(numeric.evaluate(sp.sympify(i).xreplace(first), p)) for i in a.indices)
        except (numeric.EvaluationError, TypeError, ValueError):
            continue
        if (base, idx) not in out:
            out.append((base, idx))
    return out


def points(u, ranges: dict, setting, seeds=_SEEDS, per_seed: int = 64):
    """Candidate points on the kink u = 0: (seed, P₀, P₋, P₊, where) with P₀ on it exactly (one
    entry solved for), P₋ and P₊ the same point with u < 0 and u > 0 (that entry moved by 2⁻⁹⁰).
    u's own indices (summed, or held fixed) take every value in their ranges, those equal to
    the claim's free indices first: the caller keeps a point only where the claim's value
    actually meets the kink (`numeric.Point.met`)."""
    u = sp.sympify(u)
    for seed in seeds:
        p = setting.point(seed)
        own = [v for v in _indices(u, set(setting.sizes)) if v not in p.symbols]
        free = {
            int(x)
            for k, x in p.symbols.items()
            if isinstance(k, sp.Symbol) and k.is_integer and k not in setting.sizes and k not in setting.scalars
        }
        for values in itertools.islice(_assignments(own, ranges, p, free), per_seed):
            at = u.xreplace(values)
            for base, idx in _knobs(at, p):

                def value(v, base=base, idx=idx, at=at, p=p):
                    return numeric.evaluate(at, _with(p, base, idx, v))

                try:
                    u0, u1, u2 = value(mpmath.mpf(0)), value(mpmath.mpf(1)), value(mpmath.mpf(2))
                except (numeric.EvaluationError, ZeroDivisionError, ValueError):
                    continue
                slope = u1 - u0
                if slope != 0 and u2 - u0 == 2 * slope:
                    root, scale = -u0 / slope, 1 / slope  # affine in this entry: its root
                else:  # piecewise (min(1, x) + 1): solved exactly
                    root, scale = _root(at, p, base, idx), mpmath.mpf(1)
                    if root is None:
                        continue
                try:
                    if value(root) != 0:
                        # −u0/slope rounded (x/6 + 1/2: 1/6 is no binary number): the exact root
                        exact = _root(at, p, base, idx)
                        if exact is None or value(exact) != 0:
                            continue  # not exactly on the kink
                        root = exact
                except (numeric.EvaluationError, ZeroDivisionError, ValueError):
                    continue
                step = mpmath.mpf(_STEP) * abs(scale)
                p0 = _with(p, base, idx, root)
                below = _with(p, base, idx, root - step)
                above = _with(p, base, idx, root + step)
                where = {"kink": f"{sp.sstr(u)} = 0", "entry": f"{base}[{', '.join(map(str, idx))}] = {_num(root)}"}
                if values:
                    where["indices"] = {str(k): int(v) for k, v in values.items()}
                yield seed, p0, below, above, where


def _exact(v) -> sp.Rational:
    m, e = mpmath.mpf(v).man_exp
    return sp.Rational(m) * sp.Rational(2) ** e


def _root(at, p: numeric.Point, base: str, idx: tuple):
    """A real root of u in one entry t, the others at the point, by SymPy's `solveset` on u
    written out at the point's sizes (a rational root only: exact in the evaluator); None if
    there is none."""
    t = sp.Dummy("t", real=True)
    known = {
        k: sp.sympify(v) if not isinstance(v, mpmath.mpf) else _exact(v)
        for k, v in p.symbols.items()
        if isinstance(k, sp.Symbol)
    }
    try:
        e = sp.sympify(at).xreplace(known).doit()

        def entry_value(a):
            key = (str(a.base.label), tuple(int(i) for i in a.indices))
            return t if key == (base, idx) else _exact(p.value_of(*key))

        e = e.replace(lambda a: isinstance(a, sp.Indexed), entry_value)
        roots = sp.solveset(e, t, sp.Reals)
    except Exception:  # a form SymPy cannot solve: no point here
        return None
    if not isinstance(roots, sp.FiniteSet):
        return None
    for r in sorted(roots, key=sp.default_sort_key):
        if r.is_Rational:
            return mpmath.mpf(r.p) / r.q
    return None


def _assignments(own: list, ranges: dict, p: numeric.Point, free: set):
    """Every assignment of `own` indices within their ranges (which may mention one another),
    those taking the claim's free indices' values first."""

    def spans(k, values):
        if k == len(own):
            yield dict(values)
            return
        v = own[k]
        if v not in ranges:
            return
        lo, hi = (sp.sympify(x).xreplace(values) for x in ranges[v])
        try:
            a, b = int(numeric.evaluate(lo, p)), int(numeric.evaluate(hi, p))
        except (numeric.EvaluationError, TypeError, ValueError):
            return
        for x in sorted(range(a, b + 1), key=lambda x: (x not in free, x)):
            values[v] = sp.Integer(x)
            yield from spans(k + 1, values)
            values.pop(v)

    everything = list(itertools.islice(spans(0, {}), 4096))
    everything.sort(key=lambda vs: -sum(int(x) in free for x in vs.values()))
    yield from everything


def _with(p: numeric.Point, base: str, idx: tuple, v) -> numeric.Point:
    out = numeric.Point(
        symbols=dict(p.symbols), seed=p.seed, integer_arrays=dict(p.integer_arrays), entries=dict(p.entries)
    )
    out.entries[(base, idx)] = mpmath.mpf(v)
    return out


def one_sided(spec, p0, below, above):
    """The specification's limits at P₀ from the side of P₋ and of P₊."""
    left = numeric.evaluate(spec, _toward(p0, below))
    right = numeric.evaluate(spec, _toward(p0, above))
    return left, right


def _spec_meets(spec, candidate) -> bool:
    """Whether the specification's derivative, at P₀, jumps: its limits from the two sides differ
    (a step or sign of it at its jump, whose two sides are read)."""
    _, p0, below, above, _ = candidate
    try:
        left, right = one_sided(spec, p0, below, above)
    except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
        return False
    return numeric.relative_gap(left, right) > 1e-20


def live_points(u, ranges: dict, setting, exprs: list):
    """One point on the kink per seed where the claim's value reaches it: the first at which
    some expression of `exprs` takes different limits from the two sides (a jump of the
    printed code or of the specification's derivative), else the first at which an evaluation
    meets a step or sign at its jump at all (`numeric.Point.met`: a kink both sides are
    continuous across, max(0, x)² at 0); a point whose u = 0 the claim never reads is skipped."""
    for seed in _SEEDS:
        fallbacks = []
        for candidate in points(u, ranges, setting, seeds=(seed,)):
            _, p0, below, above, _ = candidate
            try:
                jumps, met = False, False
                for e in exprs:
                    a, b = _toward(p0, below), _toward(p0, above)
                    left, right = numeric.evaluate(e, a), numeric.evaluate(e, b)
                    met = met or bool(a.met)
                    jumps = jumps or numeric.relative_gap(left, right) > 1e-20
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                continue
            if jumps:
                yield candidate
                break
            if met and len(fallbacks) < _FALLBACKS:
                fallbacks.append(candidate)
        else:
            # each entry solved for in turn: at g_j = 0 the product g_j·(…) hides what the
            # printed code does at g_j x_ij = 0; at x_ij = 0 it shows
            yield from fallbacks


def _toward(p0, q):
    out = numeric.Point(
        symbols=dict(p0.symbols),
        seed=p0.seed,
        integer_arrays=dict(p0.integer_arrays),
        entries=dict(p0.entries),
        toward=q,
    )
    return out


def _inside(v, lo, hi) -> bool:
    lo, hi = min(lo, hi), max(lo, hi)
    slack = _TOL * max(abs(lo), abs(hi), mpmath.mpf(1))
    return lo - slack <= v <= hi + slack


def _num(v):
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else float(mpmath.nstr(v, 12))


def check(kinks, printed: list, spec, setting, wanted: int = 3) -> tuple[str, list, dict | None]:
    """Every recorded kink checked: ("ok", certificate lines, None), ("refuted", [], the
    counterexample) or ("unproven", [why], None)."""
    lines = []
    for kink in kinks:
        u = kink.subject
        kind = admitted_by(u, spec, setting)
        live = []
        for candidate in live_points(u, kink.ranges, setting, printed + [spec]):
            live.append(candidate)
            if len(live) >= wanted:
                break
        if kind is None and live:
            kind = admitted_through_abs(u, spec, setting, live)
        if kind is None and live and all(_spec_meets(spec, c) for c in live):
            # no subject of the specification is c·u as written (max(x + 3, 0) − 6 against the
            # x − 3 of a split's branch), but at every point on u = 0 the specification's own
            # derivative has a step or sign at its jump: its kink, met there
            kind = "jump"
        seen = 0
        shown = None
        for seed, p0, below, above, where in live:
            try:
                got = [numeric.evaluate(e, p0) for e in printed]
                left, right = one_sided(spec, p0, below, above)
                at = numeric.evaluate(spec, p0) if kind is None else None
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                continue
            for value in got:
                if kind is not None and not _inside(value, left, right):
                    return (
                        "refuted",
                        [],
                        dict(
                            at=p0.report(),
                            seed=seed,
                            **where,
                            lhs=_num(value),
                            rhs=[_num(min(left, right)), _num(max(left, right))],
                            why="the printed value at the kink lies outside the "
                            "specification's one-sided derivatives there",
                        ),
                    )
                if kind is None and numeric.relative_gap(value, at) > 1e-20:
                    return (
                        "refuted",
                        [],
                        dict(
                            at=p0.report(),
                            seed=seed,
                            **where,
                            lhs=_num(value),
                            rhs=_num(at),
                            why="the specification has no kink there: the printed value must be its derivative",
                        ),
                    )
            if shown is None:
                shown = (got, left, right)
            seen += 1
            if seen >= wanted:
                break
        if seen == 0:
            return "unproven", [f"no point on the kink {sp.sstr(u)} = 0 could be built and evaluated"], None
        if kind is None:
            return (
                "unproven",
                [
                    f"{sp.sstr(u)} = 0 excluded, but the specification has no kink there "
                    "(its value there agrees at the points tried: not proved)"
                ],
                None,
            )
        got, left, right = shown
        values = ", ".join(str(_num(v)) for v in got)
        lo, hi = sorted((left, right))
        why = (
            "the specification's derivative jumps there, at every point tried"
            if kind == "jump"
            else f"the specification's {kind} of it"
        )
        lines.append(
            f"kink at {sp.sstr(u)} = 0 ({why}): proved off it; at it the "
            f"printed value ({values} at the first point) lies in [{_num(lo)}, {_num(hi)}], the "
            f"one-sided derivatives there: checked at {seen} points on it"
        )
    return "ok", lines, None


# distances from a kink, in the solved entry, of the points beside it where the printed value
# must equal the specification's: the random points draw entries from [−2, 2] and never reach the
# region past a kink at x = 3 (hard swish's), where a wrong step can hide
_BESIDE = (_STEP, mpmath.mpf(1) / 4, mpmath.mpf(1))
_BESIDE_POINTS = 3  # points on each kink whose sides are checked


def _off_the_kink(printed, spec, p0, below, above) -> dict | None:
    """The printed value against the specification's beside the kink, on both sides: the entry
    solved for the kink moved by each distance of `_BESIDE` (the points P₋ and P₊ first). Off
    every kink the two are equal; a counterexample, or None."""
    base, idx = next(k for k, v in above.entries.items() if p0.entries.get(k) != v)
    root = p0.entries[(base, idx)]
    unit = abs(above.entries[(base, idx)] - root) / mpmath.mpf(_STEP)  # the entry's change per unit of u
    for distance in _BESIDE:
        for side in (-1, 1):
            point = _with(p0, base, idx, root + side * distance * unit)
            point.toward = point  # counts a step met at its jump (another kink here): no verdict
            try:
                want = numeric.evaluate(spec, point)
                got = numeric.evaluate(printed, point)
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                continue
            if point.met == 0 and numeric.relative_gap(got, want) > 1e-20:
                return dict(
                    at=point.report(),
                    entry=f"{base}[{', '.join(map(str, idx))}] = {_num(point.entries[(base, idx)])}",
                    lhs=_num(got),
                    rhs=_num(want),
                    why=f"beside the kink ({'below' if side < 0 else 'above'} it by {_num(distance)} in u), "
                    "where the printed value must equal the required one",
                )
    return None


def refute_at_kinks(printed, spec, setting, wanted: int = 2) -> dict | None:
    """A point on a kink of the printed code where its value lies outside the specification's
    one-sided derivatives (a single value where the specification is smooth), or a point beside
    a kink of either side where the two values differ; None if none."""
    beside = []
    for u, ranges, _ in [*subjects(printed), *subjects(spec)]:
        if u.is_number or any(same_up_to_indices(u, v) for v in beside):
            continue
        beside.append(u)
        # whether or not the claim's value meets the kink (a min or a max of the forward is
        # continuous across it: no point on it is live), and a kink of the specification that
        # the printed code lacks (ReLU6's step at 6 dropped)
        for seed, p0, below, above, where in itertools.islice(points(u, ranges, setting), _BESIDE_POINTS):
            off = _off_the_kink(printed, spec, p0, below, above)
            if off is not None:
                return dict(seed=seed, **{**where, **off})
    done = []
    for u, ranges, _ in subjects(printed):
        if u.is_number or any(same_up_to_indices(u, v) for v in done):
            continue
        done.append(u)
        tried = 0
        for seed, p0, below, above, where in live_points(u, ranges, setting, [printed, spec]):
            try:
                value = numeric.evaluate(printed, p0)
                left, right = one_sided(spec, p0, below, above)
            except (numeric.EvaluationError, ZeroDivisionError, ValueError, TypeError):
                continue
            if not _inside(value, left, right):
                return dict(
                    at=p0.report(),
                    seed=seed,
                    **where,
                    lhs=_num(value),
                    rhs=[_num(min(left, right)), _num(max(left, right))],
                )
            tried += 1
            if tried >= wanted:
                break
    return None

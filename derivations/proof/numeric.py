"""Numeric evaluation of index expressions at concrete sizes: counterexamples and spot-checks.

This is never a proof. It finds the counterexample that refutes a wrong formula (a mutant),
and it records a spot-check beside each symbolic proof, so that a bug in the normaliser would
show up as a proof whose own numbers disagree.

Values are exact rationals where possible and 40-digit mpmath floats otherwise. This is the
project's one high-precision evaluator of index expressions: the counterexample search, the
spot-checks, the symbolic run's quick rejection (qed/tools/translation.py) and the kink checks
call it, and every function in it is a row of the one table
(derivations/language/functions.py, `mp_value`). The numerical-edge check's tape
(qed/tools/edges.py) differentiates in reverse mode and reads the same rows (`mp_value`,
`mp_slope`); the rational judge (qed/tools/field_judge.py) is independent on purpose.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import mpmath
import sympy as sp

from ..language import functions as _functions
from ..language.arrays import DocumentFunction, HalfStep, NormalCDF, Sigmoid

mpmath.mp.dps = 40


@dataclass
class Point:
    """A concrete assignment: sizes, free indices, scalars, and lazily drawn array entries."""

    symbols: dict = field(default_factory=dict)  # Symbol -> number
    seed: int = 0
    integer_arrays: dict = field(default_factory=dict)  # base name -> (lo, hi) for ids
    entries: dict = field(default_factory=dict)  # (base name, idx) -> value
    # a point on a kink (an argument of H, sign that is exactly 0 here) read as the limit from
    # the side of `toward`: each such step takes the value it has at `toward`, every other atom
    # its value here (the one-sided limit of a function that is continuous off the kink)
    toward: Point | None = None
    met: int = 0  # how many such steps an evaluation met (a kink actually reached)

    def __post_init__(self):
        self._rng = random.Random(self.seed)

    def value_of(self, base: str, idx: tuple):
        """Entry `base[idx]`: drawn from the seed, the name and the index alone, so that it is
        the same whichever expression asks first (a required value can be computed once and
        compared with many candidates)."""
        key = (base, idx)
        if key not in self.entries:
            rng = random.Random(f"{self.seed}|{base}|{','.join(map(str, idx))}")
            if base in self.integer_arrays:
                lo, hi = self.integer_arrays[base]
                self.entries[key] = mpmath.mpf(rng.randint(int(lo), int(hi)))
            else:
                # small rationals in [-2, 2], away from 0 so that no entry vanishes by chance
                num = rng.choice([-1, 1]) * rng.randint(1, 16)
                self.entries[key] = mpmath.mpf(num) / 8
        return self.entries[key]

    def report(self) -> dict:
        return {str(k): _plain(v) for k, v in sorted(self.symbols.items(), key=lambda kv: str(kv[0]))}


class EvaluationError(RuntimeError):
    pass


def _plain(v):
    try:
        if float(v).is_integer():
            return int(v)
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return str(v)


def evaluate(expr, point: Point, memo: dict | None = None):
    """Evaluate an index expression at `point`; bound sums are looped over. With `memo`, each
    subexpression outside a bound sum is evaluated once (an expression's DAG, not its tree)."""
    return _ev(sp.sympify(expr), point, {}, memo)


def _ev(e, p: Point, local: dict, memo: dict | None = None):
    if memo is not None and not local:
        hit = memo.get(e)
        if hit is None:
            hit = memo[e] = _ev_node(e, p, local, memo)
        return hit
    return _ev_node(e, p, local, None)


def _ev_node(e, p: Point, local: dict, memo):
    if isinstance(e, sp.Symbol):
        if e in local:
            return local[e]
        if e in p.symbols:
            return mpmath.mpf(p.symbols[e]) if not isinstance(p.symbols[e], mpmath.mpf) else p.symbols[e]
        raise EvaluationError(f"no value for symbol {e}")
    if e is sp.oo:
        return mpmath.inf
    if e is sp.S.NegativeInfinity:
        return -mpmath.inf
    if e.is_Number or isinstance(e, sp.NumberSymbol):
        return mpmath.mpf(sp.Rational(e).p) / sp.Rational(e).q if e.is_Rational else mpmath.mpf(str(sp.N(e, 45)))
    if isinstance(e, sp.Indexed):
        idx = tuple(int(_ev(i, p, local, memo)) for i in e.indices)
        return p.value_of(str(e.base.label), idx)
    if isinstance(e, sp.Add):
        return mpmath.fsum(_ev(a, p, local, memo) for a in e.args)
    if isinstance(e, sp.Mul):
        out = mpmath.mpf(1)
        for a in e.args:
            out *= _ev(a, p, local, memo)
        return out
    if isinstance(e, sp.Pow):
        base, power = _ev(e.base, p, local, memo), _ev(e.exp, p, local, memo)
        return mpmath.power(base, power)
    if isinstance(e, sp.Sum):
        return _sum(e.function, list(e.limits), p, local)
    if isinstance(e, sp.KroneckerDelta):
        a, b = (_ev(x, p, local, memo) for x in e.args)
        return mpmath.mpf(1 if a == b else 0)
    if isinstance(e, sp.Piecewise):
        for value, cond in e.args:
            if _truth(cond, p, local):
                return _ev(value, p, local, memo)
        raise EvaluationError(f"no branch of {e} holds")
    if isinstance(e, sp.Max):
        return max(_ev(a, p, local, memo) for a in e.args)
    if isinstance(e, sp.Min):
        return min(_ev(a, p, local, memo) for a in e.args)
    if isinstance(e, (sp.Heaviside, HalfStep, sp.sign)):
        x = _ev(e.args[0], p, local, memo)
        if x == 0 and p.toward is not None:
            p.met += 1
            x = _ev(e.args[0], p.toward, local)  # only its sign is read
        if isinstance(e, sp.sign):
            return mpmath.sign(x)
    if isinstance(e, sp.Heaviside):
        at_zero = _ev(e.args[1], p, local, memo) if len(e.args) > 1 else mpmath.mpf(0.5)
        return mpmath.mpf(1) if x > 0 else (mpmath.mpf(0) if x < 0 else at_zero)
    if isinstance(e, sp.DiracDelta):  # a step's derivative: 0 off its point, no value on it
        if _ev(e.args[0], p, local, memo) != 0:
            return mpmath.mpf(0)
        if p.toward is None:
            raise EvaluationError(f"{e} at its point: no value")
        p.met += 1  # a one-sided limit at the point: 0 on either side
        return mpmath.mpf(0)
    if isinstance(e, Sigmoid):  # exactly the document's 1/(1 + e^{−u}), at 40 digits
        return _functions.mp_value("sigmoid", _ev(e.args[0], p, local, memo))
    if isinstance(e, HalfStep):  # (1 + sign u)/2
        return mpmath.mpf(1) if x > 0 else (mpmath.mpf(0) if x < 0 else mpmath.mpf(0.5))
    if isinstance(e, NormalCDF):  # exactly the document's (1 + erf(u/√2))/2
        return _functions.mp_value("ndtr", _ev(e.args[0], p, local, memo))
    if isinstance(e, DocumentFunction):  # any other node of the array language: its formula (G(u) = e^{−u²/2})
        return _ev(e.document_form(), p, local, memo)
    row = _functions.by_sympy(e.func)
    if row is not None:
        return _functions.mp_value(row.name, *[_ev(a, p, local, memo) for a in e.args])
    if isinstance(e, sp.Function) and not type(e).__module__.startswith("sympy."):
        # an arbitrary function (φ, φ′ in a generic claim): any values are realisable by some
        # smooth function, provided the same point always gets the same value
        args = [_ev(a, p, local, memo) for a in e.args]
        return _arbitrary(type(e).__name__, args, p.seed)
    raise EvaluationError(f"cannot evaluate {type(e).__name__}: {e}")


def _arbitrary(name: str, args: list, seed: int):
    import hashlib

    key = f"{name}|{seed}|" + "|".join(mpmath.nstr(a, 30) for a in args)
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)
    return mpmath.mpf(digest % 33 - 16) / 8 or mpmath.mpf(1) / 8


def _truth(cond, p, local) -> bool:
    if cond is sp.true or cond == True:  # noqa: E712 - SymPy booleans
        return True
    if cond is sp.false or cond == False:  # noqa: E712
        return False
    if isinstance(cond, sp.core.relational.Relational):
        a, b = _ev(cond.lhs, p, local), _ev(cond.rhs, p, local)
        return {"<=": a <= b, "<": a < b, ">=": a >= b, ">": a > b, "==": a == b, "!=": a != b}[cond.rel_op]
    if isinstance(cond, sp.And):
        return all(_truth(c, p, local) for c in cond.args)
    if isinstance(cond, sp.Or):
        return any(_truth(c, p, local) for c in cond.args)
    if isinstance(cond, sp.Not):
        return not _truth(cond.args[0], p, local)
    raise EvaluationError(f"cannot decide condition {cond}")


def _sum(body, limits, p, local):
    var, lo, hi = limits[-1]  # SymPy lists the innermost limit first
    rest = limits[:-1]
    total = mpmath.mpf(0)
    a, b = int(_ev(lo, p, local)), int(_ev(hi, p, local))
    for k in range(a, b + 1):
        inner = dict(local)
        inner[var] = mpmath.mpf(k)
        total += _ev(body, p, inner) if not rest else _sum(body, rest, p, inner)
    return total


def is_finite(v) -> bool:
    """A value of `evaluate` that is a finite number (a real one, or a complex one's parts)."""
    try:
        return bool(mpmath.isfinite(v))
    except (TypeError, ValueError):
        return False


def relative_gap(a, b):
    if isinstance(a, mpmath.mpc) or isinstance(b, mpmath.mpc):
        # a complex value (the log of a negative number): a real side differs from it unless
        # both are the same number
        a, b = mpmath.mpc(a), mpmath.mpc(b)
        if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
            return mpmath.mpf(0) if a == b else mpmath.inf
        return abs(a - b) / max(abs(a), abs(b), mpmath.mpf(1))
    a, b = mpmath.mpf(a), mpmath.mpf(b)
    if mpmath.isnan(a) or mpmath.isnan(b):
        return mpmath.inf
    if mpmath.isinf(a) or mpmath.isinf(b):  # ∞/∞ would be NaN, and NaN > tol is False
        return mpmath.mpf(0) if a == b else mpmath.inf
    scale = max(abs(a), abs(b), mpmath.mpf(1))
    return abs(a - b) / scale

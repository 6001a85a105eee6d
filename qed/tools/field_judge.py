"""The field judge: the printed code, evaluated exactly at random points, against the claims.

A second, independent judge of the printed text next to translation validation
(qed/tools/translation.py). Translation validation runs each generated file on SymPy symbols at
tiny sizes and decides every residual symbolically; this module runs every generated file at
*random points* and at sizes where blocks, heads and batches are not all tiny (every size
between 5 and 17, pairwise distinct, a leading batch axis, attention_tiled's key blocks not
dividing n), with exact arithmetic, and compares with the claims' index form evaluated the
same way by an evaluator of its own. Two polynomials (here: expressions in +, ×, ÷ and the
functions below) that differ differ at a random point with high probability
(Schwartz–Zippel): a printed line that computes something else shows at once, and nothing is
ever accepted on a rounded number.

The numbers (`Exact`) are of three kinds:

* rationals (`fractions.Fraction`), ±∞: the inputs, the options, the sizes, and every value
  that only +, −, ×, ÷ and integer powers made from them. They are ordered, so max, |x|,
  sign, the printed comparisons (`(z > 0).astype(dtype)`) and the masks are exact;
  e^{−∞} = 0, −∞ + x = −∞, max(−∞, x) = x;
* formal logarithms: a rational plus Σ c_k·log(y_k) with rational c_k over the arguments y_k
  met, so that e^{a − log y} = e^{a}/y exactly, as SymPy writes exp(s − log Σ) = e^{s}/Σ in the
  claims while the kernel subtracts the saved log-sum-exp (attention_lse's backward, the tiled
  one's);
* residues of the prime field F_P, P = 2P′ + 1 a safe prime: the exponential is a true
  homomorphism e^{a} = g^{a mod P′} (g of order P′) from the rationals (denominators prime to
  P′) into F_P^×, so e^{a}·e^{b} = e^{a+b} holds exactly (attention_tiled's online softmax
  rescales its running sums by e^{m_old − m_new}) and e^{log y} = y. Everything that meets an
  exponential computes in F_P. Each residue carries a floating-point *shadow*, its value in the
  real model (e^{a} real, the uninterpreted functions below at their drawn values), used for one
  thing only: the sign where the printed code asks for an order of such a value (mish's
  |softplus(x)| > 0); a non-zero residue whose shadow is 0 or NaN has no sign: an error, not a
  guess.

Every other function is a consistent uninterpreted function of its exact argument: a hash of
the function's name, the argument and the run's seed picks a positive rational with a small
denominator (√ of a rational square is exact; √ of a small rational takes its square factor out,
√8 = 2√2, as SymPy writes it; tanh, erf and sin are odd, cos even, each 0 or 1 at 0); σ(u) is
1/(1 + e^{−u}), Φ(u) is (1 + erf(u·(√2)/2))/2, log1p(u) is log(1 + u), expm1(u) is e^{u} − 1, as
derivations/language/functions.py states them. Identities that the uninterpreted functions do
not have (√a·√a = a, tanh² = 1 − sech²) are not used by any printed file; one that were would
show as a mismatch of that file.

Constants stay SymPy numbers while they meet only constants (`math.sqrt(2/math.pi)` is
√2/√π, as the claims write it) and become `Exact` where they meet data, atom by atom through the
same evaluator as the claims' side (√2 and π each drawn once), so both sides agree on them.

The printed files run through translation.py's loader (its exact literals: 0.044715 is
44715/10⁶) with this module's own `np`, `math`, `scipy.special`, `_special`, `_support` and
`float`: the elementwise functions dispatch through `functions.apply`, the structural ones are
NumPy's own on object arrays. The expected side is the claims' index form
(`entry(forward_scope(op, when)[output], (i, j))`, the backward's, `Step.value`,
`TableArray.entry`) compiled once into a tree of closures with each subexpression memoised on
the values of the index symbols it depends on (Σ_l e^{S_il} once per row i). It shares no code
with the proofs' normaliser (derivations/proof/rewriting.py) nor with their numeric evaluator
(derivations/proof/numeric.py), and none with translation validation's expected side.

What is judged (`judge_all`: both backends; generated/torch/ through translation.py's
`load_torch` and qed/tools/torch_shim.py, each tensor holding the same exact entries, and for
each op also its printed `<Op>Function.forward`/`.backward` and functional form):

    every op of the registry   two random size assignments (every size in 5..17, pairwise
                               distinct; ≤ 10 or 11 for attention and the MLPs), every flag
                               combination, a leading batch axis of 2: broadcast ops
                               (attention, rope) per slice, row ops with the axis folded into
                               the rows (ColSum and Contract then sum over it), the gradient of
                               a parameter summed over the slices; for broadcast ops three more
                               runs with leading axes that broadcast (one input with 2, the next
                               with 1, the next with none, each input carrying the 2 in turn:
                               every gradient's sum back to its input's shape runs, and every
                               in-place sum starts from an array of the full broadcast shape);
                               for ops whose rows may be absent, the first
                               assignment once more with x (n,) for x (r, n); ids and targets over
                               the whole vocabulary, a 0/1 mask with at least one 1; for
                               ops with a max, |·| or step, one more run with inputs in
                               {−1, 0, 1}, where inner values (ReLU's x W₁ᵀ + b₁) are exactly 0
                               at many entries: the printed backward's value on the kink is
                               held to the claims' there
    attention_tiled            m ≠ n, a block that does not divide n, causal off and on, batch 2
                               (the same for q, k, v, and broadcast with each of them carrying
                               it in turn), against attention_lse's index form (o; dq, dk, dv
                               from the tiled cache)
    mha                        T = 6, 3 heads of 5, batch 2, causal off and on, against linear's
                               and attention's index forms composed by `mha.concat`'s index map
    every op, one size at 0    each size in turn set to 0, the others drawn (`judge_zero`): the
                               claims hold for sizes ≥ 1, so this case is judged, not assumed;
                               where the index form evaluates (a sum over nothing is 0: linear
                               with no input features is its bias) the printed outputs and
                               gradients must be exactly that; where it divides by zero (a mean
                               of no rows) the kernel must refuse the call with its own error,
                               and a refusal is accepted only there or where a denominator of
                               the formulas is 0 at that size (a softmax over no keys, even
                               inside a sum over nothing)
    sgd, adam, adamw           (5..9) × (10..17), t in 2..9, hyperparameters in their domains
    rope_tables, sinusoidal    T in 5..17, d even in 6..16, a random base

A point whose draw meets a zero denominator is redrawn (five times at most). A mismatch names
the file, the output, the flags, the sizes and the point's seed (`Result`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math as _math
import random
import time
import types
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as _np
import sympy as sp

from derivations import registry
from derivations.language import functions as _functions
from derivations.language.arrays import (
    Array,
    CausalMask,
    DocumentFunction,
    HalfStep,
    NormalCDF,
    RowMax,
    Sigmoid,
    _label,
    entry,
    shape_of,
)
from derivations.language.ops import Op, grad_of
from derivations.proof.obligations import (
    arrays_in,
    backward_scope,
    cache_values,
    close,
    flag_sets,
    forward_scope,
    setting_for,
)

from . import ROOT
from .translation import _Backend as _TranslationBackend

__all__ = [
    "Exact",
    "FieldError",
    "ZeroDenominator",
    "Result",
    "judge_op",
    "judge_step",
    "judge_table",
    "judge_tiled",
    "judge_mha",
    "judge_all",
    "evaluate",
    "same",
    "main",
    "P",
    "TRUSTED",
]

# F_P with P = 2P' + 1, P' prime: exp maps a rational a to g^(a mod P') in the subgroup of order P'
# `first_failure()`: the judges stop at the first mismatch (what `qed audit --text` needs: one
# report refutes a wrong edit; `qed prove` runs every point)
_STOP_AT_FIRST = False


@contextlib.contextmanager
def first_failure():
    """Inside this block judge_op, judge_tiled, judge_mha and the program judge return as soon as
    one result is not ok."""
    global _STOP_AT_FIRST
    saved, _STOP_AT_FIRST = _STOP_AT_FIRST, True
    try:
        yield
    finally:
        _STOP_AT_FIRST = saved


def stopped(out) -> bool:
    """A failure is in `out` and the caller asked for the first one only."""
    return _STOP_AT_FIRST and any(not r.ok for r in out)


P = 207643559321822423
P_SUB = 103821779660911211

TRUSTED = (
    "NumPy's object-array operations (matrix products, broadcasting, indexing, reshapes): run, "
    "not modelled, as in translation validation",
    "the reading of each library function as the row of derivations/language/functions.py that names its spelling",
    "uninterpreted functions: an identity between different arguments of tanh, erf, sin, cos, √ "
    "or a fractional power is not modelled (a file relying on one would be reported)",
    "order decisions on values that met an exponential or a logarithm are taken on their real "
    "shadow (floating point); a non-zero value whose shadow is 0 or NaN is an error, never a guess",
    "not run: empty outputs (`nothing_to_compute`, `zero_grads`) and the argument checks' "
    "refusals; option defaults (every option is passed)",
)


class FieldError(ArithmeticError):
    """The exact run cannot go on (∞ − ∞, an undecidable order, a float): an error of the run."""


class ZeroDenominator(FieldError):
    """A zero denominator at this point: the point is redrawn."""


# ---------------------------------------------------------------------------------------------
# The run's random model: the seed of the uninterpreted functions, the exponential's base.


class _Model:
    seed = 0
    g = 4  # a square ≠ 1 mod P: of order P'
    exp_inverse: dict = {}  # residue of e^{a} -> a (log(e^{a}) = a)
    log_shadow: dict = {}  # key of y -> log of y's shadow
    log_args: dict = {}  # key of y -> (residue of y, shadow of y): e^{c·log y} = y^c

    @classmethod
    def reset(cls, seed: int) -> None:
        cls.seed = seed
        h = _digest(("g",), seed) % (P - 3) + 2
        cls.g = pow(h, 2, P)
        cls.exp_inverse = {}
        cls.log_shadow = {}
        cls.log_args = {}


def _digest(key, seed=None) -> int:
    text = repr((_Model.seed if seed is None else seed, key)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "big")


def _drawn(name: str, key) -> Fraction:
    """The uninterpreted `name` at `key`: a positive rational with a small denominator."""
    h = _digest((name, key))
    return Fraction(h % (1 << 24) + 1, (h >> 24) % 61 + 1)


def _drawn_residue(name: str, key) -> int:
    return _digest((name, key)) % (P - 1) + 1


def _inv_mod(x: int, m: int) -> int:
    if x % m == 0:
        raise ZeroDenominator(f"a denominator divisible by {m}")
    return pow(x, -1, m)


def _residue(q: Fraction) -> int:
    return q.numerator % P * _inv_mod(q.denominator, P) % P


# ---------------------------------------------------------------------------------------------
# Exact numbers.

_RAT, _FLD, _INF = 0, 1, 2


class Exact:
    """An exact number: a rational (with formal logarithms), a residue of F_P with its real
    shadow, or ±∞. NumPy object arrays of them compute with NumPy's own products and sums."""

    __slots__ = ("kind", "q", "logs", "r", "s")

    def __init__(self, kind, q=None, logs=None, r=0, s=0.0):
        self.kind = kind
        self.q = q  # Fraction (_RAT); the sign ±1 (_INF)
        self.logs = logs  # None, or a tuple of (key of y, coefficient) sorted by key
        self.r = r  # residue (_FLD)
        self.s = s  # shadow (_FLD)

    # construction ----------------------------------------------------------------------------
    @staticmethod
    def rational(v) -> Exact:
        return Exact(_RAT, Fraction(v))

    @staticmethod
    def infinity(sign: int) -> Exact:
        return Exact(_INF, q=1 if sign > 0 else -1)

    # views -----------------------------------------------------------------------------------
    @property
    def is_pure(self) -> bool:
        return self.kind == _RAT and self.logs is None

    def key(self):
        """The canonical key of this value (an uninterpreted function's argument)."""
        if self.kind == _RAT:
            return ("q", self.q.numerator, self.q.denominator, self.logs)
        if self.kind == _FLD:
            return ("f", self.r)
        return ("inf", self.q)

    def shadow(self) -> float:
        if self.kind == _RAT:
            v = float(self.q)
            for y, c in self.logs or ():
                v += float(c) * _Model.log_shadow[y]
            return v
        if self.kind == _FLD:
            return self.s
        return _math.inf * self.q

    def field(self) -> Exact:
        """This finite value as a residue (formal logarithms drawn as residues)."""
        if self.kind == _FLD:
            return self
        if self.kind == _INF:
            raise FieldError("∞ in a field operation")
        r = _residue(self.q)
        for y, c in self.logs or ():
            r = (r + _residue(c) * _drawn_residue("log", y)) % P
        return Exact(_FLD, r=r, s=self.shadow())

    def sign(self) -> int:
        if self.kind == _INF:
            return self.q
        if self.is_pure:
            return (self.q > 0) - (self.q < 0)
        if self.kind == _FLD and self.r == 0:
            return 0
        s = self.shadow()
        if _math.isnan(s) or s == 0:
            raise FieldError(f"the sign of a non-zero value with shadow {s!r} is not decided")
        return 1 if s > 0 else -1

    def __repr__(self):
        if self.kind == _INF:
            return "Exact(+oo)" if self.q > 0 else "Exact(-oo)"
        if self.kind == _FLD:
            return f"Exact({self.r} mod P ≈ {self.s:.6g})"
        logs = "".join(f" + ({c})·log<{y[0]}:{y[1]}>" for y, c in self.logs or ())
        return f"Exact({self.q}{logs})"

    # arithmetic ------------------------------------------------------------------------------
    def __add__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        a, b = self, o
        if a.kind == _INF or b.kind == _INF:
            if a.kind == _INF and b.kind == _INF and a.q != b.q:
                raise FieldError("∞ − ∞")
            return a if a.kind == _INF else b
        if a.kind == _RAT and b.kind == _RAT:
            logs = a.logs
            if b.logs:
                d = dict(a.logs or ())
                for y, c in b.logs:
                    d[y] = d.get(y, 0) + c
                logs = tuple(sorted((y, c) for y, c in d.items() if c != 0)) or None
            return Exact(_RAT, a.q + b.q, logs)
        a, b = a.field(), b.field()
        return Exact(_FLD, r=(a.r + b.r) % P, s=a.s + b.s)

    __radd__ = __add__

    def __neg__(self):
        if self.kind == _INF:
            return Exact(_INF, q=-self.q)
        if self.kind == _RAT:
            return Exact(_RAT, -self.q, tuple((y, -c) for y, c in self.logs) if self.logs else None)
        return Exact(_FLD, r=(-self.r) % P, s=-self.s)

    def __pos__(self):
        return self

    def __sub__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        return self + (-o)

    def __rsub__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        return o + (-self)

    def __mul__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        a, b = self, o
        if a.kind == _INF or b.kind == _INF:
            sa, sb = a.sign(), b.sign()
            if sa == 0 or sb == 0:
                raise FieldError("0 · ∞")
            return Exact.infinity(sa * sb)
        if a.is_pure and b.kind == _RAT or b.is_pure and a.kind == _RAT:
            if not a.is_pure:
                a, b = b, a
            c = a.q
            if b.logs is None or c == 0:
                return Exact(_RAT, c * b.q)
            return Exact(_RAT, c * b.q, tuple((y, c * k) for y, k in b.logs))
        a, b = a.field(), b.field()
        return Exact(_FLD, r=a.r * b.r % P, s=a.s * b.s)

    __rmul__ = __mul__

    def inverse(self) -> Exact:
        if self.kind == _INF:
            return Exact(_RAT, Fraction(0))
        if self.is_pure:
            if self.q == 0:
                raise ZeroDenominator("division by 0")
            return Exact(_RAT, 1 / self.q)
        f = self.field()
        if f.r == 0:
            raise ZeroDenominator("division by a residue 0")
        return Exact(_FLD, r=pow(f.r, -1, P), s=1 / f.s if f.s else _math.inf)

    def __truediv__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        if self.kind == _INF:
            if o.kind == _INF:
                raise FieldError("∞ / ∞")
            return Exact.infinity(self.q * o.sign()) if o.sign() else _raise(ZeroDenominator("∞ / 0"))
        return self * o.inverse()

    def __rtruediv__(self, other):
        o = _lift(other)
        if o is NotImplemented:
            return o
        return o / self

    def __pow__(self, other):
        e = _lift(other)
        if e is NotImplemented:
            return e
        if not e.is_pure:
            raise FieldError(f"a power with the exponent {e!r}")
        return _power(self, e.q)

    def __rpow__(self, other):
        b = _lift(other)
        if b is NotImplemented:
            return b
        return b**self

    def __mod__(self, other):
        o = _lift(other)
        if not (self.is_pure and o.is_pure and self.q.denominator == 1 and o.q.denominator == 1):
            raise FieldError("% of non-integers")
        return Exact(_RAT, Fraction(self.q.numerator % o.q.numerator))

    def __abs__(self):
        return self if self.sign() >= 0 else -self

    # order and equality: Python booleans (a printed comparison's cast gives 0 or 1) ----------
    def _cmp(self, other) -> int:
        o = _lift(other, floats=True)
        if o is NotImplemented:
            raise FieldError(f"comparing with {other!r}")
        if self.kind == _INF or o.kind == _INF:
            a = self.q if self.kind == _INF else 0
            b = o.q if o.kind == _INF else 0
            return (a > b) - (a < b)
        if self.is_pure and o.is_pure:
            return (self.q > o.q) - (self.q < o.q)
        if same(self, o):
            return 0
        return (self - o).sign()

    def __lt__(self, other):
        return self._cmp(other) < 0

    def __le__(self, other):
        return self._cmp(other) <= 0

    def __gt__(self, other):
        return self._cmp(other) > 0

    def __ge__(self, other):
        return self._cmp(other) >= 0

    def __eq__(self, other):
        o = _lift(other, floats=True)
        if o is NotImplemented:
            return False
        return same(self, o)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.key()) if self.kind != _FLD else hash(("f", self.r))

    def __bool__(self):
        return not same(self, _ZERO)

    # no __float__, no __int__: SymPy's sympify would turn an Exact into a Float or an Integer
    # through them (and 1/x a SymPy number); an index is read by `_to_int`

    # functions -------------------------------------------------------------------------------
    def __qed_function__(self, name, *args):
        return _FUNCTIONS[name](*[_lift_strict(a) for a in args])


def _raise(exc):
    raise exc


def _to_int(v) -> int:
    if isinstance(v, Exact):
        if v.is_pure and v.q.denominator == 1:
            return v.q.numerator
        raise FieldError(f"an index {v!r} is not an integer")
    return int(v)


_ZERO = Exact(_RAT, Fraction(0))
_ONE = Exact(_RAT, Fraction(1))
_HALF = Exact(_RAT, Fraction(1, 2))


def same(a: Exact, b: Exact) -> bool:
    """Exact equality: equal rationals (and formal logarithms), or equal residues."""
    if a.kind == _INF or b.kind == _INF:
        return a.kind == b.kind and a.q == b.q
    if a.kind == _RAT and b.kind == _RAT:
        return a.q == b.q and a.logs == b.logs
    return a.field().r == b.field().r


_SYMPY_CONST: dict = {}


def _lift(v, floats: bool = False):
    """`v` as an Exact (NotImplemented for what is no number of the run)."""
    if isinstance(v, Exact):
        return v
    if isinstance(v, (bool, _np.bool_)):
        return _ONE if v else _ZERO
    if isinstance(v, (int, _np.integer)):
        return Exact(_RAT, Fraction(int(v)))
    if isinstance(v, Fraction):
        return Exact(_RAT, v)
    if isinstance(v, (float, _np.floating)):
        if floats:  # an argument check's bound (eps > 0.0)
            return Exact.infinity(1 if v > 0 else -1) if _math.isinf(v) else Exact(_RAT, Fraction(float(v)))
        raise FieldError(f"an inexact float {v!r} met an exact value")
    if isinstance(v, sp.Basic):
        return _from_sympy(v)
    return NotImplemented


def _lift_strict(v) -> Exact:
    out = _lift(v)
    if out is NotImplemented:
        raise FieldError(f"not a number of the exact run: {v!r}")
    return out


def _from_sympy(c) -> Exact:
    """A SymPy constant (no free symbols) as an Exact: atom by atom, through the evaluator."""
    hit = _SYMPY_CONST.get((c, _Model.seed))
    if hit is None:
        if c.free_symbols:
            raise FieldError(f"a symbolic value {c} met the exact run")
        if c.atoms(sp.Float):
            raise FieldError(f"an inexact Float in {c}")
        hit = _compile(c, {})({})
        _SYMPY_CONST[(c, _Model.seed)] = hit
    return hit


def _power(b: Exact, e: Fraction) -> Exact:
    if e.denominator == 1:
        n = e.numerator
        if n < 0:
            return _power(b, Fraction(-n)).inverse()
        if b.kind == _INF:
            if n == 0:
                return _ONE
            return Exact.infinity(1 if b.q > 0 or n % 2 == 0 else -1)
        if b.is_pure:
            return Exact(_RAT, b.q**n)
        if n == 0:
            return _ONE
        if n == 1:
            return b
        f = b.field()
        return Exact(_FLD, r=pow(f.r, n, P), s=f.s**n if abs(f.s) < 1e100 else _math.inf)
    if e.denominator == 2:
        return _power(_sqrt(b), Fraction(e.numerator))
    whole = Fraction(e.numerator // e.denominator)
    frac = e - whole
    if b.sign() <= 0:
        raise FieldError(f"a fractional power of {b!r}")
    return _power(b, whole) * Exact(_RAT, _drawn("pow", (b.key(), frac.numerator, frac.denominator)))


# ---------------------------------------------------------------------------------------------
# The functions (every row of derivations/language/functions.py).


def _squarefree(m: int) -> tuple[int, int]:
    """m = a²·r with r free of the squares of primes < 1000 (all of them for m < 10⁶)."""
    a = 1
    if m < 1 << 40:
        for p in _SMALL_PRIMES:
            pp = p * p
            if pp > m:
                break
            while m % pp == 0:
                m //= pp
                a *= p
    s = _math.isqrt(m)
    if s * s == m:
        return a * s, 1
    return a, m


_SMALL_PRIMES = [p for p in range(2, 1000) if all(p % d for d in range(2, int(p**0.5) + 1))]


def _sqrt(u: Exact) -> Exact:
    if u.kind == _INF:
        if u.q > 0:
            return u
        raise FieldError("√(−∞)")
    if u.is_pure:
        if u.q < 0:
            raise FieldError(f"√ of a negative {u.q}")
        if u.q == 0:
            return _ZERO
        n, d = u.q.numerator, u.q.denominator
        a, r = _squarefree(n * d)  # √(n/d) = √(n·d)/d = a·√r/d
        out = Fraction(a, d)
        if r == 1:
            return Exact(_RAT, out)
        return _root_of(u, Exact(_RAT, out * _drawn("sqrt", ("q", r, 1, None))))
    if u.sign() < 0:
        raise FieldError("√ of a negative value")
    return _root_of(u, Exact(_RAT, _drawn("sqrt", u.key())))


# a drawn root -> what it is the root of: its square, exactly (√b drawn as a rational stand-in
# squares to b, not to the stand-in's square), read by hypot(u, √b) = √(u² + b)
_SQUARE_OF: dict = {}


def _root_of(u: Exact, root: Exact) -> Exact:
    if len(_SQUARE_OF) < 1 << 16:
        _SQUARE_OF[root.key()] = u
    return root


def _square(v: Exact) -> Exact:
    """v², with a drawn root's square its radicand."""
    square = _SQUARE_OF.get(v.key())
    return v * v if square is None else square


def _hypot(u: Exact, v: Exact) -> Exact:
    return _sqrt(_square(u) + _square(v))


def _exp(u: Exact) -> Exact:
    if u.kind == _INF:
        if u.q < 0:
            return _ZERO
        raise FieldError("e^{+∞}")
    if u.kind == _RAT:
        if u.logs is None and u.q == 0:
            return _ONE
        q = u.q
        a = q.numerator % P_SUB * _inv_mod(q.denominator, P_SUB) % P_SUB
        r = pow(_Model.g, a, P)
        try:
            s = _math.exp(float(q))
        except OverflowError:
            s = _math.inf
        for y, c in u.logs or ():
            if c.denominator != 1:
                raise FieldError("e^{c·log y} with a fractional c")
            yr, ys = _Model.log_args[y]
            r = r * pow(yr, int(c), P) % P
            s *= ys ** int(c)
        _Model.exp_inverse.setdefault(r, u)
        return Exact(_FLD, r=r, s=s)
    # e^{u} of a residue: uninterpreted (no rational exponent to map)
    r = _drawn_residue("exp", u.key())
    return Exact(_FLD, r=r, s=_math.exp(u.s) if u.s < 700 else _math.inf)


def _log(u: Exact) -> Exact:
    if u.kind == _INF:
        if u.q > 0:
            return u
        raise FieldError("log(−∞)")
    if u.sign() <= 0:
        raise FieldError(f"log of a non-positive value {u!r}")
    if u.is_pure and u.q == 1:
        return _ZERO
    if u.kind == _FLD and u.r in _Model.exp_inverse:
        return _Model.exp_inverse[u.r]
    if not u.is_pure:
        u = u.field()
        if u.r in _Model.exp_inverse:
            return _Model.exp_inverse[u.r]
    k = u.key()
    if k not in _Model.log_shadow:
        shadow = u.shadow()
        _Model.log_shadow[k] = _math.log(shadow) if shadow > 0 else -_math.inf
        _Model.log_args[k] = (u.field().r, shadow)
    return Exact(_RAT, Fraction(0), ((k, Fraction(1)),))


def _log1p(u: Exact) -> Exact:
    """log(1 + u), its shadow log1p(u) (1 + e^{−99} is 1 in floating point)."""
    y = _ONE + u
    if y.kind != _INF and not y.is_pure:
        k = y.field().key() if y.kind == _RAT else y.key()
        if k not in _Model.log_shadow and y.field().r not in _Model.exp_inverse:
            s = u.shadow()
            if s > -1:
                _Model.log_shadow[k] = _math.log1p(s)
                _Model.log_args[k] = (y.field().r, 1 + s)
    return _log(y)


def _symmetric(name, at_zero, odd: bool):
    """An uninterpreted function with a parity: f(−u) = −f(u) (odd) or f(u) (even), f(0) given."""

    def f(u: Exact) -> Exact:
        if u.kind == _INF:
            raise FieldError(f"{name}(±∞)")
        sg = u.sign()
        if sg == 0:
            return Exact(_RAT, Fraction(at_zero))
        v = Exact(_RAT, _drawn(name, (u if sg > 0 else -u).key()))
        return -v if odd and sg < 0 else v

    return f


def _odd(name, at_zero=0):
    return _symmetric(name, at_zero, odd=True)


def _even(name, at_zero=1):
    return _symmetric(name, at_zero, odd=False)


def _root_half() -> Exact:
    """1/√2 = √2/2, as SymPy writes it, drawn through the constants' evaluator."""
    return _from_sympy(sp.sqrt(2) / 2)


def _sign(u: Exact) -> Exact:
    return Exact(_RAT, Fraction(u.sign()))


def _maximum(a: Exact, b: Exact) -> Exact:
    return a if a._cmp(b) >= 0 else b


def _minimum(a: Exact, b: Exact) -> Exact:
    return a if a._cmp(b) <= 0 else b


_FUNCTIONS = {
    "exp": _exp,
    "log": _log,
    "log1p": lambda u: _log1p(u),
    "expm1": lambda u: _exp(u) - _ONE,
    "tanh": _odd("tanh"),
    "cosh": lambda u: (_exp(u) + _exp(-u)) / 2,  # by its exponentials, exactly
    "sinh": lambda u: (_exp(u) - _exp(-u)) / 2,
    "sin": _odd("sin"),
    "cos": _even("cos"),
    "erf": _odd("erf"),
    "sigmoid": lambda u: _ONE / (_ONE + _exp(-u)),
    "ndtr": lambda u: (_ONE + _odd("erf")(u * _root_half())) / 2,
    "sqrt": _sqrt,
    "rsqrt": lambda u: _sqrt(u).inverse(),
    "hypot": lambda u, v: _hypot(u, v),
    "abs": abs,
    "sign": _sign,
    "maximum": _maximum,
    "minimum": _minimum,
}


def evaluate(name: str, *args) -> Exact:
    """Row `name` of the functions table at exact arguments."""
    return _FUNCTIONS[name](*[_lift_strict(a) for a in args])


# ---------------------------------------------------------------------------------------------
# The claims' side: an index expression compiled into closures, memoised per index values.


# SymPy's function classes -> their rows of the one table; the array language's σ and Φ nodes
# are the table's sigmoid and ndtr
_SP_FUNCS = {
    **{row.sympy: name for name, row in _functions.FUNCTIONS.items() if isinstance(row.sympy, type) and row.arity == 1},
    Sigmoid: "sigmoid",
    NormalCDF: "ndtr",
}


class _Compiler:
    """Compiles an index expression once into closures; each evaluation binds the run's data
    (`rebind`): `values[name]` (Array name -> (2-D object array, shape)), `scalars` (option and
    size Symbol -> value), `sizes` (size Symbol -> int, for RowMax's row length). Every node is
    memoised on the values of the index symbols it depends on; `rebind` forgets the memos."""

    def __init__(self, maxes: dict | None = None):
        self.values: dict = {}
        self.scalars: dict = {}
        self.sizes: dict = {}
        self.maxes = maxes or {}  # max_<label> -> argument of RowMax
        self._cache: dict = {}
        self._index: set = set()
        self._memos: list = []

    def rebind(self, values: dict, scalars: dict, sizes: dict) -> None:
        self.values, self.scalars, self.sizes = values, scalars, sizes
        for m in self._memos:
            m.clear()

    def compile(self, expr, index: tuple = ()):
        self._index |= set(index)
        return self._node(sp.sympify(expr))

    def _deps(self, e) -> tuple:
        return tuple(sorted((s for s in e.free_symbols if s in self._index), key=sp.default_sort_key))

    def _node(self, e):
        hit = self._cache.get(e)
        if hit is not None:
            return hit
        f = self._build(e)
        deps = self._deps(e)
        if isinstance(e, sp.Symbol) and e in self._index or e.is_Rational:
            out = f
        else:
            memo: dict = {}
            self._memos.append(memo)
            if len(deps) == 1:
                (d0,) = deps

                def memoised(env, f=f, memo=memo, d0=d0):
                    k = env[d0]
                    v = memo.get(k)
                    if v is None:
                        v = memo[k] = f(env)
                    return v
            elif len(deps) == 2:
                d0, d1 = deps

                def memoised(env, f=f, memo=memo, d0=d0, d1=d1):
                    k = (env[d0], env[d1])
                    v = memo.get(k)
                    if v is None:
                        v = memo[k] = f(env)
                    return v
            else:

                def memoised(env, f=f, memo=memo, deps=deps):
                    k = tuple([env[d] for d in deps])
                    v = memo.get(k)
                    if v is None:
                        v = memo[k] = f(env)
                    return v

            out = memoised
        self._cache[e] = out
        return out

    def _scalar(self, e):
        v = self.scalars.get(e)
        if v is None:
            raise FieldError(f"the expected value reads the free symbol {e}")
        return _lift_strict(v)

    def _build(self, e):
        if isinstance(e, sp.Indexed):
            return self._indexed(e)
        if isinstance(e, sp.Symbol):
            if e in self._index:
                return lambda env, e=e: Exact(_RAT, Fraction(env[e]))
            return lambda env, e=e: self._scalar(e)
        if e.is_Integer or e.is_Rational:
            v = Exact(_RAT, Fraction(int(e.p), int(e.q)))
            return lambda env, v=v: v
        if e is sp.S.Infinity:
            return lambda env: Exact.infinity(1)
        if e is sp.S.NegativeInfinity:
            return lambda env: Exact.infinity(-1)
        if e is sp.pi:
            return lambda env: Exact(_RAT, _drawn("pi", ()))  # the run's seed, at run time
        if e is sp.E:
            return lambda env: _exp(_ONE)
        if isinstance(e, sp.Float):
            raise FieldError(f"an inexact Float {e} in the expected value")
        if isinstance(e, sp.Add):
            parts = [self._node(a) for a in e.args]

            def add(env, parts=parts):
                v = parts[0](env)
                for p in parts[1:]:
                    v = v + p(env)
                return v

            return add
        if isinstance(e, sp.Mul):
            parts = [self._node(a) for a in e.args]

            def mul(env, parts=parts):
                v = parts[0](env)
                for p in parts[1:]:
                    v = v * p(env)
                return v

            return mul
        if isinstance(e, sp.Pow):
            b = self._node(e.base)
            x = e.exp
            if x.is_Rational:
                q = Fraction(int(x.p), int(x.q))
                return lambda env, b=b, q=q: _power(b(env), q)
            xf = self._node(x)
            return lambda env, b=b, xf=xf: b(env) ** xf(env)
        if isinstance(e, sp.Sum):
            return self._sum(e)
        if type(e) in _SP_FUNCS:
            a = self._node(e.args[0])
            g = _FUNCTIONS[_SP_FUNCS[type(e)]]
            return lambda env, a=a, g=g: g(a(env))
        if isinstance(e, (sp.Max, sp.Min)):
            parts = [self._node(a) for a in e.args]
            g = _maximum if isinstance(e, sp.Max) else _minimum

            def fold(env, parts=parts, g=g):
                v = parts[0](env)
                for p in parts[1:]:
                    v = g(v, p(env))
                return v

            return fold
        if isinstance(e, sp.Heaviside):
            a = self._node(e.args[0])
            h0 = self._node(e.args[1]) if len(e.args) > 1 else (lambda env: _HALF)

            def step(env, a=a, h0=h0):
                s = a(env).sign()
                return _ONE if s > 0 else _ZERO if s < 0 else h0(env)

            return step
        if isinstance(e, HalfStep):
            a = self._node(e.args[0])
            return lambda env, a=a: (_ONE + _sign(a(env))) / 2
        if isinstance(e, DocumentFunction):  # Gaussian: e^{−u²/2}, its document's form
            return self._build(e.document_form())
        if isinstance(e, sp.KroneckerDelta):
            a, b = (self._node(x) for x in e.args)
            return lambda env, a=a, b=b: _ONE if same(a(env), b(env)) else _ZERO
        if isinstance(e, sp.floor):
            a = self._node(e.args[0])

            def floor(env, a=a):
                v = a(env)
                if not v.is_pure:
                    raise FieldError("floor of a non-rational")
                return Exact(_RAT, Fraction(_math.floor(v.q)))

            return floor
        if isinstance(e, sp.Mod):
            a, b = (self._node(x) for x in e.args)
            return lambda env, a=a, b=b: a(env) % b(env)
        if isinstance(e, sp.Piecewise):
            pieces = [(self._node(v), self._cond(c)) for v, c in e.args]

            def piecewise(env, pieces=pieces):
                for v, c in pieces:
                    if c(env):
                        return v(env)
                raise FieldError("no piece of a Piecewise holds")

            return piecewise
        raise FieldError(f"the field judge has no rule for {type(e).__name__}: {e}")

    def _cond(self, c):
        if c is sp.true:
            return lambda env: True
        if c is sp.false:
            return lambda env: False
        ops = {sp.Le: "__le__", sp.Lt: "__lt__", sp.Ge: "__ge__", sp.Gt: "__gt__", sp.Eq: "__eq__", sp.Ne: "__ne__"}
        for cls, meth in ops.items():
            if isinstance(c, cls):
                a, b = self._node(c.lhs), self._node(c.rhs)
                return lambda env, a=a, b=b, meth=meth: getattr(a(env), meth)(b(env))
        if isinstance(c, sp.And):
            parts = [self._cond(x) for x in c.args]
            return lambda env, parts=parts: all(p(env) for p in parts)
        if isinstance(c, sp.Or):
            parts = [self._cond(x) for x in c.args]
            return lambda env, parts=parts: any(p(env) for p in parts)
        raise FieldError(f"the field judge has no rule for the condition {c}")

    def _sum(self, e):
        limits = list(e.limits)
        for k, _, _ in limits:
            self._index.add(k)
        inner = self._node(e.function)
        bounds = [(k, self._node(sp.sympify(lo)), self._node(sp.sympify(hi))) for k, lo, hi in limits]
        return lambda env, bounds=bounds, inner=inner: _loop(env, bounds, inner)

    def _indexed(self, e):
        name = e.base.label.name if hasattr(e.base.label, "name") else str(e.base.label)
        idx = [self._node(sp.sympify(x)) for x in e.indices]
        if name in self.maxes:
            arg = self.maxes[name]
            row = sp.Dummy("row", integer=True)
            col = sp.Dummy("col", integer=True)
            self._index |= {row, col}
            cell = self._node(entry(arg, (row, col)))
            width = sp.sympify(shape_of(arg)[1])

            def row_max(env, idx=idx, cell=cell, row=row, col=col, width=width):
                sub = dict(env)
                sub[row] = _to_int(idx[0](env))
                v = None
                for c in range(int(width.xreplace(self.sizes))):
                    sub[col] = c
                    x = cell(sub)
                    v = x if v is None else _maximum(v, x)
                return v

            return row_max

        def look(env, idx=idx, name=name):
            found = self.values.get(name)
            if found is None:
                raise FieldError(f"the expected value reads {name}, which is no input")
            arr, (r, c) = found
            pos = [_to_int(f(env)) for f in idx]
            if len(pos) == 2:
                i, j = pos
            elif len(pos) == 1:
                i, j = (0, pos[0]) if r == 1 else (pos[0], 0)
            else:
                i, j = 0, 0
            if not (0 <= i < r and 0 <= j < c):
                raise FieldError(f"{name}[{i}, {j}] is outside its shape ({r}, {c})")
            return _lift_strict(arr[i, j])

        return look


def _loop(env, bounds, inner):
    (k, lo, hi), rest = bounds[0], bounds[1:]
    a, b = _to_int(lo(env)), _to_int(hi(env))
    total = None
    sub = dict(env)
    for v in range(a, b + 1):
        sub[k] = v
        x = _loop(sub, rest, inner) if rest else inner(sub)
        total = x if total is None else total + x
    return _ZERO if total is None else total


def _compile(expr, scalars: dict):
    """A constant or scalar expression as a closure (no inputs)."""
    comp = _Compiler()
    f = comp.compile(expr)
    comp.rebind({}, scalars, {})
    return f


# ---------------------------------------------------------------------------------------------
# Running the printed code: translation.py's loader, this module's namespaces.


class _Strict(types.SimpleNamespace):
    def __getattr__(self, name):
        raise FieldError(
            f"the printed text uses {self.__dict__.get('_label', '?')}.{name}, which the field judge does not model"
        )


def _obj(a):
    return _np.asarray(a, dtype=object) if not (isinstance(a, _np.ndarray) and a.dtype == object) else a


def _entrywise(name: str, arity: int):
    f = _np.frompyfunc(lambda *xs: _functions.apply(name, *[_lift_strict(x) for x in xs]), arity, 1)

    def ufunc(*args, out=None, **kwargs):
        if kwargs:
            raise FieldError(f"{name}: arguments {sorted(kwargs)} are not modelled")
        with _np.errstate(all="ignore"):  # the shadows' floating point, not the values
            res = f(*[_obj(a) for a in args])
        if out is not None:
            out[...] = res
            return out
        return res

    ufunc.__name__ = name
    return ufunc


def _arith(op):
    f = _np.frompyfunc(op, 2, 1)

    def ufunc(a, b, out=None, **kwargs):
        if kwargs:
            raise FieldError(f"arguments {sorted(kwargs)} are not modelled")
        res = f(_obj(a), _obj(b))
        if out is not None:
            out[...] = res
            return out
        return res

    return ufunc


def _negative(a, out=None):
    res = _np.frompyfunc(lambda x: -_lift_strict(x), 1, 1)(_obj(a))
    if out is not None:
        out[...] = res
        return out
    return res


def _np_max(a, axis=None, keepdims=False, **kwargs):
    if kwargs or axis is None:
        raise FieldError(f"np.max: only axis=<int>, keepdims are modelled (axis={axis}, {kwargs})")
    a = _np.moveaxis(_obj(a), axis, -1)
    rows = a.reshape(-1, a.shape[-1])
    out = _np.empty(rows.shape[0], dtype=object)
    for k, row in enumerate(rows):
        v = _lift_strict(row[0])
        for x in row[1:]:
            v = _maximum(v, _lift_strict(x))
        out[k] = v
    out = out.reshape(a.shape[:-1])
    if keepdims:
        out = _np.moveaxis(out[..., None], -1, axis)
    return out


def _arange(*args, dtype=None, **kwargs):
    if kwargs:
        raise FieldError(f"np.arange: arguments {sorted(kwargs)} are not modelled")
    out = _np.empty(len(range(*[int(a) for a in args])), dtype=object)
    for k, v in enumerate(range(*[int(a) for a in args])):
        out[k] = Exact(_RAT, Fraction(v))
    return out


def _creating(f, name):
    def call(*args, dtype=None, **kwargs):
        if dtype is not None and _np.dtype(dtype).kind == "f":
            raise FieldError(f"np.{name}(dtype={dtype}): a float array next to exact ones")
        return f(*args, dtype=dtype, **kwargs)

    return call


def _numpy_namespace():
    ns = dict(_label="np")
    for spelling, row in _functions.spelled("numpy").items():
        mod, _, attr = spelling.partition(".")
        if mod == "np":
            ns[attr] = _entrywise(row.name, row.arity)
    ns.update(
        negative=_negative,
        add=_arith(lambda a, b: _lift_strict(a) + b),
        subtract=_arith(lambda a, b: _lift_strict(a) - b),
        multiply=_arith(lambda a, b: _lift_strict(a) * b),
        divide=_arith(lambda a, b: _lift_strict(a) / b),
        max=_np_max,
        arange=_arange,
        errstate=lambda **flags: contextlib.nullcontext(),
        ones=_creating(_np.ones, "ones"),
        zeros=_creating(_np.zeros, "zeros"),
        full=_creating(_np.full, "full"),
        empty=_creating(_np.empty, "empty"),
    )
    for name in (
        "where",
        "tri",
        "broadcast_to",
        "broadcast_shapes",
        "take_along_axis",
        "swapaxes",
        "split",
        "concatenate",
        "sum",
        "asarray",
        "ravel",
        "any",
        "dtype",
        "ndarray",
        "integer",
        "floating",
        "float32",
        "float64",
        "bool_",
        "issubdtype",
        "array",
        "moveaxis",
        "expand_dims",
        "reshape",
        "newaxis",
    ):
        ns[name] = getattr(_np, name)
    return _Strict(**ns)


def _math_namespace():
    """`math.<f>` for every `math.` spelling of the functions table: an Exact argument through
    the table's row; a constant stays SymPy (math.sqrt(2) is √2, math.sqrt(2/math.pi) is √2/√π)."""

    def fn(name):
        row = _functions.FUNCTIONS[name]

        def call(x):
            if isinstance(x, Exact):
                return _functions.apply(name, x)
            return row.sympy(sp.sympify(x))

        call.__name__ = name
        return call

    ns = {s.partition(".")[2]: fn(row.name) for s, row in _functions.spelled("numpy").items() if s.startswith("math.")}
    return _Strict(_label="math", pi=sp.pi, e=sp.E, inf=sp.oo, prod=_math.prod, **ns)


def _scipy_namespace():
    """`scipy.special.<f>` for every such spelling of the functions table, entry by entry."""
    ns = {
        s.rpartition(".")[2]: _entrywise(row.name, row.arity)
        for s, row in _functions.spelled("numpy").items()
        if s.startswith("scipy.special.")
    }
    special = _Strict(_label="scipy.special", **ns)
    return _Strict(_label="scipy", special=special), special


def _exact_float(v):
    """`float(eps)` in the printed text: the option's exact value."""
    if isinstance(v, float):
        raise FieldError(f"float({v!r})")
    return v


_NP, _MATH = _numpy_namespace(), _math_namespace()
_SCIPY, _SCIPY_SPECIAL = _scipy_namespace()


def _rewire(mod, helpers: dict | None = None):
    """Point a module loaded by translation.py at this module's namespaces (and its helpers
    `_special`, `_support` at their texts in `helpers`, where given: an edited helper)."""
    ns = mod.__dict__
    for var, val in list(ns.items()):
        label = val.__dict__.get("_label") if isinstance(val, types.SimpleNamespace) else None
        if label == "np":
            ns[var] = _NP
        elif label == "math":
            ns[var] = _MATH
        elif label == "scipy":
            ns[var] = _SCIPY
        elif label == "scipy.special":
            ns[var] = _SCIPY_SPECIAL
        elif (
            isinstance(val, types.ModuleType)
            and val.__name__.startswith("generated.numpy.")
            and val.__name__ != "generated.numpy._validate"
        ):
            helper = val.__name__.rsplit(".", 1)[1]  # _special, _support; linear for mha
            ns[var] = _load(helper, (helpers or {}).get(helper), helpers)
    ns["float"] = _exact_float


_HELPERS: dict = {}


def _load(name: str, source: str | None = None, helpers: dict | None = None):
    """generated/numpy/<name>.py (or `source`, an edited text) with the field judge's shims;
    `helpers`: edited texts of `_special` / `_support` (name -> text)."""
    from . import translation
    from .translation import editing, printed_text

    cacheable = source is None and not helpers and not editing()
    if cacheable and name in _HELPERS:
        return _HELPERS[name]
    text = source if source is not None else printed_text(ROOT / "generated" / "numpy" / f"{name}.py")
    mod = translation.load(name, text)  # a fresh module: the loader caches only source=None
    _rewire(mod, helpers)
    if cacheable:
        _HELPERS[name] = mod
    return mod


def _torch_available() -> bool:
    try:
        from . import torch_shim  # noqa: F401
        from .translation import load_torch  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _torch_hooks():
    """While the field judge runs torch text: the torch shim's comparison and entry check
    answer for `Exact` entries (a comparison of numbers is 0 or 1; an Exact is an exact entry),
    and delegate everything else unchanged. (The shim takes both from translation.py, whose
    `_comparison` sympifies its operands.)"""
    from . import torch_shim

    comparison, exact = torch_shim._comparison, torch_shim._exact

    def _comparison(a, b, how):
        if isinstance(a, Exact) or isinstance(b, Exact):
            x, y = _lift_strict(a), _lift_strict(b)
            holds = {"gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y, "eq": x == y, "ne": x != y}[how]
            return sp.Integer(1 if holds else 0)
        return comparison(a, b, how)

    def _exact(v):
        return v if isinstance(v, Exact) else exact(v)

    torch_shim._comparison, torch_shim._exact = _comparison, _exact
    try:
        yield
    finally:
        torch_shim._comparison, torch_shim._exact = comparison, exact


class _Backend(_TranslationBackend):
    """How the judge hands arrays to a backend's printed text and reads its results back (the
    symbolic run's `wrap` and `unwrap`, a wrong result a FieldError)."""

    error = FieldError

    def __init__(self, name: str, helpers: dict | None = None):
        if name not in ("numpy", "torch"):
            raise ValueError(f"backend {name!r}")
        self.name = name
        self.helpers = helpers or {}  # edited texts of other generated modules of the backend

    def file(self, name: str) -> str:
        return f"generated/{self.name}/{name}.py"

    def load(self, name: str, source: str | None = None):
        if self.name == "numpy":
            return _load(name, source, self.helpers)
        from .translation import load_torch, printed_text

        text = source if source is not None else printed_text(ROOT / "generated" / "torch" / f"{name}.py")
        # a fresh tree of modules (a tree with an edited text is never cached)
        mod = load_torch(name, text, dict(self.helpers))
        seen: set = set()

        def rewire(m):
            if id(m) in seen:
                return
            seen.add(id(m))
            m.__dict__["float"] = _exact_float
            for v in list(m.__dict__.values()):
                if isinstance(v, types.ModuleType) and v.__name__.startswith("generated.torch."):
                    rewire(v)
                elif isinstance(v, types.SimpleNamespace):
                    for w in vars(v).values():
                        if isinstance(w, types.ModuleType) and w.__name__.startswith("generated.torch."):
                            rewire(w)

        rewire(mod)
        return mod

    @contextlib.contextmanager
    def run(self):
        # the shadows' floating point may overflow to ∞ (e^{99}·e^{99}): not the values' concern
        with _np.errstate(over="ignore", under="ignore"):
            if self.name == "torch":
                with _torch_hooks():
                    yield
            else:
                yield


# ---------------------------------------------------------------------------------------------
# Results.


@dataclass
class Result:
    """One judged array: the file, the output, the flags, the sizes, the point (seed)."""

    file: str
    what: str
    flags: tuple = ()
    sizes: dict = field(default_factory=dict)
    seed: int = 0
    entries: int = 0
    mismatches: list = field(default_factory=list)  # (position, expected, got)
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.error and self.entries > 0

    def __str__(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        head = f"{self.file} {self.what}{flags} at {self.sizes}, seed {self.seed}: "
        if self.error:
            return head + "ERROR " + self.error
        if self.mismatches:
            pos, want, got = self.mismatches[0]
            return (
                head + f"{len(self.mismatches)}/{self.entries} entries differ; first at {pos}: "
                f"expected {want!r}, got {got!r}"
            )
        return head + f"{self.entries} entries equal exactly ({self.seconds:.2f} s)"


def _compare(res: Result, got, want: _np.ndarray) -> None:
    got = _obj(got)
    if tuple(got.shape) != tuple(want.shape):
        res.error = f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        return
    for pos in _np.ndindex(*want.shape):
        res.entries += 1
        try:
            g = _lift_strict(got[pos])
            ok = same(g, want[pos])
        except FieldError as exc:
            res.mismatches.append((pos, want[pos], f"{got[pos]!r} ({exc})"))
            continue
        if not ok:
            res.mismatches.append((pos, want[pos], g))


# ---------------------------------------------------------------------------------------------
# Random points and sizes.


class _Draw:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.used: set = set()

    def value(self) -> Exact:
        """A rational with a small denominator (|x| < 100: e^{−|x|} keeps a non-zero float
        shadow), never drawn before in this run while the ~3800 such values last."""
        for _ in range(64):
            q = Fraction(self.rng.randint(-99, 99), self.rng.randint(1, 32))
            if q not in self.used:
                break
        self.used.add(q)
        return Exact(_RAT, q)

    def lattice_array(self, shape) -> _np.ndarray:
        """Entries in {−1, 0, 1}: sums of their products are exactly 0 in many places, so a
        max, |·| or step of an inner value (ReLU's z = x W₁ᵀ + b₁) is evaluated on its kink."""
        out = _np.empty(shape, dtype=object)
        for pos in _np.ndindex(*shape):
            out[pos] = Exact(_RAT, Fraction(self.rng.choice((-1, 0, 1))))
        return out

    def positive(self, lo: Fraction = Fraction(0), hi: Fraction | None = None) -> Exact:
        while True:
            q = Fraction(self.rng.randint(1, 999), self.rng.randint(1, 64))
            if hi is not None:
                q = lo + (hi - lo) * Fraction(self.rng.randint(1, 999), 1000)
            elif q <= lo:
                continue
            return Exact(_RAT, q)

    def array(self, shape) -> _np.ndarray:
        out = _np.empty(shape, dtype=object)
        for pos in _np.ndindex(*shape):
            out[pos] = self.value()
        return out

    def sizes(self, symbols, lo=5, hi=17, cap=None) -> dict:
        pool = list(range(lo, (hi if cap is None else min(hi, cap)) + 1))
        self.rng.shuffle(pool)
        return {s: pool[k] for k, s in enumerate(sorted(symbols, key=lambda x: x.name))}


def _option_value(draw: _Draw, opt) -> Exact:
    """A random value inside the option's domain (eps > 0, 0 ≤ β < 1, ...)."""
    allowed = opt.allowed()
    lo = allowed.inf if hasattr(allowed, "inf") else 0
    hi = allowed.sup if hasattr(allowed, "sup") else sp.oo
    if hi is sp.oo or hi == sp.oo:
        base = Fraction(int(sp.floor(lo))) if lo not in (-sp.oo, sp.S.NegativeInfinity) else Fraction(0)
        v = draw.positive()
        return Exact(_RAT, base + v.q)
    lo = Fraction(0) if lo in (-sp.oo, sp.S.NegativeInfinity) else Fraction(str(lo))
    return draw.positive(lo, Fraction(str(hi)))


# ---------------------------------------------------------------------------------------------
# Judging an op.

# sizes drawn per op: two assignments each, every size in 5..17, pairwise distinct; `cap` keeps
# the heavy backward index forms inside the time budget
OP_PLAN: dict = {
    "default": dict(runs=2, cap=17, batch=2),
    "attention": dict(runs=2, cap=10, batch=2),
    "attention_lse": dict(runs=2, cap=10, batch=2),
    "attention_dropout": dict(runs=2, cap=10, batch=2),
    "ffn_relu": dict(runs=2, cap=11, batch=2),
    "swiglu": dict(runs=2, cap=11, batch=2),
    "geglu": dict(runs=2, cap=11, batch=2),
    "rope": dict(runs=2, cap=12, batch=2),
}


def _stored(shape) -> tuple:
    r, c = shape
    return (c,) if r == 1 else (r, c)


def _integer_values(draw: _Draw, lo: int, hi: int, count: int) -> list[int]:
    vals = [draw.rng.randint(lo, hi) for _ in range(count)]
    if hi >= 1 and lo <= 1 and count:
        vals[draw.rng.randrange(count)] = hi  # a 0/1 mask has at least one 1
    return vals


def _as2d(a, shape):
    r, c = shape
    return _np.asarray(a, dtype=object).reshape(r, c)


def judge_op(
    op: Op | str,
    backend: str = "numpy",
    seed: int = 0,
    source: str | None = None,
    sizes: list | None = None,
    batch: int | None = None,
    flags=None,
    helpers: dict | None = None,
    modes: list | None = None,
) -> list[Result]:
    """Run generated/<backend>/<op>.py (or `source`) at random points and sizes, forward and
    backward, every flag combination, and compare every output and gradient exactly with the
    claims' index form evaluated at the same point. `modes`, one per run: "same" (every batched
    input with the leading axis), "broadcast<c>" (the c-th batched input with it, the others with
    a leading axis of 1 or none, which broadcast: `_broadcast_lead`), "absent" (no leading axis,
    the rows axis absent: x (n,) for x (r, n)), "lattice" (inputs in {−1, 0, 1}, for an op with a
    kink: `has_kink`)."""
    op = registry.op(op) if isinstance(op, str) else op
    plan = dict(OP_PLAN["default"], **OP_PLAN.get(op.name, {}))
    if batch is not None:
        plan["batch"] = batch
    be = _Backend(backend, helpers)
    fname = be.file(op.name)
    try:
        mod = be.load(op.name, source)
    except Exception as exc:  # noqa: BLE001 - a text that does not load is a finding
        return [Result(fname, "load", seed=seed, error=f"{type(exc).__name__}: {exc}")]
    setting = setting_for(op, {})
    draw = _Draw(seed)
    size_syms = list(setting.sizes)
    runs = sizes if sizes is not None else [draw.sizes(size_syms, cap=plan["cap"]) for _ in range(plan["runs"])]
    if modes is None and sizes is None:
        # the next assignments with broadcasting leading axes (broadcast ops), and the first
        # once more with the rows absent where the op allows it (x (n,) for x (r, n))
        # (every carrier in turn: each input once with the leading axis, once with 1, once without)
        carriers = len(getattr(getattr(mod, "SIGNATURE", None), "batched", ())) if op.broadcast else 0
        broadcast = [f"broadcast{c}" for c in range(min(carriers, 3))] or ["same"]
        modes = ["same", *broadcast] + (["absent"] if op.optional_axes >= 1 else [])
        modes += ["lattice"] if has_kink(op) else []
    modes = modes or ["same"] * len(runs)
    if op.optional_axes < 1 and "absent" in modes:
        raise ValueError(f"{op.name}: its rows axis may not be absent (optional_axes = 0)")
    out: list[Result] = []
    for run, mode in enumerate(modes):
        assigned = runs[run % len(runs)]
        assigned = {
            (s if isinstance(s, sp.Symbol) else next(x for x in size_syms if x.name == s)): int(v)
            for s, v in assigned.items()
        }
        for when in flag_sets(op) if flags is None else flags:
            with be.run():
                out += _judge_run(op, mod, be, assigned, when, seed * 1000 + run, plan["batch"], mode)
            if stopped(out):
                return out
    if sizes is None:
        for k, s in enumerate(sorted(size_syms, key=lambda x: x.name)):
            assigned = {**draw.sizes(size_syms, cap=plan["cap"]), s: 0}
            for when in flag_sets(op) if flags is None else flags:
                with be.run():
                    out += judge_zero(op, mod, be, assigned, when, seed * 1000 + 500 + k, plan["batch"])
                if stopped(out):
                    return out
    return out


def has_kink(op) -> bool:
    """The op's forward has a max, min, |·|, sign, step or cases: a point where its argument is
    exactly 0 is where the printed backward's choice there is seen (the "lattice" run)."""
    from derivations.language.arrays import HalfStep

    kinds = (sp.Max, sp.Min, sp.Abs, sp.sign, sp.Heaviside, sp.Piecewise, HalfStep)
    return any(
        isinstance(e, sp.Basic) and e.has(*kinds) for when in flag_sets(op) for e in forward_scope(op, when).values()
    )


def judge_zero(op, mod, be, size_map, when, seed, batch) -> list[Result]:
    """One size 0 (the claims are proved for sizes ≥ 1, so this case is checked, not assumed):
    where the specification is defined there — every output and gradient of the claims' index
    form evaluates, empty sums 0 — the printed kernel must compute exactly that (outputs of the
    declared shapes, gradients summed over nothing); where it divides by zero (a mean over an
    empty row, 1/√d with d = 0, a log-sum-exp over no entries), the kernel must refuse the call
    with its own error. The refusal is read from the specification, not from code generation's
    list of sizes that must be ≥ 1."""
    fname = be.file(op.name)
    sizes_named = {s.name: v for s, v in size_map.items()}
    where = (fname, tuple(sorted(when)), sizes_named, seed)
    setting = setting_for(op, {})
    for a in op.integer_inputs:
        lo, hi = _id_range(setting, a, size_map)
        if hi < lo and int(sp.sympify(a.shape[0]).xreplace(size_map)) > 0:  # no id can be drawn:
            return []  # every call is outside the domain (the edge judge's id refusals)
    try:
        got = _judge_point(op, mod, be, size_map, when, seed, batch, "same", empty_ok=True)
        refused = None
    except _Refusal as exc:
        got, refused = [], exc.message
    except ZeroDenominator as exc:
        got, refused = [], None
        printed_divides = str(exc) or "a zero denominator"
    else:
        printed_divides = None
    defined = _specification_defined(op, size_map, when, seed, batch)
    res = Result(fname, "size 0", where[1], sizes_named, seed, entries=1)
    if refused is not None and defined and not _a_denominator(op, size_map):
        res.error = f"refused a size the specification is defined at: {refused}"
    elif refused is None and not defined:
        res.error = "the specification divides by zero at this size and the kernel accepts it" + (
            f" ({printed_divides})" if printed_divides else ""
        )
    elif refused is None and printed_divides:
        res.error = f"the kernel divides by zero where the specification does not: {printed_divides}"
    return [res] + [r for r in got if not (r.entries == 0 and not r.error and not r.mismatches)]


class _Refusal(Exception):
    """The printed kernel refused a call with its own error (a size, an id or a count)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _id_range(setting, a, size_map) -> tuple[int, int]:
    """The range integer input `a` is drawn from: its declared one, ids and targets over the
    whole vocabulary."""
    lo, hi = (int(sp.sympify(x).xreplace(size_map)) for x in setting.integer_arrays[a.name])
    vocab = [v for sym, v in size_map.items() if sym.name == "V"]
    if hi > 1 and vocab:
        hi = vocab[0] - 1
    return lo, hi


def _a_denominator(op, size_map) -> bool:
    """Whether the size set to 0 is one that a denominator of the printed formulas is 0 at
    (a mean's count, a softmax's row sum over no keys): a refusal the specification justifies
    even where the 0 sits inside a sum over nothing (Σ_{j<0} P_ij V_j = 0 is defined; the
    softmax P it sums is not)."""
    from codegen.analysis import analyse

    zero = {s.name for s, v in size_map.items() if v == 0}
    return any(sym.name in zero for sym, _ in analyse(op).zero_sizes)


def _specification_defined(op, size_map, when, seed, batch) -> bool:
    """Whether every output and gradient of the claims' index form evaluates at these sizes
    (no zero denominator), at a random point."""
    draw = _Draw(seed)
    setting = setting_for(op, {})
    arrays = {}
    shape = lambda a: tuple(int(sp.sympify(s).xreplace(size_map)) for s in a.shape)  # noqa: E731
    for a in op.inputs + op.params:
        shp = shape(a)
        if a in op.integer_inputs:
            arr = _np.array(_integer_values(draw, *_id_range(setting, a, size_map), shp[0]), dtype=_np.int64)
        else:
            arr = draw.array(_stored(shp))
        arrays[a.name] = (shp, arr, 0)
    for o in op.outputs:
        arrays[grad_of(o).name] = (shape(o), draw.array(_stored(shape(o))), 0)
    _kwargs, scalars = _options_at(op, when, setting, draw)
    scalars.update(size_map)
    fwd, bwd = forward_scope(op, when), backward_scope(op, when)
    try:
        for a, expr in [(o, fwd[o]) for o in op.outputs] + [(g, bwd[g]) for g in op.grads]:
            _expected(op, expr, shape(a), arrays, scalars, size_map, 1, bool(op.broadcast), 0)
    except ZeroDenominator:
        return False
    return True


def _judge_run(op, mod, be, size_map, when, seed, batch, mode="same") -> list[Result]:
    """One point, one size assignment, one flag set."""
    fname = be.file(op.name)
    for attempt in range(5):
        try:
            return _judge_point(op, mod, be, size_map, when, seed + 7919 * attempt, batch, mode)
        except ZeroDenominator:
            continue
    return [
        Result(
            fname,
            "run",
            tuple(sorted(when)),
            {s.name: v for s, v in size_map.items()},
            seed,
            error="a zero denominator at five points in a row",
        )
    ]


def _judge_point(op, mod, be, size_map, when, seed, batch, mode="same", empty_ok=False) -> list[Result]:
    fname = be.file(op.name)
    _Model.reset(seed)
    draw = _Draw(seed)
    sig = getattr(mod, "SIGNATURE", None)
    batched = [name for name, _ in getattr(sig, "batched", ())]
    per_slice = bool(op.broadcast)
    B = batch if batch and mode != "absent" else 1
    setting = setting_for(op, {})
    absent: set = set()  # the rows axis of these inputs and outputs is absent
    if mode == "absent":
        size_map = dict(size_map)
        for a in op.inputs:
            if a.name in batched:
                rows = sp.sympify(a.shape[0])
                if isinstance(rows, sp.Symbol):
                    size_map[rows] = 1
                    absent |= {x.name for x in op.inputs + op.outputs if sp.sympify(x.shape[0]) == rows}
    sizes_named = {s.name: v for s, v in size_map.items()}
    if mode != "same":
        sizes_named["axes"] = mode
    flags_on = tuple(sorted(when))

    def leading(name) -> int:
        """The leading axis an input gets: B, 1 or none (0)."""
        if B == 1 or name not in batched:
            return 0
        return _broadcast_lead(mode, batched.index(name), B)

    def shape(a):
        return tuple(int(sp.sympify(s).xreplace(size_map)) for s in a.shape)

    arrays: dict = {}  # name -> (declared 2-D shape, stored array as passed)
    args = []
    for a in op.inputs + op.params:
        shp = shape(a)
        lead = (leading(a.name),) if leading(a.name) else ()
        if a in op.integer_inputs:
            lo, hi = _id_range(setting, a, size_map)
            vals = _integer_values(draw, lo, hi, shp[0] * (lead[0] if lead else 1))
            arr = _np.array(vals, dtype=_np.int64).reshape(lead + (() if a.name in absent else (shp[0],)))
        elif mode == "lattice":
            arr = draw.lattice_array(lead + _stored(shp))
        else:
            arr = draw.array(lead + _stored(shp))
        arrays[a.name] = (shp, arr, lead[0] if lead else 0)
        args.append(be.wrap(arr))
    kwargs, scalars = _options_at(op, when, setting, draw)
    for s, v in size_map.items():
        scalars[s] = v
    results: list[Result] = []
    try:
        got, cache = getattr(mod, f"{op.name}_forward")(*args, **kwargs)
    except ZeroDenominator:
        raise
    except ValueError as exc:
        if empty_ok and str(exc).startswith(op.name):  # the kernel's own refusal, judged by judge_zero
            raise _Refusal(str(exc)) from exc
        return [Result(fname, "forward", flags_on, sizes_named, seed, error=f"{type(exc).__name__}: {exc}")]
    except Exception as exc:  # noqa: BLE001 - the run failing is a finding
        return [Result(fname, "forward", flags_on, sizes_named, seed, error=f"{type(exc).__name__}: {exc}")]
    got = got if isinstance(got, tuple) else (got,)
    ups = []
    for o in op.outputs:
        shp = shape(o)
        lead = (B,) if B > 1 and shp != (1, 1) else ()
        arr = draw.array(lead + _stored(shp))
        arrays[grad_of(o).name] = (shp, arr, lead[0] if lead else 0)
        ups.append(be.wrap(arr))
    try:
        grads = getattr(mod, f"{op.name}_backward")(*ups, cache)
    except ZeroDenominator:
        raise
    except Exception as exc:  # noqa: BLE001
        grads = exc
    fwd = forward_scope(op, when)
    bwd = _backward_of_cache(op, when, fwd, arrays, shape, scalars, size_map, B, per_slice)
    targets = [("forward", o, fwd[o], g, B if B > 1 and shape(o) != (1, 1) else 0) for o, g in zip(op.outputs, got)]
    if isinstance(grads, Exception):
        results.append(Result(fname, "backward", flags_on, sizes_named, seed, error=f"{type(grads).__name__}: {grads}"))
    else:
        grads = grads if isinstance(grads, tuple) else (grads,)
        floats = [a for a in op.inputs + op.params if a not in op.integer_inputs and a not in op.constant_inputs]
        for g, v, a in zip(op.grads, grads, floats):
            targets.append(("backward", g, bwd[g], v, arrays[a.name][2]))
        if len(grads) != len(op.grads):
            results.append(
                Result(
                    fname,
                    "backward",
                    flags_on,
                    sizes_named,
                    seed,
                    error=f"{len(grads)} gradients returned, {len(op.grads)} declared",
                )
            )
    wants: dict = {}
    for what, a, expr, value, lead in targets:
        res = Result(fname, f"{what} {a.name}", flags_on, dict(sizes_named, batch=B), seed)

        def want(a=a, expr=expr, lead=lead):
            wants[a.name] = _expected(op, expr, shape(a), arrays, scalars, size_map, B, per_slice, lead)
            return wants[a.name]

        results.append(_judged(res, want, be.unwrap, value))
    if be.name == "torch" and mode == "same":
        results += _torch_wrappers(
            op, mod, be, args, kwargs, ups, wants, (fname, flags_on, dict(sizes_named, batch=B), seed)
        )
    return results


def _backward_of_cache(op, when, fwd, arrays, shape, scalars, size_map, B, per_slice) -> dict:
    """Every backward target in the arrays it reads: the saved arrays that the forward computes
    are evaluated once, from their forward definitions, and bound in `arrays` as values, as the
    printed backward reads its cache. Substituting them instead (`backward_scope`) would let
    SymPy merge powers across the cache, (1/√u)² into 1/u, an identity of √ that the exact
    model's uninterpreted √ does not have, while the printed code multiplies rnorm·rnorm."""
    bound = {}
    try:
        for c, expr in cache_values(op, when).items():
            if c.name in arrays:
                continue
            # per slice (broadcast ops): one value per slice, never their sum; rows folded (row
            # ops): with the leading axis where the definition reads one
            reads = [arrays[a.name][2] for a in arrays_in(expr) if a.name in arrays]
            lead = B if B > 1 and (per_slice or any(reads)) else 0
            values = _expected(op, expr, shape(c), {**arrays, **bound}, scalars, size_map, B, per_slice, lead)
            bound[c.name] = (shape(c), values, lead)
    except ZeroDenominator:  # a cache entry the backward never reads (a size 0): substituted, as before
        return backward_scope(op, when)
    arrays.update(bound)
    return close(op.backward, when=when)


def _options_at(op, when, setting, draw) -> tuple[dict, dict]:
    """The options' keyword arguments and their exact values, drawn."""
    from .translation import option_arguments

    return option_arguments(op, when, setting, lambda o: _option_value(draw, o), reals_too=True)


def _judged(res: Result, want, unwrap, value) -> Result:
    """`res` with the printed `value` compared with the expected array `want()`; a FieldError
    of either side is the result's error (a zero denominator is raised: the point is redrawn)."""
    t0 = time.perf_counter()
    try:
        _compare(res, unwrap(value), want())
    except ZeroDenominator:
        raise
    except FieldError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.seconds = time.perf_counter() - t0
    return res


def _camel(name: str) -> str:
    """The printed class name of an op: gelu_tanh -> GeluTanh."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _torch_wrappers(op, mod, be, args, kwargs, ups, wants, where) -> list[Result]:
    """The printed torch wrappers at the same point: `<Op>Function.forward(ctx, *args,
    *options)` and `.backward(ctx, *upstream)` (one gradient or None per argument, None exactly
    where the op declares none), and the functional `<op>(*args, **options)` through
    `Function.apply`, against the same expected arrays."""
    from .torch_shim import FunctionCtx

    fname, flags_on, sizes, seed = where
    out: list[Result] = []

    def check(what, value, name):
        res = Result(fname, f"{what} {name}", flags_on, sizes, seed)
        try:
            _compare(res, be.unwrap(value), wants[name])
        except FieldError as exc:
            res.error = f"{type(exc).__name__}: {exc}"
        out.append(res)

    fcls = getattr(mod, f"{_camel(op.name)}Function", None)
    options = [kwargs[o.name] for o in op.options]
    try:
        if fcls is None:
            raise FieldError(f"no {_camel(op.name)}Function printed")
        ctx = FunctionCtx()
        ys = fcls.forward(ctx, *args, *options)
        ys = ys if isinstance(ys, tuple) else (ys,)
        for o, y in zip(op.outputs, ys):
            check("Function.forward", y, o.name)
        arguments = list(op.inputs + op.params) + list(op.options)
        due = {grad_of(a).name for a in op.inputs + op.params} & {g.name for g in op.grads}

        def gradients(what, gs):
            """One gradient or None per argument of the declared order, None exactly where due."""
            gs = gs if isinstance(gs, tuple) else (gs,)
            if len(gs) != len(arguments):
                raise FieldError(f"{what}: {len(gs)} gradients returned for {len(arguments)} arguments")
            for a, g in zip(arguments, gs):
                name = grad_of(a).name if isinstance(a, Array) else None
                if name in due:
                    if g is None:
                        raise FieldError(f"{what}: None where {name} is due")
                    check(what, g, name)
                elif g is not None:
                    raise FieldError(f"{what}: a gradient returned for {getattr(a, 'name', a)}, which has none")

        gradients("Function.backward", fcls.backward(ctx, *ups))
        # the functional form, through Function.apply: its outputs, and the backward of the
        # context apply made, read in the declared argument order (an argument passed in the
        # wrong place gets another's gradient, or none)
        fcls.last_ctx = None
        ys = getattr(mod, op.name)(*args, **kwargs)
        ys = ys if isinstance(ys, tuple) else (ys,)
        for o, y in zip(op.outputs, ys):
            check("functional", y, o.name)
        if fcls.last_ctx is None:
            raise FieldError(f"the functional {op.name} did not call {_camel(op.name)}Function.apply")
        gradients("functional backward", fcls.backward(fcls.last_ctx, *ups))
    except ZeroDenominator:
        raise
    except Exception as exc:  # noqa: BLE001 - a wrapper that does not run is a finding
        out.append(Result(fname, "torch wrappers", flags_on, sizes, seed, error=f"{type(exc).__name__}: {exc}"))
    return out


def _broadcast_lead(mode: str, k: int, B: int) -> int:
    """The leading axis of the k-th batched input: B in mode "same"; in "broadcast<c>" the c-th
    input carries B, the next a leading axis of 1, the one after none, and so on in turn (so that
    each gradient's sum back to its input's shape is exercised by some carrier)."""
    if not mode.startswith("broadcast"):
        return B
    c = int(mode[len("broadcast") :] or 0)
    return (B, 1, 0)[(k - c) % 3]


def _expected(op, expr, shp, arrays, scalars, size_map, B, per_slice, lead) -> _np.ndarray:
    """Every entry of `expr` (declared shape shp) at the run's point, stored as the kernel
    stores it (`lead`: with the leading axis). Broadcast ops (attention, rope) per slice, a
    gradient of an unbatched input summed over the slices; row ops over the rows of every slice
    at once (the leading axis folded into the rows, where ColSum and Contract sum over it)."""
    if B > 1 and per_slice:
        slices = []
        for b in range(B):
            values = {
                name: (_as2d(arr[b if n == B else 0] if n else arr, s), s) for name, (s, arr, n) in arrays.items()
            }
            slices.append(_evaluate(expr, shp, values, scalars, size_map))
        if lead == B:
            return _np.stack([_store(w, shp) for w in slices])
        total = slices[0]
        for w in slices[1:]:
            total = total + w  # a broadcast input's gradient: Σ over the slices
        return _store(total, shp)[None] if lead == 1 else _store(total, shp)
    values, sizes = {}, dict(size_map)
    fold = B > 1
    rowsyms = set()
    for name, (s, arr, batched) in arrays.items():
        r, c = s
        if fold and batched:  # "same" leading axes only: a row op's inputs share them
            values[name] = (_np.asarray(arr, dtype=object).reshape(B * r, c), (B * r, c))
            a = next((x for x in op.inputs + op.outputs if x.name == name or grad_of(x).name == name), None)
            if a is not None:
                rowsyms |= sp.sympify(a.shape[0]).free_symbols
        else:
            values[name] = (_as2d(arr, s), s)
    for rs in rowsyms:
        sizes[rs] = sizes[rs] * B
    sc = dict(scalars)
    sc.update(sizes)
    want = _evaluate(expr, shp, values, sc, sizes)
    if lead:
        r, c = shp
        return want.reshape((B,) + _stored((r, c)))
    return _store(want, shp)


def _store(want, shp):
    r, c = shp
    return want.reshape(_stored((r, c)))


# the free indices of an entry; compiled forms per array expression (the data bound per run)
_I, _J = sp.Dummy("i", integer=True), sp.Dummy("j", integer=True)
_COMPILED: dict = {}


def _evaluate(expr, shp, values, scalars, sizes) -> _np.ndarray:
    """The entries (i, j) of array expression `expr` over the shape `shp` (after folding): its
    index form compiled once, then evaluated with this run's data bound."""
    expr = sp.sympify(expr)
    hit = _COMPILED.get(expr)
    if hit is None:
        unmasked, masks = _unmask(expr)
        maxes = {
            "max_" + _label(node.args[0]): node.args[0]
            for node in sp.preorder_traversal(unmasked)
            if isinstance(node, RowMax)
        }
        comp = _Compiler(maxes)
        hit = (comp, comp.compile(entry(unmasked, (_I, _J)), (_I, _J)), masks)
        _COMPILED[expr] = hit
    comp, f, masks = hit
    values = dict(values)
    for name, shape in masks.items():
        rows, cols = (int(sp.sympify(s).xreplace(sizes)) for s in shape)
        arr = _np.empty((rows, cols), dtype=object)
        for i in range(rows):
            for j in range(cols):
                arr[i, j] = _ZERO if j <= i else Exact.infinity(-1)
        values[name] = (arr, (rows, cols))
    comp.rebind(values, scalars, sizes)
    rows, cols = (int(sp.sympify(x).xreplace(sizes)) for x in (shape_of(expr) or shp))
    out = _np.empty((rows, cols), dtype=object)
    env = {}
    for i in range(rows):
        env[_I] = i
        for j in range(cols):
            env[_J] = j
            out[i, j] = f(env)
    return out


def _unmask(expr):
    """CausalMask(X) as X + B, B_ij = 0 (j ≤ i) and −∞ (j > i): the same entries for finite X,
    with no Piecewise in the index form (SymPy's Sum would fold it outwards). Returns the
    expression and the masks' names and shapes."""
    masks: dict = {}

    def bias(node):
        shape = shape_of(node.args[0])
        name = f"causal_bias__{len(masks)}"
        masks[name] = shape
        return node.args[0] + Array(name, shape)

    return expr.replace(lambda e: isinstance(e, CausalMask), bias), masks


# ---------------------------------------------------------------------------------------------
# Steps, tables, attention_tiled.


def judge_step(
    name: str, backend: str = "numpy", seed: int = 0, source: str | None = None, shape=None, t: int | None = None
) -> list[Result]:
    """generated/<backend>/<name>.py's `<name>_step` at a random point (random rows, columns,
    hyperparameters in their domains, t concrete) against `Step.value`."""
    from derivations.optim import STEPS

    step = STEPS[name]
    be = _Backend(backend)
    fname = be.file(name)
    draw = _Draw(seed)
    _Model.reset(seed)
    shape = shape or (draw.rng.randint(5, 9), draw.rng.randint(10, 17))
    t = t or draw.rng.randint(2, 9)
    sz = {"rows": shape[0], "cols": shape[1], "t": t}
    try:
        mod = be.load(name, source)
    except Exception as exc:  # noqa: BLE001
        return [Result(fname, "load", (), sz, seed, error=f"{type(exc).__name__}: {exc}")]
    sizes = {}
    for a in step.inputs + step.outputs:
        rs, cs = a.shape
        sizes[rs], sizes[cs] = shape
    values, args = {}, []
    for a in step.inputs:
        arr = draw.array(shape)
        if a.name in step.check.get("nonnegative", ()):
            for pos in _np.ndindex(*shape):
                arr[pos] = abs(arr[pos])
        values[a.name] = (arr, shape)
        args.append(be.wrap(arr))
    kwargs, scalars = {}, dict(sizes)
    for o in step.options:
        if o.symbol.is_integer:
            kwargs[o.name] = t
            scalars[o.symbol] = t
        else:
            v = _option_value(draw, o)
            kwargs[o.name] = v
            scalars[o.symbol] = v
    out = []
    with be.run():
        try:
            got = getattr(mod, f"{name}_step")(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            return [Result(fname, "step", (), sz, seed, error=f"{type(exc).__name__}: {exc}")]
        got = got if isinstance(got, tuple) else (got,)
        for o, g in zip(step.outputs, got):
            res = Result(fname, f"step {o.name}", (), sz, seed)
            t0 = time.perf_counter()
            try:
                _compare(res, be.unwrap(g), _evaluate(step.value(o), shape, values, scalars, sizes))
            except FieldError as exc:
                res.error = f"{type(exc).__name__}: {exc}"
            res.seconds = time.perf_counter() - t0
            out.append(res)
    if len(got) != len(step.outputs):
        out.append(
            Result(fname, "step", (), sz, seed, error=f"{len(got)} arrays returned, {len(step.outputs)} declared")
        )
    return out


def judge_table(
    table, backend: str = "numpy", seed: int = 0, source: str | None = None, sizes: dict | None = None
) -> list[Result]:
    """A generated table function at random sizes (d even) and a random `base`, entry by entry
    against the TableArray's entry formula."""
    table = registry.table(table) if isinstance(table, str) else table
    be = _Backend(backend)
    fname = be.file(table.file)
    draw = _Draw(seed)
    _Model.reset(seed)
    if sizes is None:
        sizes = {"T": draw.rng.randint(5, 17), "d": 2 * draw.rng.randint(3, 8)}
    try:
        mod = be.load(table.file, source)
    except Exception as exc:  # noqa: BLE001
        return [Result(fname, "load", (), sizes, seed, error=f"{type(exc).__name__}: {exc}")]
    options, scalars = {}, {}
    for o in table.options:
        if o.symbol is not None:
            v = Exact(_RAT, Fraction(draw.rng.randint(2, 999), draw.rng.randint(1, 7)))
            options[o.name] = v
            scalars[o.symbol] = v
    for s in table.sizes:
        scalars[s] = sizes[s.name]
    out = []
    with be.run():
        try:
            got = getattr(mod, table.name)(*[sizes[s.name] for s in table.sizes], **options)
        except Exception as exc:  # noqa: BLE001
            return [Result(fname, table.name, (), sizes, seed, error=f"{type(exc).__name__}: {exc}")]
        got = got if isinstance(got, tuple) else (got,)
        for a, g in zip(table.arrays, got):
            res = Result(fname, f"table {a.name}", (), dict(sizes), seed)
            t0 = time.perf_counter()
            try:
                comp = _Compiler()
                f = comp.compile(a.entry, tuple(a.index))
                subs = {s: sizes[s.name] for s in table.sizes}
                comp.rebind({}, scalars, subs)
                rows, cols = (int(sp.sympify(x).xreplace(subs)) for x in a.shape)
                want = _np.empty((rows, cols), dtype=object)
                for i in range(rows):
                    for j in range(cols):
                        want[i, j] = f({a.index[0]: i, a.index[1]: j})
                _compare(res, be.unwrap(g), want)
            except FieldError as exc:
                res.error = f"{type(exc).__name__}: {exc}"
            res.seconds = time.perf_counter() - t0
            out.append(res)
    return out


def judge_tiled(
    backend: str = "numpy",
    seed: int = 0,
    source: str | None = None,
    sizes: dict | None = None,
    block: int | None = None,
    batch: int = 2,
    helpers: dict | None = None,
) -> list[Result]:
    """generated/<backend>/attention_tiled.py (online softmax over key blocks) with a block that
    does not divide n, causal off and on, m ≠ n, a leading batch axis, against attention_lse's
    index form: o, and dq, dk, dv from the tiled forward's own cache."""
    op = registry.op("attention_lse")
    be = _Backend(backend, helpers)
    fname = be.file("attention_tiled")
    draw = _Draw(seed)
    syms = {s.name: s for s in setting_for(op, {}).sizes}
    if sizes is None:
        sizes = dict(zip(("m", "n", "d_k", "d_v"), draw.rng.sample(range(5, 10), 4)))
    n = sizes["n"]
    if block is None:
        block = next(b for b in range(max(2, n // 3), n) if n % b)
    try:
        mod = be.load("attention_tiled", source)
    except Exception as exc:  # noqa: BLE001
        return [Result(fname, "load", seed=seed, error=f"{type(exc).__name__}: {exc}")]
    out = []
    points = [("same", False), ("same", True), ("broadcast0", False), ("broadcast1", True), ("broadcast2", False)]
    for k, (mode, causal) in enumerate(points):
        when = frozenset({"causal"}) if causal else frozenset()
        for attempt in range(5):
            try:
                with be.run():
                    out += _tiled_point(
                        op,
                        mod,
                        be,
                        {syms[k]: v for k, v in sizes.items()},
                        when,
                        seed + 7919 * attempt + k,
                        block,
                        batch,
                        mode,
                    )
                break
            except ZeroDenominator:
                continue
        if stopped(out):
            return out
    return out


def _tiled_point(op, mod, be, size_map, when, seed, block, batch, mode="same"):
    _Model.reset(seed)
    draw = _Draw(seed)
    fname = be.file("attention_tiled")
    causal = "causal" in when
    sizes_named = dict({s.name: v for s, v in size_map.items()}, block=block, batch=batch)
    if mode != "same":
        sizes_named["axes"] = mode
    flags_on = tuple(sorted(when))
    arrays, args = {}, []
    lead = (batch,) if batch > 1 else ()

    def shape(a):
        return tuple(int(sp.sympify(s).xreplace(size_map)) for s in a.shape)

    for k, a in enumerate(op.inputs):
        n = _broadcast_lead(mode, k, batch) if lead else 0
        arr = draw.array(((n,) if n else ()) + shape(a))
        arrays[a.name] = (shape(a), arr, n)
        args.append(be.wrap(arr))
    try:
        o, cache = mod.attention_tiled_forward(*args, causal=causal, block=block)
        do = draw.array(lead + shape(op.outputs[0]))
        arrays[grad_of(op.outputs[0]).name] = (shape(op.outputs[0]), do, batch if lead else 0)
        grads = mod.attention_tiled_backward(be.wrap(do), cache, block=block)
    except ZeroDenominator:
        raise
    except Exception as exc:  # noqa: BLE001
        return [Result(fname, "run", flags_on, sizes_named, seed, error=f"{type(exc).__name__}: {exc}")]
    fwd, bwd = forward_scope(op, when), backward_scope(op, when)
    pairs = [("forward o", op.outputs[0], fwd[op.outputs[0]], o)]
    pairs += [(f"backward {g.name}", g, bwd[g], v) for g, v in zip(op.grads, grads)]
    leads = [batch if lead else 0] + [arrays[a.name][2] for a in op.inputs]
    out = []
    for (what, a, expr, value), n in zip(pairs, leads):
        res = Result(fname, what, flags_on, sizes_named, seed)
        out.append(
            _judged(
                res,
                lambda a=a, expr=expr, n=n: _expected(
                    op, expr, shape(a), arrays, dict(size_map), size_map, batch, True, n
                ),
                be.unwrap,
                value,
            )
        )
    return out


def _op_value(op, expr, values: dict, when=frozenset()) -> _np.ndarray:
    """Array expression `expr` of `op`'s scopes at 2-D exact arrays `values` (name -> array;
    a row vector stored as (c,)): the sizes are read off the arrays' shapes."""
    sizes, named = {}, {}
    for a in op.inputs + op.params + op.outputs + [grad_of(o) for o in op.outputs]:
        if a.name not in values:
            continue
        arr = _np.asarray(values[a.name], dtype=object)
        r, c = a.shape
        shp = (1, arr.shape[0]) if arr.ndim == 1 and r == 1 else arr.shape
        for dim, v in zip((r, c), shp):
            if isinstance(dim, sp.Symbol):
                sizes[dim] = v
        named[a.name] = (arr.reshape(shp), tuple(shp))
    shp = tuple(int(sp.sympify(x).xreplace(sizes)) for x in shape_of(expr))
    return _evaluate(expr, shp, named, dict(sizes), sizes)


def judge_mha(
    backend: str = "numpy",
    seed: int = 0,
    source: str | None = None,
    T: int = 6,
    n_head: int = 3,
    d: int = 5,
    batch: int = 2,
    helpers: dict | None = None,
) -> list[Result]:
    """The multi-head attention template (generated/<backend>/mha.py) at a random point, causal
    off and on, against the claims' index forms of linear and attention composed by the index
    map of `mha.concat` (head η of Q, K, V is the fused projection's columns η·d + c, C + η·d + c,
    2C + η·d + c; the merge puts head η's column c at η·d + c), per slice of the leading axis,
    the parameters' gradients summed over the slices."""
    be = _Backend(backend, helpers)
    fname = be.file("mha")
    C = n_head * d
    sizes = {"T": T, "n_head": n_head, "d": d, "C": C, "batch": batch}
    try:
        mod = be.load("mha", source)
    except Exception as exc:  # noqa: BLE001
        return [Result(fname, "load", seed=seed, error=f"{type(exc).__name__}: {exc}")]
    lin, att = registry.op("linear"), registry.op("attention")
    out: list[Result] = []
    for causal in (False, True):
        when = frozenset({"causal"}) if causal else frozenset()
        flags = tuple(sorted(when))
        for attempt in range(5):
            point = seed * 10 + causal + 7919 * attempt
            _Model.reset(point)
            draw = _Draw(point)
            lead = (batch,) if batch > 1 else ()
            x, dout = draw.array(lead + (T, C)), draw.array(lead + (T, C))
            w_qkv, b_qkv = draw.array((3 * C, C)), draw.array((3 * C,))
            w_o, b_o = draw.array((C, C)), draw.array((C,))
            try:
                with be.run():
                    got, cache = mod.mha_forward(
                        *(be.wrap(a) for a in (x, w_qkv, b_qkv, w_o, b_o)), n_head=n_head, causal=causal
                    )
                    grads = mod.mha_backward(be.wrap(dout), cache)
                    got = be.unwrap(got)
                    grads = [be.unwrap(g) for g in grads]
                want = _mha_expected(lin, att, when, x, dout, w_qkv, b_qkv, w_o, b_o, n_head, d, batch)
            except ZeroDenominator:
                continue
            except Exception as exc:  # noqa: BLE001
                out.append(Result(fname, "run", flags, sizes, point, error=f"{type(exc).__name__}: {exc}"))
                break
            for what, g, w in zip(
                ("forward out", "backward dx", "backward dw_qkv", "backward db_qkv", "backward dw_o", "backward db_o"),
                [got] + list(grads),
                want,
            ):
                res = Result(fname, what, flags, sizes, point)
                _compare(res, g, w)
                out.append(res)
            break
        if stopped(out):
            return out
    return out


def _mha_expected(lin, att, when, x, dout, w_qkv, b_qkv, w_o, b_o, n_head, d, batch):
    fl, bl = forward_scope(lin), backward_scope(lin)
    fa, ba = forward_scope(att, when), backward_scope(att, when)
    (y_lin,), (o_att,) = lin.outputs, att.outputs
    dx_l, dw_l, db_l = lin.grads
    C = n_head * d
    slices = []
    for b in range(batch if batch > 1 else 1):
        xb, db = (x[b], dout[b]) if batch > 1 else (x, dout)
        T = xb.shape[0]
        qkv = _op_value(lin, fl[y_lin], {"x": xb, "weight": w_qkv, "bias": b_qkv})
        Y = _np.empty((T, C), dtype=object)
        heads = []
        for h in range(n_head):
            q, k, v = (qkv[:, part * C + h * d : part * C + (h + 1) * d] for part in range(3))
            heads.append((q, k, v))
            Y[:, h * d : (h + 1) * d] = _op_value(att, fa[o_att], {"q": q, "k": k, "v": v})
        out = _op_value(lin, fl[y_lin], {"x": Y, "weight": w_o, "bias": b_o})
        up = {"x": Y, "weight": w_o, "dy": db}
        dY, dw_o, db_o = (_op_value(lin, bl[g], up) for g in (dx_l, dw_l, db_l))
        dqkv = _np.empty((T, 3 * C), dtype=object)
        for h, (q, k, v) in enumerate(heads):
            grads = [
                _op_value(att, ba[g], {"q": q, "k": k, "v": v, "do": dY[:, h * d : (h + 1) * d]}) for g in att.grads
            ]
            for part, g in enumerate(grads):
                dqkv[:, part * C + h * d : part * C + (h + 1) * d] = g
        up = {"x": xb, "weight": w_qkv, "dy": dqkv}
        dx, dw_qkv, db_qkv = (_op_value(lin, bl[g], up) for g in (dx_l, dw_l, db_l))
        slices.append((out, dx, dw_qkv, db_qkv.reshape(-1), dw_o, db_o.reshape(-1)))
    if batch <= 1:
        return slices[0]
    stacked = [_np.stack([s[k] for s in slices]) for k in (0, 1)]
    summed = []
    for k in (2, 3, 4, 5):
        total = slices[0][k]
        for s in slices[1:]:
            total = total + s[k]
        summed.append(total)
    return stacked + summed


def judge_all(backend: str | None = None, seed: int = 26) -> list[Result]:
    """Every op, step and table and attention_tiled, in both backends (or `backend`)."""
    from derivations.optim import STEPS

    backends = ("numpy", "torch") if backend is None else (backend,)
    out: list[Result] = []
    for be in backends:
        if be == "torch" and not _torch_available():
            out.append(
                Result(
                    "generated/torch", "load", seed=seed, error="not judged: no torch shim (qed/tools/torch_shim.py)"
                )
            )
            continue
        for k, op in enumerate(registry.ops()):
            out.extend(judge_op(op, be, seed + k))
        out.extend(judge_tiled(be, seed))
        out.extend(judge_mha(be, seed))
        for k, name in enumerate(sorted(STEPS)):
            out.extend(judge_step(name, be, seed + k))
        for k, t in enumerate(registry.tables()):
            out.extend(judge_table(t, be, seed + k))
    return out


def main(argv=None) -> int:  # pragma: no cover - a convenience: python -m qed.tools.field_judge
    import sys

    args = sys.argv[1:] if argv is None else argv
    backend = args[0] if args else None
    t0 = time.perf_counter()
    bad = 0
    results = judge_all(backend)
    for r in results:
        if not r.ok or "-v" in args:
            print(r)
        bad += not r.ok
    print(
        f"{'FAILED' if bad else 'ok'}: {len(results) - bad}/{len(results)} arrays equal exactly "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

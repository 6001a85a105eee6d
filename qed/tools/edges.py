"""Numerical edges of the generated kernels, checked against the specification in exact arithmetic.

Every op of the registry (`derivations.registry.ops()`) and every optimiser step
(`registry.steps()`) is run through its generated NumPy and PyTorch kernels at large magnitudes
(inputs scaled to ±1e4, 1e6, 1e20, 1e30 in float32 and float64, and 1e100, 1e300 in float64),
and every output and gradient is compared with the value that the op's own specification
(`Op.spec`, `Step.spec`) gives on the very same inputs, evaluated in high-precision arithmetic
(mpmath, 40 digits and more, exponents unbounded). Nothing here is written per op: the
arguments, sizes, options, flags and the exact values are all read off the declarations, so a
new op in the registry is covered as it is added.

The points
----------
At the op's small check sizes (`Op.check`, else `derivations.proof.obligations.setting_for`'s
defaults; a step: 2 × 3), every argument at its full declared rank (no batch axes). Integer
inputs (ids, targets, masks) are fixed valid ids (hi, hi − 1, ..., lo, ...: a 0/1 mask is never
all 0); scalar options keep their defaults; every combination of the boolean flags. Scenarios:
every float argument scaled by the magnitude M ("all"), and each one alone (the others drawn
from U(−1, 1)); constant inputs (RoPE's tables) and a step's state are never scaled. Patterns
of the scaled arguments: U(−M, M) ("random"), all M ("equal"), U(−1, 1) with one entry M
("spike": the first row's last entry), ±M alternating. Upstream gradients U(−1, 1). A step runs
at t = 1 from a zero state, and at t = 2 from the state that one exact step from zero leaves
(rounded to the dtype; skipped where that is out of its range). Every float is a float32 number
where M allows, so that float32 and float64 share the point and its exact values; fixed seeds.

How the exact values are computed
---------------------------------
The specification is expanded into index form by `derivations.language.arrays.entry` (the expansion
that the proofs normalise), σ and Φ written as the documents' 1/(1 + e^{−u}) and
(1 + erf(u/√2))/2 (`document_form`), sizes, integer inputs and options substituted. The
expansion is compiled once into a *tape* (`Tape`): a straight-line program over the scalar
entries of the arguments, common subexpressions shared, every sum expanded and every index
condition (causal mask, Kronecker delta, Take/Gather) decided at compile time. The tape runs
in mpmath at the requested precision: sums exactly (`mpmath.fsum`), everything else correctly
rounded to that precision, exponents unbounded (e^{1e300} is a number). The exact gradients are
the derivative of the specification itself, L = Σ_o Σ_ij dO_ij O_ij (obligations.py's
`loss_of`), by reverse-mode differentiation of the same tape (d exp u = exp u du, d erf u =
2/√π e^{−u²} du, ...; at a tie of a max or a min, the adjoint shared equally among the tied
arguments, the midpoint of the subdifferential, which is the derivation's (1 + sign u)/2 at
u = 0): `sp.diff` of the spec's scalar function, evaluated at the point
(tests/test_numerical_edges.py checks the tape against derivations/proof/numeric.py's evaluation of
the index forms and of the generated obligations' `sp.diff`). A step's specification is
elementwise and runs the same way.

A value of the exact evaluation that decides something (an element out of the dtype's range is
not required; an element the kernel gets wrong is reported) is first confirmed: computed at 70
and 100 digits, and where those two disagree, at 50 + the inputs' decimal exponent range and 30
digits more; an element whose value does not settle is not reported, so that a cancellation in
the exact evaluation itself (log Σ e^{x} − x_t at x ~ 1e300) never counts against a kernel.

What is required of a kernel
----------------------------
Wherever the exact value of an output or gradient lies within the dtype's range:

* a finite value;
* close to it: |got − exact| ≤ rtol·|exact| + 32·noise + 1024·tiny, rtol 1e-3 (float32),
  1e-6 (float64). `noise` (`_Case.spread`) is the point's own rounding noise: the largest
  deviation over three evaluations of the spec's program, forward and derivative, in simulated
  dtype arithmetic (every computed value and every contribution to a derivative multiplied by
  1 ± u, u the unit roundoff, signs hashed from the value so that equal values round alike).
  It is what any evaluation of the formula in the dtype goes through: the conditioning of the
  point (scores of 1e8 in float32, rounded by 8) and the cancellations on the way (LayerNorm's
  backward at a dominant entry, softmax's backward at a saturated row), so the bound holds for
  a kernel that is as accurate as the formula allows and is tight where the point is well
  conditioned. `tiny`, the smallest normal number, allows for subnormal results. The noise is
  only computed for elements outside rtol·|exact|; `MARGINS` records error/allowed for them;
* no floating-point exception and no warning (NumPy: `np.errstate(over, invalid, divide =
  "raise")`, and warnings as errors on both backends) in a phase (forward, backward, step)
  whose exact values are all within range. Underflow is no error (e^{−2e4} correctly rounds to
  0, and no formula avoids producing it), and neither is an overflow in a phase one of whose
  values is itself out of range (the correctly rounded result is ±inf).

Entry points: `units()` (every op and step), `magnitudes(dtype)`, `cases()`,
`check(unit, backend, dtype, magnitude) -> [Finding]`, `report(findings)`;
`python -m qed.tools.edges [unit ...]` prints every finding.
"""

from __future__ import annotations

import importlib
import itertools
import math
import warnings
import zlib
from dataclasses import dataclass
from functools import cache

import mpmath
import numpy as np
import sympy as sp

from derivations import registry
from derivations.language.arrays import Array, document_form, entry
from derivations.language.functions import by_sympy, mp_slope, mp_value
from derivations.language.ops import Op
from derivations.proof.obligations import input_of, setting_for, spec_scope

BACKENDS = ("numpy", "torch")
DTYPES = ("float32", "float64")
# float32 inputs up to ~1e30 (its range ends at 3.4e38); float64 beyond, to 1e300; and small
# ones, down to the subnormals (float32's normal range starts at 1.2e-38, float64's at 2.2e-308):
# where a formula cancels (e^u − 1, log(1 + u), x − mean) the small inputs are where it shows
MAGNITUDES = {
    "float32": (1e-40, 1e-30, 1e-8, 1e4, 1e6, 1e20, 1e30),
    "float64": (1e-310, 1e-200, 1e-8, 1e4, 1e6, 1e20, 1e30, 1e100, 1e300),
}
PATTERNS = ("random", "equal", "spike", "alternating")
RTOL = {"float32": 1e-3, "float64": 1e-6}
SPREAD_FACTOR = 32  # allowed multiple of the point's own rounding noise (`_Case.spread`)
NOISE_RUNS = 3  # simulated floating-point evaluations that measure it
BASE_DPS = 40  # digits of the first exact evaluation
CONFIRM_DIGITS = 30  # extra digits between the two confirming evaluations
SETTLED = mpmath.mpf("1e-20")  # relative agreement of the confirming evaluations


def magnitudes(dtype: str) -> tuple:
    return MAGNITUDES[dtype]


# =============================================================================================
# The tape: the specification's index form as a straight-line program over scalar entries.

_IN, _CONST, _ADD, _MUL, _POWC, _POW, _FN, _STEP, _MAX, _MIN = range(10)
# a function of one argument is a row of the one table (derivations/language/functions.py): its
# value and slope there (`mp_value`, `mp_slope`); the order functions are not rounded
_UNROUNDED = frozenset({"abs", "sign"})


class TapeError(ValueError):
    """A node of the specification that the tape cannot compile."""


class Tape:
    """Straight-line program: op k computes value k from earlier values. Identical operations on
    identical operands are one op (common subexpressions shared)."""

    def __init__(self, integers: dict):
        self.ops: list = []  # (code, operand slots, extra)
        self._memo: dict = {}
        self.inputs: dict = {}  # (array name, index tuple) -> slot
        self.integers = integers  # integer array name -> {index tuple: int}

    # ------------------------------------------------------------------ building
    def _add_op(self, code, args=(), extra=None) -> int:
        key = (code, args, extra)
        slot = self._memo.get(key)
        if slot is None:
            slot = len(self.ops)
            self.ops.append(key)
            self._memo[key] = slot
        return slot

    def const(self, value) -> int:
        return self._add_op(_CONST, (), sp.sympify(value))

    def is_const(self, slot) -> bool:
        return self.ops[slot][0] == _CONST

    def const_value(self, slot):
        return self.ops[slot][2]

    def input(self, name: str, idx: tuple) -> int:
        key = (name, idx)
        if key not in self.inputs:
            self.inputs[key] = self._add_op(_IN, (), key)
        return self.inputs[key]

    # ------------------------------------------------------------------ integers at compile time
    def integer(self, e, b: dict) -> int:
        """An index expression's value: sizes are substituted already, index symbols are bound
        in `b`, integer arrays (ids, targets) are fixed."""
        if isinstance(e, int):
            return e
        if e.is_Integer:
            return int(e)
        if isinstance(e, sp.Symbol):
            if e in b:
                return b[e]
            raise TapeError(f"unbound index {e}")
        if isinstance(e, sp.Indexed):
            name = str(e.base.label)
            if name not in self.integers:
                raise TapeError(f"index through the float array {name}")
            return self.integers[name][tuple(self.integer(i, b) for i in e.indices)]
        if isinstance(e, sp.Add):
            return sum(self.integer(a, b) for a in e.args)
        if isinstance(e, sp.Mul):
            out = 1
            for a in e.args:
                out *= self.integer(a, b)
            return out
        value = sp.sympify(e).xreplace({s: sp.Integer(v) for s, v in b.items()})
        if value.is_Integer:
            return int(value)
        raise TapeError(f"cannot decide the index {e}")

    def truth(self, cond, b: dict) -> bool:
        if cond is sp.true or cond == True:  # noqa: E712 - SymPy booleans
            return True
        if cond is sp.false or cond == False:  # noqa: E712
            return False
        if isinstance(cond, sp.core.relational.Relational):
            x, y = self.integer(cond.lhs, b), self.integer(cond.rhs, b)
            return {"<=": x <= y, "<": x < y, ">=": x >= y, ">": x > y, "==": x == y, "!=": x != y}[cond.rel_op]
        if isinstance(cond, sp.And):
            return all(self.truth(c, b) for c in cond.args)
        if isinstance(cond, sp.Or):
            return any(self.truth(c, b) for c in cond.args)
        if isinstance(cond, sp.Not):
            return not self.truth(cond.args[0], b)
        raise TapeError(f"cannot decide the condition {cond}")

    # ------------------------------------------------------------------ compiling
    def compile(self, e, b: dict | None = None) -> int:
        b = b or {}
        if isinstance(e, (int, float)):
            return self.const(e)
        if e.is_Number or isinstance(e, sp.NumberSymbol) or e in (sp.oo, -sp.oo):
            return self.const(e)
        if isinstance(e, sp.Symbol):
            if e in b:
                return self.const(sp.Integer(b[e]))
            raise TapeError(f"free symbol {e} (a size or an option without a value)")
        if isinstance(e, sp.Indexed):
            name = str(e.base.label)
            idx = tuple(self.integer(i, b) for i in e.indices)
            if name in self.integers:
                return self.const(sp.Integer(self.integers[name][idx]))
            return self.input(name, idx)
        if isinstance(e, sp.Sum):
            terms = []
            self._sum_terms(e.function, list(e.limits), b, terms)
            return self._nary(_ADD, terms)
        if isinstance(e, sp.Piecewise):
            for value, cond in e.args:
                if self.truth(cond, b):
                    return self.compile(value, b)
            raise TapeError(f"no branch of {e} holds")
        if isinstance(e, sp.KroneckerDelta):
            x, y = (self.integer(a, b) for a in e.args)
            return self.const(1 if x == y else 0)
        args = [self.compile(a, b) for a in e.args]
        if all(self.is_const(a) for a in args):  # fold: the sympy value
            return self.const(e.func(*[self.const_value(a) for a in args]))
        if isinstance(e, sp.Add):
            return self._nary(_ADD, args)
        if isinstance(e, sp.Mul):
            return self._nary(_MUL, args)
        if isinstance(e, sp.Pow):
            base, power = args
            if self.is_const(power):
                return self._add_op(_POWC, (base,), self.const_value(power))
            return self._add_op(_POW, (base, power))
        if isinstance(e, (sp.Max, sp.Min)):
            return self._add_op(_MAX if isinstance(e, sp.Max) else _MIN, tuple(args))
        if isinstance(e, sp.Heaviside):
            return self._add_op(_STEP, (args[0],), self.const_value(args[1]) if len(args) > 1 else sp.S.Half)
        row = by_sympy(e.func)
        if row is None or row.arity != 1:
            raise TapeError(f"no rule for {type(e).__name__} ({e})")
        return self._add_op(_FN, (args[0],), row.name)

    def _sum_terms(self, body, limits, b, out):
        if not limits:
            out.append(self.compile(body, b))
            return
        var, lo, hi = limits[-1]  # SymPy lists the innermost limit first
        for k in range(self.integer(lo, b), self.integer(hi, b) + 1):
            self._sum_terms(body, limits[:-1], {**b, var: k}, out)

    def _nary(self, code, args) -> int:
        consts = [a for a in args if self.is_const(a)]
        rest = [a for a in args if not self.is_const(a)]
        if consts:
            values = [self.const_value(a) for a in consts]
            c = sp.Add(*values) if code == _ADD else sp.Mul(*values)
            if c.is_infinite and code == _ADD:
                return self.const(c)  # a finite rest plus −∞ (a masked score)
            if c == 0 and code == _MUL:
                return self.const(0)
            if not (c == 0 and code == _ADD) and not (c == 1 and code == _MUL):
                rest.append(self.const(c))
        if not rest:
            return self.const(0 if code == _ADD else 1)
        if len(rest) == 1:
            return rest[0]
        return self._add_op(code, tuple(sorted(rest)))

    # ------------------------------------------------------------------ running
    def _consts(self, dps: int) -> dict:
        cache = self.__dict__.setdefault("_const_cache", {})
        if dps not in cache:
            out = {}
            for k, (code, _, extra) in enumerate(self.ops):
                if code == _CONST:
                    out[k] = _to_mpf(extra, dps)
                elif code in (_POWC, _STEP):
                    out[k] = _to_mpf(extra, dps)
            cache[dps] = out
        return cache[dps]

    def forward(self, values_in: dict, dps: int, noise=None) -> list:
        """Every slot's value; `values_in` maps (name, index) -> mpf. `noise` (run, relative
        size): every computed value is multiplied by 1 ± size, as one rounding of a
        floating-point evaluation of the same program would do (without its exponent limits).
        The sign is a hash of the run, the operation and the exact value, so that equal values
        computed alike are rounded alike (as in floating point: a row of equal scores stays
        equal), and differs from run to run."""
        with mpmath.workdps(dps):
            consts = self._consts(dps)
            v: list = [None] * len(self.ops)
            if noise is not None:
                run, size = noise
                up, down = 1 + mpmath.mpf(size), 1 - mpmath.mpf(size)
            for k, (code, a, extra) in enumerate(self.ops):
                if code == _IN:
                    v[k] = values_in[extra]  # the kernel's inputs are exact
                    continue
                elif code == _CONST:
                    v[k] = consts[k]
                    continue
                elif code == _ADD:
                    x = mpmath.fsum([v[i] for i in a])
                elif code == _MUL:
                    x = v[a[0]]
                    for i in a[1:]:
                        x = x * v[i]
                elif code == _POWC:
                    x = _power(v[a[0]], consts[k])
                elif code == _POW:
                    x = mpmath.power(v[a[0]], v[a[1]])
                elif code == _FN:
                    x = mp_value(extra, v[a[0]])
                elif code == _STEP:
                    y = v[a[0]]
                    x = mpmath.mpf(1) if y > 0 else (mpmath.mpf(0) if y < 0 else consts[k])
                elif code == _MAX:
                    x = max(v[i] for i in a)
                elif code == _MIN:
                    x = min(v[i] for i in a)
                else:  # pragma: no cover
                    raise TapeError(f"op code {code}")
                if noise is not None and code not in (_STEP, _MAX, _MIN) and not (code == _FN and extra in _UNROUNDED):
                    x = x * (up if hash((run, code, x)) & 1 else down)
                v[k] = x
            return v

    def backward(self, v: list, seeds: dict, dps: int, noise=None) -> dict:
        """Reverse-mode derivative of Σ seeds[slot]·value[slot]: {input key: mpf}. `noise` as
        in `forward`: every contribution to an adjoint perturbed by 1 ± size."""
        with mpmath.workdps(dps):
            consts = self._consts(dps)
            adj: list = [0] * len(self.ops)
            if noise is not None:
                run, size = noise
                up, down = 1 + mpmath.mpf(size), 1 - mpmath.mpf(size)

                def acc(i, c):
                    adj[i] = adj[i] + c * (up if hash((run, -1, c)) & 1 else down)
            else:

                def acc(i, c):
                    adj[i] = adj[i] + c

            for s, w in seeds.items():
                adj[s] = adj[s] + w
            for k in range(len(self.ops) - 1, -1, -1):
                g = adj[k]
                if not g:
                    continue
                code, a, extra = self.ops[k]
                if code in (_IN, _CONST, _STEP):
                    continue
                if code == _ADD:
                    for i in a:
                        acc(i, g)
                elif code == _MUL:
                    vals = [v[i] for i in a]
                    prefix = [mpmath.mpf(1)]
                    for x in vals[:-1]:
                        prefix.append(prefix[-1] * x)
                    suffix = mpmath.mpf(1)
                    for n in range(len(a) - 1, -1, -1):
                        acc(a[n], g * prefix[n] * suffix)
                        suffix = suffix * vals[n]
                elif code == _POWC:
                    c = consts[k]
                    acc(a[0], g * c * _power(v[a[0]], c - 1))
                elif code == _POW:
                    x, y = v[a[0]], v[a[1]]
                    acc(a[0], g * y * mpmath.power(x, y - 1))
                    acc(a[1], g * v[k] * mpmath.log(x))
                elif code == _FN:
                    acc(a[0], g * mp_slope(extra, v[a[0]], v[k]))
                elif code in (_MAX, _MIN):
                    # the adjoint to the largest (smallest) argument; at a tie, shared equally:
                    # the midpoint of the subdifferential, the derivation's (1 + sign u)/2 at u = 0
                    # (max(x, z) at x = z: ½ to each, not 1 to the first)
                    best = (max if code == _MAX else min)(v[i] for i in a)
                    tied = [i for i in a if v[i] == best]
                    for i in tied:
                        acc(i, g / len(tied))
            return {key: adj[s] for key, s in self.inputs.items()}


def _power(x, c):
    if c == mpmath.mpf(0.5):
        return mpmath.sqrt(x)
    if c == -1:
        return 1 / x
    if c == int(c):
        return x ** int(c)
    return mpmath.power(x, c)


def _to_mpf(value, dps):
    value = sp.sympify(value)
    if value is sp.oo:
        return mpmath.inf
    if value is -sp.oo or value == -sp.oo:
        return -mpmath.inf
    if value.is_Rational:
        with mpmath.workdps(dps + 10):
            return mpmath.mpf(int(value.p)) / int(value.q)
    return mpmath.mpf(str(sp.N(value, dps + 10)))


# =============================================================================================
# Units: an op or a step, with everything the harness needs read off its declaration.


@dataclass
class ArgSpec:
    """One positional argument of a kernel."""

    name: str
    array: Array
    role: str  # "input", "param", "state" (a step's m, v)
    integer: bool = False
    constant: bool = False
    shape: tuple = ()  # storage shape at the unit's concrete sizes

    @property
    def scalable(self) -> bool:
        return not self.integer and not self.constant and self.role != "state"


@dataclass
class Unit:
    name: str
    kind: str  # "op" or "step"
    obj: object  # the Op or the Step
    args: list  # ArgSpec, in call order
    outputs: list  # (name, Array, storage shape)
    grads: list  # (grad name, input ArgSpec): op only
    sizes: dict  # size Symbol -> int
    integers: dict  # integer input name -> np array (fixed)
    option_sets: list  # [(label, kwargs for the kernel, flags frozenset)]
    scenarios: list  # [(label, names of the arguments scaled)]

    @property
    def float_args(self):
        return [a for a in self.args if not a.integer]


def storage_shape(arr: Array, integer: bool, sizes: dict) -> tuple:
    """How a kernel stores a declared (rows, cols) array: ids (T, 1) as (T,), a row vector
    (1, n) as (n,), anything else as (rows, cols); no leading batch axes (the full declared
    rank, which the kernels accept before and after they accept lower ranks)."""
    rows, cols = (int(sp.sympify(d).xreplace(sizes)) for d in arr.shape)
    if integer:
        return (rows,)
    if sp.sympify(arr.shape[0]) == 1:
        return (cols,)
    return (rows, cols)


def entry_index(arr: Array, pos: tuple) -> tuple:
    """The index tuple of the Indexed entry that storage position `pos` holds (entry() drops
    size-1 axes: gamma[j], not gamma[0, j])."""
    rows, cols = arr.shape
    if len(pos) == 1:
        i, j = (0, pos[0]) if sp.sympify(rows) == 1 else (pos[0], 0)
    else:
        i, j = pos
    e = entry(arr, (sp.Integer(i), sp.Integer(j)))
    return tuple(int(x) for x in e.indices)


def _int_values(arr: Array, lo: int, hi: int, shape: tuple) -> np.ndarray:
    """Valid ids, fixed: hi, hi−1, ..., lo, hi, ... (a 0/1 mask is 1, 0, 1, ...: never all 0)."""
    span = hi - lo + 1
    return np.array([hi - (t % span) for t in range(int(np.prod(shape)))], dtype=np.int64).reshape(shape)


def _op_unit(op: Op) -> Unit:
    setting = setting_for(op, {})
    sizes = dict(setting.sizes)
    args = []
    for a in op.inputs:
        integer = a in op.integer_inputs
        args.append(ArgSpec(a.name, a, "input", integer, a in op.constant_inputs, storage_shape(a, integer, sizes)))
    for a in op.params:
        args.append(ArgSpec(a.name, a, "param", False, False, storage_shape(a, False, sizes)))
    integers = {}
    for a in args:
        if a.integer:
            lo, hi = (int(sp.sympify(b).xreplace(sizes)) for b in setting.integer_arrays.get(a.name, (0, 1)))
            integers[a.name] = _int_values(a.array, lo, hi, a.shape)  # ids: 0 … V − 1 at these sizes
    outputs = [(o.name, o, storage_shape(o, False, sizes)) for o in op.outputs]
    by_name = {a.name: a for a in args}
    grads = [(g.name, by_name[input_of(op, g).name]) for g in op.grads]
    flags = sorted({a.when for a in op.forward + op.backward + op.spec if a.when is not None})
    bool_opts = [o for o in op.options if isinstance(o.default, bool)]
    option_sets = []
    for values in itertools.product([False, True], repeat=len(bool_opts)):
        kw = {o.name: v for o, v in zip(bool_opts, values)}
        on = frozenset(o.name for o, v in zip(bool_opts, values) if v and o.name in flags)
        label = ",".join(f"{k}={v}" for k, v in kw.items())
        option_sets.append((label, kw, on))
    scalable = [a.name for a in args if a.scalable]
    scenarios = [("all", tuple(scalable))]
    if len(scalable) > 1:
        scenarios += [(n, (n,)) for n in scalable]
    return Unit(op.name, "op", op, args, outputs, grads, sizes, integers, option_sets, scenarios)


STEP_SHAPE = (2, 3)


def _step_unit(st) -> Unit:
    sizes = {
        s: n
        for s, n in zip(
            sorted({d for a in st.inputs for d in a.shape if isinstance(d, sp.Symbol)}, key=lambda s: s.name),
            STEP_SHAPE,
        )
    }
    state = set(getattr(st, "state", []) or [])
    args = [
        ArgSpec(a.name, a, "state" if a in state else "input", False, False, storage_shape(a, False, sizes))
        for a in st.inputs
    ]
    outputs = [(o.name, o, storage_shape(o, False, sizes)) for o in st.outputs]
    scalable = [a.name for a in args if a.scalable]
    scenarios = [("all", tuple(scalable))] + ([(n, (n,)) for n in scalable] if len(scalable) > 1 else [])
    has_t = any(o.name == "t" for o in st.options)
    if has_t and state:
        option_sets = [
            ("t=1, fresh state", {"t": 1}, frozenset()),
            ("t=2, state after one step", {"t": 2}, frozenset({"after-one-step"})),
        ]
    else:
        option_sets = [("", {"t": 1} if has_t else {}, frozenset())]
    return Unit(st.name, "step", st, args, outputs, [], sizes, {}, option_sets, scenarios)


@cache
def units() -> tuple:
    """Every op and every optimiser step of the registry, as harness units."""
    return tuple([_op_unit(o) for o in registry.ops()] + [_step_unit(s) for s in registry.steps()])


def unit(name: str) -> Unit:
    for u in units():
        if u.name == name:
            return u
    raise KeyError(f"no op or step {name!r}; known: {', '.join(u.name for u in units())}")


# =============================================================================================
# Exact values.


@dataclass
class Compiled:
    tape: Tape
    outputs: dict  # output name -> {storage position: slot}
    layout: tuple | None = None


def _positions(shape):
    return list(np.ndindex(*shape))


@cache
def _compile_op(name: str, flags: frozenset) -> Compiled:
    u = unit(name)
    op = u.obj
    ints = {
        n: {entry_index(a.array, pos): int(u.integers[n][pos]) for pos in _positions(a.shape)}
        for n, a in ((a.name, a) for a in u.args if a.integer)
    }
    tape = Tape(ints)
    env = spec_scope(op, flags)
    subs = {**u.sizes, **_option_values(op, {})}
    outs = {}
    for oname, o, shape in u.outputs:
        slots = {}
        for pos in _positions(shape):
            i, j = (0, pos[0]) if len(pos) == 1 else pos
            e = document_form(entry(o, (sp.Integer(i), sp.Integer(j)), env)).xreplace(subs)
            slots[pos] = tape.compile(e)
        outs[oname] = slots
    return Compiled(tape, outs)


def _option_values(unit_obj, kw: dict) -> dict:
    """Scalar options (eps, lr, β, t) at their defaults (or `kw`), as the exact binary value
    of the float that the kernel receives."""
    out = {}
    for o in unit_obj.options:
        value = kw.get(o.name, o.default)
        if o.symbol is None or isinstance(value, bool) or value is None:
            continue
        out[o.symbol] = sp.Integer(value) if isinstance(value, int) else sp.Rational(value)
    return out


@cache
def _compile_step(name: str, t: int) -> Compiled:
    u = unit(name)
    st = u.obj
    tape = Tape({})
    scope: dict = {}
    for a in st.spec:
        scope[a.target] = sp.sympify(a.expr).xreplace(scope)
    subs = _option_values(st, {"t": t})
    outs = {}
    for oname, o, shape in u.outputs:
        slots = {}
        for pos in _positions(shape):
            e = entry(scope[o], (sp.Integer(pos[0]), sp.Integer(pos[1])))
            slots[pos] = tape.compile(e.xreplace(u.sizes).xreplace(subs))
        outs[oname] = slots
    return Compiled(tape, outs)


def _mp(x: float):
    return mpmath.mpf(float(x))


def _layout(u: Unit, comp: Compiled) -> tuple:
    """(input slots as (key, name, storage position), gradient positions as
    (grad name, shape, [(storage position, input key)])), computed once per compiled tape."""
    if comp.layout is None:
        by_name = {a.name: a for a in u.args}
        ins = [(key, key[0], _storage_pos(by_name[key[0]], key[1])) for key in comp.tape.inputs]
        grads = [
            (g, a.shape, [(pos, (a.name, entry_index(a.array, pos))) for pos in _positions(a.shape)])
            for g, a in u.grads
        ]
        comp.layout = (ins, grads)
    return comp.layout


def exact(u: Unit, inputs: dict, upstream: dict | None, flags: frozenset, dps: int, t: int = 1, noise=None) -> dict:
    """The specification's outputs (and, for an op, the gradients of Σ upstream·outputs) at
    `inputs` (name -> float array), `dps` digits: {array name: object array of mpf}."""
    comp = _compile_op(u.name, flags) if u.kind == "op" else _compile_step(u.name, t)
    tape = comp.tape
    ins, grad_layout = _layout(u, comp)
    values = {key: _mp(inputs[name][pos]) for key, name, pos in ins}
    v = tape.forward(values, dps, noise)
    out = {}
    seeds: dict = {}
    for oname, _, shape in u.outputs:
        arr = np.empty(shape, dtype=object)
        for pos, s in comp.outputs[oname].items():
            arr[pos] = v[s]
            if upstream is not None:
                seeds[s] = seeds.get(s, 0) + _mp(upstream[oname][pos])
        out[oname] = arr
    if u.kind == "op" and upstream is not None:
        adj = tape.backward(v, seeds, dps, noise)
        zero = mpmath.mpf(0)
        for gname, shape, cells in grad_layout:
            arr = np.empty(shape, dtype=object)
            for pos, key in cells:
                arr[pos] = adj.get(key, zero)
            out[gname] = arr
    return out


def _storage_pos(a: ArgSpec, idx: tuple) -> tuple:
    if len(a.shape) == 2:
        return idx if len(idx) == 2 else (idx[0], 0)
    return (idx[-1],)


# =============================================================================================
# Inputs.


def _seed(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


# float32's range: its largest finite number and its smallest subnormal (below it, every input
# drawn as a float32 number would be 0, and a float64 run at 1e-200 or 1e-310 would probe zeros)
F32_MAX, F32_TINIEST = 3.4e38, 1.4e-45


def _storage_dtype(magnitude: float):
    """Inputs are float32 numbers wherever float32 can hold them, so that the float32 and the
    float64 runs share their inputs (and their exact values); float64 numbers beyond float32's
    range either way (1e100, 1e300; 1e-200, 1e-310)."""
    return np.float32 if 1e3 * F32_TINIEST <= magnitude <= F32_MAX / 1e2 else np.float64


def _unit_draws(rng, n: int) -> np.ndarray:
    """n draws of U(−1, 1), each a float32 number (as every unscaled input is): float64 inputs
    beyond float32's range are these scaled, so that their mantissas are a float32 run's."""
    return rng.uniform(-1, 1, n).astype(np.float32).astype(np.float64)


def _draw(shape, pattern: str, magnitude: float, rng, dtype) -> np.ndarray:
    n = int(np.prod(shape))
    uniform = _unit_draws if dtype == np.float64 else lambda rng, n: rng.uniform(-1, 1, n)
    if pattern == "random":
        x = uniform(rng, n) * magnitude
    elif pattern == "equal":
        x = np.full(n, magnitude)
    elif pattern == "alternating":
        x = magnitude * (-1.0) ** np.arange(n)
    elif pattern == "spike":
        x = uniform(rng, n)
        # the first row's last entry: where a (0, 1) mask is on and the first target points
        x[shape[-1] - 1 if len(shape) == 2 else n - 1] = magnitude
    else:
        raise ValueError(pattern)
    return x.astype(dtype).reshape(shape)


def make_inputs(u: Unit, scenario: tuple, pattern: str, magnitude: float) -> dict:
    """Kernel arguments (name -> array; floats as float32-representable values where the
    magnitude allows) and the upstream gradients of an op, from a fixed seed."""
    label, scaled = scenario
    rng = np.random.default_rng(_seed(u.name, label, pattern, magnitude))
    dt = _storage_dtype(magnitude)
    args = {}
    for a in u.args:
        if a.integer:
            args[a.name] = u.integers[a.name].copy()
        elif a.role == "state":
            args[a.name] = np.zeros(a.shape, dtype=dt)
        elif a.name in scaled:
            args[a.name] = _draw(a.shape, pattern, magnitude, rng, dt)
        else:
            args[a.name] = rng.uniform(-1, 1, a.shape).astype(np.float32).astype(dt)
    ups = None
    if u.kind == "op":
        ups = {n: rng.uniform(-1, 1, s).astype(np.float32).astype(dt) for n, _, s in u.outputs}
    return {"args": args, "upstream": ups}


# =============================================================================================
# Running the kernels.


def _module(backend: str, name: str):
    return importlib.import_module(f"generated.{backend}.{name}")


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _to_backend(x: np.ndarray, backend: str, dtype: str):
    if backend == "numpy":
        return x.astype(dtype) if x.dtype.kind == "f" else x.copy()
    import torch

    if x.dtype.kind == "f":
        return torch.from_numpy(x.astype(dtype))
    return torch.from_numpy(x.astype(np.int64))


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return x.detach().cpu().numpy()


def _guard(strict: bool):
    """NumPy's floating-point state and the warnings filter for one call."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("error" if strict else "ignore")
    stack.enter_context(
        np.errstate(over="raise", invalid="raise", divide="raise", under="ignore")
        if strict
        else np.errstate(all="ignore")
    )
    return stack


def _copy(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    if type(x).__module__.startswith("torch") and hasattr(x, "clone"):
        return x.clone()
    if isinstance(x, tuple):
        return tuple(_copy(y) for y in x)
    if isinstance(x, list):
        return [_copy(y) for y in x]
    return x


def _call(fn, args, kw, raised: list, phase: str):
    """fn(*args, **kw) under `np.errstate(over, invalid, divide="raise")` and warnings as errors;
    on an exception or a warning, record it in `raised` as (phase, message) and call again
    without them (to see the values). Each call gets its own copy of the arguments (a kernel
    may work in place on its cache)."""
    try:
        with _guard(True):
            return fn(*_copy(list(args)), **kw)
    except (FloatingPointError, Warning) as exc:
        raised.append((phase, f"{type(exc).__name__}: {exc}"))
    with _guard(False):
        return fn(*_copy(list(args)), **kw)


def run_kernel(u: Unit, backend: str, dtype: str, args: dict, upstream, kw: dict) -> tuple:
    """(outputs, gradients, raised) — outputs and gradients as NumPy arrays (name -> array),
    raised as [(phase, message)]: floating-point exceptions (NumPy) and warnings (both
    backends) of the forward, the backward or the step."""
    mod = _module(backend, u.name)
    call = [_to_backend(args[a.name], backend, dtype) for a in u.args]
    raised: list = []
    if u.kind == "step":
        res = _tuple(_call(getattr(mod, f"{u.name}_step"), call, kw, raised, "step"))
        return {n: _to_numpy(r) for (n, _, _), r in zip(u.outputs, res)}, {}, raised
    res = _call(getattr(mod, f"{u.name}_forward"), call, kw, raised, "forward")
    outs, cache = (_tuple(res[0]) if len(res) == 2 else res[:-1]), res[-1]
    ups = [_to_backend(upstream[n], backend, dtype) for n, _, _ in u.outputs]
    grads = _tuple(_call(getattr(mod, f"{u.name}_backward"), ups + [cache], {}, raised, "backward"))
    return (
        {n: _to_numpy(o) for (n, _, _), o in zip(u.outputs, outs)},
        {g: _to_numpy(x) for (g, _), x in zip(u.grads, grads)},
        raised,
    )


# =============================================================================================
# Findings.


@dataclass
class Finding:
    unit: str
    backend: str
    dtype: str
    magnitude: float
    scenario: str  # which arguments were scaled ("all", "x", ...)
    pattern: str  # random, equal, spike, alternating
    options: str  # flags / step count
    kind: str  # "raised", "nonfinite", "inaccurate", "error"
    target: str = ""  # output or gradient name ("y", "dx", "p_new"); "" for a raised call
    index: tuple = ()
    exact: str = ""
    got: str = ""
    rel_error: float = float("nan")
    count: int = 1  # elements of `target` with the same kind of failure
    detail: str = ""

    def key(self) -> tuple:
        return (self.unit, self.backend, self.dtype, self.magnitude)

    def __str__(self) -> str:
        where = (
            f"{self.unit} [{self.backend} {self.dtype} |x|~{self.magnitude:g}; scaled "
            f"{self.scenario}, {self.pattern}" + (f", {self.options}" if self.options else "") + "]"
        )
        if self.kind in ("raised", "error"):
            return f"{where}: {self.kind}: {self.detail}"
        rel = "" if math.isnan(self.rel_error) else f", rel. error {self.rel_error:.3g}"
        more = f" (and {self.count - 1} more)" if self.count > 1 else ""
        return (
            f"{where}: {self.target}{list(self.index)} {self.kind}: exact {self.exact}, "
            f"got {self.got}{rel}{more}" + (f" — {self.detail}" if self.detail else "")
        )


def report(findings: list) -> str:
    return "\n".join(str(f) for f in findings)


def _fmt(x) -> str:
    """8 significant digits; an mpf of any exponent without printing all of its digits."""
    if not isinstance(x, mpmath.mpf):
        return repr(float(x))
    if x == 0 or not mpmath.isfinite(x):
        return str(x)
    with mpmath.workdps(30 + len(str(abs(int(mpmath.mag(x))))) + 5):
        lg = mpmath.log10(abs(x))
        e = int(mpmath.floor(lg))
        mant = float(mpmath.power(10, lg - e))
    if mant >= 9.999999995:
        mant, e = mant / 10, e + 1
    return f"{'-' if x < 0 else ''}{mant:.8g}e{e:+d}"


def _float(x) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.copysign(math.inf, x)


def _exponent_range(*arrays) -> int:
    """Decimal digits between the largest and the smallest non-zero magnitude among the inputs."""
    vals = np.concatenate(
        [np.abs(np.asarray(a, dtype=np.float64)).ravel() for a in arrays if np.asarray(a).dtype.kind == "f"]
        or [np.zeros(1)]
    )
    vals = vals[vals > 0]
    if not len(vals):
        return 0
    return int(math.ceil(math.log10(vals.max()) - math.log10(vals.min())))  # the ratio may overflow (1/1e-310)


class _Case:
    """One point (unit, scenario, pattern, magnitude, options): inputs and exact values,
    computed once and shared by every backend and dtype that can hold them."""

    def __init__(self, u: Unit, scenario, pattern, magnitude, opt):
        self.u, self.scenario, self.pattern, self.magnitude, self.opt = u, scenario, pattern, magnitude, opt
        data = make_inputs(u, scenario, pattern, magnitude)
        self.args, self.upstream = data["args"], data["upstream"]
        self.flags = opt[2]
        self.t = int(opt[1].get("t", 1))
        self._exact: dict = {}
        self._state: dict = {}

    def inputs_for(self, dtype: str) -> dict | None:
        """The arguments in `dtype` (a step's second call: the state after one exact step,
        rounded to the dtype; None when it is out of the dtype's range)."""
        if "after-one-step" not in self.flags:
            return self.args
        if dtype not in self._state:
            first = exact(self.u, self.args, None, frozenset(), BASE_DPS, t=1)
            args = dict(self.args)
            names = [a.name for a in self.u.args if a.role == "state"]
            outs = [n for n, _, _ in self.u.outputs][1:]
            ok = True
            for sname, oname in zip(names, outs):
                vals = np.array([float(x) for x in first[oname].ravel()]).reshape(first[oname].shape)
                with np.errstate(all="ignore"):
                    cast = vals.astype(dtype)
                ok &= bool(np.isfinite(cast).all())
                args[sname] = cast.astype(np.float64)
            self._state[dtype] = args if ok else None
        return self._state[dtype]

    def exact(self, dtype: str, dps: int = BASE_DPS, args: dict | None = None, upstream: dict | None = None) -> dict:
        key = (dtype if "after-one-step" in self.flags else "", dps)
        if args is not None:
            return exact(self.u, args, upstream, self.flags, dps, self.t)
        if key not in self._exact:
            self._exact[key] = exact(self.u, self.inputs_for(dtype), self.upstream, self.flags, dps, self.t)
        return self._exact[key]

    def floats(self, dtype: str) -> dict:
        """The first exact values as float64 arrays (±inf beyond float64's range)."""
        key = ("floats", dtype)
        if key not in self._exact:
            self._exact[key] = {
                n: np.array([_float(x) for x in a.ravel()]).reshape(a.shape) for n, a in self.exact(dtype).items()
            }
        return self._exact[key]

    def confirm_dps(self, dtype: str) -> int:
        arrays = list(self.inputs_for(dtype).values()) + list((self.upstream or {}).values())
        return BASE_DPS + 10 + _exponent_range(*arrays)

    def spread(self, dtype: str, dps: int) -> dict:
        """The rounding noise of the point, per element: the largest |simulated − exact| over
        NOISE_RUNS evaluations of the specification's own program (forward and reverse-mode
        derivative) in which every computed value and every contribution to a derivative is
        multiplied by 1 ± u (u the dtype's unit roundoff; `Tape.forward`): a floating-point
        evaluation of the same formula, minus the exponent limits. It measures what any
        evaluation of the formula in the dtype goes through — the conditioning of the point
        (scores of 1e8 in float32 rounded by 8) and the cancellations on the way (LayerNorm's
        backward at a dominant entry, softmax's backward at a saturated row)."""
        key = ("spread", dtype, dps)
        if key not in self._exact:
            base = self.exact(dtype, dps)
            size = float(np.finfo(dtype).eps) / 2
            worst = {n: np.zeros(a.shape, dtype=object) for n, a in base.items()}
            for run in range(NOISE_RUNS):
                other = exact(self.u, self.inputs_for(dtype), self.upstream, self.flags, dps, self.t, noise=(run, size))
                for n in base:
                    for pos in np.ndindex(base[n].shape):
                        worst[n][pos] = max(worst[n][pos], abs(other[n][pos] - base[n][pos]))
            self._exact[key] = worst
        return self._exact[key]


_CASES: dict = {}
# (error / allowed error, where) of every element that needed the spread to decide: how close
# the decisions are (for `python -m qed.tools.edges --margins`)
MARGINS: list = []


def _case(u, scenario, pattern, magnitude, opt) -> _Case:
    key = (u.name, scenario[0], pattern, magnitude, opt[0])
    if key not in _CASES:
        _CASES[key] = _Case(u, scenario, pattern, magnitude, opt)
    return _CASES[key]


def _settled(a, b) -> bool:
    big = max(abs(a), abs(b))
    return abs(a - b) <= SETTLED * big or big < mpmath.mpf("1e-400")


def _compare(case: _Case, dtype: str, name: str, got: np.ndarray, base: dict, common: dict) -> list:
    """Findings for one output or gradient array against the exact values."""
    info = np.finfo(dtype)
    rtol = RTOL[dtype]
    top = mpmath.mpf(float(info.max)) / (1 + rtol)
    tiny = mpmath.mpf(float(info.tiny)) * 1024
    want = base[name]
    if got.shape != want.shape:
        return [
            Finding(**common, kind="error", target=name, detail=f"shape {got.shape}, the specification's {want.shape}")
        ]
    # first pass, in float64: the exact values rounded to float64 (±inf beyond its range)
    ex64 = case.floats(dtype)[name]
    with np.errstate(all="ignore"):
        ok = np.abs(got - ex64) <= RTOL[dtype] * np.abs(ex64) + float(tiny)
        bad = ~(np.isfinite(got) & ok) & (np.abs(ex64) <= float(top) * (1 + 1e-9))
    bad = [tuple(int(i) for i in pos) for pos in np.argwhere(bad)]
    if not bad:
        return []
    # confirm the exact values that decide at two higher precisions (and, where those two do
    # not agree, at two precisions that cover the inputs' whole exponent range), then measure
    # the point's spread where the kernel is still off
    ladder = [(BASE_DPS + CONFIRM_DIGITS, BASE_DPS + 2 * CONFIRM_DIGITS)]
    wide = case.confirm_dps(dtype)
    if wide > BASE_DPS + 2 * CONFIRM_DIGITS:
        ladder.append((wide, wide + CONFIRM_DIGITS))
    failures = {"nonfinite": [], "inaccurate": []}
    spread = None
    for pos in bad:
        g = float(got[pos])
        ex = None
        for lo, hi in ladder:
            a, b = case.exact(dtype, lo)[name][pos], case.exact(dtype, hi)[name][pos]
            if a == b == 0 and (lo, hi) != ladder[-1]:
                continue  # 0 at both may be a cancellation these digits cannot resolve: wider
            if _settled(a, b):
                ex, dps = b, hi
                break
        if ex is None or abs(ex) > top:
            continue
        if not math.isfinite(g):
            failures["nonfinite"].append((pos, ex, g, float("inf")))
            continue
        err = abs(mpmath.mpf(g) - ex)
        if err <= rtol * abs(ex) + tiny:
            continue
        if spread is None:
            spread = case.spread(dtype, dps)
        allowed = rtol * abs(ex) + SPREAD_FACTOR * spread[name][pos] + tiny
        MARGINS.append(
            (
                float(err / allowed),
                common["unit"],
                common["backend"],
                dtype,
                common["magnitude"],
                common["scenario"],
                common["pattern"],
                common["options"],
                name,
                pos,
            )
        )
        if err <= allowed:
            continue
        rel = float(err / abs(ex)) if ex != 0 else float("inf")
        failures["inaccurate"].append((pos, ex, g, rel))
    out = []
    for kind, items in failures.items():
        if not items:
            continue
        pos, ex, g, rel = max(items, key=lambda t: t[3])
        detail = ""
        if kind == "inaccurate" and spread is not None:
            detail = f"spread {_fmt(spread[name][pos])}"
        out.append(
            Finding(
                **common,
                kind=kind,
                target=name,
                index=tuple(int(p) for p in pos),
                exact=_fmt(ex),
                got=_fmt(g),
                rel_error=rel,
                count=len(items),
                detail=detail,
            )
        )
    return out


def _out_of_range(values, dtype: str) -> bool:
    top = float(np.finfo(dtype).max)
    return any(bool((np.abs(a) > top).any()) for a in values)


def check_case(u: Unit, backend: str, dtype: str, magnitude: float, scenario, pattern, opt) -> list:
    """Findings at one point: the kernel's values against the exact ones, and the exceptions
    and warnings it raised. An exception of a phase (forward, backward, step) counts only when
    every exact value that the phase returns is within the dtype's range: an overflow that
    produces an output that is itself out of range is the correctly rounded result."""
    case = _case(u, scenario, pattern, magnitude, opt)
    args = case.inputs_for(dtype)
    common = dict(
        unit=u.name,
        backend=backend,
        dtype=dtype,
        magnitude=magnitude,
        scenario=scenario[0],
        pattern=pattern,
        options=opt[0],
    )
    if args is None:
        return []  # the state of a second step is out of the dtype's range
    try:
        base = case.exact(dtype)
    except TapeError as exc:
        return [Finding(**common, kind="error", detail=f"specification: {exc}")]
    except (ZeroDivisionError, ValueError):  # the specification itself is undefined here
        return []
    try:
        outs, grads, raised = run_kernel(u, backend, dtype, args, case.upstream, dict(opt[1]))
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot run at all is a finding
        return [Finding(**common, kind="error", detail=f"{type(exc).__name__}: {exc}")]
    found = []
    for phase, message in raised:
        names = [n for n, _, _ in u.outputs] if phase in ("forward", "step") else [g for g, _ in u.grads]
        if not _out_of_range([case.floats(dtype)[n] for n in names], dtype):
            found.append(Finding(**common, kind="raised", target=phase, detail=f"{phase}: {message}"))
    values = []
    for name, got in list(outs.items()) + list(grads.items()):
        values += _compare(case, dtype, name, np.asarray(got, dtype=np.float64), base, common)
    if found and not values:
        for f in found:
            f.detail += " (every value that is in range comes out right)"
    return found + values


def check(name: str, backend: str, dtype: str, magnitude: float) -> list:
    """Every finding for one unit (op or step) on one backend, dtype and magnitude, over every
    scaled-argument scenario, input pattern and option set."""
    u = unit(name)
    out = []
    for opt in u.option_sets:
        for scenario in u.scenarios:
            for pattern in PATTERNS:
                out += check_case(u, backend, dtype, magnitude, scenario, pattern, opt)
    return out


def cases() -> list:
    """(unit, backend, dtype, magnitude) for every check."""
    return [(u.name, b, d, m) for u in units() for b in BACKENDS for d in DTYPES for m in magnitudes(d)]


def main(argv=None) -> int:
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m qed.tools.edges", description=__doc__.split("\n")[0])
    p.add_argument("units", nargs="*", help="ops or steps (default: all)")
    p.add_argument("--backend", choices=BACKENDS, action="append")
    p.add_argument("--dtype", choices=DTYPES, action="append")
    p.add_argument(
        "--margins",
        type=int,
        metavar="N",
        default=0,
        help="print the N passing decisions closest to the bound (error/allowed)",
    )
    a = p.parse_args(argv)
    names = a.units or [u.name for u in units()]
    total = 0
    for name in names:
        t0 = time.perf_counter()
        for b in a.backend or BACKENDS:
            for d in a.dtype or DTYPES:
                for m in magnitudes(d):
                    fs = check(name, b, d, m)
                    total += len(fs)
                    for f in fs:
                        print(f)
        print(f"# {name}: {time.perf_counter() - t0:.2f} s", flush=True)
    if a.margins:
        close = sorted((m for m in MARGINS if m[0] <= 1), key=lambda m: -m[0])[: a.margins]
        for ratio, *where in close:
            print(f"# margin {ratio:.3g}: {where}")
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())

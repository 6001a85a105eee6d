"""The judge of generated/numpy/_special.py's float32 branch: the rational erf, run exactly.

For float32 arrays the printed `erf` and `ndtr` evaluate derivations/special.py's rational
approximation over cache-sized blocks:

    R(x) = clip(z·P(z²)/Q(z²), −1, 1),   z = clip(x, −c, c)        (erf)
    Φ(x) ≈ ½·R(x·(√2/2)) + ½                                          (ndtr)

with P, Q, c the data of `ERF_FLOAT32`. Which float32 values this gives, and how far they lie
from erf, is the measured evidence of the claim `special.erf_float32`; what can be checked
exactly is that the printed program computes *that* rational function: this judge executes the
printed file itself (its coefficient literals read as the exact numbers they spell, the blocks
made 3 elements long so that several blocks and a partial last one run) on SymPy numbers that
an array claims to be float32, at inputs inside the clamp, beyond it on both sides, at 0 and
at ±c, and compares every entry exactly with R written directly from ERF_P, ERF_Q, ERF_CLAMP
(Σ p_k t^k, no Horner): a coefficient, the clamp, the bound, the order of the columns or the
affine map printed wrong is a mismatch. Rounding to float32 is not modelled (that is the
claim's measurement).
"""

from __future__ import annotations

import random
import types
from dataclasses import dataclass

import numpy as _np
import sympy as sp

from . import ROOT

__all__ = ["judge_special", "Result"]

FILE = ROOT / "generated" / "numpy" / "_special.py"


class _Float32(_np.ndarray):
    """An object array of exact numbers that reports the float32 dtype (so the printed dispatch
    takes its float32 branch)."""

    @property
    def dtype(self):  # type: ignore[override]
        return _np.dtype(_np.float32)


def _f32(values) -> _Float32:
    return _np.asarray(values, dtype=object).view(_Float32)


def _objects(a):
    return a.view(_np.ndarray) if isinstance(a, _np.ndarray) else a


def _clip(a, lo, hi, out=None):
    res = _np.frompyfunc(lambda v: sp.Max(sp.Min(sp.sympify(v), hi), lo), 1, 1)(_objects(a))
    out[...] = res
    return out


def _ufunc(f):
    def call(a, b, out=None):
        res = _np.frompyfunc(lambda u, v: f(sp.sympify(u), sp.sympify(v)), 2, 1)(_objects(a), _objects(b))
        out[...] = res
        return out

    return call


def _empty(shape, dtype=None):
    return _np.empty(shape, dtype=object)


def _namespace():
    ns = types.SimpleNamespace(
        asarray=lambda x: x,
        empty=_empty,
        ravel=lambda a: _np.ravel(_objects(a)),
        clip=_clip,
        multiply=_ufunc(lambda u, v: u * v),
        add=_ufunc(lambda u, v: u + v),
        divide=_ufunc(lambda u, v: u / v),
        float32=_np.float32,
        array=lambda rows, dtype=None: _np.array(rows, dtype=object),
    )
    return ns


def _load(source: str | None = None, block: int = 3):
    """The printed _special.py with the exact namespace, its blocks `block` elements long."""
    import builtins

    from .translation import MATH, _run_module, printed_text

    text = source if source is not None else printed_text(FILE)
    mod = types.ModuleType("generated.numpy._special")
    ns = mod.__dict__
    ns["__qed_exact_number__"] = sp.Rational
    ns["__qed_exact_int__"] = sp.Integer
    scipy = types.SimpleNamespace(special=types.SimpleNamespace(erf=sp.erf, ndtr=None))
    modules = {"numpy": _namespace(), "math": MATH, "scipy": scipy, "scipy.special": scipy}

    def imports(name, globals=None, locals=None, fromlist=(), level=0):
        if name in modules:  # the module-level code (the coefficient table) runs exactly too
            return modules[name]
        return builtins.__import__(name, globals, locals, fromlist, level)

    ns["__builtins__"] = dict(vars(builtins), __import__=imports)
    _run_module(FILE, text, ns)
    ns["_BLOCK"] = block
    return mod


def _rational(x):
    """R(x) from derivations/special.py's data, directly: clip(z·P(t)/Q(t), −b, b)."""
    from derivations.special import ERF_FLOAT32 as A

    z = sp.Max(sp.Min(x, A.clamp), -A.clamp)
    t = z * z
    p = sum(c * t**k for k, c in enumerate(A.numerator))
    q = sum(c * t**k for k, c in enumerate(A.denominator))
    r = z * p / q
    return r if A.bound is None else sp.Max(sp.Min(r, A.bound), -A.bound)


def _points(seed: int) -> list:
    from derivations.special import ERF_CLAMP as c

    rng = random.Random(seed)
    inside = [sp.Rational(rng.randint(-3900, 3900), 1000) for _ in range(5)]
    return [sp.Integer(0), c, -c, c + 1, -c - sp.Rational(7, 3), sp.Integer(9)] + inside


@dataclass
class Result:
    what: str
    entries: int = 0
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.entries > 0

    def __str__(self) -> str:
        return f"_special {self.what}: " + (self.problem or f"{self.entries} entries equal exactly")


def _compare(what, got, want) -> Result:
    res = Result(what)
    for k, (g, w) in enumerate(zip(_np.ravel(_objects(got)), want)):
        if not isinstance(g, sp.Basic) or g.atoms(sp.Float):
            res.problem = f"entry {k}: printed {g!r}, not an exact number (unwritten, or a float leaked)"
            return res
        d = sp.expand(g - w)
        if d != 0:
            res.problem = f"entry {k}: printed {g}, expected {w}"
            return res
        res.entries += 1
    return res


def judge_special(source: str | None = None, seed: int = 0) -> list[Result]:
    """erf and ndtr of the printed file's float32 branch against R, exactly; also the dispatch of
    a non-float32 array to SciPy's branch."""
    mod = _load(source)
    xs = _points(seed)
    x = _f32(xs).reshape(1, len(xs))
    half = sp.Rational(1, 2)
    out = []
    for what, fn, want in (
        ("erf (float32 branch)", mod.erf, [_rational(v) for v in xs]),
        ("ndtr (float32 branch)", mod.ndtr, [half * _rational(v * sp.sqrt(2) / 2) + half for v in xs]),
    ):
        try:
            out.append(_compare(what, fn(x), want))
        except Exception as exc:  # noqa: BLE001 - the printed code failing to run is a finding
            out.append(Result(what, 0, f"could not run: {type(exc).__name__}: {exc}"))
    # a non-float32 array takes the library's branch (the symbolic run models it as erf itself)
    called = []
    mod.scipy = types.SimpleNamespace(
        special=types.SimpleNamespace(
            erf=lambda a: called.append("erf") or a, ndtr=lambda a: called.append("ndtr") or a
        )
    )
    plain = _np.asarray(xs, dtype=object)
    mod.erf(plain)
    mod.ndtr(plain)
    out.append(
        Result(
            "float64 dispatch",
            2 if called == ["erf", "ndtr"] else 0,
            "" if called == ["erf", "ndtr"] else f"called {called}",
        )
    )
    return out

"""One repair to SymPy that the proofs rely on, applied when `derivations` is imported.

`Sum(f, limits)` runs `piecewise_fold(f)` on its body, and the fold recurses *into nested sums*:
a `Piecewise` whose condition tests a nested sum's own bound index (the causal mask inside a
softmax denominator, `Σ_p [p ≤ c] e^{S_cp}`) is pulled out of that sum, so the bound index
leaks and the other branch becomes `…/Σ 0 = zoo`, then `nan` (SymPy 1.14). The repair hides
every nested sum that holds a `Piecewise` during the fold and restores it afterwards: only a
`Piecewise` at the body's own level is folded, which is sound. `tests/test_sympy_fixes.py`
shows the failure the repair prevents.
"""

from __future__ import annotations

import sympy as sp
import sympy.concrete.expr_with_limits as _ewl

_original = _ewl._common_new


def _common_new(cls, function, *symbols, discrete, **assumptions):
    function = sp.sympify(function)
    nested = {}
    if isinstance(function, sp.Basic) and function.has(sp.Piecewise):
        nested = {
            s: sp.Dummy("nested")
            for s in function.find(lambda x: isinstance(x, _ewl.ExprWithLimits))
            if s.has(sp.Piecewise)
        }
    if not nested:
        return _original(cls, function, *symbols, discrete=discrete, **assumptions)
    pre = _original(cls, function.xreplace(nested), *symbols, discrete=discrete, **assumptions)
    if not isinstance(pre, tuple):
        return pre
    body, limits, orientation = pre
    return body.xreplace({v: k for k, v in nested.items()}), limits, orientation


if getattr(_ewl._common_new, "__module__", "") != __name__:
    _ewl._common_new = _common_new

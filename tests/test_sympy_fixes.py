"""The SymPy repair of derivations/_sympy_fixes.py: a Sum keeps a nested sum's Piecewise inside."""

import sympy as sp

import derivations  # noqa: F401  (applies the repair)
from derivations import _sympy_fixes


def test_a_nested_sums_piecewise_stays_inside():
    c, p, n = sp.Symbol("c", integer=True), sp.Symbol("p", integer=True), sp.Symbol("n", integer=True, positive=True)
    x = sp.IndexedBase("x")
    inner = sp.Sum(sp.Piecewise((sp.exp(x[c, p]), p <= c), (0, True)), (p, 0, n - 1))
    outer = sp.Sum(x[c, 0] / inner, (c, 0, n - 1))
    assert not outer.has(sp.zoo, sp.nan)
    assert p not in outer.free_symbols
    assert outer.function == x[c, 0] / inner


def test_without_the_repair_sympy_leaks_the_bound_index():
    """The failure the repair prevents (if SymPy fixes it upstream, this test says so)."""
    c, p, n = sp.Symbol("c", integer=True), sp.Symbol("p", integer=True), sp.Symbol("n", integer=True, positive=True)
    x = sp.IndexedBase("x")
    inner = sp.Sum(sp.Piecewise((sp.exp(x[c, p]), p <= c), (0, True)), (p, 0, n - 1))
    import sympy.concrete.expr_with_limits as ewl

    saved, ewl._common_new = ewl._common_new, _sympy_fixes._original
    try:
        outer = sp.Sum(x[c, 0] / inner, (c, 0, n - 1))
    finally:
        ewl._common_new = saved
    assert outer.has(sp.zoo, sp.nan) or p in outer.free_symbols

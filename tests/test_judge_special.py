"""The float32 branch of generated/numpy/_special.py run exactly against derivations/special.py's
rational R (qed/tools/judge_special.py); a wrong edit of the printed program is a mismatch."""

from __future__ import annotations

import pytest

from qed.tools import judge_special as js


def test_the_printed_float32_erf_is_the_rational_of_the_derivation():
    results = js.judge_special()
    assert all(r.ok for r in results), "\n".join(map(str, results))
    assert [r.what for r in results] == ["erf (float32 branch)", "ndtr (float32 branch)", "float64 dispatch"]


@pytest.mark.parametrize(
    "old,new",
    [
        ("1.128145", "1.128146"),  # a digit of P's first coefficient
        ("_ERF_CLAMP = 3.984375", "_ERF_CLAMP = 3.984376"),  # the clamp
        ("np.clip(r, -1.0, 1.0, out=r)", "np.clip(r, -1.0, 0.5, out=r)"),  # the bound
        ("for c in _ERF_COLUMNS[-3::-1]:", "for c in _ERF_COLUMNS[-4::-1]:"),  # Horner skips a column
        ("r /= pq[1]", "r /= pq[0]"),  # P/P
        ("r += shift", "r -= shift"),  # ndtr's affine map
        ("m = min(_BLOCK, n - start)", "m = min(_BLOCK, n - start - 1)"),  # a block's last element
    ],
)
def test_a_wrong_edit_of_the_printed_program_is_found(old, new):
    """(The bound ±1 itself is invisible to exact arithmetic: |R| < 1 at every real x; it clips
    float32 rounding only, which the claim special.erf_float32 measures. A bound below R's
    range is visible.)"""
    text = js.FILE.read_text()
    assert text.count(old) == 1, old
    results = js.judge_special(text.replace(old, new))
    assert not all(r.ok for r in results), f"{old} -> {new} was not found"

"""The edge judge checks `_validate.sum_to`, the adjoint of a broadcast, at every count of extra
leading axes: two wrong versions that agree with the right one at one extra axis (the only count
the kernels' judged sizes reach) are each refuted."""

import math

import pytest

from qed.tools import judge_edges as je


def _first_axis_only(g, shape):  # NumPy: sums only the first extra leading axis
    if g.shape == shape:
        return g
    if g.size == math.prod(shape):
        return g.reshape(shape)
    extra = g.ndim - len(shape)
    axes = tuple(range(min(extra, 1))) + tuple(
        extra + i for i, s in enumerate(shape) if s == 1 and g.shape[extra + i] != 1
    )
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def _first_slice_only(g, shape):  # torch: with two extra axes, only the first slice of the first
    if g.shape == shape:
        return g
    if g.numel() == math.prod(shape):
        return g.reshape(shape)
    return g.sum_to_size(shape) if g.dim() < len(shape) + 2 else g[0].sum_to_size(shape)


@pytest.mark.parametrize("backend,wrong", [("numpy", _first_axis_only), ("torch", _first_slice_only)])
def test_a_sum_to_wrong_at_two_extra_axes_is_refused(backend, wrong, monkeypatch):
    v = je._module(backend, "_validate")
    assert all(f.ok for f in je.judge_validate(backend))
    monkeypatch.setattr(v, "sum_to", wrong)
    bad = [f for f in je.judge_validate(backend) if not f.ok]
    assert bad and all("sum_to (2, 3, 4, 5)" in str(f) for f in bad)

"""The support modules of the generated kernels (codegen/support/): each named speed idiom equals
the reduction it names, on batched, strided, 1-D and empty arrays, in float32 and float64; the
generated copies are the hand-written files; a wrong helper is caught by translation validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from codegen.support import numpy_support as ns
from codegen.support import torch_support as ts

SHAPES = [(2, 3, 5), (4, 7), (7,), (3, 0, 4), (0, 5), (2, 0), (1, 1, 1)]
DTYPES = [np.float32, np.float64]


def _array(shape, dtype, seed=0, strided=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if strided and a.ndim >= 2:  # the same values, not contiguous
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    return a


def _close(got, want, dtype):
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_numpy_row_and_column_sums(shape, dtype, strided):
    a = _array(shape, dtype, strided=strided)
    _close(ns.rowsum(a), np.sum(a, axis=-1, keepdims=True), dtype)
    if shape[-1]:
        _close(ns.rowmean(a), np.mean(a, axis=-1, keepdims=True), dtype)
    _close(ns.colsum(a), np.sum(a, axis=tuple(range(a.ndim - 1))), dtype)
    assert ns.rows(a).shape == (int(np.prod(shape[:-1])), shape[-1])


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("lead", [(2, 3), (4,), (), (0,), (2, 0)], ids=str)
def test_numpy_contract_and_matmul_rows(lead, dtype):
    a, b = _array(lead + (5, 3), dtype, 1), _array(lead + (5, 4), dtype, 2)
    want = np.sum(a[..., :, None] * b[..., None, :], axis=tuple(range(a.ndim - 1)))  # Σ_rows aᵀb
    _close(ns.contract(a, b), want, dtype)
    w = _array((3, 6), dtype, 3)
    _close(ns.matmul_rows(a, w), a @ w, dtype)
    _close(ns.matmul_rows(a, _array((6, 3), dtype, 4).T), a @ _array((6, 3), dtype, 4).T, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_torch_helpers(shape, dtype):
    a = torch.tensor(_array(shape, np.float64)).to(dtype)
    torch.testing.assert_close(ts.rowsum(a), a.sum(-1, keepdim=True))
    if shape[-1]:
        torch.testing.assert_close(ts.rowmean(a), a.mean(-1, keepdim=True))
    torch.testing.assert_close(ts.colsum(a), a if a.dim() == 1 else a.sum(dim=tuple(range(a.dim() - 1))))
    lead = shape[:-1] or (1,)
    x, y = (torch.tensor(_array(lead + (k,), np.float64, k)).to(dtype) for k in (3, 4))
    want = (x[..., :, None] * y[..., None, :]).sum(dim=tuple(range(x.dim() - 1)))  # Σ_rows xᵀy
    torch.testing.assert_close(ts.contract(x, y), want)
    w, bias = (torch.tensor(_array(s, np.float64, 9)).to(dtype) for s in ((3, 6), (6,)))
    torch.testing.assert_close(ts.addmm_rows(bias, x, w), x @ w + bias)


def test_the_generated_support_modules_are_the_hand_written_ones():
    from codegen.render import ROOT

    for backend in ("numpy", "torch"):
        text = (ROOT / "generated" / backend / "_support.py").read_text()
        assert text.split("\n", 3)[3] == (ROOT / "codegen" / "support" / f"{backend}_support.py").read_text()


def test_the_helpers_are_the_fast_idioms():
    """rowsum is one gemv with ones (not np.sum's reduction loop): the same digits as that gemv.
    (Its speed against np.sum is measured side by side by `qed bench --ops`, never by a test.)"""
    a = _array((64, 64, 256), np.float32)
    np.testing.assert_array_equal(ns.rowsum(a), (a @ np.ones(256, np.float32))[..., None])


def test_a_wrong_helper_fails_translation_validation(monkeypatch):
    """The generated kernels reach the helpers through the translation-validation shim too: a
    mean that divides by the wrong axis's length is reported for the ops that use it."""
    from qed.tools import translation as tv

    text = (tv.GENERATED / "_support.py").read_text()
    line = "    return rowsum(a) / a.shape[-1]"
    assert text.count(line) == 1
    wrong = tv.load("_support", source=text.replace(line, "    return rowsum(a) / a.shape[-2]"))
    # a fresh module cache holding only the wrong helper: rmsnorm is loaded against it here, and
    # the cache of the other tests (their rmsnorm bound to the right helper) comes back after
    monkeypatch.setattr(tv, "_LOADED", {"_support": wrong})
    checks = tv.validate_op("rmsnorm")
    assert any(not c.ok for c in checks)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_the_gaussian_is_exp_of_minus_half_the_square_without_a_warning(dtype):
    """G(u) = e^{−u²/2} on both backends, its input untouched; at magnitudes where u² overflows
    (1e20 in float32, 1e160 in float64) it is exactly 0 (the correctly rounded value), with no
    floating-point exception or warning raised in NumPy."""
    import warnings

    huge = 1e20 if dtype == np.float32 else 1e160
    u = np.concatenate([_array((3, 5), dtype).ravel(), np.array([0, 14.5, -40, huge, -huge, np.inf], dtype)])
    keep = u.copy()
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(-np.square(u.astype(np.longdouble)) / 2).astype(dtype)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        warnings.simplefilter("error")
        got = ns.gaussian(u)
    np.testing.assert_array_equal(u, keep)
    _close(got, want, dtype)
    assert got[-6] == 1 and (got[-3:] == 0).all()
    t = torch.from_numpy(u)
    tg = ts.gaussian(t)
    assert torch.equal(t, torch.from_numpy(keep))
    _close(tg.numpy(), want, dtype)


def test_a_wrong_gaussian_fails_translation_validation(monkeypatch):
    """e^{−u²} for e^{−u²/2} in the helper is reported for GELU, which calls it."""
    from qed.tools import translation as tv

    text = (tv.GENERATED / "_support.py").read_text()
    line = "    g *= -0.5"
    assert text.count(line) == 1
    wrong = tv.load("_support", source=text.replace(line, "    g *= -1.0"))
    monkeypatch.setattr(tv, "_LOADED", {"_support": wrong})
    assert any(not c.ok for c in tv.validate_op("gelu"))
    monkeypatch.setattr(tv, "_LOADED", {})
    assert all(c.ok for c in tv.validate_op("gelu"))

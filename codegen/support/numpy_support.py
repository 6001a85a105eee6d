"""The speed idioms of the generated NumPy kernels, by name.

Each helper is the sum its name says, computed the fast way: the row and column sums as BLAS
matrix-vector products with a vector of ones, and products with a weight matrix over the rows of
every leading axis at once; and the Gaussian e^{−u²/2} in three passes. The printers call them (`mean = _support.rowmean(x)`), so a kernel
reads like its formula; tests/test_codegen_support.py checks each against np.sum and friends.
`python -m codegen` copies this file verbatim into generated/numpy/_support.py.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["rows", "rowsum", "rowmean", "colsum", "contract", "matmul_rows", "gaussian", "nan_of", "nan_of_columns"]


def rows(a: np.ndarray) -> np.ndarray:
    """`a` as the matrix of its rows of every leading axis, (Π leading·rows, c): a reshaped
    view where the strides allow. The row count is spelled out (-1 is ambiguous for an empty
    array with c = 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def rowsum(a: np.ndarray) -> np.ndarray:
    """Σ over the last axis, kept as a length-1 axis: (..., r, c) -> (..., r, 1).

    One BLAS gemv with a vector of ones, vectorised across the row, instead of NumPy's per-row
    reduction loop: 3-6x faster than np.sum(a, axis=-1) on rows of 64..512 floats."""
    return (a @ np.ones(a.shape[-1], dtype=a.dtype))[..., None]


def rowmean(a: np.ndarray) -> np.ndarray:
    """The mean over the last axis, kept as a length-1 axis: rowsum(a) / c."""
    return rowsum(a) / a.shape[-1]


def colsum(a: np.ndarray) -> np.ndarray:
    """Σ over every row of every leading axis: (..., r, c) -> (c,). 1ᵀA on the matrix of the
    rows, one BLAS gemv."""
    return np.ones(math.prod(a.shape[:-1]), dtype=a.dtype) @ rows(a)


def contract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ over the rows of every leading axis of aᵀb: (..., r, ca), (..., r, cb) -> (ca, cb).
    One matrix product of the two matrices of rows."""
    return rows(a).T @ rows(b)


def matmul_rows(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w for a weight matrix w (k, c) and x (..., r, k) -> (..., r, c): one 2-D product over
    all rows of every leading axis (one BLAS call instead of one per leading index)."""
    return (rows(x) @ w).reshape(*x.shape[:-1], w.shape[1])  # w is (k, c)


def gaussian(u: np.ndarray) -> np.ndarray:
    """G(u) = e^{−u²/2}, elementwise: u² into a new array, scaled and exponentiated in place.

    u² overflows to ∞ for |u| > 1.8e19 in float32 (1.3e154 in float64); e^{−∞} = 0 is then the
    correctly rounded value (e^{−u²/2} is below the smallest float32 from |u| > 14), so that
    overflow is expected and not reported. 4.8x faster than the overflow-free (e^{−|u|/2})^{|u|},
    whose `pow` costs six times an `exp`."""
    with np.errstate(over="ignore"):
        g = np.multiply(u, u)
    g *= -0.5
    return np.exp(g, out=g)


def nan_of(a: np.ndarray) -> np.ndarray:
    """0 for each (..., r, c) slice of `a` whose entries are finite, NaN for one that holds a NaN
    (or an infinity): (..., 1, 1). a·0 is exactly 0 for a finite a and NaN for NaN and ±∞; summed
    over the slice. The tiled attention adds it where it skipped a block, so that NaN reaches
    the rows it reaches in attention (the NaN policy, docs/cli.md)."""
    return (a * 0).sum(axis=(-2, -1), keepdims=True)


def nan_of_columns(a: np.ndarray) -> np.ndarray:
    """`nan_of` per column: 0 for each column of each (..., r, c) slice whose entries are finite,
    NaN for one that holds a NaN (or an infinity): (..., 1, c)."""
    return (a * 0).sum(axis=-2, keepdims=True)

"""The speed idioms of the generated PyTorch kernels, by name.

Each helper is the sum its name says: the row reductions, the column sum and the contraction over
the rows of every leading axis, and a product with a weight matrix plus a bias as one addmm (the
bias is the GEMM's initial C: no second pass over the output), and the Gaussian e^{−u²/2} in
three passes. The printers call them
(`mean = _support.rowmean(x)`), so a kernel reads like its formula; tests/test_codegen_support.py
checks each against torch's own. `python -m codegen` copies this file verbatim into
generated/torch/_support.py.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "rows",
    "rowsum",
    "rowmean",
    "colsum",
    "contract",
    "addmm_rows",
    "gaussian",
    "hypot",
    "nan_of",
    "nan_of_columns",
]


def rows(a: torch.Tensor) -> torch.Tensor:
    """`a` as the matrix of its rows of every leading axis, (Π leading·rows, c): a reshaped
    view where the strides allow. The row count is spelled out (-1 is ambiguous for an empty
    tensor with c = 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def rowsum(a: torch.Tensor) -> torch.Tensor:
    """Σ over the last axis, kept as a length-1 axis: (..., r, c) -> (..., r, 1)."""
    return torch.sum(a, dim=-1, keepdim=True)


def rowmean(a: torch.Tensor) -> torch.Tensor:
    """The mean over the last axis, kept as a length-1 axis."""
    return torch.mean(a, dim=-1, keepdim=True)


def colsum(a: torch.Tensor) -> torch.Tensor:
    """Σ over every row of every leading axis: (..., r, c) -> (c,)."""
    return rows(a).sum(0)


def contract(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ over the rows of every leading axis of aᵀb: (..., r, ca), (..., r, cb) -> (ca, cb).
    One matrix product of the two matrices of rows."""
    return rows(a).T @ rows(b)


def addmm_rows(b: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w + b for a weight matrix w (k, c), a bias b (c,) and x (..., r, k) -> (..., r, c):
    one torch.addmm over all rows of every leading axis, the bias as the GEMM's initial C."""
    return torch.addmm(b, rows(x), w).reshape(*x.shape[:-1], w.shape[1])


def gaussian(u: torch.Tensor) -> torch.Tensor:
    """G(u) = e^{−u²/2}, elementwise: u² into a new tensor, scaled and exponentiated in place.
    For |u| > 1.8e19 in float32, u² is ∞ and e^{−∞} = 0, the correctly rounded value."""
    g = u * u  # torch.square is a pow: 7x slower than this multiply (CPU, float32)
    g.mul_(-0.5)
    return g.exp_()


def hypot(u: torch.Tensor, s: float) -> torch.Tensor:
    """√(u² + s²), elementwise, for a number s: torch.hypot, which scales before it squares (u² =
    ∞ for |u| > 1.8e19 in float32, where the root is finite), takes only tensors; s as a 0-dim
    tensor of u's dtype and device broadcasts."""
    return torch.hypot(u, u.new_tensor(s))


def nan_of(a: torch.Tensor) -> torch.Tensor:
    """0 for each (..., r, c) slice of `a` whose entries are finite, NaN for one that holds a NaN
    (or an infinity): (..., 1, 1). a·0 is exactly 0 for a finite a and NaN for NaN and ±∞; summed
    over the slice. The tiled attention adds it where it skipped a block, so that NaN reaches
    the rows it reaches in attention (the NaN policy, docs/cli.md)."""
    return (a * 0).sum(dim=(-2, -1), keepdim=True)


def nan_of_columns(a: torch.Tensor) -> torch.Tensor:
    """`nan_of` per column: 0 for each column of each (..., r, c) slice whose entries are finite,
    NaN for one that holds a NaN (or an infinity): (..., 1, c)."""
    return (a * 0).sum(dim=-2, keepdim=True)

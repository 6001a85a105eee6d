"""Parameters as views of one flat buffer, so that an optimiser updates them all with one kernel
call per weight-decay group, and worker processes share them through one block of memory.

    flat_params(arrays, dtype)          the values copied into one new 1-D buffer, matrices first
    flat_layout(arrays)                 (buffer, {name: offset}) if arrays tile one buffer, else None
    flat_views(buffer, offsets, shapes) {name: view} of a buffer in such a layout

Works on NumPy arrays; `flat_views` also on torch tensors (slicing and reshape give views).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np


def flat_views(buffer: np.ndarray, offsets: dict, shapes: dict) -> OrderedDict:
    """{name: buffer[offset : offset + size] shaped like the parameter}, in the order of `offsets`."""
    return OrderedDict(
        (k, buffer[off : off + math.prod(shapes[k])].reshape(tuple(shapes[k]))) for k, off in offsets.items()
    )


def flat_params(
    arrays: dict, dtype: np.dtype | type | str, buffer: np.ndarray | None = None
) -> OrderedDict[str, np.ndarray]:
    """The same values as views of one contiguous 1-D buffer, matrices (the weight-decayed
    parameters) first, then vectors; the dict keeps the given order. An optimizer can then
    update every parameter with one kernel call per weight-decay group (see `flat_layout`).
    `buffer`: a 1-D array of that many elements to use (e.g. shared memory) instead of a new one."""
    order = sorted(arrays, key=lambda k: np.ndim(arrays[k]) < 2)  # stable: 2-D first
    size = sum(int(np.size(a)) for a in arrays.values())
    buf = np.empty(size, dtype=dtype) if buffer is None else buffer
    if buf.shape != (size,) or buf.dtype != np.dtype(dtype):
        raise ValueError(f"flat_params: buffer must be ({size},) {np.dtype(dtype)}, got {buf.shape} {buf.dtype}")
    offsets, off = {}, 0
    for k in order:
        offsets[k] = off
        off += int(np.size(arrays[k]))
    views = flat_views(buf, {k: offsets[k] for k in arrays}, {k: np.shape(a) for k, a in arrays.items()})
    for k, a in arrays.items():
        views[k][...] = np.asarray(a)
    return views


def flat_layout(arrays: dict) -> tuple[np.ndarray, dict[str, int]] | None:
    """(buffer, {name: offset}) if the arrays are contiguous views that tile one 1-D buffer
    exactly, else None."""
    vals = list(arrays.values())
    if not vals or not all(isinstance(a, np.ndarray) for a in vals):
        return None
    base = vals[0].base
    if base is None or base.ndim != 1 or not base.flags.c_contiguous:
        return None
    if any(a.base is not base or not a.flags.c_contiguous or a.dtype != base.dtype for a in vals):
        return None
    start, size = base.__array_interface__["data"][0], base.itemsize
    offsets = {k: (a.__array_interface__["data"][0] - start) // size for k, a in arrays.items()}
    pos = 0
    for k in sorted(arrays, key=offsets.get):
        if offsets[k] != pos:
            return None
        pos += arrays[k].size
    return (base, offsets) if pos == base.size else None

"""The analysis pass: what an op's declarations say about the functions generated for it.

* `storage.py`: the storage conventions (`Arg`, the stored shape of each declared array);
* `op_analysis.py`: `analyse(op)` -> `Analysis` (arguments, size bindings, checks, cache);
* `denominators.py`: the denominators of the printed formulas that must not be 0.
"""

from __future__ import annotations

from .op_analysis import Analysis, analyse
from .storage import Arg, arrays_in, keeps_leading_axes, size_symbols, storage_axis, storage_shape, storage_text

__all__ = [
    "Analysis",
    "analyse",
    "Arg",
    "storage_axis",
    "storage_shape",
    "storage_text",
    "arrays_in",
    "keeps_leading_axes",
    "size_symbols",
]

"""The lowering pass: assignments of the array language -> statements (lines of Python).

* `statements.py`: one assignment -> its temporaries and its value (`Lowering`, the printers'
  binder: common subexpressions and the arguments a printed node reads twice, computed once);
* `inplace.py`: the in-place memory plan of one value (`plan`: a pure function -> `Update`s);
* `body.py`: a function body -> lines (ownership, liveness and `del`, the comments).
"""

from __future__ import annotations

from .body import Block, blocks, lower_body, shape_comment, stored_shape
from .inplace import Facts, Update, plan
from .statements import Lowering, repeated_subtrees

__all__ = [
    "Lowering",
    "repeated_subtrees",
    "Facts",
    "Update",
    "plan",
    "Block",
    "blocks",
    "lower_body",
    "shape_comment",
    "stored_shape",
]

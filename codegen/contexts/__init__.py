"""The context builders: one per kind of generated module, each a dict of text for its template.

* `common.py`: literals, calls, prose, imports and options, shared by every builder;
* `op.py` (with `op_shapes.py`, `torch_module.py`): an op's module;
* `table.py`: a constant table's function; `step.py`: an optimiser step's module;
* `special.py`: generated/numpy/_special.py (derivations/special.py's float32 erf and Φ);
* `modules.py`: a file of tables, a composite, the validation module, the package inits, the
  model's ops by role (generated/model_ops.py).
"""

from __future__ import annotations

from .modules import composite_context, model_ops_context, package_init_context, tables_module_context, validate_context
from .op import op_context
from .special import special_context
from .step import step_context
from .table import table_context

__all__ = [
    "op_context",
    "table_context",
    "step_context",
    "special_context",
    "tables_module_context",
    "composite_context",
    "validate_context",
    "package_init_context",
    "model_ops_context",
]

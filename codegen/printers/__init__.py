"""Strict printers: array-language expressions (derivations/language/arrays.py) -> text.

* `code.py`: printed text with its precedence, the sign rules;
* `base.py`: `ArrayPrinter`, the rules both backends share (names, numbers, + − × ÷, powers);
* `nodes.py`: functions, index-grid arithmetic and the array language's nodes;
* `numpy_printer.py`, `torch_printer.py`: each backend's spelling;
* `formula_printer.py`: the Unicode formula of the comment above each generated statement.
"""

from __future__ import annotations

from ..names import RESERVED_NAMES, PrinterError, check_name
from .base import ArrayPrinter
from .code import MODULE_IMPORTS, Code
from .formula_printer import FormulaPrinter, formula, formula_comment
from .numpy_printer import NumpyPrinter
from .torch_printer import TorchPrinter

__all__ = [
    "PrinterError",
    "ArrayPrinter",
    "NumpyPrinter",
    "TorchPrinter",
    "FormulaPrinter",
    "Code",
    "RESERVED_NAMES",
    "MODULE_IMPORTS",
    "check_name",
    "printer_for",
    "formula",
    "formula_comment",
]


def printer_for(backend: str, **settings) -> ArrayPrinter:
    return {"numpy": NumpyPrinter, "torch": TorchPrinter}[backend](settings)

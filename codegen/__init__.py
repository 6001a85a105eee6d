"""qed's code generator: prints the proven forward/backward formulas of every op in the
registry as NumPy and PyTorch modules under `generated/` (`python -m codegen [--check]`).

* `printers.py`: strict printers, array language -> NumPy / PyTorch text;
* `render.py`: per-op analysis (arguments, sizes, checks, cache) and file layout via Jinja;
* `templates/`: file layout only (no math, nothing specific to one op).
"""
from .printers import NumpyPrinter, PrinterError, TorchPrinter

__all__ = ["NumpyPrinter", "TorchPrinter", "PrinterError"]

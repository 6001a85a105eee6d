"""qed's code generator: prints the proven forward/backward formulas of every op in the
registry as NumPy and PyTorch modules under `generated/` (`python -m codegen [--check]`).

Passes, in order:

* `analysis/`: what an op's declarations say (arguments, storage, sizes, checks, denominators);
* `lowering/`: assignments -> statements (temporaries, the in-place plan, liveness, comments);
* `printers/`: expressions -> text (NumPy, PyTorch, and the Unicode formula of each comment);
* `contexts/`: one context builder per kind of generated module (all text already printed), the
  argument checks of each generated function as one `SIGNATURE` constant (`contexts/signature.py`);
* `support/`: the speed idioms as named helpers, hand-written, copied into generated/<backend>/;
* `render.py`, `headers.py`, `templates/`: file layout via Jinja (no math, nothing specific to
  one op), headers and content hashes; `__main__.py` writes or checks generated/;
* `names.py`: the names generated code may use and the generator's two errors.
"""

from .names import CodegenError, PrinterError
from .printers import NumpyPrinter, TorchPrinter

__all__ = ["NumpyPrinter", "TorchPrinter", "PrinterError", "CodegenError"]

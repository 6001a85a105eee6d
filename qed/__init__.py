"""qed: Transformer formulas proved in SymPy, printed to NumPy and PyTorch, trained as a GPT."""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`qed.check` and `qed.derive`, the notebook API (docs/check.md), and `qed.load`, a trained
    run's model (qed/api.py), loaded on first use: the runtime layer never imports the tools
    (tests/test_imports.py) until one of them is called."""
    if name == "load":
        from .api import load

        return load
    if name in ("check", "derive"):
        from .tools.check import check, derive

        return check if name == "check" else derive
    raise AttributeError(f"module 'qed' has no attribute {name!r}")

"""qed: Transformer formulas proved in SymPy, printed to NumPy and PyTorch, trained as a GPT."""

__version__ = "0.1.0"

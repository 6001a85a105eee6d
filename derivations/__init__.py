"""qed's derivations: every formula of the sources as a SymPy claim with a proof, and the
forward/backward ops that the code generator prints from those very expressions."""

from . import _sympy_fixes  # noqa: F401,E402  (Sum must not fold a Piecewise out of a nested Sum)

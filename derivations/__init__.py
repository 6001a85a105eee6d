"""qed's derivations: every formula of the sources as a SymPy claim with a proof, and the
forward/backward ops that the code generator prints from those very expressions."""

"""The proof machinery: claims and their checker (core.py), the normaliser (rewriting.py),
exact numeric evaluation (numeric.py), expectations (expectation.py), the claims generated
from specifications (obligations.py, tables_steps.py), the derived backwards proved equal to
the hand-written ones (derived.py), mutation and coverage."""

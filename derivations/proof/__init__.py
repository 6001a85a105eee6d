"""The proof machinery: claims and their checker (core.py), the normaliser (rewriting.py),
exact numeric evaluation (numeric.py), expectations (expectation.py), the claims generated
from specifications (obligations.py, tables_steps.py), the derived backwards proved equal to
the hand-written ones (derived.py), the checks of a proof's hypotheses (kinks.py: a kink must be
the specification's, with the printed value in its subdifferential; preconditions.py: an
undecided denominator must be checked by the generated code at run time), mutation and coverage."""

"""The array language: arrays with shape rules and index-form meanings (arrays.py), ops,
tables and steps built from them (ops.py), reverse mode over them (autodiff.py), and their
LaTeX (latex.py)."""

"""LaTeX of the array language, printed by `sympy.latex` (never typed by hand).

    MatMul(A, B) → A B          T(A) → A^{T}            RowSum(A) → \\operatorname{rowsum}(A)
    RowMean(A) → \\operatorname{mean}(A)      RowMax(A) → \\operatorname{rowmax}(A)
    ColSum(A) → \\sum_{\\text{rows}} A       Contract(A, B) → \\sum_{\\text{rows}} A^{T} B
    CausalMask(S) → \\operatorname{mask}(S)   Gather(E, ids) → E[\\mathrm{ids}]
    OneHot(ids, V) → \\operatorname{onehot}(\\mathrm{ids})   Take(A, ids) → A[\\mathrm{ids}]

An `Array` prints as its `latex` name where it has one (`\\hat{x}`), else as SymPy prints its
name.
"""

from __future__ import annotations

import re

import sympy as sp
from sympy.printing.latex import LatexPrinter

from .arrays import Array, ArrayNode, DocumentFunction

DOCUMENT_LETTERS = {"eps": r"\epsilon", "lr": r"\eta", "weight_decay": r"\lambda"}


class ArrayLatexPrinter(LatexPrinter):
    """SymPy's LaTeX printer (π, erf, fractions as SymPy prints them), with the rules below for
    the array language's own nodes taking precedence over their generic `_latex`."""

    def _print(self, expr, **kwargs):
        if isinstance(expr, (Array, ArrayNode, DocumentFunction)):
            rule = getattr(self, "_print_" + type(expr).__name__, None)
            if rule is not None:
                return rule(expr)
        return super()._print(expr, **kwargs)

    def _print_Array(self, e):
        return e.latex_name or self._print_Symbol(e)

    def _print_Symbol(self, e, style="plain"):
        """SymPy's symbol names (gamma → \\gamma, d_k → d_{k}), the options by the documents'
        letters (eps → \\epsilon), and any other word upright, never an italic product."""
        if e.name in DOCUMENT_LETTERS:
            return DOCUMENT_LETTERS[e.name]
        text = super()._print_Symbol(e, style=style) if style != "plain" else super()._print_Symbol(e)
        if re.fullmatch(r"[A-Za-z]{2,}", text):
            return rf"\mathrm{{{text}}}"
        return text

    def _arg(self, e):
        text = self._print(e)
        if isinstance(e, (sp.Add, sp.Mul)) or (isinstance(e, sp.Pow) and e.exp.is_negative):
            return rf"\left({text}\right)"
        return text

    def _print_MatMul(self, e):
        return f"{self._arg(e.args[0])} {self._arg(e.args[1])}"

    def _print_T(self, e):
        return f"{{{self._arg(e.args[0])}}}^{{T}}"

    def _print_ColSum(self, e):
        return rf"\sum_{{\text{{rows}}}} {self._arg(e.args[0])}"

    def _print_Contract(self, e):
        return rf"\sum_{{\text{{rows}}}} {{{self._arg(e.args[0])}}}^{{T}} {self._arg(e.args[1])}"

    def _named(self, e):
        """A node written as a named function of its first argument: rowsum(A), σ(u), …"""
        return rf"{NAMED[type(e).__name__]}\left({self._print(e.args[0])}\right)"

    def _indexed(self, e):
        """A gather: the table's rows (or entries) picked by integer ids, E[ids]."""
        return rf"{self._arg(e.args[0])}\left[{self._print(e.args[1])}\right]"


NAMED = {
    "RowSum": r"\operatorname{rowsum}",
    "RowMean": r"\operatorname{mean}",
    "RowMax": r"\operatorname{rowmax}",
    "CausalMask": r"\operatorname{mask}",
    "OneHot": r"\operatorname{onehot}",
    "Sigmoid": r"\sigma",
    "NormalCDF": r"\Phi",
}
for _node in NAMED:
    setattr(ArrayLatexPrinter, f"_print_{_node}", ArrayLatexPrinter._named)
for _node in ("Gather", "Take"):
    setattr(ArrayLatexPrinter, f"_print_{_node}", ArrayLatexPrinter._indexed)


def latex(expr) -> str:
    return ArrayLatexPrinter().doprint(sp.sympify(expr))


def array_latex(a: Array) -> str:
    return ArrayLatexPrinter().doprint(a)


def assigns_latex(assigns) -> str:
    """`target = value` for each line, joined by `, \\quad`; a flag-guarded line says so."""
    parts = []
    for a in assigns:
        line = f"{array_latex(a.target)} = {latex(a.expr)}"
        if a.when is not None:
            line += rf" \ (\text{{{a.when}}})"
        parts.append(line)
    return r", \quad ".join(parts)

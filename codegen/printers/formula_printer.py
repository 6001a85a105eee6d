"""The formula printer: array-language expressions as a one-line Unicode formula, for the comment
above each generated statement (`# y = exp(x − rowmax(x)) / rowsum(exp(x − rowmax(x)))`)."""

from __future__ import annotations

import sympy as sp
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.str import StrPrinter

from derivations.language.arrays import Contract, MatMul, T, is_scalar

from .code import positive_first, show, split_sign

__all__ = ["FormulaPrinter", "formula", "formula_comment"]

_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_P_ADD, _P_MUL, _P_POW, _P_ATOM = PRECEDENCE["Add"], PRECEDENCE["Mul"], PRECEDENCE["Pow"], PRECEDENCE["Atom"]


class FormulaPrinter(StrPrinter):
    """Array-language expressions as a short one-line Unicode formula, for the comment above
    each generated statement (`# y = exp(x − rowmax(x)) / rowsum(exp(x − rowmax(x)))`).

    The third printer beside NumPy and torch, dispatched the same way (SymPy's `Printer`, on the
    class name), and given the very expression object that they print. Its text is for reading
    only: ⊙ is the elementwise product, · a scalar factor, @ the matrix product, ᵀ the
    transpose, √ the square root, rowsum / rowmax / mean (over the last axis) and colsum (over
    rows and every leading axis) the reductions; arrays and symbols print as they are named
    (a trailing `hat` as a circumflex: `dxhat` is dx̂). A node it has no rule for prints as
    SymPy's text (it never fails: a comment must not stop the generator).
    """

    printmethod = "_qed_formula_print"  # not the nodes' own `_sympystr`: the rules below

    # precedence and parentheses --------------------------------------------------------
    @staticmethod
    def _prec(expr) -> int:
        if isinstance(expr, (MatMul, Contract)):
            return _P_MUL
        if isinstance(expr, T):
            return _P_ATOM
        if isinstance(expr, sp.Pow) and expr.exp == sp.S.Half:
            return _P_ATOM
        if isinstance(expr, sp.Rational) and expr < 0:
            return _P_ADD
        return precedence(expr)

    def _wrap(self, expr, level: int, strict: bool = False) -> str:
        """`expr`, parenthesised where it binds no tighter than `level` (`strict`: also where it
        binds exactly as tight)."""
        p = self._prec(expr)
        text = self._print(expr)
        return f"({text})" if p < level or (strict and p == level) else text

    # atoms -------------------------------------------------------------------------------
    def _print_Symbol(self, expr):
        name = expr.name
        if name.endswith("hat") and len(name) > 3:  # xhat -> x̂, dxhat -> dx̂
            name = name[:-3] + "\u0302"
        return name

    _print_Array = _print_Symbol

    def _print_Integer(self, expr):
        return str(int(expr)).replace("-", "−")

    def _print_Rational(self, expr):
        return f"{'−' if expr.p < 0 else ''}{abs(int(expr.p))}/{int(expr.q)}"

    def _print_Float(self, expr):
        return repr(float(expr)).replace("-", "−")

    def _print_Pi(self, expr):
        return "π"

    def _print_Exp1(self, expr):
        return "e"

    def _print_Infinity(self, expr):
        return "∞"

    def _print_NegativeInfinity(self, expr):
        return "−∞"

    # arithmetic --------------------------------------------------------------------------
    def _print_Add(self, expr):
        terms = positive_first(sorted(expr.as_ordered_terms(), key=is_scalar))  # σ² + ε
        out = []
        for t, term in enumerate(terms):
            neg, mag = split_sign(term)
            text = self._wrap(mag, _P_ADD, strict=neg)
            out.append(("−" if neg else "") + text if t == 0 else (" − " if neg else " + ") + text)
        return "".join(out)

    def _print_Mul(self, expr):
        neg, mag = split_sign(expr)
        if neg:
            return "−" + self._wrap(mag, _P_MUL)
        c, rest = mag.as_coeff_Mul()
        factors = [] if rest == 1 else (list(rest.as_ordered_factors()) if rest.is_Mul else [rest])
        numer, denom = [], []
        if c != 1:
            if c.is_Rational and not c.is_Integer:
                if c.p != 1:
                    numer.append(sp.Integer(c.p))
                denom.append(sp.Integer(c.q))
            else:
                numer.append(c)
        for f in factors:
            if f.is_Pow and f.exp.is_Number and f.exp < 0:
                denom.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            else:
                numer.append(f)
        if not denom and len(numer) == 1:
            return self._print(numer[0])
        num = self._product(numer) if numer else "1"
        if not denom:
            return num
        den = self._product(denom)
        if len(denom) > 1 or self._prec(denom[0]) <= _P_MUL:
            den = f"({den})"
        return f"{num} / {den}"

    def _product(self, factors) -> str:
        """Scalars first, joined with ·, then the arrays, joined with ⊙."""
        scalars = [f for f in factors if is_scalar(f)]
        arrays = [f for f in factors if not is_scalar(f)]
        many = len(factors) > 1
        s = "·".join(self._wrap(f, _P_MUL, strict=many and not f.is_Number) for f in scalars)
        a = " ⊙ ".join(self._wrap(f, _P_MUL, strict=many) for f in arrays)
        return "·".join(t for t in (s, a) if t)

    def _print_Pow(self, expr):
        base, e = expr.base, expr.exp
        if e.is_Number and e < 0:
            pos = base if e == -1 else sp.Pow(base, -e, evaluate=False)
            return "1 / " + self._wrap(pos, _P_MUL, strict=True)
        if e == sp.S.Half:
            return "√" + (self._print(base) if base.is_Atom else f"({self._print(base)})")
        b = self._wrap(base, _P_POW, strict=True)
        if e.is_Integer:
            return b + str(int(e)).translate(_SUPERSCRIPTS)
        return f"{b}^{self._wrap(e, _P_POW, strict=True)}"

    # elementwise functions ---------------------------------------------------------------
    def _call(self, name: str, *args) -> str:
        return f"{name}({', '.join(self._print(a) for a in args)})"

    def _print_Function(self, expr):
        return self._call(type(expr).__name__, *expr.args)

    def _print_exp(self, expr):
        return self._call("exp", *expr.args)

    def _print_Abs(self, expr):
        return f"|{self._print(expr.args[0])}|"

    def _print_Heaviside(self, expr):
        return self._call("H", expr.args[0])

    def _print_floor(self, expr):
        return f"⌊{self._print(expr.args[0])}⌋"

    def _print_Mod(self, expr):
        a, q = expr.args
        return f"{self._wrap(a, _P_MUL, strict=True)} mod {self._wrap(q, _P_MUL, strict=True)}"

    # array-language nodes ----------------------------------------------------------------
    def _print_MatMul(self, expr):
        a, b = expr.args
        return f"{self._wrap(a, _P_MUL, strict=True)} @ {self._wrap(b, _P_MUL, strict=True)}"

    def _print_T(self, expr):
        return self._wrap(expr.args[0], PRECEDENCE["Func"]) + "ᵀ"

    def _print_Contract(self, expr):
        a, b = expr.args  # Σ over rows and every leading axis of aᵀ b
        return f"{self._print(T(a))} @ {self._wrap(b, _P_MUL, strict=True)}"

    def _print_Gather(self, expr):
        table, ids = expr.args
        return f"{self._wrap(table, PRECEDENCE['Func'])}[{self._print(ids)}]"

    def _print_RowBlock(self, expr):
        x, start, size = expr.args
        return f"{self._wrap(x, PRECEDENCE['Func'])}[{self._print(start)} : {self._print(start + size)}]"

    def _print_BlockCausalMask(self, expr):
        return f"causal_{{{self._print(expr.args[1])}}}({self._print(expr.args[0])})"

    def _print_OneHot(self, expr):
        return self._call("onehot", *expr.args)

    def _print_Take(self, expr):
        return self._call("take", *expr.args)

    def emptyPrinter(self, expr):
        return show(expr)


# nodes printed as a call name(args…), one method each
_FORMULA_CALLS = {
    "Max": "max",
    "Min": "min",
    "Sigmoid": "σ",
    "HalfStep": "H",
    "NormalCDF": "Φ",
    "KroneckerDelta": "δ",
    "RowSum": "rowsum",
    "RowMax": "rowmax",
    "RowMean": "mean",
    "ColSum": "colsum",
    "CausalMask": "causal",
}
for _node, _name in _FORMULA_CALLS.items():
    setattr(FormulaPrinter, f"_print_{_node}", lambda self, expr, _name=_name: self._call(_name, *expr.args))


FormulaPrinter._print_Gaussian = lambda self, expr: self._print(expr.document_form())  # e^{−u²/2}
FormulaPrinter._print_Hypot = lambda self, expr: self._print(expr.document_form())  # √(u² + s²)


def formula(expr) -> str:
    """`expr` as a one-line Unicode formula (FormulaPrinter)."""
    return FormulaPrinter().doprint(sp.sympify(expr))


def formula_comment(target: str, expr, width: int = 100, indent: int = 0) -> str:
    """The comment `# <target> = <formula>` for a generated statement, shortened with … so that
    it fits in `width` columns after `indent` spaces."""
    text = f"# {FormulaPrinter()._print_Symbol(sp.Symbol(target))} = {formula(expr)}"
    room = width - indent
    return text if len(text) <= room else text[: room - 1].rstrip() + "…"

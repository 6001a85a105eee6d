"""The printers' shared rules: numbers, names, + − × ÷ and powers, as Python text.

The generated code *is* the proven formula, printed. The printers (`ArrayPrinter` and its NumPy
and PyTorch subclasses) are the only place where a node of the array language becomes Python,
and they are strict: a node they do not know (Piecewise, Sum, Indexed, an undefined function,
...) raises `PrinterError` naming it. Nothing falls back to SymPy's stock printers (which print
`erf` of an array as `math.erf` and an elementwise `exp` of a matrix as `Lambda(...)`).

Rules, common to both backends:

* an `Array` prints as its name, a plain Symbol (a size such as `d_k`, a hyperparameter such
  as `eps`) as its name; names must be valid Python identifiers and not clash with the names
  the generated code uses itself (`np`, `math`, `dtype`, ...: `codegen.names`);
* `+ - * /` print with Python precedence, parenthesised only where needed; integer powers
  2..4 print as repeated multiplication (`x**3` on float32 arrays is ~20x slower than
  `x*x*x`), `x**(1/2)` as sqrt, negative powers as `1/...`;
* a **scalar** subexpression (no Array inside: `1/sqrt(d_k)`, `sqrt(2/pi)`) prints with
  Python's `math` module and plain Python numbers, so it never upcasts a float32 array (a
  NumPy float64 scalar would) and never calls `torch.sqrt` on a Python number;
* exact rationals print as the shorter of an exact decimal (`0.044715`) and a ratio (`(1/2)`).

The functions and the array language's own nodes are in `nodes.py`.

Settings: `names` (Symbol -> Python name), `dtype` (the name of the dtype variable), `arrays`
(plain Symbols that stand for arrays: the index grids of a table, bound to `<backend>.arange`
columns and rows by `grid`), `matrices` (the Arrays stored with exactly two axes: an op's weight
matrices, which lets the NumPy printer fold the other operand's leading axes into one product).

A printer only turns expressions into text. `doprint(expr)` gives one expression; a node that
needs its argument more than once (`ColSum`, `Contract`, `CausalMask`, integer powers) repeats
the argument's text. Statement by statement (`codegen.lowering`), a `binder` is attached: the
printer asks it for the name of such an argument and of every subexpression that occurs more than
once (`binder.repeated`), and prints that name; the binder decides which statement computes it.
"""

from __future__ import annotations

from decimal import Decimal

import sympy as sp
from sympy.printing.printer import Printer

from derivations.language import functions
from derivations.language.arrays import Array, NormalCDF, is_scalar

from ..names import PrinterError, check_name
from .code import (
    ADD,
    ATOM,
    MUL,
    POW,
    UNARY,
    Code,
    max_beside_its_argument,
    positive_first,
    powers_spread,
    reciprocal_power,
    show,
    split_sign,
    square_over,
)
from .nodes import NodeRules

__all__ = ["ArrayPrinter"]


def _ratio_text(p: int, q: int) -> tuple[str, bool]:
    """An exact positive rational p/q as Python text: (text, is_decimal).

    The exact decimal if it exists and is not longer than "p/q" (0.044715, 0.1), else the
    ratio, which Python evaluates to the nearest float (1/2, 1/3, 3/4).
    """
    ratio = f"{p}/{q}"
    m = q
    for f in (2, 5):
        while m % f == 0:
            m //= f
    if m == 1:
        dec = format(Decimal(p) / Decimal(q), "f")
        if len(dec) < len(ratio):
            return dec, True
    return ratio, False


def _read_arrays(e) -> set:
    """The arrays (and entries) an expression reads."""
    e = sp.sympify(e)
    return {a for a in e.free_symbols if isinstance(a, Array)} | e.atoms(sp.Indexed)


class ArrayPrinter(NodeRules, Printer):
    """Shared logic; subclasses fill in the backend's spelling of each node."""

    printmethod = "_qed_codegen_print"  # nothing defines it: no object prints itself
    backend = ""
    _default_settings = {"names": {}, "dtype": "dtype", "arrays": frozenset(), "matrices": frozenset()}

    # backend spellings -----------------------------------------------------------------
    funcs: dict = {}  # SymPy function class -> array function text
    scalar_funcs = {**functions.printed_scalar(), sp.Abs: "abs"}  # a size or constant: `math.`
    inplace = False  # the backend has in-place operators on fresh arrays
    out_funcs: dict = {}  # elementwise functions applied in place (SymPy class -> name)

    def __init__(self, settings=None):
        super().__init__(settings)
        self.modules: set[str] = set()  # modules the printed text needs imported
        self.uses_dtype = False  # whether the text refers to the dtype variable
        self.binder = None  # statement mode: names subexpressions (lowering)
        self.definitions: dict = {}  # array -> the expression a line above assigned it (lowering)

    # public API --------------------------------------------------------------------------
    def doprint(self, expr) -> str:
        return str(self._print(sp.sympify(expr)))

    def code(self, expr) -> Code:
        """`expr` as text with its precedence (a bound subexpression: its name)."""
        return self._print(sp.sympify(expr))

    def node_code(self, expr) -> Code:
        """`expr`'s own rule, even where `expr` itself is bound (the binder computing it)."""
        return Printer._print(self, expr)

    def scalar(self, expr) -> bool:
        return self._scalar(expr)

    def lowered(self, expr):
        """`expr` as this backend prints it statement by statement: Φ written as its formula
        where the backend has no fast call for it (then it is computed in place like the rest)."""
        if not self.ndtr_name:
            expr = expr.replace(lambda e: isinstance(e, NormalCDF), lambda e: e.document_form())
        return expr

    def _print(self, expr, **kwargs):
        if self.binder is not None and expr in self.binder.repeated:
            return self.binder.bind(expr)
        return super()._print(expr, **kwargs)

    # helpers -----------------------------------------------------------------------------
    def emptyPrinter(self, expr):
        raise PrinterError(f"{self.backend} printer: unsupported node {type(expr).__name__} in {show(expr)}")

    def _need(self, module: str) -> None:
        self.modules.add(module)

    def _dtype(self) -> str:
        self.uses_dtype = True
        return self._settings["dtype"]

    @staticmethod
    def _paren(code: Code, above: int) -> str:
        """Parenthesise `code` unless it binds tighter than `above`."""
        return f"({code})" if code.prec <= above else str(code)

    @staticmethod
    def _operand(code: Code, above: int) -> str:
        """As `_paren`, and also wrap text that starts with a unary minus (`a*(-b)`)."""
        return f"({code})" if code.prec <= above or code.startswith("-") else str(code)

    def _atomic(self, expr) -> Code:
        """The argument of a node that uses it more than once: a name or a temporary.

        In expression mode (`doprint`) the text is repeated, parenthesised.
        """
        if isinstance(expr, sp.Symbol) and not getattr(expr, "integer_valued", False):
            return self._print(expr)
        if self.binder is None or self._scalar(expr):
            code = self._print(expr)
            return Code(f"({code})" if code.prec < ATOM else str(code), ATOM)
        return self.binder.bind(expr)

    def _scalar(self, expr) -> bool:
        """No array inside: neither an Array nor a Symbol of the `arrays` setting."""
        expr = sp.sympify(expr)
        grids = self._settings["arrays"]
        return is_scalar(expr) and not (grids and expr.free_symbols & set(grids))

    def _integer_array(self, expr) -> bool:
        """An array-valued expression with integer values (index grids and integer arithmetic
        on them): what parity, floor division and Mod accept."""
        return not self._scalar(expr) and bool(sp.sympify(expr).is_integer)

    # atoms -------------------------------------------------------------------------------
    def _print_Symbol(self, expr):
        name = self._settings["names"].get(expr, expr.name)
        return Code(check_name(name, "symbol"), ATOM)

    def _print_Array(self, expr):
        name = check_name(expr.name, "array")
        if expr.integer_valued:
            # integer ids (T, 1) are stored as (..., T): as a value (a 0/1 mask, say) the
            # length-1 axis comes back and the entries become floats of the working dtype
            if expr.shape[1] != 1:
                raise PrinterError(
                    f"{self.backend} printer: integer array {name} must be declared (T, 1), got {expr.shape}"
                )
            return Code(self._cast(f"{name}[..., None]"), ATOM)
        return Code(name, ATOM)

    def _ids(self, expr) -> str:
        """An index argument (Gather, OneHot, Take): an integer Array, stored as (..., T)."""
        if not (isinstance(expr, Array) and expr.integer_valued):
            raise PrinterError(f"{self.backend} printer: ids must be an integer Array, got {show(expr)}")
        return check_name(expr.name, "array")

    def _print_Dummy(self, expr):
        raise PrinterError(f"{self.backend} printer: bound/dummy symbol {expr} cannot be printed")

    _print_Wild = _print_Dummy

    def _print_Integer(self, expr):
        v = int(expr)
        return Code(str(v), ATOM if v >= 0 else UNARY)

    def _print_Rational(self, expr):
        p, q = int(expr.p), int(expr.q)
        text, is_dec = _ratio_text(abs(p), q)
        if not is_dec:
            text = f"({text})"
        return Code(("-" if p < 0 else "") + text, UNARY if p < 0 else ATOM)

    def _print_Float(self, expr):
        v = float(expr)
        if v != v or v in (float("inf"), float("-inf")):
            raise PrinterError(f"{self.backend} printer: non-finite Float {expr}")
        return Code(repr(v), ATOM if v >= 0 else UNARY)

    def _constant(self, text: str, prec: int = ATOM) -> Code:
        self._need("math")
        return Code(text, prec)

    def _print_Pi(self, expr):
        return self._constant("math.pi")

    def _print_Exp1(self, expr):
        return self._constant("math.e")

    def _print_Infinity(self, expr):
        return self._constant("math.inf")

    def _print_NegativeInfinity(self, expr):
        return self._constant("-math.inf", UNARY)

    def _print_NaN(self, expr):
        raise PrinterError(f"{self.backend} printer: NaN cannot be printed")

    # arithmetic --------------------------------------------------------------------------
    def _print_Add(self, expr):
        terms = positive_first(list(expr.as_ordered_terms()) if expr.is_commutative else list(expr.args))
        groups = max_beside_its_argument(terms, self.definitions)
        out = []
        for g, group in enumerate(groups):
            if g > 0 and len(group) > 1:  # a cancelling pair after other terms: its own sum first
                out.append(f" + ({self._signed_terms(group, first=True)})")
            else:
                out.append(self._signed_terms(group, first=g == 0))
        return Code("".join(out), ADD)

    def _signed_terms(self, terms, first: bool) -> str:
        """`a - b + c`: the first term with its sign where `first`, every other after its sign."""
        out = []
        for t, term in enumerate(terms):
            neg, mag = split_sign(term)
            code = self._print(mag)
            if t == 0 and first:
                out.append("-" + self._paren(code, ADD) if neg else str(code))
            else:
                out.append((" - " if neg else " + ") + self._paren(code, ADD if neg else ADD - 1))
        return "".join(out)

    def _print_Mul(self, expr):
        neg, mag = split_sign(expr)
        if neg:
            code = self._print(mag)
            if code.prec == MUL and not code.startswith("-"):
                return Code("-" + code, MUL)  # -a*b == (-a)*b
            return Code("-" + self._operand(code, MUL), UNARY)
        c, rest = mag.as_coeff_Mul()
        factors = list(rest.as_ordered_factors()) if rest.is_Mul else [rest]
        if rest == 1:
            factors = []
        numer: list = []
        denom: list = []
        lead: list[str] = []
        lead_value = c  # the number that `lead` stands for
        if c != 1:
            if c.is_Rational and not c.is_Integer:
                text, is_dec = _ratio_text(int(c.p), int(c.q))
                if is_dec:
                    lead.append(text)
                else:
                    if c.p != 1:
                        lead.append(str(int(c.p)))
                    lead_value = sp.Integer(c.p)
                    denom.append(sp.Integer(c.q))
            else:
                lead.append(str(self._print(c)))
        repeated = self.binder.repeated if self.binder is not None else ()
        factors = square_over(factors, lambda f: f in repeated or self._scalar(f))
        factors = powers_spread(factors, lambda f: f in repeated or self._scalar(f))
        quotients = [f for f in factors if f.is_Mul]  # u/g of u·(u/g): printed in parentheses
        for f in factors:
            hoisted = self.binder is not None and f in self.binder.repeated
            f = f if hoisted or self._scalar(f) else reciprocal_power(f)
            if f.is_Pow and f.exp.is_Number and f.exp < 0 and not hoisted:
                denom.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            else:
                numer.append(f)
        if not lead and not denom and len(numer) == 1:  # an unevaluated Mul(x)
            return self._print(numer[0])
        scalar_den = [f for f in denom if self._scalar(f)]
        scalar_num = [f for f in numer if self._scalar(f)]
        if scalar_den and (lead or scalar_num) and len(scalar_num) < len(numer):
            # c·√2·x/(2√π): the scalar factors as one number first, so the array is touched once
            # (Python multiplies left to right: √2·x/2 would be two passes over x)
            s_code = self._print(lead_value * sp.Mul(*scalar_num) / sp.Mul(*scalar_den))
            numer = [f for f in numer if not self._scalar(f)]
            denom = [f for f in denom if not self._scalar(f)]
            lead = [self._operand(s_code, MUL - 1)]
        # scalars first: Python evaluates left to right, so scalar products stay scalar
        numer.sort(key=lambda e: not self._scalar(e))
        denom.sort(key=lambda e: not self._scalar(e))
        recips = [f for f in numer if f.is_Pow and f.base.is_Pow and f.base.exp == -1 and f.exp.is_Integer]
        interleave = len(recips) == 1 and any(not self._scalar(f) for f in numer if f is not recips[0])
        if interleave:
            # the factors that read what g reads first, each then divided by g: z·(1/g)·dy·(1/g)·x
            # for g = hypot(z, 1), where dy·(1/g)·x·(1/g) would underflow (1e-30·1e-30 in float32)
            # before z brings the product back into range
            below = self._reads(recips[0].base)
            numer.sort(key=lambda e: (not self._scalar(e), not (self._reads(e) & below)))
        texts = []
        left = int(recips[0].exp) if interleave else 0
        for f in numer:
            if interleave and f is recips[0]:
                continue
            texts.append(
                f"({self._print(f)})" if any(f is q for q in quotients) else self._operand(self._print(f), MUL - 1)
            )
            if left and not self._scalar(f):
                # (1/g)^k after the array factors one at a time: u·(1/g)·w·(1/g), left to right, so that
                # u·w (x·(x + 3) ~ g²) is never formed whole where the quotient is in range
                texts.append(str(self._atomic(recips[0].base)))
                left -= 1
        if left:
            texts += [str(self._atomic(recips[0].base))] * left
        num_txt = lead + texts
        text = "*".join(num_txt) if num_txt else "1"
        if denom:
            if len(denom) == 1:
                den = self._operand(self._print(denom[0]), MUL)
            else:
                den = "(" + "*".join(self._operand(self._print(f), MUL - 1) for f in denom) + ")"
            text = f"{text}/{den}"
        return Code(text, MUL)

    def _reads(self, e, depth: int = 4) -> set:
        """The arrays (and entries) e reads, through the lines above that defined them
        (hypot0 = hypot(z, 1) reads z)."""
        found = _read_arrays(e)
        if depth:
            for a in list(found):
                if a in self.definitions:
                    found |= self._reads(self.definitions[a], depth - 1)
        return found

    def _print_Pow(self, expr):
        base, e = expr.base, expr.exp
        scalar = self._scalar(expr)
        if base == -1 and not scalar:
            if not self._integer_array(e):
                raise PrinterError(
                    f"{self.backend} printer: (-1)**e needs an integer-valued exponent, got {show(expr)}"
                )
            return Code(f"(1 - 2*({self._operand(self._print(e), MUL)} % 2))", ATOM)
        if e == -sp.S.Half and not scalar and self.rsqrt_name:  # 1/√u in one call
            return Code(self._call(self.rsqrt_name, self._print(base)), ATOM)
        if not scalar and reciprocal_power(expr) is not expr:  # 1/R^k as (1/R)^k (R reads a hypot)
            return self._print(reciprocal_power(expr))
        if e.is_Number and e < 0:
            pos = self._print(sp.Pow(base, -e, evaluate=False) if e != -1 else base)
            return Code(f"1/{self._operand(pos, MUL)}", MUL)
        if e == sp.S.Half:
            return self._sqrt(base, scalar)
        if e.is_Integer and 2 <= int(e) <= 4:
            b = self._atomic(base) if not scalar else self._print(base)
            b = self._operand(b, MUL - 1) if b.prec != ATOM else str(b)
            return Code("*".join([b] * int(e)), MUL)
        if e == 1:
            return self._print(base)
        if e.is_Rational and e.q == 2 and 1 < e.p < 11:  # x**(3/2) -> x*sqrt(x)
            b = self._atomic(base) if not scalar else self._print(base)
            bt = self._operand(b, MUL - 1) if b.prec != ATOM else str(b)
            whole = [bt] * ((int(e.p) - 1) // 2)
            return Code("*".join(whole + [self._sqrt_text(bt, scalar)]), MUL)
        if e == 0:
            raise PrinterError(f"{self.backend} printer: unevaluated power {expr} with exponent 0")
        b = self._print(base)
        x = self._print(e)
        return Code(f"{self._operand(b, POW)}**{self._operand(x, POW - 1)}", POW)

    def _sqrt(self, base, scalar: bool) -> Code:
        return Code(self._sqrt_text(self._print(base), scalar), ATOM)

    def _sqrt_text(self, arg: str, scalar: bool) -> str:
        if scalar:
            self._need("math")
            return f"math.sqrt({arg})"
        return self._call(self.sqrt_name, arg)

    def _call(self, fname: str, *args) -> str:
        self._need(fname.split(".")[0] if not fname.startswith("scipy.") else "scipy.special")
        return f"{fname}({', '.join(str(a) for a in args)})"

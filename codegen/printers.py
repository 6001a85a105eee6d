"""Strict printers: array-language expressions (derivations/language/arrays.py) -> NumPy / PyTorch text.

The generated code *is* the proven formula, printed. These printers are the only place where a
node of the array language becomes Python, and they are strict: a node they do not know
(Piecewise, Sum, Indexed, an undefined function, ...) raises `PrinterError` naming it. Nothing
falls back to SymPy's stock printers (which print `erf` of an array as `math.erf` and an
elementwise `exp` of a matrix as `Lambda(...)`).

Rules, common to both backends:

* an `Array` prints as its name, a plain Symbol (a size such as `d_k`, a hyperparameter such
  as `eps`) as its name; names must be valid Python identifiers and not clash with the names
  the generated code uses itself (`np`, `math`, `dtype`, ...);
* `Sigmoid(u)` (σ, the array language's logistic node) prints as the library's overflow-free
  `scipy.special.expit(u)` / `torch.sigmoid(u)`, never as `1/(1 + exp(-u))`;
* `+ - * /` print with Python precedence, parenthesised only where needed; integer powers
  2..4 print as repeated multiplication (`x**3` on float32 arrays is ~20x slower than
  `x*x*x`), `x**(1/2)` as sqrt, negative powers as `1/...`;
* a **scalar** subexpression (no Array inside: `1/sqrt(d_k)`, `sqrt(2/pi)`) prints with
  Python's `math` module and plain Python numbers, so it never upcasts a float32 array (a
  NumPy float64 scalar would) and never calls `torch.sqrt` on a Python number;
* exact rationals print as the shorter of an exact decimal (`0.044715`) and a ratio (`(1/2)`);
* integer arithmetic on index grids (a table's `row`, `col`, see `arrays`): `KroneckerDelta(a, b)`
  prints as the equality `(a == b)` cast to the float dtype, `(-1)**c` as the parity sign
  `(1 - 2*(c % 2))`, `floor(a/q)` as `(a // q)` and `Mod(a, q)` as `(a % q)` (integer arguments
  only: anything else is an error).

Settings: `names` (Symbol -> Python name), `dtype` (the name of the dtype variable), `arrays`
(plain Symbols that stand for arrays: the index grids of a table, bound to `<backend>.arange`
columns and rows by `grid`).

Two ways to print:

* `doprint(expr)` gives one expression; a node that needs its argument more than once
  (`ColSum`, `Contract`, `CausalMask`, integer powers) repeats the argument's text;
* `print_assign(target, expr)` gives the lines of one assignment; such arguments (when they are
  not plain names) are first bound to temporaries `_t0, _t1, ...`, computed once.
"""
from __future__ import annotations

import keyword
from decimal import Decimal

import sympy as sp
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.printer import Printer
from sympy.printing.str import StrPrinter

# The array-language nodes (MatMul, T, RowSum, ..., Take) are printed by the `_print_<Node>`
# methods below: SymPy's Printer dispatches on the class name.
from derivations.language.arrays import Array, Contract, MatMul, NormalCDF, T, is_scalar, shape_of

__all__ = ["PrinterError", "NumpyPrinter", "TorchPrinter", "FormulaPrinter", "Code",
           "RESERVED_NAMES", "check_name", "printer_for", "formula", "formula_comment"]


class PrinterError(ValueError):
    """An expression cannot be printed (unsupported node, bad name, ...)."""


# Python precedence levels (higher binds tighter).
ADD, MUL, UNARY, POW, ATOM = 10, 20, 30, 40, 100

# Names that generated code uses itself; an Array or Symbol may not be called like this.
RESERVED_NAMES = frozenset({
    "np", "math", "scipy", "torch", "nn", "F", "dtype", "cache", "ctx", "self", "grads",
    "annotations", "_v", "device",
})


class Code(str):
    """Printed text that remembers the precedence of its outermost operation."""

    prec: int

    def __new__(cls, text: str, prec: int):
        obj = super().__new__(cls, text)
        obj.prec = prec
        return obj


def check_name(name: str, what: str = "name") -> str:
    """A name that the generated code can use as is, or PrinterError."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise PrinterError(f"{what} {name!r} is not a valid Python identifier")
    if name in RESERVED_NAMES or (name.startswith("_t") and name[2:].isdigit()):
        raise PrinterError(f"{what} {name!r} clashes with a name the generated code uses")
    return name


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


def _show(expr) -> str:
    """SymPy's text for an expression, for error messages (never fails)."""
    try:
        return sp.sstr(expr)
    except Exception:  # noqa: BLE001 - sstr has no rule for some custom nodes (MatMul)
        return sp.srepr(expr)


def _repeated_subtrees(expr, scalar=is_scalar) -> set:
    """Array-valued subexpressions that occur more than once in `expr`.

    A repeat is not descended into, so the parts of a repeated subtree are not counted twice
    (in `exp(x - m)/rowsum(exp(x - m))` only `exp(x - m)` repeats).
    """
    seen: dict = {}

    def visit(e):
        if e.is_Atom or scalar(e):
            return
        if e in seen:
            seen[e] += 1
            return
        seen[e] = 1
        for a in e.args:
            visit(a)

    visit(expr)
    return {e for e, n in seen.items() if n > 1}


class _ArrayPrinter(Printer):
    """Shared logic; subclasses fill in the backend's spelling of each node."""

    printmethod = "_qed_codegen_print"   # nothing defines it: no object prints itself
    backend = ""
    # matrices: the Arrays stored with exactly two axes (an op's weight matrices), which lets
    # the NumPy printer fold the other operand's leading axes into one matrix product
    _default_settings = {"names": {}, "dtype": "dtype", "arrays": frozenset(), "matrices": frozenset()}

    # backend spellings -----------------------------------------------------------------
    funcs: dict = {}          # SymPy function class -> array function text
    scalar_funcs = {sp.exp: "math.exp", sp.log: "math.log", sp.tanh: "math.tanh",
                    sp.erf: "math.erf", sp.sin: "math.sin", sp.cos: "math.cos", sp.Abs: "abs"}

    def __init__(self, settings=None):
        super().__init__(settings)
        self.modules: set[str] = set()      # modules the printed text needs imported
        self.uses_dtype = False             # whether the text refers to the dtype variable
        self._lines: list[str] | None = None  # statement mode: hoisted temporaries
        self._memo: dict = {}
        self._repeated: set = set()
        self._stored_shape = None           # print_assign's stored-shape function, if any
        self._dead: frozenset = frozenset()  # arrays read here for the last time (may be taken over)
        self._computed_once: frozenset = frozenset()   # the statement's temporaries
        self._whole = None                  # the statement's expression
        self._temps = 0

    # public API --------------------------------------------------------------------------
    def doprint(self, expr) -> str:
        return str(self._print(sp.sympify(expr)))

    def print_assign(self, target: str, expr, full=None, dead=frozenset()) -> list[str]:
        """Lines computing `target = expr`.

        A subexpression that occurs more than once (`exp(x - max(x))` in a softmax), or that a
        node needs more than once (`ColSum`, `CausalMask`, `x**2`), is bound to a temporary
        `_tN` first and computed once; the value is the same expression, only named.

        `full(e)`, if given, says the stored shape of a subexpression e (anything comparable;
        None: unknown). Printers with `inplace` then compute the value in place where that is
        the same computation: the first operand of a sum or product that is itself computed
        (not an input) and has the result's full shape becomes `target`, and the other
        operands are applied with `+=`, `-=`, `*=`, `/=`, an elementwise function with
        `out=target` (see `_inplace`). One allocation instead of one per operation.

        `dead`: arrays this statement reads for the last time that were computed as new arrays
        above it (the caller knows: `render._body`). Such an array, or a temporary, may become
        the target itself when the statement is that array and one more operand, and every read
        of it is inside that one in-place operation (`ds = datt; ds -= delta`).
        """
        expr = sp.sympify(expr)
        if not self.ndtr_name:                      # Φ as its formula, printed in place
            expr = expr.replace(lambda e: isinstance(e, NormalCDF), lambda e: e.document_form())
        self._lines, self._memo, self._repeated = [], {}, _repeated_subtrees(expr, self._scalar)
        self._stored_shape, self._dead, self._whole = full, frozenset(dead), expr
        self._computed_once = frozenset(self._repeated)
        try:
            fused = self._fused_bias_matmul(expr)
            if fused is not None:
                return self._lines + [f"{target} = {fused}"]
            if self.inplace and full is not None and not self._scalar(expr) \
                    and target not in {a.name for a in expr.free_symbols if isinstance(a, Array)}:
                lines = self._inplace(target, expr, full)
                if lines is not None:
                    return lines
            text = self._print(expr)
            return self._lines + [f"{target} = {text}"]
        finally:
            self._lines, self._memo, self._repeated, self._stored_shape = None, {}, set(), None
            self._dead = frozenset()

    inplace = False           # the backend has in-place operators on fresh arrays (NumPy)
    out_funcs: dict = {}      # elementwise functions applied in place (SymPy class -> name)
    _VIEWS = ("T", "Gather", "Take", "CausalMask", "OneHot")   # nodes whose value may be a view

    def _inplace(self, target: str, expr, full) -> list[str] | None:
        """The statements of `target = expr` evaluated in place (None: nothing to gain)."""
        out: list[str] = []
        want = full(expr)
        if want is None:
            return None

        def emit(stmt: str) -> None:
            out.extend(self._lines)                 # hoisted temporaries first, in order
            self._lines.clear()
            out.append(stmt)

        def computed(e) -> bool:
            """A new array of the result's full shape (never an input, a view or a temporary
            that is read again)."""
            return not (self._scalar(e) or isinstance(e, (Array, sp.Symbol)) or e in self._repeated
                        or type(e).__name__ in self._VIEWS) and full(e) == want

        def taken_over(pick, other) -> bool:
            """`target = pick ∘ other` on a temporary `pick` that this statement alone reads,
            in one in-place operation: the other operand (which may read the temporary, as
            softmax's row sum does) is evaluated before the write, so the temporary's array can
            become the target's. Not with a view operand (it would overlap the write)."""
            own = pick in self._repeated or (isinstance(pick, Array) and pick in self._dead)
            if not (own and full(pick) == want and not self._scalar(other)):
                return False
            # every read of `pick` in the whole statement is in this one operation
            if self._reads(self._whole, pick) != self._reads(sp.Add(pick, other, evaluate=False), pick):
                return False
            return not any(type(a).__name__ in self._VIEWS for a in sp.preorder_traversal(other))

        def build(e) -> None:
            if isinstance(e, sp.Add):
                terms = list(e.as_ordered_terms())
                fresh = [t for t in terms if computed(self._split_sign(t)[1])]
                pick = next((t for t in fresh if not self._split_sign(t)[0]), None) or next(iter(fresh), None)
                if pick is None and len(terms) == 2:
                    for a, b in (terms, terms[::-1]):
                        if not self._split_sign(a)[0] and taken_over(a, self._split_sign(b)[1]):
                            emit(f"{target} = {self._print(a)}")
                            neg, mag = self._split_sign(b)
                            emit(f"{target} {'-=' if neg else '+='} {self._print(mag)}")
                            return
                if pick is not None:
                    neg, mag = self._split_sign(pick)
                    build(mag)
                    if neg:                          # −a + b …: a, negated in place
                        emit(self._in_place_call("negative", target))
                    for t in terms:
                        if t is not pick:
                            neg, mag = self._split_sign(t)
                            emit(f"{target} {'-=' if neg else '+='} {self._print(mag)}")
                    return
            elif isinstance(e, sp.Mul):
                coeff, rest = e.as_coeff_Mul()
                factors = list(rest.as_ordered_factors()) if rest.is_Mul else [rest]
                numer = [f for f in factors if not (f.is_Pow and f.exp.is_Number and f.exp < 0)]
                denom = [f.base if f.exp == -1 else sp.Pow(f.base, -f.exp) for f in factors if f not in numer]
                pick = next((f for f in numer if computed(f)), None)
                arrays = [f for f in numer + denom if not self._scalar(f)]
                if pick is None and coeff == 1 and len(factors) == 2 and len(arrays) == 2:
                    for own, other in (arrays, arrays[::-1]):   # a·b: either may be taken over
                        if own in numer and taken_over(own, other):
                            emit(f"{target} = {self._print(own)}")
                            emit(f"{target} {'*=' if other in numer else '/='} {self._print(other)}")
                            return
                dpick = next((f for f in denom if computed(f)), None)
                if pick is None and dpick is not None and sum(not self._scalar(f) for f in numer) <= 1:
                    # a / (computed d): d in place, then target = a / target (one new array)
                    build(dpick)
                    for f in denom:
                        if f is not dpick and not self._scalar(f):
                            emit(f"{target} *= {self._print(f)}")
                    s = coeff * sp.Mul(*[f for f in numer if self._scalar(f)]) \
                        / sp.Mul(*[f for f in denom if self._scalar(f)])
                    a = next((f for f in numer if not self._scalar(f)), None)
                    if s != 1 and a is not None:     # fold the scalar into the denominator
                        emit(f"{target} *= {self._print(1 / s)}")
                    emit(self._in_place_divide(self._print(a if a is not None else s), target))
                    return
                if pick is not None:
                    build(pick)
                    s_num = coeff * sp.Mul(*[f for f in numer if self._scalar(f)])
                    s_den = sp.Mul(*[f for f in denom if self._scalar(f)])
                    if s_num != 1:                   # the scalar factors: one pass
                        emit(f"{target} *= {self._print(s_num / s_den)}")
                    elif s_den != 1:
                        emit(f"{target} /= {self._print(s_den)}")
                    for f in numer:
                        if f is not pick and not self._scalar(f):
                            emit(f"{target} *= {self._print(f)}")
                    for f in denom:
                        if not self._scalar(f):
                            emit(f"{target} /= {self._print(f)}")
                    return
            elif e.is_Pow and e.exp == sp.S.Half and computed(e.base):     # √ in place
                build(e.base)
                emit(self._in_place_call("sqrt", target))
                return
            elif type(e) in self.out_funcs and len(e.args) == 1 and computed(e.args[0]):
                build(e.args[0])
                emit(self._in_place_call(self.out_funcs[type(e)], target))
                return
            code = self._print(e)
            if code.isidentifier():                  # never alias a name: it is read elsewhere
                raise PrinterError(f"{self.backend} printer: in-place start {code} is a name")
            emit(f"{target} = {code}")

        build(expr)
        return out

    def _reads(self, tree, a) -> int:
        """How many times the statement's code reads `a` in `tree`: each repeated subtree (a
        temporary, computed once) counted once."""
        seen: set = set()

        def count(e) -> int:
            if e == a:
                return 1
            if e in self._computed_once:
                if e in seen:
                    return 0
                seen.add(e)
            return sum(count(x) for x in e.args)

        return count(sp.sympify(tree))

    def _in_place_call(self, name: str, target: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _in_place_divide(self, numerator: str, target: str) -> str:  # pragma: no cover - abstract
        """`target = numerator / target`, written into target."""
        raise NotImplementedError

    def print_causal_in_place(self, target: str) -> list[str]:
        """Lines for `target = CausalMask(target)` on a fresh array that may be overwritten:
        M_ij = −∞ for j > i written into it, no new m×n array."""
        raise NotImplementedError  # pragma: no cover - abstract

    def _print(self, expr, **kwargs):
        if self._lines is not None and expr in self._repeated:
            return self._hoist(expr)
        return super()._print(expr, **kwargs)

    def _hoist(self, expr) -> Code:
        """Statement mode: bind `expr` to a temporary (once) and return its name. With the
        stored shapes known (`full`), the temporary is computed in place like an assignment
        (`_t0 = s - max(s)` then `exp(_t0, out=_t0)`: one new array, not two)."""
        if expr in self._memo:
            return self._memo[expr]
        if self.inplace and self._stored_shape is not None and not self._scalar(expr):
            pending, memo, temps = self._lines, dict(self._memo), self._temps
            self._lines = []                        # this temporary's lines (and its own temporaries)
            name = f"_t{self._temps}"
            self._temps += 1
            self._repeated.discard(expr)            # inside its own build: printed, not named
            try:
                lines = self._inplace(name, expr, self._stored_shape)
            except PrinterError:
                lines = None
            finally:
                self._repeated.add(expr)
            if lines is not None:
                self._lines = pending + lines
                self._memo[expr] = Code(name, ATOM)
                return self._memo[expr]
            self._lines, self._memo, self._temps = pending, memo, temps
        code = super()._print(expr)
        if code.prec == ATOM and code.isidentifier():
            return code
        name = f"_t{self._temps}"
        self._temps += 1
        self._lines.append(f"{name} = {code}")
        self._memo[expr] = Code(name, ATOM)
        return self._memo[expr]

    # helpers -----------------------------------------------------------------------------
    def emptyPrinter(self, expr):
        raise PrinterError(f"{self.backend} printer: unsupported node {type(expr).__name__} "
                           f"in {_show(expr)}")

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
        if self._lines is None or self._scalar(expr):
            code = self._print(expr)
            return Code(f"({code})" if code.prec < ATOM else str(code), ATOM)
        return self._hoist(expr)

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
                raise PrinterError(f"{self.backend} printer: integer array {name} must be "
                                   f"declared (T, 1), got {expr.shape}")
            return Code(self._cast(f"{name}[..., None]"), ATOM)
        return Code(name, ATOM)

    def _ids(self, expr) -> str:
        """An index argument (Gather, OneHot, Take): an integer Array, stored as (..., T)."""
        if not (isinstance(expr, Array) and expr.integer_valued):
            raise PrinterError(f"{self.backend} printer: ids must be an integer Array, got "
                               f"{_show(expr)}")
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

    def _print_Pi(self, expr):
        self._need("math")
        return Code("math.pi", ATOM)

    def _print_Exp1(self, expr):
        self._need("math")
        return Code("math.e", ATOM)

    def _print_Infinity(self, expr):
        self._need("math")
        return Code("math.inf", ATOM)

    def _print_NegativeInfinity(self, expr):
        self._need("math")
        return Code("-math.inf", UNARY)

    def _print_NaN(self, expr):
        raise PrinterError(f"{self.backend} printer: NaN cannot be printed")

    # arithmetic --------------------------------------------------------------------------
    @staticmethod
    def _positive_first(terms: list) -> list:
        """A positive term first reads better: x - max(x) rather than -max(x) + x."""
        for t, term in enumerate(terms):
            if not _ArrayPrinter._split_sign(term)[0]:
                return [term] + terms[:t] + terms[t + 1:]
        return terms

    @staticmethod
    def _split_sign(expr):
        """(negative, |expr|) for a term whose numeric coefficient is negative."""
        if expr.is_Number:
            return (True, -expr) if expr < 0 else (False, expr)
        if expr.is_Mul:
            c, rest = expr.as_coeff_Mul()
            if c.is_Number and c < 0:
                if c == -1:
                    return True, rest
                return True, sp.Mul(-c, rest, evaluate=False)
        return False, expr

    def _print_Add(self, expr):
        terms = self._positive_first(list(expr.as_ordered_terms()) if expr.is_commutative
                                     else list(expr.args))
        out = []
        for t, term in enumerate(terms):
            neg, mag = self._split_sign(term)
            code = self._print(mag)
            if t == 0:
                out.append("-" + self._paren(code, ADD) if neg else str(code))
            else:
                out.append((" - " if neg else " + ") + self._paren(code, ADD if neg else ADD - 1))
        return Code("".join(out), ADD)

    def _print_Mul(self, expr):
        neg, mag = self._split_sign(expr)
        if neg:
            code = self._print(mag)
            if code.prec == MUL and not code.startswith("-"):
                return Code("-" + code, MUL)          # -a*b == (-a)*b
            return Code("-" + self._operand(code, MUL), UNARY)
        c, rest = mag.as_coeff_Mul()
        factors = list(rest.as_ordered_factors()) if rest.is_Mul else [rest]
        if rest == 1:
            factors = []
        numer: list = []
        denom: list = []
        lead: list[str] = []
        lead_value = c                       # the number that `lead` stands for
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
        for f in factors:
            hoisted = self._lines is not None and f in self._repeated
            if f.is_Pow and f.exp.is_Number and f.exp < 0 and not hoisted:
                denom.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            else:
                numer.append(f)
        if not lead and not denom and len(numer) == 1:   # an unevaluated Mul(x)
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
        num_txt = lead + [self._operand(self._print(f), MUL - 1) for f in numer]
        text = "*".join(num_txt) if num_txt else "1"
        if denom:
            if len(denom) == 1:
                den = self._operand(self._print(denom[0]), MUL)
            else:
                den = "(" + "*".join(self._operand(self._print(f), MUL - 1) for f in denom) + ")"
            text = f"{text}/{den}"
        return Code(text, MUL)

    def _print_Pow(self, expr):
        base, e = expr.base, expr.exp
        scalar = self._scalar(expr)
        if base == -1 and not scalar:
            if not self._integer_array(e):
                raise PrinterError(f"{self.backend} printer: (-1)**e needs an integer-valued "
                                   f"exponent, got {_show(expr)}")
            return Code(f"(1 - 2*({self._operand(self._print(e), MUL)} % 2))", ATOM)
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
        if e.is_Rational and e.q == 2 and 1 < e.p < 11:   # x**(3/2) -> x*sqrt(x)
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

    # elementwise functions ---------------------------------------------------------------
    def _print_elementwise(self, expr):
        fn = type(expr)
        if self._scalar(expr):
            name = self.scalar_funcs.get(fn)
            if name is None:
                raise PrinterError(f"{self.backend} printer: no scalar form for "
                                   f"{fn.__name__} in {_show(expr)}")
            if name.startswith("math."):
                self._need("math")
            return Code(f"{name}({self._print(expr.args[0])})", ATOM)
        name = self.funcs.get(fn)
        if name is None or len(expr.args) != 1:
            return self.emptyPrinter(expr)
        return Code(self._call(name, self._print(expr.args[0])), ATOM)

    _print_exp = _print_tanh = _print_erf = _print_sin = _print_cos = \
        _print_Abs = _print_sign = _print_elementwise

    def _print_Sigmoid(self, expr):
        """σ(u) = 1/(1 + e^{−u}) as the library's overflow-free logistic function."""
        (u,) = expr.args
        if self._scalar(expr):
            raise PrinterError(f"{self.backend} printer: no scalar form for Sigmoid in {_show(expr)}")
        return Code(self._call(self.sigmoid_name, self._print(u)), ATOM)

    ndtr_name = ""

    def _print_NormalCDF(self, expr):
        """Φ(u) = (1 + erf(u/√2))/2 as one library call where the backend has a fast one (a
        scalar, or no such call: the formula itself)."""
        (u,) = expr.args
        if self._scalar(expr) or not self.ndtr_name:
            return self._print(expr.document_form())
        return Code(self._call(self.ndtr_name, self._print(u)), ATOM)

    def _print_log(self, expr):
        if len(expr.args) != 1:
            raise PrinterError(f"{self.backend} printer: log with a base: {_show(expr)}")
        return self._print_elementwise(expr)

    def _print_Heaviside(self, expr):
        x, h0 = expr.args if len(expr.args) == 2 else (expr.args[0], None)
        if h0 == 0:
            op = ">"
        elif h0 == 1:
            op = ">="
        else:
            raise PrinterError(f"{self.backend} printer: Heaviside needs H(0) = 0 or 1, got "
                               f"{_show(expr)}")
        if self._scalar(x):
            raise PrinterError(f"{self.backend} printer: Heaviside of a scalar: {_show(expr)}")
        return Code(self._cast(f"({self._print(x)} {op} 0)"), ATOM)

    def _print_Max(self, expr):
        return self._minmax(expr, "max")

    def _print_Min(self, expr):
        return self._minmax(expr, "min")

    def _minmax(self, expr, which: str) -> Code:
        if self._scalar(expr):
            return Code(f"{which}({', '.join(self._print(a) for a in expr.args)})", ATOM)
        arrays = [a for a in expr.args if not self._scalar(a)]
        scalars = [a for a in expr.args if self._scalar(a)]
        code = str(self._print(arrays[0]))
        for a in arrays[1:]:
            code = self._pair(which, code, str(self._print(a)))
        if scalars:
            s = self._print(scalars[0]) if len(scalars) == 1 else \
                f"{which}({', '.join(self._print(a) for a in scalars)})"
            code = self._with_scalar(which, code, str(s))
        return Code(code, ATOM)

    # integer arithmetic on index grids --------------------------------------------------
    def _print_KroneckerDelta(self, expr):
        a, b = expr.args
        if self._scalar(expr):
            raise PrinterError(f"{self.backend} printer: KroneckerDelta of scalars: {_show(expr)}")
        return Code(self._cast(f"({self._print(a)} == {self._print(b)})"), ATOM)

    def _integer_operands(self, expr, what: str):
        args = expr.args
        if self._scalar(expr) or not all(sp.sympify(a).is_integer for a in args):
            raise PrinterError(f"{self.backend} printer: {what} needs integer-valued array "
                               f"arguments, got {_show(expr)}")
        return args

    def _print_Mod(self, expr):
        a, q = self._integer_operands(expr, "Mod")
        if not (q.is_Integer and q > 0):
            raise PrinterError(f"{self.backend} printer: Mod needs a positive integer modulus, "
                               f"got {_show(expr)}")
        return Code(f"({self._operand(self._print(a), MUL)} % {self._print(q)})", ATOM)

    def _print_floor(self, expr):
        (arg,) = expr.args
        num, den = sp.fraction(sp.together(arg))
        if self._scalar(expr) or not num.is_integer or not (den.is_Integer and den > 0):
            raise PrinterError(f"{self.backend} printer: floor needs (integer array)/(positive "
                               f"integer), got {_show(expr)}")
        return Code(f"({self._operand(self._print(num), MUL)} // {self._print(den)})", ATOM)

    # tables: index grids and the finished array -----------------------------------------
    def grid(self, size, axis: int) -> str:
        """The integers 0..size-1 along `axis` (0: a column (size, 1), 1: a row (1, size)),
        held as float64: integer-valued floats are exact up to 2**53, and float64 keeps
        `row*omega` from being computed in float32 (torch promotes an int tensor times a
        Python float to its default dtype, float32)."""
        text = self._grid(str(self._print(sp.sympify(size))))
        return text + ("[:, None]" if axis == 0 else "[None, :]")

    def print_table_array(self, target: str, expr, shape) -> list[str]:
        """Lines computing `target` = `expr` (an expression on the index grids) as a fresh array
        of exactly `shape` (rows, cols) and the requested dtype: computed in float64 (Python
        numbers and float64 grids), broadcast to the shape, rounded once by the cast."""
        dims = ", ".join(str(self._print(sp.sympify(d))) for d in shape)
        if self._scalar(expr):
            return [f"{target} = {self._full(dims, str(self._print(sp.sympify(expr))))}"]
        lines = self.print_assign(target, expr)
        return lines + [f"{target} = {self._broadcast_cast(Code(target, ATOM), dims)}"]

    # array-language nodes ----------------------------------------------------------------
    def _print_MatMul(self, expr):
        left, right = expr.args
        if self.fold_leading and self._matrix(right) and not self._matrix(left):
            return self._folded_matmul(left, right)
        a, b = (self._operand(self._print(x), MUL) for x in expr.args)
        return Code(f"({a} @ {b})", ATOM)

    fold_leading = False      # print (..., r, k) @ (k, c) as one (Σr, k) @ (k, c) product
    addmm = ""                # b + A @ B in one BLAS call (beta = 1), where the backend has it

    def _fused_bias_matmul(self, expr) -> str | None:
        """`X @ W + b` (W a weight matrix, b a row vector) as one `addmm(b, X, W)` on the rows
        of every leading index: the bias is the GEMM's initial C, no second pass over the
        output. None where the expression is not of that form or the backend has no addmm."""
        if not self.addmm or not isinstance(expr, sp.Add) or len(expr.args) != 2:
            return None
        prod = next((t for t in expr.args if isinstance(t, MatMul)), None)
        bias = next((t for t in expr.args if t is not prod), None)
        if prod is None or not (isinstance(bias, Array) and bias.shape[0] == 1 and bias.shape[1] != 1):
            return None
        left, right = prod.args
        if not self._matrix(right) or self._matrix(left):
            return None
        a = self._atomic(left)
        b = self._paren(self._print(right), ATOM - 1)
        return (f"{self.addmm}({self._print(bias)}, {self._rows(a)}, {b})"
                f".reshape(*{a}.shape[:-1], {b}.shape[-1])")

    def _matrix(self, expr) -> bool:
        """A weight matrix (or its transpose): stored with exactly two axes."""
        while isinstance(expr, T):
            expr = expr.args[0]
        return expr in self._settings["matrices"]

    def _folded_matmul(self, left, right) -> Code:
        """(..., r, k) @ (k, c) as a single 2-D product over all rows of every leading axis:
        the same sums, one BLAS call instead of one per leading index."""
        a = self._atomic(left)
        b = self._paren(self._print(right), ATOM - 1)
        return Code(f"({self._rows(a)} @ {b}).reshape(*{a}.shape[:-1], {b}.shape[-1])", ATOM)

    def _print_T(self, expr):
        (a,) = expr.args
        rows, cols = shape_of(a)
        code = self._print(a)
        text = self._paren(code, ATOM - 1)
        if rows == 1:          # a row vector, stored 1-D: (n,) -> (n, 1)
            return Code(f"{text}[:, None]", ATOM)
        if cols == 1:
            raise PrinterError(f"{self.backend} printer: T of a column vector {_show(a)} has "
                               "no storage convention (it would be a row vector with batch axes)")
        return Code(f"{text}.mT", ATOM)

    def _print_RowSum(self, expr):
        return Code(self._reduce("sum", self._reduce_arg(expr.args[0], "sum")), ATOM)

    def _print_RowMax(self, expr):
        return Code(self._reduce("max", self._reduce_arg(expr.args[0], "max")), ATOM)

    def _print_RowMean(self, expr):
        return Code(self._reduce("mean", self._reduce_arg(expr.args[0], "mean")), ATOM)

    reduce_reads_twice: tuple = ()   # reductions whose printed form names the argument twice

    def _reduce_arg(self, expr, kind: str) -> str:
        twice = kind in self.reduce_reads_twice and self._lines is not None   # statement mode
        return str(self._atomic(expr) if twice else self._print(expr))

    def _print_ColSum(self, expr):
        return Code(self._colsum(self._atomic(expr.args[0])), ATOM)

    def _colsum(self, a: str) -> str:
        return f"{self._rows(a)}.sum(0)"

    def _rows(self, a: str) -> str:
        """`a` as the matrix of its rows of every leading axis, (Π leading·rows, c): the row
        count spelled out, as -1 is ambiguous for an empty array with c = 0 (a reshaped view)."""
        self._need("math")
        return f"{a}.reshape(math.prod({a}.shape[:-1]), {a}.shape[-1])"

    def _print_Contract(self, expr):
        a, b = (self._atomic(x) for x in expr.args)
        return Code(f"({self._rows(a)}.T @ {self._rows(b)})", ATOM)

    def _print_CausalMask(self, expr):
        return Code(self._causal(self._atomic(expr.args[0])), ATOM)

    def _print_Gather(self, expr):
        table, ids = expr.args
        t = self._paren(self._print(table), ATOM - 1)
        return Code(f"{t}[{self._ids(ids)}]", ATOM)

    def _print_OneHot(self, expr):
        ids, n = expr.args
        if not self._scalar(n):
            raise PrinterError(f"{self.backend} printer: OneHot size must be a scalar: {_show(n)}")
        return Code(self._one_hot(self._ids(ids), self._print(n)), ATOM)

    def _print_Take(self, expr):
        a, ids = expr.args
        return Code(self._take(str(self._print(a)), self._ids(ids)), ATOM)

    # backend hooks -----------------------------------------------------------------------
    sqrt_name = ""
    sigmoid_name = ""

    def _cast(self, boolean: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _reduce(self, kind: str, arg: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _pair(self, which: str, a: str, b: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _with_scalar(self, which: str, a: str, s: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _causal(self, s: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _one_hot(self, ids: str, n: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _take(self, a: str, ids: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _grid(self, n: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _full(self, dims: str, value: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def _broadcast_cast(self, value: Code, dims: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class NumpyPrinter(_ArrayPrinter):
    """Array-language expressions as NumPy (float32-safe: no NumPy scalars, no upcasts)."""

    backend = "numpy"
    sqrt_name = "np.sqrt"
    sigmoid_name = "scipy.special.expit"
    ndtr_name = "_special.ndtr"
    table_params: tuple = ()
    table_param_docs: dict = {}
    default_dtype_doc = "float64, as np.dtype(None)"
    # erf: generated/numpy/_special.py, which calls SciPy's erf (`library_funcs`) for float64 and
    # evaluates derivations/special.py's rational for float32 (SciPy's float32 loop is scalar)
    library_funcs = {sp.erf: "scipy.special.erf", NormalCDF: "scipy.special.ndtr"}
    inplace = True
    out_funcs = {sp.exp: "exp", sp.log: "log", sp.tanh: "tanh", sp.sin: "sin", sp.cos: "cos",
                 sp.Abs: "abs"}

    def _in_place_call(self, name, target):
        return self._call(f"np.{name}", target, f"out={target}")

    def _in_place_divide(self, numerator, target):
        return self._call("np.divide", numerator, target, f"out={target}")
    funcs = {sp.exp: "np.exp", sp.log: "np.log", sp.tanh: "np.tanh", sp.erf: "_special.erf",
             sp.sin: "np.sin", sp.cos: "np.cos", sp.Abs: "np.abs", sp.sign: "np.sign"}

    def _cast(self, boolean):
        return f"{boolean}.astype({self._dtype()})"

    fold_leading = True
    reduce_reads_twice = ("sum", "mean")

    # Row sums of a named array as matrix-vector products with a vector of ones: the same sum
    # Σ_k A_ik, one BLAS gemv (vectorised across the row) instead of NumPy's per-row reduction
    # loop, 3-6x faster on rows of 64..512 floats (the mean divides the (r, 1) sums by the row
    # length). The max has no such form and stays np.max; so does any reduction whose argument
    # is not a name (expression mode: the text would be evaluated twice).
    def _reduce(self, kind, arg):
        self._need("np")
        if kind == "max" or not arg.isidentifier():
            return f"np.{kind}({arg}, axis=-1, keepdims=True)"
        total = f"({arg} @ np.ones({arg}.shape[-1], dtype={arg}.dtype))[..., None]"
        return total if kind == "sum" else f"({total}/{arg}.shape[-1])"

    def _colsum(self, a):
        # Σ over every row of every leading axis as 1ᵀA on the (rows, c) matrix: one BLAS gemv
        # (a name only: in expression mode an expression's text would be evaluated three times)
        if not a.isidentifier():
            return super()._colsum(a)
        self._need("np")
        self._need("math")
        return f"(np.ones(math.prod({a}.shape[:-1]), dtype={a}.dtype) @ {self._rows(a)})"

    def _pair(self, which, a, b):
        return self._call(f"np.{which}imum", a, b)

    def _with_scalar(self, which, a, s):
        return self._call(f"np.{which}imum", a, s)

    def _causal(self, s):
        self._need("np")
        self._need("math")
        return f"np.where(np.tri({s}.shape[-2], {s}.shape[-1], dtype=bool), {s}, -math.inf)"

    def print_causal_in_place(self, target):
        # s += B with B_ij = 0 (j ≤ i), −∞ (j > i), in s's dtype: s_ij + 0 = s_ij exactly and
        # s_ij + (−∞) = −∞ for finite s_ij; one pass, broadcast over the leading axes. B is
        # built once per dtype (generated/numpy/_special.py), not on every call.
        self._need("_special")
        t = target
        return [f"{t} += _special.causal_mask({t}.shape[-2], {t}.shape[-1], {t}.dtype)"]

    def _one_hot(self, ids, n):
        self._need("np")
        return f"({ids}[..., None] == np.arange({n})).astype({self._dtype()})"

    def _take(self, a, ids):
        return self._call("np.take_along_axis", a, f"{ids}[..., None]", "axis=-1")

    def _grid(self, n):
        return self._call("np.arange", n, "dtype=np.float64")

    def _full(self, dims, value):
        return self._call("np.full", f"({dims})", value, f"dtype={self._dtype()}")

    def _broadcast_cast(self, value, dims):
        return f"{self._call('np.broadcast_to', value, f'({dims})')}.astype({self._dtype()})"


class TorchPrinter(_ArrayPrinter):
    """Array-language expressions as PyTorch (Python numbers for scalars, device-aware masks)."""

    # In place on fresh tensors (`t *= x`, `t.exp_()`): the generated functions run inside
    # autograd.Function.forward/backward, where autograd records nothing.
    inplace = True
    out_funcs = {sp.exp: "exp", sp.log: "log", sp.tanh: "tanh", sp.sin: "sin", sp.cos: "cos",
                 sp.Abs: "abs"}

    def _in_place_call(self, name, target):
        return f"{target}.{'neg' if name == 'negative' else name}_()"

    def _in_place_divide(self, numerator, target):
        self._need("torch")
        return f"torch.div({numerator}, {target}, out={target})"

    addmm = "torch.addmm"
    backend = "torch"
    sqrt_name = "torch.sqrt"
    sigmoid_name = "torch.sigmoid"
    # no ndtr: torch.special.ndtr measured slower than erf and two in-place passes (578 vs 541 µs
    # on 393k float32), so Φ prints as its formula
    table_params = ("device=None",)
    table_param_docs = {"device=None": "the torch device of the result (default: the CPU)"}
    default_dtype_doc = "torch.get_default_dtype()"
    funcs = {sp.exp: "torch.exp", sp.log: "torch.log", sp.tanh: "torch.tanh", sp.erf: "torch.erf",
             sp.sin: "torch.sin", sp.cos: "torch.cos", sp.Abs: "torch.abs", sp.sign: "torch.sign"}

    def _cast(self, boolean):
        return f"{boolean}.to({self._dtype()})"

    def _reduce(self, kind, arg):
        self._need("torch")
        name = {"sum": "torch.sum", "max": "torch.amax", "mean": "torch.mean"}[kind]
        return f"{name}({arg}, dim=-1, keepdim=True)"

    def _pair(self, which, a, b):
        return self._call(f"torch.{which}imum", a, b)

    def _with_scalar(self, which, a, s):
        # Max(x, s) clamps from below (min=s), Min(x, s) from above (max=s)
        return self._call("torch.clamp", a, f"{'min' if which == 'max' else 'max'}={s}")

    def _causal(self, s):
        self._need("torch")
        self._need("math")
        return (f"{s}.masked_fill(torch.ones({s}.shape[-2], {s}.shape[-1], dtype=torch.bool, "
                f"device={s}.device).triu(1), -math.inf)")

    def print_causal_in_place(self, target):
        self._need("torch")
        self._need("math")
        t = target
        return [f"{t}.masked_fill_(torch.ones({t}.shape[-2], {t}.shape[-1], dtype=torch.bool, "
                f"device={t}.device).triu(1), -math.inf)"]

    def _one_hot(self, ids, n):
        self._need("torch")
        return f"torch.nn.functional.one_hot({ids}.long(), {n}).to({self._dtype()})"

    def _take(self, a, ids):
        return self._call("torch.take_along_dim", a, f"{ids}[..., None].long()", "dim=-1")

    def _grid(self, n):
        return self._call("torch.arange", n, "dtype=torch.float64", "device=device")

    def _full(self, dims, value):
        return self._call("torch.full", f"({dims})", value, f"dtype={self._dtype()}",
                          "device=device")

    def _broadcast_cast(self, value, dims):
        # expand is a view; .to(dtype) copies unless the dtype is float64 already, and then
        # .contiguous() copies an expanded view (a full-shape value is a fresh temporary)
        return f"{self._paren(value, ATOM - 1)}.expand({dims}).to({self._dtype()}).contiguous()"


def printer_for(backend: str, **settings) -> _ArrayPrinter:
    return {"numpy": NumpyPrinter, "torch": TorchPrinter}[backend](settings)


# ------------------------------------------------------------------------------ formulas
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

    printmethod = "_qed_formula_print"   # not the nodes' own `_sympystr`: the rules below

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
        if name.endswith("hat") and len(name) > 3:      # xhat -> x̂, dxhat -> dx̂
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
        terms = _ArrayPrinter._positive_first(sorted(expr.as_ordered_terms(), key=is_scalar))  # σ² + ε
        out = []
        for t, term in enumerate(terms):
            neg, mag = _ArrayPrinter._split_sign(term)
            text = self._wrap(mag, _P_ADD, strict=neg)
            out.append(("−" if neg else "") + text if t == 0 else (" − " if neg else " + ") + text)
        return "".join(out)

    def _print_Mul(self, expr):
        neg, mag = _ArrayPrinter._split_sign(expr)
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
        a, b = expr.args        # Σ over rows and every leading axis of aᵀ b
        return f"{self._print(T(a))} @ {self._wrap(b, _P_MUL, strict=True)}"

    def _print_Gather(self, expr):
        table, ids = expr.args
        return f"{self._wrap(table, PRECEDENCE['Func'])}[{self._print(ids)}]"

    def _print_OneHot(self, expr):
        return self._call("onehot", *expr.args)

    def _print_Take(self, expr):
        return self._call("take", *expr.args)

    def emptyPrinter(self, expr):
        return _show(expr)


# nodes printed as a call name(args…), one method each
_FORMULA_CALLS = {
    "Max": "max",
    "Min": "min",
    "Sigmoid": "σ",
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


def formula(expr) -> str:
    """`expr` as a one-line Unicode formula (FormulaPrinter)."""
    return FormulaPrinter().doprint(sp.sympify(expr))


def formula_comment(target: str, expr, width: int = 100, indent: int = 0) -> str:
    """The comment `# <target> = <formula>` for a generated statement, shortened with … so that
    it fits in `width` columns after `indent` spaces."""
    text = f"# {FormulaPrinter()._print_Symbol(sp.Symbol(target))} = {formula(expr)}"
    room = width - indent
    return text if len(text) <= room else text[:room - 1].rstrip() + "…"

"""Lowering one assignment `target = expr` to statements: temporaries, then the value.

A subexpression that occurs more than once (`exp(x − max x)` in a softmax), or that the printer
needs as a name because its text reads it more than once (`CausalMask`, `x**2`), is bound to a
temporary first and computed once; the value is the same expression, only named. Where the
stored shapes are known (`full`), the value and each temporary are computed in place
(lowering/inplace.py: one fresh array, updated).

A temporary is named after what it holds (`sigmoid_x`, `dy_xhat`, `xc2`) or, failing that, after
its statement's target (`dx_tanh`); one that the value itself takes over (the value is that
temporary and one more in-place operation) is computed under the target's own name from the
start: `att = s; att -= rowmax(s); np.exp(att, out=att); att /= rowsum(att)`, never a temporary
and then `att = <temporary>`.

`Lowering` is the printer's binder: while it prints a statement, the printer asks it for the
name of each such subexpression (`bind`), and it emits the temporary's statements before the
statement that reads it. Names are unique within one `Lowering`, that is one generated function.
"""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array, is_scalar

from ..names import RESERVED_NAMES, PrinterError
from ..printers.code import ATOM, Code
from .inplace import Facts, Update, fuse_multiply_add, plan

__all__ = ["Lowering", "repeated_subtrees", "temporary_name"]

# what a temporary holds, in a word, by the class of its expression's outermost node
_WORDS = {
    "Sigmoid": "sigmoid",
    "NormalCDF": "cdf",
    "Gaussian": "gauss",
    "Hypot": "hypot",
    "HalfStep": "step",
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "cosh": "cosh",
    "sinh": "sinh",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "Abs": "abs",
    "sign": "sign",
    "Heaviside": "step",
    "RowSum": "rowsum",
    "RowMean": "rowmean",
    "RowMax": "rowmax",
    "ColSum": "colsum",
    "Contract": "contract",
    "MatMul": "mm",
    "T": "t",
    "OneHot": "onehot",
    "Take": "take",
    "Gather": "rows",
    "CausalMask": "masked",
    "Max": "max",
    "Min": "min",
    "Add": "sum",
    "Mul": "prod",
    "Pow": "pow",
    "KroneckerDelta": "delta",
    "Mod": "mod",
    "floor": "floor",
}


def _plain(e) -> str | None:
    """The name of an Array or Symbol, else None."""
    return e.name if isinstance(e, sp.Symbol) and not isinstance(e, sp.Dummy) else None


def _described(expr, named=None) -> str | None:
    """A name that says what `expr` holds, where that is short: x², σ(x), dy ⊙ x̂, (−1)^col,
    Σ_row e: `x2`, `sigmoid_x`, `dy_xhat`, `sign_col`, `rowsum_exp_x`; else None. `named(e)`:
    the name a subexpression already has in the statement (a temporary), or None."""

    def plain(e):
        return _plain(e) or (named(e) if named is not None else None)

    if isinstance(expr, sp.Pow):
        base, exp = plain(expr.base), expr.exp
        if base and exp.is_Integer and exp > 0:
            return f"{base}{int(exp)}"
        if expr.base == -1 and plain(exp):
            return f"sign_{plain(exp)}"
    elif isinstance(expr, sp.Mul):
        names = [plain(a) for a in expr.args]
        if len(names) == 2 and all(names):
            return "_".join(names)
    elif expr.args and plain(expr.args[0]) and all(plain(a) or a.is_number for a in expr.args):
        return f"{_WORDS.get(type(expr).__name__, 'value')}_{plain(expr.args[0])}"
    return None


def temporary_name(expr, target: str, named=None) -> str:
    """A name for a temporary holding `expr` in the statement computing `target`: what it holds
    (`_described`), else the target and a word for the outermost node (`dx_tanh`, `z_recip`)."""
    word = _WORDS.get(type(expr).__name__, "value")
    if isinstance(expr, sp.Pow) and expr.exp.is_Number and expr.exp < 0:
        word = "recip"
    return _described(expr, named) or f"{target}_{word}"


def repeated_subtrees(expr, scalar=is_scalar) -> set:
    """Array-valued subexpressions that occur more than once in `expr`.

    A repeat is not descended into, so the parts of a repeated subtree are not counted twice
    (in `exp(x - m)/rowsum(exp(x - m))` only `exp(x - m)` repeats).
    """
    seen: dict = {}

    def visit(e):
        if e.is_Atom or scalar(e):
            return
        if e.is_Pow and e.exp.is_Integer and abs(e.exp) >= 2 and not scalar(e.base):
            # u^m and 1/g^k are printed beside the factors they pair with ((u/g)^m, `square_over`;
            # each 1/g after a factor of the numerator, `reciprocal_power`), never as temporaries
            # of their own: x² = ∞ from 1.8e19 and 1/h² = 0 from h > 1e19 in float32 while
            # x²/(h + 1) and x/h² are in range; nor 1/g alone (∞ for a subnormal g, where
            # sin²(gx)/g² is (sin(gx)/g)²). Only the base g repeats
            for a in e.args:
                visit(a)
            return
        if e in seen:
            seen[e] += 1
            return
        seen[e] = 1
        for a in e.args:
            visit(a)

    visit(expr)
    return {e for e, n in seen.items() if n > 1}


class Lowering:
    """The statements of assignments printed by one printer (one generated function)."""

    def __init__(self, printer, taken=frozenset()):
        self.printer = printer
        self.taken = set(taken) | RESERVED_NAMES  # names in use in the function: not for temporaries
        self.defined: list[str] = []  # the temporaries of the last statement, in line order
        self.created: list[str] = []  # the temporaries named in the statement being lowered
        self.target = ""
        self._reset()

    def _reset(self) -> None:
        self.pending: list[str] = []  # the statement's temporaries' lines, in order
        self.memo: dict = {}  # subexpression -> its temporary's name
        self.repeated: set = set()  # subexpressions still to be named when printed
        self.computed_once: frozenset = frozenset()
        self.full = None
        self.dead: frozenset = frozenset()
        self.whole = None

    # one statement ---------------------------------------------------------------------------
    def assign(self, target: str, expr, full=None, dead=frozenset()) -> list[str]:
        """Lines computing `target = expr`.

        `full(e)`, if given, says the stored shape of a subexpression e (anything comparable;
        None: unknown); then the value is computed in place where the printer's backend can
        (`printer.inplace`). `dead`: arrays this statement reads for the last time that were
        computed as new arrays above it (lowering/body.py knows): such an array, or a
        temporary, may become the target itself when the statement is that array and one more
        operand, and every read of it is inside that one in-place operation
        (`ds = datt; ds -= delta`).
        """
        p = self.printer
        expr = p.lowered(sp.sympify(expr))
        self.target, self.created = target, []
        self.pending, self.memo = [], {}
        self.repeated = repeated_subtrees(expr, p.scalar)
        self.full, self.dead, self.whole = full, frozenset(dead), expr
        self.computed_once = frozenset(self.repeated)
        p.binder = self
        try:
            fused = p.fused_statement(expr)
            if fused is not None:
                lines = self.pending + [f"{target} = {fused}"]
            else:
                lines = None
                if (
                    p.inplace
                    and full is not None
                    and not p.scalar(expr)
                    and target not in {a.name for a in expr.free_symbols if isinstance(a, Array)}
                ):
                    lines = self._in_place(target, expr)
                if lines is None:
                    text = p.code(expr)
                    lines = self.pending + [f"{target} = {text}"]
            self.defined = _defined(lines, self.created)
            return lines
        finally:
            p.binder = None
            self._reset()

    def _in_place(self, target: str, expr) -> list[str] | None:
        p = self.printer
        facts = Facts(
            full=self.full,
            repeated=frozenset(self.repeated),
            computed_once=self.computed_once,
            dead=self.dead,
            whole=self.whole,
            scalar=p.scalar,
            out_funcs=p.out_funcs,
        )
        updates = plan(expr, facts)
        if updates is None:
            return None
        if p.multiply_add:
            updates = fuse_multiply_add(updates, p.scalar)
        out: list[str] = []
        held = None  # a repeated value computed as `target` itself, read by that name
        for u in updates:
            if u.op == "scale" and not isinstance(u.value[1], (Array, sp.Symbol)):
                self.repeated.add(u.value[1])  # c·u, then `*= u`: u computed once, named
            if u.op == "=" and not u.fresh and u.value in self.repeated:
                # the value takes this temporary over: compute it as `target` from the start
                self.bind(u.value, name=target)
                held, line = u.value, None
            else:
                line = self._update_text(target, u)
                if held is not None and self.memo.get(held) == target:
                    # the target holds the value only until this update writes it: a later read
                    # (u·(u/g) as t = u; t /= g; t *= u) is a temporary of its own, not `target`
                    del self.memo[held]
                    self.repeated.add(held)
                    held = None
            out.extend(self.pending)  # its temporaries first, in order
            self.pending.clear()
            if line is not None:
                out.append(line)
        return out

    def _update_text(self, target: str, u: Update) -> str:
        p = self.printer
        if u.op == "call":
            return p.in_place_call(u.value, target)
        if u.op == "divide-into":
            return p.in_place_divide(p.code(u.value), target)
        if u.op == "subtract-from":
            return p.in_place_subtract_from(p.code(u.value), target)
        if u.op == "scale":
            c, u_base = u.value
            return f"{target} = {p.code(sp.Mul(c, u_base, evaluate=False))}"
        if u.op == "muladd":
            c, a, b = u.value
            return p.multiply_add_text(target, c, None if a is None else p.code(a), p.code(b))
        fused = p.fused_update(target, u.op, u.value)
        if fused is not None:
            return fused
        code = p.code(u.value)
        if u.op == "=":
            if u.fresh and code.isidentifier():  # never alias a name: it is read elsewhere
                raise PrinterError(f"{p.backend} printer: in-place start {code} is a name")
            if not u.fresh:  # an array read for the last time, taken over
                return f"{target} = {code}  # in place: {code}'s array, dead after this statement"
            return f"{target} = {code}"
        return f"{target} {u.op} {code}"

    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def fresh(self, expr, target: str) -> str:
        """A name for a value `expr` computed for `target`, unique in the function."""
        return self._unique(temporary_name(expr, target))

    def _name(self, expr) -> str:
        """A fresh name for a temporary holding `expr` (temporary_name, made unique); where
        that falls back to the target and the temporary is only the argument of elementwise
        functions (pe's angle in cos(θ) and sin(θ)), `<target>_arg`."""
        base = temporary_name(expr, self.target, self.memo.get)
        parents = {type(e) for e in sp.preorder_traversal(self.whole) if expr in e.args}
        if _described(expr, self.memo.get) is None and parents and parents <= set(self.printer.funcs):
            base = f"{self.target}_arg"
        name = self._unique(base)
        self.created.append(name)
        return name

    # the printer's binder ----------------------------------------------------------------------
    def bind(self, expr, name: str | None = None) -> Code:
        """The name of `expr` in the statement being printed: bound to a temporary (once), or to
        `name` (the target that takes it over). With the stored shapes known, the temporary is
        computed in place like an assignment (`exp_s = s - max(s)` then `np.exp(exp_s,
        out=exp_s)`: one new array, not two)."""
        if expr in self.memo:
            return self.memo[expr]
        p = self.printer
        if p.inplace and self.full is not None and not p.scalar(expr):
            pending, memo = self.pending, dict(self.memo)
            taken, created = set(self.taken), list(self.created)
            self.pending = []  # this temporary's lines (and its own temporaries)
            label = name or self._name(expr)
            self.repeated.discard(expr)  # inside its own build: printed, not named
            try:
                lines = self._in_place(label, expr)
            except PrinterError:
                lines = None
            finally:
                self.repeated.add(expr)
            if lines is not None:
                self.pending = pending + lines
                self.memo[expr] = Code(label, ATOM)
                return self.memo[expr]
            self.pending, self.memo, self.taken, self.created = pending, memo, taken, created
        code = p.node_code(expr)
        if code.prec == ATOM and code.isidentifier() and name is None:
            return code
        label = name or self._name(expr)
        self.pending.append(f"{label} = {code}")
        self.memo[expr] = Code(label, ATOM)
        return self.memo[expr]


def _defined(lines: list[str], created: list[str]) -> list[str]:
    """The temporaries `created` that `lines` define, in the order of their first lines."""
    first = {}
    for k, line in enumerate(lines):
        head = line.split(" = ", 1)[0]
        if head in created:
            first.setdefault(head, k)
    return sorted(first, key=first.get)

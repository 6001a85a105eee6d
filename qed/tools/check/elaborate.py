"""From a syntax tree to the back end's objects, against a symbol context — or a refusal.

The elaborator reads each node of parser.py with the context (context.py) and builds an
expression of the array language (`Array`, `MatMul`, `T`, `RowSum`, elementwise SymPy) or an
index-form scalar (`IndexedBase` entries, `Sum`, `KroneckerDelta`), with its shape. Every
reading it takes is the only one the grammar allows; where two are possible it refuses:

* a run of letters is a declared or defined name (`softmax`, `Output`); else a product of
  one-letter symbols only when it is short (2–3 letters), every letter is declared and no two
  lowercase letters touch (`QK`, `AV`, `xW`); a word is never a product;
* a script ends a run of letters: `XW_Q` is X·W_Q when `XW_Q` and `XW` are not names;
* `^T`, `^\\top` is a transpose (never a power); a power of a matrix is refused;
* juxtaposed matrices multiply as matrices (`MatMul`, never commutative); a juxtaposed scalar
  scales; two row vectors side by side are refused (⊙, dot or outer?);
* `name(…)` is an application when the name is a function (of the catalogue or of the
  document), a product when it is a value;
* an entry `A_{ij}` needs a declared array and one index per axis; a subscript letter is an
  index (bound by a sum, a declared index letter, or any undeclared letter), never a declared
  vector; `\\sum_j` without bounds needs a declared index letter whose range the arrays it
  indexes fix;
* `\\mathbb{E}[·]` and `\\mathrm{Var}(·)` apply the back end's expectation operator to random
  vectors whose moments the document stated; a quantity with no stated distribution is refused.

Document indices count from 1: an entry `A_{ij}` is `A[i-1, j-1]` with the internal index
`i` running over 0 … rows-1 (the back end's convention), and `\\sum_{q=1}^{n}` becomes a sum from
0 (the normaliser compares sums whose ranges start alike). A statement that pairs dimensions —
a column written out whose entries are one name's at 2i and 2i + 1, the sources' "dimensions 2i
and 2i+1" — counts from 0 (`first`): only so do the pairs (2i, 2i + 1), i = 0 … d/2 − 1, cover
the d entries of a vector (from 1, x_1 would be in no pair and x_{d+1} in one); one written
(2i − 1, 2i) counts from 1, for the same reason. In such a statement an entry at 2i or 2i + 1
(from 0) makes i run over the pairs of that vector, whose length is then even.

A matrix written out entry by entry (`bmatrix`, `pmatrix`) is a `Block` of scalar entries. It is
read only in products of such matrices, columns and scalars (entry by entry: small matrices
only), in their sums and negations, and as a side of an equation (`side`); anywhere else, with
an entry that is no scalar, or with sizes that do not fit, it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import sympy as sp

from derivations.language.arrays import Array, Gather, MatMul, T, document_form, entry
from derivations.proof.expectation import ExpectationError

from . import parser as P
from .context import PARAMETERS, Binding, Context, FunctionSpec, basic, is_unknown, label_of, unknown_size
from .expand import Policy, expand, loss_defined, ones_row, upstream
from .grammar import GREEK, NotUnderstood

EULER = "e"
MAX_BLOCK = 4  # the most rows or columns of a matrix written out (small explicit matrices only)

# words that, as a subscript, name the target class's id (a fixed integer, 1 … the vector's
# length): p_{correct} is the probability of the correct token (docs/check.md)
TARGET_WORDS = ("correct", "target")


@dataclass
class Val:
    expr: object
    shape: tuple  # () for a scalar; (rows, cols) for an array (a vector is (1, n))
    gain: bool = False  # a per-feature gain as written (γ): before an array, entrywise

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def with_expr(self, e) -> Val:
        return Val(e, self.shape)


@dataclass
class FnRef:
    spec: FunctionSpec


@dataclass(frozen=True)
class Block:
    """A matrix written out entry by entry: its scalar entries, row by row (a column: one entry a
    row). No expression of the array language: a Block is read entry by entry, never as an array."""

    rows: tuple  # ((entry, …), …): SymPy scalars

    @property
    def shape(self) -> tuple:
        return (len(self.rows), len(self.rows[0]))

    def map(self, f) -> Block:
        return Block(tuple(tuple(f(x) for x in row) for row in self.rows))

    def column(self) -> list:
        """The entries of a column, top to bottom."""
        if self.shape[1] != 1:
            raise NotUnderstood(f"a {_block_size(self)} matrix where a column is expected")
        return [row[0] for row in self.rows]


def _block_size(b: Block) -> str:
    r, c = b.shape
    return f"{r}×{c}"


# ------------------------------------------------------------------------------------- names
def doc_name(node) -> str | None:
    """The name a node spells, if it is name-like: Q, W_Q, d_model, σ, x̂, x', 𝓛, W^O, β_1."""
    if isinstance(node, P.Letters):
        return node.text
    if isinstance(node, P.Greek):
        return GREEK[node.name]
    if isinstance(node, P.Word):
        return node.text
    if isinstance(node, P.Own):
        return {"cal": "𝓛"}.get(node.font) if node.text == "L" else f"{node.font}:{node.text}"
    if isinstance(node, P.Accent):
        inner = doc_name(node.base)
        return None if inner is None else inner + {"hat": "\u0302", "tilde": "\u0303", "bar": "\u0304"}[node.kind]
    if isinstance(node, P.Prime):
        inner = doc_name(node.base)
        return None if inner is None else inner + "'"
    if isinstance(node, P.Num) and node.text == "1":
        return None
    if isinstance(node, P.Script):
        base = doc_name(node.base)
        sub = _sub_text(node.sub)
        return None if base is None or sub is None else f"{base}_{sub}"
    if isinstance(node, P.Power):
        base = doc_name(node.base)
        if base is not None and isinstance(node.exp, (P.Letters, P.Word)) and node.exp.text[:1].isupper():
            return f"{base}^{node.exp.text}"
        return None
    return None


def _sub_text(items) -> str | None:
    if len(items) != 1:
        return None
    it = items[0]
    if isinstance(it, (P.Letters, P.Word)):
        return it.text
    if isinstance(it, P.Num):
        return it.text
    if isinstance(it, P.Greek):
        return GREEK[it.name]
    return None


def label_for(name: str) -> str:
    return label_of(name)


def grad_label(label: str) -> str:
    return f"dL/d{label}"


def diff_label(label: str) -> str:
    return f"d({label})"


# ------------------------------------------------------------------------------ the elaborator
@dataclass
class Bound:
    symbol: sp.Symbol  # internal, 0-based
    offset: sp.Expr  # the document's value is symbol + offset
    positions: list = field(default_factory=list)  # sizes of the axes it indexes (unbounded sums)


class Elaborator:
    """Reads one statement's trees. State: the free indices met (document name → internal
    symbol) and the sizes of the axes each one indexes; sizes unified on the way."""

    def __init__(
        self, ctx: Context, scope: dict | None = None, family: str | None = None, first: int = 1, pairs: bool = False
    ):
        self.ctx = ctx
        # the document's first index: 1, or 0 in a statement that pairs dimensions (2i, 2i + 1)
        self.first = first
        # a statement that pairs dimensions: x_{2i}, x_{2i+1} (from 0; x_{2i-1}, x_{2i} from 1)
        # index the pair i of x's entries
        self.pairs = pairs
        self.pair_positions: dict = {}  # free index -> [(axis, what)] it indexes in pairs
        self.even: set = set()  # sizes read in pairs: even for the statement to mean anything
        self.scope: dict = dict(scope or {})  # a function's parameters: name -> Val
        # the index of a family being defined (head_i = …): a matrix with that one index is the
        # family's i-th member (Q_i), recorded in `members`
        self.family = family
        self.members: dict[str, str] = {}  # member label -> the matrix it is shaped like
        self.free: dict[str, sp.Symbol] = {}
        self.positions: dict[sp.Symbol, list] = {}
        self.bound: list[dict[str, Bound]] = []
        self.subst: dict = {}
        self.notes: list[tuple[str, str]] = []  # (plain, Markdown with $LaTeX$)
        self.assumptions: list[str] = []
        self.random_used = False
        self.jacobian_targets: set[str] = set()  # labels X of ∂·/∂X_{..} met
        self.grad_targets: set[str] = set()
        self.diff_targets: set[str] = set()
        self.uses: set[str] = set()  # labels of the names read

    # ---------------------------------------------------------------- sizes
    def resolve(self, s):
        s = basic(s)
        for _ in range(10):
            new = s.xreplace(self.subst)
            if new == s:
                break
            s = new
        return s

    def same(self, a, b, what: str) -> sp.Expr:
        a, b = self.resolve(a), self.resolve(b)
        if a == b:
            return a
        if is_unknown(a):
            self.subst[a] = b
            return b
        if is_unknown(b):
            self.subst[b] = a
            return a
        if sp.simplify(a - b) == 0:
            return a
        raise NotUnderstood(f"{what}: sizes {_show(a)} and {_show(b)} differ")

    def shape(self, v: Val) -> tuple:
        return tuple(self.resolve(s) for s in v.shape)

    def broadcast(self, a: Val, b: Val, what: str) -> tuple:
        if a.is_scalar:
            return b.shape
        if b.is_scalar:
            return a.shape
        out = []
        for x, y in zip(self.shape(a), self.shape(b)):
            if x == 1:
                out.append(y)
            elif y == 1:
                out.append(x)
            else:
                out.append(self.same(x, y, what))
        return tuple(out)

    # ---------------------------------------------------------------- entry points
    def value(self, node) -> Val:
        v = self._operand(node)
        if isinstance(v, Block):
            raise NotUnderstood(
                f"a {_block_size(v)} matrix written out entry by entry, here: it is read only in a product of "
                "matrices and columns written out, or as a side of an equation"
            )
        return v

    def side(self, node) -> Val | Block:
        """A side of an equation: a value, or a matrix (a column) written out."""
        return self._operand(node)

    def _operand(self, node) -> Val | Block:
        v = self._value(node)
        if isinstance(v, FnRef):
            raise NotUnderstood(f"the function {v.spec.name} without an argument")
        return v

    def _value(self, node):
        method = getattr(self, "_v_" + type(node).__name__, None)
        if method is None:
            raise NotUnderstood(f"{type(node).__name__} is outside the grammar here")
        return method(node)

    # ---------------------------------------------------------------- leaves
    def _v_Num(self, node: P.Num):
        f = Fraction(node.text)  # digits and one point (the tokenizer's rule): exact
        return Val(sp.Rational(f.numerator, f.denominator), ())

    def _v_OnesVec(self, node):
        return ones_value(self)

    def _v_Infinity(self, node):
        return Val(sp.oo, ())

    def _v_Ellipsis(self, node):
        raise NotUnderstood("\\dots (a list of unknown length) is outside the grammar")

    def lookup(self, name: str):
        """A name's value or function, or None."""
        if name in self.scope:
            return self.scope[name]
        b = self.ctx.value(name)
        if b is not None and b.kind == "poisoned":
            raise NotUnderstood(f"{name}: {b.reason} ({b.origin})")
        f = self.ctx.function(name)
        if b is not None:
            return self._binding_value(b)
        if f is not None:
            return FnRef(f)
        return None

    def lookup_function(self, name: str) -> FunctionSpec | None:
        if name in self.scope:
            return None
        return self.ctx.function(name)

    def _binding_value(self, b: Binding):
        if b.kind == "size":
            return Val(b.symbol(), ())
        if b.kind == "scalar":
            self.uses.add(b.label)
            self.ctx.mentioned.add(b.label)
            return Val(b.symbol(), ())
        if b.kind == "array":
            self.uses.add(b.label)
            self.ctx.mentioned.add(b.label)
            whole = Val(Array(b.label, tuple(self.resolve(s) for s in b.shape)), tuple(b.shape), gain=b.gain)
            if b.bare:  # θ written bare is θ_i (RoPE's angle of the pair i)
                return self.entry_of(whole, (P.Letters(b.bare),), f"{b.name} (that is, {b.name}_{b.bare})")
            return whole
        if b.kind == "ids":
            raise NotUnderstood(f"{b.name} ({b.meaning}: integers) outside a lookup E[{b.name}]")
        if b.kind == "loss":
            if self.ctx.definition("L") is not None:
                self.uses.add("L")
                return Val(sp.Symbol("L", real=True), ())
            raise NotUnderstood(f"the loss {b.name} (not defined here) outside ∂{b.name}/∂X")
        if b.kind == "ones":
            raise NotUnderstood("the all-ones vector outside a product (write \\mathbf{1}^T after a column)")
        if b.kind == "family":
            raise NotUnderstood(f"{b.name} is {b.meaning} ({b.origin}): its members are not read in other formulas")
        raise NotUnderstood(f"{b.name} ({b.kind}) is not a value")

    def _named(self, node, name: str):
        v = self.lookup(name)
        if v is None:
            raise NotUnderstood(f"unknown symbol {name}")
        return v

    def _v_Letters(self, node: P.Letters):
        text = node.text
        v = self.lookup(text)
        if v is not None:
            return v
        if len(text) == 1:
            idx = self._index_value_or_none(text, as_value=True)
            if idx is not None:
                return Val(idx, ())
            if text == EULER:
                return Val(sp.E, ())
            raise NotUnderstood(f"unknown symbol {text}")
        parts = self._split_run(text)
        if parts is None:
            raise NotUnderstood(
                f"unknown word {text!r} (a word is a name only where it is declared or defined; "
                "it is never read as a product of letters)"
            )
        return self._product([self._named(P.Letters(c), c) for c in parts], text)

    def _split_run(self, text: str):
        """A short run of declared one-letter symbols (QK, AV, xW), else None."""
        if not 2 <= len(text) <= 3 or "_" in text:
            return None
        for a, b in zip(text, text[1:]):
            if a.islower() and b.islower():
                return None
        for c in text:
            b = self.scope.get(c) or self.ctx.value(c)
            if b is None or (isinstance(b, Binding) and b.kind not in ("array", "scalar", "size")):
                return None
        return list(text)

    def _v_Greek(self, node: P.Greek):
        name = GREEK[node.name]
        v = self.lookup(name)
        if v is not None:
            return v
        if node.name == "pi":
            return Val(sp.pi, ())
        idx = self._index_value_or_none(name, as_value=True)
        if idx is not None:
            return Val(idx, ())
        raise NotUnderstood(f"unknown symbol {name}")

    def _v_Word(self, node: P.Word):
        v = self.lookup(node.text)
        if v is None:
            raise NotUnderstood(f"unknown word {node.text!r}")
        return v

    def _v_Own(self, node: P.Own):
        name = doc_name(node)
        if node.font == "bb" and node.text == "R":
            raise NotUnderstood("\\mathbb{R} outside a declaration x \\in \\mathbb{R}^{…}")
        return self._named(node, name)

    def _v_Accent(self, node: P.Accent):
        name = doc_name(node)
        if name is None:
            raise NotUnderstood("an accent on something other than a symbol")
        return self._named(node, name)

    def _v_Prime(self, node: P.Prime):
        name = doc_name(node)
        if name is not None and self.lookup(name) is None:
            split = self._split_postfix(node.base, P.Prime, "prime")
            if split is not None:
                return split
        if name is None:
            raise NotUnderstood("a prime on something other than a symbol")
        return self._named(node, name)

    def _v_Group(self, node: P.Group):
        return self._value(node.inner)

    def _v_Paren(self, node: P.Paren):
        if len(node.items) != 1:
            raise NotUnderstood("a list in parentheses outside a function's arguments")
        return self._operand(node.items[0])

    # ---------------------------------------------------------------- indices
    def _index_value_or_none(self, name: str, as_value: bool = False):
        """The document's value of an index named `name` (bound by a sum, or free), or None. As
        a value (outside a subscript: 2i, β^t) a free index must have been met as an index
        first: `q \\cdot k` with k undeclared is an unknown k, not an index."""
        for frame in reversed(self.bound):
            if name in frame:
                b = frame[name]
                return b.symbol + b.offset
        b = self.ctx.value(name)
        if name in self.free:
            return self.free[name] + self.first
        if as_value:
            return None
        if name in self.ctx.index_letters and (b is None or b.kind not in ("size", "scalar")):
            return self._free(name) + self.first
        return None

    def _free(self, name: str) -> sp.Symbol:
        if name not in self.free:
            self.free[name] = sp.Symbol(name, integer=True)
        return self.free[name]

    def index_value(self, node) -> sp.Expr:
        """The document's value of an index expression (counted from `first`): i, 2i + 1, t - 1, n."""
        if isinstance(node, (P.Letters, P.Word, P.Greek)):
            name = doc_name(node)
            v = self._index_value_or_none(name)
            if v is not None:
                return v
            b = self.ctx.value(name)
            if b is not None and b.kind == "size":
                return b.symbol()
            if b is not None:
                raise NotUnderstood(
                    f"{name} is {b.meaning or 'a ' + b.kind} here, not an index "
                    f"(bind it with \\sum_{{{name}=…}} or write another letter)"
                )
            if (isinstance(node, P.Letters) and len(name) == 1) or isinstance(node, P.Greek):
                return self._free(name) + self.first
            if name in TARGET_WORDS:  # p_{correct}: the entry at the target's id (the convention's)
                return sp.Symbol(name, integer=True, positive=True)
            raise NotUnderstood(f"{name!r} as an index: not a declared index")
        if isinstance(node, P.Num):
            if "." in node.text:
                raise NotUnderstood(f"index {node.text} is not an integer")
            return sp.Integer(int(node.text))
        if isinstance(node, P.Bin) and node.op in "+-":
            a, b = self.index_value(node.a), self.index_value(node.b)
            return a + b if node.op == "+" else a - b
        if isinstance(node, P.Juxt) and len(node.items) == 2 and isinstance(node.items[0], P.Num):
            return self.index_value(node.items[0]) * self.index_value(node.items[1])
        if isinstance(node, P.Neg):
            return -self.index_value(node.arg)
        if isinstance(node, P.Group):
            return self.index_value(node.inner)
        raise NotUnderstood("an index must be a letter, a number or a sum of them (i, 2i+1, t-1)")

    def index_items(self, items) -> list:
        """A subscript's indices: `ij` is two indices (one per letter), `2i, j` two; a longer
        run (`correct`) is one word, an index only if declared as one."""
        out = []
        for it in items:
            if (
                isinstance(it, P.Letters)
                and 1 < len(it.text) <= 3
                and "_" not in it.text
                and self.ctx.value(it.text) is None
                and it.text not in self.ctx.index_letters
            ):
                out.extend(P.Letters(c) for c in it.text)
            elif isinstance(it, P.Juxt) and all(isinstance(x, P.Letters) and len(x.text) == 1 for x in it.items):
                out.extend(it.items)  # A_{i j}: spaces between the indices
            else:
                out.append(it)
        return out

    # ---------------------------------------------------------------- entries and names with scripts
    def _v_Script(self, node: P.Script):
        name = doc_name(node)
        if name is not None:
            v = self.lookup(name)
            if v is not None:
                return v
        member = self._family_member(node)
        if member is not None:
            return member
        base = node.base
        bare = self.ctx.value(doc_name(base) or "") if doc_name(base) not in self.scope else None
        if bare is not None and bare.bare:
            raise NotUnderstood(
                f"{bare.name} is {bare.meaning}: with an index ({name or bare.name + '_…'}) it is no name here "
                f"(define it first: {bare.name}_t = …)"
            )
        if isinstance(base, P.Letters) and len(base.text) > 1:
            whole = self.lookup(base.text)
            if whole is None:  # XW_Q: X · W_Q (the script ends the run)
                head, last = base.text[:-1], base.text[-1]
                parts = self._split_run(head) if len(head) > 1 else [head]
                tail = self._v_Script(P.Script(P.Letters(last), node.sub))
                if parts is None or any(self.lookup(c) is None for c in parts):
                    raise NotUnderstood(f"unknown word {base.text!r} with a subscript")
                return self._product([self._named(P.Letters(c), c) for c in parts] + [tail], base.text)
        if isinstance(base, P.Greek) and base.name == "delta" and self.lookup("δ") is None:
            idx = self.index_items(node.sub)
            if len(idx) != 2:
                raise NotUnderstood("a Kronecker delta needs two indices (\\delta_{jk})")
            a, b = (self.index_value(i) for i in idx)
            return Val(_delta(a - 1, b - 1), ())
        word_sub = len(node.sub) == 1 and isinstance(node.sub[0], (P.Letters, P.Word)) and len(node.sub[0].text) > 2
        if word_sub and doc_name(base) is not None and self.lookup(doc_name(base)) is None:
            raise NotUnderstood(f"unknown symbol {name}")  # W_{vocab}: a name, not W's entry
        target = self._value(base)
        if isinstance(target, FnRef):
            raise NotUnderstood(f"a subscript on the function {target.spec.name}")
        return self.entry_of(target, node.sub, name or doc_name(node.base) or "an expression")

    def _family_member(self, node: P.Script):
        """Q_i while a family over i is defined (head_i = Attention(Q_i, K_i, V_i)): the i-th of a
        family of arrays shaped like the matrix Q (the i-th head's queries), an array of its own
        with nothing known about it. Only a declared matrix (two axes) with exactly the family's
        index: one index on a matrix has no other reading (a row is written with two, Q_{ij}),
        and anywhere else it is refused."""
        if self.family is None or len(node.sub) != 1:
            return None
        it = node.sub[0]
        if not (isinstance(it, P.Letters) and it.text == self.family) or any(
            self.family in frame for frame in self.bound
        ):
            return None
        name = doc_name(node.base)
        b = self.ctx.value(name) if name is not None and name not in self.scope else None
        if b is None or b.kind != "array" or 1 in tuple(self.resolve(s) for s in b.shape):
            return None
        from .transcript import name_latex

        label = f"{b.label}[{self.family}]"
        self.members[label] = b.name
        shape = tuple(self.resolve(s) for s in b.shape)
        return Val(Array(label, shape, latex=f"{name_latex(b.name)}_{{{self.family}}}"), shape)

    def entry_of(self, target: Val, sub, what: str) -> Val:
        if target.is_scalar:
            raise NotUnderstood(f"{what}: a subscript on a scalar")
        rows, cols = self.shape(target)
        idx_nodes = self.index_items(sub)
        axes = [s for s in (rows, cols) if s != 1]
        if len(idx_nodes) != len(axes):
            kind = "a vector" if len(axes) == 1 else ("a matrix" if len(axes) == 2 else "a 1×1 array")
            raise NotUnderstood(
                f"{what}: {len(idx_nodes)} index(es) on {kind} ({_show(rows)}×{_show(cols)}): "
                "one index per axis (a row? a head?)"
            )
        values = [self.index_value(i) for i in idx_nodes]
        if self.first != 1 and any(self._fixed(v) for v in values):
            raise NotUnderstood(
                f"{what}: an entry at a fixed position in a statement that counts from {self.first} (it pairs "
                "dimensions): counted from 1 it would be another entry; write it in a statement of its own"
            )
        for node, v, axis in zip(idx_nodes, values, axes):
            self._record_position(node, v, axis, what)
        pos = [v - self.first for v in values]
        if len(axes) == 2:
            at = (pos[0], pos[1])
        elif rows == 1:
            at = (sp.Integer(0), pos[0])
        else:
            at = (pos[0], sp.Integer(0))
        return Val(entry(target.expr, at), ())

    def _fixed(self, value) -> bool:
        """An index value that no index letter moves (x_1, x_n, p_{correct}): its entry depends on
        where the document starts counting."""
        letters = set(self.free.values()) | {b.symbol for frame in self.bound for b in frame.values()}
        return not (basic(value).free_symbols & letters)

    def _record_position(self, node, value, axis, what) -> None:
        for sym in self.free.values():
            if self.pairs and sp.expand(value - self.first - 2 * sym) in (0, 1):  # x_{2i}, x_{2i+1}: i runs over pairs
                self.pair_positions.setdefault(sym, []).append((axis, what))
                return
            if value == sym + self.first:
                found = self.positions.setdefault(sym, [])
                for s, _ in found:  # one index, one range: a length not known yet is this one
                    if is_unknown(self.resolve(s)) or is_unknown(self.resolve(axis)):
                        self.same(s, axis, f"the index {sym}")
                found.append((axis, what))
                return
        for frame in reversed(self.bound):
            for b in frame.values():
                if value == b.symbol + b.offset:
                    for s, _ in b.positions:
                        if is_unknown(self.resolve(s)) or is_unknown(self.resolve(axis)):
                            self.same(s, axis, f"the index {b.symbol}")
                    b.positions.append((axis, what))
                    return

    # ---------------------------------------------------------------- operators
    def _v_Neg(self, node: P.Neg):
        v = self._operand(node.arg)
        if isinstance(v, Block):
            return v.map(lambda x: -x)
        return v.with_expr(-v.expr)

    def _v_Bin(self, node: P.Bin):
        a, b = self._operand(node.a), self._operand(node.b)
        if node.op in "+-" and (isinstance(a, Block) or isinstance(b, Block)):
            return self._block_sum(a, b, node.op)
        if isinstance(a, Block) or isinstance(b, Block):
            op = {"cdot": "\\cdot", "times": "\\times", "odot": "\\odot"}.get(node.op, node.op)
            raise NotUnderstood(f"{op} with a matrix written out (a product of them is written side by side)")
        if node.op == "times":
            if not (a.is_scalar and b.is_scalar):
                raise NotUnderstood("× between arrays (a cross product? write the product itself)")
            return Val(a.expr * b.expr, ())
        if node.op in "+-":
            shape = self.broadcast(a, b, f"'{node.op}'")
            return Val(a.expr + b.expr if node.op == "+" else a.expr - b.expr, shape)
        if node.op == "odot":
            if a.is_scalar or b.is_scalar:
                raise NotUnderstood("⊙ with a scalar")
            return Val(a.expr * b.expr, self.broadcast(a, b, "⊙"))
        if node.op == "cdot":
            if a.is_scalar or b.is_scalar:
                return Val(a.expr * b.expr, self.broadcast(a, b, "·"))
            return self._dot(a, b)
        if node.op == "/":
            return self._divide(a, b)
        raise NotUnderstood(f"operator {node.op}")

    def _dot(self, a: Val, b: Val) -> Val:
        sa, sb = self.shape(a), self.shape(b)
        if sa[0] == 1 and sb[0] == 1:
            n = self.same(sa[1], sb[1], "the dot product")
            k = sp.Dummy("k", integer=True)
            return Val(sp.Sum(entry(a.expr, (0, k)) * entry(b.expr, (0, k)), (k, 0, n - 1)), ())
        raise NotUnderstood("a · between matrices (a matrix product? write them side by side)")

    def _divide(self, a: Val, b: Val) -> Val:
        if b.is_scalar:
            return Val(a.expr / b.expr, a.shape)
        shape = self.broadcast(a, b, "'/'")
        return Val(a.expr / b.expr, shape)

    def _v_Frac(self, node: P.Frac):
        return self._divide(self.value(node.num), self.value(node.den))

    def _v_Sqrt(self, node: P.Sqrt):
        v = self.value(node.arg)
        return v.with_expr(sp.sqrt(v.expr))

    def _split_postfix(self, base, rebuild, what: str):
        """A transpose, prime or power written after a run of letters applies to its last
        letter (LaTeX's own reading): QK^T is Q·Kᵀ when QK is not a name. None if it is one."""
        if not (isinstance(base, P.Letters) and len(base.text) > 1 and self.lookup(base.text) is None):
            return None
        head, last = base.text[:-1], base.text[-1]
        parts = self._split_run(head) if len(head) > 1 else [head]
        if parts is None or any(self.lookup(c) is None for c in parts):
            raise NotUnderstood(f"unknown word {base.text!r} with a {what}")
        tail = self.value(rebuild(P.Letters(last)))
        return self._product([self._named(P.Letters(c), c) for c in parts] + [tail], base.text)

    def _v_Transpose(self, node: P.Transpose):
        split = self._split_postfix(node.base, P.Transpose, "transpose")
        if split is not None:
            return split
        v = self.value(node.base)
        if v.is_scalar:
            raise NotUnderstood("a transpose ^T of a scalar")
        r, c = v.shape
        if isinstance(v.expr, _Ones):
            return Val(_Ones(c, r), (c, r))
        return Val(T(v.expr), (c, r))

    def _v_Power(self, node: P.Power):
        name = doc_name(node)
        if name is not None:
            v = self.lookup(name)
            if v is not None:
                return v
            raise NotUnderstood(f"{name}: a capital superscript (a name {name}? a power?) that is not declared")
        base_node = node.base
        if isinstance(base_node, P.Letters) and base_node.text == EULER and self.lookup(EULER) is None:
            e = self.value(node.exp)
            return e.with_expr(sp.exp(e.expr))
        split = self._split_postfix(base_node, lambda b: P.Power(b, node.exp), "power")
        if split is not None:
            return split
        b = self.value(base_node)
        e = self.value(node.exp)
        if not e.is_scalar:
            raise NotUnderstood("an array as an exponent")
        if not b.is_scalar:
            r, c = self.shape(b)
            if r != 1 and c != 1:
                raise NotUnderstood("a power of a matrix (matrix power or entrywise?): write ⊙ or the product")
            if e.expr == -1:
                raise NotUnderstood("a vector to the power −1")
        return b.with_expr(b.expr**e.expr)

    # ---------------------------------------------------------------- products and applications
    def _v_Juxt(self, node: P.Juxt):
        items = list(node.items)
        vals: list = []
        k = 0
        while k < len(items):
            it = items[k]
            nxt = items[k + 1] if k + 1 < len(items) else None
            fn = self._function_of(it)
            if fn is not None:
                if isinstance(nxt, P.Script) and isinstance(nxt.base, P.Paren):  # softmax(x)_i
                    whole = self.apply(fn, nxt.base)
                    vals.append(self.entry_of(whole, nxt.sub, f"{fn.name}(…)"))
                    k += 2
                    continue
                if not isinstance(nxt, P.Paren):
                    raise NotUnderstood(f"the function {fn.name} without parentheses")
                vals.append(self.apply(fn, nxt))
                k += 2
                continue
            looked = self._lookup_rows(it, nxt)
            if looked is not None:
                vals.append(looked)
                k += 2
                continue
            vals.append(self._operand(it))
            k += 1
        return self._product(vals, "a product")

    def ids_value(self, node) -> Val:
        """An argument of a function that reads token ids (an op's ids input, bound by a quote):
        a name of ids is those ids, as a lookup reads them; anything else is its value."""
        name = doc_name(node)
        b = self.ctx.value(name) if name is not None and name not in self.scope else None
        if b is None or b.kind != "ids":
            return self.value(node)
        self.uses.add(b.label)
        return Val(Array(b.label, tuple(b.shape), integer=True), tuple(b.shape))

    def _lookup_rows(self, table, paren):
        """E[token_ids]: the rows of a matrix picked by integer ids (`Gather`). None where
        `paren` is no brackets right after a name; brackets after a name around anything but a
        name of ids are refused (an index? an expectation E[x]? a product?)."""
        if not (isinstance(paren, P.Paren) and paren.bracket == "[") or doc_name(table) is None:
            return None
        name = doc_name(paren.items[0]) if len(paren.items) == 1 else None
        b = self.ctx.value(name) if name is not None and name not in self.scope else None
        if b is None or b.kind != "ids":
            raise NotUnderstood(
                f"brackets after {doc_name(table)}: read as a lookup only around token ids ({doc_name(table)}[token\\_ids]); "
                "an expectation is \\mathbb{E}[…], a product needs ( ) or ·"
            )
        e = self.value(table)
        if e.is_scalar or self.shape(e)[0] == 1:
            raise NotUnderstood(f"a lookup [{name}] of something that is not a matrix of rows")
        self.same(self.shape(e)[0], b.bound, f"the lookup {name}: its ids index the rows")
        self.uses.add(b.label)
        ids = Array(b.label, tuple(b.shape), integer=True)
        return Val(Gather(e.expr, ids), (b.shape[0], self.shape(e)[1]))

    def _function_of(self, node) -> FunctionSpec | None:
        name = doc_name(node)
        if name is None:
            return None
        return self.lookup_function(name)

    def apply(self, fn: FunctionSpec, paren: P.Paren) -> Val:
        args = list(paren.items)
        if fn.name == "Var":
            if len(args) != 1:
                raise NotUnderstood("Var of a list")
            return self.variance(args[0])
        if fn.kind == "builtin" and fn.arity is None:  # any number of arguments (Concat)
            return fn.apply(self, [], args)
        if fn.kind == "opaque":
            raise NotUnderstood(f"{fn.name} is declared but not defined")
        if fn.kind == "poisoned":
            raise NotUnderstood(f"{fn.name}: {fn.meaning} ({fn.origin})")
        if fn.kind == "family":
            return self.family_value(fn, args)
        if fn.kind == "document" and tuple(fn.params) == ("Q", "K", "V") and len(args) == 1:
            return self.self_attention(fn, args[0])
        if len(args) != (len(fn.params) if fn.kind == "document" else fn.arity):
            want = len(fn.params) if fn.kind == "document" else fn.arity
            raise NotUnderstood(f"{fn.name} takes {want} argument(s), given {len(args)} ({fn.origin})")
        if fn.kind == "builtin" and fn.name in ("softmax",) and len(args) == 1 and isinstance(args[0], P.Script):
            # softmax(x_i): the i-th component of softmax(x) (one reading, stated on docs/check.md)
            base = self.value(args[0].base)
            if not base.is_scalar and 1 in self.shape(base):
                whole = fn.apply(self, [base], [args[0].base])
                return self.entry_of(whole, args[0].sub, f"{fn.name}(…)")
        vals = [self.ids_value(a) if fn.reads_ids else self.value(a) for a in args]
        if fn.kind == "builtin":
            return fn.apply(self, vals, args)
        return self.call_document_function(fn, vals)

    def family_value(self, fn: FunctionSpec, args: list) -> Val:
        """P(token_k) for a function the document defined on a family's members
        (P(token_i) = …): entry k of the vector of its values. Its argument is only ever a
        member of that family: P(x) of anything else has no meaning here."""
        (family,) = fn.params
        arg = args[0] if len(args) == 1 else None
        if not (isinstance(arg, P.Script) and doc_name(arg.base) == family and len(arg.sub) == 1):
            raise NotUnderstood(
                f"{fn.name} is defined on the members {family}_i of a family only ({fn.origin}), "
                f"not on {len(args)} argument(s) of another kind"
            )
        table = self.lookup(fn.table)
        if not isinstance(table, Val):
            raise NotUnderstood(f"{fn.name}({family}_i): its values are not known here")
        return self.entry_of(table, arg.sub, f"{fn.name}({family}_…)")

    def self_attention(self, fn: FunctionSpec, arg) -> Val:
        """f(X) for a function f(Q, K, V) of one argument: self-attention, f(XW_Q, XW_K, XW_V)
        (one reading, stated on docs/check.md), with the projections the context names."""
        x = self.value(arg)
        if x.is_scalar:
            raise NotUnderstood(f"{fn.name}(Q, K, V) of one scalar")
        projections = []
        for w in ("W_Q", "W_K", "W_V"):
            b = self.ctx.value(w)
            if b is None or b.kind != "array":
                raise NotUnderstood(f"{fn.name}(X): self-attention needs {w}, which is not declared")
            self.uses.add(b.label)
            projections.append(self.multiply(x, Val(b.array(), tuple(b.shape)), f"{fn.name}(X)'s {w}"))
        return self.call_document_function(fn, projections)

    def call_document_function(self, fn: FunctionSpec, vals: list) -> Val:
        if fn.scalar:
            u = sp.Dummy("u", real=True)
            inner = Elaborator(self.ctx, scope={fn.params[0]: Val(u, ())})
            inner.subst = self.subst
            body = inner.value(fn.body)
            (v,) = vals
            return v.with_expr(body.expr.xreplace({u: v.expr}))
        inner = Elaborator(self.ctx, scope=dict(zip(fn.params, vals)))
        inner.subst = self.subst
        out = inner.value(fn.body)
        if inner.free:
            raise NotUnderstood(f"{fn.name}'s body has free indices")
        self.uses |= inner.uses
        return out

    def _product(self, vals: list, what: str) -> Val:
        acc = vals[0]
        for v in vals[1:]:
            acc = self.multiply(acc, v, what)
        return acc

    def multiply(self, a: Val, b: Val, what: str) -> Val:
        if isinstance(a, Block) or isinstance(b, Block):
            return self._block_product(a, b)
        if isinstance(a.expr, _Ones) or isinstance(b.expr, _Ones):
            return self._ones_product(a, b)
        if a.is_scalar:
            return Val(a.expr * b.expr, b.shape)
        if b.is_scalar:
            return Val(a.expr * b.expr, a.shape)
        (r1, c1), (r2, c2) = self.shape(a), self.shape(b)
        if a.gain and r1 == 1:  # γx̂: the gain scales each feature (the convention's reading)
            self.same(c1, c2, f"the gain times an array in {what}")
            return Val(a.expr * b.expr, (r2, c2))
        if r1 == 1 and r2 == 1 and not (c1 == 1 or c2 == 1):
            raise NotUnderstood(
                "two row vectors side by side: an entrywise product (⊙), a dot product (·) or an outer product?"
            )
        self.same(c1, r2, f"the matrix product in {what} ({_show(r1)}×{_show(c1)} by {_show(r2)}×{_show(c2)})")
        return Val(MatMul(a.expr, b.expr), (r1, c2))

    # ---------------------------------------------------------------- matrices written out
    def _block_product(self, a, b):
        """A product with a matrix written out: by a scalar, entry by entry; of two, the rows of
        the first times the columns of the second (sizes must fit). A 1×1 result is its entry."""
        if isinstance(a, Val) and not a.is_scalar or isinstance(b, Val) and not b.is_scalar:
            raise NotUnderstood(
                "a matrix written out entry by entry times an array: only scalars, matrices and columns written out multiply it"
            )
        if isinstance(a, Val):
            return b.map(lambda x: a.expr * x)
        if isinstance(b, Val):
            return a.map(lambda x: x * b.expr)
        (r1, c1), (r2, c2) = a.shape, b.shape
        if c1 != r2:
            kind = "column" if c2 == 1 else "matrix"
            raise NotUnderstood(
                f"the product of a {r1}×{c1} matrix and a {r2}×{c2} {kind} written out: {c1} columns against {r2} rows"
            )
        cols = [[row[j] for row in b.rows] for j in range(c2)]
        out = Block(tuple(tuple(sp.Add(*(x * y for x, y in zip(row, col))) for col in cols) for row in a.rows))
        return Val(out.rows[0][0], ()) if out.shape == (1, 1) else out

    def _block_sum(self, a, b, op: str) -> Block:
        """The sum or difference of two matrices written out, of one size, entry by entry."""
        if not (isinstance(a, Block) and isinstance(b, Block)):
            raise NotUnderstood(f"'{op}' between a matrix written out and something else (entrywise? broadcast?)")
        if a.shape != b.shape:
            raise NotUnderstood(f"'{op}' between a {_block_size(a)} and a {_block_size(b)} matrix written out")
        sign = 1 if op == "+" else -1
        return Block(tuple(tuple(x + sign * y for x, y in zip(ra, rb)) for ra, rb in zip(a.rows, b.rows)))

    def settle_pairs(self) -> None:
        """x_{2i}, x_{2i+1} in a statement that pairs dimensions: i runs over the pairs of x's
        entries, so x's length is even and twice i's range (one range for every array read so)."""
        for sym, axes in self.pair_positions.items():
            sizes = {self.resolve(s) for s, _ in self.positions.get(sym, [])}
            pairs = sizes.pop() if len(sizes) == 1 else None
            for axis, what in axes:
                axis = self.resolve(axis)
                if pairs is None:
                    pairs = axis / 2
                elif is_unknown(axis):
                    self.subst[axis] = 2 * pairs
                    axis = 2 * pairs
                else:
                    pairs = self.same(pairs, axis / 2, f"the pairs (2{sym}, 2{sym}+1) of {what}")
                if isinstance(axis, sp.Symbol):
                    self.even.add(axis)
            self.positions.setdefault(sym, []).append((pairs, f"the pairs (2{sym}, 2{sym}+1) of {axes[0][1]}"))

    def _ones_product(self, a: Val, b: Val) -> Val:
        """c 1ᵀ (a column times a row of ones): every column equal to c."""
        if isinstance(b.expr, _Ones) and not a.is_scalar:
            r1, c1 = self.shape(a)
            br, bc = self.shape(b)
            self.same(c1, br, "the product with 𝟏")
            self.same(br, 1, "𝟏ᵀ after a column")
            return Val(MatMul(a.expr, _ones_array(self.resolve(bc), self)), (r1, bc))
        raise NotUnderstood("the all-ones vector 𝟏 other than as c 𝟏ᵀ")

    # ---------------------------------------------------------------- sums

    def _summand(self, node, name: str, bound: Bound, what: str = "") -> tuple:
        """The body of a sum (or an argmax) over `name` elaborated with the index bound (its frame
        records the axes it indexes): (the scalar body, the frame); `what`: why an array body is
        refused."""
        frame = {name: bound}
        self.bound.append(frame)
        try:
            body = self.value(node.body)
        finally:
            self.bound.pop()
        if not body.is_scalar:
            raise NotUnderstood(what or "a sum of arrays (only sums of scalars and entries are understood)")
        return body, frame

    def _v_Sum(self, node: P.Sum):
        if len(node.vars) != 1:
            raise NotUnderstood("a sum over several indices at once (write one \\sum per index)")
        name = node.vars[0]
        if any(name in frame for frame in self.bound):
            raise NotUnderstood(f"the index {name} is bound by two nested sums")
        sym = sp.Dummy(name, integer=True)
        if node.lo is not None:
            if self.first != 1:
                raise NotUnderstood(
                    f"a sum with bounds in a statement that counts from {self.first} (it pairs dimensions): "
                    "counted from 1 its range would be another; write it in a statement of its own"
                )
            lo = self.index_value(node.lo) if not isinstance(node.lo, P.Num) else sp.Integer(int(node.lo.text))
            hi = self._bound_value(node.hi)
            body, frame = self._summand(node, name, Bound(sym, lo))
            if lo == self.first:  # Σ_{i=1}^{n} x_i: a length nothing fixed yet is the range's (a known one stays)
                for axis, _ in frame[name].positions:
                    if is_unknown(self.resolve(axis)):
                        self.same(axis, hi - lo + 1, f"the range of \\sum_{{{name}={lo}}}^{{{_show(hi)}}}")
            return Val(sp.Sum(body.expr, (sym, 0, hi - lo)), ())
        if name not in self.ctx.index_letters:
            raise NotUnderstood(
                f"\\sum_{name} without a range, and {name} is not a declared index: "
                f"its range is unknown (write \\sum_{{{name}=1}}^{{n}})"
            )
        body, frame = self._summand(node, name, Bound(sym, sp.Integer(self.first)))
        sizes = {self.resolve(s) for s, _ in frame[name].positions}
        if not sizes:
            raise NotUnderstood(f"\\sum_{name} without a range: {name} indexes no array, so its range is unknown")
        if len(sizes) > 1:
            raise NotUnderstood(
                f"\\sum_{name} without a range: {name} indexes axes of different sizes "
                f"({', '.join(sorted(map(_show, sizes)))})"
            )
        (n,) = sizes
        from .transcript import latex, name_latex

        self.notes.append(
            (
                f"\\sum_{name} runs over {name} = 1..{_show(n)} (the length of the axis it indexes)",
                f"$\\sum_{{{name_latex(name)}}}$ runs over ${name_latex(name)} = 1, \\dots, {latex(n)}$ "
                "(the length of the axis it indexes)",
            )
        )
        return Val(sp.Sum(body.expr, (sym, 0, n - 1)), ())

    def _v_ArgMax(self, node: P.ArgMax):
        raise NotUnderstood(
            f"\\arg\\{node.kind} (an index, not a value) is read only as the whole right side of a "
            f"definition (k = \\arg\\{node.kind}_{node.var} …)"
        )

    def argmax(self, node: P.ArgMax) -> tuple:
        """\\arg\\max_i body: (the body, a scalar, with i bound; i's range n) — i ranges over the axes
        it indexes, as in an unbounded sum (a declared index letter, one size)."""
        name = node.var
        if any(name in frame for frame in self.bound):
            raise NotUnderstood(f"the index {name} is bound twice")
        if name not in self.ctx.index_letters:
            raise NotUnderstood(f"\\arg\\{node.kind}_{name}: {name} is not a declared index, its range is unknown")
        sym = sp.Dummy(name, integer=True)
        body, frame = self._summand(
            node,
            name,
            Bound(sym, sp.Integer(self.first)),
            f"\\arg\\{node.kind} of an array (only of a scalar term in {name})",
        )
        sizes = {self.resolve(s) for s, _ in frame[name].positions}
        if len(sizes) != 1:
            why = "indexes no array" if not sizes else "indexes axes of different sizes"
            raise NotUnderstood(f"\\arg\\{node.kind}_{name}: {name} {why}, so its range is unknown")
        (n,) = sizes
        return body, sym, n

    def _bound_value(self, node) -> sp.Expr:
        v = self.value(node)
        if not v.is_scalar:
            raise NotUnderstood("an array as a sum's bound")
        return v.expr

    # ---------------------------------------------------------------- functions of the command set
    def _v_Apply(self, node: P.Apply):
        if node.func in ("max", "min"):
            a, b = (self.value(x) for x in node.args)
            shape = self.broadcast(a, b, f"\\{node.func}")
            f = sp.Max if node.func == "max" else sp.Min
            return Val(f(a.expr, b.expr), shape)
        (arg,) = node.args
        v = self.value(arg)
        f = {
            "exp": sp.exp,
            "log": sp.log,
            "sin": sp.sin,
            "cos": sp.cos,
            "tanh": sp.tanh,
            "cosh": sp.cosh,
            "sinh": sp.sinh,
        }[node.func]
        return v.with_expr(f(v.expr))

    # ---------------------------------------------------------------- cases
    def _v_Cases(self, node: P.Cases):
        if self.first != 1:
            raise NotUnderstood(f"cases in a statement that counts from {self.first} (it pairs dimensions)")
        if len(node.rows) != 2:
            raise NotUnderstood("cases are understood as two rows whose conditions are complementary")
        (v1, c1), (v2, c2) = ((self.value(v), c) for v, c in node.rows)
        if not (v1.is_scalar and v2.is_scalar):
            raise NotUnderstood("a case whose value is an array")
        if c1 is None:
            raise NotUnderstood("'otherwise' in the first row of cases")
        first = self._condition(c1)
        if c2 is not None and self._condition(c2) != sp.Not(first):
            raise NotUnderstood("the conditions of the two cases are not complementary")
        return Val(sp.Piecewise((v1.expr, first), (v2.expr, True)), ())

    def _condition(self, cond: P.Cond):
        a, b = self.index_value(cond.a), self.index_value(cond.b)
        rel = {"<": sp.Lt, ">": sp.Gt, "≤": sp.Le, "≥": sp.Ge, "=": sp.Eq, "≠": sp.Ne}[cond.rel]
        return rel(a - 1, b - 1)

    def _v_Matrix(self, node: P.Matrix) -> Block:
        """A matrix written out (bmatrix, pmatrix): small, every entry a scalar."""
        rows, cols = len(node.rows), len(node.rows[0])
        if rows > MAX_BLOCK or cols > MAX_BLOCK:
            raise NotUnderstood(f"a {rows}×{cols} matrix written out: at most {MAX_BLOCK}×{MAX_BLOCK} is read")
        if (rows, cols) == (1, 1):
            raise NotUnderstood("a 1×1 matrix written out (a scalar? a 1×1 array?): write its entry")
        entries = []
        for row in node.rows:
            out = []
            for cell in row:
                v = self.value(cell)
                if not v.is_scalar:
                    raise NotUnderstood(
                        f"an entry of a matrix written out that is not a scalar ({_show_shape(self.shape(v))}): "
                        "a block matrix is outside the grammar"
                    )
                out.append(v.expr)
            entries.append(tuple(out))
        return Block(tuple(entries))

    # ---------------------------------------------------------------- expectation
    def _v_Expect(self, node: P.Expect):
        return self.expectation(node.arg)

    def _random_form(self, node) -> sp.Expr:
        v = self.value(node)
        if not v.is_scalar:
            raise NotUnderstood("the expectation of an array")
        form = expand(v.expr, self.ctx, Policy("full"))
        randoms = {lab for lab in self.ctx.random}
        bases = {str(a.base.label) for a in form.atoms(sp.Indexed)}
        other = sorted(b for b in bases if b not in randoms)
        if other:
            raise NotUnderstood(
                f"an expectation of {', '.join(other)}, which has no stated distribution "
                "(state its moments first: \\mathbb{E}[x_i] = 0, \\mathrm{Var}(x_i) = 1)"
            )
        if not bases & randoms:
            raise NotUnderstood("an expectation of a quantity with no random variable in it")
        self.random_used = True
        return form

    def expectation(self, node) -> Val:
        form = self._random_form(node)
        try:
            return Val(self._operator().E(form), ())
        except ExpectationError as e:
            raise NotUnderstood(f"the expectation operator: {e}") from None

    def variance(self, node) -> Val:
        form = self._random_form(node)
        try:
            return Val(self._operator().var(form), ())
        except ExpectationError as e:
            raise NotUnderstood(f"the expectation operator: {e}") from None

    def _operator(self):
        from derivations.proof.expectation import Expectation

        return Expectation(*self.ctx.random.values())

    # ---------------------------------------------------------------- calculus
    def _v_Partial(self, node: P.Partial):
        return derivative(self, node)

    def _v_Differential(self, node: P.Differential):
        name = doc_name(node.base)
        if name is None:
            raise NotUnderstood("a differential d(…) of something other than a name")
        v = self.lookup(name)
        if not isinstance(v, Val) or isinstance(v.expr, sp.Number):
            raise NotUnderstood(f"d{name}: {name} is not a declared value")
        b = self.ctx.value(name)
        label = b.label
        self.diff_targets.add(label)
        self.ctx.mentioned.add(label)
        if v.is_scalar:
            return Val(sp.Symbol(diff_label(label), real=True), ())
        return Val(Array(diff_label(label), self.shape(v)), v.shape)


# --------------------------------------------------------------------------------- helpers
class _Ones(sp.Symbol):
    """The all-ones vector before its length is known (only c 𝟏ᵀ is understood)."""

    def __new__(cls, rows, cols):
        obj = sp.Symbol.__new__(cls, "ones")
        obj._dims = (rows, cols)
        return obj


def ones_value(elab: Elaborator) -> Val:
    r, c = unknown_size("ones_r"), unknown_size("ones_c")
    return Val(_Ones(r, c), (r, c))


def _ones_array(n, elab: Elaborator):
    """A row of ones of length n, as an array whose every entry is 1."""
    return ones_row(n)


def _delta(a, b):
    """δ(a, b) with a common constant offset removed (δ(j-1, k-1) is δ(j, k))."""
    a, b = sp.expand(a), sp.expand(b)
    c = a.as_coeff_Add()[0]
    return sp.KroneckerDelta(a - c, b - c)


def _show_shape(shape) -> str:
    return "×".join(_show(s) for s in shape)


def _show(e) -> str:
    """A size or expression as text; a length nothing fixed yet shows as n_<name>."""
    e = basic(e)
    unknown = {s: sp.Symbol("n_" + s.name[1:].replace(".", "_")) for s in e.free_symbols if is_unknown(s)}
    return sp.sstr(e.xreplace(unknown) if unknown else e)


def derivative(elab, node: P.Partial):
    """∂L/∂X (a gradient: an opaque array, unfolded by `expand`), ∂L/∂X_{ij} (its entry), or
    ∂Y_{ij}/∂X_{kl} (a Jacobian entry, taken here)."""
    ctx = elab.ctx
    num_name = doc_name(node.num)
    num_binding = ctx.value(num_name) if num_name else None
    den = node.den
    if isinstance(den, P.Script):
        den_name, sub = doc_name(den.base), den.sub
        if den_name is not None and ctx.value(doc_name(den) or "") is not None:
            den_name, sub = doc_name(den), None
    else:
        den_name, sub = doc_name(den), None
    if den_name is None:
        raise NotUnderstood("∂/∂(…): the denominator must be a name or an entry (∂X, ∂X_{ij})")
    xb = ctx.value(den_name)
    if xb is None or xb.kind not in ("array", "scalar"):
        raise NotUnderstood(f"∂/∂{den_name}: {den_name} is not a declared array or scalar")
    ctx.mentioned.add(xb.label)
    if num_binding is not None and num_binding.kind == "loss":
        label = xb.label
        generic = den_name in PARAMETERS and xb.origin == "convention"  # any parameter of the model
        if loss_defined(ctx) and label not in upstream(ctx, "L") and not generic:
            raise NotUnderstood(f"∂{num_name}/∂{den_name}: the loss as defined does not depend on {den_name}")
        elab.grad_targets.add(label)
        if xb.kind == "scalar":
            if sub is not None:
                raise NotUnderstood(f"a subscript on the scalar {den_name}")
            return Val(sp.Symbol(f"dL/d{label}", real=True), ())
        g = Val(Array(f"dL/d{label}", tuple(elab.resolve(s) for s in xb.shape)), xb.shape)
        if sub is None:
            return g
        return elab.entry_of(g, sub, f"∂{num_name}/∂{den_name}")
    # a Jacobian entry
    y = elab.value(node.num)
    if not y.is_scalar:
        raise NotUnderstood("∂Y/∂X of an array Y (only entries, ∂Y_{ij}/∂X_{kl}, or a loss)")
    if xb.kind == "array":
        if sub is None:
            raise NotUnderstood(f"∂(…)/∂{den_name}: differentiate by an entry ({den_name}_{{ij}})")
        x = elab.entry_of(elab.lookup(den_name), sub, den_name).expr
    else:
        if sub is not None:
            raise NotUnderstood(f"a subscript on the scalar {den_name}")
        x = elab.lookup(den_name).expr
    elab.jacobian_targets.add(xb.label)
    unfolded = expand(y.expr, ctx, Policy("local", jac=frozenset({xb.label})))
    return Val(sp.diff(document_form(unfolded), x), ())

"""Wrong edits of the printed text: the mutants of `qed audit --text`.

`qed audit` (without --text) mutates the SymPy objects that codegen prints and asks the proofs to
refute each. This module mutates what is printed — the files of generated/numpy/ and
generated/torch/ as text — with the slips a person makes by hand in such code, one at a time,
and `qed audit --text` asks the judges that `qed prove` runs (the exact symbolic run, the exact
rational run, the edge judge) to refute each:

    sign      `+` ↔ `-` of a binary operation or an augmented assignment; a unary minus dropped
    factor    `*` ↔ `/`; a float literal doubled
    bound     an integer literal one larger (an axis, a slice bound, a diagonal offset, a
              start of a range); a slice's upper bound one smaller
    compare   `<` ↔ `<=`, `>` ↔ `>=`, `==` ↔ `!=`
    keyword   `dim=`/`axis=` moved to the other trailing axis, `keepdim(s)=` negated, a
              `value=`/`alpha=` dropped, an `alpha=`/`value=` negated
    swap      the first two positional arguments of a call exchanged
    drop      one statement of a function body replaced by `pass`

Edits that cannot change what the code computes are not made: two arguments of a symmetric call
exchanged (`max`, `np.maximum`, `broadcast_shapes`, …), a product or quotient by ±1, the sign of
a NaN-policy term (`x ± _support.nan_of(a)`: the term is 0 or NaN).

Only the code of function bodies is mutated (no docstring, comment, string or import). Each
mutant is the whole file's text with one source segment replaced, so every other line stays as
printed. The list is deterministic: `mutants(text)` in source order; `sample` takes an evenly
spread subset when a file has more than the run can afford.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

__all__ = ["TextMutant", "mutants", "sample"]


@dataclass(frozen=True)
class TextMutant:
    operator: str  # sign, factor, bound, compare, keyword, swap, drop
    line: int  # 1-based line of the edit in the printed file
    before: str  # the source segment as printed
    after: str  # what replaces it
    text: str  # the whole mutated file

    def __str__(self) -> str:
        return f"line {self.line} [{self.operator}]: {self.before!r} -> {self.after!r}"


_SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_BIN_KIND = {ast.Add: "sign", ast.Sub: "sign", ast.Mult: "factor", ast.Div: "factor"}
_SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


class _Source:
    """`text` with its lines split once: the character offset of an AST position (whose
    column is counted in UTF-8 bytes) and a node's source segment, without re-splitting the
    whole text per node as `ast.get_source_segment` does."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts, pos = [], 0
        for line in self.lines:
            self.starts.append(pos)
            pos += len(line)
        self.starts.append(pos)

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self.starts[lineno - 1] + (col if line.isascii() else len(line.encode()[:col].decode()))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def replace(self, node: ast.AST, new: str) -> str:
        start, end = self.span(node)
        return self.text[:start] + new + self.text[end:]


def _is_docstring(node, parent) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and parent.body
        and parent.body[0] is node
    )


def _edits(node: ast.AST, nan_names: frozenset = frozenset()):
    """(operator, replacement node or source text) for each one-site edit of `node` itself.
    `nan_names`: the names of the function that hold NaN-policy terms (`_nan_term`)."""
    if (
        isinstance(node, ast.BinOp)
        and type(node.op) in _SWAP_BIN
        and not _by_unit(node)
        and not _adds_nan_term(node, nan_names)
    ):
        new = copy.copy(node)
        new.op = _SWAP_BIN[type(node.op)]()
        yield _BIN_KIND[type(node.op)], new
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield "sign", node.operand
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _SWAP_CMP:
        new = copy.copy(node)
        new.ops = [_SWAP_CMP[type(node.ops[0])]()]
        yield "compare", new
    elif isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(node.value, bool):
        yield "bound", ast.Constant(node.value + 1)
    elif isinstance(node, ast.Constant) and type(node.value) is float:
        yield "factor", ast.Constant(node.value * 2)
    elif isinstance(node, ast.Slice) and node.upper is not None:
        new = copy.copy(node)
        new.upper = ast.BinOp(node.upper, ast.Sub(), ast.Constant(1))
        yield "bound", new
    elif isinstance(node, ast.Call):
        if (
            len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            and _callee(node) not in _SYMMETRIC
        ):
            new = copy.copy(node)
            new.args = [node.args[1], node.args[0], *node.args[2:]]
            yield "swap", new
        for k, kw in enumerate(node.keywords):
            if kw.arg in ("dim", "axis") and isinstance(kw.value, (ast.Constant, ast.UnaryOp)):
                v = (
                    ast.literal_eval(kw.value)
                    if not isinstance(kw.value, ast.UnaryOp)
                    else -kw.value.operand.value
                    if isinstance(kw.value.operand, ast.Constant)
                    else None
                )
                if isinstance(v, int):
                    other = -2 if v == -1 else -1 if v == -2 else v + 1
                    new = copy.copy(node)
                    new.keywords = [
                        *node.keywords[:k],
                        ast.keyword(kw.arg, ast.Constant(other)),
                        *node.keywords[k + 1 :],
                    ]
                    yield "keyword", new
            elif kw.arg in ("keepdim", "keepdims") and isinstance(kw.value, ast.Constant):
                new = copy.copy(node)
                new.keywords = [
                    *node.keywords[:k],
                    ast.keyword(kw.arg, ast.Constant(not kw.value.value)),
                    *node.keywords[k + 1 :],
                ]
                yield "keyword", new
            elif kw.arg in ("value", "alpha"):
                new = copy.copy(node)
                new.keywords = [*node.keywords[:k], *node.keywords[k + 1 :]]
                yield "keyword", new
                neg = copy.copy(node)
                neg.keywords = [
                    *node.keywords[:k],
                    ast.keyword(kw.arg, ast.UnaryOp(ast.USub(), kw.value)),
                    *node.keywords[k + 1 :],
                ]
                yield "keyword", neg
    elif (
        isinstance(node, ast.AugAssign)
        and type(node.op) in _SWAP_BIN
        and not _by_unit(node)
        and not _adds_nan_term(node, nan_names)
    ):
        new = copy.copy(node)
        new.op = _SWAP_BIN[type(node.op)]()
        yield _BIN_KIND[type(node.op)], new


# calls whose first two arguments may be exchanged without changing anything: not a wrong edit
_SYMMETRIC = {
    "min",
    "max",
    "np.maximum",
    "np.minimum",
    "torch.maximum",
    "torch.minimum",
    "transpose",
    "swapaxes",
    "np.swapaxes",
    "torch.transpose",
    "addcmul_",
    "np.multiply",  # a·b = b·a and a + b = b + a exactly in floating point, too
    "np.add",
    "np.broadcast_shapes",  # the broadcast shape of several shapes does not depend on their order
    "torch.broadcast_shapes",
}  # t.addcmul_(a, b): t + a·b


# The NaN policy's terms: `_support.nan_of(a)` is 0 where `a` is finite and NaN where it is not,
# so is −nan_of(a) (−0 and NaN): x + t and x − t are the same for such a t, and a sign edit there
# is no wrong edit. (Dropping the statement that adds t is one: the edge judge's NaN-policy
# check refutes it.)
_NAN_TERMS = ("nan_of", "nan_of_columns")


def _nan_term(node, names: frozenset) -> bool:
    """`node` is a sum of NaN-policy terms: calls of `_support.nan_of*`, names holding such sums."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in _NAN_TERMS
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _nan_term(node.left, names) and _nan_term(node.right, names)
    return False


def _adds_nan_term(node, names: frozenset) -> bool:
    if not isinstance(node.op, (ast.Add, ast.Sub)):
        return False
    return _nan_term(node.right if isinstance(node, ast.BinOp) else node.value, names)


def _nan_names(fn: ast.AST) -> frozenset:
    """The names that `fn` assigns only sums of NaN-policy terms to."""
    names: set = set()
    while True:
        found = {
            t.id
            for a in ast.walk(fn)
            if isinstance(a, ast.Assign) and _nan_term(a.value, frozenset(names))
            for t in a.targets
            if isinstance(t, ast.Name)
        }
        other = {
            t.id
            for a in ast.walk(fn)
            if isinstance(a, ast.Assign) and not _nan_term(a.value, frozenset(names | found))
            for t in a.targets
            if isinstance(t, ast.Name)
        }
        found -= other
        if found <= names:
            return frozenset(names)
        names |= found


def _callee(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else ""
        return f"{base}.{f.attr}" if base in ("np", "torch") else f.attr
    return ""


def _by_unit(node) -> bool:
    """`x * ±1` ↔ `x / ±1` (and their augmented forms) compute the same: not a wrong edit."""
    if not isinstance(node.op, (ast.Mult, ast.Div)):
        return False
    other = node.right if isinstance(node, ast.BinOp) else node.value
    try:
        return ast.literal_eval(other) in (1, -1)
    except ValueError:
        return False


_STATEMENTS = (ast.Assign, ast.AugAssign, ast.Expr, ast.AnnAssign)


def mutants(text: str) -> list[TextMutant]:
    """Every one-site wrong edit of the code in `text`'s function bodies, in source order."""
    tree = ast.parse(text)
    source = _Source(text)
    out: list[TextMutant] = []
    seen: set = set()

    def emit(op, node, new):
        before = source.segment(node)
        after = new if isinstance(new, str) else ast.unparse(ast.fix_missing_locations(new))
        if after == before:
            return
        key = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, after)
        if key in seen:
            return
        seen.add(key)
        out.append(TextMutant(op, node.lineno, before, after, source.replace(node, after)))

    def visit_body(fn: ast.AST):
        for parent in ast.walk(fn):
            body = [
                s
                for field in ("body", "orelse")
                if isinstance(getattr(parent, field, None), list)
                for s in getattr(parent, field)
            ]
            for stmt in body:
                if not isinstance(stmt, ast.stmt) or _is_docstring(stmt, parent):
                    continue
                if (
                    isinstance(stmt, _STATEMENTS)
                    and not isinstance(stmt, ast.Expr)
                    or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call))
                ):
                    emit("drop", stmt, "pass")
        nan_names = _nan_names(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.JoinedStr):  # messages: never mutated
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                continue
            for op, new in _edits(node, nan_names):
                emit(op, node, new)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            visit_body(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit_body(item)
    # an edit inside an f-string (a message) is no wrong computation
    fstrings = [(n.lineno, n.end_lineno, ast.unparse(n)) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    out = [m for m in out if not _inside_fstring(fstrings, m)]
    out.sort(key=lambda m: (m.line, m.operator, m.after))
    return out


def _inside_fstring(fstrings: list[tuple[int, int, str]], m: TextMutant) -> bool:
    """Whether `m` edits a message: the first f-string (lineno, end_lineno, unparsed text) on its
    line spans several lines, or holds the edited text."""
    for lineno, end_lineno, unparsed in fstrings:
        if lineno <= m.line <= end_lineno:
            return m.before in unparsed if lineno == end_lineno else True
    return False


def sample(ms: list[TextMutant], limit: int | None) -> list[TextMutant]:
    """At most `limit` mutants spread evenly over the list (all of them for None)."""
    if limit is None or len(ms) <= limit:
        return list(ms)
    step = len(ms) / limit
    return [ms[int(k * step)] for k in range(limit)]

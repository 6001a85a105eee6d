"""Coverage in printed lines: which lines of generated/ the judges executed.

The judges (the symbolic run of qed/tools/translation.py, the exact rational run of
qed/tools/field_judge.py) execute the printed files themselves: each is compiled from its text
with the file's own path as the code's file name, so a line event of the interpreter names the
generated file and its line. `Tracer` records those events; `report` counts, per backend, the
lines that carry code (the lines that compile to bytecode: `co_lines` of every code object of the
file, docstrings left out) against the ones a judge executed.

What need not run is declared here, once, and short:

    EXEMPT_FILES   package files that only import (`generated/__init__.py`, `<backend>/__init__.py`)
    import lines   `import …`, `from … import …` and `__all__ = …`: they bind names, they compute
                   nothing a judge could check

Every other line — a kernel's formula lines, its validation call, the loops of
`attention_tiled`, the mha template, the `_support` and `_validate` helpers, the
`torch.autograd.Function` and `nn.Module` wrappers — must have been executed, or `qed prove`
fails and names it.
"""

from __future__ import annotations

import ast
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

from . import ROOT

__all__ = ["Tracer", "instrument", "HIT", "LineCount", "report", "code_lines", "EXEMPT_FILES", "GENERATED"]

GENERATED = ROOT / "generated"
BACKENDS = ("numpy", "torch")

# package files that only import and re-export: nothing in them computes
EXEMPT_FILES = ("generated/__init__.py", "generated/numpy/__init__.py", "generated/torch/__init__.py")


def _generated_path(filename: str) -> Path | None:
    """The generated file a code object's file name stands for, or None."""
    try:
        p = Path(filename).resolve()
    except (OSError, ValueError):
        return None
    try:
        p.relative_to(GENERATED)
    except ValueError:
        return None
    return p


_ACTIVE = threading.local()  # .tracer: the Tracer of a `Tracer(printed_only=True)` block


class Tracer:
    """A context that records every (generated file, line) the interpreter executes inside it.

    With `printed_only=False` everything inside the block runs traced (`sys.settrace`, in this
    thread and in threads started inside it): what the edge judge uses, which imports the
    printed modules. CPython runs every frame slowly while a trace function is set, whatever it
    returns (three times slower for the SymPy-heavy judges), so the judges that load printed text
    through translation's loaders use `printed_only=True`: no trace function, and the counters
    `instrument` compiles into the text record each statement run."""

    def __init__(self, printed_only: bool = False):
        self.hits: dict[Path, set[int]] = {}
        self.printed_only = printed_only
        self._known: dict[str, Path | None] = {}
        self._previous = None

    def _local(self, frame, event, arg):
        if event == "line":
            self.hits[self._known[frame.f_code.co_filename]].add(frame.f_lineno)
        return self._local

    def _global(self, frame, event, arg):
        name = frame.f_code.co_filename
        path = self._known.get(name, False)
        if path is False:
            path = self._known[name] = _generated_path(name)
        if path is None:
            return None
        self.hits.setdefault(path, set()).add(frame.f_lineno)  # the `def` line's call
        return self._local

    def __enter__(self):
        if self.printed_only:
            self._previous = getattr(_ACTIVE, "tracer", None)
            _ACTIVE.tracer = self
            return self
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        threading.settrace(self._global)
        return self

    def __exit__(self, *exc):
        if self.printed_only:
            _ACTIVE.tracer = self._previous
            return False
        sys.settrace(self._previous)
        threading.settrace(None)
        return False

    def merge(self, other: Tracer | dict) -> None:
        hits = other.hits if isinstance(other, Tracer) else other
        for p, lines in hits.items():
            self.hits.setdefault(Path(p), set()).update(lines)


# ------------------------------------------------------------------------- statements, counted
# The judges' loaders compile printed text with counters in it (`instrument`): running a
# statement records its lines in the active `Tracer(printed_only=True)`, at the cost of one call,
# while no trace function slows the judges' own work. A statement's lines are those of its own
# code (a compound statement's header, not its body) less its conditional parts (the branches of
# `a if c else b`, the later operands of `and`/`or`, a lambda's or a comprehension's body and
# conditions, an assert's message), each of which has a counter of its own that runs when it is
# evaluated. So a line counts only if code on it ran (a loader that forgot to instrument loses
# lines and fails the coverage; it cannot pass it).

HIT = "__qed_hit__"
_COMPOUND = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
)


def _conditional_parts(node) -> list:
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.BoolOp):
        return node.values[1:]
    if isinstance(node, ast.Lambda):
        return [node.body]
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        body = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return body + [x for g in node.generators for x in g.ifs] + [g.iter for g in node.generators[1:]]
    if isinstance(node, ast.Assert) and node.msg is not None:
        return [node.msg]
    return []


def _lines_of(roots) -> frozenset:
    """The lines of the nodes under `roots`, conditional parts left out (they count their own)."""
    lines: set[int] = set()
    skip: set[int] = set()
    for root in roots:
        for node in ast.walk(root):
            if id(node) in skip:
                continue
            for part in _conditional_parts(node):
                skip.update(id(n) for n in ast.walk(part))
            if hasattr(node, "lineno"):
                lines.add(node.lineno)
    return frozenset(lines)


def _own_lines(stmt) -> frozenset:
    """The lines a run of `stmt` itself reaches for sure: a compound statement's header (its
    decorators, test, target, iterator, items, signature), a simple one's whole text, either
    without its conditional parts."""
    if not isinstance(stmt, _COMPOUND):
        return _lines_of([stmt])
    parts = [*getattr(stmt, "decorator_list", ()), *(getattr(stmt, f, None) for f in ("test", "target", "iter"))]
    parts += [*getattr(stmt, "items", ()), *getattr(stmt, "bases", ()), *getattr(stmt, "keywords", ())]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts += [stmt.args, stmt.returns]
    return _lines_of([p for p in parts if p is not None]) | {stmt.lineno}


class _Conditionals(ast.NodeTransformer):
    """Every conditional part P (see `_conditional_parts`) rewritten as `(__qed_hit__(k), P)[1]`:
    its lines count when, and only when, it is evaluated. Innermost first."""

    def __init__(self, table: list):
        self.table = table

    def _wrap(self, part):
        self.table.append(_lines_of([part]))
        call = ast.Call(ast.Name(HIT, ast.Load()), [ast.Constant(len(self.table) - 1)], [])
        return ast.copy_location(ast.Subscript(ast.Tuple([call, part], ast.Load()), ast.Constant(1), ast.Load()), part)

    def generic_visit(self, node):
        super().generic_visit(node)
        if isinstance(node, ast.IfExp):
            node.body, node.orelse = self._wrap(node.body), self._wrap(node.orelse)
        elif isinstance(node, ast.BoolOp):
            node.values = [node.values[0], *map(self._wrap, node.values[1:])]
        elif isinstance(node, ast.Lambda):
            node.body = self._wrap(node.body)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            if isinstance(node, ast.DictComp):
                node.key, node.value = self._wrap(node.key), self._wrap(node.value)
            else:
                node.elt = self._wrap(node.elt)
            for n, g in enumerate(node.generators):
                g.ifs = [self._wrap(x) for x in g.ifs]
                if n:
                    g.iter = self._wrap(g.iter)
        elif isinstance(node, ast.Assert) and node.msg is not None:
            node.msg = self._wrap(node.msg)
        return node


class _Counted(ast.NodeTransformer):
    """Before every statement of every body, `__qed_hit__(k)`; `table[k]` its lines."""

    def __init__(self):
        self.table: list[frozenset] = []

    def _body(self, stmts: list) -> list:
        out = []
        for n, st in enumerate(stmts):
            docstring = n == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)
            if not docstring and not (isinstance(st, ast.ImportFrom) and st.module == "__future__"):
                self.table.append(_own_lines(st))
                call = ast.Call(ast.Name(HIT, ast.Load()), [ast.Constant(len(self.table) - 1)], [])
                out.append(ast.copy_location(ast.Expr(call), st))
            out.append(self.visit(st))
        return out

    def generic_visit(self, node):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, name, self._body(stmts))
        for handler in getattr(node, "handlers", ()):
            lines = frozenset(range(handler.lineno, handler.body[0].lineno)) or frozenset((handler.lineno,))
            self.table.append(lines)
            call = ast.Call(ast.Name(HIT, ast.Load()), [ast.Constant(len(self.table) - 1)], [])
            handler.body = [ast.copy_location(ast.Expr(call), handler), *self._body(handler.body)]
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.stmt, ast.ExceptHandler)):
                super().generic_visit(child)
        return node


def instrument(tree: ast.Module, path) -> tuple[ast.Module, object]:
    """(the module with a counter before every statement, the counter to bind to `HIT` in its
    namespace): a run of statement k adds its lines of `path` to the active Tracer's hits."""
    counted = _Counted()
    tree = counted.visit(_Conditionals(counted.table).visit(tree))
    table = counted.table
    where = Path(path).resolve()

    def hit(k: int) -> None:
        tracer = getattr(_ACTIVE, "tracer", None)
        if tracer is not None:
            tracer.hits.setdefault(where, set()).update(table[k])

    return ast.fix_missing_locations(tree), hit


def _docstring_lines(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.update(range(body[0].lineno, body[0].end_lineno + 1))
    return out


def _import_lines(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def code_lines(path: Path) -> tuple[set[int], set[int]]:
    """(the lines of `path` that carry code, the exempt ones among them): the lines that some code
    object of the compiled file maps bytecode to, docstrings left out; exempt are the import
    lines and `__all__`."""
    text = path.read_text()
    tree = ast.parse(text)
    lines: set[int] = set()
    todo = [compile(text, str(path), "exec")]
    while todo:
        code = todo.pop()
        for _, _, line in code.co_lines():
            if line is not None:
                lines.add(line)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    lines -= _docstring_lines(tree)
    lines.discard(0)
    return lines, lines & _import_lines(tree)


@dataclass
class LineCount:
    backend: str
    executed: int = 0
    total: int = 0
    missed: dict = field(default_factory=dict)  # relative path -> sorted missed lines
    broken: dict = field(default_factory=dict)  # relative path -> why it does not parse

    @property
    def complete(self) -> bool:
        return self.executed == self.total and not self.broken

    def line(self) -> str:
        pct = 100.0 * self.executed / self.total if self.total else 100.0
        return f"{self.backend} {self.executed}/{self.total} lines ({pct:.1f} %)"


def report(hits: dict, backends=BACKENDS, files: list[Path] | None = None) -> dict[str, LineCount]:
    """Per backend, the code lines of generated/<backend>/ (or of `files`) executed according to
    `hits` ({path: {line, …}}) out of all of them, exempt lines and files left out."""
    hits = {Path(p).resolve(): set(v) for p, v in hits.items()}
    out: dict[str, LineCount] = {}
    for backend in backends:
        count = LineCount(backend)
        paths = (
            sorted((GENERATED / backend).glob("*.py"))
            if files is None
            else [f for f in files if f.parent.name == backend]
        )
        for p in paths:
            rel = p.relative_to(ROOT).as_posix()
            if rel in EXEMPT_FILES:
                continue
            try:
                lines, exempt = code_lines(p)
            except (SyntaxError, ValueError) as e:  # a printed file that is not Python: no line ran
                count.broken[rel] = (
                    f"does not parse: {e.msg if isinstance(e, SyntaxError) else e} (line {getattr(e, 'lineno', '?')})"
                )
                continue
            need = lines - exempt
            done = need & hits.get(p.resolve(), set())
            count.total += len(need)
            count.executed += len(done)
            if need - done:
                count.missed[rel] = sorted(need - done)
        out[backend] = count
    return out


def describe_missed(count: LineCount, limit: int = 40) -> list[str]:
    """`path:line  text` for the first `limit` missed lines (a file that does not parse first)."""
    out = [f"{rel}: {why}" for rel, why in count.broken.items()]
    for rel, lines in count.missed.items():
        text = (ROOT / rel).read_text().splitlines()
        for n in lines:
            out.append(f"{rel}:{n}  {text[n - 1].strip()}")
    return out[:limit] + ([f"… and {len(out) - limit} more"] if len(out) > limit else [])

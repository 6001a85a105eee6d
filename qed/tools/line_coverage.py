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

__all__ = ["Tracer", "LineCount", "report", "code_lines", "EXEMPT_FILES", "GENERATED"]

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


class Tracer:
    """A context that records every (generated file, line) the interpreter executes inside it,
    in this thread and in threads started inside it. Other files run untraced (their frames are
    not followed line by line), so the judges pay for the generated lines only."""

    def __init__(self):
        self.hits: dict[Path, set[int]] = {}
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
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        threading.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous)
        threading.settrace(None)
        return False

    def merge(self, other: Tracer | dict) -> None:
        hits = other.hits if isinstance(other, Tracer) else other
        for p, lines in hits.items():
            self.hits.setdefault(Path(p), set()).update(lines)


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

    @property
    def complete(self) -> bool:
        return self.executed == self.total

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
            lines, exempt = code_lines(p)
            need = lines - exempt
            done = need & hits.get(p.resolve(), set())
            count.total += len(need)
            count.executed += len(done)
            if need - done:
                count.missed[rel] = sorted(need - done)
        out[backend] = count
    return out


def describe_missed(count: LineCount, limit: int = 40) -> list[str]:
    """`path:line  text` for the first `limit` missed lines."""
    out = []
    for rel, lines in count.missed.items():
        text = (ROOT / rel).read_text().splitlines()
        for n in lines:
            out.append(f"{rel}:{n}  {text[n - 1].strip()}")
    return out[:limit] + ([f"… and {len(out) - limit} more"] if len(out) > limit else [])

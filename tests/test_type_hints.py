"""Type hints on every public generated function and on the qed Python API (issue 27, item 5).

Every function or method whose name does not start with `_`, in generated/ (printed by codegen's
templates) and in qed/*.py (qed/tools/ aside), annotates each parameter (self and cls aside) and
its return. The files are parsed, never imported: the annotations are never evaluated (every
file starts with `from __future__ import annotations`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def unannotated(source: str, filename: str = "<string>") -> list[str]:
    """`file:line name: [what lacks an annotation]` for each public function or method (in a
    public class) of `source` that lacks one on a parameter or its return."""
    out: list[str] = []

    def visit(body: list, prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                if in_class and params and params[0].arg in ("self", "cls"):
                    params = params[1:]
                lacking = [p.arg for p in params if p.annotation is None]
                lacking += ["return"] if node.returns is None else []
                if lacking:
                    out.append(f"{filename}:{node.lineno} {prefix}{node.name}: {', '.join(lacking)}")

    visit(ast.parse(source).body, "", False)
    return out


def _files() -> list[Path]:
    return sorted((ROOT / "generated").rglob("*.py")) + sorted((ROOT / "qed").glob("*.py"))


def test_every_public_function_is_annotated():
    files = _files()
    assert any(f.parent.name == "numpy" for f in files) and any(f.parent.name == "qed" for f in files)
    missing = [m for f in files for m in unannotated(f.read_text(), str(f.relative_to(ROOT)))]
    assert not missing, "public functions without type hints:\n" + "\n".join(missing)


def test_the_check_can_fail():
    source = """
def ok(x: int, *args: int, y: float = 1.0, **kw: object) -> int: ...
def no_return(x: int): ...
def bare(x, y: int) -> None: ...
def _private(x): ...
class C:
    def method(self, x) -> None: ...
    @classmethod
    def make(cls) -> C: ...
    @staticmethod
    def forward(ctx, x: int) -> int: ...
    def __init__(self, x): ...
class _Hidden:
    def method(self, x): ...
"""
    assert unannotated(source) == [
        "<string>:3 no_return: return",
        "<string>:4 bare: x",
        "<string>:7 C.method: x",
        "<string>:11 C.forward: ctx",
    ]
    assert unannotated("def f(*args, **kw) -> None: ...") == ["<string>:1 f: args, kw"]

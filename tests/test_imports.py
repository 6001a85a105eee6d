"""The import graph: which layer may import what (the table below), and no import cycle in qed/.

Every module's AST is walked, imports inside functions included (a lazy import is still a
dependency); relative imports are resolved to the module they name.

    layer        may import (the standard library always)
    generated    numpy, scipy, torch, and itself (also codegen/support/: files that codegen copies
                 verbatim into generated/, so code of this layer kept where codegen finds it)
    derivations  sympy, mpmath, numpy, scipy, and itself
    codegen      derivations, jinja2, sympy, and itself
    qed          generated, numpy, torch, safetensors, threadpoolctl, rich, matplotlib, and
                 itself (the runtime: every module of qed/ outside qed/tools/); qed.tools only
                 inside a function of the command line (qed/cli.py, qed/cli_tools.py), which
                 loads a tool when its command runs; qed.tools.check inside qed/__init__.py's
                 __getattr__ (LAZY: qed.check, qed.derive, loaded on first use)
    qed.tools    anything
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("generated", "derivations", "codegen", "qed")

ALLOWED = {
    "generated": {"generated", "numpy", "scipy", "torch"},
    "derivations": {"derivations", "sympy", "mpmath", "numpy", "scipy"},
    "codegen": {"codegen", "derivations", "jinja2", "sympy"},
    "qed": {"qed", "generated", "numpy", "torch", "safetensors", "threadpoolctl", "rich", "matplotlib"},
    "qed.tools": None,  # anything
}
CLI = {"qed.cli", "qed.cli_tools"}  # may load qed.tools inside a function
LAZY = {("qed", "qed.tools.check")}  # qed.check, qed.derive: loaded by qed/__init__.py's __getattr__ on first use


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


GENERATED_SOURCES = "codegen.support"  # copied verbatim into generated/


def layer_of(module: str) -> str:
    """The layer of a module name: qed.tools, one of PACKAGES, or the top-level name of a
    third-party or standard-library module."""
    if module == "qed.tools" or module.startswith("qed.tools."):
        return "qed.tools"
    if module == GENERATED_SOURCES or module.startswith(GENERATED_SOURCES + "."):
        return "generated"
    return module.split(".")[0]


def imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function?) for every import statement of a module."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                    if child.module:
                        out.append((target, child.lineno, in_function))
                    else:  # from . import x: x is a module here
                        out.extend((f"{target}.{a.name}", child.lineno, in_function) for a in child.names)
                else:
                    out.append((child.module, child.lineno, in_function))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return out


def violations(root: Path = ROOT, packages=PACKAGES) -> list[str]:
    """'module:line imports name (layer may not)' for every import the table forbids."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            source = layer_of(module)
            allowed = ALLOWED[source]
            if allowed is None:
                continue
            for name, line, in_function in imports(path, module):
                target = layer_of(name)
                if target in stdlib or target in allowed:
                    continue
                if target == "qed.tools" and module in CLI and in_function:
                    continue
                if (module, name) in LAZY and in_function:
                    continue
                where = " at module level" if target == "qed.tools" and module in CLI else ""
                found.append(f"{module}:{line} imports {name}{where} ({source} may not import {target})")
    return found


def test_the_import_table_holds():
    assert violations() == []


def test_the_table_catches_a_violation(tmp_path):
    """Synthetic packages that break each rule once: every break is named, module and import."""
    files = {
        "qed/__init__.py": "",
        "qed/model.py": "import numpy\nfrom .config import X\n\ndef f():\n    from derivations import registry\n",
        "qed/config.py": "from codegen.render import render\n",
        "qed/cli.py": "from .tools.prove import main\n\ndef run():\n    from .tools import docs\n",
        "qed/sample.py": "def run():\n    from .tools.bench import run_cli\n",
        "qed/tools/__init__.py": "import sympy\nimport codegen\n",
        "derivations/__init__.py": "",
        "derivations/softmax.py": "import sympy\nfrom generated.numpy import softmax\n",
        "codegen/__init__.py": "from qed import config\n",
        "generated/__init__.py": "import sympy\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert sorted(violations(tmp_path)) == sorted(
        [
            "qed.model:5 imports derivations (qed may not import derivations)",
            "qed.config:1 imports codegen.render (qed may not import codegen)",
            "qed.cli:1 imports qed.tools.prove at module level (qed may not import qed.tools)",
            "qed.sample:2 imports qed.tools.bench (qed may not import qed.tools)",
            "derivations.softmax:2 imports generated.numpy (derivations may not import generated)",
            "codegen:1 imports qed (codegen may not import qed)",
            "generated:1 imports sympy (generated may not import sympy)",
        ]
    )


def test_building_the_parser_loads_no_tool():
    """`qed train` and the other runtime commands never import qed/tools/: the command line
    loads a tool only when its command runs."""
    code = (
        "import json, sys\nfrom qed.cli import build_parser\nbuild_parser()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('qed', 'derivations', 'codegen'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["qed", "qed.cli", "qed.cli_tools", "qed.cli_types"]


# --------------------------------------------------------------------------- no cycle in qed/
def qed_imports() -> dict[str, set[str]]:
    """module name (relative to qed) -> the qed modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "qed").rglob("*.py")):
        module = module_name(path)
        name = module.removeprefix("qed").removeprefix(".") or "__init__"
        deps = set()
        for target, _, _ in imports(path, module):
            if target == "qed" or not target.startswith("qed."):
                continue
            dep = target.removeprefix("qed.")
            while dep not in _known() and "." in dep:  # `from .x import name`: the module x
                dep = dep.rsplit(".", 1)[0]
            deps.add(dep)
        graph[name] = deps - {name, "__init__"}
    return graph


def _known() -> set[str]:
    return {module_name(p).removeprefix("qed.") for p in (ROOT / "qed").rglob("*.py")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_detector_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_qed():
    graph = qed_imports()
    assert {"model_numpy", "parallel", "workers", "shard_worker", "train", "cli", "tools.bench"} <= set(graph)
    # the pair that once imported each other: the worker process builds the model, the model's
    # parallel execution starts the workers (a lazy import, seen all the same)
    assert "model_numpy" in graph["shard_worker"] and "workers" in graph["parallel"]
    assert "parallel" in graph["model_numpy"]
    assert cycles(graph) == []


@pytest.mark.parametrize("module", ["qed.model_numpy", "qed.model_torch"])
def test_neither_model_imports_the_other(module):
    other = {"qed.model_numpy": "model_torch", "qed.model_torch": "model_numpy"}[module]
    assert other not in qed_imports()[module.removeprefix("qed.")]

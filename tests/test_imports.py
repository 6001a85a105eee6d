"""The import graph of the runtime package `qed/`: no module imports itself back, through any
chain of imports, counting those inside functions (a lazy import is still a dependency)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def qed_imports() -> dict[str, set[str]]:
    """module name -> the qed modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "qed").glob("*.py")):
        name = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)       # from . import x
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("qed."):
                deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("qed."))
        graph[name] = deps - {name, "__init__"}
    return graph


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
    assert {"model_numpy", "workers", "shard_worker", "train", "cli"} <= set(graph)
    assert "model_numpy" in graph["shard_worker"] and "workers" in graph["model_numpy"]
    assert cycles(graph) == []

"""The judges of the printed code, run together: what `qed prove` adds to the claims.

    symbolic   qed/tools/translation.py: each printed file of both backends executed on exact
               SymPy symbols at small concrete sizes, every output and gradient compared exactly
               with the claims' index form (the normaliser may decide a residual)
    rational   qed/tools/field_judge.py: each printed file executed on exact rationals at random
               points and larger random sizes (blocks that do not divide them, leading batch
               axes), transcendental functions uninterpreted, compared with the claims' index
               form evaluated by an evaluator of its own (no code shared with the normaliser)
    edges      qed/tools/judge_edges.py: every printed refusal (a way out of the proofs' domain)
               exercised, every empty-output path checked exactly

Every judge runs under `line_coverage.Tracer`, so the run also says which printed lines were
executed; `qed prove` fails if any code line of generated/ (outside the short exempt list of
`line_coverage`) was not.

`run(selectors)` judges the units that the selectors name (an op, a step, a table, a derivation
module: what `qed prove OP` selects) or everything; the judges run as tasks of one process pool
beside the claims (`tasks` / `run_task`), each returning its results and the lines it executed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from . import ROOT
from .line_coverage import Tracer, describe_missed, report

__all__ = ["JudgeRun", "Unit", "units", "tasks", "run_task", "split_parts", "depends_on", "collect", "BACKENDS"]

BACKENDS = ("numpy", "torch")
JUDGES = ("symbolic", "rational", "edges")


@dataclass(frozen=True)
class Unit:
    kind: str  # op, step, table, mha, tiled, special, validate, program
    name: str
    file: str  # the generated module's name (generated/<backend>/<file>.py)
    module: str  # the derivation module it comes from


def units(selectors: list[str] | None = None) -> list[Unit]:
    """Every judged unit of the registry, or those a selector names: the unit's name, its file or
    its derivation module (`normalization`). A selector that names one claim (`softmax.forward`)
    judges no unit: `qed prove OP` is the whole check of OP, `qed prove CLAIM` that claim."""
    from derivations import registry

    out = [Unit("op", o.name, o.name, o.module) for o in registry.ops()]
    out += [Unit("step", s.name, s.name, "derivations.optim") for s in registry.steps()]
    out += [Unit("table", t.name, t.file, getattr(t, "module", "derivations.positional")) for t in registry.tables()]
    out.append(Unit("mha", "mha", "mha", "derivations.mha"))
    out.append(Unit("tiled", "attention_tiled", "attention_tiled", "derivations.attention_tiled"))
    out.append(Unit("special", "special", "_special", "derivations.special"))
    out.append(Unit("validate", "validate", "_validate", "derivations.registry"))
    out += [Unit("program", p.name, p.name, module) for p, module in registry.programs()]
    if not selectors:
        return out

    def chosen(u: Unit) -> bool:
        for s in selectors:
            if s in (u.name, u.file) or u.module == f"derivations.{s}":
                return True
        return False

    return [u for u in out if chosen(u)]


def files_of(files) -> list[Path]:
    """The generated files whose lines a run of `qed prove OP` must execute: the selected units'
    own files (names in generated/<backend>/) in both backends."""
    names = sorted(set(files))
    return [
        ROOT / "generated" / b / f"{n}.py"
        for b in BACKENDS
        for n in names
        if (ROOT / "generated" / b / f"{n}.py").exists()
    ]


# ---------------------------------------------------------------------------------- one task
def _symbolic(unit: Unit, backend: str) -> list:
    from . import translation as tv

    if unit.kind == "op":
        return tv.validate_op(unit.name, backend=backend)
    if unit.kind == "tiled":
        return tv.validate_tiled(backend=backend)
    if unit.kind == "special":  # NumPy only: torch calls its own erf
        from .judge_special import judge_special

        return judge_special() if backend == "numpy" else []
    if unit.kind in ("validate", "program"):  # the edge judge's alone; the rational judge's
        return []
    if unit.kind == "step":
        return tv.validate_step(unit.name, backend=backend)
    if unit.kind == "table":
        return tv.validate_table(unit.name, backend=backend)
    return tv.validate_mha(backend=backend)


def _rational(unit: Unit, backend: str) -> list:
    from . import field_judge as fj

    if unit.kind == "op":
        return fj.judge_op(unit.name, backend)
    if unit.kind == "tiled":  # against attention_lse's index form
        return fj.judge_tiled(backend)
    if unit.kind in ("special", "validate"):  # the symbolic judge's; the edge judge's
        return []
    if unit.kind == "program":  # the wiring, with polynomial stand-ins of the kernels
        from .judge_program import judge_program

        return judge_program(backend)
    if unit.kind == "step":
        return fj.judge_step(unit.name, backend)
    if unit.kind == "table":
        return fj.judge_table(unit.name, backend)
    return fj.judge_mha(backend)


def _edges(unit: Unit, backend: str) -> list:
    from derivations import registry

    from . import judge_edges as je

    if unit.kind == "op":
        op = registry.op(unit.name)
        return (
            je.judge_op(op, backend)
            + je.judge_defaults(op, backend, "op")
            + je.judge_option_types(op, backend, "op")
            + je.judge_module_init(backend, {op.name})
        )
    if unit.kind == "step":
        step = next(s for s in registry.steps() if s.name == unit.name)
        return (
            je.judge_step(step, backend)
            + je.judge_defaults(step, backend, "step")
            + je.judge_option_types(step, backend, "step")
        )
    if unit.kind == "table":
        table = registry.table(unit.name)
        return (
            je.judge_table(table, backend)
            + je.judge_defaults(table, backend, "table")
            + je.judge_option_types(table, backend, "table")
        )
    if unit.kind == "tiled":
        return je.judge_tiled(backend)
    if unit.kind == "special":  # what the float32 erf and Φ accept
        return je.judge_special(backend)
    if unit.kind == "validate":  # _validate's generic checks that no op declares today
        return je.judge_validate(backend)
    if unit.kind == "program":  # the rational judge's alone
        return []
    return je.judge_mha(backend)  # mha: its template's checks


_JUDGE = {"symbolic": _symbolic, "rational": _rational, "edges": _edges}


# the units whose exact judgement takes the longest (attention's index forms at several sizes):
# each is a task of its own, so that the pool's two workers finish together
# the units that take longest to judge, longest first (measured: the printed GPT program and the
# attention family take seconds each, every other unit a fraction of one): each is a task of its
# own, started first, so that two workers finish together
HEAVY = ("gpt", "attention_tiled", "attention", "attention_lse", "attention_dropout", "mha")


def tasks(names, skip=frozenset()) -> list[tuple[str, str, tuple]]:
    """(judge, backend, unit names) of the tasks that judge the units `names`, longest first: for
    the symbolic and rational judges each heavy unit alone, then the others in two halves; the
    edge judge one task per backend. The (judge, backend, unit name) triples in `skip` (reused
    from the certificate cache) are left out."""
    names = tuple(names)
    first = [
        (judge, backend, (n,))
        for n in HEAVY
        for judge in JUDGES
        if judge != "edges"
        for backend in BACKENDS
        if n in names and (judge, backend, n) not in skip
    ]
    rest = []
    for judge in JUDGES:
        for backend in BACKENDS:
            todo = tuple(n for n in names if (judge, backend, n) not in skip)
            if judge == "edges":
                rest += [(judge, backend, todo)] if todo else []
                continue
            light = tuple(n for n in todo if n not in HEAVY)
            half = (len(light) + 1) // 2
            rest += [(judge, backend, part) for part in (light[:half], light[half:]) if part]
    return first + rest


def run_task(judge: str, backend: str, names: tuple) -> dict:
    """One judge over some units in one backend, each unit traced on its own: per unit, its
    results as plain data, the lines of generated/ it executed and its seconds (a unit's part is
    what the certificate cache keeps)."""
    by_name = {u.name: u for u in units(None)}
    t0 = time.perf_counter()
    parts = {}
    for n in names:
        t1 = time.perf_counter()
        results = []
        # the edge judge imports the printed modules (trace everything); the others load them
        # through translation's loaders, which trace printed code alone
        with Tracer(printed_only=judge != "edges") as tracer:
            try:
                got = _JUDGE[judge](by_name[n], backend)
            except Exception as exc:  # noqa: BLE001 - a judge that cannot run is a failure
                got = None
                results.append(
                    {
                        "ok": False,
                        "text": f"{judge} {backend} {n}: could not run: {type(exc).__name__}: {exc}",
                        "entries": 0,
                    }
                )
        for r in got or []:
            results.append({"ok": bool(r.ok), "text": str(r)[:3000], "entries": int(getattr(r, "entries", 0) or 0)})
        parts[n] = {
            "results": results,
            "hits": {str(p): sorted(v) for p, v in tracer.hits.items()},
            "seconds": time.perf_counter() - t1,
        }
    return {"judge": judge, "backend": backend, "units": parts, "seconds": time.perf_counter() - t0}


def depends_on(unit: Unit, backend: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(derivation modules, generated files) a unit's judgement reads, for its cache key (the
    imports of each are followed by `prove_cache.closure`): an op, step or table its own module
    and file; the tiled loops also attention_lse's index form; mha also the ops it composes
    (linear, attention); `_validate`'s generic checks, which read every op of the registry,
    everything."""
    if unit.kind == "tiled":
        return (unit.module, "derivations.attention_lse"), (unit.file,)
    if unit.kind == "mha":
        return (unit.module, "derivations.linear", "derivations.attention"), (unit.file,)
    if unit.kind == "validate":
        topics = tuple(
            f"derivations.{p.stem}"
            for p in sorted((ROOT / "derivations").glob("*.py"))
            if not p.stem.startswith("_") and p.stem != "registry"
        )
        files = tuple(p.stem for p in sorted((ROOT / "generated" / backend).glob("*.py")) if p.stem != "__init__")
        return topics, files
    return (unit.module,), (unit.file,)


# ---------------------------------------------------------------------------------- a run
@dataclass
class JudgeRun:
    results: dict = field(default_factory=dict)  # (judge, backend) -> [result dicts]
    seconds: dict = field(default_factory=dict)  # judge -> CPU seconds over its tasks
    lines: dict = field(default_factory=dict)  # backend -> LineCount
    reused: dict = field(default_factory=dict)  # judge -> units taken from the certificate cache
    judged: dict = field(default_factory=dict)  # judge -> units judged (run or reused), both backends

    def failures(self) -> list[str]:
        return [r["text"] for rs in self.results.values() for r in rs if not r["ok"]]

    @property
    def ok(self) -> bool:
        return not self.failures() and all(c.complete for c in self.lines.values())

    def count(self, judge: str, backend: str) -> tuple[int, int]:
        rs = self.results.get((judge, backend), [])
        return sum(r["ok"] for r in rs), len(rs)

    def summary(self) -> list[str]:
        """The lines `qed prove` prints: each judge's counts per backend and its time; the printed
        lines executed per backend."""
        what = {
            "symbolic": "arrays equal on exact symbols",
            "rational": "arrays equal on exact rationals",
            "edges": "refusals and empty cases as required",
        }
        out = []
        for judge in JUDGES:
            parts = []
            for b in BACKENDS:
                good, total = self.count(judge, b)
                parts.append(f"{b} {good}/{total}")
            reused = self.reused.get(judge, 0)
            cached = f"; {reused} of {self.judged.get(judge, 0)} units reused" if reused else ""
            out.append(
                f"judge {judge}: {', '.join(parts)} {what[judge]} ({self.seconds.get(judge, 0.0):.1f} s of work{cached})"
            )
        out.append("printed lines executed by the judges: " + ", ".join(c.line() for c in self.lines.values()))
        return out

    def missed(self, limit: int = 40) -> list[str]:
        out = []
        for c in self.lines.values():
            out += describe_missed(c, limit)
        return out


def collect(done: list[dict], files: list[str] | None) -> JudgeRun:
    """The run's report from its judged units: each a dict with judge, backend, results, hits,
    seconds, and `reused` when it came from the certificate cache."""
    jr = JudgeRun()
    hits: dict = {}
    for d in done:
        jr.results.setdefault((d["judge"], d["backend"]), []).extend(d["results"])
        if d.get("reused"):
            jr.reused[d["judge"]] = jr.reused.get(d["judge"], 0) + 1
        else:
            jr.seconds[d["judge"]] = jr.seconds.get(d["judge"], 0.0) + d["seconds"]
        jr.judged[d["judge"]] = jr.judged.get(d["judge"], 0) + 1
        for p, lines in d["hits"].items():
            hits.setdefault(Path(p), set()).update(lines)
    jr.lines = report(hits, BACKENDS, None if files is None else files_of(files))
    return jr


def split_parts(task_result: dict) -> list[dict]:
    """A finished task as one record per unit (what `collect` reads and the cache stores)."""
    return [
        dict(part, judge=task_result["judge"], backend=task_result["backend"], name=name)
        for name, part in task_result["units"].items()
    ]

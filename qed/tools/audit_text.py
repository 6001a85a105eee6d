"""`qed audit --text`: wrong edits of the printed files, each to be refuted by a judge.

For each generated file of both backends, the mutants of qed/tools/text_mutants.py (a sign, a
factor, a bound off by one, a comparison, an axis, a keyword, two arguments swapped, a statement
dropped) are judged one at a time as if the edited text were on disk
(`translation.edited`): the judges that read the file — the exact rational run first (the
fastest), then the exact symbolic run, then the edge judge (a `_validate` or refusal edit) — run
the units that execute it, and the first one that reports a mismatch refutes the mutant.

    refuted    a judge reports the edit (its name is kept)
    survived   every judge accepts the edited text

A survivor is printed with its line and edit: either the edit computes the same thing on every
input the proofs cover (a `keepdim` on an axis that is then broadcast the same way, a `dim=1` that
is `dim=-1` of a 2-D array at every rank the kernel accepts) or a judge is missing something.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from . import ROOT

__all__ = ["Outcome", "units_of_file", "judge_mutant", "run", "main", "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 12          # mutants per file in a default run (evenly spread); --limit 0: all
BACKENDS = ("numpy", "torch")


@dataclass
class Outcome:
    file: str
    mutant: str
    operator: str
    refuted_by: str = ""
    detail: str = ""
    seconds: float = 0.0

    @property
    def outcome(self) -> str:
        return "refuted" if self.refuted_by else "survived"


def units_of_file(path: Path):
    """The judged units that execute generated file `path` (qed/tools/judges.py's units)."""
    from . import judges

    stem = path.stem
    every = judges.units(None)
    own = [u for u in every if u.file == stem]
    if own:
        return own
    if stem == "_support":            # the speed idioms: every kernel that calls one
        text = {u.name: (path.parent / f"{u.file}.py") for u in every}
        return [u for u in every if text[u.name].exists() and "_support." in text[u.name].read_text()]
    if stem == "_validate":           # every op's checks, and the probes of its generic ones
        return [u for u in every if u.kind in ("op", "step", "table", "mha")]
    if stem == "_special":
        users = [u for u in every if (path.parent / f"{u.file}.py").exists()
                 and "_special." in (path.parent / f"{u.file}.py").read_text()]
        return [u for u in every if u.kind == "special"] + users
    return []


@contextlib.contextmanager
def _real_modules(backend: str, path: Path, text: str):
    """The real (imported) generated modules of `backend`, with `path`'s module executed from
    `text` and every other generated module of that backend imported afresh against it; all
    restored afterwards. What the edge judge runs."""
    prefix = f"generated.{backend}"
    saved = {k: v for k, v in sys.modules.items() if k.startswith(prefix + ".")}
    package = importlib.import_module(prefix)
    saved_attrs = dict(vars(package))
    try:
        for k in saved:
            del sys.modules[k]
        name = f"{prefix}.{path.stem}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        mod.__package__ = prefix
        sys.modules[name] = mod
        exec(compile(text, str(path), "exec"), mod.__dict__)
        yield
    finally:
        for k in [k for k in sys.modules if k.startswith(prefix + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
        vars(package).clear()
        vars(package).update(saved_attrs)


def judge_mutant(path: Path, text: str, chosen=None) -> tuple[str, str]:
    """(the judge that refutes `text` as the content of `path`, its first report), or ("", "")."""
    from . import judges
    from .translation import edited

    backend = path.parent.name
    chosen = units_of_file(path) if chosen is None else chosen
    with edited(path, text):
        for judge in ("rational", "symbolic"):
            for unit in chosen:
                try:
                    results = judges._JUDGE[judge](unit, backend)
                except Exception as exc:  # noqa: BLE001 - the edited code failing to run refutes it
                    return judge, f"{unit.name}: could not run: {type(exc).__name__}: {str(exc)[:200]}"
                bad = [r for r in results if not r.ok]
                if bad:
                    return judge, str(bad[0])[:300]
    try:
        with _real_modules(backend, path, text):
            for unit in chosen:
                bad = [r for r in judges._JUDGE["edges"](unit, backend) if not r.ok]
                if bad:
                    return "edges", str(bad[0])[:300]
    except Exception as exc:  # noqa: BLE001
        return "edges", f"could not run: {type(exc).__name__}: {str(exc)[:200]}"
    return "", ""


def files(selectors: list[str] | None) -> list[Path]:
    out = []
    for b in BACKENDS:
        for p in sorted((ROOT / "generated" / b).glob("*.py")):
            if p.name == "__init__.py":
                continue
            if selectors and not any(p.stem == s or p.stem.startswith(s) for s in selectors):
                continue
            out.append(p)
    return out


def audit_file(path: Path, limit: int | None) -> list[Outcome]:
    from .text_mutants import mutants, sample

    chosen = units_of_file(path)
    out = []
    rel = path.relative_to(ROOT).as_posix()
    for m in sample(mutants(path.read_text()), limit):
        t0 = time.perf_counter()
        judge, detail = judge_mutant(path, m.text, chosen)
        out.append(Outcome(rel, str(m), m.operator, judge, detail, time.perf_counter() - t0))
    return out


def _audit_file_task(path: str, limit: int | None) -> list[dict]:
    from dataclasses import asdict

    return [asdict(o) for o in audit_file(Path(path), limit)]


def run(selectors: list[str] | None = None, limit: int | None = DEFAULT_LIMIT, workers: int | None = None,
        progress=None) -> list[dict]:
    """Every file's sampled mutants judged, files in parallel (one process each)."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    todo = files(selectors)
    workers = workers or min(len(todo), os.cpu_count() or 1) or 1
    done: dict = {}
    if workers == 1:
        for p in todo:
            done[p] = _audit_file_task(str(p), limit)
            if progress:
                progress(p, done[p])
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(_audit_file_task, str(p), limit): p for p in todo}
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                if progress:
                    progress(futures[fut], done[futures[fut]])
    return [r for p in todo for r in done[p]]


def main(selectors: list[str] | None, as_json: bool, limit: int | None, workers: int | None) -> int:
    """`qed audit --text [FILE-PREFIX ...]`: a table per file (mutants, refuted by each judge,
    survived), the survivors listed; exit 1 if any survives."""
    import json
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from ..errors import QedError

    err = Console(stderr=True)
    todo = files(selectors)
    if not todo:
        raise QedError(f"no generated file matches {' '.join(selectors)} (file names or their prefixes, "
                       "e.g. softmax or _support)")

    def tick(path, rows):
        if not err.is_terminal:
            bad = sum(not r["refuted_by"] for r in rows)
            err.print(f"{path.relative_to(ROOT).as_posix()}  {len(rows) - bad}/{len(rows)} refuted",
                      highlight=False)

    start = time.perf_counter()
    rows = run(selectors, limit, workers, tick)
    wall = time.perf_counter() - start
    survived = [r for r in rows if not r["refuted_by"]]
    if as_json:
        json.dump(rows, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        out = Console(width=None if sys.stdout.isatty() else 160)
        table = Table(title=f"qed audit --text — {len(rows)} wrong edits of the printed files")
        for col in ("file", "mutants", "rational", "symbolic", "edges", "survived"):
            table.add_column(col, justify="left" if col == "file" else "right")
        per: dict = {}
        for r in rows:
            per.setdefault(r["file"], Counter())[r["refuted_by"] or "survived"] += 1
        for f, c in per.items():
            table.add_row(f, str(sum(c.values())), str(c["rational"]), str(c["symbolic"]), str(c["edges"]),
                          f"[red]{c['survived']}[/]" if c["survived"] else "0")
        out.print(table)
        total = Counter(r["refuted_by"] or "survived" for r in rows)
        out.print(f"{len(rows)} wrong edits of the printed text: {len(rows) - len(survived)} refuted "
                  f"(rational {total['rational']}, symbolic {total['symbolic']}, edges {total['edges']}), "
                  f"{len(survived)} survived; {wall:.1f} s", highlight=False)
    for r in survived:
        err.print(f"[red]SURVIVED[/red] {r['file']} {r['mutant']}", highlight=False)
    return 1 if survived else 0

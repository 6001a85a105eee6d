"""`qed audit --text`: wrong edits of the printed files, each to be refuted by a judge.

For each generated file of both backends, the mutants of qed/tools/text_mutants.py (a sign, a
factor, a bound off by one, a comparison, an axis, a keyword, two arguments swapped, a statement
dropped) are judged one at a time as if the edited text were on disk
(`translation.edited`): the judges that read the file — the exact rational run first (the
fastest), then the exact symbolic run, then the edge judge (a `_validate` or refusal edit) — run
the units that execute it, and the first one that reports a mismatch refutes the mutant.

    refuted    a judge reports the edit (its name is kept). After the three judges of
               `qed prove`, a fourth, numeric one: the edited kernel beside the printed one at
               float32 inputs of magnitude 1e4 and 1e30 (`stability`): an edit that computes the
               same exact function but loses it in floating point (a row max not subtracted)
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

DEFAULT_LIMIT = 12  # mutants per file in a default run (evenly spread); --limit 0: all
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
    if not stem.startswith("_"):
        return own
    if stem == "_validate":  # every op's checks, and the probes of its generic ones
        return [u for u in every if u.kind in ("op", "step", "table", "mha", "tiled", "validate")]

    def calls(u) -> bool:  # a helper module: every unit whose file calls into it
        f = path.parent / f"{u.file}.py"
        return u.file != stem and f.exists() and f"{stem}." in f.read_text()

    return own + [u for u in every if calls(u)]


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
            # `from . import _validate` reads the package's attribute before sys.modules
            vars(package).pop(k.rsplit(".", 1)[1], None)
        name = f"{prefix}.{path.stem}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        mod.__package__ = prefix
        sys.modules[name] = mod
        exec(compile(text, str(path), "exec"), mod.__dict__)
        setattr(package, path.stem, mod)
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
    reference = {u.name: _float_outputs(u, backend) for u in chosen if u.kind == "op"}
    try:
        with _real_modules(backend, path, text):
            for unit in chosen:
                bad = [r for r in judges._JUDGE["edges"](unit, backend) if not r.ok]
                if bad:
                    return "edges", str(bad[0])[:300]
            for unit in chosen:
                if unit.name in reference:
                    found = _unstable(reference[unit.name], _float_outputs(unit, backend))
                    if found:
                        return "stability", f"{unit.name}: {found}"
    except Exception as exc:  # noqa: BLE001
        return "edges", f"could not run: {type(exc).__name__}: {str(exc)[:200]}"
    return "", ""


# the stability judge (numeric; the audit's last resort): an edit that computes the same exact
# function can still lose it in floating point (x − max x dropped from a softmax: e^{1e4} = inf).
# The edited kernel runs beside the printed one on float32 inputs of magnitude 1e4 and 1e30; where
# the printed one is finite, the edited one must be finite and within 1e-3 of it.
MAGNITUDES = (1e4, 1e30)


def _float_outputs(unit, backend: str) -> list:
    import numpy as np

    from derivations import registry

    from . import judge_edges as je

    op = registry.op(unit.name)
    out = []
    for scale in MAGNITUDES:
        args = je.build(op, je.sizes_of(op), seed=3)
        args = [(a * scale).astype(np.float32) if a.dtype.kind == "f" else a for a in args]
        with np.errstate(all="ignore"):
            try:
                res, cache = je._forward(op, backend)(*[je._convert(backend, a) for a in args])
                outs = [je._numpy(o).astype(np.float64) for o in je.as_tuple(res)]
                ups = [je._convert(backend, np.ones(o.shape, np.float32)) for o in outs]
                grads = [
                    je._numpy(g).astype(np.float64)
                    for g in je.as_tuple(je._backward(op, backend)(*ups, cache))
                    if g is not None
                ]
            except Exception as exc:  # noqa: BLE001
                out.append(f"raised {type(exc).__name__}")
                continue
        out.append(outs + grads)
    return out


def _unstable(reference: list, edited: list) -> str:
    import numpy as np

    for scale, want, got in zip(MAGNITUDES, reference, edited):
        if isinstance(want, str):
            continue
        if isinstance(got, str):
            return f"at magnitude {scale:g}: {got} where the printed kernel did not"
        for k, (w, g) in enumerate(zip(want, got)):
            if w.shape != g.shape:
                return f"at magnitude {scale:g}: array {k} has shape {g.shape}, the printed one {w.shape}"
            fine = np.isfinite(w)
            if np.any(~np.isfinite(g[fine])):
                return f"at magnitude {scale:g}: array {k} not finite where the printed kernel's is"
            err = np.abs(g[fine] - w[fine]) / np.maximum(np.abs(w[fine]), 1.0)
            if err.size and float(err.max()) > 1e-3:
                return f"at magnitude {scale:g}: array {k} differs by {float(err.max()):.2g} (relative)"
    return ""


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
    import warnings
    from dataclasses import asdict

    import numpy as np

    # a wrong edit may divide by zero on floats (the edge judge's real kernels): a finding the
    # judge reports in its own words, not a warning on the terminal
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [asdict(o) for o in audit_file(Path(path), limit)]


def run(
    selectors: list[str] | None = None, limit: int | None = DEFAULT_LIMIT, workers: int | None = None, progress=None
) -> list[dict]:
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
        raise QedError(
            f"no generated file matches {' '.join(selectors)} (file names or their prefixes, e.g. softmax or _support)"
        )

    def tick(path, rows):
        if not err.is_terminal:
            bad = sum(not r["refuted_by"] for r in rows)
            err.print(f"{path.relative_to(ROOT).as_posix()}  {len(rows) - bad}/{len(rows)} refuted", highlight=False)

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
        for col in ("file", "mutants", "rational", "symbolic", "edges", "stability", "survived"):
            table.add_column(col, justify="left" if col == "file" else "right")
        per: dict = {}
        for r in rows:
            per.setdefault(r["file"], Counter())[r["refuted_by"] or "survived"] += 1
        for f, c in per.items():
            table.add_row(
                f,
                str(sum(c.values())),
                str(c["rational"]),
                str(c["symbolic"]),
                str(c["edges"]),
                str(c["stability"]),
                f"[red]{c['survived']}[/]" if c["survived"] else "0",
            )
        out.print(table)
        total = Counter(r["refuted_by"] or "survived" for r in rows)
        out.print(
            f"{len(rows)} wrong edits of the printed text: {len(rows) - len(survived)} refuted "
            f"(rational {total['rational']}, symbolic {total['symbolic']}, edges {total['edges']}, "
            f"stability {total['stability']}), "
            f"{len(survived)} survived; {wall:.1f} s",
            highlight=False,
        )
    for r in survived:
        err.print(f"[red]SURVIVED[/red] {r['file']} {r['mutant']}", highlight=False)
    return 1 if survived else 0

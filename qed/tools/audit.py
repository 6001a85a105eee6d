"""`qed audit [PREFIX ...]`: mutation testing of the link between the proofs and the printed code.

For every printed expression (an op's forward and backward lines, a table's entries, a step's
update) the audit makes the wrong variants a person makes by hand (`derivations/proof/mutation.py`:
a sign flipped, a factor of 2, a term dropped, an operand transposed, a mask shifted by one,
two operands swapped, another cached array read, …) and asks the generated claims to refute
each with a counterexample. Outcomes per mutant:

    killed       a claim on the mutated line's path has a counterexample: the proofs catch it
    equivalent   every claim on the path still proves (the edit computes the same function,
                 e.g. swapping the operands of a commutative product): not a wrong edit
    survived     neither: the code could be wrong while `qed prove` is green

The exit status is non-zero when any mutant survives. Only proofs count: no test is run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict

from ..errors import QedError


def units(prefixes: list[str] | None) -> list[tuple[str, str]]:
    """(kind, name) of every op, table and step whose name starts with one of the prefixes."""
    from derivations import registry

    out = [("op", o.name) for o in registry.ops() if o.spec]
    out += [("table", t.name) for t in registry.tables()]
    out += [("step", s.name) for s in registry.steps()]
    if prefixes:
        out = [(k, n) for k, n in out if any(n == p or n.startswith(p) for p in prefixes)]
    return out


def audit_unit(kind: str, name: str, limit: int | None = None) -> list[dict]:
    from derivations import registry
    from derivations.proof import mutation

    if kind == "op":
        results = mutation.audit_op(registry.op(name), limit)
    else:
        from derivations.proof import tables_steps as constants

        if kind == "table":
            results = constants.audit_table(registry.table(name), limit)
        else:
            results = constants.audit_step(next(s for s in registry.steps() if s.name == name), limit)
    return [dict(asdict(r), kind=kind) for r in results]


def run(prefixes: list[str] | None, limit: int | None = None, workers: int | None = None, progress=None) -> list[dict]:
    todo = units(prefixes)
    workers = workers or min(len(todo), os.cpu_count() or 1) or 1
    done: dict = {}
    if workers == 1:
        for kind, name in todo:
            done[(kind, name)] = audit_unit(kind, name, limit)
            if progress:
                progress(name)
    else:
        import multiprocessing

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(audit_unit, k, n, limit): (k, n) for k, n in todo}
            for fut in as_completed(futures):
                done[futures[fut]] = fut.result()
                if progress:
                    progress(futures[fut][1])
    return [r for key in todo for r in done[key]]


def main(prefixes: list[str] | None, as_json: bool, limit: int | None, workers: int | None) -> int:
    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    if not units(prefixes):
        raise QedError(
            f"no op, table or step matches {' '.join(prefixes)} (names or their prefixes, e.g. attention or adam)"
        )
    start = time.perf_counter()
    results = run(prefixes, limit, workers)
    wall = time.perf_counter() - start
    survived = [r for r in results if r["outcome"] == "survived"]
    if as_json:
        json.dump(results, sys.stdout, indent=1, ensure_ascii=False, default=str)
        sys.stdout.write("\n")
    else:
        out = Console(width=None if sys.stdout.isatty() else 120)
        table = Table(title=f"qed audit — {len(results)} mutants of the printed expressions")
        for col in ("unit", "mutants", "killed", "equivalent", "survived", "killed %"):
            table.add_column(col, justify="left" if col == "unit" else "right")
        per: dict = {}
        for r in results:
            per.setdefault(f"{r['kind']} {r['unit']}", Counter())[r["outcome"]] += 1
        for unit, c in per.items():
            wrong = c["killed"] + c["survived"]
            pct = 100.0 * c["killed"] / wrong if wrong else 100.0
            table.add_row(
                unit,
                str(sum(c.values())),
                str(c["killed"]),
                str(c["equivalent"]),
                f"[red]{c['survived']}[/]" if c["survived"] else "0",
                f"{pct:.0f}",
            )
        out.print(table)
        total = Counter(r["outcome"] for r in results)
        wrong = total["killed"] + total["survived"]
        pct = 100.0 * total["killed"] / wrong if wrong else 100.0
        out.print(
            f"{len(results)} mutants: {total['killed']} killed by proofs, {total['equivalent']} "
            f"equivalent, {total['survived']} survived; {pct:.1f} % of the wrong edits killed; "
            f"{wall:.1f} s"
        )
    for r in survived:
        err.print(f"[red]SURVIVED[/red] {r['kind']} {r['unit']}: {r['mutant']} ({r['mistake']})")
    return 1 if survived else 0

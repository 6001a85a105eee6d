"""`qed prove`: run every claim of the registry, in parallel, and report certificates."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from ..errors import QedError


def selected(claim, selectors: list[str] | None) -> bool:
    """A selector is a claim id, an id prefix (`attention`) or a module name (`loss`)."""
    if not selectors:
        return True
    return any(claim.id == s or claim.id.startswith(s + ".") or claim.module == f"derivations.{s}" for s in selectors)


def _run_one(claim_id: str) -> dict:
    from derivations import registry

    return registry.claim(claim_id).run().to_json()


def run_claims(
    ids: list[str] | None = None,
    workers: int | None = None,
    progress=None,
    judge_tasks: list | None = None,
    judged=None,
) -> list[dict]:
    """Run claims (all by default) and return their certificates as dicts, in registry order.
    `judge_tasks` (qed/tools/judges.py) run in the same pool, first, since they are the longest;
    each finished one is handed to `judged`."""
    from derivations import registry

    from . import judges

    ids = [c.id for c in registry.claims() if selected(c, ids)]
    judge_tasks = judge_tasks or []
    workers = workers or min(len(ids) + len(judge_tasks), os.cpu_count() or 1) or 1
    results: dict[str, dict] = {}
    if workers == 1:
        for task in judge_tasks:
            judged(judges.run_task(*task))
        for cid in ids:
            results[cid] = _run_one(cid)
            if progress:
                progress(results[cid])
    else:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {pool.submit(judges.run_task, *task): None for task in judge_tasks}
            futures.update({pool.submit(_run_one, cid): cid for cid in ids})
            for fut in as_completed(futures):
                if futures[fut] is None:
                    judged(fut.result())
                    continue
                cert = fut.result()
                results[cert["id"]] = cert
                if progress:
                    progress(cert)
    return [results[cid] for cid in ids]


def is_ok(cert: dict) -> bool:
    good = cert["status"] in ("proved-general", "proved-concrete", "evidence")
    return good and bool(cert["mutants"]) and all(m["refuted"] for m in cert["mutants"])


def _restricted(cov, chosen):
    """The expression coverage of the selected units only (`qed prove OP`)."""
    from derivations.proof.coverage import Coverage

    keys = {f"{'composite' if u.kind == 'mha' else u.kind} {u.name}" for u in chosen}
    out = Coverage()
    for unit, (good, total) in cov.per_unit.items():
        if unit in keys:
            out.total += total
            out.covered += good
            out.per_unit[unit] = [good, total]
    out.uncovered = [w for w in cov.uncovered if w.split(":")[0] in keys]
    return out


def main(ids: list[str] | None, as_json: bool, workers: int | None, judged: bool = True) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from derivations import registry
    from derivations.proof import coverage

    from . import judges

    start = time.perf_counter()
    err = Console(stderr=True)
    total = len([c for c in registry.claims() if selected(c, ids)])
    if total == 0:
        raise QedError(
            f"no claim matches {' '.join(ids)} (claim ids or their prefixes, e.g. attention or softmax.forward)"
        )
    chosen = judges.units(ids) if judged else []
    judge_tasks = judges.tasks(ids) if chosen else []
    done: list[dict] = []
    piped = not err.is_terminal
    with Progress(
        TextColumn("proving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=piped,
    ) as bar:
        task = bar.add_task("", total=total + len(judge_tasks))

        def tick(cert):
            bar.update(task, advance=1, description=cert["id"])
            if piped and not as_json:  # one plain line per claim as it finishes
                err.print(f"{cert['id']}  {cert['status']}  {cert['seconds']:.2f} s", highlight=False, soft_wrap=True)

        def judge_done(d):
            done.append(d)
            bar.update(task, advance=1, description=f"judge {d['judge']} {d['backend']}")
            if piped and not as_json:
                good = sum(r["ok"] for r in d["results"])
                err.print(
                    f"judge {d['judge']} {d['backend']}  {good}/{len(d['results'])}  {d['seconds']:.2f} s",
                    highlight=False,
                    soft_wrap=True,
                )

        certs = run_claims(ids, workers, tick, judge_tasks, judge_done)
    wall = time.perf_counter() - start
    failed = [c for c in certs if not is_ok(c)]
    cov = coverage.compute({c["id"] for c in certs if is_ok(c)})
    if ids:
        cov = _restricted(cov, chosen)
    jr = judges.collect(done, ids) if chosen else None
    if as_json:
        json.dump(certs, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
        err.print(cov.line())
        for line in jr.summary() if jr else []:
            err.print(line, highlight=False)
    else:
        out = Console(width=None if sys.stdout.isatty() else 200)
        table = Table(title=f"qed prove — {len(certs)} claims in {wall:.1f} s")
        for col in ("id", "status", "scope", "method", "assumptions", "mutants", "seconds"):
            table.add_column(col, overflow="fold", justify="right" if col in ("assumptions", "seconds") else "left")
        colour = {"proved-general": "green", "proved-concrete": "yellow", "evidence": "cyan"}
        for c in certs:
            refuted = sum(m["refuted"] for m in c["mutants"])
            mut = f"{refuted}/{len(c['mutants'])} refuted"
            st = c["status"]
            table.add_row(
                c["id"],
                f"[{colour.get(st, 'red')}]{st}[/]",
                c["scope"],
                c["method"],
                str(len(c["assumptions"])),
                mut if refuted == len(c["mutants"]) and c["mutants"] else f"[red]{mut}[/]",
                f"{c['seconds']:.2f}",
            )
        out.print(table)
        counts: dict[str, int] = {}
        for c in certs:
            counts[c["status"]] = counts.get(c["status"], 0) + 1
        mutants = sum(len(c["mutants"]) for c in certs)
        refuted = sum(m["refuted"] for c in certs for m in c["mutants"])
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f"; {refuted}/{mutants} mutants refuted"
        out.print(summary + f"; {wall:.1f} s")
        out.print(cov.line(), highlight=False)
        for line in jr.summary() if jr else []:
            out.print(line, highlight=False)
    for c in failed:
        err.print(f"[red]FAILED[/red] {c['id']}: {c['status']} — {c['method']}")
        for m in c["mutants"]:
            if not m["refuted"]:
                err.print(f"    mutant not refuted: {m['id']} ({m['mistake']})")
    bad_judged = jr.failures() if jr else []
    for text in bad_judged[:40]:
        err.print(f"[red]FAILED[/red] {text}", highlight=False)
    if not cov.complete:
        err.print(f"[red]FAILED[/red] {cov.line()}: printed but on no proved claim's path:")
        for what in cov.uncovered:
            err.print(f"    {what}")
    lines_short = jr is not None and not all(c.complete for c in jr.lines.values())
    if lines_short:
        err.print("[red]FAILED[/red] printed lines that no judge executed:", highlight=False)
        for what in jr.missed():
            err.print(f"    {what}", highlight=False)
    return 1 if failed or bad_judged or not cov.complete or lines_short else 0

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


def run_claims(ids: list[str] | None = None, workers: int | None = None, progress=None) -> list[dict]:
    """Run claims (all by default) and return their certificates as dicts, in registry order."""
    from derivations import registry

    all_ids = [c.id for c in registry.claims() if selected(c, ids)]
    ids = all_ids
    workers = workers or min(len(ids), os.cpu_count() or 1) or 1
    results: dict[str, dict] = {}
    if workers == 1:
        for cid in ids:
            results[cid] = _run_one(cid)
            if progress:
                progress(results[cid])
    else:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {pool.submit(_run_one, cid): cid for cid in ids}
            for fut in as_completed(futures):
                cert = fut.result()
                results[cert["id"]] = cert
                if progress:
                    progress(cert)
    return [results[cid] for cid in ids]


def is_ok(cert: dict) -> bool:
    good = cert["status"] in ("proved-general", "proved-concrete", "evidence")
    return good and bool(cert["mutants"]) and all(m["refuted"] for m in cert["mutants"])


def main(ids: list[str] | None, as_json: bool, workers: int | None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from derivations import registry

    start = time.perf_counter()
    err = Console(stderr=True)
    total = len([c for c in registry.claims() if selected(c, ids)])
    if total == 0:
        raise QedError(f"no claim matches {' '.join(ids)} (claim ids or their prefixes, e.g. attention or "
                       "softmax.forward)")
    with Progress(TextColumn("proving"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("", total=total)

        def tick(cert):
            bar.update(task, advance=1, description=cert["id"])

        certs = run_claims(ids, workers, tick)
    wall = time.perf_counter() - start
    failed = [c for c in certs if not is_ok(c)]
    cov = checks = None
    if not ids:   # coverage and the printed text are properties of the whole registry
        from derivations.proof import coverage

        from .translation import validate_all

        cov = coverage.compute({c["id"] for c in certs if is_ok(c)})
        # translation validation: the printed NumPy text itself, run on exact symbolic inputs at
        # small sizes, equals the proved expressions (a printer rule or template is checked too)
        checks = validate_all()
        wall = time.perf_counter() - start
    bad_checks = [c for c in checks or [] if not c.ok]
    if as_json:
        json.dump(certs, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
        if cov is not None:
            err.print(cov.line())
    else:
        out = Console(width=None if sys.stdout.isatty() else 160)
        table = Table(title=f"qed prove — {len(certs)} claims in {wall:.1f} s")
        for col in ("id", "status", "scope", "method", "assumptions", "mutants", "seconds"):
            table.add_column(col, overflow="fold", justify="right" if col in ("assumptions", "seconds") else "left")
        colour = {"proved-general": "green", "proved-concrete": "yellow", "evidence": "cyan"}
        for c in certs:
            refuted = sum(m["refuted"] for m in c["mutants"])
            mut = f"{refuted}/{len(c['mutants'])} refuted"
            st = c["status"]
            table.add_row(c["id"], f"[{colour.get(st, 'red')}]{st}[/]", c["scope"], c["method"][:60],
                          str(len(c["assumptions"])), mut if refuted == len(c["mutants"]) and c["mutants"] else f"[red]{mut}[/]",
                          f"{c['seconds']:.2f}")
        out.print(table)
        counts: dict[str, int] = {}
        for c in certs:
            counts[c["status"]] = counts.get(c["status"], 0) + 1
        mutants = sum(len(c["mutants"]) for c in certs)
        refuted = sum(m["refuted"] for c in certs for m in c["mutants"])
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f"; {refuted}/{mutants} mutants refuted"
        out.print(summary + f"; {wall:.1f} s")
        if cov is not None:
            entries = sum(c.entries for c in checks)
            out.print(f"{cov.line()}; printed NumPy run on exact inputs: "
                      f"{len(checks) - len(bad_checks)}/{len(checks)} arrays equal ({entries} entries)")
    for c in failed:
        err.print(f"[red]FAILED[/red] {c['id']}: {c['status']} — {c['method']}")
        for m in c["mutants"]:
            if not m["refuted"]:
                err.print(f"    mutant not refuted: {m['id']} ({m['mistake']})")
    for c in bad_checks:
        err.print(f"[red]FAILED[/red] translation validation: {c}")
    if cov is not None and not cov.complete:
        err.print(f"[red]FAILED[/red] {cov.line()}: printed but on no proved claim's path:")
        for what in cov.uncovered:
            err.print(f"    {what}")
    return 1 if failed or bad_checks or (cov is not None and not cov.complete) else 0

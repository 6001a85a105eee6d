"""`qed prove`: run every claim of the registry, in parallel, and report certificates."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from ..errors import QedError
from . import ROOT


def selected(claim, selectors: list[str] | None) -> bool:
    """A selector is a claim id, an id prefix (`attention`) or a module name (`loss`)."""
    if not selectors:
        return True
    return any(claim.id == s or claim.id.startswith(s + ".") or claim.module == f"derivations.{s}" for s in selectors)


def _run_one(claim_id: str) -> dict:
    """A claim's certificate, its assumptions kept both as the back end writes them and as
    mathematics (`assumptions_latex`: LaTeX between $ … $, for the claim's page)."""
    from derivations import registry

    from .check.transcript import tagged_show

    with tagged_show() as tags:
        cert = registry.claim(claim_id).run().to_json()
    shown = {}  # plain text -> as mathematics; expressions that print alike are one assumption
    for a in cert["assumptions"]:
        shown.setdefault(tags.plain(a), tags.markdown(a))
    cert = _untagged(cert, tags)
    cert["assumptions"], cert["assumptions_latex"] = list(shown), list(shown.values())
    return cert


def _untagged(value, tags):
    """`value` (a certificate's JSON) with every shown expression back in SymPy's string form."""
    if isinstance(value, str):
        return tags.plain(value)
    if isinstance(value, list):
        return [_untagged(v, tags) for v in value]
    if isinstance(value, dict):
        return {k: _untagged(v, tags) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------ the plan
@dataclass
class Plan:
    """What a run proves and judges, with each piece's cache key: `claims` [(id, module, key)] of
    the selection, `judged` [(judge, backend, unit name, key)], `index` the run's whole index
    (stored under the tree key, so an unchanged tree needs no import of the registry)."""

    claims: list
    judged: list
    units: list  # [kind, name, file, module] of the selected units
    index: dict


def _index(keys) -> dict:
    """Every claim and judged unit of the registry with its key (imports the registry)."""
    from derivations import registry

    from . import judges

    claims = [[c.id, c.module, keys.claim(c.id, c.module)] for c in registry.claims()]
    units = judges.units(None)
    judged = []
    for u in units:
        for backend in judges.BACKENDS:
            modules, files = judges.depends_on(u, backend)
            for judge in judges.JUDGES:
                judged.append([judge, backend, u.name, keys.judge(judge, backend, u.kind, u.name, files, modules)])
    return {
        "claims": claims,
        "units": [[u.kind, u.name, u.file, u.module] for u in units],
        "judged": judged,
    }


def _chosen_units(index: dict, selectors: list[str] | None) -> list:
    if not selectors:
        return index["units"]
    return [u for u in index["units"] if any(s in (u[1], u[2]) or u[3] == f"derivations.{s}" for s in selectors)]


def plan(selectors: list[str] | None, judged: bool, cache, keys) -> Plan:
    pointer = cache.load(keys.pointer(), "index files")
    known = pointer.get("imports") if isinstance(pointer, dict) else None
    if isinstance(known, dict):
        keys.imports.update(known)  # each file's imports by its digest: parse only what changed
    index = tree = None
    if isinstance(pointer, dict) and isinstance(pointer.get("files"), list):
        tree = keys.over("index", pointer["files"])
        index = cache.load(tree, "index")
    if index is None:
        index = _index(keys)
        index["coverage"] = None
        files = keys.files_seen()
        tree = keys.over("index", files)
        cache.store(tree, "index", index)
        live = {keys.digest(ROOT / f) for f in files}
        imports = {d: names for d, names in keys.imports.items() if d in live}
        cache.store(keys.pointer(), "index files", {"files": files, "imports": imports})
    index["tree"] = tree

    def chosen(cid, module):
        if not selectors:
            return True
        return any(cid == s or cid.startswith(s + ".") or module == f"derivations.{s}" for s in selectors)

    claims = [c for c in index["claims"] if chosen(c[0], c[1])]
    units = _chosen_units(index, selectors) if judged else []  # a claim id selects no unit
    names = {u[1] for u in units}
    judged_ = [j for j in index["judged"] if j[2] in names]
    return Plan(claims, judged_, units, index)


def run_claims(
    ids: list[str] | None = None,
    workers: int | None = None,
    progress=None,
    judge_tasks: list | None = None,
    judged=None,
    cache=None,
    keys=None,
) -> list[dict]:
    """Run claims (all by default) and return their certificates as dicts, in registry order.
    A claim whose key is in `cache` (prove_cache.Cache) is reused, not run; one that runs and
    passes is stored. `judge_tasks` (qed/tools/judges.py) run in the same pool, first, since they
    are the longest; each finished one is handed to `judged`."""
    from .prove_cache import Cache, Keys

    cache = cache or Cache(enabled=False)
    keys = keys or Keys()
    chosen = plan(ids, False, cache, keys).claims
    results: dict[str, dict] = {}
    todo = []
    for cid, _module, key in chosen:
        cert = cache.load(key, f"claim {cid}")
        if cert is not None:
            results[cid] = cert
        else:
            todo.append((cid, key))
    judge_tasks = judge_tasks or []
    if todo or judge_tasks:
        from derivations import registry

        registry.claims()  # imported once here, before the pool forks: the workers inherit it
    from . import judges

    def finished(cert, key):
        results[cert["id"]] = cert
        if is_ok(cert):
            cache.store(key, f"claim {cert['id']}", cert)
        if progress:
            progress(cert)

    workers = workers or min(len(todo) + len(judge_tasks), os.cpu_count() or 1) or 1
    if workers == 1:
        for task in judge_tasks:
            judged(judges.run_task(*task))
        for cid, key in todo:
            finished(_run_one(cid), key)
    else:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {pool.submit(judges.run_task, *task): None for task in judge_tasks}
            futures.update({pool.submit(_run_one, cid): key for cid, key in todo})
            for fut in as_completed(futures):
                if futures[fut] is None:
                    judged(fut.result())
                else:
                    finished(fut.result(), futures[fut])
    return [results[c[0]] for c in chosen]


def is_ok(cert: dict) -> bool:
    good = cert["status"] in ("proved-general", "proved-concrete", "evidence")
    return good and bool(cert["mutants"]) and all(m["refuted"] for m in cert["mutants"])


def _restricted(cov, chosen):
    """The expression coverage of the selected units only (`qed prove OP`)."""
    from derivations.proof.coverage import Coverage

    keys = {f"{'composite' if kind == 'mha' else kind} {name}" for kind, name, _file, _module in chosen}
    out = Coverage()
    for unit, (good, total) in cov.per_unit.items():
        if unit in keys:
            out.total += total
            out.covered += good
            out.per_unit[unit] = [good, total]
    out.uncovered = [w for w in cov.uncovered if w.split(":")[0] in keys]
    return out


def _coverage(certs: list[dict], index: dict, cache):
    """The expression coverage of the proved claims: reused from the run's index when the same
    claims were proved over the same tree, else computed (and kept there)."""
    import hashlib

    from derivations.proof.coverage import Coverage

    ok = sorted(c["id"] for c in certs if is_ok(c))
    digest = hashlib.sha256("\n".join(ok).encode()).hexdigest()
    kept = (index.get("coverage") or {}).get(digest)
    if kept is not None:
        return Coverage(**kept)
    from derivations.proof import coverage

    cov = coverage.compute(set(ok))
    index.setdefault("coverage", None)
    index["coverage"] = {
        digest: {"total": cov.total, "covered": cov.covered, "uncovered": cov.uncovered, "per_unit": cov.per_unit}
    }
    tree = index.pop("tree")
    cache.store(tree, "index", index)
    index["tree"] = tree
    return cov


def main(ids: list[str] | None, as_json: bool, workers: int | None, judged: bool = True, use_cache: bool = True) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from . import judges
    from .prove_cache import Cache, Keys

    start = time.perf_counter()
    err = Console(stderr=True)
    piped = not err.is_terminal
    cache = Cache(enabled=use_cache, warn=lambda line: err.print(line, highlight=False, markup=False))
    keys = Keys()
    the_plan = plan(ids, judged, cache, keys)
    if not the_plan.claims:
        raise QedError(
            f"no claim matches {' '.join(ids)} (claim ids or their prefixes, e.g. attention or softmax.forward)"
        )
    # the judged units the cache still holds (same printed files, judges and index forms)
    done: list[dict] = []
    judge_keys = {(j, b, n): k for j, b, n, k in the_plan.judged}
    reused = set()
    for (judge, backend, name), key in judge_keys.items():
        part = cache.load(key, f"judge {judge} {backend} {name}")
        if part is not None:
            done.append(dict(part, judge=judge, backend=backend, name=name, reused=True))
            reused.add((judge, backend, name))
    judge_tasks = judges.tasks([u[1] for u in the_plan.units], reused) if the_plan.units else []
    claims_cached = sum(cache.load(k, f"claim {c}") is not None for c, _m, k in the_plan.claims)
    total = len(the_plan.claims) - claims_cached + len(judge_tasks)
    if piped and not as_json:  # the first line, at once: what this run will do
        to_run = len(the_plan.claims) - claims_cached
        judging = len(judge_keys) - len(reused)
        cached = (
            f"; reused from the certificate cache: {claims_cached} claims, {len(reused)} judged units"
            if claims_cached or reused
            else ""
        )
        err.print(f"qed prove: {to_run} claims to prove, {judging} judged units to run{cached}", highlight=False)
    with Progress(
        TextColumn("proving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=piped or total == 0,
    ) as bar:
        task = bar.add_task("", total=total)

        def tick(cert):
            bar.update(task, advance=1, description=cert["id"])
            if piped and not as_json:  # one plain line per claim as it finishes
                err.print(f"{cert['id']}  {cert['status']}  {cert['seconds']:.2f} s", highlight=False, soft_wrap=True)

        def judge_done(d):
            parts = judges.split_parts(d)
            done.extend(parts)
            for part in parts:
                if all(r["ok"] for r in part["results"]):
                    key = judge_keys[(part["judge"], part["backend"], part["name"])]
                    payload = {k: part[k] for k in ("results", "hits", "seconds")}
                    cache.store(key, f"judge {part['judge']} {part['backend']} {part['name']}", payload)
            bar.update(task, advance=1, description=f"judge {d['judge']} {d['backend']}")
            if piped and not as_json:
                good = sum(r["ok"] for p in parts for r in p["results"])
                n = sum(len(p["results"]) for p in parts)
                err.print(
                    f"judge {d['judge']} {d['backend']}  {good}/{n}  {d['seconds']:.2f} s",
                    highlight=False,
                    soft_wrap=True,
                )

        certs = run_claims(ids, workers, tick, judge_tasks, judge_done, cache, keys)
    quoted = _quotes(ids, cache, keys)
    wall = time.perf_counter() - start
    failed = [c for c in certs if not is_ok(c)]
    cov = _coverage(certs, the_plan.index, cache)
    if ids:
        cov = _restricted(cov, the_plan.units)
    files = None if not ids else [u[2] for u in the_plan.units]
    jr = judges.collect(done, files) if the_plan.units else None
    reuse_line = (
        f"reused from the certificate cache: {claims_cached} of {len(certs)} claims, "
        f"{len(reused)} of {len(judge_keys)} judged units"
    )
    if as_json:
        json.dump(certs, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
        err.print(cov.line())
        for line in jr.summary() if jr else []:
            err.print(line, highlight=False)
        if quoted is not None:
            err.print(quoted["line"], highlight=False)
        if cache.enabled:
            err.print(reuse_line, highlight=False)
    else:
        out = Console(width=None if sys.stdout.isatty() else 200)
        counts: dict[str, int] = {}
        for c in certs:
            counts[c["status"]] = counts.get(c["status"], 0) + 1
        mutants = sum(len(c["mutants"]) for c in certs)
        refuted = sum(m["refuted"] for c in certs for m in c["mutants"])
        if out.is_terminal:
            table = Table(title=f"qed prove — {len(certs)} claims in {wall:.1f} s")
            for col in ("id", "status", "scope", "method", "assumptions", "mutants", "seconds"):
                table.add_column(col, overflow="fold", justify="right" if col in ("assumptions", "seconds") else "left")
            colour = {"proved-general": "green", "proved-concrete": "yellow", "evidence": "cyan"}
            for c in certs:
                good = sum(m["refuted"] for m in c["mutants"])
                mut = f"{good}/{len(c['mutants'])} refuted"
                st = c["status"]
                table.add_row(
                    c["id"],
                    f"[{colour.get(st, 'red')}]{st}[/]",
                    c["scope"],
                    c["method"],
                    str(len(c["assumptions"])),
                    mut if good == len(c["mutants"]) and c["mutants"] else f"[red]{mut}[/]",
                    f"{c['seconds']:.2f}",
                )
            out.print(table)
        else:  # piped: one tab-separated row per claim, every column whole
            print("\t".join(("id", "status", "scope", "method", "assumptions", "mutants", "seconds")))
            for c in certs:
                good = sum(m["refuted"] for m in c["mutants"])
                row = (
                    c["id"],
                    c["status"],
                    c["scope"],
                    " ".join(c["method"].split()),
                    str(len(c["assumptions"])),
                    f"{good}/{len(c['mutants'])} refuted",
                    f"{c['seconds']:.2f}",
                )
                print("\t".join(row))
            sys.stdout.flush()
        summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f"; {refuted}/{mutants} mutants refuted"
        out.print(summary + f"; {wall:.1f} s", highlight=False)
        out.print(cov.line(), highlight=False)
        for line in jr.summary() if jr else []:
            out.print(line, highlight=False)
        if quoted is not None:
            out.print(quoted["line"], highlight=False)
        if cache.enabled:
            out.print(reuse_line, highlight=False)
    bad_quotes = quoted["failed"] if quoted is not None else []
    for text in bad_quotes:
        err.print(f"[red]FAILED[/red] the sources' formula is not the specification: {text}", highlight=False)
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
    return 1 if failed or bad_judged or not cov.complete or lines_short or bad_quotes else 0


def _quotes(ids, cache, keys) -> dict | None:
    """The quoted source formulas of the selected ops (all without `ids`), each read with
    `qed check` against its op's specification (qed/tools/quotes.py), cached like a claim:
    {"line", "failed"}; None where no selected op quotes one."""
    from derivations import registry

    from . import quotes

    ops = [o for o in registry.ops() if not ids or any(s == o.name or o.module == f"derivations.{s}" for s in ids)]
    quoted = [o for o in ops if o.quotes]
    if not quoted:
        return None
    front_end = sorted((ROOT / "qed" / "tools" / "check").glob("*.py")) + [ROOT / "qed" / "tools" / "quotes.py"]
    results = []
    for o in quoted:
        key = keys._key(f"quotes {o.name}", keys.files_of_claim(o.module) + front_end)
        got = cache.load(key, f"quotes {o.name}")
        if got is None:
            got = [{"ok": r.ok, "text": str(r)} for r in quotes.check_op(o)]
            if all(r["ok"] for r in got):
                cache.store(key, f"quotes {o.name}", got)
        results += got
    good = sum(r["ok"] for r in results)
    names = ", ".join(o.name for o in quoted)
    line = (
        f"sources: {good}/{len(results)} quoted formulas read by `qed check` equal their ops' specifications ({names})"
    )
    if not ids:
        line += f"; {len(ops) - len(quoted)} ops quote none (docs/trusted.md)"
    return {"line": line, "failed": [r["text"] for r in results if not r["ok"]]}

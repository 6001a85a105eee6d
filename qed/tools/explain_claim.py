"""`qed prove CLAIM --explain`: why a claim holds, as `qed check --explain` shows a step.

A claim of the catalogue is proved by the gate `derivations.proof.core.decide`: one or more index
identities (printed value = specification, entry by entry, for symbolic sizes), each normalised and
compared. `explain(claim_id)` proves the claim again with every identity the gate decides recorded
(`core.recorded`), then decides each once more with the back end's normaliser observed
(`TracingSetting`, qed/tools/check/transcript.py: the rules are watched, never changed) and
returns, per identity, what the step transcripts of `qed check` hold: both sides' index forms, the
rewrites applied (a delta sifted, a range split, sums merged, a region split, …) with their
counts, each side's normal form and the residual — LaTeX, shown as `$…$` on a terminal, rendered
on the claim's page. A claim decided by another method (exact algebra elementwise, evidence) says
so: it has no index transcript.
"""

from __future__ import annotations

__all__ = ["MAX_IDENTITIES", "claims_to_explain", "explain", "explain_lines"]

MAX_IDENTITIES = 6  # a claim over many outputs or flag sets: the first ones, and a count of the rest


def claims_to_explain(ids: list[str]) -> list[str]:
    """The claim ids among `ids` (`qed prove … --explain`); an error naming what to give if none."""
    from derivations import registry
    from qed.errors import QedError

    known = {c.id for c in registry.claims()}
    chosen = [i for i in ids if i in known]
    if not chosen:
        raise QedError("--explain needs claim ids (`qed prove softmax.backward.dx --explain`), not prefixes or nothing")
    return chosen


def explain(claim_id: str) -> dict:
    """{"claim", "status", "method", "assumptions", "identities": [transcript, …], "more"}; each
    transcript {"lhs", "rhs", "rewrites", "normal_forms", "residual", "status"} (LaTeX strings,
    None where too long to show)."""
    from dataclasses import fields

    from derivations import registry
    from derivations.proof import core

    from .check.transcript import (
        TracingSetting,
        normal_forms,
        plain_markdown,
        residual_of,
        shown,
        summarise_rewrites,
        tagged_show,
    )

    claim = registry.claim(claim_id)
    with core.recorded() as decisions:
        proof = claim.prove()
    identities, conditions = [], []
    for lhs, rhs, setting, method, decided in decisions[:MAX_IDENTITIES]:
        traced_setting = TracingSetting(**{f.name: getattr(setting, f.name) for f in fields(core.Setting)})
        with tagged_show() as tags:
            again = core.decide(lhs, rhs, traced_setting, method)
        traced = getattr(traced_setting, "traced", None)
        conditions += plain_markdown(again.assumptions, tags)[1]  # as mathematics, not SymPy reprs
        identities.append(
            {
                "lhs": shown(lhs),
                "rhs": shown(rhs),
                "status": again.status,
                "rewrites": summarise_rewrites(traced.rewrites if traced else [], tags),
                "normal_forms": normal_forms(lhs, rhs, setting),
                "residual": "0" if decided.status == "proved-general" else residual_of(lhs, rhs, setting),
            }
        )
    return {
        "claim": claim_id,
        "status": proof.status,
        "method": proof.method,
        "assumptions": list(dict.fromkeys(conditions)) if decisions else list(proof.assumptions),
        "identities": identities,
        "more": max(0, len(decisions) - MAX_IDENTITIES),
    }


def explain_lines(t: dict) -> list[str]:
    """The transcript as lines of text with LaTeX mathematics between $ … $ (the layout of
    `qed check --explain`: qed/tools/check/report.py's `transcript_lines`)."""
    from .check.report import transcript_lines

    out = [f"{t['claim']}: {t['status']} — {t['method']}"]
    if not t["identities"]:
        out.append("  decided without the index normaliser: no index transcript (the method above says how)")
    for k, ident in enumerate(t["identities"], 1):
        out.append(f"  identity {k} (indices counted from 0), {ident['status']}:")
        out += transcript_lines(ident, ("printed", "specification"), indent="  ")
    if t["more"]:
        out.append(f"  … and {t['more']} more identities decided the same way")
    if t["assumptions"]:
        out.append("  assumptions and side conditions:")
        out += [f"    · {a}" for a in t["assumptions"]]
    return out

"""One test per claim (it is proved, or recorded as evidence) and one per mutant (refuted).

A claim's certificate (its proof and every mutant's refutation, `Claim.run`) is computed once
per run: its tests share an xdist group, and a passing certificate goes to the run's certificate
cache (tests/conftest.py), where `qed docs`'s drift test finds it as `make demo`'s docs step
finds what `qed prove` stored."""

from functools import cache

import pytest

from derivations import registry
from derivations.proof.core import PROVED

CLAIMS = registry.claims()
MUTANTS = [(c, m) for c in CLAIMS for m in c.mutants]


@cache
def _keys():
    from qed.tools.prove_cache import Keys

    return Keys()


@cache
def certificate(claim_id: str) -> dict:
    """The claim's certificate (as `qed prove` writes it): from the run's cache, else run now
    and stored if it passes."""
    from qed.tools.prove import _run_one, is_ok
    from qed.tools.prove_cache import Cache

    cache_ = Cache()
    key = _keys().claim(claim_id, registry.claim(claim_id).module)
    cert = cache_.load(key, f"claim {claim_id}")
    if cert is None:
        cert = _run_one(claim_id)
        if is_ok(cert):
            cache_.store(key, f"claim {claim_id}", cert)
    return cert


def _grouped(params, ids, claims):
    return [pytest.param(*p, id=i, marks=pytest.mark.xdist_group(c.id)) for p, i, c in zip(params, ids, claims)]


@pytest.mark.parametrize("claim", _grouped([(c,) for c in CLAIMS], [c.id for c in CLAIMS], CLAIMS))
def test_claim_is_proved(claim):
    cert = certificate(claim.id)
    status = cert["status"]
    assert status in PROVED + ("evidence",), f"{claim.id}: {status} — {cert['method']}\n{cert['residual']}"
    if status in PROVED:
        assert cert["residual"] == "0"
    if status == "evidence":
        assert cert["evidence"], "an evidence certificate must carry its measurements"
    spot = cert.get("spot_check")
    if spot is not None and "max_relative_gap" in spot:
        assert spot["max_relative_gap"] < 1e-25
    assert claim.source and claim.latex and claim.title


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_has_mutants(claim):
    assert claim.mutants, f"{claim.id} has no mutant: a verifier that cannot fail proves nothing"


@pytest.mark.parametrize(
    "claim,mutant", _grouped(MUTANTS, [f"{c.id}~{m.name}" for c, m in MUTANTS], [c for c, _ in MUTANTS])
)
def test_mutant_is_refuted(claim, mutant):
    """Refuted in the claim's certificate (`Claim.run` refutes every mutant: one search each)."""
    (result,) = [r for r in certificate(claim.id)["mutants"] if r["id"] == f"{claim.id}~{mutant.name}"]
    assert result["refuted"], f"{claim.id}~{mutant.name} ({mutant.mistake}) was not refuted: {result['mistake']}"
    counterexample = result["counterexample"]
    assert isinstance(counterexample, dict) and counterexample


def test_claim_ids_are_unique_and_prefixed_by_module():
    """Unique, and each claim's first id segment names what its module declares: one of its ops,
    tables or steps, the module itself, or one of its TOPICS."""
    import importlib

    ids = [c.id for c in CLAIMS]
    assert len(ids) == len(set(ids))
    declared: dict[str, set[str]] = {}
    for unit in (*registry.ops(), *registry.tables(), *registry.steps()):
        declared.setdefault(unit.module, set()).add(unit.name)
    wrong = []
    for c in CLAIMS:
        module = importlib.import_module(c.module)
        allowed = declared.get(c.module, set()) | {c.module.rsplit(".", 1)[-1]} | set(getattr(module, "TOPICS", ()))
        if c.id.split(".")[0] not in allowed:
            wrong.append(f"{c.id} ({c.module}: {sorted(allowed)})")
    assert not wrong, wrong


def test_every_catalogue_id_has_a_claim():
    """Every formula id of the catalogue (FORMULAS.md) is covered by at least one claim."""
    from qed.tools.catalogue import ROWS

    ids = [c.id for c in CLAIMS]
    missing = [rid for row in ROWS for rid in row.ids if not any(i == rid or i.startswith(rid + ".") for i in ids)]
    assert not missing, f"catalogue ids without a claim: {missing}"


def test_a_registry_list_read_while_the_topic_modules_load_is_not_kept(monkeypatch):
    """A topic module may prove a lemma while it is imported (a derived backward's), and the
    proof may read `registry.ops()` (the run-time checks): that list lacks the module being
    imported and those after it. Kept, it hid a user's new loss op from `qed prove` (codegen
    printed it; no claim proved it). Read while loading, a list is computed and not kept."""
    from derivations import registry
    from derivations.proof import preconditions

    calls = []

    @registry.cache
    def listed():
        calls.append(1)
        return len(calls)

    monkeypatch.setattr(registry, "_LOADING", [True])
    monkeypatch.setattr(preconditions, "_ALL", [])
    assert listed() == 1 and listed() == 2  # recomputed while loading
    preconditions.all_runtime_checks()
    assert preconditions._ALL == []  # not kept either
    monkeypatch.setattr(registry, "_LOADING", [])
    assert listed() == 3 and listed() == 3  # kept once loaded
    assert preconditions.all_runtime_checks() and preconditions._ALL
    names = {o.name for o in registry.ops()}
    assert {"cross_entropy", "z_loss", "squareplus"} <= names

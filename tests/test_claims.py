"""One test per claim (it is proved, or recorded as evidence) and one per mutant (refuted)."""

from functools import cache

import pytest

from derivations import registry
from derivations.proof.core import PROVED

CLAIMS = registry.claims()
MUTANTS = [(c, m) for c in CLAIMS for m in c.mutants]


@cache
def certificate(claim_id):
    return registry.claim(claim_id).run()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_is_proved(claim):
    cert = certificate(claim.id)
    assert cert.status in PROVED + ("evidence",), f"{claim.id}: {cert.status} — {cert.method}\n{cert.residual}"
    if cert.status in PROVED:
        assert cert.residual == "0"
    if cert.status == "evidence":
        assert cert.evidence, "an evidence certificate must carry its measurements"
    if cert.spot_check is not None and "max_relative_gap" in cert.spot_check:
        assert cert.spot_check["max_relative_gap"] < 1e-25
    assert claim.source and claim.latex and claim.title


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_has_mutants(claim):
    assert claim.mutants, f"{claim.id} has no mutant: a verifier that cannot fail proves nothing"


@pytest.mark.parametrize("claim,mutant", MUTANTS, ids=[f"{c.id}~{m.name}" for c, m in MUTANTS])
def test_mutant_is_refuted(claim, mutant):
    counterexample = mutant.refute()
    assert counterexample is not None, f"{claim.id}~{mutant.name} ({mutant.mistake}) was not refuted"
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

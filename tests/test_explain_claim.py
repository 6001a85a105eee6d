"""`qed prove CLAIM --explain`: why a claim holds (qed/tools/explain_claim.py) — the identities the
gate decided, the normaliser's rewrites, the normal forms that matched, the side conditions as
mathematics."""

from __future__ import annotations

import subprocess
import sys

import pytest

from derivations.proof import core
from qed.tools.explain_claim import explain, explain_lines


def test_a_backward_shows_its_sifted_deltas_and_matching_normal_forms():
    t = explain("softmax.backward.dx")
    assert t["status"] == "proved-general" and t["identities"]
    ident = t["identities"][0]
    assert ident["status"] == "proved-general" and ident["residual"] == "0"
    assert [r["rule"] for r in ident["rewrites"]] == ["delta sifted"] and ident["rewrites"][0]["count"] >= 2
    assert ident["normal_forms"]["lhs"] == ident["normal_forms"]["rhs"] is not None
    assert r"\delta" in ident["rhs"] and r"\delta" not in ident["normal_forms"]["rhs"]
    # the side conditions as LaTeX, not SymPy's reprs
    assert t["assumptions"] and all(a.startswith("$") for a in t["assumptions"] if "∈" not in a)
    assert not any("Sum(" in a for a in t["assumptions"])


def test_a_claim_decided_otherwise_says_so():
    lines = explain_lines(explain("adam.update"))
    assert "no index transcript" in lines[1]


def test_every_identity_the_gate_decides_is_recorded_and_nothing_outside():
    with core.recorded() as decisions:
        from derivations import registry

        proof = registry.claim("stability.softmax_shift").prove()
    assert proof.status == "proved-general" and len(decisions) == 3  # a row sum, a row mean, a scaled row
    assert core._DECISIONS is None


@pytest.mark.parametrize("args,ok", [(["relu.backward.dx"], True), (["relu"], False), ([], False)])
def test_the_command_line(args, ok):
    out = subprocess.run(
        [sys.executable, "-m", "qed", "prove", *args, "--explain"], capture_output=True, text=True, timeout=300
    )
    if ok:
        assert out.returncode == 0, out.stderr
        assert "relu.backward.dx: proved-general" in out.stdout and "delta sifted" in out.stdout
        assert "kink at" in out.stdout  # the checked kink, among the side conditions
    else:
        assert out.returncode != 0 and "--explain needs claim ids" in out.stderr

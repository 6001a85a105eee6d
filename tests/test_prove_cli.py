"""`qed prove`: the JSON schema of certificates, the table, and the exit status."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "qed", "prove", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_prove_json_schema():
    out = run("softmax", "attention.dQ", "--json", "-j", "1")
    assert out.returncode == 0, out.stderr
    certs = json.loads(out.stdout)
    assert {c["id"] for c in certs} == {"softmax.normalised", "softmax.shift", "softmax.jacobian",
                                        "softmax.vjp", "softmax.forward", "softmax.backward.dx",
                                        "softmax.backward_derived.dx", "attention.dQ"}
    for c in certs:
        assert c["status"] == "proved-general" and c["scope"] == "all sizes"
        assert isinstance(c["method"], str) and isinstance(c["seconds"], float)
        assert isinstance(c["assumptions"], list) and all(isinstance(a, str) for a in c["assumptions"])
        assert c["mutants"]
        for m in c["mutants"]:
            assert set(m) >= {"id", "refuted", "counterexample"}
            assert m["refuted"] is True and m["counterexample"]


def test_prove_table_and_unknown_selector():
    out = run("linear")
    assert out.returncode == 0, out.stderr
    assert "linear.dW" in out.stdout and "proved-general" in out.stdout
    bad = run("no.such.claim")
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        "qed: error: no claim matches no.such.claim (claim ids or their prefixes, e.g. attention or "
        "softmax.forward)"]


def test_a_claim_fails_when_unproven_or_a_mutant_survives():
    from qed.tools.prove import is_ok

    good = {"status": "proved-general", "mutants": [{"refuted": True}]}
    assert is_ok(good)
    assert not is_ok(dict(good, status="unproven"))
    assert not is_ok(dict(good, status="refuted"))
    assert not is_ok(dict(good, mutants=[{"refuted": True}, {"refuted": False}]))
    assert not is_ok(dict(good, mutants=[]))

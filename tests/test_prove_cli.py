"""`qed prove`: the JSON schema of certificates, the table, and the exit status."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args):
    # a cache of its own: each run proves from cold (an earlier test may have filled the session's)
    env = dict(os.environ, PYTHONPATH=ROOT, QED_CACHE_DIR=tempfile.mkdtemp(prefix="qed-cache-"))
    return subprocess.run(
        [sys.executable, "-m", "qed", "prove", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_prove_json_schema():
    out = run("softmax", "attention.dQ", "--json", "-j", "1")
    assert out.returncode == 0, out.stderr
    certs = json.loads(out.stdout)
    assert {c["id"] for c in certs} == {
        "softmax.normalised",
        "softmax.shift",
        "softmax.jacobian",
        "softmax.vjp",
        "softmax.forward",
        "softmax.backward.dx",
        "softmax.backward_derived.dx",
        "attention.dQ",
    }
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
        "qed: error: no claim matches no.such.claim (claim ids or their prefixes, e.g. attention or softmax.forward)"
    ]


def test_a_claim_fails_when_unproven_or_a_mutant_survives():
    from qed.tools.prove import is_ok

    good = {"status": "proved-general", "mutants": [{"refuted": True}]}
    assert is_ok(good)
    assert not is_ok(dict(good, status="unproven"))
    assert not is_ok(dict(good, status="refuted"))
    assert not is_ok(dict(good, mutants=[{"refuted": True}, {"refuted": False}]))
    assert not is_ok(dict(good, mutants=[]))


def test_prove_op_is_the_whole_check_of_its_files():
    """`qed prove relu`: relu's claims, then every judge over generated/{numpy,torch}/relu.py,
    every code line of both files executed; piped, one line per claim and per judge task."""
    out = run("relu", "-j", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("judge symbolic: numpy ") for line in lines), out.stdout
    assert any(line.startswith("judge rational: numpy ") for line in lines), out.stdout
    assert any(line.startswith("judge edges: numpy ") for line in lines), out.stdout
    executed = next(line for line in lines if line.startswith("printed lines executed by the judges"))
    assert "(100.0 %)" in executed and "numpy" in executed and "torch" in executed
    assert "relu.forward  proved-general" in out.stderr  # piped: a line per claim
    assert "judge edges torch" in out.stderr


def test_a_judge_mismatch_fails_prove(monkeypatch):
    """A judge's mismatch, and a printed line no judge executed, each fail the run's report."""
    from qed.tools import judges

    done = judges.split_parts(judges.run_task("edges", "numpy", ("relu",)))
    done[0]["results"].append({"ok": False, "text": "relu: a planted mismatch", "entries": 0})
    report = judges.collect(done, ["relu"])
    assert "relu: a planted mismatch" in report.failures()
    assert not report.ok
    # only the edge judge ran: relu's formula lines were executed by no judge
    assert not report.lines["numpy"].complete and report.lines["numpy"].missed

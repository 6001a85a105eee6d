"""The certificate cache of `qed prove`: keyed over everything a result depends on, ignored with
one line when damaged or foreign, never trusted under --no-cache, and only passing results kept."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qed.tools import judges, prove, prove_cache
from qed.tools.prove_cache import Cache, Keys

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ keys, in a toy tree
@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A project of four modules: a imports b inside a function, b imports c relatively; d stands
    apart."""
    pkg = tmp_path / "derivations"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from derivations import b\n    return b.g()\n")
    (pkg / "b.py").write_text("from . import c\n\n\ndef g():\n    return c.h()\n")
    (pkg / "c.py").write_text("def h():\n    return 1\n")
    (pkg / "d.py").write_text("X = 1\n")
    monkeypatch.setattr(prove_cache, "ROOT", tmp_path)
    return pkg


def test_a_claim_key_covers_a_module_two_imports_away(toy):
    before = Keys().claim("a.f", "derivations.a")
    (toy / "d.py").write_text("X = 2\n")  # not imported by a: same key
    assert Keys().claim("a.f", "derivations.a") == before
    (toy / "c.py").write_text("def h():\n    return 2\n")  # a -> b -> c
    assert Keys().claim("a.f", "derivations.a") != before
    files = {p.name for p in Keys().files_of_claim("derivations.a")}
    assert {"__init__.py", "a.py", "b.py", "c.py"} <= files and "d.py" not in files


def test_a_key_covers_the_versions_and_the_claim(toy, monkeypatch):
    keys = Keys()
    assert keys.claim("a.f", "derivations.a") != keys.claim("a.other", "derivations.a")
    monkeypatch.setattr(prove_cache, "versions", lambda: "sympy 0.0")
    assert Keys().claim("a.f", "derivations.a") != keys.claim("a.f", "derivations.a")


# ------------------------------------------------------------------------------------- the store
def test_a_damaged_or_foreign_entry_is_ignored_with_one_line(tmp_path):
    said = []
    cache = Cache(tmp_path, warn=said.append)
    cache.store("a" * 64, "claim x", {"status": "proved-general"})
    cache.store("b" * 64, "claim y", {"status": "proved-general"})
    assert Cache(tmp_path).load("a" * 64, "claim x") == {"status": "proved-general"}
    entry = tmp_path / "prove" / f"{'a' * 64}.json"

    def fresh():
        return Cache(tmp_path, warn=said.append)

    text = entry.read_text()
    entry.write_text(text.replace("proved-general", "proved-generel"))  # content changed, digest not
    assert fresh().load("a" * 64, "claim x") is None
    entry.write_bytes(b"\xff\xfe not json")
    assert fresh().load("a" * 64, "claim x") is None
    shutil.copy(tmp_path / "prove" / f"{'b' * 64}.json", entry)  # another claim's entry under x's key
    assert fresh().load("a" * 64, "claim x") is None
    entry.write_text(json.dumps({"format": "something else"}))
    assert fresh().load("a" * 64, "claim x") is None
    assert len(said) == 4 and all(s.startswith("qed prove: cache entry") and "\n" not in s for s in said)
    assert ["damaged" in said[0], "not JSON" in said[1], "something else" in said[2], "format" in said[3]] == [True] * 4


def test_a_disabled_cache_reads_and_writes_nothing(tmp_path):
    Cache(tmp_path).store("c" * 64, "claim z", {"ok": 1})
    off = Cache(tmp_path, enabled=False)
    assert off.load("c" * 64, "claim z") is None
    off.store("d" * 64, "claim w", {"ok": 1})
    assert not (tmp_path / "prove" / f"{'d' * 64}.json").exists()


def test_an_unwritable_cache_is_said_once_and_the_run_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    said = []
    cache = Cache(blocker, warn=said.append)  # its directory would be inside a file
    cache.store("e" * 64, "claim v", {})
    cache.store("f" * 64, "claim u", {})
    assert len(said) == 1 and "cannot write the cache" in said[0]


def test_only_a_passing_certificate_is_stored(tmp_path, monkeypatch):
    failing = {"id": "softmax.shift", "status": "unproven", "mutants": [], "seconds": 0.0}
    monkeypatch.setattr(prove, "_run_one", lambda cid: dict(failing, id=cid))
    cache = Cache(tmp_path)
    certs = prove.run_claims(["softmax.shift"], workers=1, cache=cache)
    assert [c["status"] for c in certs] == ["unproven"]
    stored = [json.loads(p.read_text())["what"] for p in (tmp_path / "prove").glob("*.json")]
    assert "claim softmax.shift" not in stored


def test_judge_tasks_skip_what_the_cache_holds_and_run_the_heaviest_first():
    names = ("relu", "mha", "softmax", "attention_tiled", "gelu")
    got = judges.tasks(names, skip={("symbolic", "numpy", "relu")})
    assert got[0][2] in (("attention_tiled",), ("mha",))
    units = {(j, b, n) for j, b, ns in got for n in ns}
    assert ("symbolic", "numpy", "relu") not in units
    assert units | {("symbolic", "numpy", "relu")} == {
        (j, b, n) for j in judges.JUDGES for b in judges.BACKENDS for n in names
    }


# ----------------------------------------------------------------------------- the command, end to end
CLAIM = "attention_lse.forward"  # derivations/attention_lse.py -> attention.py -> softmax.py


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """The project's sources in a directory of their own, so a test may edit them."""
    where = tmp_path_factory.mktemp("project")
    for part in ("derivations", "qed", "codegen", "generated"):
        shutil.copytree(ROOT / part, where / part, ignore=shutil.ignore_patterns("__pycache__"))
    return where


def prove_in(where: Path, *args):
    env = dict(os.environ, PYTHONPATH=str(where), QED_CACHE_DIR=str(where / "cache"))
    r = subprocess.run(
        [sys.executable, "-m", "qed", "prove", *args, "-j", "1"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return r


def reused(r) -> str:
    return next(line for line in r.stdout.splitlines() if line.startswith("reused from the certificate cache"))


def test_the_command_reuses_what_did_not_change_and_reproves_what_did(copy):
    env = dict(os.environ, PYTHONPATH=str(copy))
    here = subprocess.run(
        [sys.executable, "-c", "import qed; print(qed.__file__)"], cwd=copy, env=env, capture_output=True, text=True
    )
    assert here.stdout.strip() == str(copy / "qed" / "__init__.py")  # the copy runs, not the checkout
    first = prove_in(copy, CLAIM)
    assert reused(first).startswith("reused from the certificate cache: 0 of 1 claims")
    assert reused(prove_in(copy, CLAIM)).startswith("reused from the certificate cache: 1 of 1 claims")
    with open(copy / "derivations" / "linear.py", "a") as f:  # not on the claim's import path
        f.write("\n# an edit elsewhere\n")
    assert reused(prove_in(copy, CLAIM)).startswith("reused from the certificate cache: 1 of 1 claims")
    with open(copy / "derivations" / "softmax.py", "a") as f:  # two imports away
        f.write("\n# an edit two modules away\n")
    again = prove_in(copy, CLAIM)
    assert reused(again).startswith("reused from the certificate cache: 0 of 1 claims")
    assert f"{CLAIM}  proved-general" in again.stderr  # piped: proved again, one line


def test_the_command_ignores_a_damaged_entry_and_no_cache_trusts_nothing(copy):
    prove_in(copy, CLAIM)
    for entry in (copy / "cache" / "prove").glob("*.json"):
        if json.loads(entry.read_text())["what"] == f"claim {CLAIM}":
            entry.write_text(entry.read_text().replace("proved-general", "proved-concrete"))
    r = prove_in(copy, CLAIM)
    assert [line for line in r.stderr.splitlines() if "ignored" in line] == [
        line for line in r.stderr.splitlines() if line.startswith("qed prove: cache entry")
    ]
    assert sum("ignored: damaged" in line for line in r.stderr.splitlines()) == 1
    assert reused(r).startswith("reused from the certificate cache: 0 of 1 claims")
    cold = prove_in(copy, CLAIM, "--no-cache")
    assert "reused from the certificate cache" not in cold.stdout + cold.stderr
    assert f"{CLAIM}  proved-general" in cold.stderr

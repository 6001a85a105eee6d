"""The command line, run as a user runs it (`python -m qed ...` in a subprocess): a short training
run with its outputs, sampling, evaluation, Ctrl-C, and one-line errors for bad input."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, SORT_TINY, TINY, assert_one_line_error, qed


@pytest.fixture(scope="module")
def sort_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "sortrun"
    r = qed("train", "--steps", 20, "--eval-every", 10, "--out", out, *SORT_TINY)
    assert r.returncode == 0, r.stderr
    return out, r


def test_train_writes_run_directory(sort_run):
    out, r = sort_run
    assert "held-out accuracy" in r.stdout and "done in" in r.stdout
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in recs] == [10, 20]
    for rec in recs:
        for key in ("step", "train_loss", "val_loss", "lr", "tokens_per_s", "accuracy"):
            assert key in rec, key
        assert rec["tokens_per_s"] > 0 and 0 <= rec["accuracy"] <= 1
    assert (out / "loss.png").stat().st_size > 1000
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["config"]["n_layer"] == 1 and "never reads" in cfg["about"] and cfg["train"]["steps"] == 20
    latest = (out / "checkpoints" / "latest").read_text().strip()
    assert latest == "step-00000020"
    assert sorted(os.listdir(out / "checkpoints" / latest)) == [
        "model.safetensors",
        "optimizer.safetensors",
        "state.json",
    ]


def test_sample_and_eval(sort_run):
    out, _ = sort_run
    r = qed("sample", out, "--prompt", "201120")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    inp, rest = line.split(" -> ")
    assert inp == "201120" and len(rest.split()[0]) == 6 and set(rest.split()[0]) <= set("0123456789")
    r = qed("sample", out, "--num-samples", 3, "--temperature", "0.8", "--top-k", "3", "--seed", "2")
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 3, r.stderr
    r = qed("eval", out, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["step"] == 20 and "val_loss" in res and "accuracy" in res
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert res["val_loss"] == pytest.approx(last["val_loss"], rel=1e-6)
    assert res["accuracy"] == last["accuracy"]


def test_text_training_and_sampling(tmp_path):
    f = tmp_path / "poem.txt"
    f.write_text("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 8)
    r = qed("train", "--data", f, "--steps", 4, "--eval-every", 2, "--block-size", 16, "--out", tmp_path / "run", *TINY)
    assert r.returncode == 0, r.stderr
    r = qed("sample", tmp_path / "run", "--prompt", "Shall ", "--max-new-tokens", 20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Shall ") and len(r.stdout.rstrip("\n")) >= 6
    r = qed("sample", tmp_path / "run", "--prompt", "Zebra§")
    assert_one_line_error(r, "outside the vocabulary")
    r = qed("eval", tmp_path / "run")
    assert r.returncode == 0 and "val_loss" in r.stdout, r.stderr


def test_ctrl_c_saves_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(
        [sys.executable, "-m", "qed", "train", "--steps", "100000", "--eval-every", "5", "--out", str(out), *SORT_TINY],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 600  # a guard against a hang, not a claim about speed
        while not (out / "checkpoints" / "latest").exists():
            assert p.poll() is None and time.time() < deadline, "training did not start"
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "checkpoint saved" in stderr
    state = json.loads(
        (out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip() / "state.json").read_text()
    )
    stopped = state["step"]
    assert stopped >= 5
    r = qed("train", "--resume", out, "--steps", stopped + 3, "--numpy-parallel", "threads")  # how may change
    assert r.returncode == 0, r.stderr
    assert f"at step {stopped}" in r.stdout
    r = qed("train", "--resume", out, "--lr", "0.1")
    assert_one_line_error(r, "--lr", "--resume")


# --------------------------------------------------------------------------- bad input
@pytest.fixture
def files(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "short.txt").write_text("abcdefgh")
    return tmp_path


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "binary",
        "short",
        "missing-data",
        "bad-config",
        "bad-rope",
        "missing-run",
        "not-a-run",
        "bad-lr",
        "compile-numpy",
    ],
)
def test_bad_input_gives_one_line_error(files, case):
    t = files
    args, frag = {
        "empty": (["train", "--data", t / "empty.txt"], "empty"),
        "binary": (["train", "--data", t / "binary.bin"], "UTF-8"),
        "short": (["train", "--data", t / "short.txt", "--block-size", "16"], "shorter than block_size"),
        "missing-data": (["train", "--data", t / "nope.txt"], "no such file"),
        "bad-config": (["train", "--n-embd", "30", "--n-head", "4", "--out", t / "r"], "divisible"),
        "bad-rope": (["train", "--pos", "rope", "--n-embd", "12", "--n-head", "4", "--out", t / "r"], "rope"),
        "missing-run": (["sample", t / "no-such-run"], "no such run directory"),
        "not-a-run": (["eval", t], "no checkpoint"),
        "bad-lr": (["train", "--lr", "-1", "--out", t / "r"], "--lr"),
        "compile-numpy": (["train", "--compile", "--out", t / "r"], "--compile applies to --backend torch"),
    }[case]
    assert_one_line_error(qed(*args), frag)


def test_bad_prompt_and_bad_checkpoints(sort_run, tmp_path):
    import shutil

    out, _ = sort_run
    assert_one_line_error(qed("sample", out, "--prompt", "12ab56"), "outside the vocabulary")
    assert_one_line_error(qed("sample", out, "--prompt", "120"), "exactly 6")
    # a corrupted copy: truncated weights
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    ck = bad / "checkpoints" / (bad / "checkpoints" / "latest").read_text().strip()
    data = (ck / "model.safetensors").read_bytes()
    (ck / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_one_line_error(qed("sample", bad), "corrupted")
    # garbage
    (ck / "model.safetensors").write_bytes(os.urandom(len(data)))
    assert_one_line_error(qed("eval", bad), "corrupted")
    # a foreign format version
    shutil.rmtree(bad)
    shutil.copytree(out, bad)
    s = json.loads((ck / "state.json").read_text())
    s["format_version"] = 7
    (ck / "state.json").write_text(json.dumps(s))
    assert_one_line_error(qed("sample", bad), "format version 7")
    assert_one_line_error(qed("train", "--resume", bad), "format version 7")


def test_prove_does_not_import_torch():
    """Proving claims (here softmax's, in-process, named one by one: no judge of the printed code
    runs) never loads torch; `qed prove softmax` also judges generated/torch/softmax.py, whose
    refusals the edge judge runs on real torch tensors."""
    code = (
        "import sys; from qed.cli import main; "
        "rc = main(['prove', 'softmax.forward', 'softmax.backward.dx', 'softmax.shift', '-j', '1']); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "proved-general" in r.stdout


def test_attention_short_names(tmp_path):
    """`--attention tiled` trains with attention_tiled (and says so in the saved config); an
    unknown name is a one-line error naming the choices."""
    out = tmp_path / "tiled"
    r = qed("train", "--steps", 2, "--eval-every", 2, "--attention", "tiled", "--out", out, *SORT_TINY)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "config.json").read_text())["config"]["attention"] == "attention_tiled"
    r = qed("train", "--steps", 2, "--attention", "flash", "--out", tmp_path / "bad", *SORT_TINY)
    assert_one_line_error(r, "flash", "attention_tiled")


def test_version():
    """`qed --version`: the installed distribution's version, one line."""
    r = subprocess.run([sys.executable, "-m", "qed", "--version"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("qed ") and len(r.stdout.strip().splitlines()) == 1

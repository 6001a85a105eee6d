"""A run directory that cannot be corrupted, waits that end, and one line for every bad input
(issue 28). Each test builds the fault: a master address that accepts and never answers, a
worker process that stops answering, a torn and a non-UTF-8 metrics line, two concurrent
trainings, a lock left by a killed process, a rewritten data file, a symbolic link or another
run's checkpoint inside the run, a checkpoint whose step was edited under a valid checksum,
every malformed environment variable, and the kernels' options of the wrong kind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import ROOT, SORT_TINY, TINY, assert_one_line_error, env, qed

from qed import checkpoint as ckpt
from qed import run_dir as rundir
from qed.errors import CheckpointError, QedError


# --------------------------------------------------------------------------- a finished run to break
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("integrity") / "run"
    r = qed("train", "--steps", 8, "--eval-every", 4, "--out", out, *SORT_TINY)
    assert r.returncode == 0, r.stderr
    return out


def _copy(run, tmp_path, name="copy") -> Path:
    bad = tmp_path / name
    shutil.copytree(run, bad)
    return bad


def _one_notice(r, *fragments):
    """stderr holds exactly one `qed: ` line per fragment list entry, each with its fragment."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr, r.stderr
    for f in fragments:
        assert sum(f in ln for ln in lines) == 1, (f, r.stderr)
    assert all(ln.startswith("qed: ") for ln in lines), r.stderr


# --------------------------------------------------------------------------- every wait is bounded
def test_a_master_that_accepts_and_never_answers_ends_the_rank_in_one_line(tmp_path):
    """A listening socket that never accepts nor answers: the rank's rendezvous is given up after
    --dist-timeout, in one line (it used to wait for ever)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or writes
        port = silent.getsockname()[1]
        ranks = dict(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        r = subprocess.run(
            [sys.executable, "-m", "qed", "train", "--dist-timeout", "1", *SORT_TINY],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(env(), **ranks),
            timeout=120,  # a guard against the hang itself, not a measurement
        )
    assert_one_line_error(
        r, "rank 1 of 2", f"no answer from the rendezvous at 127.0.0.1:{port}", "1 s (--dist-timeout)"
    )


def test_within_returns_raises_or_gives_up():
    from qed.distributed import within

    assert within(5, lambda: 7) == 7
    with pytest.raises(KeyError):
        within(5, lambda: {}["x"])
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            within(0.2, release.wait)  # blocked until released
    finally:
        release.set()


@pytest.mark.parametrize("value", ["1e300", "inf", "nan", "0", "-1", "604801"])
def test_a_timeout_out_of_range_is_one_line(value, tmp_path):
    assert_one_line_error(qed("train", "--dist-timeout", value, cwd=tmp_path), "--dist-timeout")
    assert not (tmp_path / "runs").exists()


def test_a_worker_process_that_stops_answering_is_one_line(monkeypatch):
    """The NumPy backend's worker process stopped (SIGSTOP): the wait for its reply ends after the
    timeout with one line, and closing recovers."""
    from qed import workers
    from qed.config import GPTConfig
    from qed.model_numpy import NumpyGPT

    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11)
    rng = np.random.default_rng(0)
    idx, tgt = rng.integers(0, 11, (4, 8)), rng.integers(0, 11, (4, 8))
    with NumpyGPT(cfg, threads=2, parallel="processes") as m:
        m.forward(idx, tgt)  # the workers started and answered at the default timeout
        m.backward()
        monkeypatch.setattr(workers, "REPLY_TIMEOUT", 0.5)  # only now: a busy machine starts them slowly
        proc = m.parallel.workers.procs[0]
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(workers.WorkerTimeout, match=r"did not answer within 0.5 s \(--dist-timeout\)"):
                m.forward(idx, tgt)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        m.close()
        monkeypatch.undo()  # the default timeout again: fresh workers on a busy machine may need over 0.5 s
        assert np.isfinite(m.forward(idx, tgt)[1])


# --------------------------------------------------------------------------- metrics.jsonl on resume
def test_resume_keeps_damaged_and_later_metrics_lines_aside(run, tmp_path):
    """A torn line, a non-UTF-8 line and a record after the checkpoint: each kept aside, byte for
    byte, with one line; every intact record before the checkpoint kept byte for byte."""
    bad = _copy(run, tmp_path)
    path = bad / rundir.METRICS
    intact = path.read_bytes().splitlines()  # steps 4 and 8
    torn, latin = b'{"step": 6, "train_lo', b'{"step": 7, "note": "\xe9t\xe9"}'
    later = b'{"step": 12, "train_loss": 0.5, "val_loss": 0.5}'
    path.write_bytes(b"\n".join([intact[0], torn, latin, intact[1], later]) + b"\n")
    r = qed("train", "--resume", bad, "--steps", 12)
    assert r.returncode == 0, r.stderr
    _one_notice(r, "2 line(s) damaged", "1 line(s) after step 8")
    assert (bad / rundir.DAMAGED).read_bytes() == torn + b"\n" + latin + b"\n"
    assert (bad / rundir.SUPERSEDED).read_bytes() == later + b"\n"
    kept = path.read_bytes().splitlines()
    assert kept[:2] == intact and [json.loads(x)["step"] for x in kept] == [4, 8, 12]


def test_rewind_keeps_what_it_can_read_byte_for_byte(tmp_path, capsys):
    """rewind_metrics alone: nothing to move leaves the file untouched; a last line without its
    newline is kept and ended."""
    path = tmp_path / rundir.METRICS
    lines = [b'{"step": 1, "val_loss": 2.0}', b'{ "step" : 2 , "val_loss" : 1.5 }']
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = os.stat(path).st_ino
    rundir.rewind_metrics(tmp_path, 2)
    assert path.read_bytes() == b"\n".join(lines) + b"\n" and os.stat(path).st_ino == before
    path.write_bytes(b"\n".join(lines))  # no final newline
    rundir.rewind_metrics(tmp_path, 2)
    assert path.read_bytes() == b"\n".join(lines) + b"\n"
    assert capsys.readouterr().err == ""
    path.write_bytes(lines[0] + b"\n[1, 2]\n" + b'{"step": -3}\n' + b'{"step": 1, "lr": "fast"}\n')
    rundir.rewind_metrics(tmp_path, 2)
    assert path.read_bytes() == lines[0] + b"\n"
    assert (tmp_path / rundir.DAMAGED).read_bytes().count(b"\n") == 3
    assert "3 line(s) damaged" in capsys.readouterr().err


# --------------------------------------------------------------------------- one writer at a time
def test_a_second_training_of_a_locked_run_is_refused(run, tmp_path):
    bad = _copy(run, tmp_path)
    held = rundir.RunLock.acquire(bad)  # as a running `qed train` holds it
    try:
        assert_one_line_error(qed("train", "--resume", bad, "--steps", 12), f"in use by process {os.getpid()}")
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        other = rundir.RunLock.acquire(fresh)
        try:
            assert_one_line_error(qed("train", "--out", fresh, *SORT_TINY, "--steps", 4), "in use by process")
            assert sorted(p.name for p in fresh.iterdir()) == [rundir.LOCK]  # nothing written
        finally:
            other.release()
    finally:
        held.release()
    r = qed("train", "--resume", bad, "--steps", 12)  # released: it goes ahead
    assert r.returncode == 0, r.stderr
    assert (bad / rundir.LOCK).read_bytes() == b""  # and released it at its end: free and empty
    mine = rundir.RunLock.acquire(bad)
    try:
        with pytest.raises(QedError, match=f"in use by process {os.getpid()}"):
            rundir.RunLock.acquire(bad)  # flock: even this process's second open is kept out
    finally:
        mine.release()


def test_two_concurrent_resumes_the_second_refuses(run, tmp_path):
    """Two real `qed train --resume` of one run: the first trains, the second is refused in one
    line while it does; the first, interrupted, saves as usual and no step is logged twice."""
    bad = _copy(run, tmp_path)
    first = subprocess.Popen(
        [sys.executable, "-m", "qed", "train", "--resume", str(bad), "--steps", "100000", "--eval-every", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env(),
    )
    try:
        assert first.stdout.readline().startswith(f"resuming {bad} at step 8")  # it holds the lock now
        assert_one_line_error(qed("train", "--resume", bad, "--steps", 200000), "in use by process", str(first.pid))
    finally:
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=300)
    assert first.returncode == 130, err
    steps = [json.loads(x)["step"] for x in (bad / rundir.METRICS).read_text().splitlines()]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)


def test_a_lock_left_by_a_killed_process_is_taken_over_in_one_line(run, tmp_path):
    bad = _copy(run, tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no process holds any more
    (bad / rundir.LOCK).write_text(f"{gone.pid}\n")
    r = qed("train", "--resume", bad, "--steps", 12)
    assert r.returncode == 0, r.stderr
    _one_notice(r, f"process {gone.pid} ended without releasing the run's lock; taking it over")


def test_two_new_runs_on_one_out_never_both_start(tmp_path):
    """The second of two `qed train --out D` finds D taken, by the lock or by the first run's files."""
    out = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "qed", "train", "--out", str(out), "--steps", "8", "--eval-every", "4", *SORT_TINY],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env(),
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 1], results
    err = next(e for rc, e in results if rc == 1)
    assert re.fullmatch(r"qed: error: .*(in use by process \d+|already holds a run).*\n", err), err
    steps = [json.loads(x)["step"] for x in (out / rundir.METRICS).read_text().splitlines()]
    assert steps == [4, 8]


# --------------------------------------------------------------------------- the same run, the same data
def _poem(path: Path, text: str) -> None:
    path.write_text(text * 12, encoding="utf-8")


def test_a_rewritten_data_file_is_refused(tmp_path):
    data = tmp_path / "poem.txt"
    _poem(data, "Shall I compare thee to a summer's day?\n")
    out = tmp_path / "r"
    r = qed("train", "--data", data, "--steps", 4, "--eval-every", 4, "--block-size", 16, "--out", out, *TINY)
    assert r.returncode == 0, r.stderr
    _poem(data, "?yad s'remmus a ot eeht erapmoc I llahS\n")  # the same characters, another text
    for args in (["train", "--resume", out, "--steps", 8], ["eval", out]):
        assert_one_line_error(qed(*args), f"{data}: changed since the run started")
    r = qed("sample", out, "--max-new-tokens", 5)  # sampling needs only the vocabulary
    assert r.returncode == 0, r.stderr


def test_a_symlinked_checkpoint_is_refused_and_never_pruned_through(run, tmp_path):
    """A checkpoint directory replaced by a link to another run's: refused by eval, sample and
    resume; pruning never follows the link."""
    other = _copy(run, tmp_path, "other")
    bad = _copy(run, tmp_path, "bad")
    latest = ckpt.resolve(bad)
    shutil.rmtree(latest)
    latest.symlink_to(ckpt.resolve(other), target_is_directory=True)
    for args in (["eval", bad], ["sample", bad], ["train", "--resume", bad, "--steps", 12]):
        assert_one_line_error(qed(*args), "symbolic link")
    (bad / ckpt.CKPT_DIR / ckpt.LATEST).write_text("step-00000004\n")
    r = qed("train", "--resume", bad, "--steps", 16, "--eval-every", 4)  # prunes as it saves
    assert r.returncode == 0, r.stderr
    assert latest.is_symlink() and sorted(p.name for p in ckpt.resolve(other).iterdir()) == sorted(
        ["model.safetensors", "optimizer.safetensors", "state.json"]
    )


def test_another_runs_checkpoint_is_refused_and_never_pruned(run, tmp_path):
    other = _copy(run, tmp_path, "other")
    json_ = json.loads((other / rundir.RUN_RECORD).read_text())
    json_["run_id"] = "0" * 32
    (other / rundir.RUN_RECORD).write_text(json.dumps(json_))  # now a run of its own id ...
    r = qed("train", "--resume", other, "--steps", 12)
    assert_one_line_error(r, "belongs to another run")  # ... whose checkpoints are not its own
    bad = _copy(run, tmp_path, "bad")
    foreign = bad / ckpt.CKPT_DIR / "step-00000001"
    shutil.copytree(ckpt.resolve(bad), foreign)
    state = json.loads((foreign / "state.json").read_text())
    state.update(step=1, run={"id": "f" * 32})
    state["checksum"] = ckpt.state_checksum(state)
    (foreign / "state.json").write_text(json.dumps(state))
    (bad / ckpt.CKPT_DIR / ckpt.LATEST).write_text("step-00000001\n")
    for args in (["eval", bad], ["sample", bad], ["train", "--resume", bad, "--steps", 12]):
        assert_one_line_error(qed(*args), "step-00000001: belongs to another run")
    (bad / ckpt.CKPT_DIR / ckpt.LATEST).write_text("step-00000008\n")
    r = qed("train", "--resume", bad, "--steps", 20, "--eval-every", 4)
    assert r.returncode == 0, r.stderr
    assert foreign.is_dir()  # three saves with keep=2: only this run's own were pruned


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (dict(step=-1), "step -1 is not an integer >= 0"),
        (dict(step=True), "step True is not an integer >= 0"),
        (dict(step=4), "its state.json says step 4, its name step 8"),
        (dict(run=None), "records no run identity"),
        (dict(pending_losses=["x"]), "pending_losses is not a list of finite numbers"),
        (dict(best_val_loss="low"), "best_val_loss 'low' is not a finite number"),
    ],
)
def test_a_checkpoint_edited_under_a_valid_checksum_is_one_line(run, tmp_path, edit, fragment):
    bad = _copy(run, tmp_path)
    path = ckpt.resolve(bad)
    state = json.loads((path / "state.json").read_text())
    state.update(edit)
    state["checksum"] = ckpt.state_checksum(state)
    (path / "state.json").write_text(json.dumps(state))
    for args in (["eval", bad], ["sample", bad], ["train", "--resume", bad, "--steps", 20]):
        assert_one_line_error(qed(*args), fragment)


def test_links_inside_a_run_are_never_followed(run, tmp_path):
    bad = _copy(run, tmp_path)
    outside = tmp_path / "outside"
    (bad / ckpt.CKPT_DIR).rename(outside)
    (bad / ckpt.CKPT_DIR).symlink_to(outside, target_is_directory=True)
    assert_one_line_error(qed("eval", bad), "checkpoints directory is a symbolic link")
    (bad / ckpt.CKPT_DIR).unlink()
    outside.rename(bad / ckpt.CKPT_DIR)
    (bad / rundir.METRICS).unlink()
    (bad / rundir.METRICS).symlink_to(outside)
    assert_one_line_error(qed("train", "--resume", bad, "--steps", 12), "metrics.jsonl: is a symbolic link")
    assert not outside.exists()
    (bad / rundir.RUN_RECORD).unlink()
    assert_one_line_error(qed("eval", bad), "has no run.json")


def test_pruning_keeps_other_runs_and_links(tmp_path):
    """save_checkpoint's pruning, alone: another run's checkpoint and a link to a directory
    outside survive any number of saves."""
    params = {"w": np.ones((2, 2))}
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    root = tmp_path / "run" / ckpt.CKPT_DIR
    root.mkdir(parents=True)
    (root / "step-00000000").symlink_to(target, target_is_directory=True)
    ckpt.save_checkpoint(tmp_path / "run", step=1, params=params, optimizer=None, meta={"run": {"id": "other"}})
    for step in range(2, 6):
        ckpt.save_checkpoint(
            tmp_path / "run", step=step, params=params, optimizer=None, meta={"run": {"id": "me"}}, keep=1
        )
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step-")) == [
        "step-00000000",
        "step-00000001",
        "step-00000005",
    ]
    assert (target / "keep.txt").exists()
    (tmp_path / "link").symlink_to(root / "step-00000005", target_is_directory=True)
    with pytest.raises(CheckpointError, match="checkpoint directory is a symbolic link"):
        ckpt.load_checkpoint(tmp_path / "link")


# --------------------------------------------------------------------------- environment variables
BAD_ENV = {
    "QED_NUMPY_THREADS": "abc",
    "QED_TORCH_THREADS": "0",
    "OMP_NUM_THREADS": "two",
    "QED_MALLOC_TUNE": "yes",
    "QED_SHM_DIR": "/no/such/dir",
    "QED_NPROC": "-2",
    "QED_SEEDS": "/no/such/dir",
    "QED_KATEX": "/no/such/dir",
    "QED_SLOW": "sometimes",
}


def test_every_variable_qed_reads_has_a_parser():
    """Each name qed's own code reads from the environment is one of qed/env.py's (or torchrun's,
    which qed/distributed.py's rank_env parses together)."""
    from qed.env import VARIABLES

    torchrun = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    read = set()
    for folder in ("qed", "derivations", "codegen"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            read |= set(re.findall(r"environ(?:\.get)?\(\s*[\"']([A-Z_]+)[\"']", text))
            read |= set(re.findall(r"environ\[[\"']([A-Z_]+)[\"']\]", text))
            read |= set(re.findall(r"env\.get\(\s*[\"']([A-Z_]+)[\"']", text))
            read |= set(re.findall(r"env_var\(\s*([A-Z_]+)", text))
    read = {"QED_NPROC" if n == "LAUNCHED_BY" else n for n in read}
    passed_on = {"PYTHONPATH"}  # only extended for the processes qed starts, never interpreted
    assert read - set(VARIABLES) - torchrun - passed_on == set(), read
    assert set(BAD_ENV) == {n for n, (parse, _) in VARIABLES.items() if parse.__name__ != "_any"}


@pytest.mark.parametrize("name", sorted(BAD_ENV))
def test_a_malformed_environment_variable_is_one_line(name, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "qed", "eval", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(env(), **{name: BAD_ENV[name]}),
        timeout=300,
    )
    assert_one_line_error(r, f"environment variable {name}={BAD_ENV[name]!r}")


def test_a_bad_torch_thread_count_is_refused_before_the_ranks_start(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "qed", "train", "--nproc", "2", "--oversubscribe", *SORT_TINY],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(env(), QED_TORCH_THREADS="abc"),
        timeout=300,
    )
    assert_one_line_error(r, "QED_TORCH_THREADS='abc'")
    assert not (tmp_path / "runs").exists()


def test_empty_means_unset_and_good_values_parse():
    from qed import env as qenv

    assert qenv.get("QED_NUMPY_THREADS", {"QED_NUMPY_THREADS": ""}) is None
    assert qenv.get("OMP_NUM_THREADS", {"OMP_NUM_THREADS": "4,2"}) == 4
    assert qenv.get("QED_MALLOC_TUNE", {"QED_MALLOC_TUNE": "0"}) is False
    with pytest.raises(KeyError):
        qenv.get("NOT_OURS", {})


# --------------------------------------------------------------------------- tools' names
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["bench", "--ops", "nosuchop", "--only-extra"], "--ops nosuchop: no such op"),
        (["bench", "--ops", "", "--only-extra"], "expected a name"),
        (["audit", ""], "expected a name"),
        (["audit", "--text", " "], "expected a name"),
        (["prove", ""], "expected a name"),
    ],
)
def test_an_empty_or_unknown_name_is_refused(args, fragment, tmp_path):
    assert_one_line_error(qed(*args, cwd=tmp_path), fragment)


# --------------------------------------------------------------------------- kernels' options
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_kernel_options_of_the_wrong_kind_are_refused_by_name(backend):
    import importlib

    import torch

    def arr(*shape):
        a = np.ones(shape)
        return torch.from_numpy(a) if backend == "torch" else a

    mod = lambda name: importlib.import_module(f"generated.{backend}.{name}")  # noqa: E731
    adamw = mod("adamw").adamw_step
    p = arr(2, 3)
    for t, kind in (("abc", "str"), (1.7, "float"), (True, "bool"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"adamw: t must be an integer, got {kind}"):
            adamw(p, p, p, p, t=t)
    with pytest.raises(TypeError, match="adamw: lr must be a real number, got str"):
        adamw(p, p, p, p, t=1, lr="0.1")
    with pytest.raises(ValueError, match=r"rope_tables: d = 5; expected an even d"):
        mod("rope").rope_tables(4, 5)
    assert [tuple(a.shape) for a in mod("rope").rope_tables(4, 6)] == [(4, 6), (4, 6), (6, 6)]
    with pytest.raises(TypeError, match="attention: causal must be True or False, got str"):
        mod("attention").attention_forward(arr(2, 2), arr(2, 2), arr(2, 2), causal="no")
    with pytest.raises(TypeError, match="mha: n_head must be an integer, got float"):
        mod("mha").mha_forward(arr(2, 4), arr(12, 4), arr(12), arr(4, 4), arr(4), n_head=2.0)

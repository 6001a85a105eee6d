"""What a user of the trainer can rely on, run as a user runs it: the README's commands as written,
checkpoints verified before use, one line for every bad input, no run directory after a failed
start, validated sampling options, interrupts that never lose the save, and the best checkpoint."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, SORT_TINY, TINY, assert_one_line_error, env, qed

from qed import checkpoint as ckpt


# --------------------------------------------------------------------------- the README, as written
def readme_transcript() -> list[tuple[str, list[str]]]:
    """(command, printed lines) of the console block under "What `make demo` prints"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## What `make demo` prints", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    out: list[tuple[str, list[str]]] = []
    for line in block.strip("\n").splitlines():
        if line.startswith("$ "):
            out.append((line[2:].split("  #")[0].strip(), []))
        else:
            out[-1][1].append(line)
    return out


def shape(line: str) -> str:
    """A printed line with its numbers, run names and check marks abstracted away."""
    line = re.sub(r"runs/[\w.-]+", "RUN", line)
    line = re.sub(r"\d[\d,]*(\.\d+)?(e[+-]\d+)?", "N", line)
    line = re.sub(r"N [kMGTP]?FLOP/s", "N FLOP/s", line)  # the unit's prefix follows the model's size
    line = line.replace("✓", "MARK").replace("✗", "MARK")
    return " ".join(line.split())  # column padding depends on the numbers


def test_readme_commands_run_as_written(tmp_path):
    """`qed train` (with a tiny model appended) and every later command exactly as the README gives
    it, in a fresh directory; each printed line has the shape the README shows."""
    commands = dict(readme_transcript())
    assert "qed train" in commands and any(c.startswith("qed sample runs/latest") for c in commands)
    r = qed("train", "--steps", 20, "--eval-every", 10, *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    printed = r.stdout.strip().splitlines()
    shown = [ln for ln in commands["qed train"] if ln != "…"]
    assert shape(printed[0]) == shape(shown[0]) and shape(printed[-1]) == shape(shown[-1]), (printed, shown)
    assert shape(printed[1]) == shape(shown[1])
    run = re.search(r"run dir: (runs/[\w.-]+)$", printed[-1]).group(1)
    assert (tmp_path / "runs" / "latest").resolve() == (tmp_path / run).resolve()
    for command, lines in commands.items():
        if command in ("qed train", "qed prove"):
            continue  # qed prove: test_readme_prove_lines (slow)
        argv = command.split()
        if argv[0] == "qed":
            r = qed(*argv[1:], cwd=tmp_path)
        else:
            r = subprocess.run(
                [sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, env=env(), timeout=300
            )
        assert r.returncode == 0, (command, r.stderr)
        got = r.stdout.strip().splitlines()
        assert [shape(g) for g in got] == [shape(ln) for ln in lines], (command, got, lines)


@pytest.mark.slow
def test_readme_prove_lines():
    lines = dict(readme_transcript())["qed prove"]
    r = qed("prove", timeout=1200)
    assert r.returncode == 0, r.stderr
    got = [shape(g) for g in r.stdout.strip().splitlines()[-2:]]
    assert got == [shape(ln) for ln in lines[-2:]]


def test_docs_say_digits_0_to_9():
    for page in ("docs/cli.md", "docs/figures.md", "README.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert not re.search(r"digits (from )?0[–-]2\b", text), page


# --------------------------------------------------------------------------- a trained run to break
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("safety") / "run"
    r = qed("train", "--steps", 12, "--eval-every", 4, "--out", out, *SORT_TINY)
    assert r.returncode == 0, r.stderr
    return out


def _copy(run, tmp_path):
    bad = tmp_path / "copy"
    shutil.copytree(run, bad)
    return bad, ckpt.resolve(bad)


def _edit_state(path, resign=True, edit=None):
    s = json.loads((path / "state.json").read_text())
    edit(s)
    if resign:
        s["checksum"] = ckpt.state_checksum(s)
    (path / "state.json").write_text(json.dumps(s))


@pytest.mark.parametrize("command", ["eval", "sample", "resume"])
def test_a_config_key_removed_is_refused_not_defaulted(run, tmp_path, command):
    """A 2-head run whose state lost n_head must not be evaluated as the default 1-head model."""
    bad, path = _copy(run, tmp_path)
    _edit_state(path, resign=False, edit=lambda s: s["config"].pop("n_head"))
    args = {"eval": ["eval", bad], "sample": ["sample", bad], "resume": ["train", "--resume", bad, "--steps", 20]}
    assert_one_line_error(qed(*args[command]), "changed after it was written")
    _edit_state(path, resign=True, edit=lambda s: None)  # even with the checksum made to match
    assert_one_line_error(qed(*args[command]), "lacks key(s) 'n_head'")


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda s: s["train"].pop("dtype"), "training settings lack 'dtype'"),
        (lambda s: s["train"].update(seed=-3), "--seed must lie in"),
        (lambda s: s["task"].update(num_digits=4), "vocab_size is 3"),
        (lambda s: s["config"].update(n_head="2"), "n_head='2' must be an integer"),
        (lambda s: s["train"].update(dtype="float64"), "weights are float32 but the run's dtype is float64"),
    ],
)
def test_an_inconsistent_state_is_refused(run, tmp_path, edit, fragment):
    bad, path = _copy(run, tmp_path)
    _edit_state(path, edit=edit)
    assert_one_line_error(qed("eval", bad), fragment)


def test_config_json_is_a_marked_copy(run, tmp_path):
    bad, _ = _copy(run, tmp_path)
    cfg = json.loads((bad / "config.json").read_text())
    assert "qed never reads this file" in cfg["about"]
    cfg["config"]["n_head"] = 1  # editing it changes nothing
    (bad / "config.json").write_text(json.dumps(cfg))

    def result(d):
        return {k: v for k, v in json.loads(qed("eval", d, "--json").stdout).items() if k != "checkpoint"}

    assert result(bad) == result(run)


def test_best_checkpoint_beside_latest(run):
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    best = min(recs, key=lambda r: r["val_loss"])
    assert ckpt.resolve(run, ckpt.BEST).name == f"step-{best['step']:08d}"
    r = qed("eval", run, "--best", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step"] == best["step"]
    r = qed("sample", run, "--best", "--prompt", "012210")
    assert r.returncode == 0 and r.stdout.startswith("012210 -> "), r.stderr


def test_resume_below_or_at_the_checkpoint_step_says_so(run, tmp_path):
    bad, _ = _copy(run, tmp_path)
    assert_one_line_error(qed("train", "--resume", bad, "--steps", 5), "--steps 5", "already at step 12")
    assert_one_line_error(qed("train", "--resume", bad), "complete (step 12 of 12)")


# --------------------------------------------------------------------------- one line, no run dir left
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--seed", "-1"], "--seed"),
        (["train", "--n-embd", str(2**20)], "needs an estimated"),
        (["train", "--block-size", str(10**9)], "needs an estimated"),
        (["train", "--batch-size", str(10**9)], "needs an estimated"),
        (["train", "--steps", "0"], "--steps"),
        (["train", "--lr", "nan"], "--lr"),
        (["train", "--betas", "0.9", "inf"], "--betas"),
        (["train", "--n-head", "0"], "n_head"),
        (["prove", "-j", "-1"], "-j"),
        (["docs", "-j", "0"], "-j"),
        (["audit", "--limit", "0"], "--limit"),
        (["audit", "nope"], "no op, table or step matches nope"),
        (["bench", "--steps", "0"], "--steps"),
        (["bench", "--config", f"n_embd={2**20}", "--no-proofs", "--no-codegen"], "needs an estimated"),
    ],
)
def test_bad_start_is_one_line_and_leaves_no_run_directory(tmp_path, args, fragment):
    assert_one_line_error(qed(*args, cwd=tmp_path), fragment)
    assert not (tmp_path / "runs").exists()


def test_a_run_that_diverges_before_its_first_checkpoint_removes_its_directory(tmp_path):
    r = qed(
        "train",
        "--lr",
        "1e12",
        "--min-lr",
        "0",
        "--warmup",
        "0",
        "--grad-clip",
        "0",
        "--steps",
        50,
        *SORT_TINY,
        cwd=tmp_path,
    )
    assert_one_line_error(r, "loss became", "removed runs/sort-")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == []  # and runs/latest went with it


def test_bad_certificates_file_is_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    assert_one_line_error(qed("docs", "--check", "--certificates", tmp_path / "bad.json"), "not JSON")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_one_line_error(qed("docs", "--check", "--certificates", tmp_path / "list.json"), "not the output")
    assert_one_line_error(qed("docs", "--check", "--certificates", tmp_path / "nope.json"), "no such file")


# --------------------------------------------------------------------------- sampling options
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--temperature", "nan"], "--temperature"),
        (["--temperature", "-0.5"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--top-k", "0"], "--top-k"),
        (["--num-samples", "0"], "--num-samples"),
        (["--seed", "-1"], "--seed"),
        (["--max-new-tokens", "-1"], "--max-new-tokens"),
        (["--num-samples", str(10**12)], "needs an estimated"),
    ],
)
def test_bad_sampling_options_are_refused(run, args, fragment):
    assert_one_line_error(qed("sample", run, *args), fragment)


def test_temperature_zero_is_greedy_and_tiny_temperatures_stay_finite(tmp_path):
    f = tmp_path / "poem.txt"
    f.write_text("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 8)
    r = qed("train", "--data", f, "--steps", 4, "--eval-every", 4, "--block-size", 16, "--out", tmp_path / "r", *TINY)
    assert r.returncode == 0, r.stderr
    greedy = qed("sample", tmp_path / "r", "--prompt", "Sh", "--greedy", "--max-new-tokens", 30).stdout
    for t in ("0", "1e-300"):  # 1e-300: (z - max z)/τ, never ∞ − ∞
        r = qed("sample", tmp_path / "r", "--prompt", "Sh", "--temperature", t, "--max-new-tokens", 30)
        assert r.returncode == 0 and not r.stderr, r.stderr
        assert r.stdout == greedy
    assert "0 means greedy" in " ".join(qed("sample", "--help").stdout.split())


# --------------------------------------------------------------------------- interrupts
def _start(out, *extra):
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qed",
            "train",
            "--steps",
            "100000",
            "--eval-every",
            "100000",
            "--out",
            str(out),
            *SORT_TINY,
            *extra,
        ],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().startswith("qed train:")  # the model is built
    time.sleep(1.5)  # some steps, no checkpoint yet
    return p


@pytest.mark.parametrize("signals", [[signal.SIGINT] * 3, [signal.SIGTERM], [signal.SIGINT, signal.SIGTERM]])
def test_repeated_interrupts_never_lose_the_save(tmp_path, signals):
    out = tmp_path / "run"
    p = _start(out)
    try:
        for sig in signals:
            p.send_signal(sig)
            time.sleep(0.02)
        _, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and "Traceback" not in stderr, stderr
    m = re.search(r"interrupted at step (\d+) of 100000: checkpoint saved to (\S+)", stderr)
    assert m, stderr
    assert ckpt.load_checkpoint(out).step == int(m.group(1)) > 0  # the interval since the start is kept
    # the signals after the first are counted while the save is under way; one that arrives after
    # it (a fast save) is ignored silently, and the exit status stays 130 either way
    ignored = re.search(r"\((\d+) further interrupts? ignored while saving\)", stderr)
    assert (int(ignored.group(1)) if ignored else 0) <= len(signals) - 1, stderr
    r = qed("train", "--resume", out, "--steps", int(m.group(1)) + 2)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("process_exits", [True, False])
def test_stop_request_counts_further_signals_and_then_ignores_or_restores(monkeypatch, process_exits):
    from qed import interrupt

    monkeypatch.setattr(interrupt, "_IGNORE_AFTER_STOP", process_exits)
    before, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with interrupt.StopRequest() as stop:
        for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            signal.raise_signal(sig)
        assert stop.requested and stop.signal_name == "SIGINT" and stop.extra == 2
    try:
        # `qed train` exits after the save: a late Ctrl-C must not kill it with SIGINT (status -2)
        assert signal.getsignal(signal.SIGINT) == (signal.SIG_IGN if process_exits else before)
        assert signal.getsignal(signal.SIGTERM) == (signal.SIG_IGN if process_exits else before_term)
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, before_term)


def test_no_stop_restores_the_handlers(monkeypatch):
    from qed import interrupt

    monkeypatch.setattr(interrupt, "_IGNORE_AFTER_STOP", True)
    before = signal.getsignal(signal.SIGINT)
    with interrupt.StopRequest() as stop:
        pass
    assert not stop.requested and signal.getsignal(signal.SIGINT) == before


# --------------------------------------------------------------------------- the memory estimate
def test_memory_estimate_refuses_only_what_cannot_fit():
    from qed.config import GPTConfig
    from qed.memory import MemoryEstimateError, check_fits, estimate

    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=48, block_size=11, vocab_size=10)
    args = dict(batch_size=64, seq_len=11, itemsize=4, backend="numpy")
    est = check_fits(cfg, available=1 << 30, **args)  # the default run: fits in 1 GiB
    assert est["params"] == 57_648 and est["parameter state"] == 57_648 * 4 * 5
    with pytest.raises(MemoryEstimateError, match=r"needs an estimated .* has 1 KiB available"):
        check_fits(cfg, available=1024, **args)
    huge = GPTConfig(n_layer=2, n_head=4, n_embd=2**40, block_size=11, vocab_size=10)
    assert estimate(huge, **args)["params"] > 2**80  # Python integers: no overflow
    bigger = estimate(cfg, **dict(args, batch_size=128))
    assert bigger["activations"] == 2 * estimate(cfg, **args)["activations"]

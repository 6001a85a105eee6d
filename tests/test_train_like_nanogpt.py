"""Training as nanoGPT users do: --grad-accum, --lr-decay-steps, --config FILE.toml (and a run's
config.json back), ms/iter and model FLOP/s (MFU against --peak-flops) in the log line."""

import json
import math

import numpy as np
import pytest

from qed.errors import QedError
from qed.parallel import micro_batches
from qed.train import (
    Trainer,
    TrainSettings,
    cosine_lr,
    flops_per_token,
    make_runner,
    read_metrics,
    speed_text,
)
from tests.cli_helpers import SORT_TINY, assert_one_line_error, qed
from tests.train_helpers import TASK, tiny_config
from tests.train_helpers import settings as shared_settings

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def settings(**kw):
    """The shared tiny settings, shorter, with thread batch slices."""
    return shared_settings(**{"steps": 4, "warmup": 1, "numpy_parallel": "threads", **kw})


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


# --------------------------------------------------------------------------- --grad-accum
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_grad_accum_equals_one_larger_batch(backend):
    """N=2 micro-batches of b rows against one batch of 2b rows, the same tokens, float64: the
    same losses and weights to 1e-12, step after step (with clipping active). Some targets are
    -1, so the two micro-batches score different numbers of tokens: each is weighted by its
    share of the batch's scored tokens, which is what makes the update the big batch's."""
    s = settings(grad_clip=0.5, backend=backend)
    one = make_runner(tiny_config(), backend, "float64", seed=5, settings=s)
    acc = make_runner(tiny_config(), backend, "float64", seed=5, settings=s)
    rng = np.random.default_rng(0)
    for step in range(3):
        x, y = TASK.batch("train", 8, rng)
        y = y.copy()
        y[:3, :] = -1 if step == 0 else y[:3, :]  # first micro-batch scores fewer tokens
        lr = 1e-2 * (step + 1)
        l1 = one.step(x, y, lr, 0.5)
        l2 = acc.step(x, y, lr, 0.5, accum=2)
        assert abs(l1 - l2) < 1e-12, (step, l1, l2)
    diff = _max_diff(one.params(), acc.params())
    assert diff < 1e-12, diff
    moved = _max_diff(one.params(), make_runner(tiny_config(), backend, "float64", seed=5).params())
    assert moved > 1e-3  # the weights did change: the comparison is not of two untouched models
    one.close(), acc.close()


def test_micro_batches_weights():
    x = np.zeros((5, 3), dtype=np.int64)
    y = np.array([[-1, 1, 2], [0, 0, -1], [1, 1, 1], [-1, -1, 2], [2, 2, 2]])
    parts = micro_batches(x, y, 2)
    assert [len(p[0]) for p in parts] == [2, 3]
    assert [p[2] for p in parts] == [4 / 11, 7 / 11]  # shares of the scored tokens, not 1/2 each
    assert micro_batches(x, y, 1)[0][2] == 1.0
    with pytest.raises(QedError, match="cannot be cut into 6 micro-batches"):
        micro_batches(x, y, 6)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_trainer_grad_accum_trains_as_the_larger_batch(tmp_path, backend):
    """`--grad-accum 2 --batch-size 4` draws the rows of `--batch-size 8` and takes the same steps:
    the losses, the logged learning rates and the weights agree to 1e-12 (float64)."""
    a = Trainer.new(
        tiny_config(), settings(batch_size=8, backend=backend), TASK, out=str(tmp_path / "a"), progress=False
    )
    b = Trainer.new(
        tiny_config(),
        settings(batch_size=4, grad_accum=2, backend=backend),
        TASK,
        out=str(tmp_path / "b"),
        progress=False,
    )
    assert a.run() == 0 and b.run() == 0
    assert sorted(a.losses) == sorted(b.losses) == [1, 2, 3, 4]
    for k in a.losses:
        assert abs(a.losses[k] - b.losses[k]) < 1e-12, (k, a.losses[k], b.losses[k])
    assert _max_diff(a.runner.params(), b.runner.params()) < 1e-12
    ra, rb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["lr"] for r in ra] == [r["lr"] for r in rb]
    assert all(abs(p["val_loss"] - q["val_loss"]) < 1e-12 for p, q in zip(ra, rb))
    # a micro-batch is not the step's batch: batch 4 alone trains differently
    c = Trainer.new(
        tiny_config(), settings(batch_size=4, backend=backend), TASK, out=str(tmp_path / "c"), progress=False
    )
    assert c.run() == 0
    assert abs(c.losses[4] - a.losses[4]) > 1e-6


def test_grad_accum_is_validated():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(QedError, match="--grad-accum"):
            settings(grad_accum=bad).validate()


# --------------------------------------------------------------------------- --lr-decay-steps
def test_lr_decay_steps_ends_the_cosine():
    s = settings(steps=100, warmup=10, lr=1e-3, min_lr=1e-4, lr_decay_steps=50)
    assert cosine_lr(9, s) == pytest.approx(1e-3 * 10 / 11)  # the warmup is unchanged
    mid = 30  # halfway from the warmup's end (10) to the decay's (50): the cosine's midpoint
    assert cosine_lr(mid, s) == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4))
    assert cosine_lr(49, s) > 1e-4
    assert [cosine_lr(k, s) for k in (50, 75, 99)] == [1e-4, 1e-4, 1e-4]  # min lr after it
    default = settings(steps=100, warmup=10, lr=1e-3, min_lr=1e-4)  # None: the decay ends at --steps
    same = settings(steps=100, warmup=10, lr=1e-3, min_lr=1e-4, lr_decay_steps=100)
    assert [cosine_lr(k, default) for k in range(100)] == [cosine_lr(k, same) for k in range(100)]
    assert cosine_lr(75, default) > 1e-4


def test_lr_decay_steps_is_validated():
    with pytest.raises(QedError, match=r"--lr-decay-steps \(5\) must exceed --warmup \(10\)"):
        settings(warmup=10, lr_decay_steps=5).validate()
    for bad in (0, -3, 2.5, "7"):
        with pytest.raises(QedError, match="--lr-decay-steps"):
            settings(lr_decay_steps=bad).validate()


def test_a_checkpoint_from_before_the_new_settings_reads_as_before():
    d = settings().to_dict()
    del d["grad_accum"], d["lr_decay_steps"]
    s = TrainSettings.from_dict(d)
    assert (s.grad_accum, s.lr_decay_steps) == (1, None)
    with pytest.raises(QedError, match="unknown key"):
        TrainSettings.from_dict(dict(settings().to_dict(), grad_acum=2))


# --------------------------------------------------------------------------- resume
class Interrupt:
    def __init__(self, at):
        self.at = at

    def __call__(self, step, loss):
        if step == self.at:
            raise KeyboardInterrupt


def test_resume_keeps_grad_accum_and_lr_decay_steps(tmp_path):
    s = dict(steps=6, batch_size=4, grad_accum=2, lr_decay_steps=4)
    a = Trainer.new(tiny_config(), settings(**s), TASK, out=str(tmp_path / "a"), progress=False)
    assert a.run() == 0
    b = Trainer.new(tiny_config(), settings(**s), TASK, out=str(tmp_path / "b"), progress=False, on_step=Interrupt(3))
    assert b.run() == 130
    c = Trainer.resume(tmp_path / "b", progress=False)
    assert (c.settings.grad_accum, c.settings.lr_decay_steps) == (2, 4)
    assert c.run() == 0
    for step in range(4, 7):
        assert c.losses[step] == a.losses[step]  # bit for bit
    assert [r["lr"] for r in read_metrics(tmp_path / "b")] == [r["lr"] for r in read_metrics(tmp_path / "a")]
    assert read_metrics(tmp_path / "b")[-1]["lr"] == 1e-3  # past step 4: the min lr, though steps is 6
    # extended with --steps: the decay still ends at step 4
    d = Trainer.resume(tmp_path / "b", steps=8, progress=False)
    assert d.settings.lr_decay_steps == 4 and cosine_lr(6, d.settings) == 1e-3


def test_resume_refuses_a_different_grad_accum_or_decay(tmp_path):
    out = tmp_path / "r"
    r = qed("train", *SORT_TINY, "--steps", 2, "--eval-every", 2, "--warmup", 1, "--grad-accum", 2, "--out", out)
    assert r.returncode == 0, r.stderr
    for flag, value in (("--grad-accum", 3), ("--lr-decay-steps", 5)):
        r = qed("train", "--resume", out, "--steps", 4, flag, value)
        assert_one_line_error(r, flag, "--resume")
    # given by a config file: the same refusal, naming the file and its key
    cfg = tmp_path / "c.toml"
    cfg.write_text("grad-accum = 2\n")
    r = qed("train", "--config", cfg, "--resume", out, "--steps", 4)
    assert_one_line_error(r, "--grad-accum", "c.toml", "'grad-accum'", "--resume")


# --------------------------------------------------------------------------- --config
def _described(run) -> dict:
    d = json.loads((run / "config.json").read_text())
    return {k: d[k] for k in ("config", "train", "task")}


def test_config_toml_is_the_flags_and_config_json_comes_back(tmp_path):
    flags = [*SORT_TINY, "--steps", 2, "--eval-every", 2, "--warmup", 1, "--grad-accum", 2, "--lr-decay-steps", 2]
    flags += ["--betas", 0.9, 0.99, "--no-bias", "--dtype", "float64", "--lr", 0.02]
    r = qed("train", *flags, "--out", tmp_path / "flags")
    assert r.returncode == 0, r.stderr
    toml = tmp_path / "run.toml"
    toml.write_text(
        "n_layer = 1\nn-head = 2\nn_embd = 16\nbatch_size = 16\nsort_digits = 3\nno_progress = true\n"
        "steps = 2\neval_every = 2\nwarmup = 1\ngrad_accum = 2\nlr_decay_steps = 2\n"
        'betas = [0.9, 0.99]\nno_bias = true\ndtype = "float64"\nlr = 0.5\n'
    )
    r = qed("train", "--config", toml, "--lr", 0.02, "--out", tmp_path / "toml")  # the flag wins
    assert r.returncode == 0, r.stderr
    assert _described(tmp_path / "toml") == _described(tmp_path / "flags")
    # the run's own config.json, accepted back: the same run again, the same losses
    r = qed("train", "--config", tmp_path / "flags" / "config.json", "--out", tmp_path / "again", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert _described(tmp_path / "again") == _described(tmp_path / "flags")
    strip = [
        {k: v for k, v in rec.items() if k not in ("tokens_per_s", "elapsed_s")}
        for rec in read_metrics(tmp_path / "flags")
    ]
    again = [
        {k: v for k, v in rec.items() if k not in ("tokens_per_s", "elapsed_s")}
        for rec in read_metrics(tmp_path / "again")
    ]
    assert again == strip


@pytest.mark.parametrize(
    "text,fragments",
    [
        ("batchsize = 8\n", ["'batchsize'", "unknown key", "batch_size"]),
        ('batch_size = "8"\n', ["'batch_size'", "expected an integer"]),
        ("steps = -1\n", ["'steps'", "> 0"]),
        ("lr = inf\n", ["'lr'", "finite"]),
        ('dtype = "float16"\n', ["'dtype'", "float16"]),
        ("no_bias = 1\n", ["'no_bias'", "true or false"]),
        ("betas = [0.9]\n", ["'betas'", "2 values"]),
        ("n_head = 3\nn_embd = 16\n", ["'n_head'", "divisible"]),
        ("grad_accum = 0\n", ["'grad_accum'", "positive integer"]),
        ('config = "other.toml"\n', ["'config'"]),
        ("steps = \n", ["not valid TOML", "line 1"]),
        ("batch_size = 8\nbatch-size = 8\n", ["given twice"]),
    ],
)
def test_config_file_errors_are_one_line_naming_the_key(tmp_path, text, fragments):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    r = qed("train", "--config", cfg, "--out", tmp_path / "never", "--no-progress")
    assert_one_line_error(r, "bad.toml", *fragments)
    assert not (tmp_path / "never").exists()


def test_config_json_with_changed_settings_is_refused(tmp_path):
    """A run description's keys are checked too (no eval: a number given as a string is refused)."""
    from qed.cli import build_parser
    from qed.train_config import load

    parser = build_parser().train_parser
    good = {
        "about": "…",
        "config": tiny_config().to_dict(),
        "train": TrainSettings(steps=4, batch_size=8).to_dict(),  # as `qed train` makes them
        "task": TASK.info(),
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(good))
    cf = load(str(p), parser)
    assert cf.values["sort_length"] == 4 and cf.values["grad_accum"] == 1 and "lr_decay_steps" not in cf.values
    for where, key, value, msg in (
        ("train", "lr", "0.01", "expected a number"),
        ("train", "eps", 1e-6, "has no flag"),
        ("config", "vocab_size", 7, "not the sort task's"),
        ("task", "split_seed", 1, "splits the sort task"),
        ("train", "lr_schedule", "cos", "unknown training setting"),
    ):
        bad = json.loads(json.dumps(good))
        bad[where][key] = value
        p.write_text(json.dumps(bad))
        with pytest.raises(QedError, match=msg) as e:
            load(str(p), parser)
        assert f"key '{where}.{key}'" in str(e.value)


# --------------------------------------------------------------------------- ms/iter and MFU
def test_flops_per_token_is_nanogpts_estimate():
    cfg = tiny_config(n_layer=2, n_embd=16, block_size=8)
    runner = make_runner(cfg, "numpy", "float32", seed=0)
    shapes = runner.param_shapes()
    n = sum(math.prod(s) for k, s in shapes.items() if k != "wpe.weight")  # nanoGPT's non-embedding count
    assert flops_per_token(cfg, shapes, 8) == 6 * n + 12 * 2 * 8 * 16
    assert n < sum(math.prod(s) for s in shapes.values())  # the position table was left out
    text = speed_text(20.0, 3.2e9, None)
    assert "20.0 ms/iter" in text and "3.2 GFLOP/s" in text and "MFU" not in text
    assert "MFU 3.20% of 100 GFLOP/s" in speed_text(20.0, 3.2e9, 1e11)
    runner.close()


def test_log_line_has_ms_per_iter_and_mfu(tmp_path):
    r = qed("train", *SORT_TINY, "--steps", 2, "--eval-every", 2, "--peak-flops", 1e12, "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("step "))
    assert "ms/iter" in line and "FLOP/s" in line and "MFU " in line and "% of 1.0 TFLOP/s" in line, line
    assert_one_line_error(qed("train", "--peak-flops", 0), "--peak-flops")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_grad_accum_on_two_ranks_trains_as_one_process(tmp_path, backend):
    """2 ranks (gloo), each taking its rows of every micro-batch, the gradients summed once after
    the last (DDP's no_sync before it, on the torch backend): the losses of one process, to 1e-12."""
    opts = [*SORT_TINY, "--batch-size", 8, "--grad-accum", 2, "--steps", 4, "--warmup", 1, "--eval-every", 2]
    opts += ["--dtype", "float64", "--backend", backend]
    r = qed("train", *opts, "--out", tmp_path / "one")
    assert r.returncode == 0, r.stderr
    r = qed("train", *opts, "--nproc", 2, "--oversubscribe", "--out", tmp_path / "two")
    assert r.returncode == 0, r.stderr
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [r["step"] for r in one] == [r["step"] for r in two] == [2, 4]
    for a, b in zip(one, two):
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-12 and abs(a["val_loss"] - b["val_loss"]) < 1e-12

"""Training: a short run learns, resume is bit-exact, Ctrl-C saves, numpy checkpoints load in torch."""

import json

import numpy as np
import pytest

from qed.config import GPTConfig
from qed.data import SortTask, load_text
from qed.errors import QedError
from qed.train import Trainer, generate, load_for_inference, make_runner, read_metrics
from tests.train_helpers import TASK, settings, tiny_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


class Interrupt:
    """on_step callback: a Ctrl-C arriving after step k (as the SIGINT handler raises it)."""

    def __init__(self, at):
        self.at = at

    def __call__(self, step, loss):
        if step == self.at:
            raise KeyboardInterrupt


def _strip(records):
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in records]


@pytest.mark.parametrize(
    "backend,interrupt_at,dropout,dtype",
    [
        ("numpy", 3, 0.0, "float64"),
        ("numpy", 4, 0.2, "float64"),
        ("torch", 3, 0.0, "float64"),
        ("torch", 3, 0.2, "float64"),
        ("torch", 4, 0.2, "bfloat16"),
    ],
)
def test_resume_gives_identical_losses(tmp_path, backend, interrupt_at, dropout, dtype):
    """With dropout too: step k draws its masks from (seed, k, row, site) alone (qed/dropout.py);
    and in mixed precision, whose float32 weights and AdamW state are what the checkpoint keeps."""
    s = settings(backend=backend, dtype=dtype)
    a = Trainer.new(tiny_config(dropout=dropout), s, TASK, out=str(tmp_path / "a"), progress=False)
    assert a.run() == 0
    assert sorted(a.losses) == [1, 2, 3, 4, 5, 6]

    b = Trainer.new(
        tiny_config(dropout=dropout),
        settings(backend=backend, dtype=dtype),
        TASK,
        out=str(tmp_path / "b"),
        progress=False,
        on_step=Interrupt(interrupt_at),
    )
    assert b.run() == 130  # Ctrl-C: checkpoint saved, exit status 130
    assert sorted(b.losses) == list(range(1, interrupt_at + 1))
    c = Trainer.resume(tmp_path / "b", progress=False)
    assert c.step == interrupt_at
    assert c.run() == 0
    assert sorted(c.losses) == list(range(interrupt_at + 1, 7))

    for step in range(1, 7):
        got = b.losses[step] if step <= interrupt_at else c.losses[step]
        assert got == a.losses[step], (step, got, a.losses[step])  # exactly equal
    # the metrics files agree too (train loss means, val loss, accuracy, lr), speeds aside
    assert _strip(read_metrics(tmp_path / "a")) == _strip(read_metrics(tmp_path / "b"))
    pa, pc = a.runner.params(), c.runner.params()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pc[k])


def test_resume_can_extend_a_finished_run(tmp_path):
    t = Trainer.new(tiny_config(), settings(steps=4), TASK, out=str(tmp_path / "r"), progress=False)
    assert t.run() == 0
    with pytest.raises(QedError, match=r"complete \(step 4 of 4\); pass --steps N with N > 4"):
        Trainer.resume(tmp_path / "r", progress=False)  # nothing left to do: said, not exit 0
    for below in (2, 4):
        with pytest.raises(QedError, match=f"--steps {below}: the run is already at step 4"):
            Trainer.resume(tmp_path / "r", steps=below, progress=False)
    more = Trainer.resume(tmp_path / "r", steps=8, progress=False)
    assert more.run() == 0
    assert sorted(more.losses) == [5, 6, 7, 8]
    assert read_metrics(tmp_path / "r")[-1]["step"] == 8


def test_short_run_learns_and_writes_everything(tmp_path):
    task = SortTask(length=3, num_digits=3)
    s = settings(steps=60, batch_size=32, lr=1e-2, warmup=5, eval_every=30, dtype="float32")
    t = Trainer.new(tiny_config(task, n_embd=32), s, task, out=str(tmp_path), progress=False)
    assert t.run() == 0
    recs = read_metrics(tmp_path)
    assert [r["step"] for r in recs] == [30, 60]
    for r in recs:
        assert {"step", "train_loss", "val_loss", "lr", "tokens_per_s", "accuracy"} <= set(r)
    assert recs[-1]["val_loss"] < np.log(3)  # better than guessing
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["task"]["kind"] == "sort" and cfg["config"]["n_embd"] == 32
    runner, c = load_for_inference(tmp_path)
    assert c.step == 60


def test_numpy_checkpoint_loads_in_torch_with_same_logits(tmp_path):
    cfg = tiny_config(n_layer=2, n_head=2, n_embd=16)
    t = Trainer.new(cfg, settings(steps=4, eval_every=4), TASK, out=str(tmp_path), progress=False)
    assert t.run() == 0
    np_runner, c = load_for_inference(tmp_path, backend="numpy")
    torch_runner, _ = load_for_inference(tmp_path, backend="torch")
    assert c.meta["train"]["backend"] == "numpy"
    idx = np.random.default_rng(0).integers(0, 3, size=(5, TASK.block_size))
    a, b = np_runner.logits(idx), torch_runner.logits(idx)
    assert a.dtype == b.dtype == np.float64
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # the trained weights are what the torch model now holds
    for k, v in c.params.items():
        np.testing.assert_array_equal(torch_runner.params()[k], v)
    # and greedy generation agrees
    prompts = TASK.examples("val")[:8]
    np.testing.assert_array_equal(
        generate(np_runner, prompts, 4, TASK.block_size, greedy=True),
        generate(torch_runner, prompts, 4, TASK.block_size, greedy=True),
    )


def test_checkpoint_of_other_model_is_refused(tmp_path):
    from qed.params import ParameterError

    t = Trainer.new(tiny_config(), settings(steps=2, eval_every=2), TASK, out=str(tmp_path), progress=False)
    t.run()
    other = make_runner(tiny_config(n_embd=32), "numpy", "float64", 0)
    with pytest.raises(ParameterError, match="checkpoint weights: do not fit .*wte.weight has shape"):
        other.load_params(load_for_inference(tmp_path)[1].params)
    other = make_runner(tiny_config(n_layer=2), "numpy", "float64", 0)
    with pytest.raises(ParameterError, match="missing h.1"):
        other.load_params(load_for_inference(tmp_path)[1].params)


def test_text_run(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("the quick brown fox jumps over the lazy dog. " * 30)
    task = load_text(str(f))
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=task.vocab_size)
    t = Trainer.new(
        cfg, settings(steps=4, eval_every=2, eval_batches=2), task, out=str(tmp_path / "run"), progress=False
    )
    assert t.run() == 0
    recs = read_metrics(tmp_path / "run")
    assert len(recs) == 2 and "accuracy" not in recs[-1]
    from qed.sample import evaluate_run, sample

    res = evaluate_run(str(tmp_path / "run"))
    assert res["val_loss"] == pytest.approx(recs[-1]["val_loss"])
    out = sample(str(tmp_path / "run"), prompt="the ", max_new_tokens=10, seed=1)
    assert len(out) == 1 and out[0].startswith("the ") and len(out[0]) == 14
    assert set(out[0]) <= set(task.vocab)


def test_generate_top_k_and_temperature():
    class Fixed:
        def logits(self, idx):
            out = np.zeros(idx.shape + (4,))
            out[..., 2] = 5.0
            out[..., 1] = 4.0
            return out

    idx = np.zeros((200, 1), dtype=np.int64)
    g = generate(Fixed(), idx, 1, 8, greedy=True)
    assert (g[:, 1] == 2).all()
    s = generate(Fixed(), idx, 1, 8, top_k=2, rng=np.random.default_rng(0))
    assert set(s[:, 1]) == {1, 2}  # only the two best tokens are ever drawn
    s = generate(Fixed(), idx, 1, 8, temperature=1e-3, rng=np.random.default_rng(0))
    assert (s[:, 1] == 2).all()


@pytest.mark.slow
def test_default_train_reaches_99_percent(tmp_path):
    """The demo: `qed train` with its defaults, held-out exact-match accuracy >= 99%."""
    import subprocess
    import sys
    import time

    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "qed", "train", "--out", str(tmp_path / "run"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    last = read_metrics(tmp_path / "run")[-1]
    print(f"default qed train: {wall:.1f} s, accuracy {last['accuracy']:.4f} ({last['correct']}/{last['held_out']})")
    assert last["accuracy"] >= 0.99

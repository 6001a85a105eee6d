"""`qed.load(run_dir)`: a trained run's model from Python, as `qed sample` and `qed eval` see it."""

from __future__ import annotations

import numpy as np
import pytest

import qed
from qed.train import Trainer, generate, load_for_inference
from tests.train_helpers import TASK, settings, tiny_config


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert Trainer.new(tiny_config(), settings(steps=4, eval_every=2), TASK, out=str(out), progress=False).run() == 0
    return out


def test_load_gives_the_runs_logits_loss_and_generation(run_dir):
    model = qed.load(run_dir)
    runner, c = load_for_inference(run_dir)
    assert model.step == c.step and model.backend == "numpy" and "step 4" in repr(model)
    ids = TASK.examples("val")[:3]
    x, y = TASK.sequences(ids)  # y: −1 on the input half (not scored)
    np.testing.assert_array_equal(model.logits(x), runner.logits(x))
    assert model.loss(x, y) == runner.loss(x, y)
    np.testing.assert_array_equal(
        model.generate(ids, 4, greedy=True), generate(runner, ids, 4, TASK.block_size, greedy=True)
    )


def test_load_on_the_other_backend_agrees(run_dir):
    a, b = qed.load(run_dir), qed.load(run_dir, backend="torch")
    ids = TASK.examples("val")[:2]
    np.testing.assert_allclose(a.logits(ids), b.logits(ids), rtol=1e-10, atol=1e-12)


def test_encode_decode_and_one_row(run_dir):
    model = qed.load(run_dir)
    ids = model.encode("2 0 1 1")
    assert ids.tolist() == [2, 0, 1, 1] and model.decode(ids) == "2011"
    assert model.logits(ids).shape == (1, 4, TASK.vocab_size)  # (T,) is one row


def test_bad_input_is_refused_with_a_reason(run_dir, tmp_path):
    model = qed.load(run_dir)
    with pytest.raises(ValueError, match="integer token ids"):
        model.logits(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0"):
        model.generate([1, 2], -1)
    with pytest.raises(qed.errors.QedError):
        qed.load(tmp_path / "nothing-here")

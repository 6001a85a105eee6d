"""Dropout in training (`qed train --dropout p`): the printed program's dropout sites, their masks
drawn from (seed, step, row, site) alone, off in evaluation and sampling."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from qed.config import ConfigError, GPTConfig
from qed.dropout import DropoutMasks, Noise
from qed.errors import CompileError
from qed.runner import build_runner

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

HYPER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def _config(**kw):
    d = dict(n_layer=2, n_head=2, n_embd=8, block_size=6, vocab_size=11)
    d.update(kw)
    return GPTConfig(**d)


def _batch(B=6, T=6, V=11, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, V, (B, T))
    y[1, 2] = -1  # not scored
    return rng.integers(0, V, (B, T)), y


def _runner(config, backend="numpy", **kw):
    return build_runner(config, backend, "float64", seed=5, optimizer=HYPER, **kw)


def test_a_mask_is_a_function_of_seed_step_row_and_site():
    masks = DropoutMasks(0.3)
    whole = masks.keep_numpy("h.0.att_d", Noise(1, 7), (5, 4, 8), np.float32)
    assert set(np.unique(whole)) == {0.0, 1.0} and whole.dtype == np.float32
    # the rows from 2 on, drawn alone, are the same rows: a slice, micro-batch or rank of a batch
    part = masks.keep_numpy("h.0.att_d", Noise(1, 7, row=2), (3, 4, 8), np.float32)
    np.testing.assert_array_equal(part, whole[2:])
    np.testing.assert_array_equal(masks.keep_numpy("h.0.att_d", Noise(1, 7), (5, 4, 8), np.float32), whole)
    others = (
        ("h.1.att_d", Noise(1, 7)),
        ("h.0.m_d", Noise(1, 7)),
        ("h.0.att_d", Noise(1, 8)),
        ("h.0.att_d", Noise(2, 7)),
    )
    for other in others:
        assert not np.array_equal(masks.keep_numpy(other[0], other[1], (5, 4, 8), np.float32), whole), other
    # torch gets the same mask, in the value's dtype
    t = masks.keep("h.0.att_d", Noise(1, 7), (5, 4, 8), torch.zeros(1, dtype=torch.float64))
    assert t.dtype == torch.float64
    np.testing.assert_array_equal(t.numpy(), whole)


def test_the_kept_fraction_is_one_minus_p():
    for p in (0.1, 0.5, 0.9):
        m = DropoutMasks(p).keep_numpy("x", Noise(0, 0), (64, 32, 32), np.float64)
        kept, n = m.mean(), m.size
        assert abs(kept - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n), (p, kept)
    assert DropoutMasks(0.0).keep_numpy("x", Noise(0, 0), (3, 4), np.float64).all()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_dropout_is_off_in_evaluation_and_sampling(backend):
    """The same weights with and without dropout: the same loss and logits without noise."""
    x, y = _batch()
    plain, dropped = _runner(_config(), backend), _runner(_config(dropout=0.5), backend)
    assert plain.loss(x, y) == dropped.loss(x, y)
    np.testing.assert_array_equal(plain.logits(x), dropped.logits(x))


def test_a_training_step_drops_and_every_cut_of_the_batch_draws_the_same_masks():
    """A step with noise differs from one without; the masks depend on the rows, not on how the
    batch is cut (one slice, two threads, worker processes, torch, two micro-batches)."""
    x, y = _batch()
    noise = Noise(5, 3)
    config = _config(dropout=0.3)
    plain = _runner(_config(), threads=1)
    p_loss = plain.step(x, y, noise=noise)
    results = {}
    for name, runner, accum in (
        ("numpy, 1 slice", _runner(config, threads=1), 1),
        ("numpy, 2 threads", _runner(config, threads=2, parallel="threads"), 1),
        ("numpy, 2 processes", _runner(config, threads=2, parallel="processes"), 1),
        ("torch", _runner(config, "torch"), 1),
        ("numpy, 2 micro-batches", _runner(config, threads=1), 2),
        ("torch, 3 micro-batches", _runner(config, "torch"), 3),
    ):
        try:
            loss = runner.step(x, y, noise=noise, accum=accum)
            results[name] = (loss, runner.params())
        finally:
            runner.close()
    ref_loss, ref_params = results.pop("numpy, 1 slice")
    assert abs(ref_loss - p_loss) > 1e-3  # dropout changed the step
    for name, (loss, params) in results.items():
        assert abs(loss - ref_loss) <= 1e-12 * abs(ref_loss), name
        for k in ref_params:
            np.testing.assert_allclose(params[k], ref_params[k], rtol=0, atol=1e-12, err_msg=f"{name}: {k}")


def test_config_refuses_a_bad_drop_rate():
    for bad in (1.0, 1.5, -0.1, float("nan"), True, "0.2"):
        with pytest.raises(ConfigError, match="dropout"):
            _config(dropout=bad).validate()
    with pytest.raises(CompileError, match="dropout"):
        build_runner(_config(dropout=0.1), "torch", "float32", compile=True)


@pytest.mark.parametrize("flag", ["1", "-0.5", "nan", "x"])
def test_the_command_line_refuses_a_bad_drop_rate(tmp_path, flag):
    r = subprocess.run(
        [sys.executable, "-m", "qed", "train", "--dropout", flag, "--out", str(tmp_path / "run"), "--steps", "1"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "--dropout" in r.stderr and len(r.stderr.strip().splitlines()) == 1

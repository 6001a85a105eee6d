"""Checkpoints: round trip, atomic `latest`, refusal of corrupted and foreign files, no pickle,
resume equality, and numpy -> torch loading."""

import json
import os

import numpy as np
import pytest

from qed import checkpoint as ckpt
from qed.errors import CheckpointError


def _params(rng, dtype=np.float64):
    return {"wte.weight": rng.normal(size=(5, 4)).astype(dtype), "h.0.ln_1.weight": np.ones(4, dtype)}


def _opt(params):
    return {
        "step": 7,
        "lr": 1e-3,
        "betas": [0.9, 0.95],
        "m": {k: v * 0.5 for k, v in params.items()},
        "v": {k: v * v for k, v in params.items()},
    }


def _meta():
    return {
        "config": {"n_layer": 1},
        "task": {"kind": "sort", "length": 3, "num_digits": 3},
        "rng": np.random.default_rng(3).bit_generator.state,
        "pending_losses": [0.1, 0.25],
    }


def _save(run, step=3, keep=2, rng=None):
    rng = rng or np.random.default_rng(step)
    p = _params(rng)
    return p, ckpt.save_checkpoint(run, step=step, params=p, optimizer=_opt(p), meta=_meta(), keep=keep)


# --------------------------------------------------------------------------- file format
def test_round_trip(tmp_path):
    p, path = _save(tmp_path)
    assert path.name == "step-00000003"
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == path.name
    c = ckpt.load_checkpoint(tmp_path)
    assert c.step == 3 and c.path == path
    for k in p:
        np.testing.assert_array_equal(c.params[k], p[k])
        assert c.params[k].dtype == p[k].dtype
    o = _opt(p)
    assert c.optimizer["step"] == 7 and c.optimizer["betas"] == [0.9, 0.95]
    for k in p:
        np.testing.assert_array_equal(c.optimizer["m"][k], o["m"][k])
        np.testing.assert_array_equal(c.optimizer["v"][k], o["v"][k])
    assert c.meta["pending_losses"] == [0.1, 0.25]
    # the RNG state survives JSON exactly
    g = np.random.default_rng()
    g.bit_generator.state = c.meta["rng"]
    assert g.random() == np.random.default_rng(3).random()
    # a checkpoint directory can be named directly
    assert ckpt.load_checkpoint(path).step == 3
    # the files are safetensors and JSON, nothing else
    assert sorted(os.listdir(path)) == ["model.safetensors", "optimizer.safetensors", "state.json"]


def test_latest_moves_and_old_ones_are_pruned(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step=step, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["latest", "step-00000003", "step-00000004"]
    assert ckpt.load_checkpoint(tmp_path).step == 4
    _save(tmp_path, step=4)  # the same step again gets its own directory
    assert ckpt.resolve(tmp_path).name == "step-00000004-1"


def test_crash_leaves_previous_latest(tmp_path, monkeypatch):
    _save(tmp_path, step=1)

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    real_replace = os.replace
    monkeypatch.setattr(ckpt.os, "replace", boom)
    with pytest.raises(OSError):
        _save(tmp_path, step=2)
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    assert ckpt.load_checkpoint(tmp_path).step == 1
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []


def test_half_written_directory_is_never_latest(tmp_path):
    _save(tmp_path, step=1)
    # a crash after the new directory was renamed into place but before `latest` moved
    partial = tmp_path / "checkpoints" / "step-00000002"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)
    assert ckpt.load_checkpoint(tmp_path).step == 1


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "damage",
    ["truncate-model", "garbage-model", "flip-byte", "truncate-optim", "garbage-state", "missing-model", "empty-state"],
)
def test_corrupted_checkpoint_is_refused(tmp_path, damage):
    _, path = _save(tmp_path)
    model, optim, state = path / "model.safetensors", path / "optimizer.safetensors", path / "state.json"
    if damage == "truncate-model":
        model.write_bytes(model.read_bytes()[:50])
    elif damage == "garbage-model":
        model.write_bytes(os.urandom(300))
    elif damage == "flip-byte":
        b = bytearray(model.read_bytes())
        b[-3] ^= 0xFF
        model.write_bytes(bytes(b))
    elif damage == "truncate-optim":
        optim.write_bytes(optim.read_bytes()[:-7])
    elif damage == "garbage-state":
        state.write_bytes(b"\x80\x04\x95garbage")
    elif damage == "missing-model":
        model.unlink()
    elif damage == "empty-state":
        state.write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(tmp_path)
    assert "\n" not in str(e.value)


def test_pickle_is_never_loaded(tmp_path):
    import pickle

    _, path = _save(tmp_path)

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    (path / "model.safetensors").write_bytes(pickle.dumps({"wte.weight": Evil()}))
    with pytest.raises(CheckpointError):
        ckpt.load_checkpoint(tmp_path)
    assert not (tmp_path / "pwned").exists()


def _rewrite_state(path, resign=True, **changes):
    """Edit state.json; `resign`: recompute its checksum too (a forger who knows the scheme), so
    that the checks behind the checksum are what is tested."""
    s = json.loads((path / "state.json").read_text())
    s.update(changes)
    if resign:
        s["checksum"] = ckpt.state_checksum(s)
    (path / "state.json").write_text(json.dumps(s))


@pytest.mark.parametrize(
    "edit",
    [
        {"config": {"n_layer": 2}},
        {"task": {"kind": "sort", "length": 4}},
        {"step": 4},
        {"pending_losses": [0.1]},
        {"extra": 1},
    ],
)
def test_any_edit_of_the_state_is_refused(tmp_path, edit):
    """The checksum covers config, task (vocabulary), step, options: an edit is refused, not taken."""
    _, path = _save(tmp_path)
    _rewrite_state(path, resign=False, **edit)
    with pytest.raises(CheckpointError, match="changed after it was written"):
        ckpt.load_checkpoint(tmp_path)
    s = json.loads((path / "state.json").read_text())
    del s["checksum"]
    (path / "state.json").write_text(json.dumps(s))
    with pytest.raises(CheckpointError, match="no checksum"):
        ckpt.load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "weights, message",
    [
        ({"w": np.ones(3, np.float16)}, "dtype float16"),
        ({"w": np.arange(3)}, "dtype int64"),
        ({"w": np.array([1.0, np.nan, 2.0])}, "1 non-finite"),
        ({"w": np.array([np.inf, -np.inf])}, "2 non-finite"),
        ({"w": np.ones(2, np.float32), "b": np.ones(2, np.float64)}, "mixed dtypes"),
    ],
)
def test_weights_of_a_wrong_dtype_or_not_finite_are_refused(tmp_path, weights, message):
    """Weights swapped in by hand, with every digest and the checksum made to match."""
    import hashlib

    from safetensors.numpy import save

    path = ckpt.save_checkpoint(
        tmp_path, step=1, params={k: np.zeros(v.shape) for k, v in weights.items()}, optimizer=None, meta=_meta()
    )
    data = save(weights)
    (path / "model.safetensors").write_bytes(data)
    s = json.loads((path / "state.json").read_text())
    _rewrite_state(
        path,
        sha256=dict(s["sha256"], **{"model.safetensors": hashlib.sha256(data).hexdigest()}),
        params={k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in weights.items()},
    )
    with pytest.raises(CheckpointError, match=message):
        ckpt.load_checkpoint(tmp_path)
    if "non-finite" in message:  # and saving such weights is refused in the first place
        with pytest.raises(CheckpointError, match="refusing to save step 2: parameter w holds non-finite"):
            ckpt.save_checkpoint(tmp_path, step=2, params=weights, optimizer=None, meta=_meta())


def test_non_finite_optimizer_state_is_refused(tmp_path):
    p = _params(np.random.default_rng(0))
    opt = _opt(p)
    opt["v"]["wte.weight"][0, 0] = np.inf
    ckpt.save_checkpoint(tmp_path, step=1, params=p, optimizer=opt, meta=_meta())
    assert ckpt.load_checkpoint(tmp_path, with_optimizer=False).step == 1  # the weights are fine
    with pytest.raises(CheckpointError, match="optimizer array v/wte.weight holds 1 non-finite"):
        ckpt.load_checkpoint(tmp_path)


def test_best_is_kept_beside_latest(tmp_path):
    rng = np.random.default_rng(0)
    p = _params(rng)
    for step, best in ((1, False), (2, True), (3, False), (4, False), (5, False)):
        ckpt.save_checkpoint(tmp_path, step=step, params=p, optimizer=None, meta=_meta(), keep=2, best=best)
    names = sorted(d.name for d in (tmp_path / "checkpoints").iterdir() if d.is_dir())
    assert names == ["step-00000002", "step-00000004", "step-00000005"]  # the newest 2 and the best
    assert ckpt.resolve(tmp_path).name == "step-00000005"
    assert ckpt.resolve(tmp_path, ckpt.BEST).name == "step-00000002"
    assert ckpt.load_checkpoint(tmp_path, which=ckpt.BEST).step == 2
    ckpt.save_checkpoint(tmp_path, step=6, params=p, optimizer=None, meta=_meta(), keep=2, best=True)
    names = sorted(d.name for d in (tmp_path / "checkpoints").iterdir() if d.is_dir())
    assert names == ["step-00000005", "step-00000006"]  # the old best is released


def test_no_best_yet(tmp_path):
    _save(tmp_path)
    with pytest.raises(CheckpointError, match="no best checkpoint yet"):
        ckpt.load_checkpoint(tmp_path, which=ckpt.BEST)


def test_foreign_format_or_version_is_refused(tmp_path):
    _, path = _save(tmp_path)
    _rewrite_state(path, format_version=99)
    with pytest.raises(CheckpointError, match="version 99"):
        ckpt.load_checkpoint(tmp_path)
    _rewrite_state(path, format_version=1)
    with pytest.raises(CheckpointError, match="version 1 .*no checksum"):
        ckpt.load_checkpoint(tmp_path)
    _rewrite_state(path, format_version=2, format="someone-else")
    with pytest.raises(CheckpointError, match="not a qed checkpoint"):
        ckpt.load_checkpoint(tmp_path)


def test_foreign_weights_are_refused(tmp_path):
    """A well-formed safetensors file with other names/shapes (checksum made to match)."""
    import hashlib

    from safetensors.numpy import save_file

    _, path = _save(tmp_path)
    save_file({"transformer.wte.weight": np.zeros((5, 4))}, str(path / "model.safetensors"))
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    s = json.loads((path / "state.json").read_text())
    _rewrite_state(path, sha256=dict(s["sha256"], **{"model.safetensors": digest}))
    with pytest.raises(CheckpointError, match="names do not match"):
        ckpt.load_checkpoint(tmp_path)
    # and a model refuses weights that do not fit it
    from qed.params import ParameterError, check_params

    with pytest.raises(ParameterError, match="missing wte.weight; unexpected transformer.wte.weight"):
        check_params({"transformer.wte.weight": np.zeros((5, 4))}, {"wte.weight": (5, 4)})
    with pytest.raises(ParameterError, match=r"wte.weight has shape \(5, 3\), the model needs \(5, 4\)"):
        check_params({"wte.weight": np.zeros((5, 3))}, {"wte.weight": (5, 4)})


def test_missing_run_dir_and_empty_run_dir(tmp_path):
    with pytest.raises(CheckpointError, match="no such run directory"):
        ckpt.load_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        ckpt.load_checkpoint(tmp_path)

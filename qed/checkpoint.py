"""Checkpoints: safetensors for arrays, JSON for everything else, no pickle anywhere.

A run directory holds

    checkpoints/
        step-00000300/          one complete checkpoint
            model.safetensors       the weights, by parameter name
            optimizer.safetensors   the optimizer's arrays (Adam m and v per parameter)
            state.json              format, version, step, model config, task (with its vocabulary),
                                    training options, optimizer layout, RNG state, the sha256 of
                                    both files, and `checksum`: the sha256 of all of the above
        latest                  a one-line text file naming the newest complete checkpoint
        best                    the same for the checkpoint with the lowest validation loss
                                (kept however old it is)

A checkpoint is written into a temporary directory beside the others, every file flushed and
fsynced, then renamed into place (os.replace), and only then is `latest` rewritten (temp file +
os.replace).  A crash at any moment leaves `latest` naming a whole checkpoint.

Loading verifies before anything is used: the format and version; `checksum` over state.json
(so an edited config, task, vocabulary or step is refused, not silently taken); the sha256 of
each file; every parameter's name, shape and dtype against state.json; float32 or float64
weights, one dtype for all; and finite values in the weights and the optimizer state (a run that
diverged is refused by name); the step, an integer >= 0 and the one the directory is named
after. Nothing is read or pruned through a symbolic link (`checkpoints/`, a checkpoint
directory, its files), and pruning removes only checkpoints whose state.json names the same run
(`run`) as the one being saved.  What the model itself needs (every config key, the run's
dtype, the shapes of its parameters) is checked by the trainer's loader (train.verified_run);
that a checkpoint belongs to its run directory (run.json), by run_dir.load.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CheckpointError

FORMAT = "qed-checkpoint"
FORMAT_VERSION = 2  # 2: state.json carries `checksum`; version 1 had none and is refused
MODEL_FILE = "model.safetensors"
OPTIM_FILE = "optimizer.safetensors"
STATE_FILE = "state.json"
LATEST = "latest"
BEST = "best"
POINTERS = (LATEST, BEST)
CKPT_DIR = "checkpoints"
SEP = "/"  # joins nested optimizer-state keys into flat safetensors names
_STEP_RE = re.compile(r"^step-(\d{8})(?:-(\d+))?$")


@dataclass
class Checkpoint:
    path: Path
    meta: dict
    params: dict[str, np.ndarray]
    optimizer: dict | None

    @property
    def step(self) -> int:
        return int(self.meta["step"])


# --------------------------------------------------------------------------- atomic writes
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _chmod_default(path, directory: bool = False) -> None:
    """mkstemp/mkdtemp create 0600/0700; give the final files the usual umask-based mode."""
    try:
        os.chmod(path, (0o777 if directory else 0o666) & ~_umask())
    except OSError:
        pass


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write a file so that readers see the old content or the new, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _chmod_default(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: str | os.PathLike, obj: object) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


# --------------------------------------------------------------------------- array dicts
def _flatten(tree, prefix: str = "") -> tuple[dict[str, np.ndarray], object]:
    """Split a nested dict into arrays (flat names) and a JSON skeleton naming them."""
    arrays: dict[str, np.ndarray] = {}
    if isinstance(tree, dict):
        skel = {}
        for k, v in tree.items():
            k = str(k)
            if SEP in k:
                raise CheckpointError(f"optimizer state key {k!r} contains {SEP!r}")
            sub_arrays, sub_skel = _flatten(v, f"{prefix}{k}{SEP}")
            arrays.update(sub_arrays)
            skel[k] = sub_skel
        return arrays, {"dict": skel}
    if isinstance(tree, (list, tuple)):
        skel = []
        for i, v in enumerate(tree):
            sub_arrays, sub_skel = _flatten(v, f"{prefix}{i}{SEP}")
            arrays.update(sub_arrays)
            skel.append(sub_skel)
        return arrays, {"list": skel}
    if hasattr(tree, "detach") and hasattr(tree, "cpu"):  # a torch tensor
        tree = tree.detach().cpu().numpy()
    if isinstance(tree, np.ndarray):
        name = prefix[:-1]
        arrays[name] = np.ascontiguousarray(tree)
        return arrays, {"array": name}
    if isinstance(tree, np.generic):
        tree = tree.item()
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return arrays, {"value": tree}
    raise CheckpointError(f"cannot store optimizer state of type {type(tree).__name__}")


def _unflatten(skel, arrays: dict[str, np.ndarray]):
    if not isinstance(skel, dict) or len(skel) != 1:
        raise CheckpointError("optimizer state layout is malformed")
    ((kind, body),) = skel.items()
    if kind == "dict":
        return {k: _unflatten(v, arrays) for k, v in body.items()}
    if kind == "list":
        return [_unflatten(v, arrays) for v in body]
    if kind == "array":
        if body not in arrays:
            raise CheckpointError(f"optimizer state lacks array {body!r}")
        return arrays[body]
    if kind == "value":
        return body
    raise CheckpointError(f"optimizer state layout has unknown node {kind!r}")


def _safetensors_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v) for k, v in arrays.items()})


def _read_safetensors(path: Path, what: str) -> tuple[dict[str, np.ndarray], str]:
    from safetensors.numpy import load

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing {what} file") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read {what} file: {e.strerror or e}") from None
    digest = hashlib.sha256(data).hexdigest()
    try:
        arrays = load(data)
    except Exception as e:  # SafetensorError, ValueError, ...: never anything that runs code
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: corrupted {what} file ({msg})") from None
    return {k: np.array(v) for k, v in arrays.items()}, digest


# --------------------------------------------------------------------------- the state's checksum
def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def state_checksum(state: dict) -> str:
    """sha256 over everything in state.json but the checksum itself (canonical JSON)."""
    return hashlib.sha256(_canonical({k: v for k, v in state.items() if k != "checksum"})).hexdigest()


# --------------------------------------------------------------------------- saving
def _checkpoint_dirs(ckpt_root: Path) -> list[Path]:
    """The checkpoint directories of a run, oldest first: real directories only (a symbolic
    link is never taken for one, so nothing here reaches outside the run)."""
    out = []
    if ckpt_root.is_dir():
        for p in ckpt_root.iterdir():
            m = _STEP_RE.match(p.name)
            if m and p.is_dir() and not p.is_symlink():
                out.append((int(m.group(1)), int(m.group(2) or 0), p))
    return [p for _, _, p in sorted(out)]


def _refuse_link(path: Path, what: str) -> None:
    """Nothing a run reads or writes may be a symbolic link: it could lead out of the run
    directory (another run's checkpoint read as this one's, a file written elsewhere)."""
    if path.is_symlink():
        raise CheckpointError(f"{path}: the {what} is a symbolic link; refusing to follow it out of the run directory")


def _same_run(path: Path, run) -> bool:
    """Whether checkpoint `path` belongs to the run `run` (state.json's "run"; None for a
    checkpoint saved outside a run directory): only those are ever pruned."""
    try:
        state = json.loads((path / STATE_FILE).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(state, dict) and state.get("run") == run


def save_checkpoint(
    run_dir: str | os.PathLike,
    *,
    step: int,
    params: dict[str, np.ndarray],
    optimizer: dict | None,
    meta: dict,
    keep: int = 2,
    best: bool = False,
) -> Path:
    """Write a whole checkpoint atomically and point `latest` at it (and `best`, if `best`); keep
    the newest `keep` and the best."""
    run_dir = Path(run_dir)
    root = run_dir / CKPT_DIR
    _refuse_link(root, "checkpoints directory")
    root.mkdir(parents=True, exist_ok=True)

    params = {k: np.asarray(v) for k, v in params.items()}
    for k, v in params.items():  # what loading would refuse is never written
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise CheckpointError(
                f"refusing to save step {step}: parameter {k} holds non-finite values (the run diverged; lower --lr)"
            )
    model_bytes = _safetensors_bytes(params)
    opt_arrays, opt_skel = _flatten(optimizer if optimizer is not None else {})
    optim_bytes = _safetensors_bytes(opt_arrays)

    state = dict(meta)
    state.update(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "step": int(step),
            "params": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in params.items()},
            "optimizer_layout": opt_skel if optimizer is not None else None,
            "sha256": {
                MODEL_FILE: hashlib.sha256(model_bytes).hexdigest(),
                OPTIM_FILE: hashlib.sha256(optim_bytes).hexdigest(),
            },
        }
    )
    try:
        state = json.loads(json.dumps(state, allow_nan=False))  # what a reader will see
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"cannot write a checkpoint: its metadata is not JSON ({e})") from None
    state["checksum"] = state_checksum(state)

    name = f"step-{int(step):08d}"
    n = 0
    while (root / name).exists():
        n += 1
        name = f"step-{int(step):08d}-{n}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{name}-"))
    try:
        for fname, data in ((MODEL_FILE, model_bytes), (OPTIM_FILE, optim_bytes)):
            with open(tmp / fname, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        with open(tmp / STATE_FILE, "wb") as f:
            f.write((json.dumps(state, indent=2, sort_keys=True) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        _chmod_default(tmp, directory=True)
        os.replace(tmp, root / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(root)
    write_bytes_atomic(root / LATEST, (name + "\n").encode())
    if best:
        write_bytes_atomic(root / BEST, (name + "\n").encode())

    # prune: this run's older checkpoints beyond `keep` (never the best), and temp dirs left by a
    # crash; only real directories inside checkpoints/, and never one that another run wrote
    if keep > 0:
        protected = {name, _pointer(root, BEST)}
        run = state.get("run")
        dirs = [p for p in _checkpoint_dirs(root) if p.name not in protected and _same_run(p, run)]
        for old in dirs[: max(0, len(dirs) - (keep - 1))]:
            shutil.rmtree(old, ignore_errors=True)
    for p in root.iterdir():
        if p.name.startswith(".tmp-") and p.is_dir() and not p.is_symlink() and p != tmp:
            shutil.rmtree(p, ignore_errors=True)
    return root / name


# --------------------------------------------------------------------------- loading
def _pointer(root: Path, which: str) -> str | None:
    try:
        return (root / which).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def resolve(path: str | os.PathLike, which: str = LATEST) -> Path:
    """A run directory (-> its `latest` or `best` checkpoint) or a checkpoint directory itself."""
    if which not in POINTERS:
        raise ValueError(f"which must be one of {POINTERS}, got {which!r}")
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such run directory")
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a directory (expected a run directory)")
    if (path / STATE_FILE).is_file():
        if which == BEST:
            raise CheckpointError(
                f"{path}: is a checkpoint directory; the best checkpoint is chosen in a run directory"
            )
        _refuse_link(path, "checkpoint directory")
        return path
    root = path / CKPT_DIR
    _refuse_link(root, "checkpoints directory")
    latest = root / which
    if not latest.is_file():
        if which == BEST and (root / LATEST).is_file():
            raise CheckpointError(
                f"{path}: has no best checkpoint yet (no {CKPT_DIR}/{BEST}: it is written at the first evaluation)"
            )
        raise CheckpointError(f"{path}: no checkpoint found (no {CKPT_DIR}/{LATEST})")
    try:
        name = latest.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise CheckpointError(f"{latest}: unreadable") from None
    if not _STEP_RE.match(name) or not (root / name).is_dir():
        raise CheckpointError(f"{latest}: names a missing checkpoint {name[:60]!r}")
    _refuse_link(root / name, "checkpoint directory")
    return root / name


def read_state(ckpt: Path) -> dict:
    path = ckpt / STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt}: not a checkpoint (no {STATE_FILE})") from None
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: corrupted (not valid JSON)") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not a qed checkpoint (format is {state.get('format') if isinstance(state, dict) else None!r})"
        )
    version = state.get("format_version")
    if version == 1:
        raise CheckpointError(
            f"{path}: checkpoint format version 1 has no checksum over its config, task and "
            f"weights, so it cannot be verified (this qed reads version {FORMAT_VERSION}); "
            "train the run again"
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported (this qed reads version {FORMAT_VERSION})"
        )
    if not isinstance(state.get("checksum"), str):
        raise CheckpointError(f"{path}: corrupted (no checksum)")
    if state_checksum(state) != state["checksum"]:
        raise CheckpointError(
            f"{path}: changed after it was written (its checksum over the config, task, "
            "vocabulary, options and weights' digests does not match); refusing to use it"
        )
    for key in ("step", "config", "task", "params", "sha256"):
        if key not in state:
            raise CheckpointError(f"{path}: corrupted (missing {key!r})")
    _check_step(ckpt, state["step"])
    return state


def _check_step(ckpt: Path, step) -> None:
    """A checkpoint's identity, part one: its step is an integer >= 0, the one its directory is
    named after (step-NNNNNNNN, or step-NNNNNNNN-k for a second save of that step)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{ckpt / STATE_FILE}: step {step!r} is not an integer >= 0")
    m = _STEP_RE.match(ckpt.name)
    if m is None:
        raise CheckpointError(f"{ckpt}: a checkpoint directory is named step-NNNNNNNN (its step)")
    if int(m.group(1)) != step:
        raise CheckpointError(
            f"{ckpt}: its state.json says step {step}, its name step {int(m.group(1))}; it was "
            "moved or renamed, refusing to use it"
        )


def _check_arrays(where: Path, what: str, arrays: dict[str, np.ndarray]) -> None:
    """float32 or float64, one dtype for all, every value finite."""
    dtypes = {}
    for k, a in arrays.items():
        if a.dtype not in (np.float32, np.float64):
            raise CheckpointError(f"{where}: {what} {k} has dtype {a.dtype}; qed's models are float32 or float64")
        dtypes.setdefault(a.dtype, k)
        bad = a.size - int(np.count_nonzero(np.isfinite(a)))
        if bad:
            raise CheckpointError(
                f"{where}: {what} {k} holds {bad:,} non-finite value(s) (NaN or inf): the "
                "run had diverged when this was saved; refusing to use it"
            )
    if len(dtypes) > 1:
        (d1, k1), (d2, k2) = list(dtypes.items())[:2]
        raise CheckpointError(f"{where}: mixed dtypes ({what} {k1} is {d1}, {k2} is {d2})")


def load_checkpoint(path: str | os.PathLike, *, with_optimizer: bool = True, which: str = LATEST) -> Checkpoint:
    """Load and verify (format, version, checksums, names, shapes, dtypes, finiteness) a checkpoint."""
    ckpt = resolve(path, which)
    for name in (STATE_FILE, MODEL_FILE, OPTIM_FILE):
        _refuse_link(ckpt / name, f"checkpoint's {name}")
    state = read_state(ckpt)
    params, digest = _read_safetensors(ckpt / MODEL_FILE, "weights")
    if digest != state["sha256"].get(MODEL_FILE):
        raise CheckpointError(f"{ckpt / MODEL_FILE}: corrupted (checksum does not match state.json)")
    declared = state["params"]
    if set(declared) != set(params):
        extra = sorted(set(params) - set(declared))[:3]
        missing = sorted(set(declared) - set(params))[:3]
        raise CheckpointError(
            f"{ckpt / MODEL_FILE}: parameter names do not match state.json (extra {extra}, missing {missing})"
        )
    for k, spec in declared.items():
        if list(params[k].shape) != list(spec["shape"]):
            raise CheckpointError(
                f"{ckpt / MODEL_FILE}: parameter {k} has shape {list(params[k].shape)}, state.json says {spec['shape']}"
            )
        if str(params[k].dtype) != spec.get("dtype"):
            raise CheckpointError(
                f"{ckpt / MODEL_FILE}: parameter {k} has dtype {params[k].dtype}, state.json says {spec.get('dtype')}"
            )
    _check_arrays(ckpt / MODEL_FILE, "parameter", params)
    optimizer = None
    if with_optimizer and state.get("optimizer_layout") is not None:
        arrays, digest = _read_safetensors(ckpt / OPTIM_FILE, "optimizer")
        if digest != state["sha256"].get(OPTIM_FILE):
            raise CheckpointError(f"{ckpt / OPTIM_FILE}: corrupted (checksum does not match state.json)")
        _check_arrays(ckpt / OPTIM_FILE, "optimizer array", arrays)
        optimizer = _unflatten(state["optimizer_layout"], arrays)
    return Checkpoint(path=ckpt, meta=state, params=params, optimizer=optimizer)

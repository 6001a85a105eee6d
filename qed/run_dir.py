"""Run directories: where a run's checkpoints, metrics, plot and config copy live, and who may
write them.

    runs/<task>-<YYYYmmdd-HHMMSS>/     a new run (or --out DIR)
        run.json                        the run's identity, written once: its id and the sha256
                                        of its data (every checkpoint records both)
        lock                            held (fcntl.flock) by the one process that writes the run
        metrics.jsonl                   one JSON record per evaluation
        metrics.damaged.jsonl           lines of metrics.jsonl that a resume could not read, kept
        metrics.superseded.jsonl        records after the checkpoint a resume went back to, kept
        config.json, loss.png           copies for reading
        checkpoints/                    (qed/checkpoint.py)
    runs/latest -> <task>-<...>         a symbolic link to the newest run started under runs/,
                                        so `qed sample runs/latest` always names it

A run directory is claimed only after everything that can be checked before training (options,
config, the memory estimate, building the model) has passed, and is removed again if the run
fails before its first checkpoint: a failed start leaves nothing behind.

One process writes a run directory at a time: a new run and a resumed one hold an OS lock on
`lock` for the whole run, which the OS releases however the process ends; a second `qed train`
(the same --out, or --resume of a running run) is refused in one line. A lock left by a process
that ended without releasing it cannot be held by anyone (flock dies with its process): it is
taken over, with one line that says so. Readers (qed eval, qed sample) take no lock: every
file they read is replaced atomically.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from . import checkpoint as ckpt
from .errors import CheckpointError, QedError

RUNS = Path("runs")
LATEST_LINK = "latest"
METRICS = "metrics.jsonl"
DAMAGED = "metrics.damaged.jsonl"
SUPERSEDED = "metrics.superseded.jsonl"
CONFIG_COPY = "config.json"
RUN_RECORD = "run.json"
LOCK = "lock"
RUN_FORMAT = "qed-run"


def notice(message: str) -> None:
    """One line on stderr about something done for the user (a lock taken over, lines kept aside)."""
    print(f"qed: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the lock
class RunLock:
    """The OS lock that makes this process the one writer of a run directory: fcntl.flock on
    RUN/lock, held until `release()` or the process ends (any end: the OS drops it). The file
    holds the holder's pid while it is held and is emptied on release, so a pid found in it by
    the next holder names a process that ended without releasing (killed, crashed)."""

    def __init__(self, path: Path, fd: int | None):
        self.path, self.fd = path, fd
        # a lock dropped without release() (an abandoned Trainer) is closed, and so released,
        # when it is collected, not only when the process ends
        self._close = weakref.finalize(self, os.close, fd) if fd is not None else None

    @classmethod
    def acquire(cls, run_dir: Path) -> RunLock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock to take (documented in docs/cli.md)
            return cls(Path(run_dir) / LOCK, None)
        path = Path(run_dir) / LOCK
        try:  # O_NOFOLLOW: a lock file that is a link is refused, not followed
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise QedError(f"{path}: cannot open the run's lock file: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise QedError(
                f"{run_dir}: in use by {who}, which holds {path} (one qed train writes a run "
                "directory at a time); wait for it to end, or use another --out"
            ) from None
        stale = _read_pid(fd)
        if stale and stale != os.getpid():
            notice(f"{run_dir}: process {stale} ended without releasing the run's lock; taking it over")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self.fd is None:
            return
        import fcntl

        try:
            os.ftruncate(self.fd, 0)  # released, not abandoned: the next holder says nothing
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._close()
        self.fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


# --------------------------------------------------------------------------- claiming a new run
@dataclass
class RunDir:
    path: Path
    created: bool  # made by this process (and so ours to remove after a failed start)
    lock: RunLock | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def remove_if_unused(self) -> bool:
        """Remove a run directory this process created and never checkpointed into."""
        if not self.created or (self.path / ckpt.CKPT_DIR / ckpt.LATEST).exists():
            return False
        shutil.rmtree(self.path, ignore_errors=True)
        _unlink_latest_if(self.path)
        if self.lock is not None:
            self.lock.release()
        return True


def _holds_a_run(path: Path) -> bool:
    return any((path / name).exists() or (path / name).is_symlink() for name in (ckpt.CKPT_DIR, METRICS, RUN_RECORD))


def check_out(out: str | None) -> None:
    """Refuse an --out that cannot take a new run (before anything is built; `claim` checks
    again under the lock)."""
    if out is None:
        return
    path = Path(out)
    if path.is_symlink() and not path.is_dir():
        raise QedError(f"--out {out}: is a symbolic link to nothing; pick another --out")
    if path.exists() and not path.is_dir():
        raise QedError(f"--out {out}: exists and is not a directory")
    if path.is_dir() and _holds_a_run(path):
        raise QedError(f"--out {out}: already holds a run; continue it with --resume {out} or pick another --out")


def claim(task_name: str, out: str | None, data_sha256: str) -> RunDir:
    """Create the run directory (--out, or runs/<task>-<timestamp>, and point runs/latest at
    it), lock it, and write its run.json: the run's id and the digest of its data."""
    check_out(out)
    if out is not None:
        path = Path(out)
        try:
            path.mkdir(parents=True)
            created = True
        except FileExistsError:
            created = False
        lock = RunLock.acquire(path)
        try:
            check_out(out)  # again, now that no other process can start a run here
        except BaseException:
            lock.release()
            raise
        run = RunDir(path, created, lock)
    else:
        base = RUNS / f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        path, n = base, 1
        while True:
            try:
                path.mkdir(parents=True)
                break
            except FileExistsError:
                path, n = Path(f"{base}-{n}"), n + 1
        run = RunDir(path, True, RunLock.acquire(path))
        _link_latest(path)
    try:
        ckpt.write_json_atomic(
            path / RUN_RECORD,
            {
                "format": RUN_FORMAT,
                "run_id": run.run_id,
                "data_sha256": data_sha256,
                "about": "This run's identity, written when it started: every checkpoint records "
                "this run_id and the sha256 of the run's data, and resume, eval and sample check both.",
            },
        )
    except BaseException:
        run.remove_if_unused()
        raise
    return run


def _link_latest(path: Path) -> None:
    """runs/latest -> path's name, replaced atomically; skipped where symbolic links are not allowed."""
    link = path.parent / LATEST_LINK
    if link.exists() and not link.is_symlink():
        return  # a real file or directory named `latest`: leave it
    tmp = path.parent / f".{LATEST_LINK}.{os.getpid()}.tmp"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(path.name, tmp, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _unlink_latest_if(path: Path) -> None:
    link = path.parent / LATEST_LINK
    try:
        if link.is_symlink() and os.readlink(link) == path.name:
            link.unlink()
    except OSError:
        pass


# --------------------------------------------------------------------------- a run's identity
def read_run_record(run_dir: Path) -> dict:
    """run.json of a run directory, checked: the run's id and the digest of its data."""
    path = Path(run_dir) / RUN_RECORD
    if path.is_symlink():
        raise CheckpointError(f"{path}: is a symbolic link; refusing to follow it out of the run directory")
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{run_dir}: has no {RUN_RECORD}, so its checkpoints cannot be told from another run's "
            "(a run directory of an earlier qed, or damaged); train the run again"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{path}: unreadable or not JSON") from None
    if (
        not isinstance(record, dict)
        or record.get("format") != RUN_FORMAT
        or not isinstance(record.get("run_id"), str)
        or not isinstance(record.get("data_sha256"), str)
    ):
        raise CheckpointError(f"{path}: not a qed run record (format, run_id, data_sha256)")
    return record


def load(path: str | os.PathLike, *, which: str = ckpt.LATEST, with_optimizer: bool = True) -> ckpt.Checkpoint:
    """A run's latest (or best) checkpoint, or a checkpoint directory RUN/checkpoints/step-N,
    verified (qed/checkpoint.py) and checked to be this run's: its state names the run of
    RUN/run.json and the same data digest (its step is checked against its name on reading)."""
    c = ckpt.load_checkpoint(path, with_optimizer=with_optimizer, which=which)
    run_dir = c.path.parent.parent
    record = read_run_record(run_dir)
    run = c.meta.get("run")
    if not isinstance(run, dict) or not isinstance(run.get("id"), str):
        raise CheckpointError(f"{c.path}: records no run identity (written by an earlier qed); train the run again")
    if run["id"] != record["run_id"]:
        raise CheckpointError(
            f"{c.path}: belongs to another run (run id {run['id'][:12]}…, this run directory's is "
            f"{record['run_id'][:12]}…); refusing to use it"
        )
    data = c.meta.get("task", {}).get("sha256") if isinstance(c.meta.get("task"), dict) else None
    if data != record["data_sha256"]:
        raise CheckpointError(f"{c.path}: its data digest differs from the run's ({RUN_RECORD}); refusing to use it")
    return c


# --------------------------------------------------------------------------- metrics.jsonl
_NUMBERS = ("train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s", "accuracy")


def parse_record(raw: bytes) -> dict | None:
    """The record on one line of metrics.jsonl, or None for a damaged line: torn by a crash,
    not UTF-8, not a JSON object with an integer step >= 0 and numbers where numbers go."""
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(rec, dict):
        return None
    step = rec.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    for key in _NUMBERS:
        v = rec.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return None
    return rec


def _lines(path: Path) -> list[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [line for line in data.split(b"\n") if line.strip()]


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The intact records of metrics.jsonl (a damaged line is passed over here; a resume keeps
    it aside in metrics.damaged.jsonl)."""
    path = Path(run_dir) / METRICS
    if path.is_symlink():
        return []
    return [r for r in map(parse_record, _lines(path)) if r is not None]


def _keep_aside(path: Path, lines: list[bytes]) -> None:
    """Append lines to a side file, byte for byte, flushed to disk before the main file changes."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())


def rewind_metrics(run_dir: Path, step: int) -> None:
    """Before a resume from the checkpoint of `step`: metrics.jsonl keeps its intact records up to
    `step`, byte for byte; a damaged line goes to metrics.damaged.jsonl and a record after `step`
    (logged before a crash lost its checkpoint; the resumed run logs that step again) to
    metrics.superseded.jsonl, each group with one line saying so. Nothing is dropped."""
    path = Path(run_dir) / METRICS
    if path.is_symlink():
        raise QedError(f"{path}: is a symbolic link; refusing to follow it out of the run directory")
    raw = path.read_bytes() if path.exists() else b""
    lines = _lines(path)
    kept, damaged, later = [], [], []
    for number, line in enumerate(lines, 1):
        rec = parse_record(line)
        if rec is None:
            damaged.append(number)
        elif rec["step"] > step:
            later.append(number)
        else:
            kept.append(line)
    for numbers, side, why in (
        (damaged, DAMAGED, "damaged (torn, not UTF-8 or not a record)"),
        (later, SUPERSEDED, f"after step {step}, the checkpoint resumed from"),
    ):
        if numbers:
            _keep_aside(Path(run_dir) / side, [lines[n - 1] for n in numbers])
            notice(
                f"{path}: {len(numbers)} line(s) {why} moved to {Path(run_dir) / side} "
                f"(line{'s' * (len(numbers) > 1)} {_ranges(numbers)})"
            )
    new = b"".join(line + b"\n" for line in kept)
    if new != raw:
        ckpt.write_bytes_atomic(path, new)


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 7 -> "1-3, 7"."""
    out, start = [], numbers[0]
    for a, b in zip(numbers, numbers[1:] + [math.inf]):
        if b != a + 1:
            out.append(f"{start}-{a}" if a != start else f"{a}")
            start = b
    return ", ".join(out)


def append_record(run_dir: Path, record: dict) -> None:
    """One record appended to metrics.jsonl (never through a symbolic link)."""
    fd = os.open(Path(run_dir) / METRICS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def write_config_copy(run_dir: Path, description: dict) -> None:
    """config.json: a copy, for reading, of what the checkpoints hold (they are what qed reads)."""
    ckpt.write_json_atomic(
        run_dir / CONFIG_COPY,
        {
            "about": (
                "A copy, for reading, of this run's settings. qed never reads this file: resume, "
                "sample and eval use the checkpoints' state.json, verified by its checksum."
            ),
            **description,
        },
    )

"""Run directories: where a run's checkpoints, metrics, plot and config copy live.

    runs/<task>-<YYYYmmdd-HHMMSS>/     a new run (or --out DIR)
    runs/latest -> <task>-<...>         a symbolic link to the newest run started under runs/,
                                        so `qed sample runs/latest` always names it

A run directory is claimed only after everything that can be checked before training (options,
config, the memory estimate, building the model) has passed, and is removed again if the run
fails before its first checkpoint: a failed start leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from . import checkpoint as ckpt
from .errors import QedError

RUNS = Path("runs")
LATEST_LINK = "latest"
METRICS = "metrics.jsonl"
CONFIG_COPY = "config.json"


@dataclass
class RunDir:
    path: Path
    created: bool  # made by this process (and so ours to remove after a failed start)

    def remove_if_unused(self) -> bool:
        """Remove a run directory this process created and never checkpointed into."""
        if not self.created or (self.path / ckpt.CKPT_DIR / ckpt.LATEST).exists():
            return False
        shutil.rmtree(self.path, ignore_errors=True)
        _unlink_latest_if(self.path)
        return True


def check_out(out: str | None) -> None:
    """Refuse an --out that cannot take a new run (before anything is built)."""
    if out is None:
        return
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise QedError(f"--out {out}: exists and is not a directory")
    if path.is_dir() and ((path / ckpt.CKPT_DIR).exists() or (path / METRICS).exists()):
        raise QedError(f"--out {out}: already holds a run; continue it with --resume {out} or pick another --out")


def claim(task_name: str, out: str | None) -> RunDir:
    """Create the run directory: --out, or runs/<task>-<timestamp> (and point runs/latest at it)."""
    check_out(out)
    if out is not None:
        path = Path(out)
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        return RunDir(path, created)
    base = RUNS / f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True)
            break
        except FileExistsError:
            path, n = Path(f"{base}-{n}"), n + 1
    _link_latest(path)
    return RunDir(path, True)


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


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The records of metrics.jsonl; a torn last line (a crash mid-write) is dropped."""
    path = Path(run_dir) / METRICS
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return out


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

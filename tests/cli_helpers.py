"""Running `python -m qed ...` as a user does, and the shape of a one-line error."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--batch-size", "16", "--no-progress"]
SORT_TINY = TINY + ["--sort-digits", "3"]  # 729 inputs: evaluation stays cheap


def env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def qed(*args, timeout=300, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "qed", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
        cwd=cwd or ROOT,
    )


def assert_one_line_error(r, *fragments):
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("qed: error: "), lines[0]
    for f in fragments:
        assert f.lower() in lines[0].lower(), lines[0]

"""Each backend gets the threads it runs best with, and the run header says which.

The NumPy backend's BLAS is held at one thread (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, set
before numpy and torch load); that setting must not leave the PyTorch backend on one core."""

import os
import subprocess
import sys

import pytest

from qed.cpu import cpu_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = (
    "from qed.cpu import one_library_thread, use_threads; one_library_thread(); import torch; "
    "print(use_threads('torch')); print(torch.get_num_threads())"
)


def _env(**extra):
    env = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "QED_TORCH_THREADS")
    }
    env.update(extra)
    return env


def _probe(**extra) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=_env(**extra), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    words, n = out.stdout.strip().splitlines()
    return words, int(n)


def test_torch_backend_gets_every_core_despite_the_blas_setting():
    words, n = _probe()
    assert n == cpu_count(), (words, n)
    assert words == f"torch {n} thread{'s' if n > 1 else ''}"


def test_the_users_thread_settings_win():
    assert _probe(OMP_NUM_THREADS="1")[1] == 1
    assert _probe(QED_TORCH_THREADS="3")[1] == 3
    assert _probe(OMP_NUM_THREADS="1", QED_TORCH_THREADS="2")[1] == 2


@pytest.mark.parametrize("bad", ["x", "0", "-2", "1.5"])
def test_a_bad_thread_count_is_one_line(bad, monkeypatch):
    from qed.cpu import torch_threads
    from qed.errors import QedError

    monkeypatch.setenv("QED_TORCH_THREADS", bad)
    with pytest.raises(QedError, match="QED_TORCH_THREADS"):
        torch_threads()


def test_the_train_header_states_the_threads(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "qed",
        "train",
        "--backend",
        "torch",
        "--steps",
        "1",
        "--eval-every",
        "1",
        "--n-layer",
        "1",
        "--n-head",
        "2",
        "--n-embd",
        "16",
        "--batch-size",
        "8",
        "--no-progress",
        "--out",
        str(tmp_path / "run"),
    ]
    out = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    n = cpu_count()
    assert f"| torch {n} thread{'s' if n > 1 else ''} |" in header, header


def test_the_numpy_backend_states_its_split():
    from qed.cpu import default_threads, use_threads

    words = use_threads("numpy", "processes")
    if default_threads() > 1:
        assert words == f"{default_threads()} batch slices (this process + 1 worker process), BLAS 1 thread each"
        assert use_threads("numpy", "threads").startswith(
            f"{default_threads()} batch slices ({default_threads()} Python"
        )
    else:
        assert words == "1 thread, BLAS 1"

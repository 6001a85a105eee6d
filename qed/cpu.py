"""How each backend uses the CPU.

The NumPy backend splits a batch into slices (this process and a worker process, or Python
threads), each with BLAS held at one thread, so that the two do not oversubscribe the cores; the
PyTorch backend runs one process whose intra-op pool uses every core. glibc's malloc is told to
keep the memory a step frees for the next step."""

from __future__ import annotations

import contextlib
import os

from . import env


def cpu_count() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads() -> int:
    """Threads per batch for NumpyGPT: the CPU count, at most 2 (QED_NUMPY_THREADS overrides)."""
    own = env.get("QED_NUMPY_THREADS")
    return own if own is not None else max(1, min(2, cpu_count()))


# The environment variables the thread libraries read when they load, as the user left them
# (None: unset) before `one_library_thread` set them to 1.
_USER_LIBRARY_THREADS: dict[str, str | None] = {}


def one_library_thread() -> None:
    """OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1 unless the user set them (read when numpy /
    torch load, so before the command imports them).

    The NumPy backend's matrices are small: BLAS/OpenMP threads cost more than they give, and on a
    busy two-core machine they made a step 10-80x slower (measured). The PyTorch backend gets its
    threads back from `use_threads`."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        _USER_LIBRARY_THREADS.setdefault(var, os.environ.get(var))
        os.environ.setdefault(var, "1")


def torch_threads() -> int:
    """Intra-op threads for the PyTorch backend: QED_TORCH_THREADS, else OMP_NUM_THREADS where the
    user set it, else every CPU this process may run on. (The OMP_NUM_THREADS=1 that
    `one_library_thread` sets for NumPy's BLAS must not reach torch: it left `qed train --backend
    torch` on one core, 151 s for 2000 iterations against 89.7 s on two, measured.)"""
    own = env.get("QED_TORCH_THREADS")
    if own is not None:
        return own
    user_omp = _USER_LIBRARY_THREADS.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))
    omp = env.get("OMP_NUM_THREADS", {"OMP_NUM_THREADS": user_omp or ""})  # the user's, not ours
    return omp if omp is not None else cpu_count()


def use_threads(backend: str, parallel: str = "processes") -> str:
    """Give `backend` the threads it runs best with; return them in words for the run header."""
    if backend == "torch":
        import torch

        torch.set_num_threads(torch_threads())
        return f"torch {torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}"
    n = default_threads()
    if n == 1:
        return "1 thread, BLAS 1"
    how = "this process + 1 worker process" if parallel == "processes" else f"{n} Python threads"
    return f"{n} batch slices ({how}), BLAS 1 thread each"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what `platform` knows."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The vector instruction sets that decide the speed of elementwise kernels, widest first, as
# /proc/cpuinfo names them and as they are usually written.
SIMD_LEVELS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2"), ("asimd", "NEON"))


def simd_level() -> str:
    """The widest vector instruction set of this CPU ("AVX2", "AVX-512", ...; "unknown" where
    /proc/cpuinfo has no flags). Kernels of one kind of machine run at another speed on another:
    a figure is quoted with the level it was measured at."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next(
                (set(line.split(":", 1)[1].split()) for line in f if line.startswith(("flags", "Features"))), set()
            )
    except OSError:
        flags = set()
    return next((name for flag, name in SIMD_LEVELS if flag in flags), "unknown")


_MALLOC_TUNED = []


def tune_malloc() -> bool:
    """Keep freed memory in the process instead of returning it to the OS after every step.

    A training step allocates and frees the same large temporaries every time; with glibc's
    defaults each one above the mmap threshold is a fresh mmap and its first touch page-faults
    (thousands of faults a step, measured). Raising M_MMAP_THRESHOLD (to its 32 MiB maximum),
    M_TRIM_THRESHOLD and M_TOP_PAD makes the heap keep and reuse them. Once per process, glibc
    only, and not where the user set MALLOC_* variables or QED_MALLOC_TUNE=0. True if applied."""
    if _MALLOC_TUNED:
        return _MALLOC_TUNED[0]
    ok = False
    if env.get("QED_MALLOC_TUNE") is not False and not any(k.startswith("MALLOC_") for k in os.environ):
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt
            M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
            ok = (
                bool(mallopt(M_MMAP_THRESHOLD, 32 * 2**20))
                & bool(mallopt(M_TRIM_THRESHOLD, 512 * 2**20))
                & bool(mallopt(M_TOP_PAD, 64 * 2**20))
            )
        except (OSError, AttributeError):  # not glibc: nothing to tune
            ok = False
    _MALLOC_TUNED.append(ok)
    return ok


_BLAS_CONTROLLER = []


def blas_single_thread() -> contextlib.AbstractContextManager:
    """A context in which BLAS runs on one thread (threadpoolctl), or a no-op without it."""
    if not _BLAS_CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS_CONTROLLER.append(ThreadpoolController())
        except ImportError:  # pragma: no cover - a dependency
            _BLAS_CONTROLLER.append(None)
    ctl = _BLAS_CONTROLLER[0]
    return contextlib.nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")

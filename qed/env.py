"""Every environment variable qed reads, each with its one parser.

A variable that is set (and not empty) to a value qed cannot use is refused in one line naming
it and the value, a QedError, before the command does anything (`check_all`, from the command
line's `main`): never ignored, never a traceback. Each reader calls `get(NAME)`, which parses
the same way.

    QED_NUMPY_THREADS   batch slices of the NumPy backend             a positive integer
    QED_TORCH_THREADS   intra-op threads of the PyTorch backend       a positive integer
    OMP_NUM_THREADS     (OpenMP's own) read for the PyTorch backend   a positive integer, or a
                                                                      comma-separated list of them
    QED_MALLOC_TUNE     keep freed memory for the next step (glibc)   0 or 1
    QED_SHM_DIR         where NumPy worker processes share memory     a writable directory
    QED_NPROC           set by `qed train --nproc N` in its ranks     a positive integer
    QED_SEEDS           the source documents (`qed docs`)             a directory
    QED_KATEX           the npm katex package (`qed docs`)            a directory
    QED_SLOW            the slower plan of some proofs (tests)        0 or 1
    QED_CACHE_DIR       where `qed prove` keeps certificates          a path (made if missing)
    NO_COLOR            (no-color.org) plain tables on a terminal     any value

torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
are one group with rules between them: qed/distributed.py's `rank_env` parses them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .errors import QedError


def _positive_int(text: str) -> int:
    value = int(text) if text.strip().isdigit() else 0
    if value < 1:
        raise ValueError("a positive integer")
    return value


def _thread_list(text: str) -> int:
    """OpenMP allows a nested list, "4,2": the first level is what a process's pool gets."""
    parts = [p.strip() for p in text.split(",")]
    for p in parts:
        _positive_int(p)
    return int(parts[0])


def _zero_or_one(text: str) -> bool:
    if text.strip() not in ("0", "1"):
        raise ValueError("0 or 1")
    return text.strip() == "1"


def _directory(text: str) -> str:
    if not os.path.isdir(text):
        raise ValueError("an existing directory")
    return text


def _writable_directory(text: str) -> str:
    if not (os.path.isdir(text) and os.access(text, os.W_OK)):
        raise ValueError("an existing directory this process may write")
    return text


def _any(text: str) -> str:
    """A variable every value of which means something (a path that is made if missing)."""
    return text


# name -> (parser, what a good value is); the parser raises ValueError(what) on a bad value
VARIABLES = {
    "QED_NUMPY_THREADS": (_positive_int, "a positive integer"),
    "QED_TORCH_THREADS": (_positive_int, "a positive integer"),
    "OMP_NUM_THREADS": (_thread_list, "a positive integer (or a comma-separated list of them)"),
    "QED_MALLOC_TUNE": (_zero_or_one, "0 or 1"),
    "QED_SHM_DIR": (_writable_directory, "an existing directory this process may write"),
    "QED_NPROC": (_positive_int, "a positive integer"),
    "QED_SEEDS": (_directory, "an existing directory"),
    "QED_KATEX": (_directory, "an existing directory"),
    "QED_SLOW": (_zero_or_one, "0 or 1"),
    "QED_CACHE_DIR": (_any, "a path"),
    "NO_COLOR": (_any, "any value"),
}


def get(name: str, environ: Mapping[str, str] | None = None) -> object:
    """The parsed value of `name`, or None where it is unset or empty; QedError (one line)
    where it is set to something qed cannot use."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not an environment variable qed reads (qed/env.py)")
    text = (os.environ if environ is None else environ).get(name)
    if text is None or text == "":
        return None
    parse, what = VARIABLES[name]
    try:
        return parse(text)
    except ValueError:
        raise QedError(f"environment variable {name}={text!r}: expected {what} (or leave it unset)") from None


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Parse every variable qed reads: the first bad one is refused in one line."""
    for name in VARIABLES:
        get(name, environ)

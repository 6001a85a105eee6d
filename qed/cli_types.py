"""argparse types of the `qed` command line, each refusing a bad value in one line, and the
defaults that `qed bench --help` shows (qed/tools/bench.py uses the same).

A module of its own so that every subcommand's parser (cli.py, cli_tools.py) and the tools can
use them without importing cli.py or the tools (no import cycle)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

# `qed train`: the flags that set the model, each a key of a run description's `config` (the same
# name); qed/train_config.py reads config files with it, qed/cli.py refuses them with --resume
MODEL_KEYS = (
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "norm",
    "ffn",
    "pos",
    "norm_position",
    "attention",
    "qk_norm",
    "residual_scale",
    "dropout",
    "loss",
    "score_transform",
)

# `qed bench`
NUMPY_PARALLEL = "processes"  # how NumpyGPT runs its batch slices (see qed/parallel.py)
MEMORY_T = 1024  # --memory: attention vs attention_lse at this block size ...
MEMORY_BATCH = 4  # ... and batch size
SWEEP_T = (32, 64, 128, 256, 512)
SWEEP_C = (64, 128, 256, 512)
SWEEP_FIGURE = os.path.join("docs", "figures", "bench_sweep.png")


def int_at_least(low: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer >= low, refused in one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
nonnegative_int = int_at_least(0, "an integer >= 0")


# the longest wait a timeout may ask for: a week. Longer ones overflow the clocks that the
# waits are measured on (datetime.timedelta, gloo's and NCCL's nanosecond deadlines).
MAX_SECONDS = 7 * 24 * 3600


def seconds(text: str) -> float:
    """A positive number of seconds, at most MAX_SECONDS."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (0 < value <= MAX_SECONDS):  # refuses nan and inf too
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds up to {MAX_SECONDS} (a week), got {text}"
        )
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (`1e12` and `312e12` included)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (0 < value < float("inf")):  # refuses nan, inf, 0 and negative
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def drop_rate(text: str) -> float:
    """A dropout rate p with 0 <= p < 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < 1:  # refuses nan too
        raise argparse.ArgumentTypeError(f"expected a drop rate p with 0 <= p < 1, got {text}")
    return value


def name(text: str) -> str:
    """An op, claim or file name (or prefix): an empty one would match everything."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name, got {text!r} (leave it out to mean all)")
    return text


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):  # refuses nan, negative and inf
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (0: greedy), got {text}")
    return value


def int_list(text: str) -> tuple:
    """At least two positive integers, comma- or space-separated."""
    try:
        vals = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if len(vals) < 2 or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected at least two positive integers, got {text!r}")
    return vals

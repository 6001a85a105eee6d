"""argparse types of the `qed` command line: each refuses a bad value in one line.

A module of its own so that every subcommand's parser (cli.py, cli_docs.py, bench.py) can use
them without importing cli.py (no import cycle)."""
from __future__ import annotations

import argparse


def int_at_least(low: int, what: str):
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


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):     # refuses nan, negative and inf
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (0: greedy), got {text}")
    return value

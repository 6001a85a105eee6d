"""Errors the command line reports as one line (`qed: error: ...`) instead of a traceback."""

from __future__ import annotations


class QedError(ValueError):
    """An expected failure caused by the user's input: a bad file, a bad option, a bad checkpoint."""


class DataError(QedError):
    """A data file or prompt that cannot be used."""


class CheckpointError(QedError):
    """A checkpoint that is missing, corrupted, or not ours."""


class CompileError(QedError):
    """torch.compile could not build the model here (no working C++ compiler, an unsupported
    platform): the run works without --compile."""

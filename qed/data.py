"""Data for training: the built-in sorting task and character-level text.

Both tasks hand out batches `(x, y)` of int64 token ids, shape (B, T), with `y` the next token of
`x`; a target of IGNORE (-1) is not scored by the loss.

The sorting task (minGPT's demo): the sequence is `length` digits followed by the same digits
sorted, e.g. 2 0 1 1 0 2 | 0 0 1 1 2 2.  The model sees the first 2*length - 1 tokens and must
predict the sorted half; targets for the input half are IGNORE.  Every possible input is
enumerated once and split, with a fixed seed, into a training set and a held-out set, so no
held-out input is ever seen in training.

The text task (nanoGPT's shakespeare_char): any UTF-8 file; the vocabulary is the sorted set of
distinct characters; the first 90% of the characters train, the last 10% validate; batches are
random windows of block_size + 1 characters.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .errors import DataError

IGNORE = -1
SPLIT_SEED = 1337  # fixed: the held-out set of the sorting task never depends on --seed
MAX_ENUMERATED = 10**7
# the version of how the sorting task turns its parameters into examples (the enumeration and
# the split below): part of its digest, so that a change here is never resumed as the same data
SORT_GENERATOR = 1


def _canonical_digest(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _check_digest(recorded, actual: str, what: str) -> None:
    """A task rebuilt from a run's record is the data the run trained on, or it is refused."""
    if recorded != actual:
        raise DataError(
            f"{what}: changed since the run started (its sha256 is {actual[:16]}…, the run recorded "
            f"{str(recorded)[:16]}…); restore it, or train a new run on it"
        )


# --------------------------------------------------------------------------- sorting task
@dataclass(frozen=True)
class SortTask:
    length: int = 6
    num_digits: int = 10
    test_fraction: float = 0.25
    split_seed: int = SPLIT_SEED
    kind: str = field(default="sort", init=False)

    def __post_init__(self):
        if not 1 <= self.length:
            raise DataError(f"sort length must be >= 1, got {self.length}")
        if not 2 <= self.num_digits <= 10:
            raise DataError(f"sort digits must be between 2 and 10, got {self.num_digits}")
        if self.num_digits**self.length > MAX_ENUMERATED:
            raise DataError(f"sort task too large to enumerate: {self.num_digits}^{self.length} inputs")
        if not 0.0 < self.test_fraction < 1.0:
            raise DataError(f"test fraction must lie in (0, 1), got {self.test_fraction}")

    # -- description
    @property
    def name(self) -> str:
        return "sort"

    @property
    def vocab_size(self) -> int:
        return self.num_digits

    @property
    def block_size(self) -> int:
        return 2 * self.length - 1

    @property
    def vocab(self) -> list[str]:
        return [str(d) for d in range(self.num_digits)]

    def info(self) -> dict:
        """The task's record (in every checkpoint): its parameters and `sha256`, the digest of
        its definition (the parameters and the generator's version), which stands for its data."""
        record = {
            "kind": "sort",
            "length": self.length,
            "num_digits": self.num_digits,
            "test_fraction": self.test_fraction,
            "split_seed": self.split_seed,
        }
        return dict(record, sha256=_canonical_digest(dict(record, generator=SORT_GENERATOR)))

    # -- the split: every input code 0 .. n^L - 1, permuted with the fixed seed
    def _split(self) -> tuple[np.ndarray, np.ndarray]:
        cached = getattr(self, "_cache", None)
        if cached is None:
            total = self.num_digits**self.length
            perm = np.random.default_rng(self.split_seed).permutation(total)
            n_test = max(1, int(round(self.test_fraction * total)))
            cached = (np.sort(perm[n_test:]), np.sort(perm[:n_test]))  # (train, test)
            object.__setattr__(self, "_cache", cached)
        return cached

    def codes(self, split: str) -> np.ndarray:
        train, test = self._split()
        if split == "train":
            return train
        if split in ("val", "test"):
            return test
        raise ValueError(split)

    def decode_codes(self, codes: np.ndarray) -> np.ndarray:
        """Input codes (N,) -> digits (N, length), most significant digit first."""
        codes = np.asarray(codes, dtype=np.int64)
        powers = self.num_digits ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        return (codes[:, None] // powers[None, :]) % self.num_digits

    def encode_inputs(self, inputs: np.ndarray) -> np.ndarray:
        powers = self.num_digits ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        return (np.asarray(inputs, dtype=np.int64) * powers).sum(axis=-1)

    def sequences(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (N, L) -> (x, y), each (N, 2L - 1); targets of the input half are IGNORE."""
        inputs = np.asarray(inputs, dtype=np.int64)
        full = np.concatenate([inputs, np.sort(inputs, axis=1)], axis=1)
        x = full[:, :-1].copy()
        y = full[:, 1:].copy()
        y[:, : self.length - 1] = IGNORE
        return x, y

    def examples(self, split: str) -> np.ndarray:
        return self.decode_codes(self.codes(split))

    def batch(self, split: str, batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        codes = self.codes(split)
        pick = codes[rng.integers(0, len(codes), size=batch_size)]
        return self.sequences(self.decode_codes(pick))

    def eval_batches(self, batch_size: int, max_examples: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Deterministic batches covering the held-out set (for the validation loss)."""
        inputs = self.examples("val")
        if max_examples is not None:
            inputs = inputs[:max_examples]
        for i in range(0, len(inputs), batch_size):
            yield self.sequences(inputs[i : i + batch_size])

    # -- prompts and printing
    def encode(self, text: str) -> np.ndarray:
        digits = [c for c in text if not c.isspace() and c not in ",[]"]
        bad = sorted({c for c in digits if c not in self.vocab})
        if bad:
            raise DataError(f"prompt has characters outside the vocabulary {''.join(self.vocab)!r}: {''.join(bad)!r}")
        if len(digits) != self.length:
            raise DataError(
                f"the sort task takes exactly {self.length} digits from {''.join(self.vocab)!r}, got {len(digits)}"
            )
        return np.array([int(c) for c in digits], dtype=np.int64)

    def decode(self, tokens: Iterable[int]) -> str:
        return "".join(str(int(t)) for t in tokens)


# --------------------------------------------------------------------------- text task
@dataclass
class TextTask:
    vocab: list[str]
    train: np.ndarray
    val: np.ndarray
    path: str
    sha256: str = ""  # of the file's bytes, as read
    kind: str = field(default="text", init=False)

    @property
    def name(self) -> str:
        stem = os.path.splitext(os.path.basename(self.path))[0]
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem) or "text"

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def info(self) -> dict:
        return {"kind": "text", "path": os.path.abspath(self.path), "vocab": list(self.vocab), "sha256": self.sha256}

    def check_block_size(self, block_size: int) -> None:
        need = block_size + 1
        n = len(self.train) + len(self.val)
        if n < need:
            raise DataError(
                f"{self.path}: {n} characters is shorter than block_size + 1 = {need}; "
                f"use a longer file or a smaller --block-size"
            )
        if len(self.val) < need:
            raise DataError(
                f"{self.path}: the validation split (last 10%, {len(self.val)} characters) is shorter than "
                f"block_size + 1 = {need}; use a file of at least {10 * need} characters or a smaller --block-size"
            )

    def batch(
        self, split: str, batch_size: int, rng: np.random.Generator, block_size: int
    ) -> tuple[np.ndarray, np.ndarray]:
        data = self.train if split == "train" else self.val
        ix = rng.integers(0, len(data) - block_size, size=batch_size)
        x = np.stack([data[i : i + block_size] for i in ix])
        y = np.stack([data[i + 1 : i + 1 + block_size] for i in ix])
        return x.astype(np.int64), y.astype(np.int64)

    def eval_batches(
        self, batch_size: int, block_size: int, n_batches: int, seed: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng([seed, 0xE7A1])  # fixed: every evaluation sees the same windows
        for _ in range(n_batches):
            yield self.batch("val", batch_size, rng, block_size)

    def encode(self, text: str) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.vocab)}
        bad = sorted({c for c in text if c not in index})
        if bad:
            raise DataError(f"prompt has characters outside the vocabulary: {''.join(bad)!r}")
        return np.array([index[c] for c in text], dtype=np.int64)

    def decode(self, tokens: Iterable[int]) -> str:
        return "".join(self.vocab[int(t)] for t in tokens)


def read_text(path: str) -> str:
    """Read a UTF-8 text file, refusing what is not one (missing, empty, binary)."""
    return _read_text(path)[0]


def _read_text(path: str) -> tuple[str, str]:
    """(the text of a UTF-8 file, the sha256 of its bytes), refusing what is not one."""
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, not a text file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from None
    if not raw:
        raise DataError(f"{path}: file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None
    if "\x00" in text:
        raise DataError(f"{path}: looks binary (contains NUL bytes), not text")
    return text, hashlib.sha256(raw).hexdigest()


def load_text(path: str, vocab: list[str] | None = None, sha256: str | None = None) -> TextTask:
    """Character-level dataset: vocab = sorted distinct characters, 90% train / 10% val. With
    `sha256` (a run's record), the file must be the one the run trained on."""
    text, digest = _read_text(path)
    if sha256 is not None:
        _check_digest(sha256, digest, path)
    if vocab is None:
        vocab = sorted(set(text))
    else:
        missing = sorted(set(text) - set(vocab))
        if missing:
            raise DataError(f"{path}: has characters the run's vocabulary lacks: {''.join(missing)[:20]!r}")
    index = {c: i for i, c in enumerate(vocab)}
    dtype = np.uint16 if len(vocab) < 2**16 else np.int32
    data = np.fromiter((index[c] for c in text), dtype=dtype, count=len(text))
    n = int(0.9 * len(data))
    return TextTask(vocab=list(vocab), train=data[:n], val=data[n:], path=path, sha256=digest)


def task_from_info(info: dict) -> SortTask | TextTask:
    """Rebuild the task recorded in a checkpoint or config.json."""
    kind = info.get("kind")
    if kind == "sort":
        task = SortTask(
            length=int(info["length"]),
            num_digits=int(info["num_digits"]),
            test_fraction=float(info.get("test_fraction", 0.25)),
            split_seed=int(info.get("split_seed", SPLIT_SEED)),
        )
        _check_digest(info.get("sha256"), task.info()["sha256"], "the sort task's definition")
        return task
    if kind == "text":
        return load_text(info["path"], vocab=list(info["vocab"]), sha256=info.get("sha256"))
    raise DataError(f"unknown task kind {kind!r}")


class VocabOnlyText:
    """A text task known only by its vocabulary (for sampling when the data file is gone)."""

    kind = "text"

    def __init__(self, vocab: list[str]):
        self.vocab = list(vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    encode = TextTask.encode
    decode = TextTask.decode

"""`qed train --config FILE`: the options of `qed train` read from a file, the command line's
flags overriding it.

Two forms are read:

  * a TOML file (tomllib, the standard library) of flat keys, one per flag of `qed train`, named
    as the flag without its dashes (`batch_size = 64` or `batch-size = 64`, `no_bias = true`,
    `betas = [0.9, 0.99]`, `data = "input.txt"`);
  * a run's own `config.json` (or a TOML file of the same shape): its `config` (the model),
    `train` (the training settings) and `task` tables, read back into the flags that produce
    them, so that `qed train --config runs/NAME/config.json` starts that run again.

Every value is checked by the flag's own argparse type and choices, with no conversion that the
command line would not make (no eval; a string is never read as a number). An unknown key, a
value of the wrong type or a bad value is refused in one line, `FILE: key 'NAME': ...`.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import tomllib

from .cli_types import MODEL_KEYS
from .errors import QedError

# the run description's `train` settings that have no flag: a config.json is accepted back only
# with the value every `qed train` run has (qed/train.py's TrainSettings defaults)
NO_FLAG_TRAIN = ("eps", "eval_batches", "max_eval_examples", "keep")
# a run description's `config` key -> the flag's dest: qed/cli_types.py's MODEL_KEYS (bias and
# tie_weights are negated flags)
TRAIN_KEYS = (
    "steps",
    "batch_size",
    "lr",
    "warmup",
    "min_lr",
    "weight_decay",
    "grad_clip",
    "eval_every",
    "seed",
    "dtype",
    "backend",
    "numpy_parallel",
    "betas",
    "grad_accum",
    "lr_decay_steps",
)
RUN_TABLES = ("config", "train", "task")  # a run description's tables ...
RUN_NOTES = ("about", "qed_version")  # ... and what it holds for reading only


class ConfigFile:
    """What a config file gave: `values` {dest: value} (for argparse's set_defaults), `keys`
    {dest: the key as written in the file}, and `data_sha256`: a run description's digest of its
    text file, checked when the run's data is used."""

    def __init__(self, path: str):
        self.path = path
        self.values: dict = {}
        self.keys: dict = {}
        self.data_sha256: str | None = None

    def error(self, key: str | None, message: str) -> QedError:
        return QedError(f"{self.path}: key {key!r}: {message}" if key else f"{self.path}: {message}")

    def key_named_in(self, message: str) -> str | None:
        """The file's key that an error message names (as `--flag` or `name=`), or None."""
        for dest, key in self.keys.items():
            names = {"no_bias": "bias", "no_tie": "tie_weights"}.get(dest, dest)
            flag = re.escape("--" + dest.replace("_", "-"))
            if re.search(rf"(?<![\w-]){flag}(?![\w-])|(?<![\w-]){names}=", message):
                return key
        return None


def _options(parser: argparse.ArgumentParser) -> dict:
    """{dest: action} of every option a config file may set (all of `qed train`'s but --config)."""
    return {
        a.dest: a
        for a in parser._actions  # argparse keeps no public list of a parser's actions
        if a.option_strings and a.dest not in ("help", "config")
    }


def _kind(action: argparse.Action) -> str:
    """What a flag's value is: "flag" (true/false), "int", "number" or "string"."""
    from .cli_types import drop_rate, nonnegative_int, positive_float, positive_int, seconds

    if action.nargs == 0:
        return "flag"
    if action.type in (int, positive_int, nonnegative_int):
        return "int"
    if action.type in (float, positive_float, seconds, drop_rate):
        return "number"
    return "string"


def _describe(value: object) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    return f"{value!r} ({kind.get(type(value), type(value).__name__)})"


def _one(cf: ConfigFile, key: str, action: argparse.Action, value: object) -> object:
    """A single (not nargs) value, checked as the flag checks it on the command line."""
    kind = _kind(action)
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise cf.error(key, f"expected an integer, got {_describe(value)}")
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise cf.error(key, f"expected a number, got {_describe(value)}")
        if not math.isfinite(value):
            raise cf.error(key, f"expected a finite number, got {value}")
    if kind == "string" and not isinstance(value, str):
        raise cf.error(key, f"expected a string, got {_describe(value)}")
    if action.type is not None:
        try:
            value = action.type(repr(value) if isinstance(value, float) else str(value))
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise cf.error(key, str(e)) from None
    if action.choices is not None and value not in action.choices:
        raise cf.error(key, f"{value!r} is not one of {', '.join(map(repr, action.choices))}")
    return value


def _value(cf: ConfigFile, key: str, action: argparse.Action, value: object) -> object:
    """The value argparse would have stored for the flag; None: as if it were not given."""
    if _kind(action) == "flag":
        if not isinstance(value, bool):
            raise cf.error(key, f"expected true or false, got {_describe(value)}")
        return True if value else action.default
    if isinstance(action.nargs, int):
        if not isinstance(value, list) or len(value) != action.nargs:
            raise cf.error(key, f"expected a list of {action.nargs} values, got {_describe(value)}")
        return [_one(cf, key, action, v) for v in value]
    return _one(cf, key, action, value)


def _set(cf: ConfigFile, options: dict, dest: str, key: str, value: object) -> None:
    if dest not in options:
        close = difflib.get_close_matches(dest, list(options), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise cf.error(key, f"unknown key{hint}; a key is a flag of `qed train` without its dashes")
    if dest in cf.values:
        raise cf.error(key, f"given twice (as {cf.keys[dest]!r} and {key!r})")
    if value is None:  # a run description's null (lr_decay_steps: none, the decay ends at --steps)
        return
    cf.values[dest] = _value(cf, key, options[dest], value)
    cf.keys[dest] = key


def _read(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise QedError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise QedError(f"{path}: is a directory, not a config file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise QedError(f"{path}: not UTF-8 text (byte {raw[e.start]:#04x} at offset {e.start})") from None
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise QedError(f"{path}: not valid JSON ({e})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise QedError(f"{path}: not valid TOML ({e})") from None
    if not isinstance(data, dict):
        raise QedError(f"{path}: expected a table of options, got {type(data).__name__}")
    return data


def load(path: str, parser: argparse.ArgumentParser) -> ConfigFile:
    """The options that a config file gives `qed train` (whose parser is `parser`)."""
    data = _read(path)
    cf = ConfigFile(path)
    options = _options(parser)
    if any(isinstance(data.get(t), dict) for t in RUN_TABLES):
        _run_description(cf, options, data)
        return cf
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest == "config":
            raise cf.error(key, "a config file cannot name another config file")
        _set(cf, options, dest, key, value)
    return cf


def _table(cf: ConfigFile, data: dict, name: str) -> dict:
    t = data.get(name)
    if not isinstance(t, dict):
        raise cf.error(name, f"a run description needs a {name!r} table, got {_describe(t)}")
    return t


def _run_description(cf: ConfigFile, options: dict, data: dict) -> None:
    """A run's config.json (qed/train.py's Trainer._describe): the flags that make that run."""
    from .data import SortTask
    from .train import TrainSettings

    for key in data:
        if key not in RUN_TABLES + RUN_NOTES:
            raise cf.error(key, f"unknown key in a run description (known: {', '.join(RUN_TABLES + RUN_NOTES)})")
    model, train, task = (_table(cf, data, t) for t in RUN_TABLES)

    for key, value in model.items():
        where = f"config.{key}"
        if key in MODEL_KEYS:
            _set(cf, options, key, where, value)
        elif key in ("bias", "tie_weights"):
            if not isinstance(value, bool):
                raise cf.error(where, f"expected true or false, got {_describe(value)}")
            _set(cf, options, "no_bias" if key == "bias" else "no_tie", where, not value)
        elif key != "vocab_size":  # the task's; compared below
            raise cf.error(where, "unknown model setting")

    defaults = TrainSettings()
    for key, value in train.items():
        where = f"train.{key}"
        if key in TRAIN_KEYS:
            _set(cf, options, key, where, value)
        elif key == "torch_compile":
            if not isinstance(value, bool):
                raise cf.error(where, f"expected true or false, got {_describe(value)}")
            _set(cf, options, "compile", where, value)
        elif key in NO_FLAG_TRAIN:
            if value != getattr(defaults, key) or isinstance(value, bool):
                raise cf.error(
                    where,
                    f"{value!r}: this setting has no flag, and `qed train` runs with "
                    f"{getattr(defaults, key)!r} (start this run from Python, qed.train.Trainer)",
                )
        else:
            raise cf.error(where, "unknown training setting")

    kind = task.get("kind")
    vocab_size = model.get("vocab_size")
    if kind == "sort":
        sort = SortTask()
        for key, value in task.items():
            where = f"task.{key}"
            if key == "length":
                _set(cf, options, "sort_length", where, value)
            elif key == "num_digits":
                _set(cf, options, "sort_digits", where, value)
            elif key in ("test_fraction", "split_seed"):
                if value != getattr(sort, key):
                    raise cf.error(where, f"{value!r}: `qed train` splits the sort task with {getattr(sort, key)!r}")
            elif key not in ("kind", "sha256"):
                raise cf.error(where, "unknown sort task setting")
        if vocab_size is not None and vocab_size != task.get("num_digits"):
            raise cf.error(
                "config.vocab_size", f"{vocab_size!r} is not the sort task's {task.get('num_digits')!r} digits"
            )
    elif kind == "text":
        for key, value in task.items():
            where = f"task.{key}"
            if key == "path":
                _set(cf, options, "data", where, value)
            elif key == "sha256":
                if not isinstance(value, str):
                    raise cf.error(where, f"expected a string, got {_describe(value)}")
                cf.data_sha256 = value
            elif key == "vocab":
                if not isinstance(value, list):
                    raise cf.error(where, f"expected a list of characters, got {_describe(value)}")
                if vocab_size is not None and vocab_size != len(value):
                    raise cf.error(
                        "config.vocab_size", f"{vocab_size!r} is not the {len(value)} characters of task.vocab"
                    )
            elif key != "kind":
                raise cf.error(where, "unknown text task setting")
    else:
        raise cf.error("task.kind", f"expected 'sort' or 'text', got {_describe(kind)}")


def check_data(cf: ConfigFile, path: str, sha256: str) -> None:
    """A run description's text file must still hold the run's data (its sha256)."""
    if cf.data_sha256 is not None and cf.values.get("data") == path and sha256 != cf.data_sha256:
        raise cf.error(
            "task.sha256",
            f"{os.path.abspath(path)} has changed since the run (sha256 {sha256[:12]}…, the run's "
            f"{cf.data_sha256[:12]}…); give --data FILE to train on it as it is now",
        )

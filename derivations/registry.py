"""The registry: every claim and every op, collected from the topic modules.

A topic module (`derivations/attention.py`, ...) defines `CLAIMS` (a list of `Claim`),
`OPS` (a list of `Op`) and, where it has constant tables, `TABLES` (a list of `Table`). Adding a module adds its claims, code and tests; nothing else changes.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .core import Claim
from .ops import Composite, Op, Table

_INFRASTRUCTURE = {"arrays", "core", "normalise", "numeric", "ops", "registry", "expectation"}


@lru_cache(maxsize=None)
def topic_modules() -> tuple:
    import derivations

    names = sorted(m.name for m in pkgutil.iter_modules(derivations.__path__)
                   if m.name not in _INFRASTRUCTURE and not m.name.startswith("_"))
    return tuple(importlib.import_module(f"derivations.{n}") for n in names)


@lru_cache(maxsize=None)
def claims() -> tuple[Claim, ...]:
    out = []
    seen = set()
    for mod in topic_modules():
        for c in getattr(mod, "CLAIMS", []):
            if c.id in seen:
                raise ValueError(f"duplicate claim id {c.id}")
            seen.add(c.id)
            c.module = mod.__name__
            out.append(c)
    return tuple(out)


@lru_cache(maxsize=None)
def ops() -> tuple[Op, ...]:
    out = []
    for mod in topic_modules():
        out.extend(getattr(mod, "OPS", []))
    names = [o.name for o in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate op names: {names}")
    return tuple(sorted(out, key=lambda o: o.name))


@lru_cache(maxsize=None)
def tables() -> tuple[Table, ...]:
    out = []
    for mod in topic_modules():
        out.extend(getattr(mod, "TABLES", []))
    names = [t.name for t in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate table names: {names}")
    return tuple(sorted(out, key=lambda t: t.name))


def table(name: str) -> Table:
    for t in tables():
        if t.name == name:
            return t
    raise KeyError(f"no table {name!r}; known: {', '.join(t.name for t in tables())}")


def claim(claim_id: str) -> Claim:
    for c in claims():
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in claims())}")


def op(name: str) -> Op:
    for o in ops():
        if o.name == name:
            return o
    raise KeyError(f"no op {name!r}; known: {', '.join(o.name for o in ops())}")


@lru_cache(maxsize=None)
def composites() -> tuple[Composite, ...]:
    out = []
    for mod in topic_modules():
        out.extend(getattr(mod, "COMPOSITES", []))
    return tuple(sorted(out, key=lambda c: c.name))

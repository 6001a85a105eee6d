"""The registry: every claim and every op, collected from the topic modules.

A topic module (`derivations/attention.py`, ...) defines `CLAIMS` (a list of `Claim`),
`OPS` (a list of `Op`) and, where it has constant tables, `TABLES` (a list of `Table`). Adding a module adds its claims, code and tests; nothing else changes.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass

from .language.ops import Composite, Op, Table
from .proof.core import Claim

_NOT_TOPICS = {"registry"}  # the hub; language/ and proof/ are packages, not topics
_LOADING: list = []  # non-empty while topic_modules() imports the topic modules


def loading() -> bool:
    """Whether the topic modules are being imported: a module may prove a lemma while it is
    imported (a derived backward's), and a registry list read then lacks that module and those
    after it, so it is not kept."""
    return bool(_LOADING)


def cache(fn):
    """functools.cache, except that a value computed while the topic modules load is not kept."""
    memo: dict = {}

    @functools.wraps(fn)
    def cached():
        if "value" in memo:
            return memo["value"]
        value = fn()
        if not loading():
            memo["value"] = value
        return value

    return cached


@functools.cache
def topic_modules() -> tuple:
    import derivations

    names = sorted(
        m.name
        for m in pkgutil.iter_modules(derivations.__path__)
        if not m.ispkg and m.name not in _NOT_TOPICS and not m.name.startswith("_")
    )
    _LOADING.append(True)
    try:
        return tuple(importlib.import_module(f"derivations.{n}") for n in names)
    finally:
        _LOADING.pop()


@cache
def claims() -> tuple[Claim, ...]:
    """The hand-written claims of every topic module (the sources' derivation steps), then the
    claims generated from every op's specification (derivations/proof/obligations.py)."""
    from .proof.obligations import claims_for

    out = []
    seen = set()
    for mod in topic_modules():
        for c in getattr(mod, "CLAIMS", []):
            if c.id in seen:
                raise ValueError(f"duplicate claim id {c.id}")
            seen.add(c.id)
            c.module = mod.__name__
            out.append(c)
    for o in ops():
        if not o.spec:
            continue
        for c in claims_for(o):
            if c.id in seen:
                raise ValueError(f"duplicate claim id {c.id}: generated for op {o.name} and written by hand")
            seen.add(c.id)
            out.append(c)
    from .proof.tables_steps import step_claims, table_claims

    for unit, generate in [(t, table_claims) for t in tables()] + [(s, step_claims) for s in steps()]:
        for c in generate(unit):  # <table>.entries, <step>.update (derivations/proof/tables_steps.py)
            if c.id in seen:
                raise ValueError(f"duplicate claim id {c.id}: generated for {unit.name} and written by hand")
            seen.add(c.id)
            out.append(c)
    check_claim_ids(list(ops()) + list(tables()) + list(composites()) + list(steps()), {c.id for c in out})
    return tuple(out)


def check_claim_ids(units, known: set) -> None:
    """Every claim an op (or table, step, composite) cites must exist: an unknown id would be
    printed as "Proved by the claims" in the generated file while nothing proves it."""
    for u in units:
        unknown = [c for c in u.claims if c not in known]
        if unknown:
            raise ValueError(f"{type(u).__name__.lower()} {u.name} names unknown claims: {unknown}")


def generated_claim_ids(o: Op) -> list[str]:
    from .proof.obligations import obligations

    return [ob.id for ob in obligations(o)] if o.spec else []


@cache
def ops() -> tuple[Op, ...]:
    out = []
    for mod in topic_modules():
        for o in getattr(mod, "OPS", []):
            # provenance: the module that declares the op (lists it in OPS), never a helper's
            if o.module and o.module != mod.__name__:
                raise ValueError(
                    f"op {o.name} is declared in {mod.__name__} (its OPS) but names "
                    f"module {o.module!r}: the generated header would cite the wrong "
                    "module; omit `module` (the registry sets it)"
                )
            o.module = mod.__name__
            out.append(o)
    names = [o.name for o in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate op names: {names}")
    return tuple(sorted(out, key=lambda o: o.name))


@cache
def tables() -> tuple[Table, ...]:
    out = []
    for mod in topic_modules():
        out.extend(getattr(mod, "TABLES", []))
    names = [t.name for t in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate table names: {names}")
    return tuple(sorted(out, key=lambda t: t.name))


@cache
def steps() -> tuple:
    """The optimiser steps: the values of every topic module's `STEPS` dict (derivations/optim.py's
    `Step`), sorted by name."""
    out = []
    for mod in topic_modules():
        for st in dict(getattr(mod, "STEPS", {}) or {}).values():
            st.module = getattr(st, "module", None) or mod.__name__
            out.append(st)
    names = [st.name for st in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate step names: {names}")
    return tuple(sorted(out, key=lambda st: st.name))


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


@cache
def composites() -> tuple[Composite, ...]:
    out = []
    for mod in topic_modules():
        out.extend(getattr(mod, "COMPOSITES", []))
    return tuple(sorted(out, key=lambda c: c.name))


@cache
def programs() -> tuple:
    """The model programs (derivations/language/program.py): every topic module's `PROGRAMS`."""
    out = []
    for mod in topic_modules():
        for prog in getattr(mod, "PROGRAMS", []):
            out.append((prog, mod.__name__))
    names = [p.name for p, _ in out]
    if len(names) != len(set(names)):
        raise ValueError(f"duplicate program names: {names}")
    return tuple(sorted(out, key=lambda pm: pm[0].name))


@dataclass(frozen=True)
class Artefact:
    """One thing codegen prints, and the module it goes into (generated/<backend>/<file>.py):
    an op (its own module), a constant table (the module of the op `Table.file`, or one of its
    own), an optimiser step or a composite (their own)."""

    kind: str  # "op", "table", "step", "composite" or "program"
    name: str
    file: str
    unit: object  # the Op, Table, Step or Composite
    claims: tuple


@cache
def artefacts() -> tuple[Artefact, ...]:
    """Everything codegen prints, ops, tables, steps, composites, each kind sorted by name: the
    one list that codegen and the docs both read."""
    units = (
        [("op", o, o.name) for o in ops()]
        + [("table", t, t.file) for t in tables()]
        + [("step", s, s.name) for s in steps()]
        + [("composite", c, c.name) for c in composites()]
        + [("program", p, p.name) for p, _ in programs()]
    )
    return tuple(Artefact(kind, u.name, file, u, tuple(getattr(u, "claims", ()) or ())) for kind, u, file in units)

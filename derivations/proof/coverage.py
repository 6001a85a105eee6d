"""Coverage: is every printed expression on the path of a proved claim?

The printed expressions are what `make codegen` prints from the registry:

    op      every forward and backward assignment (one line of `<op>_forward`/`<op>_backward`)
    table   every array's entry formula
    step    every assignment of the update
    layout  every composite's call layout (multi-head attention's head split and merge)

An op's line is covered when it lies on the dependency path of a generated claim
(`<op>.forward`, `<op>.backward.<grad>`, see `mutation.path`) whose certificate is proved; a
table's entries by `<table>.entries`; a step's lines by `<step>.update`; a composite's layout by
every claim the composite names. A line that no proved claim reads (dead code, or an op with no
specification) is uncovered, and `qed prove` fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import registry


@dataclass
class Coverage:
    total: int = 0
    covered: int = 0
    uncovered: list = field(default_factory=list)  # "op layernorm: backward line 3 (dxhat)"
    per_unit: dict = field(default_factory=dict)  # unit -> [covered, total]

    @property
    def complete(self) -> bool:
        return self.covered == self.total

    def add(self, unit: str, what: str, ok: bool) -> None:
        self.total += 1
        got = self.per_unit.setdefault(unit, [0, 0])
        got[1] += 1
        if ok:
            self.covered += 1
            got[0] += 1
        else:
            self.uncovered.append(f"{unit}: {what}")

    def line(self) -> str:
        pct = 100.0 * self.covered / self.total if self.total else 100.0
        return f"coverage {self.covered}/{self.total} printed expressions ({pct:.0f} %)"


def compute(proved: set[str]) -> Coverage:
    """Coverage given the ids of the claims whose certificates are proved (every mutant
    refuted)."""
    from .mutation import path
    from .obligations import obligations

    cov = Coverage()
    for op in registry.ops():
        on: set = set()
        for ob in obligations(op) if op.spec else []:
            if ob.id in proved:
                on |= path(op, ob)
        for scope in ("forward", "backward"):
            for pos, a in enumerate(getattr(op, scope)):
                cov.add(f"op {op.name}", f"{scope} line {pos} ({a.target.name})", (scope, pos) in on)
    for table in registry.tables():
        for arr in table.arrays:
            cov.add(f"table {table.name}", f"entry {arr.name}", f"{table.name}.entries" in proved)
    for step in registry.steps():
        for pos, a in enumerate(step.assigns):
            cov.add(f"step {step.name}", f"line {pos} ({a.target.name})", f"{step.name}.update" in proved)
    for comp in registry.composites():
        cov.add(f"composite {comp.name}", "layout", all(c in proved for c in comp.claims))
    return cov

"""The context of a loop over key blocks (derivations/attention_tiled.py's `BlockLoop`): its init,
body and end lines printed by the backend's printer from the proved assignments themselves.

The template lays out the loop (`for P in range(0, n, block)`, the block size `B`); this module
prints what runs inside it:

* `init`: each carried array's starting value (−∞, 0) as a full array of its stored shape, or
  the init line itself where its value is an array expression (δ = rowsum(dO ⊙ O));
* `body`: the block's lines. With the causal flag the rows before the block's first key see
  none of its keys (`attention_tiled.causal_skip`: the update is the identity for them), so the
  body runs on the rows R = P … m − 1 only: every per-query-row array (m rows) is read through
  a view `<name>_r` of those rows, the block's causal mask starts at P − R, and the carried
  arrays are written back into their rows after the body;
* `end`: the lines after the last block.

Nothing here is a formula: the values are the Assigns' expressions, printed.
"""

from __future__ import annotations

import sympy as sp

from derivations.language.arrays import Array

from ..lowering import lower_body
from ..printers import printer_for

__all__ = ["loop_context"]

ROWS_START = sp.Symbol("R", integer=True, nonnegative=True)  # the first query row a block visits


def _row_arrays(loop, rows) -> list[Array]:
    """The arrays with one row per query (shape (m, ·)) that the body reads on entry (before it
    assigns them: the inputs and the carried state), in a fixed order."""
    entry, assigned = set(), set()
    for a in loop.body:
        entry |= {s for s in sp.sympify(a.expr).free_symbols if isinstance(s, Array)} - assigned
        assigned.add(a.target)
    return sorted((a for a in entry if a.shape[0] == rows), key=lambda a: a.name)


def _restricted(loop, rows):
    """The body on the rows R … m − 1: per-row arrays renamed to their views, the mask's start
    shifted by R."""
    from derivations.attention_tiled import BlockCausalMask

    views = {a: Array(a.name + "_r", a.shape, latex=a.name) for a in _row_arrays(loop, rows)}
    body = []
    for line in loop.body:
        expr = (
            sp.sympify(line.expr)
            .replace(
                lambda e: isinstance(e, BlockCausalMask), lambda e: BlockCausalMask(e.args[0], e.args[1] - ROWS_START)
            )
            .xreplace(views)
        )
        body.append(type(line)(views.get(line.target, line.target), expr, line.when, line.note))
    return body, views


def loop_context(loop, backend: str, rows) -> dict:
    """Printed text of one BlockLoop for one backend: init, body (on the row views), end, the
    views to take and the carried arrays to write back, the block rows each output takes."""
    printer = printer_for(backend)
    batched: dict = {}

    def mark(lines):
        for a in lines:
            batched[a.target] = True
            for s in sp.sympify(a.expr).free_symbols:
                if isinstance(s, Array):
                    batched[s] = True

    body, views = _restricted(loop, rows)
    init = [a for a in loop.init if not sp.sympify(a.expr).free_symbols]
    init_lines = [a for a in loop.init if a not in init]
    for lines in (loop.init, loop.body, body, loop.end):
        mark(lines)
    full = [
        (a.target.name, printer.doprint(a.target.shape[0]), printer.doprint(a.target.shape[1]), printer.doprint(a.expr))
        for a in init
    ]
    names = {a.name for a in batched}
    return {
        "full": full,  # (name, rows, cols, value)
        "init": lower_body(init_lines, printer_for(backend), batched, taken=names),
        "body": lower_body(body, printer, batched, taken=names),
        "views": [(views[a].name, a.name) for a in views],
        "carried": [(views[a].name, a.name) for a in loop.carried if a in views],
        "rows_out": [
            (out.name, blk.name, printer.doprint(out.shape[0]), printer.doprint(out.shape[1]))
            for out, blk in loop.rows_out.items()
        ],
        "end": lower_body(loop.end, printer_for(backend), batched, taken=names),
        "modules": printer.modules,
    }

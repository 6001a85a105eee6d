"""The context of `generated/<backend>/<step>.py`: an optimiser step (derivations/optim.py's
`Step`), `<name>_step(*inputs, *, options) -> outputs`, elementwise over any shape."""

from __future__ import annotations

from ..analysis import arrays_in, size_symbols
from ..lowering import Lowering
from ..names import CodegenError, PrinterError, valid_name
from ..printers import formula_comment, printer_for
from .common import (
    ARRAY_TYPE,
    backend_title,
    coercion,
    def_lines,
    docstring_text,
    import_lines,
    option_doc,
    option_param,
    returns_type,
    source_path,
    wrapped,
)
from .signature import checked_lines, option_fields, signature_lines

__all__ = ["step_context"]


def step_context(step, backend: str) -> dict:
    """Everything step.py.j2 needs for one step and one backend."""
    where = f"step {step.name} ({step.module})"
    for n in [a.name for a in step.inputs] + [o.name for o in step.options]:
        valid_name(where, n, "argument")
    option_symbols = {o.symbol: o.name for o in step.options if o.symbol is not None}
    defined = set(step.inputs)
    for asg in step.assigns:
        missing = arrays_in(asg.expr) - defined
        if missing:
            raise CodegenError(
                f"{where}: line {asg.target.name} reads {sorted(m.name for m in missing)} before they are defined"
            )
        sizes = size_symbols(asg.expr, option_symbols)
        if sizes:
            raise CodegenError(
                f"{where}: a step is elementwise but line {asg.target.name} uses "
                f"the sizes {sorted(s.name for s in sizes)}"
            )
        if asg.when is not None:
            raise CodegenError(f"{where}: guarded lines are not supported in steps")
        defined.add(asg.target)
    for o in step.outputs:
        if o not in defined:
            raise CodegenError(f"{where}: output {o.name} is never computed")
    printer = printer_for(backend, names=option_symbols)
    lowering = Lowering(
        printer,
        {a.name for a in step.inputs} | {o.name for o in step.options} | {asg.target.name for asg in step.assigns},
    )
    try:
        body = []
        for asg in step.assigns:  # elementwise: every array has the one shape
            body += [f"# {asg.note}"] if asg.note else []
            body.append(formula_comment(asg.target.name, asg.expr, indent=4))
            body.extend(lowering.assign(asg.target.name, asg.expr, full=lambda e: None if printer.scalar(e) else "all"))
    except PrinterError as e:
        raise CodegenError(f"{where}, {backend}: {e}") from None
    returns = ["dtype"] if printer.uses_dtype else []
    fields = {
        "options": option_fields(step.options),  # t >= 1, 0 <= beta < 1, eps > 0
        "floats": tuple((a.name, 0, False, "(any shape)") for a in step.inputs),
        "same_shape": tuple(a.name for a in step.inputs) if len(step.inputs) > 1 else (),
        "returns": tuple(returns),
    }
    return {
        "name": step.name,
        "title": step.title,
        "latex": wrapped(docstring_text(where, step.latex, "latex"), 96),
        "backend_title": backend_title(backend),
        "claims": wrapped(", ".join(step.claims) + f" ({source_path(step.module)})."),
        "doc": wrapped(step.doc) if step.doc else [],
        "source": source_path(step.module),
        "import_lines": import_lines(set(printer.modules) | {"np" if backend == "numpy" else "torch"}),
        "def_step": def_lines(
            f"{step.name}_step",
            [f"{a.name}: {ARRAY_TYPE[backend]}" for a in step.inputs]
            + (["*"] + [option_param(o) for o in step.options] if step.options else []),
            returns_type([ARRAY_TYPE[backend]] * len(step.outputs)),
        ),
        "arg_docs": [f"{a.name}: float array (any shape, all alike)" for a in step.inputs]
        + [line for o in step.options for line in option_doc(o, required_shows_default=False)],
        "coercions": [c for c in (coercion(o, step.name) for o in step.options) if c],
        "signature_lines": signature_lines("SIGNATURE", step.name, fields),
        "checks": checked_lines("SIGNATURE", returns, [a.name for a in step.inputs] + [o.name for o in step.options]),
        "body": body,
        "outputs": ", ".join(o.name for o in step.outputs),
    }

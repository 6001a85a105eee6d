"""File rendering: every generated module's text, from its context and its template.

`render_all()` reads the registry's list of artefacts (`derivations.registry.artefacts()`: ops,
tables, steps, composites) and renders, for each backend, one module per op (with the tables
whose `Table.file` is that op), one per remaining file of tables, one per step and composite,
the validation module, the support module (codegen/support/, copied verbatim), NumPy's special
functions, and the package `__init__`s; each text is tidied and given its header (headers.py). `python -m codegen` writes them (__main__.py).
"""

from __future__ import annotations

from pathlib import Path

import jinja2
import sympy as sp

from derivations.language.ops import Op

from .contexts import (
    composite_context,
    model_ops_context,
    op_context,
    package_init_context,
    special_context,
    step_context,
    tables_module_context,
    validate_context,
)
from .headers import tidy, with_header
from .names import CodegenError, PrinterError

__all__ = [
    "ROOT",
    "TEMPLATES",
    "BACKENDS",
    "environment",
    "render",
    "render_op",
    "render_tables",
    "render_all",
    "generated_paths",
]

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "templates"
BACKENDS = ("numpy", "torch")


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, ctx: dict, env: jinja2.Environment | None = None) -> str:
    """`template` rendered with `ctx`, tidied, with the header naming `ctx["source"]`."""
    text = (env or environment()).get_template(template).render(**ctx)
    return with_header(tidy(text), ctx["source"], template)


def render_op(op: Op, backend: str, env: jinja2.Environment | None = None, tables=()) -> str:
    """The text of generated/<backend>/<op>.py (with the table functions of `tables`)."""
    return render(f"{backend}_op.py.j2", op_context(op, backend, tables), env)


def render_tables(tables_in_file: list, backend: str, env: jinja2.Environment | None = None) -> str:
    """The text of generated/<backend>/<file>.py for tables that have no op of their own."""
    return render("tables_module.py.j2", tables_module_context(tables_in_file, backend), env)


def render_all(
    ops=None, *, raise_errors: bool = True, errors_out: dict | None = None, table_list=None
) -> dict[str, str]:
    """Every generated file, path relative to the repository root -> text.

    An op (or a file of tables) that cannot be generated raises CodegenError (all such in one
    message), or, with `raise_errors=False`, is left out and its message put in
    `errors_out[op or file name]`. Tables go into the file of the op named `Table.file`, or
    into a module of their own. `ops` and `table_list` replace the registry's.
    """
    from derivations.registry import artefacts

    units = artefacts()
    of = lambda kind: [a.unit for a in units if a.kind == kind]  # noqa: E731
    ops = of("op") if ops is None else list(ops)
    env = environment()
    files: dict[str, str] = {}
    names = [o.name for o in ops]
    errors: dict[str, str] = {}
    by_file: dict = {}
    for t in of("table") if table_list is None else table_list:
        by_file.setdefault(t.file, []).append(t)
    step_names = {st.name for st in of("step")}
    for file in by_file:
        if file in step_names or not file.isidentifier() or file.startswith("_"):
            errors.setdefault(
                file,
                f"tables {[t.name for t in by_file[file]]}: the file name {file!r} is a step's or not a module name",
            )

    def attempt(name: str, path: str, make) -> None:
        try:
            files[path] = make()
        except (CodegenError, PrinterError) as e:
            errors.setdefault(name, str(e))

    for backend in BACKENDS:
        for op in ops:
            attempt(
                op.name,
                f"generated/{backend}/{op.name}.py",
                lambda op=op, backend=backend: render_op(op, backend, env, by_file.get(op.name, ())),
            )
        for file, group in sorted(by_file.items()):
            if file not in names and file not in errors:
                attempt(
                    file,
                    f"generated/{backend}/{file}.py",
                    lambda group=group, backend=backend: render_tables(group, backend, env),
                )
        files[f"generated/{backend}/_validate.py"] = render(f"{backend}_validate.py.j2", validate_context(backend), env)
        support = f"codegen/support/{backend}_support.py"  # the speed idioms, copied as written
        files[f"generated/{backend}/_support.py"] = with_header((ROOT / support).read_text(), support, None)
        if backend == "numpy":  # erf for float32 arrays (SciPy's float32 loop is scalar)
            files["generated/numpy/_special.py"] = render("numpy_special.py.j2", special_context(), env)
    for comp in of("composite"):
        for backend in BACKENDS:
            files[f"generated/{backend}/{comp.name}.py"] = render(
                f"{backend}_{comp.template}.py.j2", composite_context(comp, backend), env
            )
        names.append(comp.name)
    from derivations.registry import programs

    from .contexts.program import program_context

    for prog, module in programs():
        for backend in BACKENDS:
            files[f"generated/{backend}/{prog.name}.py"] = render(
                "program.py.j2", program_context(prog, backend, module), env
            )
        names.append(prog.name)
    for st in of("step"):
        for backend in BACKENDS:
            attempt(
                st.name,
                f"generated/{backend}/{st.name}.py",
                lambda st=st, backend=backend: render("step.py.j2", step_context(st, backend), env),
            )
        names.append(st.name)
    names = sorted(n for n in names if n not in errors)
    table_files = sorted((t.name, f) for f, group in by_file.items() if f not in errors for t in group)
    files["generated/model_ops.py"] = render(
        "model_ops.py.j2", model_ops_context([o for o in ops if o.name not in errors]), env
    )
    for key in ("numpy", "torch", None):
        path = f"generated/{key}/__init__.py" if key else "generated/__init__.py"
        files[path] = render("package_init.py.j2", package_init_context(key, names, table_files), env)
    if errors and raise_errors:
        raise CodegenError("\n".join(f"{n}: {m}" for n, m in sorted(errors.items())))
    if errors_out is not None:
        errors_out.update(errors)
    return dict(sorted(files.items()))


def stability_warnings(ops=None) -> list[str]:
    """One line per known-unstable form left in a printed line (derivations/language/stabilise.py,
    `unstable_forms`): e^{u} − 1 not as expm1, log(1 + …) not as log1p, log Σ e^{…} without the
    max shift, v + √(v² + c) not rationalised. `ops` replaces the registry's."""
    from derivations.language.stabilise import unstable_forms

    if ops is None:
        from derivations.registry import artefacts

        ops = [a.unit for a in artefacts() if a.kind == "op"]
    lines = []
    for op in ops:
        for part, assigns in (("forward", op.forward), ("backward", op.backward)):
            for a in assigns:
                for what, node in unstable_forms(a.expr):
                    lines.append(f"{op.name}: the printed {part} has {what}: {a.target.name} = … {sp.sstr(node)} …")
    return lines


def generated_paths(root: Path = ROOT) -> set[str]:
    """The generated files now on disk (relative paths), caches excluded."""
    out = set()
    base = root / "generated"
    if base.exists():
        for p in base.rglob("*.py"):
            if "__pycache__" not in p.parts:
                out.add(p.relative_to(root).as_posix())
    return out

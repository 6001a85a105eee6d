"""`python -m codegen`: write generated/ (only files whose content changed; stale op files are
removed). `python -m codegen --check`: render in memory, exit 1 listing every file that differs,
is missing, or is stale; exit 0 when generated/ is up to date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .render import ROOT, generated_paths, render_all, stability_warnings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if generated/ differs from a fresh render"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root = args.root
    errors: dict = {}
    files = render_all(raise_errors=False, errors_out=errors)
    for name, message in sorted(errors.items()):
        print(f"codegen: error: cannot generate {name}: {message}", file=sys.stderr)
    # the files of an op (or a table file) that failed are neither rewritten nor removed
    keep = {f"generated/{b}/{n}.py" for n in errors for b in ("numpy", "torch")}
    on_disk = generated_paths(root)
    stale = sorted(on_disk - set(files) - keep)
    changed = [p for p, text in files.items() if not (root / p).exists() or (root / p).read_text() != text]
    if args.check:
        for p in changed:
            print(f"{'differs' if (root / p).exists() else 'missing'}: {p}")
        for p in stale:
            print(f"stale: {p}")
        if changed or stale or errors:
            print(
                f"codegen --check: {len(changed) + len(stale)} file(s) out of date, "
                f"{len(errors)} op(s) or table file(s) that cannot be generated; run `make codegen`",
                file=sys.stderr,
            )
            return 1
        print(f"codegen --check: {len(files)} files up to date")
        return 0
    # a declared forward (or a derived backward) that still prints a form known to cancel or
    # overflow, by op: the stable rewrites did not apply to it (derivations/language/stabilise.py)
    for line in stability_warnings():
        print(f"codegen: warning: {line}", file=sys.stderr)
    for p in changed:
        path = root / p
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text := files[p])
        print(f"wrote {p} ({len(text.splitlines())} lines)")
    for p in stale:
        (root / p).unlink()
        print(f"removed stale {p}")
    if not changed and not stale:
        print(f"codegen: {len(files)} files up to date")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

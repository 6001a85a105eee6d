"""Kernels printed into a temporary package, for ops that are not (or not only) in generated/.

`qed bench --ops` prints each op's derived backward there next to the printed one, and the tests
print ops declared on the spot (as a user would under derivations/) without touching generated/:
the package `<name>.numpy` / `<name>.torch` holds copies of the generated support modules
(_support, _validate, _special) and each op's module as `codegen.render.render_op` prints it.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

SUPPORT = ("_support.py", "_validate.py", "_special.py")


class ScratchKernels:
    def __init__(self):
        from codegen.render import ROOT

        self.dir = Path(tempfile.mkdtemp(prefix="qed_scratch_"))
        self.name = re.sub(r"\W", "_", self.dir.name)
        pkg = self.dir / self.name
        for backend in ("numpy", "torch"):
            (pkg / backend).mkdir(parents=True)
            for support in SUPPORT:
                src = ROOT / "generated" / backend / support
                if src.exists():
                    shutil.copy(src, pkg / backend / support)
            (pkg / backend / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        sys.path.insert(0, str(self.dir))

    def module(self, op, backend: str):
        """generated/<backend>/<op>.py as codegen prints it, imported from the scratch package."""
        from codegen.render import render_op

        path = self.dir / self.name / backend / f"{op.name}.py"
        path.write_text(render_op(op, backend))
        key = f"{self.name}.{backend}.{op.name}"
        sys.modules.pop(key, None)
        importlib.invalidate_caches()
        return importlib.import_module(key)

    def close(self) -> None:
        if str(self.dir) in sys.path:
            sys.path.remove(str(self.dir))
        for key in [k for k in sys.modules if k.startswith(self.name)]:
            del sys.modules[key]
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

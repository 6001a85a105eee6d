"""The tooling package: proofs, audit, docs, figures, benchmarks, LaTeX lint, translation
validation and numerical edges. It may import derivations/ and codegen/; the runtime (qed/)
never imports it except lazily, inside the command functions of qed/cli.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: qed/tools/ -> qed/ -> root

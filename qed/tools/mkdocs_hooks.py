"""MkDocs hooks for the qed site (see mkdocs.yml).

* The "Derivations" entry of the nav becomes a section: the catalogue, then one page per
  catalogue row, grouped by topic (`catalogue.TOPICS`: attention, normalisation, activations,
  positions, loss, optimisers, …), in the catalogue's order within each.
* The pages link to the repository's code as files relative to the repository
  (`../../generated/numpy/attention.py` from `docs/derivations/…`), which works on a forge.
  For the site, every such link that leaves `docs/` and names an existing file is rewritten to
  `src/<path>` and the file is copied there; a link to a missing file is left as it is, and
  `mkdocs build --strict` fails on it.
* The search index gets plain text for the mathematics: each `\\( … \\)` and `\\[ … \\]` of an
  entry becomes Unicode text (`∂ℒ/∂S = A ⊙ …`, by pylatexenc), so that a result's snippet reads
  as mathematics, not as LaTeX source.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # loaded by path: qed/tools/ -> qed/ -> root
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?\))")
SRC = "src"


def _outside_target(page_uri: str, target: str) -> str | None:
    """The repository path a docs-relative link points to, if it leaves docs/ to a file."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), target))
    if joined.startswith("docs/") or joined.startswith(".."):
        return None
    return joined if (ROOT / joined).is_file() else None


def on_config(config, **kwargs):
    from qed.tools import catalogue

    docs_dir = Path(config["docs_dir"])
    entries = []  # (topic, label, path): catalogue rows in their order, then the pages beyond it
    for row in catalogue.ROWS:
        if (docs_dir / "derivations" / f"{row.page}.md").exists():
            entries.append((catalogue.topic_of(row.page), row.label, f"derivations/{row.page}.md"))
    for path in sorted((docs_dir / "derivations").glob("*.md")):  # pages beyond the catalogue
        if path.stem != "index" and not catalogue.is_catalogue_page(path.stem):
            entries.append((catalogue.topic_of(path.stem), path.stem, f"derivations/{path.name}"))
    order = [t for t, _ in catalogue.TOPICS] + ["Beyond the catalogue"]
    pages: list = [{"Catalogue": "derivations/index.md"}]
    for topic in order:
        group = [{label: path} for t, label, path in entries if t == topic]
        if group:
            pages.append({topic: group})
    nav = config.get("nav") or []
    for i, item in enumerate(nav):
        if isinstance(item, dict) and item.get("Derivations") == "derivations/index.md":
            nav[i] = {"Derivations": pages}
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    wanted: set[str] = set()
    for f in files.documentation_pages():
        text = Path(f.abs_src_path).read_text(encoding="utf-8")
        for m in LINK.finditer(text):
            target = _outside_target(f.src_uri, m.group(2))
            if target:
                wanted.add(target)
    for path in sorted(wanted):
        files.append(File.generated(config, f"{SRC}/{path}", abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    def fix(m):
        target = _outside_target(page.file.src_uri, m.group(2))
        if target is None:
            return m.group(0)
        new = posixpath.relpath(f"{SRC}/{target}", posixpath.dirname(page.file.src_uri) or ".")
        return m.group(1) + new + m.group(3)

    return LINK.sub(fix, markdown)


MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def plain_math(text: str) -> str:
    """`text` with each inline `\\(…\\)` and display `\\[…\\]` formula as plain Unicode text."""
    from pylatexenc.latex2text import LatexNodes2Text

    convert = LatexNodes2Text(math_mode="text", strict_latex_spaces=True)

    def one(m):
        latex = m.group(1) if m.group(1) is not None else m.group(2)
        try:
            return " ".join(convert.latex_to_text(latex).split())
        except Exception:  # noqa: BLE001 - a formula pylatexenc cannot read keeps its text
            return latex

    return MATH.sub(one, text)


def on_post_build(config, **kwargs):
    """The search index's titles and texts with plain-text mathematics (`plain_math`)."""
    import json

    index = Path(config["site_dir"]) / "search" / "search_index.json"
    if not index.exists():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        for key in ("title", "text"):
            if isinstance(doc.get(key), str):
                doc[key] = plain_math(doc[key])
    index.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

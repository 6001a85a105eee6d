"""Certificates kept between runs of `qed prove`, each under a key that covers what it depends on.

A claim's certificate depends on the source of the module that states it, on every project module
that module imports (transitively, function-level imports included), on the proof machinery
(derivations/proof/, derivations/language/, the registry) and on the versions of Python, SymPy,
NumPy, mpmath, SciPy, PyTorch and qed. Its key is the SHA-256 of all of those: the paths and the
bytes of each file, and the version strings. A judge's result for one unit (an op, a step, a table,
mha, the tiled loops) in one backend is keyed the same way over the judges' own source, the
derivation modules the unit's expected values come from, and the printed files it executes (the
generated file and every generated module it imports).

An entry is a JSON file `<key>.json` holding its key, what it is (`claim softmax.forward`), the
payload and a digest of the three. It is used only if it parses, names the key and the thing that
was asked for, and its digest matches; otherwise it is ignored with one line and the work is done
again. Only results that passed are stored, so a failure is always recomputed.

The digest detects damage, not forgery: anyone who can write the cache directory can write a
well-formed entry. `qed prove --no-cache` trusts nothing stored (CI proves that way), and
`QED_CACHE_DIR` moves the cache (default: `.qed_cache/` at the repository root).

The run's index (every claim and judged unit with its key) is itself an entry, keyed over every
file any of those keys covers; a fixed entry names those files. An unchanged tree is then read
back without importing the registry: that is what makes `qed prove` with nothing changed fast.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from pathlib import Path

from . import ROOT

__all__ = ["Cache", "Keys", "closure", "versions", "FORMAT"]

FORMAT = "qed-prove-cache 1"
PACKAGES = ("derivations", "codegen", "qed", "generated")  # the project's own importable packages

# the proof machinery: every claim's key covers these whole folders and files
MACHINERY = ("derivations/proof", "derivations/language", "derivations/registry.py", "derivations/__init__.py")
# the files that turn a proof into a certificate (not followed: their imports are the tools')
CERTIFICATE_WRITERS = ("qed/tools/prove.py", "qed/tools/check/transcript.py")
# the judges' machinery: their entry module (its imports are followed from there)
JUDGE_ENTRY = "qed/tools/judges.py"


def versions() -> str:
    """The versions a result depends on, read from the installed distributions' metadata (no
    import of the libraries themselves: the cached path of `qed prove` imports no SymPy)."""
    from importlib.metadata import PackageNotFoundError, version

    out = [f"python {sys.version.split()[0]}"]
    for dist in ("sympy", "numpy", "mpmath", "scipy", "torch", "qed"):
        try:
            out.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist} absent")
    return "; ".join(out)


# ------------------------------------------------------------------------------- import closure
def _module_path(name: str) -> Path | None:
    """The file of a project module (`derivations.softmax` -> derivations/softmax.py), or None
    for a module outside the project (sympy, numpy, ...)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path) -> str:
    """The package a relative import in `path` starts from (a package's own `__init__` included)."""
    return ".".join(path.relative_to(ROOT).parts[:-1])


def _imported_names(path: Path) -> set[str]:
    """Every module name an `import` or `from ... import` anywhere in the file may load (a
    `from pkg import name` may load the module pkg.name, so both are listed)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return set()  # the file's own bytes are in the key; a file that does not parse fails its run
    out: set[str] = set()
    package = _package_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base_parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def _edges(path: Path, names=None) -> list[Path]:
    """The project files one file's imports load (the `__init__` of every package on the way);
    `names`: the file's imported module names, if already known."""
    out = []
    for name in _imported_names(path) if names is None else names:
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
            found = _module_path(".".join(parts[:k]))
            if found is not None:
                out.append(found)
    return out


def closure(paths, edges=_edges) -> list[Path]:
    """The project files reachable from `paths` by imports (the files themselves, every module
    they import, the `__init__` of every package on the way), sorted."""
    seen: set[Path] = set()
    todo = [Path(p) if Path(p).is_absolute() else ROOT / p for p in paths]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        todo.extend(p for p in edges(path) if p not in seen)
    return sorted(seen)


def _expand(entries) -> list[Path]:
    out = []
    for e in entries:
        p = ROOT / e
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


# ---------------------------------------------------------------------------------------- keys
class Keys:
    """The keys of one run: file digests and import closures are computed once and reused."""

    def __init__(self, imports: dict | None = None):
        """`imports`: {file digest: the module names it imports}, kept between runs (a file's
        imports are a function of its bytes), so that only changed files are parsed again."""
        self._digest: dict[Path, str] = {}
        self._closure: dict[tuple, list[Path]] = {}
        self._edges: dict[Path, list[Path]] = {}
        self._lines: dict[Path, str] = {}  # path -> "its repository path, its digest"
        self.imports: dict[str, list[str]] = dict(imports or {})
        self.versions = versions()

    def edges(self, path: Path) -> list[Path]:
        if path not in self._edges:
            digest = self.digest(path)
            names = self.imports.get(digest)
            if names is None:
                names = self.imports[digest] = sorted(_imported_names(path))
            self._edges[path] = _edges(path, names)
        return self._edges[path]

    def digest(self, path: Path) -> str:
        if path not in self._digest:
            try:
                self._digest[path] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                self._digest[path] = "absent"
        return self._digest[path]

    def _key(self, what: str, files) -> str:
        h = hashlib.sha256()
        h.update(f"{FORMAT}\n{what}\n{self.versions}\n".encode())
        # one line per file, sorted as text (a few hundred files per key, hundreds of keys)
        h.update("".join(sorted({self._line(path) for path in files})).encode())
        return h.hexdigest()

    def _line(self, path: Path) -> str:
        if path not in self._lines:
            self._lines[path] = f"{path.relative_to(ROOT).as_posix()} {self.digest(path)}\n"
        return self._lines[path]

    def _closure_of(self, *starts) -> list[Path]:
        if starts not in self._closure:
            self._closure[starts] = closure(starts, self.edges)
        return self._closure[starts]

    def files_of_claim(self, module: str) -> list[Path]:
        own = _module_path(module)
        # and what writes the certificate down (its assumptions shown as mathematics)
        writers = [ROOT / f for f in CERTIFICATE_WRITERS]
        return self._closure_of(*([own] if own else []), *_expand(MACHINERY)) + writers

    def claim(self, claim_id: str, module: str) -> str:
        return self._key(f"claim {claim_id}", self.files_of_claim(module))

    def files_of_judge(self, backend: str, files, modules) -> list[Path]:
        starts = [ROOT / JUDGE_ENTRY] + [ROOT / "generated" / backend / f"{f}.py" for f in files]
        starts += [p for p in map(_module_path, modules) if p is not None]
        return self._closure_of(*starts, *_expand(MACHINERY))

    def judge(self, judge: str, backend: str, unit_kind: str, unit_name: str, files, modules) -> str:
        """The key of one judge's result for one unit in one backend: `files` the generated
        modules it executes (names in generated/<backend>/), `modules` the derivation modules its
        expected values come from."""
        return self._key(
            f"judge {judge} {backend} {unit_kind} {unit_name}", self.files_of_judge(backend, files, modules)
        )

    def files_seen(self) -> list[str]:
        """Every file a key of this run covered (repository paths)."""
        return sorted(p.relative_to(ROOT).as_posix() for p in self._digest)

    def over(self, what: str, files) -> str:
        """A key over the named repository files (e.g. the run's index over `files_seen`)."""
        return self._key(what, [ROOT / f for f in files])

    def pointer(self) -> str:
        """The fixed key of the entry that names the files the run's index depends on."""
        return self._key("index files", [])


# --------------------------------------------------------------------------------------- store
def default_dir() -> Path:
    where = os.environ.get("QED_CACHE_DIR")
    return Path(where) if where else ROOT / ".qed_cache"


class _Unusable(Exception):
    """Why a stored entry cannot be used."""


class Cache:
    """Entries under one directory. `warn` receives one line per ignored entry; `enabled=False`
    reads nothing and writes nothing (`--no-cache`)."""

    def __init__(self, directory: Path | None = None, enabled: bool = True, warn=None):
        self.dir = (directory or default_dir()) / "prove"
        self.enabled = enabled
        self.warn = warn or (lambda line: print(line, file=sys.stderr))
        self.ignored = 0
        self._unwritable = False
        self._loaded: dict[tuple, object] = {}  # (key, what) -> payload: each entry is read once

    @staticmethod
    def _digest(key: str, what: str, payload) -> str:
        text = json.dumps([key, what, payload], sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def load(self, key: str, what: str):
        """The payload stored for (key, what), or None (absent, disabled, or ignored with a line)."""
        if not self.enabled:
            return None
        if (key, what) not in self._loaded:
            path = self.dir / f"{key}.json"
            try:
                payload = self._read(path, key, what)
            except _Unusable as why:
                self.ignored += 1
                self.warn(f"qed prove: cache entry {path.name[:16]}… ignored: {why}; recomputed")
                payload = None
            self._loaded[(key, what)] = payload
        return self._loaded[(key, what)]

    def _read(self, path: Path, key: str, what: str):
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _Unusable(f"cannot read it ({e.strerror or e})") from None
        try:
            entry = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _Unusable("not a cache entry (not JSON)") from None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            raise _Unusable("not an entry of this format")
        if entry.get("key") != key or entry.get("what") != what:
            raise _Unusable(f"an entry for something else ({str(entry.get('what'))[:60]})")
        if entry.get("digest") != self._digest(key, what, entry.get("payload")):
            raise _Unusable("damaged (its digest does not match its content)")
        return entry["payload"]

    def store(self, key: str, what: str, payload) -> None:
        """Write an entry atomically (a reader sees the old entry or the new one, never half)."""
        if not self.enabled or self._unwritable:
            return
        entry = {"format": FORMAT, "key": key, "what": what, "payload": payload}
        entry["digest"] = self._digest(key, what, payload)
        path = self.dir / f"{key}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(entry, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            self._unwritable = True
            self.warn(f"qed prove: cannot write the cache in {self.dir} ({e.strerror or e}); continuing without it")
            try:
                tmp.unlink()
            except OSError:
                pass

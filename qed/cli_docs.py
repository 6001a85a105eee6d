"""The `qed docs` and `qed lint-latex` subcommands (kept apart from cli.py: two small hooks there)."""
from __future__ import annotations

COMMANDS = ("docs", "lint-latex")


def add_parsers(sub) -> None:
    from .cli_types import positive_int

    d = sub.add_parser("docs", help="write docs/ pages from the registry (--check: fail on drift)",
                       description="Prove every claim and write docs/derivations/*.md, "
                                   "docs/derivations/index.md and docs/sources.md; copy KaTeX "
                                   "into docs/assets/katex for the site. Timings are not drift-checked.")
    d.add_argument("--check", action="store_true",
                   help="render in memory; exit 1 listing every generated page that differs")
    d.add_argument("--no-katex", action="store_true", help="do not copy KaTeX into docs/assets/katex")
    d.add_argument("-j", "--workers", type=positive_int, default=None, help="parallel provers (default: CPU count)")
    d.add_argument("--certificates", metavar="JSON", default=None,
                   help="use certificates from `qed prove --json` instead of proving again")

    lint = sub.add_parser("lint-latex", help="check the LaTeX of Markdown or plain-text files",
                          description="Check math in Markdown ($…$, $$…$$) and in plain-text "
                                      "sources (also bare formula lines) against the LaTeX rules "
                                      "of seed A's FAQ; print file:line: rule: message (fix). "
                                      "Time and memory are linear in the file size (about 3 MiB/s "
                                      "for documents, 0.3 MiB/s at worst; no nesting limit). Files "
                                      "must be UTF-8 text of at most 64 MiB: any other file (Latin-1, "
                                      "binary, too large, unreadable, missing) gets one line "
                                      "'qed: error: FILE: why' on stderr and the rest are still "
                                      "linted. Exit 0 if clean, 1 on a finding or a file not "
                                      "linted, 2 if a path does not exist.")
    lint.add_argument("files", nargs="+", metavar="FILE", help="files, or folders (their *.md)")


def run(args) -> int:
    if args.command == "docs":
        from .docs import main

        return main(check_only=args.check, workers=args.workers, katex=not args.no_katex,
                    certs_json=args.certificates)
    from .latex_lint import main

    return main(args.files)

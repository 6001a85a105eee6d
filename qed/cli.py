"""The `qed` command line."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qed", description="Transformer formulas: proved, generated, trained.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prove", help="prove every claim of the catalogue and refute every mutant")
    p.add_argument("ids", nargs="*", help="claim ids or prefixes (default: all)")
    p.add_argument("--json", action="store_true", help="print the certificates as JSON")
    p.add_argument("-j", "--workers", type=int, default=None, help="parallel workers (default: CPU count)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "prove":
        from .prove import main as prove_main

        return prove_main(args.ids, args.json, args.workers)
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())

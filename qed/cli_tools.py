"""The `qed docs`, `qed lint-latex` and `qed bench` subcommands: their parsers, and `run`, which
loads the tool (qed/tools/) a command needs only when it runs (kept apart from cli.py: two small
hooks there). Building the parser imports nothing of qed/tools/."""

from __future__ import annotations

import argparse

COMMANDS = ("docs", "lint-latex", "bench")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """`qed docs` and `qed lint-latex`."""
    from .cli_types import positive_int

    d = sub.add_parser(
        "docs",
        help="write docs/ pages from the registry (--check: fail on drift)",
        description="Prove every claim (reusing the certificates `qed prove` stored, where their "
        "keys still match) and write docs/derivations/*.md, "
        "docs/derivations/index.md and docs/sources.md; copy KaTeX "
        "into docs/assets/katex for the site. Timings are not drift-checked.",
    )
    d.add_argument(
        "--check", action="store_true", help="render in memory; exit 1 listing every generated page that differs"
    )
    d.add_argument("--no-katex", action="store_true", help="do not copy KaTeX into docs/assets/katex")
    d.add_argument("-j", "--workers", type=positive_int, default=None, help="parallel provers (default: CPU count)")
    d.add_argument(
        "--certificates",
        metavar="JSON",
        default=None,
        help="use certificates from `qed prove --json` instead of proving again",
    )
    d.add_argument("--no-cache", action="store_true", help="prove every claim again, trusting no stored certificate")

    lint = sub.add_parser(
        "lint-latex",
        help="check the LaTeX of Markdown or plain-text files",
        description="Check math in Markdown ($…$, $$…$$) and in plain-text "
        "sources (also bare formula lines) against the LaTeX rules "
        "of seed A's FAQ; print file:line: rule: message (fix). "
        "Time and memory are linear in the file size (about 3 MiB/s "
        "for documents, 0.3 MiB/s at worst; no nesting limit). Files "
        "must be UTF-8 text of at most 64 MiB: any other file (Latin-1, "
        "binary, too large, unreadable, missing) gets one line "
        "'qed: error: FILE: why' on stderr and the rest are still "
        "linted. Exit 0 if clean, 1 on a finding or a file not "
        "linted, 2 if a path does not exist.",
    )
    lint.add_argument("files", nargs="+", metavar="FILE", help="files, or folders (their *.md)")


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """`qed bench`."""
    from .cli_types import (
        MEMORY_BATCH,
        MEMORY_T,
        NUMPY_PARALLEL,
        SWEEP_C,
        SWEEP_FIGURE,
        SWEEP_T,
        int_list,
        name,
        nonnegative_int,
        positive_int,
    )

    b = sub.add_parser(
        "bench",
        help="training-step time of the NumPy and generated-PyTorch backends against PyTorch eager",
        description="Train the same GPT for a fixed number of steps with the NumPy backend, the "
        "generated-PyTorch backend and a torch.nn reference (eager autograd, "
        "F.scaled_dot_product_attention), interleaved, and print median step time, spread, "
        "tokens/s, GFLOP/s, peak memory and ratios to the reference.",
    )
    b.add_argument(
        "--config",
        metavar="JSON|K=V,...",
        help="model overrides (GPTConfig fields and batch_size), "
        "e.g. 'n_embd=384,n_head=6,block_size=256' or a JSON object/file",
    )
    b.add_argument(
        "--data", metavar="FILE", help="windows of a UTF-8 text file (character vocabulary) instead of random tokens"
    )
    b.add_argument("--steps", type=positive_int, default=20, help="timed rounds (default 20)")
    b.add_argument("--warmup", type=nonnegative_int, default=3, help="untimed rounds first (default 3)")
    b.add_argument(
        "--threads", type=positive_int, default=None, help="threads for every implementation (default: CPUs)"
    )
    b.add_argument(
        "--numpy-parallel",
        choices=("processes", "threads"),
        default=NUMPY_PARALLEL,
        help="how the NumPy backend runs its batch slices (default: %(default)s)",
    )
    b.add_argument("--no-proofs", action="store_true", help="skip timing `python -m qed prove`")
    b.add_argument("--no-codegen", action="store_true", help="skip timing `python -m codegen --check`")
    b.add_argument("--no-peak-memory", action="store_true", help="skip the per-implementation memory processes")
    b.add_argument(
        "--no-compile",
        action="store_true",
        help="skip rows (b′) and (c′), the generated-PyTorch "
        "backend and the torch.nn reference under torch.compile (compiling takes tens of seconds each)",
    )
    b.add_argument(
        "--memory", action="store_true", help=f"also: attention vs attention_lse peak memory and time at T = {MEMORY_T}"
    )
    b.add_argument(
        "--memory-T",
        type=positive_int,
        default=MEMORY_T,
        metavar="T",
        help=f"--memory: the block size (default {MEMORY_T}; batch {MEMORY_BATCH} unless --config sets it)",
    )
    b.add_argument(
        "--sweep",
        nargs="?",
        const=SWEEP_FIGURE,
        default=None,
        metavar="PNG",
        help=f"also: step time as T and n_embd double; plot to PNG (default {SWEEP_FIGURE})",
    )
    b.add_argument("--sweep-steps", type=positive_int, default=5, help="timed rounds per sweep point (default 5)")
    b.add_argument(
        "--sweep-T",
        type=int_list,
        default=SWEEP_T,
        metavar="T,T,...",
        help="--sweep: block sizes (default " + ",".join(map(str, SWEEP_T)) + ")",
    )
    b.add_argument(
        "--sweep-embd",
        type=int_list,
        default=SWEEP_C,
        metavar="C,C,...",
        help="--sweep: n_embd values (default " + ",".join(map(str, SWEEP_C)) + ")",
    )
    b.add_argument(
        "--nproc",
        type=positive_int,
        default=None,
        metavar="N",
        help="also: N ranks of torch.distributed (gloo) against one process with N threads and "
        "against the worker-process split, and the all-reduce's time per step",
    )
    b.add_argument(
        "--ops",
        nargs="*",
        type=name,
        default=None,
        metavar="OP",
        dest="ops_names",
        help="also: every hand-written backward against the derived one (time per call, arrays "
        "allocated), NumPy and torch; all ops, or those named",
    )
    b.add_argument(
        "--attention-scaling",
        action="store_true",
        help="also: causal attention's peak memory and forward + backward time for T = 256 … 4096 "
        "(batch 1, 4 heads, head dim 64), untiled, tiled and F.scaled_dot_product_attention",
    )
    b.add_argument(
        "--lint",
        action="store_true",
        help="also: lint-latex's CPU time on inputs and on inputs four times larger (linear: 4x)",
    )
    b.add_argument(
        "--only-extra",
        action="store_true",
        help="with --memory/--sweep/--nproc/--ops/--attention-scaling/--lint: skip the main comparison",
    )
    b.add_argument("--json", action="store_true", help="print the results as JSON (only JSON on stdout)")


def run(args: argparse.Namespace) -> int:
    if args.command == "bench":
        from .tools.bench import run_cli

        sections = []
        if args.lint:  # lint-latex's time as its input grows four times
            from .tools.bench_lint import SECTION as LINT_SECTION

            sections.append(LINT_SECTION)
        if args.attention_scaling:  # attention's memory and time as T doubles
            from .tools.bench_attention import SECTION as ATTENTION_SECTION

            sections.append(ATTENTION_SECTION)
        if args.ops_names is not None:  # derived vs hand-written backward, per op
            from .tools.bench_ops import SECTION as OPS_SECTION
            from .tools.bench_ops import check_names

            check_names(args.ops_names)  # before the main comparison, not after it

            sections.append(OPS_SECTION)
        if args.nproc:  # N ranks of torch.distributed against one process
            from .tools.bench_distributed import SECTION

            sections.append(SECTION)
        return run_cli(args, sections)
    if args.command == "docs":
        from .tools.docs import main

        return main(
            check_only=args.check,
            workers=args.workers,
            katex=not args.no_katex,
            certs_json=args.certificates,
            use_cache=not args.no_cache,
        )
    from .tools.latex_lint import main

    return main(args.files)

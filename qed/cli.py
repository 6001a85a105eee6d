"""The `qed` command line: prove, train, sample, eval.

Heavy imports (numpy models, torch, matplotlib) happen inside the handlers, so `qed prove` never
imports torch.  Expected failures (a QedError: bad file, bad option, bad checkpoint, bad config)
print one line, `qed: error: ...`, on stderr and exit with status 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NoReturn

from .cli_types import (
    MODEL_KEYS,
    drop_rate,
    name,
    nonnegative_int,
    positive_float,
    positive_int,
    seconds,
    temperature,
)

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

# `qed train --attention tiled` (or lse): the kernel's short name
ATTENTION_ALIASES = {"tiled": "attention_tiled", "lse": "attention_lse"}

# options of `qed train` that fix the model or the optimisation; with --resume the run's saved
# values are used and these may not be given
_RUN_OPTIONS = (
    "data",
    "out",
    "backend",
    "batch_size",
    "lr",
    "warmup",
    "min_lr",
    "weight_decay",
    "grad_clip",
    "seed",
    "dtype",
    *MODEL_KEYS,  # the model's settings (qed/cli_types.py: the one list of them)
    "no_bias",
    "no_tie",
    "betas",
    "sort_length",
    "sort_digits",
    "grad_accum",
    "lr_decay_steps",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (exit 2), not the usage block: the same
    `qed: error: ...` form as every other expected failure."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("qed").strip()
        hint = f"qed {where} --help" if where else "qed --help"
        self.exit(2, f"qed: error: {where + ': ' if where else ''}{' '.join(message.split())} (see `{hint}`)\n")


def _version() -> str:
    """The installed distribution's version (pyproject.toml), or "unknown" from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qed")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="qed", description="Transformer formulas: proved, generated, trained.")
    parser.add_argument("--version", action="version", version=f"qed {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prove", help="prove every claim of the catalogue and refute every mutant")
    p.add_argument("ids", nargs="*", type=name, help="claim ids or prefixes (default: all)")
    p.add_argument("--json", action="store_true", help="print the certificates as JSON")
    p.add_argument("-j", "--workers", type=positive_int, default=None, help="parallel workers (default: CPU count)")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="prove and judge everything again, trusting no stored certificate (as CI does)",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="after proving, show why each named claim holds: its index forms, the rewrites "
        "applied, the normal forms that matched and the side conditions, in LaTeX",
    )

    a = sub.add_parser(
        "audit",
        help="mutation testing: every wrong edit of a printed expression must be refuted by a proof",
        description="Make the wrong variants of every printed expression (op lines, "
        "table entries, step updates) and check that the generated claims refute each "
        "with a counterexample. Exit 1 if any survives.",
    )
    a.add_argument("prefixes", nargs="*", type=name, help="op, table or step names or prefixes (default: all)")
    a.add_argument("--json", action="store_true", help="print one record per mutant as JSON")
    a.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="at most this many mutants per op, table or step (with --text: per generated "
        "file; default 12 there), evenly spread",
    )
    a.add_argument(
        "--text",
        action="store_true",
        help="mutate the printed text of generated/ (both backends) instead: each wrong edit "
        "must be refuted by a judge of `qed prove`",
    )
    a.add_argument("--all", action="store_true", help="with --text: every mutant of every file, no sampling")
    a.add_argument("-j", "--workers", type=positive_int, default=None, help="parallel workers (default: CPU count)")

    c = sub.add_parser(
        "check",
        help="check a derivation step by step (Markdown, LaTeX or plain text)",
        description="Find every formula of each file, cut it into steps (= chains, \\Rightarrow, "
        "\\quad, aligned rows) and give each step one verdict: proved (for symbolic sizes), refuted "
        "(a counterexample at concrete sizes), not understood (with the reason), definition or "
        "notation. Exit 1 on a refuted step (--strict: also on one not understood). See docs/check.md.",
    )
    c.add_argument("files", nargs="+", metavar="FILE", help="Markdown (.md), LaTeX or plain-text files")
    cf = c.add_mutually_exclusive_group()
    cf.add_argument("--json", action="store_true", help="print one record per step as JSON (schema: docs/check.md)")
    cf.add_argument("--markdown", action="store_true", help="print a Markdown report (formulas as $…$)")
    cf.add_argument("--html", action="store_true", help="print an HTML report (MathJax)")
    c.add_argument("--strict", action="store_true", help="exit 1 also on a step not understood or redefined")
    c.add_argument(
        "--explain",
        action="store_true",
        help="each step's transcript: both sides' index forms, the rewrites, the normal forms, the assumptions",
    )
    c.add_argument("--quiet", action="store_true", help="with --json/--markdown/--html: no progress lines on stderr")

    t = sub.add_parser(
        "train",
        help="train a GPT (default: the built-in digit-sorting task, NumPy backend)",
        description="Train a GPT built from the generated kernels. With no arguments: the built-in "
        "sorting task (6 digits 0-9, input then sorted output), NumPy backend.",
    )
    parser.train_parser = t  # `--config FILE` is read against its flags
    g = t.add_argument_group("what to train")
    g.add_argument(
        "--config",
        metavar="FILE",
        help="read the options from a TOML file (keys: the flags without dashes, e.g. batch_size "
        "= 64) or from a run's config.json; flags given here override it",
    )
    g.add_argument(
        "--data",
        metavar="FILE",
        help="a UTF-8 text file: train a character-level LM on it (first 90%% train, last 10%% validation)",
    )
    g.add_argument("--sort-length", type=int, default=None, help="sort task: digits per input (default 6)")
    g.add_argument("--sort-digits", type=int, default=None, help="sort task: digits 0..N-1 (default 10)")
    g.add_argument("--backend", choices=("numpy", "torch"), default=None, help="default numpy")
    g.add_argument(
        "--dtype",
        choices=("float32", "float64", "bfloat16"),
        default=None,
        help="default float32; bfloat16 (--backend torch): float32 weights, the matrix products in bfloat16 "
        "(mixed precision, as nanoGPT's autocast)",
    )
    g.add_argument(
        "--numpy-parallel",
        choices=("processes", "threads"),
        default=None,
        help="numpy backend: run the batch's second half in a worker process (default) or a "
        "thread; allowed with --resume",
    )
    g.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="torch backend: run forward, loss and the generated backward as one graph compiled by "
        "torch.compile (inductor; the first step compiles, tens of seconds); allowed with --resume",
    )
    g.add_argument("--out", metavar="DIR", help="run directory (default runs/<task>-<timestamp>)")
    g.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest checkpoint, with its saved settings (an interrupted "
        "run resumes exactly); --steps N extends it, the cosine schedule then spans N steps",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument(
        "--peak-flops",
        type=positive_float,
        default=None,
        metavar="FLOPS",
        help="the machine's peak FLOP/s (e.g. 312e12, an A100's bf16): the log line then gives the "
        "MFU against it; without it, the achieved model FLOP/s only; allowed with --resume",
    )
    d = t.add_argument_group("ranks and devices (torch.distributed); each allowed with --resume")
    d.add_argument(
        "--nproc",
        type=positive_int,
        default=None,
        help="train as N ranks on this machine (gloo on CPUs, NCCL on GPUs): each takes its rows of "
        "every batch and the gradients are summed; under torchrun leave it out",
    )
    d.add_argument("--device", choices=("cpu", "cuda"), default=None, help="torch backend: cpu (default) or cuda")
    d.add_argument(
        "--dist-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="how long a rank waits for the others before it stops the run (default 300)",
    )
    d.add_argument("--oversubscribe", action="store_true", help="allow --nproc above the CPU count")
    o = t.add_argument_group("optimisation")
    o.add_argument("--steps", type=int, default=None)
    o.add_argument(
        "--batch-size", type=int, default=None, help="rows of a micro-batch (of a step, with --grad-accum 1)"
    )
    o.add_argument(
        "--grad-accum",
        type=positive_int,
        default=None,
        metavar="N",
        help="N micro-batches of --batch-size rows per optimiser step, their gradients accumulated: the "
        "update of one batch N times larger, at the memory of one micro-batch (nanoGPT's "
        "gradient_accumulation_steps; default 1)",
    )
    o.add_argument("--lr", type=float, default=None, help="peak learning rate")
    o.add_argument("--warmup", type=int, default=None, help="linear warmup steps")
    o.add_argument("--min-lr", type=float, default=None, help="learning rate at the end of the cosine decay")
    o.add_argument(
        "--lr-decay-steps",
        type=positive_int,
        default=None,
        metavar="N",
        help="the cosine decay reaches --min-lr at step N, and stays there (nanoGPT's lr_decay_iters; "
        "default: --steps, so that a resumed run's --steps N stretches it)",
    )
    o.add_argument("--weight-decay", type=float, default=None)
    o.add_argument("--grad-clip", type=float, default=None, help="max global gradient norm (0: off)")
    o.add_argument("--betas", type=float, nargs=2, metavar=("B1", "B2"), default=None)
    o.add_argument("--eval-every", type=int, default=None, help="steps between evaluations/checkpoints")
    o.add_argument("--seed", type=nonnegative_int, default=None, help="model initialisation and batches (default 0)")
    m = t.add_argument_group("model")
    m.add_argument("--n-layer", type=int, default=None)
    m.add_argument("--n-head", type=int, default=None)
    m.add_argument("--n-embd", type=int, default=None)
    m.add_argument("--block-size", type=int, default=None)
    m.add_argument(
        "--norm", default=None, help="layernorm | rmsnorm | any norm op of the registry (generated/model_ops.py)"
    )
    m.add_argument(
        "--ffn",
        default=None,
        help="an activation (relu, gelu, gelu_tanh, silu, softplus, "
        "squared_relu, mish, ...) or an MLP op (swiglu, geglu): every op of that role in "
        "the registry (generated/model_ops.py)",
    )
    m.add_argument("--pos", default=None, help="learned | sinusoidal | rope")
    m.add_argument("--norm-position", default=None, help="pre | post")
    m.add_argument(
        "--qk-norm",
        "--qk-transform",
        default=None,
        metavar="OP",
        help="apply this op to each head's q and k before the scores (QK-norm): any norm op (rmsnorm, "
        "layernorm) or any op of the q/k transform role (qk_l2norm) of the registry (generated/model_ops.py's "
        "QK_TRANSFORMS); default: none",
    )
    m.add_argument(
        "--residual-scale",
        default=None,
        metavar="OP",
        help="scale each residual branch before its add with this op (layerscale); default: none",
    )
    m.add_argument(
        "--score-transform",
        default=None,
        metavar="OP",
        help="apply this elementwise op to every head's attention scores before the softmax (softcap: "
        "Gemma 2's soft-capping; any activation of the registry); default: none",
    )
    m.add_argument(
        "--loss",
        default=None,
        metavar="OP",
        help="the loss op: cross_entropy (default) | label_smoothing | any op of the loss role in the registry "
        "(generated/model_ops.py); validation reports the same loss",
    )
    m.add_argument(
        "--dropout",
        type=drop_rate,
        default=None,
        metavar="P",
        help="drop rate of the embedding's and each residual branch's dropout in training steps (nanoGPT's "
        "dropout; off in evaluation and sampling); default 0",
    )
    m.add_argument(
        "--attention",
        default=None,
        help="attention (keeps the T×T weights) | attention_lse "
        "(one log-sum-exp per row, weights recomputed) | attention_tiled (the keys in blocks: "
        "memory linear in T); lse and tiled are short for the last two",
    )
    m.add_argument("--no-bias", action="store_true", help="no biases in linear layers and norms")
    m.add_argument("--no-tie", action="store_true", help="separate lm_head instead of tied token embeddings")

    s = sub.add_parser("sample", help="generate from a run's latest (or best) checkpoint")
    s.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/latest: the newest run)")
    s.add_argument("--prompt", default=None, help="sort task: the digits to sort; text: the start of the text")
    s.add_argument(
        "--max-new-tokens", type=nonnegative_int, default=None, help="default: the sort length, or 200 characters"
    )
    s.add_argument(
        "--temperature",
        type=temperature,
        default=None,
        help="divide the logits by this before sampling; 0 means greedy (the most likely "
        "token). Default 1.0; the sort task: greedy",
    )
    s.add_argument("--top-k", type=positive_int, default=None, help="sample among the k most likely tokens")
    s.add_argument("--greedy", action="store_true", help="always take the most likely token")
    s.add_argument("--num-samples", type=positive_int, default=1)
    s.add_argument("--seed", type=nonnegative_int, default=0)
    s.add_argument("--backend", choices=("numpy", "torch"), default=None, help="default: the run's backend")
    s.add_argument("--best", action="store_true", help="the checkpoint with the lowest validation loss")

    e = sub.add_parser("eval", help="validation loss (and sort accuracy) of a run's latest (or best) checkpoint")
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/latest: the newest run)")
    e.add_argument("--backend", choices=("numpy", "torch"), default=None, help="default: the run's backend")
    e.add_argument("--best", action="store_true", help="the checkpoint with the lowest validation loss")
    e.add_argument("--json", action="store_true", help="print the result as JSON")

    from .cli_tools import add_bench_parser, add_parsers  # `qed docs`, `qed lint-latex`, `qed bench`

    add_parsers(sub)
    add_bench_parser(sub)
    return parser


# --------------------------------------------------------------------------- handlers
def _cmd_train(args) -> int:
    from .launch import run_train

    if args.config is not None:
        args = _with_config(args)
    return run_train(args, _train)


def _with_config(args):
    """The options of `qed train --config FILE`: the file's, then the command line's over them."""
    from . import train_config

    parser = build_parser()
    cf = train_config.load(args.config, parser.train_parser)
    parser.train_parser.set_defaults(**cf.values)
    argv = args.argv
    args = parser.parse_args(argv)
    args.argv, args.config_file = argv, cf
    return args  # alone, as N ranks (--nproc N), or as one rank of torchrun's


def _train(args, world) -> int:
    """`qed train` in this process: alone, or as rank `world.rank` of `world.size` (only rank 0
    prints; every rank builds the same run and checks, before training, that the others did)."""
    t0 = time.perf_counter()
    trainer = None
    try:
        with world.setting_up() as setup:
            trainer, header = _start_training(args, world)
            setup.agree_on(trainer.fingerprint(), "run (options, data, checkpoint)")
    except BaseException:
        if trainer is not None:
            trainer.abandon()
        raise
    if world.is_main:
        print(header, flush=True)
    from .interrupt import ignore_after_stop

    ignore_after_stop()  # a Ctrl-C after the save must not turn exit 130 into death by SIGINT
    rc = trainer.run()
    rec = trainer.last_record if world.is_main else None
    if rc == 0 and rec is not None:
        from .train import fmt_loss

        msg = f"done in {time.perf_counter() - t0:.1f} s: step {rec['step']}, val_loss {fmt_loss(rec['val_loss'])}"
        if "accuracy" in rec:
            msg += f", held-out accuracy {100 * rec['accuracy']:.2f}% ({rec['correct']}/{rec['held_out']})"
        print(msg + f"; run dir: {trainer.run_dir}", flush=True)
    return rc


def _start_training(args, world):
    """(the Trainer of a new or resumed run, the line that announces it). With --config FILE, an
    error about an option that the file gave names the file and its key."""
    from .errors import QedError

    cf = getattr(args, "config_file", None)
    try:
        return _start(args, world, cf)
    except QedError as e:
        key = None if cf is None or str(e).startswith(cf.path) else cf.key_named_in(str(e))
        if key is None:
            raise
        msg = f"{cf.path}: key {key!r}: {e}"
        try:
            err = type(e)(msg)
        except TypeError:  # an error class of another signature
            err = QedError(msg)
        raise err from None


def _start(args, world, cf):
    """_start_training's work; `cf`: the --config file's options (train_config.ConfigFile) or None."""
    from .config import GPTConfig
    from .cpu import use_threads
    from .data import SortTask, load_text
    from .errors import QedError
    from .train import SORT_DIGITS, SORT_LENGTH, SORT_MODEL, SORT_TRAIN, TEXT_MODEL, TEXT_TRAIN, Trainer, TrainSettings

    progress = not args.no_progress
    if args.resume:
        given = [o for o in _RUN_OPTIONS if getattr(args, o) not in (None, False)]
        if given:
            flags = ", ".join("--" + o.replace("_", "-") for o in given)
            source = (
                f" (given by {cf.path}: {', '.join(repr(cf.keys[o]) for o in given if o in cf.keys)})"
                if cf is not None and any(o in cf.keys for o in given)
                else ""
            )
            raise QedError(
                f"{flags}{source}: cannot be combined with --resume (the run's saved settings are used; "
                f"only --steps, --eval-every, --numpy-parallel, --compile, --peak-flops, --nproc and "
                f"--device may change)"
            )
        trainer = Trainer.resume(
            args.resume,
            steps=args.steps,
            eval_every=args.eval_every,
            numpy_parallel=args.numpy_parallel,
            torch_compile=args.compile,
            progress=progress,
            world=world,
            peak_flops=args.peak_flops,
        )
        threads = (
            world.use_threads(trainer.settings.backend)
            if world.distributed
            else use_threads(trainer.settings.backend, trainer.settings.numpy_parallel)
        )
        return trainer, f"resuming {trainer.run_dir} at step {trainer.step} of {trainer.settings.steps} | {threads}"
    else:
        if args.data is not None:
            if args.sort_length is not None or args.sort_digits is not None:
                raise QedError("--sort-length/--sort-digits apply to the sort task, not to --data")
            task = load_text(args.data)
            if cf is not None:
                from .train_config import check_data

                check_data(cf, args.data, task.sha256)
            model_defaults, train_defaults = dict(TEXT_MODEL), dict(TEXT_TRAIN)
            model_defaults["vocab_size"] = task.vocab_size
        else:
            task = SortTask(
                length=SORT_LENGTH if args.sort_length is None else args.sort_length,
                num_digits=SORT_DIGITS if args.sort_digits is None else args.sort_digits,
            )
            model_defaults, train_defaults = dict(SORT_MODEL), dict(SORT_TRAIN)
            model_defaults.update(vocab_size=task.vocab_size, block_size=task.block_size)
            if args.block_size is not None and args.block_size < task.block_size:
                raise QedError(
                    f"--block-size {args.block_size}: the sort task with length {task.length} needs "
                    f"block_size >= {task.block_size}"
                )
        from . import train_config

        model = dict(model_defaults)
        for k in MODEL_KEYS:  # one list of the flags a run's description keeps
            if getattr(args, k) is not None:
                model[k] = getattr(args, k)
        if model.get("attention") in ATTENTION_ALIASES:  # --attention tiled / lse
            model["attention"] = ATTENTION_ALIASES[model["attention"]]
        if args.no_bias:
            model["bias"] = False
        if args.no_tie:
            model["tie_weights"] = False
        config = GPTConfig(**model)
        config.validate()
        sk = dict(train_defaults)
        for k in (k for k in train_config.TRAIN_KEYS if k != "betas"):  # betas: a tuple, below
            if getattr(args, k) is not None:
                sk[k] = getattr(args, k)
        if args.compile:
            sk["torch_compile"] = True
        if args.betas is not None:
            sk["betas"] = tuple(args.betas)
        settings = TrainSettings(**sk)
        trainer = Trainer.new(
            config, settings, task, out=args.out, progress=progress, world=world, peak_flops=args.peak_flops
        )
        threads = (
            world.use_threads(settings.backend)
            if world.distributed
            else use_threads(settings.backend, settings.numpy_parallel)
        )
        n_params = sum(int(v.size) for v in trainer.runner.params().values())
        what = (
            f"sort {task.length} digits 0-{task.num_digits - 1}"
            if task.kind == "sort"
            else f"{task.path} ({len(task.train) + len(task.val):,} chars, vocab {task.vocab_size})"
        )
        batch = (
            f"{settings.batch_size}"
            if settings.grad_accum == 1
            else f"{settings.grad_accum} x {settings.batch_size} (--grad-accum {settings.grad_accum})"
        )
        decay = "" if settings.lr_decay_steps is None else f" (decay to step {settings.lr_decay_steps})"
        header = (
            f"qed train: {what} | {settings.backend}{' (compiled)' if settings.torch_compile else ''} "
            f"{settings.dtype} | {config.n_layer} layers, {config.n_head} heads, n_embd {config.n_embd}, "
            f"{n_params:,} params | {settings.steps} steps, batch {batch}, lr {settings.lr:g}{decay} | "
            f"{threads} | run dir {trainer.run_dir}"
        )
        return trainer, header


def _cmd_sample(args) -> int:
    from .sample import sample

    for text in sample(
        args.run_dir,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        greedy=args.greedy,
        seed=args.seed,
        backend=args.backend,
        num_samples=args.num_samples,
        best=args.best,
    ):
        print(text, flush=True)
    return 0


def _cmd_eval(args) -> int:
    import json

    from .sample import evaluate_run, format_eval

    res = evaluate_run(args.run_dir, backend=args.backend, best=args.best)
    print(json.dumps(res) if args.json else format_eval(res), flush=True)
    return 0


def _dispatch(args) -> int:
    if args.command == "prove":
        from .tools.explain_claim import claims_to_explain
        from .tools.prove import main as prove_main

        chosen = claims_to_explain(args.ids) if args.explain else []  # refused before any proving
        rc = prove_main(args.ids, args.json, args.workers, use_cache=not args.no_cache)
        for claim_id in chosen:
            from .tools.explain_claim import explain, explain_lines

            print("\n".join(explain_lines(explain(claim_id))), flush=True)
        return rc
    if args.command == "audit":
        if args.text or args.all:
            from .tools.audit_text import DEFAULT_LIMIT
            from .tools.audit_text import main as audit_text_main

            limit = None if args.all else (args.limit or DEFAULT_LIMIT)
            return audit_text_main(args.prefixes, args.json, limit, args.workers)
        from .tools.audit import main as audit_main

        return audit_main(args.prefixes, args.json, args.limit, args.workers)
    if args.command == "check":
        from .tools.check import main as check_main

        fmt = "json" if args.json else "markdown" if args.markdown else "html" if args.html else "text"
        return check_main(args.files, strict=args.strict, explain=args.explain, fmt=fmt, quiet=args.quiet)
    if args.command == "train":
        return _cmd_train(args)
    if args.command == "sample":
        return _cmd_sample(args)
    if args.command == "eval":
        return _cmd_eval(args)
    from .cli_tools import COMMANDS
    from .cli_tools import run as run_tool_command

    if args.command in COMMANDS:
        return run_tool_command(args)
    raise AssertionError(args.command)  # pragma: no cover


# --------------------------------------------------------------------------- library threads
ONE_THREAD_COMMANDS = ("train", "sample", "eval")


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    return msg


def main(argv: list[str] | None = None) -> int:
    from .errors import QedError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what `qed train --nproc N` gives its ranks
    if args.command in ONE_THREAD_COMMANDS:
        from .cpu import one_library_thread

        one_library_thread()
    try:
        from .env import check_all

        check_all()  # every environment variable qed reads: a bad one is one line, before anything runs
        return _dispatch(args)
    except QedError as e:
        print(f"qed: error: {_one_line(e)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except ImportError as e:
        if type(e).__name__ != "MissingKernelError":
            raise
        print(f"qed: error: {_one_line(e)}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("qed: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_ERROR
    except OSError as e:  # disk full, permission denied, ...: the system's own one-line message
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"qed: error: {where}{e.strerror or e}", file=sys.stderr, flush=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())

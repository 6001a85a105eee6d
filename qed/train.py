"""Training: the loop, evaluation, metrics, plots, checkpoints and resume.

    run = Trainer.new(settings, task)  or  Trainer.resume(run_dir, steps=...)
    run.run()   -> exit code (0, or 130 after Ctrl-C, with a checkpoint saved)

Determinism: the model is initialised from --seed; batches come from one numpy Generator whose
state is saved in every checkpoint; evaluation never draws from it (its batches are fixed);
the optimizer's moments and step count are saved.  So a run interrupted at step k and resumed
gives bit-for-bit the losses of a run that was never interrupted.

Ranks (qed/distributed.py, `world`): every rank draws the same global batch from the same
Generator, and its runner trains on the rank's rows of it; rank 0 alone evaluates and writes
metrics, plots and checkpoints. A resumed run is resumed by every rank from the same checkpoint
(the ranks check that they read the same one). When another rank is lost, rank 0 saves the last
step that every rank finished (the lost step had not updated anything) and the run ends.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from generated.numpy.softmax import softmax_forward

from . import checkpoint as ckpt
from . import run_dir as rundir
from .autocast import LOW_DTYPES, weight_dtype
from .config import GPTConfig
from .data import IGNORE, SortTask, TextTask, task_from_info
from .distributed import PeerLost, World
from .dropout import Noise
from .errors import CheckpointError, QedError
from .interrupt import StopRequest
from .params import check_params
from .run_dir import read_metrics
from .runner import build_runner

DTYPES = ("float32", "float64", "bfloat16")  # bfloat16: float32 weights, products in bfloat16 (torch)
BACKENDS = ("numpy", "torch")

# Per-task defaults.  The sorting task (6 digits 0-9: a million inputs, a quarter held out) reached
# 100.00% exact-match accuracy on 2000 held-out inputs after 1500 steps with each of seeds 0-3
# (45-75 s on two CPU cores; 1000 steps gave 99.8-100%).  Accuracy can dip mid-run while the
# learning rate is high and recovers as the cosine schedule decays.  The text defaults follow
# nanoGPT's CPU recipe for shakespeare_char (4 layers, 4 heads, 128 wide, 64 characters of context).
SORT_LENGTH, SORT_DIGITS = 6, 10
SORT_MODEL = dict(n_layer=2, n_head=4, n_embd=48)
TEXT_MODEL = dict(n_layer=4, n_head=4, n_embd=128, block_size=64)
SORT_TRAIN = dict(
    steps=1500, batch_size=64, lr=3e-3, warmup=100, min_lr=3e-4, weight_decay=0.01, grad_clip=1.0, eval_every=200
)
TEXT_TRAIN = dict(
    steps=2000, batch_size=16, lr=1e-3, warmup=100, min_lr=1e-4, weight_decay=0.1, grad_clip=1.0, eval_every=200
)


@dataclass
class TrainSettings:
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 100
    min_lr: float = 3e-4
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 200
    seed: int = 0
    dtype: str = "float32"
    backend: str = "numpy"
    numpy_parallel: str = "processes"  # NumpyGPT's batch slices: worker processes or threads
    torch_compile: bool = False  # torch backend: the loss path under torch.compile
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    eval_batches: int = 8  # text: validation batches per evaluation
    max_eval_examples: int = 2000  # sort: held-out examples scored per evaluation
    keep: int = 2  # checkpoints kept on disk
    grad_accum: int = 1  # micro-batches of batch_size rows per optimiser step (gradients accumulated)
    lr_decay_steps: int | None = None  # the cosine decay ends here (nanoGPT's lr_decay_iters); None: at `steps`

    def validate(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, int)):
                raise QedError(f"--{f.name.replace('_', '-')} must be an integer, got {v!r}")
            if f.type == "float" and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise QedError(f"--{f.name.replace('_', '-')} must be a finite number, got {v!r}")
        if not 0 <= self.seed < 2**63:
            raise QedError(f"--seed must lie in [0, 2**63), got {self.seed}")
        if not isinstance(self.torch_compile, bool):
            raise QedError(f"torch_compile must be true or false, got {self.torch_compile!r}")
        if (
            not isinstance(self.betas, (tuple, list))
            or len(self.betas) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in self.betas)
        ):
            raise QedError(f"--betas must be two numbers, got {self.betas!r}")

        def positive(name, allow_zero=False):
            v = getattr(self, name)
            if not (v >= 0 if allow_zero else v > 0) or (isinstance(v, float) and not math.isfinite(v)):
                raise QedError(f"--{name.replace('_', '-')} must be {'>= 0' if allow_zero else '> 0'}, got {v}")

        for n in ("grad_accum", "lr_decay_steps"):  # int (and None for lr_decay_steps: --steps)
            v = getattr(self, n)
            if (v is not None or n == "grad_accum") and (isinstance(v, bool) or not isinstance(v, int)):
                raise QedError(f"--{n.replace('_', '-')} must be an integer, got {v!r}")
        for n in ("steps", "batch_size", "lr", "eval_every", "eval_batches", "max_eval_examples", "eps", "keep"):
            positive(n)
        positive("grad_accum")
        if self.lr_decay_steps is not None:
            positive("lr_decay_steps")
            if self.lr_decay_steps <= self.warmup:
                raise QedError(
                    f"--lr-decay-steps ({self.lr_decay_steps}) must exceed --warmup ({self.warmup}): "
                    "the cosine decay runs from the end of the warmup to --lr-decay-steps"
                )
        for n in ("warmup", "min_lr", "weight_decay", "grad_clip"):
            positive(n, allow_zero=True)
        if self.min_lr > self.lr:
            raise QedError(f"--min-lr ({self.min_lr}) must not exceed --lr ({self.lr})")
        if self.dtype not in DTYPES:
            raise QedError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.numpy_parallel not in ("processes", "threads"):
            raise QedError(f"--numpy-parallel must be 'processes' or 'threads', got {self.numpy_parallel!r}")
        if self.backend not in BACKENDS:
            raise QedError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.dtype in LOW_DTYPES and self.backend != "torch":
            raise QedError(
                f"--dtype {self.dtype} runs on --backend torch (mixed precision: float32 weights, the matrix "
                "products in bfloat16); NumPy has no bfloat16"
            )
        if self.torch_compile and self.backend != "torch":
            raise QedError("--compile applies to --backend torch (torch.compile); the numpy backend has no compiler")
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise QedError(f"--betas must lie in [0, 1), got {b1} {b2}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainSettings:
        """Validated settings from a checkpoint: every key present (but those added since, whose
        absence means the behaviour before them: ADDED_SINCE), none unknown."""
        if not isinstance(d, dict):
            raise QedError(f"training settings must be a dict, got {type(d).__name__}")
        d = {**ADDED_SINCE, **d}
        known = [f.name for f in fields(cls)]
        missing = [k for k in known if k not in d]
        unknown = sorted(set(d) - set(known))
        if missing or unknown:
            raise QedError(
                "training settings "
                + "; ".join(
                    part
                    for part in (
                        missing and f"lack {', '.join(map(repr, missing))}",
                        unknown and f"have unknown key(s) {', '.join(map(repr, unknown))}",
                    )
                    if part
                )
            )
        d = dict(d)
        if isinstance(d["betas"], list):
            d["betas"] = tuple(d["betas"])
        settings = cls(**d)
        settings.validate()
        return settings


# settings added after checkpoints were first written: a checkpoint without one ran as this value
# (one micro-batch per step; the cosine decay ending at --steps)
ADDED_SINCE = {"grad_accum": 1, "lr_decay_steps": None}


# --------------------------------------------------------------------------- backends
def make_runner(
    config: GPTConfig,
    backend: str,
    dtype: str,
    seed: int,
    settings: TrainSettings | None = None,
    world: World | None = None,
) -> object:
    """The runner (qed/runner.py) of a run: with `settings`, its AdamW and how the backend runs
    (worker processes or threads, torch.compile); without, one that only scores (sampling, eval).
    As a rank of a `world` of several, the runner of this rank's rows (qed/distributed.py): the
    NumPy backend then runs them in this process alone (one rank per CPU)."""
    world = world or World()
    if settings is None:
        return build_runner(config, backend, dtype, seed=seed, device=world.torch_device)
    rank = world.distributed
    runner = build_runner(
        config,
        backend,
        dtype,
        seed=seed,
        device=world.torch_device,
        threads=1 if rank else None,
        parallel="threads" if rank else settings.numpy_parallel,
        compile=settings.torch_compile,
        optimizer=dict(
            lr=settings.lr, betas=tuple(settings.betas), eps=settings.eps, weight_decay=settings.weight_decay
        ),
    )
    try:
        return world.shard(runner)
    except BaseException:
        runner.close()
        raise


def check_shardable(settings: TrainSettings, world: World) -> None:
    if settings.batch_size < world.size:
        raise QedError(
            f"--batch-size {settings.batch_size} is below the {world.size} ranks: each rank trains "
            "on at least one row of every batch"
        )


# --------------------------------------------------------------------------- evaluation
def generate(
    runner: object,
    idx: np.ndarray,
    max_new_tokens: int,
    block_size: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    greedy: bool = False,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Append max_new_tokens tokens to idx (B, T0): greedy argmax, or sampled with temperature/top-k."""
    idx = np.asarray(idx, dtype=np.int64)
    rng = rng if rng is not None else np.random.default_rng(0)
    for _ in range(max_new_tokens):
        logits = np.asarray(runner.logits(idx[:, -block_size:])[:, -1, :], dtype=np.float64)
        if greedy or temperature == 0:
            nxt = logits.argmax(axis=-1)
        else:
            # (z - max z)/τ: the largest logit is 0 and the rest ≤ 0, so a tiny τ gives −∞ (probability
            # 0) where z/τ alone would give ∞ − ∞ = NaN in the softmax
            with np.errstate(over="ignore"):
                logits = (logits - logits.max(axis=-1, keepdims=True)) / temperature
            if top_k is not None and top_k < logits.shape[-1]:
                kth = np.sort(logits, axis=-1)[:, -top_k][:, None]
                logits = np.where(logits < kth, -np.inf, logits)
            p, _ = softmax_forward(logits)  # the generated, proved softmax (logits.softmax)
            u = rng.random((p.shape[0], 1))
            nxt = np.minimum((np.cumsum(p, axis=-1) < u).sum(axis=-1), p.shape[-1] - 1)
        idx = np.concatenate([idx, nxt[:, None].astype(np.int64)], axis=1)
    return idx


def sort_accuracy(
    runner: object, task: SortTask, max_examples: int | None = None, chunk: int = 1024
) -> tuple[float, int, int]:
    """Exact-match accuracy of greedy generation on held-out inputs: (accuracy, correct, total)."""
    inputs = task.examples("val")
    if max_examples is not None:
        inputs = inputs[:max_examples]
    correct = 0
    for i in range(0, len(inputs), chunk):
        inp = inputs[i : i + chunk]
        out = generate(runner, inp, task.length, task.block_size, greedy=True)[:, task.length :]
        correct += int((out == np.sort(inp, axis=1)).all(axis=1).sum())
    return correct / len(inputs), correct, len(inputs)


def evaluate(runner: object, task: SortTask | TextTask, settings: TrainSettings, block_size: int) -> dict:
    """Validation loss (and held-out accuracy for the sorting task); draws no training randomness."""
    out = {}
    if task.kind == "sort":
        total, count = 0.0, 0
        for x, y in task.eval_batches(256, settings.max_eval_examples):
            n = int((y != IGNORE).sum())
            total += runner.loss(x, y) * n
            count += n
        out["val_loss"] = total / count
        acc, correct, n = sort_accuracy(runner, task, settings.max_eval_examples)
        out.update(accuracy=acc, correct=correct, held_out=n)
    else:
        losses = [
            runner.loss(x, y)
            for x, y in task.eval_batches(settings.batch_size, block_size, settings.eval_batches, settings.seed)
        ]
        out["val_loss"] = float(np.mean(losses))
    return out


def cosine_lr(step: int, s: TrainSettings) -> float:
    from .optim import cosine_lr as _cos

    decay_end = s.steps if s.lr_decay_steps is None else s.lr_decay_steps
    return float(_cos(step, lr=s.lr, warmup=s.warmup, max_steps=decay_end, min_lr=s.min_lr))


def flops_per_token(config: GPTConfig, param_shapes: dict, seq_len: int) -> float:
    """Model FLOPs per trained token, forward and backward: nanoGPT's estimate_mfu (after the
    PaLM paper's appendix B), 6·N + 12·L·T·C, with N the parameters but the learned position
    table (as nanoGPT's get_num_params), L layers, T the training sequence length, C n_embd.
    6·N: a multiply-add per weight in the forward, two in the backward; 12·L·T·C: the T×T
    attention products q·kᵀ and p·v (counted whole, as nanoGPT does, not halved for the mask)."""
    n = sum(math.prod(shape) for name, shape in param_shapes.items() if name != "wpe.weight")
    return 6.0 * n + 12.0 * config.n_layer * seq_len * config.n_embd


def fmt_flops(x: float) -> str:
    """FLOP/s with an SI prefix: 3.2 GFLOP/s, 312 TFLOP/s."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if x >= scale or scale == 1:
            v = x / scale
            return f"{v:.1f} {prefix}FLOP/s" if v < 100 else f"{v:.0f} {prefix}FLOP/s"
    raise AssertionError  # pragma: no cover


def speed_text(ms_per_iter: float, flops_per_s: float, peak_flops: float | None) -> str:
    """The log line's speed: ms per optimiser step, achieved model FLOP/s, and with a stated peak
    (--peak-flops) the MFU, the achieved rate as a percentage of it."""
    s = f"  {ms_per_iter:,.1f} ms/iter  {fmt_flops(flops_per_s)}"
    if peak_flops:
        s += f"  MFU {100 * flops_per_s / peak_flops:.2f}% of {fmt_flops(peak_flops)}"
    return s


def fmt_loss(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4f}" if x >= 1e-3 else f"{x:.2e}"


# --------------------------------------------------------------------------- run directory
# (qed/run_dir.py: claiming one, runs/latest, metrics.jsonl, the config copy)


def plot_losses(run_dir: Path, records: list[dict], title: str) -> None:
    """loss.png: train and validation loss (log scale) and, for the sort task, accuracy."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    steps = [r["step"] for r in records]
    ax.plot(steps, [r.get("train_loss") for r in records], "o-", ms=3, label="train loss")
    ax.plot(steps, [r.get("val_loss") for r in records], "s-", ms=3, label="val loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    if all((r.get("train_loss") or 0) > 0 and (r.get("val_loss") or 0) > 0 for r in records):
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if any("accuracy" in r for r in records):
        ax2 = ax.twinx()
        ax2.plot(
            steps,
            [100 * r["accuracy"] for r in records if "accuracy" in r],
            "^-",
            color="tab:green",
            ms=3,
            label="held-out accuracy (%)",
        )
        ax2.set_ylabel("exact-match accuracy (%)")
        ax2.set_ylim(0, 101)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="center right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    tmp = run_dir / ".loss.png.tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, run_dir / "loss.png")


# --------------------------------------------------------------------------- the trainer
def _seq_len(task, config) -> int:
    return task.block_size if task.kind == "sort" else config.block_size


def check_memory(config: GPTConfig, settings: TrainSettings, task: SortTask | TextTask) -> dict:
    """Refuse, before anything is allocated, a run whose estimated memory exceeds the machine's."""
    from .memory import check_fits

    return check_fits(
        config,
        batch_size=settings.batch_size,
        seq_len=_seq_len(task, config),
        itemsize=np.dtype(weight_dtype(settings.dtype)).itemsize,
        backend=settings.backend,
    )


def verified_run(c: ckpt.Checkpoint) -> tuple[GPTConfig, TrainSettings, dict]:
    """(config, settings, task info) of a loaded checkpoint, each complete and valid, and consistent
    with each other and with the weights; CheckpointError naming what is wrong otherwise."""
    from .config import GPTConfig

    meta = c.meta
    try:
        config = GPTConfig.from_dict(meta["config"], complete=True)
        settings = TrainSettings.from_dict(meta.get("train"))
    except QedError as e:
        raise CheckpointError(f"{c.path}: {e}") from None
    info = meta["task"]
    if not isinstance(info, dict):
        raise CheckpointError(f"{c.path}: the task is not a record")
    kind = info.get("kind")
    if kind == "sort":
        need = {"kind", "length", "num_digits", "test_fraction", "split_seed", "sha256"}
        vocab_size = info.get("num_digits")
    elif kind == "text":
        need = {"kind", "path", "vocab", "sha256"}
        vocab = info.get("vocab")
        if (
            not isinstance(vocab, list)
            or not all(isinstance(t, str) and len(t) == 1 for t in vocab)
            or len(set(vocab)) != len(vocab)
        ):
            raise CheckpointError(f"{c.path}: the text task's vocabulary is not a list of distinct characters")
        vocab_size = len(vocab)
    else:
        raise CheckpointError(f"{c.path}: unknown task kind {kind!r}")
    if set(info) != need:
        raise CheckpointError(f"{c.path}: the {kind} task record has keys {sorted(info)}, expected {sorted(need)}")
    if not (isinstance(info["sha256"], str) and len(info["sha256"]) == 64):
        raise CheckpointError(f"{c.path}: the task's data digest {info['sha256']!r} is not a sha256")
    if vocab_size != config.vocab_size:
        raise CheckpointError(
            f"{c.path}: the task's vocabulary has {vocab_size} tokens but the model's vocab_size is {config.vocab_size}"
        )
    if kind == "sort":
        try:
            task = task_from_info(info)
        except (QedError, TypeError, ValueError) as e:
            raise CheckpointError(f"{c.path}: bad sort task ({e})") from None
        if config.block_size < task.block_size:
            raise CheckpointError(
                f"{c.path}: block_size {config.block_size} is below the sort task's {task.block_size}"
            )
    dtypes = {str(a.dtype) for a in c.params.values()}
    if dtypes != {weight_dtype(settings.dtype)}:
        raise CheckpointError(
            f"{c.path}: the weights are {', '.join(sorted(dtypes))} but the run's dtype is {settings.dtype}"
            + (f" (weights in {weight_dtype(settings.dtype)})" if settings.dtype in LOW_DTYPES else "")
        )
    from .params import param_shapes

    check_params(c.params, param_shapes(config), where=f"{c.path}: the weights")
    _check_progress(c)
    return config, settings, info


def _finite(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _check_progress(c: ckpt.Checkpoint) -> None:
    """What the trainer reads back besides the model: the losses since the last record, the
    best validation loss so far, the run it belongs to; each of the type it was written as."""
    meta = c.meta
    pending = meta.get("pending_losses", [])
    if not isinstance(pending, list) or not all(_finite(v) for v in pending):
        raise CheckpointError(f"{c.path}: pending_losses is not a list of finite numbers")
    for key in ("best_val_loss", "val_loss"):
        if meta.get(key) is not None and not _finite(meta[key]):
            raise CheckpointError(f"{c.path}: {key} {meta[key]!r} is not a finite number")


@dataclass
class Trainer:
    run_dir: Path
    config: object
    settings: TrainSettings
    task: object
    runner: object
    rng: np.random.Generator
    step: int = 0
    pending: list = field(default_factory=list)  # train losses since the last metrics record
    losses: dict = field(default_factory=dict)  # step -> train loss, this process
    progress: bool = True
    on_step: object = None  # callback(step, loss), for tests
    console: object = None
    best_val_loss: float | None = None  # the lowest validation loss checkpointed so far
    claimed: object = None  # run_dir.RunDir of a new run (removed if it fails at once)
    world: World = field(default_factory=World)  # this process's rank among the run's (one: World())
    run_id: str | None = None  # run.json's: every checkpoint of the run records it (rank 0)
    lock: object = None  # run_dir.RunLock: rank 0 alone writes the run directory, and holds it
    peak_flops: float | None = None  # --peak-flops: the log line's MFU is against it (None: FLOP/s only)

    # -- construction
    @classmethod
    def new(
        cls,
        config: GPTConfig,
        settings: TrainSettings,
        task: SortTask | TextTask,
        out: str | None = None,
        world: World | None = None,
        **kw: object,
    ) -> Trainer:
        """Check everything that can be checked, build the model, and only then claim a run
        directory: a start that fails leaves none behind. Only rank 0 claims one (the other
        ranks' `run_dir` is --out, or None)."""
        world = world or World()
        settings.validate()
        config.validate()
        check_shardable(settings, world)
        if task.kind == "text":
            task.check_block_size(config.block_size)
        if world.is_main:
            rundir.check_out(out)
        check_memory(config, settings, task)
        runner = make_runner(config, settings.backend, settings.dtype, settings.seed, settings, world)
        claimed = None
        try:
            # every rank draws the same global batches from this Generator (and takes its rows)
            rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0xDA7A]))
            if not world.is_main:
                return cls(
                    run_dir=None if out is None else Path(out),
                    config=config,
                    settings=settings,
                    task=task,
                    runner=runner,
                    rng=rng,
                    world=world,
                    **kw,
                )
            claimed = rundir.claim(task.name, out, task.info()["sha256"])
            t = cls(
                run_dir=claimed.path,
                config=config,
                settings=settings,
                task=task,
                runner=runner,
                rng=rng,
                claimed=claimed,
                world=world,
                run_id=claimed.run_id,
                lock=claimed.lock,
                **kw,
            )
            rundir.write_config_copy(t.run_dir, t._describe())
            (t.run_dir / rundir.METRICS).touch()
        except BaseException:
            runner.close()
            if claimed is not None:
                claimed.remove_if_unused()
                claimed.lock.release()
            raise
        return t

    @classmethod
    def resume(
        cls,
        run_dir: str | os.PathLike,
        steps: int | None = None,
        eval_every: int | None = None,
        numpy_parallel: str | None = None,
        torch_compile: bool | None = None,
        world: World | None = None,
        **kw: object,
    ) -> Trainer:
        """Continue a run from its latest checkpoint; every rank of a `world` reads it (the run
        directory must be one that every rank sees), rank 0 alone writes."""
        world = world or World()
        if ckpt.resolve(run_dir) == Path(run_dir):
            raise QedError(f"--resume takes a run directory, not a checkpoint directory: {run_dir}")
        lock = rundir.RunLock.acquire(Path(run_dir)) if world.is_main else None  # rank 0 writes
        try:
            return cls._resume(run_dir, lock, steps, eval_every, numpy_parallel, torch_compile, world, **kw)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    @classmethod
    def _resume(cls, run_dir, lock, steps, eval_every, numpy_parallel, torch_compile, world, **kw) -> Trainer:
        c = rundir.load(run_dir)
        config, settings, info = verified_run(c)
        meta = c.meta
        if steps is not None and steps <= c.step:
            raise QedError(
                f"--steps {steps}: the run is already at step {c.step}; pass --steps N with "
                f"N > {c.step} to train further"
            )
        if steps is None and c.step >= settings.steps:
            raise QedError(
                f"{run_dir}: the run is complete (step {c.step} of {settings.steps}); pass "
                f"--steps N with N > {c.step} to train further"
            )
        if steps is not None:
            settings.steps = steps
        if eval_every is not None:
            settings.eval_every = eval_every
        if numpy_parallel is not None:  # how, not what: free to change on resume
            settings.numpy_parallel = numpy_parallel
        if torch_compile is not None:
            settings.torch_compile = torch_compile
        settings.validate()
        check_shardable(settings, world)
        task = task_from_info(info)
        if c.optimizer is None:
            raise CheckpointError(f"{c.path}: has no optimizer state; cannot resume training")
        check_memory(config, settings, task)
        runner = make_runner(config, settings.backend, settings.dtype, settings.seed, settings, world)
        try:
            runner.load_params(c.params)
            try:
                runner.load_optimizer_state(c.optimizer)
            except (KeyError, ValueError, TypeError) as e:
                raise CheckpointError(f"{c.path}: optimizer state does not fit this model ({e})") from None
            rng = np.random.default_rng()
            try:
                rng.bit_generator.state = meta["rng"]
            except (KeyError, TypeError, ValueError):
                raise CheckpointError(f"{c.path}: corrupted RNG state") from None
        except BaseException:
            runner.close()
            raise
        t = cls(
            run_dir=Path(run_dir),
            config=config,
            settings=settings,
            task=task,
            runner=runner,
            rng=rng,
            step=c.step,
            pending=list(meta.get("pending_losses", [])),
            best_val_loss=meta.get("best_val_loss"),
            world=world,
            run_id=meta["run"]["id"],
            lock=lock,
            **kw,
        )
        t.resumed_from = meta["checksum"]
        if not world.is_main:
            return t
        # metrics a crash logged after this checkpoint, and damaged lines, are kept aside
        rundir.rewind_metrics(Path(run_dir), c.step)
        rundir.write_config_copy(Path(run_dir), t._describe())
        return t

    resumed_from = ""  # the checksum of the checkpoint resumed from

    def abandon(self) -> None:
        """Undo a start that is not going ahead (another rank could not start): stop worker
        processes, remove the run directory made for it if nothing was saved there."""
        self.runner.close()
        if self.claimed is not None:
            self.claimed.remove_if_unused()
        self.release()

    def release(self) -> None:
        """Let another process write the run directory (the end of the run, or of its start)."""
        if self.lock is not None:
            self.lock.release()

    def fingerprint(self) -> str:
        """What every rank of a run must have alike: the run's description, the step and the
        checkpoint it starts from, and a text task's tokens (ranks on other machines read their
        own copy of the file)."""
        import hashlib

        digest = hashlib.sha256(
            json.dumps([self._describe(), self.step, self.resumed_from], sort_keys=True, default=str).encode()
        )
        if self.task.kind == "text":
            digest.update(np.ascontiguousarray(self.task.train).tobytes())
            digest.update(np.ascontiguousarray(self.task.val).tobytes())
        return digest.hexdigest()

    def _describe(self) -> dict:
        """Everything that defines the run; the checkpoints' state.json holds it under its checksum."""
        from . import __version__

        return {
            "qed_version": __version__,
            "config": self.config.to_dict(),
            "train": self.settings.to_dict(),
            "task": self.task.info(),
        }

    # -- pieces
    def batch(self) -> tuple[np.ndarray, np.ndarray]:
        """One step's batch: grad_accum micro-batches of batch_size rows, drawn as one batch (so
        --grad-accum N --batch-size b trains on the tokens of --batch-size N·b)."""
        rows = self.settings.batch_size * self.settings.grad_accum
        if self.task.kind == "sort":
            return self.task.batch("train", rows, self.rng)
        return self.task.batch("train", rows, self.rng, self.config.block_size)

    def save(self, val_loss: float | None = None) -> Path:
        """A checkpoint of this step; also the best one if `val_loss` is the lowest so far."""
        best = val_loss is not None and (self.best_val_loss is None or val_loss < self.best_val_loss)
        if best:
            self.best_val_loss = val_loss
        meta = self._describe()
        meta.update(
            rng=self.rng.bit_generator.state,
            pending_losses=list(self.pending),
            val_loss=val_loss,
            best_val_loss=self.best_val_loss,
            run={"id": self.run_id},
        )
        return ckpt.save_checkpoint(
            self.run_dir,
            step=self.step,
            params=self.runner.params(),
            optimizer=self.runner.optimizer_state(),
            meta=meta,
            keep=self.settings.keep,
            best=best,
        )

    def _print(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg, highlight=False, soft_wrap=True)
        else:
            print(msg, flush=True)

    def _record(self, lr: float, tokens_per_s: float, elapsed: float) -> dict:
        ev = evaluate(self.runner, self.task, self.settings, self.config.block_size)
        rec = {
            "step": self.step,
            "train_loss": float(np.mean(self.pending)) if self.pending else None,
            "val_loss": ev["val_loss"],
            "lr": lr,
            "tokens_per_s": tokens_per_s,
            "elapsed_s": round(elapsed, 3),
        }
        if "accuracy" in ev:
            rec.update(accuracy=ev["accuracy"], correct=ev["correct"], held_out=ev["held_out"])
        rundir.append_record(self.run_dir, rec)
        self.pending = []
        return rec

    def _log_line(self, rec: dict, speed: str = "") -> str:
        s = (
            f"step {rec['step']:>6}  train {fmt_loss(rec['train_loss'])}  val {fmt_loss(rec['val_loss'])}"
            f"  lr {rec['lr']:.2e}"
        )
        s += f"  {rec['tokens_per_s']:,.0f} tok/s" + speed
        if "accuracy" in rec:
            s += f"  held-out accuracy {100 * rec['accuracy']:.2f}% ({rec['correct']}/{rec['held_out']})"
        return s

    # -- the loop
    def run(self) -> int:
        """Train to settings.steps: 0, or 130 after SIGINT/SIGTERM with a checkpoint of the step
        reached. A run that fails before its first checkpoint removes the directory it claimed.
        The run directory's lock is released at the end, however the run ends."""
        try:
            return self._run()
        except QedError as e:
            if self.claimed is not None and self.claimed.remove_if_unused():
                if isinstance(e, PeerLost):
                    e.after += f" (removed {self.run_dir})"
                    raise
                raise type(e)(f"{e} (nothing was saved yet: removed {self.run_dir})") from None
            raise
        except BaseException:
            if self.claimed is not None and self.claimed.remove_if_unused():
                print(
                    f"qed: the run failed before its first checkpoint; removed {self.run_dir}",
                    file=sys.stderr,
                    flush=True,
                )
            raise
        finally:
            self.release()

    def _run(self) -> int:
        s, world, main = self.settings, self.world, self.world.is_main
        seq_len = _seq_len(self.task, self.config)
        tokens_per_step = s.grad_accum * s.batch_size * seq_len  # the global batch's
        token_flops = flops_per_token(self.config, self.runner.param_shapes(), seq_len)
        records = read_metrics(self.run_dir) if main else []
        t_start = time.perf_counter()
        steps_window, train_time = 0, 0.0
        bar = _Progress(self, enabled=self.progress and main)
        consistent = True  # False while a step is half done (batch drawn, parameters being updated)
        saved_step = None
        stop = StopRequest(
            on_first="qed: stopping: finishing this step, then saving a checkpoint "
            "(further Ctrl-C's are ignored until it is saved)"
            if main
            else "",
            on_more="qed: still saving the checkpoint; it is kept whatever you press (Ctrl-\\ quits without it)"
            if main
            else "",
        )
        world.stop_source = lambda: stop.requested  # sent with every step's all-reduce
        with stop, bar:
            self.console = bar.console
            try:
                while self.step < s.steps and not world.agreed_stop(stop.requested):
                    lr = cosine_lr(self.step, s)
                    consistent = False
                    rng_state = self.rng.bit_generator.state  # to give back the batch of a step that fails
                    x, y = self.batch()
                    t0 = time.perf_counter()
                    try:
                        with np.errstate(all="ignore"):  # a diverging run is caught below, in one line
                            loss = self.runner.step(
                                x, y, lr, s.grad_clip, accum=s.grad_accum, noise=Noise(s.seed, self.step)
                            )
                    except PeerLost as e:  # before any update: the state is that of step k
                        self.rng.bit_generator.state = rng_state
                        raise self._lost(e, saved_step) from None
                    train_time += time.perf_counter() - t0
                    if not math.isfinite(loss):
                        err = QedError(f"loss became {loss} at step {self.step + 1}; lower --lr (now {s.lr:g})")
                        err.same_as_rank_0 = not main  # the summed loss: every rank sees it
                        raise err
                    self.step += 1
                    self.pending.append(loss)
                    self.losses[self.step] = loss
                    consistent = True
                    steps_window += 1
                    tok_s = tokens_per_step * steps_window / max(train_time, 1e-9)
                    bar.update(self.step, loss, tok_s)
                    if main and (self.step % s.eval_every == 0 or self.step == s.steps):
                        rec = self._record(lr, tok_s, time.perf_counter() - t_start)
                        records.append(rec)
                        ms_iter = 1000 * train_time / steps_window
                        self._print(self._log_line(rec, speed_text(ms_iter, token_flops * tok_s, self.peak_flops)))
                        self.save(val_loss=rec["val_loss"])
                        saved_step = self.step
                        plot_losses(self.run_dir, records, f"qed {self.task.name} ({s.backend}, {s.dtype})")
                        steps_window, train_time = 0, 0.0
                    if self.on_step is not None:
                        self.on_step(self.step, loss)
            except KeyboardInterrupt:  # only where no handler could be installed (a thread)
                stop.requested = True
            finally:
                self.console = None
                self.runner.close()  # worker processes, if any (restart on demand)
            if not world.agreed_stop(stop.requested):
                world.barrier()  # every rank ends with rank 0's last checkpoint
                return 0
            # still inside `stop`: a further signal cannot cut this save short
            if not consistent:
                print(
                    f"interrupted in the middle of step {self.step + 1}; the last checkpoint is kept; "
                    f"continue with: qed train --resume {self.run_dir}",
                    file=sys.stderr,
                    flush=True,
                )
                return 130
            if not main:
                world.barrier("while rank 0 saved the checkpoint")
                return 130
            where = ckpt.resolve(self.run_dir) if saved_step == self.step else self.save()
            world.barrier("while rank 0 saved the checkpoint")
        ignored = (
            f" ({stop.extra} further interrupt{'s' * (stop.extra != 1)} ignored while saving)" if stop.extra else ""
        )
        best = ""
        if self.best_val_loss is not None:
            best = f"; best (val_loss {fmt_loss(self.best_val_loss)}): {ckpt.resolve(self.run_dir, ckpt.BEST).name}"
        print(
            f"interrupted at step {self.step} of {s.steps}: checkpoint saved to {where}{best}{ignored}; "
            f"continue with: qed train --resume {self.run_dir}",
            file=sys.stderr,
            flush=True,
        )
        return 130

    def _lost(self, e: PeerLost, saved_step) -> PeerLost:
        """PeerLost during step k+1 (no rank updated anything in it): rank 0 saves step k unless
        it is saved already; the message says where to continue from."""
        e.during = f"during step {self.step + 1}"
        if not self.world.is_main:
            e.after = "; rank 0 keeps the run's checkpoints"
            return e
        if self.step > 0:
            where = ckpt.resolve(self.run_dir) if saved_step == self.step else self.save()
            e.after = f"; step {self.step} is saved in {where}; continue with: qed train --resume {self.run_dir}"
        else:
            e.after = "; no step was finished, nothing is saved"
        return e

    @property
    def last_record(self) -> dict | None:
        r = read_metrics(self.run_dir)
        return r[-1] if r else None


class _Progress:
    """A rich progress bar showing the loss and tokens/s (a no-op when disabled)."""

    def __init__(self, trainer: Trainer, enabled: bool):
        self.enabled = enabled
        self.console = None
        self.total = trainer.settings.steps
        self.start = trainer.step
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.console = Console()
            self.p = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tok_s]} tok/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )

    def __enter__(self):
        if self.enabled:
            self.p.__enter__()
            self.task = self.p.add_task("train", total=self.total, completed=self.start, loss="-", tok_s="-")
        return self

    def update(self, step: int, loss: float, tok_s: float) -> None:
        if self.enabled:
            self.p.update(self.task, completed=step, loss=fmt_loss(loss), tok_s=f"{tok_s:,.0f}")

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)
        return False


# --------------------------------------------------------------------------- entry points
def load_for_inference(
    run_dir: str | os.PathLike,
    backend: str | None = None,
    dtype: str | None = None,
    which: str = ckpt.LATEST,
    batch_size: int = 1,
) -> tuple[object, ckpt.Checkpoint]:
    """(runner, checkpoint) for sampling and evaluation from a run's latest (or best) checkpoint,
    verified (train.verified_run) before the model is built."""
    from .memory import check_fits

    c = rundir.load(run_dir, with_optimizer=False, which=which)
    config, settings, _ = verified_run(c)
    backend = backend or settings.backend
    dtype = dtype or settings.dtype
    if backend != "torch":  # a mixed-precision run's float32 weights, read by NumPy as they are
        dtype = weight_dtype(dtype)
    check_fits(
        config,
        batch_size=batch_size,
        seq_len=config.block_size,
        itemsize=np.dtype(weight_dtype(dtype)).itemsize,
        backend=backend,
        training=False,
        what="--num-samples",
    )
    from .cpu import use_threads

    use_threads(backend)  # torch: every core (sampling and eval too)
    runner = make_runner(config, backend, dtype, seed=0)
    runner.load_params(c.params)
    return runner, c

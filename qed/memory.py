"""How much memory a run needs, estimated before anything is allocated, and how much the machine has.

A config that cannot fit is refused with both numbers (`check_fits`), instead of a MemoryError
minutes later or the kernel's OOM killer.  The estimate counts, in the run's float size s:

    parameter state   P·s·k     P parameters (params.param_shapes, no arrays made);
                                k = 5 for training (weights, gradients, Adam's m and v, and the
                                worker's gradient slice), 1 for inference
    activations       B·T·s·(L·(48·C + 3·h·T) + 4·V)
                                the caches of one batch of B rows of T tokens and the backward's
                                temporaries: per layer and token the residual stream, the norms,
                                q/k/v, the head outputs and the MLP's hidden width 4C (twice for
                                SwiGLU) ≈ 48·C, the h attention rows of T weights (scores, weights,
                                their gradient) 3·h·T; the logits, probabilities and gradients 4·V
    tables            2·block_size·C·s (positions: sinusoidal/rotary tables, and their copies)
    runtime           RUNTIME_BYTES (the interpreter, NumPy, PyTorch)

The coefficients were fitted to peak RSS (`/usr/bin/time -f %M`, qed train on text, 3 steps,
--numpy-parallel threads) and rounded up: 4 layers × 128 wide, block 64, batch 16: measured 201 MiB
(numpy) / 350 MiB (torch), estimated 424 / 624 MiB; 2 × 256, block 256, batch 64: 1,874 / 1,459 MiB,
estimated 2,256 / 2,456 MiB; 2 × 64 with 8 heads, block 512, batch 32: 1,456 / 1,306 MiB,
estimated 2,227 / 2,427 MiB.  The estimate lies above every measured peak, so a refusal means the
run could not have fit.
"""

from __future__ import annotations

import math
import os

from .config import GPTConfig, ffn_weights
from .errors import QedError

RUNTIME_BYTES = {"numpy": 300 << 20, "torch": 500 << 20}
GIB = 1 << 30


class MemoryEstimateError(QedError):
    """A config whose estimated memory exceeds what the machine has available."""


def num_params(config: GPTConfig) -> int:
    from .params import param_shapes

    return sum(math.prod(shape) for shape in param_shapes(config).values())


def estimate(
    config: GPTConfig, *, batch_size: int, seq_len: int, itemsize: int, backend: str = "numpy", training: bool = True
) -> dict:
    """Bytes by part (Python integers: no overflow however large the sizes)."""
    P = num_params(config)
    C, L, h, V = config.n_embd, config.n_layer, config.n_head, config.vocab_size
    hidden = 2 if ffn_weights(config.ffn) else 1  # a gated MLP op keeps two hidden arrays
    per_token = L * ((40 + 8 * hidden) * C + 3 * h * seq_len) + 4 * V
    parts = {
        "parameter state": P * itemsize * (5 if training else 1),
        "activations": batch_size * seq_len * itemsize * per_token,
        "tables": 2 * config.block_size * C * itemsize,
        "runtime": RUNTIME_BYTES.get(backend, RUNTIME_BYTES["torch"]),
    }
    parts["total"] = sum(parts.values())
    parts["params"] = P
    return parts


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def available_bytes() -> int | None:
    """What this process may still allocate: the smaller of the kernel's MemAvailable and the room
    left under a cgroup memory limit (containers); None where neither can be read."""
    candidates = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            candidates.append(max(0, limit - usage))
    if not candidates:
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(candidates)


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:,.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):,.0f} MiB"
    return f"{n / 1024:,.0f} KiB"


def check_fits(
    config: GPTConfig,
    *,
    batch_size: int,
    seq_len: int,
    itemsize: int,
    backend: str,
    training: bool = True,
    what: str = "--n-embd, --n-layer, --block-size or --batch-size",
    available: int | None = None,
) -> dict:
    """Refuse (MemoryEstimateError, one line) a run whose estimate exceeds the available memory."""
    est = estimate(
        config, batch_size=batch_size, seq_len=seq_len, itemsize=itemsize, backend=backend, training=training
    )
    have = available_bytes() if available is None else available
    if have is not None and est["total"] > have:
        state = "weights, gradients and Adam state" if training else "weights"
        raise MemoryEstimateError(
            f"this run needs an estimated {fmt_bytes(est['total'])} ({state} "
            f"{fmt_bytes(est['parameter state'])} for {est['params']:,} parameters; activations "
            f"{fmt_bytes(est['activations'])} for {batch_size:,} rows of {seq_len:,} tokens), but the machine "
            f"has {fmt_bytes(have)} available: choose a smaller {what}"
        )
    return est

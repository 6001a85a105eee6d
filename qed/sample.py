"""`qed sample` and `qed eval`: generate from, and score, a run's latest checkpoint."""

from __future__ import annotations

import numpy as np

from .data import VocabOnlyText, task_from_info
from .errors import DataError, QedError


def _task_for_sampling(info: dict):
    """The sort task, or a text vocabulary (the text file itself is not needed to sample)."""
    if info.get("kind") == "sort":
        return task_from_info(info)
    if info.get("kind") == "text" and isinstance(info.get("vocab"), list):
        return VocabOnlyText(info["vocab"])
    raise QedError(f"checkpoint has an unknown task {info.get('kind')!r}")


def sample(
    run_dir: str,
    prompt: str | None = None,
    max_new_tokens: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    greedy: bool = False,
    seed: int = 0,
    backend: str | None = None,
    num_samples: int = 1,
    best: bool = False,
) -> list[str]:
    """Generated texts (prompt + continuation), one per sample.  temperature 0 means greedy."""
    from .checkpoint import BEST, LATEST
    from .train import generate, load_for_inference

    if temperature is not None and not (0 <= temperature < float("inf")):  # nan fails too
        raise QedError(f"--temperature must be a finite number >= 0 (0: greedy), got {temperature}")
    if seed < 0:
        raise QedError(f"--seed must be >= 0, got {seed}")
    if top_k is not None and top_k < 1:
        raise QedError(f"--top-k must be >= 1, got {top_k}")
    if max_new_tokens is not None and max_new_tokens < 0:
        raise QedError(f"--max-new-tokens must be >= 0, got {max_new_tokens}")
    if num_samples < 1:
        raise QedError(f"--num-samples must be >= 1, got {num_samples}")
    runner, c = load_for_inference(run_dir, backend=backend, which=BEST if best else LATEST, batch_size=num_samples)
    task = _task_for_sampling(c.meta["task"])
    block = runner.config.block_size
    rng = np.random.default_rng(seed)
    out = []
    if task.kind == "sort":
        if prompt is None:  # a few held-out inputs the model never saw
            inputs = task.examples("val")
            prompts = inputs[
                rng.choice(len(inputs), size=num_samples, replace=False if num_samples <= len(inputs) else True)
            ]
        else:
            prompts = np.stack([task.encode(prompt)] * num_samples)
        n = task.length if max_new_tokens is None else max_new_tokens
        n = min(n, block + 1 - task.length)  # the model was trained on sequences of 2·length tokens
        # sorting is deterministic: greedy unless the user asked for a temperature
        use_greedy = greedy or temperature == 0 or (temperature is None and top_k is None)
        seqs = generate(
            runner, prompts, n, block, temperature=temperature or 1.0, top_k=top_k, greedy=use_greedy, rng=rng
        )
        for seq in seqs:
            inp, outp = task.decode(seq[: task.length]), task.decode(seq[task.length :])
            ok = "✓" if list(outp) == sorted(inp)[: len(outp)] and len(outp) == task.length else "✗"
            out.append(f"{inp} -> {outp}  {ok}")
        return out
    if prompt is None or prompt == "":
        start = "\n" if "\n" in task.vocab else task.vocab[0]
        prompt_ids = task.encode(start)
        shown = ""
    else:
        prompt_ids = task.encode(prompt)
        shown = prompt
    n = 200 if max_new_tokens is None else max_new_tokens
    idx = np.stack([prompt_ids] * num_samples)
    seqs = generate(
        runner,
        idx,
        n,
        block,
        temperature=1.0 if temperature is None else temperature,
        top_k=top_k,
        greedy=greedy,
        rng=rng,
    )
    for seq in seqs:
        out.append(shown + task.decode(seq[len(prompt_ids) :]))
    return out


def evaluate_run(run_dir: str, backend: str | None = None, best: bool = False) -> dict:
    """Validation loss (and held-out accuracy for the sort task) of the latest (or best) checkpoint."""
    from .checkpoint import BEST, LATEST
    from .train import TrainSettings, evaluate, load_for_inference

    runner, c = load_for_inference(run_dir, backend=backend, which=BEST if best else LATEST, batch_size=256)
    try:
        task = task_from_info(c.meta["task"])
    except DataError as e:
        raise QedError(f"cannot evaluate: {e}") from None
    settings = TrainSettings.from_dict(c.meta["train"])
    if task.kind == "text":
        task.check_block_size(runner.config.block_size)
    res = evaluate(runner, task, settings, runner.config.block_size)
    res["step"] = c.step
    res["checkpoint"] = str(c.path)
    return res


def format_eval(res: dict) -> str:
    from .train import fmt_loss

    s = f"step {res['step']}  val_loss {fmt_loss(res['val_loss'])}"
    if "accuracy" in res:
        s += f"  accuracy {100 * res['accuracy']:.2f}% ({res['correct']}/{res['held_out']} held-out)"
    return s

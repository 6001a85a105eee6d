"""A tiny sort task, model and training settings that the training tests share."""

from qed.config import GPTConfig
from qed.data import SortTask
from qed.train import TrainSettings

TASK = SortTask(length=4, num_digits=3)


def tiny_config(task=TASK, **kw) -> GPTConfig:
    d = dict(n_layer=1, n_head=2, n_embd=16, block_size=task.block_size, vocab_size=task.vocab_size)
    d.update(kw)
    return GPTConfig(**d)


def settings(**kw) -> TrainSettings:
    d = dict(
        steps=6,
        batch_size=8,
        lr=1e-2,
        warmup=2,
        min_lr=1e-3,
        eval_every=2,
        seed=3,
        dtype="float64",
        max_eval_examples=32,
    )
    d.update(kw)
    return TrainSettings(**d)

"""Data: the sorting task (sequences, masks, held-out split) and character-level text."""

import numpy as np
import pytest

from qed.data import IGNORE, SortTask, load_text, read_text, task_from_info
from qed.errors import DataError


# --------------------------------------------------------------------------- sorting task
def test_sort_sequences_and_mask():
    task = SortTask(length=4, num_digits=3)
    x, y = task.sequences(np.array([[2, 0, 1, 0]]))
    # full sequence 2 0 1 0 | 0 0 1 2; x = full[:-1], y = full[1:] with the input half ignored
    assert x.tolist() == [[2, 0, 1, 0, 0, 0, 1]]
    assert y.tolist() == [[IGNORE, IGNORE, IGNORE, 0, 0, 1, 2]]
    assert task.block_size == 7 and x.shape[1] == task.block_size
    assert task.vocab_size == 3


def test_sort_batch_shapes_and_determinism():
    task = SortTask()
    x1, y1 = task.batch("train", 32, np.random.default_rng(5))
    x2, y2 = task.batch("train", 32, np.random.default_rng(5))
    assert x1.shape == y1.shape == (32, task.block_size)
    assert x1.dtype == np.int64
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    L = task.length
    # scored targets are the sorted input; the rest are ignored
    inputs = x1[:, :L]
    np.testing.assert_array_equal(y1[:, L - 1 :], np.sort(inputs, axis=1))
    assert (y1[:, : L - 1] == IGNORE).all()
    assert x1.min() >= 0 and x1.max() < task.num_digits


def test_sort_split_is_disjoint_and_complete():
    task = SortTask(length=6, num_digits=3)
    train, test = task.codes("train"), task.codes("val")
    assert len(np.intersect1d(train, test)) == 0
    assert len(train) + len(test) == 3**6
    assert abs(len(test) / 3**6 - task.test_fraction) < 0.01
    # a batch of training inputs never holds a held-out input
    x, _ = task.batch("train", 4096, np.random.default_rng(0))
    codes = task.encode_inputs(x[:, : task.length])
    assert not np.isin(codes, test).any()
    # the split does not depend on anything but the task (not on --seed)
    np.testing.assert_array_equal(SortTask(length=6, num_digits=3).codes("val"), test)
    # codes round-trip
    np.testing.assert_array_equal(task.encode_inputs(task.decode_codes(test)), test)


def test_sort_eval_batches_cover_held_out():
    task = SortTask(length=5, num_digits=3)
    xs = np.concatenate([x for x, _ in task.eval_batches(50)])
    assert len(xs) == len(task.codes("val"))
    np.testing.assert_array_equal(task.encode_inputs(xs[:, :5]), task.codes("val"))


def test_sort_prompt_encoding():
    task = SortTask(length=6, num_digits=3)
    assert task.encode("201021").tolist() == [2, 0, 1, 0, 2, 1]
    assert task.encode("2 0 1 0 2 1").tolist() == [2, 0, 1, 0, 2, 1]
    with pytest.raises(DataError, match="outside the vocabulary"):
        task.encode("201029")
    with pytest.raises(DataError, match="exactly 6"):
        task.encode("2010")
    assert task.decode([0, 1, 2]) == "012"


def test_sort_task_info_roundtrip():
    task = SortTask(length=5, num_digits=4)
    again = task_from_info(task.info())
    assert again.info() == task.info()
    np.testing.assert_array_equal(again.codes("val"), task.codes("val"))


@pytest.mark.parametrize(
    "kw", [dict(num_digits=1), dict(num_digits=11), dict(length=0), dict(length=20, num_digits=10)]
)
def test_sort_task_bad_sizes(kw):
    with pytest.raises(DataError):
        SortTask(**kw)


# --------------------------------------------------------------------------- text
def test_text_vocab_and_split(tmp_path):
    text = "hello world, héllo wörld!\n" * 40
    f = tmp_path / "t.txt"
    f.write_text(text, encoding="utf-8")
    task = load_text(str(f))
    assert task.vocab == sorted(set(text))
    n = int(0.9 * len(text))
    assert len(task.train) == n and len(task.val) == len(text) - n
    assert task.decode(task.train) == text[:n]
    assert task.decode(task.val) == text[n:]
    assert task.decode(task.encode("héllo")) == "héllo"
    with pytest.raises(DataError, match="outside the vocabulary"):
        task.encode("xyz")


def test_text_batches_are_windows(tmp_path):
    text = "".join(chr(ord("a") + (i * 7) % 26) for i in range(3000))
    f = tmp_path / "t.txt"
    f.write_text(text)
    task = load_text(str(f))
    T = 16
    x, y = task.batch("train", 8, np.random.default_rng(0), T)
    assert x.shape == y.shape == (8, T)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    train_text = task.decode(task.train)
    for row_x, row_y in zip(x, y):
        s = task.decode(row_x) + task.decode(row_y[-1:])
        assert s in train_text
    vx, _ = next(task.eval_batches(8, T, 1, seed=0))
    vx2, _ = next(task.eval_batches(8, T, 1, seed=0))
    np.testing.assert_array_equal(vx, vx2)  # fixed validation windows
    assert task.decode(vx[0]) in task.decode(task.val)


def test_text_bad_files(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_text(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="empty"):
        read_text(str(tmp_path / "empty.txt"))
    (tmp_path / "bin.dat").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DataError, match="UTF-8|binary"):
        read_text(str(tmp_path / "bin.dat"))
    (tmp_path / "nul.txt").write_bytes(b"abc\x00def")
    with pytest.raises(DataError, match="binary"):
        read_text(str(tmp_path / "nul.txt"))
    with pytest.raises(DataError, match="directory"):
        read_text(str(tmp_path))


def test_text_too_short_for_block(tmp_path):
    f = tmp_path / "short.txt"
    f.write_text("abcdefghij")
    task = load_text(str(f))
    with pytest.raises(DataError, match="shorter than block_size"):
        task.check_block_size(16)
    f.write_text("abcdefghij" * 10)  # 100 chars: val split of 10 is too short for 16 + 1
    with pytest.raises(DataError, match="validation split"):
        load_text(str(f)).check_block_size(16)
    load_text(str(f)).check_block_size(8)

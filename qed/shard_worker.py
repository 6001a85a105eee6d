"""The worker process of NumpyGPT's `parallel="processes"`: `python -m qed.shard_worker IN OUT`.

It reads JSON commands from the pipe IN and answers on OUT (the protocol is in qed/workers.py,
the parent side): attach the shared parameter and gradient buffers, build the same model over
them, and run its forward and backward on the batch slice it is given. It ignores SIGINT and
SIGTERM: the parent handles them, and its exit closes the pipes, which ends this loop.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import traceback
from collections import OrderedDict

import numpy as np

from .config import GPTConfig
from .dropout import Noise
from .flat import flat_views
from .model_numpy import NumpyGPT
from .workers import SharedArray, _io_layout, _io_views


def _serve(fd_in: int, fd_out: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with os.fdopen(fd_in, "r", encoding="utf-8") as rd, os.fdopen(fd_out, "w", buffering=1, encoding="utf-8") as wr:
        state: dict = {}
        for line in rd:
            msg = json.loads(line)
            try:
                with np.errstate(**msg.get("errstate", {})):
                    reply = _handle(state, msg)
            except Exception:  # reported to the parent, which raises
                reply = {"error": traceback.format_exc()}
            wr.write(json.dumps(reply) + "\n")


def _handle(state: dict, msg: dict) -> dict:
    op = msg["op"]
    if op == "attach":
        config = GPTConfig.from_dict(msg["config"])
        dtype = np.dtype(msg["dtype"])
        shapes = {k: tuple(s) for k, s in msg["shapes"].items()}
        size = sum(math.prod(s) for s in shapes.values())
        if msg.get("params_fd") is not None:  # inherited descriptor of an unlinked file
            params = SharedArray(size, dtype, fd=msg["params_fd"])  # (and closes it)
        else:
            params = SharedArray(size, dtype, msg["params"])
        grads = SharedArray(size, dtype, msg["grads"])
        model = NumpyGPT(config, dtype=dtype, threads=1)
        views = flat_views(params.array, msg["offsets"], shapes)
        model.params = OrderedDict((k, views[k]) for k in model.params)
        state.update(
            model=model,
            params=params,
            grads=grads,
            grad_views=flat_views(grads.array, msg["offsets"], shapes),
            tape=None,
        )
        return {"ok": True}
    model = state["model"]
    if op == "forward":
        if "io" in msg:
            B, T = msg["cap"]
            state["io"] = SharedArray(_io_layout(B, T, model.config.vocab_size, model.dtype)[0], np.uint8, msg["io"])
        B, T = msg["B"], msg["T"]
        views = _io_views(state["io"].array, _io_layout(B, T, model.config.vocab_size, model.dtype)[1])
        idx = views["idx"].copy()
        targets = views["targets"].copy() if msg["targets"] else None
        noise = Noise(*msg["noise"]) if "noise" in msg else None
        logits, loss, tape = model.forward_slice(idx, targets, noise)
        views["logits"][...] = logits
        state["tape"] = tape
        return {"ok": True, "B": B, "T": T, "loss": loss}
    if op == "backward":
        tape, state["tape"] = state["tape"], None
        if tape is None:
            raise RuntimeError("backward before a forward with targets")
        grads = model.backward_slice(tape, msg["weight"])
        for k, view in state["grad_views"].items():
            if k in grads:
                view[...] = grads[k]
            else:
                view[...] = 0
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))

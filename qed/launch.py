"""Starting the ranks of a run.

    run_train(args, train)   the `qed train` handler: with --nproc N (and no torchrun variables)
                             start N ranks on this machine and wait for them; as a rank (RANK,
                             WORLD_SIZE, … set by torchrun or by --nproc) join the others; else
                             run alone. `train(args, world)` does the training (qed/cli.py).
    launch(command, nproc)   N copies of `command` as ranks 0..N−1 of one world on this machine

The ranks started here share this process's process group and terminal: a Ctrl-C reaches every
one of them, each sets its stop flag, and the ranks agree in the next step's all-reduce to stop
after it (rank 0 saves). A SIGINT or SIGTERM sent to this process alone (`kill`) is passed on to
every rank. If this process is killed, the ranks get SIGTERM (Linux), stop after a step and save.
A rank that fails is reported by the others (qed/distributed.py); one killed by a signal, which
cannot say so itself, is reported here, in one line.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from .distributed import DEFAULT_TIMEOUT, LAUNCHED_BY, World, check_device, rank_env
from .env import get as env_var
from .errors import QedError

EXIT_INTERRUPTED = 130
FORWARDED = tuple(
    s
    for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None))
    if s is not None
)
SI_USER, SI_QUEUE, SI_TKILL = 0, -1, -6  # si_code of a signal sent by a process, not by the terminal


# --------------------------------------------------------------------------- the handler of `qed train`
def run_train(args: argparse.Namespace, train: Callable[[], int]) -> int:
    """Start the ranks, be one, or run alone; the exit status."""
    env = rank_env()
    device = getattr(args, "device", None) or "cpu"
    timeout = getattr(args, "dist_timeout", None) or DEFAULT_TIMEOUT
    from . import workers

    workers.REPLY_TIMEOUT = timeout  # the NumPy backend's worker processes: the same bound
    nproc = getattr(args, "nproc", None)
    if env is None:
        check_device(device)
        if nproc is None or nproc == 1:
            return train(args, World(device=device, timeout=timeout))
        check_nproc(nproc, device, getattr(args, "oversubscribe", False))
        return launch([sys.executable, "-m", "qed", *args.argv], nproc, timeout)
    if nproc is not None and env_var(LAUNCHED_BY) != nproc:
        raise QedError(
            f"--nproc {nproc}: RANK and WORLD_SIZE are already set (torchrun started this process, "
            f"as rank {env['rank']} of {env['size']}); leave out --nproc, torchrun's "
            "--nproc-per-node decides"
        )
    check_device(device)
    if env["size"] == 1:
        return train(args, World(device=device, timeout=timeout))
    world = World.join(env, device, timeout)
    return run_as_rank(world, lambda: train(args, world))


def run_as_rank(world: World, fn: Callable[[], int]) -> int:
    """fn() as rank `world.rank`: its exit status; an error that rank 0 has too is left to rank 0
    to print, any other QedError names the rank; the process group is left after a good end."""
    try:
        rc = fn()
    except BaseException as e:
        if getattr(e, "same_as_rank_0", False):  # rank 0 prints it, once
            return EXIT_INTERRUPTED if isinstance(e, KeyboardInterrupt) else 1
        if isinstance(e, QedError):
            raise QedError(f"rank {world.rank} of {world.size}: {e}") from None
        raise
    # what the run held (a DDP and its process group's threads) freed while the group still
    # exists, not by the collector at interpreter exit
    gc.collect()
    world.close()
    return rc


def check_nproc(nproc: int, device: str, oversubscribe: bool) -> None:
    """One rank per CPU (or per GPU with --device cuda), unless --oversubscribe."""
    from .cpu import cpu_count

    if device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if nproc > have:
            raise QedError(f"--nproc {nproc}: this machine has {have} CUDA device(s), and NCCL needs one per rank")
        return
    have = cpu_count()
    if nproc > have and not oversubscribe:
        raise QedError(
            f"--nproc {nproc}: this process may use {have} CPU(s) and each rank needs one "
            "(--oversubscribe starts them anyway; torchrun starts ranks on several machines)"
        )


# --------------------------------------------------------------------------- the launcher
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _in_child() -> None:
    """Between fork and exec: take signals again, and get SIGTERM if the launcher dies (Linux)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the ranks outlive a killed launcher
        pass


def launch(command: list[str], nproc: int, timeout: float = DEFAULT_TIMEOUT, env: dict | None = None) -> int:
    """Run `command` as ranks 0..nproc−1 (torchrun's variables, rank 0's store on a free local
    port) and wait for all of them. The exit status: the first failing rank's, else 130 if any
    was interrupted, else 0."""
    base = dict(
        os.environ if env is None else env,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        **{LAUNCHED_BY: str(nproc)},
    )
    can_wait = hasattr(signal, "sigtimedwait")
    if can_wait:  # signals queue up for the loop below instead of interrupting it
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    else:  # elsewhere: a terminal's Ctrl-C reaches the ranks themselves; this process waits on
        old_int = signal.signal(signal.SIGINT, lambda signum, frame: None)
    procs = []
    try:
        for r in range(nproc):
            procs.append(
                subprocess.Popen(
                    command, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), preexec_fn=_in_child if can_wait else None
                )
            )
        return _wait(procs, timeout, can_wait)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if can_wait:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        else:
            signal.signal(signal.SIGINT, old_int)


def _wait(procs: list, timeout: float, can_wait: bool) -> int:
    """Wait for every rank, passing on the signals this process alone was sent; once a rank has
    failed, give the others the collective timeout (and a minute) to notice, then kill them."""
    codes: dict[int, int] = {}
    killed = set()  # ranks this process killed (and reported)
    failed_at = None
    while len(codes) < len(procs):
        if can_wait:
            info = signal.sigtimedwait(FORWARDED, 0.1)
            if info is not None and info.si_code in (SI_USER, SI_QUEUE, SI_TKILL):  # a terminal's reached them too
                forward = signal.SIGTERM if info.si_signo == getattr(signal, "SIGHUP", None) else info.si_signo
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(forward)
        else:
            time.sleep(0.1)
        for r, p in enumerate(procs):
            if r not in codes and p.poll() is not None:
                codes[r] = p.returncode
                if p.returncode not in (0, EXIT_INTERRUPTED) and failed_at is None:
                    failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > timeout + 60:
            for r, p in enumerate(procs):
                if r not in codes:
                    p.kill()
                    killed.add(r)
                    print(
                        f"qed: error: rank {r} of {len(procs)} did not stop within {timeout + 60:g} s of "
                        "another rank's failure; killed it",
                        file=sys.stderr,
                        flush=True,
                    )
            failed_at = float("inf")
    for r in sorted(codes):
        if codes[r] < 0 and r not in killed:  # killed by a signal: it could not say so itself
            name = signal.Signals(-codes[r]).name if -codes[r] in signal.Signals._value2member_map_ else -codes[r]
            print(f"qed: error: rank {r} of {len(procs)} was killed by {name}", file=sys.stderr, flush=True)
    bad = [c for c in codes.values() if c not in (0, EXIT_INTERRUPTED)]
    if bad:
        return 1 if bad[0] < 0 else bad[0]
    return EXIT_INTERRUPTED if EXIT_INTERRUPTED in codes.values() else 0

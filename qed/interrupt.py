"""Stopping a run safely: SIGINT (Ctrl-C) and SIGTERM ask it to stop; nothing asks it to stop *now*.

The first signal sets `requested`; the loop finishes its step, saves a checkpoint and exits 130.
Every further signal while that is under way is counted and answered with a line saying the save
is in progress; it never cuts the save short (a second and a third Ctrl-C in quick succession used
to lose the interval since the last checkpoint).  SIGQUIT (Ctrl-\\) or SIGKILL still stop at once;
the checkpoint files are written atomically, so even then `latest` names a whole checkpoint.

A process that exits once a stop is done (`qed train`) calls `ignore_after_stop()`: a signal that
arrives after the save, while the process prints its last line and exits, is then ignored too,
where Python's own handler would kill it with SIGINT instead of the exit status 130.  A caller
that goes on (a notebook) gets its handlers back as they were.
"""

from __future__ import annotations

import os
import signal

_IGNORE_AFTER_STOP = False


def ignore_after_stop() -> None:
    """Once a stop was requested and handled, leave SIGINT/SIGTERM ignored: this process exits."""
    global _IGNORE_AFTER_STOP
    _IGNORE_AFTER_STOP = True


SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None)) if s is not None)


class StopRequest:
    """A context manager that turns SIGINT/SIGTERM into a request the training loop polls."""

    def __init__(self, on_first: str = "", on_more: str = ""):
        self.requested = False
        self.extra = 0  # signals after the first (ignored)
        self.signal_name = None
        self._on_first = on_first
        self._on_more = on_more
        self._old: dict = {}

    def __enter__(self):
        for sig in SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except (ValueError, OSError):  # not the main thread: Ctrl-C raises KeyboardInterrupt
                pass
        return self

    def _handler(self, signum, frame):
        if self.requested:
            self.extra += 1
            msg = self._on_more
        else:
            self.requested = True
            self.signal_name = signal.Signals(signum).name
            msg = self._on_first
        if msg:
            try:
                os.write(2, ("\n" + msg + "\n").encode())  # async-signal-safe, unlike print
            except OSError:
                pass

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, signal.SIG_IGN if self.requested and _IGNORE_AFTER_STOP else old)
        self._old = {}
        return False

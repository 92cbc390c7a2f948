"""Progress messages of the ``gpucal`` commands: a line per stage, a heartbeat while a stage runs long.

Everything goes to stderr so that stdout stays a clean table or JSON document.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Longest silence a running stage is allowed: a heartbeat line is printed after this many seconds.
HEARTBEAT_S = 5.0
#: Width of the text progress bar of a stage of counted steps.
BAR_WIDTH = 20

_last_line = [time.monotonic()]


def log_progress(message: str) -> None:
    """Write one progress line to stderr (flushed at once)."""
    print(message, file=sys.stderr, flush=True)
    _last_line[0] = time.monotonic()


def bar(done: int, total: int) -> str:
    """Return ``[#####-----] done/total``, a text bar of ``BAR_WIDTH`` cells.

    Examples
    --------
    >>> bar(3, 4)
    '[###############-----] 3/4'
    """
    filled = BAR_WIDTH * done // max(total, 1)
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total}"


@contextmanager
def heartbeat(status: Callable[[], str]) -> Iterator[None]:
    """While the block runs, print ``status()`` whenever nothing was printed for ``HEARTBEAT_S`` seconds.

    The heartbeat runs on a daemon thread; numba's compiler and numpy release the interpreter often
    enough for it to keep time. ``status`` must be cheap and safe to call from that thread.
    """
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S / 10):
            if time.monotonic() - _last_line[0] >= HEARTBEAT_S:
                log_progress(status())

    thread = threading.Thread(target=beat, name="gpucal-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()

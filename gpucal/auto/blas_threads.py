"""One BLAS thread while any automatic calibrator fits, however many fit at once.

threadpoolctl's limits are the process's, and each ``threadpool_limits`` restores on exit what it saw
on entry: two fits in two threads each saved the other's limit of one, and the last to finish left
BLAS on one thread for good. Here the first fit to start sets the limit and the last to finish
restores the process's own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.Lock()
_state: dict[str, Any] = {"fits": 0, "limiter": None}


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS on one thread; the limit set by the first block to enter, the process's
    limits restored when the last one leaves."""
    from threadpoolctl import threadpool_limits

    with _LOCK:
        if _state["fits"] == 0:
            _state["limiter"] = threadpool_limits(limits=1, user_api="blas")
        _state["fits"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["fits"] -= 1
            if _state["fits"] == 0:
                _state["limiter"].restore_original_limits()
                _state["limiter"] = None

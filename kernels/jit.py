"""numba for gpucal's compiled CPU code: every module of gpucal that compiles imports numba from here.

Importing this module is gpucal's first use of its kernels, and the one place gpucal changes the
process it runs in (``import gpucal`` alone changes nothing), each time only where the user set nothing:

* numba caches compiled code in a user cache folder, never inside the installed package
  (``NUMBA_CACHE_DIR``, see :mod:`gpucal.kernels.numba_cache`: a cache in the package outlives
  ``pip install -e .``), and the first compilation of one of gpucal's functions logs one line;
* ``OMP_WAIT_POLICY=PASSIVE``: numba's parallel loops run on its OpenMP layer, whose threads spin after
  every parallel region by default; on few cores the spinning threads starve the numpy work between
  gpucal's parallel loops (a 1e7-row histogram fit measured 1.6 s spinning, 0.22 s passive). OpenMP reads
  it when numba's first parallel loop starts, after this module ran.

:func:`parallel_rows` compiles a row kernel twice, serial and parallel, and runs the serial one on
small inputs: numba's ``parallel=True`` compiles three to four times slower than the same function
serial, and on a few hundred thousand rows a pass takes milliseconds either way. :func:`numpy_row_chunks`
spreads elementwise numpy work over the same threads, where the numbers must be numpy's own.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpucal.kernels.numba_cache import register_compile_notice, use_user_cache_dir

use_user_cache_dir()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402  (after the cache folder is chosen: numba reads it on import)
import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

register_compile_notice()

__all__ = [
    "PARALLEL_MIN_ROWS",
    "ParallelRows",
    "empty_rows",
    "map_row_chunks",
    "njit",
    "numba",
    "numpy_row_chunks",
    "parallel_rows",
    "parallel_twins_only",
    "prange",
    "runs_parallel",
]

#: Rows from which a :func:`parallel_rows` kernel runs its parallel twin; below it the serial one. A
#: parallel compilation costs 3.5 to 4 times the serial one (1 to 5 s of CPU more per kernel), a pass
#: over a few hundred thousand rows milliseconds: above the demo's 150,000 rows, so that its first run
#: compiles no parallel kernel, and below the millions of rows where the cores pay.
PARALLEL_MIN_ROWS = 262_144
#: When set (:func:`parallel_twins_only`), every :func:`parallel_rows` kernel runs its parallel twin.
_FORCE_PARALLEL = [False]


class ParallelRows:
    """A numba kernel compiled as two twins, chosen per call by the size of its input.

    ``serial`` is the function compiled without ``parallel`` (``prange`` runs as ``range``), ``parallel``
    the same function with it; each compiles on its first call, into numba's cache (the serial twin
    under its own name, ``<name>.serial``: numba's cache keys on the function, not on its options). A
    call runs ``parallel`` when the input's size, the product of the first ``axes`` dimensions of
    argument ``rows``, is at least :data:`PARALLEL_MIN_ROWS`, else ``serial``. Called from Python
    only (numba cannot call it from compiled code).
    """

    def __init__(self, function: Callable[..., Any], rows: str, axes: int) -> None:
        code = function.__code__
        self.py_func = function
        self._position = code.co_varnames[: code.co_argcount].index(rows)
        self._axes = axes
        self.parallel = numba.njit(parallel=True, cache=True)(function)
        serial = types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__)
        serial.__qualname__ = f"{function.__qualname__}.serial"
        self.serial = numba.njit(cache=True)(serial)
        functools.update_wrapper(self, function)

    def size(self, *args: Any) -> int:
        """The input size that picks the twin: the product of the first ``axes`` dimensions of ``rows``."""
        return math.prod(args[self._position].shape[: self._axes])

    def __call__(self, *args: Any) -> Any:
        return self.twin(self.size(*args))(*args)

    def twin(self, size: int) -> Any:
        """The twin an input of ``size`` rows runs: for a kernel that is one step of a pass over rows
        it does not take (:func:`runs_parallel`)."""
        return self.parallel if runs_parallel(size) else self.serial


def runs_parallel(size: int) -> bool:
    """Whether a :func:`parallel_rows` kernel runs its parallel twin on an input of ``size`` rows."""
    return _FORCE_PARALLEL[0] or size >= PARALLEL_MIN_ROWS


def parallel_rows(rows: str, *, axes: int = 1) -> Callable[[Callable[..., Any]], ParallelRows]:
    """Compile the decorated row kernel as a serial and a parallel twin (see :class:`ParallelRows`).

    ``rows`` names the argument whose first dimension is the row count (``axes=2``: the product of
    its first two, for kernels parallel over the cells of a table); arguments are passed by position.
    """
    return lambda function: ParallelRows(function, rows, axes)


@contextlib.contextmanager
def parallel_twins_only() -> Iterator[None]:
    """Run the parallel twin of every :func:`parallel_rows` kernel while the block runs, whatever the
    size (``gpucal warmup`` compiles them ahead of large inputs; tests compare the twins)."""
    before = _FORCE_PARALLEL[0]
    _FORCE_PARALLEL[0] = True
    try:
        yield
    finally:
        _FORCE_PARALLEL[0] = before


@njit(cache=True)
def _empty_float64(n):  # pragma: no cover - compiled
    return np.empty(n, dtype=np.float64)


def empty_rows(n_rows: int) -> np.ndarray:
    """A fresh float64 array of ``n_rows`` (not initialised) for a row kernel to write first: the output
    of a predict.

    Allocated by numba (C ``malloc``), not numpy, for the pages it lands on. numpy advises transparent
    huge pages on every array of 4 MB or more, and on the 2-core virtual machines gpucal is measured on
    the first write of such an array cost 0.01 to 0.12 s of system time per 80 MB, from one run to the
    next (a 2 MB page zeroed by the thread that faults it); ``malloc`` maps a large request afresh with
    no advice, in small pages that every thread of the parallel loop faults as it writes them: 0.018 to
    0.029 s wall in every run. A predict writes its output once, in order, so huge pages save it nothing
    afterwards.
    """
    return _empty_float64(n_rows)


#: Row chunks of :func:`numpy_row_chunks` start at multiples of this: every element sits at the same
#: place in a vector loop's group of elements as in one call over all the rows.
CHUNK_ALIGN = 4096
#: Rows of a :func:`numpy_row_chunks` chunk at most: the temporaries of numpy expressions stay under a
#: MB each, in the cache, where one call over 1e7 rows holds several 80 MB arrays at once (and 8 MB
#: temporaries stay resident in each worker thread's malloc arena after the call: 1e7-row MBCT fit's
#: peak 1646 -> 1770 MiB with chunks of 2**20 rows).
MAX_CHUNK_ROWS = 1 << 16


def numpy_row_chunks(work: Callable[[int, int], None], n_rows: int) -> None:
    """Call ``work(start, stop)`` over row chunks of ``range(n_rows)``, in as many threads as numba uses.

    For elementwise numpy work that writes each row's results into arrays made beforehand: numpy
    releases the GIL in its loops, so the chunks use every core, and each element is computed as one
    call over all the rows computes it (same numbers, where a numba kernel's ``log`` or ``exp`` may
    round differently from numpy's). Chunks hold at most :data:`MAX_CHUNK_ROWS` rows. Below
    :data:`PARALLEL_MIN_ROWS` rows, one call in this thread.
    """
    n_threads = numba.get_num_threads()
    if n_rows < PARALLEL_MIN_ROWS or n_threads < 2:
        work(0, n_rows)
        return
    size = min(-(-n_rows // n_threads), MAX_CHUNK_ROWS)
    size = -(-size // CHUNK_ALIGN) * CHUNK_ALIGN
    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        for done in [pool.submit(work, a, min(n_rows, a + size)) for a in range(0, n_rows, size)]:
            done.result()


def map_row_chunks(function: Callable[..., np.ndarray], *arrays: np.ndarray) -> Any:
    """``function(*arrays)`` for an elementwise numpy ``function`` of float64 vectors of one length,
    computed over row chunks by :func:`numpy_row_chunks` into one fresh output (:func:`empty_rows`).

    The numbers of one call over all the rows, on every core, without that call's temporaries of every
    row (each 80 MB at 1e7 rows, written for the first time). Anything else (fewer rows than a parallel
    kernel takes, other dtypes or shapes, cupy) is one call.
    """
    n_rows = arrays[0].shape[0]
    vectors = all(
        isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.float64 and a.shape[0] == n_rows
        for a in arrays
    )
    if not vectors or not runs_parallel(n_rows):
        return function(*arrays)
    out = empty_rows(n_rows)

    def rows(start: int, stop: int) -> None:
        out[start:stop] = function(*(a[start:stop] for a in arrays))

    numpy_row_chunks(rows, n_rows)
    return out

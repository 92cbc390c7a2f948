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
serial, and on a few hundred thousand rows a pass takes milliseconds either way.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

from gpucal.kernels.numba_cache import register_compile_notice, use_user_cache_dir

use_user_cache_dir()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402  (after the cache folder is chosen: numba reads it on import)
from numba import njit, prange  # noqa: E402

register_compile_notice()

__all__ = [
    "PARALLEL_MIN_ROWS",
    "ParallelRows",
    "njit",
    "numba",
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
        return (self.parallel if runs_parallel(self.size(*args)) else self.serial)(*args)


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

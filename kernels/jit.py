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
"""

from __future__ import annotations

import os

from gpucal.kernels.numba_cache import register_compile_notice, use_user_cache_dir

use_user_cache_dir()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402  (after the cache folder is chosen: numba reads it on import)
from numba import njit, prange  # noqa: E402

register_compile_notice()

__all__ = ["njit", "numba", "prange"]

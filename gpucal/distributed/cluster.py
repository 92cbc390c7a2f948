"""Start a local Dask cluster for gpucal, on CPUs or one worker per GPU, and pick the partitions' library.

The GPU glue is kept in three small functions (:func:`local_cuda_cluster`, :func:`dataframe_backend`
with ``"cudf"``, :func:`gpu_count`) so that everything else is exercised by the CPU tests; the GPU ones
are marked ``gpu`` and run only where a GPU is present.

Why these defaults
------------------
* CPU (:func:`local_cluster`): one single-threaded worker process per core. gpucal's kernels are
  numba loops that use every thread numba is given, so each worker is pinned to its share of the
  cores (``NUMBA_NUM_THREADS`` and ``OMP_NUM_THREADS`` in the workers' environment): without it, n
  workers times n numba threads oversubscribe the machine.
* GPU (:func:`local_cuda_cluster`): ``dask_cuda.LocalCUDACluster``, one worker per visible GPU (its
  default), an RMM pool taking most of each GPU up front (allocations from the pool cost nothing, which
  matters for the many small per-partition histograms), cupy allocating from that pool, and cuDF's own
  spilling to host memory, which the RAPIDS documentation advises for dataframe work (it spills
  single buffers, where Dask-CUDA's device limit spills whole task outputs).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

BACKENDS = ("pandas", "cudf")

#: Share of each GPU's memory the RMM pool takes at start (dask-cuda reads a float as a fraction).
RMM_POOL_FRACTION = 0.8


def worker_env(threads_per_worker: int) -> dict[str, str]:
    """Environment of a worker process: numba and OpenMP limited to the worker's threads."""
    n = str(int(threads_per_worker))
    return {"NUMBA_NUM_THREADS": n, "OMP_NUM_THREADS": n}


def local_cluster(
    n_workers: int | None = None,
    *,
    threads_per_worker: int = 1,
    processes: bool = True,
    dashboard_address: str | None = None,
    **options: Any,
) -> Any:
    """Start a ``distributed.LocalCluster`` on this machine's CPUs with gpucal's defaults.

    Parameters
    ----------
    n_workers : int, optional
        Worker processes (threads with ``processes=False``); default: the cores available to this
        process divided by ``threads_per_worker``.
    threads_per_worker : int, default=1
        Threads per worker; numba inside the worker uses as many (see the module docstring).
    processes : bool, default=True
        Worker processes (the numba kernels release the GIL, but pandas work does not) or threads of
        this process (fast to start; what the tests use). A script that starts process workers needs
        the ``if __name__ == "__main__":`` guard.
    dashboard_address : str, optional
        Where to serve the dashboard (``":8787"``); None serves none.
    **options
        Passed to ``distributed.LocalCluster``.

    Returns
    -------
    distributed.LocalCluster
        Connect with ``distributed.Client(cluster)``; close both when done (both are context managers).
    """
    from distributed import LocalCluster

    if n_workers is None:
        n_workers = max(1, len(os.sched_getaffinity(0)) // max(1, threads_per_worker))
    if processes:
        options.setdefault("env", worker_env(threads_per_worker))
    return _started(
        LocalCluster,
        dashboard_address,
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=processes,
        **options,
    )


def local_cuda_cluster(
    n_workers: int | None = None,
    *,
    rmm_pool_size: float | str | None = RMM_POOL_FRACTION,
    enable_cudf_spill: bool = True,
    dashboard_address: str | None = None,
    **options: Any,
) -> Any:
    """Start a ``dask_cuda.LocalCUDACluster``: one worker per GPU, an RMM pool, cuDF spilling.

    Parameters
    ----------
    n_workers : int, optional
        Number of GPUs to use; default: every GPU in ``CUDA_VISIBLE_DEVICES`` (or all of them).
    rmm_pool_size : float, str or None, default=0.8
        RMM pool per GPU: a fraction of its memory, a size such as ``"30GB"``, or None for no pool.
    enable_cudf_spill : bool, default=True
        Let cuDF spill device buffers to host memory when the GPU fills up.
    dashboard_address : str, optional
        Where to serve the dashboard; None serves none.
    **options
        Passed to ``LocalCUDACluster`` (``CUDA_VISIBLE_DEVICES``, ``protocol="ucx"``, ...).

    Returns
    -------
    dask_cuda.LocalCUDACluster

    Raises
    ------
    ImportError
        dask-cuda is not installed (``pip install gpucal[gpu]``, or the RAPIDS image of ``docker/``).
    """
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        msg = "local_cuda_cluster needs dask-cuda: install gpucal[gpu] or use the RAPIDS image (docker/)"
        raise ImportError(msg) from exc
    if rmm_pool_size is not None:
        # cupy arrays (gpucal's kernels) then come from the same pool as cuDF's columns.
        options.setdefault("rmm_allocator_external_lib_list", ["cupy"])
    return _started(
        LocalCUDACluster,
        dashboard_address,
        n_workers=n_workers,
        rmm_pool_size=rmm_pool_size,
        enable_cudf_spill=enable_cudf_spill,
        **options,
    )


def _started(cluster_class: Any, dashboard_address: str | None, **options: Any) -> Any:
    """Start ``cluster_class(dashboard_address=..., **options)``; without a dashboard, let the scheduler's
    small HTTP endpoint take any free port, not 8787.

    Otherwise a second cluster on the machine (another user, a notebook) makes the scheduler warn
    that 8787 is taken.
    """
    if dashboard_address is None:
        options.setdefault("scheduler_kwargs", {}).setdefault("dashboard_address", ":0")
    return cluster_class(dashboard_address=dashboard_address, **options)


def gpu_count() -> int:
    """Number of usable CUDA GPUs: 0 without cupy or a driver (no CUDA context on CPU-only machines)."""
    from gpucal._backend import gpu_available

    if not gpu_available():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


@contextlib.contextmanager
def dataframe_backend(backend: str) -> Iterator[None]:
    """Create dask dataframes with ``backend`` partitions (``"pandas"`` or ``"cudf"``) inside the block.

    ``dask.dataframe.read_parquet``, ``from_dict`` and friends then build cudf partitions on the
    workers; every gpucal metric and 1-D calibrator reads either kind. The same as
    ``dask.config.set({"dataframe.backend": backend})``, with a clear error when dask-cudf is missing.
    """
    if backend not in BACKENDS:
        msg = f"The 'backend' parameter must be one of {BACKENDS}. Got {backend!r} instead."
        raise ValueError(msg)
    if backend == "cudf":
        try:
            import dask_cudf  # noqa: F401  (registers the cudf backend with dask)
        except ImportError as exc:
            msg = "backend='cudf' needs dask-cudf: install gpucal[gpu] or use the RAPIDS image (docker/)"
            raise ImportError(msg) from exc
    import dask

    with dask.config.set({"dataframe.backend": backend}):
        yield

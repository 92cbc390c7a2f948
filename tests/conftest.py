"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest

# The simulator scripts run in their own processes (tests/test_kernels_cudasim.py); --doctest-modules must
# not import them here.
collect_ignore_glob = ["cudasim/*.py"]


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    """A Dask client on a two-worker, one-thread-each LocalCluster of threads, one per test module."""
    distributed = pytest.importorskip("distributed")
    from gpucal.distributed import local_cluster

    with (
        local_cluster(2, processes=False, threads_per_worker=1) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c

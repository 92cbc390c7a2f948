"""The GPU glue of gpucal.distributed: cudf partitions and LocalCUDACluster (marker ``gpu``).

These run only where a CUDA GPU and the RAPIDS libraries are present (the ``docker/`` GPU image);
everything they call besides the GPU glue is covered by tests/test_distributed.py on the CPU.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from gpucal._backend import gpu_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU (cupy.is_available())"),
]


def _frame(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(0.7, 1.2, n), 3)
    return pd.DataFrame({"score": p, "y": (rng.random(n) < p).astype(np.float64), "z": rng.integers(0, 4, n)})


def test_gpu_count_sees_the_device() -> None:
    from gpucal.distributed import gpu_count

    assert gpu_count() >= 1


def test_cudf_partitions_on_a_cuda_cluster_equal_pandas() -> None:
    pytest.importorskip("dask_cuda")
    pytest.importorskip("dask_cudf")
    import dask.dataframe as dd
    import distributed

    from gpucal import make_calibrator, metrics
    from gpucal.distributed import dataframe_backend, local_cuda_cluster

    frame = _frame()
    with local_cuda_cluster(rmm_pool_size=0.2) as cluster, distributed.Client(cluster):
        assert len(cluster.workers) >= 1
        with dataframe_backend("cudf"):  # read_parquet follows it; from_pandas does not
            gdf = dd.from_pandas(frame, npartitions=4).to_backend("cudf")
        assert type(gdf.partitions[0].compute()).__module__.startswith("cudf")
        for call in (
            lambda d: metrics.ece(d.y, d.score, strategy="quantile"),
            lambda d: metrics.roc_auc(d.y, d.score),
            lambda d: metrics.mvce(d.y, d.score, n_views=5, bin_size=200),
            lambda d: metrics.field_ece(d.y, d.score, d.z),
        ):
            assert_allclose(call(gdf), call(frame), rtol=1e-9)
        cal = make_calibrator("isotonic").fit(gdf[["score"]], gdf.y)
        predicted = cal.predict(gdf[["score"]]).compute()
        assert type(predicted).__module__.startswith("cudf")
        local = make_calibrator("isotonic").fit(frame[["score"]], frame.y)
        assert_allclose(
            predicted.to_pandas().to_numpy(), local.predict(frame[["score"]]).to_numpy(), rtol=1e-12
        )

"""Dask fits that lose a worker: the model of a fit without the fault, or a clear error, never a hang.

A real ``distributed.LocalCluster`` of two worker processes (one thread each, each under a nanny that
starts a new worker when its process dies). A worker kills its own process with SIGKILL when a chosen
task starts (``tests/_worker_faults.py``: the kill point is a task's function, so it falls in the same
pass of every run): during the read, while a per-worker store is built, during a tree level, in the
reduce-scatter of a level's histograms, in a Newton step; CI kills a worker at each of these points in
one MBCT fit, the slow tests at one point per fit. The fit must then give the single-machine
model at the tolerance of the dask equivalence tests (``test_distributed_mbct.py``,
``test_distributed_feature_platt.py``); when no worker can recompute the rows it must fail with
``WorkerLostError`` naming the lost worker. Every test runs under an alarm, so a hang fails the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from gpucal import MBCT, PlattCalibrator
from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
from gpucal.calibrators.logistic import SERIES_MIN_ROWS
from gpucal.datasets import make_ctr
from gpucal.rows import PassTimeoutError, WorkerLostError
from gpucal.rows._faults import NO_WORKERS_KEY, PASS_TIMEOUT_KEY
from gpucal.rows.streamed import STREAM_KEY

distributed = pytest.importorskip("distributed")

#: Seconds a test may take before the alarm fails it (a fit takes seconds here, and so does each kill).
ALARM_S = 480
N_ROWS = 24_000
N_PARTS = 4
FEATURES = ["score", "region", "user_segment", "device"]
MBCT_PARAMS = {"max_trees": 2, "max_depth": 3, "leaf_map": "platt"}
#: Rows of the Platt scaling fits that lose a worker in a Newton step: from ``SERIES_MIN_ROWS`` rows one
#: pass of bin moments fits Platt scaling, and there is no Newton step to lose it in.
PLATT_ROWS = 12_000
PLATT_PARAMS = {"categorical_cols": ["device"], "n_bins": 8}


@pytest.fixture(autouse=True)
def _alarm(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test, instead of hanging the run, when it takes longer than ``ALARM_S``."""

    def ring(signum: int, frame: Any) -> None:
        # pytest.fail raises a BaseException: no ``except Exception`` (or TimeoutError) on the way swallows it
        pytest.fail(f"{request.node.name} ran for more than {ALARM_S} s: a fit hung after losing a worker")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(ALARM_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _cluster(n_workers: int) -> Any:
    from gpucal.distributed import local_cluster

    return local_cluster(n_workers, processes=True, threads_per_worker=1)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults") / "plan.json"


@pytest.fixture
def cluster(plan: Path) -> Iterator[tuple[Any, Any]]:
    """Two worker processes under nannies, every worker with the kill plugin reading ``plan``.

    A fresh cluster per test: a nanny restarting its killed worker can race the scheduler's removal of
    the dead one ("name taken") and give up, so a cluster shared across tests would carry one test's
    kill into the next one's workers and failures."""
    from tests._worker_faults import KillAtTask

    with _cluster(2) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        client.register_plugin(KillAtTask(str(plan)))
        yield cluster, client


@pytest.fixture
def client(cluster: tuple[Any, Any]) -> Any:
    return cluster[1]


def _arm(plan: Path, kills: list[tuple[str, int]]) -> Callable[[], list[str]]:
    """Plan ``kills`` (``(function name, matching tasks to let start first)``, in order); return a
    function reading the log of the kills done (``address name`` lines), which disarms the plan."""
    for suffix in (".count", ".log"):
        Path(f"{plan}{suffix}").unlink(missing_ok=True)
    plan.write_text(json.dumps([{"names": [name], "skip": skip} for name, skip in kills]))

    def kills_done() -> list[str]:
        plan.unlink(missing_ok=True)
        log = Path(f"{plan}.log")
        return log.read_text().splitlines() if log.exists() else []

    return kills_done


@pytest.fixture(scope="module")
def ctr() -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    df = make_ctr(N_ROWS, "mixed", seed=3)
    X = df[FEATURES].copy()
    X["region"] = "r" + X["region"].astype(str)
    w = np.random.default_rng(2).random(N_ROWS) * 2.0
    return X, df["label"].astype(np.float64), w


def _dask(X: pd.DataFrame, y: pd.Series, w: np.ndarray) -> tuple[Any, Any, Any]:
    dw = dd.from_pandas(pd.Series(w, index=X.index), npartitions=N_PARTS)
    return dd.from_pandas(X, npartitions=N_PARTS), dd.from_pandas(y, npartitions=N_PARTS), dw


@pytest.fixture(scope="module")
def platt_ctr(ctr: tuple[pd.DataFrame, pd.Series, np.ndarray]) -> tuple[pd.DataFrame, pd.Series, np.ndarray]:
    """The first ``PLATT_ROWS`` rows of ``ctr``: Platt scaling fits them by Newton passes."""
    assert PLATT_ROWS < SERIES_MIN_ROWS
    X, y, w = ctr
    return X.iloc[:PLATT_ROWS], y.iloc[:PLATT_ROWS], w[:PLATT_ROWS]


@pytest.fixture(scope="module")
def mbct_one(ctr: tuple[pd.DataFrame, pd.Series, np.ndarray]) -> MBCT:
    X, y, w = ctr
    return MBCT(**MBCT_PARAMS).fit(X, y, sample_weight=w)


@pytest.fixture(scope="module")
def platt_one(ctr: tuple[pd.DataFrame, pd.Series, np.ndarray]) -> FeatureAwarePlattCalibrator:
    X, y, w = ctr
    return FeatureAwarePlattCalibrator(**PLATT_PARAMS).fit(X, y, sample_weight=w)


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float) -> None:
    scale = np.maximum(np.abs(expected), 1.0)
    assert np.max(np.abs(actual - expected) / scale, initial=0.0) <= rtol


def _assert_same_mbct(two: MBCT, one: MBCT, X: pd.DataFrame) -> None:
    """The checks of ``test_distributed_mbct``: the same trees, values within 1e-9 relative."""
    e1, e2 = one.ensemble_, two.ensemble_
    assert e1.n_trees >= 2
    for name in ("node_feature", "node_child_base", "child_table", "tree_start"):
        np.testing.assert_array_equal(getattr(e2, name), getattr(e1, name), err_msg=name)
    _close(e2.node_value, e1.node_value, 1e-9)
    _close(two.init_, one.init_, 1e-9)
    _close(np.asarray(two.predict(X)), np.asarray(one.predict(X)), 1e-9)


def _killed(kills_done: Callable[[], list[str]], kills: list[tuple[str, int]]) -> list[str]:
    """The addresses of the workers killed; every planned kill must have happened, in order."""
    done = kills_done()
    assert [line.split()[1] for line in done] == [name for name, _ in kills], done
    return [line.split()[0] for line in done]


# ``read_block``: the read of the partitions; ``join_holdout``: a worker's store of its partitions;
# ``_routed``: a tree level's routing of the rows; ``_finish_share``: the reduce-scatter of a level's
# histograms; ``_map_sums``: a Newton step of the leaf refit. CI kills a worker at each of them in one
# fit; the slow tests kill one worker per fit.
MBCT_KILLS = [("read_block", 1), ("join_holdout", 0), ("_routed", 2), ("_finish_share", 2), ("_map_sums", 3)]
ONE_KILL = [pytest.param([kill], marks=pytest.mark.slow, id=kill[0]) for kill in MBCT_KILLS]


@pytest.mark.parametrize("kills", [pytest.param(MBCT_KILLS, id="every-point"), *ONE_KILL])
def test_mbct_fit_survives_lost_workers(client, plan, ctr, mbct_one, kills) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills_done = _arm(plan, kills)
    two = MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
    lost = _killed(kills_done, kills)
    assert not set(lost) & set(client.scheduler_info(n_workers=-1)["workers"])
    _assert_same_mbct(two, mbct_one, X)


def test_streamed_mbct_fit_survives_lost_workers(client, plan, ctr, mbct_one) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills = [("_share_histogram", 3), ("_map_sums", 3)]
    kills_done = _arm(plan, kills)
    with dask.config.set({STREAM_KEY: True}):
        two = MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
    _killed(kills_done, kills)
    _assert_same_mbct(two, mbct_one, X)


def test_feature_platt_fit_survives_lost_workers(client, plan, ctr, platt_one) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills = [("read_block", 1), ("hessian_sums", 3)]
    kills_done = _arm(plan, kills)
    two = FeatureAwarePlattCalibrator(**PLATT_PARAMS).fit(dX, dy, sample_weight=dw)
    _killed(kills_done, kills)
    # The checks of test_distributed_feature_platt: the same encoder and steps, coefficients to 1e-8.
    assert two.encoder_ == platt_one.encoder_
    assert two.n_iter_ == platt_one.n_iter_
    expected = np.r_[platt_one.coef_score_, platt_one.intercept_, platt_one.coef_]
    np.testing.assert_allclose(np.r_[two.coef_score_, two.intercept_, two.coef_], expected, rtol=1e-8)


def test_platt_fit_survives_a_lost_worker(client, plan, platt_ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = platt_ctr
    dX, dy, dw = _dask(X, y, w)
    one = PlattCalibrator().fit(X["score"].to_numpy(), y.to_numpy(), sample_weight=w)
    kills = [("logistic_vector", 3)]
    kills_done = _arm(plan, kills)
    two = PlattCalibrator().fit(dX["score"], dy, sample_weight=dw)
    _killed(kills_done, kills)
    np.testing.assert_allclose([two.a_, two.b_], [one.a_, one.b_], rtol=1e-9)


def test_a_task_that_kills_its_workers_fails_clearly(cluster, client, plan, platt_ctr) -> None:  # type: ignore[no-untyped-def]
    """A task that kills every worker it runs on (``allowed-failures`` deaths: here the first) is not
    recomputed again: the fit stops with the lost worker's address and what to do."""
    scheduler = cluster[0].scheduler
    X, y, w = platt_ctr
    dX, dy, dw = _dask(X, y, w)
    kills = [("logistic_vector", 3)]
    kills_done = _arm(plan, kills)
    allowed, scheduler.allowed_failures = scheduler.allowed_failures, 0
    try:
        with pytest.raises(WorkerLostError, match=r"worker tcp://\S+ died while running task") as caught:
            PlattCalibrator().fit(dX["score"], dy, sample_weight=dw)
    finally:
        scheduler.allowed_failures = allowed
    (lost,) = _killed(kills_done, kills)
    assert lost in str(caught.value)
    assert "out of memory" in str(caught.value)


def test_a_pass_longer_than_the_pass_timeout_fails(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    with (
        dask.config.set({PASS_TIMEOUT_KEY: 1e-3}),
        pytest.raises(PassTimeoutError, match=r"took longer than 0\.001 s .*'gpucal\.pass-timeout'"),
    ):
        PlattCalibrator().fit(dX["score"], dy, sample_weight=dw)


def test_the_last_worker_lost_fails_within_the_no_workers_timeout(plan, platt_ctr) -> None:  # type: ignore[no-untyped-def]
    """The one worker of a cluster, started without a nanny, killed during a Newton step: no worker is
    left to recompute the rows, and the fit fails once ``gpucal.no-workers-timeout`` has passed."""
    from gpucal.distributed.cluster import worker_env
    from tests._worker_faults import KillAtTask

    X, y, w = platt_ctr
    dX, dy, dw = _dask(X, y, w)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, **worker_env(1), "PYTHONPATH": str(root)}
    with distributed.LocalCluster(n_workers=0, dashboard_address=None) as cluster:
        command = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
        worker = subprocess.Popen([*command, "--no-nanny", "--nthreads", "1"], env=env, cwd=root)
        try:
            with distributed.Client(cluster) as client:
                client.wait_for_workers(1, timeout=120)
                client.register_plugin(KillAtTask(str(plan)))
                kills = [("logistic_vector", 1)]
                kills_done = _arm(plan, kills)
                with (
                    dask.config.set({NO_WORKERS_KEY: 2}),
                    pytest.raises(
                        WorkerLostError, match="no worker has been left on the cluster for 2 s"
                    ) as caught,
                ):
                    PlattCalibrator().fit(dX["score"], dy, sample_weight=dw)
                (lost,) = _killed(kills_done, kills)
                assert re.findall(r"tcp://[\d.:]+", str(caught.value)) == [lost]
        finally:
            worker.kill()
            worker.wait()

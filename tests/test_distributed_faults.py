"""Dask fits that lose a worker: the model of a fit without the fault, or a clear error, never a hang.

A real ``distributed.LocalCluster`` of two worker processes (one thread each, each under a nanny that
starts a new worker when its process dies). A worker kills its own process with SIGKILL when a chosen
task starts (``tests/_worker_faults.py``: the kill point is a task's function, so it falls in the same
pass of every run): during the read, while a per-worker store is built, during a tree level, in the
reduce-scatter of a level's histograms, in a Newton step. The fit must then give the single-machine
model at the tolerance of the dask equivalence tests (``test_distributed_mbct.py``,
``test_distributed_feature_platt.py``); when no worker can recompute the rows it must fail with
``WorkerLostError`` naming the lost worker. Every test runs under an alarm, so a hang fails the test.
"""

from __future__ import annotations

import json
import re
import signal
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
from gpucal.datasets import make_ctr
from gpucal.rows._faults import NO_WORKERS_KEY, PASS_TIMEOUT_KEY, PassTimeoutError, WorkerLostError
from gpucal.rows.streamed import STREAM_KEY

distributed = pytest.importorskip("distributed")

#: Seconds any one test may take before the alarm fails it (a fit here takes a few seconds).
ALARM_S = 90
N_ROWS = 24_000
N_PARTS = 4
FEATURES = ["score", "region", "user_segment", "device"]
MBCT_PARAMS = {"max_trees": 2, "max_depth": 3, "leaf_map": "platt"}
PLATT_PARAMS = {"categorical_cols": ["device"], "n_bins": 8}


@pytest.fixture(autouse=True)
def _alarm(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test, instead of hanging the run, when it takes longer than ``ALARM_S``."""

    def ring(signum: int, frame: Any) -> None:
        msg = f"{request.node.name} ran for more than {ALARM_S} s: a fit hung after losing a worker"
        raise TimeoutError(msg)

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


@pytest.fixture(scope="module")
def cluster(plan: Path) -> Iterator[tuple[Any, Any]]:
    """Two worker processes under nannies, every worker with the kill plugin reading ``plan``."""
    from tests._worker_faults import KillAtTask

    with _cluster(2) as cluster, distributed.Client(cluster) as client:
        client.register_plugin(KillAtTask(str(plan)))
        yield cluster, client


@pytest.fixture
def client(cluster: tuple[Any, Any]) -> Any:
    _, client = cluster
    client.wait_for_workers(2, timeout=60)
    return client


def _arm(plan: Path, names: list[str], skip: int, kills: int = 1) -> Callable[[], list[str]]:
    """Write the plan; return a function reading the log of the kills done (``address name`` lines)."""
    for suffix in (".count", ".log"):
        Path(f"{plan}{suffix}").unlink(missing_ok=True)
    plan.write_text(json.dumps({"names": names, "skip": skip, "kills": kills}))

    def kills_done() -> list[str]:
        plan.unlink(missing_ok=True)  # disarmed, whether it fired or not
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


def _killed(kills_done: Callable[[], list[str]], name: str, n: int = 1) -> list[str]:
    """The addresses of the workers the plan killed; the kills must have happened, at ``name``."""
    done = kills_done()
    assert len(done) == n, done
    assert all(line.endswith(f" {name}") for line in done), done
    return [line.split()[0] for line in done]


# ``read_block``: the read of the partitions; ``join_split``: a worker's store of its partitions;
# ``_routed``: a tree level's routing of the rows; ``_finish_share``: the reduce-scatter of a level's
# histograms; ``_map_sums``: a Newton step of the leaf refit.
MBCT_KILL_POINTS = [
    ("read_block", 1),
    ("join_split", 0),
    ("_routed", 3),
    ("_finish_share", 2),
    ("_map_sums", 3),
]


@pytest.mark.parametrize(("name", "skip"), MBCT_KILL_POINTS)
def test_mbct_fit_survives_a_lost_worker(client, plan, ctr, mbct_one, name: str, skip: int) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills_done = _arm(plan, [name], skip)
    two = MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
    lost = _killed(kills_done, name)
    assert lost[0] not in client.scheduler_info(n_workers=-1)["workers"]
    _assert_same_mbct(two, mbct_one, X)


def test_streamed_mbct_fit_survives_a_lost_worker(client, plan, ctr, mbct_one) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills_done = _arm(plan, ["_share_histogram"], 3)
    with dask.config.set({STREAM_KEY: True}):
        two = MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
    _killed(kills_done, "_share_histogram")
    _assert_same_mbct(two, mbct_one, X)


@pytest.mark.parametrize(("name", "skip"), [("read_block", 1), ("hessian_sums", 3)])
def test_feature_platt_fit_survives_a_lost_worker(client, plan, ctr, platt_one, name: str, skip: int) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills_done = _arm(plan, [name], skip)
    two = FeatureAwarePlattCalibrator(**PLATT_PARAMS).fit(dX, dy, sample_weight=dw)
    _killed(kills_done, name)
    # The checks of test_distributed_feature_platt: the same encoder and steps, coefficients to 1e-8.
    assert two.encoder_ == platt_one.encoder_
    assert two.n_iter_ == platt_one.n_iter_
    expected = np.r_[platt_one.coef_score_, platt_one.intercept_, platt_one.coef_]
    np.testing.assert_allclose(np.r_[two.coef_score_, two.intercept_, two.coef_], expected, rtol=1e-8)


def test_platt_fit_survives_a_lost_worker(client, plan, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    one = PlattCalibrator().fit(X["score"].to_numpy(), y.to_numpy(), sample_weight=w)
    kills_done = _arm(plan, ["logistic_vector"], 3)
    two = PlattCalibrator().fit(dX["score"], dy, sample_weight=dw)
    _killed(kills_done, "logistic_vector")
    np.testing.assert_allclose([two.a_, two.b_], [one.a_, one.b_], rtol=1e-9)


def test_a_task_that_kills_its_workers_fails_clearly(cluster, client, plan, ctr) -> None:  # type: ignore[no-untyped-def]
    """A task that kills every worker it runs on (``allowed-failures`` deaths: here the first) is not
    recomputed again: the fit stops with the lost worker's address and what to do."""
    scheduler = cluster[0].scheduler
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    kills_done = _arm(plan, ["_map_sums"], 3)
    allowed, scheduler.allowed_failures = scheduler.allowed_failures, 0
    try:
        with pytest.raises(WorkerLostError, match=r"worker tcp://\S+ died while running task") as caught:
            MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
    finally:
        scheduler.allowed_failures = allowed
    (lost,) = _killed(kills_done, "_map_sums")
    assert lost in str(caught.value)
    assert "out of memory" in str(caught.value)


def test_a_pass_longer_than_the_pass_timeout_fails(client, ctr) -> None:  # type: ignore[no-untyped-def]
    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    with (
        dask.config.set({PASS_TIMEOUT_KEY: 1e-3}),
        pytest.raises(PassTimeoutError, match=r"took longer than 0\.001 s .*'gpucal\.pass-timeout'"),
    ):
        MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)


def test_the_last_worker_lost_fails_within_the_no_workers_timeout(plan, ctr) -> None:  # type: ignore[no-untyped-def]
    """Nannies that start no new worker, and both workers killed during a tree level: no worker is left
    to recompute the rows, and the fit fails once ``gpucal.no-workers-timeout`` has passed."""
    from tests._worker_faults import KillAtTask

    X, y, w = ctr
    dX, dy, dw = _dask(X, y, w)
    with _cluster(2) as cluster, distributed.Client(cluster) as client:
        client.register_plugin(KillAtTask(str(plan)))
        for nanny in cluster.workers.values():
            nanny.close_gracefully()  # a worker that dies is not started again
        kills_done = _arm(plan, ["_routed"], 1, kills=2)
        with (
            dask.config.set({NO_WORKERS_KEY: 2}),
            pytest.raises(WorkerLostError, match="no worker has been left on the cluster for 2 s") as caught,
        ):
            MBCT(**MBCT_PARAMS).fit(dX, dy, sample_weight=dw)
        lost = _killed(kills_done, "_routed", n=2)
        shown = re.findall(r"tcp://[\d.:]+", str(caught.value))
        assert sorted(shown) == sorted(lost)

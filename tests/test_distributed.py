"""gpucal.distributed: every metric and 1-D calibrator on dask collections equals its one-machine value.

The reference is the same function on the concatenated pandas data (itself tested against sklearn,
netcal and hand-computed cases elsewhere); only the order of floating-point additions differs, so the
tolerance is 1e-9 relative. Partitions are pandas on a ``distributed.LocalCluster`` of threads; one
test runs process workers.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from gpucal import make_calibrator, metrics  # noqa: E402
from gpucal.distributed import (  # noqa: E402
    is_dask_collection,
    local_cluster,
    partition_offsets,
    reduce_partitions,
    sum_partitions,
)

RTOL = 1e-9
#: Covered by tests/test_metrics_calibration_tests.py (result objects, compared field by field).
CALIBRATION_TESTS = {
    "CalibrationInterceptResult",
    "CalibrationSlopeResult",
    "GradeTestResult",
    "HosmerLemeshowResult",
    "MurphyDecomposition",
    "SpiegelhalterResult",
    "binomial_grade_test",
    "calibration_intercept",
    "calibration_slope",
    "hosmer_lemeshow",
    "jeffreys_grade_test",
    "murphy_decomposition",
    "spiegelhalter_z",
}
# hash_codes(['gpucal'], 1_000_003): pandas.util.hash_array with gpucal's fixed key, recorded once.
GPUCAL_BUCKET = 803063
N_ROWS = 2000
PARTITION_COUNTS = [4, 16]


def make_frame(n: int = N_ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.round(rng.beta(0.7, 1.2, n), 3)  # ties: binning and AUC must keep them together
    z = rng.integers(0, 5, n)
    y = (rng.random(n) < np.clip(p * (0.7 + 0.15 * z), 0, 1)).astype(np.float64)
    w = rng.random(n) * 2.0
    w[rng.random(n) < 0.05] = 0.0  # zero-weight rows
    return pd.DataFrame(
        {"y": y, "p": p, "w": w, "z": z, "s": np.array(["a", "b", "c", "d", "e"], dtype=object)[z]}
    )


FRAME = make_frame()

# (name, call(frame, sample_weight)) for every public metric; the frame is pandas or dask.
MetricCall = Callable[[Any, Any], Any]
METRICS: list[tuple[str, MetricCall]] = [
    ("pce", lambda d, w: metrics.pce(d.y, d.p, sample_weight=w)),
    ("ece", lambda d, w: metrics.ece(d.y, d.p, sample_weight=w, n_bins=8, p=2)),
    (
        "ece_quantile",
        lambda d, w: metrics.ece(d.y, d.p, sample_weight=w, n_bins=8, strategy="quantile", weighting="equal"),
    ),
    ("mce", lambda d, w: metrics.mce(d.y, d.p, sample_weight=w, n_bins=8, strategy="quantile")),
    ("ada_ece", lambda d, w: metrics.ada_ece(d.y, d.p, sample_weight=w, n_bins=8)),
    ("ece_sweep", lambda d, w: metrics.ece_sweep(d.y, d.p, sample_weight=w, p=2)),
    ("prob_ece", lambda d, w: metrics.prob_ece(d.y, d.p, sample_weight=w)),
    ("cal_n", lambda d, w: metrics.cal_n(d.y, d.p, sample_weight=w, n_bins=4)),
    ("cal_n_uniform", lambda d, w: metrics.cal_n(d.y, d.p, sample_weight=w, strategy="uniform")),
    ("gc_n", lambda d, w: metrics.gc_n(d.y, d.p, d.z, sample_weight=w, n_bins=3)),
    ("gc_n_uniform", lambda d, w: metrics.gc_n(d.y, d.p, d.s, sample_weight=w, strategy="uniform")),
    ("field_ece", lambda d, w: metrics.field_ece(d.y, d.p, d.s, sample_weight=w)),
    ("field_rce", lambda d, w: metrics.field_rce(d.y, d.p, d.z, sample_weight=w)),
    ("cece", lambda d, w: metrics.cece(d.y, d.p, d.z, sample_weight=w, metric="ada_ece")),
    ("pcoc", lambda d, w: metrics.pcoc(d.y, d.p, sample_weight=w)),
    ("log_loss", lambda d, w: metrics.log_loss(d.y, d.p, sample_weight=w)),
    ("brier", lambda d, w: metrics.brier(d.y, d.p, sample_weight=w)),
    ("roc_auc", lambda d, w: metrics.roc_auc(d.y, d.p, sample_weight=w)),
    ("tce", lambda d, w: metrics.tce(d.p * 0.9, d.p, sample_weight=w)),
    ("tce_inf", lambda d, w: metrics.tce(d.p * 0.9, d.p, sample_weight=w, p=float("inf"))),
    # MVCE's views hash the global row index: the partitions must see their rows at their offsets.
    ("mvce", lambda d, w: metrics.mvce(d.y, d.p, sample_weight=w, n_views=7, bin_size=150, seed=11)),
]


@pytest.mark.parametrize("n_partitions", [4, 16])
def test_rejection_curve_equals_one_machine(client, n_partitions: int) -> None:
    frame = FRAME
    ddf = dd.from_pandas(frame, npartitions=n_partitions)
    thresholds = [0.5, 0.6, 0.8, 0.95]
    got = metrics.rejection_curve(ddf.y, ddf.p, thresholds=thresholds, sample_weight=ddf.w)
    expected = metrics.rejection_curve(frame.y, frame.p, thresholds=thresholds, sample_weight=frame.w)
    pd.testing.assert_frame_equal(got, expected, rtol=1e-9)


def test_every_public_metric_is_covered() -> None:
    """A new public metric needs a case here (or in tests/test_metrics_new_dask.py)."""
    suffixes = ("_quantile", "_uniform", "_inf")
    covered = {name for name, _ in METRICS} | {"segment_report", "rejection_curve"}
    covered |= {name.removesuffix(s) for name in covered for s in suffixes}
    covered |= {"ecce", "ecce_sigma", "ecce_pvalue", "smooth_ece", "ece_debiased", "ici", "e50", "e90"}
    covered |= {"emax", "multicalibration_error", "MulticalibrationResult"}  # test_metrics_new_dask.py
    covered |= {"skce", "skce_test", "SKCEResult", "SKCETestResult"}  # test_metrics_kernel_calibration.py
    # test_metrics_log_loss_decomposition.py
    covered |= {"murphy_decomposition_log_loss", "LogLossDecomposition"}
    # test_metrics_belt.py::test_dask_equals_one_machine (marked slow: it needs a dask cluster)
    covered |= {"calibration_belt", "CalibrationBeltResult"}
    covered |= {
        name for name in metrics.__all__ if name in CALIBRATION_TESTS
    }  # test_metrics_calibration_tests.py
    missing = sorted(set(metrics.__all__) - covered)
    assert not missing, f"metrics without a distributed test case: {missing}"


# Unit weights with 4 partitions, weights (some zero) with 16: each pass costs scheduler round trips,
# and the weighted path runs every check the unweighted one does.
LAYOUTS = [(4, False), (16, True)]


@pytest.mark.parametrize(("n_partitions", "weighted"), LAYOUTS, ids=["4-unweighted", "16-weighted"])
@pytest.mark.parametrize(("name", "call"), METRICS, ids=[m[0] for m in METRICS])
def test_metric_equals_one_machine(
    client, name: str, call: MetricCall, n_partitions: int, weighted: bool
) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=n_partitions).persist()
    expected = call(FRAME, FRAME.w if weighted else None)
    got = call(ddf, ddf.w if weighted else None)
    assert isinstance(got, float)
    assert_allclose(got, expected, rtol=RTOL, atol=0)


@pytest.mark.parametrize("n_partitions", PARTITION_COUNTS)
def test_segment_report_equals_one_machine(client, n_partitions: int) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=n_partitions)
    expected = metrics.segment_report(FRAME.y, FRAME.p, FRAME[["z", "s"]], sample_weight=FRAME.w, min_rows=2)
    got = metrics.segment_report(ddf.y, ddf.p, ddf[["z", "s"]], sample_weight=ddf.w, min_rows=2)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=RTOL)


def test_mvce_uneven_partitions_and_arrays(client) -> None:
    """Partitions of unequal length (offsets are counted, not assumed) and dask arrays as inputs."""
    y, p = FRAME.y.to_numpy(), FRAME.p.to_numpy()
    chunks = ((1, 700, 0, 299, 1000),)
    y_d, p_d = da.from_array(y, chunks=chunks), da.from_array(p, chunks=(500,))  # rechunked to y's
    expected = metrics.mvce(y, p, n_views=9, bin_size=60, seed=5)
    assert_allclose(metrics.mvce(y_d, p_d, n_views=9, bin_size=60, seed=5), expected, rtol=RTOL)
    assert_allclose(metrics.roc_auc(y_d, p_d), metrics.roc_auc(y, p), rtol=RTOL)


def test_repeated_runs_are_identical(client) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=4).persist()
    first = metrics.ece(ddf.y, ddf.p, sample_weight=ddf.w, strategy="quantile")
    assert metrics.ece(ddf.y, ddf.p, sample_weight=ddf.w, strategy="quantile") == first


def test_mixed_inputs_and_whole_data_checks(client) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=4)
    with pytest.raises(TypeError, match=r"y_prob is a dask collection but y_true is not"):
        metrics.ece(FRAME.y.to_numpy(), ddf.p)
    with pytest.raises(ValueError, match="different numbers of partitions"):
        metrics.pce(ddf.y, dd.from_pandas(FRAME, npartitions=3).p)
    zero = dd.from_pandas(FRAME.assign(w=0.0), npartitions=4)
    with pytest.raises(ValueError, match="all weights are zero"):
        metrics.brier(zero.y, zero.p, sample_weight=zero.w)
    one_class = dd.from_pandas(FRAME.assign(y=1.0), npartitions=4)
    with pytest.raises(ValueError, match="only one class"):
        metrics.roc_auc(one_class.y, one_class.p)
    bad = dd.from_pandas(FRAME.assign(p=FRAME.p + 1.0), npartitions=4)
    with pytest.raises(ValueError, match=r"y_prob: .* outside \[0, 1\]"):
        metrics.pce(bad.y, bad.p)
    with pytest.raises(ValueError, match="The 'n_bins' parameter of ece"):
        metrics.ece(ddf.y, ddf.p, n_bins=0)


def test_distinct_score_table_refuses_to_grow_past_its_limit(client) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=4)
    n_distinct = FRAME.p.nunique()
    with dask.config.set({"gpucal.max-distinct-keys": n_distinct - 1}):
        with pytest.raises(ValueError, match="distinct keys exceed the limit"):
            metrics.roc_auc(ddf.y, ddf.p)
        with pytest.raises(ValueError, match="distinct keys exceed the limit"):
            make_calibrator("isotonic").fit(ddf[["p"]].rename(columns={"p": "score"}), ddf.y)
    with dask.config.set({"gpucal.max-distinct-keys": n_distinct}):
        assert_allclose(metrics.roc_auc(ddf.y, ddf.p), metrics.roc_auc(FRAME.y, FRAME.p), rtol=RTOL)


def test_single_machine_calls_do_not_import_dask(monkeypatch) -> None:
    """Until dask is imported, the dask check is one dictionary look-up and never imports it."""
    import builtins

    from gpucal.rows import collections

    real_import = builtins.__import__

    def no_dask_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("dask", "distributed"):
            msg = f"imported {name}"
            raise AssertionError(msg)
        return real_import(name, *args, **kwargs)

    # A process that never imported dask: sys.modules without it, and any import of it fails the test.
    monkeypatch.setattr(collections, "sys", type("Sys", (), {"modules": {}})())
    monkeypatch.setattr(builtins, "__import__", no_dask_import)
    assert not is_dask_collection(FRAME)
    metrics.ece(np.array([0.0, 1.0]), np.array([0.2, 0.7]))
    make_calibrator("platt").fit(np.array([0.2, 0.7, 0.4]), np.array([0, 1, 1])).predict(np.array([0.3]))


# --------------------------------------------------------------------------------------------------
# sum_partitions: the primitive a tree fit calls per level


def _histogram_with_offsets(part: pd.DataFrame, n_bins: int, *, row_offset: int, n_total: int) -> np.ndarray:
    global_rows = row_offset + np.arange(len(part))
    counts = np.bincount(global_rows * n_bins // n_total, minlength=n_bins).astype(np.float64)
    sums = np.bincount(global_rows * n_bins // n_total, weights=part["p"].to_numpy(), minlength=n_bins)
    return np.stack([counts, sums], axis=1)


def _first_and_last(*values: np.ndarray) -> np.ndarray:
    return np.array([values[0][0], values[-1][1]])


def _row_range(part: pd.DataFrame, *, row_offset: int, n_total: int) -> np.ndarray:
    return np.array([row_offset, row_offset + len(part)])


@pytest.mark.parametrize("n_partitions", PARTITION_COUNTS)
def test_sum_partitions_with_global_offsets(client, n_partitions: int) -> None:
    ddf = dd.from_pandas(FRAME, npartitions=n_partitions)
    got = sum_partitions(ddf, _histogram_with_offsets, args=(7,), with_offsets=True, split_every=3)
    expected = _histogram_with_offsets(FRAME, 7, row_offset=0, n_total=len(FRAME))
    assert_allclose(got, expected, rtol=1e-12)
    # Results are combined in partition order: the first partition starts at 0, the last ends at n.
    ends = reduce_partitions(ddf, _row_range, _first_and_last, with_offsets=True)
    assert ends.tolist() == [0, len(FRAME)]
    offsets, n_total = partition_offsets(ddf)
    assert n_total == len(FRAME)
    assert offsets[0] == 0
    assert np.all(np.diff(offsets) > 0)


# --------------------------------------------------------------------------------------------------
# Calibrators

CALIBRATORS: list[tuple[str, dict[str, Any]]] = [
    ("histogram", {}),
    ("histogram", {"strategy": "quantile", "n_bins": 7}),
    ("histogram", {"score_kind": "logit", "n_bins": 6}),
    ("isotonic", {}),
    ("isotonic", {"rank_preserving": True, "clip_eps": 1e-3}),
    ("platt", {}),
    ("beta", {"parameters": "ab"}),
    ("temperature", {}),
]


def calibration_frame(score_kind: str = "probability") -> pd.DataFrame:
    frame = FRAME.rename(columns={"p": "score"})[["score", "y", "w"]]
    if score_kind == "logit":
        frame = frame.assign(
            score=np.log(frame.score.clip(1e-3, 1 - 1e-3) / (1 - frame.score.clip(1e-3, 1 - 1e-3)))
        )
    return frame


@pytest.mark.parametrize(("n_partitions", "weighted"), LAYOUTS, ids=["4-unweighted", "16-weighted"])
@pytest.mark.parametrize(("name", "params"), CALIBRATORS, ids=[f"{n}-{p}" for n, p in CALIBRATORS])
def test_calibrator_fit_and_predict_equal_one_machine(
    client, name: str, params: dict, n_partitions: int, weighted: bool
) -> None:
    frame = calibration_frame(params.get("score_kind", "probability"))
    ddf = dd.from_pandas(frame, npartitions=n_partitions).persist()
    local = make_calibrator(name, **params).fit(frame[["score"]], frame.y, frame.w if weighted else None)
    dist = make_calibrator(name, **params).fit(ddf[["score"]], ddf.y, ddf.w if weighted else None)
    for attribute in local._state_spec:
        # Newton stops on the same rule from sums added in another order: parameters agree to ~1e-10.
        assert_allclose(getattr(dist, attribute), getattr(local, attribute), rtol=1e-8, err_msg=attribute)
    predicted = dist.predict(ddf[["score"]])
    assert is_dask_collection(predicted)
    got = predicted.compute()
    expected = local.predict(frame[["score"]])
    pd.testing.assert_index_equal(got.index, expected.index)
    assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-8, atol=1e-12)


def test_isotonic_thresholds_are_exact_with_unit_weights(client) -> None:
    """Counts are integers: the distinct-score path must give sklearn's thresholds bit for bit."""
    frame = calibration_frame()
    ddf = dd.from_pandas(frame, npartitions=16)
    local = make_calibrator("isotonic").fit(frame.score.to_numpy(), frame.y.to_numpy())
    dist = make_calibrator("isotonic").fit(ddf.score, ddf.y)
    np.testing.assert_array_equal(dist.X_thresholds_, local.X_thresholds_)
    np.testing.assert_array_equal(dist.y_thresholds_, local.y_thresholds_)


def test_dask_array_in_dask_array_out(client) -> None:
    frame = calibration_frame()
    scores, labels = (
        da.from_array(frame.score.to_numpy(), chunks=300),
        da.from_array(frame.y.to_numpy(), chunks=300),
    )
    cal = make_calibrator("histogram", n_bins=5).fit(scores, labels)
    out = cal.predict(scores)
    assert isinstance(out, da.Array)
    local = make_calibrator("histogram", n_bins=5).fit(frame.score.to_numpy(), frame.y.to_numpy())
    assert_allclose(out.compute(), local.predict(frame.score.to_numpy()), rtol=1e-12)


@pytest.mark.parametrize("name", ["sir", "scaling_binning"])
def test_calibrators_without_a_distributed_fit_say_so(client, name: str) -> None:
    frame = calibration_frame()
    ddf = dd.from_pandas(frame, npartitions=4)
    with pytest.raises(NotImplementedError, match=r"has no distributed fit.*HistogramCalibrator"):
        make_calibrator(name).fit(ddf[["score"]], ddf.y)
    # Any fitted 1-D calibrator predicts on partitions.
    local = make_calibrator(name).fit(frame[["score"]], frame.y)
    assert_allclose(local.predict(ddf[["score"]]).compute(), local.predict(frame[["score"]]), rtol=1e-12)


def test_reject_dask_names_the_estimator(client) -> None:
    """The one line estimators without a distributed fit start ``fit`` with (HC, Dirichlet, ...)."""
    from gpucal import MBCT
    from gpucal.distributed import reject_dask

    ddf = dd.from_pandas(calibration_frame(), npartitions=2)
    reject_dask(object(), FRAME, None)  # nothing dask: nothing happens
    with pytest.raises(NotImplementedError, match=r"^MBCT has no distributed fit"):
        reject_dask(MBCT(), ddf, ddf.y)


@pytest.mark.parametrize("name", ["dirichlet", "neucalib", "piecewise_logit"])
def test_feature_aware_fits_refuse_dask_by_name(client, name: str) -> None:
    frame = calibration_frame().assign(field=lambda f: (f.score * 4).astype(int) % 3)
    ddf = dd.from_pandas(frame, npartitions=2)
    model = make_calibrator(name)
    with pytest.raises(NotImplementedError, match=rf"^{type(model).__name__} has no distributed fit"):
        model.fit(ddf[["score", "field"]], ddf.y)


def test_downsampling_fit_needs_no_data_on_dask(client) -> None:
    frame = calibration_frame()
    ddf = dd.from_pandas(frame, npartitions=4)
    model = make_calibrator("downsampling", rate=0.25).fit(ddf[["score"]], ddf.y)
    local = make_calibrator("downsampling", rate=0.25).fit(frame[["score"]], frame.y)
    assert_allclose(model.predict(ddf[["score"]]).compute(), local.predict(frame[["score"]]), rtol=1e-15)


def test_distributed_fit_checks_the_whole_data(client) -> None:
    frame = calibration_frame()
    one_class = dd.from_pandas(frame.assign(y=0.0), npartitions=4)
    with pytest.raises(ValueError, match="no positive labels"):
        make_calibrator("platt").fit(one_class[["score"]], one_class.y)
    constant = dd.from_pandas(frame.assign(score=0.5), npartitions=4)
    with pytest.raises(ValueError, match=r"every score is 0\.5"):
        make_calibrator("platt").fit(constant[["score"]], constant.y)
    cal = make_calibrator("platt", output_type="numpy").fit(frame[["score"]], frame.y)
    with pytest.raises(ValueError, match="output_type='numpy'"):
        cal.predict(dd.from_pandas(frame[["score"]], npartitions=2))


def test_process_workers() -> None:
    """Worker processes: every function shipped must pickle, and the result must not change.

    One worker process: starting it (and importing gpucal in it) is most of the time.
    """
    frame = calibration_frame()
    ddf = dd.from_pandas(frame, npartitions=4)
    with local_cluster(1, processes=True) as cluster, distributed.Client(cluster):
        got = metrics.mvce(ddf.y, ddf.score, n_views=5, bin_size=100, seed=1)
        cal = make_calibrator("isotonic").fit(ddf[["score"]], ddf.y)
        predicted = cal.predict(ddf[["score"]]).compute()
    assert_allclose(got, metrics.mvce(frame.y, frame.score, n_views=5, bin_size=100, seed=1), rtol=RTOL)
    local = make_calibrator("isotonic").fit(frame[["score"]], frame.y)
    assert_allclose(predicted.to_numpy(), local.predict(frame[["score"]]).to_numpy(), rtol=1e-12)


# --------------------------------------------------------------------------------------------------
# Feature encoding consistent across partitions


def encoding_frame(n: int = N_ROWS, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = np.round(rng.normal(40.0, 10.0, n), 1)
    age[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame(
        {
            "age": age,
            "country": rng.choice(np.array(["FR", "DE", None, "US"], dtype=object), n),
            "item": rng.integers(0, 40, n),
            "flag": rng.random(n) < 0.3,
        }
    )


@pytest.mark.parametrize(("n_partitions", "weighted"), LAYOUTS, ids=["4-unweighted", "16-weighted"])
def test_fit_encoder_equals_one_machine_fit(client, n_partitions: int, weighted: bool) -> None:
    from gpucal import FeatureEncoder
    from gpucal.distributed import fit_encoder, transform_partitions

    frame = encoding_frame()
    # Categories seen by one partition only must still get their code everywhere.
    frame.loc[len(frame) - 1, "country"] = "only-in-the-last-partition"
    weights = pd.Series(FRAME.w.to_numpy(), name="w")
    ddf = dd.from_pandas(frame, npartitions=n_partitions)
    dw = dd.from_pandas(weights, npartitions=n_partitions) if weighted else None
    params = {"n_bins": 8, "categorical_cols": ["item"]}
    expected = FeatureEncoder(**params).fit(frame, sample_weight=weights if weighted else None)
    got = fit_encoder(FeatureEncoder(**params), ddf, sample_weight=dw)
    assert got.to_dict() == expected.to_dict()
    codes = transform_partitions(got, ddf)
    assert isinstance(codes, da.Array)
    np.testing.assert_array_equal(codes.compute(), expected.transform(frame))


def test_hash_codes_are_stable_and_partition_free() -> None:
    from gpucal.distributed import hash_codes

    values = pd.Series(["a", "b", None, "a", "zz"] * 20, name="user")
    codes = hash_codes(values, 7)
    assert codes.index.equals(values.index)
    assert ((codes >= 0) & (codes < 7)).all()
    # A value's code does not depend on which rows come with it, nor on the container.
    np.testing.assert_array_equal(hash_codes(values[40:], 7), codes[40:])
    np.testing.assert_array_equal(hash_codes(values.to_numpy(), 7), codes.to_numpy())
    assert hash_codes(np.array(["a"]), 7, seed=1)[0] == hash_codes(np.array(["a", "b"]), 7, seed=1)[0]
    # Fixed value: the hash must not change between releases or processes (Python's hash() would).
    assert hash_codes(np.array(["gpucal"]), 1_000_003).tolist() == [GPUCAL_BUCKET]
    with pytest.raises(ValueError, match="n_buckets"):
        hash_codes(values, 0)
    # A list is hashed like an array (its .index is a method, not an index); values by their text.
    text = hash_codes(["7", 7, None, "None", 7.0], 1_000_003)
    assert isinstance(text, np.ndarray)
    assert text[0] == text[1]
    assert text[2] == text[3]
    assert text[4] != text[1]
    # A nullable integer is itself in a block with a missing value as in one without.
    with_missing = hash_codes(pd.Series([7, None], dtype="Int64"), 1_000_003)
    without = hash_codes(pd.Series([7, 8], dtype="Int64"), 1_000_003)
    assert with_missing[0] == without[0] == text[1]
    assert with_missing[1] == text[2]


# --------------------------------------------------------------------------------------------------
# Cluster and backend helpers: the CPU side (the GPU side is in test_distributed_gpu.py)


def test_dataframe_backend_and_missing_gpu_libraries() -> None:
    from gpucal.distributed import dataframe_backend

    with dataframe_backend("pandas"):
        assert dask.config.get("dataframe.backend") == "pandas"
        assert isinstance(dd.from_dict({"a": [1, 2]}, npartitions=1).compute(), pd.DataFrame)
    with pytest.raises(ValueError, match="The 'backend' parameter"):
        with dataframe_backend("polars"):
            pass
    if importlib.util.find_spec("dask_cudf") is None:
        with pytest.raises(ImportError, match="dask-cudf"):
            with dataframe_backend("cudf"):
                pass
    if importlib.util.find_spec("dask_cuda") is None:
        from gpucal.distributed import local_cuda_cluster

        with pytest.raises(ImportError, match="dask-cuda"):
            local_cuda_cluster()


def test_local_cluster_defaults() -> None:
    from gpucal.distributed.cluster import worker_env

    assert worker_env(2) == {"NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    with local_cluster(1, processes=False) as cluster:
        assert len(cluster.workers) == 1
        assert cluster.scheduler.http_server is not None  # on a free port, not 8787


def test_batch_job_fits_writes_and_reports(client, tmp_path, monkeypatch) -> None:
    """``python -m gpucal.distributed.batch``: a Parquet dataset in, a model, metrics and predictions out."""
    import json

    from gpucal import load
    from gpucal.distributed import batch

    frame = calibration_frame().rename(columns={"y": "clicked"})
    data = tmp_path / "scores"
    data.mkdir()
    for i, start in enumerate(range(0, len(frame), 700)):
        frame.iloc[start : start + 700].to_parquet(data / f"part{i}.parquet")
    # The threads cluster of this module instead of a process cluster (seconds to start).
    monkeypatch.setattr(
        batch, "start_cluster", lambda device, n: (local_cluster(1, processes=False), "pandas")
    )
    model, out = tmp_path / "model.json", tmp_path / "calibrated"
    argv = [str(data), "--method", "histogram", "--param", "n_bins=7", "--label-col", "clicked"]
    argv += ["--model", str(model), "--predictions", str(out)]
    assert batch.main(argv) == 0
    local = make_calibrator("histogram", n_bins=7).fit(frame[["score"]], frame.clicked)
    assert_allclose(load(model).bin_values_, local.bin_values_, rtol=1e-12)
    written = pd.read_parquet(out).sort_index()
    assert_allclose(written["calibrated"], local.predict(frame[["score"]]), rtol=1e-12)
    summary = batch.summary_metrics(frame.clicked, written["calibrated"])
    assert summary["ece_15_uniform"] < metrics.ece(frame.clicked, frame.score)
    assert json.loads(json.dumps(summary)) == summary
    # A second run of fewer partitions into the same directory leaves none of the first's rows behind.
    for extra in data.glob("part[1-9]*.parquet"):
        extra.unlink()
    (out / "_metadata").write_bytes(b"an earlier dask write's")
    assert batch.main(argv) == 0
    assert len(pd.read_parquet(out)) == 700
    assert sorted(path.name for path in out.iterdir()) == ["part.00000.parquet"]
    assert not [path for path in tmp_path.iterdir() if "gpucal-parts" in path.name]  # staging removed


def test_batch_job_refuses_mistakes_before_any_work(client, tmp_path, monkeypatch, capsys) -> None:
    """Its own input as output, a taken column name, an unknown method, no worker: one error line each,
    and the input untouched."""
    from gpucal.distributed import batch

    frame = calibration_frame()
    data = tmp_path / "scores"
    data.mkdir()
    frame.to_parquet(data / "part.0.parquet")
    before = (data / "part.0.parquet").read_bytes()
    monkeypatch.setattr(
        batch, "start_cluster", lambda device, n: (local_cluster(1, processes=False), "pandas")
    )
    base = [str(data), "--label-col", "y", "--model", str(tmp_path / "m.json")]
    for extra, message in [
        (["--method", "platt", "--predictions", str(data)], "it is, holds or lies in the input"),
        (["--method", "platt", "--predictions", str(data / "out")], "it is, holds or lies in the input"),
        (["--method", "platt", "--predictions", str(tmp_path / "o"), "--output-col", "score"], "already has"),
        (["--method", "no-such-method"], "no-such-method"),
        (["--method", "platt", "--param", "no_such_param=1"], "no_such_param"),
        (["--method", "histogram", "--param", "n_bins=-3"], "'n_bins' parameter"),
        (["--method", "platt", "--model", str(data / "part.0.parquet")], "give a .json file"),
        (["--method", "platt", "--model", str(data / "m.json")], "lies in, the input or the predictions"),
    ]:
        assert batch.main([*base, *extra]) == 2
        error = capsys.readouterr().err
        assert error.startswith("python -m gpucal.distributed.batch: error: ")
        assert message in error
    with pytest.raises(SystemExit):
        batch.main([*base, "--method", "platt", "--workers", "0"])
    assert "at least 1" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "dask.dataframe", None)  # the dask extra not installed
    assert batch.main([*base, "--method", "platt"]) == 2
    assert "pip install 'gpucal[dask]'" in capsys.readouterr().err
    assert (data / "part.0.parquet").read_bytes() == before
    assert sorted(path.name for path in data.iterdir()) == ["part.0.parquet"]


def test_written_partitions_read_back_in_order(client, tmp_path) -> None:
    from gpucal.distributed.batch import write_partitions

    frame = pd.DataFrame({"row": np.arange(1_200)})
    assert write_partitions(dd.from_pandas(frame, npartitions=12, sort=False), str(tmp_path)) == 1_200
    np.testing.assert_array_equal(pd.read_parquet(tmp_path)["row"], frame["row"])

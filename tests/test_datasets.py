"""Tests of the synthetic CTR generator ``gpucal.datasets.make_ctr`` and ``write_ctr_parquet``."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit

from gpucal.datasets import CTR_SCENARIOS, ctr_scenario, make_ctr, synthetic, write_ctr_parquet
from gpucal.datasets._ctr_rows import N_FIELD_STREAMS, ctr_draws

FIELDS = ["site_id", "ad_category", "region", "hour", "user_segment", "device"]
N = 200_000


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    """Every scenario on the same seed: 200k rows each."""
    return {name: make_ctr(N, name, seed=7) for name in CTR_SCENARIOS}


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC by the Mann-Whitney rank sum (the scores here are continuous: no ties)."""
    ranks = np.empty(len(score))
    ranks[np.argsort(score)] = np.arange(1, len(score) + 1)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _segment_gaps(df: pd.DataFrame, field: str) -> pd.Series:
    """Mean(score) - mean(p_true) per value of ``field``."""
    means = df.groupby(field)[["score", "p_true"]].mean()
    return means["score"] - means["p_true"]


def test_columns_dtypes_and_attrs() -> None:
    df = make_ctr(1000, "segment_bias", seed=3, base_rate=0.05)
    assert list(df.columns) == ["score", "label", "p_true", *FIELDS]
    expected = {"score": np.float64, "label": np.int8, "p_true": np.float64, "site_id": np.int32}
    expected |= {"ad_category": np.int16, "region": np.int8, "hour": np.int8, "user_segment": np.int8}
    expected |= {"device": np.int8}
    assert {c: df[c].dtype for c in df.columns} == {c: np.dtype(t) for c, t in expected.items()}
    cards = ctr_scenario()["fields"]
    assert list(cards) == FIELDS
    for name, n_values in cards.items():
        assert df[name].min() >= 0
        assert df[name].max() < n_values
    assert set(np.unique(df["label"])) <= {0, 1}
    assert df.attrs["scenario"] == "segment_bias"
    assert df.attrs["bias_field"] == "region"
    assert (df.attrs["seed"], df.attrs["base_rate"], df.attrs["row_offset"]) == (3, 0.05, 0)
    assert ctr_scenario("heterogeneous")["underused_field"] == "user_segment"


def test_layout_constant_matches_fields() -> None:
    # The kernel's draw layout reserves one stream per field.
    assert len(ctr_scenario()["fields"]) == N_FIELD_STREAMS


def test_zero_rows_and_float32() -> None:
    empty = make_ctr(0)
    assert empty.shape == (0, 9)
    assert empty["site_id"].dtype == np.int32
    df64 = make_ctr(5000, seed=2)
    df32 = make_ctr(5000, seed=2, dtype="float32")
    assert df32["score"].dtype == np.float32
    assert df32["p_true"].dtype == np.float32
    assert_array_equal(df32["score"], df64["score"].astype(np.float32))
    assert_array_equal(df32["p_true"], df64["p_true"].astype(np.float32))
    assert df32[["label", *FIELDS]].equals(df64[["label", *FIELDS]])


def test_deterministic_given_seed() -> None:
    a, b = make_ctr(20_000, seed=11), make_ctr(20_000, seed=11)
    assert a.equals(b)
    c = make_ctr(20_000, seed=12)
    assert not np.array_equal(a["site_id"], c["site_id"])
    assert not np.array_equal(a["p_true"], c["p_true"])


def test_independent_of_chunk_length(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = make_ctr(10_000, "mixed", seed=5, dtype="float32")
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 999)
    assert make_ctr(10_000, "mixed", seed=5, dtype="float32").equals(reference)


@functools.cache
def _reference_rows() -> pd.DataFrame:
    return make_ctr(5000, "heterogeneous", seed=9)


@settings(max_examples=25, deadline=None)
@given(offset=st.integers(0, 4000), n_rows=st.integers(0, 1000))
def test_any_row_range_equals_the_slice(offset: int, n_rows: int) -> None:
    reference = _reference_rows()
    part = make_ctr(n_rows, "heterogeneous", seed=9, row_offset=offset)
    expected = reference.iloc[offset : offset + n_rows].reset_index(drop=True)
    assert part.equals(expected)


def test_rows_across_the_default_chunk_boundary() -> None:
    start = synthetic.CHUNK_ROWS - 300
    part = make_ctr(600, seed=4, row_offset=start)
    head = make_ctr(300, seed=4, row_offset=start)
    tail = make_ctr(300, seed=4, row_offset=synthetic.CHUNK_ROWS)
    assert part.equals(pd.concat([head, tail], ignore_index=True))


def test_kernel_matches_numpy_reference() -> None:
    """The numba kernel's rows equal the numpy reference (draws) and the written formula (probabilities)."""
    row_offset, n = 123_456, 20_000
    df = make_ctr(n, "mixed", seed=21, row_offset=row_offset)
    model = synthetic._build_model("mixed", 21, 0.03)
    codes, ctx, u_label = ctr_draws(
        int(model.key), row_offset, n, model.accept, model.alias, model.offsets, model.sizes
    )
    for j, name in enumerate(FIELDS):
        assert_array_equal(df[name], codes[j])
    intercept, ctx_scale, k, shift, bend, knot = model.scalars
    flat = codes + model.offsets[:-1, None]
    i_a, i_b = model.inter_fields
    cell = codes[i_a] * int(model.sizes[i_b]) + codes[i_b]
    z_true = intercept + ctx_scale * ctx + model.true_table[flat].sum(axis=0) + model.inter_true[cell]
    g = k * (intercept + ctx_scale * ctx) + model.model_table[flat].sum(axis=0) + model.inter_model[cell]
    g = g + bend * np.maximum(g - knot, 0.0) + shift
    assert_allclose(df["p_true"], expit(z_true), rtol=1e-12)
    assert_allclose(df["score"], expit(g), rtol=1e-12)
    # Labels are u < p; only a u within rounding of p could differ.
    near = np.abs(u_label - expit(z_true)) < 1e-12
    assert_array_equal(df["label"][~near], (u_label < expit(z_true))[~near])


def test_field_frequencies_follow_their_laws(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["calibrated"]
    for field in synthetic._FIELDS:
        if field.n_values > 300:
            continue
        expected = synthetic._frequencies(field)
        if field.hashed_ids:
            expected = np.sort(expected)[::-1]
            observed = np.sort(np.bincount(df[field.name], minlength=field.n_values) / N)[::-1]
        else:
            observed = np.bincount(df[field.name], minlength=field.n_values) / N
        # 5 standard errors of a binomial proportion, plus slack for sorting noise among near-ties.
        tolerance = 5 * np.sqrt(expected * (1 - expected) / N) + 2e-4
        assert np.all(np.abs(observed - expected) <= tolerance), field.name
    # site_id: heavy head (rank-1 share about 10%) and a long tail (most of the 40,000 values seen).
    counts = np.bincount(df["site_id"], minlength=40_000)
    assert 0.05 < counts.max() / N < 0.2
    assert np.count_nonzero(counts) > 10_000


def test_base_rate_and_labels_are_bernoulli(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["calibrated"]
    pilot = make_ctr(synthetic.PILOT_ROWS, "calibrated", seed=7)
    assert_allclose(pilot["p_true"].mean(), 0.03, rtol=1e-9)
    p, y = df["p_true"].to_numpy(), df["label"].to_numpy()
    # Label mean vs the sum of p_true: within 4 standard deviations of a Poisson-binomial.
    assert abs(y.sum() - p.sum()) < 4 * np.sqrt(np.sum(p * (1 - p)))
    # Also inside deciles of p_true.
    edges = np.quantile(p, np.linspace(0, 1, 11))
    bins = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, 9)
    for b in range(10):
        pb, yb = p[bins == b], y[bins == b]
        assert abs(yb.sum() - pb.sum()) < 4.5 * np.sqrt(np.sum(pb * (1 - pb))) + 1
    high = make_ctr(50_000, "calibrated", seed=7, base_rate=0.4)
    assert_allclose(high["p_true"].mean(), 0.4, atol=0.01)


def test_scenario_changes_only_the_score(frames: dict[str, pd.DataFrame]) -> None:
    base = frames["calibrated"][["label", "p_true", *FIELDS]]
    for name, df in frames.items():
        assert df[["label", "p_true", *FIELDS]].equals(base), name
    assert_allclose(frames["calibrated"]["score"], frames["calibrated"]["p_true"], rtol=1e-12)


def test_overconfident_is_a_global_temperature(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["overconfident"]
    z_score, z_true = logit(df["score"].to_numpy()), logit(df["p_true"].to_numpy())
    slope, intercept = np.polyfit(z_true, z_score, 1)
    assert_allclose(slope, 1.6, rtol=1e-9)
    assert_allclose(z_score, slope * z_true + intercept, atol=1e-8)
    # More extreme than the truth away from the pivot, and calibrated in the large.
    pivot = -intercept / (slope - 1)
    far = np.abs(z_true - pivot) > 0.1
    assert np.all(np.abs(z_score - pivot)[far] > np.abs(z_true - pivot)[far])
    assert abs(df["score"].mean() / df["p_true"].mean() - 1) < 0.02


def test_monotone_keeps_the_ranking_but_bends(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["monotone"]
    order = np.argsort(df["p_true"].to_numpy(), kind="stable")
    assert np.all(np.diff(df["score"].to_numpy()[order]) >= 0)
    z_score, z_true = logit(df["score"].to_numpy()), logit(df["p_true"].to_numpy())
    knot = np.quantile(z_true, 0.8)
    low_slope = np.polyfit(z_true[z_true < knot - 0.5], z_score[z_true < knot - 0.5], 1)[0]
    high_slope = np.polyfit(z_true[z_true > knot + 0.5], z_score[z_true > knot + 0.5], 1)[0]
    assert_allclose([low_slope, high_slope], [1.0, 2.0], rtol=1e-9)
    assert abs(df["score"].mean() / df["p_true"].mean() - 1) < 0.02


def test_segment_bias_changes_sign_across_values(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["segment_bias"]
    gaps = _segment_gaps(df, "region")
    assert gaps.min() < -0.005
    assert gaps.max() > 0.005
    assert abs(df["score"].mean() / df["p_true"].mean() - 1) < 0.02
    # Other fields carry no bias beyond what they inherit from region.
    assert _segment_gaps(df, "device").abs().max() < 0.002


def test_heterogeneous_underuses_user_segment(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["heterogeneous"]
    gaps = _segment_gaps(df, "user_segment")
    assert gaps.min() < -0.005
    assert gaps.max() > 0.005
    assert _segment_gaps(df, "region").abs().max() < 0.002
    y = df["label"].to_numpy()
    auc_score, auc_true = _auc(y, df["score"].to_numpy()), _auc(y, df["p_true"].to_numpy())
    assert auc_score < auc_true - 0.005


def test_mixed_has_every_family(frames: dict[str, pd.DataFrame]) -> None:
    df = frames["mixed"]
    for field in ("region", "user_segment"):
        gaps = _segment_gaps(df, field)
        assert gaps.min() < -0.003, field
        assert gaps.max() > 0.003, field
    cells = df.groupby(["device", "hour"])[["score", "p_true"]].mean()
    assert (cells["score"] - cells["p_true"]).abs().max() > 0.005
    spread_ratio = logit(df["score"]).std() / logit(df["p_true"]).std()
    assert spread_ratio > 1.1
    assert abs(df["score"].mean() / df["p_true"].mean() - 1) < 0.02


def test_output_columns_are_not_copied() -> None:
    import tracemalloc

    n = 400_000
    make_ctr(n, seed=1)  # build and cache the model and load the kernel this size runs first
    tracemalloc.start()
    try:
        df = make_ctr(n, seed=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    output = int(df.memory_usage(index=False).sum())
    buffers = synthetic.CHUNK_ROWS * len(FIELDS) * 4
    assert peak < output + buffers + (4 << 20)


def test_write_ctr_parquet(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 1000)
    path = write_ctr_parquet(tmp_path / "ctr.parquet", 2500, "segment_bias", seed=3, dtype="float32")
    meta = pq.ParquetFile(path)
    assert meta.metadata.num_row_groups == 3
    expected = make_ctr(2500, "segment_bias", seed=3, dtype="float32")
    assert pd.read_parquet(path).equals(expected)
    stored = json.loads(meta.schema_arrow.metadata[b"gpucal.ctr"])
    assert stored == json.loads(json.dumps(expected.attrs))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"n_rows": -1},
            r"The 'n_rows' parameter of make_ctr must be an int in \[0, inf\)\. Got -1 instead\.",
        ),
        ({"n_rows": 1.5}, r"'n_rows' parameter of make_ctr must be an int .* Got 1\.5 instead"),
        ({"n_rows": True}, r"'n_rows' parameter of make_ctr must be an int .* Got True instead"),
        ({"scenario": "nope"}, r"'scenario' parameter of make_ctr must be one of \('mixed', .*Got 'nope'"),
        ({"seed": -3}, r"'seed' parameter of make_ctr must be an int in \[0, inf\)\. Got -3"),
        ({"base_rate": 0.0}, r"'base_rate' parameter of make_ctr must be a float in \(0, 1\)\. Got 0\.0"),
        ({"base_rate": 1.0}, r"'base_rate' parameter of make_ctr must be a float in \(0, 1\)\. Got 1\.0"),
        ({"base_rate": "0.1"}, r"'base_rate' parameter of make_ctr must be a float in \(0, 1\)\. Got '0\.1'"),
        ({"row_offset": -1}, r"'row_offset' parameter of make_ctr must be an int in \[0, inf\)"),
        ({"dtype": "float16"}, r"'dtype' parameter of make_ctr must be one of \('float64', 'float32'\)"),
    ],
)
def test_invalid_parameters(kwargs: dict, match: str) -> None:
    args = {"n_rows": 10} | kwargs
    with pytest.raises(ValueError, match=match):
        make_ctr(**args)


def test_invalid_parameters_of_other_functions(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"'n_rows' parameter of write_ctr_parquet must be an int"):
        write_ctr_parquet(tmp_path / "x.parquet", -5)
    with pytest.raises(ValueError, match=r"'scenario' parameter of ctr_scenario must be one of"):
        ctr_scenario("overfit")

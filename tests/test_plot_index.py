"""The plots pair pandas rows by index label, as the metrics do: different indexes are refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from gpucal.plot import feature_calibration, plot_feature_calibration, plot_reliability, reliability_curve

N = 40


@pytest.fixture
def rows() -> dict[str, pd.Series]:
    """Labels, scores, calibrated scores, a feature and weights on the index 0..N-1."""
    rng = np.random.default_rng(0)
    score = rng.uniform(0.05, 0.95, N)
    return {
        "y": pd.Series((rng.uniform(size=N) < score).astype(float)),
        "score": pd.Series(score),
        "calibrated": pd.Series(np.clip(score + 0.02, 0, 1)),
        "feature": pd.Series(rng.choice(["a", "b", "c"], N)),
        "w": pd.Series(rng.uniform(0.5, 2.0, N)),
    }


def reversed_index(series: pd.Series) -> pd.Series:
    """The same values labelled N-1..0: paired by position they would look aligned, by label they are not."""
    return series.set_axis(series.index[::-1])


def test_reliability_plots_refuse_a_prediction_on_another_index(rows):
    shuffled = reversed_index(rows["score"])
    with pytest.raises(ValueError, match=r"y_true and y_prob have different indexes"):
        reliability_curve(rows["y"], shuffled, n_bins=4)
    with pytest.raises(ValueError, match=r"y_true and predictions\['model'\] have different indexes"):
        plot_reliability(rows["y"], {"model": shuffled}, n_bins=4)
    frame = pd.DataFrame({"model": rows["score"]}).set_axis(shuffled.index)
    with pytest.raises(ValueError, match=r"y_true and predictions\['model'\] have different indexes"):
        plot_reliability(rows["y"], frame, n_bins=4)


def test_reliability_plot_refuses_weights_on_another_index(rows):
    with pytest.raises(ValueError, match=r"and sample_weight have different indexes"):
        plot_reliability(
            rows["y"], {"model": rows["score"]}, sample_weight=reversed_index(rows["w"]), n_bins=4
        )


@pytest.mark.parametrize("moved", ["score", "calibrated", "feature", "w"])
def test_feature_calibration_refuses_any_input_on_another_index(rows, moved):
    inputs = dict(rows, **{moved: reversed_index(rows[moved])})
    args = (inputs["y"], inputs["score"], inputs["calibrated"], inputs["feature"])
    with pytest.raises(ValueError, match="different indexes"):
        feature_calibration(*args, sample_weight=inputs["w"])
    with pytest.raises(ValueError, match="different indexes"):
        plot_feature_calibration(*args, feature_name="feature", sample_weight=inputs["w"])


def test_same_index_and_plain_arrays_are_accepted(rows):
    """One shared index (any labels), or no index at all, is paired by position as before."""
    relabelled = {name: series.set_axis(series.index + 100) for name, series in rows.items()}
    for inputs in (rows, relabelled):
        plot_reliability(inputs["y"], {"model": inputs["score"]}, sample_weight=inputs["w"], n_bins=4)
        table = feature_calibration(
            inputs["y"], inputs["score"], inputs["calibrated"], inputs["feature"], sample_weight=inputs["w"]
        )
        assert table.count.sum() == N
    arrays = {name: series.to_numpy() for name, series in rows.items()}
    plot_reliability(arrays["y"], {"model": rows["score"]}, n_bins=4)  # numpy y beside a pandas prediction
    feature_calibration(arrays["y"], arrays["score"], arrays["calibrated"], arrays["feature"])

"""Crosses as features of MBCT, HC and NeuCalib (``interactions=``): the oracle is the same estimator
fitted on a column that holds the pair's combined value, which it reads as one more category.

With ``min_cross_count=0`` every pair seen at fit time keeps a code, in key order (the pair's codes
combined), and a category column of ``device * 10 + hour`` has the same codes in the same order; its
extra codes (missing, unseen) have no rows, like the cross's pooled code. So the trees, their maps,
NeuCalib's embedding table (seeded training) and the predictions must be the same. Then: the automatic
choice, saving, bad input, the level cap, rules.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.special import expit, logit

import gpucal
from gpucal import MBCT, HeterogeneousCalibrator
from gpucal.encoding import FeatureEncoder
from gpucal.neural import FieldAwareCalibrator, torch_available

SMALL: dict[type, dict[str, Any]] = {
    MBCT: {"max_trees": 3, "max_depth": 3, "min_node_size": 100.0, "min_child_size": 20.0},
    HeterogeneousCalibrator: {"max_depth": 3, "min_leaf_size": 50.0},
    FieldAwareCalibrator: {"max_epochs": 3, "min_value_rows": 20},
}
NEEDS_TORCH = pytest.mark.skipif(not torch_available(), reason="needs the neural extra (PyTorch)")
TREES = [MBCT, HeterogeneousCalibrator]
ESTIMATORS = [*TREES, pytest.param(FieldAwareCalibrator, marks=NEEDS_TORCH)]
FEATURES = ["site", "device", "hour", "num"]


def crossed_data(n: int = 3000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Three fields and a number; the score misses a ``device x hour`` interaction (and nothing else)."""
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(100)
    device = rng.integers(0, 4, n)
    hour = rng.integers(0, 6, n)
    site = rng.choice(np.array(["a", "b", "c", "d", "e"]), n)
    num = rng.normal(size=n)
    p = rng.beta(2.0, 3.0, n)
    z = logit(p) + 1.5 * truth.normal(0, 1.0, (4, 6))[device, hour]
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return pd.DataFrame({"score": p, "site": site, "device": device, "hour": hour, "num": num}), y


def fitted(cls: type, X: pd.DataFrame, y: np.ndarray, **params: Any) -> Any:
    settings = {"categorical_cols": ["device", "hour"], "n_bins": 4, **SMALL[cls], **params}
    return cls(**settings).fit(X, y)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_a_cross_splits_like_a_column_of_the_combined_values(cls: type) -> None:
    X, y = crossed_data()
    crossed = fitted(cls, X, y, feature_cols=FEATURES, interactions=[("device", "hour")], min_cross_count=0.0)
    X_oracle = X.assign(dh=X["device"] * 10 + X["hour"])
    oracle = fitted(
        cls, X_oracle, y, feature_cols=[*FEATURES, "dh"], categorical_cols=["device", "hour", "dh"]
    )
    assert crossed.interactions_ == [["device", "hour"]]
    if cls is FieldAwareCalibrator:
        assert_array_equal(crossed.code_rows_[:-1], oracle.code_rows_[:-2])  # the cross: one code fewer
        assert_allclose(crossed.embedding_, oracle.embedding_, rtol=1e-12, atol=1e-12)
    else:
        assert crossed.ensemble_.feature_names == [*FEATURES, "device x hour"] + (
            ["score bin"] if cls is MBCT else []
        )
        assert (crossed.ensemble_.node_feature == len(FEATURES)).any()  # the trees split on the cross
        for name in ("node_feature", "node_child_base", "child_table", "tree_start"):
            assert_array_equal(
                getattr(crossed.ensemble_, name), getattr(oracle.ensemble_, name), err_msg=name
            )
        assert_allclose(crossed.ensemble_.node_value, oracle.ensemble_.node_value, rtol=1e-12, atol=1e-12)
    X_new, _ = crossed_data(500, seed=1)
    assert_allclose(
        crossed.predict(X_new),
        oracle.predict(X_new.assign(dh=X_new["device"] * 10 + X_new["hour"])),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_auto_keeps_the_interacting_pair(cls: type) -> None:
    X, y = crossed_data()
    model = fitted(cls, X, y, interactions="auto")
    assert model.interactions_ == [["device", "hour"]]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_save_load_keeps_the_crosses_in_the_encoder(cls: type, tmp_path: Any) -> None:
    """``interactions_`` is the encoder's crosses, not a second copy in the file (which would be refused)."""
    X, y = crossed_data(1500)
    model = fitted(cls, X, y, interactions=[("device", "hour"), ("site", "num")])
    model.save(tmp_path / "m.json")
    loaded = gpucal.load(tmp_path / "m.json")
    assert loaded.interactions_ == [["device", "hour"], ["site", "num"]]
    assert_array_equal(loaded.predict(X), model.predict(X))
    data = json.loads((tmp_path / "m.json").read_text())
    assert "interactions_" not in data["state"]
    data["state"]["interactions_"] = [["device", "hour"]]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="state has keys"):
        gpucal.load(tmp_path / "bad.json")
    plain = fitted(cls, X, y)
    plain.save(tmp_path / "plain.json")
    assert gpucal.load(tmp_path / "plain.json").interactions_ == []


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize(
    ("interactions", "match"),
    [
        ([("device", "nope")], r"names column\(s\) \['nope'\] that are not features"),
        ([("hour", "hour")], "crosses column 'hour' with itself"),
        ([("hour",)], r"\('hour',\) is not a pair of columns"),
        ("hour", "The 'interactions' parameter of .* must be None, 'auto', 'all' or a list"),
    ],
)
def test_bad_interactions_are_refused_naming_them(cls: type, interactions: Any, match: str) -> None:
    X, y = crossed_data(200)
    with pytest.raises(ValueError, match=match):
        fitted(cls, X, y, interactions=interactions)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_crosses_past_the_level_cap_are_dropped_with_a_warning(cls: type) -> None:
    X, y = crossed_data(1500)
    with pytest.warns(UserWarning, match=r"\[\('site', 'num'\)\] dropped"):
        model = fitted(cls, X, y, interactions=[("device", "hour"), ("site", "num")], max_cross_levels=30)
    assert model.interactions_ == [["device", "hour"]]
    encoder = model.encoder_ if cls in TREES else FeatureEncoder.from_dict(model.encoder_)
    assert encoder.n_codes_[-1] <= 30


@pytest.mark.parametrize("cls", TREES)
def test_rules_are_not_written_for_crosses(cls: type) -> None:
    X, y = crossed_data(1500)
    model = fitted(cls, X, y, interactions=[("device", "hour")])
    with pytest.raises(ValueError, match="export_rules: the trees split on crosses"):
        model.export_rules()

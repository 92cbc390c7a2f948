"""The ``gpucal`` command line: demo, fit / predict / evaluate on CSV and Parquet, and its errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal import metrics
from gpucal.cli import (
    DEMO_CALIBRATORS,
    DEMO_CLUSTERED_CALIBRATORS,
    DEMO_FEATURE_CALIBRATORS,
    DEMO_NEURAL_CALIBRATORS,
    DEMO_NEURAL_FEATURE_CALIBRATORS,
    main,
)


@pytest.fixture
def scored(tmp_path):
    rng = np.random.default_rng(0)
    n = 4000
    p_true = rng.uniform(0.02, 0.9, n)
    frame = pd.DataFrame(
        {
            "score": np.clip(p_true**0.5, 0, 1),
            "label": rng.binomial(1, p_true),
            "p_true": p_true,
            "segment": rng.integers(0, 5, n),
        }
    )
    return frame


def test_demo_fits_every_calibrator_and_beats_the_raw_score(capsys):
    assert main(["demo", "--rows", "20000", "--format", "json", "--top", "3"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["rows"] == 20000
    table = document["metrics"]
    expected = {"raw score", "oracle p_true", *DEMO_CALIBRATORS, *DEMO_FEATURE_CALIBRATORS}
    expected |= {*DEMO_CLUSTERED_CALIBRATORS, *DEMO_NEURAL_CALIBRATORS, *DEMO_NEURAL_FEATURE_CALIBRATORS}
    assert set(table) == expected
    assert table["oracle p_true"]["tce_l2"] == 0.0
    # The default scenario is over-confident with a bend: a fitted monotone map must help on held-out rows.
    for name in ("platt", "beta", "isotonic", "sir"):
        assert table[name]["log_loss"] < table["raw score"]["log_loss"], name
        assert table[name]["tce_l2"] < table["raw score"]["tce_l2"], name
    assert len(document["worst_segments_of_best"]) == 3


def test_evaluate_matches_the_metric_functions(tmp_path, scored, capsys):
    path = tmp_path / "scored.parquet"
    scored.to_parquet(path)
    out_json = tmp_path / "metrics.json"
    code = main(
        [
            "evaluate",
            str(path),
            "--pred-cols",
            "score,p_true",
            "--field-cols",
            "segment",
            "--json",
            str(out_json),
        ]
    )
    assert code == 0
    table = json.loads(out_json.read_text())["metrics"]
    expected = metrics.ece(scored["label"], scored["score"])
    assert table["score"]["ece_15_uniform"] == pytest.approx(expected, rel=1e-12)
    assert table["score"]["field_ece[segment]"] == pytest.approx(
        metrics.field_ece(scored["label"], scored["score"], scored["segment"]), rel=1e-12
    )
    assert "ece_15_uniform" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_fit_then_predict_round_trip(tmp_path, scored, suffix):
    data = tmp_path / f"data{suffix}"
    (scored.to_csv(data, index=False) if suffix == ".csv" else scored.to_parquet(data))
    model = tmp_path / "model.json"
    out = tmp_path / f"out{suffix}"
    assert main(["fit", str(data), "--method", "isotonic", "--model", str(model)]) == 0
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    result = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert list(result.columns) == [*scored.columns, "calibrated"]
    from sklearn.isotonic import IsotonicRegression

    reference = IsotonicRegression(out_of_bounds="clip").fit(scored["score"], scored["label"])
    np.testing.assert_allclose(result["calibrated"], reference.predict(scored["score"]), atol=1e-10)


def test_errors_name_the_problem(tmp_path, scored, capsys):
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    assert (
        main(
            [
                "fit",
                str(data),
                "--method",
                "isotonic",
                "--model",
                str(tmp_path / "m.json"),
                "--label-col",
                "y",
            ]
        )
        == 2
    )
    assert "column(s) ['y'] not in" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "missing.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "data.txt")]) == 2
    assert "must end in one of" in capsys.readouterr().err
    assert main(["fit", str(data), "--method", "no-such-method", "--model", str(tmp_path / "m.json")]) == 2
    assert "no-such-method" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["platt", "beta", "histogram", "sir"])
def test_fit_from_the_cli_equals_the_library(tmp_path, scored, method):
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    model = tmp_path / "model.json"
    assert main(["fit", str(data), "--method", method, "--model", str(model)]) == 0
    expected = gpucal.make_calibrator(method).fit(scored["score"], scored["label"]).predict(scored["score"])
    np.testing.assert_array_equal(gpucal.load(model).predict(scored["score"]), expected)


def test_mbct_fits_predicts_and_exports_rules_from_the_cli(tmp_path, scored, capsys):
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    model = tmp_path / "mbct.json"
    fit_args = ["fit", str(data), "--method", "mbct", "--model", str(model), "--feature-cols", "segment"]
    params = ["--param", 'categorical_cols=["segment"]', "--param", "max_trees=2"]
    assert main([*fit_args, *params]) == 0
    X = scored[["score", "segment"]]
    expected = gpucal.MBCT(feature_cols=["segment"], categorical_cols=["segment"], max_trees=2)
    expected = expected.fit(X, scored["label"]).predict(X)
    out = tmp_path / "out.parquet"
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    np.testing.assert_array_equal(pd.read_parquet(out)["calibrated"], expected)
    capsys.readouterr()
    assert main(["rules", "--model", str(model)]) == 0
    assert "tree 1" in capsys.readouterr().out
    assert main(["rules", "--model", str(model), "--format", "sql", "--table", "scores"]) == 0
    assert "FROM scores" in capsys.readouterr().out
    platt = tmp_path / "platt.json"
    assert main(["fit", str(data), "--method", "platt", "--model", str(platt)]) == 0
    assert main(["rules", "--model", str(platt)]) == 2
    assert "no rules to export" in capsys.readouterr().err


def test_a_parameter_the_method_lacks_is_named(tmp_path, scored, capsys):
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    args = [
        "fit",
        str(data),
        "--method",
        "beta",
        "--model",
        str(tmp_path / "m.json"),
        "--score-kind",
        "logit",
    ]
    assert main(args) == 2
    assert "BetaCalibrator has no parameter(s) ['score_kind']" in capsys.readouterr().err

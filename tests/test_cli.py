"""The ``gpucal`` command line: demo, fit / predict / evaluate on CSV and Parquet, and its errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal import metrics
from gpucal.cli import BROKEN_PIPE_EXIT, main
from gpucal.cli.demo import (
    DEMO_CALIBRATORS,
    DEMO_CLUSTERED_CALIBRATORS,
    DEMO_FEATURE_CALIBRATORS,
    DEMO_NEURAL_CALIBRATORS,
    DEMO_NEURAL_FEATURE_CALIBRATORS,
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


@pytest.fixture
def plain_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo without its neural and clustered calibrators (seconds of torch and k-means per run).

    For the tests of the demo's own steps (warm timing, metrics beside the fits, its tables), which do
    not depend on which calibrators it fits; test_demo_fits_every_calibrator_and_beats_the_raw_score
    runs the full set.
    """
    import gpucal.cli.demo as cli

    for group in ("DEMO_CLUSTERED_CALIBRATORS", "DEMO_NEURAL_CALIBRATORS", "DEMO_NEURAL_FEATURE_CALIBRATORS"):
        monkeypatch.setattr(cli, group, ())


@pytest.fixture
def warm_mark(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The demo finds its mark of a warm cache (a file of the test's own): it starts no warm-up
    processes, and what is not in numba's cache compiles in this process as the demo fits it.

    The warm-up lanes are test_demo_compiles_in_parallel_lanes_first's subject; elsewhere their start-up
    and second loading of every kernel cost more CPU than they save (the tests run on both cores).
    """
    import gpucal.cli.demo as cli

    marker = tmp_path / "demo.warm"
    marker.touch()
    monkeypatch.setattr(cli, "_warm_marker", lambda: marker)


@pytest.mark.usefixtures("warm_mark")
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


@pytest.mark.parametrize("index", ["named", "unnamed"])
def test_a_parquet_files_pandas_index_reads_as_a_column_or_not_at_all(tmp_path, scored, index):
    data = tmp_path / "data.parquet"
    shuffled = scored.sample(frac=1.0, random_state=0)
    (shuffled.rename_axis("uid") if index == "named" else shuffled).to_parquet(data)
    model, out = tmp_path / "m.json", tmp_path / "out.parquet"
    assert main(["fit", str(data), "--method", "mbct", "--model", str(model)]) == 0
    features = gpucal.load(model).get_params()["feature_cols"]
    assert features == (["segment", "uid"] if index == "named" else ["segment"])
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    result = pd.read_parquet(out)
    assert len(result) == len(scored)
    if index == "named":
        assert result["uid"].tolist() == shuffled.index.tolist()
    else:
        assert "uid" not in result


def test_column_parameters_come_through_their_options(tmp_path, scored, capsys):
    data = tmp_path / "data.csv"
    scored.to_csv(data, index=False)
    model = str(tmp_path / "m.json")
    for name, option in (("feature_cols", "--feature-cols"), ("score_col", "--score-col")):
        given = ["--param", f"{name}=segment"]
        assert main(["fit", str(data), "--method", "mbct", "--model", model, *given]) == 2
        assert f"--param {name}: give it as {option}" in capsys.readouterr().err
    assert main(["fit", str(data), "--method", "platt", "--model", str(data)]) == 2  # not a model file
    assert "--model: " in capsys.readouterr().err
    assert pd.read_csv(data).equals(scored)


def test_predict_writes_host_numbers_whatever_family_the_model_was_saved_for(tmp_path, scored):
    data, model, out = tmp_path / "data.csv", tmp_path / "m.json", tmp_path / "out.csv"
    scored.to_csv(data, index=False)
    gpucal.make_calibrator("platt", output_type="cupy").fit(scored["score"], scored["label"]).save(model)
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    expected = gpucal.make_calibrator("platt").fit(scored["score"], scored["label"]).predict(scored["score"])
    np.testing.assert_allclose(pd.read_csv(out)["calibrated"], expected, rtol=1e-12)


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


def test_a_csv_with_pandas_row_labels_fits_on_its_named_columns(tmp_path, scored, capsys):
    data = tmp_path / "data.csv"
    scored.to_csv(data)  # pandas' default: the row labels first, under an empty name
    model = tmp_path / "m.json"
    assert main(["fit", str(data), "--method", "feature_platt", "--model", str(model)]) == 0
    assert json.loads(model.read_text())["params"]["feature_cols"] == ["segment"]
    latin = tmp_path / "latin.csv"
    latin.write_bytes("score,label,r\xe9gion\n0.5,1,a\n".encode("latin-1"))
    assert main(["fit", str(latin), "--method", "platt", "--model", str(model)]) == 2
    assert "latin.csv': its header is not UTF-8 text" in capsys.readouterr().err
    twice = tmp_path / "twice.csv"
    twice.write_text("score,label,seg,seg\n0.5,1,a,b\n0.2,0,a,c\n")
    assert main(["fit", str(twice), "--method", "platt", "--model", str(model)]) == 2
    assert "its header names ['seg'] more than once" in capsys.readouterr().err


def test_a_csv_with_empty_lines_before_its_header_is_read_as_pandas_reads_it(tmp_path, scored, capsys):
    """pandas skips empty lines before the header; the header checks read the first line and found
    no columns ("its columns: []")."""
    data = tmp_path / "data.csv"
    data.write_text("\n  \n\t\n" + scored.to_csv(index=False))  # empty, spaces, a tab
    model, out = tmp_path / "m.json", tmp_path / "out.csv"
    assert main(["fit", str(data), "--method", "feature_platt", "--model", str(model)]) == 0
    assert json.loads(model.read_text())["params"]["feature_cols"] == ["segment"]
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    assert out.read_text().splitlines()[0] == ",".join([*scored.columns, "calibrated"])
    from gpucal._files import table_columns

    for first in ("\x0c", '"  "'):  # pandas reads these as the header: so do the checks
        data.write_text(first + "\n" + scored.to_csv(index=False))
        assert table_columns(data) == list(pd.read_csv(data).columns)


def test_bad_values_are_named_by_their_option_and_column(tmp_path, scored, capsys):
    data = tmp_path / "data.csv"
    bad = scored.assign(model_b=scored["score"], wt=1.0)
    bad.loc[17, "model_b"] = np.nan
    bad.loc[3, "wt"] = -1.0
    bad.to_csv(data, index=False)
    evaluate = ["evaluate", str(data), "--pred-cols", "score,model_b"]
    assert main(evaluate) == 2
    assert "gpucal: error: --pred-cols model_b: 1 value(s) (first at row 17: nan)" in capsys.readouterr().err
    assert main([*evaluate[:3], "score", "--weight-col", "wt"]) == 2
    assert "gpucal: error: --weight-col wt: weights must be >= 0" in capsys.readouterr().err
    fit = ["fit", str(data), "--method", "platt", "--model", str(tmp_path / "m.json"), "--weight-col", "wt"]
    assert main(fit) == 2
    assert "gpucal: error: --weight-col wt: weights must be >= 0" in capsys.readouterr().err
    assert main([*fit[:6], "--score-col", "model_b"]) == 2
    assert "gpucal: error: --score-col model_b: 1 value(s) (first at row 17: nan)" in capsys.readouterr().err
    assert main([*evaluate[:3], "segment"]) == 2  # integers: class labels, a TypeError
    assert "gpucal: error: --pred-cols segment: dtype int64 holds class labels" in capsys.readouterr().err


def test_predict_keeps_the_text_of_the_columns_it_passes_through(tmp_path, scored):
    data = tmp_path / "data.csv"
    scored.head(200).to_csv(data, index=False)
    model = tmp_path / "m.json"
    assert main(["fit", str(data), "--method", "platt", "--model", str(model)]) == 0
    lines = data.read_text().splitlines()
    lines[0] += ",zip,note,count"
    extra = ["02134,NA,3", "00501,null,", "10001,ok,5"]
    lines[1:] = [f"{line},{extra[i % 3]}" for i, line in enumerate(lines[1:])]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.csv"
    assert main(["predict", str(data), "--model", str(model), "--output", str(out)]) == 0
    written = out.read_text().splitlines()
    assert written[0] == lines[0] + ",calibrated"
    assert [row.rsplit(",", 1)[0] for row in written[1:]] == lines[1:]
    labelled = tmp_path / "labelled.csv"
    scored.head(20).to_csv(labelled)  # pandas' row labels, under an empty name
    assert main(["predict", str(labelled), "--model", str(model), "--output", str(out)]) == 0
    assert out.read_text().splitlines()[0] == labelled.read_text().splitlines()[0] + ",calibrated"


def _refuse_constant(name: str) -> None:
    msg = f"not strict JSON: {name}"
    raise ValueError(msg)


def test_json_reports_are_strict_json(tmp_path, scored, capsys):
    """A metric that is undefined (a constant prediction's calibration slope) is null, not NaN."""
    data = tmp_path / "data.csv"
    scored.assign(constant=0.3).to_csv(data, index=False)
    report = tmp_path / "metrics.json"
    assert main(["evaluate", str(data), "--pred-cols", "score,constant", "--json", str(report)]) == 0
    metrics = json.loads(report.read_text(), parse_constant=_refuse_constant)["metrics"]
    assert metrics["constant"]["calibration_slope"] is None


def test_the_auc_guard_line_shows_how_much_lower_the_choice_ranks() -> None:
    """Four decimals printed the two AUCs as equal (0.7608 against 0.7608) where the guard acted."""
    from gpucal.cli.table_commands import auto_choice

    rng = np.random.default_rng(0)
    score = rng.uniform(0.01, 0.99, 6_000)
    truth = np.where(score < 0.5, 0.05, 0.6) + 0.3 * (score > 0.8)
    y = (rng.uniform(size=6_000) < truth).astype(float)
    model = gpucal.AutoCalibrator(candidates=["isotonic", "platt"], n_folds=5, ensemble=False).fit(score, y)
    line = auto_choice(model)
    assert re.search(r"AUC within the folds 0\.\d{6} against 0\.\d{6}, \d\.\de-\d\d lower\)", line), line


def test_one_column_in_two_roles_is_refused(tmp_path, scored, capsys):
    data = tmp_path / "data.csv"
    scored.to_csv(data, index=False)
    model = str(tmp_path / "m.json")
    for roles, message in [
        (["--score-col", "label"], "--score-col label: the column is also --label-col"),
        (["--label-col", "score"], "--score-col score: the column is also --label-col"),
        (["--weight-col", "score"], "--score-col score: the column is also --weight-col"),
    ]:
        assert main(["fit", str(data), "--method", "platt", "--model", model, *roles]) == 2
        assert message in capsys.readouterr().err


def test_a_missing_extra_or_gpu_is_one_error_line(tmp_path, scored, capsys, monkeypatch):
    data = tmp_path / "data.csv"
    scored.to_csv(data, index=False)
    model = str(tmp_path / "m.json")
    if not gpucal._backend.gpu_available():
        assert main(["fit", str(data), "--method", "mbct", "--model", model, "--param", "device=gpu"]) == 2
        assert "no CUDA GPU is usable" in capsys.readouterr().err
        # A model fitted on a GPU machine (its device parameter kept) predicts on this one.
        assert main(["fit", str(data), "--method", "feature_platt", "--model", model]) == 0
        document = json.loads((tmp_path / "m.json").read_text())
        document["params"]["device"] = "gpu"
        (tmp_path / "m.json").write_text(json.dumps(document))
        out = str(tmp_path / "out.csv")
        assert main(["predict", str(data), "--model", model, "--output", out]) == 0
        # So does an automatic calibrator's member.
        member = gpucal.make_calibrator("feature_platt", feature_cols=["segment"])
        auto = gpucal.AutoCalibrator(candidates=[member], ensemble=False, auc_guard=False)
        auto.fit(scored[["score", "segment"]], scored["label"]).save(tmp_path / "auto.json")
        document = json.loads((tmp_path / "auto.json").read_text())
        document["state"]["members_"][0]["params"]["device"] = "gpu"
        (tmp_path / "auto.json").write_text(json.dumps(document))
        assert main(["predict", str(data), "--model", str(tmp_path / "auto.json"), "--output", out]) == 0
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["fit", str(data), "--method", "piecewise_logit", "--model", model]) == 2
    error = capsys.readouterr().err
    assert "gpucal: error: PiecewiseLogitCalibrator is trained with PyTorch" in error
    assert "Traceback" not in error

    def broken(args: argparse.Namespace) -> int:
        msg = "cannot import name 'x' from 'gpucal.y'"
        raise ImportError(msg, name="gpucal.y")

    monkeypatch.setattr(gpucal.cli.parser, "run_rules", broken)
    with pytest.raises(ImportError, match="cannot import name"):  # gpucal's own bug: its traceback
        main(["rules", "--model", model])


def test_outputs_never_replace_an_input(tmp_path, scored, capsys, monkeypatch):
    """An output path that is an input of the command, however spelt, is refused before any work, and
    the input is left as it was."""
    data = tmp_path / "data.csv"
    scored.to_csv(data, index=False)
    before = data.read_bytes()
    model = tmp_path / "m.json"
    assert main(["fit", str(data), "--method", "platt", "--model", str(model)]) == 0
    monkeypatch.chdir(tmp_path)
    for command in (
        ["evaluate", str(data), "--pred-cols", "score", "--json", "./data.csv"],
        ["evaluate", str(data), "--pred-cols", "score", "--json", str(tmp_path / "metrics.txt")],
        ["predict", str(data), "--model", str(model), "--output", "./data.csv"],
        ["predict", str(data), "--model", str(model), "--output", str(data), "--overwrite"],
    ):
        assert main(command) == 2
        error = capsys.readouterr().err
        assert "is an input of this command" in error or "must end in one of ('.json',)" in error
    assert data.read_bytes() == before


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
    model = str(tmp_path / "m.json")
    assert main(["fit", str(data), "--method", "beta", "--model", model, "--param", "n_bins=3"]) == 2
    assert "BetaCalibrator has no parameter(s) ['n_bins']" in capsys.readouterr().err


def test_methods_the_command_cannot_fit_are_refused_before_the_read(tmp_path, scored, capsys):
    """A method reading one column per class, or one with a parameter without a default, is refused
    with what to do before the file is read."""
    model = str(tmp_path / "m.json")
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    assert main(["fit", str(data), "--method", "dirichlet", "--model", model]) == 2
    assert "DirichletCalibrator fits one probability column per class" in capsys.readouterr().err
    assert main(["fit", str(data), "--method", "downsampling", "--model", model]) == 2
    err = capsys.readouterr().err
    assert "--method downsampling needs --param rate=VALUE" in err
    assert "reading" not in err
    assert main(["fit", str(data), "--method", "downsampling", "--model", model, "--param", "rate=0.5"]) == 0
    assert "dirichlet: DirichletCalibrator (from Python only)" in gpucal.cli.table_commands.method_list()


def test_option_errors_read_as_options_not_python(tmp_path, scored, capsys):
    """Issue 18: errors say ``--score-kind logit``, not ``score_kind='logit'``."""
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    model = str(tmp_path / "m.json")
    assert main(["fit", str(data), "--method", "beta", "--model", model, "--score-kind", "logit"]) == 2
    assert (
        capsys.readouterr().err == "gpucal: error: --score-kind logit: --method beta takes no --score-kind\n"
    )
    assert main(["fit", str(data), "--method", "platt", "--model", model, "--feature-cols", "segment"]) == 2
    assert "--feature-cols segment: --method platt takes no --feature-cols" in capsys.readouterr().err
    logits = tmp_path / "logits.csv"
    scored.assign(score=np.log(scored["score"] + 0.01) + 1.0).to_csv(logits, index=False)
    assert main(["fit", str(logits), "--method", "platt", "--model", model]) == 2
    err = capsys.readouterr().err
    assert "pass margins/logits as --score-kind logit" in err
    assert "score_kind" not in err
    both = ["--score-kind", "logit", "--param", "score_kind=logit"]
    assert main(["fit", str(logits), "--method", "platt", "--model", model, *both]) == 2
    assert "mutually exclusive" in capsys.readouterr().err


# --- Issue 18: the CLI's rough edges -------------------------------------------------------------


def _fail_if_read(*args, **kwargs):
    pytest.fail("the data were read before the command's paths were checked")


@pytest.fixture
def files(tmp_path, scored):
    """A data file and a fitted isotonic model in ``tmp_path``."""
    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    model = tmp_path / "model.json"
    assert main(["fit", str(data), "--method", "isotonic", "--model", str(model)]) == 0
    return {"data": str(data), "model": str(model), "dir": str(tmp_path), "nowhere": str(tmp_path / "no")}


PATH_PROBLEMS = {
    "fit --model in a missing folder": (
        ["fit", "{data}", "--method", "platt", "--model", "{nowhere}/m.json"],
        "--model: the folder",
    ),
    "fit --model is a folder": (["fit", "{data}", "--method", "platt", "--model", "{dir}"], "is a directory"),
    "predict --model missing": (
        ["predict", "{data}", "--model", "{dir}/missing.json", "--output", "{dir}/o.csv"],
        "--model: no such file",
    ),
    "predict --model is a folder": (
        ["predict", "{data}", "--model", "{dir}", "--output", "{dir}/o.csv"],
        "is a directory, not a file",
    ),
    "predict --output in a missing folder": (
        ["predict", "{data}", "--model", "{model}", "--output", "{nowhere}/o.csv"],
        "--output: the folder",
    ),
    "predict --output extension": (
        ["predict", "{data}", "--model", "{model}", "--output", "{dir}/o.txt"],
        "--output: '.*o.txt' must end in one of",
    ),
    "evaluate --json in a missing folder": (["evaluate", "{data}", "--json", "{nowhere}/m.json"], "--json:"),
    "evaluate --plot in a missing folder": (["evaluate", "{data}", "--plot", "{nowhere}/p.png"], "--plot:"),
    "evaluate --plot extension": (["evaluate", "{data}", "--plot", "{dir}/p.jpg"], "must end in one of"),
    "rules --model missing": (["rules", "--model", "{dir}/missing.json"], "--model: no such file"),
    "data is a folder": (["evaluate", "{dir}/folder.csv"], "is a directory, not a file"),
}


@pytest.mark.parametrize("case", PATH_PROBLEMS)
def test_path_problems_are_one_line_errors_before_the_data_are_read(case, files, monkeypatch, capsys):
    """Issue 18: missing files, folders as files and unwritable outputs are usage errors, not tracebacks."""
    from pathlib import Path

    Path(files["dir"], "folder.csv").mkdir()
    monkeypatch.setattr("gpucal._files.read_table", _fail_if_read)
    capsys.readouterr()
    argv, expected = PATH_PROBLEMS[case]
    assert main([arg.format(**files) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpucal: error: ")
    assert err.count("\n") == 1
    assert re.search(expected, err), err


def test_plot_without_matplotlib_is_one_line_before_the_data_are_read(files, monkeypatch, capsys):
    """A default install has no matplotlib: ``evaluate --plot`` says what to install, and computes nothing."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a)
    )
    monkeypatch.setattr("gpucal._files.read_table", _fail_if_read)
    capsys.readouterr()
    assert main(["evaluate", files["data"], "--plot", f"{files['dir']}/p.png"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gpucal: error: --plot: the reliability diagram needs matplotlib"), err
    assert "pip install 'gpucal[plot]'" in err


def test_an_os_error_while_writing_is_one_line(files, monkeypatch, capsys):
    def refuse(self, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("gpucal.calibrators.base.Calibrator.save", refuse)
    model = f"{files['dir']}/m.json"
    assert main(["fit", files["data"], "--method", "platt", "--model", model]) == 2
    assert capsys.readouterr().err.endswith(f"gpucal: error: '{model}': Permission denied\n")


def test_predict_refuses_to_overwrite_an_input_column(files, scored, capsys):
    """Issue 18: ``--output-col score`` silently replaced the input column."""
    out = f"{files['dir']}/out.parquet"
    for column in ("score", "label"):
        argv = ["predict", files["data"], "--model", files["model"], "--output", out, "--output-col", column]
        assert main(argv) == 2
        assert f"--output-col {column}: " in capsys.readouterr().err
        assert main([*argv, "--overwrite"]) == 0
        result = pd.read_parquet(out)
        assert list(result.columns) == list(scored.columns)
        expected = gpucal.load(files["model"]).predict(scored["score"])
        np.testing.assert_array_equal(result[column], expected)


def test_feature_aware_fit_without_feature_cols_reads_every_other_column(tmp_path, scored, capsys):
    """Issue 18: ``fit --method mbct`` without ``--feature-cols`` fitted zero trees. The default leaves out
    the score, label and weight columns, ``p_true`` and a column holding the label's values (a leak)."""
    data = tmp_path / "data.parquet"
    weighted = scored.assign(
        weight=1.0, clicked=scored["label"].astype(bool), age=np.arange(len(scored)) % 397
    )
    weighted.to_parquet(data)
    model = tmp_path / "mbct.json"
    argv = ["fit", str(data), "--method", "mbct", "--model", str(model), "--weight-col", "weight"]
    assert main([*argv, "--param", "max_trees=2"]) == 0
    err = capsys.readouterr().err
    assert "every column but the score, label and weights: segment, age" in err
    assert (
        "features read by value: segment (5 values); binned: age (32 bins)" in err
    )  # 397 values > 4000 / 20
    fitted = gpucal.load(model)
    assert fitted.feature_cols == ["segment", "age"]
    X = weighted[["score", "segment", "age"]]
    expected = gpucal.MBCT(feature_cols=["segment", "age"], max_trees=2)
    expected.fit(X, scored["label"], sample_weight=weighted["weight"])
    assert "tree 1" in fitted.export_rules()
    np.testing.assert_array_equal(fitted.predict(X), expected.predict(X))


def test_verbose_reaches_the_methods_that_log(files, capsys):
    model = f"{files['dir']}/mbct.json"
    argv = ["fit", files["data"], "--method", "mbct", "--model", model, "--feature-cols", "segment", "-v"]
    assert main(argv) == 0
    assert "MBCT:" in capsys.readouterr().err
    assert gpucal.load(model).verbose == 1
    assert main(["fit", files["data"], "--method", "platt", "--model", model, "-v"]) == 0


def test_help_gives_every_option_a_text_and_default_and_lists_every_method(capsys):
    """Issue 18: options without help or defaults; ``fit --help`` did not list the methods."""
    from gpucal.cli import build_parser
    from gpucal.factory import CALIBRATORS

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        text = command.format_help()
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
            if action.option_strings and not action.required and action.default not in (None, []):
                assert f"{action.help} (default: {action.default})" in " ".join(text.split()), (
                    name,
                    action.dest,
                )
    with pytest.raises(SystemExit, match="0"):
        main(["fit", "--help"])
    methods = capsys.readouterr().out.split("methods:")[1]
    assert all(re.search(rf"\b{name}\b", methods) for name in CALIBRATORS)


def test_the_warmup_command_compiles_in_the_demo_lanes_then_the_rest(monkeypatch, tmp_path, capsys):
    """Issue 18: ``gpucal warmup`` compiles every CPU kernel ahead of first use. Issue 23: it compiled
    one kernel after another; the demo's kernels now compile in the demo's parallel processes first."""
    import gpucal.cli.demo as cli

    calls = []

    def fake_lanes(calibration, held_out, fields, seed, names):
        calls.append(("lanes", len(calibration), len(held_out), tuple(names)))

    def fake_warm_up(*, verbose=False):
        calls.append(("warm_up", verbose))
        return 12.5

    marker = tmp_path / "demo.warm"
    monkeypatch.setattr(cli, "_warm_up_lanes", fake_lanes)
    monkeypatch.setattr(cli, "_warm_marker", lambda: marker)
    monkeypatch.setattr("gpucal.warmup.warm_up", fake_warm_up)
    assert main(["warmup"]) == 0
    assert main(["warmup", "--verbose"]) == 0
    names = cli.DEMO_CALIBRATORS + cli.DEMO_FEATURE_CALIBRATORS + cli.DEMO_CLUSTERED_CALIBRATORS
    lanes = ("lanes", cli.DEMO_ROWS, cli.DEMO_ROWS, names)
    assert calls == [lanes, ("warm_up", False), lanes, ("warm_up", True)]
    assert marker.exists()  # the demo skips its own warm-up afterwards
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert re.fullmatch(r"gpucal \S+: every CPU kernel compiled into the cache in \d+\.\d s", out[0])


@pytest.mark.usefixtures("plain_demo")
def test_demo_times_warm_fits_only(monkeypatch, tmp_path, capsys):
    """Issue 23: a timed fit still compiled (Platt 5.96 s against beta's 0.09 s); warm means warm now.

    Platt's first fit here compiles a fresh numba function and sleeps: the demo must fit it again and
    report the second, fast fit. The others compile nothing (the kernels are cached) and fit once
    (the untimed loading fits are left out here).
    """
    import time

    import numba

    import gpucal.cli.demo as cli

    monkeypatch.setattr(cli, "_warm_marker", lambda: tmp_path / "demo.warm")
    monkeypatch.setattr(cli, "_warm_up_lanes", lambda *args, **kwargs: None)
    main(["demo", "--rows", "3000", "--top", "2"])  # every kernel of this size in the cache
    calls: list[str] = []
    fit_predict = cli._demo_fit_predict

    def spy(name, calibration, held_out, fields, fitted):
        calls.append(name)
        if name == "platt" and calls.count("platt") == 1:
            numba.njit(lambda x: x + 1)(1)  # a compilation, as a kernel's first use would be
            time.sleep(1.0)
        return fit_predict(name, calibration, held_out, fields, fitted)

    monkeypatch.setattr(cli, "_demo_fit_predict", spy)
    monkeypatch.setattr(cli, "_load_kernels", lambda *args: None)
    capsys.readouterr()
    assert main(["demo", "--rows", "3000", "--top", "2", "--format", "json"]) == 0
    assert calls.count("platt") == 2
    assert all(calls.count(name) == 1 for name in set(calls) - {"platt"}), calls
    table = json.loads(capsys.readouterr().out)["metrics"]
    assert table["platt"]["fit_predict_s"] < 1.0


def test_demo_compiles_in_parallel_lanes_first(monkeypatch, tmp_path, capsys):
    """Issue 23: the first run's compilation is split over warm-up processes that report as they go; the
    lane that computes the metrics runs in the process that computes them beside the timed fits."""
    import gpucal.cli.demo as cli

    marker = tmp_path / "demo.warm"
    monkeypatch.setattr(cli, "_warm_marker", lambda: marker)
    monkeypatch.setattr(cli, "DEMO_METRICS_BESIDE_ROWS", 0)
    assert main(["demo", "--rows", "2000", "--top", "2"]) == 0
    err = capsys.readouterr().err
    assert "computed beside in a second process" in err
    steps = list(dict.fromkeys(step for lane in cli.DEMO_WARMUP_LANES for step in lane))
    for step in steps:
        assert re.search(rf"\] \d+/{len(steps)} {step} \(", err), (step, err)
    assert f"[{'#' * 20}] {len(steps)}/{len(steps)} " in err
    assert "warm-up stopped" not in err
    assert marker.exists()
    # The second run skips the warm-up; its metrics are computed inline, with no second process to start
    # (test_the_demo_metrics_computed_beside_the_fits_are_the_same starts one without the lanes).
    monkeypatch.setattr(cli, "DEMO_METRICS_BESIDE_ROWS", 10**9)
    assert main(["demo", "--rows", "2000", "--top", "2"]) == 0
    assert "compiled already" in capsys.readouterr().err


def test_a_failing_warm_up_step_releases_the_lanes_that_wait_for_it(monkeypatch):
    """A lane whose step fails says so and marks the step ended: a lane waiting for it (HC after MBCT)
    goes on at once instead of holding its process until the lane timeout."""
    import queue
    import threading

    import gpucal.cli.demo as cli

    def fail(*args, **kwargs):
        msg = "no kernel"
        raise RuntimeError(msg)

    monkeypatch.setattr(cli, "_demo_fit_predict", fail)
    steps = ("mbct", "hc")
    sync = cli._LaneSync(
        {s: threading.Event() for s in steps}, {s: threading.Event() for s in steps}, threading.Lock()
    )
    news: queue.Queue = queue.Queue()
    frame = pd.DataFrame({"score": [0.2, 0.7], "p_true": [0.2, 0.7], "label": [0.0, 1.0]})
    cli._warm_lane(0, ("mbct",), frame, frame, [], 0, None, news, sync)
    assert sync.ended["mbct"].is_set()
    assert [news.get_nowait() for _ in range(2)] == [("start", 0, "mbct"), ("error", 0, "mbct: no kernel")]
    waiting = threading.Thread(target=cli._take_step, args=("hc", sync))
    waiting.start()
    waiting.join(timeout=5.0)
    assert not waiting.is_alive()


def test_demo_fits_auto_once_in_its_own_process(monkeypatch, tmp_path, capsys):
    """Issue 23: the untimed loading fit of the automatic calibrator took 5.4 CPU s after the warm-up and
    loaded no kernel the timed fits before it do not; it is fitted in a warm-up lane only."""
    import gpucal.cli.demo as cli

    def fake_lanes(calibration, held_out, fields, seed, names, on_step, **kwargs):
        for step in dict.fromkeys(step for lane in cli.DEMO_WARMUP_LANES for step in lane):
            if step in names:
                on_step(step)

    calls: list[tuple[str, int]] = []
    fit_predict = cli._demo_fit_predict

    def spy(name, calibration, held_out, fields, fitted):
        calls.append((name, len(calibration)))
        return fit_predict(name, calibration, held_out, fields, fitted)

    monkeypatch.setattr(cli, "_warm_marker", lambda: tmp_path / "demo.warm")
    monkeypatch.setattr(cli, "_warm_up_lanes", fake_lanes)
    monkeypatch.setattr(cli, "_demo_fit_predict", spy)
    monkeypatch.setattr(cli, "DEMO_LOAD_ROWS", 1_000)
    assert main(["demo", "--rows", "3000", "--top", "2"]) == 0
    capsys.readouterr()
    # The timed fit only (fitted again if it compiled).
    assert {rows for name, rows in calls if name == "auto"} == {3000}
    assert ("mbct", 1_000) in calls  # the others are loaded first


@pytest.mark.usefixtures("plain_demo")
def test_the_demo_metrics_computed_beside_the_fits_are_the_same(monkeypatch, tmp_path, capsys):
    """Issue 23: the metrics (17 s of one core on 150,000 rows) waited for every fit while the second
    core idled; each prediction's metrics now run in a second process while the next calibrator fits."""
    import os

    import gpucal.cli.demo as cli

    monkeypatch.setattr(cli, "_warm_marker", lambda: tmp_path / "demo.warm")
    monkeypatch.setattr(cli, "_warm_up_lanes", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    tables = {}
    for threshold in (10**9, 0):
        monkeypatch.setattr(cli, "DEMO_METRICS_BESIDE_ROWS", threshold)
        assert main(["demo", "--rows", "3000", "--top", "2", "--format", "json"]) == 0
        captured = capsys.readouterr()
        assert ("computed beside in a second process" in captured.err) == (threshold == 0)
        tables[threshold] = json.loads(captured.out)["metrics"]
    inline, beside = tables[10**9], tables[0]
    assert list(beside) == list(inline)  # the predictions in the same order
    for name, column in inline.items():
        column.pop("fit_predict_s")
        beside[name].pop("fit_predict_s")
        assert beside[name] == pytest.approx(column, rel=1e-12, nan_ok=True), name


@pytest.mark.usefixtures("plain_demo")
def test_the_demo_text_computes_only_the_metrics_it_shows(monkeypatch, tmp_path, capsys):
    """Issue 23 (the first run): the text table shows seven metrics, but every metric of
    ``gpucal.evaluate`` was computed for each prediction, two thirds of the metrics' CPU time on the
    default rows; the JSON output keeps every one."""
    import gpucal.cli.demo as cli
    from gpucal import metrics

    monkeypatch.setattr(cli, "_warm_marker", lambda: tmp_path / "demo.warm")
    monkeypatch.setattr(cli, "_warm_up_lanes", lambda *args, **kwargs: None)
    monkeypatch.setattr(cli, "DEMO_METRICS_BESIDE_ROWS", 10**9)
    skce = metrics.skce

    def not_shown(*args, **kwargs):
        msg = "the text table does not show the SKCE"
        raise AssertionError(msg)

    monkeypatch.setattr(metrics, "skce", not_shown)
    assert main(["demo", "--rows", "2000", "--top", "2"]) == 0
    header = capsys.readouterr().out.split("counted\n\n")[1].splitlines()[0].split()
    assert header == [*cli.DEMO_COLUMNS, "worst_field_ece", "fit_predict_s"]
    monkeypatch.setattr(metrics, "skce", skce)
    assert main(["demo", "--rows", "2000", "--top", "2", "--format", "json"]) == 0
    assert "skce" in json.loads(capsys.readouterr().out)["metrics"]["platt"]


def test_a_parquet_file_without_pyarrow_names_the_extra(monkeypatch, tmp_path, scored, capsys):
    """Issue 23 (the first run): pyarrow (a quarter of the dependencies' install time) is the
    ``parquet`` extra now; without it a Parquet file is refused with an error that says what to install."""
    from gpucal.datasets import write_ctr_parquet

    data = tmp_path / "data.parquet"
    scored.to_parquet(data)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # ``import pyarrow`` fails, as when not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    model = str(tmp_path / "m.json")
    assert main(["fit", str(data), "--method", "platt", "--label-col", "label", "--model", model]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (
        f"gpucal: error: data: {str(data)!r} is a Parquet file, which needs pyarrow, not installed: "
        "pip install 'gpucal[parquet]' (or pip install pyarrow), or give a .csv file"
    )
    with pytest.raises(ImportError, match=r"write_ctr_parquet needs pyarrow, not installed: pip install"):
        write_ctr_parquet(tmp_path / "ctr.parquet", 100)


def test_the_heartbeat_fills_silences(monkeypatch, capsys):
    """Issue 23: the first run was silent for 117 s; a long stage now prints its status every few seconds."""
    import time

    from gpucal.cli import progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    progress.log_progress("start")
    with progress.heartbeat(lambda: "still working"):
        time.sleep(1.0)
    with progress.heartbeat(lambda: "too soon"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "start"
    assert err.count("still working") >= 2  # about 5 on an idle machine; a loaded one can lose some
    assert "too soon" not in err


@pytest.mark.usefixtures("plain_demo")
def test_the_demo_explains_its_segment_table(monkeypatch, tmp_path, capsys):
    """Issue 23: ``excess`` was never explained and ``weight`` printed as ``48596.00000``."""
    import gpucal.cli.demo as cli

    monkeypatch.setattr(cli, "_warm_marker", lambda: tmp_path / "demo.warm")
    monkeypatch.setattr(cli, "_warm_up_lanes", lambda *args, **kwargs: None)
    assert main(["demo", "--rows", "3000", "--top", "3", "--min-segment-rows", "100"]) == 0
    out = capsys.readouterr().out
    segments = out.split("rows >= 100:\n")[1].splitlines()
    header = segments[0].split()
    columns = "feature value rows weight observed predicted error excess pcoc sigma"
    assert header == columns.split()
    for line in segments[1:4]:
        cells = dict(zip(header, line.split(), strict=True))
        assert cells["weight"] == cells["rows"]  # unit weights: a count, no decimals
        assert cells["excess"][0] in "+-"
    assert "excess = predicted - observed positives" in out


@pytest.mark.usefixtures("warm_mark")
@pytest.mark.parametrize("rows", [3, 99, 100, 150])
def test_demo_on_few_rows_runs_or_names_rows(rows, capsys):
    """Issue 18: ``demo --rows 3`` failed on ``n_clusters=20``, a parameter the user never set."""
    code = main(["demo", "--rows", str(rows), "--format", "json"])
    err = capsys.readouterr().err
    if rows < 100:
        assert code == 2
        assert err.splitlines()[-1].startswith("gpucal: error: --rows must be at least 100: "), err
    else:
        assert code == 0, err


def test_python_dash_m_gpucal_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "gpucal", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gpucal {gpucal.__version__}\n"


@pytest.mark.parametrize("n_columns", [1, 60])
def test_a_closed_stdout_ends_quietly(n_columns, tmp_path, scored):
    """Issue 18: ``gpucal ... | head`` ended in a BrokenPipeError traceback; now exit 141, no noise.

    One column's table waits in stdout's buffer until exit; sixty columns' overflow it mid-command.
    """
    data = tmp_path / "wide.parquet"
    predictions = [f"p{i}" for i in range(n_columns)]
    scored.assign(**dict.fromkeys(predictions, scored["score"])).to_parquet(data)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, as after ``head -1``
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gpucal", "evaluate", str(data), "--pred-cols", ",".join(predictions)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert result.returncode == BROKEN_PIPE_EXIT, result.stderr
    assert "Traceback" not in result.stderr
    assert "Exception ignored" not in result.stderr
    assert "error" not in result.stderr


def test_the_cli_parses_without_importing_heavy_libraries():
    """``gpucal --help`` stays fast: building the parser imports no pandas, numba or scikit-learn."""
    code = (
        "import sys; from gpucal.cli import build_parser; build_parser().format_help(); "
        "print(sorted({'pandas', 'numba', 'sklearn', 'torch'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"


# --- Issue 23: a newcomer's first hour --------------------------------------------------------------

HEAVY = ("pandas", "numba", "sklearn", "scipy", "torch")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["fit", "{data}", "--method", "platt", "--model", "{model}", "--label-col", "y"], "--label-col y"),
        (["fit", "{data}", "--method", "mbct", "--model", "{model}", "--feature-cols", "segment,sit"], "sit"),
        (["evaluate", "{data}", "--pred-cols", "score,scroe"], "--pred-cols score,scroe"),
    ],
)
def test_a_misspelled_column_is_refused_before_the_fit_libraries_load(
    tmp_path, scored, suffix, argv, expected
):
    """Issue 23: ``gpucal`` took 3-4.6 s to name a misspelled column; it reads the header first now."""
    data = tmp_path / f"data{suffix}"
    scored.to_csv(data, index=False) if suffix == ".csv" else scored.to_parquet(data)
    args = [a.format(data=data, model=tmp_path / "m.json") for a in argv]
    code = (
        "import sys; from gpucal.cli import main; code = main(sys.argv[1:]); "
        f"print(code, sorted(set({HEAVY!r}) & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    assert result.stdout == "2 []\n", result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith("gpucal: error: "), result.stderr
    assert expected in error
    assert "not in" in error
    assert "'segment'" in error  # the file's columns, for the user to pick from


def test_predict_names_a_column_the_model_reads_before_loading_it(tmp_path, scored):
    """Issue 23: ``gpucal predict`` loaded the model (every calibrator) before looking at the columns."""
    data, model = tmp_path / "data.csv", tmp_path / "m.json"
    gpucal.make_calibrator("feature_platt", feature_cols=["segment"]).fit(scored, scored["label"]).save(model)
    scored.drop(columns="segment").to_csv(data, index=False)
    code = (
        "import sys; from gpucal.cli import main; code = main(sys.argv[1:]); "
        f"print(code, sorted(set({HEAVY!r}) & set(sys.modules)))"
    )
    argv = ["predict", str(data), "--model", str(model), "--output", str(tmp_path / "out.csv")]
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    assert result.stdout == "2 []\n", result.stderr
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"gpucal: error: --model {model}: it reads column(s) ['segment'], not in ")


def test_fit_auto_says_what_it_chose_and_its_gain_over_platt(tmp_path, scored, capsys):
    """Issue 23: ``fit --method auto`` said nothing of its choice without ``--verbose``."""
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(1)
    shift = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])[scored["segment"]]  # a bias per segment: features help
    logit = np.log(scored["score"] / (1 - scored["score"])) + shift
    biased = scored.assign(label=rng.binomial(1, 1 / (1 + np.exp(-logit))))
    data = tmp_path / "data.parquet"
    biased.to_parquet(data)
    candidates = ["platt", "feature_platt"]
    argv = ["fit", str(data), "--method", "auto", "--model", str(tmp_path / "auto.json")]
    argv += ["--feature-cols", "segment", "--categorical-cols", "segment", "--param", "ensemble=false"]
    assert main([*argv, "--param", json.dumps(candidates).join(["candidates=", ""])]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("auto chose")]
    assert len(lines) == 1
    model = gpucal.AutoCalibrator(
        candidates=candidates, feature_cols=["segment"], categorical_cols=["segment"], ensemble=False
    ).fit(biased[["score", "segment"]], biased["label"])
    chosen = model.cv_results_["candidate"][model.best_index_]
    assert chosen != "platt"
    oof, y = model.oof_predictions_, biased["label"].to_numpy()
    gain = log_loss(y, oof[:, 0]) - log_loss(y, oof[:, model.best_index_])  # Platt is candidate 0
    assert lines[0].startswith(f"auto chose {chosen}: held-out log_loss gain over Platt scaling ")
    assert f"{gain:+.5f} per row" in lines[0]


@pytest.mark.filterwarnings("always::UserWarning")
def test_warnings_read_as_one_line_each(tmp_path, scored, capsys):
    """A warning reaches the shell as one 'gpucal: warning:' line, not Python's file:line and source."""
    data = tmp_path / "data.parquet"
    scored.assign(outcome=np.where(scored["label"] == 1, "yes", "no")).to_parquet(data)
    model = str(tmp_path / "m.json")
    assert (
        main(["fit", str(data), "--method", "feature_platt", "--model", model, "--label-col", "label"]) == 0
    )
    err = capsys.readouterr().err
    assert "UserWarning" not in err
    warned = [line for line in err.splitlines() if line.startswith("gpucal: warning: ")]
    assert len(warned) == 1
    assert warned[0].startswith("gpucal: warning: X column(s) 'outcome' separate the classes of y")

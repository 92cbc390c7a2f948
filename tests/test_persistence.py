"""Saved models: JSON round trips for every calibrator, and clear errors for bad files."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal.factory import CALIBRATORS
from gpucal.persistence import SCHEMA_VERSION, ModelFileError

ONE_DIMENSIONAL = sorted(
    {
        cls.__name__: name
        for name, cls in CALIBRATORS.items()
        # Multi-class and feature-aware calibrators (with feature_cols) have their own round-trip tests.
        if name != "dirichlet" and "feature_cols" not in inspect.signature(cls).parameters
    }.values()
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    p_true = rng.beta(0.6, 2.0, 3000)
    score = np.clip(p_true**0.7, 1e-6, 1 - 1e-6)
    return score, rng.binomial(1, p_true).astype(float), rng.uniform(0.5, 2.0, 3000)


def _fitted(name, data):
    score, y, w = data
    params = {"rate": 0.25} if name == "downsampling" else {}
    return gpucal.make_calibrator(name, **params).fit(score, y, sample_weight=w)


@pytest.mark.parametrize("name", ONE_DIMENSIONAL)
def test_round_trip_predicts_bit_for_bit(name, data, tmp_path):
    model = _fitted(name, data)
    path = tmp_path / "model.json"
    model.save(path)
    loaded = gpucal.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    new = np.linspace(0, 1, 501)
    np.testing.assert_array_equal(loaded.predict(new), model.predict(new))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("spline", {"knots": np.linspace(0.1, 0.9, 5)}),
        ("spline", {"reg_params": np.array([0.1, 1.0, 10.0])}),
        ("platt_hinge", {"quantiles": np.array([0.25, 0.5, 0.75])}),
    ],
)
def test_array_parameters_save_as_lists(name, params, data, tmp_path):
    """Array-like parameters given as numpy arrays fit, so they must save (as lists)."""
    score, y, w = data
    model = gpucal.make_calibrator(name, **params).fit(score, y, sample_weight=w)
    model.save(tmp_path / "model.json")
    loaded = gpucal.load(tmp_path / "model.json")
    new = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(loaded.predict(new), model.predict(new))


def test_dirichlet_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet([1.0, 2.0, 3.0], 600)
    labels = np.array([rng.choice(3, p=row) for row in probs])
    model = gpucal.DirichletCalibrator().fit(probs, labels)
    model.save(tmp_path / "d.json")
    np.testing.assert_array_equal(gpucal.load(tmp_path / "d.json").predict(probs), model.predict(probs))


def _document(data, tmp_path, name="isotonic"):
    path = tmp_path / "model.json"
    _fitted(name, data).save(path)
    return json.loads(path.read_text()), path


def _write(path, document):
    path.write_text(json.dumps(document))
    return path


def test_truncated_file(data, tmp_path):
    _, path = _document(data, tmp_path)
    path.write_text(path.read_text()[:-40])
    with pytest.raises(ModelFileError, match="not valid JSON"):
        gpucal.load(path)


def test_not_a_model(tmp_path):
    with pytest.raises(ModelFileError, match="not a gpucal model file"):
        gpucal.load(_write(tmp_path / "x.json", [1, 2, 3]))
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ModelFileError, match="cannot be parsed"):
        gpucal.load(tmp_path / "bin.json")


def test_wrong_schema_version(data, tmp_path):
    document, path = _document(data, tmp_path)
    document["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ModelFileError, match="schema_version 2 is not supported"):
        gpucal.load(_write(path, document))
    for version in (True, 1.0):  # equal to 1 in Python, not the integer 1 of the format
        document["schema_version"] = version
        with pytest.raises(ModelFileError, match=f"schema_version {version!r} is not supported"):
            gpucal.load(_write(path, document))


def test_hostile_class_name_is_not_imported(data, tmp_path):
    document, path = _document(data, tmp_path)
    document["class"] = "os.system"
    with pytest.raises(ModelFileError, match=r"unknown calibrator class .os\.system."):
        gpucal.load(_write(path, document))


def test_bad_parameters(data, tmp_path):
    document, path = _document(data, tmp_path)
    document["params"]["no_such_param"] = 1
    with pytest.raises(ModelFileError, match="bad parameters"):
        gpucal.load(_write(path, document))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.pop(next(iter(s))), "state has keys"),
        (lambda s: s.__setitem__(next(k for k in s if isinstance(s[k], list)), "abc"), "expected a list"),
        (
            lambda s: s.__setitem__(next(k for k in s if isinstance(s[k], list)), [[1, 2], [3]]),
            "rectangular|1-D",
        ),
        (lambda s: s.__setitem__(next(k for k in s if isinstance(s[k], list)), ["a", "b"]), "numbers"),
    ],
)
def test_corrupt_state(data, tmp_path, change, match):
    document, path = _document(data, tmp_path)
    change(document["state"])
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(_write(path, document))


@pytest.mark.parametrize(
    ("name", "params", "key", "match"),
    [
        ("platt_hinge", {}, "coef_", r"coef_: an entry is larger than 1e\+100"),
        ("spline", {}, "coef_", r"coef_: an entry is larger than 1e\+100"),
        ("isotonic", {"score_kind": "logit"}, "X_thresholds_", "X_thresholds_: the knots span more"),
        ("sir", {"score_kind": "logit"}, "X_knots_", "X_knots_: the knots span more"),
    ],
)
def test_huge_finite_numbers_that_would_predict_nan_are_refused(name, params, key, match, data, tmp_path):
    """Coefficients of +-1e308 summed (inf - inf), or knots 2e308 apart interpolated (0 * inf), loaded
    and predicted NaN: coefficients are bounded on load, knots (scores a fit may see) must span a
    finite range."""
    score, y, w = data
    scores = np.log(score / (1 - score)) if params else score
    model = gpucal.make_calibrator(name, **params).fit(scores, y, sample_weight=w)
    path = tmp_path / "model.json"
    model.save(path)
    document = json.loads(path.read_text())
    values = document["state"][key]
    document["state"][key] = [-1e308] + [1e308 * (i / len(values)) for i in range(1, len(values))]
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(_write(path, document))


def test_models_fitted_on_huge_margins_load(data, tmp_path):
    """Margins of 1e150 are scores a fit may see: their knots load (the span, not the size, is bounded)."""
    score, y, _ = data
    margins = np.log(score / (1 - score)) * 1e148
    for name in ("isotonic", "sir"):
        model = gpucal.make_calibrator(name, score_kind="logit").fit(margins, y)
        model.save(tmp_path / "model.json")
        loaded = gpucal.load(tmp_path / "model.json")
        np.testing.assert_array_equal(loaded.predict(margins), model.predict(margins))


@pytest.mark.parametrize(
    ("name", "scale", "match"),
    [
        ("spline", {"knots_": 1e120}, r"knots_: an entry is larger than 1e\+100"),
        ("platt_hinge", {"knots_": 1e250, "coef_": 1e90}, r"coef_ times the knots' span passes 1e\+300"),
    ],
)
def test_knots_whose_terms_overflow_are_refused(name, scale, match, data, tmp_path):
    """Within a finite span, a spline's cubed knots or a hinge coefficient times the knots' span can
    still overflow: such files loaded and predicted NaN."""
    document, path = _document(data, tmp_path, name=name)
    for key, factor in scale.items():
        document["state"][key] = [v * factor for v in document["state"][key]]
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(_write(path, document))


def test_histogram_bins_must_fit_n_bins(data, tmp_path):
    document, path = _document(data, tmp_path, name="histogram")
    document["params"]["n_bins"] = 3
    with pytest.raises(ModelFileError, match="fitted bins do not fit n_bins=3"):
        gpucal.load(_write(path, document))


def test_non_finite_constant_rejected(data, tmp_path):
    document, path = _document(data, tmp_path)
    text = json.dumps(document)
    first_list_number = text.index("[") + 1
    path.write_text(text[:first_list_number] + "NaN, " + text[first_list_number:])
    with pytest.raises(ModelFileError, match="non-finite number NaN"):
        gpucal.load(path)


def test_deep_nesting_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFileError, match="cannot be parsed"):
        gpucal.load(path)


def test_deep_nesting_is_a_clear_error_whatever_the_recursion_limit(tmp_path):
    """Under a raised recursion limit the parser recursed once per level in C: a segmentation fault."""
    import subprocess
    import sys

    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    code = (
        "import sys, gpucal\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "try:\n"
        f"    gpucal.load({str(path)!r})\n"
        "except gpucal.ModelFileError as error:\n"
        "    print(error, sys.getrecursionlimit())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-500:]
    assert run.stdout.strip().endswith("cannot be parsed: RecursionError 1000000")


def test_a_file_too_large_for_memory_is_a_clear_error(data, tmp_path, monkeypatch):
    """Parsing takes about 12 times a file's size: a large one ended in a bare MemoryError."""
    document, path = _document(data, tmp_path)
    _write(path, document)

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("gpucal.persistence.json.loads", exhausted)
    with pytest.raises(ModelFileError, match="cannot be parsed: MemoryError"):
        gpucal.load(path)


def test_unfitted_model_cannot_be_saved(tmp_path):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        gpucal.IsotonicCalibrator().save(tmp_path / "m.json")


# --------------------------------------------------------------------------------------------------
# Issue 18: files that must not hurt the process


def _first_array(document):
    return next(k for k, v in document["state"].items() if isinstance(v, list))


@pytest.mark.parametrize(
    ("literal", "match"),
    [
        ("null", "finite numbers"),
        ("true", "finite numbers"),
        ("1e999", "overflows to infinity"),
        ("-1e999", "overflows to infinity"),
        ("9" * 5000, "5000 digits"),
    ],
)
def test_null_overflow_and_huge_literals_in_an_array(data, tmp_path, literal, match):
    """null became NaN and 1e999 inf inside arrays (28 files predicted NaN); a 5000-digit int escaped as
    ValueError."""
    document, path = _document(data, tmp_path)
    name = _first_array(document)
    document["state"][name][1] = "HOLE"
    path.write_text(json.dumps(document).replace('"HOLE"', literal))
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(path)


def test_overflowing_literal_in_an_integer_array(data, tmp_path):
    """A 1e999 in an int array escaped as OverflowError; an int beyond int64 too."""
    from gpucal.persistence import _decode_state_value

    document, path = _document(data, tmp_path)
    document["state"][_first_array(document)] = [0, "HOLE"]
    path.write_text(json.dumps(document).replace('"HOLE"', "1e999"))
    with pytest.raises(ModelFileError, match="overflows to infinity"):
        gpucal.load(path)
    for value, match in [([0, 2**64], "outside int64"), ([0, None], "integers"), ([0, 1.5], "integers")]:
        with pytest.raises(ModelFileError, match=match):
            _decode_state_value("X", "codes_", "int_array", value)


def test_nesting_250_deep_is_refused(data, tmp_path):
    """JSON nested 250 deep parsed, then escaped as RecursionError."""
    document, path = _document(data, tmp_path)
    path.write_text(
        json.dumps(document).replace('"params": {', '"params": {"deep": ' + "[" * 250 + "]" * 250 + ", ", 1)
    )
    with pytest.raises(ModelFileError, match="nest more than"):
        gpucal.load(path)


def test_only_regular_files_are_read(tmp_path):
    """/dev/zero reports size 0 and was read until memory ran out; a FIFO blocked forever."""
    import os

    with pytest.raises(ModelFileError, match="not a regular file"):
        gpucal.load("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ModelFileError, match="not a regular file"):
        gpucal.load(fifo)
    with pytest.raises(ModelFileError, match="not a regular file"):
        gpucal.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        gpucal.load(tmp_path / "missing.json")


def test_oversized_file_is_refused(data, tmp_path, monkeypatch):
    from gpucal import persistence

    _, path = _document(data, tmp_path)
    monkeypatch.setattr(persistence, "MAX_FILE_BYTES", 100)
    with pytest.raises(ModelFileError, match="larger than 100 bytes"):
        gpucal.load(path)


def _tree_model(kind, tmp_path):
    import pandas as pd

    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"score": rng.uniform(0.05, 0.95, 600), "f": rng.normal(size=600)})
    y = (rng.random(600) < frame["score"]).astype(int)
    if kind == "mbct":
        model = gpucal.MBCT(max_trees=2, max_depth=2, n_bins=4, min_node_size=40.0, validation_fraction=0.0)
    else:
        model = gpucal.HeterogeneousCalibrator(feature_cols=["f"], max_depth=2, min_leaf_size=50.0)
    model.fit(frame, y).save(tmp_path / "m.json")
    return json.loads((tmp_path / "m.json").read_text()), tmp_path / "m.json"


@pytest.mark.parametrize("kind", ["mbct", "hc"])
@pytest.mark.parametrize(
    ("history", "match"),
    [
        (lambda h: h * 100_000, "at most"),  # a 90 MB list took 2.1 GB
        (lambda h: [{"tree": 0, "nodes": [[0] * 10] * 10}], "must be int"),
        (lambda h: [{"tree": 0, "payload": "x"}], "keys among"),
        (lambda h: [{"tree": True}], "must be int"),
        (lambda h: "not a list", "list of at most"),
    ],
)
def test_history_is_bounded_and_typed(kind, history, match, tmp_path):
    """Issue 18: MBCT's (and HC's) history_ was any JSON of any length."""
    document, path = _tree_model(kind, tmp_path)
    document["state"]["history_"] = history(document["state"]["history_"])
    with pytest.raises(ModelFileError, match=match):
        gpucal.load(_write(path, document))


def _number_arrays(state):
    """Names of the state's lists of numbers (1-D or 2-D)."""
    for name, value in state.items():
        flat = value[0] if isinstance(value, list) and value and isinstance(value[0], list) else value
        if isinstance(flat, list) and flat and all(type(v) in (int, float) for v in flat):
            yield name


def _with_null(state, name):
    value = json.loads(json.dumps(state[name]))
    if isinstance(value[0], list):
        value[0][0] = None
    else:
        value[0] = None
    return {**state, name: value}


@pytest.mark.parametrize("name", ["isotonic", "sir", "histogram", "scaling_binning", "dirichlet", "mbct"])
def test_null_in_any_number_array_is_refused(name, data, tmp_path):
    """Issue 18: null became NaN in isotonic, SIR, histogram, scaling-binning, Dirichlet, MBCT init_ ..."""
    if name == "dirichlet":
        rng = np.random.default_rng(0)
        model = gpucal.DirichletCalibrator().fit(rng.dirichlet([1.0, 2.0, 3.0], 300), rng.integers(0, 3, 300))
        model.save(tmp_path / "m.json")
        document = json.loads((tmp_path / "m.json").read_text())
    elif name == "mbct":
        document, _ = _tree_model("mbct", tmp_path)
    else:
        _fitted(name, data).save(tmp_path / "m.json")
        document = json.loads((tmp_path / "m.json").read_text())
    arrays = list(_number_arrays(document["state"]))
    assert arrays
    for field in arrays:
        broken = {**document, "state": _with_null(document["state"], field)}
        with pytest.raises(ModelFileError, match="finite numbers"):
            gpucal.load(_write(tmp_path / "bad.json", broken))


def test_from_dict_finds_a_class_whose_package_was_never_imported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model document names its class: from_dict loads it even where only persistence was imported."""
    import subprocess
    import sys

    path = tmp_path / "platt.json"
    gpucal.PlattCalibrator().fit(np.array([0.1, 0.4, 0.6, 0.9]), np.array([0, 0, 1, 1])).save(path)
    code = (
        "import sys\n"
        "from gpucal.persistence import from_dict, read_document\n"
        "assert 'gpucal.calibrators' not in sys.modules\n"
        f"print(type(from_dict(read_document({str(path)!r}))).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PlattCalibrator"


def test_parameters_changed_after_the_fit_are_refused_where_the_fitted_state_reads_them(tmp_path):
    """``set_params`` on a fitted model: HC chained a fitted forest's trees (predictions moved by up to
    0.495), CCL read Platt parameters as temperatures; a histogram given another ``n_bins`` saved a
    file ``load`` refused. Now predict names the parameter, and save refuses to write such a file."""
    from gpucal.datasets import make_ctr

    data = make_ctr(3_000, "mixed", seed=3)
    fields = ["region", "device"]
    X, y = data[["score", *fields]], data["label"].to_numpy(float)
    forest = gpucal.HeterogeneousCalibrator(feature_cols=fields, mode="forest", n_trees=3).fit(X, y)
    expected = forest.predict(X)
    forest.set_params(mode="boosted")
    with pytest.raises(ValueError, match="mode='boosted', but the model was fitted with mode='forest'"):
        forest.predict(X)
    forest.set_params(mode="forest", n_trees=10)  # read by the fit alone: predict as fitted
    np.testing.assert_array_equal(forest.predict(X), expected)
    with pytest.raises(ValueError, match=r"cannot be saved: the file would not load .*3 trees do not match"):
        forest.save(tmp_path / "forest.json")
    forest.set_params(mode="boosted", n_trees=3)  # a boosted chain of 3 trees loads: refused as predict does
    with pytest.raises(ValueError, match="mode='boosted', but the model was fitted with mode='forest'"):
        forest.save(tmp_path / "forest.json")
    mbct = gpucal.MBCT(feature_cols=fields, max_trees=2, validation_fraction=0.0).fit(X, y)
    clustered = gpucal.ClusteredCalibrator(embedding_model=mbct, n_clusters=3).fit(X, y)
    clustered.set_params(calibrator="temperature")
    with pytest.raises(ValueError, match="calibrator='temperature', but the model was fitted with"):
        clustered.predict(X)
    with pytest.raises(ValueError, match="score_bins=50, but the model was fitted with score_bins=100"):
        mbct.set_params(score_bins=50).predict(X)
    histogram = gpucal.HistogramCalibrator(n_bins=10).fit(X["score"], y).set_params(n_bins=11)
    with pytest.raises(ValueError, match="HistogramCalibrator cannot be saved"):
        histogram.save(tmp_path / "histogram.json")
    loaded = gpucal.load(_saved(gpucal.HistogramCalibrator(n_bins=10).fit(X["score"], y), tmp_path))
    loaded.predict(X["score"])  # a loaded model reads its own parameters as fitted


def _saved(model, tmp_path):
    path = tmp_path / "saved.json"
    model.save(path)
    return path


def test_save_writes_only_what_the_parser_reads(tmp_path):
    """A seed of 22 digits saved, then load refused the file ("an integer of 22 digits")."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"score": rng.uniform(0.05, 0.95, 600), "site": rng.integers(0, 3, 600)})
    y = (rng.uniform(size=600) < X["score"]).astype(float)
    model = gpucal.HeterogeneousCalibrator(seed=10**21).fit(X, y)
    with pytest.raises(ValueError, match=r"cannot be saved: the file would not load .*22 digits"):
        model.save(tmp_path / "m.json")


def test_a_file_loads_deep_in_the_stack_of_a_process_with_a_raised_limit(data, tmp_path):
    """The parse ran under an absolute limit of 4,000: called 5,000 frames deep, a valid file failed."""
    import sys

    document, path = _document(data, tmp_path)
    _write(path, document)

    def load_at(depth: int) -> object:
        return gpucal.load(path) if depth == 0 else load_at(depth - 1)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        assert load_at(5_000) is not None
        assert sys.getrecursionlimit() == 20_000
    finally:
        sys.setrecursionlimit(limit)


def test_parses_in_several_threads_run_one_at_a_time():
    """A parse deep in one thread lifted the bound of a shallow parse in another (the limit is the
    process's): a hostile file nesting 200,000 deep then ended the process with a segmentation fault."""
    import threading
    import time

    from gpucal import persistence

    entered, release, order = threading.Event(), threading.Event(), []

    def first() -> None:
        with persistence._bounded_recursion():
            entered.set()
            release.wait(5)
            order.append("first")

    def second() -> None:
        entered.wait(5)
        with persistence._bounded_recursion():
            order.append("second")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join()
    assert order == ["first", "second"]


def test_column_lists_given_as_a_pandas_index_save_as_lists(tmp_path):
    """feature_cols=df.columns.drop(...) is a pandas Index: saved as the list of its names (json
    refused the Index), and the loaded model predicts as the fitted one."""
    data = gpucal.datasets.make_ctr(3_000, seed=0).drop(columns=["p_true"])
    X = data.drop(columns="label")
    columns = X.columns.drop(["score", "site_id"])
    model = gpucal.make_calibrator("feature_platt", feature_cols=columns).fit(X, data["label"])
    model.save(tmp_path / "model.json")
    loaded = gpucal.load(tmp_path / "model.json")
    assert loaded.get_params()["feature_cols"] == list(columns)
    pd.testing.assert_series_equal(loaded.predict(X), model.predict(X))

"""Which columns a feature-aware fit reads by default: never the label, the weights or ``p_true``.

The oracle of each test is the same fit with the true features named explicitly: leaving ``feature_cols``
out on a frame that also holds the label (``fit(df, df["clicked"])``, the README's pattern) must give the
same model, and a frame without the label column must predict.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose
from scipy.special import expit, logit

import gpucal
from gpucal._frames import Column
from gpucal.encoding import features, resolve_feature_cols, trusting_feature_cols
from gpucal.rows import RowBlock, as_rows
from gpucal.rows.local import LocalRows

FEATURES = ["region", "device"]


def table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Scores, two integer fields with a per-value bias, the label ``clicked``, weights and ``p_true``."""
    rng = np.random.default_rng(seed)
    region, device = rng.integers(0, 6, n), rng.integers(0, 3, n)
    score = rng.beta(2.0, 5.0, n)
    p_true = expit(logit(score) + 0.4 * (region - 2.5) - 0.3 * device)
    clicked = (rng.random(n) < p_true).astype(np.int64)
    weight = rng.uniform(0.5, 2.0, n)
    frame = {"score": score, "region": region, "clicked": clicked, "device": device}
    return pd.DataFrame({**frame, "p_true": p_true, "w": weight})


# Small, fast settings per method; each reads FEATURES as categories.
METHODS: dict[str, dict[str, Any]] = {
    "feature_platt": {},
    "mbct": {"max_depth": 2, "max_trees": 2},
    "hc": {"max_depth": 2},
    "auto": {"candidates": ["platt", "feature_platt"], "n_folds": 2},
}


def _fit(method: str, X: pd.DataFrame, y: Any, **params: Any) -> Any:
    return gpucal.make_calibrator(method, categorical_cols=FEATURES, **METHODS[method], **params).fit(
        X, y, sample_weight=X["w"] if "w" in X else None
    )


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("label", ["series", "array", "renamed"])
def test_label_is_never_a_default_feature(method: str, label: str) -> None:
    df = table()
    y = {"series": df["clicked"], "array": df["clicked"].to_numpy(), "renamed": df["clicked"].rename("y")}[
        label
    ]
    default = _fit(method, df, y)
    explicit = _fit(method, df, df["clicked"], feature_cols=FEATURES)
    production = table(seed=1).drop(columns=["clicked", "p_true", "w"])  # no label where it is predicted
    assert_allclose(default.predict(production), explicit.predict(production), rtol=1e-12, atol=0)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("by", ["name", "values", "objects"])
def test_naming_the_label_as_a_feature_is_refused(method: str, by: str) -> None:
    df = table()
    if by == "values":
        df["clicked_copy"] = df["clicked"].astype(bool)  # the label again, as booleans
    if by == "objects":  # the label again, as Python ints in an object column (read by value)
        df = df.sort_values("clicked", ascending=False, kind="stable")  # categories in order [1, 0]
        df["clicked_copy"] = df["clicked"].astype(object)
    column = "clicked" if by == "name" else "clicked_copy"
    how = "has the name of y" if by == "name" else "holds the same values as y"
    with pytest.raises(ValueError, match=f"feature_cols: column '{column}' {how}.*it is the label"):
        _fit(method, df, df["clicked"], feature_cols=["region", column])


def test_weights_and_p_true_are_never_default_features() -> None:
    df = table()
    for weights in (df["w"], df["w"].to_numpy()):
        rows = as_rows(X=df, y=df["clicked"], sample_weight=weights)
        chosen = resolve_feature_cols(rows, df, df["clicked"], weights, score_col="score", feature_cols=None)
        assert chosen == FEATURES
    # without weights, "w" is an ordinary column; p_true (the data sets' oracle) never is a default
    rows = as_rows(X=df, y=df["clicked"])
    chosen = resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=None)
    assert chosen == [*FEATURES, "w"]
    # naming the weight column explicitly is allowed (it is no leak)
    rows = as_rows(X=df, y=df["clicked"], sample_weight=df["w"])
    explicit = resolve_feature_cols(
        rows, df, df["clicked"], df["w"], score_col="score", feature_cols=["region", "w"]
    )
    assert explicit == ["region", "w"]


@pytest.mark.parametrize("weighted", [False, True])
def test_a_column_like_the_label_on_its_first_rows_only_stays_a_feature(weighted: bool) -> None:
    """Columns are compared on a block's first ``HEAD_ROWS`` rows first, and on every row when they agree
    there: one that equals the label (or the weights) there and differs later is a feature; one that
    equals it everywhere is not."""
    df = table(n=3 * features.HEAD_ROWS)
    target = df["w"] if weighted else df["clicked"]
    df["copy"] = target.to_numpy(np.float64)
    df["late"] = target.to_numpy(np.float64)
    # The other class's value on the last row: the column no longer separates the classes either.
    last = len(df) - 1
    df.loc[last, "late"] = -1.0 if weighted else 1.0 - float(target.iloc[last])
    weights = df["w"] if weighted else None
    rows = as_rows(X=df, y=df["clicked"], sample_weight=weights)
    chosen = resolve_feature_cols(rows, df, df["clicked"], weights, score_col="score", feature_cols=None)
    assert chosen == [*FEATURES, *([] if weighted else ["w"]), "late"]
    if not weighted:
        with pytest.raises(ValueError, match="'copy' holds the same values as y"):
            resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=["copy"])


def test_auto_compares_its_columns_with_the_labels_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """AutoCalibrator compares X's columns with the labels on every row; its candidates' fits in the
    folds and the refit, on rows of that X, check their feature_cols by name only."""
    compared: list[int] = []
    compare = features._column_checks
    monkeypatch.setattr(features, "_column_checks", lambda *a: compared.append(1) or compare(*a))
    df = table()
    model = _fit("auto", df, df["clicked"])
    assert len(compared) == 1
    assert model.cv_results_["status"].tolist() == ["ok", "ok"]


def test_trusted_feature_cols_are_checked_by_name_only() -> None:
    df = table()
    df["clicked_copy"] = df["clicked"]
    rows = as_rows(X=df, y=df["clicked"])
    explicit = ["region", "clicked_copy"]
    with pytest.raises(ValueError, match="'clicked_copy' holds the same values as y"):
        resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=explicit)
    with trusting_feature_cols():
        assert (
            resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=explicit)
            == explicit
        )
        with pytest.raises(KeyError, match="'nowhere'"):
            resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=["nowhere"])
        # The default features are still found against the labels.
        default = resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=None)
        assert default == [*FEATURES, "w"]
    with pytest.raises(ValueError, match="holds the same values as y"):  # the context is left behind
        resolve_feature_cols(rows, df, df["clicked"], score_col="score", feature_cols=explicit)


def test_make_ctr_defaults_leave_out_label_and_p_true() -> None:
    df = gpucal.datasets.make_ctr(2000, seed=0)
    rows = as_rows(X=df, y=df["label"])
    chosen = resolve_feature_cols(rows, df, df["label"], score_col="score", feature_cols=None)
    assert chosen == ["site_id", "ad_category", "region", "hour", "user_segment", "device"]


def test_neural_default_features_leave_out_the_label() -> None:
    pytest.importorskip("torch")
    df = table(n=1500)
    params = {"categorical_cols": FEATURES, "max_epochs": 2, "seed": 0}
    default = gpucal.make_calibrator("neucalib", **params).fit(df.drop(columns=["w"]), df["clicked"])
    assert list(default.encoder_["columns"][i]["name"] for i in range(2)) == FEATURES
    with pytest.raises(ValueError, match="'clicked' has the name of y"):
        gpucal.make_calibrator("neucalib", feature_cols=["clicked"], **params).fit(df, df["clicked"])


def test_ccl_default_columns_leave_out_the_label() -> None:
    lightgbm = pytest.importorskip("lightgbm")
    df = table(n=2000)
    X = df[["score", *FEATURES]].to_numpy()  # a booster trained on an array names no feature
    booster = lightgbm.train(
        {"objective": "binary", "num_leaves": 4, "verbose": -1}, lightgbm.Dataset(X[:, 1:], df["clicked"]), 3
    )
    params = {"embedding_model": booster, "n_clusters": 2, "seed": 0}
    default = gpucal.make_calibrator("ccl", **params).fit(df.drop(columns=["w", "p_true"]), df["clicked"])
    explicit = gpucal.make_calibrator("ccl", feature_cols=FEATURES, **params).fit(df, df["clicked"])
    production = table(seed=1).drop(columns=["clicked", "p_true", "w"])
    assert_allclose(default.predict(production), explicit.predict(production), rtol=1e-12, atol=0)


def _recoded_table(n: int = 3000) -> tuple[pd.DataFrame, np.ndarray]:
    """The label as text beside y as numbers (scikit-learn's LabelEncoder idiom), and 1 - y."""
    df = table(n=n).drop(columns=["p_true", "w"])
    y = df.pop("clicked").to_numpy()
    return df.assign(outcome=np.where(y == 1, "yes", "no"), flipped=1 - y), y


@pytest.mark.parametrize("method", list(METHODS))
def test_the_label_recoded_is_left_out_of_the_default_features_with_a_warning(method: str) -> None:
    df, y = _recoded_table()
    with pytest.warns(UserWarning, match=r"'outcome', 'flipped' separate the classes of y.*left out"):
        default = gpucal.make_calibrator(method, categorical_cols=FEATURES, **METHODS[method]).fit(df, y)
    explicit = gpucal.make_calibrator(
        method, categorical_cols=FEATURES, feature_cols=FEATURES, **METHODS[method]
    )
    explicit.fit(df, y)
    production = table(seed=1)[["score", *FEATURES]]  # no label where it is predicted
    assert_allclose(default.predict(production), explicit.predict(production), rtol=1e-12, atol=0)


def test_the_label_recoded_in_feature_cols_is_kept_with_a_warning() -> None:
    df, y = _recoded_table()
    rows = as_rows(X=df, y=y)
    with pytest.warns(UserWarning, match=r"'outcome' separate the classes of y.*kept, as feature_cols names"):
        chosen = resolve_feature_cols(rows, df, y, score_col="score", feature_cols=["region", "outcome"])
    assert chosen == ["region", "outcome"]


def test_columns_that_separate_the_classes_by_chance_stay_features(recwarn: pytest.WarningsRecorder) -> None:
    """An id (one row per value), a column of more than MAX_RECODED_VALUES values, and a separating
    column on fewer than MIN_ROWS_PER_VALUE rows per value are features; a three-valued outcome that
    separates the classes is not."""
    df, y = _recoded_table(n=200)
    df = df.drop(columns=["outcome", "flipped"])
    ids = np.arange(200)
    # 17 values, each seen with one class only (9 among the negatives, 8 among the positives)
    spread = np.where(y == 1, 9 + ids % 8, ids % 9)
    assert features.MAX_RECODED_VALUES < 17
    outcome = np.where(y == 1, "approved", np.where(np.arange(200) % 2 == 0, "declined", "withdrawn"))
    frame = df.assign(id=ids, spread=spread, outcome=outcome)
    chosen = resolve_feature_cols(as_rows(X=frame, y=y), frame, y, score_col="score", feature_cols=None)
    assert chosen == [*[c for c in df.columns if c != "score"], "id", "spread"]
    assert [str(w.message)[:40] for w in recwarn] == ["X column(s) 'outcome' separate the class"]
    tiny = frame.iloc[:12].assign(flag=np.where(y[:12] == 1, "a", "b"))
    assert "flag" in resolve_feature_cols(
        as_rows(X=tiny, y=y[:12]), tiny, y[:12], score_col="score", feature_cols=None
    )


def test_the_recoded_label_check_adds_its_counts_over_blocks() -> None:
    """Over several blocks (partitions), a value seen with one class in one block and the other class
    in another separates nothing; a recoded label separates in every block and over all of them."""
    df, y = _recoded_table()
    swapped = df.assign(
        outcome=np.where(np.arange(len(df)) < 1500, df["outcome"], np.where(y == 1, "no", "yes"))
    )
    halves = [slice(0, 1500), slice(1500, None)]
    for frame, leaking in ((df, True), (swapped, False)):
        blocks = tuple(
            RowBlock({"X": frame.iloc[part].reset_index(drop=True), "y": y[part], "sample_weight": None})
            for part in halves
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            chosen = resolve_feature_cols(LocalRows(blocks), frame, y, score_col="score", feature_cols=None)
        assert ("outcome" not in chosen) == leaking
        assert any("'outcome'" in str(w.message) for w in caught) == leaking


def test_the_recoded_label_warning_points_at_the_callers_fit() -> None:
    df, y = _recoded_table()
    for method in ("feature_platt", "auto"):
        model = gpucal.make_calibrator(method, categorical_cols=FEATURES, **METHODS[method])
        with pytest.warns(UserWarning, match="separate the classes of y") as seen:
            model.fit(df, y)
        assert {w.filename for w in seen if "separate the classes" in str(w.message)} == {__file__}


def test_what_separates_the_classes_without_being_the_label_recoded_stays(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """Not the label recoded: class-balancing weights kept in X (dropped as the weights, without a
    word), a strong feature with a rare level (5 rows), a feature beside labels of three classes (a
    value of class 0 and 2 rows was read as one class by 1 - y), and a column numeric in one block and
    text in another whose value 1 holds both classes."""
    df, y = _recoded_table()
    df = df.drop(columns=["outcome", "flipped"])
    weighted = df.assign(w=np.where(y == 1, 10.0, 1.0))
    rows = as_rows(X=weighted, y=y, sample_weight=weighted["w"])
    assert "w" not in resolve_feature_cols(
        rows, weighted, y, weighted["w"], score_col="score", feature_cols=None
    )
    tier = np.where(np.arange(len(y)) < 5, "high", "low")
    strong = df.assign(tier=tier)
    labels = np.where(tier == "high", 1, 0)
    assert "tier" in resolve_feature_cols(
        as_rows(X=strong, y=labels), strong, labels, score_col="score", feature_cols=None
    )
    three = np.r_[np.zeros(40), np.zeros(30), np.ones(10), np.full(30, 2.0)]
    segments = pd.DataFrame({"p0": np.full(110, 0.3), "seg": np.r_[np.zeros(40), np.ones(70)]})
    chosen = resolve_feature_cols(
        as_rows(X=segments, y=three), segments, three, score_col=["p0"], feature_cols=None
    )
    assert chosen == ["seg"]
    code = pd.Series([1, 2] * 20 + [1, 2, "unknown"] * 20, dtype=object)
    labels = np.r_[np.zeros(40), np.ones(60)]
    mixed = pd.DataFrame({"score": np.full(100, 0.5), "code": code})
    blocks = tuple(
        RowBlock({"X": mixed.iloc[part].reset_index(drop=True), "y": labels[part], "sample_weight": None})
        for part in (slice(0, 40), slice(40, None))
    )
    assert resolve_feature_cols(LocalRows(blocks), mixed, labels, score_col="score", feature_cols=None) == [
        "code"
    ]
    assert not [w for w in recwarn if "separate the classes" in str(w.message)]


def test_the_label_recoded_is_found_in_rows_sorted_by_the_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows sorted by the label separate the classes at the head of every ordinary column: the check
    screens evenly strided rows, so only the label recoded costs a pass over every row."""
    df, y = _recoded_table(n=20_000)
    order = np.argsort(y, kind="stable")
    df, y = df.iloc[order].reset_index(drop=True), y[order]
    steps: list[int | None] = []
    count = features._bucket_class_counts
    monkeypatch.setattr(
        features, "_bucket_class_counts", lambda c, t, r: steps.append(r.step) or count(c, t, r)
    )
    with pytest.warns(UserWarning, match=r"'outcome', 'flipped' separate the classes"):
        chosen = resolve_feature_cols(as_rows(X=df, y=y), df, y, score_col="score", feature_cols=None)
    assert chosen == FEATURES
    assert steps.count(None) == 2  # every row of outcome and flipped only


def test_labels_of_one_class_flag_no_column(recwarn: pytest.WarningsRecorder) -> None:
    """With one class every value is seen with it: no column is the label recoded, and the fit's own
    error (no positive labels) is the one the user reads, not 'no feature columns'."""
    df = table().drop(columns=["p_true", "w", "clicked"])
    y = np.zeros(len(df))
    assert resolve_feature_cols(as_rows(X=df, y=y), df, y, score_col="score", feature_cols=None) == FEATURES
    assert not [w for w in recwarn if "separate the classes" in str(w.message)]
    with pytest.raises(ValueError, match="no positive labels"):
        gpucal.make_calibrator("feature_platt").fit(df, y)


def test_common_spellings_of_a_label_fall_in_distinct_buckets() -> None:
    """Under the text hash's key the spellings a label is recoded with, and the numbers beside them,
    never share a bucket (under pandas' own key "no" shared 1's, so {1, "no"} went unseen)."""
    texts = ["no", "yes", "0", "1", "false", "true", "False", "True", "N", "Y", "n", "y", "neg", "pos"]
    texts += ["negative", "positive", "bad", "good", "default", "paid", "churn", "stay", "A", "B", "a", "b"]
    categories = np.array([*texts, -1, 0, 1, 2], dtype=object)
    column = Column(np.arange(categories.shape[0]), categories, "object")
    buckets = features._value_buckets(column, slice(None))
    assert len(set(buckets.tolist())) == categories.shape[0]
    numbers = features._number_buckets(np.array([-1.0, 0.0, 1.0, 2.0]))
    assert buckets[-4:].tolist() == numbers.tolist()  # numbers among categories read as numbers

"""Every gpucal estimator against scikit-learn's own estimator checks, and its parameter tables (issue 18).

``parametrize_with_checks`` runs scikit-learn's checks on every estimator. Each is built so the checks'
data can reach it: ``score_col=0`` reads a 2-D array's first column as the score (the other columns
are the features of a feature-aware calibrator and are ignored by the others), and
``score_kind="logit"`` where the calibrator has it, since the checks draw ``X`` from all the reals.
Every check that cannot apply to a calibrator is listed in :func:`expected_failed_checks` with its
reason (an expected failure: strict, so a check that starts to pass must leave the list).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from unittest import SkipTest

import numpy as np
import pytest
from sklearn.frozen import FrozenEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpucal._params import Interval
from gpucal.auto.model import AutoCalibrator
from gpucal.calibrators import (
    BBQCalibrator,
    BetaCalibrator,
    CenteredIsotonicCalibrator,
    DirichletCalibrator,
    DownsamplingCorrection,
    ENIRCalibrator,
    FeatureAwarePlattCalibrator,
    HingePlattCalibrator,
    HistogramCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    ScalingBinningCalibrator,
    SIRCalibrator,
    SplineCalibrator,
    TemperatureCalibrator,
    VennAbersCalibrator,
)
from gpucal.calibrators.base import Calibrator
from gpucal.ccl.model import ClusteredCalibrator
from gpucal.factory import CALIBRATORS
from gpucal.hc.model import HeterogeneousCalibrator
from gpucal.mbct.model import MBCT
from gpucal.neural import FieldAwareCalibrator, PiecewiseLogitCalibrator, torch_available

#: Every estimator class: the registry's calibrators and the feature-aware ones it does not name.
ESTIMATOR_CLASSES: list[type[Calibrator]] = sorted(
    {*CALIBRATORS.values(), MBCT, HeterogeneousCalibrator, ClusteredCalibrator},
    key=lambda cls: cls.__name__,
)


# --------------------------------------------------------------------------------------------------
# Parameters: finite unless stated


def _float_intervals(cls: type[Calibrator]) -> list[tuple[str, Interval]]:
    found = []
    for name, constraint in cls._parameter_constraints.items():
        parts = getattr(constraint, "constraints", (constraint,))
        found += [(name, c) for c in parts if isinstance(c, Interval) and c.kind is float]
    return found


def test_real_intervals_refuse_inf_unless_they_say_so() -> None:
    """Issue 18: ``Interval(float, 0, None)`` let ``inf`` through (all-NaN predictions, torch IndexError)."""
    checked = 0
    for cls in ESTIMATOR_CLASSES:
        for name, interval in _float_intervals(cls):
            assert interval.accepts(math.inf) == (interval.high == math.inf), (cls.__name__, name)
            assert not interval.accepts(-math.inf), (cls.__name__, name)
            checked += 1
    assert checked >= 20


INF_CASES: list[tuple[Any, str]] = [
    (lambda: MBCT(leaf_penalty=math.inf), "leaf_penalty"),
    (lambda: HeterogeneousCalibrator(leaf_penalty=math.inf), "leaf_penalty"),
    (lambda: ClusteredCalibrator(penalty=math.inf), "penalty"),
    (lambda: FieldAwareCalibrator(learning_rate=math.inf), "learning_rate"),
    (lambda: FieldAwareCalibrator(monotone_penalty=math.inf), "monotone_penalty"),
    (lambda: PiecewiseLogitCalibrator(monotone_penalty=math.inf), "monotone_penalty"),
]


@pytest.mark.parametrize(("make", "name"), INF_CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(INF_CASES)])
def test_inf_parameters_are_refused_with_the_template(make: Any, name: str) -> None:
    estimator = make()
    if isinstance(estimator, FieldAwareCalibrator | PiecewiseLogitCalibrator) and not torch_available():
        pytest.skip("needs the neural extra (PyTorch)")
    match = (
        rf"The '{name}' parameter of {type(estimator).__name__} must be a float in [\[(]0, inf\)\. Got inf"
    )
    rng = np.random.default_rng(0)
    X = {"score": rng.uniform(0.1, 0.9, 40), "site": rng.integers(0, 2, 40)}
    with pytest.raises(ValueError, match=match):
        estimator.fit(X, rng.integers(0, 2, 40))


#: Parameters checked where they are read (columns, lists, estimators), not by a constraint.
UNCONSTRAINED = {
    "score_col",
    "feature_cols",
    "categorical_cols",
    "interactions",
    "candidates",
    "embedding_model",
    "quantiles",
    "knots",
    "reg_params",
}


def test_every_other_parameter_is_checked_when_fit_starts() -> None:
    """Nine score maps had no constraint for ``output_type``: a typo fitted, then failed at predict
    with a message that named no class."""
    for cls in ESTIMATOR_CLASSES:
        unchecked = set(cls._get_param_names()) - set(cls._parameter_constraints) - UNCONSTRAINED
        assert not unchecked, f"{cls.__name__}: {sorted(unchecked)}"
        if "output_type" in cls._get_param_names():
            kwargs = {
                ClusteredCalibrator: {"embedding_model": _embedding_model()},
                DownsamplingCorrection: {"rate": 0.1},
            }.get(cls, {})
            with pytest.raises(ValueError, match=f"'output_type' parameter of {cls.__name__}"):
                cls(output_type="pands", **kwargs)._validate_params()


# --------------------------------------------------------------------------------------------------
# scikit-learn's estimator checks


def _embedding_model() -> FrozenEstimator:
    """A fitted MBCT on (score, feature) columns 0 and 1, frozen so that ``clone`` keeps it fitted."""
    rng = np.random.default_rng(0)
    n = 2_000
    X = rng.uniform(size=(n, 2))  # the checks' features are mostly in [0, 1] too: they reach several leaves
    y = (rng.uniform(size=n) < np.clip(X[:, 0] * np.where(X[:, 1] < 0.5, 0.5, 1.5), 0, 1)).astype(float)
    trees = MBCT(
        score_col=0,
        feature_cols=[1],
        n_bins=4,
        max_trees=1,
        max_depth=1,
        min_node_size=50.0,
        min_child_size=0.0,
        leaf_penalty=0.0,
        validation_fraction=0.0,
    )
    return FrozenEstimator(trees.fit(X, y))


#: Calibrators of one score column that take margins: the checks' reals are valid scores.
LOGIT_SCORE = [
    PlattCalibrator(score_col=0, score_kind="logit"),
    HingePlattCalibrator(score_col=0, score_kind="logit"),
    TemperatureCalibrator(score_col=0, score_kind="logit"),
    HistogramCalibrator(score_col=0, score_kind="logit"),
    IsotonicCalibrator(score_col=0, score_kind="logit"),
    ScalingBinningCalibrator(score_col=0, score_kind="logit"),
    SIRCalibrator(score_col=0, score_kind="logit"),
    VennAbersCalibrator(score_col=0, score_kind="logit"),
    CenteredIsotonicCalibrator(score_col=0, score_kind="logit"),
    BBQCalibrator(score_col=0, score_kind="logit"),
    ENIRCalibrator(score_col=0, score_kind="logit"),
    # One penalty: nothing is chosen on held-out rows, so a weight of 2 and a repeated row agree.
    SplineCalibrator(score_col=0, score_kind="logit", n_knots=4, reg_params=[0.1]),
    DownsamplingCorrection(score_col=0, score_kind="logit", rate=0.5),
    AutoCalibrator(candidates=["platt", "isotonic"], n_folds=2, score_col=0, score_kind="logit"),
]
#: Feature-aware calibrators that take margins: column 0 is the score, the others are features.
LOGIT_FEATURES: list[Calibrator] = [FeatureAwarePlattCalibrator(score_col=0, score_kind="logit")]
#: Calibrators whose score must be a probability (or a probability matrix): no ``score_kind``.
PROBABILITY = [
    BetaCalibrator(score_col=0),
    DirichletCalibrator(),
    # validation_fraction=0: a held-out split draws rows, so a weight of 2 and a repeated row differ.
    MBCT(score_col=0, max_trees=2, validation_fraction=0.0),
    HeterogeneousCalibrator(score_col=0, max_depth=1),
    ClusteredCalibrator(score_col=0, n_clusters=2, embedding_model=_embedding_model()),
]
if torch_available():
    LOGIT_SCORE.append(PiecewiseLogitCalibrator(score_col=0, score_kind="logit"))
    LOGIT_FEATURES.append(FieldAwareCalibrator(score_col=0, score_kind="logit", max_epochs=2))
CHECKED = [*LOGIT_SCORE, *LOGIT_FEATURES, *PROBABILITY]

# Why a check cannot apply to a calibrator.
COLUMNS = (
    "no n_features_in_: a calibrator reads its score (and features) by column name or position, never a "
    "fixed column count, and ignores the other columns by design"
)
LABELS = "the check's binary labels are {1, 2}; a calibrator's labels are 0 and 1 (soft labels in [0, 1])"
COMPLEX = (
    "a complex score is refused with gpucal's own error (TypeError naming the dtype), not sklearn's wording"
)
ONE_D = "a 1-D array is the score itself (the design card's API), so fitting and predicting on one succeed"
NEEDS_FEATURE = "a feature-aware calibrator needs a feature besides the score column; a 1-column X has none"
NO_COLUMNS = (
    "a 1-D X has no feature columns: refused in gpucal's words (feature_cols), not 'Reshape your data'"
)
PROBABILITY_SCORE = (
    "the score must be a probability in [0, 1] (rows summing to 1 for a matrix) and this calibrator has "
    "no score_kind='logit'; the check draws X from all the reals, and scikit-learn has no tag for it"
)
SGD_WEIGHTS = (
    "mini-batch training: a row of weight 2 and two copies of the row land in different batches, so the "
    "fits agree only in expectation"
)
AUTO_FOLDS = (
    "folds are dealt by row position, so a repeated row and its weighted original fall in different folds "
    "and the candidates' held-out scores differ (equal when groups= marks the repeats: tests/test_auto.py)"
)
AUTO_ONE_ROW = (
    "one row leaves a cross-fitting fold empty: every candidate fails on it and AutoCalibrator says so in "
    "its words, not with scikit-learn's 'n_samples=1'"
)
FROZEN_NUMERIC = (
    "the frozen embedding model was fitted on a numeric column 1; the check's object column is read by "
    "value, which that model's encoder refuses by name"
)
SPLIT_WEIGHTS = (
    "the rows are split at random between the tree and the calibration halves, so a row of weight 2 and "
    "two copies of the row can land differently"
)

#: Checks that the checks' labels {1, 2} break for every calibrator that gets past its score.
LABEL_CHECKS = (
    "check_estimators_dtypes",
    "check_sample_weights_pandas_series",
    "check_sample_weights_not_an_array",
    "check_sample_weights_shape",
    "check_sample_weights_not_overwritten",
)


def expected_failed_checks(estimator: Calibrator) -> dict[str, str]:
    """The checks that cannot apply to ``estimator``, each with its reason (see the module docstring)."""
    failed = {
        "check_n_features_in": COLUMNS,
        "check_n_features_in_after_fitting": COLUMNS,
        "check_complex_data": COMPLEX,
    }
    if any(estimator is e for e in PROBABILITY):
        failed |= dict.fromkeys(PROBABILITY_CHECKS, PROBABILITY_SCORE)
    else:
        failed |= dict.fromkeys(LABEL_CHECKS, LABELS)
    if any(estimator is e for e in LOGIT_FEATURES):
        failed |= {"check_fit2d_1feature": NEEDS_FEATURE, "check_fit2d_predict1d": NO_COLUMNS}
    elif any(estimator is e for e in LOGIT_SCORE):
        failed |= {"check_fit2d_1feature": LABELS, "check_fit1d": ONE_D, "check_fit2d_predict1d": ONE_D}
    return failed | EXTRA.get(type(estimator).__name__, {})


#: Checks whose data never reach a probability-only calibrator (their X is not a probability).
PROBABILITY_CHECKS = (
    *LABEL_CHECKS,
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self",
    "check_readonly_memmap_input",
    "check_positive_only_tag_during_fit",
    "check_all_zero_sample_weights_error",
    "check_pipeline_consistency",
    "check_estimators_pickle",
    "check_f_contiguous_array_estimator",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_fit2d_1sample",
    "check_fit2d_1feature",
    "check_dict_unchanged",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
    "check_fit2d_predict1d",
)
#: Per class, further checks that cannot apply.
EXTRA: dict[str, dict[str, str]] = {
    "DirichletCalibrator": {
        name: PROBABILITY_SCORE
        for name in (
            "check_dtype_object",
            "check_fit_score_takes_y",
            "check_sample_weights_list",
            "check_sample_weight_equivalence_on_dense_data",
            "check_estimators_empty_data_messages",
            "check_estimators_nan_inf",
            "check_estimator_sparse_tag",
            "check_estimator_sparse_array",
            "check_estimator_sparse_matrix",
        )
    },
    "HeterogeneousCalibrator": {"check_sample_weight_equivalence_on_dense_data": SPLIT_WEIGHTS},
    "ClusteredCalibrator": {"check_dtype_object": FROZEN_NUMERIC},
    "FieldAwareCalibrator": {"check_sample_weight_equivalence_on_dense_data": SGD_WEIGHTS},
    "AutoCalibrator": {
        "check_sample_weight_equivalence_on_dense_data": AUTO_FOLDS,
        "check_fit2d_1sample": AUTO_ONE_ROW,
    },
}


# The checks' data (one sample, separable rows) leave some Newton fits unconverged: a ConvergenceWarning is
# no broken contract, though this suite turns warnings into errors.
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks(CHECKED, expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(
    estimator: Calibrator, check: Callable[[Calibrator], None], request: pytest.FixtureRequest
) -> None:
    """Issue 18: the checks passed 13 of 48 on every estimator; each failure left has its reason.

    A check listed in :func:`expected_failed_checks` carries scikit-learn's strict ``xfail`` mark: it
    must fail (it fails the test once it passes). Its failure is reported through ``pytest.xfail``
    with the error's type and message, outside the ``except`` block: pytest then formats no traceback
    of the check's frames, which it shows only for failed tests and builds by parsing the source file
    of every frame (scikit-learn's estimator_checks.py among them) anew for each of the 300-odd
    expected failures.
    """
    expected = request.node.get_closest_marker("xfail")
    if expected is None or request.config.option.runxfail:  # --runxfail: the check's own traceback
        check(estimator)
        return
    try:
        check(estimator)
    except SkipTest:
        raise
    except Exception as error:  # the expected failure (xfail would catch any Exception as well)
        failure = f"{type(error).__name__}: {error}"
    else:
        return  # the strict xfail mark fails the test: the check passes now
    pytest.xfail(f"{expected.kwargs.get('reason', '')} ({failure[:300]})")


def test_every_estimator_is_checked() -> None:
    assert {type(e) for e in CHECKED} == set(ESTIMATOR_CLASSES) - (
        set() if torch_available() else {FieldAwareCalibrator, PiecewiseLogitCalibrator}
    )

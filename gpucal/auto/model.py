"""``AutoCalibrator``: a blend of calibrators (or the best one), chosen by cross-fitting.

Each candidate (``gpucal.auto.candidates``) is fitted on ``n_folds - 1`` folds and scored on the held-out
fold (``gpucal.auto.folds``, ``gpucal.auto.cross_fit``; the report's metrics: ``gpucal.auto.report``).
By default the candidates' out-of-fold logits are blended (``gpucal.auto.blend``) and the members
refitted on every row; with ``ensemble=False`` the one with the lowest mean held-out score is. This
module is the estimator: its parameters, the search's order, the guards, the refit, predict and save.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Collection, Hashable, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._frames import InputInfo, describe_input, parse_input
from gpucal._params import AnyOf
from gpucal._validation import check_consistent_length, check_labels, check_sample_weight, warn_at_caller
from gpucal.auto.blas_threads import one_blas_thread
from gpucal.auto.blend import MIN_MEMBER_WEIGHT, blend_predictions, fit_blend, logits
from gpucal.auto.candidates import (
    COLUMN_PARAMS,
    Candidate,
    column_params,
    default_candidates,
    resolve_candidates,
)
from gpucal.auto.cross_fit import (
    CANDIDATE_ERRORS,
    CrossFitting,
    as_host_array,
    best_per_method,
    cross_fit_candidate,
    distinct_growing,
    fresh,
    growing_stand_ins,
    growing_twins,
    grows_with_rows,
    log,
)
from gpucal.auto.folds import (
    check_held_out,
    group_values,
    grouped_folds,
    host_rows,
    nested_subsamples,
    on_device,
    select_rows,
    stratified_folds,
    without_attrs,
)
from gpucal.auto.guard import blend_probabilities, order_guard, paired_gain
from gpucal.auto.report import (
    METRICS,
    ROW_LOSSES,
    report_row,
    report_table,
    summary_line,
    trailing_reason,
)
from gpucal.auto.sizing import (
    DOMINATED_SE,
    HOST_RUNG_ROWS,
    PLATT_MARGIN,
    SCREEN_EXPENSIVE_SE,
    Rung,
    SearchPlan,
    plan_search,
    survivors_wanted,
)
from gpucal.auto.specs import candidate_from_spec, candidate_spec
from gpucal.calibrators.base import (
    OUTPUT_TYPE_OPTIONS,
    SCORE_KIND_OPTIONS,
    Calibrator,
    Constraint,
    Interval,
    Options,
)
from gpucal.calibrators.logistic import class_weights_present
from gpucal.encoding import FeatureEncoder, resolve_feature_cols, trusting_feature_cols
from gpucal.registry import calibration_method, dask_fitting_names, fits_on_dask
from gpucal.rows import as_rows
from gpucal.rows.block import check_class_weights
from gpucal.rows.collections import any_dask

#: The classes the guards fall back to, the best cross-fitted of them: increasing maps of the score keep
#: its ranking (Platt's wherever the score ranks better than chance; the hinge map's wherever its slopes
#: are positive, as on every set of ``benchmarks/results/auto_hinge.md``).
ORDER_KEEPING = frozenset({"PlattCalibrator", "HingePlattCalibrator"})


#: Share of the candidates that failing in the search is warned about (:func:`warn_failures`).
FAILED_SHARE_WARNED = 0.5


def warn_failures(candidates: list[Candidate], rows: list[dict[str, Any]]) -> None:
    """Warn when at least :data:`FAILED_SHARE_WARNED` of the candidates failed (their ``status`` an
    error): the choice was made among the few left (one positive label in 5,000 rows left centred
    isotonic regression alone, which ranks nothing), and the errors say why."""
    failed = [(c.label, row["status"]) for c, row in zip(candidates, rows, strict=True)]
    failed = [(label, status) for label, status in failed if status.startswith("error")]
    if len(failed) < FAILED_SHARE_WARNED * len(candidates):
        return
    label, status = failed[0]
    msg = (
        f"AutoCalibrator: {len(failed)} of {len(candidates)} candidates failed (the first, {label}: "
        f"{status}); the choice was made among the rest (cv_results_)"
    )
    warn_at_caller(msg)


def _keeps_order(estimator: Any) -> bool:
    """Whether a fallback of the guards keeps the score's ranking: Platt scaling does wherever the score
    ranks better than chance; the hinge map only when its fitted slopes are all positive."""
    increasing = getattr(estimator, "increasing", None)
    return increasing is None or bool(increasing())


@calibration_method("auto", candidate=False)
class AutoCalibrator(Calibrator):
    r"""Choose the best calibrator for the data by cross-fitting on the calibration rows.

    The calibration rows are cut into ``n_folds`` folds (seeded; stratified by label, or whole groups
    with ``groups=``). Every candidate is fitted on all folds but one and predicts the held-out one, so
    each row gets an out-of-fold prediction from every candidate; the candidate with the lowest mean
    held-out ``scoring`` over the folds is the best, ``best_estimator_``. Cheap candidates run first.

    The prediction is a convex, non-negative blend of the candidates' logits with an intercept, fitted on
    the out-of-fold predictions (:func:`gpucal.auto.blend.fit_blend`; never worse on those rows than its
    best member), its members refitted on every row; with ``ensemble=False`` it is the best candidate
    alone. The blend is the default: on the 35 datasets of ``benchmarks/results/auto_1128g.md`` its
    held-out log-loss was lower than the choice's on 15 (by up to 0.0085), higher on 17 (by at most
    0.0008) and the same on 3 (mean rank 1.86 of 19 methods against 2.06 for the choice).

    Two guards can hand the prediction to Platt scaling (the best cross-fitted candidate of Platt
    scaling and Platt scaling on logit hinges, refitted on every row; Platt scaling where the hinge
    map's refit does not increase): the AUC guard (``auc_guard``,
    :mod:`gpucal.auto.guard`), when the prediction ranks the cross-fitted rows worse than the raw score;
    and, on a large calibration set, when it does not beat that candidate's per-row ``scoring`` there by
    more than 2 standard errors (``platt_gain_``): features that do not measurably help are not worth
    their refits or their noise.

    The search is successive halving over growing stratified subsamples (:mod:`gpucal.auto.sizing`):
    from 12,000 rows (1.5 times 8,000; a smaller set is cross-fitted in one rung) every candidate is
    first cross-fitted on 8,000 of them, and only the best (and the members of that rung's blend, less
    the dominated ones and NeuCalib unless it is the best, and Platt scaling; on more than 100,000 rows
    the second-order feature-aware Platt settings too) go on to a rung with four times the rows, up to
    every row (up to 1,000,000; on more than 100,000 rows the blend also takes the best setting of each
    method and no member lighter than 5%). The candidates are the same at every size (over 100,000 rows
    the ``l2 = 10`` feature-aware Platt settings screen their fields, ``screen_fields``); on a screening
    rung NeuCalib runs only when a cheaper feature-aware candidate beats Platt scaling by 2 standard
    errors.

    Parameters
    ----------
    candidates : list or None, default=None
        Calibrator names (``make_calibrator``'s: built with their defaults and the column parameters
        below), gpucal estimators (used as given, cloned), or ``{"class": ..., "params": ...}`` dicts.
        None: the default list of :mod:`gpucal.auto.candidates` (Platt, beta, Platt on logit hinges,
        centred isotonic; when ``X`` has feature columns, feature-aware Platt with ``l2`` in 1, 10, 100,
        second-order feature-aware Platt (``interactions="auto"``, ``l2_cross`` 10 and 100), a first- and
        a second-order setting smoothed along ordered columns (``l2_smooth``, when some feature column is
        ordered: a number not named in ``categorical_cols``, binned or read by value), three MBCT
        settings, boosted heterogeneous calibration, and NeuCalib when PyTorch is installed). Every candidate
        takes the column parameters below (``score_col``, ``feature_cols``, ``categorical_cols``,
        ``score_kind``) that its class has, except where a given estimator was set otherwise.
    n_folds : int or "auto", default="auto"
        Folds of every rung of the search (at least 2). ``"auto"``: 2 on a rung that screens, and on
        the last rung 5 up to 5,000 rows, 3 up to 25,000, else 2 (:mod:`gpucal.auto.sizing`).
    cv_rows : int, "auto" or None, default="auto"
        Rows of the last rung: a seeded subsample stratified by label when the data has more (the
        chosen calibrators are still refitted on every row). ``"auto"``: every row up to 1,000,000;
        None: every row. The measured reason is in :mod:`gpucal.auto.sizing`.
    auc_guard : bool, default=True
        Keep the ranking of the score: when the prediction (blend or chosen calibrator) ranks the
        cross-fitted rows worse than the raw score does (a lower AUC over the pairs of rows held out in
        the same fold), Platt scaling, which keeps the score's order, replaces it
        (:mod:`gpucal.auto.guard`).
    scoring : {"log_loss", "brier", "ece"}, default="log_loss"
        The held-out metric that chooses (lower is better); the report holds all three. ``ece``: 15
        equal-width bins. The blend of ``ensemble=True`` always minimises the log-loss.
    ensemble : bool, default=True
        Blend the candidates; False: predict with the best one alone (its rules can then be exported).
    time_budget : float or None, default=None
        Seconds for the cross-fitting: once spent, no further candidate of the first rung is started
        (the first always runs; the report marks the rest ``skipped``) and no further rung (the last
        one run chooses). The refit on all rows comes on top.
    drop_threshold : float or None, default=3.0
        Racing: after each fold, a candidate whose per-row loss (``scoring`` log_loss or brier) on the
        held-out rows so far exceeds that of the best candidate already cross-fitted, on the same rows, by
        more than ``drop_threshold`` standard errors of the paired difference is dropped without its
        remaining folds and marked ``dropped`` in the report (never chosen, never blended). A large
        calibration set resolves small differences, so racing saves most there (except on its
        screening rungs for second-order feature-aware Platt, which goes on in any case). None (and
        ``scoring="ece"``, which has no per-row loss) runs every candidate on every fold.
    score_col : str, default="score"
        Column of ``X`` holding the score.
    feature_cols : list of hashable, str or None, default=None
        Feature columns for the feature-aware candidates; None means every column but ``score_col``, the label
        (a column named like ``y`` or holding its values), the weights and ``p_true``
        (``gpucal.encoding.features``); a feature that is the label is refused.
    categorical_cols : list of hashable, str or None, default=None
        Numeric feature columns to read by value, for the feature-aware candidates. None: integer columns with
        few distinct values (at most one per 20 rows, 50,000 at most) are read by value, other numbers binned
        (``FeatureEncoder``); ``[]``: every number binned.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities, or raw margins: then the default candidates are those that take margins (Platt,
        Platt on logit hinges, centred isotonic, feature-aware Platt, NeuCalib).
    random_state : int, default=0
        Seed of the folds.
    verbose : int, default=0
        1: a line per candidate and a summary (to stderr); 2: also a line per fold.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    best_estimator_ : estimator
        The candidate with the lowest mean held-out score, refitted on every row.
    best_index_ : int
        Its row in ``cv_results_``; the Platt candidate's when a guard handed the prediction to it.
    estimators_ : list of estimators
        The refitted estimators the prediction reads: ``[best_estimator_]``, then (``ensemble=True``)
        the other blend members with a positive weight (``best_estimator_`` stays first, weight 0 if the
        blend gives it none).
    weights_ : numpy.ndarray of shape (len(estimators_),)
        Blend weights of ``estimators_`` (``[1.0]`` when choosing).
    intercept_ : float
        Blend intercept (0 when choosing).
    cv_results_ : pandas.DataFrame
        One row per candidate: ``candidate``, ``method``, ``params``, ``status`` (``ok``, ``dropped after
        k fold(s)``, ``halved out after n rows``, ``skipped``, or the error of a failed fit),
        ``mean_test_<metric>`` and ``std_test_<metric>`` over the folds of the last rung it ran for each
        of log_loss, brier and ece, ``cv_rows`` (that rung's rows), ``mean_fit_time`` (seconds per fold
        there), ``fit_seconds`` (all its folds of every rung), ``n_folds_fitted``,
        ``blend_weight``, ``refit_seconds`` and ``rank_test_score`` (by ``scoring``; candidates not
        ``ok`` rank last).
    oof_predictions_ : numpy.ndarray of shape (len(cv_index_), n_candidates)
        Every candidate's out-of-fold prediction on the last rung, on the rows ``cv_index_`` (NaN for a
        candidate that did not reach it or failed, and on rows a rung cut short by ``time_budget`` did not
        cross-fit). Not saved.
    cv_index_ : numpy.ndarray of shape (cv_rows_,)
        Positions in ``X``, increasing, of the rows the search cross-fits: every row, or the last rung's
        stratified subsample when it has fewer (``cv_rows``); the earlier rungs' subsamples are drawn
        from them. Not saved.
    n_folds_, cv_rows_ : int
        The folds and the number of rows of the last rung (``n_folds`` and ``cv_rows`` resolved).
    rungs_ : list of dict
        The rungs run: ``rows``, ``n_folds`` and the number of ``candidates`` cross-fitted. Not saved.
    auc_guard_ : dict
        ``raw_auc`` and ``auc`` (the prediction's, before any guard) over the pairs of cross-fitted rows
        held out in the same fold (None when no fold holds both classes), and
        ``applied``: whether Platt scaling replaced the prediction for it (with a ``note`` when there was
        no Platt candidate to fall back to).
    platt_gain_ : dict
        ``gain``, the prediction's mean per-row ``scoring`` below Platt's on the cross-fitted rows (the
        blend's or best candidate's out-of-fold predictions, before any guard), its standard error
        ``se``, and ``applied``: on a large set, the gain was at most 2 ``se`` and Platt predicts.
        ``gain`` and ``se`` are None without a Platt candidate or with ``scoring="ece"``.
    cv_seconds_, refit_seconds_ : float
        Time of the cross-fitting and of the refits on all rows.
    members_, report_ : list of dict, dict
        ``estimators_`` as model documents and ``cv_results_`` as columns: what ``save`` writes.

    See Also
    --------
    sklearn.model_selection.GridSearchCV : the same report, for any estimator.

    Notes
    -----
    The fold assignment (and the subsample of a large set) depends only on the rows' positions, labels
    (or groups, and the weights that balance them across folds) and ``random_state``, so the same call
    gives the same folds and report. Integer weights equal repeated rows when the repeats share a group
    (``groups=``), no subsample is drawn, and every candidate honours weights that way (the validation
    splits of MBCT, HC and NeuCalib do not: they draw rows; nor do NeuCalib's mini-batches and the row
    counts that give a value its own embedding).

    The fit runs BLAS on one thread (``threadpoolctl``), the candidates' fits included: the search's
    products are of a few thousand rows, where BLAS's threads cost more CPU than they save.

    On rows on the GPU (cupy, cudf), the rungs of fewer than 262,144 rows are cross-fitted on a host copy
    of their rows, the later rungs and the refit on the device: fits that small are bound by kernel
    launches and round trips there (:data:`~gpucal.auto.sizing.HOST_RUNG_ROWS`). A candidate's host and
    GPU fits agree to rounding, NeuCalib's to its stochastic training (``benchmarks/bench_gpu.py``
    checks each).

    A candidate whose fit fails (one class in a fold, a column it cannot find, PyTorch missing) is
    marked in ``status`` and never chosen; when half of them or more fail a warning gives the first error,
    and when every candidate fails the fit raises. Dask collections
    are refused (this version does not cut partitions into folds), the error naming the candidates that
    have no distributed fit either.

    References
    ----------
    .. [1] M. Stone, "Cross-validatory choice and assessment of statistical predictions", Journal of the
       Royal Statistical Society B 36 (1974), pp. 111-147.
    .. [2] D. H. Wolpert, "Stacked generalization", Neural Networks 5 (1992), pp. 241-259.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> score = rng.uniform(0.01, 0.99, 2_000)
    >>> y = (rng.uniform(size=2_000) < score**2).astype(float)
    >>> auto = AutoCalibrator(candidates=["platt", "isotonic"]).fit(score, y)
    >>> auto.cv_results_["candidate"].tolist()
    ['platt', 'isotonic']
    >>> auto.cv_results_["rank_test_score"].tolist()
    [1, 2]
    >>> type(auto.best_estimator_).__name__
    'PlattCalibrator'
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_folds": AnyOf(Interval(int, 2, None), Options("auto")),
        "cv_rows": AnyOf(Interval(int, 2, None, allow_none=True), Options("auto")),
        "auc_guard": Options(True, False),
        "scoring": Options(*METRICS),
        "ensemble": Options(True, False),
        "time_budget": Interval(float, 0, None, closed="neither", allow_none=True),
        "drop_threshold": Interval(float, 0, None, allow_none=True),
        "random_state": Interval(int, 0, None),
        "verbose": Interval(int, 0, None),
        "score_kind": SCORE_KIND_OPTIONS,
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    #: The fitted members read the columns they were fitted with (``Calibrator._fitted_param``).
    _state_params: ClassVar[tuple[str, ...]] = COLUMN_PARAMS
    _state_spec: ClassVar[dict[str, str]] = {
        "members_": "json",
        "weights_": "float_array",
        "intercept_": "float",
        "best_index_": "int",
        "report_": "json",
        "cv_seconds_": "float",
        "n_folds_": "int",
        "cv_rows_": "int",
        "auc_guard_": "json",
        "platt_gain_": "json",
        "refit_seconds_": "float",
    }

    def __init__(
        self,
        *,
        candidates: Sequence[Any] | None = None,
        n_folds: int | str = "auto",
        cv_rows: int | str | None = "auto",
        auc_guard: bool = True,
        scoring: str = "log_loss",
        ensemble: bool = True,
        time_budget: float | None = None,
        drop_threshold: float | None = 3.0,
        score_col: Hashable = "score",
        feature_cols: Sequence[Hashable] | str | None = None,
        categorical_cols: Sequence[Hashable] | str | None = None,
        score_kind: str = "probability",
        random_state: int = 0,
        verbose: int = 0,
        output_type: str = "input",
    ) -> None:
        self.candidates = candidates
        self.n_folds = n_folds
        self.cv_rows = cv_rows
        self.auc_guard = auc_guard
        self.scoring = scoring
        self.ensemble = ensemble
        self.time_budget = time_budget
        self.drop_threshold = drop_threshold
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.categorical_cols = categorical_cols
        self.score_kind = score_kind
        self.random_state = random_state
        self.verbose = verbose
        self.output_type = output_type

    # ----------------------------------------------------------------------------------------------
    # Fit

    def _resolve_candidates(
        self, has_features: bool, feature_cols: Any = None, large: bool = False, ordered: bool = True
    ) -> list[Candidate]:
        """The candidates, reading ``feature_cols`` (the resolved features; None: the parameter);
        ``large``: the calibration set is, ``ordered``: some feature column is (``default_candidates``)."""
        features = self.feature_cols if feature_cols is None else feature_cols
        columns = column_params(self.score_col, features, self.categorical_cols, self.score_kind)
        if self.candidates is None:
            from gpucal.neural import torch_available

            return default_candidates(
                columns,
                with_features=has_features,
                with_torch=torch_available(),
                large=large,
                ordered=ordered,
            )
        if isinstance(self.candidates, str | dict) or not isinstance(self.candidates, Sequence):
            msg = f"candidates: expected a list of names or estimators, got {self.candidates!r}"
            raise TypeError(msg)
        entries = [candidate_from_spec(entry) for entry in self.candidates]
        if any(entry == "auto" or isinstance(entry, AutoCalibrator) for entry in entries):
            msg = "candidates: an AutoCalibrator cannot be a candidate of another"
            raise ValueError(msg)
        return resolve_candidates(entries, columns)

    def fit(self, X: Any, y: Any, sample_weight: Any = None, *, groups: Any = None) -> AutoCalibrator:
        """Cross-fit every candidate, keep the best (or the blend), refit it on every row.

        Parameters
        ----------
        X : dataframe, dict of columns, or 1-D array
            The score (in ``score_col``) and the feature columns; a 1-D score array leaves only the
            one-dimensional candidates.
        y : array-like of shape (n,)
            Labels in {0, 1}; soft labels in [0, 1] count as that fraction of a positive.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights, passed to every candidate and to the held-out metrics. They count
            as repeated rows: the standard errors that race the candidates and weigh the prediction
            against Platt scaling read their total as the number of rows, so their scale matters (weights
            of 0.01 make every difference ten times less sure; integer weights equal repeated rows).
        groups : array-like of shape (n,), column name, or None, default=None
            Group of each row (or the column of ``X`` holding it): every row of a group lands in the
            same fold. None: folds stratified by label. A pandas Series shares ``X``'s index, as ``y``
            does; a row without a group (None, NaN) is refused. A column named here stays a default
            feature, as every column does (``feature_cols=None``); leave it out of ``feature_cols``
            when it is only an id: a held-out fold never sees its values, so the folds cannot judge
            what a candidate learns from them, and the refit on every row still learns it.

        Returns
        -------
        self
        """
        # Every product of the search is one of a few thousand rows (held-out losses, racing, the blend):
        # BLAS's threads cost more than they save there (a 40,000-row dot product took 7 CPU ms on two
        # OpenBLAS threads, 0.02 on one), so the whole fit runs BLAS on one thread.
        with one_blas_thread():
            return self._fit_rows(X, y, sample_weight, groups)

    def _fit_rows(self, X: Any, y: Any, sample_weight: Any, groups: Any) -> AutoCalibrator:
        """:meth:`fit`'s body."""
        self._validate_params()
        if any_dask(X, y, sample_weight, groups):
            raise self._no_distributed_fit()
        X = without_attrs(X)
        feature_cols = resolve_feature_cols(
            as_rows(X=X, y=y, sample_weight=sample_weight),
            X,
            y,
            sample_weight,
            score_col=self.score_col,
            feature_cols=self.feature_cols,
        )
        split = parse_input(
            X, score_col=self.score_col, feature_cols=feature_cols, score_kind=self.score_kind
        )
        labels = check_labels(y, "y")
        n_rows = check_consistent_length(X=split.score, y=labels)
        weights = (
            None
            if sample_weight is None
            else check_sample_weight(sample_weight, n_rows, xp=array_namespace(labels))
        )
        check_class_weights(
            *class_weights_present(
                labels, array_namespace(labels).ones_like(labels) if weights is None else weights
            ),
            why="the candidates are compared by their held-out log-loss and ranking, which need both classes",
        )
        plan = plan_search(n_rows, self.n_folds, self.cv_rows)
        # categorical_cols checked here, as the encoder of every feature-aware candidate would check it.
        encoder = FeatureEncoder(categorical_cols=self.categorical_cols)
        ordered = bool(split.features) and bool(encoder.ordered_columns(split.features))
        candidates = self._resolve_candidates(bool(split.features), list(split.features), plan.large, ordered)
        if self.verbose and split.features:
            log(f"features {encoder.fit(split.features).describe_columns()}")
        host_labels = to_numpy(labels)
        host_weights = np.ones(n_rows) if weights is None else to_numpy(weights)
        # The search reads the last rung's rows only: on a large set, tables and folds of every row (two
        # tables of 1.1 GB, rows x 14 candidates, at 1e7 rows) held NaN but for its subsample. Each rung's
        # rows lie within it, at these positions.
        samples = nested_subsamples(host_labels, [rung.rows for rung in plan.rungs], self.random_state)
        self.cv_index_ = samples[-1]
        rung_rows = [np.searchsorted(self.cv_index_, sample) for sample in samples]
        search_X, search_labels, search_weights, search_groups = X, labels, weights, groups
        if self.cv_index_.shape[0] < n_rows:
            search_X = select_rows(X, self.cv_index_)
            cv_positions = array_namespace(labels).asarray(self.cv_index_)
            search_labels = labels[cv_positions]
            search_weights = None if weights is None else weights[cv_positions]
            search_groups = None if groups is None else group_values(X, groups, n_rows)[self.cv_index_]
            host_labels, host_weights = host_labels[self.cv_index_], host_weights[self.cv_index_]
        started = time.perf_counter()
        rows, folds = self._search(
            search_X, search_labels, search_weights, search_groups, candidates, plan, rung_rows, started
        )
        self.cv_seconds_ = time.perf_counter() - started
        scores = np.array(
            [row[f"mean_test_{self.scoring}"] if row["status"] == "ok" else np.nan for row in rows],
            dtype=np.float64,
        )
        usable = np.flatnonzero(np.isfinite(scores))
        if usable.size == 0:
            errors = "; ".join(f"{c.label}: {row['status']}" for c, row in zip(candidates, rows, strict=True))
            msg = f"AutoCalibrator: no candidate could be fitted ({errors})"
            raise ValueError(msg)
        warn_failures(candidates, rows)
        crossed = np.flatnonzero(folds >= 0)
        if plan.large:  # where a refit's screen sees many more rows than the folds did
            usable = growing_twins(usable, self.oof_predictions_, crossed, candidates)
        self.best_index_ = int(usable[np.argmin(scores[usable])])
        pool = best_per_method(usable, scores, candidates) if plan.large else usable
        members, blend_weights, intercept = self._choose(
            pool, crossed, host_labels, host_weights, MIN_MEMBER_WEIGHT if plan.large else 0.0
        )
        predicted = blend_probabilities(
            self.oof_predictions_[np.ix_(crossed, np.asarray(members))], blend_weights, intercept
        )
        platt = self._platt_index(candidates, scores)
        to_platt = self._weigh_platt(plan, members, platt, predicted, crossed, host_labels, host_weights)
        self.auc_guard_: dict[str, Any] = {"applied": False, "raw_auc": None, "auc": None}
        if self.auc_guard:
            guard = order_guard(
                to_numpy(split.score)[self.cv_index_[crossed]],
                predicted,
                host_labels[crossed],
                None if weights is None else host_weights[crossed],
                folds[crossed],
            )
            self.auc_guard_ = guard.report()
            if guard.applied and platt is None:
                self.auc_guard_["applied"] = False
                self.auc_guard_["note"] = "no Platt candidate: the prediction was kept"
                platt_failed = any(
                    row["status"].startswith("error")
                    for c, row in zip(candidates, rows, strict=True)
                    if type(c.estimator).__name__ in ORDER_KEEPING
                )
                if platt_failed:
                    msg = (
                        "AutoCalibrator: the chosen prediction ranks the held-out folds worse than the raw "
                        "score (AUC guard), and the Platt scaling candidates failed, so there was none to "
                        "fall back on: the prediction was kept (auc_guard_, cv_results_)"
                    )
                    warn_at_caller(msg)
            to_platt = to_platt or bool(self.auc_guard_["applied"])
        if to_platt and platt is not None:
            self.best_index_ = platt
            members, blend_weights, intercept = [platt], np.array([1.0]), 0.0
        self._refit(X, labels, weights, candidates, rows, members, blend_weights, intercept)
        platt_only = self._platt_index(candidates, scores, classes=("PlattCalibrator",))
        if to_platt and not _keeps_order(self.estimators_[0]) and platt_only is not None:
            # The hinge map's fit does not force its slopes positive: one that bends downwards on every
            # row would break the ranking the guards promise, so Platt scaling takes its place.
            self.best_index_ = platt_only
            self._refit(X, labels, weights, candidates, rows, [platt_only], np.array([1.0]), 0.0)
        self.cv_results_, self.report_ = report_table(rows, scores)
        if self.verbose:
            log(
                summary_line(
                    self.cv_results_,
                    self.best_index_,
                    self.scoring,
                    len(candidates),
                    self.cv_seconds_,
                    self.intercept_ if self.ensemble else None,
                    n_rows,
                    self.refit_seconds_,
                )
            )
        return self

    def _search(
        self,
        X: Any,
        labels: Any,
        weights: Any,
        groups: Any,
        candidates: list[Candidate],
        plan: SearchPlan,
        rung_rows: list[np.ndarray],
        started: float,
    ) -> tuple[list[dict[str, Any]], np.ndarray]:
        """Successive halving over the rungs of ``plan`` (rung ``i`` on the rows at positions
        ``rung_rows[i]``); the report rows and the last rung's folds.

        Each rung cross-fits the candidates still in the race (:func:`cross_fit_candidate`, with racing
        inside the rung) on its rows and passes the best on (:meth:`_survivors`); a candidate left
        behind keeps the row of the last rung it ran, marked ``halved out``. A rung after the first
        starts only while ``time_budget`` remains. On rows on the GPU, a rung of fewer than
        :data:`HOST_RUNG_ROWS` rows is fitted on a host copy of them. Sets ``oof_predictions_`` (the
        last rung's), ``n_folds_``, ``cv_rows_`` and ``rungs_``.
        """
        host_labels = to_numpy(labels)
        host_weights = None if weights is None else to_numpy(weights)
        # On rows on the GPU, the rows of the largest rung under HOST_RUNG_ROWS, copied to the host once
        # (every smaller rung's rows lie within them) for the rungs fitted there.
        host_rungs = [i for i, rung in enumerate(plan.rungs) if rung.rows < HOST_RUNG_ROWS]
        copied = rung_rows[host_rungs[-1]] if host_rungs and on_device(X, labels) else None
        host_X = None
        rows: list[dict[str, Any] | None] = [None] * len(candidates)
        racing = list(range(len(candidates)))
        self.rungs_: list[dict[str, int]] = []
        folds = np.empty(0, dtype=np.int64)
        # Column-major: each candidate's held-out predictions and losses are written and read column by
        # column. Allocated once and blanked at each later rung (a fresh array of every row per rung is
        # paid again in page faults): only the last rung's rows hold values.
        self.oof_predictions_ = np.full((host_labels.shape[0], len(candidates)), np.nan, order="F")
        row_losses = (
            np.full(self.oof_predictions_.shape, np.nan, order="F") if self.scoring in ROW_LOSSES else None
        )
        for number, rung in enumerate(plan.rungs):
            if number > 0 and self._budget_spent(started):
                break
            if number > 0:
                written = np.flatnonzero(folds >= 0)
                self.oof_predictions_[written] = np.nan
                if row_losses is not None:
                    row_losses[written] = np.nan
            folds = self._folds(X, groups, host_labels, host_weights, rung, rung_rows[number])
            self.n_folds_, self.cv_rows_ = rung.n_folds, rung.rows
            self.rungs_.append({"rows": rung.rows, "n_folds": rung.n_folds, "candidates": len(racing)})
            if self.verbose and len(plan.rungs) > 1:
                log(f"rung {number + 1}/{len(plan.rungs)}: {len(racing)} candidate(s) on {rung.rows:,} rows")
            rung_X, rung_labels, rung_weights, X_rows = X, labels, weights, None
            if copied is not None and number in host_rungs:
                host_X = host_rows(select_rows(X, copied)) if host_X is None else host_X
                rung_X, rung_labels, rung_weights, X_rows = host_X, host_labels, host_weights, copied
            search = CrossFitting(
                X=rung_X,
                labels=rung_labels,
                weights=rung_weights,
                X_rows=X_rows,
                folds=folds,
                oof_predictions=self.oof_predictions_,
                row_losses=row_losses,
                n_folds=rung.n_folds,
                scoring=self.scoring,
                drop_threshold=self.drop_threshold,
                verbose=self.verbose,
                loose=plan.large,
            )
            screening = number < len(plan.rungs) - 1
            # An expensive candidate on a screening rung passes on only as the rung's best: it stops
            # after its first fold unless it leads there (a threshold of 0 standard errors).
            screen_search = replace(search, drop_threshold=SCREEN_EXPENSIVE_SE)
            # On a large set a second-order candidate screens all its folds: it goes on in any case.
            unraced = replace(search, drop_threshold=None)
            reference: int | None = None  # the best candidate of this rung so far
            best_score = np.inf
            for position, index in enumerate(racing):
                earlier = rows[index]
                candidate = candidates[index]
                if position > 0 and number == 0 and self._budget_spent(started):
                    rows[index] = report_row(candidate, "skipped", None, 0.0, self.scoring)
                    if self.verbose:
                        log(f"{index + 1}/{len(candidates)} {candidate.label}: skipped (time budget)")
                    continue
                if screening and candidate.expensive:
                    unpaid = self._features_unpaid(
                        candidates, rows, racing[:position], folds, row_losses, host_weights
                    )
                    if unpaid is not None:
                        rows[index] = report_row(
                            candidate, f"not screened: {unpaid}", None, 0.0, self.scoring
                        )
                        if self.verbose:
                            log(f"{index + 1}/{len(candidates)} {candidate.label}: not screened ({unpaid})")
                        continue
                if screening and candidate.expensive:
                    rung_search = screen_search
                elif screening and plan.large and grows_with_rows(candidate):
                    rung_search = unraced
                elif type(candidate.estimator).__name__ in ORDER_KEEPING:
                    # What the guards fall back to: dropped after a fold, it left them nothing to fall
                    # back to when it came after a better candidate. A map of the score, it is cheap.
                    rung_search = unraced
                else:
                    rung_search = search
                row = cross_fit_candidate(rung_search, index, candidate, reference=reference)
                row["cv_rows"] = rung.rows
                if earlier is not None:
                    row["fit_seconds"] += earlier["fit_seconds"]
                rows[index] = row
                score = row[f"mean_test_{self.scoring}"]
                if row["status"] == "ok" and (reference is None or score < best_score):
                    reference, best_score = index, score
            if screening:
                kept = self._survivors(
                    racing, rows, candidates, folds, host_labels, host_weights, row_losses, plan.large
                )
                for index in racing:
                    left = rows[index]
                    if index not in kept and left is not None and left["status"] == "ok":
                        left["status"] = f"halved out after {rung.rows:,} rows"
                racing = kept
                if not racing:  # every candidate failed: nothing to pass on
                    break
        return [row for row in rows if row is not None], folds

    def _features_unpaid(
        self,
        candidates: list[Candidate],
        rows: list[dict[str, Any] | None],
        done: list[int],
        folds: np.ndarray,
        row_losses: np.ndarray | None,
        weights: np.ndarray | None,
    ) -> str | None:
        """Why no expensive candidate is worth screening on this rung, or None when one is.

        It is when the best cheap feature-aware candidate of ``done`` (those cross-fitted on this rung)
        beats the best Platt candidate by more than :data:`~gpucal.auto.sizing.DOMINATED_SE` standard
        errors of the per-row difference: features that no cheap candidate can use are not worth a
        network's fits. Without a Platt candidate or a cheap feature-aware one, or without per-row losses
        to measure that by (``scoring="ece"``), it is screened.
        """
        if row_losses is None:
            return None
        scores = np.full(len(candidates), np.nan)
        for i in done:
            row = rows[i]
            if row is not None and row["status"] == "ok":
                scores[i] = row[f"mean_test_{self.scoring}"]
        platt = self._platt_index(candidates, scores)
        if platt is None:
            return None
        featured = [i for i in done if np.isfinite(scores[i]) and candidates[i].reads_features]
        if not featured:  # nothing cheap to judge the features by
            return None
        best = min(featured, key=lambda i: scores[i])
        crossed = np.flatnonzero(folds >= 0)
        beats = trailing_reason(self.scoring, DOMINATED_SE, row_losses, platt, best, crossed, weights)
        if beats is not None:
            return None
        return f"{candidates[best].label}, the best feature-aware fit, beats Platt by <= {DOMINATED_SE:g} SE"

    def _budget_spent(self, started: float) -> bool:
        return self.time_budget is not None and time.perf_counter() - started >= self.time_budget

    def _survivors(
        self,
        racing: list[int],
        rows: list[dict[str, Any] | None],
        candidates: list[Candidate],
        folds: np.ndarray,
        labels: np.ndarray,
        weights: np.ndarray | None,
        row_losses: np.ndarray | None,
        large: bool,
    ) -> list[int]:
        """The candidates a screening rung passes on, in their order (cheapest first).

        The best :func:`~gpucal.auto.sizing.survivors_wanted` (of those in the race) by mean held-out
        ``scoring`` and the
        members of a blend of this rung's out-of-fold predictions with a weight of at least
        :data:`~gpucal.auto.blend.MIN_MEMBER_WEIGHT` (``ensemble=True``: what the last rung will blend),
        less those dominated (trailing the best by more than :data:`~gpucal.auto.sizing.DOMINATED_SE`
        standard errors of the per-row difference on the rung's held-out rows) and the expensive ones
        (:data:`~gpucal.auto.candidates.EXPENSIVE_CLASSES`) but the best; and the best Platt candidate
        (what the guards fall back to). On a large set a second-order feature-aware Platt twin stands
        in for a first-order candidate (:func:`~gpucal.auto.cross_fit.growing_stand_ins`), and every
        second-order candidate goes on (:func:`~gpucal.auto.cross_fit.grows_with_rows`) but a twin of
        one listed before it (:func:`~gpucal.auto.cross_fit.distinct_growing`).
        """
        scores = np.array(
            [
                row[f"mean_test_{self.scoring}"] if row is not None and row["status"] == "ok" else np.nan
                for row in rows
            ],
            dtype=np.float64,
        )
        usable = [i for i in racing if np.isfinite(scores[i])]
        if not usable:
            return []
        ranked = sorted(usable, key=lambda i: scores[i])
        crossed = np.flatnonzero(folds >= 0)
        # The share is of the candidates in the race: one that was not screened does not narrow it.
        kept = set(ranked[: survivors_wanted(len(racing))])
        if self.ensemble and len(usable) > 1:
            w = np.ones(labels.shape[0]) if weights is None else weights
            fit = fit_blend(
                logits(self.oof_predictions_[np.ix_(crossed, np.asarray(usable))]),
                labels[crossed],
                w[crossed],
                min_member_weight=MIN_MEMBER_WEIGHT,
            )
            kept.update(i for i, weight in zip(usable, fit.weights, strict=True) if weight > 0)
        if large:
            kept = growing_stand_ins(kept, usable, self.oof_predictions_, crossed, candidates)
        kept = {
            i
            for i in kept
            if i == ranked[0]
            or (
                not candidates[i].expensive
                and trailing_reason(self.scoring, DOMINATED_SE, row_losses, i, ranked[0], crossed, weights)
                is None
            )
        }
        platt = self._platt_index(candidates, scores)
        if platt is not None:
            kept.add(platt)
        if large:
            # A second-order candidate's screens keep more crosses on more rows: what it is worth shows
            # only there, and its fit is one Newton over sums. Of its twins (no pair kept) one goes on.
            growing = distinct_growing(usable, self.oof_predictions_, crossed, candidates)
            kept = {i for i in kept if not grows_with_rows(candidates[i])}
            kept.update(growing)
        return [i for i in racing if i in kept]

    def _no_distributed_fit(self) -> NotImplementedError:
        """The error for dask input, naming the candidates that have no distributed fit of their own."""
        candidates = self._resolve_candidates(has_features=True)
        local = sorted({c.label for c in candidates if not fits_on_dask(type(c.estimator))})
        msg = (
            "AutoCalibrator does not fit on dask collections: its cross-fitting would have to cut every "
            "partition into folds, which this version does not do"
            + (f", and candidates {', '.join(local)} have no distributed fit" if local else "")
            + ". Fit it on a sample brought in with .compute(), or fit one calibrator that fits on dask: "
            + ", ".join(dask_fitting_names())
            + "."
        )
        return NotImplementedError(msg)

    def _folds(
        self,
        X: Any,
        groups: Any,
        labels: np.ndarray,
        weights: np.ndarray | None,
        rung: Rung,
        crossed: np.ndarray,
    ) -> np.ndarray:
        """The fold of every row: 0 .. n_folds - 1 on the rung's rows (at positions ``crossed``), -1 on
        the others."""
        n_rows = labels.shape[0]
        folds = np.full(n_rows, -1, dtype=np.int64)
        try:
            if groups is None:
                folds[crossed] = stratified_folds(labels[crossed], rung.n_folds, self.random_state)
            else:
                values = group_values(X, groups, n_rows)[crossed]
                crossed_weights = None if weights is None else weights[crossed]
                folds[crossed] = grouped_folds(values, rung.n_folds, self.random_state, crossed_weights)
            held_weights = None if weights is None else weights[crossed]
            check_held_out(folds[crossed], rung.n_folds, held_weights, groups is not None)
        except ValueError as error:
            if self.n_folds != "auto" or "n_folds=" not in str(error):
                raise
            # The count in the message is the one n_folds="auto" chose, not the user's.
            fewer = "at most the number of groups, 2 at least" if groups is not None else "a smaller one"
            msg = f"{error} (n_folds='auto' chose {rung.n_folds}; pass n_folds {fewer})"
            raise ValueError(msg) from None
        return folds

    def _choose(
        self,
        usable: np.ndarray,
        crossed: np.ndarray,
        labels: np.ndarray,
        weights: np.ndarray,
        min_member_weight: float,
    ) -> tuple[list[int], np.ndarray, float]:
        """The candidates the prediction reads (the best first), their blend weights and the intercept."""
        if not self.ensemble or usable.size == 1:
            return [self.best_index_], np.array([1.0]), 0.0
        member_logits = logits(self.oof_predictions_[np.ix_(crossed, usable)])
        fit = fit_blend(member_logits, labels[crossed], weights[crossed], min_member_weight=min_member_weight)
        blend_weights = np.zeros(self.oof_predictions_.shape[1])
        blend_weights[usable] = fit.weights
        members = [self.best_index_] + [
            int(i) for i in np.flatnonzero(blend_weights > 0) if int(i) != self.best_index_
        ]
        return members, blend_weights[members], fit.intercept

    @staticmethod
    def _platt_index(
        candidates: list[Candidate], scores: np.ndarray, classes: Collection[str] = ORDER_KEEPING
    ) -> int | None:
        """The best cross-fitted candidate of the ``classes`` (by default :data:`ORDER_KEEPING`: Platt
        scaling, on the logit or on its hinges), what the guards fall back to; None without one."""
        platt = [
            i
            for i, c in enumerate(candidates)
            if type(c.estimator).__name__ in classes and np.isfinite(scores[i])
        ]
        return min(platt, key=lambda i: scores[i]) if platt else None

    def _weigh_platt(
        self,
        plan: SearchPlan,
        members: list[int],
        platt: int | None,
        predicted: np.ndarray,
        crossed: np.ndarray,
        labels: np.ndarray,
        weights: np.ndarray,
    ) -> bool:
        """On a large set: True when the prediction does not beat Platt by ``PLATT_MARGIN`` standard errors.

        Sets ``platt_gain_`` on every size: the mean per-row gain of ``scoring`` over Platt on the
        cross-fitted rows, its standard error, and whether Platt replaces the prediction.
        """
        self.platt_gain_: dict[str, Any] = {"applied": False, "gain": None, "se": None}
        if platt is None or self.scoring not in ROW_LOSSES:
            return False
        row_loss, y = ROW_LOSSES[self.scoring], labels[crossed]
        gain, error = paired_gain(
            row_loss(y, predicted), row_loss(y, self.oof_predictions_[crossed, platt]), weights[crossed]
        )
        applied = bool(plan.large and members != [platt] and not gain > PLATT_MARGIN * error)
        self.platt_gain_ = {"applied": applied, "gain": gain, "se": error}
        return applied

    def _refit(
        self,
        X: Any,
        labels: Any,
        weights: Any,
        candidates: list[Candidate],
        rows: list[dict[str, Any]],
        members: list[int],
        member_weights: np.ndarray,
        intercept: float,
    ) -> None:
        """Refit the candidates the prediction reads (``members``, the best first) on every row."""
        started = time.perf_counter()
        self.estimators_ = []
        for i in members:
            member_started = time.perf_counter()
            model = fresh(candidates[i].estimator)
            with trusting_feature_cols():  # fit compared X's feature columns with the labels
                self.estimators_.append(model.fit(X, labels, sample_weight=weights))
            rows[i]["refit_seconds"] = time.perf_counter() - member_started
        self.refit_seconds_ = time.perf_counter() - started
        blend_weights = np.zeros(len(candidates))
        blend_weights[members] = member_weights
        for i, row in enumerate(rows):
            row["blend_weight"] = float(blend_weights[i])
            row.setdefault("refit_seconds", np.nan)
        self.best_estimator_ = self.estimators_[0]
        self.weights_ = np.asarray(member_weights, dtype=np.float64)
        self.intercept_ = float(intercept)
        from gpucal.persistence import to_dict

        # Only gpucal calibrators have a model document; ``save`` refuses the others by name.
        self.members_ = [
            to_dict(model) if isinstance(model, Calibrator) else None for model in self.estimators_
        ]

    # ----------------------------------------------------------------------------------------------
    # Predict, rules, saving

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        estimators = self._fitted_estimators()
        for name in self._state_params:
            self._fitted_param(name)
        info = describe_input(X, score_col=self.score_col)
        if not self.ensemble:
            calibrated = as_host_array(estimators[0].predict(X))
        else:
            used = [k for k, weight in enumerate(self.weights_) if weight > 0]
            members = [as_host_array(estimators[k].predict(X)) for k in used]
            calibrated = blend_predictions(members, np.asarray(self.weights_)[used], self.intercept_)
        return calibrated, info

    def export_rules(self, format: str = "text", **options: Any) -> str:
        """Return the rules of the chosen calibrator (MBCT, HC): see that class's ``export_rules``.

        Raises
        ------
        TypeError
            The chosen calibrator has no rules, or the prediction is not its own: a blend of several
            calibrators, or of one whose logit the blend scales or shifts (weight not 1, intercept not 0).
        """
        estimators = self._fitted_estimators()
        weights = np.asarray(self.weights_)
        own = weights.shape[0] == 1 and float(weights[0]) == 1.0 and self.intercept_ == 0.0
        if not own:
            msg = (
                f"AutoCalibrator predicts a blend (weights {weights.round(4).tolist()}, intercept "
                f"{self.intercept_:.4g}) of its calibrators, not one calibrator's own prediction: no rules "
                "reproduce it; fit with ensemble=False for the chosen calibrator's rules"
            )
            raise TypeError(msg)
        if not hasattr(estimators[0], "export_rules"):
            what = type(estimators[0]).__name__
            msg = f"AutoCalibrator chose {what}, which has no rules to export; rules come from MBCT and HC"
            raise TypeError(msg)
        rules: str = estimators[0].export_rules(format=format, **options)
        return rules

    def save(self, path: Any) -> None:
        """Write the fitted calibrator to ``path`` as JSON: the chosen estimators and the report, no pickle.

        Estimators given in ``candidates`` are written as ``{"class": ..., "params": ...}``.
        """
        from gpucal.persistence import save

        document_model = copy.copy(self)
        if self.candidates is not None:
            document_model.candidates = [candidate_spec(entry) for entry in self.candidates]
        save(document_model, path)

    def _fitted_estimators(self) -> list[Any]:
        estimators: list[Any] | None = getattr(self, "estimators_", None)
        if estimators is None:
            self._check_state()
            estimators = self.estimators_
        return estimators

    def _check_state(self) -> None:
        """Check the loaded state (``gpucal.load`` calls this); each member goes through ``from_dict``."""
        import pandas as pd

        from gpucal.persistence import from_dict

        members, report = self.members_, self.report_
        if not isinstance(members, list) or not members:
            msg = "members_ must be a non-empty list of model documents"
            raise ValueError(msg)
        if any(isinstance(m, dict) and m.get("class") == type(self).__name__ for m in members):
            msg = "members_ holds an AutoCalibrator; members are single calibrators"
            raise ValueError(msg)
        weights = np.asarray(self.weights_, dtype=np.float64)
        if weights.shape != (len(members),) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            msg = f"weights_ must hold {len(members)} finite non-negative numbers"
            raise ValueError(msg)
        if not np.any(weights > 0):
            msg = "weights_ are all zero; the blend reads at least one member"
            raise ValueError(msg)
        if not isinstance(report, dict) or not all(isinstance(v, list) for v in report.values()):
            msg = "report_ must map column names to lists"
            raise ValueError(msg)
        lengths = {len(v) for v in report.values()}
        if len(lengths) != 1 or not 0 <= self.best_index_ < lengths.pop():
            msg = "report_ columns must have one length, and best_index_ must be one of its rows"
            raise ValueError(msg)
        estimators = [from_dict(member) for member in members]
        for position, model in enumerate(estimators):
            name = type(model).__name__
            if "score_col" not in model.get_params():  # it reads probability matrices only
                msg = f"members_[{position}] is a {name}, which reads a matrix per class; members read scores"
                raise ValueError(msg)
            if getattr(model, "multiclass_", False) or getattr(model, "n_classes_", 2) != 2:
                msg = (
                    f"members_[{position}] is a {name} fitted on {getattr(model, 'n_classes_', 'several')} "
                    "classes; members calibrate binary scores"
                )
                raise ValueError(msg)
        self.estimators_ = estimators
        self.best_estimator_ = self.estimators_[0]
        self.cv_results_ = pd.DataFrame(
            {k: [np.nan if v is None else v for v in col] for k, col in report.items()}
        )


__all__ = ["CANDIDATE_ERRORS", "METRICS", "AutoCalibrator"]

"""Cross-fitting one candidate: fit it on all folds but one in turn, score it on the held-out fold.

``AutoCalibrator`` (``gpucal.auto.model``) runs ``cross_fit_candidate`` for every candidate, cheap ones
first; on a large set ``best_per_method`` keeps one setting of each method for the blend.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone

from gpucal._backend import array_namespace, to_numpy
from gpucal._validation import check_invariant, check_probabilities
from gpucal.auto.blend import logits
from gpucal.auto.candidates import Candidate, takes_param
from gpucal.auto.folds import select_rows
from gpucal.auto.report import METRICS, ROW_LOSSES, fold_scores, report_row, trailing_reason
from gpucal.calibrators.feature_platt import sharing_fits
from gpucal.encoding import trusting_feature_cols

#: Errors of a candidate's fit that mark it failed in the report instead of stopping the search.
CANDIDATE_ERRORS = (ValueError, KeyError, ArithmeticError, ImportError, NotImplementedError)


def log(message: str) -> None:
    """Print a progress line of the search (``verbose``) to stderr."""
    print(f"[AutoCalibrator] {message}", file=sys.stderr, flush=True)


def entries_at(array: Any, rows: np.ndarray) -> Any:
    """``array``'s entries at ``rows`` (None stays None), in ``array``'s own namespace."""
    return None if array is None else array[array_namespace(array).asarray(rows)]


def fresh(estimator: Any) -> Any:
    """A clone of ``estimator`` that returns numpy predictions (when it takes ``output_type``)."""
    model = clone(estimator)
    if takes_param(model, "output_type"):
        model.set_params(output_type="numpy")
    return model


#: Classes whose fold fits stop at :data:`FOLD_TOL` (their ``tol`` bounds each coefficient's Newton
#: distance from the optimum).
FOLD_TOL_CLASSES = frozenset({"FeatureAwarePlattCalibrator"})
#: Newton tolerance of a fold fit of :data:`FOLD_TOL_CLASSES` (the refit on every row keeps the
#: candidate's own ``tol``): the folds only rank. On ``make_ctr``'s cross scenario (75,000 training rows)
#: second-order feature-aware Platt stops one Newton step earlier than at ``tol=1e-8`` and its held-out
#: log-loss agrees to 1e-7.
FOLD_TOL = 1e-5


def fold_estimator(estimator: Any) -> Any:
    """:func:`fresh`, with the Newton tolerance of :data:`FOLD_TOL_CLASSES` loosened to :data:`FOLD_TOL`."""
    model = fresh(estimator)
    if type(model).__name__ in FOLD_TOL_CLASSES and model.get_params()["tol"] < FOLD_TOL:
        model.set_params(tol=FOLD_TOL)
    return model


def as_host_array(predicted: Any) -> np.ndarray:
    """A prediction of any family as a float64 host array."""
    if hasattr(predicted, "to_numpy"):
        predicted = predicted.to_numpy()
    return np.asarray(to_numpy(predicted), dtype=np.float64)


def held_out_probabilities(predicted: Any, n_rows: int) -> np.ndarray:
    """A candidate's prediction of a held-out fold as a float64 host array, checked: one probability
    per row, finite and in [0, 1]. ``ValueError`` otherwise, which fails that candidate alone (a
    custom estimator predicting NaN once ended the whole search in the held-out metric)."""
    values = check_probabilities(as_host_array(predicted), "the candidate's held-out predictions")
    if values.shape[0] != n_rows:
        msg = f"the candidate predicted {values.shape[0]} values for {n_rows} held-out rows"
        raise ValueError(msg)
    return values


#: A rung of at most this many rows cuts each fold's rows once for all its candidates, which then hold
#: one copy of ``X`` per fold through the rung (every rung of a set of up to this many rows, its last,
#: every-row rung included); on more, each candidate cuts its own and no copies are kept.
SHARED_FOLD_ROWS = 200_000


@dataclass(frozen=True)
class FoldRows:
    """One fold's rows: the training rows' ``X``, labels and weights; the held-out rows' ``X``, positions,
    and labels and weights on the host (``w_test`` None: unit weights)."""

    X_train: Any
    y_train: Any
    w_train: Any
    X_test: Any
    test: np.ndarray
    y_test: np.ndarray
    w_test: np.ndarray | None


@dataclass(frozen=True)
class CrossFitting:
    """What every candidate of one search is cross-fitted on: the checked rows, the folds, the settings.

    Attributes
    ----------
    X, labels, weights
        The rows (``weights`` None: unit weights).
    X_rows : numpy.ndarray or None
        The positions among the rows of ``X``'s rows, increasing, when ``X`` holds only some (a host
        copy of the rows a rung reads); None when it holds every row.
    folds : numpy.ndarray
        Each row's fold, -1 for rows outside the cross-fitted subsample.
    oof_predictions : numpy.ndarray of shape (n_rows, n_candidates)
        Filled column by column with each candidate's held-out predictions.
    row_losses : numpy.ndarray of shape (n_rows, n_candidates) or None
        Filled alongside with each held-out row's ``scoring`` loss (``gpucal.auto.report.ROW_LOSSES``),
        which racing and the rung's rules compare; None when ``scoring`` has no per-row loss.
    n_folds, scoring, drop_threshold, verbose
        The estimator's resolved settings.
    loose : bool
        Fold fits of :data:`FOLD_TOL_CLASSES` stop at :data:`FOLD_TOL` (:func:`fold_estimator`): on a
        large set, where each is a Newton over many rows.
    fold_cache : dict
        The rows of each fold already cut (:meth:`fold_rows`), shared by the rung's candidates.
    fit_memos : dict
        Per fold of ``fold_cache``, what the candidates' fits on its rows share (:meth:`sharing`).
    done_cache : dict
        Per number of folds, the positions of the rows they hold out (:meth:`done_rows`).
    """

    X: Any
    labels: Any
    weights: Any
    folds: np.ndarray
    oof_predictions: np.ndarray
    row_losses: np.ndarray | None
    n_folds: int
    scoring: str
    drop_threshold: float | None
    verbose: int
    loose: bool = False
    X_rows: np.ndarray | None = None
    fold_cache: dict[int, FoldRows] = field(default_factory=dict)
    fit_memos: dict[int, dict[Any, Any]] = field(default_factory=dict)
    done_cache: dict[int, np.ndarray] = field(default_factory=dict)

    def fold_rows(self, fold: int) -> FoldRows:
        """The training and held-out rows of ``fold``; cut once and kept for the rung's other candidates
        when the rung has at most :data:`SHARED_FOLD_ROWS` rows (the copies of ``X`` stay small)."""
        cut = self.fold_cache.get(fold)
        if cut is not None:
            return cut
        # Rows outside the cross-fitted subsample have fold -1: in no training set, in no test fold.
        train = np.flatnonzero((self.folds >= 0) & (self.folds != fold))
        test = np.flatnonzero(self.folds == fold)
        cut = FoldRows(
            X_train=select_rows(self.X, self._X_positions(train)),
            y_train=entries_at(self.labels, train),
            w_train=entries_at(self.weights, train),
            X_test=select_rows(self.X, self._X_positions(test)),
            test=test,
            y_test=to_numpy(entries_at(self.labels, test)),
            w_test=None if self.weights is None else to_numpy(entries_at(self.weights, test)),
        )
        if train.shape[0] + test.shape[0] <= SHARED_FOLD_ROWS:
            self.fold_cache[fold] = cut
        return cut

    def _X_positions(self, rows: np.ndarray) -> np.ndarray:
        """``X``'s own positions of the rows at positions ``rows`` (each one of :attr:`X_rows`)."""
        if self.X_rows is None:
            return rows
        positions = np.searchsorted(self.X_rows, rows)
        check_invariant(
            bool(np.all(self.X_rows[np.minimum(positions, self.X_rows.shape[0] - 1)] == rows)),
            "a rung's rows lie outside the rows copied for it",
        )
        return positions

    def done_rows(self, n_done: int) -> np.ndarray:
        """The positions, increasing, of the rows folds ``0 .. n_done - 1`` hold out; found once per
        rung and kept (racing compares the candidates on them after each fold)."""
        rows = self.done_cache.get(n_done)
        if rows is None:
            rows = np.flatnonzero((self.folds >= 0) & (self.folds < n_done))
            self.done_cache[n_done] = rows
        return rows

    def sharing(self, fold: int) -> AbstractContextManager[None]:
        """The context of a candidate's fit on ``fold``'s rows: where the rung keeps them
        (:meth:`fold_rows`), feature-aware Platt fits on them share their encoding and screens
        (``gpucal.calibrators.feature_platt.sharing_fits``), kept as long as the rows are."""
        if fold not in self.fold_cache:
            return nullcontext()
        return sharing_fits(self.fit_memos.setdefault(fold, {}))


def cross_fit_candidate(
    search: CrossFitting, index: int, candidate: Candidate, *, reference: int | None
) -> dict[str, Any]:
    """Fit ``candidate`` (number ``index``) on all folds but one in turn; fill its column of
    ``search.oof_predictions``; return its report row.

    Stops early (``search.drop_threshold``) when it trails candidate ``reference``, the best so far.
    """
    weights = search.weights
    oof_predictions, n_folds, scoring = search.oof_predictions, search.n_folds, search.scoring
    row_losses = search.row_losses
    verbose, n_candidates = search.verbose, oof_predictions.shape[1]
    per_fold: dict[str, list[float]] = {name: [] for name in METRICS}
    seconds = 0.0
    for fold in range(n_folds):
        fold_started = time.perf_counter()
        cut = search.fold_rows(fold)
        test = cut.test
        try:
            model = fold_estimator(candidate.estimator) if search.loose else fresh(candidate.estimator)
            # The fold's rows are rows of the X whose feature columns AutoCalibrator.fit compared with the
            # labels on every row: the fit does not compare them again.
            with search.sharing(fold), trusting_feature_cols():
                model.fit(cut.X_train, cut.y_train, sample_weight=cut.w_train)
            predicted = held_out_probabilities(model.predict(cut.X_test), test.shape[0])
        except CANDIDATE_ERRORS as error:
            status = f"error: {type(error).__name__}: {error}"
            _forget(search, index)
            if verbose:
                log(f"{index + 1}/{n_candidates} {candidate.label}: fold {fold + 1} failed ({status})")
            failed = report_row(
                candidate, status, None, seconds + time.perf_counter() - fold_started, scoring
            )
            return failed
        seconds += time.perf_counter() - fold_started
        # Through the candidate's column, contiguous in the column-major tables.
        oof_predictions[:, index][test] = predicted
        losses = {name: loss(cut.y_test, predicted) for name, loss in ROW_LOSSES.items()}
        if row_losses is not None:
            row_losses[:, index][test] = losses[scoring]
        for name, value in fold_scores(cut.y_test, predicted, cut.w_test, losses).items():
            per_fold[name].append(value)
        if verbose >= 2:
            log(
                f"{index + 1}/{n_candidates} {candidate.label}: fold {fold + 1}/{n_folds} "
                f"{scoring} {per_fold[scoring][-1]:.5f} "
                f"({time.perf_counter() - fold_started:.1f} s)"
            )
        n_done = fold + 1
        trailing = trailing_reason(
            scoring, search.drop_threshold, row_losses, index, reference, search.done_rows(n_done), weights
        )
        if n_done < n_folds and trailing is not None:
            _forget(search, index)
            row = report_row(candidate, f"dropped after {n_done} fold(s)", per_fold, seconds, scoring)
            if verbose:
                log(
                    f"{index + 1}/{n_candidates} {candidate.label}: dropped after {n_done} fold(s), "
                    f"{trailing}, {seconds:.1f} s"
                )
            return row
    row = report_row(candidate, "ok", per_fold, seconds, scoring)
    if verbose:
        log(
            f"{index + 1}/{n_candidates} {candidate.label}: {scoring} "
            f"{row[f'mean_test_{scoring}']:.5f} +- {row[f'std_test_{scoring}']:.5f} over "
            f"{n_folds} folds, {seconds:.1f} s"
        )
    return row


def _forget(search: CrossFitting, index: int) -> None:
    """Blank candidate ``index``'s column of the out-of-fold predictions and row losses (failed, dropped)."""
    search.oof_predictions[:, index] = np.nan
    if search.row_losses is not None:
        search.row_losses[:, index] = np.nan


def best_per_method(usable: np.ndarray, scores: np.ndarray, candidates: list[Candidate]) -> np.ndarray:
    """The best-scoring candidate of each method among ``usable``: a large set's blend pool.

    Two settings of one method predict nearly alike, and each blend member costs a refit on every row
    (two feature-aware Platt members took 1.2 of the 2.4 s of a 150,000-row fit).
    """
    best: dict[str, int] = {}
    for i in usable:
        name = candidates[int(i)].name
        if name not in best or scores[i] < scores[best[name]]:
            best[name] = int(i)
    return np.array(sorted(best.values()), dtype=np.int64)


#: Two candidates whose out-of-fold logits differ by less than this on every cross-fitted row are twins.
TWIN_LOGIT_TOL = 1e-6


def grows_with_rows(candidate: Candidate) -> bool:
    """Whether ``candidate`` chooses its crosses on the rows it is fitted on (``interactions="auto"``)."""
    return bool(getattr(candidate.estimator, "interactions", None) == "auto")


def _twins(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two columns of out-of-fold logits agree to :data:`TWIN_LOGIT_TOL` on every row."""
    return bool(np.abs(a - b).max() < TWIN_LOGIT_TOL)


def growing_twins(
    usable: np.ndarray, oof_predictions: np.ndarray, crossed: np.ndarray, candidates: list[Candidate]
) -> np.ndarray:
    """``usable`` with one candidate of each group of twins: the first listed, or a second-order
    feature-aware Platt candidate over its first-order twin.

    A second-order candidate (``interactions="auto"``) whose screen kept no pair on the cross-fitted
    rows predicts as the first-order candidate with the same ``l2`` (twins: logits within
    :data:`TWIN_LOGIT_TOL`); their scores tie, and the first listed, the first-order one, would be
    chosen. Refitted on every row the second-order one screens its pairs again, on more rows, and keeps
    those expected to pay: on ``make_ctr``'s mixed scenario (150,000 rows, with a last rung of 40,000) the
    refit keeps ``hour x device``, 0.11379 against 0.11438 for the first-order twin. So of twins the
    second-order one stays.
    """
    columns = {int(i): logits(oof_predictions[crossed, i]) for i in usable}
    kept: list[int] = []
    for i in columns:
        twin = next((k for k in kept if _twins(columns[k], columns[i])), None)
        if twin is None:
            kept.append(i)
        elif grows_with_rows(candidates[i]) and not grows_with_rows(candidates[twin]):
            kept[kept.index(twin)] = i
    return np.array(sorted(kept), dtype=np.int64)


def growing_stand_ins(
    kept: set[int],
    usable: list[int],
    oof_predictions: np.ndarray,
    crossed: np.ndarray,
    candidates: list[Candidate],
) -> set[int]:
    """``kept`` with each candidate that has a second-order twin among ``usable`` replaced by that twin.

    On a large set's screening rung: the first-order feature-aware Platt candidate and a second-order
    one whose screen kept no pair predict alike (:func:`growing_twins`); on the next rung's rows the
    second-order one either keeps no pair again (the same predictions) or keeps pairs expected to pay,
    and of twins on the last rung it is the one kept. So only it goes on, and the first-order twin's
    folds there are saved. A second-order twin already in ``kept`` stands in; else the first listed.
    """
    columns = {i: logits(oof_predictions[crossed, i]) for i in usable}
    out = set(kept)
    for i in sorted(kept):
        if grows_with_rows(candidates[i]):
            continue
        twins = [k for k in usable if grows_with_rows(candidates[k]) and _twins(columns[k], columns[i])]
        if twins:
            out.discard(i)
            if not out.intersection(twins):
                out.add(twins[0])
    return out


def distinct_growing(
    usable: list[int], oof_predictions: np.ndarray, crossed: np.ndarray, candidates: list[Candidate]
) -> list[int]:
    """The second-order candidates of ``usable`` (:func:`grows_with_rows`) less each twin of one listed
    before it.

    Two second-order feature-aware Platt candidates whose screens kept no pair on a rung's rows predict
    alike whatever their ``l2_cross`` (twins: logits within :data:`TWIN_LOGIT_TOL`); on the next rung
    they screen the same pairs, and only their penalty on the kept crosses can part them. The first
    listed, the least shrunk, goes on: on every ``make_ctr`` set of 150,000 rows whose crosses pay it
    was chosen over ``l2_cross=100``, which the last rung's racing stopped after its first fold.
    """
    columns = {i: logits(oof_predictions[crossed, i]) for i in usable if grows_with_rows(candidates[i])}
    kept: list[int] = []
    for i, column in columns.items():
        if not any(_twins(columns[k], column) for k in kept):
            kept.append(i)
    return kept


__all__ = [
    "CANDIDATE_ERRORS",
    "FOLD_TOL",
    "FOLD_TOL_CLASSES",
    "SHARED_FOLD_ROWS",
    "TWIN_LOGIT_TOL",
    "CrossFitting",
    "FoldRows",
    "as_host_array",
    "best_per_method",
    "cross_fit_candidate",
    "distinct_growing",
    "entries_at",
    "fold_estimator",
    "fresh",
    "growing_stand_ins",
    "growing_twins",
    "grows_with_rows",
    "held_out_probabilities",
    "log",
]

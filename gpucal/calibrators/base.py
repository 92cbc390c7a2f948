"""The shell every gpucal calibrator shares: parameters, input handling, fitted state, saving.

A calibrator is a scikit-learn estimator (``get_params``, ``set_params`` and ``clone`` come from
``sklearn.base.BaseEstimator``, which reads the ``__init__`` signature: there is no second list of
names). Subclasses add three things:

- ``_parameter_constraints``: one table, checked when ``fit`` starts (never in ``__init__``), with
  the message template ``The 'n_bins' parameter of HistogramCalibrator must be ...``;
- ``_state_spec``: the fitted attributes and their kinds; it is what ``save`` writes and what
  ``gpucal.load`` checks before anything is set (``gpucal.persistence``);
- ``_fit(rows)`` (the fit written once over :class:`gpucal.rows.Rows` of ``X``, ``y``,
  ``sample_weight``: one block on one machine, a block per dask partition) or ``_fit_scores`` (array
  code on validated float64 arrays of one machine), and ``_predict_scores``.

Every ``fit``, the base's and each subclass's own, runs :func:`check_fit_rows` first: a required ``y``
is given, and pandas ``X``, ``y`` and ``sample_weight`` share one index (never paired by position).

Dask: :meth:`Calibrator.fit` and :meth:`Calibrator.predict` accept dask collections (the one place
that does). ``predict`` maps ``_predict_scores`` over the partitions (``map_partitions``), so every
fitted one-dimensional calibrator predicts distributed (:func:`predict_partitions`). A calibrator with
``_fit(rows)`` (Platt, beta, temperature, histogram binning, isotonic regression) fits any input through
it; the others raise ``NotImplementedError`` on dask inputs rather than gathering the rows on one worker.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import ClassifierTags, Tags
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace
from gpucal._frames import InputInfo, ParsedInput, parse_input, wrap_output
from gpucal._params import AnyOf, Interval, Options, check_param
from gpucal._validation import (
    check_consistent_length,
    check_invariant,
    check_labels,
    check_same_index,
    check_sample_weight,
)
from gpucal.rows import Rows, as_rows
from gpucal.rows.collections import any_dask, collection_kind, no_distributed_fit

Constraint = Interval | Options | AnyOf
#: The options every calibrator taking a score and returning probabilities shares.
SCORE_KIND_OPTIONS = Options("probability", "logit")
OUTPUT_TYPE_OPTIONS = Options("input", "numpy", "cupy", "pandas", "cudf", "polars", "pyarrow")

#: The arguments of ``fit`` that hold one value per row, checked together for index alignment (``groups``:
#: AutoCalibrator's folds; a column name there has no index); a calibrator that takes a second set of
#: rows names them with the suffix ``_tree`` (``X_tree``, ...).
ROW_ARGUMENTS = ("X", "y", "sample_weight", "groups")
#: A fit's parameter record (a dataclass, :meth:`Calibrator._params_as`).
P = TypeVar("P")
ROW_ARGUMENT_SUFFIXES = ("", "_tree")


def check_fit_rows(fit: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ``fit`` so its row arguments are checked before anything else runs.

    A ``y`` the signature requires must not be None (scikit-learn's wording), and pandas row
    arguments must share one index (:func:`gpucal._validation.check_same_index`). :class:`Calibrator`
    applies it to every ``fit`` a subclass defines, so the rule holds for every estimator without a
    line in any of them.
    """
    signature = inspect.signature(fit)
    requires_y = "y" in signature.parameters and signature.parameters["y"].default is inspect.Parameter.empty

    @functools.wraps(fit)
    def checked_fit(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind_partial(*args, **kwargs).arguments
        if requires_y and arguments.get("y") is None:
            check_labels(None, "y")  # raises the one message for a missing target
        for suffix in ROW_ARGUMENT_SUFFIXES:
            check_same_index(**{name + suffix: arguments.get(name + suffix) for name in ROW_ARGUMENTS})
        fitted = fit(*args, **kwargs)
        if isinstance(fitted, Calibrator):
            fitted._remember_fit_params()
        return fitted

    return checked_fit


def _param_changed(value: Any, fitted: Any) -> bool:
    """Whether a parameter differs from its value at the fit. Lists of columns, however given (list,
    tuple, numpy array, pandas Index), are compared as lists: equal names are the same columns."""
    if _listed(value) and _listed(fitted):
        return list(value) != list(fitted)
    if _listed(value) or _listed(fitted):
        return True
    return bool(value != fitted)


def _listed(value: Any) -> bool:
    """Whether a parameter lists values (a list, tuple, array or Index; not a string or a mapping)."""
    return (
        not isinstance(value, str | bytes | Mapping)
        and hasattr(value, "__len__")
        and hasattr(value, "__iter__")
    )


#: ``BaseEstimator._get_param_names`` of each class, read once.
_PARAM_NAMES: dict[type, tuple[str, ...]] = {}


def _param_names(cls: type) -> tuple[str, ...]:
    """``BaseEstimator._get_param_names`` of ``cls``, once per class."""
    names = _PARAM_NAMES.get(cls)
    if names is None:
        names = _PARAM_NAMES[cls] = tuple(BaseEstimator._get_param_names.__func__(cls))
    return names


class Calibrator(BaseEstimator):
    """Base class of the calibrators: validated parameters, 1-D score input, JSON state.

    Subclasses that take features override :meth:`fit` and :meth:`_predict_local` (those returning a
    2-D probability matrix, :meth:`predict`) but keep the parameter and state machinery.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}
    _state_spec: ClassVar[dict[str, str]] = {}
    #: Parameters ``predict`` reads with the fitted state (:meth:`_fitted_param`).
    _state_params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every ``fit`` a subclass defines the row checks (:func:`check_fit_rows`)."""
        super().__init_subclass__(**kwargs)
        if "fit" in cls.__dict__:
            cls.fit = check_fit_rows(cls.__dict__["fit"])  # type: ignore[method-assign]

    def __sklearn_tags__(self) -> Tags:
        """scikit-learn's tags: a label is required and labels are binary (0/1, or soft in [0, 1]).

        ``classifier_tags.multi_class=False`` is how scikit-learn's checks learn that ``y`` holds two
        classes; a calibrator is still no classifier (``predict`` returns probabilities). The
        multi-class forms (``DirichletCalibrator``, ``TemperatureCalibrator`` on a matrix) take two
        classes too; their ``k``-class fits are tested on their own.
        """
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags

    # ----------------------------------------------------------------------------------------------
    # Parameters

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """scikit-learn's parameter names (``__init__``'s keyword arguments, sorted), read once per class.

        scikit-learn reads the signature on every ``get_params`` and ``clone``; the automatic
        calibrator's search makes hundreds of those, 3% of its fit on a large set.
        """
        return list(_param_names(cls))

    def _validate_params(self) -> None:
        """Check every parameter against ``_parameter_constraints``."""
        for name, constraint in self._parameter_constraints.items():
            check_param(type(self).__name__, name, getattr(self, name), constraint)

    def _remember_fit_params(self) -> None:
        """Keep the parameters the fitted state was made with (after a fit, or a load), for
        :meth:`_fitted_param`."""
        self._params_at_fit = self.get_params(deep=False)

    def _fitted_param(self, name: str) -> Any:
        """The parameter ``name``, which ``predict`` reads with the fitted state; ``ValueError`` when
        ``set_params`` changed it since the fit (``mode="boosted"`` on a fitted forest chained its trees
        silently)."""
        value = getattr(self, name)
        fitted = getattr(self, "_params_at_fit", {}).get(name, value)
        if value is not fitted and _param_changed(value, fitted):
            msg = (
                f"{type(self).__name__}: {name}={value!r}, but the model was fitted with {name}={fitted!r}, "
                f"which its fitted state holds; refit it, or set {name} back"
            )
            raise ValueError(msg)
        return value

    def _params_as(self, params_class: type[P], **resolved: Any) -> P:
        """Return the fit's parameter record ``params_class`` (a dataclass): each field the value in
        ``resolved`` (what the fit resolved: columns, backend, sizes) or else the parameter of its name
        (fields that are neither keep their default), so the record's fields are the one list of what
        the fit reads."""
        params = set(self._get_param_names())
        names = [f.name for f in dataclasses.fields(params_class)]  # type: ignore[arg-type]
        return params_class(**{**{n: getattr(self, n) for n in names if n in params}, **resolved})

    # ----------------------------------------------------------------------------------------------
    # Input

    def _parse_input(self, X: Any, *, allow_empty: bool = False, scan: bool = True) -> ParsedInput:
        """Validate a 1-D ``X`` or ``X[score_col]``: the float64 score and the input's description
        (``scan`` as in :func:`gpucal._frames.parse_input`)."""
        return parse_input(
            X,
            score_col=getattr(self, "score_col", "score"),
            feature_cols=[],
            score_kind=getattr(self, "score_kind", "probability"),
            allow_empty=allow_empty,
            scan=scan,
        )

    def _score_input(self, X: Any) -> Any:
        """Return the validated float64 score of a 1-D ``X`` or of ``X[score_col]``."""
        return self._parse_input(X).score

    def _fit_input(self, X: Any, y: Any, sample_weight: Any) -> tuple[Any, Any, Any]:
        """Validate ``(X, y, sample_weight)`` for a fit: scores, labels, weights of one length."""
        score = self._score_input(X)
        labels = check_labels(y, "y")
        check_consistent_length(X=score, y=labels)
        weights = check_sample_weight(sample_weight, score.shape[0], xp=array_namespace(score))
        return score, labels, weights

    # ----------------------------------------------------------------------------------------------
    # The estimator API for one-dimensional calibrators

    @check_fit_rows
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> Calibrator:
        """Fit the calibrator on scores ``X`` (or ``X[score_col]``), labels ``y`` and optional weights.

        Parameters
        ----------
        X : array-like of shape (n,) or dataframe
            Scores, or a dataframe holding them in the ``score_col`` column.
        y : array-like of shape (n,)
            Labels in {0, 1}; soft labels in [0, 1] count as that fraction of a positive.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        self._validate_params()
        if type(self)._fit is not Calibrator._fit:
            self._fit(as_rows(X=X, y=y, sample_weight=sample_weight))
            return self
        if any_dask(X, y, sample_weight):
            raise no_distributed_fit(self)  # before any pass over the partitions
        score, labels, weights = self._fit_input(X, y, sample_weight)
        self._fit_scores(score, labels, weights)
        return self

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities for ``X``, in ``X``'s family (pandas in, pandas out).

        Parameters
        ----------
        X : array-like of shape (n,) or dataframe
            Scores, or a dataframe holding them in the ``score_col`` column (and, for a calibrator
            that reads features, every feature column seen in ``fit``; other columns are ignored). A
            dask collection gives a dask collection of its partitions' predictions.

        Returns
        -------
        array or Series of shape (n,)
            Calibrated probabilities in [0, 1].
        """
        lazy = self._predict_partitions(X)
        if lazy is not None:
            return lazy
        calibrated, info = self._predict_local(X)
        return wrap_output(
            calibrated,
            info,
            output_type=getattr(self, "output_type", "input"),
            fresh=self._predicts_fresh_arrays,
        )

    #: Whether ``_predict_local`` always returns a new array no one else holds, which a pandas Series
    #: may then wrap without a copy (see :func:`gpucal._frames.wrap_output`).
    _predicts_fresh_arrays = False

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        """The calibrated probabilities of a fitted calibrator on a local (not dask) ``X``, with ``X``'s
        description for :func:`gpucal._frames.wrap_output`; a calibrator reading more than the score
        overrides this, not :meth:`predict`.

        Where :meth:`_scans_scores_in_predict` says so, the scores are read once: unscanned, then mapped
        and checked in one pass (:meth:`_predict_and_scan`); when that pass refuses a score, the scan
        of :meth:`_parse_input` raises the check's message.
        """
        scanned = not self._scans_scores_in_predict()
        split = self._parse_input(X, allow_empty=True, scan=scanned)
        if scanned:
            return self._predict_scores(split.score), split.info
        calibrated, n_refused = self._predict_and_scan(split.score)
        if n_refused:
            self._parse_input(X, allow_empty=True)
            check_invariant(False, "a compiled pass refused a score that the checks accept")
        return calibrated, split.info

    def _scans_scores_in_predict(self) -> bool:
        """Whether :meth:`_predict_and_scan` maps unscanned scores (``scan=False`` in
        ``gpucal._validation``) and checks them in the same pass; False unless a subclass says so."""
        return False

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        """:meth:`_predict_scores` of unscanned float64 scores, and the number of scores the scan of
        :meth:`_parse_input` refuses (for probabilities: not in [0, 1], NaN included), from one pass."""
        raise NotImplementedError

    def _predict_partitions(self, X: Any) -> Any:
        """Check the fit; for a dask ``X`` return ``predict`` mapped over its partitions (lazy), else None."""
        check_is_fitted(self, list(self._state_spec))
        if not any_dask(X):
            return None
        return predict_partitions(self, X)

    def _fit(self, rows: Rows) -> None:
        """Fit from the rows of ``X``, ``y`` and ``sample_weight`` (``gpucal.rows.as_rows``), the same code
        on one machine and over dask partitions; sets the attributes of ``_state_spec``.

        Calibrators that keep this default fit from arrays (:meth:`_fit_scores`).
        """
        raise NotImplementedError

    def _fit_scores(self, score: Any, y: Any, sample_weight: Any) -> None:
        """Fit from validated float64 arrays; sets the attributes of ``_state_spec``."""
        raise NotImplementedError

    def _predict_scores(self, score: Any) -> Any:
        """Map validated float64 scores to calibrated probabilities."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------------
    # Saving

    def save(self, path: Any) -> None:
        """Write the fitted calibrator to ``path`` as JSON (no pickle); read it back with ``gpucal.load``."""
        from gpucal.persistence import save

        save(self, path)


def predict_partitions(estimator: Any, X: Any) -> Any:
    """Return ``estimator.predict`` mapped over the partitions of ``X``: a dask Series or Array, lazily.

    Each partition is predicted in its own family (pandas or cudf partitions give a Series with the
    partition's index, numpy or cupy chunks an array), so ``output_type`` must be ``"input"``.
    """
    output_type = getattr(estimator, "output_type", "input")
    if output_type != "input":
        msg = (
            f"output_type={output_type!r}: predictions on a dask collection are a dask collection of the "
            "input's partitions; use output_type='input'"
        )
        raise ValueError(msg)
    kind = collection_kind(X)
    if kind == "frame":
        return X.map_partitions(estimator.predict, meta=estimator.predict(X._meta))
    if kind == "array" and X.ndim == 1:
        return X.map_blocks(estimator.predict, dtype=np.float64, meta=X._meta.astype(np.float64))
    kind_name = f"{type(X).__module__}.{type(X).__qualname__}"
    msg = f"X: cannot predict on {kind_name}; expected a dask DataFrame, Series or 1-D Array"
    raise TypeError(msg)


__all__ = [
    "OUTPUT_TYPE_OPTIONS",
    "SCORE_KIND_OPTIONS",
    "AnyOf",
    "Calibrator",
    "Constraint",
    "Interval",
    "Options",
    "predict_partitions",
]

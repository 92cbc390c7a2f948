r"""Temperature scaling: one positive temperature for a probability's logit or for multi-class logits.

.. math::

    \text{binary: } \hat p = \sigma\big(\operatorname{logit}(p) / T\big), \qquad
    \text{multi-class: } \hat{\mathbf p} = \operatorname{softmax}(\mathbf z / T).

The fit is over :math:`\beta = 1/T`: the log-loss is convex in :math:`\beta`, so damped Newton steps
from row sums of the gradient and the curvature find it, inside scikit-learn's bounds
:math:`\beta \in [e^{-10}, e^{10}]`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array
from gpucal._validation import check_class_labels, check_finite, check_row_mask, check_sample_weight
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, SCORE_KIND_OPTIONS, Calibrator, Constraint
from gpucal.calibrators.logistic import (
    CHUNK_ROWS,
    EPS,
    FEATURES_COLUMNS,
    FEATURES_LOGIT,
    newton_minimize,
    predict_logistic,
    predict_logistic_and_refused,
    use_numba,
)
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.kernels.jit import numba
from gpucal.persistence import MAX_LOADED_MAGNITUDE
from gpucal.registry import calibration_method
from gpucal.rows import Rows

# scikit-learn searches log(beta) in [-10, 10]; the same box keeps T finite and positive when the
# likelihood keeps improving as T -> 0 (separable data) or as T -> inf (scores unrelated to y).
LOG_BETA_BOUND = 10.0
BETA_BOUNDS = (math.exp(-LOG_BETA_BOUND), math.exp(LOG_BETA_BOUND))
# Rows of a probability matrix must sum to 1 within this (absolute) tolerance.
ROW_SUM_TOL = 1e-6


# --------------------------------------------------------------------------------------------------
# Multi-class inputs


def as_2d_scores(X: Any, name: str = "X", *, score_kind: str = "probability") -> Any:
    """Return an ``(n, k)`` float64 matrix of log-probabilities or logits (numpy or cupy), validated.

    Probabilities must be finite, in [0, 1], with rows summing to 1 (within ``ROW_SUM_TOL``); they
    are returned as :math:`\\ln \\max(p, \\epsilon)` with :math:`\\epsilon` machine epsilon. Logits
    only need to be finite.
    """
    if is_cupy_array(X):
        arr = X
    elif hasattr(X, "to_cupy"):  # cudf dataframes stay on the device
        arr = X.to_cupy()
    elif hasattr(X, "to_numpy"):  # pandas / polars dataframes
        arr = X.to_numpy()
    elif hasattr(X, "column_names"):  # pyarrow Table / RecordBatch
        arr = np.column_stack([np.asarray(c) for c in X.columns]) if X.num_columns else np.empty((0, 0))
    else:
        arr = np.asarray(X)
    xp = array_namespace(arr)
    if arr.ndim != 2 or arr.shape[1] < 2:
        msg = f"{name}: expected a 2-D matrix with one column per class (at least 2), got shape {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind not in "biuf":
        msg = f"{name}: expected numbers, got dtype {arr.dtype}"
        raise TypeError(msg)
    arr = xp.asarray(arr, dtype=xp.float64)
    if arr.shape[0] == 0:
        msg = f"{name}: no rows"
        raise ValueError(msg)
    check_finite(arr.ravel(), name)
    if score_kind == "logit":
        return xp.ascontiguousarray(arr)
    check_row_mask(
        ((arr < 0) | (arr > 1)).any(axis=1),
        lambda row: (
            f"{name}: probabilities must lie in [0, 1] (first bad row {row}); "
            "pass logits with score_kind='logit'"
        ),
    )
    check_row_mask(
        xp.abs(arr.sum(axis=1) - 1.0) > ROW_SUM_TOL,
        lambda row: (
            f"{name}: rows of a probability matrix must sum to 1 (row {row} sums to "
            f"{float(arr[row].sum())!r}); pass logits with score_kind='logit'"
        ),
    )
    return xp.log(xp.maximum(arr, EPS))


def check_several_classes(labels: Any, w: Any, n_classes: int, name: str = "y") -> None:
    """Raise ``ValueError`` when fewer than two classes carry weight (no finite fit exists)."""
    xp = array_namespace(labels, w)
    mass = xp.bincount(labels, weights=w, minlength=n_classes)
    if int(xp.count_nonzero(mass > 0)) < 2:
        msg = f"{name}: only one class has rows with non-zero weight; calibration needs at least two classes"
        raise ValueError(msg)


# --------------------------------------------------------------------------------------------------
# Multi-class row sums


@numba.njit(parallel=True, cache=True)
def _softmax_temperature_sums_cpu(Z, labels, w, beta):
    """Return ``[loss_sum, d/dbeta, d2/dbeta2]`` of the weighted softmax log-loss of ``beta * Z``."""
    n, k = Z.shape
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    partial = np.zeros((n_chunks, 3))
    for c in numba.prange(n_chunks):
        loss = 0.0
        grad = 0.0
        hess = 0.0
        for i in range(c * CHUNK_ROWS, min(n, (c + 1) * CHUNK_ROWS)):
            wi = w[i]
            if wi == 0.0:
                continue
            top = Z[i, 0]
            for j in range(1, k):
                top = max(top, Z[i, j])
            total = 0.0
            first = 0.0  # softmax-weighted mean of z
            second = 0.0  # softmax-weighted mean of z^2
            for j in range(k):
                e = math.exp(beta * (Z[i, j] - top))
                total += e
                first += e * Z[i, j]
                second += e * Z[i, j] * Z[i, j]
            first /= total
            second /= total
            zy = Z[i, labels[i]]
            loss += wi * (beta * (top - zy) + math.log(total))
            grad += wi * (first - zy)
            hess += wi * (second - first * first)
        partial[c, 0] = loss
        partial[c, 1] = grad
        partial[c, 2] = hess
    out = np.zeros(3)
    for c in range(n_chunks):
        for j in range(3):
            out[j] += partial[c, j]
    return out


def softmax_temperature_sums(
    Z: Any, labels: Any, w: Any, beta: float, *, backend: str = "auto"
) -> tuple[float, float, float]:
    r"""Row sums of the weighted log-loss of :math:`\operatorname{softmax}(\beta z)` and its derivatives.

    .. math::

        \ell_i = \log\sum_c e^{\beta z_{ic}} - \beta z_{i y_i}, \quad
        \ell_i' = \mathbb E_{q_i}[z] - z_{i y_i}, \quad
        \ell_i'' = \operatorname{Var}_{q_i}[z], \quad q_i = \operatorname{softmax}(\beta z_i).

    ``backend``: ``"numba"`` (fused CPU loop), ``"array"`` (numpy/cupy, the oracle and GPU path) or
    ``"auto"``.
    """
    xp = array_namespace(Z, labels, w)
    if use_numba(backend, Z, labels, w):
        out = _softmax_temperature_sums_cpu(
            np.ascontiguousarray(Z), np.ascontiguousarray(labels), np.asarray(w), float(beta)
        )
        return float(out[0]), float(out[1]), float(out[2])
    scaled = beta * Z
    top = scaled.max(axis=1, keepdims=True)
    e = xp.exp(scaled - top)
    total = e.sum(axis=1)
    q = e / total[:, None]
    first = (q * Z).sum(axis=1)
    second = (q * Z * Z).sum(axis=1)
    zy = xp.take_along_axis(Z, labels[:, None], axis=1)[:, 0]
    loss = xp.sum(w * (top[:, 0] + xp.log(total) - beta * zy))
    grad = xp.sum(w * (first - zy))
    hess = xp.sum(w * (second - first * first))
    return float(loss), float(grad), float(hess)


def fit_temperature_multiclass(Z: Any, labels: Any, w: Any, *, backend: str = "auto") -> float:
    """Return the temperature :math:`T = 1/\\beta` minimising the weighted log-loss of ``softmax(Z / T)``."""
    xp = array_namespace(Z, labels, w)

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        loss, grad, hess = softmax_temperature_sums(Z, labels, w, float(theta[0]), backend=backend)
        return loss, np.array([grad]), np.array([[hess]])

    result = newton_minimize(
        sums,
        np.ones(1),
        total_weight=float(xp.sum(w)),
        bounds=BETA_BOUNDS,
        what="TemperatureCalibrator",
    )
    return 1.0 / float(result.theta[0])


def softmax_with_temperature(Z: Any, temperature: float) -> Any:
    """Return ``softmax(Z / temperature)`` row by row (numpy or cupy)."""
    xp = array_namespace(Z)
    scaled = Z / temperature
    scaled -= scaled.max(axis=1, keepdims=True)
    out = xp.exp(scaled)
    out /= out.sum(axis=1, keepdims=True)
    return out


# --------------------------------------------------------------------------------------------------
# Binary


def fit_temperature_binary(score: Any, y: Any, w: Any, *, score_kind: str = "probability") -> float:
    """Return :math:`T` for :math:`\\sigma(x / T)`, ``x`` the logit of ``score`` or the margin itself."""
    return fit_temperature_rows(ScoreRows.of_arrays(score, y, w), score_kind=score_kind)


def fit_temperature_rows(rows: ScoreRows, *, score_kind: str = "probability") -> float:
    """:func:`fit_temperature_binary` on rows held anywhere (arrays on one device, or any ``gpucal.rows``)."""
    rows.check_two_classes()
    mode = FEATURES_LOGIT if score_kind == "probability" else FEATURES_COLUMNS
    fit = rows.fit(
        mode=mode,
        fit_intercept=False,
        theta0=np.ones(1),
        bounds=BETA_BOUNDS,
        what="TemperatureCalibrator",
    )
    return 1.0 / float(fit.coef[0])


def _is_matrix(X: Any, score_col: Any) -> bool:
    """True for a class-score matrix, False for binary input.

    A matrix is a 2-D array of two or more columns (unless ``score_col`` is an integer: then it
    names the score's column position) or a dataframe without a ``score_col`` column. An ``(n, 1)``
    array, a dataframe with ``score_col`` and a 1-D array are binary scores.
    """
    if is_cupy_array(X) or isinstance(X, np.ndarray | list | tuple):
        shape = X.shape if is_cupy_array(X) else np.shape(X)
        positional = isinstance(score_col, numbers.Integral) and not isinstance(score_col, bool)
        return len(shape) == 2 and shape[1] >= 2 and not positional
    if type(X).__module__.split(".")[0] not in ("pandas", "cudf", "polars", "pyarrow"):
        return False  # a dict of columns, a Series, a dask collection: binary input
    if type(X).__name__ not in ("DataFrame", "Table", "RecordBatch"):
        return False
    columns = X.column_names if hasattr(X, "column_names") else X.columns
    return score_col not in list(columns)


@calibration_method("temperature", fits_on_dask=True)
class TemperatureCalibrator(Calibrator):
    r"""Temperature scaling, binary or multi-class.

    .. math::

        \hat p = \sigma\big(x / T\big) \text{ (binary)}, \qquad
        \hat{\mathbf p} = \operatorname{softmax}(\mathbf z / T) \text{ (multi-class)},

    with :math:`x = \operatorname{logit}(p)` or a raw margin, and :math:`\mathbf z = \ln \mathbf p` or
    raw logits. One parameter, so the ranking (and the argmax) never changes.

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the score when ``X`` is a dataframe (binary case).
    score_kind : {"probability", "logit"}, default="probability"
        Binary: probabilities in [0, 1] (logit clipped at machine epsilon, :math:`\pm 36.04`) or raw
        margins. Multi-class: a probability matrix (rows sum to 1; :math:`\ln\max(p, \epsilon)` is
        used) or a logit matrix.
    output_type : str, default="input"
        Family of binary predictions (see ``gpucal._frames``); multi-class predictions are an
        ``(n, k)`` array of the input's namespace (numpy or cupy).

    Attributes
    ----------
    temperature_ : float
        :math:`T > 0`; above 1 softens over-confident scores, below 1 sharpens.
    n_classes_ : int
        2 for 1-D binary input, else the number of columns of the fitted matrix.
    multiclass_ : bool
        Whether it was fitted on a 2-D class-score matrix (and so predicts one).

    Notes
    -----
    Fit ``X`` as a 1-D score (an ``(n, 1)`` array, or a dataframe with ``score_col``) with labels in
    {0, 1}, or as an ``(n, k)`` matrix (an array, or a dataframe without ``score_col``, as
    :class:`~gpucal.calibrators.dirichlet.DirichletCalibrator` takes it) with integer class labels in
    ``[0, k)``. The weighted log-loss is minimised over
    :math:`\beta = 1/T` in scikit-learn's box :math:`[e^{-10}, e^{10}]`; scikit-learn 1.9
    (``CalibratedClassifierCV(..., method="temperature")``, ``_TemperatureScaling``) searches
    :math:`\log\beta` with a bounded Brent method, we take Newton steps on :math:`\beta` (convex), so
    the two agree to about 1e-8 relative (the precision of
    scipy's bounded Brent search). Differences: scikit-learn takes ``log(p + 1e-12)`` of
    probabilities, we take :math:`\ln \max(p, \epsilon)`; on a binary *margin* scikit-learn builds the
    two logits :math:`(-s, s)`, so its :math:`\beta` is our :math:`1/(2T)` (same predictions). One
    class only raises ``ValueError``.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger, "On calibration of modern neural networks",
       Proceedings of the 34th International Conference on Machine Learning (ICML), PMLR 70,
       pp. 1321-1330, 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.temperature import TemperatureCalibrator
    >>> p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.6, 0.3, 0.1]])
    >>> cal = TemperatureCalibrator().fit(p, [0, 1, 2, 1])
    >>> cal.predict(p).shape
    (4, 3)
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "score_kind": SCORE_KIND_OPTIONS,
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "temperature_": "float",
        "n_classes_": "int",
        "multiclass_": "bool",
    }

    def __init__(
        self, *, score_col: str = "score", score_kind: str = "probability", output_type: str = "input"
    ) -> None:
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> TemperatureCalibrator:
        """Fit on 1-D scores and 0/1 labels, or on an ``(n, k)`` matrix and class labels in ``[0, k)``.

        Parameters
        ----------
        X : array-like of shape (n,) or (n, k), or dataframe
            Binary scores (or a dataframe with ``score_col``), or a class-score matrix.
        y : array-like of shape (n,)
            Labels in {0, 1} (binary) or class indices (multi-class).
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        if self.score_col is None:
            msg = (
                "The 'score_col' parameter of TemperatureCalibrator must be a column name. Got None instead."
            )
            raise ValueError(msg)
        if not _is_matrix(X, self.score_col):
            super().fit(X, y, sample_weight)
            return self
        self._validate_params()
        Z = self._matrix(X)
        n, k = Z.shape
        labels = check_class_labels(y, n, k)
        w = check_sample_weight(sample_weight, n, xp=array_namespace(Z))
        check_several_classes(labels, w, k)
        self.temperature_ = fit_temperature_multiclass(Z, labels, w)
        self.n_classes_ = int(k)
        self.multiclass_ = True
        return self

    def _matrix(self, X: Any) -> Any:
        """``X`` as a class-score matrix; for a dataframe the error says it was read so for lack of
        ``score_col`` (a misspelt score column would otherwise read as a bad matrix)."""
        try:
            return as_2d_scores(X, score_kind=self.score_kind)
        except (TypeError, ValueError) as exc:
            if isinstance(X, np.ndarray | list | tuple) or is_cupy_array(X):
                raise
            columns = list(X.column_names if hasattr(X, "column_names") else X.columns)
            msg = (
                f"X: no score column {self.score_col!r} (set score_col=; columns: {columns}), so X was read "
                f"as a class-score matrix, one column per class, and {exc}"
            )
            raise type(exc)(msg) from None

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities: 1-D for binary fits, ``(n, k)`` for multi-class fits.

        Parameters
        ----------
        X : array-like of shape (n,) or (n, k), or dataframe
            Same kind of input as in :meth:`fit`.

        Returns
        -------
        array of shape (n,) or (n, k)
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, list(self._state_spec))
        if _is_matrix(X, self.score_col) != self.multiclass_:
            fitted = f"an (n, {self.n_classes_}) matrix" if self.multiclass_ else "1-D binary scores"
            got = "binary scores"
            if not self.multiclass_:
                got = f"a class-score matrix (X has no score column {self.score_col!r}; set score_col=)"
            msg = f"X: this calibrator was fitted on {fitted}; got {got}"
            raise ValueError(msg)
        if not self.multiclass_:
            return super().predict(X)
        Z = self._matrix(X)
        if Z.shape[1] != self.n_classes_:
            msg = f"X: has {Z.shape[1]} columns, the calibrator was fitted on {self.n_classes_} classes"
            raise ValueError(msg)
        return softmax_with_temperature(Z, self.temperature_)

    def _fit(self, rows: Rows) -> None:
        scores = ScoreRows.of(rows, self.score_col, self.score_kind)
        self.temperature_ = fit_temperature_rows(scores, score_kind=self.score_kind)
        self.n_classes_ = 2
        self.multiclass_ = False

    def _predict_scores(self, score: Any) -> Any:
        mode = FEATURES_LOGIT if self.score_kind == "probability" else FEATURES_COLUMNS
        return predict_logistic(score, [1.0 / self.temperature_], 0.0, mode=mode)

    def _scans_scores_in_predict(self) -> bool:
        return True

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        mode = FEATURES_LOGIT if self.score_kind == "probability" else FEATURES_COLUMNS
        coef = [1.0 / self.temperature_]
        return predict_logistic_and_refused(score, coef, 0.0, mode=mode, scan_kind=self.score_kind)

    def _check_state(self) -> None:
        if not 1.0 / MAX_LOADED_MAGNITUDE <= self.temperature_ <= MAX_LOADED_MAGNITUDE:
            # 5e-324 made every score an infinite logit (NaN where they were subtracted).
            msg = (
                f"temperature_ must lie in [{1.0 / MAX_LOADED_MAGNITUDE:g}, {MAX_LOADED_MAGNITUDE:g}], "
                f"got {self.temperature_!r}"
            )
            raise ValueError(msg)
        if self.n_classes_ < 2 or (not self.multiclass_ and self.n_classes_ != 2):
            msg = f"n_classes_ = {self.n_classes_} does not fit multiclass_ = {self.multiclass_}"
            raise ValueError(msg)

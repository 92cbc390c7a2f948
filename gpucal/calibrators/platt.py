r"""Platt scaling: a logistic map of the score's logit (or of a raw margin).

.. math::

    \hat p = \sigma\big(a \operatorname{logit}(p) + b\big) \quad\text{or}\quad \hat p = \sigma(a s + b),

fitted by weighted maximum likelihood with Newton steps from row sums (``gpucal.calibrators.logistic``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, SCORE_KIND_OPTIONS, Calibrator, Constraint, Options
from gpucal.calibrators.logistic import (
    FEATURES_COLUMNS,
    FEATURES_LOGIT,
    predict_logistic,
    predict_logistic_and_refused,
)
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.registry import calibration_method
from gpucal.rows import Rows


def platt_targets(y: Any, w: Any, *, smoothing: bool) -> tuple[float, float]:
    r"""Return Platt's targets :math:`(t_-, t_+)`; ``(0, 1)`` without smoothing.

    .. math::

        t_+ = \frac{N_+ + 1}{N_+ + 2}, \qquad t_- = \frac{1}{N_- + 2}, \qquad
        N_+ = \sum_i w_i y_i, \quad N_- = \sum_i w_i (1 - y_i)

    (Platt 1999, end of Sec. 2.2). Weights count as row multiplicities, as in scikit-learn, so
    integer weights give the targets of repeated rows; a soft label counts as that fraction of a
    positive.
    """
    if not smoothing:
        return 0.0, 1.0
    return platt_targets_from_sums(float(w.sum()), float(w @ y))


def platt_targets_from_sums(total_weight: float, positive_weight: float) -> tuple[float, float]:
    r"""Platt's smoothed targets from :math:`\sum w` and :math:`N_+ = \sum w y` (:func:`platt_targets`)."""
    n_neg = total_weight - positive_weight
    return 1.0 / (n_neg + 2.0), (positive_weight + 1.0) / (positive_weight + 2.0)


def fit_platt(
    score: Any, y: Any, w: Any, *, score_kind: str = "probability", target_smoothing: bool = True
) -> tuple[float, float]:
    """Return Platt's ``(a, b)`` for validated float64 arrays (numpy or cupy); see PlattCalibrator."""
    rows = ScoreRows.of_arrays(score, y, w)
    return fit_platt_rows(rows, score_kind=score_kind, target_smoothing=target_smoothing)


def fit_platt_rows(
    rows: ScoreRows, *, score_kind: str = "probability", target_smoothing: bool = True
) -> tuple[float, float]:
    """:func:`fit_platt` on rows held anywhere (arrays on one device, or any ``gpucal.rows``)."""
    rows.check_two_classes()
    low, high = rows.score_range()
    if low == high:
        # The slope is not identified: the Hessian is singular and any slope fits as well as another.
        msg = f"X: every score is {low!r}; Platt scaling needs at least two distinct scores"
        raise ValueError(msg)
    mode = FEATURES_LOGIT if score_kind == "probability" else FEATURES_COLUMNS
    targets = platt_targets_from_sums(*rows.label_sums()) if target_smoothing else (0.0, 1.0)
    fit = rows.fit(mode=mode, targets=targets, what="PlattCalibrator")
    return float(fit.coef[0]), fit.intercept


def predict_platt(score: Any, a: float, b: float, *, score_kind: str = "probability") -> Any:
    """Return :math:`\\sigma(a x + b)` with ``x = logit(clip(score))`` or the raw margin."""
    mode = FEATURES_LOGIT if score_kind == "probability" else FEATURES_COLUMNS
    return predict_logistic(score, [a], b, mode=mode)


@calibration_method("platt", aliases=("sigmoid",), fits_on_dask=True)
class PlattCalibrator(Calibrator):
    r"""Platt scaling (logistic calibration) of a probability's logit or of a raw margin.

    .. math::

        \hat p = \sigma\big(a\, x + b\big), \qquad
        x = \begin{cases} \log\frac{p}{1-p} & \text{score\_kind="probability"} \\
        s & \text{score\_kind="logit"} \end{cases}

    :math:`(a, b)` maximise the weighted likelihood of the (optionally smoothed) targets, by Newton
    steps whose gradient and Hessian are sums over rows (so the same fit runs on a GPU or over
    partitions).

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the score when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        ``"probability"``: scores in [0, 1], mapped through their logit (exact 0 and 1 are clipped to
        machine epsilon first, so their logit is :math:`\mp 36.04`, as in betacal);
        ``"logit"``: raw margins (any finite number), used as they are.
    target_smoothing : bool, default=True
        Fit to Platt's smoothed targets :math:`t_+ = (N_+ + 1)/(N_+ + 2)` and
        :math:`t_- = 1/(N_- + 2)` instead of 0 and 1. True by default because scikit-learn's
        ``method="sigmoid"`` (what users type) and Platt's paper use it, and it keeps the fit finite
        on separable data; on large calibration sets its effect vanishes (:math:`t_+ \to 1`).
        Weighted counts :math:`N_\pm = \sum w y`, :math:`\sum w (1-y)`, as scikit-learn.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    a_ : float
        Slope (positive when higher scores mean higher calibrated probabilities).
    b_ : float
        Intercept.

    See Also
    --------
    TemperatureCalibrator : the one-parameter map :math:`\sigma(x / T)`.
    BetaCalibrator : two slopes, for scores whose miscalibration is not symmetric.

    Notes
    -----
    Equal to scikit-learn's ``_SigmoidCalibration`` (the sigmoid calibrator of
    ``CalibratedClassifierCV``) when it is fed the same feature (``logit(p)``, or the margin) and
    ``target_smoothing=True``: scikit-learn writes :math:`\sigma(-(A f + B))`, so
    :math:`(A, B) = (-a, -b)`; the parameters agree to about 1e-9 relative (scikit-learn stops
    L-BFGS at a gradient of 1e-6 on the summed loss; Newton here stops once the error left is about
    1e-10). Where ``CalibratedClassifierCV`` calibrates a model that has only ``predict_proba``,
    scikit-learn feeds the probability itself, :math:`\sigma(-(A p + B))`, a different map; Platt's
    (and ours) is on the logit. One class only in ``y`` raises ``ValueError``: the maximum likelihood
    fit does not exist.
    Without smoothing, separable data has no finite fit either: the loss keeps falling as the slope
    grows, and the Newton steps stop where it no longer falls measurably, at a steep but finite map
    (as scikit-learn's L-BFGS does); a ``ConvergenceWarning`` is raised only if 100 steps are not
    enough.

    Sample weights enter the likelihood as row multiplicities (integer weights equal repeated
    rows) and, with smoothing, the counts :math:`N_\pm`.

    References
    ----------
    .. [1] J. Platt, "Probabilistic outputs for support vector machines and comparisons to
       regularized likelihood methods", in Advances in Large Margin Classifiers, MIT Press, 1999,
       pp. 61-74.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.platt import PlattCalibrator
    >>> p = np.array([0.1, 0.2, 0.4, 0.6, 0.8, 0.9])
    >>> y = np.array([0, 0, 1, 0, 1, 1])
    >>> cal = PlattCalibrator().fit(p, y)
    >>> bool(cal.a_ > 0)
    True
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "score_kind": SCORE_KIND_OPTIONS,
        "target_smoothing": Options(True, False),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"a_": "float", "b_": "float"}

    def __init__(
        self,
        *,
        score_col: str = "score",
        score_kind: str = "probability",
        target_smoothing: bool = True,
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.score_kind = score_kind
        self.target_smoothing = target_smoothing
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        self.a_, self.b_ = fit_platt_rows(
            ScoreRows.of(rows, self.score_col, self.score_kind),
            score_kind=self.score_kind,
            target_smoothing=self.target_smoothing,
        )

    def _predict_scores(self, score: Any) -> Any:
        return predict_platt(score, self.a_, self.b_, score_kind=self.score_kind)

    def _scans_scores_in_predict(self) -> bool:
        return True

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        mode = FEATURES_LOGIT if self.score_kind == "probability" else FEATURES_COLUMNS
        return predict_logistic_and_refused(score, [self.a_], self.b_, mode=mode, scan_kind=self.score_kind)

r"""Beta calibration (Kull, Silva Filho and Flach 2017): logistic regression on ``[ln p, -ln(1-p)]``.

.. math::

    \hat p = \sigma\big(a \ln p - b \ln(1 - p) + c\big)
           = \frac{1}{1 + 1 / \big(e^{c}\, p^{a} / (1 - p)^{b}\big)}.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Options
from gpucal.calibrators.logistic import (
    FEATURES_BETA,
    FEATURES_BETA_AB,
    FEATURES_LOGIT,
    LN2,
    predict_logistic,
    predict_logistic_and_refused,
)
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.registry import calibration_method
from gpucal.rows import Rows

PARAMETERS = ("abm", "ab", "am")


def fit_beta(score: Any, y: Any, w: Any, *, parameters: str = "abm") -> tuple[float, float, float]:
    """Return ``(a, b, c)`` of the beta map for probabilities ``score``; see :class:`BetaCalibrator`.

    ``"abm"`` fits ``[ln p, -ln(1-p)]`` with an intercept; when a slope comes out negative it refits
    on the other feature alone, with that slope set to 0 (betacal's rule: ``a < 0`` is checked
    first). ``"am"`` fits ``logit(p)`` with an intercept (``a = b``). ``"ab"`` fits
    ``[ln 2p, -ln 2(1-p)]`` without an intercept (midpoint ``m = 1/2``, so ``c = (a - b) ln 2``).
    """
    return fit_beta_rows(ScoreRows.of_arrays(score, y, w), parameters=parameters)


def fit_beta_rows(rows: ScoreRows, *, parameters: str = "abm") -> tuple[float, float, float]:
    """:func:`fit_beta` on rows held anywhere (arrays on one device, or any ``gpucal.rows``)."""
    rows.check_two_classes()
    low, high = rows.score_range()
    if low == high:
        # As for Platt scaling: on one score the slopes are not identified (any of them fits as well),
        # and the map they would give other scores is arbitrary.
        msg = f"X: every score is {low!r}; beta calibration needs at least two distinct scores"
        raise ValueError(msg)
    if parameters == "am":
        fit = rows.fit(mode=FEATURES_LOGIT, what="BetaCalibrator")
        slope = float(fit.coef[0])
        return slope, slope, fit.intercept
    if parameters == "ab":
        fit = rows.fit(mode=FEATURES_BETA_AB, fit_intercept=False, what="BetaCalibrator")
        a, b = float(fit.coef[0]), float(fit.coef[1])
        return a, b, (a - b) * LN2
    fit = rows.fit(mode=FEATURES_BETA, what="BetaCalibrator")
    a, b = float(fit.coef[0]), float(fit.coef[1])
    if a < 0:
        refit = rows.fit(mode=FEATURES_BETA, cols=[1], what="BetaCalibrator")
        return 0.0, float(refit.coef[0]), refit.intercept
    if b < 0:
        refit = rows.fit(mode=FEATURES_BETA, cols=[0], what="BetaCalibrator")
        return float(refit.coef[0]), 0.0, refit.intercept
    return a, b, fit.intercept


def predict_beta(score: Any, a: float, b: float, c: float) -> Any:
    """Return :math:`\\sigma(a \\ln p - b \\ln(1-p) + c)`, ``p`` clipped to machine epsilon."""
    return predict_logistic(score, np.array([a, b]), c, mode=FEATURES_BETA)


@calibration_method("beta", fits_on_dask=True)
class BetaCalibrator(Calibrator):
    r"""Beta calibration of probabilities: three parameters, or two in the "ab" / "am" variants.

    .. math::

        \hat p = \sigma\big(a \ln p - b \ln(1 - p) + c\big), \qquad
        c = b \ln(1 - m) - a \ln m,

    where :math:`m` is the score mapped to 1/2. The family contains the identity (:math:`a = b = 1,
    c = 0`) and, with :math:`a = b`, Platt scaling of the logit; unlike Platt it can correct scores
    whose miscalibration differs near 0 and near 1 (inverse-S shapes).

    Parameters
    ----------
    parameters : {"abm", "ab", "am"}, default="abm"
        ``"abm"``: all three (logistic regression on :math:`[\ln p, -\ln(1-p)]` with intercept);
        ``"ab"``: :math:`m = 1/2` fixed (no intercept on :math:`[\ln 2p, -\ln 2(1-p)]`);
        ``"am"``: :math:`a = b` (Platt scaling of :math:`\operatorname{logit} p`).
    score_col : str, default="score"
        Column holding the probability when ``X`` is a dataframe.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    a_, b_ : float
        Exponents of :math:`p` and :math:`1 - p`. With ``"abm"`` both are >= 0 after the refit rule,
        and the map is then non-decreasing.
    c_ : float
        Intercept of the logistic form (``(a - b) ln 2`` for ``"ab"``).

    Notes
    -----
    Follows the betacal package (1.1): probabilities are clipped to :math:`[\epsilon, 1 - \epsilon]`
    (machine epsilon) before the logarithms, and with ``"abm"`` a negative :math:`a` (checked first)
    or :math:`b` triggers a refit on the other feature alone with that coefficient set to 0. The
    refit's own coefficient is kept even if negative, as betacal does. betacal fits with
    scikit-learn's ``LogisticRegression(C=99999999999)`` (L-BFGS stopping at ``tol=1e-4``); we take
    Newton steps to convergence (no penalty), so outputs agree to about 1e-6 and match a tightly
    converged betacal fit to about 1e-9. Scores must be probabilities (there is no ``score_kind``):
    the map is defined on :math:`(0, 1)`. One class only raises ``ValueError``.

    References
    ----------
    .. [1] M. Kull, T. M. Silva Filho, P. Flach, "Beta calibration: a well-founded and easily
       implemented improvement on logistic calibration for binary classifiers", Proceedings of the
       20th International Conference on Artificial Intelligence and Statistics (AISTATS), PMLR 54,
       pp. 623-631, 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.beta import BetaCalibrator
    >>> p = np.array([0.05, 0.2, 0.3, 0.5, 0.6, 0.8, 0.9, 0.95])
    >>> y = np.array([0, 0, 1, 0, 1, 1, 0, 1])
    >>> cal = BetaCalibrator().fit(p, y)
    >>> cal.predict(p).shape
    (8,)
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "parameters": Options(*PARAMETERS),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"a_": "float", "b_": "float", "c_": "float"}

    def __init__(
        self, *, parameters: str = "abm", score_col: str = "score", output_type: str = "input"
    ) -> None:
        self.parameters = parameters
        self.score_col = score_col
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        scores = ScoreRows.of(rows, self.score_col, "probability")
        self.a_, self.b_, self.c_ = fit_beta_rows(scores, parameters=self.parameters)

    def _predict_scores(self, score: Any) -> Any:
        return predict_beta(score, self.a_, self.b_, self.c_)

    def _scans_scores_in_predict(self) -> bool:
        return True

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        coef = np.array([self.a_, self.b_])
        return predict_logistic_and_refused(score, coef, self.c_, mode=FEATURES_BETA, scan_kind="probability")

    def _check_state(self) -> None:
        if self.parameters == "am" and self.a_ != self.b_:
            msg = f"parameters='am' needs a_ == b_, got {self.a_!r} and {self.b_!r}"
            raise ValueError(msg)
        if self.parameters == "ab" and not math.isclose(self.c_, (self.a_ - self.b_) * LN2, abs_tol=1e-12):
            msg = "parameters='ab' needs c_ == (a_ - b_) * ln 2"
            raise ValueError(msg)

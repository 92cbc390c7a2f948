r"""The negative-downsampling correction of click-through-rate models.

A model trained on all positives and a fraction :math:`w` of the negatives over-predicts; the
probability on the full population is

.. math::

    q = \frac{p}{p + (1 - p) / w} = \frac{w p}{w p + 1 - p},
    \qquad \operatorname{logit} q = \operatorname{logit} p + \ln w .
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpucal._backend import array_namespace
from gpucal._params import check_param
from gpucal._validation import check_sample_weight, check_scores
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, SCORE_KIND_OPTIONS, Calibrator, Constraint, Interval
from gpucal.calibrators.logistic import sigmoid
from gpucal.registry import calibration_method
from gpucal.rows import is_dask_collection

RATE = Interval(float, 0.0, 1.0, closed="right")


def correct_downsampling(p: Any, rate: float, *, score_kind: str = "probability") -> Any:
    r"""Return :math:`q = w p / (w p + 1 - p)` for negative sampling rate :math:`w` = ``rate``.

    Parameters
    ----------
    p : array-like of shape (n,)
        Probabilities of the model trained on downsampled data (or margins with
        ``score_kind="logit"``: the result is then :math:`\sigma(s + \ln w)`).
    rate : float in (0, 1]
        Fraction of the negatives kept when the training data was sampled (1: no correction).
    score_kind : {"probability", "logit"}, default="probability"

    Returns
    -------
    array of shape (n,)
        Corrected probabilities (numpy or cupy, float64); 0 and 1 stay 0 and 1.

    References
    ----------
    .. [1] X. He, J. Pan, O. Jin, et al., "Practical lessons from predicting clicks on ads at
       Facebook", Proceedings of the 8th International Workshop on Data Mining for Online
       Advertising (ADKDD), 2014, Sec. 6.3.
    """
    check_param("correct_downsampling", "rate", rate, RATE)
    score = check_scores(p, "p", kind=score_kind)
    return _correct(score, float(rate), score_kind)


def _correct(score: Any, rate: float, score_kind: str) -> Any:
    xp = array_namespace(score)
    if score_kind == "logit":
        return sigmoid(score + xp.log(rate))
    numerator = score * rate
    out = 1.0 - score
    out += numerator
    xp.divide(numerator, out, out=out)  # w p + 1 - p >= min(w, 1) > 0: no division by zero
    return out


@calibration_method("downsampling")
class DownsamplingCorrection(Calibrator):
    r"""The negative-downsampling correction, shaped as a calibrator so it chains like the others.

    .. math::

        q = \frac{p}{p + (1 - p) / w}

    Parameters
    ----------
    rate : float in (0, 1]
        Negative sampling rate :math:`w`: the fraction of negatives kept in the model's training
        data. Required: there is no sensible default.
    score_col : str, default="score"
        Column holding the score when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities, or margins (then :math:`q = \sigma(s + \ln w)`).
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    rate_ : float
        The rate used by ``predict`` (the ``rate`` given to the last ``fit``).

    Notes
    -----
    Nothing is learnt: ``fit`` only validates ``X`` (and ``y`` and ``sample_weight`` when given) and
    records ``rate_``, so the correction sits in a pipeline, is saved and loaded, and is refit,
    exactly like a calibrator. ``y`` may be None. The map is increasing and keeps 0 and 1.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.downsampling import DownsamplingCorrection
    >>> cal = DownsamplingCorrection(rate=0.1).fit(np.array([0.5, 0.9]))
    >>> cal.predict(np.array([0.5])).round(4)
    array([0.0909])
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "rate": RATE,
        "score_kind": SCORE_KIND_OPTIONS,
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"rate_": "float"}

    def __init__(
        self,
        *,
        rate: float,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.rate = rate
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> DownsamplingCorrection:
        """Validate the inputs and record ``rate_``; nothing is learnt from the data.

        Parameters
        ----------
        X : array-like of shape (n,) or dataframe
            Scores, or a dataframe holding them in ``score_col``.
        y : array-like of shape (n,) or None, default=None
            Labels, checked when given.
        sample_weight : array-like of shape (n,), default=None
            Checked when given.

        Returns
        -------
        self
        """
        self._validate_params()
        if is_dask_collection(X):
            # The map needs no data: nothing to compute, and predict maps the partitions.
            self.rate_ = float(self.rate)
            return self
        if y is None:
            score = self._score_input(X)
            check_sample_weight(sample_weight, score.shape[0], xp=array_namespace(score))
        else:
            self._fit_input(X, y, sample_weight)
        self.rate_ = float(self.rate)
        return self

    def _predict_scores(self, score: Any) -> Any:
        return _correct(score, self.rate_, self.score_kind)

    def _check_state(self) -> None:
        if not RATE.accepts(self.rate_):
            msg = f"rate_ must be in (0, 1], got {self.rate_!r}"
            raise ValueError(msg)

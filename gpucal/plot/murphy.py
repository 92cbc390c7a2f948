r"""The Murphy diagram of a probability forecast (Ehm, Gneiting, Jordan & Krüger 2016).

For a threshold :math:`\theta \in [0, 1]`, the elementary score of the mean functional of a binary
outcome is

.. math::

    S_\theta(p, y) = \theta\,\mathbb 1\{p > \theta\}(1 - y) + (1 - \theta)\,\mathbb 1\{p \le \theta\}\,y,

the cost of acting on :math:`p` when a false alarm costs :math:`\theta` and a miss :math:`1 - \theta`.
Every consistent scoring function is a mixture of these (:math:`2 \int_0^1 S_\theta\,d\theta` is the
Brier score), so a forecast whose curve lies below another's everywhere is better for every user. The
curve is read from the table of sums per distinct score (:func:`gpucal.metrics.score_table.table_of`),
so dask input gives the one-machine curve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal.metrics.score_table import table_of
from gpucal.plot.smooth import _axes


@dataclass(frozen=True)
class MurphyCurve:
    """The Murphy diagram's numbers.

    Attributes
    ----------
    thresholds : numpy.ndarray
        The thresholds :math:`\\theta`, increasing.
    score : numpy.ndarray
        The weighted mean elementary score :math:`\\bar S_\\theta` at each threshold.
    n : int
        Rows of positive weight.
    """

    thresholds: np.ndarray
    score: np.ndarray
    n: int


def murphy_curve(
    y_true: Any, y_prob: Any, *, sample_weight: Any = None, thresholds: Any = 513
) -> MurphyCurve:
    """Return the Murphy diagram: the mean elementary score at each threshold.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in [0, 1] (a soft label counts as that fraction of an event).
    y_prob : array-like of shape (n,)
        Predicted probabilities.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights.
    thresholds : int or array-like, default 513
        A count (``numpy.linspace(0, 1, thresholds)``) or the thresholds themselves, in [0, 1].

    Returns
    -------
    MurphyCurve

    Notes
    -----
    Equal to probcal 0.4's ``murphy_curve`` (same default grid) for 0/1 labels. Cost: one pass for
    the table, then :math:`O(T \\log m)` for :math:`T` thresholds and :math:`m` distinct scores.

    Examples
    --------
    >>> murphy_curve([0, 1, 1], [0.2, 0.6, 0.9], thresholds=[0.5, 0.7]).score.round(4).tolist()
    [0.0, 0.1]
    """
    if isinstance(thresholds, (int, np.integer)) and not isinstance(thresholds, bool):
        if thresholds < 2:
            msg = f"thresholds: a count must be at least 2, got {thresholds}"
            raise ValueError(msg)
        theta = np.linspace(0.0, 1.0, int(thresholds))
    else:
        theta = np.sort(np.asarray(thresholds, dtype=np.float64).ravel())
        if theta.shape[0] == 0 or not np.all((theta >= 0.0) & (theta <= 1.0)):
            msg = "thresholds: need at least one threshold, each in [0, 1]"
            raise ValueError(msg)
    table = table_of(y_true, y_prob, sample_weight)
    non_events = np.concatenate([[0.0], np.cumsum(table.weight - table.weight_y)])
    events = np.concatenate([[0.0], np.cumsum(table.weight_y)])
    at_or_below = np.searchsorted(table.keys, theta, side="right")
    score = theta * (non_events[-1] - non_events[at_or_below]) + (1.0 - theta) * events[at_or_below]
    return MurphyCurve(thresholds=theta, score=score / table.weight.sum(), n=int(table.n_rows.sum()))


def plot_murphy_curve(
    y_true: Any,
    predictions: dict[str, Any],
    *,
    sample_weight: Any = None,
    ax: Any = None,
    thresholds: Any = 513,
) -> Any:
    """Draw the Murphy diagrams of named predictions of the same rows on one axes; return the figure."""
    fig, ax = _axes(ax)
    for name, y_prob in predictions.items():
        curve = murphy_curve(y_true, y_prob, sample_weight=sample_weight, thresholds=thresholds)
        ax.plot(curve.thresholds, curve.score, label=name)
    ax.set_xlim(0, 1)
    ax.set_xlabel("threshold θ")
    ax.set_ylabel("mean elementary score")
    ax.legend(loc="upper right")
    return fig


__all__ = ["MurphyCurve", "murphy_curve", "plot_murphy_curve"]

r"""Smoothed isotonic regression (SIR): equal-mass bins, isotonic across bins, linear in between.

The functional core :func:`fit_sir` returns the knots of the map; :class:`SIRCalibrator` validates,
calls it and stores them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import (
    BIN_W,
    BIN_WP,
    BIN_WY,
    check_knot_map,
    interp_clipped,
    mass_bin_stats,
)
from gpucal.calibrators.pav import N_BLOCK_STATS, SUM_W, SUM_WX, SUM_WY, X_FIRST, X_LAST, pool_groups
from gpucal.registry import calibration_method


def fit_sir(
    score: Any, y: Any, sample_weight: Any = None, *, n_bins: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    r"""Fit SIR; return ``(knots_x, knots_y)`` of the piecewise-linear map (see :class:`SIRCalibrator`).

    Parameters
    ----------
    score : array of shape (n,)
        Scores (probabilities or margins).
    y : array of shape (n,)
        Labels in [0, 1].
    sample_weight : array of shape (n,) or None, default=None
        Non-negative weights; zero-weight rows are ignored.
    n_bins : int, default=100
        Number of equal-mass bins before pooling.

    Returns
    -------
    knots_x : numpy.ndarray of shape (m,)
        Strictly increasing knot scores: the smallest fitted score, the block centres, the largest.
    knots_y : numpy.ndarray of shape (m,)
        Calibrated probability at each knot, non-decreasing.
    """
    xp = array_namespace(score)
    w = xp.ones(score.shape[0], dtype=xp.float64) if sample_weight is None else sample_weight
    stats, lows, highs = mass_bin_stats(score, y, w, n_bins)
    groups = np.empty((stats.shape[0], N_BLOCK_STATS))
    groups[:, SUM_W] = stats[:, BIN_W]
    groups[:, SUM_WY] = stats[:, BIN_WY]
    groups[:, SUM_WX] = stats[:, BIN_WP]
    groups[:, X_FIRST] = lows
    groups[:, X_LAST] = highs
    blocks = pool_groups(groups)
    # A block's centre lies inside its score range; clip so rounding cannot move it past an end.
    centre = np.clip(blocks.mean_x, blocks.x_first, blocks.x_last)
    value = np.clip(blocks.value, 0.0, 1.0)
    lo, hi = float(lows[0]), float(highs[-1])
    if centre.shape[0] == 1:
        return np.array([centre[0]]), np.array([value[0]])
    # Extend the first and last segments to the fitted score range, kept inside [0, v_1] and [v_K, 1].
    slope_first = (value[1] - value[0]) / (centre[1] - centre[0])
    slope_last = (value[-1] - value[-2]) / (centre[-1] - centre[-2])
    start = max(0.0, value[0] - slope_first * (centre[0] - lo))
    stop = min(1.0, value[-1] + slope_last * (hi - centre[-1]))
    knots_x, knots_y = list(centre), list(value)
    if lo < centre[0]:
        knots_x.insert(0, lo)
        knots_y.insert(0, min(start, value[0]))
    if hi > centre[-1]:
        knots_x.append(hi)
        knots_y.append(max(stop, value[-1]))
    return np.asarray(knots_x), np.asarray(knots_y)


@calibration_method("sir")
class SIRCalibrator(Calibrator):
    r"""Smoothed isotonic regression (SIR, Deng et al. 2020): binning, isotonic across bins, interpolation.

    The scores are sorted and cut into ``n_bins`` equal-mass bins; isotonic regression (weighted
    pool-adjacent-violators) runs across the bins' mean labels; each resulting block of pooled bins
    becomes one knot at its weighted mean score :math:`\bar s_b` with its pooled mean label
    :math:`v_b`, and the map is linear between knots:

    .. math::

        \hat f(s) = v_b + \frac{v_{b+1} - v_b}{\bar s_{b+1} - \bar s_b}\,(s - \bar s_b),
        \qquad \bar s_b \le s \le \bar s_{b+1}.

    Unlike histogram binning and isotonic regression the map has no flat steps between knots, so it
    keeps the ranking of the scores inside the bins (the point of the method).

    Parameters
    ----------
    n_bins : int >= 1, default=100
        Number of equal-mass bins before pooling (our choice: enough knots for a smooth map, and
        1,000 rows per bin at 1e5 rows).
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities or raw margins; bins and knots are on the score as given.
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    X_knots_ : numpy.ndarray of shape (m,)
        Strictly increasing knot scores.
    y_knots_ : numpy.ndarray of shape (m,)
        Calibrated probability at each knot: non-decreasing, strictly increasing along the block
        centres (the two end knots can equal their neighbour where they meet 0 or 1).

    Notes
    -----
    *Bins.* Equal-mass on the weighted score distribution, tied scores never split (the rule of the
    equal-mass ECE in ``gpucal.metrics``); bins left empty by heavy ties are dropped.

    *Knots.* One knot per block of pooled bins rather than one per bin: bins pooled by the isotonic
    step share a value, and a knot per bin would put flat steps (ties) back between their centres.
    Below the first centre and above the last the end segments are extended to the smallest and
    largest fitted score (values kept in :math:`[0, v_1]` and :math:`[v_K, 1]`); beyond the fitted range
    the map is constant. So the map is non-decreasing everywhere and strictly increasing on the
    fitted range when there are two or more blocks, except where an end segment meets 0 or 1.

    *One class or one block.* The map is the constant :math:`v_1` (0 or 1 for one class); no error.

    No reference library implements SIR; the tests check it against a direct numpy transcription of
    the steps above.

    References
    ----------
    .. [1] C. Deng, H. Wang, Q. Tan, J. Xu, K. Gai, "Calibrating user response predictions in online
       advertising", Proc. ECML PKDD 2020, LNCS 12460, 208-223 (SIR).

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.sir import SIRCalibrator
    >>> s = np.linspace(0.05, 0.95, 8)
    >>> cal = SIRCalibrator(n_bins=4).fit(s, np.array([0, 0, 0, 1, 0, 1, 1, 1]))
    >>> bool(np.all(np.diff(cal.predict(s)) > 0))
    True
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"X_knots_": "float_array", "y_knots_": "float_array"}

    def __init__(
        self,
        *,
        n_bins: int = 100,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_bins = n_bins
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit_scores(self, score: Any, y: Any, sample_weight: Any) -> None:
        self.X_knots_, self.y_knots_ = fit_sir(score, y, sample_weight, n_bins=self.n_bins)

    def _predict_scores(self, score: Any) -> Any:
        return interp_clipped(score, self.X_knots_, self.y_knots_)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots describe a non-decreasing map into [0, 1]."""
        check_knot_map(self.X_knots_, self.y_knots_)

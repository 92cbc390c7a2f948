r"""Centred isotonic regression (CIR): the isotonic fit with each flat stretch shrunk to one point.

The functional core :func:`centered_isotonic_knots` runs pool-adjacent-violators on the sums per
distinct score and returns the knots of the map; :class:`CenteredIsotonicCalibrator` computes those sums
over :class:`gpucal.rows.Rows` (one machine or dask partitions), calls it and stores the knots.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Options
from gpucal.calibrators.bins import check_knot_map, interp_clipped
from gpucal.calibrators.score_rows import read_distinct_score_sums
from gpucal.kernels.jit import numba
from gpucal.registry import calibration_method
from gpucal.rows import Rows


@numba.njit(cache=True)
def _centred_pool(x, w, wy, interior_strict):  # pragma: no cover - compiled
    """Pool adjacent groups that violate the order, and with ``interior_strict`` those that tie at a
    value strictly inside (0, 1).

    Returns the blocks' sums ``(w, w*y, w*x)`` and score ranges, one row per block.
    """
    n = x.shape[0]
    sw = np.empty(n)
    swy = np.empty(n)
    swx = np.empty(n)
    lo = np.empty(n)
    hi = np.empty(n)
    top = -1
    for j in range(n):
        top += 1
        sw[top] = w[j]
        swy[top] = wy[j]
        swx[top] = w[j] * x[j]
        lo[top] = x[j]
        hi[top] = x[j]
        while top > 0:
            before = swy[top - 1] / sw[top - 1]
            mean = swy[top] / sw[top]
            if not (before > mean or (interior_strict and before == mean and 0.0 < mean < 1.0)):
                break
            sw[top - 1] += sw[top]
            swy[top - 1] += swy[top]
            swx[top - 1] += swx[top]
            hi[top - 1] = hi[top]
            top -= 1
    k = top + 1
    return sw[:k].copy(), swy[:k].copy(), swx[:k].copy(), lo[:k].copy(), hi[:k].copy()


def centered_isotonic_knots(
    xs: np.ndarray, weight: np.ndarray, weighted_y: np.ndarray, *, interior_strict: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Fit CIR from the sums per distinct score; return the knots ``(x, y)`` of its map.

    Parameters
    ----------
    xs : numpy.ndarray of shape (m,)
        The distinct scores, increasing.
    weight, weighted_y : numpy.ndarray of shape (m,)
        :math:`\\sum w` (positive) and :math:`\\sum w y` of the rows at each distinct score.
    interior_strict : bool, default=True
        Pool adjacent blocks of equal value inside (0, 1) (see :class:`CenteredIsotonicCalibrator`).

    Returns
    -------
    knots_x : numpy.ndarray
        Strictly increasing: each block's weighted mean score.
    knots_y : numpy.ndarray
        The blocks' values (their weighted mean labels), non-decreasing.
    """
    sw, swy, swx, lo, hi = _centred_pool(
        np.ascontiguousarray(xs, dtype=np.float64),
        np.ascontiguousarray(weight, dtype=np.float64),
        np.ascontiguousarray(weighted_y, dtype=np.float64),
        interior_strict,
    )
    # A block's centre lies inside its score range; clip so rounding cannot move it past an end.
    return np.clip(swx / sw, lo, hi), np.clip(swy / sw, 0.0, 1.0)


@calibration_method("centered_isotonic", fits_on_dask=True)
class CenteredIsotonicCalibrator(Calibrator):
    r"""Centred isotonic regression (CIR, Oron & Flournoy 2017): strictly increasing between block centres.

    Isotonic regression (weighted pool-adjacent-violators over the distinct scores) gives blocks of
    scores sharing one value :math:`v_b`. CIR shrinks each block to one point, its weighted mean score
    :math:`\bar s_b = \sum_{i \in b} w_i s_i / \sum_{i \in b} w_i`, and interpolates linearly between
    the points:

    .. math::

        \hat f(s) = v_b + \frac{v_{b+1} - v_b}{\bar s_{b+1} - \bar s_b}\,(s - \bar s_b),
        \qquad \bar s_b \le s \le \bar s_{b+1},

    constant beyond the first and last centre. With ``interior_strict=True`` adjacent groups with
    equal means are pooled too (a flat stretch is a violation), except at the value 0 or 1, where they
    stay separate points (the default of Oron & Flournoy's ``cir`` package, ``interiorStrict``): so
    the map is strictly increasing wherever its value is inside (0, 1).

    Parameters
    ----------
    interior_strict : bool, default=True
        Pool adjacent blocks of equal value inside (0, 1) into one point. False pools only strict
        violators, as probcal 0.4 does: two adjacent blocks of equal value stay two points and the map
        is flat between them.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities or raw margins; centres and knots are on the score as given.
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    X_knots_ : numpy.ndarray of shape (m,)
        Strictly increasing knot scores: the blocks' weighted mean scores.
    y_knots_ : numpy.ndarray of shape (m,)
        The blocks' values: non-decreasing in [0, 1], strictly increasing inside (0, 1).

    Notes
    -----
    *Against probcal.* probcal 0.4's ``CenteredIsotonicCalibrator`` pools only strict violators: with
    ``interior_strict=False`` the maps are equal (tested to 1e-12, with ties and weights), except
    where two adjacent blocks' means are equal in exact arithmetic: probcal's running mean can round
    them apart and pool them (one such pair in 1e6 rows of ``benchmarks/bench_peer_maps.py``, a local
    difference of 1e-4), while the sums here keep them equal and apart. With the
    default, two adjacent blocks of exactly equal value inside (0, 1) (frequent with few rows per
    block: 1/2 and 2/4) are one point here and two there. Both pool exactly equal scores only and
    ignore rows of zero weight.

    *Ties and weights.* The fit reads the sums :math:`\sum w` and :math:`\sum w y` per distinct score
    (merged over blocks of rows), so integer weights give what repeated rows give and a dask fit is the
    one-machine fit.

    *One class.* All labels 0 (or 1): every distinct score stays its own point at 0 (or 1), a constant
    map; no error.

    References
    ----------
    .. [1] A. P. Oron, N. Flournoy, "Centered isotonic regression: point and interval estimation for
       dose-response studies", Statistics in Biopharmaceutical Research 9(3), 258-267, 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.centered_isotonic import CenteredIsotonicCalibrator
    >>> cal = CenteredIsotonicCalibrator().fit(np.array([0.1, 0.3, 0.35, 0.8]), np.array([0, 1, 0, 1]))
    >>> cal.predict(np.array([0.1, 0.325, 0.5, 0.9])).round(3).tolist()
    [0.0, 0.5, 0.684, 1.0]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "interior_strict": Options(True, False),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"X_knots_": "float_array", "y_knots_": "float_array"}

    def __init__(
        self,
        *,
        interior_strict: bool = True,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.interior_strict = interior_strict
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        xs, weight, weighted_y = read_distinct_score_sums(rows, self.score_col, self.score_kind)
        self.X_knots_, self.y_knots_ = centered_isotonic_knots(
            xs, weight, weighted_y, interior_strict=self.interior_strict
        )

    def _predict_scores(self, score: Any) -> Any:
        return interp_clipped(score, self.X_knots_, self.y_knots_)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots describe a non-decreasing map into [0, 1]."""
        check_knot_map(self.X_knots_, self.y_knots_)

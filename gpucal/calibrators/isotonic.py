r"""Isotonic calibration: the increasing step function closest to the labels, with scikit-learn's ties.

The functional core :func:`fit_isotonic` returns the knots of a piecewise-linear map; :func:`isotonic_rows`
is the same fit over :class:`gpucal.rows.Rows` (one machine or dask partitions); the estimator
:class:`IsotonicCalibrator` validates, calls it and stores the knots as ``X_thresholds_`` and
``y_thresholds_`` (scikit-learn's names and meaning).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import is_cupy_array
from gpucal._validation import check_invariant
from gpucal.calibrators._sorted import host_float64, host_weights
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import BIN_W, BIN_WY, interp_clipped, interp_clipped_and_refused
from gpucal.calibrators.pav import (
    PavBlocks,
    clip_blocks,
    device_sort_isotonic_blocks,
    isotonic_blocks,
    isotonic_blocks_from_groups,
    scanned_isotonic_blocks,
)
from gpucal.calibrators.score_rows import read_score_rows, rescan_scores, score_groups
from gpucal.persistence import check_span
from gpucal.registry import calibration_method
from gpucal.rows import Rows

# The rank-preserving map of a block stays within this fraction of the gap to the neighbouring block's
# value, so neighbouring blocks never meet (1/3 leaves a third of every gap untouched).
RANK_BAND = 1.0 / 3.0


def _step_knots(blocks: PavBlocks) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's trimmed thresholds: each block's first and last score at the block's value."""
    wide = blocks.x_last > blocks.x_first
    n_knots = blocks.value.shape[0] + int(wide.sum())
    # Knot position of each block's first score: blocks before it contribute 1 or 2 knots each.
    first = np.concatenate([[0], np.cumsum(1 + wide)[:-1]])
    knots_x = np.empty(n_knots)
    knots_y = np.empty(n_knots)
    knots_x[first] = blocks.x_first
    knots_y[first] = blocks.value
    knots_x[first[wide] + 1] = blocks.x_last[wide]
    knots_y[first[wide] + 1] = blocks.value[wide]
    return knots_x, knots_y


def _rank_preserving_knots(blocks: PavBlocks, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """Replace each flat block by a line through its weighted mean (see :class:`IsotonicCalibrator`)."""
    v, lo_x, hi_x, mean_x = blocks.value, blocks.x_first, blocks.x_last, blocks.mean_x
    k = v.shape[0]
    if k == 1:
        return _step_knots(blocks)
    gap = np.diff(v)  # > 0: adjacent blocks have strictly increasing values
    gap_below = np.concatenate([[gap[0]], gap]) * RANK_BAND  # the first block mirrors its upper gap
    gap_above = np.concatenate([gap, [gap[-1]]]) * RANK_BAND  # the last block mirrors its lower gap
    band_lo = np.maximum(v - gap_below, low)
    band_hi = np.minimum(v + gap_above, high)
    left = mean_x - lo_x
    right = hi_x - mean_x
    with np.errstate(divide="ignore", invalid="ignore"):
        slope_lo = np.where(left > 0, (v - band_lo) / left, np.inf)
        slope_hi = np.where(right > 0, (band_hi - v) / right, np.inf)
    slope = np.minimum(slope_lo, slope_hi)
    slope = np.where(np.isfinite(slope), slope, 0.0)
    start = np.clip(v - slope * left, band_lo, v)
    stop = np.clip(v + slope * right, v, band_hi)
    # A block whose value sits at the floor (or ceiling) cannot keep its mean and rise: it rises from
    # its value to the top (bottom) of its band instead, so the map stays strictly increasing.
    wide = hi_x > lo_x
    stuck = wide & (slope == 0.0)
    at_floor = stuck & (v <= band_lo)
    at_ceiling = stuck & ~at_floor
    stop = np.where(at_floor, band_hi, stop)
    start = np.where(at_ceiling, band_lo, start)
    first = np.concatenate([[0], np.cumsum(1 + wide)[:-1]])
    n_knots = k + int(wide.sum())
    knots_x = np.empty(n_knots)
    knots_y = np.empty(n_knots)
    knots_x[first] = lo_x
    knots_y[first] = np.where(wide, start, v)
    knots_x[first[wide] + 1] = hi_x[wide]
    knots_y[first[wide] + 1] = stop[wide]
    return knots_x, knots_y


def fit_isotonic(
    score: Any,
    y: Any,
    sample_weight: Any = None,
    *,
    clip_eps: float = 0.0,
    rank_preserving: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Fit increasing weighted isotonic regression; return the knots of the calibration map.

    Parameters
    ----------
    score : array of shape (n,)
        Scores (probabilities or margins), finite.
    y : array of shape (n,)
        Labels in [0, 1].
    sample_weight : array of shape (n,) or None, default=None
        Non-negative weights; zero-weight rows are dropped (as scikit-learn does).
    clip_eps : float, default=0.0
        Fitted values are clipped to ``[clip_eps, 1 - clip_eps]`` (scikit-learn's ``y_min`` / ``y_max``).
    rank_preserving : bool, default=False
        Interpolate inside flat blocks (see :class:`IsotonicCalibrator`).

    Returns
    -------
    thresholds : numpy.ndarray of shape (m,)
        Strictly increasing knot scores; the first and last are the smallest and largest fitted score.
    values : numpy.ndarray of shape (m,)
        Calibrated probability at each knot; non-decreasing.
    """
    s = host_float64(score)
    t = host_float64(y)
    w = np.ones(s.shape[0]) if sample_weight is None else host_float64(sample_weight)
    blocks = isotonic_blocks(s, t, w, exact_means=rank_preserving)
    return isotonic_knots(blocks, clip_eps=clip_eps, rank_preserving=rank_preserving)


def isotonic_knots(
    blocks: PavBlocks, *, clip_eps: float = 0.0, rank_preserving: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Clip the blocks of a fit and return the knots of its map (the last step of :func:`fit_isotonic`)."""
    blocks = clip_blocks(blocks, clip_eps, 1.0 - clip_eps)
    if rank_preserving:
        return _rank_preserving_knots(blocks, clip_eps, 1.0 - clip_eps)
    return _step_knots(blocks)


def isotonic_rows(rows: Rows, *, exact_means: bool = True, scan_kind: str | None = None) -> PavBlocks | None:
    """The blocks of the isotonic fit of checked rows (:class:`~gpucal.calibrators.score_rows.ScoreBlock`).

    The fit is pool-adjacent-violators on the groups of tied scores, a function of the sums ``w`` and
    ``w*y`` per distinct score (:func:`~gpucal.calibrators.score_rows.score_groups`, merged over blocks):
    :func:`~gpucal.calibrators.pav.isotonic_blocks_from_groups`. When the rows are one block in this
    process the compiled walk over the sorted rows (:func:`~gpucal.calibrators.pav.isotonic_blocks`)
    computes the same function without building the table: it forms the same tie groups (the tie rule
    reads only the distinct values, and a group starts at a distinct value), adds the same rows into
    each group and pools the groups by the same ``_push_block``; only the order of the additions inside
    a group differs, so the two agree to rounding (bit for bit with unit weights and 0/1 labels).
    ``exact_means=False`` lets the walk add each run of label-0 rows at once, which leaves ``mean_x``
    exact only to rounding (``isotonic_blocks``); on many cores the walk runs over chunks of the sorted
    rows in threads (:func:`~gpucal.calibrators.pav.pool_chunk_blocks`). One block on the GPU is sorted
    and pooled there, chunk by chunk, and only the chunks' blocks are pooled on the host
    (:func:`~gpucal.calibrators.pav.device_sort_isotonic_blocks`). ``scan_kind``: the one
    block was read unscanned and its sort scans it
    (:func:`~gpucal.calibrators.pav.scanned_isotonic_blocks`; None when it refuses a value).
    """
    whole = rows.single_block()
    if whole is not None and is_cupy_array(whole.score):
        return device_sort_isotonic_blocks(whole.score, whole.y, whole.w, scan_kind)
    if whole is not None:
        s, t, w = host_float64(whole.score), host_float64(whole.y), host_weights(whole.w)
        return scanned_isotonic_blocks(s, t, w, scan_kind, exact_means=exact_means)
    check_invariant(scan_kind is None, "the rows of a distributed isotonic fit are scanned when read")
    table = score_groups(rows)
    return isotonic_blocks_from_groups(table.keys[0], table.stats[:, BIN_W], table.stats[:, BIN_WY])


@calibration_method("isotonic", fits_on_dask=True)
class IsotonicCalibrator(Calibrator):
    r"""Isotonic regression calibration (Zadrozny & Elkan 2002), equal to scikit-learn's.

    Fits the non-decreasing function of the score closest to the labels in weighted squared error,

    .. math::

        \hat f = \operatorname*{arg\,min}_{f \text{ non-decreasing}} \sum_i w_i \bigl(y_i - f(s_i)\bigr)^2,

    by pool-adjacent-violators over the groups of tied scores (``gpucal.calibrators.pav``), and
    predicts by linear interpolation between the knots, clipping scores outside the fitted range to
    it. With the defaults the outputs are those of
    ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` fitted on the same data and weights
    (tested to 1e-10, with ties and weights), which is what ``CalibratedClassifierCV(method="isotonic")``
    uses.

    Parameters
    ----------
    rank_preserving : bool, default=False
        Replace each flat step by a line, so that the map is strictly increasing on the fitted score
        range and keeps the ranking of the scores (the AUC of the calibrated scores equals the AUC of
        the scores; scikit-learn#16321). See Notes for the exact rule.
    clip_eps : float in [0, 0.5), default=0.0
        Clip the fitted values to ``[clip_eps, 1 - clip_eps]`` (scikit-learn's ``y_min = clip_eps``,
        ``y_max = 1 - clip_eps``), so that no output is exactly 0 or 1 and the log-loss of new data
        stays finite (scikit-learn#10903). ``1e-6`` is a good choice when the outputs feed a log-loss.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Scores are probabilities in [0, 1] or raw margins; the map is fitted on the scores as given
        (isotonic regression depends only on their order, and the thresholds are in score units).
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    X_thresholds_ : numpy.ndarray of shape (m,)
        Strictly increasing knot scores; ``X_thresholds_[0]`` and ``X_thresholds_[-1]`` are the
        smallest and largest fitted score (scikit-learn's ``X_min_`` and ``X_max_``).
    y_thresholds_ : numpy.ndarray of shape (m,)
        Calibrated probability at each knot, non-decreasing (strictly increasing with
        ``rank_preserving=True`` and more than one block).

    Notes
    -----
    *Ties and weights.* As in scikit-learn: zero-weight rows are dropped; scores closer than 1e-15 to
    the first score of a run of tied scores are pooled into it and carry their weighted mean label;
    the fit is the weighted pool-adjacent-violators solution on those groups. Knots are each block's
    first and last score at the block's value (scikit-learn's trimmed ``X_thresholds_``).

    *Rank-preserving rule.* Each block :math:`b` of the fit has a value :math:`v_b`, a score range
    :math:`[l_b, r_b]` and a weighted mean score :math:`\bar s_b`. Inside a block with
    :math:`l_b < r_b` the map becomes the line through :math:`(\bar s_b, v_b)`,

    .. math::

        f(s) = v_b + \kappa_b (s - \bar s_b), \qquad l_b \le s \le r_b,

    with the largest slope :math:`\kappa_b` that keeps :math:`f` inside the band
    :math:`[v_b - (v_b - v_{b-1})/3,\ v_b + (v_{b+1} - v_b)/3]` (the first and last blocks mirror
    their one gap, and the band is cut to ``[clip_eps, 1 - clip_eps]``); between blocks the map is
    linear, as before. What holds:

    - the map is strictly increasing on ``[X_thresholds_[0], X_thresholds_[-1]]`` whenever the fit
      has two or more blocks (up to float rounding where a slope is below one ulp per ulp);
    - every block keeps its weighted mean: the weighted mean of the outputs over the block's rows is
      :math:`v_b`, the isotonic value, since the output is affine in the score inside the block --
      except for a first block whose value equals the floor ``clip_eps`` (typically 0: only negatives
      at the bottom) or a last block at the ceiling, which cannot rise and keep their mean while
      staying in range; those rise from their value to their band's edge instead;
    - outputs stay in ``[clip_eps, 1 - clip_eps]``; single-score blocks and one-block fits (for
      instance one class only) are unchanged, so a one-block fit is constant.

    *One class.* With labels of one class the fit is the constant 0 or 1 (``clip_eps`` and
    ``1 - clip_eps`` when clipping); this is what scikit-learn returns, and no error is raised.

    *Speed.* The one O(n log n) step is sorting the scores: one ``argsort`` per thread on contiguous
    runs, merged on the fly by the numba loop that groups ties and pools blocks in one pass (no n-sized
    temporaries beyond the sort order). With unit weights and 0/1 labels the scores are sorted with
    ``numpy.sort`` (no index), and the walk adds each run of label-0 rows between two positives at
    once (without ``rank_preserving``, which reads the blocks' mean scores as the group-by-group walk
    adds them). Prediction is a parallel numba loop that finds each score's
    segment from a table of knots over the score's bits, a step or two from the cell's knot.

    References
    ----------
    .. [1] B. Zadrozny, C. Elkan, "Transforming classifier scores into accurate multiclass probability
       estimates", Proc. KDD 2002, 694-699.
    .. [2] M. Ayer, H. D. Brunk, G. M. Ewing, W. T. Reid, E. Silverman, "An empirical distribution
       function for sampling with incomplete information", Ann. Math. Statist. 26(4), 641-647, 1955.
    .. [3] N. A. Oron, N. Flournoy, "Centered isotonic regression: point and interval estimation for
       dose-response studies", Statistics in Biopharmaceutical Research 9(3), 258-267, 2017 (the
       related centred variant, which moves each block to one knot at its mean score).

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.isotonic import IsotonicCalibrator
    >>> cal = IsotonicCalibrator().fit(np.array([0.1, 0.3, 0.35, 0.8]), np.array([0, 1, 0, 1]))
    >>> cal.predict(np.array([0.1, 0.32, 0.9])).round(3).tolist()
    [0.0, 0.5, 1.0]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "rank_preserving": Options(True, False),
        "clip_eps": Interval(float, 0.0, 0.5, closed="left"),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {"X_thresholds_": "float_array", "y_thresholds_": "float_array"}

    def __init__(
        self,
        *,
        rank_preserving: bool = False,
        clip_eps: float = 0.0,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.rank_preserving = rank_preserving
        self.clip_eps = clip_eps
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        # Rows in one block here are sorted in one piece, which scans them; blocks are scanned when read.
        scan_kind = self.score_kind if rows.single_block() is not None else None
        scores = read_score_rows(rows, self.score_col, self.score_kind, scan=scan_kind is None)
        blocks = isotonic_rows(scores, exact_means=self.rank_preserving, scan_kind=scan_kind)
        if blocks is None:
            rescan_scores(rows, self.score_col, self.score_kind)
        self.X_thresholds_, self.y_thresholds_ = isotonic_knots(
            blocks, clip_eps=self.clip_eps, rank_preserving=self.rank_preserving
        )

    def _predict_scores(self, score: Any) -> Any:
        return interp_clipped(score, self.X_thresholds_, self.y_thresholds_)

    def _scans_scores_in_predict(self) -> bool:
        return True

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        return interp_clipped_and_refused(score, self.X_thresholds_, self.y_thresholds_, self.score_kind)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the knots describe a non-decreasing map into [0, 1]."""
        x, v = self.X_thresholds_, self.y_thresholds_
        if x.shape != v.shape or x.shape[0] == 0:
            msg = f"X_thresholds_ has {x.shape[0]} entries and y_thresholds_ {v.shape[0]}; need equal, >= 1"
            raise ValueError(msg)
        if np.any(np.diff(x) <= 0):
            msg = "X_thresholds_ must be strictly increasing"
            raise ValueError(msg)
        check_span(x, "X_thresholds_")
        if np.any(np.diff(v) < 0) or np.any(v < 0) or np.any(v > 1):
            msg = "y_thresholds_ must be non-decreasing values in [0, 1]"
            raise ValueError(msg)

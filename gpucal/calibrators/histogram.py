r"""Histogram binning (Zadrozny & Elkan 2001): the calibrated score is the mean label of the score's bin.

The functional core :func:`fit_histogram` returns the bin edges and values; :func:`histogram_rows` is the
same fit over :class:`gpucal.rows.Rows` (one machine or dask partitions); :class:`HistogramCalibrator`
validates, calls it and stores them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace
from gpucal._validation import check_sample_weight
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import (
    BIN_W,
    BIN_WY,
    bin_sums,
    bin_sums_and_outside,
    lookup_bins,
    lookup_bins_and_outside,
    mass_bin_stats,
    mass_bin_stats_from_groups,
    midpoint_edges,
)
from gpucal.calibrators.logistic import sigmoid
from gpucal.calibrators.score_rows import ScoreBlock, read_score_rows, rescan_scores, score_groups
from gpucal.registry import calibration_method
from gpucal.rows import Rows


def as_probability(score: Any, score_kind: str) -> Any:
    """Return the score as a probability: unchanged, or the logistic function of a margin."""
    if score_kind == "probability":
        return score
    return sigmoid(score)


def fit_histogram(
    p: Any, y: Any, sample_weight: Any = None, *, n_bins: int = 10, strategy: str = "uniform"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Fit histogram binning on probabilities ``p``; return ``(edges, values, weights)``.

    Parameters
    ----------
    p : array of shape (n,)
        Probabilities in [0, 1] (numpy or cupy).
    y : array of shape (n,)
        Labels in [0, 1].
    sample_weight : array of shape (n,) or None, default=None
        Non-negative weights.
    n_bins : int, default=10
        Number of bins (``"quantile"`` may return fewer: empty bins from ties are dropped).
    strategy : {"uniform", "quantile"}, default="uniform"
        Equal-width bins on [0, 1], or equal-mass bins on the weighted distribution of ``p`` with
        edges midway between neighbouring bins.

    Returns
    -------
    edges : numpy.ndarray of shape (B + 1,)
        Increasing edges from 0 to 1; bins are right-closed (see ``gpucal.calibrators.bins``).
    values : numpy.ndarray of shape (B,)
        Weighted mean label per bin; an empty (equal-width) bin gets its centre.
    weights : numpy.ndarray of shape (B,)
        Total weight per bin.
    """
    xp = array_namespace(p)
    w = check_sample_weight(None, p.shape[0], xp=xp) if sample_weight is None else sample_weight
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        stats = bin_sums(p, y, w, edges[1:-1], uniform=True)
    else:
        stats, lows, highs = mass_bin_stats(p, y, w, n_bins)
        edges = midpoint_edges(lows, highs, 0.0, 1.0)
    return histogram_from_stats(edges, stats)


def histogram_from_stats(edges: np.ndarray, stats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return :func:`fit_histogram`'s ``(edges, values, weights)`` from the per-bin sums (``BIN_*``)."""
    weights = stats[:, BIN_W]
    centres = 0.5 * (edges[:-1] + edges[1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(weights > 0, stats[:, BIN_WY] / weights, centres)
    return edges, np.clip(values, 0.0, 1.0), weights


def probability_block(block: ScoreBlock, score_kind: str) -> ScoreBlock:
    """The block with its score read as a probability (:func:`as_probability`): the axis the bins cut."""
    return ScoreBlock(as_probability(block.score, score_kind), block.y, block.w)


def uniform_bin_sums(block: ScoreBlock, n_bins: int) -> np.ndarray:
    """Per-bin sums of one block of probabilities on equal-width bins (added over blocks)."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return bin_sums(block.score, block.y, block.w, edges[1:-1], uniform=True)


def uniform_bin_sums_and_outside(block: ScoreBlock, n_bins: int) -> np.ndarray:
    """:func:`uniform_bin_sums` of one block of unscanned probabilities and labels, with one more row
    ``[rows outside [0, 1], 0]`` (:func:`~gpucal.calibrators.bins.bin_sums_and_outside`); added over
    blocks."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    sums, n_outside = bin_sums_and_outside(block.score, block.y, block.w, edges[1:-1], uniform=True)
    return np.concatenate([sums, [[float(n_outside), 0.0]]])


def histogram_rows(rows: Rows, n_bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fit_histogram` over checked rows of probabilities (:class:`ScoreBlock`).

    Equal width: the per-bin sums added over blocks (one block: the sums ``fit_histogram`` computes).
    Equal mass: a row's bin depends only on the weight of the rows with a smaller score, so the bins are
    a function of the distinct-score table (:func:`~gpucal.calibrators.score_rows.score_groups`,
    :func:`~gpucal.calibrators.bins.mass_bin_stats_from_groups`). When the rows are one block in this
    process the compiled walk over the sorted rows (:func:`~gpucal.calibrators.bins.mass_bin_stats`)
    computes the same function without building the table: the weight below a score is a running sum
    over the sorted rows there and a cumulative sum of the per-score sums in the table, equal up to the
    order of the additions (bit for bit with unit weights, where both are counts).
    """
    if strategy == "uniform":
        return histogram_from_stats(np.linspace(0.0, 1.0, n_bins + 1), rows.sum(uniform_bin_sums, n_bins))
    whole = rows.single_block()
    if whole is not None:
        stats, lows, highs = mass_bin_stats(whole.score, whole.y, whole.w, n_bins)
    else:
        table = score_groups(rows)
        stats, lows, highs = mass_bin_stats_from_groups(table.keys[0], table.stats, n_bins)
    return histogram_from_stats(midpoint_edges(lows, highs, 0.0, 1.0), stats)


@calibration_method("histogram", fits_on_dask=True)
class HistogramCalibrator(Calibrator):
    r"""Histogram binning (Zadrozny & Elkan 2001), equal to netcal's ``HistogramBinning``.

    Cuts the probability axis into bins and maps every score to the weighted mean label of its bin,

    .. math::

        \hat f(p) = \frac{\sum_{i:\, b(p_i) = b(p)} w_i y_i}{\sum_{i:\, b(p_i) = b(p)} w_i},

    where :math:`b(p)` is the right-closed bin of :math:`p` (``gpucal.calibrators.bins``). The map is
    a step function and is *not* monotone in general: a bin with fewer positives than the bin below
    gets a lower value. It also creates ties, so it can lower the AUC; prefer
    :class:`~gpucal.calibrators.isotonic.IsotonicCalibrator` or
    :class:`~gpucal.calibrators.sir.SIRCalibrator` when the ranking matters.

    Parameters
    ----------
    n_bins : int >= 1, default=10
        Number of bins (netcal's default; Zadrozny & Elkan used 10).
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: equal-width bins with edges ``np.linspace(0, 1, n_bins + 1)``.
        ``"quantile"``: equal-mass bins on the weighted distribution of the fitted scores (tied
        scores never split; bins left empty by ties are dropped, so ``len(bin_values_)`` can be below
        ``n_bins``), with each interior edge midway between the largest score of a bin and the
        smallest of the next; the outer edges are 0 and 1.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        With ``"logit"`` the margins are mapped through the logistic function first: bins are on the
        probability.
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    bin_edges_ : numpy.ndarray of shape (B + 1,)
        Increasing bin edges on the probability, from 0 to 1.
    bin_values_ : numpy.ndarray of shape (B,)
        Calibrated probability of each bin.
    bin_weights_ : numpy.ndarray of shape (B,)
        Total sample weight of the fitted rows in each bin (0 for an empty bin).

    Notes
    -----
    *Empty bins* predict their centre (the identity map there), as netcal does; a weighted fit counts
    a bin as empty when its total weight is 0.

    *Against netcal 1.4.* With ``strategy="uniform"`` and 0/1 labels without weights the outputs
    equal ``netcal.binning.HistogramBinning(bins=n_bins)`` (tested to 1e-12) except for a fitted score
    lying exactly on an interior edge: netcal fits with scipy's left-closed bins and predicts with
    right-closed ones (``np.digitize(..., right=True)``), so such a row counts in the bin above when
    fitting and belongs to the bin below when predicting; gpucal uses right-closed bins for both.
    netcal also clips scores to ``[eps, 1 - eps]`` before binning, which moves no score across an
    edge. netcal cannot predict with equal-mass bins (``equal_intervals=False`` raises); gpucal can.

    *One class.* With labels of one class every non-empty bin predicts that class (0 or 1); no error
    is raised.

    References
    ----------
    .. [1] B. Zadrozny, C. Elkan, "Obtaining calibrated probability estimates from decision trees and
       naive Bayesian classifiers", Proc. ICML 2001, 609-616.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.histogram import HistogramCalibrator
    >>> cal = HistogramCalibrator(n_bins=2).fit(np.array([0.1, 0.2, 0.7, 0.9]), np.array([0, 1, 1, 1]))
    >>> cal.predict(np.array([0.3, 0.8])).tolist()
    [0.5, 1.0]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "strategy": Options("uniform", "quantile"),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "bin_edges_": "float_array",
        "bin_values_": "float_array",
        "bin_weights_": "float_array",
    }

    def __init__(
        self,
        *,
        n_bins: int = 10,
        strategy: str = "uniform",
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_bins = n_bins
        self.strategy = strategy
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        if self.score_kind == "probability" and self.strategy == "uniform":
            # One pass: the bin sums read every probability and label, and count those outside [0, 1].
            scores = read_score_rows(rows, self.score_col, self.score_kind, scan=False)
            stats = scores.sum(uniform_bin_sums_and_outside, self.n_bins)
            if stats[-1, 0] > 0:
                rescan_scores(rows, self.score_col, self.score_kind)
            edges = np.linspace(0.0, 1.0, self.n_bins + 1)
            self.bin_edges_, self.bin_values_, self.bin_weights_ = histogram_from_stats(edges, stats[:-1])
            return
        scores = read_score_rows(rows, self.score_col, self.score_kind)
        probabilities = scores.map(probability_block, self.score_kind)
        self.bin_edges_, self.bin_values_, self.bin_weights_ = histogram_rows(
            probabilities, self.n_bins, self.strategy
        )

    def _scans_scores_in_predict(self) -> bool:
        """Probabilities are checked by the pass that bins them; a logit goes through the logistic
        function first, which would hide an infinite one."""
        return self.score_kind == "probability"

    def _predict_scores(self, score: Any) -> Any:
        p = as_probability(score, self.score_kind)
        return lookup_bins(p, self.bin_edges_[1:-1], self.bin_values_, uniform=self.strategy == "uniform")

    def _predict_and_scan(self, score: Any) -> tuple[Any, int]:
        return lookup_bins_and_outside(
            score, self.bin_edges_[1:-1], self.bin_values_, uniform=self.strategy == "uniform"
        )

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless edges, values and weights fit together."""
        check_bin_state(self.bin_edges_, self.bin_values_)
        n_fitted = self.bin_values_.shape[0]
        # Equal width keeps every bin; equal mass merges the bins that tied scores would split.
        if n_fitted > self.n_bins or (self.strategy == "uniform" and n_fitted != self.n_bins):
            msg = f"{n_fitted} fitted bins do not fit n_bins={self.n_bins} with strategy={self.strategy!r}"
            raise ValueError(msg)
        uniform = np.linspace(0.0, 1.0, n_fitted + 1)
        if self.strategy == "uniform" and not np.array_equal(self.bin_edges_, uniform):
            msg = "strategy='uniform' needs bin_edges_ equal to np.linspace(0, 1, n_bins + 1)"
            raise ValueError(msg)
        if self.bin_weights_.shape != self.bin_values_.shape or np.any(self.bin_weights_ < 0):
            msg = "bin_weights_ must be non-negative, one per bin"
            raise ValueError(msg)


def check_bin_state(edges: np.ndarray, values: np.ndarray) -> None:
    """Raise ``ValueError`` unless ``edges`` increase and ``values`` in [0, 1] has one entry per bin.

    Interior edges increase strictly; an outer edge may equal its neighbour (a first or last bin that
    holds a single score).
    """
    if edges.shape[0] != values.shape[0] + 1 or values.shape[0] == 0:
        msg = f"{edges.shape[0]} bin edges for {values.shape[0]} bin values; need one more edge than values"
        raise ValueError(msg)
    steps = np.diff(edges)
    if np.any(steps[1:-1] <= 0) or np.any(steps < 0):
        msg = "bin edges must increase (interior edges strictly)"
        raise ValueError(msg)
    if np.any(values < 0) or np.any(values > 1):
        msg = "bin values must lie in [0, 1]"
        raise ValueError(msg)

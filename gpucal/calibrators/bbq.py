r"""Bayesian binning into quantiles (BBQ): equal-mass histograms of every size, averaged by their evidence.

The functional core :func:`bbq_step_map` turns the sums per distinct score into the averaged map (a
step function); :class:`BBQCalibrator` computes those sums over :class:`gpucal.rows.Rows` (one machine
or dask partitions), calls it and stores the steps.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.special import gammaln

from gpucal._backend import array_namespace
from gpucal.calibrators._sorted import host_float64
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import count_not_above
from gpucal.calibrators.score_rows import read_distinct_score_sums
from gpucal.kernels.jit import empty_rows, numba, parallel_rows
from gpucal.registry import calibration_method
from gpucal.rows import Rows

#: The prior's centre is kept in [CENTRE_EPS, 1 - CENTRE_EPS] (a bin of scores at 0 or 1).
CENTRE_EPS = 1e-12


def _model(
    cumulative: tuple[np.ndarray, np.ndarray, np.ndarray],
    xs: np.ndarray,
    n_bins: int,
    prior_size: float,
    logit: bool,
) -> tuple[float, np.ndarray, np.ndarray]:
    """One binning model: its log evidence, interior edges and bin estimates (non-empty bins only).

    ``cumulative`` holds the cumulative weight and weighted labels of the distinct scores (a leading
    0) and each score's middle of weight :math:`C_{j-1} + w_j / 2`. Bin :math:`b` starts at the first
    distinct score whose middle reaches :math:`b W / B`: equal mass up to ties, which are never split.
    """
    c_w, c_wy, middle = cumulative
    m_keys = xs.shape[0]
    starts = np.searchsorted(middle, np.arange(n_bins) * (c_w[-1] / n_bins), side="left")
    ends = np.append(starts[1:], m_keys)
    used = ends > starts
    first, stop = starts[used], ends[used]
    n, m = c_w[stop] - c_w[first], c_wy[stop] - c_wy[first]
    # Edges between used bins: the midpoints between a bin's last score and the next bin's first.
    interior = 0.5 * (xs[stop[:-1] - 1] + xs[first[1:]])
    centre = 0.5 * (np.concatenate([[xs[0]], interior]) + np.concatenate([interior, [xs[-1]]]))
    if logit:
        centre = 1.0 / (1.0 + np.exp(-centre))
    # A prior centred at 0 or 1 is improper (a Beta parameter of 0): keep it just inside.
    centre = np.clip(centre, CENTRE_EPS, 1.0 - CENTRE_EPS)
    a = prior_size / n_bins
    alpha, beta = a * centre, a * (1.0 - centre)
    # BDeu: a Beta(alpha, beta) prior on each bin's rate, integrated out (empty bins contribute 1).
    log_evidence = float(
        np.sum(
            gammaln(a)
            - gammaln(n + a)
            + gammaln(m + alpha)
            - gammaln(alpha)
            + gammaln(n - m + beta)
            - gammaln(beta)
        )
    )
    return log_evidence, interior, (m + alpha) / (n + a)


#: The most bins of a BBQ model: the top of the range of 1e9 rows at the default ``spread``.
MAX_BIN_COUNT = 10_000


def bin_counts_searched(total_weight: float, spread: float) -> np.ndarray:
    """The bin counts :math:`B` averaged over: the integers in :math:`[N^{1/3}/C, C N^{1/3}]`, at least 1
    and at most :data:`MAX_BIN_COUNT`.

    :math:`N` is the total weight (weights count as repeated rows), so scaled-up weights ask for more
    bins, each a model to fit: weights of 1e8 on 300 rows asked for 30,000 models, 1e12 for more than
    memory holds, one of 1e300 for a range no array holds. The cap reads :math:`N` alone, so integer
    weights still fit as their repeated rows, and unit weights are as before up to 1e9 rows.
    """
    root = total_weight ** (1.0 / 3.0)
    high = max(1, min(math.ceil(root * spread), MAX_BIN_COUNT))
    low = max(1, min(high, math.floor(root / spread)))
    return np.arange(low, high + 1)


def bbq_step_map(
    xs: np.ndarray,
    weight: np.ndarray,
    weighted_y: np.ndarray,
    *,
    spread: float,
    prior_size: float,
    logit: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit BBQ from the sums per distinct score (increasing ``xs``, positive ``weight``; margins with
    ``logit``, whose bin midpoints go through the logistic function for the prior).

    Returns
    -------
    edges : numpy.ndarray
        Increasing edges of the averaged map (every model's interior edges, merged).
    values : numpy.ndarray
        The map's value below the first edge, between consecutive edges, and above the last
        (``len(edges) + 1`` values in [0, 1]).
    posterior : numpy.ndarray
        The models' posterior weights, one per bin count of :func:`bin_counts_searched`.
    """
    counts = bin_counts_searched(float(weight.sum()), spread)
    c_w = np.concatenate([[0.0], np.cumsum(weight)])
    cumulative = (c_w, np.concatenate([[0.0], np.cumsum(weighted_y)]), c_w[1:] - 0.5 * weight)
    models = [_model(cumulative, xs, int(b), prior_size, logit) for b in counts]
    log_evidence = np.array([m[0] for m in models])
    if not np.isfinite(log_evidence).all():
        # Weights are counts of rows: adding up to 2e33, the models' scores overflowed (NaN predictions).
        msg = (
            f"sample_weight: BBQ reads weights as counts of rows, and these add up to {weight.sum():g}: "
            "the models' Bayesian scores overflow; scale the weights to counts of about one per row"
        )
        raise ValueError(msg)
    posterior = np.exp(log_evidence - log_evidence.max())
    posterior /= posterior.sum()
    # Each model is a step function: its first value, then a jump at each interior edge. The average
    # is the weighted first values plus every model's weighted jumps, added in edge order.
    base = float(sum(p * m[2][0] for p, m in zip(posterior, models, strict=True)))
    edges = np.concatenate([m[1] for m in models])
    jumps = np.concatenate([p * np.diff(m[2]) for p, m in zip(posterior, models, strict=True)])
    order = np.argsort(edges, kind="stable")
    edges, jumps = edges[order], jumps[order]
    distinct, starts = np.unique(edges, return_index=True)
    steps = np.add.reduceat(jumps, starts) if jumps.shape[0] else jumps
    values = np.clip(base + np.concatenate([[0.0], np.cumsum(steps)]), 0.0, 1.0)
    return distinct, values, posterior


# Rows per task of the step map's parallel loop.
STEP_CHUNK_ROWS = 1 << 14


@parallel_rows("s")
def _step_map_cpu(s, edges, values, out):  # pragma: no cover - compiled; tested vs searchsorted
    """``out[i] = values[searchsorted(edges, s[i], side="right")]``: the value of the step holding
    ``s[i]``, found by binary search (a NaN reads the last step, as numpy sorts it)."""
    n = s.shape[0]
    for c in numba.prange((n + STEP_CHUNK_ROWS - 1) // STEP_CHUNK_ROWS):
        for i in range(c * STEP_CHUNK_ROWS, min(n, (c + 1) * STEP_CHUNK_ROWS)):
            x = s[i]
            out[i] = values[edges.shape[0] if x != x else count_not_above(edges, x)]
    return out


@calibration_method("bbq", fits_on_dask=True)
class BBQCalibrator(Calibrator):
    r"""Bayesian binning into quantiles (BBQ, Naeini, Cooper & Hauskrecht 2015).

    Each model :math:`M_B` is a histogram of :math:`B` equal-mass bins of the calibration scores;
    bin :math:`b` predicts the posterior mean of its rate under a Beta prior centred on the bin's
    midpoint score :math:`c_b` (kept in [1e-12, 1 - 1e-12]),

    .. math::

        \hat p_b = \frac{m_b + \alpha_b}{n_b + N'/B}, \qquad
        \alpha_b = \tfrac{N'}{B} c_b, \quad \beta_b = \tfrac{N'}{B}(1 - c_b),

    (:math:`n_b` the bin's weight, :math:`m_b` its weighted positives, :math:`N'` ``prior_size``),
    and the model's evidence is the BDeu marginal likelihood (section 3 of the paper)

    .. math::

        P(D \mid M_B) = \prod_b \frac{\Gamma(N'/B)}{\Gamma(n_b + N'/B)}
        \frac{\Gamma(m_b + \alpha_b)}{\Gamma(\alpha_b)}
        \frac{\Gamma(n_b - m_b + \beta_b)}{\Gamma(\beta_b)}.

    The calibrated probability averages the models over every :math:`B` in
    :math:`[N^{1/3}/C, C N^{1/3}]` (:math:`N` the total weight, :math:`C` ``spread``; at most
    :data:`MAX_BIN_COUNT` bins) with weights proportional to their evidence (a uniform prior over
    :math:`B`).

    Parameters
    ----------
    spread : float >= 1, default=10.0
        :math:`C`: the bin counts averaged over span a factor :math:`C^2`.
    prior_size : float > 0, default=2.0
        :math:`N'`, the prior's equivalent sample size, shared by the bins of a model.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities in [0, 1] (the prior is centred on the bin's score), or raw margins (centred on
        the bin's score put through the logistic function).
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    edges_ : numpy.ndarray of shape (k,)
        Increasing edges of the averaged map: every model's bin edges.
    values_ : numpy.ndarray of shape (k + 1,)
        The map's value below the first edge, between consecutive edges and above the last.
    posterior_ : numpy.ndarray
        The models' posterior weights, in increasing :math:`B`.

    Notes
    -----
    *Bins.* A model's bins are equal-mass over the distinct calibration scores: a distinct score goes
    to the bin holding the middle of its weight, so ties are never split and a bin may stay empty
    (it is dropped: empty bins change neither the evidence nor the map). Bin edges are the midpoints
    between the last score of a bin and the first of the next; a score equal to an edge takes the
    upper bin.

    *Against netcal.* netcal 1.4's ``BBQ`` does not implement the paper's BDeu score: it scores each
    histogram by BIC or AIC of its maximum-likelihood bin rates (float32), keeps the best models by an
    "elbow" rule, and bins by equal width by default; its bin counts are
    :math:`[\lfloor N^{1/3}/10 \rfloor, \min(\lceil N/5 \rceil, \lceil 10 N^{1/3} \rceil)]`. The maps
    therefore differ (``benchmarks/results/peer_maps.md`` reports by how much); this class follows
    the paper.

    *Weights.* The fit reads the sums :math:`\sum w` and :math:`\sum w y` per distinct score, so
    integer weights give what repeated rows give and a dask fit is the one-machine fit. Rows of zero
    weight are ignored.

    *One class.* Defined: every bin's estimate is pulled from 0 (or 1) toward its midpoint by the
    prior; no error.

    References
    ----------
    .. [1] M. P. Naeini, G. F. Cooper, M. Hauskrecht, "Obtaining well calibrated probabilities using
       Bayesian binning", Proc. AAAI 2015, 2901-2907.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.bbq import BBQCalibrator
    >>> rng = np.random.default_rng(0)
    >>> s = rng.random(2000)
    >>> y = (rng.random(2000) < s**2).astype(float)
    >>> BBQCalibrator().fit(s, y).predict(np.array([0.2, 0.5, 0.8])).round(2).tolist()
    [0.03, 0.29, 0.69]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "spread": Interval(float, 1, None),
        "prior_size": Interval(float, 0, None, closed="neither"),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "edges_": "float_array",
        "values_": "float_array",
        "posterior_": "float_array",
    }

    def __init__(
        self,
        *,
        spread: float = 10.0,
        prior_size: float = 2.0,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.spread = spread
        self.prior_size = prior_size
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit(self, rows: Rows) -> None:
        xs, weight, weighted_y = read_distinct_score_sums(rows, self.score_col, self.score_kind)
        edges, values, posterior = bbq_step_map(
            xs,
            weight,
            weighted_y,
            spread=self.spread,
            prior_size=self.prior_size,
            logit=self.score_kind == "logit",
        )
        self.edges_, self.values_, self.posterior_ = edges, values, posterior

    def _predict_scores(self, score: Any) -> Any:
        s = np.ascontiguousarray(host_float64(score))
        out = _step_map_cpu(s, self.edges_, self.values_, empty_rows(s.shape[0]))
        return array_namespace(score).asarray(out)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the steps are consistent and in [0, 1]."""
        if self.values_.shape[0] != self.edges_.shape[0] + 1:
            msg = f"values_ has {self.values_.shape[0]} entries; edges_ needs {self.edges_.shape[0] + 1}"
            raise ValueError(msg)
        if np.any(np.diff(self.edges_) <= 0):
            msg = "edges_ must be strictly increasing"
            raise ValueError(msg)
        if np.any(self.values_ < 0) or np.any(self.values_ > 1):
            msg = "values_ must lie in [0, 1]"
            raise ValueError(msg)
        if self.posterior_.shape[0] < 1 or np.any(self.posterior_ < 0):
            msg = "posterior_ must hold non-negative model weights"
            raise ValueError(msg)


__all__ = ["BBQCalibrator", "bbq_step_map", "bin_counts_searched"]

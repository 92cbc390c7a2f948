r"""Scaling-binning (Kumar, Liang & Ma 2019): Platt scaling, then equal-mass bins on its output.

The functional core :func:`fit_scaling_binning` returns the Platt coefficients and the bins;
:class:`ScalingBinningCalibrator` validates, calls it and stores them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.bins import BIN_W, BIN_WP, lookup_bins, mass_bin_stats, midpoint_edges
from gpucal.calibrators.histogram import check_bin_state
from gpucal.calibrators.platt import fit_platt, predict_platt
from gpucal.registry import calibration_method


def fit_scaling_binning(
    score: Any,
    y: Any,
    sample_weight: Any = None,
    *,
    n_bins: int = 10,
    score_kind: str = "probability",
    split_fraction: float | None = None,
    random_state: int = 0,
) -> tuple[float, float, np.ndarray, np.ndarray]:
    r"""Fit scaling-binning; return ``(coef, intercept, edges, values)``.

    Parameters
    ----------
    score : array of shape (n,)
        Probabilities (``score_kind="probability"``: Platt works on their logit) or margins.
    y : array of shape (n,)
        Labels in [0, 1]; both classes must carry weight (the Platt fit needs them).
    sample_weight : array of shape (n,) or None, default=None
        Non-negative weights.
    n_bins : int, default=10
        Number of equal-mass bins on the Platt output (fewer when ties leave bins empty).
    score_kind : {"probability", "logit"}, default="probability"
        What the scores are.
    split_fraction : float in (0, 1) or None, default=None
        None: Platt and the bins are fitted on all rows. A float: a random ``split_fraction`` of the
        rows (seeded by ``random_state``) fits Platt and the other rows fit the bins and their means.
    random_state : int, default=0
        Seed of the row split.

    Returns
    -------
    coef, intercept : float
        Platt map :math:`g(s) = \sigma(a\,x(s) + c)` with :math:`x(s) = \operatorname{logit}(s)` or :math:`s`.
    edges : numpy.ndarray of shape (B + 1,)
        Bin edges on :math:`g`, from 0 to 1.
    values : numpy.ndarray of shape (B,)
        Weighted mean of :math:`g` over each bin's rows.
    """
    xp = array_namespace(score)
    w = xp.ones(score.shape[0], dtype=xp.float64) if sample_weight is None else sample_weight
    if split_fraction is None:
        scaler_rows = binner_rows = slice(None)
    else:
        in_scaler = np.random.default_rng(random_state).random(score.shape[0]) < split_fraction
        in_scaler = xp.asarray(in_scaler)
        scaler_rows, binner_rows = in_scaler, ~in_scaler
        if not bool(in_scaler.any()) or bool(in_scaler.all()):
            msg = (
                f"split_fraction={split_fraction} left one part of the {score.shape[0]} rows empty; "
                "use more rows or split_fraction=None"
            )
            raise ValueError(msg)
    # Plain maximum likelihood (no target smoothing), as the reference package's Platt scaler.
    coef, intercept = fit_platt(
        score[scaler_rows], y[scaler_rows], w[scaler_rows], score_kind=score_kind, target_smoothing=False
    )
    g = predict_platt(score[binner_rows], coef, intercept, score_kind=score_kind)
    bw = w[binner_rows]
    if not bool((bw > 0).any()):
        msg = "the rows left for the bins all have zero weight; use split_fraction=None"
        raise ValueError(msg)
    stats, lows, highs = mass_bin_stats(g, g, bw, n_bins, y_is_score=True)
    edges = midpoint_edges(lows, highs, 0.0, 1.0)
    values = np.clip(stats[:, BIN_WP] / stats[:, BIN_W], 0.0, 1.0)
    return coef, intercept, edges, values


@calibration_method("scaling_binning")
class ScalingBinningCalibrator(Calibrator):
    r"""Scaling-binning calibration (Kumar, Liang & Ma 2019): Platt scaling, then equal-mass binning.

    First Platt scaling :math:`g(s) = \sigma(a \operatorname{logit}(s) + c)` is fitted by weighted
    maximum likelihood; then :math:`g` is cut into ``n_bins`` equal-mass bins and every score is mapped
    to the mean of :math:`g` -- not of the labels -- over its bin's fitted rows:

    .. math::

        \hat f(s) = \frac{\sum_{i \in B(s)} w_i\, g(s_i)}{\sum_{i \in B(s)} w_i},

    where :math:`B(s)` is the bin of :math:`g(s)`. The output takes only ``n_bins`` values, so its
    calibration error can be measured (the paper's point), while its variance is that of the scaler
    rather than of histogram binning.

    Parameters
    ----------
    n_bins : int >= 1, default=10
        Number of equal-mass bins on the Platt output.
    split_fraction : float in (0, 1) or None, default=None
        None (the default): Platt and the bins use all rows, as the reference package's
        ``PlattBinnerCalibrator.train_calibration`` does. A float: a random ``split_fraction`` of the
        rows fits Platt and the rest fit the bins and their means, as in the paper's analysis (which
        assumes independent parts; ``0.5`` gives the two halves of its experiments). The split is a
        seeded Bernoulli draw per row, so integer weights equal repeated rows only without it.
    random_state : int, default=0
        Seed of the row split (unused when ``split_fraction`` is None).
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities (Platt on their logit, clipped to :math:`[\epsilon, 1 - \epsilon]`,
        :math:`\epsilon` the float64 machine epsilon) or raw margins (Platt on the margin).
    output_type : str, default="input"
        Family of the returned array (see ``gpucal._frames``).

    Attributes
    ----------
    coef_ : float
        Platt slope :math:`a`.
    intercept_ : float
        Platt intercept :math:`c`.
    bin_edges_ : numpy.ndarray of shape (B + 1,)
        Bin edges on the Platt output, from 0 to 1; bins are right-closed.
    bin_values_ : numpy.ndarray of shape (B,)
        Weighted mean Platt output of each bin.

    Notes
    -----
    *Bins* follow the reference package: the sorted Platt outputs are cut into equal-mass parts and
    each edge lies midway between the largest output of a part and the smallest of the next
    (``calibration.utils.get_equal_bins``); the last edge is 1. With weights, parts have equal weight
    (the equal-mass rule of ``gpucal.metrics``); tied outputs are never split.

    *Against uncertainty-calibration 0.1.4* (``calibration.PlattBinnerCalibrator``), configured the
    same way (all rows for both steps, unweighted, ``n`` divisible by ``n_bins`` so that
    ``np.array_split`` makes equal parts, no tied outputs): the bins and outputs agree given the same
    Platt map (tested to 1e-12). The Platt maps differ slightly: the package fits scikit-learn's
    ``LogisticRegression(C=1e10)`` with L-BFGS (gradient tolerance 1e-4) on the logit of scores clipped
    to :math:`[10^{-12}, 1 - 10^{-12}]`, gpucal fits the unregularised maximum likelihood by Newton
    steps to 1e-9 (tested: outputs agree to 1e-3; 2e-4 observed).

    *One class* raises ``ValueError``: the Platt fit has no finite solution.

    References
    ----------
    .. [1] A. Kumar, P. Liang, T. Ma, "Verified uncertainty calibration", Advances in Neural
       Information Processing Systems 32 (NeurIPS 2019), 3787-3798.
    .. [2] J. Platt, "Probabilistic outputs for support vector machines and comparisons to
       regularized likelihood methods", Advances in Large Margin Classifiers, 61-74, MIT Press, 1999.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "split_fraction": Interval(float, 0.0, 1.0, closed="neither", allow_none=True),
        "random_state": Interval(int, 0, None),
        "score_kind": Options("probability", "logit"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "coef_": "float",
        "intercept_": "float",
        "bin_edges_": "float_array",
        "bin_values_": "float_array",
    }

    def __init__(
        self,
        *,
        n_bins: int = 10,
        split_fraction: float | None = None,
        random_state: int = 0,
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_bins = n_bins
        self.split_fraction = split_fraction
        self.random_state = random_state
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit_scores(self, score: Any, y: Any, sample_weight: Any) -> None:
        self.coef_, self.intercept_, self.bin_edges_, self.bin_values_ = fit_scaling_binning(
            score,
            y,
            sample_weight,
            n_bins=self.n_bins,
            score_kind=self.score_kind,
            split_fraction=self.split_fraction,
            random_state=self.random_state,
        )

    def _predict_scores(self, score: Any) -> Any:
        g = predict_platt(score, self.coef_, self.intercept_, score_kind=self.score_kind)
        return lookup_bins(g, self.bin_edges_[1:-1], self.bin_values_)

    def _check_state(self) -> None:
        """Raise ``ValueError`` unless the bins fit together."""
        check_bin_state(self.bin_edges_, self.bin_values_)

r"""The logit map :math:`\eta` of NeuCalib on its own: a monotone piecewise-linear recalibration of the logit.

.. math::

    \hat p = \sigma\big(\eta(l)\big), \qquad
    \eta(l) = b_k + \frac{l - a_k}{a_{k+1} - a_k}\,(b_{k+1} - b_k), \quad a_k \le l < a_{k+1},

with :math:`l` the score's logit, knots :math:`a_0 < \dots < a_K` at quantiles of the calibration logits,
:math:`\eta = b_0` below :math:`a_0` and :math:`b_K` above :math:`a_K`, and knot values :math:`b_k` fitted
by the ILPS loss (the field-aware calibration notes, section "解决方案", the solution):
:math:`\text{LogLoss} + \lambda \sum_k (b_k - b_{k+1})_+`.

The helpers here (knots, the row coordinates ``(k, t)``, the L-BFGS fit, the knot masses, the final
pooling) are shared with :mod:`gpucal.neural.field_aware`, whose :math:`\eta` is the same map and starts
from :func:`fit_eta`'s solution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.calibrators.base import (
    OUTPUT_TYPE_OPTIONS,
    SCORE_KIND_OPTIONS,
    Calibrator,
    Constraint,
    Interval,
    Options,
)
from gpucal.calibrators.bins import interp_clipped
from gpucal.calibrators.feature_platt import score_feature
from gpucal.calibrators.logistic import EPS, check_two_classes, sigmoid
from gpucal.calibrators.platt import fit_platt
from gpucal.neural._torch import (
    MAX_TORCH_THREADS,
    as_tensor,
    load_training,
    require_torch,
    torch_device,
    training_torch,
)
from gpucal.persistence import check_magnitude, check_span
from gpucal.registry import calibration_method

#: Most bins of the logit (``n_knots``): each knot value is a parameter of the fit, and a bound keeps
#: the fit's arrays of ``n_knots + 1`` values in memory (``10**12`` asked numpy for terabytes).
MAX_KNOTS = 1 << 20


def knot_positions(x: Any, w: Any, n_knots: int) -> np.ndarray:
    """Return the knots :math:`a_0 < \\dots < a_K`: weighted quantiles of ``x`` at ``0, 1/K, ..., 1``.

    Quantiles by the inverted CDF (the smallest ``x`` whose share of the weight reaches the level), so
    every knot is a fitted value and the end knots are the smallest and largest one of positive weight;
    repeated knots (heavy ties) are dropped, so there may be fewer than ``n_knots + 1``.
    """
    xp = array_namespace(x, w)
    keep = w > 0
    xs, ws = x[keep], w[keep]
    order = xp.argsort(xs)
    xs, cum = xs[order], xp.cumsum(ws[order])
    levels = xp.asarray(np.linspace(0.0, 1.0, n_knots + 1)) * cum[-1]
    at = xp.clip(xp.searchsorted(cum, levels, side="left"), 0, xs.shape[0] - 1)
    return np.unique(to_numpy(xs[at]))


def knot_coordinates(x: Any, knots_x: np.ndarray) -> tuple[Any, Any]:
    """Return each row's bin ``k`` (int64) and fraction ``t`` in [0, 1] along it (0 / 1 beyond the ends)."""
    xp = array_namespace(x)
    kx = xp.asarray(knots_x)
    last = max(kx.shape[0] - 2, 0)
    k = xp.clip(xp.searchsorted(kx, x, side="right") - 1, 0, last).astype(xp.int64)
    if kx.shape[0] < 2:
        return k, xp.zeros_like(x)
    t = xp.clip((x - kx[k]) / (kx[k + 1] - kx[k]), 0.0, 1.0)
    return k, t


def knot_mass(k: Any, t: Any, w: Any, n_knots: int) -> np.ndarray:
    """Return the weight each knot value carries: :math:`\\sum_i w_i` times row i's share of it (1 - t, t)."""
    xp = array_namespace(k, t, w)
    low = xp.bincount(k, weights=w * (1.0 - t), minlength=n_knots)
    high = xp.bincount(k + 1, weights=w * t, minlength=n_knots + 1)[:n_knots]
    return to_numpy(low + high)


def pool_knots(values: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """Weighted pool-adjacent-violators on the knot values: the closest non-decreasing sequence.

    Removes what a first-order optimiser leaves of a violation (it stops within about a step of the
    penalty's kink). Knots of zero mass count with a tiny weight so that they are pooled, not dropped.
    """
    weight = np.maximum(mass, 1e-12 * max(float(mass.max()), 1.0))
    block_value: list[float] = []
    block_weight: list[float] = []
    block_size: list[int] = []
    for v, m in zip(values, weight, strict=True):
        block_value.append(float(v))
        block_weight.append(float(m))
        block_size.append(1)
        while len(block_value) > 1 and block_value[-2] > block_value[-1]:
            v2, m2, s2 = block_value.pop(), block_weight.pop(), block_size.pop()
            total = block_weight[-1] + m2
            block_value[-1] = (block_value[-1] * block_weight[-1] + v2 * m2) / total
            block_weight[-1] = total
            block_size[-1] += s2
    return np.repeat(block_value, block_size)


def monotone_violation(knots_y: np.ndarray) -> float:
    """Largest decrease between consecutive knot values (0 for a non-decreasing sequence)."""
    return float(np.max(knots_y[:-1] - knots_y[1:], initial=0.0))


@dataclass(frozen=True)
class EtaFit:
    """Result of :func:`fit_eta`: the knots, the row coordinates along them, and how the fit went."""

    knots_x: np.ndarray
    knots_y: np.ndarray  # pooled: non-decreasing when the penalty is on
    violation: float  # largest b_k - b_{k+1} the optimiser returned, before pooling
    n_iter: int
    k: Any
    t: Any


def fit_eta(
    x: Any,
    y: Any,
    w: Any,
    *,
    n_knots: int,
    monotone_penalty: float,
    max_iter: int,
    tol: float,
    device: str,
    what: str,
    polish: bool = True,
) -> EtaFit:
    """Fit :math:`\\eta` alone on logits ``x`` (numpy or cupy): knots, then the knot values by L-BFGS.

    Rows of zero weight take part in nothing. With ``monotone_penalty > 0`` the optimiser's residual
    violation is pooled away (:func:`pool_knots`). ``polish=False`` skips the final subgradient steps
    (for a start that is trained further).
    """
    training = load_training(what)
    check_two_classes(y, w)
    knots_x = knot_positions(x, w, n_knots)
    k, t = knot_coordinates(x, knots_x)
    torch_dev = torch_device(device, x)
    knots_y, n_iter = training.fit_knots(
        k=as_tensor(k, torch_dev, "int64"),
        t=as_tensor(t, torch_dev, "float64"),
        y=as_tensor(y, torch_dev, "float64"),
        w=as_tensor(w, torch_dev, "float64"),
        init_knots=initial_knots(x, y, w, knots_x),
        monotone_penalty=monotone_penalty,
        max_iter=max_iter,
        tol=tol,
        polish=polish,
    )
    return finish_eta(knots_x, knots_y, k, t, w, monotone_penalty, n_iter)


def finish_eta(
    knots_x: np.ndarray, knots_y: np.ndarray, k: Any, t: Any, w: Any, monotone_penalty: float, n_iter: int
) -> EtaFit:
    """Record the optimiser's violation, then pool it away when the penalty is on."""
    violation = monotone_violation(knots_y)
    if monotone_penalty > 0:
        knots_y = pool_knots(knots_y, knot_mass(k, t, w, knots_x.shape[0]))
    return EtaFit(knots_x, knots_y, violation, n_iter, k, t)


#: An end knot farther than this many inner spacings beyond its neighbour lies among outliers
#: (:func:`initial_knots`). Far enough that long tails are no outliers: at 10, the tails of kdd's scores
#: (exact zeros, logit -36, against -21 for the next knot) and of flights' counted, and NeuCalib's
#: held-out log-loss there rose by 0.00002-0.00003 with the start changed.
END_SPACINGS = 100.0


def initial_knots(x: Any, y: Any, w: Any, knots_x: np.ndarray) -> np.ndarray:
    """Start :math:`\\eta` at Platt scaling: :math:`b_k = \\alpha a_k + \\beta` (the base rate for one knot).

    The ILPS fit then only learns the departure from a logit-linear map. Where an end knot lies more
    than :data:`END_SPACINGS` inner spacings beyond its neighbour (``K >= 4`` knots: a few extreme logits,
    margins of 1000), Platt scaling is fitted on the logits clipped to the
    inner knots :math:`[a_1, a_{K-2}]` and the end knots start as if they lay that far: the extreme
    logits drove the slope to about 0, every knot value started equal, at the kinks of the monotone
    penalty, and L-BFGS stopped there within a few steps (12 logits at +-1000 among 4,000 rows: the map
    between 0.30 and 0.37 on the other rows, log-loss 0.618 there against 0.525 without them). Logits
    of +-50 among the same rows lie 77-92 inner spacings out: a long tail, started as any. The outliers'
    own end knots may stay far from their best (their rows' loss); the other rows' map is the one
    without them.
    """
    xt, yt, wt = x, y, w
    knots = knots_x
    if knots_x.shape[0] < 2:
        rate = min(max(float((wt * yt).sum() / wt.sum()), EPS), 1.0 - EPS)
        return np.full(knots_x.shape[0], np.log(rate / (1.0 - rate)))
    if knots_x.shape[0] >= 4:
        low = knots_x[1] - END_SPACINGS * (knots_x[2] - knots_x[1])
        high = knots_x[-2] + END_SPACINGS * (knots_x[-2] - knots_x[-3])
        if knots_x[0] < low or knots_x[-1] > high:
            xt = array_namespace(x).clip(x, float(knots_x[1]), float(knots_x[-2]))
            knots = np.clip(knots_x, low, high)
    slope, intercept = fit_platt(xt, yt, wt, score_kind="logit", target_smoothing=False)
    return slope * knots + intercept


def eta_logit(x: Any, knots_x: np.ndarray, knots_y: np.ndarray) -> Any:
    """Evaluate :math:`\\eta` at logits ``x`` (numpy or cupy): linear between knots, constant beyond."""
    return interp_clipped(x, knots_x, knots_y)


def check_knots(knots_x: Any, knots_y: Any) -> None:
    """Check loaded knots: same length, at least one, finite, ``knots_x`` strictly increasing over a span
    float64 holds, ``knots_y`` at most :data:`~gpucal.persistence.MAX_LOADED_MAGNITUDE` in size."""
    kx, ky = np.asarray(knots_x, dtype=np.float64), np.asarray(knots_y, dtype=np.float64)
    if kx.shape != ky.shape or kx.shape[0] == 0:
        msg = f"knots_x_ and knots_y_ must be non-empty and of one length; got {kx.shape} and {ky.shape}"
        raise ValueError(msg)
    if not (np.isfinite(kx).all() and np.isfinite(ky).all()):
        msg = "the knots hold non-finite numbers"
        raise ValueError(msg)
    if kx.shape[0] > 1 and not bool(np.all(np.diff(kx) > 0)):
        msg = "knots_x_ must be strictly increasing"
        raise ValueError(msg)
    # Between knots of 1e308 and -1e308 their difference is infinite: at a knot, 0 * inf is NaN.
    check_magnitude(ky, "knots_y_")
    check_span(kx, "knots_x_")


@calibration_method("piecewise_logit")
class PiecewiseLogitCalibrator(Calibrator):
    r"""Monotone piecewise-linear map of the logit, fitted by the ILPS loss (NeuCalib's :math:`\eta`).

    .. math::

        \hat p = \sigma\big(\eta(l)\big), \quad
        \eta(l) = b_k + \frac{l - a_k}{a_{k+1} - a_k}\,(b_{k+1} - b_k) \ \ (a_k \le l < a_{k+1}), \quad
        \min_b\; \text{LogLoss} + \lambda \sum_k (b_k - b_{k+1})_+

    A smooth, monotone, rank-keeping alternative to isotonic regression: the knots :math:`a_k` are
    quantiles of the calibration logits, the knot values :math:`b_k` are fitted (starting from Platt
    scaling, :math:`b_k = \alpha a_k + \beta`), the map is linear between knots and constant beyond
    the end knots.
    Where consecutive knot values differ the map is strictly increasing, so rows keep their order.

    Parameters
    ----------
    n_knots : int, default=32
        Number of bins :math:`K` of the logit (``K + 1`` knots, fewer when scores repeat), at most
        :data:`MAX_KNOTS`.
    monotone_penalty : float, default=1.0
        :math:`\lambda`, against the weighted *mean* log-loss. Above a finite value (the largest gradient
        the log-loss puts on a knot) the penalty is exact: the minimiser is monotone. 0 fits the
        unconstrained piecewise-linear map.
    max_iter : int, default=200
        Most L-BFGS iterations.
    tol : float, default=1e-7
        Stop when every entry of the gradient of the loss (a mean over rows) is at most ``tol``.
    n_threads : int, default=1
        PyTorch CPU threads during the fit (restored afterwards): the fit is deterministic, and the same
        data, parameters and thread count give the same bits on the same machine.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the fit runs; "auto" fits on CUDA when the data is on the GPU (cupy / cudf, handed to torch
        by DLPack). Predictions run where the data is.
    score_col : str, default="score"
        Column of the scores when ``X`` is a dataframe.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities (used through their logit, clipped to machine epsilon) or raw margins.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    knots_x_ : numpy.ndarray of shape (m,)
        Knot logits :math:`a_k`, strictly increasing.
    knots_y_ : numpy.ndarray of shape (m,)
        Knot values :math:`b_k` (logits), non-decreasing when ``monotone_penalty > 0``.
    monotone_violation_ : float
        Largest :math:`b_k - b_{k+1}` the optimiser returned, before the final pooling.
    n_iter_ : int
        L-BFGS iterations run.

    See Also
    --------
    FieldAwareCalibrator : the same :math:`\eta` plus a field network :math:`g(x)`.
    SIRCalibrator : isotonic across bins, then linear interpolation (no training).

    Notes
    -----
    *The loss is the paper's.* The knot values are the parameters and the penalty is
    :math:`\lambda \sum_k (b_k - b_{k+1})_+` on them, not a monotone reparametrisation. An optimiser stops
    near, not on, the penalty's kink, so a small violation can remain (recorded in
    ``monotone_violation_``); with ``monotone_penalty > 0`` a weighted pool-adjacent-violators pass over
    the knot values (weights: each knot's share of the rows) removes it. A run of several decreasing knots
    can move one by more than the largest single violation (the run is pooled to its mean). The map is
    then non-decreasing, bit for bit.

    *Training.* :math:`\eta` alone has ``K + 1`` parameters and a convex loss, so it is solved, not
    early-stopped: full-batch L-BFGS (PyTorch, float64, strong-Wolfe line search) from Platt scaling,
    on every row; there is nothing random in the fit. :class:`FieldAwareCalibrator`, whose network can
    overfit, trains by mini-batches with a validation split. Fitting needs PyTorch
    (``pip install 'gpucal[neural]'``); predicting and loading do not: the map is two arrays, evaluated
    by ``interp``. Unlike gpucal's closed-form calibrators the fit iterates over the rows rather than
    over group sums. Sample weights weight each row's log-loss.

    References
    ----------
    .. [1] F. Pan, X. Ao, P. Tang, M. Lu, D. Liu, L. Xiao, Q. He, "Field-aware calibration: a simple and
       empirically strong method for reliable probabilistic predictions", Proc. WWW 2020, 729-739.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> s = rng.uniform(0.01, 0.99, 2000)
    >>> y = (rng.uniform(size=2000) < s**2).astype(float)
    >>> cal = PiecewiseLogitCalibrator(n_knots=8).fit(s, y)
    >>> bool(np.all(np.diff(cal.knots_y_) >= 0))
    True
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_knots": Interval(int, 1, MAX_KNOTS),
        "monotone_penalty": Interval(float, 0, None),
        "max_iter": Interval(int, 1, None),
        "tol": Interval(float, 0, None, closed="neither"),
        "n_threads": Interval(int, 1, MAX_TORCH_THREADS),
        "device": Options("auto", "cpu", "gpu"),
        "score_kind": SCORE_KIND_OPTIONS,
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "knots_x_": "float_array",
        "knots_y_": "float_array",
        "monotone_violation_": "float",
        "n_iter_": "int",
    }

    def __init__(
        self,
        *,
        n_knots: int = 32,
        monotone_penalty: float = 1.0,
        max_iter: int = 200,
        tol: float = 1e-7,
        n_threads: int = 1,
        device: str = "auto",
        score_col: str = "score",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.n_knots = n_knots
        self.monotone_penalty = monotone_penalty
        self.max_iter = max_iter
        self.tol = tol
        self.n_threads = n_threads
        self.device = device
        self.score_col = score_col
        self.score_kind = score_kind
        self.output_type = output_type

    def _fit_scores(self, score: Any, y: Any, sample_weight: Any) -> None:
        require_torch(type(self).__name__)  # the install hint names this class
        with training_torch(int(self.n_threads)):
            fit = fit_eta(
                score_feature(score, self.score_kind),
                y,
                sample_weight,
                n_knots=int(self.n_knots),
                monotone_penalty=float(self.monotone_penalty),
                max_iter=int(self.max_iter),
                tol=float(self.tol),
                device=self.device,
                what=type(self).__name__,
            )
        self.knots_x_ = fit.knots_x
        self.knots_y_ = fit.knots_y
        self.monotone_violation_ = fit.violation
        self.n_iter_ = fit.n_iter

    def _predict_scores(self, score: Any) -> Any:
        x = score_feature(score, self.score_kind)
        return sigmoid(eta_logit(x, self.knots_x_, self.knots_y_))

    def _check_state(self) -> None:
        """Check loaded knots (``gpucal.load`` calls this)."""
        check_knots(self.knots_x_, self.knots_y_)


__all__ = [
    "EtaFit",
    "PiecewiseLogitCalibrator",
    "check_knots",
    "eta_logit",
    "finish_eta",
    "fit_eta",
    "initial_knots",
    "knot_coordinates",
    "knot_mass",
    "knot_positions",
    "monotone_violation",
    "pool_knots",
]

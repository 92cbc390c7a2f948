r"""The GiViTI calibration belt and its test (Finazzi et al. 2011; Nattino, Finazzi & Bertolini 2014).

The label is regressed on a polynomial in the score's log-odds :math:`z = \operatorname{logit}(p)`,

.. math::

    \operatorname{logit} \Pr(y = 1 \mid p) = \beta_0 + \beta_1 z + \dots + \beta_m z^m,

whose degree :math:`m` is chosen by forward likelihood-ratio selection; the test compares the fit with
the bisector :math:`\beta = (0, 1, 0, \dots)` and the belt is the band of the fitted curve over the
likelihood-ratio confidence region of :math:`\beta`. Every fit is Newton's method on sums: the
log-likelihood, its gradient and the weighted power sums :math:`\sum_i w_i \mu_i (1 - \mu_i) z_i^k`
that make its Hessian, for many parameter vectors at once. One pass over the rows (``gpucal.rows``, so
dask partitions give the one-machine belt) compresses them to two Gauss points per bin of the logit and
exact label sums; the Newton passes read those points, or the rows again when a fit is too steep for
the bins to resolve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import integrate, optimize, special, stats

from gpucal._params import Interval, validate_params
from gpucal.kernels.jit import numba
from gpucal.metrics.calibration_tests import _recalibration_rows, ill_conditioned, separated_fit
from gpucal.metrics.inputs import CheckedRows, check_repeated_rows
from gpucal.rows import Rows

#: Points per task of the numba loop.
KERNEL_CHUNK = 1 << 14
#: Bins of the scaled logit in which the rows are compressed to two Gauss points each.
BELT_BINS = 1 << 16
#: The largest weighted mean of (D h)^4 (:meth:`_PolynomialFit.check_resolved`; h the bin width, D the
#: scale of the derivatives of the fitted log-odds) for which the compressed sums are used: their error
#: is then below 1e-11 per unit weight; a steeper fit is redone on the rows.
RESOLUTION = 1e-10
#: Newton (for the fits and for the band's boundary points) stops when no parameter moves more than
#: this, relative to ``1 + |parameter|``.
NEWTON_TOL = 1e-10
NEWTON_MAX_ITER = 100
#: The highest degree whose null distribution is known in closed form (Nattino et al. 2014, eq. 16-19).
HIGHEST_DEGREE = 4


# ------------------------------------------------------------------------------------------------
# The statistic's null distribution after forward selection


def _cdf_degree_2(t: float, k: float, q: float) -> float:
    """Nattino et al. (2014), eq. 17."""
    return (
        -2.0 * math.exp(-t / 2.0) / math.sqrt(2.0 * math.pi) * (math.sqrt(t) - math.sqrt(k))
        + float(stats.chi2.cdf(t, 1))
        - q
    ) / (1.0 - q)


def _cdf_degree_3(t: float, k: float, q: float) -> float:
    """Nattino et al. (2014), eq. 18."""

    def integrand(r: float) -> float:
        return (
            r
            * (math.exp(-r * r / 2.0) - math.exp(-t / 2.0))
            * (math.pi / 2.0 - 2.0 * math.asin(math.sqrt(k) / r))
        )

    value = integrate.quad(integrand, math.sqrt(2.0 * k), math.sqrt(t))[0]
    return 2.0 / (math.pi * (1.0 - q) ** 2) * value


def _cdf_degree_4(t: float, k: float, q: float) -> float:
    """Nattino et al. (2014), eq. 19."""
    root_k = math.sqrt(k)

    def integrand(r: float) -> float:
        a = r * r / k
        angle = (
            -math.pi * root_k / (2.0 * r)
            + 2.0 * root_k / r * math.asin((a - 1.0) ** -0.5)
            - 2.0 * math.atan((1.0 - 2.0 / a) ** -0.5)
            + 2.0 * root_k / r * math.atan((a - 2.0) ** -0.5)
            + 2.0 * math.atan(r / root_k * math.sqrt(a - 2.0))
            - 2.0 * root_k / r * math.atan(math.sqrt(a - 2.0))
        )
        return r * r * (math.exp(-r * r / 2.0) - math.exp(-t / 2.0)) * angle

    value = integrate.quad(integrand, math.sqrt(3.0 * k), math.sqrt(t))[0]
    return (2.0 / (math.pi * (1.0 - q) ** 2)) ** 1.5 * value


def belt_statistic_cdf(t: float, degree: int, threshold: float) -> float:
    r"""The null distribution function of the belt's statistic after forward selection (external data).

    With :math:`k = \chi^2_{1, q}` the selection's critical value at ``threshold`` :math:`q`, a degree
    :math:`m` is selected when each of the :math:`m - 1` added terms passed its test, so under the null
    hypothesis :math:`T = \chi^2_2 + \sum_{j=2}^{m} X_j` with independent :math:`X_j \sim \chi^2_1`
    conditioned on :math:`X_j > k`. Nattino, Finazzi & Bertolini (2014), eq. 16-19 give its distribution
    function in closed form for :math:`m \le 4`; it is 0 for :math:`t \le (m - 1) k`.
    """
    k = float(stats.chi2.ppf(threshold, 1))
    if t <= (degree - 1) * k:
        return 0.0
    if degree == 1:
        return float(stats.chi2.cdf(t, 2))
    cdf = {2: _cdf_degree_2, 3: _cdf_degree_3, 4: _cdf_degree_4}[degree]
    return min(max(cdf(t, k, threshold), 0.0), 1.0)


def _statistic_quantile(level: float, degree: int, threshold: float) -> float:
    """The ``level`` quantile of :func:`belt_statistic_cdf` (the region's likelihood-ratio bound)."""
    low = (degree - 1) * float(stats.chi2.ppf(threshold, 1))
    high = low + 10.0
    while belt_statistic_cdf(high, degree, threshold) < level:
        high *= 2.0
    return float(
        optimize.brentq(lambda t: belt_statistic_cdf(t, degree, threshold) - level, low, high, xtol=1e-12)
    )


# ------------------------------------------------------------------------------------------------
# Sums over rows: the polynomial logistic log-likelihood, gradient and Hessian power sums


@numba.njit(parallel=True, cache=True)
def _softplus_sums(u, w, gammas):  # pragma: no cover - compiled; tested through the belt vs statsmodels
    r"""The sums :math:`-\sum w \operatorname{softplus}(\eta)`, :math:`-\sum w \mu u^k` (``k < d``) and
    :math:`\sum w \mu (1 - \mu) u^k` (``k < 2d - 1``) over the points ``u`` of weights ``w``, for each
    row of ``gammas`` (``(P, d)``): ``(P, 3d)``."""
    n = u.shape[0]
    n_problems, d = gammas.shape
    n_powers = 2 * d - 1
    n_chunks = (n + KERNEL_CHUNK - 1) // KERNEL_CHUNK
    partial = np.zeros((n_chunks, n_problems, 1 + d + n_powers))
    for c in numba.prange(n_chunks):
        powers = np.empty(n_powers)
        acc = partial[c]
        for i in range(c * KERNEL_CHUNK, min(n, (c + 1) * KERNEL_CHUNK)):
            wi = w[i]
            powers[0] = 1.0
            for k in range(1, n_powers):
                powers[k] = powers[k - 1] * u[i]
            for j in range(n_problems):
                eta = 0.0
                for k in range(d):
                    eta += gammas[j, k] * powers[k]
                e = math.exp(-abs(eta))
                mu = 1.0 / (1.0 + e) if eta >= 0.0 else e / (1.0 + e)
                acc[j, 0] -= wi * (max(eta, 0.0) + math.log1p(e))
                for k in range(d):
                    acc[j, 1 + k] -= wi * mu * powers[k]
                v = wi * mu * (1.0 - mu)
                for k in range(n_powers):
                    acc[j, 1 + d + k] += v * powers[k]
    return partial.sum(axis=0)


def row_softplus_sums(block: CheckedRows, scale: float, gammas: np.ndarray) -> Any:
    """:func:`_softplus_sums` over one block's rows (``u = z / scale``), numpy by the compiled loop."""
    xp = block.xp
    u, w = block.p / scale, block.weights()
    if xp is np:
        return _softplus_sums(
            np.ascontiguousarray(u, dtype=np.float64), np.ascontiguousarray(w, dtype=np.float64), gammas
        )
    n_problems, d = gammas.shape
    powers = [xp.ones_like(u)]
    for _ in range(2 * d - 2):
        powers.append(powers[-1] * u)
    out = xp.zeros((n_problems, 3 * d))
    for j in range(n_problems):
        eta = sum(float(gammas[j, k]) * powers[k] for k in range(d))
        mu = 1.0 / (1.0 + xp.exp(-eta))
        out[j, 0] = -xp.sum(w * xp.logaddexp(0.0, eta))
        out[j, 1 : 1 + d] = xp.stack([-xp.sum(w * mu * powers[k]) for k in range(d)])
        out[j, 1 + d :] = xp.stack([xp.sum(w * mu * (1.0 - mu) * powers[k]) for k in range(2 * d - 1)])
    return out


class _Unresolved(Exception):
    """A fit steeper than the compressed rows resolve (:data:`RESOLUTION`)."""


def belt_bin_sums(block: CheckedRows, scale: float, low: float, width: float) -> Any:
    r"""One block's sums for the compressed rows: per bin of the scaled logit, then the label sums.

    With :math:`u = z / \text{scale}` (``block.p`` holds the logits :math:`z`) in :data:`BELT_BINS`
    bins of ``width`` from ``low``, and :math:`t \in [-\tfrac12, \tfrac12]` a row's offset from its bin's
    centre in widths: :math:`\sum w t^j` per bin (:math:`j = 0..3`, an array ``(4, BELT_BINS)``
    flattened), followed by :math:`\sum_i w_i y_i u_i^k`, :math:`k = 0..` :data:`HIGHEST_DEGREE`.
    """
    xp = block.xp
    w = block.weights()
    u = block.p / scale
    position = (u - low) / width
    index = xp.clip(xp.floor(position), 0, BELT_BINS - 1).astype(xp.int64)
    t = position - index - 0.5
    moments = [xp.bincount(index, weights=w * t**j, minlength=BELT_BINS) for j in range(4)]
    wy = w * block.y
    labels = xp.stack([xp.sum(wy * u**k) for k in range(HIGHEST_DEGREE + 1)])
    return xp.concatenate([xp.stack(moments).ravel(), labels])


def gauss_nodes(moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Two points and weights per bin with the bin's weighted moments :math:`\sum w t^j`, :math:`j \le 3`.

    The two-point Gauss rule of the bin's rows (``moments``: ``(4, bins)``): with mean :math:`m`, and
    variance :math:`v` and third central moment :math:`s` of :math:`t - m`, the points are
    :math:`m + (a \pm \sqrt{a^2 + 4v}) / 2`, :math:`a = s / v`, the roots of the degree-2 orthogonal
    polynomial; a bin of one distinct point (:math:`v` at rounding level) keeps one point. Returns the
    points (in bin widths from each bin's centre, ``(2, bins)``) and their weights, 0 for empty bins.
    """
    total = moments[0]
    safe = np.where(total > 0.0, total, 1.0)
    mean = moments[1] / safe
    var = np.maximum(moments[2] / safe - mean**2, 0.0)
    third = moments[3] / safe - 3.0 * mean * moments[2] / safe + 2.0 * mean**3
    spread = var > 1e-14
    a = np.where(spread, third / np.where(spread, var, 1.0), 0.0)
    root = np.sqrt(a * a + 4.0 * var)
    low, high = (a - root) / 2.0, (a + root) / 2.0
    gap = np.where(spread, high - low, 1.0)
    w_low = np.where(spread, total * high / gap, total)
    w_high = np.where(spread, -total * low / gap, 0.0)
    return np.stack([mean + low, mean + high]), np.stack([w_low, w_high])


def _logit_span(block: CheckedRows) -> np.ndarray:
    """``[lowest, highest]`` logit of a block's rows of positive weight (``[inf, -inf]`` when none)."""
    xp = block.xp
    z = block.p if block.w is None else block.p[block.w > 0]
    return np.array([float(xp.min(z)), float(xp.max(z))]) if z.shape[0] else np.array([math.inf, -math.inf])


def _widest(*spans: np.ndarray) -> np.ndarray:
    stacked = np.stack(spans)
    return np.array([stacked[:, 0].min(), stacked[:, 1].max()])


def _unpack(sums: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log-likelihoods (P,), gradients (P, d), Hessians (P, d, d))`` of the sums: per row
    ``[log-likelihood, gradient (d), Hankel sums (2d - 1)]``, minus the Hessian's entry ``(a, b)`` being
    the Hankel sum of index ``a + b``."""
    hankel = sums[:, 1 + d :]
    index = np.add.outer(np.arange(d), np.arange(d))
    return sums[:, 0], sums[:, 1 : 1 + d], -hankel[:, index]


class _PolynomialFit:
    r"""The rows of the belt's regressions, on the scaled logit :math:`u = z / \text{scale}`, compressed.

    One pass over the rows sums, per bin of :math:`u` (:data:`BELT_BINS` between the lowest and the
    highest score), the weighted moments :math:`\sum w t^j`, :math:`j \le 3`, of the offsets from the
    bin's centre, and the label sums :math:`\sum w y u^k`. The log-likelihood is
    :math:`\sum_k \gamma_k \sum_i w_i y_i u_i^k - \sum_i w_i \operatorname{softplus}(\eta_i)`: its
    first part and the gradient's :math:`\sum w y u^k` are exact from the label sums; the sums of smooth
    functions of :math:`u` (softplus, :math:`\mu u^k`, :math:`\mu (1 - \mu) u^k`) are taken over the two
    Gauss points of each bin (:func:`gauss_nodes`), exact for cubics in :math:`u`: the error is of
    the fourth order in the bin width (at most :math:`2 / 65536` of the scaled range), checked against
    :data:`RESOLUTION` at every fit (:meth:`check_resolved`; when it fails, ``compressed`` is set to
    False and the fits read the rows). Every Newton pass then reads at most two points per bin.
    """

    def __init__(self, rows: Rows, scale: float, span: np.ndarray) -> None:
        self.rows = rows
        self.scale = scale
        low = float(span[0]) / scale
        width = (float(span[1]) - float(span[0])) / scale / BELT_BINS
        sums = rows.sum(belt_bin_sums, scale, low, width)
        offsets, weights = gauss_nodes(sums[: 4 * BELT_BINS].reshape(4, BELT_BINS))
        centres = low + width * (np.arange(BELT_BINS) + 0.5)
        keep = weights > 0.0
        self.u = np.ascontiguousarray((centres + width * offsets)[keep])
        self.w = np.ascontiguousarray(weights[keep])
        self.width = width
        self.label_sums = sums[4 * BELT_BINS :]
        self.compressed = True

    def evaluate(self, gammas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log-likelihoods, gradients and Hessians at each row of ``gammas``."""
        gammas = np.ascontiguousarray(gammas, dtype=np.float64)
        d = gammas.shape[1]
        if self.compressed:
            sums = _softplus_sums(self.u, self.w, gammas)
        else:
            sums = self.rows.sum(row_softplus_sums, self.scale, gammas).reshape(gammas.shape[0], -1)
        sums[:, 0] += gammas @ self.label_sums[:d]
        sums[:, 1 : 1 + d] += self.label_sums[:d]
        return _unpack(sums, d)

    def check_resolved(self, gammas: np.ndarray) -> None:
        r"""Raise :class:`_Unresolved` when, compressed, the two-point rule's error bound at some row
        of ``gammas`` exceeds :data:`RESOLUTION`.

        On a bin of width :math:`h` the rule errs by at most :math:`h^4 \max |f^{(4)}| / 24` per unit
        weight, and the summed functions of :math:`\eta(u)` have fourth derivatives of the order of
        :math:`D^4`, :math:`D = \max_k |\eta^{(k)}(u)|^{1/k}`: the bound checked is the weighted mean
        of :math:`(D h)^4` over the points.
        """
        if not self.compressed:
            return
        d = gammas.shape[1]
        powers = self.u[None, :] ** np.arange(d)[:, None]
        for gamma in gammas:
            local = np.zeros(self.u.shape[0])
            coef = gamma
            for k in range(1, d):  # the k-th derivative's coefficients, on powers 0 .. d - 1 - k
                coef = coef[1:] * np.arange(1, coef.shape[0])
                local = np.maximum(local, np.abs(coef @ powers[: coef.shape[0]]) ** (1.0 / k))
            if np.dot(self.w, (local * self.width) ** 4) / self.w.sum() > RESOLUTION:
                raise _Unresolved

    def maximise(self, gamma: np.ndarray) -> tuple[np.ndarray, float, np.ndarray] | None:
        """Maximum likelihood from ``gamma`` by damped Newton: ``(estimate, log-likelihood, Hessian)``,
        or None when the Hessian is singular (the degree is not identified by the distinct scores)."""
        loglik, grad, hess = (a[0] for a in self.evaluate(gamma[None, :]))
        if ill_conditioned(hess):
            return None
        separated = (
            "y_true: the polynomial logistic fit of the belt has no finite maximum "
            "(the classes are separated by the score)"
        )
        for _ in range(NEWTON_MAX_ITER):
            if ill_conditioned(hess):  # mu -> 0 or 1 on every row: coefficients running off
                raise ValueError(separated)
            step = np.linalg.solve(-hess, grad)
            gamma, loglik, grad, hess, converged = self.damped_step(gamma, step, loglik)
            if converged:
                if separated_fit(hess, loglik, float(self.w.sum())):
                    raise ValueError(separated)
                self.check_resolved(gamma[None, :])
                return gamma, float(loglik), hess
        raise ValueError(separated)

    def damped_step(
        self,
        gamma: np.ndarray,
        step: np.ndarray,
        objective: float,
        t: float = 0.0,
        x: np.ndarray | None = None,
    ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray, bool]:
        r"""One damped Newton step on :math:`\ell(\gamma) + t\, x^\top \gamma` (:math:`\ell` alone when ``x``
        is None): ``step`` is halved until the objective does not fall below ``objective`` (its value at
        ``gamma``, to 1e-12 relative) or the step is 1e-8 of itself. Returns the new point, its
        log-likelihood, gradient and Hessian, and whether no coefficient moved by more than
        ``NEWTON_TOL`` relative (converged)."""
        halving = 1.0
        while True:
            trial = gamma + halving * step
            loglik, grad, hess = (a[0] for a in self.evaluate(trial[None, :]))
            value = loglik if x is None else loglik + t * float(x @ trial)
            if value >= objective - 1e-12 * abs(objective) or halving < 1e-8:
                break
            halving *= 0.5
        converged = bool(np.max(np.abs(halving * step) / (1.0 + np.abs(trial))) <= NEWTON_TOL)
        return trial, loglik, grad, hess, converged

    def boundary(
        self,
        gamma_hat: np.ndarray,
        loglik: float,
        hess: np.ndarray,
        drops: np.ndarray,
        directions: np.ndarray,
    ) -> np.ndarray:
        r"""The largest :math:`x^\top \gamma` over :math:`\{\gamma: 2(\hat\ell - \ell(\gamma)) \le k\}` for
        each row :math:`x` of ``directions`` and its bound :math:`k` in ``drops`` (pass :math:`-x` for
        the smallest).

        The maximiser solves :math:`F = (\nabla \ell(\gamma) + t x,\; \ell(\gamma) - \hat\ell + k/2) = 0`
        with :math:`t > 0` (the inverse of the constraint's multiplier; :math:`t < 0` gives the minimum):
        Newton on these :math:`d + 1` equations, the step halved until :math:`\lVert F \rVert` falls
        with :math:`t` kept positive, for every direction at once
        (one pass over the rows evaluates every direction's trial point), from the solution for the
        quadratic approximation of :math:`\ell` at :math:`\hat\gamma`.
        """
        n_dir, d = directions.shape
        floors = loglik - drops / 2.0
        spread = np.linalg.solve(-hess, directions.T).T  # A^-1 x per direction, A = -Hessian
        start_t = np.sqrt(drops / np.einsum("ij,ij->i", directions, spread))
        # per direction: the accepted point (gamma, t) with its residual norm, and the step on trial
        points = np.column_stack([gamma_hat + spread * start_t[:, None], start_t])
        norms = np.full(n_dir, np.inf)
        steps = np.zeros((n_dir, d + 1))
        halving = np.zeros(n_dir)  # 0: the point is new, take a Newton step from it
        active = np.arange(n_dir)
        stuck = np.zeros(n_dir, dtype=bool)
        for _ in range(NEWTON_MAX_ITER):
            if active.shape[0] == 0:
                break
            trials = points[active] + halving[active, None] * steps[active]
            values, grad, hess_all = self.evaluate(trials[:, :d])
            still = []
            for row, j in enumerate(active):
                trial = trials[row]
                residual = np.concatenate([grad[row] + trial[d] * directions[j], [values[row] - floors[j]]])
                norm = float(np.linalg.norm(residual))
                falls = norm < (1.0 - 1e-4 * halving[j]) * norms[j] and trial[d] > 0.0
                if halving[j] > 0 and not falls:
                    halving[j] *= 0.5  # no decrease, or t would cross 0 (toward the minimum): halve
                    if halving[j] < 1e-6:
                        stuck[j] = True
                    else:
                        still.append(j)
                    continue
                moved = halving[j] * np.max(np.abs(steps[j, :d]) / (1.0 + np.abs(trial[:d])))
                points[j], norms[j] = trial, norm
                if halving[j] > 0 and moved <= NEWTON_TOL:
                    continue
                system = np.zeros((d + 1, d + 1))
                system[:d, :d] = hess_all[row]
                system[:d, d] = directions[j]
                system[d, :d] = grad[row]
                steps[j] = np.linalg.lstsq(system, -residual, rcond=None)[0]
                halving[j] = 1.0
                still.append(j)
            active = np.array(still, dtype=np.int64)
        stuck[active] = True
        extremes = np.einsum("ij,ij->i", directions, points[:, :d])
        for j in np.flatnonzero(stuck):
            extremes[j] = self.tilted_extreme(gamma_hat, floors[j], directions[j], start_t[j])
        self.check_resolved(points[:, :d])
        return extremes

    def tilted_extreme(self, gamma_hat: np.ndarray, floor: float, x: np.ndarray, t_start: float) -> float:
        r"""One direction of :meth:`boundary` the slow, sure way: :math:`\gamma(t) = \arg\max\,
        \ell(\gamma) + t\, x^\top \gamma` (concave: damped Newton, warm-started) and Brent's root of
        :math:`\ell(\gamma(t)) = \text{floor}` in :math:`t > 0` (:math:`\ell(\gamma(t))` falls as
        :math:`t` grows)."""
        state = {"gamma": gamma_hat.copy()}

        def drop(t: float) -> float:
            gamma = state["gamma"]
            loglik, grad, hess = (a[0] for a in self.evaluate(gamma[None, :]))
            for _ in range(NEWTON_MAX_ITER):
                step = np.linalg.lstsq(-hess, grad + t * x, rcond=None)[0]
                objective = loglik + t * float(x @ gamma)
                gamma, loglik, grad, hess, converged = self.damped_step(gamma, step, objective, t, x)
                if converged:
                    break
            state["gamma"] = gamma
            return float(loglik - floor)

        high = t_start
        while drop(high) > 0.0:
            high *= 2.0
        if not drop(0.0) > 0.0:
            # The fit at t = 0 is the maximum itself; it is lost where the likelihood is nearly flat
            # (weights that add up to a few dozen rows: the region has no bound worth the name).
            msg = (
                "calibration_belt: the confidence region has no finite bound on these rows; the belt "
                "needs many rows (weights count as repeated rows: pass frequencies, not normalised weights)"
            )
            raise ValueError(msg)
        t = optimize.brentq(drop, 0.0, high, xtol=1e-14, rtol=1e-13)
        drop(t)
        return float(x @ state["gamma"])


# ------------------------------------------------------------------------------------------------
# The result and the function


@dataclass(frozen=True)
class CalibrationBeltResult:
    """What :func:`calibration_belt` measured.

    Attributes
    ----------
    degree : int
        :math:`m`, the polynomial degree chosen by forward selection.
    coefficients : numpy.ndarray of shape (m + 1,)
        :math:`\\hat\\beta_0, \\dots, \\hat\\beta_m`, on powers of :math:`\\operatorname{logit}(p)`.
    statistic : float
        :math:`T = 2 (\\hat\\ell_m - \\ell_{\\text{bisector}})`.
    p_value : float
        :math:`1 - F_m(T)` (:func:`belt_statistic_cdf`).
    confidence_levels : tuple of float
        The belt's levels, one row of ``lower`` and ``upper`` each.
    grid : numpy.ndarray of shape (G,)
        The predicted probabilities the belt is evaluated at.
    lower, upper : numpy.ndarray of shape (len(confidence_levels), G)
        The belt: the smallest and largest fitted probability over the confidence region.
    n : int
        Rows of positive weight.
    """

    degree: int
    coefficients: np.ndarray
    statistic: float
    p_value: float
    confidence_levels: tuple[float, ...]
    grid: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n: int


def _grid(grid: Any, span: np.ndarray) -> np.ndarray:
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        if grid < 2:
            msg = f"grid: a count must be at least 2, got {grid}"
            raise ValueError(msg)
        return np.linspace(float(special.expit(span[0])), float(special.expit(span[1])), int(grid))
    values = np.asarray(grid, dtype=np.float64).ravel()
    if values.shape[0] == 0 or not np.all((values > 0.0) & (values < 1.0)):
        msg = "grid: need at least one probability, each strictly between 0 and 1"
        raise ValueError(msg)
    return values


def _select_and_band(
    fit: _PolynomialFit,
    levels: tuple[float, ...],
    threshold: float,
    max_degree: int,
    grid: Any,
    span: np.ndarray,
) -> tuple[int, np.ndarray, float, np.ndarray, np.ndarray, np.ndarray]:
    """The degree, the fit on the scaled logit, the statistic, the grid and the belt's two sides."""
    scale = fit.scale
    bisector = np.array([0.0, scale])
    null = float(fit.evaluate(bisector[None, :])[0][0])
    first = fit.maximise(bisector)
    if first is None:
        msg = "y_prob: the scores do not identify the calibration slope"
        raise ValueError(msg)
    gamma, loglik, hess = first
    critical = float(stats.chi2.ppf(threshold, 1))
    for _ in range(max_degree - 1):
        larger = fit.maximise(np.append(gamma, 0.0))
        if larger is None or 2.0 * (larger[1] - loglik) < critical:
            break
        gamma, loglik, hess = larger
    degree = gamma.shape[0] - 1
    statistic = max(2.0 * (loglik - null), 0.0)
    probs = _grid(grid, span)
    u = special.logit(probs) / scale
    powers = u[:, None] ** np.arange(degree + 1)
    drops = np.array([_statistic_quantile(level, degree, threshold) for level in levels])
    directions = np.concatenate([powers, -powers])
    extremes = fit.boundary(
        gamma, loglik, hess, np.repeat(drops, directions.shape[0]), np.tile(directions, (len(levels), 1))
    ).reshape(len(levels), 2, probs.shape[0])
    upper, lower = special.expit(extremes[:, 0]), special.expit(-extremes[:, 1])
    return degree, gamma, statistic, probs, lower, upper


@validate_params(
    threshold=Interval(float, 0, 1, closed="neither"),
    max_degree=Interval(int, 1, HIGHEST_DEGREE),
)
def calibration_belt(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    confidence_levels: tuple[float, ...] = (0.8, 0.95),
    threshold: float = 0.95,
    max_degree: int = 4,
    grid: Any = 50,
) -> CalibrationBeltResult:
    r"""The GiViTI calibration belt and its test (Finazzi et al. 2011; Nattino et al. 2014).

    *The model.* :math:`\operatorname{logit} \Pr(y = 1 \mid p) = \sum_{j=0}^{m} \beta_j z^j`,
    :math:`z = \operatorname{logit}(p)`, fitted by weighted maximum likelihood; the scores are
    calibrated when :math:`\beta = (0, 1, 0, \dots, 0)`, the bisector.

    *The degree* (Nattino et al. 2014, section 3.1). Starting at :math:`m = 1`, the term
    :math:`z^{m+1}` is added while its likelihood-ratio statistic :math:`2(\hat\ell_{m+1} - \hat\ell_m)`
    exceeds :math:`\chi^2_{1}`'s ``threshold`` quantile, up to ``max_degree``.

    *The test* (section 3.2). :math:`T = 2(\hat\ell_m - \ell(0, 1, 0, \dots))`; its null distribution,
    conditional on the selected degree, is :math:`F_m` of :func:`belt_statistic_cdf`, and the p-value is
    :math:`1 - F_m(T)`.

    *The belt* (section 4; Finazzi et al. 2011). For a level :math:`1 - \alpha`, the region
    :math:`\{\beta: 2(\hat\ell_m - \ell(\beta)) \le F_m^{-1}(1 - \alpha)\}` and, at each grid point,
    the smallest and the largest :math:`\sigma(\sum_j \beta_j z^j)` over it.

    Parameters
    ----------
    y_true, y_prob : array-like of shape (n,)
        Labels in [0, 1] and predicted probabilities (clipped to ``[1e-12, 1 - 1e-12]`` before the
        logit).
    sample_weight : array-like of shape (n,), optional
        Frequency weights (integer weights = repeated rows).
    confidence_levels : tuple of float, default (0.8, 0.95)
        The belt's levels, each in (0, 1).
    threshold : float in (0, 1), default 0.95
        :math:`q`, the forward selection's level: a term is added when its statistic exceeds
        :math:`\chi^2_{1, q}` (givitiR's ``thres``).
    max_degree : int in [1, 4], default 4
        The highest degree tried (the null distribution is known up to 4).
    grid : int or array-like, default 50
        A count of probabilities evenly spaced between the lowest and highest score of positive weight,
        or the probabilities themselves (in (0, 1)).

    Returns
    -------
    CalibrationBeltResult

    Notes
    -----
    The selection, the statistic, the p-value and the belt are equal to the ``calibration-belt``
    package (0.1.41, the Python port of givitiR's external-validation belt) to its optimiser's
    tolerance, and the fits to statsmodels' binomial GLM on the powers of the logit; the belt is
    checked against a brute-force search over the confidence region (tests/test_metrics_belt.py). The
    internal-validation variant of givitiR (the scores fitted on the same rows, selection from
    :math:`m = 2`) is not offered. The asymptotic distribution needs enough events: Nattino et al.
    advise against the belt on a few dozen rows. The fits use the scaled logit :math:`z / \max|z|`,
    which keeps the powers' Hessian well conditioned. Labels of one class, fewer than two distinct
    scores or classes separated by the score raise ``ValueError``.

    References
    ----------
    .. [1] S. Finazzi, D. Poole, D. Luciani, P. E. Cogo, G. Bertolini, "Calibration belt for
       quality-of-care assessment based on dichotomous outcomes", PLoS ONE 6(2): e16110, 2011.
    .. [2] G. Nattino, S. Finazzi, G. Bertolini, "A new calibration test and a reappraisal of the
       calibration belt for the assessment of prediction models based on dichotomous outcomes",
       Statistics in Medicine 33(14): 2390-2407, 2014.
    .. [3] G. Nattino, S. Finazzi, G. Bertolini, "A new test and graphical tool to assess the
       goodness of fit of logistic regression models", Statistics in Medicine 35(5): 709-720, 2016.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.random(2000)
    >>> y = (rng.random(2000) < p**1.5).astype(float)
    >>> belt = calibration_belt(y, p, grid=[0.2, 0.5, 0.8])
    >>> belt.degree, belt.p_value < 0.001
    (1, True)
    >>> belt.lower.round(2).tolist()
    [[0.08, 0.32, 0.69], [0.07, 0.31, 0.68]]
    """
    levels = tuple(float(c) for c in confidence_levels)
    if not levels or not all(0.0 < c < 1.0 for c in levels):
        msg = f"confidence_levels: each level must lie in (0, 1), got {list(levels)}"
        raise ValueError(msg)
    rows, start = _recalibration_rows(y_true, y_prob, sample_weight)
    check_repeated_rows(float(start[1]), "the calibration belt", sample_weight is not None)
    span = rows.reduce(_logit_span, _widest)
    if not span[1] > span[0]:
        msg = "y_prob: every score has the same logit; the calibration belt needs two distinct scores"
        raise ValueError(msg)
    scale = float(max(abs(span[0]), abs(span[1])))
    fit = _PolynomialFit(rows, scale, span)
    try:
        degree, gamma, statistic, probs, lower, upper = _select_and_band(
            fit, levels, threshold, max_degree, grid, span
        )
    except _Unresolved:
        fit.compressed = False
        degree, gamma, statistic, probs, lower, upper = _select_and_band(
            fit, levels, threshold, max_degree, grid, span
        )
    p_value = 1.0 - belt_statistic_cdf(statistic, degree, threshold)
    n = int(rows.sum(_positive_count)[0])
    return CalibrationBeltResult(
        degree=degree,
        coefficients=gamma / scale ** np.arange(degree + 1),
        statistic=statistic,
        p_value=float(p_value),
        confidence_levels=levels,
        grid=probs,
        lower=lower,
        upper=upper,
        n=n,
    )


def _positive_count(block: CheckedRows) -> np.ndarray:
    return np.array([float(block.n if block.w is None else int((block.w > 0).sum()))])


__all__ = ["CalibrationBeltResult", "belt_bin_sums", "belt_statistic_cdf", "calibration_belt", "gauss_nodes"]

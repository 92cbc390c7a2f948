r"""Dirichlet calibration (Kull et al. 2019): multinomial logistic regression on log-probabilities.

.. math::

    \hat{\mathbf p} = \operatorname{softmax}(W \ln \mathbf p + \mathbf b),

with off-diagonal and intercept regularisation (ODIR). Fitted by Newton steps whose gradient and
Hessian are sums over rows, computed a block of rows at a time as one matrix product, so memory stays
bounded and the same code runs on cupy arrays.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal._validation import check_class_labels, check_sample_weight
from gpucal.calibrators.base import Calibrator, Constraint, Interval
from gpucal.calibrators.logistic import newton_minimize
from gpucal.calibrators.temperature import as_2d_scores, check_several_classes
from gpucal.persistence import check_magnitude
from gpucal.registry import calibration_method
from gpucal.rows import reject_dask

# A block of rows holds block_rows * (k + 1)^2 float64 for the Hessian products: about 32 MiB.
BLOCK_ELEMENTS = 1 << 22


def odir_ridge(n_classes: int, reg_lambda: float, reg_mu: float) -> np.ndarray:
    r"""Per-parameter ridge weights :math:`\lambda_j` (of :math:`\tfrac12\lambda_j\theta_j^2`) for ODIR.

    The penalty is :math:`\frac{\lambda}{k(k-1)} \sum_{i \ne j} W_{ij}^2 + \frac{\mu}{k} \sum_j b_j^2`
    over the free rows (all but the last, which is fixed at zero), flattened row by row as
    ``[W[a, 0], ..., W[a, k-1], b[a]]``.
    """
    k = n_classes
    ridge = np.full((k - 1, k + 1), 2.0 * reg_lambda / (k * (k - 1)))
    ridge[np.arange(k - 1), np.arange(k - 1)] = 0.0
    ridge[:, k] = 2.0 * reg_mu / k
    return ridge.ravel()


def dirichlet_sums(
    log_p: Any, labels: Any, w: Any, theta: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    r"""Row sums of the weighted multinomial log-loss, its gradient and Hessian at ``theta``.

    With :math:`x_i = [\ln p_i, 1]`, :math:`q_i = \operatorname{softmax}(\Theta x_i)` (last row of
    :math:`\Theta` zero) and :math:`r_i = q_i - e_{y_i}`:

    .. math::

        g_{(a, j)} = \sum_i w_i r_{ia} x_{ij}, \qquad
        H_{(a, j), (b, l)} = \sum_i w_i (\delta_{ab} q_{ia} - q_{ia} q_{ib})\, x_{ij} x_{il},

    for :math:`a, b < k - 1`. A block's Hessian is one product of a ``((k-1)^2, B)`` and a
    ``(B, (k+1)^2)`` matrix.
    """
    xp = array_namespace(log_p, labels, w)
    n, k = log_p.shape
    free = k - 1
    coef = np.vstack([theta.reshape(free, k + 1), np.zeros((1, k + 1))])
    coef_dev = xp.asarray(coef)
    block = max(1, BLOCK_ELEMENTS // (k + 1) ** 2)
    loss = 0.0
    grad = xp.zeros((free, k + 1))
    hess4 = xp.zeros((free * free, (k + 1) ** 2))
    for start in range(0, n, block):
        stop = min(n, start + block)
        x = xp.concatenate([log_p[start:stop], xp.ones((stop - start, 1))], axis=1)
        wb = w[start:stop]
        yb = labels[start:stop]
        rows = xp.arange(stop - start)
        z = x @ coef_dev.T
        z -= z.max(axis=1, keepdims=True)
        log_q = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
        loss += float(-(wb * log_q[rows, yb]).sum())
        q = xp.exp(log_q)
        r = q.copy()
        r[rows, yb] -= 1.0
        grad += (r[:, :free] * wb[:, None]).T @ x
        qf = q[:, :free]
        curvature = -qf[:, :, None] * qf[:, None, :]
        curvature[:, xp.arange(free), xp.arange(free)] += qf
        curvature *= wb[:, None, None]
        outer = x[:, :, None] * x[:, None, :]
        hess4 += curvature.reshape(-1, free * free).T @ outer.reshape(-1, (k + 1) ** 2)
    size = free * (k + 1)
    hess = to_numpy(hess4).reshape(free, free, k + 1, k + 1).transpose(0, 2, 1, 3).reshape(size, size)
    return loss, to_numpy(grad).ravel(), hess


def fit_dirichlet(
    log_p: Any, labels: Any, w: Any, *, reg_lambda: float = 0.0, reg_mu: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(W, b)`` (shapes ``(k, k)`` and ``(k,)``, last row and entry zero) of the Dirichlet map."""
    xp = array_namespace(log_p, labels, w)
    k = int(log_p.shape[1])
    start = np.zeros((k - 1, k + 1))
    start[np.arange(k - 1), np.arange(k - 1)] = 1.0  # the identity map softmax(ln p) = p
    start[:, k - 1] = -1.0

    def sums(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        return dirichlet_sums(log_p, labels, w, theta)

    result = newton_minimize(
        sums,
        start.ravel(),
        total_weight=float(xp.sum(w)),
        l2=odir_ridge(k, reg_lambda, reg_mu),
        what="DirichletCalibrator",
    )
    full = np.vstack([result.theta.reshape(k - 1, k + 1), np.zeros((1, k + 1))])
    return full[:, :k].copy(), full[:, k].copy()


def predict_dirichlet(log_p: Any, coef: np.ndarray, intercept: np.ndarray) -> Any:
    """Return ``softmax(log_p @ coef.T + intercept)`` (numpy or cupy)."""
    xp = array_namespace(log_p)
    z = log_p @ xp.asarray(coef).T
    z += xp.asarray(intercept)
    z -= z.max(axis=1, keepdims=True)
    out = xp.exp(z)
    out /= out.sum(axis=1, keepdims=True)
    return out


@calibration_method("dirichlet")
class DirichletCalibrator(Calibrator):
    r"""Dirichlet calibration of a multi-class probability matrix, with ODIR regularisation.

    .. math::

        \hat{\mathbf p} = \operatorname{softmax}(W \ln \mathbf p + \mathbf b), \qquad
        \min_{W, \mathbf b}\; \frac{\sum_i w_i\, \ell_i}{\sum_i w_i}
        + \frac{\lambda}{k(k-1)} \sum_{i \ne j} W_{ij}^2 + \frac{\mu}{k} \sum_j b_j^2,

    :math:`\ell_i` the log-loss of row :math:`i`. The last row of :math:`W` and the last entry of
    :math:`\mathbf b` are fixed at 0 (softmax is unchanged by adding one row to all), as in the
    reference implementation ``dirichletcal`` (``ref_row=True``); the penalty is on that form.

    Parameters
    ----------
    reg_lambda : float, default=0.0
        :math:`\lambda`, weight of the off-diagonal penalty. 0 is the maximum likelihood fit (the
        paper picks :math:`\lambda` and :math:`\mu` by cross-validation; with many classes and few
        rows, set both).
    reg_mu : float, default=0.0
        :math:`\mu`, weight of the intercept penalty.

    Attributes
    ----------
    coef_ : numpy.ndarray of shape (k, k)
        :math:`W` (last row zero).
    intercept_ : numpy.ndarray of shape (k,)
        :math:`\mathbf b` (last entry zero).
    n_classes_ : int

    Notes
    -----
    ``X`` is an ``(n, k)`` probability matrix (rows sum to 1; :math:`\ln\max(p, \epsilon)` with
    :math:`\epsilon` machine epsilon; dirichletcal clips at the smallest normal float instead), ``y``
    class indices in ``[0, k)``. The penalty uses the paper's normalisation (dirichletcal's
    ``reg_norm=True``) and a weighted-mean log-loss (dirichletcal's mean, with weights). Newton's
    Hessian has :math:`((k-1)(k+1))^2` entries and costs :math:`O(n k^4)` per step: fine for tens
    of classes, slow for hundreds (dirichletcal switches to L-BFGS above 36 classes). dirichletcal
    needs Python >= 3.12, so the tests check a hand-solved case and, for two classes, equality with
    logistic regression on :math:`[\ln p_0, \ln p_1]` (beta calibration without its refit rule).

    References
    ----------
    .. [1] M. Kull, M. Perello-Nieto, M. Kängsepp, T. Silva Filho, H. Song, P. Flach, "Beyond
       temperature scaling: obtaining well-calibrated multi-class probabilities with Dirichlet
       calibration", Advances in Neural Information Processing Systems 32 (NeurIPS), 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from gpucal.calibrators.dirichlet import DirichletCalibrator
    >>> p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.6, 0.3, 0.1]])
    >>> cal = DirichletCalibrator(reg_lambda=1.0, reg_mu=1.0).fit(p, [0, 1, 2, 1])
    >>> cal.predict(p).shape
    (4, 3)
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "reg_lambda": Interval(float, 0.0, None),
        "reg_mu": Interval(float, 0.0, None),
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "coef_": "float_matrix",
        "intercept_": "float_array",
        "n_classes_": "int",
    }

    def __init__(self, *, reg_lambda: float = 0.0, reg_mu: float = 0.0) -> None:
        self.reg_lambda = reg_lambda
        self.reg_mu = reg_mu

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> DirichletCalibrator:
        """Fit on an ``(n, k)`` probability matrix and class labels in ``[0, k)``.

        Parameters
        ----------
        X : array-like of shape (n, k)
            Probabilities, rows summing to 1.
        y : array-like of shape (n,)
            Class indices.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        reject_dask(self, X, y, sample_weight)
        self._validate_params()
        log_p = as_2d_scores(X)
        n, k = log_p.shape
        labels = check_class_labels(y, n, k)
        w = check_sample_weight(sample_weight, n, xp=array_namespace(log_p))
        check_several_classes(labels, w, k)
        weighted = log_p[w > 0]
        if bool(array_namespace(weighted).all(weighted == weighted[0])):
            # The map's slopes are not identified: it fitted one, steep and not monotone (0.84 at a
            # score of 0.9, 0 at 1), as beta calibration, its two-class form, refuses to.
            msg = "X: every row holds the same probabilities; Dirichlet calibration needs two distinct rows"
            raise ValueError(msg)
        self.coef_, self.intercept_ = fit_dirichlet(
            log_p, labels, w, reg_lambda=float(self.reg_lambda), reg_mu=float(self.reg_mu)
        )
        self.n_classes_ = int(k)
        return self

    def predict(self, X: Any) -> Any:
        """Return the calibrated ``(n, k)`` probability matrix (numpy or cupy, as ``X``).

        Parameters
        ----------
        X : array-like of shape (n, k)
            Probabilities, rows summing to 1.

        Returns
        -------
        array of shape (n, k)
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, list(self._state_spec))
        log_p = as_2d_scores(X)
        if log_p.shape[1] != self.n_classes_:
            msg = f"X: has {log_p.shape[1]} columns, the calibrator was fitted on {self.n_classes_} classes"
            raise ValueError(msg)
        return predict_dirichlet(log_p, self.coef_, self.intercept_)

    def _check_state(self) -> None:
        k = self.n_classes_
        if k < 2 or self.coef_.shape != (k, k) or self.intercept_.shape != (k,):
            msg = (
                f"coef_ {self.coef_.shape} and intercept_ {self.intercept_.shape} do not fit n_classes_ = {k}"
            )
            raise ValueError(msg)
        check_magnitude(self.coef_, "coef_")
        check_magnitude(self.intercept_, "intercept_")

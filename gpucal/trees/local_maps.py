r"""The map that calibrates each part: one-dimensional maps fitted per part by grouped Newton steps.

Every map but ``"scale"`` is a logistic model of the score inside a part :math:`m`,

.. math::

    q_i = \sigma\big(o_i + \theta_m^\top x_i\big),

with a design :math:`x_i` and offset :math:`o_i` fixed by the kind (:math:`l = \operatorname{logit} p`,
``p`` the clipped score):

===============  =============================  ======  ===============================================
kind             :math:`x_i`                    offset  map
===============  =============================  ======  ===============================================
``constant``     :math:`(1)`                    0       :math:`\sigma(c)`, the part's label rate
``shift``        :math:`(1)`                    l       :math:`\sigma(l + d)`
``temperature``  :math:`(l)`                    0       :math:`\sigma(a l)` (Guo et al. 2017, binary)
``platt``        :math:`(l, 1)`                 0       :math:`\sigma(a l + b)` (Platt 1999)
``beta``         :math:`(\ln p, -\ln(1-p), 1)`  0       :math:`\sigma(a \ln p - b \ln(1-p) + c)`, a, b >= 0
===============  =============================  ======  ===============================================

(beta: Kull et al. 2017). A Newton step needs per part only

.. math::

    g_m = \sum_{i \in m} w_i (q_i - y_i)\, x_i + \lambda (\theta_m - \theta^0_m), \qquad
    H_m = \sum_{i \in m} w_i q_i (1 - q_i)\, x_i x_i^\top + \lambda I,

sums over rows grouped by part (:func:`local_map_sums`: one fused numba pass on the CPU,
``gpucal.kernels.group_sums`` passes on the GPU and in the oracle), so every part of a partition is fitted at
once and a Dask fit is the same steps over summed partitions. The ridge :math:`\lambda` (``penalty``)
pulls a part toward :math:`\theta^0` (``prior``, also the starting point): MBCT uses it to shrink
leaves toward the grown map. Steps are bounded per coordinate (a trust region, as XGBoost's
``max_delta_step``): a part with no positives, or separable ones, has no finite optimum, and an undamped
step there overshoots by orders of magnitude. The whole step is shortened to the bound, which keeps the
Newton direction. Beta's ``a, b >= 0`` are kept by projected Newton: a coordinate at its bound whose
gradient pushes it below is frozen for that step.

``"scale"`` is the paper map of MBCT (Huang et al. 2022, Sec. 4.1), :math:`\min(k f, 1)` with
:math:`k_m = (\sum w y + \lambda k^0_m) / (\sum w f + \lambda)`, closed form from one group-sum pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.kernels import STAT_W, STAT_WF, STAT_WY, group_sums
from gpucal.kernels.jit import map_row_chunks, numba, numpy_row_chunks, parallel_rows
from gpucal.kernels.trees_oracle import EPS  # probabilities clipped to [EPS, 1 - EPS], as the trees clip them

LOCAL_MAP_KINDS = ("constant", "scale", "shift", "temperature", "platt", "beta")
_N_PARAMS = {"constant": 1, "scale": 1, "shift": 1, "temperature": 1, "platt": 2, "beta": 3}
# The identity map of each kind (the start when no prior is given; "constant" starts at the part's rate).
_IDENTITY = {
    "constant": (0.0,),
    "scale": (1.0,),
    "shift": (0.0,),
    "temperature": (1.0,),
    "platt": (1.0, 0.0),
    "beta": (1.0, 1.0, 0.0),
}
# Per-coordinate trust region: slopes move at most 0.5 per step, intercepts 2 (in logits).
_MAX_STEP = {
    "constant": (2.0,),
    "shift": (2.0,),
    "temperature": (0.5,),
    "platt": (0.5, 2.0),
    "beta": (0.5, 0.5, 2.0),
}
# An intercept beyond this is a probability ratio of e**30: only a near-empty or separable part asks for
# it, and a larger one would saturate the sigmoid to exactly 0 or 1 (an infinite log-loss downstream).
MAX_SHIFT = 30.0
# Keeps a part's Hessian invertible when its design is degenerate (all logits equal: the slope is then
# not identified, and the step is the minimum-norm one).
RIDGE = 1e-9
# Row chunks of the fused CPU pass: a fixed count (so sums do not depend on the thread count).
MAX_CHUNKS = 16
MIN_CHUNK_ROWS = 1 << 16


def n_map_params(kind: str) -> int:
    """Return the number of parameters of a part's map of ``kind``."""
    _check_kind(kind)
    return _N_PARAMS[kind]


def identity_params(kind: str) -> np.ndarray:
    """Return the parameters under which a map of ``kind`` leaves the score unchanged."""
    _check_kind(kind)
    return np.array(_IDENTITY[kind], dtype=np.float64)


def fit_local_maps(
    score: Any,
    y: Any,
    w: Any,
    part: Any,
    n_parts: int,
    kind: str,
    *,
    prior: np.ndarray | None = None,
    penalty: float = 0.0,
    min_part_weight: float = 0.0,
    fallback: np.ndarray | None = None,
    n_steps: int = 100,
    tol: float = 1e-10,
    backend: str = "auto",
) -> np.ndarray:
    """Fit one map of ``kind`` per part; return the parameters, ``(n_parts, n_map_params(kind))``.

    Parameters
    ----------
    score, y : float64 arrays of shape (n,)
        Probabilities to calibrate and labels in [0, 1] (numpy or cupy).
    w : float64 array of shape (n,) or None
        Row weights.
    part : int array of shape (n,)
        Each row's part in ``[0, n_parts)``; -1 leaves a row out.
    n_parts : int
    kind : {"constant", "scale", "shift", "temperature", "platt", "beta"}
    prior : array of shape (n_parts, n_params), optional
        Start of the Newton steps and target of the ridge; default the identity map (for
        ``"constant"``, the logit of the weighted label mean of all rows).
    penalty : float, default 0
        Ridge weight :math:`\\lambda`, in units of row weight.
    min_part_weight : float, default 0
        Parts lighter than this (and parts with no rows) are not fitted: they get ``fallback``.
    fallback : array of shape (n_params,), optional
        Parameters of the unfitted parts; default their ``prior`` row.
    n_steps : int, default 100
        Most Newton steps; fewer when every step is below ``tol`` (a far optimum, reached through
        shortened steps, takes a few dozen).
    tol : float, default 1e-10
    backend : {"auto", "cpu", "cuda", "oracle"}
        Kernel backend of the sums.
    """
    _check_kind(kind)
    k = _N_PARAMS[kind]
    start = start_params(score, y, w, n_parts, kind) if prior is None else np.array(prior, dtype=np.float64)
    if start.shape != (n_parts, k):
        msg = f"prior: expected shape {(n_parts, k)} for {n_parts} parts of kind {kind!r}, got {start.shape}"
        raise ValueError(msg)
    if kind == "scale":
        stats = part_sums(score, y, w, part, n_parts, backend)
        return fit_scale_maps_from_sums(
            stats, start, penalty=penalty, min_part_weight=min_part_weight, fallback=fallback
        )

    design_offset = map_design(score, kind)

    def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return local_map_sums(score, y, w, part, theta, kind, backend=backend, design_offset=design_offset)

    return fit_local_maps_from_sums(
        sums,
        start,
        kind,
        penalty=penalty,
        min_part_weight=min_part_weight,
        fallback=fallback,
        n_steps=n_steps,
        tol=tol,
    )


MapSums = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def flatten_map_sums(weight: np.ndarray, grad: np.ndarray, hess: np.ndarray) -> np.ndarray:
    """:func:`local_map_sums`' three arrays as one vector ``[w, grad, hess]``, to be added elementwise."""
    return np.concatenate([weight, grad.ravel(), hess.ravel()])


def unflatten_map_sums(flat: np.ndarray, n_parts: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inverse of :func:`flatten_map_sums` for ``n_parts`` parts of ``k`` parameters."""
    grad_end = n_parts + n_parts * k
    return flat[:n_parts], flat[n_parts:grad_end].reshape(n_parts, k), flat[grad_end:].reshape(n_parts, k, k)


def fit_scale_maps_from_sums(
    stats: np.ndarray,
    start: np.ndarray,
    *,
    penalty: float = 0.0,
    min_part_weight: float = 0.0,
    fallback: np.ndarray | None = None,
) -> np.ndarray:
    r"""Kind "scale" from per-part group sums ``(n_parts, 7)`` (:func:`part_sums`), in closed form.

    :math:`k_m = (\sum w y + \lambda k^0_m) / (\sum w f + \lambda)` (Huang et al. 2022, Sec. 4.1, with
    the ridge toward the start :math:`k^0`); parts without weight, or lighter than ``min_part_weight``,
    get ``fallback`` (default their start), as in :func:`fit_local_maps`.
    """
    den = stats[:, STAT_WF] + penalty
    safe = np.where(den > 0, den, 1.0)
    theta = np.where(den > 0, (stats[:, STAT_WY] + penalty * start[:, 0]) / safe, start[:, 0])[:, None]
    return _with_fallback(theta, stats[:, STAT_W], start, min_part_weight, fallback)


def fit_local_maps_from_sums(
    sums: MapSums,
    start: np.ndarray,
    kind: str,
    *,
    penalty: float = 0.0,
    min_part_weight: float = 0.0,
    fallback: np.ndarray | None = None,
    n_steps: int = 100,
    tol: float = 1e-10,
) -> np.ndarray:
    """:func:`fit_local_maps` of a logistic ``kind`` from a function of the per-part sums.

    ``sums(theta)`` returns :func:`local_map_sums` at ``theta`` (per part :math:`\\sum w`, gradient and
    Hessian), over rows held anywhere: one array, or the blocks of ``gpucal.rows`` whose sums are added.
    ``start`` (``(n_parts, k)``) is both the first point and the ridge target.
    """
    _check_kind(kind)
    if kind == "scale":
        msg = "kind 'scale' is fitted in closed form by fit_local_maps, not by Newton steps"
        raise ValueError(msg)
    start = np.array(start, dtype=np.float64)
    theta, weight = _newton(sums, start, kind, penalty, n_steps, tol)
    return _with_fallback(theta, weight, start, min_part_weight, fallback)


def _with_fallback(
    theta: np.ndarray,
    weight: np.ndarray,
    start: np.ndarray,
    min_part_weight: float,
    fallback: np.ndarray | None,
) -> np.ndarray:
    """Give parts with no weight, or lighter than ``min_part_weight``, ``fallback`` (default their start)."""
    unfitted = (weight <= 0) | (weight < min_part_weight)
    if fallback is None:
        return np.where(unfitted[:, None], start, theta)
    fallback = np.asarray(fallback, dtype=np.float64).reshape(theta.shape[1])
    return np.where(unfitted[:, None], fallback[None, :], theta)


def apply_local_maps(score: Any, part: Any, params: np.ndarray, kind: str) -> Any:
    """Return each row's score through its part's map (``part`` indexes the rows of ``params``)."""
    _check_kind(kind)
    xp = array_namespace(score)
    theta = xp.asarray(params)[part]
    if kind == "scale":
        return xp.minimum(theta[:, 0] * score, 1.0)
    design, offset = map_design(score, kind)
    return _sigmoid(offset + (design * theta).sum(axis=1))


def local_map_sums(
    score: Any,
    y: Any,
    w: Any,
    part: Any,
    theta: np.ndarray,
    kind: str,
    *,
    backend: str = "auto",
    design_offset: tuple[Any, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Return per part :math:`\sum w`, the gradient ``(P, k)`` and the Hessian ``(P, k, k)`` at ``theta``.

    On numpy inputs with the CPU backend, one fused numba pass; otherwise one ``gpucal.kernels.group_sums``
    pass per distinct sum (the GPU and oracle path), which gives the same sums in another order.
    ``design_offset`` is :func:`map_design` of ``score`` and ``kind``, passed by callers that take several
    Newton steps on the same scores (two logarithms per row, computed once).
    """
    design, offset = map_design(score, kind) if design_offset is None else design_offset
    xp = array_namespace(score)
    n_parts, k = theta.shape
    if xp is np and backend in ("auto", "cpu"):
        wt = np.empty(0) if w is None else np.ascontiguousarray(w, dtype=np.float64)
        n_chunks = max(1, min(MAX_CHUNKS, score.shape[0] // MIN_CHUNK_ROWS))
        part = np.ascontiguousarray(part, dtype=np.int32)  # one compiled variant (MBCT int32, HC int64 ids)
        flat = _glm_sums_cpu(design, offset, y, wt, part, theta, n_chunks)
        weight, grad, hess_upper = flat[:, 0], flat[:, 1 : 1 + k], flat[:, 1 + k :]
    else:
        theta_rows = xp.asarray(theta)[part]
        q = _sigmoid(offset + (design * theta_rows).sum(axis=1))
        ones = xp.ones_like(q)
        weighted = ones if w is None else w
        curvature = weighted * q * (1.0 - q)
        weight = _group_total(ones, weighted, part, n_parts, backend)
        grad = np.stack(
            [_group_total(design[:, j] * (q - y), weighted, part, n_parts, backend) for j in range(k)], axis=1
        )
        hess_upper = np.stack(
            [
                _group_total(design[:, a] * design[:, b], curvature, part, n_parts, backend)
                for a in range(k)
                for b in range(a, k)
            ],
            axis=1,
        )
    hess = np.empty((n_parts, k, k))
    c = 0
    for a in range(k):
        for b in range(a, k):
            hess[:, a, b] = hess[:, b, a] = hess_upper[:, c]
            c += 1
    return weight, grad, hess


def _newton(
    sums: MapSums,
    start: np.ndarray,
    kind: str,
    penalty: float,
    n_steps: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Return the fitted ``theta`` and each part's weight after at most ``n_steps`` Newton steps."""
    theta = start.copy()
    k = theta.shape[1]
    max_step = np.array(_MAX_STEP[kind])
    eye = np.eye(k)
    weight = np.zeros(theta.shape[0])
    for _ in range(n_steps):
        weight, grad, hess = sums(theta)
        grad = grad + penalty * (theta - start)
        hess = hess + (penalty + RIDGE) * eye
        if kind == "beta":
            grad, hess = _freeze_bounded(theta, grad, hess)
        try:
            step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:
            # A part's curvature is singular once its ridge is lost in rounding (weights of 1e20 and
            # a part of one score): its least-norm step, the others' as solved.
            step = (np.linalg.pinv(hess) @ grad[:, :, None])[:, :, 0]
        # Shorten the whole step, not each coordinate: clipping one coordinate turns the Newton
        # direction, and on a nearly flat valley (a part with two close scores) the iterates then bounce.
        ratio = np.abs(step) / max_step
        step = step / np.maximum(1.0, ratio.max(axis=1, initial=0.0))[:, None]
        step[weight <= 0] = 0.0
        theta = theta - step
        theta[:, -1] = np.clip(theta[:, -1], -MAX_SHIFT, MAX_SHIFT)
        if kind == "beta":
            theta[:, :2] = np.maximum(theta[:, :2], 0.0)
        if float(np.abs(step).max(initial=0.0)) <= tol:
            break
    return theta, weight


def _freeze_bounded(theta: np.ndarray, grad: np.ndarray, hess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Freeze beta's ``a`` or ``b`` where it sits at 0 and the gradient would push it below."""
    grad, hess = grad.copy(), hess.copy()
    for j in (0, 1):
        frozen = (theta[:, j] <= 0.0) & (grad[:, j] > 0.0)
        grad[frozen, j] = 0.0
        hess[frozen, j, :] = 0.0
        hess[frozen, :, j] = 0.0
        hess[frozen, j, j] = 1.0
    return grad, hess


def start_params(score: Any, y: Any, w: Any, n_parts: int, kind: str) -> np.ndarray:
    """The identity map for every part; for ``"constant"``, the logit of the overall label mean."""
    if kind != "constant":
        return np.tile(identity_params(kind), (n_parts, 1))
    mean = float(y.mean()) if w is None else float((w * y).sum() / w.sum())
    mean = min(max(mean, EPS), 1.0 - EPS)
    return np.full((n_parts, 1), np.log(mean) - np.log1p(-mean))


def _sigmoid(eta: Any) -> Any:
    """The logistic function, exp of non-positive arguments only: no overflow however far a logit runs."""
    xp = array_namespace(eta)
    e = xp.exp(-xp.abs(eta))
    return xp.where(eta >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def map_design(score: Any, kind: str) -> tuple[Any, Any]:
    """Return the design ``(n, k)`` and offset ``(n,)`` of a kind's logistic model (module table).

    On numpy, computed over row chunks on every core (``numpy_row_chunks``: the same numbers).
    """
    xp = array_namespace(score)
    if xp is np:
        empty_design, empty_offset = _map_design(score[:0], kind)  # the dtypes of one call
        design = np.empty((score.shape[0], _N_PARAMS[kind]), dtype=empty_design.dtype)
        offset = np.empty(score.shape[0], dtype=empty_offset.dtype)

        def rows(start: int, stop: int) -> None:
            design[start:stop], offset[start:stop] = _map_design(score[start:stop], kind)

        numpy_row_chunks(rows, score.shape[0])
        return design, offset
    return _map_design(score, kind)


def logit_design(logit: Any, kind: str) -> tuple[Any, Any]:
    """:func:`map_design` of ``"shift"`` or ``"platt"`` on the logits themselves (no clip, no logarithm):
    the design of a chain that carries its logits from map to map."""
    xp = array_namespace(logit)
    ones = xp.ones_like(logit)
    if kind == "shift":
        return ones[:, None], logit
    return xp.stack([logit, ones], axis=1), xp.zeros_like(logit)


def probabilities(logit: Any) -> Any:
    """:math:`\\sigma(l)` of every row (``_sigmoid``), over row chunks on every core for a large float64
    vector (``gpucal.kernels.jit.map_row_chunks``)."""
    return map_row_chunks(_sigmoid, logit)


def _map_design(score: Any, kind: str) -> tuple[Any, Any]:
    xp = array_namespace(score)
    p = xp.clip(score, EPS, 1.0 - EPS)
    log_p, log_q = xp.log(p), xp.log1p(-p)
    ones = xp.ones_like(p)
    zeros = xp.zeros_like(p)
    if kind == "constant":
        return ones[:, None], zeros
    if kind == "shift":
        return ones[:, None], log_p - log_q
    if kind == "temperature":
        return (log_p - log_q)[:, None], zeros
    if kind == "platt":
        return xp.stack([log_p - log_q, ones], axis=1), zeros
    return xp.stack([log_p, -log_q, ones], axis=1), zeros


@numba.njit(cache=True, inline="always")
def _logistic_terms(eta, y, w):
    """Return a row's gradient and curvature weights :math:`w (q - y)` and :math:`w q (1 - q)`,
    :math:`q = \\sigma(\\eta)`."""
    q = 1.0 / (1.0 + np.exp(-eta))
    return w * (q - y), w * q * (1.0 - q)


@parallel_rows("design")
def _glm_sums_cpu(design, offset, y, w, part, theta, n_chunks):
    """One fused pass: per part ``[sum w, g (k), upper H (k(k+1)/2)]``, fixed row chunks added in order.

    One and two parameters (shift, temperature, constant; Platt) have their row loop written out:
    the same operations in the same order as the general loop, without its inner loops over ``k``
    (a Platt pass took 35% less time).
    """
    n, k = design.shape
    n_parts = theta.shape[0]
    n_sums = 1 + k + k * (k + 1) // 2
    has_w = w.shape[0] > 0
    private = np.zeros((n_chunks, n_parts, n_sums))
    size = (n + n_chunks - 1) // n_chunks
    for c in numba.prange(n_chunks):
        acc = private[c]
        for i in range(c * size, min(n, (c + 1) * size)):
            if part[i] < 0:
                continue
            m = np.uint64(part[i])
            wi = w[i] if has_w else 1.0
            if k == 1:
                x0 = design[i, 0]
                wr, h = _logistic_terms(offset[i] + theta[m, 0] * x0, y[i], wi)
                acc[m, 0] += wi
                acc[m, 1] += wr * x0
                acc[m, 2] += h * x0 * x0
            elif k == 2:
                x0, x1 = design[i, 0], design[i, 1]
                wr, h = _logistic_terms(offset[i] + theta[m, 0] * x0 + theta[m, 1] * x1, y[i], wi)
                acc[m, 0] += wi
                acc[m, 1] += wr * x0
                acc[m, 2] += wr * x1
                acc[m, 3] += h * x0 * x0
                acc[m, 4] += h * x0 * x1
                acc[m, 5] += h * x1 * x1
            else:
                eta = offset[i]
                for j in range(k):
                    eta += theta[m, j] * design[i, j]
                wr, h = _logistic_terms(eta, y[i], wi)
                acc[m, 0] += wi
                s = 1 + k
                for a in range(k):
                    acc[m, 1 + a] += wr * design[i, a]
                    for b in range(a, k):
                        acc[m, s] += h * design[i, a] * design[i, b]
                        s += 1
    out = np.zeros((n_parts, n_sums))
    for c in range(n_chunks):
        out += private[c]
    return out


def part_sums(f: Any, y: Any, w: Any, part: Any, n_parts: int, backend: str) -> np.ndarray:
    """Return the seven sums of ``(f, y, w)`` per part, ``(n_parts, 7)``: a group sum on one constant code."""
    xp = array_namespace(f)
    constant = xp.zeros((f.shape[0], 1), dtype=xp.int8)
    one = np.ones(1, dtype=np.int64)
    sums = group_sums(constant, f, y, w, node_idx=part, n_nodes=n_parts, n_values=one, backend=backend)
    return to_numpy(sums)[:, 0, :]


def _group_total(values: Any, weight: Any, part: Any, n_parts: int, backend: str) -> np.ndarray:
    r"""Return :math:`\sum_{i \in m} w_i v_i` per part (the ``sum w f`` statistic of a group sum)."""
    return part_sums(values, values, weight, part, n_parts, backend)[:, STAT_WF]


def _check_kind(kind: str) -> None:
    if kind not in _N_PARAMS:
        msg = f"kind: expected one of {list(LOCAL_MAP_KINDS)}, got {kind!r}"
        raise ValueError(msg)

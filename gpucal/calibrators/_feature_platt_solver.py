r"""Feature-aware Platt's fit over :class:`~gpucal.rows.Rows`: read, encode, then truncated Newton.

:func:`fit_feature_platt` is the one fit for every backend. Its first passes read and check every block
(``_feature_platt_rows.read_block``), fit the encoder over them and encode them; the whole-data checks run
on the summed label summary. Newton-CG (line-searched; CG deflated by the directions no row sees and
preconditioned by the Hessian's diagonal, its score-intercept block whole: :func:`_conjugate_gradient`)
then reads the rows only through sums over blocks (``_feature_platt_rows``'s table), so on one machine
(one block) it is the fit on the arrays, and over dask partitions it takes the same steps up to the
order of the additions:

- loss :math:`\sum w (\log(1 + e^z) - y z)`, gradient of the one-hot block :math:`\sum_{i: c_{ij}=v} w_i
  (p_i - y_i)` and its Hessian diagonal :math:`\sum w p (1-p)` (the preconditioner), with the score and
  intercept entries and their coupling :math:`\sum w p (1-p) x` (row sums), from one pass
  (``curved_rows``: one fused loop on the CPU, the one-hot design transposed times two row vectors); a
  line-search trial's pass is that of the point it tries, so a step taken needs no second pass;
- Hessian-vector product :math:`H v = X^\top D X v`, :math:`D = w p (1 - p)`: with :math:`u = X v` per
  row, ``code_sums(codes, D u)`` gives the one-hot block and, summed over the values of any one feature,
  :math:`\sum D u` (intercept); :math:`\sum D u x` (the score's coefficient) is a row sum: one pass over
  the rows per product (``hessian_rows``: one fused loop on the CPU);
- which levels of a crossed column have rows in the cross's pooled code (``pooled_levels``, once per fit):
  the null directions of the design (:func:`null_directions`) that deflate CG.

The penalty :math:`\tfrac12 \theta^\top \Lambda \theta` is a ridge (diagonal :math:`\Lambda`) plus, with
``l2_smooth``, the difference penalty along ordered columns (:func:`chain_penalty`, a sparse matrix on the
host): it adds to the gradient, the Hessian products and the preconditioner's diagonal, and no pass over
the rows.

References: S. G. Nash, "A survey of truncated-Newton methods", J. Comput. Appl. Math. 124 (2000), 45-59;
Y. Saad, M. Yeung, J. Erhel and F. Guyomarc'h, "A deflated version of the conjugate gradient algorithm",
SIAM J. Sci. Comput. 21 (2000), 1909-1926.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import splu

from gpucal.calibrators._feature_platt_kernels import NOT_NESTED, merge_nested_codes
from gpucal.calibrators._feature_platt_rows import (
    N_ROW_SUMS,
    block_summary,
    code_weights,
    curved,
    curved_sums,
    encode_block,
    encoder_inputs,
    hessian_sums,
    level_sums,
    nested_code_table,
    pooled_levels,
    predicted,
    read_block,
    score_block,
    select_columns,
    stepped,
    strided,
    trial_curved,
)
from gpucal.calibrators._newton import MAX_HALVINGS, armijo_backtrack, warn_not_converged
from gpucal.calibrators.score_rows import ScoreRows
from gpucal.encoding import FeatureEncoder
from gpucal.encoding.crosses import Cross
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.kernels import value_offsets
from gpucal.rows import LabelSummary, Rows

# Most conjugate-gradient steps per Newton step.
CG_MAX_ITER = 250
# Relative jitter on the deflation's W' Lambda W (its columns may be dependent).
COARSE_JITTER = 1e-10
# The warm start (from the fit on about FeaturePlattParams.warm_start_rows strided rows) is taken to
# WARM_TOL only.
WARM_TOL = 1e-4


@dataclass(frozen=True)
class FeaturePlattFit:
    """Result of :func:`fit_feature_platt`: ``sigmoid(intercept + coef_score * x + coef[o_j + c_j] ...)``.

    Attributes
    ----------
    coef_score : float
    intercept : float
    coef : numpy.ndarray of shape (sum(n_values),)
        One coefficient per code, features in order (``value_offsets``).
    n_iter : int
        Newton steps taken.
    converged : bool
    """

    coef_score: float
    intercept: float
    coef: np.ndarray
    n_iter: int
    converged: bool

    @property
    def theta(self) -> np.ndarray:
        """All coefficients in one vector: ``[coef_score, intercept, coef...]``."""
        return np.r_[self.coef_score, self.intercept, self.coef]


@dataclass(frozen=True)
class FeaturePlattParams:
    """The estimator's parameters, validated (their meaning: ``FeatureAwarePlattCalibrator``'s docstring),
    and the warm start's sizes: fits on at least ``warm_start_min_rows`` rows start from the fit on about
    ``warm_start_rows`` strided rows. ``array_code``: the array code (GPU path) on numpy too (tests)."""

    score_col: Hashable
    feature_cols: Any
    categorical_cols: Any
    n_bins: int
    score_kind: str
    l2: float
    l2_smooth: float
    interactions: Any
    l2_cross: float
    screen_fields: bool
    max_iter: int
    tol: float
    device: str
    warm_start_min_rows: int
    warm_start_rows: int
    min_cross_count: float = MIN_CROSS_COUNT
    max_cross_levels: int = MAX_CROSS_LEVELS
    array_code: bool = False
    what: str = "FeatureAwarePlattCalibrator"


@dataclass(frozen=True)
class FeaturePlattState:
    """What :func:`fit_feature_platt` returns: the fitted encoder and coefficients."""

    encoder: FeatureEncoder
    fit: FeaturePlattFit


def fit_feature_platt(
    rows: Rows, params: FeaturePlattParams, *, source: tuple[Any, ...] | None = None
) -> FeaturePlattState:
    """Fit the feature-aware Platt model on the rows of ``X, y, sample_weight`` (``gpucal.rows.as_rows``).

    ``source``: the objects ``X, y, sample_weight`` the rows were read from; inside :func:`sharing_fits`
    fits given the same objects (and local rows) share their encoding and screens.

    Raises
    ------
    ValueError
        No rows, all weights zero, or one class only (with non-zero weight); the blocks' own checks.
    """
    memo = _shared_memo(source, rows)
    encoding = _encoding_key(params)
    if encoding is None:
        memo = None
    encoder, encoded, n_rows, theta = _recalled(memo, ("encoded", encoding), lambda: _encoded(rows, params))
    theta = theta.copy()
    narrowed: tuple[Hashable, ...] | None = None
    if params.screen_fields:
        judged = (encoding, params.l2, params.interactions == "auto", params.array_code)
        screen = _recalled(memo, ("kept", judged), lambda: kept_fields(encoder, encoded, theta, params))
        if len(screen.kept) < len(encoder.feature_names_):
            narrowed = tuple(screen.kept)
            start = theta
            encoder, encoded, theta = _recalled(
                memo,
                ("narrowed", encoding, narrowed),
                lambda: _kept_fields(encoder, encoded, start, screen.kept),
            )
            theta = theta.copy()
        # Start at the screen's Platt scaling, the offsets at 0: Newton then has only the offsets to find
        # (on make_ctr's cross scenarios, 3-5 steps instead of 5-7).
        theta[0], theta[1] = screen.score_fit
    screened = params.interactions == "auto" and bool(encoder.interactions_)
    if screened:
        # screen_fields is where the first-order fit starts (the screen's Platt scaling, else the
        # constant model), even where the screen narrows nothing.
        first = (
            encoding,
            narrowed,
            params.screen_fields,
            params.l2,
            params.l2_smooth,
            params.max_iter,
            params.warm_start_min_rows,
            params.warm_start_rows,
            params.array_code,
        )
        encoder, encoded, theta = _screened(encoder, encoded, theta, params, n_rows, memo, first)
    # Listed crosses start at 0 (screened ones at their one-step fit, from _screened).
    theta = np.r_[theta, np.zeros(2 + int(np.sum(encoder.n_codes_)) - theta.shape[0])]
    # A screened start is the first-order fit on every row: a fit on strided rows would move it away
    # (1e7 rows of 8 fields, no cross kept: 7 Newton steps back to it instead of 1, 6.0 s against 1.6).
    fit = _fit_rows(
        encoded,
        encoder.n_codes_,
        encoder.crosses_,
        _chained(encoder),
        theta,
        params,
        n_rows,
        final=True,
        strided_start=not screened,
    )
    return FeaturePlattState(encoder, fit)


#: The memo of the fits run inside :func:`sharing_fits` (None outside one): per ``source`` of rows,
#: its objects and what the fits on them share.
_SHARED_FITS: ContextVar[dict[tuple[int, ...], tuple[tuple[Any, ...], dict[Any, Any]]] | None] = ContextVar(
    "feature_platt_shared_fits", default=None
)

_T = TypeVar("_T")


@contextmanager
def sharing_fits(memo: dict[Any, Any]) -> Iterator[None]:
    """Within the block, feature-aware Platt fits on the same ``X``, ``y`` and ``sample_weight`` objects
    (local rows) share what depends on those rows and the encoder's parameters alone, kept in ``memo``:
    the fitted first-order encoder (every pair crossed, with ``interactions="auto"``) and its encoded
    rows; the columns ``screen_fields`` keeps (per ``l2``); the first-order fit that the cross screen
    starts from and that screen's level sums (per ``l2``, ``l2_smooth`` and ``screen_fields``, which sets
    where that fit starts; ``l2_cross`` only weighs them). Each fit takes the same steps as alone, so its
    result is the same to the last bit. Outside the block nothing is kept.

    ``memo`` holds the rows' objects and their encodings while it lives: the caller keeps one per set
    of rows that is not changed while it is (one fold of a search) and drops it with them.
    """
    token = _SHARED_FITS.set(memo)
    try:
        yield
    finally:
        _SHARED_FITS.reset(token)


def _shared_memo(source: tuple[Any, ...] | None, rows: Rows) -> dict[Any, Any] | None:
    """The memo of the fits on ``source`` inside :func:`sharing_fits`; None outside one, without a
    ``source``, or for rows in more than one block."""
    shared = _SHARED_FITS.get()
    if shared is None or source is None or rows.single_block() is None:
        return None
    key = tuple(id(s) for s in source)
    entry = shared.get(key)
    # The entry holds its objects, so their ids are not reused while it lives; checked all the same.
    if entry is None or any(kept is not given for kept, given in zip(entry[0], source, strict=True)):
        entry = (source, {})
        shared[key] = entry
    return entry[1]


def _recalled(memo: dict[Any, Any] | None, key: Hashable, compute: Callable[[], _T]) -> _T:
    """``compute()``, kept in ``memo`` under ``key`` and read back from it when there (no memo: computed)."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _encoding_key(params: FeaturePlattParams) -> Hashable | None:
    """The parameters :func:`_encoded` reads, as a hashable key (None when one of them is not hashable)."""
    screen = params.interactions == "auto"
    key = _frozen(
        (
            params.score_col,
            params.feature_cols,
            params.categorical_cols,
            params.n_bins,
            params.score_kind,
            params.device,
            "all" if screen else params.interactions,
            params.min_cross_count,
            params.max_cross_levels,
        )
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _frozen(value: Any) -> Any:
    """``value`` with its lists and tuples (at any depth) as tuples, tagged by their type."""
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_frozen(v) for v in value))
    return value


def screen_interactions(rows: Rows, params: FeaturePlattParams) -> list[tuple[Any, Any]]:
    """The pairs ``interactions="auto"`` keeps on these rows: every pair crossed, screened on the
    first-order fit (:func:`screen_crosses`); the crosses past ``max_cross_levels`` are not candidates."""
    encoder, encoded, n_rows, theta = _encoded(rows, params, screen=True)
    if not encoder.interactions_:
        return []
    return list(_screened(encoder, encoded, theta, params, n_rows)[0].interactions_)


@dataclass(frozen=True)
class FieldScreen:
    """What :func:`kept_fields` finds: the columns kept and the score-only model ``(a, b)`` it judged
    them against, where the first-order fit starts."""

    kept: list[Hashable]
    score_fit: tuple[float, float]


def kept_fields(
    encoder: FeatureEncoder, encoded: Rows, theta: np.ndarray, params: FeaturePlattParams
) -> FieldScreen:
    r"""The feature columns ``screen_fields`` keeps, with the score-only fit (:class:`FieldScreen`): those
    whose offsets are expected to lower the held-out loss of the score-only model :math:`\sigma(a x + b)`
    (Platt scaling, with the score's ridge ``l2``), and those of a pair whose cross is expected to lower
    it by more than its two columns do alone.

    Each column is judged alone against that model by the expected held-out gain of one ridge-damped
    Newton step on its offsets (:func:`expected_gains`, penalty ``l2``): the cross screen applied to the
    main effects. A column whose levels only fit noise (an id with thousands of values the score already
    reads) has a negative expected gain and is left out, its offsets exactly 0. With
    ``interactions="auto"`` each candidate cross is judged the same way, and its two columns are kept
    when its gain exceeds the sum of their positive gains: a bias per cell of two columns whose row and
    column means are near zero shows in neither column alone, and the cross screen can only keep a
    cross whose two columns are kept. Columns named in an explicit ``interactions`` list stay; so does
    the best column when none pays (the model needs one).
    """
    n_first = len(encoder.feature_names_)
    crossed = params.interactions == "auto" and len(encoder.n_codes_) > n_first
    n_codes = encoder.n_codes_ if crossed else encoder.n_values_
    judged = encoded if crossed else encoded.map(select_columns, np.arange(n_first))
    a, b = _score_only(judged, params.l2)
    start = np.zeros(2 + int(np.sum(n_codes)))
    start[0], start[1] = a, b
    sums = judged.sum(level_sums, start, n_codes, params.array_code)
    n_main = int(np.sum(encoder.n_values_))
    gains = expected_gains(sums[:n_main, 0], sums[:n_main, 1], params.l2, encoder.n_values_)
    names = list(encoder.feature_names_)
    kept = {n for n, gain in zip(names, gains, strict=True) if gain > 0.0}
    if isinstance(params.interactions, list | tuple):
        kept |= {column for pair in params.interactions for column in pair}
    if crossed:
        # The cross is judged at the columns' penalty, not at l2_cross: its levels hold the columns' own
        # effects, and a heavier penalty shrinks the noise term of its many small levels (on make_ctr's
        # scenarios without crosses, l2_cross=100 then kept noise columns).
        cross_gains = expected_gains(sums[n_main:, 0], sums[n_main:, 1], params.l2, n_codes[n_first:])
        alone_of = dict(zip(names, np.maximum(gains, 0.0), strict=True))
        for (left, right), gain in zip(encoder.interactions_, cross_gains, strict=True):
            if gain > alone_of[left] + alone_of[right]:
                kept |= {left, right}
    return FieldScreen([n for n in names if n in kept] or [names[int(np.argmax(gains))]], (a, b))


def _score_only(rows: Rows, l2: float) -> tuple[float, float]:
    """Platt scaling on the encoded rows' score feature: ``(a, b)`` minimising the loss sum plus
    ``l2 a^2 / 2``. Fitted by :func:`~gpucal.calibrators.logistic.fit_logistic_rows`, which minimises the
    weighted mean loss (its ridge is ``l2`` over the total weight): one summary pass, then on
    ``SERIES_MIN_ROWS`` rows or more one pass of the bins' moments instead of Newton's five or six."""
    scores = ScoreRows.of_blocks(rows.map(score_block))
    total_weight, _ = scores.label_sums()
    fit = scores.fit(l2=l2 / total_weight, what="feature-aware Platt's score-only fit")
    return float(fit.coef[0]), float(fit.intercept)


def _kept_fields(
    encoder: FeatureEncoder, encoded: Rows, theta: np.ndarray, kept: list[Hashable]
) -> tuple[FeatureEncoder, Rows, np.ndarray]:
    """The encoder, encoded rows and start of the fit reading only the ``kept`` feature columns (and the
    crosses between two of them): their code columns taken from ``encoded`` as they are, the same
    codes an encoder fitted on those columns alone gives (``FeatureEncoder.keep_columns``), in the
    full code matrix's dtype; the start keeps the constant model's intercept."""
    narrowed, columns = encoder.keep_columns(kept)
    start = np.zeros(2 + int(np.sum(narrowed.n_values_)))
    start[1] = theta[1]
    return narrowed, encoded.map(select_columns, columns), start


def _encoded(
    rows: Rows, params: FeaturePlattParams, *, screen: bool = False
) -> tuple[FeatureEncoder, Rows, int, np.ndarray]:
    """Read, check and encode the rows: the fitted encoder (every pair crossed when ``screen`` or
    ``interactions="auto"``), the encoded rows, their number and the best constant model's coefficients
    (one per first-order code)."""
    whole = rows.single_block() is not None
    checked = rows.map(read_block, params.score_col, params.feature_cols, params.score_kind, whole)
    screen = screen or params.interactions == "auto"
    encoder = FeatureEncoder(
        n_bins=params.n_bins,
        categorical_cols=params.categorical_cols,
        interactions="all" if screen else params.interactions,
        min_cross_count=params.min_cross_count,
        max_cross_levels=params.max_cross_levels,
    )
    encoder = encoder.fit_rows(checked, encoder_inputs, whole)
    encoded = checked.map(encode_block, encoder, params.device, params.score_kind)
    summary = LabelSummary.of(encoded.sum(block_summary))
    summary.check_rows()
    if summary.weight <= 0:
        msg = "sample_weight: all weights are zero"
        raise ValueError(msg)
    summary.check_two_classes()
    theta = np.zeros(2 + int(np.sum(encoder.n_values_)))
    theta[1] = math.log(summary.mean_label / (1.0 - summary.mean_label))  # the best constant model
    return encoder, encoded, summary.n_rows, theta


def _screened(
    encoder: FeatureEncoder,
    encoded: Rows,
    theta: np.ndarray,
    params: FeaturePlattParams,
    n_rows: int,
    memo: dict[Any, Any] | None = None,
    first_key: Hashable = None,
) -> tuple[FeatureEncoder, Rows, np.ndarray]:
    """Fit the first-order model from ``theta``, keep the crosses :func:`screen_crosses` keeps: the
    encoder and rows with those crosses only, and the start of the second-order fit, the first-order
    coefficients and each kept cross level's one-step fit (:func:`cross_steps`). The first-order fit and
    the screen's level sums are kept in ``memo`` under ``first_key`` (what they depend on)."""
    n_first = len(encoder.feature_names_)

    def first_order() -> tuple[np.ndarray, np.ndarray]:
        first = encoded.map(select_columns, np.arange(n_first))
        chained = _chained(encoder)
        fitted = _fit_rows(first, encoder.n_values_, (), chained, theta, params, n_rows, final=False).theta
        return fitted, cross_level_sums(encoded, fitted, encoder.n_codes_, params.array_code)

    fitted, sums = _recalled(memo, ("first", first_key), first_order)
    kept = screened_crosses(sums, encoder.n_codes_, n_first, params.l2_cross)
    columns = np.r_[np.arange(n_first), n_first + np.asarray(kept, dtype=np.int64)]
    start = np.r_[fitted, cross_steps(sums, encoder.n_codes_, n_first, kept, params.l2_cross)]
    return encoder.keep_crosses(kept), encoded.map(select_columns, columns), start


def screen_crosses(
    rows: Rows, theta: np.ndarray, n_codes: np.ndarray, n_first: int, l2_cross: float, array_code: bool
) -> list[int]:
    r"""The crosses (indices among the columns past ``n_first``) whose one-step fit is expected to lower
    the held-out loss of the first-order model ``theta``.

    At the first-order fit, a cross level :math:`l` has gradient :math:`g_l = \sum_{i \in l} w_i (p_i -
    y_i)` and curvature :math:`h_l = \sum w_i p_i (1 - p_i)`, which is also the variance of :math:`g_l`
    if the model is right (the score test's; weights count as repeated rows). One ridge-damped Newton
    step on the cross alone sets :math:`\delta_l = -g_l / (h_l + \lambda)`; on new rows whose gradient
    has the same mean :math:`\mu_l`, it changes the loss by :math:`\mu_l \delta_l + \tfrac12 h_l
    \delta_l^2` in expectation. With :math:`\mu_l g_l` estimated without bias by :math:`g_l^2 - h_l`, a
    cross is kept when

    .. math::

        \sum_l \Big[\frac{g_l^2 - h_l}{h_l + \lambda} - \frac{h_l\, g_l^2}{2 (h_l + \lambda)^2}\Big] > 0.

    With :math:`\lambda = 0` this is :math:`\tfrac12 \chi^2 > \text{df}`, the score test at Akaike's
    penalty. One pass of code sums over the rows scores every candidate pair at once: the screen of
    AutoCross (Luo et al., KDD 2019: each candidate judged by a fit of its own weights with the current
    model's fixed), one Newton step in place of its gradient descent and the held-out split replaced by
    its expectation.
    """
    return screened_crosses(cross_level_sums(rows, theta, n_codes, array_code), n_codes, n_first, l2_cross)


def cross_level_sums(rows: Rows, theta: np.ndarray, n_codes: np.ndarray, array_code: bool) -> np.ndarray:
    """Per code, the gradient and curvature sums of :func:`screen_crosses` at the first-order ``theta``."""
    full = np.r_[theta, np.zeros(2 + int(np.sum(n_codes)) - theta.shape[0])]
    return np.asarray(rows.sum(level_sums, full, n_codes, array_code))


def screened_crosses(sums: np.ndarray, n_codes: np.ndarray, n_first: int, l2_cross: float) -> list[int]:
    """The crosses :func:`screen_crosses` keeps, from its level sums (:func:`cross_level_sums`)."""
    gains = expected_gains(sums[:, 0], sums[:, 1], l2_cross, n_codes)
    return [c - n_first for c in range(n_first, len(n_codes)) if gains[c] > 0.0]


def cross_steps(
    sums: np.ndarray, n_codes: np.ndarray, n_first: int, kept: Sequence[int], l2_cross: float
) -> np.ndarray:
    r"""The one ridge-damped Newton step of :func:`screen_crosses`, :math:`\delta_l = -g_l / (h_l +
    \lambda)`, of every level of the ``kept`` crosses, in order: where the second-order fit starts them
    (from 0, it takes one more Newton step on make_ctr's cross scenarios, a pass over the rows each).
    ``sums``: :func:`cross_level_sums` at the first-order fit; ``l2_cross`` > 0."""
    offsets = value_offsets(n_codes)
    levels = [np.arange(offsets[n_first + c], offsets[n_first + c] + n_codes[n_first + c]) for c in kept]
    at = np.concatenate(levels) if levels else np.zeros(0, dtype=np.int64)
    return -sums[at, 0] / (sums[at, 1] + l2_cross)


def expected_gains(g: np.ndarray, h: np.ndarray, l2: float, n_codes: np.ndarray) -> np.ndarray:
    """Per column, :func:`screen_crosses`' expected held-out gain of one ridge-damped Newton step on its
    levels: the sum over its levels of ``(g^2 - h) / (h + l2) - h g^2 / (2 (h + l2)^2)``."""
    damped = h + l2
    gain = (g * g - h) / damped - 0.5 * h * g * g / (damped * damped)
    offsets = value_offsets(n_codes)
    return np.array([float(gain[o : o + int(k)].sum()) for o, k in zip(offsets, n_codes, strict=True)])


def _fit_rows(
    encoded: Rows,
    n_values: np.ndarray,
    crosses: Sequence[Cross],
    chained: np.ndarray,
    theta: np.ndarray,
    params: FeaturePlattParams,
    n_rows: int,
    *,
    final: bool,
    strided_start: bool = True,
) -> FeaturePlattFit:
    """Newton-CG from ``theta`` on the encoded rows (the last ``len(crosses)`` columns are those crosses,
    penalised by ``l2_cross``), warm-started on strided rows when there are many and ``strided_start``
    (False: ``theta`` is already near the fit on every row); ``final``: the fit
    returned to the user (to ``tol``, warning when it stops early), else a start for it (to ``WARM_TOL``,
    silently). ``chained``: per first-order column, how many of its first codes ``l2_smooth`` chains
    (:func:`_chained`)."""
    n_first = len(n_values) - len(crosses)
    penalties = np.r_[np.full(n_first, params.l2), np.full(len(crosses), params.l2_cross)]
    chains = np.r_[chained, np.zeros(len(crosses), dtype=np.int64)] if params.l2_smooth > 0.0 else None
    smoothing = (params.l2_smooth, chains) if chains is not None and chains.any() else None
    if strided_start and n_rows >= params.warm_start_min_rows:
        # Start from the fit on evenly strided rows. The penalty is not scaled down to their share of the
        # weight: a value with a handful of sampled rows would get an extreme offset, a far worse start than
        # a shrunk one. The objective is convex: the start changes how many passes over all rows are
        # needed, not the answer.
        sample = encoded.map(strided, n_rows // params.warm_start_rows, offsets=True)
        if LabelSummary.of(sample.sum(block_summary)).weight > 0.0:
            sub = _Problem(sample, n_values, crosses, penalties, params.l2, params.array_code, smoothing)
            warm = _newton_cg(
                sub, theta, max_iter=params.max_iter, tol=WARM_TOL, what=params.what, warn=False
            )
            if warm.converged:
                theta = warm.theta
    problem = _Problem(encoded, n_values, crosses, penalties, params.l2, params.array_code, smoothing)
    tol = params.tol if final else WARM_TOL
    return _newton_cg(problem, theta, max_iter=params.max_iter, tol=tol, what=params.what, warn=final)


class _Problem:
    """The penalised objective of one fit over rows of :class:`PlattBlock`, and what Newton-CG reads of it.

    A *row vector* (the predictor, the curvatures) lives in the blocks: :meth:`linear` gives rows of
    :class:`Predicted` blocks, :meth:`curved` and :meth:`trial` rows of :class:`Curved` ones, each pass a
    map or a sum.
    """

    def __init__(
        self,
        rows: Rows,
        n_values: np.ndarray,
        crosses: Sequence[Cross],
        penalties: np.ndarray,
        l2_score: float,
        array_code: bool,
        smoothing: tuple[float, np.ndarray] | None = None,
    ) -> None:
        self.rows = rows
        self.array_code = array_code
        self.n_values = np.asarray(n_values, dtype=np.int64)
        self.offsets = value_offsets(self.n_values)
        self.n_codes = int(self.n_values.sum())
        # Each column's offsets have that column's penalty; only the intercept (the second parameter) has
        # none.
        self.ridge = np.r_[l2_score, 0.0, np.repeat(np.asarray(penalties, dtype=np.float64), self.n_values)]
        self.first = slice(0, int(self.n_values[0]))  # the codes of feature 0: every row has one
        # Codes some row of non-zero weight has; the others keep offset 0 (their gradient and Hessian are
        # the penalty's alone), and no row changes when they are left out.
        self.used = np.concatenate([[True, True], rows.sum(code_weights, self.n_values) > 0.0])
        # The penalty's matrix is diag(ridge) plus, with smoothing, the chains' difference penalty.
        self.chain = None if smoothing is None else chain_penalty(self.n_values, self.used, *smoothing)
        n_first = len(self.n_values) - len(crosses)
        pooled = rows.sum(pooled_levels, crosses, n_first) if crosses else np.zeros(0)
        nested = (
            rows.reduce(nested_code_table, merge_nested_codes, self.n_values, n_first, array_code)
            if n_first > 1
            else None
        )
        self.null = null_directions(self.n_values, self.used, crosses, pooled, nested)
        self.null_t = self.null.T  # built once: the conjugate gradient applies it twice per step
        # W' Lambda W (H W = Lambda W): factored once, with a relative jitter that only W's own null space
        # feels (W x = 0 there), so that dependent directions need no care.
        coarse = (self.null_t @ self._penalty_matrix() @ self.null).tocsc()
        jitter = COARSE_JITTER * max(float(coarse.diagonal().max(initial=0.0)), 1.0)
        self.coarse_lu = splu(coarse + jitter * sparse.identity(coarse.shape[0], format="csc"))

    def _penalty_matrix(self) -> sparse.csr_matrix:
        r""":math:`\Lambda` as a sparse matrix: the ridge's diagonal plus the chains' penalty."""
        ridge = sparse.diags(self.ridge)
        return ridge if self.chain is None else ridge + self.chain

    def penalized(self, v: np.ndarray) -> np.ndarray:
        r"""Return :math:`\Lambda v`."""
        out = self.ridge * v
        return out if self.chain is None else out + self.chain @ v

    def blocks(self) -> list[slice]:
        """The slices of ``theta`` holding each feature's offsets."""
        return [slice(2 + o, 2 + o + int(k)) for o, k in zip(self.offsets, self.n_values, strict=True)]

    def center(self, theta: np.ndarray) -> np.ndarray:
        """Move each feature's mean offset (over its used codes) into the intercept, and set the unused
        codes' offsets to 0: the same predictor on every row (each has one used code per feature).

        The optimum lies where every feature's offsets sum to zero (its intercept gradient is zero, so
        the penalty's gradient on each feature's offsets sums to zero): the start is moved there, and
        unused codes, which Newton-CG never moves, to their optimum.
        """
        theta = np.where(self.used, theta, 0.0)
        for block in self.blocks():
            used = self.used[block]
            if used.any():
                mean = float(theta[block][used].mean())
                theta[block] -= np.where(used, mean, 0.0)
                theta[1] += mean
        return theta

    def linear(self, theta: np.ndarray) -> Rows:
        """Return the rows with their predictor :math:`X \\theta` (``theta = [a, b, beta]``)."""
        return self.rows.map(predicted, theta, self.offsets, self.array_code)

    def stepped(self, at: Rows, step: np.ndarray) -> Rows:
        """Return the rows at the iterate ``at`` (:meth:`curved`'s or :meth:`trial`'s) with the step's
        :math:`X d`."""
        return at.map(stepped, step, self.offsets, self.array_code)

    def curved(self, z: Rows) -> Rows:
        """Return the rows at the start ``z`` (:meth:`linear`'s) with their curvatures and gradient sums."""
        return z.map(curved, self.n_values, self.array_code)

    def trial(self, at: Rows, scale: float) -> Rows:
        """Return the rows at the trial ``z + scale * X d`` (``at``: :meth:`stepped`'s) with their
        curvatures and gradient sums, from one pass."""
        return at.map(trial_curved, scale, self.n_values, self.array_code)

    def derivatives(self, theta: np.ndarray, curvature: Rows) -> tuple[float, np.ndarray, np.ndarray, float]:
        r"""Return the penalised loss :math:`\sum_i w_i (\log(1 + e^{z_i}) - y_i z_i) + \tfrac12 \theta^\top
        \Lambda \theta`, its gradient, its Hessian diagonal and the Hessian's entry of the score's
        coefficient and the intercept (:math:`\sum D x`) at ``theta``, whose rows ``curvature``
        (:meth:`curved`'s or :meth:`trial`'s) carry its predictor and :math:`D = w p (1 - p)`."""
        flat = curvature.sum(curved_sums)
        loss, rx, r_sum, dxx, d_sum, dx = flat[:N_ROW_SUMS]
        stats = flat[N_ROW_SUMS:].reshape(-1, 2)
        grad = np.empty_like(theta)
        diag = np.empty_like(theta)
        grad[0], grad[1] = rx, r_sum
        grad[2:] = stats[:, 0]
        diag[0], diag[1] = dxx, d_sum
        diag[2:] = stats[:, 1]
        penalty = 0.5 * float(self.ridge @ (theta * theta))
        grad += self.ridge * theta
        diag += self.ridge
        if self.chain is not None:
            chained = self.chain @ theta
            penalty += 0.5 * float(theta @ chained)
            grad += chained
            diag += self.chain.diagonal()
        return float(loss) + penalty, grad, diag, float(dx)

    def coarse(self, v: np.ndarray) -> np.ndarray:
        """Return :math:`W (W^\\top \\Lambda W)^{-1} W^\\top v` (:func:`null_directions`' ``W``)."""
        return np.asarray(self.null @ self.coarse_lu.solve(np.asarray(self.null_t @ v)))

    def hessian_product(self, v: np.ndarray, curvature: Rows) -> np.ndarray:
        """Return :math:`(X^\\top D X + \\Lambda) v` from one group-sum pass."""
        sums = curvature.sum(hessian_sums, v, self.n_values, self.array_code)
        out = np.empty_like(v)
        out[0] = sums[0]  # sum D u x
        out[1] = sums[1:][self.first].sum()  # sum D u, over the values of feature 0
        out[2:] = sums[1:]
        return out + self.penalized(v)


def null_directions(
    n_values: np.ndarray,
    used: np.ndarray,
    crosses: Sequence[Cross],
    pooled: np.ndarray,
    nested: np.ndarray | None = None,
) -> sparse.csr_matrix:
    r"""The directions :math:`W` of ``theta`` (``[a, b, beta]``, one column each) that change no row's
    predictor: :math:`X W = 0` on every row of positive weight. Over used codes only:

    - per column (feature or cross): intercept up, every code of the column down (each row has one);
    - per cross of columns ``j`` and ``k`` and level ``v`` of ``j`` that no row of the cross's pooled code
      has (``pooled``, :func:`~gpucal.calibrators._feature_platt_rows.pooled_levels`): ``j``'s offset of
      ``v`` up, the cross's codes of the pairs ``(v, .)`` down (a row with ``v`` has one of them, and no
      other row does); the same per level of ``k``;
    - per first-order column ``k`` nested in another, ``j`` (``nested``, the table of
      :func:`~gpucal.calibrators._feature_platt_kernels.nested_codes` over the first-order columns: a
      cross the user computed, a site within its publisher), and per code ``u`` of ``j``: ``u`` up, the
      codes of ``k`` whose rows all have ``u`` down.

    Along them :math:`H W = \Lambda W`: only the penalties curve the objective there, far less than
    the data curve every other direction, and the near-collinear directions that slow CG (a main
    effect against the crosses it is part of) are their combinations. The columns may be dependent.
    """
    offsets = value_offsets(n_values)
    vectors: list[np.ndarray] = []
    for o, k in zip(offsets, n_values, strict=True):
        vectors.append(np.r_[1, 2 + o + np.flatnonzero(used[2 + o : 2 + o + k])])
    n_first = len(n_values) - len(crosses)
    at = 0
    for i, cross in enumerate(crosses):
        first_code = 2 + offsets[n_first + i]
        kept = used[first_code : first_code + cross.pooled_code]  # the kept keys' codes (not the pooled)
        codes = first_code + np.flatnonzero(kept)
        keys = cross.keys[kept]
        sides = (
            (cross.left, keys // cross.n_right, cross.n_left),
            (cross.right, keys % cross.n_right, cross.n_right),
        )
        for column, levels, n_levels in sides:
            free = np.flatnonzero(pooled[at : at + n_levels] == 0)
            at += n_levels
            for level in free:
                main = 2 + offsets[column] + level
                if used[main]:
                    vectors.append(np.r_[main, codes[levels == level]])
    if nested is not None:
        vectors += nested_vectors(nested, offsets, used)
    signs = [np.r_[1.0, -np.ones(v.shape[0] - 1)] for v in vectors]
    columns = np.repeat(np.arange(len(vectors)), [v.shape[0] for v in vectors])
    shape = (used.shape[0], len(vectors))
    return sparse.csr_matrix((np.concatenate(signs), (np.concatenate(vectors), columns)), shape=shape)


def nested_vectors(nested: np.ndarray, offsets: np.ndarray, used: np.ndarray) -> list[np.ndarray]:
    """:func:`null_directions`' directions of the first-order columns nested in others: per pair of
    ``nested`` (:func:`~gpucal.calibrators._feature_platt_kernels.nested_codes`' table) with no
    ``NOT_NESTED`` entry and per used code ``u`` of the parent, ``[u, the used codes of the child
    within u]`` as indices of ``theta``. A parent of one used code (a constant or all-missing column)
    holds every column: its vectors are the difference of the two columns' own directions, and with
    many such columns they made the coarse system dense (100 of them, 300 rows: over 100 s)."""
    vectors: list[np.ndarray] = []
    n_columns = nested.shape[1]
    bounds = np.r_[offsets[:n_columns], nested.shape[0]]
    n_used = [int(used[2 + bounds[j] : 2 + bounds[j + 1]].sum()) for j in range(n_columns)]
    for k in range(n_columns):
        block = nested[bounds[k] : bounds[k + 1]]
        child_used = used[2 + bounds[k] : 2 + bounds[k + 1]]
        for j in range(n_columns):
            parents = block[:, j]
            if j == k or n_used[j] <= 1 or np.any(parents == NOT_NESTED):
                continue
            for u in np.unique(parents[child_used & (parents >= 0)]):
                children = np.flatnonzero(child_used & (parents == u))
                vectors.append(np.r_[2 + offsets[j] + u, 2 + bounds[k] + children])
    return vectors


def _chained(encoder: FeatureEncoder) -> np.ndarray:
    """Per feature column of ``encoder``, the number of its first codes that ``l2_smooth`` chains: its
    regular codes when they are ordered (``FeatureEncoder.ordered_``: a number's bins, an integer's
    values), else 0. The missing and unseen codes are never chained."""
    return np.where(encoder.ordered_, encoder.missing_codes_, 0).astype(np.int64)


def chain_penalty(
    n_values: np.ndarray, used: np.ndarray, l2_smooth: float, chained: np.ndarray
) -> sparse.csr_matrix:
    r"""The difference penalty of ordered columns, :math:`l_s \sum_j \sum_t (\beta_{j,t+1} - \beta_{j,t})^2`
    as the matrix :math:`l_s D^\top D` over ``theta`` (``[a, b, beta]``): per column ``j``, the first
    ``chained[j]`` codes that some row uses, in code order, each linked to the next (a first-order
    random-walk prior on a number's bins or an integer's values, the zeroth-degree P-spline of Eilers and
    Marx, 1996). A code no row uses is skipped, so its offset stays 0 and its neighbours are linked
    across it. ``D`` sums to zero along each column's codes, so the penalty does not move the intercept
    and :meth:`_Problem.center` still holds; ``X W = 0`` still gives ``H W = \Lambda W``."""
    offsets = value_offsets(n_values)
    left: list[np.ndarray] = []
    for o, k in zip(offsets, chained, strict=True):
        codes = 2 + o + np.flatnonzero(used[2 + o : 2 + o + int(k)])
        left.append(np.column_stack([codes[:-1], codes[1:]]))
    links = np.concatenate(left) if left else np.zeros((0, 2), dtype=np.int64)
    rows = np.repeat(np.arange(links.shape[0]), 2)
    signs = np.tile([-1.0, 1.0], links.shape[0])
    diff = sparse.csr_matrix((signs, (rows, links.ravel())), shape=(links.shape[0], used.shape[0]))
    return (l2_smooth * (diff.T @ diff)).tocsr()


def block_preconditioner(used: np.ndarray, diag: np.ndarray, coupling: float) -> Any:
    r"""The preconditioner :math:`M^{-1}` of :func:`_conjugate_gradient`, as a function of a vector:
    :math:`M` is the Hessian's diagonal with its block of the score's coefficient and the intercept
    taken whole,

    .. math::

        M_{ab} = \begin{pmatrix} \sum D x^2 + \lambda & \sum D x \\ \sum D x & \sum D \end{pmatrix},

    (``coupling`` :math:`= \sum D x`); its inverse is 0 on the codes no row uses (no step there). The
    diagonal alone when that block is not safely positive definite (its determinant at most
    ``1e-12`` of the product of its diagonal)."""
    inverse = np.where(used, 1.0 / np.where(diag > 0.0, diag, 1.0), 0.0)
    det = float(diag[0] * diag[1]) - coupling * coupling
    if not det > 1e-12 * float(diag[0] * diag[1]):
        return lambda v: inverse * v
    block = np.array([[diag[1], -coupling], [-coupling, diag[0]]]) / det

    def apply(v: np.ndarray) -> np.ndarray:
        out = inverse * v
        out[:2] = block @ v[:2]
        return out

    return apply


def _conjugate_gradient(
    problem: _Problem, grad: np.ndarray, diag: np.ndarray, coupling: float, curvature: Rows, forcing: float
) -> np.ndarray:
    r"""Solve :math:`H d = -g` to a residual of ``forcing * |g|`` (norm :math:`M^{-1}`) by CG deflated by
    the null directions :math:`W` (:func:`null_directions`) and preconditioned by :math:`M`
    (:func:`block_preconditioner`: the Hessian's diagonal, its block of the score's coefficient and the
    intercept whole).

    Deflated CG (Saad, Yeung, Erhel and Guyomarc'h, 2000): the step's part in the span of :math:`W` is
    solved exactly, :math:`d_0 = W E^{-1} W^\top (-g)` with :math:`E = W^\top H W = W^\top \Lambda W`
    (no pass over the rows: :math:`X W = 0`), and every search direction is made :math:`H`-orthogonal
    to :math:`W`, so CG iterates only where the data curve the objective. Within one column the one-hot
    block of :math:`H` is diagonal, so :math:`M` leaves CG the coupling between columns.
    """
    precond = block_preconditioner(problem.used, diag, coupling)
    rhs = -grad
    step = problem.coarse(rhs)
    residual = rhs - problem.penalized(step)
    z = precond(residual)
    direction = z - problem.coarse(problem.penalized(z))
    rz = float(residual @ z)
    # The residual is measured in the preconditioned norm |r|_{M^-1}: the plain norm is dominated by the
    # score's entry, whose gradient grows with the rows, while an offset's scales with its value's rows.
    target = forcing * forcing * float(rhs @ precond(rhs))
    for _n in range(CG_MAX_ITER):
        if rz <= target:
            break
        h_dir = problem.hessian_product(direction, curvature)
        curv = float(direction @ h_dir)
        if curv <= 0.0:  # only rounding can get here: H is positive definite
            break
        alpha = rz / curv
        step += alpha * direction
        residual -= alpha * h_dir
        z = precond(residual)
        rz_next = float(residual @ z)
        direction = z - problem.coarse(problem.penalized(z)) + (rz_next / rz) * direction
        rz = rz_next
    return step


def _newton_cg(
    problem: _Problem, theta: np.ndarray, *, max_iter: int, tol: float, what: str, warn: bool
) -> FeaturePlattFit:
    """Minimise ``problem``'s objective from ``theta`` by line-searched, truncated Newton steps."""
    theta = problem.center(theta)
    curvature = problem.curved(problem.linear(theta))
    loss, grad, diag, coupling = problem.derivatives(theta, curvature)
    for n_iter in range(1, max_iter + 1):
        scaled = float(np.max(np.abs(grad) / diag))
        if scaled <= tol:
            return _result(theta, n_iter - 1, converged=True)
        # Forcing term sqrt(|g|) (Eisenstat & Walker; capped at 0.5): superlinear convergence, few CG steps
        # far from the optimum.
        step = _conjugate_gradient(problem, grad, diag, coupling, curvature, min(0.5, math.sqrt(scaled)))
        if float(np.max(np.abs(step))) <= tol:
            return _result(theta + step, n_iter, converged=True)
        x_step = problem.stepped(curvature, step)
        slope = float(grad @ step)
        # Each trial is one pass: its loss and, should it be taken, the gradient pass at it.
        trial_at = functools.partial(_trial, problem, theta, step, x_step)
        found = armijo_backtrack(loss, slope, trial_at)
        if found is None:
            if warn:
                warn_not_converged(what, f"no step lowered the loss after {MAX_HALVINGS} halvings")
            return _result(theta, n_iter, converged=False)
        _, loss, (theta, curvature, grad, diag, coupling) = found
    if warn:
        warn_not_converged(what, f"did not converge in max_iter={max_iter} Newton steps")
    return _result(theta, max_iter, converged=False)


def _result(theta: np.ndarray, n_iter: int, *, converged: bool) -> FeaturePlattFit:
    return FeaturePlattFit(float(theta[0]), float(theta[1]), theta[2:].copy(), n_iter, converged)


def _trial(
    problem: _Problem, theta: np.ndarray, step: np.ndarray, x_step: Rows, scale: float
) -> tuple[float, tuple[np.ndarray, Rows, np.ndarray, np.ndarray, float]]:
    """The objective at ``theta + scale * step``, with the point, its rows (predictor and curvatures),
    gradient, Hessian diagonal and score-intercept coupling (:meth:`_Problem.derivatives`)."""
    trial = theta + scale * step
    curvature = problem.trial(x_step, scale)
    loss, grad, diag, coupling = problem.derivatives(trial, curvature)
    return loss, (trial, curvature, grad, diag, coupling)


__all__ = [
    "FeaturePlattFit",
    "FeaturePlattParams",
    "FeaturePlattState",
    "chain_penalty",
    "fit_feature_platt",
    "null_directions",
    "screen_interactions",
    "sharing_fits",
]

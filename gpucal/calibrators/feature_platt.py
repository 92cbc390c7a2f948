r"""Feature-aware Platt scaling: a logistic regression on the score's logit and one-hot feature values.

.. math::

    \hat p_i = \sigma\Big(b + a\, x_i + \sum_j \beta_{o_j + c_{ij}}\Big), \qquad
    \min_{a, b, \beta}\; \sum_i w_i \big[\log(1 + e^{z_i}) - y_i z_i\big]
        + \frac{l_2}{2}\big(a^2 + \lVert\beta\rVert^2\big),

with :math:`x_i` the logit of the score (or the raw margin), :math:`c_{ij}` the code of row ``i`` in
feature ``j`` (``gpucal.encoding.FeatureEncoder``) and :math:`o_j` the first code of feature ``j`` in the
flat coefficient vector (``kernels.value_offsets``). The linear special case of NeuCalib (one-dimensional
field embeddings, no MLP) and the strong simple baseline of ``methods.md``.

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
from gpucal._frames import split_input, wrap_output
from gpucal.calibrators._base import Calibrator, Constraint, Interval, Options
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
)
from gpucal.calibrators.platt import OUTPUT_TYPE_OPTIONS, SCORE_KIND_OPTIONS
from gpucal.encoding import FeatureEncoder
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.persistence import register
from gpucal.rows import as_rows

# Test-only switch: take the array code (the GPU path) on numpy arrays too, instead of the numba loops.
FORCE_ARRAY_PATH = False
# Fits on at least WARM_START_MIN_ROWS rows start from the fit on about WARM_START_ROWS strided rows (read
# at each fit, so tests can lower them).
WARM_START_MIN_ROWS = 1 << 18
WARM_START_ROWS = 1 << 16
#: Default penalty of the cross effects (the main effects' ``l2`` is 1.0): see the class docstring.
L2_CROSS = 10.0


@register
class FeatureAwarePlattCalibrator(Calibrator):
    r"""Platt scaling with a learnt offset per feature value (L2-regularised logistic regression).

    .. math::

        \hat p = \sigma\Big(b + a\, x + \sum_j \beta_j[\text{value of feature } j]\Big), \qquad
        x = \begin{cases} \log\frac{p}{1-p} & \text{score\_kind="probability"} \\
        s & \text{score\_kind="logit"} \end{cases}

    The design is ``[x, one-hot of every feature column's codes]`` plus an intercept; the fit minimises
    the weighted log-loss summed over rows plus :math:`\tfrac{l_2}{2}(a^2 + \lVert\beta\rVert^2)`
    (scikit-learn's convention: ``LogisticRegression(C=1/l2)``). Numeric features are cut into quantile
    bins, everything else is read by value (:class:`~gpucal.encoding.FeatureEncoder`). The linear special
    case of NeuCalib, and the baseline a feature-aware calibrator has to beat.

    Parameters
    ----------
    score_col : str, default="score"
        Column of ``X`` holding the score.
    feature_cols : list of hashable, str or None, default=None
        Feature columns; None means every column of ``X`` except ``score_col``.
    categorical_cols : list of hashable, str or None, default=None
        Numeric feature columns to read by value (e.g. integer IDs) instead of by quantile bins.
    n_bins : int, default=32
        Most quantile bins per numeric feature.
    score_kind : {"probability", "logit"}, default="probability"
        ``"probability"``: scores in [0, 1], used through their logit (clipped to machine epsilon first,
        as in :class:`~gpucal.calibrators.platt.PlattCalibrator`); ``"logit"``: raw margins.
    l2 : float, default=1.0
        Ridge strength on every coefficient except the intercept, against the *summed* weighted loss
        (scikit-learn's ``C = 1 / l2``). 1.0 is scikit-learn's default ``C=1``, so results match what
        users get there; it keeps the fit finite when a feature value has only one class (a separable
        value), and since the loss is a sum its effect fades as a value gathers rows: a value's offset is
        shrunk as if it had about :math:`l_2 / (p(1-p))` (4 to 20) extra rows at the global fit, so only
        rare values are pulled toward the average. Must be positive: the one-hot columns of a feature sum
        to the intercept's column, so without a penalty the offsets are not identified.
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
    coef_ : numpy.ndarray of shape (sum of the encoder's ``n_values_``,)
        One offset per code of each feature, features in order, each feature's codes from
        ``value_offsets(n_values_)`` on (its bins or categories, then its missing and unseen codes).
    n_iter_ : int
        Newton steps taken.

    See Also
    --------
    PlattCalibrator : the same model without features.

    Notes
    -----
    Equal to scikit-learn's ``LogisticRegression(C=1/l2)`` fitted on ``[x, one-hot(codes)]`` with the same
    sample weights: the tests require 1e-6 in every coefficient and prediction against its exact
    ``solver="newton-cholesky"`` (they agree to about 1e-11). Against ``solver="lbfgs"`` the predictions
    agree to 1e-6 but the coefficients only to about 1e-5, even with ``tol=1e-12``: L-BFGS's stop on the
    relative decrease of the loss (``ftol``, fixed inside scikit-learn) comes before it resolves the nearly
    flat direction "intercept up, a feature's offsets down", which only the penalty sees. The fit here
    removes that direction: every feature's offsets sum to zero at the optimum (the intercept's gradient
    is zero, so the penalty's on each feature's offsets sums to zero), so Newton-CG searches only that
    subspace.

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
        "l2_cross": Interval(float, 0, None, closed="neither"),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
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
        interactions: Sequence[Sequence[Hashable]] | str | None = None,
        l2_cross: float = L2_CROSS,
        min_cross_count: float = MIN_CROSS_COUNT,
        max_cross_levels: int = MAX_CROSS_LEVELS,
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
        self.interactions = interactions
        self.l2_cross = l2_cross
        self.min_cross_count = min_cross_count
        self.max_cross_levels = max_cross_levels
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
        params = FeaturePlattParams(
            score_col=self.score_col,
            feature_cols=self.feature_cols,
            categorical_cols=self.categorical_cols,
            n_bins=int(self.n_bins),
            score_kind=self.score_kind,
            l2=float(self.l2),
            interactions=self._checked_interactions(),
            l2_cross=float(self.l2_cross),
            min_cross_count=float(self.min_cross_count),
            max_cross_levels=int(self.max_cross_levels),
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            device=self.device,
            warm_start_min_rows=WARM_START_MIN_ROWS,
            warm_start_rows=WARM_START_ROWS,
            array_code=FORCE_ARRAY_PATH,
        )
        state = fit_feature_platt(as_rows(X=X, y=y, sample_weight=sample_weight), params)
        return self._set_fitted(state)

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

    def _checked_interactions(self) -> Any:
        """``interactions`` if it has a valid form (its columns are checked against the data in ``fit``)."""
        value = self.interactions
        if value is None or value in ("auto", "all"):
            return value
        if isinstance(value, str) or not isinstance(value, Sequence):
            msg = (
                "The 'interactions' parameter of FeatureAwarePlattCalibrator must be None, 'auto', 'all' or "
                f"a list of column pairs. Got {value!r} instead."
            )
            raise ValueError(msg)
        return [tuple(pair) if isinstance(pair, list) else pair for pair in value]

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities for ``X``, in ``X``'s family (pandas in, pandas Series out).

        Parameters
        ----------
        X : dataframe or dict of columns
            Holds ``score_col`` and every feature column seen in ``fit`` (other columns are ignored); a
            dask DataFrame gives a dask Series of its partitions' predictions.

        Returns
        -------
        array or Series of shape (n,)
            Calibrated probabilities in [0, 1].
        """
        lazy = self._predict_partitions(X)
        if lazy is not None:
            return lazy
        encoder = self._fitted_encoder()
        split = split_input(
            X,
            score_col=self.score_col,
            feature_cols=encoder.feature_names_,
            score_kind=self.score_kind,
            require_features=True,
            allow_empty=True,
        )
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
        return wrap_output(calibrated, split.info, output_type=self.output_type)

    def _fitted_encoder(self) -> FeatureEncoder:
        """The encoder of ``encoder_``, rebuilt (and checked) once."""
        encoder: FeatureEncoder | None = getattr(self, "_encoder", None)
        if encoder is None:
            self._check_state()
            encoder = self._encoder
        return encoder

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


__all__ = [
    "FeatureAwarePlattCalibrator",
    "FeaturePlattFit",
    "fit_feature_platt",
    "predict_feature_platt",
    "score_feature",
]

r"""``gpucal.MBCT``: Multiple Boosting Calibration Trees (Huang et al., WWW 2022, Sec. 4).

A chain of multi-way trees over discrete features, each node calibrating the output of the trees
before it. The estimator validates its parameters and stores the state that
:func:`gpucal.mbct.fit.fit_mbct` returns (the fit itself, over any rows). What the paper fixes, what it
leaves open and what gpucal chose is in the class docstring and the README.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import is_cupy_array, resolve_device
from gpucal._frames import InputInfo, ParsedInput, parse_input
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, AnyOf, Calibrator, Constraint, Interval, Options
from gpucal.calibrators.feature_platt import encoder_params
from gpucal.encoding import FeatureEncoder, resolve_feature_cols
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.mbct.fit import MVCE_ON_PARTITIONS, MBCTParams, fit_mbct
from gpucal.mbct.read import apply_init, fit_mbct_encoder, input_codes, input_n_values
from gpucal.persistence import check_records, rebuilt_object
from gpucal.registry import calibration_method
from gpucal.rows import any_dask, as_rows
from gpucal.rules import export_rules
from gpucal.trees.ensemble import LEAF_MAPS, TreeEnsemble, predict_ensemble

AUTO = Options("auto")
# The record of each tree in ``history_`` (checked when a model file is loaded).
HISTORY_FIELDS: dict[str, tuple[type, ...]] = {
    "tree": (int,),
    "nodes": (int,),
    "loss_before": (int, float),
    "loss_after": (int, float),
    "kept": (bool,),
}


@calibration_method("mbct", fits_on_dask=True)
class MBCT(Calibrator):
    r"""Multiple Boosting Calibration Trees: feature-aware, individual, non-monotonic calibration.

    Each tree splits the rows by discrete feature values (one child per value, Sec. 4.3) and calibrates
    every node with a map of its input probability :math:`f`; trees chain, each calibrating the output
    of the ones before:

    .. math::

        \hat p = g^{(T)}_{b_T(x)} \circ \dots \circ g^{(1)}_{b_1(x)}\big(g_0(s)\big), \qquad
        g_b(f) = \min(k_b f, 1) \;\text{("scale", the paper's map)}

    or :math:`\sigma(\operatorname{logit} f + d_b)` ("shift") or :math:`\sigma(a_b \operatorname{logit} f
    + d_b)` ("platt"); :math:`g_0` is the identity or a global Platt map (``init``). With "shift" and
    "platt" the composition runs on logits: it starts from :math:`g_0`'s logit
    :math:`a_0 \operatorname{logit}(\operatorname{clip}(s, \epsilon, 1 - \epsilon)) + b_0`, clipped to
    :math:`\pm\operatorname{logit}(1 - \epsilon)`, and ends with one sigmoid; the fit carries the same
    logits from tree to tree, so predictions on the training rows repeat the fit's values exactly.

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the base model's probability.
    feature_cols : list of str, str or None, default=None
        Split features; None means every column but ``score_col``, the label (a column named like ``y`` or
        holding its values), the weights and ``p_true`` (``gpucal.encoding.features``); a feature that is the
        label is refused. Categoricals split by value, other numbers by ``n_bins`` quantile bins
        (``FeatureEncoder``); missing values get their own code.
    categorical_cols : list of str, optional
        Numeric columns to split by value. None: integer columns with few distinct values (at most one per 20
        rows, 50,000 at most) are read by value, other numbers binned (``FeatureEncoder``); ``[]``: every
        number binned.
    n_bins : int, default=32
        Quantile bins per numeric feature.
    interactions : list of pairs of feature columns, "auto", "all" or None, default=None
        Pairs of features crossed into one more split feature each (:mod:`gpucal.encoding.crosses`: the
        pair's combined codes, numbers through their bins, rare and unseen pairs pooled), so that one split
        separates combinations that need a depth-2 path, or that neither column separates alone:

        - None: the columns only;
        - a list of pairs: those crosses (a pair naming an unknown column, a column with itself, or an
          entry of one column raises ``ValueError`` naming it);
        - ``"all"``: every pair of features;
        - ``"auto"``: the pairs feature-aware Platt's ``interactions="auto"`` keeps (every pair screened
          by the expected held-out gain of a one-step fit of its cross on the first-order feature-aware
          Platt model: :func:`~gpucal.calibrators.feature_platt.resolve_interactions`; one first-order
          fit over the rows).

        The pairs crossed are ``interactions_``.
    min_cross_count : float, default=10.0
        Least weight of a cross level with a code of its own; lighter levels, and pairs not seen at fit
        time, share one pooled code per cross.
    max_cross_levels : int, default=100000
        Most codes of all crosses together (memory of the code tables and histograms); pairs past it are
        dropped with a ``UserWarning`` naming them.
    score_bins : int, default=100
        Equal-width bins of the score added as a split feature (App. A.1: "100-equal-width discretized
        pCTR"); 0 leaves the score out of the splits.
    leaf_map : {"scale", "shift", "platt"}, default="platt"
        The node map. "scale" is the paper's :math:`k_b f` with :math:`k_b = \sum w y / \sum w f`;
        "shift" a logit offset per node; "platt" a logit slope and offset per node (grown as "shift",
        refitted by Newton steps). "platt" is the default because it had the lowest held-out log-loss
        on the real datasets (``benchmarks/results/mbct_quality.md``); "shift" is better on make_ctr's
        scenarios, whose segment errors are pure logit offsets. The paper's map gives a node with no
        positives :math:`k = 0`, i.e. probability 0: an infinite log-loss on a later positive.
    criterion : {"gain", "mvce"}, default="gain"
        Split choice (Eq. 12). "mvce": the paper's multi-view calibration error over ``n_views`` random
        uniform-mass views of the node (the same views for every candidate, seeded). "gain":
        deterministic, from the group sums alone: the decrease of the squared error of :math:`k_b f`
        (scale) or of the second-order log-loss of the shift (shift, platt). "gain" is the default:
        better on 7 of the 10 datasets of ``benchmarks/results/mbct_quality.md``, equal on 2, behind
        on ACS by 0.0002, and 1.1-15x cheaper (no views).
    max_depth : int, default=5
        Stopping rule 1 (the paper: 5).
    max_trees : int, default=8
        Most trees (the paper: 8). A tree is kept only while it lowers the global loss.
    min_node_size : "auto" or float, default="auto"
        :math:`\beta` of stopping rule 2: nodes lighter than this (sum of weights) are not split.
        "auto" solves Eq. 13 with ``alpha`` and ``e`` (``gpucal.mbct._node_size``); the value used is
        ``min_node_size_``.
    alpha, e : float, default=0.05, 0.1
        Confidence and permissible deviation of Eq. 13 (the paper's values).
    min_child_size : "auto" or float, default="auto"
        Children lighter than this are pooled into one "rest" child of the split (the paper does not
        pool; 0 turns pooling off). "auto" is :math:`\beta`: a child smaller than the paper's own
        reliable bin size shares its map with the other small ones.
    n_views : int, default=100
        MVCE views :math:`r` (criterion "mvce", and the global loss of that criterion).
    mvce_p : float, default=2
        The :math:`\ell_p` of MVCE over views (Eq. 10; the paper uses 2).
    leaf_penalty : float, default=100
        Shrinks every child's map toward its parent's: pseudo-positives for "scale", an L2 penalty on
        the logit shift (and slope) for "shift" / "platt", in units of the log-loss Hessian
        :math:`\sum w f (1 - f)`. The paper has none (0).
    learning_rate : float, default=0.5
        Damps each tree: :math:`k^{\eta}` for "scale", :math:`\eta d` (and :math:`1 + \eta (a - 1)`)
        for the logit maps. The paper has none (1).
    validation_fraction : float, default=0.2
        Hold out this share of the rows (seeded) to decide whether a new tree lowers the global loss;
        0 uses the training rows, as the paper, which keeps adding trees that only fit noise.
    init : {"identity", "platt"}, default="platt"
        A global Platt map fitted before the trees (the paper has none): a tree of logit offsets cannot
        fix a global slope, and an over-confident base model has one.
    tol : float, default=0
        A tree is kept when it lowers the global loss by more than ``tol`` times the loss.
    aggregate : bool, default=True
        Merge rows with equal codes and score first (App. A.2; lossless,
        ``gpucal.trees.aggregate``), when that at least halves the rows. CPU path and criterion
        "gain" only: MVCE's views are equal-count bins of samples, which merged rows would distort.
    seed : int, default=0
        Seed of the MVCE views and of the validation split.
    device : {"auto", "cpu", "gpu"}, default="auto"
        "auto" runs on the GPU when the data is there (cudf / cupy).
    verbose : int, default=0
        1 prints a line per tree, 2 also per level (to stderr).
    output_type : str, default="input"
        Family of the predictions.

    Attributes
    ----------
    encoder_ : FeatureEncoder or None
        Codes of the feature columns and their crosses.
    interactions_ : list of [str, str]
        The crossed pairs, split features after the columns (empty without crosses).
    ensemble_ : TreeEnsemble
        The fitted trees.
    feature_cols_ : list
        The feature columns used.
    min_node_size_, min_child_size_ : float
        :math:`\beta` and the pooling threshold used.
    init_ : list of float
        ``[a, b]`` of the global Platt map (``[1, 0]``: identity).
    history_ : list of dict
        Per tree tried: its size and the global loss before and after.
    interrupted_ : bool
        True when the fit was stopped by KeyboardInterrupt; the trees finished before it are kept.

    Notes
    -----
    :meth:`paper` returns the configuration of the paper itself. The defaults differ where the
    benchmark (``benchmarks/results/mbct_quality.md``) showed the paper's choices to overfit or to
    give infinite log-loss: the map, the penalty, the learning rate, the validation split, the pooling
    and the global Platt map first. The README's MBCT section lists every choice.

    The fit is :func:`gpucal.mbct.fit.fit_mbct` over :func:`gpucal.rows.as_rows`: the same passes on
    one machine, over dask partitions held on the workers, or streamed.

    References
    ----------
    .. [1] S. Huang, Y. Wang, L. Mou, H. Zhang, H. Zhu, C. Yu, B. Zheng, "MBCT: Tree-Based
       Feature-Aware Binning for Individual Uncertainty Calibration", Proceedings of the ACM Web
       Conference 2022 (WWW '22), https://doi.org/10.1145/3485447.3512096

    Examples
    --------
    >>> from gpucal import MBCT
    >>> from gpucal.datasets import make_ctr
    >>> from gpucal.metrics import log_loss
    >>> df = make_ctr(20_000, "mixed", seed=0)
    >>> cols = ["region", "device"]
    >>> model = MBCT(feature_cols=cols, categorical_cols=cols).fit(df, df["label"])
    >>> model.ensemble_.n_trees
    1
    >>> bool(log_loss(df["label"], model.predict(df)) < log_loss(df["label"], df["score"]))
    True
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
        "score_bins": Interval(int, 0, 2**15 - 1),
        "leaf_map": Options(*LEAF_MAPS),
        "criterion": Options("gain", "mvce"),
        "max_depth": Interval(int, 0, None),
        "max_trees": Interval(int, 0, None),
        "min_node_size": AnyOf(AUTO, Interval(float, 0, None, closed="neither")),
        "alpha": Interval(float, 0, 1, closed="neither"),
        "e": Interval(float, 0, None, closed="neither"),
        "min_child_size": AnyOf(AUTO, Interval(float, 0, None)),
        "n_views": Interval(int, 1, None),
        "mvce_p": Interval(float, 1, None),
        "leaf_penalty": Interval(float, 0, None),
        "learning_rate": Interval(float, 0, 1, closed="right"),
        "validation_fraction": Interval(float, 0, 1, closed="left"),
        "init": Options("identity", "platt"),
        "tol": Interval(float, 0, None),
        "aggregate": Options(True, False),
        "seed": Interval(int, 0, None),
        "device": Options("auto", "cpu", "gpu"),
        "verbose": Interval(int, 0, None),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    _predicts_fresh_arrays = True  # predict_ensemble returns its own new array
    #: Parameters ``predict`` reads with the fitted state: refused once changed after the fit.
    _state_params: ClassVar[tuple[str, ...]] = ("score_bins",)
    _state_spec: ClassVar[dict[str, str]] = {
        "encoder_": "json",
        "ensemble_": "json",
        "feature_cols_": "json",
        "min_node_size_": "float",
        "min_child_size_": "float",
        "init_": "float_array",
        "history_": "json",
        "interrupted_": "bool",
    }

    def __init__(
        self,
        *,
        score_col: Hashable = "score",
        feature_cols: Sequence[Hashable] | str | None = None,
        categorical_cols: Sequence[Hashable] | str | None = None,
        n_bins: int = 32,
        interactions: Sequence[Sequence[Hashable]] | str | None = None,
        min_cross_count: float = MIN_CROSS_COUNT,
        max_cross_levels: int = MAX_CROSS_LEVELS,
        score_bins: int = 100,
        leaf_map: str = "platt",
        criterion: str = "gain",
        max_depth: int = 5,
        max_trees: int = 8,
        min_node_size: float | str = "auto",
        alpha: float = 0.05,
        e: float = 0.1,
        min_child_size: float | str = "auto",
        n_views: int = 100,
        mvce_p: float = 2.0,
        leaf_penalty: float = 100.0,
        learning_rate: float = 0.5,
        validation_fraction: float = 0.2,
        init: str = "platt",
        tol: float = 0.0,
        aggregate: bool = True,
        seed: int = 0,
        device: str = "auto",
        verbose: int = 0,
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.categorical_cols = categorical_cols
        self.n_bins = n_bins
        self.interactions = interactions
        self.min_cross_count = min_cross_count
        self.max_cross_levels = max_cross_levels
        self.score_bins = score_bins
        self.leaf_map = leaf_map
        self.criterion = criterion
        self.max_depth = max_depth
        self.max_trees = max_trees
        self.min_node_size = min_node_size
        self.alpha = alpha
        self.e = e
        self.min_child_size = min_child_size
        self.n_views = n_views
        self.mvce_p = mvce_p
        self.leaf_penalty = leaf_penalty
        self.learning_rate = learning_rate
        self.validation_fraction = validation_fraction
        self.init = init
        self.tol = tol
        self.aggregate = aggregate
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.output_type = output_type

    @classmethod
    def paper(cls, **overrides: Any) -> MBCT:
        """Return MBCT configured as the paper runs it (Sec. 4.3, 5.1, App. A), with ``overrides`` applied.

        The MVCE criterion with r = 100 views and p = 2, the :math:`k_b f` map, max depth 5, at most 8
        trees kept while the training MVCE falls, beta from Eq. 13 with alpha = 0.05 and e = 0.1, the
        100-bin score feature, and none of gpucal's extensions (no pooling of rare values, no penalty,
        no learning rate, no validation split, no global Platt first).
        """
        settings: dict[str, Any] = {
            "leaf_map": "scale",
            "criterion": "mvce",
            "max_depth": 5,
            "max_trees": 8,
            "min_node_size": "auto",
            "alpha": 0.05,
            "e": 0.1,
            "min_child_size": 0.0,
            "n_views": 100,
            "mvce_p": 2.0,
            "score_bins": 100,
            "leaf_penalty": 0.0,
            "learning_rate": 1.0,
            "validation_fraction": 0.0,
            "init": "identity",
        }
        return cls(**{**settings, **overrides})

    def _n_values(self) -> np.ndarray:
        return input_n_values(self.encoder_, self.score_bins)

    # ----------------------------------------------------------------------------------------------
    # fit

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> MBCT:
        """Grow the trees on scores and features ``X``, labels ``y`` and optional row weights.

        Parameters
        ----------
        X : dataframe
            The score column and the feature columns (pandas, cudf, polars, pyarrow, or a dict), or a
            dask DataFrame (``y`` and ``sample_weight`` partitioned alike): the same trees, fitted by
            passes over the partitions with each worker's rows held in its memory, or, under
            ``dask.config.set({"gpucal.stream-partitions": True})``, read again by every pass for data
            larger than memory (:func:`gpucal.mbct.fit.fit_mbct` over :func:`gpucal.rows.as_rows`).
        y : array-like of shape (n,)
            Labels in {0, 1} (soft labels in [0, 1] count as that fraction of a positive).
        sample_weight : array-like of shape (n,), optional
            Non-negative row weights.

        Returns
        -------
        self
        """
        self._validate_params()
        dask_input = any_dask(X, y, sample_weight)
        if dask_input and self.criterion == "mvce":
            raise NotImplementedError(MVCE_ON_PARTITIONS)
        columns = X._meta if dask_input else X
        rows = as_rows(X=X, y=y, sample_weight=sample_weight)
        feature_cols = resolve_feature_cols(
            rows, X, y, sample_weight, score_col=self.score_col, feature_cols=self.feature_cols
        )
        split = parse_input(
            columns, score_col=self.score_col, feature_cols=feature_cols, allow_empty=dask_input
        )
        if not split.features and not self.score_bins:
            msg = "X: MBCT needs a feature column or score_bins > 0 to split on"
            raise ValueError(msg)
        # Dask partitions stay where they are: their meta's array type is the device.
        if dask_input:
            device = "gpu" if is_cupy_array(split.score) else "cpu"
        else:
            device = resolve_device(self.device, split.score)
        features = list(split.features)
        # The device the fit resolved: on dask, the partitions', not the parameter's.
        encoding = encoder_params(self, type(self).__name__, rows, features, device=device)
        self.encoder_ = fit_mbct_encoder(rows, self.score_col, features, encoding)
        self.feature_cols_ = [] if self.encoder_ is None else list(self.encoder_.feature_names_)
        self.interactions_ = [] if self.encoder_ is None else [list(p) for p in self.encoder_.interactions_]
        params = self._params_as(
            MBCTParams, feature_cols=self.feature_cols_, backend="cuda" if device == "gpu" else "cpu"
        )
        state = fit_mbct(rows, params, self.encoder_)
        self.ensemble_ = state.ensemble
        self.min_node_size_ = state.min_node_size
        self.min_child_size_ = state.min_child_size
        self.init_ = state.init
        self.history_ = state.history
        self.interrupted_ = state.interrupted
        return self

    # ----------------------------------------------------------------------------------------------
    # predict

    def _predict_input(self, X: Any) -> tuple[Any, Any, ParsedInput]:
        check_is_fitted(self, list(self._state_spec))
        split = parse_input(X, score_col=self.score_col, feature_cols=self.feature_cols_, allow_empty=True)
        codes = input_codes(split, self.encoder_, self._fitted_param("score_bins"), self.ensemble_)
        return codes, split.score, split

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        codes, score, split = self._predict_input(X)
        if self.ensemble_.leaf_map == "scale":
            return predict_ensemble(self.ensemble_, codes, apply_init(score, self.init_)), split.info
        # The initial map starts the chain in the trees' own pass (the fit's start_values).
        a, b = (float(v) for v in self.init_)
        return predict_ensemble(self.ensemble_, codes, score, init=(a, b)), split.info

    def leaves(self, X: Any) -> Any:
        """Return the node each row ends in, per tree: int32 array of shape (n, n_trees) (global node ids)."""
        codes, _, _ = self._predict_input(X)
        return self.ensemble_.leaves(codes)

    def export_rules(self, format: str = "text", **options: Any) -> str:
        """Return the fitted trees as readable rules ("text"), JSON ("json") or a SQL expression ("sql").

        See :func:`gpucal.rules.export_rules` for ``options`` (e.g. ``table=`` for SQL).
        """
        check_is_fitted(self, list(self._state_spec))
        return export_rules(
            self.ensemble_,
            self.encoder_,
            score_col=self.score_col,
            score_bins=self._fitted_param("score_bins"),
            init=tuple(float(v) for v in self.init_),
            format=format,
            **options,
        )

    # ----------------------------------------------------------------------------------------------
    # Saving

    def _check_state(self) -> None:
        """Rebuild the loaded encoder and ensemble, checking both; name the crosses (the encoder's)."""
        self.encoder_ = rebuilt_object(self.encoder_, FeatureEncoder, "encoder_", "encoder", allow_none=True)
        self.ensemble_ = rebuilt_object(self.ensemble_, TreeEnsemble, "ensemble_", "ensemble")
        # The crosses are the encoder's: derived, not saved.
        self.interactions_ = [] if self.encoder_ is None else [list(p) for p in self.encoder_.interactions_]
        encoded = [] if self.encoder_ is None else list(self.encoder_.feature_names_)
        if self.feature_cols_ != encoded:
            msg = f"feature_cols_ {self.feature_cols_!r} are not the encoder's features {encoded!r}"
            raise ValueError(msg)
        # One record per tree tried: the kept ones and the one dropped when the fit stopped.
        check_records(self.history_, "history_", HISTORY_FIELDS, self.ensemble_.n_trees + 1)
        if self.init_.shape != (2,):
            msg = "init_: expected [a, b]"
            raise ValueError(msg)
        if self.ensemble_.leaf_map != self.leaf_map:
            msg = f"ensemble_ has leaf_map {self.ensemble_.leaf_map!r}, the parameters {self.leaf_map!r}"
            raise ValueError(msg)
        expected = self._n_values().tolist()
        if [len(m) for m in self.ensemble_.code_maps] != expected:
            msg = "ensemble_.code_maps do not match the encoder and score_bins"
            raise ValueError(msg)


__all__ = ["MBCT"]

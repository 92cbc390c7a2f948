r"""``gpucal.HeterogeneousCalibrator``: a decision tree's leaves as parts, a calibration map per part.

Durfee et al., *Heterogeneous Calibration: a post-hoc model-agnostic framework for improved
generalization* (2022), Sec. 5: partition the feature space by a shallow tree that predicts the label,
then calibrate each part separately (Platt scaling); per-part calibration orders the parts optimally
for AUC (Sec. 4, Lemmas 4.3-4.4). What the paper fixes and what gpucal chose is in the class docstring.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace
from gpucal._frames import InputInfo, ParsedInput, parse_input
from gpucal.calibrators.base import OUTPUT_TYPE_OPTIONS, AnyOf, Calibrator, Constraint, Interval, Options
from gpucal.encoding import FeatureEncoder, resolve_feature_cols
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.hc.fit import HCParams, fit_hc
from gpucal.hc.node_maps import (
    ENSEMBLE_KINDS,
    apply_average,
    apply_chain,
    ensemble_values,
)
from gpucal.persistence import check_magnitude, check_records, rebuilt_object
from gpucal.registry import calibration_method
from gpucal.rows import any_dask, as_rows
from gpucal.rows.checks import check_all_dask
from gpucal.rules import export_rules
from gpucal.trees.ensemble import (
    TreeEnsemble,
    predict_ensemble,
)
from gpucal.trees.local_maps import LOCAL_MAP_KINDS, n_map_params

MODES = ("tree", "forest", "boosted")
# The record of each tree in ``history_`` (checked when a model file is loaded).
HISTORY_FIELDS: dict[str, tuple[type, ...]] = {
    "tree": (int,),
    "nodes": (int,),
    "leaves": (int,),
    "loss_before": (int, float),
    "loss_after": (int, float),
    "kept": (bool,),
}


@calibration_method("hc", fits_on_dask=True)
class HeterogeneousCalibrator(Calibrator):
    r"""Heterogeneous calibration: the leaves of a label-predicting tree, one calibration map per leaf.

    A shallow decision tree is grown to predict the label from the features (not from the score); its
    leaves partition the rows, and each part gets its own map of the score, by default Platt scaling
    (Durfee et al. 2022, Algorithm 1):

    .. math::

        \hat p(x, s) = \sigma\big(a_{b(x)} \operatorname{logit}(s) + c_{b(x)}\big),

    with :math:`b(x)` the leaf of :math:`x`. The variants of Sec. 5: ``"forest"`` averages the
    calibrated probabilities of several such trees, each grown on a bootstrap of the rows with a random
    subset of the features; ``"boosted"`` composes them, each tree's maps calibrating the output of the
    trees before it (:math:`\hat p = g^{(T)}_{b_T(x)} \circ \dots \circ g^{(1)}_{b_1(x)}(s)`).

    The trees come from gpucal's tree engine (:mod:`gpucal.trees`): one group-sum histogram pass
    per level, binary splits chosen from the histogram (numeric bins cut at a threshold, categories cut
    after sorting them by their label rate), so the fit runs on the GPU as well.

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the base model's probability.
    feature_cols : list of str, str or None, default=None
        Features the tree splits on; None means every column but ``score_col``, the label (a column named like
        ``y`` or holding its values), the weights and ``p_true`` (``gpucal.encoding.features``); a feature
        that is the label is refused. Other numbers are cut into ``n_bins`` quantile bins, other columns
        split by value (``FeatureEncoder``).
    categorical_cols : list of str, optional
        Numeric columns to split by value rather than by threshold. None: integer columns with few distinct
        values (at most one per 20 rows, 50,000 at most) are read by value, other numbers binned
        (``FeatureEncoder``); ``[]``: every number binned.
    n_bins : int, default=32
        Quantile bins per numeric feature: the thresholds a split may use.
    interactions : list of pairs of feature columns, "auto", "all" or None, default=None
        Pairs of features crossed into one more split feature each (:mod:`gpucal.encoding.crosses`: the
        pair's combined codes, numbers through their bins, rare and unseen pairs pooled), split like a
        category (levels sorted by label rate), so one split can separate combinations that neither
        column separates alone:

        - None: the columns only;
        - a list of pairs: those crosses (a pair naming an unknown column, a column with itself, or an
          entry of one column raises ``ValueError`` naming it);
        - ``"all"``: every pair of features;
        - ``"auto"``: the pairs feature-aware Platt's ``interactions="auto"`` keeps on the rows of ``X``
          (every pair screened by the expected held-out gain of a one-step fit of its cross on the
          first-order feature-aware Platt model:
          :func:`~gpucal.calibrators.feature_platt.resolve_interactions`; one first-order fit).

        The pairs crossed are ``interactions_``.
    min_cross_count : float, default=10.0
        Least weight of a cross level with a code of its own (over the tree rows); lighter levels, and
        pairs not seen there, share one pooled code per cross.
    max_cross_levels : int, default=100000
        Most codes of all crosses together (memory of the code tables and histograms); pairs past it are
        dropped with a ``UserWarning`` naming them.
    max_depth : int, default=3
        Depth of each tree (the paper uses "low depth" trees, tuned lightly).
    min_leaf_size : float, default=200
        Least weight of the tree rows in a leaf (each side of a split). Categories lighter than this
        over all tree rows are pooled into one category before growth. 200 because each leaf gets its
        own two-parameter logistic fit: the standard error of its logit offset is about
        :math:`1 / \sqrt{W p (1 - p)}`, 0.18 at :math:`W = 200`, :math:`p = 0.2`, small next to the
        per-part corrections the method looks for.
    criterion : {"entropy", "gini"}, default="entropy"
        Impurity of a node's label rate :math:`p` that the splits minimise: :math:`W H(p)` (half the
        binomial deviance) or :math:`2 W p (1 - p)`.
    local_map : {"platt", "constant", "shift", "temperature", "scale", "beta"}, default="platt"
        The map of each part (``gpucal.trees.local_maps``); "platt" is the paper's.
    leaf_penalty : float, default=1
        Ridge pulling each node's map toward its parent's, in units of row weight (the root has none):
        a leaf without positives among its calibration rows otherwise gets a logit offset running to
        minus infinity. 0 gives the paper's plain per-leaf Platt scaling (on Adult with ``max_depth=5``
        and ``min_leaf_size=50`` a separable leaf then took the held-out log-loss from 0.30 to 0.55). In
        ``"boosted"`` mode also the :math:`\lambda` of the gain criterion of trees 2 and on.
    mode : {"tree", "forest", "boosted"}, default="tree"
        One tree (the paper's experiments), the average over a forest, or the nested composition.
    n_trees : int, default=10
        Trees of the forest; most trees of the boosted chain.
    max_features : float or "sqrt", default=0.5
        ``"forest"``: the share of the features each tree may split on (at least one), or "sqrt" of
        their number. Drawn once per tree (random subspaces, Ho 1998), not per node as in Breiman's
        forests, so the default keeps a larger share than Breiman's per-node square root.
    tree_fraction : float, default=0.5
        Without tree data (``X_tree``), this share of the rows (seeded) grows the trees and the rest fit
        the maps.
    validation_fraction : float, default=0.2
        ``"boosted"``: this share of the map rows (seeded) is held out; a tree is kept while it lowers
        their log-loss (0: the map rows themselves decide, which keeps nearly every tree).
    seed : int, default=0
        Seed of the row splits, the bootstraps and the feature subsets.
    device : {"auto", "cpu", "gpu"}, default="auto"
        "auto" runs on the GPU when the data is there (cudf / cupy).
    verbose : int, default=0
        1 prints a line per tree, 2 also per level (to stderr).
    output_type : str, default="input"
        Family of the predictions.

    Attributes
    ----------
    encoder_ : FeatureEncoder
        Codes of the feature columns (bins and categories of the tree rows) and their crosses.
    interactions_ : list of [str, str]
        The crossed pairs, split features after the columns (empty without crosses).
    ensemble_ : TreeEnsemble
        The trees, every node carrying its map as ``(a, b)`` of ``sigmoid(a logit(s) + b)`` (or
        ``min(a s, 1)`` for "scale"); for "beta", the identity (its maps are in ``node_params_``).
    node_params_ : ndarray of shape (n_nodes, n_params)
        Each node's map parameters in ``local_maps`` order (platt: ``a, b``).
    feature_cols_ : list
        The feature columns used.
    history_ : list of dict
        Per tree: its nodes and leaves; in "boosted" mode also the held-out log-loss before and after
        and whether it was kept.

    Notes
    -----
    What the paper fixes: a classification tree grown on the base model's training split (Sec. 6: "we
    train a decision tree classifier on the training set"), its leaves as the parts, Platt scaling fitted
    per part on separate calibration data, low depth. It sketches the forest (average the calibrated
    outputs of the trees) and the boosted chain (a nested composition of per-partition calibrations;
    its Sec. 13 is not in our copy of the paper) without details.

    What gpucal chose:

    - Tree data: ``fit(..., X_tree=, y_tree=)`` grows on the given rows (the paper's setting) and fits
      the maps on all of ``X``; without them, ``tree_fraction`` of ``X`` grows and the rest fits.
    - The tree: binary splits on quantile bins (``n_bins``) and on categories sorted by label rate
      (exact for entropy and Gini, Breiman et al. 1984), categories lighter than ``min_leaf_size``
      pooled; a split is made whenever it lowers the impurity and both sides hold ``min_leaf_size``.
    - Every node, internal ones included, gets a map fitted on all calibration rows beneath it: a row
      with a value its node's tree rows never had stops there. Maps are fitted top-down with a ridge
      toward the parent's map (``leaf_penalty``).
    - Forest: Poisson(1) bootstrap weights of the tree rows and a feature subset per tree; the maps of
      every tree are fitted on all calibration rows. A row's count is drawn by inversion from one
      uniform hashed from ``(seed, tree, row position in the input)`` (counter-based, so a dask fit
      draws the same counts per partition); the feature subsets come from ``seed`` alone.
    - Boosted: tree 1 is the label tree; trees 2.. are grown on the tree rows' current calibrated
      output with MBCT's "gain" criterion with logit-shift leaves, which is the gradient-boosting split
      on the log-loss (the Newton gain :math:`G^2 / (H + \lambda)`), and each is followed by its
      per-leaf maps of the current output, fitted on the map rows. Trees are added while the held-out
      log-loss falls.
    - Numeric features are cut at their quantile bins; a missing value sorts after the largest bin.

    References
    ----------
    .. [1] D. Durfee et al. Heterogeneous Calibration: A post-hoc model-agnostic framework
       for improved generalization. arXiv preprint, 2022.
    .. [2] L. Breiman, J. Friedman, R. Olshen, C. Stone. Classification and Regression Trees, Sec. 9.4
       (splits of a categorical variable for two classes). Wadsworth, 1984.
    .. [3] T. K. Ho. The random subspace method for constructing decision forests. IEEE TPAMI 20(8), 1998.
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
        "max_depth": Interval(int, 0, None),
        "min_leaf_size": Interval(float, 0, None, closed="neither"),
        "criterion": Options("entropy", "gini"),
        "local_map": Options(*LOCAL_MAP_KINDS),
        "leaf_penalty": Interval(float, 0, None),
        "mode": Options(*MODES),
        "n_trees": Interval(int, 1, None),
        "max_features": AnyOf(Options("sqrt"), Interval(float, 0, 1, closed="right")),
        "tree_fraction": Interval(float, 0, 1, closed="neither"),
        "validation_fraction": Interval(float, 0, 1, closed="left"),
        "seed": Interval(int, 0, None),
        "device": Options("auto", "cpu", "gpu"),
        "verbose": Interval(int, 0, None),
        "output_type": OUTPUT_TYPE_OPTIONS,
    }
    #: Parameters ``predict`` reads with the fitted state: refused once changed after the fit.
    _state_params: ClassVar[tuple[str, ...]] = ("mode", "local_map")
    _state_spec: ClassVar[dict[str, str]] = {
        "encoder_": "json",
        "ensemble_": "json",
        "node_params_": "float_matrix",
        "feature_cols_": "json",
        "history_": "json",
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
        max_depth: int = 3,
        min_leaf_size: float = 200.0,
        criterion: str = "entropy",
        local_map: str = "platt",
        leaf_penalty: float = 1.0,
        mode: str = "tree",
        n_trees: int = 10,
        max_features: float | str = 0.5,
        tree_fraction: float = 0.5,
        validation_fraction: float = 0.2,
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
        self.max_depth = max_depth
        self.min_leaf_size = min_leaf_size
        self.criterion = criterion
        self.local_map = local_map
        self.leaf_penalty = leaf_penalty
        self.mode = mode
        self.n_trees = n_trees
        self.max_features = max_features
        self.tree_fraction = tree_fraction
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.output_type = output_type

    # ----------------------------------------------------------------------------------------------
    # fit

    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        *,
        X_tree: Any = None,
        y_tree: Any = None,
        sample_weight_tree: Any = None,
    ) -> HeterogeneousCalibrator:
        """Grow the trees and fit a map per node.

        Parameters
        ----------
        X : dataframe
            The score column and the feature columns (pandas, cudf, polars, pyarrow, or a dict). A dask
            DataFrame (with every row input a dask collection) fits over its partitions, every mode and
            local map: the trees and maps of one machine, its sums added (``gpucal.hc.fit``).
        y : array-like of shape (n,)
            Labels in {0, 1} (soft labels in [0, 1] count as that fraction of a positive).
        sample_weight : array-like of shape (n,), optional
            Non-negative row weights.
        X_tree, y_tree : dataframe and array-like, optional
            Rows to grow the trees on (the paper uses the base model's training split): the feature
            columns of ``X``, and in mode "boosted" the score column too (the base model's scores of
            those rows; trees 2.. are grown on their calibrated output). The maps are then fitted on all
            of ``X``. Without them, ``tree_fraction`` of ``X`` grows the trees and the rest fits the maps.
        sample_weight_tree : array-like, optional
            Row weights of ``X_tree``.

        Returns
        -------
        self
        """
        self._validate_params()
        self._check_tree_inputs(X_tree, y_tree, sample_weight_tree)
        given = {"X": X, "y": y, "sample_weight": sample_weight}
        tree_given = {"X_tree": X_tree, "y_tree": y_tree, "sample_weight_tree": sample_weight_tree}
        if any_dask(*given.values(), *tree_given.values()):
            check_all_dask({**given, **tree_given})
        rows = as_rows(**given)
        tree_rows = None
        if X_tree is not None:
            tree_rows = as_rows(X=X_tree, y=y_tree, sample_weight=sample_weight_tree)
        feature_cols = resolve_feature_cols(
            rows, X, y, sample_weight, score_col=self.score_col, feature_cols=self.feature_cols
        )
        params = self._params_as(HCParams, feature_cols=feature_cols)
        state = fit_hc(rows, params, tree_rows)
        self.encoder_, self.ensemble_, self.node_params_ = state.encoder, state.ensemble, state.node_params
        self.feature_cols_, self.history_ = state.feature_cols, state.history
        self.interactions_ = [list(pair) for pair in state.encoder.interactions_]
        return self

    @staticmethod
    def _check_tree_inputs(X_tree: Any, y_tree: Any, sample_weight_tree: Any) -> None:
        if (X_tree is None) != (y_tree is None) or (X_tree is None and sample_weight_tree is not None):
            msg = "X_tree and y_tree: give both (and sample_weight_tree only with them), or neither"
            raise ValueError(msg)

    # ----------------------------------------------------------------------------------------------
    # predict

    def _predict_input(self, X: Any) -> tuple[Any, Any, ParsedInput]:
        check_is_fitted(self, list(self._state_spec))
        split = parse_input(X, score_col=self.score_col, feature_cols=self.feature_cols_, allow_empty=True)
        xp = array_namespace(split.score)
        codes = xp.asarray(self.encoder_.transform(split.features, code_maps=self.ensemble_.code_maps))
        return codes, split.score, split

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        codes, score, split = self._predict_input(X)
        mode, local_map = self._fitted_param("mode"), self._fitted_param("local_map")
        if mode != "forest" and local_map in ENSEMBLE_KINDS:
            out = predict_ensemble(self.ensemble_, codes, score)
        else:
            leaves = self.ensemble_.leaves(codes)
            combine = apply_average if mode == "forest" else apply_chain
            out = combine(score, leaves, self.node_params_, local_map)
        return out, split.info

    def leaves(self, X: Any) -> Any:
        """Return the node each row stops at, per tree: int32 array of shape (n, n_trees) (global ids)."""
        codes, _, _ = self._predict_input(X)
        return self.ensemble_.leaves(codes)

    def export_rules(self, format: str = "text", **options: Any) -> str:
        """Return the fitted trees as readable rules ("text"), JSON ("json") or a SQL expression ("sql").

        The rules of :func:`gpucal.rules.export_rules` (``options`` as there): each tree sends a
        row to the node it stops at and applies that node's map to the previous trees' output, which is
        what modes "tree" and "boosted" compute. A forest's average and beta maps have no such form.
        """
        check_is_fitted(self, list(self._state_spec))
        mode, local_map = self._fitted_param("mode"), self._fitted_param("local_map")
        if mode == "forest" or local_map not in ENSEMBLE_KINDS:
            msg = (
                f"export_rules: mode={mode!r} with local_map={local_map!r} is not a chain of node "
                "maps; rules are written for modes 'tree' and 'boosted' with a map other than 'beta'"
            )
            raise ValueError(msg)
        return export_rules(
            self.ensemble_, self.encoder_, score_col=self.score_col, score_bins=0, format=format, **options
        )

    # ----------------------------------------------------------------------------------------------
    # Saving

    def _check_state(self) -> None:
        """Rebuild the loaded encoder and ensemble, checking both; name the crosses (the encoder's)."""
        self.encoder_ = rebuilt_object(self.encoder_, FeatureEncoder, "encoder_", "encoder")
        self.ensemble_ = rebuilt_object(self.ensemble_, TreeEnsemble, "ensemble_", "ensemble")
        # The crosses are the encoder's: derived, not saved.
        self.interactions_ = [list(pair) for pair in self.encoder_.interactions_]
        encoded = list(self.encoder_.feature_names_)
        if self.feature_cols_ != encoded:
            msg = f"feature_cols_ {self.feature_cols_!r} are not the encoder's features {encoded!r}"
            raise ValueError(msg)
        expected = (self.ensemble_.n_nodes, n_map_params(self.local_map))
        if self.node_params_.shape != expected:
            msg = f"node_params_: expected shape {expected}, got {self.node_params_.shape}"
            raise ValueError(msg)
        check_magnitude(self.node_params_, "node_params_")
        if self.ensemble_.leaf_map != ("scale" if self.local_map == "scale" else "platt"):
            msg = (
                f"ensemble_ has leaf_map {self.ensemble_.leaf_map!r}, not the one of {self.local_map!r} maps"
            )
            raise ValueError(msg)
        if self.local_map in ENSEMBLE_KINDS and not np.array_equal(
            ensemble_values(self.node_params_, self.local_map), self.ensemble_.node_value
        ):
            msg = "ensemble_.node_value does not match node_params_"
            raise ValueError(msg)
        if [len(m) for m in self.ensemble_.code_maps] != [int(k) for k in self.encoder_.n_codes_]:
            msg = "ensemble_.code_maps do not match the encoder"
            raise ValueError(msg)
        if self.mode != "boosted" and self.ensemble_.n_trees != (1 if self.mode == "tree" else self.n_trees):
            msg = f"ensemble_: {self.ensemble_.n_trees} trees do not match mode={self.mode!r}"
            raise ValueError(msg)
        # One record per tree grown: the kept ones and, boosted, the one dropped when the fit stopped.
        check_records(self.history_, "history_", HISTORY_FIELDS, self.ensemble_.n_trees + 1)


__all__ = ["HeterogeneousCalibrator"]

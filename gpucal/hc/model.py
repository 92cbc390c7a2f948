r"""``gpucal.HeterogeneousCalibrator``: a decision tree's leaves as parts, a calibration map per part.

Durfee et al., *Heterogeneous Calibration: a post-hoc model-agnostic framework for improved
generalization* (2022), Sec. 5: partition the feature space by a shallow tree that predicts the label,
then calibrate each part separately (Platt scaling); per-part calibration orders the parts optimally
for AUC (Sec. 4, Lemmas 4.3-4.4). What the paper fixes and what gpucal chose is in the class docstring.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, resolve_device
from gpucal._frames import Column, SplitInput, frame_columns, split_input, wrap_output
from gpucal._validation import check_consistent_length, check_labels, check_sample_weight
from gpucal.calibrators._base import AnyOf, Calibrator, Constraint, Interval, Options
from gpucal.calibrators._logistic import EPS, check_two_classes
from gpucal.calibrators.platt import OUTPUT_TYPE_OPTIONS
from gpucal.encoding import KIND_BINS, FeatureEncoder
from gpucal.hc.node_maps import (
    ENSEMBLE_KINDS,
    apply_average,
    apply_chain,
    ensemble_values,
    fit_node_maps,
)
from gpucal.partition.ensemble import (
    TreeEnsemble,
    code_maps_from_weights,
    code_weights,
    join_trees,
    map_codes,
    predict_ensemble,
)
from gpucal.partition.grow import GrowConfig, TreeNodes, grow_tree
from gpucal.partition.local_maps import LOCAL_MAP_KINDS, apply_local_maps, n_map_params
from gpucal.persistence import check_records, register
from gpucal.rows._collections import any_dask
from gpucal.rows.draws import poisson_one, row_uniforms
from gpucal.rules import export_rules
from kernels import tree_leaves

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


@register
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

    The trees come from gpucal's tree engine (:mod:`gpucal.partition`): one group-sum histogram pass
    per level, binary splits chosen from the histogram (numeric bins cut at a threshold, categories cut
    after sorting them by their label rate), so the fit runs on the GPU as well.

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the base model's probability.
    feature_cols : list of str, str or None, default=None
        Features the tree splits on; None means every column but the score. Numbers are cut into
        ``n_bins`` quantile bins, other columns split by value (``FeatureEncoder``).
    categorical_cols : list of str, optional
        Numeric columns to split by value (IDs) rather than by threshold.
    n_bins : int, default=32
        Quantile bins per numeric feature: the thresholds a split may use.
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
        The map of each part (``gpucal.partition.local_maps``); "platt" is the paper's.
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
        Codes of the feature columns (bins and categories of the tree rows).
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
            local map: the trees and maps of one machine, its sums added (``gpucal.distributed.hc``).
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
        if any_dask(X, y, sample_weight, X_tree, y_tree, sample_weight_tree):
            from gpucal.distributed.hc import fit_hc_partitions

            self._validate_params()
            self._check_tree_inputs(X_tree, y_tree, sample_weight_tree)
            fit_hc_partitions(self, X, y, sample_weight, X_tree, y_tree, sample_weight_tree)
            return self
        self._validate_params()
        self._check_tree_inputs(X_tree, y_tree, sample_weight_tree)
        split = split_input(
            X, score_col=self.score_col, feature_cols=self.feature_cols, require_features=True
        )
        cal = _checked_rows(split.features, split.score, y, sample_weight, "X", "y")
        device = resolve_device(self.device, cal.score)
        self._backend = "cuda" if device == "gpu" else "cpu"
        cal = cal.to_gpu() if device == "gpu" else cal
        self.feature_cols_ = list(split.features)
        if X_tree is None:
            self.encoder_ = self._fit_encoder(cal.features, sample_weight)
            tree, cal = cal.with_codes(self._codes(cal)).divide(self.tree_fraction, self.seed)
        else:
            # The label tree reads features only; boosted trees 2.. also read the score.
            if self.mode == "boosted":
                tree_split = split_input(
                    X_tree, score_col=self.score_col, feature_cols=self.feature_cols_, name="X_tree"
                )
                features, tree_score = tree_split.features, tree_split.score
            else:
                features, tree_score = frame_columns(X_tree, self.feature_cols_, name="X_tree"), None
            grow = _checked_rows(features, tree_score, y_tree, sample_weight_tree, "X_tree", "y_tree")
            grow = grow.to_gpu() if device == "gpu" else grow
            self.encoder_ = self._fit_encoder(grow.features, sample_weight_tree)
            tree = grow.with_codes(self._codes(grow))
            cal = cal.with_codes(self._codes(cal))
        self._fit_rows(tree, cal)
        return self

    @staticmethod
    def _check_tree_inputs(X_tree: Any, y_tree: Any, sample_weight_tree: Any) -> None:
        if (X_tree is None) != (y_tree is None) or (X_tree is None and sample_weight_tree is not None):
            msg = "X_tree and y_tree: give both (and sample_weight_tree only with them), or neither"
            raise ValueError(msg)

    def _fit_encoder(self, features: dict[Hashable, Column], sample_weight: Any) -> FeatureEncoder:
        encoder = FeatureEncoder(n_bins=self.n_bins, categorical_cols=self.categorical_cols)
        return encoder.fit(features, sample_weight=sample_weight)

    def _codes(self, rows: _Rows) -> Any:
        """Return the encoder's codes of ``rows``, on the device of their labels."""
        return array_namespace(rows.y).asarray(self.encoder_.transform(rows.features))

    def _fit_rows(self, tree: _Rows, cal: _Rows) -> None:
        """Grow on ``tree``, fit the maps on ``cal`` (both encoded); set the fitted attributes."""
        n_values = np.asarray(self.encoder_.n_values_, dtype=np.int64)
        maps, counts = self._set_code_maps(code_weights(tree.codes, tree.w, n_values))
        tree = tree.with_codes(map_codes(tree.codes, maps, counts))
        cal = cal.with_codes(map_codes(cal.codes, maps, counts))
        self._log(
            1,
            f"HC ({self.mode}): {tree.y.shape[0]} tree rows, {cal.y.shape[0]} map rows, "
            f"{len(self._ordinal)} features",
        )
        self.history_: list[dict[str, Any]] = []
        if self.mode == "boosted":
            trees, params = self._fit_boosted(tree, cal)
        else:
            trees, params = self._fit_trees(tree, cal)
        self._set_ensemble(trees, params, maps, counts)

    def _set_code_maps(self, weights: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """From the tree rows' weight per input code (``code_weights``): the input-to-tree code maps and
        the tree code counts (``tree_code_maps``); sets the rare codes and which features are ordinal."""
        n_values = np.asarray(self.encoder_.n_values_, dtype=np.int64)
        ordinal = [kind == KIND_BINS for kind in self.encoder_.kinds_]
        maps, rare, counts = code_maps_from_weights(weights, n_values, float(self.min_leaf_size))
        # Bins keep their order: only categories are pooled (a pooled code has no place in code order).
        for j in np.flatnonzero(ordinal):
            maps[j], rare[j], counts[j] = np.arange(n_values[j], dtype=np.int32), -1, n_values[j]
        self._rare_codes, self._tree_n_values = rare, counts
        self._ordinal = tuple(ordinal)
        return maps, counts

    def _set_ensemble(
        self, trees: list[TreeNodes], params: np.ndarray, maps: list[np.ndarray], counts: np.ndarray
    ) -> None:
        """Join the grown trees, each node carrying its map, into ``ensemble_``; keep ``node_params_``."""
        kind = self.local_map
        names = [str(c) for c in self.encoder_.feature_names_]
        leaf_map = "scale" if kind == "scale" else "platt"
        if kind in ENSEMBLE_KINDS:
            values = ensemble_values(params, kind)
        else:
            values = np.tile([1.0, 0.0], (params.shape[0], 1))
        offset = 0
        for nodes in trees:
            n = len(nodes.feature)
            nodes.value = list(values[offset : offset + n])
            offset += n
        self.ensemble_ = join_trees(trees, leaf_map, names, counts, maps, self._rare_codes)
        self.node_params_ = params

    def _grow_config(self, criterion: str, mask: tuple[bool, ...] = ()) -> GrowConfig:
        leaf = float(self.min_leaf_size)
        return GrowConfig(
            leaf_map="shift",
            criterion=criterion,
            max_depth=self.max_depth,
            min_node_size=2.0 * leaf,
            min_child_size=leaf,
            penalty=float(self.leaf_penalty),
            n_views=1,
            mvce_bin_size=1,
            mvce_p=2.0,
            seed=self.seed,
            backend=self._backend,
            split_mode="binary",
            ordinal=self._ordinal,
            feature_mask=mask,
        )

    def _grow(self, rows: _Rows, f: Any, w: Any, config: GrowConfig) -> TreeNodes:
        log = (lambda line: self._log(2, line)) if self.verbose >= 2 else None
        nodes, _ = grow_tree(rows.codes, f, rows.y, w, self._tree_n_values, self._rare_codes, config, log=log)
        return nodes

    def _leaves(self, nodes: TreeNodes, codes: Any) -> Any:
        """Return the tree-local node each row stops at."""
        feature, base, table = nodes.routing_arrays()
        start = np.array([0, len(nodes.feature)], dtype=np.int64)
        return tree_leaves(codes, feature, base, table, start, backend=self._backend)[:, 0]

    def _fit_maps(self, nodes: TreeNodes, cal: _Rows, f: Any) -> np.ndarray:
        leaf = self._leaves(nodes, cal.codes)
        return fit_node_maps(
            nodes,
            leaf,
            f,
            cal.y,
            cal.w,
            self.local_map,
            penalty=float(self.leaf_penalty),
            backend=self._backend,
        )

    def _fit_trees(self, tree: _Rows, cal: _Rows) -> tuple[list[TreeNodes], np.ndarray]:
        """One label tree, or a forest of them on bootstraps and feature subsets."""
        xp = array_namespace(tree.y)
        # The tree input f: read by the gain criteria only, so any probability does for the label ones.
        f = xp.full_like(tree.y, 0.5)
        rng = np.random.default_rng(self.seed)  # the feature subsets: one draw per tree, from the seed
        d = len(self._ordinal)
        n_trees = 1 if self.mode == "tree" else self.n_trees
        trees, params = [], []
        for t in range(n_trees):
            start = time.perf_counter()
            w = tree.w
            mask: tuple[bool, ...] = ()
            if self.mode == "forest":
                boot = xp.asarray(bootstrap_weights(self.seed, t, tree.index))
                w = boot if tree.w is None else tree.w * boot
                mask = self._feature_mask(rng, d)
            nodes = self._grow(tree, f, w, self._grow_config(self.criterion, mask))
            trees.append(nodes)
            params.append(self._fit_maps(nodes, cal, cal.score))
            self._record(t, nodes, start)
        return trees, np.concatenate(params)

    def _feature_mask(self, rng: np.random.Generator, d: int) -> tuple[bool, ...]:
        share = self.max_features
        n_allowed = int(np.sqrt(d)) if share == "sqrt" else round(float(share) * d)
        chosen = rng.choice(d, size=min(d, max(1, n_allowed)), replace=False)
        mask = np.zeros(d, dtype=bool)
        mask[chosen] = True
        return tuple(bool(v) for v in mask)

    def _fit_boosted(self, tree: _Rows, cal: _Rows) -> tuple[list[TreeNodes], np.ndarray]:
        """The nested composition: tree 1 by label impurity, then log-loss gain trees on the output.

        Every tree grows on the tree rows (trees 2.. on their current output) and gets its maps from
        the map rows, so no tree's maps are fitted on the rows that chose its splits; the held-out rows
        decide whether a tree stays. (Growing trees 2.. on the map rows instead, as gradient boosting
        does, kept one tree at most on Adult and make_ctr: in-sample splits fail the held-out check.)
        """
        fit, valid = (
            cal.divide(1.0 - self.validation_fraction, self.seed + 1)
            if self.validation_fraction
            else (cal, cal)
        )
        f_tree, f_fit, f_valid = tree.score, fit.score, valid.score
        loss = _log_loss(f_valid, valid.y, valid.w)
        trees: list[TreeNodes] = []
        params: list[np.ndarray] = []
        for t in range(self.n_trees):
            start = time.perf_counter()
            criterion = self.criterion if t == 0 else "gain"
            nodes = self._grow(tree, f_tree, tree.w, self._grow_config(criterion))
            tree_params = self._fit_maps(nodes, fit, f_fit)
            f_valid_next = self._apply_tree(nodes, tree_params, valid.codes, f_valid)
            new_loss = _log_loss(f_valid_next, valid.y, valid.w)
            kept = t == 0 or new_loss < loss
            self._record(t, nodes, start, loss, new_loss, kept)
            if not kept:
                break
            trees.append(nodes)
            params.append(tree_params)
            f_tree = self._apply_tree(nodes, tree_params, tree.codes, f_tree)
            f_fit = self._apply_tree(nodes, tree_params, fit.codes, f_fit)
            f_valid, loss = f_valid_next, new_loss
        return trees, np.concatenate(params)

    def _apply_tree(self, nodes: TreeNodes, params: np.ndarray, codes: Any, f: Any) -> Any:
        """Return ``f`` through the maps of the nodes (of one tree) the rows stop at."""
        return apply_local_maps(f, self._leaves(nodes, codes), params, self.local_map)

    def _record(
        self,
        t: int,
        nodes: TreeNodes,
        start: float,
        loss_before: float | None = None,
        loss_after: float | None = None,
        kept: bool = True,
    ) -> None:
        n_leaves = sum(1 for j in nodes.feature if j < 0)
        entry: dict[str, Any] = {"tree": t, "nodes": len(nodes.feature), "leaves": n_leaves}
        line = f"  tree {t + 1}: {len(nodes.feature)} nodes, {n_leaves} leaves"
        if loss_before is not None and loss_after is not None:
            entry.update(loss_before=loss_before, loss_after=loss_after, kept=kept)
            verdict = "kept" if kept else "dropped, stop"
            line += f", held-out log-loss {loss_before:.6g} -> {loss_after:.6g} ({verdict})"
        self.history_.append(entry)
        self._log(1, f"{line} [{time.perf_counter() - start:.2f} s]")

    def _log(self, level: int, line: str) -> None:
        if self.verbose >= level:
            print(line, file=sys.stderr, flush=True)

    # ----------------------------------------------------------------------------------------------
    # predict

    def _predict_input(self, X: Any) -> tuple[Any, Any, SplitInput]:
        check_is_fitted(self, list(self._state_spec))
        split = split_input(X, score_col=self.score_col, feature_cols=self.feature_cols_, allow_empty=True)
        xp = array_namespace(split.score)
        codes = xp.asarray(self.encoder_.transform(split.features, code_maps=self.ensemble_.code_maps))
        return codes, split.score, split

    def predict(self, X: Any) -> Any:
        """Return calibrated probabilities for the rows of ``X``, in ``X``'s family.

        Parameters
        ----------
        X : dataframe
            The score column and the fitted feature columns (other columns are ignored); a dask
            DataFrame gives a dask Series of its partitions' predictions.

        Returns
        -------
        array or Series of shape (n,)
        """
        lazy = self._predict_partitions(X)
        if lazy is not None:
            return lazy
        codes, score, split = self._predict_input(X)
        if self.mode != "forest" and self.local_map in ENSEMBLE_KINDS:
            out = predict_ensemble(self.ensemble_, codes, score)
        else:
            leaves = self._tree_leaves(codes)
            combine = apply_average if self.mode == "forest" else apply_chain
            out = combine(score, leaves, self.node_params_, self.local_map)
        return wrap_output(out, split.info, output_type=self.output_type)

    def _tree_leaves(self, codes: Any) -> Any:
        e = self.ensemble_
        return tree_leaves(codes, e.node_feature, e.node_child_base, e.child_table, e.tree_start)

    def leaves(self, X: Any) -> Any:
        """Return the node each row stops at, per tree: int32 array of shape (n, n_trees) (global ids)."""
        codes, _, _ = self._predict_input(X)
        return self._tree_leaves(codes)

    def export_rules(self, format: str = "text", **options: Any) -> str:
        """Return the fitted trees as readable rules ("text"), JSON ("json") or a SQL expression ("sql").

        The rules of :func:`gpucal.rules.export_rules` (``options`` as there): each tree sends a
        row to the node it stops at and applies that node's map to the previous trees' output, which is
        what modes "tree" and "boosted" compute. A forest's average and beta maps have no such form.
        """
        check_is_fitted(self, list(self._state_spec))
        if self.mode == "forest" or self.local_map not in ENSEMBLE_KINDS:
            msg = (
                f"export_rules: mode={self.mode!r} with local_map={self.local_map!r} is not a chain of node "
                "maps; rules are written for modes 'tree' and 'boosted' with a map other than 'beta'"
            )
            raise ValueError(msg)
        return export_rules(
            self.ensemble_, self.encoder_, score_col=self.score_col, score_bins=0, format=format, **options
        )

    # ----------------------------------------------------------------------------------------------
    # Saving

    def _check_state(self) -> None:
        """Turn the loaded plain data back into an encoder and an ensemble, checking both."""
        if isinstance(self.encoder_, dict):
            self.encoder_ = FeatureEncoder.from_dict(self.encoder_)
        if not isinstance(self.encoder_, FeatureEncoder):
            msg = "encoder_: expected an encoder object"
            raise ValueError(msg)
        if isinstance(self.ensemble_, dict):
            self.ensemble_ = TreeEnsemble.from_dict(self.ensemble_)
        if not isinstance(self.ensemble_, TreeEnsemble):
            msg = "ensemble_: expected an ensemble object"
            raise ValueError(msg)
        if not isinstance(self.feature_cols_, list):
            msg = "feature_cols_: expected a list"
            raise ValueError(msg)
        expected = (self.ensemble_.n_nodes, n_map_params(self.local_map))
        if self.node_params_.shape != expected:
            msg = f"node_params_: expected shape {expected}, got {self.node_params_.shape}"
            raise ValueError(msg)
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
        if [len(m) for m in self.ensemble_.code_maps] != [int(k) for k in self.encoder_.n_values_]:
            msg = "ensemble_.code_maps do not match the encoder"
            raise ValueError(msg)
        if self.mode != "boosted" and self.ensemble_.n_trees != (1 if self.mode == "tree" else self.n_trees):
            msg = f"ensemble_: {self.ensemble_.n_trees} trees do not match mode={self.mode!r}"
            raise ValueError(msg)
        # One record per tree grown: the kept ones and, boosted, the one dropped when the fit stopped.
        check_records(self.history_, "history_", HISTORY_FIELDS, self.ensemble_.n_trees + 1)


class _Rows:
    """Rows of one role (tree growth or map fitting): feature columns, codes, score, labels, weights.

    ``score`` is None for tree rows given as ``X_tree`` (the label tree does not read it); ``features``
    describe all the rows the object was made from (only read before ``divide``); ``index`` (host
    int64) is each row's position in the input it came from (``X`` or ``X_tree``), what the forest's
    bootstrap draws are keyed by.
    """

    def __init__(
        self, features: dict[Hashable, Column], codes: Any, score: Any, y: Any, w: Any, index: np.ndarray
    ) -> None:
        self.features, self.codes, self.score, self.y, self.w = features, codes, score, y, w
        self.index = index

    def with_codes(self, codes: Any) -> _Rows:
        return _Rows(self.features, codes, self.score, self.y, self.w, self.index)

    def to_gpu(self) -> _Rows:
        import cupy

        def put(a: Any) -> Any:
            return None if a is None else cupy.asarray(a)

        return _Rows(self.features, put(self.codes), put(self.score), put(self.y), put(self.w), self.index)

    def take(self, rows: np.ndarray) -> _Rows:
        """The rows at host positions ``rows``."""
        on_device = array_namespace(self.y).asarray(rows)

        def cut(a: Any) -> Any:
            return None if a is None else a[on_device]

        return _Rows(
            self.features, cut(self.codes), cut(self.score), cut(self.y), cut(self.w), self.index[rows]
        )

    def divide(self, share: float, seed: int) -> tuple[_Rows, _Rows]:
        """Split the rows at random (seeded): ``share`` of them first, the rest second; both non-empty."""
        n = self.y.shape[0]
        first = np.random.default_rng(seed).random(n) < share
        if first.all() or not first.any():
            msg = f"a share of {share:g} of {n} rows leaves one side empty: give more rows"
            raise ValueError(msg)
        return self.take(np.flatnonzero(first)), self.take(np.flatnonzero(~first))


def _checked_rows(
    features: dict[Hashable, Column], score: Any, y: Any, w: Any, x_name: str, y_name: str
) -> _Rows:
    """Check labels and weights against the rows (and two classes among them); return the rows."""
    rows = next(iter(features.values())).values
    labels = check_labels(y, y_name)
    n = check_consistent_length(**{x_name: rows, y_name: labels})
    xp = array_namespace(labels)
    weights = None if w is None else check_sample_weight(w, n, xp=xp)
    check_two_classes(labels, xp.ones_like(labels) if weights is None else weights, y_name)
    return _Rows(features, None, score, labels, weights, np.arange(n, dtype=np.int64))


def bootstrap_weights(seed: int, tree: int, index: np.ndarray) -> np.ndarray:
    """Return the Poisson(1) bootstrap weights of forest tree ``tree`` for the rows at ``index`` (host).

    A row's count is a function of ``(seed, tree, index)`` alone (``gpucal.rows.draws``),
    so the partitions of a dask collection draw, from their rows' global positions, the counts one
    machine draws.
    """
    return poisson_one(row_uniforms(seed, tree, index))


def _log_loss(p: Any, y: Any, w: Any) -> float:
    xp = array_namespace(p)
    q = xp.clip(p, EPS, 1.0 - EPS)
    loss = -(y * xp.log(q) + (1.0 - y) * xp.log1p(-q))
    if w is None:
        return float(loss.mean())
    return float((w * loss).sum() / w.sum())


__all__ = ["HeterogeneousCalibrator"]

r"""``gpucal.MBCT``: Multiple Boosting Calibration Trees (Huang et al., WWW 2022, Sec. 4).

A chain of multi-way trees over discrete features, each node calibrating the output of the trees
before it. What the paper fixes, what it leaves open and what gpucal chose is in the class docstring
and the README; ``mbct.md`` has the reasoning.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, resolve_device
from gpucal._frames import SplitInput, split_input, wrap_output
from gpucal._validation import check_consistent_length, check_labels, check_sample_weight
from gpucal.calibrators._base import AnyOf, Calibrator, Constraint, Interval, Options
from gpucal.calibrators._logistic import EPS, ArrayRows, LogisticRows, check_two_classes
from gpucal.calibrators.platt import OUTPUT_TYPE_OPTIONS, fit_platt_rows, predict_platt
from gpucal.encoding import FeatureEncoder
from gpucal.mbct._node_size import min_node_size
from gpucal.partition.aggregate import aggregate_rows
from gpucal.partition.ensemble import (
    LEAF_MAPS,
    TreeEnsemble,
    join_trees,
    map_codes,
    predict_ensemble,
    tree_code_dtype,
    tree_code_maps,
)
from gpucal.partition.grow import GrowConfig, TreeNodes, grow_tree
from gpucal.partition.local_maps import MapSums, fit_local_maps_from_sums, local_map_sums, map_design
from gpucal.persistence import check_records, register
from gpucal.rows._collections import any_dask
from gpucal.rows.draws import check_held_out, held_out_mask
from kernels import lookup_bins, take_rows, tree_leaves

AUTO = Options("auto")
# The record of each tree in ``history_`` (checked when a model file is loaded).
HISTORY_FIELDS: dict[str, tuple[type, ...]] = {
    "tree": (int,),
    "nodes": (int,),
    "loss_before": (int, float),
    "loss_after": (int, float),
    "kept": (bool,),
}
# Receives one line per level of a growing tree (or None: no log).
LevelLog = Callable[[str], None] | None
# Newton steps refitting the shift / Platt leaves of a grown tree (they start from the grown map).
N_REFIT_STEPS = 4


@register
class MBCT(Calibrator):
    r"""Multiple Boosting Calibration Trees: feature-aware, individual, non-monotonic calibration.

    Each tree splits the rows by discrete feature values (one child per value, Sec. 4.3) and calibrates
    every node with a map of its input probability :math:`f`; trees chain, each calibrating the output
    of the ones before:

    .. math::

        \hat p = g^{(T)}_{b_T(x)} \circ \dots \circ g^{(1)}_{b_1(x)}\big(g_0(s)\big), \qquad
        g_b(f) = \min(k_b f, 1) \;\text{("scale", the paper's map)}

    or :math:`\sigma(\operatorname{logit} f + d_b)` ("shift") or :math:`\sigma(a_b \operatorname{logit} f
    + d_b)` ("platt"); :math:`g_0` is the identity or a global Platt map (``init``).

    Parameters
    ----------
    score_col : str, default="score"
        Column holding the base model's probability.
    feature_cols : list of str, str or None, default=None
        Split features; None means every column but the score. Categoricals split by value, numbers by
        ``n_bins`` quantile bins (``FeatureEncoder``); missing values get their own code.
    categorical_cols : list of str, optional
        Numeric columns to split by value (IDs).
    n_bins : int, default=32
        Quantile bins per numeric feature.
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
        as good or better on every dataset of the benchmark and about 10-20x cheaper (no views).
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
        Merge rows with equal codes and score first (App. A.2; lossless, ``_aggregate``), when that at
        least halves the rows. CPU path and criterion "gain" only: MVCE's views are equal-count bins of
        samples, which merged rows would distort.
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
        Codes of the feature columns.
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
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_bins": Interval(int, 1, None),
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

    # ----------------------------------------------------------------------------------------------
    # Input

    def _codes(
        self, split: SplitInput, encoder: FeatureEncoder | None, tree: TreeEnsemble | None = None
    ) -> Any:
        """Return the ``(n, d)`` codes: the encoded features, then the score bin, written in one array.

        With ``tree``, its pooled tree codes instead (``tree.code_maps`` composed with the encoding, one
        table read per row and column).
        """
        xp = array_namespace(split.score)
        width = (0 if encoder is None else len(encoder.feature_names_)) + (1 if self.score_bins else 0)
        if tree is None:
            maps = None
            bin_codes = np.arange(self.score_bins)
            parts = ([] if encoder is None else [encoder.codes_dtype_]) + (
                [np.int16] if self.score_bins else []
            )
            dtype = np.result_type(*parts)
        else:
            maps = tree.code_maps
            bin_codes = maps[-1]
            dtype = tree_code_dtype(tree.n_values)
        out = xp.empty((split.score.shape[0], width), dtype=dtype)
        if encoder is not None:
            encoder.transform(split.features, code_maps=maps, out=out)
        if self.score_bins:
            lookup_bins(split.score, self.score_bins, bin_codes, out, width - 1)
        return out

    def _n_values(self) -> np.ndarray:
        enc = [] if self.encoder_ is None else list(self.encoder_.n_values_)
        return np.asarray(enc + ([self.score_bins] if self.score_bins else []), dtype=np.int64)

    def _split_feature_names(self, encoder: FeatureEncoder | None) -> list[str]:
        names = [] if encoder is None else [str(c) for c in encoder.feature_names_]
        return names + ([f"{self.score_col} bin"] if self.score_bins else [])

    # ----------------------------------------------------------------------------------------------
    # fit

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> MBCT:
        """Grow the trees on scores and features ``X``, labels ``y`` and optional row weights.

        Parameters
        ----------
        X : dataframe
            The score column and the feature columns (pandas, cudf, polars, pyarrow, or a dict), or a
            dask DataFrame (``y`` and ``sample_weight`` partitioned alike): the same trees, fitted by
            passes over the partitions with each worker's rows held in its memory
            (``gpucal.distributed.mbct``), or, under ``dask.config.set({"gpucal.stream-partitions":
            True})``, read again by every pass for data larger than memory
            (``gpucal.distributed.mbct_stream``).
        y : array-like of shape (n,)
            Labels in {0, 1} (soft labels in [0, 1] count as that fraction of a positive).
        sample_weight : array-like of shape (n,), optional
            Non-negative row weights.

        Returns
        -------
        self
        """
        if any_dask(X, y, sample_weight):
            from gpucal.distributed.mbct import fit_mbct_partitions

            self._validate_params()
            fit_mbct_partitions(self, X, y, sample_weight)
            return self
        self._validate_params()
        split = split_input(X, score_col=self.score_col, feature_cols=self.feature_cols)
        score = split.score
        xp = array_namespace(score)
        labels = check_labels(y, "y")
        check_consistent_length(X=score, y=labels)
        weights = None if sample_weight is None else check_sample_weight(sample_weight, score.shape[0], xp=xp)
        # One class only: every map sends the scores to it (k = 0, or a logit running to infinity).
        check_two_classes(labels, xp.ones_like(labels) if weights is None else weights)
        if not split.features and not self.score_bins:
            msg = "X: MBCT needs a feature column or score_bins > 0 to split on"
            raise ValueError(msg)
        device = resolve_device(self.device, score)
        self._backend = "cuda" if device == "gpu" else "cpu"
        if device == "gpu" and xp is np:
            import cupy

            score, labels = cupy.asarray(score), cupy.asarray(labels)
            weights = None if weights is None else cupy.asarray(weights)
            xp = cupy
        self.encoder_ = None
        if split.features:
            self.encoder_ = FeatureEncoder(n_bins=self.n_bins, categorical_cols=self.categorical_cols)
            self.encoder_.fit(split.features, sample_weight=sample_weight)
        self.feature_cols_ = [] if self.encoder_ is None else list(self.encoder_.feature_names_)
        codes = self._codes(split, self.encoder_)
        if device == "gpu":
            codes = xp.asarray(codes)
        self._fit_codes(codes, score, labels, weights)
        return self

    def _fit_codes(self, codes: Any, score: Any, y: Any, w: Any) -> None:
        xp = array_namespace(score)
        train, valid = self._validation_split(score.shape[0], xp)
        train_rows = (codes, score, y, w) if train is None else take_rows(train, codes, score, y, w)
        valid_rows = None if valid is None else take_rows(valid, codes, score, y, w)
        c_tr, s_tr, y_tr, w_tr = train_rows
        self._log(1, f"MBCT: {s_tr.shape[0]} training rows, {codes.shape[1]} split features")
        # Eq. 13 reads the label variance of the rows: before merging, whose soft labels would lower it.
        self._resolve_sizes(*label_moments(y_tr, w_tr))
        # MVCE's views cut samples into bins of equal count: a merged row would be one sample of many,
        # so rows are merged for the deterministic criterion only.
        if self.aggregate and self.criterion == "gain" and xp is np:
            merged = aggregate_rows(c_tr, s_tr, y_tr, w_tr)
            if merged is not None:
                c_tr, s_tr, y_tr, w_tr = merged
                self._log(1, f"  identical rows merged: {s_tr.shape[0]} rows remain")
        self._code_maps, self._rare_codes, self._tree_n_values = tree_code_maps(
            c_tr, w_tr, self._n_values(), self.min_child_size_
        )
        self.init_ = np.array([1.0, 0.0])
        if self.init == "platt":
            w_init = xp.ones_like(s_tr) if w_tr is None else w_tr
            self.init_ = np.array(fit_init_platt(ArrayRows(s_tr, y_tr, w_init)))
        f_tr = self._apply_init(s_tr)
        f_va = None if valid_rows is None else self._apply_init(valid_rows[1])
        maps = self._code_maps
        c_tr = map_codes(c_tr, maps, self._tree_n_values)
        if valid_rows is not None:
            valid_rows = (map_codes(valid_rows[0], maps, self._tree_n_values), *valid_rows[1:])
        self._grow_chain(_ArrayChainRows(self, c_tr, f_tr, y_tr, w_tr, valid_rows, f_va))

    def _validation_split(self, n: int, xp: Any) -> tuple[Any, Any]:
        if not self.validation_fraction:
            return None, None
        held = held_out_mask(n, self.validation_fraction, self.seed)
        check_held_out(int(held.sum()), n, self.validation_fraction)
        return xp.asarray(np.flatnonzero(~held)), xp.asarray(np.flatnonzero(held))

    def _resolve_sizes(self, total: float, variance: float) -> None:
        """Set ``min_node_size_`` and ``min_child_size_`` from the training weight and label variance."""
        if self.min_node_size == "auto":
            beta = float(min_node_size(total, variance, alpha=self.alpha, e=self.e))
            self._log(1, f"  beta (Eq. 13, alpha={self.alpha}, e={self.e}): {beta:g}")
        else:
            beta = float(self.min_node_size)
        self.min_node_size_ = beta
        self.min_child_size_ = beta if self.min_child_size == "auto" else float(self.min_child_size)

    def _apply_init(self, score: Any) -> Any:
        a, b = (float(v) for v in self.init_)
        return score if (a, b) == (1.0, 0.0) else predict_platt(score, a, b)

    def _grow_config(self) -> GrowConfig:
        return GrowConfig(
            leaf_map="scale" if self.leaf_map == "scale" else "shift",
            criterion=self.criterion,
            max_depth=self.max_depth,
            min_node_size=self.min_node_size_,
            min_child_size=self.min_child_size_,
            penalty=float(self.leaf_penalty),
            n_views=self.n_views,
            mvce_bin_size=max(1, int(self.min_node_size_ // 2)),
            mvce_p=float(self.mvce_p),
            seed=self.seed,
            backend=self._backend,
        )

    def _grow_chain(self, rows: ChainRows) -> None:
        """Add trees while the global loss falls (Sec. 4.3), keeping those finished if interrupted."""
        n_values = self._tree_n_values
        names = self._split_feature_names(self.encoder_)
        trees: list[TreeNodes] = []
        config = self._grow_config()
        self.history_ = []
        self.interrupted_ = False
        loss = rows.global_loss()
        try:
            for t in range(self.max_trees):
                start = time.perf_counter()
                log = (lambda line: self._log(2, line)) if self.verbose >= 2 else None
                nodes, leaf = rows.grow(n_values, self._rare_codes, config, log)
                values = nodes.values
                if self.leaf_map != "scale":
                    values = self._refit_leaves(rows.map_sums(leaf, self.leaf_map), values)
                nodes.value = list(self._damp(values))
                next_rows = rows.through(self._ensemble([nodes], names))
                new_loss = next_rows.global_loss()
                kept = bool(new_loss < loss - self.tol * abs(loss))
                self.history_.append(
                    {
                        "tree": t,
                        "nodes": len(nodes.feature),
                        "loss_before": loss,
                        "loss_after": new_loss,
                        "kept": kept,
                    }
                )
                self._log(
                    1,
                    f"  tree {t + 1}: {len(nodes.feature)} nodes, depth {max(nodes.depth)}, global loss "
                    f"{loss:.6g} -> {new_loss:.6g} ({'kept' if kept else 'dropped, stop'}) "
                    f"[{time.perf_counter() - start:.2f} s]",
                )
                if not kept:
                    break
                trees.append(nodes)
                rows, loss = next_rows, new_loss
        except KeyboardInterrupt:
            self.interrupted_ = True
            warnings.warn(
                f"MBCT fit interrupted: keeping the {len(trees)} tree(s) finished before the interrupt",
                RuntimeWarning,
                stacklevel=3,
            )
        self.ensemble_ = self._ensemble(trees, names)

    def _refit_leaves(self, sums: MapSums, values: np.ndarray) -> np.ndarray:
        """Refit the shift or Platt map of every node holding rows: a few Newton steps from the grown map.

        Growth fits a shift leaf with one Newton step; once the structure is fixed, ``N_REFIT_STEPS`` more
        make it the penalised maximum-likelihood value, shrunk toward the grown map by ``leaf_penalty``.
        ``sums(theta)`` is ``local_map_sums`` of the tree's nodes at ``theta``, wherever the rows are.
        """
        platt = self.leaf_map == "platt"
        params = fit_local_maps_from_sums(
            sums,
            values if platt else values[:, 1:],
            self.leaf_map,
            penalty=float(self.leaf_penalty),
            n_steps=N_REFIT_STEPS,
            tol=0.0,
        )
        out = values.copy()
        out[:, 1] = params[:, -1]
        if platt:
            out[:, 0] = params[:, 0]
        return out

    def _ensemble(self, trees: list[TreeNodes], names: list[str]) -> TreeEnsemble:
        return join_trees(trees, self.leaf_map, names, self._tree_n_values, self._code_maps, self._rare_codes)

    def _damp(self, values: np.ndarray) -> np.ndarray:
        """Apply the learning rate to every node map of a tree."""
        eta = float(self.learning_rate)
        if eta == 1.0:
            return values
        out = values.copy()
        if self.leaf_map == "scale":
            out[:, 0] = np.power(np.maximum(values[:, 0], 0.0), eta)
        else:
            out[:, 0] = 1.0 + eta * (values[:, 0] - 1.0)
            out[:, 1] = eta * values[:, 1]
        return out

    def _global_loss(self, f: Any, y: Any, w: Any, valid_rows: Any, f_valid: Any) -> float:
        """The chain's global loss: MVCE for criterion "mvce", else Brier (scale) or log-loss."""
        if valid_rows is not None:
            _, _, y, w = valid_rows
            f = f_valid
        if self.criterion == "mvce":
            from gpucal.metrics import mvce

            return float(
                mvce(
                    y,
                    f,
                    sample_weight=w,
                    n_views=self.n_views,
                    bin_size=max(1, int(self.min_node_size_)),
                    p=float(self.mvce_p),
                    seed=self.seed,
                )
            )
        loss_sum, weight_sum = global_loss_sums(f, y, w, self.leaf_map)
        return loss_sum / weight_sum

    def _log(self, level: int, line: str) -> None:
        if self.verbose >= level:
            print(line, file=sys.stderr, flush=True)

    # ----------------------------------------------------------------------------------------------
    # predict

    def _predict_input(self, X: Any) -> tuple[Any, Any, SplitInput]:
        check_is_fitted(self, list(self._state_spec))
        split = split_input(X, score_col=self.score_col, feature_cols=self.feature_cols_, allow_empty=True)
        return self._codes(split, self.encoder_, self.ensemble_), self._apply_init(split.score), split

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
        codes, f, split = self._predict_input(X)
        out = predict_ensemble(self.ensemble_, codes, f)
        return wrap_output(out, split.info, output_type=self.output_type)

    def leaves(self, X: Any) -> Any:
        """Return the node each row ends in, per tree: int32 array of shape (n, n_trees) (global node ids)."""
        codes, _, _ = self._predict_input(X)
        e = self.ensemble_
        return tree_leaves(codes, e.node_feature, e.node_child_base, e.child_table, e.tree_start)

    def export_rules(self, format: str = "text", **options: Any) -> str:
        """Return the fitted trees as readable rules ("text"), JSON ("json") or a SQL expression ("sql").

        See :func:`gpucal.mbct.export.export_rules` for ``options`` (e.g. ``table=`` for SQL).
        """
        from gpucal.mbct.export import export_rules

        check_is_fitted(self, list(self._state_spec))
        return export_rules(
            self.ensemble_,
            self.encoder_,
            score_col=self.score_col,
            score_bins=self.score_bins,
            init=tuple(float(v) for v in self.init_),
            format=format,
            **options,
        )

    # ----------------------------------------------------------------------------------------------
    # Saving

    def _check_state(self) -> None:
        """Turn the loaded plain data back into an encoder and an ensemble, checking both."""
        if isinstance(self.encoder_, dict):
            self.encoder_ = FeatureEncoder.from_dict(self.encoder_)
        elif self.encoder_ is not None and not isinstance(self.encoder_, FeatureEncoder):
            msg = "encoder_: expected an encoder object or null"
            raise ValueError(msg)
        if isinstance(self.ensemble_, dict):
            self.ensemble_ = TreeEnsemble.from_dict(self.ensemble_)
        if not isinstance(self.ensemble_, TreeEnsemble):
            msg = "ensemble_: expected an ensemble object"
            raise ValueError(msg)
        if not isinstance(self.feature_cols_, list):
            msg = "feature_cols_: expected a list"
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


def fit_init_platt(rows: LogisticRows) -> tuple[float, float]:
    """Fit the global Platt map; with a single distinct score, only the offset to the mean label."""
    low, high = rows.score_range()
    if low != high:
        return fit_platt_rows(rows)
    total, label_sum = rows.label_sums()
    clip = (min(max(v, EPS), 1.0 - EPS) for v in (label_sum / total, low))
    target, base = (math.log(v) - math.log1p(-v) for v in clip)
    return 1.0, target - base


def label_moments(y: Any, w: Any) -> tuple[float, float]:
    r"""Return the rows' weight :math:`W = \sum w` and label variance :math:`\sum w (y - \bar y)^2 / W`."""
    total = float(y.shape[0] if w is None else w.sum())
    mean = float((y if w is None else w * y).sum()) / total
    return total, label_square_sum(y, w, mean) / total


def label_square_sum(y: Any, w: Any, mean: float) -> float:
    r"""Return :math:`\sum w (y - \bar y)^2` (the second pass of :func:`label_moments`)."""
    return float(((y - mean) ** 2 if w is None else w * (y - mean) ** 2).sum())


def global_loss_sums(f: Any, y: Any, w: Any, leaf_map: str) -> tuple[float, float]:
    r"""Return :math:`\sum w \ell(f, y)` and :math:`\sum w`: squared error for "scale", else log-loss."""
    xp = array_namespace(f)
    wt = xp.ones_like(f) if w is None else w
    if leaf_map == "scale":
        return float((wt * (f - y) ** 2).sum()), float(wt.sum())
    p = xp.clip(f, EPS, 1.0 - EPS)
    return float(-(wt * (y * xp.log(p) + (1.0 - y) * xp.log1p(-p))).sum()), float(wt.sum())


class ChainRows(Protocol):
    """The rows of a chain's fit (training, and validation when held out) with the current tree input.

    :class:`_ArrayChainRows` holds arrays on one device; ``gpucal.distributed.mbct`` holds dask
    partitions and adds every sum over them, so :meth:`MBCT._grow_chain` is one loop for both.
    """

    def global_loss(self) -> float:
        """Return the chain's global loss on the current input (``MBCT._global_loss``)."""

    def grow(
        self,
        n_values: np.ndarray,
        rare_codes: np.ndarray,
        config: GrowConfig,
        log: Callable[[str], None] | None,
    ) -> tuple[TreeNodes, Any]:
        """Grow a tree on the training rows; return its nodes and the node of every row (any form)."""

    def map_sums(self, leaf: Any, kind: str) -> MapSums:
        """Return ``theta -> local_map_sums`` over the training rows grouped by ``leaf``."""

    def through(self, tree: TreeEnsemble) -> ChainRows:
        """Return these rows with the input passed through ``tree`` (training and validation rows)."""


@dataclass(frozen=True)
class _ArrayChainRows:
    """:class:`ChainRows` on one device: tree codes, input, labels and weights of training rows, and of
    the validation rows (``valid_rows`` = codes, score, labels, weights; ``f_valid`` their input)."""

    model: MBCT
    codes: Any
    f: Any
    y: Any
    w: Any
    valid_rows: Any
    f_valid: Any

    def global_loss(self) -> float:
        return self.model._global_loss(self.f, self.y, self.w, self.valid_rows, self.f_valid)

    def grow(
        self,
        n_values: np.ndarray,
        rare_codes: np.ndarray,
        config: GrowConfig,
        log: Callable[[str], None] | None,
    ) -> tuple[TreeNodes, Any]:
        return grow_tree(self.codes, self.f, self.y, self.w, n_values, rare_codes, config, log=log)

    def map_sums(self, leaf: Any, kind: str) -> MapSums:
        backend = self.model._backend
        design_offset = map_design(self.f, kind)

        def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return local_map_sums(
                self.f, self.y, self.w, leaf, theta, kind, backend=backend, design_offset=design_offset
            )

        return sums

    def through(self, tree: TreeEnsemble) -> _ArrayChainRows:
        f = predict_ensemble(tree, self.codes, self.f)
        f_valid = (
            None if self.valid_rows is None else predict_ensemble(tree, self.valid_rows[0], self.f_valid)
        )
        return replace(self, f=f, f_valid=f_valid)


__all__ = ["MBCT"]

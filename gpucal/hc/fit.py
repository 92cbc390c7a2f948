r"""``fit_hc``: heterogeneous calibration fitted over any :class:`~gpucal.rows.Rows`, once for every backend.

Durfee et al. 2022, Algorithm 1 and Sec. 5 (the estimator's docstring says what gpucal chose). The steps,
each a pass over the rows where they live (one block on one machine, a block per dask partition):

1. read and check every block, mark the tree rows (:mod:`gpucal.hc.read`); check the whole data on the
   summed summaries; fit the encoder (``FeatureEncoder.fit_rows``); encode each block and cut it into
   tree rows and map rows;
2. the tree code maps from the summed weight of every code among the tree rows (rare categories pooled);
3. the trees (:func:`~gpucal.trees.grow.grow_tree_on` over
   :func:`~gpucal.trees.tree_rows.tree_store`): one label tree, a forest on Poisson(1) bootstrap
   weights drawn per *global* row (:func:`~gpucal.rows.draws.poisson_one`) with a feature subset per
   tree, or the boosted chain, each tree's maps applied to every block before the next;
4. each tree's node maps, fitted top-down from per-depth sums (:mod:`gpucal.hc.node_maps`).

On one machine this is the fit it always was: one block, the same kernels, the same additions. Over
partitions the trees and maps are those of one machine up to the order of the additions.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators.feature_platt import encoder_params
from gpucal.calibrators.logistic import EPS
from gpucal.encoding import KIND_BINS, FeatureEncoder
from gpucal.hc.node_maps import ENSEMBLE_KINDS, ensemble_values, fit_node_maps, through_tree
from gpucal.hc.read import (
    MAP,
    N_ON_GPU,
    N_TREE,
    SPLIT,
    TREE,
    TreeBlock,
    block_summary,
    encoded_sides,
    encoder_inputs,
    feature_names,
    first,
    pick,
    read_block,
    tree_codes,
)
from gpucal.kernels import gather_rows
from gpucal.rows import LabelSummary, Rows, check_held_out, poisson_one, row_uniforms
from gpucal.rows.draws import held_out_mask
from gpucal.trees.ensemble import TreeEnsemble, code_maps_from_weights, code_weights, join_trees
from gpucal.trees.grow import GrowConfig, TreeNodes, grow_tree_on
from gpucal.trees.tree_rows import tree_store


@dataclass(frozen=True)
class HCParams:
    """The estimator's parameters, validated (their meaning: ``HeterogeneousCalibrator``'s docstring)."""

    score_col: Hashable
    feature_cols: Sequence[Hashable] | str | None
    categorical_cols: Sequence[Hashable] | str | None
    n_bins: int
    interactions: Any
    min_cross_count: float
    max_cross_levels: int
    max_depth: int
    min_leaf_size: float
    criterion: str
    local_map: str
    leaf_penalty: float
    mode: str
    n_trees: int
    max_features: float | str
    tree_fraction: float
    validation_fraction: float
    seed: int
    device: str
    verbose: int


@dataclass
class HCState:
    """What a fit leaves: the estimator's fitted attributes (without their trailing ``_``)."""

    encoder: FeatureEncoder
    ensemble: TreeEnsemble
    node_params: np.ndarray
    feature_cols: list[Hashable]
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Trees:
    """The resolved tree settings of one fit: kernel backend, tree code counts, pooled codes, which
    features are ordinal."""

    backend: str
    n_values: np.ndarray
    rare_codes: np.ndarray
    ordinal: tuple[bool, ...]


def fit_hc(rows: Rows, params: HCParams, tree_rows: Rows | None = None) -> HCState:
    """Fit heterogeneous calibration on ``rows`` (blocks of ``X, y, sample_weight``); return its state.

    ``tree_rows`` (blocks of ``X_tree, y_tree, sample_weight_tree``) grow the trees when given; without
    them ``params.tree_fraction`` of ``rows`` does, and the maps are fitted on the rest.
    """
    whole = rows.single_block() is not None
    boosted = params.mode == "boosted"
    split = (params.tree_fraction, params.seed, boosted)
    role = SPLIT if tree_rows is None else MAP
    read = rows.map(
        read_block, role, params.feature_cols, params.score_col, params.device, split, whole, offsets=True
    )
    summary = read.sum(block_summary)
    LabelSummary.of(summary).check_two_classes("y")
    feature_cols = read.reduce(feature_names, first)
    on_gpu = summary[N_ON_GPU] > 0
    if tree_rows is None:
        check_held_out(int(summary[N_TREE]), int(summary[0]), params.tree_fraction, "tree_fraction")
        grow, n_tree = read, int(summary[N_TREE])
    else:
        tree_whole = tree_rows.single_block() is not None
        device = "gpu" if on_gpu else "cpu"
        args = (TREE, feature_cols, params.score_col, device, split, tree_whole)
        grow = tree_rows.map(read_block, *args, offsets=True)
        tree_summary = LabelSummary.of(grow.sum(block_summary))
        tree_summary.check_two_classes("y_tree")
        n_tree = tree_summary.n_rows
    encoder = FeatureEncoder(
        **encoder_params(params, "HeterogeneousCalibrator", rows, feature_cols, device=params.device)
    )
    encoder.fit_rows(grow, encoder_inputs)
    sides = read.map(encoded_sides, encoder, boosted)  # encoded once, cut into both sides
    cal = sides.map(pick, 1)
    tree = (sides if tree_rows is None else grow.map(encoded_sides, encoder, boosted)).map(pick, 0)
    del read, grow, sides

    n_input = np.asarray(encoder.n_codes_, dtype=np.int64)
    ordinal = tuple(kind == KIND_BINS for kind in encoder.kinds_) + (False,) * len(encoder.interactions_)
    maps, rare, counts = code_maps_from_weights(
        tree.sum(_code_weights, n_input), n_input, float(params.min_leaf_size)
    )
    # Bins keep their order: only categories are pooled (a pooled code has no place in code order).
    for j in np.flatnonzero(ordinal):
        maps[j], rare[j], counts[j] = np.arange(n_input[j], dtype=np.int32), -1, n_input[j]
    tree, cal = tree.map(tree_codes, maps, counts), cal.map(tree_codes, maps, counts)
    settings = _Trees("cuda" if on_gpu else "cpu", counts, rare, ordinal)
    fit = _Fit(params, settings)
    n_map = int(summary[0]) - (n_tree if tree_rows is None else 0)
    fit.log(1, f"HC ({params.mode}): {n_tree} tree rows, {n_map} map rows, {len(ordinal)} features")
    fit.log(1, f"  features {encoder.describe_columns()}")
    trees, node_params = fit.boosted(tree, cal) if boosted else fit.trees(tree, cal)

    names = encoder.output_names()
    kind = params.local_map
    values = (
        ensemble_values(node_params, kind)
        if kind in ENSEMBLE_KINDS
        else np.tile([1.0, 0.0], (len(node_params), 1))
    )
    offset = 0
    for nodes in trees:
        n = len(nodes.feature)
        nodes.value = list(values[offset : offset + n])
        offset += n
    ensemble = join_trees(trees, "scale" if kind == "scale" else "platt", names, counts, maps, rare)
    return HCState(encoder, ensemble, node_params, feature_cols, fit.history)


def _code_weights(block: TreeBlock, n_values: np.ndarray) -> np.ndarray:
    return code_weights(block.codes, block.w, n_values)


def bootstrap_weights(seed: int, tree: int, index: np.ndarray) -> np.ndarray:
    """Return the Poisson(1) bootstrap weights of forest tree ``tree`` for the rows at ``index`` (host).

    A row's count is a function of ``(seed, tree, index)`` alone (:mod:`gpucal.rows.draws`), so the
    partitions of a dask collection draw, from their rows' global positions, the counts one machine draws.
    """
    return poisson_one(row_uniforms(seed, tree, index))


def _bootstrapped(block: TreeBlock, seed: int, tree: int) -> TreeBlock:
    """A block's tree rows weighted by forest tree ``tree``'s bootstrap counts."""
    boot = array_namespace(block.y).asarray(bootstrap_weights(seed, tree, block.index))
    return replace(block, w=boot if block.w is None else block.w * boot)


def _divided(block: TreeBlock, share: float, seed: int, row_offset: int) -> tuple[TreeBlock, TreeBlock]:
    """The block's rows split at random (seeded, per global row among these rows): ``share`` first."""
    first_side = held_out_mask(len(block), share, seed, row_offset)
    xp = array_namespace(block.y)

    def take(at: np.ndarray) -> TreeBlock:
        codes, f, y, w = gather_rows(xp.asarray(at), block.codes, block.f, block.y, block.w)
        return TreeBlock(codes, f, y, w, block.index[at])

    return take(np.flatnonzero(first_side)), take(np.flatnonzero(~first_side))


def _n_rows(block: TreeBlock) -> np.ndarray:
    return np.array([float(len(block))])


def _loss_sums(block: TreeBlock) -> np.ndarray:
    """``[sum w * loss, sum w]`` of a block's log-loss at its ``f``."""
    xp = array_namespace(block.f)
    q = xp.clip(block.f, EPS, 1.0 - EPS)
    loss = -(block.y * xp.log(q) + (1.0 - block.y) * xp.log1p(-q))
    if block.w is None:
        return np.array([float(loss.sum()), float(loss.shape[0])])
    return np.array([float((block.w * loss).sum()), float(block.w.sum())])


def _log_loss(rows: Rows) -> float:
    total, weight = rows.sum(_loss_sums)
    return float(total) / float(weight)


class _Fit:
    """The tree loops of one fit: its parameters, tree settings, and the per-tree history it records."""

    def __init__(self, params: HCParams, settings: _Trees) -> None:
        self.params, self.settings = params, settings
        self.history: list[dict[str, Any]] = []

    def log(self, level: int, line: str) -> None:
        if self.params.verbose >= level:
            print(line, file=sys.stderr, flush=True)

    def config(self, criterion: str, mask: tuple[bool, ...] = ()) -> GrowConfig:
        leaf = float(self.params.min_leaf_size)
        return GrowConfig(
            leaf_map="shift",
            criterion=criterion,
            max_depth=self.params.max_depth,
            min_node_size=2.0 * leaf,
            min_child_size=leaf,
            penalty=float(self.params.leaf_penalty),
            n_views=1,
            mvce_bin_size=1,
            mvce_p=2.0,
            seed=self.params.seed,
            backend=self.settings.backend,
            split_mode="binary",
            ordinal=self.settings.ordinal,
            feature_mask=mask,
        )

    def grow(self, rows: Rows, config: GrowConfig) -> TreeNodes:
        log: Callable[[str], None] | None = None
        if self.params.verbose >= 2:
            log = lambda line: self.log(2, line)  # noqa: E731
        s = self.settings
        nodes, _ = grow_tree_on(tree_store(rows), s.n_values, s.rare_codes, config, log=log)
        return nodes

    def maps(self, nodes: TreeNodes, cal: Rows) -> np.ndarray:
        p = self.params
        return fit_node_maps(cal, nodes, p.local_map, float(p.leaf_penalty), self.settings.backend)

    def feature_mask(self, rng: np.random.Generator) -> tuple[bool, ...]:
        """A forest tree's features: ``max_features`` of them (or the square root of their number)."""
        d, share = len(self.settings.ordinal), self.params.max_features
        n_allowed = int(np.sqrt(d)) if share == "sqrt" else round(float(share) * d)
        chosen = rng.choice(d, size=min(d, max(1, n_allowed)), replace=False)
        mask = np.zeros(d, dtype=bool)
        mask[chosen] = True
        return tuple(bool(v) for v in mask)

    def trees(self, tree: Rows, cal: Rows) -> tuple[list[TreeNodes], np.ndarray]:
        """One label tree, or a forest of them on bootstraps and feature subsets."""
        p = self.params
        rng = np.random.default_rng(p.seed)  # the feature subsets: one draw per tree, from the seed
        trees, params = [], []
        mask: tuple[bool, ...]
        for t in range(1 if p.mode == "tree" else p.n_trees):
            start = time.perf_counter()
            grow_rows, mask = tree, ()  # every feature
            if p.mode == "forest":
                grow_rows, mask = tree.map(_bootstrapped, p.seed, t), self.feature_mask(rng)
            nodes = self.grow(grow_rows, self.config(p.criterion, mask))
            trees.append(nodes)
            params.append(self.maps(nodes, cal))
            self.record(t, nodes, start)
        return trees, np.concatenate(params)

    def divide(self, cal: Rows) -> tuple[Rows, Rows]:
        """The boosted chain's validation split of the map rows, checked like ``tree_fraction``'s."""
        p = self.params
        share = 1.0 - p.validation_fraction
        pairs = cal.map(_divided, share, p.seed + 1, offsets=True)
        fit_rows, valid = pairs.map(pick, 0), pairs.map(pick, 1)
        n_fit, n = float(fit_rows.sum(_n_rows)[0]), cal.offsets()[1]
        check_held_out(n - int(n_fit), n, p.validation_fraction)
        return fit_rows, valid

    def boosted(self, tree: Rows, cal: Rows) -> tuple[list[TreeNodes], np.ndarray]:
        """The nested composition: tree 1 by label impurity, then log-loss gain trees on the output.

        Every tree grows on the tree rows (trees 2.. on their current output) and gets its maps from
        the map rows, so no tree's maps are fitted on the rows that chose its splits; the held-out rows
        decide whether a tree stays. (Growing trees 2.. on the map rows instead, as gradient boosting
        does, kept one tree at most on Adult and make_ctr: in-sample splits fail the held-out check.)
        """
        p, backend = self.params, self.settings.backend
        fit_rows, valid = self.divide(cal) if p.validation_fraction else (cal, cal)
        loss = _log_loss(valid)
        trees: list[TreeNodes] = []
        params: list[np.ndarray] = []
        for t in range(p.n_trees):
            start = time.perf_counter()
            nodes = self.grow(tree, self.config(p.criterion if t == 0 else "gain"))
            tree_params = self.maps(nodes, fit_rows)
            valid_next = valid.map(through_tree, nodes, tree_params, p.local_map, backend)
            new_loss = _log_loss(valid_next)
            kept = t == 0 or new_loss < loss
            self.record(t, nodes, start, loss, new_loss, kept)
            if not kept:
                break
            trees.append(nodes)
            params.append(tree_params)
            tree = tree.map(through_tree, nodes, tree_params, p.local_map, backend)
            fit_rows = fit_rows.map(through_tree, nodes, tree_params, p.local_map, backend)
            valid, loss = valid_next, new_loss
        return trees, np.concatenate(params)

    def record(
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
        self.history.append(entry)
        self.log(1, f"{line} [{time.perf_counter() - start:.2f} s]")


__all__ = ["HCParams", "HCState", "bootstrap_weights", "fit_hc"]

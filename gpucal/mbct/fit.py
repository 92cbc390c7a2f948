r"""MBCT's fit, written once over :class:`~gpucal.rows.Rows`: one machine, held dask partitions, streamed.

:func:`fit_mbct` is the chain of Huang et al. (WWW 2022, Sec. 4.3) as passes over row blocks:

=====================================  ==========================================================
step                                   over the blocks
=====================================  ==========================================================
checks, encoding (codes, score bins)   ``rows.map(read_block)``: every block checked and encoded
validation split                       ``held_out_mask`` at each block's global row offset (the
                                       rows one machine holds out), then one block per machine
label moments (Eq. 13's beta)          sums of ``w``, ``w y`` (with the checks' counts), then of
                                       ``w (y - mean)^2``
tree code maps                         sum of ``code_weights``
initial Platt map                      ``fit_init_platt``: Newton steps of summed passes
trees                                  ``grow_tree_on(tree_store(rows))``
leaf refit                             ``fit_local_maps_from_sums`` of summed ``local_map_sums``
global loss                            sums of ``w * loss`` and ``w``
the chain's next values               ``predict_ensemble`` mapped over the blocks
=====================================  ==========================================================

The chain carries its own values from tree to tree (``ChainBlock.f``): probabilities for "scale" leaves,
logits for "shift" and "platt", starting from the initial map's logit (``start_values``), so a fitted
model's prediction repeats the fit's operations exactly. Trees grow on the probabilities of those values;
the leaves are refit, and the global loss read, on the same.

On one machine (one block) every sum is that block's, so the numbers are those of the arrays. Over
dask partitions only the order of the additions differs (about 1e-15 relative per sum). Identical rows
are merged (``aggregate``) on one machine only: merging is lossless, so elsewhere it would change only
that order. Criterion "mvce" needs one machine: its views are equal-count bins over a node's rows in
order, not sums.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace
from gpucal.calibrators.logistic import EPS
from gpucal.calibrators.platt import fit_platt_rows
from gpucal.calibrators.score_rows import ScoreBlock, ScoreRows
from gpucal.encoding import FeatureEncoder
from gpucal.kernels import predict_leaves
from gpucal.mbct import read
from gpucal.mbct._node_size import min_node_size
from gpucal.mbct.read import (
    ChainBlock,
    block_code_weights,
    chain_input,
    holdout_block,
    input_n_values,
    input_summary,
    join_holdout,
    label_square_sum,
    read_block,
    side,
)
from gpucal.rows import LocalRows, Rows, check_held_out
from gpucal.rows.block import check_class_weights
from gpucal.trees.aggregate import aggregate_rows
from gpucal.trees.ensemble import (
    TreeEnsemble,
    code_maps_from_weights,
    join_trees,
    predict_ensemble,
)
from gpucal.trees.grow import GrowConfig, TreeNodes, grow_tree_on
from gpucal.trees.local_maps import (
    MapSums,
    fit_local_maps_from_sums,
    flatten_map_sums,
    local_map_sums,
    logit_design,
    probabilities,
    unflatten_map_sums,
)
from gpucal.trees.tree_rows import TreeRows, tree_store

# Newton steps refitting the shift / Platt leaves of a grown tree (they start from the grown map).
N_REFIT_STEPS = 4
MVCE_ON_PARTITIONS = (
    "MBCT(criterion='mvce') has no distributed fit: MVCE's views are equal-count bins over the rows "
    "of a node in order, which are not sums over partitions. Use criterion='gain' on a dask "
    "collection, or fit on one machine."
)


@dataclass(frozen=True)
class MBCTParams:
    """MBCT's parameters, validated, with the feature columns and the array backend resolved."""

    score_col: Hashable
    feature_cols: list[Any]
    score_bins: int
    leaf_map: str
    criterion: str
    max_depth: int
    max_trees: int
    min_node_size: float | str
    alpha: float
    e: float
    min_child_size: float | str
    n_views: int
    mvce_p: float
    leaf_penalty: float
    learning_rate: float
    validation_fraction: float
    init: str
    tol: float
    aggregate: bool
    seed: int
    backend: str  # "cpu" or "cuda"
    verbose: int


@dataclass(frozen=True)
class MBCTFit:
    """What :func:`fit_mbct` returns: the estimator's fitted attributes (without the ``_``)."""

    ensemble: TreeEnsemble
    min_node_size: float
    min_child_size: float
    init: np.ndarray
    history: list[dict[str, Any]]
    interrupted: bool


def global_loss_sums(f: Any, y: Any, w: Any, leaf_map: str) -> tuple[float, float]:
    r"""Return :math:`\sum w \ell(f, y)` and :math:`\sum w`: squared error for "scale", else log-loss."""
    xp = array_namespace(f)
    wt = xp.ones_like(f) if w is None else w
    if leaf_map == "scale":
        return float((wt * (f - y) ** 2).sum()), float(wt.sum())
    p = xp.clip(f, EPS, 1.0 - EPS)
    return float(-(wt * (y * xp.log(p) + (1.0 - y) * xp.log1p(-p))).sum()), float(wt.sum())


def _probabilities(f: Any, leaf_map: str) -> Any:
    """The probabilities of a chain's values (``ChainBlock.f``): themselves for "scale", else sigmoids."""
    return f if leaf_map == "scale" else probabilities(f)


def _loss_sums(block: ChainBlock, leaf_map: str) -> np.ndarray:
    return np.array(global_loss_sums(_probabilities(block.f, leaf_map), block.y, block.w, leaf_map))


def _grow_input(block: ChainBlock, leaf_map: str) -> ChainBlock:
    """A block as trees grow on it: the probabilities of its chain values."""
    return ChainBlock(block.codes, _probabilities(block.f, leaf_map), block.y, block.w)


@dataclass(frozen=True)
class _LeafBlock:
    """A block's chain values, labels, weights and leaf (``node_idx``), with their ``logit_design``."""

    f: Any
    y: Any
    w: Any
    node_idx: Any
    design: tuple[Any, Any]


def _with_design(block: ChainBlock, kind: str, leaf: Any) -> _LeafBlock:
    """A block of chain rows grouped by ``leaf`` (the leaf of each row, in data order)."""
    return _LeafBlock(block.f, block.y, block.w, leaf, logit_design(block.f, kind))


def _with_walked_design(block: ChainBlock, kind: str, tree: TreeEnsemble) -> _LeafBlock:
    """:func:`_with_design` of a block whose rows' leaves in the one-tree ``tree`` are found by a walk."""
    return _with_design(block, kind, tree.leaves(block.codes)[:, 0])


def _map_sums(block: _LeafBlock, theta: np.ndarray, kind: str, backend: str) -> np.ndarray:
    """``local_map_sums`` of a block grouped by its rows' leaves, flattened ``[w, grad, hess]``."""
    return flatten_map_sums(
        *local_map_sums(
            block.f,
            block.y,
            block.w,
            block.node_idx,
            theta,
            kind,
            backend=backend,
            design_offset=block.design,
        )
    )


def _through(block: Any, tree: TreeEnsemble) -> ChainBlock:
    """A block's chain values passed through ``tree`` (a chain block, or a grown store's rows in node
    order): ``predict_ensemble`` from the chain's values to the chain's values."""
    f = predict_ensemble(tree, block.codes, block.f, init=None, finish=False)
    return ChainBlock(block.codes, f, block.y, block.w)


def _knows_leaves(train: Rows, leaf: Any) -> bool:
    """Whether ``leaf`` is the numpy leaf of every row of ``train``'s one block (a local CPU tree)."""
    block = train.single_block()
    return block is not None and isinstance(leaf, np.ndarray) and isinstance(block.f, np.ndarray)


def _through_leaves(block: ChainBlock, tree: TreeEnsemble, leaf: np.ndarray) -> ChainBlock:
    """``_through`` of a one-tree ``tree`` for rows whose leaf is known (no walk; the same numbers)."""
    f = predict_leaves(block.f, leaf, tree.node_value, tree.leaf_map_code)
    return ChainBlock(block.codes, f, block.y, block.w)


# --------------------------------------------------------------------------------------------------
# The initial Platt map


def fit_init_platt(rows: ScoreRows) -> tuple[float, float]:
    """Fit the global Platt map; with a single distinct score, only the offset to the mean label."""
    low, high = rows.score_range()
    if low != high:
        return fit_platt_rows(rows)
    total, label_sum = rows.label_sums()
    clip = (min(max(v, EPS), 1.0 - EPS) for v in (label_sum / total, low))
    target, base = (math.log(v) - math.log1p(-v) for v in clip)
    return 1.0, target - base


def _score_block(block: ChainBlock) -> ScoreBlock:
    """A block's training scores as the scaling fits read them (unit weights made explicit)."""
    xp = array_namespace(block.f)
    return ScoreBlock(block.f, block.y, xp.ones_like(block.f) if block.w is None else block.w)


def _score_rows(rows: Rows) -> ScoreRows:
    """The training scores as the scaling fits read them."""
    return ScoreRows.of_blocks(rows.map(_score_block))


# --------------------------------------------------------------------------------------------------
# The fit


def fit_mbct(rows: Rows, params: MBCTParams, encoder: FeatureEncoder | None) -> MBCTFit:
    """Fit MBCT's chain on ``rows`` (blocks of ``X, y, sample_weight``, :func:`gpucal.rows.as_rows`).

    Raises ``NotImplementedError`` for criterion "mvce" on rows that are not one local block.
    """
    local = rows.single_block() is not None
    if params.criterion == "mvce" and not local:
        raise NotImplementedError(MVCE_ON_PARTITIONS)
    n_values = input_n_values(encoder, params.score_bins)
    encoded = rows.map(
        read_block, params.score_col, params.feature_cols, params.score_bins, params.backend, encoder, local
    )
    split = encoded.map(holdout_block, params.validation_fraction, params.seed, offsets=True).per_worker(
        join_holdout
    )
    del encoded  # held blocks are freed once their split exists
    summary = split.sum(input_summary, n_values)
    n = int(summary[read.N_ROWS])
    if n == 0:
        msg = "X: no rows"
        raise ValueError(msg)
    check_class_weights(summary[read.N_POSITIVE] > 0, summary[read.N_NEGATIVE] > 0)
    if params.validation_fraction:
        check_held_out(int(summary[read.N_HELD]), n, params.validation_fraction)
    train = split.map(side, "train")
    valid = split.map(side, "valid") if params.validation_fraction else None
    del split
    n_train = n - int(summary[read.N_HELD])
    _log(
        params, 1, f"MBCT: {n_train} training rows, {len(n_values)} split features ({rows.n_blocks} block(s))"
    )
    if encoder is not None:
        _log(params, 1, f"  features {encoder.describe_columns()}")
    # Eq. 13 reads the label variance of the rows: before merging, whose soft labels would lower it.
    total, label_sum = float(summary[read.W_SUM]), float(summary[read.WY_SUM])
    variance = float(train.sum(label_square_sum, label_sum / total)[0]) / total
    beta, child = _resolve_sizes(params, total, variance)
    weights = summary[read.CODE_WEIGHTS :]
    # MVCE's views cut samples into bins of equal count: a merged row would be one sample of many, so
    # rows are merged for the deterministic criterion only, and on one machine (elsewhere merging
    # would change only the order of the additions).
    block = train.single_block() if local else None
    if (
        block is not None
        and params.aggregate
        and params.criterion == "gain"
        and array_namespace(block.f) is np
    ):
        merged = aggregate_rows(block.codes, block.f, block.y, block.w)
        if merged is not None:
            train = LocalRows((ChainBlock(*merged),))
            del block, merged  # the unmerged training rows are freed
            weights = train.sum(block_code_weights, n_values)
            _log(params, 1, f"  identical rows merged: {train.offsets()[1]} rows remain")
    code_maps, rare_codes, tree_n_values = code_maps_from_weights(weights, n_values, child)
    init = np.array([1.0, 0.0])
    if params.init == "platt":
        init = np.array(fit_init_platt(_score_rows(train)))
    train = train.map(chain_input, code_maps, tree_n_values, init, params.leaf_map)
    if valid is not None:
        valid = valid.map(chain_input, code_maps, tree_n_values, init, params.leaf_map)
    chain = _Chain(params, beta, child, code_maps, rare_codes, tree_n_values, encoder)
    ensemble, history, interrupted = chain.grow(train, valid)
    return MBCTFit(ensemble, beta, child, init, history, interrupted)


def _resolve_sizes(params: MBCTParams, total: float, variance: float) -> tuple[float, float]:
    """``min_node_size_`` and ``min_child_size_`` from the training weight and label variance."""
    if params.min_node_size == "auto":
        beta = float(min_node_size(total, variance, alpha=params.alpha, e=params.e))
        _log(params, 1, f"  beta (Eq. 13, alpha={params.alpha}, e={params.e}): {beta:g}")
    else:
        beta = float(params.min_node_size)
    return beta, beta if params.min_child_size == "auto" else float(params.min_child_size)


def _log(params: MBCTParams, level: int, line: str) -> None:
    if params.verbose >= level:
        print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class _Chain:
    """The trees' loop (Sec. 4.3) and what every tree shares: sizes, code maps, names."""

    params: MBCTParams
    beta: float
    child: float
    code_maps: list[np.ndarray]
    rare_codes: np.ndarray
    n_values: np.ndarray
    encoder: FeatureEncoder | None

    def grow(self, train: Rows, valid: Rows | None) -> tuple[TreeEnsemble, list[dict[str, Any]], bool]:
        """Add trees while the global loss falls, keeping those finished if interrupted."""
        p = self.params
        trees: list[TreeNodes] = []
        history: list[dict[str, Any]] = []
        interrupted = False
        config = self._grow_config()
        loss = self._global_loss(train if valid is None else valid)
        try:
            for t in range(p.max_trees):
                start = time.perf_counter()
                log = (lambda line: _log(p, 2, line)) if p.verbose >= 2 else None
                store = tree_store(train.map(_grow_input, p.leaf_map))
                nodes, leaf = grow_tree_on(store, self.n_values, self.rare_codes, config, log=log)
                del store
                values = nodes.values
                if p.leaf_map != "scale":
                    values = self._refit_leaves(self._map_sums(train, leaf, self._ensemble([nodes])), values)
                nodes.value = list(self._damp(values))
                tree = self._ensemble([nodes])
                # Held partitions of a "scale" chain: the next input is predicted on the grown stores' rows
                # (in node order), so a machine holds one copy of its rows. Otherwise on the chain's rows:
                # trees grow on probabilities, and a logit chain's values are not in the stores.
                grown = isinstance(leaf, TreeRows) and train.holds_blocks and p.leaf_map == "scale"
                if _knows_leaves(train, leaf):
                    # One block whose rows' leaves growth already found: each row takes its leaf's map.
                    next_train = train.map(_through_leaves, tree, leaf)
                else:
                    next_train = (leaf.rows if grown else train).map(_through, tree)
                next_valid = None if valid is None else valid.map(_through, tree)
                new_loss = self._global_loss(next_train if next_valid is None else next_valid)
                kept = bool(new_loss < loss - p.tol * abs(loss))
                history.append(
                    {
                        "tree": t,
                        "nodes": len(nodes.feature),
                        "loss_before": loss,
                        "loss_after": new_loss,
                        "kept": kept,
                    }
                )
                _log(
                    p,
                    1,
                    f"  tree {t + 1}: {len(nodes.feature)} nodes, depth {max(nodes.depth)}, global loss "
                    f"{loss:.6g} -> {new_loss:.6g} ({'kept' if kept else 'dropped, stop'}) "
                    f"[{time.perf_counter() - start:.2f} s]",
                )
                if not kept:
                    break
                trees.append(nodes)
                train, valid, loss = next_train, next_valid, new_loss
        except KeyboardInterrupt:
            interrupted = True
            warnings.warn(
                f"MBCT fit interrupted: keeping the {len(trees)} tree(s) finished before the interrupt",
                RuntimeWarning,
                stacklevel=4,
            )
        return self._ensemble(trees), history, interrupted

    def _grow_config(self) -> GrowConfig:
        p = self.params
        return GrowConfig(
            leaf_map="scale" if p.leaf_map == "scale" else "shift",
            criterion=p.criterion,
            max_depth=p.max_depth,
            min_node_size=self.beta,
            min_child_size=self.child,
            penalty=float(p.leaf_penalty),
            n_views=p.n_views,
            mvce_bin_size=max(1, int(self.beta // 2)),
            mvce_p=float(p.mvce_p),
            seed=p.seed,
            backend=p.backend,
        )

    def _global_loss(self, rows: Rows) -> float:
        """The chain's global loss: MVCE for criterion "mvce" (one block), else Brier (scale) or log-loss."""
        p = self.params
        if p.criterion == "mvce":
            from gpucal.metrics import mvce

            block: Any = rows.single_block()  # "mvce" fits one local block only (fit_mbct checks)
            return float(
                mvce(
                    block.y,
                    _probabilities(block.f, p.leaf_map),
                    sample_weight=block.w,
                    n_views=p.n_views,
                    bin_size=max(1, int(self.beta)),
                    p=float(p.mvce_p),
                    seed=p.seed,
                )
            )
        loss_sum, weight_sum = rows.sum(_loss_sums, p.leaf_map)
        return float(loss_sum) / float(weight_sum)

    def _map_sums(self, train: Rows, leaf: Any, tree: TreeEnsemble) -> MapSums:
        """``theta -> local_map_sums`` of the training rows grouped by ``leaf``, added over blocks (a
        store's leaves are in its own row order: the chain's rows then walk ``tree``, the grown one)."""
        kind, backend = self.params.leaf_map, self.params.backend
        grouped = (
            train.map(_with_walked_design, kind, tree)
            if isinstance(leaf, TreeRows)
            else train.map(_with_design, kind, leaf)
        )

        def sums(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return unflatten_map_sums(grouped.sum(_map_sums, theta, kind, backend), *theta.shape)

        return sums

    def _refit_leaves(self, sums: MapSums, values: np.ndarray) -> np.ndarray:
        """Refit the shift or Platt map of every node holding rows: a few Newton steps from the grown map.

        Growth fits a shift leaf with one Newton step; once the structure is fixed, ``N_REFIT_STEPS`` more
        make it the penalised maximum-likelihood value, shrunk toward the grown map by ``leaf_penalty``.
        """
        platt = self.params.leaf_map == "platt"
        params = fit_local_maps_from_sums(
            sums,
            values if platt else values[:, 1:],
            self.params.leaf_map,
            penalty=float(self.params.leaf_penalty),
            n_steps=N_REFIT_STEPS,
            tol=0.0,
        )
        out = values.copy()
        out[:, 1] = params[:, -1]
        if platt:
            out[:, 0] = params[:, 0]
        return out

    def _damp(self, values: np.ndarray) -> np.ndarray:
        """Apply the learning rate to every node map of a tree."""
        eta = float(self.params.learning_rate)
        if eta == 1.0:
            return values
        out = values.copy()
        if self.params.leaf_map == "scale":
            out[:, 0] = np.power(np.maximum(values[:, 0], 0.0), eta)
        else:
            out[:, 0] = 1.0 + eta * (values[:, 0] - 1.0)
            out[:, 1] = eta * values[:, 1]
        return out

    def _ensemble(self, trees: list[TreeNodes]) -> TreeEnsemble:
        p = self.params
        names = ([] if self.encoder is None else self.encoder.output_names()) + (
            [f"{p.score_col} bin"] if p.score_bins else []
        )
        return join_trees(trees, p.leaf_map, names, self.n_values, self.code_maps, self.rare_codes)


__all__ = ["MBCTFit", "MBCTParams", "fit_init_platt", "fit_mbct", "global_loss_sums"]

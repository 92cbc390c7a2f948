r"""The chain a rule writer reads: its split features (encoder columns and the score bin), the input codes
each child of a node receives, and the chain's formula (the model of :mod:`gpucal.rules`)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal.encoding import KIND_BINS

if TYPE_CHECKING:
    from gpucal.encoding import FeatureEncoder
    from gpucal.trees.ensemble import TreeEnsemble

KIND_SCORE = "score_bins"
# The probability clip before a logit: float64's machine epsilon, as in gpucal.calibrators.logistic
# (its value is part of the rules' formula, so it is written here rather than read from a method).
EPS = float(np.finfo(np.float64).eps)
# The logits of EPS and 1 - EPS, the range of a logit chain's first value l_0.
LOGIT_LOW = math.log(EPS / (1.0 - EPS))
LOGIT_HIGH = math.log((1.0 - EPS) / (1.0 - (1.0 - EPS)))
# Significant digits of map parameters and weights in the text rules when ``precision`` is None.
TEXT_DIGITS = 6


@dataclass(frozen=True)
class SplitFeature:
    """One split feature of the chain: an encoder column or the score bin."""

    index: int
    column: Hashable  # the raw column the rules read
    label: str  # the name printed in text rules
    kind: str  # KIND_BINS, "values" or KIND_SCORE
    n_regular: int  # codes before the missing code (bins, categories, score bins)
    code_map: np.ndarray  # input code -> tree code (the ensemble's code_maps[index])
    edges: np.ndarray | None = None
    categories: tuple[Any, ...] = ()
    missing_code: int = -1  # -1: the feature has none (the score bin)
    unseen_code: int = -1  # -1: none (numbers; categories with handle_unseen="missing")
    unseen_is_missing: bool = False  # categories with handle_unseen="missing"


@dataclass(frozen=True)
class RuleChain:
    """Everything a writer needs."""

    ens: TreeEnsemble
    features: list[SplitFeature]
    score_col: Hashable
    score_bins: int
    init: tuple[float, float]
    precision: int | None

    def formula(self) -> list[str]:
        return chain_formula(
            self.ens.leaf_map, self.ens.n_trees, self.init, str(self.score_col), self.score_bins
        )


@dataclass(frozen=True)
class CodeSet:
    """The codes a child receives, split into regular codes and the two special ones."""

    regular: list[int]
    missing: bool
    unseen: bool


def describe_features(
    ensemble: TreeEnsemble, encoder: FeatureEncoder | None, *, score_col: Hashable, score_bins: int
) -> list[SplitFeature]:
    """Return the chain's split features (encoder columns, then the score bin), checked against the codes.

    ``encoder`` None means no feature column; ``score_bins`` 0 means no score-bin feature. Raises
    ``ValueError`` when the ensemble's ``code_maps`` do not take the encoder's codes and the score bins
    (the rules would read the wrong codes).
    """
    names = [] if encoder is None else list(encoder.feature_names_)
    n_input = [] if encoder is None else [int(k) for k in encoder.n_values_]
    if score_bins:
        n_input.append(int(score_bins))
    found = [len(m) for m in ensemble.code_maps]
    if found != n_input or len(ensemble.feature_names) != len(n_input):
        msg = (
            f"ensemble: its code maps take {found} input codes per feature, but the encoder and "
            f"score_bins give {n_input}"
        )
        raise ValueError(msg)
    unseen_is_missing = getattr(encoder, "handle_unseen", "separate") == "missing"
    features = []
    if encoder is not None:
        for j, name in enumerate(names):
            cmap = np.asarray(ensemble.code_maps[j], dtype=np.int64)
            missing, unseen = int(encoder.missing_codes_[j]), int(encoder.unseen_codes_[j])
            if encoder.kinds_[j] == KIND_BINS:
                edges = np.asarray(encoder.bin_edges_[name], dtype=np.float64)
                feature = SplitFeature(
                    j, name, str(name), KIND_BINS, len(edges) + 1, cmap, edges=edges, missing_code=missing
                )
            else:
                raw: Any = encoder.categories_[name]
                cats = tuple(v.item() if isinstance(v, np.generic) else v for v in raw)
                feature = SplitFeature(
                    j,
                    name,
                    str(name),
                    "values",
                    len(cats),
                    cmap,
                    categories=cats,
                    missing_code=missing,
                    unseen_code=unseen,
                    unseen_is_missing=unseen_is_missing,
                )
            features.append(feature)
    if score_bins:
        cmap = np.asarray(ensemble.code_maps[len(names)], dtype=np.int64)
        features.append(
            SplitFeature(len(names), score_col, f"{score_col} bin", KIND_SCORE, int(score_bins), cmap)
        )
    return features


def node_children(
    ensemble: TreeEnsemble, features: list[SplitFeature], node: int
) -> list[tuple[int, list[int]]]:
    """Return ``[(child, input codes routed to it), ...]`` of a split node by smallest code ([] for a leaf).

    The trees read tree codes (``code_maps``); the rules speak of the input codes, the encoder's.
    """
    j = int(ensemble.node_feature[node])
    if j < 0:
        return []
    base = int(ensemble.node_child_base[node])
    child_of_input = ensemble.child_table[base + features[j].code_map].tolist()
    out: dict[int, list[int]] = {}
    for code, child in enumerate(child_of_input):
        if child >= 0:
            out.setdefault(child, []).append(code)
    return list(out.items())


def stop_codes(ensemble: TreeEnsemble, features: list[SplitFeature], node: int) -> list[int]:
    """Input codes that stop at a split node (child -1: no training row of the node had them)."""
    j = int(ensemble.node_feature[node])
    base = int(ensemble.node_child_base[node])
    return np.flatnonzero(ensemble.child_table[base + features[j].code_map] < 0).tolist()


def code_set(feature: SplitFeature, codes: Sequence[int]) -> CodeSet:
    """Split a child's codes into regular codes, missing and unseen (unseen follows missing when merged)."""
    missing = feature.missing_code >= 0 and feature.missing_code in codes
    unseen = (feature.unseen_code >= 0 and feature.unseen_code in codes) or (
        feature.unseen_is_missing and missing
    )
    return CodeSet(sorted(c for c in codes if c < feature.n_regular), missing, unseen)


def code_runs(codes: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted codes as inclusive runs ``[(lo, hi), ...]`` of consecutive codes."""
    runs: list[tuple[int, int]] = []
    for c in sorted(codes):
        if runs and runs[-1][1] == c - 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return runs


def bin_edges(feature: SplitFeature) -> np.ndarray:
    """The cut points of a binned feature (empty for any other)."""
    return np.empty(0) if feature.edges is None else feature.edges


def number_text(x: float, precision: int | None) -> str:
    """A number for text: ``repr`` (round-trips) or ``precision`` significant digits."""
    x = float(x)
    return repr(x) if precision is None else f"{x:.{precision}g}"


def rounded(x: float, precision: int | None) -> float:
    return float(x) if precision is None else float(f"{float(x):.{precision}g}")


def chain_formula(leaf_map: str, n_trees: int, init: tuple[float, float], score: str, n: int) -> list[str]:
    """The formula of the chain, one step a line."""
    lines = [f"score bin = min(floor({score} * {n}), {n - 1})"] if n else []
    platt_init = f"a0 = {init[0]!r}, b0 = {init[1]!r}"
    if leaf_map == "scale":
        if init == (1.0, 0.0):
            lines.append(f"f_0 = {score}")
        else:
            lines.append(f"f_0 = sigmoid(a0 * logit(clip({score}, eps, 1 - eps)) + b0), {platt_init}")
        lines.append("tree t: f_t = min(k * f_(t-1), 1), k of the rule the row meets")
        lines.append(f"calibrated = f_{n_trees}")
    else:
        if init == (1.0, 0.0):
            lines.append(f"l_0 = logit(clip({score}, eps, 1 - eps)), logit(p) = ln(p / (1 - p))")
        else:
            lines.append(
                f"l_0 = clip(a0 * logit(clip({score}, eps, 1 - eps)) + b0, -logit(1 - eps), logit(1 - eps)), "
                f"logit(p) = ln(p / (1 - p)), {platt_init}"
            )
        step = "l_(t-1) + shift" if leaf_map == "shift" else "a * l_(t-1) + b"
        lines.append(f"tree t: l_t = {step}, the map of the rule the row meets")
        lines.append(f"calibrated = sigmoid(l_{n_trees}) = 1 / (1 + exp(-l_{n_trees}))")
    lines.append(f"eps = {EPS!r}")
    return lines


__all__ = [
    "EPS",
    "KIND_SCORE",
    "LOGIT_HIGH",
    "LOGIT_LOW",
    "TEXT_DIGITS",
    "CodeSet",
    "RuleChain",
    "SplitFeature",
    "bin_edges",
    "chain_formula",
    "code_runs",
    "code_set",
    "describe_features",
    "node_children",
    "number_text",
    "rounded",
    "stop_codes",
]

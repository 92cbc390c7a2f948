"""The rules as a JSON document (the schema in :mod:`gpucal.rules`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal.encoding import KIND_BINS
from gpucal.rules.chain import (
    EPS,
    RuleChain,
    SplitFeature,
    bin_edges,
    code_runs,
    code_set,
    node_children,
    rounded,
)

if TYPE_CHECKING:
    from gpucal.encoding import FeatureEncoder

RULES_FORMAT = "gpucal.MBCT.rules"
RULES_VERSION = 1


def _json_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if not isinstance(v, str | int | float | bool):
        msg = f"category {v!r} of type {type(v).__name__} cannot be written as JSON (str/int/float/bool)"
        raise TypeError(msg)
    return v


def _json_column(name: Hashable) -> Any:
    return name if isinstance(name, str | int) and not isinstance(name, bool) else str(name)


def _json_condition(feature: SplitFeature, codes: Sequence[int], precision: int | None) -> dict[str, Any]:
    cs = code_set(feature, codes)
    out: dict[str, Any] = {"feature": feature.index, "column": _json_column(feature.column)}
    if feature.kind == "values":
        out["values"] = [_json_value(feature.categories[c]) for c in cs.regular]
        out["missing"], out["unseen"] = cs.missing, cs.unseen
    elif feature.kind == KIND_BINS:
        edges = bin_edges(feature)
        out["intervals"] = [
            [
                None if lo == 0 else rounded(edges[lo - 1], precision),
                None if hi == len(edges) else rounded(edges[hi], precision),
            ]
            for lo, hi in code_runs(cs.regular)
        ]
        out["missing"] = cs.missing
    else:
        out["bins"] = [[lo, hi] for lo, hi in code_runs(cs.regular)]
    return out


def rules_dict(chain: RuleChain, encoder: FeatureEncoder | None) -> dict[str, Any]:
    """The JSON document of ``chain`` (version ``RULES_VERSION``)."""
    ensemble, features, precision = chain.ens, chain.features, chain.precision
    handle = "missing" if getattr(encoder, "handle_unseen", "separate") == "missing" else "separate"
    feats: list[dict[str, Any]] = []
    for f in features:
        entry: dict[str, Any] = {"column": _json_column(f.column), "kind": f.kind}
        if f.kind == "values":
            entry["categories"] = [_json_value(v) for v in f.categories]
            entry["unseen"] = handle
        elif f.kind == KIND_BINS:
            entry["edges"] = [rounded(e, precision) for e in bin_edges(f)]
        else:
            entry["bins"] = f.n_regular
        feats.append(entry)

    def node_dict(node: int, condition: dict[str, Any] | None) -> dict[str, Any]:
        a, b = (float(v) for v in ensemble.node_value[node])
        children = []
        if int(ensemble.node_feature[node]) >= 0:
            feature = features[int(ensemble.node_feature[node])]
            for child, codes in node_children(ensemble, features, node):
                children.append(node_dict(child, _json_condition(feature, codes, precision)))
        return {
            "id": node,
            "condition": condition,
            "map": {"a": rounded(a, precision), "b": rounded(b, precision)},
            "weight": float(ensemble.node_weight[node]),
            "children": children,
        }

    return {
        "format": RULES_FORMAT,
        "version": RULES_VERSION,
        "leaf_map": ensemble.leaf_map,
        "formula": "; ".join(chain.formula()),
        "eps": EPS,
        "init": {"a": chain.init[0], "b": chain.init[1]},
        "score": {"column": _json_column(chain.score_col), "bins": chain.score_bins},
        "features": feats,
        "trees": [node_dict(int(ensemble.tree_start[t]), None) for t in range(ensemble.n_trees)],
    }


# --------------------------------------------------------------------------------------------------
# SQL


__all__ = ["RULES_FORMAT", "RULES_VERSION", "rules_dict"]

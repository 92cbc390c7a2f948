"""The rules as indented if-then text, and the words for a node's condition, map and weight (also what
:mod:`gpucal.plot.trees` prints in its boxes)."""

from __future__ import annotations

from collections.abc import Sequence

from gpucal.encoding import KIND_BINS
from gpucal.rules.chain import (
    KIND_SCORE,
    TEXT_DIGITS,
    RuleChain,
    SplitFeature,
    bin_edges,
    code_runs,
    code_set,
    node_children,
    number_text,
    stop_codes,
)


def condition_text(feature: SplitFeature, codes: Sequence[int], precision: int | None = None) -> str:
    """Describe in words which values a code set holds, e.g. ``site_id in {'a', 'b'} or missing``."""
    cs = code_set(feature, codes)
    parts: list[str] = []
    if feature.kind == "values":
        if cs.regular:
            parts.append("{" + ", ".join(repr(feature.categories[c]) for c in cs.regular) + "}")
    elif feature.kind == KIND_BINS and len(cs.regular) == feature.n_regular:
        parts.append("")  # every number: said below as "is not missing"
    elif cs.regular:
        intervals = [_interval_text(feature, lo, hi, precision) for lo, hi in code_runs(cs.regular)]
        parts.append(" or ".join(intervals))
    special = [word for word, flag in (("missing", cs.missing), ("unseen", cs.unseen)) if flag]
    if not parts:
        return f"{feature.label} is " + " or ".join(special)
    if not parts[0]:
        return f"{feature.label} is a number or missing" if special else f"{feature.label} is not missing"
    head = f"{feature.label} in {parts[0]}"
    return " or ".join([head, *special])


def _interval_text(feature: SplitFeature, lo: int, hi: int, precision: int | None) -> str:
    """The interval of bins ``lo..hi``: ``[lower, upper)`` with ``inf]`` for the last bin."""
    if feature.kind == KIND_SCORE:
        n = feature.n_regular
        digits = TEXT_DIGITS if precision is None else precision
        upper = "1]" if hi == n - 1 else f"{(hi + 1) / n:.{digits}g})"
        return f"[{lo / n:.{digits}g}, {upper}"
    edges = bin_edges(feature)
    lower = "-inf" if lo == 0 else number_text(edges[lo - 1], precision)
    upper = "inf]" if hi == len(edges) else number_text(edges[hi], precision) + ")"
    return f"[{lower}, {upper}"


def map_text(leaf_map: str, a: float, b: float, precision: int | None = None) -> str:
    """A node's map in words: ``k = 1.2`` (scale), ``shift = +0.3``, or ``a = 1.1, b = -0.2`` (platt)."""
    digits = TEXT_DIGITS if precision is None else precision
    if leaf_map == "scale":
        return f"k = {a:.{digits}g}"
    if leaf_map == "shift":
        return f"shift = {b:+.{digits}g}"
    return f"a = {a:.{digits}g}, b = {b:+.{digits}g}"


def weight_text(weight: float, precision: int | None = None) -> str:
    """``rows 1520`` for an integer weight, else ``weight 12.5``."""
    weight = float(weight)
    if weight.is_integer():
        return f"rows {int(weight)}"
    return f"weight {weight:.{TEXT_DIGITS if precision is None else precision}g}"


class TextWriter:
    """Write the rules of a chain as text: the formula, then each tree's nested conditions."""

    def __init__(self, chain: RuleChain) -> None:
        self.chain, self.ens, self.features, self.precision = (
            chain,
            chain.ens,
            chain.features,
            chain.precision,
        )

    def _map(self, node: int) -> str:
        a, b = (float(v) for v in self.ens.node_value[node])
        return map_text(self.ens.leaf_map, a, b, self.precision)

    def _weight(self, node: int) -> str:
        return weight_text(self.ens.node_weight[node], self.precision)

    def write(self) -> str:
        ens = self.ens
        lines = [f'Calibration tree rules: {ens.n_trees} tree(s), leaf map "{ens.leaf_map}"']
        lines += ["  " + line for line in self.chain.formula()]
        lines.append(
            "  'otherwise': values that no training row of the node had; 'unseen': categories new since fit"
        )
        for t in range(ens.n_trees):
            root = int(ens.tree_start[t])
            lines.append(f"tree {t + 1}")
            if int(ens.node_feature[root]) < 0:
                lines.append(f"  all rows: {self._map(root)} ({self._weight(root)})")
            else:
                self._node(root, 1, lines)
        return "\n".join(lines) + "\n"

    def _node(self, node: int, depth: int, lines: list[str]) -> None:
        ens, indent = self.ens, "  " * depth
        feature = self.features[int(ens.node_feature[node])]
        for child, codes in node_children(ens, self.features, node):
            cond = condition_text(feature, codes, self.precision)
            if int(ens.node_feature[child]) < 0:
                lines.append(f"{indent}if {cond}: {self._map(child)} ({self._weight(child)})")
            else:
                lines.append(f"{indent}if {cond}:")
                self._node(child, depth + 1, lines)
        stopped = stop_codes(ens, self.features, node)
        if stopped:
            which = condition_text(feature, stopped, self.precision)
            lines.append(f"{indent}otherwise ({which}): {self._map(node)} (node map, {self._weight(node)})")


__all__ = ["TextWriter", "condition_text", "map_text", "weight_text"]

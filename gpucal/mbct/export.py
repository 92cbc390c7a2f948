r"""Export a fitted MBCT chain as if-then rules: readable text, JSON, or one SQL expression.

The paper serves its trees online as plain if-then rules (Huang et al. 2022, App. A.2); this module
writes the rules of a :class:`~gpucal.partition.ensemble.TreeEnsemble` in three forms, each computing
exactly what the Python predictor computes.

The model
---------
Feature ``j < len(encoder.feature_names_)`` is the encoder's column ``j`` (its codes as
:meth:`gpucal.encoding.FeatureEncoder.transform` gives them); the last feature (unless
``score_bins = 0``) is the score bin

.. math::

    \operatorname{bin}(s) = \min(\lfloor s N \rfloor, N - 1), \qquad N = \texttt{score\_bins},

of the original score column. The trees read these input codes through ``ensemble.code_maps`` (rare
codes share one tree code); the rules are written in input codes, i.e. in the raw values.

With ``init = (a_0, b_0) != (1, 0)`` a global Platt map comes first,
:math:`f_0 = \sigma(a_0 \operatorname{logit}(\operatorname{clip}(s, \epsilon, 1 - \epsilon)) + b_0)`,
else :math:`f_0 = s`; :math:`\epsilon` is float64's machine epsilon, as in
:mod:`gpucal.calibrators._logistic`. Each tree ``t`` then sends the row from its root down to the
deepest node it reaches (it stops at a leaf, or at a node whose training rows never had the row's
value of the split feature) and applies that node's map :math:`(a, b)`:

- ``"scale"``: :math:`f_t = \min(a f_{t-1}, 1)`; the output is :math:`f_T`;
- ``"shift"`` / ``"platt"``: :math:`l_0 = \operatorname{logit}(\operatorname{clip}(f_0, \epsilon,
  1 - \epsilon))`, :math:`l_t = a l_{t-1} + b` (``a = 1`` for shift); the output is
  :math:`\sigma(l_T) = 1 / (1 + e^{-l_T})`.

Formats
-------
``"text"``
    Indented if-then rules per tree, the chain's formula on top. Numeric bins read as the intervals of
    :meth:`~gpucal.encoding.FeatureEncoder.describe_codes` (neighbouring bins merged), categories as
    their values; ``missing`` and ``unseen`` (a category no fit row had) are named as such.
    ``otherwise`` gives the map of rows that stop at a split node.
``"json"``
    A nested structure that any language can evaluate (schema below).
``"sql"``
    One SQL expression over the raw columns (standard SQL: SQLite >= 3.35 and DuckDB run it, and
    nothing in it is specific to either); with ``table``, a whole ``SELECT``. Every number is written as
    an exact binary fraction (``CAST(m AS DOUBLE PRECISION) / 2^k``, the decimal value in a comment):
    engines do not all read decimal literals to the nearest double (SQLite 3.40 misreads about 1 in
    35,000 of Python's shortest ``repr`` strings). Numeric bins are comparisons matching ``transform``'s
    rule (bin ``b`` holds ``edges[b-1] <= x < edges[b]``: a value on an edge goes to the upper bin). The
    score bin is compared as ``score * N >= lo AND score * N < hi + 1``: the same IEEE product as numpy,
    and equal to ``floor`` with no ``CAST`` (which truncates in SQLite but rounds in DuckDB). A category
    seen at fit is ``col IN (...)``, an unseen one ``col NOT IN (<all fitted categories>)``, a missing
    one ``col IS NULL``. Each tree is one nested ``CASE`` choosing the map parameter of the node a row
    stops at; the trees' ``CASE`` expressions sit side by side as the columns of one derived table, and
    the chain is arithmetic on those columns (see :class:`_SqlWriter`), so the nesting depth does not
    grow with the number of trees (SQLite before 3.46 parses with a fixed 100-entry stack, which about
    six nested subqueries or a dozen tree levels exhaust). With ``leaf_map="scale"`` and
    ``init=(1, 0)`` the expression gives the Python predictions back bit for bit; the other maps need
    ``EXP`` and ``LN`` and agree to rounding (1e-12, usually exactly).

JSON schema (version 1)
-----------------------
::

    {"format": "gpucal.MBCT.rules", "version": 1,
     "leaf_map": "scale" | "shift" | "platt",
     "formula": "<the chain in words>", "eps": 2.220446049250313e-16,
     "init": {"a": a0, "b": b0},                      # identity when a0 = 1 and b0 = 0
     "score": {"column": "score", "bins": N},         # bin = min(floor(score * N), N - 1)
     "features": [                                    # in code order; the score bin last
        {"column": "site_id", "kind": "values", "categories": [...], "unseen": "separate" | "missing"},
        {"column": "age", "kind": "bins", "edges": [...]},
        {"column": "score", "kind": "score_bins", "bins": N}],
     "trees": [node, ...]}                            # tree t's root
    node = {"id": global node id, "condition": null (a root) or condition,
            "map": {"a": a, "b": b}, "weight": training weight, "children": [node, ...]}
    condition, by the split feature's kind (feature = index into "features"):
      values:     {"feature": j, "column": c, "values": [v, ...], "missing": bool, "unseen": bool}
      bins:       {"feature": j, "column": c, "intervals": [[lo, hi], ...], "missing": bool}
                  (lo <= x < hi; null lo / hi stand for -inf / +inf)
      score_bins: {"feature": j, "column": c, "bins": [[lo, hi], ...]}  (lo <= bin <= hi)

To evaluate: at a node, the row goes to the one child whose condition holds, or stops at the node if
none does (or it has no children). A value is *missing* when it is null (or NaN); a category value is
*unseen* when it is not missing and not among the feature's ``categories`` (with ``"unseen":
"missing"``, such values count as missing, and the conditions that hold for missing ones say
``"unseen": true`` as well). Apply the map of the node the row stops at, tree after tree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal.calibrators._logistic import EPS
from gpucal.encoding import KIND_BINS

if TYPE_CHECKING:
    from gpucal.encoding import FeatureEncoder
    from gpucal.partition.ensemble import TreeEnsemble

EXPORT_FORMATS = ("text", "json", "sql")
RULES_FORMAT = "gpucal.MBCT.rules"
RULES_VERSION = 1
KIND_SCORE = "score_bins"
# Significant digits of map parameters and weights in the text rules when ``precision`` is None.
TEXT_DIGITS = 6
# Largest power of two written as one integer literal (int64 holds 2**62 with room to spare).
_MAX_POW2 = 62


@dataclass(frozen=True)
class _Feature:
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
class _Chain:
    """Everything a writer needs."""

    ens: TreeEnsemble
    features: list[_Feature]
    score_col: Hashable
    score_bins: int
    init: tuple[float, float]
    precision: int | None

    def formula(self) -> list[str]:
        return _chain_lines(
            self.ens.leaf_map, self.ens.n_trees, self.init, str(self.score_col), self.score_bins
        )


@dataclass(frozen=True)
class _CodeSet:
    """The codes a child receives, split into regular codes and the two special ones."""

    regular: list[int]
    missing: bool
    unseen: bool


def export_rules(
    ensemble: TreeEnsemble,
    encoder: FeatureEncoder | None,
    *,
    score_col: Hashable,
    score_bins: int,
    init: Sequence[float] = (1.0, 0.0),
    format: str = "text",
    table: str | None = None,
    precision: int | None = None,
) -> str:
    r"""Write a fitted MBCT chain as text rules, JSON, or one SQL expression.

    Parameters
    ----------
    ensemble : TreeEnsemble
        The fitted trees; ``ensemble.feature_names`` are the encoder's columns and then the score bin.
    encoder : FeatureEncoder or None
        The fitted encoder whose codes the trees split on (through ``ensemble.code_maps``); None when the
        trees split on the score bin only.
    score_col : hashable
        The raw score column (probabilities in [0, 1]).
    score_bins : int
        Number of score bins :math:`N`: :math:`\min(\lfloor s N \rfloor, N - 1)`; 0 when the trees do not
        split on the score.
    init : (float, float), default (1.0, 0.0)
        ``(a0, b0)`` of the global Platt map applied to the score before the trees; ``(1, 0)`` is none.
    format : {"text", "json", "sql"}, default "text"
        See the module docstring.
    table : str, optional
        SQL only: return ``SELECT *, <expression> AS calibrated FROM <table>`` instead of the bare
        expression. The name is inserted as written, so it may be schema-qualified or quoted.
    precision : int, optional
        Significant digits of the numbers written. None (default) writes every number so that it
        reads back as the same float64 (``repr`` in JSON and for bin edges in text; exact binary
        fractions in SQL), except the map parameters and weights of the text rules, which get
        ``TEXT_DIGITS`` (6). An integer rounds every number of every format, so JSON and SQL no
        longer reproduce the model exactly.

    Returns
    -------
    str
        The rules.

    Raises
    ------
    ValueError
        An unknown format, ``table`` without ``format="sql"``, a bad ``precision``, ``score_bins``
        or ``init``, or an ensemble whose features do not match the encoder's codes.

    Notes
    -----
    SQL: a missing value must be ``NULL``. SQLite stores a NaN as ``NULL`` by itself; DuckDB and
    PostgreSQL keep NaN as a number greater than every other, so convert first (``NULLIF`` or
    ``CASE WHEN isnan(x)``). ``EXP`` and ``LN`` (needed unless ``leaf_map="scale"`` with
    ``init=(1, 0)``) are SQLite's math functions, built into the Python ``sqlite3`` module of most
    builds since SQLite 3.35; on a build without them, register them before running the query::

        connection.create_function("exp", 1, math.exp, deterministic=True)
        connection.create_function("ln", 1, math.log, deterministic=True)

    SQLite before 3.46 parses with a fixed stack that a tree about a dozen levels deep overflows
    ("parser stack overflow"); the number of trees does not matter (they are not nested).

    Examples
    --------
    >>> sql = export_rules(model.ensemble_, model.encoder_, score_col="score", score_bins=100,
    ...                    format="sql", table="events")  # doctest: +SKIP
    >>> rows = sqlite3.connect("events.db").execute(sql).fetchall()  # doctest: +SKIP
    """
    if format not in EXPORT_FORMATS:
        msg = (
            f"The 'format' parameter of export_rules must be one of {EXPORT_FORMATS}. Got {format!r} instead."
        )
        raise ValueError(msg)
    if table is not None and format != "sql":
        msg = f"table: only used with format='sql' (got format={format!r})"
        raise ValueError(msg)
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, int) or precision < 1
    ):
        msg = (
            "The 'precision' parameter of export_rules must be an int in [1, inf) or None. "
            f"Got {precision!r} instead."
        )
        raise ValueError(msg)
    if isinstance(score_bins, bool) or not isinstance(score_bins, int | np.integer) or score_bins < 0:
        msg = "The 'score_bins' parameter of export_rules must be an int in [0, inf). "
        msg += f"Got {score_bins!r} instead."
        raise ValueError(msg)
    a0, b0 = _check_init(init)
    features = describe_features(ensemble, encoder, score_col=score_col, score_bins=int(score_bins))
    chain = _Chain(ensemble, features, score_col, int(score_bins), (a0, b0), precision)
    if format == "text":
        return _TextWriter(chain).write()
    if format == "json":
        return json.dumps(_rules_dict(chain, encoder), indent=1)
    expr = _SqlWriter(chain).write()
    if table is None:
        return expr
    return f"SELECT *,\n{expr} AS calibrated\nFROM {table}"


def _check_init(init: Sequence[float]) -> tuple[float, float]:
    try:
        a0, b0 = (float(v) for v in init)
    except (TypeError, ValueError):
        msg = f"init: expected a pair of numbers (a, b), got {init!r}"
        raise ValueError(msg) from None
    if not (math.isfinite(a0) and math.isfinite(b0)):
        msg = f"init: expected finite numbers, got {init!r}"
        raise ValueError(msg)
    return a0, b0


def describe_features(
    ensemble: TreeEnsemble, encoder: FeatureEncoder | None, *, score_col: Hashable, score_bins: int
) -> list[_Feature]:
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
                feature = _Feature(
                    j, name, str(name), KIND_BINS, len(edges) + 1, cmap, edges=edges, missing_code=missing
                )
            else:
                raw: Any = encoder.categories_[name]
                cats = tuple(v.item() if isinstance(v, np.generic) else v for v in raw)
                feature = _Feature(
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
            _Feature(len(names), score_col, f"{score_col} bin", KIND_SCORE, int(score_bins), cmap)
        )
    return features


def node_children(ensemble: TreeEnsemble, features: list[_Feature], node: int) -> list[tuple[int, list[int]]]:
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


def stop_codes(ensemble: TreeEnsemble, features: list[_Feature], node: int) -> list[int]:
    """Input codes that stop at a split node (child -1: no training row of the node had them)."""
    j = int(ensemble.node_feature[node])
    base = int(ensemble.node_child_base[node])
    return np.flatnonzero(ensemble.child_table[base + features[j].code_map] < 0).tolist()


def _code_set(feature: _Feature, codes: Sequence[int]) -> _CodeSet:
    """Split a child's codes into regular codes, missing and unseen (unseen follows missing when merged)."""
    missing = feature.missing_code >= 0 and feature.missing_code in codes
    unseen = (feature.unseen_code >= 0 and feature.unseen_code in codes) or (
        feature.unseen_is_missing and missing
    )
    return _CodeSet(sorted(c for c in codes if c < feature.n_regular), missing, unseen)


def _runs(codes: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted codes as inclusive runs ``[(lo, hi), ...]`` of consecutive codes."""
    runs: list[tuple[int, int]] = []
    for c in sorted(codes):
        if runs and runs[-1][1] == c - 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return runs


def _edges(feature: _Feature) -> np.ndarray:
    """The cut points of a binned feature (empty for any other)."""
    return np.empty(0) if feature.edges is None else feature.edges


def _fmt(x: float, precision: int | None) -> str:
    """A number for text: ``repr`` (round-trips) or ``precision`` significant digits."""
    x = float(x)
    return repr(x) if precision is None else f"{x:.{precision}g}"


def _rounded(x: float, precision: int | None) -> float:
    return float(x) if precision is None else float(f"{float(x):.{precision}g}")


# --------------------------------------------------------------------------------------------------
# Text


def condition_text(feature: _Feature, codes: Sequence[int], precision: int | None = None) -> str:
    """Describe in words which values a code set holds, e.g. ``site_id in {'a', 'b'} or missing``."""
    cs = _code_set(feature, codes)
    parts: list[str] = []
    if feature.kind == "values":
        if cs.regular:
            parts.append("{" + ", ".join(repr(feature.categories[c]) for c in cs.regular) + "}")
    elif feature.kind == KIND_BINS and len(cs.regular) == feature.n_regular:
        parts.append("")  # every number: said below as "is not missing"
    elif cs.regular:
        intervals = [_interval_text(feature, lo, hi, precision) for lo, hi in _runs(cs.regular)]
        parts.append(" or ".join(intervals))
    special = [word for word, flag in (("missing", cs.missing), ("unseen", cs.unseen)) if flag]
    if not parts:
        return f"{feature.label} is " + " or ".join(special)
    if not parts[0]:
        return f"{feature.label} is a number or missing" if special else f"{feature.label} is not missing"
    head = f"{feature.label} in {parts[0]}"
    return " or ".join([head, *special])


def _interval_text(feature: _Feature, lo: int, hi: int, precision: int | None) -> str:
    """The interval of bins ``lo..hi``: ``[lower, upper)`` with ``inf]`` for the last bin."""
    if feature.kind == KIND_SCORE:
        n = feature.n_regular
        digits = TEXT_DIGITS if precision is None else precision
        upper = "1]" if hi == n - 1 else f"{(hi + 1) / n:.{digits}g})"
        return f"[{lo / n:.{digits}g}, {upper}"
    edges = _edges(feature)
    lower = "-inf" if lo == 0 else _fmt(edges[lo - 1], precision)
    upper = "inf]" if hi == len(edges) else _fmt(edges[hi], precision) + ")"
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


def _chain_lines(leaf_map: str, n_trees: int, init: tuple[float, float], score: str, n: int) -> list[str]:
    """The formula of the chain, one step a line."""
    lines = [f"score bin = min(floor({score} * {n}), {n - 1})"] if n else []
    if init == (1.0, 0.0):
        lines.append(f"f_0 = {score}")
    else:
        lines.append(
            f"f_0 = sigmoid(a0 * logit(clip({score}, eps, 1 - eps)) + b0), a0 = {init[0]!r}, b0 = {init[1]!r}"
        )
    if leaf_map == "scale":
        lines.append("tree t: f_t = min(k * f_(t-1), 1), k of the rule the row meets")
        lines.append(f"calibrated = f_{n_trees}")
    else:
        lines.append("l_0 = logit(clip(f_0, eps, 1 - eps)), logit(p) = ln(p / (1 - p))")
        step = "l_(t-1) + shift" if leaf_map == "shift" else "a * l_(t-1) + b"
        lines.append(f"tree t: l_t = {step}, the map of the rule the row meets")
        lines.append(f"calibrated = sigmoid(l_{n_trees}) = 1 / (1 + exp(-l_{n_trees}))")
    lines.append(f"eps = {EPS!r}")
    return lines


class _TextWriter:
    def __init__(self, chain: _Chain) -> None:
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


# --------------------------------------------------------------------------------------------------
# JSON


def _json_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if not isinstance(v, str | int | float | bool):
        msg = f"category {v!r} of type {type(v).__name__} cannot be written as JSON (str/int/float/bool)"
        raise TypeError(msg)
    return v


def _json_column(name: Hashable) -> Any:
    return name if isinstance(name, str | int) and not isinstance(name, bool) else str(name)


def _json_condition(feature: _Feature, codes: Sequence[int], precision: int | None) -> dict[str, Any]:
    cs = _code_set(feature, codes)
    out: dict[str, Any] = {"feature": feature.index, "column": _json_column(feature.column)}
    if feature.kind == "values":
        out["values"] = [_json_value(feature.categories[c]) for c in cs.regular]
        out["missing"], out["unseen"] = cs.missing, cs.unseen
    elif feature.kind == KIND_BINS:
        edges = _edges(feature)
        out["intervals"] = [
            [
                None if lo == 0 else _rounded(edges[lo - 1], precision),
                None if hi == len(edges) else _rounded(edges[hi], precision),
            ]
            for lo, hi in _runs(cs.regular)
        ]
        out["missing"] = cs.missing
    else:
        out["bins"] = [[lo, hi] for lo, hi in _runs(cs.regular)]
    return out


def _rules_dict(chain: _Chain, encoder: FeatureEncoder | None) -> dict[str, Any]:
    ensemble, features, precision = chain.ens, chain.features, chain.precision
    handle = "missing" if getattr(encoder, "handle_unseen", "separate") == "missing" else "separate"
    feats: list[dict[str, Any]] = []
    for f in features:
        entry: dict[str, Any] = {"column": _json_column(f.column), "kind": f.kind}
        if f.kind == "values":
            entry["categories"] = [_json_value(v) for v in f.categories]
            entry["unseen"] = handle
        elif f.kind == KIND_BINS:
            entry["edges"] = [_rounded(e, precision) for e in _edges(f)]
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
            "map": {"a": _rounded(a, precision), "b": _rounded(b, precision)},
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


def sql_float(x: float, precision: int | None = None) -> str:
    """A float64 as a SQL literal that every engine reads back exactly (or rounded to ``precision`` digits).

    ``x = n / 2^k`` with an odd integer ``|n| < 2^53`` (:meth:`float.as_integer_ratio`), written
    ``(CAST(n AS DOUBLE PRECISION) / 2^k /* repr(x) */)``: integer literals and divisions by powers of two
    are exact, while decimal literals are read to the nearest double by some engines only. Integers below
    2^53 are written ``n.0``.
    """
    x = float(x)
    if not math.isfinite(x):
        msg = f"SQL has no literal for {x!r}"
        raise ValueError(msg)
    if precision is not None:
        text = f"{x:.{precision}g}"
        return text if any(ch in text for ch in ".e") else text + ".0"
    if x.is_integer() and abs(x) < 2.0**53:
        return f"{int(x)}.0"
    num, den = x.as_integer_ratio()
    if den == 1:  # an integer of 2^53 or more: n * 2^e with odd n
        shift = (num & -num).bit_length() - 1
        num >>= shift
        factors = _pow2_factors(shift)
        return f"(CAST({num} AS DOUBLE PRECISION){''.join(' * ' + f for f in factors)} /* {x!r} */)"
    factors = _pow2_factors(den.bit_length() - 1)
    return f"(CAST({num} AS DOUBLE PRECISION){''.join(' / ' + f for f in factors)} /* {x!r} */)"


def _pow2_factors(k: int) -> list[str]:
    """2^k as integer literals of at most 2^62 whose product is 2^k."""
    out = []
    while k > 0:
        step = min(k, _MAX_POW2)
        out.append(str(1 << step))
        k -= step
    return out


def sql_ident(name: Hashable) -> str:
    """A column name as a quoted SQL identifier (``"`` doubled inside)."""
    text = str(name)
    return '"' + text.replace('"', '""') + '"'


def sql_value(v: Any) -> str:
    """A category as a SQL literal: strings quoted (``'`` doubled), booleans TRUE/FALSE, numbers exact."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return sql_float(v, None)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    msg = f"category {v!r} of type {type(v).__name__} has no SQL literal (str/int/float/bool)"
    raise TypeError(msg)


class _SqlWriter:
    """Build the SQL expression with a nesting depth that does not grow with the number of trees.

    SQLite before 3.46 parses with a fixed stack of 100 entries, which about six nested subqueries or
    twenty nested ``CASE``/function calls exhaust, so the trees are not nested inside each other. Every
    tree's ``CASE`` sits side by side in one derived table ``k`` (one column per map parameter and tree),
    and the chain is arithmetic over those columns:

    - scale: :math:`f_T = \\min(C_0, \\ldots, C_T)` with :math:`C_0 = f_0 k_1 \\cdots k_T`,
      :math:`C_j = k_{j+1} \\cdots k_T` (the clip at 1 happened last after tree ``j``) and :math:`C_T = 1`,
      each product rounded left to right as the kernel rounds it; rounding is monotone and every
      :math:`k \\ge 0`, so this minimum equals the kernel's :math:`\\min(k_t f_{t-1}, 1)` chain bit for
      bit. The minimum is an aggregate ``MIN`` over the rows ``j = 0 .. T`` of a small constant table.
    - shift: :math:`l_T = l_0 + b_1 + \\cdots + b_T`, summed left to right (the kernel's order);
    - platt: :math:`l_T = (\\cdots(l_0 a_1 + b_1) a_2 + b_2 \\cdots) a_T + b_T` (parentheses are cheap).
    """

    def __init__(self, chain: _Chain) -> None:
        self.chain, self.ens, self.features = chain, chain.ens, chain.features
        self.init, self.precision = chain.init, chain.precision
        # Alias prefix that no raw column starts with, so no alias can hide a column.
        taken = [str(f.column).lower() for f in self.features] + [str(chain.score_col).lower()]
        prefix = "gpucal_"
        while any(name.startswith(prefix) for name in taken):
            prefix += "_"
        self.p = prefix

    def num(self, x: float) -> str:
        return sql_float(x, self.precision)

    def clip(self, x: str) -> str:
        """``clip(x, eps, 1 - eps)`` (``x`` is repeated: pass a column)."""
        lo, hi = self.num(EPS), self.num(1.0 - EPS)
        return f"CASE WHEN {x} < {lo} THEN {lo} WHEN {x} > {hi} THEN {hi} ELSE {x} END"

    def logit_clip(self, x: str) -> str:
        p = self.clip(x)
        return f"LN(({p}) / (1.0 - ({p})))"

    def write(self) -> str:
        ens, p = self.ens, self.p
        score = sql_ident(self.chain.score_col)
        formula = "; ".join(self.chain.formula()).replace("*/", "* /")
        header = "/* gpucal calibration tree rules: " + formula + " */\n"
        a0, b0 = self.init
        platt_init = (a0, b0) != (1.0, 0.0)
        f0 = score
        if platt_init:
            f0 = f"1.0 / (1.0 + EXP(-({self.num(a0)} * {self.logit_clip(score)} + {self.num(b0)})))"
        value = ens.node_value
        trees = [int(ens.tree_start[t]) for t in range(ens.n_trees)]
        cols: list[str] = []
        if ens.leaf_map == "scale":
            if (value[:, 0] < 0).any():
                msg = "ensemble.node_value: a scale map k < 0 (k = sum(w y) / sum(w f) is never negative)"
                raise ValueError(msg)
            if not trees:
                return header + f"({f0})"
            cols.append(f"{f0} AS {p}f0")
            for t, root in enumerate(trees, start=1):
                cols.append(f"/* tree {t} */ {self.case(root, lambda m: self.num(value[m, 0]))} AS {p}k{t}")
            k = [f"{p}k.{p}k{t}" for t in range(1, len(trees) + 1)]
            whens = [f"WHEN 0 THEN {' * '.join([f'{p}k.{p}f0', *k])}"]
            whens += [f"WHEN {j} THEN {' * '.join(k[j:])}" for j in range(1, len(trees))]
            rows = " UNION ALL ".join(
                f"SELECT {j}" + (f" AS {p}j" if j == 0 else "") for j in range(len(trees) + 1)
            )
            return header + (
                f"(SELECT MIN(CASE {p}c.{p}j\n  " + "\n  ".join(whens) + "\n  ELSE 1.0 END)\n"
                " FROM (SELECT\n  " + ",\n  ".join(cols) + f") AS {p}k,\n"
                f" ({rows}) AS {p}c)"
            )
        # shift / platt: l_0 = logit(clip(f_0)), with f_0 named first when it is not a bare column
        source = ""
        if platt_init:
            cols.append(f"{self.logit_clip(f'{p}f.{p}f0')} AS {p}l0")
            source = f" FROM (SELECT {f0} AS {p}f0) AS {p}f"
        else:
            cols.append(f"{self.logit_clip(score)} AS {p}l0")
        lt = f"{p}k.{p}l0"
        for t, root in enumerate(trees, start=1):
            b = self.case(root, lambda m: self.num(value[m, 1]))
            if ens.leaf_map == "shift":
                cols.append(f"/* tree {t} */ {b} AS {p}b{t}")
                lt = f"{lt} + {p}k.{p}b{t}"
            else:
                a = self.case(root, lambda m: self.num(value[m, 0]))
                cols.append(f"/* tree {t}: a */ {a} AS {p}a{t}")
                cols.append(f"/* tree {t}: b */ {b} AS {p}b{t}")
                lt = f"({lt}) * {p}k.{p}a{t} + {p}k.{p}b{t}"
        return header + (
            f"(SELECT 1.0 / (1.0 + EXP(-({lt})))\n"
            " FROM (SELECT\n  " + ",\n  ".join(cols) + f"{source}) AS {p}k)"
        )

    def case(self, node: int, leaf: Callable[[int], str], depth: int = 1) -> str:
        """Nested ``CASE`` of the subtree at ``node``: ``leaf(m)`` for the node ``m`` a row stops at."""
        ens = self.ens
        if int(ens.node_feature[node]) < 0:
            return leaf(node)
        feature = self.features[int(ens.node_feature[node])]
        pad = "\n" + "  " * (depth + 1)
        parts = ["CASE"]
        for child, codes in node_children(ens, self.features, node):
            cond = self.condition(feature, codes)
            parts.append(f"{pad}WHEN {cond} THEN {self.case(child, leaf, depth + 1)}")
        parts.append(f"{pad}ELSE {leaf(node)}")
        parts.append(f"{pad}END")
        return "".join(parts)

    def condition(self, feature: _Feature, codes: Sequence[int]) -> str:
        """A boolean SQL expression true exactly for the raw values whose code is in ``codes``."""
        cs = _code_set(feature, codes)
        col = sql_ident(feature.column)
        parts: list[str] = []
        if feature.kind == KIND_SCORE:
            n = feature.n_regular
            scaled = f"{col} * {n}"
            for lo, hi in _runs(cs.regular):
                bounds = []
                if lo > 0:
                    bounds.append(f"{scaled} >= {lo}")
                if hi < n - 1:
                    bounds.append(f"{scaled} < {hi + 1}")
                parts.append(" AND ".join(bounds) if bounds else "TRUE")
        elif feature.kind == KIND_BINS:
            edges = _edges(feature)
            for lo, hi in _runs(cs.regular):
                bounds = []
                if lo > 0:
                    bounds.append(f"{col} >= {self.num(edges[lo - 1])}")
                if hi < len(edges):
                    bounds.append(f"{col} < {self.num(edges[hi])}")
                parts.append(" AND ".join(bounds) if bounds else f"{col} IS NOT NULL")
        elif cs.regular:
            values = [sql_value(feature.categories[c]) for c in cs.regular]
            parts.append(f"{col} = {values[0]}" if len(values) == 1 else f"{col} IN ({', '.join(values)})")
        if cs.missing:
            parts.append(f"{col} IS NULL")
        if cs.unseen:
            if feature.categories:
                known = ", ".join(sql_value(v) for v in feature.categories)
                parts.append(f"{col} NOT IN ({known})")
            else:
                parts.append(f"{col} IS NOT NULL")
        if not parts:  # no code at all: cannot happen for a child, kept for safety
            return "FALSE"
        if len(parts) == 1:
            return parts[0]
        return "(" + " OR ".join(f"({p})" if " AND " in p else p for p in parts) + ")"

r"""Crosses of two encoded columns: one more coded field whose codes are the pair's combined levels.

A cross of columns ``j`` and ``k`` (codes :math:`c_j \in [0, n_j)`, :math:`c_k \in [0, n_k)`) reads each
row's pair as the key :math:`c_j n_k + c_k`. At fit time the weight of every key is summed over rows (one
pass, a keyed table per block merged over blocks: ``gpucal.rows``); keys whose weight reaches
``min_count`` keep a code each (``0 .. m-1``, in key order), and every other pair (rare at fit time, or
never seen) reads as the pooled code ``m``. Numeric columns cross through their quantile bins; missing
and unseen values through their own codes, like any other level.

Memory is bounded by ``max_levels``: the crosses' codes (``m + 1`` each) are added up in the order the
pairs are given, and a pair that would take the total past the cap is dropped, with a warning naming it.
A fitted cross keeps its ``m`` keys (int64); prediction reads a row's code from a table of
:math:`n_j n_k` entries when that is at most ``MAX_LOOKUP_SPAN``, by bisection among the keys of its
level of ``j`` otherwise (:func:`~gpucal.kernels.lookup.lookup_pairs`).

The idea is the feature cross of AutoCross (Luo et al., "AutoCross: Automatic Feature Crossing for
Tabular Data in Real-World Applications", KDD 2019: the cross of two categorical fields as the Cartesian
product of their values, numbers discretised first).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, to_numpy
from gpucal.encoding.codings import MAX_LOOKUP_SPAN
from gpucal.kernels.lookup import lookup_pairs, pair_tables
from gpucal.rows.reduce import KeyedTable, check_table_size, group_sorted, merge_tables

#: Most table entries (int64 count and float64 sum each) one pass of ``pair_tables`` fills for
#: :func:`count_pairs`: 32 MiB.
PAIR_TABLE_ENTRIES = 1 << 21
#: What the table-size check advises when a cross has more keys than the limit.
FEWER_CROSS_KEYS = "Leave the pair out of interactions (or give its columns fewer values)"


@dataclass(frozen=True)
class Cross:
    """A fitted cross of the encoder's columns ``left`` and ``right`` (indices) and its kept keys."""

    left: int
    right: int
    n_left: int  # codes of the left column
    n_right: int  # codes of the right column
    keys: np.ndarray  # int64, increasing: the pair keys c_left * n_right + c_right that keep a code

    @property
    def pooled_code(self) -> int:
        """The code of every pair without a code of its own (rare at fit time, or unseen)."""
        return int(self.keys.shape[0])

    @property
    def n_values(self) -> int:
        """Number of codes: one per kept key, then the pooled code."""
        return int(self.keys.shape[0]) + 1


def interactions_param(value: Any, owner: str) -> Any:
    """An estimator's ``interactions`` parameter checked for its form: None, ``"auto"``, ``"all"`` or a
    list of pairs (each a tuple; their columns are checked against the data by the encoder's fit,
    :func:`check_interactions`). Raises ``ValueError`` naming ``owner`` for anything else."""
    if value is None or (isinstance(value, str) and value in ("auto", "all")):
        return value
    # An array is no list: ``in`` and ``==`` on it compare element by element.
    if isinstance(value, str) or not isinstance(value, Sequence):
        msg = (
            f"The 'interactions' parameter of {owner} must be None, 'auto', 'all' or a list of column "
            f"pairs (tuples of two column names). Got {value!r} instead."
        )
        raise ValueError(msg)
    return [tuple(pair) if isinstance(pair, list) else pair for pair in value]


def check_interactions(interactions: Any, columns: Sequence[Hashable], where: str) -> list[tuple[Any, Any]]:
    """Return ``interactions`` (None, ``"all"`` or a list of column pairs) as a list of pairs of names.

    Raises ``ValueError`` naming the entry for a pair that is not two distinct columns of ``columns``
    (an unknown column, a column crossed with itself, a tuple of one) or a pair given twice.
    """
    if interactions is None:
        return []
    if isinstance(interactions, str) and interactions == "all":
        return all_pairs(columns)
    if isinstance(interactions, str) or not isinstance(interactions, Sequence):
        msg = f"{where}: expected None, 'all' or a list of column pairs, got {interactions!r}"
        raise TypeError(msg)
    pairs: list[tuple[Any, Any]] = []
    seen: set[frozenset[Any]] = set()
    for entry in interactions:
        if isinstance(entry, str) or not isinstance(entry, Sequence) or len(entry) != 2:
            msg = (
                f"{where}: {entry!r} is not a pair of columns; each interaction is a tuple (or list) of "
                "two column names"
            )
            raise ValueError(msg)
        left, right = entry
        unknown = [c for c in (left, right) if c not in columns]
        if unknown:
            msg = f"{where}: {entry!r} names column(s) {unknown} that are not features: {list(columns)}"
            raise ValueError(msg)
        if left == right:
            msg = f"{where}: {entry!r} crosses column {left!r} with itself"
            raise ValueError(msg)
        if frozenset((left, right)) in seen:
            msg = f"{where}: the pair {entry!r} is given twice"
            raise ValueError(msg)
        seen.add(frozenset((left, right)))
        pairs.append((left, right))
    return pairs


def all_pairs(columns: Sequence[Hashable]) -> list[tuple[Any, Any]]:
    """Every pair of distinct columns, in column order."""
    return list(itertools.combinations(columns, 2))


def pair_keys(codes: Any, left: int, right: int, n_right: int) -> Any:
    """The int64 key ``c_left * n_right + c_right`` of every row."""
    xp = array_namespace(codes)
    return codes[:, left].astype(xp.int64) * n_right + codes[:, right]


def pair_labels(pairs: Sequence[tuple[int, int, int, int]], names: Sequence[Hashable]) -> list[str]:
    """How an error names each cross of ``pairs`` (``(left, right, ...)`` indices of ``names``)."""
    return [f"the cross of {names[left]!r} and {names[right]!r}" for left, right, *_ in pairs]


def count_pairs(
    codes: Any,
    w: Any,
    pairs: Sequence[tuple[int, int, int, int]],
    limit: int,
    labels: Sequence[str] | None = None,
) -> list[KeyedTable]:
    """One block's weight per pair key, for each ``(left, right, n_left, n_right)``: keyed tables on the
    host, the keys that some row has in increasing order; a pair with more than ``limit`` keys raises
    ``ValueError`` naming it by ``labels`` (:func:`pair_labels`; None: by its columns' indices). A pair
    of at most ``MAX_LOOKUP_SPAN`` keys is counted into a table of every key, a larger one by sorting
    its keys. On numpy the pairs of at most as many keys as rows fill their tables together, in one
    compiled pass of :func:`~gpucal.kernels.lookup.pair_tables` per ``PAIR_TABLE_ENTRIES`` entries (the
    pairs dealt to the threads; without weights, counts alone); the others, and every pair on cupy, take
    two ``bincount`` passes (a table larger than the rows costs more to clear and scan than the rows to
    count). Without weights, numpy's other pairs count their keys sorted alone
    (:func:`~gpucal.rows.reduce.group_sorted` of no weights; a field of thousands of values crossed with
    four others, 150,000 rows: 5 ms against 11). Tables of every key for the pairs of up to one or two keys
    per row too, measured at 1e7 rows, saved no time over their sorts and held 60-140 MB more."""
    xp = array_namespace(codes)
    n_rows = int(codes.shape[0])
    # numpy's paths read no weight when there is none
    weight: Any = None if w is None else xp.asarray(w, dtype=xp.float64)[:, None]
    if weight is None and xp is not np:
        weight = xp.ones((n_rows, 1), dtype=xp.float64)
    dense: dict[int, tuple[Any, Any]] = {}
    if xp is np:
        host_w = None if weight is None else weight[:, 0]
        group: list[int] = []
        entries = 0  # the group's table entries, kept as it grows (summed again per pair: O(pairs^2))
        for p, (_, _, n_left, n_right) in enumerate(pairs):
            span = n_left * n_right
            if span > min(MAX_LOOKUP_SPAN, n_rows):
                continue
            if group and entries + span > PAIR_TABLE_ENTRIES:
                dense.update(zip(group, pair_tables(codes, host_w, [pairs[g] for g in group]), strict=True))
                group, entries = [], 0
            group.append(p)
            entries += span
        if group:
            dense.update(zip(group, pair_tables(codes, host_w, [pairs[g] for g in group]), strict=True))
    tables = []
    for p, (left, right, n_left, n_right) in enumerate(pairs):
        span = n_left * n_right
        if p in dense:
            counts, sums = dense[p]
            present = np.flatnonzero(counts)
            summed = (counts if sums is None else sums)[present].astype(np.float64)[:, None]
            found = (present,)
        elif xp is np and w is None:  # unit weights: a key's weight is its count
            found, summed = group_sorted((pair_keys(codes, left, right, n_right),), None)
        elif span <= MAX_LOOKUP_SPAN:
            keys = pair_keys(codes, left, right, n_right)
            present = xp.flatnonzero(xp.bincount(keys, minlength=span))
            summed = xp.bincount(keys, weights=weight[:, 0], minlength=span)[present][:, None]
            found = (present,)
        else:
            found, summed = group_sorted((pair_keys(codes, left, right, n_right),), weight, xp)
        label = f"the cross of columns {left} and {right}" if labels is None else labels[p]
        check_table_size(int(summed.shape[0]), limit, label, FEWER_CROSS_KEYS)
        tables.append(KeyedTable((to_numpy(found[0]).astype(np.int64),), to_numpy(summed)))
    return tables


def merge_pair_counts(*parts: list[KeyedTable], limit: int, labels: Sequence[str]) -> list[KeyedTable]:
    """Merge blocks' :func:`count_pairs` tables, pair by pair (``labels``: :func:`pair_labels`)."""
    return [
        merge_tables(*tables, limit=limit, what=label, advice=FEWER_CROSS_KEYS)
        for label, tables in zip(labels, zip(*parts, strict=True), strict=True)
    ]


def select_crosses(
    pairs: Sequence[tuple[int, int]],
    n_values: np.ndarray,
    counts: Sequence[KeyedTable],
    *,
    names: Sequence[Hashable],
    min_count: float,
    max_levels: int,
) -> list[Cross]:
    """The crosses of ``pairs`` with the keys of weight at least ``min_count`` (and positive), in order,
    while their codes add up to at most ``max_levels``; the pairs past the cap are dropped with a
    ``UserWarning`` naming them."""
    crosses: list[Cross] = []
    dropped: list[tuple[Any, Any]] = []
    total = 0
    for (left, right), table in zip(pairs, counts, strict=True):
        weight = table.stats[:, 0]
        keys = np.asarray(table.keys[0][(weight >= min_count) & (weight > 0.0)], dtype=np.int64)
        if total + keys.shape[0] + 1 > max_levels:
            dropped.append((names[left], names[right]))
            continue
        total += keys.shape[0] + 1
        crosses.append(Cross(left, right, int(n_values[left]), int(n_values[right]), keys))
    if dropped:
        msg = (
            f"interactions: {dropped} dropped: their levels would take the crosses past "
            f"max_cross_levels={max_levels} codes in all"
        )
        warnings.warn(msg, UserWarning, stacklevel=4)
    return crosses


def transform_crosses(crosses: Sequence[Cross], out: Any, first: int) -> None:
    """Write each cross's codes into ``out[:, first + c]``, reading its pair's codes from ``out``
    (:func:`~gpucal.kernels.lookup.lookup_pairs`: one pass over the rows for every cross)."""
    if crosses:
        pairs = [(c.left, c.right, c.n_left, c.n_right, c.keys) for c in crosses]
        lookup_pairs(out, first, pairs, max_table=MAX_LOOKUP_SPAN)


def cross_to_dict(cross: Cross, names: Sequence[Hashable]) -> dict[str, Any]:
    """A cross as plain data: its two column names and its kept keys."""
    return {"columns": [names[cross.left], names[cross.right]], "keys": cross.keys.tolist()}


def cross_from_dict(data: Any, names: Sequence[Hashable], n_values: np.ndarray, where: str) -> Cross:
    """Check and rebuild a cross from :func:`cross_to_dict`'s data (which may come from a file)."""
    if not isinstance(data, Mapping) or set(data) != {"columns", "keys"}:
        msg = f"{where}: expected a dict with the keys 'columns' and 'keys'"
        raise ValueError(msg)
    pair = data["columns"]
    valid = isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1]
    if not valid or not all(c in names for c in pair):
        msg = f"{where}['columns']: expected two distinct encoded columns, got {pair!r}"
        raise ValueError(msg)
    left, right = (list(names).index(c) for c in pair)
    n_left, n_right = int(n_values[left]), int(n_values[right])
    raw = data["keys"]
    span = n_left * n_right
    # Each key is checked against the span as a Python int first: a file's integer may not fit int64.
    ok = isinstance(raw, list) and all(
        isinstance(k, int) and not isinstance(k, bool) and 0 <= k < span for k in raw
    )
    keys = np.asarray(raw if ok else [], dtype=np.int64)
    if not ok or (np.diff(keys) <= 0).any():
        msg = f"{where}['keys']: expected strictly increasing integers in [0, {span})"
        raise ValueError(msg)
    return Cross(left, right, n_left, n_right, keys)


__all__ = [
    "Cross",
    "all_pairs",
    "check_interactions",
    "count_pairs",
    "cross_from_dict",
    "cross_to_dict",
    "interactions_param",
    "merge_pair_counts",
    "pair_keys",
    "pair_labels",
    "select_crosses",
    "transform_crosses",
]

"""Cross-fitting folds: which held-out fold each calibration row belongs to, and row subsets of any input.

Folds are a pure function of the rows' positions, their labels (or groups) and the seed, so the same
call gives the same folds on any machine and any input family. Without groups they are stratified: the
rows of each class (label rounded to 0 or 1) are visited in a seeded random order and dealt to the
folds in turn, so every fold holds about the same share of positives. With groups, every row of a
group goes to one fold: the groups are visited in the order of a seeded hash of their values and each
goes to the fold with the least weight so far (ties to the lower fold), which balances folds of unequal
groups; a group without weight changes no other group's fold.

On large calibration sets the folds cover a seeded, stratified subsample of the rows
(:func:`nested_subsamples`), again a pure function of the labels and the seed.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._frames import cudf_to_pandas, frame_columns, input_family


def stratified_folds(labels: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
    """Return the fold (0 .. ``n_folds`` - 1) of every row, the classes dealt evenly across folds.

    Parameters
    ----------
    labels : numpy.ndarray of shape (n,)
        Labels in [0, 1]; soft labels are stratified by their rounded value.
    n_folds : int
        Number of folds.
    seed : int
        Seed of the row order.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    order = np.random.default_rng(seed).permutation(labels.shape[0])
    positive = labels[order] >= 0.5
    folds = np.empty(labels.shape[0], dtype=np.int64)
    for cls in (False, True):
        rows = order[positive == cls]
        folds[rows] = np.arange(rows.shape[0]) % n_folds
    return folds


def check_held_out(folds: np.ndarray, n_folds: int, weights: np.ndarray | None, grouped: bool) -> None:
    """Refuse folds (``folds``: one per cross-fitted row) of which one holds no row of positive weight:
    its held-out scores would have no rows. ``ValueError`` says why (more folds than the rows of the
    larger class, or than the groups that carry weight) and to ask for fewer."""
    held = np.bincount(folds, weights=weights, minlength=n_folds)
    empty = np.flatnonzero(held <= 0.0)
    if empty.size == 0:
        return
    if grouped:
        held_by = "whole groups: fewer groups of positive weight than folds"
    else:
        held_by = "each class dealt evenly: more folds than the rows of the larger class leave some empty"
    msg = (
        f"n_folds={n_folds}: {empty.size} of the folds of {folds.shape[0]:,} rows would hold no row of "
        f"positive weight (rows cut into {held_by}); ask for fewer folds"
    )
    raise ValueError(msg)


def nested_subsamples(labels: np.ndarray, sizes: Sequence[int], seed: int) -> list[np.ndarray]:
    """Return, for each of ``sizes``, the sorted positions of that many rows drawn without replacement,
    stratified by label, each sample within every larger one.

    Each class (label rounded to 0 or 1) gives its share of a sample (rounded, at least one row when the
    class is present), its rows taken in one seeded random order; so a sample's positive rate is the
    data's, a class's share never shrinks as the sample grows (each sample holds a prefix of each class's
    rows), and the same labels and seed give the same rows, whatever the other sizes asked for.

    Parameters
    ----------
    labels : numpy.ndarray of shape (n,)
        Labels in [0, 1].
    sizes : sequence of int
        Rows wanted per sample; all ``n`` rows for a size of at least ``n``.
    seed : int
        Seed of the row order.

    Returns
    -------
    list of numpy.ndarray of int64, shapes (min(size, n),)
    """
    n = labels.shape[0]
    if all(n_rows >= n for n_rows in sizes):
        return [np.arange(n, dtype=np.int64) for _ in sizes]
    order = np.random.default_rng(seed).permutation(n)
    positive = labels[order] >= 0.5
    positives, negatives = order[positive], order[~positive]
    n_positive = positives.shape[0]
    samples = []
    for n_rows in sizes:
        if n_rows >= n:
            samples.append(np.arange(n, dtype=np.int64))
            continue
        wanted_positive = min(n_positive, max(int(n_positive > 0), round(n_rows * n_positive / n)))
        wanted_positive = max(wanted_positive, n_rows - (n - n_positive))  # enough negatives must exist
        taken = np.concatenate([positives[:wanted_positive], negatives[: n_rows - wanted_positive]])
        samples.append(np.sort(taken).astype(np.int64))
    return samples


#: splitmix64's constants (Steele, Lea and Flood, OOPSLA 2014): the golden-ratio step and the two
#: multipliers of its finaliser, which spreads every input bit over the output.
_GOLDEN_STEP = 0x9E3779B97F4A7C15
_MIX_FIRST = np.uint64(0xBF58476D1CE4E5B9)
_MIX_SECOND = np.uint64(0x94D049BB133111EB)


def seeded_hashes(values: np.ndarray, seed: int) -> np.ndarray:
    """A seeded 64-bit hash of each value: pandas' hash of the value (its own, on any dtype), plus the
    seed's multiple of splitmix64's golden-ratio step, through splitmix64's finaliser.

    pandas' ``hash_key`` seeds the hash of object values only: on integer or float groups every seed
    gave the same order.
    """
    import pandas as pd

    step = np.uint64((seed * _GOLDEN_STEP) % 2**64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64 is the point
        mixed = pd.util.hash_array(values) + step
        mixed = (mixed ^ (mixed >> np.uint64(30))) * _MIX_FIRST
        mixed = (mixed ^ (mixed >> np.uint64(27))) * _MIX_SECOND
    return mixed ^ (mixed >> np.uint64(31))


def grouped_folds(groups: np.ndarray, n_folds: int, seed: int, weights: np.ndarray | None) -> np.ndarray:
    """Return the fold of every row, all rows of a group in one fold.

    Parameters
    ----------
    groups : numpy.ndarray of shape (n,)
        Group label per row (any hashable values, of one type or mixed).
    n_folds : int
        Number of folds; there must be at least as many groups.
    seed : int
        Seed of the order in which groups are dealt.
    weights : numpy.ndarray of shape (n,) or None
        Row weights; a group's size is its weight (its row count when None).

    Returns
    -------
    numpy.ndarray of int64, shape (n,)

    Raises
    ------
    ValueError
        Fewer groups than folds.
    """
    import pandas as pd

    codes, uniques = pd.factorize(groups)  # no sort: groups of mixed types do not compare
    uniques = np.asarray(uniques)
    n_groups = uniques.shape[0]
    if n_groups < n_folds:
        msg = f"groups: {n_groups} distinct group(s), fewer than n_folds={n_folds}; every fold needs a group"
        raise ValueError(msg)
    sizes = np.bincount(codes, weights=weights, minlength=n_groups)
    fold_of_group = np.empty(n_groups, dtype=np.int64)
    load = np.zeros(n_folds)
    # The order comes from a seeded hash of each group's value, not from its position among the groups,
    # so groups that carry no weight (absent when the rows are repeated instead) do not move the others.
    order = np.argsort(seeded_hashes(uniques, seed), kind="stable")
    for group in order:
        fold = int(np.argmin(load))
        fold_of_group[group] = fold
        load[fold] += sizes[group]
    return fold_of_group[codes]


def group_values(X: Any, groups: Any, n_rows: int) -> np.ndarray:
    """Return ``groups`` (an array-like, or a column name of ``X``) as a host array, one value per row.

    Raises
    ------
    ValueError
        ``groups`` does not have one value per row, or a row's is missing (None, NaN).
    """
    import pandas as pd

    if isinstance(groups, Hashable) and not isinstance(groups, tuple) and _is_frame(X):
        column = frame_columns(X, [groups], name="X")[groups]
        values = to_numpy(column.values)
        if column.categories is not None:
            # A column read by value holds codes (-1 where the value is missing) in an order of its own
            # (first appearance, a categorical's categories): the folds read the values, as they do an
            # array of them.
            absent = values < 0
            categories = np.asarray(column.categories)  # their own dtype: the hash reads it
            if categories.size:  # none: every value is missing, refused below
                values = categories[np.where(absent, 0, values)]
        else:
            absent = pd.isna(values)
    else:
        values = to_numpy(groups.to_numpy() if hasattr(groups, "to_numpy") else groups)
        values = np.asarray(values)
        absent = pd.isna(values)
    if values.ndim != 1 or values.shape[0] != n_rows:
        msg = f"groups: expected one value per row ({n_rows}), got shape {values.shape}"
        raise ValueError(msg)
    missing = np.flatnonzero(absent)
    if missing.size:
        msg = (
            f"groups: {missing.size} row(s) have no group (missing value, first at row {int(missing[0])}); "
            "give every row a group"
        )
        raise ValueError(msg)
    return values


def _is_frame(X: Any) -> bool:
    kind = type(X).__name__
    return isinstance(X, Mapping) or kind in ("DataFrame", "Table", "RecordBatch")


def select_rows(X: Any, rows: np.ndarray) -> Any:
    """Return the rows at positions ``rows`` of ``X``, in ``X``'s own family (index kept for pandas / cudf).

    One ``if/elif`` on the family (``gpucal._frames.input_family``): numpy and cupy arrays, ``dict`` of
    columns, pandas and cudf (``iloc``), polars (row indexing), pyarrow (``take``).
    """
    family = input_family(X, "X")
    if isinstance(X, Mapping):
        return {name: select_rows(column, rows) for name, column in X.items()}
    elif family in ("numpy", "cupy"):
        array = X if is_cupy_array(X) else np.asarray(X)
        return array[array_namespace(array).asarray(rows)]
    elif family in ("pandas", "cudf"):
        return X.iloc[rows]
    elif family == "polars":
        return X[rows]
    return X.take(rows)  # pyarrow


def on_device(X: Any, labels: Any) -> bool:
    """Whether the rows are on the GPU: ``X`` a cupy array, a cudf frame or a ``dict`` of cupy columns, or
    the labels a cupy array."""
    return is_cupy_array(labels) or input_family(X, "X") in ("cupy", "cudf")


def host_rows(X: Any) -> Any:
    """``X`` with its columns on the host: a cupy array as numpy, a cudf frame or series as pandas (index
    kept), a ``dict``'s columns each so; any other family as it is."""
    if isinstance(X, Mapping):
        return {name: host_rows(column) for name, column in X.items()}
    family = input_family(X, "X")
    if family == "cupy":
        return to_numpy(X)
    elif family == "cudf" and hasattr(X, "columns"):
        import pandas as pd

        columns = {name: cudf_to_pandas(X[name]) for name in X.columns}
        return pd.DataFrame(columns, index=X.index.to_pandas())
    elif family == "cudf":
        return cudf_to_pandas(X)
    return X


def without_attrs(X: Any) -> Any:
    """``X``, or for a pandas frame with ``attrs`` a shallow copy without them (the same columns).

    pandas deep-copies ``DataFrame.attrs`` into the result of every selection (``__finalize__``), and a
    search selects rows and columns hundreds of times: on ``make_ctr``'s frames, whose ``attrs`` describe
    the scenario, the copies were about a tenth of the CPU time of a 150,000-row fit.
    """
    if input_family(X, "X") != "pandas" or not getattr(X, "attrs", None):
        return X
    plain = X.copy(deep=False)
    plain.attrs = {}
    return plain


__all__ = [
    "check_held_out",
    "group_values",
    "grouped_folds",
    "host_rows",
    "nested_subsamples",
    "on_device",
    "seeded_hashes",
    "select_rows",
    "stratified_folds",
    "without_attrs",
]

"""Dask collections seen as lists of partitions: detection and alignment.

Nothing here imports dask at module level: :func:`is_dask_collection` answers False without importing
it when dask was never imported (an object cannot be a dask collection before its module is loaded),
so ``import gpucal`` stays free of dask and the single-machine metrics pay one dictionary look-up.

A *row input* is a dask DataFrame or Series (pandas or cudf partitions) or a one-dimensional dask
Array (numpy or cupy chunks). Several row inputs of one call (labels, probabilities, weights, a field)
must cut the rows the same way: the same number of partitions, and partition ``i`` of each holds the
same rows. Series taken from one dataframe always do; dask Arrays with other chunks are rechunked to
the first array's chunks; anything else is checked per partition (lengths must agree).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpucal.registry import dask_fitting_names


def is_dask_collection(x: Any) -> bool:
    """Return True when ``x`` is a dask collection; never imports dask itself."""
    if "dask" not in sys.modules:
        return False
    from dask import is_dask_collection as _is_collection

    return bool(_is_collection(x))


def any_dask(*values: Any) -> bool:
    """Return True when any of ``values`` is a dask collection."""
    return any(is_dask_collection(v) for v in values)


def no_distributed_fit(estimator: Any) -> NotImplementedError:
    """The error of an estimator that cannot fit on dask collections (it never gathers the rows).

    It names the methods that do: those that joined :mod:`gpucal.registry` with ``fits_on_dask``.
    """
    name = type(estimator).__name__
    msg = (
        f"{name} has no distributed fit, and gpucal does not gather the rows of a dask collection on one "
        f"worker. Calibrators that fit on dask collections: {', '.join(dask_fitting_names())}. Fit {name} on "
        "one machine (for instance on a sample brought in with .compute())."
    )
    return NotImplementedError(msg)


def reject_dask(estimator: Any, *inputs: Any) -> None:
    """Raise :func:`no_distributed_fit`'s error when any input is a dask collection.

    The first line of the ``fit`` of an estimator without a distributed path, so that a dask frame is
    refused by name instead of being converted (and computed) somewhere down the line.
    """
    if any_dask(*inputs):
        raise no_distributed_fit(estimator)


def collection_kind(x: Any) -> str:
    """Return ``"frame"`` (dask DataFrame or Series), ``"array"`` or ``"other"``."""
    module = type(x).__module__
    if module.startswith(("dask.dataframe", "dask_cudf")):
        return "frame"
    if module.startswith("dask.array"):
        return "array"
    return "other"


@dataclass(frozen=True)
class Partitions:
    """Aligned row inputs: ``parts[i]`` is the tuple of partition ``i`` of every input (dask Delayed).

    An input given as None stays None in every tuple, so partition functions keep one signature.
    """

    names: tuple[str, ...]
    parts: list[tuple[Any, ...]]

    @property
    def n_partitions(self) -> int:
        return len(self.parts)


def _delayed_parts(x: Any, name: str) -> list[Any]:
    kind = collection_kind(x)
    if kind == "frame":
        return list(x.to_delayed())
    if kind == "array":
        if x.ndim != 1:
            msg = f"{name}: expected a 1-D dask array, got {x.ndim} dimensions"
            raise ValueError(msg)
        return list(x.to_delayed().ravel())
    msg = (
        f"{name}: unsupported dask collection {type(x).__module__}.{type(x).__qualname__}; "
        "expected a dask DataFrame, Series or 1-D Array"
    )
    raise TypeError(msg)


#: Prefix of the columns under which :func:`_joined_frame_parts` carries the inputs besides the first.
_JOINED = "__gpucal_input_"


def _drop_columns(part: Any, names: list[str]) -> Any:
    return part.drop(columns=names)


def _column(part: Any, name: str, original: Any) -> Any:
    return part[name].rename(original)


def _joined_frame_parts(given: dict[str, Any]) -> dict[str, list[Any]] | None:
    """The partitions of co-aligned dask frames read once: one frame, each input taken from its partition.

    ``X`` and ``y`` taken from one dataframe (``ddf[columns]``, ``ddf.label``) are two expressions over
    the same partitions; listed apart, a pass needing both computes each partition twice (two reads of
    every Parquet file). Joined with ``assign`` (a blockwise operation for co-aligned expressions) they
    are computed once per pass, and each input's partition is a cheap task on the joined one. Returns
    None (list them apart) unless there are several frame inputs, all the frame itself or columns of
    it, at most one of them a DataFrame and the others Series.
    """
    frames = {k: v for k, v in given.items() if collection_kind(v) == "frame"}
    if len(frames) < 2 or len(frames) != len(given):
        return None
    try:
        from dask.dataframe.dask_expr._expr import Projection
    except ImportError:  # pragma: no cover - another dask-expr layout: no joining, same results
        return None
    if not all(hasattr(v, "expr") for v in frames.values()):
        return None
    # Only columns of one frame are aligned by construction: ``assign`` pairs other co-aligned
    # expressions (a filtered X, a y reordered in its partitions) by index label, which would hide
    # the mismatch that the per-partition index check refuses when they are listed apart.
    roots = {(v.expr.frame if isinstance(v.expr, Projection) else v.expr)._name for v in frames.values()}
    if len(roots) > 1:
        return None
    tables = [k for k, v in frames.items() if v.ndim == 2]
    if len(tables) > 1:
        return None
    base_name = tables[0] if tables else next(iter(frames))
    base = frames[base_name]
    if tables and any(str(c).startswith(_JOINED) for c in base.columns):
        return None
    carried = {k: f"{_JOINED}{i}" for i, k in enumerate(frames) if k != base_name or not tables}
    if tables:
        joined = base.assign(**{carried[k]: frames[k] for k in carried})
    else:
        joined = frames[base_name].to_frame(name=carried[base_name])
        joined = joined.assign(**{carried[k]: frames[k] for k in carried if k != base_name})
    import dask

    drop = dask.delayed(_drop_columns, pure=True)
    column = dask.delayed(_column, pure=True)
    parts = list(joined.to_delayed())
    out = {k: [column(p, carried[k], frames[k].name) for p in parts] for k in carried}
    if tables:
        out[base_name] = [drop(p, list(carried.values())) for p in parts]
    return out


def partitions(inputs: dict[str, Any]) -> Partitions:
    """Align the named row inputs (None entries are kept as None) and list their partitions.

    Raises
    ------
    TypeError
        Some inputs are dask collections and others are not (a silent ``compute`` of the dask ones, or
        a scatter of the local ones, would hide where the rows are).
    ValueError
        The inputs have different numbers of partitions.
    """
    given = {k: v for k, v in inputs.items() if v is not None}
    local = [k for k, v in given.items() if not is_dask_collection(v)]
    if local:
        dask_names = [k for k in given if k not in local]
        dask_verb = "is a dask collection" if len(dask_names) == 1 else "are dask collections"
        local_verb = "is" if len(local) == 1 else "are"
        msg = (
            f"{', '.join(dask_names)} {dask_verb} but {', '.join(local)} {local_verb} not; pass every row "
            "input as a dask collection with the same partitions (e.g. columns of one dask dataframe)"
        )
        raise TypeError(msg)
    arrays = [k for k, v in given.items() if collection_kind(v) == "array"]
    if len(arrays) > 1:
        chunks = given[arrays[0]].chunks
        for k in arrays[1:]:
            if given[k].chunks != chunks:
                given[k] = given[k].rechunk(chunks)
    columns = _joined_frame_parts(given) or {k: _delayed_parts(v, k) for k, v in given.items()}
    counts = {k: len(v) for k, v in columns.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{k} has {n}" for k, n in counts.items())
        msg = f"row inputs have different numbers of partitions: {shown}; repartition them alike"
        raise ValueError(msg)
    n_parts = next(iter(counts.values()), 0)
    names = tuple(inputs)
    parts = [tuple(columns[k][i] if k in columns else None for k in names) for i in range(n_parts)]
    return Partitions(names, parts)


def as_partitions(collections: Any) -> Partitions:
    """Return :class:`Partitions` for one collection or a sequence of aligned collections."""
    if isinstance(collections, Sequence) and not is_dask_collection(collections):
        return partitions({f"collections[{i}]": c for i, c in enumerate(collections)})
    return partitions({"collection": collections})

"""Turn what a user passed to a fit or a metric into :class:`~gpucal.rows.Rows`: the one place that does.

Local inputs (pandas, cudf, polars or pyarrow frames, numpy or cupy arrays) become one
:class:`~gpucal.rows.block.RowBlock` held here; dask collections become one block per partition, held on
the workers (:class:`~gpucal.rows.dask.DaskRows`) or, when ``dask.config`` key ``gpucal.stream-partitions``
is set, read again by every pass (:class:`~gpucal.rows.streamed.StreamedRows`). Dask is detected without
importing it (:func:`~gpucal.rows.collections.any_dask`). The blocks hold the inputs as given: checking
and encoding them is the fit's first :meth:`~gpucal.rows.Rows.map`, the same on every backend.
"""

from __future__ import annotations

from typing import Any

from gpucal.rows.block import RowBlock
from gpucal.rows.collections import any_dask, partitions
from gpucal.rows.local import LocalRows
from gpucal.rows.protocol import Rows


def as_rows(*, stream: bool | None = None, **inputs: Any) -> Rows:
    """Return the rows of the named inputs (``X=..., y=..., sample_weight=...``; None entries kept).

    Parameters
    ----------
    stream : bool, optional
        For dask inputs: read the partitions again on every pass instead of holding them (default: the
        ``dask.config`` key ``gpucal.stream-partitions``, False when unset). Ignored for local inputs.
    **inputs
        The row inputs by name: all local, or all dask collections with the same partitions.

    Raises
    ------
    TypeError
        Some inputs are dask collections and others are not.
    ValueError
        Dask inputs with different numbers of partitions.
    """
    if not any_dask(*inputs.values()):
        return LocalRows((RowBlock(dict(inputs)),))
    from gpucal.rows.dask import DaskRows, partition_blocks
    from gpucal.rows.streamed import StreamedRows, stream_partitions

    blocks = partition_blocks(partitions(inputs))
    if stream if stream is not None else stream_partitions():
        return StreamedRows(blocks)
    return DaskRows(blocks)


__all__ = ["as_rows"]

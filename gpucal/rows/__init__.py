"""The rows a fit or a metric reads, wherever they are: one protocol, three places.

* :func:`as_rows` turns user input into :class:`Rows` (the one place that looks at where rows live).
* :class:`Rows` (``gpucal.rows.protocol``): blocks of rows; :meth:`~Rows.map` a function over them where
  they live, :meth:`~Rows.sum` fixed-shape statistics over them, :meth:`~Rows.reduce` anything else in a
  tree, :meth:`~Rows.per_worker` one block per machine, :meth:`~Rows.sum_in_shares` a reduce-scatter,
  :meth:`~Rows.offsets` every block's global row offset; :meth:`~Rows.single_block` the one local block
  holding every row (else None) and :attr:`~Rows.holds_blocks` whether mapped blocks are kept: what a
  method asks instead of a backend's class.
* :class:`LocalRows` (numpy / cupy, in this process), :class:`~gpucal.rows.dask.DaskRows` (dask partitions
  kept on the workers), :class:`~gpucal.rows.streamed.StreamedRows` (partitions read again every pass);
  the last two import dask, so they are imported from their modules.
* :mod:`gpucal.rows.draws`: random draws and the held-out split per *global* row index, the same on one
  machine and over any partitioning; :mod:`gpucal.rows.block`: the input block and the checked summary of
  labels and weights (``w`` None means unit weights, everywhere).
* A pass over dask rows survives a lost worker (its blocks are computed again from the graph) or fails
  with :class:`WorkerLostError` or :class:`PassTimeoutError` instead of waiting forever
  (``gpucal.rows._faults``).

Importing this package imports no dask and no GPU library.
"""

from gpucal.rows._faults import PassTimeoutError, WorkerLostError
from gpucal.rows.block import LabelSummary, RowBlock, concat_weights, label_summary, strided_rows
from gpucal.rows.build import as_rows
from gpucal.rows.collections import any_dask, is_dask_collection, no_distributed_fit, reject_dask
from gpucal.rows.draws import check_held_out, held_out_mask, poisson_one, row_uniforms
from gpucal.rows.local import LocalRows
from gpucal.rows.protocol import Rows

__all__ = [
    "LabelSummary",
    "LocalRows",
    "PassTimeoutError",
    "RowBlock",
    "Rows",
    "WorkerLostError",
    "any_dask",
    "as_rows",
    "check_held_out",
    "concat_weights",
    "held_out_mask",
    "is_dask_collection",
    "label_summary",
    "no_distributed_fit",
    "poisson_one",
    "reject_dask",
    "row_uniforms",
    "strided_rows",
]

"""``order_by_node``: the stable order that puts every node's rows next to each other.

A tree level's histogram adds each row into its node's slice of ``(node, feature, value)`` bins. With
rows in data order, consecutive rows hit different nodes and the additions scatter over the whole
histogram (hundreds of MB at depth 4-5, so every addition misses the cache); with rows grouped by node,
each node's slice (tens of KB) stays in cache while its rows are added. This is XGBoost's row
partitioner (Chen & Guestrin 2016, Sec. 4.1, "column block"), here a stable counting sort by node.

Forms: the numpy oracle (``np.argsort(kind="stable")``), the numba CPU twin (a counting sort, O(n)),
and on the GPU ``cupy.argsort``, whose radix sort is stable for integer keys.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal.kernels._dispatch import is_cupy_array, readonly, resolve_backend
from gpucal.kernels.jit import numba, parallel_rows


def order_by_node(node_idx: Any, n_nodes: int, *, backend: str = "auto") -> Any:
    """Return the stable permutation sorting rows by ``node_idx`` (values in ``[0, n_nodes)``), int64.

    Rows of one node keep their relative order, so a row's position inside its node's run is its rank
    among that node's rows in the original order.
    """
    backend = resolve_backend(backend, node_idx)
    if is_cupy_array(node_idx):
        import cupy

        return cupy.argsort(node_idx).astype(cupy.int64)
    node_idx = np.ascontiguousarray(node_idx)
    if node_idx.ndim != 1 or node_idx.dtype.kind not in "iu":
        msg = f"node_idx must be a 1-D integer array. Got shape {node_idx.shape}, dtype {node_idx.dtype}."
        raise ValueError(msg)
    if node_idx.shape[0] and (int(node_idx.min()) < 0 or int(node_idx.max()) >= n_nodes):
        msg = f"node_idx must lie in [0, n_nodes) = [0, {n_nodes})."
        raise ValueError(msg)
    if backend == "oracle":
        return np.argsort(node_idx, kind="stable").astype(np.int64)
    return _counting_sort(node_idx, np.int64(n_nodes))


def gather_rows(order: Any, *arrays: Any) -> tuple[Any, ...]:
    """Return each array (1-D, or 2-D by rows; None passes through) reordered by ``order``: ``a[order]``.

    The CPU path gathers in parallel with numba (numpy's ``a[order]`` on a 2-D array is single-threaded
    and about 3x slower); cupy arrays use fancy indexing.
    """
    if is_cupy_array(order):
        return tuple(None if a is None else a[order] for a in arrays)
    return tuple(None if a is None else _take_any(np.ascontiguousarray(a), order) for a in arrays)


def _take_any(a: np.ndarray, order: np.ndarray) -> np.ndarray:
    a = readonly(a)  # one compiled variant for pandas' read-only and numpy's writable arrays
    if a.ndim == 2:
        return _take_2d(a, order)
    return _take(a, order)


@parallel_rows("order")
def _take(a, order):
    out = np.empty((order.shape[0], *a.shape[1:]), dtype=a.dtype)
    for i in numba.prange(order.shape[0]):
        out[i] = a[order[i]]
    return out


@parallel_rows("order")
def _take_2d(a, order):
    """Rows of a 2-D array by ``order``, element by element: a row slice per row (``out[i] = a[k]``)
    builds two array views, which took twice the time of the copy on (1e6, 9) int16 codes."""
    n, d = order.shape[0], a.shape[1]
    out = np.empty((n, d), dtype=a.dtype)
    for i in numba.prange(n):
        k, row = np.uint64(order[i]), np.uint64(i)
        for j in range(d):
            out[row, np.uint64(j)] = a[k, np.uint64(j)]
    return out


@numba.njit(cache=True)
def _counting_sort(node_idx, n_nodes):
    """Stable counting sort: counts per node, their prefix sums, then one placing pass in row order."""
    nxt = np.zeros(n_nodes + 1, dtype=np.int64)
    for i in range(node_idx.shape[0]):
        nxt[node_idx[i] + 1] += 1
    for m in range(n_nodes):
        nxt[m + 1] += nxt[m]
    order = np.empty(node_idx.shape[0], dtype=np.int64)
    for i in range(node_idx.shape[0]):
        m = node_idx[i]
        order[nxt[m]] = i
        nxt[m] += 1
    return order


def route_and_group(
    codes: np.ndarray,
    f: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    node_idx: np.ndarray,
    perm: np.ndarray | None,
    tree: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_nodes: int,
    *,
    keep_perm: bool,
) -> tuple[Any, ...]:
    """Route every row one level down (``gpucal.kernels.route_rows``) and group the rows by their new node.

    The same as ``route_rows``, then ``order_by_node`` and ``gather_rows`` of ``codes, f, y, w``, the
    new node ids and ``perm`` (None: data order), in two parallel passes over fixed row chunks and no
    order array: the first routes each row and counts each chunk's rows per node, the second writes each
    row to its node's run, chunks in order, so every node keeps its rows in their order (a stable
    partition, equal to the counting sort). CPU only; the arrays are the tree store's own (numpy, rows
    in ``[0, n_nodes)``), not checked.

    Returns ``codes, f, y, w, node_idx, perm, starts``: ``w`` None when it was, ``perm`` None without
    ``keep_perm``, ``starts`` (``n_nodes + 1``) each node's first position.
    """
    node_feature, node_child_base, child_table = tree
    n = codes.shape[0]
    n_chunks = max(1, min(GROUP_CHUNKS, n // GROUP_MIN_ROWS))
    ws = np.empty(0) if w is None else w
    ps = np.empty(0, dtype=np.int64) if perm is None else perm
    out = _route_and_group(
        readonly(codes),
        readonly(f),
        readonly(y),
        readonly(ws),
        readonly(node_idx),
        readonly(ps),
        node_feature,
        node_child_base,
        child_table,
        np.int64(n_nodes),
        np.int64(n_chunks),
        keep_perm,
    )
    codes, f, y, ws, node_idx, ps, starts = out
    return codes, f, y, None if w is None else ws, node_idx, ps if keep_perm else None, starts


# Row chunks of ``route_and_group``: fixed by the row count alone, so the result never depends on threads.
GROUP_CHUNKS = 16
GROUP_MIN_ROWS = 1 << 16


@parallel_rows("codes")
def _route_and_group(
    codes, f, y, w, node_idx, perm, node_feature, node_child_base, child_table, n_nodes, n_chunks, keep_perm
):
    n, d = codes.shape
    chunk = (n + n_chunks - 1) // n_chunks
    routed = np.empty(n, dtype=np.int32)
    counts = np.zeros((n_chunks, n_nodes), dtype=np.int64)
    for c in numba.prange(n_chunks):
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            ui = np.uint64(i)
            # trees_row.route_row's step written out: a call of it here, even inlined, touches the
            # reference counts of its four arrays on every row, most of the pass's time.
            node = node_idx[ui]
            m = node
            if node >= 0:
                j = node_feature[np.uint64(node)]
                if j >= 0:
                    child = child_table[np.uint64(node_child_base[np.uint64(node)] + codes[ui, np.uint64(j)])]
                    if child >= 0:
                        m = child
            routed[ui] = m
            counts[c, m] += 1
    # Node m's run starts after every lighter id; chunk c's rows of m after those of chunks before c.
    starts = np.empty(n_nodes + 1, dtype=np.int64)
    total = 0
    for m in range(n_nodes):
        starts[m] = total
        for c in range(n_chunks):
            k = counts[c, m]
            counts[c, m] = total
            total += k
    starts[n_nodes] = total
    out_codes = np.empty((n, d), dtype=codes.dtype)
    out_f = np.empty(n, dtype=np.float64)
    out_y = np.empty(n, dtype=np.float64)
    out_w = np.empty(w.shape[0], dtype=np.float64)
    out_node = np.empty(n, dtype=np.int32)
    out_perm = np.empty(n if keep_perm else 0, dtype=np.int64)
    has_w, has_perm = w.shape[0] > 0, perm.shape[0] > 0
    for c in numba.prange(n_chunks):
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            ui = np.uint64(i)
            m = routed[ui]
            k = np.uint64(counts[c, m])
            counts[c, m] += 1
            for j in range(d):
                out_codes[k, np.uint64(j)] = codes[ui, np.uint64(j)]
            out_f[k] = f[ui]
            out_y[k] = y[ui]
            if has_w:
                out_w[k] = w[ui]
            out_node[k] = m
            if keep_perm:
                out_perm[k] = perm[ui] if has_perm else i
    return out_codes, out_f, out_y, out_w, out_node, out_perm, starts

r"""Feature-aware Platt's row kernels: the design times a vector, the loss and gradient pass, the
Hessian-vector product's pass.

Fused numba loops on numpy arrays (partial sums in fixed row chunks, so the bits do not depend on the
thread count) and array code on cupy (or on numpy with ``array_code=True``, the tests' switch). Every
function reads one block's arrays; the solver (``_feature_platt_solver``) adds their sums over blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal.calibrators.logistic import EPS, sigmoid, sigmoid_softplus
from gpucal.calibrators.spline import transform_scores
from gpucal.kernels import STAT_WF, STAT_WY, group_sums, value_offsets
from gpucal.kernels.jit import empty_rows, numba, parallel_rows

# Private per-code tables of :func:`code_sums`: at most this many, each of at least CODE_CHUNK_ROWS rows, and
# all of them within CODE_TABLE_BYTES (their count depends on the sizes only, never on the thread count).
MAX_CODE_CHUNKS = 16
CODE_CHUNK_ROWS = 1 << 16
CODE_TABLE_BYTES = 64 << 20


@parallel_rows("x")
def _linear_cpu(x, a, b, coef, codes, offsets, out):
    """``out[i] = a x[i] + b + sum_j coef[offsets[j] + codes[i, j]]`` (one pass, no temporaries)."""
    n_rows, n_features = codes.shape
    for i in numba.prange(n_rows):
        total = a * x[i] + b
        for j in range(n_features):
            total += coef[offsets[j] + codes[i, j]]
        out[i] = total
    return out


@parallel_rows("codes")
def _code_sums_cpu(codes, offsets, n_codes, values, n_chunks):
    """``out[o_j + c_ij] += values[i]`` for every row and column: private tables per row chunk, added in
    chunk order."""
    n_rows, n_features = codes.shape
    n_stats = values.shape[1]
    per_chunk = (n_rows + n_chunks - 1) // n_chunks
    partial = np.zeros((n_chunks, n_codes, n_stats))
    for c in numba.prange(n_chunks):
        table = partial[c]
        for i in range(c * per_chunk, min(n_rows, (c + 1) * per_chunk)):
            for j in range(n_features):
                k = offsets[j] + codes[i, j]
                for m in range(n_stats):
                    table[k, m] += values[i, m]
    out = np.zeros((n_codes, n_stats))
    for c in range(n_chunks):  # fixed order
        out += partial[c]
    return out


@parallel_rows("x")
def _hessian_rows_cpu(x, codes, offsets, v, curvature, n_codes, n_chunks):
    """``du_i = D_i (v_0 x_i + v_1 + sum_j v[2 + o_j + c_ij])``; return ``sum du x`` and ``out[o_j + c_ij] +=
    du_i`` (private tables per row chunk, added in chunk order)."""
    n_rows, n_features = codes.shape
    per_chunk = (n_rows + n_chunks - 1) // n_chunks
    partial = np.zeros((n_chunks, n_codes))
    partial_x = np.zeros(n_chunks)
    for c in numba.prange(n_chunks):
        table = partial[c]
        sx = 0.0
        for i in range(c * per_chunk, min(n_rows, (c + 1) * per_chunk)):
            u = v[0] * x[i] + v[1]
            for j in range(n_features):
                u += v[2 + offsets[j] + codes[i, j]]
            du = curvature[i] * u
            sx += du * x[i]
            for j in range(n_features):
                table[offsets[j] + codes[i, j]] += du
        partial_x[c] = sx
    out = np.zeros(n_codes)
    total_x = 0.0
    for c in range(n_chunks):  # fixed order
        out += partial[c]
        total_x += partial_x[c]
    return total_x, out


@parallel_rows("z")
def _curved_rows_cpu(z, dz, scale, x, y, w, codes, offsets, n_codes, n_chunks, z_out, curvature):
    """At ``z_i + scale dz_i`` (``z_i`` when ``dz`` is empty), written to ``z_out``: write ``D = w p (1 - p)``
    to ``curvature``; return ``[loss, sum r x, sum r, sum D x^2, sum D, sum D x]`` and the table of ``sum r``,
    ``sum D`` per code (``r = w (p - y)``, ``p = sigmoid(z)``, loss ``w (log(1 + e^z) - y z)``): one
    ``exp`` per row, private tables per row chunk added in chunk order."""
    n_rows, n_features = codes.shape
    stepping = dz.shape[0] > 0
    per_chunk = (n_rows + n_chunks - 1) // n_chunks
    partial = np.zeros((n_chunks, n_codes, 2))
    partial_rows = np.zeros((n_chunks, 6))
    for c in numba.prange(n_chunks):
        table = partial[c]
        loss = 0.0
        rx = 0.0
        r_sum = 0.0
        dxx = 0.0
        d_sum = 0.0
        dx = 0.0
        for i in range(c * per_chunk, min(n_rows, (c + 1) * per_chunk)):
            zi = z[i] + scale * dz[i] if stepping else z[i]
            z_out[i] = zi
            pi, softplus, _ = sigmoid_softplus(zi)
            loss += w[i] * (softplus - y[i] * zi)
            r = w[i] * (pi - y[i])
            d = w[i] * pi * (1.0 - pi)
            curvature[i] = d
            rx += r * x[i]
            r_sum += r
            dxx += d * x[i] * x[i]
            d_sum += d
            dx += d * x[i]
            for j in range(n_features):
                k = offsets[j] + codes[i, j]
                table[k, 0] += r
                table[k, 1] += d
        partial_rows[c, 0] = loss
        partial_rows[c, 1] = rx
        partial_rows[c, 2] = r_sum
        partial_rows[c, 3] = dxx
        partial_rows[c, 4] = d_sum
        partial_rows[c, 5] = dx
    out = np.zeros((n_codes, 2))
    row_sums = np.zeros(6)
    for c in range(n_chunks):  # fixed order
        out += partial[c]
        for k in range(6):
            row_sums[k] += partial_rows[c, k]
    return row_sums, out


@parallel_rows("codes")
def _select_columns_cpu(codes, columns):
    """``out[i, k] = codes[i, columns[k]]``, C-contiguous: one pass, where numpy's ``codes[:, columns]``
    gathers into a column-major array that ``ascontiguousarray`` then copies again (4-9x slower)."""
    out = np.empty((codes.shape[0], columns.shape[0]), dtype=codes.dtype)
    for i in numba.prange(codes.shape[0]):
        for k in range(columns.shape[0]):
            out[i, k] = codes[i, columns[k]]
    return out


def select_code_columns(codes: Any, columns: np.ndarray) -> Any:
    """The code columns ``columns`` of ``codes``, C-contiguous (numpy: one compiled pass; cupy: a gather)."""
    if is_cupy_array(codes):
        return array_namespace(codes).ascontiguousarray(codes[:, columns])
    return _select_columns_cpu(np.ascontiguousarray(codes), np.asarray(columns, dtype=np.int64))


def _code_chunks(n_rows: int, n_codes: int, n_vectors: int) -> int:
    """Private tables of a numba scatter pass: their count depends on the sizes only."""
    by_memory = max(1, CODE_TABLE_BYTES // (8 * n_vectors * max(n_codes, 1)))
    return max(1, min(MAX_CODE_CHUNKS, n_rows // CODE_CHUNK_ROWS, by_memory))


def code_sums(codes: Any, n_values: np.ndarray, *vectors: Any, array_code: bool = False) -> np.ndarray:
    r"""Return :math:`\sum_{i: c_{ij} = v} r_i` per code for each row vector :math:`r` of ``vectors`` (one
    or two), shape ``(sum(n_values), len(vectors))``: the one-hot design transposed times the vectors.

    numpy: a numba loop adding 8 bytes per vector, row and column into a table of 8 bytes per vector and
    code, which stays in cache where ``group_sums``' seven padded statistics (64 bytes per code) do not
    (31,000 codes: 0.25 against 2 MB); cupy (or ``array_code``): ``group_sums`` (``WF`` and ``WY`` of
    ``f, y = vectors``).
    """
    n_values = np.asarray(n_values, dtype=np.int64)
    xp = array_namespace(codes)
    n_rows = codes.shape[0]
    if xp is np and not array_code:
        n_codes = int(n_values.sum())
        n_chunks = _code_chunks(n_rows, n_codes, len(vectors))
        values = np.empty((n_rows, len(vectors)))
        for m, v in enumerate(vectors):
            values[:, m] = v
        return _code_sums_cpu(codes, value_offsets(n_values), n_codes, values, n_chunks)
    f, y = vectors if len(vectors) == 2 else (vectors[0], vectors[0])
    stats = to_numpy(group_sums(codes, f, y, None, n_values=n_values)[0])
    return np.ascontiguousarray(stats[:, [STAT_WF, STAT_WY][: len(vectors)]])


def linear_predictor(
    x: Any, a: float, b: float, coef: Any, codes: Any, offsets: np.ndarray, *, array_code: bool = False
) -> Any:
    r"""Return :math:`a x_i + b + \sum_j \text{coef}[o_j + c_{ij}]` per row: the design times a vector.

    numpy: a fused numba loop; cupy: one gather per feature into a slice of ``coef`` (moved to the
    device), so no ``(n, d)`` index array is built.
    """
    xp = array_namespace(x, codes)
    if xp is np and not array_code:
        out = empty_rows(x.shape[0])
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        return _linear_cpu(x, float(a), float(b), coef, codes, offsets, out)
    coef = xp.asarray(coef, dtype=xp.float64)
    out = a * x + b
    for j in range(codes.shape[1]):
        out += coef[int(offsets[j]) :][codes[:, j]]
    return out


def hessian_rows(
    x: Any, codes: Any, n_values: np.ndarray, v: np.ndarray, curvature: Any, *, array_code: bool = False
) -> np.ndarray:
    r"""Return ``[sum D u x, code_sums(codes, D u)]`` (flat) for :math:`u = X v` (``v = [a, b, beta]``): the
    rows' share of a Hessian-vector product :math:`X^\top D X v`.

    numpy: one fused numba pass (the predictor, its product with ``D`` and the scatter per row, no row
    temporaries); cupy (or ``array_code``): :func:`linear_predictor` then :func:`code_sums`.
    """
    n_values = np.asarray(n_values, dtype=np.int64)
    offsets = value_offsets(n_values)
    xp = array_namespace(x, codes)
    if xp is np and not array_code:
        n_codes = int(n_values.sum())
        n_chunks = _code_chunks(codes.shape[0], n_codes, 1)
        v = np.ascontiguousarray(v, dtype=np.float64)
        total_x, sums = _hessian_rows_cpu(x, codes, offsets, v, curvature, n_codes, n_chunks)
        return np.r_[total_x, sums]
    du = curvature * linear_predictor(x, v[0], v[1], v[2:], codes, offsets, array_code=array_code)
    return np.r_[float(xp.sum(du * x)), code_sums(codes, n_values, du, array_code=array_code)[:, 0]]


def curved_rows(
    z: Any,
    dz: Any,
    scale: float,
    x: Any,
    y: Any,
    w: Any,
    codes: Any,
    n_values: np.ndarray,
    *,
    array_code: bool = False,
) -> tuple[Any, Any, np.ndarray]:
    r"""Return the predictor :math:`z' = z + s\, dz` (``z`` when ``dz`` is None), the curvatures
    :math:`D = w p (1 - p)` per row and, flat, the loss :math:`\sum w (\log(1 + e^{z'}) - y z')`,
    ``[sum r x, sum r, sum D x^2, sum D, sum D x]`` and ``code_sums(codes, r, D)`` (:math:`p = \sigma(z')`,
    :math:`r = w (p - y)`): a line-search trial's loss and the gradient pass at it.

    numpy: one fused numba pass (one ``exp`` per row; the sums in :func:`code_sums`' row chunks);
    cupy (or ``array_code``): array code and :func:`code_sums`.
    """
    n_values = np.asarray(n_values, dtype=np.int64)
    xp = array_namespace(z)
    if xp is np and not array_code:
        n_codes = int(n_values.sum())
        n_chunks = _code_chunks(codes.shape[0], n_codes, 2)
        z_out = np.empty_like(z)
        curvature = np.empty_like(z)
        steps = np.zeros(0) if dz is None else dz
        row_sums, stats = _curved_rows_cpu(
            z,
            steps,
            float(scale),
            x,
            y,
            w,
            codes,
            value_offsets(n_values),
            n_codes,
            n_chunks,
            z_out,
            curvature,
        )
        return z_out, curvature, np.concatenate([row_sums, stats.ravel()])
    z_out = z if dz is None else z + scale * dz
    p = sigmoid(z_out)
    residual = w * (p - y)
    curvature = w * p * (1.0 - p)
    row_sums = [
        float(xp.sum(w * (xp.logaddexp(0.0, z_out) - y * z_out))),
        float(residual @ x),
        float(xp.sum(residual)),
        float(curvature @ (x * x)),
        float(xp.sum(curvature)),
        float(curvature @ x),
    ]
    stats = code_sums(codes, n_values, residual, curvature, array_code=array_code)
    return z_out, curvature, np.concatenate([row_sums, stats.ravel()])


#: :func:`nested_codes`' entry for a code that no row of positive weight has.
NO_ROWS = -1
#: :func:`nested_codes`' entries of a pair of columns that is not nested (its whole column block).
NOT_NESTED = -2


@numba.njit(cache=True)
def _nested_codes_cpu(codes, positive, offsets, n_values, table):  # pragma: no cover - compiled
    """Fill ``table`` (:func:`nested_codes`' layout, :data:`NO_ROWS` throughout) in one pass over the rows
    of positive weight (``positive``): a pair of columns leaves the pass at its first row whose code of
    the parent column differs from the one recorded for its code of the child, so the rows cost only the
    pairs that are still nested."""
    n_rows = codes.shape[0]
    n_columns = n_values.shape[0]
    children = np.empty(n_columns * n_columns, dtype=np.int64)
    parents = np.empty(n_columns * n_columns, dtype=np.int64)
    n_pairs = 0
    for k in range(n_columns):
        for j in range(n_columns):
            if j != k:
                children[n_pairs] = k
                parents[n_pairs] = j
                n_pairs += 1
    alive = n_pairs  # pairs [0, alive) are nested so far
    for i in range(n_rows):
        if alive == 0:
            break
        if not positive[i]:
            continue
        p = 0
        while p < alive:
            k = children[p]
            j = parents[p]
            entry = offsets[k] + codes[i, k]
            code = np.int64(codes[i, j])
            seen = table[entry, j]
            if seen == NO_ROWS:
                table[entry, j] = code
                p += 1
            elif seen == code:
                p += 1
            else:  # not nested: swap the pair out of the live ones
                alive -= 1
                children[p], children[alive] = children[alive], children[p]
                parents[p], parents[alive] = parents[alive], parents[p]
    for p in range(alive, n_pairs):
        k = children[p]
        table[offsets[k] : offsets[k] + n_values[k], parents[p]] = NOT_NESTED
    for k in range(n_columns):
        table[offsets[k] : offsets[k] + n_values[k], k] = NOT_NESTED
    return table


def nested_codes(codes: Any, w: Any, n_values: np.ndarray, *, array_code: bool = False) -> np.ndarray:
    r"""Which code columns nest in which: for columns :math:`k \ne j` of the first ``len(n_values)`` of
    ``codes`` and each code :math:`v` of :math:`k`, the one code of :math:`j` that every row of positive
    weight with code :math:`v` has.

    Returns the host table ``T`` of shape ``(sum(n_values), n_columns)``, int64: ``T[o_k + v, j]`` is that
    code of :math:`j` (``o_k`` the offset of column :math:`k`'s codes), :data:`NO_ROWS` where no such row
    has :math:`v`, and :data:`NOT_NESTED` throughout the block ``T[o_k : o_k + n_k, j]`` when two rows
    of one code of :math:`k` have different codes of :math:`j` (and for :math:`j = k`). A column
    :math:`k` nested in :math:`j` (a pre-computed cross of :math:`j` and another column, a site within
    its publisher) makes directions that change no row's predictor: :math:`j`'s code :math:`u` up, the
    codes of :math:`k` within :math:`u` down (``_feature_platt_solver.null_directions``). Blocks combine
    by :func:`merge_nested_codes`.

    numpy: one pass that drops each pair at its first conflicting row (:func:`_nested_codes_cpu`); cupy
    (or ``array_code``): per pair, one code of :math:`j` recorded per code of :math:`k` (any row's) and
    every row compared with it.
    """
    n_values = np.asarray(n_values, dtype=np.int64)
    offsets = value_offsets(n_values)
    n_columns = n_values.shape[0]
    xp = array_namespace(codes)
    if xp is np and not array_code:
        table = np.full((int(n_values.sum()), n_columns), NO_ROWS, dtype=np.int64)
        # The whole C-ordered codes and a fresh mask: one compiled signature per code width.
        return _nested_codes_cpu(codes, np.asarray(w > 0), offsets, n_values, table)
    table = np.full((int(n_values.sum()), n_columns), NOT_NESTED, dtype=np.int64)
    kept = codes[w > 0][:, :n_columns].astype(xp.int64)
    for k in range(n_columns):
        block = slice(int(offsets[k]), int(offsets[k] + n_values[k]))
        for j in range(n_columns):
            if j == k:
                continue
            recorded = xp.full(int(n_values[k]), NO_ROWS, dtype=xp.int64)
            recorded[kept[:, k]] = kept[:, j]
            if not bool(xp.any(recorded[kept[:, k]] != kept[:, j])):
                table[block, j] = to_numpy(recorded)
    return table


def merge_nested_codes(*tables: np.ndarray) -> np.ndarray:
    """:func:`nested_codes` over the rows of several blocks from each block's table: a code's entry is the
    one block's code where the others have no row of it, :data:`NOT_NESTED` where two blocks differ
    (which the caller reads as the pair not nested)."""
    merged = tables[0]
    for other in tables[1:]:
        merged = np.where(
            merged == NO_ROWS, other, np.where((other == NO_ROWS) | (other == merged), merged, NOT_NESTED)
        )
    return merged


def score_feature(score: Any, score_kind: str) -> Any:
    """Return the model's score feature: ``logit(clip(p, EPS, 1 - EPS))`` or the raw margin
    (``gpucal.calibrators.spline.transform_scores`` at ``EPS``)."""
    return transform_scores(score, EPS, score_kind)


def predict_feature_platt(
    x: Any,
    codes: Any,
    n_values: Any,
    coef_score: float,
    intercept: float,
    coef: Any,
    *,
    array_code: bool = False,
) -> Any:
    r"""Return :math:`\sigma(b + a x + \sum_j \beta_{o_j + c_{ij}})` per row (numpy or cupy)."""
    offsets = value_offsets(np.asarray(n_values, dtype=np.int64))
    return sigmoid(linear_predictor(x, coef_score, intercept, coef, codes, offsets, array_code=array_code))


def on_device(a: Any, device: str) -> Any:
    """Return ``a`` on the resolved ``device`` ("cpu" or "gpu"), copying only when it is elsewhere."""
    if device == "cpu":
        return to_numpy(a)
    if is_cupy_array(a):
        return a
    import cupy

    return cupy.asarray(a)


__all__ = [
    "NOT_NESTED",
    "NO_ROWS",
    "code_sums",
    "curved_rows",
    "hessian_rows",
    "linear_predictor",
    "merge_nested_codes",
    "nested_codes",
    "on_device",
    "predict_feature_platt",
    "score_feature",
]

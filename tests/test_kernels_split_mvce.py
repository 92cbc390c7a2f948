"""MVCE split sums: CPU twin against the oracle, against a brute force over view_bins, and Eq. 10."""

from __future__ import annotations

import itertools
import math

import numba
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import gpucal.kernels.split_mvce_cpu
from gpucal.kernels import (
    LEAF_PLATT,
    LEAF_SCALE,
    LEAF_SHIFT,
    SPLIT_W,
    mvce_from_split_sums,
    mvce_split_sums,
    value_offsets,
    view_bins,
)

# float64 sums of at most a few thousand O(1) terms in another order.
RTOL = 1e-12
ATOL = 1e-12
EPS = float(np.finfo(np.float64).eps)
LEAF_MAPS = [LEAF_SCALE, LEAF_SHIFT, LEAF_PLATT]


def make_case(
    rng,
    slot_sizes,
    *,
    n_values=(3, 5, 2),
    n_skipped=50,
    slot_bins=None,
    code_dtype=np.int8,
    float_dtype=np.float64,
    weights=True,
):
    """Rows of ``len(slot_sizes)`` nodes plus ``n_skipped`` rows with slot -1, shuffled; random maps."""
    slot = np.concatenate([np.full(k, s) for s, k in enumerate(slot_sizes)] + [np.full(n_skipped, -1)])
    slot = rng.permutation(slot).astype(np.int32)
    n = slot.shape[0]
    local_row = np.zeros(n, dtype=np.int64)
    for s, k in enumerate(slot_sizes):
        local_row[slot == s] = rng.permutation(k)
    codes = np.stack([rng.integers(0, k, n) for k in n_values], axis=1).astype(code_dtype)
    # f spans [0, 1] with the clipping edges, so scale maps hit min(., 1) and logits hit the clip.
    f = rng.random(n)
    f[:3] = [0.0, 1.0, 0.999][:n]
    f = f.astype(float_dtype)
    y = (rng.random(n) < 0.4).astype(float_dtype)
    w = (rng.random(n) + 0.5).astype(float_dtype) if weights else None
    n_slots = len(slot_sizes)
    if slot_bins is None:
        slot_bins = [max(1, k // 7) for k in slot_sizes]
    slot_bins = np.asarray(slot_bins, dtype=np.int64)
    # Bin ranges in reverse slot order with a gap: the layout is the caller's.
    slot_bin_start = np.zeros(n_slots, dtype=np.int64)
    at = 2
    for s in reversed(range(n_slots)):
        slot_bin_start[s] = at
        at += int(slot_bins[s]) + 1
    child_value = np.stack(
        [rng.uniform(0.5, 1.8, (n_slots, sum(n_values))), rng.normal(0, 0.5, (n_slots, sum(n_values)))],
        axis=2,
    )
    node_value = np.stack([rng.uniform(0.5, 1.8, n_slots), rng.normal(0, 0.5, n_slots)], axis=1)
    args = (
        codes,
        f,
        y,
        w,
        slot,
        local_row,
        np.asarray(slot_sizes, dtype=np.int64),
        slot_bins,
        slot_bin_start,
        child_value,
        node_value,
    )
    return args, np.asarray(n_values, dtype=np.int64)


def both(args, leaf_map, **kwargs):
    got = mvce_split_sums(*args, leaf_map, backend="cpu", **kwargs)
    want = mvce_split_sums(*args, leaf_map, backend="oracle", **kwargs)
    assert got.dtype == np.float64
    assert got.shape == want.shape
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return got


@pytest.mark.parametrize("weights", [True, False])
@pytest.mark.parametrize("leaf_map", LEAF_MAPS)
@pytest.mark.parametrize(
    ("code_dtype", "float_dtype"), [(np.int8, np.float64), (np.int16, np.float32), (np.int64, np.float64)]
)
def test_cpu_matches_oracle(leaf_map, weights, code_dtype, float_dtype):
    rng = np.random.default_rng(leaf_map)
    # Nodes of different sizes: one row, fewer rows than bins, a remainder, an empty node.
    sizes = [400, 1, 37, 250, 0]
    args, n_values = make_case(
        rng,
        sizes,
        slot_bins=[57, 1, 50, 9, 3],
        code_dtype=code_dtype,
        float_dtype=float_dtype,
        weights=weights,
    )
    got = both(args, leaf_map, n_views=5, seed=2**64 + 3, n_values=n_values)
    slot_bins, slot_bin_start = args[7], args[8]
    assert got.shape == (5, int((slot_bin_start + slot_bins).max()), 4, 2)
    # Each view holds every row once, in every column.
    w = np.ones(len(args[4])) if args[3] is None else args[3].astype(np.float64)
    assert_allclose(got[..., SPLIT_W].sum(axis=1), w[args[4] >= 0].sum(), rtol=RTOL)
    # The weight does not depend on the candidate.
    assert_array_equal(got[..., SPLIT_W], np.repeat(got[..., :1, SPLIT_W], 4, axis=2))
    # Bins outside every node's range stay zero.
    used = np.zeros(got.shape[1], dtype=bool)
    for start, k in zip(slot_bin_start, slot_bins, strict=True):
        used[start : start + k] = True
    assert not got[:, ~used].any()


@pytest.mark.parametrize("leaf_map", LEAF_MAPS)
def test_view_chunks_concatenate(leaf_map):
    rng = np.random.default_rng(10)
    args, n_values = make_case(rng, [120, 61, 300])
    kwargs = {"seed": 7, "n_values": n_values}
    for backend in ("cpu", "oracle"):
        whole = mvce_split_sums(*args, leaf_map, n_views=4, backend=backend, **kwargs)
        parts = [
            mvce_split_sums(*args, leaf_map, n_views=2, view_start=0, backend=backend, **kwargs),
            mvce_split_sums(*args, leaf_map, n_views=1, view_start=2, backend=backend, **kwargs),
            mvce_split_sums(*args, leaf_map, n_views=1, view_start=3, backend=backend, **kwargs),
        ]
        assert_array_equal(np.concatenate(parts), whole)
    # Different views do differ.
    assert not np.array_equal(whole[0], whole[1])


def test_row_blocks_do_not_change_the_result(monkeypatch):
    """The twin's row blocks (cut across nodes) change memory use, not one bit of the sums."""
    rng = np.random.default_rng(11)
    args, n_values = make_case(rng, [500, 333, 1, 700], n_skipped=200)
    kwargs = {"n_views": 3, "seed": 1, "n_values": n_values}
    default = mvce_split_sums(*args, LEAF_PLATT, backend="cpu", **kwargs)
    for rows in (1, 37, 512, 1000):
        monkeypatch.setattr(
            gpucal.kernels.split_mvce_cpu, "block_rows_for", lambda n_columns, rows=rows: rows
        )
        assert_array_equal(mvce_split_sums(*args, LEAF_PLATT, backend="cpu", **kwargs), default)


def test_repeated_runs_and_thread_counts_are_bit_identical():
    rng = np.random.default_rng(12)
    args, n_values = make_case(rng, [3000, 1500])
    kwargs = {"n_views": 6, "seed": 3, "n_values": n_values}
    first = mvce_split_sums(*args, LEAF_SHIFT, backend="cpu", **kwargs)
    assert_array_equal(mvce_split_sums(*args, LEAF_SHIFT, backend="cpu", **kwargs), first)
    # Each view is one task adding its rows in order: the thread count cannot change a bit.
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert_array_equal(mvce_split_sums(*args, LEAF_SHIFT, backend="cpu", **kwargs), first)
    finally:
        numba.set_num_threads(threads)


def test_partitions_add_up_to_the_whole():
    """A Dask partition passes its rows with their node-local ids: the sums of the parts are the whole's."""
    rng = np.random.default_rng(13)
    args, n_values = make_case(rng, [400, 250])
    kwargs = {"n_views": 3, "seed": 9, "n_values": n_values}
    whole = mvce_split_sums(*args, LEAF_SCALE, backend="cpu", **kwargs)
    n = args[0].shape[0]
    cuts = [0, 1, 300, 301, n]
    for backend in ("cpu", "oracle"):
        parts = 0
        for a, b in itertools.pairwise(cuts):
            rows = tuple(x[a:b] if x is not None else None for x in args[:6])
            parts = parts + mvce_split_sums(*rows, *args[6:], LEAF_SCALE, backend=backend, **kwargs)
        assert_allclose(parts, whole, rtol=RTOL, atol=ATOL)


def test_common_random_numbers_across_candidates():
    """With every child's map equal to the node's, every candidate column holds the same sums."""
    rng = np.random.default_rng(14)
    args = list(make_case(rng, [200, 90])[0])
    n_values = np.array([3, 5, 2])
    args[9] = np.repeat(args[10][:, None, :], n_values.sum(), axis=1)
    for backend in ("cpu", "oracle"):
        got = mvce_split_sums(*args, LEAF_PLATT, n_views=3, seed=4, n_values=n_values, backend=backend)
        assert_array_equal(got, np.repeat(got[:, :, 3:], 4, axis=2))


def brute_force(args, leaf_map, n_views, view_start, seed, n_values, bin_size):
    """Plain Python loops over rows and views; bins from ``gpucal.kernels.views.view_bins`` per node."""
    codes, f, y, w, slot, local_row, slot_rows, slot_bins, slot_bin_start, child_value, node_value = args
    n, d = codes.shape
    offsets = value_offsets(n_values)
    total = int((slot_bin_start + slot_bins).max())
    out = np.zeros((n_views, total, d + 1, 2))
    node_bins = {}
    for s in range(len(slot_rows)):
        bins = view_bins(
            int(slot_rows[s]), n_views=view_start + n_views, bin_size=bin_size[s], seed=seed, backend="cpu"
        )
        assert bins.shape == (view_start + n_views, slot_rows[s])
        # One exact uniform-mass partition per view: sizes differ by at most one, every row kept.
        for row in bins:
            sizes = np.bincount(row, minlength=slot_bins[s])
            assert sizes.shape == (slot_bins[s],)
            assert sizes.sum() == slot_rows[s]
            assert sizes.max() - sizes.min() <= 1
        node_bins[s] = bins[view_start:]
    for i in range(n):
        s = int(slot[i])
        if s < 0:
            continue
        wi = 1.0 if w is None else float(w[i])
        fi = float(f[i])
        maps = [child_value[s, offsets[j] + codes[i, j]] for j in range(d)] + [node_value[s]]
        for j, (a, b) in enumerate(maps):
            if leaf_map == LEAF_SCALE:
                q = min(a * fi, 1.0)
            else:
                p = min(max(fi, EPS), 1.0 - EPS)
                q = 1.0 / (1.0 + math.exp(-(a * math.log(p / (1.0 - p)) + b)))
            for v in range(n_views):
                g = slot_bin_start[s] + node_bins[s][v, local_row[i]]
                out[v, g, j, 0] += wi * (q - float(y[i]))
                out[v, g, j, 1] += wi
    return out


@pytest.mark.parametrize("leaf_map", LEAF_MAPS)
def test_brute_force_over_view_bins(leaf_map):
    rng = np.random.default_rng(20 + leaf_map)
    # Node 0: 23 rows in 4 bins (view_bins' bin_size 5: 23 // 5 = 4, sizes 5 and 6); node 1: 10 rows, 3 bins.
    args, n_values = make_case(rng, [23, 10], slot_bins=[4, 3], n_skipped=6, n_values=(2, 4))
    kwargs = {"n_views": 3, "view_start": 2, "seed": 123, "n_values": n_values}
    want = brute_force(args, leaf_map, 3, 2, 123, n_values, bin_size=[5, 3])
    for backend in ("cpu", "oracle"):
        assert_allclose(
            mvce_split_sums(*args, leaf_map, backend=backend, **kwargs), want, rtol=RTOL, atol=ATOL
        )


def mvce_loops(sums, slot_bins, slot_bin_start, p):
    """Eq. 10 with plain loops; zero-weight bins are left out of t_i, a view without weight gives NaN."""
    n_views, _, n_columns, _ = sums.shape
    out = np.empty((len(slot_bins), n_columns))
    for s in range(len(slot_bins)):
        for j in range(n_columns):
            total = 0.0
            for v in range(n_views):
                errors = []
                for g in range(slot_bin_start[s], slot_bin_start[s] + slot_bins[s]):
                    residual, weight = sums[v, g, j]
                    if weight > 0:
                        errors.append(abs(residual) / weight)
                total += (sum(errors) / len(errors)) ** p if errors else math.nan
            out[s, j] = (total / n_views) ** (1.0 / p)
    return out


@pytest.mark.parametrize("p", [1, 2, 3.5])
def test_mvce_from_split_sums_is_eq_10(p):
    rng = np.random.default_rng(30)
    args, n_values = make_case(rng, [300, 77, 5, 0], slot_bins=[10, 4, 8, 2])
    # Zero weights: some bins of node 2 (5 rows, 8 bins) are empty anyway; node 3 has no rows at all.
    w = args[3].copy()
    w[rng.random(len(w)) < 0.05] = 0.0
    args = (*args[:3], w, *args[4:])
    sums = mvce_split_sums(*args, LEAF_SHIFT, n_views=6, seed=0, n_values=n_values, backend="cpu")
    slot_bins, slot_bin_start = args[7], args[8]
    got = mvce_from_split_sums(sums, slot_bins, slot_bin_start, p)
    want = mvce_loops(sums, slot_bins, slot_bin_start, p)
    assert got.shape == (4, 4)
    assert_allclose(got, want, rtol=1e-13, atol=0)
    assert np.isfinite(got[:3]).all()
    assert np.isnan(got[3]).all()


def test_mvce_picks_the_feature_that_explains_the_bias():
    """Eq. 12 end to end: child maps fitted as k = sum w y / sum w f; the biased feature wins."""
    rng = np.random.default_rng(31)
    n = 40_000
    n_values = np.array([4, 4, 6])
    codes = np.stack([rng.integers(0, k, n) for k in n_values], axis=1).astype(np.int8)
    f = rng.uniform(0.05, 0.4, n)
    truth = f * np.array([0.5, 0.8, 1.3, 1.9])[codes[:, 1]]
    y = (rng.random(n) < truth).astype(np.float64)
    slot = np.zeros(n, dtype=np.int32)
    local_row = np.arange(n)
    offsets = value_offsets(n_values)
    child_value = np.zeros((1, n_values.sum(), 2))
    for j in range(3):
        for v in range(n_values[j]):
            rows = codes[:, j] == v
            child_value[0, offsets[j] + v, 0] = y[rows].sum() / f[rows].sum()
    node_value = np.array([[y.sum() / f.sum(), 0.0]])
    sums = mvce_split_sums(
        codes,
        f,
        y,
        None,
        slot,
        local_row,
        np.array([n]),
        np.array([n // 400]),
        np.array([0]),
        child_value,
        node_value,
        LEAF_SCALE,
        n_views=20,
        seed=5,
        n_values=n_values,
    )
    mvce = mvce_from_split_sums(sums, np.array([n // 400]), np.array([0]))[0]
    # Random bins average a segment bias away: the gain shows only through the residual spread (a few %).
    assert np.argmin(mvce) == 1
    assert mvce[1] < 0.97 * min(mvce[0], mvce[2], mvce[3])


@pytest.mark.parametrize("backend", ["cpu", "oracle"])
def test_empty_inputs(backend):
    rng = np.random.default_rng(40)
    args, n_values = make_case(rng, [0, 0], n_skipped=0)
    got = mvce_split_sums(*args, LEAF_SCALE, n_views=2, seed=0, n_values=n_values, backend=backend)
    assert got.shape == (2, int((args[8] + args[7]).max()), 4, 2)
    assert not got.any()
    # No slots at all, and no features (only the unsplit column).
    none = mvce_split_sums(
        np.zeros((3, 0), np.int8),
        np.full(3, 0.5),
        np.ones(3),
        None,
        np.full(3, -1),
        np.zeros(3, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros((0, 0, 2)),
        np.zeros((0, 2)),
        LEAF_SCALE,
        n_views=2,
        seed=0,
        n_values=np.zeros(0, np.int64),
        backend=backend,
    )
    assert none.shape == (2, 0, 1, 2)
    assert mvce_from_split_sums(none, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0, 1)


def bad_input_cases():
    def put(index, value):
        def change(args, kwargs):
            args[index] = value(args[index]) if callable(value) else value

        return change

    def kw(name, value):
        def change(args, kwargs):
            kwargs[name] = value

        return change

    def set_at(index, where, value):
        def change(args, kwargs):
            a = args[index].copy()
            a[where] = value
            args[index] = a

        return change

    return [
        ("codes-1d", put(0, lambda a: a[:, 0]), ValueError, "codes must be two-dimensional"),
        ("codes-float", put(0, lambda a: a.astype(float)), TypeError, "codes must hold integer"),
        (
            "codes-range",
            set_at(0, (0, 1), 5),
            ValueError,
            r"codes of feature 1 must lie in \[0, n_values\[1\]\)",
        ),
        ("codes-negative", set_at(0, (4, 0), -1), ValueError, "codes of feature 0"),
        ("f-length", put(1, lambda a: a[1:]), ValueError, "f must be one-dimensional"),
        ("y-2d", put(2, lambda a: a[:, None]), ValueError, "y must be one-dimensional"),
        ("w-length", put(3, lambda a: a[:-1]), ValueError, "w must be one-dimensional"),
        ("f-str", put(1, lambda a: a.astype(str)), TypeError, "f must hold real numbers"),
        ("slot-float", put(4, lambda a: a.astype(float)), TypeError, "slot must hold integers"),
        ("slot-range", set_at(4, 0, 2), ValueError, r"slot must lie in \[-1, n_slots\)"),
        ("slot-below", set_at(4, 0, -2), ValueError, r"slot must lie in \[-1, n_slots\)"),
        ("local-float", put(5, lambda a: a.astype(float)), TypeError, "local_row must hold integers"),
        ("local-range", put(5, lambda a: a + 1000), ValueError, r"local_row must lie in \[0, slot_rows"),
        ("local-negative", put(5, lambda a: a - 1), ValueError, r"local_row must lie in \[0, slot_rows"),
        ("slot-rows-len", put(6, np.array([40])), ValueError, "slot_bins must be one-dimensional with 1"),
        (
            "slot-rows-big",
            put(6, np.array([2**62 + 1, 30])),
            ValueError,
            r"slot_rows must lie in \[0, 2\*\*62\]",
        ),
        ("slot-rows-neg", put(6, np.array([-1, 30])), ValueError, r"slot_rows must lie in \[0, 2\*\*62\]"),
        ("slot-rows-float", put(6, np.array([40.0, 30.0])), TypeError, "slot_rows must hold integers"),
        (
            "slot-bins-zero",
            put(7, np.array([0, 3])),
            ValueError,
            r"slot_bins must be >= 1.*slot_bins\[0\] = 0",
        ),
        ("slot-bins-len", put(7, np.array([3])), ValueError, "slot_bins must be one-dimensional with 2"),
        (
            "bin-product",
            put(6, np.array([2**62, 30])),
            ValueError,
            "overflows the 64-bit bin arithmetic",
        ),
        ("start-negative", put(8, np.array([-1, 20])), ValueError, "slot_bin_start must be >= 0"),
        ("start-overlap", put(8, np.array([0, 4])), ValueError, "bin ranges of slots 0 and 1 overlap"),
        ("child-shape", put(9, lambda a: a[:, :-1]), ValueError, r"child_value must have shape \(2, 10, 2\)"),
        ("child-nan", set_at(9, (0, 0, 0), np.nan), ValueError, "child_value must be finite"),
        ("node-shape", put(10, lambda a: a[:1]), ValueError, r"node_value must have shape \(2, 2\)"),
        ("node-inf", set_at(10, (1, 1), np.inf), ValueError, "node_value must be finite"),
        ("leaf-map", put(11, 3), ValueError, "'leaf_map' parameter must be one of"),
        ("leaf-map-bool", put(11, True), ValueError, "'leaf_map' parameter must be one of"),
        ("n-views", kw("n_views", 0), ValueError, "'n_views' parameter must be an int"),
        ("view-start", kw("view_start", -1), ValueError, "'view_start' parameter must be an int"),
        ("view-start-big", kw("view_start", 2**63), ValueError, "view_start \\+ n_views must be at most"),
        ("seed", kw("seed", 1.5), ValueError, "'seed' parameter must be an int"),
        (
            "n-values-len",
            kw("n_values", np.array([3, 5])),
            ValueError,
            "n_values must be one-dimensional with 3",
        ),
        (
            "n-values-neg",
            kw("n_values", np.array([3, 5, -2])),
            ValueError,
            "n_values must hold 3 non-negative",
        ),
        ("backend", kw("backend", "gpu"), ValueError, "'backend' parameter must be one of"),
    ]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [case[1:] for case in bad_input_cases()],
    ids=[case[0] for case in bad_input_cases()],
)
def test_bad_inputs_raise(change, error, match):
    rng = np.random.default_rng(50)
    args, n_values = make_case(rng, [40, 30], slot_bins=[5, 3])
    args = [*args, LEAF_SCALE]
    kwargs = {"n_views": 2, "seed": 0, "n_values": n_values, "backend": "cpu"}
    mvce_split_sums(*args, **kwargs)  # the unchanged case is valid
    change(args, kwargs)
    with pytest.raises(error, match=match):
        mvce_split_sums(*args, **kwargs)


def test_mvce_from_split_sums_bad_inputs():
    sums = np.zeros((2, 6, 3, 2))
    bins, start = np.array([2, 3]), np.array([0, 3])
    with pytest.raises(ValueError, match="sums must have shape"):
        mvce_from_split_sums(sums[..., :1], bins, start)
    with pytest.raises(ValueError, match="'p' parameter must be a finite real number > 0"):
        mvce_from_split_sums(sums, bins, start, 0)
    with pytest.raises(ValueError, match="'p' parameter must be a finite real number > 0"):
        mvce_from_split_sums(sums, bins, start, np.inf)
    with pytest.raises(ValueError, match="past the 6 bins of sums"):
        mvce_from_split_sums(sums, bins, np.array([0, 4]))
    with pytest.raises(ValueError, match="slot_bin_start must be one-dimensional with 2"):
        mvce_from_split_sums(sums, bins, start[:1])
    with pytest.raises(ValueError, match="overlap"):
        mvce_from_split_sums(sums, bins, np.array([0, 1]))

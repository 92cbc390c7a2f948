"""MVCE views: exact uniform-mass partitions, bijective permutations, backends and partitions agree."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from gpucal.kernels import N_VIEW_STATS, VIEW_COUNT, VIEW_W, VIEW_WP, VIEW_WY, view_bins, view_sums
from gpucal.kernels._feistel import bin_of, feistel, feistel_domain, permute, view_keys

# float64 sums of at most a few thousand O(1) terms in another order.
RTOL = 1e-12
ATOL = 1e-12


def check_partition(bins, n_total, bin_size):
    n_bins = max(1, n_total // bin_size)
    assert bins.dtype == np.int32
    for row in bins:
        sizes = np.bincount(row, minlength=n_bins)
        assert sizes.shape == (n_bins,)
        assert sizes.sum() == n_total
        if n_total >= bin_size:
            assert sizes.min() >= bin_size
            assert sizes.max() <= 2 * bin_size - 1
            assert sizes.max() - sizes.min() <= 1
        else:
            assert sizes.tolist() == [n_total]


@settings(max_examples=30, deadline=None)
@given(
    n_total=st.integers(0, 3000),
    bin_size=st.integers(1, 400),
    n_views=st.integers(1, 4),
    seed=st.integers(0, 2**64 - 1),
)
def test_views_are_exact_uniform_mass_partitions(n_total, bin_size, n_views, seed):
    bins = view_bins(n_total, n_views=n_views, bin_size=bin_size, seed=seed, backend="cpu")
    assert bins.shape == (n_views, n_total)
    check_partition(bins, n_total, bin_size)
    assert_array_equal(
        bins, view_bins(n_total, n_views=n_views, bin_size=bin_size, seed=seed, backend="oracle")
    )


@pytest.mark.parametrize("n_total", [1, 2, 3, 5, 64, 65, 1000, 4097])
def test_permutation_is_a_bijection(n_total):
    right_bits, n_left = feistel_domain(n_total)
    domain = n_left << right_bits
    # Both halves are used, and the domain overshoots n_total by less than one right half.
    assert right_bits >= 1
    assert n_total <= domain < n_total + (1 << right_bits)
    keys = view_keys(np.uint64(12345), 2)
    images = [permute(np.uint64(r), np.uint64(n_total), keys, right_bits, n_left) for r in range(n_total)]
    assert sorted(images) == list(range(n_total))
    full = [feistel(np.uint64(x), keys, right_bits, n_left) for x in range(domain)]
    assert sorted(full) == list(range(domain))


@pytest.mark.parametrize("n_total", [2**20, 2**20 + 1, 10**7, 2**40 + 3])
def test_domain_and_bin_arithmetic_at_scale(n_total):
    right_bits, n_left = feistel_domain(n_total)
    assert right_bits <= 32
    assert n_left <= 2**32
    assert n_total <= n_left << right_bits < n_total + (1 << right_bits)
    # bin_of's float64 estimate plus one exact correction equals the integer quotient, at the edges too.
    rng = np.random.default_rng(n_total)
    xs = np.concatenate([np.arange(3), n_total - 1 - np.arange(3), rng.integers(0, n_total, 1000)])
    for n_bins in (1, 7, max(1, n_total // 1000), min(n_total, (2**64 - 1) // n_total)):
        want = (xs.astype(object) * n_bins) // n_total
        got = [bin_of(np.uint64(x), np.uint64(n_total), np.uint64(n_bins)) for x in xs]
        assert got == list(want)


def test_views_differ_between_views_and_seeds():
    a = view_bins(2000, n_views=3, bin_size=100, seed=1, backend="cpu")
    b = view_bins(2000, n_views=3, bin_size=100, seed=2, backend="cpu")
    assert not (a[0] == a[1]).all()
    assert not (a[0] == b[0]).all()
    # A random partition into 20 bins puts about 1/20 of the rows in the same bin as another view does.
    assert (a[0] == a[1]).mean() < 0.15


def test_rows_subset_matches_full():
    full = view_bins(500, n_views=2, bin_size=40, seed=9, backend="cpu")
    rows = np.array([499, 0, 17, 17, 250])
    assert_array_equal(
        view_bins(500, n_views=2, bin_size=40, seed=9, rows=rows, backend="cpu"), full[:, rows]
    )
    assert_array_equal(
        view_bins(500, n_views=2, bin_size=40, seed=9, rows=rows, backend="oracle"), full[:, rows]
    )


@pytest.mark.parametrize("weights", [True, False])
@pytest.mark.parametrize("float_dtype", [np.float32, np.float64])
def test_view_sums_cpu_matches_oracle(weights, float_dtype):
    rng = np.random.default_rng(0)
    n = 1234
    p = rng.random(n).astype(float_dtype)
    y = (rng.random(n) < p).astype(float_dtype)
    w = (rng.random(n) + 0.5).astype(float_dtype) if weights else None
    kwargs = {"n_views": 5, "bin_size": 50, "seed": 77}
    got = view_sums(p, y, w, backend="cpu", **kwargs)
    want = view_sums(p, y, w, backend="oracle", **kwargs)
    assert got.shape == (5, n // 50, N_VIEW_STATS)
    assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    bins = view_bins(n, backend="cpu", **kwargs)
    w64 = np.ones(n) if w is None else w.astype(np.float64)
    for v in range(5):
        assert_array_equal(got[v, :, VIEW_COUNT], np.bincount(bins[v], minlength=n // 50))
        assert_allclose(got[v, :, VIEW_W], np.bincount(bins[v], w64, n // 50), rtol=RTOL)
        assert_allclose(got[v, :, VIEW_WP], np.bincount(bins[v], w64 * p, n // 50), rtol=RTOL)
        assert_allclose(got[v, :, VIEW_WY], np.bincount(bins[v], w64 * y, n // 50), rtol=RTOL)


def test_partitions_add_up_to_the_whole():
    rng = np.random.default_rng(1)
    n = 3001
    p, y, w = rng.random(n), rng.integers(0, 2, n).astype(np.float64), rng.random(n)
    kwargs = {"n_views": 4, "bin_size": 100, "seed": 5}
    whole = view_sums(p, y, w, backend="cpu", **kwargs)
    cuts = [0, 1, 700, 701, 2000, n]
    for backend in ("cpu", "oracle"):
        parts = sum(
            view_sums(p[a:b], y[a:b], w[a:b], row_offset=a, n_total=n, backend=backend, **kwargs)
            for a, b in itertools.pairwise(cuts)
        )
        assert_allclose(parts, whole, rtol=RTOL, atol=ATOL)


def test_repeated_runs_are_bit_identical():
    rng = np.random.default_rng(2)
    p, y = rng.random(20_000), rng.random(20_000)
    first = view_sums(p, y, n_views=8, bin_size=300, seed=3, backend="cpu")
    for _ in range(3):
        assert_array_equal(view_sums(p, y, n_views=8, bin_size=300, seed=3, backend="cpu"), first)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_small_inputs(n):
    p = np.linspace(0, 1, n)
    got = view_sums(p, p, n_views=2, bin_size=10, seed=0, backend="cpu")
    assert got.shape == (2, 1, N_VIEW_STATS)
    assert_allclose(got, view_sums(p, p, n_views=2, bin_size=10, seed=0, backend="oracle"), rtol=RTOL)
    assert_array_equal(got[:, 0, VIEW_COUNT], [n, n])


def test_seed_is_taken_modulo_2_64():
    assert_array_equal(
        view_bins(300, n_views=2, bin_size=7, seed=-1, backend="cpu"),
        view_bins(300, n_views=2, bin_size=7, seed=2**64 - 1, backend="cpu"),
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_views": 0}, r"The 'n_views' parameter must be an int in \[1, inf\)"),
        ({"bin_size": 0}, r"The 'bin_size' parameter must be an int in \[1, inf\)"),
        ({"seed": 1.5}, r"The 'seed' parameter must be an int"),
        ({"row_offset": 3}, "n_total must be given with row_offset"),
        ({"row_offset": 3, "n_total": 5}, r"row_offset \+ len\(p\) = 7 exceeds n_total = 5"),
        ({"row_offset": -1, "n_total": 5}, r"The 'row_offset' parameter must be an int in \[0, inf\)"),
        ({"backend": "gpu"}, "The 'backend' parameter must be one of"),
    ],
)
def test_view_sums_errors(kwargs, match):
    p = np.full(4, 0.5)
    with pytest.raises(ValueError, match=match):
        view_sums(p, p, **{"n_views": 2, "bin_size": 2, "seed": 0, **kwargs})


def test_view_bins_errors():
    with pytest.raises(ValueError, match=r"rows must lie in \[0, n_total\) = \[0, 10\)"):
        view_bins(10, n_views=1, bin_size=2, seed=0, rows=np.array([3, 10]))
    with pytest.raises(ValueError, match="rows must be one-dimensional"):
        view_bins(10, n_views=1, bin_size=2, seed=0, rows=np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="overflows the 64-bit bin arithmetic"):
        view_bins(2**40, n_views=1, bin_size=2**10, seed=0, rows=np.array([0]))
    with pytest.raises(ValueError, match=r"n_total=4611686018427387905 exceeds the 2\*\*62 rows"):
        view_bins(2**62 + 1, n_views=1, bin_size=2**40, seed=0, rows=np.array([0]))


def contingency_pvalue(a, b):
    table = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(table, (a, b), 1)
    return stats.chi2_contingency(table, correction=False).pvalue


@pytest.mark.parametrize("n_total", [20_000, 100_003])
def test_bins_look_independent(n_total):
    # Chi-square tests of independence, 20 seeds each: a row's bins in two views, the bins of neighbouring
    # rows, and a row's position (one of 20 blocks of row ids) against its bin. Their p-values must look
    # uniform (a Kolmogorov-Smirnov test). Over 100 seeds, four Feistel rounds failed the position test here.
    bin_size = n_total // 20
    block = np.arange(n_total) * 20 // n_total
    pvalues = {"views": [], "neighbours": [], "position": []}
    for seed in range(20):
        bins = view_bins(n_total, n_views=2, bin_size=bin_size, seed=seed, backend="cpu")
        pvalues["views"].append(contingency_pvalue(bins[0], bins[1]))
        pvalues["neighbours"].append(contingency_pvalue(bins[0, :-1], bins[0, 1:]))
        pvalues["position"].append(contingency_pvalue(block, bins[0]))
    for name, p in pvalues.items():
        assert stats.kstest(p, "uniform").pvalue > 1e-3, name
        assert min(p) > 1e-4, name


def test_view_bins_rejects_what_would_be_silently_wrong() -> None:
    # Regression (review): more than 2**31 - 1 bins wrapped the int32 ids negative, and float row ids
    # were truncated to integers without a word.
    with pytest.raises(ValueError, match=r"bin ids are int32"):
        view_bins(2**32, n_views=1, bin_size=1, seed=0, rows=np.array([1]))
    with pytest.raises(TypeError, match="rows must be integer row ids"):
        view_bins(100, n_views=1, bin_size=10, seed=0, rows=np.array([1.7]))

r"""Clusters of row embeddings: k-means or Ward agglomerative, the number of clusters given or by the elbow.

CCL (Lavi et al., Sec. 2.1.2, 3.1) clusters the embeddings with k-means (Lloyd) or agglomerative
clustering (Ward), choosing the number of clusters by "the elbow method" over a range (the paper tries 5
to 100). Whatever the method, a fitted clustering here is a linear **projection** and a set of
**centroids**, and every row (those of the fit too) goes to the nearest centroid of its projection in
Euclidean distance. For k-means this is its own assignment rule; agglomerative clustering has no
``predict``, so rows go to the nearest centroid of the clusters cut from its tree (the mean of their
rows): the same rule at fit and at predict, so the per-cluster maps are fitted on the assignment they
are applied with.

The rows (:class:`~gpucal.rows.Rows` whose blocks hold an embedding ``embedded``, weights ``w`` and
global row indices ``index``: :class:`EmbeddedBlock`, or ``gpucal.ccl.fit.CCLBlock``) are read in two
ways only, so one array and the partitions of a dask collection run the same fit: a **seeded sample**
(:func:`sample_rows`: row :math:`r` is in it when its counter-based uniform, hashed from the seed and
:math:`r`, is below ``max_rows / n``; the same rows at any partitioning) and **fixed-shape sums** over
every row (:func:`lloyd_sums`: per cluster the weight, the weighted sum of the rows and their inertia).

- **projection**: an embedding wider than ``n_components`` columns (one-hot leaves have one column per
  leaf of every tree: thousands) is projected on its top ``n_components`` right singular vectors
  (``TruncatedSVD``, randomized, seeded, fitted on the sample). k-means' centroids lie in the span of
  the leading principal directions (Ding and He 2004), so little is lost for ``k`` up to about
  ``n_components``, while Ward (dense pairwise distances) and every k-means pass get cheap. Narrower
  embeddings (SHAP: one column per feature) keep the identity.
- **k-means**: gpucal's own weighted Lloyd iterations (:func:`lloyd`), each one pass of summed
  :func:`lloyd_sums` over every row, stopping when no centroid moves or when the centroids' squared
  moves add up to at most ``LLOYD_TOL`` times the mean variance of a coordinate (scikit-learn's
  ``KMeans`` rule and default, which the paper's k-means is); started from weighted k-means++
  on the sample (seeded) and Lloyd's iterations there, ``n_init`` such starts (seeds ``seed``,
  ``seed + 1``, ...) with the lowest inertia kept. (Not scikit-learn's ``KMeans``: its sums are not
  exposed, so a partitioned fit could not reproduce it.)
- **agglomerative**: Ward linkage (``scipy.cluster.hierarchy.ward``, which is what scikit-learn's
  ``AgglomerativeClustering(linkage="ward")`` runs without a connectivity graph), one tree for every
  candidate number of clusters, fitted on the sample: it needs the pairwise distances of its rows
  (:math:`O(n^2)` memory and time). Row weights are not used by the tree (Ward has none), only by the
  maps after it.
- **elbow** (:func:`elbow_k`): the within-cluster sum of squares :math:`S(k)` over candidate ``k``, and
  the :math:`k` farthest below the chord from the first point to the last, both axes scaled to [0, 1]
  (the "knee" of Satopää et al. 2011; deterministic). For k-means, :math:`S(k)` is the inertia over
  every row of the centroids that Lloyd's iterations on the sample reach for that ``k`` (one summed
  pass for all candidates); the chosen ``k`` is then iterated over every row. For Ward it is read off
  the tree: each merge adds :math:`d^2/2` to :math:`S` (:math:`d` the Ward distance scipy reports), so
  one tree gives every :math:`S(k)`. A range wider than ``MAX_ELBOW_CANDIDATES`` values is scanned on
  a geometric grid (always with both ends).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from gpucal._backend import to_numpy
from gpucal.rows import LocalRows, Rows
from gpucal.rows.draws import row_uniforms

CLUSTERINGS = ("kmeans", "agglomerative")
# Rows per block when assigning rows to centroids (bounds the (block, k) distance matrix).
ASSIGN_BLOCK_ROWS = 1 << 16
# Most values of k the elbow tries; a wider range is scanned on a geometric grid.
MAX_ELBOW_CANDIDATES = 16
# Most Lloyd iterations (each one pass over the rows); they stop earlier when no centroid moves.
LLOYD_MAX_ITER = 100
# Lloyd's iterations stop when the centroids' squared moves add up to at most this times the mean
# variance of a coordinate of the sample (scikit-learn's ``KMeans(tol=1e-4)``). On the demo's 150,000
# rows (20 clusters over MBCT's leaves) the iterations over every row stop after 42 steps instead of at
# the 100-step limit, with an inertia 0.03% above the limit's, and CCL's held-out log-loss 0.116906
# instead of 0.116931; on make_ctr's segment_bias and heterogeneous sets it is the same to six digits.
LLOYD_TOL = 1e-4
# The stream of ``row_uniforms`` that draws the clustering sample.
SAMPLE_STREAM = 0


@dataclass(frozen=True)
class FittedClusters:
    """Outcome of :func:`fit_clusters`.

    Attributes
    ----------
    projection : numpy.ndarray of shape (d, c)
        Embedding columns to clustering coordinates (the identity when ``d <= n_components``).
    centroids : numpy.ndarray of shape (k, c)
        Cluster centres in clustering coordinates; rows go to the nearest one.
    ks, inertia : numpy.ndarray
        The elbow's curve :math:`S(k)` over the candidate ``ks`` (empty when ``n_clusters`` was given).
    n_sample_rows : int
        Rows in the seeded sample (the projection, the starts, Ward's tree).
    """

    projection: np.ndarray
    centroids: np.ndarray
    ks: np.ndarray
    inertia: np.ndarray
    n_sample_rows: int


def elbow_k(ks: np.ndarray, inertia: np.ndarray) -> int:
    r"""Return the :math:`k` of the knee of the decreasing curve :math:`S(k)`.

    With :math:`x = (k - k_0) / (k_m - k_0)` and :math:`y = (S(k) - S(k_m)) / (S(k_0) - S(k_m))`, the chord
    runs from (0, 1) to (1, 0) and the knee maximises :math:`1 - x - y` (proportional to the distance below
    the chord). Fewer than three candidates, or a curve that does not fall, give the smallest :math:`k`;
    ties go to the smaller :math:`k`.
    """
    ks = np.asarray(ks, dtype=np.float64)
    s = np.asarray(inertia, dtype=np.float64)
    if ks.shape[0] < 3 or s[0] <= s[-1]:
        return int(ks[0])
    x = (ks - ks[0]) / (ks[-1] - ks[0])
    y = (s - s[-1]) / (s[0] - s[-1])
    return int(ks[int(np.argmax(1.0 - x - y))])


def elbow_candidates(low: int, high: int) -> np.ndarray:
    """Return the ``k`` the elbow tries: every value of ``[low, high]``, or a geometric grid of them."""
    if high - low + 1 <= MAX_ELBOW_CANDIDATES:
        return np.arange(low, high + 1)
    grid = np.geomspace(low, high, MAX_ELBOW_CANDIDATES)
    return np.unique(np.concatenate([[low], np.round(grid).astype(np.int64), [high]]))


def project(E: Any, projection: np.ndarray) -> np.ndarray:
    """Return the clustering coordinates ``E @ projection`` (dense float64) of a dense or CSR embedding."""
    return np.asarray(E @ projection, dtype=np.float64)


def assign_clusters(Z: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    r"""Return the index of the nearest centroid (Euclidean) for every row of ``Z``, int32.

    :math:`\arg\min_c \lVert z - c\rVert^2 = \arg\min_c (\lVert c\rVert^2 - 2 z \cdot c)`; ties go to the
    lower index.
    """
    # Halved, the same bits: a product by 2 is exact, so (|c|^2 / 2 - z.c) rounds to half of (|c|^2 - 2 z.c).
    half_norm = 0.5 * np.einsum("ij,ij->i", centroids, centroids)
    n = Z.shape[0]
    out = np.empty(n, dtype=np.int32)
    for start in range(0, n, ASSIGN_BLOCK_ROWS):
        distance = Z[start : start + ASSIGN_BLOCK_ROWS] @ centroids.T
        np.subtract(half_norm[None, :], distance, out=distance)
        out[start : start + distance.shape[0]] = np.argmin(distance, axis=1)
    return out


def fit_projection(E: Any, n_components: int, seed: int) -> np.ndarray:
    """Return the ``(d, c)`` projection: the top right singular vectors if ``d > n_components``, else I."""
    d = E.shape[1]
    if d <= n_components:
        return np.eye(d)
    from sklearn.decomposition import TruncatedSVD

    # Two power iterations: the clusters need the leading subspace roughly, not to machine precision.
    # scikit-learn takes seeds below 2**32; ``seed`` is any non-negative int.
    svd = TruncatedSVD(n_components=n_components, algorithm="randomized", n_iter=2, random_state=seed % 2**32)
    svd.fit(E)
    return np.ascontiguousarray(svd.components_.T, dtype=np.float64)


# --------------------------------------------------------------------------------------------------
# Rows wherever they are: blocks of embeddings, one or a dask partition each


@dataclass(frozen=True)
class EmbeddedBlock:
    """A block of embedded rows: the embedding (dense or CSR; None for an empty block), its weights and
    the global index of each row."""

    embedded: Any
    w: Any
    index: np.ndarray


def sample_rows(rows: np.ndarray, n_total: int, max_rows: int, seed: int) -> np.ndarray:
    r"""Return which of the global row indices ``rows`` are in the clustering sample (boolean).

    Row :math:`r` is in the sample when its counter-based uniform :math:`u_r` (``row_uniforms``) is
    below ``max_rows / n_total``: a Bernoulli sample of about ``max_rows`` rows (every row when
    ``n_total <= max_rows``), the same rows for the same seed however the rows are partitioned.
    """
    if n_total <= max_rows:
        return np.ones(rows.shape[0], dtype=bool)
    return row_uniforms(seed, SAMPLE_STREAM, rows) < max_rows / n_total


def lloyd_sums(Z: np.ndarray, w: np.ndarray, centroids: np.ndarray, *, inertia: bool = True) -> np.ndarray:
    r"""Return the ``(k, c + 2)`` sums of one Lloyd step: per cluster :math:`[\sum w, \sum w z,
    \sum w \lVert z - \mu \rVert^2]`, each row in the cluster of its nearest centroid :math:`\mu`
    (the last column zero unless ``inertia``: the steps before the last do not read it)."""
    k, c = centroids.shape
    out = np.zeros((k, c + 2))
    n = Z.shape[0]
    if n == 0:
        return out
    nearest = assign_clusters(Z, centroids)
    # One sparse product per sum: row j of ``member`` holds the weights of cluster j's rows.
    member = sp.csr_matrix((w, (nearest, np.arange(n))), shape=(k, n))
    out[:, 0] = np.asarray(member.sum(axis=1))[:, 0]
    out[:, 1:-1] = member @ Z
    if inertia:
        diff = Z - centroids[nearest]
        out[:, -1] = member @ np.einsum("ij,ij->i", diff, diff)
    return out


def inertias(Z: np.ndarray, w: np.ndarray, centroid_sets: list[np.ndarray]) -> np.ndarray:
    """Return, per set of centroids, the weighted within-cluster sum of squares of ``Z`` under it."""
    return np.array([lloyd_sums(Z, w, centroids)[:, -1].sum() for centroids in centroid_sets])


def lloyd_tolerance(Z: np.ndarray, w: np.ndarray) -> float:
    r"""Return :func:`lloyd`'s ``tolerance`` for rows like ``Z`` (weights ``w``): ``LLOYD_TOL`` times
    the mean over coordinates of their weighted variance (scikit-learn's ``KMeans`` tolerance)."""
    mean = np.average(Z, axis=0, weights=w)
    return LLOYD_TOL * float(np.average((Z - mean) ** 2, axis=0, weights=w).mean())


def lloyd(
    sums: Callable[[np.ndarray, bool], np.ndarray], start: np.ndarray, tolerance: float = 0.0
) -> tuple[np.ndarray, float]:
    r"""Lloyd's iterations from ``start``: return the centroids and their inertia.

    Each iteration reads the rows once, through ``sums(centroids, inertia)`` (:func:`lloyd_sums`,
    added over wherever the rows are), and moves every centroid to the weighted mean of its rows (a
    cluster left empty keeps its centroid). It stops when no centroid moves, exactly (the assignment
    has not changed, so every later step would return the same sums), when the squared moves
    :math:`\sum_j \lVert \mu_j' - \mu_j \rVert^2` add up to at most ``tolerance`` (scikit-learn's
    ``KMeans`` rule: ``tolerance`` from :func:`lloyd_tolerance`), or after ``LLOYD_MAX_ITER`` steps.
    The inertia of the centroids returned is read by one more pass, unless no centroid moved: the
    steps before do not sum it. Two paths whose sums differ in the last bits stop together, unless a
    step's squared moves lie within those bits of ``tolerance``.
    """
    centroids = np.array(start, dtype=np.float64)
    for _ in range(LLOYD_MAX_ITER):
        step = sums(centroids, False)
        weight = step[:, 0]
        moved = np.where(
            (weight > 0)[:, None], step[:, 1:-1] / np.where(weight > 0, weight, 1.0)[:, None], centroids
        )
        if np.array_equal(moved, centroids):
            break
        shifted = float(((moved - centroids) ** 2).sum())
        centroids = moved
        if shifted <= tolerance:
            break
    return centroids, float(sums(centroids, True)[:, -1].sum())


def kmeans_plus_plus(Z: np.ndarray, w: np.ndarray, k: int, seed: int) -> np.ndarray:
    r"""Return ``k`` starting centroids drawn from the rows of ``Z`` by weighted k-means++.

    The first row with probability :math:`\propto w_i`, each next one :math:`\propto w_i D_i^2`,
    :math:`D_i` the distance to the nearest centroid drawn so far (Arthur and Vassilvitskii 2007), by
    inversion of ``default_rng(seed)``'s uniforms. The caller checks that ``Z`` has ``k`` distinct rows.
    """
    rng = np.random.default_rng(seed)

    def draw(mass: np.ndarray) -> int:
        cumulative = np.cumsum(mass)
        return int(
            min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(mass) - 1)
        )

    chosen = [draw(w)]
    d2 = np.einsum("ij,ij->i", Z - Z[chosen[0]], Z - Z[chosen[0]])
    for _ in range(1, k):
        mass = w * d2
        if not mass.sum() > 0:  # every weighted row sits on a centroid: the sample has fewer than k
            break
        chosen.append(draw(mass))
        diff = Z - Z[chosen[-1]]
        d2 = np.minimum(d2, np.einsum("ij,ij->i", diff, diff))
    return Z[chosen].copy()


def _sample_kmeans(Z: np.ndarray, w: np.ndarray, k: int, seed: int, tolerance: float) -> np.ndarray:
    """Centroids of Lloyd's iterations on the sample itself, from k-means++ starts."""

    def sums(centroids: np.ndarray, inertia: bool) -> np.ndarray:
        return lloyd_sums(Z, w, centroids, inertia=inertia)

    centroids, _ = lloyd(sums, kmeans_plus_plus(Z, w, k, seed), tolerance)
    return centroids


def _sample_block(block: Any, n_total: int, max_rows: int, seed: int) -> tuple[Any, np.ndarray] | None:
    """The block's rows in the clustering sample: embeddings and weights (None: an empty block)."""
    if block.embedded is None:
        return None
    take = np.flatnonzero(sample_rows(block.index, n_total, max_rows, seed))
    return block.embedded[take], to_numpy(block.w)[take]


def _stacked(*pieces: tuple[Any, np.ndarray] | None) -> tuple[Any, np.ndarray] | None:
    """Blocks' samples stacked in block order (one machine's row order)."""
    present = [piece for piece in pieces if piece is not None]
    if not present:
        return None
    blocks = [E for E, _ in present]
    stacked = sp.vstack(blocks, format="csr") if sp.issparse(blocks[0]) else np.concatenate(blocks, axis=0)
    return stacked, np.concatenate([w for _, w in present])


def _projected(block: Any, projection: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The block in clustering coordinates, with its weights (host)."""
    if block.embedded is None:
        return np.zeros((0, projection.shape[1])), np.zeros(0)
    return project(block.embedded, projection), to_numpy(block.w)


def _lloyd_block(z_w: tuple[np.ndarray, np.ndarray], centroids: np.ndarray, inertia: bool) -> np.ndarray:
    return lloyd_sums(z_w[0], z_w[1], centroids, inertia=inertia)


def _inertias_block(z_w: tuple[np.ndarray, np.ndarray], centroid_sets: list[np.ndarray]) -> np.ndarray:
    return inertias(z_w[0], z_w[1], centroid_sets)


def fit_clusters(
    E: Any, method: str, n_clusters: int | str, *, sample_weight: np.ndarray | None = None, **options: Any
) -> FittedClusters:
    """:func:`fit_clusters_on` the rows of one embedding matrix ``E`` (host, dense or CSR); ``options``
    are its keyword arguments (``k_range``, ``n_init``, ``max_rows``, ``n_components``, ``seed``)."""
    n = E.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    rows = LocalRows((EmbeddedBlock(E, w, np.arange(n, dtype=np.int64)),))
    return fit_clusters_on(rows, n, method, n_clusters, **options)


def fit_clusters_on(
    rows: Rows,
    n_total: int,
    method: str,
    n_clusters: int | str,
    *,
    k_range: tuple[int, int],
    n_init: int,
    max_rows: int,
    n_components: int,
    seed: int,
) -> FittedClusters:
    """Cluster ``rows`` (``n_total`` of them): projection, centroids and the elbow's curve (module docstring).

    ``n_clusters`` is an int or ``"elbow"`` (the knee of :math:`S(k)` over ``k_range``, both ends
    included). The projection, the k-means++ starts, the elbow's candidates and Ward's tree come from
    the seeded sample of about ``max_rows`` rows (:func:`sample_rows`); k-means' final Lloyd
    iterations and the k-means elbow's :math:`S(k)` read every row. Raises ``ValueError`` when the
    sample has fewer distinct projections than the clusters asked for.
    """
    sample = rows.reduce(_sample_block, _stacked, n_total, max_rows, seed)
    if sample is None or sample[0].shape[0] == 0:
        msg = f"max_cluster_rows={max_rows}: the seeded clustering sample drew no row; ask for more"
        raise ValueError(msg)
    E_sample, w_sample = sample
    projection = fit_projection(E_sample, n_components, seed)
    Z = project(E_sample, projection)
    n_distinct = int(np.unique(Z, axis=0).shape[0])
    if n_clusters == "elbow":
        low, high = k_range
        if n_distinct < low:
            msg = f"X: the embeddings have {n_distinct} distinct rows, fewer than min_clusters={low}"
            raise ValueError(msg)
        ks = elbow_candidates(low, min(high, n_distinct))
    else:
        ks = np.array([int(n_clusters)])
        if ks[0] > n_distinct:
            msg = f"n_clusters={ks[0]}: the embeddings have only {n_distinct} distinct rows; ask for fewer"
            raise ValueError(msg)
    if method == "agglomerative":
        _, centroids, inertia = _ward(Z, ks)
    else:
        centroids, inertia = _kmeans(
            rows.map(_projected, projection), Z, w_sample, ks, n_init=n_init, seed=seed
        )
    scanned = n_clusters == "elbow"
    return FittedClusters(
        projection=projection,
        centroids=centroids,
        ks=ks if scanned else np.empty(0, dtype=np.int64),
        inertia=inertia if scanned else np.empty(0),
        n_sample_rows=int(Z.shape[0]),
    )


def _kmeans(
    rows: Rows, Z: np.ndarray, w: np.ndarray, ks: np.ndarray, *, n_init: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """k-means: the elbow from every candidate's sample centroids, then ``n_init`` runs over all rows
    (``rows``: blocks of projected rows and weights, read through summed :func:`lloyd_sums`).

        Candidate :math:`k` gets Lloyd's iterations on the sample from k-means++ starts (seed ``seed``);
        its :math:`S(k)` is the inertia of those centroids over every row (one pass for all candidates).
        The chosen :math:`k` is then run over every row from ``n_init`` such sample fits (seeds ``seed``,
        ``seed + 1``, ...), the lowest inertia kept (the first on ties). Every run of Lloyd's
        iterations stops at the tolerance of the sample (:func:`lloyd_tolerance`).
    """
    tolerance = lloyd_tolerance(Z, w)
    inertia = np.empty(ks.shape[0])
    if ks.shape[0] > 1:
        starts = [_sample_kmeans(Z, w, int(k), seed, tolerance) for k in ks.tolist()]
        inertia = rows.sum(_inertias_block, starts)
    k = elbow_k(ks, inertia) if ks.shape[0] > 1 else int(ks[0])

    def sums(centroids: np.ndarray, with_inertia: bool) -> np.ndarray:
        return rows.sum(_lloyd_block, centroids, with_inertia)

    runs = [lloyd(sums, _sample_kmeans(Z, w, k, seed + r, tolerance), tolerance) for r in range(n_init)]
    centroids, total = min(runs, key=lambda run: run[1])  # the first of equal inertias
    if ks.shape[0] == 1:
        inertia[0] = total
    return centroids, inertia


def _ward(Z: np.ndarray, ks: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """One Ward tree: :math:`S(k)` for every candidate, and the centroids of its cut at the chosen ``k``."""
    from scipy.cluster.hierarchy import fcluster, ward

    tree = ward(Z)
    # Merge m adds d_m^2 / 2 to the within-cluster sum of squares; k clusters remain after n - k merges.
    n = Z.shape[0]
    added = np.concatenate([[0.0], np.cumsum(tree[:, 2] ** 2 / 2.0)])
    inertia = added[n - ks]
    k = elbow_k(ks, inertia) if ks.shape[0] > 1 else int(ks[0])
    labels = fcluster(tree, t=k, criterion="maxclust") - 1
    found = int(labels.max()) + 1
    member = sp.csr_matrix((np.ones(n), (labels, np.arange(n))), shape=(found, n))
    centroids = np.asarray(member @ Z) / np.bincount(labels, minlength=found)[:, None]
    return k, centroids, inertia

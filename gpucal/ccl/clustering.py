r"""Clusters of row embeddings: k-means or Ward agglomerative, the number of clusters given or by the elbow.

CCL (Lavi et al., Sec. 2.1.2, 3.1) clusters the embeddings with k-means (Lloyd) or agglomerative
clustering (Ward), choosing the number of clusters by "the elbow method" over a range (the paper tries 5
to 100). Whatever the method, a fitted clustering here is a linear **projection** and a set of
**centroids**, and every row (those of the fit too) goes to the nearest centroid of its projection in
Euclidean distance. For k-means this is its own ``predict``; agglomerative clustering has no ``predict``,
so rows go to the nearest centroid of the clusters cut from its tree (the mean of their rows): the same
rule at fit and at predict, so the per-cluster maps are fitted on the assignment they are applied with.

- **projection**: an embedding wider than ``n_components`` columns (one-hot leaves have one column per
  leaf of every tree: thousands) is projected on its top ``n_components`` right singular vectors
  (``TruncatedSVD``, randomized, seeded, fitted on the clustering rows). k-means' centroids lie in the
  span of the leading principal directions (Ding and He 2004), so little is lost for ``k`` up to about
  ``n_components``, while Ward (dense pairwise distances) and every k-means pass get cheap. Narrower
  embeddings (SHAP: one column per feature) keep the identity.
- **k-means**: scikit-learn's ``KMeans`` (k-means++ starts, ``n_init`` seeded restarts, row weights
  honoured) on the CPU; cuML's ``KMeans`` on the GPU path (:func:`kmeans_gpu`).
- **agglomerative**: Ward linkage (``scipy.cluster.hierarchy.ward``, which is what scikit-learn's
  ``AgglomerativeClustering(linkage="ward")`` runs without a connectivity graph), one tree for every
  candidate number of clusters. It needs the pairwise distances of its rows (:math:`O(n^2)` memory and
  time), so it is fitted on a seeded subsample of at most ``max_rows`` rows; row weights are not used by
  the tree (Ward has none), only by the maps after it.
- **elbow** (:func:`elbow_k`): the within-cluster sum of squares :math:`S(k)` over candidate ``k``, and
  the :math:`k` farthest below the chord from the first point to the last, both axes scaled to [0, 1]
  (the "knee" of Satopää et al. 2011; deterministic). For k-means :math:`S(k)` is the inertia of one
  seeded run per candidate (the chosen ``k`` is then refitted with ``n_init`` restarts); for Ward it is
  read off the tree: each merge adds :math:`d^2/2` to :math:`S` (:math:`d` the Ward distance scipy
  reports), so one tree gives every :math:`S(k)`. The k-means scan runs on at most ``ELBOW_SCAN_ROWS``
  rows. A range wider than ``MAX_ELBOW_CANDIDATES`` values is
  scanned on a geometric grid (always with both ends).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

CLUSTERINGS = ("kmeans", "agglomerative")
# Rows per block when assigning rows to centroids (bounds the (block, k) distance matrix).
ASSIGN_BLOCK_ROWS = 1 << 16
# Most values of k the elbow tries; a wider range is scanned on a geometric grid.
MAX_ELBOW_CANDIDATES = 16
# k-means' elbow scan runs on at most this many of the clustering rows (seeded; the chosen k is then
# fitted on all of them): the curve's knee does not need every row.
ELBOW_SCAN_ROWS = 10_000


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
    n_fit_rows : int
        Rows the clustering was fitted on (after subsampling).
    """

    projection: np.ndarray
    centroids: np.ndarray
    ks: np.ndarray
    inertia: np.ndarray
    n_fit_rows: int


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
    c_norm = np.einsum("ij,ij->i", centroids, centroids)
    n = Z.shape[0]
    out = np.empty(n, dtype=np.int32)
    for start in range(0, n, ASSIGN_BLOCK_ROWS):
        block = Z[start : start + ASSIGN_BLOCK_ROWS]
        out[start : start + block.shape[0]] = np.argmin(c_norm[None, :] - 2.0 * (block @ centroids.T), axis=1)
    return out


def fit_projection(E: Any, n_components: int, seed: int) -> np.ndarray:
    """Return the ``(d, c)`` projection: the top right singular vectors if ``d > n_components``, else I."""
    d = E.shape[1]
    if d <= n_components:
        return np.eye(d)
    from sklearn.decomposition import TruncatedSVD

    # Two power iterations: the clusters need the leading subspace roughly, not to machine precision.
    svd = TruncatedSVD(n_components=n_components, algorithm="randomized", n_iter=2, random_state=seed)
    svd.fit(E)
    return np.ascontiguousarray(svd.components_.T, dtype=np.float64)


def fit_clusters(
    E: Any,
    method: str,
    n_clusters: int | str,
    *,
    k_range: tuple[int, int],
    n_init: int,
    max_rows: int,
    n_components: int,
    seed: int,
    sample_weight: np.ndarray | None = None,
    device: str = "cpu",
) -> FittedClusters:
    """Cluster the rows of ``E`` (host, dense or CSR): projection, centroids and the elbow's curve.

    ``n_clusters`` is an int or ``"elbow"`` (the knee of :math:`S(k)` over ``k_range``, both ends
    included). Rows beyond ``max_rows`` are subsampled (seeded) before the fit. Raises ``ValueError`` when
    the rows have fewer distinct projections than the clusters asked for.
    """
    rows = _subsample(E.shape[0], max_rows, seed)
    fit_rows = E if rows is None else E[rows]
    w = sample_weight if rows is None or sample_weight is None else sample_weight[rows]
    projection = fit_projection(fit_rows, n_components, seed)
    Z = project(fit_rows, projection)
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
        _, centroids, inertia = _kmeans(Z, ks, n_init=n_init, seed=seed, sample_weight=w, device=device)
    scanned = n_clusters == "elbow"
    return FittedClusters(
        projection=projection,
        centroids=centroids,
        ks=ks if scanned else np.empty(0, dtype=np.int64),
        inertia=inertia if scanned else np.empty(0),
        n_fit_rows=int(Z.shape[0]),
    )


def _subsample(n: int, max_rows: int, seed: int) -> np.ndarray | None:
    if n <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_rows, replace=False))


def _kmeans(
    Z: np.ndarray, ks: np.ndarray, *, n_init: int, seed: int, sample_weight: np.ndarray | None, device: str
) -> tuple[int, np.ndarray, np.ndarray]:
    """k-means: one seeded run per candidate for the elbow, then the chosen ``k`` with ``n_init`` restarts."""
    run = kmeans_gpu if device == "gpu" else kmeans_cpu
    inertia = np.empty(ks.shape[0])
    if ks.shape[0] > 1:
        scan = _subsample(Z.shape[0], ELBOW_SCAN_ROWS, seed)
        Z_scan = Z if scan is None else Z[scan]
        w_scan = sample_weight if scan is None or sample_weight is None else sample_weight[scan]
        for i, k in enumerate(ks.tolist()):
            inertia[i] = run(Z_scan, k, n_init=1, seed=seed, sample_weight=w_scan)[1]
    k = elbow_k(ks, inertia)
    centroids, final = run(Z, k, n_init=n_init, seed=seed, sample_weight=sample_weight)
    if ks.shape[0] == 1:
        inertia[0] = final
    return k, centroids, inertia


def kmeans_cpu(
    Z: np.ndarray, k: int, *, n_init: int, seed: int, sample_weight: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """scikit-learn ``KMeans`` (Lloyd, k-means++ starts, ``n_init`` restarts seeded by ``seed``)."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    model = KMeans(n_clusters=k, n_init=n_init, random_state=seed)
    with warnings.catch_warnings():
        # At least k distinct rows are checked by the caller; scikit-learn may still warn when a start
        # leaves a cluster empty and it reseeds it, which is no error of the user's.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(Z, sample_weight=sample_weight)
    return np.asarray(model.cluster_centers_, dtype=np.float64), float(model.inertia_)


def kmeans_gpu(
    Z: np.ndarray, k: int, *, n_init: int, seed: int, sample_weight: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """cuML ``KMeans`` on the GPU (k-means|| starts, ``n_init`` restarts seeded by ``seed``)."""
    import cupy
    from cuml.cluster import KMeans

    weights = None if sample_weight is None else cupy.asarray(sample_weight, dtype=cupy.float64)
    model = KMeans(n_clusters=k, n_init=n_init, random_state=seed, output_type="cupy")
    model.fit(cupy.asarray(Z, dtype=cupy.float64), sample_weight=weights)
    return cupy.asnumpy(model.cluster_centers_).astype(np.float64), float(model.inertia_)


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

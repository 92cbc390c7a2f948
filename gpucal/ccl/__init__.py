"""Clustered calibration (CCL; Lavi, Shapira and Rappoport): embed rows, cluster them, calibrate each cluster.

- :mod:`~gpucal.ccl.embeddings`: leaf indices or exact tree SHAP values of an XGBoost, LightGBM or gpucal
  tree model, saved as data;
- :mod:`~gpucal.ccl.tree_tables`: an XGBoost or LightGBM model as gpucal's own checked tree tables (what is
  saved, loaded and walked by ``gpucal.kernels.boosted_trees``: no file content reaches either library);
- :mod:`~gpucal.ccl.clustering`: k-means or Ward clusters, the number given or by the elbow, rows assigned
  to the nearest centroid;
- :mod:`~gpucal.ccl.cluster_maps`: one map per cluster from ``gpucal.trees.local_maps``'s per-cluster
  sums (or a Dirichlet fit per cluster), a constant for a homogeneous cluster, the global map for a
  cluster too light to fit;
- :mod:`~gpucal.ccl.fit`: ``fit_ccl(rows, params, embedding)``, Algorithm 1 written once over
  :class:`gpucal.rows.Rows` (one machine's arrays, or dask partitions held or streamed);
- :mod:`~gpucal.ccl.model`: :class:`ClusteredCalibrator`, the estimator: it validates, calls ``fit_ccl``
  and stores the state.

CECE (the paper's metric) is :func:`gpucal.metrics.cece` over ``ClusteredCalibrator.clusters(X)``; the
rejection curve of its Sec. 4 is :func:`gpucal.metrics.rejection.rejection_curve`.
"""

from gpucal.ccl.model import ClusteredCalibrator

__all__ = ["ClusteredCalibrator"]

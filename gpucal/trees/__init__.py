"""Split the rows into parts, then calibrate each part: the engine MBCT, HC and CCL share.

The three feature-aware calibrators of the papers differ only in how the parts are found and which map
calibrates a part:

========  =============================================  ===========================================
method    parts                                          map per part
========  =============================================  ===========================================
MBCT      leaves of trees grown by a calibration loss    ``k f`` (paper), logit shift or Platt
HC        leaves of a tree grown to predict the label     Platt (or any one-dimensional map below)
CCL       clusters of row embeddings                      Platt, temperature, beta or a constant
========  =============================================  ===========================================

Modules, each with one job:

- :mod:`~gpucal.trees.grow`: one tree, one group-sum histogram pass per level
  (``gpucal.kernels.group_sums``), the split chosen from the histogram alone (:mod:`~gpucal.trees.splits`),
  one routing pass;
- :mod:`~gpucal.trees.ensemble`: fitted trees as plain arrays, a map on every node, chained;
- :mod:`~gpucal.trees.local_maps`: the per-part maps, fitted by grouped Newton steps from per-part
  sums, so a part's fit needs no pass of its own;
- :mod:`~gpucal.trees.aggregate`: identical rows merged before a fit.

Every statistic is a sum over rows of a fixed-shape array, so the same code runs on numpy (numba
kernels), cupy (CUDA kernels) and, partition by partition, on Dask.
"""

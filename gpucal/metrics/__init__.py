"""Calibration metrics, weighted, on numpy or cupy arrays.

Every metric takes ``(y_true, y_prob, *, sample_weight=None, ...)`` (field metrics take the field's
values third) and returns a Python float; :func:`segment_report` returns a DataFrame. Definitions,
sources and what each metric can and cannot see are in each docstring (``notes/metrics.md``).

* Sort by the score (ECE family): :func:`ece`, :func:`mce`, :func:`ada_ece`, :func:`ece_sweep`,
  :func:`prob_ece`, :func:`cal_n`.
* Random partitions, blind to score and features: :func:`mvce`.
* Group by a feature or clusters: :func:`field_ece`, :func:`field_rce`, :func:`gc_n`, :func:`cece`,
  :func:`segment_report`.
* No bins: :func:`pce`, :func:`pcoc`, :func:`log_loss`, :func:`brier`, :func:`roc_auc`, :func:`tce`,
  :func:`rejection_curve`.
"""

from gpucal.metrics.binned import ada_ece, cal_n, ece, ece_sweep, mce, pce, prob_ece
from gpucal.metrics.grouped import cece, field_ece, field_rce, gc_n, pcoc, segment_report
from gpucal.metrics.mvce import mvce
from gpucal.metrics.rejection import rejection_curve
from gpucal.metrics.scores import brier, log_loss, roc_auc, tce

__all__ = [
    "ada_ece",
    "brier",
    "cal_n",
    "cece",
    "ece",
    "ece_sweep",
    "field_ece",
    "field_rce",
    "gc_n",
    "log_loss",
    "mce",
    "mvce",
    "pce",
    "pcoc",
    "prob_ece",
    "rejection_curve",
    "roc_auc",
    "segment_report",
    "tce",
]

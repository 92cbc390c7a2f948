"""Calibration metrics, weighted, on numpy or cupy arrays.

Every metric takes ``(y_true, y_prob, *, sample_weight=None, ...)`` (field metrics take the field's
values third) and returns a Python float; :func:`segment_report` returns a DataFrame. Definitions,
sources and what each metric can and cannot see are in each docstring.

* Sort by the score (ECE family): :func:`ece`, :func:`mce`, :func:`ada_ece`, :func:`ece_sweep`,
  :func:`prob_ece`, :func:`cal_n`.
* Random partitions, blind to score and features: :func:`mvce`.
* Group by a feature or clusters: :func:`field_ece`, :func:`field_rce`, :func:`gc_n`, :func:`cece`,
  :func:`segment_report`.
* No bins: :func:`pce`, :func:`pcoc`, :func:`log_loss`, :func:`brier`, :func:`roc_auc`, :func:`tce`,
  :func:`rejection_curve`.
* Sort by the score without bins: :func:`ecce` (with :func:`ecce_sigma`, :func:`ecce_pvalue`),
  :func:`smooth_ece`, :func:`ici` / :func:`e50` / :func:`e90` / :func:`emax`; with bins, debiased:
  :func:`ece_debiased`.
* Segments of features and the score: :func:`multicalibration_error` (MCGrad's MCE, its sigma and
  p-value).
* Classical tests, one result object each: :func:`hosmer_lemeshow`, :func:`spiegelhalter_z`,
  :func:`calibration_slope`, :func:`calibration_intercept`, :func:`murphy_decomposition` (of the
  log-loss: :func:`murphy_decomposition_log_loss`), and per rating grade :func:`binomial_grade_test`,
  :func:`jeffreys_grade_test`; the kernel calibration error :func:`skce` and its test
  :func:`skce_test`; the GiViTI calibration belt and its test :func:`calibration_belt`.
"""

from gpucal.metrics.belt import CalibrationBeltResult, calibration_belt
from gpucal.metrics.binned import ada_ece, cal_n, ece, ece_sweep, mce, pce, prob_ece
from gpucal.metrics.calibration_tests import (
    CalibrationInterceptResult,
    CalibrationSlopeResult,
    GradeTestResult,
    HosmerLemeshowResult,
    LogLossDecomposition,
    MurphyDecomposition,
    SpiegelhalterResult,
    binomial_grade_test,
    calibration_intercept,
    calibration_slope,
    hosmer_lemeshow,
    jeffreys_grade_test,
    murphy_decomposition,
    murphy_decomposition_log_loss,
    spiegelhalter_z,
)
from gpucal.metrics.debiased import ece_debiased
from gpucal.metrics.ecce import ecce, ecce_pvalue, ecce_sigma
from gpucal.metrics.grouped import cece, field_ece, field_rce, gc_n, pcoc, segment_report
from gpucal.metrics.ici import e50, e90, emax, ici
from gpucal.metrics.kernel_calibration import SKCEResult, SKCETestResult, skce, skce_test
from gpucal.metrics.multicalibration import MulticalibrationResult, multicalibration_error
from gpucal.metrics.mvce import mvce
from gpucal.metrics.rejection import rejection_curve
from gpucal.metrics.scores import brier, log_loss, roc_auc, tce
from gpucal.metrics.smooth import smooth_ece

__all__ = [
    "CalibrationBeltResult",
    "CalibrationInterceptResult",
    "CalibrationSlopeResult",
    "GradeTestResult",
    "HosmerLemeshowResult",
    "LogLossDecomposition",
    "MulticalibrationResult",
    "MurphyDecomposition",
    "SKCEResult",
    "SKCETestResult",
    "SpiegelhalterResult",
    "ada_ece",
    "binomial_grade_test",
    "brier",
    "cal_n",
    "calibration_belt",
    "calibration_intercept",
    "calibration_slope",
    "cece",
    "e50",
    "e90",
    "ecce",
    "ecce_pvalue",
    "ecce_sigma",
    "ece",
    "ece_debiased",
    "ece_sweep",
    "emax",
    "field_ece",
    "field_rce",
    "gc_n",
    "hosmer_lemeshow",
    "ici",
    "jeffreys_grade_test",
    "log_loss",
    "mce",
    "multicalibration_error",
    "murphy_decomposition",
    "murphy_decomposition_log_loss",
    "mvce",
    "pce",
    "pcoc",
    "prob_ece",
    "rejection_curve",
    "roc_auc",
    "segment_report",
    "skce",
    "skce_test",
    "smooth_ece",
    "spiegelhalter_z",
    "tce",
]

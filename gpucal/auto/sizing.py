"""How much cross-fitting :class:`~gpucal.auto.AutoCalibrator` does, by the size of the calibration set.

Up to :data:`LARGE_ROWS` rows every row is cross-fitted over 5 folds and every default candidate runs.
Above it the search has to cost less than a fifth of MCGrad's default fit, which on the 7 sets
of 150,000 rows of ``benchmarks/results/auto.md`` takes 4-14 s on 2 CPU cores; the old search took 1-10
times as long as MCGrad. On such sets the fold-to-fold noise of a held-out log-loss is far below the
differences that decide, so:

- the candidates are cross-fitted on a seeded, stratified subsample of :data:`LARGE_CV_ROWS` rows
  (:func:`gpucal.auto.folds.subsample_rows`) over :data:`LARGE_N_FOLDS` folds; only the refit of the
  calibrators the prediction reads sees every row. 40,000 rows over 2 folds train each fold on as many
  rows as 30,000 over 3 for two thirds of the cost; 20,000 over 2 chose worse on the segment-bias set
  (``benchmarks/results/auto_sizing.md`` has the four sizes side by side);
- NeuCalib leaves the default list: on the CPU one NeuCalib fit on 150,000 rows takes 5-12 s, as long
  as MCGrad's whole default fit (49% of the old search's time). This is the measured price of the
  speed: on 3 of the 7 sets NeuCalib alone has a lower held-out log-loss than the search without it
  (``benchmarks/results/auto.md``: within noise of the best gpucal method on 4 of 7 large sets instead
  of 7); the search still beats or equals every peer there;
- feature-aware Platt with ``l2 = 1`` leaves it too (:mod:`gpucal.auto.candidates`), the blend takes
  the best setting of each method and drops members lighter than
  :data:`~gpucal.auto.blend.MIN_MEMBER_WEIGHT`: every member costs a refit on all rows (0.3-0.7 s for
  feature-aware Platt), which was half of the fit once the cross-fitting was cut;
- the prediction must beat Platt scaling on the cross-fitted rows by more than :data:`PLATT_MARGIN`
  standard errors of the per-row difference, else Platt scaling predicts: where the features carry no
  signal (``make_ctr``'s calibrated and over-confident scenarios) the blend's gain was 1.6 standard
  errors, and before this rule its held-out AUC there was below the raw score's.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Calibration sets with more rows than this take the cheaper search (module docstring).
LARGE_ROWS = 100_000
#: Rows cross-fitted on a large calibration set.
LARGE_CV_ROWS = 40_000
#: Folds on a large calibration set.
LARGE_N_FOLDS = 2
#: On a large set a blend or feature-aware choice must beat Platt scaling on the cross-fitted rows by
#: more than this many standard errors, else Platt scaling predicts (module docstring).
PLATT_MARGIN = 2.0
#: Folds otherwise.
SMALL_N_FOLDS = 5


@dataclass(frozen=True)
class CrossFitPlan:
    """The resolved size of the search.

    Attributes
    ----------
    n_folds : int
        Folds of the cross-fitting.
    cv_rows : int
        Rows cross-fitted (all rows, or a subsample of them).
    large : bool
        True above :data:`LARGE_ROWS` rows: the default candidates leave NeuCalib out.
    """

    n_folds: int
    cv_rows: int
    large: bool


def plan_cross_fit(n_rows: int, n_folds: int | str, cv_rows: int | str | None) -> CrossFitPlan:
    """Resolve ``n_folds`` and ``cv_rows`` (each an int, or ``"auto"``; ``cv_rows`` None: every row).

    Parameters
    ----------
    n_rows : int
        Calibration rows.
    n_folds : int or "auto"
        ``"auto"``: :data:`LARGE_N_FOLDS` above :data:`LARGE_ROWS` rows, else :data:`SMALL_N_FOLDS`.
    cv_rows : int, "auto" or None
        ``"auto"``: :data:`LARGE_CV_ROWS` above :data:`LARGE_ROWS` rows, else every row.

    Returns
    -------
    CrossFitPlan
    """
    large = n_rows > LARGE_ROWS
    if n_folds == "auto":
        n_folds = LARGE_N_FOLDS if large else SMALL_N_FOLDS
    if cv_rows == "auto":
        cv_rows = LARGE_CV_ROWS if large else None
    resolved_rows = n_rows if cv_rows is None else min(int(cv_rows), n_rows)
    return CrossFitPlan(n_folds=int(n_folds), cv_rows=resolved_rows, large=large)


__all__ = [
    "LARGE_CV_ROWS",
    "LARGE_N_FOLDS",
    "LARGE_ROWS",
    "PLATT_MARGIN",
    "SMALL_N_FOLDS",
    "CrossFitPlan",
    "plan_cross_fit",
]

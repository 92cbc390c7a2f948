"""How much cross-fitting :class:`~gpucal.auto.AutoCalibrator` does: successive halving over row rungs.

Every candidate is cross-fitted on a small stratified subsample first; only the best of them (and the
members of a blend fitted on that rung's out-of-fold predictions) go on to the next rung, which has
:data:`GROWTH` times the rows; the last rung's out-of-fold predictions choose the prediction. This is
successive halving (Jamieson and Talwalkar, AISTATS 2016; Li et al., "Hyperband", JMLR 18, 2018) with the
calibration rows as the resource: the rows saved on the candidates left behind pay for candidates a
fixed cut had to leave out (NeuCalib, second-order feature-aware Platt). Its known cost: a candidate that
needs many rows to shine can be left behind early (NeuCalib, on the ``make_ctr`` sets where it is best
alone at 150,000 rows); on a large set the second-order feature-aware Platt candidates, which need rows
the most, always go on (below). The rungs of a calibration set of ``n`` rows:

- up to about :data:`FIRST_RUNG_ROWS` rows: one rung, every row (small sets pay nothing for the
  halving);
- above: the first rung on :data:`FIRST_RUNG_ROWS` rows, then :data:`GROWTH` times the rows per rung up
  to the last rung's: every row, up to :data:`LARGE_CV_ROWS` (the refit of the chosen calibrators still
  sees every row). So the finalists of a large set are compared on all its rows, as a small set's
  candidates are: a 150,000-row set has rungs of 8,000, 32,000 and 150,000 rows. A last rung of a
  40,000-row subsample judged the second-order candidates where their crosses were thin (on
  ``make_ctr``'s cross scenario, seed 1, it chose MBCT, 0.71% from the oracle's held-out log-loss; on
  every row second-order Platt is chosen, 0.26%). A screening rung has :data:`SCREEN_N_FOLDS` folds: it only
  ranks. The last rung, which chooses, has :data:`SMALL_N_FOLDS` folds up to :data:`SMALL_ROWS` rows,
  :data:`MID_N_FOLDS` up to :data:`MID_ROWS`, else :data:`LARGE_N_FOLDS`;
- a screening rung passes on the best :data:`KEEP_SHARE` of its candidates (at least
  :data:`MIN_SURVIVORS`) and the members of a blend of its out-of-fold predictions, less those
  dominated (trailing the rung's best by more than :data:`DOMINATED_SE` standard errors of the per-row
  difference) and the expensive ones (``gpucal.auto.candidates.EXPENSIVE_CLASSES``: NeuCalib) unless
  best; and always Platt scaling, and on a large set every second-order feature-aware Platt candidate
  (``interactions="auto"``: its screens keep more crosses on more rows, and its fit is one Newton over
  sums, about 0.15 CPU s on 150,000 rows of ``make_ctr``'s cross400 scenario), which is not raced on a
  screening rung there (on 4,000 training rows the 400-cell crosses of that scenario trailed by more
  than ``drop_threshold`` after one fold; chosen on every row, 0.81% from the oracle against 1.67%)
  (``AutoCalibrator._survivors``); of second-order candidates that are twins on a rung (their screens
  kept no pair, so ``l2_cross`` does not part them) only the first listed, the least shrunk, goes on
  (``gpucal.auto.cross_fit.distinct_growing``): on ``make_ctr``'s calibrated and mixed scenarios at
  150,000 rows this saves ``l2_cross=100``'s fits on the last rung (about 0.5 CPU s), with the same
  choice and held-out log-loss;
- on a screening rung an expensive candidate is cross-fitted only when the rung's best cheap
  feature-aware candidate beats Platt scaling by more than :data:`DOMINATED_SE` standard errors (the
  features pay), and stops after its first fold unless it leads there (:data:`SCREEN_EXPENSIVE_SE`).
  Other candidates that predict alike on a rung (MBCT's settings on 8,000 rows; on a set of up to
  100,000 rows, second-order feature-aware Platt whose screen keeps no pair and its first-order twin)
  all stay in the race: on more rows they part (the screen keeps pairs, MBCT grows deeper), and
  stopping them as twins lost 0.0006 of held-out log-loss on ``make_ctr``'s mixed scenario
  (``benchmarks/results/auto.md``). Only a large set's second-order twins are cut, by the rules above
  and the stand-in below.

On a large set the fold fits of feature-aware Platt stop at a Newton tolerance of
``gpucal.auto.cross_fit.FOLD_TOL`` (1e-5; the refit on every row keeps ``tol=1e-8``): the folds only
rank, and on 75,000 training rows of ``make_ctr``'s cross scenario this saves one Newton step of six with
the held-out log-loss the same to 1e-7.

Every rule is a function of the seeded folds and the held-out losses, never of the clock, so a fit is
repeatable; ``time_budget`` is the only clock-driven stop.

The cost that is left on a large set (``benchmarks/results/auto_1128a.md``, 150,000 rows, the medians
of three alternated fits): 0.5-1.5 CPU s, 4.96-18.5x cheaper than MCGrad's default in the same process
(5x on 13 of 14). On a busier machine (``auto_1128b.md``) 0.9-2.5 CPU s and 4.0-13.3x: this search's
CPU seconds grew more under load than MCGrad's. The nearest to 5x is ``make_ctr``'s cross400 scenario
(about 1 CPU s; shares measured by the candidates' fit clocks): each screening rung about a quarter,
the last rung about a quarter to a third (the second-order candidate's two fold fits on 75,000 rows most
of it), the refit of the blend's members on every row about a sixth, and the blend, folds and reports
the rest. No part is most of it, and within a second-order fit the Newton passes are about a third
(the rest is encoding the crosses, the field and cross screens and the solver's set-up), so a cut
there is a cut of the many small costs, not of one.

On a large set the prediction must also beat Platt scaling on the last rung's rows by more than
:data:`PLATT_MARGIN` standard errors of the per-row difference, else Platt scaling predicts: where the
features carry no signal (``make_ctr``'s calibrated and over-confident scenarios) a blend's gain was
1.6 standard errors, and without this rule its held-out AUC there was below the raw score's.

On a large set a first-order feature-aware Platt candidate that a screening rung finds a twin of a
second-order one (whose screen kept no pair) does not go on: the second-order twin stands in for it
(``gpucal.auto.cross_fit.growing_stand_ins``), as it is the twin kept on the last rung. A rule that
stopped a candidate trailing Platt scaling after the first fold of a large set's last rung was measured
and dropped, with a last rung of 40,000 rows: MBCT fitted on one fold's 20,000 rows of ``make_ctr``'s
cross400 scenario trailed Platt by 1.5 standard errors there, then led by 0.00027 per row on the other
fold and was chosen (held-out 0.11237 against Platt's 0.11287).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucal.kernels.jit import PARALLEL_MIN_ROWS

#: Rows of the first rung; a calibration set no larger is cross-fitted in one rung.
FIRST_RUNG_ROWS = 8_000
#: Each rung has this many times the rows of the one before (the last is cut to its rows).
GROWTH = 4
#: A last rung with fewer than this many times the rows of the rung before replaces that rung.
MIN_STEP = 1.5
#: A rung passes on this share of its candidates (rounded up, at least :data:`MIN_SURVIVORS`).
KEEP_SHARE = 1 / 4
#: Fewest candidates passed on from a rung (fewer when fewer ran).
MIN_SURVIVORS = 2
#: A candidate whose per-row ``scoring`` on a screening rung's held-out rows trails the rung's best by
#: more than this many standard errors is not passed on, whatever its rank: it is dominated.
DOMINATED_SE = 2.0
#: On a screening rung an expensive candidate stops after its first fold when it trails the best
#: candidate so far by more than this many standard errors there (0: unless it leads): it passes on only
#: as the rung's best.
SCREEN_EXPENSIVE_SE = 0.0
#: Calibration sets with more rows than this are large: the prediction must beat Platt scaling by
#: :data:`PLATT_MARGIN`, and the blend takes one setting per method.
LARGE_ROWS = 100_000
#: Most rows of the last rung (``cv_rows="auto"``): a larger calibration set is cross-fitted on a
#: subsample of this many rows there (its screening rungs grow to it as on any set).
LARGE_CV_ROWS = 1_000_000
#: On a large set a blend or feature-aware choice must beat Platt scaling on the cross-fitted rows by
#: more than this many standard errors, else Platt scaling predicts (``AutoCalibrator``'s docstring).
PLATT_MARGIN = 2.0
#: Folds of the last rung (the one that chooses) up to :data:`SMALL_ROWS` rows: on small sets each
#: fold's training rows count.
SMALL_N_FOLDS = 5
#: A last rung with more rows than this has :data:`MID_N_FOLDS` folds (up to :data:`MID_ROWS`): five
#: folds over 10,000-20,000 rows made the search cost 15-27 CPU seconds on make_ctr data.
SMALL_ROWS = 5_000
#: Folds of a screening rung (one that passes candidates on): it ranks, the last rung chooses.
SCREEN_N_FOLDS = 2
#: Folds of a last rung of more than :data:`SMALL_ROWS` rows, up to :data:`MID_ROWS`.
MID_N_FOLDS = 3
#: A last rung with more rows than this has :data:`LARGE_N_FOLDS` folds.
MID_ROWS = 25_000
#: Folds of a last rung over :data:`MID_ROWS` rows.
LARGE_N_FOLDS = 2
#: On rows on the GPU, a rung of fewer rows than this is cross-fitted on a host copy of its rows (the
#: later rungs and the refit stay on the device). Fits that small are bound on the GPU by kernel
#: launches, input checks and host round trips, not by rows: with eight fields on 1e6 rows the fit took
#: 7.8 s on an H200 against 4.4 s on its 16 host cores (the third run of ``benchmarks/results/gpu.md``),
#: and in the fourth run's profile 2,198 group-sum calls were 3.3 s of a 9.3 s fit. Below this bound the
#: CPU kernels run their serial twins (``gpucal.kernels.jit.PARALLEL_MIN_ROWS``), so such a rung takes
#: one host core whatever the machine.
HOST_RUNG_ROWS = PARALLEL_MIN_ROWS


@dataclass(frozen=True)
class Rung:
    """One rung of the search: ``rows`` rows cross-fitted over ``n_folds`` folds."""

    rows: int
    n_folds: int


@dataclass(frozen=True)
class SearchPlan:
    """The resolved search.

    Attributes
    ----------
    rungs : tuple of Rung
        In order; the rows grow, and the last rung's out-of-fold predictions choose.
    large : bool
        True above :data:`LARGE_ROWS` rows.
    """

    rungs: tuple[Rung, ...]
    large: bool

    @property
    def n_folds(self) -> int:
        """Folds of the last rung."""
        return self.rungs[-1].n_folds

    @property
    def cv_rows(self) -> int:
        """Rows of the last rung."""
        return self.rungs[-1].rows


def survivors_wanted(n_candidates: int) -> int:
    """How many of ``n_candidates`` a screening rung passes on (:data:`KEEP_SHARE`, :data:`MIN_SURVIVORS`)."""
    return min(n_candidates, max(MIN_SURVIVORS, math.ceil(KEEP_SHARE * n_candidates)))


def plan_search(n_rows: int, n_folds: int | str, cv_rows: int | str | None) -> SearchPlan:
    """Resolve ``n_folds`` and ``cv_rows`` into the rungs of the search (module docstring).

    Parameters
    ----------
    n_rows : int
        Calibration rows.
    n_folds : int or "auto"
        Folds of every rung; ``"auto"``: by the rung's rows (module docstring).
    cv_rows : int, "auto" or None
        Rows of the last rung (capped at ``n_rows``); None: every row; ``"auto"``: every row up to
        :data:`LARGE_CV_ROWS`.

    Returns
    -------
    SearchPlan
    """
    large = n_rows > LARGE_ROWS
    if cv_rows == "auto":
        cv_rows = LARGE_CV_ROWS
    last = n_rows if cv_rows is None else min(int(cv_rows), n_rows)
    sizes, rows = [], FIRST_RUNG_ROWS
    while rows < last:
        sizes.append(rows)
        rows *= GROWTH
    if sizes and last < MIN_STEP * sizes[-1]:  # a last step too small to pay for its rung
        sizes.pop()
    sizes.append(last)
    rungs = []
    for i, rows in enumerate(sizes):
        if n_folds != "auto":
            folds = int(n_folds)
        elif i < len(sizes) - 1:
            folds = SCREEN_N_FOLDS
        elif rows <= SMALL_ROWS:
            folds = SMALL_N_FOLDS
        else:
            folds = MID_N_FOLDS if rows <= MID_ROWS else LARGE_N_FOLDS
        rungs.append(Rung(rows=rows, n_folds=folds))
    return SearchPlan(rungs=tuple(rungs), large=large)


__all__ = [
    "DOMINATED_SE",
    "FIRST_RUNG_ROWS",
    "GROWTH",
    "KEEP_SHARE",
    "LARGE_CV_ROWS",
    "LARGE_N_FOLDS",
    "LARGE_ROWS",
    "MID_N_FOLDS",
    "MID_ROWS",
    "MIN_STEP",
    "MIN_SURVIVORS",
    "PLATT_MARGIN",
    "SCREEN_EXPENSIVE_SE",
    "SCREEN_N_FOLDS",
    "SMALL_N_FOLDS",
    "SMALL_ROWS",
    "Rung",
    "SearchPlan",
    "plan_search",
    "survivors_wanted",
]

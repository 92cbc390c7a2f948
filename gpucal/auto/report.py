"""The cross-fitting report: its metrics, their per-row losses, and one row per candidate, the ranked table.

``AutoCalibrator`` (``gpucal.auto.model``) scores every candidate on the held-out folds with ``METRICS``;
``ROW_LOSSES`` lets it drop a candidate that trails the best so far (``trailing_reason``) and weigh the
prediction against Platt row by row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import to_numpy
from gpucal.auto.candidates import Candidate
from gpucal.calibrators.logistic import EPS
from gpucal.metrics import brier, ece, log_loss

if TYPE_CHECKING:
    import pandas as pd

#: The metrics of the report, each lower-is-better; ``scoring`` picks the one that chooses.
METRICS = {"log_loss": log_loss, "brier": brier, "ece": ece}


def _row_log_loss(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    q = np.clip(p, EPS, 1.0 - EPS)
    return -(y * np.log(q) + (1.0 - y) * np.log1p(-q))


def _row_brier(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    return (p - y) ** 2


#: Per-row losses of the scorings that have one (racing compares candidates row by row).
ROW_LOSSES = {"log_loss": _row_log_loss, "brier": _row_brier}


def report_row(
    candidate: Candidate, status: str, per_fold: dict[str, list[float]] | None, seconds: float, scoring: str
) -> dict[str, Any]:
    """One candidate's row of the report: mean and spread of every metric over its folds, its times."""
    row: dict[str, Any] = {
        "candidate": candidate.label,
        "method": candidate.name,
        "params": dict(candidate.params),
        "status": status,
    }
    for name in METRICS:
        values = np.asarray(per_fold[name]) if per_fold is not None else np.array([np.nan])
        row[f"mean_test_{name}"] = float(values.mean())
        row[f"std_test_{name}"] = float(values.std())
    n_done = len(per_fold[scoring]) if per_fold is not None else 0
    row["mean_fit_time"] = seconds / n_done if n_done else np.nan
    row["n_folds_fitted"] = n_done
    row["fit_seconds"] = seconds
    return row


def fold_scores(
    y: np.ndarray, predicted: np.ndarray, weights: np.ndarray | None, row_losses: dict[str, np.ndarray]
) -> dict[str, float]:
    """Every metric of :data:`METRICS` on one held-out fold: log-loss and Brier as weighted means of
    ``row_losses`` (the fold's :data:`ROW_LOSSES`, computed once for the report and for racing), ECE
    from :func:`gpucal.metrics.ece`, which also checks the predictions."""
    scores = {"ece": ece(y, predicted, sample_weight=weights)}
    w = np.ones(y.shape[0]) if weights is None else weights
    total = float(y.shape[0] if weights is None else weights.sum())
    for name, losses in row_losses.items():
        scores[name] = float(w @ losses) / total
    return scores


def trailing_reason(
    scoring: str,
    drop_threshold: float | None,
    row_losses: np.ndarray | None,
    index: int,
    reference: int | None,
    rows: np.ndarray,
    weights: Any,
) -> str | None:
    """Why candidate ``index`` trails ``reference`` on the rows at positions ``rows`` (increasing), by
    ``drop_threshold``, or None.

    ``row_losses`` holds each candidate's held-out per-row ``scoring`` loss (:data:`ROW_LOSSES`) in its
    column; None when ``scoring`` has none.
    """
    if reference is None or drop_threshold is None or row_losses is None:
        return None
    w = np.ones(rows.shape[0]) if weights is None else to_numpy(weights)[rows]
    # One column at a time: a column of the column-major table is contiguous.
    diff = row_losses[:, index][rows] - row_losses[:, reference][rows]
    total = w.sum()
    if total <= 0:
        return None
    mean = float(w @ diff / total)
    error = float(np.sqrt(w @ (diff - mean) ** 2) / total)  # weights as row counts, as everywhere
    if mean <= drop_threshold * error:
        return None
    return f"{scoring} {mean:+.5f} per row vs the best so far ({error:.5f} standard error)"


def plain_value(value: Any) -> Any:
    """A report cell as JSON data: NaN -> None, numpy scalars -> Python numbers."""
    if isinstance(value, float | np.floating):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def report_table(rows: list[dict[str, Any]], scores: np.ndarray) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """``cv_results_`` and ``report_`` (its JSON form): ``rows`` ranked by ``scores`` (NaN ranks last)."""
    import pandas as pd

    ranks = np.full(len(rows), len(rows), dtype=np.int64)
    finite = np.flatnonzero(np.isfinite(scores))
    ranks[finite[np.argsort(scores[finite], kind="stable")]] = np.arange(1, finite.size + 1)
    for row, rank in zip(rows, ranks, strict=True):
        row["rank_test_score"] = int(rank)
    results = pd.DataFrame(rows)
    report = {column: [plain_value(value) for value in results[column]] for column in results.columns}
    return results, report


def summary_line(
    results: pd.DataFrame,
    best_index: int,
    scoring: str,
    n_candidates: int,
    cv_seconds: float,
    intercept: float | None,
    n_rows: int,
    refit_seconds: float,
) -> str:
    """The search in one line (``verbose``): the best, the blend (``intercept`` None: no blend), the times."""
    best = results.iloc[best_index]
    skipped = results.loc[results["status"] == "skipped", "candidate"].tolist()
    text = (
        f"best: {best['candidate']} {scoring} {best[f'mean_test_{scoring}']:.5f} "
        f"(of {n_candidates} candidates, {cv_seconds:.1f} s cross-fitting); "
    )
    if intercept is not None:
        shown = ", ".join(
            f"{results.iloc[i]['candidate']} {w:.2f}" for i, w in enumerate(results["blend_weight"]) if w > 0
        )
        text += f"blend of {shown}, intercept {intercept:+.3f}; "
    text += f"refitted on {n_rows:,} rows in {refit_seconds:.1f} s"
    if skipped:
        text += f"; skipped (time budget): {', '.join(skipped)}"
    return text


__all__ = [
    "METRICS",
    "ROW_LOSSES",
    "fold_scores",
    "plain_value",
    "report_row",
    "report_table",
    "summary_line",
    "trailing_reason",
]

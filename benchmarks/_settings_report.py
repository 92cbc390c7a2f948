"""Tables of the settings studies (``bench_hinge_knots.py``, ``bench_feature_platt_smooth.py``).

Their ``table[dataset][setting]`` is ``[mean, standard error, fit CPU s, ...]`` of the setting's held-out
log-loss minus a reference's, row by row; the reports show it x 1e-5.
"""

from __future__ import annotations

from dataclasses import dataclass

import bench_auto
import numpy as np

Table = dict[str, dict[str, list[float]]]


@dataclass(frozen=True)
class SettingSummary:
    """One setting over every dataset: the mean difference, the sets where it passes 2 standard errors
    below (``better``) or above (``worse``) the reference, the worst set and the fit CPU seconds summed."""

    mean: float
    better: int
    worse: int
    worst: str
    worst_diff: float
    cpu: float

    def cells(self) -> tuple[str, str, str, str, str]:
        """``mean x 1e-5``, ``better``, ``worse``, ``worst (x 1e-5, dataset)``, ``CPU s`` as table cells."""
        worst = f"{1e5 * self.worst_diff:+.1f} ({self.worst})"
        return f"{1e5 * self.mean:+.1f}", str(self.better), str(self.worse), worst, f"{self.cpu:.2f}"


def summarise(table: Table, label: str) -> SettingSummary:
    """:class:`SettingSummary` of the setting ``label`` over the datasets of ``table``."""
    rows = {name: table[name][label] for name in table}
    diffs = {name: r[0] for name, r in rows.items()}
    worst = max(diffs, key=lambda n: diffs[n])
    return SettingSummary(
        float(np.mean(list(diffs.values()))),
        sum(r[0] < -2 * r[1] for r in rows.values()),
        sum(r[0] > 2 * r[1] for r in rows.values()),
        worst,
        diffs[worst],
        sum(r[2] for r in rows.values()),
    )


def dataset_cells(row: dict[str, list[float]], labels: list[str]) -> list[str]:
    """One dataset's cells, ``mean (standard error)`` x 1e-5 per setting of ``labels``."""
    return [f"{1e5 * row[label][0]:+.0f} ({1e5 * row[label][1]:.0f})" for label in labels]


def difference_cell(
    y_test: np.ndarray, predicted: np.ndarray, reference: np.ndarray, cpu: float
) -> list[float]:
    """``[mean, standard error, cpu]`` of the held-out row log-loss of ``predicted`` minus ``reference``
    (the reference's row losses), paired row by row."""
    diff = bench_auto.row_log_loss(y_test, predicted) - reference
    return [float(diff.mean()), float(diff.std() / np.sqrt(diff.size)), cpu]

"""The calibration belt's plot (Finazzi et al. 2011): the bands of :func:`gpucal.metrics.calibration_belt`."""

from __future__ import annotations

from typing import Any

from gpucal.metrics.belt import CalibrationBeltResult, calibration_belt
from gpucal.plot.smooth import _axes


def plot_calibration_belt(
    y_true: Any,
    y_prob: Any,
    *,
    sample_weight: Any = None,
    ax: Any = None,
    belt: CalibrationBeltResult | None = None,
    **options: Any,
) -> Any:
    """Draw the calibration belt (one shaded band per level, the widest lightest) over the bisector;
    return the figure.

    ``belt`` reuses a computed :func:`gpucal.metrics.calibration_belt` (the rows are then not read);
    otherwise it is computed from the rows with ``options`` (``confidence_levels``, ``threshold``,
    ``max_degree``, ``grid``). The legend gives the degree, the test's p-value and the rows.
    """
    if belt is None:
        belt = calibration_belt(y_true, y_prob, sample_weight=sample_weight, **options)
    fig, ax = _axes(ax)
    ax.plot([0, 1], [0, 1], linestyle="--", color="black", linewidth=1)
    order = sorted(range(len(belt.confidence_levels)), key=lambda i: -belt.confidence_levels[i])
    for rank, i in enumerate(order):
        ax.fill_between(
            belt.grid,
            belt.lower[i],
            belt.upper[i],
            color=("#c6dbef", "#6baed6", "#2171b5")[min(rank, 2)],
            label=f"{belt.confidence_levels[i]:.0%}",
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed frequency")
    ax.set_title(f"calibration belt: degree {belt.degree}, p-value {belt.p_value:.3g}, n = {belt.n}")
    ax.legend(loc="upper left")
    return fig


__all__ = ["plot_calibration_belt"]

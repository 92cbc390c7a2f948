"""Reliability diagrams drawn with matplotlib's object API (no pyplot, no global state).

matplotlib is the optional extra ``gpucal[plot]``: it is imported inside the functions below, so
``import gpucal`` and ``import gpucal.plot`` work without it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import to_numpy
from gpucal._validation import as_1d_array, check_probabilities, check_same_index, text_keyed
from gpucal.metrics import ece
from gpucal.plot.curve import ReliabilityCurve, check_curve_params, reliability_curve

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Histogram beneath a quantile-bin diagram: its bins are equal-mass by construction, so their bars
# would be flat; the scores' distribution is shown on this many equal-width bins instead.
HISTOGRAM_BINS = 50
# Bins with fewer rows than this get hollow markers: their observed rate is noisy and their percentile
# band unreliable (a bin whose few labels are all 0 or all 1 gets a band of zero width).
SPARSE_BIN_ROWS = 30
# Axis limits are rounded up to a multiple of this.
LIMIT_STEP = 0.05
# A histogram whose tallest bar is more than this many times its lowest non-zero bar gets a log
# y-axis, so that the sparse score ranges (where the curve is least certain) stay visible.
HISTOGRAM_LOG_RATIO = 100.0


def _import_matplotlib() -> Any:
    """Return the ``matplotlib`` module, or raise an ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module("matplotlib")
    except ImportError as err:
        msg = (
            "gpucal.plot needs matplotlib, which is not installed: "
            "install the plot extra with `pip install 'gpucal[plot]'` (or `pip install matplotlib`)"
        )
        raise ImportError(msg) from err


def axes_figure(ax: Axes) -> Figure:
    """The figure that holds ``ax`` (its root figure); ``ValueError`` for axes that belong to none."""
    root = ax.get_figure(root=True)
    if root is None:
        msg = "ax: the axes belong to no figure"
        raise ValueError(msg)
    return root


def _named_predictions(predictions: Any) -> dict[str, Any]:
    """Return ``{name: 1-D predictions}`` from a mapping, a DataFrame or a single array."""
    if isinstance(predictions, Mapping):
        named = text_keyed(predictions.items(), "predictions")
    elif type(predictions).__module__.split(".")[0] in ("pandas", "polars", "cudf") and hasattr(
        predictions, "columns"
    ):
        named = text_keyed(((c, predictions[c]) for c in predictions.columns), "predictions")
    else:
        named = {"y_prob": predictions}
    if not named:
        msg = "predictions: no predictions given (empty mapping or DataFrame)"
        raise ValueError(msg)
    return named


def plot_reliability(
    y_true: Any,
    predictions: Any,
    *,
    sample_weight: Any = None,
    n_bins: int | str = "auto",
    strategy: str = "uniform",
    n_bootstrap: int = 200,
    confidence: float = 0.9,
    ax: Axes | None = None,
    show_histogram: bool = True,
    seed: int = 0,
) -> Figure:
    r"""Draw a reliability diagram of one or several predictions of the same labels.

    Each prediction gets one line (its bins' mean prediction against their observed rate, see
    :func:`~gpucal.plot.reliability_curve`) and a shaded bootstrap band at level ``confidence``;
    the diagonal :math:`\bar y = \bar p` is perfect calibration. The legend gives each prediction's
    ECE on the bins drawn (:func:`gpucal.metrics.ece` with the same ``n_bins`` and ``strategy``) and
    names them; with ``n_bins=15`` it is the ``ece_15_<strategy>`` row of :func:`gpucal.evaluate`. Beneath,
    a histogram of the predictions (weighted by ``sample_weight``) shows how much data each part of the
    curve stands on.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        Labels in {0, 1} (soft labels in [0, 1] allowed); arrays, pandas / polars / cudf Series.
    predictions : array-like of shape (n,), mapping of str to array-like, or DataFrame
        Predicted probabilities of the positive class. A mapping (or a pandas / polars DataFrame, one
        column per prediction) overlays several calibrators, named by its keys; a single array is
        named ``"y_prob"``.
    sample_weight : array-like of shape (n,), optional
        Non-negative row weights, used by the curve, its band, the ECE and the histogram.
    n_bins : int or "auto", default "auto"
        Number of bins; ``"auto"`` is :func:`~gpucal.plot.auto_n_bins` (Rice rule on the effective
        sample size, in [5, 50]). The same count is used for every prediction.
    strategy : {"uniform", "quantile"}, default "uniform"
        Equal-width bins (sklearn's ``calibration_curve``) or equal-mass bins on each prediction's
        weighted CDF.
    n_bootstrap : int, default 200
        Bootstrap replicates of the band; 0 draws no band.
    confidence : float, default 0.9
        Level of the band, in (0, 1).
    ax : matplotlib.axes.Axes, optional
        Axes to draw the diagram on; None makes a new figure. The histogram takes the bottom quarter of
        the axes' grid cell (axes placed by hand get it as an inset hanging below them).
    show_histogram : bool, default True
        Draw the histogram of the predictions beneath the diagram.
    seed : int, default 0
        Seed of the bootstrap; prediction ``k`` uses ``seed + k``.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the diagram (the root figure of ``ax`` when ``ax`` is given).

    Raises
    ------
    ImportError
        When matplotlib is not installed (``pip install 'gpucal[plot]'``).
    ValueError
        When pandas inputs (``y_true``, a prediction, ``sample_weight``) carry different indexes: rows are
        paired by index label, never by position (:func:`gpucal._validation.check_same_index`).

    Notes
    -----
    Empty bins are left out of the lines, never drawn at 0. Bins of fewer than ``SPARSE_BIN_ROWS`` (30)
    rows get hollow markers and a legend entry: their rate is noisy, and a percentile bootstrap cannot
    widen the band of a bin whose few labels are all 0 or all 1. Both axes run from 0 to the highest
    point, band end or prediction (so every row's prediction is on the axis), rounded up to 0.05 and at
    most 1, so that scores bunched near 0 (click-through
    rates) are not squeezed into a corner; ``fig.axes[0].set_xlim(0, 1)`` (and ``set_ylim``) restores
    the full square. With ``strategy="uniform"`` the histogram
    uses the diagram's own bins, so each point sits over the bar of rows it averages; with
    ``"quantile"`` those bars would be flat by construction, and the histogram uses
    ``HISTOGRAM_BINS`` equal-width bins. Its y-axis turns logarithmic when the bars span more than
    ``HISTOGRAM_LOG_RATIO``. The figure is made without pyplot, so nothing is registered globally: show it
    in a notebook by returning it, or save it with ``fig.savefig``.

    Examples
    --------
    Overlay a raw score, the true probability and their ECEs on 100,000 synthetic CTR rows:

    >>> from gpucal.datasets import make_ctr
    >>> df = make_ctr(100_000, seed=0)  # doctest: +SKIP
    >>> fig = plot_reliability(df["label"], {"score": df["score"], "truth": df["p_true"]})  # doctest: +SKIP
    >>> fig.savefig("reliability.png")  # doctest: +SKIP
    """
    check_curve_params("plot_reliability", n_bins, strategy, n_bootstrap, confidence, seed)
    matplotlib = _import_matplotlib()
    from matplotlib.figure import Figure

    raw = _named_predictions(predictions)
    indexed = {f"predictions[{name!r}]": values for name, values in raw.items()}
    # pandas inputs are paired by index label, never by position (the metrics' rule).
    check_same_index(y_true=y_true, **indexed, sample_weight=sample_weight)
    named = {name: check_probabilities(values, f"predictions[{name!r}]") for name, values in raw.items()}
    curves = {
        name: reliability_curve(
            y_true,
            values,
            sample_weight=sample_weight,
            n_bins=n_bins,
            strategy=strategy,
            n_bootstrap=n_bootstrap,
            confidence=confidence,
            seed=seed + k,
        )
        for k, (name, values) in enumerate(named.items())
    }
    # Every curve shares y_true and the weights, so "auto" resolves to the same count for all of them.
    n_bins_used = next(iter(curves.values())).n_bins

    if ax is None:
        fig = Figure(figsize=(6.4, 7.2 if show_histogram else 5.6), layout="constrained")
        if show_histogram:
            ax, hist_ax = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
        else:
            ax, hist_ax = fig.add_subplot(), None
    else:
        fig = axes_figure(ax)
        hist_ax = _append_histogram_axes(ax) if show_histogram else None

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    limit = _axis_limit(curves.values(), named.values(), sample_weight)
    ax.plot([0.0, 1.0], [0.0, 1.0], linestyle="--", color="0.5", linewidth=1.0, label="perfectly calibrated")
    for k, (name, curve) in enumerate(curves.items()):
        color = colors[k % len(colors)]
        error = ece(y_true, named[name], sample_weight=sample_weight, n_bins=n_bins_used, strategy=strategy)
        _draw_curve(ax, curve, color=color, label=f"{name} (ECE {error:.4f}, {n_bins_used} {strategy} bins)")
        if hist_ax is not None:
            _draw_histogram(hist_ax, named[name], sample_weight, curve, limit, color=color)
    if any((curve.count < SPARSE_BIN_ROWS).any() for curve in curves.values()):
        ax.plot(
            [],
            [],
            linestyle="none",
            marker="o",
            mfc="white",
            mec="0.3",
            label=f"bin of < {SPARSE_BIN_ROWS} rows",
        )

    band_note = f", {confidence:.0%} bootstrap band" if n_bootstrap > 0 else ""
    ax.set_title(f"Reliability diagram ({n_bins_used} {strategy} bins{band_note})")
    ax.set_ylabel("observed positive rate")
    ax.set_xlim(0.0, limit)
    ax.set_ylim(0.0, limit)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(visible=True, alpha=0.3)
    if hist_ax is None:
        ax.set_xlabel("mean predicted probability")
    else:
        ax.tick_params(labelbottom=False)
        hist_ax.set_xlabel("predicted probability")
        hist_ax.set_ylabel("rows" if sample_weight is None else "weight")
        _maybe_log_scale(hist_ax)
    return fig


def plot_reliability_to_png(
    path: str | os.PathLike[str], y_true: Any, predictions: Any, **kwargs: Any
) -> Path:
    """Draw :func:`plot_reliability` and write it as a PNG file (the CLI's entry point).

    Uses matplotlib's object API with the Agg canvas: no pyplot, no global backend switch, no window.

    Parameters
    ----------
    path : str or os.PathLike
        Output file; its parent directory must exist.
    y_true, predictions
        As in :func:`plot_reliability`.
    **kwargs
        Passed to :func:`plot_reliability` (``sample_weight``, ``n_bins``, ``strategy``, ...), plus
        ``dpi`` (default 150) for the image.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    dpi = kwargs.pop("dpi", 150)
    if "ax" in kwargs:
        msg = "plot_reliability_to_png makes its own figure; `ax` cannot be passed"
        raise TypeError(msg)
    fig = plot_reliability(y_true, predictions, **kwargs)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    out = Path(path)
    fig.savefig(out, format="png", dpi=dpi)
    return out


def _append_histogram_axes(ax: Any) -> Any:
    """Return new axes below ``ax``, sharing its x-axis, a third of its height.

    A grid-placed ``ax`` gives up the bottom quarter of its grid cell, so layout managers see two
    ordinary subplots; axes placed by hand get an inset hanging below them instead.
    """
    spec = ax.get_subplotspec()
    if spec is None:
        return ax.inset_axes((0.0, -0.43, 1.0, 0.33), sharex=ax)
    grid = spec.subgridspec(2, 1, height_ratios=[3, 1])
    ax.set_subplotspec(grid[0])
    return ax.figure.add_subplot(grid[1], sharex=ax)


def _axis_limit(curves: Any, predictions: Any, sample_weight: Any) -> float:
    """Return the upper limit of both axes, rounded up, at most 1: the curves' largest point or band
    end, or the largest prediction of positive weight (no row of the histogram lies beyond the axis)."""
    highest = 0.0
    for curve in curves:
        values = np.concatenate([curve.mean_predicted, curve.observed, curve.band_high])
        highest = max(highest, float(np.nanmax(values)))
    w = None if sample_weight is None else np.asarray(to_numpy(as_1d_array(sample_weight, "w")), dtype=float)
    for values in predictions:
        kept = to_numpy(values) if w is None else to_numpy(values)[w > 0]
        if kept.shape[0]:
            highest = max(highest, float(kept.max()))
    return min(1.0, LIMIT_STEP * np.ceil(1.05 * highest / LIMIT_STEP)) if highest > 0 else 1.0


def _draw_curve(ax: Any, curve: ReliabilityCurve, *, color: str, label: str) -> None:
    """Draw one curve: its band, a line with filled markers, hollow markers on sparse bins."""
    if curve.n_bootstrap > 0:
        ax.fill_between(
            curve.mean_predicted, curve.band_low, curve.band_high, color=color, alpha=0.2, linewidth=0
        )
    sparse = curve.count < SPARSE_BIN_ROWS
    ax.plot(
        curve.mean_predicted,
        curve.observed,
        marker="o",
        markersize=3.5,
        markevery=np.flatnonzero(~sparse).tolist(),
        color=color,
        label=label,
    )
    if sparse.any():
        ax.plot(
            curve.mean_predicted[sparse],
            curve.observed[sparse],
            linestyle="none",
            marker="o",
            markersize=4.5,
            mfc="white",
            mec=color,
        )


def _draw_histogram(
    ax: Any, values: Any, sample_weight: Any, curve: ReliabilityCurve, limit: float, *, color: str
) -> None:
    """Draw the (weighted) histogram of one prediction as an outline.

    Equal-width diagrams reuse the curve's own bin weights, so every point sits over the bar of exactly
    the rows it averages (``ax.hist`` would close bins on the left, the curve closes them on the right).
    """
    if curve.strategy == "uniform":
        heights = np.zeros(curve.n_bins)
        heights[curve.bin_index] = curve.weight
        ax.stairs(heights, np.linspace(0.0, 1.0, curve.n_bins + 1), color=color, linewidth=1.2)
        return
    edges = np.linspace(0.0, limit, HISTOGRAM_BINS + 1)
    weights = None if sample_weight is None else to_numpy(as_1d_array(sample_weight, "sample_weight"))
    ax.hist(to_numpy(values), bins=edges, weights=weights, histtype="step", color=color, linewidth=1.2)


def _maybe_log_scale(ax: Any) -> None:
    """Switch the histogram to a log y-axis when its non-zero bars span more than ``HISTOGRAM_LOG_RATIO``."""
    heights = np.concatenate([np.zeros(1)] + [patch.get_path().vertices[:, 1] for patch in ax.patches])
    positive = heights[heights > 0]
    if positive.size and positive.max() > HISTOGRAM_LOG_RATIO * positive.min():
        ax.set_yscale("log")

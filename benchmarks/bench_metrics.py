"""Speed of gpucal.metrics against the peers, side by side in one run.

* ECE with 15 equal-width bins on ``n`` rows: gpucal ``ece`` vs netcal's ``ECE`` vs a plain numpy
  ``bincount`` (the floor any binned metric can reach in numpy); the three values must agree.
* MVCE with ``r = 100`` views (MBCT's evaluation setting) on ``n`` rows, and on ``n / 10`` rows.
* Issue 16's metrics against their reference implementations on the same rows: ECCE (+sigma) vs mcgrad,
  smooth ECE vs relplot, the debiased ECE vs uncertainty-calibration, ICI/E50/E90/Emax vs probcal, the
  multicalibration error (5 categorical segment columns, MCGrad's defaults) vs mcgrad's
  ``MulticalibrationError``. Each pair's values must agree. A reference too slow or too large in memory
  for ``n`` rows on this machine (``REFERENCE_ROWS``) runs on fewer rows, and gpucal is timed on those
  rows too for its ratio.

Each timing is the best of ``--repeats`` calls after one warm-up call on small data (numba's compile or
cache load, netcal's torch import), so it measures the steady state a user sees in a session. Writes
``benchmarks/results/metrics.md``.

Usage: ``python benchmarks/bench_metrics.py [--n 10000000] [--repeats 3] [--mvce-views 100]
[--only-new]`` (``--only-new``: the issue 16 section alone, keeping the rest of the report).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

N_BINS = 15
RESULTS = Path(__file__).resolve().parent / "results" / "metrics.md"
NEW_SECTION = "## Issue 16 metrics against their references"
# Largest row counts at which each reference runs here (2 cores, 23 GB): MCGrad's MCE holds a
# (50, n) float mask per chunk of segments and loops over 376 segments; probcal's LOESS gathers
# (anchors x 0.75 n) windows in numpy (about a minute at 1e7).
REFERENCE_ROWS = {"multicalibration_error": 1_000_000}
SEGMENT_SIZES = (3, 5, 4, 10, 2)


def best_time(call: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Return the shortest wall time of ``repeats`` calls and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return best, result


def numpy_ece(y: np.ndarray, p: np.ndarray) -> float:
    """Classic ECE by three ``np.bincount`` calls (left-closed bins, as netcal)."""
    idx = np.minimum((p * N_BINS).astype(np.intp), N_BINS - 1)
    count = np.bincount(idx, minlength=N_BINS)
    sum_p = np.bincount(idx, weights=p, minlength=N_BINS)
    sum_y = np.bincount(idx, weights=y, minlength=N_BINS)
    return float(np.abs(sum_y - sum_p).sum() / count.sum())


def new_metric_pairs(n: int, seed: int) -> list[tuple[str, Callable[[int], Any], Callable[[int], Any]]]:
    """Return ``(name, gpucal(rows), reference(rows))`` for issue 16's metrics on the first ``rows`` of
    one data set of ``n`` rows (continuous scores, 5 categorical segment columns)."""
    import calibration
    import mcgrad.metrics as mcgrad_metrics
    import pandas as pd
    import probcal.metrics as probcal_metrics
    import relplot

    from gpucal import metrics

    rng = np.random.default_rng(seed)
    p = rng.beta(0.8, 2.0, n)
    segments = pd.DataFrame({f"f{j}": rng.integers(0, k, n) for j, k in enumerate(SEGMENT_SIZES)})
    bias = 0.05 * (segments["f0"].to_numpy() == 1)
    y = (rng.random(n) < np.clip(p**1.2 + bias, 0, 1)).astype(np.float64)
    y_int = y.astype(np.int64)
    frame = segments.assign(y=y, p=p)
    columns = list(segments.columns)

    def mcgrad_mce(k: int) -> float:
        return float(
            mcgrad_metrics.MulticalibrationError(
                frame.iloc[:k], "y", "p", categorical_segment_columns=columns
            ).mce
        )

    return [
        ("ecce", lambda k: metrics.ecce(y[:k], p[:k]), lambda k: mcgrad_metrics.ecce(y[:k], p[:k])),
        (
            "ecce_sigma",
            lambda k: metrics.ecce_sigma(y[:k], p[:k]),
            lambda k: mcgrad_metrics.ecce_sigma(y[:k], p[:k]),
        ),
        ("smooth_ece", lambda k: metrics.smooth_ece(y[:k], p[:k]), lambda k: relplot.smECE(p[:k], y[:k])),
        (
            "ece_debiased",
            lambda k: metrics.ece_debiased(y[:k], p[:k]),
            lambda k: calibration.get_calibration_error(p[:k], y_int[:k], p=2, debias=True),
        ),
        ("ici", lambda k: metrics.ici(y[:k], p[:k]), lambda k: probcal_metrics.ici(y_int[:k], p[:k])),
        (
            "multicalibration_error",
            lambda k: metrics.multicalibration_error(y[:k], p[:k], segments.iloc[:k]).mce,
            mcgrad_mce,
        ),
    ]


def run_new_metrics(n: int, repeats: int, seed: int) -> list[str]:
    """Time issue 16's metrics and their references side by side; return the report section's lines."""
    import warnings
    from importlib.metadata import version

    import calibration  # noqa: F401 - its version is read below through importlib.metadata

    warnings.filterwarnings("ignore", message="The inplace keyword")  # MCGrad's own pandas call
    pairs = new_metric_pairs(n, seed)
    for _, ours, theirs in pairs:  # warm-up on small data: numba compile or cache load, imports
        ours(2_000)
        theirs(2_000)
    table = []
    for name, ours, theirs in pairs:
        rows = min(n, REFERENCE_ROWS.get(name, n))
        t_ours, v_ours = best_time(lambda ours=ours, rows=rows: ours(rows), repeats)
        t_ref, v_ref = best_time(lambda theirs=theirs, rows=rows: theirs(rows), 1)
        t_full = t_ours if rows == n else best_time(lambda ours=ours: ours(n), repeats)[0]
        if not np.isclose(v_ours, v_ref, rtol=1e-6 if name == "multicalibration_error" else 1e-9):
            msg = f"{name}: gpucal {v_ours!r} and its reference {v_ref!r} disagree"
            raise SystemExit(msg)
        table.append((name, rows, t_ours, t_ref, t_full, float(v_ours)))
        print(f"{name}: {rows:.0e} rows gpucal {t_ours:.3f} s, reference {t_ref:.3f} s", flush=True)
    lines = [
        NEW_SECTION,
        "",
        f"Run started {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}; load average "
        f"{os.getloadavg()[0]:.1f} at the end. Scores Beta(0.8, 2), labels Bernoulli(p^1.2) plus a 5-point "
        f"bias in one segment; 5 categorical segment columns of {', '.join(map(str, SEGMENT_SIZES))} values. "
        f"gpucal: best of {repeats} call(s); references: one call (mcgrad {version('mcgrad')}, relplot "
        f"{version('relplot')}, uncertainty-calibration {version('uncertainty-calibration')}, probcal "
        f"{version('probcal')}). Values agree to 1e-9 relative (MCE: 1e-6, MCGrad computes in float32). "
        "A reference timed on fewer rows than the rest could not run on all of them here: MCGrad's "
        "MulticalibrationError holds a (50, n) float mask per chunk of its 376 segments (tens of GB and "
        "minutes at 1e7); the last column gives gpucal's time on all the rows.",
        "",
        f"| metric | reference | rows | gpucal s | reference s | reference / gpucal | gpucal s, {n:.0e} rows "
        "| value |",
        "|---|---|---|---|---|---|---|---|",
    ]
    references = {
        "ecce": "mcgrad `ecce`",
        "ecce_sigma": "mcgrad `ecce_sigma`",
        "smooth_ece": "relplot `smECE`",
        "ece_debiased": "uncertainty-calibration `get_calibration_error(p=2, debias=True)`",
        "ici": "probcal `ici`",
        "multicalibration_error": "mcgrad `MulticalibrationError(...).mce`",
    }
    lines += [
        f"| `{name}` | {references[name]} | {rows:.0e} | {t_ours:.3f} | {t_ref:.3f} | {t_ref / t_ours:.1f}x "
        f"| {t_full:.3f} | {value:.9g} |"
        for name, rows, t_ours, t_ref, t_full, value in table
    ]
    lines.append("")
    return lines


def write_new_section(lines: list[str]) -> None:
    """Replace (or append) the issue 16 section of the report, keeping the rest."""
    text = RESULTS.read_text() if RESULTS.exists() else "# gpucal.metrics speed\n"
    head = text.split(NEW_SECTION)[0].rstrip("\n")
    RESULTS.write_text(head + "\n\n" + "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--only-new", action="store_true", help="run only the issue 16 section")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mvce-views", type=int, default=100)
    parser.add_argument("--mvce-bin-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    if args.only_new:
        lines = run_new_metrics(args.n, args.repeats, args.seed)
        write_new_section(lines)
        print("\n".join(lines))
        return

    from netcal.metrics import ECE

    from gpucal.metrics import ece, mvce

    rng = np.random.default_rng(args.seed)
    p = rng.beta(0.8, 2.0, args.n)
    y = (rng.random(args.n) < p**1.2).astype(np.float64)
    y_int = y.astype(np.int64)
    small = slice(0, 10_000)
    ece(y[small], p[small])
    mvce(y[small], p[small], n_views=2, bin_size=100)
    ECE(N_BINS).measure(p[small], y_int[small])

    rows = []
    t_gpucal, v_gpucal = best_time(lambda: ece(y, p, n_bins=N_BINS), args.repeats)
    t_netcal, v_netcal = best_time(lambda: ECE(N_BINS).measure(p, y_int), args.repeats)
    t_numpy, v_numpy = best_time(lambda: numpy_ece(y, p), args.repeats)
    rows.append(("gpucal `ece`", t_gpucal, v_gpucal))
    rows.append(("netcal `ECE`", t_netcal, v_netcal))
    rows.append(("numpy `bincount`", t_numpy, v_numpy))
    if not (np.isclose(v_gpucal, v_netcal, rtol=1e-9) and np.isclose(v_gpucal, v_numpy, rtol=1e-9)):
        msg = f"ECE values disagree: gpucal {v_gpucal}, netcal {v_netcal}, numpy {v_numpy}"
        raise SystemExit(msg)

    mvce_rows = []
    for n in (args.n // 10, args.n):
        t, v = best_time(
            lambda n=n: mvce(y[:n], p[:n], n_views=args.mvce_views, bin_size=args.mvce_bin_size, seed=1), 1
        )
        mvce_rows.append((n, t, v))

    import netcal
    import numba

    lines = [
        "# gpucal.metrics speed",
        "",
        f"Run started {started:%Y-%m-%d %H:%M UTC} by `benchmarks/bench_metrics.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}, "
        f"netcal {netcal.__version__}. CPU only (no GPU on this machine). Best of {args.repeats} calls "
        "after a warm-up call on small data; the machine is shared, so compare ratios within this run.",
        "",
        f"## ECE, {N_BINS} equal-width bins, {args.n:.0e} rows",
        "",
        "| implementation | seconds | netcal / this | value |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {t:.3f} | {t_netcal / t:.1f}x | {v:.12f} |" for name, t, v in rows]
    lines += [
        "",
        f"gpucal is {t_netcal / t_gpucal:.1f}x faster than netcal and takes {t_gpucal / t_numpy:.1f}x "
        "the time of the bare numpy bincount (which checks nothing: gpucal validates labels and "
        "probabilities, matches sklearn's right-closed bins exactly and takes weights).",
        "",
        f"## MVCE, r = {args.mvce_views} views, bin size {args.mvce_bin_size}, p = 2 (one call each)",
        "",
        "| rows | seconds | value |",
        "|---|---|---|",
    ]
    lines += [f"| {n:.0e} | {t:.2f} | {v:.6f} |" for n, t, v in mvce_rows]
    lines += ["", *run_new_metrics(args.n, args.repeats, args.seed)]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

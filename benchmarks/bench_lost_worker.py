"""What a lost worker costs an MBCT fit: 4e6 rows on a 2-worker LocalCluster, one worker SIGKILLed.

Data: ``_mbct_data.ctr_speed_frame`` (``make_ctr(n, "mixed")`` with the 8 categorical features of the
MBCT speed benchmark), written once as 8 Parquet files of 5e5 rows into ``$GPUCAL_DATA/lost_worker`` or
``~/.cache/gpucal/lost_worker`` and read with ``dd.from_map(pd.read_parquet, files)`` (a lost partition is
read again from its file). Cluster: ``gpucal.distributed.local_cluster(n_workers=2, threads_per_worker=1,
processes=True)``, each worker under a nanny that starts a new one when its process dies. After an
untimed warm-up fit on 20,000 rows:

1. the fit without a fault (wall time in the client);
2. the same fit with one worker process killed by SIGKILL at a fraction of step 1's time (a thread of
   this process sends the signal, as a preempted machine or the out-of-memory killer would), once per
   fraction in ``--kill-at`` (default ``KILL_AT``); the cluster waits for its two workers before each fit.

Each faulty fit's model is compared with step 1's: tree structure identical, node values' largest
difference. Run: ``nice -n 5 python benchmarks/bench_lost_worker.py [--quick]``; results in
``benchmarks/results/lost_worker.{md,json}`` (``--quick``: 4e5 rows, ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's gpucal, not an installed one
import _mbct_data

N_WORKERS = 2
N_FILES = 8
WARM_UP_ROWS = 20_000
#: When the worker is killed, as a fraction of the fit's time without a fault.
KILL_AT = (0.25, 0.5, 0.75)
STRUCTURE = ("node_feature", "child_table", "tree_start")


def data_files(n_rows: int) -> list[Path]:
    """Write the missing Parquet files (``N_FILES`` of ``n_rows / N_FILES`` rows); return their paths."""
    root = Path(os.environ.get("GPUCAL_DATA", Path.home() / ".cache" / "gpucal")) / "lost_worker"
    root.mkdir(parents=True, exist_ok=True)
    per_file = n_rows // N_FILES
    features, _, _ = _mbct_data.speed_features("ctr")
    paths = []
    for i in range(N_FILES):
        path = root / f"ctr-{per_file}-{i:02d}.parquet"
        if not path.exists():
            frame = _mbct_data.ctr_speed_frame(per_file, row_offset=i * per_file)
            frame[["score", "label", *features]].to_parquet(path.with_suffix(".partial"), index=False)
            path.with_suffix(".partial").rename(path)
        paths.append(path)
    return paths


def _fit(files: list[Path], features: list[str]) -> tuple[Any, float]:
    import dask.dataframe as dd

    mbct = _mbct_data.mbct_class()
    frame = dd.from_map(pd.read_parquet, [str(f) for f in files])
    model = mbct(feature_cols=features, categorical_cols=features)
    t0 = time.perf_counter()
    model.fit(frame[["score", *features]], frame["label"].astype(np.float64))
    return model, time.perf_counter() - t0


def _kill_later(client: Any, delay: float, out: dict[str, Any]) -> threading.Timer:
    """SIGKILL the first worker's process after ``delay`` seconds; record which and when."""
    pids = client.run(os.getpid)
    address = sorted(pids)[0]

    def kill() -> None:
        os.kill(pids[address], signal.SIGKILL)
        out.update({"killed": address, "pid": pids[address], "at_s": delay})

    timer = threading.Timer(delay, kill)
    timer.start()
    return timer


def _compare(model: Any, reference: Any) -> dict[str, Any]:
    e1, e2 = reference.ensemble_, model.ensemble_
    same = all(np.array_equal(getattr(e1, n), getattr(e2, n)) for n in STRUCTURE)
    diff = float(np.max(np.abs(e2.node_value - e1.node_value))) if same else float("nan")
    return {"same_structure": same, "max_node_value_diff": diff, "n_trees": int(e2.n_trees)}


def run(n_rows: int, kill_at: tuple[float, ...]) -> dict[str, Any]:
    import dask
    import distributed

    from gpucal.distributed import local_cluster

    features, _, _ = _mbct_data.speed_features("ctr")
    files = data_files(n_rows)
    warm = data_files(WARM_UP_ROWS * N_FILES)[:1]
    result: dict[str, Any] = {"rows": n_rows, "files": len(files), "fits": []}
    with (
        local_cluster(N_WORKERS, threads_per_worker=1, processes=True) as cluster,
        distributed.Client(cluster) as client,
    ):
        _fit(warm, features)
        reference, base_s = _fit(files, features)
        result["fits"].append({"fault": "none", "fit_s": base_s, **_compare(reference, reference)})
        print(f"no fault: {base_s:.1f} s", flush=True)
        for fraction in kill_at:
            client.wait_for_workers(N_WORKERS, timeout=120)
            _fit(warm, features)  # the restarted worker loads its kernels before the timed fit
            kill: dict[str, Any] = {}
            timer = _kill_later(client, fraction * base_s, kill)
            model, fit_s = _fit(files, features)
            timer.cancel()
            row = {"fault": f"SIGKILL at {fraction:.0%} of the fit", "fit_s": fit_s, "killed": None, **kill}
            row.update(_compare(model, reference))
            result["fits"].append(row)
            print(row, flush=True)
        result["dask"] = dask.__version__
    return result


def report(result: dict[str, Any], out: Path) -> None:
    base = result["fits"][0]["fit_s"]
    lines = [
        f"# A lost worker: MBCT on {result['rows']:,} rows, 2 workers, one killed",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_lost_worker.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end "
        f"(the machine was shared with other jobs: times are slower than on an idle one); Python "
        f"{platform.python_version()}, dask {result['dask']}. CPU only.",
        "",
        f"- Data: `_mbct_data.ctr_speed_frame` (8 categorical features), {result['files']} Parquet files "
        "read with `dd.from_map(pd.read_parquet, files)`; `MBCT(feature_cols=features, "
        "categorical_cols=features)`, defaults otherwise.",
        "- Cluster: `local_cluster(n_workers=2, threads_per_worker=1, processes=True)`: each worker under "
        "a nanny, which starts a new worker process (a new address) when one dies.",
        "- Fault: the first worker's process SIGKILLed by a timer at a fraction of the fault-free fit's "
        "time. What it held (its partitions read, its per-worker store, the trees' routing so far) is "
        "recomputed from the graph on the surviving worker and on the new one.",
        "",
        "| fault | worker killed | fit s | against no fault | trees | same trees | largest node value "
        "difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for fit in result["fits"]:
        lines.append(
            f"| {fit['fault']} | {fit.get('killed') or '-'} | {fit['fit_s']:.1f} | "
            f"{fit['fit_s'] / base:.2f}x | {fit['n_trees']} | "
            f"{'yes' if fit['same_structure'] else 'no'} | {fit['max_node_value_diff']:.1e} |"
        )
    lines += [
        "",
        "The kernels were compiled into numba's disk cache by an earlier run. A row without a worker "
        "killed is a fit that ended before its timer.",
        "",
        "Before the recovery (per-worker tasks pinned with `allow_other_workers=False`), the same run with "
        "a kill at 25% of the fit (4e6 rows, 2026-11-26) never finished: 25 minutes after the kill the "
        "scheduler held one task in state `no-worker`, a worker's store (`_on_group`) restricted to the "
        "dead worker's address without loose restrictions, and the fit waited for it until stopped.",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="4e5 rows; results in *_quick.*")
    parser.add_argument("--kill-at", type=float, nargs="+", default=KILL_AT, help="fractions of the fit")
    args = parser.parse_args()
    n_rows = 400_000 if args.quick else 4_000_000
    result = run(n_rows, tuple(args.kill_at))
    name = "lost_worker_quick" if args.quick else "lost_worker"
    report(result, Path(__file__).resolve().parent / "results" / name)


if __name__ == "__main__":
    main()

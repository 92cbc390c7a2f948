"""MBCT fitted on 4e7 rows of Parquet on a 2-worker LocalCluster: time, memory, overhead, 8-GPU projection.

Issue 6, "A scale benchmark". Data: ``_mbct_data.ctr_speed_frame`` (``make_ctr(n, "mixed")``, the 8
categorical features of the MBCT speed benchmark) written once as 40 Parquet files of 1e6 rows (rows
``i * 1e6 ..``; score, label and the features) into ``$GPUCAL_DATA/scale`` or ``~/.cache/gpucal/scale``,
one file per task so memory stays small; existing files are kept. The run, in this order:

1. overhead, one machine: the first 10 files read into one pandas frame and ``MBCT(...).fit`` in a fresh
   process (JIT warm-up on 20,000 rows untimed, the cell of ``bench_mbct_speed.py``);
2. overhead, distributed: the same 10 files as ``dd.read_parquet`` on
   ``gpucal.distributed.local_cluster(n_workers=2, threads_per_worker=1, processes=True)``, after an
   untimed warm-up fit on 20,000 rows; the trees are compared with step 1's;
3. scale: the workers restarted, warmed up again, and the fit on all 40 files (4e7 rows).

Memory: the summed RSS of this process and all its descendants (scheduler and client live here; nannies
and workers are children) sampled every 0.25 s, and each process's VmHWM. Every pass over the rows is
logged (the fit's calls of the dask rows' ``reduce``, ``sum_in_shares``, ``map`` and ``per_worker``,
wrapped in this process only); the 8-GPU projection is computed from that log and the fitted trees.

Run: ``nice -n 5 python benchmarks/bench_distributed_scale.py [--quick]``; results in
``benchmarks/results/distributed_scale.{md,json}`` (``--quick``: 4 files of 2e5 rows, ``*_quick.*``).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mbct_data

# Targets of issue 6 on the 2-core machine.
FIT_TARGET_S = 300.0
MEMORY_TARGET_GB = 8.0
OVERHEAD_TARGET = 1.5
SAMPLE_EVERY_S = 0.25
WARM_UP_ROWS = 20_000
N_WORKERS = 2

# Figures of the projection (vendor data sheets; achieved bandwidth is typically 60-80 % of them).
HBM_BYTES_PER_S = 3.35e12  # H100 SXM5, HBM3
ACHIEVED_SHARE = (0.6, 0.8)
NVLINK_BYTES_PER_S = 450e9  # NVLink 4, per direction per GPU (900 GB/s both ways)
PCIE_BYTES_PER_S = 64e9  # PCIe 5 x16, per direction
N_GPUS = 8
KERNEL_LAUNCH_S = 10e-6  # a launch plus a host synchronisation, per kernel
N_STATS = 7  # gpucal.kernels.group_sums statistics per (node, code)

CELL = r"""
import json, sys, time
import numpy as np
import pandas as pd

files, columns, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
sys.path.insert(0, sys.argv[4])
from _mbct_data import mbct_class

def status_kb(name):
    return int(open("/proc/self/status").read().split(name + ":")[1].split()[0])

t0 = time.perf_counter()
parts = [pd.read_parquet(f, columns=["score", "label", *columns]) for f in files]
frame = pd.concat(parts, ignore_index=True)
del parts
read_s = time.perf_counter() - t0
y = frame.pop("label").to_numpy(np.float64)
MBCT = mbct_class()
MBCT(feature_cols=columns, categorical_cols=columns).fit(frame.iloc[:WARM], y[:WARM])  # JIT, untimed
start_kb = status_kb("VmRSS")
model = MBCT(feature_cols=columns, categorical_cols=columns)
t0 = time.perf_counter()
model.fit(frame, y)
fit_s = time.perf_counter() - t0
model.save(out)
print(json.dumps({"fit_s": fit_s, "read_s": read_s, "rows": len(frame), "rss_before_fit_mb": start_kb / 1024,
                  "vmhwm_mb": status_kb("VmHWM") / 1024, "history": model.history_}))
""".replace("WARM", str(WARM_UP_ROWS))


# --------------------------------------------------------------------------------------------------
# Data


def data_dir() -> Path:
    """``$GPUCAL_DATA/scale`` or ``~/.cache/gpucal/scale``."""
    root = Path(os.environ.get("GPUCAL_DATA", Path.home() / ".cache" / "gpucal"))
    out = root / "scale"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _write_file(path: Path, n_rows: int, row_offset: int) -> None:
    """Write rows ``row_offset .. row_offset + n_rows - 1`` as one Parquet file (renamed when complete)."""
    features, _, _ = _mbct_data.speed_features("ctr")
    frame = _mbct_data.ctr_speed_frame(n_rows, row_offset=row_offset)[["score", "label", *features]]
    partial = path.with_suffix(".partial")
    frame.to_parquet(partial, index=False)
    partial.rename(path)


def generate(n_files: int, rows_per_file: int) -> tuple[list[Path], dict[str, Any]]:
    """Write the missing files (two processes, one file per task); return the paths and the timing."""
    directory = data_dir()
    paths = [directory / f"ctr-{rows_per_file}-{i:03d}.parquet" for i in range(n_files)]
    missing = [(p, rows_per_file, i * rows_per_file) for i, p in enumerate(paths) if not p.exists()]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_write_file, *zip(*missing, strict=True))) if missing else None
    seconds = time.perf_counter() - t0
    info = {
        "directory": str(directory),
        "files": n_files,
        "rows_per_file": rows_per_file,
        "written": len(missing),
        "seconds": seconds,
        "bytes": sum(p.stat().st_size for p in paths),
    }
    return paths, info


# --------------------------------------------------------------------------------------------------
# Memory


class MemorySampler:
    """Summed RSS of this process and all its descendants every ``SAMPLE_EVERY_S`` in a thread.

    ``phase()`` resets the maximum and returns it, with each live process's VmHWM, when the block ends.
    """

    def __init__(self) -> None:
        self.root = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def total_rss(self) -> int:
        total = 0
        for proc in [self.root, *self.root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self.peak = max(self.peak, self.total_rss())

    def processes(self) -> list[dict[str, Any]]:
        """Every live process of the tree: pid, role and VmHWM in MiB."""
        out = []
        for proc in [self.root, *self.root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error, OSError, IndexError):
                status = Path(f"/proc/{proc.pid}/status").read_text()
                hwm_kb = int(status.split("VmHWM:")[1].split()[0])
                role = _role(" ".join(proc.cmdline()))
                out.append({"pid": proc.pid, "role": role, "vmhwm_mb": hwm_kb / 1024})
        return out

    @contextlib.contextmanager
    def phase(self, result: dict[str, Any]) -> Iterator[None]:
        self.peak = self.total_rss()
        result["rss_before_mb"] = self.peak / 2**20
        yield
        self.peak = max(self.peak, self.total_rss())
        result["peak_rss_all_mb"] = self.peak / 2**20
        result["processes"] = self.processes()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


# --------------------------------------------------------------------------------------------------
# The log of passes


@dataclass
class PassLog:
    """Every pass of a distributed fit: what it computed, how long the client waited, nodes in a batch."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    active: bool = False

    def wrap(self, kind: str, call: Callable[..., Any], fn_arg: int) -> Callable[..., Any]:
        """``call`` timed and logged; its argument ``fn_arg`` is the function mapped over partitions."""

        @wraps(call)
        def logged(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return call(*args, **kwargs)
            fn = args[fn_arg] if len(args) > fn_arg else None
            name = getattr(fn, "__name__", kind)
            t0 = time.perf_counter()
            out = call(*args, **kwargs)
            entry = {"kind": kind, "fn": name, "s": time.perf_counter() - t0}
            if name == "_share_histogram":
                # A batch of open nodes (items) cut into shares: (self, fn, finish or lo, n_items or hi,
                # batch, parent, n_nodes, n_values, ...) in both DaskRows.sum_in_shares and the
                # streamed sum.
                n_values = args[7]
                entry["fn"] = "_histogram"
                entry["nodes"] = len(args[4])
                entry["hist_bytes"] = len(args[4]) * int(np.sum(n_values)) * N_STATS * 8
            self.entries.append(entry)
            return out

        return logged

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[dict[str, Any]]]:
        self.entries, self.active = [], True
        try:
            yield self.entries
        finally:
            self.active = False


def instrument() -> PassLog:
    """Wrap the passes of the rows the fit reads (``gpucal.rows``' dask and streamed rows) and the
    encoder's fit, where the fit looks them up (this process only)."""
    from gpucal.distributed import encoding
    from gpucal.rows.dask import DaskRows
    from gpucal.rows.streamed import StreamedRows

    log = PassLog()
    # DaskRows.sum is a reduce; StreamedRows.sum_in_shares is a sum: each pass is logged once.
    DaskRows.reduce = log.wrap("sum", DaskRows.reduce, 1)  # type: ignore[method-assign]
    DaskRows.sum_in_shares = log.wrap("sum", DaskRows.sum_in_shares, 1)  # type: ignore[method-assign]
    DaskRows.map = log.wrap("map", DaskRows.map, 1)  # type: ignore[method-assign]
    DaskRows.per_worker = log.wrap("per worker", DaskRows.per_worker, 1)  # type: ignore[method-assign]
    StreamedRows.sum = log.wrap("sum", StreamedRows.sum, 1)  # type: ignore[method-assign]
    StreamedRows.reduce = log.wrap("sum", StreamedRows.reduce, 1)  # type: ignore[method-assign]
    encoding.fit_encoder = log.wrap("encoder", encoding.fit_encoder, 99)
    return log


def summarise_passes(entries: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Count and client wait per kind of pass (maps return at once: their work shows in the next sum)."""
    out: dict[str, dict[str, float]] = {}
    for e in entries:
        key = f"{e['kind']}:{e['fn']}"
        row = out.setdefault(key, {"count": 0, "s": 0.0})
        row["count"] += 1
        row["s"] += e["s"]
    return out


# --------------------------------------------------------------------------------------------------
# Fits


def single_machine_fit(files: list[Path], features: list[str], trees_path: Path) -> dict[str, Any]:
    """The one-machine fit on ``files`` in a fresh process (see ``CELL``)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CELL,
            json.dumps([str(f) for f in files]),
            json.dumps(features),
            str(trees_path),
            str(Path(__file__).resolve().parent),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        msg = f"one-machine cell failed: {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)
    return json.loads(done.stdout.strip().splitlines()[-1])


def new_model(features: list[str]) -> Any:
    return _mbct_data.mbct_class()(feature_cols=features, categorical_cols=features)


def warm_up(files: list[Path], features: list[str]) -> None:
    """An untimed fit on ``WARM_UP_ROWS`` rows in two partitions: every worker compiles its kernels."""
    import dask.dataframe as dd

    frame = pd.read_parquet(files[0], columns=["score", "label", *features]).iloc[:WARM_UP_ROWS]
    ddf = dd.from_pandas(frame, npartitions=2)
    new_model(features).fit(ddf[["score", *features]], ddf.label)


def distributed_fit(
    files: list[Path], features: list[str], log: PassLog, limit_s: float, *, stream: bool = False
) -> tuple[Any, dict[str, Any]]:
    """``MBCT.fit`` on one partition per Parquet file, read on the workers, timed and logged.

    ``dd.from_map(pd.read_parquet, files)``, not ``dd.read_parquet(files)``: dask's query planner fuses
    the files of a column projection by the share of the columns it reads, so ``ddf[columns]`` and
    ``ddf.label`` of one ``read_parquet`` frame get different numbers of partitions (9 of 10 columns
    against 1 of 10), and the fit refuses inputs that are not partitioned alike.
    """
    import dask.dataframe as dd

    ddf = dd.from_map(pd.read_parquet, [str(f) for f in files])
    model = new_model(features)
    # MBCT keeps the trees finished before a KeyboardInterrupt: the limit ends a fit that runs away.
    # A shell starting a job in the background ignores SIGINT, and interrupt_main then does nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    limit = threading.Timer(limit_s, _thread.interrupt_main)
    import dask

    with log.recording() as entries, dask.config.set({"gpucal.stream-partitions": stream}):
        t0 = time.perf_counter()
        limit.start()
        try:
            model.fit(ddf[["score", *features]], ddf.label)
        finally:
            limit.cancel()
        fit_s = time.perf_counter() - t0
    return model, {
        "fit_s": fit_s,
        "partitions": int(ddf.npartitions),
        "passes": entries,
        "pass_summary": summarise_passes(entries),
        "history": model.history_,
        "interrupted": bool(model.interrupted_),
    }


def _noop_sums(part: Any) -> np.ndarray:
    return np.zeros(N_STATS)


def _tiny_part(i: int) -> np.ndarray:
    return np.full(4, i)


def pass_latency(n_partitions: int, repeats: int = 15) -> dict[str, float]:
    """Seconds of a pass that does nothing: ``DaskRows.sum`` of a 7-vector over tiny persisted parts."""
    import dask

    from gpucal.rows._placement import persist
    from gpucal.rows.dask import DaskRows

    rows = DaskRows(persist([dask.delayed(_tiny_part, pure=False)(i) for i in range(n_partitions)]))
    rows.sum(_noop_sums)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows.sum(_noop_sums)
        times.append(time.perf_counter() - t0)
    return {"partitions": n_partitions, "median_s": float(np.median(times)), "min_s": float(np.min(times))}


def compare_trees(model: Any, single_path: Path, rows: pd.DataFrame) -> dict[str, Any]:
    """The distributed trees against one machine's: structure, node values, and predictions on ``rows``.

    A node may split on ``hour`` in one fit and on ``device_hour`` in the other: inside a node of one
    device the two features cut the rows alike, their gains tie exactly, and the order of the additions
    decides. Such trees differ in ``node_feature`` and ``child_table`` but predict the same.
    """
    from gpucal.loading import load

    single = load(single_path)
    a, b = single.ensemble_, model.ensemble_
    out: dict[str, Any] = {
        name: bool(np.array_equal(getattr(a, name), getattr(b, name)))
        for name in ("tree_start", "node_feature", "child_table", "node_depth")
    }
    out["identical_structure"] = out["node_feature"] and out["child_table"] and out["tree_start"]
    if out["tree_start"]:
        differ = np.flatnonzero(a.node_feature != b.node_feature)
        names = list(a.feature_names)
        pairs = sorted({(names[a.node_feature[i]], names[b.node_feature[i]]) for i in differ})
        out["nodes_differing_feature"] = int(differ.size)
        out["feature_pairs"] = [list(p) for p in pairs]
        out["max_abs_value_diff"] = float(np.max(np.abs(a.node_value - b.node_value)))
        out["max_rel_weight_diff"] = float(
            np.max(np.abs(a.node_weight - b.node_weight) / np.maximum(a.node_weight, 1e-300))
        )
    out["init_diff"] = float(np.max(np.abs(single.init_ - model.init_)))
    p_single = np.asarray(single.predict(rows), dtype=np.float64)
    p_dist = np.asarray(model.predict(rows), dtype=np.float64)
    out["predict_rows"] = len(rows)
    out["max_abs_predict_diff"] = float(np.max(np.abs(p_single - p_dist)))
    return out


# --------------------------------------------------------------------------------------------------
# Projection


def model_layout(model: Any, n_features: int) -> dict[str, Any]:
    """Trees, depth and nodes of the fit, and the bytes a row costs a pass over the tree rows."""
    e = model.ensemble_
    from gpucal.trees.ensemble import tree_code_dtype

    code_bytes = int(np.dtype(tree_code_dtype(e.n_values)).itemsize)
    n_code_cols = len(e.n_values)
    return {
        "trees_kept": len(e.tree_start) - 1,
        "trees_tried": len(model.history_),
        "nodes_per_tree": [int(h["nodes"]) for h in model.history_],
        "max_depth": int(np.max(e.node_depth)) if len(e.node_depth) else 0,
        "code_columns": n_code_cols,
        "features": n_features,
        "total_codes": int(np.sum(e.n_values)),
        "code_bytes": code_bytes,
    }


def projection(
    run: dict[str, Any], layout: dict[str, Any], n_rows: int, validation_fraction: float, latency_s: float
) -> dict[str, Any]:
    """Time of the same passes on 8 GPUs: memory traffic over HBM, histogram all-reduce, fixed latency.

    Per histogram pass and GPU, each training row reads its codes, ``f``, ``y``, ``w`` (float64) and its
    node (int32) and routing writes the node (int32); the histogram (nodes x codes x 7 x 8 B) is
    all-reduced over a ring: ``2 (p - 1) / p`` of it in and out of each GPU. The other passes read
    ``f``, ``y``, ``w``, node (and the codes where they predict through a tree) and reduce a few numbers.
    """
    train_rows = n_rows * (1.0 - validation_fraction) / N_GPUS
    valid_rows = n_rows * validation_fraction / N_GPUS
    codes_b = layout["code_columns"] * layout["code_bytes"]
    hist_row_bytes = codes_b + 3 * 8 + 4 + 4  # codes, f y w, node read, node written (routing)
    ring = 2 * (N_GPUS - 1) / N_GPUS
    rows: list[dict[str, Any]] = []

    def add(what: str, count: int, rows_per_gpu: float, row_bytes: float, reduce_bytes: float) -> None:
        mem_s = rows_per_gpu * row_bytes / HBM_BYTES_PER_S
        rows.append(
            {
                "what": what,
                "count": count,
                "bytes_per_gpu": rows_per_gpu * row_bytes,
                "mem_s": mem_s,
                "mem_s_achieved": [mem_s / s for s in ACHIEVED_SHARE],
                "reduce_bytes": reduce_bytes,
                "nvlink_s": ring * reduce_bytes / NVLINK_BYTES_PER_S,
                "pcie_s": ring * reduce_bytes / PCIE_BYTES_PER_S,
            }
        )

    for e in run["passes"]:
        if e["fn"] == "_histogram":
            add(f"histogram, {e['nodes']} open nodes", 1, train_rows, hist_row_bytes, e["hist_bytes"])
    counts = run["pass_summary"]
    small = 8 * 64  # a few float64 sums per pass
    n = lambda key: int(counts.get(key, {}).get("count", 0))  # noqa: E731
    add("root sums", n("sum:_root_stats"), train_rows, 3 * 8, small)
    add("leaf refit (Newton sums)", n("sum:_map_sums"), train_rows, 3 * 8 + 4, small)
    add("global loss (validation rows)", n("sum:_loss_sums"), valid_rows, 3 * 8, small)
    through_rows = train_rows + valid_rows
    add("predict through a tree (maps)", n("map:_through"), through_rows, codes_b + 8 + 8, 0)
    before = sum(
        v["count"]
        for k, v in counts.items()
        if k.split(":")[1] not in ("_histogram", "_root_stats", "_map_sums", "_loss_sums", "_through")
        and not k.startswith(("map:", "read:"))
    )
    add(
        "passes before the trees (encoder, split, moments, Platt)", before, train_rows + valid_rows, 48, small
    )
    n_passes = sum(r["count"] for r in rows)
    n_waits = n_passes - sum(r["count"] for r in rows if r["reduce_bytes"] == 0)
    total_mem = sum(r["count"] * r["mem_s"] for r in rows)
    total_nvlink = sum(r["count"] * r["nvlink_s"] for r in rows)
    total_pcie = sum(r["count"] * r["pcie_s"] for r in rows)
    return {
        "rows_per_gpu_train": train_rows,
        "hist_row_bytes": hist_row_bytes,
        "rows": rows,
        "passes": n_passes,
        "mem_s": total_mem,
        "mem_s_achieved": [total_mem / s for s in ACHIEVED_SHARE],
        "nvlink_s": total_nvlink,
        "pcie_s": total_pcie,
        "waits": n_waits,
        "fixed_dask_s": n_waits * latency_s,
        "fixed_fused_s": n_passes * 3 * KERNEL_LAUNCH_S,
        "latency_s": latency_s,
        "pass_counts": {k: int(v["count"]) for k, v in counts.items()},
    }


# --------------------------------------------------------------------------------------------------
# Report


def render(report: dict[str, Any]) -> str:
    data, single, over, scale = report["data"], report["single"], report["overhead"], report["scale"]
    quick = report["quick"]
    n_scale = data["files"] * data["rows_per_file"]
    n_over = report["overhead_rows"]
    ratio = over["fit_s"] / single["fit_s"]
    peak_gb = scale["peak_rss_all_mb"] / 1024
    lines = [
        "# MBCT on a LocalCluster: 4e7 rows from Parquet"
        if not quick
        else "# MBCT on a LocalCluster (quick)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_distributed_scale.py`"
        f"{' --quick (smoke sizes: not for citing)' if quick else ''} on {platform.machine()}, "
        f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, load average "
        f"{os.getloadavg()[0]:.1f} at the end; Python {platform.python_version()}, dask "
        f"{report['versions']['dask']}; {report['seconds'] / 60:.1f} min in all. CPU only.",
        "",
        f"- Data: `_mbct_data.ctr_speed_frame(rows, row_offset=i * rows)` (`make_ctr(.., 'mixed', seed=0)`, "
        "the 8 categorical features of the speed benchmark: site_id 40,000 values, ad_category 300, region "
        "50, hour 24, user_segment 8, device 4, device_hour 96, region_segment 400), "
        f"{data['files']} Parquet files of {data['rows_per_file']:,} rows, {data['bytes'] / 2**20:.0f} MiB; "
        "generated in "
        f"{data['seconds']:.0f} s ({data['written']} files written this run, two processes; not part of "
        "the fit).",
        "- Fit: `MBCT(feature_cols=features, categorical_cols=features)` (defaults otherwise, as the speed "
        "benchmark) on `dd.from_map(pd.read_parquet, files)` (one partition per file, read on the workers; "
        "`dd.read_parquet` gives `X` and `y` different partitions, see `distributed_fit`), "
        "`gpucal.distributed.local_cluster(n_workers=2, threads_per_worker=1, processes=True)`; an untimed "
        f"warm-up fit on {WARM_UP_ROWS:,} rows first. Wall time of `fit` in the client.",
        "- Memory: summed RSS of this process (client, scheduler and nannies) and all its descendants "
        "(the worker processes, multiprocessing's resource tracker) sampled every "
        f"{SAMPLE_EVERY_S} s, maximum over the fit; VmHWM per process below.",
        f"- Overhead: the first {n_over:,} rows fitted on one machine (the rows read into one pandas frame, "
        "a fresh process, JIT warm-up untimed, as `bench_mbct_speed.py`) and on the same cluster.",
        "",
        "| fit | rows | partitions | fit s | peak RSS, all processes | trees kept / tried | nodes |",
        "|---|---|---|---|---|---|---|",
        f"| one machine (pandas) | {n_over:,} | 1 | {single['fit_s']:.1f} | "
        f"{single['vmhwm_mb']:.0f} MiB (VmHWM) | {_trees(single['history'])} | "
        f"{_nodes(single['history'])} |",
        f"| LocalCluster, 2 workers | {n_over:,} | {over['partitions']} | {over['fit_s']:.1f}"
        f"{' (stopped at the limit)' if over['interrupted'] else ''} | "
        f"{over['peak_rss_all_mb']:.0f} MiB | {_trees(over['history'])} | {_nodes(over['history'])} |",
        f"| LocalCluster, 2 workers | {n_scale:,} | {scale['partitions']} | {scale['fit_s']:.1f}"
        f"{' (stopped at the limit)' if scale['interrupted'] else ''} | "
        f"{scale['peak_rss_all_mb']:.0f} MiB | {_trees(scale['history'])} | {_nodes(scale['history'])} |",
        "",
        "## Targets (issue 6)",
        "",
        "| target | value | met |",
        "|---|---|---|",
        f"| {n_scale:.0e}-row fit under {FIT_TARGET_S / 60:.0f} min | "
        f"{'> ' if scale['interrupted'] else ''}{scale['fit_s']:.0f} s | "
        f"{_yes(scale['fit_s'] < FIT_TARGET_S)} |",
        f"| peak memory of all processes under {MEMORY_TARGET_GB:.0f} GB | {peak_gb:.2f} GiB | "
        f"{_yes(scale['peak_rss_all_mb'] * 2**20 < MEMORY_TARGET_GB * 1e9)} |",
        f"| distributed / one machine at {n_over:.0e} rows at most {OVERHEAD_TARGET}x | "
        f"{'> ' if over['interrupted'] else ''}{ratio:.2f}x "
        f"({over['fit_s']:.1f} s / {single['fit_s']:.1f} s) | {_yes(ratio <= OVERHEAD_TARGET)} |",
        "",
        f"Trees of the distributed fit against one machine's ({n_over:,} rows): " + _tree_line(over["trees"]),
        "",
        *render_stream(report),
        f"VmHWM per process at the end of the {n_scale:.0e}-row fit (the workers were restarted before "
        "its warm-up): "
        + ", ".join(f"{p['role']} {p['vmhwm_mb']:.0f} MiB" for p in scale["processes"])
        + ".",
        "",
        f"## Where the time goes ({n_scale:.0e} rows)",
        "",
        "Each row is one kind of pass over the partitions, as the fit calls it. Maps (`persist`) return at "
        "once and run on the workers in the background, so their work is part of the wait of the next sum "
        "pass. The files are read twice: by `encoder` (the encoder's categories) and by the encoding pass "
        "(`map:read_block`, whose work shows in the wait of `sum:input_summary`, with the validation split "
        "and the concatenation of each worker's partitions). `sum:_histogram` is one batch of open nodes, "
        "cut into one share per worker: each worker histograms its rows of every share, sends the other "
        "workers their shares as the (node, code) pairs with rows, adds what it receives to its own share "
        "and decides those splits (only the splits come back).",
        "",
        "| pass | count | client wait s | per pass s |",
        "|---|---|---|---|",
    ]
    for key, row in sorted(scale["pass_summary"].items(), key=lambda kv: -kv[1]["s"]):
        lines.append(f"| {key} | {row['count']} | {row['s']:.1f} | {row['s'] / row['count']:.3f} |")
    waited = sum(r["s"] for r in scale["pass_summary"].values())
    n_waits = sum(1 for e in scale["passes"] if e["kind"] != "map")
    lat = report["latency"]
    per_file = report.get("latency_per_file", lat)
    lines += [
        "",
        f"Waiting on passes: {waited:.1f} s of the {scale['fit_s']:.1f} s fit; the rest is the client "
        f"(tree bookkeeping; the split decisions run on the workers, inside `sum:_histogram`). A pass "
        f"that does nothing (a 7-vector summed over {lat['partitions']} tiny persisted partitions, one per "
        f"worker as the passes after the read) takes {lat['median_s'] * 1e3:.0f} ms (median of 15; "
        f"{per_file['median_s'] * 1e3:.0f} ms over {per_file['partitions']} partitions, one per file): "
        f"the fixed cost of a pass on this cluster, {n_waits} passes the client waits on x "
        f"{lat['median_s']:.3f} s = {n_waits * lat['median_s']:.1f} s of the fit.",
        "",
    ]
    lines += render_projection(report["projection"], report["layout"], n_scale)
    return "\n".join(lines) + "\n"


def render_stream(report: dict[str, Any]) -> list[str]:
    """The streamed fit against the held fit of the same files, or nothing when it was skipped."""
    streamed = report.get("stream")
    if not streamed:
        return []
    everything = streamed.get("which") == "all"
    held = report["scale" if everything else "overhead"]
    n_rows = (
        report["data"]["files"] * report["data"]["rows_per_file"] if everything else report["overhead_rows"]
    )
    same = (
        f"trees identical in structure, node values within {streamed['max_abs_value_diff']:.1e}"
        if streamed["same_structure"]
        else "**trees differ in structure**"
    )
    held_passes = sum(1 for e in held["passes"] if e["kind"] != "map")
    lines = [
        f"## Streamed: the rows read again by every pass ({n_rows:,} rows)",
        "",
        f"The {'scale' if everything else 'overhead'} fit's files fitted again on restarted workers under "
        "`dask.config.set({'gpucal.stream-partitions': True})`: nothing is held between passes, every "
        "pass reads the Parquet files again, encodes them, passes them through the trees so far and "
        "replays the routing of the tree being grown (`gpucal.rows.streamed`, the same `fit_mbct` as the "
        f"held fit); against the held fit above: {same}. Memory added is "
        "the peak minus the processes' RSS before the fit.",
        "",
        "| fit | fit s | passes | peak RSS, all processes | memory added by the fit |",
        "|---|---|---|---|---|",
    ]
    for name, r, n in (
        (f"rows held (the {'scale' if everything else 'overhead'} fit)", held, held_passes),
        ("streamed", streamed, streamed["n_passes"]),
    ):
        lines.append(
            f"| {name} | {r['fit_s']:.1f} | {n} | {r['peak_rss_all_mb']:.0f} MiB | "
            f"{r['peak_rss_all_mb'] - r['rss_before_mb']:.0f} MiB |"
        )
    return [*lines, ""]


def render_projection(p: dict[str, Any], layout: dict[str, Any], n_rows: int) -> list[str]:
    lo, hi = ACHIEVED_SHARE
    lines = [
        f"## Projection, not a measurement: the same fit on {N_GPUS} GPUs",
        "",
        f"Nothing here ran on a GPU. The same {n_rows:.0e} rows split over {N_GPUS} H100 GPUs (one dask-cuda "
        f"worker each, {p['rows_per_gpu_train']:,.0f} training rows per GPU), the same passes as the "
        "scale fit above (counted from its pass log: one per histogram batch, root sums, refit Newton "
        "steps, global losses, predictions through each tree, and the passes before the trees). Model:",
        "",
        f"- memory: bytes a GPU reads and writes per pass over its rows / {HBM_BYTES_PER_S / 1e12:.2f} TB/s "
        f"(H100 SXM5 HBM3 peak; achieved bandwidth is typically {lo:.0%}-{hi:.0%} of it, so the memory "
        f"time is 1/{hi} to 1/{lo} of the peak figure). A histogram pass costs a training row "
        f"{p['hist_row_bytes']} B: {layout['code_columns']} code columns ({layout['features']} features and "
        f"the score bin) x {layout['code_bytes']} B, f, y, w as float64 (this fit has unit weights; w is "
        "counted as in a weighted fit), the node read (int32) and written by routing (int32);",
        f"- all-reduce of each pass's result: a ring moves 2(p-1)/p = {2 * (N_GPUS - 1) / N_GPUS:.2f} of it "
        f"in and out of each GPU, over NVLink 4 ({NVLINK_BYTES_PER_S / 1e9:.0f} GB/s per direction) or "
        f"PCIe 5 x16 ({PCIE_BYTES_PER_S / 1e9:.0f} GB/s). The histogram is open nodes x "
        f"{layout['total_codes']:,} tree codes x {N_STATS} statistics x 8 B (the measured size of each "
        "pass's result);",
        f"- a fixed cost per pass: either this run's measured dask pass overhead ({p['latency_s'] * 1e3:.0f} "
        f"ms: the scheduler round trip, as with dask-cuda workers), or about {3 * KERNEL_LAUNCH_S * 1e6:.0f} "
        "us for a loop kept on the GPUs (three kernel launches and a synchronisation, NCCL in place of "
        "dask).",
        "",
        "| pass | count | bytes per GPU | HBM s (peak) | reduced bytes | NVLink s | PCIe s |",
        "|---|---|---|---|---|---|---|",
    ]
    merged: dict[str, dict[str, Any]] = {}
    for r in p["rows"]:
        key = "histogram" if r["what"].startswith("histogram") else r["what"]
        m = merged.setdefault(key, {"count": 0, "bytes": 0.0, "mem": 0.0, "red": 0.0, "nv": 0.0, "pc": 0.0})
        m["count"] += r["count"]
        m["bytes"] += r["count"] * r["bytes_per_gpu"]
        m["mem"] += r["count"] * r["mem_s"]
        m["red"] += r["count"] * r["reduce_bytes"]
        m["nv"] += r["count"] * r["nvlink_s"]
        m["pc"] += r["count"] * r["pcie_s"]
    for key, m in merged.items():
        lines.append(
            f"| {key} | {m['count']} | {m['bytes'] / 1e9:.2f} GB | {m['mem'] * 1e3:.1f} ms | "
            f"{m['red'] / 1e9:.2f} GB | {m['nv'] * 1e3:.1f} ms | {m['pc'] * 1e3:.1f} ms |"
        )
    hist = [r for r in p["rows"] if r["what"].startswith("histogram")]
    if hist:
        h = max(hist, key=lambda r: r["reduce_bytes"])
        lines += [
            "",
            f"The arithmetic of one histogram pass, the largest ({h['what']}): "
            f"{p['rows_per_gpu_train']:,.0f} rows x {p['hist_row_bytes']} B = "
            f"{h['bytes_per_gpu'] / 1e6:.0f} MB per GPU / {HBM_BYTES_PER_S / 1e12:.2f} TB/s = "
            f"{h['mem_s'] * 1e6:.0f} us ({h['mem_s_achieved'][1] * 1e6:.0f}-"
            f"{h['mem_s_achieved'][0] * 1e6:.0f} us at {lo:.0%}-{hi:.0%}); "
            f"histogram {h['reduce_bytes'] / 1e6:.0f} MB x {2 * (N_GPUS - 1) / N_GPUS:.2f} = "
            f"{h['reduce_bytes'] * 2 * (N_GPUS - 1) / N_GPUS / 1e6:.0f} MB per GPU / "
            f"{NVLINK_BYTES_PER_S / 1e9:.0f} GB/s = {h['nvlink_s'] * 1e3:.2f} ms over NVLink "
            f"({h['pcie_s'] * 1e3:.1f} ms over PCIe).",
        ]
    mem_lo, mem_hi = p["mem_s_achieved"][1], p["mem_s_achieved"][0]
    counts = p["pass_counts"]
    lines += [
        "",
        f"Sum over the {p['passes']} passes ({_pass_formula(counts)}):",
        "",
        "| term | NVLink | PCIe 5 |",
        "|---|---|---|",
        f"| memory traffic at {lo:.0%}-{hi:.0%} of peak | {_span(mem_lo, mem_hi, 0, 4)} | "
        f"{_span(mem_lo, mem_hi, 0, 4)} |",
        f"| all-reduce of the results | {p['nvlink_s']:.4f} s | {p['pcie_s']:.4f} s |",
        f"| fixed cost, dask ({p['waits']} passes waited on x {p['latency_s'] * 1e3:.0f} ms) | "
        f"{p['fixed_dask_s']:.1f} s | {p['fixed_dask_s']:.1f} s |",
        f"| **total with dask** | **{_span(mem_lo, mem_hi, p['nvlink_s'] + p['fixed_dask_s'], 1)}** | "
        f"**{_span(mem_lo, mem_hi, p['pcie_s'] + p['fixed_dask_s'], 1)}** |",
        f"| total with the loop on the GPUs ({p['passes']} x {3 * KERNEL_LAUNCH_S * 1e6:.0f} us) | "
        f"{_span(mem_lo, mem_hi, p['nvlink_s'] + p['fixed_fused_s'], 3)} | "
        f"{_span(mem_lo, mem_hi, p['pcie_s'] + p['fixed_fused_s'], 3)} |",
        "",
        "Left out, each making the projection optimistic: the histogram kernel's atomics (contention on "
        "hot codes, e.g. device with 4 values, keeps it below streaming bandwidth), the client's split "
        "decisions between passes (measured above on the CPU; on a GPU host they are the same Python), the "
        "time to read the Parquet files (GPUDirect Storage or host reads) and the first encoding pass.",
    ]
    return lines


def _pass_formula(counts: dict[str, int]) -> str:
    """The passes of the fit as the code makes them (``gpucal.mbct.fit.fit_mbct``)."""
    from gpucal.mbct.fit import N_REFIT_STEPS

    trees = counts.get("sum:_root_stats", 0)
    before = (
        counts.get("encoder:encoder", 0)
        + counts.get("sum:input_summary", 0)
        + counts.get("sum:label_square_sum", 0)
    )
    return (
        f"{before} before the trees: encoder; read, split and summary (row counts, classes, first label "
        "moment and code weights in one pass); the second label moment; "
        f"{counts.get('sum:_weighted_scores', 0)} for the initial Platt map (summary and Newton steps); then "
        f"{trees} trees tried, each 1 root sums + its histogram batches ({counts.get('sum:_histogram', 0)} "
        f"in all, one per batch of open nodes per level) + {N_REFIT_STEPS} leaf refit Newton "
        f"steps (N_REFIT_STEPS) + 1 global loss, and 1 global loss before the first tree; the predictions "
        f"through each tree and the routing are maps, their reads added to the next pass"
    )


def _span(low: float, high: float, plus: float, digits: int) -> str:
    """``low + plus`` to ``high + plus`` seconds."""
    return f"{low + plus:.{digits}f}-{high + plus:.{digits}f} s"


def _trees(history: list[dict[str, Any]]) -> str:
    return f"{sum(h['kept'] for h in history)} / {len(history)}"


def _nodes(history: list[dict[str, Any]]) -> str:
    return ", ".join(str(h["nodes"]) for h in history)


def _tree_line(t: dict[str, Any]) -> str:
    predict = (
        f"predictions on the {t['predict_rows']:,} rows of the first file within "
        f"{t['max_abs_predict_diff']:.1e}; initial Platt map within {t['init_diff']:.1e}."
    )
    if not t["tree_start"]:
        return f"**different trees** (node counts differ); {predict}"
    if t["identical_structure"]:
        same = "node_feature, child_table and tree_start identical"
    else:
        pairs = ", ".join(f"{x} / {y}" for x, y in t["feature_pairs"])
        same = (
            f"the same nodes (tree_start, node_depth {'equal' if t['node_depth'] else '**differ**'}), "
            f"{t['nodes_differing_feature']} node(s) splitting on another feature of an exact tie "
            f"(one machine / distributed: {pairs})"
        )
    return (
        f"{same}; node values within {t['max_abs_value_diff']:.1e} (absolute), node weights within "
        f"{t['max_rel_weight_diff']:.1e} (relative); {predict}"
    )


def _role(command: str) -> str:
    """What a process of the tree is, from its command line."""
    if "resource_tracker" in command:
        return "resource tracker"
    if "spawn_main" in command or "forkserver" in command:
        return "worker"
    return "client+scheduler+nannies" if "bench_distributed_scale" in command else command[-40:]


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def streamed_fit(
    files: list[Path], features: list[str], log: PassLog, sampler: MemorySampler, held: Any
) -> dict[str, Any]:
    """The files fitted streamed (``gpucal.stream-partitions``) on restarted workers: time, peak
    memory, passes, and the trees against ``held`` (the same files fitted with the rows held)."""
    from distributed import default_client

    default_client().restart()
    warm_up(files, features)
    out: dict[str, Any] = {}
    with sampler.phase(out):
        model, result = distributed_fit(files, features, log, 3600.0, stream=True)
        out.update(result)
    out["n_passes"] = sum(1 for e in out.pop("passes") if e["kind"] != "map")
    a, b = held.ensemble_, model.ensemble_
    out["same_structure"] = all(
        np.array_equal(getattr(a, name), getattr(b, name))
        for name in ("node_feature", "child_table", "tree_start")
    )
    out["max_abs_value_diff"] = (
        float(np.max(np.abs(a.node_value - b.node_value))) if out["same_structure"] else None
    )
    return out


# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--overhead-files", type=int, default=10, help="files fitted on one machine too")
    parser.add_argument(
        "--fit-limit",
        type=float,
        default=600.0,
        help="seconds before the scale fit is stopped (half: overhead)",
    )
    parser.add_argument(
        "--stream",
        choices=("overhead", "all", "none"),
        default="overhead",
        help="files fitted again streamed: the overhead files, all files, or none",
    )
    parser.add_argument("--quick", action="store_true", help="4 files of 2e5 rows: a smoke run")
    parser.add_argument("--out", default=None, help="report path (.md; the .json goes beside it)")
    args = parser.parse_args()
    if args.quick:
        args.files, args.rows_per_file, args.overhead_files = 4, 200_000, 2
    import dask
    from distributed import Client

    from gpucal.distributed import local_cluster

    features, _, _ = _mbct_data.speed_features("ctr")
    started = time.time()
    report: dict[str, Any] = {"quick": args.quick, "versions": {"dask": dask.__version__}}
    files, report["data"] = generate(args.files, args.rows_per_file)
    print("data", report["data"], flush=True)
    over_files = files[: args.overhead_files]
    report["overhead_rows"] = len(over_files) * args.rows_per_file
    sampler = MemorySampler()
    trees_path = data_dir() / f"single-model-{os.getpid()}.json"
    single: dict[str, Any] = {}
    with sampler.phase(single):
        single.update(single_machine_fit(over_files, features, trees_path))
    report["single"] = single
    print("single", {k: v for k, v in single.items() if k != "processes"}, flush=True)

    log = instrument()
    with (
        local_cluster(n_workers=N_WORKERS, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        warm_up(files, features)
        # After the read, every pass runs over one store per worker: its fixed cost is that of 2 parts.
        report["latency"] = pass_latency(N_WORKERS)
        report["latency_per_file"] = pass_latency(len(files))
        print("latency", report["latency"], report["latency_per_file"], flush=True)
        over: dict[str, Any] = {}
        with sampler.phase(over):
            model, result = distributed_fit(over_files, features, log, args.fit_limit / 2)
            over.update(result)
        rows = pd.read_parquet(files[0], columns=["score", *features])
        over["trees"] = compare_trees(model, trees_path, rows)
        over_model = model
        del rows
        report["overhead"] = over
        print("overhead", over["fit_s"], over["trees"], flush=True)
        client.restart()
        warm_up(files, features)
        scale: dict[str, Any] = {}
        with sampler.phase(scale):
            model, result = distributed_fit(files, features, log, args.fit_limit)
            scale.update(result)
        report["scale"] = scale
        print("scale", scale["fit_s"], scale["peak_rss_all_mb"], scale["pass_summary"], flush=True)
        if args.stream != "none":
            stream_files, held_model = (files, model) if args.stream == "all" else (over_files, over_model)
            report["stream"] = streamed_fit(stream_files, features, log, sampler, held_model)
            report["stream"]["which"] = args.stream
            print("stream", report["stream"]["fit_s"], report["stream"]["same_structure"], flush=True)
    sampler.close()
    trees_path.unlink(missing_ok=True)
    layout = model_layout(model, len(features))
    report["layout"] = layout
    report["projection"] = projection(
        scale,
        layout,
        len(files) * args.rows_per_file,
        model.validation_fraction,
        report["latency"]["median_s"],
    )
    report["seconds"] = time.time() - started
    out = Path(args.out or f"benchmarks/results/distributed_scale{'_quick' if args.quick else ''}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=float))
    out.write_text(render(report))
    print(f"written {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()

"""Variants of the group-sum histogram kernel, timed side by side on a GPU.

``gpucal.kernels.group_sums_cuda`` fills a block-private float64 histogram in shared memory. With one
thread per row adding seven statistics for each of the row's features it ran 1,330x its memory floor
at 1e7 rows x 8 fields on an H200 (``results/gpu.md``). This probe times the layouts that could remove
the cause, on the same rows, each checked against the first:

- ``row``: one thread per row, float64 atomics (the kernel before);
- ``library``: the kernel as it is, one thread per (row, field) pair, so that the 32 lanes of a warp add
  into the fields of 4 rows instead of one field of 32 rows (fewer lanes on the same slot of a
  low-cardinality field: on sm_90 a 64-bit shared atomic is a compare-and-swap loop);
- ``fixed``: ``row`` with the statistics added as int64 fixed point;
- ``pair_fixed``: ``library`` in int64 fixed point;
- ``float32``: ``row`` with a float32 shared histogram (precision shown, not a candidate);
- ``group_sums``: the public call, its input checks included;
- ``check_before`` / ``check_after``: the check's per-feature code range by the array library's
  ``min(axis=0)`` / ``max(axis=0)``, and by ``launch_code_range``.

``--fits-only`` times MBCT's, HC's and feature-aware Platt's fits on device rows instead, on this tree
or on the checkout ``GPUCAL_SOURCE`` names.

Run on a GPU machine: ``python benchmarks/bench_group_sums_gpu.py [--sizes 1e6 1e7 1e8] [--nodes 2 64]
[--fits-only --fit-sizes 1e6 1e7] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# The tree to time: this repository, or the one ``GPUCAL_SOURCE`` names (a checkout of another commit).
sys.path.insert(0, os.environ.get("GPUCAL_SOURCE") or str(Path(__file__).resolve().parent.parent))

from numba import cuda

from gpucal.kernels import group_sums
from gpucal.kernels._dispatch import to_host
from gpucal.kernels._rowmath import group_row_stats
from gpucal.kernels.group_sums_cuda import launch_group_sums, shared_slots_for
from gpucal.kernels.group_sums_oracle import N_STATS, value_offsets

CARDINALITIES = (2, 3, 5, 10, 20, 50, 100, 100)
THREADS = 256
MAX_BLOCKS = 1024
REPEATS = 5


@functools.cache
def make_kernel(layout: str, slots: int) -> Any:
    """Return the kernel of one ``layout`` with a shared histogram of ``slots`` entries."""
    pair = layout == "pair_fixed"
    fixed = layout in ("fixed", "pair_fixed")
    single = layout == "float32"
    dtype = np.int64 if fixed else (np.float32 if single else np.float64)
    use_shared = slots > 0
    shared_size = max(slots, 1)

    @cuda.jit
    def kernel(codes, f, y, w, node_idx, offsets, n_bins, scale, out):
        if use_shared:
            hist = cuda.shared.array(shared_size, dtype=dtype)
        else:
            hist = out
        tid = cuda.threadIdx.x
        hist_size = out.shape[0]
        if use_shared:
            for s in range(tid, hist_size, cuda.blockDim.x):
                hist[s] = 0
            cuda.syncthreads()
        n = codes.shape[0]
        d = codes.shape[1]
        has_nodes = node_idx.shape[0] > 0
        has_w = w.shape[0] > 0
        total = n * d if pair else n
        for t in range(cuda.grid(1), total, cuda.gridsize(1)):
            i = t // d if pair else t
            node = node_idx[i] if has_nodes else 0
            if node < 0:
                continue
            stats = group_row_stats(f[i], y[i], w[i] if has_w else 1.0)
            j_first = t - i * d if pair else 0
            j_stop = j_first + 1 if pair else d
            for j in range(j_first, j_stop):
                base = (node * n_bins + offsets[j] + codes[i, j]) * N_STATS
                for k in range(N_STATS):
                    if fixed:
                        cuda.atomic.add(hist, base + k, np.int64(math.floor(stats[k] * scale[k] + 0.5)))
                    elif single and use_shared:
                        cuda.atomic.add(hist, base + k, np.float32(stats[k]))
                    else:
                        cuda.atomic.add(hist, base + k, stats[k])
        if use_shared:
            cuda.syncthreads()
            for s in range(tid, hist_size, cuda.blockDim.x):
                value = hist[s]
                if value != 0:
                    cuda.atomic.add(out, s, value if fixed else np.float64(value))

    return kernel


def time_fits(cp: Any, sizes: list[float]) -> list[dict[str, Any]]:
    """Seconds of the tree fits (and feature-aware Platt's) on device rows, best of two, with a checksum."""
    from gpucal import MBCT, FeatureAwarePlattCalibrator, HeterogeneousCalibrator

    features = [f"f{j}" for j in range(len(CARDINALITIES))]
    records = []
    for size in sizes:
        rows = make_rows(cp, int(size), 1)
        data = {"score": rows["score"]} | {
            name: cp.ascontiguousarray(rows["codes"][:, j]) for j, name in enumerate(features)
        }
        for estimator in (MBCT, HeterogeneousCalibrator, FeatureAwarePlattCalibrator):
            best = math.inf
            for _ in range(2):
                start = time.perf_counter()
                model = estimator(feature_cols=features, categorical_cols=features).fit(data, rows["label"])
                cuda.synchronize()
                best = min(best, time.perf_counter() - start)
            head = {name: column[:100_000] for name, column in data.items()}
            record = {
                "fit": estimator.__name__,
                "rows": int(size),
                "tree": os.environ.get("GPUCAL_SOURCE") or "this",
                "seconds": best,
                "mean_prediction_first_1e5": float(cp.asarray(model.predict(head)).mean()),
            }
            records.append(record)
            print(json.dumps(record), flush=True)
    return records


def fixed_scales(cp: Any, f: Any, y: Any, w: Any, n_rows: int) -> np.ndarray:
    """Power-of-two scales: a slot's sum over every row stays under 2**62 for each statistic."""
    bounds = [1.0]
    af, ay, aw = cp.abs(f), cp.abs(y), cp.abs(w)
    for stat in (aw, aw * af, aw * ay, aw * af * af, aw * af * ay, aw * ay * ay):
        bounds.append(max(float(stat.max()), 1e-300))
    scales = [1.0] + [2.0 ** math.floor(62 - math.log2(n_rows * b)) for b in bounds[1:]]
    return np.array(scales)


def run_variant(cp: Any, name: str, rows: dict[str, Any], n_nodes: int) -> tuple[float, Any]:
    """Return the best of ``REPEATS`` seconds and the histogram of one variant."""
    n_values = np.array(CARDINALITIES)
    n_bins = int(n_values.sum())
    hist_size = n_nodes * n_bins * N_STATS
    offsets = cp.asarray(value_offsets(n_values))
    n_rows = rows["codes"].shape[0]
    slots = shared_slots_for(hist_size)
    fixed = name in ("fixed", "pair_fixed")
    scale = cp.asarray(fixed_scales(cp, rows["score"], rows["label"], rows["weight"], n_rows))
    args = (rows["codes"], rows["score"], rows["label"], rows["weight"], rows["node"], offsets)

    def call() -> Any:
        if name == "group_sums":
            return group_sums(*args[:4], node_idx=rows["node"], n_nodes=n_nodes, n_values=n_values)
        if name == "check_before":
            return to_host(rows["codes"].min(axis=0)), to_host(rows["codes"].max(axis=0))
        if name == "check_after":
            from gpucal.kernels.group_sums_cuda import launch_code_range  # not in trees before it

            return launch_code_range(rows["codes"])
        if name == "library":
            out = cp.zeros(hist_size)
            launch_group_sums(*args, n_bins, out)
            return out
        out = cp.zeros(hist_size, dtype=np.int64 if fixed else np.float64)
        work = n_rows * len(CARDINALITIES) if name == "pair_fixed" else n_rows
        blocks = min(MAX_BLOCKS, max(1, -(-work // THREADS)))
        make_kernel(name, slots)[blocks, THREADS](*args, np.int64(n_bins), scale, out)
        if fixed:
            return out.reshape(-1, N_STATS).astype(np.float64) / scale
        return out

    result = call()
    cuda.synchronize()
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = call()
        cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, (result.reshape(-1) if name not in ("check_before", "check_after") else None)


def make_rows(cp: Any, n_rows: int, n_nodes: int) -> dict[str, Any]:
    """Rows on the device: codes of the eight fields, an over-confident score, labels, weights, nodes."""
    rng = cp.random.default_rng(0)
    codes = cp.stack([rng.integers(0, k, n_rows, dtype=np.int8) for k in CARDINALITIES], axis=1)
    logit = rng.standard_normal(n_rows) - 2.0
    score = 1.0 / (1.0 + cp.exp(-1.4 * logit))
    # A segment bias on the first two fields (as in bench_gpu.py), so that the trees split.
    bias = cp.where(codes[:, 0] == 1, 0.5, -0.3) + 0.4 * (codes[:, 1] == 2)
    label = (rng.random(n_rows) < 1.0 / (1.0 + cp.exp(-logit - bias))).astype(np.float64)
    weight = rng.random(n_rows) + 0.5
    node = rng.integers(0, n_nodes, n_rows, dtype=np.int32)
    return {
        "codes": cp.ascontiguousarray(codes),
        "score": score,
        "label": label,
        "weight": weight,
        "node": node,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7, 1e8])
    parser.add_argument("--nodes", nargs="+", type=int, default=[2, 64])
    parser.add_argument("--fit-sizes", nargs="*", type=float, default=[1e6, 1e7])
    parser.add_argument("--fits-only", action="store_true", help="time the fits (on the GPUCAL_SOURCE tree)")
    parser.add_argument("--json")
    args = parser.parse_args()
    import cupy as cp

    records = []
    if args.fits_only:
        records += time_fits(cp, args.fit_sizes)
        args.nodes = []
    for n_nodes in args.nodes:
        for size in args.sizes:
            rows = make_rows(cp, int(size), n_nodes)
            cuda.synchronize()
            reference = None
            variants = (
                "row",
                "library",
                "fixed",
                "pair_fixed",
                "float32",
                "group_sums",
                "check_before",
                "check_after",
            )
            for name in variants:
                try:
                    seconds, hist = run_variant(cp, name, rows, n_nodes)
                except Exception as error:  # a variant that fails to compile is reported, not fatal
                    print(f"{name}: {type(error).__name__}: {error}", flush=True)
                    continue
                if reference is None:
                    reference = hist
                error = (
                    None if hist is None else float(cp.abs(hist - reference).max() / cp.abs(reference).max())
                )
                record = {
                    "nodes": n_nodes,
                    "rows": int(size),
                    "variant": name,
                    "seconds": seconds,
                    "rows_per_s": size / seconds,
                    "max_error_rel_to_max": error,
                }
                records.append(record)
                print(json.dumps(record), flush=True)
            del rows
    print(f"device: {cuda.get_current_device().name}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()

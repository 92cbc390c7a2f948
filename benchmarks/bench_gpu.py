"""Benchmark: every GPU path of gpucal on cupy data, beside the numba CPU path on the same rows.

One command measures, within one 10-minute run on a GPU machine, each case of :func:`all_cases`
(the kernels, every one-dimensional calibrator's fit and predict, the feature-aware calibrators, the
metrics, MBCT, HC, CCL, NeuCalib on CUDA torch, the automatic calibrator, and the peers PyTorch
temperature scaling and ``torchisotonic``) at 1e6 and 1e7 rows and at the largest size that fits:

- the CPU side calls the case on numpy arrays (gpucal's numba path), timed with ``time.perf_counter``;
- the GPU side calls the same code on cupy arrays (gpucal dispatches on the array type), timed with
  CUDA events after a warm-up call on the smallest size (so JIT compilation, module loads and torch's
  CUDA context stay out of the figure; the CPU side is warmed up the same way, since numba compiles a
  kernel's parallel twin only for inputs of ``PARALLEL_MIN_ROWS`` rows or more); host-to-device
  transfer of every input column is timed apart;
- peak device memory of the call: the growth of cupy's memory pool after ``free_all_blocks`` (blocks
  freed during the call stay cached, so the pool holds the call's high-water mark) plus torch's
  ``max_memory_allocated``; numba-cuda's own allocations (``cuda.to_device``, only taken for numpy
  inputs) are not counted;
- the physical floor: the bytes each call must read (every input column once) and write (its output),
  over the device-to-device copy bandwidth measured at the start of the run (the datasheet bandwidth,
  memory clock x bus width x 2, is reported beside it);
- a correctness check of every GPU result against the CPU result of the same run (relative l2 error
  ``||gpu - cpu|| / ||cpu||``; fits are compared through their predictions on a fixed probe of rows).

Each case gets a share of the time budget (``--budget-s``); a size whose projected time does not fit
the share is skipped and said so, and a failure is recorded rather than ending the run. Each case says
where its GPU side runs (``device``, ``partly``: some steps copy to the host, or ``host``: cupy input,
host implementation); the report lists the GPU paths the issue names that gpucal does not have.

``--dry-run`` runs the same cases on the CPU at 1e4 rows with numpy standing in for cupy and the host
clock for the events (no cupy needed, no GPU figure): it checks every case's calls, the comparison
and the report writer, and ``tests/test_bench_gpu.py`` runs it in CI.

Wheels to carry to the GPU machine (its image has Python 3.12, numpy 2.5, numba, numba-cuda,
cupy-cuda13x, PyTorch 2.11, pandas, pyarrow, scipy, scikit-learn and ninja; gpucal itself travels
as the working tree and is imported from it through ``PYTHONPATH``):

- ``numpy==2.4.6``: the image's numba-cuda failed to import beside its numpy 2.5 (2026-11-24 session);
- ``torchisotonic==0.2.1`` (pure Python, 40 kB; needs ``torch`` and ``ninja``, both in the image): it
  compiles its CUDA operator with nvcc on first use, about a minute, inside its warm-up;
- ``cuml`` cannot travel: its CUDA 12 wheels and their RAPIDS dependencies are several hundred MB,
  over the 64 MiB a call carries, so cuML is not a peer of this run.

Here, in the repository root::

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d .whl numpy==2.4.6 torchisotonic==0.2.1

Then one device call, carrying ``.whl``::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 &&
        python3 benchmarks/bench_gpu.py --out $OUT/gpu.md

Run: ``python benchmarks/bench_gpu.py [--dry-run] [--out PATH.md] [--cases SUBSTRING ...]
[--sizes 1e6 1e7 ...] [--max-rows N] [--budget-s S]``; ``--out`` also writes the ``.json`` beside it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

# The repository root, so that ``gpucal`` and ``kernels`` import from the working tree.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

Rows = dict[str, Any]

#: Cardinalities of the eight int8 feature columns ``f0`` .. ``f7`` (those of ``bench_group_sums``).
CARDINALITIES = (2, 3, 5, 10, 20, 50, 100, 100)
FEATURES = [f"f{j}" for j in range(len(CARDINALITIES))]
#: Bytes per row of each column of :func:`make_rows`.
COLUMN_BYTES = {"score": 8, "label": 8, "weight": 8, "node": 4, "codes": len(CARDINALITIES)} | dict.fromkeys(
    FEATURES, 1
)
#: Device bytes per row held at the largest size beside the data: the heaviest case's working arrays
#: (MBCT's fit: codes in node order, node ids, the order, gathered scores, labels and weights).
WORKING_BYTES_PER_ROW = 120
SIZES = (1e6, 1e7)
DRY_RUN_SIZES = (1e4,)
PROBE_ROWS = 2_000
GENERATE_CHUNK_ROWS = 1 << 20
#: Rows a predict case fits its model on (untimed), at most.
PREDICT_FIT_ROWS = 200_000
#: PyTorch CPU threads of the neural calibrators' CPU side: every core, as numba uses.
CPU_THREADS = os.cpu_count() or 1
#: Cap of the largest size: generating the rows on the host and the CPU side's time grow with it.
MAX_ROWS = 200_000_000
#: Seconds shared among the cases: data generation, transfers, imports and the CPU kernels' compilation
#: (:func:`warm_up_cpu_kernels`) fit in the rest of 10 minutes (an H200 run with 455 s of budget and no
#: up-front compilation took 507 s).
BUDGET_S = 400.0
#: Timed calls per (case, size, side) at most, and the seconds after which no further call is made.
REPEATS = 3
REPEAT_WITHIN_S = 2.0
#: Seconds a call may run past its case's share of the budget before it is stopped (the first size of
#: a case runs without a projection), and the limit of a warm-up (torchisotonic compiles in its own).
MIN_CALL_LIMIT_S = 45.0
WARM_UP_LIMIT_S = 180.0
DEFAULT_RTOL = 1e-6
#: Peers that run only when installed (carried as wheels to the GPU machine).
OPTIONAL_PEERS = ("torchisotonic",)


# --------------------------------------------------------------------------------------------------
# Data


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Return the logistic function of ``x``."""
    return 1.0 / (1.0 + np.exp(-x))


def make_rows(n_rows: int, seed: int = 0) -> Rows:
    """Return ``n_rows`` host rows: an over-confident score, labels, weights, a node id and codes.

    The true probability carries a segment bias on ``f0`` and ``f1``, so the feature-aware methods
    find splits. ``codes`` is the ``(n, 8)`` int8 matrix the kernels read; ``f0`` .. ``f7`` are its
    columns as contiguous arrays, the columns the estimators read. Rows are drawn in chunks of
    ``GENERATE_CHUNK_ROWS``, each from its own spawned generator, on every core (numpy releases the
    GIL while it draws): the same rows for a seed whatever the core count.
    """
    rows: Rows = {
        "score": np.empty(n_rows),
        "label": np.empty(n_rows),
        "weight": np.empty(n_rows),
        "node": np.empty(n_rows, dtype=np.int32),
        "codes": np.empty((n_rows, len(CARDINALITIES)), dtype=np.int8),
    }
    bounds = [*range(0, n_rows, GENERATE_CHUNK_ROWS), n_rows]
    generators = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(bounds) - 1)]

    def fill(chunk: int) -> None:
        rng, lo, hi = generators[chunk], bounds[chunk], bounds[chunk + 1]
        codes = rows["codes"][lo:hi]
        for j, k in enumerate(CARDINALITIES):
            codes[:, j] = rng.integers(0, k, hi - lo)
        logit = rng.normal(-2.0, 1.0, hi - lo)
        p_true = sigmoid(logit + np.where(codes[:, 0] == 1, 0.5, -0.3) + 0.4 * (codes[:, 1] == 2))
        rows["score"][lo:hi] = sigmoid(1.4 * logit)
        rows["label"][lo:hi] = rng.random(hi - lo) < p_true
        rows["weight"][lo:hi] = rng.random(hi - lo) + 0.5
        rows["node"][lo:hi] = rng.integers(0, 2, hi - lo)

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(fill, range(len(bounds) - 1)))
    for j, name in enumerate(FEATURES):
        rows[name] = np.ascontiguousarray(rows["codes"][:, j])
    return rows


def head(rows: Rows, n_rows: int) -> Rows:
    """Return the first ``n_rows`` of every column."""
    return {name: a[:n_rows] for name, a in rows.items()}


def frame(rows: Rows) -> dict[str, Any]:
    """Return the score and feature columns as the ``dict`` frame the feature-aware estimators take."""
    return {"score": rows["score"]} | {name: rows[name] for name in FEATURES}


# --------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Case:
    """One GPU path: how to call it on rows of either device, and what it costs at the floor.

    ``run(rows, state)`` is called with numpy rows (the CPU side) and with cupy rows (the GPU side);
    ``prepare(rows)`` builds its untimed ``state`` on the same device (a fitted model to predict
    with). ``fingerprint(output, probe)`` turns the output into a host float64 array to compare: the
    output itself, or a fitted model's predictions on the host ``probe`` rows.
    """

    name: str
    runs_on: str  # "device", "partly" (some steps on the host) or "host" (cupy input, host code)
    note: str  # where the work happens, from reading the code
    columns: tuple[str, ...]  # the input columns the call reads
    run: Callable[[Rows, Any], Any]
    prepare: Callable[[Rows], Any] = lambda rows: None
    fingerprint: Callable[[Any, Rows], np.ndarray] = lambda output, probe: host_array(output)
    output_bytes_per_row: int = 0
    rtol: float = DEFAULT_RTOL
    max_rows: int | None = None
    peer_of: tuple[str, ...] = ()  # a peer's: the gpucal cases doing the same work (their GPU times add up)

    def bytes_moved(self, n_rows: int) -> int:
        """Return the fewest bytes one call moves: every input column read once, the output written once."""
        return n_rows * (sum(COLUMN_BYTES[c] for c in self.columns) + self.output_bytes_per_row)


def host_array(x: Any) -> np.ndarray:
    """Return ``x`` (a scalar, numpy, cupy or torch array) as a flat host float64 array."""
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):  # cupy
        x = x.get()
    return np.asarray(x, dtype=np.float64).reshape(-1)


def predictions(model: Any, probe: Rows) -> np.ndarray:
    """Fingerprint of a fitted 1-D calibrator: its predictions on the probe's scores."""
    return host_array(model.predict(probe["score"]))


def frame_predictions(model: Any, probe: Rows) -> np.ndarray:
    """Fingerprint of a fitted feature-aware calibrator: its predictions on the probe's frame."""
    return host_array(model.predict(frame(probe)))


def one_dimensional_cases() -> list[Case]:
    """Fit and predict of every 1-D calibrator, on scores, labels and weights."""
    from gpucal import calibrators as cal
    from gpucal.neural import PiecewiseLogitCalibrator

    fit_columns = ("score", "label", "weight")
    # name -> (builder, where the fit runs, note)
    calibrators: dict[str, tuple[Callable[[], Any], str, str]] = {
        "platt": (cal.PlattCalibrator, "device", "Newton steps on device sums (xp array code)"),
        "temperature": (cal.TemperatureCalibrator, "device", "Newton steps on device sums (xp array code)"),
        "beta": (cal.BetaCalibrator, "device", "logistic fit on device sums (xp array code)"),
        "histogram": (cal.HistogramCalibrator, "device", "searchsorted + bincount on the device"),
        "histogram_quantile": (
            lambda: cal.HistogramCalibrator(strategy="quantile"),
            "host",
            "equal-mass bins: mass_bin_stats copies the rows to the host and sorts there",
        ),
        "isotonic": (
            cal.IsotonicCalibrator,
            "partly",
            "argsort and PAV per chunk of 256 sorted rows on the device (chunk_blocks kernel); the chunks' "
            "blocks pooled on the host",
        ),
        "sir": (cal.SIRCalibrator, "host", "equal-mass bins on the host (mass_bin_stats)"),
        "scaling_binning": (
            cal.ScalingBinningCalibrator,
            "partly",
            "Platt on the device, its equal-mass bins on the host (mass_bin_stats)",
        ),
        "piecewise_logit": (
            lambda: PiecewiseLogitCalibrator(n_threads=CPU_THREADS),
            "device",
            "L-BFGS in PyTorch on CUDA tensors (cupy reaches torch by DLPack)",
        ),
    }
    cases = []
    for name, (build, fit_runs_on, note) in calibrators.items():
        cases.append(
            Case(
                name=f"calibrator.{name}.fit",
                runs_on=fit_runs_on,
                note=note,
                columns=fit_columns,
                run=lambda rows, state, build=build: build().fit(
                    rows["score"], rows["label"], sample_weight=rows["weight"]
                ),
                fingerprint=predictions,
                rtol=1e-4 if name == "piecewise_logit" else DEFAULT_RTOL,
            )
        )
        cases.append(
            Case(
                name=f"calibrator.{name}.predict",
                runs_on="device",
                note="map evaluated by xp array code (interp / searchsorted / sigmoid)",
                columns=("score",),
                prepare=lambda rows, build=build: fit_head(build(), rows),
                run=lambda rows, model: model.predict(rows["score"]),
                output_bytes_per_row=8,
                rtol=1e-4 if name == "piecewise_logit" else DEFAULT_RTOL,
            )
        )
    return cases


def fit_head(model: Any, rows: Rows) -> Any:
    """Fit a 1-D calibrator on the first ``PREDICT_FIT_ROWS`` rows: a predict case's untimed model."""
    rows = head(rows, PREDICT_FIT_ROWS)
    return model.fit(rows["score"], rows["label"], sample_weight=rows["weight"])


def kernel_cases() -> list[Case]:
    """The kernels called directly: the group-sum histogram (both variants), MVCE views, the row order."""
    from gpucal.kernels import group_sums, order_by_node, view_sums

    n_values = np.array(CARDINALITIES)

    def histogram(rows: Rows, force_global: bool) -> Any:
        return group_sums(
            rows["codes"],
            rows["score"],
            rows["label"],
            rows["weight"],
            node_idx=rows["node"],
            n_nodes=2,
            n_values=n_values,
            force_global=force_global,
        )

    hist_columns = ("codes", "score", "label", "weight", "node")
    return [
        Case(
            name="kernel.group_sums",
            runs_on="device",
            note="numba-cuda kernel, shared-memory histogram (290 bins x 2 nodes)",
            columns=hist_columns,
            run=lambda rows, state: histogram(rows, force_global=False),
        ),
        Case(
            name="kernel.group_sums.global_atomics",
            runs_on="device",
            note="numba-cuda kernel, global-memory atomics (force_global=True)",
            columns=hist_columns,
            run=lambda rows, state: histogram(rows, force_global=True),
        ),
        Case(
            name="kernel.view_sums",
            runs_on="device",
            note="numba-cuda kernel: MVCE's 100 random views, bins of 1000 rows",
            columns=("score", "label", "weight"),
            run=lambda rows, state: view_sums(
                rows["score"], rows["label"], rows["weight"], n_views=100, bin_size=1000, seed=0
            ),
        ),
        Case(
            name="kernel.order_by_node",
            runs_on="device",
            note="cupy.argsort (radix sort) on the device; a numba counting sort on the CPU",
            columns=("node",),
            run=lambda rows, state: order_by_node(rows["node"], 2),
            output_bytes_per_row=8,
        ),
    ]


def metric_cases() -> list[Case]:
    """The metrics: sums through the kernels or xp array code, a float each."""
    from gpucal import metrics

    def metric(name: str, call: Callable[[Rows], float], note: str) -> Case:
        columns = ("label", "score", "weight", "f6") if name == "field_ece" else ("label", "score", "weight")
        return Case(
            name=f"metric.{name}",
            runs_on="device",
            note=note,
            columns=columns,
            run=lambda rows, state: call(rows),
        )

    def weighted(rows: Rows) -> dict[str, Any]:
        return {"sample_weight": rows["weight"]}

    return [
        metric(
            "ece",
            lambda r: metrics.ece(r["label"], r["score"], **weighted(r)),
            "15 equal-width bins: group_sums kernel",
        ),
        metric(
            "ece_quantile",
            lambda r: metrics.ece(r["label"], r["score"], strategy="quantile", **weighted(r)),
            "15 equal-mass bins: device sort, then group_sums",
        ),
        metric(
            "mvce",
            lambda r: metrics.mvce(r["label"], r["score"], **weighted(r)),
            "r = 100 views, bins of 1000 rows: view_sums kernel",
        ),
        metric(
            "log_loss", lambda r: metrics.log_loss(r["label"], r["score"], **weighted(r)), "xp array code"
        ),
        metric("brier", lambda r: metrics.brier(r["label"], r["score"], **weighted(r)), "xp array code"),
        metric(
            "roc_auc",
            lambda r: metrics.roc_auc(r["label"], r["score"], **weighted(r)),
            "device sort and prefix sums",
        ),
        metric(
            "field_ece",
            lambda r: metrics.field_ece(r["label"], r["score"], r["f6"], **weighted(r)),
            "cupy factorisation of the field, then group_sums",
        ),
    ]


class Fitter(NamedTuple):
    """A feature-aware calibrator's fit, where it runs, and what its predict does (None: not timed).

    ``fit(rows, state)`` fits on the rows; ``prepare(rows)`` builds its untimed ``state`` (CCL's
    embedding model).
    """

    name: str
    fit: Callable[[Rows, Any], Any]
    runs_on: str
    note: str
    predict_note: str | None
    prepare: Callable[[Rows], Any] = lambda rows: None
    predict_runs_on: str = "device"
    max_rows: int | None = None
    rtol: float = DEFAULT_RTOL

    def fit_untimed(self, rows: Rows) -> Any:
        """Fit on the first ``PREDICT_FIT_ROWS`` rows, state included: a predict case's model."""
        rows = head(rows, PREDICT_FIT_ROWS)
        return self.fit(rows, self.prepare(rows))


def feature_aware_cases() -> list[Case]:
    """The feature-aware calibrators: fit and predict on the ``dict`` frame of cupy or numpy columns."""
    from gpucal import MBCT, ClusteredCalibrator, HeterogeneousCalibrator
    from gpucal.auto import AutoCalibrator
    from gpucal.calibrators import FeatureAwarePlattCalibrator
    from gpucal.neural import FieldAwareCalibrator

    columns = ("score", "label", *FEATURES)
    features = {"feature_cols": FEATURES, "categorical_cols": FEATURES}

    def fit_mbct(rows: Rows, state: Any = None, **params: Any) -> Any:
        return MBCT(**features, **params).fit(frame(rows), rows["label"])

    def fit_hc(rows: Rows, state: Any) -> Any:
        return HeterogeneousCalibrator(**features).fit(frame(rows), rows["label"])

    def fit_ccl(rows: Rows, embedding_model: Any) -> Any:
        return ClusteredCalibrator(embedding_model=embedding_model, n_clusters=8).fit(
            frame(rows), rows["label"]
        )

    def fit_feature_platt(rows: Rows, state: Any) -> Any:
        return FeatureAwarePlattCalibrator(**features).fit(frame(rows), rows["label"])

    def fit_feature_platt_crosses(rows: Rows, state: Any) -> Any:
        return FeatureAwarePlattCalibrator(**features, interactions="auto").fit(frame(rows), rows["label"])

    def fit_auto_features(rows: Rows, state: Any) -> Any:
        return AutoCalibrator(**features).fit(frame(rows), rows["label"])

    def fit_neucalib(rows: Rows, state: Any) -> Any:
        return FieldAwareCalibrator(**features, max_epochs=3, n_threads=CPU_THREADS).fit(
            frame(rows), rows["label"]
        )

    tree_walk = "encoder lookups and the tree walk (tree_leaves / predict_trees kernels)"
    fitters = [
        Fitter(
            "feature_platt",
            fit_feature_platt,
            "device",
            "Newton-CG on device rows (xp array code)",
            "encoder lookups, then the linear logit (xp array code)",
        ),
        Fitter(
            "feature_platt_crosses",
            fit_feature_platt_crosses,
            "partly",
            "interactions='auto': the field pairs' codes and key counts on the host (lookup_pairs, "
            "pair_tables), then Newton-CG on device rows",
            "encoder lookups with the crosses' codes, then the linear logit",
            predict_runs_on="partly",
        ),
        Fitter(
            "auto_features",
            fit_auto_features,
            "partly",
            "AutoCalibrator with the eight fields: cross-fitted candidates (feature-aware Platt with and "
            "without crosses, MBCT, the 1-D maps) on a row subsample, its rungs under 262,144 rows on a "
            "host copy (HOST_RUNG_ROWS), then the refit on every row",
            None,
            max_rows=10_000_000,
        ),
        Fitter(
            "mbct",
            fit_mbct,
            "device",
            "trees: group_sums, route_rows, order_by_node kernels; decisions on host histograms",
            tree_walk,
        ),
        Fitter(
            "mbct_mvce",
            lambda rows, state: fit_mbct(rows, criterion="mvce"),
            "device",
            "criterion='mvce': the mvce_split_sums kernel beside the tree kernels",
            None,
            max_rows=10_000_000,
        ),
        Fitter(
            "hc",
            fit_hc,
            "device",
            "label trees on the tree kernels, per-node Platt maps by grouped Newton steps",
            tree_walk + ", then each node's map",
        ),
        Fitter(
            "ccl",
            fit_ccl,
            "partly",
            "an MBCT's leaves embed the rows (its fit untimed; nodes of 100 rows or more); the embedding, "
            "its projection and k-means on the host; per-cluster maps on the device",
            "embedding, projection and nearest centroid on the host; the cluster's map on the device",
            predict_runs_on="partly",
            prepare=lambda rows: fit_mbct(rows, min_node_size=100.0),
            max_rows=10_000_000,
        ),
        Fitter(
            "neucalib",
            fit_neucalib,
            "device",
            "mini-batch Adam in PyTorch on CUDA tensors (3 epochs)",
            "encoder lookups, the field network's layers in xp array code (no torch)",
            max_rows=1_000_000,
            rtol=5e-2,
        ),
    ]
    cases = []
    for fitter in fitters:
        cases.append(
            Case(
                name=f"{fitter.name}.fit",
                runs_on=fitter.runs_on,
                note=fitter.note,
                columns=columns,
                prepare=fitter.prepare,
                run=fitter.fit,
                fingerprint=frame_predictions,
                rtol=fitter.rtol,
                max_rows=fitter.max_rows,
            )
        )
        if fitter.predict_note is None:  # predicts as another case does
            continue
        cases.append(
            Case(
                name=f"{fitter.name}.predict",
                runs_on=fitter.predict_runs_on,
                note=fitter.predict_note,
                columns=("score", *FEATURES),
                prepare=fitter.fit_untimed,
                run=lambda rows, model: model.predict(frame(rows)),
                output_bytes_per_row=8,
                rtol=fitter.rtol,
            )
        )
    return cases


def auto_cases() -> list[Case]:
    """The automatic calibrator: seeded cross-fitting of its candidates, then one refit."""
    from gpucal.auto import AutoCalibrator

    return [
        Case(
            name="auto.fit",
            runs_on="partly",
            note="each candidate's fit where it runs (isotonic and SIR on the host; rungs under 262,144 "
            "rows on a host copy); folds on the device",
            columns=("score", "label", "weight"),
            run=lambda rows, state: AutoCalibrator().fit(
                rows["score"], rows["label"], sample_weight=rows["weight"]
            ),
            fingerprint=predictions,
            max_rows=1_000_000,
        )
    ]


def peer_cases() -> list[Case]:
    """Peers on the same device: PyTorch temperature scaling, and ``torchisotonic`` when installed.

    Each fits on the rows and predicts them, as the two gpucal cases it names in ``peer_of`` do.
    """
    cases = [
        Case(
            name="peer.torch_temperature.fit_predict",
            runs_on="device",
            note="PyTorch: L-BFGS on the logits' weighted log-loss, then sigmoid(logit / T)",
            columns=("score", "label", "weight"),
            run=lambda rows, state: torch_temperature(rows),
            output_bytes_per_row=8,
            rtol=1e-5,
            peer_of=("calibrator.temperature.fit", "calibrator.temperature.predict"),
        )
    ]
    if importlib.util.find_spec("torchisotonic") is not None:  # one of OPTIONAL_PEERS
        cases.append(
            Case(
                name="peer.torchisotonic.fit_predict",
                runs_on="device",
                note="torchisotonic 0.2: sort, pool ties with their weights, isotonic(), then "
                "interpolation by searchsorted (its README's recipe, weighted)",
                columns=("score", "label", "weight"),
                run=lambda rows, state: torchisotonic_calibration(rows),
                output_bytes_per_row=8,
                rtol=1e-6,
                peer_of=("calibrator.isotonic.fit", "calibrator.isotonic.predict"),
            )
        )
    return cases


def as_torch(a: Any) -> Any:
    """Return a numpy array as a CPU tensor and a cupy array as a CUDA tensor (DLPack, no copy)."""
    import torch

    return torch.from_dlpack(a) if hasattr(a, "__cuda_array_interface__") else torch.from_numpy(a)


def torch_temperature(rows: Rows) -> Any:
    """Fit temperature scaling by PyTorch's L-BFGS on the rows' device; return the calibrated scores."""
    import torch

    score, label, weight = (as_torch(rows[c]) for c in ("score", "label", "weight"))
    logit = torch.logit(score)
    log_t = torch.zeros((), dtype=torch.float64, device=logit.device, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [log_t], lr=1.0, max_iter=100, tolerance_grad=1e-10, line_search_fn="strong_wolfe"
    )

    def closure() -> Any:
        optimizer.zero_grad()
        z = logit / torch.exp(log_t)
        loss = torch.sum(
            weight * torch.nn.functional.binary_cross_entropy_with_logits(z, label, reduction="none")
        )
        loss = loss / torch.sum(weight)
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        return torch.sigmoid(logit / torch.exp(log_t))


def torchisotonic_calibration(rows: Rows) -> Any:
    """Fit weighted isotonic calibration with torchisotonic (ties pooled, as scikit-learn); predict the rows.

    The peer is given the weights gpucal's isotonic case fits with, so both solve the same problem.
    """
    import torch
    import torchisotonic

    score, label, weight = (as_torch(rows[c]) for c in ("score", "label", "weight"))
    s, order = torch.sort(score)
    xs, inverse = torch.unique_consecutive(s, return_inverse=True)
    group_w = torch.zeros(len(xs), dtype=torch.float64, device=score.device)
    group_wy = torch.zeros_like(group_w)
    group_w.index_add_(0, inverse, weight[order])
    group_wy.index_add_(0, inverse, (weight * label)[order])
    fit = torchisotonic.isotonic(group_wy / group_w, group_w)
    i = torch.searchsorted(xs, score).clamp(1, len(xs) - 1)
    t = ((score - xs[i - 1]) / (xs[i] - xs[i - 1])).clamp(0, 1)
    return fit[i - 1] + t * (fit[i] - fit[i - 1])


def all_cases() -> list[Case]:
    """Every case, in report order."""
    return [
        *kernel_cases(),
        *one_dimensional_cases(),
        *metric_cases(),
        *feature_aware_cases(),
        *auto_cases(),
        *peer_cases(),
    ]


#: GPU paths the issue names that gpucal does not have (or has only in part), said plainly in the report.
NOT_ON_GPU = [
    "Isotonic regression pools each chunk of sorted rows on the device and the chunks' blocks (far "
    "fewer than the rows) on the host (the case is marked `partly`); its predict runs on the device.",
    "Equal-mass binning (`mass_bin_stats`): SIR's fit, quantile histogram binning and scaling-binning's "
    "bins sort on the host.",
    "CCL's k-means and projection (`gpucal.ccl.clustering`) run on the host, on numpy, whatever the "
    "data's device; only the per-cluster maps are fitted on the device. Ward clustering likewise.",
    "The Dirichlet calibrator fits on the host (`ClusteredCalibrator(calibrator='dirichlet')` too).",
    "`rejection_curve` copies its rows to the host.",
    "cudf frames and the Dask GPU path (`dask-cudf`, `dask-cuda`): not in the GPU machine's image, too large "
    "to carry; every case here takes cupy columns in a `dict`.",
    "cuML (a peer): its wheels are several hundred MB with their RAPIDS dependencies, over what a call "
    "carries (64 MiB).",
]


# --------------------------------------------------------------------------------------------------
# Devices: cupy with CUDA events, or numpy standing in for it in the dry run


class HostClock:
    """The CPU side's clock, and the dry run's stand-in device: numpy arrays, no memory figures."""

    name = "numpy stand-in (dry run: no GPU)"

    def to_device(self, a: np.ndarray) -> tuple[Any, float]:
        """Return a copy of ``a`` and the seconds the copy took."""
        start = time.perf_counter()
        copy = np.array(a, copy=True)
        return copy, time.perf_counter() - start

    def timed(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """Return the seconds ``call`` took and its output."""
        start = time.perf_counter()
        out = call()
        return time.perf_counter() - start, out

    @contextmanager
    def peak_memory(self) -> Iterator[dict[str, int | None]]:
        """Yield a record of the peak device bytes: none here."""
        yield {"peak_bytes": None}

    def free_bytes(self) -> int | None:
        """Return the free device memory: none here."""
        return None

    def describe(self) -> dict[str, Any]:
        """Return what the report says of the device."""
        return {"name": self.name, "copy_bandwidth_gbs": None, "spec_bandwidth_gbs": None}

    def free_all(self) -> None:
        """Release cached device memory: nothing to release."""


class CupyDevice:
    """The GPU: cupy arrays, CUDA events, cupy's memory pool (and torch's allocator) for peak memory."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = self.properties["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.copy_bandwidth = self.measure_copy_bandwidth()
        torch_cuda = importlib.import_module("torch").cuda if importlib.util.find_spec("torch") else None
        if torch_cuda is not None and torch_cuda.is_available():
            torch_cuda.init()  # torch's CUDA context now, so that no timed call pays for it

    def to_device(self, a: np.ndarray) -> tuple[Any, float]:
        """Copy ``a`` to the device; return the cupy array and the seconds by CUDA events."""
        seconds, copy = self.timed(lambda: self.cupy.asarray(a))
        return copy, seconds

    def timed(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """Return the seconds between CUDA events recorded before and after ``call``, and its output."""
        start, stop = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record()
        out = call()
        torch_cuda = torch_cuda_module()
        if torch_cuda is not None:  # torch may queue its work on a stream of its own
            torch_cuda.synchronize()
        stop.record()
        stop.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, stop) / 1e3, out

    @contextmanager
    def peak_memory(self) -> Iterator[dict[str, int | None]]:
        """Yield a record whose ``peak_bytes`` is set to the growth of cupy's pool plus torch's peak."""
        self.pool.free_all_blocks()
        base = self.pool.total_bytes()
        torch_cuda = torch_cuda_module()
        torch_base = 0
        if torch_cuda is not None:
            torch_cuda.reset_peak_memory_stats()
            torch_base = torch_cuda.memory_allocated()
        record: dict[str, int | None] = {"peak_bytes": None}
        yield record
        torch_peak = 0 if torch_cuda is None else torch_cuda.max_memory_allocated() - torch_base
        record["peak_bytes"] = int(self.pool.total_bytes() - base + torch_peak)

    def free_bytes(self) -> int:
        """Return the device's free memory plus what cupy's pool holds unused."""
        free, _ = self.cupy.cuda.runtime.memGetInfo()
        return int(free + self.pool.free_bytes())

    def free_all(self) -> None:
        """Return cupy's (and torch's) cached blocks to the device."""
        self.pool.free_all_blocks()
        torch_cuda = torch_cuda_module()
        if torch_cuda is not None:
            torch_cuda.empty_cache()

    def measure_copy_bandwidth(self) -> float:
        """Return the device-to-device copy rate, bytes read plus bytes written per second (1 GiB copies)."""
        rate = copy_rate(self.cupy, self.timed)
        self.pool.free_all_blocks()  # the copies' buffers died with copy_rate's frame
        return rate

    def spec_bandwidth(self) -> float | None:
        """Return the datasheet bandwidth, memory clock x bus width x 2 (double data rate), if readable.

        CUDA 13 dropped ``memoryClockRate`` from the device properties; the device attributes (memory
        clock in kHz, bus width in bits) are asked next.
        """
        runtime = self.cupy.cuda.runtime
        device_id = self.cupy.cuda.Device().id
        clock_khz = self.properties.get("memoryClockRate")
        bus_bits = self.properties.get("memoryBusWidth")
        try:
            clock_khz = clock_khz or runtime.deviceGetAttribute(runtime.cudaDevAttrMemoryClockRate, device_id)
            bus_bits = bus_bits or runtime.deviceGetAttribute(
                runtime.cudaDevAttrGlobalMemoryBusWidth, device_id
            )
        except Exception:  # an attribute this runtime does not know
            return None
        return 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None

    def describe(self) -> dict[str, Any]:
        """Return what the report says of the device."""
        spec = self.spec_bandwidth()
        free, total = self.cupy.cuda.runtime.memGetInfo()
        return {
            "name": self.name,
            "compute_capability": f"{self.properties['major']}.{self.properties['minor']}",
            "multiprocessors": int(self.properties["multiProcessorCount"]),
            "memory_gib": round(total / 2**30, 1),
            "free_with_data_gib": round(free / 2**30, 1),
            "copy_bandwidth_gbs": round(self.copy_bandwidth / 1e9, 1),
            "spec_bandwidth_gbs": None if spec is None else round(spec / 1e9, 1),
            "cuda_runtime": int(self.cupy.cuda.runtime.runtimeGetVersion()),
            "driver": int(self.cupy.cuda.runtime.driverGetVersion()),
        }


def copy_rate(cp: Any, timed: Callable[[Callable[[], Any]], tuple[float, Any]]) -> float:
    """Return bytes read plus written per second of ten device-to-device copies of 1 GiB (after one)."""
    source = cp.arange(1 << 28, dtype=cp.float32)
    target = cp.empty_like(source)
    cp.copyto(target, source)  # warm-up
    seconds, _ = timed(lambda: [cp.copyto(target, source) for _ in range(10)])
    return 2 * 10 * source.nbytes / seconds


def torch_cuda_module() -> Any:
    """Return ``torch.cuda`` when torch is already imported and sees a GPU, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


# --------------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Side:
    """The measurements of one side (CPU or GPU) of one case at one size."""

    seconds: float | None = None
    runs: int = 0
    output: Any = None
    skipped: str | None = None
    error: str | None = None
    peak_bytes: int | None = None
    fetch_seconds: float | None = None


@dataclass
class Budget:
    """The run's deadline, shared out among the cases still to run."""

    deadline: float
    cases_left: int
    case_deadline: float = field(default=0.0)

    def start_case(self) -> None:
        """Give the next case an even share of the time left."""
        now = time.perf_counter()
        self.case_deadline = now + max(self.deadline - now, 0.0) / max(self.cases_left, 1)
        self.cases_left -= 1

    def fits(self, projected_s: float | None) -> bool:
        """Return True when a call projected to take ``projected_s`` ends inside the case's share."""
        return projected_s is None or time.perf_counter() + projected_s <= self.case_deadline

    def spent(self) -> bool:
        """Return True once the run's deadline has passed: the cases left are not started."""
        return time.perf_counter() >= self.deadline

    def call_limit(self) -> float:
        """Return the seconds after which a call is stopped: the case's share left, or the minimum."""
        return max(self.case_deadline - time.perf_counter(), MIN_CALL_LIMIT_S)


class CallStopped(Exception):
    """Raised into a call that outlived its time limit (:func:`time_limit`)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CallStopped` in the main thread once ``seconds`` have passed.

    The signal is handled between Python bytecodes, so a call is stopped when it next returns to the
    interpreter from a kernel launch, a numba loop or a torch operation, not inside one.
    """

    def stop(signum: int, frame: Any) -> None:
        msg = f"stopped after {seconds:.0f} s, the time this call was allowed"
        raise CallStopped(msg)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def measure(
    timed: Callable[[Callable[[], Any]], tuple[float, Any]], call: Callable[[], Any], repeats: int
) -> tuple[float, int, Any]:
    """Call ``call`` up to ``repeats`` times, none after ``REPEAT_WITHIN_S``; return the median time."""
    times, out = [], None
    while len(times) < repeats and (not times or sum(times) < REPEAT_WITHIN_S):
        seconds, out = timed(call)
        times.append(seconds)
    return float(np.median(times)), len(times), out


def short_error(exc: BaseException) -> str:
    """Return the exception's type, message and innermost frame in one line."""
    frame_info = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" ({Path(frame_info[0].filename).name}:{frame_info[0].lineno})" if frame_info else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}{where}"


def run_side(
    case: Case,
    rows: Rows,
    clock: CupyDevice | HostClock,
    projected_s: float | None,
    budget: Budget,
    repeats: int,
) -> Side:
    """Prepare the case's state on ``rows``, then time its calls and their peak memory, budget allowing."""
    if not budget.fits(projected_s):
        return Side(skipped=f"projected {projected_s:.1f} s exceeds the case's share of the budget")
    try:
        with time_limit(budget.call_limit()):
            state = case.prepare(rows)
            with clock.peak_memory() as memory:
                seconds, runs, out = measure(clock.timed, lambda: case.run(rows, state), repeats)
    except Exception as exc:  # a failing or stopped case is recorded, the run goes on
        return Side(error=short_error(exc))
    return Side(seconds=seconds, runs=runs, output=out, peak_bytes=memory["peak_bytes"])


def compare(case: Case, cpu: Any, gpu: Any, probe: Rows) -> dict[str, Any]:
    """Compare the GPU side's fingerprint with the CPU side's: relative l2 error against the tolerance."""
    try:
        expected, got = case.fingerprint(cpu, probe), case.fingerprint(gpu, probe)
    except Exception as exc:
        return {"passed": False, "error": short_error(exc)}
    if expected.shape != got.shape:
        return {"passed": False, "error": f"shapes differ: {expected.shape} vs {got.shape}"}
    if not np.isfinite(got).all():
        return {"passed": False, "error": "non-finite GPU output"}
    scale = max(float(np.linalg.norm(expected)), np.finfo(np.float64).tiny)
    relative = float(np.linalg.norm(got - expected)) / scale
    return {
        "passed": relative <= case.rtol,
        "relative_error": relative,
        "max_abs_error": float(np.max(np.abs(got - expected))) if got.size else 0.0,
        "rtol": case.rtol,
    }


def projected(previous: dict[str, tuple[int, float]], side: str, n_rows: int) -> float | None:
    """Return the time projected at ``n_rows`` from the side's last measured size (linear in the rows)."""
    if side not in previous:
        return None
    n_prev, seconds = previous[side]
    return seconds * n_rows / n_prev


def run_case(
    case: Case,
    device: CupyDevice | HostClock,
    datasets: dict[int, tuple[Rows, Rows]],
    warm: tuple[Rows, Rows],
    budget: Budget,
    repeats: int,
) -> list[dict[str, Any]]:
    """Warm both sides up, then measure every size of ``datasets`` the case and its budget allow."""
    if budget.spent():
        return [{"case": case.name, "rows": None, "skipped": "the run's budget was spent before this case"}]
    host = HostClock()
    results: list[dict[str, Any]] = []
    warm_up: dict[str, float | None] = {}
    for side, rows in (("cpu", warm[0]), ("gpu", warm[1])):
        start = time.perf_counter()
        try:
            with time_limit(WARM_UP_LIMIT_S):
                case.run(rows, case.prepare(rows))
            warm_up[side] = time.perf_counter() - start
        except Exception as exc:
            warm_up[side] = None
            results.append(
                {
                    "case": case.name,
                    "rows": len(rows["score"]),
                    "warm_up_error": f"{side}: {short_error(exc)}",
                }
            )
    # The case's share starts after its warm-up: compiling its kernels must not starve its measurements.
    budget.start_case()
    previous: dict[str, tuple[int, float]] = {}
    for n_rows, (host_rows, device_rows) in datasets.items():
        if case.max_rows is not None and n_rows > case.max_rows:
            results.append(
                {"case": case.name, "rows": n_rows, "skipped": f"above the case's {case.max_rows:.0e} rows"}
            )
            continue
        cpu = run_side(case, host_rows, host, projected(previous, "cpu", n_rows), budget, repeats)
        gpu = run_side(case, device_rows, device, projected(previous, "gpu", n_rows), budget, repeats)
        if gpu.output is not None and case.output_bytes_per_row:
            gpu.fetch_seconds, _ = device.timed(lambda gpu=gpu: host_array(gpu.output))
        for side, measured in (("cpu", cpu), ("gpu", gpu)):
            if measured.seconds is not None:
                previous[side] = (n_rows, measured.seconds)
        results.append(case_record(case, n_rows, cpu, gpu, device, head(host_rows, PROBE_ROWS), warm_up))
        device.free_all()
    return results


def case_record(
    case: Case,
    n_rows: int,
    cpu: Side,
    gpu: Side,
    device: CupyDevice | HostClock,
    probe: Rows,
    warm_up: dict[str, float | None],
) -> dict[str, Any]:
    """Return the JSON record of one (case, size): times, floor, peak memory, check, skips and errors."""
    bandwidth = device.describe()["copy_bandwidth_gbs"]
    bytes_moved = case.bytes_moved(n_rows)
    floor_s = None if bandwidth is None else bytes_moved / (bandwidth * 1e9)
    record: dict[str, Any] = {
        "case": case.name,
        "runs_on": case.runs_on,
        "rows": n_rows,
        "cpu_s": cpu.seconds,
        "cpu_runs": cpu.runs,
        "gpu_s": gpu.seconds,
        "gpu_runs": gpu.runs,
        "speedup": None if cpu.seconds is None or not gpu.seconds else cpu.seconds / gpu.seconds,
        "bytes_moved": bytes_moved,
        "floor_s": floor_s,
        "gpu_over_floor": None if floor_s is None or gpu.seconds is None else gpu.seconds / floor_s,
        "peak_device_bytes": gpu.peak_bytes,
        "fetch_output_s": gpu.fetch_seconds,
        "warm_up_cpu_s": warm_up.get("cpu"),
        "warm_up_gpu_s": warm_up.get("gpu"),
    }
    for side, measured in (("cpu", cpu), ("gpu", gpu)):
        if measured.skipped:
            record[f"{side}_skipped"] = measured.skipped
        if measured.error:
            record[f"{side}_error"] = measured.error
    if cpu.output is not None and gpu.output is not None:
        record["check"] = compare(case, cpu.output, gpu.output, probe)
    return record


# --------------------------------------------------------------------------------------------------
# Sizes, transfers, the run


def largest_size(device: CupyDevice | HostClock, max_rows: int) -> tuple[int | None, str]:
    """Return the largest row count whose data and working arrays fit half the free device memory."""
    free = device.free_bytes()
    if free is None:
        return None, "no device memory to fill in a dry run"
    per_row = sum(COLUMN_BYTES.values()) + WORKING_BYTES_PER_ROW
    fits = int(free * 0.5 // per_row)
    if fits <= max_rows:
        return fits, f"half of {free / 2**30:.1f} GiB free over {per_row} bytes per row"
    return max_rows, f"--max-rows {max_rows:.0e} (half the free memory would hold {fits:.2e} rows)"


def to_device_rows(
    device: CupyDevice | HostClock, rows: Rows, n_rows: int
) -> tuple[Rows, list[dict[str, Any]]]:
    """Copy every column to the device; return the device rows and the timed transfer of each."""
    moved, transfers = {}, []
    for name, a in rows.items():
        moved[name], seconds = device.to_device(a)
        transfers.append(
            {
                "rows": n_rows,
                "column": name,
                "bytes": int(a.nbytes),
                "host_to_device_s": seconds,
                "gbs": a.nbytes / seconds / 1e9 if seconds else None,
            }
        )
    return moved, transfers


def versions() -> dict[str, str]:
    """Return the versions of the libraries the run touches (those installed)."""
    found = {"python": platform.python_version()}
    for name in ("numpy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x", "torch", "torchisotonic"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def run(args: argparse.Namespace, after_each_case: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Measure every selected case; hand the report's data so far to ``after_each_case``; return it.

    Writing the report after every case keeps what was measured if the run is stopped at its limit.
    """
    device: CupyDevice | HostClock = HostClock() if args.dry_run else CupyDevice()
    cases = [c for c in all_cases() if not args.cases or any(s in c.name for s in args.cases)]
    sizes = [int(s) for s in (args.sizes or (DRY_RUN_SIZES if args.dry_run else SIZES))]
    largest, largest_reason = (None, "dry run") if args.dry_run else largest_size(device, args.max_rows)
    if largest is not None and largest > max(sizes):
        sizes.append(largest)
    datasets, transfers = {}, []
    for n_rows in sizes:
        host_rows = make_rows(n_rows)
        device_rows, moved = to_device_rows(device, host_rows, n_rows)
        datasets[n_rows] = (host_rows, device_rows)
        transfers += moved
    # The smallest size's rows warm each case up: a smaller input would leave the parallel twins of the
    # CPU kernels (and any size-dependent path) to be compiled inside the first timed call.
    warm = datasets[min(datasets)]
    # Every CPU kernel compiled once, up front and outside the budget (the cache starts empty on a fresh
    # machine): the cases' warm-ups then compile only their device kernels.
    automatic = any(c.name.startswith("auto") for c in cases)
    cpu_warm_up_s = None if args.dry_run else warm_up_cpu_kernels(automatic)
    budget = Budget(deadline=time.perf_counter() + args.budget_s, cases_left=len(cases))
    data: dict[str, Any] = {
        "dry_run": args.dry_run,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": device.describe(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "versions": versions(),
        "sizes": sizes,
        "largest_size_reason": largest_reason,
        "budget_s": args.budget_s,
        "cpu_warm_up_s": cpu_warm_up_s,
        "repeats": args.repeats,
        "cases": [
            {"name": c.name, "runs_on": c.runs_on, "note": c.note, "peer_of": list(c.peer_of)} for c in cases
        ],
        "peers_not_installed": [name for name in OPTIONAL_PEERS if importlib.util.find_spec(name) is None],
        "transfers": transfers,
        "results": [],
        "not_on_gpu": NOT_ON_GPU,
    }
    for case in cases:
        print(f"{case.name} ...", flush=True)
        done = run_case(case, device, datasets, warm, budget, args.repeats)
        print("  " + "; ".join(summary_line(r) for r in done), flush=True)
        data["results"] += done
        after_each_case(data)
    return data


def warm_up_cpu_kernels(automatic: bool) -> float:
    """Compile gpucal's CPU kernels into numba's cache (:func:`gpucal.warmup.warm_up`); return the seconds.

    The automatic calibrator's paths are compiled only when an ``auto`` case runs: the whole warm-up took
    255 s on an H200's host (2026-11-27), two fifths of a call, and those paths are about half of it.
    """
    from gpucal.warmup import warm_up

    print("compiling gpucal's CPU kernels ...", flush=True)
    return warm_up(automatic=automatic)


def summary_line(record: dict[str, Any]) -> str:
    """Return one short line for the console: rows, both times, the check."""
    check = record.get("check", {})
    return (
        f"{rows_text(record['rows'])}: cpu {fmt(record.get('cpu_s'))} gpu {fmt(record.get('gpu_s'))} "
        f"check {check.get('passed', '-')}"
    )


# --------------------------------------------------------------------------------------------------
# Report


def rows_text(n_rows: int | None) -> str:
    """Return a row count as ``1e+07`` (three digits when that is not exact); None stands for every size."""
    if n_rows is None:
        return "every size"
    short = f"{n_rows:.0e}"
    return short if float(short) == n_rows else f"{n_rows:.2e}"


def fmt(seconds: float | None, scale: float = 1.0, digits: int = 3) -> str:
    """Return ``seconds * scale`` to ``digits`` significant digits, or a dash."""
    return "-" if seconds is None else f"{seconds * scale:.{digits}g}"


def check_text(record: dict[str, Any]) -> str:
    """Return the check column: pass / FAIL with the relative error, or why there is none."""
    check = record.get("check")
    if check is None:
        return "not checked"
    if "error" in check:
        return f"FAIL ({check['error']})"
    return f"{'pass' if check['passed'] else 'FAIL'} {check['relative_error']:.1e}"


def peer_lines(data: dict[str, Any]) -> list[str]:
    """Return the report's section on the peers: each peer's GPU time beside gpucal's for the same work."""
    gpu_seconds = {(r["case"], r["rows"]): r.get("gpu_s") for r in data["results"]}
    lines = [
        "",
        "## Peers on the same device",
        "",
        "Fit on the rows and predict them. gpucal's time is the sum of its fit and predict cases' GPU "
        "times (its predict case's model is fitted apart, untimed); peer / gpucal above 1: gpucal faster.",
        "",
        "| peer | rows | peer GPU s | gpucal GPU s | peer / gpucal | gpucal cases |",
        "|---|---|---|---|---|---|",
    ]
    for case in data["cases"]:
        for r in data["results"]:
            if not case["peer_of"] or r["case"] != case["name"] or r.get("gpu_s") is None:
                continue
            ours = [gpu_seconds.get((name, r["rows"])) for name in case["peer_of"]]
            total = None if None in ours else sum(ours)
            ratio = None if total is None else r["gpu_s"] / total
            lines.append(
                f"| {case['name']} | {rows_text(r['rows'])} | {fmt(r['gpu_s'])} | {fmt(total)} "
                f"| {fmt(ratio)} | {' + '.join(case['peer_of'])} |"
            )
    not_run = ["cuML (cannot be carried, see below)"] + [
        f"`{name}` (not installed: carry its wheel, see the script's docstring)"
        for name in data["peers_not_installed"]
    ]
    return [*lines, "", "Peers not run: " + "; ".join(not_run) + "."]


def write_report(data: dict[str, Any], out: Path) -> str:
    """Write the Markdown report to ``out`` and the JSON beside it; return the Markdown."""
    device, dry = data["device"], data["dry_run"]
    lines = ["# gpucal on a GPU: every GPU path beside the numba CPU path", ""]
    if dry:
        lines += [
            "**Dry run: no GPU.** numpy stands in for cupy and the host clock for CUDA events, so every",
            "'GPU' figure below is a CPU figure of the same code; the run checks the cases, the comparison",
            "and this report, nothing else.",
            "",
        ]
    lines += [
        f"Run {data['date']} by `bench_gpu.py` on {device['name']}; host {data['host']['machine']}, "
        f"{data['host']['cpus']} cores; {', '.join(f'{k} {v}' for k, v in data['versions'].items())}.",
    ]
    if not dry:
        lines += [
            f"Device: compute capability {device['compute_capability']}, {device['multiprocessors']} "
            f"multiprocessors, {device['memory_gib']} GiB ({device['free_with_data_gib']} free with the rows "
            "loaded); "
            f"device-to-device copy {device['copy_bandwidth_gbs']} GB/s measured (read + write), "
            f"datasheet {device['spec_bandwidth_gbs']} GB/s; CUDA runtime {device['cuda_runtime']}, "
            f"driver {device['driver']}.",
        ]
    lines += [
        f"Sizes {', '.join(f'{n:.2e}' for n in data['sizes'])} (largest: {data['largest_size_reason']}); "
        f"budget {data['budget_s']:.0f} s shared among the cases, each share counted after the case's "
        "warm-up"
        + (
            ""
            if data.get("cpu_warm_up_s") is None
            else f"; gpucal's CPU kernels compiled up front in {data['cpu_warm_up_s']:.0f} s"
        )
        + ".",
        "",
        "CPU s: numpy input (gpucal's numba path), host clock. GPU s: cupy input, CUDA events after a "
        "warm-up call on the smallest size, data already on the device. Both the median of up to "
        f"{data['repeats']} calls. Floor: "
        "bytes read and written once over the measured copy bandwidth. Peak: cupy pool growth plus torch's "
        "peak during the call. Fetch: the output copied back to the host, apart from GPU s. Check: "
        "relative l2 error of the GPU result against the CPU result (fits through their predictions "
        f"on a {PROBE_ROWS:,}-row probe). `runs on`: device, partly (some steps on the host), host "
        "(cupy input, host implementation: not a GPU figure).",
        "",
        "| case | runs on | rows | CPU s | GPU s | CPU / GPU | floor ms | GPU / floor | peak MiB "
        "| fetch ms | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in data["results"]:
        if "warm_up_error" in r:
            notes.append(f"- `{r['case']}` warm-up failed: {r['warm_up_error']}")
            continue
        if "skipped" in r:
            where = "every size" if r["rows"] is None else f"{rows_text(r['rows'])} rows"
            notes.append(f"- `{r['case']}` at {where}: skipped, {r['skipped']}")
            continue
        for side in ("cpu", "gpu"):
            for kind in ("skipped", "error"):
                if f"{side}_{kind}" in r:
                    why = r[f"{side}_{kind}"]
                    notes.append(
                        f"- `{r['case']}` at {rows_text(r['rows'])} rows, {side.upper()} {kind}: {why}"
                    )
        peak = r["peak_device_bytes"]
        lines.append(
            f"| {r['case']} | {r['runs_on']} | {rows_text(r['rows'])} | {fmt(r['cpu_s'])} "
            f"| {fmt(r['gpu_s'])} | {fmt(r['speedup'])} | {fmt(r['floor_s'], 1e3)} "
            f"| {fmt(r['gpu_over_floor'])} | {'-' if peak is None else f'{peak / 2**20:.0f}'} "
            f"| {fmt(r['fetch_output_s'], 1e3)} | {check_text(r)} |"
        )
    lines += ["", "## Skipped and failed", ""] + (notes or ["None."])
    lines += peer_lines(data)
    lines += [
        "",
        "## Host-to-device transfers (timed apart from every case)",
        "",
        "| rows | column | MiB | ms | GB/s |",
        "|---|---|---|---|---|",
    ]
    for t in data["transfers"]:
        lines.append(
            f"| {rows_text(t['rows'])} | {t['column']} | {t['bytes'] / 2**20:.1f} "
            f"| {fmt(t['host_to_device_s'], 1e3)} | {fmt(t['gbs'])} |"
        )
    lines += ["", "## Cases: where each runs", "", "| case | runs on | what runs where |", "|---|---|---|"]
    lines += [f"| {c['name']} | {c['runs_on']} | {c['note']} |" for c in data["cases"]]
    lines += ["", "## GPU paths gpucal does not have (not timed as GPU figures)", ""]
    lines += [f"- {item}" for item in data["not_on_gpu"]]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    return text


def main() -> None:
    """Parse the arguments, run the cases, write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU only, 1e4 rows, numpy stands in for cupy")
    parser.add_argument("--out", type=Path, help="report path (.md; the .json is written beside it)")
    parser.add_argument("--cases", nargs="+", help="run only the cases whose name holds one of these")
    parser.add_argument("--sizes", nargs="+", type=float, help="row counts (the largest that fits is added)")
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS)
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    if args.dry_run and args.repeats == REPEATS:
        args.repeats = 1
    out = args.out
    data = run(args, after_each_case=lambda data: None if out is None else write_report(data, out))
    if out is None:
        print(json.dumps(data["results"], indent=1, default=str))
        return
    print(write_report(data, out))


if __name__ == "__main__":
    main()

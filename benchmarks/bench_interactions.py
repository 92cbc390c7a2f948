"""Second-order feature-aware Platt (crosses of fields) beside scikit-learn: speed, memory, held-out log-loss.

Two parts, each writing its JSON; the report ``benchmarks/results/interactions.md`` is written from
whichever JSON files exist.

``--speed`` (``interactions_speed.json``)
    ``FeatureAwarePlattCalibrator(interactions="all")`` (every pair of 8 fields crossed) against
    scikit-learn's ``LogisticRegression`` on the same one-hot design: ``[logit(score), one-hot of the 8
    fields' codes, one-hot of the 28 crosses' codes]`` from the fitted gpucal encoder (so both fit the same
    columns), the cross columns scaled by ``sqrt(l2 / l2_cross)`` so that scikit-learn's single penalty
    ``1 / C = l2`` is ``l2_cross`` on them. scikit-learn's fit time counts the ``fit`` call only (its
    design is built beforehand and not timed); gpucal's counts encoding too. Data: ``make_ctr(n, "mixed",
    seed=0)``'s ``ad_category``, ``region``, ``hour``, ``user_segment``, ``device`` (by value) and three
    numbers binned into 16 quantile bins (``p_true`` with noise, two independent normals). Each fit runs
    in a fresh process: peak memory is its ``ru_maxrss``, next to the resident size before the fit (the
    data, and for scikit-learn its design).

``--quality`` (``interactions_quality.json``)
    Held-out log-loss of first- and second-order feature-aware Platt on ``make_ctr`` scenarios (the
    ``mixed`` one misses make_ctr's device x hour interaction: the interaction-rich case) and real sets
    (``bench_auto.prepare``: calibration and test splits, the base model trained on a third split), beside
    scikit-learn's ``LogisticRegression(C=0.1)`` on ``[logit(score), one-hot fields]`` and on the same plus
    one-hot crosses of every pair (levels as gpucal's encoder pools them). Second order with
    ``interactions="auto"`` over a grid of the two penalties: the grid the defaults were chosen from.

``--trees`` (``interactions_trees.json``)
    Held-out log-loss of MBCT and HC (``HeterogeneousCalibrator``) at their defaults without crosses and
    with ``interactions="auto"`` (the pairs feature-aware Platt's screen keeps), beside first- and
    second-order feature-aware Platt (``interactions="auto"``) on the same split, and the CPU seconds of
    each fit: the interaction-rich ``make_ctr`` sets (``ctr-mixed``, and ``bench_auto``'s ``ctr-cross`` and
    ``ctr-cross400``, whose scores carry a pair's bias), the real date split ``flights-md`` (day of year
    read as month and day) and real sets, several seeds of the synthetic ones.

``--neural`` (``interactions_neural.json``)
    NeuCalib (``FieldAwareCalibrator``) at its defaults without crosses and with ``interactions="auto"``
    (the pairs feature-aware Platt's screen keeps; the screen's time is part of the fit's).

Run: ``python benchmarks/bench_interactions.py --speed``, ``--quality [--datasets ...]`` and ``--trees
[--tree-datasets ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
SPEED_JSON = RESULTS / "interactions_speed.json"
QUALITY_JSON = RESULTS / "interactions_quality.json"
TREES_JSON = RESULTS / "interactions_trees.json"
NEURAL_JSON = RESULTS / "interactions_neural.json"
NEURAL_DATASETS = ["ctr-mixed", "ctr-cross", "ctr-cross400", "flights-md", "kdd"]
SPEED_FIELDS = ["ad_category", "region", "hour", "user_segment", "device", "num_a", "num_b", "num_c"]
SPEED_CATEGORICAL = ["ad_category", "region", "hour", "user_segment", "device"]
SPEED_BINS = 16
#: Rows held out after the training rows (the same draw) for the held-out log-loss of the speed fits.
SPEED_HELD_OUT = 100_000
#: ``tol`` of the ``gpucal_loose`` fit: about where scikit-learn's lbfgs (its default ``tol=1e-4``) stops.
LOOSE_TOL = 1e-4
#: (l2, l2_cross) of the second-order grid; first order is fitted at each l2 of the grid.
GRID = [(1.0, 1.0), (1.0, 10.0), (1.0, 100.0), (10.0, 10.0), (10.0, 100.0)]
QUALITY_DATASETS = [
    "ctr-mixed",
    "ctr-segment_bias",
    "ctr-heterogeneous",
    "acs",
    "kdd",
    "adult",
    "tv16",
    "loans",
    "churn",
]
CTR_ROWS = 100_000
TREE_DATASETS = [
    "ctr-mixed",
    "ctr-cross",
    "ctr-cross@1",
    "ctr-cross400",
    "ctr-cross400@1",
    "flights-md",
    "kdd",
    "adult",
    "tv16",
]
#: Calibration rows of the real sets in ``--trees`` (flights has 1M).
TREE_MAX_CAL = 200_000


# ---------------------------------------------------------------------------------------------------
# The one-hot design both libraries fit


def one_hot(encoder: Any, frame: pd.DataFrame, scale: float) -> Any:
    """``[logit(score), one-hot of every output column of the encoder]`` as CSR; cross columns times
    ``scale``."""
    from scipy import sparse

    codes = encoder.transform(frame)
    n_codes = np.asarray(encoder.n_codes_, dtype=np.int64)
    offsets = np.r_[0, np.cumsum(n_codes)[:-1]].astype(np.int32)
    n_rows, width = codes.shape
    p = np.clip(frame["score"].to_numpy(np.float64), 1e-15, 1 - 1e-15)
    indices = np.empty((n_rows, width + 1), dtype=np.int32)
    indices[:, 0] = 0
    indices[:, 1:] = 1 + offsets + codes
    data = np.ones((n_rows, width + 1))
    data[:, 0] = np.log(p / (1 - p))
    data[:, 1 + len(encoder.feature_names_) :] = scale
    indptr = np.arange(0, n_rows * (width + 1) + 1, width + 1, dtype=np.int64)
    shape = (n_rows, 1 + int(n_codes.sum()))
    return sparse.csr_matrix((data.ravel(), indices.ravel(), indptr), shape=shape)


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


# ---------------------------------------------------------------------------------------------------
# Speed


def speed_data(n_rows: int) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray]:
    """``n_rows`` training rows and ``SPEED_HELD_OUT`` held-out rows of one draw: ``X, y, X_test, y_test``."""
    from gpucal.datasets import make_ctr

    n_all = n_rows + SPEED_HELD_OUT
    df = make_ctr(n_all, "mixed", seed=0)
    rng = np.random.default_rng(1)
    X = df[["score", *SPEED_CATEGORICAL]].copy()
    X["num_a"] = df["p_true"].to_numpy() * np.exp(rng.normal(0.0, 0.3, n_all))
    X["num_b"] = rng.normal(size=n_all)
    X["num_c"] = rng.normal(size=n_all)
    y = df["label"].to_numpy(np.float64)
    return X.iloc[:n_rows], y[:n_rows], X.iloc[n_rows:], y[n_rows:]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def speed_one(method: str, n_rows: int) -> dict[str, Any]:
    """One timed fit in this process (run by :func:`speed` in a fresh one)."""
    from gpucal.calibrators.feature_platt import L2_CROSS, FeatureAwarePlattCalibrator

    X, y, X_test, y_test = speed_data(n_rows)
    params = {"categorical_cols": SPEED_CATEGORICAL, "n_bins": SPEED_BINS, "interactions": "all"}
    cal = FeatureAwarePlattCalibrator(**params, tol=LOOSE_TOL if method == "gpucal_loose" else 1e-8)
    out: dict[str, Any] = {"method": method, "n_rows": n_rows}
    if method in ("gpucal", "gpucal_loose"):
        FeatureAwarePlattCalibrator(**params).fit(X.iloc[:5000], y[:5000])  # compile the kernels, untimed
        out["rss_before_mb"] = _rss_mb()
        start, cpu = time.perf_counter(), time.process_time()
        cal.fit(X, y)
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = time.process_time() - cpu
        out["n_iter"] = cal.n_iter_
        p, p_test = np.asarray(cal.predict(X)), np.asarray(cal.predict(X_test))
        out["n_coef"] = 2 + len(cal.coef_)
    else:
        from sklearn.linear_model import LogisticRegression

        from gpucal.encoding import FeatureEncoder

        encoder = FeatureEncoder(
            n_bins=SPEED_BINS, categorical_cols=SPEED_CATEGORICAL, interactions="all"
        ).fit(X[SPEED_FIELDS])
        design = one_hot(encoder, X, np.sqrt(1.0 / L2_CROSS))
        out["rss_before_mb"] = _rss_mb()
        model = LogisticRegression(C=1.0, max_iter=1000)
        start, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(design, y)
        out["seconds"] = time.perf_counter() - start
        out["cpu_seconds"] = time.process_time() - cpu
        out["n_iter"] = int(model.n_iter_[0])
        out["warnings"] = sorted({type(w.message).__name__ for w in caught})
        p = model.predict_proba(design)[:, 1]
        p_test = model.predict_proba(one_hot(encoder, X_test, np.sqrt(1.0 / L2_CROSS)))[:, 1]
        out["n_coef"] = 1 + design.shape[1]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["train_log_loss"] = log_loss(y, p)
    out["test_log_loss"] = log_loss(y_test, p_test)
    return out


def speed(args: argparse.Namespace) -> None:
    # Runs of other (method, rows) already in the JSON are kept: sizes can be measured in separate runs.
    runs = json.loads(SPEED_JSON.read_text())["runs"] if SPEED_JSON.exists() else []
    sizes_of = {"gpucal": args.gpucal_rows, "gpucal_loose": args.loose_rows, "sklearn": args.sklearn_rows}
    for method, sizes in sizes_of.items():
        for n_rows in sizes:
            runs = [r for r in runs if (r["method"], r["n_rows"]) != (method, n_rows)]
            cmd = [sys.executable, __file__, "--speed-one", method, str(n_rows)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
            except subprocess.TimeoutExpired:
                result = {"method": method, "n_rows": n_rows, "failed": f"not done in {args.timeout} s"}
            else:
                if done.returncode != 0:
                    result = {"method": method, "n_rows": n_rows, "failed": done.stderr[-2000:]}
                else:
                    result = json.loads(done.stdout.strip().splitlines()[-1])
            print(result, flush=True)
            runs.append(result)
            SPEED_JSON.write_text(json.dumps({"machine": _machine(), "runs": runs}, indent=1))


# ---------------------------------------------------------------------------------------------------
# Quality


def quality_fits(data: Any) -> list[dict[str, Any]]:
    """Every fit of one dataset: first and second order over the penalty grid, and the two peers."""
    from sklearn.linear_model import LogisticRegression

    from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator
    from gpucal.encoding import FeatureEncoder

    columns = {"feature_cols": data.feature_cols, "categorical_cols": data.categorical_cols or None}
    y, y_test = data.cal["label"].to_numpy(np.float64), data.test["label"].to_numpy(np.float64)
    rows = []

    def record(name: str, fit: Any, params: dict[str, Any]) -> None:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, predict = fit()
        seconds = time.perf_counter() - start
        rows.append(
            {
                "method": name,
                **params,
                "log_loss": log_loss(y_test, predict(model)),
                "seconds": seconds,
                "interactions": getattr(model, "interactions_", None),
            }
        )
        print(data.name, rows[-1], flush=True)

    def gpucal_fit(**params: Any) -> Any:
        def fit() -> Any:
            cal = FeatureAwarePlattCalibrator(output_type="numpy", **columns, **params)
            return cal.fit(data.cal, y), lambda m: m.predict(data.test)

        return fit

    for l2 in sorted({l2 for l2, _ in GRID}):
        record("first", gpucal_fit(l2=l2), {"l2": l2})
    for l2, l2_cross in GRID:
        record(
            "auto",
            gpucal_fit(l2=l2, l2_cross=l2_cross, interactions="auto"),
            {"l2": l2, "l2_cross": l2_cross},
        )
    record("all", gpucal_fit(interactions="all"), {"l2": "default", "l2_cross": "default"})
    record("auto_default", gpucal_fit(interactions="auto"), {"l2": "default", "l2_cross": "default"})
    for crossed in (False, True):
        encoder = FeatureEncoder(
            categorical_cols=data.categorical_cols or None, interactions="all" if crossed else None
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoder.fit(data.cal[data.feature_cols])

        def fit(encoder: Any = encoder) -> Any:
            model = LogisticRegression(C=0.1, max_iter=2000)
            model.fit(one_hot(encoder, data.cal, 1.0), y)
            return model, lambda m: m.predict_proba(one_hot(encoder, data.test, 1.0))[:, 1]

        record("sklearn_crosses" if crossed else "sklearn", fit, {"C": 0.1})
    return rows


def tree_fits(data: Any) -> list[dict[str, Any]]:
    """MBCT and HC with and without ``interactions="auto"``, first- and second-order feature-aware Platt."""
    from gpucal import MBCT, HeterogeneousCalibrator
    from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator

    columns = {"feature_cols": data.feature_cols, "categorical_cols": data.categorical_cols or None}
    y, y_test = data.cal["label"].to_numpy(np.float64), data.test["label"].to_numpy(np.float64)
    methods = {
        "feature_platt": (FeatureAwarePlattCalibrator, None),
        "feature_platt_auto": (FeatureAwarePlattCalibrator, "auto"),
        "mbct": (MBCT, None),
        "mbct_auto": (MBCT, "auto"),
        "hc": (HeterogeneousCalibrator, None),
        "hc_auto": (HeterogeneousCalibrator, "auto"),
    }
    rows = []
    for name, (cls, interactions) in methods.items():
        model = cls(output_type="numpy", interactions=interactions, **columns)
        rows.append(_timed_fit(name, model, data.name, (data.cal, y), (data.test, y_test)))
    return rows


def _timed_fit(
    name: str, model: Any, dataset: str, train: tuple[Any, Any], test: tuple[Any, Any]
) -> dict[str, Any]:
    """Fit ``model`` on ``train = (X, y)``; its wall and CPU seconds and held-out log-loss on ``test``."""
    start, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(*train)
    row = {
        "method": name,
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu,
        "log_loss": log_loss(test[1], np.asarray(model.predict(test[0]))),
        "interactions": getattr(model, "interactions_", None),
    }
    print(dataset, row, flush=True)
    return row


def _run_datasets(path: Path, names: list[str], fits: Any) -> None:
    """``fits(data)`` of each dataset ``names`` (``bench_auto.prepare``, at most ``TREE_MAX_CAL`` calibration
    rows), written to ``path`` after each, with the oracle's log-loss where there is one."""
    import bench_auto

    doc = json.loads(path.read_text()) if path.exists() else {"datasets": {}}
    doc["machine"] = _machine()
    for name in names:
        namespace = argparse.Namespace(quick=False, ctr_rows=CTR_ROWS, max_cal=TREE_MAX_CAL, max_test=200_000)
        data = bench_auto.prepare(name, namespace)
        entry: dict[str, Any] = {"n_cal": len(data.cal), "n_test": len(data.test), "fits": fits(data)}
        if data.has_truth:
            entry["oracle_log_loss"] = log_loss(
                data.test["label"].to_numpy(np.float64), data.test["p_true"].to_numpy()
            )
        doc["datasets"][name] = entry
        path.write_text(json.dumps(doc, indent=1))
    write_report()


def neural_fits(data: Any) -> list[dict[str, Any]]:
    """NeuCalib without crosses and with ``interactions="auto"``."""
    from gpucal.neural import FieldAwareCalibrator

    columns = {"feature_cols": data.feature_cols, "categorical_cols": data.categorical_cols or None}
    train = (data.cal, data.cal["label"].to_numpy(np.float64))
    test = (data.test, data.test["label"].to_numpy(np.float64))
    return [
        _timed_fit(
            name,
            FieldAwareCalibrator(output_type="numpy", interactions=pairs, **columns),
            data.name,
            train,
            test,
        )
        for name, pairs in (("neucalib", None), ("neucalib_auto", "auto"))
    ]


def quality(args: argparse.Namespace) -> None:
    import bench_auto

    doc = json.loads(QUALITY_JSON.read_text()) if QUALITY_JSON.exists() else {"datasets": {}}
    doc["machine"] = _machine()
    for name in args.datasets:
        namespace = argparse.Namespace(quick=False, ctr_rows=CTR_ROWS, max_cal=10**9, max_test=200_000)
        data = bench_auto.prepare(name, namespace)
        entry: dict[str, Any] = {"n_cal": len(data.cal), "n_test": len(data.test), "fits": quality_fits(data)}
        if data.has_truth:
            entry["oracle_log_loss"] = log_loss(
                data.test["label"].to_numpy(np.float64), data.test["p_true"].to_numpy()
            )
        doc["datasets"][name] = entry
        QUALITY_JSON.write_text(json.dumps(doc, indent=1))
    write_report()


# ---------------------------------------------------------------------------------------------------
# Report


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "note": "shared machine"}


NOTES = """## Reading the numbers

- **Speed.** gpucal's fit is truncated Newton over sums: each Newton step is one gradient pass and a few
  Hessian-vector passes over the rows. With every pair crossed, a main effect and the crosses it is part
  of are nearly collinear: raising a level's offset and lowering the cross codes of that level by as much
  changes no row, only the penalty. CG is deflated by these directions (built exactly from the crosses'
  kept keys and a count of the pooled rows per level; their part of each Newton step is solved from the
  penalty alone, no pass over rows) and Jacobi-preconditioned on the rest: at 300,000 rows the
  Hessian-vector passes per fit fell from 291 to 117 (about 7 per Newton step instead of 18), at 10^6 rows
  116 for the `tol=1e-8` fit (75 over every row in its 10 Newton steps, 41 over the warm start's 66,667
  rows; the last three steps take 54 of the 75, at forcing terms of 0.06 to 0.002). Each Hessian-vector
  pass is one fused numba loop (predictor, times the curvature, scatter into per-chunk tables): about
  0.06 s of wall and 0.1 CPU s per pass at 10^6 rows x 36 code columns, 4.2 of the fit's 7.5 s.
  The encoder counts the pairs' keys with `bincount` (it sorted them: 2.8 of 34 CPU s at 10^6 rows).
  Before this work `gpucal_loose` took 304.9 s at 10^6 rows (9 Newton steps, about 25 Hessian-vector
  passes each) and scikit-learn 187.7 s in the same run.
- **Against scikit-learn: time, memory, loss.** Measured on 2026-11-28, 00:33-00:39 UTC (scikit-learn's
  10^7-row fit in a second run, minutes after the others). At 10^6 rows scikit-learn's lbfgs, at its default
  `tol=1e-4`, stops at a training log-loss of 0.104834, 0.0022 above the optimum of the objective both
  minimise (0.102617: `gpucal` at `tol=1e-8`; `gpucal_loose` stops within 1e-8 of it), and takes 3.9x
  `gpucal`'s CPU time (5.0x `gpucal_loose`'s) and 1.6x its peak memory. At 10^7 rows it stops after 66
  iterations at 0.111421, 0.0016 above gpucal's 0.109817, and takes 1.6x gpucal's CPU time, 2.3x its wall
  time (gpucal's passes use both cores) and 3.0x its peak memory (5.9 GB: its design alone is 37 non-zeros x
  12 bytes per row, 4.4 GB; gpucal's peak is 2.0 GB, 36 int16 code columns and a few float64 row vectors).
  An lbfgs stopped early at a worse training loss is not a faster fit of the same model; it is a cheaper,
  less converged one: gpucal is both faster and at the optimum. Held-out, scikit-learn's early stop scores
  0.115939 against 0.116091 at 10^6 rows and 0.108153 against 0.108889 at 10^7: stopping early shrinks the
  fit further, which helps a model this large (every pair crossed, 46,451 coefficients; `all` loses to first
  order in the quality section too). That is a reason to choose the crosses and penalties
  (`interactions="auto"`, larger `l2_cross`), not to stop the solver early. An earlier run of both on a
  loaded machine took 33 and 51 CPU s at 10^6 rows, and 240 CPU s (1,213 s of wall) for gpucal at 10^7,
  where scikit-learn was not done in 600 s of wall.
- **Defaults.** `l2` stays 1.0 (the first-order default, chosen over 24 datasets in `auto_l2_sweep.md`;
  with crosses off nothing changes) and `l2_cross` is 10.0. On the grid above, with crosses the best pair
  is `l2=10, l2_cross=10` (mean excess 0.19%, worst 0.68%), and at `l2=1` the three cross penalties are
  within 0.05% of each other on average; 10 is the middle of the range that wins at either `l2`
  (10 at `l2=10`, 10-100 at `l2=1`). The main-effect penalty matters more than the cross penalty: the
  automatic calibrator should search `l2` in {1, 10} with `l2_cross` in {10, 100}.
- **Crosses.** Every pair crossed (`all`) loses to first order everywhere (too many levels for the rows);
  the score test (`auto`) keeps a pair only where its expected held-out gain is positive: it finds
  make_ctr's device x hour interaction on ctr-mixed (the only one in the truth, which that scenario's score
  misses) and nothing on ctr-segment_bias (whose score carries it), and gains on ctr-mixed and kdd. It keeps
  pairs that cost a little on acs and adult (0.1-0.3%): the test scores each pair alone, and overlapping
  pairs add up.
- **Against scikit-learn.** `LogisticRegression(C=0.1)` is `l2=10`: compare it with `first l2=10` and
  `auto 10/10` in the grid, not with the defaults.
- **Crosses in the trees.** MBCT without crosses already beats second-order feature-aware Platt on every
  `make_ctr` set (its depth-5 trees reach the device x hour combinations through two splits), so a cross
  adds little there: `mbct_auto` is never worse than `mbct` and better on 6 of 9 sets, by 0.04% on
  average (0.155% on kdd, 0.09% on ctr-cross@1, 0.06% on flights-md). HC gains on ctr-mixed (0.25%) and
  loses up to 0.07% on ctr-cross. A cross with many light levels is never split on: region x
  user_segment (400 levels of about 250 rows) leaves both unchanged, because MBCT pools children lighter
  than its node size and HC pools categories lighter than `min_leaf_size` before growing, which pools
  most of the cross. On flights-md the screen keeps origin x hour, destination x hour and destination x
  day, not month x day. `"auto"` costs one first-order feature-aware Platt fit and the screen (about 1
  CPU s at 10^5 rows here), 2-10x MBCT's or HC's own fit, for these gains: `interactions` stays None by
  default on both. (One 8.3 CPU s for `mbct` on flights-md is the kernels compiling for its codes'
  dtype on first use.)
- **Crosses in NeuCalib.** The MLP sees a pair only through the sum of its two embeddings; a cross gives
  each combination seen often enough an embedding of its own.
  With `interactions="auto"` NeuCalib is better on 5 of 6 sets (0.07-0.56%: region x user_segment, which
  the trees could not use, gives 0.56%; flights-md 0.43%, kdd 0.34%) and worse on adult (0.20%, 14,653
  rows, the pair the screen keeps there costs feature-aware Platt too). Crosses help NeuCalib more than
  the trees, and the screen costs little beside its training, but six sets (three of them `make_ctr`
  with a cross built in) are not enough to change its default: `interactions` stays None, and
  `"auto"` is the candidate to try where NeuCalib is tried. The first fit of each process imports and
  warms up PyTorch: compare CPU seconds within a row with care.
- **Machine.** 2 cores shared with other jobs during every run (load average 8 to 26 during the speed
  runs: a process got a fifth to a quarter of a core, so wall time is 4-5x CPU time): wall times are
  noisy and the CPU seconds are the figures to compare; only ratios within one run mean anything.
"""


def write_report() -> None:
    lines = ["# Second-order feature-aware Platt: crosses of fields", ""]
    if SPEED_JSON.exists():
        lines += _speed_section(json.loads(SPEED_JSON.read_text()))
    if QUALITY_JSON.exists():
        lines += _quality_section(json.loads(QUALITY_JSON.read_text()))
    if TREES_JSON.exists():
        lines += _trees_section(json.loads(TREES_JSON.read_text()))
    if NEURAL_JSON.exists():
        lines += _neural_section(json.loads(NEURAL_JSON.read_text()))
    lines.append(NOTES)
    (RESULTS / "interactions.md").write_text("\n".join(lines) + "\n")


def _speed_section(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## Speed and memory: every pair of 8 fields crossed, CPU",
        "",
        "`python benchmarks/bench_interactions.py --speed`. gpucal: `FeatureAwarePlattCalibrator("
        'interactions="all")` (encoding included); scikit-learn: `LogisticRegression(C=1)` (lbfgs) on the '
        "same one-hot design, built beforehand (not timed), at its default `tol=1e-4`. `gpucal` at its "
        f"default `tol=1e-8`, `gpucal_loose` at `tol={LOOSE_TOL:g}`. One fresh process per fit; peak = "
        "`ru_maxrss`; "
        "CPU s = the process's CPU time over the fit (all threads). Held-out: the next "
        f"{SPEED_HELD_OUT:,} rows of the same draw.",
        "",
        "| method | rows | fit s | CPU s | iterations | coefficients | RSS before fit MB | peak RSS MB "
        f"| train log-loss | held-out log-loss ({SPEED_HELD_OUT:,} rows) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["runs"]:
        if "failed" in r:
            reason = r["failed"] if r["failed"].startswith("not done") else "failed"
            lines.append(f"| {r['method']} | {r['n_rows']:,} | {reason} | | | | | | | |")
            continue
        lines.append(
            f"| {r['method']} | {r['n_rows']:,} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | "
            f"{r['n_iter']} | {r['n_coef']:,} | {r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} | "
            f"{r['train_log_loss']:.6f} | {r['test_log_loss']:.6f} |"
        )
    by = {(r["method"], r["n_rows"]): r for r in doc["runs"] if "failed" not in r}
    for ours in ("gpucal", "gpucal_loose"):
        common = sorted({n for m, n in by if m == ours} & {n for m, n in by if m == "sklearn"})
        for n in common:
            theirs, mine = by[("sklearn", n)], by[(ours, n)]
            wall, cpu = theirs["seconds"] / mine["seconds"], theirs["cpu_seconds"] / mine["cpu_seconds"]
            memory = theirs["peak_rss_mb"] / mine["peak_rss_mb"]
            lines.append(
                f"\nAt {n:,} rows scikit-learn's fit took {wall:.2f}x `{ours}`'s wall time, {cpu:.2f}x its "
                f"CPU time, with {memory:.2f}x its peak memory."
            )
    lines += [f"\nMachine: {doc['machine']}.", ""]
    return lines


def _quality_section(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## Held-out log-loss: first against second order",
        "",
        "`python benchmarks/bench_interactions.py --quality`. `first`: first order at the default `l2=1`; "
        '`auto`: `interactions="auto"` at the defaults; `all`: every pair crossed at the defaults; sklearn: '
        "`LogisticRegression(C=0.1)` one-hot, and with one-hot crosses of every pair. On `make_ctr` data "
        "the gap to the oracle's log-loss is in brackets.",
        "",
        "| dataset | cal rows | first | auto | all | sklearn | sklearn + crosses | crosses kept by auto |",
        "|---|---|---|---|---|---|---|---|",
    ]
    grid_rows = []
    for name, entry in doc["datasets"].items():
        fits = entry["fits"]
        oracle = entry.get("oracle_log_loss")

        def cell(
            method: str, fits: list[dict[str, Any]] = fits, oracle: float | None = oracle, **match: Any
        ) -> str:
            found = [
                f for f in fits if f["method"] == method and all(f.get(k) == v for k, v in match.items())
            ]
            if not found:
                return ""
            value = found[0]["log_loss"]
            gap = f" ({100 * (value / oracle - 1):.2f}%)" if oracle else ""
            return f"{value:.5f}{gap}"

        kept = next((f["interactions"] for f in fits if f["method"] == "auto_default"), None)
        lines.append(
            f"| {name} | {entry['n_cal']:,} | {cell('first', l2=1.0)} | {cell('auto_default')} | "
            f"{cell('all')} | {cell('sklearn')} | {cell('sklearn_crosses')} | {kept} |"
        )
        best = min(f["log_loss"] for f in fits)
        grid_rows.append(
            (
                name,
                [
                    f["log_loss"] / best - 1
                    for f in fits
                    if f["method"] in ("first", "auto") and f["l2"] != "default"
                ],
            )
        )
    header = [f"first l2={l2:g}" for l2 in sorted({l2 for l2, _ in GRID})] + [
        f"auto {l2:g}/{l2c:g}" for l2, l2c in GRID
    ]
    lines += [
        "",
        "### The penalty grid (excess log-loss over the dataset's best fit, %)",
        "",
        "| dataset | " + " | ".join(header) + " |",
        "|---" * (len(header) + 1) + "|",
    ]
    for name, excess in grid_rows:
        lines.append(f"| {name} | " + " | ".join(f"{100 * e:.3f}" for e in excess) + " |")
    if grid_rows:
        mean = np.mean([e for _, e in grid_rows], axis=0)
        worst = np.max([e for _, e in grid_rows], axis=0)
        lines.append("| mean | " + " | ".join(f"{100 * e:.3f}" for e in mean) + " |")
        lines.append("| worst | " + " | ".join(f"{100 * e:.3f}" for e in worst) + " |")
    lines += [f"\nMachine: {doc['machine']}.", ""]
    return lines


TREE_METHODS = ["feature_platt", "feature_platt_auto", "mbct", "mbct_auto", "hc", "hc_auto"]


def _trees_section(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## Crosses in the trees: MBCT and HC with and without interactions",
        "",
        "`python benchmarks/bench_interactions.py --trees`. Every estimator at its defaults; `_auto`: "
        '`interactions="auto"` (the pairs feature-aware Platt\'s screen keeps, the last column). Held-out '
        "log-loss, the gap to the oracle's in brackets on `make_ctr` data; the CPU seconds of each fit "
        "(all threads; the machine was loaded) below. `@1`: seed 1 of the same task.",
        "",
        "| dataset | cal rows | " + " | ".join(TREE_METHODS) + " | crosses kept |",
        "|---" * (len(TREE_METHODS) + 3) + "|",
    ]
    cpu_lines = ["", "| dataset | " + " | ".join(f"{m} CPU s" for m in TREE_METHODS) + " |"]
    cpu_lines.append("|---" * (len(TREE_METHODS) + 1) + "|")
    gains: dict[str, list[float]] = {"mbct": [], "hc": []}
    for name, entry in doc["datasets"].items():
        fits = {f["method"]: f for f in entry["fits"]}
        oracle = entry.get("oracle_log_loss")

        def cell(method: str, fits: dict[str, Any] = fits, oracle: float | None = oracle) -> str:
            value = fits[method]["log_loss"]
            return f"{value:.5f}" + (f" ({100 * (value / oracle - 1):.2f}%)" if oracle else "")

        kept = fits["mbct_auto"]["interactions"]
        lines.append(
            f"| {name} | {entry['n_cal']:,} | " + " | ".join(cell(m) for m in TREE_METHODS) + f" | {kept} |"
        )
        cpu_lines.append(
            f"| {name} | " + " | ".join(f"{fits[m]['cpu_seconds']:.1f}" for m in TREE_METHODS) + " |"
        )
        for base in gains:
            gains[base].append(fits[f"{base}_auto"]["log_loss"] / fits[base]["log_loss"] - 1)
    lines += cpu_lines
    for base, values in gains.items():
        if values:
            lines.append(
                f"\n`{base}_auto` against `{base}`: log-loss change {100 * np.mean(values):+.3f}% on "
                f"average, best {100 * min(values):+.3f}%, worst {100 * max(values):+.3f}%; better on "
                f"{sum(v < 0 for v in values)} of {len(values)} datasets."
            )
    lines += [f"\nMachine: {doc['machine']}.", ""]
    return lines


def _neural_section(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## Crosses in NeuCalib",
        "",
        "`python benchmarks/bench_interactions.py --neural`. NeuCalib at its defaults, without crosses and "
        'with `interactions="auto"`. Held-out log-loss; CPU seconds of the fit, the screen included (all '
        "threads; the machine was loaded).",
        "",
        "| dataset | cal rows | neucalib | neucalib auto | change | CPU s | CPU s auto | crosses kept |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in doc["datasets"].items():
        fits = {f["method"]: f for f in entry["fits"]}
        plain, crossed = fits["neucalib"], fits["neucalib_auto"]
        change = 100 * (crossed["log_loss"] / plain["log_loss"] - 1)
        lines.append(
            f"| {name} | {entry['n_cal']:,} | {plain['log_loss']:.5f} | {crossed['log_loss']:.5f} | "
            f"{change:+.3f}% | {plain['cpu_seconds']:.1f} | {crossed['cpu_seconds']:.1f} | "
            f"{crossed['interactions']} |"
        )
    lines += [f"\nMachine: {doc['machine']}.", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--trees", action="store_true")
    parser.add_argument("--neural", action="store_true")
    parser.add_argument("--neural-datasets", nargs="+", default=NEURAL_DATASETS)
    parser.add_argument("--tree-datasets", nargs="+", default=TREE_DATASETS)
    parser.add_argument("--report", action="store_true", help="rewrite the report from the JSON files")
    parser.add_argument("--speed-one", nargs=2, metavar=("METHOD", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument("--gpucal-rows", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--sklearn-rows", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--loose-rows", type=int, nargs="*", default=[])
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--datasets", nargs="+", default=QUALITY_DATASETS)
    args = parser.parse_args()
    if args.speed_one:
        print(json.dumps(speed_one(args.speed_one[0], int(args.speed_one[1]))))
        return
    if args.speed:
        speed(args)
    if args.quality:
        quality(args)
    if args.trees:
        _run_datasets(TREES_JSON, args.tree_datasets, tree_fits)
    if args.neural:
        _run_datasets(NEURAL_JSON, args.neural_datasets, neural_fits)
    write_report()


if __name__ == "__main__":
    main()

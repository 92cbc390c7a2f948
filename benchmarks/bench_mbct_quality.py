"""MBCT's calibration quality beside isotonic, Platt, histogram binning, feature-aware Platt and MCGrad.

Issue 4, "Quality, measured". For every dataset of ``_mbct_data`` (every ``make_ctr`` scenario, with its
true probability, and the real sets ACS Employment, KDD Census-Income, Adult and flights with the base
models trained there), each method is fitted on the calibration rows and scored on the test rows:
log-loss, Brier, ECE (15 equal-width bins), MVCE (``gpucal.metrics.mvce`` defaults: 100 views, bins of
1,000 rows, l2), Field-RCE per calibrator feature (mean and max over the features; values with fewer
test rows than max(100, 30 / positive rate) pooled into one group, numeric features by calibration
deciles), AUC, and where the truth is known the log-loss gap to the oracle ``p_true`` in % of the
oracle's log-loss and the mean squared error to ``p_true``; fit and predict seconds (after an untimed
warm-up fit on 20,000 rows, so JIT compilation is not counted).

Methods: ``raw`` (the score), ``isotonic``, ``platt``, ``histogram`` (gpucal, 15 equal-mass bins),
``feature_platt`` (``gpucal.calibrators.feature_platt.FeatureAwarePlattCalibrator``, l2 = 1, when
importable), ``mcgrad`` (``mcgrad.methods.MCGrad()`` defaults: early stopping on log-loss by 5-fold
cross-validation, at most 100 rounds, patience 0, its tuned LightGBM parameters) and ``mbct`` (each
configuration of ``MBCT_CONFIGS`` or ``--mbct-configs``; ``mbct:2`` names one).

Each dataset runs in a worker process that reports each method as it finishes; a method running longer
than ``--method-timeout`` is stopped (recorded as a timeout) and the worker restarts on the next method.

Run: ``python benchmarks/bench_mbct_quality.py [--quick] [--datasets ...] [--methods ...]
[--mbct-configs JSON-or-file]``; results in ``benchmarks/results/mbct_quality.{md,json}``
(``--quick``: ``mbct_quality_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mbct_data

# The paper's configuration without gpucal's extensions (MBCT.paper()), as keyword arguments.
PAPER = {
    "leaf_map": "scale",
    "criterion": "mvce",
    "min_child_size": 0.0,
    "leaf_penalty": 0.0,
    "learning_rate": 1.0,
    "validation_fraction": 0.0,
    "init": "identity",
}
# MBCT configurations (MBCT keyword arguments). {} = MBCT's defaults.
MBCT_CONFIGS: list[dict[str, Any]] = [
    {},
    {"leaf_map": "shift"},
    {"leaf_map": "shift", "init": "identity"},
    {"leaf_map": "scale"},
    {"criterion": "mvce"},
    PAPER,
    {**PAPER, "criterion": "gain"},
    {**PAPER, "max_trees": 1},
]
BASE_METHODS = ["raw", "isotonic", "platt", "histogram", "feature_platt", "mcgrad"]
WARMUP_ROWS = 20_000  # the warm-up fit must reach the JIT paths a full fit takes (deeper trees)
SEGMENT_TARGET_PCT = 0.5  # issue 4: segment-bias held-out log-loss within 0.5% of the oracle's


def mbct_label(config: dict[str, Any]) -> str:
    if not config:
        return "MBCT (defaults)"
    return "MBCT " + ", ".join(f"{k}={v}" for k, v in config.items())


# ---------------------------------------------------------------------------------------------------
# The methods: objects with fit(frame, y) and predict(frame), frame = score + the calibrator features


def _frame(data: _mbct_data.BenchData, rows: Any) -> Any:
    return rows[["score", *data.feature_cols]]


def build_method(method: str, data: _mbct_data.BenchData, configs: list[dict[str, Any]]) -> tuple[Any, dict]:
    """Return an object with ``fit(frame, y)`` / ``predict(frame)``, and notes on its settings."""
    if method == "raw":
        return _Raw(), {}
    if method in ("isotonic", "platt", "histogram"):
        from gpucal.calibrators import HistogramCalibrator, IsotonicCalibrator, PlattCalibrator

        if method == "histogram":
            model = HistogramCalibrator(n_bins=15, strategy="quantile")
        else:
            model = IsotonicCalibrator() if method == "isotonic" else PlattCalibrator()
        return model, {"params": {k: repr(v) for k, v in model.get_params().items()}}
    if method == "feature_platt":
        from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator

        model = FeatureAwarePlattCalibrator(
            feature_cols=data.feature_cols, categorical_cols=data.categorical_cols
        )
        return model, {"params": {"l2": model.l2}}
    if method == "mcgrad":
        return _MCGrad(data), {"params": "MCGrad() defaults"}
    if method.startswith("mbct:"):
        cls = _mbct_data.mbct_class()
        if cls is None:
            msg = "gpucal.MBCT does not exist yet"
            raise ImportError(msg)
        config = configs[int(method[5:])]
        model = cls(feature_cols=data.feature_cols, categorical_cols=data.categorical_cols, **config)
        return model, {"params": config}
    msg = f"unknown method {method!r}"
    raise ValueError(msg)


class _Raw:
    def fit(self, frame: Any, y: Any) -> _Raw:
        return self

    def predict(self, frame: Any) -> np.ndarray:
        return frame["score"].to_numpy(np.float64)


class _MCGrad:
    """MCGrad with its defaults on the same features (numeric ones as numerical features)."""

    def __init__(self, data: _mbct_data.BenchData) -> None:
        self.categorical = data.mcgrad_categorical
        self.numeric = list(data.numeric_cols)

    def fit(self, frame: Any, y: Any) -> _MCGrad:
        from mcgrad.methods import MCGrad

        train = frame.assign(label=np.asarray(y))
        self.model = MCGrad()
        # Keep MCGrad's warnings (extreme input predictions, unshrink factors far from 1) for the notes.
        self.warnings = _Collect()
        logger = logging.getLogger("mcgrad")
        logger.addHandler(self.warnings)
        try:
            self.model.fit(
                train,
                prediction_column_name="score",
                label_column_name="label",
                categorical_feature_column_names=self.categorical,
                numerical_feature_column_names=self.numeric,
            )
        finally:
            logger.removeHandler(self.warnings)
        return self

    def predict(self, frame: Any) -> np.ndarray:
        return self.model.predict(
            frame,
            prediction_column_name="score",
            categorical_feature_column_names=self.categorical,
            numerical_feature_column_names=self.numeric,
        )

    def notes(self) -> dict[str, Any]:
        model = self.model
        return {
            "rounds_trained": int(model.num_rounds_trained),
            "max_rounds": int(model.num_rounds),
            "early_stopping": bool(model.early_stopping),
            "n_folds": int(model.n_folds),
            "patience": int(model.patience),
            "lightgbm_params": {k: v for k, v in model.lightgbm_params.items() if k != "seed"},
            "warnings": self.warnings.messages[:5],
            "n_warnings": len(self.warnings.messages),
        }


class _Collect(logging.Handler):
    """A logging handler that keeps the text of every WARNING (and worse) record."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage()[:200])


def score(data: _mbct_data.BenchData, prob: np.ndarray, groups: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every metric of the report on the test rows."""
    from gpucal import metrics

    y = data.test["label"].to_numpy(np.float64)
    prob = np.asarray(prob, dtype=np.float64).reshape(-1)
    out: dict[str, Any] = {
        "log_loss": metrics.log_loss(y, prob),
        "brier": metrics.brier(y, prob),
        "ece": metrics.ece(y, prob, n_bins=15),
        "mvce": metrics.mvce(y, prob),
        "auc": metrics.roc_auc(y, prob),
    }
    frce = {col: metrics.field_rce(y, prob, g) for col, g in groups.items()}
    out["field_rce"] = frce
    out["frce_mean"] = float(np.mean(list(frce.values())))
    out["frce_max"] = float(np.max(list(frce.values())))
    if data.has_truth:
        truth = data.test["p_true"].to_numpy(np.float64)
        oracle = metrics.log_loss(y, truth)
        out["oracle_gap_pct"] = 100.0 * (out["log_loss"] - oracle) / oracle
        out["mse_truth"] = float(np.mean((prob - truth) ** 2))
    return out


def run_worker(args: argparse.Namespace) -> None:
    """Fit and score ``args.methods`` on one dataset, one JSON line per event into ``args.jsonl``."""
    configs = load_configs(args.mbct_configs)
    data = _mbct_data.prepare(args.worker, quick=args.quick, n_cal=args.n_cal, n_test=args.n_test)
    groups = _mbct_data.field_groups(data)
    y_cal = data.cal["label"].to_numpy(np.float64)
    cal, test = _frame(data, data.cal), _frame(data, data.test)
    with open(args.jsonl, "a") as sink:

        def emit(**record: Any) -> None:
            sink.write(json.dumps(record, default=float) + "\n")
            sink.flush()

        if "oracle" in args.methods:
            emit(event="done", method="oracle", metrics=score(data, data.test["p_true"].to_numpy(), groups))
        for method in [m for m in args.methods if m != "oracle"]:
            emit(event="start", method=method, time=time.time())
            try:
                model, notes = build_method(method, data, configs)
                if method not in ("raw", "mcgrad"):  # untimed warm-up: JIT compilation
                    warm = build_method(method, data, configs)[0]
                    warm.fit(cal.iloc[:WARMUP_ROWS], y_cal[:WARMUP_ROWS])
                    warm.predict(test.iloc[:WARMUP_ROWS])
                t0 = time.perf_counter()
                model.fit(cal, y_cal)
                fit_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                prob = np.asarray(model.predict(test), dtype=np.float64)
                predict_s = time.perf_counter() - t0
                if hasattr(model, "notes"):
                    notes.update(model.notes())
                for attr in ("min_node_size_", "history_"):
                    if hasattr(model, attr):
                        notes[attr] = _plain(getattr(model, attr))
                if hasattr(model, "ensemble_"):
                    notes["n_trees"] = len(model.ensemble_.tree_start) - 1
                    notes["n_nodes"] = len(model.ensemble_.node_feature)
                emit(
                    event="done",
                    method=method,
                    fit_s=fit_s,
                    predict_s=predict_s,
                    metrics=score(data, prob, groups),
                    notes=notes,
                )
            except Exception as exc:  # one failing method must not stop the others
                emit(event="done", method=method, error=f"{type(exc).__name__}: {exc}"[:300])
            print(f"  {data.name} {method} done", flush=True)


def _plain(value: Any) -> Any:
    """JSON-friendly copy of a fitted attribute."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


# ---------------------------------------------------------------------------------------------------
# The parent: one worker per dataset, restarted after a method times out or crashes


def run_dataset(name: str, methods: list[str], args: argparse.Namespace) -> dict[str, dict]:
    results: dict[str, dict] = {}
    remaining = list(methods)
    with tempfile.TemporaryDirectory() as tmp:
        jsonl, log = Path(tmp) / "events.jsonl", Path(tmp) / "stderr.txt"
        jsonl.touch()
        while remaining:
            command = [sys.executable, __file__, "--worker", name, "--jsonl", str(jsonl)]
            command += [
                "--methods",
                *remaining,
                "--mbct-configs",
                json.dumps(load_configs(args.mbct_configs)),
            ]
            command += ["--n-cal", str(args.n_cal), "--n-test", str(args.n_test)] + ["--quick"] * args.quick
            with open(log, "w") as stderr:  # a file, not a pipe: a chatty worker must not block on it
                proc = subprocess.Popen(command, stderr=stderr, start_new_session=True)
                timed_out = False
                while proc.poll() is None:
                    time.sleep(0.5)
                    started = _running(jsonl)
                    if not timed_out and started and time.time() - started[1] > args.method_timeout:
                        os.killpg(proc.pid, signal.SIGKILL)
                        timed_out = True
                proc.wait()
            for line in jsonl.read_text().splitlines():
                record = json.loads(line)
                if record["event"] == "done":
                    results[record["method"]] = record
            running = _running(jsonl)
            if running:
                why = f"timeout > {args.method_timeout:.0f} s" if timed_out else _last_line(log.read_text())
                results[running[0]] = {"method": running[0], "error": why}
                _close(jsonl, running[0])
            left = [m for m in remaining if m not in results]
            if not running and left:  # the worker ended without reaching them (failed data preparation)
                for method in left:
                    results[method] = {
                        "method": method,
                        "error": "worker failed: " + _last_line(log.read_text()),
                    }
            remaining = [m for m in remaining if m not in results]
    return results


def _running(jsonl: Path) -> tuple[str, float] | None:
    """(method, start time) of a method that started and has not finished, if any."""
    open_method = None
    for line in jsonl.read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "start":
            open_method = (record["method"], record["time"])
        elif open_method and record["method"] == open_method[0]:
            open_method = None
    return open_method


def _close(jsonl: Path, method: str) -> None:
    with open(jsonl, "a") as sink:
        sink.write(json.dumps({"event": "closed", "method": method}) + "\n")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "exited")[:200]


def load_configs(text: str | None) -> list[dict[str, Any]]:
    if not text:
        return MBCT_CONFIGS
    path = Path(text)
    return json.loads(path.read_text() if path.suffix == ".json" and path.exists() else text)


def expand_methods(requested: list[str], configs: list[dict[str, Any]]) -> list[str]:
    out = []
    for method in requested:
        out += [f"mbct:{i}" for i in range(len(configs))] if method == "mbct" else [method]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k-row splits: a smoke run")
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        help="default: ctr-<every scenario> acs kdd adult flights; also kdd-reg adult-reg flights-reg",
    )
    parser.add_argument("--methods", nargs="+", default=[*BASE_METHODS, "mbct"], help="mbct = every config")
    parser.add_argument(
        "--mbct-configs", default=None, help="JSON list of MBCT kwargs dicts, or a .json file"
    )
    parser.add_argument("--n-cal", type=int, default=200_000, help="synthetic calibration rows")
    parser.add_argument("--n-test", type=int, default=200_000, help="synthetic test rows")
    parser.add_argument("--method-timeout", type=float, default=600.0)
    parser.add_argument("--out", default=None, help="report path (.md; the .json goes beside it)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jsonl", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    configs = load_configs(args.mbct_configs)
    methods = expand_methods(args.methods, configs)
    known = BASE_METHODS + [f"mbct:{i}" for i in range(len(configs))]
    unknown = [m for m in methods if m not in known]
    if unknown:
        parser.error(f"unknown methods {unknown}; known: {known} and mbct (every configuration)")
    has_mbct = _mbct_data.mbct_class() is not None
    if not has_mbct and any(m.startswith("mbct:") for m in methods):
        if not args.quick:
            sys.exit(
                "gpucal.MBCT does not exist yet: run with --quick (MBCT skipped) or without mbct methods"
            )
        print("gpucal.MBCT does not exist yet: MBCT configurations skipped (--quick)", flush=True)
        methods = [m for m in methods if not m.startswith("mbct:")]
    datasets = args.datasets or _mbct_data.default_datasets()
    started = time.time()
    report: dict[str, Any] = {"configs": configs, "datasets": {}}
    for name in datasets:
        t0 = time.time()
        data = _mbct_data.prepare(name, quick=args.quick, n_cal=args.n_cal, n_test=args.n_test)
        info = dict(data.info)
        info.update(
            features=data.feature_cols,
            numeric=data.numeric_cols,
            categorical_ints=data.categorical_cols,
            has_truth=data.has_truth,
            field_min_rows=_mbct_data.field_min_rows(data),
        )
        del data
        results = run_dataset(name, ["oracle"] * info["has_truth"] + methods, args)
        report["datasets"][name] = {"info": info, "results": results, "seconds": time.time() - t0}
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
        for method, record in results.items():
            m = record.get("metrics")
            text = record.get("error") or f"log-loss {m['log_loss']:.5f} AUC {m['auc']:.4f}"
            print(f"  {method:14s} {text} fit {record.get('fit_s', float('nan')):.2f} s", flush=True)
    report["seconds"] = time.time() - started
    report["quick"] = args.quick
    out = Path(args.out or f"benchmarks/results/mbct_quality{'_quick' if args.quick else ''}.md")
    report["json_name"] = out.with_suffix(".json").name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=float))
    out.write_text(render(report, configs))
    print(f"written {out} and {out.with_suffix('.json')}")


# ---------------------------------------------------------------------------------------------------
# The report


def method_label(method: str, configs: list[dict[str, Any]]) -> str:
    if method.startswith("mbct:"):
        return f"{mbct_label(configs[int(method[5:])])} [{method}]"
    return {
        "oracle": "oracle (p_true)",
        "raw": "raw score",
        "isotonic": "isotonic",
        "platt": "Platt",
        "histogram": "histogram (15 equal-mass)",
        "feature_platt": "feature-aware Platt",
        "mcgrad": "MCGrad",
    }[method]


def best_mbct(results: dict[str, dict]) -> str | None:
    done = {m: r for m, r in results.items() if m.startswith("mbct:") and "metrics" in r}
    return min(done, key=lambda m: done[m]["metrics"]["log_loss"]) if done else None


def render(report: dict[str, Any], configs: list[dict[str, Any]]) -> str:
    lines = [
        "# MBCT quality beside the 1-D calibrators, feature-aware Platt and MCGrad",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench_mbct_quality.py`"
        f"{' --quick (smoke sizes: not for citing)' if report['quick'] else ''} on {platform.machine()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; Python "
        f"{platform.python_version()}; {report['seconds'] / 60:.1f} min in all. Every method is fitted on "
        "the calibration rows and scored on the test rows. Every number, per-feature Field-RCE and MBCT's "
        f"tree counts and loss history included, is in `{report['json_name']}`.",
        "",
        "Columns: log-loss, Brier, ECE (15 equal-width bins), MVCE (`gpucal.metrics.mvce` defaults: 100 "
        "random views, bins of 1,000 rows, l2 over views), F-RCE mean / max = Field-RCE per calibrator "
        "feature, averaged / the largest over the features (values with fewer test rows than "
        "max(100, 30 / positive rate) pooled into one group, as Field-RCE divides by a value's positives; "
        "numeric features grouped by the calibration split's deciles), AUC, and on "
        "synthetic data the log-loss gap to the oracle `p_true` in % of the oracle's log-loss and the mean "
        "squared error to `p_true`. Fit and predict seconds follow an untimed warm-up fit on 20,000 rows "
        "(JIT); MCGrad's fit includes its 5-fold early-stopping search. **Bold**: the best MBCT "
        "configuration (lowest test log-loss).",
        "",
    ]
    lines += _targets(report, configs)
    lines += ["", "## Methods", ""]
    lines += [
        "- isotonic, Platt, histogram: `gpucal.calibrators` defaults (histogram: 15 equal-mass bins).",
        "- feature-aware Platt: `gpucal.calibrators.feature_platt.FeatureAwarePlattCalibrator`, l2 = 1 "
        "(logistic regression on the score's logit and one-hot feature values; numeric features in 32 "
        "quantile bins).",
        "- MCGrad 0.1.5 (`mcgrad.methods.MCGrad()`, defaults): early stopping on log-loss by 5-fold "
        "cross-validation (below 2.5M effective rows), at most 100 rounds, patience 0; LightGBM "
        "learning_rate 0.0287, max_depth 5, num_leaves 5, min_child_samples 160, n_estimators 94 per round, "
        "lambda_l2 0.0091, min_gain_to_split 0.150. Same features; numeric ones as numerical features.",
    ]
    for i, config in enumerate(configs):
        lines.append(f"- `mbct:{i}`: `MBCT({', '.join(f'{k}={v!r}' for k, v in config.items())})`")
    for name, entry in report["datasets"].items():
        lines += ["", *_dataset_section(name, entry, configs)]
    return "\n".join(lines) + "\n"


def _targets(report: dict[str, Any], configs: list[dict[str, Any]]) -> list[str]:
    lines = ["## Targets (issue 4)", "", "| dataset | target | value | met |", "|---|---|---|---|"]
    for name, entry in report["datasets"].items():
        results = entry["results"]
        best = best_mbct(results)
        if best is None:
            lines.append(f"| {name} | (no MBCT result) | | |")
            continue
        m = results[best]["metrics"]
        if name == "ctr-segment_bias":
            gap = m["oracle_gap_pct"]
            lines.append(
                f"| {name} | best MBCT log-loss within {SEGMENT_TARGET_PCT}% of the oracle's | "
                f"{gap:+.3f}% ({method_label(best, configs)}) | {_yes(gap <= SEGMENT_TARGET_PCT)} |"
            )
        peer = results.get("mcgrad", {}).get("metrics")
        if peer:
            diff = m["log_loss"] - peer["log_loss"]
            lines.append(
                f"| {name} | best MBCT log-loss <= MCGrad's | {m['log_loss']:.5f} vs {peer['log_loss']:.5f} "
                f"({diff:+.5f}) | {_yes(diff <= 0)} |"
            )
        fap = results.get("feature_platt", {}).get("metrics")
        if fap:  # the bar every feature-aware method must clear
            diff = m["log_loss"] - fap["log_loss"]
            lines.append(
                f"| {name} | (bar) best MBCT log-loss <= feature-aware Platt's | {m['log_loss']:.5f} vs "
                f"{fap['log_loss']:.5f} ({diff:+.5f}) | {_yes(diff <= 0)} |"
            )
        raw = results.get("raw", {}).get("metrics")
        if raw:
            below = [
                f"{mm} ({r['metrics']['auc'] - raw['auc']:+.4f})"
                for mm, r in results.items()
                if mm.startswith("mbct:") and "metrics" in r and r["metrics"]["auc"] < raw["auc"]
            ]
            lines.append(
                f"| {name} | no MBCT AUC below the raw score's ({raw['auc']:.4f}) | "
                f"{', '.join(below) or 'none below'} | {_yes(not below)} |"
            )
    return lines


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _dataset_section(name: str, entry: dict[str, Any], configs: list[dict[str, Any]]) -> list[str]:
    info, results = entry["info"], entry["results"]
    lines = [f"## {name}", ""]
    lines.append(f"- source: {info.get('source')}; base model: {info.get('base_model')}")
    lines.append(f"- splits: {info.get('splits')}")
    sizes = f"calibration {info.get('n_cal', 0):,} rows, test {info.get('n_test', 0):,} rows"
    if "n_predictor" in info:
        sizes = f"predictor-train {info['n_predictor']:,} rows, " + sizes
    lines.append(f"- {sizes}; positive rate (test) {info.get('positive_rate_test', float('nan')):.4f}")
    auc = f"- base score AUC on test {info.get('base_auc_test', float('nan')):.4f}"
    if "base_auc_predictor_train" in info:
        auc += f" (on its own training rows {info['base_auc_predictor_train']:.4f})"
    lines.append(auc)
    numeric = set(info.get("numeric", []))
    feats = ", ".join(f"{c} (num)" if c in numeric else c for c in info.get("features", []))
    lines.append(f"- calibrator features: {feats}")
    lines.append(f"- field metrics: values with fewer than {info.get('field_min_rows')} test rows pooled")
    mc = results.get("mcgrad", {}).get("notes")
    if mc:
        text = f"- MCGrad: {mc.get('rounds_trained')} rounds trained (early stopping, "
        text += f"max {mc.get('max_rounds')})"
        if mc.get("n_warnings"):
            text += f'; {mc["n_warnings"]} warnings, first: "{mc["warnings"][0]}"'
        lines.append(text)
    lines.append("")
    truth = info.get("has_truth")
    head = ["method", "log-loss", "Brier", "ECE", "MVCE", "F-RCE mean", "F-RCE max", "AUC"]
    head += ["LL gap to oracle %", "MSE to truth"] if truth else []
    head += ["fit s", "predict s"]
    lines += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    best = best_mbct(results)
    for method, record in results.items():
        label = method_label(method, configs)
        if "metrics" not in record:
            lines.append(f"| {label} | {record.get('error', '?')} |" + " |" * (len(head) - 2))
            continue
        m = record["metrics"]
        cells = [f"{m['log_loss']:.5f}", f"{m['brier']:.5f}", f"{m['ece']:.5f}", f"{m['mvce']:.5f}"]
        cells += [f"{m['frce_mean']:.4f}", f"{m['frce_max']:.4f}", f"{m['auc']:.4f}"]
        if truth:
            cells += [f"{m['oracle_gap_pct']:.3f}", f"{m['mse_truth']:.3g}"]
        cells += [_secs(record.get("fit_s")), _secs(record.get("predict_s"))]
        if method == best:
            label, cells = f"**{label}**", [f"**{c}**" for c in cells]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    fits = [
        f"`{method}` {r['notes'].get('n_trees')} trees / {r['notes'].get('n_nodes')} nodes"
        + (f", beta {r['notes']['min_node_size_']}" if "min_node_size_" in r["notes"] else "")
        for method, r in results.items()
        if method.startswith("mbct:") and "n_trees" in r.get("notes", {})
    ]
    if fits:
        lines += ["", "MBCT fits: " + "; ".join(fits) + "."]
    return lines


def _secs(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()

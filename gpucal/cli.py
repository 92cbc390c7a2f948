"""The ``gpucal`` command line.

``gpucal demo`` generates the default synthetic CTR-like data (``gpucal.datasets.make_ctr``), fits
every one-dimensional calibrator and the feature-aware ones (MBCT, heterogeneous calibration,
feature-aware Platt) on a calibration split and prints the metrics of each on held-out rows beside the
raw score and the oracle (the true probability), plus the worst segments: the main job a fresh install
can run with no data of its own. ``fit``, ``predict`` and ``evaluate`` work on users' CSV and Parquet
files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from gpucal._version import __version__


def _log(message: str) -> None:
    """Progress goes to stderr so that stdout stays a clean table or JSON document."""
    print(message, file=sys.stderr, flush=True)


DEMO_CALIBRATORS = ("platt", "temperature", "beta", "histogram", "isotonic", "scaling_binning", "sir")
#: Calibrators that also read the scenario's fields (every field categorical).
DEMO_FEATURE_CALIBRATORS = ("feature_platt", "mbct", "hc")
#: Clustered calibration (CCL) over the leaves of the MBCT fitted just before: gpucal's own trees.
DEMO_CLUSTERED_CALIBRATORS = ("ccl",)
#: The neural calibrators (NeuCalib's eta alone; eta + field network): in the demo when torch is installed.
DEMO_NEURAL_CALIBRATORS = ("piecewise_logit",)
DEMO_NEURAL_FEATURE_CALIBRATORS = ("neucalib",)
#: Columns of the demo's text table; the JSON output holds every metric of ``gpucal.evaluate``.
DEMO_COLUMNS = ("log_loss", "brier", "roc_auc", "ece_15_uniform", "mvce_r100", "tce_l2")


def run_demo(args: argparse.Namespace) -> int:
    """Fit every calibrator on a calibration split of ``make_ctr`` data; compare them on held-out rows."""
    from gpucal import datasets, make_calibrator, metrics
    from gpucal.evaluation import evaluate
    from gpucal.neural import torch_available

    neural = torch_available()  # the neural extra: fitting needs PyTorch
    one_dim = DEMO_CALIBRATORS + DEMO_NEURAL_CALIBRATORS * neural
    feature_aware = DEMO_FEATURE_CALIBRATORS + DEMO_NEURAL_FEATURE_CALIBRATORS * neural

    started = time.perf_counter()
    _log(f"generating 2 x make_ctr(n_rows={args.rows}, scenario={args.scenario!r}, seed={args.seed}) ...")
    calibration = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed)
    held_out = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed, row_offset=args.rows)
    fields = list(datasets.ctr_scenario(args.scenario)["fields"])
    _log(f"  {args.rows:,} + {args.rows:,} rows, positive rate {calibration['label'].mean():.4f}")
    predictions = {"raw score": held_out["score"].to_numpy()}
    fit_seconds = {"raw score": 0.0}
    for name in one_dim:
        tick = time.perf_counter()
        model = make_calibrator(name).fit(calibration["score"], calibration["label"])
        predictions[name] = model.predict(held_out["score"].to_numpy())
        fit_seconds[name] = time.perf_counter() - tick
        _log(f"  {name:<16} fit + predict {fit_seconds[name]:.2f} s")
    fitted = {}
    for name in feature_aware:
        tick = time.perf_counter()
        model = make_calibrator(name, feature_cols=fields, categorical_cols=fields)
        model.fit(calibration[["score", *fields]], calibration["label"])
        fitted[name] = model
        predictions[name] = model.predict(held_out[["score", *fields]]).to_numpy()
        fit_seconds[name] = time.perf_counter() - tick
        _log(f"  {name:<16} fit + predict {fit_seconds[name]:.2f} s")
    for name in DEMO_CLUSTERED_CALIBRATORS:
        tick = time.perf_counter()
        model = make_calibrator(name, embedding_model=fitted["mbct"], n_clusters=20)
        model.fit(calibration[["score", *fields]], calibration["label"])
        predictions[name] = model.predict(held_out[["score", *fields]]).to_numpy()
        fit_seconds[name] = time.perf_counter() - tick
        _log(f"  {name:<16} fit + predict {fit_seconds[name]:.2f} s")
    predictions["oracle p_true"] = held_out["p_true"].to_numpy()
    _log("computing metrics on the held-out rows ...")
    y = held_out["label"].to_numpy()
    table = evaluate(
        y,
        predictions,
        fields={name: held_out[name].to_numpy() for name in fields},
        p_true=held_out["p_true"].to_numpy(),
        seed=args.seed,
    ).T
    table["fit_predict_s"] = [fit_seconds.get(name, float("nan")) for name in table.index]
    best = str(table["log_loss"].drop("oracle p_true").idxmin())
    report = metrics.segment_report(y, predictions[best], held_out[fields], min_rows=args.min_segment_rows)
    elapsed = time.perf_counter() - started
    if args.format == "json":
        document = {
            "rows": args.rows,
            "scenario": args.scenario,
            "seed": args.seed,
            "metrics": table.T.to_dict(),
            "worst_segments_of_best": report.head(args.top).to_dict(orient="records"),
            "seconds": elapsed,
        }
        print(json.dumps(document, indent=2, default=float))
        return 0
    segment_cols = [f"field_ece[{name}]" for name in fields]
    table["worst_field_ece"] = table[segment_cols].max(axis=1)
    shown = table[[*DEMO_COLUMNS, "worst_field_ece", "fit_predict_s"]]
    with pd.option_context("display.float_format", "{:.5f}".format, "display.width", 140):
        print(f"gpucal {__version__} demo: make_ctr(scenario={args.scenario!r}), calibrators fitted on")
        print(
            f"{args.rows:,} rows and evaluated on {args.rows:,} held-out rows (lower is better but roc_auc)\n"
        )
        print(shown.to_string())
        print(
            f"\nWorst {args.top} segments of the best calibrator by log-loss "
            f"({best}), rows >= {args.min_segment_rows}:"
        )
        print(report.head(args.top).to_string(index=False))
        print("\nOne-dimensional maps cannot fix errors that live in segments (see worst_field_ece);")
        names = ", ".join([*feature_aware, *DEMO_CLUSTERED_CALIBRATORS])
        print(f"the feature-aware calibrators ({names}) read the fields and can.")
    _log(f"done in {elapsed:.1f} s")
    return 0


def _columns(text: str | None) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()] if text else []


def _method_params(pairs: list[str]) -> dict[str, Any]:
    """Parse ``--param name=value`` pairs; values are read as JSON when they parse, else as strings."""
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            msg = f"--param expects name=value, got {pair!r}"
            raise ValueError(msg)
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    return params


def run_fit(args: argparse.Namespace) -> int:
    """Fit a calibrator on a CSV / Parquet file and save it as JSON."""
    from gpucal import make_calibrator
    from gpucal._files import read_table

    features = _columns(args.feature_cols)
    needed = [args.score_col, args.label_col, *features] + ([args.weight_col] if args.weight_col else [])
    _log(f"reading {args.data} ...")
    frame = read_table(args.data, columns=needed)
    params = {"score_col": args.score_col, **_method_params(args.param)}
    # Only passed when asked for, so calibrators without the parameter (beta reads probabilities only)
    # still fit with the defaults; make_calibrator names any parameter a method lacks.
    if args.score_kind != "probability":
        params["score_kind"] = args.score_kind
    if features:
        params["feature_cols"] = features
    calibrator = make_calibrator(args.method, **params)
    _log(f"fitting {type(calibrator).__name__} on {len(frame):,} rows ...")
    started = time.perf_counter()
    X = frame[[args.score_col, *features]]
    weights = frame[args.weight_col] if args.weight_col else None
    calibrator.fit(X, frame[args.label_col], sample_weight=weights)
    calibrator.save(args.model)
    _log(f"fitted in {time.perf_counter() - started:.2f} s; model written to {args.model}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    """Apply a saved calibrator to a CSV / Parquet file and write the calibrated scores."""
    from gpucal._files import read_table, write_table
    from gpucal.persistence import load

    calibrator = load(args.model)
    _log(f"reading {args.data} ...")
    frame = read_table(args.data)
    _log(f"predicting {len(frame):,} rows with {type(calibrator).__name__} ...")
    frame[args.output_col] = calibrator.predict(frame)
    write_table(frame, args.output)
    _log(f"written to {args.output}")
    return 0


def run_rules(args: argparse.Namespace) -> int:
    """Print a saved tree model's rules as text, JSON or a SQL expression (MBCT)."""
    from gpucal.persistence import load

    model = load(args.model)
    if not hasattr(model, "export_rules"):
        name = type(model).__name__
        msg = f"{name} has no rules to export; rules come from tree models such as MBCT and HC"
        raise TypeError(msg)
    options = {"table": args.table} if args.table else {}
    print(model.export_rules(format=args.format, **options))
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """Print (and optionally save) the metrics table of prediction columns of a CSV / Parquet file."""
    from gpucal._files import read_table
    from gpucal.evaluation import evaluate

    predictions = _columns(args.pred_cols)
    if not predictions:
        msg = "--pred-cols names no column"
        raise ValueError(msg)
    fields = _columns(args.field_cols)
    optional = [c for c in (args.weight_col, args.true_col) if c]
    frame = read_table(args.data, columns=[args.label_col, *predictions, *fields, *optional])
    weights = frame[args.weight_col].to_numpy() if args.weight_col else None
    _log(f"evaluating {len(predictions)} prediction column(s) on {len(frame):,} rows ...")
    table = evaluate(
        frame[args.label_col].to_numpy(),
        {c: frame[c].to_numpy() for c in predictions},
        sample_weight=weights,
        fields={c: frame[c].to_numpy() for c in fields},
        p_true=frame[args.true_col].to_numpy() if args.true_col else None,
        seed=args.seed,
    )
    with pd.option_context("display.float_format", "{:.5f}".format, "display.width", 120):
        print(table.to_string())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"rows": len(frame), "metrics": table.to_dict()}, handle, indent=2)
        _log(f"metrics written to {args.json}")
    if args.plot:
        from gpucal.plot import plot_reliability_to_png

        plot_reliability_to_png(
            args.plot,
            frame[args.label_col].to_numpy(),
            {c: frame[c].to_numpy() for c in predictions},
            sample_weight=weights,
            strategy=args.plot_strategy,
            seed=args.seed,
        )
        _log(f"reliability diagram written to {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``gpucal`` command."""
    parser = argparse.ArgumentParser(prog="gpucal", description="Calibrate model scores in dataframes.")
    parser.add_argument("--version", action="version", version=f"gpucal {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="every calibrator on the default synthetic data, held out")
    demo.add_argument("--rows", type=int, default=500_000, help="calibration rows, and as many held out")
    demo.add_argument("--scenario", default="mixed", help="make_ctr scenario (default 'mixed')")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data and of the MVCE views")
    demo.add_argument("--top", type=int, default=10, help="how many worst segments to print")
    demo.add_argument("--min-segment-rows", type=int, default=1000, help="smallest segment to report")
    demo.add_argument("--format", choices=("text", "json"), default="text")
    demo.set_defaults(handler=run_demo)

    fit = commands.add_parser("fit", help="fit a calibrator on a CSV or Parquet file, save it as JSON")
    fit.add_argument("data", help="CSV or Parquet file with the score and label columns")
    fit.add_argument("--method", required=True, help="calibrator name, e.g. isotonic, platt, beta, histogram")
    fit.add_argument("--model", required=True, help="where to write the fitted model (JSON)")
    fit.add_argument("--score-col", default="score")
    fit.add_argument("--score-kind", choices=("probability", "logit"), default="probability")
    fit.add_argument("--label-col", default="label")
    fit.add_argument("--weight-col", default=None)
    fit.add_argument(
        "--feature-cols", default=None, help="comma-separated feature columns (feature-aware methods)"
    )
    fit.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a method parameter")
    fit.set_defaults(handler=run_fit)

    predict = commands.add_parser("predict", aliases=["apply"], help="apply a saved model to a file")
    predict.add_argument("data", help="CSV or Parquet file with the model's score (and feature) columns")
    predict.add_argument("--model", required=True, help="a model written by gpucal fit")
    predict.add_argument(
        "--output", required=True, help="CSV or Parquet file to write (input columns + result)"
    )
    predict.add_argument("--output-col", default="calibrated", help="name of the calibrated column")
    predict.set_defaults(handler=run_predict)

    rules = commands.add_parser("rules", help="print a saved MBCT or HC model as if-then rules, JSON or SQL")
    rules.add_argument("--model", required=True, help="a model written by gpucal fit --method mbct or hc")
    rules.add_argument("--format", choices=("text", "json", "sql"), default="text")
    rules.add_argument("--table", default=None, help="SQL only: a full SELECT over this table")
    rules.set_defaults(handler=run_rules)

    evaluate = commands.add_parser("evaluate", help="metrics table of prediction columns of a file")
    evaluate.add_argument("data", help="CSV or Parquet file")
    evaluate.add_argument("--label-col", default="label")
    evaluate.add_argument(
        "--pred-cols", default="score", help="comma-separated probability columns to compare"
    )
    evaluate.add_argument("--weight-col", default=None)
    evaluate.add_argument(
        "--field-cols", default=None, help="comma-separated segment columns (Field-ECE/RCE)"
    )
    evaluate.add_argument("--true-col", default=None, help="true probability column (simulations: adds TCE)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the MVCE views")
    evaluate.add_argument("--json", default=None, help="also write the table as JSON here")
    evaluate.add_argument("--plot", default=None, help="also draw a reliability diagram into this PNG")
    evaluate.add_argument(
        "--plot-strategy",
        choices=("uniform", "quantile"),
        default="quantile",
        help="bins of the diagram: equal-mass (default; reads well for low base rates) or equal-width",
    )
    evaluate.set_defaults(handler=run_evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpucal`` console script."""
    args = build_parser().parse_args(argv)
    if getattr(args, "rows", 1) <= 0:
        msg = f"--rows must be a positive integer. Got {args.rows} instead."
        build_parser().error(msg)
    try:
        return int(args.handler(args))
    except (ValueError, TypeError, KeyError) as error:
        print(f"gpucal: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

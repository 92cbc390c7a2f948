"""The ``gpucal`` command line (also ``python -m gpucal``).

``gpucal demo`` generates the default synthetic CTR-like data (``gpucal.datasets.make_ctr``), fits
every one-dimensional calibrator and the feature-aware ones (MBCT, heterogeneous calibration,
feature-aware Platt) on a calibration split and prints the metrics of each on held-out rows beside the
raw score and the oracle (the true probability), plus the worst segments: the main job a fresh install
can run with no data of its own. ``fit``, ``predict`` and ``evaluate`` work on users' CSV and Parquet
files; ``warmup`` compiles every CPU kernel into numba's cache ahead of first use.

Exit status: 0 on success; 2 with one line ``gpucal: error: ...`` on stderr for a usage, file or data
problem (argparse's convention), always found before the data are read where the files allow it; 141
(128 + SIGPIPE, as coreutils report it) when the reader of stdout quits early, as ``| head`` does, with
no traceback.

Heavy libraries (pandas, numba, scikit-learn) are imported inside the commands, so ``gpucal --help``
stays quick.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gpucal._version import __version__

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Exit status after a usage, file or data error (argparse's ``parser.error`` uses 2 too).
USAGE_ERROR_EXIT = 2
#: Exit status when stdout's reader went away (``gpucal ... | head``): what a SIGPIPE death reports.
BROKEN_PIPE_EXIT = 141


def _log(message: str) -> None:
    """Progress goes to stderr so that stdout stays a clean table or JSON document."""
    print(message, file=sys.stderr, flush=True)


DEMO_CALIBRATORS = ("platt", "temperature", "beta", "histogram", "isotonic", "scaling_binning", "sir")
#: Calibrators that also read the scenario's fields (every field categorical).
DEMO_FEATURE_CALIBRATORS = ("feature_platt", "mbct", "hc", "auto")
#: Clustered calibration (CCL) over the leaves of the MBCT fitted just before: gpucal's own trees.
DEMO_CLUSTERED_CALIBRATORS = ("ccl",)
#: The neural calibrators (NeuCalib's eta alone; eta + field network): in the demo when torch is installed.
DEMO_NEURAL_CALIBRATORS = ("piecewise_logit",)
DEMO_NEURAL_FEATURE_CALIBRATORS = ("neucalib",)
#: Columns of the demo's text table; the JSON output holds every metric of ``gpucal.evaluate``.
DEMO_COLUMNS = ("log_loss", "brier", "roc_auc", "ece_15_uniform", "mvce_r100", "tce_l2")
#: Clusters of the demo's CCL, fewer when MBCT's leaves tell fewer kinds of rows apart.
DEMO_CCL_CLUSTERS = 20
#: Rows of the untimed warm-up fit of each calibrator, so ``fit_predict_s`` excludes JIT compilation.
DEMO_WARMUP_ROWS = 20_000
#: Fewest ``--rows``: at make_ctr's ~3% positive rate, fewer leave too few positives for every method.
DEMO_MIN_ROWS = 100

#: Method parameters that the ``fit`` command sets through options of their own, with those options.
PARAMETER_OPTIONS = {
    "score_col": "--score-col",
    "score_kind": "--score-kind",
    "feature_cols": "--feature-cols",
    "categorical_cols": "--categorical-cols",
    "verbose": "--verbose",
}


def _demo_ccl_clusters(mbct: Any, X: pd.DataFrame) -> int | None:
    """Return the demo's CCL cluster count for ``mbct``'s leaves of ``X``; None when CCL cannot run.

    CCL clusters the rows by the MBCT leaves they fall in, so it needs at least two distinct leaf
    paths; a small calibration split often grows no tree at all.
    """
    import numpy as np

    n_distinct = int(np.unique(mbct.leaves(X), axis=0).shape[0])
    return min(DEMO_CCL_CLUSTERS, n_distinct) if n_distinct >= 2 else None


def _demo_fit_predict(
    name: str, calibration: pd.DataFrame, held_out: pd.DataFrame, fields: list[str], fitted: dict[str, Any]
) -> np.ndarray | None:
    """Fit demo calibrator ``name`` on ``calibration``, return its held-out predictions.

    Feature-aware fits are stored in ``fitted`` (CCL embeds the MBCT found there). Returns None when
    CCL cannot run on these rows.
    """
    from gpucal import make_calibrator

    if name in DEMO_CALIBRATORS + DEMO_NEURAL_CALIBRATORS:
        model = make_calibrator(name).fit(calibration["score"], calibration["label"])
        return model.predict(held_out["score"].to_numpy())
    columns = ["score", *fields]
    if name in DEMO_CLUSTERED_CALIBRATORS:
        n_clusters = _demo_ccl_clusters(fitted["mbct"], calibration[columns])
        if n_clusters is None:
            return None
        model = make_calibrator(name, embedding_model=fitted["mbct"], n_clusters=n_clusters)
    else:
        model = make_calibrator(name, feature_cols=fields, categorical_cols=fields)
    model.fit(calibration[columns], calibration["label"])
    fitted[name] = model
    return model.predict(held_out[columns]).to_numpy()


def _demo_fit_all(
    names: Sequence[str],
    calibration: pd.DataFrame,
    held_out: pd.DataFrame,
    fields: list[str],
    *,
    log: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Fit the demo calibrators ``names`` in order; return their held-out predictions and seconds.

    A calibrator that cannot be fitted on these rows ends the demo with an error that names
    ``--rows``, the only size the user chose; CCL is skipped when MBCT has no leaves to cluster.
    """
    predictions: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    fitted: dict[str, Any] = {}
    for name in names:
        tick = time.perf_counter()
        try:
            predicted = _demo_fit_predict(name, calibration, held_out, fields, fitted)
        except ValueError as error:
            msg = f"--rows {len(calibration)}: {name} cannot be fitted on this few rows: {error}"
            raise ValueError(msg) from error
        if predicted is None:
            if log:
                _log(f"  {name:<16} skipped: MBCT grew fewer than two leaves to cluster")
            continue
        predictions[name] = predicted
        seconds[name] = time.perf_counter() - tick
        if log:
            _log(f"  {name:<16} fit + predict {seconds[name]:.2f} s")
    return predictions, seconds


def run_demo(args: argparse.Namespace) -> int:
    """Fit every calibrator on a calibration split of ``make_ctr`` data; compare them on held-out rows.

    Each calibrator is first fitted, untimed, on the first ``DEMO_WARMUP_ROWS`` rows, so that the
    ``fit_predict_s`` column reports warm speed rather than numba's one-off compilation.
    """
    import pandas as pd

    from gpucal import datasets, metrics
    from gpucal.evaluation import evaluate
    from gpucal.neural import torch_available

    if args.rows < DEMO_MIN_ROWS:
        msg = (
            f"--rows must be at least {DEMO_MIN_ROWS}: make_ctr's positive rate is about 3%, and fewer rows "
            f"leave too few positives to fit and compare every calibrator. Got {args.rows} instead."
        )
        raise ValueError(msg)
    neural = torch_available()  # the neural extra: fitting needs PyTorch
    one_dim = DEMO_CALIBRATORS + DEMO_NEURAL_CALIBRATORS * neural
    names = one_dim + DEMO_FEATURE_CALIBRATORS + DEMO_NEURAL_FEATURE_CALIBRATORS * neural
    names += DEMO_CLUSTERED_CALIBRATORS

    started = time.perf_counter()
    _log(f"generating 2 x make_ctr(n_rows={args.rows}, scenario={args.scenario!r}, seed={args.seed}) ...")
    calibration = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed)
    held_out = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed, row_offset=args.rows)
    fields = list(datasets.ctr_scenario(args.scenario)["fields"])
    _log(f"  {args.rows:,} + {args.rows:,} rows, positive rate {calibration['label'].mean():.4f}")
    for split, frame in (("calibration", calibration), ("held-out", held_out)):
        if frame["label"].nunique() < 2:
            msg = f"--rows {args.rows}: the {split} rows hold only one label; ask for more rows"
            raise ValueError(msg)
    warmup_rows = min(args.rows, DEMO_WARMUP_ROWS)
    _log(f"warming up: each calibrator fitted once on {warmup_rows:,} rows, untimed (JIT compilation) ...")
    _log("  (kernels compile on first use only; `gpucal warmup` compiles them all ahead)")
    _demo_fit_all(names, calibration.head(warmup_rows), held_out.head(warmup_rows), fields)
    predictions, fit_seconds = _demo_fit_all(names, calibration, held_out, fields, log=True)
    predictions = {"raw score": held_out["score"].to_numpy(), **predictions}
    fit_seconds["raw score"] = 0.0
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
            "warmup_rows": warmup_rows,
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
            f"{args.rows:,} rows and evaluated on {args.rows:,} held-out rows (lower is better but roc_auc);"
        )
        print(f"fit_predict_s is warm: each calibrator was first fitted on {warmup_rows:,} rows, untimed,")
        print("so numba's one-off JIT compilation is not counted\n")
        print(shown.to_string())
        print(
            f"\nWorst {args.top} segments of the best calibrator by log-loss "
            f"({best}), rows >= {args.min_segment_rows}:"
        )
        print(report.head(args.top).to_string(index=False))
        print("\nOne-dimensional maps cannot fix errors that live in segments (see worst_field_ece);")
        feature_names = [n for n in names if n in predictions and n not in one_dim]
        print(f"the feature-aware calibrators ({', '.join(feature_names)}) read the fields and can.")
    _log(f"done in {elapsed:.1f} s")
    return 0


def _columns(text: str | None) -> list[str]:
    """Split a comma-separated column list, dropping blanks."""
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


def _check_input_file(argument: str, path: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Raise ``ValueError`` unless ``path`` is an existing file (ending in one of ``suffixes``)."""
    target = Path(path)
    if suffixes is not None and target.suffix.lower() not in suffixes:
        msg = f"{argument}: {path!r} must end in one of {suffixes}"
    elif not target.exists():
        msg = f"{argument}: no such file {path!r}"
    elif not target.is_file():
        msg = f"{argument}: {path!r} is a directory, not a file"
    else:
        return
    raise ValueError(msg)


def _check_output_file(argument: str, path: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Raise ``ValueError`` unless ``path`` can be written: its folder exists, it is no folder itself."""
    target = Path(path)
    folder = target.parent
    if suffixes is not None and target.suffix.lower() not in suffixes:
        msg = f"{argument}: {path!r} must end in one of {suffixes}"
    elif target.is_dir():
        msg = f"{argument}: {path!r} is a directory; give a file name"
    elif not folder.is_dir():
        msg = f"{argument}: the folder {os.fspath(folder)!r} of {path!r} does not exist"
    else:
        return
    raise ValueError(msg)


def _calibrator_class(method: str) -> type:
    """Return the registered calibrator class of ``method``; ``ValueError`` lists the names."""
    from gpucal.calibrators import CALIBRATORS

    if method not in CALIBRATORS:
        msg = f"--method {method}: no such calibrator; choose one of {', '.join(sorted(CALIBRATORS))}"
        raise ValueError(msg)
    return CALIBRATORS[method]


def _method_list() -> str:
    """Return the registered calibrators, one line each, aliases beside the name they stand for."""
    from gpucal.calibrators import CALIBRATORS

    names_of: dict[type, list[str]] = {}
    for name, cls in CALIBRATORS.items():
        names_of.setdefault(cls, []).append(name)
    lines = []
    for cls, names in names_of.items():
        alias = f" (alias {', '.join(names[1:])})" if len(names) > 1 else ""
        lines.append(f"  {names[0]}{alias}: {cls.__name__}")
    return "\n".join(lines)


def _fit_params(args: argparse.Namespace, parameters: set[str]) -> dict[str, Any]:
    """Return the constructor parameters of ``args.method`` (whose parameters are ``parameters``).

    Options the method lacks are refused, named as typed; ``--verbose`` only reaches methods with a
    ``verbose`` parameter. A feature-aware method given no ``--feature-cols`` reads every column but
    the score, label and weight columns, as ``feature_cols=None`` does in Python; the list is resolved
    here and logged, so the saved model names its features.
    """
    from gpucal._files import table_columns

    chosen: dict[str, tuple[str, Any]] = {}  # parameter -> (option as typed, value)
    if args.score_col != "score":
        chosen["score_col"] = (f"--score-col {args.score_col}", args.score_col)
    if args.score_kind != "probability":
        chosen["score_kind"] = (f"--score-kind {args.score_kind}", args.score_kind)
    if args.feature_cols is not None:
        chosen["feature_cols"] = (f"--feature-cols {args.feature_cols}", _columns(args.feature_cols))
    if args.categorical_cols is not None:
        chosen["categorical_cols"] = (
            f"--categorical-cols {args.categorical_cols}",
            _columns(args.categorical_cols),
        )
    for name, (typed, _) in chosen.items():
        if name not in parameters:
            msg = f"{typed}: --method {args.method} takes no {PARAMETER_OPTIONS[name]}"
            raise ValueError(msg)
    params = _method_params(args.param)
    both = sorted(set(chosen) & set(params))
    if both:
        msg = f"--param {both[0]}=... and {PARAMETER_OPTIONS[both[0]]} are mutually exclusive; give one"
        raise ValueError(msg)
    params |= {name: value for name, (_, value) in chosen.items()}
    if "score_col" in parameters:
        params.setdefault("score_col", args.score_col)
    if args.verbose and "verbose" in parameters:
        params["verbose"] = args.verbose
    if "feature_cols" in parameters and params.get("feature_cols") is None:
        skipped = {args.score_col, args.label_col, args.weight_col}
        params["feature_cols"] = [c for c in table_columns(args.data) if c not in skipped]
        _log(f"no --feature-cols: every other column is a feature: {', '.join(params['feature_cols'])}")
    return params


def run_fit(args: argparse.Namespace) -> int:
    """Fit a calibrator on a CSV / Parquet file and save it as JSON."""
    from gpucal import make_calibrator
    from gpucal._files import TABLE_SUFFIXES, read_table

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    _check_output_file("--model", args.model)
    cls = _calibrator_class(args.method)
    params = _fit_params(args, set(inspect.signature(cls).parameters))
    calibrator = make_calibrator(args.method, **params)
    features = list(params.get("feature_cols") or [])
    needed = [args.score_col, args.label_col, *features] + ([args.weight_col] if args.weight_col else [])
    _log(f"reading {args.data} ...")
    frame = read_table(args.data, columns=needed)
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
    from gpucal._files import TABLE_SUFFIXES, read_table, table_columns, write_table
    from gpucal.persistence import load

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    _check_input_file("--model", args.model)
    _check_output_file("--output", args.output, TABLE_SUFFIXES)
    if not args.overwrite and args.output_col in table_columns(args.data):
        msg = (
            f"--output-col {args.output_col}: {args.data!r} already has that column; "
            "name another or pass --overwrite to replace it"
        )
        raise ValueError(msg)
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

    _check_input_file("--model", args.model)
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
    import pandas as pd

    from gpucal._files import TABLE_SUFFIXES, read_table
    from gpucal.evaluation import evaluate

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    if args.json:
        _check_output_file("--json", args.json)
    if args.plot:
        _check_output_file("--plot", args.plot, (".png",))
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


def run_warmup(args: argparse.Namespace) -> int:
    """Compile every CPU kernel into numba's on-disk cache, so later runs start warm."""
    from gpucal.warmup import warm_up

    seconds = warm_up(verbose=args.verbose > 0)
    print(f"gpucal {__version__}: every CPU kernel compiled into the cache in {seconds:.1f} s")
    return 0


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Append ``(default: ...)`` to every option's help, except required options and None defaults.

    An option whose default is None says in its help what leaving it out means.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None or action.default == []:
            return action.help
        return super()._get_help_string(action)


class _CommandParser(argparse.ArgumentParser):
    """A command's parser; with ``lists_methods`` its help ends with the registered calibrators.

    The registry is read when the help is printed, so building the parser imports no calibrator.
    """

    lists_methods = False

    def format_help(self) -> str:
        """Return the help text, followed by the registered calibrators when ``lists_methods``."""
        text = super().format_help()
        return f"{text}\nmethods:\n{_method_list()}\n" if self.lists_methods else text


def _positive_int(text: str) -> int:
    """Parse a positive integer option value (argparse reports the ``ValueError``)."""
    value = int(text)
    if value <= 0:
        msg = f"must be a positive integer, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``gpucal`` command."""
    parser = argparse.ArgumentParser(
        prog="gpucal", description="Calibrate model scores in dataframes.", formatter_class=_HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"gpucal {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser
    )

    def add_command(name: str, summary: str, **options: Any) -> _CommandParser:
        # add_subparsers(parser_class=_CommandParser) makes every command's parser one.
        command = commands.add_parser(
            name, help=summary, description=summary, formatter_class=_HelpFormatter, **options
        )
        return cast(_CommandParser, command)

    demo = add_command("demo", "every calibrator on the default synthetic data, held out")
    demo.add_argument(
        "--rows",
        type=_positive_int,
        default=500_000,
        help=f"calibration rows, and as many held out; at least {DEMO_MIN_ROWS}",
    )
    demo.add_argument("--scenario", default="mixed", help="make_ctr scenario")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data and of the MVCE views")
    demo.add_argument("--top", type=int, default=10, help="how many worst segments to print")
    demo.add_argument("--min-segment-rows", type=int, default=1000, help="smallest segment to report")
    demo.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    demo.set_defaults(handler=run_demo)

    fit = add_command(
        "fit",
        "fit a calibrator on a CSV or Parquet file, save it as JSON (fit --help lists the methods)",
    )
    fit.lists_methods = True
    fit.add_argument("data", help="CSV or Parquet file with the score and label columns")
    fit.add_argument("--method", required=True, help="calibrator name, one of the methods listed below")
    fit.add_argument("--model", required=True, help="where to write the fitted model (JSON)")
    fit.add_argument("--score-col", default="score", help="column of the model score")
    fit.add_argument(
        "--score-kind",
        choices=("probability", "logit"),
        default="probability",
        help="what the score is: a probability in [0, 1] or a logit / margin",
    )
    fit.add_argument("--label-col", default="label", help="column of the 0/1 label")
    fit.add_argument("--weight-col", default=None, help="column of sample weights (default: unweighted)")
    fit.add_argument(
        "--feature-cols",
        default=None,
        help="comma-separated feature columns of feature-aware methods (mbct, hc, feature_platt, "
        "neucalib, ...; default: every column but the score, label and weight columns)",
    )
    fit.add_argument(
        "--categorical-cols",
        default=None,
        help="comma-separated feature columns to treat as categories (default: the method's own choice)",
    )
    fit.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a constructor parameter of the method, VALUE read as JSON when it parses; repeatable "
        "(default: none)",
    )
    fit.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="progress of the fit, -vv for more; passed to the methods with a verbose parameter (mbct, hc)",
    )
    fit.set_defaults(handler=run_fit)

    predict = add_command("predict", "apply a saved model to a file", aliases=["apply"])
    predict.add_argument("data", help="CSV or Parquet file with the model's score (and feature) columns")
    predict.add_argument("--model", required=True, help="a model written by gpucal fit")
    predict.add_argument(
        "--output", required=True, help="CSV or Parquet file to write (input columns + result)"
    )
    predict.add_argument("--output-col", default="calibrated", help="name of the calibrated column")
    predict.add_argument(
        "--overwrite",
        action="store_true",
        help="let --output-col replace an input column of the same name (refused otherwise)",
    )
    predict.set_defaults(handler=run_predict)

    rules = add_command("rules", "print a saved MBCT or HC model as if-then rules, JSON or SQL")
    rules.add_argument("--model", required=True, help="a model written by gpucal fit --method mbct or hc")
    rules.add_argument("--format", choices=("text", "json", "sql"), default="text", help="output format")
    rules.add_argument(
        "--table", default=None, help="SQL only: a full SELECT over this table (default: the expression)"
    )
    rules.set_defaults(handler=run_rules)

    evaluate = add_command("evaluate", "metrics table of prediction columns of a file")
    evaluate.add_argument("data", help="CSV or Parquet file")
    evaluate.add_argument("--label-col", default="label", help="column of the 0/1 label")
    evaluate.add_argument(
        "--pred-cols", default="score", help="comma-separated probability columns to compare"
    )
    evaluate.add_argument("--weight-col", default=None, help="column of sample weights (default: unweighted)")
    evaluate.add_argument(
        "--field-cols", default=None, help="comma-separated segment columns for Field-ECE/RCE (default: none)"
    )
    evaluate.add_argument(
        "--true-col", default=None, help="true probability column, in simulations: adds TCE (default: none)"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the MVCE views")
    evaluate.add_argument("--json", default=None, help="also write the table as JSON here (default: no file)")
    evaluate.add_argument(
        "--plot", default=None, help="also draw a reliability diagram into this .png file (default: no plot)"
    )
    evaluate.add_argument(
        "--plot-strategy",
        choices=("uniform", "quantile"),
        default="quantile",
        help="bins of the diagram: quantile, equal mass (reads well at low base rates); uniform, equal width",
    )
    evaluate.set_defaults(handler=run_evaluate)

    warmup = add_command("warmup", "compile every CPU kernel into the cache, so first use is fast")
    warmup.add_argument("-v", "--verbose", action="count", default=0, help="name each kernel as it compiles")
    warmup.set_defaults(handler=run_warmup)
    return parser


#: ``name='value'`` or ``name=value`` in a library message, for the names the CLI sets by option.
_PYTHON_ASSIGNMENT = re.compile(
    r"\b(" + "|".join(PARAMETER_OPTIONS) + r")=(?:'([^']*)'|\"([^\"]*)\"|([^\s,;)]+))"
)


def _as_cli(message: str) -> str:
    """Spell the library's ``score_kind='logit'`` as the option a shell user types: ``--score-kind logit``."""

    def option(match: re.Match[str]) -> str:
        value = next(group for group in match.groups()[1:] if group is not None)
        return f"{PARAMETER_OPTIONS[match.group(1)]} {value}"

    return _PYTHON_ASSIGNMENT.sub(option, message)


def _error_line(error: Exception) -> str:
    """Return the one-line message of an error that ends a command."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{os.fsdecode(error.filename)!r}: " if error.filename is not None else ""
        return f"{where}{error.strerror}"
    return " ".join(_as_cli(str(error)).split())


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command; errors become one ``gpucal: error:`` line and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as error:
        print(f"gpucal: error: {_error_line(error)}", file=sys.stderr)
        return USAGE_ERROR_EXIT


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpucal`` console script and of ``python -m gpucal``.

    When stdout's reader quits early (``gpucal ... | head``), stdout is pointed at the null device so
    that nothing is written or reported on the way out, and the exit status is ``BROKEN_PIPE_EXIT``.
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    raise SystemExit(main())

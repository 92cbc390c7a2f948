"""``gpucal fit``, ``predict``, ``rules`` and ``evaluate``: the commands over the user's files.

Each checks its paths (a missing file, a folder where a file is expected, a wrong suffix) and the
columns its options name (from the file's header or Parquet schema) before it imports the libraries a
fit needs or reads any data, so a mistake is one error line within a fraction of a second, not a
traceback after minutes of reading.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpucal.cli.progress import log_progress

#: Method parameters that the ``fit`` command sets through options of their own, with those options.
PARAMETER_OPTIONS = {
    "score_col": "--score-col",
    "score_kind": "--score-kind",
    "feature_cols": "--feature-cols",
    "categorical_cols": "--categorical-cols",
    "verbose": "--verbose",
}
#: The parameters naming the columns the command reads: given only through their options
#: (``PARAMETER_OPTIONS``).
COLUMN_PARAMETERS = ("score_col", "feature_cols")


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


def _check_matplotlib() -> None:
    """Refuse ``--plot`` before any work when matplotlib is not installed, saying what to install."""
    if importlib.util.find_spec("matplotlib") is None:
        msg = (
            "--plot: the reliability diagram needs matplotlib, not installed: pip install 'gpucal[plot]' "
            "(or pip install matplotlib), or leave --plot out"
        )
        raise ValueError(msg)


def _check_output_file(
    argument: str, path: str, suffixes: tuple[str, ...] | None = None, inputs: tuple[str, ...] = ()
) -> None:
    """Raise ``ValueError`` unless ``path`` can be written: its folder exists, it is no folder itself,
    and it is none of the command's ``inputs`` (however spelt: the input would be replaced)."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        msg = f"{argument}: {path!r} is a directory; give a file name"
    elif suffixes is not None and target.suffix.lower() not in suffixes:
        msg = f"{argument}: {path!r} must end in one of {suffixes}"
    elif not folder.is_dir():
        msg = f"{argument}: the folder {os.fspath(folder)!r} of {path!r} does not exist"
    elif target.exists() and any(Path(source).exists() and target.samefile(source) for source in inputs):
        msg = f"{argument}: {path!r} is an input of this command; writing it would replace the input"
    else:
        return
    raise ValueError(msg)


@contextlib.contextmanager
def _errors_named_by_option(options: dict[str, str]) -> Iterator[None]:
    """Re-raise a ``ValueError`` or ``TypeError`` whose message starts with an argument's name (``y_true:
    ...``, as the library names what it was given) with the option and column that gave it instead
    (``--label-col clicked: ...``): the user typed options, not Python arguments."""
    try:
        yield
    except (ValueError, TypeError) as error:
        message = str(error)
        for name, option in options.items():
            if message.startswith(f"{name}: "):
                msg = f"{option}: {message[len(name) + 2 :]}"
                raise type(error)(msg) from None
        raise


def _check_columns(path: str, options: dict[str, str | None]) -> None:
    """Raise ``ValueError`` for the first option naming a column ``path`` lacks; reads only the header.

    ``options`` maps each option, as typed, to its value (a column or a comma-separated list; None when
    not given).
    """
    from gpucal._files import table_columns

    available = table_columns(path)
    for option, value in options.items():
        missing = [c for c in _columns(value) if c not in available]
        if missing:
            msg = f"{option} {value}: column(s) {missing} not in {path!r}; its columns: {available}"
            raise ValueError(msg)


def _model_columns(path: str) -> list[str]:
    """Return the columns a saved model reads (its ``score_col`` and ``feature_cols``), from its JSON.

    Reads the file without building the model (nor importing the calibrators); a file that is no model
    gives ``[]`` here and its error from :func:`gpucal.loading.load`.
    """
    from gpucal.persistence import ModelFileError, read_document

    try:
        params = read_document(path).get("params")
    except (ModelFileError, AttributeError):
        return []
    if not isinstance(params, dict):
        return []
    columns: list[str] = []
    for name in ("score_col", "feature_cols"):
        value = params.get(name)
        named = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        columns += [c for c in named if isinstance(c, str) and c not in columns]
    return columns


def _calibrator_class(method: str) -> type:
    """Return the registered calibrator class of ``method``; ``ValueError`` lists the names."""
    from gpucal.factory import CALIBRATORS

    if method not in CALIBRATORS:
        msg = f"--method {method}: no such calibrator; choose one of {', '.join(sorted(CALIBRATORS))}"
        raise ValueError(msg)
    return CALIBRATORS[method]


def method_list() -> str:
    """Return every method of :mod:`gpucal.registry`, one line each, its aliases beside its name.

    A method without a score column (one probability column per class) is marked: the command reads
    one score column.
    """
    from gpucal.registry import complete, methods

    complete()
    lines = []
    for method in sorted({m.name: m for m in methods().values()}.values(), key=lambda m: m.name):
        alias = f" (alias {', '.join(method.aliases)})" if method.aliases else ""
        reads = "" if "score_col" in inspect.signature(method.cls).parameters else " (from Python only)"
        lines.append(f"  {method.name}{alias}: {method.cls.__name__}{reads}")
    return "\n".join(lines)


def _fit_params(args: argparse.Namespace, parameters: set[str]) -> dict[str, Any]:
    """Return the constructor parameters of ``args.method`` (whose parameters are ``parameters``).

    Options the method lacks are refused, named as typed; ``--verbose`` only reaches methods with a
    ``verbose`` parameter. A feature-aware method given no ``--feature-cols`` reads every column but
    the score, label and weight columns and ``p_true``; :func:`run_fit` then takes out a column holding
    the label's or the weights' values, as ``feature_cols=None`` does in Python
    (``gpucal.encoding.features``), and logs the list, so the saved model names its features.
    """
    from gpucal._files import table_columns
    from gpucal._frames import ORACLE_COLUMNS

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
    # The command reads the file's columns by these options: a --param of the same name would be
    # handed to the calibrator while the command read other columns.
    for name in COLUMN_PARAMETERS:
        if name in params and name not in chosen:
            option = PARAMETER_OPTIONS[name]
            msg = f"--param {name}: give it as {option}, by which the command reads the file"
            raise ValueError(msg)
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
        skipped = {args.score_col, args.label_col, args.weight_col, *ORACLE_COLUMNS}
        params["feature_cols"] = [c for c in table_columns(args.data) if c not in skipped]
        args.default_features = True
    return params


def _log_features(args: argparse.Namespace, calibrator: Any, X: Any, y: Any, weights: Any) -> list[str]:
    """Resolve defaulted features against the label's and weights' values; log how each is read.

    Returns the features the fit reads (``--feature-cols`` as given, or the default list without the
    columns that hold the label's or the weights' values).
    """
    from gpucal.encoding import FeatureEncoder, resolve_feature_cols
    from gpucal.rows import as_rows

    params = calibrator.get_params()
    features = list(params.get("feature_cols") or [])
    if getattr(args, "default_features", False):
        rows = as_rows(X=X, y=y, sample_weight=weights)
        features = list(
            resolve_feature_cols(rows, X, y, weights, score_col=args.score_col, feature_cols=None) or []
        )
        calibrator.set_params(feature_cols=features)
        log_progress(
            f"no --feature-cols: every column but the score, label and weights: {', '.join(features)}"
        )
    if features and "categorical_cols" in params:
        encoding = {"categorical_cols": params["categorical_cols"], "n_bins": params.get("n_bins", 32)}
        encoder = FeatureEncoder(**encoding).fit(X[features])
        log_progress(f"features {encoder.describe_columns()}")
    return features


def auto_choice(model: Any) -> str:
    """One line on a fitted ``AutoCalibrator``: what predicts, and its held-out gain over Platt scaling.

    The gain is ``platt_gain_``: the mean per-row ``scoring`` of the out-of-fold predictions below Platt
    scaling's, with its standard error, on the cross-fitted rows.
    """
    results, scoring = model.cv_results_, model.scoring
    members = [
        f"{candidate} {weight:.2f}"
        for candidate, weight in zip(results["candidate"], results["blend_weight"], strict=True)
        if weight > 0
    ]
    best = str(results["candidate"][model.best_index_])
    chosen = f"blend of {', '.join(members)}" if len(members) > 1 else best
    gain, error = model.platt_gain_["gain"], model.platt_gain_["se"]
    if gain is None:
        return f"auto chose {chosen} (no held-out {scoring} of Platt scaling to compare with)"
    measured = f"{gain:+.5f} per row (standard error {error:.5f}) on {model.cv_rows_:,} cross-fitted rows"
    if model.auc_guard_["applied"]:
        guard = model.auc_guard_
        return (
            f"auto chose {best}: the search's choice ranked the held-out rows worse than the raw score "
            f"(AUC within the folds {guard['auc']:.6f} against {guard['raw_auc']:.6f}, "
            f"{guard['raw_auc'] - guard['auc']:.1e} lower)"
        )
    if model.platt_gain_["applied"]:
        return f"auto chose {best}: the search's choice gained only {measured} in held-out {scoring}"
    return f"auto chose {chosen}: held-out {scoring} gain over Platt scaling {measured}"


def run_fit(args: argparse.Namespace) -> int:
    """Fit a calibrator on a CSV / Parquet file and save it as JSON."""
    from gpucal._files import TABLE_SUFFIXES, read_table

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    _check_output_file("--model", args.model, (".json",), inputs=(args.data,))
    _check_columns(
        args.data,
        {
            "--score-col": args.score_col,
            "--label-col": args.label_col,
            "--weight-col": args.weight_col,
            "--feature-cols": args.feature_cols,
            "--categorical-cols": args.categorical_cols,
        },
    )
    roles = {"--score-col": args.score_col, "--label-col": args.label_col, "--weight-col": args.weight_col}
    named = {option: column for option, column in roles.items() if column}
    for option, column in named.items():
        other = next((o for o, c in named.items() if c == column and o != option), None)
        if other is not None:
            msg = f"{option} {column}: the column is also {other}; each role needs a column of its own"
            raise ValueError(msg)
    cls = _calibrator_class(args.method)  # imports every calibrator: after the cheap checks
    signature = inspect.signature(cls).parameters
    if "score_col" not in signature:
        msg = (
            f"--method {args.method}: {cls.__name__} fits one probability column per class, and the "
            "command reads one score column; fit it from Python"
        )
        raise ValueError(msg)
    params = _fit_params(args, set(signature))
    required = [name for name, parameter in signature.items() if parameter.default is parameter.empty]
    missing = [name for name in required if name not in params]
    if missing:
        options = " ".join(f"--param {name}=VALUE" for name in missing)
        names = ", ".join(missing)
        msg = f"--method {args.method} needs {options}: {cls.__name__} has no default for {names}"
        raise ValueError(msg)
    from gpucal.factory import make_calibrator

    calibrator = make_calibrator(args.method, **params)
    features = list(params.get("feature_cols") or [])
    needed = [args.score_col, args.label_col, *features] + ([args.weight_col] if args.weight_col else [])
    log_progress(f"reading {args.data} ...")
    frame = read_table(args.data, columns=needed)
    weights = frame[args.weight_col] if args.weight_col else None
    features = _log_features(
        args, calibrator, frame[[args.score_col, *features]], frame[args.label_col], weights
    )
    log_progress(f"fitting {type(calibrator).__name__} on {len(frame):,} rows ...")
    started = time.perf_counter()
    named = {
        "y": f"--label-col {args.label_col}",
        "sample_weight": f"--weight-col {args.weight_col}",
        f"X[{args.score_col!r}]": f"--score-col {args.score_col}",
    }
    with _errors_named_by_option(named):
        calibrator.fit(frame[[args.score_col, *features]], frame[args.label_col], sample_weight=weights)
    if args.method == "auto":
        log_progress(auto_choice(calibrator))
    calibrator.save(args.model)
    log_progress(f"fitted in {time.perf_counter() - started:.2f} s; model written to {args.model}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    """Apply a saved calibrator to a CSV / Parquet file and write the calibrated scores."""
    from gpucal._files import TABLE_SUFFIXES, read_table, table_columns, write_table

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    _check_input_file("--model", args.model)
    _check_output_file("--output", args.output, TABLE_SUFFIXES, inputs=(args.data, args.model))
    available = table_columns(args.data)
    if not args.overwrite and args.output_col in available:
        msg = (
            f"--output-col {args.output_col}: {args.data!r} already has that column; "
            "name another or pass --overwrite to replace it"
        )
        raise ValueError(msg)
    missing = [c for c in _model_columns(args.model) if c not in available]
    if missing:
        msg = f"--model {args.model}: it reads column(s) {missing}, not in {args.data!r}"
        msg += f"; its columns: {available}"
        raise ValueError(msg)
    from gpucal.loading import load  # imports every calibrator: after the cheap checks

    calibrator = load(args.model)
    if "output_type" in calibrator.get_params():
        # The predictions go into a pandas frame on this machine, whatever family the model was saved for.
        calibrator.set_params(output_type="numpy")
    # The file is read on this machine's CPU: a model fitted with device="gpu" (or an automatic
    # calibrator's member) predicts here too.
    for model in (calibrator, *getattr(calibrator, "estimators_", [])):
        if "device" in model.get_params():
            model.set_params(device="auto")
    log_progress(f"reading {args.data} ...")
    frame = read_table(args.data)
    log_progress(f"predicting {len(frame):,} rows with {type(calibrator).__name__} ...")
    calibrated = calibrator.predict(frame)
    if _is_csv(args.data) and _is_csv(args.output):
        # CSV to CSV: the input's columns as the file spells them, not as pandas parsed them (a zip code
        # 02134 came back as 2134, the text "NA" as an empty cell, counts 3,,5 as 3.0,,5.0).
        frame = read_table(args.data, as_text=True)
    frame[args.output_col] = calibrated
    write_table(frame, args.output)
    log_progress(f"written to {args.output}")
    return 0


def _is_csv(path: str) -> bool:
    return Path(path).suffix.lower() == ".csv"


def run_rules(args: argparse.Namespace) -> int:
    """Print a saved tree model's rules as text, JSON or a SQL expression (MBCT)."""
    from gpucal.loading import load

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
    from gpucal._files import TABLE_SUFFIXES, read_table, report_json

    _check_input_file("data", args.data, TABLE_SUFFIXES)
    if args.json:
        _check_output_file("--json", args.json, (".json",), inputs=(args.data,))
    if args.plot:
        _check_output_file("--plot", args.plot, (".png",), inputs=(args.data,))
        _check_matplotlib()
    predictions = _columns(args.pred_cols)
    if not predictions:
        msg = "--pred-cols names no column"
        raise ValueError(msg)
    _check_columns(
        args.data,
        {
            "--label-col": args.label_col,
            "--pred-cols": args.pred_cols,
            "--weight-col": args.weight_col,
            "--field-cols": args.field_cols,
            "--true-col": args.true_col,
        },
    )
    import pandas as pd

    from gpucal.evaluation import evaluate

    fields = _columns(args.field_cols)
    optional = [c for c in (args.weight_col, args.true_col) if c]
    frame = read_table(args.data, columns=[args.label_col, *predictions, *fields, *optional])
    weights = frame[args.weight_col].to_numpy() if args.weight_col else None
    log_progress(f"evaluating {len(predictions)} prediction column(s) on {len(frame):,} rows ...")
    with _errors_named_by_option(
        {
            "y_true": f"--label-col {args.label_col}",
            "sample_weight": f"--weight-col {args.weight_col}",
            "p_true": f"--true-col {args.true_col}",
            **{f"predictions[{c!r}]": f"--pred-cols {c}" for c in predictions},
        }
    ):
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
            handle.write(report_json({"rows": len(frame), "metrics": table.to_dict()}))
        log_progress(f"metrics written to {args.json}")
    if args.plot:
        from gpucal.plot import plot_reliability_to_png

        plot_reliability_to_png(
            args.plot,
            frame[args.label_col].to_numpy(),
            {c: frame[c].to_numpy() for c in predictions},
            sample_weight=weights,
            n_bins=15,  # the bins of the table's ECE rows: the legend's ECE is its ece_15_<strategy>
            strategy=args.plot_strategy,
            seed=args.seed,
        )
        log_progress(f"reliability diagram written to {args.plot}")
    return 0

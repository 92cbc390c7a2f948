"""The argument parser of the ``gpucal`` command: its commands, their options and their help."""

from __future__ import annotations

import argparse
from typing import Any, cast

from gpucal._params import positive_int_option
from gpucal._version import __version__
from gpucal.cli.demo import DEMO_MIN_ROWS, DEMO_ROWS, DEMO_SCENARIO, DEMO_SEED, run_demo, run_warmup
from gpucal.cli.table_commands import method_list, run_evaluate, run_fit, run_predict, run_rules


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
        return f"{text}\nmethods:\n{method_list()}\n" if self.lists_methods else text


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

    demo = add_command("demo", "the main calibrators on the default synthetic data, held out")
    demo.add_argument(
        "--rows",
        type=positive_int_option,
        default=DEMO_ROWS,
        help=f"calibration rows, and as many held out; at least {DEMO_MIN_ROWS} (500000: the full-size run)",
    )
    demo.add_argument("--scenario", default=DEMO_SCENARIO, help="make_ctr scenario")
    demo.add_argument("--seed", type=int, default=DEMO_SEED, help="seed of the data and of the MVCE views")
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
        "neucalib, ...; default: every column but the score, label and weight columns, p_true, and a "
        "column holding the label's or the weights' values; naming the label is refused)",
    )
    fit.add_argument(
        "--categorical-cols",
        default=None,
        help="comma-separated numeric feature columns to read by value, every other number binned "
        "(default: an integer column with at most one distinct value per 20 rows, and 50,000 at most, "
        "is read by value, other numbers are cut into quantile bins; strings and booleans are always "
        "read by value; the fit logs which columns were read how)",
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
        help="progress of the fit, -vv for more; passed to the methods that log (mbct, hc, auto)",
    )
    fit.set_defaults(handler=run_fit)

    predict = add_command("predict", "apply a saved model to a file", aliases=["apply"])
    predict.add_argument("data", help="CSV or Parquet file with the model's score (and feature) columns")
    predict.add_argument("--model", required=True, help="a model written by gpucal fit")
    predict.add_argument(
        "--output",
        required=True,
        help="CSV or Parquet file to write (input columns + result; CSV to CSV keeps each input cell's text)",
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
        help="the diagram's 15 bins (the table's ECE bins: the legend's ECE is the table's "
        "ece_15_<strategy>): quantile, equal mass (reads well at low base rates); uniform, equal width",
    )
    evaluate.set_defaults(handler=run_evaluate)

    warmup = add_command("warmup", "compile every CPU kernel into the cache, so first use is fast")
    warmup.add_argument("-v", "--verbose", action="count", default=0, help="name each kernel as it compiles")
    warmup.set_defaults(handler=run_warmup)
    return parser

"""``gpucal demo`` and ``gpucal warmup``: the commands that need no data of the user's.

``demo`` generates the default synthetic CTR-like data (``gpucal.datasets.make_ctr``), fits every
one-dimensional calibrator and the feature-aware ones (MBCT, heterogeneous calibration, feature-aware
Platt, CCL, the automatic calibrator) on a calibration split and prints the metrics of each on held-out
rows beside the raw score and the oracle (the true probability), plus the worst segments: the main job a
fresh install can run with no data of its own. ``warmup`` compiles every CPU kernel into numba's cache
ahead of first use.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpucal._version import __version__
from gpucal.cli.progress import log_progress

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: The one-dimensional calibrators of the demo, fitted on the score alone.
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
    from gpucal.factory import make_calibrator

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
                log_progress(f"  {name:<16} skipped: MBCT grew fewer than two leaves to cluster")
            continue
        predictions[name] = predicted
        seconds[name] = time.perf_counter() - tick
        if log:
            log_progress(f"  {name:<16} fit + predict {seconds[name]:.2f} s")
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
    log_progress(
        f"generating 2 x make_ctr(n_rows={args.rows}, scenario={args.scenario!r}, seed={args.seed}) ..."
    )
    calibration = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed)
    held_out = datasets.make_ctr(args.rows, scenario=args.scenario, seed=args.seed, row_offset=args.rows)
    fields = list(datasets.ctr_scenario(args.scenario)["fields"])
    log_progress(f"  {args.rows:,} + {args.rows:,} rows, positive rate {calibration['label'].mean():.4f}")
    for split, frame in (("calibration", calibration), ("held-out", held_out)):
        if frame["label"].nunique() < 2:
            msg = f"--rows {args.rows}: the {split} rows hold only one label; ask for more rows"
            raise ValueError(msg)
    warmup_rows = min(args.rows, DEMO_WARMUP_ROWS)
    log_progress(
        f"warming up: each calibrator fitted once on {warmup_rows:,} rows, untimed (JIT compilation) ..."
    )
    log_progress("  (kernels compile on first use only; `gpucal warmup` compiles them all ahead)")
    _demo_fit_all(names, calibration.head(warmup_rows), held_out.head(warmup_rows), fields)
    predictions, fit_seconds = _demo_fit_all(names, calibration, held_out, fields, log=True)
    predictions = {"raw score": held_out["score"].to_numpy(), **predictions}
    fit_seconds["raw score"] = 0.0
    predictions["oracle p_true"] = held_out["p_true"].to_numpy()
    log_progress("computing metrics on the held-out rows ...")
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
    log_progress(f"done in {elapsed:.1f} s")
    return 0


def run_warmup(args: argparse.Namespace) -> int:
    """Compile every CPU kernel into numba's on-disk cache, so later runs start warm."""
    from gpucal.warmup import warm_up

    seconds = warm_up(verbose=args.verbose > 0)
    print(f"gpucal {__version__}: every CPU kernel compiled into the cache in {seconds:.1f} s")
    return 0

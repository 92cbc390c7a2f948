"""Calibrate a Parquet dataset on a local Dask cluster: ``python -m gpucal.distributed.batch``.

The multi-GPU recipe as one command. It starts :func:`~gpucal.distributed.local_cuda_cluster` (one
worker per GPU, cudf partitions) when a GPU is usable, else :func:`~gpucal.distributed.local_cluster`
(pandas partitions); reads the dataset (a Parquet file or a directory of them) on the workers; fits a
one-dimensional calibrator from partition sums; saves it as JSON (loadable by ``gpucal.load`` and by
``gpucal predict``); prints the metrics of the raw and the calibrated scores as JSON; and, when asked,
writes the calibrated scores as a Parquet dataset, one file per partition::

    python -m gpucal.distributed.batch /data/scores/ --method isotonic --model /data/model.json \\
        --label-col clicked --predictions /data/calibrated/

In the images of ``docker/`` this is ``docker run ... IMAGE python -m gpucal.distributed.batch ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from gpucal._files import report_json

#: Metrics printed for the raw and the calibrated score: (name, function name, keyword arguments).
SUMMARY_METRICS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("log_loss", "log_loss", {}),
    ("brier", "brier", {}),
    ("roc_auc", "roc_auc", {}),
    ("ece_15_uniform", "ece", {}),
    ("pcoc", "pcoc", {}),
)


def start_cluster(device: str = "auto", n_workers: int | None = None) -> tuple[Any, str]:
    """Start the cluster for ``device`` (``"auto"``, ``"cpu"`` or ``"gpu"``); return it and its backend."""
    from gpucal.distributed.cluster import gpu_count, local_cluster, local_cuda_cluster

    if device not in ("auto", "cpu", "gpu"):
        msg = f"The 'device' parameter must be one of ('auto', 'cpu', 'gpu'). Got {device!r} instead."
        raise ValueError(msg)
    use_gpu = device == "gpu" or (device == "auto" and gpu_count() > 0)
    if use_gpu:
        return local_cuda_cluster(n_workers), "cudf"
    return local_cluster(n_workers), "pandas"


def summary_metrics(y: Any, p: Any, w: Any = None) -> dict[str, float]:
    """The metrics of :data:`SUMMARY_METRICS` for labels ``y`` and probabilities ``p`` (dask or not)."""
    from gpucal import metrics

    return {
        name: getattr(metrics, function)(y, p, sample_weight=w, **options)
        for name, function, options in SUMMARY_METRICS
    }


def _write_partition(part: Any, path: str) -> int:
    part.to_parquet(path)
    return len(part)


def write_partitions(frame: Any, directory: str) -> int:
    """Write each partition of ``frame`` to ``directory/part.<i>.parquet`` (pandas or cudf); return rows.

    Each partition writes its own file with its own library's writer (no dask writer in between, whose
    pandas 3.1 path currently warns about a deprecated ``inplace``). The ``part.<i>.parquet`` files of
    an earlier run are removed first: a run of fewer partitions would leave the old rows beside the
    new ones, read back as one dataset. Other files in ``directory`` are left alone.
    """
    import os
    import re

    import dask

    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if re.fullmatch(r"part\.\d+\.parquet", name):
            os.remove(os.path.join(directory, name))
    tasks = [
        dask.delayed(_write_partition)(part, os.path.join(directory, f"part.{i}.parquet"))
        for i, part in enumerate(frame.to_delayed())
    ]
    return int(sum(dask.compute(*tasks)))


def run(
    data: str,
    *,
    method: str,
    model: str,
    score_col: str = "score",
    label_col: str = "label",
    weight_col: str | None = None,
    params: dict[str, Any] | None = None,
    predictions: str | None = None,
    output_col: str = "calibrated",
    device: str = "auto",
    n_workers: int | None = None,
) -> dict[str, Any]:
    """Fit ``method`` on the Parquet dataset ``data`` over a local cluster; return the summary.

    Parameters are those of ``gpucal fit`` (``params`` are the calibrator's), plus ``predictions``
    (a directory to write ``data`` with the calibrated ``output_col`` added), ``device`` and
    ``n_workers`` (GPUs or CPU workers; default all).
    """
    import dask.dataframe as dd
    import distributed

    from gpucal.distributed.cluster import dataframe_backend
    from gpucal.factory import make_calibrator

    cluster, backend = start_cluster(device, n_workers)
    with cluster, distributed.Client(cluster):
        with dataframe_backend(backend):
            frame = dd.read_parquet(data)
        missing = [c for c in (score_col, label_col, weight_col) if c is not None and c not in frame.columns]
        if missing:
            msg = f"{data}: column(s) {missing} not found; columns: {list(frame.columns)}"
            raise KeyError(msg)
        # Every fit step and every metric reads the rows again: keep them in the workers' memory.
        frame = frame.persist()
        weight = None if weight_col is None else frame[weight_col]
        calibrator = make_calibrator(method, score_col=score_col, **(params or {}))
        calibrator.fit(frame[[score_col]], frame[label_col], weight)
        calibrator.save(model)
        calibrated = calibrator.predict(frame[[score_col]])
        summary: dict[str, Any] = {
            "method": method,
            "backend": backend,
            "workers": len(cluster.workers),
            "partitions": frame.npartitions,
            "model": model,
        }
        if getattr(calibrator, "score_kind", "probability") == "probability":
            summary["raw"] = summary_metrics(frame[label_col], frame[score_col], weight)
        summary["calibrated"] = summary_metrics(frame[label_col], calibrated, weight)
        if predictions is not None:
            write_partitions(frame.assign(**{output_col: calibrated}), predictions)
            summary["predictions"] = predictions
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; prints the summary as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m gpucal.distributed.batch", description=__doc__.splitlines()[0]
    )
    parser.add_argument("data", help="Parquet file or directory of Parquet files")
    parser.add_argument("--method", required=True, help="histogram, isotonic, platt, beta or temperature")
    parser.add_argument("--model", required=True, help="where to write the fitted model (JSON)")
    parser.add_argument("--score-col", default="score")
    parser.add_argument("--label-col", default="label")
    parser.add_argument("--weight-col", default=None)
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a method parameter"
    )
    parser.add_argument("--predictions", default=None, help="directory for the calibrated dataset (Parquet)")
    parser.add_argument("--output-col", default="calibrated", help="name of the calibrated column")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--workers", type=int, default=None, help="GPUs (or CPU workers) to use; default all")
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    for pair in args.param:
        name, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"--param expects name=value, got {pair!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    summary = run(
        args.data,
        method=args.method,
        model=args.model,
        score_col=args.score_col,
        label_col=args.label_col,
        weight_col=args.weight_col,
        params=params,
        predictions=args.predictions,
        output_col=args.output_col,
        device=args.device,
        n_workers=args.workers,
    )
    sys.stdout.write(report_json(summary))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - the guard process workers need
    raise SystemExit(main())

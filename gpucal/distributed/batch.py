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

from gpucal._backend import DeviceUnavailableError, missing_extra
from gpucal._files import report_json
from gpucal._params import positive_int_option

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


#: Files of a Parquet dataset that :func:`write_partitions` replaces: its part files and the metadata
#: files dask writes beside them (read with a dataset, they name the old parts).
_DATASET_FILE = r"part\.\d+\.parquet|_metadata|_common_metadata"


def write_partitions(frame: Any, directory: str) -> int:
    """Write each partition of ``frame`` to ``directory/part.<i>.parquet`` (pandas or cudf); return rows.

    ``<i>`` is zero-padded to one width (five digits or more), so that a reader that sorts the files by
    name (``pandas.read_parquet``) reads the partitions in order. Each partition writes its own file
    with its own library's writer (no dask writer in between, whose pandas 3.1 path currently warns
    about a deprecated ``inplace``), into a new hidden folder beside ``directory``; only when every file is
    written do they replace the part files and dask's metadata files of an earlier run (a run of fewer
    partitions would leave the old rows beside the new ones, read back as one dataset), so a run that
    fails leaves the earlier dataset whole. Other files in ``directory`` are left alone.
    """
    import os
    import re
    import shutil
    import tempfile

    import dask

    os.makedirs(directory, exist_ok=True)
    parts = frame.to_delayed()
    width = max(5, len(str(len(parts) - 1)))
    # Beside the folder, not in it: dask and polars read a hidden folder inside a dataset as part of it,
    # and a job killed while writing (no finally runs) would leave its rows there to be read twice.
    target = os.path.abspath(directory)
    staging = tempfile.mkdtemp(
        prefix=f".{os.path.basename(target)}.gpucal-parts-", dir=os.path.dirname(target)
    )
    try:
        names = [f"part.{i:0{width}d}.parquet" for i in range(len(parts))]
        tasks = [
            dask.delayed(_write_partition)(part, os.path.join(staging, name))
            for part, name in zip(parts, names, strict=True)
        ]
        rows = int(sum(dask.compute(*tasks)))
        for name in os.listdir(directory):
            if re.fullmatch(_DATASET_FILE, name):
                os.remove(os.path.join(directory, name))
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def check_paths(data: str, model: str, predictions: str | None) -> None:
    """Raise ``ValueError`` unless ``data`` exists, ``model`` is a ``.json`` file in an existing folder
    and outside ``data`` and ``predictions``, and ``predictions`` neither is ``data`` nor holds it nor lies
    in it: the job would replace its own input (the model written over a Parquet file), or read its own
    output as input on a second run."""
    import os

    def overlap(a: str, b: str) -> bool:
        a, b = os.path.realpath(a), os.path.realpath(b)
        return os.path.commonpath([a, b]) in (a, b)

    if not os.path.exists(data):
        msg = f"data: no such file or directory {data!r}"
        raise ValueError(msg)
    folder = os.path.dirname(os.path.abspath(model))
    if not model.lower().endswith(".json") or not os.path.isdir(folder):
        msg = f"--model {model!r}: give a .json file in an existing folder"
        raise ValueError(msg)
    if overlap(model, data) or (predictions is not None and overlap(model, predictions)):
        msg = f"--model {model!r}: it is, or lies in, the input or the predictions; write it elsewhere"
        raise ValueError(msg)
    if predictions is not None and overlap(data, predictions):
        msg = (
            f"--predictions {predictions!r}: it is, holds or lies in the input {data!r}; write the "
            "calibrated dataset to a directory of its own"
        )
        raise ValueError(msg)


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
    try:
        import dask.dataframe as dd
        import distributed
    except ImportError as error:
        msg = "the batch job runs on dask: pip install 'gpucal[dask]'"
        raise ImportError(msg) from error

    from gpucal.distributed.cluster import dataframe_backend
    from gpucal.factory import make_calibrator

    check_paths(data, model, predictions)
    # The method and its parameters (names and values) are checked before a cluster starts (seconds).
    calibrator = make_calibrator(method, score_col=score_col, **(params or {}))
    calibrator._validate_params()
    cluster, backend = start_cluster(device, n_workers)
    with cluster, distributed.Client(cluster):
        with dataframe_backend(backend):
            frame = dd.read_parquet(data)
        missing = [c for c in (score_col, label_col, weight_col) if c is not None and c not in frame.columns]
        if missing:
            msg = f"{data}: column(s) {missing} not found; columns: {list(frame.columns)}"
            raise KeyError(msg)
        if predictions is not None and output_col in frame.columns:
            msg = f"--output-col {output_col}: {data!r} already has that column; name another"
            raise ValueError(msg)
        # Every fit step and every metric reads the rows again: keep them in the workers' memory.
        frame = frame.persist()
        weight = None if weight_col is None else frame[weight_col]
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
    parser.add_argument(
        "--method",
        required=True,
        help="a one-dimensional map that fits on dask: histogram, isotonic, centered_isotonic, platt, "
        "platt_hinge, beta, temperature, spline, bbq, enir or venn_abers",
    )
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
    parser.add_argument(
        "--workers", type=positive_int_option, default=None, help="GPUs (or CPU workers) to use; default all"
    )
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
    try:
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
    except (ValueError, TypeError, KeyError, OSError, ImportError, DeviceUnavailableError) as error:
        # A user's mistake (a method, column, parameter or path): one line, as the gpucal command does.
        if isinstance(error, ImportError) and not missing_extra(error):
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"{parser.prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
        return 2
    sys.stdout.write(report_json(summary))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - the guard process workers need
    raise SystemExit(main())

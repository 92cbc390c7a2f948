"""Compile gpucal's CPU kernels into numba's on-disk cache ahead of first use (``gpucal warmup``).

numba compiles a ``cache=True`` kernel the first time it is called with a new signature and stores
the machine code in the user cache directory (``gpucal.kernels.numba_cache``); later processes load it in
milliseconds. On a new machine that first compilation takes about a minute over all of gpucal, so
the first fit of a process looks slow. :func:`warm_up` pays it once, up front: in a Docker build, after
``pip install``, or before timing anything.

It takes the same code paths as real use rather than listing kernels and signatures by hand, so it
cannot drift from them: every calibrator of ``gpucal demo`` is fitted and applied, and every metric of
:func:`gpucal.evaluate` and the reliability curve is computed, on a few thousand ``make_ctr`` rows in
float64 and in float32 scores (the two score dtypes the kernels are compiled for), once with the row
kernels' serial twins and once with their parallel ones (:func:`gpucal.kernels.jit.parallel_rows`: inputs of
:data:`~gpucal.kernels.jit.PARALLEL_MIN_ROWS` rows or more run the parallel twin). The neural calibrators
run on PyTorch and compile nothing, so they are left out.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

#: Rows of the warm-up data: enough that every code path (several tree levels, every bin) runs.
WARM_UP_ROWS = 20_000
#: Score dtypes the kernels get compiled for.
WARM_UP_DTYPES = ("float64", "float32")
#: Calibrators fitted on the score alone, and those that also read the categorical fields.
ONE_DIM_CALIBRATORS = ("platt", "temperature", "beta", "histogram", "isotonic", "scaling_binning", "sir")
FEATURE_CALIBRATORS = ("feature_platt", "mbct", "hc")


def warm_up(*, verbose: bool = False) -> float:
    """Compile every CPU kernel gpucal uses into numba's cache; return the seconds it took.

    A second call, in this process or a later one with the same cache directory, loads instead of
    compiling and takes a few seconds at most.

    Parameters
    ----------
    verbose : bool, default False
        Write one progress line per step to stderr.

    Returns
    -------
    float
        Wall-clock seconds spent, compilation included.

    Examples
    --------
    >>> from gpucal.warmup import warm_up
    >>> seconds = warm_up()  # doctest: +SKIP
    """
    from gpucal import datasets
    from gpucal.kernels.jit import parallel_twins_only

    def say(message: str) -> None:
        if verbose:
            print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    scenario = "mixed"
    fields = list(datasets.ctr_scenario(scenario)["fields"])
    for dtype in WARM_UP_DTYPES:
        for twins, context in (("serial", contextlib.nullcontext()), ("parallel", parallel_twins_only())):
            tick = time.perf_counter()
            with context:
                _warm_pass(datasets.make_ctr(WARM_UP_ROWS, scenario, seed=0, dtype=dtype), fields)
            say(f"  {dtype} scores, {twins} kernels: {time.perf_counter() - tick:.1f} s")
    seconds = time.perf_counter() - started
    say(f"warm-up done in {seconds:.1f} s")
    return seconds


def _warm_pass(frame: Any, fields: list[str]) -> None:
    """Fit and apply every calibrator of the warm-up on ``frame`` (``make_ctr`` rows); compute the metrics."""
    from gpucal.evaluation import evaluate
    from gpucal.factory import make_calibrator
    from gpucal.metrics import segment_report
    from gpucal.plot import reliability_curve

    score, label = frame["score"], frame["label"]
    predictions = {"raw score": score.to_numpy()}
    for name in ONE_DIM_CALIBRATORS:
        predictions[name] = make_calibrator(name).fit(score, label).predict(score.to_numpy())
    rows = frame[["score", *fields]]
    mbct = None
    for name in FEATURE_CALIBRATORS:
        model = make_calibrator(name, feature_cols=fields, categorical_cols=fields).fit(rows, label)
        predictions[name] = model.predict(rows).to_numpy()
        mbct = model if name == "mbct" else mbct
    clustered = make_calibrator("ccl", embedding_model=mbct, n_clusters=4).fit(rows, label)
    predictions["ccl"] = clustered.predict(rows).to_numpy()
    y = label.to_numpy()
    evaluate(
        y,
        predictions,
        fields={name: frame[name].to_numpy() for name in fields},
        p_true=frame["p_true"].to_numpy(),
    )
    segment_report(y, predictions["mbct"], frame[fields])
    reliability_curve(y, predictions["isotonic"], n_bootstrap=8)

"""Compile gpucal's CPU kernels into numba's on-disk cache ahead of first use (``gpucal warmup``).

numba compiles a ``cache=True`` kernel the first time it is called with a new signature and stores
the machine code in the user cache directory (``gpucal.kernels.numba_cache``); later processes load it in
milliseconds. On a new machine that first compilation takes about a minute over all of gpucal, so
the first fit of a process looks slow. :func:`warm_up` pays it once, up front: in a Docker build, after
``pip install``, or before timing anything.

It takes the same code paths as real use rather than listing kernels and signatures by hand, so it
cannot drift from them: every calibrator of ``gpucal demo`` is fitted and applied, and every metric of
:func:`gpucal.evaluate` and the reliability curve is computed, on :data:`WARM_UP_ROWS` ``make_ctr`` rows in
float64 and in float32 scores (the two score dtypes the kernels are compiled for), once with the row
kernels' serial twins and once with their parallel ones (:func:`gpucal.kernels.jit.parallel_rows`: inputs of
:data:`~gpucal.kernels.jit.PARALLEL_MIN_ROWS` rows or more run the parallel twin). In the two float64
passes (serial and parallel twins) the automatic calibrator is also fitted, without weights and with
them, and applied, on :data:`WARM_UP_AUTO_ROWS` rows: a large set, the fewest rows that take its
large-data paths (the second-order feature-aware Platt candidates and their crosses, the compiled design
loop and score passes, two-byte category codes); the parallel pass reaches the parallel twins on those
rows, below ``PARALLEL_MIN_ROWS``; its kernels read float64 whatever the score's dtype, so float32 scores
would add nothing. The neural calibrators run on PyTorch and compile nothing, so they are left out.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

#: Rows of the warm-up data: enough that every code path (several tree levels, every bin) runs, the
#: logistic fits' compiled passes included (from ``gpucal.calibrators._logistic_kernels.NUMBA_MIN_ROWS``).
WARM_UP_ROWS = 1 << 15
#: Score dtypes the kernels get compiled for.
WARM_UP_DTYPES = ("float64", "float32")
#: Rows of the automatic calibrator's warm-up fits: the fewest that take every one of its large-data
#: paths. Above ``gpucal.auto.sizing.LARGE_ROWS`` (100,000) the set is large (rungs of 8,000, 32,000 and
#: every row; second-order feature-aware Platt with its crosses; folds and refits above
#: ``gpucal.calibrators._logistic_kernels.NUMBA_MIN_ROWS``, 32,768, run the compiled passes).
#: ``make_ctr``'s site_id has about 15,000 levels in these rows (two-byte codes). Below
#: ``PARALLEL_MIN_ROWS``: the parallel pass forces the twins.
WARM_UP_AUTO_ROWS = 100_001
#: The score dtype of the automatic calibrator's warm-up fits: its kernels read float64 whatever the
#: score's dtype, so fits on float32 scores would compile nothing more.
AUTO_DTYPE = "float64"
#: Calibrators fitted on the score alone, and those that also read the categorical fields.
ONE_DIM_CALIBRATORS = ("platt", "temperature", "beta", "histogram", "isotonic", "scaling_binning", "sir")
FEATURE_CALIBRATORS = ("feature_platt", "mbct", "hc")


def warm_up(*, verbose: bool = False, automatic: bool = True) -> float:
    """Compile every CPU kernel gpucal uses into numba's cache; return the seconds it took.

    A second call, in this process or a later one with the same cache directory, loads instead of
    compiling and takes a few seconds at most.

    Parameters
    ----------
    verbose : bool, default False
        Write one progress line per step to stderr, and one per kernel that numba compiles (a cache miss)
        in this process, with its argument types.
    automatic : bool, default True
        Also fit the automatic calibrator and each of its large-set candidates on
        ``WARM_UP_AUTO_ROWS`` rows: about half of the time. False compiles what the single calibrators,
        the metrics and the plots use.

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
    naming = _naming_kernels(say) if verbose else contextlib.nullcontext()
    with naming:
        for dtype in WARM_UP_DTYPES:
            for twins, context in (("serial", contextlib.nullcontext()), ("parallel", parallel_twins_only())):
                tick = time.perf_counter()
                with context:
                    _warm_pass(datasets.make_ctr(WARM_UP_ROWS, scenario, seed=0, dtype=dtype), fields)
                    if automatic and dtype == AUTO_DTYPE:
                        _warm_auto(datasets.make_ctr(WARM_UP_AUTO_ROWS, scenario, seed=0), fields)
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


def _warm_auto(frame: Any, fields: list[str]) -> None:
    """Fit the automatic calibrator on ``frame`` (``make_ctr`` rows of a large set) without weights and
    with them, and apply it; fit and apply each of its candidates on every row too.

    The search's rungs and folds do not depend on which candidates win; its refits on every row do (only
    the chosen ones and the blend's members are refitted), so every candidate of a large set is fitted
    on every row as a refit would be.
    """
    import numpy as np

    from gpucal.auto.candidates import column_params, default_candidates
    from gpucal.factory import make_calibrator

    rows, label = frame[["score", *fields]], frame["label"]
    weights = 1.0 + np.arange(len(frame), dtype=frame["score"].dtype) % 3
    columns = column_params("score", fields, fields, "probability")
    for sample_weight in (None, weights):
        model = make_calibrator("auto", feature_cols=fields, categorical_cols=fields)
        model.fit(rows, label, sample_weight=sample_weight).predict(rows)
        for candidate in default_candidates(columns, with_features=True, with_torch=False, large=True):
            candidate.estimator.fit(rows, label, sample_weight=sample_weight).predict(rows)


@contextlib.contextmanager
def _naming_kernels(say: Callable[[str], None]) -> Iterator[None]:
    """Pass ``say`` one line per kernel of gpucal's that numba compiles (a cache miss) in the block."""
    from numba.core import event

    from gpucal.kernels.numba_cache import ANNOUNCED_PACKAGE

    class NameKernel(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            kernel = getattr(ev.data.get("dispatcher"), "py_func", None)
            module = getattr(kernel, "__module__", "") or ""
            if kernel is not None and module.partition(".")[0] == ANNOUNCED_PACKAGE:
                types = ", ".join(str(arg) for arg in ev.data.get("args", ()))
                say(f"    compiling {module}.{kernel.__qualname__}({types})")

        def on_end(self, ev: event.Event) -> None:
            pass

    with event.install_listener("numba:compile", NameKernel()):
        yield

"""``gpucal demo`` and ``gpucal warmup``: the commands that need no data of the user's.

``demo`` generates the default synthetic CTR-like data (``gpucal.datasets.make_ctr``), fits every
one-dimensional calibrator and the feature-aware ones (MBCT, heterogeneous calibration, feature-aware
Platt, CCL, the automatic calibrator) on a calibration split and prints the metrics of each on held-out
rows beside the raw score and the oracle (the true probability), plus the worst segments: the main job a
fresh install can run with no data of its own. ``warmup`` compiles every CPU kernel into numba's cache
ahead of first use.

The first run on a machine compiles the kernels the demo calls (numba, cached afterwards). It does so
before anything is timed, in parallel processes that run the demo's own steps on its data (one lane
per core, at most ``DEMO_LANES``), so that the compilation takes the CPU time of the kernels divided
over the cores, not their sum. Timings are then warm: a fit during which numba still compiled
something (a code path the warm-up did not take) is fitted again and timed the second time. The
default ``--rows`` lies below ``gpucal.kernels.jit.PARALLEL_MIN_ROWS``, so the demo runs and compiles
the serial twins of the row kernels only, which compile three to four times faster than the parallel
ones; more rows compile the parallel twins during the timed fits, which are then fitted again. While
the timed fits run on one core, a second process computes the metrics of each prediction already made
on the other (``_MetricsBeside``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpucal._files import report_json
from gpucal._version import __version__
from gpucal.cli.progress import bar, heartbeat, log_progress

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
#: The metrics the text table needs (its columns and the Field-ECEs of ``worst_field_ece``): the others
#: of ``gpucal.evaluate`` (MCE, SKCE, the tests, ...) took two thirds of the metrics' CPU time on the
#: default rows and are computed for ``--format json`` only.
DEMO_TEXT_METRICS = (*DEMO_COLUMNS, "field_ece")
#: Clusters of the demo's CCL, fewer when MBCT's leaves tell fewer kinds of rows apart.
DEMO_CCL_CLUSTERS = 20
#: Default ``--rows``: enough for the feature-aware calibrators to beat the one-dimensional ones
#: clearly on held-out rows, and above the automatic calibrator's 100,000 rows, where its search runs
#: on a subsample (cross-fitting every candidate five times on 100,000 rows took 39 s of CPU); few
#: enough that a first run, compilation included, takes about a minute.
DEMO_ROWS = 150_000
#: The demo's default ``make_ctr`` scenario and seed (``gpucal warmup`` compiles for the same data).
DEMO_SCENARIO = "mixed"
DEMO_SEED = 0
#: Rows the warm-up lanes fit the feature-aware calibrators and compute the metrics on: their kernels
#: compile for the same dtypes and code paths on these as on the demo's rows (checked with numba's compile
#: events), and CCL's k-means and the metrics run a seventh of the time they would on 150,000 rows. The
#: one-dimensional maps fit on every row: the logistic fits' numba passes start at 32,768 rows
#: (``gpucal.calibrators._logistic_kernels.NUMBA_MIN_ROWS``) and cost little more. A path taken only on
#: more rows compiles during a timed fit, which is then repeated.
DEMO_WARMUP_ROWS = 20_000
#: Rows of the untimed fits that load the kernels and modules into the demo's own process.
DEMO_LOAD_ROWS = 5_000
#: Fewest ``--rows``: at make_ctr's ~3% positive rate, fewer leave too few positives for every method.
DEMO_MIN_ROWS = 100
#: Most warm-up processes: the demo's kernels split into two lanes of about equal compile time.
DEMO_LANES = 2
#: The warm-up's steps: a demo calibrator's name, or ``"metrics"`` (``evaluate`` and the segment
#: report). Each lane runs its steps in order in one process. Balanced by the CPU seconds of each step
#: with a fresh cache (serial kernel twins): MBCT (the encoder, group-sum and tree kernels) 28 s and CCL
#: 4 s in one lane; the other 1-D maps 20 s and the metrics 13 s in the other, then Platt, temperature
#: and beta, which reuse the logistic kernels the metrics compiled (in the first lane they took 3 s,
#: compiling them a second time), feature-aware Platt, and the automatic calibrator
#: (:data:`DEMO_AUTO_WARMUP_ROWS`). HC (7 s; it reuses MBCT's encoder and group-sum kernels) is in both
#: lanes: the lane that reaches it first runs it, the other skips it.
DEMO_WARMUP_LANES: tuple[tuple[str, ...], ...] = (
    ("mbct", "ccl", "hc"),
    (
        "histogram",
        "isotonic",
        "scaling_binning",
        "sir",
        "metrics",
        "platt",
        "temperature",
        "beta",
        "feature_platt",
        "hc",
        "auto",
    ),
)
#: Warm-up steps that start only once other lanes' steps have ended: they fit calibrators whose kernels
#: those compile. numba writes a kernel into the cache when its compilation ends, so a step started
#: earlier compiles the same kernels a second time beside the other lane (the automatic calibrator's
#: MBCT and HC candidates: 10 CPU s of both lanes' 63).
DEMO_WARMUP_AFTER: dict[str, tuple[str, ...]] = {"hc": ("mbct",), "auto": ("mbct", "hc")}
#: Rows the automatic calibrator's warm-up step fits on: its candidates' kernels are the other
#: calibrators' (compiled by their steps), save the tree kernels' variants for the int8 codes of its
#: smallest subsamples. Fitted on these rows in the demo's own process, it took 5.4 CPU seconds after
#: the warm-up and loaded nothing the timed fits before it (feature-aware Platt, MBCT, HC) do not load:
#: it is fitted in a lane only (:data:`DEMO_UNLOADED`).
DEMO_AUTO_WARMUP_ROWS = 5_000
#: Calibrators not fitted on :data:`DEMO_LOAD_ROWS` rows before the timed fits: the fits timed before
#: them load their kernels.
DEMO_UNLOADED = ("auto",)
#: The warm-up's steps on one core: every step, in one lane.
_ONE_LANE = (tuple(dict.fromkeys(step for lane in DEMO_WARMUP_LANES for step in lane)),)
#: Seconds without news from the warm-up lanes before the demo stops waiting for them (a lane that
#: died without a word); the timed pass then compiles what is left.
DEMO_LANE_TIMEOUT_S = 600.0
#: From this many held-out rows, with two cores or more, the metrics of each prediction are computed in
#: a second process while the next calibrator is fitted (``_MetricsBeside``): on 150,000 rows the metrics
#: of the 14 predictions took 17 s of one core after the fits' 19 s, while the other core idled. Below
#: it the second process's start (importing pandas, numba and scikit-learn, about 3 s) costs more than
#: it saves, and the metrics are computed after the fits, in this process.
DEMO_METRICS_BESIDE_ROWS = 50_000


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


@contextlib.contextmanager
def _counting_compilations() -> Iterator[list[int]]:
    """Count numba's compilations (cache misses) while the block runs: ``[count]`` when it ends."""
    from numba.core import event

    count = [0]

    class Counter(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            count[0] += 1

        def on_end(self, ev: event.Event) -> None:
            pass

    with event.install_listener("numba:compile", Counter()):
        yield count


def _demo_fit_all(
    names: Sequence[str],
    calibration: pd.DataFrame,
    held_out: pd.DataFrame,
    fields: list[str],
    predicted: Callable[[str, np.ndarray], None],
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Fit the demo calibrators ``names`` in order; return their held-out predictions and warm seconds.

    ``predicted(name, prediction)`` is called with each prediction as soon as it is made (the metrics
    start on it while the next calibrator is fitted). A fit during which numba compiled anything is
    fitted again, and the second fit is the one timed.
    A calibrator that cannot be fitted on these rows ends the demo with an error that names ``--rows``,
    the only size the user chose; CCL is skipped when MBCT has no leaves to cluster.
    """
    predictions: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    fitted: dict[str, Any] = {}
    current = [""]
    started = time.perf_counter()
    with heartbeat(lambda: f"  ... {current[0]} ({time.perf_counter() - started:.0f} s)"):
        for name in names:
            for attempt in ("fitting", "fitting again, warm,"):
                current[0] = f"{attempt} {name}"
                tick = time.perf_counter()
                try:
                    with _counting_compilations() as compiled:
                        prediction = _demo_fit_predict(name, calibration, held_out, fields, fitted)
                except ValueError as error:
                    msg = f"--rows {len(calibration)}: {name} cannot be fitted on this few rows: {error}"
                    raise ValueError(msg) from error
                seconds[name] = time.perf_counter() - tick
                if not compiled[0]:
                    break
            if prediction is None:
                log_progress(f"  {name:<16} skipped: MBCT grew fewer than two leaves to cluster")
                continue
            predictions[name] = prediction
            log_progress(f"  {name:<16} fit + predict {seconds[name]:6.2f} s")
            predicted(name, prediction)
    return predictions, seconds


def _load_kernels(
    names: Sequence[str],
    calibration: pd.DataFrame,
    held_out: pd.DataFrame,
    fields: list[str],
    fitted: dict[str, Any] | None = None,
) -> None:
    """Fit each of the demo's calibrators once on a few rows, untimed: this process imports its modules
    and loads its kernels from the cache before the timed fits (a first use costs that, compiled or
    not). ``fitted`` holds the fits of earlier loads (CCL embeds the MBCT found there)."""
    fitted = {} if fitted is None else fitted
    started = time.perf_counter()
    with heartbeat(lambda: f"  ... loading the compiled kernels ({time.perf_counter() - started:.0f} s)"):
        for name in names:
            _load_kernels_of(name, calibration, held_out, fields, fitted)


def _load_kernels_of(
    name: str, calibration: pd.DataFrame, held_out: pd.DataFrame, fields: list[str], fitted: dict[str, Any]
) -> None:
    """One calibrator of :func:`_load_kernels`, without the progress line."""
    with contextlib.suppress(ValueError):  # too few rows for it: the timed fit says so
        _demo_fit_predict(name, calibration, held_out, fields, fitted)


def _demo_metrics(
    held_out: pd.DataFrame,
    predictions: dict[str, np.ndarray],
    fields: list[str],
    seed: int,
    include: Sequence[str] | None,
) -> pd.DataFrame:
    """The metrics ``include`` of ``gpucal.evaluate`` (None: every one) for each prediction on the
    held-out rows (a column each)."""
    from gpucal.evaluation import evaluate

    return evaluate(
        held_out["label"].to_numpy(),
        predictions,
        fields={name: held_out[name].to_numpy() for name in fields},
        p_true=held_out["p_true"].to_numpy(),
        seed=seed,
        include=include,
    )


def _demo_segments(
    held_out: pd.DataFrame, prediction: np.ndarray, fields: list[str], min_rows: int
) -> pd.DataFrame:
    """The segment report of one prediction on the held-out rows, worst segment first."""
    from gpucal.metrics import segment_report

    return segment_report(held_out["label"].to_numpy(), prediction, held_out[fields], min_rows=min_rows)


#: The held-out rows, fields, seed and metrics (``include``) of the metrics process (``_MetricsBeside``),
#: set once at its start.
_METRICS_DATA: list[Any] = []


def _share_blas_threads(processes: int) -> Any:
    """Limit this process's BLAS to its share of the cores when ``processes`` run side by side.

    OpenBLAS starts a thread per core and its idle threads spin: beside a second busy process they take
    its core (CCL's k-means on 150,000 rows: 7.3 s on one thread, 8.3 s wall and 16 CPU s on two, alone).
    Returns the limiter: used with ``with``, the limit ends with the block; otherwise it holds for the
    process's life.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=max(1, (os.cpu_count() or 1) // processes), user_api="blas")


def _keep_metrics_data(
    held_out: pd.DataFrame, fields: list[str], seed: int, include: Sequence[str] | None
) -> None:
    """Keep the held-out rows in the metrics process, for every prediction it is sent."""
    logging.getLogger("gpucal").setLevel(logging.ERROR)  # the parent says that kernels compile
    _share_blas_threads(2)
    _METRICS_DATA[:] = [held_out, fields, seed, include]


#: The news queue and :class:`_LaneSync` of a warm-up lane run in the metrics process, set at its start.
_LANE_LINKS: list[Any] = []


def _start_metrics_lane(
    news: Any,
    sync: _LaneSync,
    held_out: pd.DataFrame,
    fields: list[str],
    seed: int,
    include: Sequence[str] | None,
) -> None:
    """Start the metrics process as a warm-up lane too: it compiles and loads the metrics' kernels in
    the warm-up, and keeps them (and its imports) for the metrics of the timed fits."""
    _LANE_LINKS[:] = [news, sync]
    _keep_metrics_data(held_out, fields, seed, include)


def _metrics_of(name: str, prediction: np.ndarray) -> pd.DataFrame:
    """The metrics of one prediction on the held-out rows kept by :func:`_keep_metrics_data`."""
    held_out, fields, seed, include = _METRICS_DATA
    return _demo_metrics(held_out, {name: prediction}, fields, seed, include)


class _MetricsBeside:
    """The metrics of the demo's predictions, each started as soon as it is made.

    With ``beside``, in one second process (``spawn``; ``pool``, the warm-up lane that computed the
    metrics, when there was one), while this one fits the next calibrator: the fits run on one core,
    the metrics on the other; once the fits have ended, :meth:`table` computes
    here those the second process has not started. Otherwise in this process, all at once by
    :meth:`table`. :func:`gpucal.evaluate` computes each prediction's column on its own, so the table is
    the same either way.
    """

    def __init__(
        self,
        held_out: pd.DataFrame,
        fields: list[str],
        seed: int,
        include: Sequence[str] | None,
        *,
        beside: bool,
        pool: ProcessPoolExecutor | None = None,
    ) -> None:
        self._held_out, self._fields, self._seed, self._include = held_out, fields, seed, include
        self._predictions: dict[str, np.ndarray] = {}
        self._columns: dict[str, Future[pd.DataFrame]] = {}
        self._pool = pool  # a warm-up lane's process, started by _start_metrics_lane
        if beside and pool is None:
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_keep_metrics_data,
                initargs=(held_out[["label", "p_true", *fields]], fields, seed, include),
            )

    def __call__(self, name: str, prediction: np.ndarray) -> None:
        """Start the metrics of ``prediction`` in the second process; without one, :meth:`table` does."""
        self._predictions[name] = prediction
        if self._pool is not None:
            self._columns[name] = self._pool.submit(_metrics_of, name, prediction)

    def table(self) -> pd.DataFrame:
        """Every metric (rows) of every prediction (columns, in the order they were given)."""
        import pandas as pd

        if self._pool is None:
            return _demo_metrics(self._held_out, self._predictions, self._fields, self._seed, self._include)
        # The columns the second process has not started are computed here meanwhile, the last first,
        # one at a time: both cores work until the table is full.
        here: dict[str, pd.DataFrame] = {}
        for name in reversed(self._predictions):
            if not self._columns[name].cancel():
                break  # started, and so is every column before it: the second process takes them in order
            prediction = {name: self._predictions[name]}
            here[name] = _demo_metrics(self._held_out, prediction, self._fields, self._seed, self._include)
        columns = [here[n] if n in here else self._columns[n].result() for n in self._predictions]
        return pd.concat(columns, axis=1)

    def close(self) -> None:
        """End the second process, if any (metrics not yet computed are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class _LaneSync(NamedTuple):
    """What the warm-up lanes share: per step, an event set when it has ended and one set when a lane
    has taken it, and the lock under which a lane takes a step."""

    ended: dict[str, Any]
    taken: dict[str, Any]
    lock: Any


def _take_step(step: str, sync: _LaneSync) -> bool:
    """Wait for the steps ``step`` runs after (:data:`DEMO_WARMUP_AFTER`); return whether this lane takes
    it (False: another lane has)."""
    for before in DEMO_WARMUP_AFTER.get(step, ()):
        if before in sync.ended:  # a step of this run: wait until its kernels are in the cache
            sync.ended[before].wait(DEMO_LANE_TIMEOUT_S)
    with sync.lock:
        if sync.taken[step].is_set():
            return False
        sync.taken[step].set()
        return True


def _warm_lane(
    lane: int,
    steps: tuple[str, ...],
    calibration: pd.DataFrame,
    held_out: pd.DataFrame,
    fields: list[str],
    seed: int,
    include: Sequence[str] | None,
    news: Any = None,
    sync: _LaneSync | None = None,
) -> None:
    """Run the demo's ``steps`` once, untimed, so that numba compiles their kernels into the cache.

    The one-dimensional maps fit on every row given, the automatic calibrator on the first
    ``DEMO_AUTO_WARMUP_ROWS``, the other steps on the first ``DEMO_WARMUP_ROWS``. A step another lane has
    taken is skipped (:func:`_take_step`).
    Runs in a warm-up process; ``news`` (a queue) gets ``("start", lane, step)`` and ``("end", lane,
    step, seconds)`` for each step it runs, ``("done", lane)`` at the end, and ``("error", lane,
    message)`` when a step fails: the timed pass then compiles what is left, and reports the error.
    Without ``news`` and ``sync``, those the metrics process was started with (:func:`_start_metrics_lane`).
    """
    if news is None or sync is None:
        news, sync = _LANE_LINKS
    logging.getLogger("gpucal").setLevel(logging.ERROR)  # the parent says that kernels compile
    fitted: dict[str, Any] = {}
    calibration_few, held_out_few = calibration.head(DEMO_WARMUP_ROWS), held_out.head(DEMO_WARMUP_ROWS)
    predictions = {
        "raw score": held_out_few["score"].to_numpy(),
        "oracle p_true": held_out_few["p_true"].to_numpy(),
    }
    with _share_blas_threads(DEMO_LANES):
        for step in steps:
            news.put(("start", lane, step))
            if not _take_step(step, sync):
                continue
            tick = time.perf_counter()
            try:
                if step == "metrics":
                    _demo_metrics(held_out_few, predictions, fields, seed, include)
                    _demo_segments(held_out_few, predictions["raw score"], fields, 1)
                elif step in DEMO_CALIBRATORS:
                    _demo_fit_predict(step, calibration, held_out, fields, fitted)
                elif step == "auto":
                    rows = DEMO_AUTO_WARMUP_ROWS
                    _demo_fit_predict(step, calibration.head(rows), held_out.head(rows), fields, fitted)
                else:
                    predicted = _demo_fit_predict(step, calibration_few, held_out_few, fields, fitted)
                    if predicted is not None:
                        predictions[step] = predicted
            except Exception as error:
                # A lane waiting for this step goes on (the timed pass compiles what is left) instead of
                # holding its process, the metrics process among them, until the lane timeout.
                sync.ended[step].set()
                news.put(("error", lane, f"{step}: {error}"))
                return
            sync.ended[step].set()
            news.put(("end", lane, step, time.perf_counter() - tick))
    news.put(("done", lane))


def _warm_up_lanes(
    calibration: pd.DataFrame,
    held_out: pd.DataFrame,
    fields: list[str],
    seed: int,
    names: Sequence[str],
    on_step: Callable[[str], None] | None = None,
    *,
    include: Sequence[str] | None = None,
    keep_metrics: bool = False,
) -> ProcessPoolExecutor | None:
    """Compile the kernels of the demo's steps in parallel processes, one lane each, with progress.

    Lanes run in fresh interpreters (``spawn``), which inherit the cache folder; each reports its steps
    as they end, drawn here as one bar, and ``on_step(step)`` runs here then (the step's kernels are in
    the cache). A lane that fails or falls silent leaves its kernels to the timed pass. With
    ``keep_metrics`` (and more than one lane), the lane that computes the metrics runs in the demo's
    metrics process (:class:`_MetricsBeside`), returned once the warm-up has ended: its imports and
    the metrics' kernels are loaded there already (an interpreter's start and imports cost 3 to 4 CPU
    seconds). Returns None otherwise, or when the warm-up stopped early.
    """
    lanes = DEMO_WARMUP_LANES if min(os.cpu_count() or 1, DEMO_LANES) > 1 else _ONE_LANE
    lanes = tuple(tuple(step for step in lane if step in names or step == "metrics") for lane in lanes)
    steps = list(dict.fromkeys(step for lane in lanes for step in lane))
    context = multiprocessing.get_context("spawn")
    news = context.Queue()
    sync = _LaneSync(
        {step: context.Event() for step in steps}, {step: context.Event() for step in steps}, context.Lock()
    )
    kept = next((i for i, lane in enumerate(lanes) if "metrics" in lane), -1) if len(lanes) > 1 else -1
    pool = None
    if keep_metrics and kept >= 0:
        pool = ProcessPoolExecutor(
            1,
            mp_context=context,
            initializer=_start_metrics_lane,
            initargs=(news, sync, held_out[["label", "p_true", *fields]], fields, seed, include),
        )
    workers = [
        context.Process(
            target=_warm_lane,
            args=(i, lane, calibration, held_out, fields, seed, include, news, sync),
            daemon=True,
        )
        for i, lane in enumerate(lanes)
        if pool is None or i != kept
    ]
    started = time.perf_counter()
    finished: list[str] = []
    # The step each lane runs now, replaced whole (never mutated): the heartbeat thread reads it.
    running = [tuple(lane[0] for lane in lanes)]

    def waiting(step: str) -> str:
        left = [s for s in DEMO_WARMUP_AFTER.get(step, ()) if s in steps and s not in finished]
        return f"{step} (after {', '.join(left)})" if left else step

    def status() -> str:
        elapsed = time.perf_counter() - started
        now = ", ".join(waiting(step) for step in running[0] if step)
        return f"  {bar(len(finished), len(steps))} compiling {now} ({elapsed:.0f} s)"

    def now_running(lane: int, step: str) -> tuple[str, ...]:
        return tuple(step if i == lane else current for i, current in enumerate(running[0]))

    try:
        with heartbeat(status):
            if pool is not None:  # sends each lane its rows: seconds on a loaded machine
                pool.submit(_warm_lane, kept, lanes[kept], calibration, held_out, fields, seed, include)
            for worker in workers:
                worker.start()
            lanes_done = 0
            while lanes_done < len(lanes):
                try:
                    kind, lane, *more = news.get(timeout=DEMO_LANE_TIMEOUT_S)
                except queue.Empty:
                    log_progress("  the warm-up went silent; the remaining kernels compile as they are used")
                    _drop(pool)
                    return None
                if kind == "error":
                    log_progress(f"  warm-up stopped at {more[0]}; the remaining kernels compile when used")
                    _drop(pool)
                    return None
                if kind == "start":
                    running[0] = now_running(lane, more[0])
                elif kind == "done":
                    running[0] = now_running(lane, "")
                    lanes_done += 1
                else:
                    step, seconds = more
                    finished.append(step)
                    log_progress(f"  {bar(len(finished), len(steps))} {step} ({seconds:.1f} s)")
                    if on_step is not None:
                        on_step(step)
        return pool
    finally:
        for worker in workers:
            if worker.pid is None:  # never started
                continue
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()


def _drop(pool: ProcessPoolExecutor | None) -> None:
    """End the metrics process of a warm-up that stopped early (the demo starts a fresh one)."""
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _warm_marker() -> Path:
    """The file that says the demo's kernels are in the cache for this gpucal's sources.

    Its name holds the version and the newest modification time of gpucal's and the kernels' sources:
    numba's cache entries are invalidated by the same times, and then the marker no longer matches.
    """
    from gpucal.kernels.numba_cache import numba_cache_dir

    roots = [Path(__file__).resolve().parents[1], Path(__file__).resolve().parents[2] / "kernels"]
    newest = max(int(path.stat().st_mtime) for root in roots for path in root.rglob("*.py"))
    return numba_cache_dir() / f"gpucal-demo-{__version__}-{newest}.warm"


def _format_segments(report: pd.DataFrame) -> str:
    """The segment report as text: counts as integers, rates to 5 decimals, excess and sigma signed."""

    def weight(value: float) -> str:
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"

    formatters = {
        "rows": "{:,}".format,
        "weight": weight,
        "observed": "{:.5f}".format,
        "predicted": "{:.5f}".format,
        "error": "{:+.5f}".format,
        "excess": "{:+.1f}".format,
        "pcoc": "{:.3f}".format,
        "sigma": "{:+.2f}".format,
    }
    return report.to_string(index=False, formatters=formatters)


def _demo_data(rows: int, scenario: str, seed: int) -> tuple[Any, Any, list[str]]:
    """The demo's calibration and held-out splits (``rows`` each, ``make_ctr``) and its fields."""
    from gpucal import datasets

    calibration = datasets.make_ctr(rows, scenario=scenario, seed=seed)
    held_out = datasets.make_ctr(rows, scenario=scenario, seed=seed, row_offset=rows)
    return calibration, held_out, list(datasets.ctr_scenario(scenario)["fields"])


def run_demo(args: argparse.Namespace) -> int:
    """Fit the demo's calibrators (the ``DEMO_*`` lists) on a calibration split of ``make_ctr`` data;
    compare them on held-out rows.

    The kernels are compiled first, in parallel warm-up processes (skipped when this gpucal's kernels
    are known to be in the cache), then each calibrator is fitted and timed warm.
    """
    if args.rows < DEMO_MIN_ROWS:
        msg = (
            f"--rows must be at least {DEMO_MIN_ROWS}: make_ctr's positive rate is about 3%, and fewer rows "
            f"leave too few positives to fit and compare the calibrators. Got {args.rows} instead."
        )
        raise ValueError(msg)
    started = time.perf_counter()
    data = f"make_ctr(n_rows={args.rows:,}, scenario={args.scenario!r}, seed={args.seed})"
    log_progress(f"[1/4] loading pandas, numba and scikit-learn; generating 2 x {data} ...")
    with heartbeat(lambda: f"  ... loading and generating ({time.perf_counter() - started:.0f} s)"):
        import pandas as pd

        from gpucal.neural import torch_available

        calibration, held_out, fields = _demo_data(args.rows, args.scenario, args.seed)
    neural = torch_available()  # the neural extra: fitting needs PyTorch
    one_dim = DEMO_CALIBRATORS + DEMO_NEURAL_CALIBRATORS * neural
    names = one_dim + DEMO_FEATURE_CALIBRATORS + DEMO_NEURAL_FEATURE_CALIBRATORS * neural
    names += DEMO_CLUSTERED_CALIBRATORS
    log_progress(f"  {args.rows:,} + {args.rows:,} rows, positive rate {calibration['label'].mean():.4f}")
    for split, frame in (("calibration", calibration), ("held-out", held_out)):
        if frame["label"].nunique() < 2:
            msg = f"--rows {args.rows}: the {split} rows hold only one label; ask for more rows"
            raise ValueError(msg)
    warmup_rows = min(args.rows, DEMO_WARMUP_ROWS)
    # Each calibrator's kernels are loaded into this process as soon as a warm-up lane has compiled them,
    # while the other lane still compiles: the core of a lane that ended first would idle otherwise.
    few = (calibration.head(DEMO_LOAD_ROWS), held_out.head(DEMO_LOAD_ROWS))
    fitted_few: dict[str, Any] = {}
    loaded: list[str] = []

    def load_step(step: str) -> None:
        if step in names and step not in DEMO_UNLOADED:
            _load_kernels_of(step, *few, fields, fitted_few)
            loaded.append(step)

    include = None if args.format == "json" else DEMO_TEXT_METRICS
    beside = args.rows >= DEMO_METRICS_BESIDE_ROWS and (os.cpu_count() or 1) > 1
    pool = None
    marker = _warm_marker()
    if marker.exists():
        log_progress("[2/4] the demo's kernels are compiled already (numba's cache)")
    else:
        log_progress(
            f"[2/4] compiling the demo's kernels (first run only), each calibrator fitted untimed on "
            f"{warmup_rows:,} rows (the one-dimensional maps on all) in parallel processes ..."
        )
        pool = _warm_up_lanes(
            calibration, held_out, fields, args.seed, names, load_step, include=include, keep_metrics=beside
        )
        log_progress(f"  compiled in {time.perf_counter() - started:.1f} s since the start")
    log_progress(
        f"[3/4] fitting the calibrators on {args.rows:,} rows, timed warm"
        + (", the metrics of each prediction computed beside in a second process ..." if beside else " ...")
    )
    metrics = _MetricsBeside(held_out, fields, args.seed, include, beside=beside, pool=pool)
    blas = _share_blas_threads(2) if beside else contextlib.nullcontext()
    with blas:
        try:
            metrics("raw score", held_out["score"].to_numpy())
            unloaded = [n for n in names if n not in loaded and n not in DEMO_UNLOADED]
            _load_kernels(unloaded, *few, fields, fitted_few)
            predictions, fit_seconds = _demo_fit_all(names, calibration, held_out, fields, metrics)
            metrics("oracle p_true", held_out["p_true"].to_numpy())
            predictions = {"raw score": held_out["score"].to_numpy(), **predictions}
            fit_seconds["raw score"] = 0.0
            log_progress("[4/4] computing the metrics on the held-out rows ...")
            with heartbeat(lambda: f"  ... metrics ({time.perf_counter() - started:.0f} s since the start)"):
                table = metrics.table().T
                table["fit_predict_s"] = [fit_seconds.get(name, float("nan")) for name in table.index]
                best = str(table["log_loss"].drop("oracle p_true").idxmin())
                report = _demo_segments(held_out, predictions[best], fields, args.min_segment_rows)
        finally:
            metrics.close()
    marker.touch()
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
        print(report_json(document))
        log_progress(f"done in {elapsed:.1f} s")
        return 0
    segment_cols = [f"field_ece[{name}]" for name in fields]
    table["worst_field_ece"] = table[segment_cols].max(axis=1)
    shown = table[[*DEMO_COLUMNS, "worst_field_ece", "fit_predict_s"]]
    with pd.option_context("display.float_format", "{:.5f}".format, "display.width", 140):
        print(f"gpucal {__version__} demo: make_ctr(scenario={args.scenario!r}), calibrators fitted on")
        print(
            f"{args.rows:,} rows and evaluated on {args.rows:,} held-out rows (lower is better but roc_auc);"
        )
        print("fit_predict_s is warm: numba's one-off compilation of the kernels is not counted\n")
        print(shown.to_string())
    print(
        f"\nWorst {args.top} segments of the best calibrator by log-loss "
        f"({best}), rows >= {args.min_segment_rows}:"
    )
    print(_format_segments(report.head(args.top)))
    print(
        "error = predicted - observed rate; excess = predicted - observed positives (the segment's weight\n"
        "times its error: + over-predicts); pcoc = predicted / observed positives; sigma = the excess in\n"
        "standard deviations of its noise under calibrated probabilities (|sigma| > 3: beyond noise)."
    )
    print("\nOne-dimensional maps cannot fix errors that live in segments (see worst_field_ece);")
    feature_names = [n for n in names if n in predictions and n not in one_dim]
    print(f"the feature-aware calibrators ({', '.join(feature_names)}) read the fields and can.")
    log_progress(f"done in {elapsed:.1f} s")
    return 0


def run_warmup(args: argparse.Namespace) -> int:
    """Compile every CPU kernel into numba's on-disk cache, so later runs start warm.

    The demo's kernels first, in the demo's parallel warm-up processes on its default data; then
    :func:`gpucal.warmup.warm_up` here, which loads those from the cache and compiles the rest (float32
    scores, the reliability curve's bootstrap, the row kernels' parallel twins that inputs of
    ``PARALLEL_MIN_ROWS`` rows or more run, the automatic calibrator's paths on a large set, with
    weights and without) one by one.
    """
    from gpucal.warmup import warm_up

    started = time.perf_counter()
    log_progress(
        f"[1/2] compiling the demo's kernels in parallel processes (make_ctr, {DEMO_ROWS:,} rows) ..."
    )
    calibration, held_out, fields = _demo_data(DEMO_ROWS, DEMO_SCENARIO, DEMO_SEED)
    names = DEMO_CALIBRATORS + DEMO_FEATURE_CALIBRATORS + DEMO_CLUSTERED_CALIBRATORS
    _warm_up_lanes(calibration, held_out, fields, DEMO_SEED, names)
    log_progress("[2/2] compiling the rest (float32 scores, the reliability curve, large inputs) ...")
    warm_up(verbose=args.verbose > 0)
    _warm_marker().touch()
    seconds = time.perf_counter() - started
    print(f"gpucal {__version__}: every CPU kernel compiled into the cache in {seconds:.1f} s")
    return 0

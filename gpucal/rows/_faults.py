"""Waiting for a pass over dask rows: recovery from a lost worker, and a bound on the wait.

When a worker dies, ``distributed`` recomputes what it held from the graph (every gpucal block is a task
whose lineage the client keeps: the read, the steps mapped over it, a machine's store), on the surviving
workers or on the one its nanny starts. The tasks gpucal places on a worker say so as a preference
(``allow_other_workers=True``), so none waits for an address that is gone. What is left to this module
is the case where recovery cannot happen, which ``distributed`` would wait out forever:

* no worker left for longer than ``gpucal.no-workers-timeout`` (default 60 s): :class:`WorkerLostError`;
* a task that killed ``distributed.scheduler.allowed-failures`` workers (``KilledWorker``), or data
  that cannot be recomputed (scattered, then lost): :class:`WorkerLostError`;
* any pass longer than ``gpucal.pass-timeout`` (default: no bound): :class:`PassTimeoutError`.

Each error names the workers lost during the pass and what to do. Both keys are ``dask.config`` keys
(seconds, or a string such as ``"10 minutes"``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

#: ``dask.config`` key: most seconds any one pass over dask rows may take (None: no bound).
PASS_TIMEOUT_KEY = "gpucal.pass-timeout"
#: ``dask.config`` key: most seconds a pass waits with no worker on the cluster before it fails.
NO_WORKERS_KEY = "gpucal.no-workers-timeout"
NO_WORKERS_TIMEOUT = 60.0
#: Seconds between two looks at the cluster while a pass runs.
POLL_S = 0.5


class WorkerLostError(RuntimeError):
    """A pass over dask rows lost a worker and could not recompute what it held."""


class PassTimeoutError(TimeoutError):
    """A pass over dask rows took longer than ``dask.config`` key ``gpucal.pass-timeout``."""


def _seconds(key: str, default: float | None) -> float | None:
    import dask
    from dask.utils import parse_timedelta

    value = dask.config.get(key, default)
    if value is None:
        return None
    seconds = parse_timedelta(value, default="seconds")
    if seconds is None or seconds <= 0:
        msg = f"dask.config key {key!r} must be a positive number of seconds or None. Got {value!r} instead."
        raise ValueError(msg)
    return float(seconds)


def _addresses(client: Any) -> set[str]:
    return set(client.scheduler_info(n_workers=-1)["workers"])


def _lost_text(lost: set[str]) -> str:
    if not lost:
        return "no worker was lost during the pass"
    shown = ", ".join(sorted(lost))
    return f"worker{'s' if len(lost) > 1 else ''} {shown} {'were' if len(lost) > 1 else 'was'} lost"


class PassWatch:
    """Watch one pass's futures until they are done: fail when no worker is left or the pass is too long.

    Records the cluster's workers when the pass starts, so an error can name those lost since.
    """

    def __init__(self, client: Any, what: str) -> None:
        self.client = client
        self.what = what
        self.timeout = _seconds(PASS_TIMEOUT_KEY, None)
        self.no_workers = _seconds(NO_WORKERS_KEY, NO_WORKERS_TIMEOUT)
        self.started = time.monotonic()
        self.seen = _addresses(client)

    def lost(self) -> set[str]:
        """Workers there when the pass started (or seen during it) and gone now."""
        return self.seen - _addresses(self.client)

    def wait(self, futures: Sequence[Any]) -> None:
        """Return once every future is finished (computed or failed); raise instead of waiting forever."""
        from distributed import wait

        empty_since: float | None = None
        while True:
            try:
                wait(list(futures), timeout=POLL_S)
                return
            except TimeoutError:
                pass
            now = time.monotonic()
            workers = _addresses(self.client)
            self.seen |= workers
            if workers:
                empty_since = None
            elif empty_since is None:
                empty_since = now
            elif self.no_workers is not None and now - empty_since > self.no_workers:
                self.cancel(futures)
                msg = (
                    f"{self.what}: {_lost_text(self.seen)} and no worker has been left on the cluster "
                    f"for {self.no_workers:g} s, so nothing can recompute the rows they held. Start "
                    "workers (or give the cluster a nanny or an adaptive minimum above zero) and fit "
                    f"again; dask.config key {NO_WORKERS_KEY!r} sets how long a pass waits for one"
                )
                raise WorkerLostError(msg)
            if self.timeout is not None and now - self.started > self.timeout:
                self.cancel(futures)
                msg = (
                    f"{self.what} took longer than {self.timeout:g} s (dask.config key "
                    f"{PASS_TIMEOUT_KEY!r}); {_lost_text(self.lost())}. Check the workers' logs, then "
                    "raise the key or fit on smaller partitions"
                )
                raise PassTimeoutError(msg)

    def cancel(self, futures: Sequence[Any]) -> None:
        self.client.cancel(list(futures))

    def gather(self, futures: Sequence[Any]) -> list[Any]:
        """Wait for ``futures`` (:meth:`wait`) and bring their results; a lost worker that could not be
        recovered (``KilledWorker``, a lost future) raises :class:`WorkerLostError`."""
        from distributed import KilledWorker
        from distributed.client import FutureCancelledError, FuturesCancelledError

        self.wait(futures)
        try:
            return list(self.client.gather(list(futures)))
        except KilledWorker as error:
            worker = getattr(error.last_worker, "address", error.last_worker)
            msg = (
                f"{self.what}: worker {worker} died while running task {error.task!r}, the "
                f"{error.allowed_failures + 1}th worker to die running it (dask.config key "
                "'distributed.scheduler.allowed-failures'), so dask stopped recomputing it. A task that "
                "kills every worker it runs on is usually out of memory: give the workers more memory or "
                "fit on smaller partitions"
            )
            raise WorkerLostError(msg) from error
        except (FutureCancelledError, FuturesCancelledError) as error:
            msg = (
                f"{self.what}: {_lost_text(self.lost())}, and it held data that dask cannot recompute "
                "(data scattered to it, not computed from a graph). Give gpucal collections built from "
                "a graph (dd.read_parquet, dd.from_pandas, dd.from_map) and fit again"
            )
            raise WorkerLostError(msg) from error


def distributed_client() -> Any:
    """The ``distributed`` client dask computes on now, or None (dask's local schedulers)."""
    from gpucal.rows._placement import _client

    client = _client()
    if client is None:
        return None
    from dask.base import get_scheduler

    return client if get_scheduler() == client.get else None


def compute(*graphs: Any, what: str = "a pass over dask rows") -> tuple[Any, ...]:
    """``dask.compute(*graphs)``, watched by :class:`PassWatch` on a ``distributed`` cluster."""
    client = distributed_client()
    if client is None:
        import dask

        return tuple(dask.compute(*graphs))
    watch = PassWatch(client, what)
    return tuple(watch.gather(client.compute(list(graphs))))


__all__ = [
    "NO_WORKERS_KEY",
    "PASS_TIMEOUT_KEY",
    "PassTimeoutError",
    "PassWatch",
    "WorkerLostError",
    "compute",
    "distributed_client",
]

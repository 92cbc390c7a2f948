"""A worker plugin that kills its own worker process at a chosen task: deterministic faults for tests.

The plan is a JSON file listing kills, ``[{"names": [...], "skip": n}, ...]``: for the first, the
``n + 1``-th task to start (over the whole cluster) whose function, or a function among its arguments,
has one of ``names`` kills the worker running it with SIGKILL, as a preempted machine or the
out-of-memory killer would; then the next kill of the list is armed, counted from there. Every kill
appends ``address name`` to the log file beside the plan, so a test can check that the faults
happened. Without a plan file nothing happens (the nanny's replacement worker gets the plugin too, and
does not die again). Kept apart from the test module so that the worker processes import only this.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


def _names(spec: Any) -> set[str]:
    """The name of a task's function and of every function among its arguments."""
    names = {getattr(getattr(spec, "func", None), "__name__", "")}
    names.update(getattr(a, "__name__", "") for a in getattr(spec, "args", ()) if callable(a))
    return names


class KillAtTask(WorkerPlugin):
    """Kill this worker's process when a planned task starts (see the module docstring)."""

    def __init__(self, plan: str) -> None:
        self.plan = plan

    def setup(self, worker: Any) -> None:
        self.worker = worker

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish != "executing" or not os.path.exists(self.plan):
            return
        try:
            first, *rest = json.loads(Path(self.plan).read_text())
        except (OSError, ValueError):  # another worker is rewriting it
            return
        ts = self.worker.state.tasks.get(key)
        hit = _names(getattr(ts, "run_spec", None)) & set(first["names"])
        if not hit:
            return
        with open(self.plan + ".count", "ab") as counter:
            counter.write(b".")
        if os.path.getsize(self.plan + ".count") <= first["skip"]:
            return
        claimed = f"{self.plan}.{os.getpid()}"
        try:
            os.rename(self.plan, claimed)  # one worker wins each kill
        except FileNotFoundError:
            return
        os.remove(self.plan + ".count")
        if rest:
            Path(claimed).write_text(json.dumps(rest))
            os.rename(claimed, self.plan)
        with open(self.plan + ".log", "a") as log:
            log.write(f"{self.worker.address} {min(hit)}\n")
        os.kill(os.getpid(), signal.SIGKILL)

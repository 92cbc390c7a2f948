"""The first run of ``gpucal demo`` on a machine: wall time, CPU time and the longest silent stretch.

Runs the README's first command's demo in a subprocess with a fresh, empty numba cache (a new temporary
``NUMBA_CACHE_DIR``), so every kernel it calls is compiled, and reads its output line by line as it comes
to find the longest stretch without a line (stdout and stderr together; from the start to the first line
and from the last line to the exit count too). CPU time is user + system of the demo and every process it
waited for (its warm-up processes), from ``getrusage(RUSAGE_CHILDREN)``. The load average before and after
is recorded: on a shared machine the wall time is the CPU time stretched by the others' work.

``--venv`` first makes a fresh virtual environment and times ``pip install <repo>`` into it with the
options of the README's first command (downloads included; the venv and the install timed apart),
then runs that environment's ``gpucal``; without it the current interpreter's gpucal runs.
``PYTHONDONTWRITEBYTECODE`` is unset for the demo, as in a user's shell (``--keep-bytecode-env`` keeps
it as this process has it); ``--pip-options`` replaces the README's pip options, to time the alternatives
(for example ``--pip-options=`` for pip's default byte-compilation). ``--hide-torch`` runs the demo
as a fresh ``pip install .`` would, without PyTorch (no neural calibrators), when the interpreter has it.

The kernels compiled after the warm-up (from the demo's line ``compiled in ...``, in any of its
processes) are listed from the cache folder: numba writes one ``.nbc`` file per specialisation it
compiles. ``--list-compiles`` also prints, from the demo's process and every process it starts, each
compilation's kernel and argument types as it starts (numba's ``numba:compile`` event), on stderr,
and records its seconds: the JSON gets the count, the total, the slowest and the sums per module.

Usage::

    python benchmarks/bench_first_run.py --hide-torch --json benchmarks/results/first_run.json
    python benchmarks/bench_first_run.py --hide-torch -- --rows 500000   # arguments after -- go to demo
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Runs the demo as if PyTorch were not installed: gpucal asks ``importlib.util.find_spec("torch")``.
#: Nothing heavy is imported before the demo's own first line.
HIDE_TORCH = (
    "import importlib.util as u; find = u.find_spec; "
    "u.find_spec = lambda name, package=None: None if name == 'torch' else find(name, package)"
)
#: Installed as ``sitecustomize`` (a folder put first on ``PYTHONPATH``) with ``--list-compiles``, so that
#: the demo's process and every process it starts (the warm-up lanes, the metrics process) print each
#: numba compilation (kernel, argument types) to stderr as it starts and append, as it ends, one JSON
#: line to the file named by ``GPUCAL_BENCH_COMPILES``: the process, the kernel, its argument types, the
#: CPU seconds of the compiling thread from start to end (``inclusive_s``; numba compiles in the thread
#: that calls, holding the GIL) and those less the compilations nested in it (the kernels it calls,
#: compiled on the way: ``self_s``), the wall seconds (``wall_s``) and the compilation it is nested in
#: (``parent``). numba raises the event only when it compiles, not when it loads from the cache.
LIST_COMPILES = """\
import json, os, sys, threading, time
from numba.core import event
_open = threading.local()
class Shown(event.Listener):
    def on_start(self, ev):
        f = ev.data['dispatcher'].py_func
        print(f'numba compiles {f.__module__}.{f.__qualname__}{ev.data["args"]}', file=sys.stderr)
        stack = _open.__dict__.setdefault('stack', [])
        stack.append([time.thread_time(), 0.0, f'{f.__module__}.{f.__qualname__}', time.perf_counter()])
    def on_end(self, ev):
        f = ev.data['dispatcher'].py_func
        started, nested, _, wall = _open.stack.pop()
        seconds = time.thread_time() - started
        if _open.stack:
            _open.stack[-1][1] += seconds
        parent = _open.stack[-1][2] if _open.stack else None
        line = {'pid': os.getpid(), 'module': f.__module__, 'kernel': f.__qualname__, 'parent': parent,
                'args': str(ev.data['args']), 'inclusive_s': round(seconds, 3),
                'self_s': round(seconds - nested, 3), 'wall_s': round(time.perf_counter() - wall, 3)}
        with open(os.environ['GPUCAL_BENCH_COMPILES'], 'a') as sink:
            sink.write(json.dumps(line) + '\\n')
event.register('numba:compile', Shown())
"""
RUN_CLI = "from gpucal.cli import main; sys.exit(main(sys.argv[1:]))"
#: The demo's line that ends its warm-up (compile) stage.
WARM_UP_END = "compiled in"


def children_cpu_seconds() -> float:
    """User + system CPU seconds of every finished child process of this one (and their children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def readme_pip_options() -> list[str]:
    """The options of `pip install` in the README's first command (`pip install OPTIONS . && gpucal demo`)."""
    for line in (REPO / "README.md").read_text().splitlines():
        words = line.split()
        if words[:2] == ["pip", "install"] and words[-4:] == [".", "&&", "gpucal", "demo"]:
            return words[2:-4]
    msg = "README.md has no first command `pip install ... . && gpucal demo`"
    raise ValueError(msg)


def fresh_venv(folder: Path, source: Path, options: list[str]) -> tuple[Path, float, float]:
    """Make a virtual environment in ``folder``, then ``pip install`` ``source`` with ``options``.

    Returns the environment's python and the seconds of each step.
    """
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    made = time.perf_counter()
    python = folder / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", *options, str(source)]
    subprocess.run(pip, check=True)
    return python, made - started, time.perf_counter() - made


def timed_run(command: list[str], env: dict[str, str]) -> dict[str, object]:
    """Run ``command``, echoing its lines; return wall and CPU seconds, exit code and the silences."""
    cpu_before = children_cpu_seconds()
    load_before = os.getloadavg()
    started = time.monotonic()
    stamps: list[float] = []
    warm_up_end: list[float] = []  # the wall clock (time.time) of the demo's WARM_UP_END line
    lock = threading.Lock()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir()
    )

    def pump(stream, sink) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            with lock:
                stamps.append(time.monotonic() - started)
                if WARM_UP_END in line and not warm_up_end:
                    warm_up_end.append(time.time())
                print(f"[{stamps[-1]:6.1f} s] {line}", end="", file=sink, flush=True)

    readers = [
        threading.Thread(target=pump, args=(process.stdout, sys.stdout)),
        threading.Thread(target=pump, args=(process.stderr, sys.stderr)),
    ]
    for reader in readers:
        reader.start()
    code = process.wait()
    for reader in readers:
        reader.join()
    wall = time.monotonic() - started
    edges = [0.0, *sorted(stamps), wall]
    gaps = [(b - a, a) for a, b in itertools.pairwise(edges)]
    longest, at = max(gaps)
    return {
        "exit_code": code,
        "wall_s": round(wall, 2),
        "cpu_s": round(children_cpu_seconds() - cpu_before, 2),
        "longest_silence_s": round(longest, 2),
        "longest_silence_starts_at_s": round(at, 2),
        "lines": len(stamps),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "warm_up_end_time": warm_up_end[0] if warm_up_end else None,
    }


def compiled_after(cache: Path, since: float | None) -> list[str]:
    """The specialisations numba wrote into ``cache`` after the time ``since`` (``.nbc`` files: one per
    compiled signature, named ``module.function-line.pyXY.N.nbc``), oldest first; all when None."""
    found = [(path.stat().st_mtime, path) for path in cache.rglob("*.nbc")]
    return [p.name for t, p in sorted(found) if since is None or t > since]


def compile_costs(records: Path, top: int = 20) -> dict[str, object]:
    """Summarise the compilations listed in ``records`` (the listener's JSON lines; none when absent).

    Returns the count and the seconds of all of them (each compilation's own seconds, its nested
    compilations left out, so that the sum is the time spent), the ``top`` slowest by their own seconds
    and the sums per module, slowest first.
    """
    lines = records.read_text().splitlines() if records.exists() else []
    found = [json.loads(line) for line in lines]
    per_module: dict[str, list[float]] = {}
    for record in found:
        count_seconds = per_module.setdefault(record["module"], [0, 0.0])
        count_seconds[0] += 1
        count_seconds[1] += record["self_s"]
    return {
        "compilations": len(found),
        "compile_s": round(sum(r["self_s"] for r in found), 2),
        "compile_top": sorted(found, key=lambda r: -r["self_s"])[:top],
        "compile_per_module": {
            module: {"count": n, "self_s": round(seconds, 2)}
            for module, (n, seconds) in sorted(per_module.items(), key=lambda kv: -kv[1][1])
        },
        "compile_all": found,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", action="store_true", help="a fresh venv with `pip install <repo>` first")
    parser.add_argument("--hide-torch", action="store_true", help="run the demo as if PyTorch were absent")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--source", default=str(REPO), help="the gpucal checkout to run (default: this one)")
    parser.add_argument(
        "--pip-options", default=None, help="pip install options instead of the README's (with --venv)"
    )
    parser.add_argument(
        "--keep-bytecode-env", action="store_true", help="keep PYTHONDONTWRITEBYTECODE for the demo"
    )
    parser.add_argument(
        "--list-compiles", action="store_true", help="print each compilation of the demo's process"
    )
    parser.add_argument("demo_args", nargs="*", help="arguments of `gpucal demo` (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpucal-first-run-") as work:
        result: dict[str, object] = {"source": args.source, "machine": platform.machine()}
        result["cpu_count"] = os.cpu_count()
        python = Path(sys.executable)
        if args.venv:
            cpu_before = children_cpu_seconds()
            options = readme_pip_options() if args.pip_options is None else args.pip_options.split()
            python, venv_seconds, pip_seconds = fresh_venv(Path(work) / "venv", Path(args.source), options)
            result["venv_s"] = round(venv_seconds, 2)
            result["pip_install_s"] = round(pip_seconds, 2)
            result["pip_install_options"] = options
            result["venv_and_pip_cpu_s"] = round(children_cpu_seconds() - cpu_before, 2)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(work) / "numba-cache"))
        env.pop("PYTHONPATH", None)
        # As in a user's shell: Python keeps the bytecode it compiles on import (`pip install --no-compile`
        # leaves that to the first import), unless this variable, set on some CI machines, says not to.
        if not args.keep_bytecode_env:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        result["pythondontwritebytecode"] = env.get("PYTHONDONTWRITEBYTECODE")
        paths = [] if args.venv else [args.source]  # that checkout's gpucal, as `pip install .` would give
        compiles = Path(work) / "compiles.jsonl"
        if args.list_compiles:
            listener = Path(work) / "listener"
            listener.mkdir()
            (listener / "sitecustomize.py").write_text(LIST_COMPILES)
            paths.insert(0, str(listener))
            env["GPUCAL_BENCH_COMPILES"] = str(compiles)
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        code = ["import sys", *[HIDE_TORCH] * args.hide_torch, RUN_CLI]
        prefix = [str(python), "-c", "\n".join(code)]
        result["command"] = " ".join(["gpucal", "demo", *args.demo_args])
        result["torch_hidden"] = args.hide_torch
        result |= timed_run([*prefix, "demo", *args.demo_args], env)
        cache = Path(env["NUMBA_CACHE_DIR"])
        result["compiled_total"] = len(compiled_after(cache, None))
        result["compiled_after_warm_up"] = compiled_after(cache, result.pop("warm_up_end_time"))
        if args.list_compiles:
            result |= compile_costs(compiles)
    print(json.dumps(result, indent=2), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

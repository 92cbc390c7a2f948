r"""Where numba keeps gpucal's compiled kernels, and the one line that says when it compiles them.

Left alone, numba stores a ``cache=True`` kernel in a ``__pycache__`` folder next to its source. For
an installed gpucal that is ``site-packages/gpucal/**/__pycache__``: a later ``pip install -e .``
removes the package but not those folders, and Python then imports the leftover ``gpucal`` folder
as an empty namespace package (``module 'gpucal' has no attribute 'datasets'``); in a
read-only image the folder cannot be written at all. So gpucal points numba at a user cache
directory, the first of:

1. ``NUMBA_CACHE_DIR``, when set and writable (a value the user set wins);
2. the platform's user cache folder: ``$XDG_CACHE_HOME/gpucal/numba`` (default
   ``~/.cache/gpucal/numba``), ``%LOCALAPPDATA%\gpucal\numba`` on Windows;
3. ``gpucal-numba-<user>`` in the temporary directory, for a read-only home or image (created by numba).

numba reads ``NUMBA_CACHE_DIR`` once, when ``numba.core.config`` is first imported, so
:func:`use_user_cache_dir` runs before gpucal's first numba import: every module of gpucal that
compiles imports numba from :mod:`gpucal.kernels.jit`, which calls it first. It sets the variable, which child
processes (Dask workers) inherit, and numba's live setting when numba was imported before gpucal.
numba then uses that folder for every ``cache=True`` function of the process, not only gpucal's. A
``NUMBA_CACHE_DIR`` that cannot be written is replaced: numba would otherwise fall back to the package
folder.

numba fires a ``numba:compile`` event only when a signature is not in the cache; the first such
event of a gpucal or kernels function logs one line (logger ``gpucal``, level WARNING, so it shows
by default and goes through pytest's log capture, not stderr, in tests).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CACHE_DIR_VARIABLE = "NUMBA_CACHE_DIR"
#: The top-level package whose compilation the notice reports (the kernels import as gpucal.kernels).
ANNOUNCED_PACKAGE = "gpucal"


def is_writable_dir(path: Path) -> bool:
    """Whether ``path`` exists or can be made, and a file can be created in it (numba's own test)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def user_cache_dir() -> Path:
    """The platform's per-user cache folder for gpucal's numba cache (not created here)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "gpucal" / "numba"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucal" / "numba"


def temporary_cache_dir() -> Path:
    """A per-user folder in the temporary directory: the fallback when nothing else can be written."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"gpucal-numba-{user}"


@functools.cache
def numba_cache_dir() -> Path:
    """Return the folder numba caches gpucal's kernels in: the first writable of the module's list.

    When none is writable, the temporary one all the same: numba then finds it unwritable and falls
    back to its own choices, which beats failing ``import gpucal``.
    """
    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    candidates = [Path(chosen)] if chosen else []
    candidates.append(user_cache_dir())
    return next((path for path in candidates if is_writable_dir(path)), temporary_cache_dir())


def use_user_cache_dir() -> Path:
    """Point numba's cache at :func:`numba_cache_dir`; return the folder.

    Cheap and idempotent; call it before importing numba. It imports nothing heavy.
    """
    path = numba_cache_dir()
    os.environ[CACHE_DIR_VARIABLE] = str(path)
    config: Any = sys.modules.get("numba.core.config")
    if config is not None:  # numba came first: its setting was read already, so set it too
        config.CACHE_DIR = str(path)
    return path


def _announce(dispatcher: Any) -> bool:
    """Log the compile notice if ``dispatcher`` is gpucal's; return whether it was logged."""
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
    if module.partition(".")[0] != ANNOUNCED_PACKAGE:
        return False
    logging.getLogger("gpucal").warning(
        "gpucal: compiling CPU kernels on first use into %s "
        "(once per machine; `gpucal warmup` does it ahead of time)",
        numba_cache_dir(),
    )
    return True


@functools.cache
def register_compile_notice() -> None:
    """Listen to numba's ``numba:compile`` events (cache misses) and announce the first of gpucal's."""
    from numba.core import event

    class CompileNotice(event.Listener):
        announced = False

        def on_start(self, ev: event.Event) -> None:
            if not self.announced:
                self.announced = _announce(ev.data.get("dispatcher"))

        def on_end(self, ev: event.Event) -> None:
            pass

    event.register("numba:compile", CompileNotice())

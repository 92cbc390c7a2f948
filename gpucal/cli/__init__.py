"""The ``gpucal`` command line (also ``python -m gpucal``): :func:`main` runs one command.

The commands live one job to a module: :mod:`~gpucal.cli.demo` (``demo`` and ``warmup``, no data of
the user's), :mod:`~gpucal.cli.table_commands` (``fit``, ``predict``, ``rules``, ``evaluate`` on CSV and
Parquet files), :mod:`~gpucal.cli.parser` (the options and help). This module turns every error into
one line.

Exit status: 0 on success; 2 with one line ``gpucal: error: ...`` on stderr for a usage, file or data
problem (argparse's convention), always found before the data are read where the files allow it; 141
(128 + SIGPIPE, as coreutils report it) when the reader of stdout quits early, as ``| head`` does, with
no traceback.

Heavy libraries (pandas, numba, scikit-learn) are imported inside the commands, so ``gpucal --help``
stays quick.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from gpucal._backend import DeviceUnavailableError, missing_extra
from gpucal.cli.parser import build_parser
from gpucal.cli.table_commands import PARAMETER_OPTIONS

#: Exit status after a usage, file or data error (argparse's ``parser.error`` uses 2 too).
USAGE_ERROR_EXIT = 2
#: Exit status when stdout's reader went away (``gpucal ... | head``): what a SIGPIPE death reports.
BROKEN_PIPE_EXIT = 141

__all__ = ["BROKEN_PIPE_EXIT", "USAGE_ERROR_EXIT", "build_parser", "main"]


#: ``name='value'`` or ``name=value`` in a library message, for the names the CLI sets by option.
_PYTHON_ASSIGNMENT = re.compile(
    r"\b(" + "|".join(PARAMETER_OPTIONS) + r")=(?:'([^']*)'|\"([^\"]*)\"|([^\s,;)]+))"
)


def _as_cli(message: str) -> str:
    """Spell the library's ``score_kind='logit'`` as the option a shell user types: ``--score-kind logit``."""

    def option(match: re.Match[str]) -> str:
        value = next(group for group in match.groups()[1:] if group is not None)
        return f"{PARAMETER_OPTIONS[match.group(1)]} {value}"

    return _PYTHON_ASSIGNMENT.sub(option, message)


def _error_line(error: Exception) -> str:
    """Return the one-line message of an error that ends a command."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{os.fsdecode(error.filename)!r}: " if error.filename is not None else ""
        return f"{where}{error.strerror}"
    return " ".join(_as_cli(str(error)).split())


def _show_warning(message: Warning | str, *args: Any, **kwargs: Any) -> None:
    """Print a warning as a shell user reads it: one ``gpucal: warning:`` line, options spelled as
    options (``warnings.showwarning``'s signature; where it was raised means nothing to the shell)."""
    print(f"gpucal: warning: {' '.join(_as_cli(str(message)).split())}", file=sys.stderr)


def _run(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run its command; errors become one ``gpucal: error:`` line and exit 2,
    warnings one ``gpucal: warning:`` line each."""
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(args.handler(args))
    except BrokenPipeError:
        raise
    except (ValueError, TypeError, KeyError, OSError, ImportError, DeviceUnavailableError) as error:
        if isinstance(error, ImportError) and not missing_extra(error):
            raise
        print(f"gpucal: error: {_error_line(error)}", file=sys.stderr)
        return USAGE_ERROR_EXIT


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpucal`` console script and of ``python -m gpucal``.

    When stdout's reader quits early (``gpucal ... | head``), stdout is pointed at the null device so
    that nothing is written or reported on the way out, and the exit status is ``BROKEN_PIPE_EXIT``.
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT

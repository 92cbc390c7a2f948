"""Progress messages of the ``gpucal`` commands."""

import sys


def log_progress(message: str) -> None:
    """Progress goes to stderr so that stdout stays a clean table or JSON document."""
    print(message, file=sys.stderr, flush=True)

"""Parameter checks for the dataset functions, in gpucal's one template (``gpucal._params``).

``The 'n_rows' parameter of make_ctr must be an int in [1, inf). Got 0 instead.``
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any


def check_int(value: Any, name: str, owner: str, low: int) -> int:
    """Return ``value`` as an int after checking it is an integer (not a bool) ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        msg = f"The {name!r} parameter of {owner} must be an int in [{low}, inf). Got {value!r} instead."
        raise ValueError(msg)
    return int(value)


def check_open_unit(value: Any, name: str, owner: str) -> float:
    """Return ``value`` as a float after checking it is a real number in the open interval (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) < 1.0:
        msg = f"The {name!r} parameter of {owner} must be a float in (0, 1). Got {value!r} instead."
        raise ValueError(msg)
    return float(value)


def check_choice(value: Any, name: str, owner: str, choices: Sequence[str]) -> str:
    """Return ``value`` after checking it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        msg = f"The {name!r} parameter of {owner} must be one of {tuple(choices)}. Got {value!r} instead."
        raise ValueError(msg)
    return value

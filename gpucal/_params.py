"""Parameter checks for metrics and estimators: one constraints table each, one message template; and the
type of the command lines' whole-number options.

``@validate_params(n_bins=Interval(int, 1, None), strategy=Options("uniform", "quantile"))`` checks the
named keyword arguments when the function is called and raises
``The 'n_bins' parameter of ece must be an int in [1, inf). Got 0 instead.``
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Interval:
    """A number of ``kind`` (``int`` or ``float``) between ``low`` and ``high`` (None: unbounded).

    ``closed`` says which ends belong to the interval: ``"both"``, ``"left"``, ``"right"`` or
    ``"neither"``. Values are finite unless stated: an unbounded end (None) is always open, so
    ``Interval(float, 0, None)`` is ``[0, inf)`` and refuses ``inf``; a parameter that may be infinite
    says so with an explicit closed infinite end (``Interval(float, 1, math.inf)``: ``p`` may be
    ``inf``). Booleans are never numbers here.
    """

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"
    allow_none: bool = False

    def has_type(self, value: Any) -> bool:
        """Return True when ``value`` is of the right type (range aside)."""
        if value is None:
            return self.allow_none
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        return self.kind is not int or isinstance(value, numbers.Integral)

    def accepts(self, value: Any) -> bool:
        if not self.has_type(value):
            return False
        if value is None:
            return True
        if math.isnan(value):
            return False
        low_closed = self.closed in ("both", "left")
        high_closed = self.closed in ("both", "right")
        if math.isinf(value) and (self.low if value < 0 else self.high) is None:
            return False  # an unbounded end is open: finite unless stated
        if self.low is not None and (value < self.low or (value == self.low and not low_closed)):
            return False
        return not (self.high is not None and (value > self.high or (value == self.high and not high_closed)))

    def describe(self) -> str:
        low_closed = self.closed in ("both", "left") and self.low is not None
        high_closed = self.closed in ("both", "right") and self.high is not None
        low = "-inf" if self.low is None else _show(self.low)
        high = "inf" if self.high is None else _show(self.high)
        article = "an int" if self.kind is int else "a float"
        text = f"{article} in {'[' if low_closed else '('}{low}, {high}{']' if high_closed else ')'}"
        return f"{text} or None" if self.allow_none else text


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (compared with ``==``)."""

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", values)

    def accepts(self, value: Any) -> bool:
        return any(isinstance(value, type(v)) and value == v for v in self.values)

    def describe(self) -> str:
        return f"one of {self.values!r}"


@dataclass(frozen=True)
class AnyOf:
    """A value that meets at least one of ``constraints`` (e.g. ``"auto"`` or a positive number)."""

    constraints: tuple[Interval | Options, ...]

    def __init__(self, *constraints: Interval | Options) -> None:
        object.__setattr__(self, "constraints", constraints)

    def accepts(self, value: Any) -> bool:
        return any(c.accepts(value) for c in self.constraints)

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.constraints)


def _show(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if float(x).is_integer() else str(x)


def check_param(func_name: str, name: str, value: Any, constraint: Interval | Options | AnyOf) -> None:
    """Raise ``ValueError`` (``TypeError`` for a wrong type) when ``value`` breaks ``constraint``."""
    if constraint.accepts(value):
        return
    msg = f"The '{name}' parameter of {func_name} must be {constraint.describe()}. Got {value!r} instead."
    if isinstance(constraint, Interval) and not constraint.has_type(value):
        raise TypeError(msg)
    raise ValueError(msg)


def validate_params(**constraints: Interval | Options) -> Callable[[F], F]:
    """Check the named parameters of the decorated function against ``constraints`` on every call."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)
        keyword_only = {
            name for name, par in signature.parameters.items() if par.kind is inspect.Parameter.KEYWORD_ONLY
        }
        if not set(constraints) <= keyword_only:
            msg = (
                f"validate_params: {sorted(set(constraints) - keyword_only)} are not keyword-only parameters"
            )
            raise TypeError(msg)
        defaults = {
            name: signature.parameters[name].default
            for name in constraints
            if signature.parameters[name].default is not inspect.Parameter.empty
        }

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # Keyword-only parameters are the only ones constrained, so kwargs plus defaults is enough;
            # binding the full signature would cost more than the check on small inputs.
            for name, constraint in constraints.items():
                value = kwargs.get(name, defaults.get(name))
                check_param(func.__name__, name, value, constraint)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def positive_int_option(text: str) -> int:
    """argparse ``type`` of a command-line option that counts something (rows, workers): a whole number
    of at least 1, else argparse's one-line usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a whole number of at least 1, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value

"""Every calibration method of gpucal, joined where it is defined: its name, aliases, and what it can do.

A method's class joins with the :func:`calibration_method` decorator when its module is imported::

    @calibration_method("platt", aliases=("sigmoid",), fits_on_dask=True)
    class PlattCalibrator(Calibrator): ...

One table, read by every part that lists methods: ``gpucal.persistence`` rebuilds a saved model of a
joined class (a model file names its class: the class name is the file format's, so it never changes),
:mod:`gpucal.catalogue` gives the methods the automatic calibrator chooses among, ``make_calibrator`` and
the ``gpucal`` command build any of them by name, and a fit refusing dask collections lists those that
fit on them.

This module sits below every method and imports none. A method joins when its package is imported, so
a reader that needs them all calls :func:`complete`: it runs what the ``gpucal`` package asked it to
(importing ``gpucal.loading``, which imports every method by name), once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Method:
    """One method: its name, the class, other names it answers to, and what it can do.

    Attributes
    ----------
    name : str
        The method's name for ``make_calibrator`` and the ``gpucal`` command.
    cls : type
        The estimator class; a model file names it by ``cls.__name__``.
    aliases : tuple of str
        Other names of the method (scikit-learn's "sigmoid" for Platt scaling).
    fits_on_dask : bool
        Whether ``fit`` reads dask collections where they are (the others refuse them by name).
    candidate : bool
        Whether the automatic calibrator may choose it (not the automatic calibrator itself).
    """

    name: str
    cls: type
    aliases: tuple[str, ...] = ()
    fits_on_dask: bool = False
    candidate: bool = True


_BY_NAME: dict[str, Method] = {}
_BY_CLASS_NAME: dict[str, Method] = {}
_COMPLETERS: list[Callable[[], object]] = []


def calibration_method(
    name: str, *, aliases: tuple[str, ...] = (), fits_on_dask: bool = False, candidate: bool = True
) -> Callable[[T], T]:
    """Class decorator: the class joins the registry under ``name`` and ``aliases`` (see :class:`Method`).

    A name taken by another class raises ``ValueError``; the same class joining again (its module
    imported anew) replaces its entry.
    """

    def join(cls: T) -> T:
        entry = Method(name, cls, tuple(aliases), fits_on_dask, candidate)
        for key in (name, *aliases):
            taken = _BY_NAME.get(key)
            if taken is not None and _full_name(taken.cls) != _full_name(cls):
                msg = f"calibration method name {key!r} is taken by {taken.cls.__qualname__}"
                raise ValueError(msg)
            _BY_NAME[key] = entry
        _BY_CLASS_NAME[cls.__name__] = entry
        return cls

    return join


def _full_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def complete_with(completer: Callable[[], object]) -> None:
    """Ask :func:`complete` to call ``completer`` (it imports every method), once; the root package does."""
    if completer not in _COMPLETERS:
        _COMPLETERS.append(completer)


def complete() -> None:
    """Make sure every method of gpucal has joined (by running what :func:`complete_with` was given)."""
    while _COMPLETERS:
        _COMPLETERS.pop(0)()


def methods() -> dict[str, Method]:
    """Every joined method by name and by alias, sorted by name.

    Only the methods whose modules were imported; a reader that needs every one imports the methods
    (as :mod:`gpucal.catalogue` does) or calls :func:`complete` first.
    """
    return dict(sorted(_BY_NAME.items()))


def class_named(name: str) -> type | None:
    """The joined class whose ``__name__`` is ``name`` (a model file's ``"class"``), or None.

    A name not joined yet completes the registry first: a saved MBCT is read back in a process that
    imported only the persistence module.
    """
    if name not in _BY_CLASS_NAME:
        complete()
    entry = _BY_CLASS_NAME.get(name)
    return None if entry is None else entry.cls


def class_names() -> list[str]:
    """The names of every class a model file may name, sorted (the registry completed first)."""
    complete()
    return sorted(_BY_CLASS_NAME)


def fits_on_dask(cls: type) -> bool:
    """Whether the estimator class ``cls`` fits on dask collections."""
    entry = _BY_CLASS_NAME.get(cls.__name__)
    return entry is not None and entry.fits_on_dask


def dask_fitting_names() -> tuple[str, ...]:
    """The class names of every method that fits on dask collections, sorted (the registry completed)."""
    complete()
    return tuple(sorted(n for n, entry in _BY_CLASS_NAME.items() if entry.fits_on_dask))


__all__ = [
    "Method",
    "calibration_method",
    "class_named",
    "class_names",
    "complete",
    "complete_with",
    "dask_fitting_names",
    "fits_on_dask",
    "methods",
]

"""A block of the user's rows as given, and the checked summary of its labels and weights.

:func:`~gpucal.rows.as_rows` hands every fit its input as :class:`RowBlock` s: the named inputs of one
block (a pandas or cudf frame or Series, a numpy or cupy array, or None) untouched, so that the fit's first
:meth:`~gpucal.rows.Rows.map` checks and encodes them the same way on every backend.

Weights follow one convention everywhere: ``w`` is None for unit weights (no array of ones is made), and
the rows of a fit are either all weighted or all unit-weighted (:func:`concat_weights`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucal._backend import array_namespace


@dataclass(frozen=True)
class RowBlock:
    """The named inputs of one block of rows (``columns[name]`` as given, or None)."""

    columns: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.columns[name]

    def __len__(self) -> int:
        first = next((v for v in self.columns.values() if v is not None), None)
        return 0 if first is None else len(first)


def row_block(names: tuple[str, ...], *values: Any) -> RowBlock:
    """Return the :class:`RowBlock` of ``names`` and their values (a dask partition's inputs)."""
    return RowBlock(dict(zip(names, values, strict=True)))


#: Columns of :func:`label_summary`.
N_ROWS, WEIGHT, LABEL_WEIGHT, N_POSITIVE, N_NEGATIVE = range(5)


def label_summary(y: Any, w: Any) -> np.ndarray:
    r"""Return ``[n, sum w, sum w y, #(w > 0, y > 0), #(w > 0, y < 1)]`` (float64) of labels ``y`` in
    [0, 1] and weights ``w`` (None: unit) on any device; added over blocks by :meth:`Rows.sum`."""
    n = int(y.shape[0])
    if w is None:
        positive = int((y > 0).sum())
        negative = int((y < 1).sum())
        return np.array([n, n, float(y.sum()), positive, negative], dtype=np.float64)
    weighted = w > 0
    return np.array(
        [
            n,
            float(w.sum()),
            float((w * y).sum()),
            int((weighted & (y > 0)).sum()),
            int((weighted & (y < 1)).sum()),
        ],
        dtype=np.float64,
    )


#: Why a scaling calibrator refuses labels of one class (:func:`check_class_weights`'s default).
SCALING_NEEDS_TWO_CLASSES = (
    "a scaling calibrator needs both classes because its maximum likelihood fit does not exist for one class"
)


def check_class_weights(
    has_positive: bool, has_negative: bool, name: str = "y", why: str = SCALING_NEEDS_TWO_CLASSES
) -> None:
    """Raise the error of :func:`check_two_classes` from whether each class carries weight; ``why``
    ends it."""
    if not (has_positive and has_negative):
        which = "negative" if has_positive else "positive"
        msg = f"{name}: no {which} labels (with non-zero weight); {why}"
        raise ValueError(msg)


@dataclass(frozen=True)
class LabelSummary:
    """The summed :func:`label_summary` of all rows, and the checks every fit makes on the whole data."""

    n_rows: int
    weight: float
    label_weight: float
    n_positive: int
    n_negative: int

    @classmethod
    def of(cls, sums: np.ndarray) -> LabelSummary:
        return cls(
            int(sums[N_ROWS]),
            float(sums[WEIGHT]),
            float(sums[LABEL_WEIGHT]),
            int(sums[N_POSITIVE]),
            int(sums[N_NEGATIVE]),
        )

    @property
    def mean_label(self) -> float:
        """The weighted mean label :math:`\\sum w y / \\sum w`."""
        return self.label_weight / self.weight

    def check_rows(self, name: str = "X") -> None:
        """Raise ``ValueError`` when there are no rows."""
        if self.n_rows == 0:
            msg = f"{name}: no rows"
            raise ValueError(msg)

    def check_two_classes(self, name: str = "y") -> None:
        """Raise ``ValueError`` when no row, or only rows of one class, carry weight."""
        self.check_rows()
        check_class_weights(self.n_positive > 0, self.n_negative > 0, name)


def concat_weights(weights: Sequence[Any], xp: Any) -> Any:
    """Concatenate blocks' weights: None when every block is unit-weighted; an error when some are and
    some are not (a fit's rows are either all weighted or all unit-weighted)."""
    weighted = [w is not None for w in weights]
    if not any(weighted):
        return None
    if not all(weighted):
        msg = "sample_weight: some partitions have weights and others not"
        raise ValueError(msg)
    return weights[0] if len(weights) == 1 else xp.concatenate(list(weights))


def strided_rows(stride: int, row_offset: int, *arrays: Any) -> tuple[Any, ...]:
    """The rows of a block's ``arrays`` whose *global* index is a multiple of ``stride`` (contiguous
    copies; the block's first row is global row ``row_offset``): the same subsample on one machine and
    over any partitioning, what the warm starts fit on."""
    first = -row_offset % stride
    return tuple(array_namespace(a).ascontiguousarray(a[first::stride]) for a in arrays)


__all__ = [
    "SCALING_NEEDS_TWO_CLASSES",
    "LabelSummary",
    "RowBlock",
    "check_class_weights",
    "concat_weights",
    "label_summary",
    "row_block",
    "strided_rows",
]

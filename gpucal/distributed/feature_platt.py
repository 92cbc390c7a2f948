r"""``FeatureAwarePlattCalibrator.fit`` on dask collections: the one-machine Newton-CG, its passes summed.

The solver (``gpucal.calibrators.feature_platt``) reads the rows only through a
:class:`~gpucal.calibrators.feature_platt.RowStore`, and every number it reads is a sum over rows:

==========================================  ==================================================
what Newton-CG reads                        one pass over the partitions
==========================================  ==================================================
both classes weighted, ``sum w``, ``w y``   summary pass after reading (the start's intercept)
weight per code (the centering's used set)  sum of per-partition weighted bincounts
loss of a line-search trial                 sum of per-partition losses
gradient and Hessian diagonal               sum of ``[sum r x, sum r, sum D x^2, sum D]`` and of
                                            ``group_sums(codes, f=p, y, w)``
Hessian-vector product                      sum of ``group_sums(codes, f=X v, y=x, w=D)``
==========================================  ==================================================

Each persisted partition is a :class:`~gpucal.calibrators.feature_platt.LocalRows` (score logit
``x``, codes, labels, weights, on its partition's device), and each pass above is that class's own
method on every partition, added with :func:`~gpucal.distributed.sum_partitions`; the row vectors
the solver carries (the predictor :math:`z = X\theta`, a step's :math:`X d`, the curvatures
:math:`D = w p (1 - p)`) stay on the workers as persisted per-partition arrays. So the iterations are
those of one machine up to the order of the additions (about 1e-15 relative per sum), and so are the
coefficients. The encoder comes from :func:`~gpucal.distributed.fit_encoder` (equal to
``FeatureEncoder.fit`` on all rows); on large data the warm start samples the same global rows
(every ``n // WARM_START_ROWS``-th) as on one machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucal._backend import array_namespace, resolve_device
from gpucal._frames import split_input
from gpucal._validation import check_consistent_length, check_labels, check_same_index, check_sample_weight
from gpucal.calibrators._logistic import check_class_weights
from gpucal.calibrators.feature_platt import (
    FeaturePlattFit,
    LocalRows,
    _on_device,
    fit_feature_platt_on,
    score_feature,
)
from gpucal.distributed.encoding import fit_encoder
from gpucal.encoding import FeatureEncoder
from gpucal.rows._checks import check_partition_weight
from gpucal.rows._collections import Partitions, partitions
from gpucal.rows._placement import as_partitions, map_persisted, persist
from gpucal.rows._reduce import sum_partitions
from kernels import N_STATS

if TYPE_CHECKING:
    from gpucal.calibrators.feature_platt import FeatureAwarePlattCalibrator

# Columns of the summary pass.
_N_ROWS, _W, _WY, _N_POSITIVE, _N_NEGATIVE = range(5)
# Entries of a gradient pass before the group sums: sum r x, sum r, sum D x^2, sum D.
_N_ROW_SUMS = 4


def fit_feature_platt_partitions(
    cal: FeatureAwarePlattCalibrator, X: Any, y: Any, sample_weight: Any
) -> tuple[FeatureEncoder, FeaturePlattFit]:
    """Fit ``cal`` (parameters validated) on the dask DataFrame ``X`` and the labels and weights
    partitioned alike; return the fitted encoder and coefficients, as the one-machine fit finds them."""
    parts = partitions({"X": X, "y": y, "sample_weight": sample_weight})
    meta = split_input(
        X._meta,
        score_col=cal.score_col,
        feature_cols=cal.feature_cols,
        score_kind=cal.score_kind,
        require_features=True,
        allow_empty=True,
    )
    encoder = FeatureEncoder(n_bins=cal.n_bins, categorical_cols=cal.categorical_cols)
    encoder = fit_encoder(encoder, X[list(meta.features)], sample_weight=sample_weight)
    rows = PartitionedRows.read(parts, cal, encoder)
    fit = fit_feature_platt_on(
        rows, encoder.n_values_, l2=float(cal.l2), max_iter=int(cal.max_iter), tol=float(cal.tol)
    )
    return encoder, fit


# --------------------------------------------------------------------------------------------------
# One partition


def _read_part(
    X: Any, y: Any, w: Any, cal: FeatureAwarePlattCalibrator, encoder: FeatureEncoder
) -> LocalRows:
    """One partition checked, encoded and moved as ``FeatureAwarePlattCalibrator.fit`` does its input."""
    split = split_input(
        X,
        score_col=cal.score_col,
        feature_cols=encoder.feature_names_,
        score_kind=cal.score_kind,
        require_features=True,
        allow_empty=True,
    )
    check_same_index(X=X, y=y, sample_weight=w)
    labels = check_labels(y, "y")
    n_rows = check_consistent_length(X=split.score, y=labels)
    xp = array_namespace(labels)
    # No weights: the zero-stride unit view of one machine (the kernels skip it); a partition's weights
    # may all be zero (the summary pass checks the whole data).
    weights = check_sample_weight(None, n_rows, xp=xp) if w is None else check_partition_weight(w, n_rows, xp)
    codes = encoder.transform(split.features)
    device = resolve_device(cal.device, split.score, codes)
    score, codes, labels, weights = (_on_device(a, device) for a in (split.score, codes, labels, weights))
    return LocalRows(score_feature(score, cal.score_kind), codes, labels, weights)


def _summary(part: LocalRows) -> np.ndarray:
    """Rows, ``sum w``, ``sum w y``, and the rows of each class with non-zero weight."""
    xp = part.xp
    weight, label_sum = part.label_sums()
    weighted = part.w > 0
    return np.array(
        [
            part.n_rows,
            weight,
            label_sum,
            int(xp.count_nonzero(weighted & (part.y > 0))),
            int(xp.count_nonzero(weighted & (part.y < 1))),
        ],
        dtype=np.float64,
    )


def _n_rows(part: LocalRows) -> int:
    return part.n_rows


def _strided(part: LocalRows, stride: int, row_offset: int) -> LocalRows:
    """The partition's rows whose global index is a multiple of ``stride``."""
    return part.strided(stride, start=-row_offset % stride)


def _code_weights(part: LocalRows, n_values: np.ndarray) -> np.ndarray:
    return part.code_weights(n_values)


def _linear(part: LocalRows, theta: np.ndarray, offsets: np.ndarray) -> Any:
    return part.linear(theta, offsets)


def _shifted(z: Any, scale: float, dz: Any) -> Any:
    return z + scale * dz


def _loss(part: LocalRows, z: Any) -> np.ndarray:
    return np.array([part.loss(z)])


@dataclass(frozen=True)
class _GradientPart:
    """A partition's gradient pass: its row curvatures (kept for the Hessian products) and its sums."""

    curvature: Any
    sums: np.ndarray  # [sum r x, sum r, sum D x^2, sum D, group sums (flattened)]


def _gradient(part: LocalRows, z: Any, n_values: np.ndarray) -> _GradientPart:
    row_sums, stats, curvature = part.gradient_sums(z, n_values)
    return _GradientPart(curvature, np.concatenate([row_sums, stats.ravel()]))


def _gradient_sums(gradient: _GradientPart) -> np.ndarray:
    return gradient.sums


def _hessian_sums(
    part: LocalRows, gradient: _GradientPart, v: np.ndarray, offsets: np.ndarray, n_values: np.ndarray
) -> np.ndarray:
    return part.hessian_sums(v, offsets, n_values, gradient.curvature)


def _zipped(*row_lists: Sequence[Any]) -> Partitions:
    """Aligned per-partition objects (the rows and their row vectors) as ``sum_partitions`` maps them."""
    names = tuple(f"rows[{i}]" for i in range(len(row_lists)))
    return Partitions(names, list(zip(*row_lists, strict=True)))


# --------------------------------------------------------------------------------------------------
# The store


@dataclass(frozen=True)
class PartitionedRows:
    """``gpucal.calibrators.feature_platt.RowStore`` over persisted partitions of ``LocalRows``.

    A row vector is a list of persisted per-partition arrays, in partition order. Every method is
    one pass: a sum over partitions of the ``LocalRows`` method of the same name, or a map that
    stays on them.
    """

    parts: list[Any]  # persisted delayed LocalRows, in partition order
    summary: np.ndarray  # the summary pass (_N_ROWS, _W, _WY, _N_POSITIVE, _N_NEGATIVE)

    @classmethod
    def read(
        cls, parts: Partitions, cal: FeatureAwarePlattCalibrator, encoder: FeatureEncoder
    ) -> PartitionedRows:
        """Read, check and encode every partition of ``X, y, sample_weight``, and keep it on its worker."""
        import dask

        read = dask.delayed(_read_part, pure=False)
        rows = cls.of(persist([read(*part, cal, encoder) for part in parts.parts]))
        if rows.n_rows == 0:
            msg = "X: no rows"
            raise ValueError(msg)
        if rows.summary[_W] <= 0:
            msg = "sample_weight: all weights are zero"
            raise ValueError(msg)
        return rows

    @classmethod
    def of(cls, parts: list[Any]) -> PartitionedRows:
        """The store of persisted ``LocalRows`` partitions, with its summary pass."""
        return cls(parts, sum_partitions(as_partitions(parts), _summary))

    @property
    def n_rows(self) -> int:
        return int(self.summary[_N_ROWS])

    def check_two_classes(self) -> None:
        check_class_weights(self.summary[_N_POSITIVE] > 0, self.summary[_N_NEGATIVE] > 0)

    def label_sums(self) -> tuple[float, float]:
        return float(self.summary[_W]), float(self.summary[_WY])

    def strided(self, stride: int) -> PartitionedRows:
        """Global rows ``0, stride, 2 stride, ...``: each partition keeps those it holds."""
        import dask

        lengths = dask.compute(*[dask.delayed(_n_rows)(part) for part in self.parts])
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        task = dask.delayed(_strided, pure=False)
        sample = [task(part, stride, int(o)) for part, o in zip(self.parts, offsets, strict=True)]
        return PartitionedRows.of(persist(sample))

    def code_weights(self, n_values: np.ndarray) -> np.ndarray:
        return sum_partitions(as_partitions(self.parts), _code_weights, args=(n_values,))

    def linear(self, theta: np.ndarray, offsets: np.ndarray) -> list[Any]:
        return map_persisted(_linear, self.parts, np.array(theta), offsets)

    def shifted(self, z: list[Any], scale: float, dz: list[Any]) -> list[Any]:
        import dask

        task = dask.delayed(_shifted, pure=False)
        return persist([task(zi, float(scale), dzi) for zi, dzi in zip(z, dz, strict=True)])

    def loss(self, z: list[Any]) -> float:
        return float(sum_partitions(_zipped(self.parts, z), _loss)[0])

    def gradient_sums(self, z: list[Any], n_values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        import dask

        task = dask.delayed(_gradient, pure=False)
        gradients = persist([task(part, zi, n_values) for part, zi in zip(self.parts, z, strict=True)])
        flat = sum_partitions(as_partitions(gradients), _gradient_sums)
        stats = flat[_N_ROW_SUMS:].reshape(-1, N_STATS)
        return flat[:_N_ROW_SUMS], stats, gradients

    def hessian_sums(
        self, v: np.ndarray, offsets: np.ndarray, n_values: np.ndarray, curvature: list[Any]
    ) -> np.ndarray:
        return sum_partitions(
            _zipped(self.parts, curvature), _hessian_sums, args=(np.array(v), offsets, n_values)
        )


__all__ = ["PartitionedRows", "fit_feature_platt_partitions"]

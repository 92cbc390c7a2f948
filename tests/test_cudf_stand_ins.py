"""gpucal's cudf branches, run on pandas objects standing in for cudf ones (no cudf here, no GPU).

``CudfLike`` wraps a pandas object under a ``cudf`` module name, so gpucal takes its cudf branches; it
forwards every attribute to pandas, wraps what comes back, and adds what cudf has and pandas has not
(``to_cupy``, ``has_nulls``, ``to_pandas(nullable=...)``). Its ``to_cupy`` returns a numpy array
that the tests mark, so a namespace picked before the conversion is caught.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpucal import _validation
from gpucal._frames import _cudf_column, _pandas_column, cudf_to_pandas
from gpucal._validation import check_labels, check_probabilities, check_scores
from gpucal.distributed.encoding import hash_codes
from gpucal.encoding import features as features_module
from gpucal.encoding.features import resolve_feature_cols
from gpucal.metrics import field_ece
from gpucal.metrics import inputs as metrics_inputs
from gpucal.metrics.inputs import factorize_values
from gpucal.metrics.multicalibration import host_column
from gpucal.metrics.rejection import rejection_curve
from gpucal.plot import feature_calibration
from gpucal.plot.trees import _host_values
from gpucal.rows import as_rows
from tests._stand_ins import DeviceArray


def unwrap(value: Any) -> Any:
    return object.__getattribute__(value, "wrapped") if isinstance(value, CudfLike) else value


class CudfLike:
    """A pandas object in cudf's clothes (``type(x).__module__`` starts with ``cudf``)."""

    __module__ = "cudf.core.series"

    def __init__(self, wrapped: Any) -> None:
        object.__setattr__(self, "wrapped", wrapped)

    def __getattr__(self, name: str) -> Any:
        found = getattr(object.__getattribute__(self, "wrapped"), name)
        if not callable(found):
            wrapped = isinstance(found, pd.Series | pd.Index) or hasattr(found, "codes")  # .cat
            return CudfLike(found) if wrapped else found

        def call(*args: Any, **kwargs: Any) -> Any:
            result = found(*map(unwrap, args), **{k: unwrap(v) for k, v in kwargs.items()})
            return CudfLike(result) if isinstance(result, pd.Series | pd.Index) else result

        return call

    def __len__(self) -> int:
        return len(object.__getattribute__(self, "wrapped"))

    @property
    def has_nulls(self) -> bool:
        if isinstance(unwrap(self), pd.Index):  # a cudf Index has hasnans only
            msg = "has_nulls"
            raise AttributeError(msg)
        return bool(unwrap(self).isna().any())

    def to_cupy(self, na_value: Any = None) -> np.ndarray:
        return unwrap(self).to_numpy(dtype=np.float64 if na_value is not None else None, na_value=na_value)

    def to_pandas(self, nullable: bool = False) -> Any:
        """As cudf: integers with nulls as floats unless ``nullable``, refused for categoricals."""
        values = unwrap(self)
        if nullable and isinstance(values.dtype, pd.CategoricalDtype):
            msg = "nullable types not supported for categorical columns"
            raise NotImplementedError(msg)
        if not nullable and str(values.dtype) == "Int64" and values.isna().any():
            return values.astype("float64")
        return values


def cudf_ints(values: list[Any]) -> CudfLike:
    """An int64 cudf column with nulls: its dtype says int64 (kind 'i'), as cudf's does."""
    column = CudfLike(pd.Series(pd.array(values, dtype="Int64")))
    object.__setattr__(column, "dtype", np.dtype("int64"))
    return column


def test_the_validators_pick_the_namespace_of_the_converted_column(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    pick = _validation.array_namespace

    def namespace(*arrays: Any) -> Any:
        seen.extend(type(a).__module__ for a in arrays)
        return pick(*arrays)

    monkeypatch.setattr(_validation, "array_namespace", namespace)
    column = CudfLike(pd.Series([0.0, 0.25, 1.0]))
    np.testing.assert_array_equal(check_probabilities(column), [0.0, 0.25, 1.0])
    np.testing.assert_array_equal(check_scores(column, kind="logit"), [0.0, 0.25, 1.0])
    np.testing.assert_array_equal(check_labels(column), [0.0, 0.25, 1.0])
    # cupy arrays refuse numpy's implicit conversion: the namespace of a cudf column is its array's
    assert seen
    assert not [module for module in seen if module.startswith("cudf")]


def test_a_cudf_column_with_nulls_is_refused_naming_the_row() -> None:
    column = CudfLike(pd.Series([1.0, None, 0.0]))
    with pytest.raises(ValueError, match=r"y_true: 1 missing value\(s\) \(first at row 1"):
        check_labels(column)


def test_integer_ids_with_nulls_stay_integers_on_the_host() -> None:
    ids = [2**53, 2**53 + 1, None]
    assert str(cudf_to_pandas(cudf_ints(ids)).dtype) == "Int64"
    index = CudfLike(pd.Index(pd.array(ids, dtype="Int64")))  # an Index has no has_nulls, only hasnans
    object.__setattr__(index, "dtype", np.dtype("int64"))
    assert str(cudf_to_pandas(index).dtype) == "Int64"
    codes, _ = factorize_values(cudf_ints(ids), "segments")
    assert len(set(np.asarray(codes).tolist())) == 3  # as floats, the two ids were one
    assert (
        hash_codes(cudf_ints(ids), 1_000).tolist()
        == hash_codes(pd.Series(ids, dtype="Int64"), 1_000).tolist()
    )
    assert host_column(cudf_ints(ids)).nunique(dropna=False) == 3
    assert _host_values(cudf_ints(ids)).nunique(dropna=False) == 3
    categories = CudfLike(pd.Series(pd.Categorical(["a", None, "b"])))
    assert cudf_to_pandas(categories).tolist()[::2] == ["a", "b"]  # no nullable conversion asked for
    assert hash_codes(categories, 1_000).shape == (3,)


def test_cudf_categories_keep_their_dtype_as_pandas_does() -> None:
    values = pd.Series(pd.Categorical([2, None, 1, 2]))
    on_device, on_host = _cudf_column(CudfLike(values), "group"), _pandas_column(values, "group")
    np.testing.assert_array_equal(on_device.values, on_host.values)
    assert on_device.categories.dtype == on_host.categories.dtype == np.int64


def test_cudf_decimals_are_read_as_floats_as_other_families_read_them() -> None:
    class Decimal64Dtype(pd.api.extensions.ExtensionDtype):  # as cudf's: str() is the name
        name = "decimal64"
        kind = "O"
        type = Decimal

        def __repr__(self) -> str:
            return "Decimal64Dtype(precision=5, scale=2)"

    column = CudfLike(pd.Series([Decimal("1.25"), None, Decimal("2.50")], dtype=object))
    object.__setattr__(column, "dtype", Decimal64Dtype())
    read = _cudf_column(column, "price")
    np.testing.assert_array_equal(read.values, [1.25, np.nan, 2.5])
    assert read.categories is None


def test_host_metrics_read_weights_on_the_gpu_on_the_host() -> None:
    """feature_calibration and the matrix rejection curve compute on the host: a cupy weight column is
    copied there, as their scores are, not refused as another device than numpy's."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200).astype(float)
    p = rng.uniform(0.05, 0.95, 200)
    w = rng.uniform(0.5, 2.0, 200)
    field = rng.integers(0, 3, 200)
    on_host = feature_calibration(y, p, p, field, sample_weight=w)
    on_device = feature_calibration(y, p, p, field, sample_weight=DeviceArray(w))
    assert on_device.values == on_host.values
    for name in ("weight", "count", "observed", "before", "after"):
        np.testing.assert_array_equal(getattr(on_device, name), getattr(on_host, name))
    matrix = np.column_stack([1 - p, p])
    labels = y.astype(np.int64)
    host_curve = rejection_curve(labels, matrix, sample_weight=w)
    device_curve = rejection_curve(labels, matrix, sample_weight=DeviceArray(w))
    pd.testing.assert_frame_equal(device_curve, host_curve)


def test_a_field_on_the_gpu_joins_host_scores_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cupy field is factorized on the device; its codes come to the host scores' rows."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 300).astype(float)
    p = rng.uniform(0.05, 0.95, 300)
    field = rng.integers(0, 4, 300)

    def factorized_on_device(values: Any, name: str) -> tuple[Any, Any]:
        codes, uniques = pd.factorize(values.get() if isinstance(values, DeviceArray) else values)
        return (DeviceArray(codes) if isinstance(values, DeviceArray) else codes), uniques

    monkeypatch.setattr(metrics_inputs, "factorize_values", factorized_on_device)
    assert field_ece(y, p, DeviceArray(field)) == field_ece(y, p, field)


def test_multiclass_clustered_scores_on_the_gpu_are_refused_by_name() -> None:
    """Its multi-class maps read a pandas frame: cupy columns get gpucal's error, not cupy's refusal."""
    from gpucal.ccl import ClusteredCalibrator
    from gpucal.ccl.fit import read_scores

    probs = np.full((4, 3), 1 / 3)
    X = {"p0": DeviceArray(probs[:, 0]), "p1": DeviceArray(probs[:, 1]), "p2": DeviceArray(probs[:, 2])}
    with pytest.raises(TypeError, match=r"multi-class scores \(score_col a list\) are read on the host"):
        read_scores(X, ["p0", "p1", "p2"])
    calibrator = ClusteredCalibrator(calibrator="dirichlet", score_col=["p0", "p1", "p2"])
    with pytest.raises(TypeError, match="read on the host"):
        calibrator.fit(X, DeviceArray(np.array([0, 1, 2, 0])))
    # A cudf frame converts itself to pandas, as it did before.
    frame = CudfLike(pd.DataFrame({"p0": probs[:, 0], "p1": probs[:, 1], "p2": probs[:, 2]}))
    object.__setattr__(frame, "to_pandas", lambda: unwrap(frame))
    np.testing.assert_array_equal(read_scores(frame, ["p0", "p1", "p2"])[0], probs)


def test_labels_on_the_gpu_are_compared_with_host_columns_on_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The label-leak check compares a host feature column with cupy labels on the host (cupy refuses
    numpy operands), and finds the column that holds the label."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, 2_000).astype(float)
    X = pd.DataFrame(
        {"score": rng.uniform(0.05, 0.95, 2_000), "site": rng.integers(0, 5, 2_000), "leak": labels}
    )
    on_device = DeviceArray(labels)
    monkeypatch.setattr(features_module, "_numeric_target", lambda y: y)
    rows = as_rows(X=X, y=on_device)
    assert resolve_feature_cols(rows, X, on_device, score_col="score", feature_cols=None) == ["site"]
    with pytest.raises(ValueError, match="'leak' holds the same values as y on every row"):
        resolve_feature_cols(rows, X, on_device, score_col="score", feature_cols=["site", "leak"])


@pytest.mark.parametrize(
    "values",
    [
        np.array([7, 3, 7, 1, 3, 9]),
        np.array([2.5, np.nan, -1.0, 2.5, np.nan, 0.0]),
        np.array([3.0, -np.nan, 1.0, np.nan, 2.0]),  # a NaN with its sign bit set, and one without
        np.array([0.0, 1.0, -0.0, 0.0]),
        np.array([True, False, False, True]),
        np.array([4]),
    ],
)
def test_fields_on_the_gpu_are_coded_in_order_of_first_appearance(values: np.ndarray) -> None:
    """cupy has no factorize: a cupy field's codes come from unique's first positions, in the order
    pandas gives a host field (segment_report's order of tied segments)."""
    codes, uniques = metrics_inputs.factorize_in_order(values)  # the array code, run on numpy
    expected_codes, expected_uniques = pd.factorize(values, use_na_sentinel=False)
    np.testing.assert_array_equal(codes, expected_codes)
    np.testing.assert_array_equal(uniques, expected_uniques)

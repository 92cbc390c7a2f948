"""Input paths on the GPU that no CPU test can take (marker ``gpu``): cupy labels beside host columns,
fields on the device, device rows fitted on the host.

Each was read against cupy's API; the label comparison and the field codes are also tested on stand-ins
and on numpy (``tests/test_cudf_stand_ins.py``), the host move of MBCT and HC nowhere else. These run
the real thing where cupy sees a GPU, and skip elsewhere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpucal import make_calibrator
from gpucal._backend import gpu_available
from gpucal.metrics import segment_report
from gpucal.metrics.inputs import factorize_values

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU (cupy.is_available())"),
]

FIELDS = ["site", "hour"]


def _rows(n: int = 6_000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    site, hour = rng.integers(0, 7, n), rng.integers(0, 5, n)
    logit = rng.normal(-1.0, 1.0, n)
    truth = 1.0 / (1.0 + np.exp(-(0.8 * logit + 0.3 * (site == 2) - 0.2 * (hour == 4))))
    frame = pd.DataFrame({"score": 1.0 / (1.0 + np.exp(-logit)), "site": site, "hour": hour})
    return frame, (rng.random(n) < truth).astype(np.float64)


def test_labels_on_the_gpu_beside_a_host_frame_fit_as_host_labels() -> None:
    """The label-leak check compares host columns with cupy labels on the host; the fit then follows
    the frame's device and equals the fit on host labels."""
    import cupy as cp

    X, y = _rows()
    host = make_calibrator("feature_platt", feature_cols=FIELDS).fit(X, y)
    mixed = make_calibrator("feature_platt", feature_cols=FIELDS).fit(X, cp.asarray(y))
    np.testing.assert_allclose(mixed.predict(X), host.predict(X), rtol=1e-12)
    leaking = X.assign(leak=y)
    with pytest.raises(ValueError, match="'leak' holds the same values as y on every row"):
        make_calibrator("feature_platt", feature_cols=[*FIELDS, "leak"]).fit(leaking, cp.asarray(y))


def test_a_field_on_the_gpu_reports_its_segments_as_on_the_host() -> None:
    """cupy codes a field in order of first appearance, as pandas does: tied segments (every excess 0
    here) come in the same order, 9, 3, 5, 1, as on the host."""
    import cupy as cp

    rows = np.arange(400)
    field = np.array([9, 3, 5, 1])[rows % 4]
    y = ((rows // 4) % 2).astype(np.float64)  # half the rows of every value positive
    p = np.full(400, 0.5)
    codes, uniques = factorize_values(cp.asarray(field), "site")
    np.testing.assert_array_equal(cp.asnumpy(codes), rows % 4)
    np.testing.assert_array_equal(uniques, [9, 3, 5, 1])
    on_host = segment_report(y, p, {"site": field})
    assert on_host["value"].tolist() == [9, 3, 5, 1]
    on_device = segment_report(cp.asarray(y), cp.asarray(p), {"site": cp.asarray(field)})
    pd.testing.assert_frame_equal(on_device, on_host, check_dtype=False)


@pytest.mark.parametrize("method", ["mbct", "hc"])
def test_device_rows_fitted_on_the_host_equal_host_rows(method: str) -> None:
    """MBCT and HC with ``device="cpu"`` move cupy rows to the host: the same model as a
    fit of the host rows, its predictions back in cupy."""
    import cupy as cp

    X, y = _rows()
    host = make_calibrator(method, feature_cols=FIELDS, device="cpu").fit(X, y)
    columns = {name: cp.asarray(X[name].to_numpy()) for name in X.columns}
    moved = make_calibrator(method, feature_cols=FIELDS, device="cpu").fit(columns, cp.asarray(y))
    predicted = moved.predict(columns)
    assert type(predicted).__module__.startswith("cupy")
    np.testing.assert_allclose(cp.asnumpy(predicted), host.predict(X), rtol=1e-12)

"""The serial and parallel twins of gpucal's row kernels (``gpucal.kernels.jit.parallel_rows``).

The input's size picks the twin; both twins give the oracle's result: bit for bit where the kernel sums
in fixed row chunks or counts integers, to rounding where a ``prange`` reduction sums floats in the
thread schedule's order (the recalibration sums).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from gpucal.calibrators._logistic_kernels import CHUNK_ROWS, FEATURES_LOGIT, logistic_sums
from gpucal.kernels import jit
from gpucal.kernels.lookup import _lookup_cpu, lookup_codes
from gpucal.metrics.calibration_tests import _recalibration_sums_cpu


def test_the_input_size_picks_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(_lookup_cpu, "serial", lambda *args: calls.append("serial"))
    monkeypatch.setattr(_lookup_cpu, "parallel", lambda *args: calls.append("parallel"))
    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    for n in (9, 10):
        _lookup_cpu(np.zeros(n, dtype=np.int64), 0, np.zeros(1, dtype=np.int8), -1, np.zeros((n, 1)), 0)
    with jit.parallel_twins_only():
        _lookup_cpu(np.zeros(1, dtype=np.int64), 0, np.zeros(1, dtype=np.int8), -1, np.zeros((1, 1)), 0)
    assert calls == ["serial", "parallel", "parallel"]
    assert _lookup_cpu.size(np.zeros((3, 4)), np.zeros((7, 5))) == 3


def _both_twins(call: Any) -> tuple[Any, Any]:
    """``call()`` on the serial twins (small inputs), then on the parallel ones."""
    serial = call()
    with jit.parallel_twins_only():
        return serial, call()


def test_chunked_float_sums_are_the_same_bits_in_both_twins() -> None:
    rng = np.random.default_rng(0)
    n = 2 * CHUNK_ROWS + 123  # three chunks
    p = rng.uniform(0.01, 0.99, n)
    y = (rng.uniform(size=n) < p).astype(np.float64)
    w = rng.uniform(0.5, 2.0, n)
    theta = np.array([0.9, -0.2])

    def sums(backend: str) -> tuple[float, np.ndarray, np.ndarray]:
        return logistic_sums(p, y, w, theta, mode=FEATURES_LOGIT, cols=[0], backend=backend)

    serial, parallel = _both_twins(lambda: sums("numba"))
    oracle = sums("array")
    for s, q, o in zip(serial, parallel, oracle, strict=True):
        np.testing.assert_array_equal(s, q)
        np.testing.assert_allclose(s, o, rtol=1e-10)


def test_design_sums_are_the_same_bits_in_both_twins() -> None:
    """The compiled loop of a design wider than two columns (Platt scaling on logit hinges)."""
    rng = np.random.default_rng(1)
    n = 2 * CHUNK_ROWS + 77  # three chunks
    x = rng.normal(-2.0, 1.5, n)
    design = np.column_stack([x, *(np.maximum(x - knot, 0.0) for knot in (-3.0, -2.0, -1.0))])
    y = (rng.uniform(size=n) < 0.2).astype(np.float64)
    w = rng.uniform(0.0, 2.0, n)
    theta = np.array([0.8, 0.1, -0.2, 0.05, -1.0])

    def sums(backend: str) -> tuple[float, np.ndarray, np.ndarray]:
        return logistic_sums(design, y, w, theta, targets=(0.01, 0.99), backend=backend)

    serial, parallel = _both_twins(lambda: sums("numba"))
    oracle = sums("array")
    for s, q, o in zip(serial, parallel, oracle, strict=True):
        np.testing.assert_array_equal(s, q)
        np.testing.assert_allclose(s, o, rtol=1e-10)


def test_integer_counts_are_exact_in_both_twins() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(-3, 40, 5_000)
    table = rng.integers(-1, 100, 30).astype(np.int8)

    def codes(backend: str) -> tuple[int, np.ndarray]:
        out = np.zeros((values.shape[0], 2), dtype=np.int8)
        return lookup_codes(values, 2, table, 7, out, 1, backend=backend), out

    (n_serial, serial), (n_parallel, parallel) = _both_twins(lambda: codes("cpu"))
    n_oracle, oracle = codes("oracle")
    assert n_serial == n_parallel == n_oracle > 0
    np.testing.assert_array_equal(serial, oracle)
    np.testing.assert_array_equal(parallel, oracle)


def test_a_prange_float_reduction_agrees_to_rounding() -> None:
    rng = np.random.default_rng(2)
    z = rng.normal(0.0, 2.0, 5_000)
    y = (rng.uniform(size=z.shape[0]) < 0.3).astype(np.float64)
    w = rng.uniform(0.5, 2.0, z.shape[0])
    a, b = 0.3, 0.8
    serial, parallel = _both_twins(lambda: _recalibration_sums_cpu(z, y, w, False, a, b))
    eta = a + b * z
    mu = 1.0 / (1.0 + np.exp(-eta))
    r, v = w * (y - mu), w * mu * (1.0 - mu)
    loglik = np.sum(w * (y * np.log(mu) + (1.0 - y) * np.log1p(-mu)))
    oracle = [z.shape[0], w.sum(), w @ y, loglik, r.sum(), r @ z, v.sum(), v @ z, v @ z**2]
    np.testing.assert_allclose(serial, oracle, rtol=1e-11)
    np.testing.assert_allclose(parallel, oracle, rtol=1e-11)


def test_numpy_row_chunks_cover_the_rows_once_from_aligned_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(jit.numba, "get_num_threads", lambda: 3)
    n = 3 * jit.CHUNK_ALIGN + 5
    seen = np.zeros(n, dtype=np.int64)
    chunks: list[tuple[int, int]] = []

    def work(start: int, stop: int) -> None:
        chunks.append((start, stop))
        seen[start:stop] += 1

    jit.numpy_row_chunks(work, n)
    assert sorted(chunks) == [(0, 2 * jit.CHUNK_ALIGN), (2 * jit.CHUNK_ALIGN, n)]
    assert (seen == 1).all()
    jit.numpy_row_chunks(work, 9)  # below PARALLEL_MIN_ROWS: one call
    assert chunks[-1] == (0, 9)
    monkeypatch.setattr(jit, "MAX_CHUNK_ROWS", 1)  # small chunks, still aligned
    chunks.clear()
    jit.numpy_row_chunks(work, n)
    assert sorted(chunks) == [(k * jit.CHUNK_ALIGN, min(n, (k + 1) * jit.CHUNK_ALIGN)) for k in range(4)]


def test_map_design_in_row_chunks_is_one_calls_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucal.trees.local_maps import _map_design, map_design

    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    score = np.random.default_rng(2).uniform(1e-12, 1.0, 3 * jit.CHUNK_ALIGN + 7)
    for kind in ("constant", "shift", "temperature", "platt", "beta"):
        got, want = map_design(score, kind), _map_design(score, kind)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


# Run in a fresh process: in a long-lived one malloc may serve a request from heap memory numpy advised
# earlier (after a library raised malloc's threshold for mapping afresh), which says nothing of empty_rows.
# It prints the VmFlags of the mappings holding the middle of a 64 MB empty_rows array and of numpy's own
# array of that size (numpy advises from the first 2 MB boundary inside an array on, a mapping of its own).
VM_FLAGS_OF_OUTPUTS = """
import json
import numpy as np
from gpucal.kernels.jit import empty_rows

def vm_flags(address):
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return None

n = 1 << 23
out, control = empty_rows(n), np.empty(n)
out[:] = 1.0
control[:] = 0.0
print(json.dumps([vm_flags(out.ctypes.data + 4 * n), vm_flags(control.ctypes.data + 4 * n)]))
"""


def test_empty_rows_is_a_fresh_float64_output() -> None:
    out = jit.empty_rows(1000)
    other = jit.empty_rows(1000)
    assert out.dtype == np.float64
    assert out.shape == (1000,)
    assert out.flags.c_contiguous
    assert out.flags.writeable
    out[:] = 1.0
    other[:] = 2.0
    assert (out == 1.0).all()
    assert jit.empty_rows(0).shape == (0,)


def test_empty_rows_is_not_advised_for_huge_pages() -> None:
    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("no /proc/self/smaps")
    done = subprocess.run(
        [sys.executable, "-c", VM_FLAGS_OF_OUTPUTS], capture_output=True, text=True, check=True, timeout=300
    )
    flags, control_flags = json.loads(done.stdout.strip().splitlines()[-1])
    # The check can see the advice: numpy's own array carries it where numpy gives it.
    if control_flags is None or "hg" not in control_flags:
        pytest.skip("numpy advises no huge pages here")
    assert "hg" not in flags


def test_sigmoid_in_row_chunks_is_one_calls_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucal.calibrators._logistic_kernels import _sigmoid_in_one_call, sigmoid

    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(jit, "MAX_CHUNK_ROWS", 1)  # many chunks of CHUNK_ALIGN rows
    z = np.random.default_rng(6).normal(scale=20.0, size=5 * jit.CHUNK_ALIGN + 13)
    z[:3] = (0.0, -800.0, 800.0)
    np.testing.assert_array_equal(sigmoid(z), _sigmoid_in_one_call(z))
    assert sigmoid(z[:9]).dtype == np.float64  # below the size: one call
    assert sigmoid(z.astype(np.float32)).dtype == np.float32  # not float64: one call, numpy's dtype


def test_clipped_logits_in_row_chunks_are_one_calls_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucal.calibrators._feature_platt_kernels import EPS, score_feature
    from gpucal.calibrators.spline import transform_scores

    monkeypatch.setattr(jit, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(jit, "MAX_CHUNK_ROWS", 1)  # many chunks of CHUNK_ALIGN rows
    score = np.random.default_rng(7).uniform(size=5 * jit.CHUNK_ALIGN + 13)
    score[:2] = (0.0, 1.0)
    for eps, got in (
        (1e-9, transform_scores(score, 1e-9, "probability")),
        (EPS, score_feature(score, "probability")),
    ):
        clipped = np.clip(score, eps, 1.0 - eps)
        np.testing.assert_array_equal(got, np.log(clipped / (1.0 - clipped)))

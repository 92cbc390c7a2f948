"""benchmarks/bench_gpu.py (issue 17): its dry run, so the GPU benchmark cannot rot before a GPU is lent."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """Run ``bench_gpu.py --dry-run --out`` once in a fresh interpreter; return the report and its JSON.

    On 5,000 rows, not the dry run's 1e4: every case's calls and checks are the same, and the neural and
    clustered fits (most of the run) take half the time.
    """
    out = tmp_path_factory.mktemp("bench_gpu") / "gpu.md"
    script = str(ROOT / "benchmarks" / "bench_gpu.py")
    done = subprocess.run(
        [sys.executable, script, "--dry-run", "--sizes", "5000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text(), json.loads(out.with_suffix(".json").read_text())


def test_dry_run_reports_every_case_checked_and_passing(dry_run):
    text, data = dry_run
    assert data["dry_run"] is True
    assert "**Dry run: no GPU.**" in text
    names = [case.name for case in bench_gpu.all_cases()]
    assert [c["name"] for c in data["cases"]] == names
    by_case = {r["case"]: r for r in data["results"]}
    for name in names:
        assert f"| {name} |" in text
        record = by_case[name]
        assert not [key for key in record if key.endswith("error") or key.endswith("skipped")], record
        assert record["check"]["passed"], record
        assert record["cpu_s"] is not None
        assert record["gpu_s"] is not None
    # Nothing in a dry run is a GPU figure: no floor, no device memory.
    assert all(r["floor_s"] is None and r["peak_device_bytes"] is None for r in data["results"])


def test_dry_run_report_lists_transfers_and_paths_without_a_gpu_implementation(dry_run):
    text, data = dry_run
    assert {t["column"] for t in data["transfers"]} == set(bench_gpu.COLUMN_BYTES)
    assert "## GPU paths gpucal does not have" in text
    for item in bench_gpu.NOT_ON_GPU:
        assert item in text


def test_every_case_says_where_it_runs_and_reads_known_columns():
    for case in bench_gpu.all_cases():
        assert case.runs_on in ("device", "partly", "host"), case.name
        assert set(case.columns) <= set(bench_gpu.COLUMN_BYTES), case.name
        assert case.bytes_moved(10) > 0


def probe_case(rtol: float) -> bench_gpu.Case:
    """A case whose output is compared as it is."""
    return bench_gpu.Case(
        name="probe", runs_on="device", note="", columns=("score",), run=lambda r, s: r, rtol=rtol
    )


def test_compare_passes_within_the_tolerance_and_fails_beyond_it():
    expected = np.linspace(0.1, 0.9, 100)
    assert bench_gpu.compare(probe_case(1e-6), expected, expected * (1 + 1e-8), {})["passed"]
    result = bench_gpu.compare(probe_case(1e-6), expected, expected * (1 + 1e-3), {})
    assert not result["passed"]
    assert result["relative_error"] == pytest.approx(1e-3)


@pytest.mark.parametrize(
    ("got", "message"),
    [(np.array([0.5, np.nan]), "non-finite GPU output"), (np.array([0.5]), "shapes differ")],
)
def test_compare_fails_on_nan_and_on_a_shape_mismatch(got, message):
    result = bench_gpu.compare(probe_case(1.0), np.array([0.5, 0.5]), got, {})
    assert not result["passed"]
    assert message in result["error"]


def test_budget_skips_a_call_projected_past_the_case_share():
    budget = bench_gpu.Budget(deadline=bench_gpu.time.perf_counter() + 10.0, cases_left=2)
    budget.start_case()  # about 5 s for this case
    assert budget.fits(None)
    assert budget.fits(1.0)
    assert not budget.fits(60.0)


def test_rows_are_the_same_for_a_seed_and_hold_every_column():
    first, second = bench_gpu.make_rows(3000, seed=4), bench_gpu.make_rows(3000, seed=4)
    assert set(first) == set(bench_gpu.COLUMN_BYTES)
    for name, column in first.items():
        np.testing.assert_array_equal(column, second[name])
        assert column.nbytes == 3000 * bench_gpu.COLUMN_BYTES[name], name
    assert set(np.unique(first["label"])) == {0.0, 1.0}


def spin_until_stopped() -> None:
    """Loop in Python until a signal handler raises."""
    while True:
        pass


def test_time_limit_stops_a_call_in_python_code():
    start = bench_gpu.time.perf_counter()
    with pytest.raises(bench_gpu.CallStopped, match="stopped after"), bench_gpu.time_limit(0.2):
        spin_until_stopped()
    assert bench_gpu.time.perf_counter() - start < 5.0


def dry_run_args(**overrides: object) -> argparse.Namespace:
    """Arguments of an in-process dry run of one cheap case."""
    args = {
        "dry_run": True,
        "cases": ["metric.brier"],
        "sizes": [1e3, 4e3],
        "max_rows": bench_gpu.MAX_ROWS,
        "budget_s": 60.0,
        "repeats": 1,
    }
    return argparse.Namespace(**(args | overrides))


def test_run_measures_each_size_and_hands_over_the_data_after_each_case(tmp_path):
    handed = []
    data = bench_gpu.run(dry_run_args(), after_each_case=lambda d: handed.append(len(d["results"])))
    assert handed == [2]
    assert [r["rows"] for r in data["results"]] == [1000, 4000]
    assert all(r["check"]["passed"] for r in data["results"])
    text = bench_gpu.write_report(data, tmp_path / "gpu.md")
    assert "| metric.brier | device | 4e+03 |" in text
    assert (tmp_path / "gpu.json").exists()


def test_run_with_its_budget_spent_skips_the_cases_and_says_so(tmp_path):
    data = bench_gpu.run(dry_run_args(budget_s=0.0), after_each_case=lambda d: None)
    assert data["results"] == [
        {"case": "metric.brier", "rows": None, "skipped": "the run's budget was spent before this case"}
    ]
    text = bench_gpu.write_report(data, tmp_path / "gpu.md")
    assert "`metric.brier` at every size rows: skipped" not in text
    assert "`metric.brier` at every size: skipped, the run's budget was spent" in text


class FreeMemory:
    """A device reporting a fixed amount of free memory."""

    def __init__(self, free_bytes: int) -> None:
        self.free = free_bytes

    def free_bytes(self) -> int:
        return self.free


def test_largest_size_fills_half_the_free_memory_up_to_the_cap():
    per_row = sum(bench_gpu.COLUMN_BYTES.values()) + bench_gpu.WORKING_BYTES_PER_ROW
    rows, reason = bench_gpu.largest_size(FreeMemory(2 * per_row * 10**6), max_rows=10**9)
    assert rows == 10**6
    assert "free" in reason
    rows, reason = bench_gpu.largest_size(FreeMemory(2 * per_row * 10**6), max_rows=10**5)
    assert rows == 10**5
    assert "--max-rows" in reason
    assert bench_gpu.largest_size(bench_gpu.HostClock(), max_rows=10**5)[0] is None


@pytest.mark.parametrize(
    ("n_rows", "text"), [(10**7, "1e+07"), (257_000_000, "2.57e+08"), (None, "every size")]
)
def test_row_counts_print_exactly(n_rows, text):
    assert bench_gpu.rows_text(n_rows) == text


def test_a_gpu_run_report_states_the_device_and_the_floor(tmp_path):
    # The branch only a GPU run takes, fed the fields CupyDevice.describe returns.
    data = bench_gpu.run(dry_run_args(sizes=[1e3]), after_each_case=lambda d: None)
    data["dry_run"] = False
    data["device"] = {
        "name": "NVIDIA H100 80GB HBM3",
        "compute_capability": "9.0",
        "multiprocessors": 132,
        "memory_gib": 79.2,
        "free_with_data_gib": 70.1,
        "copy_bandwidth_gbs": 3000.0,
        "spec_bandwidth_gbs": 3352.3,
        "cuda_runtime": 13000,
        "driver": 13000,
    }
    text = bench_gpu.write_report(data, tmp_path / "gpu.md")
    assert "Dry run" not in text
    assert "compute capability 9.0, 132 multiprocessors" in text
    assert "copy 3000.0 GB/s measured (read + write), datasheet 3352.3 GB/s" in text

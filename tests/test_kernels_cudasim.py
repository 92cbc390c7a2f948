"""Runs the CUDA kernels in numba-cuda's simulator (``tests/cudasim/sim_*.py``) in a child process.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is first imported, and this process has imported
numba already, so the simulator suites run in a child pytest with the variable set: one child runs every
suite (each child pays the start-up of an interpreter, pytest, numba and gpucal), whose JUnit report
gives each suite's outcome to its own test here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SUITES = ["sim_kernels.py", "sim_split_mvce.py", "sim_trees.py", "sim_mbct.py", "sim_hc.py"]
FOLDER = Path(__file__).resolve().parent / "cudasim"


@pytest.fixture(scope="module")
def simulator_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, ET.Element]:
    """Every suite of :data:`SUITES` in one child pytest; return the run and its JUnit XML report."""
    repo = FOLDER.parent.parent
    report = tmp_path_factory.mktemp("cudasim") / "junit.xml"
    env = {
        **os.environ,
        "NUMBA_ENABLE_CUDASIM": "1",
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*command, f"--junitxml={report}", *(str(FOLDER / suite) for suite in SUITES)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert report.exists(), run.stdout[-6000:] + run.stderr[-3000:]
    return run, ET.parse(report).getroot()


@pytest.mark.parametrize("suite", SUITES)
def test_simulator_suite_matches_the_oracle(suite, simulator_run):
    run, report = simulator_run
    output = run.stdout[-6000:] + run.stderr[-3000:]
    # 0: every test passed; 1: some failed (found below, by suite); else nothing ran or pytest broke.
    assert run.returncode in (0, 1), output
    module = f"tests.cudasim.{Path(suite).stem}"
    cases = [case for case in report.iter("testcase") if case.get("classname") == module]
    not_passed = [
        f"{case.get('name')}: {child.tag}"
        for case in cases
        for child in case
        if child.tag in ("failure", "error", "skipped")
    ]
    assert cases, f"{suite}: no test ran\n{output}"
    assert not not_passed, f"{suite}: {not_passed}\n{output}"

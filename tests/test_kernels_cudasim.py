"""Runs the CUDA kernels in numba-cuda's simulator (``tests/cudasim/sim_*.py``) in child processes.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is first imported, and this process has imported
numba already, so the simulator suite runs in a child pytest with the variable set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITES = ["sim_kernels.py", "sim_split_mvce.py", "sim_trees.py", "sim_mbct.py", "sim_hc.py"]


@pytest.mark.parametrize("suite", SUITES)
def test_simulator_suite_matches_the_oracle(suite):
    path = Path(__file__).resolve().parent / "cudasim" / suite
    repo = path.parent.parent.parent
    env = {
        **os.environ,
        "NUMBA_ENABLE_CUDASIM": "1",
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(path)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert " passed" in summary, summary
    assert "skipped" not in summary, summary

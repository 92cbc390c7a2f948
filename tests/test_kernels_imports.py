"""``import gpucal.kernels`` and ``import gpucal`` load no GPU module: numba.cuda loads on the CUDA path
only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpucal.kernels as device_code

REPO = Path(device_code.__file__).resolve().parent.parent
# Module prefixes that only the CUDA path may load.
GPU_MODULES = ("numba.cuda", "numba_cuda.", "cupy", "cudf", "dask_cuda")
SCRIPT = """
import sys
import {package}
loaded = sorted(m for m in sys.modules if m == "numba.cuda" or m.startswith({prefixes!r}))
print(",".join(loaded))
"""


@pytest.mark.parametrize("package", [device_code.__name__, "gpucal"])
def test_import_loads_no_gpu_module(package):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    code = SCRIPT.format(package=package, prefixes=GPU_MODULES)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "", f"import {package} loaded {run.stdout.strip()}"


def test_cpu_calls_load_no_gpu_module():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    code = SCRIPT.format(package=device_code.__name__, prefixes=GPU_MODULES).replace(
        "loaded =",
        "import numpy as np\n"
        "gpucal.kernels.group_sums(np.zeros((3, 1), np.int8), np.ones(3), np.ones(3))\n"
        "gpucal.kernels.view_sums(np.ones(3), np.ones(3), n_views=1, bin_size=1, seed=0)\n"
        "loaded =",
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "", f"CPU calls loaded {run.stdout.strip()}"


def test_a_module_imported_first_leaves_its_public_name_the_function():
    # Kernel modules import ``gpucal.kernels.group_sums`` for its helpers and the checks import
    # ``gpucal.kernels.value_range``; Python binds a loaded submodule to the package's attribute of
    # its name, which must not hide the function of that name.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = (
        "import types\n"
        "import gpucal.kernels.split_mvce, gpucal.kernels.value_range\n"
        "from gpucal.kernels import group_sums, value_range\n"
        "import gpucal.kernels as k\n"
        "names = (group_sums, value_range, k.group_sums, k.value_range)\n"
        "print(sum(isinstance(f, types.FunctionType) for f in names))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "4"

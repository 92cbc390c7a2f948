"""``import gpucal`` and ``gpucal --help`` load no heavy library (issue 18: they took about 1.8 s).

pandas, numba, scikit-learn and scipy load where they are used, on first use of a gpucal name. The
check is on the modules loaded, not on a timing, so it is deterministic; measured on the CI machine,
``import gpucal`` then takes about 0.03 s after ``import numpy`` instead of 1.8 s.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import gpucal
import gpucal.kernels as device_code

REPO = Path(gpucal.__file__).resolve().parent.parent
#: Libraries that take tenths of a second or more to import, and gpucal's own modules that pull them in.
HEAVY_MODULES = (
    "pandas",
    "pyarrow",
    "numba",
    "sklearn",
    "scipy",
    "torch",
    "dask",
    "distributed",
    "matplotlib",
    "cupy",
    "cudf",
    "gpucal.calibrators",
    "gpucal.datasets",
    "gpucal.encoding",
    "gpucal.kernels.group_sums",
)
# Imports each gpucal module first (gpucal's own modules forgotten in between; the libraries stay loaded):
# with lazy packages any module can be the first one a process imports, and each must import on its own.
# Each module is compiled to bytecode once, into the folder given as the first argument, and read from
# there when imported again (with PYTHONDONTWRITEBYTECODE set, every import compiled the source anew: the
# package's modules once per module of the walk).
IMPORT_EACH_FIRST = """
import importlib, pkgutil, sys
import numpy, pandas, numba, sklearn, scipy.stats
sys.pycache_prefix, sys.dont_write_bytecode = sys.argv[1], False
import gpucal
names = ["gpucal"] + [m.name for m in pkgutil.walk_packages(gpucal.__path__, "gpucal.")]
failed = []
for name in names:
    if name.endswith("__main__"):
        continue
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("gpucal", "kernels")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as error:
        failed.append(f"{name}: {error}")
print("\\n".join(failed))
"""
LOADED = """
import sys
{statement}
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + "." for h in heavy)))))
"""


def heavy_modules_loaded(statement: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = "import json\n" + LOADED.format(statement=statement, heavy=HEAVY_MODULES)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(run.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "statement",
    [
        "import gpucal",
        "import gpucal.kernels",
        "import gpucal.cli\ntry:\n    gpucal.cli.main(['--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["import gpucal", "import gpucal.kernels", "gpucal --help"],
)
def test_loads_no_heavy_module(statement: str):
    assert heavy_modules_loaded(statement) == []


@pytest.mark.parametrize("package", ["gpucal", device_code.__name__])
def test_public_names_still_resolve(package: str):
    # Each name of __all__ imports its module on first use and is what it was: not a module of that name.
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, ModuleType) or name in ("datasets", "distributed", "metrics"), name
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        _ = module.no_such_name


def test_submodules_stay_attributes():
    assert gpucal.make_calibrator("platt").__class__ is gpucal.PlattCalibrator
    assert gpucal.datasets.make_ctr is gpucal.datasets.synthetic.make_ctr
    assert gpucal.factory.CALIBRATORS["mbct"] is gpucal.MBCT
    assert gpucal.catalogue.METHODS["neucalib"] is gpucal.FieldAwareCalibrator


def test_every_module_imports_first(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_FIRST, str(tmp_path / "bytecode")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == ""

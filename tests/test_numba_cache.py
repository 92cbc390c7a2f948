"""numba caches gpucal's kernels in a user cache folder, never inside the package (issue 18).

A cache inside an installed package outlives ``pip install -e .`` and turns ``gpucal`` into an empty
namespace package; these tests run a cached kernel in a fresh process and look where its files went.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpucal.kernels
from gpucal.kernels import numba_cache

PACKAGE_DIRS = [
    Path(gpucal.kernels.__file__).resolve().parent,
    Path(gpucal.kernels.__file__).resolve().parent.parent / "gpucal",
]
REPO = PACKAGE_DIRS[1].parent
# A small cache=True kernel: compiles in about a second.
CALL_A_KERNEL = (
    "import numpy as np\nfrom gpucal.kernels._feistel import mix64\nprint(int(mix64(np.uint64(3))))\n"
)
NOTICE = "gpucal: compiling CPU kernels"


def package_cache_files() -> dict[Path, float]:
    """numba's index and data files under the package folders, with their modification times."""
    return {
        path: path.stat().st_mtime
        for folder in PACKAGE_DIRS
        for pattern in ("*.nbi", "*.nbc")
        for path in folder.rglob(pattern)
    }


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process with no NUMBA_CACHE_DIR and an empty user cache folder."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env.pop("NUMBA_CACHE_DIR", None)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


@pytest.fixture
def clean_choice(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Let a test choose the folder anew under its own environment, and forget that choice after it."""
    numba_cache.numba_cache_dir.cache_clear()
    yield monkeypatch
    numba_cache.numba_cache_dir.cache_clear()


def test_a_cached_kernel_writes_to_the_user_cache_not_the_package(fresh_env: dict[str, str], tmp_path: Path):
    # Regression test for issue 18: `pip install .` then `gpucal demo` left numba's files in site-packages.
    before = package_cache_files()
    run = run_python(CALL_A_KERNEL + "import os\nprint(os.environ['NUMBA_CACHE_DIR'])\n", fresh_env)
    assert package_cache_files() == before
    cache_dir = Path(run.stdout.split()[-1])
    assert cache_dir == tmp_path / "xdg" / "gpucal" / "numba"
    assert list(cache_dir.rglob("_feistel.mix64-*.nbi")), "the kernel was not cached in the user cache folder"


def test_a_compile_is_announced_once_and_a_cache_load_not_at_all(fresh_env: dict[str, str]):
    two_kernels = (
        CALL_A_KERNEL
        + "from gpucal.kernels._feistel import view_keys\nview_keys(np.uint64(1), np.uint64(2))\n"
    )
    first = run_python(two_kernels, fresh_env)
    assert first.stderr.count(NOTICE) == 1, first.stderr
    again = run_python(CALL_A_KERNEL, fresh_env)
    assert NOTICE not in again.stderr


def test_numba_imported_first_still_caches_in_the_user_folder(fresh_env: dict[str, str], tmp_path: Path):
    run_python("import numba\n" + CALL_A_KERNEL, fresh_env)
    assert list((tmp_path / "xdg" / "gpucal" / "numba").rglob("_feistel.mix64-*.nbi"))


def test_numba_cache_dir_set_by_the_user_wins(clean_choice: pytest.MonkeyPatch, tmp_path: Path):
    clean_choice.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert numba_cache.numba_cache_dir() == tmp_path / "mine"


def test_user_cache_folder_follows_xdg(clean_choice: pytest.MonkeyPatch, tmp_path: Path):
    clean_choice.delenv("NUMBA_CACHE_DIR", raising=False)
    clean_choice.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert numba_cache.numba_cache_dir() == tmp_path / "gpucal" / "numba"


def test_unwritable_folders_fall_back_to_a_temporary_one(clean_choice: pytest.MonkeyPatch, tmp_path: Path):
    # A read-only image: nothing under a regular file can be created, even by root.
    blocker = tmp_path / "read-only"
    blocker.write_text("")
    clean_choice.setenv("NUMBA_CACHE_DIR", str(blocker / "numba"))
    clean_choice.setenv("XDG_CACHE_HOME", str(blocker / "xdg"))
    clean_choice.setenv("HOME", str(blocker))
    assert numba_cache.numba_cache_dir() == numba_cache.temporary_cache_dir()


@pytest.mark.slow
def test_after_warm_up_the_demo_compiles_nothing(fresh_env: dict[str, str]):
    warm = run_python("from gpucal.warmup import warm_up\nwarm_up()\n", fresh_env)
    assert warm.stderr.count(NOTICE) == 1, warm.stderr
    demo = run_python("from gpucal.cli import main\nmain(['demo', '--rows', '20000'])\n", fresh_env)
    assert NOTICE not in demo.stderr


# AutoCalibrator on a user's larger data: a large set (its second-order candidates, the design loop of
# 32,768 rows and more) on the serial twins, then on the parallel ones (PARALLEL_MIN_ROWS rows), with and
# without weights, the fields categorical and two of them numeric; each fitted and applied.
FIT_AUTO_ON_LARGE_SETS = """
import numpy as np
from gpucal.datasets import make_ctr
from gpucal.factory import make_calibrator
fields = ['site_id', 'ad_category', 'region', 'hour', 'user_segment', 'device']
some_numeric = ['site_id', 'ad_category', 'user_segment', 'device']  # region and hour: numbers
for n_rows, categorical in ((150_000, fields), (150_000, some_numeric), (300_000, fields)):
    frame = make_ctr(2 * n_rows, 'mixed', seed=3)
    fit, held_out = frame.iloc[:n_rows], frame.iloc[n_rows:]
    for weights in (None, np.linspace(0.5, 2.0, n_rows)):
        model = make_calibrator('auto', feature_cols=fields, categorical_cols=categorical)
        model.fit(fit[['score', *fields]], fit['label'], sample_weight=weights)
        model.predict(held_out[['score', *fields]])
"""


def test_the_auto_warm_up_fits_the_fewest_rows_of_a_large_set_with_compiled_passes():
    from gpucal.auto.sizing import LARGE_ROWS
    from gpucal.calibrators._logistic_kernels import NUMBA_MIN_ROWS
    from gpucal.kernels.jit import PARALLEL_MIN_ROWS
    from gpucal.warmup import WARM_UP_AUTO_ROWS

    assert WARM_UP_AUTO_ROWS == max(LARGE_ROWS + 1, NUMBA_MIN_ROWS)
    assert WARM_UP_AUTO_ROWS < PARALLEL_MIN_ROWS  # the parallel pass forces the twins on fewer


@pytest.mark.slow
def test_after_warm_up_a_first_auto_fit_on_large_sets_compiles_nothing(fresh_env: dict[str, str]):
    run_python("from gpucal.warmup import warm_up\nwarm_up()\n", fresh_env)
    auto = run_python(FIT_AUTO_ON_LARGE_SETS, fresh_env)
    assert NOTICE not in auto.stderr, auto.stderr


def test_import_gpucal_changes_nothing_in_the_process(fresh_env: dict[str, str]):
    """A library does not change its process on import: the environment and the import system stay."""
    code = (
        "import os, sys\n"
        "env, finders = dict(os.environ), list(sys.meta_path)\n"
        "import gpucal, kernels\n"
        "assert dict(os.environ) == env and sys.meta_path == finders, 'import changed the process'\n"
        "import gpucal.calibrators\n"  # the first module that compiles
        "assert os.environ['NUMBA_CACHE_DIR'] and os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'\n"
    )
    fresh_env.pop("OMP_WAIT_POLICY", None)
    run_python(code, fresh_env)


def test_warm_up_without_the_automatic_calibrator_skips_its_fits(monkeypatch: pytest.MonkeyPatch):
    """``automatic=False`` runs the single calibrators' passes only (both dtypes, both kinds of twin)."""
    import gpucal.warmup as warmup

    calls: list[str] = []
    monkeypatch.setattr(warmup, "_warm_pass", lambda frame, fields: calls.append("pass"))
    monkeypatch.setattr(warmup, "_warm_auto", lambda frame, fields: calls.append("auto"))
    monkeypatch.setattr("gpucal.datasets.make_ctr", lambda *args, **kwargs: None)
    warmup.warm_up(automatic=False)
    assert calls == ["pass"] * 2 * len(warmup.WARM_UP_DTYPES)
    calls.clear()
    warmup.warm_up()
    assert calls.count("auto") == 2
    assert calls.count("pass") == 2 * len(warmup.WARM_UP_DTYPES)

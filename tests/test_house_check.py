"""The house check (``.ci/house_check.py``) finds what it is for, in snippets written to break each rule."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

CHECKER = Path(__file__).resolve().parent.parent / ".ci" / "house_check.py"
spec = importlib.util.spec_from_file_location("house_check", CHECKER)
assert spec is not None
assert spec.loader is not None
house_check = importlib.util.module_from_spec(spec)
sys.modules["house_check"] = house_check  # its dataclass looks its module up
spec.loader.exec_module(house_check)


def rules(source: str, module: str = "gpucal.mbct.fit", is_package: bool = False) -> list[str]:
    return [f.rule for f in house_check.check_source(source, "snippet.py", module, is_package)]


@pytest.mark.parametrize(
    "source",
    [
        "from gpucal.calibrators._logistic import sigmoid\n",
        "import gpucal.rows._checks\n",
        "from gpucal.rows import _checks\n",
        "from gpucal.persistence import _REGISTRY\n",
        "def f():\n    from gpucal.calibrators.platt import _OPTIONS\n",
        "from kernels._feistel import mix64\n",
        "from gpucal.kernels._feistel import mix64\n",
        "from gpucal import rows\nrows._reduce.merge_tables\n",
        "import gpucal.rows as r\nr._checks.check_weight(w)\n",
        "from gpucal.rows import Rows\nRows._private\n",
    ],
)
def test_a_private_import_from_another_package_is_found(source: str) -> None:
    assert rules(source) == ["private-import"]


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("from gpucal.mbct._node_size import node_size\n", "gpucal.mbct.fit"),
        ("from ._node_size import node_size\n", "gpucal.mbct.fit"),
        ("from gpucal.calibrators.logistic import sigmoid\n", "gpucal.mbct.fit"),
        ("from gpucal._frames import wrap_output\n", "gpucal.mbct.fit"),
        ("from gpucal.kernels._feistel import mix64\n", "gpucal.kernels.views_cpu"),
        ("from kernels._feistel import mix64\n", "gpucal.kernels.views_cpu"),
    ],
)
def test_own_package_and_public_modules_pass(source: str, module: str) -> None:
    assert rules(source, module) == []


def test_isinstance_on_a_rows_implementation_outside_rows_is_found() -> None:
    source = "def f(rows):\n    return isinstance(rows, LocalRows) or isinstance(rows, (m.DaskRows, int))\n"
    assert rules(source) == ["rows-isinstance", "rows-isinstance"]
    assert rules(source, "gpucal.rows.local") == []


@pytest.mark.parametrize(
    "source",
    [
        "from gpucal.rows import LocalRows as L\nisinstance(rows, L)\n",
        "type(rows) is LocalRows\n",
        "match rows:\n    case StreamedRows():\n        pass\n",
        'type(rows).__name__ == "DaskRows"\n',
        "dispatch.register(LocalRows)\n",
    ],
)
def test_a_rows_implementation_read_as_a_type_is_found(source: str) -> None:
    assert rules(source) == ["rows-isinstance"]


def test_a_rows_implementation_may_be_built_and_annotated() -> None:
    source = "from gpucal.rows import LocalRows\ndef f(b) -> LocalRows:\n    x: LocalRows = LocalRows((b,))\n"
    assert rules(source) == []


@pytest.mark.parametrize(
    "source",
    [
        'import importlib\nimportlib.import_module("gpucal.loading")\n',
        'from importlib import import_module\nimport_module("kernels.trees")\n',
        "__import__(name)\n",
        'def f(package):\n    return import_module(f"{package}.loading")\n',
        'from importlib import import_module as load\nload("gpucal.loading")\n',
        'import pkgutil\npkgutil.resolve_name("gpucal.loading:load")\n',
        'import sys\nsys.modules["gpucal.loading"]\n',
        'import sys\nsys.modules.get("gpucal.loading")\n',
        'import importlib\ngetattr(importlib, "import_module")\n',
    ],
)
def test_an_import_by_string_is_found(source: str) -> None:
    assert rules(source) == ["string-import"]


def test_other_libraries_and_lazy_package_names_may_be_imported_by_string() -> None:
    assert rules('import importlib\nimportlib.import_module("matplotlib")\n') == []
    lazy = "def __getattr__(name):\n    return import_module(_MODULE_OF[name])\n"
    assert rules(lazy, "gpucal", is_package=True) == []
    assert rules(lazy, "gpucal.mbct.fit") == ["string-import"]  # not in a package's __init__
    own_entry = "import sys\nsys.modules[__name__].__class__ = PublicNames\n"
    assert rules(own_entry, "gpucal", is_package=True) == []


def test_a_wheel_with_another_top_level_package_is_found(tmp_path: Path) -> None:
    wheel = tmp_path / "gpucal-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("gpucal/__init__.py", "gpucal/kernels/__init__.py", "gpucal-0.dist-info/METADATA"):
            archive.writestr(name, "")
    assert house_check.check_wheel(wheel) == []
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("gpucal-0.data/purelib/kernels/__init__.py", "")
    assert [f.rule for f in house_check.check_wheel(wheel)] == ["wheel"]
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("kernels/__init__.py", "")
    assert [f.rule for f in house_check.check_wheel(wheel)] == ["wheel"]


def test_the_checker_reads_a_tree_and_exits_with_its_findings(tmp_path: Path) -> None:
    (tmp_path / "gpucal" / "mbct").mkdir(parents=True)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "gpucal" / "mbct" / "fit.py").write_text("from gpucal.rows._reduce import merge_tables\n")
    (tmp_path / "kernels" / "trees.py").write_text("from kernels._rowmath import logit\n")
    assert house_check.main(["--repo", str(tmp_path)]) == 1
    (tmp_path / "gpucal" / "mbct" / "fit.py").write_text("from gpucal.rows.reduce import merge_tables\n")
    assert house_check.main(["--repo", str(tmp_path)]) == 0

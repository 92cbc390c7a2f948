"""The README's quick start runs as written (with fewer rows), so the first thing users copy cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_quick_start_runs(tmp_path, monkeypatch):
    block = re.search(r"## Quick start\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no Quick start python block"
    monkeypatch.chdir(tmp_path)  # it saves auto.json in the working directory
    namespace: dict = {}
    exec(compile(block.group(1).replace("1_000_000", "50_000"), "README.md", "exec"), namespace)
    assert (tmp_path / "auto.json").exists()
    assert 0.0 <= namespace["metrics"].ece(namespace["held_out"]["label"], namespace["p"]) < 0.05


def test_mbct_example_runs(capsys):
    block = re.search(r"## MBCT\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no MBCT python block"
    namespace: dict = {}
    code = block.group(1).replace("400_000", "40_000").replace("200_000", "20_000")
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["calibrated"].index.equals(namespace["test"].index)
    out = capsys.readouterr()
    assert "FROM impressions" in out.out
    assert "tree 1" in out.err


def test_dask_example_runs():
    block = re.search(r"## Dask and Docker\n\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no Dask python block"
    exec(compile(block.group(1).replace("200_000", "20_000"), "README.md", "exec"), {})


def test_partition_example_runs(capsys):
    block = re.search(
        r"## Heterogeneous and clustered calibration\n\n```python\n(.*?)```", README.read_text(), re.S
    )
    assert block is not None, "README has no HC / CCL python block"
    code = (
        block.group(1).replace("300_000", "30_000").replace("100_000", "10_000").replace("200_000", "20_000")
    )
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert "Calibration tree rules" in capsys.readouterr().out
    assert namespace["p"].index.equals(namespace["test"].index)


def test_ci_runs_the_readme_test_command_word_for_word():
    """.ci/run installs and tests exactly as the README's test command does (MCGrad included), and only
    CI installs NVIDIA's compiler wheels (the ``ptx`` extra)."""
    block = re.search(r"## The two commands\n\n.*?```bash\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "README has no 'The two commands' block"
    command = block.group(1).strip().splitlines()[-1]
    assert command.endswith('python -m pytest -m "not slow and not ptx"'), command
    assert "--no-deps MCGrad" in command
    extras = re.search(r'-e "\.\[(.*?)\]"', command)
    assert extras is not None, command
    assert "ptx" not in extras.group(1).split(",")
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert command in ci


def test_the_first_command_is_the_one_checked_and_measured():
    """.ci/check_install and benchmarks/bench_first_run.py install gpucal with the options of the README's
    first command, read from the README: what they check and time is what the user runs."""
    import runpy

    first = [line for line in README.read_text().splitlines() if line.endswith(" . && gpucal demo")]
    assert first == ["pip install --no-compile . && gpucal demo"]
    check_install = (README.parent / ".ci" / "check_install").read_text()
    assert "grep -m1 -x 'pip install.* \\. && gpucal demo'" in check_install
    bench = runpy.run_path(str(README.parent / "benchmarks" / "bench_first_run.py"))
    assert bench["readme_pip_options"]() == ["--no-compile"]

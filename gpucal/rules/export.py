"""``export_rules``: check the request, describe the chain's features, hand it to the writer of the format."""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gpucal.rules.chain import RuleChain, describe_features
from gpucal.rules.json_rules import rules_dict
from gpucal.rules.sql import SqlWriter
from gpucal.rules.text import TextWriter

if TYPE_CHECKING:
    from gpucal.encoding import FeatureEncoder
    from gpucal.trees.ensemble import TreeEnsemble

EXPORT_FORMATS = ("text", "json", "sql")


def export_rules(
    ensemble: TreeEnsemble,
    encoder: FeatureEncoder | None,
    *,
    score_col: Hashable,
    score_bins: int,
    init: Sequence[float] = (1.0, 0.0),
    format: str = "text",
    table: str | None = None,
    precision: int | None = None,
) -> str:
    r"""Write a fitted MBCT chain as text rules, JSON, or one SQL expression.

    Parameters
    ----------
    ensemble : TreeEnsemble
        The fitted trees; ``ensemble.feature_names`` are the encoder's columns and then the score bin.
    encoder : FeatureEncoder or None
        The fitted encoder whose codes the trees split on (through ``ensemble.code_maps``); None when the
        trees split on the score bin only.
    score_col : hashable
        The raw score column (probabilities in [0, 1]).
    score_bins : int
        Number of score bins :math:`N`: :math:`\min(\lfloor s N \rfloor, N - 1)`; 0 when the trees do not
        split on the score.
    init : (float, float), default (1.0, 0.0)
        ``(a0, b0)`` of the global Platt map applied to the score before the trees; ``(1, 0)`` is none.
    format : {"text", "json", "sql"}, default "text"
        See the module docstring.
    table : str, optional
        SQL only: return ``SELECT *, <expression> AS calibrated FROM <table>`` instead of the bare
        expression. The name is inserted as written, so it may be schema-qualified or quoted. The
        prediction is named ``calibrated`` whatever the table holds (``predict`` names it
        ``calibrated_1`` beside a column ``calibrated``): on such a table, name the bare expression.
    precision : int, optional
        Significant digits of the numbers written. None (default) writes every number so that it
        reads back as the same float64 (``repr`` in JSON and for bin edges in text; exact binary
        fractions in SQL), except the map parameters and weights of the text rules, which get
        ``TEXT_DIGITS`` (6). An integer rounds every number of every format, so JSON and SQL no
        longer reproduce the model exactly; SQL's clip bounds (``eps``, ``1 - eps`` and their logits)
        stay exact, or a score of 1 would divide by zero.

    Returns
    -------
    str
        The rules.

    Raises
    ------
    ValueError
        An unknown format, ``table`` without ``format="sql"``, a bad ``precision``, ``score_bins``
        or ``init``, an ensemble whose features do not match the encoder's codes, or an encoder with crosses.

    Notes
    -----
    SQL: a missing value must be ``NULL``. SQLite stores a NaN as ``NULL`` by itself; DuckDB and
    PostgreSQL keep NaN as a number greater than every other, so convert first (``NULLIF`` or
    ``CASE WHEN isnan(x)``). ``EXP`` and ``LN`` (needed unless ``leaf_map="scale"`` with
    ``init=(1, 0)``) are SQLite's math functions, built into the Python ``sqlite3`` module of most
    builds since SQLite 3.35; on a build without them, register them before running the query::

        connection.create_function("exp", 1, math.exp, deterministic=True)
        connection.create_function("ln", 1, math.log, deterministic=True)

    SQLite before 3.46 parses with a fixed stack that a tree about a dozen levels deep overflows
    ("parser stack overflow"); the number of trees does not matter (they are not nested).

    Examples
    --------
    >>> sql = export_rules(model.ensemble_, model.encoder_, score_col="score", score_bins=100,
    ...                    format="sql", table="events")  # doctest: +SKIP
    >>> rows = sqlite3.connect("events.db").execute(sql).fetchall()  # doctest: +SKIP
    """
    if format not in EXPORT_FORMATS:
        msg = (
            f"The 'format' parameter of export_rules must be one of {EXPORT_FORMATS}. Got {format!r} instead."
        )
        raise ValueError(msg)
    if table is not None and format != "sql":
        msg = f"table: only used with format='sql' (got format={format!r})"
        raise ValueError(msg)
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, int) or precision < 1
    ):
        msg = (
            "The 'precision' parameter of export_rules must be an int in [1, inf) or None. "
            f"Got {precision!r} instead."
        )
        raise ValueError(msg)
    if isinstance(score_bins, bool) or not isinstance(score_bins, int | np.integer) or score_bins < 0:
        msg = "The 'score_bins' parameter of export_rules must be an int in [0, inf). "
        msg += f"Got {score_bins!r} instead."
        raise ValueError(msg)
    if encoder is not None and encoder.interactions_:
        msg = (
            f"export_rules: the trees split on crosses of features {encoder.interactions_}; rules are "
            "written for the encoder's own columns only (fit without interactions to export rules)"
        )
        raise ValueError(msg)
    a0, b0 = _check_init(init)
    features = describe_features(ensemble, encoder, score_col=score_col, score_bins=int(score_bins))
    chain = RuleChain(ensemble, features, score_col, int(score_bins), (a0, b0), precision)
    if format == "text":
        return TextWriter(chain).write()
    if format == "json":
        return json.dumps(rules_dict(chain, encoder), indent=1)
    expr = SqlWriter(chain).write()
    if table is None:
        return expr
    return f"SELECT *,\n{expr} AS calibrated\nFROM {table}"


def _check_init(init: Sequence[float]) -> tuple[float, float]:
    try:
        a0, b0 = (float(v) for v in init)
    except (TypeError, ValueError):
        msg = f"init: expected a pair of numbers (a, b), got {init!r}"
        raise ValueError(msg) from None
    if not (math.isfinite(a0) and math.isfinite(b0)):
        msg = f"init: expected finite numbers, got {init!r}"
        raise ValueError(msg)
    return a0, b0


__all__ = ["EXPORT_FORMATS", "export_rules"]

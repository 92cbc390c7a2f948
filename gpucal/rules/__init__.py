r"""Export a fitted chain of calibration trees (MBCT's, HC's) as if-then rules: text, JSON, or SQL.

The MBCT paper serves its trees online as plain if-then rules (Huang et al. 2022, App. A.2); this
package writes the rules of a :class:`~gpucal.trees.ensemble.TreeEnsemble` in three forms, each computing
exactly what the Python predictor computes.

The model
---------
Feature ``j < len(encoder.feature_names_)`` is the encoder's column ``j`` (its codes as
:meth:`gpucal.encoding.FeatureEncoder.transform` gives them); the last feature (unless
``score_bins = 0``) is the score bin

.. math::

    \operatorname{bin}(s) = \min(\lfloor s N \rfloor, N - 1), \qquad N = \texttt{score\_bins},

of the original score column. The trees read these input codes through ``ensemble.code_maps`` (rare
codes share one tree code); the rules are written in input codes, i.e. in the raw values.

With ``init = (a_0, b_0) != (1, 0)`` a global Platt map comes first: for ``"scale"``,
:math:`f_0 = \sigma(a_0 \operatorname{logit}(\operatorname{clip}(s, \epsilon, 1 - \epsilon)) + b_0)`,
else :math:`f_0 = s`; :math:`\epsilon` is float64's machine epsilon, as in
:mod:`gpucal.calibrators.logistic`. Each tree ``t`` then sends the row from its root down to the
deepest node it reaches (it stops at a leaf, or at a node whose training rows never had the row's
value of the split feature) and applies that node's map :math:`(a, b)`:

- ``"scale"``: :math:`f_t = \min(a f_{t-1}, 1)`; the output is :math:`f_T`;
- ``"shift"`` / ``"platt"``: :math:`l_0 = \operatorname{clip}(a_0 \operatorname{logit}(\operatorname{clip}(s,
  \epsilon, 1 - \epsilon)) + b_0, \pm\operatorname{logit}(1 - \epsilon))` (the initial map's logit, no
  probability in between), :math:`l_t = a l_{t-1} + b` (``a = 1`` for shift); the output is
  :math:`\sigma(l_T) = 1 / (1 + e^{-l_T})`.

Formats
-------
``"text"``
    Indented if-then rules per tree, the chain's formula on top. Numeric bins read as the intervals of
    :meth:`~gpucal.encoding.FeatureEncoder.describe_codes` (neighbouring bins merged), categories as
    their values; ``missing`` and ``unseen`` (a category no fit row had) are named as such.
    ``otherwise`` gives the map of rows that stop at a split node.
``"json"``
    A nested structure that any language can evaluate (schema below).
``"sql"``
    One SQL expression over the raw columns (standard SQL: SQLite >= 3.35 and DuckDB run it, and
    nothing in it is specific to either); with ``table``, a whole ``SELECT``. Every number is written as
    an exact binary fraction (``CAST(m AS DOUBLE PRECISION) / 2^k``, the decimal value in a comment):
    engines do not all read decimal literals to the nearest double (SQLite 3.40 misreads about 1 in
    35,000 of Python's shortest ``repr`` strings). Numeric bins are comparisons matching ``transform``'s
    rule (bin ``b`` holds ``edges[b-1] <= x < edges[b]``: a value on an edge goes to the upper bin). The
    score bin is compared as ``score * N >= lo AND score * N < hi + 1``: the same IEEE product as numpy,
    and equal to ``floor`` with no ``CAST`` (which truncates in SQLite but rounds in DuckDB). A category
    seen at fit is ``col IN (...)``, an unseen one ``col NOT IN (<all fitted categories>)``, a missing
    one ``col IS NULL``. Each tree is one nested ``CASE`` choosing the map parameter of the node a row
    stops at; the trees' ``CASE`` expressions sit side by side as the columns of one derived table, and
    the chain is arithmetic on those columns (see :class:`~gpucal.rules.sql.SqlWriter`), so the nesting
    depth does not grow with the number of trees (SQLite before 3.46 parses with a fixed 100-entry stack,
    which about six nested subqueries or a dozen tree levels exhaust). With ``leaf_map="scale"`` and
    ``init=(1, 0)`` the expression gives the Python predictions back bit for bit; the other maps need
    ``EXP`` and ``LN`` and agree to rounding (1e-12, usually exactly).

JSON schema (version 1)
-----------------------
::

    {"format": "gpucal.MBCT.rules", "version": 1,
     "leaf_map": "scale" | "shift" | "platt",
     "formula": "<the chain in words>", "eps": 2.220446049250313e-16,
     "init": {"a": a0, "b": b0},                      # identity when a0 = 1 and b0 = 0
     "score": {"column": "score", "bins": N},         # bin = min(floor(score * N), N - 1)
     "features": [                                    # in code order; the score bin last
        {"column": "site_id", "kind": "values", "categories": [...], "unseen": "separate" | "missing"},
        {"column": "age", "kind": "bins", "edges": [...]},
        {"column": "score", "kind": "score_bins", "bins": N}],
     "trees": [node, ...]}                            # tree t's root
    node = {"id": global node id, "condition": null (a root) or condition,
            "map": {"a": a, "b": b}, "weight": training weight, "children": [node, ...]}
    condition, by the split feature's kind (feature = index into "features"):
      values:     {"feature": j, "column": c, "values": [v, ...], "missing": bool, "unseen": bool}
      bins:       {"feature": j, "column": c, "intervals": [[lo, hi], ...], "missing": bool}
                  (lo <= x < hi; null lo / hi stand for -inf / +inf)
      score_bins: {"feature": j, "column": c, "bins": [[lo, hi], ...]}  (lo <= bin <= hi)

To evaluate: at a node, the row goes to the one child whose condition holds, or stops at the node if
none does (or it has no children). A value is *missing* when it is null (or NaN); a category value is
*unseen* when it is not missing and not among the feature's ``categories`` (with ``"unseen":
"missing"``, such values count as missing, and the conditions that hold for missing ones say
``"unseen": true`` as well). Apply the map of the node the row stops at, tree after tree.

Modules
-------
:mod:`~gpucal.rules.export` checks a request and picks the writer; :mod:`~gpucal.rules.chain` describes
the split features and the formula; :mod:`~gpucal.rules.text`, :mod:`~gpucal.rules.json_rules` and
:mod:`~gpucal.rules.sql` write one format each. The package reads a fitted ``TreeEnsemble`` and
``FeatureEncoder`` only: the estimators (``MBCT.export_rules``, ``HeterogeneousCalibrator.export_rules``)
and :mod:`gpucal.plot.trees` pass them in.
"""

from gpucal.rules.chain import describe_features, node_children, stop_codes
from gpucal.rules.export import EXPORT_FORMATS, export_rules
from gpucal.rules.json_rules import RULES_FORMAT, RULES_VERSION
from gpucal.rules.sql import sql_float, sql_ident, sql_value
from gpucal.rules.text import condition_text, map_text, weight_text

__all__ = [
    "EXPORT_FORMATS",
    "RULES_FORMAT",
    "RULES_VERSION",
    "condition_text",
    "describe_features",
    "export_rules",
    "map_text",
    "node_children",
    "sql_float",
    "sql_ident",
    "sql_value",
    "stop_codes",
    "weight_text",
]

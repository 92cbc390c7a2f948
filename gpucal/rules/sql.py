"""The rules as one SQL expression: exact binary-fraction literals, one ``CASE`` per tree side by side."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from gpucal.encoding import KIND_BINS
from gpucal.rules.chain import (
    EPS,
    KIND_SCORE,
    LOGIT_HIGH,
    LOGIT_LOW,
    RuleChain,
    SplitFeature,
    bin_edges,
    code_runs,
    code_set,
    node_children,
)

# Largest power of two written as one integer literal (int64 holds 2**62 with room to spare).
_MAX_POW2 = 62


def sql_float(x: float, precision: int | None = None) -> str:
    """A float64 as a SQL literal that every engine reads back exactly (or rounded to ``precision`` digits).

    ``x = n / 2^k`` with an odd integer ``|n| < 2^53`` (:meth:`float.as_integer_ratio`), written
    ``(CAST(n AS DOUBLE PRECISION) / 2^k /* repr(x) */)``: integer literals and divisions by powers of two
    are exact, while decimal literals are read to the nearest double by some engines only. Integers below
    2^53 are written ``n.0``.
    """
    x = float(x)
    if not math.isfinite(x):
        msg = f"SQL has no literal for {x!r}"
        raise ValueError(msg)
    if precision is not None:
        text = f"{x:.{precision}g}"
        return text if any(ch in text for ch in ".e") else text + ".0"
    if x.is_integer() and abs(x) < 2.0**53:
        return f"{int(x)}.0"
    num, den = x.as_integer_ratio()
    if den == 1:  # an integer of 2^53 or more: n * 2^e with odd n
        shift = (num & -num).bit_length() - 1
        num >>= shift
        factors = _pow2_factors(shift)
        return f"(CAST({num} AS DOUBLE PRECISION){''.join(' * ' + f for f in factors)} /* {x!r} */)"
    factors = _pow2_factors(den.bit_length() - 1)
    return f"(CAST({num} AS DOUBLE PRECISION){''.join(' / ' + f for f in factors)} /* {x!r} */)"


def _pow2_factors(k: int) -> list[str]:
    """2^k as integer literals of at most 2^62 whose product is 2^k."""
    out = []
    while k > 0:
        step = min(k, _MAX_POW2)
        out.append(str(1 << step))
        k -= step
    return out


def sql_ident(name: Hashable) -> str:
    """A column name as a quoted SQL identifier (``"`` doubled inside)."""
    text = str(name)
    return '"' + text.replace('"', '""') + '"'


def sql_value(v: Any) -> str:
    """A category as a SQL literal: strings quoted (``'`` doubled), booleans TRUE/FALSE, numbers exact."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return sql_float(v, None)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    msg = f"category {v!r} of type {type(v).__name__} has no SQL literal (str/int/float/bool)"
    raise TypeError(msg)


class SqlWriter:
    """Build the SQL expression with a nesting depth that does not grow with the number of trees.

    SQLite before 3.46 parses with a fixed stack of 100 entries, which about six nested subqueries or
    twenty nested ``CASE``/function calls exhaust, so the trees are not nested inside each other. Every
    tree's ``CASE`` sits side by side in one derived table ``k`` (one column per map parameter and tree),
    and the chain is arithmetic over those columns:

    - scale: :math:`f_T = \\min(C_0, \\ldots, C_T)` with :math:`C_0 = f_0 k_1 \\cdots k_T`,
      :math:`C_j = k_{j+1} \\cdots k_T` (the clip at 1 happened last after tree ``j``) and :math:`C_T = 1`,
      each product rounded left to right as the kernel rounds it; rounding is monotone and every
      :math:`k \\ge 0`, so this minimum equals the kernel's :math:`\\min(k_t f_{t-1}, 1)` chain bit for
      bit. The minimum is an aggregate ``MIN`` over the rows ``j = 0 .. T`` of a small constant table.
    - shift: :math:`l_T = l_0 + b_1 + \\cdots + b_T`, summed left to right (the kernel's order);
    - platt: :math:`l_T = (\\cdots(l_0 a_1 + b_1) a_2 + b_2 \\cdots) a_T + b_T` (parentheses are cheap).
    """

    def __init__(self, chain: RuleChain) -> None:
        self.chain, self.ens, self.features = chain, chain.ens, chain.features
        self.init, self.precision = chain.init, chain.precision
        # Alias prefix that no raw column starts with, so no alias can hide a column.
        taken = [str(f.column).lower() for f in self.features] + [str(chain.score_col).lower()]
        prefix = "gpucal_"
        while any(name.startswith(prefix) for name in taken):
            prefix += "_"
        self.p = prefix

    def num(self, x: float) -> str:
        return sql_float(x, self.precision)

    def clip(self, x: str) -> str:
        """``clip(x, eps, 1 - eps)`` (``x`` is repeated: pass a column).

        The bounds are written exactly whatever ``precision``: rounded, ``1 - eps`` reads as 1.0 and a
        score of 1 would divide by zero in the logit (NULL in SQL).
        """
        lo, hi = sql_float(EPS, None), sql_float(1.0 - EPS, None)
        return f"CASE WHEN {x} < {lo} THEN {lo} WHEN {x} > {hi} THEN {hi} ELSE {x} END"

    def logit_clip(self, x: str) -> str:
        p = self.clip(x)
        return f"LN(({p}) / (1.0 - ({p})))"

    def write(self) -> str:
        ens, p = self.ens, self.p
        score = sql_ident(self.chain.score_col)
        # Neither end of a comment inside it (DuckDB nests them): column names are in the formula.
        formula = "; ".join(self.chain.formula()).replace("*/", "* /").replace("/*", "/ *")
        header = "/* gpucal calibration tree rules: " + formula + " */\n"
        a0, b0 = self.init
        platt_init = (a0, b0) != (1.0, 0.0)
        f0 = score
        if platt_init:
            f0 = f"1.0 / (1.0 + EXP(-({self.num(a0)} * {self.logit_clip(score)} + {self.num(b0)})))"
        value = ens.node_value
        trees = [int(ens.tree_start[t]) for t in range(ens.n_trees)]
        cols: list[str] = []
        if ens.leaf_map == "scale":
            if (value[:, 0] < 0).any():
                msg = "ensemble.node_value: a scale map k < 0 (k = sum(w y) / sum(w f) is never negative)"
                raise ValueError(msg)
            if not trees:
                return header + f"({f0})"
            cols.append(f"{f0} AS {p}f0")
            for t, root in enumerate(trees, start=1):
                cols.append(f"/* tree {t} */ {self.case(root, lambda m: self.num(value[m, 0]))} AS {p}k{t}")
            k = [f"{p}k.{p}k{t}" for t in range(1, len(trees) + 1)]
            whens = [f"WHEN 0 THEN {' * '.join([f'{p}k.{p}f0', *k])}"]
            whens += [f"WHEN {j} THEN {' * '.join(k[j:])}" for j in range(1, len(trees))]
            rows = " UNION ALL ".join(
                f"SELECT {j}" + (f" AS {p}j" if j == 0 else "") for j in range(len(trees) + 1)
            )
            return header + (
                f"(SELECT MIN(CASE {p}c.{p}j\n  " + "\n  ".join(whens) + "\n  ELSE 1.0 END)\n"
                " FROM (SELECT\n  " + ",\n  ".join(cols) + f") AS {p}k,\n"
                f" ({rows}) AS {p}c)"
            )
        # shift / platt: l_0 = clip(a0 logit(clip(s)) + b0, +-logit(1 - eps)), with the initial map's
        # logit named first when it is not the identity
        source = ""
        if platt_init:
            z0 = f"{self.num(a0)} * {self.logit_clip(score)} + {self.num(b0)}"
            lo, hi, z = sql_float(LOGIT_LOW, None), sql_float(LOGIT_HIGH, None), f"{p}f.{p}z0"
            cols.append(f"CASE WHEN {z} < {lo} THEN {lo} WHEN {z} > {hi} THEN {hi} ELSE {z} END AS {p}l0")
            source = f" FROM (SELECT {z0} AS {p}z0) AS {p}f"
        else:
            cols.append(f"{self.logit_clip(score)} AS {p}l0")
        lt = f"{p}k.{p}l0"
        for t, root in enumerate(trees, start=1):
            b = self.case(root, lambda m: self.num(value[m, 1]))
            if ens.leaf_map == "shift":
                cols.append(f"/* tree {t} */ {b} AS {p}b{t}")
                lt = f"{lt} + {p}k.{p}b{t}"
            else:
                a = self.case(root, lambda m: self.num(value[m, 0]))
                cols.append(f"/* tree {t}: a */ {a} AS {p}a{t}")
                cols.append(f"/* tree {t}: b */ {b} AS {p}b{t}")
                lt = f"({lt}) * {p}k.{p}a{t} + {p}k.{p}b{t}"
        return header + (
            f"(SELECT 1.0 / (1.0 + EXP(-({lt})))\n"
            " FROM (SELECT\n  " + ",\n  ".join(cols) + f"{source}) AS {p}k)"
        )

    def case(self, node: int, leaf: Callable[[int], str], depth: int = 1) -> str:
        """Nested ``CASE`` of the subtree at ``node``: ``leaf(m)`` for the node ``m`` a row stops at."""
        ens = self.ens
        if int(ens.node_feature[node]) < 0:
            return leaf(node)
        feature = self.features[int(ens.node_feature[node])]
        pad = "\n" + "  " * (depth + 1)
        parts = ["CASE"]
        for child, codes in node_children(ens, self.features, node):
            cond = self.condition(feature, codes)
            parts.append(f"{pad}WHEN {cond} THEN {self.case(child, leaf, depth + 1)}")
        parts.append(f"{pad}ELSE {leaf(node)}")
        parts.append(f"{pad}END")
        return "".join(parts)

    def condition(self, feature: SplitFeature, codes: Sequence[int]) -> str:
        """A boolean SQL expression true exactly for the raw values whose code is in ``codes``."""
        cs = code_set(feature, codes)
        col = sql_ident(feature.column)
        parts: list[str] = []
        if feature.kind == KIND_SCORE:
            n = feature.n_regular
            scaled = f"{col} * {n}"
            for lo, hi in code_runs(cs.regular):
                bounds = []
                if lo > 0:
                    bounds.append(f"{scaled} >= {lo}")
                if hi < n - 1:
                    bounds.append(f"{scaled} < {hi + 1}")
                parts.append(" AND ".join(bounds) if bounds else "TRUE")
        elif feature.kind == KIND_BINS:
            edges = bin_edges(feature)
            for lo, hi in code_runs(cs.regular):
                bounds = []
                if lo > 0:
                    bounds.append(f"{col} >= {self.num(edges[lo - 1])}")
                if hi < len(edges):
                    bounds.append(f"{col} < {self.num(edges[hi])}")
                parts.append(" AND ".join(bounds) if bounds else f"{col} IS NOT NULL")
        elif cs.regular:
            values = [sql_value(feature.categories[c]) for c in cs.regular]
            parts.append(f"{col} = {values[0]}" if len(values) == 1 else f"{col} IN ({', '.join(values)})")
        if cs.missing:
            parts.append(f"{col} IS NULL")
        if cs.unseen:
            if feature.categories:
                known = ", ".join(sql_value(v) for v in feature.categories)
                parts.append(f"{col} NOT IN ({known})")
            else:
                parts.append(f"{col} IS NOT NULL")
        if not parts:  # no code at all: cannot happen for a child, kept for safety
            return "FALSE"
        if len(parts) == 1:
            return parts[0]
        return "(" + " OR ".join(f"({p})" if " AND " in p else p for p in parts) + ")"


__all__ = ["SqlWriter", "sql_float", "sql_ident", "sql_value"]

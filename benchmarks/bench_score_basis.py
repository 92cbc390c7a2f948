"""Which logistic design reaches the oracle on ``make_ctr`` sets: a probe with scikit-learn only.

Each design is a ``LogisticRegression(C=...)`` on the calibration rows of ``bench_auto``'s ``ctr-<scenario>``
sets (``make_ctr(150_000, scenario, seed=0)``; test rows ``make_ctr(100_000, ..., row_offset=150_000)``),
its held-out log-loss given relative to the oracle's (``p_true``). The columns, added in this order:

- ``logit``: the score's logit;
- ``fields``: one-hot of ``ad_category``, ``region``, ``hour``, ``user_segment``, ``device``;
- ``site``: one-hot of ``site_id``, ids with fewer than ``--site-min`` calibration rows pooled in one;
- ``knots``: hinges ``max(0, logit - t_k)`` at the calibration logit's 0.5, 0.8 and 0.95 quantiles
  (``make_ctr`` bends the score's logit at its 0.8 quantile: the 0.8 hinge alone is the exact inverse);
- ``dh``: one-hot of ``device x hour`` (the interaction ``make_ctr``'s truth has).

The floor (``--floor-rows``): the design closest to ``make_ctr``'s truth that needs no ``site_id`` offsets
(``logit``, the 0.8 knot, ``fields``, ``dh``) fitted on more calibration rows (from row 250,000 on, so
disjoint from the test rows): what estimation noise leaves when the data grow. Writes
``benchmarks/results/score_basis.{json,md}``. Run: ``python benchmarks/bench_score_basis.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from gpucal.datasets import make_ctr

RESULTS = Path(__file__).parent / "results"
FIELDS = ["ad_category", "region", "hour", "user_segment", "device"]
KNOT_QUANTILES = (0.5, 0.8, 0.95)
TEST_OFFSET = 150_000
N_TEST = 100_000
#: (label, column groups) in the order of the report.
DESIGNS = (
    ("logit", ()),
    ("logit + knots", ("knots",)),
    ("logit + fields", ("fields",)),
    ("logit + fields + site", ("fields", "site")),
    ("logit + fields + knots", ("fields", "knots")),
    ("logit + fields + dh", ("fields", "dh")),
    ("logit + fields + knots + dh", ("fields", "knots", "dh")),
    ("logit + fields + site + knots + dh", ("fields", "site", "knots", "dh")),
)


def logit(score: np.ndarray) -> np.ndarray:
    p = np.clip(score.astype(np.float64), 1e-12, 1 - 1e-12)
    return np.log(p / (1 - p))


def one_hot(train: np.ndarray, other: np.ndarray, min_count: int = 1) -> tuple[Any, Any]:
    """One-hot of ``train``'s values with at least ``min_count`` rows; the rest (and unseen) in column 0."""
    values, counts = np.unique(train, return_counts=True)
    kept = values[counts >= min_count]

    def encode(codes: np.ndarray) -> Any:
        pos = np.searchsorted(kept, codes).clip(0, max(len(kept) - 1, 0))
        col = np.where(kept[pos] == codes, pos + 1, 0) if len(kept) else np.zeros(len(codes), int)
        return sp.csr_matrix(
            (np.ones(len(codes)), (np.arange(len(codes)), col)), shape=(len(codes), len(kept) + 1)
        )

    return encode(train), encode(other)


def columns(cal: pd.DataFrame, test: pd.DataFrame, site_min: int, knots: tuple[float, ...]) -> dict[str, Any]:
    """Every column group of the module docstring, as (calibration, test) sparse matrices."""
    zc, zt = logit(cal["score"].to_numpy()), logit(test["score"].to_numpy())
    cuts = np.quantile(zc, knots)
    groups = {
        "logit": (sp.csr_matrix(zc[:, None]), sp.csr_matrix(zt[:, None])),
        "knots": tuple(sp.csr_matrix(np.maximum(z[:, None] - cuts[None, :], 0.0)) for z in (zc, zt)),
        "site": one_hot(cal["site_id"].to_numpy(), test["site_id"].to_numpy(), site_min),
    }
    parts = [one_hot(cal[f].to_numpy(), test[f].to_numpy()) for f in FIELDS]
    groups["fields"] = (sp.hstack([p[0] for p in parts]), sp.hstack([p[1] for p in parts]))
    cross = [
        frame["device"].to_numpy().astype(np.int64) * 24 + frame["hour"].to_numpy() for frame in (cal, test)
    ]
    groups["dh"] = one_hot(*cross)
    return groups


def fit_design(groups: dict[str, Any], names: tuple[str, ...], y: np.ndarray, y_test: np.ndarray, c: float):
    """Held-out log-loss and fit CPU seconds of ``LogisticRegression(C=c)`` on ``logit`` + ``names``."""
    used = ("logit", *names)
    train = sp.hstack([groups[n][0] for n in used]).tocsr()
    test = sp.hstack([groups[n][1] for n in used]).tocsr()
    start = time.process_time()
    model = LogisticRegression(C=c, max_iter=5000, tol=1e-8).fit(train, y)
    seconds = time.process_time() - start
    return float(log_loss(y_test, model.predict_proba(test)[:, 1])), seconds


def probe(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    cal = make_ctr(args.cal_rows, scenario, seed=0)
    test = make_ctr(N_TEST, scenario, seed=0, row_offset=TEST_OFFSET)
    y, y_test = cal["label"].to_numpy(), test["label"].to_numpy()
    oracle = float(log_loss(y_test, test["p_true"].to_numpy()))
    groups = columns(cal, test, args.site_min, KNOT_QUANTILES)
    rows = []
    for label, names in DESIGNS:
        for c in args.C:
            loss, seconds = fit_design(groups, names, y, y_test, c)
            rows.append(
                {
                    "design": label,
                    "C": c,
                    "log_loss": loss,
                    "gap_pct": 100 * (loss / oracle - 1),
                    "cpu_s": seconds,
                }
            )
            print(f"{scenario} {label} C={c}: {rows[-1]['gap_pct']:.2f}%", flush=True)
    entry = {
        "scenario": scenario,
        "oracle": oracle,
        "raw": float(log_loss(y_test, test["score"])),
        "designs": rows,
    }
    if args.floor_rows:
        big = make_ctr(args.floor_rows, scenario, seed=0, row_offset=TEST_OFFSET + N_TEST)
        floor = columns(big, test, args.site_min, (0.8,))
        loss, seconds = fit_design(floor, ("knots", "fields", "dh"), big["label"].to_numpy(), y_test, 1.0)
        entry["floor"] = {
            "rows": args.floor_rows,
            "log_loss": loss,
            "gap_pct": 100 * (loss / oracle - 1),
            "cpu_s": seconds,
        }
        print(f"{scenario} floor: {entry['floor']['gap_pct']:.2f}%", flush=True)
    return entry


def write_report(entries: list[dict[str, Any]], args: argparse.Namespace) -> None:
    (RESULTS / "score_basis.json").write_text(json.dumps(entries, indent=1))
    lines = [
        "# Which logistic design reaches the oracle on make_ctr sets (scikit-learn probe)",
        "",
        f"`bench_score_basis.py` (its docstring gives the designs): {args.cal_rows:,} calibration rows, "
        f"{N_TEST:,} test rows, `site_id` ids under {args.site_min} rows pooled. Held-out log-loss above the "
        "oracle's (`p_true`), in %; fit CPU seconds (machine shared, 2 cores).",
        "",
    ]
    for entry in entries:
        lines += [
            f"## ctr-{entry['scenario']}",
            "",
            f"Oracle {entry['oracle']:.5f}; raw score {100 * (entry['raw'] / entry['oracle'] - 1):.2f}% "
            "above.",
            "",
            "| design | " + " | ".join(f"C={c}" for c in args.C) + " |",
            "|---|" + "---|" * len(args.C),
        ]
        for label, _ in DESIGNS:
            cells = [r for r in entry["designs"] if r["design"] == label]
            lines.append(
                f"| {label} | " + " | ".join(f"{r['gap_pct']:.2f} ({r['cpu_s']:.1f} s)" for r in cells) + " |"
            )
        if "floor" in entry:
            f = entry["floor"]
            lines += [
                "",
                f"Floor (logit + 0.8 knot + fields + dh, C=1, {f['rows']:,} rows): {f['gap_pct']:.2f}%.",
            ]
        lines.append("")
    (RESULTS / "score_basis.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=["mixed", "monotone", "overconfident"])
    parser.add_argument("--cal-rows", type=int, default=150_000)
    parser.add_argument("--C", nargs="+", type=float, default=[1.0, 0.1])
    parser.add_argument("--site-min", type=int, default=20)
    parser.add_argument("--floor-rows", type=int, default=1_000_000, help="0: no floor fit")
    args = parser.parse_args()
    write_report([probe(s, args) for s in args.scenarios], args)


if __name__ == "__main__":
    main()

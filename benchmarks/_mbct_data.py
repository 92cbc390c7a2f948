"""Datasets for the MBCT benchmarks: calibration and test rows with a base score and calibrator features.

Shared by ``bench_mbct_quality.py`` and ``bench_mbct_speed.py`` (and meant for later benchmarks): one call,
:func:`prepare`, returns a :class:`BenchData` whatever the source.

Synthetic (``ctr-<scenario>``, every scenario of ``gpucal.datasets.CTR_SCENARIOS``): the calibration rows
are ``make_ctr(n_cal, scenario, seed=0)``, the test rows ``make_ctr(n_test, scenario, seed=0,
row_offset=n_cal)``: the same truth and base model, disjoint rows. ``p_true`` is kept for the oracle.

Real: ACS Employment ships a real model's score (calibrate on 2015, test on 2016-18).
KDD Census-Income, Adult and flights ship none, so a base model is trained here on a third, separate
split (predictor-train / calibration / test, fixed seeds, below). The default base model is over-confident
on purpose (the setting where the papers see the largest gains); ``<name>-reg`` gives the same
splits with a regularised one. The scores are cached in ``~/.cache/gpucal/mbct_bench`` (or
``$GPUCAL_DATA/mbct_bench``) under a key of the base model's parameters, ``quick`` and the split seed
(the split sizes are fixed by ``quick``).

======== ===================================================== ==========================================
dataset  splits (seed 0 permutations)                          calibrator features
======== ===================================================== ==========================================
acs      calibration = 2015 (68,785); test = 2016-18 (208,892) AGEP (num), SCHL, MAR, RELP, DIS, CIT, SEX,
                                                               RAC1P
kdd      official train halved (seed 0): predictor 99,761 /    age (num), education, marital_stat,
         calibration 99,762; test = official test 99,762       major_occupation_code, class_of_worker, sex,
                                                               race, tax_filer_stat
adult    40 / 30 / 30 %: 19,536 / 14,653 / 14,653             age (num), workclass, education,
                                                               marital_status, occupation, relationship,
                                                               race, gender
flights  1M / 1M / 1M of the 3M rows                           origin, destination, hour, weekday (by
                                                               value), distance, day_of_year (num)
ctr-*    calibration n_cal, test n_test rows (default 200k)    site_id, ad_category, region, hour,
                                                               user_segment, device (by value)
======== ===================================================== ==========================================

``(num)``: a numeric column; each calibrator bins it its own way (gpucal: quantile bins, MCGrad: LightGBM
histograms). The field metrics group it by the calibration split's deciles. The base models see every
feature of their dataset (KDD without ``instance_weight``, which UCI advises against using in a classifier;
it is not used as a sample weight either).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SEED = 0
# Base models: HistGradientBoostingClassifier parameters. "overconfident": large trees, a big step, no
# regularisation and no early stopping, so it overfits its predictor-train split and its held-out scores
# are too extreme (Adult: Platt slope 0.59 on the calibration split, 17% of the scores beyond
# logit +-10). 255 leaves and 200 rounds went further (slope 0.23, 55% beyond +-10: half the rows at
# 0 or 1 in effect), which reads more as a broken model than an over-confident one.
# "regularised": small trees, shrinkage, L2 and early stopping.
BASE_MODELS: dict[str, dict[str, Any]] = {
    "overconfident": {
        "max_iter": 100,
        "learning_rate": 0.3,
        "max_leaf_nodes": 63,
        "min_samples_leaf": 20,
        "l2_regularization": 0.0,
        "early_stopping": False,
        "random_state": SEED,
    },
    "regularised": {
        "max_iter": 500,
        "learning_rate": 0.05,
        "max_leaf_nodes": 31,
        "min_samples_leaf": 100,
        "l2_regularization": 1.0,
        "early_stopping": True,
        "validation_fraction": 0.1,
        "n_iter_no_change": 20,
        "random_state": SEED,
    },
}

CTR_FEATURES = ["site_id", "ad_category", "region", "hour", "user_segment", "device"]
# The two crossed columns that make make_ctr's six fields the eight of the speed benchmark.
CTR_CROSSES = {"device_hour": ("device", "hour"), "region_segment": ("region", "user_segment")}

# Calibrator features per real dataset: (categorical read by value, numeric). Categorical columns that hold
# integers must be named in ``categorical_cols`` for gpucal's encoder (pandas ``category`` columns are read
# by value anyway).
REAL_FEATURES: dict[str, tuple[list[str], list[str]]] = {
    "acs": (["SCHL", "MAR", "RELP", "DIS", "CIT", "SEX", "RAC1P"], ["AGEP"]),
    "kdd": (
        [
            "education",
            "marital_stat",
            "major_occupation_code",
            "class_of_worker",
            "sex",
            "race",
            "tax_filer_stat",
        ],
        ["age"],
    ),
    "adult": (
        ["workclass", "education", "marital_status", "occupation", "relationship", "race", "gender"],
        ["age"],
    ),
    "flights": (["origin", "destination", "hour", "weekday"], ["distance", "day_of_year"]),
}
REAL_DATASETS = ("acs", "kdd", "adult", "flights")
QUICK_ROWS = 20_000  # --quick: at most this many rows per split (predictor-train included)
# Field metrics pool the values with fewer test rows than max(FIELD_MIN_ROWS, FIELD_MIN_POSITIVES / rate) into
# one group, rate = the calibration split's positive rate: Field-RCE divides by a value's positives.
FIELD_MIN_ROWS = 100
FIELD_MIN_POSITIVES = 30
FIELD_NUMERIC_BINS = 10  # field metrics group numeric features by deciles of the calibration split


@dataclass
class BenchData:
    """Calibration and test rows of one dataset, with what each benchmark needs to know about them.

    ``cal`` and ``test`` hold ``score``, ``label``, ``p_true`` (synthetic only) and ``feature_cols``.
    ``categorical_cols``: feature columns holding integers that are categories (pass them to gpucal's
    ``categorical_cols``); ``numeric_cols``: continuous features. Every other feature column is a pandas
    ``category``. ``info``: source, splits, base model and its test AUC, for the reports.
    """

    name: str
    cal: pd.DataFrame
    test: pd.DataFrame
    feature_cols: list[str]
    categorical_cols: list[str]
    numeric_cols: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def has_truth(self) -> bool:
        return "p_true" in self.test.columns

    @property
    def mcgrad_categorical(self) -> list[str]:
        """Feature columns MCGrad should treat as categorical (everything not numeric)."""
        return [c for c in self.feature_cols if c not in self.numeric_cols]


def mbct_class() -> Any:
    """``gpucal.MBCT`` (or ``gpucal.mbct.model.MBCT`` before it is exported), None while neither exists."""
    import gpucal

    found = getattr(gpucal, "MBCT", None)
    if found is None:
        try:
            from gpucal.mbct.model import MBCT as found
        except ImportError:
            return None
    return found


def cache_dir() -> Path:
    root = Path(os.environ.get("GPUCAL_DATA", Path.home() / ".cache" / "gpucal"))
    out = root / "mbct_bench"
    out.mkdir(parents=True, exist_ok=True)
    return out


def dataset_names() -> list[str]:
    """Every dataset :func:`prepare` knows, the default ones first."""
    from gpucal.datasets import CTR_SCENARIOS

    return [f"ctr-{s}" for s in CTR_SCENARIOS] + list(REAL_DATASETS) + [f"{d}-reg" for d in REAL_DATASETS[1:]]


def default_datasets() -> list[str]:
    """The datasets of the quality benchmark by default: every CTR scenario and the four real sets."""
    return [d for d in dataset_names() if not d.endswith("-reg")]


def prepare(
    name: str, *, quick: bool = False, n_cal: int = 200_000, n_test: int = 200_000, seed: int = SEED
) -> BenchData:
    """Return the calibration and test rows of dataset ``name`` (see the module docstring); ``seed``
    permutes the rows of a dataset whose base model is trained here before they are split (another
    split of the same rows, named ``name@seed``; :data:`SEED` in every report but where said)."""
    if seed != SEED and (name.startswith("ctr-") or name == "acs"):
        msg = f"{name} takes no split seed (its rows and score are fixed)"
        raise ValueError(msg)
    if name.startswith("ctr-"):
        if quick:
            n_cal, n_test = min(n_cal, QUICK_ROWS), min(n_test, QUICK_ROWS)
        return _prepare_ctr(name[4:], n_cal, n_test)
    base, _, variant = name.partition("-")
    kind = {"": "overconfident", "reg": "regularised"}.get(variant)
    if base not in REAL_DATASETS or kind is None:
        msg = f"unknown dataset {name!r}; known: {dataset_names()}"
        raise ValueError(msg)
    if base == "acs":
        if variant:
            msg = "acs ships its own model score: there is no acs-reg"
            raise ValueError(msg)
        return _prepare_acs(quick)
    return _prepare_trained(name, base, kind, quick, seed)


def _prepare_ctr(scenario: str, n_cal: int, n_test: int) -> BenchData:
    from gpucal.datasets import ctr_scenario, make_ctr

    cal = make_ctr(n_cal, scenario, seed=SEED)
    test = make_ctr(n_test, scenario, seed=SEED, row_offset=n_cal)
    spec = ctr_scenario(scenario)
    info = {
        "source": f"make_ctr(scenario={scenario!r}, seed={SEED})",
        "splits": f"calibration rows 0..{n_cal - 1}, test rows {n_cal}..{n_cal + n_test - 1} (row_offset)",
        "n_cal": n_cal,
        "n_test": n_test,
        "base_model": "make_ctr's own score: " + _describe_scenario(spec),
        "positive_rate_test": float(test["label"].mean()),
    }
    data = BenchData(f"ctr-{scenario}", cal, test, list(CTR_FEATURES), list(CTR_FEATURES), [], info)
    data.info["base_auc_test"] = _auc(test)
    return data


def _describe_scenario(spec: dict[str, Any]) -> str:
    parts = []
    if spec["logit_scale"] != 1.0:
        parts.append(f"logit scale {spec['logit_scale']}")
    if spec["bend"]:
        parts.append(f"bend {spec['bend']}")
    if spec["bias_field"]:
        parts.append(f"{spec['bias_field']} bias sd {spec['bias_sd']}")
    if spec["underused_field"]:
        parts.append(f"{spec['underused_field']} under-used ({spec['underused_share']})")
    if spec["misses_interaction"]:
        parts.append("misses device x hour")
    if spec["shrinkage"]:
        parts.append(f"rare site_id shrunk (tau {spec['shrinkage']})")
    return ", ".join(parts) or "calibrated (f = p_true)"


def _prepare_acs(quick: bool) -> BenchData:
    from gpucal.datasets import load_acs_employment

    frame = load_acs_employment()
    categorical, numeric = REAL_FEATURES["acs"]
    cols = ["score", "label", *numeric, *categorical]
    cal = frame.loc[frame["split"] == "reference", cols].reset_index(drop=True)
    test = frame.loc[frame["split"] == "analysis", cols].reset_index(drop=True)
    if quick:
        cal, test = cal.iloc[:QUICK_ROWS], test.iloc[:QUICK_ROWS]
    info = {
        "source": "load_acs_employment (nannyml 0.13.1)",
        "splits": f"calibration = 2015 'reference' ({len(cal):,} rows), test = 2016-18 'analysis' "
        f"({len(test):,} rows): a time split under drift",
        "n_cal": len(cal),
        "n_test": len(test),
        "base_model": "the shipped `predicted_probability` of nannyml's model (trained on 2015)",
        "positive_rate_test": float(test["label"].mean()),
    }
    data = BenchData("acs", cal, test, [*numeric, *categorical], [], list(numeric), info)
    data.info["base_auc_test"] = _auc(test)
    return data


def _load_real(base: str, seed: int = SEED) -> tuple[pd.DataFrame, dict[str, np.ndarray], str]:
    """The raw frame (label + base-model features) and the row indices of the three splits, the rows
    permuted with ``seed``."""
    from gpucal.datasets import load_adult, load_census_kdd, load_flights

    rng = np.random.default_rng(seed)
    if base == "kdd":
        frame = load_census_kdd()
        train = np.flatnonzero(frame["split"].to_numpy() == "train")
        test = np.flatnonzero(frame["split"].to_numpy() == "test")
        train = rng.permutation(train)
        half = len(train) // 2
        splits = {"predictor": train[:half], "calibration": train[half:], "test": test}
        rule = (
            f"official train permuted (seed {seed}) and halved: predictor-train / calibration; official test"
        )
        frame = frame.drop(columns=["weight", "split"])
    elif base == "adult":
        frame = load_adult()
        order = rng.permutation(len(frame))
        a, b = int(0.4 * len(frame)), int(0.7 * len(frame))
        splits = {"predictor": order[:a], "calibration": order[a:b], "test": order[b:]}
        rule = f"rows permuted (seed {seed}): first 40% predictor-train, next 30% calibration, last 30% test"
    else:  # flights
        frame = load_flights()
        order = rng.permutation(len(frame))
        third = len(frame) // 3
        splits = {
            "predictor": order[:third],
            "calibration": order[third : 2 * third],
            "test": order[2 * third :],
        }
        rule = f"rows permuted (seed {seed}): thirds for predictor-train, calibration, test (1M each)"
    return frame, splits, rule


def _params_key(base: str, kind: str, quick: bool, seed: int = SEED) -> str:
    # The default split's key is the one its cached rows were written under.
    split = {} if seed == SEED else {"seed": seed}
    text = json.dumps(
        {"base": base, "params": BASE_MODELS[kind], "quick": quick, "v": 1, **split}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _prepare_trained(name: str, base: str, kind: str, quick: bool, seed: int = SEED) -> BenchData:
    """Real data without a score: train the base model on predictor-train (cached), score the rest."""
    categorical, numeric = REAL_FEATURES[base]
    features = [*numeric, *categorical]
    int_categorical = ["hour", "weekday"] if base == "flights" else []
    stem = cache_dir() / f"{name}{'-quick' if quick else ''}-{_params_key(base, kind, quick, seed)}"
    parquet, meta = stem.with_suffix(".parquet"), stem.with_suffix(".json")
    if parquet.exists() and meta.exists():
        rows = pd.read_parquet(parquet)
        info = json.loads(meta.read_text())
    else:
        rows, info = _train_base(base, kind, quick, features, seed)
        rows.to_parquet(parquet)
        meta.write_text(json.dumps(info, indent=1))
    part = rows.pop("part")
    cal = rows[part == "calibration"].reset_index(drop=True)
    test = rows[part == "test"].reset_index(drop=True)
    label = name if seed == SEED else f"{name}@{seed}"
    data = BenchData(label, cal, test, features, int_categorical, list(numeric), info)
    data.info["base_auc_test"] = _auc(test)
    return data


def _train_base(
    base: str, kind: str, quick: bool, features: list[str], seed: int = SEED
) -> tuple[pd.DataFrame, dict]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    frame, splits, rule = _load_real(base, seed)
    if quick:
        splits = {k: v[:QUICK_ROWS] for k, v in splits.items()}
    X = frame.drop(columns=["label"])
    y = frame["label"].to_numpy()
    model = HistGradientBoostingClassifier(categorical_features="from_dtype", **BASE_MODELS[kind])
    started = time.perf_counter()
    model.fit(X.iloc[splits["predictor"]], y[splits["predictor"]])
    train_seconds = time.perf_counter() - started
    parts = []
    for part, idx in splits.items():
        rows = frame.iloc[idx][["label", *features]].copy()
        rows.insert(0, "score", model.predict_proba(X.iloc[idx])[:, 1])
        rows["part"] = part
        parts.append(rows)
    rows = pd.concat(parts, ignore_index=True)
    train_rows = rows[rows["part"] == "predictor"]
    info = {
        "source": f"load_{ {'kdd': 'census_kdd'}.get(base, base) }",
        "splits": rule + (f"; --quick: first {QUICK_ROWS:,} rows of each" if quick else ""),
        "n_predictor": len(splits["predictor"]),
        "n_cal": len(splits["calibration"]),
        "n_test": len(splits["test"]),
        "base_model": f"sklearn HistGradientBoostingClassifier ({kind}) {BASE_MODELS[kind]}, "
        f"on all {X.shape[1]} features",
        "base_train_seconds": round(train_seconds, 1),
        "base_auc_predictor_train": _auc(train_rows),
        "positive_rate_test": float(rows.loc[rows["part"] == "test", "label"].mean()),
    }
    return rows, info


def _auc(frame: pd.DataFrame) -> float:
    from gpucal.metrics import roc_auc

    return float(roc_auc(frame["label"].to_numpy(), frame["score"].to_numpy()))


def field_min_rows(data: BenchData) -> int:
    """Fewest test rows a feature value needs to be its own group in the field metrics."""
    rate = float(data.cal["label"].mean())
    return int(max(FIELD_MIN_ROWS, np.ceil(FIELD_MIN_POSITIVES / max(rate, 1e-9))))


def field_groups(data: BenchData) -> dict[str, np.ndarray]:
    """Integer group per test row and feature for the field metrics (Field-RCE).

    Categorical features group by value; numeric ones by the calibration split's deciles. Values with
    fewer test rows than ``max(FIELD_MIN_ROWS, FIELD_MIN_POSITIVES / positive rate)`` are pooled into one
    group (-1): Field-RCE divides each value's excess by its positives (plus eps = 1e-6 per row), so a
    rare value with no positive would add about ``sum p / 1e-6`` and swamp the average (``site_id`` has
    40,000 values), and one with two positives reads noise. The threshold uses the global rate only.
    """
    min_rows = field_min_rows(data)
    out = {}
    for col in data.feature_cols:
        values = data.test[col]
        if col in data.numeric_cols:
            qs = np.linspace(0, 1, FIELD_NUMERIC_BINS + 1)[1:-1]
            edges = np.unique(np.nanquantile(data.cal[col].to_numpy(np.float64), qs))
            codes = np.searchsorted(edges, values.to_numpy(np.float64), side="right")
        else:
            codes = pd.factorize(values, use_na_sentinel=False)[0]
        counts = np.bincount(codes)
        out[col] = np.where(counts[codes] >= min_rows, codes, -1).astype(np.int64)
    return out


# ---------------------------------------------------------------------------------------------------
# The speed benchmark's data


def ctr_speed_frame(n_rows: int, *, row_offset: int = 0) -> pd.DataFrame:
    """``make_ctr(n, "mixed")`` with 8 categorical features: the 6 fields and 2 crosses.

    ``site_id`` (40,000 values) is the high-cardinality one; the crosses are ``device_hour`` (96 values)
    and ``region_segment`` (400). ``p_true`` is dropped. Features are integer codes (read by value).
    """
    from gpucal.datasets import make_ctr

    frame = make_ctr(n_rows, "mixed", seed=SEED, row_offset=row_offset).drop(columns=["p_true"])
    sizes = {"hour": 24, "user_segment": 8}
    for name, (a, b) in CTR_CROSSES.items():
        frame[name] = (frame[a].astype(np.int16) * sizes[b] + frame[b]).astype(np.int16)
    return frame


def speed_features(dataset: str) -> tuple[list[str], list[str], list[str]]:
    """(feature columns, integer columns read by value, numeric columns) of a speed dataset."""
    if dataset.startswith("flights"):
        categorical, numeric = REAL_FEATURES["flights"]
        return [*numeric, *categorical], ["hour", "weekday"], list(numeric)
    features = [*CTR_FEATURES, *CTR_CROSSES]
    return features, list(features), []


def flights_speed_frame() -> pd.DataFrame:
    """All 3M flights with the over-confident base model's score (trained on the first third).

    The score is in-sample on the predictor-train third: speed does not care, and every row has one.
    """
    data = prepare("flights")  # trains and caches the base model the first time
    del data
    key = _params_key("flights", "overconfident", False)
    rows = pd.read_parquet(cache_dir() / f"flights-{key}.parquet")
    return rows.drop(columns=["part"])

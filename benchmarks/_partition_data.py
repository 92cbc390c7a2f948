"""Data for the partition-calibrator benchmark (issue 5): Adult and KDD with MLP and GBM base models.

The HC paper (Sec. 6) calibrates multilayer perceptrons, regularised and not; the CCL paper embeds rows
with a tree ensemble's leaves or SHAP values. Each dataset here therefore comes with:

* the splits of ``_mbct_data`` (Adult 40 / 30 / 30 %, seed 0; KDD's official train halved into
  predictor-train and calibration, the official test as test);
* three base models trained on predictor-train, all on every feature of the dataset:

  - ``mlp``: unregularised (``alpha = 0``, two hidden layers of 256, no early stopping, 60 epochs):
    over-confident on purpose, the case where the papers see their largest gains;
  - ``mlp-reg``: regularised (one hidden layer of 64, ``alpha = 1e-2``, early stopping on 10 %);
  - ``gbm``: a deep LightGBM (255 leaves, 300 rounds, learning rate 0.1, no regularisation):
    over-confident;

* an embedding model: LightGBM (31 leaves, depth at most 6, 100 rounds, learning rate 0.1) on
  predictor-train, used for CCL's leaf and SHAP embeddings under every base model. (The CCL paper embeds
  with the base model itself when it is a tree model; the deep ``gbm``'s exact SHAP values cost about
  100x the depth-limited model's, minutes per 10k rows on this machine, so it is not used.)
* the predictor-train rows themselves, which HC grows its tree on (the paper's setting).

Inputs of the MLPs: numeric features standardised, categoricals one-hot (scikit-learn). Scores and the
embedding models are cached in ``~/.cache/gpucal/partition_bench`` (or ``$GPUCAL_DATA``) under a key of
the parameters; LightGBM models are cached as their own text format.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _mbct_data
import numpy as np
import pandas as pd

SEED = 0
DATASETS = ("adult", "kdd")
BASE_KINDS = ("mlp", "mlp-reg", "gbm")
MLP_PARAMS: dict[str, dict[str, Any]] = {
    "mlp": {
        "hidden_layer_sizes": (256, 256),
        "alpha": 0.0,
        "max_iter": 60,
        "early_stopping": False,
        "batch_size": 256,
        "random_state": SEED,
    },
    # KDD has five times Adult's predictor rows and a wider one-hot input: a smaller net and fewer epochs
    # overfit it as well (train AUC near 1) in a fifth of the time.
    "mlp-kdd": {
        "hidden_layer_sizes": (128, 128),
        "alpha": 0.0,
        "max_iter": 15,
        "early_stopping": False,
        "batch_size": 256,
        "random_state": SEED,
    },
    "mlp-reg": {
        "hidden_layer_sizes": (64,),
        "alpha": 1e-2,
        "max_iter": 200,
        "early_stopping": True,
        "validation_fraction": 0.1,
        "n_iter_no_change": 10,
        "batch_size": 256,
        "random_state": SEED,
    },
}
GBM_PARAMS: dict[str, Any] = {
    "n_estimators": 300,
    "num_leaves": 255,
    "learning_rate": 0.1,
    "min_child_samples": 5,
    "reg_lambda": 0.0,
    "random_state": SEED,
    "verbose": -1,
    "n_jobs": 2,
}
# Depth-limited: LightGBM's exact tree SHAP costs O(leaves x depth^2) per tree and row, and its
# leaf-wise trees grow deep without a limit (unlimited, 31 leaves: 1.5 ms per Adult row for 100 trees).
EMBED_PARAMS: dict[str, Any] = {
    "n_estimators": 100,
    "num_leaves": 31,
    "max_depth": 6,
    "learning_rate": 0.1,
    "random_state": SEED,
    "verbose": -1,
    "n_jobs": 2,
}
QUICK_ROWS = 8_000


@dataclass
class PartitionData:
    """Rows of one (dataset, base model): calibration, test and predictor-train, plus the embedding model.

    ``cal`` / ``test`` / ``train`` hold ``score`` (the base model's; NaN for ``train``), ``label`` and
    every raw feature. ``embedding_model`` is a ``lightgbm.Booster`` over ``embed_cols`` (every raw
    feature, categoricals as pandas ``category``).
    """

    name: str
    base: str
    cal: pd.DataFrame
    test: pd.DataFrame
    train: pd.DataFrame
    feature_cols: list[str]
    numeric_cols: list[str]
    embed_cols: list[str]
    embedding_model: Any
    info: dict[str, Any] = field(default_factory=dict)


def cache_dir() -> Path:
    root = Path(os.environ.get("GPUCAL_DATA", Path.home() / ".cache" / "gpucal"))
    out = root / "partition_bench"
    out.mkdir(parents=True, exist_ok=True)
    return out


def prepare(dataset: str, base: str, *, quick: bool = False) -> PartitionData:
    """Return the rows and models of ``dataset`` in {"adult", "kdd"} with base model ``base``."""
    if dataset not in DATASETS or base not in BASE_KINDS:
        msg = f"unknown (dataset, base) {(dataset, base)!r}; known: {DATASETS} x {BASE_KINDS}"
        raise ValueError(msg)
    frame, splits, rule = _mbct_data._load_real(dataset)
    if quick:
        splits = {k: v[:QUICK_ROWS] for k, v in splits.items()}
    raw_features = [c for c in frame.columns if c != "label"]
    categorical, numeric = _mbct_data.REAL_FEATURES[dataset]
    features = [*numeric, *categorical]
    key = _key(dataset, base, quick)
    scores_path = cache_dir() / f"{dataset}-{base}-{key}.npz"
    meta_path = scores_path.with_suffix(".json")
    embed_path = cache_dir() / f"{dataset}-embed-{_key(dataset, 'embed', quick)}.txt"
    if scores_path.exists() and meta_path.exists():
        scores = dict(np.load(scores_path))
        info = json.loads(meta_path.read_text())
    else:
        scores, info = _train_base(frame, splits, _mlp_key(dataset, base), raw_features)
        np.savez(scores_path, **scores)
        meta_path.write_text(json.dumps(info, indent=1))
    embedding_model = _embedding_model(frame, splits, raw_features, embed_path)
    parts = {}
    for part, idx in splits.items():
        rows = frame.iloc[idx].reset_index(drop=True)
        rows.insert(0, "score", scores[part] if part in scores else np.nan)
        parts[part] = rows
    info.update({"splits": rule, **{f"n_{p}": len(i) for p, i in splits.items()}})
    info["base_auc_test"] = _auc(parts["test"])
    return PartitionData(
        name=f"{dataset}/{base}",
        base=base,
        cal=parts["calibration"],
        test=parts["test"],
        train=parts["predictor"],
        feature_cols=features,
        numeric_cols=list(numeric),
        embed_cols=raw_features,
        embedding_model=embedding_model,
        info=info,
    )


def _key(dataset: str, base: str, quick: bool) -> str:
    params = {"mlp": MLP_PARAMS.get(_mlp_key(dataset, base)), "gbm": GBM_PARAMS, "embed": EMBED_PARAMS}
    text = json.dumps({"d": dataset, "b": base, "p": params, "quick": quick}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _mlp_key(dataset: str, base: str) -> str:
    return "mlp-kdd" if (dataset, base) == ("kdd", "mlp") else base


def _mlp_inputs(frame: pd.DataFrame, features: list[str]) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = [c for c in features if pd.api.types.is_numeric_dtype(frame[c])]
    categorical = [c for c in features if c not in numeric]
    return ColumnTransformer(
        [
            ("num", StandardScaler(), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore", min_frequency=10), categorical),
        ]
    )


def _train_base(
    frame: pd.DataFrame, splits: dict[str, np.ndarray], base: str, features: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    y = frame["label"].to_numpy()
    X = frame[features]
    started = time.perf_counter()
    if base == "gbm":
        from lightgbm import LGBMClassifier

        model = LGBMClassifier(**GBM_PARAMS).fit(X.iloc[splits["predictor"]], y[splits["predictor"]])
        described = f"lightgbm.LGBMClassifier {GBM_PARAMS}"
    else:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline

        model = make_pipeline(_mlp_inputs(frame, features), MLPClassifier(**MLP_PARAMS[base]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X.iloc[splits["predictor"]], y[splits["predictor"]])
        described = (
            f"sklearn MLPClassifier {MLP_PARAMS[base]} on standardised numerics + one-hot categoricals"
        )
    seconds = time.perf_counter() - started
    scores = {part: model.predict_proba(X.iloc[idx])[:, 1] for part, idx in splits.items()}
    info = {
        "base_model": described,
        "base_train_seconds": round(seconds, 1),
        "base_auc_predictor_train": _auc_arrays(y[splits["predictor"]], scores["predictor"]),
    }
    return {"calibration": scores["calibration"], "test": scores["test"]}, info


def _embedding_model(
    frame: pd.DataFrame, splits: dict[str, np.ndarray], features: list[str], path: Path
) -> Any:
    """The LightGBM booster whose leaves / SHAP values embed the rows."""
    import lightgbm

    if not path.exists():
        y = frame["label"].to_numpy()
        model = lightgbm.LGBMClassifier(**EMBED_PARAMS)
        model.fit(frame[features].iloc[splits["predictor"]], y[splits["predictor"]])
        model.booster_.save_model(str(path))
    return lightgbm.Booster(model_file=str(path))


def _auc(rows: pd.DataFrame) -> float:
    return _auc_arrays(rows["label"].to_numpy(), rows["score"].to_numpy())


def _auc_arrays(y: np.ndarray, p: np.ndarray) -> float:
    from gpucal.metrics import roc_auc

    return float(roc_auc(y, p))

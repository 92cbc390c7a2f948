"""Fuzzed model files (issue 18): truncations and field mutations of every saved estimator.

Every registered estimator is fitted on tiny data and saved; each file is then cut at random points and
mutated field by field (null, overflowing and huge literals, negative, out-of-range and self-pointing
indices, wrong types, huge lengths, deep nesting), and each integer of its state is set to a billion.
A subprocess under a memory limit loads and predicts every variant: each must raise ``ModelFileError``
at load (or a clear ``ValueError`` / ``TypeError`` / ``KeyError`` at predict) or predict finite values.
A crash (a signal), a hang (the timeout), running out of memory or a non-finite prediction fails the
test, naming the file and the mutation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gpucal
from gpucal.registry import class_names

MEMORY_LIMIT = 6 << 30  # RLIMIT_AS of the subprocess: far above a tiny model's needs
N_TRUNCATIONS = 8
N_MUTATIONS = 60
HOLE = "__FUZZ_HOLE__"
# (text replacing the hole, what it tests)
LITERALS = [
    ("null", "null"),
    ("1e999", "overflowing float"),
    ("-1e999", "overflowing float"),
    ("9" * 30, "huge int"),
    ("-1", "negative"),
    ("0", "zero"),
    ("2147483648", "past int32"),
    ("-9223372036854775809", "past int64"),
    ("1000000", "a million"),
    ("1000000000", "a billion"),
    ("1e300", "huge float"),
    ("-1e300", "huge float"),
    ('"x"', "string"),
    ("true", "bool"),
    ("[]", "empty list"),
    ("{}", "empty object"),
    ("[" * 40 + "]" * 40, "deep nesting"),
    ("[" + ", ".join(["1000000"] * 2000) + "]", "long list"),
]

CHILD = r"""
import json, resource, sys, traceback
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import numpy as np, pandas as pd
import gpucal
from gpucal.persistence import ModelFileError

def finite(out):
    values = out.to_numpy() if hasattr(out, "to_numpy") else np.asarray(out)
    return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())

for line in open(sys.argv[1]):
    case = json.loads(line)
    print("START", case["id"], flush=True)
    try:
        model = gpucal.load(case["path"])
    except ModelFileError:
        print("DONE", case["id"], "refused", flush=True)
        continue
    except Exception as error:
        print("DONE", case["id"], "load-escaped", type(error).__name__, str(error)[:200], flush=True)
        continue
    X = pd.read_parquet(case["input"])
    X = X["score"].to_numpy() if case["input_kind"] == "scores" else X
    X = X.to_numpy() if case["input_kind"] == "matrix" else X
    try:
        out = model.predict(X)
    except (ValueError, TypeError, KeyError) as error:
        message = str(error)[:150].replace("\n", " ")
        print("DONE", case["id"], "predict-error", type(error).__name__, message, flush=True)
        continue
    except Exception as error:
        print("DONE", case["id"], "predict-escaped", type(error).__name__, str(error)[:200], flush=True)
        continue
    print("DONE", case["id"], "finite" if finite(out) else "non-finite", flush=True)
"""


def _frame(n=400, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "score": rng.uniform(0.02, 0.98, n),
            "f1": rng.normal(size=n),
            "f2": rng.integers(0, 4, n).astype(float),
        }
    )
    y = (rng.random(n) < frame["score"]).astype(int)
    return frame, y


def _fitted_models():
    """(name, fitted model, predict input kind, predict frame) for every registered class."""
    import lightgbm as lgb
    import xgboost as xgb

    frame, y = _frame()
    feats = ["f1", "f2"]
    score = frame["score"].to_numpy()
    out = []
    for name in (
        "platt",
        "temperature",
        "beta",
        "histogram",
        "isotonic",
        "scaling_binning",
        "sir",
        "venn_abers",
        "centered_isotonic",
        "bbq",
        "enir",
        "spline",
        "platt_hinge",
    ):
        out.append((name, gpucal.make_calibrator(name).fit(score, y), "scores", frame))
    out.append(
        ("downsampling", gpucal.make_calibrator("downsampling", rate=0.25).fit(score, y), "scores", frame)
    )
    out.append(
        (
            "piecewise_logit",
            gpucal.make_calibrator("piecewise_logit", n_knots=8).fit(score, y),
            "scores",
            frame,
        )
    )
    rng = np.random.default_rng(1)
    probs = pd.DataFrame(rng.dirichlet([1.0, 2.0, 3.0], 300), columns=["p0", "p1", "p2"])
    labels = np.array([rng.choice(3, p=row) for row in probs.to_numpy()])
    out.append(("dirichlet", gpucal.DirichletCalibrator().fit(probs.to_numpy(), labels), "matrix", probs))
    out.append(
        (
            "feature_platt",
            gpucal.FeatureAwarePlattCalibrator(feature_cols=feats).fit(frame, y),
            "frame",
            frame,
        )
    )
    mbct = gpucal.MBCT(
        feature_cols=feats, max_trees=2, max_depth=2, n_bins=4, min_node_size=40.0, validation_fraction=0.0
    ).fit(frame, y)
    out.append(("mbct", mbct, "frame", frame))
    hc = gpucal.HeterogeneousCalibrator(feature_cols=feats, min_leaf_size=50.0, max_depth=2).fit(frame, y)
    out.append(("hc", hc, "frame", frame))
    neural = gpucal.FieldAwareCalibrator(feature_cols=feats, max_epochs=2, n_knots=8, hidden_units=4)
    out.append(("field_aware", neural.fit(frame, y), "frame", frame))
    lgb_model = lgb.LGBMClassifier(n_estimators=3, num_leaves=4, verbose=-1, n_jobs=1).fit(frame[feats], y)
    xgb_model = xgb.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1).fit(frame[feats], y)
    for label, model, embedding in [
        ("lgb", lgb_model, "leaves"),
        ("xgb", xgb_model, "shap"),
        ("mbct", mbct, "leaves"),
    ]:
        ccl = gpucal.ClusteredCalibrator(
            embedding_model=model,
            embedding=embedding,
            n_clusters=3,
            feature_cols=feats if label != "mbct" else None,
        )
        out.append((f"ccl_{label}", ccl.fit(frame, y), "frame", frame))
    if "AutoCalibrator" in class_names():
        auto = gpucal.make_calibrator("auto", candidates=["platt", "isotonic"], n_folds=2)
        out.append(("auto", auto.fit(score, y), "scores", frame))
    return out


def _leaf_paths(node, path=()):
    """Every path to a scalar or a list in a JSON document (the first 50 entries of each list)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaf_paths(value, (*path, key))
    elif isinstance(node, list):
        yield path
        for i, value in enumerate(node[:50]):
            yield from _leaf_paths(value, (*path, i))
    elif path:
        yield path


def _set(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _get(document, path):
    for key in path:
        document = document[key]
    return document


def _declared_counts(text):
    """(label, text) with each integer of the state, one at a time, set to a billion: no count a file
    declares may make load or predict allocate by it (a million classes asked 74.5 GiB)."""
    document = json.loads(text)
    for path in _leaf_paths(document):
        value = _get(document, path) if path and path[0] == "state" else None
        if type(value) is int:
            mutated = json.loads(text)
            _set(mutated, path, 10**9)
            yield f"{path}: a billion", json.dumps(mutated)


def _variants(text, rng):
    """(label, text) of truncations and field mutations of one saved file."""
    yield from _declared_counts(text)
    for cut in sorted(rng.integers(1, len(text), N_TRUNCATIONS).tolist()):
        yield f"truncated at {cut}", text[:cut]
    document = json.loads(text)
    paths = [p for p in _leaf_paths(document) if p and p[0] == "state"]
    for k in rng.choice(len(paths), size=min(N_MUTATIONS, len(paths)), replace=False).tolist():
        path = paths[k]
        value = _get(document, path)
        mutated = json.loads(text)
        if isinstance(path[-1], int) and isinstance(value, int) and not isinstance(value, bool):
            # An index pointing at its own position (a child pointing at its own node), or one past it.
            choice = int(rng.integers(3))
            literal = str(path[-1] + (0, 1, value + 10**6)[choice])
            label = ("self-pointing", "next", "far")[choice]
        elif isinstance(value, str) and rng.random() < 0.5:
            # Another string of the file: a valid name in the wrong place (a class, a library, a map).
            strings = sorted({v for p in paths if isinstance(v := _get(document, p), str)} - {value})
            literal = json.dumps(strings[int(rng.integers(len(strings)))] if strings else "")
            label = f"string {literal[:40]}"
        elif isinstance(value, list) and value and rng.random() < 0.3:
            _set(mutated, path, value[: len(value) // 2])  # a list cut short
            yield f"{path}: halved list", json.dumps(mutated)
            continue
        else:
            literal, label = LITERALS[int(rng.integers(len(LITERALS)))]
        _set(mutated, path, HOLE)
        yield f"{path}: {label}", json.dumps(mutated).replace(f'"{HOLE}"', literal)


def test_fuzzed_model_files_never_crash_hang_or_predict_non_finite(tmp_path):
    rng = np.random.default_rng(18)
    cases, labels = [], {}
    models = _fitted_models()
    assert {type(m).__name__ for _, m, _, _ in models} == set(class_names())  # every registered class
    for name, model, kind, frame in models:
        model.save(tmp_path / f"{name}.json")
        text = (tmp_path / f"{name}.json").read_text()
        frame.to_parquet(tmp_path / f"{name}.parquet")
        for j, (label, variant) in enumerate(_variants(text, rng)):
            path = tmp_path / f"{name}-{j}.json"
            path.write_text(variant)
            case_id = f"{name}-{j}"
            labels[case_id] = f"{name}: {label}"
            cases.append(
                {
                    "id": case_id,
                    "path": str(path),
                    "input": str(tmp_path / f"{name}.parquet"),
                    "input_kind": kind,
                }
            )
    (tmp_path / "cases.jsonl").write_text("\n".join(json.dumps(c) for c in cases))
    (tmp_path / "child.py").write_text(CHILD)
    repo = str(Path(gpucal.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "cases.jsonl"), str(MEMORY_LIMIT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=repo,
        env=env,
    )
    results = {}
    started = None
    for line in done.stdout.splitlines():
        word, case_id, *rest = [*line.split(" ", 2), ""]
        if word == "START":
            started = case_id
        elif word == "DONE":
            results[case_id] = rest[0]
            started = None
    if started is not None or done.returncode != 0:
        where = labels.get(started, "?") if started else "?"
        pytest.fail(f"the loader died (return code {done.returncode}) on {where}:\n{done.stderr[-3000:]}")
    bad = {
        labels[c]: r
        for c, r in results.items()
        if r.split(" ")[0] not in ("refused", "predict-error", "finite")
    }
    assert not bad, "\n".join(f"{k} -> {v}" for k, v in sorted(bad.items()))
    assert len(results) == len(cases)

"""Tests of gpucal.rules: text, JSON and SQL rules of a hand-made chain against a plain-Python walk."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pandas as pd
import pytest

import gpucal.kernels.trees
from gpucal.encoding import FeatureEncoder
from gpucal.rules import export_rules, sql_float, sql_value
from gpucal.rules.chain import LOGIT_HIGH, LOGIT_LOW
from gpucal.trees.ensemble import TreeEnsemble, map_codes

EPS = float(np.finfo(np.float64).eps)
SCORE_BINS = 10
SITES = ["a", "b", "O'Brien", 'd"q']


def fit_encoder(handle_unseen: str = "separate") -> FeatureEncoder:
    """Encoder of a small frame: a string column (a quote in two values, None) and a numeric one (NaN)."""
    site = [*SITES * 10, None]
    age = [*np.linspace(10.0, 50.0, 40).round(1).tolist(), np.nan]
    frame = pd.DataFrame({"site": site, "age": age})
    return FeatureEncoder(n_bins=4, handle_unseen=handle_unseen).fit(frame)


def site_code(enc: FeatureEncoder, value: str) -> int:
    return list(enc.categories_["site"]).index(value)


def build_ensemble(enc: FeatureEncoder, leaf_map: str, seed: int = 0) -> TreeEnsemble:
    """Two trees: pooled values, -1 children (a value stops at its node), the numeric bins, the score bin.

    Splits are written on input codes; the trees read tree codes, where d"q and unseen share one rare
    site code and score bins 8 and 9 share one (so both always route together).

    tree 1: 0 site -> {O'Brien, a}: 1 (age), b: 2 (score bin), missing: 3, d"q and unseen stop at 0
            1 age -> bins 0-1 and missing: 4, bin 2: 5, bin 3 stops at 1
            2 score bin -> 0-2: 6, 3-6: 7, 7: 8, 8-9 stop at 2
    tree 2: 9 score bin -> 0-4: 10, 5-9: 11
            10 site -> d"q and unseen: 12, a: 13, the rest stop at 10
    """
    n_site, n_age = (int(k) for k in enc.n_values_)
    site_missing, age_missing = (int(k) for k in enc.missing_codes_)
    dq = site_code(enc, 'd"q')
    site_rare = [dq] + ([int(enc.unseen_codes_[0])] if enc.unseen_codes_[0] >= 0 else [])
    classes = [
        [[c] for c in range(n_site) if c not in site_rare] + [site_rare],
        [[c] for c in range(n_age)],
        [[c] for c in range(8)] + [[8, 9]],
    ]
    code_maps = []
    for groups in classes:
        cmap = np.zeros(sum(len(g) for g in groups), dtype=np.int32)
        for tree_code, group in enumerate(groups):
            cmap[group] = tree_code
        code_maps.append(cmap)
    n_values = np.array([len(g) for g in classes], dtype=np.int64)
    splits = {
        0: (
            0,
            {site_code(enc, "O'Brien"): 1, site_code(enc, "a"): 1, site_code(enc, "b"): 2, site_missing: 3},
        ),
        1: (1, {0: 4, 1: 4, 2: 5, age_missing: 4}),
        2: (2, {**dict.fromkeys(range(3), 6), **dict.fromkeys(range(3, 7), 7), 7: 8}),
        9: (2, {**dict.fromkeys(range(5), 10), **dict.fromkeys(range(5, 10), 11)}),
        10: (0, {**dict.fromkeys(site_rare, 12), site_code(enc, "a"): 13}),
    }
    n_nodes = 14
    node_feature = np.full(n_nodes, -1, dtype=np.int32)
    node_child_base = np.full(n_nodes, -1, dtype=np.int64)
    table: list[int] = []
    for node, (j, kids) in splits.items():
        node_feature[node] = j
        node_child_base[node] = len(table)
        row = [-1] * int(n_values[j])
        for code, child in kids.items():
            row[code_maps[j][code]] = child
        table += row
    rng = np.random.default_rng(seed)
    value = np.zeros((n_nodes, 2))
    if leaf_map == "scale":
        value[:, 0] = rng.uniform(0.5, 1.9, n_nodes)  # above 1: the clip at 1 is reached
    elif leaf_map == "shift":
        value[:, 0], value[:, 1] = 1.0, rng.uniform(-1.5, 1.5, n_nodes)
    else:
        value[:, 0], value[:, 1] = rng.uniform(0.6, 1.4, n_nodes), rng.uniform(-0.7, 0.7, n_nodes)
    ensemble = TreeEnsemble(
        leaf_map=leaf_map,
        feature_names=["site", "age", "score bin"],
        n_values=n_values,
        node_feature=node_feature,
        node_child_base=node_child_base,
        child_table=np.asarray(table, dtype=np.int32),
        node_value=value,
        node_weight=np.array([1000, 500, 300, 200, 250, 250, 100, 120, 80, 1000, 600, 400, 12.5, 300]),
        node_depth=np.array([0, 1, 1, 1, 2, 2, 2, 2, 2, 0, 1, 1, 2, 2], dtype=np.int32),
        tree_start=np.array([0, 9, n_nodes], dtype=np.int64),
        code_maps=code_maps,
        rare_codes=np.array([len(classes[0]) - 1, -1, 8], dtype=np.int64),
    )
    ensemble.check()
    return ensemble


def make_rows(enc: FeatureEncoder, n: int = 10_000, seed: int = 1) -> pd.DataFrame:
    """Rows with every kind of value: unseen and missing sites, ages on the bin edges, +-inf and NaN,
    scores on and next to the score-bin edges, 0 and 1."""
    rng = np.random.default_rng(seed)
    site_pool = np.array([*SITES, None, "zz", "a ", "o'brien"], dtype=object)
    edges = enc.bin_edges_["age"]
    age_pool = np.concatenate([edges, np.nextafter(edges, -np.inf), [np.nan, np.inf, -np.inf, 0.0, 99.0]])
    age = rng.uniform(0.0, 60.0, n)
    take = rng.random(n) < 0.4
    age[take] = rng.choice(age_pool, int(take.sum()))
    grid = np.arange(SCORE_BINS + 1) / SCORE_BINS
    score_pool = np.concatenate([grid, np.nextafter(grid[1:], 0.0), np.nextafter(grid[:-1], 1.0)])
    score = rng.random(n)
    take = rng.random(n) < 0.4
    score[take] = rng.choice(score_pool, int(take.sum()))
    score[:3] = [0.0, 1.0, 0.7]  # 0.7 * 10 = 7.000000000000001: bin 7
    return pd.DataFrame({"site": rng.choice(site_pool, n), "age": age, "score": score})


def row_codes(enc: FeatureEncoder, rows: pd.DataFrame) -> np.ndarray:
    """Codes as the model sees them: the encoder's columns, then the score bin."""
    score_bin = [min(math.floor(s * SCORE_BINS), SCORE_BINS - 1) for s in rows["score"].tolist()]
    return np.column_stack([np.asarray(enc.transform(rows[["site", "age"]])), score_bin])


def stop_node(ens: TreeEnsemble, tree: int, codes: list[int]) -> int:
    """The node a row with input ``codes`` stops at in ``tree`` (through the tree codes)."""
    node = int(ens.tree_start[tree])
    while ens.node_feature[node] >= 0:
        j = int(ens.node_feature[node])
        child = int(ens.child_table[ens.node_child_base[node] + ens.code_maps[j][codes[j]]])
        if child < 0:
            break
        node = child
    return node


def logit_clip(p: float) -> float:
    p = min(max(p, EPS), 1.0 - EPS)
    return math.log(p / (1.0 - p))


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def reference_predict(ens: TreeEnsemble, codes: np.ndarray, score: np.ndarray, init=(1.0, 0.0)) -> np.ndarray:
    """The chain, one row at a time in plain Python, in the kernels' order of operations."""
    out = []
    for row, s in zip(codes.tolist(), score.tolist(), strict=True):
        nodes = [stop_node(ens, t, row) for t in range(ens.n_trees)]
        if ens.leaf_map == "scale":
            f = s if init == (1.0, 0.0) else sigmoid(init[0] * logit_clip(s) + init[1])
            for m in nodes:
                f = min(float(ens.node_value[m, 0]) * f, 1.0)
            out.append(f)
        else:
            # The initial map's logit starts the chain, clipped to the clipped probabilities' logits.
            lt = min(max(init[0] * logit_clip(s) + init[1], LOGIT_LOW), LOGIT_HIGH)
            for m in nodes:
                lt = float(ens.node_value[m, 0]) * lt + float(ens.node_value[m, 1])
            out.append(sigmoid(lt))
    return np.asarray(out)


def run_sqlite(sql_select: str, rows: pd.DataFrame) -> np.ndarray:
    con = sqlite3.connect(":memory:")
    con.execute('CREATE TABLE events (id INTEGER, site TEXT, age REAL, score REAL, "gpucal_x" REAL)')
    records = [
        (i, s, None if isinstance(a, float) and math.isnan(a) else a, sc, 0.5)
        for i, (s, a, sc) in enumerate(
            zip(rows["site"], rows["age"].tolist(), rows["score"].tolist(), strict=True)
        )
    ]
    con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", records)
    got = con.execute(f"SELECT id, calibrated FROM ({sql_select}) ORDER BY id").fetchall()
    con.close()
    return np.array([g[1] for g in got], dtype=np.float64)


def setup(leaf_map: str, handle_unseen: str = "separate", seed: int = 0):
    enc = fit_encoder(handle_unseen)
    ens = build_ensemble(enc, leaf_map, seed)
    rows = make_rows(enc)
    return enc, ens, rows, row_codes(enc, rows)


# --- reference sanity: the hand-made trees are reached everywhere ---------------------------------


def test_rows_reach_every_node_and_stop_case():
    _, ens, rows, codes = setup("scale")
    reached = {stop_node(ens, t, r) for r in codes.tolist() for t in range(2)}
    # Every leaf, plus the split nodes where some values stop (0, 1, 2 and 10).
    assert reached == {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13}
    pred = reference_predict(ens, codes, rows["score"].to_numpy())
    assert (pred == 1.0).any()  # the clip at 1 is exercised
    assert (pred < 1.0).any()


# --- SQL -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("handle_unseen", ["separate", "missing"])
def test_sql_scale_reproduces_predictions_exactly(handle_unseen):
    enc, ens, rows, codes = setup("scale", handle_unseen)
    sql = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, format="sql", table="events")
    got = run_sqlite(sql, rows)
    expected = reference_predict(ens, codes, rows["score"].to_numpy())
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("leaf_map", ["shift", "platt"])
@pytest.mark.parametrize("init", [(1.0, 0.0), (1.3, -0.4)])
def test_sql_logit_maps_agree_to_rounding(leaf_map, init):
    enc, ens, rows, codes = setup(leaf_map, seed=3)
    sql = export_rules(
        ens, enc, score_col="score", score_bins=SCORE_BINS, init=init, format="sql", table="events"
    )
    got = run_sqlite(sql, rows)
    expected = reference_predict(ens, codes, rows["score"].to_numpy(), init)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_sql_scale_with_platt_init():
    enc, ens, rows, codes = setup("scale", seed=4)
    init = (0.8, 0.25)
    sql = export_rules(
        ens, enc, score_col="score", score_bins=SCORE_BINS, init=init, format="sql", table="events"
    )
    expected = reference_predict(ens, codes, rows["score"].to_numpy(), init)
    np.testing.assert_allclose(run_sqlite(sql, rows), expected, rtol=0, atol=1e-12)


def test_sql_with_python_exp_and_ln_registered():
    """What users of an SQLite built without math functions do: register Python's exp and ln."""
    enc, ens, rows, codes = setup("shift", seed=5)
    expr = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, format="sql")
    con = sqlite3.connect(":memory:")
    con.create_function("exp", 1, math.exp, deterministic=True)
    con.create_function("ln", 1, math.log, deterministic=True)
    con.execute("CREATE TABLE t (site TEXT, age REAL, score REAL)")
    sub = rows.iloc[:500]
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        list(zip(sub["site"], [None if math.isnan(a) else a for a in sub["age"]], sub["score"], strict=True)),
    )
    got = np.array([r[0] for r in con.execute(f"SELECT {expr} FROM t ORDER BY rowid")])
    expected = reference_predict(ens, codes[:500], sub["score"].to_numpy())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("leaf_map", "init"), [("scale", (1.0, 0.0)), ("shift", (1.0, 0.0)), ("platt", (0.9, 0.3))]
)
def test_sql_with_duckdb(leaf_map, init):
    duckdb = pytest.importorskip("duckdb")
    enc, ens, rows, codes = setup(leaf_map)
    sql = export_rules(
        ens, enc, score_col="score", score_bins=SCORE_BINS, init=init, format="sql", table="events"
    )
    frame = rows.assign(id=np.arange(len(rows)))
    con = duckdb.connect()
    con.register("events_nan", frame)
    # DuckDB keeps NaN as a number: a missing value must be NULL (see export_rules' Notes).
    con.execute(
        "CREATE TABLE events AS SELECT id, site, CASE WHEN isnan(age) THEN NULL ELSE age END AS age, score "
        "FROM events_nan"
    )
    got = np.array([r[1] for r in con.execute(f"SELECT id, calibrated FROM ({sql}) ORDER BY id").fetchall()])
    expected = reference_predict(ens, codes, rows["score"].to_numpy(), init)
    if leaf_map == "scale":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_a_score_column_named_with_a_comment_opener_runs_in_duckdb():
    """DuckDB nests block comments: a score column named ``p /* raw`` in the header comment left it
    open ("unterminated /* comment")."""
    import duckdb  # a test dependency (pyproject's test extra)

    rng = np.random.default_rng(0)
    score = rng.uniform(0.02, 0.98, 4000)
    group = rng.integers(0, 3, 4000)
    y = (rng.uniform(size=4000) < np.clip(score + 0.2 * (group - 1), 0, 1)).astype(float)
    X = pd.DataFrame({"p /* raw": score, "g": np.array(["a", "b", "c"])[group]})
    model = gpucal.MBCT(score_col="p /* raw", max_trees=2).fit(X, y)
    sql = model.export_rules(format="sql", table="X")
    con = duckdb.connect()
    con.register("X", X)
    got = con.execute(sql).df()["calibrated"].to_numpy()
    np.testing.assert_allclose(got, model.predict(X), rtol=0, atol=1e-12)


def test_sql_float_literals_read_back_exactly():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.random(3000),
            np.exp(rng.normal(0, 20, 3000)),
            -rng.random(1000) * 40,
            [-24.08123712760238, 3.805962206803928e-07, 1e-300, 5e-324, 2.0**60, 1e300, -0.0, 0.1, 1.0 - EPS],
        ]
    )
    con = sqlite3.connect(":memory:")
    for i in range(0, len(values), 400):
        chunk = [float(v) for v in values[i : i + 400]]
        got = con.execute("SELECT " + ", ".join(sql_float(v) for v in chunk)).fetchone()
        assert list(got) == chunk
    with pytest.raises(ValueError, match="no literal"):
        sql_float(math.inf)


def test_sql_quotes_values_and_identifiers():
    assert sql_value("O'Brien") == "'O''Brien'"
    assert sql_value('d"q') == "'d\"q'"
    assert sql_value(True) == "TRUE"
    assert sql_value(np.int64(3)) == "3"
    enc, ens, _, _ = setup("scale")
    expr = export_rules(ens, enc, score_col='my "score"', score_bins=SCORE_BINS, format="sql")
    assert '"my ""score""" * 10' in expr
    assert "'O''Brien'" in expr
    assert '"site" IS NULL' in expr
    assert "NOT IN (" in expr


def test_sql_aliases_avoid_column_names():
    """A split column whose name starts like the aliases gets a longer alias prefix."""
    enc, ens, rows, codes = setup("platt")
    frame = rows.rename(columns={"score": "gpucal_score"})
    sql = export_rules(ens, enc, score_col="gpucal_score", score_bins=SCORE_BINS, format="sql", table="t")
    assert "AS gpucal__k)" in sql
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (site TEXT, age REAL, gpucal_score REAL)")
    sub = frame.iloc[:300]
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        list(
            zip(
                sub["site"],
                [None if math.isnan(a) else a for a in sub["age"]],
                sub["gpucal_score"],
                strict=True,
            )
        ),
    )
    got = np.array([r[-1] for r in con.execute(sql + " ORDER BY rowid")])
    np.testing.assert_allclose(
        got, reference_predict(ens, codes[:300], sub["gpucal_score"].to_numpy()), atol=1e-12
    )


def test_sql_precision_rounds_literals():
    enc, ens, _, _ = setup("scale")
    expr = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, format="sql", precision=4)
    assert "CAST(" not in expr
    assert f"{float(ens.node_value[3, 0]):.4g}" in expr


@pytest.mark.parametrize("leaf_map", ["shift", "platt"])
def test_sql_precision_keeps_a_score_of_one_a_number(leaf_map):
    """Rounded to 12 digits, the clip's 1 - eps read as 1.0 and a score of 1 divided by zero in the
    logit (NULL in SQLite): the clip's bounds are written exactly whatever the precision."""
    enc, ens, rows, codes = setup(leaf_map, seed=3)
    rows = rows.assign(score=np.where(np.arange(len(rows)) % 3 == 0, 1.0, rows["score"]))
    sql = export_rules(
        ens, enc, score_col="score", score_bins=SCORE_BINS, format="sql", table="events", precision=12
    )
    got = run_sqlite(sql, rows)
    expected = reference_predict(ens, codes, rows["score"].to_numpy())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


# --- JSON ------------------------------------------------------------------------------------------


def _json_matches(cond: dict, features: list, row: dict) -> bool:
    """A condition of the JSON rules, evaluated as a non-Python service would (see the module schema)."""
    feature = features[cond["feature"]]
    value = row[cond["column"]]
    is_missing = value is None or (isinstance(value, float) and math.isnan(value))
    if feature["kind"] == "values":
        if is_missing:
            return cond["missing"]
        if value not in feature["categories"]:
            return cond["unseen"]
        return value in cond["values"]
    if feature["kind"] == "bins":
        if is_missing:
            return cond["missing"]
        return any((lo is None or value >= lo) and (hi is None or value < hi) for lo, hi in cond["intervals"])
    bin_ = min(math.floor(value * feature["bins"]), feature["bins"] - 1)
    return any(lo <= bin_ <= hi for lo, hi in cond["bins"])


def json_predict(rules: dict, row: dict) -> float:
    s = row[rules["score"]["column"]]
    a0, b0, eps = rules["init"]["a"], rules["init"]["b"], rules["eps"]

    def logit(p):
        p = min(max(p, eps), 1.0 - eps)
        return math.log(p / (1.0 - p))

    f = s if (a0, b0) == (1.0, 0.0) else 1.0 / (1.0 + math.exp(-(a0 * logit(s) + b0)))
    lt = logit(f)
    for node in rules["trees"]:
        while True:
            nxt = [c for c in node["children"] if _json_matches(c["condition"], rules["features"], row)]
            assert len(nxt) <= 1
            if not nxt:
                break
            node = nxt[0]
        a, b = node["map"]["a"], node["map"]["b"]
        if rules["leaf_map"] == "scale":
            f = min(a * f, 1.0)
        else:
            lt = a * lt + b
    return f if rules["leaf_map"] == "scale" else 1.0 / (1.0 + math.exp(-lt))


@pytest.mark.parametrize(
    ("leaf_map", "handle_unseen"), [("scale", "separate"), ("scale", "missing"), ("platt", "separate")]
)
def test_json_interpreted_equals_reference(leaf_map, handle_unseen):
    enc, ens, rows, codes = setup(leaf_map, handle_unseen, seed=2)
    init = (1.0, 0.0) if leaf_map == "scale" else (1.1, 0.2)
    text = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, init=init, format="json")
    rules = json.loads(text)
    assert rules["format"] == "gpucal.MBCT.rules"
    assert rules["version"] == 1
    assert "min(k * f_(t-1), 1)" in rules["formula"] or "l_t" in rules["formula"]
    sub = rows.iloc[:3000]
    records = sub.to_dict("records")
    got = np.array([json_predict(rules, r) for r in records])
    expected = reference_predict(ens, codes[:3000], sub["score"].to_numpy(), init)
    if leaf_map == "scale":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_json_structure():
    enc, ens, _, _ = setup("shift")
    rules = json.loads(export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, format="json"))
    assert [f["kind"] for f in rules["features"]] == ["values", "bins", "score_bins"]
    assert rules["features"][0]["categories"] == ["O'Brien", "a", "b", 'd"q']
    root = rules["trees"][0]
    assert root["condition"] is None
    assert root["weight"] == 1000.0
    first = root["children"][0]
    assert first["condition"] == {
        "feature": 0,
        "column": "site",
        "values": ["O'Brien", "a"],
        "missing": False,
        "unseen": False,
    }
    assert first["children"][0]["condition"]["intervals"] == [[None, float(enc.bin_edges_["age"][1])]]
    assert first["children"][0]["condition"]["missing"] is True
    assert rules["trees"][0]["children"][1]["children"][0]["condition"]["bins"] == [[0, 2]]
    pooled = rules["trees"][1]["children"][0]["children"][1]["condition"]
    assert pooled == {"feature": 0, "column": "site", "values": ['d"q'], "missing": False, "unseen": True}


# --- text ------------------------------------------------------------------------------------------


def test_text_rules():
    enc, ens, _, _ = setup("scale")
    text = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS)
    lines = text.splitlines()
    assert lines[0] == 'Calibration tree rules: 2 tree(s), leaf map "scale"'
    assert "  f_0 = score" in lines
    assert "  tree t: f_t = min(k * f_(t-1), 1), k of the rule the row meets" in lines
    assert "  score bin = min(floor(score * 10), 9)" in lines
    k = [f"{v:.6g}" for v in ens.node_value[:, 0]]
    labels = enc.describe_codes("age")
    lo_bins = f"[-inf, {labels[1].split(', ')[1]}"  # bins 0 and 1 merged
    expected = [
        "tree 1",
        "  if site in {\"O'Brien\", 'a'}:",
        f"    if age in {lo_bins} or missing: k = {k[4]} (rows 250)",
        f"    if age in {labels[2]}: k = {k[5]} (rows 250)",
        f"    otherwise (age in {labels[3]}): k = {k[1]} (node map, rows 500)",
        "  if site in {'b'}:",
        f"    if score bin in [0, 0.3): k = {k[6]} (rows 100)",
        f"    if score bin in [0.3, 0.7): k = {k[7]} (rows 120)",
        f"    if score bin in [0.7, 0.8): k = {k[8]} (rows 80)",
        f"    otherwise (score bin in [0.8, 1]): k = {k[2]} (node map, rows 300)",
        f"  if site is missing: k = {k[3]} (rows 200)",
        f"  otherwise (site in {{'d\"q'}} or unseen): k = {k[0]} (node map, rows 1000)",
        "tree 2",
        "  if score bin in [0, 0.5):",
        f"    if site in {{'a'}}: k = {k[13]} (rows 300)",
        f"    if site in {{'d\"q'}} or unseen: k = {k[12]} (weight 12.5)",
        f"    otherwise (site in {{\"O'Brien\", 'b'}} or missing): k = {k[10]} (node map, rows 600)",
    ]
    body = lines[lines.index("tree 1") :]
    for line in expected:
        assert line in body, line
    assert body.index("  if site is missing: k = " + k[3] + " (rows 200)") < body.index("tree 2")
    assert f"  if score bin in [0.5, 1]: k = {k[11]} (rows 400)" in body


def test_text_shift_platt_and_single_leaf_tree():
    enc, ens, _, _ = setup("platt")
    text = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, init=(1.2, -0.1), precision=3)
    assert (
        "l_0 = clip(a0 * logit(clip(score, eps, 1 - eps)) + b0, -logit(1 - eps), logit(1 - eps)), "
        "logit(p) = ln(p / (1 - p)), a0 = 1.2, b0 = -0.1"
    ) in text
    a, b = ens.node_value[3]
    assert f"if site is missing: a = {a:.3g}, b = {b:+.3g} (rows 200)" in text
    stump = TreeEnsemble(
        leaf_map="shift",
        feature_names=ens.feature_names,
        n_values=ens.n_values,
        node_feature=np.array([-1], dtype=np.int32),
        node_child_base=np.array([-1], dtype=np.int64),
        child_table=np.zeros(0, dtype=np.int32),
        node_value=np.array([[1.0, 0.25]]),
        node_weight=np.array([40.0]),
        node_depth=np.zeros(1, dtype=np.int32),
        tree_start=np.array([0, 1], dtype=np.int64),
        code_maps=ens.code_maps,
        rare_codes=ens.rare_codes,
    )
    text = export_rules(stump, enc, score_col="score", score_bins=SCORE_BINS)
    assert "tree 1\n  all rows: shift = +0.25 (rows 40)\n" in text
    assert "calibrated = sigmoid(l_1)" in text


def test_unseen_merged_with_missing_in_text():
    enc, ens, _, _ = setup("scale", "missing")
    text = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS)
    assert "  if site is missing or unseen: k = " in text
    assert "otherwise (site in {'d\"q'}): k = " in text


def test_empty_chain():
    enc, ens, rows, codes = setup("scale")
    empty = TreeEnsemble(
        leaf_map="platt",
        feature_names=ens.feature_names,
        n_values=ens.n_values,
        node_feature=np.zeros(0, dtype=np.int32),
        node_child_base=np.zeros(0, dtype=np.int64),
        child_table=np.zeros(0, dtype=np.int32),
        node_value=np.zeros((0, 2)),
        node_weight=np.zeros(0),
        node_depth=np.zeros(0, dtype=np.int32),
        tree_start=np.array([0], dtype=np.int64),
        code_maps=ens.code_maps,
        rare_codes=ens.rare_codes,
    )
    sql = export_rules(empty, enc, score_col="score", score_bins=SCORE_BINS, format="sql", table="events")
    expected = reference_predict(empty, codes, rows["score"].to_numpy())
    np.testing.assert_allclose(run_sqlite(sql, rows), expected, rtol=0, atol=1e-12)
    assert "tree" not in export_rules(empty, enc, score_col="score", score_bins=SCORE_BINS).split("eps = ")[1]


# --- errors ----------------------------------------------------------------------------------------


def test_errors():
    enc, ens, _, _ = setup("scale")
    kw = {"score_col": "score", "score_bins": SCORE_BINS}
    with pytest.raises(ValueError, match="'format' parameter of export_rules"):
        export_rules(ens, enc, format="yaml", **kw)
    with pytest.raises(ValueError, match="only used with format='sql'"):
        export_rules(ens, enc, table="t", **kw)
    with pytest.raises(ValueError, match="'precision' parameter"):
        export_rules(ens, enc, precision=0, **kw)
    with pytest.raises(ValueError, match="init: expected a pair"):
        export_rules(ens, enc, init=(1.0,), **kw)
    with pytest.raises(ValueError, match="code maps take"):
        export_rules(ens, enc, score_col="score", score_bins=20)
    with pytest.raises(ValueError, match="code maps take"):
        export_rules(ens, fit_encoder("missing"), **kw)


# --- the kernels -----------------------------------------------------------------------------------


@pytest.mark.parametrize("leaf_map", ["scale", "shift", "platt"])
def test_reference_walk_matches_predict_trees(leaf_map):
    _, ens, rows, codes = setup(leaf_map, seed=6)
    score = rows["score"].to_numpy()
    got = gpucal.kernels.trees.predict_trees(
        map_codes(np.ascontiguousarray(codes, dtype=np.int32), ens.code_maps, ens.n_values),
        score,
        *ens.kernel_arrays(),
        ens.leaf_map_code,
        backend="oracle",
    )
    expected = reference_predict(ens, codes, score)
    if leaf_map == "scale":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


# --- the estimator ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("leaf_map", "init"), [("scale", "identity"), ("shift", "platt")])
def test_fitted_model_rules_reproduce_predict(leaf_map, init):
    """End to end: a fitted MBCT's SQL (in SQLite) and JSON give its own predictions back."""
    from gpucal.mbct.model import MBCT

    rng = np.random.default_rng(11)
    n = 6000
    frame = pd.DataFrame(
        {
            "site": rng.choice(np.array(["a", "b", "O'Brien", None], dtype=object), n),
            "age": np.where(rng.random(n) < 0.1, np.nan, rng.normal(40, 10, n)),
            "score": rng.uniform(0.02, 0.9, n),
        }
    )
    bias = np.where(frame["site"] == "a", 1.4, 0.8) * np.where(frame["age"] > 45, 1.2, 1.0)
    y = (rng.random(n) < np.clip(frame["score"] * bias, 0, 1)).astype(float)
    model = MBCT(leaf_map=leaf_map, init=init, max_trees=3, score_bins=20).fit(frame, y)
    assert model.ensemble_.n_trees >= 1
    test = frame.copy()
    test.loc[:50, "site"] = "new"  # unseen at fit
    test.loc[51:60, "score"] = [0.0, 1.0, 0.05, 0.35, 0.5, 0.65, 0.7, 0.95, 0.15, 0.45]  # on bin edges
    expected = np.asarray(model.predict(test))

    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (site TEXT, age REAL, score REAL)")
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        [
            (s, None if math.isnan(a) else a, sc)
            for s, a, sc in zip(test["site"], test["age"].tolist(), test["score"].tolist(), strict=True)
        ],
    )
    got = np.array(
        [r[-1] for r in con.execute(model.export_rules(format="sql", table="t") + " ORDER BY rowid")]
    )
    rules = json.loads(model.export_rules(format="json"))
    from_json = np.array([json_predict(rules, r) for r in test.iloc[:1500].to_dict("records")])
    if leaf_map == "scale":
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(from_json, expected[:1500])
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(from_json, expected[:1500], rtol=0, atol=1e-12)
    assert model.export_rules().startswith("Calibration tree rules: ")


def chain_of(parts: list[TreeEnsemble]) -> TreeEnsemble:
    """The trees of several ensembles (same features) one after the other."""
    node_off = table_off = 0
    feats, bases, tables, values, weights, depths, starts = [], [], [], [], [], [], [0]
    for e in parts:
        feats.append(e.node_feature)
        bases.append(np.where(e.node_child_base >= 0, e.node_child_base + table_off, -1))
        tables.append(np.where(e.child_table >= 0, e.child_table + node_off, -1))
        values.append(e.node_value)
        weights.append(e.node_weight)
        depths.append(e.node_depth)
        starts += (e.tree_start[1:] + node_off).tolist()
        node_off += e.n_nodes
        table_off += len(e.child_table)
    first = parts[0]
    out = TreeEnsemble(
        leaf_map=first.leaf_map,
        feature_names=first.feature_names,
        n_values=first.n_values,
        node_feature=np.concatenate(feats).astype(np.int32),
        node_child_base=np.concatenate(bases).astype(np.int64),
        child_table=np.concatenate(tables).astype(np.int32),
        node_value=np.concatenate(values),
        node_weight=np.concatenate(weights),
        node_depth=np.concatenate(depths).astype(np.int32),
        tree_start=np.asarray(starts, dtype=np.int64),
        code_maps=first.code_maps,
        rare_codes=first.rare_codes,
    )
    out.check()
    return out


def path_tree(template: TreeEnsemble, depth: int, seed: int) -> TreeEnsemble:
    """One tree ``depth`` levels deep: every level splits on age, bins 0-2 and missing go one level down."""
    n_age = int(template.n_values[1])
    rng = np.random.default_rng(seed)
    n_nodes = depth + 1
    table = []
    for level in range(depth):
        row = [-1] * n_age
        for code in (0, 1, 2, n_age - 1):
            row[code] = level + 1
        table += row
    return TreeEnsemble(
        leaf_map=template.leaf_map,
        feature_names=template.feature_names,
        n_values=template.n_values,
        node_feature=np.array([1] * depth + [-1], dtype=np.int32),
        node_child_base=np.array([n_age * i for i in range(depth)] + [-1], dtype=np.int64),
        child_table=np.asarray(table, dtype=np.int32),
        node_value=np.column_stack([rng.uniform(0.8, 1.25, n_nodes), np.zeros(n_nodes)]),
        node_weight=np.full(n_nodes, 100.0),
        node_depth=np.arange(n_nodes, dtype=np.int32),
        tree_start=np.array([0, n_nodes], dtype=np.int64),
        code_maps=template.code_maps,
        rare_codes=template.rare_codes,
    )


@pytest.mark.parametrize("leaf_map", ["scale", "platt"])
def test_sql_many_and_deep_trees_parse_in_sqlite(leaf_map):
    """Eleven trees, one 8 levels deep: the SQL nests no deeper than its deepest tree (SQLite's parser)."""
    enc, _, rows, codes = setup(leaf_map)
    parts = [build_ensemble(enc, leaf_map, seed=s) for s in range(5)]
    ens = chain_of([*parts, path_tree(parts[0], 8, seed=9)])
    assert ens.n_trees == 11
    sql = export_rules(ens, enc, score_col="score", score_bins=SCORE_BINS, format="sql", table="events")
    expected = reference_predict(ens, codes, rows["score"].to_numpy())
    got = run_sqlite(sql, rows)
    if leaf_map == "scale":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)

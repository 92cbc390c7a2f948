"""Split-tree kernels (issue 18): the numba twin against the oracle, each rule by hand, bad tables refused.

The oracle's SHAP is the Shapley definition summed over every subset of features; the twin runs the
polynomial-time Algorithm 2. Agreement with XGBoost and LightGBM themselves is in ``tests/test_ccl.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from gpucal.kernels.boosted_trees import (
    MAX_TREE_DEPTH,
    boosted_tree_leaves,
    boosted_tree_shap,
    check_boosted_trees,
)
from gpucal.kernels.boosted_trees_oracle import (
    DECISION_CAT_LEFT,
    DECISION_CAT_RIGHT,
    DECISION_LE,
    DECISION_LT,
    MISSING_NAN,
    MISSING_NONE,
    MISSING_ZERO,
)


def random_trees(rng, n_features, n_trees, max_depth, *, n_categories=5):
    """Random valid split trees in preorder (children after their parent), every rule and missing type."""
    cols: dict[str, list] = {
        k: []
        for k in (
            "node_feature",
            "node_threshold",
            "node_decision",
            "node_missing",
            "node_default_left",
            "node_left",
            "node_right",
            "node_value",
            "node_cover",
            "node_leaf_id",
        )
    }
    cat_values: list[int] = []
    cat_start = [0]
    tree_start = [0]

    def grow(depth: int, cover: float, leaf_counter: list[int]) -> int:
        m = len(cols["node_feature"])
        split = depth < max_depth and (depth == 0 or rng.random() < 0.7)
        for k in cols:
            cols[k].append(0)
        cols["node_cover"][m] = cover
        if not split:
            cols["node_feature"][m] = -1
            cols["node_left"][m] = cols["node_right"][m] = -1
            cols["node_value"][m] = float(rng.normal())
            cols["node_leaf_id"][m] = leaf_counter[0]
            leaf_counter[0] += 1
            cat_start.append(len(cat_values))
            return m
        decision = int(rng.integers(4))
        cols["node_feature"][m] = int(rng.integers(n_features))
        cols["node_decision"][m] = decision
        cols["node_missing"][m] = int(rng.integers(3))
        cols["node_default_left"][m] = int(rng.integers(2))
        cols["node_threshold"][m] = float(rng.choice([-0.5, 0.0, 0.5, 1.0]))
        cols["node_leaf_id"][m] = -1
        if decision in (DECISION_CAT_LEFT, DECISION_CAT_RIGHT):
            chosen = rng.choice(n_categories, size=int(rng.integers(1, n_categories)), replace=False)
            cat_values.extend(sorted(int(c) for c in chosen))
        cat_start.append(len(cat_values))
        share = float(rng.uniform(0.1, 0.9))
        cols["node_left"][m] = grow(depth + 1, cover * share, leaf_counter)
        cols["node_right"][m] = grow(depth + 1, cover * (1 - share), leaf_counter)
        return m

    for _ in range(n_trees):
        grow(0, float(rng.uniform(10, 100)), [0])
        tree_start.append(len(cols["node_feature"]))
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays["cat_values"] = np.asarray(cat_values, dtype=np.int64)
    arrays["node_cat_start"] = np.asarray(cat_start, dtype=np.int64)
    arrays["tree_start"] = np.asarray(tree_start, dtype=np.int64)
    return arrays


def random_rows(rng, n, n_features):
    """Values on thresholds, at zero, tiny, NaN, negative and large categories, and plain numbers."""
    special = [np.nan, 0.0, 1e-36, -1e-36, -0.5, 0.5, 1.0, -1.0, 3.0, 4.0, 2.0**24, 2.0**31, 7.0, 2.9]
    X = rng.normal(size=(n, n_features))
    mask = rng.random((n, n_features)) < 0.5
    X[mask] = rng.choice(special, size=int(mask.sum()))
    return X


@pytest.mark.parametrize("seed", range(6))
def test_leaves_and_shap_match_the_oracle(seed):
    rng = np.random.default_rng(seed)
    n_features, n_trees, n_outputs = 4, 5, 2
    arrays = random_trees(rng, n_features, n_trees, max_depth=4)
    X = random_rows(rng, 60, n_features)
    leaves = boosted_tree_leaves(X, n_features, arrays)
    assert_array_equal(leaves, boosted_tree_leaves(X, n_features, arrays, backend="oracle"))
    tree_class = np.arange(n_trees) % n_outputs
    shap = boosted_tree_shap(X, n_features, arrays, tree_class, n_outputs)
    expected = boosted_tree_shap(X, n_features, arrays, tree_class, n_outputs, backend="oracle")
    assert_allclose(shap, expected, rtol=1e-10, atol=1e-12)
    # Repeated runs are bit-identical.
    assert_array_equal(shap, boosted_tree_shap(X, n_features, arrays, tree_class, n_outputs))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_features=st.integers(1, 4),
    n_trees=st.integers(1, 3),
    max_depth=st.integers(1, 5),
    n_rows=st.integers(0, 12),
)
def test_random_trees_against_the_oracle(seed, n_features, n_trees, max_depth, n_rows):
    rng = np.random.default_rng(seed)
    arrays = random_trees(rng, n_features, n_trees, max_depth)
    X = random_rows(rng, n_rows, n_features)
    assert_array_equal(
        boosted_tree_leaves(X, n_features, arrays),
        boosted_tree_leaves(X, n_features, arrays, backend="oracle"),
    )
    tree_class = np.zeros(n_trees, dtype=np.int64)
    assert_allclose(
        boosted_tree_shap(X, n_features, arrays, tree_class, 1),
        boosted_tree_shap(X, n_features, arrays, tree_class, 1, backend="oracle"),
        rtol=1e-10,
        atol=1e-12,
    )


def test_shap_of_a_feature_used_twice_on_one_path():
    """A path that splits on one feature twice exercises the unwind step (Algorithm 2's UNWIND)."""
    rng = np.random.default_rng(7)
    arrays = random_trees(rng, 2, 4, max_depth=6)
    X = random_rows(rng, 40, 2)
    tree_class = np.zeros(4, dtype=np.int64)
    assert_allclose(
        boosted_tree_shap(X, 2, arrays, tree_class, 1),
        boosted_tree_shap(X, 2, arrays, tree_class, 1, backend="oracle"),
        rtol=1e-10,
        atol=1e-12,
    )


def _stump(decision, *, threshold=0.5, missing=MISSING_NONE, default_left=0, categories=()):
    """One split (left leaf id 0, right leaf id 1) on feature 0."""
    cats = sorted(categories)
    return {
        "node_feature": np.array([0, -1, -1]),
        "node_threshold": np.array([threshold, 0.0, 0.0]),
        "node_decision": np.array([decision, 0, 0]),
        "node_missing": np.array([missing, 0, 0]),
        "node_default_left": np.array([default_left, 0, 0]),
        "node_left": np.array([1, -1, -1]),
        "node_right": np.array([2, -1, -1]),
        "node_cat_start": np.array([0, len(cats), len(cats), len(cats)]),
        "cat_values": np.array(cats, dtype=np.int64),
        "node_value": np.array([0.0, -1.0, 1.0]),
        "node_cover": np.array([2.0, 1.0, 1.0]),
        "node_leaf_id": np.array([-1, 0, 1]),
        "tree_start": np.array([0, 3]),
    }


@pytest.mark.parametrize(
    ("stump", "values", "sides"),
    [
        # LightGBM numbers: x <= t; NaN is 0 unless missing is NaN; |x| <= 1e-35 is missing for "Zero".
        (_stump(DECISION_LE), [0.5, 0.6, np.nan, -1.0], "LRLL"),
        (_stump(DECISION_LE, threshold=-1.0), [np.nan, -1.0], "RL"),
        (_stump(DECISION_LE, missing=MISSING_NAN, default_left=0, threshold=9.0), [np.nan, 0.0], "RL"),
        (
            _stump(DECISION_LE, missing=MISSING_ZERO, default_left=0, threshold=9.0),
            [1e-36, np.nan, 1.0],
            "RRL",
        ),
        # XGBoost numbers: x < t; NaN takes the default side.
        (_stump(DECISION_LT, missing=MISSING_NAN), [0.5, 0.4, np.nan], "RLR"),
        (_stump(DECISION_LT, missing=MISSING_NAN, default_left=1), [np.nan], "L"),
        # LightGBM categories: in the set goes left; NaN, negative and huge values go right.
        (_stump(DECISION_CAT_LEFT, categories=[1, 3]), [1.0, 3.7, 2.0, np.nan, -1.0, 2.0**40], "LLRRRR"),
        # XGBoost categories: in the set goes right; NaN default; negative or >= 2^24 go left.
        (
            _stump(DECISION_CAT_RIGHT, categories=[1, 3], default_left=0),
            [1.0, 2.0, np.nan, -1.0, 2.0**24, 3.0],
            "RLRLLR",
        ),
    ],
)
def test_each_rule_by_hand(stump, values, sides):
    X = np.asarray(values, dtype=np.float64)[:, None]
    expected = [0 if s == "L" else 1 for s in sides]
    assert_array_equal(boosted_tree_leaves(X, 1, stump)[:, 0], expected)
    assert_array_equal(boosted_tree_leaves(X, 1, stump, backend="oracle")[:, 0], expected)


def test_shap_of_a_stump_by_hand():
    """One split, covers 1:1: the feature's value is the leaf minus the mean of the leaves."""
    shap = boosted_tree_shap(np.array([[0.0], [1.0]]), 1, _stump(DECISION_LE), np.zeros(1, dtype=int), 1)
    assert_allclose(shap[:, 0, 0], [-1.0, 1.0])


def test_no_rows_and_a_single_leaf_tree():
    leaf = {
        **_stump(DECISION_LE),
        "node_feature": np.array([-1]),
        "node_threshold": np.array([0.0]),
        "node_decision": np.array([0]),
        "node_missing": np.array([0]),
        "node_default_left": np.array([0]),
        "node_left": np.array([-1]),
        "node_right": np.array([-1]),
        "node_cat_start": np.array([0, 0]),
        "cat_values": np.zeros(0, dtype=np.int64),
        "node_value": np.array([2.0]),
        "node_cover": np.array([0.0]),
        "node_leaf_id": np.array([0]),
        "tree_start": np.array([0, 1]),
    }
    assert_array_equal(boosted_tree_leaves(np.ones((3, 2)), 2, leaf), np.zeros((3, 1)))
    assert_array_equal(boosted_tree_shap(np.ones((3, 2)), 2, leaf, [0], 1), np.zeros((3, 1, 2)))
    assert boosted_tree_leaves(np.zeros((0, 1)), 1, _stump(DECISION_LE)).shape == (0, 1)


def _chain(depth):
    """A tree that splits ``depth`` times down its left side."""
    n = 2 * depth + 1
    feature = np.full(n, -1)
    left = np.full(n, -1)
    right = np.full(n, -1)
    for d in range(depth):
        m = 2 * d
        feature[m], left[m], right[m] = 0, m + 2, m + 1
    return {
        **_stump(DECISION_LE),
        "node_feature": feature,
        "node_threshold": np.zeros(n),
        "node_decision": np.zeros(n, dtype=int),
        "node_missing": np.zeros(n, dtype=int),
        "node_default_left": np.zeros(n, dtype=int),
        "node_left": left,
        "node_right": right,
        "node_cat_start": np.zeros(n + 1, dtype=int),
        "cat_values": np.zeros(0, dtype=np.int64),
        "node_value": np.zeros(n),
        "node_cover": np.ones(n),
        "node_leaf_id": np.where(feature < 0, np.arange(n), -1),
        "tree_start": np.array([0, n]),
    }


def _broken(field, value, base=None):
    arrays = dict(_stump(DECISION_LE) if base is None else base)
    arrays[field] = np.asarray(value)
    return arrays


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        (_broken("node_left", [5, -1, -1]), "outside its tree"),
        (_broken("node_left", [0, -1, -1]), "not after the split"),  # a child pointing at its own node
        (_broken("node_left", [-7, -1, -1]), "outside its tree"),
        (_broken("node_left", [2, -1, -1]), "exactly one split"),  # both children the same node
        (_broken("node_right", [1, -1, 1]), "a leaf has a child"),
        (_broken("node_feature", [3, -1, -1]), r"features must lie in \[-1, 1\)"),
        (_broken("node_threshold", [np.inf, 0, 0]), "finite"),
        (_broken("node_value", [0, np.nan, 0]), "finite"),
        (_broken("node_cover", [0.0, 1.0, 1.0]), "> 0 at a split"),
        (_broken("node_decision", [9, 0, 0]), "decisions"),
        (_broken("node_default_left", [2, 0, 0]), "0 or 1"),
        (_broken("node_leaf_id", [-1, -1, 1]), "leaves need ids"),
        (_broken("tree_start", [0, 2]), "tree_start"),
        (_broken("tree_start", [0, 3, 3]), "tree_start"),
        (_broken("node_cat_start", [0, 5, 5, 5]), "node_cat_start"),
        (_broken("cat_values", [3, 1], _stump(DECISION_CAT_LEFT, categories=[1, 3])), "sorted"),
        (_broken("node_left", [1, -1, -1, 4]), "expected 3 entries"),
        (_broken("node_feature", [0.5, -1, -1]), "integers"),
        (_broken("node_feature", [2**40, -1, -1]), "outside int32"),
        (_chain(MAX_TREE_DEPTH + 1), "deep"),
    ],
)
def test_bad_tables_are_refused(arrays, match):
    with pytest.raises(ValueError, match=match):
        check_boosted_trees(1, arrays)
    with pytest.raises(ValueError, match=match):
        boosted_tree_leaves(np.zeros((1, 1)), 1, arrays)


def test_deepest_supported_tree_runs():
    arrays = _chain(MAX_TREE_DEPTH)
    X = np.array([[-1.0], [1.0]])
    assert boosted_tree_leaves(X, 1, arrays).tolist() == [[2 * MAX_TREE_DEPTH], [1]]
    assert np.isfinite(boosted_tree_shap(X, 1, arrays, [0], 1)).all()


def test_bad_arguments():
    stump = _stump(DECISION_LE)
    with pytest.raises(ValueError, match="tree_class"):
        boosted_tree_shap(np.zeros((1, 1)), 1, stump, [1], 1)
    with pytest.raises(ValueError, match=r"shape \(n, 1\)"):
        boosted_tree_leaves(np.zeros((1, 2)), 1, stump)
    with pytest.raises(ValueError, match="'backend' parameter"):
        boosted_tree_leaves(np.zeros((1, 1)), 1, stump, backend="cuda")

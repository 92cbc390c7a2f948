"""The calibrators :class:`~gpucal.auto.AutoCalibrator` chooses among, cheapest first.

A candidate is an unfitted gpucal estimator with a name and the parameters that set it apart (what the
report shows). The default list:

================= ============================================================== ==================
name              estimator                                                      reads
================= ============================================================== ==================
platt             ``PlattCalibrator()``                                          score
beta              ``BetaCalibrator()``                                           score
platt_hinge       ``HingePlattCalibrator()``                                     score
centered_isotonic ``CenteredIsotonicCalibrator()``                               score
feature_platt     ``FeatureAwarePlattCalibrator(l2=l2)``, l2 in 1, 10, 100         score + features
feature_platt     the same, ``l2=10``, second order: ``interactions="auto"``,      score + features
                  ``l2_cross`` in 10, 100
feature_platt     smoothed along ordered columns (``l2_smooth=30``): ``l2=1``;   score + features
                  second order with ``l2=10, l2_cross=100``; only when a feature
                  column is ordered (the five above then ``l2_smooth=0``)
mbct              ``MBCT()``; ``min_child_size=100``; the same, ``leaf_penalty=300``  score + features
hc                ``HeterogeneousCalibrator(mode="boosted")``                   score + features
neucalib          ``FieldAwareCalibrator()`` (PyTorch installed)                 score + features
================= ============================================================== ==================

Where a feature column is ordered (a number not named in ``categorical_cols``: its bins, or an integer's
values, are in order), the five feature-aware Platt settings above are the plain ridge
(``l2_smooth=0``, shown in their labels), and two settings smoothed along those columns are added
(:data:`SMOOTH_CANDIDATES`, ``l2_smooth=30``: ``FeatureAwarePlattCalibrator``'s difference penalty on
neighbouring offsets); without such a column ``l2_smooth`` changes nothing, and the list is the five at
the estimator's defaults. In ``benchmarks/results/auto_0127q.md`` this list made AutoCalibrator no worse
than the best peer on 33 of 35 sets (28 of 35 with the plain ridge alone, ``auto_0127p.md``): the
smoothed settings are chosen on churn (a tenure in months: 0.002-0.003 below scikit-learn's logistic
baseline, 0.0035-0.004 above it before), tv16, gss and adult (an age read by value), while the plain
ridge stays the choice on default and loans. Every setting at the estimator's default smoothing instead
(``l2_smooth=10``, no added setting) did worse (``auto_0127r.md``: 32 of 35; churn 0.001 below the
baseline).

The feature-aware ones are left out when ``X`` has no feature column, and with ``score_kind="logit"``
(margins, not probabilities) those that read probabilities only (beta, MBCT, HC). The list is the same
at every size of the calibration set (on a large one the search's first rungs cut it down,
:mod:`gpucal.auto.sizing`), except that there the ``l2 = 10`` feature-aware Platt settings screen
their fields (:data:`SCREENED_L2`). A feature-aware candidate is one line of :data:`FEATURE_CANDIDATES`.
``l2 = 10`` is scikit-learn's ``C = 0.1``, the usual logistic baseline; ``min_child_size=100`` pools
only the children lighter than 100 (MBCT's default pools those lighter than its node-size bound, several
hundred on mid-size data), and ``leaf_penalty=300`` shrinks each child's map harder toward its parent's.

Centred isotonic regression stands in for isotonic regression: on the 55 sets of
``benchmarks/results/auto_score_maps_full.md`` (every set of ``bench_auto.py``, three seeds of the small
and cross ones; held-out log-loss, the paired standard error row by row) it is better than isotonic
regression by more than 2 standard errors on 8, within them on the other 47 and worse on none (below it
on 35), for the same fit cost (0.04 CPU seconds for the 38 small sets together, isotonic 0.05).

Platt scaling on logit hinges (:class:`~gpucal.calibrators.hinge_platt.HingePlattCalibrator`: Platt's map
with slope changes at the calibration logit's 0.5, 0.8 and 0.95 quantiles) reaches the oracle on
``make_ctr``'s monotone scenario, whose score bends at its 0.8 quantile: held-out log-loss 0.11174 against
Platt's 0.11251 (the oracle 0.11178; the paired standard error of the difference 0.00012), where the
other maps of the score alone trail (beta 0.11220, centred isotonic 0.11320, the spline 0.11181). On the
17 sets of ``benchmarks/results/auto_hinge.md`` it is never worse than Platt scaling by more than 2
standard errors and better on 5 (kdd, flights, two make_ctr sets), for 0.2-0.4 CPU seconds a fit on
150,000 rows when measured (Platt 0.04; the spline 7; since solved on the series of the logit's
bins, ``gpucal.calibrators.hinge_series``, about 0.01); on the 13 sets of ``auto_hinge_knots.md`` it is
better on 4 and worse on one, churn's 2,100 calibration rows (+0.0048, 2.5 standard errors), where the
folds chose feature-aware Platt with or without it. AutoCalibrator with it chose the same or did as well
within noise on the 15 small sets measured, and reached the oracle on the monotone scenario; the guards
fall back to it when it cross-fits better than Platt and its refit increases
(``gpucal.auto.model.ORDER_KEEPING``).

The other maps of the score alone are not candidates (the same report): BBQ is worse than isotonic
regression on 16 of the 55 sets and better on 3; ENIR is within 1e-5 of it on 49 and worse on 8;
Venn-Abers is better than isotonic on 9 and worse on 2, but Platt scaling, a candidate, is below it on
37 of the 55; the spline, which nears the oracle on
``make_ctr``'s monotone scenario, costs about 70 CPU microseconds a row (0.3 CPU seconds per fold of a
3,000-row set, 10 for a refit on 150,000 rows), more than the whole search on the small sets can spare.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sklearn.base import clone

from gpucal.catalogue import METHODS, build

#: The maps of the score alone, cheapest first (module docstring: why centred isotonic regression).
SCORE_CANDIDATES = ("platt", "beta", "platt_hinge", "centered_isotonic")
#: Penalties of feature-aware Platt tried by the folds (scikit-learn's C = 1, 0.1, 0.01).
FEATURE_PLATT_L2 = (1.0, 10.0, 100.0)
#: Penalty on neighbouring offsets of ordered columns in the smoothed feature-aware Platt candidates.
SMOOTH_L2 = 30.0
#: Feature-aware Platt smoothed along ordered columns (module docstring): first order with ``l2=1``, and
#: the second-order setting ``l2=10, l2_cross=100``; candidates only when some feature column is ordered.
SMOOTH_CANDIDATES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("feature_platt", {"l2": 1.0, "l2_smooth": SMOOTH_L2}),
    ("feature_platt", {"l2": 10.0, "interactions": "auto", "l2_cross": 100.0, "l2_smooth": SMOOTH_L2}),
)
#: MBCT's regularisation grid: its defaults, less pooling of light children, and the same with a stronger
#: shrinkage of each child toward its parent.
MBCT_GRID: tuple[dict[str, Any], ...] = (
    {},
    {"min_child_size": 100.0},
    {"min_child_size": 100.0, "leaf_penalty": 300.0},
)
#: Penalties of the cross effects of second-order feature-aware Platt (``l2 = 10``, the pairs chosen by
#: its ``interactions="auto"`` screen): as strong as the main effects', and ten times stronger.
CROSS_L2 = (10.0, 100.0)
#: The feature-aware candidates, cheapest first: (name, parameters), one line each; NeuCalib's is
#: added when PyTorch is installed (:func:`default_candidates`).
FEATURE_CANDIDATES: tuple[tuple[str, dict[str, Any]], ...] = (
    *(("feature_platt", {"l2": l2}) for l2 in FEATURE_PLATT_L2),
    *(("feature_platt", {"l2": 10.0, "interactions": "auto", "l2_cross": c}) for c in CROSS_L2),
    *SMOOTH_CANDIDATES,
    *(("mbct", dict(grid)) for grid in MBCT_GRID),
    ("hc", {"mode": "boosted"}),
)
#: Classes whose fit costs several times a feature-aware Platt fit on the same rows (NeuCalib: 5-16 CPU
#: seconds on 150,000 rows and 2 cores, as much as MCGrad's whole default fit). A screening rung of the
#: search runs such a candidate only where a cheap feature-aware one beats Platt scaling, and passes it
#: on only when it is that rung's best (``AutoCalibrator._search``, ``AutoCalibrator._survivors``).
EXPENSIVE_CLASSES = frozenset({"FieldAwareCalibrator"})
#: On a large calibration set (``gpucal.auto.sizing.LARGE_ROWS``) the feature-aware Platt candidates with
#: this ``l2`` screen their fields (``screen_fields=True``): there the score already reads most fields and
#: their offsets fit noise (``make_ctr``'s segment-bias scenario at 150,000 rows: 0.11195 against 0.11230,
#: the oracle 0.11178), and the screened fit reads fewer fields (0.2 against 1.3 CPU seconds there).
SCREENED_L2 = 10.0
#: The column parameters handed to every candidate whose class takes them.
COLUMN_PARAMS = ("score_col", "feature_cols", "categorical_cols", "score_kind")


@dataclass(frozen=True)
class Candidate:
    """One estimator to cross-fit.

    Attributes
    ----------
    name : str
        Its method name (``make_calibrator``'s, or the class name of an estimator given as such).
    estimator : estimator
        Unfitted; cloned before every fit.
    params : dict
        The parameters that tell it from the other candidates of the same name (for the report).
    """

    name: str
    estimator: Any
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def expensive(self) -> bool:
        """Whether its class is one of :data:`EXPENSIVE_CLASSES`."""
        return type(self.estimator).__name__ in EXPENSIVE_CLASSES

    @property
    def label(self) -> str:
        """``name(param=value, ...)``, or the name alone."""
        if not self.params:
            return self.name
        shown = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
        return f"{self.name}({shown})"

    @property
    def reads_features(self) -> bool:
        """True when the estimator's class takes feature columns."""
        return takes_param(self.estimator, "feature_cols")


def takes_param(estimator: Any, name: str) -> bool:
    """True when ``estimator``'s constructor has a parameter ``name``."""
    return name in inspect.signature(type(estimator).__init__).parameters


def _with_columns(name: str, columns: dict[str, Any], **params: Any) -> Any:
    """The method ``name`` built with ``params`` plus whichever column parameters its class takes."""
    if name not in METHODS:
        return build(METHODS, name, {})  # raises, listing the known names
    accepted = inspect.signature(METHODS[name].__init__).parameters
    return build(METHODS, name, {**{k: v for k, v in columns.items() if k in accepted}, **params})


def default_candidates(
    columns: dict[str, Any],
    *,
    with_features: bool,
    with_torch: bool,
    large: bool = False,
    ordered: bool = True,
) -> list[Candidate]:
    """The default list (module docstring), cheapest first.

    Parameters
    ----------
    columns : dict
        ``score_col``, ``feature_cols`` and ``categorical_cols`` of the :class:`AutoCalibrator`.
    with_features : bool
        Include the feature-aware candidates.
    with_torch : bool
        Include NeuCalib (its fit needs PyTorch).
    large : bool, default=False
        The calibration set is large: feature-aware Platt's :data:`SCREENED_L2` settings screen their
        fields.
    ordered : bool, default=True
        Some feature column is ordered (``FeatureEncoder.ordered_columns``): the feature-aware Platt settings
        not in :data:`SMOOTH_CANDIDATES` are the plain ridge (``l2_smooth=0``); else
        :data:`SMOOTH_CANDIDATES`, the same fits as the estimator's defaults there, are left out.
    """
    out = [Candidate(name, _with_columns(name, columns)) for name in SCORE_CANDIDATES]
    if with_features:
        listed = [
            _plain_ridge(name, params, ordered)
            for name, params in FEATURE_CANDIDATES
            if ordered or (name, params) not in SMOOTH_CANDIDATES
        ]
        out += [
            Candidate(name, _with_columns(name, columns, **params), params)
            for name, params in (_screened(name, params, large) for name, params in listed)
        ]
        if with_torch:
            out.append(Candidate("neucalib", _with_columns("neucalib", columns)))
    if columns.get("score_kind", "probability") != "probability":  # margins: only the maps that take them
        out = [c for c in out if takes_param(c.estimator, "score_kind")]
    return out


def _plain_ridge(name: str, params: dict[str, Any], ordered: bool) -> tuple[str, dict[str, Any]]:
    """``(name, params)``, a feature-aware Platt setting without its own ``l2_smooth`` set to the plain
    ridge (``l2_smooth=0``) where some column is ordered."""
    if ordered and name == "feature_platt" and "l2_smooth" not in params:
        return name, {**params, "l2_smooth": 0.0}
    return name, params


def _screened(name: str, params: dict[str, Any], large: bool) -> tuple[str, dict[str, Any]]:
    """``(name, params)`` with ``screen_fields=True`` where :data:`SCREENED_L2` applies on a large set."""
    if large and name == "feature_platt" and params.get("l2") == SCREENED_L2:
        return name, {**params, "screen_fields": True}
    return name, params


def resolve_candidates(candidates: Sequence[Any], columns: dict[str, Any]) -> list[Candidate]:
    """Turn the ``candidates=`` parameter into :class:`Candidate` objects.

    A string is a :data:`gpucal.catalogue.METHODS` name, built with its defaults and the
    column parameters its class takes; an estimator is cloned and takes the column parameters it has but
    left at its class's defaults (those it was given stay), its other parameters that differ from its
    class's defaults shown in the report.

    Raises
    ------
    ValueError
        An unknown name, or an empty list.
    TypeError
        An entry that is neither a name nor an estimator with ``fit`` and ``predict``.
    """
    if len(candidates) == 0:
        msg = "candidates: the list is empty; give at least one calibrator name or estimator"
        raise ValueError(msg)
    out = []
    for entry in candidates:
        if isinstance(entry, str):
            out.append(Candidate(entry, _with_columns(entry, columns)))
        elif hasattr(entry, "fit") and hasattr(entry, "predict") and hasattr(entry, "get_params"):
            out.append(
                Candidate(type(entry).__name__, _inherit_columns(entry, columns), _changed_params(entry))
            )
        else:
            msg = (
                f"candidates: {entry!r} is neither a calibrator name nor an estimator with fit, predict "
                "and get_params"
            )
            raise TypeError(msg)
    return out


def _class_defaults(estimator: Any) -> dict[str, Any]:
    return {
        name: par.default
        for name, par in inspect.signature(type(estimator).__init__).parameters.items()
        if par.default is not inspect.Parameter.empty
    }


def _inherit_columns(estimator: Any, columns: dict[str, Any]) -> Any:
    """A clone of ``estimator`` with the column parameters it takes but left at its class's defaults set."""
    model = clone(estimator)
    defaults, current = _class_defaults(model), model.get_params(deep=False)
    inherited = {
        name: value
        for name, value in columns.items()
        if name in defaults and not _differs(current[name], defaults[name])
    }
    return model.set_params(**inherited)


def _changed_params(estimator: Any) -> dict[str, Any]:
    """The constructor parameters of ``estimator`` that differ from its class's defaults (columns aside)."""
    defaults = _class_defaults(estimator)
    return {
        name: value
        for name, value in estimator.get_params(deep=False).items()
        if name not in COLUMN_PARAMS and (name not in defaults or _differs(value, defaults[name]))
    }


def _differs(value: Any, default: Any) -> bool:
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # arrays and other values without a plain truth value
        return True


def column_params(
    score_col: Hashable,
    feature_cols: Sequence[Hashable] | str | None,
    categorical_cols: Any,
    score_kind: str,
) -> dict[str, Any]:
    """The column parameters as a dict for :func:`default_candidates` and :func:`resolve_candidates`."""
    return {
        "score_col": score_col,
        "feature_cols": feature_cols,
        "categorical_cols": categorical_cols,
        "score_kind": score_kind,
    }


__all__ = [
    "COLUMN_PARAMS",
    "CROSS_L2",
    "EXPENSIVE_CLASSES",
    "FEATURE_CANDIDATES",
    "FEATURE_PLATT_L2",
    "MBCT_GRID",
    "SCREENED_L2",
    "SMOOTH_CANDIDATES",
    "SMOOTH_L2",
    "Candidate",
    "column_params",
    "default_candidates",
    "resolve_candidates",
    "takes_param",
]

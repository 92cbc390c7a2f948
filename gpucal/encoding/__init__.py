"""Features to dense integer codes, the same on every block of rows.

* :mod:`~gpucal.encoding.encoder`: :class:`FeatureEncoder`, the estimator (categories by value, numbers by
  quantile bins, missing and unseen values with their own code; fitted over any ``gpucal.rows``);
* :mod:`~gpucal.encoding.codings`: one column's coding and the code dtypes;
* :mod:`~gpucal.encoding.crosses`: crosses of two columns (``interactions``), one more coded column each;
* :mod:`~gpucal.encoding.summaries`: the per-block summaries a fit over many blocks merges;
* :mod:`~gpucal.encoding.features`: which columns a fit reads (the default features, the label check).
"""

from gpucal.encoding.codings import KIND_BINS
from gpucal.encoding.encoder import FeatureEncoder
from gpucal.encoding.features import resolve_feature_cols, trusting_feature_cols

__all__ = ["KIND_BINS", "FeatureEncoder", "resolve_feature_cols", "trusting_feature_cols"]

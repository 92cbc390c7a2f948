r"""MBCT's smallest splittable node, :math:`\beta`, from Eq. 13 (Huang et al. 2022, Sec. 4.3).

The paper bounds a bin's deviation with Theorem 1 (Eq. 3) and, assuming MBCT behaves like a
uniform-mass binning with :math:`B = |D| / c` bins of :math:`c` rows, takes the largest :math:`c` with

.. math::

    e \le \sqrt{\frac{2 \hat V_D \ln(3 |D| / (c \alpha))}{c}} + \frac{3 \ln(3 |D| / (c \alpha))}{c},
    \qquad \hat V_D = \frac{1}{|D|} \sum_i (y_i - \hat y_D)^2,

i.e. the bin size at which the bound falls to ``e``. Eq. 13 as printed divides the bound by
:math:`\hat y_D` (a relative error); read that way it gives bins of tens of thousands of rows, far from
the 800 / 2000 / 1000 the paper reports. Read with ``e`` as an absolute bound, as here, it lands near
them. The bound falls monotonically in :math:`c`, so bisection finds the crossing.
"""

from __future__ import annotations

import math


def theorem1_bound(c: float, n_total: float, variance: float, alpha: float) -> float:
    """Return Theorem 1's deviation bound for bins of ``c`` rows out of ``n_total`` (Eq. 3 with B = n/c)."""
    log_term = math.log(max(3.0 * n_total / (c * alpha), 1.0))
    return math.sqrt(2.0 * variance * log_term / c) + 3.0 * log_term / c


def min_node_size(n_total: float, variance: float, *, alpha: float, e: float) -> int:
    r"""Return :math:`\beta`: the largest bin size ``c`` whose Theorem 1 bound is still at least ``e``.

    Parameters
    ----------
    n_total : float
        Number of calibration rows :math:`|D|` (the weighted count).
    variance : float
        :math:`\hat V_D`, the label variance.
    alpha, e : float
        Confidence and the permissible deviation (the paper: 0.05 and 0.1).

    Returns
    -------
    int
        At least 2 and at most ``n_total``.
    """
    upper = max(2.0, float(n_total))
    if theorem1_bound(upper, n_total, variance, alpha) >= e:
        return int(upper)
    lo, hi = 1.0, upper
    while hi - lo > 0.5:
        mid = 0.5 * (lo + hi)
        if theorem1_bound(mid, n_total, variance, alpha) >= e:
            lo = mid
        else:
            hi = mid
    return max(2, int(lo))

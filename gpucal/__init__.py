"""gpucal: calibration of model scores in dataframes, on the CPU (numba) and the GPU (numba-cuda).

``import gpucal`` imports no GPU library and starts no CUDA context: the GPU path is chosen only
when data already lives on the GPU (cupy / cudf) or ``device="gpu"`` is asked for.
"""

from gpucal import datasets, metrics
from gpucal._version import __version__
from gpucal.evaluation import evaluate

__all__ = ["__version__", "datasets", "evaluate", "metrics"]

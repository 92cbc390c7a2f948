"""gpucal: calibration of model scores in dataframes, on the CPU (numba) and the GPU (numba-cuda).

``import gpucal`` imports no GPU library and starts no CUDA context: the GPU path is chosen only
when data already lives on the GPU (cupy / cudf) or ``device="gpu"`` is asked for. It imports no
heavy library either (pandas, numba, scikit-learn, scipy): each public name is imported from its
module on first use (PEP 562 ``__getattr__``), so ``import gpucal`` and ``gpucal --help`` take a
fraction of a second. Importing it changes nothing in the process: numba's cache folder and OpenMP's
wait policy are set where gpucal first compiles (``gpucal.kernels.jit``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gpucal._version import __version__
from gpucal.registry import complete_with


def _import_every_method() -> None:
    """Import every method, each joining :mod:`gpucal.registry` (its ``complete`` runs this, once)."""
    import gpucal.loading  # noqa: F401


complete_with(_import_every_method)

if TYPE_CHECKING:
    from gpucal import datasets, distributed, metrics
    from gpucal.auto import AutoCalibrator
    from gpucal.calibrators import (
        BBQCalibrator,
        BetaCalibrator,
        CenteredIsotonicCalibrator,
        DirichletCalibrator,
        DownsamplingCorrection,
        ENIRCalibrator,
        FeatureAwarePlattCalibrator,
        HingePlattCalibrator,
        HistogramCalibrator,
        IsotonicCalibrator,
        PlattCalibrator,
        ScalingBinningCalibrator,
        SIRCalibrator,
        SplineCalibrator,
        TemperatureCalibrator,
        VennAbersCalibrator,
        correct_downsampling,
    )
    from gpucal.ccl import ClusteredCalibrator
    from gpucal.encoding import FeatureEncoder
    from gpucal.evaluation import evaluate
    from gpucal.factory import make_calibrator
    from gpucal.hc import HeterogeneousCalibrator
    from gpucal.loading import load
    from gpucal.mbct import MBCT
    from gpucal.neural import FieldAwareCalibrator, PiecewiseLogitCalibrator
    from gpucal.persistence import ModelFileError

__all__ = [
    "MBCT",
    "AutoCalibrator",
    "BBQCalibrator",
    "BetaCalibrator",
    "CenteredIsotonicCalibrator",
    "ClusteredCalibrator",
    "DirichletCalibrator",
    "DownsamplingCorrection",
    "ENIRCalibrator",
    "FeatureAwarePlattCalibrator",
    "FeatureEncoder",
    "FieldAwareCalibrator",
    "HeterogeneousCalibrator",
    "HingePlattCalibrator",
    "HistogramCalibrator",
    "IsotonicCalibrator",
    "ModelFileError",
    "PiecewiseLogitCalibrator",
    "PlattCalibrator",
    "SIRCalibrator",
    "ScalingBinningCalibrator",
    "SplineCalibrator",
    "TemperatureCalibrator",
    "VennAbersCalibrator",
    "__version__",
    "correct_downsampling",
    "datasets",
    "distributed",
    "evaluate",
    "load",
    "make_calibrator",
    "metrics",
]


#: Modules that ``import gpucal`` used to load, reachable as ``gpucal.<name>`` without importing them.
_SUBMODULES = (
    "auto",
    "calibrators",
    "catalogue",
    "ccl",
    "datasets",
    "distributed",
    "encoding",
    "evaluation",
    "factory",
    "hc",
    "loading",
    "mbct",
    "metrics",
    "neural",
    "partition",
    "persistence",
    "registry",
    "rows",
    "rules",
)
#: Module of each public class and function, for the lazy import in ``__getattr__``.
_MODULE_OF = {
    name: module
    for module, names in {
        "gpucal.calibrators": (
            "BBQCalibrator",
            "BetaCalibrator",
            "CenteredIsotonicCalibrator",
            "DirichletCalibrator",
            "DownsamplingCorrection",
            "ENIRCalibrator",
            "FeatureAwarePlattCalibrator",
            "HingePlattCalibrator",
            "HistogramCalibrator",
            "IsotonicCalibrator",
            "PlattCalibrator",
            "ScalingBinningCalibrator",
            "SIRCalibrator",
            "SplineCalibrator",
            "TemperatureCalibrator",
            "VennAbersCalibrator",
            "correct_downsampling",
        ),
        "gpucal.factory": ("make_calibrator",),
        "gpucal.neural": ("FieldAwareCalibrator", "PiecewiseLogitCalibrator"),
        "gpucal.auto": ("AutoCalibrator",),
        "gpucal.ccl": ("ClusteredCalibrator",),
        "gpucal.encoding": ("FeatureEncoder",),
        "gpucal.evaluation": ("evaluate",),
        "gpucal.hc": ("HeterogeneousCalibrator",),
        "gpucal.mbct": ("MBCT",),
        "gpucal.loading": ("load",),
        "gpucal.persistence": ("ModelFileError",),
    }.items()
    for name in names
}


def __getattr__(name: str) -> Any:
    """Import a public name or submodule on first use, then keep it in the package namespace."""
    if name in _SUBMODULES:
        return import_module(f"gpucal.{name}")  # the import binds it as an attribute
    if name not in _MODULE_OF:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})

"""Neural calibration (NeuCalib): ``sigmoid(eta(l) + g(x))``, trained with PyTorch (``gpucal[neural]``).

Importing this package imports no torch: only ``fit`` does. Predicting and loading a saved model need
numpy (or cupy) alone.
"""

from gpucal.neural._torch import torch_available
from gpucal.neural.field_aware import FieldAwareCalibrator
from gpucal.neural.piecewise import PiecewiseLogitCalibrator

__all__ = ["FieldAwareCalibrator", "PiecewiseLogitCalibrator", "torch_available"]

"""PyTorch, imported lazily: the install hint, the device, the thread count and the DLPack handover.

``import gpucal`` and every ``predict`` of a neural calibrator run without PyTorch; only ``fit`` needs it
(the ``gpucal[neural]`` extra). This module is the one place that says so: :func:`require_torch` raises an
``ImportError`` naming the extra, and the training code (``_train``) is reached only through
:func:`load_training`.

Arrays reach torch without a host round trip: numpy arrays through ``torch.from_numpy`` (shared memory),
cupy arrays (and so cudf columns) through DLPack (``torch.from_dlpack``, the same device buffer).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np

from gpucal._backend import DeviceUnavailableError, is_cupy_array

INSTALL_HINT = "pip install 'gpucal[neural]'"


def torch_available() -> bool:
    """Return True when PyTorch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def require_torch(what: str) -> ModuleType:
    """Import and return torch; without it raise ``ImportError`` saying which extra to install."""
    try:
        import torch
    except ImportError:
        msg = f"{what} is trained with PyTorch, which is not installed: {INSTALL_HINT}"
        raise ImportError(msg) from None
    return torch


def load_training(what: str) -> ModuleType:
    """Return the training module (``gpucal.neural._train``), checking for torch first."""
    require_torch(what)
    from gpucal.neural import _train

    return _train


def torch_device(device: str, *arrays: Any) -> str:
    """Resolve gpucal's ``device`` (``"auto"``, ``"cpu"``, ``"gpu"``) to a torch device name.

    ``"auto"`` trains on CUDA exactly when the data is on the GPU (cupy / cudf), as every gpucal fit does.
    """
    torch = require_torch("a neural calibrator")
    on_gpu = any(is_cupy_array(a) for a in arrays if a is not None)
    if device == "gpu" or (device == "auto" and on_gpu):
        if not torch.cuda.is_available():
            msg = f"device={device!r} needs CUDA, but this PyTorch build sees no CUDA GPU"
            raise DeviceUnavailableError(msg)
        return "cuda"
    return "cpu"


def as_tensor(a: Any, device: str, dtype: str) -> Any:
    """Return array ``a`` as a torch tensor of ``dtype`` (a torch dtype's name) on ``device``.

    numpy: ``torch.from_numpy`` (no copy for a C-contiguous, writable array of the right dtype); cupy:
    DLPack (``torch.from_dlpack``: the same device buffer, no host copy). A copy happens only to change
    the dtype or the device, or for read-only memory (a pandas column's view, checked labels): torch has
    no read-only tensor, and ``from_numpy`` of one warns that a write through it would be undefined.
    """
    torch = require_torch("a neural calibrator")
    if is_cupy_array(a):
        import cupy

        tensor = torch.from_dlpack(cupy.ascontiguousarray(a))
    else:
        host = np.ascontiguousarray(a, dtype=np.dtype(dtype))
        tensor = torch.from_numpy(host if host.flags.writeable else host.copy())
    return tensor.to(device=device, dtype=getattr(torch, dtype))


#: Most PyTorch CPU threads a fit may ask for: far more than any machine has, and far below the counts
#: at which ``torch.set_num_threads`` ended the process (1e6: a segmentation fault).
MAX_TORCH_THREADS = 1024
#: Largest seed: PyTorch's generators take seeds below 2**64.
MAX_TORCH_SEED = 2**64 - 1


@contextlib.contextmanager
def training_torch(n_threads: int) -> Iterator[None]:
    """Run a fit's block with ``torch.set_num_threads(n_threads)`` and autograd on, then restore the
    caller's settings.

    The CPU kernels split their reductions by thread, so the thread count is part of what makes two fits
    give the same bits; it is fixed for the fit and put back afterwards. Training needs gradients: a fit
    called inside the caller's ``torch.no_grad()`` or ``torch.inference_mode()`` trains as outside it
    (it raised "element 0 of tensors does not require grad").
    """
    torch = require_torch("a neural calibrator")
    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        torch.set_num_threads(before)


__all__ = [
    "INSTALL_HINT",
    "MAX_TORCH_SEED",
    "MAX_TORCH_THREADS",
    "as_tensor",
    "load_training",
    "require_torch",
    "torch_available",
    "torch_device",
    "training_torch",
]

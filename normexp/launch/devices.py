"""Is there a CUDA or MPS device here? Answered without importing torch (seconds) where the
answer is certainly no, so the pre-flight's refusals and `--cfg job` stay quick on a machine
without a GPU: torch reaches a CUDA device only through the NVIDIA driver's library
(libcuda), and MPS exists only on macOS. Where a device may be there, torch answers (the run
that follows imports it anyway)."""

from __future__ import annotations

import ctypes
import sys

# the NVIDIA driver's library, which torch's CUDA builds load to reach a device
_CUDA_DRIVER = {"win32": "nvcuda.dll", "linux": "libcuda.so.1"}


def cuda_driver_loadable() -> bool:
    """The NVIDIA driver's library can be loaded (loaded only, never initialised: a CUDA
    context made here would break the forked processes of a parallel sweep)."""
    name = _CUDA_DRIVER.get(sys.platform)
    if name is None:  # macOS: no CUDA
        return False
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def cuda_available() -> bool:
    """torch.cuda.is_available(), without importing torch when no NVIDIA driver is here."""
    if "torch" not in sys.modules and not cuda_driver_loadable():
        return False
    import torch

    return torch.cuda.is_available()


def mps_available() -> bool:
    """torch.backends.mps.is_available(), without importing torch off macOS."""
    if sys.platform != "darwin":
        return False
    import torch

    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def auto_device_type() -> str:
    """What device=auto trains on (train.loop.select_device's order): cuda, else mps, else cpu."""
    if cuda_available():
        return "cuda"
    return "mps" if mps_available() else "cpu"

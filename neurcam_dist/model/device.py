"""Which device and which matmul precision a driver trains with."""
from __future__ import annotations

import torch

from ..errors import ConfigError


def resolve_device(device: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; other names as torch reads them, checked
    against this machine (``errors.ConfigError`` naming the parameter: an unknown name, no CUDA,
    an index past the devices there are)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device={device!r} is not a torch device name; use 'auto', 'cpu', 'cuda' "
                          "or 'cuda:N'") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={device!r}: this machine has no CUDA device (torch "
                              f"{torch.__version__}); use device='auto' or 'cpu'")
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"device={device!r}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
    elif dev.type != "cpu":
        backend = getattr(torch, dev.type, None)
        if backend is None or not getattr(backend, "is_available", lambda: False)():
            raise ConfigError(f"device={device!r}: torch has no usable {dev.type!r} backend here; "
                              "use device='auto' or 'cpu'")
    return dev


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bf16 where the hardware has fast bf16 matmuls (CUDA with bf16, CPUs with
    AVX-512 BF16 / AMX through oneDNN), fp32 elsewhere."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    try:
        return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    except (AttributeError, RuntimeError):
        return "fp32"

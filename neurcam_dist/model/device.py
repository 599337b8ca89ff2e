"""Which device and which matmul precision a driver trains with."""
from __future__ import annotations

import torch


def resolve_device(device: str) -> torch.device:
    """``auto``: CUDA when available, else the CPU; other names as torch reads them."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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

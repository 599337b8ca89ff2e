"""Process-wide switches read from the environment: they change how fast a run goes, never the
model it trains, so they are not hyperparameters. Read here, outside ``model/`` (which knows
nothing of the process it runs in), and handed to the builder by each driver. The
``deterministic`` hyperparameter's process settings (``deterministic_algorithms``) are set here
too, by each driver around its training."""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

from .errors import TrainingError

CUDA_GRAPHS = "NEURCAM_CUDA_GRAPHS"   # "0": every GPU training step eager (debugging, comparisons)
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
DETERMINISTIC_WORKSPACE = ":4096:8"   # one of the two settings cuBLAS documents as reproducible


def cuda_graphs_enabled() -> bool:
    """Replay the GPU training step from CUDA graphs (``model/graphs.py``) unless switched off."""
    return os.environ.get(CUDA_GRAPHS, "1").strip().lower() not in ("0", "false", "off", "no")



@contextmanager
def deterministic_algorithms(on: bool):
    """Train under the ``deterministic`` hyperparameter. With ``on``: torch's deterministic
    algorithms (``torch.use_deterministic_algorithms``), cuDNN's deterministic mode and a fixed
    cuBLAS workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless the environment sets one) for the
    duration, every setting restored after; an operation with no deterministic implementation on
    this device is refused as a ``TrainingError`` that names it. cuBLAS takes its workspace size
    when a workspace is first made, so a process that used CUDA before without the variable gets a
    warning (set it before the process starts; Ray workers start with it, ``session.worker_env``).
    Ray's ``ray.train.torch.enable_reproducibility`` sets the same switches in a worker, but
    restores nothing and has no counterpart for the in-memory estimator."""
    if not on:
        yield
        return
    import torch
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, os.environ.get(CUBLAS_WORKSPACE))
    if before[4] is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            warnings.warn(f"deterministic=True in a process that has used CUDA without {CUBLAS_WORKSPACE} set: "
                          f"cuBLAS may keep its earlier workspace and the run may not be bit-identical; set "
                          f"{CUBLAS_WORKSPACE}={DETERMINISTIC_WORKSPACE} before the process starts",
                          RuntimeWarning, stacklevel=3)
        os.environ[CUBLAS_WORKSPACE] = DETERMINISTIC_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    except RuntimeError as e:
        if "does not have a deterministic implementation" not in str(e):
            raise
        raise TrainingError(f"deterministic=True: {str(e).split(', but you set')[0]}; train without "
                            f"deterministic (model.deterministic: false) on this device") from e
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]
        if before[4] is None:
            os.environ.pop(CUBLAS_WORKSPACE, None)

def available_memory() -> int:
    """Bytes of memory available now: Linux's MemAvailable, or less where a cgroup (a
    Kubernetes pod's limit) allows less; elsewhere the free pages."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f, open("/sys/fs/cgroup/memory.current") as g:
            limit = f.read().strip()
            if limit != "max":
                avail = min(avail, int(limit) - int(g.read().strip()))
    except (OSError, ValueError):
        pass
    return avail

"""Process-wide switches read from the environment: they change how fast a run goes, never the
model it trains, so they are not hyperparameters. Read here, outside ``model/`` (which knows
nothing of the process it runs in), and handed to the builder by each driver. The
``deterministic`` hyperparameter's process settings (``deterministic_algorithms``) and the torch
threads a piece of work runs on (``sized_threads``) are set here too, by each driver around its
work."""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

from .errors import TrainingError

CUDA_GRAPHS = "NEURCAM_CUDA_GRAPHS"   # "0": every GPU training step eager (debugging, comparisons)
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
DETERMINISTIC_WORKSPACE = ":4096:8"   # one of the two settings cuBLAS documents as reproducible
# Multiply-adds of one step (a training step's forward and backward, or a scoring chunk's forward)
# that each torch thread must have for another thread to pay. Every torch op of a step waits for
# all its threads, so a thread on a core that another process holds stalls every op. Measured on
# 2 cores (benchmarks/results/threads.md): steps of 512 rows x 4-256 channels ran 1.1-1.9x faster
# on 2 threads than on 1 on a quiet machine, and 1.6-2.1x slower beside one CPU-bound process.
# Below 3e9 a step (about 200 channels at batch 512) one thread is taken: a small table loses
# little when the machine is quiet and much when it is not; above, the quiet machine's gain.
THREAD_WORK = 1.5e9


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

def threads_for(work: float, cap: int) -> int:
    """The torch threads for steps of ``work`` multiply-adds each: one per ``THREAD_WORK``, at least
    1, at most ``cap`` (the threads the process has)."""
    return max(1, min(int(cap), int(work // THREAD_WORK)))


@contextmanager
def sized_threads(work: float, threads: int | None = None):
    """Run the body on the torch threads its steps' ``work`` (multiply-adds each) is worth
    (``threads_for``, never more than the process has now), or exactly ``threads`` when the caller
    set it; the process's own setting is restored after. Yields the thread count. The count
    follows the work's shape and the process's threads, never the machine's load, so one seed
    still gives one model on the same hardware (another count may change a model's last bits)."""
    import torch
    before = torch.get_num_threads()
    n = int(threads) if threads is not None else threads_for(work, before)
    if n != before:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


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

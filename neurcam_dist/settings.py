"""Process-wide switches read from the environment: they change how fast a run goes, never the
model it trains, so they are not hyperparameters. Read here, outside ``model/`` (which knows
nothing of the process it runs in), and handed to the builder by each driver."""
from __future__ import annotations

import os

CUDA_GRAPHS = "NEURCAM_CUDA_GRAPHS"   # "0": every GPU training step eager (debugging, comparisons)


def cuda_graphs_enabled() -> bool:
    """Replay the GPU training step from CUDA graphs (``model/graphs.py``) unless switched off."""
    return os.environ.get(CUDA_GRAPHS, "1").strip().lower() not in ("0", "false", "off", "no")


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

"""Process-wide switches read from the environment: they change how fast a run goes, never the
model it trains, so they are not hyperparameters. Read here, outside ``model/`` (which knows
nothing of the process it runs in), and handed to the builder by each driver."""
from __future__ import annotations

import os

CUDA_GRAPHS = "NEURCAM_CUDA_GRAPHS"   # "0": every GPU training step eager (debugging, comparisons)


def cuda_graphs_enabled() -> bool:
    """Replay the GPU training step from CUDA graphs (``model/graphs.py``) unless switched off."""
    return os.environ.get(CUDA_GRAPHS, "1").strip().lower() not in ("0", "false", "off", "no")

"""Ray: the session, the Ray Train worker loop and its driver, the Ray Tune search, and batch
scoring with Ray Data. Returns results for tracking to log; knows nothing of MLflow.

The names below are imported on first use (PEP 562), so scoring a table small enough for this
process (``predict_parquet`` in process, a CSV's scores) needs no Ray installed; the training
modules import Ray when they are loaded."""
from __future__ import annotations

import importlib

_WHERE = {"TrainResult": "driver", "train": "driver", "evaluate": "scoring", "predict_parquet": "scoring",
          "SearchError": "tuner", "SearchResult": "tuner", "search": "tuner", "check_resources": "session",
          "ensure_ray": "session", "quiet_data_progress": "session"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """``distributed.NAME``: the module that holds it, imported now."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)

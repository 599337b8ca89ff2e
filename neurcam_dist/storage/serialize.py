"""JSON for numbers that come out of numpy and torch."""
from __future__ import annotations

import numpy as np


def jsonable(obj):
    """Dicts, lists and tuples of numpy arrays and scalars as plain Python (JSON-ready)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj

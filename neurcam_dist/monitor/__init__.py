"""Drift seen through the model: a reference kept with the model at fit time (``reference``) and
a snapshot compared with it feature by feature, cluster by cluster and term by term (``drift``),
written as ``drift.json`` and ``monitor.html`` (``page``)."""
from .drift import Drift, combine, drift_from, drift_of, tally
from .reference import reference_of

__all__ = ["Drift", "combine", "drift_from", "drift_of", "reference_of", "tally"]

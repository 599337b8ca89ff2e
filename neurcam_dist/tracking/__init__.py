"""MLflow: where runs go (``uri``), run logging for trainings and searches (``runs``), and the
model registry with its pyfunc-from-code model (``registry``, ``pyfunc_model``). Takes the results
that training returns; knows nothing of Ray."""
from .promotion import LeaseTimeout, champion_version, former_champion, lineage_next_id, promote_if_unchanged
from .registry import load_estimator, log_model, promote
from .runs import TrackingError, log_search, log_training, mark_killed_runs, tracking_failed
from .uri import check_reachable, tracking_uri, use

__all__ = ["LeaseTimeout", "TrackingError", "champion_version", "former_champion", "lineage_next_id", "promote_if_unchanged", "check_reachable", "load_estimator", "log_model", "log_search", "log_training", "mark_killed_runs",
           "promote", "tracking_failed", "tracking_uri", "use"]

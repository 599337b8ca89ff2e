"""MLflow: where runs go (``uri``), run logging for trainings and searches (``runs``), and the
model registry with its pyfunc-from-code model (``registry``, ``pyfunc_model``). Takes the results
that training returns; knows nothing of Ray."""
from .decisions import log_decision, tag_snapshot, versions_trained_on
from .monitoring import log_drift
from .promotion import LeaseTimeout, champion_version, former_champion, lineage_next_id, promote_if_unchanged
from .registry import load_estimator, log_model, promote
from .runs import TrackingError, abandon_partial_runs, log_search, log_training, mark_killed_runs, tracking_failed
from .uri import import_mlflow, check_reachable, check_uri, is_connection_failure, tracking_uri, use, wait_reachable

__all__ = ["LeaseTimeout", "TrackingError", "abandon_partial_runs", "is_connection_failure", "wait_reachable",
           "champion_version", "former_champion", "lineage_next_id", "promote_if_unchanged", "check_reachable", "check_uri",
           "load_estimator", "log_model", "log_search", "log_training", "mark_killed_runs", "promote", "tracking_failed",
           "tracking_uri", "use", "log_decision", "tag_snapshot", "versions_trained_on", "import_mlflow", "log_drift"]

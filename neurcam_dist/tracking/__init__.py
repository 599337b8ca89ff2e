"""MLflow: where runs go (``uri``), run logging for trainings and searches (``runs``), and the
model registry with its pyfunc-from-code model (``registry``, ``pyfunc_model``). Takes the results
that training returns; knows nothing of Ray."""
from .registry import load_estimator, log_model, promote
from .runs import TrackingError, log_search, log_training, tracking_failed
from .uri import check_reachable, tracking_uri, use

__all__ = ["TrackingError", "check_reachable", "load_estimator", "log_model", "log_search", "log_training",
           "promote", "tracking_failed", "tracking_uri", "use"]

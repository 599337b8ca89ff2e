"""Ray: the session, the Ray Train worker loop and its driver, the Ray Tune search, and batch
scoring with Ray Data. Returns results for tracking to log; knows nothing of MLflow."""
from .driver import TrainResult, train
from .scoring import evaluate, predict_parquet
from .tuner import SearchError, SearchResult, search
from .session import check_resources, ensure_ray, quiet_data_progress

__all__ = ["SearchError", "SearchResult", "TrainResult", "check_resources", "ensure_ray", "evaluate",
           "predict_parquet", "quiet_data_progress", "search", "train"]

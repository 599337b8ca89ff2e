"""The math: gates, the network, the loss, Algorithm 1's schedule, the one epoch step and the
trainer every driver shares. Torch (and scikit-learn's k-means) only: no files, Ray or MLflow."""
from .build import TrainingSpec, build_trainer
from .fitted import FittedNet, log_assignment
from .network import NeurCAMNet

__all__ = ["FittedNet", "NeurCAMNet", "TrainingSpec", "build_trainer", "log_assignment"]

"""neurcam-dist: interpretable clustering with neural additive models (NeurCAM / Neur2CAM)."""
from .estimator import NeurCAM

__version__ = "0.1.0"
__all__ = ["NeurCAM", "__version__"]

"""neurcam-dist: interpretable clustering with neural additive models (NeurCAM / Neur2CAM)."""
from .estimator import NeurCAM
from .version import __version__

__all__ = ["NeurCAM", "__version__"]

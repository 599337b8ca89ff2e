"""neurcam-dist: interpretable clustering with neural additive models (NeurCAM / Neur2CAM).

``import neurcam_dist`` is cheap: the estimator (and with it torch and scikit-learn) is imported on
first use of ``neurcam_dist.NeurCAM``, so the ``neurcam`` command answers ``--help`` and a
mistyped command without loading a training stack (``tests/test_layout.py`` guards the list).
"""
from .version import __version__

__all__ = ["NeurCAM", "__version__"]


def __getattr__(name: str):
    if name == "NeurCAM":
        from .estimator import NeurCAM
        return NeurCAM
    raise AttributeError(f"module 'neurcam_dist' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + ["NeurCAM"])

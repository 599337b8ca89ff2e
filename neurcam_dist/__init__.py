"""neurcam-dist: interpretable clustering with neural additive models (NeurCAM / Neur2CAM).

``import neurcam_dist`` is cheap: the estimator (and with it torch and scikit-learn) is imported on
first use of ``neurcam_dist.NeurCAM``, so the ``neurcam`` command answers ``--help`` and a
mistyped command without loading a training stack (``tests/test_layout.py`` guards the list).
"""
from .version import __version__

__all__ = ["Explanation", "NeurCAM", "__version__", "choose_k"]


def __getattr__(name: str):
    """``NeurCAM`` (the estimator), ``Explanation`` (what ``NeurCAM.explain`` returns, and
    ``Explanation.from_json`` reads back) and ``choose_k`` (how many clusters), imported on first use."""
    if name == "NeurCAM":
        from .estimator import NeurCAM
        return NeurCAM
    if name == "Explanation":
        from .explain import Explanation
        return Explanation
    if name == "choose_k":
        from .estimator import choose_k
        return choose_k
    raise AttributeError(f"module 'neurcam_dist' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + ["Explanation", "NeurCAM", "choose_k"])

"""``neurcam demo``: the whole service on embedded defaults (the bundled digits, a local Ray, the embedded
MLflow store)."""
from __future__ import annotations

from pathlib import Path

from .common import say
from ..uris import Where


def demo_data(output: Where) -> str:
    """Where ``neurcam demo`` writes the bundled digits: beside its output (``runs/demo-data`` for
    ``runs/demo``), never inside it, since no output may hold its own input
    (``storage.refuse_overwrite``) and a demo run again replaces its output whole.

    Examples
    --------
    >>> from neurcam_dist import service
    >>> service.demo_data("runs/demo")
    'runs/demo-data'
    """
    path = Path(output)
    path = path if path.name else path.absolute()
    return str(path.with_name(f"{path.name}-data"))


def demo_config(output: Where, seeds: int, workers: int) -> dict:
    """``neurcam demo``: Neur2CAM (10 clusters, 8 pairs) on the digits shards (``demo_data``), a
    search over ``seeds`` seeds on a local Ray, tracked in the embedded MLflow store (./mlflow.db).
    ``epsilon`` 0.8 (not 0.9) anneals the gates in about half the epochs, so 3 trials fit in a
    few minutes on 2 cores.

    Examples
    --------
    >>> from neurcam_dist import service
    >>> cfg = service.demo_config("runs/demo", seeds=3, workers=2)
    >>> cfg["data"]["path"], cfg["model"]["n_clusters"], cfg["search"]
    ('runs/demo-data', 10, {'seeds': 3})
    """
    return {"data": {"path": demo_data(output), "label": "label", "id": "id"},
            "model": {"n_clusters": 10, "n_pairs": 8, "precision": "auto", "epsilon": 0.8},
            "train": {"num_workers": workers, "checkpoint_every": 25},
            "search": {"seeds": seeds},
            "tracking": {"experiment": "neurcam-demo", "model_name": "digits-demo"},
            "output": output}


def demo(output: Where = "runs/demo", seeds: int = 3, workers: int = 2, overrides: dict | None = None):
    """The whole service on embedded defaults: the bundled digits as Parquet shards in
    ``demo_data(output)``, a search of ``seeds`` seeds into ``output``, MLflow in ``./mlflow.db``. The
    config is checked before anything is written; run again, the demo replaces its data and its
    output, each whole. Returns the ``SearchResult``.

    Examples
    --------
    One seed on one worker, a few epochs, tracked in a store of its own (``overrides``, as
    ``neurcam demo --set``):

    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> d = Path(tempfile.mkdtemp())
    >>> found = service.demo(d / "demo", seeds=1, workers=1, overrides={"model.epochs": 4, "model.warmup_epochs": 2,
    ...                      "tracking.uri": f"sqlite:///{d / 'mlflow.db'}"})  # doctest: +ELLIPSIS
    [neurcam] ...
    >>> found.best.metrics["n_rows"], found.tracking["registered_model"], found.tracking["version"]
    (1797, 'digits-demo', '1')
    """
    from ..config import apply_overrides, parse_config
    from ..data.bundled import digits_frame, write_frame_shards
    cfg = parse_config(apply_overrides(demo_config(output, seeds, workers), overrides or {}), "the demo config")
    if cfg.data.path == demo_data(output):   # not when --set data.path=... points the demo at other data
        frame = digits_frame()
        write_frame_shards(frame, cfg.data.path, 4)
        say(f"demo data: the bundled digits ({len(frame):,} rows, {frame.shape[1] - 1} pixel features and a "
             f"label) as 4 Parquet shards in {cfg.data.path}")
    from ..ops.runs import search
    return search(cfg)

"""One start and one finish around the loop (``model.start``): the estimator and the Ray driver
make the same ``Start`` from the same rows, build their trainers from it whole (the driver ships it
whole to every worker), and end with the same ``finish``."""
import ast
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

from neurcam_dist.model import start as start_mod

from .conftest import blobs

PACKAGE = Path(__file__).resolve().parents[1] / "neurcam_dist"


@dataclasses.dataclass(frozen=True, eq=False)
class _Probed(start_mod.Start):
    """A ``Start`` with one more field, as a new initialisation value would be added: it says
    where a trainer was built from it."""
    probe: str = "absent"

    def trainer(self, spec, **kwargs):
        _BUILT.append(self.probe)
        return super().trainer(spec, **kwargs)


_BUILT: list[str] = []


def _probing_begin(*args, **kwargs):
    made = start_mod.begin(*args, **kwargs)
    return _Probed(**{f.name: getattr(made, f.name) for f in dataclasses.fields(made)}, probe="new field")


def _job(tmp_path: Path):
    from neurcam_dist.config import parse_config
    from neurcam_dist.distributed.job import prepare, resolve
    X, y = blobs(n=300, d=4, k=3, seed=0)
    (tmp_path / "data").mkdir()
    X.assign(id=np.arange(len(X)), label=y).to_parquet(tmp_path / "data" / "part-0.parquet")
    cfg = parse_config({"data": {"path": str(tmp_path / "data"), "id": "id", "label": "label"},
                        "model": {"n_clusters": 3, "hidden": [8], "n_bases": 2, "warmup_epochs": 1, "epochs": 2,
                                  "distill_epochs": 1, "batch_size": 64, "random_state": 0},
                        "train": {"num_workers": 1, "kmeans_sample": 300},
                        "output": str(tmp_path / "out")})
    return prepare(resolve(cfg)), X


def test_a_new_field_of_the_start_reaches_the_estimator_and_every_ray_worker(ray_cluster, tmp_path, monkeypatch):
    """The start is made once per fit and handed on whole: a field added to ``Start`` reaches the
    estimator's trainer, and (through ``WorkerConfig``, pickled as Ray ships it) each worker's
    trainer and the driver's rebuilt one, with nothing to copy by hand."""
    import torch

    from neurcam_dist import NeurCAM, estimator
    from neurcam_dist.distributed import driver, worker
    from neurcam_dist.errors import TrainingError
    from neurcam_dist.model import loop
    monkeypatch.setattr(estimator, "begin", _probing_begin)
    monkeypatch.setattr(driver, "begin", _probing_begin)
    _BUILT.clear()
    (job, prof), X = _job(tmp_path)
    est = NeurCAM(n_clusters=3, hidden=[8], n_bases=2, warmup_epochs=1, epochs=2, distill_epochs=1, batch_size=64,
                  random_state=0).fit(X)
    assert _BUILT == ["new field"] and est.n_iter_ == 2
    _BUILT.clear()
    init = driver.initial_state(job, prof)
    wcfg = pickle.loads(pickle.dumps(driver.worker_config(job, init)))   # as Ray hands it to a worker
    assert isinstance(wcfg.start, _Probed) and wcfg.start.probe == "new field"
    trainer = worker._worker_trainer(wcfg, torch.device("cpu"), loop.ALONE, "fp32")
    state = {"trainer": trainer.state_dict(), "records": [], "precision": "fp32", "resumes": [], "world_size": 1}
    try:
        fitted, _ = driver.assemble(job.plan, wcfg, state, 0.0)
    except TrainingError:   # a network whose gates are not one-hot yet: the finish refuses it
        fitted = None
    assert _BUILT == ["new field", "new field"]   # the worker's trainer, and the driver's rebuilt one
    if fitted is not None:   # finished from the start: its standardization, coding and k-means record
        assert np.array_equal(fitted.mean, wcfg.start.mean) and fitted.coding is wcfg.start.coding
        assert fitted.history["init"] == wcfg.start.kmeans


def test_the_estimator_and_the_driver_start_alike_from_the_same_rows(ray_cluster, tmp_path, monkeypatch):
    """The same rows and seed give the same ``Start`` in memory and on the driver: standardization,
    centroids, k-means record, allowed features and the coding's starting values."""
    from neurcam_dist import NeurCAM
    from neurcam_dist.distributed import driver
    (job, prof), X = _job(tmp_path)
    seen = {}

    def keep(*args, **kwargs):
        seen["estimator"] = start_mod.begin(*args, **kwargs)
        return seen["estimator"]
    import neurcam_dist.estimator as estimator
    monkeypatch.setattr(estimator, "begin", keep)
    NeurCAM(n_clusters=3, hidden=[8], n_bases=2, warmup_epochs=1, epochs=2, distill_epochs=1, batch_size=64,
            random_state=0).fit(X)
    ours, theirs = seen["estimator"], driver.initial_state(job, prof).start
    for f in dataclasses.fields(start_mod.Start):
        a, b = getattr(ours, f.name), getattr(theirs, f.name)
        if f.name == "kmeans":   # the same partition (its clusters in whichever order)
            assert a["inertia"] == pytest.approx(b["inertia"], rel=1e-6), (a, b)
            assert sorted(a["sizes"]) == sorted(b["sizes"]), (a, b)
        elif f.name == "centroids":
            assert np.allclose(a[np.lexsort(a.T)], b[np.lexsort(b.T)], rtol=1e-5, atol=1e-6)
        elif f.name == "coding":
            assert list(a.names) == list(b.names)
        elif a is None or b is None:
            assert a is None and b is None, f.name
        else:
            assert np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-6), f.name


def test_only_the_start_builds_trainers_and_only_the_finish_makes_fitted_states():
    """Outside ``model/``, no module calls ``build_trainer``, ``initial_centroids`` or
    ``FittedNet.from_trainer``: trainers come from ``Start.trainer``, starts from ``begin`` and
    fitted states from ``finish`` (``model/``'s own k-means trial builds a throwaway trainer)."""
    names = {"build_trainer", "initial_centroids", "from_trainer"}
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in names:
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} calls {called}")
    assert not bad, "\n".join(bad)
    from neurcam_dist.distributed.worker import WorkerConfig
    own = {f.name for f in dataclasses.fields(WorkerConfig)}
    copied = own & {f.name for f in dataclasses.fields(start_mod.Start)}
    assert "start" in own and not copied, f"WorkerConfig copies the start's {sorted(copied)}: ship the Start whole"


def test_a_fitted_state_is_never_changed_after_it_is_made():
    """``finish`` makes the fitted state complete and frozen: renaming the clusters, computing
    the summary and the drift reference give the estimator new values and leave the one it had
    (which a caller may hold) as it was."""
    import pandas as pd

    from neurcam_dist import NeurCAM
    X, _ = blobs(n=200)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    est = NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, hidden=(8,), n_bases=4, verbose=False,
                  random_state=0).fit(frame)
    made = est.fitted_
    assert made.labels is not None and made.channel_means is not None, "finish left the state to be completed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.summary = {}
    labels = made.labels.copy()
    est.set_cluster_ids([7, 5, 9], next_id=12)
    _ = (est.importance_, est.drift_reference())   # computed once, kept by the estimator
    renamed = est.fitted_
    assert renamed is not made
    assert made.cluster_ids.tolist() == [0, 1, 2] and made.next_cluster_id == 3
    assert np.array_equal(made.labels, labels) and made.summary is None and made.drift_reference is None
    assert renamed.cluster_ids.tolist() == [7, 5, 9] and renamed.next_cluster_id == 12
    assert np.array_equal(renamed.labels, np.array([7, 5, 9])[labels])
    assert renamed.summary is not None and renamed.drift_reference is not None
    assert est.predict(frame).tolist() == np.array([7, 5, 9])[made.assign(made.encode(frame))].tolist()

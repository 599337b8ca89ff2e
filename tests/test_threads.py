"""Threads sized to the work: a small fit, predict or explain runs its torch ops on one thread (a
step's multiply-adds against ``settings.THREAD_WORK``), the user's ``threads`` always wins, and
the caller's thread setting is back afterwards."""
import numpy as np
import pytest
import torch

from neurcam_dist import NeurCAM
from neurcam_dist.errors import ConfigError
from neurcam_dist.model import TrainingSpec
from neurcam_dist.model.build import build_network
from neurcam_dist.model.fitted import FittedNet
from neurcam_dist.settings import THREAD_WORK, sized_threads, threads_for

from .conftest import blobs

FAST = dict(n_clusters=3, hidden=(16,), n_bases=8, epochs=12, warmup_epochs=4, batch_size=64, verbose=False)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _watched(monkeypatch):
    """The torch threads in force each time a fitted model scores rows (FittedNet.assign)."""
    seen, assign = [], FittedNet.assign

    def watching(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return assign(self, *args, **kwargs)
    monkeypatch.setattr(FittedNet, "assign", watching)
    return seen


def test_a_small_fit_and_its_predict_run_on_one_thread_and_give_the_callers_back(two_threads, monkeypatch):
    X, _ = blobs(n=300, d=3, seed=0)
    during = []
    est = NeurCAM(**FAST).fit(X, callback=lambda ctx: during.append(torch.get_num_threads()))
    assert during and set(during) == {1} and est.history_["threads"] == 1
    assert torch.get_num_threads() == 2                     # the caller's setting, restored
    seen = _watched(monkeypatch)
    est.predict(X)
    assert seen == [1] and torch.get_num_threads() == 2


def test_the_users_threads_win_over_the_rule(two_threads, monkeypatch):
    X, _ = blobs(n=300, d=3, seed=0)
    during = []
    est = NeurCAM(**FAST, threads=2).fit(X, callback=lambda ctx: during.append(torch.get_num_threads()))
    assert set(during) == {2} and est.history_["threads"] == 2
    seen = _watched(monkeypatch)
    est.predict(X)
    assert seen == [2]
    # a process the user set to one thread is never raised by the rule
    torch.set_num_threads(1)
    with sized_threads(100 * THREAD_WORK) as n:
        assert n == 1 == torch.get_num_threads()
    with pytest.raises(ConfigError, match="threads"):
        NeurCAM(**FAST, threads=0).fit(X)


def test_the_rule_gives_a_thread_per_step_of_work_up_to_the_process():
    assert threads_for(0, 8) == 1 and threads_for(THREAD_WORK * 0.99, 8) == 1
    assert threads_for(THREAD_WORK * 2, 8) == 2 and threads_for(THREAD_WORK * 100, 8) == 8
    assert threads_for(THREAD_WORK * 100, 1) == 1
    # one formula: the spec's step (before any network exists) and the built network's agree,
    # and a step grows with its rows (up to a batch) and its channels
    spec = TrainingSpec.for_data({"n_clusters": 4, "n_pairs": 3}, 5000, 20)
    net = build_network(spec, np.zeros((4, 20)))
    assert spec.step_work(5000) == net.step_work(512, backward=True) == 3 * net.step_work(512, backward=False)
    assert spec.step_work(100) < spec.step_work(5000) == spec.step_work(10_000)
    wide = TrainingSpec.for_data({"n_clusters": 4, "n_pairs": 3}, 5000, 400)
    assert wide.step_work(5000) > 10 * spec.step_work(5000)
    # the defaults' small tables are worth one thread; a 256-feature model, two
    assert threads_for(TrainingSpec.for_data({"n_clusters": 2}, 569, 30).step_work(569), 16) == 1
    assert threads_for(TrainingSpec.for_data({"n_clusters": 4}, 2048, 256).step_work(2048), 16) == 2


def test_a_small_pass_in_this_process_runs_on_one_thread_and_gives_the_process_back(two_threads):
    """Batch scoring of small data runs the actors' callable here (``scoring.in_process``): on the
    threads a chunk is worth, not on the one an actor pins, nor on all of the process's."""
    from neurcam_dist.distributed.scoring import _Scorer, in_process
    X, _ = blobs(n=300, d=3, seed=0)
    est = NeurCAM(**FAST).fit(X)
    with in_process(_Scorer, fitted=est.scoring_model(), id_column=None, carry=[]) as scorer:
        assert isinstance(scorer, _Scorer) and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2

"""The captured training step (``model.graphs``): the graph path's buffers, temperatures, sums and
invalidation, checked on the CPU by replaying a capture as a re-run (``RerunRecorder``). The CUDA
capture itself is measured on a GPU (``benchmarks/scale/gpu.py step``: graph vs eager parameters)."""
import numpy as np
import pytest
import torch

from neurcam_dist.model import TrainingSpec, build_trainer, log_assignment
from neurcam_dist.model import graphs as graphs_mod
from neurcam_dist.model.graphs import StepGraphs
from neurcam_dist.settings import CUDA_GRAPHS, cuda_graphs_enabled
from neurcam_dist.model.step import Batch, shuffled_batches, train_epoch

ROWS, BATCH = 200, 48   # 4 full batches and a short one of 8 rows per epoch


def _trainer(precision="fp32", distill_epochs=3):
    # 4 single channels over 5 features: random gate logits (no lean toward a feature each), so both
    # annealing phases take several epochs
    spec = TrainingSpec.for_data({"n_clusters": 3, "n_single": 4, "n_pairs": 2, "hidden": (8,), "n_bases": 4,
                                  "random_state": 0,
                                  "distill_epochs": distill_epochs, "warmup_epochs": 3, "epsilon": 0.3, "epochs": 30,
                                  "batch_size": BATCH, "lr_patience": 0, "lr": 0.05}, ROWS, 5)
    return build_trainer(spec, np.random.default_rng(0).normal(size=(3, 5)), precision=precision), spec


def _fit(trainer, x):
    """The estimator's loop (``NeurCAM._train``) on a bare trainer; the history and the captures
    counted at the end of every epoch."""
    gen = torch.Generator().manual_seed(0)
    targets = torch.log_softmax(-torch.cdist(x, trainer.net.centroids.detach()), 1)  # stands in for distill's
    history = []
    while not trainer.finished:
        s = trainer.schedule
        stats = trainer.run_epoch(shuffled_batches(x, x, targets if s.uses_teacher else None, BATCH, gen))
        rec, action = trainer.end_epoch(stats.means(), 0.0)
        if action == "freeze_teacher":
            targets = log_assignment(trainer.teacher, x, 1.0, 1.0)
        history.append((rec["phase"], rec["T"], rec["T2"], rec["loss"], rec["lr"], action, stats.rows,
                        trainer.graphs.captures if trainer.graphs is not None else 0))
    return history


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_captured_steps_train_the_same_model_as_eager_steps(precision):
    x = torch.randn(ROWS, 5, generator=torch.Generator().manual_seed(1))
    eager, _ = _trainer(precision)
    assert eager.graphs is None   # no graphs on a CPU unless asked for
    captured, _ = _trainer(precision)
    captured.graphs = StepGraphs("cpu")
    h_eager, h_graph = _fit(eager, x), _fit(captured, x)

    phases = [h[0] for h in h_graph]
    assert {"distill", "warmup", "anneal_pairs", "anneal_single", "final"} <= set(phases)
    assert len(set(h[4] for h in h_eager)) > 1, "the learning rate never halved: the test proves less"
    for a, b in zip(h_eager, h_graph, strict=True):
        assert a[:3] == b[:3] and a[4:7] == b[4:7]
        assert a[3] == pytest.approx(b[3], rel=1e-12)   # the epoch sums add up in another order
        assert b[6] == ROWS
    for name, p in eager.net.state_dict().items():
        assert torch.equal(p, captured.net.state_dict()[name]), name

    # one capture per batch shape and phase / lock state; annealing (a new T every epoch) adds none
    captures = {}
    for phase, *_, n in h_graph:
        captures[phase] = n
    for phase in ("anneal_pairs", "anneal_single"):
        epochs = [h for h in h_graph if h[0] == phase]
        assert len(epochs) >= 2 and len({(h[1], h[2]) for h in epochs}) == len(epochs)
    per_phase = np.diff([0] + [captures[p] for p in ("distill", "warmup", "anneal_pairs", "anneal_single", "final")])
    assert list(per_phase) == [2, 2, 2, 2, 2], per_phase   # the full batch and the short last one


def test_a_restored_checkpoint_or_a_gate_lock_drops_the_graphs():
    trainer, _ = _trainer(distill_epochs=0)
    trainer.graphs = StepGraphs("cpu")
    x = torch.randn(ROWS, 5, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen))
    assert len(trainer.graphs._graphs) == 2
    trainer.load_state_dict(trainer.state_dict())
    assert trainer.graphs._graphs == {}
    trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen))
    trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen))
    trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen))
    before = list(trainer.graphs._graphs.values())
    assert len(before) == 2
    trainer.net.pairs.gates.lock()
    trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen))
    # captured before the lock, they hold a relaxed gate and a training logit: gone, a new one made
    after = list(trainer.graphs._graphs.values())
    assert len(after) == 1 and not any(g is b for g in after for b in before)


def test_odd_batch_sizes_beyond_the_cap_run_eagerly():
    trainer, _ = _trainer(distill_epochs=0)
    graphs = trainer.graphs = StepGraphs("cpu")
    x = torch.randn(64, 5, generator=torch.Generator().manual_seed(1))
    sizes = [8, 9, 10, 11, 12, 13]
    stats = train_epoch(trainer.model, trainer.net.centroids, trainer.optimizer,
                        [Batch(x[:n], x[:n]) for n in sizes * 4], phase="warmup", t=1.0, t2=1.0, m=1.05, gamma=1.0,
                        graphs=graphs)
    assert graphs.captures == graphs_mod.MAX_GRAPHS
    assert stats.rows == 4 * sum(sizes)


class _Refuses:
    """A recorder whose capture fails, as a CUDA capture does on an op it cannot record."""

    def warm(self, fn):
        return fn()

    def capture(self, fn):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_failed_capture_warns_once_and_training_goes_on_eagerly():
    x = torch.randn(ROWS, 5, generator=torch.Generator().manual_seed(1))
    reference, _ = _trainer(distill_epochs=0)
    trainer, _ = _trainer(distill_epochs=0)
    trainer.graphs = StepGraphs("cpu", _Refuses())
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    with pytest.warns(RuntimeWarning, match="capture of the training step failed.*stream is capturing"):
        for _ in range(3):
            trainer.run_epoch(shuffled_batches(x, x, None, BATCH, gen_b))
    for _ in range(3):
        reference.run_epoch(shuffled_batches(x, x, None, BATCH, gen_a))
    assert trainer.graphs.failed.startswith("RuntimeError") and trainer.graphs.captures == 0
    for name, p in reference.net.state_dict().items():
        assert torch.equal(p, trainer.net.state_dict()[name]), name


def test_graphs_are_on_by_default_and_can_be_switched_off(monkeypatch):
    monkeypatch.delenv(CUDA_GRAPHS, raising=False)
    assert cuda_graphs_enabled()
    for off in ("0", "false", "OFF"):
        monkeypatch.setenv(CUDA_GRAPHS, off)
        assert not cuda_graphs_enabled()
    monkeypatch.setenv(CUDA_GRAPHS, "1")
    assert cuda_graphs_enabled()
    trainer, _ = _trainer()
    assert trainer.graphs is None   # a CPU trainer captures nothing, switched on or not

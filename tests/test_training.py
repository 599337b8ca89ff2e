"""The between-epoch state every driver shares: a checkpoint resumes training exactly."""
import copy

import torch

from neurcam_dist.model.loop import Targets
from neurcam_dist.model.step import Batch
from neurcam_dist.model.network import NeurCAMNet
from neurcam_dist.model.schedule import Schedule
from neurcam_dist.model.trainer import Trainer


def _setup(x):
    net = NeurCAMNet(4, 3, 4, 2, (16,), 4, x[:3].clone(), seed=0)
    sched = Schedule(epochs=40, warmup_epochs=4, distill_epochs=2, epsilon=0.5, has_pairs=True)
    return Trainer(net, sched, m=1.05, gamma=1.0, lr=2e-3, lr_patience=2)


def _batch(trainer, x, init_centroids):
    """Rows ``x`` with the KL term's target in the trainer's phase."""
    return Batch(x, x, Targets(init_centroids, 1.05).of(trainer, x, x))


def _epochs(trainer, x, gen, n, init_centroids):
    actions = []
    for _ in range(n):
        perm = torch.randperm(len(x), generator=gen)
        batches = (_batch(trainer, x[perm[i:i + 16]], init_centroids) for i in range(0, len(x), 16))
        stats = trainer.run_epoch(batches)
        actions.append(trainer.end_epoch(stats.means(), 0.0)[1])
    return actions


def test_resume_from_state_dict_continues_identically():
    x = torch.randn(96, 4, generator=torch.Generator().manual_seed(1))
    init = x[:3].clone()
    a = _setup(x)
    gen = torch.Generator().manual_seed(0)
    first = _epochs(a, x, gen, 7, init)
    assert "freeze_teacher" in first
    state = copy.deepcopy(a.state_dict())
    gen_state = gen.get_state()
    rest = _epochs(a, x, gen, 8, init)

    b = _setup(torch.zeros_like(x))  # fresh objects, other initial weights
    b.load_state_dict(state)
    gen_b = torch.Generator()
    gen_b.set_state(gen_state)
    assert _epochs(b, x, gen_b, 8, init) == rest
    assert b.schedule.state_dict() == a.schedule.state_dict()
    for (name, pa), pb in zip(a.net.state_dict().items(), b.net.state_dict().values(), strict=False):
        assert torch.equal(pa, pb), name
    assert a.optimizer.param_groups[0]["lr"] == b.optimizer.param_groups[0]["lr"]


def test_max_seconds_lowers_the_budget_to_what_fits_and_ends_with_locked_gates():
    x = torch.randn(96, 4, generator=torch.Generator().manual_seed(1))
    net = NeurCAMNet(4, 3, 4, 0, (16,), 4, x[:3].clone(), seed=0)
    sched = Schedule(epochs=1000, warmup_epochs=400, distill_epochs=0, epsilon=0.9, has_pairs=False,
                     early_stopping=False)
    trainer = Trainer(net, sched, m=1.05, gamma=1.0, lr=2e-3, lr_patience=2, max_seconds=30.0)
    sched.seconds = 4.0  # spent before training (k-means)
    n = 0
    while not trainer.finished:
        stats = trainer.run_epoch([_batch(trainer, x, x[:3])])
        trainer.end_epoch(stats.means(), 1.0)  # every epoch "takes" one second
        n += 1
        assert n < 100
    # 30 s - 4 s spent - one epoch kept for the work after training: 25 epochs of one second
    assert n == 25 and sched.seconds == 4.0 + n
    assert sched.stop_reason == "reached max_seconds=30 at epoch 25"
    assert net.single.gates.is_locked

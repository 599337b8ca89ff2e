"""What a training driver keeps between epochs: optimiser, learning-rate plateau, schedule, teacher.

Every driver (the in-memory estimator and each data-parallel Ray worker) runs the same loop
(``model.loop``): ``run_epoch`` over its feed's batches, the epoch sums reduced over its group,
then ``end_epoch`` with the reduced means. The state round-trips through ``state_dict`` so a
checkpoint restores phase, temperatures, locked gates, optimiser and scheduler exactly.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable

import torch

from .graphs import StepGraphs
from .loop import ALONE, Group
from .step import Batch, EpochStats, train_epoch
from .network import NeurCAMNet
from .schedule import Action, Schedule


def make_optimizer(params, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam. On a GPU its step counters stay on the device (``capturable``): CPU Adam reads its
    counter with ``.item()``, which on CUDA would be a host sync in every step. The learning rate
    is a device tensor there too, so a captured step follows the plateau's halvings."""
    on_gpu = torch.device(device).type == "cuda"
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device) if on_gpu else lr, capturable=on_gpu)


def make_plateau(opt: torch.optim.Optimizer, patience: int):
    """Halve the learning rate after ``patience`` epochs without improvement of the epoch loss."""
    return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=patience)


class Trainer:
    """What a training driver keeps between epochs: optimizer, learning-rate plateau,
    schedule, teacher (see the module docstring)."""
    def __init__(self, net: NeurCAMNet, schedule: Schedule, *, m: float, gamma: float, lr: float,
                 lr_patience: int, precision: str = "fp32", group: Group = ALONE,
                 cuda_graphs: bool = True, graphs: StepGraphs | None = None, max_seconds: float | None = None,
                 distill_weight: torch.Tensor | None = None):
        self.net = net
        # The processes training together: their all-reduce takes the schedule's decisions alike on
        # every worker, and ``group.wrap`` gives the module the steps run (a DDP wrapper, when
        # data-parallel), wrapped again whenever the set of trained parameters changes.
        self.group = group
        self.model = group.wrap(net)
        self.schedule = schedule
        self.m, self.gamma, self.lr_patience, self.precision = m, gamma, lr_patience, precision
        device = net.centroids.device
        self.optimizer = make_optimizer(net.parameters(), lr, device)
        # Captured steps on CUDA unless ``cuda_graphs`` is off; a caller may hand in its own (tests).
        self.graphs = graphs if graphs is not None else (
            StepGraphs(device) if cuda_graphs and device.type == "cuda" else None)
        self.plateau = make_plateau(self.optimizer, lr_patience)
        self.teacher: NeurCAMNet | None = None
        self.max_seconds = max_seconds
        self._recent: list[float] = []  # the last epochs' seconds (the time budget's rate)
        # (K,) the distillation KL's weight per k-means cluster (``loss.balanced_weights``)
        self.distill_weight = None if distill_weight is None else distill_weight.to(device)

    @property
    def finished(self) -> bool:
        """True once the schedule has ended (every gate one-hot)."""
        return self.schedule.finished

    def run_epoch(self, batches: Iterable[Batch]) -> EpochStats:
        """One epoch of optimizer steps over ``batches`` (each with its KL target when the phase
        has a KL term); returns the epoch's loss sums."""
        s = self.schedule
        graphs = self.graphs if self.model is self.net else None  # DDP's all-reduce stays eager
        return train_epoch(self.model, self.net.centroids, self.optimizer, batches, phase=s.phase, t=s.t, t2=s.t2,
                           m=self.m, gamma=self.gamma, precision=self.precision, graphs=graphs,
                           distill_weight=self.distill_weight)

    def end_epoch(self, means: dict, seconds: float, watched: dict | None = None) -> tuple[dict, Action | None]:
        """Advance the schedule with the (globally reduced) epoch means, or, when epochs are parts
        of a pass, the ``watched`` sample's (``loop.Watch``): the loss the learning rate's and the
        schedule's plateaus judge. Returns the history record and the first action taken
        (``Action``, or None)."""
        s = self.schedule
        phase = s.phase
        record = {"epoch": s.epoch + 1, "phase": phase.value, "loss": means["loss"], "clust_loss": means["clust_loss"],
                  "kl": means["kl"], "T": s.t, "T2": s.t2, "lr": float(self.optimizer.param_groups[0]["lr"]),
                  "seconds": seconds}
        judged = means["loss"] if watched is None else watched["loss"]
        if watched is not None:
            record["watched_loss"] = watched["loss"]
        self.plateau.step(judged)
        self._spend(seconds)
        hot_at = (self.net.pairs.gates.one_hot_temperature, self.net.single.gates.one_hot_temperature)
        agree = self.group.agree
        action = s.end_epoch(judged, lambda t: agree(self.net.pairs.gates.one_hot_at(t)),
                             lambda t: agree(self.net.single.gates.one_hot_at(t)), *hot_at)
        # a budget shorter than the phases ends here all the same, with its gates locked
        actions = ([action] if action else []) + s.lock_remaining(*hot_at)
        for a in actions:
            if a == Action.FREEZE_TEACHER:
                self.teacher = _frozen(self.net)
            elif a == Action.LOCK_PAIRS:
                self.net.pairs.gates.lock()
            elif a == Action.LOCK_SINGLE:
                self.net.single.gates.lock()
        if any(a.locks for a in actions):
            self.model = self.group.wrap(self.net)   # DDP fixes its parameters when it is built
        if s.phase != phase:
            self.plateau = make_plateau(self.optimizer, self.lr_patience)  # the loss changes meaning
        return record, (actions[0] if actions else None)

    def _spend(self, seconds: float) -> None:
        """Count an epoch's ``seconds`` (the slowest worker's, when data-parallel) and, under
        ``max_seconds``, lower the epoch budget to what fits in the time left, keeping one epoch's
        time for the work after training (labels, saving)."""
        s = self.schedule
        s.seconds += seconds
        if self.max_seconds is None:
            return
        self._recent = (self._recent + [seconds])[-5:]
        per_epoch = max(sum(self._recent) / len(self._recent), 1e-6)
        left = self.max_seconds - s.seconds - per_epoch
        s.cap(s.epoch + 1 + int(max(left, 0.0) // per_epoch), f"max_seconds={self.max_seconds:g}")

    def state_dict(self) -> dict:
        """Network, optimizer, plateau, schedule and teacher: a checkpoint."""
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict(),
                "plateau": self.plateau.state_dict(), "schedule": self.schedule.state_dict(),
                "teacher": None if self.teacher is None else self.teacher.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a checkpoint exactly (phase, temperatures, locked gates, optimizer moments)."""
        if self.graphs is not None:
            self.graphs.reset()
        self.net.load_state_dict(state["net"])
        self.schedule = Schedule.from_state_dict(state["schedule"])
        for kind in (self.net.single, self.net.pairs):
            if kind.gates.is_locked:
                kind.gates.logits.requires_grad_(False)
        self.optimizer.load_state_dict(state["optimizer"])
        device = self.net.centroids.device
        for g in self.optimizer.param_groups:  # a float on the CPU, a device tensor on a GPU (see __init__)
            lr = float(g["lr"])
            g["lr"] = torch.tensor(lr, device=device) if device.type == "cuda" else lr
        self.plateau = make_plateau(self.optimizer, self.lr_patience)
        self.plateau.load_state_dict(state["plateau"])
        if state.get("teacher") is not None:
            self.teacher = _frozen(self.net)
            self.teacher.load_state_dict(state["teacher"])
        self.model = self.group.wrap(self.net)   # the restored gates may be locked


def _frozen(net: NeurCAMNet) -> NeurCAMNet:
    """A copy of ``net`` in eval mode without gradients (the teacher)."""
    teacher = copy.deepcopy(net).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher

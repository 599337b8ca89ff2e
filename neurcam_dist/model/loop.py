"""The epoch loop: the one place epochs run, for the in-memory estimator and every Ray Train worker.

A driver builds its ``Trainer`` (``model.build_trainer``), then hands ``run`` three things:

- a **feed**: where the batches come from, a pass over the rows at a time. ``Rows`` holds
  tensors on the device and reshuffles them every pass (the estimator; a worker's shard once it is
  resident); a worker whose shard streams has its own (``distributed.worker.ShardFeed``). A feed
  gives each batch the KL term's target of the phase it is trained in (``Targets``). ``Stream``
  cuts the passes into epochs: a whole pass each, or, on a table of more than ``epoch_rows`` rows,
  a fixed number of steps that may end mid-pass (and it says where a checkpoint stands in the
  stream, and seeks there on a resume).
- a **group**: how the epoch's sums, the gates' one-hot test and the time budget's clock are
  agreed on. ``ALONE`` in one process; a Ray worker's group all-reduces them and wraps the network
  in DDP (``Group.wrap``, which the trainer calls again after a gate lock).
- ``after_epoch(record, action)``: what the driver does between epochs (a progress bar and a
  callback; a progress line and a checkpoint).

A model trained without the schedule (the autoencoder of a ``dae`` representation) runs its
epochs through ``plain_epochs``, over the same group.

Every epoch is then the same: the trainer's steps over the stream's batches, the sums reduced
across the group, ``Trainer.end_epoch`` with the means, one history record. When epochs are parts
of a pass, the loss the schedule's plateaus watch is a fixed sample's (``Watch``), reduced over
the group: the epochs' own rows differ from epoch to epoch, and their loss moves by more than the
plateaus' tolerance for that alone.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from ..errors import TrainingError
from .fitted import log_assignment
from .loss import fcm_log_membership, squared_distances
from .schedule import Action, Phase
from .step import Batch, EpochStats, batch_indices, batch_loss, kl_weight_for


class Group(Protocol):
    """The processes training one model together (see ``Alone`` for the one-process case)."""

    rank: int
    world: int
    distributed: bool

    def agree(self, flag: bool) -> bool:
        """True only when every process says True (the gates' one-hot test)."""

    def slowest(self, seconds: float) -> float:
        """The largest of the processes' ``seconds`` (the time budget's clock)."""

    def reduce(self, sums: torch.Tensor) -> torch.Tensor:
        """The sum of the processes' epoch ``sums``."""

    def wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        """The module the steps run (``net``, or a DDP wrapper of it)."""

    def joined(self, model: torch.nn.Module):
        """A context for an epoch in which processes may have unequal numbers of batches."""


class Alone:
    """One process: every reduction is the identity, the network is stepped as it is."""

    rank, world, distributed = 0, 1, False

    def agree(self, flag: bool) -> bool:
        """``flag``: nobody else to ask."""
        return bool(flag)

    def slowest(self, seconds: float) -> float:
        """``seconds``: this process is the slowest."""
        return seconds

    def reduce(self, sums: torch.Tensor) -> torch.Tensor:
        """``sums``: the only ones."""
        return sums

    def wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        """``net`` itself: nothing to synchronise."""
        return net

    def joined(self, model: torch.nn.Module):
        """No context: every batch is this process's."""
        return contextlib.nullcontext()


ALONE = Alone()


def plain_epochs(model: torch.nn.Module, epoch_sums: Callable[[torch.nn.Module, int], torch.Tensor], group: Group,
                 epochs: int, after_epoch: Callable[[int, float], bool]) -> int:
    """The epochs of a model trained without Algorithm 1's schedule (the denoising autoencoder of
    ``representation: {kind: dae}``), over a group as the clustering's: ``model`` wrapped by the
    group (DDP on Ray); each epoch's ``(loss sum, rows)`` from ``epoch_sums(wrapped, epoch)``, in
    the group's join context (shards may end after unequal numbers of batches), reduced over the
    group; ``after_epoch(epoch, mean loss)`` says whether to stop. Returns the epochs run."""
    wrapped = group.wrap(model)
    for epoch in range(1, epochs + 1):
        with group.joined(wrapped):
            sums = epoch_sums(wrapped, epoch)
        sums = group.reduce(sums.detach().to(torch.float64))   # the group moves it where its collective runs
        if after_epoch(epoch, float(sums[0] / max(float(sums[1]), 1.0))):
            return epoch
    return epochs


class Targets:
    """What the KL term aims at, per row: the fuzzy k-means assignment to the initial centroids
    while distilling (``init='distill'``), the frozen warm-up model's assignment once annealing
    began, nothing in warm-up."""

    def __init__(self, centroids: torch.Tensor, m: float):
        self.centroids, self.m = centroids.detach().clone(), m

    @staticmethod
    def kind(trainer) -> str | None:
        """``"kmeans"`` while distilling, ``"teacher"`` in every annealing phase, None without a KL term."""
        phase = trainer.schedule.phase
        return "kmeans" if phase == Phase.DISTILL else "teacher" if phase.annealing else None

    def of(self, trainer, x: torch.Tensor, xr: torch.Tensor) -> torch.Tensor | None:
        """The targets of rows (x, xr) in the trainer's phase."""
        kind = self.kind(trainer)
        if kind == "kmeans":
            with torch.no_grad():
                return fcm_log_membership(squared_distances(xr, self.centroids.to(xr.device)), self.m)
        return None if kind is None else log_assignment(trainer.teacher, x, 1.0, 1.0)


class Rows:
    """Rows held as tensors on one device, reshuffled every pass by ``gen``. Their KL targets are
    computed once per kind (distillation's, then the teacher's when warm-up ends) and travel with
    their rows, so the KL term costs no second forward pass."""

    def __init__(self, x: torch.Tensor, xr: torch.Tensor, batch_size: int, gen: torch.Generator,
                 targets: Targets, source: str = "memory"):
        self.x, self.xr, self.batch_size, self.gen, self.aims = x, xr, batch_size, gen, targets
        self.source = source   # the records' name for where the rows are (a worker's: resident)
        self.kind: str | None = None
        self.targets: torch.Tensor | None = None
        self.pass_state: torch.Tensor | None = None   # ``gen``'s state where the current pass began

    def current_targets(self, trainer) -> torch.Tensor | None:
        """The rows' targets in the trainer's phase (computed when the kind changed, else kept)."""
        kind = self.aims.kind(trainer)
        if kind != self.kind:
            self.kind, self.targets = kind, self.aims.of(trainer, self.x, self.xr)
        return self.targets

    def pass_batches(self, trainer, index: int, skip: int = 0) -> Iterator[Batch]:
        """One pass over the rows, reshuffled by ``gen`` (``index`` is ``gen``'s business: each
        pass draws the next permutation), after its first ``skip`` batches; each batch with its
        targets in the phase it is trained in (a pass may span a phase change)."""
        self.pass_state = self.gen.get_state()
        for j, idx in enumerate(batch_indices(self.x.shape[0], self.batch_size, self.gen, self.x.device)):
            if j < skip:
                continue
            targets = self.current_targets(trainer)
            yield Batch(self.x[idx], self.xr[idx], None if targets is None else targets[idx])
        self.pass_state = self.gen.get_state()   # the pass is over: where the next one begins

    def position(self) -> dict:
        """Where the pass under way began (``gen``'s state then), or, between passes, where the
        next one begins."""
        return {} if self.pass_state is None else {"gen": self.pass_state}

    def seek(self, position: dict) -> None:
        """Draw the permutation of the pass ``position`` was taken in next."""
        if position.get("gen") is not None:
            self.gen.set_state(position["gen"].cpu())   # a checkpoint may be loaded onto the device

    def counted(self) -> dict:
        """What this feed adds to an epoch's record: nothing beyond its source."""
        return {}


class Stream:
    """A feed's passes as one stream of batches, cut into epochs: a whole pass each (``steps``
    None), or ``steps`` batches each, which may end mid-pass and go on into the next pass. Its
    ``position`` (the pass, the batches of it done, and what the feed needs to draw that pass
    again) goes into checkpoints; ``seek`` resumes there, on the same stream of batches when the
    feed's passes are drawn from seeds."""

    def __init__(self, feed, steps: int | None, index: int = 0):
        self.feed, self.steps = feed, steps
        self.index, self.done = index, 0   # the pass under way (or next) and its batches trained on
        self._batches: Iterator[Batch] | None = None
        self._skip = 0

    @property
    def source(self) -> str:
        """Where the rows come from (the feed's name for it)."""
        return self.feed.source

    def counted(self) -> dict:
        """What the feed adds to an epoch's record."""
        return self.feed.counted()

    def batches(self, trainer) -> Iterator[Batch]:
        """One epoch's batches: the next pass whole, or the next ``steps`` of the stream."""
        if self.steps is None:
            yield from self.feed.pass_batches(trainer, self.index)
            self.index += 1
            return
        left, empty = self.steps, 0
        while left > 0:
            if self._batches is None:
                self._batches = self.feed.pass_batches(trainer, self.index, self._skip)
                self.done, self._skip = self._skip, 0
            batch = next(self._batches, None)
            if batch is None:   # the pass ended: on into the next one
                self._batches, empty = None, empty + (self.done == 0)
                if empty > 1:
                    raise TrainingError("the feed gave a whole pass without a batch: this worker's shard holds no rows")
                self.index, self.done = self.index + 1, 0
                continue
            self.done += 1
            left -= 1
            yield batch

    def position(self) -> dict:
        """Where the stream stands between epochs: the pass, its batches done, the feed's own."""
        return {"pass": self.index, "done": self.done, **self.feed.position()}

    def seek(self, position: dict) -> None:
        """Continue the stream where ``position`` (a checkpoint's) stood: the same pass, drawn again,
        after the batches already trained on."""
        self.index, self._skip, self._batches = int(position.get("pass", 0)), int(position.get("done", 0)), None
        self.feed.seek(position)


# The fixed sample whose loss the plateaus watch when epochs are parts of a pass (0: they watch the
# epochs' own loss; benchmarks/epochs.py compares the two)
WATCH_ROWS = 8192


def watched_indices(n_rows: int, steps: int | None, seed: int) -> torch.Tensor | None:
    """Which of ``n_rows`` rows a ``Watch`` holds (``WATCH_ROWS`` of them, in order), drawn from
    ``seed`` apart from the shuffling; None when epochs are whole passes (``steps`` None) or
    ``WATCH_ROWS`` is 0. The estimator draws from its rows, a Ray driver from its k-means sample."""
    if steps is None or WATCH_ROWS <= 0:
        return None
    return torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed))[:WATCH_ROWS].sort().values


class Watch:
    """The loss of fixed rows, which the plateaus watch when an epoch is part of a pass (``Stream``
    with ``steps``): the training objective of the phase (the KL term toward its targets
    included) under the network as the epoch left it, in batches without gradients, summed and
    reduced over the group like an epoch's loss."""

    def __init__(self, x: torch.Tensor, xr: torch.Tensor, targets: Targets, batch_size: int = 4096):
        self.x, self.xr, self.aims, self.batch_size = x, xr, targets, batch_size
        self.kind: str | None = None
        self.targets: torch.Tensor | None = None

    def loss(self, trainer, group: Group) -> dict:
        """The watched rows' loss, clustering loss and KL (per-row means over every process's rows)."""
        kind = self.aims.kind(trainer)
        if kind != self.kind:
            self.kind, self.targets = kind, self.aims.of(trainer, self.x, self.xr)
        s, stats = trainer.schedule, EpochStats()
        weight = kl_weight_for(s.phase, trainer.gamma)
        cw = trainer.distill_weight if s.phase == Phase.DISTILL else None
        net = trainer.net
        was_training = net.training
        net.eval()
        with torch.no_grad():
            for i in range(0, self.x.shape[0], self.batch_size):
                part = slice(i, i + self.batch_size)
                batch = Batch(self.x[part], self.xr[part], None if self.targets is None else self.targets[part])
                loss, clust, kl = batch_loss(net, net.centroids, batch, s.t, s.t2, trainer.m, weight,
                                             trainer.precision, cw)
                stats.add(loss, clust, kl, batch.x.shape[0])
        net.train(was_training)
        return EpochStats.means_of(group.reduce(stats.sums()))


def epoch(trainer, stream: Stream, group: Group = ALONE, watch: Watch | None = None) -> tuple[dict, Action | None]:
    """One epoch: the trainer's steps over ``stream``'s next epoch of batches, the sums reduced
    over ``group``, the schedule advanced on them (or on ``watch``'s loss). Returns the history
    record and the schedule's action."""
    t0 = time.perf_counter()
    source = stream.source   # where the epoch's rows came from as it began (the first pass fills the device)
    with group.joined(trainer.model):
        stats = trainer.run_epoch(stream.batches(trainer))
    means = EpochStats.means_of(group.reduce(stats.sums()))
    watched = watch.loss(trainer, group) if watch is not None else None
    seconds = group.slowest(time.perf_counter() - t0)
    record, action = trainer.end_epoch(means, seconds, watched=watched)
    record.update(rows=means["rows"], rows_per_s=means["rows"] / max(seconds, 1e-9), source=source,
                  **stream.counted())
    return record, action


def run(trainer, stream: Stream, group: Group = ALONE, *, after_epoch: Callable[[dict, Action | None], None] | None = None,
        max_epochs: int | None = None, watch: Watch | None = None) -> list[dict]:
    """Epochs until the schedule finishes (or ``max_epochs`` of them, benchmarks only); returns
    this run's history records."""
    records: list[dict] = []
    while not trainer.finished and (max_epochs is None or len(records) < max_epochs):
        record, action = epoch(trainer, stream, group, watch)
        records.append(record)
        if after_epoch is not None:
            after_epoch(record, action)
    return records


def steps_only(trainer, feed, epochs: int) -> None:
    """``epochs`` passes of optimiser steps that leave the schedule where it is: the k-means
    init's trial distillations (``model.initial``), which stay in their first phase."""
    stream = Stream(feed, None)
    for _ in range(epochs):
        trainer.run_epoch(stream.batches(trainer))

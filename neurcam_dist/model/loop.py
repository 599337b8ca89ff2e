"""The epoch loop: the one place epochs run, for the in-memory estimator and every Ray Train worker.

A driver builds its ``Trainer`` (``model.build_trainer``), then hands ``run`` three things:

- a **feed**: where one epoch's batches come from. ``Rows`` holds tensors on the device and
  reshuffles them every epoch (the estimator; a worker's shard once it is resident); a worker whose
  shard streams has its own (``distributed.worker.ShardFeed``). A feed gives each batch the KL
  term's target when the phase has one (``Targets``).
- a **group**: how the epoch's sums, the gates' one-hot test and the time budget's clock are
  agreed on. ``ALONE`` in one process; a Ray worker's group all-reduces them and wraps the network
  in DDP (``Group.wrap``, which the trainer calls again after a gate lock).
- ``after_epoch(record, action)``: what the driver does between epochs (a progress bar and a
  callback; a progress line and a checkpoint).

Every epoch is then the same: the trainer's steps over the feed's batches, the sums reduced
across the group, ``Trainer.end_epoch`` with the means, one history record.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from .fitted import log_assignment
from .loss import fcm_log_membership, squared_distances
from .schedule import Action, Phase
from .step import Batch, EpochStats, shuffled_batches


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
    """Rows held as tensors on one device, reshuffled every epoch by ``gen``. Their KL targets are
    computed once per kind (distillation's, then the teacher's when warm-up ends) and travel with
    their rows, so the KL term costs no second forward pass."""

    def __init__(self, x: torch.Tensor, xr: torch.Tensor, batch_size: int, gen: torch.Generator,
                 targets: Targets, source: str = "memory"):
        self.x, self.xr, self.batch_size, self.gen, self.aims = x, xr, batch_size, gen, targets
        self.source = source   # the records' name for where the rows are (a worker's: resident)
        self.kind: str | None = None
        self.targets: torch.Tensor | None = None

    def current_targets(self, trainer) -> torch.Tensor | None:
        """The rows' targets in the trainer's phase (computed when the kind changed, else kept)."""
        kind = self.aims.kind(trainer)
        if kind != self.kind:
            self.kind, self.targets = kind, self.aims.of(trainer, self.x, self.xr)
        return self.targets

    def batches(self, trainer) -> Iterator[Batch]:
        """One epoch of this feed's rows, reshuffled, with their targets in the trainer's phase."""
        return shuffled_batches(self.x, self.xr, self.current_targets(trainer), self.batch_size, self.gen)

    def counted(self) -> dict:
        """What this feed adds to an epoch's record: nothing beyond its source."""
        return {}


def epoch(trainer, feed, group: Group = ALONE) -> tuple[dict, Action | None]:
    """One epoch: the trainer's steps over ``feed``'s batches, the sums reduced over ``group``,
    the schedule advanced. Returns the history record and the schedule's action."""
    t0 = time.perf_counter()
    source = feed.source
    with group.joined(trainer.model):
        stats = trainer.run_epoch(feed.batches(trainer))
    means = EpochStats.means_of(group.reduce(stats.sums()))
    seconds = group.slowest(time.perf_counter() - t0)
    record, action = trainer.end_epoch(means, seconds)
    record.update(rows=means["rows"], rows_per_s=means["rows"] / max(seconds, 1e-9), source=source,
                  **feed.counted())
    return record, action


def run(trainer, feed, group: Group = ALONE, *, after_epoch: Callable[[dict, Action | None], None] | None = None,
        max_epochs: int | None = None) -> list[dict]:
    """Epochs until the schedule finishes (or ``max_epochs`` of them, benchmarks only); returns
    this run's history records."""
    records: list[dict] = []
    while not trainer.finished and (max_epochs is None or len(records) < max_epochs):
        record, action = epoch(trainer, feed, group)
        records.append(record)
        if after_epoch is not None:
            after_epoch(record, action)
    return records


def steps_only(trainer, feed, epochs: int) -> None:
    """``epochs`` epochs of optimiser steps that leave the schedule where it is: the k-means
    init's trial distillations (``model.initial``), which stay in their first phase."""
    for _ in range(epochs):
        trainer.run_epoch(feed.batches(trainer))

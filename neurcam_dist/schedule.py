"""Algorithm 1's schedule as a small, serialisable state machine.

Phases: ``distill`` (optional: KL toward the k-means assignment) -> ``warmup`` (T = T2 = 1) ->
``anneal_pairs`` (T2 *= epsilon each epoch until every pairwise gate is one-hot, then locked) ->
``anneal_single`` (T likewise) -> ``final`` (both locked; train on until ``epochs`` or early stop).
The same decisions must be taken on every data-parallel worker, so the schedule only looks at
globally reduced numbers (the epoch loss) and at the gates, which are replicated.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

PHASES = ("distill", "warmup", "anneal_pairs", "anneal_single", "final")


@dataclass
class Plateau:
    """Best-so-far tracker: ``stale`` counts epochs without a relative improvement above ``tol``."""

    tol: float
    best: float = math.inf
    stale: int = 0

    def update(self, value: float) -> None:
        if value < self.best - self.tol * abs(self.best if math.isfinite(self.best) else value):
            self.best, self.stale = value, 0
        else:
            self.stale += 1


@dataclass
class Schedule:
    epochs: int
    warmup_epochs: int
    distill_epochs: int
    epsilon: float
    has_pairs: bool
    early_stopping: bool = True
    n_iter_no_change: int = 10
    tol: float = 1e-4
    min_temperature: float = 1e-8
    epoch: int = 0
    phase: str = "warmup"
    t: float = 1.0
    t2: float = 1.0
    phase_start: int = 0
    stop_reason: str = ""
    events: list = field(default_factory=list)
    plateau: Plateau = field(default_factory=lambda: Plateau(1e-4))

    def __post_init__(self) -> None:
        if self.epoch == 0 and self.phase == "warmup" and self.distill_epochs > 0:
            self.phase = "distill"
        self.plateau.tol = self.tol

    @property
    def annealing(self) -> bool:
        return self.phase in ("anneal_pairs", "anneal_single", "final")

    @property
    def uses_teacher(self) -> bool:
        """True when the loss carries the KL term (toward k-means in distill, toward w* after warm-up)."""
        return self.phase == "distill" or self.annealing

    def _enter(self, phase: str, reason: str) -> None:
        self.events.append({"epoch": self.epoch, "phase": phase, "reason": reason})
        self.phase, self.phase_start = phase, self.epoch
        self.plateau = Plateau(self.tol)

    def end_epoch(self, loss: float, pairs_one_hot, single_one_hot) -> str | None:
        """Advance after an epoch with (globally reduced) ``loss``. ``*_one_hot(t)`` say whether
        the gates are exactly one-hot at a temperature. Returns the action the driver must take:
        ``'freeze_teacher'`` (warm-up just ended), ``'lock_pairs'``, ``'lock_single'`` or None."""
        self.epoch += 1
        self.plateau.update(loss)
        action = None
        if self.epoch >= self.epochs:
            self.stop_reason = self.stop_reason or f"reached epochs={self.epochs}"
        if self.phase == "distill":
            if self.epoch - self.phase_start >= self.distill_epochs:
                self._enter("warmup", f"distillation done after {self.distill_epochs} epochs")
        elif self.phase == "warmup":
            plateaued = self.early_stopping and self.plateau.stale >= self.n_iter_no_change
            if self.epoch >= self.warmup_epochs or plateaued:
                why = (f"loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
                       if plateaued and self.epoch < self.warmup_epochs else f"warmup_epochs={self.warmup_epochs}")
                self._enter("anneal_pairs" if self.has_pairs else "anneal_single", f"warm-up ended: {why}")
                action = "freeze_teacher"
        elif self.phase == "anneal_pairs":
            if pairs_one_hot(self.t2) or self.t2 <= self.min_temperature:
                self._enter("anneal_single", f"pairwise gates one-hot at T2={self.t2:.3g}")
                action = "lock_pairs"
            else:
                self.t2 = max(self.t2 * self.epsilon, self.min_temperature)
        elif self.phase == "anneal_single":
            if single_one_hot(self.t) or self.t <= self.min_temperature:
                self._enter("final", f"single-feature gates one-hot at T={self.t:.3g}")
                action = "lock_single"
            else:
                self.t = max(self.t * self.epsilon, self.min_temperature)
        elif self.phase == "final":
            if self.early_stopping and self.plateau.stale >= self.n_iter_no_change:
                self.stop_reason = f"early stop: loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
        return action

    @property
    def finished(self) -> bool:
        """Done once the final phase stops, or the epoch budget is spent with every gate locked."""
        return self.phase == "final" and bool(self.stop_reason)

    def state_dict(self) -> dict:
        d = asdict(self)
        return d

    @classmethod
    def from_state_dict(cls, d: dict) -> "Schedule":
        d = dict(d)
        plateau = Plateau(**d.pop("plateau"))
        s = cls(**d)
        s.plateau = plateau
        return s

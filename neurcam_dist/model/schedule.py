"""Algorithm 1's schedule as a small, serialisable state machine.

Phases: ``distill`` (optional, ``distill_epochs`` epochs: KL toward the k-means assignment) ->
``warmup`` (T = T2 = 1, at most ``warmup_epochs`` epochs counted from its own start) ->
``anneal_pairs`` (T2 *= epsilon each epoch until every pairwise gate is one-hot, then locked) ->
``anneal_single`` (T likewise) -> ``final`` (both locked; train on until ``epochs`` or early stop).
The same decisions must be taken on every data-parallel worker, so the schedule only looks at
globally reduced numbers (the epoch loss) and at the gates, which are replicated.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..params import DEFAULTS

PHASES = ("distill", "warmup", "anneal_pairs", "anneal_single", "final")
# annealing phase -> (temperature attribute, its name, which gates, next phase, action once one-hot)
ANNEALING = {"anneal_pairs": ("t2", "T2", "pairwise", "anneal_single", "lock_pairs"),
             "anneal_single": ("t", "T", "single-feature", "final", "lock_single")}


@dataclass
class Plateau:
    """Best-so-far tracker: ``stale`` counts epochs without a relative improvement above ``tol``."""

    tol: float
    best: float = math.inf
    stale: int = 0

    def update(self, value: float) -> None:
        """Count an epoch without relative improvement by ``tol`` (or reset on one)."""
        if value < self.best - self.tol * abs(self.best if math.isfinite(self.best) else value):
            self.best, self.stale = value, 0
        else:
            self.stale += 1


@dataclass
class Schedule:
    """``epochs`` bounds the whole run (every phase); ``warmup_epochs`` bounds the warm-up alone,
    which starts after distillation. Annealing always runs until the gates are one-hot."""

    epochs: int
    warmup_epochs: int
    distill_epochs: int
    epsilon: float
    has_pairs: bool
    early_stopping: bool = True
    n_iter_no_change: int = DEFAULTS["n_iter_no_change"]
    tol: float = DEFAULTS["tol"]
    min_temperature: float = 1e-8
    epoch: int = 0
    phase: str = "warmup"
    t: float = 1.0
    t2: float = 1.0
    phase_start: int = 0
    stop_reason: str = ""
    events: list = field(default_factory=list)
    plateau: Plateau = field(default_factory=lambda: Plateau(DEFAULTS["tol"]))

    def __post_init__(self) -> None:
        if self.epoch == 0 and self.phase == "warmup" and self.distill_epochs > 0:
            self.phase = "distill"
        self.plateau.tol = self.tol

    @property
    def annealing(self) -> bool:
        """True once annealing began (the teacher's assignment is the KL target)."""
        return self.phase in ("anneal_pairs", "anneal_single", "final")

    @property
    def _first_anneal(self) -> str:
        return "anneal_pairs" if self.has_pairs else "anneal_single"

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
        spent = self.epoch >= self.epochs  # the budget ends distillation and warm-up, not annealing
        if self.phase == "distill":
            if self.epoch - self.phase_start >= self.distill_epochs or spent:
                self._enter("warmup", f"distillation done after {self.epoch - self.phase_start} epochs"
                            + (f" (epochs={self.epochs} reached)" if spent else ""))
                if self.warmup_epochs == 0 or spent:  # no warm-up: the distilled model is the teacher
                    self._enter(self._first_anneal, "warm-up ended: " + (f"epochs={self.epochs} reached" if spent
                                                                         else "warmup_epochs=0"))
                    action = "freeze_teacher"
        elif self.phase == "warmup":
            plateaued = self.early_stopping and self.plateau.stale >= self.n_iter_no_change
            done = self.epoch - self.phase_start >= self.warmup_epochs
            if done or plateaued or spent:
                why = (f"epochs={self.epochs} reached" if spent and not done else
                       f"loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
                       if plateaued and not done else f"warmup_epochs={self.warmup_epochs}")
                self._enter(self._first_anneal, f"warm-up ended: {why}")
                action = "freeze_teacher"
        elif self.phase in ANNEALING:
            attr, label, gates, after, lock = ANNEALING[self.phase]
            temperature = getattr(self, attr)
            one_hot = pairs_one_hot if self.phase == "anneal_pairs" else single_one_hot
            if one_hot(temperature) or temperature <= self.min_temperature:
                self._enter(after, f"{gates} gates one-hot at {label}={temperature:.3g}")
                action = lock
            else:
                setattr(self, attr, max(temperature * self.epsilon, self.min_temperature))
        elif self.phase == "final":
            if self.early_stopping and self.plateau.stale >= self.n_iter_no_change:
                self.stop_reason = f"early stop: loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
        return action

    @property
    def finished(self) -> bool:
        """Done once the final phase stops, or the epoch budget is spent with every gate locked."""
        return self.phase == "final" and bool(self.stop_reason)

    def state_dict(self) -> dict:
        """The schedule as plain values (checkpoints)."""
        d = asdict(self)
        return d

    @classmethod
    def from_state_dict(cls, d: dict) -> "Schedule":
        """The schedule ``state_dict`` gave, its plateau counter included."""
        d = dict(d)
        plateau = Plateau(**d.pop("plateau"))
        s = cls(**d)
        s.plateau = plateau
        return s

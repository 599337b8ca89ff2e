"""Algorithm 1's schedule as a small, serialisable state machine.

Phases: ``distill`` (optional, ``distill_epochs`` epochs: KL toward the k-means assignment) ->
``warmup`` (T = T2 = 1, at most ``warmup_epochs`` epochs counted from its own start) ->
``anneal_pairs`` (T2 falls each epoch until every pairwise gate is one-hot, then locked) ->
``anneal_single`` (T likewise) -> ``final`` (both locked; train on until ``epochs`` or early stop).

``epochs`` bounds the whole run, every phase included (``max_seconds``, through ``cap``, may lower
that bound while training). The budget is shared out so that it always ends in a valid GAM: the
warm-up ends early enough to leave each annealing phase its room (``anneal_epochs``, or a fifth of
the budget if less) and the final phase a few epochs. Within its room the temperature falls by
``epsilon`` an epoch, or faster where that would not reach, by the deadline, the temperature at
which the gates are one-hot now (their top two logits apart by 2 T: entmax15's one-hot bound),
so annealing is as gradual as its room allows; gates still not one-hot at the deadline are locked
to their argmax (exactly what one-hot gates select) and the event says so. Only a budget below one
epoch per phase is exceeded (by those epochs).
The same decisions must be taken on every data-parallel worker, so the schedule only looks at
globally reduced numbers (the epoch loss, the slowest worker's seconds) and at the gates, which
are replicated.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from ..params import DEFAULTS


class Phase(StrEnum):
    """Algorithm 1's phases, in order (a ``StrEnum``: records and checkpoints hold the plain names)."""

    DISTILL = "distill"
    WARMUP = "warmup"
    ANNEAL_PAIRS = "anneal_pairs"
    ANNEAL_SINGLE = "anneal_single"
    FINAL = "final"

    @property
    def annealing(self) -> bool:
        """True from the first annealing phase on: the frozen warm-up model is the KL's target."""
        return self in (Phase.ANNEAL_PAIRS, Phase.ANNEAL_SINGLE, Phase.FINAL)


class Action(StrEnum):
    """What the trainer does when ``Schedule.end_epoch`` moves on."""

    FREEZE_TEACHER = "freeze_teacher"   # warm-up ended: freeze the model as the KL's target
    LOCK_PAIRS = "lock_pairs"           # the pairwise gates are one-hot: lock them
    LOCK_SINGLE = "lock_single"         # the single-feature gates likewise

    @property
    def locks(self) -> bool:
        """True for a gate lock (the set of trained parameters changes)."""
        return self is not Action.FREEZE_TEACHER


# annealing phase -> (temperature attribute, its name, which gates, next phase, action once one-hot)
ANNEALING = {Phase.ANNEAL_PAIRS: ("t2", "T2", "pairwise", Phase.ANNEAL_SINGLE, Action.LOCK_PAIRS),
             Phase.ANNEAL_SINGLE: ("t", "T", "single-feature", Phase.FINAL, Action.LOCK_SINGLE)}


@dataclass
class Plateau:
    """Best-so-far tracker: ``stale`` counts epochs without an improvement above ``tol`` times the
    loss, or times ``scale`` where that is smaller (see ``Schedule.loss_scale``)."""

    tol: float
    best: float = math.inf
    stale: int = 0
    scale: float = 0.0

    def update(self, value: float) -> None:
        """Count an epoch without relative improvement by ``tol`` (or reset on one)."""
        ref = abs(self.best if math.isfinite(self.best) else value)
        if self.scale > 0:
            ref = min(ref, self.scale)
        if value < self.best - self.tol * ref:
            self.best, self.stale = value, 0
        else:
            self.stale += 1


@dataclass
class Schedule:
    """``epochs`` bounds the whole run (every phase); ``warmup_epochs`` bounds the warm-up alone,
    which starts after distillation; ``anneal_epochs`` bounds each annealing phase, which locks its
    gates to their argmax if they are not one-hot by then (see the module docstring)."""

    epochs: int
    warmup_epochs: int
    distill_epochs: int
    epsilon: float
    has_pairs: bool
    early_stopping: bool = True
    n_iter_no_change: int = DEFAULTS["n_iter_no_change"]
    tol: float = DEFAULTS["tol"]
    anneal_epochs: int = DEFAULTS["anneal_epochs"]
    # The part of the loss the clustering explains (the clustering space's variance less the
    # k-means inertia, per row): the warm-up's ``tol`` is relative to it where it is smaller than
    # the loss. On sentence embeddings it is a few percent of the loss, and a tolerance relative to
    # the loss ended the warm-up long before the clusters had formed. 0: relative to the loss. The
    # final phase (gates locked) keeps the tolerance relative to the loss.
    loss_scale: float = 0.0
    min_temperature: float = 1e-8
    epoch: int = 0
    phase: Phase = Phase.WARMUP
    t: float = 1.0
    t2: float = 1.0
    phase_start: int = 0
    stop_reason: str = ""
    events: list = field(default_factory=list)
    plateau: Plateau = field(default_factory=lambda: Plateau(DEFAULTS["tol"]))
    budget: int = 0            # the epoch budget once ``cap`` lowered it below ``epochs`` (0: epochs)
    budget_reason: str = ""    # what set ``budget`` (e.g. "max_seconds=30")
    seconds: float = 0.0       # seconds spent so far (the driver adds each epoch's; ``max_seconds``)

    def __post_init__(self) -> None:
        self.phase = Phase(self.phase)   # a checkpoint holds the plain name
        if self.epoch == 0 and self.phase == Phase.WARMUP and self.distill_epochs > 0:
            self.phase = Phase.DISTILL
        self.plateau.tol, self.plateau.scale = self.tol, self.loss_scale

    @property
    def annealing(self) -> bool:
        """True once annealing began (the teacher's assignment is the KL target)."""
        return self.phase.annealing

    @property
    def _first_anneal(self) -> Phase:
        return Phase.ANNEAL_PAIRS if self.has_pairs else Phase.ANNEAL_SINGLE

    @property
    def uses_teacher(self) -> bool:
        """True when the loss carries the KL term (toward k-means in distill, toward w* after warm-up)."""
        return self.phase == Phase.DISTILL or self.annealing

    @property
    def limit(self) -> int:
        """The epoch budget in force: ``epochs``, or the lower bound ``cap`` set."""
        return min(self.epochs, self.budget) if self.budget else self.epochs

    @property
    def _limit_text(self) -> str:
        return self.budget_reason if self.budget and self.budget < self.epochs else f"epochs={self.epochs}"

    def cap(self, epochs: int, reason: str) -> None:
        """Lower the epoch budget to ``epochs`` (never below the epoch under way), e.g. to what fits
        in ``max_seconds``; later phases are compressed to fit it."""
        epochs = max(int(epochs), self.epoch + 1)
        if epochs < self.limit:
            self.budget, self.budget_reason = epochs, reason

    @property
    def _final_reserve(self) -> int:
        """Epochs kept for the final phase (locked gates) out of the budget."""
        return min(self.n_iter_no_change, self.limit // 10)

    @property
    def _anneal_reserve(self) -> int:
        """Epochs kept for each annealing phase out of the budget."""
        return max(1, min(self.anneal_epochs, self.limit // 5))

    @property
    def _warm_deadline(self) -> int:
        """The epoch by which distillation and warm-up end, leaving annealing and final their room."""
        phases = 2 if self.has_pairs else 1
        return max(1, self.limit - self._final_reserve - phases * self._anneal_reserve)

    def _anneal_deadline(self) -> int:
        """The epoch by which the current annealing phase locks its gates."""
        own = self.phase_start + max(1, self.anneal_epochs)
        room = self.limit - self._final_reserve - self.phase_start
        if self.phase == Phase.ANNEAL_PAIRS:
            room = room // 2  # half the room left: the single-feature gates anneal after these
        return min(own, self.phase_start + max(1, room))

    def _enter(self, phase: Phase, reason: str) -> None:
        self.events.append({"epoch": self.epoch, "phase": phase.value, "reason": reason})
        self.phase, self.phase_start = phase, self.epoch
        self.plateau = Plateau(self.tol, scale=self.loss_scale if phase == Phase.WARMUP else 0.0)

    def end_epoch(self, loss: float, pairs_one_hot, single_one_hot,
                  pairs_hot_at=None, single_hot_at=None) -> Action | None:
        """Advance after an epoch with (globally reduced) ``loss``. ``*_one_hot(t)`` say whether
        the gates are exactly one-hot at a temperature; ``*_hot_at(t)`` (optional) give the largest
        temperature up to ``t`` at which they are, which a deadline lock records. Returns the
        action the driver must take:
        ``'freeze_teacher'`` (warm-up just ended), ``'lock_pairs'``, ``'lock_single'`` or None."""
        self.epoch += 1
        self.plateau.update(loss)
        action = None
        if self.epoch >= self.limit:
            self.stop_reason = self.stop_reason or f"reached {self._limit_text}" + (
                f" at epoch {self.epoch}" if self.limit < self.epochs else "")
        spent = self.epoch >= self._warm_deadline  # distillation and warm-up must end to leave annealing room
        budget = self._limit_text
        if self.phase == Phase.DISTILL:
            if self.epoch - self.phase_start >= self.distill_epochs or spent:
                self._enter(Phase.WARMUP, f"distillation done after {self.epoch - self.phase_start} epochs"
                            + (f" (cut to leave annealing room within {budget})" if spent else ""))
                if self.warmup_epochs == 0 or spent:  # no warm-up: the distilled model is the teacher
                    self._enter(self._first_anneal, "warm-up ended: " + (
                        f"cut to leave annealing room within {budget}" if spent else "warmup_epochs=0"))
                    action = Action.FREEZE_TEACHER
        elif self.phase == Phase.WARMUP:
            plateaued = self.early_stopping and self.plateau.stale >= self.n_iter_no_change
            done = self.epoch - self.phase_start >= self.warmup_epochs
            if done or plateaued or spent:
                why = (f"cut to leave annealing room within {budget}" if spent and not done else
                       f"loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
                       if plateaued and not done else f"warmup_epochs={self.warmup_epochs}")
                self._enter(self._first_anneal, f"warm-up ended: {why}")
                action = Action.FREEZE_TEACHER
        elif self.phase in ANNEALING:
            attr, label, gates, after, lock = ANNEALING[self.phase]
            temperature = getattr(self, attr)
            one_hot, hot_at = ((pairs_one_hot, pairs_hot_at) if self.phase == Phase.ANNEAL_PAIRS
                               else (single_one_hot, single_hot_at))
            deadline = self._anneal_deadline()
            if one_hot(temperature):
                self._enter(after, f"{gates} gates one-hot at {label}={temperature:.3g}")
                action = lock
            elif temperature <= self.min_temperature or self.epoch >= deadline:
                cut = (f"{label} reached {self.min_temperature:g}" if temperature <= self.min_temperature
                       else f"anneal_epochs={self.anneal_epochs}" if self.epoch - self.phase_start >= self.anneal_epochs
                       else f"annealing compressed to fit {budget}")
                if hot_at is not None:  # record the temperature at which the relaxed gates equal the lock
                    temperature = hot_at(temperature)
                    setattr(self, attr, temperature)
                self._enter(after, f"{gates} gates locked to their argmax, one-hot at {label}={temperature:.3g} ({cut})")
                action = lock
            else:
                factor = self.epsilon
                if hot_at is not None:  # no slower than epsilon, fast enough to be one-hot by the deadline
                    factor = min(factor, (hot_at(temperature) / temperature) ** (1.0 / (deadline - self.epoch)))
                setattr(self, attr, max(temperature * factor, self.min_temperature))
        elif self.phase == Phase.FINAL:
            if self.early_stopping and self.plateau.stale >= self.n_iter_no_change:
                self.stop_reason = f"early stop: loss improved < tol={self.tol:g} for {self.n_iter_no_change} epochs"
        return action

    def lock_remaining(self, pairs_hot_at=None, single_hot_at=None) -> list[Action]:
        """At the end of the budget with gates still annealing (a budget of fewer epochs than the
        phases, ``epochs=1``): lock them now, pairs then single features, each at the largest
        temperature at which the relaxed gates equal the lock, so the run ends one-hot within its
        budget. Returns the lock actions for the driver (none when the budget is not spent)."""
        actions = []
        while self.phase in ANNEALING and self.epoch >= self.limit:
            attr, label, gates, _, lock = ANNEALING[self.phase]
            hot_at = pairs_hot_at if self.phase == Phase.ANNEAL_PAIRS else single_hot_at
            if hot_at is not None:
                setattr(self, attr, hot_at(getattr(self, attr)))
            self._enter(ANNEALING[self.phase][3], f"{gates} gates locked to their argmax, one-hot at "
                        f"{label}={getattr(self, attr):.3g} (the budget, {self._limit_text}, ended)")
            actions.append(lock)
        return actions

    @property
    def finished(self) -> bool:
        """Done once the final phase stops, or the epoch budget is spent with every gate locked."""
        return self.phase == Phase.FINAL and bool(self.stop_reason)

    def state_dict(self) -> dict:
        """The schedule as plain values (checkpoints load them with ``weights_only``)."""
        return {**asdict(self), "phase": self.phase.value}

    @classmethod
    def from_state_dict(cls, d: dict) -> "Schedule":
        """The schedule ``state_dict`` gave, its plateau counter included."""
        d = dict(d)
        plateau = Plateau(**d.pop("plateau"))
        s = cls(**d)
        s.plateau = plateau
        return s

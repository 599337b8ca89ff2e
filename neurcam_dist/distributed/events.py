"""Progress and notes from Ray workers and trials to the driver's console, as records.

A worker (or a Tune trial's process) does not print lines for the driver to parse back: it sends
``Event`` records to a ``Channel``, a small Ray actor (no CPU) that the driver created and polls.
The console renders each record: a line, or, for an epoch record on a terminal, the trial's
progress bar (``console.routed_logs``).

- driver: ``with listening(render):`` creates the channel for the block; ``current_channel()``
  is the handle that goes into ``WorkerConfig`` and a search's trial job.
- worker or trial: ``attach(channel, trial=...)`` once, then ``say(text)`` / ``emit(Event(...))``.
  A process with no channel attached (the in-memory estimator, a benchmark calling the loop
  directly) prints the same line itself.
"""
from __future__ import annotations

import contextvars
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass

OURS = "[neurcam]"
POLL_SECONDS = 0.25


@dataclass(frozen=True)
class Event:
    """One record: ``text`` (the line, without the ``[neurcam]`` prefix or trial tag), the trial
    it belongs to, and for an epoch record its epoch, phase, loss and rate (what a bar shows)."""

    text: str
    trial: str | None = None
    epoch: int | None = None
    phase: str | None = None
    loss: float | None = None
    rows_per_s: float | None = None

    @property
    def is_epoch(self) -> bool:
        """True for an epoch record (it drives a progress bar)."""
        return self.epoch is not None

    def line(self) -> str:
        """The console line: ``[neurcam] trial ID: text``."""
        return f"{OURS} " + (f"trial {self.trial}: " if self.trial else "") + self.text


class _Mailbox:
    """The actor behind a ``Channel``: records in arrival order until the driver takes them."""

    def __init__(self):
        self.items: list[Event] = []

    def put(self, event: Event) -> None:
        self.items.append(event)

    def take(self) -> list[Event]:
        items, self.items = self.items, []
        return items


class Channel:
    """A handle to the driver's mailbox; picklable, so it travels in a worker's config."""

    def __init__(self, actor):
        self.actor = actor

    def emit(self, event: Event) -> None:
        """Send ``event`` without waiting (calls from one process arrive in order)."""
        self.actor.put.remote(event)


_CURRENT: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("neurcam_channel", default=None)
_ATTACHED: dict = {"channel": None, "trial": None}   # this process's channel, as a worker sees it


def current_channel() -> Channel | None:
    """Where this process's records go: the channel the driver is listening on (``listening``),
    or in a trial's process the one it attached to; None outside both."""
    return _CURRENT.get() or _ATTACHED["channel"]


def beside_driver(cls, **options):
    """A handle to a new actor of ``cls`` that takes no CPU and runs on this process's node: the
    run's bookkeeping (its progress mailbox, the scoring pass's counts) lives and dies with the
    driver. Left to the scheduler, such an actor may land on a worker node, and losing that node
    took the bookkeeping with it and failed a run that Ray itself recovered from."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(num_cpus=0)(cls).options(scheduling_strategy=here, **options).remote()


@contextmanager
def listening(render):
    """Within the block, a channel whose records are handed to ``render(event)`` on a thread of
    this process, in arrival order, and every record left is rendered before the block ends."""
    import ray
    actor = beside_driver(_Mailbox, name=None, max_concurrency=1)
    channel = Channel(actor)
    stop = threading.Event()

    def drain() -> None:
        for event in ray.get(actor.take.remote()):
            render(event)

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            try:
                drain()
            except Exception:  # noqa: BLE001 - Ray shut down under us: the final drain says what it can
                return

    thread = threading.Thread(target=poll, name="neurcam-events", daemon=True)
    token = _CURRENT.set(channel)
    thread.start()
    try:
        yield channel
    finally:
        _CURRENT.reset(token)
        stop.set()
        thread.join()
        try:
            drain()
        except Exception:  # noqa: BLE001 - Ray shut down within the block: nothing left to take
            pass
        else:
            ray.kill(actor)


def attach(channel: Channel | None, trial: str | None = None) -> None:
    """Send this process's records to ``channel`` (None: print them), tagged with ``trial``."""
    _ATTACHED["channel"], _ATTACHED["trial"] = channel, trial


def emit(event: Event) -> None:
    """``event`` to the attached channel, or its line to stdout when none is attached."""
    channel = _ATTACHED["channel"]
    if channel is None:
        # not ``print``: Ray Train v2 replaces it in its workers with one that logs the line and,
        # since Ray wraps the worker's stdout, prints it too (every line reached the console twice)
        sys.stdout.write(event.line() + "\n")
        sys.stdout.flush()
        return
    channel.emit(event)


def say(text: str, **fields) -> None:
    """A ``[neurcam]`` line of the service's, secrets redacted (or, with ``epoch=...``, an epoch
    record), tagged with this process's trial: printed in the driver, or sent to it as a record
    from a worker's or a trial's process."""
    from ..redaction import redact
    emit(Event(redact(text), trial=_ATTACHED["trial"], **fields))

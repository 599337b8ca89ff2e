"""A pause for Ray Data's scheduling loop when a step changed nothing.

Ray Data's streaming executor blocks in ``ray.wait`` on its running tasks, with a timeout. When no
task runs, it has nothing to wait on and polls without pause: about a thousand steps a second,
each reading every operator's resource use and metrics. That state is the normal one of a
training stream: the workers are slower than the reader, so the executor holds the read tasks
back until the workers take the blocks already made. Measured on 2 cores (4M rows, 2 workers):
the ``SplitCoordinator`` took 50-75% of a core doing that, next to 53% for each training worker.

``IdlePause`` is a Ray Data execution callback (``DataContext.custom_execution_callback_classes``).
After a step in which nothing moved (no task started or finished, no block made or taken) and which
did not itself wait, it sleeps 1 ms, doubling to ``MAX_PAUSE_S`` while nothing moves; the first
step that moves something resets it. A consumer that takes a block therefore waits at most
``MAX_PAUSE_S`` longer for the executor to notice, and the stream's blocks, their order and
their contents do not change. It reads the executor's private state (its topology and output
queue, through ``raycompat``); on a Ray whose executor lacks them it switches itself off and says so once.
"""
from __future__ import annotations

import logging
import time

from ..raycompat import ExecutionCallback, executor_operators, operator_signature

log = logging.getLogger(__name__)

MIN_PAUSE_S = 0.001
MAX_PAUSE_S = 0.010


def _signature(executor) -> tuple:
    """What moves when the executor makes progress: per operator, tasks started and finished,
    blocks made and queued for the next operator (or for each consumer of a split)."""
    return tuple(operator_signature(op, state) for op, state in executor_operators(executor))


class IdlePause(ExecutionCallback):
    """A Ray Data execution callback that pauses the scheduling loop after a step that moved
    nothing (see the module docstring)."""
    def __init__(self) -> None:
        self.pause = 0.0
        self.last = None          # the previous step's signature
        self.left_at = None       # when the previous call returned
        self.steps = 0            # scheduling steps seen and pauses taken: for tests and profiling
        self.pauses = 0
        self.off = False

    def on_execution_step(self, executor) -> None:
        """Called by the executor after each scheduling step: sleep briefly when nothing moved."""
        if self.off:
            return
        now = time.perf_counter()
        self.steps += 1
        try:
            sig = _signature(executor)
        except (AttributeError, TypeError) as e:   # another Ray's executor: poll as Ray does
            self.off = True
            log.warning("neurcam: Ray Data's executor has changed (%s); its idle scheduling loop is not paced", e)
            return
        waited = self.left_at is not None and now - self.left_at > MAX_PAUSE_S   # the step blocked in ray.wait
        if sig != self.last or waited:
            self.pause = 0.0
        else:
            self.pause = min(MAX_PAUSE_S, max(MIN_PAUSE_S, 2 * self.pause))
            self.pauses += 1
            time.sleep(self.pause)
        self.last = sig
        self.left_at = time.perf_counter()


def pace(ds):
    """``ds`` with ``IdlePause`` among its execution callbacks (in its own context: the process's
    ``DataContext`` is left alone)."""
    ctx = ds.context
    if IdlePause not in ctx.custom_execution_callback_classes:
        ctx.custom_execution_callback_classes = [*ctx.custom_execution_callback_classes, IdlePause]
    return ds

"""Progress lines for a long Ray Data pass that runs in this process (``neurcam predict`` on large
input): how many rows one operator has turned out, of how many, at what rate.

Ray Data's own progress bars redraw every operator every second, and the service turns them off
(``distributed.session.quiet_data_progress``). ``RowProgress`` is an execution callback
(``DataContext.custom_execution_callback_classes``) that says one line at most every ``every``
seconds from the executor's loop in the driver. Ray builds the callback with no arguments and may
ship the dataset's context to its tasks, so the context carries only a token; what to count and
where to say it stay in this process (``_WATCHED``). It reads the executor's operators (private
state, through ``raycompat``) and their row counts (``rows_task_outputs_generated``); on an executor
without them it says so once and stops.
"""
from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager

from ..raycompat import ExecutionCallback, executor_config, executor_operators, operator_rows

log = logging.getLogger(__name__)

KEY = "neurcam_row_progress"
_WATCHED: dict[str, dict] = {}   # token -> {"op": name part, "total": rows, "say": fn, "every": s, "what": verb}


class RowProgress(ExecutionCallback):
    """A Ray Data execution callback that says how many rows an operator has turned out
    (see the module docstring)."""
    def __init__(self) -> None:
        self.watch = None
        self.t0 = self.last = 0.0
        self.said = -1

    def before_execution_starts(self, executor) -> None:
        """Find what this execution watches (the context's token) and start the clock."""
        try:
            self.watch = _WATCHED.get(executor_config(executor, KEY))
        except AttributeError as e:   # another Ray's executor
            log.warning("neurcam: no progress lines: Ray Data's executor has changed (%s)", e)
        self.t0 = self.last = time.perf_counter()

    def rows(self, executor) -> int | None:
        """Rows the watched operator has turned out so far, or None before it exists."""
        ops = [op for op, _ in executor_operators(executor) if self.watch["op"] in op.name]
        return operator_rows(ops[-1]) if ops else None

    def on_execution_step(self, executor) -> None:
        """Called by the executor after each scheduling step: a progress line at most
        every ``every`` seconds."""
        w = self.watch
        if w is None:
            return
        now = time.perf_counter()
        if now - self.last < w["every"]:
            return
        self.last = now
        try:
            done = self.rows(executor)
        except (AttributeError, TypeError) as e:   # another Ray's executor
            self.watch = None
            log.warning("neurcam: no progress lines: Ray Data's executor has changed (%s)", e)
            return
        if done is None or done == self.said:
            return
        self.said = done
        rate = done / max(now - self.t0, 1e-9)
        left = f", about {(w['total'] - done) / rate:,.0f} s left" if 0 < done < w["total"] else ""
        w["say"](f"{w['what']} {done:,} of {w['total']:,} rows ({100 * done / w['total']:.0f}%), "
                 f"{rate:,.0f} rows/s{left}")


@contextmanager
def watched(ds, op: str, total: int, say, *, every: float = 10.0, what: str = "scored"):
    """Within the block, an execution of ``ds`` says how many rows the (last) operator named with
    ``op`` has turned out, at most every ``every`` seconds; ``say=None``: nothing is said."""
    if say is None:
        yield ds
        return
    token = uuid.uuid4().hex
    _WATCHED[token] = {"op": op, "total": total, "say": say, "every": every, "what": what}
    ctx = ds.context
    ctx.set_config(KEY, token)
    if RowProgress not in ctx.custom_execution_callback_classes:
        ctx.custom_execution_callback_classes = [*ctx.custom_execution_callback_classes, RowProgress]
    try:
        yield ds
    finally:
        _WATCHED.pop(token, None)

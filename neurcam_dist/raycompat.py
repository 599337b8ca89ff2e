"""The one place that touches Ray's private modules and attributes (checked against ``RAY_CHECKED``).

The service uses four things Ray does not offer publicly:

- ``ExecutionCallback``, the base of Ray Data's execution callbacks (``DataContext.
  custom_execution_callback_classes`` is public, the base class is not): ``data.pacing`` and
  ``data.progress`` subclass it;
- the streaming executor's operators, their metrics and output queues (``executor_operators``,
  ``operator_rows``, ``operator_signature``), which pacing and progress read each step;
- the executor's ``DataContext`` (``executor_config``), where progress finds its token;
- the driver's log dispatcher for worker output and the autoscaler-event filter
  (``stdstream_dispatcher``, ``autoscaler_events``), which the console uses to send Ray's lines
  to a file.

Each accessor degrades instead of failing on a Ray whose internals moved: the callback base
becomes ``object`` (Ray then never calls it), the dispatcher ``None`` (worker lines stay on the
console), and executor reads raise ``AttributeError``/``TypeError``, which their callers catch
and report once. ``tests/test_layout.py`` keeps every other module off Ray's private names.
"""
from __future__ import annotations

RAY_CHECKED = "2.60.0"   # the Ray version these accessors were read against

try:
    from ray.data._internal.execution.execution_callback import ExecutionCallback
except ImportError:  # pragma: no cover - another Ray: callbacks are inert
    ExecutionCallback = object


def executor_operators(executor) -> list[tuple[object, object]]:
    """The executor's ``(operator, operator state)`` pairs, upstream first."""
    return list(executor._topology.items())


def executor_config(executor, key: str):
    """A value the dataset's ``DataContext`` carries (``ctx.set_config(key, value)``)."""
    return executor._data_context.get_config(key)


def operator_rows(op) -> int:
    """Rows the operator's tasks have turned out so far."""
    return op.metrics.rows_task_outputs_generated


def operator_signature(op, state) -> tuple:
    """What moves when an operator makes progress: tasks started and finished, blocks made,
    inputs taken, blocks queued for the next operator, and whether it has completed."""
    m = op.metrics
    return (m.num_tasks_submitted, m.num_tasks_finished, m.num_task_outputs_generated, m.num_inputs_received,
            state.output_queue.num_blocks, op.has_completed())


def stdstream_dispatcher():
    """The driver's dispatcher of worker stdout/stderr lines (handlers by name), or None."""
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher
        return global_worker_stdstream_dispatcher
    except ImportError:  # pragma: no cover - another Ray: worker lines stay on the console
        return None


def autoscaler_events(lines: list[str]) -> list[str]:
    """The autoscaler's events among its lines, as Ray's own printer keeps them (the rest is a
    cluster status table every 5 s)."""
    try:
        from ray._private.worker import filter_autoscaler_events
    except ImportError:  # pragma: no cover - another Ray: keep every line
        return lines
    return filter_autoscaler_events(lines)

"""SIGTERM (``kill``, a Kubernetes pod stopping, ``ray job stop``) ends a command cleanly: it raises
``SystemExit`` in the main thread, so open MLflow runs end FAILED and temporary outputs are
removed, and the command exits 128 + 15 = 143, as a scheduler expects of a terminated process.

Ray complicates both halves: ``ray.init`` installs its own handlers (a C-level one that dumps a
stack and aborts, exit 134), so ``distributed.session.ensure_ray`` puts ours back; and a signal
that arrives while the driver waits in ``ray.get`` comes out of Ray as ``SystemExit(1)``, so the
signal is remembered here and the CLI exits with ``terminated()`` whatever code Ray chose.

Python runs a signal handler only between bytecodes of the main thread, so a long call inside a
library (a LAPACK routine, a C reader on a large file) would hold the signal back until it
returns. A watcher thread woken by the signal itself (``signal.set_wakeup_fd``) bounds that: a
command that has not unwound ``UNWIND_S`` seconds after SIGTERM says so and exits 143 at once
(outputs are staged under hidden names, so nothing half-written is left at a final path; a local
Ray it started is cleaned up by the next command, ``distributed.leftovers``).
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
from contextlib import contextmanager

_received: list[int] = []
UNWIND_S = 10.0   # after SIGTERM, the seconds a command may take to unwind before it exits without unwinding


def terminated() -> int | None:
    """128 + the signal when this process was asked to terminate, else None."""
    return 128 + _received[-1] if _received else None


def _exit(signum, _frame):
    _received.append(signum)
    raise SystemExit(128 + signum)


def is_ours(handler) -> bool:
    """Whether ``handler`` is the one ``sigterm_as_exit`` installs."""
    return handler is _exit


def reinstall() -> None:
    """Put the handler back after a library replaced it (``ray.init``); main thread only."""
    signal.signal(signal.SIGTERM, _exit)


@contextmanager
def sigterm_as_exit():
    """Within the block, SIGTERM raises ``SystemExit(143)`` (and is remembered). Only the main
    thread can install handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not is_ours(signal.getsignal(signal.SIGTERM)):
        _received.clear()   # a new command: an earlier one's signal (in this process) is not this one's
    previous = signal.signal(signal.SIGTERM, _exit)
    done = threading.Event()
    woken, wake = socket.socketpair()
    wake.setblocking(False)
    previous_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(woken, done), name="neurcam-sigterm-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGTERM, previous)
        wake.close()   # the watcher reads the end of its socket and closes it


def _watch(woken: socket.socket, done: threading.Event) -> None:
    """The watcher: woken by any signal's byte; after SIGTERM, wait ``UNWIND_S`` for the block to
    end, then say so and exit 143 without unwinding (the main thread is stuck in a library call)."""
    with woken:
        while not done.is_set():
            try:
                got = woken.recv(64)
            except OSError:
                return
            if not got:
                return
            if signal.SIGTERM in got and not done.wait(UNWIND_S):
                os.write(2, f"neurcam: terminated (SIGTERM): still inside a library call {UNWIND_S:g} s later; "
                            f"exiting without unwinding\n".encode())
                os._exit(128 + signal.SIGTERM)


def process_gone(host: str | None, pid, started_unix: float, stale_s: float) -> bool:
    """Whether the process that wrote a record (``host``, ``pid``, started at ``started_unix``)
    is gone: on this host, by signalling it nothing (signal 0); on another host, a process
    started more than ``stale_s`` ago is taken for gone (its pods cannot be asked)."""
    if host != socket.gethostname():
        return time.time() - started_unix > stale_s
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False

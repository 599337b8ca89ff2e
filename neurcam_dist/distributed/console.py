"""A console a person can read: Ray's, Ray Data's, Tune's and Train's own log lines (and every
line the workers print) go to a file in the run's folder; the console keeps the service's own
``[neurcam]`` lines (progress, decisions, where things are). Workers and trials send those as
records (``events``), not as printed text; on a terminal each running trial's epoch records become
one progress bar (tqdm) per trial; in a log (a Ray job, a pod) they stay lines, which is what a bar
turns into there anyway. ``--verbose`` (``NEURCAM_VERBOSE=1``) leaves Ray's logging as it is.

Worker output reaches the driver through Ray's log dispatcher (``raycompat``); its default
printer is swapped for one that writes everything to the file, and put back afterwards.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

from ..raycompat import autoscaler_events, stdstream_dispatcher
from ..storage.published import put_file
from ..uris import Location
from .events import Event, listening

_ANSI = re.compile(r"\x1b\[[0-9;]*m")   # colour codes in Ray's lines, left out of the log file


class _Bars:
    """One tqdm bar per trial, fed by the trials' epoch records; other records print above the bars."""

    def __init__(self, stream):
        self.stream, self.bars = stream, {}

    def show(self, event: Event) -> None:
        from tqdm import tqdm
        if not event.is_epoch:
            tqdm.write(event.line(), file=self.stream)
            return
        key = event.trial or ""
        bar = self.bars.get(key)
        if bar is None:
            bar = self.bars[key] = tqdm(desc=f"trial {key}" if key else "training", position=len(self.bars),
                                        file=self.stream, bar_format="{desc}: epoch {n} [{elapsed}{postfix}]",
                                        dynamic_ncols=True, leave=True)
        bar.n = event.epoch
        bar.set_postfix_str(f"{event.phase} loss={event.loss:.5f} {event.rows_per_s:,.0f} rows/s", refresh=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


class _Repeats:
    """Worker lines into the log file, where a process's run of one repeated line is written once
    and then with its count ("[repeated 92x]", as Ray marks lines repeated across processes):
    Ray Train's PlacementGroupCleaner says the same line every second or two when Ray runs
    without its dashboard, as a local Ray here does."""

    def __init__(self, sink):
        self.sink, self.last = sink, {}

    def write(self, source: str, line: str) -> None:
        prev = self.last.get(source)
        if prev is not None and prev[0] == line:
            prev[1] += 1
            return
        self._end(source)
        self.sink.write(source + line + "\n")
        self.last[source] = [line, 0]

    def _end(self, source: str) -> None:
        prev = self.last.get(source)
        if prev is not None and prev[1]:
            self.sink.write(f"{source}[repeated {prev[1]}x] {prev[0]}\n")

    def close(self) -> None:
        for source in self.last:
            self._end(source)
        self.last.clear()


def verbose() -> bool:
    """True when Ray's own log lines stay on the console (``--verbose``, ``NEURCAM_VERBOSE=1``)."""
    return os.environ.get("NEURCAM_VERBOSE") == "1"


_NAMES: dict[tuple[str, str, int], str] = {}   # (folder, stem, pid) -> the file's name: one file a process


def _log_path(folder: Location, stem: str) -> tuple[Path, str | None]:
    """``FOLDER/STEM-TIME-PID.log``, and its URI when ``folder`` is on an object store: such a log
    is written locally and copied there at the end. A process's later blocks append to the file
    its first block opened there."""
    key = (str(folder), stem, os.getpid())
    name = _NAMES.setdefault(key, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    remote = str(folder / name) if folder.is_uri else None
    path = (Path(tempfile.gettempdir()) / "neurcam-logs" if remote else folder.path) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, remote


def _copy_out(path: Path, remote: str | None, log) -> None:
    if remote:
        try:
            put_file(path, remote)
        except OSError as exc:
            log(f"could not copy the log to {remote}: {exc}; it stays in {path}")


def _where(path: Path, remote: str | None) -> str:
    return f"{path}" + (f" (copied to {remote} at the end)" if remote else "") + " (--verbose shows them here)"


@contextmanager
def _log_file(folder, stem: str, loggers: tuple[str, ...], log, owners: str, earlier: str = ""):
    """A file ``FOLDER/STEM-TIME-PID.log`` that the named loggers (and their children) write
    to instead of the console within the block, after the ``earlier`` lines; yields ``(path, sink)``."""
    path, remote = _log_path(folder, stem)
    first = not path.exists()
    sink = open(path, "a", encoding="utf-8", buffering=1)
    sink.write(earlier)
    handler = logging.StreamHandler(sink)
    handler.setLevel(logging.INFO)   # what their console handlers print; Ray keeps its DEBUG lines in its own files
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    children = tuple(f"{n}." for n in loggers)
    for name in [*loggers, *sorted(n for n in logging.root.manager.loggerDict if n.startswith(children))]:
        lg = logging.getLogger(name)
        streams = [h for h in lg.handlers if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
        if streams or name in loggers:
            saved.append((lg, streams, lg.propagate))
            for h in streams:
                lg.removeHandler(h)
            lg.addHandler(handler)
            lg.propagate = False
    if first:
        log(f"{owners} own log lines go to {_where(path, remote)}")
    try:
        yield path, sink
    finally:
        for lg, streams, propagate in saved:
            lg.removeHandler(handler)
            for h in streams:
                lg.addHandler(h)
            lg.propagate = propagate
        sink.close()
        _copy_out(path, remote, log)


@contextmanager
def stderr_to_log(folder: Location, stem: str, owners: str, log=print):
    """Within the block, Ray's loggers and everything this process writes to stderr go to
    ``FOLDER/STEM-TIME-PID.log``: Python's lines (warnings, other libraries) and those Ray's C++
    core writes to file descriptor 2 itself, which no logger reaches. For a command whose only
    output is its result (``neurcam predict``); ``--verbose`` leaves them on the console."""
    if verbose():
        yield None
        return
    import ray.data  # noqa: F401 - Ray's and Ray Data's loggers set themselves up at import: before ours
    with _log_file(folder, stem, ("ray",), log, owners) as (path, sink), _stderr_to(path, sink):
        yield path


@contextmanager
def _stderr_to(path, sink):
    """File descriptor 2 (what C++ code writes, and a ``sys.stderr`` on it) onto ``path``, and
    ``sys.stderr`` onto ``sink`` (an open append of ``path``: a test's capture, a notebook's
    stream are not fd 2), within the block. A process without an fd 2 keeps the second only."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        saved = None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND) if saved is not None else None
    try:
        if fd is not None:
            os.dup2(fd, 2)
        with redirect_stderr(sink):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(fd)


@contextmanager
def library_logs(output: Location, loggers: tuple[str, ...], owners: str, log=print):
    """Within the block, the named libraries' log lines (``owners``, e.g. "MLflow's") go to
    ``output/logs/``, as Ray's do in ``routed_logs``, and so does what is printed to stderr
    (MLflow prints some lines there past its logger); ``--verbose`` leaves them on the console."""
    if verbose():
        yield None
        return
    with _log_file(output / "logs", loggers[0], loggers, log, owners) as (path, sink), redirect_stderr(sink):
        yield path


@contextmanager
def _warnings_logged():
    """Python warnings through the ``py.warnings`` logger within the block (``logging.captureWarnings``):
    the driver's are libraries' (Ray Train's own deprecated settings, say), and go where Ray's lines go."""
    already = logging._warnings_showwarning is not None   # someone captures them already: leave it so
    logging.captureWarnings(True)
    try:
        yield
    finally:
        if not already:
            logging.captureWarnings(False)


class Held:
    """What ``held_stderr`` held: ``text``, for the log file once there is one."""
    text = ""


@contextmanager
def held_stderr():
    """Within the block, this process's stderr (Python's lines and those of Ray's C++ core) is
    held in a temporary file: Ray's start-up lines come before a run may create its log folder
    (a run refused for its resources writes nothing). A failing block gives them back to the
    console; otherwise ``held.text`` heads the log file (``routed_logs(earlier=...)``)."""
    held = Held()
    if verbose():
        yield held
        return
    fd, name = tempfile.mkstemp(prefix="neurcam-start-", suffix=".log")
    os.close(fd)
    sink = open(name, "a", encoding="utf-8", buffering=1)
    failed = False
    try:
        with _stderr_to(name, sink):
            yield held
    except BaseException:
        failed = True
        raise
    finally:
        sink.close()
        with open(name, encoding="utf-8", errors="replace") as f:
            held.text = f.read()
        os.unlink(name)
        if failed and held.text:
            sys.stderr.write(held.text)
            sys.stderr.flush()


@contextmanager
def routed_logs(output: Location, log=print, bars: bool | None = None, earlier: str = ""):
    """Within the block, Ray's log lines go to ``output/logs/ray-TIME.log`` (see the module
    docstring), after the ``earlier`` lines (``held_stderr``), and the records workers and trials
    send (``events``) are rendered here: into that file, and on the console as lines or, for
    epoch records, one progress bar per trial (``bars``; default: on a terminal)."""
    if verbose():
        yield None
        return
    import ray.data
    import ray.train
    import ray.tune  # noqa: F401
    with _warnings_logged(), _log_file(output / "logs", "ray", ("ray", "py.warnings"), log, "Ray's",
                                       earlier) as (path, sink):
        progress = _Bars(sys.stdout) if (sys.stdout.isatty() if bars is None else bars) else None

        def render(event: Event) -> None:
            sink.write(event.line() + "\n")
            if progress is not None:
                progress.show(event)
            else:
                print(event.line(), flush=True)

        with _worker_lines_to(sink), _tune_tables_off(), listening(render):
            try:
                yield path
            finally:
                if progress is not None:
                    progress.close()


@contextmanager
def _worker_lines_to(sink):
    """Within the block, what Ray's workers print goes to ``sink`` (Ray's printer is taken off the
    driver's dispatcher and put back afterwards); a run of one repeated line is written once,
    with its count (``_Repeats``), and of the autoscaler's lines only its events."""
    dispatcher = stdstream_dispatcher()
    if dispatcher is None:
        yield
        return
    printer = next((h for n, h in dispatcher.handlers if n == "ray_print_logs"), None)
    written = _Repeats(sink)

    def route(data: dict) -> None:
        prefix = f"({data.get('actor_name') or data.get('task_name') or ''} pid={data.get('pid')}) "
        lines = data.get("lines", [])
        for line in autoscaler_events(lines) if data.get("pid") == "autoscaler" else lines:
            written.write(prefix, _ANSI.sub("", line))
        sink.flush()

    if printer is not None:
        dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("neurcam_route", route)
    try:
        yield
    finally:
        dispatcher.remove_handler("neurcam_route")
        written.close()
        if printer is not None:
            dispatcher.add_handler("ray_print_logs", printer)


@contextmanager
def _tune_tables_off():
    """Tune's banner, TensorBoard hint and status tables off within the block."""
    air_output = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if air_output is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = air_output

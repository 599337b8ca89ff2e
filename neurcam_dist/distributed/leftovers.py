"""Ray processes a killed run left behind.

A command that starts a local Ray (``session.ensure_ray`` without ``RAY_ADDRESS``) owns its GCS
server, raylet, dashboard agent, log monitor and worker processes. Killed with SIGKILL (an OOM
kill, ``kill -9``, a node drain past its grace period), it cannot stop them, and they outlive it,
holding memory, CPUs and ports. So each such command records its session (its process id and
Ray's session directory) in ``NEURCAM_RAY_RECORDS`` (default ``TMPDIR/neurcam-local-ray``);
the next command that starts a local Ray looks at the records, and for each whose process is
gone stops the processes of that session (found by the session's name in their command lines,
under ``/proc``: Linux only) and says so. Written by hand: Ray has no public call that stops
another driver's local cluster without stopping every Ray of the user (``ray stop``).
"""
from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path


def records_dir() -> Path:
    """Where the records of local Ray sessions are kept."""
    return Path(os.environ.get("NEURCAM_RAY_RECORDS") or Path(tempfile.gettempdir()) / "neurcam-local-ray")


def remember(session_dir: str) -> None:
    """Record this process's local Ray session (called once it started)."""
    folder = records_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{os.getpid()}.json.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), "session_dir": session_dir, "started": time.time()}))
        tmp.replace(folder / f"{os.getpid()}.json")
    except OSError:   # a read-only temp folder: nothing to clean up next time, nothing else lost
        pass


def forget() -> None:
    """Remove this process's record (its Ray was shut down)."""
    (records_dir() / f"{os.getpid()}.json").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_processes(session_dir: str) -> list[int]:
    """Process ids of a Ray session: those whose command line names the session (its directory's
    name: the GCS server, raylet, monitors) or that hold one of its log files open (the
    dashboard and runtime-env agents, which retitle themselves ``ray::DashboardAgent`` and
    outlive a killed driver), the processes they started (workers, retitled ``ray::IDLE``), and
    workers whose ``RAY_RAYLET_PID`` is one of its raylets."""
    name = os.path.basename(session_dir.rstrip("/")).encode()
    if not name or not Path("/proc").is_dir():
        return []
    cmdlines, parents, raylet_pid = {}, {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            cmdlines[pid] = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
            parents[pid] = int(stat[stat.rindex(")") + 2:].split()[1])
            environ = (entry / "environ").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        at = environ.find(b"RAY_RAYLET_PID=")
        if at >= 0:
            raylet_pid[pid] = environ[at + 15:].split(b"\0", 1)[0].decode(errors="replace")
        if name not in cmdlines[pid] and _writes_to(entry, name.decode()):
            cmdlines[pid] += b"\0" + name   # an agent: retitled, its raylet gone, its logs still open
    found = {pid for pid, cmd in cmdlines.items() if name in cmd}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} | {
            pid for pid, raylet in raylet_pid.items() if raylet.isdigit() and int(raylet) in found}
        grew = not more <= found
        found |= more
    return sorted(found)


def _writes_to(proc: Path, name: str) -> bool:
    """Whether the process holds a file open under a path that names the session (its logs)."""
    try:
        for fd in (proc / "fd").iterdir():
            try:
                if name in os.readlink(fd):
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


def _stop(pids: list[int], grace: float = 5.0) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds for those still there; how many were stopped."""
    stopped = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            stopped += 1
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return stopped


def clean_up(say) -> int:
    """Stop the Ray processes of every recorded session whose command is gone; ``say`` a line
    for each session that had any. Returns how many processes were stopped."""
    folder = records_dir()
    if not folder.is_dir():
        return 0
    total = 0
    for rec in folder.glob("*.json"):
        try:
            data = json.loads(rec.read_text())
            pid, session_dir = int(data["pid"]), str(data["session_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            rec.unlink(missing_ok=True)
            continue
        if _alive(pid):
            continue
        pids = session_processes(session_dir)
        stopped = _stop(pids) if pids else 0
        rec.unlink(missing_ok=True)
        if stopped:
            total += stopped
            say(f"stopped {stopped} Ray process(es) left running by an earlier command that was killed "
                f"(pid {pid}, {session_dir})")
    return total

"""The names the service gives its runs and the times it writes: one pattern each, written and
read back here (a search's age comes from its name; a record's times are ISO UTC)."""
from __future__ import annotations

import calendar
import time
import uuid

STAMP = "%Y%m%d-%H%M%S"     # the local time in a run's name
UTC = "%Y-%m-%dT%H:%M:%SZ"  # a record's times


def run_name(kind: str) -> str:
    """``KIND-YYYYmmdd-HHMMSS-xxxxxx``: a run's name (``neurcam``, ``search``, ``choose-k``),
    unique with six hex digits, sortable by its start."""
    return f"{kind}-{time.strftime(STAMP)}-{uuid.uuid4().hex[:6]}"


def run_age_s(name: str, kind: str) -> float:
    """Seconds since the run named by ``run_name(kind)`` started; 0 for a name of another pattern."""
    try:
        return time.time() - time.mktime(time.strptime(name[len(kind) + 1:][:15], STAMP))
    except ValueError:
        return 0.0


def utc(t: float | None = None) -> str:
    """``t`` (default: now) as ISO UTC, to the second."""
    return time.strftime(UTC, time.gmtime(time.time() if t is None else t))


def parse_utc(text: str) -> float:
    """The Unix time of an ``utc()`` text (``ValueError`` when it is not one)."""
    return float(calendar.timegm(time.strptime(text, UTC)))

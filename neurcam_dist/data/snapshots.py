"""Which snapshot of a growing dataset a periodic re-clustering reads.

``data.path`` names either a template with one ``{snapshot}`` placeholder in a folder name
(``events/date={snapshot}/``) or a parent of Hive-style partition folders (``events/`` holding
``date=2026-11-25/``, ``date=2026-11-26/``). ``latest`` takes the newest value (dates by date,
numbers by value, anything else by text); any other value names one snapshot exactly.
"""
from __future__ import annotations

import os
import re

from ..uris import filesystem as uri_filesystem
from ..uris import is_uri, local
from .sources import DataError

PLACEHOLDER = "{snapshot}"
_PARTITION = re.compile(r"^[^=/]+=(.+)$")


def _listdir(parent: str) -> list[str]:
    """Folder names directly under ``parent`` (a local path or a pyarrow-resolvable URI)."""
    if is_uri(parent):
        from pyarrow import fs as pafs
        filesystem, root = uri_filesystem(parent)
        infos = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        return [i.base_name for i in infos if i.type == pafs.FileType.Directory]
    parent = local(parent)
    if not os.path.isdir(parent):
        raise DataError(f"data.path: no folder {parent} to pick a snapshot from")
    return [e.name for e in os.scandir(parent) if e.is_dir()]


# a date (and time) in a snapshot's name: 2026-11-08, 2026-11-8, 2026/11/08, 2026_11_08T06:00
_DATE = re.compile(r"^(\d{4})[-/_.](\d{1,2})[-/_.](\d{1,2})(?:[T _](\d{1,2})(?:[:\-](\d{1,2}))?(?:[:\-](\d{1,2}))?)?$")


def _as_date(value: str):
    """The ``datetime`` a snapshot value names, or None."""
    import datetime
    m = _DATE.match(value)
    if not m:
        return None
    try:
        return datetime.datetime(*(int(g) for g in m.groups() if g is not None))
    except ValueError:
        return None


def _order(value: str):
    """Dates by date (``2026-11-9`` before ``2026-11-10``), numbers by value, the rest by text."""
    when = _as_date(value)
    if when is not None:
        return (0, when.timestamp(), value)
    try:
        return (1, float(value), value)
    except ValueError:
        return (2, 0.0, value)


def snapshots(path: str) -> tuple[dict[str, str], str]:
    """``{value: path}`` of every snapshot ``path`` describes, and how they were found."""
    path = str(path)
    if PLACEHOLDER in path:
        if path.count(PLACEHOLDER) > 1:
            raise DataError(f"data.path {path!r}: use {PLACEHOLDER} once")
        head, _, tail = path.partition(PLACEHOLDER)
        parent, _, prefix = head.rpartition("/")
        suffix, sep, rest = tail.partition("/")
        pattern = re.compile(re.escape(prefix) + "(.+)" + re.escape(suffix) + "$")
        found = {}
        for name in _listdir(parent or "."):
            m = pattern.match(name)
            if m and not name.startswith((".", "_")):
                found[m.group(1)] = f"{parent}/{name}" + (f"/{rest}" if sep else "")
        return found, f"folders matching {prefix}{PLACEHOLDER}{suffix} in {parent or '.'}"
    parent = path.rstrip("/")
    found = {}
    for name in _listdir(parent):
        m = _PARTITION.match(name)
        if m and not name.startswith((".", "_")):
            found[m.group(1)] = f"{parent}/{name}"
    return found, f"partition folders (key=value) in {parent}"


def pick_snapshot(path: str, snapshot: str = "latest", say=None) -> tuple[str, str]:
    """The path of the chosen snapshot and its value; a clear error when there is none. When the
    newest by date or number is not the last in text order (``date=2026-11-9`` beside
    ``date=2026-11-12``), ``say`` (else a ``UserWarning``) tells which was taken and why."""
    found, how = snapshots(path)
    if not found:
        raise DataError(f"data.path {path!r}: no snapshot found ({how}); expected a {PLACEHOLDER} template or "
                        f"a folder of partitions such as date=2026-11-26/")
    if snapshot == "latest":
        value = max(found, key=_order)
        if value != max(found):
            import warnings
            (say or (lambda m: warnings.warn(m, stacklevel=2)))(
                f"newest snapshot: {value!r}, ranked as {'dates' if _as_date(value) else 'numbers'}; as text "
                f"{max(found)!r} would sort last (zero-padded names, such as 2026-11-09, sort the same both ways)")
    elif snapshot in found:
        value = snapshot
    else:
        shown = sorted(found, key=_order)
        raise DataError(f"recluster.snapshot={snapshot!r} is not among the {len(shown)} snapshot(s) of {path!r}: "
                        f"{', '.join(shown[-10:])}" + (" (newest 10 shown)" if len(shown) > 10 else ""))
    return found[value], value

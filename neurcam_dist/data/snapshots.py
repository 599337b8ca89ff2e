"""Which snapshot of a growing dataset a periodic re-clustering reads.

``data.path`` names either a template with one ``{snapshot}`` placeholder in a folder name
(``events/date={snapshot}/``) or a parent of Hive-style partition folders (``events/`` holding
``date=2026-11-25/``, ``date=2026-11-26/``). ``latest`` takes the newest value (numbers by
value, anything else, such as ISO dates, by text); any other value names one snapshot exactly.
"""
from __future__ import annotations

import os
import re

from ..uris import filesystem as uri_filesystem
from ..uris import is_uri
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
    parent = parent.removeprefix("file://")
    if not os.path.isdir(parent):
        raise DataError(f"data.path: no folder {parent} to pick a snapshot from")
    return [e.name for e in os.scandir(parent) if e.is_dir()]


def _order(value: str):
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


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


def pick_snapshot(path: str, snapshot: str = "latest") -> tuple[str, str]:
    """The path of the chosen snapshot and its value; a clear error when there is none."""
    found, how = snapshots(path)
    if not found:
        raise DataError(f"data.path {path!r}: no snapshot found ({how}); expected a {PLACEHOLDER} template or "
                        f"a folder of partitions such as date=2026-11-26/")
    if snapshot == "latest":
        value = max(found, key=_order)
    elif snapshot in found:
        value = snapshot
    else:
        shown = sorted(found, key=_order)
        raise DataError(f"recluster.snapshot={snapshot!r} is not among the {len(shown)} snapshot(s) of {path!r}: "
                        f"{', '.join(shown[-10:])}" + (" (newest 10 shown)" if len(shown) > 10 else ""))
    return found[value], value

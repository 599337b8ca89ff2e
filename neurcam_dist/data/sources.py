"""Which Parquet files a dataset is: resolve a path, glob, list or URI, and read their footers."""
from __future__ import annotations

import glob as _glob
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

PATH_COLUMN = "__neurcam_path"  # Ray Data's include_paths column, renamed away from user columns
ID_LIKE = ("id", "label")
MAX_LISTED = 20


class DataError(ValueError):
    """Input data that cannot be trained on; the message names the file(s) and column(s)."""


@dataclass
class Source:
    spec: object                       # what the config said (str or list)
    files: list[str]
    filesystem: pa.fs.FileSystem | None = None


def _is_uri(p: str) -> bool:
    return "://" in p and not p.startswith("file://")


def resolve(spec) -> Source:
    """Parquet files behind a directory, glob, file or list of those (local or a pyarrow/fsspec URI)."""
    entries = [spec] if isinstance(spec, str) else list(spec)
    if not entries:
        raise DataError("data.path is an empty list")
    files: list[str] = []
    filesystem = None
    for entry in entries:
        entry = str(entry)
        if _is_uri(entry):
            import fsspec
            from pyarrow.fs import FSSpecHandler, PyFileSystem
            fs, root = fsspec.core.url_to_fs(entry)
            filesystem = PyFileSystem(FSSpecHandler(fs))
            if any(c in root for c in "*?["):
                found = sorted(fs.glob(root))
            elif fs.isdir(root):
                found = sorted(p for p in fs.find(root) if p.endswith((".parquet", ".pq")))
            else:
                found = [root] if fs.exists(root) else []
        else:
            local = entry[len("file://"):] if entry.startswith("file://") else entry
            if any(c in local for c in "*?["):
                found = sorted(_glob.glob(local, recursive=True))
            elif os.path.isdir(local):
                found = sorted(os.path.join(d, f) for d, _, fs_ in os.walk(local) for f in fs_
                               if f.endswith((".parquet", ".pq")) and not f.startswith((".", "_")))
            else:
                found = [local] if os.path.isfile(local) else []
            found = [os.path.abspath(f) for f in found]
        if not found:
            raise DataError(f"no Parquet files found at {entry!r}")
        files.extend(found)
    return Source(spec=spec, files=files, filesystem=filesystem)


def footers(src: Source) -> list[tuple[str, pa.Schema, int]]:
    """``(file, Arrow schema, row count)`` of every file, read in parallel (footers only)."""
    def read(f):
        try:
            meta = pq.read_metadata(f, filesystem=src.filesystem)
            return f, meta.schema.to_arrow_schema(), meta.num_rows
        except Exception as exc:  # noqa: BLE001 - reported with the file name
            raise DataError(f"{f}: not a readable Parquet file ({exc})") from exc
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(read, src.files))


def is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)


def is_float_list(t: pa.DataType) -> bool:
    return ((pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
            and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)))


def listing(what: str, items: list[str]) -> str:
    more = f"\n  ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"{len(items)} {what}:\n  " + "\n  ".join(items[:MAX_LISTED]) + more

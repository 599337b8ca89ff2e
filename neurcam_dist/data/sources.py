"""Which Parquet files a dataset is: resolve a path, glob, list or URI, and read their footers."""
from __future__ import annotations

import glob as _glob
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError
from ..storage import refuse_overwrite
from ..uris import filesystem as uri_filesystem
from ..uris import Location, is_uri
from ..uris import local as local_path
from ..validation import auto_features as select_features

VOCABULARY_FILE = "_vocabulary.json"   # written by featurize-text; "_": readers of the shards skip it
PATH_COLUMN = "__neurcam_path"  # Ray Data's include_paths column, renamed away from user columns
# A training row's place in the plan's files (file offset + row in file): the workers' key for the
# frozen teacher's cached assignment of a streamed row.
ROW_KEY = "__neurcam_row"
MAX_LISTED = 20
# Rows per Arrow batch when a file is read (a read task's block): a task holds a few of them
# (`parquet_files.ParquetFiles`), and every pass over a file cuts it the same way, so sums over a
# file come out the same whichever process reads it.
BATCH_ROWS = 16384


@dataclass
class Source:
    """The files a ``data.path`` resolves to, on their file system, and how many entries were
    skipped (hidden, ``_`` and non-Parquet names)."""
    given: object                      # what the config said: data.path (str or list)
    files: list[str]
    filesystem: pa.fs.FileSystem | None = None
    skipped: int = 0                   # entries left out: hidden / underscore names, non-Parquet files
    _footers: list | None = field(default=None, repr=False, compare=False)   # read once (``footers``)
    _casts: dict | None = field(default=None, repr=False, compare=False)

    def footers(self) -> list[tuple[str, pa.Schema, int]]:
        """``(file, Arrow schema, row count)`` of every file (``footers``), read once and kept."""
        if self._footers is None:
            self._footers = _read_footers(self)
            # the casts from the same read, before the source travels to Ray's tasks without it
            self._casts = unified_types([schema for _, schema, _ in self._footers])
        return self._footers

    def __getstate__(self) -> dict:
        """Pickled (to Ray's tasks) without the footers: every file's schema would travel with
        every task; the casts, computed from them, do."""
        return {**self.__dict__, "_footers": None}

    @property
    def schema(self) -> pa.Schema:
        """Every column of the files, in the order first seen, with the type it is read as
        (``casts``; else its first file's)."""
        fields: dict[str, pa.Field] = {}
        for _, schema, _ in self.footers():
            for f in schema:
                fields.setdefault(f.name, f)
        return pa.schema([pa.field(n, self.casts.get(n, f.type)) for n, f in fields.items()])

    @property
    def rows_per_file(self) -> dict[str, int]:
        """File -> its row count (from ``footers``), in file order."""
        return {f: n for f, _, n in self.footers()}

    @property
    def casts(self) -> dict:
        """Column -> the Arrow type every file is read as (``unified_types`` of the footers)."""
        if self._casts is None:
            self.footers()
        return self._casts

    def stamp(self) -> dict[str, tuple[int, int] | None]:
        """(size, mtime) of every file, to tell later whether a file changed under a run."""
        if self.filesystem is not None:
            from pyarrow.fs import FileType
            try:
                infos = self.filesystem.get_file_info(self.files)
            except OSError:
                return {}
            return {i.path: (i.size, i.mtime_ns) if i.type == FileType.File else None for i in infos}
        out = {}
        for f in self.files:
            try:
                st = os.stat(f)
                out[f] = (st.st_size, st.st_mtime_ns)
            except OSError:
                out[f] = None
        return out

    def changed_since(self, stamp: dict) -> list[str]:
        """Files deleted or rewritten since ``stamp`` was taken, each with what happened."""
        now = self.stamp()
        return [f"{f} ({'deleted' if now.get(f) is None else 'rewritten'})" for f, st in stamp.items()
                if now.get(f) != st]

    def describe(self) -> str:
        """``N file(s)`` and what was skipped, for the console."""
        return f"{len(self.files)} file(s)" + (f" ({self.skipped} hidden, '_' or non-Parquet entries skipped)"
                                               if self.skipped else "")


PARQUET = (".parquet", ".pq")
CSV = (".csv", ".csv.gz", ".csv.bz2")
KIND_NAMES = {PARQUET: "Parquet", CSV: "CSV", PARQUET + CSV: "Parquet or CSV"}


def _resolve_uri(entry: str, suffixes: tuple[str, ...] = PARQUET):
    """``(filesystem, files, skipped)`` for a URI: the files of a published output (through its
    manifest, see ``storage.published``), else a prefix listed recursively, one object, or a glob."""
    from fnmatch import fnmatch

    from pyarrow.fs import FileSelector, FileType

    from ..storage.published import NotPublishedError, resolve as resolve_published
    fs, root = uri_filesystem(entry)
    root = root.rstrip("/")
    if not any(c in root for c in "*?["):
        try:
            pub = resolve_published(entry)
        except NotPublishedError:
            pass
        else:
            rels = list(pub.files)
            keep = [(rel, path) for rel, path in zip(rels, pub.paths(), strict=False)
                    if _is_data(path, suffixes) and not _hidden(rel)]
            return fs, sorted(path for _, path in keep), len(rels) - len(keep)
    info = fs.get_file_info(root)
    if info.type == FileType.Directory:
        listed = [i.path for i in fs.get_file_info(FileSelector(root, recursive=True)) if i.type == FileType.File]
        return (fs, *_select(root + "/", listed, suffixes))
    if info.type == FileType.File:
        return fs, [root], 0
    if any(c in root for c in "*?["):
        prefix = _static_prefix(root)
        listed = [i.path for i in fs.get_file_info(FileSelector(prefix.rstrip("/"), recursive=True,
                                                                allow_not_found=True))
                  if i.type == FileType.File and fnmatch(i.path, root)]
        return (fs, *_select(prefix, listed, suffixes))
    return fs, [], 0


def _hidden(rel: str) -> bool:
    """Names starting with '.' or '_' (temporary files, ``_ray/`` staging, ``_SUCCESS``, markers)
    are not data at any level below the dataset's root."""
    return any(part.startswith((".", "_")) for part in rel.replace("\\", "/").split("/") if part)


def _is_data(name: str, suffixes: tuple[str, ...] = PARQUET) -> bool:
    return name.lower().endswith(suffixes)


def _select(root: str, found: list[str], suffixes: tuple[str, ...] = PARQUET) -> tuple[list[str], int]:
    """Data files among ``found`` (paths under ``root``): no hidden parts below root, data names,
    nothing inside a neurcam output published there (an output written inside an input prefix is
    not read back as data)."""
    from ..storage.published import MANIFEST
    outputs = tuple(f[:-len(MANIFEST)] for f in found if f.endswith("/" + MANIFEST))
    keep = []
    for f in found:
        rel = f[len(root):] if f.startswith(root) else os.path.basename(f)
        if not _hidden(rel) and _is_data(f, suffixes) and not f.startswith(outputs):
            keep.append(f)
    return sorted(keep), len(found) - len(keep)


def _static_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard, up to a separator."""
    cut = min((pattern.index(c) for c in "*?[" if c in pattern), default=len(pattern))
    return pattern[:cut].rpartition("/")[0] + "/"


def resolve(given, suffixes: tuple[str, ...] = PARQUET) -> Source:
    """Parquet files behind a directory, glob, file or list of those (local or a pyarrow/fsspec URI).

    A directory is read recursively, leaving out names that start with '.' or '_' at every level
    and files that are not ``.parquet`` / ``.pq`` (``suffixes``: other kinds, such as ``CSV``); a
    path that exists is taken literally even when it holds glob characters such as '['.
    """
    kind = KIND_NAMES.get(suffixes, "data")
    entries = [given] if isinstance(given, str) else list(given)
    if not entries:
        raise DataError("data.path is an empty list")
    files: list[str] = []
    filesystem = None
    skipped = 0
    for entry in entries:
        entry = str(entry)
        if is_uri(entry):
            filesystem, found, n_skipped = _resolve_uri(entry, suffixes)
        else:
            local = local_path(entry)
            if os.path.isdir(local):
                walked = [os.path.join(d, f) for d, _, names in os.walk(local) for f in names]
                found, n_skipped = _select(os.path.join(local, ""), walked, suffixes)
            elif os.path.isfile(local):
                found, n_skipped = [local], 0
            elif any(c in local for c in "*?["):
                matches = [f for f in _glob.glob(local, recursive=True) if os.path.isfile(f)]
                found, n_skipped = _select(_static_prefix(local), matches, suffixes)
            else:
                found, n_skipped = [], 0
            found = [os.path.abspath(f) for f in found]
        skipped += n_skipped
        if not found:
            more = f" ({n_skipped} hidden, '_' or non-{kind} entries skipped)" if n_skipped else ""
            raise DataError(f"no {kind} files found at {entry!r}{more}")
        files.extend(found)
    return Source(given=given, files=files, filesystem=filesystem, skipped=skipped)


def find_vocabulary(given) -> dict | None:
    """The text vocabulary (``_vocabulary.json``) of a dataset written by ``featurize-text``, or
    None: its term columns are the features when a config names none."""
    import json
    entries = [given] if isinstance(given, (str, os.PathLike)) else list(given)
    if len(entries) != 1 or any(c in str(entries[0]) for c in "*?["):
        return None
    from ..storage.published import read_text
    where = Location(entries[0]) / VOCABULARY_FILE   # a local folder or an object store's, read one way
    try:
        text = read_text(where)
    except OSError:   # no vocabulary there (not found; a folder of that name)
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where} is not valid JSON ({exc}): rerun neurcam featurize-text") from None


def refuse_output_inside(out: Location, src: Source, what: str = "output") -> None:
    """An output that is the input, inside an input folder (the next run would read it back as
    data) or holding the input: refused as every command's output is (``storage.refuse_overwrite``)."""
    refuse_overwrite(out, inputs=[src.given] if isinstance(src.given, str) else list(src.given), what=what)


def footers(src: Source) -> list[tuple[str, pa.Schema, int]]:
    """``(file, Arrow schema, row count)`` of every file, read in parallel (footers only), once per
    ``Source`` (the types its files are read as, ``Source.casts``, come from the same read)."""
    return src.footers()


def _read_footers(src: Source) -> list[tuple[str, pa.Schema, int]]:
    """Every file's footer, in parallel; a file that is not Parquet, or names a column twice, is
    refused naming it."""
    def read(f):
        try:
            meta = pq.read_metadata(f, filesystem=src.filesystem)
            return f, meta.schema.to_arrow_schema(), meta.num_rows
        except Exception as exc:
            raise DataError(f"{f}: not a readable Parquet file ({exc})") from exc
    with ThreadPoolExecutor(max_workers=16) as pool:
        found = list(pool.map(read, src.files))
    for f, schema, _ in found:
        twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
        if twice:
            raise DataError(f"{f}: its schema names column(s) {twice} more than once: rewrite the file with one "
                            f"name per column")
    return found


def unified_types(schemas: list[pa.Schema]) -> dict[str, pa.DataType]:
    """Columns whose number type differs across files (int64 in one, double in another: one
    writer's integers, another's floats) and the type every file's values are read as
    (float64), so the files' tables agree; decimal columns (a warehouse's ``DECIMAL(p, s)``) are
    read as float64 too, and one embedding stored as list, large_list or fixed_size_list in
    different files as one list type. Other differences (text against numbers) are left for the
    plan to refuse with the file and column."""
    types: dict[str, set] = {}
    for schema in schemas:
        for f in schema:
            types.setdefault(f.name, set()).add(f.type)
    out = {name: pa.float64() for name, ts in types.items()
           if all(is_number(t) for t in ts) and (len(ts) > 1 or any(pa.types.is_decimal(t) for t in ts))}
    out.update({name: pa.string() for name, ts in types.items()     # string, large_string, dictionary<string>
                if len(ts) > 1 and all(is_text(t) for t in ts)})
    for name, ts in types.items():   # list, large_list and fixed_size_list of numbers: one embedding
        if len(ts) > 1 and all(_is_list(t) and is_number(t.value_type) for t in ts):
            wide = any(pa.types.is_float64(t.value_type) for t in ts)
            out[name] = pa.list_(pa.float64() if wide else pa.float32())
    return out


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def is_text(t: pa.DataType) -> bool:
    """True for Arrow text types: string, large_string, and dictionaries of them."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_category(t: pa.DataType) -> bool:
    """True for Arrow types read as categories by default (text, dictionaries and booleans), as
    scikit-learn's ``categorical_features="from_dtype"`` reads a DataFrame."""
    return is_text(t) or pa.types.is_dictionary(t) or pa.types.is_boolean(t)


def column_bytes(src: Source, schema: pa.Schema, n_rows: int, columns: list[str]) -> int:
    """Bytes the named columns take in memory: 8 a value for numbers and fixed-size lists (how the
    passes hold them), the files' uncompressed sizes (from the footers) for the rest (text)."""
    fixed, varying = 0, set()
    for c in columns:
        t = schema.field(c).type
        if is_number(t):
            fixed += 8
        elif pa.types.is_fixed_size_list(t):
            fixed += 8 * t.list_size
        else:
            varying.add(c)
    if not varying:
        return n_rows * fixed

    def read(f):
        meta = pq.read_metadata(f, filesystem=src.filesystem)
        return sum(rg.column(j).total_uncompressed_size for rg in (meta.row_group(g) for g in range(meta.num_row_groups))
                   for j in range(rg.num_columns) if rg.column(j).path_in_schema.split(".")[0] in varying)
    with ThreadPoolExecutor(max_workers=16) as pool:
        return n_rows * fixed + sum(pool.map(read, src.files))


def is_number(t: pa.DataType) -> bool:
    """True for Arrow types read as numbers (integers, floats, booleans, decimals)."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)


def is_float_list(t: pa.DataType) -> bool:
    """True for Arrow list types of numbers (an embedding column)."""
    return ((pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
            and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)))


def auto_features(schema: pa.Schema, reserved: set[str]) -> list[str]:
    """Feature columns of a Parquet schema when the config names none (``validation.auto_features``):
    number and category columns (``is_category``)."""
    return select_features([(f.name, is_number(f.type) or is_category(f.type)) for f in schema], reserved)


def listing(what: str, items: list[str]) -> str:
    """``N what:`` and the first items, one a line, with how many more."""
    more = f"\n  ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"{len(items)} {what}:\n  " + "\n  ".join(items[:MAX_LISTED]) + more

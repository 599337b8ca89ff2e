"""Outputs on an object store, where there is no rename: written under a new version prefix, made
visible by one small object (the manifest) that neurcam's readers go through, in a layout that plain
Parquet readers (pyarrow, DuckDB, Spark, Athena) read at ``URI`` too.

Layout of an output at ``URI`` (Hive-style partitions, one per version)::

    URI/_neurcam_manifest.json      {"format", "version", "root", "written", "files": {rel: {size, sha256}}}
    URI/run=VERSION/rel ...         the files of a version, and its ``_SUCCESS`` marker
    URI/NAME                        run folders: a copy of each top-level file (``metrics.json``)
    PARENT/.NAME.staging/VERSION/   a version being written (outside ``URI``: no reader lists it)

A version is written (``publish_dir`` uploads a local directory; ``write_version`` lets Ray Data
write its shards) under the hidden staging prefix beside ``URI``, moved to ``URI/run=VERSION/`` when
complete, marked with ``_SUCCESS``, and committed by replacing the manifest (one PUT, which an
object store applies whole). neurcam's readers see the old version or the new one, never a mix; a
plain reader of ``URI`` sees the new partition from its move on, and the old one until the commit
deletes it (datasets) or keeps it (run folders and models: a reader may be fetching one; older
ones are deleted). A run that fails, or is killed, before the move leaves only staging objects,
which no reader lists and the next commit deletes after a day. Outputs written in the earlier
layout (``URI/.v/VERSION/``) are still read. ``fetch`` reads through the manifest (also for a path
inside a published output, such as ``URI/model``) and checks every file's size and checksum.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..names import utc
from ..errors import ConfigError, DataError, NotPublishedError
from ..redaction import redact
from ..uris import Location, filesystem

MANIFEST = "_neurcam_manifest.json"
RUN = "run="          # a version's partition: URI/run=VERSION/
VERSIONS = ".v"       # the earlier layout's versions (URI/.v/VERSION/), still read
SUCCESS = "_SUCCESS"  # the marker of a complete partition (Hadoop's convention)
FORMAT = "neurcam-dist/published"
CHUNK = 8 << 20


def _read_json(fs, path: str) -> dict | None:
    from pyarrow.fs import FileType
    if fs.get_file_info(path).type != FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())


def read_manifest(uri: str) -> dict | None:
    """The manifest of a published output at ``uri``, or None."""
    fs, root = filesystem(uri)
    return _read_json(fs, f"{root.rstrip('/')}/{MANIFEST}")


def _foreign(fs, root: str) -> list[str]:
    """Top-level names under ``root`` that a published output does not have."""
    from pyarrow.fs import FileSelector
    names = {i.path[len(root):].strip("/").split("/")[0]
             for i in fs.get_file_info(FileSelector(root, allow_not_found=True))}
    return sorted(n for n in names if n and n not in (MANIFEST, VERSIONS) and not n.startswith(RUN))


def check_target(uri: str) -> None:
    """Refuse a ``uri`` holding objects that neurcam did not publish there (someone else's data):
    a new version would shadow them."""
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    if _read_json(fs, f"{root}/{MANIFEST}") is None:
        foreign = _foreign(fs, root)
        if foreign:
            raise ConfigError(f"{redact(uri)} holds {foreign[:5]}, which neurcam did not publish there (no "
                             f"{MANIFEST}): refusing to write over it; choose another output")


def publish_dir(local_dir, uri: str, *, refuse_foreign: bool = False, meta: dict | None = None,
                mirror: bool = False) -> dict:
    """Upload every file under ``local_dir`` as a new version of the output at ``uri`` and commit
    it. ``refuse_foreign``: a ``uri`` holding objects that neurcam did not publish there is someone
    else's: refuse rather than shadow it. ``mirror``: also copy each top-level file to ``uri/NAME``
    (a run's ``metrics.json``, for ``aws s3 cp``). Returns the new manifest."""
    local_dir = Path(local_dir)
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    previous = _read_json(fs, f"{root}/{MANIFEST}")
    if refuse_foreign and previous is None:
        check_target(uri)
    version = _version_name()
    staging = _staging(root, version)
    files = {}
    try:
        for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
            rel = path.relative_to(local_dir).as_posix()
            h = hashlib.sha256()
            with open(path, "rb") as src, fs.open_output_stream(f"{staging}/{rel}") as dst:
                for block in iter(lambda: src.read(CHUNK), b""):
                    h.update(block)
                    dst.write(block)
            files[rel] = {"size": path.stat().st_size, "sha256": h.hexdigest()}
        _promote(fs, staging, _partition(root, version))
    except BaseException:
        _delete(fs, staging)
        _delete(fs, _partition(root, version))
        raise
    return commit(uri, version, files, previous=previous, meta=meta, mirror=mirror)


def _staging(root: str, version: str) -> str:
    """Where a version is written before it is complete: a hidden prefix beside ``root``, so that
    no reader of ``root`` (DuckDB's ``**`` glob lists hidden names inside it) sees a part of it; at a
    bucket's top level, where there is nothing beside, the earlier layout's ``.v/``."""
    parent, _, name = root.rpartition("/")
    return f"{parent}/.{name}.staging/{version}" if parent else f"{root}/{VERSIONS}/{version}"


def _partition(root: str, version: str) -> str:
    return f"{root}/{RUN}{version}"


def _files_under(fs, path: str) -> dict:
    """``rel -> {size}`` of the files under ``path``."""
    from pyarrow.fs import FileSelector, FileType
    return {i.path[len(path):].lstrip("/"): {"size": i.size}
            for i in fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
            if i.type == FileType.File}


def _promote(fs, staging: str, partition: str) -> None:
    """Move a complete version from its staging prefix into its partition (on an object store a
    server-side copy and a delete per object), then remove the staging prefix."""
    for rel in sorted(_files_under(fs, staging)):
        fs.move(f"{staging}/{rel}", f"{partition}/{rel}")
    _delete(fs, staging)


def write_version(uri: str, write) -> dict:
    """Run ``write(prefix, fs)`` (a writer that puts its files under a prefix itself, such as Ray
    Data's ``write_parquet``) into a new version of the output at ``uri``, then commit it; a failure
    deletes that version and leaves the previous output as it was. The version it replaces is deleted
    at once, so that a plain Parquet reader of ``uri`` reads every row once. Returns the new manifest."""
    check_target(uri)
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    version = _version_name()
    staging = _staging(root, version)
    try:
        write(staging, fs)
        files = _files_under(fs, staging)
        _promote(fs, staging, _partition(root, version))
        return commit(uri, version, files, keep_previous=False)
    except BaseException:
        _delete(fs, staging)
        _delete(fs, _partition(root, version))
        raise


def _version_name(at: float | None = None) -> str:
    """UTC time to the microsecond first, so that names sort by age (two versions written within
    one second too); a random suffix keeps concurrent writers apart."""
    at = time.time() if at is None else at
    micro = int(at * 1e6) % 1_000_000
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(at))}.{micro:06d}-{uuid.uuid4().hex[:8]}"


STALE_S = 86400  # an uncommitted version older than this is a failed writer's leftover


def commit(uri: str, version: str, files: dict, *, previous: dict | None = None, meta: dict | None = None,
           keep_previous: bool = True, mirror: bool = False) -> dict:
    """Make the partition of ``version`` (already complete) the output at ``uri``: its ``_SUCCESS``
    marker, then one PUT of the manifest; then, with ``mirror``, a copy of each top-level file at
    ``uri/NAME``. Then delete the versions older than the one it replaced (with ``keep_previous``
    False, that one too), and leftovers older than ``STALE_S``. Versions started after the replaced
    one are kept: a concurrent writer may still be uploading one."""
    fs, root = filesystem(uri)
    root = root.rstrip("/")
    if previous is None:
        previous = _read_json(fs, f"{root}/{MANIFEST}")
    partition = _partition(root, version)
    with fs.open_output_stream(f"{partition}/{SUCCESS}"):
        pass
    manifest = {"format": FORMAT, "version": version, "root": f"{RUN}{version}",
                "written": utc(),
                "files": files, **({"meta": meta} if meta else {})}
    with fs.open_output_stream(f"{root}/{MANIFEST}") as f:
        f.write(json.dumps(manifest, indent=1).encode())
    if mirror:
        for rel in sorted(r for r in files if "/" not in r):
            fs.copy_file(f"{partition}/{rel}", f"{root}/{rel}")
    replaced = (previous or {}).get("version")
    stale = _version_name(time.time() - STALE_S)

    def old(name: str) -> bool:
        if name == version:
            return False
        if name == replaced:
            return not keep_previous
        return (replaced is not None and name < replaced) or name < stale or (not keep_previous and name < version)
    from pyarrow.fs import FileSelector
    for info in fs.get_file_info(FileSelector(root, allow_not_found=True)):
        name = info.path.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(RUN) and old(name[len(RUN):]):
            _delete(fs, info.path)
    parent, _, base = root.rpartition("/")
    for where in (f"{root}/{VERSIONS}", f"{parent}/.{base}.staging" if parent else None):
        if where is None:
            continue
        for info in fs.get_file_info(FileSelector(where, allow_not_found=True)):
            name = info.path.rstrip("/").rsplit("/", 1)[-1]
            if old(name) and (where.endswith(VERSIONS) or name < stale):   # staging: only a dead writer's
                _delete(fs, info.path)
    return manifest


def _delete(fs, path: str) -> None:
    from pyarrow.fs import FileType
    try:
        info = fs.get_file_info(path)
        if info.type == FileType.Directory:
            fs.delete_dir(path)
        elif info.type == FileType.File:
            fs.delete_file(path)
    except OSError:
        pass  # cleanup is best effort: the next publish tries again


@dataclass
class Resolved:
    """What a URI means through a manifest: the files (``rel -> meta``) under ``root`` (a path in
    ``fs``); ``single`` when the URI names one file, which is then ``root`` itself (rel ``""``)."""
    fs: object
    root: str
    files: dict
    single: bool
    manifest: dict

    def paths(self) -> list[str]:
        """The published files' full paths."""
        return [self.root if self.single else f"{self.root}/{rel}" for rel in self.files]


def resolve(uri: str, depth: int = 4) -> Resolved:
    """The files behind ``uri``: a published output, or a path inside one (``OUT/model``,
    ``OUT/metrics.json``), found through the nearest manifest at most ``depth`` levels up."""
    fs, path = filesystem(uri)
    path = path.rstrip("/")
    parts = path.split("/")
    for up in range(0, min(depth, len(parts) - 1) + 1):
        base = "/".join(parts[:len(parts) - up])
        manifest = _read_json(fs, f"{base}/{MANIFEST}")
        if manifest is None:
            continue
        if manifest.get("format") != FORMAT:
            raise DataError(f"{redact(uri)}: {MANIFEST} is not a neurcam manifest")
        vroot = f"{base}/{manifest.get('root') or VERSIONS + '/' + manifest['version']}"
        sub = "/".join(parts[len(parts) - up:])
        files = manifest["files"]
        if not sub:
            return Resolved(fs, vroot, files, False, manifest)
        if sub in files:
            return Resolved(fs, f"{vroot}/{sub}", {"": files[sub]}, True, manifest)
        inner = {rel[len(sub) + 1:]: m for rel, m in files.items() if rel.startswith(sub + "/")}
        if not inner:
            raise NotPublishedError(f"{redact(uri)}: the output published at {redact(base)} has no {sub!r}")
        return Resolved(fs, f"{vroot}/{sub}", inner, False, manifest)
    raise NotPublishedError(f"no neurcam output at {redact(uri)} (no {MANIFEST} there or in the "
                            f"{depth} folders above it)")


def _download(fs, src: str, dst: Path, meta: dict, uri: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with fs.open_input_stream(src) as f, open(dst, "wb") as out:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
            out.write(block)
    size = dst.stat().st_size
    if size != meta.get("size", size) or ("sha256" in meta and h.hexdigest() != meta["sha256"]):
        raise DataError(f"{redact(uri)}: {src.rsplit('/', 1)[-1]} does not match the manifest "
                         f"({size} bytes read; the manifest says {meta.get('size')}): altered or incomplete")


def fetch(uri: str, dest) -> Path:
    """Download what ``uri`` names (through its manifest) into the local directory ``dest``;
    returns the local path of it (``dest`` or, for one file, ``dest/NAME``)."""
    dest = Path(dest)
    r = resolve(uri)
    if r.single:
        target = dest / r.root.rsplit("/", 1)[-1]
        _download(r.fs, r.root, target, r.files[""], uri)
        return target
    for rel, meta in r.files.items():
        _download(r.fs, f"{r.root}/{rel}", dest / rel, meta, uri)
    return dest


def read_text(path: Location) -> str:
    """A file's text (UTF-8), local or through a published output's manifest."""
    if not path.is_uri:
        return path.path.read_text(encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory(prefix="neurcam-fetch-") as tmp:
            return fetch(str(path), tmp).read_text(encoding="utf-8")
    except NotPublishedError:  # a plain object (a record written with one PUT, such as recluster.json)
        from pyarrow.fs import FileType
        fs, target = path.filesystem()
        if fs.get_file_info(target).type != FileType.File:
            raise
        with fs.open_input_stream(target) as f:
            return f.read().decode()


@contextmanager
def local_copy(path: Location):
    """A local path to read ``path`` from: itself when local, else a temporary download (through
    the manifest) that is removed on exit."""
    if not path.is_uri:
        yield path.path
        return
    tmp = tempfile.mkdtemp(prefix="neurcam-fetch-")
    try:
        yield fetch(str(path), Path(tmp) / "copy")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def put_file(path: Path, uri: str) -> None:
    """Copy one local file to ``uri`` as a plain object (one PUT: whole or absent). For files that
    nothing reads through a manifest: logs with a unique name, a record such as recluster.json."""
    fs, target = filesystem(uri)
    with open(path, "rb") as src, fs.open_output_stream(target) as dst:
        for block in iter(lambda: src.read(CHUNK), b""):
            dst.write(block)


def put_text(text: str, uri: str) -> None:
    """``put_file`` for a text held in memory."""
    fs, target = filesystem(uri)
    with fs.open_output_stream(target) as dst:
        dst.write(text.encode())


__all__ = ["MANIFEST", "NotPublishedError", "Resolved", "SUCCESS", "check_target", "commit", "fetch", "local_copy",
           "publish_dir", "put_file", "put_text", "read_manifest", "read_text", "resolve", "write_version"]

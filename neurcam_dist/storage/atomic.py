"""Outputs appear complete or not at all: directories are built beside their target and renamed
into place, files are written through a temporary sibling, and an existing good output is only
replaced by a complete one."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from ..errors import ConfigError
from ..uris import Location, is_uri, local
from .published import STALE_S, publish_dir, put_text, write_version


def atomic_directory(target: Location, write, marker: str | None = None, own: set[str] | None = None) -> None:
    """Build a directory with ``write(tmp_dir)`` and move it to ``target`` in one rename
    (an existing ``target`` is moved aside first and removed only after the swap). With
    ``marker``, a non-empty existing ``target`` that lacks that file is not ours: refuse. With
    ``own`` (the names this kind of output holds), a ``target`` holding anything else was written
    by another command (a training run with its checkpoints, say): refuse rather than delete it.
    An object-store URI is built locally and published as a new version (``published``)."""
    if target.is_uri:
        _publish_built(str(target), write, refuse_foreign=marker is not None or own is not None)
        return
    target = target.path
    recover(target)
    if marker and target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / marker).exists())):
        raise ConfigError(f"{target} exists and was not written by neurcam (no {marker}): refusing to replace it")
    if own is not None and target.is_dir():
        foreign = sorted(p.name for p in target.iterdir() if p.name not in own and not p.name.startswith("."))
        if foreign:
            raise ConfigError(f"{target} holds {foreign}, which this command did not write (another command's "
                             f"output?): refusing to replace it; choose another output directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_dataset(output: Location, write, marker: str | None = None) -> None:
    """``write(root, filesystem)`` (a Ray Data ``write_parquet`` and its side files) into a new
    local directory swapped in whole (``atomic_directory``), or into a new published version on an
    object store, where the shards go straight to the bucket."""
    if output.is_uri:
        write_version(str(output), write)
        return
    from pyarrow.fs import LocalFileSystem
    atomic_directory(output, lambda tmp: write(str(tmp), LocalFileSystem()), marker=marker)


def _publish_built(uri: str, write, refuse_foreign: bool = False, mirror: bool = False) -> None:
    """Build the output with ``write(tmp_dir)`` locally, then publish it at ``uri`` (``published``)."""
    tmp = Path(tempfile.mkdtemp(prefix="neurcam-stage-"))
    try:
        write(tmp)
        publish_dir(tmp, uri, refuse_foreign=refuse_foreign, mirror=mirror)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def recover(target: Path) -> Path | None:
    """Undo a swap cut short between its two renames (the old directory moved aside, the new one
    not yet in place): put the newest complete aside copy back. Returns what was restored."""
    target = Path(target)
    if target.exists() or not target.parent.is_dir():
        return None
    aside = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in aside:
        if old.is_dir():
            os.replace(old, target)
            return target
    return None


def write_text_atomic(path: Location, text: str) -> None:
    """Write a file through a temporary sibling and one rename; on an object store (``path`` a
    URI) as one object (a PUT is whole or absent)."""
    if path.is_uri:
        put_text(text, str(path))
        return
    path = path.path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


VERSIONS = ".versions"
CURRENT = "current"


def _fsync_tree(root: Path) -> None:
    """Flush every file and directory under ``root`` (and ``root``) to disk before it is published."""
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(d))


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync a directory
        pass
    finally:
        os.close(fd)


def _link(path: Path, target: str) -> None:
    """Make ``path`` a symlink to ``target`` in one rename (a directory there is moved aside first)."""
    tmp = path.with_name(f".{path.name}.link-{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    if path.is_dir() and not path.is_symlink():  # an output written before versioned outputs
        aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(path, aside)
        os.replace(tmp, path)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(tmp, path)


def check_writable(out: Location, what: str = "output") -> None:
    """Before any work: a local ``out`` (a folder to create or replace) can be written. The
    nearest existing folder above it (and ``out`` itself when it exists) must take a new file:
    a read-only folder or file system, a file where a folder is needed (``out`` under a file),
    or no permission is a ``ConfigError`` naming ``what`` and the path, not a traceback after
    the training. (Tried by writing and removing a hidden file: permission bits do not tell,
    for root or on a read-only mount.) An object-store URI is looked up once (an endpoint that is
    closed, hangs or denies access fails here, in bounded time: ``uris.bounded_s3``); whether a
    write is allowed shows when the output is published."""
    if out.is_uri:
        fs, root = out.filesystem()
        fs.get_file_info(root)
        return
    target = out.path.absolute()
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{what}: {out} is a file, not a folder: choose another output folder")
    above = target.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ConfigError(f"{what}: {out} cannot be created: {above} is a file, not a folder")
    for folder in [above] + ([target] if target.is_dir() else []):
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".neurcam-write-check-")
        except OSError as exc:
            raise ConfigError(f"{what}: {out} cannot be written: {folder}: {exc.strerror or exc} (choose a "
                              f"folder this user can write)") from None
        os.close(fd)
        os.unlink(probe)


PREDICTIONS_MARKER = "_neurcam_predictions.json"   # written last into a finished predictions folder
MODEL_MARKERS = ("manifest.json", "weights.safetensors")   # modeldir's files: a folder holding both is a model


def refuse_overwrite(out: Location | None, *, inputs=(), what: str = "--output", ours=None) -> None:
    """Before any work, refuse (``ConfigError`` naming ``what``) an output that would destroy
    what this command did not write: one of its ``inputs`` (or a path inside an input folder,
    which the next read would take as data, or a folder holding an input), a path inside a
    model folder or a run's published set (``OUT/config.json`` is the model's file, not a
    place for a query), or an existing file for which ``ours(first_bytes)`` is False (a user's
    CSV, not a query that an earlier ``export`` wrote). Object-store URIs are left to the
    publication, which refuses foreign content itself."""
    if out is None or out.is_uri:
        return
    target = out.path.absolute()
    real = Path(os.path.realpath(target))
    for given in inputs:
        if given is None or is_uri(given):
            continue
        src = Path(os.path.realpath(Path(local(given)).expanduser()))
        if real == src or src in real.parents or (src.exists() and real in src.parents):
            relation = ("is" if real == src else "is inside" if src in real.parents else "holds")
            raise ConfigError(f"{what} {out} {relation} the input {given}: writing it would destroy or "
                              f"mix with the data; choose an output outside the input")
    for folder in [real.parent, *real.parent.parents]:
        if folder.name == VERSIONS or all((folder / m).is_file() for m in MODEL_MARKERS):
            raise ConfigError(f"{what} {out} is inside {'a run output' if folder.name == VERSIONS else 'the model folder'} "
                              f"{folder.parent if folder.name == VERSIONS else folder}: writing there would "
                              f"corrupt it; choose a path outside")
    if ours is not None and target.is_file():
        with open(target, "rb") as f:
            head = f.read(256)
        if not ours(head):
            raise ConfigError(f"{what} {out} exists and was not written by neurcam: refusing to replace it "
                              f"(remove it, or choose another name)")


def check_room(out: Location, need: int, what: str = "--output") -> None:
    """Before any work: refuse (``ConfigError``) a local ``out`` whose file system has less free
    space than ``need`` bytes (what the command will write, estimated), naming both."""
    if out.is_uri:
        return
    above = out.path.absolute()
    while not above.exists() and above != above.parent:
        above = above.parent
    free = shutil.disk_usage(above).free
    if free < need:
        raise ConfigError(f"{what} {out}: {free / 2**20:,.0f} MiB free on its disk, and this run writes about "
                          f"{need / 2**20:,.0f} MiB: free space or choose another output")


def refuse_foreign_output(out: Location, own: set[str]) -> None:
    """Refuse (``ConfigError``) a local ``out`` that is a file, or a folder holding names other
    than ``own`` (and hidden ones): another command's output, or a user's files. Called before
    any work, so nothing is trained only to be refused. (On an object store the publication
    itself refuses foreign content.)"""
    if out.is_uri:
        return
    target = out.path
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} exists and was not written by neurcam (a file, not a folder): refusing to "
                          f"replace it; choose another output directory")
    if target.is_dir():
        foreign = sorted(p.name for p in target.iterdir()
                         if p.name not in own and not p.name.startswith(".") and not _published_link(p))
        if foreign:
            raise ConfigError(f"{target} holds {foreign}, which this command did not write (another command's "
                              f"output?): refusing to replace it; choose another output directory")


def _published_link(p: Path) -> bool:
    """A name a neurcam run published (``current``, or a link through it: ``report``,
    ``assignments.csv``): another run may replace the set it belongs to."""
    if not p.is_symlink():
        return False
    target = os.readlink(p)
    return (p.name == CURRENT and target.startswith(f"{VERSIONS}/")) or target.startswith(f"{CURRENT}/")


def _drop_dangling(out: Path) -> None:
    """After a new set is published: the links of the previous set that the new one lacks
    (a fit's ``assignments.csv`` and ``report`` under a ``train`` run) are removed, so no
    name points at nothing."""
    for p in out.iterdir():
        if p.is_symlink() and os.readlink(p).startswith(f"{CURRENT}/") and not p.exists():
            p.unlink(missing_ok=True)


def write_run_output(out: Location, write, extra: tuple[str, ...] = (), own: set[str] | None = None) -> None:
    """Publish ``model/``, ``metrics.json``, ``config.json`` (and ``extra`` files) in ``out`` as one set.

    ``write(dir)`` fills a new version directory ``out/.versions/ID``; after it is complete and
    fsynced, one atomic rename points ``out/current`` at it. ``out/model``, ``out/metrics.json``
    ... are fixed links through ``current``, so a reader sees the whole old set or the whole new
    one, never run 2's metrics beside run 1's model, and the set a reader resolved stays on disk
    until the next publication (one re-run's grace); a crash before the flip leaves the previous
    set in place (a later write removes the half-written version once it is a day old: until
    then it may be another writer's, still being written). Several writers may publish into one
    output at once (overlapping re-clusterings): each flip and clean-up holds a lock, and the last
    to publish wins. Other content of
    ``out`` (``_ray/`` checkpoints, ``trials/``, ``report/``) is left alone. On an object store
    (``out`` a URI) the set is published as one version through a manifest instead, with a copy of
    each top-level file at ``out/NAME`` (``aws s3 cp OUT/metrics.json -`` works). With ``own``
    (the names this kind of run writes), ``out`` must hold nothing else (``refuse_foreign_output``)."""
    if own is not None:
        refuse_foreign_output(out, own | {CURRENT})
    if out.is_uri:
        _publish_built(str(out), write, refuse_foreign=own is not None, mirror=True)
        return
    out = out.path
    versions = out / VERSIONS
    versions.mkdir(parents=True, exist_ok=True)
    version = versions / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    tmp = versions / f".tmp-{version.name}"
    tmp.mkdir()
    try:
        write(tmp)
        _fsync_tree(tmp)
        with _flip_lock(versions):   # one writer at a time from here: several may publish into one output
            replaced = _current_version(out)
            os.replace(tmp, version)
            _link(out / CURRENT, f"{VERSIONS}/{version.name}")
            for name in ("model", "config.json", "metrics.json", *extra):
                if not (out / name).is_symlink():
                    _link(out / name, f"{CURRENT}/{name}")
            _drop_dangling(out)
            _fsync_dir(out)
            _drop_replaced(versions, {version.name, replaced})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _current_version(out: Path) -> str | None:
    """The version folder ``out/current`` points at now (None before the first publication)."""
    try:
        return os.readlink(out / CURRENT).rsplit("/", 1)[-1]
    except OSError:
        return None


def _drop_replaced(versions: Path, keep: set) -> None:
    """Under the flip lock, after a set is published: every complete set but those in ``keep``
    (the one just published and the one it replaced: a reader that resolved ``current`` before the
    flip may still be reading it, so it goes at the next publication, as the object-store layout
    keeps the version it replaced: ``published.commit``), and a
    ``.tmp-`` folder only when it is a day old (a writer that died; a live one may be writing it,
    as the object-store layout's staging rule says: ``published.STALE_S``). A later writer's set
    is never there yet: it is still a ``.tmp-`` folder, or waits for the lock."""
    stale = time.time() - STALE_S
    for old in versions.iterdir():
        if old.name in keep or old.name == LOCK:
            continue
        if old.name.startswith(".tmp-"):
            try:
                if old.stat().st_mtime > stale:
                    continue
            except FileNotFoundError:   # its writer published or gave up meanwhile
                continue
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


LOCK = ".lock"


@contextmanager
def _flip_lock(versions: Path):
    """An exclusive lock on ``versions/.lock`` (``fcntl.flock``: released by the kernel when the
    holder dies) for the rename, the link flip and the clean-up of one publication."""
    import fcntl
    with open(versions / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)

"""Outputs appear complete or not at all: directories are built beside their target and renamed
into place, files are written through a temporary sibling, and an existing good output is only
replaced by a complete one."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path


def atomic_directory(target: Path, write, marker: str | None = None) -> None:
    """Build a directory with ``write(tmp_dir)`` and move it to ``target`` in one rename
    (an existing ``target`` is moved aside first and removed only after the swap). With
    ``marker``, a non-empty existing ``target`` that lacks that file is not ours: refuse."""
    target = Path(target)
    if marker and target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / marker).exists())):
        raise ValueError(f"{target} exists and was not written by neurcam (no {marker}): refusing to replace it")
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


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file through a temporary sibling and one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_run_output(out: Path, write, extra: tuple[str, ...] = ()) -> None:
    """Replace only ``model/``, ``metrics.json``, ``config.json`` (and ``extra`` files) inside
    ``out`` (which may also hold ``_ray/`` checkpoints or trials), each through a temporary
    sibling and a rename. ``write(tmp)`` puts them in a scratch directory first."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".write-") as tmp:
        write(Path(tmp))
        for name in ("config.json", "metrics.json", *extra):
            write_text_atomic(out / name, (Path(tmp) / name).read_text())
        atomic_directory(out / "model", lambda d: _move_contents(Path(tmp) / "model", d), marker="manifest.json")


def _move_contents(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        os.replace(f, dst / f.name)

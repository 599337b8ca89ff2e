"""Model directories: ``config.json`` + ``weights.safetensors`` + ``manifest.json`` (sha256 of both).

The format only: a JSON config and a flat tensor state in, the same out. It knows nothing of the
estimator that fills the config. No pickle anywhere, so loading a model cannot run code; writing
is atomic (``atomic.atomic_directory``), so a crash never leaves a half-written model and an
existing good model is only replaced by a complete one.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from ..errors import ModelFileError
from ..redaction import redact
from .atomic import atomic_directory, recover
from .published import NotPublishedError, local_copy
from ..uris import Location

FORMAT = "neurcam-dist/model"
FORMAT_VERSION = 2   # 2: the training rows' labels and the importance/profile summary
READS = (1, 2)
FILES = ("config.json", "weights.safetensors")
MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_model_dir(path: Location, config: dict, state: dict[str, torch.Tensor]) -> None:
    """Write ``config`` (JSON-ready) and ``state`` (tensors) as a model directory at ``path``."""
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, **config}
    state = {k: v.detach().cpu().contiguous() for k, v in state.items()}

    def write(tmp: Path) -> None:
        # serialized in memory, written by Python: a full disk is an OSError naming the file,
        # not safetensors' own error
        (tmp / "weights.safetensors").write_bytes(save(state))
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        manifest = {"format": FORMAT, "files": {f: _sha256(tmp / f) for f in FILES}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))

    atomic_directory(path, write, marker=MANIFEST)


def read_model_dir(path: Location) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, state)`` of the model directory at ``path`` (local, or a URI read through its
    published manifest), after checking every file against the model's manifest; ``ValueError``
    names what is missing, altered or of another version."""
    if path.is_uri:
        try:
            with local_copy(path) as copy:
                return _read_local(copy, shown=redact(str(path)))
        except NotPublishedError as exc:
            raise ModelFileError(f"no model at {redact(str(path))}: {exc}") from None
    return _read_local(path.path)


def _read_local(path: Path, shown: str | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    name = shown or path
    if recover(path) is not None:
        warnings.warn(f"{path}: an interrupted save had left the model aside; restored it", UserWarning, stacklevel=2)
    if not path.is_dir():
        raise ModelFileError(f"no model directory at {name}")
    missing = [f for f in (*FILES, MANIFEST) if not (path / f).is_file()]
    if missing:
        raise ModelFileError(f"{name} is not a complete NeurCAM model: missing {missing}")
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{name}/{MANIFEST} is not valid JSON: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ModelFileError(f"{name} is not a NeurCAM model directory (format {manifest.get('format')!r})")
    for f in FILES:
        expected = manifest.get("files", {}).get(f)
        if expected != _sha256(path / f):
            raise ModelFileError(f"{name}/{f} was altered or corrupted: its sha256 does not match {MANIFEST}")
    config = json.loads((path / "config.json").read_text())
    if config.get("format_version") not in READS:
        raise ModelFileError(f"{name}: model format version {config.get('format_version')} is not supported "
                             f"(this version reads {', '.join(map(str, READS))}): load it with the neurcam-dist "
                             f"that wrote it ({config.get('written_by', 'unknown')}) or newer")
    try:
        weights = load_file(str(path / "weights.safetensors"))
    except Exception as exc:  # noqa: BLE001 - safetensors' own error types, named in one line
        raise ModelFileError(f"{name}/weights.safetensors was altered or replaced: it is not a readable "
                             f"safetensors file ({str(exc).splitlines()[0][:200]})") from None
    return config, weights

"""Model directories: ``config.json`` + ``weights.safetensors`` + ``manifest.json`` (sha256 of both).

No pickle anywhere, so loading a model cannot run code. Saving is atomic: the directory is built
beside the target and renamed into place, so a crash never leaves a half-written model and an
existing good model is only replaced by a complete one.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

FORMAT = "neurcam-dist/model"
FORMAT_VERSION = 1
FILES = ("config.json", "weights.safetensors")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


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


def save_estimator(est, path) -> None:
    est._check_fitted()
    path = Path(path)
    params = _jsonable(est.get_params())
    net = est.net_
    config = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "params": params,
        "n_single": net.single.n, "n_pairs": net.pairs.n,
        "feature_names": list(est.feature_names_in_),
        "mean": est.mean_.tolist(), "scale": est.scale_.tolist(),
        "repr_dim": int(est.repr_dim_), "uses_features_as_repr": bool(est.uses_features_as_repr_),
        "temperatures": list(est.temperatures_),
        "channel_means": est.channel_means_.tolist(),
        "selected_features": list(est.selected_features_),
        "selected_pairs": [list(p) for p in est.selected_pairs_],
        "history": _jsonable(est.history_),
    }

    def write(tmp: Path) -> None:
        state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
        save_file(state, str(tmp / "weights.safetensors"))
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        manifest = {"format": FORMAT, "files": {f: _sha256(tmp / f) for f in FILES}}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))

    atomic_directory(path, write, marker="manifest.json")


def load_estimator(path, device: str = "cpu"):
    from .estimator import NeurCAM
    from .nbm import NeurCAMNet

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"no model directory at {path}")
    missing = [f for f in (*FILES, "manifest.json") if not (path / f).is_file()]
    if missing:
        raise ValueError(f"{path} is not a complete NeurCAM model: missing {missing}")
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}/manifest.json is not valid JSON: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a NeurCAM model directory (format {manifest.get('format')!r})")
    for f in FILES:
        expected = manifest.get("files", {}).get(f)
        if expected != _sha256(path / f):
            raise ValueError(f"{path}/{f} was altered or corrupted: its sha256 does not match manifest.json")
    config = json.loads((path / "config.json").read_text())
    if config.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: model format version {config.get('format_version')} is not supported "
                         f"(this version reads {FORMAT_VERSION})")
    params = dict(config["params"])
    params["hidden"] = tuple(params["hidden"])
    params["device"] = device
    est = NeurCAM(**params)
    state = load_file(str(path / "weights.safetensors"))
    k, r = state["centroids"].shape
    net = NeurCAMNet(len(config["feature_names"]), k, config["n_single"], config["n_pairs"], params["hidden"],
                     params["n_bases"], torch.zeros(k, r))
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{path}/weights.safetensors does not match config.json: {exc}") from exc
    est.net_ = net.to(device).eval()
    est.warmup_net_ = None
    est.feature_names_in_ = list(config["feature_names"])
    est.n_features_in_ = len(est.feature_names_in_)
    est.mean_ = np.asarray(config["mean"], np.float32)
    est.scale_ = np.asarray(config["scale"], np.float32)
    est.repr_dim_ = config["repr_dim"]
    est.uses_features_as_repr_ = config["uses_features_as_repr"]
    est.temperatures_ = tuple(config["temperatures"])
    est.channel_means_ = np.asarray(config["channel_means"], dtype=np.float64)
    est.history_ = config["history"]
    est.n_iter_ = est.history_.get("n_epochs")
    est.cluster_centers_ = net.centroids.detach().cpu().numpy()
    est._set_selection()
    return est

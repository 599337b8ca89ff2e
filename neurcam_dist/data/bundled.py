"""Data that ships with the product: scikit-learn's bundled 8x8 digits, and DataFrames written as
Parquet shards (the demo, ``neurcam generate``, the benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..storage import atomic_directory

DATASET_MARKER = "_neurcam_dataset.json"


def digits_frame() -> pd.DataFrame:
    """scikit-learn's bundled 8x8 digits (1,797 rows, 64 pixel features), with its label column."""
    from sklearn.datasets import load_digits
    d = load_digits()
    df = pd.DataFrame(d.data, columns=[f"px{i // 8}_{i % 8}" for i in range(64)])
    df["label"] = d.target
    return df


def write_frame_shards(df: pd.DataFrame, out: str, n_files: int) -> list[str]:
    """A DataFrame as ``n_files`` Parquet shards with an ``id`` column, written atomically."""
    if n_files < 1:
        raise ValueError(f"--files must be >= 1, got {n_files}")

    def write(tmp: Path) -> None:
        frame = df.assign(id=np.arange(len(df)))
        for i, part in enumerate(np.array_split(np.arange(len(frame)), n_files)):
            frame.iloc[part].to_parquet(tmp / f"part-{i:05d}.parquet", index=False)
        (tmp / DATASET_MARKER).write_text(json.dumps({"rows": len(frame), "files": n_files}))

    atomic_directory(Path(out), write, marker=DATASET_MARKER)
    return sorted(str(p) for p in Path(out).glob("*.parquet"))

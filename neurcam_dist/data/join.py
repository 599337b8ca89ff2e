"""Joining a features dataset to an embeddings dataset on a key, once, into Parquet shards."""
from __future__ import annotations

import os

from ..config import DataConfig
from ..storage.published import write_version
from ..uris import Location
from .reading import read_source
from .sources import DataError, auto_features, footers, resolve


def join_embeddings(cfg: DataConfig, staging: Location) -> DataConfig:
    """Join the features and embeddings datasets on ``cfg.embedding_table.key`` into Parquet shards under
    ``staging`` (once; every epoch then streams plain files). Every feature row must find exactly
    one embedding row: otherwise ``DataError`` with the counts of missing and duplicate keys.
    Returns the data config of the joined shards."""
    import shutil

    from ray.data.aggregate import Count

    key = cfg.embedding_table.key
    emb_cols = [cfg.embedding] if isinstance(cfg.embedding, str) else list(cfg.embedding)
    fsrc, esrc = resolve(cfg.path), resolve(cfg.embedding_table.path)
    ffoot, efoot = footers(fsrc), footers(esrc)
    for foot, cols, what in ((ffoot, [key], "features"), (efoot, [key, *emb_cols], "embeddings")):
        for f, schema, _ in foot:
            missing = [c for c in cols if schema.get_field_index(c) < 0]
            if missing:
                raise DataError(f"{f} ({what} dataset): no column(s) {missing}; columns: {schema.names}")
    clash = [c for c in emb_cols if c in ffoot[0][1].names]
    if clash:
        raise DataError(f"columns {clash} exist in both the features and the embeddings datasets")
    n_rows = sum(n for _, _, n in ffoot)
    parts = max(2, min(64, n_rows // 500_000 + 1))
    feats = read_source(fsrc, None)
    embs = read_source(esrc, [key, *emb_cols])
    # as many hash partitions as the join below (Ray Data's default, 200, is hundreds of tasks)
    counts = (embs.select_columns([key]).groupby(key, num_partitions=parts)
              .aggregate(Count(alias_name="n")).materialize())
    dup = counts.filter(expr="n > 1")
    n_dup_keys = dup.count()
    n_dup_rows = int(dup.sum("n") or 0) if n_dup_keys else 0
    missing = feats.select_columns([key]).join(counts, "left_anti", parts, on=(key,)).count()
    if missing or n_dup_keys:
        raise DataError(f"joining features to embeddings on {key!r}: {missing} of {n_rows} feature row(s) have no "
                        f"embedding (missing keys); {n_dup_keys} key(s) appear more than once in the embeddings "
                        f"dataset ({n_dup_rows} rows): every feature row needs exactly one embedding")
    features = cfg.features
    if features is None:  # decided before the join, so the key never becomes a feature
        reserved = {key, *emb_cols, *(c for c in (cfg.label, cfg.id) if c)}
        features = auto_features(ffoot[0][1], reserved)
    joined = feats.join(embs, "inner", parts, on=(key,))
    final = staging / "joined"
    if final.is_uri:  # an object store: a new version behind a manifest (storage.published)
        write_version(str(final), lambda root, fs: joined.write_parquet(root, filesystem=fs))
        return cfg.model_copy(update={"path": str(final), "embedding_table": None, "features": features})
    os.makedirs(staging, exist_ok=True)
    tmp = os.path.join(staging, f".joined.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    joined.write_parquet(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return cfg.model_copy(update={"path": str(final), "embedding_table": None, "features": features})

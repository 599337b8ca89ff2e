"""Sharded Parquet input: resolve, validate, profile and stream it without holding it in memory.

``plan`` reads only Parquet footers (schemas, row counts) and settles which columns are the
features and which the representation. ``profile`` is one streaming pass (a Ray Data
aggregation) that counts NaN / inf / null per file and column and computes the standardization
moments. Nothing trains until both have passed, so a bad shard fails in seconds with the file
and column named, not hours into a run.
"""
from __future__ import annotations

import glob as _glob
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .config import DataConfig

PATH_COLUMN = "__neurcam_path"  # Ray Data's include_paths column, renamed away from user columns
ID_LIKE = ("id", "label")
MAX_LISTED = 20


class DataError(ValueError):
    """Input data that cannot be trained on; the message names the file(s) and column(s)."""


# ---------------------------------------------------------------------------- locating files
@dataclass
class Source:
    spec: object                       # what the config said (str or list)
    files: list[str]
    filesystem: pa.fs.FileSystem | None = None

    def short(self, f: str) -> str:
        return os.path.basename(f) if f else "?"


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


def _footers(src: Source) -> list[tuple[str, pa.Schema, int]]:
    def read(f):
        try:
            meta = pq.read_metadata(f, filesystem=src.filesystem)
            return f, meta.schema.to_arrow_schema(), meta.num_rows
        except Exception as exc:  # noqa: BLE001 - reported with the file name
            raise DataError(f"{f}: not a readable Parquet file ({exc})") from exc
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(read, src.files))


# ---------------------------------------------------------------------------- the plan
def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)


def _is_float_list(t: pa.DataType) -> bool:
    return ((pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
            and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)))


@dataclass
class Plan:
    """Which files and columns a run reads; everything downstream takes this, not the config."""

    source: Source
    features: list[str]
    repr_kind: str                      # "features" | "list" | "columns"
    repr_columns: list[str]
    repr_dim: int
    label: str | None
    id: str | None
    n_rows: int
    rows_per_file: dict[str, int]
    schema_hash: str
    joined_from: dict | None = None
    key: str | None = None

    @property
    def columns(self) -> list[str]:
        """Columns the training stream needs."""
        cols = list(self.features)
        if self.repr_kind != "features":
            cols += [c for c in self.repr_columns if c not in cols]
        return cols

    def describe(self) -> str:
        rep = {"features": "the standardized features", "list": f"list column {self.repr_columns[0]!r}",
               "columns": f"{len(self.repr_columns)} columns"}[self.repr_kind]
        return (f"{self.n_rows:,} rows in {len(self.source.files)} file(s); {len(self.features)} features; "
                f"representation: {rep} (dim {self.repr_dim})" + (f"; label {self.label!r}" if self.label else ""))


def plan(cfg: DataConfig, *, embeddings_plan_source: Source | None = None) -> Plan:
    """Validate schemas and choose columns from the Parquet footers alone (no data is read)."""
    src = resolve(cfg.path)
    footers = _footers(src)
    n_rows = sum(n for _, _, n in footers)
    if n_rows == 0:
        raise DataError(f"the dataset at {cfg.path!r} is empty: {len(footers)} file(s), 0 rows")
    first = footers[0][1]
    repr_in_features = cfg.embeddings is None and cfg.embedding is not None
    reserved = {c for c in (cfg.label, cfg.id) if c} | ({cfg.embeddings.key} if cfg.embeddings else set())
    if repr_in_features:
        reserved |= set([cfg.embedding] if isinstance(cfg.embedding, str) else cfg.embedding)
    if cfg.features:
        features = list(cfg.features)
    else:
        features = [f.name for f in first if f.name not in reserved and f.name.lower() not in ID_LIKE
                    and f.name.lower() != "embedding" and _is_number(f.type)]
        if not features:
            raise DataError(f"{footers[0][0]}: no numeric feature columns (columns: {first.names}); "
                            f"name them in data.features")
    dup = sorted({c for c in features if features.count(c) > 1})
    if dup:
        raise DataError(f"data.features lists {dup} more than once")
    needed = {c: "feature" for c in features}
    for c, role in ((cfg.label, "label"), (cfg.id, "id"), (cfg.embeddings.key if cfg.embeddings else None, "key")):
        if c:
            needed[c] = role
    repr_kind, repr_columns, repr_dim = "features", list(features), len(features)
    if repr_in_features:
        if isinstance(cfg.embedding, str):
            needed[cfg.embedding] = "embedding"
            repr_kind, repr_columns = "list", [cfg.embedding]
        else:
            for c in cfg.embedding:
                needed.setdefault(c, "embedding")
            repr_kind, repr_columns, repr_dim = "columns", list(cfg.embedding), len(cfg.embedding)
    problems = []
    list_sizes = set()
    for f, schema, _ in footers:
        for col, role in needed.items():
            idx = schema.get_field_index(col)
            if idx < 0:
                problems.append(f"{f}: no column {col!r} ({role}); columns: {schema.names}")
                continue
            t = schema.field(idx).type
            if role == "feature" or (role == "embedding" and repr_kind == "columns"):
                if not _is_number(t):
                    problems.append(f"{f}: column {col!r} ({role}) has type {t}, expected a number")
            elif role == "embedding":
                if not _is_float_list(t):
                    problems.append(f"{f}: column {col!r} (embedding) has type {t}, expected list<float>")
                elif pa.types.is_fixed_size_list(t):
                    list_sizes.add(t.list_size)
    if problems:
        raise DataError(_listing("schema problems", problems))
    if repr_kind == "list" and len(list_sizes) > 1:
        raise DataError(f"embedding column {cfg.embedding!r} has different fixed lengths across files: "
                        f"{sorted(list_sizes)}")
    if repr_kind == "list":
        repr_dim = list_sizes.pop() if list_sizes else _first_list_length(src, cfg.embedding)
    h = hashlib.sha256(str(sorted((c, str(first.field(c).type)) for c in needed)).encode()).hexdigest()[:16]
    return Plan(source=src, features=features, repr_kind=repr_kind, repr_columns=repr_columns, repr_dim=repr_dim,
                label=cfg.label, id=cfg.id, n_rows=n_rows, rows_per_file={f: n for f, _, n in footers},
                schema_hash=h)


def _first_list_length(src: Source, col: str) -> int:
    for f in src.files:
        pf = pq.ParquetFile(f, filesystem=src.filesystem)
        for i in range(pf.num_row_groups):
            lengths = pc.list_value_length(pf.read_row_group(i, columns=[col])[col]).drop_null()
            if len(lengths):
                return int(lengths[0].as_py())
    raise DataError(f"embedding column {col!r} holds no values")


def _listing(what: str, items: list[str]) -> str:
    more = f"\n  ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"{len(items)} {what}:\n  " + "\n  ".join(items[:MAX_LISTED]) + more


# ---------------------------------------------------------------------------- reading with Ray Data
def read(p: Plan, columns: list[str] | None = None, *, with_paths: bool = False, ordered: bool = False):
    return read_source(p.source, list(dict.fromkeys(columns if columns is not None else p.columns)),
                       with_paths=with_paths, ordered=ordered)


def read_source(src: Source, columns: list[str], *, with_paths: bool = False, ordered: bool = False):
    """A Ray Data dataset over exactly the resolved files and the named columns. ``ordered``:
    blocks come out in file order, not completion order, so a seeded sample or a one-worker
    training stream is the same from run to run."""
    import ray.data
    ds = ray.data.read_parquet(src.files, filesystem=src.filesystem, columns=columns,
                               include_paths=with_paths, file_extensions=None)
    if ordered:
        ds.context.execution_options.preserve_order = True
    if with_paths:
        ds = ds.rename_columns({"path": PATH_COLUMN})
    return ds


def representation(table: pa.Table, p: Plan) -> np.ndarray:
    """(n, R) float32 representation of an Arrow batch (zero-copy for fixed-size lists)."""
    if p.repr_kind == "list":
        col = table[p.repr_columns[0]].combine_chunks()
        if pa.types.is_fixed_size_list(col.type):
            values = col.flatten()
        else:
            lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
            if (lengths != p.repr_dim).any():
                raise DataError(f"embedding column {p.repr_columns[0]!r}: a row has length "
                                f"{int(lengths[lengths != p.repr_dim][0])}, expected {p.repr_dim}")
            values = pc.list_flatten(col)
        return values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, p.repr_dim)
    cols = p.features if p.repr_kind == "features" else p.repr_columns
    return matrix(table, cols)


def matrix(table: pa.Table, columns: list[str]) -> np.ndarray:
    out = np.empty((table.num_rows, len(columns)), dtype=np.float32)
    for j, c in enumerate(columns):
        out[:, j] = table[c].to_numpy(zero_copy_only=False)
    return out


# ---------------------------------------------------------------------------- the profile pass
@dataclass
class Profile:
    n_rows: int
    mean: np.ndarray
    std: np.ndarray
    bad: dict = field(default_factory=dict)        # (file, column) -> [nan, inf, null]
    lengths: dict = field(default_factory=dict)    # file -> [min, max] list length

    def scale(self) -> np.ndarray:
        return np.where(self.std > 0, self.std, 1.0).astype(np.float32)


def _profile_aggregate(p: Plan):
    from ray.data.aggregate import AggregateFnV2
    from ray.data.block import BlockAccessor

    d = len(p.features)
    checked = list(dict.fromkeys(p.features + ([] if p.repr_kind == "features" else p.repr_columns)
                                 + [c for c in (p.label, p.id) if c]))

    class ProfileAgg(AggregateFnV2):
        """Per block: Chan's (count, mean, M2) of every feature, bad-value counts per file/column."""

        def __init__(self):
            super().__init__("profile", zero_factory=self.zero, on=None, ignore_nulls=False)

        def aggregate_block(self, block):
            t = BlockAccessor.for_block(block).to_arrow()
            acc = self.zero()
            paths = t[PATH_COLUMN]
            files = pc.unique(paths).to_pylist()
            for path in files:
                part = t.filter(pc.equal(paths, path)) if len(files) > 1 else t
                acc = self.combine(acc, self._one_file(part, path))
            return acc

        # Per-file tallies travel as JSON text: Ray may store accumulators as Arrow structs, which
        # would fill every file key of every block with nulls.
        @staticmethod
        def zero():
            return {"n": 0, "mean": [0.0] * d, "m2": [0.0] * d, "bad": "{}", "len": "{}"}

        def _one_file(self, t, path):
            bad = {}
            for c in checked:
                col = t[c]
                if p.repr_kind == "list" and c == p.repr_columns[0]:
                    arr = col.combine_chunks()
                    lengths = pc.list_value_length(arr).drop_null()
                    lens = {path: [int(pc.min(lengths).as_py()), int(pc.max(lengths).as_py())]} if len(lengths) else {}
                    vals = pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(np.float64)
                    nulls = arr.null_count
                else:
                    vals = col.to_numpy(zero_copy_only=False)
                    nulls = col.null_count
                    if not np.issubdtype(vals.dtype, np.number):
                        if nulls:
                            bad[f"{path}\0{c}"] = [0, 0, nulls]
                        continue
                    vals = vals.astype(np.float64)
                nan = int(np.isnan(vals).sum()) - nulls
                inf = int(np.isinf(vals).sum())
                if nan or inf or nulls:
                    bad[f"{path}\0{c}"] = [nan, inf, nulls]
            x = matrix(t, p.features).astype(np.float64)
            x = x[np.isfinite(x).all(1)]
            n = len(x)
            mean = x.mean(0) if n else np.zeros(d)
            m2 = ((x - mean) ** 2).sum(0) if n else np.zeros(d)
            return {"n": n, "mean": mean.tolist(), "m2": m2.tolist(), "bad": json.dumps(bad),
                    "len": json.dumps(lens if p.repr_kind == "list" else {})}

        def combine(self, a, b):
            na, nb = a["n"], b["n"]
            n = na + nb
            ma, mb = np.asarray(a["mean"]), np.asarray(b["mean"])
            if n:
                delta = mb - ma
                mean = ma + delta * nb / n
                m2 = np.asarray(a["m2"]) + np.asarray(b["m2"]) + delta ** 2 * na * nb / n
            else:
                mean, m2 = ma, np.asarray(a["m2"])
            bad = json.loads(a["bad"])
            for k, v in json.loads(b["bad"]).items():
                bad[k] = [x + y for x, y in zip(bad.get(k, [0, 0, 0]), v)]
            lens = json.loads(a["len"])
            for k, (lo, hi) in json.loads(b["len"]).items():
                old = lens.get(k)
                lens[k] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
            return {"n": n, "mean": mean.tolist(), "m2": m2.tolist(), "bad": json.dumps(bad),
                    "len": json.dumps(lens)}

        def finalize(self, acc):
            return acc

    return ProfileAgg()


def profile(p: Plan) -> Profile:
    """One streaming pass over the data: refuse NaN / inf / null, wrong list lengths; return the
    standardization moments. Raises ``DataError`` naming each offending file and column."""
    ds = read(p, p.columns + [c for c in (p.label, p.id) if c and c not in p.columns], with_paths=True)
    acc = ds.aggregate(_profile_aggregate(p))["profile"]
    bad = {tuple(k.split("\0", 1)): v for k, v in json.loads(acc["bad"]).items()}
    if bad:
        items = [f"{f}: column {c!r}: {nan} NaN, {inf} inf, {null} null" for (f, c), (nan, inf, null)
                 in sorted(bad.items())]
        raise DataError(_listing("file/column(s) with missing or non-finite values", items))
    if p.repr_kind == "list":
        lengths = json.loads(acc["len"])
        wrong = [f"{f}: embedding lengths {lo}..{hi}" for f, (lo, hi) in sorted(lengths.items())
                 if lo != p.repr_dim or hi != p.repr_dim]
        if wrong:
            raise DataError(_listing(f"file(s) whose {p.repr_columns[0]!r} rows are not all of length "
                                     f"{p.repr_dim}", wrong))
    n = acc["n"]
    if n != p.n_rows:
        raise DataError(f"the profile pass saw {n} rows but the Parquet footers say {p.n_rows}")
    m2 = np.asarray(acc["m2"])
    return Profile(n_rows=n, mean=np.asarray(acc["mean"], np.float64), std=np.sqrt(m2 / max(n, 1)),
                   bad=bad, lengths=json.loads(acc["len"]))


# ---------------------------------------------------------------------------- joins
def join_embeddings(cfg: DataConfig, staging: str) -> DataConfig:
    """Join the features and embeddings datasets on ``cfg.embeddings.key`` into Parquet shards under
    ``staging`` (once; every epoch then streams plain files). Every feature row must find exactly
    one embedding row: otherwise ``DataError`` with the counts of missing and duplicate keys.
    Returns the data config of the joined shards."""
    import shutil

    import ray.data
    from ray.data.aggregate import Count

    key = cfg.embeddings.key
    emb_cols = [cfg.embedding] if isinstance(cfg.embedding, str) else list(cfg.embedding)
    fsrc, esrc = resolve(cfg.path), resolve(cfg.embeddings.path)
    ffoot, efoot = _footers(fsrc), _footers(esrc)
    for footers, cols, what in ((ffoot, [key], "features"), (efoot, [key, *emb_cols], "embeddings")):
        for f, schema, _ in footers:
            missing = [c for c in cols if schema.get_field_index(c) < 0]
            if missing:
                raise DataError(f"{f} ({what} dataset): no column(s) {missing}; columns: {schema.names}")
    clash = [c for c in emb_cols if c in ffoot[0][1].names]
    if clash:
        raise DataError(f"columns {clash} exist in both the features and the embeddings datasets")
    n_rows = sum(n for _, _, n in ffoot)
    parts = max(2, min(64, n_rows // 500_000 + 1))
    feats = ray.data.read_parquet(fsrc.files, filesystem=fsrc.filesystem, file_extensions=None)
    embs = ray.data.read_parquet(esrc.files, filesystem=esrc.filesystem, columns=[key, *emb_cols],
                                 file_extensions=None)
    counts = embs.select_columns([key]).groupby(key).aggregate(Count(alias_name="n")).materialize()
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
        features = [f.name for f in ffoot[0][1] if f.name not in reserved and f.name.lower() not in ID_LIKE
                    and _is_number(f.type)]
    os.makedirs(staging, exist_ok=True)
    tmp = os.path.join(staging, f".joined.tmp-{os.getpid()}")
    final = os.path.join(staging, "joined")
    shutil.rmtree(tmp, ignore_errors=True)
    feats.join(embs, "inner", parts, on=(key,)).write_parquet(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return cfg.model_copy(update={"path": final, "embeddings": None, "features": features})


# ---------------------------------------------------------------------------- sampling
def sample(p: Plan, n: int, seed: int, columns: list[str]) -> pa.Table:
    """A uniform random sample of at most ``n`` rows as an Arrow table: each block keeps a
    fraction ``n / rows`` (Ray Data ``random_sample``), so only about ``n`` rows ever reach the
    driver, drawn from every file alike; the small excess is cut at random."""
    ds = read(p, columns, ordered=True)
    if n < p.n_rows:
        ds = ds.random_sample(n / p.n_rows, seed=seed)
    batches = [b for b in ds.iter_batches(batch_format="pyarrow", batch_size=65536)]
    table = pa.concat_tables(batches) if batches else None
    if table is None or table.num_rows < min(n, p.n_rows) // 2:  # a small fraction of a small dataset
        table = pa.concat_tables(list(read(p, columns, ordered=True).limit(n).iter_batches(batch_format="pyarrow")))
    if table.num_rows > n:
        keep = np.sort(np.random.default_rng(seed).choice(table.num_rows, n, replace=False))
        table = table.take(pa.array(keep))
    return table

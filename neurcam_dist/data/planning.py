"""The plan of a run: which files and columns it reads, settled from the Parquet footers alone.

Nothing trains until the plan (schemas, column roles, row counts) and the profile pass (values)
have passed, so a bad shard fails in seconds with the file and column named, not hours into a run.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..columns import DATE_UNIT
from ..config import DataConfig
from ..validation import first_names, missing_columns_note, refuse_lookalike_names
from .sources import (PATH_COLUMN, ROW_KEY, DataError, Source, auto_features, find_vocabulary, footers,
                      is_category, is_float_list, is_number, listing, resolve)


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
    text: dict | None = None            # the vocabulary of a featurize-text dataset (its terms are features)
    categorical: list[str] = dataclasses.field(default_factory=list)   # categorical features, in feature order

    @property
    def columns(self) -> list[str]:
        """Columns the training stream needs."""
        cols = list(self.features)
        if self.repr_kind != "features":
            cols += [c for c in self.repr_columns if c not in cols]
        return cols

    def without(self, names) -> "Plan":
        """This plan without the features ``names`` (text columns the profile pass found to be no
        category): neither read nor modelled, the representation of standardized features too."""
        drop = set(names)
        features = [c for c in self.features if c not in drop]
        own = self.repr_kind == "features"
        return dataclasses.replace(self, features=features, categorical=[c for c in self.categorical if c not in drop],
                                   repr_columns=list(features) if own else self.repr_columns,
                                   repr_dim=len(features) if own else self.repr_dim)

    def as_categorical(self, names) -> "Plan":
        """This plan with the numeric features ``names`` read as categorical (the profile pass
        found two whole-number values in each: ``columns.FLAG_RULE``)."""
        more = set(self.categorical) | set(names)
        return dataclasses.replace(self, categorical=[c for c in self.features if c in more])

    def judged(self, cfg: DataConfig) -> list[str]:
        """The categorical features taken from the schema (no ``data.features``, no vocabulary, not
        named in ``data.categorical``): the profile pass judges whether each is a category at all
        (``job.not_categories``), as ``fit`` does its text columns."""
        if cfg.features or self.text is not None:
            return []
        named = set(cfg.categorical or [])
        return [c for c in self.categorical if c not in named]

    def describe(self) -> str:
        """One line for the console: rows, files, features, embedding, label and id."""
        rep = {"features": "the standardized features", "list": f"list column {self.repr_columns[0]!r}",
               "columns": f"{len(self.repr_columns)} columns"}[self.repr_kind]
        return (f"{self.n_rows:,} rows in {self.source.describe()}; {len(self.features)} features "
                f"({first_names(self.features)}); "
                f"representation: {rep} (dim {self.repr_dim})" + (f"; label {self.label!r}" if self.label else ""))


def plan(cfg: DataConfig) -> Plan:
    """Validate schemas and choose columns from the Parquet footers alone (no data is read): each
    column role (features, label, id, embedding) checked against every file (``_check_types``),
    so an error names the first file and column that fail."""
    src = resolve(cfg.path)
    foot = footers(src)
    n_rows = sum(n for _, _, n in foot)
    if n_rows == 0:
        raise DataError(f"the dataset at {cfg.path!r} is empty: {len(foot)} file(s), 0 rows")
    first = foot[0][1]
    repr_in_features = cfg.embedding_table is None and cfg.embedding is not None
    unknown = [c for c in (cfg.exclude or []) if c not in first.names]
    if unknown:
        raise DataError(f"data.exclude names {unknown}, which {foot[0][0]} does not have"
                        f"{missing_columns_note(unknown, first.names)}")
    reserved = ({c for c in (cfg.label, cfg.id) if c} | ({cfg.embedding_table.key} if cfg.embedding_table else set())
                | set(cfg.exclude or []))
    if repr_in_features:
        reserved |= set([cfg.embedding] if isinstance(cfg.embedding, str) else cfg.embedding)
    text = find_vocabulary(cfg.path)
    if cfg.features:
        features = list(cfg.features)
    elif text is not None:
        features = list(text["columns"])
    else:
        features = auto_features(first, reserved)
        if not features:
            raise DataError(f"{foot[0][0]}: no numeric feature columns (columns: {first.names}); "
                            f"name them in data.features")
    dup = sorted({c for c in features if features.count(c) > 1})
    if dup:
        raise DataError(f"data.features lists {dup} more than once")
    refuse_lookalike_names(features, f"{foot[0][0]}: the features")
    categorical = _categorical(cfg, features, first)
    needed = {c: "feature" for c in features}
    for c, role in ((cfg.label, "label"), (cfg.id, "id"), (cfg.embedding_table.key if cfg.embedding_table else None, "key")):
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
    own = sorted(c for c in needed if c in (PATH_COLUMN, ROW_KEY))
    if own:
        raise DataError(f"column(s) {own} have names neurcam-dist uses for its own columns: rename them")
    list_sizes = _check_types(foot, needed, categorical, repr_kind)
    if repr_kind == "list" and len(list_sizes) > 1:
        raise DataError(f"embedding column {cfg.embedding!r} has different fixed lengths across files: "
                        f"{sorted(list_sizes)}")
    if repr_kind == "list":
        repr_dim = list_sizes.pop() if list_sizes else _first_list_length(src, cfg.embedding)
    h = hashlib.sha256(str(sorted((c, str(first.field(c).type)) for c in needed)).encode()).hexdigest()[:16]
    return Plan(source=src, features=features, repr_kind=repr_kind, repr_columns=repr_columns, repr_dim=repr_dim,
                label=cfg.label, id=cfg.id, n_rows=n_rows, rows_per_file={f: n for f, _, n in foot},
                schema_hash=h, text=_vocabulary_only(text, features), categorical=categorical)


def _categorical(cfg: DataConfig, features: list[str], first: pa.Schema) -> list[str]:
    """The categorical features: those ``data.categorical`` names and those of a category type
    (text, dictionary, boolean) in the first file; ``data.numeric`` (flags read as numbers) is
    checked here: features, none also categorical or of a category type."""
    named = list(cfg.categorical or [])
    for field, given in (("categorical", named), ("numeric", list(cfg.numeric or []))):
        stray = [c for c in given if c not in features]
        if stray:
            raise DataError(f"data.{field} names {stray}, which are not features ({features[:20]})")
    both = sorted(set(named) & set(cfg.numeric or []))
    if both:
        raise DataError(f"data.categorical and data.numeric both name {both}: name each column in one")
    typed = [c for c in cfg.numeric or [] if first.get_field_index(c) >= 0 and is_category(first.field(c).type)]
    if typed:
        raise DataError(f"data.numeric names {typed}, whose cells are text, dictionary or boolean: they cannot be "
                        f"read as numbers")
    return [c for c in features if c in named or (first.get_field_index(c) >= 0 and is_category(first.field(c).type))]


def _check_types(foot: list, needed: dict, categorical: list[str], repr_kind: str) -> set:
    """Every needed column (name -> role) in every file against its role's types: a categorical
    feature text, a dictionary, booleans or integer codes, and of one kind in every file; another
    feature a number; an embedding a list of numbers. Raises ``DataError`` listing each problem
    (the missing columns first); returns the fixed embedding lengths seen."""
    first_file, first = foot[0][0], foot[0][1]
    problems = []
    missing: dict[tuple[str, str], list] = {}   # (column, role) -> [(file, schema)]: one line each
    list_sizes = set()
    for f, schema, _ in foot:
        for col, role in needed.items():
            idx = schema.get_field_index(col)
            if idx < 0:
                missing.setdefault((col, role), []).append((f, schema))
                continue
            t = schema.field(idx).type
            if role == "feature" and col in categorical:
                if not (is_category(t) or is_number(t) and not pa.types.is_floating(t)):
                    problems.append(f"{f}: column {col!r} (categorical feature) has type {t}, expected text, "
                                    f"a dictionary, booleans or integer codes")
                elif is_category(t) != is_category(first.field(col).type):
                    problems.append(f"{f}: column {col!r} is {t} here but {first.field(col).type} in {first_file}: "
                                    f"give it one type in every file")
            elif role == "feature" or (role == "embedding" and repr_kind == "columns"):
                if role == "feature" and pa.types.is_temporal(t):
                    problems.append(f"{f}: column {col!r} (feature) holds dates and times ({t}), which a Ray job "
                                    f"does not read: add a column of {DATE_UNIT} (what `neurcam fit` and the "
                                    f"estimator read a date as) and name that one")
                elif not is_number(t):
                    problems.append(f"{f}: column {col!r} ({role}) has type {t}, expected a number")
            elif role == "embedding":
                if not is_float_list(t):
                    problems.append(f"{f}: column {col!r} (embedding) has type {t}, expected list<float>")
                elif pa.types.is_fixed_size_list(t):
                    list_sizes.add(t.list_size)
    problems = [_missing_column(col, role, where, len(foot)) for (col, role), where in missing.items()] + problems
    if problems:
        raise DataError(listing("schema problem(s)", problems))
    return list_sizes


def _missing_column(col: str, role: str, where: list, n_files: int) -> str:
    """One line for a column missing from some files (the first file, how many more, the nearest
    name and the first file's columns), so that a wide dataset of many files does not bury the
    answer in a column list per file."""
    f, schema = where[0]
    others = f" and {len(where) - 1} other file(s) of {n_files}" if len(where) > 1 else ""
    return f"{f}{others}: no column {col!r} ({role}){missing_columns_note([col], schema.names)}"


def _vocabulary_only(text: dict | None, features: list[str]) -> dict | None:
    """What a model keeps of a dataset's vocabulary: the analyzer and the terms, when its features
    are term columns (without the dataset summary)."""
    if text is None or not set(features) <= set(text["columns"]):
        return None
    return {k: v for k, v in text.items() if k != "dataset"}


def _first_list_length(src: Source, col: str) -> int:
    from .parquet_files import ParquetFiles
    for table in ParquetFiles(src, [col], keys=False).here():   # lazily: up to the first batch with a value
        lengths = pc.list_value_length(table[col]).drop_null()
        if len(lengths):
            return int(lengths[0].as_py())
    raise DataError(f"embedding column {col!r} holds no values")

"""The fitted model as one standard SQL query, so a warehouse assigns clusters without Python.

Built from the table-only scorer (``Explanation``'s shape tables): every term is its shape graph,
interpolated linearly between grid points (bilinearly for a pair) and constant outside the grid,
exactly as ``TableScorer`` does; the logits are the intercept plus every term; the cluster is the
first largest logit's stable id. The text uses only what DuckDB, SQLite, PostgreSQL and the
common warehouses share: ``CASE``, ``CAST``, ``TRIM``, ``LOWER``, arithmetic, comparisons, quoted
identifiers, subqueries and one ``LIMIT ... OFFSET 0`` (no ``LEAST``/``GREATEST``, no arrays, no
window functions). A categorical feature is read as its level codes (a level the model never
saw takes the pooled level's, as the scorer does). A NULL cell takes its term's "missing" value when the model learned one; with a model
that reads no missing cells a row with a NULL feature gets a NULL cluster, never a guessed one.

Every feature is read through a cast to the kind it was trained on, so the query agrees with
``predict`` whatever the table's column types (an all-TEXT table, as SQLite's ``.import --csv``
and many raw loads make it, as well as a typed one): a numeric feature is ``CAST(col AS DOUBLE
PRECISION)``, a categorical one compares ``CAST(col AS VARCHAR)`` with its levels (numbers as
numbers, ``true``/``false``/``1``/``0`` alike for booleans), and a cell that is NULL, blank or one
of ``columns.missing_tokens`` is missing, as it is at every other door.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, DataError

LOGIT = "__neurcam_logit_{}"


def quote(name: str) -> str:
    """A SQL identifier, double-quoted (embedded quotes doubled)."""
    return '"' + str(name).replace('"', '""') + '"'


def table_name(name: str) -> str:
    """``NAME`` or ``schema.NAME`` (each part quoted); ``ConfigError`` for an empty one."""
    parts = [p for p in str(name).split(".")]
    if not name or any(not p.strip() for p in parts):
        raise ConfigError(f"--table {name!r}: give a table name (schema.table allowed)")
    return ".".join(quote(p) for p in parts)


def number(x: float) -> str:
    """A float literal every engine reads as a real (never integer division in SQLite)."""
    x = float(x)
    if not math.isfinite(x):
        raise ConfigError(f"the model's shape tables hold a non-finite value ({x}): it cannot be exported")
    text = f"{x:.12g}"
    return text if any(c in text for c in ".eE") else text + ".0"


def _bin(col: str, grid: np.ndarray) -> str:
    """The grid cell of ``col`` (0 .. len(grid) - 2; the first or last cell outside the grid), as
    ``interp_main`` / ``interp_pair`` pick it."""
    if len(grid) <= 2:
        return "0"
    return ("CASE " + " ".join(f"WHEN {col} < {number(grid[i + 1])} THEN {i}" for i in range(len(grid) - 2))
            + f" ELSE {len(grid) - 2} END")


def _by_bin(b: str, values: list[str]) -> str:
    """``values[bin]`` for the integer column ``b``."""
    if len(values) == 1:
        return values[0]
    return f"CASE {b} " + " ".join(f"WHEN {i} THEN {v}" for i, v in enumerate(values[:-1])) + f" ELSE {values[-1]} END"


def _fraction(col: str, b: str, grid: np.ndarray) -> str:
    """Where ``col`` (clipped to the grid) lies in its cell ``b``: 0 at the cell's start, 1 at its end."""
    if len(grid) == 1:
        return "0.0"
    lo = [number(grid[i]) for i in range(len(grid) - 1)]
    width = [number(grid[i + 1] - grid[i] if grid[i + 1] > grid[i] else 1.0) for i in range(len(grid) - 1)]
    return f"({col} - ({_by_bin(b, lo)})) / ({_by_bin(b, width)})"


def literal(level: str, dtype: str) -> str:
    """A level as the SQL literal its column holds: ``'text'`` (quotes doubled), ``TRUE`` /
    ``FALSE``, or a number."""
    if dtype == "bool":
        return "TRUE" if level == "True" else "FALSE"
    if dtype == "number":
        try:
            return number(float(level)) if "." in level or "e" in level.lower() else str(int(level))
        except ValueError:
            pass
    return "'" + str(level).replace("'", "''") + "'"


# After the typed reading: an OFFSET keeps SQLite (and PostgreSQL) from inlining it into the levels
# above, which would copy each cast into every one of its many uses there (SQLite: gigabytes to plan)
FENCE = "\nLIMIT 9223372036854775807 OFFSET 0"
TRUE_TEXT, FALSE_TEXT = ("true", "1", "1.0"), ("false", "0", "0.0")   # a boolean as text, lower-cased


def _missing(col: str, levels=(), missing_values=()) -> str:
    """The test for a cell the model reads as missing: NULL, blank text (empty or spaces only),
    one of ``columns.missing_tokens`` (but a token the model learned as a level, ``levels``) or,
    outer spaces aside, one of the model's ``missing_values``, on the cell as text whatever the
    column's type."""
    from ..columns import missing_tokens
    text = f"CAST({col} AS VARCHAR)"
    tokens = ", ".join(literal(t, "text") for t in sorted(missing_tokens() - set(levels)))
    own = ", ".join(literal(t, "text") for t in sorted(set(missing_values)))
    return (f"{col} IS NULL OR TRIM({text}) = '' OR {text} IN ({tokens})"
            + (f" OR TRIM({text}) IN ({own})" if own else ""))


def _typed(col: str, levels: list[str] | None, dtype: str, missing_values=()) -> str:
    """A feature's cell as the model reads it: a numeric one as a number (NULL when missing), a
    categorical one as its level code (NULL when missing; a level the model never saw is
    ``other``'s code), whatever type the table gives the column."""
    if levels is None:
        return f"CASE WHEN {_missing(col, (), missing_values)} THEN NULL ELSE CAST({col} AS DOUBLE PRECISION) END"
    kept, other = levels[:-2], len(levels) - 2
    if dtype == "bool":
        text = f"LOWER(TRIM(CAST({col} AS VARCHAR)))"
        words = {"True": TRUE_TEXT, "False": FALSE_TEXT}
        whens = " ".join(f"WHEN {text} IN ({', '.join(literal(w, 'text') for w in words.get(v, (v,)))}) "
                         f"THEN {number(i)}" for i, v in enumerate(kept))
    elif dtype == "number":
        whens = " ".join(f"WHEN CAST({col} AS DOUBLE PRECISION) = {number(float(v))} THEN {number(i)}"
                         for i, v in enumerate(kept))
    else:
        whens = " ".join(f"WHEN CAST({col} AS VARCHAR) = {literal(v, 'text')} THEN {number(i)}"
                         for i, v in enumerate(kept))
    missing = _missing(col, kept if dtype == "text" else (), missing_values)
    return f"CASE WHEN {missing} THEN NULL {whens} ELSE {number(other)} END"


def _clipped(col: str, grid: np.ndarray) -> str:
    """``col`` held inside the grid (the shape is constant outside it)."""
    return f"CASE WHEN {col} < {number(grid[0])} THEN {number(grid[0])} WHEN {col} > {number(grid[-1])} " \
           f"THEN {number(grid[-1])} ELSE {col} END"


def main_term(b: str, f: str, values: np.ndarray) -> str:
    """One cluster's contribution of a one-feature term in cell ``b`` at fraction ``f``
    (``f`` appears once: engines that inline subqueries, SQLite's, copy it once)."""
    if len(values) == 1:
        return number(values[0])
    start = [number(values[i]) for i in range(len(values) - 1)]
    rise = [number(values[i + 1] - values[i]) for i in range(len(values) - 1)]
    return f"(({_by_bin(b, start)}) + {f} * ({_by_bin(b, rise)}))"


def pair_term(ba: str, fa: str, bb: str, fb: str, values: np.ndarray) -> str:
    """One cluster's contribution of a pair term: bilinear in cell (``ba``, ``bb``)."""
    na, nb = max(values.shape[0] - 1, 1), max(values.shape[1] - 1, 1)
    coef: list[list[str]] = [[], [], [], []]
    for i in range(na):
        for j in range(nb):
            i1, j1 = min(i + 1, values.shape[0] - 1), min(j + 1, values.shape[1] - 1)
            v00, v01, v10, v11 = values[i, j], values[i, j1], values[i1, j], values[i1, j1]
            for out, v in zip(coef, (v00, v10 - v00, v01 - v00, v11 - v10 - v01 + v00), strict=False):
                out.append(number(v))
    cell = f"{ba} * {nb} + {bb}"
    c00, c10, c01, c11 = (f"({_by_bin(cell, c)})" for c in coef)
    return f"({c00} + {fa} * {c10} + {fb} * {c01} + {fa} * {fb} * {c11})"


def _term_sql(t, c: int, x, b, f) -> str:
    """One cluster's contribution of term ``t``; ``x``/``b``/``f``: its axes' value, cell and
    fraction column names. A term with missing values takes them where its value is NULL."""
    if t.kind == "main":
        body = main_term(b[0], f[0], t.values[:, c])
        if t.missing is None:
            return body
        return f"(CASE WHEN {x[0]} IS NULL THEN {number(t.missing[c])} ELSE {body} END)"
    body = pair_term(b[0], f[0], b[1], f[1], t.values[:, :, c])
    if t.missing is None:
        return body
    m = t.missing
    return (f"(CASE WHEN {x[0]} IS NULL AND {x[1]} IS NULL THEN {number(m['both'][c])} "
            f"WHEN {x[0]} IS NULL THEN {main_term(b[1], f[1], np.asarray(m['a'])[:, c])} "
            f"WHEN {x[1]} IS NULL THEN {main_term(b[0], f[0], np.asarray(m['b'])[:, c])} ELSE {body} END)")


def to_sql(explanation, table: str, keep: list[str] | None = None, dtypes: dict | None = None,
           order_by: str | None = None, missing_values: tuple = ()) -> str:
    """``SELECT <keep columns>, <cluster expression> AS cluster FROM table`` for ``explanation``
    (``NeurCAM.explain()``): ``keep`` defaults to the model's feature columns; the query's
    cluster column is ``NULL`` for a row with a NULL feature the model has no missing value for.
    ``dtypes``: feature -> how a categorical column's cells are written (``text``, ``bool``,
    ``number``; default text); ``order_by``: a column the rows are sorted by; ``missing_values``:
    the model's own missing tokens (``ColumnCoding.missing_values``).

    Nested selects compute each term axis once: the feature clipped to the term's grid, its
    grid cell, its position in the cell; then the logits (lookups per term and cluster) and the
    first largest one's stable id.
    """
    features = list(explanation.feature_names)
    keep = list(dict.fromkeys(keep if keep else features))
    carried = [quote(c) for c in dict.fromkeys(keep + features)]
    typed = {f: quote(f"__neurcam_v{j}") for j, f in enumerate(features)}   # each feature as the model reads it
    axes = [(n, a, typed[f], t.grids[a]) for n, t in enumerate(explanation.terms) for a, f in enumerate(t.features)]
    internal = {kind: {(n, a): f"__neurcam_{kind}{n}_{a}" for n, a, _, _ in axes} for kind in "xbf"}
    k = explanation.n_clusters
    logits = [LOGIT.format(c) for c in range(k)]
    check_names(explanation, keep, [*(v for d in internal.values() for v in d.values()), *logits,
                                    *(v.strip('"') for v in typed.values())])
    named = {kind: {key: quote(v) for key, v in d.items()} for kind, d in internal.items()}
    (xs, bins, frac), logit = (named[kind] for kind in "xbf"), [quote(v) for v in logits]

    def select(cols: list[str], source: str) -> str:
        return "SELECT " + ",\n  ".join(cols) + f"\nFROM {source}"

    levels, dtypes = explanation.categorical_levels(), dtypes or {}
    feature = {(n, a): f for n, t in enumerate(explanation.terms) for a, f in enumerate(t.features)}

    def read(n, a, col, g):
        return f"{col if feature[n, a] in levels else _clipped(col, g)} AS {xs[n, a]}"

    level0 = select(carried + [f"{_typed(quote(f), levels.get(f), dtypes.get(f, 'text'), missing_values)} AS {v}"
                               for f, v in typed.items()], table_name(table)) + FENCE
    carried = carried + list(typed.values())
    level1 = select(carried + [read(*axis) for axis in axes], f"(\n{level0}\n) AS neurcam_typed")
    level2 = select(carried + list(xs.values()) + [f"{_bin(xs[n, a], g)} AS {bins[n, a]}" for n, a, _, g in axes],
                    f"(\n{level1}\n) AS neurcam_clipped")
    level3 = select(carried + list(xs.values()) + list(bins.values())
                    + [f"{_fraction(xs[n, a], bins[n, a], g)} AS {frac[n, a]}" for n, a, _, g in axes],
                    f"(\n{level2}\n) AS neurcam_cells")
    sums = []
    for c in range(k):
        parts = [number(explanation.intercept[c])]
        for n, t in enumerate(explanation.terms):
            axis = range(len(t.features))
            parts.append(_term_sql(t, c, [xs[n, a] for a in axis], [bins[n, a] for a in axis],
                                   [frac[n, a] for a in axis]))
        sums.append("\n    + ".join(parts) + f" AS {logit[c]}")
    level4 = select(carried + sums, f"(\n{level3}\n) AS neurcam_positions")
    choose, strict = _choice(explanation, features, logit, typed)
    nulls = ("the cluster is NULL where a feature is NULL" if strict else
             "a NULL cell takes its term's missing value")
    head = (f"-- NeurCAM cluster assignment (neurcam export): {k} clusters, {len(explanation.terms)} terms over "
            f"{len(features)} features; {nulls}\n")
    order = f"\nORDER BY {quote(order_by)}" if order_by else ""
    return head + select([quote(c) for c in keep] + [choose], f"(\n{level4}\n) AS neurcam_scored") + order + "\n"


def check_names(explanation, keep: list[str], internal: list[str]) -> None:
    """Refuse, before a query is built, what no SQL engine can hold: two columns whose names are
    one once written (SQLite and DuckDB read identifiers without regard to case, so ``Plan`` and
    ``plan`` are one column), a kept column named ``cluster`` (the query's output), a column named
    like one of the query's working columns (``internal``), and a NUL character in a column name or a
    level (no engine's text holds one); each named."""
    written = list(dict.fromkeys([*keep, *explanation.feature_names]))
    by_fold: dict[str, list[str]] = {}
    for name in written:
        by_fold.setdefault(str(name).casefold(), []).append(str(name))
    same = [names for names in by_fold.values() if len(names) > 1]
    if same:
        raise DataError(f"columns {' and '.join(map(repr, same[0]))} are one column in SQL (SQLite and DuckDB read "
                        f"names without regard to case): rename one in the table and fit again, or leave it out of "
                        f"--keep")
    if any(str(n).casefold() == "cluster" for n in keep):
        raise ConfigError("--keep cannot name 'cluster': the query's own output column")
    own = {v.casefold() for v in internal}
    ours = [n for n in written if str(n).casefold() in own]
    if ours:
        raise DataError(f"column {ours[0]!r} has the name of one of the query's own columns (__neurcam_...): "
                        f"rename it in the table")
    for name in written:
        if "\x00" in str(name):
            raise DataError(f"column {name!r} has a NUL character in its name, which no SQL engine holds: rename it")
    for name, levels in explanation.categorical_levels().items():
        bad = [lv for lv in levels if "\x00" in str(lv)]
        if bad:
            raise DataError(f"column {name!r} has a level with a NUL character, {bad[0]!r}, which no SQL engine's "
                            f"text holds: replace the character in the table and fit again (or export --format rules)")


def _choice(explanation, features: list[str], logit: list[str], typed: dict) -> tuple[str, list[str]]:
    """The cluster column: NULL where a feature the model reads no missing value for is missing
    (its ``typed`` column NULL), else the first largest logit's stable id; and those strict features."""
    ids, k = explanation.cluster_ids, explanation.n_clusters
    reads_missing = {f for t in explanation.terms if t.missing is not None for f in t.features}
    strict = [f for f in features if f not in reads_missing]
    picks = ["WHEN " + " OR ".join(f"{typed[f]} IS NULL" for f in strict) + " THEN NULL"] if strict else []
    for c in range(k - 1):
        picks.append("WHEN " + " AND ".join(f"{logit[c]} >= {logit[j]}" for j in range(c + 1, k)) + f" THEN {ids[c]}")
    return f"CASE {' '.join(picks)} ELSE {ids[-1]} END AS cluster", strict


def run_agreement(explanation, frame, expected, dtypes: dict | None = None,
                  missing_values: tuple = ()) -> dict[str, float]:
    """Run the query in SQLite (and DuckDB when it is installed) on ``frame``'s rows and return,
    per engine, the share of rows whose cluster equals ``expected`` (``predict``'s ids): the
    agreement of the text itself, not of the Python scorer it was built from."""
    expected = np.asarray(expected)
    clusters = engine_clusters(explanation, frame, dtypes, missing_values)
    return {engine: float(np.mean(got == expected)) for engine, got in clusters.items()}


TEXT_ENGINE = "sqlite-text"   # SQLite on a copy whose every column is TEXT, as `.import --csv` loads a CSV


def engine_clusters(explanation, frame, dtypes: dict | None = None, missing_values: tuple = ()) -> dict[str, np.ndarray]:
    """The query's cluster for each of ``frame``'s rows (in order; NaN where NULL), run in SQLite
    on the typed rows and on a copy of them whose every column is TEXT (the cells as a CSV writes
    them, blanks as empty text: a raw load), and in DuckDB when it is installed: engine -> clusters."""
    import io
    import sqlite3

    import pandas as pd
    row = "__neurcam_row"
    table = frame.reset_index(drop=True).copy()
    for c in table.columns:   # pandas' nullable and category columns as plain values
        if isinstance(table[c].dtype, pd.CategoricalDtype):
            table[c] = table[c].astype(object)
    text = pd.read_csv(io.StringIO(table.to_csv(index=False)), dtype=str, keep_default_na=False)
    text.columns = table.columns
    table[row] = text[row] = np.arange(len(table))
    query = to_sql(explanation, "neurcam_rows", keep=[row], dtypes=dtypes, order_by=row, missing_values=missing_values)
    out = {}
    for engine, rows, types in (("sqlite", table, None), (TEXT_ENGINE, text, {c: "TEXT" for c in frame.columns})):
        with sqlite3.connect(":memory:") as con:
            rows.to_sql("neurcam_rows", con, index=False, dtype=types)
            out[engine] = pd.read_sql_query(query, con)["cluster"].to_numpy()
    try:
        import duckdb
    except ImportError:
        return out
    con = duckdb.connect()
    try:
        con.register("neurcam_frame", table)
        con.execute("CREATE TABLE neurcam_rows AS SELECT * FROM neurcam_frame")
        out["duckdb"] = con.execute(query).fetchdf()["cluster"].to_numpy()
    finally:
        con.close()
    return out

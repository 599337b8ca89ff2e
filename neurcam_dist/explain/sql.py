"""The fitted model as one standard SQL query, so a warehouse assigns clusters without Python.

Built from the table-only scorer (``Explanation``'s shape tables): every term is its shape graph,
interpolated linearly between grid points (bilinearly for a pair) and constant outside the grid,
exactly as ``TableScorer`` does; the logits are the intercept plus every term; the cluster is the
first largest logit's stable id. The text uses only what DuckDB, SQLite, PostgreSQL and the
common warehouses share: ``CASE``, arithmetic, comparisons, quoted identifiers and a subquery (no
``LEAST``/``GREATEST``, no arrays, no window functions). A row with a NULL feature gets a NULL
cluster, never a guessed one.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError

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
            for out, v in zip(coef, (v00, v10 - v00, v01 - v00, v11 - v10 - v01 + v00)):
                out.append(number(v))
    cell = f"{ba} * {nb} + {bb}"
    c00, c10, c01, c11 = (f"({_by_bin(cell, c)})" for c in coef)
    return f"({c00} + {fa} * {c10} + {fb} * {c01} + {fa} * {fb} * {c11})"


def to_sql(explanation, table: str, keep: list[str] | None = None) -> str:
    """``SELECT <keep columns>, <cluster expression> AS cluster FROM table`` for ``explanation``
    (``NeurCAM.explain()``): ``keep`` defaults to the model's feature columns; the query's
    cluster column is ``NULL`` for a row with a NULL feature.

    Nested selects compute each term axis once: the feature clipped to the term's grid, its
    grid cell, its position in the cell; then the logits (lookups per term and cluster) and the
    first largest one's stable id.
    """
    features = list(explanation.feature_names)
    keep = list(dict.fromkeys(keep if keep else features))
    if "cluster" in keep:
        raise ConfigError("--keep cannot name 'cluster': the query's own output column")
    carried = [quote(c) for c in dict.fromkeys(keep + features)]
    axes = [(n, a, quote(f), t.grids[a]) for n, t in enumerate(explanation.terms) for a, f in enumerate(t.features)]
    named = {kind: {(n, a): quote(f"__neurcam_{kind}{n}_{a}") for n, a, _, _ in axes} for kind in "xbf"}
    xs, bins, frac = named["x"], named["b"], named["f"]
    k = explanation.n_clusters
    logit = [quote(LOGIT.format(c)) for c in range(k)]

    def select(cols: list[str], source: str) -> str:
        return "SELECT " + ",\n  ".join(cols) + f"\nFROM {source}"

    level1 = select(carried + [f"{_clipped(col, g)} AS {xs[n, a]}" for n, a, col, g in axes], table_name(table))
    level2 = select(carried + list(xs.values()) + [f"{_bin(xs[n, a], g)} AS {bins[n, a]}" for n, a, _, g in axes],
                    f"(\n{level1}\n) AS neurcam_clipped")
    level3 = select(carried + list(bins.values()) + [f"{_fraction(xs[n, a], bins[n, a], g)} AS {frac[n, a]}"
                                                     for n, a, _, g in axes], f"(\n{level2}\n) AS neurcam_cells")
    sums = []
    for c in range(k):
        parts = [number(explanation.intercept[c])]
        for n, t in enumerate(explanation.terms):
            if t.kind == "main":
                parts.append(main_term(bins[n, 0], frac[n, 0], t.values[:, c]))
            else:
                parts.append(pair_term(bins[n, 0], frac[n, 0], bins[n, 1], frac[n, 1], t.values[:, :, c]))
        sums.append("\n    + ".join(parts) + f" AS {logit[c]}")
    level4 = select(carried + sums, f"(\n{level3}\n) AS neurcam_positions")
    ids = explanation.ids
    picks = ["WHEN " + " OR ".join(f"{quote(f)} IS NULL" for f in features) + " THEN NULL"]
    for c in range(k - 1):
        picks.append("WHEN " + " AND ".join(f"{logit[c]} >= {logit[j]}" for j in range(c + 1, k)) + f" THEN {ids[c]}")
    choose = f"CASE {' '.join(picks)} ELSE {ids[-1]} END AS cluster"
    head = (f"-- NeurCAM cluster assignment (neurcam export): {k} clusters, {len(explanation.terms)} terms over "
            f"{len(features)} features; the cluster is NULL where a feature is NULL\n")
    return head + select([quote(c) for c in keep] + [choose], f"(\n{level4}\n) AS neurcam_scored") + "\n"

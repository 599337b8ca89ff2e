"""Stable cluster ids across model versions: "cluster 3" must name the same segment after a
re-clustering, or every dashboard and downstream join keyed on it silently changes meaning.

The challenger's clusters are matched to the champion's by the Hungarian algorithm on the
contingency table of their assignments of the same rows (maximum total overlap); a matched
cluster takes the champion's id, an unmatched one a fresh id above every id used before.
"""
from __future__ import annotations

import numpy as np

from .errors import ConfigError


def match_ids(table: np.ndarray, champion_ids, next_id: int) -> tuple[np.ndarray, int]:
    """``table[i, j]``: rows the challenger puts in its cluster ``i`` and the champion in its
    cluster ``j``. Returns the challenger's stable ids (one per cluster) and the next unused id.
    A pair that shares no row is not a match: that cluster is new and gets a new id."""
    table = np.asarray(table, dtype=np.int64)
    champion_ids = np.asarray(champion_ids, dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != len(champion_ids):
        raise ConfigError(f"contingency table {table.shape} does not match {len(champion_ids)} champion clusters")
    next_id = max(int(next_id), int(champion_ids.max(initial=-1)) + 1)
    ids = np.full(table.shape[0], -1, dtype=np.int64)
    from scipy.optimize import linear_sum_assignment   # on use: scoring imports this module
    rows, cols = linear_sum_assignment(table, maximize=True)
    for i, j in zip(rows, cols, strict=False):
        if table[i, j] > 0:
            ids[i] = champion_ids[j]
    for i in np.flatnonzero(ids < 0):
        ids[i] = next_id
        next_id += 1
    return ids, next_id


def size_shift(sizes_a: dict, sizes_b: dict) -> float:
    """Total variation distance between two clusterings' size shares, keyed by stable id:
    0 = the same shares, 1 = no overlap (half the sum of absolute share differences)."""
    na, nb = sum(sizes_a.values()) or 1, sum(sizes_b.values()) or 1
    keys = set(sizes_a) | set(sizes_b)
    return 0.5 * float(sum(abs(sizes_a.get(k, 0) / na - sizes_b.get(k, 0) / nb) for k in keys))


OVERLAP_TERMS = 10   # the top terms two models' overlap counts (a re-clustering's record)


def top_terms_overlap(terms_a: list[str], terms_b: list[str], k: int = OVERLAP_TERMS) -> float:
    """Share of the top-``k`` terms (by importance) the two models have in common."""
    a, b = set(terms_a[:k]), set(terms_b[:k])
    n = min(k, max(len(a), len(b)))
    return len(a & b) / n if n else 1.0

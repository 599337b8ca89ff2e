"""The one scorer of rows: each row's stable cluster id, its probabilities, and the terms that
pushed it hardest toward its cluster.

``NeurCAM.score_frame`` (and through it the registry's pyfunc and its signature) and batch
scoring (``neurcam predict``) build their output columns here, so they agree value for value.
"""
from __future__ import annotations

import numpy as np

from ..columns import OTHER
from ..numerics import softmax
from .terms import rows_from_contributions

ROW_TERMS = 3   # terms per row that batch scoring reports


# Files of scores (``fit``'s assignments, ``predict``'s output) hold one probability column per
# cluster up to this many clusters; beyond it only ``probability`` (the row's own cluster's), so
# a file's width and the memory that writes it do not grow with a model of thousands of clusters.
PROBA_COLUMNS = 64


def file_layout(ids) -> dict:
    """``assignments``' keyword arguments for a file of scores (``fit`` and ``predict`` alike):
    ``cluster``, ``probability``, ``proba_ID`` per cluster (up to ``PROBA_COLUMNS`` clusters), terms."""
    return {"probability": True, "every_proba": len(ids) <= PROBA_COLUMNS}


ROW_NUMBER = "row"   # scores without an id: each row's 0-based number in the input (over its files, in order)


def scored_columns(ids, top_terms: int = 0, *, probability: bool = False, every_proba: bool = True) -> list[str]:
    """The names of the columns ``assignments`` returns for clusters ``ids``."""
    return (["cluster"] + (["probability"] if probability else []) + [f"proba_{i}" for i in ids if every_proba]
            + [n for r in range(1, top_terms + 1) for n in (f"term_{r}", f"term_{r}_contribution")])


def refuse_collisions(kept, produced, what: str = "--carry or the id") -> None:
    """An input column kept beside the scores (``kept``: the id, carried columns) that has the
    name of a score column (``produced``) would be overwritten or duplicated in the output:
    refuse before any work (``errors.DataError``), naming both."""
    from ..errors import DataError
    clash = [str(c) for c in dict.fromkeys(kept) if str(c) in set(map(str, produced))]
    if clash:
        raise DataError(f"input column(s) {clash} (kept by {what}) have the name of an output column: the output "
                        f"holds {', '.join(produced[:4])}{', ...' if len(produced) > 4 else ''}; rename them in the "
                        f"input (or leave them out) so neither is lost")


def assignments(fitted, x: np.ndarray, *, top_terms: int = 0, every_proba: bool = True,
                probability: bool = False) -> dict[str, np.ndarray]:
    """The scored columns of raw feature rows ``x`` (fitted column order, float64), computed
    ``chunk_rows`` rows at a time into columns allocated once, so the memory beyond the output is
    bounded by a chunk (``CHUNK_BYTES`` of per-term contributions), whatever the rows, clusters
    and terms.

    Parameters
    ----------
    fitted : model.FittedNet
        The fitted state.
    x : ndarray
        (N, features) raw feature values, already validated (finite).
    top_terms : int
        How many of the terms that pushed each row hardest toward its cluster to report
        (0: none, and no per-term pass).

    Returns
    -------
    dict of str to ndarray
        In order: ``cluster`` (stable ids, int64), ``proba_ID`` for each cluster id (float64),
        then for ``r`` in 1..top_terms ``term_r`` (object: the term's name, None past the
        model's terms) and ``term_r_contribution`` (float64: its centred logit contribution
        toward the row's cluster, NaN past the model's terms). ``probability``: also the row's
        own cluster's probability, after ``cluster``; ``every_proba=False``: no ``proba_ID``
        columns (``file_layout``: what ``fit`` and ``predict`` write).
    """
    n = len(x)
    step = chunk_rows(fitted, top_terms)
    first = _assign(fitted, x[:step], top_terms, every_proba, probability)
    if n <= step:
        return first
    cols = {k: np.empty(n, dtype=v.dtype) for k, v in first.items()}
    for k, v in first.items():
        cols[k][:len(v)] = v
    for i in range(step, n, step):
        for k, v in _assign(fitted, x[i:i + step], top_terms, every_proba, probability).items():
            cols[k][i:i + len(v)] = v
    return cols


CHUNK_BYTES = 64 * 2**20   # per-chunk working memory of the scorer (contributions, logits, their copies)


def chunk_rows(fitted, top_terms: int) -> int:
    """Rows a chunk of ``assignments`` holds: its (rows, channels, K) contributions in float64,
    with their copies, within ``CHUNK_BYTES``; at least 64 rows."""
    k = len(fitted.cluster_ids)
    channels = fitted.net.single.n + fitted.net.pairs.n
    per_row = 8 * k * (4 + (3 * (channels + 1) if top_terms else 0))
    return max(64, CHUNK_BYTES // max(per_row, 1))


def _assign(fitted, x: np.ndarray, top_terms: int, every_proba: bool = True,
            probability: bool = False) -> dict[str, np.ndarray]:
    """``assignments`` of one chunk of rows."""
    if top_terms:
        rows = rows_from_contributions(fitted, fitted.contributions(x))
        logits = rows.logits
    else:
        logits = fitted.logits(x)
    proba = softmax(logits)
    raw = logits.argmax(1)
    ids = fitted.cluster_ids
    cols: dict[str, np.ndarray] = {"cluster": ids[raw].astype(np.int64)}
    if probability:
        cols["probability"] = proba[np.arange(len(x)), raw]
    for k in range(proba.shape[1] if every_proba else 0):
        cols[f"proba_{ids[k]}"] = proba[:, k]
    if top_terms:
        n = len(x)
        toward = rows.contributions[np.arange(n), :, raw]                      # (n, terms)
        order = np.argsort(-toward, axis=1, kind="stable")
        names = np.asarray(rows.terms, dtype=object)
        for r in range(top_terms):
            if r < len(names):
                idx = order[:, r]
                cols[f"term_{r + 1}"] = names[idx]
                cols[f"term_{r + 1}_contribution"] = toward[np.arange(n), idx]
            else:
                cols[f"term_{r + 1}"] = np.full(n, None, dtype=object)
                cols[f"term_{r + 1}_contribution"] = np.full(n, np.nan)
    return cols


def scored_frame(fitted, arr: np.ndarray, unseen: dict[str, int], index=None, *, top_terms: int = 0, **layout):
    """Encoded rows ``arr`` (``unseen``: levels not seen at training, by column) scored as a
    DataFrame on ``index`` (``assignments``' columns, ``layout`` its column choice), and what
    reading them met: ``{"unseen": ..., "missing": column -> missing cells}``. The estimator's
    ``score_frame_counted`` and ``neurcam predict`` on a table both end here."""
    import pandas as pd
    cols = assignments(fitted, arr, top_terms=top_terms, **layout)
    counts = np.isnan(arr).sum(axis=0)
    missing = {str(fitted.feature_names[j]): int(counts[j]) for j in np.flatnonzero(counts)}
    return pd.DataFrame(cols, index=index), {"unseen": unseen, "missing": missing}


def met_line(met: dict) -> str | None:
    """One line on what a scoring pass met (``NeurCAM.score_frame_counted``): levels not seen at
    training (scored as ``OTHER``, the pooled level) and missing cells (scored with each term's value for them)."""
    parts = [f"{what}: " + ", ".join(f"{c} ({n:,} cells)" for c, n in met[key].items())
             for key, what in (("unseen", f"levels not seen at training, scored as {OTHER}"),
                               ("missing", "missing cells, scored with each term's value for them")) if met.get(key)]
    return "; ".join(parts) or None

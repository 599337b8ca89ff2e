"""Rows as examples: a few typical rows per cluster, and any row as its terms' bars.

A row's view is what the report and ``neurcam explain --show`` show: its cluster and probability,
its values of the features the model reads, the terms that pushed it toward its cluster (or away,
as bars: the term's contribution to the row's cluster minus its mean over all clusters, in logits)
and the smallest one-feature change that would move it to its nearest other cluster
(``counterfactual.counterfactuals``: the model itself decides, and applying it moves the row).
Records are plain JSON values, kept in ``Explanation.examples``.
"""
from __future__ import annotations

import numpy as np

from ..numerics import softmax
from .counterfactual import counterfactuals
from .explanation import fmt
from .terms import rows_from_contributions

TYPICAL = 3      # typical rows per cluster
ROW_TERMS = 8    # terms per row view (largest |push| first)

NEAREST = "nearest the cluster's centroid in the clustering space (the standardized features)"
CONFIDENT = ("most confidently assigned (highest probability): the clustering space, the embeddings, "
             "is not part of the explained data")


def typical_positions(fitted, arr: np.ndarray, n: int = TYPICAL, logits: np.ndarray | None = None
                      ) -> tuple[dict[int, list[int]], dict[int, int], str]:
    """Cluster column -> the positions (in ``arr``) of its ``n`` most typical rows; cluster column
    -> its borderline row (the smallest lead of its logit over the next cluster's: the row a small
    change moves); and the rule used for "typical": nearest the centroid when the clustering
    space is the standardized features, else the highest membership probability. ``logits``: the
    rows' logits when the caller has them (no second pass over the rows)."""
    logits = fitted.logits(arr) if logits is None else logits
    labels = logits.argmax(1)
    top2 = np.sort(logits, axis=1)[:, -2:] if logits.shape[1] > 1 else np.zeros((len(arr), 2))
    margin = top2[:, 1] - top2[:, 0]
    if fitted.uses_features_as_repr:
        centroids = fitted.net.centroids.detach().double().cpu().numpy()
        x = fitted.clustering_space(arr).astype(np.float64)
        score = ((x - centroids[labels]) ** 2).sum(1)          # smaller is more typical
        basis = NEAREST
    else:
        score = -softmax(logits)[np.arange(len(arr)), labels]
        basis = CONFIDENT
    typical, border = {}, {}
    for c in range(fitted.n_clusters):
        members = np.flatnonzero(labels == c)
        typical[c] = members[np.argsort(score[members], kind="stable")[:n]].tolist()
        if len(members):
            border[c] = int(members[np.argmin(margin[members])])
    return typical, border, basis


def row_records(fitted, arr: np.ndarray, names: list[str], row_ids: list, low: np.ndarray, high: np.ndarray,
                n_terms: int = ROW_TERMS, pooled: list[dict] | None = None) -> list[dict]:
    """One record per row of ``arr``: ``row`` (its id), ``cluster`` (stable id), ``probability``,
    ``values`` (feature -> value, the features the model reads), ``terms`` (the ``n_terms``
    largest pushes toward its cluster, strongest first: ``term``, ``push`` in logits) and
    ``change`` (the smallest move of one feature, or of a pair term's two, to the nearest other
    cluster within ``[low, high]``: ``counterfactual.counterfactuals``; None when none moves it).
    ``pooled`` (``pooled_cells``): per row, the row's own value of each categorical cell the model
    scores as its pooled level, shown beside it ("Three year (other levels)")."""
    if not len(arr):
        return []
    rows = rows_from_contributions(fitted, fitted.contributions(arr))
    proba = softmax(rows.logits)
    own = rows.logits.argmax(1)
    ids = fitted.cluster_ids
    used = [i for i, n in enumerate(names) if n in _read(fitted)]
    moves = counterfactuals(fitted, arr, names, low, high, index=np.arange(len(arr)))
    out = []
    for r in range(len(arr)):
        c = int(own[r])
        push = rows.contributions[r, :, c] - rows.contributions[r].mean(1)
        order = np.argsort(-np.abs(push), kind="stable")[:n_terms]
        move = moves.iloc[r]
        change = None if not isinstance(move["feature"], str) else {
            "target": int(move["target"]), "feature": str(move["feature"]), "value": _moved(move["value"]),
            "new_value": _moved(move["new_value"]), "change": _moved(move["change"]),
            "change_std": float(move["change_std"])}
        if change and isinstance(move["feature_2"], str):
            change.update(feature_2=str(move["feature_2"]), value_2=_moved(move["value_2"]),
                          new_value_2=_moved(move["new_value_2"]), change_2=_moved(move["change_2"]))
        out.append({"row": _plain(row_ids[r]), "cluster": int(ids[c]), "probability": float(proba[r, c]),
                    "values": {names[j]: _shown(fitted, j, arr[r, j], pooled[r].get(j) if pooled else None)
                               for j in used},
                    "terms": [{"term": rows.terms[i], "push": float(push[i])} for i in order if push[i] != 0.0],
                    "change": change})
    return out


def _moved(v):
    """A counterfactual's value as JSON: a level name as it is, a number as a float (NaN: None)."""
    if isinstance(v, str):
        return v
    return None if v != v else float(v)


def _shown(fitted, j: int, value: float, own=None):
    """A row's value of feature ``j`` as the report shows it: a number, a categorical feature's
    level name (the row's ``own`` value before the pooled level's name), or None for a missing cell."""
    if fitted.coding is not None and fitted.coding.columns[j].categorical:
        level = fitted.coding.level_of(j, value)
        return f"{own} {level}" if own is not None else level
    return None if value != value else float(value)


def categorical_cells(fitted, X) -> dict[int, np.ndarray]:
    """Feature index -> its column of ``X`` as the rows wrote it (text), for each categorical
    feature the model encodes: what ``pooled_cells`` shows beside a pooled level's name. Empty
    without a column coding or rows (``X`` None)."""
    from ..validation import is_frame
    coding = fitted.coding
    if coding is None or X is None:
        return {}
    return {j: (X[c.name].to_numpy(dtype=object) if is_frame(X) else np.asarray(X)[:, j])
            for j, c in enumerate(coding.columns) if c.categorical}


def pooled_cells(fitted, cells: dict[int, np.ndarray], arr: np.ndarray, rows) -> list[dict]:
    """For each of ``rows`` (positions in ``arr``, the rows' encoding, and in ``cells``, their
    categorical columns as written: ``categorical_cells``): feature index -> the row's own value
    (text) of each categorical cell the model scores as its pooled level (``columns.OTHER``: a
    level too rare at training or never seen), which the level's name alone would hide."""
    out = [{} for _ in rows]
    rows = np.asarray(rows, dtype=np.int64)
    for j, column in cells.items():
        pooled = len(fitted.coding.columns[j].levels) - 1
        for i in np.flatnonzero(arr[rows, j] == pooled):
            out[i][j] = str(column[rows[i]])
    return out


def _read(fitted) -> set[str]:
    singles, pairs = fitted.selected()
    return set(singles) | {f for p in pairs for f in p}


def _plain(v):
    """A row id as a JSON value: numpy scalars as Python numbers, anything else not a number or
    a string (a timestamp index) as its text."""
    v = v.item() if hasattr(v, "item") else v
    return v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else str(v)


def row_text(record: dict, digits=None) -> str:
    """One row's view as console lines: cluster and probability, its terms as bars, the change."""
    digits = digits or fmt
    lines = [f"row {record['row']}: cluster {record['cluster']} (probability {record['probability']:.2f})"]
    widest = max((abs(t["push"]) for t in record["terms"]), default=0.0) or 1.0
    width = max((len(t["term"]) for t in record["terms"]), default=0)
    for t in record["terms"]:
        bar = "#" * max(1, round(20 * abs(t["push"]) / widest))
        sign = "+" if t["push"] > 0 else "-"
        values = " ".join(f"{f}={value_text(record['values'][f])}" for f in t["term"].split(" & ")
                          if f in record["values"])
        lines.append(f"  {t['term']:<{width}}  {sign + digits(abs(t['push'])):>7} {bar:<20}  {values}")
    lines.append("  " + change_words(record.get("change"), digits))
    return "\n".join(lines)


def value_text(v, digits: int = 6) -> str:
    """A row's value as text, as it is: a level as written, a missing cell as ``missing``, a whole
    number as an integer (``2007``, never ``2010``), any other to ``digits`` significant digits
    (``29.75``), so a move from one value to another reads as a change (``moved_text``)."""
    if v is None:
        return "missing"
    if isinstance(v, str):
        return v
    v = float(v)
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return np.format_float_positional(v, precision=digits, unique=True, fractional=False, trim="-")


def moved_text(old, new) -> tuple[str, str]:
    """A move's two values as text that differ: ``value_text``'s 6 significant digits, more where
    those would show one value twice (1000000 to 1000000.0001, not "from 1000000 to 1000000")."""
    for digits in range(6, 18):
        a, b = value_text(old, digits), value_text(new, digits)
        if a != b:
            return a, b
    return a, b


def change_words(ch: dict | None, digits=None) -> str:
    """A row's smallest move in words: "would join cluster 2 if hue went from 0.9 to 0.87 (0.17
    standard deviations)", with "and B from .. to .." for a pair's move."""
    digits = digits or fmt
    if not ch:
        return "no change of one feature or pair (within the data's range) moves it to another cluster"
    words = "would join cluster {} if {} went from {} to {}".format(ch["target"], ch["feature"],
                                                                   *moved_text(ch["value"], ch["new_value"]))
    if ch.get("feature_2"):
        words += " and {} from {} to {}".format(ch["feature_2"], *moved_text(ch["value_2"], ch["new_value_2"]))
    if isinstance(ch.get("value"), str):
        return words + " (another level)"
    size = digits(ch["change_std"])
    return words + f" ({size} standard deviation{'' if size == '1' else 's'})"

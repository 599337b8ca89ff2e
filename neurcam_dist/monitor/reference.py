"""The drift reference a model keeps: what its training rows looked like to it, without the rows.

Built once from the training rows (``NeurCAM.reference_``, a seeded sample of at most 20,000) and
saved in the model's ``config.json`` as ``drift_reference``: each feature's bins (a numeric
column's deciles, a categorical column's levels, then unseen levels and missing cells) with their
shares, each cluster's share of the training rows, each term's mean contribution to each cluster
and the share of borderline rows. A few kilobytes, no rows."""
from __future__ import annotations

import numpy as np

from ..explain.terms import term_groups, term_name

VERSION = 1
DECILES = np.linspace(0.1, 0.9, 9)
# A row is borderline when its best cluster is less than twice as likely as the runner-up
# (their logits differ by less than log 2).
BORDER = float(np.log(2.0))
UNSEEN = "(unseen levels)"
MISSING_BIN = "missing"


def numeric_edges(values: np.ndarray) -> list[float]:
    """The distinct deciles of a numeric column's cells that are not missing (none: no edges)."""
    present = values[~np.isnan(values)]
    return np.unique(np.quantile(present, DECILES)).tolist() if present.size else []


def numeric_counts(values: np.ndarray, edges: list[float]) -> np.ndarray:
    """Cells per bin: below the first edge, between edges, from the last edge up, then missing."""
    missing = np.isnan(values)
    bins = np.searchsorted(np.asarray(edges, dtype=np.float64), values[~missing], side="right")
    counts = np.bincount(bins, minlength=len(edges) + 1).astype(np.int64)
    return np.append(counts, int(missing.sum()))


def level_counts(codes: np.ndarray, n_levels: int, unseen: int) -> np.ndarray:
    """Cells per kept level (the pooled level less the ``unseen`` cells coded into it), then the
    levels not seen at training, then missing."""
    missing = np.isnan(codes)
    counts = np.bincount(codes[~missing].astype(np.int64), minlength=n_levels).astype(np.int64)
    counts[-1] -= unseen
    return np.concatenate([counts, [unseen, int(missing.sum())]])


def bin_labels(feature: dict) -> list[str]:
    """What each bin of a feature holds, as the page and ``drift.json`` name it."""
    if feature["kind"] == "categorical":
        return [*feature["levels"], UNSEEN, MISSING_BIN]
    edges = [f"{e:.6g}" for e in feature["edges"]]
    if not edges:
        return ["every value", MISSING_BIN]
    inner = [f"{a} to {b}" for a, b in zip(edges, edges[1:], strict=False)]
    return [f"below {edges[0]}", *inner, f"{edges[-1]} and above", MISSING_BIN]


def feature_counts(fitted, arr: np.ndarray, unseen: dict[str, int], features: list[dict]) -> list[np.ndarray]:
    """Each feature's cells per bin (``features``: the reference's records, which give the edges)."""
    out = []
    for j, f in enumerate(features):
        if f["kind"] == "categorical":
            out.append(level_counts(arr[:, j], len(f["levels"]), int(unseen.get(f["name"], 0))))
        else:
            out.append(numeric_counts(arr[:, j], f["edges"]))
    return out


def model_pass(fitted, arr: np.ndarray) -> dict:
    """One pass of the network over ``arr``: each row's cluster column, the sum over rows of each
    term's contribution to each cluster (T, K) and the borderline rows."""
    groups, owner = term_groups(fitted.net)
    to_terms = np.zeros((len(owner), len(groups)), dtype=np.float64)
    to_terms[np.arange(len(owner)), owner] = 1.0
    columns, sums, border = [], np.zeros((len(groups), fitted.n_clusters)), 0
    for c in fitted.contribution_chunks(arr):
        logits = c.sum(1)
        columns.append(logits.argmax(1))
        sums += np.einsum("nck,ct->tk", c.astype(np.float64), to_terms)
        top = np.sort(logits, axis=1)[:, -2:] if logits.shape[1] > 1 else np.zeros((len(logits), 2))
        border += int((top[:, 1] - top[:, 0] < BORDER).sum())
    names = [term_name(g, list(fitted.feature_names)) for g in groups]
    return {"columns": np.concatenate(columns) if columns else np.zeros(0, np.int64), "term_sums": sums,
            "terms": names, "used": sorted({f for g in groups for f in g}), "borderline": border}


def reference_of(fitted, arr: np.ndarray, labels: np.ndarray | None = None) -> dict:
    """The drift reference of ``fitted`` over training rows ``arr``, as the model encodes them
    (``FittedNet.encode``); cluster shares from ``labels`` (every training row's cluster id) when
    given, else the rows'.

    Returns
    -------
    dict
        Plain values (``config.json``'s ``drift_reference``), described in ``docs/monitor.md``.
    """
    coding, names = fitted.coding, list(fitted.feature_names)
    passed = model_pass(fitted, arr)
    features = []
    for j, name in enumerate(names):
        column = coding.columns[j] if coding is not None else None
        if column is not None and column.categorical:
            f = {"name": name, "kind": "categorical", "levels": list(column.levels)}
        else:
            f = {"name": name, "kind": "numeric", "edges": numeric_edges(arr[:, j])}
            present = arr[~np.isnan(arr[:, j]), j]
            f.update(mean=float(present.mean()) if present.size else None,
                     sd=float(present.std()) if present.size else None)
        features.append(f)
    for f, counts in zip(features, feature_counts(fitted, arr, {}, features), strict=False):
        f["shares"] = (counts / max(len(arr), 1)).tolist()
        f["used"] = names.index(f["name"]) in passed["used"]
    ids = np.asarray(fitted.cluster_ids)
    if labels is not None:
        counts = np.array([(np.asarray(labels) == i).sum() for i in ids], dtype=np.float64)
    else:
        counts = np.bincount(passed["columns"], minlength=fitted.n_clusters).astype(np.float64)
    n = max(len(arr), 1)
    return {"version": VERSION, "n_rows": int(len(arr)), "training_rows": int(counts.sum()),
            "features": features, "cluster_ids": ids.tolist(), "cluster_shares": (counts / counts.sum()).tolist(),
            "terms": passed["terms"], "term_means": (passed["term_sums"] / n).tolist(),
            "borderline": passed["borderline"] / n}

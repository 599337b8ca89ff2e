"""Stability across runs: how much of an explanation survives another seed.

A search compares its best runs' explanations on the same rows (the winner's reference rows).
This module turns them into data the report draws and the console prints: the paper's top-K
intersections, each of the winner's top terms' recurrence in the other runs' top lists, bands
(the range over the runs) around every main-effect shape curve, and a warning with what to do
when the runs disagree. Clusters are matched across runs by their rows (the assignment of the
largest overlap, Hungarian), since a run's cluster 3 may be another's cluster 0. Numpy and the
table scorer only: no model is needed.
"""
from __future__ import annotations

import itertools

import numpy as np

TOP_K = (5, 10, 25)
LOW_SHARE = 0.6      # runs sharing fewer than this share of their top-5 terms get a warning
RECUR = 0.5          # a top term in the top list of fewer than this share of the other runs is flagged


def topk_intersections(rankings: list[list[str]], ks=TOP_K) -> dict:
    """The paper's appendix measure: for each K, the mean over pairs of runs of the number of terms
    their top-K lists share (a run with fewer than K terms contributes all of its terms)."""
    out = {}
    pairs = list(itertools.combinations(range(len(rankings)), 2))
    for k in ks:
        if not pairs:
            break
        shared = [len(set(rankings[a][:k]) & set(rankings[b][:k])) for a, b in pairs]
        out[f"top{k}_intersection"] = float(np.mean(shared))
    return out


def explanation_consistency(explanations: list) -> dict:
    """Top-K intersections of runs' term importances (explanations on the same rows)."""
    if len(explanations) < 2:
        return {"consistency_runs": len(explanations)}
    rankings = [[r["term"] for r in e.importance[:max(TOP_K)]] for e in explanations]
    return {"consistency_runs": len(explanations), **topk_intersections(rankings)}


def match_clusters(expl, other, X, labels: np.ndarray | None = None) -> np.ndarray:
    """For each cluster column of ``expl``, the column of ``other`` holding most of its rows of
    ``X`` (one to one; scipy's ``linear_sum_assignment`` on the overlap table); ``labels``:
    ``expl``'s columns of the rows when the caller has them."""
    from scipy.optimize import linear_sum_assignment
    a = expl.logits(X).argmax(1) if labels is None else labels
    b = other.logits(X).argmax(1)
    k, k2 = expl.n_clusters, other.n_clusters
    overlap = np.zeros((k, k2))
    np.add.at(overlap, (a, b), 1.0)
    rows, cols = linear_sum_assignment(-overlap)
    out = np.full(k, -1)
    out[rows] = cols
    return out


def warning(consistency: dict) -> str | None:
    """The sentence to show when the runs' top-5 terms disagree (None when they agree enough)."""
    shared = consistency.get("top5_intersection")
    if shared is None or shared >= LOW_SHARE * 5:
        return None
    return (f"the {consistency.get('consistency_runs', 'compared')} best runs share {shared:.1f} of their top-5 terms "
            f"on average: which terms explain the clusters depends on the seed. Read the terms flagged as not "
            f"recurring with care; more seeds (search.seeds) show which terms recur, and fewer terms "
            f"(a smaller n_single, n_pairs) make the runs agree more")


def stability(expl, others: list, X, top: int = 10) -> dict:
    """JSON-ready stability of ``expl`` against the other runs' explanations ``others`` (all on
    rows ``X``): ``n_models``, the top-K intersections, ``recurrence`` (each of ``expl``'s
    ``top`` terms -> the share of other runs with it in their own top ``top``), ``flagged`` (those
    under ``RECUR``), ``warning`` and ``bands`` (main term -> ``low``/``high`` lists (G, K): the
    range of its curve over every run, each evaluated on ``expl``'s grid and clusters matched)."""
    runs = [expl, *others]
    out = {"n_models": len(runs), **explanation_consistency(runs)}
    mine = [r["term"] for r in expl.importance[:top]]
    theirs = [{r["term"] for r in o.importance[:top]} for o in others]
    out["recurrence"] = {t: float(np.mean([t in s for s in theirs])) if theirs else 1.0 for t in mine}
    out["flagged"] = [t for t, share in out["recurrence"].items() if share < RECUR]
    out["warning"] = warning(out)
    if not others:
        out["bands"] = {}
        return out
    mine_labels = expl.logits(X).argmax(1)   # once, for every other run
    matched = [(o, match_clusters(expl, o, X, mine_labels)) for o in others]
    bands = {}
    for t in expl.terms:
        if t.kind != "main":
            continue
        curves = [t.values]
        for o, cols in matched:
            theirs_t = next((u for u in o.terms if u.kind == "main" and u.name == t.name), None)
            if theirs_t is None:               # that run never reads the feature: its curve is flat at 0
                curves.append(np.zeros_like(t.values))
                continue
            v = theirs_t.evaluate([t.grids[0]])              # (G, K_other) on this run's grid
            curves.append(np.stack([v[:, c] if c >= 0 else np.zeros(len(v)) for c in cols], axis=1))
        stack = np.stack(curves)
        bands[t.name] = {"low": stack.min(0).tolist(), "high": stack.max(0).tolist()}
    out["bands"] = bands
    return out

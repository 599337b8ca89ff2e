"""Two versions of a model on the same rows: how the rows moved between their stable cluster ids,
and which terms now drive each cluster that did not before. Data first (JSON-ready), drawn by the
report's "Compared with" section and printed by ``neurcam explain --compare``."""
from __future__ import annotations

import numpy as np

from ..clusterids import top_terms_overlap

TOP = 3   # terms per cluster compared (its strongest pushes in)


def _drivers(expl) -> dict[int, list[str]]:
    return {int(cid): [q["term"] for q in p.get("into", [])[:TOP]] for cid, p in zip(expl.cluster_ids, expl.profiles, strict=False)}


def comparison(new, old, new_labels, old_labels, *, new_name: str = "new", old_name: str = "old") -> dict:
    """``new`` and ``old`` explanations over the same rows, and each row's stable id under each
    (``new_labels``, ``old_labels``). Returns ``names``, ``n_rows``, ``same_id`` (share of rows
    whose id did not change), ``ari`` (agreement of the two partitions), ``flow`` (old id ->
    {new id: rows}, ids with no row left out) and ``drivers`` (one record per new cluster id:
    ``now``, ``before`` (the old cluster of that id's terms; None for an id the old model did not
    have) and ``new_terms``, those of ``now`` that were not among ``before``) and
    ``top_terms_overlap`` (the share of the top terms by importance the two have in common)."""
    from sklearn.metrics import adjusted_rand_score
    a, b = np.asarray(old_labels, dtype=np.int64), np.asarray(new_labels, dtype=np.int64)
    flow: dict[str, dict[str, int]] = {}
    pairs, counts = np.unique(np.stack([a, b], axis=1), axis=0, return_counts=True)
    for (o, n), c in zip(pairs.tolist(), counts.tolist(), strict=False):
        flow.setdefault(str(o), {})[str(n)] = int(c)
    now, before = _drivers(new), _drivers(old)
    drivers = [{"cluster": cid, "now": terms, "before": before.get(cid),
                "new_terms": [t for t in terms if t not in (before.get(cid) or [])]} for cid, terms in now.items()]
    return {"names": {"old": old_name, "new": new_name}, "n_rows": int(len(a)),
            "top_terms_overlap": top_terms_overlap([r["term"] for r in new.importance],
                                                   [r["term"] for r in old.importance]),
            "same_id": float(np.mean(a == b)) if len(a) else 0.0,
            "ari": float(adjusted_rand_score(a, b)) if len(a) else 0.0,
            "flow": flow, "drivers": drivers}


def comparison_text(cmp: dict) -> str:
    """The comparison as console lines: the rows that kept their id, the moves, the new drivers."""
    old, new = cmp["names"]["old"], cmp["names"]["new"]
    lines = [f"{cmp['n_rows']:,} rows: {cmp['same_id']:.1%} keep their cluster id from {old} to {new} "
             f"(agreement ARI {cmp['ari']:.3f})"]
    moves = sorted(((o, n, c) for o, row in cmp["flow"].items() for n, c in row.items() if o != n),
                   key=lambda m: -m[2])
    for o, n, c in moves[:10]:
        lines.append(f"  {c:,} rows moved from cluster {o} to cluster {n}")
    for d in cmp["drivers"]:
        if d["before"] is None:
            lines.append(f"  cluster {d['cluster']} is new: driven by {', '.join(d['now']) or 'no term'}")
        elif d["new_terms"]:
            lines.append(f"  cluster {d['cluster']} is now also driven by {', '.join(d['new_terms'])} "
                         f"(before: {', '.join(d['before']) or 'no term'})")
    return "\n".join(lines)

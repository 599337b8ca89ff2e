"""The clusters against a label column, when the data has one: the label-by-cluster table, ARI and
NMI (scikit-learn's), and each cluster's label mix. Kept in the explanation's model card
(``model_card["labels"]``), so the report and ``explanation.json`` show them."""
from __future__ import annotations

import numpy as np
import pandas as pd

MIX = 3   # labels named in each cluster's mix


def label_summary(labels, assigned, ids, name: str) -> dict:
    """JSON-ready: ``name``, ``ari``, ``nmi``, ``table`` (label -> {cluster id: rows}) and ``mix``
    (cluster id -> the ``MIX`` most frequent labels with their shares). Rows with a missing
    label are left out (and counted)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
    y = pd.Series(labels).reset_index(drop=True)
    a = pd.Series(np.asarray(assigned)).reset_index(drop=True)
    known = y.notna().to_numpy()
    y, a = y[known].astype(str), a[known]
    table = pd.crosstab(y, a).reindex(columns=[int(i) for i in ids], fill_value=0)
    mix = {}
    for cid in table.columns:
        col = table[cid]
        n = int(col.sum())
        top = col[col > 0].sort_values(ascending=False, kind="stable").head(MIX)
        mix[str(int(cid))] = [[str(lab), round(int(v) / n, 4)] for lab, v in top.items()] if n else []
    return {"name": str(name), "n_rows": int(known.sum()), "n_missing": int((~known).sum()),
            "ari": float(adjusted_rand_score(y, a)), "nmi": float(normalized_mutual_info_score(y, a)),
            "table": {str(lab): {str(int(c)): int(v) for c, v in row.items()} for lab, row in table.iterrows()},
            "mix": mix}


def mix_text(mix: list) -> str:
    """``7 (82%), 1 (10%)``."""
    return ", ".join(f"{lab} ({100 * share:.0f}%)" for lab, share in mix)

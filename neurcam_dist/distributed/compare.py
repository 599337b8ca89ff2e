"""Two models on the same data, in one Ray Data pass: what ``neurcam recluster`` needs to decide
whether the challenger replaces the champion and to carry the cluster ids over (``take_ids``,
which a search runs on its winner when it is given an ``Incumbent``).

Both models' hard assignments of every row, reduced to sums (no per-row result reaches the
driver): the contingency table of the two assignments, and per-cluster moments of the
representation for both inertias. The representation is the plan's (the new data's embedding,
or the features standardized with the challenger's statistics), so the two inertias measure the
same thing and can be compared.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..clusterids import match_ids
from ..errors import TrainingError
from .. import data as data_mod
from .. import metrics
from ..model import FittedNet
from .events import say
from .scoring import reduce_pass


class _Comparer:
    def __init__(self, challenger: FittedNet, champion: FittedNet, plan: data_mod.Plan):
        import torch
        torch.set_num_threads(1)
        self.a, self.b, self.plan = challenger, champion, plan

    def __call__(self, table: pa.Table) -> dict:
        a, b, plan = self.a, self.b, self.plan
        xa = data_mod.reading.feature_matrix(table, a.feature_names, a.coding)
        la = a.assign(xa)
        unseen = {}
        if b.coding is not None and b.coding.has_categorical:
            xb, unseen = b.encode_counted(table.select(b.feature_names).to_pandas(), "the snapshot")
        else:
            xb = data_mod.matrix(table, b.feature_names, np.float64)
        lb = b.assign(xb)
        xr = data_mod.reading.representation(table, plan, xa, a).astype(np.float64)
        sq = (xr ** 2).sum(1)
        acc = {"n": len(la), "table": np.zeros((a.n_clusters, b.n_clusters), np.int64), "unseen": unseen}
        np.add.at(acc["table"], (la, lb), 1)
        for key, labels, k in (("a", la, a.n_clusters), ("b", lb, b.n_clusters)):
            sums = np.zeros((k, xr.shape[1]))
            np.add.at(sums, labels, xr)
            acc[key] = (np.bincount(labels, minlength=k), sums, np.bincount(labels, sq, minlength=k))
        return {"acc": np.array([pickle.dumps(acc)], dtype=object)}


def _combine(x: dict | None, y: dict) -> dict:
    if x is None:
        return y
    unseen = dict(x["unseen"])
    for c, n in y["unseen"].items():
        unseen[c] = unseen.get(c, 0) + n
    return {"n": x["n"] + y["n"], "table": x["table"] + y["table"], "unseen": unseen,
            **{k: tuple(u + v for u, v in zip(x[k], y[k], strict=False)) for k in ("a", "b")}}


def compare(challenger: FittedNet, champion: FittedNet, plan: data_mod.Plan, *, batch_size: int = 4096,
            concurrency: int = 2) -> dict:
    """``table`` (challenger x champion contingency of raw cluster indices), both inertias, both
    raw cluster sizes, the agreement (ARI) of the two assignments over every row, and the cells
    whose level the champion never saw at its training (``unseen_champion``: column -> cells,
    scored as (other levels))."""
    for f, schema, _ in data_mod.footers(plan.source):
        missing = [c for c in champion.feature_names if schema.get_field_index(c) < 0]
        if missing:
            raise data_mod.DataError(f"the champion needs feature column(s) {missing} that {f} does not have: "
                                     f"it cannot be scored on this snapshot")
    cols = list(dict.fromkeys(plan.columns + list(champion.feature_names)))
    total = reduce_pass(plan, cols, _Comparer, _combine, batch_size, concurrency,
                        challenger=challenger, champion=champion, plan=plan)
    if total is None or total["n"] != plan.n_rows:
        raise TrainingError(f"the comparison pass saw {0 if total is None else total['n']} rows, "
                           f"the data has {plan.n_rows}")
    table = total["table"]
    return {"n_rows": int(total["n"]), "table": table,
            "inertia_challenger": metrics.inertia_from_moments(*total["a"]),
            "inertia_champion": metrics.inertia_from_moments(*total["b"]),
            "sizes_challenger": total["a"][0].astype(int).tolist(),
            "sizes_champion": total["b"][0].astype(int).tolist(),
            "agreement_ari": metrics.table_scores(table.T)["ari"], "unseen_champion": dict(total["unseen"])}


@dataclass(frozen=True)
class Incumbent:
    """The model a search's winner takes its cluster ids from and is compared with (a
    re-clustering's champion; ``model`` None: there is none yet), what to call it, and the
    lineage's smallest cluster id never used."""
    model: object | None
    name: str
    next_cluster_id: int


@dataclass(frozen=True)
class Matched:
    """How a winner met the incumbent on every training row (``compare``'s measures; None when
    there was no incumbent, or it could not be scored: ``unscorable`` says why), and the rows of
    each stable cluster id under each model."""
    measures: dict | None = None
    sizes_new: dict | None = None
    sizes_old: dict | None = None
    unscorable: str | None = None


def take_ids(est, incumbent: Incumbent, plan: data_mod.Plan, *, batch_size: int, concurrency: int) -> Matched:
    """Give ``est`` stable cluster ids: the incumbent's for the clusters that match it best on the
    plan's rows (``clusterids.match_ids``), ids never used before for the others; all new ids when
    there is no incumbent or it cannot read the data."""
    k = est.n_clusters_
    champion = incumbent.model
    if champion is None:
        est.set_cluster_ids(np.arange(k), max(k, incumbent.next_cluster_id))
        return Matched()
    first_new = max(incumbent.next_cluster_id, champion.next_cluster_id_)
    try:
        cmp = compare(est.scoring_model(), champion.scoring_model(), plan, batch_size=batch_size,
                      concurrency=concurrency)
    except data_mod.DataError as exc:
        say(f"warning: {exc}; the challenger gets new cluster ids")
        est.set_cluster_ids(np.arange(k) + first_new, first_new + k)
        return Matched(unscorable=str(exc))
    ids, next_id = match_ids(cmp["table"], champion.cluster_ids_, first_new)
    est.set_cluster_ids(ids, next_id)
    return Matched(measures=cmp, sizes_new={int(i): n for i, n in zip(ids, cmp["sizes_challenger"], strict=False) if n},
                   sizes_old={int(i): n for i, n in zip(champion.cluster_ids_, cmp["sizes_champion"], strict=False) if n})

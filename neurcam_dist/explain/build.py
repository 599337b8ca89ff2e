"""``build_explanation``: evaluate every term of a fitted model on grids in original units,
purify the pairs, centre on the data, measure importance and profile the clusters."""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..storage import jsonable
from ..validation import check_matrix
from .examples import TYPICAL, row_records, typical_positions
from .explanation import Explanation, Term
from .grids import feature_grid, interp_main, interp_pair, nearest_index, purify
from .terms import term_groups

@torch.no_grad()
def _term_table(fitted, channels: np.ndarray, features: tuple[int, ...], grids: list[np.ndarray]) -> np.ndarray:
    """Sum of ``channels``' contributions (of a ``model.FittedNet``) on the grid of ``features``
    (other standardized inputs at 0)."""
    mesh = np.meshgrid(*grids, indexing="ij")
    n = mesh[0].size
    x = np.zeros((n, len(fitted.feature_names)), dtype=np.float32)
    for f, m in zip(features, mesh):
        x[:, f] = (m.reshape(-1) - fitted.mean[f]) / fitted.scale[f]
    t, t2 = fitted.temperatures
    device = next(fitted.net.parameters()).device
    contrib = fitted.net.contributions(torch.from_numpy(x).to(device), t, t2).double().cpu().numpy()
    table = contrib[:, channels, :].sum(1)
    return table.reshape(*mesh[0].shape, -1)


@torch.no_grad()
def _main_tables(fitted, terms, owner: np.ndarray, main_grid: dict) -> dict[int, np.ndarray]:
    """Each one-feature term's table on its feature's grid (term index -> (grid, K)), from one
    pass of the network over rows that hold every feature's grid at once: a one-hot gate reads
    one feature, so a channel sees only its own feature's grid. (A pass per term cost terms x
    channels: 7 minutes for a model of 3,000 features.) Relaxed gates (a model not fitted to the
    end) read several features: there, one pass per term with the other features at 0."""
    singles = [n for n, t in enumerate(terms) if len(t) == 1]
    if not singles:
        return {}
    t, t2 = fitted.temperatures
    if not fitted.net.all_one_hot(t, t2):
        return {n: _term_table(fitted, np.flatnonzero(owner == n), terms[n], [main_grid[terms[n][0]][0]])
                for n in singles}
    rows = max(len(main_grid[terms[n][0]][0]) for n in singles)
    x = np.zeros((rows, len(fitted.feature_names)), dtype=np.float32)
    for n in singles:
        f = terms[n][0]
        g = main_grid[f][0]
        x[:, f] = (np.concatenate([g, np.full(rows - len(g), g[-1])]) - fitted.mean[f]) / fitted.scale[f]
    device = next(fitted.net.parameters()).device
    contrib = fitted.net.contributions(torch.from_numpy(x).to(device), t, t2).double().cpu().numpy()
    return {n: contrib[:len(main_grid[terms[n][0]][0]), np.flatnonzero(owner == n), :].sum(1) for n in singles}


def build_explanation(est, X, grid_size: int = 128, pair_grid_size: int = 32, n_bins: int = 30,
                      typical: int = TYPICAL) -> Explanation:
    """The ``Explanation`` of a fitted model over data ``X`` (its distribution centres the terms,
    weights the purification and defines importance), with ``typical`` rows of each cluster as
    examples (``examples.typical_positions``; 0: none).

    Kept whole: the terms, their grids, the purification and the importance are computed from
    one pass over ``X`` and share its per-term arrays; the steps are the comments inside."""
    fitted = est.scoring_model()
    names = list(fitted.feature_names)
    arr, _, _ = check_matrix(X, "X", expected_columns=names)  # original units, fitted order
    terms, owner = term_groups(fitted.net)
    k = fitted.n_clusters
    in_pairs = sorted({f for t in terms if len(t) == 2 for f in t})
    pair_grid = {f: feature_grid(arr[:, f], pair_grid_size) for f in in_pairs}
    main_features = sorted({t[0] for t in terms if len(t) == 1} | set(in_pairs))
    main_grid = {}
    for f in main_features:
        g, discrete = feature_grid(arr[:, f], grid_size)
        if f in pair_grid:
            g = np.union1d(g, pair_grid[f][0])
            discrete = discrete and pair_grid[f][1]
        main_grid[f] = (g, discrete)

    mains = {f: np.zeros((len(main_grid[f][0]), k)) for f in main_features}
    for n, table in _main_tables(fitted, terms, owner, main_grid).items():
        mains[terms[n][0]] += table
    pair_tables = {}
    for n, t in enumerate(terms):
        if len(t) == 2:
            a, b = t
            ga, gb = pair_grid[a][0], pair_grid[b][0]
            raw = _term_table(fitted, np.flatnonzero(owner == n), t, [ga, gb])
            weights = np.zeros((len(ga), len(gb)))
            np.add.at(weights, (nearest_index(ga, arr[:, a]), nearest_index(gb, arr[:, b])), 1.0)
            pure, ma, mb = purify(raw, weights)
            mains[a] += interp_main(ga, ma, main_grid[a][0])
            mains[b] += interp_main(gb, mb, main_grid[b][0])
            pair_tables[t] = pure
    # Channel biases live inside the term tables; every term's data mean moves into the intercept.
    intercept = np.zeros(k)
    out_terms, at_rows_all = [], []
    for f in main_features:
        g, discrete = main_grid[f]
        at_rows = interp_main(g, mains[f], arr[:, f])
        mean = at_rows.mean(0)
        values = mains[f] - mean
        intercept = intercept + mean
        at_rows_all.append(at_rows - mean)
        counts, edges = np.histogram(arr[:, f], bins=min(n_bins, max(1, len(np.unique(arr[:, f])))))
        out_terms.append(Term(name=names[f], kind="main", features=[names[f]], grids=[g], discrete=[discrete],
                              values=values, importance=np.abs(at_rows - mean).mean(0),
                              histogram={"edges": edges.tolist(), "counts": counts.tolist()}))
    for (a, b), table in pair_tables.items():
        ga, gb = pair_grid[a][0], pair_grid[b][0]
        # Purified: zero mean over the data binned on the grid, so no further centring is needed.
        at_rows = interp_pair(ga, gb, table, arr[:, a], arr[:, b])
        at_rows_all.append(at_rows)
        out_terms.append(Term(name=f"{names[a]} & {names[b]}", kind="pair", features=[names[a], names[b]],
                              grids=[ga, gb], discrete=[pair_grid[a][1], pair_grid[b][1]], values=table,
                              importance=np.abs(at_rows).mean(0)))
    expl = Explanation(feature_names=names, n_clusters=k, intercept=np.asarray(intercept, dtype=np.float64),
                       terms=out_terms, cluster_sizes=[], profiles=[], model_card=model_card(est, arr),
                       cluster_ids=fitted.ids.tolist())
    logits = fitted.logits(arr)   # one pass over the rows: the profiles and the examples share it
    _add_profiles(expl, logits.argmax(1), np.stack(at_rows_all, axis=1), arr, main_features,
                  text=getattr(est, "text_", None) is not None)
    if typical:
        positions, border, basis = typical_positions(fitted, arr, typical, logits)
        ids = _row_ids(X, len(arr))
        flat = [p for c in range(k) for p in positions[c]] + list(border.values())
        records = iter(row_records(fitted, arr[flat], names, [ids[p] for p in flat], arr.min(0), arr.max(0)))
        expl.examples = {"basis": basis, "typical": {str(expl.ids[c]): [next(records) for _ in positions[c]]
                                                     for c in range(k)},
                         "borderline": {str(expl.ids[c]): next(records) for c in border}, "rows": []}
    return expl


def _row_ids(X, n: int) -> list:
    """Each row's id: a DataFrame's index labels, else its position."""
    index = getattr(X, "index", None)
    return list(index) if index is not None and len(index) == n else list(range(n))


def add_rows(expl: Explanation, est, X, span=None) -> list[dict]:
    """The view of each row of ``X`` (``examples.row_records``: its terms as bars, its values and
    the smallest change of one feature or pair to another cluster, within ``span``'s range, else ``X``'s),
    appended to ``expl.examples["rows"]``; returns the new records."""
    fitted = est.scoring_model()
    names = list(fitted.feature_names)
    arr, _, _ = check_matrix(X, "X", expected_columns=names)
    ref = arr if span is None else check_matrix(span, "X", expected_columns=names)[0]
    records = row_records(fitted, arr, names, _row_ids(X, len(arr)), ref.min(0), ref.max(0))
    expl.examples = expl.examples or {"basis": None, "typical": {}, "rows": []}
    expl.examples.setdefault("rows", []).extend(records)
    return records


TOP_TERMS = 10


def _feature_stats(arr: np.ndarray, members: np.ndarray, features: list[int], names: list[str],
                   keep: set[str], top: int = 8) -> tuple[list[dict], list[str]]:
    """How the members' values of the model's features differ from all rows' (original units):
    the ``top`` largest standardized mean differences, plus every feature in ``keep``; and the
    features furthest above their overall mean, in order (a text model's top terms)."""
    rows = []
    for f in features:
        col, sub = arr[:, f], arr[members, f]
        std = float(col.std())
        z = (float(sub.mean()) - float(col.mean())) / std if std > 0 else 0.0
        q10, q90 = np.quantile(sub, [0.1, 0.9])
        rows.append({"feature": names[f], "mean": float(sub.mean()), "overall_mean": float(col.mean()),
                     "z": z, "q10": float(q10), "q90": float(q90)})
    above = [r["feature"] for r in sorted(rows, key=lambda r: -r["z"]) if r["z"] > 0]
    rows.sort(key=lambda r: -abs(r["z"]))
    return [r for i, r in enumerate(rows) if i < top or r["feature"] in keep], above


def _add_profiles(expl: Explanation, labels: np.ndarray, per_term: np.ndarray, arr: np.ndarray,
                  features: list[int], top: int = 3, text: bool = False) -> None:
    """Cluster sizes, the terms that push members in / out and how the members' feature values
    differ from all rows'; ``per_term`` is (N, T, K), the exported terms evaluated at the explained
    rows (already computed for importance)."""
    k = expl.n_clusters
    expl.cluster_sizes = np.bincount(labels, minlength=k).tolist()
    # Softmax ignores what a term adds to every cluster alike: what separates cluster c is the
    # term's contribution to c minus its mean contribution over all clusters.
    per_term = per_term - per_term.mean(2, keepdims=True)
    profiles = []
    for c in range(k):
        members = labels == c
        if not members.any():
            profiles.append({"cluster": expl.ids[c], "size": 0, "into": [], "out_of": [], "features": []})
            continue
        mean = per_term[members, :, c].mean(0)
        order = np.argsort(-mean)

        def entry(i):
            t = expl.terms[i]
            return {"term": t.name, "features": list(t.features), "mean_relative_contribution": float(mean[i])}

        into = [entry(i) for i in order[:top] if mean[i] > 0]
        out = [entry(i) for i in order[::-1][:top] if mean[i] < 0]
        keep = {f for q in into + out for f in q["features"]}
        stats, above = _feature_stats(arr, members, features, expl.feature_names, keep)
        profiles.append({"cluster": expl.ids[c], "size": int(members.sum()), "into": into, "out_of": out,
                         "features": stats})
        if text:   # the terms (columns of the model's vocabulary) most over-represented in the cluster
            profiles[-1]["top_terms"] = above[:TOP_TERMS]
    expl.profiles = profiles


def _allowed(est) -> list[bool]:
    return est.net_.single.gates.allowed.cpu().tolist()


def _text_card(est) -> dict | None:
    t = getattr(est, "text_", None)
    if t is None:
        return None
    return {"text_columns": t["text_columns"], "terms": len(t["terms"]), "min_df": t["min_df"],
            "max_df": t["max_df"], "documents": t["n_documents"], "analyzer": t["analyzer"]}


def model_card(est, arr: np.ndarray) -> dict:
    """The model card: hyperparameters, training record (epochs, phases, stop reason, k-means
    init), data summary and selected features, as JSON-ready values."""
    h = est.history_ or {}
    epochs = h.get("epochs", [])
    return jsonable({
        "hyperparameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in est.get_params().items()},
        "data": {"n_rows": int(arr.shape[0]), "columns": list(est.feature_names_in_),
                 "sha256": hashlib.sha256(np.ascontiguousarray(arr, dtype=np.float64).tobytes()).hexdigest()},
        "selected_features": list(est.selected_features_),
        "selected_pairs": [list(p) for p in est.selected_pairs_],
        "kmeans_init": h.get("init"),
        "clusters": {"n_clusters": int(est.n_clusters), "n_clusters_used": h.get("n_clusters_used"),
                     "cluster_ids": [int(v) for v in est.cluster_ids_]},
        "text": _text_card(est),
        "constant_features_left_out": [n for n, ok in zip(est.feature_names_in_, _allowed(est)) if not ok],
        "fit": {"n_epochs": h.get("n_epochs"), "stop_reason": h.get("stop_reason"), "events": h.get("events", []),
                "final_loss": epochs[-1]["loss"] if epochs else None,
                "fit_seconds": h.get("fit_seconds")},
    })

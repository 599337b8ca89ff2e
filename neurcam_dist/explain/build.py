"""``build_explanation``: evaluate every term of a fitted model on grids in original units,
purify the pairs, centre on the data, measure importance and profile the clusters; with what the
caller asks for (labels, chosen rows, a model to compare with, other runs) measured here too, so
the explanation leaves this module complete and is never changed afterwards."""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
import torch

from ..columns import OTHER
from ..storage import jsonable
from .compare import comparison
from .counterfactual import value_span
from .evaluation import label_summary
from .examples import TYPICAL, categorical_cells, pooled_cells, row_records, typical_positions
from .explanation import Explanation, Term
from .grids import feature_grid, interp_main, nearest_index, purify
from .stability import stability
from .terms import term_groups


@torch.no_grad()
def _term_table(fitted, channels: np.ndarray, features: tuple[int, ...], grids: list[np.ndarray]) -> np.ndarray:
    """Sum of ``channels``' contributions (of a ``model.FittedNet``) on the grid of ``features``
    (other standardized inputs at 0)."""
    mesh = np.meshgrid(*grids, indexing="ij")
    n = mesh[0].size
    x = np.zeros((n, len(fitted.feature_names)), dtype=np.float32)
    for f, m in zip(features, mesh, strict=False):
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
    x = np.zeros((rows + 1, len(fitted.feature_names)), dtype=np.float32)
    for n in singles:
        f = terms[n][0]
        g = main_grid[f][0]
        x[:rows, f] = (np.concatenate([g, np.full(rows - len(g), g[-1])]) - fitted.mean[f]) / fitted.scale[f]
    x[rows] = np.nan   # the last row: every feature missing (read only by a model with a coding)
    if fitted.coding is None:
        x = x[:rows]
    device = next(fitted.net.parameters()).device
    contrib = fitted.net.contributions(torch.from_numpy(x).to(device), t, t2).double().cpu().numpy()
    out = {}
    for n in singles:
        table = contrib[:, np.flatnonzero(owner == n), :].sum(1)
        g = len(main_grid[terms[n][0]][0])
        out[n] = np.concatenate([table[:g], table[rows:]]) if fitted.coding is not None else table[:g]
    return out


def _grids(arr: np.ndarray, fitted, f: int, size: int) -> tuple[np.ndarray, bool]:
    """A feature's grid over its values that are not missing: every level code of a categorical
    feature, else ``grids.feature_grid`` (the fitted mean alone for a column missing everywhere)."""
    coding = fitted.coding
    if coding is not None and coding.columns[f].categorical:
        return np.arange(len(coding.columns[f].levels), dtype=np.float64), True
    col = arr[:, f]
    col = col[~np.isnan(col)]
    if not len(col):
        return np.array([float(fitted.mean[f])]), True
    return feature_grid(col, size)


def _pair_missing(fitted, channels, a: int, b: int, ga, gb, ma, mb) -> dict:
    """A pair term's contributions with a missing cell (``Term.missing``): the first feature
    missing along the second's grid (less what purification moved into the second's main term,
    which that row still reads), the second missing along the first's, both missing."""
    nan = np.array([np.nan])
    return {"a": _term_table(fitted, channels, (a, b), [nan, gb])[0] - mb,
            "b": _term_table(fitted, channels, (a, b), [ga, nan])[:, 0] - ma,
            "both": _term_table(fitted, channels, (a, b), [nan, nan])[0, 0]}


def _histogram(col: np.ndarray, categorical: bool, n_levels: int, n_bins: int) -> dict:
    """A main term's histogram of the explained rows: counts per level (categorical) or per bin,
    and the missing cells."""
    nan = np.isnan(col)
    finite = col[~nan]
    if categorical:
        return {"edges": None, "counts": np.bincount(finite.astype(np.int64), minlength=n_levels).tolist(),
                "missing": int(nan.sum())}
    if not len(finite):
        return {"edges": [0.0, 1.0], "counts": [0], "missing": int(nan.sum())}
    counts, edges = np.histogram(finite, bins=min(n_bins, max(1, len(np.unique(finite)))))
    return {"edges": edges.tolist(), "counts": counts.tolist(), "missing": int(nan.sum())}


def _term_tables(fitted, arr: np.ndarray, terms, owner, main_grid: dict, pair_grid: dict):
    """``(mains, pairs, pair_missing)``: every main feature's table on its grid (a last row for a
    missing cell when the model reads them), the purified pair tables (their row and column means
    moved into the main tables) and the pairs' contributions with a missing cell."""
    k = fitted.n_clusters
    reads_missing = fitted.coding is not None
    mains = {f: np.zeros((len(g) + reads_missing, k)) for f, (g, _) in main_grid.items()}
    for n, table in _main_tables(fitted, terms, owner, main_grid).items():
        mains[terms[n][0]] += table
    pairs, pair_missing = {}, {}
    for n, t in enumerate(terms):
        if len(t) != 2:
            continue
        a, b = t
        ga, gb = pair_grid[a][0], pair_grid[b][0]
        raw = _term_table(fitted, np.flatnonzero(owner == n), t, [ga, gb])
        weights = np.zeros((len(ga), len(gb)))
        seen = ~np.isnan(arr[:, a]) & ~np.isnan(arr[:, b])
        np.add.at(weights, (nearest_index(ga, arr[seen, a]), nearest_index(gb, arr[seen, b])), 1.0)
        pairs[t], ma, mb = purify(raw, weights)
        mains[a][:len(main_grid[a][0])] += interp_main(ga, ma, main_grid[a][0])
        mains[b][:len(main_grid[b][0])] += interp_main(gb, mb, main_grid[b][0])
        if reads_missing:
            pair_missing[t] = _pair_missing(fitted, np.flatnonzero(owner == n), a, b, ga, gb, ma, mb)
    return mains, pairs, pair_missing


def _centre(term: Term, columns: list[np.ndarray], move: bool) -> tuple[np.ndarray, np.ndarray]:
    """Centre ``term`` on the explained rows when ``move`` (its mean goes to the intercept) and set
    its importance; ``(its contribution at the rows, the mean moved)``."""
    at_rows = term.evaluate(columns)
    mean = at_rows.mean(0) if move else np.zeros(at_rows.shape[1])
    term.values = term.values - mean
    if isinstance(term.missing, dict):
        term.missing = {key: v - mean for key, v in term.missing.items()}
    elif term.missing is not None:
        term.missing = term.missing - mean
    term.importance = np.abs(at_rows - mean).mean(0)
    return at_rows - mean, mean


@dataclass(frozen=True)
class Compared:
    """The model an explanation is compared with (``explain --compare``, a re-clustering's
    champion): the model, the explained rows as it reads them (its own columns), and what to call
    the two models."""
    model: object
    rows: object
    old_name: str
    new_name: str


def build_explanation(est, X, grid_size: int = 128, pair_grid_size: int = 32, n_bins: int = 30,
                      typical: int = TYPICAL, *, labels=None, label_name: str | None = None, rows=None, span=None,
                      compared: Compared | None = None, runs: Sequence | None = None,
                      encoded: np.ndarray | None = None) -> Explanation:
    """The complete ``Explanation`` of a fitted model over data ``X`` (its distribution centres
    the terms, weights the purification and defines importance). Nothing is added to it later:

    - ``typical`` rows of each cluster as examples (``examples.typical_positions``; 0: none);
    - ``labels`` (one per row of ``X``, named ``label_name``): the clusters against them in the
      model card (``evaluation.label_summary``);
    - ``rows``: those rows' views (``examples.row_records``: their terms, the smallest change to
      another cluster within ``span``'s range, else ``X``'s) in ``examples["rows"]``;
    - ``compared``: how the rows of ``X`` moved from that model's cluster ids to this one's and
      the new drivers (``compare.comparison``);
    - ``runs``: other fitted models (other seeds; an empty list measures nothing but says so) to
      measure stability against on ``X`` (``stability.stability``);
    - ``encoded``: ``X`` as the model encodes it (``FittedNet.encode``), when the caller has it
      (``neurcam fit --report`` encodes its table once for the metrics, assignments and report)."""
    fitted = est.scoring_model()
    names = list(fitted.feature_names)
    arr = fitted.encode(X) if encoded is None else encoded  # original units, fitted order; codes, NaN missing
    terms, intercept, per_term, main_features, levels = _terms(fitted, arr, grid_size, pair_grid_size, n_bins)
    logits = fitted.logits(arr)   # one pass over the rows: the profiles, examples and labels share it
    columns = logits.argmax(1)
    ids = fitted.cluster_ids.tolist()
    sizes, profiles = _profiles(ids, terms, names, columns, per_term, arr, main_features,
                                text=getattr(est, "text_", None) is not None, levels=levels)
    card = model_card(est, arr)
    if labels is not None:
        card["labels"] = label_summary(labels, fitted.cluster_ids[columns], fitted.cluster_ids, label_name)
    examples = _examples(fitted, categorical_cells(fitted, X), arr, _row_ids(getattr(X, "index", None), len(arr)),
                         typical, logits) if typical else None
    if rows is not None:
        examples = {**(examples or {"basis": None, "typical": {}}),
                    "rows": _row_views(fitted, rows, arr if span is None else fitted.encode(span))}
    expl = Explanation(feature_names=names, n_clusters=fitted.n_clusters, intercept=intercept, terms=terms,
                       cluster_sizes=sizes, profiles=profiles, model_card=card, cluster_ids=ids, examples=examples)
    extra = {} if compared is None else {"comparison": _compared(expl, fitted.cluster_ids[columns], compared)}
    if runs is not None:   # the same rows through each other run
        extra["stability"] = stability(expl, [build_explanation(r, X, typical=0) for r in runs], X)
    return dataclasses.replace(expl, **extra) if extra else expl


def _terms(fitted, arr: np.ndarray, grid_size: int, pair_grid_size: int, n_bins: int):
    """``(terms, intercept, per_term, main_features, levels)``: every term on its grid, centred on
    the rows ``arr`` (channel biases live inside the tables; every main term's data mean moves into
    the intercept; a pair's is zero, purified, unless rows with a missing cell move it), their
    (N, T, K) contributions at the rows, the features with a main term and the categorical ones'
    level names."""
    names = list(fitted.feature_names)
    coding = fitted.coding
    groups, owner = term_groups(fitted.net)
    k = fitted.n_clusters
    in_pairs = sorted({f for t in groups if len(t) == 2 for f in t})
    pair_grid = {f: _grids(arr, fitted, f, pair_grid_size) for f in in_pairs}
    main_features = sorted({t[0] for t in groups if len(t) == 1} | set(in_pairs))
    main_grid = {}
    for f in main_features:
        g, discrete = _grids(arr, fitted, f, grid_size)
        if f in pair_grid:
            g, discrete = np.union1d(g, pair_grid[f][0]), discrete and pair_grid[f][1]
        main_grid[f] = (g, discrete)
    mains, pairs, pair_missing = _term_tables(fitted, arr, groups, owner, main_grid, pair_grid)
    levels = {f: coding.columns[f].level_names() for f in main_features
              if coding is not None and coding.columns[f].categorical}
    terms = []
    for f in main_features:
        g, discrete = main_grid[f]
        terms.append(Term(name=names[f], kind="main", features=[names[f]], grids=[g], discrete=[discrete],
                          values=mains[f][:len(g)], importance=np.zeros(k), levels=[levels[f]] if f in levels else None,
                          missing=mains[f][len(g)] if coding is not None else None,
                          histogram=_histogram(arr[:, f], f in levels, len(g), n_bins)))
    for (a, b), table in pairs.items():
        terms.append(Term(name=f"{names[a]} & {names[b]}", kind="pair", features=[names[a], names[b]],
                          grids=[pair_grid[a][0], pair_grid[b][0]], discrete=[pair_grid[a][1], pair_grid[b][1]],
                          values=table, importance=np.zeros(k),
                          levels=[levels.get(a), levels.get(b)] if a in levels or b in levels else None,
                          missing=pair_missing.get((a, b))))
    index = {n: j for j, n in enumerate(names)}
    intercept, at_rows_all = np.zeros(k), []
    for term in terms:
        cols = [index[f] for f in term.features]
        move = term.kind == "main" or (term.missing is not None and bool(np.isnan(arr[:, cols]).any()))
        at_rows, mean = _centre(term, [arr[:, j] for j in cols], move)
        intercept, at_rows_all = intercept + mean, at_rows_all + [at_rows]
    return terms, np.asarray(intercept, dtype=np.float64), np.stack(at_rows_all, axis=1), main_features, levels


def _compared(expl: Explanation, assigned: np.ndarray, compared: Compared) -> dict:
    """How the rows of ``compared`` moved from that model's cluster ids to ``expl``'s
    (``assigned``: this model's cluster ids of the rows), and the new drivers
    (``compare.comparison``)."""
    before = build_explanation(compared.model, compared.rows, typical=0)
    return comparison(expl, before, assigned, compared.model.predict(compared.rows),
                      new_name=compared.new_name, old_name=compared.old_name)


def _examples(fitted, cells: dict, arr: np.ndarray, row_ids: list, typical: int, logits: np.ndarray) -> dict:
    """Each cluster's ``typical`` rows and its borderline row, as ``examples.row_records`` (``cells``:
    the rows' categorical columns as written, ``examples.categorical_cells``; ``row_ids``: their ids)."""
    positions, border, basis = typical_positions(fitted, arr, typical, logits)
    ids = fitted.cluster_ids.tolist()
    flat = [p for c in range(fitted.n_clusters) for p in positions[c]] + list(border.values())
    records = iter(row_records(fitted, arr[flat], list(fitted.feature_names), [row_ids[p] for p in flat],
                               *value_span(arr), pooled=pooled_cells(fitted, cells, arr, flat)))
    return {"basis": basis, "typical": {str(ids[c]): [next(records) for _ in positions[c]]
                                        for c in range(fitted.n_clusters)},
            "borderline": {str(ids[c]): next(records) for c in border}, "rows": []}


def _row_ids(index, n: int) -> list:
    """Each of ``n`` rows' id: a DataFrame's ``index`` labels, else its position."""
    return list(index) if index is not None and len(index) == n else list(range(n))


def _row_views(fitted, X, span: np.ndarray) -> list[dict]:
    """The view of each row of ``X`` (``examples.row_records``: its terms as bars, its values and
    the smallest change of one feature or pair to another cluster, within ``span``'s range)."""
    arr = fitted.encode(X)
    return row_records(fitted, arr, list(fitted.feature_names), _row_ids(getattr(X, "index", None), len(arr)),
                       *value_span(span), pooled=pooled_cells(fitted, categorical_cells(fitted, X), arr, range(len(arr))))


PROFILE_TERMS = 10   # the terms a cluster profile lists as pushing rows in
# A term whose mean push on a cluster's rows is under this share of the cluster's strongest push
# is not listed as pushing rows in or out (a -0.0075 beside a 2.4 is noise, not a reason).
PUSH_SHARE = 0.05


def _feature_stats(arr: np.ndarray, members: np.ndarray, features: list[int], names: list[str],
                   keep: set[str], top: int = 8, levels: dict | None = None) -> tuple[list[dict], list[str]]:
    """How the members' values of the model's features differ from all rows' (original units):
    the ``top`` largest standardized mean differences, plus every feature in ``keep``; and the
    features furthest above their overall mean, in order (a text model's top terms). A
    categorical feature (``levels``: feature index -> level names) is described by its level most
    over-represented among the members (``level``, ``share``, ``overall_share``; ``z`` the share
    difference over its binomial deviation); a numeric one by its cells that are not missing, with
    the members' ``missing_share`` when any is missing."""
    rows = []
    levels = levels or {}
    for f in features:
        col, sub = arr[:, f], arr[members, f]
        if f in levels:
            rows.append(_level_stats(names[f], col, sub, levels[f]))
            continue
        seen, sub_seen = col[~np.isnan(col)], sub[~np.isnan(sub)]
        if not len(sub_seen):
            rows.append({"feature": names[f], "mean": None, "overall_mean": None, "z": 0.0, "q10": None,
                         "q90": None, "missing_share": 1.0})
            continue
        std = float(seen.std())
        z = (float(sub_seen.mean()) - float(seen.mean())) / std if std > 0 else 0.0
        q10, q90 = np.quantile(sub_seen, [0.1, 0.9])
        rows.append({"feature": names[f], "mean": float(sub_seen.mean()), "overall_mean": float(seen.mean()),
                     "z": z, "q10": float(q10), "q90": float(q90)})
        if len(sub_seen) < len(sub) or len(seen) < len(col):
            rows[-1]["missing_share"] = 1.0 - len(sub_seen) / len(sub)
    above = [r["feature"] for r in sorted(rows, key=lambda r: -r["z"]) if r["z"] > 0]
    rows.sort(key=lambda r: -abs(r["z"]))
    return [r for i, r in enumerate(rows) if i < top or r["feature"] in keep], above


def _level_stats(name: str, col: np.ndarray, sub: np.ndarray, level_names: list[str]) -> dict:
    """A categorical feature's level most over-represented among a cluster's members (missing
    counted as a level of its own); ``z``: the share difference over the level indicator's
    deviation, as a numeric feature's mean difference over its deviation."""
    n_levels = len(level_names) - 1

    def shares(v):
        codes = np.where(np.isnan(v), n_levels, np.nan_to_num(v, nan=0.0)).astype(np.int64)
        return np.bincount(codes, minlength=n_levels + 1) / max(len(v), 1)

    everyone, members = shares(col), shares(sub)
    best = int(np.argmax(members - everyone))
    sd = float(np.sqrt(everyone[best] * (1 - everyone[best])))
    return {"feature": name, "level": level_names[best], "share": float(members[best]),
            "overall_share": float(everyone[best]),
            "z": float(members[best] - everyone[best]) / sd if sd > 0 else 0.0}


def _profiles(ids: list, terms: list[Term], names: list[str], labels: np.ndarray, per_term: np.ndarray,
              arr: np.ndarray, features: list[int], top: int = 3, text: bool = False,
              levels: dict | None = None) -> tuple[list[int], list[dict]]:
    """``(cluster sizes, profiles)``: the terms that push members in / out and how the members'
    feature values differ from all rows'; ``per_term`` is (N, T, K), the exported terms evaluated
    at the explained rows (already computed for importance)."""
    k = len(ids)
    # Softmax ignores what a term adds to every cluster alike: what separates cluster c is the
    # term's contribution to c minus its mean contribution over all clusters.
    per_term = per_term - per_term.mean(2, keepdims=True)
    profiles = []
    for c in range(k):
        members = labels == c
        if not members.any():
            profiles.append({"cluster": ids[c], "size": 0, "into": [], "out_of": [], "features": []})
            continue
        mean = per_term[members, :, c].mean(0)
        order = np.argsort(-mean)

        def entry(i, mean=mean):
            t = terms[i]
            return {"term": t.name, "features": list(t.features), "mean_relative_contribution": float(mean[i])}

        floor = PUSH_SHARE * float(np.abs(mean).max(initial=0.0))   # noise is no push
        into = [entry(i) for i in order[:top] if mean[i] > 0 and mean[i] >= floor]
        out = [entry(i) for i in order[::-1][:top] if mean[i] < 0 and -mean[i] >= floor]
        keep = {f for q in into + out for f in q["features"]}
        stats, above = _feature_stats(arr, members, features, names, keep, levels=levels)
        profiles.append({"cluster": ids[c], "size": int(members.sum()), "into": into, "out_of": out,
                         "features": stats})
        if text:   # the terms (columns of the model's vocabulary) most over-represented in the cluster
            profiles[-1]["top_terms"] = above[:PROFILE_TERMS]
    return np.bincount(labels, minlength=k).tolist(), profiles


def _allowed(est) -> list[bool]:
    return est.net_.single.gates.allowed.cpu().tolist()


def _text_card(est) -> dict | None:
    t = getattr(est, "text_", None)
    if t is None:
        return None
    return {"text_columns": t["text_columns"], "terms": len(t["terms"]), "min_df": t["min_df"],
            "max_df": t["max_df"], "documents": t["n_documents"], "analyzer": t["analyzer"]}


def _columns_card(est) -> dict | None:
    """The model's categorical features (their levels) and each feature's share of missing
    training cells (those with any), and how missing cells and rare levels are read."""
    coding = est.fitted_.coding
    if coding is None:
        return None
    return {"categorical": {c.name: list(c.levels) for c in coding.columns if c.categorical},
            "missing_share": {n: v for n, v in coding.missing_shares().items() if v > 0},
            "missing": coding.missing,
            "rule": (f"missing cells: {coding.missing} (each term has its own value for them); levels in fewer than "
                     f"min_level_rows={est.min_level_rows} training rows, beyond the max_levels={est.max_levels} most "
                     f"frequent, or never seen at training share {OTHER}")}


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
        "clusters": {"n_clusters": int(est.n_clusters_), "n_clusters_used": h.get("n_clusters_used"),
                     "cluster_ids": [int(v) for v in est.cluster_ids_],
                     "empty": list(h.get("empty_clusters") or []), "note": h.get("empty_clusters_note")},
        "text": _text_card(est),
        "columns": _columns_card(est),
        "constant_features_left_out": [n for n, ok in zip(est.feature_names_in_, _allowed(est), strict=False) if not ok],
        "fit": {"n_epochs": h.get("n_epochs"), "stop_reason": h.get("stop_reason"), "events": h.get("events", []),
                "final_loss": epochs[-1]["loss"] if epochs else None,
                "fit_seconds": h.get("fit_seconds")},
    })

"""Explanations as data: shape graphs, purified pair heat maps, importance, a table-only scorer.

A fitted NeurCAM is a sum of shape functions. ``build_explanation`` evaluates every *term* (the
sum of the channels that selected the same feature, or the same unordered pair) on a grid in the
feature's original units, centres it on the data, purifies pair terms (Lengerich et al., 2020) so
that their mass that a main effect can carry moves there, and measures importance as the mean
absolute contribution (the EBM convention). The result is plain numbers: JSON / Parquet first,
plots and the HTML report are rendered from those numbers (``neurcam_dist.report``).

Grids: a feature with at most ``grid_size`` distinct values is evaluated at every value (exact
lookup); otherwise at quantiles. A pair's heat map uses a coarser grid (``pair_grid_size``) and
each main grid contains its feature's pair grid, so moving a pair's row means into the main
effect (linear between grid points) leaves the table model's logits exactly unchanged.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

SCHEMA = "neurcam-dist/explanation"
SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------- terms of a model
def term_groups(est) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Terms as sorted feature-index tuples, and for each channel the index of its term.

    A pair channel that picked the same feature twice is a function of one feature: it joins
    that feature's main term."""
    singles = [(int(i),) for i in est.net_.single.gates.selected()[:, 0].tolist()]
    pairs = [tuple(sorted(set(int(v) for v in p))) for p in est.net_.pairs.gates.selected().tolist()]
    keys = singles + pairs
    mains = sorted({k for k in keys if len(k) == 1})
    duos = sorted({k for k in keys if len(k) == 2})
    terms = mains + duos
    index = {t: n for n, t in enumerate(terms)}
    return terms, np.array([index[k] for k in keys], dtype=np.int64)


def term_name(term: tuple[int, ...], names: list[str]) -> str:
    return " & ".join(names[i] for i in term)


@dataclass
class RowExplanation:
    """Per-row additive decomposition: ``intercept + contributions.sum(1) == logits``."""

    terms: list[str]
    contributions: np.ndarray   # (rows, terms, clusters)
    intercept: np.ndarray       # (clusters,)
    logits: np.ndarray          # (rows, clusters)

    def to_frame(self):
        import pandas as pd
        n, t, k = self.contributions.shape
        return pd.DataFrame({
            "row": np.repeat(np.arange(n), t * k),
            "term": np.tile(np.repeat(np.asarray(self.terms, dtype=object), k), n),
            "cluster": np.tile(np.arange(k), n * t),
            "contribution": self.contributions.reshape(-1),
        })


def explain_rows(est, X) -> RowExplanation:
    """Each row's logits split into the model's terms, centred on the training data."""
    est._check_fitted()
    return rows_from_contributions(est, est.contributions(X))


def rows_from_contributions(est, contrib: np.ndarray) -> RowExplanation:
    """The per-row decomposition from already computed (N, channels, K) channel contributions
    (the batch scorer has them): channels summed into their terms with one matmul."""
    contrib = contrib.astype(np.float64)
    terms, owner = term_groups(est)
    membership = np.zeros((len(owner), len(terms)))
    membership[np.arange(len(owner)), owner] = 1.0
    out = np.einsum("nck,ct->ntk", contrib - est.channel_means_[None], membership)
    return RowExplanation(terms=[term_name(t, est.feature_names_in_) for t in terms], contributions=out,
                          intercept=est.channel_means_.sum(0), logits=contrib.sum(1))


# ---------------------------------------------------------------------------- grids and tables
def feature_grid(values: np.ndarray, size: int) -> tuple[np.ndarray, bool]:
    """(sorted grid, discrete?) over the observed range of one feature (original units)."""
    uniq = np.unique(values)
    if len(uniq) <= size:
        return uniq.astype(np.float64), True
    return np.unique(np.quantile(values, np.linspace(0.0, 1.0, size))).astype(np.float64), False


def nearest_index(grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    pos = np.clip(np.searchsorted(grid, values), 1, len(grid) - 1)
    left = grid[pos - 1]
    return np.where(np.abs(values - left) <= np.abs(grid[pos] - values), pos - 1, pos)


def interp_main(grid: np.ndarray, table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(N, K) linear interpolation of a (G, K) table; constant outside the grid."""
    if len(grid) == 1:
        return np.repeat(table[:1], len(values), axis=0)
    pos = np.clip(np.searchsorted(grid, values, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[pos], grid[pos + 1]
    frac = np.clip((values - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)[:, None]
    return table[pos] * (1 - frac) + table[pos + 1] * frac


def _axis_weights(grid, values):
    if len(grid) == 1:
        z = np.zeros(len(values), dtype=np.int64)
        return z, z, np.zeros(len(values))
    pos = np.clip(np.searchsorted(grid, values, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[pos], grid[pos + 1]
    frac = np.clip((values - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)
    return pos, np.minimum(pos + 1, len(grid) - 1), frac


def interp_pair(ga: np.ndarray, gb: np.ndarray, table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, K) bilinear interpolation of a (Ga, Gb, K) table; constant outside the grid."""
    a0, a1, fa = _axis_weights(ga, a)
    b0, b1, fb = _axis_weights(gb, b)
    fa, fb = fa[:, None], fb[:, None]
    return ((1 - fa) * (1 - fb) * table[a0, b0] + (1 - fa) * fb * table[a0, b1]
            + fa * (1 - fb) * table[a1, b0] + fa * fb * table[a1, b1])


def purify(pair: np.ndarray, weights: np.ndarray, tol: float = 1e-12, max_iter: int = 500):
    """Move a pair table's weighted row and column means into two main-effect tables.

    Returns ``(pure, main_a, main_b)`` with ``pure + main_a[:, None] + main_b[None, :] == pair``
    and every row and column of ``pure`` with zero mean under ``weights`` (rows/columns that
    carry no data weight are left as they are)."""
    pure = pair.astype(np.float64).copy()
    main_a = np.zeros((pure.shape[0], pure.shape[2]))
    main_b = np.zeros((pure.shape[1], pure.shape[2]))
    w = weights.astype(np.float64)
    wa, wb = w.sum(1), w.sum(0)
    scale = max(float(np.abs(pure).max()), 1.0)
    for _ in range(max_iter):
        ma = np.einsum("ab,abk->ak", w, pure) / np.where(wa > 0, wa, 1.0)[:, None]
        pure -= ma[:, None, :]
        main_a += ma
        mb = np.einsum("ab,abk->bk", w, pure) / np.where(wb > 0, wb, 1.0)[:, None]
        pure -= mb[None, :, :]
        main_b += mb
        if max(np.abs(ma).max(), np.abs(mb).max()) <= tol * scale:
            break
    return pure, main_a, main_b


# ---------------------------------------------------------------------------- the explanation
@dataclass
class Term:
    name: str
    kind: str                      # "main" or "pair"
    features: list[str]
    grids: list[np.ndarray]        # one per feature, original units
    discrete: list[bool]
    values: np.ndarray             # main: (G, K); pair: (Ga, Gb, K)
    importance: np.ndarray         # (K,) mean |contribution| over the data
    histogram: dict | None = None  # main terms: {"edges": [...], "counts": [...]}

    def evaluate(self, columns: list[np.ndarray]) -> np.ndarray:
        if self.kind == "main":
            return interp_main(self.grids[0], self.values, columns[0])
        return interp_pair(self.grids[0], self.grids[1], self.values, columns[0], columns[1])


@dataclass
class Explanation:
    feature_names: list[str]
    n_clusters: int
    intercept: np.ndarray
    terms: list[Term]
    cluster_sizes: list[int]
    profiles: list[dict]
    model_card: dict = field(default_factory=dict)

    # ---- derived views
    @property
    def importance(self) -> list[dict]:
        """Global ranking: mean over clusters of each term's importance, largest first."""
        rows = [{"term": t.name, "kind": t.kind, "importance": float(t.importance.mean()),
                 "per_cluster": t.importance.tolist()} for t in self.terms]
        return sorted(rows, key=lambda r: -r["importance"])

    def term(self, name: str) -> Term:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {name!r}; terms are {[t.name for t in self.terms]}")

    def logits(self, X) -> np.ndarray:
        """(N, K) logits of the table model (intercept + every term looked up / interpolated)."""
        cols = _columns(X, self.feature_names)
        out = np.tile(self.intercept, (len(next(iter(cols.values()))), 1))
        for t in self.terms:
            out += t.evaluate([cols[f] for f in t.features])
        return out

    def to_scorer(self) -> "TableScorer":
        return TableScorer(self)

    # ---- serialisation
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "feature_names": list(self.feature_names), "n_clusters": int(self.n_clusters),
            "intercept": self.intercept.tolist(),
            "cluster_sizes": list(map(int, self.cluster_sizes)),
            "profiles": self.profiles,
            "model_card": self.model_card,
            "terms": [{"name": t.name, "kind": t.kind, "features": t.features,
                       "grids": [g.tolist() for g in t.grids], "discrete": list(map(bool, t.discrete)),
                       "values": t.values.tolist(), "importance": t.importance.tolist(),
                       "histogram": t.histogram} for t in self.terms],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Explanation":
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a NeurCAM explanation (schema {d.get('schema')!r})")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"explanation schema version {d.get('schema_version')} is not supported "
                             f"(this version reads {SCHEMA_VERSION})")
        terms = [Term(name=t["name"], kind=t["kind"], features=list(t["features"]),
                      grids=[np.asarray(g, dtype=np.float64) for g in t["grids"]], discrete=list(t["discrete"]),
                      values=np.asarray(t["values"], dtype=np.float64),
                      importance=np.asarray(t["importance"], dtype=np.float64), histogram=t.get("histogram"))
                 for t in d["terms"]]
        return cls(feature_names=list(d["feature_names"]), n_clusters=int(d["n_clusters"]),
                   intercept=np.asarray(d["intercept"], dtype=np.float64), terms=terms,
                   cluster_sizes=list(d["cluster_sizes"]), profiles=list(d["profiles"]),
                   model_card=dict(d.get("model_card", {})))

    def to_json(self, path) -> None:
        from .persist import write_text_atomic
        write_text_atomic(Path(path), json.dumps(self.to_dict()))

    @classmethod
    def from_json(cls, path) -> "Explanation":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_parquet(self, directory) -> None:
        """``terms.parquet`` (one row per term and cluster: importance), ``grids.parquet`` (one row per
        grid point) and ``values.parquet`` (one row per grid cell and cluster), written atomically."""
        import pandas as pd

        from .persist import atomic_directory
        terms, grids, values = [], [], []
        for t in self.terms:
            for k in range(self.n_clusters):
                terms.append({"term": t.name, "kind": t.kind, "features": " & ".join(t.features), "cluster": k,
                              "importance": float(t.importance[k])})
            for axis, (f, g) in enumerate(zip(t.features, t.grids)):
                grids += [{"term": t.name, "axis": axis, "feature": f, "index": i, "value": float(v)}
                          for i, v in enumerate(g)]
            idx = np.indices(t.values.shape[:-1]).reshape(len(t.features), -1).T
            flat = t.values.reshape(-1, self.n_clusters)
            for (cell, row) in zip(idx, flat):
                for k in range(self.n_clusters):
                    values.append({"term": t.name, "i": int(cell[0]), "j": int(cell[1]) if len(cell) > 1 else -1,
                                   "cluster": k, "value": float(row[k])})
        intercept = pd.DataFrame({"cluster": np.arange(self.n_clusters), "intercept": self.intercept})

        def write(tmp: Path) -> None:
            pd.DataFrame(terms).to_parquet(tmp / "terms.parquet", index=False)
            pd.DataFrame(grids).to_parquet(tmp / "grids.parquet", index=False)
            pd.DataFrame(values).to_parquet(tmp / "values.parquet", index=False)
            intercept.to_parquet(tmp / "intercept.parquet", index=False)

        atomic_directory(Path(directory), write, marker="terms.parquet")


class TableScorer:
    """Scores with numpy and the exported tables only (no torch): lookup for discrete features,
    linear / bilinear interpolation between grid points otherwise."""

    def __init__(self, explanation: Explanation):
        self.explanation = explanation

    def decision_function(self, X) -> np.ndarray:
        return self.explanation.logits(X)

    def predict_proba(self, X) -> np.ndarray:
        g = self.decision_function(X)
        g = g - g.max(1, keepdims=True)
        e = np.exp(g)
        return e / e.sum(1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        return self.decision_function(X).argmax(1)


def _columns(X, names: list[str]) -> dict[str, np.ndarray]:
    import pandas as pd
    if isinstance(X, pd.DataFrame):
        missing = [n for n in names if n not in X.columns]
        if missing:
            raise ValueError(f"X lacks the model's feature columns {missing}")
        return {n: X[n].to_numpy(np.float64) for n in names}
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(names):
        raise ValueError(f"X must have {len(names)} columns ({names}), got shape {arr.shape}")
    return {n: arr[:, j] for j, n in enumerate(names)}


@torch.no_grad()
def _term_table(est, channels: np.ndarray, features: tuple[int, ...], grids: list[np.ndarray]) -> np.ndarray:
    """Sum of ``channels``' contributions on the grid of ``features`` (other inputs at 0)."""
    mesh = np.meshgrid(*grids, indexing="ij")
    n = mesh[0].size
    x = np.zeros((n, est.n_features_in_), dtype=np.float32)
    for f, m in zip(features, mesh):
        x[:, f] = (m.reshape(-1) - est.mean_[f]) / est.scale_[f]
    t, t2 = est.temperatures_
    contrib = est.net_.contributions(torch.from_numpy(x).to(est._device()), t, t2).double().cpu().numpy()
    table = contrib[:, channels, :].sum(1)
    return table.reshape(*mesh[0].shape, -1)


def build_explanation(est, X, grid_size: int = 128, pair_grid_size: int = 32, n_bins: int = 30) -> Explanation:
    """The ``Explanation`` of a fitted model over data ``X`` (its distribution centres the terms,
    weights the purification and defines importance)."""
    est._check_fitted()
    names = list(est.feature_names_in_)
    from .validation import check_matrix
    arr, _, _ = check_matrix(X, "X", expected_columns=est.feature_names_in_)  # original units, fitted order
    arr = arr.astype(np.float64)
    terms, owner = term_groups(est)
    k = est.net_.n_clusters
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
    for n, t in enumerate(terms):
        if len(t) == 1:
            mains[t[0]] += _term_table(est, np.flatnonzero(owner == n), t, [main_grid[t[0]][0]])
    pair_tables = {}
    for n, t in enumerate(terms):
        if len(t) == 2:
            a, b = t
            ga, gb = pair_grid[a][0], pair_grid[b][0]
            raw = _term_table(est, np.flatnonzero(owner == n), t, [ga, gb])
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
                       terms=out_terms, cluster_sizes=[], profiles=[], model_card=model_card(est, arr))
    _add_profiles(expl, est.predict(X), np.stack(at_rows_all, axis=1))
    return expl


def _add_profiles(expl: Explanation, labels: np.ndarray, per_term: np.ndarray, top: int = 3) -> None:
    """Cluster sizes and the terms that push members in / out; ``per_term`` is (N, T, K), the
    exported terms evaluated at the explained rows (already computed for importance)."""
    k = expl.n_clusters
    expl.cluster_sizes = np.bincount(labels, minlength=k).tolist()
    # Softmax ignores what a term adds to every cluster alike: what separates cluster c is the
    # term's contribution to c minus its mean contribution over all clusters.
    per_term = per_term - per_term.mean(2, keepdims=True)
    profiles = []
    for c in range(k):
        members = labels == c
        if not members.any():
            profiles.append({"cluster": c, "size": 0, "into": [], "out_of": []})
            continue
        mean = per_term[members, :, c].mean(0)
        order = np.argsort(-mean)
        into = [{"term": expl.terms[i].name, "mean_relative_contribution": float(mean[i])}
                for i in order[:top] if mean[i] > 0]
        out = [{"term": expl.terms[i].name, "mean_relative_contribution": float(mean[i])}
               for i in order[::-1][:top] if mean[i] < 0]
        profiles.append({"cluster": c, "size": int(members.sum()), "into": into, "out_of": out})
    expl.profiles = profiles


def model_card(est, arr: np.ndarray) -> dict:
    from .persist import _jsonable
    h = est.history_ or {}
    epochs = h.get("epochs", [])
    return _jsonable({
        "hyperparameters": {k: (list(v) if isinstance(v, tuple) else v) for k, v in est.get_params().items()},
        "data": {"n_rows": int(arr.shape[0]), "columns": list(est.feature_names_in_),
                 "sha256": hashlib.sha256(np.ascontiguousarray(arr, dtype=np.float64).tobytes()).hexdigest()},
        "selected_features": list(est.selected_features_),
        "selected_pairs": [list(p) for p in est.selected_pairs_],
        "fit": {"n_epochs": h.get("n_epochs"), "stop_reason": h.get("stop_reason"), "events": h.get("events", []),
                "final_loss": epochs[-1]["loss"] if epochs else None,
                "fit_seconds": h.get("fit_seconds")},
    })

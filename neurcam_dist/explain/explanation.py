"""Explanations as data: shape graphs, purified pair heat maps, importance, a table-only scorer.

A fitted NeurCAM is a sum of shape functions. ``build.build_explanation`` evaluates every *term* (the
sum of the channels that selected the same feature, or the same unordered pair) on a grid in the
feature's original units, centres it on the data, purifies pair terms (Lengerich et al., 2020) so
that their mass that a main effect can carry moves there, and measures importance as the mean
absolute contribution (the EBM convention). The result is plain numbers: JSON / Parquet first,
plots and the HTML report are rendered from those numbers (``report``). This module holds the
data objects and the table-only scorer: numpy and pandas, no torch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError, ModelFileError
from ..numerics import fmt, softmax
from ..storage import atomic_directory, write_text_atomic
from ..uris import Location, Where
from .grids import interp_main, interp_pair

SCHEMA = "neurcam-dist/explanation"
SCHEMA_VERSION = 1


@dataclass
class Term:
    """One shape function of the explanation: its name, kind (main or pair), features, grids in
    the original units, values per grid point and cluster, importance and histogram.

    A categorical feature's grid is its level codes ``0 .. L-1`` and ``levels`` names them (one
    entry per feature: the level names with ``other`` last, or None for a numeric feature). When
    the model reads missing cells, ``missing`` holds what a missing cell contributes: a main term's
    (K,) values; a pair term's ``{"a": (Gb, K), "b": (Ga, K), "both": (K,)}`` (the first feature
    missing along the second's grid, the second missing along the first's, both missing)."""
    name: str
    kind: str                      # "main" or "pair"
    features: list[str]
    grids: list[np.ndarray]        # one per feature, original units (level codes for a categorical)
    discrete: list[bool]
    values: np.ndarray             # main: (G, K); pair: (Ga, Gb, K)
    importance: np.ndarray         # (K,) mean |contribution| over the data
    histogram: dict | None = None  # main terms: {"edges": [...], "counts": [...]} (categorical: "counts" per level)
    levels: list | None = None     # per feature: level names (categorical) or None
    missing: object = None         # main: (K,) array; pair: dict of arrays (see above); None: not read

    def level_names(self, axis: int = 0) -> list[str] | None:
        """The level names of feature ``axis`` (None for a numeric feature)."""
        return None if not self.levels else self.levels[axis]

    def evaluate(self, columns: list[np.ndarray]) -> np.ndarray:
        """The term's (n, K) contribution at the given feature columns (interpolated on its grid;
        a level code looked up; a missing cell, NaN, takes the term's missing values)."""
        cols = [np.asarray(c, np.float64) for c in columns]
        nan = [np.isnan(c) for c in cols]
        if not any(m.any() for m in nan):
            if self.kind == "main":
                return interp_main(self.grids[0], self.values, cols[0])
            return interp_pair(self.grids[0], self.grids[1], self.values, cols[0], cols[1])
        if self.missing is None:
            raise DataError(f"term {self.name!r} has no value for a missing cell (the model was trained without "
                            f"missing='learn'), and {int(sum(m.sum() for m in nan))} cell(s) are missing")
        filled = [np.where(m, g[0], c) for m, g, c in zip(nan, self.grids, cols, strict=False)]
        if self.kind == "main":
            out = interp_main(self.grids[0], self.values, filled[0])
            out[nan[0]] = np.asarray(self.missing)
            return out
        out = interp_pair(self.grids[0], self.grids[1], self.values, filled[0], filled[1])
        only_a, only_b, both = nan[0] & ~nan[1], nan[1] & ~nan[0], nan[0] & nan[1]
        out[only_a] = interp_main(self.grids[1], np.asarray(self.missing["a"]), filled[1][only_a])
        out[only_b] = interp_main(self.grids[0], np.asarray(self.missing["b"]), filled[0][only_b])
        out[both] = np.asarray(self.missing["both"])
        return out


def _missing_json(missing):
    if missing is None:
        return None
    if isinstance(missing, dict):
        return {k: np.asarray(v).tolist() for k, v in missing.items()}
    return np.asarray(missing).tolist()


def _missing_from(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: np.asarray(v, dtype=np.float64) for k, v in value.items()}
    return np.asarray(value, dtype=np.float64)


@dataclass(frozen=True)
class Explanation:
    """Explanations as data: the intercept, the terms with their shape graphs, importance,
    cluster profiles, cluster ids and the model card; JSON round-trips exactly. Frozen:
    ``build.build_explanation`` returns it complete (examples, labels, comparison, stability
    included) and nothing changes it afterwards.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from neurcam_dist import NeurCAM
    >>> rng = np.random.default_rng(0)
    >>> X = pd.DataFrame(np.r_[rng.normal(0, 1, (100, 2)), rng.normal(5, 1, (100, 2))], columns=["age", "spend"])
    >>> est = NeurCAM(n_clusters=2, epochs=12, warmup_epochs=4, verbose=False).fit(X)
    >>> expl = est.explain(X)
    >>> sorted(t.name for t in expl.terms), expl.n_clusters
    (['age', 'spend'], 2)
    >>> bool((expl.to_scorer().predict(X) == est.predict(X)).mean() > 0.95)   # the tables score as the model
    True
    """
    feature_names: list[str]
    n_clusters: int
    intercept: np.ndarray
    terms: list[Term]
    cluster_sizes: list[int]
    profiles: list[dict]
    model_card: dict = field(default_factory=dict)
    cluster_ids: list[int] | None = None   # the model's stable id of each cluster column (None given: 0..K-1)
    examples: dict | None = None    # typical rows per cluster and chosen rows (``examples.row_records``)
    stability: dict | None = None   # against other runs' explanations (``stability.stability``)
    comparison: dict | None = None  # against an earlier model version (``compare.compare``)

    def __post_init__(self) -> None:
        # the stable id of each cluster column: 0..K-1 unless a re-clustering renamed them
        ids = range(self.n_clusters) if self.cluster_ids is None else self.cluster_ids
        object.__setattr__(self, "cluster_ids", [int(v) for v in ids])

    # ---- derived views
    @property
    def importance(self) -> list[dict]:
        """Global ranking: mean over clusters of each term's importance, largest first."""
        rows = [{"term": t.name, "kind": t.kind, "importance": float(t.importance.mean()),
                 "per_cluster": t.importance.tolist()} for t in self.terms]
        return sorted(rows, key=lambda r: -r["importance"])

    def importance_frame(self):
        """``importance`` as a DataFrame: one row per term (largest first) with its kind, global
        importance and one ``importance_ID`` column per cluster."""
        return importance_table(self.importance, self.cluster_ids)

    def profiles_frame(self):
        """``profiles`` as a DataFrame: one row per cluster with its size, share of the rows and
        the terms that pull rows into it and push them out (strongest first)."""
        return profiles_table(self.profiles, self.cluster_ids)

    def _repr_html_(self) -> str:
        """A compact table for notebooks: each cluster's size and the terms that define it."""
        import html
        top = ", ".join(html.escape(r["term"]) for r in self.importance[:5])
        rows = "".join(f"<tr><td>{r.cluster}</td><td>{r.size:,}</td><td>{r.share:.1%}</td>"
                       f"<td>{html.escape(r.into)}</td><td>{html.escape(r.out_of)}</td></tr>"
                       for r in self.profiles_frame().itertuples())
        return (f"<div><b>NeurCAM explanation</b>: {self.n_clusters} clusters, {len(self.terms)} terms; most "
                f"important: {top}<table><thead><tr><th>cluster</th><th>rows</th><th>share</th>"
                f"<th>pulled in by</th><th>pushed out by</th></tr></thead><tbody>{rows}</tbody></table></div>")

    def term(self, name: str) -> Term:
        """The term named ``name`` (``KeyError`` listing the terms otherwise)."""
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no term {name!r}; terms are {[t.name for t in self.terms]}")

    def logits(self, X) -> np.ndarray:
        """(N, K) logits of the table model (intercept + every term looked up / interpolated)."""
        tokens = tuple((self.model_card.get("hyperparameters") or {}).get("missing_values") or ())
        cols = _columns(X, self.feature_names, self.categorical_levels(), tokens)
        out = np.tile(self.intercept, (len(next(iter(cols.values()))), 1))
        for t in self.terms:
            out += t.evaluate([cols[f] for f in t.features])
        return out

    def categorical_levels(self) -> dict[str, list[str]]:
        """Feature -> its level names (``other`` and ``missing`` last) for every categorical feature."""
        out = {}
        for t in self.terms:
            for axis, f in enumerate(t.features):
                names = t.level_names(axis)
                if names is not None:
                    out[f] = list(names)
        return out

    def to_scorer(self) -> "TableScorer":
        """The table-only scorer of this explanation (``TableScorer``)."""
        return TableScorer(self)

    # ---- serialisation
    def to_dict(self) -> dict:
        """The explanation as JSON-ready values (``schema`` and ``schema_version`` first)."""
        return {
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
            "feature_names": list(self.feature_names), "n_clusters": int(self.n_clusters),
            "cluster_ids": self.cluster_ids,
            "intercept": self.intercept.tolist(),
            "cluster_sizes": list(map(int, self.cluster_sizes)),
            "profiles": self.profiles,
            "model_card": self.model_card,
            "examples": self.examples, "stability": self.stability, "comparison": self.comparison,
            "terms": [{"name": t.name, "kind": t.kind, "features": t.features,
                       "grids": [g.tolist() for g in t.grids], "discrete": list(map(bool, t.discrete)),
                       "values": t.values.tolist(), "importance": t.importance.tolist(),
                       "histogram": t.histogram, "levels": t.levels, "missing": _missing_json(t.missing)}
                      for t in self.terms],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Explanation":
        """The explanation ``to_dict`` gave; ``ModelFileError`` for another schema or version."""
        if d.get("schema") != SCHEMA:
            raise ModelFileError(f"not a NeurCAM explanation (schema {d.get('schema')!r})")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ModelFileError(f"explanation schema version {d.get('schema_version')} is not supported "
                             f"(this version reads {SCHEMA_VERSION})")
        terms = [Term(name=t["name"], kind=t["kind"], features=list(t["features"]),
                      grids=[np.asarray(g, dtype=np.float64) for g in t["grids"]], discrete=list(t["discrete"]),
                      values=np.asarray(t["values"], dtype=np.float64),
                      importance=np.asarray(t["importance"], dtype=np.float64), histogram=t.get("histogram"),
                      levels=t.get("levels"), missing=_missing_from(t.get("missing")))
                 for t in d["terms"]]
        return cls(feature_names=list(d["feature_names"]), n_clusters=int(d["n_clusters"]),
                   intercept=np.asarray(d["intercept"], dtype=np.float64), terms=terms,
                   cluster_sizes=list(d["cluster_sizes"]), profiles=list(d["profiles"]),
                   model_card=dict(d.get("model_card", {})), cluster_ids=d.get("cluster_ids"),
                   examples=d.get("examples"), stability=d.get("stability"), comparison=d.get("comparison"))

    def to_json(self, path: Where) -> None:
        """Write ``to_dict`` to ``path`` atomically (a local file, or an object store's key)."""
        write_text_atomic(Location(path), json.dumps(self.to_dict()))

    @classmethod
    def from_json(cls, path: Where) -> "Explanation":
        """The explanation written by ``to_json`` (a local file, or an object store's key)."""
        from ..storage.published import read_text
        return cls.from_dict(json.loads(read_text(Location(path))))

    def to_parquet(self, directory: Where) -> None:
        """``terms.parquet`` (one row per term and cluster: importance), ``grids.parquet`` (one row per
        grid point) and ``values.parquet`` (one row per grid cell and cluster), written atomically."""
        import pandas as pd

        terms, grids, values = [], [], []
        ids = self.cluster_ids
        for t in self.terms:
            for k in range(self.n_clusters):
                terms.append({"term": t.name, "kind": t.kind, "features": " & ".join(t.features), "cluster": ids[k],
                              "importance": float(t.importance[k])})
            for axis, (f, g) in enumerate(zip(t.features, t.grids, strict=False)):
                grids += [{"term": t.name, "axis": axis, "feature": f, "index": i, "value": float(v)}
                          for i, v in enumerate(g)]
            idx = np.indices(t.values.shape[:-1]).reshape(len(t.features), -1).T
            flat = t.values.reshape(-1, self.n_clusters)
            for (cell, row) in zip(idx, flat, strict=False):
                for k in range(self.n_clusters):
                    values.append({"term": t.name, "i": int(cell[0]), "j": int(cell[1]) if len(cell) > 1 else -1,
                                   "cluster": ids[k], "value": float(row[k])})
        intercept = pd.DataFrame({"cluster": ids, "intercept": self.intercept})

        def write(tmp: Path) -> None:
            pd.DataFrame(terms).to_parquet(tmp / "terms.parquet", index=False)
            pd.DataFrame(grids).to_parquet(tmp / "grids.parquet", index=False)
            pd.DataFrame(values).to_parquet(tmp / "values.parquet", index=False)
            intercept.to_parquet(tmp / "intercept.parquet", index=False)

        atomic_directory(Location(directory), write, marker="terms.parquet")


DISTINCT = 0.5  # |standardized mean difference| from which a cluster's feature counts as high / low


def _names(terms) -> list[str]:
    return [t["term"] if isinstance(t, dict) else t for t in terms]


def importance_table(rows: list[dict], ids):
    """Importance records (``term``, ``kind``, ``importance``, ``per_cluster`` by logit column)
    as a DataFrame with one ``importance_ID`` column per cluster id."""
    import pandas as pd
    return pd.DataFrame([{"term": r["term"], "kind": r["kind"], "importance": r["importance"],
                          **{f"importance_{int(i)}": v for i, v in zip(ids, r["per_cluster"], strict=False)}} for r in rows],
                        columns=["term", "kind", "importance", *(f"importance_{int(i)}" for i in ids)])


def profiles_table(profiles: list[dict], ids):
    """Cluster profiles (by logit column: ``size``, ``into``, ``out_of``) as a DataFrame with the
    cluster ids, each cluster's share of the rows and its terms joined strongest first."""
    import pandas as pd
    total = max(sum(p["size"] for p in profiles), 1)
    return pd.DataFrame([{"cluster": int(i), "size": p["size"], "share": p["size"] / total,
                          "into": ", ".join(_names(p["into"])), "out_of": ", ".join(_names(p["out_of"]))}
                         for i, p in zip(ids, profiles, strict=False)], columns=["cluster", "size", "share", "into", "out_of"])


def summary_of(expl: "Explanation") -> dict:
    """What a saved model keeps of an explanation over its training rows: the importance and
    profile records, by logit column, with term names only (``importance_table``,
    ``profiles_table`` render them with the model's current cluster ids)."""
    return {"importance": [{k: r[k] for k in ("term", "kind", "importance", "per_cluster")} for r in expl.importance],
            "profiles": [{"size": p["size"], "into": _names(p["into"]), "out_of": _names(p["out_of"])}
                         for p in expl.profiles]}


def cluster_summary(profile: dict, n: int = 2, digits=None) -> str:
    """One sentence on what a cluster's rows look like, from its profile: the features of the terms
    that push rows in come first, then the others by how far the members' mean is from all rows'
    (in standard deviations); only features at least ``DISTINCT`` away are named. ``digits`` formats
    a number (``fmt`` by default)."""
    digits = digits or fmt
    if not profile.get("size"):
        return "No row of the explained data falls in this cluster."
    stats = {f["feature"]: f for f in profile.get("features", [])}
    if not stats:
        return "Pushed in mostly by " + ", ".join(q["term"] for q in profile.get("into", [])) + "." \
            if profile.get("into") else "No term pushes rows into this cluster more than into the others."
    order = [f for q in profile.get("into", []) for f in q.get("features", []) if f in stats]
    order += sorted(stats, key=lambda f: -abs(stats[f]["z"]))
    named = []
    for f in dict.fromkeys(order):
        if abs(stats[f]["z"]) >= DISTINCT and len(named) < n:
            s = stats[f]
            if "level" in s:
                named.append(f"{f} = {s['level']} ({s['share']:.0%} against {s['overall_share']:.0%} over all rows)")
            else:
                named.append(f"{'high' if s['z'] > 0 else 'low'} {f} (mean {digits(s['mean'])} against "
                             f"{digits(s['overall_mean'])} over all rows)")
    if not named:
        into = profile.get("into", [])
        return ("Rows near the overall average of every feature the model uses"
                + (f"; {into[0]['term']} sets them apart." if into else "."))
    return "Mostly rows with " + " and ".join(named) + "."


class TableScorer:
    """Scores with numpy and the exported tables only (no torch): lookup for discrete features,
    linear / bilinear interpolation between grid points otherwise."""

    def __init__(self, explanation: Explanation):
        self.explanation = explanation

    def decision_function(self, X) -> np.ndarray:
        """(N, K) logits from the lookup tables (intercept + every term)."""
        return self.explanation.logits(X)

    def predict_proba(self, X) -> np.ndarray:
        """(N, K) cluster probabilities (softmax of the table logits)."""
        return softmax(self.decision_function(X))

    def predict(self, X) -> np.ndarray:
        """Each row's stable cluster id (``Explanation.cluster_ids``) from the table logits, as
        ``NeurCAM.predict`` gives it."""
        return np.asarray(self.explanation.cluster_ids, dtype=np.int64)[self.decision_function(X).argmax(1)]


def _columns(X, names: list[str], levels: dict | None = None, tokens: tuple = ()) -> dict[str, np.ndarray]:
    """Each feature as float64 values: numbers as they are (missing: NaN), a categorical column's
    text as its level code (``levels``: feature -> level names; an unseen level is ``other``);
    cells that are one of the model's ``missing_values`` (``tokens``) are missing, as the model
    reads them (``columns.without_tokens``)."""
    import pandas as pd

    from ..columns import without_tokens
    levels = levels or {}
    if isinstance(X, pd.DataFrame):
        missing = [n for n in names if n not in X.columns]
        if missing:
            raise DataError(f"X lacks the model's feature columns {missing}")
        cells = {n: without_tokens(X[n], tokens) for n in names}
        return {n: _level_codes(cells[n], levels[n]) if n in levels else
                pd.Series(cells[n]).to_numpy(np.float64, na_value=np.nan) for n in names}
    arr = np.asarray(X, dtype=object if levels or tokens else np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(names):
        raise DataError(f"X must have {len(names)} columns ({names}), got shape {arr.shape}")
    cells = {n: without_tokens(arr[:, j], tokens) for j, n in enumerate(names)}
    return {n: _level_codes(cells[n], levels[n]) if n in levels else
            pd.Series(cells[n]).to_numpy(np.float64, na_value=np.nan) for n in names}


def _level_codes(column, names: list[str]) -> np.ndarray:
    """A categorical column's cells as level codes (NaN: missing; unseen: the ``other`` code)."""
    from ..columns import level_codes
    return level_codes(column, names[:-1])[0]   # names: the levels, other, then missing

"""Choosing K from the model's own evidence: for each K, several seeds, each fitted on its own
subsample of the rows; then separation (silhouette in the clustering space), stability (ARI
between the seeds' partitions of the same rows), agreement of the seeds' top terms, and one rule.

The rule (``RULE``, designed on generated Gaussian mixtures; docs/choosing-k.md shows the design
table): among the K whose fits **use every cluster** (a K whose seeds leave a cluster empty is a
smaller K in disguise), whose partition is **stable** (mean ARI between seeds >= ``STABLE``) and
**separated** (silhouette >= ``SEPARATED`` x the best silhouette of the range), the largest. A K
past the true one splits a cluster in a place each subsample draws anew (unstable); a K short of
it merges clusters (lower silhouette than the true K, often no less stable). When no K is both,
the best silhouette is proposed and the choice is marked unsure.

The estimator is passed in (``make(k, seed)`` returns an unfitted one), so this module sits below
``estimator`` and the estimator's ``n_clusters="auto"`` can call it.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .errors import ConfigError
from .numerics import fmt

STABLE = 0.9          # mean ARI between the seeds' partitions for a K to count as stable
SEPARATED = 0.95      # share of the range's best silhouette for a K to count as separated
SEEDS = 3             # seeds per K
SUBSAMPLE = 0.8       # share of the (sampled) rows each seed is fitted on
MAX_ROWS = 5000       # rows the fits see (a seeded sample of a larger table)
SILHOUETTE_ROWS = 2000  # rows silhouette is measured on (a seeded sample)
TERMS_WITHIN = 1.02   # --terms: the smallest model within this factor of the full model's inertia
AGREEMENT_TERMS = 5         # the top terms whose agreement between seeds is measured
RULE = (f"the largest K whose every seed uses all K clusters and whose partition is stable (mean ARI between "
        f"{{seeds}} seeds {{how}} >= {STABLE}) and separated (silhouette >= {SEPARATED} x the best silhouette); else "
        f"the best silhouette of the K that use all their clusters")
ON_SUBSAMPLES = f"on {SUBSAMPLE:.0%} subsamples"


@dataclass(frozen=True)
class KChoice:
    """What ``choose_k`` found: the proposed ``k``, the ``rule`` that proposed it, the
    ``runner_up`` (``{"k", "why"}``, or None), whether the proposal is ``sure``, and the ``table``:
    one row per K (``k``, ``inertia``, ``silhouette``, ``stability``, ``stability_sd``,
    ``term_agreement``, ``terms_used``, ``clusters_used`` (the fewest over the seeds), ``stable``,
    ``separated``, ``seconds``). ``terms``: with
    ``terms=True``, one row per sparser model of the proposed K (``n_single``, ``n_pairs``,
    ``terms``, ``inertia``, ``ratio``, ``seconds``) and ``smallest``, the fewest terms within
    ``TERMS_WITHIN`` of the full model."""

    k: int
    rule: str
    runner_up: dict | None
    sure: bool
    table: list[dict]
    rows: int
    seeds: int
    seconds: float
    terms: list[dict] | None = None
    smallest: dict | None = None
    clusters: list[dict] = field(default_factory=list)

    @property
    def edge(self) -> str | None:
        """When the proposal is the largest K tried (of several): a line saying a larger K may be
        better and the wider range to try; else None."""
        ks = [r["k"] for r in self.table]
        if len(ks) < 2 or self.k != max(ks):
            return None
        return (f"K = {self.k} is the largest K tried ({min(ks)}-{max(ks)}): a larger K may be better still; "
                f"try a wider range, --k {min(ks)}-{2 * self.k}")

    def to_dict(self) -> dict:
        """JSON-ready (what ``choice.json`` holds, with the data's name and columns)."""
        return {"k": self.k, "rule": self.rule, "sure": self.sure, "edge": self.edge, "runner_up": self.runner_up,
                "rows": self.rows,
                "seeds": self.seeds, "seconds": round(self.seconds, 2), "table": self.table,
                "terms": self.terms, "smallest": self.smallest, "clusters": self.clusters}

    def frame(self):
        """The table as a DataFrame indexed by K."""
        import pandas as pd
        return pd.DataFrame(self.table).set_index("k")

    def lines(self) -> list[str]:
        """The table and the proposal, as the command prints them."""
        ari = bool(self.table) and "ari" in self.table[0]
        head = (f"{'K':>3} {'inertia':>9} {'silhouette':>10} {'stability':>13} {'top terms':>9} {'terms':>5} "
                f"{'used':>4} {'s':>6}" + (f" {'ARI':>6}" if ari else ""))
        out = [head]
        for r in self.table:
            mark = " <" if r["k"] == self.k else ""
            out.append(f"{r['k']:>3} {fmt(r['inertia']):>9} {r['silhouette']:>10.3f} "
                       f"{r['stability']:>7.3f} ±{r['stability_sd']:<5.3f} {r['term_agreement']:>9.2f} "
                       f"{r['terms_used']:>5} {r['clusters_used']:>4} {r['seconds']:>6.1f}"
                       + (f" {r['ari']:>6.3f}" if ari else "") + mark)
        out.append(f"proposed K = {self.k}{'' if self.sure else ' (unsure)'}: {self.rule}")
        if self.runner_up:
            out.append(f"runner-up K = {self.runner_up['k']}: {self.runner_up['why']}")
        if self.edge:
            out.append(self.edge)
        if self.smallest:
            s = self.smallest
            out.append(f"fewest terms within {TERMS_WITHIN}x of the full model's inertia: {s['terms']} "
                       f"(n_single={s['n_single']}, n_pairs={s['n_pairs']}; {s['ratio']:.3f}x)")
        return out


def k_range(given) -> list[int]:
    """``"2-12"``, ``"3,5,8"``, a range or a list -> sorted distinct ints (each >= 2)."""
    if isinstance(given, str):
        try:
            if "-" in given.strip("-"):
                lo, hi = (int(p) for p in given.split("-", 1))
                ks = None
            else:
                ks = [int(p) for p in given.replace(",", " ").split()]
        except ValueError:
            raise ConfigError(f"k must be a range such as 2-12 or a list such as 3,5,8, got {given!r}") from None
        if ks is None:
            _refuse_too_many(hi - lo + 1, given)
            ks = list(range(lo, hi + 1))
    else:
        try:
            ks = [int(v) for v in given]
        except (TypeError, ValueError):
            raise ConfigError(f"k must be a range or a list of whole numbers, got {given!r}") from None
    ks = sorted(set(ks))
    _refuse_too_many(len(ks), given)
    if len(ks) < 2:
        raise ConfigError(f"k must give at least two values of K to choose between, got {given!r}")
    if ks[0] < 2:
        raise ConfigError(f"k must start at 2 or more (a single cluster explains nothing), got {given!r}")
    return ks


MAX_KS = 100   # values of K one choose-k compares (each is ``seeds`` fits)


def _refuse_too_many(count: int, given) -> None:
    """A range of more than ``MAX_KS`` values is refused before it is built (``2-300000000``)."""
    if count > MAX_KS:
        shown = given if isinstance(given, str) else f"{list(given)[:3]}..."
        raise ConfigError(f"k {shown!r} asks for {count:,} values of K; choose-k compares at most {MAX_KS} (each is "
                          f"a fit per seed): narrow the range (2-12) or list the values to compare (5,10,20,50)")


def check_request(ks: list[int], seeds: int, n_rows: int | None = None) -> None:
    """Refuse before any fit: one seed (stability needs two) and, once the rows are counted, a K
    that a seed's subsample cannot hold."""
    if seeds < 2:
        raise ConfigError(f"seeds must be 2 or more: stability is the agreement between seeds, got {seeds}")
    if n_rows is None:
        return
    fit_rows = int(SUBSAMPLE * min(n_rows, MAX_ROWS))
    if ks[-1] >= fit_rows:
        raise ConfigError(f"k goes up to {ks[-1]}, but each seed is fitted on {fit_rows} rows "
                          f"({SUBSAMPLE:.0%} of {min(n_rows, MAX_ROWS)}): use K below {fit_rows}, or more rows")
    need = request_bytes(ks, seeds, n_rows)
    from .settings import available_memory
    if need > 0.5 * available_memory():
        raise ConfigError(f"choose-k over {len(ks)} values of K x {seeds} seeds would keep about {need / 2**30:.1f} "
                          f"GiB (every fit's labels of the {min(n_rows, MAX_ROWS):,} sampled rows, and a batch's "
                          f"distances to K = {ks[-1]} centroids), over half of the "
                          f"{available_memory() / 2**30:.1f} GiB available: compare fewer or smaller K")


def request_bytes(ks: list[int], seeds: int, n_rows: int) -> int:
    """An estimate of what a choose-k request keeps in memory: every fit's labels of the sampled
    rows (int64) and the stability comparison's pairs, plus one fit's distances of a batch of 512
    rows to its K centroids with their gradients (float32, about 3 copies)."""
    m = min(n_rows, MAX_ROWS)
    return int(len(ks) * seeds * m * 8 * 2 + 512 * ks[-1] * 4 * 3)


def propose(table: list[dict], seeds: int) -> tuple[int, dict | None, bool]:
    """The rule over the measured table: (proposed K, runner-up, sure). Marks each row's
    ``stable`` and ``separated`` in place."""
    best_sil = max(r["silhouette"] for r in table)
    for r in table:
        r["stable"] = bool(r["stability"] >= STABLE)
        r["separated"] = bool(r["silhouette"] >= SEPARATED * best_sil)
    both = [r for r in table if r["stable"] and r["separated"] and r.get("clusters_used", r["k"]) == r["k"]]
    full = [r for r in table if r.get("clusters_used", r["k"]) == r["k"]]
    if not full:   # no K tried used all its clusters: propose what the fits used, never a K none used
        used = max(r.get("clusters_used", r["k"]) for r in table)
        most = min((r for r in table if r.get("clusters_used", r["k"]) == used), key=lambda r: r["k"])
        return used, {"k": most["k"], "why": f"tried, but its fits used only {used} of its {most['k']} clusters"}, False
    by_sil = max(full, key=lambda r: r["silhouette"])
    if not both:
        rest = [r for r in table if r["k"] != by_sil["k"]]
        other = max(rest, key=lambda r: r["stability"])
        return by_sil["k"], {"k": other["k"], "why": f"the most stable other K (ARI {other['stability']:.3f}); "
                                                     f"no K was both stable and separated"}, False
    chosen = max(both, key=lambda r: r["k"])
    others = [r for r in both if r["k"] != chosen["k"]]
    if others:
        other = max(others, key=lambda r: r["k"])
        why = (f"also stable (ARI {other['stability']:.3f}) and separated (silhouette {other['silhouette']:.3f} "
               f"against {chosen['silhouette']:.3f}), with fewer clusters")
        return chosen["k"], {"k": other["k"], "why": why}, True
    near = [r for r in table if r["k"] != chosen["k"]]
    other = max(near, key=lambda r: min(r["stability"] / STABLE, r["silhouette"] / (SEPARATED * best_sil)))
    lacks = [w for w, ok in (("stable (ARI %.3f)" % other["stability"], other["stable"]),
                             ("separated (silhouette %.3f)" % other["silhouette"], other["separated"]),
                             ("every cluster used (%s of %d)" % (other.get("clusters_used"), other["k"]),
                              other.get("clusters_used", other["k"]) == other["k"])) if not ok]
    why = "not " + " and not ".join(lacks) if lacks else "also qualifies"
    return chosen["k"], {"k": other["k"], "why": f"the nearest other K to the rule, {why}"}, True


def choose_k(X, make: Callable[[int, int], object], k=range(2, 13), *, y=None, seeds: int = SEEDS,
             random_state: int = 0, n_jobs: int | None = None, terms: bool = False, describe: bool = False,
             say: Callable[[str], None] | None = None) -> KChoice:
    """Fit ``make(K, seed)`` for every K of ``k`` and every seed, each seed on its own
    ``SUBSAMPLE`` of the rows (a seeded sample of ``MAX_ROWS`` when there are more), and propose
    a K by ``RULE``. ``y``: a label, for evaluation only (each K's mean ARI with it, ``ari``);
    ``n_jobs``: fits at once (joblib processes; None: one per core up to 8, each fit on one thread);
    ``terms``: also fit sparser models of the proposed K; ``describe``: fit the proposed K on
    every sampled row (seed 0) and describe its clusters; ``say``: progress, K by K."""
    ks = k_range(k)
    n = len(X)
    check_request(ks, seeds, n)
    started = time.perf_counter()
    rng = np.random.default_rng(random_state)
    sample = np.sort(rng.permutation(n)[:MAX_ROWS]) if n > MAX_ROWS else np.arange(n)
    Xs = _rows(X, sample)
    m = len(sample)
    subs = [np.sort(np.random.default_rng([random_state, s]).permutation(m)[:int(SUBSAMPLE * m)])
            for s in range(seeds)]
    sil_rows = np.sort(rng.permutation(m)[:SILHOUETTE_ROWS])
    ys = None if y is None else np.asarray(y)[sample]
    tasks = [(kk, s) for kk in ks for s in range(seeds)]
    results: dict[int, list[dict]] = {kk: [] for kk in ks}
    space = None
    table = []
    for (kk, _seed), res in zip(tasks, _run(tasks, make, Xs, subs, n_jobs), strict=False):
        if space is None:                     # one space for every K: the first fit's standardization
            space = res.pop("space")
        res.pop("space", None)
        results[kk].append(res)
        if len(results[kk]) == seeds:
            table.append(measure(kk, results[kk], space, sil_rows, ys))
            if say:
                r = table[-1]
                say(f"K={kk}: silhouette {r['silhouette']:.3f}, stability {r['stability']:.3f}, "
                    f"inertia {fmt(r['inertia'])} ({r['seconds']:.1f} s)")
    choice = decide(table, seeds, m, 0.0)
    extra, full = {}, None
    if terms:            # its first model is the proposed K on every sampled row, seed 0: the one describe needs
        extra["terms"], extra["smallest"], full = _sparser(make, choice.k, Xs, space, say=say)
    if describe:
        if full is None:
            full = make(choice.k, 0).fit(Xs)
        extra["clusters"] = describe_clusters(full, Xs)
    return dataclasses.replace(choice, seconds=time.perf_counter() - started, **extra)


def decide(table: list[dict], seeds: int, rows: int, seconds: float, how: str = ON_SUBSAMPLES, **extra) -> KChoice:
    """The ``KChoice`` of a measured table (``measure``'s rows, one per K): the rule's proposal,
    runner-up and sureness; ``how``: how the seeds saw the rows, for the rule's wording."""
    chosen, runner_up, sure = propose(table, seeds)
    rule = RULE.format(seeds=seeds, how=how)
    if all(r["k"] != chosen for r in table):
        rule = (f"no K tried used all its clusters: at every K the fits left some empty and used at most {chosen} "
                f"(the data holds no more groups), so the proposal is the {chosen} clusters they used; include "
                f"K = {chosen} in the range to measure it")
    return KChoice(k=chosen, rule=rule, runner_up=runner_up, sure=sure, table=table,
                   rows=rows, seeds=seeds, seconds=seconds, **extra)


def _rows(X, idx):
    return X.iloc[idx] if hasattr(X, "iloc") else np.asarray(X)[idx]


def _run(tasks, make, Xs, subs, n_jobs):
    """The fits, in task order (K by K), concurrently where there are cores for it."""
    import os
    cores = os.cpu_count() or 1
    jobs = n_jobs if n_jobs is not None else min(cores, 8)
    if jobs <= 1:
        for kk, s in tasks:
            yield _fit_one(make, kk, s, Xs, subs[s], first=(kk, s) == tasks[0], threads=None)
        return
    import warnings

    from joblib import Parallel, delayed
    threads = max(1, cores // jobs)
    with warnings.catch_warnings():   # loky's note that it replaced a worker it had let go when idle
        warnings.filterwarnings("ignore", message="A worker stopped while some jobs were given")
        yield from Parallel(n_jobs=jobs, return_as="generator")(
            delayed(_fit_one)(make, kk, s, Xs, subs[s], first=(kk, s) == tasks[0], threads=threads)
            for kk, s in tasks)


def _fit_one(make, k: int, seed: int, Xs, sub, first: bool, threads: int | None) -> dict:
    """One fit on the seed's subsample: its labels of every sampled row, its top terms, the
    terms it uses, its seconds (and, for the first fit, the clustering space of the rows)."""
    import warnings
    if threads:
        import torch
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    est = make(k, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)     # empty clusters show in the table as inertia
        est.fit(_rows(Xs, sub))
    return {**fit_record(est, Xs, time.perf_counter() - t0), "space": est.clustering_space(Xs) if first else None}


def fit_record(est, X, seconds: float) -> dict:
    """What ``measure`` needs of one fitted seed: its ``labels`` of the rows ``X``, its ``top``
    terms, the ``terms_used`` (non-zero importance) and its ``seconds``."""
    imp = est.importance_
    return {"labels": np.asarray(est.predict(X)), "top": list(imp["term"].iloc[:AGREEMENT_TERMS]),
            "terms_used": int((imp["importance"] > 0).sum()), "seconds": float(seconds)}


def measure(k: int, fits: list[dict], space: np.ndarray, sil_rows: np.ndarray, y=None) -> dict:
    """One K's row of the table from its seeds' ``fits`` (each: ``labels`` of the same rows,
    ``top`` terms, ``terms_used``, ``seconds``), in the clustering ``space`` of those rows;
    silhouette on ``sil_rows``; with a label ``y``, each seed's ARI with it (mean)."""
    from sklearn.metrics import adjusted_rand_score, silhouette_score

    from .metrics import inertia
    aris = [adjusted_rand_score(a["labels"], b["labels"]) for a, b in itertools.combinations(fits, 2)]
    sils = []
    for f in fits:
        lab = f["labels"][sil_rows]
        sils.append(silhouette_score(space[sil_rows], lab) if len(np.unique(lab)) > 1 else -1.0)
    shared = [len(set(a["top"]) & set(b["top"])) / max(1, min(len(a["top"]), len(b["top"])))
              for a, b in itertools.combinations(fits, 2)]
    row = {"k": k, "inertia": float(np.mean([inertia(space, f["labels"]) for f in fits])),
           "silhouette": float(np.mean(sils)), "stability": float(np.mean(aris)), "stability_sd": float(np.std(aris)),
           "term_agreement": float(np.mean(shared)), "terms_used": int(round(np.mean([f["terms_used"] for f in fits]))),
           "clusters_used": int(min(len(np.unique(f["labels"])) for f in fits)),
           "seconds": float(sum(f["seconds"] for f in fits))}
    if y is not None:
        row["ari"] = float(np.mean([adjusted_rand_score(y, f["labels"]) for f in fits]))
    return row


def _sparser(make, k: int, Xs, space, say) -> tuple[list[dict], dict, object]:
    """The proposed K with fewer terms (the paper's sparsity figure): the full model (a single
    term per feature), then 1, 2, 4, ... single terms, and pair terms only (2, 4); each on every
    sampled row with seed 0. Returns the rows, the smallest within ``TERMS_WITHIN`` of the full
    model's inertia, and the full model when it is ``make(k, 0)`` itself (its terms not set
    otherwise), else None."""
    import warnings

    from .metrics import inertia
    d = Xs.shape[1]
    grid = [(None, 0)] + [(c, 0) for c in _powers(d)] + [(0, p) for p in (2, 4) if d >= 2]
    rows, full = [], None
    own = make(k, 0).get_params()
    for n_single, n_pairs in grid:
        t0 = time.perf_counter()
        est = make(k, 0)
        est.set_params(n_single=n_single, n_pairs=n_pairs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            est.fit(Xs)
        if full is None and (n_single, n_pairs) == (own["n_single"], own["n_pairs"]) == (None, 0):
            full = est
        rows.append({"n_single": d if n_single is None else n_single, "n_pairs": n_pairs,
                     "terms": (d if n_single is None else n_single) + n_pairs,
                     "inertia": float(inertia(space, np.asarray(est.predict(Xs)))),
                     "seconds": round(time.perf_counter() - t0, 2)})
        if say:
            r = rows[-1]
            say(f"K={k}, {r['n_single']} single + {r['n_pairs']} pair terms: inertia {fmt(r['inertia'])}")
    full = rows[0]["inertia"]
    for r in rows:
        r["ratio"] = r["inertia"] / full if full > 0 else 1.0
    within = [r for r in rows if r["ratio"] <= TERMS_WITHIN]
    return rows, min(within, key=lambda r: (r["terms"], r["ratio"])), full


def _powers(d: int) -> list[int]:
    out, c = [], 1
    while c < d:
        out.append(c)
        c *= 2
    return out


def describe_clusters(est, X) -> list[dict]:
    """The proposed K's clusters as the report opens them: id, rows, share, the sentence on what
    its rows look like and the terms that push rows in (from ``est.explain(X)``)."""
    from .explain.explanation import cluster_summary
    expl = est.explain(X)
    total = sum(int(p.get("size") or 0) for p in expl.profiles) or 1
    return [{"cluster": int(p["cluster"]), "rows": int(p.get("size") or 0), "share": int(p.get("size") or 0) / total,
             "summary": cluster_summary(p), "into": [q["term"] for q in p.get("into", [])[:3]]}
            for p in expl.profiles]


def _curves(choice: KChoice) -> str:
    """Inertia, silhouette and stability against K, the proposed K (and the runner-up) marked: a
    PNG in base64."""
    import base64
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ks = [r["k"] for r in choice.table]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, name in zip(axes, ("inertia", "silhouette", "stability"),
                             ("inertia (lower: tighter)", "silhouette (higher: better separated)",
                              "stability (ARI between seeds)"), strict=False):
        ax.plot(ks, [r[key] for r in choice.table], marker="o", color="#4c72b0")
        if key == "stability":
            ax.fill_between(ks, [r[key] - r["stability_sd"] for r in choice.table],
                            [r[key] + r["stability_sd"] for r in choice.table], color="#4c72b0", alpha=0.15)
            ax.axhline(STABLE, color="#999999", lw=0.8, ls="--")
        ax.axvline(choice.k, color="#c44e52", lw=1.5, label=f"proposed K = {choice.k}")
        if choice.runner_up:
            ax.axvline(choice.runner_up["k"], color="#c44e52", lw=1, ls=":", label=f"runner-up {choice.runner_up['k']}")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("K")
        ax.set_xticks(ks)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def choice_html(choice: KChoice, title: str = "Choosing K") -> str:
    """One offline page: inertia, silhouette and stability against K with the proposed K marked,
    the table, the runner-up, the sparser models (with ``terms``) and the proposed K's clusters."""
    import html
    e = html.escape
    cols = ["k", "inertia", "silhouette", "stability", "stability_sd", "term_agreement", "terms_used", "clusters_used",
            "stable", "separated", "seconds"] + (["ari"] if choice.table and "ari" in choice.table[0] else [])
    names = {"k": "K", "stability_sd": "stability sd", "term_agreement": f"top-{AGREEMENT_TERMS} terms shared",
             "terms_used": "terms used", "clusters_used": "clusters used", "ari": "ARI with the label"}

    def cell(v):   # 3 significant digits, never scientific notation (the report's ``fmt``)
        return fmt(v) if isinstance(v, float) else e(str(v))
    rows = "".join("<tr" + (" class='chosen'" if r["k"] == choice.k else "") + ">" +
                   "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in choice.table)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>"
             "body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px}table{border-collapse:collapse}"
             "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
             "tr.chosen td{background:#fdecea;font-weight:600}td.text,th.text{text-align:left}</style></head><body>",
             f"<h1>{e(title)}</h1>",
             f"<p id='proposal'><b>Proposed K = {choice.k}</b>{'' if choice.sure else ' (unsure)'}: {e(choice.rule)}.</p>"]
    if choice.runner_up:
        parts.append(f"<p id='runner-up'>Runner-up K = {choice.runner_up['k']}: {e(choice.runner_up['why'])}.</p>")
    if choice.edge:
        parts.append(f"<p id='edge'>{e(choice.edge)}.</p>")
    parts.append(f"<p>{choice.rows:,} rows, {choice.seeds} seeds per K, {choice.seconds:.0f} s.</p>")
    parts.append(f"<img alt='inertia, silhouette and stability against K' src='data:image/png;base64,{_curves(choice)}'>")
    parts.append("<h2>Every K</h2><table><tr>" + "".join(f"<th>{e(names.get(c, c))}</th>" for c in cols) +
                 f"</tr>{rows}</table>")
    if choice.terms:
        trs = "".join(f"<tr{' class=chosen' if r is choice.smallest or r == choice.smallest else ''}><td>{r['n_single']}"
                      f"</td><td>{r['n_pairs']}</td><td>{r['terms']}</td><td>{fmt(r['inertia'])}</td>"
                      f"<td>{r['ratio']:.3f}</td><td>{r['seconds']:.1f}</td></tr>" for r in choice.terms)
        parts.append(f"<h2>How few terms suffice (K = {choice.k})</h2><p>The smallest model within {TERMS_WITHIN}x "
                     f"of the full model's inertia is marked.</p><table><tr><th>single terms</th><th>pair terms</th>"
                     f"<th>terms</th><th>inertia</th><th>x full</th><th>seconds</th></tr>{trs}</table>")
    if choice.clusters:
        trs = "".join(f"<tr><td>{c['cluster']}</td><td>{c['rows']:,}</td><td>{c['share']:.0%}</td>"
                      f"<td class='text'>{e(c['summary'])}</td><td class='text'>{e(', '.join(c['into']))}</td></tr>"
                      for c in choice.clusters)
        parts.append(f"<h2>The {choice.k} clusters (seed 0, every sampled row)</h2><table><tr><th>cluster</th>"
                     f"<th>rows</th><th>share</th><th class='text'>what its rows look like</th><th class='text'>pushed in by</th>"
                     f"</tr>{trs}"
                     f"</table>")
    parts.append("</body></html>")
    return "\n".join(parts)

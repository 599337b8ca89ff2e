"""Pictures and the HTML report, rendered only from an ``Explanation``'s numbers (headless)."""
from __future__ import annotations

import base64
import functools
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
import numpy as np

from ..storage import atomic_directory
from ..uris import Location, Where
from .evaluation import mix_text
from .examples import change_words, value_text
from .explanation import Explanation, Term, cluster_summary, fmt


SAFE_NAME = 40   # characters of a term's name kept in a plot's file name


def _safe(name: str) -> str:
    """A file-name form of a term's name: ASCII letters, digits and ``-_.`` kept, the rest ``_``;
    a name longer than ``SAFE_NAME`` or with non-ASCII letters is cut and ends in a hash of the
    whole name, so no name makes a file name too long and two names never share a file (the
    page still shows the name itself)."""
    import hashlib
    safe = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_." else "_" for ch in name)
    if len(safe) > SAFE_NAME or not name.isascii():
        safe = f"{safe[:SAFE_NAME]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"
    return safe


def _png(fig, dpi: int = 90) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def level_labels(term: Term) -> tuple[list[str], list[int], list[int]]:
    """A categorical main term's bars: the level names with their row counts ("monthly (276)"),
    the positions of the levels drawn (those with rows; ``missing`` last) and their counts."""
    names = term.level_names(0)
    hist = term.histogram or {}
    counts = list(hist.get("counts") or [0] * (len(names) - 1)) + [int(hist.get("missing", 0))]
    drawn = [i for i, n in enumerate(counts) if n > 0] or list(range(len(names) - 1))
    return [f"{names[i]} ({counts[i]:,})" for i in drawn], drawn, [counts[i] for i in drawn]


def level_values(term: Term) -> np.ndarray:
    """(levels + 1, K): a categorical main term's values per level, then its missing value."""
    missing = np.zeros(term.values.shape[1]) if term.missing is None else np.asarray(term.missing)
    return np.vstack([term.values, missing[None]])


def _missing_point(term: Term) -> tuple[float, np.ndarray] | None:
    """Where a numeric main term's missing value is drawn (just right of its grid) and the values,
    when the explained rows had missing cells."""
    if term.missing is None or not (term.histogram or {}).get("missing"):
        return None
    g = term.grids[0]
    span = float(g[-1] - g[0]) or 1.0
    return float(g[-1] + 0.08 * span), np.asarray(term.missing)


def shape_figure(term: Term, n_clusters: int, ids: list[int] | None = None) -> bytes:
    """One line per cluster over the feature's grid and the feature's histogram underneath; a
    categorical feature as bars, one group per level (its rows counted), ``missing`` its own bar;
    a numeric feature's missing value as a marked point right of its curve."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 4.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    colours = cluster_colours(n_clusters)
    if term.level_names(0) is not None:
        labels, drawn, counts = level_labels(term)
        values = level_values(term)[drawn]
        width = 0.8 / n_clusters
        x = np.arange(len(drawn))
        for k in range(n_clusters):
            top.bar(x - 0.4 + (k + 0.5) * width, values[:, k], width=width, color=colours[k],
                    label=f"cluster {ids[k] if ids else k}")
        bottom.bar(x, counts, color="0.7")
        bottom.set_xticks(x, labels, rotation=30, ha="right", fontsize=7)
    else:
        grid = term.grids[0]
        point = _missing_point(term)
        for k in range(n_clusters):
            top.plot(grid, term.values[:, k], drawstyle="steps-mid" if term.discrete[0] else "default",
                     color=colours[k], label=f"cluster {ids[k] if ids else k}", lw=1.4)
            if point is not None:
                top.plot([point[0]], [point[1][k]], "D", color=colours[k], ms=5)
        if point is not None:
            top.annotate(f"missing ({term.histogram['missing']:,} rows)", (point[0], float(point[1].max())),
                         fontsize=7, ha="center", va="bottom")
        if term.histogram:
            edges, counts = np.asarray(term.histogram["edges"]), np.asarray(term.histogram["counts"])
            bottom.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="0.7")
    top.axhline(0, color="0.6", lw=0.8)
    top.set_ylabel("logit contribution")
    top.set_title(f"{term.name}  (importance {fmt(float(term.importance.mean()))})")
    if n_clusters <= 12:
        top.legend(fontsize=7, ncol=2, frameon=False)
    bottom.set_xlabel(term.features[0])
    bottom.set_ylabel("rows")
    return _png(fig)


def _level_ticks(ax, term: Term) -> None:
    """A pair heat map's categorical axis labelled with its level names instead of its codes."""
    for axis, set_ticks in ((1, ax.set_xticks), (0, ax.set_yticks)):
        names = term.level_names(axis)
        if names is not None:
            set_ticks(term.grids[axis], names[:len(term.grids[axis])], fontsize=6)


def pair_figure(term: Term, n_clusters: int, ids: list[int] | None = None) -> bytes:
    """One heat map per cluster over the pair's grid (purified interaction only)."""
    cols = min(n_clusters, 5)
    rows = int(np.ceil(n_clusters / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.5 * rows), squeeze=False, constrained_layout=True)
    lim = float(np.abs(term.values).max()) or 1.0
    ga, gb = term.grids
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= n_clusters:
            ax.axis("off")
            continue
        im = ax.pcolormesh(gb, ga, term.values[:, :, k], cmap="RdBu_r", vmin=-lim, vmax=lim, shading="nearest")
        _level_ticks(ax, term)
        ax.set_title(f"cluster {ids[k] if ids else k}", fontsize=8)
        ax.tick_params(labelsize=6)
        if k % cols == 0:
            ax.set_ylabel(term.features[0], fontsize=7)
        if k // cols == rows - 1 or k + cols >= n_clusters:
            ax.set_xlabel(term.features[1], fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.8, label="logit contribution")
    fig.suptitle(term.name)
    return _png(fig)


GREYS = {"tab10": (7,), "tab20": (14, 15)}   # the palettes' greys: the report's grey means "the other clusters"


def cluster_colours(n_clusters: int) -> list:
    """One colour per cluster, never a grey (the thumbnails draw the other clusters in grey):
    tab10 without its grey up to 9 clusters, tab20 without its two greys up to 18; beyond that the
    colours repeat (the legend and titles still name each cluster)."""
    name = "tab10" if n_clusters <= 9 else "tab20"
    cmap = plt.get_cmap(name)
    base = [cmap(i) for i in range(cmap.N) if i not in GREYS[name]]
    return [base[k % len(base)] for k in range(n_clusters)]


def thumbnail_figure(term: Term, c: int, n_clusters: int, ids: list[int], band: dict | None = None) -> bytes:
    """A small shape graph with cluster ``c``'s curve drawn over the others' (grey), and the range
    where its middle 80% of rows lie (``band``: feature -> (q10, q90)) shaded; for a pair, cluster
    ``c``'s heat map on the scale shared by all clusters with that range outlined."""
    return _png(thumbnail(term, c, n_clusters, ids, band), dpi=96)


def thumbnail(term: Term, c: int, n_clusters: int, ids: list[int], band: dict | None = None):
    """``thumbnail_figure``'s matplotlib figure (axes labelled with their units)."""
    band = band or {}
    colour = cluster_colours(n_clusters)[c]
    fig, ax = plt.subplots(figsize=(2.7, 1.9))
    if term.kind == "main" and term.level_names(0) is not None:
        labels, drawn, _ = level_labels(term)
        values = level_values(term)[drawn]
        x = np.arange(len(drawn))
        others = [k for k in range(n_clusters) if k != c]
        if others:
            ax.scatter(np.repeat(x, len(others)), values[:, others].reshape(-1), color="0.7", s=8, zorder=1)
        ax.bar(x, values[:, c], color=colour, zorder=2)
        ax.axhline(0, color="0.6", lw=0.6)
        ax.set_xticks(x, [lab.split(" (")[0] for lab in labels], rotation=30, ha="right", fontsize=6)
        ax.set_xlabel(term.features[0], fontsize=7)
        ax.set_ylabel("logit contribution", fontsize=6)
    elif term.kind == "main":
        grid = term.grids[0]
        style = "steps-mid" if term.discrete[0] else "default"
        for k in range(n_clusters):
            if k != c:
                ax.plot(grid, term.values[:, k], drawstyle=style, color="0.78", lw=0.8)
        ax.plot(grid, term.values[:, c], drawstyle=style, color=colour, lw=2.2)
        point = _missing_point(term)
        if point is not None:
            ax.plot([point[0]], [point[1][c]], "D", color=colour, ms=4)
        ax.axhline(0, color="0.6", lw=0.6)
        if term.features[0] in band:
            ax.axvspan(*band[term.features[0]], color=colour, alpha=0.12, lw=0)
        ax.set_xlabel(term.features[0], fontsize=7)
        ax.set_ylabel("logit contribution", fontsize=6)
    else:
        lim = float(np.abs(term.values).max()) or 1.0
        ga, gb = term.grids
        ax.pcolormesh(gb, ga, term.values[:, :, c], cmap="RdBu_r", vmin=-lim, vmax=lim, shading="nearest")
        _level_ticks(ax, term)
        a, b = term.features
        if a in band and b in band:
            (a0, a1), (b0, b1) = band[a], band[b]
            ax.add_patch(Rectangle((b0, a0), b1 - b0, a1 - a0, fill=False, ec=colour, lw=1.5))
        ax.set_xlabel(b, fontsize=7)
        ax.set_ylabel(a, fontsize=7)
    ax.set_title(f"{term.name}: cluster {ids[c]}" + ("" if term.kind == "main" else " (colour: logit contribution)"),
                 fontsize=8)
    ax.tick_params(labelsize=6)
    return fig


def importance_figure(expl: Explanation, top: int = 25) -> bytes:
    """The global importance bar chart (top ``top`` terms) as PNG bytes."""
    hidden = {expl.terms[i].name for i in left_out_terms(expl)}
    ranking = [r for r in expl.importance if r["term"] not in hidden][:top][::-1] or expl.importance[:1]
    fig, ax = plt.subplots(figsize=(6.5, 0.28 * len(ranking) + 1.2))
    ax.barh([r["term"] for r in ranking], [r["importance"] for r in ranking],
            color=["tab:orange" if r["kind"] == "pair" else "tab:blue" for r in ranking])
    ax.set_xlabel("mean |contribution| (averaged over clusters)")
    ax.set_title("Term importance")
    return _png(fig)


FLAT = 1e-6        # a term whose values span less than this fraction of the widest term's span is flat
NEGLIGIBLE = 1e-3  # a term whose importance is below this fraction of the largest is not drawn


def figure_name(index: int, term: Term) -> str:
    """Unique per term: the index keeps ``a b`` and ``a_b`` (one safe name) apart."""
    return f"{index:03d}_{'shape' if term.kind == 'main' else 'pair'}_{_safe(term.name)}.png"


def left_out_terms(expl: Explanation) -> dict[int, str]:
    """Term index -> why it is not drawn: a flat term (a constant feature, or no effect) would be an
    empty picture, and a term below ``NEGLIGIBLE`` of the largest importance changes no cluster."""
    spans = [float(np.ptp(t.values)) if t.values.size else 0.0 for t in expl.terms]
    widest = max(spans, default=0.0)
    top = max((float(t.importance.mean()) for t in expl.terms), default=0.0)
    out = {}
    for i, (t, span) in enumerate(zip(expl.terms, spans, strict=False)):
        constant = [f for f, g in zip(t.features, t.grids, strict=False) if len(g) < 2 or float(np.ptp(g)) == 0.0]
        if constant:
            out[i] = f"{', '.join(constant)} {'is' if len(constant) == 1 else 'are'} constant in the data"
        elif span <= FLAT * widest or span == 0.0:
            out[i] = "no effect on any cluster"
        elif float(t.importance.mean()) < NEGLIGIBLE * top:
            out[i] = f"importance {fmt(float(t.importance.mean()), top)}, under {NEGLIGIBLE:.1%} of the largest, {fmt(top)}"
    return out


def by_importance(expl: Explanation) -> list[int]:
    """Term indices, most important first."""
    return sorted(range(len(expl.terms)), key=lambda i: -float(expl.terms[i].importance.mean()))


THUMBS = 2  # terms pushing rows in, and out, drawn as thumbnails in each cluster's section


MINOR_PUSH = 0.05  # a push under this fraction of the cluster's largest is listed, not drawn


def cluster_terms(expl: Explanation, profile: dict, left_out: dict[int, str] | None = None) -> list[int]:
    """Indices of the terms drawn in a cluster's section: the ``2 * THUMBS`` that move its rows most
    in either direction (pushing in or out, strongest first), leaving out minor pushes and terms
    not drawn at all."""
    left_out = left_out_terms(expl) if left_out is None else left_out
    index = {t.name: i for i, t in enumerate(expl.terms)}
    entries = sorted(profile.get("into", []) + profile.get("out_of", []),
                     key=lambda q: -abs(q["mean_relative_contribution"]))[:2 * THUMBS]
    largest = max((abs(q["mean_relative_contribution"]) for q in entries), default=0.0)
    names = [q["term"] for q in entries if abs(q["mean_relative_contribution"]) >= MINOR_PUSH * largest]
    return [index[n] for n in dict.fromkeys(names) if n in index and index[n] not in left_out]


def thumbnail_name(cluster_id: int, index: int, term: Term) -> str:
    """The file name of a cluster's term thumbnail (safe characters only)."""
    return f"cluster{cluster_id}_{index:03d}_{_safe(term.name)}.png"


def render_figures(expl: Explanation) -> dict[str, bytes]:
    """File name -> PNG bytes for the importance chart, every drawn term (most important first) and
    the thumbnails of each cluster's section."""
    with plt.rc_context({"text.parse_math": False}):   # names are text: "cost_$_per_unit_$" is no formula
        return _render_figures(expl)


def _render_figures(expl: Explanation) -> dict[str, bytes]:
    figs = {"importance.png": importance_figure(expl)}
    left_out = left_out_terms(expl)
    for i in by_importance(expl):
        if i not in left_out:
            t = expl.terms[i]
            figs[figure_name(i, t)] = (shape_figure if t.kind == "main" else pair_figure)(t, expl.n_clusters, expl.cluster_ids)
    for c, profile in enumerate(expl.profiles):
        band = {f["feature"]: (f["q10"], f["q90"]) for f in profile.get("features", []) if "q10" in f}
        for i in cluster_terms(expl, profile, left_out):
            t = expl.terms[i]
            figs[thumbnail_name(expl.cluster_ids[c], i, t)] = thumbnail_figure(t, c, expl.n_clusters, expl.cluster_ids, band)
    return figs


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


# The report's look, which the monitor's page shares.
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 1em 1em}"
         "table{border-collapse:collapse;margin-bottom:.8em}td,th{border:1px solid #ccc;padding:2px 6px;"
         "font-size:13px;text-align:left}img{max-width:100%}nav ul{columns:3}"
         "details{font-size:13px}.thumbs{display:flex;flex-wrap:wrap;gap:6px}.thumbs img{width:260px}"
         ".note{font-size:12px;color:#555}.summary{font-size:16px;font-weight:600}.push{font-size:14px}"
         ".bar{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:.4em 0;z-index:10}"
         "h2,h3,section,.row-view{scroll-margin-top:3.2em}.warning{background:#fff4d6;border-left:4px solid "
         "#e0a800;padding:.5em}td.same{font-weight:700}")
SECTIONS = (("clusters", "Clusters"), ("rows", "What would change a row's cluster"), ("importance", "Importance"),
            ("shapes", "Shape graphs"), ("pairs", "Pairwise interactions"), ("card", "Model card"))
TOP_TABLE = 20  # rows of the importance table (every term is in tables/terms.parquet)


def _rows(pairs) -> str:
    e = html.escape
    return "".join(f"<tr><th>{e(str(k))}</th><td>{v}</td></tr>" for k, v in pairs)


def _value(v) -> str:
    """A model card's value as the page shows it: every number at most 3 significant digits,
    lists and mappings (``{'lloyd': 7.18, ...}``) read as text, escaped."""
    return html.escape(_plain(v))


def _plain(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (float, np.floating)):
        return fmt(float(v))
    if isinstance(v, (list, tuple)):
        return ", ".join(_plain(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_plain(x)}" for k, x in v.items())
    return str(v)


def unused_features(card: dict, features: list[str]) -> list[str]:
    """The feature columns no term reads (not selected alone nor in a pair, and not constant)."""
    read = (set(card.get("selected_features", [])) | {f for p in card.get("selected_pairs", []) for f in p}
            | set(card.get("constant_features_left_out", [])))
    return [f for f in features if f not in read]


def _columns_table(columns: dict) -> list[str]:
    """The model card's categorical features (levels) and shares of missing training cells."""
    e = html.escape
    cat = columns.get("categorical") or {}
    miss = columns.get("missing_share") or {}
    if not cat and not miss:
        return []
    rows = "".join(f"<tr><td>{e(str(n))}</td><td>{e(', '.join(cat[n])) if n in cat else 'numeric'}</td>"
                   f"<td>{miss.get(n, 0.0):.1%}</td></tr>" for n in dict.fromkeys([*cat, *miss]))
    return ["<h3>Categorical features and missing cells</h3><table><tr><th>feature</th><th>levels</th>"
            "<th>missing (training rows)</th></tr>" + rows + "</table>" + f"<p>{e(columns.get('rule', ''))}</p>"]


def _model_card(card: dict, features: list[str] | None = None) -> list[str]:
    """The model card as tables a person reads (the JSON is in explanation.json); ``features``:
    the model's feature columns, to list those no term reads."""
    e = html.escape
    parts = ["<h3>Hyperparameters</h3><table>" + _rows((k, _value(v)) for k, v in card.get("hyperparameters", {}).items())
             + "</table>"]
    data = card.get("data", {})
    cols = data.get("columns", [])
    parts.append("<h3>Data</h3><table>" + _rows([("rows", data.get("n_rows", "?")), ("columns", len(cols)),
                                                  ("sha256", e(str(data.get("sha256", ""))))]) + "</table>"
                 + f"<details><summary>the {len(cols)} columns</summary><p>{e(', '.join(map(str, cols)))}</p></details>")
    clusters = card.get("clusters", {})
    selected = list(dict.fromkeys(card.get("selected_features", [])))
    pairs = list(dict.fromkeys(" & ".join(p) for p in card.get("selected_pairs", [])))
    constant = list(card.get("constant_features_left_out", []))
    unused = unused_features(card, features or [])
    parts.append("<h3>Selection</h3><table>" + _rows([
        ("selected features", e(", ".join(selected))),
        ("selected pairs", e(", ".join(pairs))),
        ("features no term reads", e(", ".join(unused)) or "none"),
        ("constant features left out", e(", ".join(constant)) or "none"),
        ("clusters (used)", f"{clusters.get('n_clusters', '?')} ({clusters.get('n_clusters_used', '?')})"),
        ("cluster ids", _value(clusters.get("cluster_ids", []))),
        ("empty clusters", _value(clusters.get("empty")) if clusters.get("empty") else "none")]) + "</table>")
    parts += _columns_table(card.get("columns") or {})
    text = card.get("text")
    if text:
        parts.append("<h3>Text features</h3><table>" + _rows((k, _value(v)) for k, v in text.items()) + "</table>")
    fit = card.get("fit", {})
    parts.append("<h3>Fit</h3><table>" + _rows((k, _value(v)) for k, v in fit.items() if k != "events") + "</table>")
    init = card.get("kmeans_init") or {}
    if init:
        parts.append("<h3>k-means initialisation</h3><table>" + _rows((k, _value(v)) for k, v in init.items())
                     + "</table>")
    events = fit.get("events") or []
    if events:
        keys = list(dict.fromkeys(k for ev in events for k in ev))
        parts.append("<h3>Fit events</h3><table><tr>" + "".join(f"<th>{e(k)}</th>" for k in keys) + "</tr>"
                     + "".join("<tr>" + "".join(f"<td>{_value(ev.get(k))}</td>" for k in keys) + "</tr>"
                               for ev in events) + "</table>")
    return parts


def _pushes(entries: list[dict], sign: str) -> str:
    return ", ".join(f"{html.escape(q['term'])} ({sign}{fmt(abs(q['mean_relative_contribution']))})"
                     for q in entries) or "none"


def _against_labels(truth: dict | None) -> list[str]:
    """The label-by-cluster table with ARI and NMI, when the explanation was given labels."""
    if not truth:
        return []
    e = html.escape
    clusters = list(next(iter(truth["table"].values()), {}).keys())
    rows = "".join(f"<tr><th>{e(lab)}</th>" + "".join(f"<td>{row.get(c, 0):,}</td>" for c in clusters) + "</tr>"
                   for lab, row in truth["table"].items())
    missing = f" ({truth['n_missing']:,} rows without a label left out)" if truth.get("n_missing") else ""
    return [f"<h3 id='labels'>Clusters against {e(truth['name'])}</h3><p>Adjusted Rand index "
            f"{fmt(truth['ari'])}, normalized mutual information {fmt(truth['nmi'])} over {truth['n_rows']:,} rows"
            f"{missing} (the label was not used to cluster).</p><table><tr><th>{e(truth['name'])} \\ cluster</th>"
            + "".join(f"<th>{e(c)}</th>" for c in clusters) + "</tr>" + rows + "</table>"]


def _clusters(expl: Explanation, figures: dict[str, bytes]) -> list[str]:
    """The overview table, then a section per cluster: size and share, a sentence on its rows, the
    terms that push rows in and out, and thumbnails with its curve over the others'."""
    e = html.escape
    total = sum(int(p["size"]) for p in expl.profiles) or 1
    parts = ["<h2 id='clusters'>Clusters</h2><p>Terms that push a cluster's members into it (or away from "
             "it): the term's contribution to the cluster minus its mean over all clusters, averaged over "
             "the cluster's rows.</p><table><tr><th>cluster</th><th>rows</th><th>share</th>"
             "<th>pushed in by</th><th>pushed out by</th></tr>"]
    for p in expl.profiles:
        parts.append(f"<tr><td><a href='#cluster-{p['cluster']}'>{p['cluster']}</a></td><td>{p['size']:,}</td>"
                     f"<td>{fmt(100 * p['size'] / total)}%</td><td>{_pushes(p['into'], '+')}</td>"
                     f"<td>{_pushes(p['out_of'], '-')}</td></tr>")
    parts.append("</table>")
    parts += _against_labels(expl.model_card.get("labels"))
    left_out = left_out_terms(expl)
    for index, p in enumerate(expl.profiles):
        cid = p["cluster"]
        parts.append(f"<section class='cluster' id='cluster-{cid}' data-index='{index}'><h3>Cluster {cid}: {p['size']:,} rows "
                     f"({fmt(100 * p['size'] / total)}%)</h3>"
                     f"<p class='summary'>{e(cluster_summary(p, digits=fmt))}</p>"
                     f"<p class='push'>Pushed in by: {_pushes(p['into'], '+')}. Pushed out by: {_pushes(p['out_of'], '-')}.</p>")
        truth = expl.model_card.get("labels")
        if truth and truth.get("mix", {}).get(str(cid)):
            parts.append(f"<p class='push'>Its rows' {e(truth['name'])}: {e(mix_text(truth['mix'][str(cid)]))}.</p>")
        if p.get("top_terms"):
            parts.append(f"<p class='push'>Top terms (most above their frequency over all documents): "
                         f"{e(', '.join(p['top_terms']))}.</p>")
        thumbs = [(i, thumbnail_name(cid, i, expl.terms[i])) for i in cluster_terms(expl, p, left_out)]
        if thumbs:
            parts.append("<div class='thumbs'>" + "".join(
                _img(figures[name], f"{expl.terms[i].name}, cluster {cid} highlighted") for i, name in thumbs)
                + "</div><p class='note'>Coloured: this cluster's curve; grey: the other clusters'; shaded: "
                  "where the middle 80% of its rows lie.</p>")
        parts += _examples(expl, cid)
        parts.append("</section>")
    return parts


SPARSE_ROWS = 5          # a grid point whose histogram bin and its two neighbours hold fewer rows than
SPARSE_SHARE = 0.005     # this (or than this share of the rows) is drawn dotted: the curve rests on few rows
DEFAULT_ALL = 5          # below this many clusters the page starts on every cluster, else on the first
VIEW_TERMS = 100         # terms the page carries for its graphs (most important first; every one is in plots/)


def _rounded(a, digits: int = 4) -> list:
    """``a`` as lists with ``digits`` significant digits of its largest value (a smaller page)."""
    a = np.asarray(a, dtype=np.float64)
    top = float(np.abs(a).max()) if a.size else 0.0
    decimals = max(0, digits - int(np.floor(np.log10(top))) - 1) if top > 0 else 0
    return np.round(a, decimals).tolist()


def sparse_points(term: Term, n_rows: int) -> list[bool]:
    """For each grid point of a main term, whether its histogram bin and the two beside it hold
    few rows (fewer than ``SPARSE_ROWS`` or ``SPARSE_SHARE`` of them): the curve there is dotted."""
    grid = term.grids[0]
    if not term.histogram or term.histogram.get("edges") is None:
        return [False] * len(grid)
    edges, counts = np.asarray(term.histogram["edges"]), np.asarray(term.histogram["counts"])
    b = np.clip(np.searchsorted(edges, grid, side="right") - 1, 0, len(counts) - 1)
    near = np.convolve(counts, np.ones(3), mode="same")
    return (near[b] < max(SPARSE_ROWS, SPARSE_SHARE * n_rows)).tolist()


def page_data(expl: Explanation, drawn: list[int]) -> dict:
    """The numbers the report's script draws: cluster ids and colours, the drawn terms (grids,
    values, density, sparse points, the range over compared runs) and the chosen rows."""
    from matplotlib.colors import to_hex
    n_rows = int(expl.model_card.get("data", {}).get("n_rows") or sum(expl.cluster_sizes) or 1)
    bands = (expl.stability or {}).get("bands", {})
    terms = []
    for i in drawn:
        t = expl.terms[i]
        if t.kind == "main" and t.level_names(0) is not None:
            labels, drawn_levels, counts = level_labels(t)
            terms.append({"name": t.name, "kind": "levels", "feature": t.features[0], "levels": labels,
                          "values": _rounded(level_values(t)[drawn_levels]), "counts": counts})
        elif t.kind == "main":
            edges = np.asarray((t.histogram or {}).get("edges") or [0.0, 1.0], dtype=np.float64)
            band = bands.get(t.name)
            point = _missing_point(t)
            terms.append({"name": t.name, "kind": "main", "feature": t.features[0], "discrete": bool(t.discrete[0]),
                          "grid": _rounded(t.grids[0], 7), "values": _rounded(t.values),
                          "sparse": sparse_points(t, n_rows),
                          "hist": {"centres": _rounded((edges[:-1] + edges[1:]) / 2, 7), "widths": _rounded(np.diff(edges), 7),
                                   "counts": list((t.histogram or {}).get("counts", [0]))},
                          "band": {"low": _rounded(band["low"]), "high": _rounded(band["high"])} if band else None,
                          "missing": None if point is None else {"x": point[0], "values": _rounded(point[1]),
                                                                 "rows": int(t.histogram["missing"])}})
        else:
            terms.append({"name": t.name, "kind": "pair", "features": list(t.features),
                          "grids": [_rounded(g, 7) for g in t.grids], "values": _rounded(t.values),
                          "ticks": [None if t.level_names(a) is None else t.level_names(a)[:len(t.grids[a])]
                                    for a in range(2)],
                          "lim": float(np.abs(t.values).max()) or 1.0})
    return {"ids": expl.cluster_ids, "colours": [to_hex(c) for c in cluster_colours(expl.n_clusters)],
            "initial": -1 if expl.n_clusters < DEFAULT_ALL else 0, "terms": terms,
            "runs": (expl.stability or {}).get("n_models", 1),
            "rows": (expl.examples or {}).get("rows", [])}


def _json_script(data: dict) -> str:
    import json
    # no "<" in the element at all: "</script>", "<!--" and "<script" in a feature's name would
    # otherwise end the element or put the HTML parser in a state that swallows the page's scripts
    text = (json.dumps(data, separators=(",", ":"), allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return f"<script type='application/json' id='neurcam-data'>{text}</script>"


def _term_view(anchor: str, heading: str, expl: Explanation, drawn: list[int], kind: str) -> list[str]:
    """A section with a term selector and one interactive graph (the script draws it)."""
    e = html.escape
    mine = [(n, i) for n, i in enumerate(drawn[:VIEW_TERMS]) if expl.terms[i].kind == kind]
    parts = [f"<h2 id='{anchor}'>{heading}</h2>"]
    if len(mine) < sum(expl.terms[i].kind == kind for i in drawn):
        parts.append(f"<p class='note'>The {len(mine)} most important of {sum(expl.terms[i].kind == kind for i in drawn)} "
                     f"(every one is a PNG in plots/ and its numbers are in tables/).</p>")
    if not mine:
        return parts + ["<p>none drawn (see the list above)</p>" if any(t.kind == kind for t in expl.terms)
                        else "<p>none in this model</p>"]
    flagged = set((expl.stability or {}).get("flagged", []))
    options = "".join(f"<option value='{n}'>{e(expl.terms[i].name)} (importance {fmt(float(expl.terms[i].importance.mean()))}"
                      f"{'; does not recur in the other runs' if expl.terms[i].name in flagged else ''})</option>"
                      for n, i in mine)
    what = ("Each cluster's curve: what the feature adds to that cluster's logit at each value; the bars "
            "underneath count the rows. Dotted: few rows there (the curve rests on little data)."
            + (" Shaded: the range of the chosen cluster's curve over the compared runs." if (expl.stability or {}).get("bands")
               else "") if kind == "main" else
            "The chosen cluster's purified interaction: what the pair adds beyond the two features' own curves.")
    return parts + [f"<div class='term-view'><label>term ({len(mine)}, most important first): <select>{options}"
                    f"</select></label><p class='note'>{what}</p><div class='plot'></div></div>",
                    "<noscript><p>The interactive graphs need JavaScript: every graph is also a PNG in the "
                    "plots/ folder beside this file.</p></noscript>"]


def _examples(expl: Explanation, cid: int) -> list[str]:
    """A cluster's typical rows (a table of their values) and its borderline row's smallest move."""
    ex = expl.examples or {}
    e = html.escape
    typical = ex.get("typical", {}).get(str(cid)) or []
    parts = []
    if typical:
        features = list(dict.fromkeys(f for r in typical for q in r["terms"][:3] for f in q["term"].split(" & ")
                                      if f in r["values"]))[:6]
        parts.append(f"<p class='push'>Typical rows ({e(ex.get('basis') or '')}):</p><table class='rows'><tr><th>row</th>"
                     "<th>probability</th>" + "".join(f"<th>{e(f)}</th>" for f in features)
                     + "<th>pushed in most by</th></tr>"
                     + "".join(f"<tr><td>{e(str(r['row']))}</td><td>{r['probability']:.2f}</td>"
                               + "".join(f"<td>{html.escape(value_text(r['values'][f]))}</td>" for f in features)
                               + f"<td>{_row_pushes(r)}</td></tr>" for r in typical) + "</table>")
    border = ex.get("borderline", {}).get(str(cid))
    if border:
        parts.append(f"<p class='push'>Closest to another cluster: {_change_text(border)}</p>")
    return parts


def _row_pushes(r: dict, n: int = 3) -> str:
    return html.escape(", ".join(f"{q['term']} ({'+' if q['push'] > 0 else '-'}{fmt(abs(q['push']))})"
                                 for q in r["terms"][:n]))


def _change_text(r: dict) -> str:
    """What would move row ``r`` (a record of ``examples.row_records``), in words."""
    e = html.escape
    head = f"row {e(str(r['row']))} (cluster {r['cluster']}, probability {r['probability']:.2f})"
    if not r.get("change"):
        return f"{head}: {e(change_words(None))}."
    return f"{head} {e(change_words(r['change']))}, every other value as it is."


def _rows_section(expl: Explanation) -> list[str]:
    """What would change a row's cluster: each cluster's borderline row, and every chosen row
    (``neurcam explain --show``) with its terms as bars and its values."""
    ex = expl.examples or {}
    e = html.escape
    parts = ["<h2 id='rows'>What would change a row's cluster</h2><p>The logits are additive, so the "
             "smallest change of one feature (or of a pair term's two features) that moves a row to another "
             "cluster is computed from the model itself (in standard deviations; applying it moves the row). "
             "Each cluster's row closest to another cluster:</p><ul>"]
    parts += [f"<li>{_change_text(r)}</li>" for r in ex.get("borderline", {}).values()]
    parts.append("</ul>")
    for n, r in enumerate(ex.get("rows", [])):
        values = ", ".join(f"{e(f)} = {e(value_text(v))}" for f, v in r["values"].items())
        parts.append(f"<div class='row-view' id='row-{_safe(str(r['row']))}'><h3>Row {e(str(r['row']))}: cluster "
                     f"{r['cluster']} (probability {r['probability']:.2f})</h3><div class='row-bars' data-row='{n}'>"
                     f"</div><p class='note'>Bars: how much each term pushes this row toward its cluster (its "
                     f"contribution to the cluster minus its mean over all clusters; blue in, orange out). "
                     f"Values: {values}.</p><p class='push'>{_change_text(r)}</p></div>")
    return parts


def _stability_section(expl: Explanation) -> list[str]:
    st = expl.stability
    if not st:
        return []
    e = html.escape
    tops = ", ".join(f"top-{k[3:-13]}: {st[k]:.1f}" for k in st if k.startswith("top") and k.endswith("_intersection"))
    parts = [f"<h2 id='stability'>Stability over {st['n_models']} runs</h2><p>The search's {st['n_models']} best "
             f"runs explained on the same rows; terms shared by their top lists on average: {e(tops) or 'n/a'}.</p>"]
    if st.get("warning"):
        parts.append(f"<p class='warning'>Warning: {e(st['warning'])}.</p>")
    rec = st.get("recurrence", {})
    if rec:
        parts.append("<table><tr><th>term (this model's top)</th><th>in the other runs' top lists</th></tr>"
                     + "".join(f"<tr><td>{e(t)}{' <b>(does not recur)</b>' if t in st.get('flagged', []) else ''}</td>"
                               f"<td>{share:.0%}</td></tr>" for t, share in rec.items()) + "</table>")
    return parts


def _comparison_section(expl: Explanation) -> list[str]:
    cmp = expl.comparison
    if not cmp:
        return []
    e = html.escape
    old, new = cmp["names"]["old"], cmp["names"]["new"]
    olds = sorted(cmp["flow"], key=int)
    news = sorted({n for row in cmp["flow"].values() for n in row}, key=int)
    parts = [f"<h2 id='compare'>Compared with {e(old)}</h2><p>{cmp['n_rows']:,} rows: {cmp['same_id']:.1%} keep their "
             f"cluster id (agreement ARI {fmt(cmp['ari'])}). Rows of each cluster of {e(old)} (rows) by their cluster "
             f"in {e(new)} (columns):</p><table><tr><th>{e(old)} \\ {e(new)}</th>"
             + "".join(f"<th>{e(n)}</th>" for n in news) + "</tr>"
             + "".join(f"<tr><th>{e(o)}</th>" + "".join(
                 f"<td{' class=same' if o == n else ''}>{cmp['flow'][o].get(n, 0):,}</td>" for n in news) + "</tr>"
                 for o in olds) + "</table><table><tr><th>cluster</th><th>driven now by</th><th>before</th>"
             "<th>new drivers</th></tr>"]
    for d in cmp["drivers"]:
        before = "(new cluster)" if d["before"] is None else e(", ".join(d["before"]))
        parts.append(f"<tr><td>{d['cluster']}</td><td>{e(', '.join(d['now']))}</td><td>{before}</td>"
                     f"<td>{e(', '.join(d['new_terms'])) or 'none'}</td></tr>")
    parts.append("</table>")
    return parts


#: Plotly's cartesian partial bundle (scatter, bar, heatmap and the other 2-D traces; the page draws
#: scatter, bar and heatmap), as npm ships it; ``static/README.md`` says where it comes from.
PLOTLY_BUNDLE = Path(__file__).with_name("static") / "plotly-cartesian.min.js"


@functools.lru_cache(maxsize=1)
def _packed_plotly() -> str:
    """Plotly's cartesian bundle gzipped (level 9, no timestamp: the same bytes every time) and in
    base64: 0.66 MB in the page instead of the full bundle's 4.8 MB (1.96 MB packed)."""
    import gzip

    return base64.b64encode(gzip.compress(PLOTLY_BUNDLE.read_bytes(), 9, mtime=0)).decode("ascii")


def _plotly_and(script: str) -> str:
    """The page's scripts: Plotly's bundle, carried gzipped, unpacked in the browser
    (``DecompressionStream``, no request) and run, then the page's own ``script``; the page marks
    itself ``data-ready`` once drawn (or says why it cannot)."""
    return (f"<script type='application/octet-stream' id='neurcam-plotly'>{_packed_plotly()}</script>\n<script>\n"
            "(function () {\n"
            f"  function draw() {{\n{script}\n  }}\n"
            "  const root = document.documentElement;\n"
            "  if (!window.DecompressionStream) { root.dataset.ready = 'no'; document.body.insertAdjacentHTML('afterbegin', "
            "\"<p><b>This browser cannot unpack the interactive graphs; the PNGs in plots/ show them.</b></p>\"); return; }\n"
            "  const text = atob(document.getElementById('neurcam-plotly').textContent);\n"
            "  const bytes = new Uint8Array(text.length);\n"
            "  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);\n"
            "  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text()\n"
            "    .then(function (code) {\n"
            "      const s = document.createElement('script'); s.textContent = code; document.head.appendChild(s);\n"
            "      draw(); root.dataset.ready = '1';\n"
            "    });\n"
            "})();\n</script>")


def _importance_section(expl: Explanation, figures: dict[str, bytes], left_out: dict[int, str]) -> list[str]:
    """The ranking of the drawn terms (stability flags beside them), its plot, and which terms
    and features are not drawn or never read, and why."""
    e = html.escape
    card = expl.model_card
    parts: list[str] = []
    ranking = [r for r in expl.importance if r["term"] not in {expl.terms[i].name for i in left_out}]
    top = ranking[0]["importance"] if ranking else 0.0
    parts.append("<h2 id='importance'>Importance</h2><p>Mean absolute contribution to the logits, "
                 "averaged over clusters.</p><table><tr><th>rank</th><th>term</th><th>kind</th><th>importance</th>"
                 "</tr>")
    flagged = set((expl.stability or {}).get("flagged", []))
    for i, r in enumerate(ranking[:TOP_TABLE], 1):
        mark = " <b>(does not recur)</b>" if r["term"] in flagged else ""
        parts.append(f"<tr><td>{i}</td><td>{e(r['term'])}{mark}</td><td>{r['kind']}</td><td>{fmt(r['importance'], top)}</td></tr>")
    parts.append("</table>")
    if len(ranking) > TOP_TABLE:
        parts.append(f"<p>and {len(ranking) - TOP_TABLE} more (every term: tables/terms.parquet).</p>")
    parts.append(_img(figures["importance.png"], "term importance"))
    if left_out:
        parts.append("<p class='left-out'>Not drawn (no visible effect on any cluster): "
                     + "; ".join(f"{e(expl.terms[i].name)} ({e(why)})" for i, why in sorted(left_out.items()))
                     + ".</p>")
    constant = card.get("constant_features_left_out") or []
    if constant:
        parts.append(f"<p class='left-out'>Constant in the training data, so no gate could select them: "
                     f"{e(', '.join(constant))}.</p>")
    unused = unused_features(card, list(expl.feature_names))
    if unused:
        parts.append(f"<p class='left-out'>Never selected by any term, so they do not affect the clusters "
                     f"({len(unused)} of {len(expl.feature_names)}): {e(', '.join(unused))}.</p>")
    return parts


def html_report(expl: Explanation, figures: dict[str, bytes] | None = None, title: str = "NeurCAM clustering report") -> str:
    """A self-contained page that works offline: the images and Plotly's script embedded, the
    numbers the interactive views draw carried in the page, nothing fetched: one sequence of
    sections in reading order."""
    from .report_script import SCRIPT
    figures = figures or render_figures(expl)
    card = expl.model_card
    e = html.escape
    left_out = left_out_terms(expl)
    drawn = [i for i in by_importance(expl) if i not in left_out]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
             f"<style>{STYLE}</style></head><body>"]
    options = "<option value='-1'>every cluster</option>" + "".join(
        f"<option value='{k}'>cluster {cid}</option>" for k, cid in enumerate(expl.cluster_ids))
    parts.append(f"<div class='bar'><b>{e(title)}</b> &nbsp; <label>cluster: <select id='choose-cluster'>{options}"
                 f"</select></label> <span class='note'>showing <span id='showing'>every cluster</span>: its "
                 f"section and, in the graphs, its curve in colour over the others' (grey)</span></div>")
    parts.append(f"<h1>{e(title)}</h1>")
    data = card.get("data", {})
    n_rows = data.get("n_rows")
    parts.append(f"<p>{f'{n_rows:,}' if n_rows is not None else '?'} rows, {len(expl.feature_names)} features, "
                 f"{expl.n_clusters} clusters, {len(expl.terms)} terms "
                 f"({sum(t.kind == 'pair' for t in expl.terms)} pairwise).</p>")
    warn = (expl.stability or {}).get("warning")
    if warn:
        parts.append(f"<p class='warning'>Warning: {e(warn)} (see <a href='#stability'>Stability</a>).</p>")
    empty = card.get("clusters", {}).get("note")
    if empty:
        parts.append(f"<p class='warning' id='empty-clusters'>Warning: {e(empty)}.</p>")
    sections = list(SECTIONS) + [s for s, present in ((("stability", "Stability"), expl.stability),
                                                       (("compare", "Compared with"), expl.comparison)) if present]
    parts.append("<nav><ul>" + "".join(f"<li><a href='#{a}'>{e(h)}</a></li>" for a, h in sections) + "</ul></nav>")
    parts += _clusters(expl, figures)
    parts += _rows_section(expl)
    parts += _importance_section(expl, figures, left_out)
    parts += _term_view("shapes", "Shape graphs", expl, drawn, "main")
    parts += _term_view("pairs", "Pairwise interactions (purified)", expl, drawn, "pair")
    parts += _stability_section(expl)
    parts += _comparison_section(expl)
    parts.append("<h2 id='card'>Model card</h2>")
    parts += _model_card(card, list(expl.feature_names))
    parts.append(_json_script(page_data(expl, drawn[:VIEW_TERMS])))
    parts.append(_plotly_and(SCRIPT))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(expl: Explanation, directory: Where) -> Path | str:
    """explanation.json, Parquet tables, PNG plots and report.html into ``directory`` (atomically;
    on an object store, published through a manifest). Returns the report's path."""
    directory = Location(directory)

    def write(tmp: Path) -> None:
        figures = render_figures(expl)
        (tmp / "plots").mkdir()
        for name, data in figures.items():
            (tmp / "plots" / name).write_bytes(data)
        expl.to_json(tmp / "explanation.json")
        expl.to_parquet(tmp / "tables")
        (tmp / "report.html").write_text(html_report(expl, figures))

    atomic_directory(directory, write, marker="explanation.json")
    return (directory / "report.html").path

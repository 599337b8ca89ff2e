"""Pictures and the HTML report, rendered only from an ``Explanation``'s numbers (headless)."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..storage import atomic_directory  # noqa: E402
from .explanation import Explanation, Term  # noqa: E402


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def shape_figure(term: Term, n_clusters: int, ids: list[int] | None = None) -> bytes:
    """One line per cluster over the feature's grid; the feature's histogram underneath."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 4.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    grid = term.grids[0]
    cmap = plt.get_cmap("tab20" if n_clusters > 10 else "tab10")
    for k in range(n_clusters):
        top.plot(grid, term.values[:, k], drawstyle="steps-mid" if term.discrete[0] else "default",
                 color=cmap(k % cmap.N), label=f"cluster {ids[k] if ids else k}", lw=1.4)
    top.axhline(0, color="0.6", lw=0.8)
    top.set_ylabel("contribution to logit")
    top.set_title(f"{term.name}  (importance {term.importance.mean():.3g})")
    if n_clusters <= 12:
        top.legend(fontsize=7, ncol=2, frameon=False)
    if term.histogram:
        edges, counts = np.asarray(term.histogram["edges"]), np.asarray(term.histogram["counts"])
        bottom.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="0.7")
    bottom.set_xlabel(term.features[0])
    bottom.set_ylabel("rows")
    return _png(fig)


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
        ax.set_title(f"cluster {ids[k] if ids else k}", fontsize=8)
        ax.tick_params(labelsize=6)
        if k % cols == 0:
            ax.set_ylabel(term.features[0], fontsize=7)
        if k // cols == rows - 1 or k + cols >= n_clusters:
            ax.set_xlabel(term.features[1], fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.8, label="contribution")
    fig.suptitle(term.name)
    return _png(fig)


def importance_figure(expl: Explanation, top: int = 25) -> bytes:
    ranking = expl.importance[:top][::-1]
    fig, ax = plt.subplots(figsize=(6.5, 0.28 * len(ranking) + 1.2))
    ax.barh([r["term"] for r in ranking], [r["importance"] for r in ranking],
            color=["tab:orange" if r["kind"] == "pair" else "tab:blue" for r in ranking])
    ax.set_xlabel("mean |contribution| (averaged over clusters)")
    ax.set_title("Term importance")
    return _png(fig)


FLAT = 1e-6  # a term whose values span less than this fraction of the widest term's span is flat


def figure_name(index: int, term: Term) -> str:
    """Unique per term: the index keeps ``a b`` and ``a_b`` (one safe name) apart."""
    return f"{index:03d}_{'shape' if term.kind == 'main' else 'pair'}_{_safe(term.name)}.png"


def flat_terms(expl: Explanation) -> dict[int, str]:
    """Term index -> why it is not drawn: a plot of a flat term would be an empty picture."""
    spans = [float(np.ptp(t.values)) if t.values.size else 0.0 for t in expl.terms]
    widest = max(spans, default=0.0)
    out = {}
    for i, (t, span) in enumerate(zip(expl.terms, spans)):
        if span <= FLAT * widest or span == 0.0:
            constant = [f for f, g in zip(t.features, t.grids) if len(g) < 2 or float(np.ptp(g)) == 0.0]
            out[i] = (f"{', '.join(constant)} is constant in the data" if constant
                      else "the model gives it no effect on any cluster") + f" (values span {span:.1g})"
    return out


def render_figures(expl: Explanation) -> dict[str, bytes]:
    """File name -> PNG bytes for the importance chart and every term that is not flat."""
    figs = {"importance.png": importance_figure(expl)}
    flat = flat_terms(expl)
    for i, t in enumerate(expl.terms):
        if i not in flat:
            figs[figure_name(i, t)] = (shape_figure if t.kind == "main" else pair_figure)(t, expl.n_clusters, expl.ids)
    return figs


def write_plots(expl: Explanation, directory) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in render_figures(expl).items():
        (directory / name).write_bytes(data)
        paths.append(directory / name)
    return paths


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def html_report(expl: Explanation, figures: dict[str, bytes] | None = None, title: str = "NeurCAM clustering report") -> str:
    """A self-contained page: every image embedded, no scripts or network references."""
    figures = figures or render_figures(expl)
    card = expl.model_card
    e = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
             "img{max-width:100%}pre{background:#f6f6f6;padding:.5em;overflow:auto;font-size:12px}</style></head><body>",
             f"<h1>{e(title)}</h1>"]
    data = card.get("data", {})
    parts.append(f"<p>{data.get('n_rows', '?')} rows, {len(expl.feature_names)} features, "
                 f"{expl.n_clusters} clusters, {len(expl.terms)} terms "
                 f"({sum(t.kind == 'pair' for t in expl.terms)} pairwise).</p>")
    parts.append("<h2>Clusters</h2><p>Terms that push a cluster's members into it (or away from it): the "
                 "term's contribution to the cluster minus its mean over all clusters, averaged over the "
                 "cluster's rows.</p><table><tr><th>cluster</th><th>rows</th><th>pushed in by</th>"
                 "<th>pushed out by</th></tr>")
    for p in expl.profiles:
        into = ", ".join(f"{e(q['term'])} ({q['mean_relative_contribution']:+.2f})" for q in p["into"])
        out = ", ".join(f"{e(q['term'])} ({q['mean_relative_contribution']:+.2f})" for q in p["out_of"])
        parts.append(f"<tr><td>{p['cluster']}</td><td>{p['size']}</td><td>{into}</td><td>{out}</td></tr>")
    parts.append("</table><h2>Importance</h2><table><tr><th>rank</th><th>term</th><th>kind</th><th>importance</th></tr>")
    for i, r in enumerate(expl.importance, 1):
        parts.append(f"<tr><td>{i}</td><td>{e(r['term'])}</td><td>{r['kind']}</td><td>{r['importance']:.4g}</td></tr>")
    parts.append("</table>")
    parts.append(_img(figures["importance.png"], "term importance"))
    flat = flat_terms(expl)
    for kind, heading in (("main", "Shape graphs"), ("pair", "Pairwise interactions (purified)")):
        terms = [(i, t) for i, t in enumerate(expl.terms) if t.kind == kind]
        if not terms:
            continue
        parts.append(f"<h2>{heading}</h2>")
        for i, t in terms:
            if i in flat:
                parts.append(f"<p class='flat'>{e(t.name)}: flat, not drawn: {e(flat[i])}.</p>")
            else:
                parts.append(_img(figures[figure_name(i, t)], f"{'shape graph' if kind == 'main' else 'heat map'} "
                                                                f"of {t.name}"))
    parts.append("<h2>Model card</h2><pre>" + e(json.dumps(card, indent=1)) + "</pre></body></html>")
    return "\n".join(parts)


def write_report(expl: Explanation, directory) -> Path:
    """explanation.json, Parquet tables, PNG plots and report.html into ``directory`` (atomically)."""
    directory = Path(directory)

    def write(tmp: Path) -> None:
        figures = render_figures(expl)
        (tmp / "plots").mkdir()
        for name, data in figures.items():
            (tmp / "plots" / name).write_bytes(data)
        expl.to_json(tmp / "explanation.json")
        expl.to_parquet(tmp / "tables")
        (tmp / "report.html").write_text(html_report(expl, figures))

    atomic_directory(directory, write, marker="explanation.json")
    return directory / "report.html"

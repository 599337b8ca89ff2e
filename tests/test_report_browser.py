"""The HTML report in a real browser: headless Chromium (Debian's package, installed by .ci/browser)
driven by Playwright. Every image must decode, every section and table-of-contents link must
resolve, the page must load nothing from anywhere, and the views must answer the reader: choosing
a cluster shows its section and draws its curve over the others', choosing a term redraws the
graph, a chosen row's bars are drawn. Screenshots stay in the test's folder."""
import os
import shutil

import numpy as np
import pytest

from .conftest import SMALL, blobs
from neurcam_dist import NeurCAM
from neurcam_dist.explain.build import build_explanation
from neurcam_dist.explain.report import SECTIONS, write_report

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

# the shape graph's traces as the page drew them (Plotly keeps them on the plot's element)
TRACES = """sel => Array.from(document.querySelector(sel).data).map(t => ({name: t.name || null,
    type: t.type || 'scatter', colour: t.line ? t.line.color : null, width: t.line ? t.line.width : null,
    fill: t.fill || null, z: t.z || null}))"""


def chromium() -> str:
    path = os.environ.get("NEURCAM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium for the browser test: run `bash .ci/browser` (Debian's chromium package) "
                    "or set NEURCAM_CHROMIUM=/path/to/chrome")
    return path


def open_page(p, report, requests, errors, height=1500):
    browser = p.chromium.launch(executable_path=chromium(), args=ARGS)
    page = browser.new_page(viewport={"width": 1200, "height": height})
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(report.as_uri(), wait_until="load")
    page.wait_for_function("document.documentElement.dataset.ready !== undefined", timeout=30_000)
    return browser, page


def test_report_renders_in_headless_chromium(fitted_pairs, data, tmp_path):
    from PIL import Image
    from playwright.sync_api import sync_playwright

    X, _ = data
    expl = build_explanation(fitted_pairs, X, rows=X.iloc[[3, 7]])
    chosen = expl.examples["rows"]
    report = write_report(expl, tmp_path / "report")
    requests, errors = [], []
    with sync_playwright() as p:
        browser, page = open_page(p, report, requests, errors)
        try:
            images = page.evaluate("""() => Promise.all(Array.from(document.images).map(
                img => img.decode().then(() => [img.alt, img.naturalWidth, img.naturalHeight],
                                         () => [img.alt, 0, 0])))""")
            ids = page.evaluate("() => Array.from(document.querySelectorAll('[id]')).map(e => e.id)")
            dangling = page.evaluate("""() => Array.from(document.querySelectorAll("a[href^='#']"))
                .map(a => a.getAttribute('href')).filter(h => !document.getElementById(h.slice(1)))""")
            summaries = page.locator("section.cluster p.summary").all_inner_texts()
            thumb_widths = page.evaluate("() => Array.from(document.querySelectorAll('.thumbs img'))"
                                         ".map(i => i.getBoundingClientRect().width)")
            page.screenshot(path=str(tmp_path / "report-top.png"))
            page.screenshot(path=str(tmp_path / "report-full.png"), full_page=True)
            # 3 clusters: the page starts on every cluster, each curve in its own colour
            start = page.evaluate(TRACES, "#shapes ~ .term-view .plot")
            visible = page.evaluate("() => Array.from(document.querySelectorAll('section.cluster'))"
                                    ".filter(s => !s.hidden).length")
            colours = page.evaluate("() => JSON.parse(document.getElementById('neurcam-data').textContent).colours")
            # choose the second cluster: its section alone, its curve thick and coloured, the others grey
            page.select_option("#choose-cluster", "1")
            shown = page.evaluate("() => Array.from(document.querySelectorAll('section.cluster'))"
                                  ".filter(s => !s.hidden).map(s => s.id)")
            chosen_traces = page.evaluate(TRACES, "#shapes ~ .term-view .plot")
            title = page.evaluate("() => document.querySelector('#shapes ~ .term-view .plot .gtitle').textContent")
            # another term, and the pair view on the chosen cluster
            page.select_option("#shapes ~ .term-view select", "1")
            title2 = page.evaluate("() => document.querySelector('#shapes ~ .term-view .plot .gtitle').textContent")
            pair = page.evaluate(TRACES, "#pairs ~ .term-view .plot")
            bars = page.evaluate("() => Array.from(document.querySelectorAll('.row-bars'))"
                                 ".map(d => d.data[0].x.length)")
            # a link to a cluster's section chooses that cluster
            page.evaluate("() => { window.location.hash = '#cluster-2'; }")
            page.wait_for_function("() => document.getElementById('choose-cluster').value === '2'")
            page.screenshot(path=str(tmp_path / "report-cluster.png"))
        finally:
            browser.close()
    assert images and all(w > 0 and h > 0 for _, w, h in images), [a for a, w, _ in images if not w]
    for anchor, _ in SECTIONS:
        assert anchor in ids
    assert [f"cluster-{c}" for c in expl.cluster_ids] == [i for i in ids if i.startswith("cluster-")]
    assert not dangling
    assert len(summaries) == expl.n_clusters and all(s.endswith(".") for s in summaries)
    assert thumb_widths and all(w > 100 for w in thumb_widths)       # drawn side by side, not collapsed
    assert all(u.startswith(("file:", "data:")) for u in requests), [u for u in requests if not u.startswith("file:")]
    assert not errors
    with Image.open(tmp_path / "report-top.png") as shot:
        assert shot.size == (1200, 1500)
        assert len(set(shot.convert("L").getdata())) > 10              # not a blank page
    lines = [t for t in start if t["name"] and t["name"].startswith("cluster")]
    assert visible == expl.n_clusters and sorted(t["colour"] for t in lines) == sorted(colours)
    assert shown == [f"cluster-{expl.cluster_ids[1]}"]
    thick = [t for t in chosen_traces if t["width"] == 3]
    assert [t["name"] for t in thick] == [f"cluster {expl.cluster_ids[1]}"] and thick[0]["colour"] == colours[1]
    assert {t["colour"] for t in chosen_traces if t["name"] and t["name"].startswith("cluster") and t["width"] != 3} \
        == {"#c4c4c4"}
    assert title.endswith(f": cluster {expl.cluster_ids[1]}") and title2 != title
    pair_term = next(t for t in expl.terms if t.kind == "pair" and t.name in title_of_pairs(expl))
    heat = next(t for t in pair if t["type"] == "heatmap")
    assert np.allclose(np.asarray(heat["z"]), pair_term.values[:, :, 1], atol=1e-3 * np.abs(pair_term.values).max())
    assert bars == [len(r["terms"]) for r in chosen]


def title_of_pairs(expl) -> list[str]:
    """The pair terms in the order the pair view offers them (the first is drawn first)."""
    from neurcam_dist.explain.report import by_importance, left_out_terms
    left = left_out_terms(expl)
    return [expl.terms[i].name for i in by_importance(expl) if expl.terms[i].kind == "pair" and i not in left][:1]


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    """Ten clusters, two seeds: the winner's explanation with the other's as its stability."""
    X, y = blobs(n=900, d=5, k=10, seed=3)
    runs = [NeurCAM(n_clusters=10, random_state=s, **SMALL).fit(X) for s in (0, 1)]
    expl = build_explanation(runs[0], X, runs=[runs[1]])
    expl.stability["warning"] = expl.stability["warning"] or "a test warning: the runs disagree"
    return expl, write_report(expl, tmp_path_factory.mktemp("ten") / "report")


def test_a_ten_cluster_report_starts_on_one_cluster_with_its_band(ten, tmp_path):
    from playwright.sync_api import sync_playwright

    expl, report = ten
    requests, errors = [], []
    with sync_playwright() as p:
        browser, page = open_page(p, report, requests, errors, height=1000)
        try:
            height = page.evaluate("() => document.body.scrollHeight")
            shown = page.evaluate("() => Array.from(document.querySelectorAll('section.cluster'))"
                                  ".filter(s => !s.hidden).map(s => s.id)")
            traces = page.evaluate(TRACES, "#shapes ~ .term-view .plot")
            warning = page.locator("p.warning").first.inner_text()
            page.evaluate("() => document.getElementById('shapes').scrollIntoView()")
            page.screenshot(path=str(tmp_path / "ten-shapes.png"))
            page.select_option("#choose-cluster", "-1")
            every = page.evaluate("() => Array.from(document.querySelectorAll('section.cluster'))"
                                  ".filter(s => !s.hidden).length")
            all_traces = page.evaluate(TRACES, "#shapes ~ .term-view .plot")
        finally:
            browser.close()
    assert not errors and all(u.startswith(("file:", "data:")) for u in requests)
    # ten clusters: one section and one highlighted curve at a time, not ten lines on ten pages
    assert shown == [f"cluster-{expl.cluster_ids[0]}"] and every == 10
    assert [t["name"] for t in traces if t["width"] == 3] == [f"cluster {expl.cluster_ids[0]}"]
    assert any(t["fill"] == "tonexty" and t["name"].startswith("range over 2 runs") for t in traces)
    assert not any(t["fill"] for t in all_traces)                   # no band when every cluster is drawn
    assert "Warning:" in warning and expl.stability["warning"] in warning
    assert height < 9000, height


def test_a_categorical_term_is_drawn_as_bars_with_missing_its_own(tmp_path):
    from playwright.sync_api import sync_playwright

    from neurcam_dist.data.synthetic import mixed_table
    df, _ = mixed_table(400, seed=6, defined_by="level")
    X = df.drop(columns="customer_id")
    est = NeurCAM(n_clusters=3, random_state=0, **dict(SMALL, epochs=40, warmup_epochs=15, batch_size=64)).fit(X)
    expl = est.explain(X)
    report = write_report(expl, tmp_path / "report")
    requests, errors = [], []
    pick = """name => { const s = document.querySelector('#shapes ~ .term-view select');
        return Array.from(s.options).find(o => o.textContent.startsWith(name + ' (')).value; }"""
    with sync_playwright() as p:
        browser, page = open_page(p, report, requests, errors)
        try:
            page.select_option("#choose-cluster", "1")
            page.select_option("#shapes ~ .term-view select", page.evaluate(pick, "region"))
            bars = page.evaluate("""sel => Array.from(document.querySelector(sel).data).map(t => ({
                type: t.type, name: t.name || null, x: t.x, colour: t.marker ? t.marker.color : null}))""",
                                 "#shapes ~ .term-view .plot")
            page.select_option("#shapes ~ .term-view select", page.evaluate(pick, "usage"))
            curve = page.evaluate(TRACES.replace("z: t.z || null", "symbol: t.marker ? t.marker.symbol : null"),
                                  "#shapes ~ .term-view .plot")
            page.screenshot(path=str(tmp_path / "levels.png"))
        finally:
            browser.close()
    assert not errors
    clusters = [b for b in bars if b["name"] and b["name"].startswith("cluster")]
    assert len(clusters) == 3 and all(b["type"] == "bar" for b in clusters)
    labels = clusters[0]["x"]
    assert labels[-1].startswith("missing (") and any(lab.startswith("north (") for lab in labels)
    colours = [b["colour"] for b in clusters]
    assert colours[1] != "#c4c4c4" and colours[0] == colours[2] == "#c4c4c4"   # the chosen one in its colour
    assert any(t["symbol"] == "diamond" for t in curve)                       # usage's missing value


def test_feature_names_that_look_like_markup_or_run_long_never_break_the_page(tmp_path):
    from playwright.sync_api import sync_playwright
    X, _ = blobs(n=200, d=4, seed=2)
    names = ["<!--<script>", "</script><b>x", "]]>&amp;", "特徴" * 150]
    X.columns = names
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X)
    report = write_report(est.explain(X), tmp_path / "report")
    assert all(len(p.name.encode()) < 100 for p in (tmp_path / "report").rglob("*"))   # file names stay short
    requests, errors = [], []
    with sync_playwright() as p:
        browser, page = open_page(p, report, requests, errors)
        try:
            graphs = page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length")
            options = page.evaluate("() => Array.from(document.querySelector('#shapes ~ .term-view select')"
                                    ".options).map(o => o.textContent)")
            scripts = page.evaluate("() => document.scripts.length")
            ready = page.evaluate("() => document.documentElement.dataset.ready")   # Plotly unpacked, page drawn
        finally:
            browser.close()
    assert ready == "1" and not errors and graphs >= 1 and scripts >= 3   # the page's script ran and drew (0 when swallowed)
    assert all(any(o.startswith(n[:20]) for o in options) for n in names)   # each name shown as written

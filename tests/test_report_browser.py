"""The HTML report in a real browser: headless Chromium (Debian's package, installed by .ci/browser)
driven by Playwright. Every image must decode, every section and table-of-contents link must
resolve, and the page must load nothing from anywhere; a screenshot stays in the test's folder."""
import os
import shutil

import pytest

from neurcam_dist.explain.report import SECTIONS, write_report

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = os.environ.get("NEURCAM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium for the browser test: run `bash .ci/browser` (Debian's chromium package) "
                    "or set NEURCAM_CHROMIUM=/path/to/chrome")
    return path


def test_report_renders_in_headless_chromium(fitted_pairs, data, tmp_path):
    from PIL import Image
    from playwright.sync_api import sync_playwright

    X, _ = data
    expl = fitted_pairs.explain(X)
    report = write_report(expl, tmp_path / "report")
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(report.as_uri(), wait_until="load")
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
        finally:
            browser.close()
    assert images and all(w > 0 and h > 0 for _, w, h in images), [a for a, w, _ in images if not w]
    for anchor, _ in SECTIONS:
        assert anchor in ids
    assert [f"cluster-{c}" for c in expl.ids] == [i for i in ids if i.startswith("cluster-")]
    assert not dangling
    assert len(summaries) == expl.n_clusters and all(s.endswith(".") for s in summaries)
    assert thumb_widths and all(w > 100 for w in thumb_widths)       # drawn side by side, not collapsed
    assert all(u.startswith(("file:", "data:")) for u in requests), [u for u in requests if not u.startswith("file:")]
    assert not errors
    with Image.open(tmp_path / "report-top.png") as shot:
        assert shot.size == (1200, 1500)
        assert len(set(shot.convert("L").getdata())) > 10              # not a blank page

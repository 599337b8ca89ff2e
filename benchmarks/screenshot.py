"""A PNG of an HTML report, as headless Chromium renders it (the README's and the docs' pictures).

    python benchmarks/screenshot.py runs/demo/report/report.html docs/report-top.png [--height 1400]
    python benchmarks/screenshot.py REPORT docs/report-shapes.png --cluster 3 --at shapes

``--cluster K`` chooses the K-th cluster in the page's selector (-1: every cluster), ``--term N``
the N-th term of the shape graphs' selector, ``--at ANCHOR`` scrolls to a section first.

Uses Playwright with Debian's chromium (``bash .ci/browser`` installs it; ``NEURCAM_CHROMIUM`` picks
another binary); the page loads nothing from the network.
"""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--width", type=int, default=1100)
    ap.add_argument("--height", type=int, default=1400)
    ap.add_argument("--cluster", default=None, help="the K-th cluster of the page's selector (-1: every cluster)")
    ap.add_argument("--term", default=None, help="the N-th term of the shape graphs' selector")
    ap.add_argument("--at", default=None, help="a section's anchor to scroll to (shapes, rows, stability, ...)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    browser_path = os.environ.get("NEURCAM_CHROMIUM") or shutil.which("chromium")
    if not browser_path:
        raise SystemExit("no chromium: run `bash .ci/browser` or set NEURCAM_CHROMIUM")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp.png")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(args.report.resolve().as_uri(), wait_until="load")
            page.wait_for_function("document.documentElement.dataset.ready === '1'", timeout=30_000)
            if args.cluster is not None:
                page.select_option("#choose-cluster", args.cluster)
            if args.term is not None:
                page.select_option("#shapes ~ .term-view select", args.term)
            if args.at:
                page.evaluate("a => document.getElementById(a).scrollIntoView()", args.at)
            page.wait_for_timeout(300)
            page.screenshot(path=str(tmp))
        finally:
            browser.close()
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({args.width}x{args.height})")


if __name__ == "__main__":
    main()

"""``monitor.html``: one offline page in the report's look, the drifted features with their
distributions then and now, the cluster shares, and the terms that moved."""
from __future__ import annotations

import html

from ..explain.report import STYLE
from ..numerics import fmt
from ..uris import Location
from .drift import P_DRIFT, PSI_DRIFT, SHARE_RATIO, Drift

SHOWN = 10        # features whose distributions are drawn (the drifted ones first)
TERMS_SHOWN = 15  # terms in the table of the terms that moved
THEN, NOW = "#9e9e9e", "#1f77b4"


def _p(p: float) -> str:
    """A p-value as the page shows it: ``< 0.0001`` (a tenth of the drift test's threshold), else ``fmt``."""
    return "&lt; 0.0001" if p < 1e-4 else fmt(p, digits=2)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:.1%}"


def _bars(ref: float, now: float, top: float) -> str:
    """Two horizontal bars, the reference's (grey) over the snapshot's (blue)."""
    width = 240 / max(top, 1e-12)
    return (f"<div style='width:{ref * width:.1f}px;height:7px;background:{THEN}' title='then {ref:.1%}'></div>"
            f"<div style='width:{now * width:.1f}px;height:7px;background:{NOW}' title='now {now:.1%}'></div>")


def _features_table(drift: Drift) -> list[str]:
    e = html.escape
    rows = "".join(
        f"<tr class='{'drifted' if f['drifted'] else ''}'><td>{e(f['name'])}</td><td>{f['kind']}</td>"
        f"<td>{'yes' if f['used'] else 'no'}</td><td>{f['score']:.3f}</td><td>{_p(f['p_value'])}</td>"
        f"<td>{_pct(f['missing_reference'])} &rarr; {_pct(f['missing_now'])}</td>"
        f"<td>{_pct(f['unseen_now']) if f['kind'] == 'categorical' else ''}</td>"
        f"<td><b>{'drifted' if f['drifted'] else ''}</b></td></tr>" for f in drift.features)
    return ["<h2 id='features'>Features</h2>",
            f"<p class='note'>Most drifted first. A feature has drifted when its population stability index (PSI) "
            f"over the training deciles (a numeric column) or levels (a categorical one), with unseen levels and "
            f"missing cells as bins of their own, is at least {PSI_DRIFT} and the G-test's p is below {P_DRIFT}. "
            f"Only a feature the model reads raises the alert.</p>",
            "<table><thead><tr><th>feature</th><th>kind</th><th>used by the model</th><th>PSI</th><th>p</th>"
            "<th>missing then &rarr; now</th><th>unseen levels now</th><th></th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"]


def _distributions(drift: Drift) -> list[str]:
    e = html.escape
    shown = [f for f in drift.features if f["drifted"]][:SHOWN]
    shown += [f for f in drift.features if not f["drifted"]][:max(0, min(3, SHOWN - len(shown)))]
    parts = ["<h2 id='distributions'>Distributions then and now</h2>",
             f"<p class='note'><span style='color:{THEN}'>&#9632;</span> training rows (the model's reference) "
             f"&nbsp; <span style='color:{NOW}'>&#9632;</span> this snapshot</p>"]
    for f in shown:
        b = f["bins"]
        top = max(max(b["reference"]), max(b["now"]))
        rows = "".join(f"<tr><td>{e(label)}</td><td>{_pct(r)}</td><td>{_pct(n)}</td><td>{_bars(r, n, top)}</td></tr>"
                       for label, r, n in zip(b["labels"], b["reference"], b["now"], strict=False) if r or n)
        moved = (f"; mean {fmt(f['mean_reference'], digits=4)} &rarr; {fmt(f['mean_now'], digits=4)} ({f['shift_sd']:+.2f} sd)"
                 if f.get("shift_sd") is not None else "")
        parts.append(f"<h3>{e(f['name'])}{' (drifted)' if f['drifted'] else ''}</h3>"
                     f"<p class='note'>PSI {f['score']:.3f}{moved}</p><table><thead><tr><th>bin</th><th>then</th>"
                     f"<th>now</th><th></th></tr></thead><tbody>{rows}</tbody></table>")
    return parts


def _because(cluster: dict) -> str:
    """The terms a drifted cluster changed because of, with their part of its margin's move."""
    return ", ".join(f"{t['term']} ({t['share']:.0%})" for t in cluster.get("because", []))


def _clusters(drift: Drift) -> list[str]:
    e = html.escape
    top = max(max(c["share_reference"], c["share_now"]) for c in drift.clusters)
    rows = "".join(
        f"<tr><td>{c['id']}</td><td>{_pct(c['share_reference'])}</td><td>{_pct(c['share_now'])} "
        f"({_pct(c['interval'][0])} to {_pct(c['interval'][1])})</td><td>{_bars(c['share_reference'], c['share_now'], top)}"
        f"</td><td><b>{'drifted' if c['drifted'] else ''}</b></td><td>"
        f"{e(_because(c))}"
        f"</td></tr>" for c in drift.clusters)
    return ["<h2 id='clusters'>Cluster shares</h2>",
            f"<p class='note'>A cluster has drifted when its share changed by a factor of {SHARE_RATIO} or more and a "
            f"binomial test gives p below {P_DRIFT}; the interval is 95% (Wilson). <i>Because</i>: the terms whose "
            f"shift moved the cluster's mean margin (its logit less the mean logit) the way its share went, with "
            f"their part of that move.</p>",
            "<table><thead><tr><th>cluster</th><th>share then</th><th>share now (95%)</th><th></th><th></th>"
            f"<th>because</th></tr></thead><tbody>{rows}</tbody></table>"]


def _terms(drift: Drift) -> list[str]:
    e = html.escape
    ids = [str(c["id"]) for c in drift.clusters]
    rows = "".join(f"<tr><td>{e(t['name'])}</td><td>{t['moved']:.3f}</td>"
                   + "".join(f"<td>{t['margin_shift'][i]:+.3f}</td>" for i in ids) + "</tr>"
                   for t in drift.terms[:TERMS_SHOWN])
    return ["<h2 id='terms'>Terms that moved</h2>",
            "<p class='note'>Each term's shift of its mean contribution to each cluster's margin (logits), most moved "
            "first; a cluster's margin shift is the exact sum of its column.</p>",
            "<table><thead><tr><th>term</th><th>moved</th>" + "".join(f"<th>cluster {i}</th>" for i in ids)
            + f"</tr></thead><tbody>{rows}</tbody></table>"]


def monitor_html(drift: Drift, title: str) -> str:
    """The page of ``drift``."""
    e = html.escape
    verdict = (f"<p class='warning' id='alert'><b>Alert</b>: {e(drift.summary())}</p>" if drift.alert else
               f"<p class='summary' id='verdict'>{e(drift.summary())}</p>")
    b = drift.borderline
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
             f"<style>{STYLE}tr.drifted td{{background:#fdecea}}</style></head><body>", f"<h1>{e(title)}</h1>", verdict,
             "<nav><ul><li><a href='#features'>Features</a></li><li><a href='#distributions'>Distributions</a></li>"
             "<li><a href='#clusters'>Cluster shares</a></li><li><a href='#terms'>Terms that moved</a></li></ul></nav>"]
    parts += _features_table(drift) + _distributions(drift) + _clusters(drift) + _terms(drift)
    parts.append(f"<h2 id='borderline'>Borderline rows</h2><p>{_pct(b['reference'])} of the training rows, "
                 f"{_pct(b['now'])} of this snapshot ({e(b['rule'])}).</p></body></html>")
    return "\n".join(parts)


def write_monitor(output: Location, record: dict, drift: Drift, title: str, extra: dict[str, bytes] | None = None) -> None:
    """``OUTPUT/drift.json`` (``record``: ``drift.to_dict()`` with what was compared), the page and
    the ``extra`` files, in one swap (an earlier monitor's folder is replaced whole; a folder
    another command wrote is refused)."""
    import json
    from pathlib import Path

    from ..storage import atomic_directory

    def write(tmp: Path) -> None:
        (tmp / "drift.json").write_text(json.dumps(record, indent=1, default=float) + "\n")
        (tmp / "monitor.html").write_text(monitor_html(drift, title=title))
        for name, data in (extra or {}).items():
            (tmp / name).write_bytes(data)
    atomic_directory(output, write, marker="drift.json")

"""A snapshot against a model's drift reference: which features moved, which clusters grew or
shrank, and which terms account for it.

The tests (``docs/monitor.md``):

- a feature has drifted when its population stability index over its reference bins (a numeric
  column's training deciles, a categorical column's levels, plus unseen levels and missing cells)
  is at least ``PSI_DRIFT`` **and** a G-test of the snapshot's bin counts against the reference
  shares gives p below ``P_DRIFT``: a shift large enough to matter and too large to be chance;
- a cluster has drifted when its share of the snapshot differs from its share of the training
  rows by a factor of at least ``SHARE_RATIO`` (either way) and a binomial test gives p below
  ``P_DRIFT``;
- the alert is raised by a drifted cluster or a drifted feature that a term of the model reads
  (a column the model ignores is reported, never alerted on).

Every logit is a sum of terms, so the change of a cluster's mean margin (its logit less the mean
of all clusters' logits) splits exactly into the terms' shifts: ``because`` lists the terms that
moved the margin in the direction of the share change."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .reference import BORDER, bin_labels, feature_counts, model_pass

SCHEMA = "neurcam-drift/1"
PSI_DRIFT = 0.2      # population stability index of a drifted feature (0.1: some shift, 0.25: major, in practice)
P_DRIFT = 1e-3       # ... and of a test that rules chance out
SHARE_RATIO = 1.25   # a drifted cluster's share changed by this factor at least (up or down)
FLOOR = 1e-4         # a bin's share in the index and the test is never taken below this (an unseen level's)
BECAUSE = 5          # terms listed as accounting for a drifted cluster's change


@dataclass(frozen=True)
class Drift:
    """What ``NeurCAM.monitor`` found in a snapshot (``to_dict``: ``drift.json``).

    Attributes
    ----------
    alert : bool
        A drifted cluster, or a drifted feature the model reads.
    n_rows : int
        Rows of the snapshot.
    features : tuple of dict
        Most drifted first: ``name``, ``kind``, ``used``, ``score`` (PSI), ``p_value``, ``drifted``,
        missing and unseen-level rates then and now, the bins with both shares.
    clusters : tuple of dict
        By cluster id: ``share_reference``, ``share_now``, its 95% ``interval``, ``p_value``,
        ``drifted`` and, when drifted, the terms it changed ``because`` of.
    terms : tuple of dict
        Most moved first: each term's shift of its mean contribution to every cluster's margin.
    borderline : dict
        The share of borderline rows then and now, and the rule.
    """

    alert: bool
    n_rows: int
    features: tuple
    clusters: tuple
    terms: tuple
    borderline: dict

    def to_dict(self) -> dict:
        """``drift.json``'s content (schema ``neurcam-drift/1``)."""
        return {"schema": SCHEMA, "alert": self.alert, "n_rows": self.n_rows,
                "thresholds": {"psi": PSI_DRIFT, "p_value": P_DRIFT, "share_ratio": SHARE_RATIO},
                "features": list(self.features), "clusters": list(self.clusters), "terms": list(self.terms),
                "borderline": self.borderline}

    def drifted_features(self) -> list[str]:
        """Names of the drifted features, most drifted first."""
        return [f["name"] for f in self.features if f["drifted"]]

    def drifted_clusters(self) -> list[int]:
        """Ids of the drifted clusters."""
        return [c["id"] for c in self.clusters if c["drifted"]]

    def summary(self) -> str:
        """One line: the verdict and what moved."""
        feats = [f for f in self.features if f["drifted"]]
        said = ", ".join(f"{f['name']} (PSI {f['score']:.2f}{'' if f['used'] else ', not used by the model'})"
                         for f in feats[:5]) + (f" and {len(feats) - 5} more" if len(feats) > 5 else "")
        shares = ", ".join(f"cluster {c['id']} {c['share_reference']:.1%} -> {c['share_now']:.1%}"
                           for c in self.clusters if c["drifted"])
        head = "ALERT: drift" if self.alert else "no drift that matters" if feats else "no drift"
        parts = [f"{head} in {self.n_rows:,} rows"]
        parts += [f"features: {said}"] if said else []
        parts += [f"shares: {shares}"] if shares else []
        return "; ".join(parts)


def _psi_and_p(ref: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """The population stability index of the snapshot's bin ``counts`` against reference shares
    ``ref``, and the G-test's p-value (both on shares floored at ``FLOOR``)."""
    from scipy.stats import chi2
    n = counts.sum()
    p = np.maximum(np.asarray(ref, dtype=np.float64), FLOOR)
    q = np.maximum(counts / max(n, 1), FLOOR)
    psi = float(((q - p) * np.log(q / p)).sum())
    observed = counts > 0
    g = 2.0 * float((counts[observed] * np.log(counts[observed] / (n * p[observed]))).sum())
    return psi, float(chi2.sf(max(g, 0.0), max(len(p) - 1, 1)))


def _feature(f: dict, counts: np.ndarray, n: int) -> dict:
    psi, p = _psi_and_p(np.asarray(f["shares"]), counts)
    now = counts / max(n, 1)
    out = {"name": f["name"], "kind": f["kind"], "used": f["used"], "score": psi, "test": "psi", "p_value": p,
           "drifted": bool(psi >= PSI_DRIFT and p < P_DRIFT),
           "missing_reference": f["shares"][-1], "missing_now": float(now[-1]),
           "unseen_reference": 0.0, "unseen_now": float(now[-2]) if f["kind"] == "categorical" else 0.0,
           "bins": {"labels": bin_labels(f), "reference": list(f["shares"]), "now": now.tolist()}}
    return out


def _wilson(p: float, n: int, z: float = 1.959964) -> list[float]:
    """The 95% Wilson interval of a share ``p`` of ``n`` rows."""
    if n == 0:
        return [0.0, 1.0]
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def _cluster(cid: int, ref: float, count: int, n: int, margin: np.ndarray, terms: list[str]) -> dict:
    now = count / max(n, 1)
    sd = math.sqrt(max(ref * (1 - ref), FLOOR * (1 - FLOOR)) / max(n, 1))
    p = math.erfc(abs(now - ref) / sd / math.sqrt(2.0))
    ratio = max(now, FLOOR) / max(ref, FLOOR)
    drifted = bool(p < P_DRIFT and max(ratio, 1 / ratio) >= SHARE_RATIO)
    out = {"id": int(cid), "share_reference": float(ref), "share_now": float(now), "interval": _wilson(now, n),
           "p_value": float(p), "drifted": drifted, "margin_shift": float(margin.sum())}
    if drifted:
        sign = 1.0 if now > ref else -1.0
        order = [t for t in np.argsort(-sign * margin) if sign * margin[t] > 0][:BECAUSE]
        total = float(sum(sign * margin[t] for t in np.flatnonzero(sign * margin > 0))) or 1.0
        out["because"] = [{"term": terms[t], "margin_shift": float(margin[t]), "share": float(sign * margin[t] / total)}
                          for t in order]
    return out


def tally(fitted, reference: dict, arr: np.ndarray, unseen: dict[str, int]) -> dict:
    """What a snapshot's encoded rows ``arr`` add up to (``unseen``: cells per column whose level
    the model never saw): rows, each feature's cells per reference bin, each numeric feature's sum
    and count, each term's contribution sums, rows per cluster column and borderline rows. Every
    entry is a sum, so the tallies of a snapshot's blocks add up (``combine``) to the snapshot's."""
    passed = model_pass(fitted, arr)
    present = ~np.isnan(arr)
    with np.errstate(over="ignore"):   # cells near float64's limit: an infinite sum, no mean (``drift_from``)
        sums = np.where(present, arr, 0.0).sum(axis=0)
    return {"n": int(len(arr)), "bins": feature_counts(fitted, arr, unseen, reference["features"]),
            "sums": sums, "present": present.sum(axis=0),
            "term_sums": passed["term_sums"], "terms": passed["terms"],
            "clusters": np.bincount(passed["columns"], minlength=len(reference["cluster_ids"])),
            "borderline": passed["borderline"]}


def combine(a: dict | None, b: dict) -> dict:
    """The tally of two blocks' rows (``None``: nothing yet)."""
    if a is None:
        return b
    return {**a, "n": a["n"] + b["n"], "bins": [x + y for x, y in zip(a["bins"], b["bins"], strict=False)],
            **{key: a[key] + b[key] for key in ("sums", "present", "term_sums", "clusters", "borderline")}}


def drift_of(fitted, reference: dict, rows) -> Drift:
    """``rows`` (a snapshot, raw as ``predict`` takes them) against ``reference`` (``reference_of``).

    Raises
    ------
    DataError
        When the snapshot has no rows, lacks a feature or holds a column of another kind than at fit.
    """
    arr, unseen = fitted.encode_counted(rows, "the snapshot")
    return drift_from(reference, tally(fitted, reference, arr, unseen))


def drift_from(reference: dict, total: dict | None) -> Drift:
    """The verdict on a snapshot's ``total`` tally (``tally``, ``combine``) against ``reference``."""
    from ..errors import DataError
    n = 0 if total is None else total["n"]
    if n == 0:
        raise DataError("the snapshot has no rows: nothing to compare with the training data (an empty export "
                        "upstream?)")
    features = []
    for j, (f, counts) in enumerate(zip(reference["features"], total["bins"], strict=False)):
        out = _feature(f, counts, n)
        if f["kind"] == "numeric":
            mean = float(total["sums"][j] / total["present"][j]) if total["present"][j] else None
            mean = mean if mean is not None and math.isfinite(mean) else None   # cells near float64's limit
            shift = None if mean is None or not f.get("sd") else (mean - f["mean"]) / f["sd"]
            out.update(mean_reference=f.get("mean"), mean_now=mean, shift_sd=shift)
        features.append(out)
    features.sort(key=lambda f: (not f["drifted"], not f["used"], -f["score"]))
    shift = total["term_sums"] / n - np.asarray(reference["term_means"])     # (T, K)
    margin = shift - shift.mean(axis=1, keepdims=True)
    ids = reference["cluster_ids"]
    clusters = [_cluster(cid, ref, int(total["clusters"][k]), n, margin[:, k], total["terms"])
                for k, (cid, ref) in enumerate(zip(ids, reference["cluster_shares"], strict=False))]
    moved = np.abs(margin).sum(axis=1)
    terms = [{"name": total["terms"][t], "moved": float(moved[t]),
              "margin_shift": {str(cid): float(margin[t, k]) for k, cid in enumerate(ids)}}
             for t in np.argsort(-moved, kind="stable")]
    border = {"reference": reference["borderline"], "now": total["borderline"] / n,
              "rule": f"best cluster less than twice as likely as the runner-up (logits within {BORDER:.3f})"}
    alert = any(f["drifted"] and f["used"] for f in features) or any(c["drifted"] for c in clusters)
    return Drift(alert=alert, n_rows=n, features=tuple(features), clusters=tuple(clusters), terms=tuple(terms),
                 borderline=border)

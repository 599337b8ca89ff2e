"""A short readable rule per cluster ("proline < 700 and od280 > 2.1"), with its measured coverage
and precision: a summary a person can say aloud, not the model (the SQL export is the model).

For each cluster a shallow decision tree (scikit-learn's) separates the cluster's rows from the
others on the model's own assignments; the rule is the path to the leaf that holds the most of the
cluster's rows at the best precision, its bounds on one feature merged. Coverage is the share of
the cluster's rows the rule takes; precision the share of the rule's rows in the cluster; both are
measured on the rows given.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Rule:
    """One cluster's rule: ``conditions`` as (feature, op, threshold), measured on ``n_rows``."""
    cluster: int
    conditions: tuple[tuple[str, str, float], ...]
    coverage: float
    precision: float
    n_cluster: int
    n_rows: int

    def text(self) -> str:
        """``f0 <= 1.5 and f2 > 3`` (or ``(every row)``)."""
        return " and ".join(f"{f} {op} {t:.4g}" for f, op, t in self.conditions) or "(every row)"

    def mask(self, X: pd.DataFrame) -> np.ndarray:
        """The rows of ``X`` the rule takes."""
        keep = np.ones(len(X), dtype=bool)
        for f, op, t in self.conditions:
            v = X[f].to_numpy(np.float64)
            keep &= (v <= t) if op == "<=" else (v > t)
        return keep


def cluster_rules(X: pd.DataFrame, labels: np.ndarray, ids, max_depth: int = 3, min_share: float = 0.05,
                  seed: int = 0) -> list[Rule]:
    """One ``Rule`` per cluster id in ``ids`` (in that order) for the rows ``X`` assigned ``labels``."""
    from sklearn.tree import DecisionTreeClassifier
    names = list(X.columns)
    arr = X.to_numpy(np.float64)
    out = []
    for cid in ids:
        y = labels == cid
        n_in = int(y.sum())
        if n_in == 0:
            out.append(Rule(int(cid), (), 0.0, 0.0, 0, len(X)))
            continue
        tree = DecisionTreeClassifier(max_depth=max_depth, min_samples_leaf=max(1, int(min_share * n_in)),
                                      class_weight="balanced", random_state=seed).fit(arr, y)
        leaves = tree.apply(arr)
        best, best_key = None, None
        for leaf in np.unique(leaves):
            here = leaves == leaf
            hit = int((here & y).sum())
            if hit == 0:
                continue
            precision, coverage = hit / int(here.sum()), hit / n_in
            key = (round(precision * coverage ** 0.5, 12), coverage)   # precise first, then large
            if best_key is None or key > best_key:
                best, best_key = leaf, key
        conditions = _merged(_path(tree, best), names)
        rule = Rule(int(cid), conditions, 0.0, 0.0, n_in, len(X))
        taken = rule.mask(X)
        hit = int((taken & y).sum())
        out.append(Rule(int(cid), conditions, hit / n_in, hit / max(int(taken.sum()), 1), n_in, len(X)))
    return out


def _path(tree, leaf: int) -> list[tuple[int, str, float]]:
    """The (feature index, op, threshold) tests from the root to ``leaf``."""
    t = tree.tree_
    parent = {}
    for node in range(t.node_count):
        for child, op in ((t.children_left[node], "<="), (t.children_right[node], ">")):
            if child != -1:
                parent[child] = (node, op)
    steps = []
    node = leaf
    while node in parent:
        node, op = parent[node]
        steps.append((int(t.feature[node]), op, float(t.threshold[node])))
    return steps[::-1]


def _merged(steps, names: list[str]) -> tuple[tuple[str, str, float], ...]:
    """Bounds on one feature merged (the tightest ``<=`` and ``>`` of each), in path order."""
    upper: dict[int, float] = {}
    lower: dict[int, float] = {}
    order: list[tuple[int, str]] = []
    for j, op, thr in steps:
        if op == "<=":
            upper[j] = min(upper.get(j, np.inf), thr)
        else:
            lower[j] = max(lower.get(j, -np.inf), thr)
        if (j, op) not in order:
            order.append((j, op))
    return tuple((names[j], op, upper[j] if op == "<=" else lower[j]) for j, op in order)


def rules_text(rules: list[Rule]) -> str:
    """One line per cluster: its rule, coverage and precision."""
    return "".join(f"cluster {r.cluster}: {r.text()}  (covers {r.coverage:.0%} of its {r.n_cluster:,} rows, "
                   f"precision {r.precision:.0%})\n" for r in rules)

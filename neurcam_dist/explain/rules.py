"""A short readable rule per cluster ("proline < 700 and od280 > 2.1"), with its measured coverage
and precision: a summary a person can say aloud, not the model (the SQL export is the model).

For each cluster a shallow decision tree (scikit-learn's) separates the cluster's rows from the
others on the model's own assignments; the rule is the path to the leaf that holds the most of the
cluster's rows at the best precision, its bounds on one feature merged. Coverage is the share of
the cluster's rows the rule takes; precision the share of the rule's rows in the cluster; both are
measured on the rows given. A categorical feature enters the tree as one indicator per level and
its conditions read ``plan = monthly`` / ``plan != monthly``; missing cells are routed by the tree
itself (scikit-learn's trees take NaN) and a missing cell meets no numeric bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..numerics import fmt


@dataclass(frozen=True)
class Rule:
    """One cluster's rule: ``conditions`` as (feature, op, threshold), measured on ``n_rows``."""
    cluster: int
    conditions: tuple[tuple[str, str, float], ...]
    coverage: float
    precision: float
    n_cluster: int
    n_rows: int
    dates: frozenset = frozenset()   # features of dates and times: bounds in days, shown as dates

    def text(self) -> str:
        """``f0 <= 1.5 and plan = monthly`` (or ``(every row)``); a date's bound as a UTC date and time."""
        def bound(f, t):
            if f not in self.dates:
                return fmt(t, digits=4)
            return (pd.Timestamp(0, tz="UTC") + pd.Timedelta(days=float(t))).strftime("%Y-%m-%d %H:%M UTC")
        return " and ".join(f"{f} {'=' if op == '==' else op} {t}" if op in ("==", "!=") else f"{f} {op} {bound(f, t)}"
                            for f, op, t in self.conditions) or "(every row)"

    def mask(self, X: pd.DataFrame) -> np.ndarray:
        """The rows of ``X`` the rule takes."""
        from ..columns import level_texts
        keep = np.ones(len(X), dtype=bool)
        for f, op, t in self.conditions:
            if op in ("==", "!="):
                same = np.asarray(level_texts(X[f]), dtype=object) == t
                keep &= same if op == "==" else ~same
                continue
            v = _numbers(X[f])
            keep &= (v <= t) if op == "<=" else (v > t)
        return keep


def cluster_rules(X: pd.DataFrame, labels: np.ndarray, ids, max_depth: int = 3, min_share: float = 0.05,
                  seed: int = 0) -> list[Rule]:
    """One ``Rule`` per cluster id in ``ids`` (in that order) for the rows ``X`` assigned ``labels``."""
    from sklearn.tree import DecisionTreeClassifier

    from ..columns import as_days
    arr, names = _design(X)
    dates = frozenset(c for c in X.columns if as_days(X[c]) is not None)
    out = []
    for cid in ids:
        y = labels == cid
        n_in = int(y.sum())
        if n_in == 0:
            out.append(Rule(int(cid), (), 0.0, 0.0, 0, len(X), dates))
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
        rule = Rule(int(cid), conditions, 0.0, 0.0, n_in, len(X), dates)
        taken = rule.mask(X)
        hit = int((taken & y).sum())
        out.append(Rule(int(cid), conditions, hit / n_in, hit / max(int(taken.sum()), 1), n_in, len(X), dates))
    return out


def _design(X: pd.DataFrame) -> tuple[np.ndarray, list]:
    """The tree's inputs: numeric columns as they are (NaN for missing; dates as days), a
    categorical column (text, ``category`` or boolean) as one 0/1 indicator per level, named
    ``(column, level)``."""
    from ..columns import as_days, is_category_dtype, level_texts
    dates = {c for c in X.columns if as_days(X[c]) is not None}
    parts, names = [], []
    for c in X.columns:
        if is_category_dtype(X[c]) and c not in dates:
            texts = np.asarray(level_texts(X[c]), dtype=object)
            for level in sorted({t for t in texts.tolist() if t is not None}):
                parts.append((texts == level).astype(np.float64))
                names.append((c, level))
        else:
            parts.append(_numbers(X[c]))
            names.append(c)
    return np.column_stack(parts) if parts else np.empty((len(X), 0)), names


def _numbers(col: pd.Series) -> np.ndarray:
    """A numeric column as float64 (NaN for missing); dates and times as the model reads them
    (``columns.as_days``)."""
    from ..columns import as_days
    days = as_days(col)
    return (col if days is None else days).to_numpy(np.float64, na_value=np.nan)


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
    out = []
    for j, op in order:
        if isinstance(names[j], tuple):   # a level's indicator: <= 0.5 is "not that level"
            out.append((names[j][0], "!=" if op == "<=" else "==", names[j][1]))
        else:
            out.append((names[j], op, upper[j] if op == "<=" else lower[j]))
    return tuple(out)


def rules_text(rules: list[Rule]) -> str:
    """One line per cluster: its rule, coverage and precision."""
    return "".join(f"cluster {r.cluster}: {r.text()}  (covers {r.coverage:.0%} of its {r.n_cluster:,} rows, "
                   f"precision {r.precision:.0%})\n" for r in rules)

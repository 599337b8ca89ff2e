"""``explain`` in memory: a model over a table, its shape graphs, importance and the HTML report."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, DataError
from ..redaction import redact
from ..uris import Location, Where
from .common import check_grids, explained_table, load_model, model_id, one_id, warn_ids


@dataclass
class ExplainResult:
    """An explanation written to ``output`` (``report`` is its HTML file) over ``n_rows`` rows."""

    explanation: object
    report: str
    output: str
    n_rows: int

    def top_terms(self, n: int = 3) -> str:
        """``"term (importance), ..."`` for the ``n`` most important terms."""
        from ..explain.explanation import fmt
        top = self.explanation.importance[:n]
        return ", ".join(f"{r['term']} ({fmt(r['importance'], top[0]['importance'])})" for r in top)


def explain(model: Where, input: Where, output: Where, *, sample: int = 1_000_000, grid_size: int = 128,
            pair_grid_size: int = 32, encoding: str = "utf-8", delimiter: str | None = None,
            decimal: str | None = None, label: str | None = None, rows: list | None = None,
            id_column: str | None = None, no_id: bool = False, compare: str | None = None,
            say=print) -> ExplainResult:
    """Shape graphs, purified pair heat maps, importance and the HTML report of ``model`` over the
    rows of ``data``, written to ``output``.

    Parameters
    ----------
    model : str
        A model directory or an MLflow model URI.
    input : str
        A CSV or Parquet table with the model's feature columns (only those are read).
    output : str
        The folder for ``explanation.json``, ``tables/``, ``plots/`` and ``report.html``.
    sample : int
        Explain a seeded sample of this many rows when the data has more (0: every row).
    grid_size, pair_grid_size, encoding, delimiter, decimal
        Points along each feature's axis (shape graphs, pair heat maps); a CSV file's format (as ``fit``'s).
    label : str, optional
        A column the clusters are compared with (never used to cluster): label table, ARI, NMI.
    rows : list, optional
        Rows to show one by one (terms as bars, values, what would move them): values of
        ``id_column``, else 0-based positions; looked up before any sampling.
    id_column, no_id : str, optional; bool
        The column that names rows (``rows`` and the report's): by default the model's
        (``NeurCAM.id_column_``) when ``data`` has it; ``no_id``: 0-based positions, whatever.
    compare : str, optional
        An earlier version (directory or MLflow URI): the report shows how the rows moved between
        its cluster ids and the model's, and which terms now drive each cluster.
    say : callable
        Where the lines about a sample, the chosen rows and the comparison go.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import NeurCAM, service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); table = mixed_table(600, seed=0)[0]; table.to_csv(d / "rows.csv", index=False)
    >>> NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, verbose=False).fit(table.drop(columns="customer_id")).save(d / "m")
    >>> result = service.explain(str(d / "m"), str(d / "rows.csv"), str(d / "explained"))
    >>> result.n_rows, sorted(p.name for p in (d / "explained").iterdir())
    (600, ['explanation.json', 'plots', 'report.html', 'tables'])
    """
    from ..explain.build import Compared
    from ..explain.report import write_report
    where = Location(output)   # resolved once here: the checks and the report go there
    _check_explain(input, where, model, compare, sample, grid_size, pair_grid_size, id_column, rows, no_id)
    est = load_model(model)
    old = load_model(compare) if compare else None
    csv = {"delimiter": delimiter, "decimal": decimal}
    id_column = id_column or (None if no_id else model_id(est, input, encoding, csv))
    features = [str(c) for c in est.feature_names_in_]
    df, chosen = _explain_rows(est, (compare, old), input, encoding, csv, label, id_column, rows, sample, say)
    compared = None if old is None else Compared(old, df[[str(c) for c in old.feature_names_in_]],
                                                 old_name=redact(compare), new_name=redact(model))
    expl = _explained(est, df, label, None if chosen is None else chosen[features], compared, say,
                      grid_size=grid_size, pair_grid_size=pair_grid_size)
    return ExplainResult(explanation=expl, report=str(write_report(expl, where)), output=output, n_rows=len(df))


def _explain_rows(est, compared: tuple, data: str, encoding: str, csv: dict, label: str | None,
                  id_column: str | None, rows: list | None, sample: int, say):
    """``(table, chosen rows)`` that ``explain`` reads from ``data``: the model's feature columns
    (and those of the earlier model ``compared``, ``(where, model)``), the label and the id (its
    repeats said), the ``rows`` asked for looked up before sampling, indexed by the id."""
    where, old = compared
    df = explained_table(data, encoding, csv,
                         {"the model's feature columns": [str(c) for c in est.feature_names_in_],
                          f"the feature columns of {where}": [str(c) for c in old.feature_names_in_] if old else []},
                         {"label": label, "--id": id_column})
    warn_ids(id_column, df.get(id_column) if id_column else None, say)
    chosen = _chosen_rows(df, rows, id_column, data) if rows else None
    df = _sampled(df, sample, say)
    return (df.set_index(id_column, drop=False) if id_column else df), chosen


def _sampled(df, sample: int, say):
    """``df``, or a seeded sample of ``sample`` of its rows (in their order) when it has more, said."""
    if sample and len(df) > sample:
        say(f"explaining a seeded sample of {sample:,} of the {len(df):,} rows (--sample; 0: all of them)")
        return df.sample(sample, random_state=0).sort_index()
    return df


def _explained(est, df, label: str | None, chosen, compared, say, **grids):
    """``est``'s explanation of ``df``'s rows, complete (labels, the chosen rows' views, the
    comparison), with the chosen rows and the comparison said."""
    from ..explain.build import build_explanation
    from ..explain.compare import comparison_text
    from ..explain.examples import row_text
    features = [str(c) for c in est.feature_names_in_]
    expl = build_explanation(est, df[features], labels=df[label] if label else None, label_name=label, rows=chosen,
                             compared=compared, **grids)
    for record in (expl.examples or {}).get("rows", []):
        say(row_text(record))
    if expl.comparison is not None:
        say(comparison_text(expl.comparison))
    return expl


def _check_explain(data, output, model, compare, sample: int, grid_size: int, pair_grid_size: int,
                   id_column, rows, no_id: bool = False) -> None:
    """``explain``'s arguments and output, before any model or data is read: the grids, the
    sample, ``--id`` with ``--show``, an output that replaces nothing of another's and has room."""
    from ..storage import check_room, check_writable, refuse_overwrite
    check_grids(grid_size, pair_grid_size)
    one_id(id_column, no_id)
    if sample < 0:
        raise ConfigError(f"--sample must be 0 (every row) or more, got {sample}")
    if id_column and not rows:
        raise ConfigError("--id names the column --show looks rows up in: give --show as well")
    refuse_overwrite(output, inputs=[data, model, compare])
    check_writable(output, "--output")
    check_room(output, 64 * 2**20)   # the page, its plots and tables: a few MB; room to spare


def _chosen_rows(df, rows: list, id_column: str | None, data: str):
    """The rows of ``df`` that ``rows`` names (values of ``id_column``, else 0-based positions),
    in the order given, indexed by what named them; ``DataError`` naming any not found. An id
    that several rows hold names every one of them, each shown as ``ID (row N)`` (N: its 0-based
    position in the input)."""
    if id_column:
        import numpy as np
        keys = df[id_column].astype(str)
        found = {str(r): np.flatnonzero((keys == str(r)).to_numpy()) for r in rows}
        missing = [r for r, at in found.items() if not len(at)]
        if missing:
            raise DataError(f"--show {missing} not found in column {id_column!r} of {data} "
                            f"(e.g. {', '.join(keys.head(3))})")
        at = [(str(r), int(i), len(found[str(r)]) > 1) for r in dict.fromkeys(map(str, rows)) for i in found[r]]
        picked = df.iloc[[i for _, i, _ in at]]
        return picked.set_axis([f"{r} (row {i})" if shared else r for r, i, shared in at])
    positions = []
    for r in rows:
        try:
            positions.append(int(r))
        except ValueError:
            raise DataError(f"--show {r!r} is not a row position (0-based): name an id column with --id "
                            f"to look rows up by their ids") from None
    bad = [p for p in positions if not 0 <= p < len(df)]
    if bad:
        raise DataError(f"--show {bad} out of range: {data} has {len(df):,} rows (positions 0 to {len(df) - 1:,})")
    return df.iloc[positions].set_axis(positions)

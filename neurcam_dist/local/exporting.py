"""``export``: a model as SQL or rules, checked against ``predict`` on the given rows before it is written."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, DataError
from ..redaction import redact
from ..uris import Location, Where
from .common import check_grids, explained_table, load_model, model_id


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` made: the text, where it went, and how often it agrees with ``predict``."""
    text: str
    output: str | None
    n_rows: int
    agreement: float
    engines: dict | None = None    # SQL: the agreement measured by running the query in each engine
    note: str | None = None        # what the agreement cannot tell (measured on too few rows)


# The least share of rows on which an exported query must agree with predict to be written
# (``export --min-agreement``): the shape tables interpolated on a 128-point grid agree on 99.5%
# and more of the rows they are built on; a query below this reads cells differently.
EXPORT_MIN_AGREEMENT = 0.99


# The fewest rows an export's agreement is measured on before it says nothing about the rest: 100%
# agreement on 1,000 rows bounds the query's disagreement with predict at 0.3% (95%, the rule of
# three); on a handful of rows it bounds nothing, and the shape tables span only their range.
EXPORT_MIN_ROWS = 1_000


def _few_rows_note(n_rows: int, data: str) -> str | None:
    """The warning of an export measured on fewer than ``EXPORT_MIN_ROWS`` rows."""
    if n_rows >= EXPORT_MIN_ROWS:
        return None
    return (f"the agreement was measured on {n_rows:,} row{'s' if n_rows != 1 else ''} of {redact(data)}, fewer "
            f"than {EXPORT_MIN_ROWS:,}: it proves little about other rows, and the query's shape tables span only "
            f"these rows' values; pass a larger --input (the rows the query will score, or a sample of "
            f"{EXPORT_MIN_ROWS:,} or more)")


def export(model: Where, input: Where, *, table: str | None = None, fmt: str = "sql", keep: list[str] | None = None,
           output: Where | None = None, sample: int = 100_000, grid_size: int = 128, pair_grid_size: int = 32,
           encoding: str = "utf-8", delimiter: str | None = None, decimal: str | None = None,
           min_agreement: float = EXPORT_MIN_AGREEMENT) -> ExportResult:
    """``model`` as one standard SQL query over a warehouse table (no Python needed to assign
    clusters), or as readable rules, checked against ``predict`` on the rows of ``data``.

    Parameters
    ----------
    model, input : str
        A model directory or MLflow model URI; the rows (CSV or Parquet) the query's shape tables
        span and its agreement is measured on (a seeded sample of ``sample`` when there are more).
    table : str
        The table the SQL query reads (``fmt="sql"``).
    fmt : {"sql", "rules"}
        ``sql``: ``explain.sql.to_sql``, run in SQLite, SQLite with every column TEXT and DuckDB on
        the rows (``explain.sql.engine_clusters``), ``agreement`` the lowest; ``rules``: a short rule
        per cluster with its coverage and precision (``explain.rules``), ``agreement`` their mean.
    keep : list of str, optional
        Columns the query carries beside the cluster (default: the model's id, when the rows have it).
    output : str, optional
        Written atomically only at an agreement of ``min_agreement`` or more (else ``DataError``).
    grid_size, pair_grid_size, encoding, delimiter, decimal
        The shape tables' points (as ``explain``'s) and a CSV file's format (as ``fit``'s).

    Returns
    -------
    ExportResult
        ``note`` warns when the rows are fewer than ``EXPORT_MIN_ROWS``.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import NeurCAM, service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); table = mixed_table(600, seed=0)[0]; table.to_csv(d / "rows.csv", index=False)
    >>> NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, verbose=False).fit(table.drop(columns="customer_id")).save(d / "m")
    >>> sql = service.export(str(d / "m"), str(d / "rows.csv"), table="customers", output=str(d / "clusters.sql"))
    >>> sql.agreement >= service.EXPORT_MIN_AGREEMENT, sorted(sql.engines), sql.text.startswith("-- NeurCAM")
    (True, ['duckdb', 'sqlite', 'sqlite-text'], True)
    """
    target = _check_export(model, input, table, fmt, output, (grid_size, pair_grid_size))
    est = load_model(model)
    _refuse_dates_in_sql(est, fmt)
    features = [str(c) for c in est.feature_names_in_]
    csv = {"delimiter": delimiter, "decimal": decimal}
    df = explained_table(input, encoding, csv, {"the model's feature columns": features}, {})
    if sample and len(df) > sample:
        df = df.sample(sample, random_state=0).sort_index()
    engines = None
    if fmt == "rules":
        text, agreement = _rules(est, df[features])
    else:
        found = model_id(est, input, encoding, csv) if keep is None else None
        text, engines = _agreed_query(est, df[features], table, [found, *features] if found else keep,
                                      (grid_size, pair_grid_size), min_agreement, input)
        agreement = min(engines.values())
    if target is not None:
        _publish(text, target)
    return ExportResult(text=text, output=output, n_rows=len(df), agreement=agreement, engines=engines,
                        note=_few_rows_note(len(df), input))


def _rules(est, X) -> tuple[str, float]:
    """``export --format rules``: a short rule per cluster (``explain.rules``) and their mean
    precision on the rows ``X``."""
    import numpy as np

    from ..explain.rules import cluster_rules, rules_text
    rules = cluster_rules(X, est.predict(X), est.cluster_ids_)
    return rules_text(rules), float(np.mean([r.precision for r in rules]))


def _publish(text: str, target: Location) -> None:
    """The exported text at ``target``, atomically: a local file replaced whole, or one object put."""
    from ..storage import write_text_atomic
    write_text_atomic(target, text)


def _check_export(model: str, data: str, table: str | None, fmt: str, output: str | None,
                  grids: tuple[int, int]):
    """``export``'s request, before the model is read: the format, the table the SQL reads, the
    grids, and an ``output`` that may be written (not an input, room for ~1 MB). Returns the
    output's ``Location`` (None: the text is only returned)."""
    if fmt not in ("sql", "rules"):
        raise ConfigError(f"--format {fmt!r}: the formats are: sql, rules")
    if fmt == "sql" and not table:
        raise ConfigError("--format sql needs --table NAME: the table the query reads")
    check_grids(*grids)
    if output is None:
        return None
    from ..storage import check_room, check_writable, refuse_overwrite
    target = Location(output)
    refuse_overwrite(target, inputs=[data, model], ours=_written_by_export)
    room = target if target.is_uri else target.parent   # one file: the folder that takes it
    check_writable(room, "--output")
    check_room(room, 16 * 2**20)   # a query: ~1 MB
    return target


def _agreed_query(est, X, table: str, keep: list[str] | None, grids: tuple[int, int], min_agreement: float,
                  data: str) -> tuple[str, dict[str, float]]:
    """``(query, engine -> agreement)``: ``est`` as SQL over ``table`` returning ``keep`` (the
    model's id beside the features, as predict writes it), built on the rows ``X`` with shape
    tables of ``grids`` points, run in each engine on those rows; refused below ``min_agreement``."""
    import numpy as np

    from ..explain.sql import engine_clusters, to_sql
    expl = est.explain(X, grid_size=grids[0], pair_grid_size=grids[1])
    coding = est.fitted_.coding
    dtypes, tokens = (coding.dtypes(), coding.missing_values) if coding is not None else ({}, ())
    text = to_sql(expl, table, keep, dtypes=dtypes, missing_values=tokens)
    expected, clusters = est.predict(X), engine_clusters(expl, X, dtypes, tokens)
    _refuse_disagreement(X, expected, clusters, min_agreement, data)
    return text, {engine: float(np.mean(got == expected)) for engine, got in clusters.items()}


def _refuse_disagreement(df, expected, clusters: dict, min_agreement: float, data: str) -> None:
    """A query whose cluster equals ``predict``'s (``expected``) on fewer than ``min_agreement``
    of ``df``'s rows in some engine is not written: ``DataError`` with the share, the first rows
    that disagree (their row in the input, both clusters, their cells) and what to do."""
    import numpy as np
    for engine, got in clusters.items():
        same = got == expected
        if same.mean() >= min_agreement:
            continue
        shown = []
        for i in np.flatnonzero(~same)[:5]:
            cells = ", ".join(f"{c}={v!r}" for c, v in df.iloc[i].items())
            query = "NULL" if got[i] is None or got[i] != got[i] else int(got[i])
            shown.append(f"row {df.index[i]} (predict {int(expected[i])}, query {query}: {cells[:200]})")
        raise DataError(f"the query's cluster equals predict's on {same.mean():.2%} of the {len(df):,} rows of "
                        f"{redact(data)} in {engine}, below --min-agreement {min_agreement:.0%}, so nothing was "
                        f"written; {int((~same).sum()):,} rows disagree, e.g. {'; '.join(shown)}. A finer "
                        f"--grid-size brings the query closer to the model; --min-agreement 0 writes it anyway")


def _refuse_dates_in_sql(est, fmt: str) -> None:
    """A model that reads dates and times (as ``columns.DATE_UNIT``) has no SQL form: every engine
    writes that conversion its own way, and a query comparing a date column with numbers fails
    (DuckDB) or answers wrongly (SQLite). Refused, naming the columns and what to do."""
    coding = est.fitted_.coding
    dates = [c.name for c in coding.columns if c.dtype == "date"] if coding is not None else []
    if fmt != "sql" or not dates:
        return
    from ..columns import DATE_UNIT
    c = dates[0]
    raise ConfigError(f"this model reads {', '.join(map(repr, dates))} as {DATE_UNIT}, which SQL engines write "
                      f"each their own way, so export cannot write one query for them: add a column of those days "
                      f"to the table (DuckDB: epoch({c}) / 86400.0; SQLite: julianday({c}) - 2440587.5; PostgreSQL: "
                      f"extract(epoch from {c}) / 86400.0), fit on it instead of {c!r}, and export that model; "
                      f"--format rules reads dates as they are")


def _written_by_export(head: bytes) -> bool:
    """An existing ``--output`` that an earlier ``export`` wrote (a query, or rules), which a new
    export may replace."""
    return head.startswith(b"-- NeurCAM") or head.startswith(b"cluster ")

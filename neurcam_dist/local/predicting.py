"""``predict``: score a table in this process when it is small, else with Ray Data; one output contract."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..errors import ConfigError, DataError
from ..redaction import redact
from ..uris import Location, Where
from .common import load_fitted, one_id, say, temp_logs, warn_ids


@dataclass(frozen=True)
class PredictSettings:
    """Where ``predict`` reads and writes, resolved once (from flags, or a job config's defaults)."""

    model: str
    input: object
    output: Location
    id_column: str | None            # None: no id (the rows are numbered), or, with ``id_given`` False, not yet chosen
    log_dir: Location
    tracking_uri: str | None = None
    id_given: bool = True            # False: ``predict`` chooses the id by the model (``rows_id``)


def predict_settings(*, config: str | None = None, overrides: dict | None = None, model: Where | None = None,
                     input: Where | list[str] | None = None, output: Where | None = None, id_column: str | None = None, no_id: bool = False,
                     log_dir: Where | None = None) -> PredictSettings:
    """``predict``'s model, input, output, id column and log folder: as given, else from the job
    config ``config`` (the model ``models:/NAME@champion`` with ``tracking.model_name``, else
    ``OUTPUT/model``; the input ``data.path``, its latest snapshot with ``recluster:``; the output
    ``OUTPUT/predictions``; the id ``data.id``; Ray's lines in ``OUTPUT/logs``). With no id given
    (``--id``, ``--no-id``, ``data.id``), ``predict`` follows the model (``rows_id``).

    Raises
    ------
    ConfigError
        Without a config, when the model, input or output is missing.

    Examples
    --------
    >>> import tempfile, yaml; from pathlib import Path; from neurcam_dist import service
    >>> d = Path(tempfile.mkdtemp()); job = {"data": {"path": str(d / "events"), "id": "order_id"},
    ...                                      "model": {"n_clusters": 4}, "output": str(d / "run")}
    >>> _ = (d / "job.yaml").write_text(yaml.safe_dump(job))
    >>> where = service.predict_settings(config=str(d / "job.yaml"))
    >>> where.model == str(d / "run" / "model"), where.input == str(d / "events"), where.id_column
    (True, True, 'order_id')
    >>> where.output == d / "run" / "predictions"
    True
    """
    one_id(id_column, no_id)
    if config is None:
        missing = [f"--{k}" for k, v in (("model", model), ("input", input), ("output", output)) if v is None]
        if missing:
            raise ConfigError(f"predict needs {', '.join(missing)} (or --config to take them from a job config)")
        return PredictSettings(model=model, input=input, output=Location(output), id_column=None if no_id else id_column,
                               log_dir=Location(log_dir or temp_logs()), id_given=no_id or id_column is not None)
    from ..config import load_config
    cfg = load_config(config, overrides or {})
    out = cfg.output_location()   # the model, the predictions and the logs below it
    tracking_uri = None
    if model is None:
        named = cfg.tracking is not None and cfg.tracking.model_name
        model = f"models:/{cfg.tracking.model_name}@champion" if named else str(out / "model")
        tracking_uri = cfg.tracking.uri if cfg.tracking is not None else None
    if input is None:
        input = cfg.data.path
        if cfg.recluster is not None:
            from ..data.snapshots import pick_snapshot
            input, _ = pick_snapshot(cfg.data.path, cfg.recluster.snapshot)
    return PredictSettings(model=model, input=input, output=Location(output) if output else out / "predictions",
                           id_column=None if no_id else id_column or cfg.data.id,
                           log_dir=Location(log_dir) if log_dir else out / "logs", tracking_uri=tracking_uri,
                           id_given=no_id or id_column is not None or cfg.data.id is not None)


def predict(settings: PredictSettings, *, carry: list[str] | None = None, batch_size: int = 4096,
            concurrency: int = 2, log=None, csv: dict | None = None) -> dict:
    """Score ``settings.input`` with ``settings.model`` into Parquet shards at ``settings.output``:
    each row's id, cluster, probabilities and top terms. A CSV file is read like ``fit`` reads it
    and scored in this process; Parquet goes through ``distributed.predict_parquet`` (in this
    process when small, else Ray Data). Without ``--id``, the id is the model's own when the
    input has it, else a column named ``id``, else the input's one id-like column that is not a
    feature (``customer_id``, say; a line says so); with none, each row's 0-based number in the
    input goes to column ``row`` (``rows_id``).

    ``csv``: a CSV input's ``encoding``, ``delimiter`` and ``decimal`` (``data.tables.read_table``).

    Returns
    -------
    dict
        ``n_rows``, ``files`` and ``seconds``.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; import pandas as pd; from neurcam_dist import NeurCAM, service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); table = mixed_table(600, seed=0)[0]; table.to_csv(d / "rows.csv", index=False)
    >>> NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, verbose=False).fit(table.drop(columns="customer_id")).save(d / "m")
    >>> where = service.predict_settings(model=str(d / "m"), input=str(d / "rows.csv"), output=str(d / "scored.csv"))
    >>> service.predict(where, log=lambda line: None)["n_rows"], pd.read_csv(d / "scored.csv").columns[:3].tolist()
    (600, ['customer_id', 'cluster', 'probability'])
    """
    import dataclasses

    from ..data.tables import is_csv
    if settings.tracking_uri:
        os.environ["MLFLOW_TRACKING_URI"] = settings.tracking_uri
    from ..storage import check_writable, refuse_overwrite
    to_csv = not settings.output.is_uri and is_csv(settings.output)
    if to_csv:   # one file: its folder must take it, and an existing file must be scores neurcam wrote
        refuse_overwrite(settings.output, inputs=[settings.input] if isinstance(settings.input, str) else [],
                         ours=lambda head: b"cluster,probability" in head.split(b"\n")[0])
    check_writable(settings.output.parent if to_csv else settings.output, "--output")
    log = log or say
    fitted = load_fitted(settings.model)
    table = isinstance(settings.input, (str, os.PathLike)) and is_csv(settings.input)
    if to_csv and not table:   # a Parquet input small enough: read whole and scored here, like a CSV file
        _refuse_csv_output_for_large(settings.input)
    if table:   # told once: the header and the rows are read with the same format, said once
        from ..data.tables import csv_format
        csv = dict(csv or {})
        csv["delimiter"], csv["decimal"] = csv_format(settings.input, csv.get("encoding", "utf-8"),
                                                      csv.get("delimiter"), csv.get("decimal"))
    if not settings.id_given:
        columns = _input_columns(settings.input, table, csv or {})
        settings = dataclasses.replace(settings, id_column=rows_id(fitted, columns, log))
    if table or to_csv:
        return _predict_table(fitted, settings, carry or [], log, csv or {} if table else {})
    if settings.id_column:
        _check_parquet_ids(settings.input, settings.id_column, log)
    from ..distributed import predict_parquet
    return predict_parquet(fitted, settings.input, settings.output, id_column=settings.id_column, carry=carry or [],
                           batch_size=batch_size, concurrency=concurrency, log_dir=settings.log_dir, log=log)


def _check_parquet_ids(data, id_column: str, log) -> None:
    """A Parquet input's ids, read once at the door (just that column): a warning with the count
    of rows that share an id or have none (``validation.id_note``). An input of more than
    ``validation.ID_CHECK_ROWS`` rows is not read again for it, and a line says so; an input
    without the column is left to the scoring pass's refusal, which names the nearest column."""
    import pyarrow as pa

    from ..data import footers, reading, resolve
    from ..validation import ID_CHECK_ROWS
    src = resolve(data)
    if id_column not in src.schema.names:
        return
    n_rows = sum(n for _, _, n in footers(src))
    if n_rows > ID_CHECK_ROWS:
        log(f"the ids of {n_rows:,} rows are not checked for duplicates here (over {ID_CHECK_ROWS:,})")
        return
    warn_ids(id_column, pa.concat_tables(list(reading.tables_here(src, [id_column])))[id_column].to_pandas(), log)


def _refuse_csv_output_for_large(path) -> None:
    """A CSV output is one file written by this process: Parquet input too large to score here
    (``data.reading.small_enough``) is refused, naming the Parquet output to use instead."""
    from ..data import footers, reading, resolve
    from ..data.sources import column_bytes
    src = resolve(path)
    found = footers(src)
    n_bytes = column_bytes(src, found[0][1], sum(n for _, _, n in found), list(found[0][1].names))
    if not reading.small_enough(n_bytes):
        raise ConfigError(f"--output ends in .csv, but {path} ({n_bytes / 2**20:,.0f} MiB of columns) is too large to "
                          f"score in this process: write Parquet shards (an --output folder) instead")


def _input_columns(path, table: bool, csv: dict) -> list[str]:
    """The input's column names, from a CSV header or the first Parquet footer."""
    if table:
        from ..data.tables import table_columns
        return [str(c) for c in table_columns(str(path), **csv)]
    from ..data import footers, resolve
    return list(footers(resolve(path))[0][1].names)


def rows_id(fitted, columns: list[str], say) -> str | None:
    """The id column of rows scored or explained with the fitted state ``fitted`` when no ``--id``
    (or ``--no-id``) says: the model's (``id_column_``, what the training rows' ids went by) when ``columns`` has it;
    else a column named ``id``; else the one id-like column of ``columns`` that is not a feature
    (``fit``'s rule); else None: ``predict`` then numbers the rows (``row``). Every choice but the
    model's own and ``id`` is said through ``say``."""
    from ..validation import is_id_like
    # a model saved before the id was recorded: 'id', which predict looked for then
    model_id = fitted.history.get("id_column", "id")
    if model_id is not None and model_id in columns:
        return model_id
    features = set(map(str, fitted.feature_names))
    found = ["id"] if "id" in columns and "id" not in features else \
        [c for c in columns if is_id_like(c) and c not in features]
    why = "the model was fitted without an id" if model_id is None else f"the input has no {model_id!r}, the model's id"
    if len(found) == 1:
        if found[0] != "id":   # the conventional name needs no word
            say(f"id column: {found[0]!r} ({why}; --id names another, --no-id none)")
        return found[0]
    say(f"no id column ({why}{'' if not found else f'; several id-like columns: {found[:5]}'}): rows go by their "
        f"number in the input (--id COLUMN names one)")
    return None


def _predict_table(fitted, settings: PredictSettings, carry: list[str], log, csv: dict) -> dict:
    """A CSV file scored in this process, written like a Parquet input's scores (one shard and
    the summary marker, atomically)."""
    import json

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..data.tables import read_table
    from ..storage import write_dataset
    from ..storage.atomic import PREDICTIONS_MARKER
    from ..validation import missing_columns_note
    t0 = time.perf_counter()
    df = read_table(str(settings.input), **csv)
    ids = [settings.id_column] if settings.id_column else []
    features = list(map(str, fitted.feature_names))
    wanted = features + ids + carry
    missing = [c for c in dict.fromkeys(wanted) if c not in df.columns]
    if missing:
        hint = " (pass --id COLUMN, or --no-id)" if settings.id_column in missing else ""
        raise DataError(f"{settings.input}: no column(s) {missing}{hint}{missing_columns_note(missing, list(df.columns))}")
    warn_ids(settings.id_column, df.get(settings.id_column) if ids else None, log)
    from ..explain.assignments import (ROW_NUMBER, ROW_TERMS, file_layout, met_line, refuse_collisions, scored_columns,
                                      scored_frame)
    layout = file_layout(fitted.cluster_ids)   # the columns fit's assignments have
    refuse_collisions(ids + carry, ([] if ids else [ROW_NUMBER]) + scored_columns(fitted.cluster_ids, ROW_TERMS, **layout))
    from ..storage import check_room
    check_room(settings.output, len(df) * 8 * (len(fitted.cluster_ids) + 2 * ROW_TERMS + 2))
    log(f"scoring {len(df):,} rows from {settings.input} in this process")
    arr, unseen = fitted.encode_counted(df[features], redact(str(settings.input)))
    scored, met = scored_frame(fitted, arr, unseen, df.index, top_terms=ROW_TERMS, **layout)
    scored = scored.reset_index(drop=True)
    scored["cluster"] = scored["cluster"].astype("int32")
    if met_line(met):
        log(met_line(met))
    kept = df[list(dict.fromkeys(ids + carry))].reset_index(drop=True)
    if not ids:   # no id: each row's number in the input, as the Parquet pass writes it
        kept.insert(0, ROW_NUMBER, np.arange(len(df), dtype=np.int64))
    out = pa.Table.from_pandas(pd.concat([kept, scored], axis=1), preserve_index=False)
    summary = {"n_rows": len(df), "files": 1, "input": redact(str(settings.input)), "where": "here",
               "unseen_levels": met["unseen"], "missing_cells": met["missing"]}

    from ..data.tables import is_csv
    if is_csv(settings.output) and not settings.output.is_uri:   # one CSV file, written atomically
        from ..storage import write_text_atomic
        write_text_atomic(settings.output, out.to_pandas().to_csv(index=False))
        summary["seconds"], summary["format"] = round(time.perf_counter() - t0, 2), "csv"
        return summary

    def write(root: str, fs) -> None:
        with fs.open_output_stream(f"{root}/part-00000.parquet") as f:
            pq.write_table(out, f)
        summary["seconds"] = round(time.perf_counter() - t0, 2)
        with fs.open_output_stream(f"{root}/{PREDICTIONS_MARKER}") as f:
            f.write(json.dumps(summary, indent=1).encode())

    write_dataset(settings.output, write, marker=PREDICTIONS_MARKER)
    return summary

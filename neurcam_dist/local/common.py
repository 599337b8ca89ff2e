"""What the in-memory entry points share: reading a model, the console line, output and id checks."""
from __future__ import annotations

import os
import tempfile

from ..errors import ConfigError, DataError
from ..redaction import redact
from ..uris import Location, Where


def load_model(ref: Where):
    """A ``NeurCAM`` from a model directory or an MLflow model URI (``models:/NAME@alias``,
    ``runs:/ID/model``); for a URI, credentials in the tracking URI are taken out of it first.

    Parameters
    ----------
    ref : str, Path or Location
        A model folder (``NeurCAM.save``, a run's ``model/``) or an MLflow model URI.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import NeurCAM, service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); table = mixed_table(300, seed=0)[0].drop(columns="customer_id")
    >>> NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, verbose=False).fit(table).save(d / "m")
    >>> est = service.load_model(d / "m")
    >>> est.n_clusters_, est.predict(table.head(4)).shape
    (3, (4,))
    >>> service.load_fitted(d / "m").cluster_ids.tolist()   # the state scoring reads, without the estimator
    [0, 1, 2]
    """
    ref = os.fspath(ref)
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        from .. import tracking
        tracking.uri.point_at()
        return tracking.load_estimator(ref)
    from ..estimator import NeurCAM
    return NeurCAM.load(ref)


def load_fitted(ref: Where):
    """The fitted state (``model.FittedNet``) of a model directory or an MLflow model URI: what
    scoring reads. A directory is read without the estimator class, so ``neurcam predict``
    imports neither scikit-learn nor SciPy (``benchmarks/startup.py`` times it).

    Parameters
    ----------
    ref : str, Path or Location
        As ``load_model`` takes it (the Examples there load both).
    """
    ref = os.fspath(ref)
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        return load_model(ref).fitted_
    from ..model import FittedNet
    from ..params import refuse_unknown_params
    from ..storage import read_model_dir
    config, state = read_model_dir(Location(ref))
    refuse_unknown_params(config, ref)
    return FittedNet.from_dict(config, state, "cpu", where=str(ref))


def say(msg: str) -> None:
    """A ``[neurcam]`` line on stdout, secrets redacted: the in-memory entry points' console."""
    print(f"[neurcam] {redact(msg)}", flush=True)


def temp_logs() -> str:
    """Where a command whose output is a dataset puts Ray's lines when given no log folder: a
    folder inside the dataset would be read as data."""
    return os.path.join(tempfile.gettempdir(), "neurcam-logs")


def warn_ids(name: str | None, values, say) -> None:
    """A warning through ``say`` when id column ``name``'s ``values`` repeat or are missing
    (``validation.id_note``); nothing without an id column."""
    from ..validation import id_note
    note = id_note(name, values) if name else None
    if note:
        say(f"warning: {note}")


def one_id(id_column: str | None, no_id: bool) -> None:
    """``--id COLUMN`` and ``--no-id`` together contradict each other: refused."""
    if id_column is not None and no_id:
        raise ConfigError(f"--id {id_column} and --no-id contradict each other: give one of them")


def check_output(output: Location, inputs: list, room: int) -> None:
    """An output folder, before any work: it replaces nothing of another's (nor an input), it can
    be written, and its disk has ``room`` bytes."""
    from ..storage import check_room, check_writable, refuse_overwrite
    refuse_overwrite(output, inputs=inputs)
    check_writable(output, "--output")
    check_room(output, room)


def explained_table(data: str, encoding: str, csv: dict, needed: dict[str, list[str]], named: dict):
    """The columns of ``data`` an explanation reads: each list of ``needed`` (what it is -> its
    columns) and each column of ``named`` (flag -> column or None); ``DataError`` naming any missing."""
    from ..data.tables import read_table, table_columns
    from ..validation import missing_columns_note
    wanted = [c for cols in needed.values() for c in cols] + [c for c in named.values() if c]
    df = read_table(data, encoding, columns=list(dict.fromkeys(wanted)), **csv)
    for what, cols in needed.items():
        missing = [c for c in cols if c not in df.columns]
        if missing:
            names = [str(c) for c in table_columns(data, encoding, **csv)]
            raise DataError(f"{data} lacks {what} {missing}{missing_columns_note(missing, names)}")
    for flag, col in named.items():
        if col and col not in df.columns:
            names = [str(c) for c in table_columns(data, encoding, **csv)]
            raise DataError(f"{data} has no {flag} column {col!r}{missing_columns_note([col], names)}")
    return df


def model_id(est, data: str, encoding: str, csv: dict) -> str | None:
    """The model's id column (``NeurCAM.id_column_``) when ``data`` has it, else None."""
    if est.id_column_ is None:
        return None
    from ..data.tables import table_columns
    return est.id_column_ if est.id_column_ in map(str, table_columns(data, encoding, **csv)) else None


def check_grids(grid_size: int, pair_grid_size: int) -> None:
    """``--grid-size`` and ``--pair-grid-size`` of ``explain`` and ``export``: 2 points at least."""
    for flag, value in (("--grid-size", grid_size), ("--pair-grid-size", pair_grid_size)):
        if value < 2:
            raise ConfigError(f"{flag} must be at least 2 (points along each feature's axis), got {value}")

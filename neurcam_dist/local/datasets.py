"""Data the service makes: term columns and embeddings from documents, example shards, seeded samples."""
from __future__ import annotations

from pathlib import Path

from .common import say, temp_logs
from ..uris import Location, Where


def featurize_text(*, log_dir: Where | None = None, log=None, **job) -> None:
    """Documents to term-frequency columns over a fitted vocabulary (and sentence embeddings with
    ``embed``) on Ray Data, written as Parquet shards with ``_vocabulary.json`` beside them.

    Parameters
    ----------
    log_dir : str or PathLike, optional
        Where Ray's own lines go (default: ``neurcam-logs`` in the system's temporary folder).
    log : callable, optional
        Where the progress lines go (default: the ``[neurcam]`` console).
    **job
        ``text.TextJob``'s fields: ``input`` (CSV or Parquet documents), ``output``,
        ``text_columns``, ``id_column``, ``carry``, ``min_df``, ``max_df``, ``embed``, ``model``...

    Examples
    --------
    >>> import json, tempfile; from pathlib import Path; import pandas as pd; from neurcam_dist import service
    >>> d = Path(tempfile.mkdtemp()); docs = ["cheap flights to rome"] * 20 + ["new phone battery life"] * 20
    >>> pd.DataFrame({"id": range(40), "text": docs}).to_csv(d / "docs.csv", index=False)
    >>> service.featurize_text(input=str(d / "docs.csv"), output=str(d / "terms"), text_columns=["text"],
    ...                        log=lambda line: None)
    >>> json.loads((d / "terms" / "_vocabulary.json").read_text())["dataset"]["rows"]
    40
    """
    from ..distributed.console import stderr_to_log
    from ..distributed.session import ray_for
    from ..text import TextJob
    from ..text import featurize_text as _featurize
    from ..storage import check_writable
    text_job = TextJob(**job)
    check_writable(text_job.output, "--output")
    log = log or say
    with stderr_to_log(Location(log_dir or temp_logs()), "featurize-text", "Ray's", log):
        with ray_for(min_cpus=text_job.concurrency + 1):
            _featurize(text_job, log=log)


def generate(kind: str, output: Where, *, files: int = 4, rows: int = 100_000, features: int = 8, dim: int = 32,
             clusters: int = 4, seed: int = 0) -> list[str]:
    """Example data as Parquet shards in ``output``.

    Parameters
    ----------
    kind : {"digits", "synthetic"}
        scikit-learn's bundled 8x8 digits (with ``label`` and ``id``), or ``rows`` rows of
        ``clusters`` seeded blobs in ``features`` columns plus a ``dim``-wide embedding.
    output : str
        The folder of the shards (``files`` of them).

    Returns
    -------
    list of str
        The files written.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; import pyarrow.parquet as pq; from neurcam_dist import service
    >>> d = Path(tempfile.mkdtemp())
    >>> files = service.generate("synthetic", str(d / "shards"), files=2, rows=1000, features=3, dim=4)
    >>> len(files), pq.read_table(d / "shards").num_rows
    (2, 1000)
    """
    from ..data.bundled import digits_frame, write_frame_shards
    from ..storage import check_room, check_writable
    output = Location(output)   # resolved once: the checks and the shards
    check_writable(output, "--output")
    check_room(output, (rows if kind == "synthetic" else 1797) * 4 * (features + dim + 2 if kind == "synthetic" else 66))
    if kind == "synthetic":
        from ..data.synthetic import write_shards
        return write_shards(output, rows, n_features=features, repr_dim=dim, n_clusters=clusters, n_files=files,
                            seed=seed)
    return write_frame_shards(digits_frame(), output, files)


def sample(input: Where, output: Where, *, per_class: int | None = None, rows: int | None = None, by: str = "label",
           id_column: str = "id", files: int = 4, seed: int = 0, encoding: str = "utf-8", delimiter: str | None = None,
           decimal: str | None = None) -> tuple[int, list[str]]:
    """A seeded sample of a CSV or Parquet table as Parquet shards with an id column.

    Parameters
    ----------
    input, output : str
        The table (a CSV file's format as ``fit`` reads it: ``encoding``, ``delimiter``,
        ``decimal``) and the folder of the ``files`` shards.
    per_class, rows : int, optional
        ``per_class`` rows of each value of ``by``, or ``rows`` in all.
    id_column : str
        The id column of the shards (kept, or numbered from 0 when the table has none).

    Returns
    -------
    tuple of (int, list of str)
        The rows and the files written.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); mixed_table(600, seed=0)[0].to_csv(d / "rows.csv", index=False)
    >>> rows, files = service.sample(str(d / "rows.csv"), str(d / "sample"), per_class=20, by="plan", files=1)
    >>> rows, len(files)
    (60, 1)
    """
    from ..data.bundled import check_sample_size, stratified_sample, write_frame_shards
    from ..data.tables import read_table
    from ..storage import check_writable, refuse_overwrite
    check_sample_size(per_class, rows)   # before anything is read or written
    output = Location(output)   # resolved once: the checks and the shards
    refuse_overwrite(output, inputs=[input])
    check_writable(output, "--output")
    from ..storage import check_room   # shards of at most the input's rows: about its size, twice for safety
    check_room(output, 2 * sum(f.stat().st_size for f in ([Path(input)] if Path(input).is_file()
                                                          else Path(input).rglob("*")) if f.is_file()))
    df = stratified_sample(read_table(input, encoding, delimiter=delimiter, decimal=decimal), per_class=per_class,
                           rows=rows, by=by, id_column=id_column, seed=seed)
    return len(df), write_frame_shards(df, output, files, id_column=id_column)

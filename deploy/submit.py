#!/usr/bin/env python3
"""Submit a bench-build run to a Ray cluster: `ray up` clusters or KubeRay.

    python deploy/submit.py ray-up --source /data/kitti --out s3://bucket/bench [--execute] [--detach]
        prints (or with --execute runs) `ray up` then `ray exec … 'bench-build run … --address auto'`; with
        --detach the build runs in tmux on the head (`ray exec --tmux`), and a dropped SSH connection does not end it;
        a --benchmark recipe file is copied to the head between them (`ray rsync-up`, to ~/bench-build-recipes/)
    python deploy/submit.py kuberay --source /data/kitti --out s3://bucket/bench --image REG/bench-build:0.1.0 \\
        --max-workers 16 | kubectl apply -f -
        prints deploy/kuberay/rayjob.yaml with this run's entrypoint, job name, image, worker-group size and the
        source volume mounted at --source: the template's PVC (kitti-source) for a benchmark that reads KITTI,
        for any other the PVC --source-claim names (required there); a --benchmark recipe file only from that
        volume (the pods get nothing else of this machine)

The run's command is built here from options, never typed into the YAML by hand, so what the cluster
runs is always a command the CLI accepts: more `bench-build run` options after `--` are parsed by the
CLI's own `run` command (bench_build must be importable for them) and refused in one line if it would
not accept them, or if they set what this tool sets itself (tests/deploy checks every rendered command with
typer's test runner). Refused too: a --benchmark that is neither a built-in (or one of its variants) nor a
recipe file (it would fail only once the cluster is up), a run without --source (the demo data it would generate
on the head is not on the other nodes), a --source the cluster's containers do not mount, a config that still
holds the shipped placeholders (YOUR-ORG, fs-EDIT: `ray up --execute`; a RayJob without --image), and --execute
without the `ray` command.
Credentials are never options: a `ray up` cluster uses its nodes' IAM role, KubeRay the Secret the
RayJob names (`bench-build-s3`). Needs the standard library and PyYAML (plus bench_build for extra options).
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
RAY_CLUSTER = DEPLOY / "ray-cluster.yaml"
RAYJOB = DEPLOY / "kuberay" / "rayjob.yaml"
RECIPES = DEPLOY.parent / "manifests" / "recipes"
LOCK = DEPLOY.parent / "manifests" / "lock.txt"
#: where `ray-up` copies a recipe file on the head before the build (`ray rsync-up`): `~` is the home folder in the
#: head's container (Ray's rsync into a docker cluster expands it there; the build's shell expands it too)
HEAD_RECIPES = "~/bench-build-recipes"
#: the RayJob's volume holding the source scans (a read-only PVC), mounted in every pod
SOURCE_VOLUME = "source"
#: the dataset the template's source PVC holds: its claim is the default only for a benchmark that reads it
TEMPLATE_SOURCE = "kitti"
#: KubeRay refuses a RayJob name that is not a DNS-1035 label of at most 47 characters (the RayCluster it
#: creates appends 6; ray-operator/controllers/ray/utils/validation.go, ValidateRayJobMetadata)
MAX_JOB_NAME = 47
#: what the shipped configs hold until a user edits them (the image's registry, the EFS file system): a cluster
#: launched or a RayJob applied with one fails only once its nodes or pods are up
PLACEHOLDERS = ("YOUR-ORG", "fs-EDIT")
JOB_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
#: `bench-build run` parameters this tool sets itself (name: option, why): extra arguments may not set them again
OWNED = {"source": ("--source", "give it as submit.py's --source, before --"),
         "out": ("--out", "give it as submit.py's --out, before --"),
         "address": ("--address", "the job joins the cluster it runs on: --address auto"),
         "progress": ("--progress/--no-progress", "the job's log is a file: --no-progress"),
         "workers": ("--workers", "it sizes a local Ray instance; a cluster's workers are its nodes' CPUs"),
         "profile": ("--profile", "the image has no ~/.aws/config: a cluster's nodes take credentials from their "
                                  "IAM role (ray up) or the Secret bench-build-s3 (KubeRay)")}


class Refused(ValueError):
    """A run this tool will not render: its message is the one line the user sees."""


def run_command(benchmark: str, source: str | None, out: str, extra: list[str] | None = None) -> list[str]:
    """argv of the build the cluster runs: the driver joins the cluster it runs on (`--address auto`)."""
    if not out.startswith("s3://"):
        raise Refused(f"--out must be an s3:// URL on a cluster (every node writes to it), got {out!r}")
    if not source:
        raise Refused("--source is required on a cluster: without it `bench-build run` generates demo data on the "
                      "head node, which no other node sees, and their tasks fail; give the source root as the "
                      "cluster's nodes see it (e.g. /data/kitti)")
    if not posixpath.isabs(source):
        raise Refused(f"--source {source} must be an absolute path, the source root as the cluster's nodes see it "
                      "(e.g. /data/kitti)")
    cmd = ["bench-build", "run", benchmark, "--address", "auto", "--out", out, "--no-progress", "--source", source]
    if extra:
        check_extra(cmd, list(extra))
    return cmd + list(extra or [])


def _run_cli_command():
    """The CLI's `run` command (typer's click command); Refused if bench_build does not import."""
    saved = dict(os.environ)  # importing the CLI sets the numeric pin in this process's environment: not ours
    try:
        import typer.main

        from bench_build.cli import app
    except (ImportError, SystemExit) as e:
        raise Refused(f"extra `bench-build run` arguments are checked against the bench-build CLI, which does not "
                      f"import here ({e}): install this checkout (`pip install -e .`) or leave them out") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    group = typer.main.get_command(app)
    return group.get_command(typer.Context(group), "run")


def check_extra(cmd: list[str], extra: list[str]) -> None:
    """Refuse ``extra`` (more `bench-build run` arguments) unless the CLI's `run` parses ``cmd + extra`` and they
    set nothing ``cmd`` sets: parsed with the command's own parser (click's ``make_context``), never run."""
    import typer

    run = _run_cli_command()
    name = "bench-build run"
    helps = set(run.get_help_option(typer.Context(run)).opts)
    if asked := helps.intersection(extra):
        raise Refused(f"extra argument {sorted(asked)[0]}: not an option to pass on (see `bench-build run --help`)")
    try:
        alone = run.make_context(name, [cmd[2], *extra])  # the extras with only the benchmark: what they set
        run.make_context(name, cmd[2:] + extra)  # and the whole command, as the cluster will run it
    except Exception as e:  # click's UsageError family (typer's own copy of click, or click itself)
        if not hasattr(e, "format_message"):
            raise
        message = e.format_message()
        raise Refused(f"extra arguments {shlex.join(extra)}: `{name}` does not accept them: "
                      f"{' '.join(message.split())}") from None
    for param, (option, why) in OWNED.items():
        source = alone.get_parameter_source(param)
        if source is not None and source.name == "COMMANDLINE":
            raise Refused(f"extra arguments {shlex.join(extra)}: leave out {option} ({why})")


def container_mounts(cluster: dict) -> list[str]:
    """The folders a `ray up` cluster's containers mount (`docker.run_options` -v/--volume/--mount); [] without
    a docker section (the job runs on the nodes' own file system: nothing to check)."""
    out = []
    for option in (cluster.get("docker") or {}).get("run_options") or []:
        argv = shlex.split(str(option))
        for i, arg in enumerate(argv):
            value = None
            if arg in ("-v", "--volume", "--mount") and i + 1 < len(argv):
                value = argv[i + 1] if arg != "--mount" else "--mount=" + argv[i + 1]
            elif arg.startswith(("--volume=", "--mount=")):
                value = arg
            elif arg.startswith("-v") and len(arg) > 2:
                value = arg[2:]
            if value is None:
                continue
            if value.startswith("--mount="):
                fields = dict(f.split("=", 1) for f in value[len("--mount="):].split(",") if "=" in f)
                target = fields.get("target") or fields.get("destination") or fields.get("dst")
            else:
                parts = value.removeprefix("--volume=").split(":")
                target = parts[1] if len(parts) > 1 else parts[0]
            if target and posixpath.isabs(target):
                out.append(posixpath.normpath(target))
    return out


def _under(path: str, folder: str) -> bool:
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def read_cluster(cluster_yaml: Path) -> dict:
    """The `ray up` cluster config, parsed; Refused when it cannot be read or is not a YAML mapping."""
    import yaml

    try:
        cluster = yaml.safe_load(cluster_yaml.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise Refused(f"--cluster {cluster_yaml}: cannot read it as a cluster config ({' '.join(str(e).split())})"
                      ) from None
    if not isinstance(cluster, dict):
        raise Refused(f"--cluster {cluster_yaml}: not a cluster config (a YAML mapping), a {type(cluster).__name__}")
    return cluster


def placeholders(config: object, where: str = "") -> list[str]:
    """The fields of a parsed config whose value still holds one of `PLACEHOLDERS`, as `path (placeholder)`."""
    if isinstance(config, dict):
        return [f for k, v in config.items() for f in placeholders(v, f"{where}.{k}" if where else str(k))]
    if isinstance(config, list):
        return [f for i, v in enumerate(config) for f in placeholders(v, f"{where}[{i}]")]
    return [f"{where} ({p})" for p in PLACEHOLDERS if isinstance(config, str) and p in config]


def check_ray_up_source(source: str, cluster: dict, cluster_yaml: Path) -> None:
    """Refuse a --source the `ray up` cluster's containers do not mount: it would not exist on any node."""
    mounts = container_mounts(cluster)
    if mounts and not any(_under(source, m) for m in mounts):
        raise Refused(f"--source {source} is not in a folder the cluster's containers mount "
                      f"({', '.join(mounts)}, docker.run_options of {cluster_yaml}): put the source there on the "
                      "shared file system, or mount its folder in the cluster config")


def job_name(benchmark: str) -> str:
    """`bench-build-<benchmark>` as a RayJob name KubeRay accepts: a recipe file's stem (and its ``:variant``),
    lower case, other characters as '-', at most 47 characters."""
    spec, variant = _split_variant(benchmark, _builtins())
    stem = posixpath.basename(spec.rstrip("/"))
    stem = (stem[: -len(".toml")] if stem.endswith(".toml") else stem) + (f"-{variant}" if variant else "")
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-") or "run"
    return f"bench-build-{slug}"[:MAX_JOB_NAME].rstrip("-")


def _builtins() -> dict[str, Path]:
    """This checkout's built-in recipes (manifests/recipes/), which the image installs: name → file."""
    return {p.name[: -len(".toml")]: p for p in RECIPES.glob("*.toml")}


def _split_variant(benchmark: str, builtins: dict[str, Path]) -> tuple[str, str | None]:
    """(recipe, variant) of a --benchmark as `load_recipe` splits it: ``kitti-c:text`` → (kitti-c, text); a name
    that is a built-in or an existing file as a whole keeps its ':'."""
    if benchmark not in builtins and not Path(benchmark).exists() and ":" in benchmark:
        spec, variant = benchmark.rsplit(":", 1)
        return spec, variant
    return benchmark, None


def read_benchmark(benchmark: str) -> dict:
    """The recipe `bench-build run BENCHMARK` loads, as parsed TOML: a built-in's (``kitti-c``, or ``kitti-c:text``
    for one of its variants) or a recipe file's, found as the CLI finds them (`load_recipe`,
    manifests/recipe.py). Refused when it is none of these: the cluster would fail only once its nodes are up.
    Read from this checkout's recipes (manifests/recipes/) with tomllib, importing neither bench_build nor Ray."""
    builtins = _builtins()
    spec, variant = _split_variant(benchmark, builtins)
    if spec in builtins:
        path, what = builtins[spec], f"the built-in benchmark {spec}"
    elif spec.endswith(".toml") or Path(spec).exists():
        path, what = Path(spec), f"the recipe file {spec}"
        if not path.is_file():
            raise Refused(f"--benchmark {benchmark}: recipe file {spec} "
                          f"{'is a directory' if path.is_dir() else 'does not exist'}")
    else:
        raise Refused(f"--benchmark {benchmark}: unknown benchmark: not a built-in ({', '.join(sorted(builtins))}) "
                      "nor a recipe .toml file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, or not TOML (TOMLDecodeError is a ValueError)
        raise Refused(f"--benchmark {benchmark}: cannot read {what} as a recipe ({' '.join(str(e).split())})"
                      ) from None
    variants = data.get("variants")
    variants = variants if isinstance(variants, dict) else {}
    if variant is not None and variant not in variants:
        raise Refused(f"--benchmark {benchmark}: {what} has no variant {variant!r} "
                      f"(it has {', '.join(sorted(variants)) or 'none'})")
    return data


def recipe_file(benchmark: str) -> tuple[Path, str] | None:
    """The recipe file on this machine a --benchmark names (`read_benchmark` has read it) and its variant suffix
    (``":fast"``, or ``""``); None for a built-in, which every node's image has."""
    builtins = _builtins()
    spec, variant = _split_variant(benchmark, builtins)
    return None if spec in builtins else (Path(spec), f":{variant}" if variant is not None else "")


def head_recipe(path: Path) -> str:
    """Where `ray-up` copies the recipe file ``path`` on the head (`ray rsync-up`): under `HEAD_RECIPES`, by its file
    name with other characters than letters, digits, '.', '_' and '-' as '-' (Ray's rsync passes the target through
    a shell unquoted)."""
    stem = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
    return f"{HEAD_RECIPES}/{re.sub(r'[^A-Za-z0-9._-]+', '-', stem).strip('-.') or 'recipe'}.toml"


def pod_recipe(benchmark: str, path: Path, variant: str, mount: str) -> str:
    """The path in the RayJob's pods of the recipe file ``path``: its absolute path here, when that is inside the
    source PVC's mount ``mount`` (the volume is mounted at the same path on this machine); else refused, since
    the pods get only the image and the PVC, and the build would fail once they are up."""
    where = posixpath.normpath(os.path.abspath(path))
    if not _under(where, mount):
        raise Refused(f"--benchmark {benchmark}: a recipe file on this machine, which the RayJob's pods never see "
                      f"(they get the image and the source PVC, mounted at {mount}): add it to manifests/recipes/ "
                      "and rebuild the image to run it as a built-in, or put it on the source volume and give its "
                      f"path under {mount}")
    return where + variant


def shell_join(argv: list[str]) -> str:
    """``shlex.join(argv)``, but an argument starting with ``~/`` keeps that prefix unquoted: the shell that runs
    the command on the head expands it to the home folder there (a quoted ``~`` stays a folder named '~')."""
    return " ".join("~/" + shlex.quote(a[2:]) if a.startswith("~/") and a[2:] else shlex.quote(a) for a in argv)


def recipe_source(benchmark: str) -> str | None:
    """The dataset (``[benchmark] source``) a benchmark reads (`read_benchmark`); None when its recipe names none."""
    table = read_benchmark(benchmark).get("benchmark")
    source = table.get("source") if isinstance(table, dict) else None
    return source if isinstance(source, str) else None


def source_claim(benchmark: str, claim: str | None, template: Path = RAYJOB) -> str:
    """The PVC to mount as the source: ``claim`` when given; else the template's, which holds KITTI, for a benchmark
    that reads KITTI; else refused: mounting KITTI's scans for another dataset's build would fail only on the
    cluster, once every pod is up."""
    import yaml

    if claim:
        return claim
    job = yaml.safe_load(template.read_text())
    volumes = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    default = next(v["persistentVolumeClaim"]["claimName"] for v in volumes if v["name"] == SOURCE_VOLUME)
    source = recipe_source(benchmark)
    if source == TEMPLATE_SOURCE:
        return default
    if source is None:
        raise Refused(f"--benchmark {benchmark}: its recipe names no [benchmark] source, so it is not known to read "
                      f"the {TEMPLATE_SOURCE} data of the template's source PVC {default}: name the PVC holding its "
                      "source with --source-claim")
    raise Refused(f"--benchmark {benchmark} reads {source} data, and the template's source PVC {default} holds "
                  f"{TEMPLATE_SOURCE} data: name the PVC holding its source with --source-claim (e.g. --source-claim "
                  f"{source}-source)")


def ray_up_commands(cluster_yaml: Path, command: list[str], detach: bool = False,
                    upload: tuple[str, str] | None = None) -> list[list[str]]:
    """`ray up`, then, with ``upload`` (a recipe file here, its path on the head), `ray rsync-up` of it into the
    head's container, then `ray exec` of the build on the head: in the foreground, where a dropped SSH connection
    ends the build, or with ``detach`` in a tmux session inside the head's container (`ray exec --tmux`), where it
    goes on and `ray exec` returns at once."""
    return [["ray", "up", "-y", str(cluster_yaml)],
            *([["ray", "rsync-up", str(cluster_yaml), *upload]] if upload else []),
            ["ray", "exec", str(cluster_yaml), shell_join(command), *(["--tmux"] if detach else [])]]


def status_command(command: list[str]) -> list[str]:
    """The `bench-build status` of the build ``command`` runs (`run_command`): its benchmark, its --out and, if it
    has one, its --endpoint-url."""
    status = ["bench-build", "status", command[2], "--out", command[command.index("--out") + 1]]
    for i, arg in enumerate(command):
        if arg == "--endpoint-url" and i + 1 < len(command):
            status += [arg, command[i + 1]]
        elif arg.startswith("--endpoint-url="):
            status.append(arg)
    return status


def detached_notes(cluster_yaml: Path, command: list[str]) -> list[str]:
    """What to run once a detached build has started (shell comments: printed commands stay safe to pipe to sh)."""
    return ["# detached: the build runs in tmux in the head's container and goes on if this connection drops",
            f"#   its output (Ctrl-b d detaches again):  {shlex.join(['ray', 'attach', str(cluster_yaml), '--tmux'])}",
            "#   its progress (done, failed, pending):  "
            f"{shlex.join(['ray', 'exec', str(cluster_yaml), shell_join(status_command(command))])}"]


def launcher_missing() -> str:
    """Why --execute cannot run here: no `ray` command; the install line names the image's Ray (the lock's)."""
    try:
        version = re.search(r"^ray==(\S+)", LOCK.read_text(), re.M)
    except OSError:
        version = None
    ray = f"ray[default]=={version.group(1)}" if version else "ray[default]"
    return ("--execute runs `ray up` and `ray exec`, and there is no `ray` command on PATH: install Ray's cluster "
            f"launcher with the AWS client (pip install '{ray}' boto3), or leave out --execute to print the commands")


def execute(commands: list[list[str]]) -> int:
    """Run ``commands`` in turn, each printed first; the first that fails ends it, in one line on stderr, and its
    exit status is returned (Ray 2.60's `ray exec` exits 1 when the build does, whatever the build's status)."""
    for cmd in commands:
        print(shlex.join(cmd), flush=True)
        what = f"`{shlex.join(cmd[:2])} …`"
        try:
            code = subprocess.run(cmd).returncode
        except KeyboardInterrupt:
            print(f"error: interrupted during {what}", file=sys.stderr)
            return 130
        if code < 0:  # killed by a signal: the shell's status for it, 128 + its number
            print(f"error: {what} was killed by {signal.Signals(-code).name}", file=sys.stderr)
            return 128 - code
        if code:
            print(f"error: {what} exited with status {code}", file=sys.stderr)
            return code
    return 0


def pod_specs(job: dict) -> list[dict]:
    """The pod specs of a RayJob's Ray cluster: the head's, then each worker group's."""
    cluster = job["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    return [t["spec"] for t in templates]


def render_rayjob(command: list[str], *, image: str | None = None, max_workers: int | None = None,
                  name: str | None = None, source_mount: str | None = None, source_claim: str | None = None,
                  template: Path = RAYJOB) -> dict:
    """The RayJob of ``template`` with this run's entrypoint (and image / worker-group size / name), its source
    volume mounted at ``source_mount`` (the PVC ``source_claim``) in every pod."""
    import yaml

    job = yaml.safe_load(template.read_text())
    job["spec"]["entrypoint"] = shlex.join(command)
    if name:
        if len(name) > MAX_JOB_NAME or not JOB_NAME.fullmatch(name):
            raise Refused(f"--name {name}: KubeRay accepts a RayJob name of at most {MAX_JOB_NAME} characters: "
                          "lower-case letters, digits and '-', starting with a letter and not ending with '-'")
        job["metadata"]["name"] = name
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        for c in pod["spec"]["containers"]:
            if image:
                c["image"] = image
            for m in c.get("volumeMounts", []):
                if m["name"] == SOURCE_VOLUME and source_mount:
                    m["mountPath"] = posixpath.normpath(source_mount)
        for v in pod["spec"].get("volumes", []):
            if v["name"] == SOURCE_VOLUME and source_claim:
                v["persistentVolumeClaim"]["claimName"] = source_claim
    if max_workers is not None:
        if max_workers < 1:  # the head has no task CPUs: with no worker pod the build's tasks wait for ever
            raise Refused(f"--max-workers {max_workers}: give at least 1 worker pod (the head runs no tasks: "
                          "num-cpus 0)")
        group = cluster["workerGroupSpecs"][0]
        group["maxReplicas"] = max_workers
        group["replicas"] = min(group["replicas"], max_workers)
        group["minReplicas"] = min(group["minReplicas"], max_workers)
    return job


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="target", required=True)
    for target in ("ray-up", "kuberay"):
        s = sub.add_parser(target)
        s.add_argument("--benchmark", default="kitti-c")
        s.add_argument("--source", help="source root as the cluster's nodes see it (required; e.g. /data/kitti)")
        s.add_argument("--out", required=True, help="s3://bucket/prefix")
        s.add_argument("extra", nargs="*", help="more `bench-build run` options, after --")
    up = sub.choices["ray-up"]
    up.add_argument("--cluster", type=Path, default=RAY_CLUSTER)
    up.add_argument("--execute", action="store_true", help="run the commands instead of printing them")
    up.add_argument("--detach", action="store_true",
                    help="run the build in tmux on the head (`ray exec --tmux`): it goes on if your SSH connection "
                         "drops, and `ray exec` returns once it has started; `ray attach CLUSTER --tmux` shows it")
    kr = sub.choices["kuberay"]
    kr.add_argument("--image")
    kr.add_argument("--max-workers", type=int, help="worker pods at most (16 CPUs each)")
    kr.add_argument("--name", help="the RayJob's name (default: bench-build-BENCHMARK)")
    kr.add_argument("--source-claim", help="the PVC holding the source (default: the template's, kitti-source, "
                                           "for a benchmark that reads KITTI; required for any other)")
    kr.add_argument("--source-mount", help="where the PVC is mounted in every pod (default: --source; "
                                           "--source must be in it)")
    args = p.parse_args(argv)
    try:
        read_benchmark(args.benchmark)  # an unknown benchmark fails here, not once the cluster's nodes are up
        command = run_command(args.benchmark, args.source, args.out, args.extra)
        local = recipe_file(args.benchmark)  # a recipe file here: the cluster's nodes have only the built-ins
        upload = None
        if args.target == "ray-up":
            cluster = read_cluster(args.cluster)
            check_ray_up_source(args.source, cluster, args.cluster)
            if args.execute and (left := placeholders(cluster)):
                raise Refused(f"--cluster {args.cluster} still holds the shipped placeholders: {', '.join(left)}; "
                              "edit the lines marked EDIT before `ray up` launches instances for it")
            if args.execute and shutil.which("ray") is None:
                raise Refused(launcher_missing())
            if local:  # copied to the head (`ray rsync-up`), and the build names it there
                upload = (str(local[0]), head_recipe(local[0]))
                command[2] = upload[1] + local[1]
        else:
            mount = args.source_mount or args.source
            if not posixpath.isabs(mount):
                raise Refused(f"--source-mount {mount} must be an absolute path")
            if not _under(args.source, mount):
                raise Refused(f"--source {args.source} is not in the folder the source PVC is mounted at "
                              f"(--source-mount {mount}): give a --source in it, or leave --source-mount out to mount "
                              "the PVC at --source")
            claim = source_claim(args.benchmark, args.source_claim)
            if local:  # the pods see it only on the source volume
                command[2] = pod_recipe(args.benchmark, *local, posixpath.normpath(mount))
            job = render_rayjob(command, image=args.image, max_workers=args.max_workers,
                                name=args.name or job_name(args.benchmark), source_mount=mount, source_claim=claim)
            if images := sorted({c["image"] for pod in pod_specs(job) for c in pod["containers"]
                                 if any(p in c["image"] for p in PLACEHOLDERS)}):
                said = (f"--image {args.image} is" if args.image else
                        f"--image is required: the template's image {images[0]} is")
                raise Refused(f"{said} a placeholder no registry has, whose pods would wait for ever to pull it; "
                              "push the image built from deploy/Dockerfile and name it with --image")
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.target == "ray-up":
        commands = ray_up_commands(args.cluster, command, detach=args.detach, upload=upload)
        if args.execute:
            code = execute(commands)
        else:
            code = 0
            for cmd in commands:
                print(shlex.join(cmd))
        if args.detach and not code:
            print("\n".join(detached_notes(args.cluster, command)))
        return code
    import yaml

    sys.stdout.write(yaml.safe_dump(job, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Submit a bench-build run to a Ray cluster: `ray up` clusters or KubeRay (standard library + PyYAML only).

    python deploy/submit.py ray-up --source /data/kitti --out s3://bucket/bench [--execute]
        prints (or with --execute runs) `ray up` then `ray exec … 'bench-build run … --address auto'`
    python deploy/submit.py kuberay --source /data/kitti --out s3://bucket/bench --image REG/bench-build:0.1.0 \
        --max-workers 16 | kubectl apply -f -
        prints deploy/kuberay/rayjob.yaml with this run's entrypoint, image and worker-group size

The run's command is built here from options, never typed into the YAML by hand, so what the cluster
runs is always a command the CLI accepts (tests/deploy checks it with typer's test runner).
Credentials are never options: a `ray up` cluster uses its nodes' IAM role, KubeRay the Secret the
RayJob names (`bench-build-s3`).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
RAY_CLUSTER = DEPLOY / "ray-cluster.yaml"
RAYJOB = DEPLOY / "kuberay" / "rayjob.yaml"


def run_command(benchmark: str, source: str | None, out: str, extra: list[str] | None = None) -> list[str]:
    """argv of the build the cluster runs: the driver joins the cluster it runs on (`--address auto`)."""
    if not out.startswith("s3://"):
        raise ValueError(f"--out must be an s3:// URL on a cluster (every node writes to it), got {out!r}")
    cmd = ["bench-build", "run", benchmark, "--address", "auto", "--out", out, "--no-progress"]
    if source:
        cmd += ["--source", source]
    return cmd + list(extra or [])


def ray_up_commands(cluster_yaml: Path, command: list[str]) -> list[list[str]]:
    return [["ray", "up", "-y", str(cluster_yaml)], ["ray", "exec", str(cluster_yaml), shlex.join(command)]]


def render_rayjob(command: list[str], *, image: str | None = None, max_workers: int | None = None,
                  name: str | None = None, template: Path = RAYJOB) -> dict:
    """The RayJob of ``template`` with this run's entrypoint (and image / worker-group size / name)."""
    import yaml

    job = yaml.safe_load(template.read_text())
    job["spec"]["entrypoint"] = shlex.join(command)
    if name:
        job["metadata"]["name"] = name
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        for c in pod["spec"]["containers"]:
            if image:
                c["image"] = image
    if max_workers is not None:
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
        s.add_argument("--source", help="source root as the cluster's nodes see it (e.g. /data/kitti)")
        s.add_argument("--out", required=True, help="s3://bucket/prefix")
        s.add_argument("extra", nargs="*", help="more `bench-build run` options, after --")
    up = sub.choices["ray-up"]
    up.add_argument("--cluster", type=Path, default=RAY_CLUSTER)
    up.add_argument("--execute", action="store_true", help="run the commands instead of printing them")
    kr = sub.choices["kuberay"]
    kr.add_argument("--image")
    kr.add_argument("--max-workers", type=int, help="worker pods at most (16 CPUs each)")
    kr.add_argument("--name")
    args = p.parse_args(argv)
    try:
        command = run_command(args.benchmark, args.source, args.out, args.extra)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.target == "ray-up":
        for cmd in ray_up_commands(args.cluster, command):
            print(shlex.join(cmd))
            if args.execute:
                subprocess.run(cmd, check=True)
        return 0
    import yaml

    sys.stdout.write(yaml.safe_dump(render_rayjob(command, image=args.image, max_workers=args.max_workers,
                                                  name=args.name), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

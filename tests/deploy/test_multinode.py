"""A real multi-node Ray cluster on this machine: a head and a worker node as separate `ray start` processes
on loopback, `bench-build run --address` over them, and the worker node's raylet SIGKILLed mid-build.

The run must still complete (Ray retries the killed node's tasks on the head), and its Parquet bytes and
manifest must equal a single-node build — on local disk and on `s3://` (SeaweedFS). Nothing may be left
half-written or duplicated. The cluster lives on 127.0.0.2: in multi-node mode
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``) Ray replaces 127.0.0.1 with the host's interface address, and
these tests stay on loopback. Only processes this module started are stopped, by process group — never
`ray stop`, which would stop every Ray instance on the machine.

A worker node started in its own mount namespace (an empty tmpfs over the output folder) stands for a machine
that does not see the driver's disk: a local --out on a cluster of several machines.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench_build.build.run import run_build
from bench_build.manifests.manifest import read_manifest, stable_view, verify_version
from bench_build.storage import open_store
from tests.conftest import SMALL_RECIPE

HOST = "127.0.0.2"
FRAMES = 6  # 6 shards of 1 frame × 21 partitions = 126 Parquet files
START_TIMEOUT = 90.0
RUN_TIMEOUT = 240.0
RAY_CLI = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def _ephemeral_range() -> range:
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return range(lo, hi + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


_RNG = random.Random()  # the ports only need to be free, not reproducible


def _free_port() -> int:
    """A port no loopback socket holds, outside the kernel's ephemeral range: a port the kernel hands out for
    ``bind(0)`` can be taken again, between this probe and Ray's bind, by one of the many outgoing connections
    Ray and the S3 clients open, and Ray binds some ports on every address, not just 127.0.0.2."""
    ephemeral = _ephemeral_range()
    for _ in range(1000):
        port = _RNG.randrange(20000, 32768)
        if port in ephemeral:
            continue
        try:
            for host in (HOST, "127.0.0.1"):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port outside the ephemeral range on loopback")


def _ray_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.update(extra or {})
    return env


def _node_ports() -> list[str]:
    """Every fixed port a Ray node opens, chosen free, so other Ray instances on the machine never collide."""
    names = ("node-manager-port", "object-manager-port", "runtime-env-agent-port", "dashboard-agent-grpc-port",
             "dashboard-agent-listen-port", "metrics-export-port")
    return [f"--{n}={_free_port()}" for n in names]


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid → (parent pid, process group, command line) of every live process."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(d.name)] = (int(fields[1]), int(fields[2]),
                                (d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return out


def _group_pids(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process in process group ``pgid``."""
    return [(pid, cmd) for pid, (_, group, cmd) in _processes().items() if group == pgid]


def _descendants(root: int, procs: dict[int, tuple[int, int, str]] | None = None) -> set[int]:
    """Every descendant of ``root``, in ``procs`` (a `_processes` snapshot; taken now if not given)."""
    procs, found, frontier = _processes() if procs is None else procs, set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in procs.items() if ppid in frontier} - found
        found |= frontier
    return found


class NodeStartError(RuntimeError):
    pass


def _session_logs(temp_dir: Path, patterns: tuple[str, ...] = ("raylet*.out", "raylet*.err", "gcs_server.out"),
                  tail: int = 1500) -> str:
    """The tails of the cluster's raylet and GCS logs, for a start-up failure's message."""
    logs = temp_dir / "session_latest" / "logs"
    files = sorted({p for pat in patterns for p in logs.glob(pat)}) if logs.is_dir() else []
    return "".join(f"\n--- {p.name} ---\n{p.read_text(errors='replace')[-tail:]}" for p in files)


@dataclass
class RayNode:
    proc: subprocess.Popen
    log: Path
    temp_dir: Path  # the cluster's (a worker node writes its logs into the head's session directory)

    def wait_started(self) -> None:
        """Return once `ray start` says the node runs; NodeStartError (with Ray's logs) if it exits or hangs."""
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline:
            if "Ray runtime started" in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise NodeStartError(f"ray start exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}"
                                     f"{_session_logs(self.temp_dir)}")
            time.sleep(0.2)
        raise NodeStartError(f"Ray node did not start in {START_TIMEOUT:.0f} s:\n{self.log.read_text()[-3000:]}"
                             f"{_session_logs(self.temp_dir)}")

    def raylet_pid(self) -> int:
        pids = [pid for pid, cmd in _group_pids(self.proc.pid) if "/raylet " in cmd or cmd.startswith("raylet")
                or "core/src/ray/raylet/raylet" in cmd]
        assert len(pids) == 1, _group_pids(self.proc.pid)
        return pids[0]

    def stop(self) -> None:
        """SIGKILL this node's `ray start --block` and everything in its process group (only ours)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def _start_node(args: list[str], log: Path, env: dict[str, str], temp_dir: Path,
                wrap: tuple[str, ...] = ()) -> RayNode:
    """``wrap``: a command line that runs the node's `ray start` (its arguments follow)."""
    with open(log, "wb") as f:
        proc = subprocess.Popen([*wrap, *RAY_CLI, "start", "--block", f"--node-ip-address={HOST}", "--num-cpus=1",
                                 "--disable-usage-stats", *_node_ports(), *args],
                                stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return RayNode(proc, log, temp_dir)


@dataclass
class Head:
    address: str
    node: RayNode
    temp_dir: Path
    env: dict[str, str]
    logs: Path


@pytest.fixture(scope="module")
def head(seaweed, tmp_path_factory) -> Iterator[Head]:
    """A one-CPU Ray head on 127.0.0.2; its workers reach the test's SeaweedFS through the AWS env chain."""
    logs = tmp_path_factory.mktemp("raylogs")
    temp_dir = Path(tempfile.mkdtemp(prefix="rmn", dir="/tmp"))  # Ray's socket paths must stay short
    env = _ray_env(seaweed.env())
    port = _free_port()
    node = _start_node(["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false"],
                       logs / "head.log", env, temp_dir)
    try:
        node.wait_started()
        yield Head(f"{HOST}:{port}", node, temp_dir, env, logs)
    finally:
        node.stop()
        leftovers = subprocess.run(["pgrep", "-f", str(temp_dir)], capture_output=True, text=True).stdout.split()
        for pid in leftovers:  # any process of this cluster that left its process group (none expected)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Ray's own logs outlive the cluster in pytest's kept temp dirs (the last three sessions), for diagnosis
        session_logs = temp_dir / "session_latest" / "logs"
        if session_logs.is_dir():
            shutil.copytree(session_logs, logs / "session", dirs_exist_ok=True, ignore_dangling_symlinks=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not leftovers, f"Ray processes outlived the cluster: {leftovers}"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("recipe") / "mini-c.toml"
    path.write_text(SMALL_RECIPE)
    return path


@pytest.fixture(scope="module")
def single_node(head, recipe, demo_kitti_master, tmp_path_factory) -> Path:
    """The reference: the same build on the head alone (one node), before any worker node joins."""
    import ray

    res = run_build(str(recipe), source=str(demo_kitti_master), out=tmp_path_factory.mktemp("single"),
                    address=head.address, max_frames=FRAMES, frames_per_shard=1, progress=False)
    assert res.ok and not ray.is_initialized()
    return res.version_dir


def data_files(version_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(version_dir).as_posix(): p.read_bytes()
            for p in sorted(version_dir.rglob("*.parquet")) if "_ledger" not in p.parts}


def _join_worker_node(head: Head, name: str, attempts: int = 2, wrap: tuple[str, ...] = ()) -> RayNode:
    """`ray start --address` a worker node into ``head``'s cluster; started again (fresh ports) if it fails.

    A joining node has a fixed 30 s in Ray (not configurable) for its raylet to register with the GCS; on a
    2-core CI machine busy with another job that deadline was missed once ("Failed to get node info: Deadline
    Exceeded"), which says nothing about the build under test. A second failure fails the test with both."""
    errors = []
    for attempt in range(1, attempts + 1):
        worker = _start_node([f"--address={head.address}"], head.logs / f"{name}-worker-{attempt}.log", head.env,
                             head.temp_dir, wrap)
        try:
            worker.wait_started()
            return worker
        except NodeStartError as e:
            worker.stop()
            errors.append(f"attempt {attempt}: {e}")
    pytest.fail("the worker node did not join the cluster:\n" + "\n".join(errors))


def _build_killing_the_worker_node(head: Head, recipe: Path, source: Path, out: str, done_shards, name: str) -> dict:
    """Join a worker node, run `bench-build run --address` over both nodes, and SIGKILL the worker node's
    raylet as soon as the ledger holds a shard built by one of that node's worker processes (so the node
    demonstrably takes part, and the build is mid-way); return what happened.

    Until then the head's Ray workers are held with SIGSTOP (then SIGCONT): left running, the head's warm
    worker could build every shard (≈ 0.3 s each) while the worker node's first, cold one was still importing
    on a loaded 2-core machine, and the kill would land after the build (seen under load: the head built 5 of
    6 shards before the node's first). Held, the head runs tasks only after the kill — its share of the
    build, and the retries of whatever the dead node held — so the kill is always mid-build.

    ``done_shards()`` → {shard name: pid of the Ray worker that recorded it} from the ledger."""
    worker = _join_worker_node(head, name)
    driver, held = None, set()
    head_raylet = head.node.raylet_pid()
    try:
        raylet = worker.raylet_pid()
        driver_log = head.logs / f"{name}-driver.log"
        with open(driver_log, "wb") as f:
            driver = subprocess.Popen(
                [sys.executable, "-m", "bench_build.cli", "run", str(recipe), "--address", head.address, "--source",
                 str(source), "--out", out, "--max-frames", str(FRAMES), "--frames-per-shard", "1",
                 "--no-progress"], stdout=f, stderr=subprocess.STDOUT, env=head.env, start_new_session=True)
        deadline = time.time() + RUN_TIMEOUT
        node_pids: set[int] = set()
        done_at_kill: dict[str, int] = {}
        t0, timeline = time.time(), []  # (s, worker node's processes, {shard: pid}), at each change
        while time.time() < deadline:
            assert driver.poll() is None, driver_log.read_text()[-3000:]
            procs = _processes()  # one /proc scan per poll: under load the poll is what must stay quick
            _hold_ray_workers(head_raylet, held, procs)
            node_pids |= _descendants(raylet, procs)  # the worker node's Ray workers so far
            done_at_kill = done_shards()
            state = (sorted(node_pids), sorted(done_at_kill.items()))
            if not timeline or timeline[-1][1:] != state:
                timeline.append((round(time.time() - t0, 2), *state))
            if node_pids & set(done_at_kill.values()):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the worker node never built a shard: {timeline}\n{driver_log.read_text()[-3000:]}")
        os.kill(raylet, signal.SIGKILL)  # the worker node dies: its raylet, and with it its running tasks
        timeline.append(("head workers held", sorted(held)))
        _release(held)
        rc = driver.wait(timeout=max(1.0, deadline - time.time()))
        return {"rc": rc, "log": driver_log.read_text(), "done_at_kill": done_at_kill, "timeline": timeline,
                "raylet_alive": Path(f"/proc/{raylet}").exists() and "zombie" not in _state(raylet)}
    finally:
        _release(held)
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
        worker.stop()


def _hold_ray_workers(raylet: int, held: set[int], procs: dict[int, tuple[int, int, str]]) -> None:
    """SIGSTOP every Ray worker process of ``raylet`` (its descendants titled ``ray::…`` or running
    ``default_worker.py``; not its agents) not held yet."""
    for pid in _descendants(raylet, procs) - held:
        cmd = procs[pid][2]
        if cmd.startswith("ray::") or "default_worker.py" in cmd:
            try:
                os.kill(pid, signal.SIGSTOP)
                held.add(pid)
            except ProcessLookupError:
                pass


def _release(held: set[int]) -> None:
    for pid in held:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    held.clear()


def _state(pid: int) -> str:
    try:
        return "zombie" if (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z" else "alive"
    except OSError:
        return "gone"


def test_worker_node_killed_mid_build_local_disk(head, recipe, single_node, demo_kitti_master, tmp_path):
    out = tmp_path / "multi"
    version_dir = out / "mini-c" / "0.1.0"
    ledger = version_dir / "_ledger" / "shards"

    def done_shards() -> dict[str, int]:
        out = {}
        for p in ledger.glob("part-*.json") if ledger.is_dir() else []:
            if not p.name.endswith(".failed.json"):
                try:
                    out[p.stem] = json.loads(p.read_text())["pid"]
                except (OSError, ValueError):  # being replaced right now: read it on the next poll
                    pass
        return out

    r = _build_killing_the_worker_node(head, recipe, demo_kitti_master, str(out), done_shards, "local")
    assert r["rc"] == 0, r["log"][-3000:]
    assert 1 <= len(r["done_at_kill"]) < FRAMES, f"the kill must land mid-build: {r['timeline']}"
    assert not r["raylet_alive"]
    assert data_files(version_dir) == data_files(single_node)
    manifest = read_manifest(version_dir)
    assert stable_view(manifest) == stable_view(read_manifest(single_node))
    paths = [s["path"] for s in manifest["shards"]]
    assert len(paths) == len(set(paths)) == FRAMES * 21  # nothing duplicated …
    # … nothing half-written under a final name. A worker of the killed node may have left a temp file
    # (its retry elsewhere cannot delete a temp whose owner still lived): its owner is dead, and the
    # dead-owner sweep every `run` starts with removes it
    temps = [p for p in version_dir.rglob("*") if p.name.endswith(".tmp")]
    assert all(p.name.startswith(".part-") for p in temps), temps
    assert open_store(version_dir).remove_dead_temps() == len(temps)
    assert not [p for p in version_dir.rglob("*") if p.name.endswith(".tmp")]
    assert len(done_shards()) == FRAMES and verify_version(version_dir).ok
    _assert_summary_is_the_ledger(r["log"], len(done_shards()))


def _assert_summary_is_the_ledger(log: str, done: int) -> None:
    """The driver's summary counts what the ledger holds: the shards the dead node's workers had recorded and
    those Ray retried on the head are all built, none failed (the defect was "0 built, 4 failed")."""
    assert f"{FRAMES} shards: 0 already done, {done} built, 0 failed" in log, log[-3000:]
    assert not [ln for ln in log.splitlines() if ln.startswith("FAILED ")], log[-3000:]


def test_worker_node_killed_mid_build_s3(head, recipe, single_node, demo_kitti_master, seaweed):
    import uuid

    client = seaweed.client()
    prefix = f"t-mn-{uuid.uuid4().hex[:10]}"
    version = f"{prefix}/mini-c/0.1.0"

    def keys() -> list[str]:
        out = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=seaweed.bucket, Prefix=version + "/"):
            out += [o["Key"][len(version) + 1:] for o in page.get("Contents", [])]
        return out

    def done_shards() -> dict[str, int]:
        return {k: json.loads(client.get_object(Bucket=seaweed.bucket, Key=f"{version}/{k}")["Body"].read())["pid"]
                for k in keys() if k.startswith("_ledger/shards/part-") and not k.endswith(".failed.json")}

    r = _build_killing_the_worker_node(head, recipe, demo_kitti_master, f"s3://{seaweed.bucket}/{prefix}",
                                       done_shards, "s3")
    assert r["rc"] == 0, r["log"][-3000:]
    assert 1 <= len(r["done_at_kill"]) < FRAMES, f"the kill must land mid-build: {r['timeline']}"
    assert not r["raylet_alive"]
    objects = {k: client.get_object(Bucket=seaweed.bucket, Key=f"{version}/{k}")["Body"].read() for k in keys()}
    assert {k: v for k, v in objects.items() if k.endswith(".parquet")} == data_files(single_node)
    manifest = json.loads(objects["manifest.json"])
    assert stable_view(manifest) == stable_view(read_manifest(single_node))
    paths = [s["path"] for s in manifest["shards"]]
    assert len(paths) == len(set(paths)) == FRAMES * 21
    assert len(done_shards()) == FRAMES
    _assert_summary_is_the_ledger(r["log"], len(done_shards()))


def test_a_node_without_the_local_out_fails_its_tasks_naming_the_folder_and_the_node(head, recipe, single_node,
                                                                                     demo_kitti_master, tmp_path):
    """A cluster of machines with separate disks and a local --out. The worker node runs in its own mount
    namespace, where the output folder is an empty tmpfs: a second machine that does not see the driver's disk.
    Its tasks fail their shards naming the folder and the node (not "superseded"), write nothing there, and the
    driver records them; the head builds the rest, and the same command resumes them once the node is gone."""
    from bench_build.build.ledger import Ledger

    out = tmp_path / "out"
    out.mkdir()
    if subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("no mount namespaces here")
    wrap = ("unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"', str(out))
    worker = _join_worker_node(head, "no-out", wrap=wrap)
    args = [sys.executable, "-m", "bench_build.cli", "run", str(recipe), "--address", head.address, "--source",
            str(demo_kitti_master), "--out", str(out), "--max-frames", str(FRAMES), "--frames-per-shard", "1",
            "--no-progress"]
    try:
        run = subprocess.run(args, capture_output=True, text=True, env=head.env, timeout=RUN_TIMEOUT)
        node_view = Path(f"/proc/{worker.raylet_pid()}/root") / out.relative_to("/")
        written_there = sorted(p.name for p in node_view.rglob("*"))
    finally:
        worker.stop()
    version_dir = out / "mini-c" / "0.1.0"
    message = (f"--out {version_dir} does not exist on node {socket.gethostname()}: on a Ray cluster of several "
               "machines, --out must be a folder every node sees (a shared file system) or an s3:// URL")
    log = run.stdout + run.stderr
    failed = [ln for ln in log.splitlines() if ln.startswith("FAILED ")]
    assert run.returncode == 1 and failed, log[-3000:]
    assert all(ln.endswith(f": {message}") for ln in failed), failed
    assert "superseded" not in log
    assert written_there == []  # the node's own disk: nothing created under the folder it lacks
    ledger = Ledger(open_store(version_dir))
    names = [ln.split()[1].rstrip(":") for ln in failed]
    assert all(ledger.failed_entry(n)["error"] == message for n in names)
    # the head alone (the node has left) builds what the node could not, and the bytes are the single-node build's
    again = subprocess.run(args, capture_output=True, text=True, env=head.env, timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{FRAMES} shards: {FRAMES - len(failed)} already done, {len(failed)} built, 0 failed" in \
        again.stdout + again.stderr
    assert data_files(version_dir) == data_files(single_node)

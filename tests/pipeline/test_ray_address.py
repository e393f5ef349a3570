"""`run --address` joins an existing Ray cluster instead of starting one."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ray.experimental.internal_kv import _internal_kv_list

from bench_build.build.progress import ProgressBoard
from bench_build.build.run import run_build
from bench_build.runtime.ray import PROGRESS_NAMESPACE, stop_ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head started like a user would (`ray start --head --block`), stopped by killing only it.

    (`ray stop` would stop every Ray instance on the machine.) The temp dir is short because Ray's
    Unix socket paths must stay under ~107 characters.
    """
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        ray_bin = Path(shutil.which("ray") or "ray")
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="rayh", dir="/tmp")
    cmd = [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
           "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "ray start --head exited"
            time.sleep(0.2)
        else:
            pytest.fail("Ray head did not come up")
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # `ray start --block` and every process of its cluster
        proc.wait(timeout=30)
        leftovers = subprocess.run(["pgrep", "-f", tmp], capture_output=True, text=True).stdout.split()
        for pid in leftovers:  # anything that left the process group (none expected)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
        assert not leftovers, f"Ray processes outlived their head: {leftovers}"


def test_build_on_an_existing_cluster_matches_a_local_build(ray_head, small_recipe, demo_kitti, tmp_path,
                                                            monkeypatch):
    """Relative --source and --out name the driver's directories: the cluster's workers run elsewhere."""
    import ray

    monkeypatch.chdir(tmp_path)
    joined = run_build(str(small_recipe), source=demo_kitti.name, out="joined", address=ray_head,
                       max_frames=2, frames_per_shard=1, progress=True)
    assert joined.ok, joined.failures
    assert not ray.is_initialized()  # the driver disconnected; the cluster keeps running
    assert (tmp_path / "joined" / "mini-c" / "0.1.0" / "manifest.json").is_file()
    ray.init(address=ray_head, include_dashboard=False, configure_logging=False)
    try:  # the progress its tasks wrote to the cluster's key-value store went with the run
        assert _internal_kv_list("", namespace=PROGRESS_NAMESPACE) == []
    finally:
        ray.shutdown()
    local = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "local", workers=1,
                      max_frames=2, frames_per_shard=1, progress=False)
    a = {p.relative_to(joined.version_dir): p.read_bytes() for p in joined.version_dir.rglob("*.parquet")}
    b = {p.relative_to(local.version_dir): p.read_bytes() for p in local.version_dir.rglob("*.parquet")}
    assert a == b and len(a) == 2 * 21


def _report(board: ProgressBoard) -> int:
    board.start("part-a")
    board.add("part-a", 2)  # within INTERVAL_S of the start: kept in the task, not sent
    time.sleep(board.INTERVAL_S + 0.1)
    board.add("part-a", 3)  # sent: 5
    board.add("part-a", 4)  # not sent
    return os.getpid()


def test_progress_board_carries_running_counts_through_the_cluster_and_is_cleared(ray_head):
    """Tasks' progress goes through the GCS key-value store, not an actor: the driver reads the running tasks'
    counts in one request, a shard not started is absent, and `clear` removes the run's keys (a cluster keeps
    its GCS after the build). `stop_ray` only disconnects from a cluster this process joined."""
    import ray

    ray.init(address=ray_head, include_dashboard=False, configure_logging=False)
    try:
        board, other = ProgressBoard("run1"), ProgressBoard("run2")
        pid = ray.get(ray.remote(num_cpus=1)(_report).remote(board))
        assert pid != os.getpid()
        ray.get(ray.remote(num_cpus=1)(_report).remote(other))
        assert board.snapshot(["part-a", "part-b"]) == {"part-a": 5}
        board.clear()
        assert board.snapshot(["part-a"]) == {} and other.snapshot(["part-a"]) == {"part-a": 5}
        other.clear()
        assert _internal_kv_list("", namespace=PROGRESS_NAMESPACE) == []
    finally:
        stop_ray()
    assert not ray.is_initialized()
    ray.init(address=ray_head, include_dashboard=False, configure_logging=False)  # the cluster still runs
    ray.shutdown()


def test_a_worker_whose_node_lacks_the_local_out_or_source_says_so_and_writes_nothing(small_recipe, demo_kitti,
                                                                                       tmp_path, monkeypatch):
    """On a cluster of several machines, a local --out or --source that only the driver's machine has: the task
    names the folder, the node and what to use instead (not "superseded", not a bad scan), and creates nothing on
    the node's own disk, and asks the driver to record the failure (tests/deploy/test_multinode.py: end to end)."""
    from bench_build.build.task import run_shard
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import BlockSpec
    from bench_build.sources import KittiSource
    from bench_build.storage import open_store

    src = KittiSource(demo_kitti)
    spec = BlockSpec(0, 1, tuple(src.list_frames()[:1]))
    store = open_store(tmp_path / "out" / "mini-c" / "0.1.0")  # the driver's folder: not on "this node"
    owner = {"id": "run-lock", "host": "driver-host", "pid": 1}
    res = run_shard(spec, load_recipe(str(small_recipe)), src, store.spec, "f" * 64, "run1", owner=owner)
    assert not res["ok"] and res["kind"] == "resource" and res["record"]
    assert res["error"] == (f"--out {tmp_path / 'out' / 'mini-c' / '0.1.0'} does not exist on node "
                            f"{socket.gethostname()}: on a Ray cluster of several machines, --out must be a folder "
                            "every node sees (a shared file system) or an s3:// URL")
    assert not (tmp_path / "out").exists()

    (tmp_path / "out" / "mini-c" / "0.1.0").mkdir(parents=True)  # a shared --out, a source only the driver has
    demo_kitti.rename(tmp_path / "elsewhere")
    res = run_shard(spec, load_recipe(str(small_recipe)), src, store.spec, "f" * 64, "run1", owner=owner)
    assert not res["ok"] and res["kind"] == "resource"
    assert res["error"].startswith(f"--source {demo_kitti} does not exist on node {socket.gethostname()}: ")
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    # no --source: the demo data, generated into the driver's cache, is not on this node either
    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    demo = KittiSource(tmp_path / "elsewhere")
    demo.root = tmp_path / "cache" / "demo-kitti" / "v2-8"
    res = run_shard(spec, load_recipe(str(small_recipe)), demo, store.spec, "f" * 64, "run1", owner=owner)
    assert not res["ok"] and res["error"].startswith(
        f"the demo data {demo.root} does not exist on node {socket.gethostname()}: it is generated on the machine "
        "that runs `bench-build run`; on a Ray cluster of several machines, pass --source")

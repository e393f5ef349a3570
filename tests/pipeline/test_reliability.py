"""Reliability on real processes: one writer per version, temp files of live writers, ...

Each test reproduces one defect of issue 16 with real `bench-build` subprocesses (or real files)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from manifests.manifest import read_manifest, verify_version
from pipeline.storage import LOCK_NAME, LocalStore, VersionLocked, owner_tag, remove_dead_temps


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", *args]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_second_run_and_overwrite_are_refused_while_a_run_holds_the_version(small_recipe, demo_kitti, tmp_path):
    out = tmp_path / "out"
    common = ["--source", str(demo_kitti), "--out", str(out), "--workers", "1", "--max-frames", "3",
              "--frames-per-shard", "1", "--no-progress"]
    first = subprocess.Popen(_cli("run", str(small_recipe), *common), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    lock = out / "mini-c" / "0.1.0" / LOCK_NAME
    try:
        deadline = time.time() + 60
        while not (lock.is_file() and lock.read_text()):
            assert first.poll() is None, first.communicate()
            assert time.time() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        holder = json.loads(lock.read_text())
        assert holder["pid"] == first.pid
        for extra in ([], ["--overwrite"]):  # a plain second run, and --overwrite, are both refused
            second = subprocess.run(_cli("run", str(small_recipe), *common, *extra), capture_output=True,
                                    text=True, timeout=120)
            assert second.returncode == 2, second.stderr
            assert f"pid {first.pid}" in second.stderr and "being written by another bench-build run" in \
                second.stderr, second.stderr
        assert first.poll() is None, "the refused runs must not disturb the first (it was still running)"
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, stderr.decode()
    version = out / "mini-c" / "0.1.0"
    assert verify_version(version).ok
    manifest = read_manifest(version)
    listed = {s["path"] for s in manifest["shards"]}
    on_disk = {p.relative_to(version).as_posix() for p in version.rglob("*.parquet") if "_ledger" not in p.parts}
    assert on_disk == listed  # no orphan shard a glob reader would pick up
    rows = sum(pq.ParquetFile(version / p).metadata.num_rows for p in on_disk)
    assert rows == manifest["counts"]["examples_stored"]
    assert not list(version.rglob("*.tmp"))
    assert lock.read_text() == ""  # released: the holder's name is cleared


def test_lock_is_released_when_its_holder_dies(tmp_path):
    """flock is released by the kernel: a SIGKILLed holder never leaves a stale lock."""
    store = LocalStore(tmp_path / "v")
    code = ("import sys, time; from pipeline.storage import LocalStore\n"
            f"with LocalStore({str(store.root)!r}).writer_lock('holder'):\n"
            "    print('locked', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(VersionLocked, match=f"pid {holder.pid} "), store.writer_lock("second"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with store.writer_lock("after"):  # the dead holder's lock is gone
        assert json.loads((store.root / LOCK_NAME).read_text())["purpose"] == "after"


def test_temp_cleanup_removes_only_dead_owners_temps(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    live = d / f".part.parquet.{owner_tag()}.abc123.tmp"
    dead = d / f".part.parquet.{owner_tag().split('~')[0]}~{_dead_pid()}.def456.tmp"
    other_host = d / ".part.parquet.elsewhere~1.ghi789.tmp"
    for p in (live, dead, other_host):
        p.write_bytes(b"partial")
    assert remove_dead_temps(d, ".part.parquet.*.tmp") == 1
    assert live.exists() and other_host.exists() and not dead.exists()
    store = LocalStore(d)  # a staged write of the same name: the live writer's temp survives it too
    with store.staged_file("part.parquet") as staged:
        staged.path.write_bytes(b"whole")
    assert live.exists() and (d / "part.parquet").read_bytes() == b"whole"


def test_s3_lease_refuses_a_second_writer_and_takes_over_an_expired_one(s3prefix):
    from pipeline.storage import LEASE_NAME, open_store

    store = open_store(f"{s3prefix}/mini-c/0.1.0")
    with store.writer_lock("first"):
        with pytest.raises(VersionLocked, match="being written by another first"), store.writer_lock("second"):
            pass
    assert store.get(LEASE_NAME) is None  # released at the end of the block
    # a holder that stopped renewing (its host died): the lease expires and is taken over
    store.put_bytes(LEASE_NAME, json.dumps({"host": "gone", "pid": 1, "purpose": "bench-build run",
                                            "expires": time.time() - 1}).encode())
    with store.writer_lock("successor"):
        assert json.loads(store.read_bytes(LEASE_NAME))["purpose"] == "successor"
    store.put_bytes(LEASE_NAME, json.dumps({"host": "elsewhere", "pid": 1, "purpose": "bench-build run",
                                            "expires": time.time() + 600}).encode())
    with pytest.raises(VersionLocked, match="pid 1 on elsewhere"), store.writer_lock("third"):
        pass

"""Reliability on real processes: one writer per version, temp files of live writers, ...

Each test reproduces one defect of issue 16 with real `bench-build` subprocesses (or real files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench_build.manifests.manifest import read_manifest, verify_version
from bench_build.storage import (
    LOCK_NAME,
    TEMP_IDLE,
    LocalStore,
    StorageError,
    VersionLocked,
    owner_tag,
    remove_dead_temps,
)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench_build.cli", *args]


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


def _lock_holder(store: LocalStore, purpose: str) -> subprocess.Popen:
    """A process that holds ``store``'s writer lock (for 60 s) once this returns; the caller kills it."""
    code = ("import sys, time; from bench_build.storage import LocalStore\n"
            f"with LocalStore({str(store.root)!r}).writer_lock({purpose!r}):\n"
            "    print('locked', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_lock_is_released_when_its_holder_dies(tmp_path):
    """flock is released by the kernel: a SIGKILLed holder never leaves a stale lock."""
    store = LocalStore(tmp_path / "v")
    holder = _lock_holder(store, "holder")
    try:
        with pytest.raises(VersionLocked, match=f"pid {holder.pid} "), store.writer_lock("second"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with store.writer_lock("after"):  # the dead holder's lock is gone
        assert json.loads((store.root / LOCK_NAME).read_text())["purpose"] == "after"


def test_a_lock_held_on_another_host_says_what_frees_it(tmp_path):
    """No process here can break another host's flock on a shared file system: the message says what frees it."""
    store = LocalStore(tmp_path / "v")
    holder = _lock_holder(store, "bench-build run")
    try:
        with pytest.raises(VersionLocked) as here, store.writer_lock("second"):
            pass
        assert "another host" not in str(here.value)  # this host's kernel frees a dead holder's lock
        record = json.loads((store.root / LOCK_NAME).read_text())
        (store.root / LOCK_NAME).write_text(json.dumps({**record, "host": "node-b", "pid": 4242}))
        with pytest.raises(VersionLocked) as there, store.writer_lock("second"):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert "pid 4242 on node-b" in str(there.value)
    assert ("; node-b is another host: if it is down, the shared file system frees its lock, NFSv4 once that "
            "host's lease expires (90 s by default), NFSv3 when that host reboots") in str(there.value)


def _later(monkeypatch, seconds: float) -> None:
    """The clock `remove_dead_temps` reads moves ``seconds`` ahead (a file's ctime cannot be set back)."""
    import bench_build.storage.owners as owners

    now = time.time() + seconds
    monkeypatch.setattr(owners, "time", SimpleNamespace(time=lambda: now))


def test_under_the_writer_lock_idle_temps_of_any_host_are_removed(tmp_path, monkeypatch):
    """`owner_dead` sees only this host's processes: a temp of a writer that died on another node of a shared file
    system stayed forever. A holder of the version's lock knows no other run writes there: what nobody changed for
    TEMP_IDLE goes, whatever its host (and a this-host pid reused since, after a reboot)."""
    store = LocalStore(tmp_path / "v")
    d = store.root / "data" / "corruption=fog" / "severity=1"
    live = d / f".part.parquet.{owner_tag()}.a1.tmp"
    dead = d / f".part.parquet.{owner_tag().split('~')[0]}~{_dead_pid()}.b2.tmp"
    remote = [d / ".part.parquet.node-b~4242.c3.tmp", store.root / "_ledger" / "shards" / ".p.json.node-c~7.d4.tmp"]
    for p in (live, dead, *remote):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"partial")
    with store.writer_lock("bench-build run") as owner:
        assert store.remove_dead_temps(owner) == 1  # fresh: only the dead process of this host
        assert live.exists() and all(p.exists() for p in remote) and not dead.exists()
        _later(monkeypatch, TEMP_IDLE - 60)
        assert store.remove_dead_temps(owner) == 0  # a writer may still be finishing: not idle long enough
        _later(monkeypatch, TEMP_IDLE + 1)
        assert store.remove_dead_temps() == 0  # without the lock: only what `owner_dead` can tell
        assert store.remove_dead_temps(owner) == 3
    assert not list(store.root.rglob("*.tmp"))
    with pytest.raises(StorageError, match="not holding its writer lock"):  # released: another run may write now
        store.remove_dead_temps(owner)


def test_run_removes_and_counts_the_temps_of_a_writer_dead_on_another_host(small_recipe, demo_kitti, tmp_path,
                                                                         shared_ray, monkeypatch, capfd):
    from bench_build.build.run import run_build

    out = tmp_path / "out"
    version = out / "mini-c" / "0.1.0"
    temps = [version / "data" / ".part-00000-of-00001.parquet.node-b~4242.0a1b2c.tmp",
             version / "_ledger" / "shards" / ".part-00000-of-00001.json.node-b~4242.3d4e5f.tmp"]
    for p in temps:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"partial")
    _later(monkeypatch, TEMP_IDLE + 1)
    res = run_build(str(small_recipe), source=str(demo_kitti), out=out, max_frames=1, frames_per_shard=1,
                    progress=False)
    assert res.ok and not list(version.rglob("*.tmp"))
    assert f"[bench-build] removed 2 temp files of dead writers under {version}\n" in capfd.readouterr().err


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
    from bench_build.storage import LEASE_NAME, open_store

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
    with store.writer_lock("takeover", force=True):  # `publish --takeover`: the user says the holder is dead
        assert json.loads(store.read_bytes(LEASE_NAME))["purpose"] == "takeover"


def _run_ids(version: Path) -> dict[str, str]:
    return {p.stem: json.loads(p.read_text())["run_id"] for p in (version / "_ledger" / "shards").glob("part-*.json")
            if not p.name.endswith(".failed.json")}


def _clean_points(version: Path, shard: str) -> np.ndarray:
    """Points of the clean copy of the (single-frame) shard ``shard``, found through the manifest."""
    entry = next(s for s in read_manifest(version)["shards"] if s["shard"] == shard and s["severity"] == 0)
    pts = pq.read_table(version / entry["path"], columns=["points"]).column("points")[0].as_py()
    return np.asarray(pts, dtype=np.float32).reshape(-1, 4)


def test_changed_source_frame_rebuilds_exactly_its_shard(small_recipe, demo_kitti, tmp_path, shared_ray, capfd):
    from bench_build.build.run import run_build

    out = tmp_path / "out"
    first = subprocess.run(_cli("run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out),
                                "--workers", "1", "--max-frames", "3", "--frames-per-shard", "1", "--no-progress"),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    version = out / "mini-c" / "0.1.0"
    ids, before = _run_ids(version), read_manifest(version)["source_identity"]["frames"]
    assert set(before) == {"000000", "000001", "000002"} and all(before.values())

    def rerun(recheck: str):
        return run_build(str(small_recipe), source=str(demo_kitti), out=out, max_frames=3, frames_per_shard=1,
                         recheck=recheck, progress=False)

    # fix a scan in place: same size, same mtime (only --recheck sha256, the default, can see it)
    scan = demo_kitti / "training" / "velodyne" / "000001.bin"
    st = scan.stat()
    fixed = np.fromfile(scan, dtype="<f4").reshape(-1, 4)
    fixed[:, :3] *= np.float32(1.01)
    fixed.tofile(scan)
    os.utime(scan, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert scan.stat().st_size == st.st_size

    size_only = rerun("size")
    assert size_only.ok and size_only.shards_built == [] and _run_ids(version) == ids  # size + mtime cannot tell
    second = rerun("sha256")
    assert second.ok and second.shards_built == ["part-00001-of-00003"] and second.shards_skipped == 2
    after = _run_ids(version)
    assert after["part-00001-of-00003"] != ids["part-00001-of-00003"]
    assert {k: v for k, v in after.items() if k != "part-00001-of-00003"} == \
        {k: v for k, v in ids.items() if k != "part-00001-of-00003"}
    np.testing.assert_array_equal(_clean_points(version, "part-00001-of-00003"), fixed)
    frames = read_manifest(version)["source_identity"]["frames"]
    assert frames["000001"] != before["000001"]
    assert {k: v for k, v in frames.items() if k != "000001"} == {k: v for k, v in before.items() if k != "000001"}
    assert verify_version(version).ok

    os.utime(scan)  # a new mtime, the same bytes (a touch, a copy without -p): sha256 sees nothing changed
    capfd.readouterr()
    touched = rerun("sha256")
    assert touched.ok and touched.shards_built == [] and touched.shards_skipped == 3, (touched.failures, touched)
    assert "building again" not in capfd.readouterr().err
    assert rerun("size").shards_built == []  # the re-hash recorded the new mtime: the cheap check agrees now
    os.utime(scan, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched again
    third = rerun("size")  # the cheap check cannot tell the bytes are the same: it rebuilds, and says why
    assert third.ok and third.shards_built == ["part-00001-of-00003"], third
    assert ("[bench-build] building again part-00001-of-00003: frame 000001: training/velodyne/000001.bin changed "
            "since it was built (modified; --recheck size compares mtimes)") in capfd.readouterr().err


def test_a_failed_build_returns_with_no_contact_sheet_thread_left(small_recipe, demo_kitti, tmp_path, shared_ray):
    """The contact sheet is drawn on a thread while the other tasks run; a build with a failed shard never
    uses it, yet must wait for it: a thread still inside matplotlib's native code when the interpreter exits
    aborts the process (the CLI exited 134 instead of 1, once Ray's stop got fast)."""
    import threading

    from bench_build.build.run import run_build

    (demo_kitti / "training" / "velodyne" / "000001.bin").write_bytes(b"")
    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "o", workers=1, max_frames=2,
                    frames_per_shard=1, progress=False)
    assert list(res.failures) == ["part-00001-of-00002"] and res.manifest is None
    assert not [t for t in threading.enumerate() if t.name.startswith("bench-build-")]


def test_empty_scan_fails_its_shard_naming_the_file(small_recipe, demo_kitti, tmp_path):
    empty = demo_kitti / "training" / "velodyne" / "000001.bin"
    empty.write_bytes(b"")
    run = subprocess.run(_cli("run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path / "o"),
                              "--workers", "1", "--max-frames", "2", "--frames-per-shard", "1", "--no-progress"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert f"{empty}: empty scan (0 bytes" in run.stderr
    assert "1 built, 1 failed" in run.stderr
    from bench_build.sources.kitti import KittiSource

    frame = KittiSource(demo_kitti, allow_empty=True).read("000001")  # opt-in for datasets with empty frames
    assert frame.points.shape == (0, 4)


def test_disk_full_names_the_cause_and_never_crashes_the_driver(small_recipe, demo_kitti, small_fs, shared_ray):
    args = _cli("run", str(small_recipe), "--source", str(demo_kitti), "--out", str(small_fs), "--workers", "1",
                "--max-frames", "3", "--frames-per-shard", "1", "--no-progress")
    for _ in range(2):  # the first run, and a re-run on the still-full disk, say the same thing
        run = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert run.returncode == 1, run.stderr
        assert f"No space left on device: {small_fs}/mini-c/0.1.0/" in run.stderr, run.stderr
        assert "Traceback" not in run.stderr and "RayTaskError" not in run.stderr, run.stderr
        assert "\x1b[" not in run.stderr  # no colour codes in a log file
        assert "the input is not at fault" in run.stderr and "fix the input" not in run.stderr
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    from bench_build.build.run import run_build

    res = run_build(str(small_recipe), source=str(demo_kitti), out=small_fs, max_frames=3, frames_per_shard=1,
                    progress=False)
    assert res.ok, res.failures
    assert verify_version(small_fs / "mini-c" / "0.1.0").ok


def test_injected_enospc_is_a_shard_failure_and_a_manifest_failure(small_recipe, demo_kitti, tmp_path, monkeypatch,
                                                                   shared_ray):
    """The same path without a mount: ENOSPC raised by the storage layer (a shard file, then the manifest)."""
    import errno

    from bench_build.build import shard as shard_mod
    from bench_build.build.run import run_build
    from bench_build.build.shard import ShardFailed, build_shard
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import plan_shards
    from bench_build.sources.kitti import KittiSource

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(shard_mod, "write_parquet_atomic", full)
        spec = plan_shards(["000000"], 1)[0]
        with pytest.raises(ShardFailed) as e:
            build_shard(spec, load_recipe(small_recipe), KittiSource(demo_kitti), tmp_path / "v", "f" * 64, "r")
    assert e.value.kind == "resource"
    assert e.value.message.startswith(f"No space left on device: {tmp_path / 'v'}/")
    assert e.value.message.endswith(".parquet") and ".tmp" not in e.value.message

    real_write = LocalStore.write_text

    def manifest_full(self, key, text):
        if key == "manifest.json":
            full()
        return real_write(self, key, text)

    monkeypatch.setattr(LocalStore, "write_text", manifest_full)
    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "o", max_frames=1, groups=1,
                    progress=False)
    assert res.manifest is None and res.shards_built == ["part-00000-of-00001"]
    assert res.failures == {"manifest.json": f"No space left on device: {res.version_dir}/manifest.json"}
    assert res.failure_kinds == {"manifest.json": "resource"}


def test_an_output_that_may_not_be_written_is_told_as_permissions_not_disk_space(small_recipe, demo_kitti, tmp_path,
                                                                                monkeypatch, shared_ray):
    """EACCES / EPERM / EROFS on the output (a folder's mode, a file made immutable with ``chattr +i``, a read-only
    mount) are their own kind: the closing hint names permissions, immutability and read-only mounts; it told the user
    to free disk space. A shard file, then the manifest (written by the driver, so also seen through the CLI)."""
    import errno

    from typer.testing import CliRunner

    from bench_build.build import shard as shard_mod
    from bench_build.build.shard import ShardFailed, build_shard
    from bench_build.cli import app
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import plan_shards
    from bench_build.sources.kitti import KittiSource

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    with monkeypatch.context() as m:
        m.setattr(shard_mod, "write_parquet_atomic", denied)
        with pytest.raises(ShardFailed) as e:
            build_shard(plan_shards(["000000"], 1)[0], load_recipe(small_recipe), KittiSource(demo_kitti),
                        tmp_path / "v", "f" * 64, "r")
    assert e.value.kind == "permission"
    assert e.value.message.startswith(f"Permission denied: {tmp_path / 'v'}/") and e.value.message.endswith(".parquet")

    real_write = LocalStore.write_text

    def manifest_immutable(self, key, text):
        if key == "manifest.json":
            raise PermissionError(errno.EPERM, "Operation not permitted", str(self.path(key)))
        return real_write(self, key, text)

    monkeypatch.setattr(LocalStore, "write_text", manifest_immutable)
    out = tmp_path / "o"
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out),
                                   "--max-frames", "1", "--no-progress"])
    text = " ".join(run.output.split())
    assert run.exit_code == 1, run.output
    assert f"FAILED manifest.json: Operation not permitted: {out}/mini-c/0.1.0/manifest.json" in text, run.output
    assert "whether it is immutable (lsattr; chattr -i lifts it)" in text and "free disk space" not in text


def test_a_card_that_cannot_be_renamed_into_place_is_named_not_its_temp_file(small_recipe, demo_kitti, tmp_path,
                                                                             shared_ray):
    """A README.md made immutable (``chattr +i``; root's chmod would not stop it): the card is written to a temp
    file beside it and renamed over it, and the rename's error names its source: the FAILED line named
    ``.README.md.<host>~<pid>.<random>.tmp``, a file that no longer exists, instead of README.md."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    out = tmp_path / "o"
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--max-frames", "1",
            "--no-progress"]
    assert CliRunner().invoke(app, args).exit_code == 0
    version = out / "mini-c" / "0.1.0"
    (version / "manifest.json").unlink()  # the re-run writes the card and the manifest again, no shard
    if subprocess.run(["chattr", "+i", str(version / "README.md")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (not root, or a file system without the immutable flag)")
    try:
        run = CliRunner().invoke(app, args)
    finally:
        subprocess.run(["chattr", "-i", str(version / "README.md")], check=True)
    text = " ".join(run.output.split())
    assert run.exit_code == 1, run.output
    assert f"FAILED manifest.json: Operation not permitted: {version}/README.md " in text, run.output
    assert ".tmp" not in text and "chattr -i lifts it" in text, run.output


def test_a_source_touched_during_the_run_is_a_failed_manifest_not_done(small_recipe, demo_kitti, tmp_path,
                                                                       monkeypatch, shared_ray):
    """A scan whose mtime changes after its task recorded it (a dataset sync running beside the build): the finish's
    size + mtime check finds the task no longer done, so no manifest is written. The run said "done:" and exited 0
    all the same; it is a `FAILED manifest.json` line naming the task and the file, exit 1, and the same command
    then finishes (the bytes did not change: only the manifest is written)."""
    from typer.testing import CliRunner

    from bench_build.build import run as run_mod
    from bench_build.cli import app

    scan = demo_kitti / "training" / "velodyne" / "000001.bin"
    real = run_mod.execute

    def execute_then_touch(*args, **kwargs):
        out = real(*args, **kwargs)
        st = scan.stat()
        os.utime(scan, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return out

    monkeypatch.setattr(run_mod, "execute", execute_then_touch)
    out = tmp_path / "out"
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--max-frames", "2",
            "--frames-per-shard", "1", "--no-progress"]
    first = CliRunner().invoke(app, args)
    text = " ".join(first.output.split())
    assert first.exit_code == 1, first.output
    assert ("FAILED manifest.json: not written: after this run recorded part-00001-of-00002, frame 000001: "
            "training/velodyne/000001.bin changed since it was built") in text and "done:" not in text, first.output
    assert "2 shards: 0 already done, 2 built, 0 failed" in text, first.output
    version = out / "mini-c" / "0.1.0"
    assert not (version / "manifest.json").exists()
    files = _data_files(version)
    monkeypatch.setattr(run_mod, "execute", real)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "2 already done, 0 built" in " ".join(again.output.split()), again.output
    assert _data_files(version) == files and verify_version(version).ok


def _two_frame_build(recipe, source, out):
    """The small recipe on 2 demo frames, one frame a shard, into ``out``."""
    from bench_build.build.run import run_build

    return run_build(str(recipe), source=str(source), out=out, max_frames=2, frames_per_shard=1, progress=False)


def test_a_rebuild_that_fails_leaves_its_task_failed_not_done(small_recipe, demo_kitti, tmp_path, shared_ray):
    """A task recorded as done whose file is damaged is built again; when that rebuild fails (here a folder stands
    where its file goes), `status` says what the run said: failed, with its reason. Its old done entry was kept and
    won over the newer failure: "2/2 shards done" after a run that ended "1 failed"."""
    from bench_build.build.ledger import Ledger
    from bench_build.build.status import build_status

    out = tmp_path / "out"

    def build():
        return _two_frame_build(small_recipe, demo_kitti, out)

    assert build().ok
    version = out / "mini-c" / "0.1.0"
    damaged = next(version.glob("data/corruption=clean/severity=0/part-00000-of-00002.parquet"))
    damaged.unlink()
    (damaged / "x").mkdir(parents=True)  # the rebuild cannot put its file there
    res = build()
    assert list(res.failures) == ["part-00000-of-00002"] and res.shards_skipped == 1, res.failures
    assert res.failures["part-00000-of-00002"] == f"Is a directory: {damaged}"
    assert res.failure_kinds == {"part-00000-of-00002": "blocked"}  # its hint: move what is in the way
    assert Ledger(version).done_entry("part-00000-of-00002") is None
    status = build_status(str(small_recipe), out)
    assert (status["done"], status["failed"], status["pending"]) == (1, res.failures, 0)
    assert not status["complete"]


@pytest.mark.parametrize("blocked", ["its folder", "a folder above it"])
def test_a_file_where_a_folder_of_the_output_goes_is_named(small_recipe, demo_kitti, tmp_path, shared_ray, blocked):
    """A plain file where a partition's folder (or one above it) must be: mkdir's EEXIST / ENOTDIR named the shard
    file ("File exists: …/severity=3/part-00000-of-00002.parquet"), not the file in the way, and the hint said to
    free disk space. Both tasks write there: both fail naming the file, with a hint to move it."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    out = tmp_path / "out"
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--max-frames", "2",
            "--frames-per-shard", "1", "--no-progress"]
    assert CliRunner().invoke(app, args).exit_code == 0
    data = out / "mini-c" / "0.1.0" / "data"
    folder, first = {"its folder": (data / "corruption=beam_del" / "severity=3", "severity=3"),
                     "a folder above it": (data / "corruption=beam_del", "severity=1")}[blocked]
    shutil.rmtree(folder)
    folder.write_text("in the way")
    run = CliRunner().invoke(app, args)
    text = " ".join(run.output.split())
    assert run.exit_code == 1, run.output
    for shard in ("part-00000-of-00002", "part-00001-of-00002"):  # the first file it could not write, each
        assert (f"FAILED {shard}: {folder} is a file where a folder is needed (to write {data}/corruption=beam_del/"
                f"{first}/{shard}.parquet): move or remove it") in text, run.output
    assert "File exists" not in text and "Not a directory" not in text and "free disk space" not in text
    assert "something stands in the way of the output named above" in text
    assert folder.read_text() == "in the way"


def test_a_done_and_a_failed_entry_of_one_task_read_as_failed_in_status_and_run(small_recipe, demo_kitti, tmp_path,
                                                                                   shared_ray, monkeypatch):
    """Ledgers of older bench-builds can hold a done and a failed entry for one task (a rebuild that failed after
    its done entry was found untrue). The failed entry wins: `status` showed the task done, and `run` skipped it,
    until something else sent it to be built again. `run` sees the failed entries from one listing of the ledger,
    not a look-up per task (an S3 HEAD each on a resume)."""
    import json

    from bench_build.build.ledger import Ledger, entry_key
    from bench_build.build.status import build_status
    from bench_build.storage.base import Store

    looked_up: list[str] = []
    exists = Store.exists
    monkeypatch.setattr(Store, "exists", lambda self, key: looked_up.append(key) or exists(self, key))

    out = tmp_path / "out"

    def build():
        return _two_frame_build(small_recipe, demo_kitti, out)

    assert build().ok
    version = out / "mini-c" / "0.1.0"
    files = _data_files(version)
    failed = version / entry_key("part-00000-of-00002", failed=True)
    failed.write_text(json.dumps({"status": "failed", "shard": "part-00000-of-00002", "kind": "input",
                                  "error": "an older rebuild failed", "run_id": "0123456789ab"}))
    status = build_status(str(small_recipe), out)
    assert (status["done"], status["failed"], status["pending"]) == (1, {"part-00000-of-00002":
                                                                        "an older rebuild failed"}, 0)
    res = build()
    assert res.ok and res.shards_built == ["part-00000-of-00002"] and res.shards_skipped == 1
    assert not failed.exists() and Ledger(version).done_entry("part-00000-of-00002") is not None
    status = build_status(str(small_recipe), out)
    assert (status["done"], status["failed"], status["pending"]) == (2, {}, 0) and status["complete"]
    assert _data_files(version) == files  # built again: the same bytes
    assert not [k for k in looked_up if k.endswith(".failed.json")], looked_up


def test_a_file_where_the_ledgers_folder_goes_is_named_by_run_and_status(small_recipe, demo_kitti, tmp_path,
                                                                         shared_ray):
    """A file at _ledger/shards: no entry could be written, so `run` built every task, failed to record it and
    could not record the failure either, and `status` showed every task pending. Both now name the file (exit 2);
    `run` refuses before any work."""
    import shutil

    from typer.testing import CliRunner

    from bench_build.build.run import run_build
    from bench_build.cli import app

    out = tmp_path / "out"
    assert run_build(str(small_recipe), source=str(demo_kitti), out=out, max_frames=2, frames_per_shard=1,
                     progress=False).ok
    version = out / "mini-c" / "0.1.0"
    shards = version / "_ledger" / "shards"
    shutil.rmtree(shards)
    shards.write_text("not a folder\n")
    (version / "manifest.json").unlink()
    before = sorted((p.relative_to(version), p.stat().st_mtime_ns) for p in version.rglob("*"))
    runner = CliRunner()
    for args in (["status", str(small_recipe), "--out", str(out)],
                 ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--max-frames", "2",
                  "--frames-per-shard", "1", "--no-progress"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        flat = " ".join(res.output.replace("│", " ").split())
        assert f"{shards} is a file where the ledger's folder {shards} must be" in flat, res.output
        assert sorted((p.relative_to(version), p.stat().st_mtime_ns) for p in version.rglob("*")) == before


def test_worker_killed_is_reported_as_worker_death_not_bad_input(small_recipe, demo_kitti, tmp_path, monkeypatch,
                                                                  shared_ray):
    from bench_build.build.run import run_build
    from bench_build.sources.kitti import KittiSource

    class DyingSource(KittiSource):  # defined here so Ray ships it by value to its workers
        def read(self, frame_id):
            if frame_id == "000001":
                os._exit(9)  # the worker process dies, as under the OOM killer
            return super().read(frame_id)

    monkeypatch.setattr("bench_build.build.run.open_source", lambda *a, **k: DyingSource(demo_kitti))
    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, max_frames=2, frames_per_shard=1,
                    progress=False)
    assert res.shards_built == ["part-00000-of-00002"]
    assert res.failures["part-00001-of-00002"].startswith("worker died (retries exhausted)")
    assert res.failure_kinds["part-00001-of-00002"] == "resource"
    from bench_build.build.ledger import Ledger

    recorded = Ledger(res.version_dir).failed_entry("part-00001-of-00002")
    assert recorded["error"].startswith("worker died") and recorded["kind"] == "resource"


def _data_files(version: Path) -> dict[str, bytes]:
    return {p.relative_to(version).as_posix(): p.read_bytes() for p in sorted((version / "data").rglob("*.parquet"))}


def test_run_counts_a_shard_its_killed_worker_recorded_as_built(small_recipe, demo_kitti, tmp_path, shared_ray):
    """`bench-build run` with two workers SIGKILLed on every attempt (so Ray's retries run out): one right after
    the ledger recorded its shard, one before it built anything. The summary, the ledger and `status` agree:
    the recorded shard is built, the other failed with "worker died (retries exhausted)" (not bad input);
    exit 1; the same command resumes and the result equals a build nobody killed, byte for byte."""
    from bench_build.build.ledger import Ledger
    from bench_build.build.run import run_build
    from bench_build.build.status import build_status
    from bench_build.manifests.manifest import stable_view
    from bench_build.runtime.faults import TEST_KILL_ENV

    recorded, killed = "part-00000-of-00003", "part-00001-of-00003"
    out = tmp_path / "out"
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--workers", "2",
            "--max-frames", "3", "--frames-per-shard", "1", "--no-progress"]
    env = {**os.environ, TEST_KILL_ENV: f"after-record:{recorded},before-record:{killed}"}
    run = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 1, run.stderr  # README: 1 = the run did work but some of it failed
    lines = run.stderr.splitlines()
    assert "3 shards: 0 already done, 2 built, 1 failed" in run.stderr, run.stderr
    assert [ln for ln in lines if ln.startswith("FAILED")] == [
        f"FAILED {killed}: worker died (retries exhausted): its process exited unexpectedly (killed, out of "
        "memory or crashed in native code)"], run.stderr
    assert "the input is not at fault" in run.stderr and "fix the input" not in run.stderr
    assert "\x1b[" not in run.stdout + run.stderr  # Ray's forwarded worker lines included
    version = out / "mini-c" / "0.1.0"
    ledger = Ledger(version)
    assert set(_run_ids(version)) == {recorded, "part-00002-of-00003"}  # the ledger's done = the summary's built
    failed = ledger.failed_entry(killed)
    assert failed["error"].startswith("worker died (retries exhausted)") and failed["kind"] == "resource"
    assert ledger.failed_entry(recorded) is None
    assert not (version / "manifest.json").exists()  # a failed run writes no manifest
    status = build_status(str(small_recipe), out)
    assert (status["done"], set(status["failed"]), status["pending"]) == (2, {killed}, 0)

    from typer.testing import CliRunner

    from bench_build.cli import app

    again = CliRunner().invoke(app, args)  # the same command, nobody killed (shared Ray: no second start-up)
    assert again.exit_code == 0, again.output
    assert "3 shards: 2 already done, 1 built, 0 failed" in again.output
    # the summary: one row per corruption (not per partition), a total, then where to look next
    manifest = json.loads((version / "manifest.json").read_text())
    rows = [ln.split("│")[1].strip() for ln in again.output.splitlines() if ln.startswith("│")]
    assert rows[:-1] == ["clean", *[c["name"] for c in manifest["recipe"]["corruptions"]]]  # the recipe's order
    n = len(manifest["recipe"]["corruptions"])
    assert rows[-1] == f"{n} corruption{'s' * (n != 1)} + clean"
    assert f"{len(manifest['counts']['by_partition'])} partitions" in again.output
    assert f"check it:      bench-build verify {version}" in again.output
    assert f"contact sheet: {version}/renders/contact_sheet.png" in again.output
    reference = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "ref", max_frames=3,
                          frames_per_shard=1, progress=False)
    assert reference.ok
    assert _data_files(version) == _data_files(Path(reference.version_dir))
    assert stable_view(read_manifest(version)) == stable_view(read_manifest(reference.version_dir))
    assert verify_version(version).ok


@pytest.mark.parametrize(("edit", "message"), [
    (("sigma = [0.04, 0.06, 0.08, 0.10, 0.12]", "sigma = [0.04, nan, 0.08, 0.10, 0.12]"), "'sigma' is NaN"),
    (("sigma = [0.04, 0.06, 0.08, 0.10, 0.12]", "sigma = [0.04, -0.06, 0.08, 0.10, 0.12]"),
     "'sigma' (severity 2) is -0.06; it must be ≥ 0"),
    (("count_divisor = [100, 30, 10, 5, 3]", "count_divisor = [100, 30, 0, 5, 3]"),
     "'count_divisor' (severity 3) is 0; a divisor must be > 0"),
    (("min_distance = [0.0, 0.3, 0.5, 0.7, 0.9]", "min_distance = [0.0, 0.3, 0.5, 0.9, 0.9]"),
     "min_distance = 0.9 > max_distance = 0.8 (severity 4)"),
    (("seed = 7", "seed = -7"), "seed must be a non-negative integer"),
])
def test_bad_recipe_values_exit_2_at_load_naming_file_and_key(small_recipe, edit, message):
    from typer.testing import CliRunner

    from bench_build.cli import app

    small_recipe.write_text(small_recipe.read_text().replace(*edit))
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--out", str(small_recipe.parent / "o"), "--no-progress"])
    assert run.exit_code == 2, run.output
    flat = " ".join(run.output.split())
    assert str(small_recipe) in flat and message in flat, run.output
    assert not (small_recipe.parent / "o").exists()  # refused before anything was written


@pytest.mark.parametrize("args", [["--recheck", "bogus"], ["--max-frames", "-1"], ["--max-frames", "0"],
                                  ["--frames-per-shard", "0"], ["--workers", "0"]])
def test_bad_run_options_are_usage_errors(small_recipe, tmp_path, args):
    from typer.testing import CliRunner

    from bench_build.cli import app

    out = CliRunner().invoke(app, ["run", str(small_recipe), "--out", str(tmp_path / "o"), *args])
    assert out.exit_code == 2, out.output
    assert f"Invalid value for '{args[0]}'" in " ".join(out.output.replace("│", " ").split())
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["out", "benchmark"])
def test_run_out_a_regular_file_is_refused_before_any_work(small_recipe, demo_kitti_master, tmp_path, monkeypatch,
                                                           where):
    """Issue 29: `run --out <a file>` (or OUT/<benchmark> a file) exits 2 naming the path; it used to reach the
    version's mkdir and exit 1 with NotADirectoryError."""
    from typer.testing import CliRunner

    import bench_build.build.run as build
    from bench_build.cli import app

    def no_ray(*a, **kw):
        raise AssertionError("Ray started for a refused run")

    monkeypatch.setattr(build, "init_ray", no_ray)
    out = tmp_path / "o"
    if where == "out":
        out.write_text("a file")
        bad = out
    else:
        out.mkdir()
        bad = out / "mini-c"
        bad.write_text("a file")
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti_master), "--out", str(out),
                                   "--no-progress"])
    assert run.exit_code == 2, run.output
    line = run.output.strip()
    assert len(line.splitlines()) == 1 and f"{bad} is a file, not a directory" in line, run.output
    assert bad.read_text() == "a file"
    assert out.is_file() or list(out.iterdir()) == [bad]  # nothing written beside it (no lock file, no ledger)


def test_export_of_a_partition_the_version_lacks_exits_2(tmp_path):
    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.manifests.manifest import MANIFEST_VERSION

    version = tmp_path / "mini-c" / "0.1.0"
    version.mkdir(parents=True)
    (version / "manifest.json").write_text(json.dumps({
        "manifest_version": MANIFEST_VERSION, "dataset": "mini-c", "version": "0.1.0", "shards": [],
        "fields": ["x", "y", "z", "intensity"], "recipe": {"corruptions": [{"name": "fog"}], "severities": 5}}))
    for args, bad in ((["--corruption", "fog", "--severity", "9"], "severity 9 is outside 0…5"),
                      (["--corruption", "smoke", "--severity", "1"], "no corruption 'smoke'"),
                      (["--corruption", "clean", "--severity", "2"], "clean has only severity 0")):
        out = CliRunner().invoke(app, ["export", str(version), str(tmp_path / "x"), *args])
        assert out.exit_code == 2 and bad in out.output, out.output
    out = CliRunner().invoke(app, ["export", str(version), str(tmp_path / "x"), "--corruption", "fog",
                                   "--severity", "-1"])
    assert out.exit_code == 2


def test_manifests_are_strict_json():
    from bench_build.manifests.manifest import MANIFEST_VERSION, ManifestError, parse_manifest

    with pytest.raises(ManifestError, match="NaN is not a JSON number"):
        parse_manifest(f'{{"manifest_version": {MANIFEST_VERSION}, "x": NaN}}', "m.json")


def test_verify_is_the_exact_file_set_and_cross_checks_counts(small_recipe, demo_kitti, tmp_path, shared_ray):
    import shutil

    from typer.testing import CliRunner

    from bench_build.build.run import run_build
    from bench_build.cli import app

    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, max_frames=2, frames_per_shard=1,
                    progress=False)
    version = Path(res.version_dir)
    manifest = read_manifest(version)

    def verify() -> tuple[int, str]:
        out = CliRunner().invoke(app, ["verify", str(version)])
        return out.exit_code, " ".join(out.output.split())

    assert verify()[0] == 0
    listed = next(s["path"] for s in manifest["shards"] if s["severity"] == 1)
    stray = Path(listed).with_name("part-00009-of-00004.parquet").as_posix()  # beside a listed shard
    shutil.copy(version / listed, version / stray)
    assert pq.ParquetFile(version / stray).metadata.num_rows > 0  # a glob reader would read these rows
    code, text = verify()
    assert code == 1 and f"BAD {stray}: not listed in the manifest" in text
    # `run` again (nothing to build) keeps the stray, but says so rather than a bare "done"
    again = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path),
                                     "--max-frames", "2", "--frames-per-shard", "1", "--no-progress"])
    said = " ".join(again.output.split())
    assert again.exit_code == 0 and "nothing to build" in said, again.output
    assert f"warning: 1 Parquet file in {version} is not this build's: {stray} (pandas" in said, said
    assert (version / stray).is_file()
    (version / stray).unlink()

    (version / "notes.txt").write_text("hello")  # an unlisted non-data file: a warning only
    code, text = verify()
    assert code == 0 and "WARN notes.txt: not listed in the manifest" in text

    tampered = json.loads((version / "manifest.json").read_text())
    key = next(iter(tampered["counts"]["by_partition"]))
    tampered["counts"]["by_partition"][key]["examples"] += 1
    tampered["frames"] += 1
    (version / "manifest.json").write_text(json.dumps(tampered))
    code, text = verify()
    assert code == 1 and f"counts.by_partition[{key}] says" in text and "the manifest says 3 frames" in text


@pytest.mark.parametrize(("edit", "says"), [
    (lambda m: m.__setitem__("counts", []), "counts [] is not an object"),
    (lambda m: m["counts"].__setitem__("by_partition", []), "counts.by_partition [] is not an object"),
    (lambda m: m["counts"]["by_partition"].__setitem__("clean/0", 4),
     "counts.by_partition[clean/0] 4 is not an object"),
    (lambda m: m.__setitem__("frames", "4"), "frames '4' is not an integer"),
    (lambda m: m.pop("dataset"), "no dataset"),
    (lambda m: m.__setitem__("version", "../0.1.0"), "version '../0.1.0' is not a safe name"),
])
def test_verify_of_a_manifest_edited_by_hand_says_what_is_wrong(mini_build, tmp_path, edit, says):
    """`verify` cross-checks the manifest's counts: ``counts`` or ``by_partition`` (or one of its entries) that is
    not an object stopped it on an AttributeError traceback; ``frames`` that is not an integer, or a manifest without
    its ``dataset`` (or with a ``version`` that no reader opens), passed as OK. Each is one problem line, exit 1,
    and the rest of the version is still checked."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    version = tmp_path / "mini-c" / "0.1.0"
    shutil.copytree(mini_build, version)
    manifest = json.loads((version / "manifest.json").read_text())
    edit(manifest)
    (version / "manifest.json").write_text(json.dumps(manifest))
    out = CliRunner().invoke(app, ["verify", str(version)])
    lines = out.output.strip().splitlines()
    assert out.exit_code == 1 and len(lines) == 2 and lines[0].startswith(f"BAD {says}"), out.output
    assert lines[1] == f"1 problem; {len(manifest['shards'])} listed files checked", out.output


def test_every_ray_init_in_the_suite_starts_its_own_local_instance():
    """A test must never join a `ray start` cluster it did not start (it would fail, or run on it)."""
    import ast

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in [*(root / "tests").rglob("*.py"), *(root / "pipeline").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "init" and \
                    getattr(node.func, "value", None) is not None and getattr(node.func.value, "id", None) == "ray":
                if not any(k.arg == "address" for k in node.keywords):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, f"ray.init without address= (use address='local'): {offenders}"


def test_raylet_death_is_seen_within_the_wait_an_error_gives_it():
    """A task error can arrive a moment before the killed raylet's exit completes (its workers see their socket
    close first): the driver gives it ``wait`` seconds, so every unfinished shard names the raylet, not the
    symptom one worker saw. A running raylet is not waited on without cause, and is never reported dead."""
    import signal

    from bench_build.runtime.ray import raylet_death

    assert raylet_death(None, 1.0) is None  # no raylet watched (a cluster, or a Ray the caller started)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t = time.perf_counter()
        assert raylet_death(proc) is None and time.perf_counter() - t < 0.5
        assert raylet_death(proc, 0.3) is None  # alive through the whole wait
        t = time.perf_counter()
        proc.send_signal(signal.SIGKILL)
        message = raylet_death(proc, 5.0)
        assert time.perf_counter() - t < 5.0  # returns as soon as it is dead, not after the wait
        assert message == (f"Ray node died (local raylet pid {proc.pid} exited with -9): the raylet or the machine "
                           "running the shard is gone")
    finally:
        proc.kill()
        proc.wait()


def test_raylet_death_loses_nothing_the_ledger_recorded(small_recipe, demo_kitti, tmp_path, shared_ray):
    """Killing the raylet of a running build: the driver notices before Ray ends it (it lost its object store),
    prints a summary that agrees with the ledger and exits 1; every shard the ledger recorded is intact, and
    the same command resumes from exactly those. (If every shard was recorded before the death, the build
    is whole: it writes its manifest and exits 0.)"""
    import signal

    import psutil

    out = tmp_path / "out"
    args = _cli("run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--workers", "1",
                "--max-frames", "5", "--frames-per-shard", "1", "--no-progress")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    version = out / "mini-c" / "0.1.0"
    try:
        deadline = time.time() + 120
        raylets: list = []
        # the raylet is found while Ray starts, so that the kill follows the first recorded shard at once
        while True:
            raylets = raylets or [p for p in psutil.Process(proc.pid).children(recursive=True)
                                  if p.name() == "raylet"]
            if (version / "_ledger" / "shards").is_dir() and _run_ids(version):
                break
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "the build never recorded a shard"
            time.sleep(0.01)
        assert raylets, "no raylet under the driver"
        for p in raylets:
            p.kill()
        _, stderr = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # GCS and workers the dead driver left behind
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
    recorded = _run_ids(version)
    if len(recorded) == 5:  # the last task recorded its shard before its node died: nothing is missing
        assert proc.returncode == 0 and "5 shards: 0 already done, 5 built, 0 failed" in stderr, stderr
        assert verify_version(version).ok
        return
    assert proc.returncode == 1, stderr  # README: 1 = the run did work but some of it failed
    assert 1 <= len(recorded) and not (version / "manifest.json").exists()
    # the summary agrees with the ledger: its "built" are the recorded shards, every other one failed naming Ray
    assert f"5 shards: 0 already done, {len(recorded)} built, {5 - len(recorded)} failed" in stderr, stderr
    failed = sorted(ln.split()[1].rstrip(":") for ln in stderr.splitlines() if ln.startswith("FAILED "))
    assert failed == sorted({f"part-{i:05d}-of-00005" for i in range(5)} - set(recorded)), stderr
    assert all(f"FAILED {s}: Ray node died (local raylet pid {raylets[0].pid} exited" in stderr for s in failed), stderr
    assert "the input is not at fault" in stderr and "fix the input" not in stderr and "Traceback" not in stderr
    from bench_build.build.ledger import Ledger

    ledger = Ledger(version)
    assert all(ledger.failed_entry(s)["error"].startswith("Ray node died") for s in failed)
    fingerprint = ledger.run_info()["fingerprint"]
    assert all(ledger.check_done(s, fingerprint, "sha256")[0] for s in recorded)  # intact, checksums and all
    from bench_build.build.run import run_build

    again = run_build(str(small_recipe), source=str(demo_kitti), out=out, max_frames=5, frames_per_shard=1,
                      progress=False)
    assert again.ok and again.shards_skipped == len(recorded) and len(again.shards_built) == 5 - len(recorded)
    assert {k: v for k, v in _run_ids(version).items() if k in recorded} == recorded
    assert verify_version(version).ok

"""Uploads overlap compute on object storage (and a local file's fsync + rename on local disk): a staged file
uploads in the background while the next is written; `finish()` waits for all and reports failures; staging disk
stays bounded; a shard is recorded in the ledger only after every one of its uploads finished, and a failed shard
leaves no upload running."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time

import pytest

from bench_build.storage import OVERLAP_ENV, UPLOAD_THREADS, LocalStore, open_store


def _write(store, key: str, data: bytes) -> str:
    with store.staged_file(key) as staged:
        staged.path.write_bytes(data)
    return staged.sha256


def test_background_uploads_land_every_file_and_bound_the_backlog(s3prefix, s3env, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_BUILD_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv(OVERLAP_ENV, "1")
    store = open_store(s3prefix)
    real_upload = store.upload_file
    in_flight, peak, lock = [0], [0], threading.Lock()
    gate, f1_uploading = threading.Event(), threading.Event()

    def slow_upload(local, key, **kw):  # the first upload waits until the caller has written the next file
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        if key == "f1":
            f1_uploading.set()
        if key == "f0":
            assert gate.wait(30), "the caller never got to write the next file while f0 was uploading"
            assert f1_uploading.wait(30), "f1 did not upload beside f0"
        real_upload(local, key, **kw)
        with lock:
            in_flight[0] -= 1

    monkeypatch.setattr(store, "upload_file", slow_upload)
    uploads = store.background_uploads(depth=2)
    blobs = {f"f{i}": bytes([i]) * (1000 + i) for i in range(5)}
    digests = {}
    for i, (key, data) in enumerate(blobs.items()):
        digests[key] = _write(store, key, data)  # returns while the upload may still run
        if i == 1:
            gate.set()  # f1 was written while f0 was still uploading: compute and upload overlapped
        staged = list((tmp_path / "staging").glob("*.tmp"))
        assert len(staged) <= 2 + 1  # at most `depth` waiting files (+ the one being written)
    uploads.finish()
    assert peak[0] == UPLOAD_THREADS == 2  # two PUTs in flight at once, never more than depth
    for key, data in blobs.items():
        assert store.read_bytes(key) == data and digests[key] == hashlib.sha256(data).hexdigest()
    assert not list((tmp_path / "staging").glob("*.tmp"))  # staged copies deleted after upload


def test_a_failed_background_upload_is_raised_by_finish(s3prefix, s3env, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_BUILD_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv(OVERLAP_ENV, "1")
    store = open_store(s3prefix)
    real_upload = store.upload_file

    def flaky(local, key, **kw):
        if key == "bad":
            time.sleep(0.2)
            raise OSError("connection reset while uploading bad")
        real_upload(local, key, **kw)

    monkeypatch.setattr(store, "upload_file", flaky)
    uploads = store.background_uploads()
    _write(store, "bad", b"x" * 10)
    _write(store, "good", b"y" * 10)  # still uploaded: one failure does not stop the others
    with pytest.raises(OSError, match="uploading bad"):
        uploads.finish()
    assert store.read_bytes("good") == b"y" * 10 and not store.exists("bad")
    assert not list((tmp_path / "staging").glob("*.tmp"))


def test_overlap_is_on_by_default_and_can_be_switched_off(s3prefix, s3env, monkeypatch):
    monkeypatch.delenv(OVERLAP_ENV, raising=False)
    assert open_store(s3prefix).background_uploads().active
    monkeypatch.setenv(OVERLAP_ENV, "0")
    assert not open_store(s3prefix).background_uploads().active


def _shard_inputs(small_recipe, demo_kitti, s3prefix, monkeypatch, tmp_path):
    """One shard of the small recipe to build into ``s3prefix/v`` with overlapped uploads (staging under
    ``tmp_path``): recipe, spec, source, store and the shard's file keys in writing order."""
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import plan_shards
    from bench_build.sources.kitti import KittiSource

    monkeypatch.setenv("BENCH_BUILD_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv(OVERLAP_ENV, "1")
    recipe = load_recipe(small_recipe)
    spec = plan_shards(["000000"], 1)[0]
    store = open_store(f"{s3prefix}/v")
    return recipe, spec, KittiSource(demo_kitti), store, [rel for _, _, rel in spec.partitions(recipe)]


def _upload_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("bench-build-upload")]


def test_a_shard_is_recorded_only_after_its_last_upload_finished(s3prefix, s3env, monkeypatch, tmp_path,
                                                                small_recipe, demo_kitti):
    from bench_build.build.ledger import Ledger
    from bench_build.build.shard import build_shard

    recipe, spec, source, store, keys = _shard_inputs(small_recipe, demo_kitti, s3prefix, monkeypatch, tmp_path)
    real_upload = store.upload_file
    started, release = threading.Event(), threading.Event()

    def gated(local, key, **kw):  # the last file's upload hangs until the test has looked at the ledger
        if key == keys[-1]:
            started.set()
            assert release.wait(120)
        real_upload(local, key, **kw)

    monkeypatch.setattr(store, "upload_file", gated)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(entry=build_shard(spec, recipe, source, store, "f" * 64, "r")))
    worker.start()
    try:
        assert started.wait(120), "the last file was never handed to the uploader"
        time.sleep(0.3)  # a writer that did not wait for its uploads would record the shard now
        assert worker.is_alive()
        assert Ledger(store).done_entry(spec.name) is None  # every file written, one not uploaded: not done
        assert not store.exists(keys[-1])
        # the other uploader thread finishes the rest meanwhile
        deadline = time.monotonic() + 60
        while not all(store.exists(k) for k in keys[:-1]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(store.exists(k) for k in keys[:-1])
        assert Ledger(store).done_entry(spec.name) is None
    finally:
        release.set()
        worker.join(120)
    entry = Ledger(store).done_entry(spec.name)
    assert entry is not None and entry["files"] == out["entry"]["files"]
    assert [f["path"] for f in entry["files"]] == keys
    for f in entry["files"]:  # recorded ⇒ every object is there, whole
        assert store.sha256(f["path"]) == f["sha256"] and store.head(f["path"]).size == f["bytes"]
    assert not _upload_threads() and not list((tmp_path / "staging").glob("*.tmp"))


def test_a_failed_shard_leaves_no_upload_running_and_records_nothing(s3prefix, s3env, monkeypatch, tmp_path,
                                                                    small_recipe, demo_kitti):
    from bench_build.build import shard as shard_mod
    from bench_build.build.ledger import Ledger
    from bench_build.build.shard import ShardFailed, build_shard

    recipe, spec, source, store, keys = _shard_inputs(small_recipe, demo_kitti, s3prefix, monkeypatch, tmp_path)
    real_upload, real_write = store.upload_file, shard_mod.write_parquet_atomic
    first_started, uploaded = threading.Event(), []

    def slow(local, key, **kw):  # file 0 is still uploading when the shard fails on file 3
        if key == keys[0]:
            first_started.set()
            time.sleep(1.0)
        real_upload(local, key, **kw)
        uploaded.append(key)

    calls = [0]

    def failing_write(path, schema, batches, store=None, split=None):
        calls[0] += 1
        if calls[0] == 4:
            assert first_started.wait(60)
            raise OSError(28, "No space left on device")
        return real_write(path, schema, batches, store, split)

    monkeypatch.setattr(store, "upload_file", slow)
    monkeypatch.setattr(shard_mod, "write_parquet_atomic", failing_write)
    with pytest.raises(ShardFailed) as e:
        build_shard(spec, recipe, source, store, "f" * 64, "r")
    assert e.value.kind == "resource" and keys[3] in e.value.message
    # build_shard returned only after the running upload ended; the queued ones were dropped, not left running
    assert not _upload_threads()
    # (two uploader threads: files 1 and 2 may have finished before the slow file 0)
    assert keys[0] in uploaded and set(uploaded) <= set(keys[:3])
    assert sorted(o.key for o in store.list()) == sorted(uploaded)  # whole objects only, no ledger entry
    assert Ledger(store).done_entry(spec.name) is None
    assert not list((tmp_path / "staging").glob("*.tmp"))


def test_local_store_commits_in_place_when_overlap_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv(OVERLAP_ENV, "0")
    store = LocalStore(tmp_path)
    uploads = store.background_uploads()
    assert not uploads.active
    _write(store, "a/b.bin", b"z")
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"z"  # already in place, before finish()
    uploads.finish()


def test_local_store_fsyncs_and_renames_in_the_background_never_a_partial_final_name(tmp_path, monkeypatch):
    """Local builds: a file's fsync + rename run on the background thread while the next file is written; its
    size and sha256 are known at once; until the flush ends the file has only its temp name; ``finish()``
    waits for all; a failed batch (``abandon``) leaves no temp file and nothing under a final name it did not
    flush."""


    monkeypatch.setenv(OVERLAP_ENV, "1")
    store = LocalStore(tmp_path)
    real_fsync = os.fsync
    gate, entered = threading.Event(), threading.Event()

    def slow_fsync(fd):
        if threading.current_thread().name.startswith("bench-build-upload"):  # the flush, not the caller's own
            entered.set()  # fsyncs (of a new directory's name in its parent, `make_dirs`)
            assert gate.wait(60)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    uploads = store.background_uploads(depth=2)
    assert uploads.active
    digest = _write(store, "a/0.bin", b"first")
    assert digest == hashlib.sha256(b"first").hexdigest()
    assert entered.wait(60)
    assert not (tmp_path / "a" / "0.bin").exists()  # flushing: only the temp name exists
    assert list((tmp_path / "a").glob(".0.bin.*.tmp"))
    _write(store, "a/1.bin", b"second")  # the caller went on while file 0 was flushing
    gate.set()
    uploads.finish()
    assert (tmp_path / "a" / "0.bin").read_bytes() == b"first" and (tmp_path / "a" / "1.bin").read_bytes() == b"second"
    assert not list((tmp_path / "a").glob("*.tmp")) and not _upload_threads()

    # a failing task abandons its batch: the running flush completes, queued ones are dropped with their temps
    gate.clear()
    entered.clear()
    uploads = store.background_uploads(depth=2)
    _write(store, "b/0.bin", b"x")
    assert entered.wait(60)
    _write(store, "b/1.bin", b"y")  # queued behind the blocked flush
    threading.Timer(0.3, gate.set).start()
    store.end_background_uploads()
    assert (tmp_path / "b" / "0.bin").read_bytes() == b"x" and not (tmp_path / "b" / "1.bin").exists()
    assert not list((tmp_path / "b").glob("*.tmp")) and not _upload_threads()


def test_local_flush_failure_fails_the_batch(tmp_path, monkeypatch):

    monkeypatch.setenv(OVERLAP_ENV, "1")
    store = LocalStore(tmp_path)

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    uploads = store.background_uploads()
    _write(store, "c.bin", b"data")
    with pytest.raises(OSError, match="No space") as e:
        uploads.finish()
    assert e.value.bench_build_key == str(tmp_path / "c.bin")  # the task's error names the file, not the directory
    assert not (tmp_path / "c.bin").exists() and not list(tmp_path.glob("*.tmp"))


def test_s3_build_with_overlapped_uploads_equals_a_local_build(s3prefix, s3env, monkeypatch, small_recipe,
                                                               demo_kitti, tmp_path):
    from bench_build.build.run import run_build

    monkeypatch.setenv(OVERLAP_ENV, "1")  # the local Ray's workers inherit it
    common = {"source": str(demo_kitti), "workers": 1, "max_frames": 2, "frames_per_shard": 1, "progress": False}
    heads = []  # the driver's HEAD requests (its S3 client is shared by every store of this process)
    open_store(s3prefix).client.meta.events.register("before-call.s3.HeadObject", lambda **kw: heads.append(1))
    remote = run_build(str(small_recipe), out=s3prefix, **common)
    # the finished build's files are checked from one listing, not a HEAD each (42 files here, ~15k for KITTI-C)
    assert len(heads) <= 3
    local = run_build(str(small_recipe), out=tmp_path / "local", **common)
    assert remote.ok and local.ok
    store = open_store(remote.version_dir)
    objects = {o.key: store.read_bytes(o.key) for o in store.list("data")}
    files = {p.relative_to(local.version_dir).as_posix(): p.read_bytes()
             for p in local.version_dir.rglob("*.parquet") if "_ledger" not in p.parts}
    assert objects == files and len(files) == 2 * 21
    # each task records the CPU its uploads took (what `bench --s3-build` reports as the client's share)
    from bench_build.build.ledger import Ledger

    remote_entries = [Ledger(store).done_entry(n) for n in remote.shards_built]
    local_entries = [Ledger(LocalStore(local.version_dir)).done_entry(n) for n in local.shards_built]
    assert all(0 < e["upload_cpu_seconds"] <= e["cpu_seconds"] for e in remote_entries)
    assert all("upload_cpu_seconds" not in e for e in local_entries)


def test_a_local_shard_whose_background_flush_fails_names_the_file_and_records_nothing(tmp_path, monkeypatch,
                                                                                      small_recipe, demo_kitti):
    from bench_build.build.ledger import Ledger
    from bench_build.build.shard import ShardFailed, build_shard
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import BlockSpec
    from bench_build.sources.kitti import KittiSource

    monkeypatch.setenv(OVERLAP_ENV, "1")
    source = KittiSource(demo_kitti)
    spec = BlockSpec(0, 1, tuple(source.list_frames()[:1]))
    real, calls = os.fsync, [0]

    def flaky(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):  # a file's bytes, not a directory's names (`fsync_dir`)
            calls[0] += 1
            if calls[0] == 3:  # the third file's flush, on the background thread
                raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", flaky)
    store = LocalStore(tmp_path / "v")
    with pytest.raises(ShardFailed) as e:
        build_shard(spec, load_recipe(str(small_recipe)), source, store, "f" * 64, "r")
    assert e.value.kind == "resource" and "No space left" in e.value.message
    assert str(tmp_path / "v") in e.value.message and ".parquet" in e.value.message  # the file, not just the dir
    assert Ledger(store).done_entry(spec.name) is None
    assert not list((tmp_path / "v").rglob("*.tmp")) and not _upload_threads()

"""Uploads overlap compute on object storage: a staged file uploads in the background while the next is
written; `finish()` waits for all and reports failures; staging disk stays bounded."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from pipeline.storage import LocalStore, open_store


def _write(store, key: str, data: bytes) -> str:
    with store.staged_file(key) as staged:
        staged.path.write_bytes(data)
    return staged.sha256


def test_background_uploads_land_every_file_and_bound_the_backlog(s3prefix, s3env, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_BUILD_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("BENCH_BUILD_OVERLAP_UPLOADS", "1")
    store = open_store(s3prefix)
    real_upload = store.upload_file
    in_flight, peak, lock = [0], [0], threading.Lock()
    gate = threading.Event()

    def slow_upload(local, key, **kw):  # the first upload waits until the caller has written the next file
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        if key == "f0":
            assert gate.wait(30), "the caller never got to write the next file while f0 was uploading"
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
    assert peak[0] == 1  # one background uploader
    for key, data in blobs.items():
        assert store.read_bytes(key) == data and digests[key] == hashlib.sha256(data).hexdigest()
    assert not list((tmp_path / "staging").glob("*.tmp"))  # staged copies deleted after upload


def test_a_failed_background_upload_is_raised_by_finish(s3prefix, s3env, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_BUILD_STAGING", str(tmp_path / "staging"))
    monkeypatch.setenv("BENCH_BUILD_OVERLAP_UPLOADS", "1")
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


def test_overlap_is_off_unless_asked_for(s3prefix, s3env, monkeypatch):
    monkeypatch.delenv("BENCH_BUILD_OVERLAP_UPLOADS", raising=False)
    assert not open_store(s3prefix).background_uploads().active


def test_local_store_writes_in_place(tmp_path):
    store = LocalStore(tmp_path)
    uploads = store.background_uploads()
    assert not uploads.active
    _write(store, "a/b.bin", b"z")
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"z"  # already in place, before finish()
    uploads.finish()


def test_s3_build_with_overlapped_uploads_equals_a_local_build(s3prefix, s3env, monkeypatch, small_recipe,
                                                               demo_kitti, tmp_path):
    from pipeline.build import run_build

    monkeypatch.setenv("BENCH_BUILD_OVERLAP_UPLOADS", "1")  # the local Ray's workers inherit it
    common = {"source": str(demo_kitti), "workers": 1, "max_frames": 2, "frames_per_shard": 1, "progress": False}
    remote = run_build(str(small_recipe), out=s3prefix, **common)
    local = run_build(str(small_recipe), out=tmp_path / "local", **common)
    assert remote.ok and local.ok
    store = open_store(remote.version_dir)
    objects = {o.key: store.read_bytes(o.key) for o in store.list("data")}
    files = {p.relative_to(local.version_dir).as_posix(): p.read_bytes()
             for p in local.version_dir.rglob("*.parquet") if "_ledger" not in p.parts}
    assert objects == files and len(files) == 2 * 21

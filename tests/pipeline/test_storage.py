"""The storage layer on both backends (a local directory and a real SeaweedFS S3 endpoint)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from bench_build.storage import LocalStore, NotFound, PreconditionFailed, S3Store, StorageError, open_store, redact


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return open_store(f"file://{tmp_path}/root")
    prefix = request.getfixturevalue("s3prefix")
    return open_store(prefix)


def test_server_enforces_auth(seaweed):
    with pytest.raises(Exception, match=r"SignatureDoesNotMatch|AccessDenied"):
        seaweed.client(secret="not-the-secret").list_objects_v2(Bucket=seaweed.bucket)


def test_conditional_writes(store):
    etag = store.put_bytes("d/latest", b"1")
    with pytest.raises(PreconditionFailed):
        store.put_bytes("d/latest", b"2", if_absent=True)
    assert store.read_bytes("d/latest") == b"1"
    new = store.put_bytes("d/latest", b"2", if_match=etag)
    with pytest.raises(PreconditionFailed):  # stale etag: someone else moved it
        store.put_bytes("d/latest", b"3", if_match=etag)
    assert store.get("d/latest") == (b"2", new)
    store.put_bytes("d/other", b"x", if_absent=True)
    assert [o.key for o in store.list("d")] == ["d/latest", "d/other"]
    assert store.list_dirs() == ["d"]
    assert store.get("nope") is None and store.head("nope") is None
    with pytest.raises(NotFound):
        store.read_bytes("nope")


def test_concurrent_create_if_absent_has_one_winner(store):
    for trial in range(3):
        key, wins = f"race/{trial}", []

        def attempt(i: int, key=key, wins=wins) -> None:
            try:
                store.put_bytes(key, f"writer {i}".encode() * 100, if_absent=True)
                wins.append(i)
            except PreconditionFailed:
                pass

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert store.read_bytes(key) == f"writer {wins[0]}".encode() * 100


def test_staged_file_appears_only_when_complete(store, tmp_path):
    with pytest.raises(RuntimeError), store.staged_file("x/part.parquet") as staged:
        staged.path.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert store.head("x/part.parquet") is None
    with store.staged_file("x/part.parquet") as staged:
        staged.path.write_bytes(b"whole file")
    info = store.head("x/part.parquet")
    assert info.size == 10 and staged.size == 10
    assert store.sha256("x/part.parquet") == staged.sha256
    if isinstance(store, S3Store):
        assert info.sha256 == staged.sha256  # recorded as object metadata
    else:
        assert not list(Path(store.root, "x").glob(".*.tmp"))
    store.download_file("x/part.parquet", tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == b"whole file"


def test_urls():
    assert isinstance(open_store("/data/x"), LocalStore)
    assert open_store("file:///data/x").root == Path("/data/x")
    s = open_store("s3://bucket/a/b/")
    assert isinstance(s, S3Store) and (s.bucket, s.prefix) == ("bucket", "a/b")
    assert s.child("kitti-c/1.0.0").url == "s3://bucket/a/b/kitti-c/1.0.0"
    with pytest.raises(StorageError, match="unsupported URL scheme"):
        open_store("gs://bucket/x")
    with pytest.raises(StorageError) as e:
        open_store("s3://AKIA:topsecretvalue@bucket/x")
    assert "topsecretvalue" not in str(e.value)
    with pytest.raises(StorageError, match="escapes"):
        open_store("/tmp/x").path("../etc/passwd")


def test_redact(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-" + uuid.uuid4().hex)
    secret = __import__("os").environ["AWS_SECRET_ACCESS_KEY"]
    assert redact(f"oops {secret} leaked") == "oops *** leaked"


def test_wrong_credentials_give_a_clear_error(s3env, s3prefix, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-1234567")
    store = open_store(s3prefix)
    with pytest.raises(StorageError) as e:
        store.put_bytes("x", b"1")
    assert "denied" in str(e.value) and "credentials" in str(e.value)
    assert "wrong-secret-1234567" not in str(e.value)

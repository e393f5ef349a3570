"""The storage layer on both backends (a local directory and a real SeaweedFS S3 endpoint)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import uuid
from pathlib import Path

import pytest

import bench_build.storage.s3 as storage_s3
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


def test_a_local_delete_is_durable(tmp_path, monkeypatch):
    """A deleted manifest or ledger entry must not come back after a power loss while what replaced it stays: the
    directory is fsynced after each unlink (and after a removed prefix); nothing is fsynced when nothing was there."""
    import bench_build.storage.local as local

    synced: list[Path] = []
    monkeypatch.setattr(local, "fsync_dir", lambda d: synced.append(Path(d)))
    store = LocalStore(tmp_path / "root")
    store.write_text("v/manifest.json", "{}")
    store.write_text("v/data/a/part.parquet", "x")
    synced.clear()
    store.delete("v/manifest.json")
    assert synced == [tmp_path / "root" / "v"] and not store.exists("v/manifest.json")
    store.delete_prefix("v/data")
    assert synced[1:] == [tmp_path / "root" / "v"] and not (tmp_path / "root" / "v" / "data").exists()
    synced.clear()
    store.delete("v/manifest.json")
    store.delete_prefix("v/data")
    assert synced == []


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


# --- server-side copies are checked by the store's bytes, not the source's metadata -------------------------------
def _versions(s3prefix: str, tmp_path: Path, data: bytes) -> tuple[S3Store, S3Store, str]:
    """An object ``f.bin`` uploaded by bench-build under ``<prefix>/v1``, the store ``<prefix>/v2``, its sha256."""
    src, dst = open_store(f"{s3prefix}/v1"), open_store(f"{s3prefix}/v2")
    (tmp_path / "f.bin").write_bytes(data)
    src.upload_file(tmp_path / "f.bin", "f.bin")
    return src, dst, hashlib.sha256(data).hexdigest()


def _no_read_back(monkeypatch) -> None:
    def refuse(self, key, chunk=0):
        raise AssertionError(f"{key} was read back")

    monkeypatch.setattr(S3Store, "iter_chunks", refuse)


def test_a_server_side_copy_is_checked_by_the_checksum_the_store_verified_on_upload(s3prefix, tmp_path,
                                                                                    monkeypatch):
    """SeaweedFS returns no checksum from CopyObject but keeps the upload's SHA-256 with the copy: a HEAD proves
    the copy, no byte is read back."""
    data = os.urandom(300_000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    _no_read_back(monkeypatch)
    assert dst.copy_from(src, "f.bin", "f.bin", sha256=sha) == "server-side"
    assert dst.stored_sha256("f.bin") == sha and dst.head("f.bin").sha256 == sha
    monkeypatch.undo()
    assert dst.read_bytes("f.bin") == data


@pytest.mark.parametrize("how", ["plain PUT", "PUT with its own checksum", "multipart upload"])
def test_a_source_overwritten_under_its_old_metadata_is_not_copied(s3prefix, s3env, tmp_path, how):
    """Another tool replaced v1's object with other bytes of the same size and kept its sha256 metadata: the
    metadata still agrees with the manifest, the bytes do not, and the copy must not stand."""
    import boto3.s3.transfer

    data = os.urandom((5 << 20) + 1000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    other = bytearray(data)
    other[len(other) // 2] ^= 0xFF
    kw = {"Metadata": {"sha256": sha}}
    client = s3env.client()
    if how == "multipart upload":  # its stored SHA-256 is a checksum of part checksums: the copy is read back
        (tmp_path / "other").write_bytes(bytes(other))
        client.upload_file(str(tmp_path / "other"), src.bucket, src._k("f.bin"),
                           ExtraArgs={**kw, "ChecksumAlgorithm": "SHA256"},
                           Config=boto3.s3.transfer.TransferConfig(multipart_threshold=1 << 20,
                                                                       multipart_chunksize=5 << 20))
        assert src.head("f.bin").etag.strip('"').endswith("-2") and src.stored_sha256("f.bin") is None
    else:
        if how == "PUT with its own checksum":
            kw["ChecksumSHA256"] = base64.b64encode(hashlib.sha256(other).digest()).decode()
        client.put_object(Bucket=src.bucket, Key=src._k("f.bin"), Body=bytes(other), **kw)
    assert src.head("f.bin").sha256 == sha  # what the old check compared, and passed
    with pytest.raises(StorageError) as e:
        dst.copy_from(src, "f.bin", "f.bin", sha256=sha)
    assert str(e.value) == (f"{dst.key_url('f.bin')}: the server-side copy of {src.key_url('f.bin')} has sha256 "
                            f"{hashlib.sha256(other).hexdigest()}, not the {sha} its manifest lists (the source's "
                            "bytes changed after it was written); the copy was deleted")
    assert dst.head("f.bin") is None


def _small_parts(monkeypatch) -> None:
    import bench_build.storage.s3 as storage_s3

    monkeypatch.setattr(storage_s3, "MULTIPART_THRESHOLD", 1 << 20)
    monkeypatch.setattr(storage_s3, "MULTIPART_CHUNK", 5 << 20)  # S3's smallest part


def _composite(data: bytes, part: int = 5 << 20) -> tuple[str, int]:
    """S3's composite SHA-256 of a multipart upload of ``data`` in ``part``-byte parts (hex, part count)."""
    parts = [data[i:i + part] for i in range(0, len(data), part)]
    return hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).hexdigest(), len(parts)


def _overwrite_in_parts(s3env, src: S3Store, tmp_path: Path, data: bytes, sha: str) -> None:
    """Another tool replaces ``f.bin`` by a multipart upload of ``data`` in bench-build's layout, each part with
    its SHA-256, keeping the old ``sha256`` metadata."""
    import boto3.s3.transfer

    (tmp_path / "other").write_bytes(data)
    s3env.client().upload_file(str(tmp_path / "other"), src.bucket, src._k("f.bin"),
                               ExtraArgs={"Metadata": {"sha256": sha}, "ChecksumAlgorithm": "SHA256"},
                               Config=boto3.s3.transfer.TransferConfig(multipart_threshold=1 << 20,
                                                                       multipart_chunksize=5 << 20))


def _spy_reads(monkeypatch) -> list[str]:
    """The URLs of the objects read back (hashed here) from now on, in order."""
    read: list[str] = []
    real = S3Store.iter_chunks

    def spy(self, key, *args):
        read.append(self.key_url(key))
        yield from real(self, key, *args)

    monkeypatch.setattr(S3Store, "iter_chunks", spy)
    return read


def test_a_multipart_source_is_copied_server_side_and_read_back(s3prefix, tmp_path, monkeypatch):
    """Without a local file its composite checksum cannot be checked against: the copy comes down once."""
    _small_parts(monkeypatch)
    data = os.urandom((5 << 20) + 1000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    assert src.stored_checksums("f.bin") == (None, _composite(data))
    read = _spy_reads(monkeypatch)
    assert dst.copy_from(src, "f.bin", "f.bin", sha256=sha) == "server-side"
    assert read == [dst.key_url("f.bin")]  # the copy, hashed here; nothing went up from this machine
    assert dst.head("f.bin").sha256 == sha


def test_a_multipart_source_is_checked_by_its_composite_checksum_against_the_local_file(s3prefix, tmp_path,
                                                                                        monkeypatch):
    """What `publish` does with a reused shard over the multipart threshold: the version's own file is hashed in
    bench-build's part layout and matches the composite the copy carries; no byte of the copy comes down."""
    _small_parts(monkeypatch)
    data = os.urandom(2 * (5 << 20) + 1000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    assert src.stored_checksums("f.bin") == (None, _composite(data))  # each part's SHA-256 went up with it
    _no_read_back(monkeypatch)
    assert dst.copy_from(src, "f.bin", "f.bin", sha256=sha, local=tmp_path / "f.bin") == "server-side"
    assert dst.stored_checksums("f.bin") == (None, _composite(data)) and dst.head("f.bin").sha256 == sha
    monkeypatch.undo()
    assert dst.read_bytes("f.bin") == data


@pytest.mark.parametrize("local_too", [False, True])
def test_a_multipart_source_overwritten_in_parts_is_not_copied_by_its_composite(s3prefix, s3env, tmp_path,
                                                                                 monkeypatch, local_too):
    """The source was replaced, in the same part layout and with part checksums, by other bytes under the old
    metadata. Its composite is not the local file's; nor, when the local file was altered the same way, is the
    local file's sha256 the manifest's. Either way the copy is read back, refused and deleted."""
    _small_parts(monkeypatch)
    data = os.urandom(2 * (5 << 20) + 1000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    other = bytearray(data)
    other[len(other) // 2] ^= 0xFF
    _overwrite_in_parts(s3env, src, tmp_path, bytes(other), sha)
    assert src.stored_checksums("f.bin") == (None, _composite(bytes(other))) and src.head("f.bin").sha256 == sha
    if local_too:
        (tmp_path / "f.bin").write_bytes(other)
    read = _spy_reads(monkeypatch)
    with pytest.raises(StorageError) as e:
        dst.copy_from(src, "f.bin", "f.bin", sha256=sha, local=tmp_path / "f.bin")
    assert str(e.value) == (f"{dst.key_url('f.bin')}: the server-side copy of {src.key_url('f.bin')} has sha256 "
                            f"{hashlib.sha256(other).hexdigest()}, not the {sha} its manifest lists (the source's "
                            "bytes changed after it was written); the copy was deleted")
    assert read == [dst.key_url("f.bin")] and dst.head("f.bin") is None


@pytest.mark.parametrize("why", ["another part count", "other parts of the same count", "a sigv4 upload",
                                 "no such file"])
def test_a_composite_that_cannot_be_checked_falls_back_to_reading_back(s3prefix, s3env, tmp_path, monkeypatch,
                                                                      why):
    """A composite over other parts than bench-build's (another part count: the local file is not read; as many
    parts of other sizes: it is, and does not match), an object without one (``BENCH_BUILD_S3_CHECKSUM=sigv4``
    uploads no part checksums), or a local file that is not there: the copy is still checked, by reading it back."""
    import boto3.s3.transfer

    from bench_build.storage import CHECKSUM_ENV

    _small_parts(monkeypatch)
    if why == "a sigv4 upload":
        monkeypatch.setenv(CHECKSUM_ENV, "sigv4")
    data = os.urandom(3 * (5 << 20) - 500_000)  # 3 parts of 5 MB (bench-build's here), or of 6 MB; 2 of 8 MB
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    local = tmp_path / "f.bin"
    part = {"another part count": 8 << 20, "other parts of the same count": 6 << 20}.get(why)
    if part is not None:
        s3env.client().upload_file(str(local), src.bucket, src._k("f.bin"),
                                   ExtraArgs={"Metadata": {"sha256": sha}, "ChecksumAlgorithm": "SHA256"},
                                   Config=boto3.s3.transfer.TransferConfig(multipart_threshold=1 << 20,
                                                                           multipart_chunksize=part))
        assert src.stored_checksums("f.bin") == (None, _composite(data, part))
    elif why == "a sigv4 upload":
        assert src.stored_checksums("f.bin") == (None, None) and src.head("f.bin").etag.strip('"').endswith("-3")
    else:
        local = tmp_path / "gone"
    hashed: list[Path] = []
    real_hash, real_read = storage_s3.sha256_and_composite, S3Store.iter_chunks
    monkeypatch.setattr(storage_s3, "sha256_and_composite", lambda path, part: hashed.append(path) or
                        real_hash(path, part))
    read: list[str] = []

    def spy(self, key, *args):
        read.append(self.key_url(key))
        yield from real_read(self, key, *args)

    monkeypatch.setattr(S3Store, "iter_chunks", spy)
    assert dst.copy_from(src, "f.bin", "f.bin", sha256=sha, local=local) == "server-side"
    assert read == [dst.key_url("f.bin")]
    assert hashed == ([local] if why == "other parts of the same count" else [])


@pytest.mark.parametrize("right", [True, False])
def test_the_checksum_copyobject_returns_decides_when_the_store_computes_one(s3prefix, tmp_path, monkeypatch, right):
    """AWS S3 returns the copy's SHA-256 when CopyObject is asked for one (``ChecksumAlgorithm``); SeaweedFS does
    not, so its answer is given one here: a matching one is trusted alone, another deletes the copy."""
    data = os.urandom(100_000)
    src, dst, sha = _versions(s3prefix, tmp_path, data)
    digest = hashlib.sha256(data if right else b"other bytes").digest()
    real, asked = dst.client.copy_object, []

    def copy_object(**kw):
        asked.append(kw.get("ChecksumAlgorithm"))
        r = real(**kw)
        r["CopyObjectResult"]["ChecksumSHA256"] = base64.b64encode(digest).decode()
        return r

    monkeypatch.setattr(dst.client, "copy_object", copy_object)
    monkeypatch.setattr(S3Store, "stored_checksums", lambda self, key: pytest.fail("the copy's checksum was enough"))
    _no_read_back(monkeypatch)
    if right:
        assert dst.copy_from(src, "f.bin", "f.bin", sha256=sha) == "server-side"
        assert dst.head("f.bin").size == len(data)
    else:
        with pytest.raises(StorageError, match=f"has sha256 {digest.hex()}, not the {sha}"):
            dst.copy_from(src, "f.bin", "f.bin", sha256=sha)
        assert dst.head("f.bin") is None
    assert asked == ["SHA256"]


def test_access_denied_on_a_shard_is_a_permission_failure(s3env, s3prefix, small_recipe, demo_kitti, monkeypatch):
    """A build writing to s3:// whose shard is refused (AccessDenied, a wrong secret) was not an OSError, so its
    kind fell to the closing hint about disk space, memory and the Ray cluster: it is "permission", from the task
    body and from Ray's wrapping of a task's exception alike."""
    from ray.exceptions import RayTaskError

    from bench_build.build.shard import ShardFailed, build_shard
    from bench_build.build.task import describe_task_error
    from bench_build.cli.build_commands import failure_hints
    from bench_build.manifests.recipe import load_recipe
    from bench_build.plan.tasks import plan_shards
    from bench_build.sources.kitti import KittiSource

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-1234567")
    with pytest.raises(ShardFailed) as e:
        build_shard(plan_shards(["000000"], 1)[0], load_recipe(small_recipe), KittiSource(demo_kitti), s3prefix,
                    "f" * 64, "r")
    assert e.value.kind == "permission" and "denied" in e.value.message, e.value.message
    assert "wrong-secret-1234567" not in e.value.message
    from bench_build.storage import AccessDenied  # the storage layer's own type for it

    with pytest.raises(AccessDenied) as denied:
        open_store(s3prefix).put_bytes("x", b"1")
    message, kind = describe_task_error(RayTaskError("build_task", "Traceback …", denied.value))
    assert kind == "permission" and message.startswith(f"{s3prefix}/x: write denied"), message
    hint = " ".join(failure_hints({"part-00000-of-00001": kind}, s3prefix))
    assert "bucket's policy" in hint and "free disk space" not in hint

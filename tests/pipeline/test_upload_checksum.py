"""How an upload proves its bytes, against the real SeaweedFS test server.

A single-PUT upload sends the file's sha256 (the one the ledger and manifest record) as a signed
``x-amz-checksum-sha256`` header and an ``UNSIGNED-PAYLOAD`` signature, so botocore does not hash the body
again; the store must then refuse bytes that do not match. ``BENCH_BUILD_S3_CHECKSUM=sigv4`` goes back to a
payload hash inside the signature. Files above the multipart threshold go up in parts that each carry their own
SHA-256 the same way (botocore hashes the part; the store verifies it and keeps the checksum of the parts'
checksums, by which `S3Store.copy_from` checks a copy against a local file); in ``sigv4`` mode in signed parts.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

import bench_build.storage.s3 as storage_s3
from bench_build.storage import CHECKSUM_ENV, StorageError, open_store


def _file(tmp_path: Path, name: str, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


def _capture(client, sent: list[dict[str, str]], op: str = "PutObject"):
    """Record the headers of every ``op`` request ``client`` sends; returns the unregister callback."""
    def hook(request, **_):
        sent.append({k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()})

    client.meta.events.register(f"before-send.s3.{op}", hook)
    return lambda: client.meta.events.unregister(f"before-send.s3.{op}", hook)


def _signed_headers(headers: dict[str, str]) -> set[str]:
    auth = headers["authorization"]
    return set(auth.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";"))


def test_single_put_sends_the_known_sha256_as_a_signed_checksum(s3prefix, tmp_path):
    store = open_store(s3prefix)
    path, data = _file(tmp_path, "a.bin", 300_000)
    digest = hashlib.sha256(data).hexdigest()
    sent: list[dict[str, str]] = []
    unregister = _capture(store.put_client, sent)
    progressed: list[int] = []
    try:
        store.upload_file(path, "a.bin", sha256=digest, progress=progressed.append)
    finally:
        unregister()
    assert len(sent) == 1
    h = sent[0]
    assert h["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"  # the body is not hashed a second time ...
    assert h["x-amz-checksum-sha256"] == base64.b64encode(bytes.fromhex(digest)).decode()
    assert "x-amz-checksum-sha256" in _signed_headers(h)  # ... its hash is bound to the signature instead
    assert sum(progressed) == len(data)
    assert store.read_bytes("a.bin") == data
    info = store.head("a.bin")
    assert info is not None and info.sha256 == digest and info.size == len(data)
    stored = store.client.head_object(Bucket=store.bucket, Key=store._k("a.bin"), ChecksumMode="ENABLED")
    assert stored.get("ChecksumSHA256") == h["x-amz-checksum-sha256"]
    assert store.upload_cpu_seconds > 0


def test_bytes_that_do_not_match_their_sha256_are_refused(s3prefix, tmp_path):
    """What the header buys: a file that changed after it was hashed (or bytes damaged on the way) is
    refused by the store, not stored under its final name."""
    store = open_store(s3prefix)
    path, data = _file(tmp_path, "b.bin", 200_000)
    recorded = hashlib.sha256(data).hexdigest()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit flipped after hashing
    with pytest.raises(StorageError) as e:
        store.upload_file(path, "b.bin", sha256=recorded)
    assert "do not match the sha256" in str(e.value) and "b.bin" in str(e.value)
    assert store.head("b.bin") is None


def test_sigv4_mode_signs_the_payload_hash(s3prefix, tmp_path, monkeypatch):
    monkeypatch.setenv(CHECKSUM_ENV, "sigv4")
    store = open_store(s3prefix)
    path, data = _file(tmp_path, "c.bin", 100_000)
    sent: list[dict[str, str]] = []
    unregister = _capture(store.client, sent)
    try:
        store.upload_file(path, "c.bin")
    finally:
        unregister()
    assert len(sent) == 1
    assert sent[0]["x-amz-content-sha256"] == hashlib.sha256(data).hexdigest()
    assert not any(k.startswith("x-amz-checksum-") for k in sent[0])
    assert store.read_bytes("c.bin") == data
    monkeypatch.setenv(CHECKSUM_ENV, "md5")
    with pytest.raises(StorageError, match=CHECKSUM_ENV):
        store.upload_file(path, "c2.bin")


@pytest.mark.parametrize("mode", ["sha256", "sigv4"])
def test_a_file_above_the_threshold_goes_up_in_parts(s3prefix, tmp_path, monkeypatch, mode):
    """Each part carries its SHA-256 as a signed header, and its payload is not hashed again for the signature
    (one SHA-256 pass per byte, as before, when the signature hashed it); the store keeps their composite. In
    ``sigv4`` mode the parts' payload hashes are signed and no checksum is sent or kept."""
    monkeypatch.setenv(CHECKSUM_ENV, mode)
    monkeypatch.setattr(storage_s3, "MULTIPART_THRESHOLD", 1 << 20)
    monkeypatch.setattr(storage_s3, "MULTIPART_CHUNK", 5 << 20)  # S3's smallest part
    store = open_store(s3prefix)
    path, data = _file(tmp_path, "d.bin", (5 << 20) + 123_457)
    parts = [data[:5 << 20], data[5 << 20:]]
    sent: list[dict[str, str]] = []
    client = store.put_client if mode == "sha256" else store.client
    unregister = _capture(client, sent, "UploadPart")
    try:
        store.upload_file(path, "d.bin")
    finally:
        unregister()
    info = store.head("d.bin")
    assert info is not None and info.sha256 == hashlib.sha256(data).hexdigest()
    assert info.etag is not None and info.etag.strip('"').endswith("-2")  # a multipart object of 2 parts
    assert store.read_bytes("d.bin") == data
    digests = sorted(hashlib.sha256(p).digest() for p in parts)
    stored = store.client.head_object(Bucket=store.bucket, Key=store._k("d.bin"), ChecksumMode="ENABLED")
    if mode == "sha256":
        assert sorted(base64.b64decode(h["x-amz-checksum-sha256"]) for h in sent) == digests
        assert all(h["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD" and "x-amz-checksum-sha256" in _signed_headers(h)
                   for h in sent)
        composite = hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()
        assert (stored.get("ChecksumSHA256"), stored.get("ChecksumType")) == \
            (f"{base64.b64encode(composite).decode()}-2", "COMPOSITE")
    else:
        assert sorted(bytes.fromhex(h["x-amz-content-sha256"]) for h in sent) == digests
        assert not any(k.startswith("x-amz-checksum-") for h in sent for k in h)
        assert not any(k.startswith("Checksum") for k in stored)


def test_a_transfer_log_line_before_any_byte_says_no_nan(capsys):
    """Off a terminal, an interrupted or store-side-copy-only publish logged "0.0/302.7 MB, 0.0 MB/s, ETA nan s"."""
    from bench_build.build.progress import TransferProgress

    p = TransferProgress(302_700_000, "publish", enabled=True)
    p._log()
    line = capsys.readouterr().err
    assert "nan" not in line and "0.0/302.7 MB, 0.0 MB/s, ETA after the first file" in line
    p.advance(100_000_000)
    p._log()
    assert "ETA " in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "op", "code", "hinted"), [
    ("sha256", "upload", "NotImplemented", True), ("sha256", "upload", "InvalidArgument", True),
    ("sigv4", "upload", "NotImplemented", False), ("sha256", "get", "NotImplemented", False),
    ("sha256", "upload", "InternalError", False)])
def test_a_store_that_refuses_checksums_says_how_to_upload_without(monkeypatch, mode, op, code, hinted):
    """An S3-compatible store without checksum headers or aws-chunked trailers refuses the upload in its own words:
    the one line then says which setting uploads without them (only for an upload, only in sha256 mode)."""
    from botocore.exceptions import ClientError

    monkeypatch.setenv(CHECKSUM_ENV, mode)
    store = storage_s3.S3Store("bench", "v", endpoint_url="http://127.0.0.1:9")
    err = ClientError({"Error": {"Code": code, "Message": "x-amz-trailer is not supported"}}, "UploadPart")
    message = str(store._error(err, "data/f.parquet", op))
    assert message.startswith(f"s3://bench/v/data/f.parquet: {op} failed ({code}): x-amz-trailer is not supported")
    assert (f"set {CHECKSUM_ENV}=sigv4" in message) == hinted

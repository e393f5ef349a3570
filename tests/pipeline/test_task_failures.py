"""A build task that fails for a reason that is neither its input nor the machine: a package missing where the
workers run (refused before anything is written when the driver's own Python lacks it; named with its node when a
worker's does), or an error in bench-build's own code (its traceback kept in the ledger for the bug report)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
import ray.exceptions as rx

from bench_build.build.run import run_build
from bench_build.build.task import describe_task_error, task_traceback
from bench_build.cli.build_commands import failure_hints
from bench_build.errors import UsageError
from bench_build.runtime.ray import (
    TASK_PACKAGES,
    declared_requirements,
    missing_packages_message,
    missing_task_packages,
    requirement_name,
)


def _raised_by_task(cause: BaseException, ip: str = "10.1.2.3") -> BaseException:
    """What ``ray.get`` raises for a task that raised ``cause``: the copy of it whose text is the worker's
    traceback (Ray's own ``as_instanceof_cause``), built without starting Ray."""
    trace = (f"Traceback (most recent call last):\n  File \"task.py\", line 1, in run_shard\n"
             f"{type(cause).__name__}: {cause}")
    return rx.RayTaskError("run_shard", trace, cause, proctitle="ray::run_shard", pid=4242, ip=ip).as_instanceof_cause()


def test_an_import_error_in_a_task_is_the_environment_and_names_the_node():
    e = _raised_by_task(ModuleNotFoundError("No module named 'threadpoolctl'", name="threadpoolctl"))
    message, kind = describe_task_error(e)
    assert kind == "environment"
    assert message.startswith("ModuleNotFoundError: No module named 'threadpoolctl' on node 10.1.2.3: ")
    assert "\n" not in message
    assert "No module named 'threadpoolctl'" in task_traceback(e)


def test_an_unexpected_error_in_a_task_is_internal_and_keeps_its_traceback():
    e = _raised_by_task(KeyError("rows"))
    message, kind = describe_task_error(e)
    assert (message, kind) == ("KeyError: 'rows'", "internal")
    trace = task_traceback(e)
    assert trace.splitlines()[0] == "ray::run_shard() (pid=4242, ip=10.1.2.3)"
    assert trace.splitlines()[-1] == "KeyError: 'rows'" and "in run_shard" in trace
    assert task_traceback(e, lines=1) == "KeyError: 'rows'"
    # a dead worker is no exception of the task's: nothing to keep
    assert task_traceback(rx.WorkerCrashedError()) is None
    assert describe_task_error(rx.WorkerCrashedError())[1] == "resource"


def test_the_closing_hints_follow_the_kinds_of_failure():
    v = "/o/kitti-c/1.0.0"
    assert failure_hints({}, v) == failure_hints({"part-0": "input"}, v)
    assert [h.split(":")[0] for h in failure_hints({"a": "input", "b": "resource"}, v)] == \
        ["fix the input named above and run the same command again", "the input is not at fault"]
    env, = failure_hints({"a": "environment"}, v)
    assert "install bench-build with its dependencies" in env and "disk" not in env
    bug, = failure_hints({"part-00001-of-00004": "internal"}, v)
    assert f"{v}/_ledger/shards/part-00001-of-00004.failed.json" in bug and "bug" in bug and "disk" not in bug
    bug2, = failure_hints({"a": "internal", "b": "internal"}, v)
    assert f"{v}/_ledger/shards/<shard>.failed.json" in bug2
    blocked, = failure_hints({"a": "blocked"}, v)
    assert "something stands in the way of the output named above" in blocked and "disk space" not in blocked
    perm, = failure_hints({"a": "permission"}, v)
    assert "may not write the output file" in perm and "chattr -i" in perm and "disk space" not in perm
    # an OSError raised in a task: permissions (EACCES, EPERM, EROFS, or pyarrow's text without an errno) or not
    for cause, kind in ((PermissionError(errno.EACCES, "Permission denied", "/o/x.parquet"), "permission"),
                        (OSError(errno.EPERM, "Operation not permitted"), "permission"),
                        (OSError(errno.EROFS, "Read-only file system"), "permission"),
                        (OSError("Failed to open local file '/o/x'. Detail: [errno 13] Permission denied"),
                         "permission"),
                        (OSError(errno.ENOSPC, "No space left on device"), "resource"),
                        (OSError(errno.EIO, "Input/output error"), "resource")):
        assert describe_task_error(_raised_by_task(cause))[1] == kind, cause
    # a kind this CLI does not know (a newer worker's) is told as the machine's
    assert failure_hints({"a": "superseded"}, v) == failure_hints({"a": "resource"}, v)


def test_a_package_the_tasks_need_is_refused_before_anything_is_written(monkeypatch, demo_kitti, tmp_path):
    assert missing_task_packages() == []  # this environment has them all
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # what find_spec then reports: not importable
    assert missing_task_packages() == ["threadpoolctl"]
    assert missing_task_packages({"no_such_module_xyz": "no-such-dist", "numpy": "numpy"}) == ["no-such-dist"]
    out = tmp_path / "out"
    with pytest.raises(UsageError) as caught:
        run_build("kitti-c", source=str(demo_kitti), out=str(out), workers=1, max_frames=1, progress=False)
    message = str(caught.value)
    assert message == missing_packages_message(["threadpoolctl"])
    assert f"this Python ({sys.executable}) cannot import threadpoolctl" in message
    assert "pip install 'threadpoolctl>=3.1'" in message
    assert not out.exists()


def test_the_checked_packages_are_what_the_workers_import_and_the_driver_does_not():
    # each is a declared dependency of bench-build, so the install command the message prints is right
    declared = {requirement_name(r) for r in declared_requirements()}
    assert set(TASK_PACKAGES.values()) <= declared and "threadpoolctl" in declared
    # the driver of a build never imports threadpoolctl, so only this check (or the worker) can tell
    code = ("import sys; from bench_build.cli import app\n"
            "from bench_build.build import run\n"
            "print('threadpoolctl' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.stdout.strip() == "False", got.stderr


#: a fake threadpoolctl that only the workers import (the driver never does): what each kind of failure looks like
FAKE = {"environment": "raise ModuleNotFoundError(\"No module named 'threadpoolctl'\", name='threadpoolctl')\n",
        "internal": "raise RuntimeError('boom in a worker')\n"}


@pytest.mark.parametrize("kind", sorted(FAKE))
def test_a_worker_failing_on_its_environment_or_a_bug_says_which(kind, demo_kitti, tmp_path):
    # environment: the driver finds threadpoolctl, each worker fails to import it (what a cluster node with another
    # environment does); internal: an exception in bench-build's own code. Both end with exit 1, their own hint and
    # the worker's traceback kept in the ledger; `status` points at it for a bug
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "threadpoolctl.py").write_text(FAKE[kind])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "bench_build.cli"]
    run = subprocess.run([*cli, "run", "kitti-c", "--source", str(demo_kitti), "--out", str(out), "--workers", "1",
                          "--max-frames", "1", "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1, run.stderr
    text = run.stdout + run.stderr
    assert "free disk space" not in text and "Traceback" not in text
    entry_file = out / "kitti-c/1.0.0/_ledger/shards/part-00000-of-00001.failed.json"
    entry = json.loads(entry_file.read_text())
    assert entry["kind"] == kind and "in openblas_cores" in entry["traceback"]
    status = subprocess.run([*cli, "status", "kitti-c", "--out", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0, status.stderr
    if kind == "environment":
        assert "FAILED part-00000-of-00001: ModuleNotFoundError: No module named 'threadpoolctl' on node " in text
        assert "install bench-build with its dependencies in the Python the workers run" in text
        assert entry["traceback"].splitlines()[-1] == "ModuleNotFoundError: No module named 'threadpoolctl'"
        assert "a bug" not in status.stdout
    else:
        assert "FAILED part-00000-of-00001: RuntimeError: boom in a worker\n" in text
        assert f"a bug). The worker's traceback is in {entry_file} (\"traceback\")" in " ".join(text.split())
        assert entry["traceback"].splitlines()[-1] == "RuntimeError: boom in a worker"
        assert f"the worker's traceback is in {entry_file})" in " ".join(status.stdout.split())

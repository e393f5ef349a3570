"""A `bench-build run` killed with SIGKILL leaves no Ray process behind (issue 29, defect 7).

Ray's dashboard and runtime-env agents outlived a killed driver by ≈ 61 s (they report the raylet's death to
the dead GCS and wait out a 60 s call); pipeline/runtime/reaper.py's watcher kills them as soon as the driver is gone,
and leaves on its own after a normal run."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench_build.runtime import reaper

pytestmark = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                                reason="the watcher needs Linux /proc children lists")


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _tree(pid: int) -> dict[int, int | None]:
    """Descendants of ``pid`` with their start times (to tell a reused pid)."""
    return {d: reaper._start_time(d) for d in reaper._descendants([pid])}


def _alive(tree: dict[int, int | None]) -> dict[int, str]:
    return {pid: _cmd(pid) for pid, t in tree.items() if t is not None and reaper._start_time(pid) == t}


def _kill(tree: dict[int, int | None]) -> None:
    for pid in _alive(tree):  # only processes this test started, by pid
        os.kill(pid, signal.SIGKILL)


def _run(recipe: Path, source: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench_build.cli", "run", str(recipe), "--source", str(source),
                             "--out", str(out), "--workers", "2", "--max-frames", "4", "--frames-per-shard", "1",
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _wait(cond, timeout: float) -> bool:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_killed_driver_leaves_no_ray_process_and_a_normal_run_leaves_no_watcher(small_recipe, demo_kitti, tmp_path):
    out = tmp_path / "out"
    shards = out / "mini-c" / "0.1.0" / "_ledger" / "shards"
    first = _run(small_recipe, demo_kitti, out)
    tree: dict[int, int | None] = {}
    try:
        assert _wait(lambda: (shards.is_dir() and any(shards.glob("*.json"))) or first.poll() is not None, 120)
        assert first.poll() is None, first.communicate()[1].decode()[-2000:]
        tree = _tree(first.pid)
        names = " ".join(_alive(tree).values())
        assert "ray::DashboardAgent" in names and "ray::RuntimeEnvAgent" in names and "reaper.py" in names, names
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert _wait(lambda: not _alive(tree), 10), f"alive 10 s after the driver's kill: {_alive(tree)}"
    finally:
        _kill(tree)
        if first.poll() is None:
            first.kill()

    second = _run(small_recipe, demo_kitti, out)  # resumes, to the end
    tree = {}
    try:
        assert _wait(lambda: any("reaper.py" in _cmd(c) for c in reaper.children(second.pid))
                     or second.poll() is not None, 120)
        tree = _tree(second.pid)
        assert second.wait(timeout=300) == 0, second.stderr.read().decode()[-2000:]
        assert _wait(lambda: not _alive(tree), 10), f"left behind by a normal run: {_alive(tree)}"
    finally:
        _kill(tree)
        if second.poll() is None:
            second.kill()


def test_the_watcher_lists_descendants_every_poll_while_ray_starts_and_seldom_after(monkeypatch):
    """Listing a Ray's descendants reads every thread of every Ray process: every `POLL_S` it kept the watcher at
    ≈ 1 % of a core for as long as Ray ran. It lists them every poll while Ray starts (its agents start then),
    then every `SCAN_S`, and checks the driver and the roots every poll throughout."""
    clock = [0.0]
    listed: list[float] = []
    polls = 0

    def sleep(s: float) -> None:
        nonlocal polls
        polls += 1
        clock[0] += s
        if clock[0] >= 30:
            roots.clear()  # Ray shut down: the watch ends

    roots = [12345]
    monkeypatch.setattr(reaper.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(reaper.time, "sleep", sleep)
    monkeypatch.setattr(reaper, "_start_time", lambda pid: 1 if pid in roots else None)
    monkeypatch.setattr(reaper, "_descendants", lambda alive: listed.append(clock[0]) or set())
    reaper.watch(os.getppid(), list(roots))
    assert polls == 30 / reaper.POLL_S  # the driver and the roots: every poll
    starting = [t for t in listed if t < reaper.STARTING_S]
    assert starting == [i * reaper.POLL_S for i in range(int(reaper.STARTING_S / reaper.POLL_S))]
    after = [t for t in listed if t >= reaper.STARTING_S]
    assert after and all(b - a == reaper.SCAN_S for a, b in itertools.pairwise(after))
    assert len(after) == len(range(int(reaper.STARTING_S), 30, int(reaper.SCAN_S)))

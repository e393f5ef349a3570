"""Reap a local Ray's leftover processes when the driver that started it is killed (``kill -9``).

Ray ties its node processes (GCS, raylet, monitors) to the driver with ``PR_SET_PDEATHSIG``, so they die with
it, and idle workers notice their raylet is gone within ≈ 2 s. Two processes the raylet starts, the dashboard
agent and the runtime-env agent, do notice at once but then report the raylet's death to the GCS (dead as
well) and wait out that call's hard-coded 60 s timeout (`ray._private.utils.publish_error_to_driver`), so
they outlived a killed driver by ≈ 61 s (measured with Ray 2.60). No Ray option shortens that call
(``RAY_gcs_rpc_server_reconnect_timeout_s`` does not), and Ray's own reaper (for systems without
``PR_SET_PDEATHSIG``) kills the driver's whole process group, which in a shell pipeline holds other programs.

So `start` launches this file as a small watcher (stdlib only, run by path so it imports nothing of
bench-build): every `POLL_S` it checks that the driver lives, and it records the descendants of the Ray processes
the driver's ``ray.init`` started (pid and kernel start time), every `POLL_S` while Ray starts its agents and
workers (`STARTING_S`), every `SCAN_S` after that; when its parent, the driver, is gone it SIGKILLs those still
alive (the start time guards against a reused pid) and exits. When the Ray processes are all gone while the
driver lives (a normal ``ray.shutdown``) it exits without touching anything. It ignores SIGINT, so a Ctrl-C in
the terminal reaches the driver (which shuts Ray down) and not the watcher. Linux only (``/proc``); elsewhere it
is not started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5
#: the descendants are listed every `POLL_S` for this long after the watch starts (the agents start in it), then
#: every `SCAN_S`: a listing reads every thread's children of every Ray process (≈ 5 ms); at every `POLL_S` it kept
#: the watcher at ≈ 1 % of a core for as long as Ray ran (0.66 CPU-s a minute, an idle local Ray's largest share
#: after its two idle workers; measured on 2 cores, 2026-11-29). A worker started later and unlisted still ends
#: by itself within ≈ 2 s of its raylet's death
STARTING_S, SCAN_S = 10.0, 5.0
#: the watchers this process started: kept referenced, so that no Popen is collected (and warned about) while its
#: watcher still runs
_WATCHERS: list[subprocess.Popen] = []


def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it no longer exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the command name may hold spaces and ')'


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's, as /proc lists them per thread)."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _descendants(roots: list[int]) -> set[int]:
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def watch(driver: int, roots: list[int]) -> None:
    """Until the driver dies (then kill what Ray left) or every root is gone (then leave)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    known = {pid: t for pid in roots if (t := _start_time(pid)) is not None}
    began, scanned = time.monotonic(), float("-inf")
    while True:
        if os.getppid() != driver:  # the driver died: we were handed to init (or a subreaper)
            for pid, started in known.items():
                if _start_time(pid) == started:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            return
        alive = [pid for pid in roots if _start_time(pid) == known.get(pid)]
        if not alive:  # Ray was shut down; its processes end by themselves
            return
        now = time.monotonic()
        if now - scanned >= (POLL_S if now - began < STARTING_S else SCAN_S):
            scanned = now
            for pid in _descendants(alive) - known.keys():
                if (t := _start_time(pid)) is not None:
                    known[pid] = t
        time.sleep(POLL_S)


def start(roots: list[int]) -> subprocess.Popen | None:
    """Watch the Ray processes ``roots`` (the driver's children that ``ray.init`` started) from a separate
    process; None where /proc cannot tell children (not Linux), or there is nothing to watch."""
    if not roots or not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        return None
    _WATCHERS[:] = [w for w in _WATCHERS if w.poll() is None]  # reap finished ones (no zombies pile up)
    watcher = subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()),
                                *map(str, roots)], stdin=subprocess.DEVNULL, close_fds=True)
    _WATCHERS.append(watcher)
    return watcher


if __name__ == "__main__":
    watch(int(sys.argv[1]), [int(a) for a in sys.argv[2:]])

"""Who holds a version: writer lock and lease names, owner tags, and clean-up of dead writers' temp files."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LOCK_NAME = ".bench-build.lock"  # local writer lock (a dot file: never listed, published or read as data)


LEASE_NAME = "_lease.json"  # S3 writer lease, beside the version's data (never listed in a manifest)


LEASE_TTL = 120.0  # seconds a lease lives without renewal; the holder renews every TTL / 4


# seconds a temp file must have gone unchanged before a holder of the version's writer lock removes it whatever
# its owner: a live writer changes its temp at least once a row group (seconds) and renames it seconds after its
# last write; a worker of an earlier, killed driver is ended by Ray within about a minute (its raylet, cut off
# from the GCS, exits after 60 s); the rest covers clock skew between this host and the file server (mtime is
# the server's clock). Its cost: a dead host's temp files wait for the first run at least this long after.
TEMP_IDLE = 15 * 60.0


# -- owners (who writes a temp file or holds a lock) ------------------------------------------------
def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"


def owner_tag() -> str:
    """``<host>~<pid>`` of this process: part of every temp file name, so its liveness can be checked."""
    return f"{host_name()}~{os.getpid()}"


def owner_info(purpose: str) -> dict[str, Any]:
    return {"host": host_name(), "pid": os.getpid(), "purpose": purpose, "id": uuid.uuid4().hex,
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_dead(host: Any, pid: Any) -> bool:
    """True only when the owner is known dead: a process of this host that no longer exists."""
    return host == host_name() and isinstance(pid, int) and pid > 0 and not pid_alive(pid)


_TEMP_OWNER = re.compile(r"\.([A-Za-z0-9_-]+)~(\d+)\.[^.]+\.tmp$")


def temp_owner_dead(name: str) -> bool:
    """May the temp file ``name`` be removed? Only if its owner is dead (untagged legacy temps: yes)."""
    m = _TEMP_OWNER.search(name)
    if m is None:
        return True
    return owner_dead(m.group(1), int(m.group(2)))


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def temp_idle(path: Path, cutoff: float) -> bool:
    """Has nothing written, linked or renamed ``path`` since ``cutoff`` (epoch seconds)? False if it is gone."""
    try:
        st = path.stat()
    except OSError:
        return False
    return max(st.st_mtime, st.st_ctime) < cutoff


def remove_dead_temps(directory: Path, pattern: str = ".*.tmp", *, recursive: bool = False,
                      idle: float | None = None) -> int:
    """Delete temp files under ``directory`` whose owner process is dead; return how many.

    ``idle`` (seconds; only for a caller that holds the writer lock of the version ``directory`` is in, so no
    other run writes there): also delete every temp file unchanged for that long, whatever its owner. That is how
    a temp file of a writer on another host, whose death `owner_dead` cannot see, or of a pid this host has
    since reused (after a reboot), is removed. A live writer it might still catch (a worker of an earlier,
    killed driver; a stopped process) writes nothing under a final name then: its rename fails."""
    if not directory.is_dir():
        return 0
    cutoff = time.time() - idle if idle is not None else None
    n = 0
    for p in (directory.rglob(pattern) if recursive else directory.glob(pattern)):
        if p.is_file() and (temp_owner_dead(p.name) or (cutoff is not None and temp_idle(p, cutoff))):
            p.unlink(missing_ok=True)
            n += 1
    return n


def describe_holder(where: str, other: dict[str, Any]) -> str:
    return (f"{where} is being written by another {other.get('purpose', 'process')}: pid {other.get('pid', '?')} "
            f"on {other.get('host', '?')} since {other.get('started', '?')} ({other.get('command', '?')}); "
            "wait for it to finish, or stop it and run again")


def elsewhere_hint(other: dict[str, Any]) -> str:
    """What frees a file lock (``flock``) whose holder runs on another host, should that host be down: no process
    here can break it, the file server frees it. Empty for a holder on this host (the kernel frees its lock)."""
    if other.get("host") in (None, host_name()):
        return ""
    return (f"; {other.get('host')} is another host: if it is down, the shared file system frees its lock, NFSv4 "
            "once that host's lease expires (90 s by default), NFSv3 when that host reboots")

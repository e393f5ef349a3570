"""Who holds a version: writer lock and lease names, owner tags, and clean-up of dead writers' temp files."""

from __future__ import annotations

import os
import re
import socket
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LOCK_NAME = ".bench-build.lock"  # local writer lock (a dot file: never listed, published or read as data)


LEASE_NAME = "_lease.json"  # S3 writer lease, beside the version's data (never listed in a manifest)


LEASE_TTL = 120.0  # seconds a lease lives without renewal; the holder renews every TTL / 4


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


def remove_dead_temps(directory: Path, pattern: str = ".*.tmp", *, recursive: bool = False) -> int:
    """Delete temp files under ``directory`` whose owner process is dead; return how many."""
    if not directory.is_dir():
        return 0
    n = 0
    for p in (directory.rglob(pattern) if recursive else directory.glob(pattern)):
        if p.is_file() and temp_owner_dead(p.name):
            p.unlink(missing_ok=True)
            n += 1
    return n


def describe_holder(where: str, other: dict[str, Any]) -> str:
    return (f"{where} is being written by another {other.get('purpose', 'process')}: pid {other.get('pid', '?')} "
            f"on {other.get('host', '?')} since {other.get('started', '?')} ({other.get('command', '?')}); "
            "wait for it to finish, or stop it and run again")

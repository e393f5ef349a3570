"""The Ray task of a build: one `TaskSpec` built by `build.shard.build_shard`, and how its failures are told.

Runs in a Ray worker; returns only the small ledger entry (and the contact sheet's panels for block 0)."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import Any

from bench_build.build.ledger import Ledger
from bench_build.build.shard import ShardFailed, build_shard, os_error_kind, os_error_message
from bench_build.manifests.recipe import Recipe
from bench_build.plan.tasks import BlockSpec
from bench_build.runtime.faults import kill_point
from bench_build.runtime.numeric import check_profile
from bench_build.runtime.ray import pin_worker_threads, spare_pandas_import
from bench_build.sources.demo.cache import is_demo_root
from bench_build.storage import AccessDenied, Store, StoreSpec, open_store, redact

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_shard(spec: BlockSpec, recipe: Recipe, source: Any, root: StoreSpec, fingerprint: str, run_id: str,
               board: Any = None, owner: dict[str, Any] | None = None, encoding: str = "full",
               numeric_profile: dict[str, Any] | None = None,
               reused_files: list[dict[str, Any]] | None = None) -> dict:
    """Ray task body: build one shard, or record why it failed. Never raises for bad input.

    ``root`` is a secret-free `StoreSpec`: a worker reads credentials from its own AWS chain. ``owner`` is
    the driver's writer-lock record: a task whose run is over (driver dead, lock taken over) writes nothing,
    so a killed run's surviving workers never race the next run. ``numeric_profile``: the build's
    (`runtime.numeric.build_profile`); a worker computing under another one (a node whose NumPy still dispatches
    AVX-512, other library versions …) fails the shard, naming the node and the difference, and writes nothing."""
    pin_worker_threads()
    spare_pandas_import()
    store = open_store(root)
    if (missing := missing_on_this_node(store if owner is not None else None, source)) is not None:
        # nothing is written here (a local --out would be created on this node's own disk): the driver records it
        return {"shard": spec.name, "ok": False, "error": missing, "kind": "resource", "record": True}
    if owner is not None and not store.still_writer(owner):
        return {"shard": spec.name, "ok": False, "error": "superseded: the run that started this task no longer "
                "holds the version's writer lock", "kind": "resource"}
    ledger = Ledger(store)
    mismatch = check_profile(numeric_profile)
    if mismatch is not None:
        record_failure(ledger, spec.name, {"shard": spec.name, "error": mismatch, "kind": "resource",
                                            "run_id": run_id})
        return {"shard": spec.name, "ok": False, "error": mismatch, "kind": "resource"}
    on_file = None
    panels: dict = {}
    if board is not None:  # `build.progress.ProgressBoard`: the examples written so far, for the driver's bar
        board.start(spec.name)

        def on_file(rows: int) -> None:
            board.add(spec.name, rows)
    try:
        kill_point("before-record", spec.name)
        entry = build_shard(spec, recipe, source, store, fingerprint, run_id, on_file,
                            before_commit=None if owner is None else lambda: store.still_writer(owner),
                            encoding=encoding, panels=panels, numeric_profile=numeric_profile,
                            reused_files=reused_files)
        kill_point("after-record", spec.name)
        return {"shard": spec.name, "ok": True, "entry": entry, **({"panels": panels} if panels else {})}
    except ShardFailed as e:
        if e.kind == "superseded":  # this run is over: write nothing more into the version
            return {"shard": spec.name, "ok": False, "error": e.message, "kind": "resource"}
        record_failure(ledger, spec.name, {"shard": spec.name, "error": e.message, "path": e.path,
                                            "kind": e.kind, "run_id": run_id})
        return {"shard": spec.name, "ok": False, "error": e.message, "kind": e.kind}



def missing_on_this_node(store: Store | None, source: Any) -> str | None:
    """Why this worker cannot build here, if its node lacks the build's local folders: the driver had them (it
    checked the source, and took the writer lock in the version's folder, before any task ran), so on a Ray cluster
    of several machines this node does not see the driver's disk. None when both are there (or are object storage).
    ``store``: the version, when the task runs under the driver's lock (None: not checked)."""
    node = socket.gethostname()
    if store is not None and store.is_local and not Path(store.spec.url).is_dir():
        return (f"--out {store.spec.url} does not exist on node {node}: on a Ray cluster of several machines, "
                "--out must be a folder every node sees (a shared file system) or an s3:// URL")
    root = getattr(source, "root", None)
    if isinstance(root, (str, Path)) and "://" not in str(root) and not Path(root).exists():
        if is_demo_root(root):  # no --source: the demo data was generated on the driver's machine
            return (f"the demo data {root} does not exist on node {node}: it is generated on the machine that runs "
                    "`bench-build run`; on a Ray cluster of several machines, pass --source with a folder every node "
                    "sees")
        return (f"--source {root} does not exist on node {node}: on a Ray cluster of several machines, the "
                "source must be a folder every node sees (a shared file system or the same copy on each)")
    return None


def record_failure(ledger: Ledger, shard: str, entry: dict[str, Any]) -> None:
    """Record a failed shard in the ledger; if even that fails (the disk is full), say so on stderr and go on:
    recording a failure must never turn into a crash of its own."""
    try:
        ledger.record_failed(shard, entry)
    except Exception as e:
        print(f"[bench-build] could not record the failure of {shard} in the ledger "
              f"({os_error_message(e) if isinstance(e, OSError) else redact(str(e))}); it was: {entry['error']}",
              file=sys.stderr, flush=True)


def ledger_read(ledger: Ledger, shard: str) -> dict[str, Any] | None:
    try:
        return ledger.done_entry(shard)
    except Exception:  # unreadable (e.g. the store is gone): not done
        return None


def describe_task_error(e: BaseException) -> tuple[str, str]:
    """(one line naming the root cause, kind) of an exception ``ray.get`` raised for a shard task.

    kind: "resource" (disk, memory, a dead worker or node: the input is fine), "permission" or "blocked" (the output
    may not be written, or a file stands where a folder must be: `os_error_kind`), "environment" (the worker's
    Python lacks a package, or one fails to import) or "internal" (an error in bench-build's own code)."""
    import ray.exceptions as rx

    ip = task_node(e)
    for _ in range(5):  # unwrap RayTaskError(OSError) → the OSError raised in the worker
        cause = getattr(e, "cause", None)
        if isinstance(e, rx.RayTaskError) and isinstance(cause, BaseException) and cause is not e:
            e = cause
        else:
            break
    if isinstance(e, OSError):
        return os_error_message(e), os_error_kind(e)
    if isinstance(e, AccessDenied):  # object storage refused the credentials or the write (a bucket policy)
        return redact(first_line(str(e))), "permission"
    if isinstance(e, rx.OutOfMemoryError):
        return "worker killed by Ray's memory monitor (out of memory; retries exhausted)", "resource"
    if isinstance(e, rx.OutOfDiskError):
        return "Ray's local disk is full (object store spilling); retries exhausted", "resource"
    if isinstance(e, rx.NodeDiedError | rx.LocalRayletDiedError | rx.OwnerDiedError | rx.ObjectLostError):
        return f"Ray node died ({type(e).__name__}): the raylet or the machine running the shard is gone", "resource"
    if isinstance(e, rx.WorkerCrashedError):
        return "worker died (retries exhausted): its process exited unexpectedly (killed, out of memory or " \
               "crashed in native code)", "resource"
    if isinstance(e, rx.RaySystemError | rx.TaskCancelledError | rx.ActorDiedError):
        return f"Ray failure ({type(e).__name__}): {first_line(str(e))}", "resource"
    if isinstance(e, ImportError):  # the node's environment, not the code: say which node
        where = f" on node {ip}" if ip else ""
        return (redact(first_line(f"{type(e).__name__}: {e}")) + f"{where}: the Python that runs bench-build's workers"
                f"{' there' if ip else ''} lacks a package (or one fails to import)"), "environment"
    if isinstance(e, rx.RayTaskError):  # an exception in the task body that is not an OSError
        cause = getattr(e, "cause", None)
        text = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
        return redact(first_line(text)), "internal"
    return redact(first_line(f"{type(e).__name__}: {e}")), "internal"


def task_traceback(e: BaseException, lines: int = 60) -> str | None:
    """The worker's traceback of a task that raised (its last ``lines`` lines, colour codes and credentials taken
    out): what a bug report needs. None for a failure that is not an exception in the task (a dead worker)."""
    import ray.exceptions as rx

    if not isinstance(e, rx.RayTaskError):
        return None
    # what ``ray.get`` raises is a copy of the task's exception whose text is the worker's traceback
    text = str(e) if not isinstance(getattr(e, "traceback_str", None), str) else e.traceback_str
    if not text.strip():
        return None
    return redact("\n".join(ANSI.sub("", text).rstrip().splitlines()[-lines:]))


def task_node(e: BaseException) -> str | None:
    """The address of the node whose worker raised ``e`` (Ray writes it into the traceback's first line)."""
    ip = getattr(e, "ip", None)
    if isinstance(ip, str) and ip:
        return ip
    m = re.search(r"\(pid=\d+, ip=([^)\s]+)\)", ANSI.sub("", str(e).split("\n", 1)[0]))
    return m.group(1) if m else None


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in ANSI.sub("", text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


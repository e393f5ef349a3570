"""The scheduling loop of a build: at most ``2 × workers`` tasks in flight, outcomes recorded as they come.

The driver never touches point data: Ray tasks read frames, run the stages and write Parquet themselves, and
return only their small ledger entries, so the driver's memory stays flat whatever the dataset size."""

from __future__ import annotations

import time
import uuid
from typing import Any

from bench_build.build.ledger import Ledger
from bench_build.build.progress import ProgressBoard
from bench_build.build.task import describe_task_error, ledger_read, record_failure, run_shard, task_traceback
from bench_build.plan.tasks import TaskSpec
from bench_build.runtime.ray import RAYLET_GONE_GRACE_S, hold_until_stopped, raylet_death, worker_environment
from bench_build.storage import Store


def execute(pending, recipe, src, store: Store, fingerprint, result, bar, owner=None,
             encoding: str = "full", raylet: Any = None, numeric_profile: dict[str, Any] | None = None,
             pinned_by_env: bool = False, reused_files: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Run ``pending`` on Ray, recording each outcome in ``result``.

    ``raylet``: the local raylet's process, watched every second. When it dies Ray loses the driver's object
    store and, once the GCS declares the node dead (13 s later in a test), terminates this process from C++ (no Python
    runs then); releasing an object that store held does the same at once. So the driver does not wait: it keeps
    its object references until Ray is stopped, reports every unfinished shard as failed with the cause (shards
    the ledger recorded count as built; if that is all of them, the build goes on to its manifest) and returns,
    so the summary is printed first."""
    import ray

    run_id = uuid.uuid4().hex[:12]
    # the numeric pin per task too, unless this build started the local Ray with the pin in its environment
    # (`init_ray`): a Ray the caller started, or a cluster, still runs it pinned (and every task checks its profile)
    options: dict[str, Any] = {} if pinned_by_env else {"runtime_env": {"env_vars": worker_environment()}}
    task = ray.remote(num_cpus=1, max_retries=3, **options)(run_shard)
    recipe_ref, src_ref = ray.put(recipe), ray.put(src)
    max_in_flight = max(2, int(2 * ray.cluster_resources().get("CPU", 1)))
    board = ProgressBoard(run_id) if bar.enabled else None
    base, finished_rows = bar.done, 0  # the bar = base + rows of finished shards + rows of running ones
    queue = list(pending)
    in_flight: dict[Any, TaskSpec] = {}
    ledger = Ledger(store)

    def finish(spec: TaskSpec, res: dict[str, Any]) -> None:
        nonlocal finished_rows
        if not res["ok"]:
            # the worker may have finished and recorded the shard before it (or its node) died: the ledger decides
            entry = ledger_read(ledger, spec.name)
            if entry is not None and entry.get("run_id") == run_id and entry.get("fingerprint") == fingerprint:
                res = {"shard": spec.name, "ok": True, "entry": entry}
            elif res.get("record"):
                record_failure(ledger, spec.name, {"shard": spec.name, "error": res["error"],
                                                    "kind": res["kind"], "run_id": run_id,
                                                    **({"traceback": res["traceback"]} if "traceback" in res else {})})
        if res["ok"]:
            started, pid = res["entry"].get("started"), res["entry"].get("pid")
            if started is not None and pid is not None:  # each worker's first task: when it could start working
                result.first_task_starts[pid] = min(started, result.first_task_starts.get(pid, started))
            result.shards_built.append(spec.name)
            result.sheet_panels.update(res.get("panels") or {})
            if result.early_sheet is not None:
                result.early_sheet.poll(result.sheet_panels)
            finished_rows += sum(f["rows"] for f in res["entry"]["files"])
        else:
            result.failures[spec.name] = res["error"]
            result.failure_kinds[spec.name] = res.get("kind", "input")
            bar.fail(spec.name, res["error"])

    def fail_the_rest(message: str, kind: str, raylet_died: bool) -> None:
        """Every shard not finished has failed with this cause (those the ledger recorded count as built)."""
        if raylet_died:
            result.node_died = message
            # its object store held these: releasing one now would end this process (`hold_until_stopped`)
            hold_until_stopped(recipe_ref, src_ref, *in_flight)
            time.sleep(RAYLET_GONE_GRACE_S)  # its workers notice and exit: none records a shard after the reads
        for spec in [*in_flight.values(), *queue]:
            finish(spec, {"shard": spec.name, "ok": False, "error": message, "kind": kind, "record": True})

    while queue or in_flight:
        try:
            while queue and len(in_flight) < max_in_flight:
                spec = queue.pop(0)
                in_flight[task.remote(spec, recipe_ref, src_ref, store.spec, fingerprint, run_id, board,
                                      owner, encoding, numeric_profile,
                                      (reused_files or {}).get(spec.name))] = spec
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        except Exception as e:  # Ray itself is gone: every shard not recorded as done has failed with that cause
            dead = raylet_death(raylet, 1.0)
            if dead:
                fail_the_rest(dead, "resource", raylet_died=True)
            else:
                fail_the_rest(*describe_task_error(e), raylet_died=False)
            return
        dead = raylet_death(raylet)
        if dead:
            fail_the_rest(dead, "resource", raylet_died=True)
            return
        # a finished task's result stays referenced until Ray stops: dropping it later (when `done` is rebound after
        # the next wait) while the raylet is dead would end this process before its summary (`hold_until_stopped`)
        hold_until_stopped(*done)
        for ref in done:
            try:
                res = ray.get(ref)
            except Exception as e:  # the task crashed after its retries (a worker or node died, disk full …)
                # an exception raised in the task body (RayTaskError) is the task's own; anything else may be the
                # local raylet's death, seen by the worker first
                dead = raylet_death(raylet, 0.0 if isinstance(e, ray.exceptions.RayTaskError) else 1.0)
                if dead:  # the whole local node, not this task: every unfinished shard fails with that cause
                    fail_the_rest(dead, "resource", raylet_died=True)
                    return
                message, kind = describe_task_error(e)
                res = {"shard": in_flight[ref].name, "ok": False, "error": message, "kind": kind, "record": True}
                if kind in ("internal", "environment") and (trace := task_traceback(e)) is not None:
                    res["traceback"] = trace  # in the ledger's failed entry: what a bug report needs
            finish(in_flight.pop(ref), res)
        running = board.snapshot([s.name for s in in_flight.values()]) if board is not None and in_flight and \
            (raylet is None or raylet.poll() is None) else {}
        bar.update_to(base + finished_rows + sum(running.get(s.name, 0) for s in in_flight.values()))
    if board is not None and not pinned_by_env:  # a Ray this build did not start keeps its GCS: clear our keys
        board.clear()

"""`bench-build bench scale`: the same frames built at 1, 2, … N workers, side by side with `plan`'s prediction.

For each worker count: wall time, the build's own phases (Ray start, tasks, finish), the tasks' CPU and where
their time went (the ledger's per-task `split`: read, compute, encode, Parquet, commit, waiting), speed-up over
the first count, utilisation = the first count's task CPU per worker-count ÷ (N × wall) (with 1 as the first
count: the 1-worker task CPU ÷ (N × wall), the share of N cores the build keeps busy), and `plan`'s predicted wall
and utilisation. The tasks' CPU against the first count's is shown twice: as measured (``CPU ×``) and without
each worker process's one-off warm-up (``w/o warm``, `work_cpu`), which N workers pay N times.

``--control`` first runs two plain NumPy loops (no bench-build code, `bench.control`) in 1 and then N processes at
once: the CPU each copy needs at N against 1 is what the hardware alone inflates (shared cores, caches, memory
bandwidth, a hypervisor's neighbours), the floor any build's task inflation is compared with. Every result
records the machine's `cpu_topology` (logical CPUs, physical cores, model).

``--costs-out`` merges what was measured (Ray start, worker start, the driver's finish, the task CPU inflation at
full occupancy without the warm-up) into a cost table as its ``runtime``, which `plan` and the local group choice
then use (`bench_build.plan.tasks.Runtime`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_build.bench.control import cpu_topology, describe, run_control
from bench_build.bench.costs import other_machine_note
from bench_build.build.run import DEMO_FRAMES, run_build
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.costs import load_costs
from bench_build.plan.scale import plan_build
from bench_build.sources.demo.kitti import ensure_demo_source, mark_demo


def frames_source(frames: int, work: Path, source: str | None = None) -> str:
    """A KITTI-layout root with ``frames`` frames: ``source`` (or the 8-frame demo), its frames copied under new
    ids (new keys, so new RNG streams: real work) when more are needed."""
    root = Path(source) if source else ensure_demo_source(DEMO_FRAMES).root
    velo = sorted((root / "training" / "velodyne").glob("*.bin"))
    if frames <= len(velo):
        return str(root)
    out = work / "frames"
    ids = [p.stem for p in velo]
    for sub in (root / "training").iterdir():
        if not sub.is_dir():
            continue
        (out / "training" / sub.name).mkdir(parents=True, exist_ok=True)
        files = {p.stem: p for p in sub.iterdir() if p.stem in ids}
        for i in range(frames):
            src = files.get(ids[i % len(ids)])
            if src is not None:
                shutil.copyfile(src, out / "training" / sub.name / f"{i:06d}{src.suffix}")
    (out / "ImageSets").mkdir(parents=True, exist_ok=True)
    for name in ("train", "val", "trainval"):
        (out / "ImageSets" / f"{name}.txt").write_text("".join(f"{i:06d}\n" for i in range(frames)))
    mark_demo(out)
    return str(out)


def ledger_summary(version_dir: str | Path) -> dict[str, Any]:
    """Task count, CPU, wall, longest task, threads and the summed `split` of a build's ledger."""
    shards = Path(version_dir) / "_ledger" / "shards"  # a local build: every task's entry is a file there
    entries = [json.loads(p.read_text()) for p in sorted(shards.glob("*.json"))]
    split: dict[str, float] = {}
    split_cpu: dict[str, float] = {}
    for e in entries:
        for k, v in (e.get("split") or {}).items():
            split[k] = split.get(k, 0.0) + v
        for k, v in (e.get("split_cpu") or {}).items():
            split_cpu[k] = split_cpu.get(k, 0.0) + v
    return {"tasks": len(entries), "task_cpu_s": round(sum(e.get("cpu_seconds", 0.0) for e in entries), 3),
            "warmup_s": first_task_warmup(entries),
            "processes": len({e["pid"] for e in entries if e.get("pid") is not None}),
            "task_wall_s": round(sum(e.get("seconds", 0.0) for e in entries), 3),
            "longest_task_s": round(max((e.get("seconds", 0.0) for e in entries), default=0.0), 3),
            "threads": sorted({e["threads"] for e in entries if e.get("threads") is not None}),
            "split": {k: round(v, 3) for k, v in split.items()},
            "split_cpu": {k: round(v, 3) for k, v in split_cpu.items()},
            "schedule": schedule_stats(entries)}


def schedule_stats(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where the workers' time went around the tasks, from the tasks' start times and seconds per worker process:

    - ``task_s``: the tasks' seconds: mean, coefficient of variation, longest ÷ mean (the spread that makes the
      last tasks end apart);
    - ``start_spread_s``: first task start of the last worker to begin − of the first (staggered worker starts);
    - ``gaps_s``: idle seconds between consecutive tasks of the same worker, summed over workers (scheduling);
    - ``drain_s``: the last task's end − the first worker's last end (the tail: workers idle for good while
      others finish);
    - ``timeline``: every task as [worker, start (s after the first task began), seconds, CPU-s], by start.

    None without start times (a ledger from before they were recorded)."""
    timed = [e for e in entries if e.get("started") is not None and e.get("seconds") is not None]
    if not timed:
        return None
    timed.sort(key=lambda e: e["started"])
    t0 = timed[0]["started"]
    by_pid: dict[Any, list[dict[str, Any]]] = {}
    for e in timed:
        by_pid.setdefault(e.get("pid"), []).append(e)
    workers = {pid: i for i, pid in enumerate(by_pid)}
    gaps = sum(max(0.0, b["started"] - (a["started"] + a["seconds"]))
               for tasks in by_pid.values() for a, b in itertools.pairwise(tasks))
    last_ends = [max(e["started"] + e["seconds"] for e in tasks) for tasks in by_pid.values()]
    firsts = [tasks[0]["started"] for tasks in by_pid.values()]
    secs = [e["seconds"] for e in timed]
    mean = statistics.fmean(secs)
    return {"workers": len(by_pid),
            "task_s": {"mean": round(mean, 3), "cv": round(statistics.pstdev(secs) / mean, 3) if mean else 0.0,
                       "max_over_mean": round(max(secs) / mean, 3) if mean else 1.0},
            "start_spread_s": round(max(firsts) - min(firsts), 3), "gaps_s": round(gaps, 3),
            "drain_s": round(max(last_ends) - min(last_ends), 3),
            "timeline": [[workers[e.get("pid")], round(e["started"] - t0, 3), round(e["seconds"], 3),
                          round(e.get("cpu_seconds", 0.0), 3)] for e in timed]}


def first_task_warmup(entries: list[dict[str, Any]]) -> float | None:
    """What a worker's first task pays once (imports, numba's cached kernels, first-call caches): per worker
    process that ran two or more tasks, its first task's seconds per frame minus the median of its later ones',
    times the first task's frames; the median over those workers. A task's contact-sheet panels (``paint`` in its
    split: block 0's tasks only, which a worker usually runs first) are work, not warm-up, and are left out.
    None when no worker ran two tasks (the warm-up cannot be told from the work then)."""
    by_pid: dict[Any, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("pid") is not None and e.get("started") is not None and e.get("frames"):
            by_pid.setdefault(e["pid"], []).append(e)

    def work(e: dict[str, Any]) -> float:
        return e["seconds"] - (e.get("split") or {}).get("paint", 0.0)

    warm = []
    for tasks in by_pid.values():
        if len(tasks) < 2:
            continue
        first, *later = sorted(tasks, key=lambda e: e["started"])
        per_frame = statistics.median(work(e) / len(e["frames"]) for e in later)
        warm.append(max(0.0, work(first) - per_frame * len(first["frames"])))
    return round(statistics.median(warm), 3) if warm else None


def median_rounds(builds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per worker count (in first-seen order) from its ``rounds`` builds: the build of median wall time,
    with the median wall, task CPU and first-task warm-up over the rounds, every phase's median, and the range of
    the walls. One round gives the build itself (plus ``rounds`` and the range)."""
    by: dict[int, list[dict[str, Any]]] = {}
    for b in builds:
        by.setdefault(b["workers"], []).append(b)
    rows = []
    for bs in by.values():
        ordered = sorted(bs, key=lambda b: b["wall_s"])
        walls = [b["wall_s"] for b in ordered]
        mid = ordered[(len(bs) - 1) // 2]
        keys = dict.fromkeys(k for b in bs for k in b["phases"])
        phases = {k: round(statistics.median(b["phases"][k] for b in bs if k in b["phases"]), 3) for k in keys}
        warm = [b["ledger"]["warmup_s"] for b in bs if b["ledger"].get("warmup_s") is not None]
        ledger = {**mid["ledger"], "task_cpu_s": round(statistics.median(b["ledger"]["task_cpu_s"] for b in bs), 3),
                  "warmup_s": round(statistics.median(warm), 3) if warm else None}
        rows.append({**mid, "rounds": len(bs), "wall_s": round(statistics.median(walls), 3),
                     "wall_s_range": [walls[0], walls[-1]], "phases": phases, "ledger": ledger})
    return rows


def run_scale(workers: list[int], *, frames: int = DEMO_FRAMES, frames_per_shard: int = 2, recipe: str = "kitti-c",
              source: str | None = None, out: str | None = None, control: bool = False,
              json_out: str | Path | None = None, costs_out: str | Path | None = None,
              rounds: int = 1) -> dict[str, Any]:
    """Build ``frames`` at each worker count (fresh output each), ``rounds`` times in turn (1, 2, … N, then again:
    a drift of the machine's speed reaches every count alike), print the table of each count's medians, return
    (and write) results: ``runs`` one row per count (`median_rounds`), ``builds`` every build."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    results: dict[str, Any] = {"recipe": recipe, "frames": frames, "frames_per_shard": frames_per_shard,
                               "cores": os.cpu_count(), "thread_pin": os.environ.get("BENCH_BUILD_THREAD_PIN", "on"),
                               "machine": cpu_topology(), "rounds": rounds, "builds": []}
    if control:
        results["control"] = run_control(max(workers))
        print(describe(results["control"]))
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=out) as tmp:
        root = frames_source(frames, Path(tmp), source)
        frame_ids = [f"{i:06d}" for i in range(frames)]
        for n in [n for _ in range(rounds) for n in workers]:
            dest = Path(tmp) / f"o{n}"
            t = time.perf_counter()
            res = run_build(recipe, source=root, out=str(dest), workers=n, max_frames=frames,
                            frames_per_shard=frames_per_shard, progress=False)
            wall = time.perf_counter() - t
            if not res.ok:
                raise RuntimeError(f"the {n}-worker build failed: {res.failures}")
            led = ledger_summary(res.version_dir)
            plan = plan_build(recipe, frame_ids, frames_per_shard=frames_per_shard, workers=[n])["schedule"][0]
            results["builds"].append({"workers": n, "wall_s": round(wall, 3), "build_s": round(res.seconds, 3),
                                    "phases": res.phases, "ledger": led,
                                    "shards": sorted((s["path"], s["sha256"]) for s in res.manifest["shards"]),
                                    "plan": {k: plan[k] for k in ("wall_s", "makespan_s", "wall_utilisation",
                                                                  "tasks", "groups_per_block", "inflation")}})
            shutil.rmtree(dest, ignore_errors=True)
    results["identical_across_workers"] = len({json.dumps(b["shards"]) for b in results["builds"]}) == 1
    for b in results["builds"]:
        b.pop("shards")
    results["runs"] = median_rounds(results["builds"])
    base = results["runs"][0]
    per_worker_cpu = base["ledger"]["task_cpu_s"]
    print(f"\n{recipe}: {frames} frames, {frames_per_shard} per block, {os.cpu_count()} cores, thread pin "
          f"{results['thread_pin']}" + (f"; medians of {rounds} rounds" if rounds > 1 else ""))
    print(f"{'N':>3} {'wall s':>7} {'speed-up':>8} {'tasks':>5} {'task CPU':>8} {'CPU ×':>6} {'w/o warm':>8} "
          f"{'longest':>7} {'util':>6} | {'plan wall':>9} {'plan util':>9} | wait s  parquet s  compute s  serial s")
    base_work = work_cpu(base, base)
    for r in results["runs"]:
        led = r["ledger"]
        r["speedup"] = round(base["wall_s"] / r["wall_s"], 3)
        r["cpu_inflation"] = round(led["task_cpu_s"] / per_worker_cpu, 3) if per_worker_cpu else None
        work = work_cpu(r, base)
        r["task_inflation"] = round(work / base_work, 3) if work is not None and base_work else None
        r["utilisation"] = round(per_worker_cpu / (r["workers"] * r["wall_s"]), 3)
        serial = r["wall_s"] - r["phases"].get("tasks", 0.0)
        r["serial_s"] = round(serial, 3)
        sp = led["split"]
        print(f"{r['workers']:>3} {r['wall_s']:>7.1f} {r['speedup']:>7.2f}× {led['tasks']:>5} "
              f"{led['task_cpu_s']:>8.1f} {r['cpu_inflation']:>6.3f} "
              + (f"{r['task_inflation']:>8.3f} " if r["task_inflation"] is not None else f"{'—':>8} ")
              + f"{led['longest_task_s']:>7.1f} "
              f"{r['utilisation']:>6.1%} | {r['plan']['wall_s']:>9.1f} {r['plan']['wall_utilisation']:>9.1%} | "
              f"{sp.get('wait', 0):>6.1f} {sp.get('parquet', 0):>9.1f} {sp.get('compute', 0):>10.1f} {serial:>8.1f}")
    for r in results["runs"]:
        sched = r["ledger"].get("schedule")
        if sched:
            t = sched["task_s"]
            line = (f"N={r['workers']}: tasks {t['mean']:.1f} s on average (cv {t['cv']:.2f}, longest ×"
                    f"{t['max_over_mean']:.2f})")
            if sched["workers"] > 1:
                line += (f"; workers began {sched['start_spread_s']:.1f} s apart, idled {sched['gaps_s']:.1f} s "
                         f"between tasks, and {sched['drain_s']:.1f} s passed from the first worker's last task "
                         "ending to the last one's")
            print(line)
    if note := other_machine_note(load_costs(load_recipe(recipe)), recipe):  # why the plan columns are off
        print(f"plan: {note}")
    if here := plan_here(recipe, frame_ids, frames_per_shard, results["runs"]):
        results["plan_here"] = here
        print(f"plan with this machine's task costs (the table's × {here['scale']:.2f}, from the "
              f"{base['workers']}-worker build's tasks): " + ", ".join(
                  f"N={r['workers']} {here['wall_s'][str(r['workers'])]:.1f} s (measured {r['wall_s']:.1f})"
                  for r in results["runs"]))
    if len(results["runs"]) > 1:
        last = results["runs"][-1]
        ceiling = ceiling_speedup(base, last)
        results["ceiling_speedup"] = round(ceiling, 3)
        print(speedup_line(base, last, ceiling) + f"; shards identical across worker counts: "
              f"{results['identical_across_workers']}")
    if rounds > 1:
        print("walls over the rounds: " + ", ".join(f"N={r['workers']} {r['wall_s_range'][0]:.1f}–"
                                                      f"{r['wall_s_range'][1]:.1f} s" for r in results["runs"]))
    if costs_out is not None:
        write_runtime(results, recipe, costs_out)
    if json_out is not None:
        Path(json_out).write_text(json.dumps(results, indent=1) + "\n")
        print(f"results written to {json_out}")
    return results


def plan_here(recipe: str, frame_ids: list[str], frames_per_shard: int,
              runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`plan` again for each count's build, its table's task costs scaled so that the first count's tasks sum to
    the seconds they took (as `bench scale --costs-out` would measure on this machine), each with the groups its
    build used: ``{"scale", "wall_s": {workers: predicted wall}}``. What is then left between the prediction and
    the wall is the model's (schedule, start-up, finish), not the machine's speed. None without tasks to scale by."""
    base, costs = runs[0], load_costs(load_recipe(recipe))

    def row(r: dict[str, Any], table) -> dict[str, Any]:
        return plan_build(recipe, frame_ids, frames_per_shard=frames_per_shard, workers=[r["workers"]],
                          groups=r["plan"]["groups_per_block"], costs=table)["schedule"][0]

    first = row(base, costs)
    modelled, measured = first["task_seconds"]["mean"] * first["tasks"], base["ledger"].get("task_wall_s") or 0.0
    if modelled <= 0 or measured <= 0:
        return None
    table = replace(costs, scale=costs.scale * measured / modelled)
    return {"scale": round(measured / modelled, 3),
            "wall_s": {str(r["workers"]): round(row(r, table)["wall_s"], 3) for r in runs}}


def ceiling_speedup(base: dict[str, Any], run: dict[str, Any]) -> float:
    """The speed-up of ``run`` over ``base`` (two `median_rounds` rows) if only the tasks divided: ``base``'s tasks
    phase spread over ``run.workers / base.workers`` times the workers, ``run``'s own serial time (Ray start,
    planning, finish: ``serial_s``, which does not divide) added. Equal tasks and no CPU inflation reach it."""
    parallel = base["wall_s"] - base["serial_s"]
    return base["wall_s"] / (run["serial_s"] + parallel * base["workers"] / run["workers"])


def speedup_line(base: dict[str, Any], run: dict[str, Any], ceiling: float) -> str:
    line = (f"speed-up {run['workers']} vs {base['workers']}: {run['speedup']:.2f}× (the most the serial time "
            f"allows: {ceiling:.2f}×)")
    if run["speedup"] > ceiling * 1.02:
        line += (f"; above that bound, the {base['workers']}-worker build's tasks ran slower than their share "
                 "(a busier or slower machine during it): measure on an idle machine, with --rounds 3")
    return line


def work_cpu(run: dict[str, Any], base: dict[str, Any]) -> float | None:
    """A run's task CPU without its worker processes' one-off warm-up (each process pays it in its first task):
    task CPU − processes × warm-up. One warm-up for every run, ``base``'s (the 1-worker build, where one process
    ran every task), else this run's own: estimated from tasks of other blocks (`first_task_warmup`), it carries
    their differences, ± 0.3 s on the demo, and a run whose workers ran two tasks each would set its own
    inflation with its own error. None when neither measured it. The CPU inflation from this is the same tasks'
    slowdown alone; `plan` adds the warm-up once per worker, in its worker start."""
    led = run["ledger"]
    warm = base["ledger"].get("warmup_s") if base["ledger"].get("warmup_s") is not None else led.get("warmup_s")
    if warm is None or not led.get("processes"):
        return None
    return led["task_cpu_s"] - led["processes"] * warm


def measured_runtime(results: dict[str, Any]) -> dict[str, Any]:
    """The cost table's ``runtime`` from a `run_scale` result: medians over its builds of the driver's start
    (planning + Ray's start), its finish without the contact sheet and the sheet's drawing, the task CPU inflation
    at the largest worker count within the cores (without the workers' warm-up, `work_cpu`, where it was measured),
    and a worker's start: when its first task began after Ray was up (``phases["worker_start"]``) plus the one-off
    warm-up that task then paid inside (`first_task_warmup`, from the builds where a worker ran two tasks or more;
    without one the model's constant `WORKER_START_S` stays)."""

    def inflation(run: dict[str, Any]) -> float:
        return run.get("task_inflation") or run["cpu_inflation"] or 1.0

    runs = results["runs"]
    # the finish without the contact sheet, whose drawing is a term of its own (`Runtime.sheet_s`): the model puts
    # back what of it outlasts the last task
    finish = [r["phases"].get("finish", 0.0) - r["phases"].get("contact_sheet", 0.0) for r in runs]
    sheet = [r["phases"]["sheet_draw"] for r in runs if "sheet_draw" in r["phases"]]
    full = [r for r in runs if r["workers"] <= (results["cores"] or 1)]
    out = {"driver_start_s": round(statistics.median(r["phases"].get("plan", 0.0) + r["phases"].get("ray_start", 0.0)
                                                     for r in runs), 3),
           "finish_s": round(statistics.median(finish), 3), "finish_s_per_task": 0.0,
           "inflation": round(max(1.0, inflation(full[-1])), 3) if full else 1.0,
           "cores": full[-1]["workers"] if full else 1,
           "measured": "bench-build bench scale " + " ".join(f"--workers {r['workers']}" for r in runs) + " "
                       f"--frames {results['frames']}"
                       + (f" --rounds {results['rounds']}" if results.get("rounds", 1) > 1 else "")
                       + f" on {results['cores']} cores, {time.strftime('%Y-%m-%d')}"}
    # the same warm-up `work_cpu` takes out of the inflation: the first run's, else the median of the others'
    warm = [r["ledger"]["warmup_s"] for r in runs if r["ledger"].get("warmup_s") is not None]
    if runs and runs[0]["ledger"].get("warmup_s") is not None:
        warm = [runs[0]["ledger"]["warmup_s"]]
    if sheet:
        out["sheet_s"] = round(statistics.median(sheet), 3)
    starts = [r["phases"]["worker_start"] for r in runs if "worker_start" in r["phases"]]
    if warm and starts:
        out["worker_start_s"] = round(statistics.median(starts) + statistics.median(warm), 3)
    return out


def write_runtime(results: dict[str, Any], recipe: str, path: str | Path) -> None:
    """Merge `measured_runtime` into the cost table at ``path`` (the recipe's shipped table if it does not exist)."""

    p = Path(path)
    data = json.loads(p.read_text()) if p.is_file() else json.loads(load_costs(load_recipe(recipe)).to_json())
    if "runtime" in data:
        print(f"replacing the runtime in {p} (measured: {data['runtime'].get('measured', '?')})")
    data["runtime"] = measured_runtime(results)
    p.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"runtime written to {p}: {data['runtime']}")

"""`plan` predicts a real build (issue 34): the runtime model (driver start, worker start, task CPU inflation at
occupancy, the driver's finish), the ledger's per-task time split, and the `bench` sub-app's old spellings."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.costs import load_costs
from bench_build.plan.scale import plan_build
from bench_build.plan.tasks import Runtime, choose_groups, group_partitions, plan_shards, predict, task_seconds

#: plan's predicted wall time against the measured one of the same build: the issue's bar
TOLERANCE = 0.15


@pytest.mark.alone  # its wall clock against the model: no other test's build on the same cores
def test_plan_predicts_a_real_two_worker_build(small_recipe, demo_kitti, tmp_path):
    """A 2-worker build of 4 one-frame blocks, and `plan_build` for the same frames, tasks and workers.

    Calibrated from the build itself, as `bench scale --costs-out` does on a machine: the cost table is scaled so
    its task seconds sum to what these tasks took (the machine's speed this hour at this occupancy: a loaded CI
    machine stays within the tolerance), and the runtime holds the build's measured driver start, worker start and
    finish without the contact sheet, and the sheet's drawing. What is tested is the model: the schedule of the
    tasks on the workers after each worker's start, plus the serial parts (of the sheet, drawn once block 0's task
    ends, what outlasts the last task: here, with tasks under a second, most of it), against the build's wall
    clock."""
    from bench_build.build.run import run_build

    t = time.perf_counter()
    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "o", workers=2, max_frames=4,
                    frames_per_shard=1, groups=1, progress=False)
    wall = time.perf_counter() - t
    assert res.ok, res.failures
    entries = [json.loads(p.read_text()) for p in (Path(res.version_dir) / "_ledger" / "shards").glob("*.json")]
    assert len(entries) == 4
    # every task says where its time went and how many threads its worker ran
    for e in entries:
        split = e["split"]
        assert set(split) >= {"read", "compute", "encode", "parquet", "commit", "wait", "other_threads_cpu"}
        assert sum(split[k] for k in ("read", "compute", "encode", "parquet", "commit", "paint", "other")) == \
            pytest.approx(e["seconds"], abs=0.05)
        assert split["cpu"] <= e["cpu_seconds"] + 0.01 and e["threads"] >= 1
    phases = res.phases
    assert {"plan", "ray_start", "tasks", "worker_start", "finish", "contact_sheet", "sheet_draw"} <= set(phases)

    recipe = load_recipe(str(small_recipe))
    costs = load_costs(recipe)
    frame_ids = sorted(fid for e in entries for fid in e["frames"])
    modelled = sum(task_seconds(plan_shards(frame_ids, 1), group_partitions(recipe, costs, 1), costs))
    measured = sum(e["seconds"] for e in entries)
    runtime = {"driver_start_s": phases["plan"] + phases["ray_start"], "worker_start_s": phases["worker_start"],
               "finish_s": phases["finish"] - phases["contact_sheet"], "sheet_s": phases["sheet_draw"],
               "inflation": 1.0, "cores": 2}
    table = replace(costs, scale=costs.scale * measured / modelled, extra={**costs.extra, "runtime": runtime})
    row = plan_build(recipe, frame_ids, frames_per_shard=1, workers=[2], groups=1, costs=table)["schedule"][0]
    assert row["tasks"] == 4
    print(f"plan {row['wall_s']:.2f} s, build {wall:.2f} s ({row['wall_s'] / wall - 1:+.1%})")
    assert abs(row["wall_s"] - wall) <= TOLERANCE * wall, (row, wall, phases)


def test_runtime_inflation_grows_with_occupancy_up_to_the_measured_cores():
    r = Runtime(inflation=1.25, cores=16)
    assert r.inflation_at(1) == 1.0 and r.inflation_at(16) == pytest.approx(1.25)
    assert r.inflation_at(64) == pytest.approx(1.25) and 1.0 < r.inflation_at(8) < 1.25
    assert Runtime(inflation=1.25, cores=1).inflation_at(16) == 1.0  # measured on one core: nothing known


def test_predicted_wall_adds_the_serial_parts_and_inflates_tasks():
    r = Runtime(worker_start_s=1.0, driver_start_s=2.0, finish_s=3.0, inflation=1.5, cores=2, sheet_s=0.5)
    p = predict([10.0, 10.0], 2, r)
    # both tasks run at once, each 1.5 × longer with both cores busy; the sheet, drawn once block 0's one task
    # ended, ends after the other
    assert p["makespan_s"] == pytest.approx(1.0 + 15.0 + 0.05)
    assert p["sheet_tail_s"] == pytest.approx(0.5)
    assert p["wall_s"] == pytest.approx(2.0 + p["makespan_s"] + 3.0 + 0.5)
    assert p["wall_utilisation"] == pytest.approx(20.0 / (2 * p["wall_s"]))
    # the inflated tasks fill the workers after their start: busy, though a third of it is the hardware's
    assert p["occupancy"] == pytest.approx(30.0 / (2 * p["makespan_s"]))
    assert p["utilisation"] == pytest.approx(p["occupancy"] / 1.5)


def test_the_contact_sheet_is_serial_only_where_it_outlasts_the_last_task():
    """The driver draws the sheet once block 0's tasks (its groups: the first submitted) have all ended: on fewer
    workers than blocks it is drawn while later blocks run, and costs nothing; where every task ends at once it
    follows the last one. The group choice weighs it: at as many workers as blocks, cutting each block in two lets
    block 0 end halfway, at the price of the caches each group rebuilds."""
    r = Runtime(worker_start_s=0.0, driver_start_s=0.0, finish_s=0.0, sheet_s=3.0)
    later = predict([10.0] * 4, 2, r, first_block=1)  # block 0 ends at 10 s, the last block at 20 s
    assert later["first_done_s"] == pytest.approx(10.05) and later["sheet_tail_s"] == 0.0
    at_once = predict([10.0] * 4, 4, r, first_block=1)
    assert at_once["sheet_tail_s"] == pytest.approx(3.0)
    assert at_once["wall_s"] == pytest.approx(at_once["makespan_s"] + 3.0)
    split = predict([5.0] * 8, 4, r, first_block=2)  # block 0's two groups run first: done at 5 s of 10
    assert split["sheet_tail_s"] == 0.0
    partly = predict([10.0, 2.0, 2.0], 3, r, first_block=2)  # block 0 ends at 10.05; the last task too
    assert partly["sheet_tail_s"] == pytest.approx(3.0)

    recipe = load_recipe("kitti-c")
    costs = load_costs(recipe)
    frames = [f"{i:06d}" for i in range(64)]
    shards = plan_shards(frames, 4)

    def table(sheet_s: float):
        rt = {"worker_start_s": 1.0, "driver_start_s": 2.0, "finish_s": 0.3, "cores": 16, "sheet_s": sheet_s}
        return replace(costs, extra={**costs.extra, "runtime": rt})

    assert choose_groups(recipe, table(0.0), shards, 16) == 1  # 16 blocks, 16 workers: one task each
    assert choose_groups(recipe, table(3.0), shards, 16) == 2
    row = plan_build(recipe, frames, frames_per_shard=4, workers=[16], costs=table(3.0))["schedule"][0]
    assert row["groups_per_block"] == 2 and row["sheet_tail_s"] == 0.0
    one = plan_build(recipe, frames, frames_per_shard=4, workers=[16], groups=1, costs=table(3.0))["schedule"][0]
    assert one["sheet_tail_s"] == pytest.approx(3.0) and one["finish_s"] == pytest.approx(3.3)


def test_a_block_cheaper_than_a_task_target_is_still_split_to_give_every_worker_a_task():
    """The README's quickstart (2 demo frames, one block, ≈ 7 CPU-s: under the 8 CPU-s a cost-sized task holds) on
    2 workers is 2 tasks, not one task and an idle worker (measured: 11.1 / 12.7 s wall against 15.6 / 18.2 s); 16
    frames in one block on 16 workers, 16 tasks (the cost-sized cap gave 7): the choice goes up to whichever is more,
    the cost-sized groups or one task per worker. Blocks enough for the workers still keep one group each."""
    recipe = load_recipe("kitti-c")
    costs = load_costs(recipe)
    two = plan_shards(["000000", "000001"], 64)
    from bench_build.plan.tasks import groups_for

    assert groups_for(recipe, costs, 2) == 1
    assert choose_groups(recipe, costs, two, 2) == 2
    assert choose_groups(recipe, costs, two, 1) == 1
    assert choose_groups(recipe, costs, plan_shards([f"{i:06d}" for i in range(16)], 64), 16) == 16
    assert choose_groups(recipe, costs, plan_shards([f"{i:06d}" for i in range(4)], 2), 2) == 1  # 2 blocks


def test_the_cost_tables_runtime_reaches_plan_and_the_group_choice():
    recipe = load_recipe("kitti-c")
    costs = load_costs(recipe)
    frames = [f"{i:06d}" for i in range(64)]
    slow = replace(costs, extra={**costs.extra, "runtime": {"worker_start_s": 2.0, "driver_start_s": 3.0,
                                                            "finish_s": 4.0, "inflation": 1.3, "cores": 16}})
    plain = replace(costs, extra={k: v for k, v in costs.extra.items() if k != "runtime"})
    a = plan_build(recipe, frames, frames_per_shard=4, workers=[16], costs=plain)["schedule"][0]
    b = plan_build(recipe, frames, frames_per_shard=4, workers=[16], costs=slow)["schedule"][0]
    assert b["inflation"] == pytest.approx(1.3) and b["wall_s"] > a["wall_s"] + 7.0
    # the JSON contract `run_scaling.sh` reads is kept
    assert all(k in b for k in ("makespan_s", "utilisation", "tasks", "groups_per_block"))
    assert all(k in b["sized"] for k in ("makespan_s", "utilisation"))
    shards = plan_shards(frames, 4)
    assert 1 <= choose_groups(recipe, slow, shards, 16) <= choose_groups(recipe, slow, shards, 256)


def test_bench_keeps_its_old_switches_and_refuses_them_beside_a_subcommand():
    run = CliRunner().invoke(app, ["bench", "--publish", "scale"])
    assert run.exit_code == 2 and "--publish" in run.output and "bench scale" in run.output
    names = CliRunner().invoke(app, ["bench", "--help"]).output
    for sub in ("stages", "scale", "sources", "loaders", "layouts", "publish", "s3-build", "score"):
        assert sub in names

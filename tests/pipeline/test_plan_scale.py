"""Task granularity (frame block × partition group), the cost model and `bench-build plan`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.costs import CostTable, default_costs, load_costs
from bench_build.plan.scale import TASK_OVERHEAD_S, WORKER_START_S, plan_build, simulate
from bench_build.plan.tasks import (
    CLEAN,
    group_cost_ms,
    group_partitions,
    groups_for,
    partition_order,
    plan_shards,
    plan_tasks,
)

KITTI_FRAMES = 7481


@pytest.fixture(scope="module")
def kitti_c():
    return load_recipe("kitti-c")


def test_groups_cover_every_partition_once_with_clean_in_group_zero(kitti_c):
    costs = load_costs(kitti_c)
    for g in (1, 2, 7, 18, 500):
        cut = group_partitions(kitti_c, costs, g)
        flat = [p for grp in cut for p in grp]
        assert sorted(flat) == sorted(partition_order(kitti_c, costs))
        assert len(flat) == len(set(flat)) == 1 + 25 * 5
        assert cut[0][0] == (CLEAN, 0) and 1 <= len(cut) <= min(g, 126)
        assert cut == group_partitions(kitti_c, costs, g)  # deterministic


def test_groups_are_balanced_and_share_caches(kitti_c):
    costs = load_costs(kitti_c)
    cut = group_partitions(kitti_c, costs, 18)
    per = [group_cost_ms(grp, costs) for grp in cut]
    # no group costs more than the cheapest possible cap: the costliest single partition (with its cache),
    # or an even share of everything, whichever is larger, times the slack of cutting whole partitions
    single = max(group_cost_ms([p], costs) for p in partition_order(kitti_c, costs))
    assert max(per) <= max(single, group_cost_ms(partition_order(kitti_c, costs), costs) / len(cut)) * 1.6
    # stages sharing a cache are contiguous: each cache is built by as few groups as its stages' cost allows
    for cache in costs.prep_ms:
        users = [i for i, grp in enumerate(cut) if any(s > 0 and cache in costs.needs_of(c) for c, s in grp)]
        if not users:  # timed for every recipe (Robo3D's rings), needed by none of kitti-c's stages
            continue
        assert users == list(range(users[0], users[-1] + 1)), (cache, users)


def test_tasks_write_exactly_the_files_of_one_task_per_block(kitti_c):
    costs = load_costs(kitti_c)
    shards = plan_shards([f"{i:06d}" for i in range(200)], 64)
    whole = sorted(rel for s in shards for _, _, rel in s.partitions(kitti_c))
    for g in (1, 5, 18):
        tasks = plan_tasks(shards, kitti_c, costs, g)
        files = [rel for t in tasks for _, _, rel in t.partitions()]
        assert sorted(files) == whole  # same names whatever the grouping: no file written twice
        assert len({t.name for t in tasks}) == len(tasks) == len(shards) * tasks[0].groups
    assert [t.name for t in plan_tasks(shards, kitti_c, costs, 1)] == [s.name for s in shards]
    assert plan_tasks(shards, kitti_c, costs, 5)[1].name == "part-00000-of-00004-g001-of-005"


def test_simulated_schedule_matches_list_scheduling_by_hand():
    # 10 equal tasks of 3 s on 4 workers: 3 waves → makespan 3 × (3 + overhead)
    r = simulate([3.0] * 10, 4)
    assert r["makespan_s"] == pytest.approx(3 * (3 + TASK_OVERHEAD_S))
    assert r["utilisation"] == pytest.approx(30 / (4 * r["makespan_s"]))
    # one long task dominates: the others fill the remaining workers
    r = simulate([10.0, 1.0, 1.0, 1.0], 2, overhead_s=0.0)
    assert r["makespan_s"] == 10.0 and r["utilisation"] == pytest.approx(13 / 20)
    # every worker starts 2 s late: the same waves, shifted; the start is not busy time
    r = simulate([3.0] * 10, 4, start_s=2.0)
    assert r["makespan_s"] == pytest.approx(2.0 + 3 * (3 + TASK_OVERHEAD_S))
    assert r["busy_cpu_s"] == 30.0 and r["utilisation"] == pytest.approx(30 / (4 * r["makespan_s"]))


def test_more_workers_than_tasks_are_simulated_without_a_list_of_them():
    """`plan --workers 99999999999999999999` (and `run` with it, sizing its task groups) ended in an OverflowError
    traceback, and 10**9 allocated 8 GB: the schedule held a slot per worker, when at most one per task is used."""
    few = simulate([3.0, 1.0], 2, start_s=1.0)
    many = simulate([3.0, 1.0], 10**20, start_s=1.0)
    assert many["makespan_s"] == few["makespan_s"] == 1.0 + 3.0 + TASK_OVERHEAD_S
    assert many["utilisation"] == pytest.approx(4.0 / (10**20 * many["makespan_s"]))
    assert simulate([], 10**20, start_s=1.0)["makespan_s"] == simulate([], 3, start_s=1.0)["makespan_s"] == 1.0
    res = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "4", "--workers", str(10**20), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["schedule"][0]["workers"] == 10**20


def test_run_refuses_more_workers_than_a_local_ray_takes_before_writing(small_recipe, demo_kitti, tmp_path):
    """Past Ray's bound on a resource (10**14), `ray.init` raised a ValueError after the ledger was written (exit 1,
    a traceback), the note on more workers than CPUs printed first."""
    res = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path / "o"),
                                   "--max-frames", "1", "--workers", str(10**14 + 1), "--no-progress"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --workers {10**14 + 1}: a local Ray takes at most"), lines
    assert not (tmp_path / "o").exists()


def test_full_kitti_c_plan_has_thousands_of_equal_tasks_and_keeps_256_workers_busy(kitti_c):
    r = plan_build(kitti_c, [f"{i:06d}" for i in range(KITTI_FRAMES)], frames_per_shard=64,
                   workers=(2, 16, 64, 256))
    assert r["examples_defined"] == 1_122_150 and r["blocks"] == 117
    sized = r["sized"]  # the cost-sized split (what a cluster run uses by default)
    assert sized["tasks"] >= 2000 and sized["tasks"] == 117 * sized["groups_per_block"]
    t = sized["task_seconds"]
    assert t["max"] <= 1.25 * t["mean"]
    rows = {row["workers"]: row for row in r["schedule"]}
    # busy: how well the split fills 256 workers, apart from what the machine's own slowdown at full occupancy
    # (the table's inflation) takes from useful work
    big = rows[256]["sized"]
    assert big["occupancy"] >= 0.90
    assert big["utilisation"] == pytest.approx(big["occupancy"] / big["inflation"])
    assert rows[2]["groups_per_block"] == 1  # a few workers: no split, no cache rebuilt
    for w, row in rows.items():
        # the best split is never slower than the cost-sized one, and never cheaper than no split at all
        assert row["makespan_s"] <= row["sized"]["makespan_s"] * 1.0001
        assert row["cpu_hours"] >= r["cpu_hours_one_task_per_block"] * 0.9999
        # makespan is at least the work spread over the workers, and at least the longest task
        assert row["makespan_s"] >= r["worker_start_s"] + max(row["busy_cpu_s"] / w, row["task_seconds"]["max"])
        assert row["utilisation"] == pytest.approx(row["busy_cpu_s"] / (w * row["makespan_s"]))


def test_a_slower_worker_start_lowers_utilisation_most_where_tasks_are_short(kitti_c):
    """Workers that compile numba's kernels themselves (≈ 11 s more before their first task) cost a 256-worker
    build of full KITTI-C much more of its makespan than a 2-worker one: the plan says so."""
    frames = [f"{i:06d}" for i in range(KITTI_FRAMES)]
    cached = plan_build(kitti_c, frames, frames_per_shard=64, workers=(2, 256), groups=28)
    compiling = plan_build(kitti_c, frames, frames_per_shard=64, workers=(2, 256), groups=28,
                           worker_start_s=cached["worker_start_s"] + 11)
    none = plan_build(kitti_c, frames, frames_per_shard=64, workers=(2, 256), groups=28, worker_start_s=0.0)
    for a, b, c in zip(none["schedule"], cached["schedule"], compiling["schedule"], strict=True):
        assert a["busy_cpu_s"] == b["busy_cpu_s"] == c["busy_cpu_s"]  # the same tasks, started later
        assert a["makespan_s"] < b["makespan_s"] < c["makespan_s"]
        assert c["makespan_s"] - a["makespan_s"] == pytest.approx(cached["worker_start_s"] + 11, abs=2.0)
    lost = {row["workers"]: row["utilisation"] - c["utilisation"]
            for row, c in zip(cached["schedule"], compiling["schedule"], strict=True)}
    assert lost[2] < 0.002 and lost[256] > 0.05, lost
    with pytest.raises(ValueError, match="cannot take -1"):
        plan_build(kitti_c, frames[:10], frames_per_shard=64, worker_start_s=-1)


def test_groups_per_block_follow_the_costs(kitti_c):
    cheap = default_costs(kitti_c)
    dear = CostTable(**{**cheap.__dict__, "write_ms": cheap.write_ms * 10})
    assert groups_for(kitti_c, dear, 64) > groups_for(kitti_c, cheap, 64)
    block_s = 64 * group_cost_ms(partition_order(kitti_c, cheap), cheap) / 1e3
    assert groups_for(kitti_c, cheap, 64, target_seconds=block_s / 10) == 10
    assert groups_for(kitti_c, cheap, 2, target_seconds=1e9) == 1


def test_plan_cli(kitti_c):
    res = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", str(KITTI_FRAMES), "--workers", "256", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert r["sized"]["tasks"] >= 2000 and [row["workers"] for row in r["schedule"]] == [256]
    # the shipped table's measured worker start (`bench scale --costs-out`), else the model's constant
    shipped = (load_costs(kitti_c).extra.get("runtime") or {}).get("worker_start_s", WORKER_START_S)
    assert r["worker_start_s"] == shipped
    late = json.loads(CliRunner().invoke(app, ["plan", "kitti-c", "--frames", str(KITTI_FRAMES), "--workers", "256",
                                               "--worker-start", "13", "--json"]).output)
    assert late["worker_start_s"] == 13.0 and late["schedule"][0]["utilisation"] < r["schedule"][0]["utilisation"]
    text = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "100", "--groups", "4", "--workers", "3"])
    prose = " ".join(text.output.split())  # its prose lines wrap at words to the terminal's width
    assert text.exit_code == 0 and "100 frames in 2 blocks of 64" in prose
    assert "4 groups per block = 8 tasks" in prose
    assert f"every worker starts {shipped:g} s before its first task" in prose
    assert max(len(line) for line in text.output.splitlines()) <= 80  # nothing wider than the terminal
    # the table fits a plain 80-column terminal: every header and value whole, none cut to "…"
    wide = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", str(KITTI_FRAMES), "--workers", "2", "--workers",
                                    "256"], env={"COLUMNS": "80"})
    table = wide.output[wide.output.index(" workers "):]
    assert "…" not in table and all(h in table for h in ("groups", "task s", "CPU-h", "span*", "util*"))
    assert max(len(line) for line in table.splitlines()) <= 80
    bad = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "10", "--source", "/nonexistent"])
    assert bad.exit_code == 2 and "not both" in bad.output
    missing = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "10", "--costs", "/nonexistent.json"])
    assert missing.exit_code == 2 and "nonexistent.json" in missing.output


@pytest.mark.parametrize("ratio, noted", [(1.5, True), (0.6, True), (1.1, False), (0.9, False)])
def test_plan_notes_a_machine_faster_or_slower_than_the_one_its_table_measured(kitti_c, monkeypatch, ratio, noted):
    """The shipped table's times are its machine's: on one that runs the speed probe 1.36× as long, `plan`
    predicted 16.8 s for a demo build that took 29 s, without a word. Beyond 15 % it says so, with the factor and
    the commands that measure this machine's table."""
    import bench_build.bench.costs as bench_costs

    there = min(load_costs(kitti_c).extra["speed_probe_ms"])
    monkeypatch.setattr(bench_costs, "speed_probe", lambda repeat=5: there * ratio)
    args = ["plan", "kitti-c", "--frames", "100", "--workers", "3"]
    out = " ".join(CliRunner().invoke(app, args).output.split())
    said = (f"note: this machine runs the speed probe in {there * ratio:.0f} ms, the one that measured these costs "
            f"in {there:.0f} ms: its tasks take ≈ ×{ratio:.2f} the times planned")
    assert (said in out) is noted, out
    assert ("`bench-build bench stages --recipe kitti-c --costs-out FILE` and `bench-build bench scale --costs-out "
            "FILE` measure this machine's table for --costs FILE" in out) is noted


def test_plan_prose_wraps_at_words_and_keeps_a_long_path_whole():
    """`plan`'s prose is wrapped to the terminal at spaces; rich broke a path longer than a line with a newline
    inside it, so the command `plan` prints to measure a table could not be copied."""
    from rich.text import Text

    from bench_build.cli.prepare_commands import word_lines

    path = "/tmp/" + "x" * 90 + "/mini-c.toml"
    lines = [t.plain for t in word_lines(Text.from_markup(f"[yellow]costs:[/yellow] run `bench stages --recipe "
                                                          f"{path} --costs-out FILE` on the demo data"), 40)]
    assert lines == ["costs: run `bench stages --recipe", path, "--costs-out FILE` on the demo data"]
    assert [t.plain for t in word_lines(Text("a b c"), 80)] == ["a b c"]


def test_plan_says_what_it_cannot_predict(small_recipe):
    """Another benchmark's cost table priced only the corruptions both have and silently guessed the rest; a
    recipe without a table got 10 ms per corruption printed as a prediction ("0.00 CPU-hours" for 3DOS);
    --split with --frames and a --groups beyond what a block can be cut into were ignored without a word;
    object benchmarks' demo data was planned in blocks of 2 where `run` uses 16."""
    from bench_build.plan.costs import TABLES

    table = TABLES / "kitti-c.json"
    other = CliRunner().invoke(app, ["plan", "robo3d-kitti-c", "--frames", "100", "--costs", str(table)])
    assert other.exit_code == 2 and "the cost table of kitti-c has no cost for robo3d-kitti-c's wet_ground" in (
        " ".join(other.output.split()))
    guessed = " ".join(CliRunner().invoke(app, ["plan", str(small_recipe), "--frames", "100"]).output.split())
    assert "costs: not measured for mini-c" in guessed and "placeholders, not predictions" in guessed
    assert f"`bench-build bench stages --recipe {small_recipe} --no-builds --no-objects --costs-out FILE`" in guessed
    tiny = " ".join(CliRunner().invoke(app, ["plan", "3dos", "--frames", "10"]).output.split())
    assert "0.00 CPU-hours" not in tiny and "CPU-s as one task per block" in tiny
    assert tiny.startswith("3dos: 10 shapes in 1 block of ")  # an object benchmark's examples are shapes
    assert "all 1 cores" not in tiny
    split = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "10", "--split", "val"])
    assert split.exit_code == 2 and "with --frames there is no source" in split.output
    many = " ".join(CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "20", "--groups", "500",
                                             "--workers", "4"]).output.split())
    kitti = load_recipe("kitti-c")
    most = len(group_partitions(kitti, load_costs(kitti), 500))  # as many as the costs allow: fewer than 126
    assert f"note: --groups 500: a block is cut into {most} groups at most" in many and most < 126
    from bench_build.build.run import DEMO_OBJECTS_PER_SHARD, default_frames_per_shard

    assert default_frames_per_shard(load_recipe("modelnet-c"), demo=True) == DEMO_OBJECTS_PER_SHARD
    assert default_frames_per_shard(load_recipe("modelnet-c"), demo=False) == load_recipe("modelnet-c").frames_per_shard


# Peak RSS from /proc/self/status VmHWM: it belongs to this process's own address space. ru_maxrss does
# not: Linux carries it across fork + execve, so a child of a large pytest process reports the parent's peak.
RSS_SCRIPT = """
import re, sys
from bench_build.plan.scale import plan_build
frames = int(sys.argv[1])
r = plan_build("kitti-c", [f"{i:07d}" for i in range(frames)], frames_per_shard=64)
assert r["examples_stored"] >= 1_000_000 * (frames // 8000)
status = open("/proc/self/status").read()
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) / 1024)
"""


def test_driver_memory_stays_flat_as_the_plan_grows():
    """Planning only (no Ray): 1 M stored examples (8,000 frames) and 10 M, each in a fresh process."""
    rss = {}
    for frames in (8_000, 80_000):
        out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(frames)], capture_output=True, text=True,
                             check=True)
        rss[frames] = float(out.stdout.strip().splitlines()[-1])
    assert rss[8_000] <= 500, rss
    assert rss[80_000] <= 500 and rss[80_000] - rss[8_000] <= 100, rss  # 10× the plan, not 10× the memory


def _data_files(version_dir) -> dict[str, bytes]:
    return {p.relative_to(version_dir).as_posix(): p.read_bytes()
            for p in sorted(version_dir.rglob("*.parquet")) if "_ledger" not in p.parts}


def test_grouped_build_equals_one_task_per_block_and_resumes_only_its_own_split(small_recipe, demo_kitti, tmp_path,
                                                                                  shared_ray):
    from bench_build.build.ledger import LedgerMismatch
    from bench_build.build.run import run_build
    from bench_build.manifests.manifest import read_manifest, stable_view

    common = {"source": str(demo_kitti), "workers": 2, "max_frames": 4, "frames_per_shard": 2, "progress": False}
    whole = run_build(str(small_recipe), out=tmp_path / "whole", groups=1, **common)
    split = run_build(str(small_recipe), out=tmp_path / "split", groups=4, **common)
    assert whole.ok and split.ok and whole.shards_total == 2 and split.shards_total == 2 * 4
    from bench_build.cli.build_commands import _counts_line

    assert (whole.groups, split.groups) == (1, 4)  # what the run's last line counts in
    assert _counts_line(whole).startswith("2 shards: 0 already done, 2 built, 0 failed in ")
    assert _counts_line(split).startswith("8 tasks (2 shards × 4 task groups): 0 already done, 8 built, 0 failed")
    assert _data_files(split.version_dir) == _data_files(whole.version_dir)  # 2 × 21 files, same bytes
    assert len(_data_files(whole.version_dir)) == 2 * 21
    assert stable_view(read_manifest(split.version_dir)) == stable_view(read_manifest(whole.version_dir))
    # each task recorded its own files; together every file exactly once, clean only in group 0
    shards = split.version_dir / "_ledger" / "shards"
    entries = {p.stem: json.loads(p.read_text()) for p in shards.glob("part-*.json")}
    files = [f["path"] for e in entries.values() for f in e["files"]]
    assert len(files) == len(set(files)) == 2 * 21
    assert {n for n, e in entries.items() if any(f["corruption"] == "clean" for f in e["files"])} == {
        "part-00000-of-00002-g000-of-004", "part-00001-of-00002-g000-of-004"}
    # two tasks "never finished": a re-run without --groups redoes exactly those, with the recorded split
    lost = ["part-00000-of-00002-g002-of-004", "part-00001-of-00002-g003-of-004"]
    for name in lost:
        (shards / f"{name}.json").unlink()
    resumed = run_build(str(small_recipe), out=tmp_path / "split", **common)
    assert resumed.ok and resumed.shards_skipped == 6 and sorted(resumed.shards_built) == lost
    assert _data_files(split.version_dir) == _data_files(whole.version_dir)
    status = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(tmp_path / "split")])
    assert "8/8 tasks (2 shards × 4 task groups) done" in status.output and "manifest: yes" in status.output
    # another split on a build in progress is refused, saying how to resume
    (shards / f"{lost[0]}.json").unlink()
    status = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(tmp_path / "split")])
    assert "7/8 tasks (2 shards × 4 task groups) done" in status.output and "1 pending" in status.output
    with pytest.raises(LedgerMismatch, match="started with 4 task group"):
        run_build(str(small_recipe), out=tmp_path / "split", groups=2, **common)


def _ledger_file(corruption: str, severity: int, rows: int) -> dict:
    """A file of a done ledger entry, with every key its readers need (`bench_build.build.ledger.entry_problem`)."""
    return {"path": f"data/corruption={corruption}/severity={severity}/part.parquet", "corruption": corruption,
            "severity": severity, "rows": rows, "bytes": 1, "sha256": "", "seconds": 0.1}


def test_the_count_of_split_shards_reads_as_words():
    """`run --max-frames 2 --groups 1000` ended with `49 tasks (1 shards × 49 task groups)`, and `status` said the
    same: one shard is singular."""
    from bench_build.cli.build_commands import task_unit

    assert task_unit(49, 49) == "tasks (1 shard × 49 task groups)"
    assert task_unit(8, 4) == "tasks (2 shards × 4 task groups)"
    assert (task_unit(1, 1), task_unit(3, 1)) == ("shard", "shards")


def test_task_cpu_per_example_separates_each_worker_process_warm_up(tmp_path):
    """`bench` extrapolates full-build CPU from a demo build's ledger: per-example CPU from the tasks that ran in an
    already warm process, and the warm-up (imports, numba's cached code) as what each process's first task cost
    beyond that rate; the contact-sheet painting is excluded. Where a process ran only one task, nothing can be
    separated and every task counts."""
    from bench_build.bench.costs import task_cpu_per_example
    from bench_build.build.ledger import Ledger

    ledger = Ledger(tmp_path)
    rate, warmup = 0.02, 1.5  # s per example, s per process

    def entry(pid, start, rows, sheet=0.0, first=False):
        return {"pid": pid, "process_cpu_start": start, "files": [_ledger_file("clean", 0, rows)], "seconds": 1.0,
                "cpu_seconds": rate * rows + sheet + (warmup if first else 0.0), "sheet_cpu_seconds": sheet}

    tasks = {"t0": entry(11, 0.4, 100, sheet=2.0, first=True), "t1": entry(11, 5.0, 200), "t2": entry(11, 9.0, 50),
             "t3": entry(12, 0.5, 120, first=True), "t4": entry(12, 4.0, 80)}
    for name, e in tasks.items():
        ledger.record_done(name, e)
    got_rate, got_warmup = task_cpu_per_example(tmp_path, list(tasks))
    assert got_rate == pytest.approx(rate) and got_warmup == pytest.approx(warmup)
    # each process ran one task: the rate is everything over everything, no warm-up separated
    got_rate, got_warmup = task_cpu_per_example(tmp_path, ["t0", "t3"])
    assert got_rate == pytest.approx((rate * 220 + 2 * warmup) / 220) and got_warmup == 0.0


def test_bench_timings_run_with_one_blas_thread_as_a_ray_task_does():
    """`bench` times stages inside `one_thread`: the BLAS/OpenMP pools are limited to one thread while it runs (a
    one-CPU Ray task's setting) and restored after, so an idle core's spinning BLAS thread is not counted."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from bench_build.bench.timing import one_thread

    with threadpool_limits(limits=2):  # whatever the machine has, start from more than one
        before = [p["num_threads"] for p in threadpool_info()]
        inside = one_thread(lambda: [p["num_threads"] for p in threadpool_info()])()
        assert inside and all(n == 1 for n in inside)
        assert [p["num_threads"] for p in threadpool_info()] == before


def test_cost_table_write_cost_per_partition_round_trips_and_prices_partitions(kitti_c, tmp_path):
    """A partition pays its own output's write cost when the table has one (``write_ms_by``), else ``write_ms``;
    tables written before the field still load; a negative cost is refused."""
    from bench_build.plan.costs import parse_costs

    base = default_costs(kitti_c)
    table = CostTable(**{**base.__dict__, "write_ms_by": {"snow": (11.0, 12.0, 13.0, 14.0, 25.0)}})
    assert table.partition_ms("snow", 5) == pytest.approx(base.stage_ms["snow"][4] + 25.0)
    assert table.partition_ms("fog", 2) == pytest.approx(base.stage_ms["fog"][1] + base.write_ms)
    assert table.partition_ms(CLEAN, 0) == base.write_ms
    again = parse_costs(json.loads(table.to_json()), "t")
    assert again.write_ms_by == table.write_ms_by and again.partition_ms("snow", 5) == table.partition_ms("snow", 5)
    old = json.loads(base.to_json())
    assert "write_ms_by" not in old and parse_costs(old, "old").write_ms_by == {}
    with pytest.raises(ValueError, match="negative"):
        parse_costs({**json.loads(table.to_json()), "write_ms_by": {"snow": [1.0, -2.0]}}, "bad")
    # the scale (a real build's tasks over the parts' prediction) multiplies every cost, keeps their ratios
    scaled = CostTable(**{**table.__dict__, "scale": 1.3})
    parts = partition_order(kitti_c, table)
    assert group_cost_ms(parts, scaled) == pytest.approx(1.3 * group_cost_ms(parts, table))
    assert scaled.read() == pytest.approx(1.3 * table.read_ms) and scaled.prep("kdtree") == pytest.approx(
        1.3 * table.prep_ms["kdtree"])
    assert group_partitions(kitti_c, scaled, 7) == group_partitions(kitti_c, table, 7)
    assert parse_costs(json.loads(scaled.to_json()), "s").scale == 1.3
    with pytest.raises(ValueError, match="scale"):
        parse_costs({**json.loads(table.to_json()), "scale": 40}, "bad")
    shipped = load_costs(kitti_c)  # the shipped table prices every corrupted partition's own output
    assert 1.0 < shipped.scale < 2.0  # measured by a demo build, not left at 1
    assert set(shipped.write_ms_by) == {c.name for c in kitti_c.corruptions}
    assert all(len(r) == kitti_c.severities and min(r) > 0 for r in shipped.write_ms_by.values())


def test_model_prediction_for_a_finished_build_reads_its_tasks_from_the_ledger(kitti_c, tmp_path):
    """`bench` checks the cost table against a real build: per stored example, what the table predicts for the
    build's own tasks (each task's frames × its read, caches and partitions)."""
    from bench_build.bench.costs import model_ms_per_example
    from bench_build.build.ledger import Ledger

    table = default_costs(kitti_c)
    a = [(CLEAN, 0), ("fog", 1), ("fog", 2)]
    b = [("snow", 3)]
    ledger = Ledger(tmp_path)
    for name, parts, frames in (("t0", a, ["0", "1"]), ("t1", b, ["2", "3", "4"])):
        ledger.record_done(name, {"frames": frames, "files": [_ledger_file(c, s, len(frames)) for c, s in parts],
                                  "seconds": 1.0})
    want = (2 * group_cost_ms(a, table) + 3 * group_cost_ms(b, table)) / (2 * 3 + 3 * 1)
    assert model_ms_per_example(tmp_path, ["t0", "t1", "missing"], table) == pytest.approx(want)


def test_bench_write_costs_commit_each_partitions_own_output(small_recipe):
    """The cost table's write costs come from committing each partition's real output as a task does (a file
    under its name, every severity priced)."""
    from dataclasses import replace

    import numpy as np

    from bench_build.bench.costs import write_costs
    from bench_build.sources.demo.kitti import generate_frame

    recipe = load_recipe(str(small_recipe))
    demo = [replace(f, points=np.ascontiguousarray(f.points[:, :4]), fields=f.fields[:4])
            for f in (generate_frame(i) for i in range(2))]
    clean, by, size = write_costs(recipe, demo, repeat=1)
    assert set(by) == {c.name for c in recipe.corruptions}
    assert all(len(r) == recipe.severities and all(x > 0 for x in r) for r in by.values())
    assert clean > 0 and 0.3 * demo[0].points.nbytes < size < demo[0].points.nbytes


@pytest.mark.parametrize("args", [["plan", "kitti-c", "--frames", "8", "--worker-start", "inf", "--json"],
                                  ["validate", "bench-out/kitti-c/1.0.0", "--width", "inf"]])
def test_an_infinite_float_option_is_refused(args):
    """`plan --worker-start inf` was taken: the table said "infh" and `--json` wrote `Infinity`, which is not the
    strict JSON every file and output of bench-build is; `validate --width inf` would build an infinite PointNet.
    Both options are bounded now (exit 2 before any work)."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "less than or equal to" in res.output, res.output
    assert "Infinity" not in res.output

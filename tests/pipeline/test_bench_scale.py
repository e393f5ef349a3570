"""`bench scale --control`: the hardware's own CPU inflation, measured with no bench-build code in the loop."""

from __future__ import annotations

import os

import pytest

from bench_build.bench.control import cpu_topology, describe, run_control


def test_the_control_measures_alone_and_together_and_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    r = run_control(2, iterations=1, rounds=1)
    assert r["copies"] == 2
    for loop in (r, r["in_cache"]):  # the streaming loop at the top level, the in-cache one beside it
        assert loop["alone_cpu_s"] > 0 and loop["together_cpu_s_median"] > 0
        # from the unrounded CPU times: equal to the printed ones' ratio up to their rounding
        assert loop["inflation"] == pytest.approx(loop["together_cpu_s_median"] / loop["alone_cpu_s"], rel=0.02)
    assert r["topology"]["logical_cpus"] == len(os.sched_getaffinity(0))
    # the children ran with one thread per pool; the caller's environment is restored afterwards
    assert "OMP_NUM_THREADS" not in os.environ and os.environ["OPENBLAS_NUM_THREADS"] == "3"


def test_a_workers_first_task_warm_up_is_told_from_its_later_tasks():
    from bench_build.bench.scale import first_task_warmup, measured_runtime

    def task(pid, started, seconds, frames=2):
        return {"pid": pid, "started": started, "seconds": seconds, "frames": [f"{i:06d}" for i in range(frames)]}

    # worker 1: first 5.0 s, later 4.2 and 4.4 s for 2 frames → 0.7 s; worker 2: first 3-frame task 7.0 s, a later
    # 2-frame one 4.4 s (2.2 s per frame) → 0.4 s; worker 3 ran one task: no measure
    entries = [task(1, 10.0, 5.0), task(1, 15.0, 4.2), task(1, 19.2, 4.4), task(2, 10.1, 7.0, frames=3),
               task(2, 17.1, 4.4), task(3, 10.2, 4.0)]
    assert first_task_warmup(entries) == pytest.approx(0.55)  # median of 0.7 and 0.4
    assert first_task_warmup([task(1, 10.0, 5.0), task(2, 10.0, 4.0)]) is None  # one task per worker
    assert first_task_warmup([task(1, 10.0, 3.0), task(1, 13.0, 4.0)]) == 0.0  # never negative
    # block 0's task painted the contact sheet's panels (0.5 s): work, not warm-up
    painted = {**task(1, 10.0, 5.2), "split": {"paint": 0.5, "compute": 2.0}}
    assert first_task_warmup([painted, task(1, 15.2, 4.2), task(1, 19.4, 4.4)]) == pytest.approx(0.4)

    def run(workers, warm, start):
        return {"workers": workers, "cpu_inflation": 1.0, "ledger": {"warmup_s": warm},
                "phases": {"plan": 0.1, "ray_start": 3.0, "worker_start": start, "finish": 0.1}}

    results = {"frames": 8, "cores": 2, "runs": [run(1, 0.7, 0.6), run(2, None, 0.8)]}
    assert measured_runtime(results)["worker_start_s"] == pytest.approx(0.7 + 0.7)
    results["runs"][0]["ledger"]["warmup_s"] = None  # no worker ran two tasks: the model's constant stays
    assert "worker_start_s" not in measured_runtime(results)


def test_the_measured_finish_leaves_the_contact_sheet_to_a_term_of_its_own():
    """A build whose blocks ended together waited 2.8 s for the sheet in its finish (``contact_sheet``), one whose
    block 0 ended early waited nothing: the table's ``finish_s`` is the finish without that wait, and ``sheet_s``
    the drawing's own time, so that `plan` puts back only what of it outlasts the last task at each count."""
    from bench_build.bench.scale import measured_runtime

    def run(workers, finish, waited, drawn):
        return {"workers": workers, "cpu_inflation": 1.0, "ledger": {},
                "phases": {"plan": 0.1, "ray_start": 3.0, "finish": finish, "contact_sheet": waited,
                           "sheet_draw": drawn}}

    rt = measured_runtime({"frames": 8, "cores": 2, "runs": [run(1, 0.4, 0.0, 3.0), run(2, 3.2, 2.8, 3.2),
                                                             run(2, 0.5, 0.0, 3.4)]})
    assert rt["finish_s"] == pytest.approx(0.4) and rt["sheet_s"] == pytest.approx(3.2)
    older = {"frames": 8, "cores": 2, "runs": [{"workers": 1, "cpu_inflation": 1.0, "ledger": {},
                                                "phases": {"plan": 0.1, "ray_start": 3.0, "finish": 0.4}}]}
    assert "sheet_s" not in measured_runtime(older)  # results from before the phase: the model's constant stays


def _build(workers: int, wall: float, cpu: float, phases: dict, warm: float | None = None) -> dict:
    return {"workers": workers, "wall_s": wall, "build_s": wall - 1, "phases": phases,
            "ledger": {"tasks": 4, "task_cpu_s": cpu, "warmup_s": warm, "longest_task_s": cpu / 4, "split": {}}}


def test_the_schedule_says_how_far_apart_workers_began_idled_and_finished():
    from bench_build.bench.scale import schedule_stats

    def task(pid, started, seconds):
        return {"pid": pid, "started": started, "seconds": seconds, "cpu_seconds": seconds * 0.9}

    # worker 7: 100.0–104.0, then 104.5–108.5 (0.5 s idle); worker 9 begins 1 s later: 101.0–105.0, then
    # 105.0–111.0 (no gap). Its last end is 2.5 s after worker 7's: the drain
    s = schedule_stats([task(9, 105.0, 6.0), task(7, 100.0, 4.0), task(9, 101.0, 4.0), task(7, 104.5, 4.0)])
    assert s["workers"] == 2 and s["start_spread_s"] == 1.0 and s["gaps_s"] == 0.5 and s["drain_s"] == 2.5
    assert s["task_s"]["mean"] == 4.5 and s["task_s"]["max_over_mean"] == pytest.approx(6.0 / 4.5, abs=1e-3)
    assert s["task_s"]["cv"] == pytest.approx(0.866 / 4.5, abs=1e-3)  # population σ of 4, 4, 4, 6
    assert s["timeline"] == [[0, 0.0, 4.0, 3.6], [1, 1.0, 4.0, 3.6], [0, 4.5, 4.0, 3.6], [1, 5.0, 6.0, 5.4]]
    assert schedule_stats([{"pid": 1, "seconds": 3.0}]) is None  # no start times recorded


def test_rounds_are_reported_as_each_worker_counts_medians():
    """`bench scale --rounds 3`: builds alternate 1, 2, 1, 2, 1, 2; each count's row is the median build (its wall
    the median wall), with the median task CPU, warm-up and phases over its rounds, and the walls' range."""
    from bench_build.bench.scale import measured_runtime, median_rounds

    builds = [_build(1, 20.0, 17.0, {"plan": 0.1, "ray_start": 2.0, "finish": 0.2}, 0.5),
              _build(2, 13.0, 18.0, {"plan": 0.1, "ray_start": 3.0, "finish": 0.3, "worker_start": 0.6}, 0.7),
              _build(1, 25.0, 19.0, {"plan": 0.1, "ray_start": 2.2, "finish": 0.2}),
              _build(2, 12.0, 18.5, {"plan": 0.1, "ray_start": 2.0, "finish": 0.2, "worker_start": 0.5}, 0.6),
              _build(1, 21.0, 17.5, {"plan": 0.1, "ray_start": 2.1, "finish": 0.4}, 0.4),
              _build(2, 14.0, 30.0, {"plan": 0.1, "ray_start": 2.1, "finish": 0.2}, 0.8)]
    one, two = median_rounds(builds)
    assert (one["workers"], one["rounds"], one["wall_s"], one["wall_s_range"]) == (1, 3, 21.0, [20.0, 25.0])
    assert one["ledger"]["task_cpu_s"] == 17.5 and one["ledger"]["warmup_s"] == 0.45
    assert one["phases"] == {"plan": 0.1, "ray_start": 2.1, "finish": 0.2}
    assert two["wall_s"] == 13.0 and two["build_s"] == 12.0  # the median build's own fields
    assert two["ledger"]["task_cpu_s"] == 18.5  # one noisy round (30 CPU-s) does not set the inflation
    assert two["phases"]["worker_start"] == 0.55  # over the rounds that have it
    # the runtime `--costs-out` stores comes from the medians: inflation 18.5 / 17.5, not 30 / 17.5
    one["cpu_inflation"], two["cpu_inflation"] = 1.0, round(18.5 / 17.5, 3)
    rt = measured_runtime({"runs": [one, two], "cores": 2, "frames": 8, "rounds": 3})
    assert rt["inflation"] == round(18.5 / 17.5, 3) and rt["cores"] == 2 and "--rounds 3" in rt["measured"]
    assert rt["driver_start_s"] == round((2.2 + 2.2) / 2, 3)
    # one round: the build itself
    (single,) = median_rounds(builds[:1])
    assert single["wall_s"] == 20.0 and single["rounds"] == 1 and single["ledger"]["task_cpu_s"] == 17.0


def _sysfs(root, cores):
    """A fake /sys/devices/system/cpu: logical CPU i on (package, core) ``cores[i]``."""
    for i, (pkg, core) in enumerate(cores):
        topo = root / f"cpu{i}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")
    return root


def test_the_topology_counts_physical_cores_from_sysfs(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    # 4 logical CPUs, hyper-thread siblings pairwise; core ids repeat across packages
    t = cpu_topology(_sysfs(tmp_path / "ht", [(0, 0), (0, 1), (0, 0), (0, 1)]))
    assert (t["logical_cpus"], t["cores"], t["threads_per_core"]) == (4, 2, 2.0)
    t = cpu_topology(_sysfs(tmp_path / "two", [(0, 0), (0, 1), (1, 0), (1, 1)]))
    assert (t["cores"], t["threads_per_core"]) == (4, 1.0)
    assert cpu_topology(tmp_path / "nothing")["cores"] is None  # no sysfs: unknown, not guessed


def test_the_control_says_whose_the_inflation_is():
    def control(streaming, in_cache, cores, copies=16):
        return {"copies": copies, "inflation": streaming, "in_cache": {"inflation": in_cache},
                "topology": {"logical_cpus": 16, "cores": cores}}

    assert "next to nothing" in describe(control(1.02, 1.01, 16))
    assert "share them" in describe(control(1.18, 1.16, 8))  # 16 copies on 8 cores
    assert "clock" in describe(control(1.18, 1.15, 16))
    assert "memory bandwidth" in describe(control(1.18, 1.01, 8))
    assert "cores unknown" in describe(control(1.18, 1.01, None))


def test_the_inflation_plan_stores_leaves_out_each_workers_one_off_warm_up():
    """2 workers each pay the first-task warm-up that 1 worker pays once: counted in the raw task CPU (×1.06
    here), it is not the same tasks running slower (×1.02) and `plan` already adds it per worker (worker start)."""
    from bench_build.bench.scale import measured_runtime, work_cpu

    def run(workers, cpu, warm, processes):
        return {"workers": workers, "wall_s": 10.0, "phases": {"plan": 0.1, "ray_start": 2.0, "finish": 0.3},
                "ledger": {"task_cpu_s": cpu, "warmup_s": warm, "processes": processes}}

    one, two = run(1, 15.8, 0.55, 1), run(2, 16.7, 0.1, 2)  # one warm-up for both: the 1-worker build's
    assert work_cpu(one, one) == pytest.approx(15.25) and work_cpu(two, one) == pytest.approx(15.6)
    assert work_cpu(two, run(1, 15.8, None, 1)) == pytest.approx(16.5)  # base never measured it: the run's own
    assert work_cpu(run(2, 16.7, None, 2), run(1, 15.8, None, 1)) is None  # never measured: no guess
    two["task_inflation"], two["cpu_inflation"] = round(15.6 / 15.25, 3), round(16.7 / 15.8, 3)
    one["task_inflation"], one["cpu_inflation"] = 1.0, 1.0
    rt = measured_runtime({"runs": [one, two], "cores": 2, "frames": 8})
    assert rt["inflation"] == round(15.6 / 15.25, 3)
    two["task_inflation"] = None  # unknown: the raw inflation, as before
    assert measured_runtime({"runs": [one, two], "cores": 2, "frames": 8})["inflation"] == round(16.7 / 15.8, 3)


def test_the_speed_up_ceiling_divides_the_tasks_by_the_worker_ratio_and_says_when_it_is_beaten():
    """The ceiling divided the first count's tasks by N, not by N over the first count (4 vs 2 workers: by 4, not
    2), and a measured speed-up above it (2.14× against 1.64× on a noisy machine) was printed without a word."""
    from bench_build.bench.scale import ceiling_speedup, speedup_line

    two = {"workers": 2, "wall_s": 22.0, "serial_s": 4.0}
    four = {"workers": 4, "wall_s": 13.0, "serial_s": 4.0, "speedup": 22.0 / 13.0}
    assert ceiling_speedup(two, four) == pytest.approx(22.0 / (4.0 + 18.0 / 2))
    assert "above that bound" not in speedup_line(two, four, ceiling_speedup(two, four))
    one = {"workers": 1, "wall_s": 30.0, "serial_s": 3.0}
    fast = {"workers": 2, "wall_s": 14.0, "serial_s": 3.0, "speedup": 30.0 / 14.0}
    line = speedup_line(one, fast, ceiling_speedup(one, fast))
    assert "(the most the serial time allows: 1.82×)" in line and "above that bound" in line and "--rounds" in line


def test_bench_refuses_an_output_it_cannot_write_before_measuring(tmp_path):
    """`bench scale --costs-out /nonexistent/c.json` measured for minutes and then failed with a traceback, losing
    the results; a missing --out or --source gave a 46-line traceback."""
    from typer.testing import CliRunner

    from bench_build.cli import app

    runner = CliRunner()
    for args, said in ((["scale", "--costs-out", str(tmp_path / "no" / "c.json")], "the folder"),
                       (["scale", "--json-out", str(tmp_path)], "is a folder"),
                       (["scale", "--out", str(tmp_path / "none")], "--out"),
                       (["scale", "--source", str(tmp_path / "none")], "does not exist"),
                       (["stages", "--costs-out", str(tmp_path / "no" / "c.json")], "does not exist")):
        res = runner.invoke(app, ["bench", *args])
        assert res.exit_code == 2 and said in res.output and "Traceback" not in res.output, (args, res.output)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["bench", "scale", "--costs-out", str(bad)])
    assert res.exit_code == 2 and "not a cost table" in res.output


def test_re_measuring_the_stages_keeps_the_runtime_bench_scale_measured(tmp_path, capsys):
    """`bench stages --costs-out` rewrote the table and dropped its `runtime`, so `plan` fell back to defaults
    unless the two measurements ran in one order."""
    import json

    from bench_build.bench.stages import kept_runtime

    table = tmp_path / "c.json"
    assert kept_runtime(table) == {}
    table.write_text(json.dumps({"recipe": "kitti-c", "runtime": {"driver_start_s": 2.0, "measured": "x"}}))
    assert kept_runtime(table) == {"runtime": {"driver_start_s": 2.0, "measured": "x"}}
    assert "keeping the runtime" in capsys.readouterr().out


def test_bench_refuses_json_that_is_not_a_cost_table_before_measuring(tmp_path, monkeypatch):
    """Only text that was not JSON was refused: `--costs-out settings.json` measured, then `stages` replaced the
    user's file with a cost table and `scale` merged a `runtime` into it (into `[]`: a TypeError traceback after
    the builds). A cost table, the shipped ones included, is still taken (and the `runtime` part of one, which
    `stages` completes)."""
    import json
    import shutil

    from typer.testing import CliRunner

    import bench_build.bench.scale as scale
    import bench_build.bench.stages as stages
    from bench_build.cli import app
    from bench_build.plan.costs import TABLES

    measured = []
    monkeypatch.setattr(stages, "run_bench", lambda **k: measured.append(k["costs_out"]))
    monkeypatch.setattr(scale, "run_scale", lambda *a, **k: measured.append(k["costs_out"]))
    runner = CliRunner()
    path = tmp_path / "settings.json"
    for text in ('{"name": "my settings", "port": 8080}', "[]", '"kitti-c"', '{"recipe": 1}'):
        path.write_text(text)
        for command in (["stages", "--no-objects"], ["scale"]):
            res = runner.invoke(app, ["bench", *command, "--costs-out", str(path)])
            line = " ".join(res.output.split())
            assert res.exit_code == 2 and f"--costs-out {path}: exists and is not a cost table (a JSON " in line, (
                command, text, res.output)
            assert path.read_text() == text and not measured
    table = tmp_path / "kitti-c.json"
    shutil.copyfile(TABLES / "kitti-c.json", table)
    for command in (["stages", "--no-objects"], ["scale"]):
        res = runner.invoke(app, ["bench", *command, "--costs-out", str(table)])
        assert res.exit_code == 0, res.output
    assert measured == [table, table] and json.loads(table.read_text())["recipe"] == "kitti-c"


def test_control_only_writes_json_out_and_refuses_costs_out(tmp_path, monkeypatch):
    """`bench scale --control-only --json-out r.json` printed the control and wrote nothing, exit 0; with
    `--costs-out` it measured no runtime and said nothing of it."""
    import json

    from typer.testing import CliRunner

    import bench_build.bench.control as control
    from bench_build.cli import app

    fake = {"copies": 1, "inflation": 1.0}
    runs = []
    monkeypatch.setattr(control, "run_control", lambda n: runs.append(n) or fake)
    monkeypatch.setattr(control, "describe", lambda c: "control: fake")
    runner = CliRunner()
    table = tmp_path / "c.json"
    res = runner.invoke(app, ["bench", "scale", "--control-only", "--workers", "1", "--costs-out", str(table)])
    assert res.exit_code == 2 and "--costs-out with --control-only" in res.output, res.output
    assert not table.exists() and not runs
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["bench", "scale", "--control-only", "--workers", "1", "--json-out", str(out)])
    assert res.exit_code == 0 and f"results written to {out}" in res.output, res.output
    assert json.loads(out.read_text()) == {"control": fake} and runs == [1]


def test_the_plan_here_scales_the_tables_task_costs_to_what_the_first_builds_tasks_took():
    """On a machine slower than the table's, `bench scale`'s plan columns are off by the machine's speed; the plan
    here takes the table's task costs × (the first count's measured task seconds ÷ the table's for the same tasks),
    so at one worker its wall grows by exactly the extra task seconds, and the start-up and finish stay the table's."""
    from bench_build.bench.scale import plan_here
    from bench_build.plan.scale import plan_build

    frame_ids = [f"{i:06d}" for i in range(8)]
    plans = {n: plan_build("kitti-c", frame_ids, frames_per_shard=2, workers=[n])["schedule"][0] for n in (1, 2)}
    total = plans[1]["task_seconds"]["mean"] * plans[1]["tasks"]
    runs = [{"workers": n, "wall_s": 1.0, "plan": {"groups_per_block": plans[n]["groups_per_block"]},
             "ledger": {"task_wall_s": 2 * total}} for n in (1, 2)]
    here = plan_here("kitti-c", frame_ids, 2, runs)
    assert here["scale"] == 2.0
    assert here["wall_s"]["1"] == pytest.approx(plans[1]["wall_s"] + total, rel=1e-3)
    assert plans[2]["wall_s"] < here["wall_s"]["2"] < here["wall_s"]["1"]
    assert plan_here("kitti-c", frame_ids, 2, [{**runs[0], "ledger": {"task_wall_s": 0.0}}]) is None

"""`bench scale --control`: the hardware's own CPU inflation, measured with no bench-build code in the loop."""

from __future__ import annotations

import os

import pytest

from bench_build.bench.scale import run_control


def test_the_control_measures_alone_and_together_and_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    r = run_control(2, iterations=1, rounds=1)
    assert r["copies"] == 2 and r["alone_cpu_s"] > 0 and r["together_cpu_s_median"] > 0
    # from the unrounded CPU times: equal to the printed ones' ratio up to their rounding
    assert r["inflation"] == pytest.approx(r["together_cpu_s_median"] / r["alone_cpu_s"], rel=0.02)
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

    def run(workers, warm, start):
        return {"workers": workers, "cpu_inflation": 1.0, "ledger": {"warmup_s": warm},
                "phases": {"plan": 0.1, "ray_start": 3.0, "worker_start": start, "finish": 0.1}}

    results = {"frames": 8, "cores": 2, "runs": [run(1, 0.7, 0.6), run(2, None, 0.8)]}
    assert measured_runtime(results)["worker_start_s"] == pytest.approx(0.7 + 0.7)
    results["runs"][0]["ledger"]["warmup_s"] = None  # no worker ran two tasks: the model's constant stays
    assert "worker_start_s" not in measured_runtime(results)

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

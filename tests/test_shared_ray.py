"""The suite's shared local Ray (tests/shared_ray.py): a test that asks for it finds it running, a test that starts
a Ray of its own gets a fresh one (the shared one stopped first), and the next test that shares gets it again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import os

import ray


def _log(name):
    with open(os.environ["SHARED_RAY_LOG"], "a") as f:
        f.write(f"{name} {ray.get_runtime_context().get_node_id()} {ray.cluster_resources()['CPU']:g}\\n")


def test_a_shares(shared_ray):
    assert ray.is_initialized()
    _log("a")


def test_b_starts_its_own():
    from bench_build.runtime.ray import init_ray, stop_ray

    assert ray.is_initialized()  # a test leaves the shared Ray running until it starts one
    assert init_ray(workers=1, address=None)  # started: its own, the shared one stopped first
    try:
        _log("b")
    finally:
        stop_ray()


def test_c_shares_again(shared_ray):
    assert ray.is_initialized()
    _log("c")
'''


def test_a_test_that_starts_its_own_ray_gets_a_fresh_one_and_the_next_that_shares_gets_it_again(tmp_path):
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    log = tmp_path / "log.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    env |= {"SHARED_RAY_LOG": str(log), "PYTHONPATH": str(ROOT), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.shared_ray",
                          "-c", str(tmp_path / "pytest.ini"), str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = {name: (node, cpus) for name, node, cpus in (line.split() for line in log.read_text().splitlines())}
    assert [runs[t][1] for t in "abc"] == ["2", "1", "2"]  # the shared Ray's 2 CPUs; the test's own 1
    assert len({runs[t][0] for t in "abc"}) == 3  # three Rays: the shared one stopped for b, started again for c

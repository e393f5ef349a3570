"""`bench --s3-build --isolate-server`: the server and the builds really run on disjoint CPUs."""

import json
import os
import subprocess
import sys

import pytest

from bench_build.bench.publish import split_cpus, thread_affinity


def _child_cpus() -> set[int]:
    out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return set(json.loads(out))


def test_the_server_gets_the_last_cpu_and_the_build_the_rest():
    assert split_cpus({0, 1}) == ({0}, {1})
    assert split_cpus({3, 0, 5, 1}) == ({0, 1, 3}, {5})
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        split_cpus({0})


def test_a_process_started_inside_the_block_inherits_its_mask_and_the_mask_is_restored():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with thread_affinity(one):
        assert os.sched_getaffinity(0) == one
        assert _child_cpus() == one  # what SeaweedFS and Ray's GCS / raylet (and so its workers) get
    assert os.sched_getaffinity(0) == before
    assert _child_cpus() == before
    with thread_affinity(None):
        assert os.sched_getaffinity(0) == before


def test_the_mask_is_restored_when_the_block_fails():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), thread_affinity({min(before)}):
        raise RuntimeError("build failed")
    assert os.sched_getaffinity(0) == before

"""A local Ray that `init_ray` starts: only the processes a build uses (`runtime.ray.lean_local_head`)."""

from __future__ import annotations

import time

import psutil


def test_a_local_ray_starts_without_the_monitor_and_the_api_server_and_still_forwards_worker_output(capfd,
                                                                                                   no_shared_ray):
    """The autoscaler monitor (nothing to scale on one node) and the API server (job and state APIs bench-build
    never calls) were started on every build: ≈ 1.3 CPU-s and ≈ 0.8 s of `ray.init` each time. The log monitor
    stays, so a worker's output still reaches the driver; Ray's own start method is left as it was."""
    import ray
    from ray._private import ray_constants, worker
    from ray._private.node import Node

    from bench_build.runtime.ray import LEAN_HEAD_SKIPS, init_ray, stop_ray

    before = {name: Node.__dict__[name] for name in LEAN_HEAD_SKIPS}
    assert not ray.is_initialized()
    assert init_ray(workers=1, address=None)
    try:
        assert {name: Node.__dict__[name] for name in LEAN_HEAD_SKIPS} == before  # restored after the start
        started = worker._global_node.all_processes
        assert ray_constants.PROCESS_TYPE_MONITOR not in started
        assert ray_constants.PROCESS_TYPE_DASHBOARD not in started
        assert ray_constants.PROCESS_TYPE_LOG_MONITOR in started
        commands = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
        assert not [c for c in commands if "autoscaler/_private/monitor.py" in c or "dashboard/dashboard.py" in c]

        @ray.remote
        def say() -> int:
            print("worker says hello", flush=True)
            return 7

        assert ray.get(say.remote()) == 7
        deadline, seen = time.monotonic() + 20, ""
        while "worker says hello" not in seen and time.monotonic() < deadline:
            time.sleep(0.2)
            seen += "".join(capfd.readouterr())
        assert "worker says hello" in seen
    finally:
        stop_ray()
    assert not ray.is_initialized()

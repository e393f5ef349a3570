"""One local Ray per test process, shared by the in-process builds of every test that asks for it (`shared_ray`), across
modules: a local Ray costs ≈ 3 s and ≈ 5 CPU-s to start and stop, and most in-process builds need nothing of their
own from it. A plugin of its own (tests/conftest.py registers it), so tests/test_shared_ray.py can run it alone.

A test shares when ``shared_ray`` is among its fixtures (its own or those of a fixture it uses, a module's build
fixture for instance). Before it is set up, this process's shared Ray is started if it is not running: started as
`run_build` starts one (2 CPUs, the numeric and thread pins in every worker), from the environment between tests,
never one a test has changed. `run_build` and validation then find Ray running and neither start nor stop one.

Every other test gets Ray as before: the first time it starts one in this process (`init_ray`, or `ray.init` itself)
while the shared Ray runs, the shared Ray is stopped first, so the test's Ray is its own and fresh, with the
environment the test set (S3 credentials, test kill hooks reach its workers that way), the workers it asked for and
none of another test's state; the next test that shares starts the shared Ray again. So a test that sets variables
for its workers, counts Ray's processes, compares worker counts, times a build or joins a cluster must not ask for
``shared_ray``; one whose fixtures ask for it (a shared build, `mini_build`) asks for ``no_shared_ray`` as well, and
the shared Ray is stopped before it is set up; `own_ray` is the same for one block of a sharing test or fixture. A
test that never starts Ray leaves the shared one running, unless no test has shared it for `IDLE_S`.

``BENCH_BUILD_TEST_RAY_STARTS=<file>``: each local Ray a test process starts is appended to the file (the test and
whether it is the shared one), to find the tests that still start their own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from typing import Any

import pytest


class _State:
    sharing = False  # the test being run (set-up, call, tear-down) asked for `shared_ray`
    up = False  # this process's shared Ray is the Ray running in it
    nodeid = ""
    last_shared = 0.0  # when the last test that shares ended (time.monotonic)
    between_tests: dict[str, str] | None = None  # the environment before the first test


#: a shared Ray no test has used for this long is stopped before the next test: idle, a local Ray costs ≈ 2 CPU-s a
#: minute (its two idle workers, raylet, log monitor), a new one ≈ 5 CPU-s and ≈ 3 s (measured on 2 cores)
IDLE_S = 150.0


STATE = _State()
_REAL: dict[str, Any] = {}  # the unwrapped `init_ray` and `ray.init`
#: the modules that import `init_ray` by name: their binding is the one the builds call
INIT_RAY_USERS = ("bench_build.runtime.ray", "bench_build.build.run", "bench_build.validate.run")


@pytest.fixture(scope="session")
def shared_ray() -> None:
    """Ask for the process's shared Ray (this module's docstring): the hooks below start it before the test."""


@pytest.fixture(scope="session")
def no_shared_ray() -> None:
    """Stop the shared Ray before this test and give it Ray as if no fixture of it asked for the shared one."""


@contextlib.contextmanager
def own_ray():
    """Inside the block, Ray as for a test that does not share (a build there starts a Ray of its own, with the
    environment of the moment); after it, the shared Ray again for a test that shares."""
    sharing, STATE.sharing = STATE.sharing, False
    try:
        yield
    finally:
        STATE.sharing = sharing
        if sharing:
            _ensure()


def _record(shared: bool, seconds: float) -> None:
    if path := os.environ.get("BENCH_BUILD_TEST_RAY_STARTS"):
        with open(path, "a") as f:
            f.write(f"{STATE.nodeid}\t{'shared' if shared else 'own'}\t{seconds:.2f}\n")


def _release() -> None:
    """Stop the shared Ray (if it is the one running here)."""
    if STATE.up:
        STATE.up = False
        from bench_build.runtime.ray import stop_ray

        stop_ray()


def _ensure() -> None:
    """Start the shared Ray unless it runs; a Ray some other code left running is stopped first."""
    import ray

    if STATE.up and ray.is_initialized():
        return
    STATE.up = False
    if ray.is_initialized():
        from bench_build.runtime.ray import stop_ray

        stop_ray()
    t, now = time.perf_counter(), dict(os.environ)
    os.environ.clear()  # its workers inherit the environment between tests, whatever the test has set so far
    os.environ.update(STATE.between_tests or now)
    try:
        STATE.up = _REAL["init_ray"](workers=2, address=None)
    finally:
        os.environ.clear()
        os.environ.update(now)
    _record(True, time.perf_counter() - t)


def _own_first(real, record: bool = False):
    """``real`` (a Ray start), after stopping the shared Ray when the test running does not share it. ``record``:
    ``real`` is ``ray.init`` (`init_ray` calls it): a local start is recorded (`_record`)."""

    def start(*args, **kwargs):
        if STATE.sharing:
            return real(*args, **kwargs)
        _release()
        import ray

        local = kwargs.get("address", args[0] if args else None) in (None, "local")
        was_up, t = ray.is_initialized(), time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            if record and local and not was_up and ray.is_initialized():
                _record(False, time.perf_counter() - t)

    start.__wrapped__ = real  # type: ignore[attr-defined]
    start.__doc__ = real.__doc__
    return start


def _install() -> None:
    """Wrap `init_ray` (where builds bind it) and ``ray.init`` once their modules are imported."""
    if "init_ray" not in _REAL and "bench_build.runtime.ray" in sys.modules:
        _REAL["init_ray"] = sys.modules["bench_build.runtime.ray"].init_ray
    if "init_ray" in _REAL:
        wrapped = None
        for name in INIT_RAY_USERS:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "init_ray", None) is _REAL["init_ray"]:
                wrapped = wrapped or _own_first(_REAL["init_ray"])
                module.init_ray = wrapped
    ray = sys.modules.get("ray")
    if ray is not None and "ray.init" not in _REAL and hasattr(ray, "init"):
        _REAL["ray.init"] = ray.init
        ray.init = _own_first(ray.init, record=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: whether it shares, and the shared Ray started if it does (stopped if it asks for
    none, or if it has been idle for `IDLE_S`)."""
    if STATE.between_tests is None:
        STATE.between_tests = dict(os.environ)
    names = item.fixturenames
    STATE.sharing, STATE.nodeid = "shared_ray" in names and "no_shared_ray" not in names, item.nodeid
    if "no_shared_ray" in names or (not STATE.sharing and time.monotonic() - STATE.last_shared > IDLE_S):
        _release()
    if STATE.sharing:
        import bench_build.runtime.ray  # noqa: F401  (what `_install` wraps)

        _install()
        _ensure()
    _install()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        if STATE.sharing:
            STATE.last_shared = time.monotonic()


def pytest_sessionfinish(session):
    """The shared Ray stopped, and its watcher (`runtime.reaper`) seen leaving, as it does once Ray's processes are
    gone: it is this process's child."""
    STATE.sharing = False
    _release()
    from bench_build.runtime import reaper

    for watcher in reaper._WATCHERS:
        try:
            watcher.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()

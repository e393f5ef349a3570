"""Turns between the suite's processes: pyproject.toml runs the suite in two (pytest-xdist, a file per process), and
most tests share the machine, while a test marked ``alone`` (it times a build against a model) runs while no other
test does. A plugin of its own (tests/conftest.py imports its hooks), so tests/test_turns.py can run it in a
session of its own."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest


def _turns_lock() -> Path | None:
    """The lock the suite's processes take turns on (one per run), or None when the suite runs in one process."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return Path(tempfile.gettempdir()) / f"bench-build-tests-{run}.lock" if run else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Turns between the suite's processes (pyproject.toml runs it in two, pytest-xdist, a file per process): a test
    marked ``alone`` (it times a build against a model) holds the turn alone, every other test shares it. The whole
    protocol is inside the turn, so a module's fixtures (a build, a Ray, a server) set up and tear down inside it."""
    lock = _turns_lock()
    if lock is None:
        return (yield)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
        return (yield)


def pytest_sessionfinish(session):
    """A process that has run its last test needs no turn: the lock goes with the first to finish."""
    if (lock := _turns_lock()) is not None:
        lock.unlink(missing_ok=True)

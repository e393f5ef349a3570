"""Fault injection for the reliability tests: inert unless ``BENCH_BUILD_TEST_KILL`` is set."""

from __future__ import annotations

import os
import signal

TEST_KILL_ENV = "BENCH_BUILD_TEST_KILL"


def kill_point(moment: str, task: str) -> None:
    """Fault injection for the reliability tests, inert unless ``BENCH_BUILD_TEST_KILL`` is set.

    ``BENCH_BUILD_TEST_KILL="before-record:part-00001-of-00003,after-record:part-00000-of-00003"`` SIGKILLs the
    Ray worker running that task at that moment (before it builds anything / right after the ledger recorded
    it as done), on every attempt, so Ray's retries run out. Workers of a local Ray inherit the driver's
    environment, which is how a `bench-build run` subprocess passes it on."""
    wanted = os.environ.get(TEST_KILL_ENV)
    if wanted and f"{moment}:{task}" in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)


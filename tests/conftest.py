"""Suite-wide fixtures: Ray bound to loopback, and small demo datasets in real KITTI layout."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests import shared_ray
from tests.turns import pytest_runtest_protocol, pytest_sessionfinish  # noqa: F401  (hooks: turns of processes)

# Ray on loopback only, no auth, no dashboard (set before any test imports ray).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# The numeric pin (pipeline/runtime/numeric.py) before anything imports NumPy, as the CLI sets it: tests compute under
# the dispatch `bench-build` and its Ray workers use, and the CLI's late-pin warning is not raised in every run.
from bench_build.runtime.numeric import pin_environment

pin_environment()

# Ctrl-C as at a terminal: a suite launched as a background job of a script (`cmd &` without job control) inherits
# SIGINT ignored, and so would every `bench-build` the tests start; Python then installs no handler and the tests
# that send SIGINT (an interrupted run, `s3-local`) see it ignored. A real terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Coarse azimuth steps keep the e2e fixtures small (≈15k points per scan) while every other
# property of the demo generator (rings, objects, labels, calib, file layout) stays the same.
FIXTURE_AZIMUTH_STEP = 0.72

SMALL_RECIPE = """
[benchmark]
name = "mini-c"
version = "0.1.0"
seed = 7
source = "kitti"
severities = 5

[corruptions.gaussian_rad]
stage = "gaussian_rad"
sigma = [0.04, 0.06, 0.08, 0.10, 0.12]

[corruptions.beam_del]
stage = "beam_del"
count_divisor = [100, 30, 10, 5, 3]

[corruptions.background]
stage = "background"
count_divisor = [45, 40, 35, 30, 20]

[corruptions.translation]
stage = "translation"
min_distance = [0.0, 0.3, 0.5, 0.7, 0.9]
max_distance = [0.2, 0.4, 0.6, 0.8, 1.0]
"""


@pytest.fixture(scope="session")
def demo_kitti_master(tmp_path_factory) -> Path:
    from bench_build.sources.demo.kitti import write_demo_dataset

    return write_demo_dataset(tmp_path_factory.mktemp("demo") / "kitti", 6, azimuth_step_deg=FIXTURE_AZIMUTH_STEP)


@pytest.fixture
def demo_kitti(demo_kitti_master, tmp_path) -> Path:
    """A private copy of the 6-frame demo dataset (tests may corrupt it)."""
    dst = tmp_path / "kitti"
    shutil.copytree(demo_kitti_master, dst)
    return dst


@pytest.fixture
def small_recipe(tmp_path) -> Path:
    path = tmp_path / "mini-c.toml"
    path.write_text(SMALL_RECIPE)
    return path


#: the suite's longest files (≥ 50 s each on 2 cores), run first: xdist hands files out in collection order, and one
#: of these collected last (tests/test_*.py come after tests/pipeline/) kept one process busy a minute after the
#: other had finished
LONGEST_FIRST = ("tests/pipeline/test_publish.py", "tests/pipeline/test_reliability.py", "tests/test_docs.py",
                 "tests/test_numpy2_line.py")


def pytest_configure(config):
    config.pluginmanager.register(shared_ray, "bench-build-shared-ray")  # one local Ray per process (its docstring)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))  # stable: files stay whole


def pytest_terminal_summary(terminalreporter):
    """What a test recorded as its ``summary`` property (the doc blocks the suite skips), printed at the end of the
    run: a test's own output is not shown from the suite's worker processes."""
    for report in terminalreporter.stats.get("passed", []):
        for key, text in getattr(report, "user_properties", ()):
            if key == "summary" and report.when == "call":
                terminalreporter.write_line(text)
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        if note := low_disk_note(terminalreporter.config):
            terminalreporter.write_line(note)


#: below this much free space on the disk of the tests' temporary folders, a failing run says so
LOW_DISK = 4 << 30


def low_disk_note(config) -> str | None:
    """A line for a failing run on a nearly full disk: the S3 tests' SeaweedFS refuses writes below 1 % free and
    answers a bare InternalError, and builds, Ray and pip need room too (a CI run failed that way)."""
    where = Path(config.option.basetemp or os.environ.get("TMPDIR") or "/tmp")
    where = next((p for p in (where, *where.parents) if p.exists()), Path("/"))
    usage = shutil.disk_usage(where)
    if usage.free >= LOW_DISK:
        return None
    return (f"note: the disk holding {where} has {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.0f} "
            "GiB: tests that write (the S3 store, builds, Ray) may have failed for want of room")

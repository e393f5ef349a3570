"""The NumPy 2 line: the suite's core runs again in `.venv-np2` (NumPy 2, pyarrow 26+, installed without the
lock and without the nuscenes extra), which `.ci/install` creates in CI (``CI=true``) or on request
(``BENCH_BUILD_NUMPY2_LINE=1``). Skipped where that environment does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv-np2" / "bin" / "python"
#: what must hold on NumPy 2 (issue-level promises: pin, extras, build + verify + resume, every metric, loaders)
CORE = ["tests/pipeline/test_numeric_pin.py", "tests/pipeline/test_extras.py", "tests/pipeline/test_lock.py",
        "tests/pipeline/score", "tests/pipeline/test_loaders.py", "tests/pipeline/test_reader_cli.py",
        "tests/pipeline/test_schema.py"]


@pytest.mark.skipif(not PYTHON.exists(), reason="no .venv-np2 (CI=true bash .ci/install, or "
                                                "BENCH_BUILD_NUMPY2_LINE=1 bash .ci/install, creates it)")
def test_the_core_suite_passes_on_numpy_2():
    probe = subprocess.run([str(PYTHON), "-c", "import numpy, pyarrow; print(numpy.__version__, pyarrow.__version__)"],
                           capture_output=True, text=True, check=True)
    numpy_version, pyarrow_version = probe.stdout.split()
    assert int(numpy_version.split(".")[0]) >= 2 and int(pyarrow_version.split(".")[0]) >= 26, probe.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    res = subprocess.run([str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    tail = "\n".join((res.stdout + res.stderr).splitlines()[-40:])
    assert res.returncode == 0, f"NumPy {numpy_version} / pyarrow {pyarrow_version}:\n{tail}"
    sys.stdout.write(tail.splitlines()[-1] + "\n")

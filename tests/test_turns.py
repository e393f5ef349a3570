"""The suite's two processes take turns (tests/turns.py): a test marked ``alone`` runs while no other test of the
run does, every other test shares the machine with the other process's tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RECORD = '''
import json, os, time
import pytest


def record(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open(os.environ["TURNS_LOG"], "a") as f:
        f.write(json.dumps([name, start, time.time()]) + "\\n")
'''


def test_an_alone_test_runs_while_no_other_does_and_the_others_share(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs alone\n")
    # a file per process: one holds a shared test then an alone one, the other a row of short shared tests
    (tmp_path / "test_a.py").write_text(RECORD + '''
def test_shared():
    record("a-shared", 1.5)


@pytest.mark.alone
def test_alone():
    record("a-alone", 1.0)
''')
    (tmp_path / "test_b.py").write_text(RECORD + "".join(f'''
def test_b{i}():
    record("b{i}", 0.3)
''' for i in range(10)))
    log = tmp_path / "log.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    env |= {"TURNS_LOG": str(log), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.turns",
                          "-n", "2", "--dist", "loadfile", "-c", str(tmp_path / "pytest.ini"), str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    spans = {name: (t0, t1) for name, t0, t1 in map(json.loads, log.read_text().splitlines())}
    assert len(spans) == 12

    def overlaps(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    others = [f"b{i}" for i in range(10)]
    assert any(overlaps("a-shared", b) for b in others), spans  # the processes do run side by side
    assert not any(overlaps("a-alone", b) for b in others), spans  # … but never beside an alone test


def test_a_failing_run_on_a_nearly_full_disk_says_so(tmp_path, monkeypatch):
    """The last lines of a red run name a nearly full disk (a CI run's S3 tests failed with bare InternalErrors)."""
    from collections import namedtuple
    from types import SimpleNamespace

    from tests import conftest

    usage = namedtuple("usage", "total used free")
    config = SimpleNamespace(option=SimpleNamespace(basetemp=str(tmp_path / "not-yet")))
    monkeypatch.setattr(conftest.shutil, "disk_usage", lambda p: usage(250 << 30, 248 << 30, 2 << 30))
    note = conftest.low_disk_note(config)
    assert note == f"note: the disk holding {tmp_path} has 2.0 GiB free of 250 GiB: tests that write (the S3 " \
        "store, builds, Ray) may have failed for want of room"
    monkeypatch.setattr(conftest.shutil, "disk_usage", lambda p: usage(250 << 30, 200 << 30, 50 << 30))
    assert conftest.low_disk_note(config) is None

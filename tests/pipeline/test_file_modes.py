"""Files are created with the process umask (0644 by default), not mkstemp's 0600: a dataset on a shared lab
filesystem must be readable by the group."""

from __future__ import annotations

import os
import stat

import pytest

from bench_build.storage import LocalStore, atomic_write_text, current_umask


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_without_changing_it():
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027 and current_umask() == 0o027
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_every_local_write_path_follows_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        store = LocalStore(tmp_path / "v")
        store.put_bytes("manifest.json", b"{}")
        store.put_bytes("latest", b"{}", if_absent=True)
        with store.staged_file("data/corruption=clean/severity=0/part-00000-of-00001.parquet") as staged:
            staged.path.write_bytes(b"PAR1")
        atomic_write_text(tmp_path / "v" / "README.md", "card")
        store.download_file("manifest.json", tmp_path / "pulled" / "manifest.json")  # a local pull's copy
    finally:
        os.umask(old)
    want = 0o666 & ~mask
    files = [p for p in (tmp_path).rglob("*") if p.is_file()]
    assert len(files) == 5
    assert {p.name: _mode(p) for p in files} == {p.name: want for p in files}


def test_a_build_is_group_readable(mini_build):
    want = 0o666 & ~current_umask()  # the suite runs with the machine's umask (0022 → 0644)
    for p in [mini_build / "manifest.json", mini_build / "README.md", *(mini_build / "data").rglob("*.parquet")]:
        assert _mode(p) == want, p

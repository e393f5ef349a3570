"""Durable names: every rename or link that publishes a file a later step relies on is followed by an fsync of
the directory holding the new name, so a power loss cannot take back a shard the ledger records, a ledger entry,
the card or the manifest (`fs_events` records the real calls, in order)."""

from __future__ import annotations

import errno
import os

import pyarrow as pa
import pytest

from bench_build.build.ledger import Ledger
from bench_build.format.writer import ShardWriter
from bench_build.manifests.write import write_version_files
from bench_build.storage import OVERLAP_ENV, LocalStore, atomic_write_text, fsync_dir

SCHEMA = pa.schema([("x", pa.int32())])
SHARD = "part-00000-of-00001"
KEY = f"data/corruption=fog/severity=3/{SHARD}.parquet"


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_a_shard_and_its_ledger_entry_are_synced_in_their_directories(tmp_path, fs_events, monkeypatch, overlap):
    """As a task commits: the shard (its fsync + rename on the background thread, or in place), then its ledger
    entry; the shard's directory is synced before the entry that says it exists gets its name."""
    monkeypatch.setenv(OVERLAP_ENV, overlap)
    root = tmp_path / "v"
    store = LocalStore(root)
    uploads = store.background_uploads()
    assert uploads.active == (overlap == "1")
    with ShardWriter(store, KEY, SCHEMA) as w:
        w.write(pa.record_batch([pa.array([1, 2, 3], pa.int32())], schema=SCHEMA))
    uploads.finish()
    Ledger(store).record_done(SHARD, {"rows": w.rows, "bytes": w.bytes, "sha256": w.sha256})
    shard = store.path(KEY)
    [entry] = (root / "_ledger").rglob(f"{SHARD}.json")
    assert fs_events.durable(shard, before=entry)
    assert fs_events.durable(entry)
    # the version and partition directories were new: each one's own name is synced in its parent
    for d in (root, root / "data", root / "data" / "corruption=fog", shard.parent):
        assert fs_events.dir_synced(d.parent, end=fs_events.named(shard)), d


def test_the_card_then_the_manifest_are_synced_in_the_version_directory(tmp_path, fs_events):
    store = LocalStore(tmp_path / "v")
    write_version_files(store, {"dataset": "x"}, "# card\n", renders=[])
    card, manifest = store.path("README.md"), store.path("manifest.json")
    assert fs_events.durable(card, before=manifest)  # a manifest never names a card a power loss can take back
    assert fs_events.durable(manifest)


def test_conditional_writes_and_links_sync_the_directory(tmp_path, fs_events):
    store = LocalStore(tmp_path / "v")
    store.put_bytes("latest", b"1", if_absent=True)  # os.link of the finished temp file
    assert fs_events.durable(store.path("latest"))
    etag = store.head("latest").etag
    store.put_bytes("latest", b"2", if_match=etag)
    assert fs_events.durable(store.path("latest"))
    earlier = LocalStore(tmp_path / "earlier")
    earlier.put_bytes("f.parquet", b"bytes")
    before = len(fs_events.events)
    assert store.copy_from(earlier, "f.parquet", "reused/f.parquet", sha256=earlier.sha256("f.parquet")) == "linked"
    assert fs_events.dir_synced(store.path("reused"), fs_events.named(store.path("reused/f.parquet")))
    assert fs_events.named(store.path("reused/f.parquet")) > before


def test_a_file_system_that_cannot_fsync_a_directory_is_not_an_error(tmp_path, monkeypatch):
    real = os.fsync

    def fsync(fd, err=errno.EINVAL):
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(err, os.strerror(err))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_text(tmp_path / "a" / "b.json", "{}")  # EINVAL (some FUSE and network file systems): nothing more
    assert (tmp_path / "a" / "b.json").read_text() == "{}"
    monkeypatch.setattr(os, "fsync", lambda fd: fsync(fd, errno.EIO))
    with pytest.raises(OSError, match="Input/output error"):  # a real failure is one
        fsync_dir(tmp_path)


def test_a_killed_writers_figure_or_checkpoint_temp_is_found_and_removed(tmp_path):
    """`atomic_write_with` (validate's PNGs, checkpoint and features) names its temp as every writer does: a
    process killed inside ``write`` leaves a ``….tmp`` that names it, which `remove_dead_temps` removes once it is
    dead, and nothing under the final name."""
    import signal
    import subprocess
    import sys

    from bench_build.storage import remove_dead_temps

    target = tmp_path / "validation" / "tsne.png"
    code = ("import os, signal; from pathlib import Path; from bench_build.storage import atomic_write_with\n"
            f"atomic_write_with(Path({str(target)!r}), lambda tmp: (Path(tmp).write_bytes(b'half a png'), "
            "os.kill(os.getpid(), signal.SIGKILL)))\n")
    proc = subprocess.run([sys.executable, "-c", code], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [left] = [p for p in target.parent.iterdir()]
    assert left.name.startswith(".tsne.png.") and left.name.endswith(".tmp") and not target.exists()
    assert remove_dead_temps(target.parent) == 1
    assert not list(target.parent.iterdir())


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_folder_is_replaced_whole_and_a_killed_writers_folder_is_removed(tmp_path, monkeypatch, exchange):
    """`staged_dir` + `replace_dir`: the new folder's files replace the old folder's together (none of the old
    left beside the new), by an atomic swap or, where the system has none, two renames; the temp folders of a
    dead writer are removed by the next `staged_dir`, a live writer's are kept."""
    import subprocess
    import sys

    from bench_build.storage import files, host_name, replace_dir, staged_dir

    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    final = tmp_path / "validation" / "fog"
    final.mkdir(parents=True)
    (final / "old.txt").write_text("old")
    (final / "report.json").write_text("old report")
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()
    dead = final.parent / f".fog.{host_name()}~{dead_pid}.abcd1234.tmp"
    live = final.parent / f".fog.{host_name()}~{os.getpid()}.live0000.tmp"
    for d in (dead, live):
        d.mkdir()
        (d / "report.json").write_text("half")
    staged = staged_dir(final)
    assert not dead.exists() and live.is_dir()
    assert staged.parent == final.parent and staged.name.startswith(".fog.") and not list(staged.iterdir())
    (staged / "report.json").write_text("new report")
    replace_dir(staged, final)
    assert {p.name: p.read_text() for p in final.iterdir()} == {"report.json": "new report"}
    assert sorted(p.name for p in final.parent.iterdir()) == sorted(["fog", live.name])
    brand_new = tmp_path / "validation" / "snow"  # nothing to replace: renamed into place
    staged = staged_dir(brand_new)
    (staged / "report.json").write_text("snow")
    replace_dir(staged, brand_new)
    assert (brand_new / "report.json").read_text() == "snow" and not staged.exists()


def test_a_writer_killed_between_the_two_renames_leaves_the_old_folder_to_the_next_one(tmp_path, monkeypatch):
    """Without an atomic swap, `replace_dir` renames the old folder aside, then the new one in. A writer killed
    between the two left no folder, and the next `staged_dir` deleted the aside with the other dead temps: the
    old report was lost too. The next writer now puts a dead writer's aside back first; a live writer's stays."""
    import subprocess
    import sys

    from bench_build.storage import files, host_name, replace_dir, staged_dir

    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    final = tmp_path / "validation" / "fog"
    final.mkdir(parents=True)
    (final / "report.json").write_text("old report")
    renames, rename = [], os.rename

    def killed_after_first(src, dst):  # the writer dies after its first rename
        if renames:
            raise KeyboardInterrupt
        renames.append((src, dst))
        rename(src, dst)

    staged = staged_dir(final)
    (staged / "report.json").write_text("new report")
    monkeypatch.setattr(files.os, "rename", killed_after_first)
    with pytest.raises(KeyboardInterrupt):
        replace_dir(staged, final)
    monkeypatch.undo()
    [(_, aside)] = renames
    assert not final.exists() and (aside / "report.json").read_text() == "old report"
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()
    dead_aside = aside.with_name(aside.name.replace(f"~{os.getpid()}.", f"~{dead_pid}."))
    dead_staged = staged.with_name(staged.name.replace(f"~{os.getpid()}.", f"~{dead_pid}."))
    os.rename(aside, dead_aside)
    os.rename(staged, dead_staged)
    assert dead_aside.name.endswith(files.ASIDE) and host_name() in dead_aside.name
    again = staged_dir(final)  # the next writer of the folder
    assert (final / "report.json").read_text() == "old report"
    assert sorted(p.name for p in final.parent.iterdir()) == sorted(["fog", again.name])
    live_aside = final.parent / f".fog.{host_name()}~{os.getpid()}.live0000{files.ASIDE}"
    live_aside.mkdir()
    os.rename(final, final.parent / "moved")  # no folder, but its aside's writer is alive: left to it
    staged_dir(final)
    assert live_aside.is_dir() and not final.exists()

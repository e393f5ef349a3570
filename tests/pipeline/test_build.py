"""End-to-end builds through Ray on generated KITTI-layout data: determinism, resume, failures, verify."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.build.ledger import Ledger
from bench_build.build.run import run_build
from bench_build.cli import app
from bench_build.manifests.manifest import read_manifest, stable_view, verify_version

runner = CliRunner()


def data_files(version_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(version_dir)): p.read_bytes()
            for p in sorted(version_dir.rglob("*.parquet")) if "_ledger" not in p.parts}


def run_ids(version_dir: Path) -> dict[str, str]:
    out = {}
    for p in (version_dir / "_ledger" / "shards").glob("part-*.json"):
        if not p.name.endswith(".failed.json"):
            out[p.stem] = json.loads(p.read_text())["run_id"]
    return out


def test_same_bytes_with_one_and_two_workers(small_recipe, demo_kitti, tmp_path):
    a = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "a", workers=1,
                  frames_per_shard=2, progress=False)
    b = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "b", workers=2,
                  frames_per_shard=2, progress=False)
    assert a.ok and b.ok
    assert a.shards_total == 3 and len(b.shards_built) == 3
    fa, fb = data_files(a.version_dir), data_files(b.version_dir)
    assert len(fa) == 3 * (1 + 4 * 5)
    assert fa == fb
    assert stable_view(read_manifest(a.version_dir)) == stable_view(read_manifest(b.version_dir))
    m = read_manifest(a.version_dir)
    assert m["counts"]["examples_stored"] == 6 * (1 + 4 * 5)
    assert m["counts"]["examples_defined"] == 6 * 4 * 6
    assert verify_version(a.version_dir).ok
    # the dataset card exists and states the counts
    card = (a.version_dir / "README.md").read_text()
    assert "mini-c 0.1.0" in card and "Examples defined by the benchmark: 144" in card
    # a re-run finds everything done and rebuilds nothing
    again = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "a", workers=1,
                      frames_per_shard=2, progress=False)
    assert again.ok and again.shards_skipped == 3 and not again.shards_built


def test_demo_build_with_no_arguments_is_every_demo_frame_into_bench_out(tmp_path, monkeypatch):
    """The README's Set-up command `bench-build run kitti-c` (no --source, no --max-frames): the generated demo
    data, all 8 of its frames, into ./bench-out. The README's Quickstart runs the same path for real on 2 frames
    (tests/test_docs.py); here the arguments reach run_build as such, and `plan` counts the frames they mean."""
    import bench_build.build.run as run_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    seen = {}

    def fake_run_build(benchmark, **kw):
        seen.update(kw, benchmark=benchmark)
        raise KeyboardInterrupt  # stop there: nothing is built

    monkeypatch.setattr(run_module, "run_build", fake_run_build)
    runner.invoke(app, ["run", "kitti-c"])
    assert seen["benchmark"] == "kitti-c" and seen["source"] is None and seen["max_frames"] is None
    assert seen["out"] == "bench-out" and seen["workers"] is None and seen["split"] is None
    planned = runner.invoke(app, ["plan", "kitti-c", "--json"])
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.output)
    assert plan["frames"] == 8 and plan["examples_defined"] == 8 * 25 * 6


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench_build.cli", *args]


def test_resume_after_sigkill_matches_uninterrupted_build(small_recipe, demo_kitti, tmp_path, shared_ray):
    common = ["--source", str(demo_kitti), "--workers", "1", "--frames-per-shard", "1", "--no-progress"]
    killed_out = tmp_path / "killed"
    proc = subprocess.Popen(_cli("run", str(small_recipe), "--out", str(killed_out), *common),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    shards_dir = killed_out / "mini-c" / "0.1.0" / "_ledger" / "shards"
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            done = list(shards_dir.glob("part-*.json")) if shards_dir.is_dir() else []
            if len(done) >= 2:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        else:
            pytest.fail("build never recorded a shard")
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies mid-build …
        proc.wait(timeout=30)
    finally:
        time.sleep(1.0)
        try:  # … and so does anything it started (Ray workers, raylet) that outlived it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    version_dir = killed_out / "mini-c" / "0.1.0"
    before = run_ids(version_dir)
    assert 2 <= len(before) < 6, "the kill should land mid-build"
    assert not (version_dir / "manifest.json").exists()

    resumed = run_build(str(small_recipe), source=str(demo_kitti), out=killed_out, workers=1,
                        frames_per_shard=1, progress=False)
    assert resumed.ok
    assert resumed.shards_skipped == len(before)
    after = run_ids(version_dir)
    for shard, rid in before.items():  # nothing the ledger recorded as done was recomputed
        assert after[shard] == rid
    assert set(resumed.shards_built) == set(after) - set(before)
    assert not list(version_dir.rglob("*.tmp")), "temporary files must not survive a resume"

    clean = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path / "clean", workers=2,
                      frames_per_shard=1, progress=False)
    assert data_files(version_dir) == data_files(clean.version_dir)
    assert stable_view(read_manifest(version_dir)) == stable_view(read_manifest(clean.version_dir))


def test_check_done_from_one_listing_sees_missing_and_resized_files(tmp_path):
    from bench_build.storage import LocalStore

    store = LocalStore(tmp_path)
    ledger = Ledger(store)
    for name, data in (("data/a.parquet", b"aaaa"), ("data/b.parquet", b"bb")):
        store.put_bytes(name, data)
    files = [{"path": f"data/{n}.parquet", "bytes": size, "sha256": "", "corruption": "clean", "severity": 0,
              "rows": 1, "seconds": 0.1} for n, size in (("a", 4), ("b", 2))]
    ledger.record_done("s", {"fingerprint": "f", "files": files, "seconds": 0.2})
    sizes = ledger.object_sizes()
    assert sizes["data/a.parquet"] == 4 and ledger.check_done("s", "f", "size", sizes=sizes) == (True, "")
    store.put_bytes("data/b.parquet", b"b")
    assert ledger.check_done("s", "f", "size", sizes=ledger.object_sizes()) == \
        (False, "data/b.parquet has 1 bytes, the ledger recorded 2")
    store.delete("data/a.parquet")
    assert ledger.check_done("s", "f", "size", sizes=ledger.object_sizes()) == (False, "data/a.parquet is missing")


def test_altered_shard_fails_verify_and_is_rebuilt(small_recipe, demo_kitti, tmp_path, shared_ray):
    res = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=2, frames_per_shard=3,
                    progress=False)
    original = data_files(res.version_dir)
    ids = run_ids(res.version_dir)
    victim = res.version_dir / "data" / "corruption=beam_del" / "severity=2" / "part-00001-of-00002.parquet"
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, different content
    victim.write_bytes(bytes(raw))

    out = runner.invoke(app, ["verify", str(res.version_dir)])
    assert out.exit_code == 1
    assert "corruption=beam_del/severity=2/part-00001-of-00002.parquet" in out.output
    assert "sha256" in out.output

    again = run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=2, frames_per_shard=3,
                      progress=False)
    assert again.ok and again.shards_built == ["part-00001-of-00002"]
    assert run_ids(res.version_dir)["part-00000-of-00002"] == ids["part-00000-of-00002"]
    assert data_files(res.version_dir) == original
    assert runner.invoke(app, ["verify", str(res.version_dir)]).exit_code == 0


def test_malformed_scan_fails_only_its_shard(small_recipe, demo_kitti, demo_kitti_master, tmp_path, shared_ray):
    bad = demo_kitti / "training" / "velodyne" / "000003.bin"
    bad.write_bytes(bad.read_bytes()[:-6])  # no longer a multiple of 16 bytes
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path / "o"),
            "--workers", "2", "--frames-per-shard", "2", "--no-progress"]
    out = runner.invoke(app, args)
    assert out.exit_code == 1, out.output
    assert "000003.bin" in out.output and "multiple of 16" in out.output
    version_dir = tmp_path / "o" / "mini-c" / "0.1.0"
    done = run_ids(version_dir)
    assert set(done) == {"part-00000-of-00003", "part-00002-of-00003"}
    failed = Ledger(version_dir).failed_entry("part-00001-of-00003")
    assert failed is not None and "000003.bin" in failed["error"]
    assert not (version_dir / "manifest.json").exists()
    for shard in done:  # every other shard's files are all there
        assert len(list(version_dir.rglob(f"{shard}.parquet"))) == 21

    status = runner.invoke(app, ["status", str(small_recipe), "--out", str(tmp_path / "o")])
    assert "2/3 shards done, 1 failed" in status.output and "000003.bin" in status.output

    bad.write_bytes((demo_kitti_master / "training" / "velodyne" / "000003.bin").read_bytes())  # fixed
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert run_ids(version_dir)["part-00000-of-00003"] == done["part-00000-of-00003"]
    assert run_ids(version_dir)["part-00002-of-00003"] == done["part-00002-of-00003"]
    assert Ledger(version_dir).failed_entry("part-00001-of-00003") is None
    assert verify_version(version_dir).ok


def test_changed_recipe_refuses_to_mix_builds(small_recipe, demo_kitti, tmp_path, monkeypatch, shared_ray):
    """A build is resumed only by the same recipe, frames, shard size and Parquet writer options (other writer
    options would write the same examples as other bytes); otherwise the run refuses, naming what differs."""
    import bench_build.format.writer
    from bench_build.build.ledger import LedgerMismatch

    run_build(str(small_recipe), source=str(demo_kitti), out=tmp_path, workers=1, max_frames=2,
              frames_per_shard=2, progress=False)
    small_recipe.write_text(small_recipe.read_text().replace("0.04, 0.06", "0.05, 0.06"))
    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path), "--max-frames", "2",
            "--frames-per-shard", "2", "--workers", "1", "--no-progress"]
    out = runner.invoke(app, args)
    assert out.exit_code == 2, out.output
    assert "--overwrite" in out.output and "fingerprint" in out.output
    out = runner.invoke(app, [*args, "--overwrite"])
    assert out.exit_code == 0, out.output
    assert read_manifest(tmp_path / "mini-c" / "0.1.0")["recipe"]["corruptions"][0]["params"][0]["sigma"] == 0.05

    ledger = Ledger(tmp_path / "mini-c" / "0.1.0")
    assert ledger.run_info()["parquet_format"] == bench_build.format.writer.parquet_format()
    kwargs = dict(source=str(demo_kitti), out=tmp_path, workers=1, max_frames=2, frames_per_shard=2, progress=False)
    with monkeypatch.context() as m:  # another writer (zstd level 3): refused before anything is built
        m.setattr(bench_build.format.writer, "PARQUET_OPTIONS",
                  {**bench_build.format.writer.PARQUET_OPTIONS, "compression_level": 3})
        with pytest.raises(LedgerMismatch, match=r"Parquet writer options \(\w+\) differ from this bench-build's"):
            run_build(str(small_recipe), **kwargs)
    # a build by a bench-build from before the writer options were recorded (and part of the fingerprint)
    info = ledger.run_info()
    del info["parquet_format"]
    ledger.store.write_text("_ledger/run.json", json.dumps({**info, "fingerprint": "0" * 64}))
    with pytest.raises(LedgerMismatch, match="written by an older bench-build, with other Parquet writer options"):
        run_build(str(small_recipe), **kwargs)


def test_build_fingerprint_is_what_the_manifest_records(mini_build, demo_kitti_master):
    """`build_fingerprint` (the recipes README's way to compute a build's fingerprint) gives the manifest's, and
    each input it names besides the recipe and frames changes it."""
    from bench_build.build.run import build_fingerprint
    from bench_build.manifests.recipe import parse_recipe
    from tests.conftest import SMALL_RECIPE

    manifest = json.loads((mini_build / "manifest.json").read_text())
    recipe, frames = parse_recipe(SMALL_RECIPE), sorted({f for v in manifest["shard_frames"].values() for f in v})
    assert build_fingerprint(recipe, frames, frames_per_shard=2) == manifest["fingerprint"]
    assert build_fingerprint(recipe, frames, frames_per_shard=64) != manifest["fingerprint"]
    assert build_fingerprint(recipe, frames, frames_per_shard=2, encoding="compact") != manifest["fingerprint"]
    assert recipe.fingerprint(frames) != manifest["fingerprint"]  # the recipe's alone is not the build's


def test_a_re_run_of_a_finished_version_changes_none_of_its_bytes(small_recipe, demo_kitti, tmp_path, shared_ray):
    """Re-running `run` on a finished (perhaps published) version rewrote its manifest (`created`,
    `build_seconds`), card and contact sheet, so the local copy no longer matched the published one; a recipe copy
    differing only in `notes` (same fingerprint) silently rewrote the card. Now nothing is written, and it says so;
    a deleted card is written again."""
    from bench_build.cli import app

    args = ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(tmp_path / "o"), "--max-frames", "1",
            "--workers", "1", "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    version = tmp_path / "o" / "mini-c" / "0.1.0"

    def state() -> dict[str, bytes]:
        return {str(p.relative_to(version)): p.read_bytes() for p in version.rglob("*")
                if p.is_file() and "_ledger" not in p.parts and ".bench-build" not in p.name}

    before = state()
    small_recipe.write_text(small_recipe.read_text().replace('stage = "beam_del"',
                                                             'stage = "beam_del"\nnotes = "changed notes only"'))
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "nothing to build: the version was complete" in " ".join(again.output.split())
    assert state() == before
    (version / "README.md").unlink()
    assert runner.invoke(app, args).exit_code == 0 and (version / "README.md").is_file()

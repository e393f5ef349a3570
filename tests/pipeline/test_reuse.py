"""Versions that share unchanged partitions (issue 36): partition fingerprints, `run --reuse`, publish's
store-side copies and `diff`, on the small recipe against the session's `mini_build` (mini-c 0.1.0)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.build.run import run_build
from bench_build.cli import app
from bench_build.format.schema import file_metadata
from bench_build.manifests.manifest import read_manifest, verify_version
from bench_build.publish import publish_version, pull_version, verify_remote
from bench_build.runtime.faults import TEST_KILL_ENV
from tests.conftest import SMALL_RECIPE
from tests.shared_ray import own_ray

runner = CliRunner()
CHANGED = "gaussian_rad/1"  # the one partition whose parameter the new version changes (0.04 → 0.05)


def _v2_recipe(path: Path) -> Path:
    path.write_text(SMALL_RECIPE.replace('version = "0.1.0"', 'version = "0.2.0"')
                    .replace("0.04, 0.06", "0.05, 0.06"))
    return path


def _v2_run(tmp_path: Path, source: Path, earlier: Path) -> list[str]:
    """`run` of the v2 recipe (written under ``tmp_path``) into ``tmp_path/o``, reusing ``earlier``."""
    recipe = _v2_recipe(tmp_path / "mini-c.toml")
    return ["run", str(recipe), "--source", str(source), "--out", str(tmp_path / "o"), "--workers", "2",
            "--max-frames", "4", "--frames-per-shard", "2", "--no-progress", "--reuse", str(earlier)]


def _files(version_dir: Path) -> dict[str, str]:
    return {p.relative_to(version_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((version_dir / "data").rglob("*.parquet"))}


def _partition(path: str) -> str:
    c, s = path.split("/")[1:3]
    return f"{c.split('=')[1]}/{s.split('=')[1]}"


@pytest.fixture(scope="module")
def v2(tmp_path_factory, mini_build, demo_kitti_master) -> dict[str, Path]:
    """mini-c 0.2.0 built from scratch ("fresh") and with --reuse of 0.1.0 ("reused"); the reuse build is killed
    once (one task's worker dies on every attempt) and resumed, as a user would."""
    tmp = tmp_path_factory.mktemp("v2")
    recipe = _v2_recipe(tmp / "mini-c.toml")
    common = dict(source=str(demo_kitti_master), workers=2, max_frames=4, frames_per_shard=2, progress=False)
    fresh = run_build(str(recipe), out=tmp / "fresh", **common)
    assert fresh.ok
    with own_ray():  # the kill hook reaches the workers of a Ray started with it in the environment
        os.environ[TEST_KILL_ENV] = "before-record:part-00001-of-00002"
        try:
            killed = run_build(str(recipe), out=tmp / "reused", reuse=str(mini_build), **common)
        finally:
            del os.environ[TEST_KILL_ENV]
    assert not killed.ok and list(killed.failures) == ["part-00001-of-00002"]
    assert killed.reused is not None and killed.reused["files"] == 40
    assert killed.reused["placed"] == {"linked": 40}  # same filesystem: hard links, no second copy
    args = ["run", str(recipe), "--source", str(demo_kitti_master), "--out", str(tmp / "reused"), "--workers", "2",
            "--max-frames", "4", "--frames-per-shard", "2", "--no-progress", "--reuse", str(mini_build)]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return {"fresh": Path(fresh.version_dir), "reused": tmp / "reused" / "mini-c" / "0.2.0", "output": out.output,
            "v1": Path(mini_build)}


def test_equal_partition_fingerprints_mean_byte_identical_files(v2):
    """An independent build of the new version: every partition but the changed one is byte-identical to 0.1.0's,
    and the fingerprints say so before any byte is compared."""
    v1, fresh = _files(v2["v1"]), _files(v2["fresh"])
    assert set(v1) == set(fresh)
    changed = {_partition(p) for p in v1 if v1[p] != fresh[p]}
    assert changed == {CHANGED}
    fp1 = {s["path"]: s["partition_fingerprint"] for s in read_manifest(v2["v1"])["shards"]}
    fp2 = {s["path"]: s["partition_fingerprint"] for s in read_manifest(v2["fresh"])["shards"]}
    assert {p for p in fp1 if fp1[p] != fp2[p]} == {p for p in v1 if v1[p] != fresh[p]}
    # the footer names the partition, not the version: nothing version-specific is in a file
    import pyarrow.parquet as pq

    some = next(iter(fp2))
    meta = file_metadata(pq.read_schema(v2["fresh"] / some))
    assert meta["partition_fingerprint"] == fp2[some] and "version" not in meta and "fingerprint" not in meta


def test_reuse_build_computes_only_the_changed_partition_and_matches_a_fresh_build(v2):
    reused_dir = v2["reused"]
    assert _files(reused_dir) == _files(v2["fresh"])  # byte for byte what a build from scratch writes
    assert verify_version(reused_dir).ok
    ledger = [json.loads(p.read_text()) for p in sorted((reused_dir / "_ledger" / "shards").glob("*.json"))]
    built = {_partition(f["path"]) for e in ledger for f in e["files"] if "reused_from" not in f}
    taken = {_partition(f["path"]) for e in ledger for f in e["files"] if f.get("reused_from") == "0.1.0"}
    assert built == {CHANGED} and CHANGED not in taken and len(taken) == 20
    # local reuse is a hard link into the new version's own directory: no second copy of the bytes
    clean = reused_dir / "data/corruption=clean/severity=0/part-00000-of-00002.parquet"
    assert clean.stat().st_ino == (v2["v1"] / clean.relative_to(reused_dir)).stat().st_ino
    m = read_manifest(reused_dir)
    assert m["reused"] == {"from_versions": ["0.1.0"], "files": 40,
                           "bytes": sum(s["bytes"] for s in m["shards"] if _partition(s["path"]) != CHANGED)}
    card = (reused_dir / "README.md").read_text()
    assert "## Reused partitions" in card and f"Computed for this version: {CHANGED}." in card
    # the resumed run: one task was done before the kill, the other reused its earlier-placed files again; the
    # counts add up to the total, the reused files are the manifest's, and the summary names what was computed
    text = " ".join(v2["output"].split())
    assert "2 shards: 1 already done, 0 reused, 1 built, 0 failed" in text, text
    assert (f"reused 40 files ({m['reused']['bytes'] / 1e6:.1f} MB) from mini-c 0.1.0 (20 put in place by this run, "
            f"the rest by an earlier one); computed 2 files: {CHANGED}") in text, text


def test_reuse_summary_of_a_version_only_bump_and_of_a_no_op_resume_adds_up(mini_build, demo_kitti_master, tmp_path):
    """Every partition's fingerprint unchanged: no task is computed (no Ray either), each is counted as reused; run
    again, each is already done and the reused files are still the manifest's, not "reused 0 files"."""
    recipe = tmp_path / "mini-c.toml"
    recipe.write_text(SMALL_RECIPE.replace('version = "0.1.0"', 'version = "0.3.0"'))
    args = ["run", str(recipe), "--source", str(demo_kitti_master), "--out", str(tmp_path / "o"), "--workers", "2",
            "--max-frames", "4", "--frames-per-shard", "2", "--no-progress", "--reuse", str(mini_build)]
    mb = sum(s["bytes"] for s in read_manifest(mini_build)["shards"]) / 1e6
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    text = " ".join(first.output.split())
    assert "2 shards: 0 already done, 2 reused, 0 built, 0 failed" in text, text
    assert f"reused 42 files ({mb:.1f} MB) from mini-c 0.1.0; computed nothing" in text, text
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    text = " ".join(again.output.split())
    assert "2 shards: 2 already done, 0 reused, 0 built, 0 failed" in text, text
    assert f"reused 42 files ({mb:.1f} MB) from mini-c 0.1.0 (0 put in place by this run" in text, text
    assert read_manifest(tmp_path / "o" / "mini-c" / "0.3.0")["reused"]["files"] == 42


def test_a_damaged_file_of_the_earlier_version_is_computed_instead_of_failing_the_run(v2, tmp_path,
                                                                                       demo_kitti_master):
    """One byte flipped in an earlier file: `run --reuse` names it, computes that partition (recorded as built, not
    reused) and the version is byte for byte a fresh build's."""
    earlier = tmp_path / "earlier" / "mini-c" / "0.1.0"
    shutil.copytree(v2["v1"], earlier)
    bad = "data/corruption=beam_del/severity=3/part-00000-of-00002.parquet"
    raw = bytearray((earlier / bad).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (earlier / bad).write_bytes(bytes(raw))
    out = runner.invoke(app, _v2_run(tmp_path, demo_kitti_master, earlier))
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert f"not reusing {bad} of mini-c 0.1.0" in text and "computing it instead" in text, text
    assert "reused 39 files" in text and "beam_del/3" in text.split("computed 3 files:")[1], text
    version = tmp_path / "o" / "mini-c" / "0.2.0"
    assert _files(version) == _files(v2["fresh"]) and verify_version(version).ok
    ledger = [json.loads(p.read_text()) for p in sorted((version / "_ledger" / "shards").glob("*.json"))]
    entry = next(f for e in ledger for f in e["files"] if f["path"] == bad)
    assert "reused_from" not in entry
    shards = {s["path"]: s for s in read_manifest(version)["shards"]}
    assert "reused_from" not in shards[bad] and read_manifest(version)["reused"]["files"] == 39


def test_an_earlier_manifest_entry_the_file_contradicts_is_computed_not_reused(v2, tmp_path, demo_kitti_master):
    """The earlier manifest edited where no sha256 covers it: the changed partition's entries given the fingerprints
    this build computes for it (its old σ = 0.04 bytes would be reused as σ = 0.05, `verify` none the wiser), a row
    count and a byte size changed. Each file is checked against the rest of its entry (its footer's fingerprint,
    its rows, its size), named and computed instead: the version is byte for byte a fresh build's."""
    earlier = tmp_path / "earlier" / "mini-c" / "0.1.0"
    shutil.copytree(v2["v1"], earlier)
    fresh_fps = {s["path"]: s["partition_fingerprint"] for s in read_manifest(v2["fresh"])["shards"]}
    manifest = json.loads((earlier / "manifest.json").read_text())
    rows_bad = "data/corruption=beam_del/severity=3/part-00000-of-00002.parquet"
    bytes_bad = "data/corruption=background/severity=2/part-00001-of-00002.parquet"
    for s in manifest["shards"]:
        if _partition(s["path"]) == CHANGED:
            s["partition_fingerprint"] = fresh_fps[s["path"]]
        s["rows"] += s["path"] == rows_bad
        s["bytes"] += s["path"] == bytes_bad
    (earlier / "manifest.json").write_text(json.dumps(manifest, indent=1))
    out = runner.invoke(app, _v2_run(tmp_path, demo_kitti_master, earlier))
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    for path, says in (("data/corruption=gaussian_rad/severity=1/part-00000-of-00002.parquet",
                        "its footer's partition fingerprint is"),
                       (rows_bad, "2 rows, its manifest lists 3"), (bytes_bad, "bytes, its manifest lists")):
        assert f"not reusing {path} of mini-c 0.1.0: {earlier / path}: " in text and says in text, (path, text)
    assert "reused 38 files" in text, text
    version = tmp_path / "o" / "mini-c" / "0.2.0"
    assert _files(version) == _files(v2["fresh"]) and verify_version(version).ok
    shards = {s["path"]: s for s in read_manifest(version)["shards"]}
    assert not any("reused_from" in shards[p] for p in (rows_bad, bytes_bad)) and \
        not any("reused_from" in s for p, s in shards.items() if _partition(p) == CHANGED)


def test_diff_names_the_changed_partition_and_its_parameter(v2):
    out = runner.invoke(app, ["diff", str(v2["v1"]), str(v2["reused"])])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if CHANGED in ln)
    assert "changed" in line and "sigma 0.04 → 0.05" in line
    assert "1 changed, 20 reused partitions" in out.output
    out = runner.invoke(app, ["diff", str(v2["v1"]), str(v2["fresh"])])
    assert "1 changed, 20 identical partitions" in out.output and "note:" not in out.output
    # the later version first, or one version against itself: said in a note
    out = runner.invoke(app, ["diff", str(v2["reused"]), str(v2["v1"])])
    assert out.exit_code == 0 and "A (0.2.0) is later than B (0.1.0)" in " ".join(out.output.split()), out.output
    out = runner.invoke(app, ["diff", str(v2["v1"]), str(v2["v1"]) + "/"])
    assert "A and B are the same version (mini-c 0.1.0, the same place)" in " ".join(out.output.split()), out.output


def test_diff_says_why_a_partition_with_the_same_parameters_changed():
    """Same stage and parameters, other bytes: the row names what the builds were given differently."""
    from bench_build.build.reuse import diff_versions

    def manifest(fps: int, files: list[tuple[str, str]], frames: dict[str, str], encoding: str = "full",
                 seed: int = 7, dataset: str = "kitti-c") -> dict:
        return {"dataset": dataset, "version": "1", "frames": 2, "frames_per_shard": fps, "encoding": encoding,
                "recipe": {"name": dataset, "seed": seed, "source": "kitti", "split": "training"},
                "partitions": {"fog/1": {"stage": "fog", "params": {"beta": 0.1}}},
                "source_identity": {"frames": frames},
                "shards": [{"corruption": "fog", "severity": 1, "path": p, "sha256": h, "bytes": 1} for p, h in files]}

    same = {"000000": "a", "000001": "b"}
    one = manifest(2, [("fog/1/part-0", "x")], same)
    split = manifest(1, [("fog/1/part-0", "y"), ("fog/1/part-1", "z")], same)
    touched = manifest(2, [("fog/1/part-0", "w")], {"000000": "a", "000001": "c"})
    compact = manifest(2, [("fog/1/part-0", "v")], same, encoding="compact")
    assert [r["differs"] for r in diff_versions(one, split)] == ["frames_per_shard 2 → 1"]
    assert [r["differs"] for r in diff_versions(one, touched)] == ["1 source frame(s) changed"]
    assert [r["differs"] for r in diff_versions(one, compact)] == ["encoding full → compact"]
    assert [r["differs"] for r in diff_versions(one, manifest(2, [("fog/1/part-0", "u")], same))] == \
        ["bytes (same parameters, frames and encoding)"]
    assert [(r["status"], r["differs"]) for r in diff_versions(one, one)] == [("identical", "")]
    # the seed and the benchmark are in the partition fingerprint too (every example's key and RNG derive from them)
    reseeded = manifest(2, [("fog/1/part-0", "t")], same, seed=8)
    assert [r["differs"] for r in diff_versions(one, reseeded)] == ["seed 7 → 8"]
    text = manifest(2, [("fog/1/part-0", "s")], same, dataset="kitti-c-text")
    assert [r["differs"] for r in diff_versions(one, text)] == ["dataset kitti-c → kitti-c-text"]


def test_reuse_of_another_benchmark_or_a_missing_version_is_refused_before_any_work(v2, tmp_path):
    recipe = _v2_recipe(tmp_path / "mini-c.toml")
    for where, says in ((tmp_path / "nothing", "no manifest.json there"), (v2["fresh"], "is version 0.2.0 itself")):
        out = runner.invoke(app, ["run", str(recipe), "--out", str(tmp_path / "o"), "--reuse", str(where)])
        assert out.exit_code == 2 and says in out.output, out.output
        assert not (tmp_path / "o").exists()


def test_an_earlier_manifest_with_a_malformed_entry_is_refused_in_one_line(v2, tmp_path, demo_kitti_master):
    """A shards entry without its sha256, another with rows as a string: `run --reuse` refuses the earlier version
    before writing anything, `diff` and `verify` say the same one line, naming the manifest and the entry (they
    stopped on a KeyError traceback, `run` after creating the new version's ledger)."""
    earlier = tmp_path / "earlier" / "mini-c" / "0.1.0"
    shutil.copytree(v2["v1"], earlier)
    manifest = json.loads((earlier / "manifest.json").read_text())
    del manifest["shards"][3]["sha256"]
    manifest["shards"][5]["rows"] = str(manifest["shards"][5]["rows"])
    (earlier / "manifest.json").write_text(json.dumps(manifest, indent=1))
    says = (f"{earlier / 'manifest.json'}: malformed shards entry 3 ({manifest['shards'][3]['path']!r}): no sha256 "
            "(and 1 more)")
    for args in (_v2_run(tmp_path, demo_kitti_master, earlier), ["diff", str(earlier), str(v2["fresh"])],
                 ["verify", str(earlier)]):
        out = runner.invoke(app, args)
        text = " ".join(out.output.split())
        assert out.exit_code == 2 and says in text and "Traceback" not in text, (args[0], out.output)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("key", "value", "says"), [
    ("partial", {"selections": ["fog"]}, "partial.selections ['fog'] is not a list of objects"),
    ("partial", "fog", "partial 'fog' is not an object"),
    ("dataset", None, "no dataset"),
    ("version", None, "no version"),
    ("dataset", ["mini-c"], "dataset ['mini-c'] is not a string"),
    ("version", 2, "version 2 is not a string"),
    ("partitions", [], "partitions [] is not an object"),
    ("partitions", {"beam_del/1": "changed"}, "partitions['beam_del/1'] 'changed' is not an object"),
    ("recipe", ["seed"], "recipe ['seed'] is not an object"),
    ("source_identity", ["frames"], "source_identity ['frames'] is not an object"),
])
def test_diff_of_a_manifest_edited_by_hand_is_one_line(v2, tmp_path, key, value, says):
    """`diff` reads a partial pull's selections for its note, the benchmark and version for its title and notes,
    the partitions' parameters and what the builds were given for its rows: a hand-edited ``partial`` (selections not
    a list of objects), a manifest without its ``dataset`` or ``version``, or a partition entry that is not an object
    was a KeyError or AttributeError traceback; a ``dataset`` or ``version`` of another type was printed as if it
    were one. Each is one line naming the manifest and the key, exit 2."""
    version = tmp_path / "v" / "mini-c" / "0.1.0"  # diff reads the manifest only
    version.mkdir(parents=True)
    manifest = json.loads((v2["v1"] / "manifest.json").read_text())
    manifest.pop(key) if value is None else manifest.__setitem__(key, value)
    (version / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for args in (["diff", str(version), str(v2["fresh"])], ["diff", str(v2["fresh"]), str(version)]):
        out = runner.invoke(app, args)
        text = " ".join(out.output.split())
        assert out.exit_code == 2 and text.startswith(f"error: {version / 'manifest.json'}: {says} "), out.output
        assert "Traceback" not in text


def test_publish_of_the_new_version_uploads_only_new_files_and_both_stand_alone(v2, s3prefix, s3env, tmp_path,
                                                                                 demo_kitti_master, no_shared_ray):
    first = publish_version(v2["v1"], s3prefix, progress=False)
    assert first.ok and not first.copied
    second = publish_version(v2["reused"], s3prefix, progress=False)
    assert second.ok and len(second.transferred) == 2 and len(second.copied) == 40
    assert second.transferred_bytes < 0.1 * first.transferred_bytes
    for version in ("0.1.0", "0.2.0"):
        assert verify_remote(f"{s3prefix}/mini-c/{version}", progress=False).ok
        got = pull_version(f"{s3prefix}/mini-c", tmp_path / "p", version=version, progress=False)
        assert got.ok and verify_version(tmp_path / "p" / "mini-c" / version).ok
    # a build on object storage reusing the published 0.1.0: server-side copies, the same bytes as a fresh build
    recipe = _v2_recipe(tmp_path / "mini-c.toml")
    on_s3 = run_build(str(recipe), source=str(demo_kitti_master), out=f"{s3prefix}/builds", workers=2, max_frames=4,
                      frames_per_shard=2, progress=False, reuse=f"{s3prefix}/mini-c/0.1.0")
    assert on_s3.ok and on_s3.reused["placed"] == {"server-side": 40}
    assert {s["path"]: s["sha256"] for s in on_s3.manifest["shards"]} == \
        {s["path"]: s["sha256"] for s in read_manifest(v2["fresh"])["shards"]}
    assert verify_remote(f"{s3prefix}/builds/mini-c/0.2.0", progress=False).ok
    # every version is self-contained: deleting the old one leaves the new one whole
    from bench_build.storage import open_store

    open_store(f"{s3prefix}/mini-c").delete_prefix("0.1.0")
    assert verify_remote(f"{s3prefix}/mini-c/0.2.0", progress=False).ok


def test_diff_names_a_change_of_origin():
    """A partition whose stage now measures from the LiDAR (recipe ``origin``) says so; an absent origin is the
    default "points", so an older manifest compared with itself names nothing."""
    from bench_build.build.reuse import _param_changes

    old = {"stage": "fog", "stage_version": 1, "params": {"beta": 0.05}}
    assert _param_changes(old, {**old, "origin": "lidar"}) == "origin points → lidar"
    assert _param_changes(old, {**old, "origin": "points"}) == ""

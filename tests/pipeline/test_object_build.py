"""Object benchmarks end to end through the one pipeline (planner, Ray shards, ledger, manifest): ModelNet-C
from the demo with no flags, ModelNet40-E's σ/μ columns, 3DOS's scenarios, determinism, resume after SIGKILL,
and reading back with plain pyarrow / DuckDB."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.dataset as pads
import pytest
from typer.testing import CliRunner

from bench_build.build.run import run_build
from bench_build.cli import app
from bench_build.manifests.manifest import read_manifest, verify_version
from bench_build.manifests.threedos import SN_SETS
from bench_build.sources.demo.objects import write_demo_objects
from bench_build.sources.threedos import ThreeDOSSource
from bench_build.stages.whole_shape.object_rotate import euler_matrix
from tests.pipeline.test_threedos_source import released_counts

runner = CliRunner()
MODELNET_C_POINTS = {  # (corruption, severity) → points per example, from Appendix A's rules
    **{("clean", 0): 1024},
    **{(c, s): 1024 for c in ("scale", "jitter", "rotate") for s in range(1, 6)},
    **{("dropout_global", s): int(1024 * (1 - r)) for s, r in enumerate([0.25, 0.375, 0.5, 0.625, 0.75], 1)},
    **{("dropout_local", s): 1024 - 100 * s for s in range(1, 6)},
    **{("add_global", s): 1024 + 10 * s for s in range(1, 6)},
    **{("add_local", s): 1024 + 100 * s for s in range(1, 6)},
}


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    root = write_demo_objects(tmp_path_factory.mktemp("objects"), modelnet={"train": 1, "test": 1},
                              scanobjectnn={"training": 1, "test": 1}, shapenet={"train": 1, "test": 1})
    # keep 4 synsets of each SN set (and cellphone): every 3DOS rule is exercised, meshes stay few
    keep = {s for members in SN_SETS.values() for s in members[:4]} | {"02992529"}
    for d in (root / "ShapeNetCore.v2").iterdir():
        if d.is_dir() and d.name not in keep:
            shutil.rmtree(d)
    return root


def _table(version_dir: Path):
    return pads.dataset(Path(version_dir) / "data", format="parquet", partitioning="hive").to_table()


def _files(version_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(version_dir)): p.read_bytes() for p in sorted(Path(version_dir).rglob("*.parquet"))
            if "_ledger" not in p.parts}


def test_modelnet_c_builds_from_demo_with_no_flags(tmp_path, monkeypatch, shared_ray):
    """The README command: `bench-build run modelnet-c`, then verify, then read back without this package."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    out = runner.invoke(app, ["run", "modelnet-c", "--workers", "2", "--no-progress"])
    assert out.exit_code == 0, out.output
    version = tmp_path / "bench-out" / "modelnet-c" / "1.0.0"
    assert runner.invoke(app, ["verify", str(version)]).exit_code == 0
    m = read_manifest(version)
    assert m["frames"] == 80 and m["counts"]["examples_stored"] == 80 * 36
    card = (version / "README.md").read_text()  # the row schema says what an object build's columns are
    assert "N×C, columns x, y, z; shape coordinates (normalised by the preprocessing above), no intensity" in card
    assert "| `boxes` | list<struct> | null: this source has no boxes |" in card
    assert "| `class_id` | int32 | per example: class index" in card and "see bench-build's README" not in card
    assert "Each panel shows the shape from three sides" in card and "metre scale" not in card
    # shapes, not LiDAR scans: the card tagged them `lidar` and gave their (absent) intensity a scale
    header, source = card.split("\n---\n")[0], next(x for x in card.splitlines() if x.startswith("- Source:"))
    assert "- 3d-shapes" in header and "lidar" not in header, header
    assert source.endswith("point fields x, y, z") and "intensity" not in source, source
    rows = duckdb.sql(
        f"SELECT corruption, severity, count(*), min(num_points), max(num_points), min(class_id), max(class_id) "
        f"FROM read_parquet('{version}/data/**/*.parquet', hive_partitioning = true) GROUP BY ALL").fetchall()
    assert len(rows) == 36
    for corruption, severity, n, lo, hi, cmin, cmax in rows:
        want = MODELNET_C_POINTS[(corruption, int(severity))]
        assert (n, lo, hi, cmin, cmax) == (80, want, want, 0, 39), (corruption, severity)
    # one rotated example is exactly its clean shape times R = Rz·Ry·Rx of the angles it records
    t = _table(version)
    key = t.filter(pads.field("corruption") == "clean")["frame_id"][0].as_py()

    def row(corruption: str, severity: int) -> dict:
        sel = t.filter((pads.field("frame_id") == key) & (pads.field("corruption") == corruption)
                       & (pads.field("severity") == severity)).to_pylist()
        assert len(sel) == 1
        return sel[0]

    clean = np.asarray(row("clean", 0)["points"], dtype=np.float64)
    rot = row("rotate", 5)
    angles = np.deg2rad(json.loads(rot["info"])["euler_deg"])
    assert np.abs(np.rad2deg(angles)).max() <= 30
    np.testing.assert_allclose(np.asarray(rot["points"]), clean @ euler_matrix(*angles), atol=1e-5)
    added = row("add_global", 5)
    assert sum(1 for tag in added["point_tag"] if tag == 7) == 50
    assert (np.linalg.norm(np.asarray(added["points"])[-50:], axis=1) <= 1 + 1e-6).all()


def test_modelnet40_e_sigma_mu_columns_and_worker_count(objects, tmp_path, shared_ray):
    a = run_build("modelnet40-e", source=str(objects), out=tmp_path / "a", frames_per_shard=16, workers=2,
                  progress=False)
    assert a.ok, a.failures
    t = _table(a.version_dir)
    assert t.num_rows == 80 * 4
    noisy = t.filter(pads.field("corruption") == "noise").to_pylist()
    assert {r["split"] for r in noisy} == {"train", "test"} and len(noisy) == 240
    for r in noisy[:20]:
        sigma, mu = np.asarray(r["sigma"]), np.asarray(r["mu"])
        assert len(sigma) == len(mu) == r["num_points"] == 2048
        info = json.loads(r["info"])
        assert np.linalg.norm(info["sensor"]) == pytest.approx(2.0)
        # σ ∈ [a, (a + b·r_max)(1 + c)] with r ≤ 3 (sensor at 2, shape in the unit sphere); μ ∈ [0, k]
        assert sigma.min() >= info["a"] * (1 - 1e-6)
        assert sigma.max() <= (info["a"] + info["b"] * 3.0) * (1 + info["c"]) * (1 + 1e-6)
        assert 0 <= mu.min() and mu.max() <= info["k"] * (1 + 1e-6)
    clean = t.filter(pads.field("corruption") == "clean").to_pylist()
    assert all(r["sigma"] is None or not any(r["sigma"]) for r in clean)
    card = (Path(a.version_dir) / "README.md").read_text()  # one corruption, not "1 corruptions"
    assert "(80 frames × 1 corruption × 4 severities, severity 0 = clean)" in card
    # the same build on one worker is byte-identical
    b = run_build("modelnet40-e", source=str(objects), out=tmp_path / "b", frames_per_shard=16, workers=1,
                  progress=False)
    assert _files(a.version_dir) == _files(b.version_dir)
    # it publishes (here to a local publication root) and pulls back verified, σ/μ columns included
    from bench_build.publish import publish_version, pull_version

    pub = publish_version(a.version_dir, str(tmp_path / "pub"), progress=False)
    assert pub.ok, pub.problems
    pulled = pull_version(str(tmp_path / "pub" / "modelnet40-e"), tmp_path / "pulled", progress=False)
    assert pulled.ok and verify_version(tmp_path / "pulled" / "modelnet40-e" / "1.0.0").ok
    back = _table(tmp_path / "pulled" / "modelnet40-e" / "1.0.0")
    assert back.num_rows == t.num_rows and back.schema.field("sigma").type == t.schema.field("sigma").type


def test_3dos_scenarios_read_back(objects, tmp_path, shared_ray):
    res = run_build("3dos", source=str(objects), out=tmp_path, progress=False)
    assert res.ok, res.failures
    assert verify_version(res.version_dir).ok
    # the released class lists applied to the fixture's shapes (cellphones included in it, none in the sets)
    expected = released_counts(objects, objects, objects)
    assert ThreeDOSSource(objects).counts() == expected
    got: dict = {}
    for scenario, split, known, n in duckdb.sql(
            f"SELECT scenario, split, known, count(*) FROM read_parquet('{res.version_dir}/data/**/*.parquet', "
            "hive_partitioning = true) GROUP BY ALL").fetchall():
        got.setdefault(scenario, {}).setdefault(split, {"known": 0, "unknown": 0})["known" if known else "unknown"] = n
    assert got == expected
    t = _table(res.version_dir).to_pylist()
    assert (objects / "ShapeNetCore.v2" / "02992529").is_dir()
    assert not [r for r in t if r.get("synset") == "02992529"]
    assert {r["scenario"] for r in t if r["split"] == "val" and r["domain"] == "real"} == {"SR12", "SR13", "SR23"}
    for r in t[::7]:
        pts = np.asarray(r["points"], dtype=np.float64)
        assert len(pts) == (2048 if r["domain"] == "real" else 1024)
        assert np.linalg.norm(pts, axis=1).max() == pytest.approx(1.0, abs=1e-5)
        assert np.abs(pts.mean(axis=0)).max() < 1e-5
        assert r["known"] == (r["class_id"] >= 0) == (r["unknown_set"] is None)
    card = (Path(res.version_dir) / "README.md").read_text()
    assert "| SN1 | test |" in card and "FPS 4096" in card and "| SR12 | val |" in card
    assert "| source_options.cellphone |" in card and "| source_options.r2r_val |" in card
    # no corruptions: said in words, not "× 0 corruptions × 1 severities" above an empty table, and the variants'
    # tables head their first column "what" (source options and the preprocessing, not corruptions)
    assert f"{len(t)} frames, each once as it is: this benchmark has no corruptions" in card
    assert "× 0 corruptions" not in card and "| corruption | stage |" not in card
    assert "None: every example is a source frame as it is" in card
    assert "as stored (one panel: the build has no corruption;" in card and "(1 panels" not in card
    assert "| what | default (released generator) | `cellphone` |" in card and "| corruption | default" not in card


MINI_OBJECT_RECIPE = """
[benchmark]
name = "mini-object"
version = "0.1.0"
seed = 11
source = "modelnet40"
split = "test"
severities = 2

[preprocess]
stage = "object_sample"
num_points = 1024
method = "first"
normalize = "none"

[corruptions.add_local]
stage = "object_add_local"
points = [100, 500]

[corruptions.dropout_local]
stage = "object_drop_local"
points = [100, 500]
"""


def test_object_build_resumes_after_sigkill(objects, tmp_path, shared_ray):
    recipe = tmp_path / "mini-object.toml"
    recipe.write_text(MINI_OBJECT_RECIPE)
    args = ["run", str(recipe), "--source", str(objects), "--workers", "1", "--frames-per-shard", "2",
            "--max-frames", "24", "--no-progress"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "bench_build.cli", *args, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    shards = killed / "mini-object" / "0.1.0" / "_ledger" / "shards"
    deadline = time.time() + 180
    try:
        while time.time() < deadline:
            if shards.is_dir() and len(list(shards.glob("part-*.json"))) >= 2:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail("build never recorded a shard")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        time.sleep(1.0)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    version = killed / "mini-object" / "0.1.0"
    done_before = {p.stem for p in shards.glob("part-*.json") if not p.name.endswith(".failed.json")}
    assert 2 <= len(done_before) < 12 and not (version / "manifest.json").exists()
    kw = dict(source=str(objects), frames_per_shard=2, max_frames=24, progress=False)
    resumed = run_build(str(recipe), out=killed, **kw)
    assert resumed.ok and resumed.shards_skipped == len(done_before)
    assert set(resumed.shards_built) == {f"part-{i:05d}-of-00012" for i in range(12)} - done_before
    fresh = run_build(str(recipe), out=tmp_path / "fresh", **kw)
    assert _files(version) == _files(fresh.version_dir)
    assert verify_version(version).ok

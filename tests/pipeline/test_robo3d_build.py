"""`bench-build run` of the robo3d-nuscenes-c recipe with no --source: demo sweeps in the real nuScenes layout,
read by the devkit in the Ray workers, built, verified and resumed; semantic labels are in the shards and
aligned with the points. The snow corruption is left out of this copy of the recipe to keep the test short
(its particle pools take most of a 1-frame build); test_robo3d_labels runs it on every dataset."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.dataset as ds
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.manifest import read_manifest, verify_version

runner = CliRunner()


def _without_snow(tmp_path):
    from bench_build.manifests.recipe import builtin_recipes

    text = builtin_recipes()["robo3d-nuscenes-c"].read_text()
    head, _, rest = text.partition("[corruptions.snow]")
    _, _, tail = rest.partition("# ---- external")
    path = tmp_path / "robo3d-nuscenes-c.toml"
    path.write_text(head + "# ---- external" + tail)
    return path


def test_demo_build_verify_resume(tmp_path, monkeypatch, shared_ray):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    args = ["run", str(_without_snow(tmp_path)), "--max-frames", "1", "--workers", "1", "--no-progress"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    version_dir = tmp_path / "bench-out" / "robo3d-nuscenes-c" / "1.0.0"
    m = read_manifest(version_dir)
    assert m["frames"] == 1 and m["counts"]["examples_defined"] == 1 * 7 * 4
    assert verify_version(version_dir).ok
    rows = ds.dataset(version_dir / "data", format="parquet", partitioning="hive").to_table(
        columns=["corruption", "num_points", "points", "semantic", "point_tag"]).to_pylist()
    assert len(rows) == 1 + 7 * 3  # the clean scan (stored once, a partition of the same tree) + corrupted
    assert sum(r["corruption"] == "clean" for r in rows) == 1
    for r in rows:  # one label per point in every stored example; points are N rows of C = 5
        assert len(r["semantic"]) == r["num_points"] == len(r["points"])
        assert {len(p) for p in r["points"]} == {5}
        if r["corruption"] == "crosstalk":
            sem, tag = np.array(r["semantic"]), np.array(r["point_tag"])
            assert (sem[tag == 5] == 43).all() and (tag == 5).any()
    card = (version_dir / "README.md").read_text()
    assert "## Source" in card and "17→vehicle.car" in card and "velodyne-hdl32e" in card
    assert "not from the released data" in card and "nuScenes-lidarseg: CC BY-NC-SA 4.0" in card
    # the devkit's 16-class lidarseg benchmark map is recorded; `score` maps ground truth through it, so
    # predictions that are the mapped ground truth (0 where it is ignored) score 100 % mIoU in every partition
    from bench_build.sources.nuscenes import FINE_INDEX

    lmap = {int(k): v for k, v in m["source"]["learning_map"].items()}
    assert lmap[FINE_INDEX["vehicle.car"]] == 4 and lmap[FINE_INDEX["human.pedestrian.child"]] == 7
    assert "17→4" in card and "LidarsegClassMapper" in card
    keyed = ds.dataset(version_dir / "data", format="parquet", partitioning="hive").to_table(
        columns=["key", "semantic"]).to_pylist()
    lut = np.zeros(256, np.int64)
    lut[list(lmap)] = list(lmap.values())
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"key": r["key"], "labels": lut[np.minimum(r["semantic"], 255)].tolist()})
                             + "\n" for r in keyed))
    scored = runner.invoke(app, ["score", str(version_dir), str(preds), "--out", str(tmp_path / "res")])
    assert scored.exit_code == 0, scored.output
    ious = [r["value"] for r in json.loads((tmp_path / "res.json").read_text())["rows"] if r["metric"] == "mIoU"]
    assert len(ious) == 1 + 7 * 3 and all(v == 100.0 for v in ious)
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 built" in again.output, again.output
    assert json.loads((version_dir / "manifest.json").read_text())["frames"] == 1

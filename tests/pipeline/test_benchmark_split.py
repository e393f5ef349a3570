"""Defaults are the benchmark: a recipe's split is what `run` builds without --split; another split is allowed
but said in the run's first lines and in the card."""

from __future__ import annotations

import json

from bench_build.manifests.recipe import load_recipe
from bench_build.sources import open_source
from tests.conftest import SMALL_RECIPE


def test_robo3d_kitti_c_builds_kitti_val_by_default(demo_kitti):
    recipe = load_recipe("robo3d-kitti-c")
    assert recipe.split == "val" and recipe.paper_frames == 3769
    src = open_source(recipe, str(demo_kitti))
    assert src.describe()["split"] == "val"
    val = (demo_kitti / "ImageSets" / "val.txt").read_text().split()
    assert src.list_frames() == val and len(val) < len(list((demo_kitti / "training" / "velodyne").iterdir()))


def test_another_split_is_said_at_once_and_in_the_card(demo_kitti, tmp_path, capfd, shared_ray):
    from bench_build.build.run import run_build

    recipe = tmp_path / "val-c.toml"
    recipe.write_text(SMALL_RECIPE.replace('source = "kitti"\n', 'source = "kitti"\nsplit = "val"\n'))
    res = run_build(str(recipe), source=str(demo_kitti), out=tmp_path / "o", workers=1, split="train",
                    max_frames=1, progress=False)
    assert res.ok, res.failures
    err = capfd.readouterr().err
    assert "building split 'train', not mini-c's benchmark split 'val' (--split)" in err
    manifest = json.loads((res.version_dir / "manifest.json").read_text())
    assert manifest["source"]["split"] == "train" and manifest["source"]["benchmark_split"] == "val"
    card = (res.version_dir / "README.md").read_text()
    assert ("**Not the benchmark's split:** built from split `train` (`--split`); the benchmark is defined on "
            "`val`") in card

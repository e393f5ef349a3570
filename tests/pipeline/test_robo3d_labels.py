"""Semantic labels stay aligned with the points through every corruption of the three Robo3D dataset
recipes, on frames read by the real readers from fixtures in their real layouts: a surviving point keeps its
label, a point a stage creates gets 0 (unlabelled), and fog / snow / crosstalk points get the dataset's id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.registry import get_stage

RECIPES = {"robo3d-semantickitti-c": "semantickitti", "robo3d-nuscenes-c": "nuscenes", "robo3d-wod-c": "waymo"}
TAG_OF = {"fog": PointTag.SCATTER_FOG, "snow": PointTag.SCATTER_SNOW, "crosstalk": PointTag.CROSSTALK}


def _fixture(kind: str, root: Path):
    if kind == "semantickitti":
        from bench_build.sources.demo.semantickitti import write_semantickitti
        from bench_build.sources.semantickitti import SemanticKittiSource

        return SemanticKittiSource(write_semantickitti(root, 1, azimuth_step_deg=0.36))
    if kind == "nuscenes":
        from bench_build.sources.demo.nuscenes import write_nuscenes
        from bench_build.sources.nuscenes import NuScenesSource

        return NuScenesSource(write_nuscenes(root, 1, train_frames=0, azimuth_step_deg=0.33))
    from bench_build.sources.demo.waymo import write_waymo
    from bench_build.sources.waymo import WaymoSource

    return WaymoSource(write_waymo(root, 1, contexts=1, width=1300, unlabelled_per_context=0))


@pytest.fixture(scope="module", params=sorted(RECIPES))
def labelled(request, tmp_path_factory) -> tuple[str, Frame]:
    src = _fixture(RECIPES[request.param], tmp_path_factory.mktemp(RECIPES[request.param]))
    f = src.read(src.list_frames()[0])
    assert "semantic" in f.labels and len(np.unique(f.labels["semantic"])) >= 5
    pid = np.arange(1, len(f) + 1, dtype=np.int64)  # 0 marks a point a stage added
    return request.param, f.with_points(f.points, pid=pid)


def test_labels_follow_points_through_every_corruption(labelled):
    name, frame = labelled
    sem = frame.labels["semantic"]
    recipe = load_recipe(name)
    seen_special = {}
    for c in recipe.corruptions:
        stage = get_stage(c.stage)
        for s, params in enumerate(c.params, 1):
            out = stage.apply(frame, params, np.random.default_rng([recipe.seed, s]))
            assert len(out.labels["semantic"]) == len(out) and out.labels["semantic"].dtype == np.uint32
            pid = out.labels["pid"]
            added = pid == 0
            assert not added.any(), c.name  # no Robo3D corruption adds points (fog/snow move them)
            want = np.where(added, 0, sem[np.maximum(pid - 1, 0)])
            label_id = getattr(params, "label_id", None)
            if c.name in TAG_OF:
                special = out.point_tag == TAG_OF[c.name]
                want = np.where(special, label_id, want)
                seen_special[c.name] = seen_special.get(c.name, 0) + int(special.sum())
            np.testing.assert_array_equal(out.labels["semantic"], want, err_msg=f"{name} {c.name} {s}")
            if "instance" in frame.labels:  # SemanticKITTI / Waymo: the instance id follows its point too
                inst = frame.labels["instance"]
                np.testing.assert_array_equal(out.labels["instance"], np.where(added, 0, inst[np.maximum(pid - 1, 0)]))
            assert out.sensor == frame.sensor and out.intensity_scale == frame.intensity_scale
    assert seen_special["crosstalk"] > 0 and seen_special["fog"] > 0, seen_special


def test_points_a_stage_adds_get_the_unlabelled_id(labelled):
    from bench_build.stages.labels import UNLABELLED

    _, frame = labelled
    out = frame.append(np.zeros((3, len(frame.fields)), np.float32))
    assert out.labels["semantic"][-3:].tolist() == [UNLABELLED] * 3
    np.testing.assert_array_equal(out.labels["semantic"][:-3], frame.labels["semantic"])


def test_wet_ground_wets_only_the_labelled_ground(labelled):
    """Robo3D's segmentation scripts take the ground from the labels: nothing else is darkened or dropped."""
    name, frame = labelled
    params = load_recipe(name).corruption("wet_ground").params_for(3)
    ground = np.isin(frame.labels["semantic"], params.ground_labels)
    assert ground.sum() >= params.min_ground
    out = get_stage("wet_ground").apply(frame, params, np.random.default_rng(0))
    pid = out.labels["pid"] - 1
    touched = np.zeros(len(frame), bool)
    touched[np.setdiff1d(np.arange(len(frame)), pid)] = True  # dropped
    touched[pid[out.intensity != frame.intensity[pid]]] = True  # darkened
    assert touched.any() and not touched[~ground].any()
    with pytest.raises(ValueError, match="no semantic labels"):
        get_stage("wet_ground").apply(Frame(frame.frame_id, frame.points, frame.fields,
                                            frame.intensity_scale), params, np.random.default_rng(0))

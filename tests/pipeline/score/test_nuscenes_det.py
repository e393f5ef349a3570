"""nuScenes-C (Det3D): the score of a build equals the nuScenes devkit's DetectionEval on the original tables,
and Robo3D's published SECOND-MH row is reproduced from its NDS row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("nuscenes", reason="NDS is the devkit's evaluation: the nuscenes extra")

from bench_build.cli import app
from bench_build.score import PredictionError, score_version
from bench_build.score.robo3d import robo3d_metrics
from bench_build.score.truth import points_in_boxes
from bench_build.sources.demo.nuscenes import write_nuscenes
from bench_build.sources.nuscenes import NuScenesSource
from tests.pipeline.score.det3d_helpers import write_scene_version
from tests.pipeline.score.units import assert_units

ROBO3D = ("fog", "wet_ground", "snow", "motion_blur", "beam_missing", "crosstalk", "incomplete_echo", "cross_sensor")
runner = CliRunner()


def _categories(tables: Path) -> dict[str, str]:
    """annotation token → category name (through instance.json and category.json)."""
    cat = {c["token"]: c["name"] for c in json.loads((tables / "category.json").read_text())}
    inst = {i["token"]: cat[i["category_token"]] for i in json.loads((tables / "instance.json").read_text())}
    return {a["token"]: inst[a["instance_token"]] for a in json.loads((tables / "sample_annotation.json").read_text())}


@pytest.fixture(scope="module")
def nusc_root(tmp_path_factory) -> Path:
    """4 mini_val samples; annotations get point counts (one box 0: the devkit drops it), a moving car gets a
    neighbour annotation (so a GT velocity exists) and an attribute."""
    root = write_nuscenes(tmp_path_factory.mktemp("nusc"), 4, azimuth_step_deg=1.0)
    tables = root / "v1.0-mini"
    anns = json.loads((tables / "sample_annotation.json").read_text())
    for i, a in enumerate(anns):
        a["num_lidar_pts"] = 0 if i == 1 else 3 + i
    attr = {"token": "attr-moving", "name": "vehicle.moving", "description": ""}
    (tables / "attribute.json").write_text(json.dumps([attr]))
    names = _categories(tables)
    cars = [a for a in anns if names[a["token"]] == "vehicle.car"]
    cars[0]["attribute_tokens"] = ["attr-moving"]
    # two cars of consecutive samples linked as one track: box_velocity gives both a ground-truth velocity
    first = next(b for b in cars if b["sample_token"] != cars[0]["sample_token"])
    cars[0]["next"], first["prev"] = first["token"], cars[0]["token"]
    (tables / "sample_annotation.json").write_text(json.dumps(anns))
    return root


@pytest.fixture(scope="module")
def nusc_version(nusc_root, tmp_path_factory) -> Path:
    src = NuScenesSource(nusc_root)
    frames = [src.read(t) for t in src.list_frames()]
    parts = {("clean", 0): frames, ("fog", 1): frames}
    return write_scene_version(tmp_path_factory.mktemp("v") / "robo3d-nuscenes-c" / "0.1.0", "robo3d-nuscenes-c",
                               parts, src.describe(), columns=NuScenesSource.columns)


def _predictions(nusc_root: Path, seed: int) -> dict:
    """The ground truth (global frame) jittered, some dropped, plus a false positive per sample."""
    from nuscenes.eval.detection.utils import category_to_detection_name

    rng = np.random.default_rng(seed)
    tables = nusc_root / "v1.0-mini"
    anns = json.loads((tables / "sample_annotation.json").read_text())
    names = _categories(tables)
    src = NuScenesSource(nusc_root)
    results: dict[str, list] = {t: [] for t in src.list_frames()}
    for a in anns:
        name = category_to_detection_name(names[a["token"]])
        if a["sample_token"] not in results or name is None or rng.random() < 0.2:
            continue
        t = np.asarray(a["translation"]) + rng.normal(0, 0.4, 3)
        results[a["sample_token"]].append({
            "sample_token": a["sample_token"], "translation": t.tolist(),
            "size": (np.asarray(a["size"]) * rng.uniform(0.8, 1.2, 3)).tolist(),
            "rotation": a["rotation"], "velocity": rng.normal(0, 1, 2).tolist(), "detection_name": name,
            "detection_score": float(rng.uniform(0.2, 1.0)),
            "attribute_name": "vehicle.moving" if name == "car" else ""})
    for boxes in results.values():
        ref = boxes[0] if boxes else None
        if ref is not None:
            moved = np.asarray(ref["translation"]) + np.array([6.0, 0.0, 0.0])
            boxes.append({**ref, "translation": moved.tolist(),
                          "detection_score": 0.95})
    return {"meta": {"use_lidar": True}, "results": results}


def _devkit(nusc_root: Path, result: Path, out: Path) -> dict:
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.evaluate import DetectionEval
    from nuscenes.nuscenes import NuScenes

    nusc = NuScenes(version="v1.0-mini", dataroot=str(nusc_root), verbose=False)
    ev = DetectionEval(nusc, config_factory("detection_cvpr_2019"), str(result), "mini_val", str(out), verbose=False)
    m, _ = ev.evaluate()
    tp = m.tp_errors
    return {"NDS": 100 * m.nd_score, "mAP": 100 * m.mean_ap, "mATE": tp["trans_err"], "mASE": tp["scale_err"],
            "mAOE": tp["orient_err"], "mAVE": tp["vel_err"], "mAAE": tp["attr_err"]}


def test_nds_equals_the_devkits_detection_eval(nusc_root, nusc_version, tmp_path):
    pred = tmp_path / "pred"
    for part, seed in (("clean", 1), ("fog/light", 2)):
        (pred / part).mkdir(parents=True)
        (pred / part / "results_nusc.json").write_text(json.dumps(_predictions(nusc_root, seed)))
    for stray in ("fog/heavy", "fog/light/light", "fgo/1"):  # no partition of the version: not scored, said
        (pred / stray).mkdir(parents=True)
        (pred / stray / "results_nusc.json").write_text("{}")
    res = runner.invoke(app, ["score", str(nusc_version), str(pred), "--out", str(tmp_path / "r" / "nds")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r" / "nds.json").read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data["metric"] == "nuscenes-det" and "NDS" in res.output
    got = {(r["corruption"], r["metric"]): r["value"] for r in data["rows"]}
    for corruption, sub in (("clean", "clean"), ("fog", "fog/light")):
        ref = _devkit(nusc_root, pred / sub / "results_nusc.json", tmp_path / "ev")
        assert ref["mAVE"] != 1.0 and ref["mAAE"] < 1.0  # ground-truth velocities and attributes took part
        assert 0 < ref["mAP"] < 100 and 0 < ref["NDS"] < 100
        for name, v in ref.items():
            assert got[(corruption, name)] == pytest.approx(v, abs=1e-4), (corruption, name)
    # the build has only clean and fog: no mCE, and the summary says why
    assert "mCE" not in data["summary"] and "no mCE" in data["summary"]["note"]
    assert (f"{pred}: prediction folder(s) fgo, fog/heavy, fog/light/light name no partition of this version and "
            "were not scored") in data["summary"]["note"]


def test_lidar_frame_without_tables_and_bad_input(nusc_root, tmp_path):
    src = NuScenesSource(nusc_root)
    frames = {t: src.read(t) for t in src.list_frames()}
    # a build whose source tables are gone
    nusc_version = write_scene_version(tmp_path / "v", "robo3d-nuscenes-c",
                                       {("clean", 0): list(frames.values()), ("fog", 1): list(frames.values())},
                                       {**src.describe(), "root": str(tmp_path / "gone")},
                                       columns=NuScenesSource.columns)
    results = {}
    present = set()
    for t, f in frames.items():  # perfect detections in the build's LiDAR frame of the boxes with points in them
        from nuscenes.eval.detection.utils import category_to_detection_name
        from pyquaternion import Quaternion

        b = f.boxes
        rows = [{"x": b.center[j, 0], "y": b.center[j, 1], "z": b.center[j, 2], "dx": b.dims[j, 0],
                 "dy": b.dims[j, 1], "dz": b.dims[j, 2], "heading": b.heading[j]} for j in range(len(b))]
        seen = points_in_boxes(f.points, rows)
        keep = [j for j in range(len(b)) if category_to_detection_name(b.cls[j]) and seen[j] > 0]
        present |= {category_to_detection_name(b.cls[j]) for j in keep}
        results[t] = [{"sample_token": t, "translation": b.center[j].tolist(),
                       "size": [b.dims[j, 1], b.dims[j, 0], b.dims[j, 2]],
                       "rotation": list(Quaternion(axis=[0, 0, 1], radians=b.heading[j]).elements),
                       "velocity": [0.0, 0.0], "detection_name": category_to_detection_name(b.cls[j]),
                       "detection_score": 0.9, "attribute_name": ""} for j in keep]
    pred = tmp_path / "p"
    for part in ("clean", "fog/1"):
        (pred / part).mkdir(parents=True)
        (pred / part / "r.json").write_text(json.dumps({"meta": {"frame": "lidar"}, "results": results}))
    rep = score_version(nusc_version, pred)
    row = {(r["corruption"], r["metric"]): r["value"] for r in rep.rows}
    assert len(present) >= 2
    assert_units(rep)  # NDS, mAP and AP in percent; the TP errors in the devkit's units (mATE in m, …)
    assert {r["unit"] for r in rep.rows if r["metric"] == "mATE"} == {"m"}
    for cls in ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle", "bicycle",
                "traffic_cone", "barrier"):
        assert row[("clean", f"{cls}/AP")] == pytest.approx(100.0 if cls in present else 0.0), cls
    assert row[("clean", "mAP")] == pytest.approx(10.0 * len(present))
    assert row[("clean", "NDS")] is None and row[("clean", "mAVE")] is None
    assert "velocities" in rep.summary["note"]
    # global-frame boxes without the tables: refused, naming the remedy
    (pred / "clean" / "r.json").write_text(json.dumps({"meta": {}, "results": results}))
    with pytest.raises(PredictionError, match=r"need the nuScenes tables .* --source-root"):
        score_version(nusc_version, pred)
    # a missing sample, a bad class name, NaN translation: one line naming file, token and index
    t0 = next(iter(results))
    bad = dict(results)
    del bad[t0]
    (pred / "clean" / "r.json").write_text(json.dumps({"meta": {"frame": "lidar"}, "results": bad}))
    with pytest.raises(PredictionError, match=f"1 of 4 samples .* {t0}"):
        score_version(nusc_version, pred)
    bad = {**results, t0: [{**results[t0][0], "detection_name": "vehicle.car"}]}
    (pred / "clean" / "r.json").write_text(json.dumps({"meta": {"frame": "lidar"}, "results": bad}))
    with pytest.raises(PredictionError, match=rf"results\['{t0}'\]\[0\]: Unknown detection_name vehicle.car"):
        score_version(nusc_version, pred)
    bad = {**results, t0: [{**results[t0][0], "translation": [1.0, None, 0.0]}]}
    (pred / "clean" / "r.json").write_text(json.dumps({"meta": {"frame": "lidar"}, "results": bad}))
    res = runner.invoke(app, ["score", str(nusc_version), str(pred)])
    assert res.exit_code == 2 and "translation[1] is None" in res.output
    (pred / "clean" / "r.json").write_bytes(b'{"meta": {"frame": "lidar\xff"}}')  # not UTF-8: one line too
    res = runner.invoke(app, ["score", str(nusc_version), str(pred)])
    assert res.exit_code == 2 and f"{pred / 'clean' / 'r.json'}: not a readable JSON file" in res.output, res.output


def test_results_json_the_parser_cannot_read_is_one_line(nusc_root, nusc_version, tmp_path):
    """An integer past Python's int() digit limit or nesting past json.loads' recursion limit in a results file
    ended in a ValueError or RecursionError traceback; one past ±1.8e308 (it parses) in math.isfinite's or
    float's OverflowError. Each is one line naming the file and the line or the box."""
    limit = sys.get_int_max_str_digits()
    good = _predictions(nusc_root, 1)
    token = next(t for t, boxes in good["results"].items() if boxes)
    pred = tmp_path / "pred"
    (pred / "fog" / "light").mkdir(parents=True)
    (pred / "fog" / "light" / "results_nusc.json").write_text(json.dumps(good))
    (pred / "clean").mkdir()
    where = f"results['{token}'][0]"
    for text, says in (
            ('{"meta": {},\n"results": {"t": [1' + "0" * 5000 + "]}}",
             f"line 2: an integer of more than {limit} digits, not a finite number"),
            ('{"meta": {},\n\n"results": ' + "[" * 50_000 + "]" * 50_000 + "}",
             "line 3: JSON nested 50001 levels deep, deeper than Python's JSON parser reads"),
            (json.dumps({**good, "results": {**good["results"], token: [
                {**good["results"][token][0], "translation": [10**400, 0, 0]}]}}),
             f"{where}: translation[0] is an integer beyond ±1.8e308, not a finite number"),
            (json.dumps({**good, "results": {**good["results"], token: [
                {**good["results"][token][0], "velocity": [0, -(10**400)]}]}}),
             f"{where}: velocity[1] is an integer beyond ±1.8e308, not a finite number"),
            (json.dumps({**good, "results": {**good["results"], token: [
                {**good["results"][token][0], "detection_score": 10**400}]}}),
             f"{where}: detection_score is an integer beyond ±1.8e308, not a finite number")):
        (pred / "clean" / "results_nusc.json").write_text(text)
        res = runner.invoke(app, ["score", str(nusc_version), str(pred), "--metric", "nuscenes-det"],
                            terminal_width=400)
        assert res.exit_code == 2, res.output
        assert res.output.strip() == f"error: {pred / 'clean' / 'results_nusc.json'}: {says}", res.output


@pytest.mark.parametrize("where", ["clean/results_nusc.json", "clean/0/other.json", "results_nusc.json"])
def test_a_folder_where_a_results_file_goes_is_refused(nusc_root, nusc_version, tmp_path, where):
    """A folder named results_nusc.json in a partition's folder was read as the results file: "not a readable JSON
    file: [Errno 21] Is a directory"; given as PREDICTIONS it was searched for partition folders ("no nuScenes
    results file for clean/0"). Both are a folder where a file goes, said as the other scorers say it."""
    pred = tmp_path / "pred"
    if where != "results_nusc.json":
        (pred / "fog" / "light").mkdir(parents=True)
        (pred / "fog" / "light" / "results_nusc.json").write_text(json.dumps(_predictions(nusc_root, 1)))
        (pred / where / "part-0").mkdir(parents=True)
        folder = pred / where
    else:
        folder = pred = tmp_path / where
        (pred / "clean").mkdir(parents=True)
    res = runner.invoke(app, ["score", str(nusc_version), str(pred), "--out", str(tmp_path / "res" / "n")],
                        terminal_width=400)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {folder}: is a directory where a file was expected; nuScenes predictions "
                                  "are one results JSON file per partition "
                                  "(<corruption>/<severity>/results_nusc.json)"), res.output
    assert not (tmp_path / "res").exists()


def test_robo3d_reproduces_second_mh_on_nuscenes_c():
    # Robo3D Tab. 19 (NDS) → Tab. 17/18: SECOND-MH mCE 97.50, mRR 76.96 against CenterPoint-PP
    per = [38.00, 47.59, 33.92, 41.32, 35.64, 40.30, 34.12, 23.82]
    acc = {("clean", 0): 47.87, **{(c, s): v for c, v in zip(ROBO3D, per, strict=True) for s in (1, 2, 3)}}
    m = robo3d_metrics(acc, "nuscenes-c-det")
    assert m["mCE"] == pytest.approx(97.50, abs=0.011) and m["mRR"] == pytest.approx(76.96, abs=0.011)
    ces = [95.40, 96.01, 96.09, 100.81, 99.26, 92.16, 97.64, 102.64]
    rrs = [79.38, 99.42, 70.86, 86.32, 74.45, 84.19, 71.28, 49.76]
    for c, ce, rr in zip(ROBO3D, ces, rrs, strict=True):
        assert m["per_corruption"][c]["CE"] == pytest.approx(ce, abs=0.011)
        assert m["per_corruption"][c]["RR"] == pytest.approx(rr, abs=0.011)


def test_points_in_boxes_equals_the_devkits_points_in_box():
    from nuscenes.utils.data_classes import Box
    from nuscenes.utils.geometry_utils import points_in_box
    from pyquaternion import Quaternion

    rng = np.random.default_rng(3)
    pts = rng.uniform(-10, 10, (5000, 3))
    boxes = [{"x": x, "y": y, "z": z, "dx": dx, "dy": dy, "dz": dz, "heading": h}
             for x, y, z, dx, dy, dz, h in zip(*rng.uniform(-8, 8, (3, 40)), *rng.uniform(0.5, 6, (3, 40)),
                                               rng.uniform(-4, 4, 40), strict=True)]
    ours = points_in_boxes(pts, boxes)
    ref = [int(points_in_box(Box([b["x"], b["y"], b["z"]], [b["dy"], b["dx"], b["dz"]],
                                 Quaternion(axis=[0, 0, 1], radians=b["heading"])), pts.T).sum()) for b in boxes]
    assert ours == ref and sum(ref) > 100


def test_the_same_boxes_in_the_lidar_frame_score_the_same(nusc_root, nusc_version, tmp_path):
    """Predictions moved into the build's LiDAR frame (meta.frame = 'lidar') score exactly as the global ones:
    the ground truth, its velocities and the ego origin of the range filter follow them there."""
    from nuscenes.nuscenes import NuScenes
    from pyquaternion import Quaternion

    nusc = NuScenes(version="v1.0-mini", dataroot=str(nusc_root), verbose=False)
    glob = _predictions(nusc_root, 5)
    local: dict[str, list] = {}
    for token, boxes in glob["results"].items():
        sd = nusc.get("sample_data", nusc.get("sample", token)["data"]["LIDAR_TOP"])
        cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
        ego = nusc.get("ego_pose", sd["ego_pose_token"])
        to_lidar = Quaternion(cs["rotation"]).inverse * Quaternion(ego["rotation"]).inverse
        local[token] = []
        for b in boxes:
            c = Quaternion(ego["rotation"]).inverse.rotate(np.array(b["translation"]) - ego["translation"])
            c = Quaternion(cs["rotation"]).inverse.rotate(c - np.array(cs["translation"]))
            v = to_lidar.rotate(np.array([*b["velocity"], 0.0]))
            local[token].append({**b, "translation": c.tolist(), "rotation": list((to_lidar * Quaternion(
                b["rotation"])).elements), "velocity": v[:2].tolist()})
    scores = []
    for name, data in (("g", glob), ("l", {"meta": {"frame": "lidar"}, "results": local})):
        for part in ("clean", "fog/1"):
            (tmp_path / name / part).mkdir(parents=True)
            (tmp_path / name / part / "results_nusc.json").write_text(json.dumps(data))
        scores.append({(r["corruption"], r["metric"]): r["value"] for r in score_version(nusc_version,
                                                                                      tmp_path / name).rows})
    assert scores[0].keys() == scores[1].keys() and 0 < scores[0][("clean", "NDS")] < 100
    for k, v in scores[0].items():
        assert scores[1][k] == pytest.approx(v, abs=1e-6), k

"""WOD-C (Det3D): Waymo APH on hand-computed cases, the `score` command on a written WOD-C version (task chosen
from the prediction file, bad values refused naming key and index), and Robo3D's published PV-RCNN++ row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.score import PredictionError, score_version
from bench_build.score.robo3d import robo3d_metrics
from bench_build.score.waymo_det import FrameBoxes, average_precision, iou_3d, waymo_metrics
from bench_build.stages.frame import Boxes, Frame
from tests.pipeline.score.det3d_helpers import write_scene_version
from tests.pipeline.score.units import assert_units

ROBO3D = ("fog", "wet_ground", "snow", "motion_blur", "beam_missing", "crosstalk", "incomplete_echo", "cross_sensor")
CAR = [10.0, 5.0, 1.0, 4.0, 2.0, 1.5, 0.3]  # x, y, z, length, width, height, heading
runner = CliRunner()


def _vehicles(gt: list[list[float]], levels: list[int], pred: list[list[float]], scores: list[float]) -> dict:
    f = FrameBoxes(np.array(gt, float).reshape(-1, 7), np.array(levels), np.array(pred, float).reshape(-1, 7),
                   np.array(scores, float))
    return {"Vehicle": [f]}


def _shifted(box: list[float], d: float) -> list[float]:
    """The box moved by d along its own length axis."""
    out = list(box)
    out[0] += d * math.cos(box[6])
    out[1] += d * math.sin(box[6])
    return out


def test_perfect_and_flipped_heading():
    m = waymo_metrics(_vehicles([CAR], [1], [CAR], [0.9]))
    assert m["Vehicle/AP/L2"] == pytest.approx(100) and m["Vehicle/APH/L2"] == pytest.approx(100)
    assert m["mAPH/L2"] == pytest.approx(100) and m["Pedestrian/AP/L2"] is None  # no pedestrian: not in the mean
    flipped = [*CAR[:6], CAR[6] + math.pi]  # the same box facing backwards: IoU 1, heading accuracy 0
    m = waymo_metrics(_vehicles([CAR], [1], [flipped], [0.9]))
    assert m["Vehicle/AP/L2"] == pytest.approx(100) and m["Vehicle/APH/L2"] == pytest.approx(0)
    half = [*CAR[:6], CAR[6] - math.pi / 2]  # a square box turned 90°: IoU 1, heading accuracy 1/2
    sq = [*CAR[:3], 2.0, 2.0, 1.5, CAR[6]]
    m = waymo_metrics(_vehicles([sq], [1], [sq[:6] + half[6:]], [0.9]))
    assert m["Vehicle/AP/L1"] == pytest.approx(100) and m["Vehicle/APH/L1"] == pytest.approx(50)


def test_iou_threshold_edges():
    # same size, shifted by d along the length (4 m): IoU = (4 − d)/(4 + d); 0.7 at d = 12/17 ≈ 0.7059
    for d, matched in ((0.70, True), (0.72, False)):
        pred = _shifted(CAR, d)
        assert iou_3d(np.array([pred]), np.array([CAR]))[0, 0] == pytest.approx((4 - d) / (4 + d))
        m = waymo_metrics(_vehicles([CAR], [1], [pred], [0.9]))
        assert m["Vehicle/AP/L2"] == pytest.approx(100 if matched else 0)
    # a pedestrian needs only 0.5: the same offset relative to its size still matches
    ped = [3.0, 1.0, 0.9, 0.8, 0.8, 1.8, 0.0]
    pred = _shifted(ped, 0.25)  # IoU = 0.55/1.05 ≈ 0.524
    m = waymo_metrics({"Pedestrian": [FrameBoxes(np.array([ped]), np.array([1]), np.array([pred]),
                                                 np.array([0.5]))]})
    assert m["Pedestrian/AP/L2"] == pytest.approx(100) and m["mAP/L2"] == pytest.approx(100)


def test_level_1_and_level_2():
    other = _shifted(CAR, 10.0)
    # GT: CAR is LEVEL_1 (> 5 points), `other` LEVEL_2 (≤ 5); only CAR is detected
    m = waymo_metrics(_vehicles([CAR, other], [1, 2], [CAR], [0.9]))
    assert m["Vehicle/AP/L1"] == pytest.approx(100)  # the missed LEVEL_2 box is no miss at LEVEL_1
    assert m["Vehicle/AP/L2"] == pytest.approx(50)  # recall 1/2 at precision 1
    # a false positive scoring above the true positive: precision 1/2 at recall 1, and 1 at recall 0 only
    far = _shifted(CAR, 30.0)
    m = waymo_metrics(_vehicles([CAR], [1], [CAR, far], [0.9, 0.95]))
    assert m["Vehicle/AP/L1"] == pytest.approx(50)


def test_pr_curve_interpolation_by_recall_steps():
    # 2 GT, predictions TP 0.9, FP 0.8, TP 0.7 → (p, r) = (1, .5), (.5, .5), (2/3, 1); Waymo's curve: precision
    # 2/3 from recall 1 down to 0.55, one trapezoid to (1, 0.5), then 1 down to 0: 0.3 + 0.041667 + 0.5
    other = _shifted(CAR, 10.0)
    m = waymo_metrics(_vehicles([CAR, other], [1, 1], [CAR, _shifted(CAR, 20.0), other], [0.9, 0.8, 0.7]))
    assert m["Vehicle/AP/L1"] == pytest.approx(100 * (0.45 * 2 / 3 + 0.5 * 0.05 * (2 / 3 + 1) + 0.5))
    assert average_precision(np.array([1.0, 0.5]), np.array([0.0, 0.0])) == 0.0  # recall never above 0


def test_hungarian_matching_maximises_summed_iou():
    # one prediction overlaps both ground-truth boxes, the other only the first: matching by score alone would
    # pair the first prediction with the first box and miss the second; Waymo's Hungarian matcher finds both
    a, b = CAR, _shifted(CAR, 0.9)
    p1, p2 = _shifted(CAR, 0.4), _shifted(CAR, -0.3)
    iou = iou_3d(np.array([p1, p2]), np.array([a, b]))
    assert iou[0, 0] > iou[0, 1] >= 0.7 and iou[1, 0] >= 0.7 and iou[1, 1] < 0.7
    m = waymo_metrics(_vehicles([a, b], [1, 1], [p1, p2], [0.9, 0.8]))
    assert m["Vehicle/AP/L1"] == pytest.approx(100)


def test_robo3d_reproduces_pv_rcnn_pp_on_wod_c():
    # Robo3D Tab. 25 (APH L2) → Tab. 23/24: PV-RCNN++ mCE 91.60, mRR 84.14 against CenterPoint
    per = [45.50, 67.18, 62.71, 47.35, 57.83, 64.71, 60.96, 47.77]
    acc = {("clean", 0): 67.45, **{(c, s): v for c, v in zip(ROBO3D, per, strict=True) for s in (1, 2, 3)}}
    m = robo3d_metrics(acc, "wod-c-det")
    assert m["mCE"] == pytest.approx(91.60, abs=0.011) and m["mRR"] == pytest.approx(84.14, abs=0.011)
    ces = [95.71, 88.32, 90.05, 93.24, 92.50, 88.94, 90.81, 93.23]
    rrs = [67.46, 99.60, 92.97, 70.20, 85.74, 95.94, 90.38, 70.82]
    for c, ce, rr in zip(ROBO3D, ces, rrs, strict=True):
        assert m["per_corruption"][c]["CE"] == pytest.approx(ce, abs=0.011)
        assert m["per_corruption"][c]["RR"] == pytest.approx(rr, abs=0.011)


# ---- the score command on a WOD-C version ---------------------------------------------------------------

def _frame(fid: str, n_car: int, n_ped: int) -> Frame:
    """A car (n_car points inside), a pedestrian (n_ped points) and a sign; points are x, y, z + 3 features."""
    rng = np.random.default_rng(len(fid))
    ped = [3.0, -4.0, 0.9, 0.8, 0.8, 1.8, 0.0]
    pts = [np.array(CAR[:3]) + rng.uniform(-0.4, 0.4, (n_car, 3)),
           np.array(ped[:3]) + rng.uniform(-0.2, 0.2, (n_ped, 3)), rng.uniform(20, 30, (50, 3))]
    xyz = np.concatenate(pts)
    points = np.column_stack([xyz, np.zeros((len(xyz), 3))]).astype(np.float32)
    boxes = Boxes(center=np.array([CAR[:3], ped[:3], [15.0, 0.0, 1.0]]), dims=np.array([CAR[3:6], ped[3:6],
                  [0.5, 0.5, 0.5]]), heading=np.array([CAR[6], 0.0, 0.0]),
                  cls=np.array(["Vehicle", "Pedestrian", "Sign"], dtype=object), truncated=np.zeros(3),
                  occluded=np.zeros(3, np.int64), alpha=np.zeros(3), bbox2d=np.zeros((3, 4)))
    labels = {"semantic": np.ones(len(points), np.uint32), "instance": np.zeros(len(points), np.uint32)}
    return Frame(frame_id=fid, points=points, fields=("x", "y", "z", "intensity", "ring", "elongation"),
                 intensity_scale="tanh", labels=labels, boxes=boxes)


@pytest.fixture(scope="module")
def wod_version(tmp_path_factory) -> Path:
    frames = [_frame("ctx_a-1550000000000000", 20, 3), _frame("ctx_a-1550000000100000", 20, 0)]
    parts = {("clean", 0): frames, ("fog", 2): frames}
    return write_scene_version(tmp_path_factory.mktemp("w") / "robo3d-wod-c" / "1.0.0", "robo3d-wod-c", parts,
                               {"kind": "waymo", "frame": "vehicle"}, columns=("semantic", "instance"))


def _rows(version: Path, fog_boxes: bool = True) -> list[dict]:
    ped = [3.0, -4.0, 0.9, 0.8, 0.8, 1.8, 0.0]
    rows = []
    for part in ("clean/0", "fog/2"):
        for fid in ("ctx_a-1550000000000000", "ctx_a-1550000000100000"):
            boxes = [CAR, ped] if part == "clean/0" or fog_boxes else []
            rows.append({"key": f"robo3d-wod-c/{fid}/{part}", "boxes": boxes, "scores": [0.8, 0.6][:len(boxes)],
                         "types": ["Vehicle", 2][:len(boxes)]})
    return rows


def test_score_wod_c_detection_end_to_end(wod_version, tmp_path):
    p = tmp_path / "det.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in _rows(wod_version, fog_boxes=False)))
    res = runner.invoke(app, ["score", str(wod_version), str(p), "--out", str(tmp_path / "o" / "wod")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "o" / "wod.json").read_text(),
                      parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data["metric"] == "wod-det" and "mAPH/L2" in res.output
    assert_units(data)  # mAPH and AP in percent, like every benchmark's score
    got = {(r["corruption"], r["metric"]): r["value"] for r in data["rows"]}
    # clean: every box found. The second frame's pedestrian has no point: dropped, so its prediction is a false
    # positive (precision 1/2 at recall 1 → AP 0.5). The first frame's (3 points) is LEVEL_2, and its match is a
    # true positive at LEVEL_1 too (as in Waymo's metric), so LEVEL_1 is also 0.5; no cyclist: not in the means
    assert got[("clean", "Vehicle/APH/L2")] == pytest.approx(100)
    assert got[("clean", "Pedestrian/AP/L2")] == pytest.approx(50)
    assert got[("clean", "Pedestrian/AP/L1")] == pytest.approx(50) and got[("clean", "Cyclist/AP/L2")] is None
    assert got[("clean", "mAPH/L2")] == pytest.approx(75) and got[("fog", "mAPH/L2")] == pytest.approx(0)
    assert got[("fog", "Pedestrian/AP/L1")] is None  # nothing detected, no LEVEL_1 pedestrian: nothing to recall
    assert "no mCE" in data["summary"]["note"]
    # the same version given point labels is scored as segmentation
    seg = tmp_path / "seg.jsonl"
    n = {"ctx_a-1550000000000000": 73, "ctx_a-1550000000100000": 70}  # points per frame
    seg.write_text("".join(json.dumps({"key": r["key"], "labels": [1] * n[r["key"].split("/")[1]]}) + "\n"
                           for r in _rows(wod_version)))
    assert score_version(wod_version, seg).metric == "robo3d-seg"


def test_score_wod_c_refuses_ambiguous_and_bad_values(wod_version, tmp_path):
    rows = _rows(wod_version)
    p = tmp_path / "both.jsonl"
    p.write_text("".join(json.dumps({**r, "labels": [1]}) + "\n" for r in rows))
    res = runner.invoke(app, ["score", str(wod_version), str(p)])
    assert res.exit_code == 2 and "both 'labels'" in res.output
    for change, message in (({"scores": [0.8, 1.5]}, r"scores\[1\] is 1.5, not a number in \[0, 1\]"),
                            ({"scores": [0.8, None]}, r"scores\[1\] is (None|nan)"),
                            ({"boxes": [CAR, [1, 2, 3, 1, 1, 1, "x"]]}, r"boxes\[1\]\[6\] is 'x'"),
                            ({"types": ["Vehicle", "Sign"]}, r"types\[1\] is 'Sign'")):
        bad = [{**rows[0], **change}, *rows[1:]]
        p.write_text("".join(json.dumps(r) + "\n" for r in bad))
        with pytest.raises(PredictionError, match=message):
            score_version(wod_version, p)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    res = runner.invoke(app, ["score", str(wod_version), str(p)])
    assert res.exit_code == 2 and "1 of 4 examples have no prediction" in res.output


def test_an_integer_beyond_a_float_is_not_a_finite_box_value(wod_version, tmp_path):
    """JSON integers have any number of digits: one past ±1.8e308 made math.isfinite raise OverflowError, a
    traceback; it is refused as not finite, named as such rather than in its 400 digits."""
    rows = _rows(wod_version)
    p = tmp_path / "det.jsonl"
    for change, message in (({"boxes": [CAR, [1, 2, 3, 1, 1, 1, 10**400]]}, "boxes[1][6]"),
                            ({"scores": [0.8, -(10**400)]}, "scores[1]")):
        p.write_text("".join(json.dumps(r) + "\n" for r in [{**rows[0], **change}, *rows[1:]]))
        res = runner.invoke(app, ["score", str(wod_version), str(p)], terminal_width=400)
        assert res.exit_code == 2, res.output
        assert res.output.startswith(f"error: {p}: key '{rows[0]['key']}': {message} is an integer beyond "
                                     "±1.8e308, not a"), res.output


def test_measurements_equal_a_brute_force_matching_at_every_cutoff():
    """The per-cutoff counts (matched once per number of admissible predictions kept, IoU only for touching
    boxes) equal a plain Hungarian matching of the full IoU matrix at each of the 101 cutoffs."""
    from scipy.optimize import linear_sum_assignment

    from bench_build.score.kitti_boxes import KittiObjects, box_overlaps
    from bench_build.score.waymo_det import SCORE_CUTOFFS, heading_accuracy, measurements

    def kitti(x):
        n, z = len(x), np.zeros(len(x))
        return KittiObjects(np.full(n, "b", dtype=object), z, z, z, np.zeros((n, 4)), x[:, [5, 4, 3]],
                            np.stack([x[:, 0], x[:, 2] + x[:, 5] / 2, x[:, 1]], 1), -x[:, 6], z)

    rng = np.random.default_rng(7)
    frames = []
    for _ in range(6):
        gt = np.column_stack([rng.uniform(-8, 8, (8, 2)), rng.uniform(0, 1, 8), rng.uniform(3.5, 5, 8),
                              rng.uniform(1.7, 2.2, 8), rng.uniform(1.4, 2, 8), rng.uniform(-3, 3, 8)])
        pred = gt[rng.integers(0, 8, 14)] + np.column_stack([rng.normal(0, 0.4, (14, 3)), np.zeros((14, 3)),
                                                            rng.normal(0, 0.5, 14)])
        frames.append(FrameBoxes(gt, rng.integers(1, 3, 8), pred, np.round(rng.uniform(0, 1, 14), 2)))
    got = measurements(frames, 0.5)
    for i, cut in enumerate(SCORE_CUTOFFS):
        tp = fp = fn1 = fn2 = 0
        ha = 0.0
        for f in frames:
            keep = f.score.astype(np.float32) >= cut  # the library compares float32 scores and cutoffs
            iou = box_overlaps(kitti(f.pred[keep]), kitti(f.gt), "3d") if keep.any() else np.zeros((0, len(f.gt)))
            r, c = linear_sum_assignment(np.where(iou >= 0.5, iou, 0), maximize=True)
            good = iou[r, c] >= 0.5
            r, c = r[good], c[good]
            tp, fp = tp + len(r), fp + int(keep.sum()) - len(r)
            missed = np.ones(len(f.gt), bool)
            missed[c] = False
            fn1, fn2 = fn1 + int((missed & (f.gt_level == 1)).sum()), fn2 + int(missed.sum())
            ha += float(heading_accuracy(f.pred[keep][r, 6], f.gt[c, 6]).sum())
        assert (got["tp"][i], got["fp"][i], got["fn1"][i], got["fn2"][i]) == (tp, fp, fn1, fn2), cut
        assert got["ha"][i] == pytest.approx(ha)
    assert got["tp"][0] > 0 and got["fp"][0] > 0


def test_equals_waymos_own_metric_on_recorded_cases():
    """AP and APH of 10 seeded 4-frame cases (all three classes, both levels, flipped headings, misses, false
    positives) equal what waymo-open-dataset's detection_metrics op computed for them (recorded by
    waymo_reference.py in a separate Python 3.10 env; the package does not install beside this project)."""
    data = json.loads((Path(__file__).parent / "data" / "waymo_official_reference.json").read_text())
    names = {1: "Vehicle", 2: "Pedestrian", 4: "Cyclist"}
    compared = 0
    for frames, official in zip(data["cases"], data["official"], strict=True):
        by: dict[str, list[FrameBoxes]] = {}
        for f in frames:
            for t, cls in names.items():
                g = [x for x in f["gt"] if x[1] == t]
                p = [x for x in f["pred"] if x[1] == t]
                by.setdefault(cls, []).append(FrameBoxes(
                    np.array([x[0] for x in g], float).reshape(-1, 7), np.array([x[2] for x in g], int),
                    np.array([x[0] for x in p], float).reshape(-1, 7), np.array([x[2] for x in p], float)))
        ours = waymo_metrics(by)
        for cls in names.values():
            for level in (1, 2):
                ap, aph = official[f"OBJECT_TYPE_TYPE_{cls.upper()}_LEVEL_{level}"]
                assert ours[f"{cls}/AP/L{level}"] == pytest.approx(100 * ap, abs=1e-3), (cls, level)
                assert ours[f"{cls}/APH/L{level}"] == pytest.approx(100 * aph, abs=1e-3), (cls, level)
                compared += 1
    assert compared == 60

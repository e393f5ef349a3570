"""KITTI AP: overlaps, difficulty filters and AP against values derived by hand from the devkit's rules."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.score.kitti_boxes import KittiFormatError, box_overlaps, frame_overlaps, parse_kitti_objects
from bench_build.score.kitti_eval import evaluate, get_thresholds


def obj(name="Car", x=0.0, y=1.5, z=20.0, h=1.5, w=2.0, length=4.0, ry=0.0, score=None, top=100.0, bottom=150.0,
        occ=0, trunc=0.0) -> str:
    line = f"{name} {trunc} {occ} 0 100 {top} 200 {bottom} {h} {w} {length} {x} {y} {z} {ry}"
    return line + (f" {score}" if score is not None else "")


def objs(*lines: str, scored: bool = False):
    return parse_kitti_objects("\n".join(lines), "test", need_score=scored)


def test_overlaps_hand_computed():
    gt = objs(obj())
    shifted_x = objs(obj(x=1.0, score=1))  # 3 × 2 overlap of two 4 × 2 footprints → 6 / 10
    assert box_overlaps(shifted_x, gt, "bev")[0, 0] == pytest.approx(0.6)
    assert box_overlaps(shifted_x, gt, "3d")[0, 0] == pytest.approx(0.6)
    lifted = objs(obj(y=2.0, score=1))  # camera y points down: 1.0 of 1.5 m height shared → 8 / (24 − 8)
    assert box_overlaps(lifted, gt, "bev")[0, 0] == pytest.approx(1.0)
    assert box_overlaps(lifted, gt, "3d")[0, 0] == pytest.approx(0.5)
    square = objs(obj(w=2.0, length=2.0))
    turned = objs(obj(w=2.0, length=2.0, ry=np.pi / 2, score=1))
    assert box_overlaps(turned, square, "bev")[0, 0] == pytest.approx(1.0)
    diamond = objs(obj(w=2.0, length=2.0, ry=np.pi / 4, score=1))  # octagon 2(√2 − 1)·a² of two a² squares
    inter = 2 * (np.sqrt(2) - 1) * 4
    assert box_overlaps(diamond, square, "bev")[0, 0] == pytest.approx(inter / (8 - inter))
    # a box 4 m long along camera x at ry = 0 is 4 m along z at ry = π/2
    long_x = objs(obj(length=4.0, w=1.0))
    long_z = objs(obj(length=4.0, w=1.0, ry=np.pi / 2, score=1))
    assert box_overlaps(long_z, long_x, "bev")[0, 0] == pytest.approx(1.0 / 7.0)
    assert box_overlaps(objs(), gt, "3d").shape == (0, 1)


def _random_frame(rng, n: int, scored: bool):
    # boxes crowded into a 6 m square so that many pairs overlap, touch or nearly touch
    return objs(*[obj(x=rng.uniform(-3, 3), z=20 + rng.uniform(-3, 3), y=1.5 + rng.uniform(-1, 1),
                      h=rng.uniform(0.5, 2), w=rng.uniform(0.5, 2.5), length=rng.uniform(0.5, 5),
                      ry=rng.uniform(-4, 4), score=rng.random() if scored else None) for _ in range(n)],
                scored=scored)


def test_batched_overlaps_are_bit_identical_to_per_frame_ones():
    rng = np.random.default_rng(7)
    dt = [_random_frame(rng, int(rng.integers(0, 6)), True) for _ in range(60)]
    gt = [_random_frame(rng, int(rng.integers(0, 6)), False) for _ in range(60)]
    batched = frame_overlaps(dt, gt)
    for m in ("3d", "bev"):
        ref = np.concatenate([box_overlaps(d, g, m).ravel() for d, g in zip(dt, gt, strict=True)])
        assert (ref > 0).sum() > 50 and (ref == 0).sum() > 50  # both kinds of pair are exercised
        np.testing.assert_array_equal(batched[m].flat, ref)
        assert batched[m].off[-1] == len(ref)


def test_get_thresholds_picks_one_score_per_recall_step():
    # 80 ground truths, 80 true positives: one threshold per 1/40 of recall → 41 of them (devkit rule)
    scores = np.linspace(1.0, 0.2, 80)
    thr = get_thresholds(scores.copy(), 80)
    assert len(thr) == 41 and thr[0] == 1.0 and thr[-1] == pytest.approx(0.2)


def _frames(n_gt: int, tp_scores: list[float], fp_scores: list[float]):
    """n_gt frames with one easy car each; the first len(tp_scores) detected exactly; FPs far away."""
    gts, dts = [], []
    for i in range(n_gt):
        gts.append(objs(obj()))
        lines = []
        if i < len(tp_scores):
            lines.append(obj(score=tp_scores[i]))
        if i < len(fp_scores):
            lines.append(obj(z=50.0, score=fp_scores[i]))
        dts.append(objs(*lines, scored=True))
    return gts, dts


def test_ap_with_false_positives_hand_derived():
    # 40 cars, all detected (scores 1.00 … 0.61), 10 false positives scored 0.955, 0.855, …, 0.055
    tps = [1.0 - 0.01 * i for i in range(40)]
    fps = [0.955 - 0.1 * i for i in range(10)]
    res = evaluate(*_frames(40, tps, fps), classes=("Car",))
    # one threshold per true positive (recall step 1/40 = 1 car); precision at the i-th: (i+1)/(i+1+#FP above)
    prec = [(i + 1) / (i + 1 + sum(f >= tps[i] for f in fps)) for i in range(40)]
    interp = [max(prec[i:]) for i in range(40)] + [0.0]  # the 41st recall point is never reached
    expect_r40 = 100 * sum(interp[1:]) / 40
    expect_r11 = 100 * sum(interp[0::4]) / 11
    for metric in ("3d", "bev"):
        for diff in ("easy", "moderate", "hard"):
            assert res["Car"][metric][diff]["AP_R40"] == pytest.approx(expect_r40)
            assert res["Car"][metric][diff]["AP_R11"] == pytest.approx(expect_r11)
    # hand check of the first few: FP 0.955 sits just above the 6th TP (0.95) → 6 TP, 1 FP there
    assert prec[:7] == [1, 1, 1, 1, 1, 6 / 7, 7 / 8]


def test_ap_half_missed():
    res = evaluate(*_frames(40, [0.9] * 20, []), classes=("Car",))
    # 20 thresholds at precision 1, recall points 21…40 unreached: (20 − 1) / 40
    assert res["Car"]["3d"]["moderate"]["AP_R40"] == pytest.approx(100 * 19 / 40)


def test_difficulty_filters_and_neighbour_classes():
    # 40 easy cars detected; + 40 cars 30 px tall (not easy, moderate), undetected
    gts, dts = _frames(40, [0.9] * 40, [])
    gts = [objs(obj(), obj(x=10.0, top=100, bottom=130)) for _ in range(40)]
    res = evaluate(gts, dts, classes=("Car",))
    assert res["Car"]["3d"]["easy"]["num_gt"] == 40 and res["Car"]["3d"]["moderate"]["num_gt"] == 80
    assert res["Car"]["3d"]["easy"]["AP_R40"] == pytest.approx(100 * 39 / 40)
    assert res["Car"]["3d"]["moderate"]["AP_R40"] == pytest.approx(100 * 39 / 40 / 2, abs=1.3)
    # a Car detection on a Van is neither a TP nor an FP for Car; a heavily occluded car only counts as hard
    gts = [objs(obj(), obj(name="Van", x=10.0), obj(x=-10.0, occ=2)) for _ in range(40)]
    dts = [objs(obj(score=0.9), obj(x=10.0, score=0.95), obj(x=-10.0, score=0.8), scored=True) for _ in range(40)]
    res = evaluate(gts, dts, classes=("Car",))
    assert res["Car"]["bev"]["easy"]["AP_R40"] == pytest.approx(100 * 39 / 40)  # van ignored, occluded ignored
    assert res["Car"]["bev"]["hard"]["num_gt"] == 80
    # wrong class: pedestrians predicted on cars are FPs for Pedestrian and misses for Car
    dts = [objs(obj(name="Pedestrian", score=0.9), scored=True) for _ in range(40)]
    res = evaluate([objs(obj()) for _ in range(40)], dts, classes=("Car", "Pedestrian"))
    assert res["Car"]["3d"]["easy"]["AP_R40"] == 0.0 and res["Pedestrian"]["3d"]["easy"]["AP_R40"] == 0.0


def test_iou_threshold_is_strict_and_per_class():
    # BEV IoU 0.6 < 0.7 for Car; a pedestrian at IoU 0.6 ≥ 0.5 matches
    gts = [objs(obj()) for _ in range(40)]
    dts = [objs(obj(x=1.0, score=0.9), scored=True) for _ in range(40)]
    assert evaluate(gts, dts, classes=("Car",))["Car"]["bev"]["easy"]["AP_R40"] == 0.0
    gts = [objs(obj(name="Pedestrian")) for _ in range(40)]
    dts = [objs(obj(name="Pedestrian", x=1.0, score=0.9), scored=True) for _ in range(40)]
    assert evaluate(gts, dts, classes=("Pedestrian",))["Pedestrian"]["bev"]["easy"]["AP_R40"] == \
        pytest.approx(100 * 39 / 40)


def test_bad_result_lines_are_named():
    with pytest.raises(KittiFormatError, match="line 2: 15 fields, expected 16"):
        parse_kitti_objects(obj(score=1) + "\n" + obj(), "000001.txt", need_score=True)
    with pytest.raises(KittiFormatError, match="line 1: NaN/inf"):
        parse_kitti_objects(obj(score="nan"), "000001.txt", need_score=True)
    with pytest.raises(KittiFormatError, match=r"^000001.txt: line 1: field 16 \(score\) is 'high', not a number$"):
        parse_kitti_objects(obj(score="high"), "000001.txt", need_score=True)

"""Li et al.'s bug rates on boxes whose overlaps are known by hand, and CR/mCR from known rates."""

from __future__ import annotations

import math

import pytest

from bench_build.score.bug_rates import ALL, FC, FD, MD, TD, bug_rates, classify, corruption_risk
from bench_build.score.kitti_boxes import frame_overlaps, parse_kitti_objects


def box(name="Car", x=0.0, y=1.5, z=20.0, h=1.5, w=2.0, length=4.0, score=None) -> str:
    line = f"{name} 0 0 0 100 100 200 150 {h} {w} {length} {x} {y} {z} 0"
    return line + (f" {score}" if score is not None else "")


def frame(*lines: str, scored: bool = False):
    return parse_kitti_objects("\n".join(lines), "test", need_score=scored)


DONTCARE = "DontCare -1 -1 -10 500 170 550 200 -1 -1 -1 -1000 -1000 -1000 -10"

# frame 0: a Car (x −2…2), a Pedestrian (0.8 × 0.6 at x = 10) and a DontCare region
GT0 = frame(box(), box("Pedestrian", x=10, h=1.5, w=0.6, length=0.8), DONTCARE)
# frame 1: a Car (x −2…2) and a Van (x 2.5…6.5)
GT1 = frame(box(), box("Van", x=4.5))
DT0 = frame(box(score=0.9),                                   # on the Car: IoU 1 → TD
            box(x=1.0, score=0.8),                            # 3 × 2 of 4 × 2 on the Car: IoU 6/10 → FD
            box(x=10.0, score=0.7),                           # covers only the Pedestrian → FC
            box(x=-30.0, score=0.6),                          # overlaps nothing → MD
            box(y=-2.0, score=0.5),                           # above the Car: BEV IoU 1, 3D IoU 0 → MD
            box("Pedestrian", x=10, h=1.5, w=0.6, length=0.8, score=0.9),  # on the Pedestrian → TD
            scored=True)
# Car at x 1…5: IoU 2/14 with the Car, 5/11 with the Van (the maximum) → FC
DT1 = frame(box(x=3.0, score=0.4), scored=True)
DT2 = frame(box(x=8.0, score=0.3), scored=True)  # a frame without ground truth → MD
GT2 = frame()


def test_each_detection_gets_its_category():
    dt, gt = [DT0, DT1, DT2], [GT0, GT1, GT2]
    ov = frame_overlaps(dt, gt)
    assert classify(dt, gt, ov["3d"]).tolist() == [TD, FD, FC, MD, MD, TD, FC, MD]
    # in BEV the lifted box sits on the Car
    assert classify(dt, gt, ov["bev"]).tolist() == [TD, FD, FC, MD, TD, TD, FC, MD]


def test_rates_per_class_and_pooled():
    dt, gt = [DT0, DT1, DT2], [GT0, GT1, GT2]
    br = bug_rates(dt, gt, frame_overlaps(dt, gt)["3d"])
    car = br["Car"]
    assert (car["N_det"], car["N_TD"], car["N_FC"], car["N_FD"], car["N_MD"]) == (7, 1, 2, 1, 3)
    assert car["BR_TD"] == pytest.approx(100 / 7) and car["BR_FC"] == pytest.approx(200 / 7)
    assert car["BR_FD"] == pytest.approx(100 / 7) and car["BR_MD"] == pytest.approx(300 / 7)
    assert br["Pedestrian"]["BR_TD"] == 100 and br["Pedestrian"]["N_det"] == 1
    assert br["Cyclist"]["N_det"] == 0 and math.isnan(br["Cyclist"]["BR_TD"])
    assert br[ALL]["N_det"] == 8 and br[ALL]["N_TD"] == 2
    assert sum(car[f"BR_{b}"] for b in ("TD", "FC", "FD", "MD")) == pytest.approx(100)


def test_min_score_drops_low_detections():
    dt, gt = [DT0, DT1, DT2], [GT0, GT1, GT2]
    car = bug_rates(dt, gt, frame_overlaps(dt, gt)["3d"], min_score=0.55)["Car"]
    assert (car["N_det"], car["N_TD"], car["N_FD"], car["N_FC"], car["N_MD"]) == (4, 1, 1, 1, 1)


def test_iou_at_the_threshold_is_not_a_true_detection():
    gt = [frame(box())]
    # shifted by d along x: IoU = 2(4 − d) / (16 − 2(4 − d)) = 0.5 at d = 4/3
    dt = [frame(box("Pedestrian", x=4 / 3, score=1.0), box(x=4 / 3, score=1.0), scored=True)]
    ov = frame_overlaps(dt, gt)["3d"]
    assert ov.flat[0] == pytest.approx(0.5)
    # a Pedestrian box on a Car is FC whatever the IoU; the Car at IoU 0.5 ≤ 0.7 is FD, and TD with threshold 0.49
    assert classify(dt, gt, ov).tolist() == [FC, FD]
    assert classify(dt, gt, ov, {"Car": 0.49}).tolist() == [FC, TD]


def test_corruption_risk_from_known_rates():
    def rates(td, fc, fd, md):
        return {"Car": {"N_det": 100, "BR_TD": td, "BR_FC": fc, "BR_FD": fd, "BR_MD": md}}

    br = {("clean", 0): rates(50, 1, 10, 39), ("fog", 1): rates(40, 1, 20, 39), ("fog", 2): rates(30, 3, 20, 47),
          ("snow", 1): rates(50, 1, 10, 39)}
    risk = corruption_risk(br)["Car"]
    assert risk["per_corruption"]["fog"]["CR_by_severity"][2] == {"CR_TD": -20, "CR_FC": 2, "CR_FD": 10, "CR_MD": 8}
    assert risk["per_corruption"]["fog"]["CR_TD"] == -15 and risk["per_corruption"]["fog"]["CR_FD"] == 10
    assert risk["per_corruption"]["snow"]["CR_MD"] == 0
    assert risk["mCR_TD"] == pytest.approx(-10) and risk["mCR_FD"] == pytest.approx(20 / 3)
    assert risk["mCR_FC"] == pytest.approx(2 / 3) and risk["mCR_MD"] == pytest.approx(8 / 3)
    assert risk["BR_clean"]["BR_TD"] == 50
    with pytest.raises(ValueError, match="clean"):
        corruption_risk({("fog", 1): rates(1, 1, 1, 97)})


def test_corruption_risk_of_computed_rates():
    """Clean: the Car found and one stray box (TD 50, MD 50); corrupted: the box slid to IoU 0.6 (FD 50)."""
    gt = [frame(box())]
    clean = [frame(box(score=0.9), box(x=-30, score=0.5), scored=True)]
    slid = [frame(box(x=1.0, score=0.9), box(x=-30, score=0.5), scored=True)]
    br = {("clean", 0): bug_rates(clean, gt, frame_overlaps(clean, gt)["3d"]),
          ("shear", 1): bug_rates(slid, gt, frame_overlaps(slid, gt)["3d"])}
    car = corruption_risk(br)["Car"]
    assert (car["mCR_TD"], car["mCR_FD"], car["mCR_FC"], car["mCR_MD"]) == (-50, 50, 0, 0)

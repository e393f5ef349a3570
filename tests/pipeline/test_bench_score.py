"""The score bench measures what it says: synthetic frames at KITTI's label density, a version `score` reads
as a real kitti-c build, and an extrapolation that counts rounds of worker processes."""

import numpy as np
import pytest

from bench_build.bench.score import KITTI_C_PARTITIONS, RATES, bench_score, synthetic_frame, write_synthetic_version
from bench_build.score import score_version
from bench_build.score.kitti_boxes import parse_kitti_objects


def test_synthetic_frames_have_kittis_density():
    rng = np.random.default_rng(1)
    texts = [synthetic_frame(rng) for _ in range(2000)]
    gt = [parse_kitti_objects(g, "gt", need_score=False) for g, _ in texts]
    dt = [parse_kitti_objects(d, "dt", need_score=True) for _, d in texts]
    cars = np.mean([(g.name == "Car").sum() for g in gt])
    assert cars == pytest.approx(RATES["Car"], rel=0.05)
    assert np.mean([len(g) for g in gt]) == pytest.approx(sum(RATES.values()) + 1.51, rel=0.05)
    assert 9 < np.mean([len(d) for d in dt]) < 12
    # detections carry a score and a 2D box tall enough for KITTI's difficulty filter on near objects
    assert all(len(d) == 0 or ((d.score > 0) & (d.score <= 1)).all() for d in dt)
    assert max(float((d.bbox[:, 3] - d.bbox[:, 1]).max(initial=0)) for d in dt) > 40


def test_synthetic_version_scores_like_a_build(tmp_path):
    version, preds, density = write_synthetic_version(tmp_path, partitions=3, frames=40)
    rep = score_version(version, preds, workers=1)
    parts = {(r["corruption"], r["severity"]) for r in rep.rows}
    assert parts == {("clean", 0), ("gaussian_rad", 1), ("snow", 1)}
    ap = {(r["corruption"], r["severity"]): r["value"] for r in rep.rows if r["metric"] == "Car/3d/moderate/AP_R40"}
    assert ap[("clean", 0)] > 0 and len(set(ap.values())) == 1  # every partition holds the same frames
    assert "bug_rates" in rep.summary and density["gt_per_frame"] > 0


def test_extrapolation_counts_rounds_of_workers(tmp_path):
    r = bench_score(partitions=2, workers=2, frames=20)
    assert r["workers"] == 2 and r["full_wall_s"] == pytest.approx(r["wall_s"] * -(-KITTI_C_PARTITIONS // 2))
    assert r["full_cpu_s"] == pytest.approx(r["cpu_s"] / 2 * KITTI_C_PARTITIONS)

"""Regenerates ``data/waymo_official_reference.json``: seeded WOD detection cases and the AP/APH that Waymo's own
metric (the ``detection_metrics`` op of ``waymo-open-dataset-tf-2-12-0`` 1.6.7) gives for them.

The official package does not install beside this project's dependencies, so it runs in a separate
Python 3.10 environment and this script has two halves::

    python tests/pipeline/score/waymo_reference.py cases OUT.json          # the project's env: the cases
    /path/py310/bin/pip install waymo-open-dataset-tf-2-12-0==1.6.7 'tensorflow==2.13.*'
    /path/py310/bin/python tests/pipeline/score/waymo_reference.py official OUT.json   # adds "official"

The op is configured as the tool ``compute_detection_metrics_main`` configures it (OBJECT_TYPE breakdown,
LEVEL_1 and LEVEL_2, Hungarian matcher, IoU 0.7/0.5/0.5, 3D boxes, score cutoffs 0, 0.01, …, 1), and is
given each box's difficulty level directly.
"""

from __future__ import annotations

import json
import sys

import numpy as np

TYPES = {1: (4.5, 2.0, 1.6), 2: (0.9, 0.9, 1.8), 4: (1.8, 0.7, 1.7)}  # Waymo type id → typical l, w, h


def make_case(seed: int, frames: int = 4) -> list[dict]:
    """Frames of ground truth ``(box, type, level)`` and predictions ``(box, type, score)``: jittered boxes (a
    quarter of them facing backwards), missed boxes, and false positives; values rounded to 4 decimals."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(frames):
        gts, preds = [], []
        for t, n in ((1, 6), (2, 4), (4, 2)):
            size = np.array(TYPES[t])
            for _ in range(n):
                g = np.r_[rng.uniform(-20, 20, 2), rng.uniform(0, 1), size * rng.uniform(0.9, 1.1, 3),
                          rng.uniform(-np.pi, np.pi)]
                gts.append((np.round(g, 4).tolist(), t, int(rng.integers(1, 3))))
                if rng.random() < 0.8:
                    noise = np.r_[rng.normal(0, 0.15 if t == 1 else 0.08, 3), rng.normal(0, 0.05, 3),
                                  rng.normal(0, 0.05) + (np.pi if rng.random() < 0.25 else 0.0)]
                    preds.append((np.round(g + noise, 4).tolist(), t, round(float(rng.uniform(0, 1)), 3)))
            for _ in range(2):
                fp = np.r_[rng.uniform(-20, 20, 2), rng.uniform(0, 1), size, rng.uniform(-3, 3)]
                preds.append((np.round(fp, 4).tolist(), t, round(float(rng.uniform(0, 1)), 3)))
        out.append({"gt": gts, "pred": preds})
    return out


def _official(frames: list[dict]) -> dict[str, list[float]]:
    """``{breakdown name: [AP, APH]}`` from the official op (reference environment only)."""
    import tensorflow as tf
    from waymo_open_dataset import label_pb2
    from waymo_open_dataset.metrics.ops import py_metrics_ops
    from waymo_open_dataset.metrics.python import config_util_py
    from waymo_open_dataset.protos import breakdown_pb2, metrics_pb2

    cfg = metrics_pb2.Config()
    cfg.breakdown_generator_ids.append(breakdown_pb2.Breakdown.OBJECT_TYPE)
    levels = cfg.difficulties.add()
    levels.levels.extend([label_pb2.Label.LEVEL_1, label_pb2.Label.LEVEL_2])
    cfg.matcher_type = metrics_pb2.MatcherProto.TYPE_HUNGARIAN
    cfg.iou_thresholds.extend([0.0, 0.7, 0.5, 0.5, 0.5])
    cfg.box_type = label_pb2.Label.Box.TYPE_3D
    cfg.score_cutoffs.extend([i * 0.01 for i in range(100)] + [1.0])
    pred = [(b, t, s, i) for i, f in enumerate(frames) for b, t, s in f["pred"]]
    gt = [(b, t, lvl, i) for i, f in enumerate(frames) for b, t, lvl in f["gt"]]
    r = py_metrics_ops.detection_metrics(
        prediction_bbox=tf.constant([p[0] for p in pred], tf.float32),
        prediction_type=tf.constant([p[1] for p in pred], tf.uint8),
        prediction_score=tf.constant([p[2] for p in pred], tf.float32),
        prediction_frame_id=tf.constant([p[3] for p in pred], tf.int64),
        prediction_overlap_nlz=tf.zeros(len(pred), tf.bool),
        ground_truth_bbox=tf.constant([g[0] for g in gt], tf.float32),
        ground_truth_type=tf.constant([g[1] for g in gt], tf.uint8),
        ground_truth_frame_id=tf.constant([g[3] for g in gt], tf.int64),
        ground_truth_difficulty=tf.constant([g[2] for g in gt], tf.uint8), config=cfg.SerializeToString())
    names = config_util_py.get_breakdown_names_from_config(cfg)
    return {n: [float(r[0].numpy()[i]), float(r[1].numpy()[i])] for i, n in enumerate(names)}


def main(argv: list[str]) -> None:
    what, path = argv[1], argv[2]
    if what == "cases":
        data = {"source": "waymo-open-dataset-tf-2-12-0 1.6.7, py_metrics_ops.detection_metrics",
                "cases": [make_case(seed) for seed in range(10)]}
    else:
        with open(path) as f:
            data = json.load(f)
        data["official"] = [_official(c) for c in data["cases"]]
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv)

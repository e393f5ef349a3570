"""Detection scoring on KITTI-format benchmarks (Li et al. KITTI-C and Robo3D KITTI-C).

Predictions are KITTI result files, one ``<frame_id>.txt`` per frame (``label_2`` fields + score;
an empty file = no detections; the 2D box must be the projected image box, as OpenPCDet and
mmdetection3d write it, because KITTI's difficulty filter reads its height), one directory per
partition::

    PRED/clean/                      (or PRED/clean/0/)
    PRED/<corruption>/<severity>/    severity as a number (1…S) or the recipe's name (light, …)

A directory may hold the files directly or in a ``data/`` subdirectory (OpenPCDet's
``final_result/data``). Ground truth is the version's own boxes, written as ``label_2`` text, so
object-level corruptions are scored against the boxes they moved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.schema import decode_boxes, decode_calib
from pipeline.score.kitti_eval import KittiFormatError, KittiObjects, parse_kitti_objects, read_kitti_objects
from pipeline.score.predictions import FIRST, PredictionError
from pipeline.score.truth import Partition, iter_columns


def truth_by_partition(version_dir: str | Path) -> dict[Partition, dict[str, KittiObjects]]:
    from pipeline.sources.kitti import format_labels

    out: dict[Partition, dict[str, KittiObjects]] = {}
    for part, cols in iter_columns(version_dir, ["frame_id", "boxes", "calib"]):
        frames = out.setdefault(part, {})
        for fid, boxes, calib in zip(cols["frame_id"], cols["boxes"], cols["calib"], strict=True):
            b, c = decode_boxes(boxes), decode_calib(calib)
            text = "" if b is None or c is None else format_labels(b, c)
            frames[fid] = parse_kitti_objects(text, f"{version_dir}: {fid}", need_score=False)
    return out


def partition_dir(root: Path, part: Partition, severity_names: list[str]) -> Path:
    """The directory holding ``part``'s result files under ``root`` (raises naming what was looked for)."""
    if part.corruption == "clean":
        candidates = [root / "clean" / "0", root / "clean"]
    else:
        candidates = [root / part.corruption / str(part.severity)]
        if severity_names and 1 <= part.severity <= len(severity_names):
            candidates.append(root / part.corruption / severity_names[part.severity - 1])
    for c in candidates:
        for d in (c / "data", c):
            if d.is_dir() and any(d.glob("*.txt")):
                return d
    for c in candidates:
        if c.is_dir():
            return c / "data" if (c / "data").is_dir() else c
    raise PredictionError(f"{root}: no result directory for {part.corruption}/{part.severity} "
                          f"(looked for {', '.join(str(c) for c in candidates)})")


def read_detections(root: str | Path, part: Partition, frame_ids: list[str],
                    severity_names: list[str]) -> list[KittiObjects]:
    d = partition_dir(Path(root), part, severity_names)
    present = {p.stem for p in d.glob("*.txt")}
    missing = [f for f in frame_ids if f not in present]
    if missing:
        raise PredictionError(f"{d}: {len(missing)} of {len(frame_ids)} frames have no result file, e.g. "
                              + ", ".join(f"{m}.txt" for m in missing[:FIRST]))
    extra = sorted(present - set(frame_ids))
    if extra:
        raise PredictionError(f"{d}: {len(extra)} result files are not frames of this version "
                              f"(another benchmark or split?): " + ", ".join(f"{e}.txt" for e in extra[:FIRST]))
    out = []
    for f in frame_ids:
        try:
            out.append(read_kitti_objects(d / f"{f}.txt", need_score=True))
        except KittiFormatError as e:
            raise PredictionError(str(e)) from None
    dets = sum(len(o) for o in out)
    if dets and all((o.bbox[:, 3] - o.bbox[:, 1] <= 0).all() for o in out if len(o)):
        raise PredictionError(f"{d}: every detection has a zero-height 2D box; KITTI's evaluation ignores "
                              "detections under 25/40 px, so write the projected image box (OpenPCDet does)")
    return out


def score_detection(version_dir: str | Path, pred_root: str | Path, *, severity_names: list[str],
                    classes: tuple[str, ...]) -> dict[Partition, dict[str, Any]]:
    """KITTI AP of every partition: ``{Partition: evaluate(...) result}``."""
    from pipeline.score.kitti_eval import evaluate

    truth = truth_by_partition(version_dir)
    out = {}
    for part in sorted(truth, key=lambda p: (p.corruption != "clean", p.corruption, p.severity)):
        frame_ids = sorted(truth[part])
        dets = read_detections(pred_root, part, frame_ids, severity_names)
        out[part] = evaluate([truth[part][f] for f in frame_ids], dets, classes=classes)
    return out

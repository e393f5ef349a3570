"""Robo3D's detection sets on nuScenes-C and WOD-C: which task a prediction file is for, and the per-partition
accuracy (NDS, mAPH at LEVEL_2) with mCE/mRR against the paper's baseline (CenterPoint-PP, CenterPoint).

A robo3d-nuscenes-c or robo3d-wod-c build carries both point labels and boxes, so it is a segmentation and a
detection benchmark at once; the prediction file says which is meant (``--metric`` can say it instead):

| predictions                                                            | metric                      |
|------------------------------------------------------------------------|-----------------------------|
| nuScenes-C: a directory of results JSON, or one ``{"results": …}`` file | ``nuscenes-det`` (NDS)      |
| WOD-C: JSON Lines / Parquet rows with ``boxes`` (`waymo_det`)          | ``wod-det`` (mAPH L2)       |
| JSON Lines / Parquet rows with ``labels``                              | ``robo3d-seg`` (mIoU)       |

Anything else, or rows carrying both ``labels`` and ``boxes``, is refused (exit 2) naming what was found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench_build.score.nuscenes_det import score_nuscenes
from bench_build.score.partial import summary_note
from bench_build.score.predictions import ONE_PER_LINE, PredictionError, loads
from bench_build.score.robo3d import robo3d_metrics
from bench_build.score.validate import ScoreError
from bench_build.score.waymo_det import score_waymo

DET_METRICS = {"nuscenes": "nuscenes-det", "wod": "wod-det"}
BASELINE_TABLE = {"nuscenes-det": "nuscenes-c-det", "wod-det": "wod-c-det"}
#: the columns `bench-build score` prints (the files have every per-class value too)
PRINTED = {"nuscenes-det": ("NDS", "mAP", "mATE", "mASE", "mAOE", "mAVE", "mAAE"),
           "wod-det": ("mAPH/L2", "mAP/L2", "mAPH/L1", "mAP/L1")}


def scene_set(dataset: str) -> str | None:
    """``nuscenes`` / ``wod`` for Robo3D's nuScenes-C / WOD-C builds, else None."""
    d = dataset.lower()
    if d.startswith("robo3d") and "nuscenes" in d:
        return "nuscenes"
    if d.startswith("robo3d") and ("wod" in d or "waymo" in d):
        return "wod"
    return None


def task_of(dataset: str, predictions: str | Path, metric: str | None) -> str:
    """The metric for a nuScenes-C / WOD-C build: the explicit one (``robo3d-det`` means the set's detection
    metric), else from the prediction file's content."""
    kind = scene_set(dataset)
    assert kind is not None
    det = DET_METRICS[kind]
    if metric in ("robo3d-det", det):
        return det
    if metric == "robo3d-seg":
        return metric
    if metric is not None:
        raise ScoreError(f"metric {metric!r} does not apply to {dataset}; use robo3d-seg or {det}")
    path = Path(predictions)
    if path.is_dir():
        if kind == "nuscenes":
            return det
        raise PredictionError(f"{path}: a directory; WOD-C predictions are one .jsonl or .parquet file "
                              "(rows with 'boxes' for detection, 'labels' for segmentation)")
    fields = _fields(path)
    if kind == "nuscenes" and "results" in fields and "key" not in fields:
        return det
    has_labels, has_boxes = "labels" in fields, "boxes" in fields
    if has_labels and has_boxes:
        raise PredictionError(f"{path}: rows carry both 'labels' (segmentation) and 'boxes' (detection); "
                              "write one task per file or pass --metric")
    if has_labels:
        return "robo3d-seg"
    if has_boxes and kind == "wod":
        return det
    want = ("a nuScenes results JSON ({'meta', 'results'}) or rows with 'labels'" if kind == "nuscenes"
            else "rows with 'boxes' (detection) or 'labels' (segmentation)")
    raise PredictionError(f"{path}: cannot tell the task: found fields {', '.join(sorted(fields)) or 'none'}; "
                          f"expected {want}")


def _fields(path: Path) -> set[str]:
    """Top-level keys of a JSON object file, or the union of the row fields of JSON Lines / Parquet."""
    if not path.exists():
        raise PredictionError(f"{path}: no such prediction file")
    if path.suffix in (".parquet", ".pq"):

        try:
            return set(pq.read_schema(path).names)
        except Exception as e:  # any pyarrow failure means a bad file
            raise PredictionError(f"{path}: not a readable Parquet file: {e}") from None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise PredictionError(f"{path}: not UTF-8 text (at byte {e.start}); predictions are UTF-8 JSON") from None
    try:
        whole = loads(path, text)
    except json.JSONDecodeError:
        whole = None  # JSON Lines (or not JSON: said below, naming the line)
    if isinstance(whole, dict):
        return set(whole)
    out: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = loads(path, line, lineno)
            except json.JSONDecodeError as e:
                raise PredictionError(f"{path}: line {lineno}: not JSON: {e.msg}; {ONE_PER_LINE}") from None
            if isinstance(row, dict):
                out |= set(row)
    return out


def score_det3d(report: Any, version_dir: str | Path, predictions: str | Path, severity_names: list[str],
                source_root: str | Path | None) -> None:
    """Fill ``report`` (a `ScoreReport`) with the per-partition accuracy and the Robo3D summary."""

    if report.metric == "nuscenes-det":

        per, notes = score_nuscenes(version_dir, predictions, severity_names=severity_names,
                                    source_root=source_root)
        accuracy, unit = "NDS", "NDS (nuScenes devkit, detection_cvpr_2019), percent"
    else:

        per, notes = score_waymo(version_dir, predictions)
        accuracy, unit = "mAPH/L2", "mAPH at LEVEL_2 (Vehicle, Pedestrian, Cyclist), percent"
    for (part, values) in per.items():
        for name, v in values.items():
            report.add(part.corruption, part.severity, name, v)
    acc = {(p.corruption, p.severity): v[accuracy] for p, v in per.items()}
    summary: dict[str, Any]
    if any(v is None for v in acc.values()):
        summary = {"clean": acc.get(("clean", 0)), "note": f"no mCE/mRR: {accuracy} is not computed"}
    else:
        try:
            summary = robo3d_metrics(acc, BASELINE_TABLE[report.metric])
        except ScoreError as e:
            summary = {"clean": acc.get(("clean", 0)), "note": summary_note(version_dir, acc, "mCE/mRR", e)}
    summary["accuracy"] = unit
    if notes:
        summary["note"] = "; ".join([*([summary["note"]] if "note" in summary else []), *notes])
    report.summary = summary

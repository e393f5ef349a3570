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

import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_build.format.reader import check_calib
from bench_build.format.schema import decode_boxes, decode_calib
from bench_build.manifests.manifest import read_manifest
from bench_build.runtime.numeric import usable_cores
from bench_build.score.bug_rates import bug_rates
from bench_build.score.kitti_boxes import (
    KittiFormatError,
    KittiObjects,
    frame_overlaps,
    parse_kitti_objects,
    read_kitti_objects,
)
from bench_build.score.kitti_eval import evaluate
from bench_build.score.predictions import FIRST, PredictionError
from bench_build.score.truth import Partition, read_truth
from bench_build.sources.kitti import format_labels


def _truth_objects(version_dir: str | Path, rel: str, cols: dict[str, list[Any]]) -> dict[str, KittiObjects]:
    """The ground-truth objects of each frame of the version file ``rel``. A calibration matrix of another length (a
    page header, which no page checksum covers, damaged) is refused as the reader refuses it, naming file and row."""
    frames = {}
    for i, (fid, boxes, calib) in enumerate(zip(cols["frame_id"], cols["boxes"], cols["calib"], strict=True)):
        check_calib(calib, str(Path(version_dir) / rel), i, f"frame {fid}", str(version_dir))
        b, c = decode_boxes(boxes), decode_calib(calib)
        text = "" if b is None or c is None else format_labels(b, c)
        frames[fid] = parse_kitti_objects(text, f"{version_dir}: {fid}", need_score=False)
    return frames


def _partition_truth(version_dir: str | Path, shard_paths: list[str]) -> dict[str, KittiObjects]:

    frames: dict[str, KittiObjects] = {}
    for rel in shard_paths:
        table = read_truth(version_dir, rel, ["frame_id", "boxes", "calib"])
        frames.update(_truth_objects(version_dir, rel, {c: table[c].to_pylist() for c in table.column_names}))
    return frames


def partition_candidates(root: Path, part: Partition, severity_names: list[str]) -> list[Path]:
    """Where a partition's predictions may live under ``root``: ``clean/0`` or ``clean``; ``<corruption>/<severity>``
    or ``<corruption>/<severity name>`` (light, moderate, heavy)."""
    if part.corruption == "clean":
        return [root / "clean" / "0", root / "clean"]
    out = [root / part.corruption / str(part.severity)]
    if severity_names and 1 <= part.severity <= len(severity_names):
        out.append(root / part.corruption / severity_names[part.severity - 1])
    return out


@dataclass(frozen=True)
class Unread:
    """What `unread_folders` finds no partition reading, relative to the prediction root, sorted: folders, and
    files lying in a folder that is only above partitions (``fog/000001.txt`` beside ``fog/1/``)."""

    folders: list[str]
    files: list[str]

    def __bool__(self) -> bool:
        return bool(self.folders or self.files)


def unread_folders(root: Path, parts: Iterable[Partition], severity_names: list[str], *,
                   data: bool = True) -> Unread:
    """The folders under ``root`` that no partition of ``parts`` reads: neither one of its `partition_candidates`
    (nor, with ``data``, their ``data/``) nor a folder above one. A typo'd corruption (``fgo``), a severity the
    version lacks (``fog/6``), a partition nested one level too deep (``fog/3/3``): each would go unscored
    without a word. Topmost only, relative to ``root``, sorted. Also the files in ``root`` and in the folders
    above a partition (``fog/000001.txt`` beside ``fog/1/``), which no partition reads either."""
    places = {c for p in parts for c in partition_candidates(root, p, severity_names)}
    places |= {c / "data" for c in places} if data else set()
    above = {a for c in places for a in c.relative_to(root).parents}
    folders: list[str] = []
    files: list[str] = []

    def walk(folder: Path) -> None:
        if folder not in places:  # only above partitions: its files are read by none
            files.extend(f.relative_to(root).as_posix() for f in sorted(folder.iterdir()) if f.is_file())
        for sub in sorted(d for d in folder.iterdir() if d.is_dir()):
            if sub in places or sub.relative_to(root) in above:
                walk(sub)
            else:
                folders.append(sub.relative_to(root).as_posix())

    walk(root)
    return Unread(folders, files)


def unread_note(root: Path, unread: Unread) -> str:
    """What `score` says of `unread_folders` (printed and in the JSON's notes)."""
    said = []
    if unread.folders:
        said.append(f"prediction folder(s) {', '.join(unread.folders)} name no partition of this version and were "
                    "not scored")
    if unread.files:
        said.append(f"file(s) {', '.join(unread.files)} lie outside every partition's folder and were not read")
    return f"{root}: " + "; ".join(said)


def one_place(root: Path, part: Partition, places: list[Path], what: str) -> Path:
    """The one of ``places`` that holds ``part``'s ``what``; more than one is refused (`PredictionError`): scoring one
    would silently ignore the others."""
    if len(places) > 1:
        raise PredictionError(f"{root}: {what} for {part.corruption}/{part.severity} in {len(places)} places "
                              f"({', '.join(str(d) for d in places)}): keep one of them, the scores would come "
                              "from one and ignore the others")
    return places[0]


def partition_dir(root: Path, part: Partition, severity_names: list[str]) -> Path:
    """The directory holding ``part``'s result files under ``root`` (raises naming what was looked for). Result
    files in two of the accepted places (``clean/`` and ``clean/0/``, ``fog/1/`` and ``fog/1/data/``, ``fog/1/``
    and ``fog/light/``) are refused: scoring one of them would silently ignore the other."""
    candidates = partition_candidates(root, part, severity_names)
    holding = [d for c in candidates for d in (c / "data", c) if d.is_dir() and any(d.glob("*.txt"))]
    if holding:
        return one_place(root, part, holding, "result files")
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


@dataclass(frozen=True)
class PartitionScore:
    ap: dict[str, Any]  # `kitti_eval.evaluate`'s result
    bugs: dict[str, dict[str, float]] | None  # `bug_rates.bug_rates`' result, when asked for
    frames: int
    detections: int


def score_partition(version_dir: str | Path, shard_paths: list[str], pred_root: str | Path, part: Partition,
                    severity_names: list[str], classes: tuple[str, ...], bugs: bool) -> PartitionScore:
    """AP (and bug rates) of one partition: its ground truth from its shards, its result files, the overlaps
    computed once for both."""

    truth = _partition_truth(version_dir, shard_paths)
    frame_ids = sorted(truth)
    gts = [truth[f] for f in frame_ids]
    dets = read_detections(pred_root, part, frame_ids, severity_names)
    ov = frame_overlaps(dets, gts)
    return PartitionScore(evaluate(gts, dets, classes=classes, overlaps=ov),
                          bug_rates(dets, gts, ov["3d"], classes=classes) if bugs else None,
                          len(frame_ids), sum(len(d) for d in dets))


#: below this many frames in all, partitions are scored in this process (a worker's start-up costs ~2 s)
PARALLEL_MIN_FRAMES = 5000


def score_partitions(version_dir: str | Path, pred_root: str | Path, *, severity_names: list[str],
                     classes: tuple[str, ...], bugs: bool = False,
                     workers: int | None = None) -> dict[Partition, PartitionScore]:
    """Every partition of the version, clean first; with ``workers`` > 1 (default: every CPU of this process
    for versions of at least `PARALLEL_MIN_FRAMES` frames) partitions are scored in parallel processes."""


    manifest = read_manifest(Path(version_dir))
    shards: dict[Partition, list[str]] = {}
    for sh in manifest["shards"]:
        shards.setdefault(Partition(sh["corruption"], int(sh["severity"])), []).append(sh["path"])
    parts = sorted(shards, key=lambda p: (p.corruption != "clean", p.corruption, p.severity))
    if workers is None:
        frames = sum(int(sh.get("rows") or 0) for sh in manifest["shards"])
        workers = usable_cores() if frames >= PARALLEL_MIN_FRAMES else 1
    workers = max(1, min(workers, len(parts)))
    args = [(version_dir, shards[p], pred_root, p, severity_names, classes, bugs) for p in parts]
    if workers == 1:
        return {p: score_partition(*a) for p, a in zip(parts, args, strict=True)}

    # spawn, not fork: the parent may hold pyarrow's thread pools
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(score_partition, *a) for a in args]
        return {p: f.result() for p, f in zip(parts, futures, strict=True)}

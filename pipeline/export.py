"""`bench-build export`: a built version as KITTI data roots that OpenPCDet's and mmdetection3d's KITTI
converters accept (``create_kitti_infos`` / ``tools/create_data.py kitti``).

One partition (``--corruption C --severity S``)::

    OUT/ImageSets/{train,val,test,trainval}.txt   the exported frame ids in the build's split list
                                                  (``val`` for a ``--split val`` build), the others empty
    OUT/training/velodyne/<id>.bin                float32 x, y, z, intensity
    OUT/training/label_2/<id>.txt                 the example's boxes (object-level corruptions: the
                                                  moved boxes), DontCare lines last as KITTI has them
    OUT/training/calib/<id>.txt                   P0–P3, R0_rect, Tr_velo_to_cam, Tr_imu_to_velo in
                                                  KITTI's line order (OpenPCDet reads lines by index)
    OUT/training/image_2 -> <source>/training/image_2   linked from --source (OpenPCDet asserts on it)
    OUT/training/planes  -> <source>/training/planes    linked when the source has it (optional)

``--all`` (default ``--layout robo3d``, the layout Robo3D's docs use, reusing the clean infos)::

    OUT/<benchmark>/clean/                        a full data root as above
    OUT/<benchmark>/<corruption>/<severity>/velodyne/<id>.bin
    OUT/<benchmark>/<corruption>/<severity>/label_2/<id>.txt   only where the corruption moved boxes

``<severity>`` is the recipe's severity name (light, moderate, heavy) or the number. With
``--layout kitti`` every partition is a full data root of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from manifests.manifest import read_manifest
from pipeline.reader import Example, open_version
from stages.frame import Boxes

SPLIT_LISTS = ("train", "val", "test", "trainval")
LAYOUTS = ("robo3d", "kitti")
LINKED = ("image_2", "planes")  # what the converters read besides what a build stores


class ExportError(ValueError):
    pass


@dataclass
class ExportResult:
    out: Path
    partitions: list[dict[str, Any]] = field(default_factory=list)  # corruption, severity, path, frames, labels
    notes: list[str] = field(default_factory=list)

    @property
    def frames(self) -> int:
        return sum(p["frames"] for p in self.partitions)


def check_partition(manifest: dict[str, Any], corruption: str | None, severity: int | None) -> tuple[str, int]:
    """(corruption, severity) of an existing partition, or an ExportError naming what exists."""
    recipe = manifest["recipe"]
    names = [c["name"] for c in recipe.get("corruptions", [])]
    top = int(recipe.get("severities") or 0)
    if corruption is None or severity is None:
        raise ExportError("give --corruption and --severity (0 = clean), or --all")
    if corruption != "clean" and corruption not in names:
        raise ExportError(f"no corruption {corruption!r} in {manifest['dataset']} {manifest['version']}; "
                          f"it has clean, {', '.join(names)}")
    if not 0 <= severity <= top:
        raise ExportError(f"severity {severity} is outside 0…{top} of {manifest['dataset']} (0 = clean)")
    if corruption == "clean" and severity != 0:
        raise ExportError(f"clean has only severity 0, not {severity}")
    return ("clean", 0) if severity == 0 else (corruption, severity)


def severity_names(manifest: dict[str, Any]) -> list[str]:
    """The recipe's severity names (light, moderate, heavy): the manifest's recipe holds only what determines
    the bytes, so a built-in recipe of the same name and version is asked; [] when unnamed or unknown."""
    names = (manifest.get("recipe") or {}).get("severity_names")
    if names:
        return list(names)
    from manifests.recipe import RecipeError, builtin_recipes, load_recipe

    name = (manifest.get("recipe") or {}).get("name") or manifest.get("dataset")
    if name in builtin_recipes():
        try:
            r = load_recipe(name)
        except RecipeError:
            return []
        if r.version == manifest.get("version") and r.severities == (manifest.get("recipe") or {}).get("severities"):
            return list(r.severity_names)
    return []


def severity_dir(manifest: dict[str, Any], severity: int) -> str:
    names = severity_names(manifest)
    return names[severity - 1] if 0 < severity <= len(names) else str(severity)


def _dontcare_last(boxes: Boxes) -> Boxes:
    """KITTI files list DontCare regions after the objects; OpenPCDet's info builder relies on it."""
    order = np.argsort(np.array([str(c) == "DontCare" for c in boxes.cls]), kind="stable")
    return Boxes(boxes.center[order], boxes.dims[order], boxes.heading[order], boxes.cls[order],
                 boxes.truncated[order], boxes.occluded[order], boxes.alpha[order], boxes.bbox2d[order])


def _velodyne(path: Path, ex: Example) -> None:
    try:
        cols = [ex.fields.index(f) for f in ("x", "y", "z", "intensity")]
    except ValueError:
        raise ExportError(f"{ex.key}: KITTI velodyne files need x, y, z, intensity; the build has "
                          f"{', '.join(ex.fields)}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(ex.points[:, cols], dtype="<f4").tofile(path)


def _label(path: Path, ex: Example) -> None:
    from pipeline.sources.kitti import format_labels

    if ex.calib is None:
        raise ExportError(f"{ex.key}: no calibration: KITTI labels are in the camera frame")
    path.parent.mkdir(parents=True, exist_ok=True)
    boxes = ex.boxes if ex.boxes is not None else Boxes.empty()
    path.write_text(format_labels(_dontcare_last(boxes), ex.calib))


def _calib(path: Path, ex: Example) -> None:
    from pipeline.sources.kitti import format_calib

    if ex.calib is None:
        raise ExportError(f"{ex.key}: no calibration to export")
    text = format_calib(ex.calib)
    keys = [line.split(":", 1)[0] for line in text.splitlines()]
    if keys != ["P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo"]:
        raise ExportError(f"{ex.key}: calibration has {', '.join(keys)}; OpenPCDet and mmdetection3d read the "
                          "matrices by line number from a full KITTI calib file (P0–P3, R0_rect, Tr_velo_to_cam, "
                          "Tr_imu_to_velo)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _boxes_equal(a: Boxes | None, b: Boxes | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and np.allclose(a.center, b.center, atol=1e-6) and np.allclose(a.dims, b.dims) \
        and np.allclose(a.heading, b.heading)


def _link(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        if link.is_symlink():
            link.unlink()
        else:
            raise ExportError(f"{link} exists and is not a link; remove it or export elsewhere")
    link.symlink_to(target, target_is_directory=True)


def link_source(root: Path, ids: list[str], source: str | Path | None) -> list[str]:
    """Link image_2 (and planes) of a KITTI source into ``root/training``; notes for the user."""
    if source is None:
        return [f"{root / 'training' / 'image_2'} not written: OpenPCDet's KittiDataset.get_infos and "
                "mmdetection3d's kitti converter read training/image_2/<id>.png (image shape, field of view). "
                "Re-run with --source <KITTI object root> (the directory holding training/image_2), or link it: "
                f"ln -s <kitti>/training/image_2 {root / 'training' / 'image_2'}. "
                "training/planes (road planes, optional: only for GT sampling with USE_ROAD_PLANE) likewise."]
    src = Path(source).resolve()
    base = src / "training" if (src / "training").is_dir() else src
    notes = []
    img = base / "image_2"
    if not img.is_dir():
        raise ExportError(f"{source}: no training/image_2 directory to link (OpenPCDet needs the left colour "
                          "images of the frames: the KITTI object 'data_object_image_2' download)")
    missing = [i for i in ids if not (img / f"{i}.png").is_file()]
    if missing:
        raise ExportError(f"{img}: {len(missing)} of {len(ids)} exported frames have no image, e.g. "
                          + ", ".join(f"{m}.png" for m in missing[:5]))
    _link(img, root / "training" / "image_2")
    if (base / "planes").is_dir():
        _link(base / "planes", root / "training" / "planes")
    else:
        notes.append(f"{source}: no training/planes (road planes): fine unless your config sets USE_ROAD_PLANE")
    return notes


def _image_sets(root: Path, ids: Iterable[str], split: str) -> None:
    d = root / "ImageSets"
    d.mkdir(parents=True, exist_ok=True)
    listing = "".join(f"{i}\n" for i in sorted(ids))
    (d / f"{split}.txt").write_text(listing)
    for other in SPLIT_LISTS:  # the converters open all of these
        if other != split and not (d / f"{other}.txt").exists():
            (d / f"{other}.txt").write_text("")


def _split_name(manifest: dict[str, Any], split: str | None) -> str:
    if split is not None:
        return split
    s = (manifest.get("source") or {}).get("split")
    return s if s in SPLIT_LISTS else "val"


def write_data_root(root: Path, examples: Iterable[Example], *, split: str, source: str | Path | None) -> \
        tuple[list[str], list[str]]:
    """A full KITTI data root; returns (frame ids, notes)."""
    ids = []
    for ex in examples:
        base = root / "training"
        _velodyne(base / "velodyne" / f"{ex.frame_id}.bin", ex)
        _calib(base / "calib" / f"{ex.frame_id}.txt", ex)
        _label(base / "label_2" / f"{ex.frame_id}.txt", ex)
        ids.append(ex.frame_id)
    if not ids:
        raise ExportError(f"{root}: no frames to export")
    _image_sets(root, ids, split)
    notes = link_source(root, ids, source)
    empty = [i for i in ids if (root / "training" / "label_2" / f"{i}.txt").stat().st_size == 0]
    if empty:
        notes.append(f"{len(empty)} frames have no labelled object (e.g. {empty[0]}): OpenPCDet's get_infos cannot "
                     "build infos for an empty label_2 file; leave them out of ImageSets for training")
    return ids, notes


def export_version(version_dir: str | Path, out: str | Path, *, corruption: str | None = None,
                   severity: int | None = None, all_partitions: bool = False, source: str | Path | None = None,
                   split: str | None = None, layout: str = "robo3d",
                   frames: Iterable[str] | None = None) -> ExportResult:
    version_dir, out = Path(version_dir), Path(out)
    manifest = read_manifest(version_dir)
    if layout not in LAYOUTS:
        raise ExportError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    ds = open_version(version_dir)
    split_name = _split_name(manifest, split)
    result = ExportResult(out)
    if not all_partitions:
        c, s = check_partition(manifest, corruption, severity)
        ids, notes = write_data_root(out, ds.examples(c, s, frames), split=split_name, source=source)
        result.partitions.append({"corruption": c, "severity": s, "path": str(out), "frames": len(ids),
                                  "labels": True})
        result.notes += notes
        return result
    if corruption is not None or severity is not None:
        raise ExportError("--all exports every partition: leave out --corruption and --severity")
    bench = out / manifest["dataset"]
    clean = {ex.frame_id: ex.boxes for ex in ds.examples("clean", 0, frames)}
    ids, notes = write_data_root(bench / "clean", ds.examples("clean", 0, frames), split=split_name, source=source)
    result.partitions.append({"corruption": "clean", "severity": 0, "path": str(bench / "clean"),
                              "frames": len(ids), "labels": True})
    result.notes += notes
    for c in manifest["recipe"].get("corruptions", []):
        for s in range(1, int(manifest["recipe"]["severities"]) + 1):
            root = bench / c["name"] / severity_dir(manifest, s)
            if layout == "kitti":
                pids, _ = write_data_root(root, ds.examples(c["name"], s, frames), split=split_name, source=source)
                result.partitions.append({"corruption": c["name"], "severity": s, "path": str(root),
                                          "frames": len(pids), "labels": True})
                continue
            exs = list(ds.examples(c["name"], s, frames))
            moved = any(not _boxes_equal(ex.boxes, clean.get(ex.frame_id)) for ex in exs)
            for ex in exs:
                _velodyne(root / "velodyne" / f"{ex.frame_id}.bin", ex)
                if moved:
                    _label(root / "label_2" / f"{ex.frame_id}.txt", ex)
            result.partitions.append({"corruption": c["name"], "severity": s, "path": str(root),
                                      "frames": len(exs), "labels": moved})
    if layout == "robo3d":
        result.notes.append(f"use the infos of {bench / 'clean'} and point the velodyne path at "
                            f"{bench}/<corruption>/<severity>/velodyne; where a partition has label_2 "
                            "(object-level corruptions move boxes) use its labels too")
    return result

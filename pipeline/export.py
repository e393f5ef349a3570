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

Nothing is written until every file and link is decided and every precondition checked (`export_version`): OUT
must be new or empty (``--force``: replace only the export's own files and links), and is never --source, the
version, or inside either; no path the export writes may resolve into them. A refusal writes nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from manifests.manifest import read_manifest
from manifests.recipe import severity_names
from pipeline.errors import BenchBuildError
from pipeline.reader import Example, Version, open_version
from pipeline.schema import decode_boxes, decode_calib
from pipeline.shard import os_error_message
from pipeline.sources.kitti import format_calib, format_labels
from stages.frame import Boxes, Calib

SPLIT_LISTS = ("train", "val", "test", "trainval")
LAYOUTS = ("robo3d", "kitti")
LINKED = ("image_2", "planes")  # what the converters read besides what a build stores


class ExportError(BenchBuildError, ValueError):
    """Refused before anything was written (the CLI's exit 2)."""


class ExportIncomplete(BenchBuildError, RuntimeError):
    """Writing had begun when something failed (the CLI's exit 1); the message says how far it got."""

    exit_code = 1  # work had begun


@dataclass
class ExportResult:
    out: Path
    partitions: list[dict[str, Any]] = field(default_factory=list)  # corruption, severity, path, frames, labels
    notes: list[str] = field(default_factory=list)
    written: int = 0  # files and links written
    replaced: int = 0  # of them, how many replaced an existing one (--force)

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




def severity_dir(manifest: dict[str, Any], severity: int) -> str:
    names = severity_names(manifest)
    return names[severity - 1] if 0 < severity <= len(names) else str(severity)


def _dontcare_last(boxes: Boxes) -> Boxes:
    """KITTI files list DontCare regions after the objects; OpenPCDet's info builder relies on it."""
    order = np.argsort(np.array([str(c) == "DontCare" for c in boxes.cls]), kind="stable")
    return Boxes(boxes.center[order], boxes.dims[order], boxes.heading[order], boxes.cls[order],
                 boxes.truncated[order], boxes.occluded[order], boxes.alpha[order], boxes.bbox2d[order])


KITTI_CALIB_KEYS = ["P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo"]
VELODYNE_FIELDS = ("x", "y", "z", "intensity")


def _velodyne_bytes(ex: Example) -> bytes:
    try:
        cols = [ex.fields.index(f) for f in VELODYNE_FIELDS]
    except ValueError:
        raise ExportError(f"{ex.key}: KITTI velodyne files need x, y, z, intensity; the build has "
                          f"{', '.join(ex.fields)}") from None
    return np.ascontiguousarray(ex.points[:, cols], dtype="<f4").tobytes()


def _calib_text(key: str, calib: Calib | None) -> str:

    if calib is None:
        raise ExportError(f"{key}: no calibration to export")
    text = format_calib(calib)
    keys = [line.split(":", 1)[0] for line in text.splitlines()]
    if keys != KITTI_CALIB_KEYS:
        raise ExportError(f"{key}: calibration has {', '.join(keys)}; OpenPCDet and mmdetection3d read the "
                          "matrices by line number from a full KITTI calib file (P0–P3, R0_rect, Tr_velo_to_cam, "
                          "Tr_imu_to_velo)")
    return text


def _label_text(key: str, boxes: Boxes | None, calib: Calib | None) -> str:

    if calib is None:
        raise ExportError(f"{key}: no calibration: KITTI labels are in the camera frame")
    return format_labels(_dontcare_last(boxes if boxes is not None else Boxes.empty()), calib)


def _boxes_equal(a: Boxes | None, b: Boxes | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and np.allclose(a.center, b.center, atol=1e-6) and np.allclose(a.dims, b.dims) \
        and np.allclose(a.heading, b.heading)


def _split_name(manifest: dict[str, Any], split: str | None) -> str:
    if split is not None:
        return split
    s = (manifest.get("source") or {}).get("split")
    return s if s in SPLIT_LISTS else "val"


# ---- pre-flight: everything export will do is decided and checked here, before the first byte is written ----

@dataclass
class _Part:
    """One partition's share of the export: the frames it writes and where."""

    corruption: str
    severity: int
    root: Path
    ids: list[str]
    full: bool  # a whole data root (velodyne, calib, label_2, ImageSets, links) or Robo3D's velodyne(+label_2)
    labels: bool  # writes label_2: always in a data root; in Robo3D's layout only where the corruption moved boxes
    image_sets: dict[Path, str] = field(default_factory=dict)
    links: dict[Path, Path] = field(default_factory=dict)  # link → target

    def files(self) -> Iterator[Path]:
        base = self.root / "training" if self.full else self.root
        for i in self.ids:
            yield base / "velodyne" / f"{i}.bin"
            if self.full:
                yield base / "calib" / f"{i}.txt"
            if self.labels:
                yield base / "label_2" / f"{i}.txt"
        yield from self.image_sets


def _rows(ds: Version, corruption: str, severity: int, wanted: set[str] | None) -> \
        list[tuple[str, str, Boxes | None, Calib | None]]:
    """(key, frame id, boxes, calib) of a partition's examples, from those columns only (no points are read)."""

    rows = []
    for entry in ds.shards(corruption, severity):
        t = ds.open_file(entry["path"]).read(columns=["key", "frame_id", "boxes", "calib"])
        for key, fid, boxes, calib in zip(t["key"].to_pylist(), t["frame_id"].to_pylist(), t["boxes"].to_pylist(),
                                          t["calib"].to_pylist(), strict=True):
            if wanted is None or fid in wanted:
                if fid in ("", ".", "..") or any(ch in fid for ch in "/\\\0"):
                    raise ExportError(f"{key}: frame id {fid!r} is not a plain file name; it cannot name a KITTI "
                                      "file (rebuild from a source whose frame ids are plain names)")
                rows.append((key, fid, decode_boxes(boxes), decode_calib(calib)))
    return rows


def _part(ds: Version, corruption: str, severity: int, root: Path, *, full: bool, wanted: set[str] | None,
          clean: dict[str, Boxes | None] | None = None) -> tuple[_Part, dict[str, Boxes | None], list[str]]:
    """The part, its boxes by frame id, and its frames with no labelled object; every label and calib file it
    writes is formatted once here so that a frame that cannot be exported stops the export before it starts."""
    rows = _rows(ds, corruption, severity, wanted)
    if full and not rows:
        raise ExportError(f"{corruption}/{severity}: no frames to export"
                          + (" (none of the requested frames is in this partition)" if wanted is not None else ""))
    boxes = {fid: b for _, fid, b, _ in rows}
    labels = full or (clean is not None and any(not _boxes_equal(b, clean.get(fid)) for fid, b in boxes.items()))
    empty = []
    for key, fid, b, calib in rows:
        if full:
            _calib_text(key, calib)
        if labels and not _label_text(key, b, calib):
            empty.append(fid)
    return _Part(corruption, severity, root, [fid for _, fid, _, _ in rows], full, labels), boxes, empty


def _source_dirs(source: str | Path, ids: set[str]) -> tuple[Path, Path | None]:
    """(image_2, planes or None) of a KITTI source, refused unless every exported frame has its image."""
    src = Path(source).resolve()
    base = src / "training" if (src / "training").is_dir() else src
    img = base / "image_2"
    if not img.is_dir():
        raise ExportError(f"{source}: no training/image_2 directory to link (OpenPCDet needs the left colour "
                          "images of the frames: the KITTI object 'data_object_image_2' download)")
    missing = sorted(i for i in ids if not (img / f"{i}.png").is_file())
    if missing:
        raise ExportError(f"{img}: {len(missing)} of {len(ids)} exported frames have no image, e.g. "
                          + ", ".join(f"{m}.png" for m in missing[:5]))
    return img, (base / "planes" if (base / "planes").is_dir() else None)


def _out_dir_or_ancestor(out: Path) -> Path:
    """The nearest existing one of OUT and its ancestors; refused unless it is a directory."""
    for p in (out, *out.absolute().parents):
        if os.path.lexists(p):
            if p.is_dir():
                return p
            what = "a broken link" if p.is_symlink() else "a file"
            if p == out:
                raise ExportError(f"{out} is {what}, not a directory: export writes a tree of KITTI files; give a "
                                  "new or empty directory")
            raise ExportError(f"{out}: {p} is {what}, not a directory, so {out} cannot be created; give a new or "
                              "empty directory")
    raise ExportError(f"{out}: no existing ancestor directory")  # unreachable: '/' exists


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _check_targets(out: Path, parts: list[_Part], protected: list[tuple[str, Path]], force: bool) -> list[Path]:
    """Refuse (ExportError) anything writing could destroy or trip over; the existing files and links that
    --force would replace."""
    out_real = os.path.realpath(out)
    guarded = [(what, p, os.path.realpath(p)) for what, p in protected]
    for what, p, real in guarded:
        if _inside(out_real, real):
            rel = "is" if out_real == real else "is inside"
            raise ExportError(f"{out} {rel} {what} {p}: export would write its velodyne, calib, label_2 and "
                              "ImageSets files there, over the ones it reads from (--force does not change this); "
                              "export to a directory outside it")
    ancestor = _out_dir_or_ancestor(out)
    files = [p for part in parts for p in part.files()]
    links = {link: target for part in parts for link, target in part.links.items()}
    # the directories the export writes in, each resolved once: a link among them may lead anywhere
    dirs: dict[Path, str] = {}
    for p in (*files, *links):
        d = p.parent
        while d not in dirs:
            dirs[d] = os.path.realpath(d)
            if d == out or d == d.parent:
                break
            d = d.parent
    for p in (*files, *links):
        real = os.path.join(dirs[p.parent], p.name)
        for what, root, root_real in guarded:
            if _inside(real, root_real) or _inside(root_real, real):
                raise ExportError(f"{p} would be written over {what} {root} (it resolves to {real}); export "
                                  "elsewhere (--force does not change this)")
    existing = {d for d in dirs if os.path.lexists(d)}
    for d in sorted(existing):
        if not d.is_dir():
            raise ExportError(f"{d} is {'a broken link' if d.is_symlink() else 'a file'}, not a directory: export "
                              "writes files inside it; move it away or export elsewhere")
    for d in sorted({ancestor, *existing}):
        if not os.access(d, os.W_OK | os.X_OK):
            raise ExportError(f"Permission denied: cannot create files in {d}; make it writable or export elsewhere")
    replace = []
    for p in files:
        if p.parent in existing and os.path.lexists(p):
            if p.is_dir() and not p.is_symlink():
                raise ExportError(f"{p} is a directory where export writes a file; move it away or export elsewhere")
            replace.append(p)
    for link, target in links.items():
        if link.parent in existing and os.path.lexists(link):
            if not link.is_symlink():
                raise ExportError(f"{link} exists and is not a link (export links it to {target}); remove it or "
                                  "export elsewhere (--force replaces only links and the files export writes)")
            if Path(os.readlink(link)) != target:
                replace.append(link)
    if not force and out.is_dir():
        entries = sorted(os.listdir(out))
        if entries:
            raise ExportError(f"{out} is not empty ({len(entries)} entries, e.g. {entries[0]}): export into a new or "
                              f"empty directory, or add --force to replace only the files it writes ({len(replace)} "
                              "of them exist there) and keep everything else")
    return replace


def _plan(ds: Version, manifest: dict[str, Any], out: Path, *, corruption: str | None, severity: int | None,
          all_partitions: bool, source: str | Path | None, split: str, layout: str, frames: Iterable[str] | None,
          result: ExportResult) -> list[_Part]:
    wanted = None if frames is None else set(frames)
    fields = manifest.get("fields")
    if fields is not None and not set(VELODYNE_FIELDS) <= set(fields):
        raise ExportError(f"{ds.url}: KITTI velodyne files need x, y, z, intensity; the build has "
                          f"{', '.join(fields)}")
    if not all_partitions:
        c, s = check_partition(manifest, corruption, severity)
        first, _, empty = _part(ds, c, s, out, full=True, wanted=wanted)
        parts = [first]
    else:
        bench = out / manifest["dataset"]
        first, clean, empty = _part(ds, "clean", 0, bench / "clean", full=True, wanted=wanted)
        parts = [first]
        for c in manifest["recipe"].get("corruptions", []):
            for s in range(1, int(manifest["recipe"]["severities"]) + 1):
                root = bench / c["name"] / severity_dir(manifest, s)
                if layout == "kitti":
                    parts.append(_part(ds, c["name"], s, root, full=True, wanted=wanted)[0])
                else:
                    parts.append(_part(ds, c["name"], s, root, full=False, wanted=wanted, clean=clean)[0])
    full = [p for p in parts if p.full]
    linked = _source_dirs(source, {i for p in full for i in p.ids}) if source is not None else None
    for p in full:
        sets = p.root / "ImageSets"
        p.image_sets[sets / f"{split}.txt"] = "".join(f"{i}\n" for i in sorted(p.ids))
        for other in SPLIT_LISTS:  # the converters open all of these; lists already there are kept
            if other != split and not os.path.lexists(sets / f"{other}.txt"):
                p.image_sets[sets / f"{other}.txt"] = ""
        if linked is not None:
            p.links[p.root / "training" / "image_2"] = linked[0]
            if linked[1] is not None:
                p.links[p.root / "training" / "planes"] = linked[1]
    image_dir = first.root / "training" / "image_2"
    if source is None:
        result.notes.append(
            f"{image_dir} not written: OpenPCDet's KittiDataset.get_infos and mmdetection3d's kitti converter read "
            "training/image_2/<id>.png (image shape, field of view). Re-run with --source <KITTI object root> (the "
            f"directory holding training/image_2), or link it: ln -s <kitti>/training/image_2 {image_dir}. "
            "training/planes (road planes, optional: only for GT sampling with USE_ROAD_PLANE) likewise.")
    elif linked is not None and linked[1] is None:
        result.notes.append(f"{source}: no training/planes (road planes): fine unless your config sets USE_ROAD_PLANE")
    if empty:
        result.notes.append(f"{len(empty)} frames have no labelled object (e.g. {empty[0]}): OpenPCDet's get_infos "
                            "cannot build infos for an empty label_2 file; leave them out of ImageSets for training")
    for p in parts:
        result.partitions.append({"corruption": p.corruption, "severity": p.severity, "path": str(p.root),
                                  "frames": len(p.ids), "labels": p.labels})
    if all_partitions and layout == "robo3d":
        bench = out / manifest["dataset"]
        result.notes.append(f"use the infos of {bench / 'clean'} and point the velodyne path at "
                            f"{bench}/<corruption>/<severity>/velodyne; where a partition has label_2 "
                            "(object-level corruptions move boxes) use its labels too")
    return parts


# ---- writing: only what the plan holds; an existing file is replaced, never written through ----

def _write_file(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) with ``data``; on failure the unfinished file is removed and the error
    names ``path``. O_EXCL: never through a link or into a hard-linked inode shared with someone else's data."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666: the umask decides, as for open()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise OSError(e.errno, e.strerror, str(path)) from None


class _Writer:
    def __init__(self, parts: list[_Part], replace: list[Path]) -> None:
        self.files = {p for part in parts for p in part.files()}
        self.total = len(self.files) + sum(len(p.links) for p in parts)
        self.replace = set(replace)
        self.written = self.replaced = 0

    def file(self, path: Path, data: bytes) -> None:
        if path not in self.files:  # the pre-flight checked exactly these paths; nothing else may be touched
            raise ExportError(f"{path}: not among the files the export checked before writing")
        path.parent.mkdir(parents=True, exist_ok=True)
        if path in self.replace and os.path.lexists(path):
            os.unlink(path)
            self.replaced += 1
        _write_file(path, data)
        self.written += 1

    def link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(link):
            if not link.is_symlink():
                raise ExportError(f"{link} exists and is not a link; remove it or export elsewhere")
            if Path(os.readlink(link)) == target:
                return
            link.unlink()
            self.replaced += 1
        link.symlink_to(target, target_is_directory=True)
        self.written += 1


def _write(ds: Version, parts: list[_Part], replace: list[Path], frames: Iterable[str] | None, out: Path,
           result: ExportResult) -> None:

    w = _Writer(parts, replace)
    try:
        for part in parts:
            ids = set(part.ids)
            base = part.root / "training" if part.full else part.root
            for ex in ds.examples(part.corruption, part.severity, frames):
                if ex.frame_id not in ids:
                    continue
                w.file(base / "velodyne" / f"{ex.frame_id}.bin", _velodyne_bytes(ex))
                if part.full:
                    w.file(base / "calib" / f"{ex.frame_id}.txt", _calib_text(ex.key, ex.calib).encode())
                if part.labels:
                    w.file(base / "label_2" / f"{ex.frame_id}.txt",
                           _label_text(ex.key, ex.boxes, ex.calib).encode())
            for path, text in part.image_sets.items():
                w.file(path, text.encode())
            for link, target in part.links.items():
                w.link(link, target)
    except (OSError, ValueError, KeyError) as e:
        cause = os_error_message(e) if isinstance(e, OSError) else str(e).splitlines()[0]
        raise ExportIncomplete(
            f"{cause}; export stopped after writing {w.written} of {w.total} files under {out} ({w.replaced} of them "
            "replacing earlier ones; nothing else there was touched); fix the cause and run the same command again "
            "with --force, which rewrites only the export's own files") from None
    result.written, result.replaced = w.written, w.replaced


def export_version(version_dir: str | Path, out: str | Path, *, corruption: str | None = None,
                   severity: int | None = None, all_partitions: bool = False, source: str | Path | None = None,
                   split: str | None = None, layout: str = "robo3d",
                   frames: Iterable[str] | None = None, force: bool = False) -> ExportResult:
    """Export in two passes. The pre-flight reads the manifest and the partitions' boxes and calibrations,
    decides every file and link to write and checks every precondition (partitions, the source's images, OUT
    neither is nor lies inside --source or the version, OUT empty unless ``force``, nothing in the way); an
    ExportError from it means nothing was written. Then the files are written; a failure from then on raises
    ExportIncomplete saying how far it got. ``force`` replaces only the files and links the export writes."""

    version_dir, out = Path(version_dir), Path(out)
    if frames is not None:
        frames = list(frames)
    result = ExportResult(out)
    try:
        if layout not in LAYOUTS:
            raise ExportError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        manifest = read_manifest(version_dir)
        if all_partitions and (corruption is not None or severity is not None):
            raise ExportError("--all exports every partition: leave out --corruption and --severity")
        if not all_partitions:
            check_partition(manifest, corruption, severity)
        _out_dir_or_ancestor(out)
        ds = open_version(version_dir)
        parts = _plan(ds, manifest, out, corruption=corruption, severity=severity, all_partitions=all_partitions,
                      source=source, split=_split_name(manifest, split), layout=layout, frames=frames, result=result)
        protected = [("the version", version_dir)] + ([("--source", Path(source))] if source is not None else [])
        replace = _check_targets(out, parts, protected, force)
    except OSError as e:
        raise ExportError(f"{os_error_message(e)} (nothing was written)") from None
    _write(ds, parts, replace, frames, out, result)
    return result

"""Export's plan: every file and link decided and every precondition checked before the first write."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError
from bench_build.export.errors import ExportError
from bench_build.export.kitti_files import VELODYNE_FIELDS, boxes_equal, calib_text, label_text
from bench_build.format.checked import unreadable
from bench_build.format.reader import Version, check_calib
from bench_build.format.schema import decode_boxes, decode_calib
from bench_build.manifests.manifest import LEDGER_DIR, MANIFEST_NAME
from bench_build.manifests.partial import held_partitions, partial_of, parts_text, pull_command
from bench_build.manifests.recipe import severity_names
from bench_build.stages.frame import Boxes, Calib
from bench_build.storage.files import cannot_create, nearest_existing

SPLIT_LISTS = ("train", "val", "test", "trainval")  # the lists export writes in every data root's ImageSets/


SPLITS = ("train", "val", "test")  # a frame is in one of these lists; trainval.txt is train ∪ val
EXPORT_SPLITS = ("train", "val")  # what --split takes: the converters read test from testing/, unlabelled


LAYOUTS = ("robo3d", "kitti")


#: source kinds whose builds export writes (KITTI object scans with full KITTI calibration and camera-frame boxes):
#: the built-in kitti-c and robo3d-kitti-c, or any recipe with ``source = "kitti"``
SUPPORTED_SOURCES = ("kitti",)


def check_source(manifest: dict[str, Any]) -> None:
    """Refuse (ExportError) a build whose source export cannot write as a KITTI object data root."""
    kind = (manifest.get("recipe") or {}).get("source") or (manifest.get("source") or {}).get("kind")
    if kind is not None and kind not in SUPPORTED_SOURCES:  # every build records it; unknown: the checks below
        raise ExportError(f"{manifest.get('dataset')} {manifest.get('version')}: export writes KITTI object data "
                          f"roots only (OpenPCDet, mmdetection3d), from builds of KITTI scans (kitti-c, "
                          f"robo3d-kitti-c); this benchmark's source is {kind}, which export does not support")


#: the file export leaves in every data root it writes (as `bench-build demo-data` leaves ``BENCH_BUILD_DEMO``):
#: a root that holds KITTI files without it, here or in a folder above it up to OUT, is none export wrote, and is
#: refused (`check_marked`), --force or not
EXPORT_MARKER = "BENCH_BUILD_EXPORT"
MARKER_TEXT = ("written by `bench-build export`: with --force it replaces the velodyne, calib and label_2 files and "
               "the ImageSets lists it writes here, and keeps everything else\n")


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


def check_held(url: str, manifest: dict[str, Any], parts: list[tuple[str, int]], all_partitions: bool) -> None:
    """Refuse (ExportError) partitions ``parts`` a partial pull (``bench-build pull --corruption …``) does not hold,
    naming them, what the folder holds and the pull that adds them: its recipe names every partition of the version,
    its manifest lists only the files it pulled, and export said only "no frames to export"."""
    if "partial" not in manifest:
        return
    held = held_partitions(manifest)
    missing = [p for p in parts if p not in set(held)]
    if not missing:
        return
    names, levels = {c for c, _ in missing}, {s for _, s in missing}
    add = pull_command(url, manifest, names.pop() if len(names) == 1 else None,
                       levels.pop() if len(levels) == 1 else None)
    verb, them = ("is", "it") if len(missing) == 1 else ("are", "them")
    instead = "export one partition it holds" if all_partitions else "export one it holds"
    raise ExportError(f"{url}: {parts_text(missing)} {verb} not in this folder ({partial_of(manifest)}); it holds "
                      f"{parts_text(held)} (`{add}` adds {them}, or {instead}); nothing was written")


def severity_dir(manifest: dict[str, Any], severity: int) -> str:
    names = severity_names(manifest)
    return names[severity - 1] if 0 < severity <= len(names) else str(severity)


def split_name(manifest: dict[str, Any], split: str | None) -> str:
    if split is not None:
        if split == "trainval":  # the converters build their trainval infos from train and val, never this list
            raise ExportError("--split trainval: OpenPCDet and mmdetection3d build trainval infos from train.txt "
                              "and val.txt, and export writes trainval.txt as train ∪ val; give train or val")
        if split == "test":  # OpenPCDet: root_split_path = training if split != "test" else testing
            raise ExportError("--split test: OpenPCDet and mmdetection3d read the test split from testing/, "
                              "without labels, for KITTI's server; export writes labelled frames under training/, so "
                              "they would find none: give val (robustness benchmarks evaluate on it) or train")
        if split not in SPLITS:  # the converters read only these lists: any other would be ignored
            raise ExportError(f"--split {split!r}: OpenPCDet and mmdetection3d read ImageSets/"
                              f"{{{','.join(SPLIT_LISTS)}}}.txt; give one of {', '.join(EXPORT_SPLITS)}")
        return split
    s = (manifest.get("source") or {}).get("split")
    return s if s in EXPORT_SPLITS else "val"


def _read_list(path: Path) -> list[str]:
    """The frame ids of an ImageSets list already in OUT (--force), in order, once each; [] if there is none."""
    if not path.is_file():  # missing; a directory or a link to one is refused by check_targets
        return []
    try:
        text = path.read_bytes().decode("ascii")
    except UnicodeDecodeError:
        raise ExportError(f"{path} is not a list of KITTI frame ids (not ASCII text); move it away or export "
                          "into a new directory") from None
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


def image_sets(sets: Path, split: str, ids: list[str], keep: bool) -> tuple[dict[Path, str], dict[str, int]]:
    """The four lists of a data root's ImageSets/ and, per other list, how many exported frames left it.

    The exported frames go in ``split``'s list. With ``keep`` (--force into an existing root) every list of
    train, val and test keeps the frames it lists that this export does not write (their files are still there),
    and the exported frames leave the other lists, so that no frame is in two of them (OpenPCDet and mmdetection3d
    would otherwise build training infos and the GT-sampling database from evaluation frames). trainval.txt is
    always train ∪ val, as both converters' trainval infos are."""
    own = _read_list(sets / f"{split}.txt") if keep else []
    lists = {split: sorted({*own, *ids})}
    moved: dict[str, int] = {}
    exported = set(ids)
    for other in SPLITS:
        if other != split:
            have = _read_list(sets / f"{other}.txt") if keep else []
            lists[other] = [i for i in have if i not in exported]
            if len(lists[other]) < len(have):
                moved[other] = len(have) - len(lists[other])
    seen: dict[str, str] = {}
    for name in SPLITS:
        for i in lists[name]:
            if i in seen:
                raise ExportError(f"{sets}: {seen[i]}.txt and {name}.txt both list frame {i}, which this export "
                                  "does not write; a frame belongs in one of train, val and test: remove it from "
                                  "one list, or export into a new directory")
            seen[i] = name
    lists["trainval"] = sorted({*lists["train"], *lists["val"]})
    return {sets / f"{n}.txt": "".join(f"{i}\n" for i in lists[n]) for n in SPLIT_LISTS}, moved


@dataclass
class Part:
    """One partition's share of the export: the frames it writes and where."""

    corruption: str
    severity: int
    root: Path
    ids: list[str]
    full: bool  # a whole data root (velodyne, calib, label_2, ImageSets, links) or Robo3D's velodyne(+label_2)
    labels: bool  # writes label_2: always in a data root; in Robo3D's layout only where the corruption moved boxes
    image_sets: dict[Path, str] = field(default_factory=dict)
    links: dict[Path, Path] = field(default_factory=dict)  # link → target

    def kitti_dirs(self) -> list[Path]:
        """The directories of KITTI files this part writes in: a dataset's own where no export wrote them."""
        if self.full:
            return [self.root / "ImageSets", *(self.root / "training" / d for d in ("velodyne", "calib", "label_2"))]
        return [self.root / "velodyne", self.root / "label_2"]

    def files(self) -> Iterator[Path]:
        base = self.root / "training" if self.full else self.root
        for i in self.ids:
            yield base / "velodyne" / f"{i}.bin"
            if self.full:
                yield base / "calib" / f"{i}.txt"
            if self.labels:
                yield base / "label_2" / f"{i}.txt"
        yield from self.image_sets


@contextmanager
def shard_read(ds: Version) -> Iterator[None]:
    """A shard's read error that names only the file and pyarrow's words ("Unknown encoding type for levels", a
    damaged page header, which no page checksum covers) as an `ExportError` that also says how to check the
    version; the reader's own errors (`IntegrityError`, `MissingFile`) already say it."""
    try:
        yield
    except OSError as e:
        if isinstance(e, BenchBuildError):
            raise
        raise ExportError(unreadable(e, ds.url)) from None


def _rows(ds: Version, corruption: str, severity: int, wanted: set[str] | None) -> \
        list[tuple[str, str, Boxes | None, Calib | None]]:
    """(key, frame id, boxes, calib) of a partition's examples, from those columns only (no points are read).
    A calibration matrix of another length (a page header, which no page checksum covers, damaged so that its
    list lengths decode otherwise) is refused as the reader refuses it (`check_calib`), naming file and row."""

    rows = []
    for entry in ds.shards(corruption, severity):
        with shard_read(ds):
            f = ds.open_file(entry["path"])
            t = f.read(columns=["key", "frame_id", "boxes", "calib"])
        for i, (key, fid, boxes, calib) in enumerate(zip(t["key"].to_pylist(), t["frame_id"].to_pylist(),
                                                         t["boxes"].to_pylist(), t["calib"].to_pylist(),
                                                         strict=True)):
            check_calib(calib, f.where, i, key, ds.url)
            if wanted is None or fid in wanted:
                if fid in ("", ".", "..") or any(ch in fid for ch in "/\\\0"):
                    raise ExportError(f"{key}: frame id {fid!r} is not a plain file name; it cannot name a KITTI "
                                      "file (rebuild from a source whose frame ids are plain names)")
                rows.append((key, fid, decode_boxes(boxes), decode_calib(calib)))
    return rows


def _part(ds: Version, corruption: str, severity: int, root: Path, *, full: bool, wanted: set[str] | None,
          clean: dict[str, Boxes | None] | None = None) -> tuple[Part, dict[str, Boxes | None], list[str]]:
    """The part, its boxes by frame id, and its frames with no labelled object; every label and calib file it
    writes is formatted once here so that a frame that cannot be exported stops the export before it starts."""
    rows = _rows(ds, corruption, severity, wanted)
    if not rows:  # a velodyne-only partition too: --all wrote it empty, "0 frames", and exited 0
        where, files = ds.where(MANIFEST_NAME), len(ds.shards(corruption, severity))
        if not files:
            why = f"{where} lists no file of it (an edited or damaged manifest: re-pull the version, or rebuild it)"
        elif wanted is not None:
            why = f"none of the requested frames is in its {files} files listed in {where}"
        else:
            why = f"its {files} files listed in {where} hold no rows"
        raise ExportError(f"partition {corruption}/{severity} has no frames to export: {why}; nothing was written")
    boxes = {fid: b for _, fid, b, _ in rows}
    labels = full or (clean is not None and any(not boxes_equal(b, clean.get(fid)) for fid, b in boxes.items()))
    empty = []
    for key, fid, b, calib in rows:
        if full:
            calib_text(key, calib)
        if labels and not label_text(key, b, calib):
            empty.append(fid)
    return Part(corruption, severity, root, [fid for _, fid, _, _ in rows], full, labels), boxes, empty


def _source_dirs(source: str | Path, ids: set[str]) -> tuple[Path, Path | None]:
    """(image_2, planes or None) of a KITTI source, refused unless every exported frame has its image."""
    src = Path(source).resolve()
    if not src.is_dir():  # a mistyped path: not a KITTI root without images
        what = "is not a directory" if src.exists() else "does not exist"
        raise ExportError(f"--source {source} {what}: give the KITTI object root that holds training/image_2")
    base = src / "training" if (src / "training").is_dir() else src
    img = base / "image_2"
    if not img.is_dir():
        raise ExportError(f"--source {source}: no training/image_2 directory to link (OpenPCDet needs the left colour "
                          "images of the frames: the KITTI object 'data_object_image_2' download)")
    missing = sorted(i for i in ids if not (img / f"{i}.png").is_file())
    if missing:
        raise ExportError(f"{img}: {len(missing)} of {len(ids)} exported frames have no image, e.g. "
                          + ", ".join(f"{m}.png" for m in missing[:5]))
    return img, (base / "planes" if (base / "planes").is_dir() else None)


def out_dir_or_ancestor(out: Path) -> Path:
    """The nearest existing one of OUT and its ancestors; refused unless it is a directory."""
    if (p := nearest_existing(out)).is_dir():
        return p
    what = "a broken link" if p.is_symlink() else "a file"
    if p == out:
        raise ExportError(f"{out} is {what}, not a directory: export writes a tree of KITTI files; give a "
                          "new or empty directory")
    raise ExportError(f"{out}: {p} is {what}, not a directory, so {out} cannot be created; give a new or "
                      "empty directory")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _manifest_names(d: Path) -> tuple[str, str] | None:
    """The dataset and version the ``manifest.json`` in ``d`` names, or None when it has none that does (none,
    unreadable, not JSON, or another tool's: a web app's ``manifest.json``)."""
    try:
        manifest = json.loads((d / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    dataset, version = manifest.get("dataset"), manifest.get("version")
    return (dataset, version) if isinstance(dataset, str) and isinstance(version, str) else None


def _built_here(v: Path) -> bool:
    """Whether ``v`` is a built version in its output root's layout (``<benchmark>/<version>``, named as its
    manifest says, as `bench-build run --out` and `bench-build pull --out` make them): a copy of a version
    elsewhere (``backup/v``) does not make its folder's parent a store."""
    return _manifest_names(v) == (v.parent.name, v.name)


def _versions_below(root: Path) -> list[str]:
    """The built versions of an output root ``root`` (``<benchmark>/<version>`` below it), as those paths."""
    found = []
    with contextlib.suppress(OSError):
        for bench in sorted(os.scandir(root), key=lambda e: e.name):
            if not bench.is_dir() or bench.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                found += [f"{bench.name}/{v.name}" for v in sorted(os.scandir(bench.path), key=lambda e: e.name)
                          if v.is_dir() and _built_here(Path(v.path))]
    return found


def _is_version(d: Path) -> bool:
    """Whether ``d`` is a bench-build version folder: an unfinished build's ledger, or a manifest naming a dataset
    and a version (an unrelated ``manifest.json`` above OUT, a web app's, is none)."""
    return (d / LEDGER_DIR).is_dir() or _manifest_names(d) is not None


def check_not_in_store(out: Path) -> None:
    """Refuse (ExportError) an OUT that is, or lies inside, a version folder, or is an output root of built versions
    (``<benchmark>/<version>/manifest.json`` below it) or one of its benchmark folders: ``--all`` wrote
    ``<benchmark>/clean`` and ``<benchmark>/<corruption>/…`` beside the version folders, and one partition its
    ``training/`` and ``ImageSets/`` among them, where every command reads versions. A folder of its own inside an
    output root (``bench-out/exports``) is not refused."""
    real = Path(os.path.realpath(out))
    for d in (real, *real.parents):
        if _is_version(d):
            what = "a version folder" if d == real else f"inside the version folder {d}"
            raise ExportError(f"{out} is {what}: export would write its KITTI files among the version's own "
                              "(--force does not change this); export to a directory outside it")
    for d in (real, real.parent):
        versions = [v for v in _versions_below(d) if d == real or v.partition("/")[0] == real.name]
        if versions:
            what = "an output root" if d == real else f"a benchmark folder of {d}, an output root"
            more = f" and {len(versions) - 1} more" if len(versions) > 1 else ""
            raise ExportError(f"{out} is {what} of built versions ({versions[0]}{more}): export would write its data "
                              "roots beside them (--force does not change this); export to a directory outside it")


def _marked(root: Path, out: Path) -> bool:
    """Whether export's marker is in ``root`` or a folder above it up to ``out``."""
    d = root
    while True:
        if (d / EXPORT_MARKER).is_file():
            return True
        if d == out or d == d.parent:
            return False
        d = d.parent


def check_marked(out: Path, parts: list[Part]) -> None:
    """Refuse (ExportError) a data root that holds KITTI files no export wrote (no `EXPORT_MARKER`): a dataset's
    own root (``/data/kitti``) given as OUT, whose raw scans, labels and calibrations --force would replace."""
    for part in parts:
        found = [d for d in part.kitti_dirs() if os.path.lexists(d)]
        if not found or _marked(part.root, out):
            continue
        where = f"{out}" if part.root == out else f"{out}: {part.root}"
        raise ExportError(f"{where} holds KITTI files ({found[0].relative_to(part.root)}/) but no {EXPORT_MARKER} "
                          "file, so no export wrote them: it may be a dataset's own root, whose scans, labels and "
                          "calibrations export would replace (--force too); export into a new or empty directory "
                          f"(an export made before export marked its roots: create {out / EXPORT_MARKER}, then run "
                          "again)")


def check_targets(out: Path, parts: list[Part], protected: list[tuple[str, Path]], force: bool) -> list[Path]:
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
    check_not_in_store(out)
    ancestor = out_dir_or_ancestor(out)
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
    for d in sorted(dirs, key=lambda d: len(d.parts)):  # parents first: the first one outside is the link
        if not _inside(dirs[d], out_real):
            raise ExportError(f"{d} is a link to {dirs[d]}, outside {out}: export writes only inside OUT, and "
                              "--force would replace the files it writes there; remove the link, or export into "
                              "that directory's own root (--force does not change this)")
    existing = {d for d in dirs if os.path.lexists(d)}
    for d in sorted(existing):
        if not d.is_dir():
            raise ExportError(f"{d} is {'a broken link' if d.is_symlink() else 'a file'}, not a directory: export "
                              "writes files inside it; move it away or export elsewhere")
    for d in sorted({ancestor, *existing}):
        if not os.access(d, os.W_OK | os.X_OK):
            raise ExportError(f"Permission denied: cannot create files in {d}; make it writable or export elsewhere")
        if (why := cannot_create(d, "export")) is not None:
            raise ExportError(f"{out}: cannot create files in {d} ({why}); export to a directory on a writable disk")
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
    check_marked(out, parts)
    if not force and out.is_dir():
        entries = sorted(os.listdir(out))
        if entries:
            raise ExportError(f"{out} is not empty ({len(entries)} entries, e.g. {entries[0]}): export into a new or "
                              f"empty directory, or add --force to replace only the files it writes ({len(replace)} "
                              "of them exist there) and keep everything else")
    return replace


def plan(ds: Version, manifest: dict[str, Any], out: Path, *, corruption: str | None, severity: int | None,
          all_partitions: bool, source: str | Path | None, split: str, layout: str, frames: Iterable[str] | None,
          force: bool, result: ExportResult) -> list[Part]:
    wanted = None if frames is None else set(frames)
    fields = manifest.get("fields")
    if fields is not None and not set(VELODYNE_FIELDS) <= set(fields):
        raise ExportError(f"{ds.url}: KITTI velodyne files need x, y, z, intensity; the build has "
                          f"{', '.join(fields)}")
    if not all_partitions:
        c, s = check_partition(manifest, corruption, severity)
        check_held(ds.url, manifest, [(c, s)], all_partitions)
        first, _, empty = _part(ds, c, s, out, full=True, wanted=wanted)
        parts = [first]
    else:
        check_held(ds.url, manifest, [("clean", 0)] + [(c["name"], s) for c in manifest["recipe"]["corruptions"]
                                                       for s in range(1, manifest["recipe"]["severities"] + 1)],
                   all_partitions)
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
    moved: dict[str, int] = {}
    for p in full:
        # the converters open all of these; without --force OUT is new or empty (check_targets), so none is there
        p.image_sets, m = image_sets(p.root / "ImageSets", split, p.ids, keep=force)
        for name, n in m.items():
            moved[name] = moved.get(name, 0) + n
        if linked is not None:
            p.links[p.root / "training" / "image_2"] = linked[0]
            if linked[1] is not None:
                p.links[p.root / "training" / "planes"] = linked[1]
    if moved:
        left = ", ".join(f"{n} of the exported frames left {name}.txt" for name, n in sorted(moved.items()))
        result.notes.append(f"ImageSets: {left} (they are now in {split}.txt only: a frame is in one of train, val, "
                            "test; trainval.txt = train ∪ val)")
    if source is None:
        why = ("OpenPCDet's KittiDataset.get_infos and mmdetection3d's kitti converter read training/image_2/<id>.png "
               "(image shape, field of view). Re-run with --source <KITTI object root> (the directory holding "
               "training/image_2), or link it")
        planes = "training/planes (road planes, optional: only for GT sampling with USE_ROAD_PLANE) likewise."
        if len(full) == 1:
            image_dir = first.root / "training" / "image_2"
            result.notes.append(f"{image_dir} not written: {why}: ln -s <kitti>/training/image_2 {image_dir}. {planes}")
        else:  # --all --layout kitti: every partition is a data root of its own
            bench = shlex.quote(str(out / manifest["dataset"]))
            result.notes.append(
                f"training/image_2 not written in any of the {len(full)} data roots ({bench}/clean and "
                f"{bench}/<corruption>/<severity>): {why} into each: for t in {bench}/clean/training "
                f"{bench}/*/*/training; do ln -s <kitti>/training/image_2 \"$t/image_2\"; done. {planes}")
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

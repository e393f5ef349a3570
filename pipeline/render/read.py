"""Reading views from a build: one frame of every partition, and writing the build's contact sheet."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench_build.format.checked import CheckedParquetFile, check_entry, missing_file
from bench_build.format.compact import materialize
from bench_build.format.schema import decode_boxes, file_metadata
from bench_build.manifests.partial import held_partitions, partial_of, parts_text, pull_command
from bench_build.manifests.recipe import severity_names
from bench_build.render.panels import Panel, sheet_panels
from bench_build.render.sheet import panels_sheet
from bench_build.render.views import SHEET_NAME, RenderError, View, semantic_classes
from bench_build.sources.labels import map_labels
from bench_build.storage import NotFound


def _points_xyz(column: pa.ChunkedArray | pa.Array, width: int) -> list[np.ndarray]:
    """Per-row (N, 3) xyz from a ``points`` column: flat ``list<float32>`` (row-major N×C, layout v1) or
    ``list<fixed_size_list<float32, C>>`` (layout v2)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    out = []
    for i in range(len(arr)):
        item = arr[i].values
        if pa.types.is_fixed_size_list(item.type):
            w = item.type.list_size
            flat = item.values.to_numpy(zero_copy_only=False)
        else:
            w = width
            flat = item.to_numpy(zero_copy_only=False)
        out.append(flat.reshape(-1, w)[:, :3].astype(np.float64))
    return out


def _tags(column) -> list[np.ndarray]:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    out = []
    for i in range(len(arr)):
        v = arr[i].values
        if pa.types.is_fixed_size_list(v.type):
            v = v.values
        out.append(v.to_numpy(zero_copy_only=False).astype(np.uint8))
    return out


def _rg_may_hold(pf: pq.ParquetFile, rg: int, frame_id: str) -> bool:
    idx = pf.schema_arrow.get_field_index("frame_id")
    if idx < 0:
        return True
    col = pf.metadata.row_group(rg).column(idx)
    st = col.statistics
    if st is None or not st.has_min_max:
        return True
    return st.min <= frame_id <= st.max


@contextmanager
def _checked(store, entry: dict[str, Any]) -> Iterator[CheckedParquetFile]:
    """The version file of the manifest ``entry``, checked against it (its size and row count where it gives them,
    as every built manifest does: another file put in its place) and with its pages' checksums verified: a missing,
    replaced or damaged file is an `IntegrityError` naming it, never a traceback or a picture of other points."""
    rel, where = entry["path"], store.key_url(entry["path"])
    try:
        f = store.open_input(rel)
    except (FileNotFoundError, NotFound):
        raise missing_file(where, store.url) from None
    with f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        check_entry(entry, where, store.url, size=size)
        pf = CheckedParquetFile(f, where, version=store.url, page_checksum_verification=True)
        check_entry(entry, where, store.url, rows=pf.metadata.num_rows)
        yield pf


def _clean_xyz(store, manifest: dict[str, Any], entry: dict[str, Any], frame_id: str, width: int) -> np.ndarray:
    """xyz of ``frame_id`` in the clean file of ``entry``'s shard (what a compact-encoded row refers to)."""
    clean = next((s for s in manifest["shards"] if s["corruption"] == "clean" and s.get("shard") == entry.get("shard")),
                 None)
    if clean is None:
        raise RenderError(f"{entry['path']} is compact-encoded but its shard's clean file is not in the manifest")
    with _checked(store, clean) as pf:
        t = pf.read(columns=["frame_id", "points"])
    t = t.filter(pc.equal(t["frame_id"], frame_id))
    return _points_xyz(t["points"], width)[0]


#: threads reading a local version's files for `read_views` (pyarrow decodes and decompresses outside the GIL)
READ_THREADS = 8


def read_views(store, manifest: dict[str, Any], frame_id: str | None = None, *,
               partitions: Iterable[tuple[str, int]] | None = None,
               semantic: tuple[np.ndarray, tuple[str, ...]] | None = None) -> tuple[str, list[View]]:
    """The views of one frame (default: the first frame of the first shard) in every (or the given)
    partition, reading only the row groups whose statistics can hold it. A local version's files are read on
    threads; the views are the same, in the same order, as read one by one. ``semantic``: (raw label → class
    LUT, class names) of `semantic_classes`, to read each point's class too (colour by semantic). The clean
    view carries its points' classes whenever the build has them: a scan without boxes zooms on them
    (`zoom.sheet_focus`)."""
    wanted = None if partitions is None else set(partitions)
    labels = semantic_classes(manifest.get("source"))
    shards = manifest["shards"]
    if not shards:
        raise RenderError("the version has no shards")
    first_shard = shards[0].get("shard") or Path(shards[0]["path"]).stem
    width = len(manifest.get("fields") or ["x", "y", "z", "intensity"])
    todo = []
    for s in shards:
        part = (s["corruption"], int(s["severity"]))
        if wanted is not None and part not in wanted and not (part[0] == "clean" and ("clean", 0) in wanted):
            continue
        if frame_id is None and (s.get("shard") or Path(s["path"]).stem) != first_shard:
            continue
        todo.append(s)
    files = len(todo)
    views: list[View] = []
    if frame_id is None:  # the first file that has a row names the frame
        while todo and frame_id is None:
            s = todo.pop(0)
            frame_id, view = _read_view(store, manifest, s, None, width, _labels_for(s, semantic, labels))
            views += [view] if view is not None else []
    if todo:
        threads = min(READ_THREADS, os.cpu_count() or 1, len(todo)) if store.is_local else 1
        with ThreadPoolExecutor(threads) as pool:
            found = list(pool.map(lambda s: _read_view(store, manifest, s, frame_id, width,
                                                       _labels_for(s, semantic, labels))[1], todo))
        views += [v for v in found if v is not None]
    if not views:
        if not files:  # no file of the requested partitions is in the version (a partial pull)
            held = parts_text(held_partitions(manifest))
            raise RenderError(f"{store.url} holds none of the requested partitions"
                              + (f" ({parts_text(sorted(wanted))})" if wanted else "") + f"; it holds {held}")
        known = [f for fs in (manifest.get("shard_frames") or {}).values() for f in fs]
        hint = "" if not known or frame_id in known else \
            f"; its frames: {', '.join(known[:3])}{', …' if len(known) > 3 else ''} ({len(known)})"
        what = "no frame" if frame_id is None else f"frame {frame_id!r}"
        raise RenderError(f"{what} is not in the requested partitions of {store.url}{hint}")
    return frame_id, sort_views(views, manifest)  # type: ignore[return-value]


def _labels_for(s: dict[str, Any], semantic, labels):
    """The classes to read with the manifest entry ``s``'s view: ``semantic`` (colour by them) if given, else
    the build's ``labels`` for the clean partition (its zoom) and none for the others."""
    return semantic if semantic is not None else (labels if s["corruption"] == "clean" else None)


def _read_view(store, manifest: dict[str, Any], s: dict[str, Any], frame_id: str | None, width: int,
               semantic: tuple[np.ndarray, tuple[str, ...]] | None = None) -> tuple[str | None, View | None]:
    """(frame id, its view) from the manifest entry ``s``'s file: ``frame_id``, or the file's first row's frame
    when None; the view is None if the file does not hold that frame."""
    part = (s["corruption"], int(s["severity"]))
    with _checked(store, s) as pf:
        meta = file_metadata(pf.schema_arrow)
        w = len(meta.get("fields") or []) or width
        wanted = (("frame_id", "points", "point_ref", "point_tag", "boxes") + (("semantic",) if semantic else ())
                  + (("instance",) if semantic and part[0] == "clean" else ()))  # the zoom's object: clean only
        cols = [c for c in wanted if c in pf.schema_arrow.names]
        for rg in range(pf.num_row_groups):
            if frame_id is not None and not _rg_may_hold(pf, rg, frame_id):
                continue
            t = pf.read_row_group(rg, columns=cols)
            if frame_id is None and t.num_rows:
                frame_id = t["frame_id"][0].as_py()
            t = t.filter(pc.equal(t["frame_id"], frame_id))
            if t.num_rows == 0:
                continue
            pts = _points_xyz(t["points"], w)[0]
            if "point_ref" in t.column_names and t["point_ref"][0].is_valid:  # compact: refs into clean
                clean = _clean_xyz(store, manifest, s, frame_id, width)
                ref = np.asarray(t["point_ref"][0].as_py(), dtype=np.int32)
                pts = materialize(ref, pts.astype(np.float32), clean.astype(np.float32)).astype(np.float64)
            tags = _tags(t["point_tag"])[0] if "point_tag" in t.column_names else np.zeros(len(pts), np.uint8)
            boxes = decode_boxes(t["boxes"][0].as_py()) if "boxes" in t.column_names else None
            is_object = boxes is None and (len(pts) == 0 or float(np.abs(pts).max()) <= 5.0)
            if semantic is None:
                return frame_id, View(part[0], part[1], pts, tags, boxes, is_object)
            lut, names = semantic
            raw = t["semantic"][0] if "semantic" in t.column_names else None
            if raw is None or not raw.is_valid:  # a frame without labels (null): every point unlabelled
                cls = np.zeros(len(pts), np.int32)
            else:
                cls = map_labels(raw.values.to_numpy(zero_copy_only=False), lut)
                if len(cls) != len(pts):
                    raise RenderError(f"{s['path']}: frame {frame_id} has {len(cls)} semantic labels for "
                                      f"{len(pts)} points")
            ids = t["instance"][0] if "instance" in t.column_names else None
            inst = ids.values.to_numpy(zero_copy_only=False) if ids is not None and ids.is_valid else None
            if inst is not None and len(inst) != len(pts):
                raise RenderError(f"{s['path']}: frame {frame_id} has {len(inst)} instance ids for {len(pts)} points")
            return frame_id, View(part[0], part[1], pts, tags, boxes, is_object, cls, names, inst)
    return frame_id, None


#: what a picture of a folder without the clean partition says instead of its zoom
NO_CLEAN_SHORT = ("no clean partition in this folder{why}, so no zoom compares with it: pull --corruption clean to "
                  "compare")


def no_clean_note(root: Path, manifest: dict[str, Any]) -> tuple[str, str]:
    """(the line a picture draws, the console note) when ``root`` holds no clean partition: nothing is compared
    with clean, and the note says how to add it."""
    partial = partial_of(manifest)
    short = NO_CLEAN_SHORT.format(why=" (a partial pull)" if partial else "")
    held = parts_text(held_partitions(manifest))
    long = (f"no clean partition in {root}" + (f" ({partial}: it holds {held})" if partial else "")
            + ": no zoom compares with clean, and the pictures share the first partition's extent"
            + (f"; `{pull_command(root, manifest, 'clean', None)}` adds it" if partial else ""))
    return short, long


def missing_partitions(root: Path, manifest: dict[str, Any], wanted: list[tuple[str, int]],
                       corruption: str | None, severity: int | None) -> tuple[list[tuple[str, int]], str | None]:
    """(the ``wanted`` partitions ``root`` holds, what to say of those it lacks: None if it lacks none).

    A version's recipe defines every partition; a partial pull holds some. When it holds none of ``wanted``
    the caller refuses with the message; else it renders what is there and notes the rest."""
    held = set(held_partitions(manifest))
    present = [p for p in wanted if p in held]
    missing = [p for p in wanted if p not in held]
    if not missing:
        return present, None
    partial = partial_of(manifest)
    verb = "is" if len(missing) == 1 else "are"
    where = f"this folder ({root}): {partial}" if partial else str(root)
    msg = f"{parts_text(missing)} {verb} not in {where}; it holds {parts_text(held_partitions(manifest))}"
    if partial:
        msg += f" (`{pull_command(root, manifest, corruption, severity)}` adds {'it' if len(missing) == 1 else 'them'})"
    return present, msg


def sort_views(views, manifest: dict[str, Any]):
    """Clean first, then the recipe's corruption order, then severity (views or panels)."""
    order = {c["name"]: i for i, c in enumerate(manifest.get("recipe", {}).get("corruptions", []))}
    return sorted(views, key=lambda v: (v.corruption != "clean", order.get(v.corruption, 1 << 20), v.corruption,
                                        v.severity))


def sheet_frame(manifest: dict[str, Any]) -> str | None:
    """The frame a version's contact sheet shows by default: the first frame of its first shard."""
    shards = manifest.get("shards") or []
    if not shards:
        return None
    first = shards[0].get("shard") or Path(shards[0]["path"]).stem
    ids = (manifest.get("shard_frames") or {}).get(first)
    return ids[0] if ids else None


def write_contact_sheet(store, manifest: dict[str, Any], *, frame_id: str | None = None, color_by: str = "tag",
                        key: str = SHEET_NAME, panels: dict[tuple[str, int], Panel] | None = None,
                        ) -> dict[str, Any]:
    """Render the contact sheet of a version into ``store`` at ``key``; returns what the card says of it.

    ``panels``: the default frame's panels, painted by the build tasks that held it in memory
    (`bench_build.build.shard`); used when they cover every partition of the version, else the views are read
    back from the files."""

    names = severity_names(manifest)
    default = sheet_frame(manifest)
    parts = {(s["corruption"], int(s["severity"])) for s in manifest.get("shards", [])}
    if panels and frame_id in (None, default) and default is not None and set(panels) == parts:
        frame_id = default
        painted = sort_views(panels.values(), manifest)
        t0 = time.perf_counter()
    else:
        frame_id, views = read_views(store, manifest, frame_id)
        t0 = time.perf_counter()
        painted = sheet_panels(views, color_by=color_by)
    data, _ = panels_sheet(painted, frame_id=frame_id, color_by=color_by, severity_names=names)
    per_panel = (time.perf_counter() - t0) / max(len(painted), 1)
    store.put_bytes(key, data)
    objects = any(p.image.shape[1] != p.image.shape[0] for p in painted)  # three views side by side
    zoom = next((p.zoom_of for p in painted if p.inset is not None), None)
    return {"path": key, "frame_id": frame_id, "panels": len(painted), "seconds_per_panel": round(per_panel, 3),
            "color_by": color_by, "objects": objects, "zoom": zoom}


def file_part(frame_id: str) -> str:
    """A frame id as part of a file name: object ids are ``<split>/<index>``, not a folder."""
    return frame_id.replace("/", "_").replace("\\", "_")


def default_render_dir(manifest: dict[str, Any]) -> Path:
    """Where `bench-build render` writes without ``--out``: ``./renders-<benchmark>-<version>`` in the current
    directory. Never the version's own ``renders/``: `publish` uploads that folder, and its manifest lists
    only the build's contact sheet."""
    name = manifest.get("dataset") or manifest.get("recipe", {}).get("name") or "version"
    return Path(f"renders-{name}-{manifest.get('version', 'unknown')}")

"""Source readers. Each lists frame ids cheaply in a stable order and reads one frame into a `Frame`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from bench_build.errors import UsageError
from bench_build.manifests.names import frame_id_message, frame_id_problem
from bench_build.manifests.recipe import Recipe, RecipeError
from bench_build.sources.base import Source, SourceError
from bench_build.sources.demo.cache import ensure_demo_dataset
from bench_build.sources.demo.objects import DEMO_PARTS, ensure_demo_objects
from bench_build.sources.kitti import KittiSource
from bench_build.sources.nuscenes import NuScenesSource
from bench_build.sources.registry import READERS, ReaderInfo
from bench_build.sources.semantickitti import SemanticKittiSource
from bench_build.sources.wads import WadsSource
from bench_build.sources.waymo import WaymoSource

#: every registered kind → its reader class (scene and object readers; the table itself is `READERS`)
SOURCE_KINDS = {kind: info.reader for kind, info in READERS.items()}
#: Object sources (classification benchmarks); their demo is `bench_build.sources.demo.objects`. "3dos" reads
#: three datasets, each root given by --source (a folder holding all three) or --source-<name>.
OBJECT_KINDS = tuple(kind for kind, info in READERS.items() if info.objects)


def _open_objects(recipe: Recipe, info: ReaderInfo, path: str | Path | None, split: str | None,
                  roots: dict[str, str]) -> Source:
    bad = sorted(set(roots) - set(info.parts))
    if bad:
        raise UsageError(f"recipe {recipe.name}: source kind {recipe.source!r} takes no --source-{bad[0]}")
    needed = info.parts or (info.kind,)
    if path is None and len(roots) < len(needed):
        # roots not given default to the demo objects (only the datasets the recipe reads are generated)
        path = ensure_demo_objects(tuple(d for d in needed if d in DEMO_PARTS and d not in roots))
    if info.parts:
        return info.reader(path, **roots, **recipe.source_options)
    return info.reader(path, split or recipe.split)


def open_source(recipe: Recipe, path: str | Path | None, *, split: str | None = None,
                demo_frames: int = 8, roots: dict[str, str] | None = None,
                allow_empty: bool = False) -> Source:
    """The recipe's source at ``path``; without a path, the generated demo data in the reader's own layout
    (`ReaderInfo.write_demo`), or the demo objects of `bench_build.sources.demo.objects` for object benchmarks.
    ``roots`` names the dataset roots of a composite source (3dos: shapenet, modelnet40, scanobjectnn).

    ``allow_empty``: accept 0-byte scans as frames with no points instead of failing their shard, for the
    readers of KITTI's velodyne record (`ReaderInfo.allow_empty`: kitti, semantickitti, wads)."""
    # absolute: the source travels to Ray workers, whose working directory is not the driver's on a joined cluster
    roots = {k: os.path.abspath(v) for k, v in (roots or {}).items() if v}
    path = os.path.abspath(path) if path is not None else None
    info = READERS.get(recipe.source)
    if info is None:
        raise RecipeError(f"{recipe.origin or 'recipe ' + recipe.name}: [benchmark] source {recipe.source!r} is not "
                          f"a known source kind (known: {', '.join(sorted(SOURCE_KINDS))})")
    check_split = _split_check(recipe, info, split)
    check_split(None)  # what the format fixes, before any data is read or generated
    if info.objects:
        return _open_objects(recipe, info, path, split, roots)
    if roots:
        raise UsageError(f"recipe {recipe.name}: source kind {recipe.source!r} takes only --source")
    if path is None:
        if info.write_demo is None:
            raise UsageError(f"recipe {recipe.name}: no demo data for source kind {recipe.source!r}; pass --source")
        root = ensure_demo_dataset(info.kind, info.write_demo, demo_frames, version=info.demo_version)
        # the recipe's options as with real data: they are in its fingerprint, so a demo build must use them too
        src = info.reader(root, (split or recipe.split) if info.demo_takes_recipe_split else split,
                          **recipe.source_options)
    else:
        empty = {"allow_empty": True} if allow_empty and info.allow_empty else {}
        src = info.reader(path, split or recipe.split, **recipe.source_options, **empty)
    check_split(Path(getattr(src, "root", None) or path or root))  # against the data: KITTI's ImageSets lists
    return src


def _split_check(recipe: Recipe, info: ReaderInfo, split: str | None) -> Callable[[Path | None], None]:
    """``check(root)``: refuses the build's split (``--split``, else the recipe's) when the reader's `split_problem`
    says it is none of the format's splits: a `UsageError` naming --split, or a `RecipeError` naming the recipe
    file. Run before any work, so a typo (``split = "trainig"``) never builds other frames than it names."""
    chosen = split if split is not None else recipe.split

    def check(root: Path | None) -> None:
        if chosen is None or info.split_problem is None or (why := info.split_problem(root, chosen)) is None:
            return
        if split is not None:
            raise UsageError(f"--split {chosen!r} {why}")
        raise RecipeError(f"{recipe.origin or 'recipe ' + recipe.name}: [benchmark] split {chosen!r} {why}")
    return check


def checked_frame_ids(src: Source, frame_ids: list[str]) -> list[str]:
    """``frame_ids`` if every one is a safe frame id (`bench_build.manifests.names`: safe names joined by '/'), else a
    SourceError naming the source and the first bad id. Frame ids become file names (KITTI reads
    ``velodyne/<id>.bin``, `export` writes them), so a build refuses an unsafe one before any work starts."""
    for fid in frame_ids:
        if (why := frame_id_problem(fid)) is not None:
            where = getattr(src, "root", None) or f"{src.kind} source"
            raise SourceError(where, frame_id_message(fid, why))
    return frame_ids


__all__ = ["OBJECT_KINDS", "READERS", "SOURCE_KINDS", "KittiSource", "NuScenesSource", "ReaderInfo",
           "SemanticKittiSource", "Source", "SourceError", "WadsSource", "WaymoSource", "checked_frame_ids",
           "open_source"]

"""Source readers. Each lists frame ids cheaply in a stable order and reads one frame into a `Frame`."""

from __future__ import annotations

from pathlib import Path

from bench_build.manifests.names import frame_id_message, frame_id_problem
from bench_build.manifests.recipe import Recipe
from bench_build.sources.base import Source, SourceError
from bench_build.sources.kitti import KittiSource
from bench_build.sources.modelnet import ModelNet40H5Source
from bench_build.sources.nuscenes import NuScenesSource
from bench_build.sources.semantickitti import SemanticKittiSource
from bench_build.sources.wads import WadsSource
from bench_build.sources.waymo import WaymoSource

SOURCE_KINDS = {"kitti": KittiSource, "semantickitti": SemanticKittiSource, "nuscenes": NuScenesSource,
                "waymo": WaymoSource, "modelnet40": ModelNet40H5Source, "wads": WadsSource}
#: Object sources (classification benchmarks); their demo is `bench_build.sources.demo_objects`. "3dos" reads
#: three datasets, each root given by --source (a folder holding all three) or --source-<name>.
OBJECT_KINDS = ("modelnet40", "scanobjectnn", "shapenet", "3dos")
COMPOSITE_ROOTS = {"3dos": ("shapenet", "modelnet40", "scanobjectnn")}


def _object_source(kind: str, path: str | Path, split: str | None, roots: dict[str, str],
                   options: dict[str, str] | None = None) -> Source:
    if kind == "3dos":
        from bench_build.sources.threedos import ThreeDOSSource

        return ThreeDOSSource(path, **roots, **(options or {}))
    if kind == "scanobjectnn":
        from bench_build.sources.scanobjectnn import ScanObjectNNSource

        return ScanObjectNNSource(path, split)
    if kind == "shapenet":
        from bench_build.sources.shapenet import ShapeNetCoreSource

        return ShapeNetCoreSource(path, split)
    return ModelNet40H5Source(path, split)

#: source kinds whose demo data is written in their own real layout by `synthetic.ensure_demo_dataset`
DEMO_KINDS = ("semantickitti", "nuscenes", "waymo")


def open_source(recipe: Recipe, path: str | Path | None, *, split: str | None = None,
                demo_frames: int = 8, roots: dict[str, str] | None = None,
                allow_empty: bool = False) -> Source:
    """The recipe's source at ``path``; without a path, the generated demo data (KITTI layout, the real
    SemanticKITTI / nuScenes / Waymo v2 layout for those kinds, or the demo objects of
    `bench_build.sources.demo_objects` for object benchmarks). ``roots`` names the dataset roots of a
    composite source (3dos: shapenet, modelnet40, scanobjectnn).

    ``allow_empty``: accept 0-point scans (KITTI layout) instead of failing their shard."""
    roots = {k: v for k, v in (roots or {}).items() if v}
    if recipe.source in OBJECT_KINDS:
        bad = sorted(set(roots) - set(COMPOSITE_ROOTS.get(recipe.source, ())))
        if bad:
            raise ValueError(f"recipe {recipe.name}: source kind {recipe.source!r} takes no --source-{bad[0]}")
        if path is None and len(roots) < len(COMPOSITE_ROOTS.get(recipe.source, ("",))):
            from bench_build.sources.demo_objects import DEMO_PARTS, ensure_demo_objects

            needed = COMPOSITE_ROOTS.get(recipe.source, (recipe.source,))
            # roots not given default to the demo objects (only the datasets the recipe reads are generated)
            path = ensure_demo_objects(tuple(d for d in needed if d in DEMO_PARTS and d not in roots))
        return _object_source(recipe.source, path, split or recipe.split, roots, recipe.source_options)
    if roots:
        raise ValueError(f"recipe {recipe.name}: source kind {recipe.source!r} takes only --source")
    if recipe.source not in SOURCE_KINDS:
        raise ValueError(f"recipe {recipe.name}: unknown source kind {recipe.source!r} "
                         f"(known: {', '.join(sorted(SOURCE_KINDS))})")
    if path is None and recipe.source in DEMO_KINDS:
        from bench_build.sources.synthetic import ensure_demo_dataset

        path = ensure_demo_dataset(recipe.source, demo_frames)
    if path is None:
        if recipe.source != "kitti":
            raise ValueError(f"recipe {recipe.name}: no demo data for source kind {recipe.source!r}; pass --source")
        from bench_build.sources.demo import ensure_demo_source

        src = ensure_demo_source(demo_frames)
        if split:
            src = KittiSource(src.root, split)
        return src
    if allow_empty and recipe.source == "kitti":
        return KittiSource(path, split or recipe.split, allow_empty=True)
    if recipe.source == "wads":
        return WadsSource(path, split or recipe.split, **recipe.source_options)
    return SOURCE_KINDS[recipe.source](path, split or recipe.split)


def checked_frame_ids(src: Source, frame_ids: list[str]) -> list[str]:
    """``frame_ids`` if every one is a safe frame id (`bench_build.manifests.names`: safe names joined by '/'), else a
    SourceError naming the source and the first bad id. Frame ids become file names (KITTI reads
    ``velodyne/<id>.bin``, `export` writes them), so a build refuses an unsafe one before any work starts."""
    for fid in frame_ids:
        if (why := frame_id_problem(fid)) is not None:
            where = getattr(src, "root", None) or f"{src.kind} source"
            raise SourceError(where, frame_id_message(fid, why))
    return frame_ids


__all__ = ["OBJECT_KINDS", "SOURCE_KINDS", "KittiSource", "NuScenesSource", "SemanticKittiSource", "Source",
           "SourceError", "WadsSource", "WaymoSource", "checked_frame_ids", "open_source"]

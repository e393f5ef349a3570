"""Source readers. Each lists frame ids cheaply in a stable order and reads one frame into a `Frame`."""

from __future__ import annotations

from pathlib import Path

from manifests.recipe import Recipe
from pipeline.sources.base import Source, SourceError
from pipeline.sources.kitti import KittiSource
from pipeline.sources.nuscenes import NuScenesSource
from pipeline.sources.semantickitti import SemanticKittiSource
from pipeline.sources.waymo import WaymoSource

SOURCE_KINDS = {"kitti": KittiSource, "semantickitti": SemanticKittiSource, "nuscenes": NuScenesSource,
                "waymo": WaymoSource}

#: source kinds whose demo data is written in their own real layout by `synthetic.ensure_demo_dataset`
DEMO_KINDS = ("semantickitti", "nuscenes", "waymo")


def open_source(recipe: Recipe, path: str | Path | None, *, split: str | None = None,
                demo_frames: int = 8) -> Source:
    """The recipe's source at ``path``; without a path, the generated demo data (KITTI layout, or the real
    SemanticKITTI / nuScenes / Waymo v2 layout for those kinds)."""
    if recipe.source not in SOURCE_KINDS:
        raise ValueError(f"recipe {recipe.name}: unknown source kind {recipe.source!r} "
                         f"(known: {', '.join(sorted(SOURCE_KINDS))})")
    if path is None and recipe.source in DEMO_KINDS:
        from pipeline.sources.synthetic import ensure_demo_dataset

        path = ensure_demo_dataset(recipe.source, demo_frames)
    if path is None:
        if recipe.source != "kitti":
            raise ValueError(f"recipe {recipe.name}: no demo data for source kind {recipe.source!r}; pass --source")
        from pipeline.sources.demo import ensure_demo_source

        src = ensure_demo_source(demo_frames)
        if split:
            src = KittiSource(src.root, split)
        return src
    return SOURCE_KINDS[recipe.source](path, split or recipe.split)


__all__ = ["SOURCE_KINDS", "KittiSource", "NuScenesSource", "SemanticKittiSource", "Source", "SourceError",
           "WaymoSource", "open_source"]

"""bench-build: corrupted point-cloud robustness benchmarks, built reproducibly, read and scored.

Everything a user imports is reachable from this one name::

    from bench_build import open_version, PointCloudDataset, score_version, Frame, stage

The names load on first use, so ``import bench_build`` (and ``import bench_build.stages``) stays light: reading
a version imports pyarrow, the PyTorch datasets import torch, nothing else is loaded until asked for.

The installed package is the repository's ``pipeline/`` folder; ``stages/`` and ``manifests/`` are its
subpackages ``bench_build.stages`` and ``bench_build.manifests``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: the module that defines each public name
MODULES = {
    # reading a built or published version
    "bench_build.format.reader": ("open_version", "Version", "Example"),
    "bench_build.format.checked": ("IntegrityError",),
    # PyTorch datasets (need torch)
    "bench_build.loaders": ("PointCloudDataset", "PointCloudIterableDataset", "collate_point_clouds"),
    # scoring predictions with each paper's metrics
    "bench_build.score": ("score_version", "ScoreReport", "METRICS"),
    # the frame model and the stage API, for custom corruptions and recipes
    "bench_build.stages.frame": ("Frame", "Boxes", "Calib", "PointTag"),
    "bench_build.stages.registry": ("Stage", "stage", "get_stage", "all_stages"),
    "bench_build.manifests.recipe": ("Recipe", "RecipeError", "load_recipe", "builtin_recipes"),
    # building, exporting, rendering and storage from Python
    "bench_build.build.run": ("run_build",),
    "bench_build.export": ("export_version",),
    "bench_build.render": ("render_version",),
    "bench_build.storage": ("open_store",),
    # the root of every error bench-build reports
    "bench_build.errors": ("BenchBuildError",),
}
#: public name → the module that defines it
PUBLIC = {name: module for module, names in MODULES.items() for name in names}

__all__ = [  # the names below, as a literal for tools that read it
    "METRICS",
    "BenchBuildError",
    "Boxes",
    "Calib",
    "Example",
    "Frame",
    "IntegrityError",
    "PointCloudDataset",
    "PointCloudIterableDataset",
    "PointTag",
    "Recipe",
    "RecipeError",
    "ScoreReport",
    "Stage",
    "Version",
    "__version__",
    "all_stages",
    "builtin_recipes",
    "collate_point_clouds",
    "export_version",
    "get_stage",
    "load_recipe",
    "open_store",
    "open_version",
    "render_version",
    "run_build",
    "score_version",
    "stage",
]


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


if TYPE_CHECKING:  # what the names are, for type checkers and IDEs
    from bench_build.build.run import run_build
    from bench_build.errors import BenchBuildError
    from bench_build.export import export_version
    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import Example, Version, open_version
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds
    from bench_build.manifests.recipe import Recipe, RecipeError, builtin_recipes, load_recipe
    from bench_build.render import render_version
    from bench_build.score import METRICS, ScoreReport, score_version
    from bench_build.stages.frame import Boxes, Calib, Frame, PointTag
    from bench_build.stages.registry import Stage, all_stages, get_stage, stage
    from bench_build.storage import open_store

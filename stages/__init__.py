"""Corruptions as pure functions over a `Frame`, grouped by family, plus their registry."""

from bench_build.stages.frame import Boxes, Calib, Frame, PointTag
from bench_build.stages.registry import Stage, all_stages, get_stage, stage

__all__ = ["Boxes", "Calib", "Frame", "PointTag", "Stage", "all_stages", "get_stage", "stage"]

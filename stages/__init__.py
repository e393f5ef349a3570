"""Corruptions as pure functions over a `Frame`, grouped by family, plus their registry."""

from stages.frame import Boxes, Calib, Frame, PointTag
from stages.registry import Stage, all_stages, get_stage, stage

__all__ = ["Boxes", "Calib", "Frame", "PointTag", "Stage", "all_stages", "get_stage", "stage"]

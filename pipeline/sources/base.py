"""What every source reader provides: a cheap, stable frame list and a reader for one frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from stages.frame import Frame


class SourceError(ValueError):
    """Malformed or missing source data. The message always names the file and what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class Source(Protocol):
    kind: str
    fields: tuple[str, ...]
    intensity_scale: str
    # Optional: ``columns``, a tuple of the optional row columns this source fills (names from
    # pipeline/schema.py: per-point labels such as "semantic", per-example attrs such as "class_name");
    # absent → none. Every file of a build then has them, null where a frame lacks one.

    def list_frames(self) -> list[str]:
        """Frame ids in a stable order (cheap: no scan is decoded)."""
        ...

    def read(self, frame_id: str) -> Frame:
        """Read and validate one frame; raise SourceError naming the file on bad input."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for the manifest and dataset card."""
        ...

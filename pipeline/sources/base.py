"""What every source reader provides: a cheap, stable frame list and a reader for one frame."""

from __future__ import annotations

import importlib
import os
import stat
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from bench_build.errors import BenchBuildError
from bench_build.stages.frame import Frame


class SourceError(BenchBuildError, ValueError):
    """Malformed or missing source data. The message always names the file and what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def regular_file(path: Path, what: str, missing: str | None = None) -> os.stat_result | None:
    """The stat of ``path``, a ``what`` (e.g. "scan file") of the dataset. Something else in its place (a folder from
    a botched unpack, a broken link) is bad input: a SourceError naming it, not an OSError taken for a full disk.
    A missing file raises with ``missing`` as the problem, or, when ``missing`` is None (an optional file), gives
    None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if os.path.lexists(path):
            raise SourceError(path, f"is a broken link (a {what} was expected)") from None
        if missing is None:
            return None
        raise SourceError(path, missing) from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(path, f"is a directory, not a {what}" if stat.S_ISDIR(st.st_mode)
                          else f"is not a regular file (a {what} was expected)")
    return st


def read_text(path: Path) -> str:
    """A text file of a dataset (labels, calibration, class lists) as UTF-8; a SourceError naming the file when its
    bytes are not text (a damaged download or a binary file in its place) rather than a UnicodeDecodeError."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(path, f"not UTF-8 text (byte {e.start} of {len(data)}): a damaged or binary file") from None


def require_extra(module: str, extra: str, reader: str, path: str | Path) -> ModuleType:
    """Import ``module``, a package only one reader needs (installed by the ``extra`` of bench-build), or raise a
    `SourceError` naming the source and the install command: the CLI refuses with exit 2 before any work."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        note = " (it pins numpy<2, so this extra needs NumPy 1.26)" if extra == "nuscenes" else ""
        raise SourceError(path, f"the {reader} reader needs {module.split('.')[0]}, which is not installed ({e}); "
                                f"install it with: pip install 'bench-build[{extra}]'{note}") from None


def point_labels_missing(src: Any) -> str | None:
    """None when ``src``'s listed frames carry per-point semantic labels, else what is missing (one clause)."""
    probe = getattr(src, "unlabelled", None)
    if probe is None:
        return f"the {src.kind} reader gives no per-point semantic labels"
    return probe()


class Source(Protocol):
    kind: str
    fields: tuple[str, ...]
    intensity_scale: str
    # Optional: ``columns``, a tuple of the optional row columns this source fills (names from
    # pipeline/format/schema.py: per-point labels such as "semantic", per-example attrs such as "class_name");
    # absent → none. Every file of a build then has them, null where a frame lacks one.
    # Optional: ``unlabelled() -> str | None``, None when the listed frames carry per-point semantic labels, else
    # what is missing (names the file or folder); absent → the source has no per-point labels (`point_labels_missing`).

    def list_frames(self) -> list[str]:
        """Frame ids in a stable order (cheap: no scan is decoded)."""
        ...

    def read(self, frame_id: str) -> Frame:
        """Read and validate one frame; raise SourceError naming the file on bad input."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-able description for the manifest and dataset card."""
        ...

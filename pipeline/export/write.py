"""Export's writing: the plan's files and links, in order, each atomically; `export_version` ties it up."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench_build.build.shard import os_error_message
from bench_build.errors import BenchBuildError
from bench_build.export.errors import ExportError, ExportIncomplete
from bench_build.export.kitti_files import calib_text, label_text, velodyne_bytes
from bench_build.export.plan import (
    EXPORT_MARKER,
    LAYOUTS,
    MARKER_TEXT,
    ExportResult,
    Part,
    check_partition,
    check_source,
    check_targets,
    out_dir_or_ancestor,
    plan,
    shard_read,
    split_name,
)
from bench_build.format.reader import Example, Version, check_read_keys, open_version
from bench_build.manifests.manifest import MANIFEST_NAME, check_manifest, read_manifest
from bench_build.storage.owners import owner_tag, temp_owner_dead

_EXPORT_TEMP = re.compile(r"\..+\.[A-Za-z0-9_-]+~\d+\.export\.tmp")  # Writer's temporary names


def _write_file(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) with ``data``; on failure the unfinished file is removed and the error
    names ``path``. O_EXCL: never through a link or into a hard-linked inode shared with someone else's data."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666: the umask decides, as for open()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise OSError(e.errno, e.strerror, str(path)) from None


class Writer:
    """Writes every file under a temporary name beside its own (``.<name>.<host>~<pid>.export.tmp``, in the
    directory it belongs in, so renaming it is atomic) and moves them all into place, links made and ImageSets
    lists last, only once every one is written (`commit`). A damaged page of the version, a full disk or an
    interrupt before that leaves OUT as it was: `abort` removes the temporary files and the directories the
    export created (OUT itself if it was new). `commit` takes the old lists out before it moves the first file,
    so a root it leaves half-way (a refused rename, Ctrl-C) has no lists: no converter reads its mix of old and
    new files as one partition."""

    def __init__(self, parts: list[Part], replace: list[Path]) -> None:
        self.files = {p for part in parts for p in part.files()}
        self.lists = {p for part in parts for p in part.image_sets}
        self.total = len(self.files) + sum(len(p.links) for p in parts)
        self.replace = set(replace)
        self.staged: list[tuple[Path, Path]] = []  # (temporary, final), in writing order
        self.links: list[tuple[Path, Path]] = []  # (link, target)
        self.created: list[Path] = []  # directories the export made, parents first
        self.swept: set[Path] = set()
        self.withdrawn: set[Path] = set()  # old ImageSets lists `commit` removed before moving the first file
        self.roots = [part.root for part in parts]  # each gets export's marker (`mark`)
        self.marked: list[Path] = []  # the markers this export created
        self.written = self.replaced = self.stale = 0

    def _mkdir(self, d: Path) -> None:
        new = []
        while not os.path.lexists(d) and d != d.parent:
            new.append(d)
            d = d.parent
        for n in reversed(new):
            n.mkdir()
            self.created.append(n)

    def file(self, path: Path, data: bytes) -> None:
        if path not in self.files:  # the pre-flight checked exactly these paths; nothing else may be touched
            raise ExportError(f"{path}: not among the files the export checked before writing")
        self._mkdir(path.parent)
        self._sweep(path.parent)
        tmp = path.with_name(f".{path.name}.{owner_tag()}.export.tmp")
        with contextlib.suppress(FileNotFoundError):  # left by a killed earlier export of this same process id
            os.unlink(tmp)
        try:
            _write_file(tmp, data)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from None
        self.staged.append((tmp, path))

    def _sweep(self, d: Path) -> None:
        """Remove the temporary files a killed export (SIGKILL, a lost host) left in ``d``: only export's own
        names, and only those whose process is known dead (`temp_owner_dead`: this host, pid gone)."""
        if d in self.swept:
            return
        self.swept.add(d)
        if d in self.created:
            return
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                if _EXPORT_TEMP.fullmatch(name) and temp_owner_dead(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(d / name)
                        self.stale += 1

    def mark(self) -> None:
        """Leave `EXPORT_MARKER` in every data root, once all files are staged and before the first moves into place:
        a root `commit` stops half-way is one the same command with --force may finish (`check_marked`)."""
        for root in self.roots:
            marker = root / EXPORT_MARKER
            if not os.path.lexists(marker):
                _write_file(marker, MARKER_TEXT.encode())
                self.marked.append(marker)

    def link(self, link: Path, target: Path) -> None:
        self.links.append((link, target))

    def abort(self) -> None:
        for tmp, _ in self.staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if not self.written and not self.withdrawn:  # OUT as it was: without the markers this export made
            for marker in self.marked:
                with contextlib.suppress(OSError):
                    os.unlink(marker)
        for d in reversed(self.created):
            with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
                d.rmdir()

    def commit(self) -> None:
        """Remove the old ImageSets lists, rename the staged files into place, make the links, and move the new
        lists into place last. With --force the old lists name an earlier export's frames: left in place while
        its files are replaced one by one, they would make a root stopped half-way (a refused rename, Ctrl-C)
        look finished, each frame from one export or the other."""
        def move(tmp: Path, path: Path) -> None:
            replacing = os.path.lexists(path) or path in self.withdrawn
            os.replace(tmp, path)
            self.written += 1
            self.replaced += replacing  # counted once it is done: the message of a refused rename says how far
        for path in sorted(self.lists):
            if os.path.lexists(path):
                os.unlink(path)
                self.withdrawn.add(path)
        for tmp, path in self.staged:
            if path not in self.lists:
                move(tmp, path)
        for link, target in self.links:
            self._mkdir(link.parent)
            if os.path.lexists(link):
                if not link.is_symlink():
                    raise ExportError(f"{link} exists and is not a link; remove it or export elsewhere")
                if Path(os.readlink(link)) == target:
                    continue
                link.unlink()
                self.replaced += 1
            link.symlink_to(target, target_is_directory=True)
            self.written += 1
        for tmp, path in self.staged:
            if path in self.lists:
                move(tmp, path)


def _examples(ds: Version, part: Part, frames: Iterable[str] | None) -> Iterator[Example]:
    """The partition's examples, a shard's read error saying how to check the version (`shard_read`)."""
    it = iter(ds.examples(part.corruption, part.severity, frames))
    while True:
        with shard_read(ds):
            ex = next(it, None)
        if ex is None:
            return
        yield ex


def _write(ds: Version, parts: list[Part], replace: list[Path], frames: Iterable[str] | None, out: Path,
           result: ExportResult) -> None:

    w = Writer(parts, replace)
    try:
        for part in parts:
            ids = set(part.ids)
            base = part.root / "training" if part.full else part.root
            for ex in _examples(ds, part, frames):
                if ex.frame_id not in ids:
                    continue
                w.file(base / "velodyne" / f"{ex.frame_id}.bin", velodyne_bytes(ex))
                if part.full:
                    w.file(base / "calib" / f"{ex.frame_id}.txt", calib_text(ex.key, ex.calib).encode())
                if part.labels:
                    w.file(base / "label_2" / f"{ex.frame_id}.txt",
                           label_text(ex.key, ex.boxes, ex.calib).encode())
            for path, text in part.image_sets.items():
                w.file(path, text.encode())
            for link, target in part.links.items():
                w.link(link, target)
        w.mark()
    except BaseException as e:  # an interrupt or a bug too: no temporary file is left behind
        w.abort()
        if not isinstance(e, OSError | BenchBuildError):  # a bug keeps its traceback
            raise
        cause = os_error_message(e) if isinstance(e, OSError) else str(e).splitlines()[0]
        raise ExportIncomplete(
            f"{cause}; export stopped before moving any file into place: {out} is as it was (the {len(w.staged)} "
            f"of {w.total} files written so far, under temporary names, are removed); fix the cause and run the "
            "same command again") from None
    try:
        w.commit()
    except BaseException as e:  # a rename or link refused (rare: all were checked and written), or an interrupt
        w.abort()  # the temporary files not yet moved
        if not isinstance(e, OSError | BenchBuildError):  # an interrupt or a bug keeps its own exit
            raise
        cause = os_error_message(e) if isinstance(e, OSError) else str(e).splitlines()[0]
        lists = ("its ImageSets lists are removed" if w.withdrawn else "its ImageSets lists are not written")
        raise ExportIncomplete(
            f"{cause}; export stopped after moving {w.written} of {w.total} files into place under {out} "
            f"({w.replaced} of them replacing earlier ones; nothing else there was touched); {lists}, so that no "
            "converter reads a root half-way between two exports; fix the cause and run the same command again "
            "with --force, which rewrites only the export's own files") from None
    result.written, result.replaced = w.written, w.replaced
    if w.stale:
        result.notes.append(f"removed {w.stale} temporary files an earlier export left when it was killed")


def export_version(version_dir: str | Path, out: str | Path, *, corruption: str | None = None,
                   severity: int | None = None, all_partitions: bool = False, source: str | Path | None = None,
                   split: str | None = None, layout: str | None = None,
                   frames: Iterable[str] | None = None, force: bool = False) -> ExportResult:
    """Export in two passes. The pre-flight reads the manifest and the partitions' boxes and calibrations,
    decides every file and link to write and checks every precondition (partitions, the source's images, OUT
    neither is nor lies inside --source or the version, OUT empty unless ``force``, nothing in the way); an
    ExportError from it means nothing was written. Then the files are written under temporary names and
    moved into place once all are (`Writer`); a failure raises ExportIncomplete saying what is left: OUT as it
    was, unless a rename failed in that last step. ``force`` replaces only the files and links the export writes.
    ``layout`` (robo3d, the default, or kitti) is for ``all_partitions`` only: one partition is always a data root.
    Only builds of KITTI sources (`SUPPORTED_SOURCES`) are exported; any other is refused before a partition is read."""

    version_dir, out = Path(version_dir), Path(out)
    if frames is not None:
        frames = list(frames)
    result = ExportResult(out)
    try:
        if layout is not None and layout not in LAYOUTS:
            raise ExportError(f"--layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
        if not all_partitions and layout is not None:
            raise ExportError(f"--layout {layout} is for --all (how the corrupted partitions sit beside clean); one "
                              "partition (--corruption, --severity) is always a full KITTI data root: leave out "
                              "--layout, or add --all")
        manifest = read_manifest(version_dir)
        where = str(version_dir / MANIFEST_NAME)
        check_manifest(manifest, where)  # as open_version will: its names and paths, before they are used here
        if not isinstance(manifest.get("recipe"), dict):
            raise ExportError(f"{where}: no recipe table, which names the partitions export writes (a damaged "
                              "manifest: re-pull the version, or rebuild it)")
        check_read_keys(manifest, where)  # as open_version will: the partitions' names and severities, the fields
        check_source(manifest)
        if all_partitions and (corruption is not None or severity is not None):
            raise ExportError("--all exports every partition: leave out --corruption and --severity")
        if not all_partitions:
            check_partition(manifest, corruption, severity)
        out_dir_or_ancestor(out)
        ds = open_version(version_dir)
        parts = plan(ds, manifest, out, corruption=corruption, severity=severity, all_partitions=all_partitions,
                      source=source, split=split_name(manifest, split), layout=layout or "robo3d", frames=frames,
                      force=force, result=result)
        protected = [("the version", version_dir)] + ([("--source", Path(source))] if source is not None else [])
        replace = check_targets(out, parts, protected, force)
    except OSError as e:
        raise ExportError(f"{os_error_message(e)} (nothing was written)") from None
    _write(ds, parts, replace, frames, out, result)
    return result

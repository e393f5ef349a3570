"""Reading a built version: filter by corruption / severity / frame, get examples as NumPy.

    from bench_build.format.reader import open_version
    ds = open_version("bench-out/kitti-c/1.0.0")          # or "s3://bucket/datasets/kitti-c/1.0.0"
    for ex in ds.examples(corruption="translation", severity=3, frames=["000008"]):
        ex.points      # (N, C) float32, writable, columns ex.fields
        ex.point_tag   # (N,) uint8, bench_build.stages.frame.PointTag
        ex.boxes       # bench_build.stages.frame.Boxes in the LiDAR frame (or None)
        ex.to_frame()  # a bench_build.stages.frame.Frame, e.g. to run further stages or export KITTI labels

Only the files of the requested partitions are opened (the manifest says which), and within a file
only the row groups whose statistics can hold the requested frames. ``s3://`` versions are read in
place through pyarrow's S3 filesystem (credentials and endpoint from the same AWS chain as publish),
one row group at a time.

Reads are verified by default, at a cost measured with `bench-build bench loaders` (README): every file is
checked on open against its manifest entry (byte size and row count; on ``s3://`` also the sha256 the
uploader recorded in the object's metadata, one HEAD per file per reader; its columns' names and Arrow types
against the version's row schema, which no checksum covers), and every data page against the CRC32 the builder
writes into its header (``write_page_checksum``). A file that differs raises `IntegrityError` naming the file
and the manifest's value. ``open_version(..., verify=False)`` skips both for
trusted fast paths (a copy just checked by ``bench-build verify``); errors still name the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from bench_build.format.checked import (
    CheckedParquetFile,
    IntegrityError,
    MissingFile,
    NotInVersion,
    check_entry,
    missing_file,
    read_error,
    remedy,
)
from bench_build.format.compact import materialize
from bench_build.format.remote_fs import filesystem_for
from bench_build.format.schema import (
    CALIB_KEYS,
    EXAMPLE_COLUMNS,
    OPTIONAL_COLUMNS,
    POINT_COLUMNS,
    decode_boxes,
    decode_calib,
    decode_points,
    file_metadata,
    row_schema,
)
from bench_build.manifests.manifest import (
    CLEAN,
    MANIFEST_NAME,
    ManifestError,
    check_manifest,
    no_manifest_message,
    parse_manifest,
)
from bench_build.manifests.partial import held_partitions, partial_of, parts_text, pull_command
from bench_build.stages.frame import Boxes, Calib, Frame
from bench_build.storage import LocalStore, open_store

#: what `rows_of` reads from a file's ``bench_build`` footer metadata
FOOTER_KEYS = ("fields", "intensity_scale")


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_corruptions(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in v)


#: what `Version` takes from the manifest by key, beyond its shard entries (`check_manifest`): each key (dotted:
#: within ``recipe``), what its value must be, and what that is in words
READ_KEYS: tuple[tuple[str, Any, str], ...] = (
    ("fields", _is_names, "a list of point field names"),
    ("recipe", lambda v: isinstance(v, dict), "an object"),
    ("recipe.corruptions", _is_corruptions, "a list of objects with a name"),
    ("recipe.severities", _is_count, "an integer ≥ 0"),
)


def _is_frame_lists(v: Any) -> bool:
    return isinstance(v, dict) and all(_is_names(ids) for ids in v.values())


def _is_objects(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


#: what `Version` takes from the manifest when it has the key (a build writes ``shard_frames`` and ``columns``, a
#: partial pull ``partial``), in the form of `READ_KEYS`: absent is fine, another kind of value is refused with them
OPTIONAL_READ_KEYS: tuple[tuple[str, Any, str], ...] = (
    ("shard_frames", _is_frame_lists, "an object of file stem → list of frame ids"),
    ("columns", _is_names, "a list of column names"),
    ("partial", lambda v: isinstance(v, dict), "an object"),
    ("partial.selections", _is_objects, "a list of objects"),
)


def key_problems(manifest: dict[str, Any], keys: tuple[tuple[str, Any, str], ...], *,
                 required: bool = True) -> list[str]:
    """What is wrong with ``keys`` (in the form of `READ_KEYS`) in ``manifest``, in words: a key it lacks (when
    ``required``) or one holding another kind of value. A key below a missing or wrong parent is said of the
    parent."""
    bad = []
    for key, ok, what in keys:
        table: Any = manifest
        *parents, name = key.split(".")
        if any(not isinstance(table := table.get(p), dict) for p in parents):
            continue  # said of the parent
        if name not in table:
            if required:
                bad.append(f"no {key}")
        elif not ok(table[name]):
            said = repr(table[name])
            bad.append(f"{key} {said if len(said) <= 60 else said[:57] + '…'} is not {what}")
    return bad


def check_read_keys(manifest: dict[str, Any], where: str) -> None:
    """Refuse (`ManifestError`, one line naming ``where`` and every key) a manifest that lacks a `READ_KEYS` key or
    holds another kind of value there or at an `OPTIONAL_READ_KEYS` key it has: a manifest edited by hand or cut
    short was a bare KeyError (or TypeError, AttributeError) from the first selection or read."""
    bad = key_problems(manifest, READ_KEYS) + key_problems(manifest, OPTIONAL_READ_KEYS, required=False)
    if bad:
        raise ManifestError(f"{where}: {'; '.join(bad)}, which reading the version needs (the manifest was edited or "
                            "cut short: pull or build that version again)")


@dataclass(frozen=True)
class Example:
    key: str
    frame_id: str
    corruption: str
    severity: int
    points: np.ndarray
    fields: tuple[str, ...]
    point_tag: np.ndarray
    boxes: Boxes | None
    calib: Calib | None
    intensity_scale: str
    info: dict = field(default_factory=dict)  # per-example facts recorded by the stage (JSON column)
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # optional per-point columns present in the row
    attrs: dict[str, Any] = field(default_factory=dict)  # optional per-example columns (class_name, split, …)

    @property
    def semantic(self) -> np.ndarray | None:
        return self.labels.get("semantic")

    def to_frame(self) -> Frame:
        labels = {"point_tag": self.point_tag, **self.labels}
        attrs = {k: v for k, v in self.attrs.items() if v is not None}
        return Frame(self.frame_id, self.points, self.fields, self.intensity_scale, labels, self.boxes, self.calib,
                     dict(self.info), attrs=attrs)


class Version:
    """A built (or pulled, or published) version: its manifest, and its examples read in place.

    ``verify`` (default True): check each file against its manifest entry when it is opened (size and rows;
    on ``s3://`` also the sha256 recorded at upload) and every data page against its checksum; a mismatch
    raises `IntegrityError`. ``verify=False`` is for trusted fast paths (a local copy `bench-build verify`
    just checked): changed bytes then decode silently, as with plain pyarrow. A manifest without a key the reads
    take from it (`READ_KEYS`: ``fields``, ``recipe.corruptions``, ``recipe.severities``), or with another kind of
    value there or at an optional key they use (`OPTIONAL_READ_KEYS`: ``shard_frames``, ``columns``,
    ``partial.selections``), is refused on open, `ManifestError` naming the manifest and the key."""

    def __init__(self, root: str | Path, *, endpoint_url: str | None = None, profile: str | None = None,
                 verify: bool = True) -> None:
        self.url, self.verify = str(root), verify
        self.store = open_store(root if isinstance(root, Path) else str(root), endpoint_url=endpoint_url,
                                profile=profile)
        self._store_pid = os.getpid()
        self.fs, self.base = filesystem_for(self.store)
        self.root = Path(self.base) if self.is_local else None
        where = f"{self.url.rstrip('/')}/{MANIFEST_NAME}"
        if isinstance(self.store, LocalStore):
            try:
                with self.fs.open_input_stream(f"{self.base}/{MANIFEST_NAME}") as f:
                    text = f.read()
            except OSError:  # a file, a benchmark's folder, an unfinished build: said as such
                raise ManifestError(no_manifest_message(self.store.root)) from None
        else:  # through the store's client: rejected credentials give the CLI's one line, not pyarrow's
            got = self.store.get(MANIFEST_NAME)
            if got is None:
                raise ManifestError(f"{where}: no manifest (is the build finished? `bench-build status` tells; "
                                    "a published version: `bench-build versions` lists them)")
            text = got[0]
        self.manifest = parse_manifest(text, where)
        columns = self.manifest.get("columns") or []  # of another kind: refused below (`check_read_keys`)
        unknown = sorted(set(columns) - set(OPTIONAL_COLUMNS)) if _is_names(columns) else []
        if unknown:  # a column this bench-build does not know: written by a newer one (or a damaged manifest)
            raise ManifestError(f"{where}: column(s) {', '.join(map(str, unknown))} unknown to this bench-build: "
                                "the version was written by a newer one; upgrade bench-build to read it")
        check_manifest(self.manifest, where)  # its paths are data: they must stay inside the version
        check_read_keys(self.manifest, where)
        self._entries = {s["path"]: s for s in self.manifest["shards"]}
        self._headed: set[str] = set()  # s3 files whose recorded sha256 was compared (one HEAD per file)
        self._clean_cache: tuple[tuple[str, int], dict[str, np.ndarray]] | None = None

    @property
    def is_local(self) -> bool:

        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def corruptions(self) -> list[str]:
        return [c["name"] for c in self.manifest["recipe"]["corruptions"]]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.manifest["fields"])

    @property
    def severities(self) -> int:
        """Severities per corruption (1…S; 0 is the clean copy)."""
        return int(self.manifest["recipe"]["severities"])

    def frame_set(self) -> set[str] | None:
        """Every frame id of the version, from the manifest (None for a manifest without ``shard_frames``)."""
        sf = self.manifest.get("shard_frames")
        return None if not sf else {f for ids in sf.values() for f in ids}

    def selection(self, corruption: Any = None, severity: Any = None,
                  frames: Any = None) -> tuple[set[str] | None, set[int] | None, set[str] | None]:
        """The requested corruption(s), severity(ies) and frame(s) as sets (None: all), checked against the
        version: a name, severity or frame it does not have, or a value of the wrong type, is a `NotInVersion`
        naming it (never an empty selection that looks like a filter that matched nothing). A single value or
        any iterable of them; NumPy integers are integers."""
        corruptions = _names(corruption, "corruption")
        if corruptions is not None:
            known = [CLEAN, *self.corruptions]
            if unknown := sorted(corruptions - set(known)):
                raise NotInVersion(f"{self.url}: no corruption {', '.join(map(repr, unknown))}; it has "
                                   f"{', '.join(known)}")
        severities = None
        if severity is not None:
            values = _values(severity)
            if not values:
                raise NotInVersion(f"{self.url}: an empty list of severities selects nothing; pass None for every "
                                   "severity")
            if bad := [v for v in values if not _is_int(v)]:
                raise NotInVersion(f"{self.url}: severity must be an integer or integers, got {bad[0]!r}")
            severities = {int(v) for v in values}
            if out := sorted(s for s in severities if not 0 <= s <= self.severities):
                raise NotInVersion(f"{self.url}: no severity {', '.join(map(str, out))}; it has 0 (clean) and "
                                   f"1…{self.severities}")
            if corruptions == {CLEAN} and severities != {0}:  # else "clean, 3" quietly reads the clean rows
                raise NotInVersion(f"{self.url}: clean has only severity 0, not {sorted(severities - {0})}")
        if "partial" in self.manifest and (corruptions is not None or severities is not None):
            self._check_held(corruptions, severities)
        ids = _names(frames, "frame id")
        if ids is not None and (known_ids := self.frame_set()) is not None and (missing := sorted(ids - known_ids)):
            some = sorted(known_ids)
            raise NotInVersion(f"{self.url}: no frame {', '.join(map(repr, missing[:3]))}"
                               f"{' …' if len(missing) > 3 else ''}; it has {len(some)} frames: "
                               f"{', '.join(some[:3])}{', …' if len(some) > 3 else ''}")
        return corruptions, severities, ids

    def _wanted_partitions(self, corruptions: set[str] | None, severities: set[int] | None) -> list[tuple[str, int]]:
        """The (corruption, severity) partitions a checked selection (`selection`) names, as the loaders read it:
        severity 0 and corruption ``clean`` both name the clean copy; a corruption alone is its severities 1…S."""
        clean = ((corruptions is None or CLEAN in corruptions or (severities is not None and 0 in severities))
                 and (severities is None or 0 in severities or (corruptions is not None and CLEAN in corruptions)))
        names = [c for c in self.corruptions if corruptions is None or c in corruptions]
        levels = [s for s in range(1, self.severities + 1) if severities is None or s in severities]
        return [(CLEAN, 0)] * clean + [(c, s) for c in names for s in levels]

    def _check_held(self, corruptions: set[str] | None, severities: set[int] | None) -> None:
        """A partial pull holds some of its version's partitions: a selection naming one it lacks is a
        `NotInVersion` naming them, what it holds and the pull that adds them, never a selection that is silently
        empty (``corruption="fog"`` of a folder holding only ``beam_del``) or short (fog 3 alone for "fog")."""
        held = held_partitions(self.manifest)
        have = set(held)
        missing = [p for p in self._wanted_partitions(corruptions, severities) if p not in have]
        if not missing:
            return
        names, levels = {c for c, _ in missing}, {s for _, s in missing}
        add = pull_command(self.url, self.manifest, names.pop() if len(names) == 1 else None,
                           levels.pop() if len(levels) == 1 else None)
        verb, them = ("is", "it") if len(missing) == 1 else ("are", "them")
        raise NotInVersion(f"{self.url}: {parts_text(missing)} {verb} not in this folder ({partial_of(self.manifest)}"
                           f"); it holds {parts_text(held)} (`{add}` adds {them}, or select what it holds)")

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def shards(self, corruption: str | None = None, severity: int | None = None) -> list[dict[str, Any]]:
        """Manifest entries of the requested partition(s). Severity 0 of any corruption is the clean copy."""
        if corruption is not None and corruption != CLEAN and corruption not in self.corruptions:
            raise NotInVersion(f"{self.url}: no corruption {corruption!r}; it has {', '.join(self.corruptions)}")
        out = []
        for s in self.manifest["shards"]:
            if severity == 0 or corruption == CLEAN:
                if s["corruption"] != CLEAN:
                    continue
            else:
                if corruption is not None and s["corruption"] != corruption:
                    continue
                if severity is not None and s["severity"] != severity:
                    continue
            out.append(s)
        return out

    def files(self, corruption: str | None = None, severity: int | None = None) -> list[Path | str]:
        """Paths (local) or ``bucket/key`` strings (s3) of the requested partition(s)' files."""
        return [self.root / s["path"] if self.root is not None else self.path(s["path"])
                for s in self.shards(corruption, severity)]

    def frame_ids(self, entry: dict[str, Any]) -> list[str]:
        """Frame id of each row of a manifest entry's file, from the manifest (``shard_frames``) when it has
        them, else from the file's ``frame_id`` column (one column read)."""
        ids = self.manifest.get("shard_frames", {}).get(entry.get("shard"))
        if ids is not None and len(ids) == entry["rows"]:
            return list(ids)
        return self.open_file(entry["path"]).read(columns=["frame_id"])["frame_id"].to_pylist()

    def split_selection(self, split: Any, entries: list[dict[str, Any]],
                        frames: set[str] | None = None) -> set[str] | None:
        """The frames of ``entries`` (of ``frames``, when given) in the requested split(s) (the ``split`` column of
        object benchmarks), so that a split filter is a frame filter; ``frames`` itself when no split is asked
        for. Checked like `selection`: a build without the column, a split none of them is in, or a value of the
        wrong type is a `NotInVersion` naming what there is. A row's split is its frame's, which every partition
        repeats, so the column of one file per shard is read."""
        want = _names(split, "split")
        if want is None:
            return frames
        if "split" not in self.manifest.get("columns", []):
            raise NotInVersion(f"{self.url}: this build has no split column (its optional columns: "
                               f"{self.manifest.get('columns') or 'none'}); filter by frames instead")
        first: dict[str, dict[str, Any]] = {}  # of each shard
        for e in entries:
            first.setdefault(e.get("shard", e["path"]), e)
        of_frame: dict[str, Any] = {}
        for entry in first.values():
            col = self.open_file(entry["path"]).read(columns=["split"])["split"].to_pylist()
            of_frame.update(zip(self.frame_ids(entry), col, strict=True))
        held = sorted({s for s in of_frame.values() if s is not None})
        if missing := sorted(want - set(held)):
            raise NotInVersion(f"{self.url}: no split {', '.join(map(repr, missing))}; it has "
                               f"{', '.join(held) or 'no split values'}")
        chosen = {f for f, s in of_frame.items() if s in want and (frames is None or f in frames)}
        if not chosen:  # (frames given: the split has frames, none of them selected)
            theirs = sorted({s for f in frames or () if (s := of_frame.get(f)) is not None})
            raise NotInVersion(f"{self.url}: no selected frame is in split {', '.join(sorted(want))} "
                               f"(they are in {', '.join(theirs) or 'no split'})")
        return chosen

    def where(self, rel: str) -> str:
        """How errors name a file of this version: its path or URL."""
        return f"{self.url.rstrip('/')}/{rel}"

    def open_file(self, rel: str) -> CheckedParquetFile:
        """One file of the version, checked against its manifest entry when ``verify`` (see the class)."""
        where = self.where(rel)
        entry = self._entries.get(rel)
        if self.verify and entry is not None and not self.is_local and rel not in self._headed:
            self._check_stored(rel, entry, where)
        try:
            f = self.fs.open_input_file(self.path(rel))
        except FileNotFoundError:
            raise missing_file(where, self.url) from None
        except OSError as e:
            raise read_error(e, where, self.url, "open") from None
        if self.verify:
            check_entry(entry, where, self.url, size=f.size())
        pf = CheckedParquetFile(f, where, version=self.url, page_checksum_verification=self.verify)
        if self.verify:
            check_entry(entry, where, self.url, rows=pf.metadata.num_rows)
            self._check_columns(pf)
        return pf

    def _check_columns(self, pf: CheckedParquetFile) -> None:
        """The file's columns, in order, with the version's Arrow types. The Parquet footer that declares them is
        covered by no page checksum and a local file's sha256 is not re-hashed on every open, so one flipped bit
        there can rename a column or retype it while every page still matches its checksum: ``key`` read as
        bytes, N×C ``points`` as nested lists, ``point_tag`` as int32. Each is an `IntegrityError` naming the
        file, never the same bytes decoded as other values."""
        got = pf.schema_arrow
        compact = "point_ref" in got.names and self.manifest.get("encoding") == "compact"
        want = row_schema(self.manifest["fields"], self.manifest.get("columns") or [], compact=compact)
        if got.names != want.names:
            odd, gone = sorted(set(got.names) - set(want.names)), sorted(set(want.names) - set(got.names))
            raise IntegrityError(f"{pf.where}: its columns are not the version's (unexpected: {odd or '-'}, missing: "
                                 f"{gone or '-'}); {remedy(self.url)}")
        for have, should in zip(got, want, strict=True):
            if have.type != should.type or have.nullable != should.nullable:
                raise IntegrityError(f"{pf.where}: its column {have.name} is {_typed(have)}, the version's is "
                                     f"{_typed(should)}; {remedy(self.url)}")

    def _footer(self, pf: CheckedParquetFile) -> dict[str, Any]:
        """The file's ``bench_build`` footer metadata, and (``verify``) its point layout checked against the
        manifest (its columns were checked on open: `_check_columns`): the Parquet footer is covered by no page
        checksum, and a local file's sha256 is not re-hashed on every open, so a damaged footer is an
        `IntegrityError` naming the file here, not a KeyError or JSON error from deep inside a read."""
        try:
            meta = file_metadata(pf.schema_arrow)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise IntegrityError(f"{pf.where}: its footer's bench_build metadata cannot be read ({e}); "
                                 f"{remedy(self.url)}") from None
        missing = [k for k in FOOTER_KEYS if k not in meta] if isinstance(meta, dict) else list(FOOTER_KEYS)
        if missing:  # what every read takes from it (`rows_of`), checked with or without verify
            raise IntegrityError(f"{pf.where}: its footer's bench_build metadata has no {', '.join(missing)}; "
                                 f"{remedy(self.url)}")
        if not self.verify:
            return meta
        for key in ("fields", "intensity_scale", "columns"):
            if key in meta and key in self.manifest and meta[key] != self.manifest[key]:
                raise IntegrityError(f"{pf.where}: its footer says {key} {meta[key]!r}, the manifest "
                                     f"{self.manifest[key]!r}; {remedy(self.url)}")
        return meta

    def _check_stored(self, rel: str, entry: dict[str, Any], where: str) -> None:
        """Object storage: size and the sha256 the uploader recorded (object metadata), from one HEAD. The
        ETag is not compared: the manifest records no MD5, and multipart ETags are not content hashes."""
        if self._store_pid != os.getpid():
            # a forked DataLoader worker: boto3's connection pool is not fork-safe (a child reading a socket the
            # parent also uses can get another request's response: another object's size), so each process
            # opens its own client
            self.store, self._store_pid = open_store(self.store.spec), os.getpid()
        info = self.store.head(rel)
        if info is None:
            raise MissingFile(f"{where}: listed in the manifest but missing; re-publish the version or run "
                                    f"`bench-build verify {self.url}`")
        if "bytes" in entry and info.size != entry["bytes"]:
            raise IntegrityError(f"{where}: {info.size} bytes, manifest says {entry['bytes']}; {remedy(self.url)}")
        if info.sha256 and entry.get("sha256") and info.sha256 != entry["sha256"]:
            raise IntegrityError(f"{where}: uploaded with sha256 {info.sha256}, manifest says {entry['sha256']}; "
                                 f"{remedy(self.url)}")
        self._headed.add(rel)

    def read_file(self, entry: dict[str, Any], *, row_groups: Iterable[int] | None = None,
                  frames: Iterable[str] | None = None, writable: bool = True) -> Iterator[Example]:
        """The examples of one manifest entry (optionally some row groups / frames only), row group by row group."""
        pf = self.open_file(entry["path"])
        meta = self._footer(pf)
        compact = "point_ref" in pf.schema_arrow.names
        wanted = None if frames is None else pa.array(sorted(set(frames)), pa.string())
        starts = np.cumsum([0] + [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
        for rg in range(pf.num_row_groups) if row_groups is None else row_groups:
            table = pf.read_row_group(rg)
            rows = np.arange(starts[rg], starts[rg] + table.num_rows)
            if wanted is not None:
                mask = pc.is_in(table["frame_id"], value_set=wanted)
                rows = rows[np.asarray(mask.to_pylist(), dtype=bool)]
                table = table.filter(mask)
                if table.num_rows == 0:
                    continue
            clean = self._clean_points(entry, rg, table["frame_id"].to_pylist()) if compact else None
            yield from rows_of(table, meta, entry["corruption"], entry["severity"], writable=writable, clean=clean,
                               where=pf.where, rows=rows.tolist(), version=self.url)

    def _clean_points(self, entry: dict[str, Any], rg: int, frame_ids: list[str]) -> dict[str, np.ndarray]:
        """Clean points of ``frame_ids`` from the clean file of ``entry``'s shard (what compact rows refer to):
        its row group ``rg`` first (files of one shard list the same frames in the same row groups)."""
        clean = next((s for s in self.manifest["shards"] if s["corruption"] == CLEAN
                      and s.get("shard") == entry.get("shard")), None)
        if clean is None:
            raise ManifestError(f"{self.url}: {entry['path']} is compact-encoded but its shard's clean file is "
                                "not in the manifest (pull the clean partition too)")
        key = (clean["path"], rg)
        if self._clean_cache is None or self._clean_cache[0] != key:
            pf = self.open_file(clean["path"])
            groups = [rg] if rg < pf.num_row_groups else []
            table = pf.read_row_groups(groups, columns=["frame_id", "points"]) if groups else None
            got = {} if table is None else dict(zip(table["frame_id"].to_pylist(),
                                                    decode_points(table["points"], writable=False), strict=True))
            if not set(frame_ids) <= set(got):
                table = pf.read(columns=["frame_id", "points"])
                got = dict(zip(table["frame_id"].to_pylist(), decode_points(table["points"], writable=False),
                               strict=True))
            self._clean_cache = (key, got)
        return self._clean_cache[1]

    def examples(self, corruption: str | None = None, severity: int | None = None,
                 frames: Iterable[str] | str | None = None) -> Iterator[Example]:
        """Examples in manifest order; ``severity=0`` gives the clean frames (labelled ``clean``). One corruption
        and one severity (the loaders take several); ``frames`` one id or several. What the version does not have
        (or a partial pull does not hold) is a `NotInVersion` at the call, not an empty iterator."""
        if not (corruption is None or isinstance(corruption, str)) or not (severity is None or _is_int(severity)):
            raise NotInVersion(f"{self.url}: examples() takes one corruption and one severity, got "
                               f"{corruption!r}, {severity!r} (bench_build.loaders take several)")
        _, _, ids = self.selection(corruption, severity, frames)
        entries = self.shards(corruption, None if severity is None else int(severity))
        return (ex for entry in entries for ex in self.read_file(entry, frames=ids))

    def example(self, frame_id: str, corruption: str, severity: int) -> Example:
        for ex in self.examples(corruption, severity, [frame_id]):
            return ex
        raise NotInVersion(f"{self.url}: no example ({frame_id}, {corruption}, {severity})")


def _typed(f: pa.Field) -> str:
    return f"{f.type}{'' if f.nullable else ' not null'}"


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _values(value: Any) -> list[Any]:
    """One value or an iterable of them as a list: a string, a number (``3.0``, ``True``) or a 0-d array or tensor
    is one value, for the caller to check (before, ``list()`` of it was a TypeError naming no argument)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        return [value]
    try:
        return list(value)
    except TypeError:  # iteration over a 0-d array / tensor
        return [value]


def _names(value: Any, what: str) -> set[str] | None:
    """One name or an iterable of names as a set (None stays None); anything else names the bad value, and an empty
    list, which would select nothing, says so."""
    if value is None:
        return None
    values = _values(value)
    if not values:
        raise NotInVersion(f"an empty list of {what}s selects nothing; pass None for every {what}")
    if bad := [v for v in values if not isinstance(v, str)]:
        raise NotInVersion(f"a {what} is a string (or give several in a list), got {bad[0]!r}")
    return set(values)


def rows_of(table: pa.Table, meta: dict[str, Any], corruption: str, severity: int, *,
            writable: bool = True, clean: dict[str, np.ndarray] | None = None, where: str = "<table>",
            rows: list[int] | None = None, version: str | None = None) -> Iterator[Example]:
    """Examples of a table of v2 rows (one partition: ``corruption``/``severity`` come from its path).
    Compact rows (``point_ref`` not null) are materialised from ``clean`` (frame id → clean points); one that
    does not fit its clean scan raises `IntegrityError` naming ``where`` (the file), its row (``rows[i]``: the
    row's number in the file) and key. So does a row whose points, point tags or per-point labels are not
    ``num_points`` long, or whose calibration matrices are not 3×4 (3×3): a page header (which no page checksum
    covers) damaged so that its list lengths decode otherwise, a tag or a ref per point shifted against the
    points."""
    fields = tuple(meta["fields"])
    points = decode_points(table["points"].combine_chunks(), writable=writable)
    if "point_ref" in table.column_names:

        col = table["point_ref"].combine_chunks()
        nulls = col.is_null().to_pylist()
        refs = decode_points(col, writable=False)
        fids, row_keys = table["frame_id"].to_pylist(), table["key"].to_pylist()
        for i, null in enumerate(nulls):
            if not null:
                row = rows[i] if rows is not None else i
                if clean is None or fids[i] not in clean:
                    raise IntegrityError(f"{where}: row {row} ({row_keys[i]}) is compact-encoded but the clean "
                                         f"file of its shard has no frame {fids[i]!r}; {remedy(version)}")
                try:
                    points[i] = materialize(refs[i], points[i], clean[fids[i]])
                except ValueError as e:
                    raise IntegrityError(f"{where}: row {row} ({row_keys[i]}): {e}; {remedy(version)}") from None
    tags = decode_points(table["point_tag"].combine_chunks(), writable=writable)
    labels: dict[str, tuple[list[np.ndarray], list[bool]]] = {}
    for c in POINT_COLUMNS:
        if c in table.column_names:
            col = table[c].combine_chunks()
            labels[c] = (decode_points(col, writable=writable), col.is_null().to_pylist())
    attrs = {c: table[c].to_pylist() for c in EXAMPLE_COLUMNS if c in table.column_names}
    boxes = table["boxes"].to_pylist()
    calib = table["calib"].to_pylist()
    info = table["info"].to_pylist()
    keys, frame_ids = table["key"].to_pylist(), table["frame_id"].to_pylist()
    counts = table["num_points"].to_pylist()
    for i in range(table.num_rows):
        lengths = {"points": len(points[i]), "point_tag": len(tags[i]),
                   **{c: len(v[i]) for c, (v, null) in labels.items() if not null[i]}}
        if odd := {c: n for c, n in lengths.items() if n != counts[i]}:
            said = ", ".join(f"{c} has {n}" for c, n in odd.items())
            raise IntegrityError(f"{where}: row {rows[i] if rows is not None else i} ({keys[i]}) has num_points "
                                 f"{counts[i]} but {said}; {remedy(version)}")
        check_calib(calib[i], where, rows[i] if rows is not None else i, keys[i], version)  # the same damage
        yield Example(
            key=keys[i], frame_id=frame_ids[i], corruption=corruption, severity=severity, points=points[i],
            fields=fields, point_tag=tags[i],
            boxes=decode_boxes(boxes[i]), calib=decode_calib(calib[i]), intensity_scale=meta["intensity_scale"],
            info={} if info[i] is None else json.loads(info[i]),
            labels={c: v[i] for c, (v, null) in labels.items() if not null[i]},
            attrs={c: v[i] for c, v in attrs.items()},
        )


#: values of each calibration matrix of the row schema (row-major 3×4, R0_rect 3×3), as `Calib.from_dict` reshapes them
CALIB_SIZES = {k: 9 if k == "R0_rect" else 12 for k in CALIB_KEYS}


def check_calib(row: dict[str, Any] | None, where: str, index: int, label: str, version: str | None) -> None:
    """Refuse (`IntegrityError`: ``where``, row ``index`` and ``label``, the matrix) a stored calibration
    `calib_problem` finds undecodable: a page header, which no page checksum covers, damaged so that a matrix's
    list decodes with another length. Every reader of the column calls it before `decode_calib`."""
    if (why := calib_problem(row)) is not None:
        raise IntegrityError(f"{where}: row {index} ({label}): its {why}; {remedy(version)}")


def calib_problem(row: dict[str, Any] | None) -> str | None:
    """What makes a stored calibration undecodable (a missing matrix, one of another length), or None."""
    if row is None:
        return None
    for name, size in CALIB_SIZES.items():
        values = row.get(name)
        if values is None and name != "Tr_imu_to_velo":  # the one matrix a source may lack
            return f"calibration has no {name}"
        if values is not None and len(values) != size:
            return f"calibration {name} has {len(values)} values, not {size}"
    return None


def open_version(root: str | Path, *, endpoint_url: str | None = None, profile: str | None = None,
                 verify: bool = True) -> Version:
    """A version directory or URL (path, ``file://``, ``s3://bucket/prefix/<dataset>/<version>``).

    Its reads are verified against the manifest and the files' page checksums unless ``verify=False`` (trusted
    fast paths only: a changed byte then decodes silently); a mismatch raises `IntegrityError` naming the file.
    Rejected S3 credentials raise `bench_build.storage.StorageError` with one line saying so. ``~`` is the home
    directory, as in pandas."""
    if not isinstance(root, str | Path) or not str(root):
        raise NotInVersion(f"open_version takes a version's directory or URL, got {root!r}")
    if isinstance(root, Path) or "://" not in root:
        root = Path(root).expanduser()
    return Version(root, endpoint_url=endpoint_url, profile=profile, verify=verify)

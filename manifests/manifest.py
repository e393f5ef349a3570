"""The manifest of a built dataset version: what it is, how it was built, and every shard's checksum.

``manifest.json`` (manifest version 2 = layout v2)::

    {"manifest_version": 2, "schema_version": 2, "dataset": "kitti-c", "version": "1.0.0", "created": "...",
     "code_version": "0.1.0", "fingerprint": "<sha256>", "recipe": {...canonical recipe...},
     "source": {...}, "frames": 7481, "frames_per_shard": 64, "fields": [...], "intensity_scale": "unit",
     "columns": [],                                   # optional columns the source declared (schema.py)
     "partitions": {"clean/0": {"corruption": "clean", "severity": 0, "stage": null,
                                "path": "data/corruption=clean/severity=0", "config": "clean"},
                    "fog/3": {"corruption": "fog", "severity": 3, "stage": "fog", "stage_version": 1,
                              "params": {...}, "path": "data/corruption=fog/severity=3", "config": "fog_3"}},
     "shard_frames": {"part-00000-of-00117": ["000000", ...]},   # row r of each of a shard's files = frame r
     "counts": {"examples_defined": 1122150, "examples_stored": 942606, "bytes": ...,
                "by_partition": {"clean/0": {...}, "fog/3": {"examples": 7481, "bytes": ..., "seconds": ...}}},
     "shards": [{"path": "data/corruption=fog/severity=3/part-00000-of-00117.parquet",
                 "corruption": "fog", "severity": 3, "shard": "part-00000-of-00117",
                 "rows": 64, "bytes": 123, "sha256": "..."}, ...],
     "renders": [{"path": "renders/contact_sheet.png", "bytes": 123, "sha256": "..."}]}

``renders`` lists the pictures the build wrote for its dataset card (always under ``renders/``): `publish`
uploads and `pull` downloads exactly these, each checked against its sha256, never what a listing of
``renders/`` holds (a PNG `bench-build render` adds later is the user's, and is neither verified nor
published). Manifests written before renders were listed have no ``renders`` key: their card's pictures
are not published or pulled.

Layout v1 (``manifest_version`` 1: ``clean/`` outside the hive tree, partition keys duplicated in-file,
flat ``list<float32>`` points) is refused with a message saying so: rebuild it (same recipe and seed give the
same examples) rather than mixing layouts.

`verify_version` re-checks every listed file: presence, byte size, sha256 and the row count in the
Parquet footer; that the version holds no unlisted file (`check_file_set`: an unlisted ``.parquet`` is
an error, other files a warning); and that the manifest's counts agree with its shards (`check_counts`).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench_build.errors import BenchBuildError
from bench_build.manifests import jsontext, names
from bench_build.storage.files import sha256_file

MANIFEST_VERSION = 2
#: the row schema this bench-build writes and the newest it reads (`bench_build.format.schema` uses this one):
#: raised whenever older code could not read the files (a new column, a changed type); see schema.md
SCHEMA_VERSION = 2
LAYOUT_V1_HINT = ("layout v1 (clean/ outside the hive tree, flat list<float32> points); this bench-build reads "
                  "layout v2 only: rebuild it with `bench-build run` (same recipe and seed, same examples) or read it "
                  "with the bench-build release that wrote it")
MANIFEST_NAME = "manifest.json"
LEDGER_DIR = "_ledger"  # a build's ledger below its version directory (`bench_build.build.ledger`)
VERSION_LAYOUT = "a version is the folder OUT/<benchmark>/<version>"
VOLATILE_KEYS = ("created", "build_seconds")  # differ between otherwise identical builds


# a dataset or version name usable as a path segment: the one rule of bench_build.manifests.names, also checked at load
SAFE_NAME = names.SAFE_NAME
_URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # s3:, file:, http:, C: ...


CLEAN = "clean"  # the partition of the unchanged frames: corruption "clean", severity 0


class ManifestError(BenchBuildError, ValueError):
    pass


def parse_manifest(text: str | bytes, where: str) -> dict[str, Any]:
    """Parse and check a manifest's text (``where`` names it in errors)."""
    def no_constant(name: str) -> Any:  # NaN / Infinity are not JSON: a manifest holding them is refused
        raise ManifestError(f"{where}: not valid JSON: {name} is not a JSON number")

    try:  # an integer past int()'s digits or nesting past the parser's recursion: one line too (`jsontext`)
        data = jsontext.loads(where, text, error=ManifestError, parse_constant=no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # bytes that are not UTF-8 text, too
        raise ManifestError(f"{where}: not valid JSON: {e}") from None
    if not isinstance(data, dict) or data.get("manifest_version") != MANIFEST_VERSION:
        got = data.get("manifest_version") if isinstance(data, dict) else None
        if got == 1:
            raise ManifestError(f"{where}: manifest_version 1 is {LAYOUT_V1_HINT}")
        if isinstance(got, int) and not isinstance(got, bool) and got > MANIFEST_VERSION:
            raise ManifestError(newer(where, "manifest_version", got, MANIFEST_VERSION))
        raise ManifestError(f"{where}: unsupported manifest_version {got!r} "
                            f"(this bench-build reads {MANIFEST_VERSION})")
    schema = data.get("schema_version")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise ManifestError(newer(where, "schema_version", schema, SCHEMA_VERSION))
    return data


def newer(where: str, key: str, got: int, known: int) -> str:
    """The one line for a version written by a newer bench-build than this one."""
    return (f"{where}: {key} {got} was written by a newer bench-build (this one reads up to {known}); upgrade "
            "bench-build to read this version")


def is_version_dir(path: Path) -> bool:
    """Whether the local folder ``path`` is a version directory, finished (its manifest) or not (its ledger)."""
    return (path / MANIFEST_NAME).is_file() or (path / LEDGER_DIR).is_dir()


def versions_in(path: Path) -> list[str]:
    """The version directories directly below the local folder ``path`` (a benchmark's folder), by name."""
    try:
        return sorted(p.name for p in path.iterdir() if p.is_dir() and is_version_dir(p))
    except OSError:  # unreadable: then it is said as no version folder
        return []


def no_manifest_message(version_dir: str | Path) -> str:
    """The one line for a local ``version_dir`` that has no manifest: a mistyped path, a file, an unfinished build
    (its ``_ledger/``), a benchmark's folder (its versions named) or any other folder, each said as what it is."""
    d = Path(version_dir)
    if not d.is_dir():  # a mistyped path is not an unfinished build
        if not d.exists():
            return f"{d}: no such directory, so no manifest ({VERSION_LAYOUT})"
        hint = f": pass {d.parent}" if d.name == MANIFEST_NAME else ""
        return f"{d}: is a file, not a version folder, so no manifest ({VERSION_LAYOUT}{hint})"
    if (d / LEDGER_DIR).is_dir():
        return f"{d / MANIFEST_NAME}: no manifest (is the build finished? `bench-build status` tells)"
    versions = versions_in(d)
    if versions:
        name = d.resolve().name
        where = f"pass {d / versions[0]}" if len(versions) == 1 else f"pass one of them, e.g. {d / versions[-1]}"
        return f"{d}: this is {name}'s folder, not a version; versions: {', '.join(versions)} — {where}"
    return f"{d}: not a version folder (no {MANIFEST_NAME}; {VERSION_LAYOUT})"


def read_manifest(version_dir: str | Path) -> dict[str, Any]:
    path = Path(version_dir) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(no_manifest_message(version_dir))
    return parse_manifest(path.read_bytes(), str(path))


def config_name(corruption: str, severity: int) -> str:
    """The dataset card's config of a partition (HF ``load_dataset(v, name)``): ``clean`` or ``fog_3``."""
    return corruption if severity == 0 else f"{corruption}_{severity}"


def partition_dir(corruption: str, severity: int) -> str:
    """A partition's hive directory below the version (layout v2; clean is ``corruption=clean/severity=0``)."""
    return f"data/corruption={corruption}/severity={severity}"


def unsafe_path_reason(rel: Any) -> str | None:
    """Why a manifest path may not be used as a file below the version directory, or None if it may.

    A manifest is data from elsewhere (a bucket): its paths must stay inside the version directory."""
    if not isinstance(rel, str) or not rel:
        return "not a non-empty string"
    if rel.startswith(("/", "\\")) or _URL_LIKE.match(rel):
        return "absolute path or URL"
    parts = rel.replace("\\", "/").split("/")
    if ".." in parts:
        return "'..' escapes the version directory"
    if any(p in ("", ".") for p in parts) or "\x00" in rel:
        return "empty, '.' or NUL path component"
    return None


RENDERS_DIR = "renders/"  # the card's pictures, listed in the manifest's ``renders``


def render_path_reason(rel: Any) -> str | None:
    """Why ``rel`` may not be a listed render (`unsafe_path_reason`, or not under ``renders/``), or None."""
    reason = unsafe_path_reason(rel)
    if reason is None and not rel.startswith(RENDERS_DIR):
        reason = f"not under {RENDERS_DIR}"
    return reason


def local_path(root: str | Path, rel: Any) -> Path:
    """``root/rel`` for a path ``rel`` taken from a manifest: the one check every file written below a version
    directory from a manifest (or a listing) passes. Refused with `ManifestError` when ``rel`` is unsafe
    (`unsafe_path_reason`) or resolves outside ``root`` (a symbolic link on the way)."""
    root = Path(root)
    reason = unsafe_path_reason(rel)
    if reason is not None:
        raise ManifestError(f"{rel!r}: refusing a path that escapes {root} ({reason})")
    path = root / rel
    if not path.resolve().is_relative_to(root.resolve()):
        raise ManifestError(f"{path}: resolves outside {root} (a symbolic link on the way); refusing to write "
                            "through it: remove the link")
    return path


def name_problems(manifest: dict[str, Any]) -> list[str]:
    """What is wrong with the manifest's ``dataset`` and ``version``, which every reader needs as safe names (a
    version is opened, pulled and published under them): `verify` reports these and checks the rest."""
    return [f"no {key}" if key not in manifest else f"{key} {value!r} is not a safe name ({names.RULE})"
            for key in ("dataset", "version")
            if not isinstance(value := manifest.get(key), str) or not SAFE_NAME.match(value)]


def check_manifest(manifest: dict[str, Any], where: str, *, check_names: bool = True) -> None:
    """Refuse a manifest whose dataset/version names (unless not ``check_names``: `name_problems`) or shard / render
    paths could escape its directory, or whose shard entries are malformed (`check_shard_entries`, which commands
    that need only the entries call alone)."""
    if check_names and (bad := name_problems(manifest)):
        raise ManifestError(f"{where}: {'; '.join(bad)}")
    check_shard_entries(manifest, where)
    shards = manifest["shards"]
    bad = [f"{e.get('path')!r} ({reason})" for e in shards
           if (reason := unsafe_path_reason(e.get("path") if isinstance(e, dict) else None))]
    if bad:
        raise ManifestError(f"{where}: refusing a manifest whose shard paths escape the version directory: "
                            + ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
    renders = manifest.get("renders", [])
    if not isinstance(renders, list):
        raise ManifestError(f"{where}: renders is not a list")
    bad = []
    for e in renders:
        if not isinstance(e, dict) or not isinstance(e.get("bytes"), int) or not isinstance(e.get("sha256"), str):
            bad.append(f"{str(e)[:80]!r} (a render needs path, bytes and sha256)")
        elif reason := render_path_reason(e.get("path")):
            bad.append(f"{e.get('path')!r} ({reason})")
    if bad:
        raise ManifestError(f"{where}: refusing a manifest whose render paths escape its renders/ directory: "
                            + ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))


#: what every ``shards`` entry holds, and its type: what `run --reuse`, `diff` and `verify` read from each
SHARD_FIELDS = {"path": str, "corruption": str, "severity": int, "rows": int, "bytes": int, "sha256": str}


def check_shard_entries(manifest: dict[str, Any], where: str) -> None:
    """Refuse (`ManifestError`, one line naming ``where`` and the first bad entry) a manifest whose ``shards`` is not a
    list of entries with every `SHARD_FIELDS` key of its type, and a string ``partition_fingerprint`` where one is
    given: an entry edited by hand or cut short, which the commands reading every entry would otherwise stop on."""
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise ManifestError(f"{where}: no shard list")
    bad = []
    for i, e in enumerate(shards):
        if not isinstance(e, dict):
            bad.append(f"entry {i} is a JSON {type(e).__name__}, not an object")
            continue
        wrong = [k for k, t in SHARD_FIELDS.items() if not isinstance(e.get(k), t) or isinstance(e.get(k), bool)]
        if "partition_fingerprint" in e and not isinstance(e["partition_fingerprint"], str):
            wrong.append("partition_fingerprint")
        if wrong:
            bad.append(f"entry {i} ({str(e.get('path'))[:80]!r}): " + ", ".join(
                f"no {k}" if k not in e else f"{k} {e[k]!r} is not a {SHARD_FIELDS.get(k, str).__name__}"
                for k in wrong))
    if bad:
        raise ManifestError(f"{where}: malformed shards {bad[0]}" + (f" (and {len(bad) - 1} more)"
                                                                      if len(bad) > 1 else "")
                            + "; every entry needs path, corruption, severity, rows, bytes and sha256 (the manifest "
                              "was edited or cut short: pull or build that version again)")


def stable_view(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest without fields that legitimately differ between identical builds (timestamps, timings)."""
    out = {k: v for k, v in manifest.items() if k not in VOLATILE_KEYS}
    counts = dict(out.get("counts", {}))
    counts["by_partition"] = {k: {kk: vv for kk, vv in v.items() if kk != "seconds"}
                              for k, v in counts.get("by_partition", {}).items()}
    out["counts"] = counts
    return out


@dataclass
class VerifyReport:
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # unlisted non-data files: reported, not failing
    renders: int = 0  # listed renders checked (size and sha256), beside the ``checked`` data files
    of_files: int | None = None  # a partial pull: how many data files the whole version has

    @property
    def ok(self) -> bool:
        return not self.problems


#: Files of a version that are not data and are never listed: the manifest itself and the dataset card.
#: Directories and files whose name starts with ``_`` or ``.`` (``_ledger/``, the writer lock, temp files)
#: are run state that no reader opens (pyarrow ignores them); ``validation/`` and ``renders/`` are reports
#: (the renders the manifest lists are checked as such; a picture `bench-build render` added later is not).
UNLISTED_OK = (MANIFEST_NAME, "README.md")
UNLISTED_DIRS = ("validation", "renders")


def check_file_set(manifest: dict[str, Any], present: list[str]) -> tuple[list[str], list[str]]:
    """(problems, warnings) for files present in a version but not listed in its manifest.

    Driven only by the manifest's listed paths, whatever the layout: an unlisted ``.parquet`` is an error
    (every glob reader — pandas, DuckDB, pyarrow.dataset — would read its rows), any other unlisted
    file a warning. Listed files that are missing are reported by the per-file check."""
    listed = {e.get("path") for e in manifest.get("shards", []) if isinstance(e, dict)}
    problems, warnings = [], []
    for rel in sorted(present):
        parts = rel.split("/")
        if rel in listed or rel in UNLISTED_OK or parts[0] in UNLISTED_DIRS or \
                any(p.startswith(("_", ".")) for p in parts):
            continue
        if rel.endswith(".parquet"):
            problems.append(f"{rel}: not listed in the manifest (a stray shard: glob readers would read its rows)")
        else:
            warnings.append(f"{rel}: not listed in the manifest")
    return problems, warnings


def check_counts(manifest: dict[str, Any]) -> list[str]:
    """The manifest's totals against its own shard list: examples_stored, counts.by_partition (examples,
    bytes) and ``frames`` (every partition present holds every frame once); ``counts``, ``by_partition`` or
    ``frames`` of another kind (a manifest edited by hand or cut short) is one problem, said once."""
    def shown(value: Any) -> str:
        said = repr(value)
        return said if len(said) <= 60 else said[:57] + "…"

    problems = []
    shards = manifest.get("shards", [])
    counts = manifest.get("counts", {})
    by_part: dict[str, Any] | None = None  # None: not an object, compared with nothing
    if not isinstance(counts, dict):
        problems.append(f"counts {shown(counts)} is not an object")
    else:
        totals = sum(e["rows"] for e in shards)
        if totals != counts.get("examples_stored"):
            problems.append(f"manifest lists {totals} rows but counts say {counts.get('examples_stored')}")
        by_part = counts.get("by_partition", {})
        if not isinstance(by_part, dict):
            problems.append(f"counts.by_partition {shown(by_part)} is not an object")
            by_part = None
    frames = manifest.get("frames")
    if frames is not None and (not isinstance(frames, int) or isinstance(frames, bool)):
        problems.append(f"frames {shown(frames)} is not an integer")
        frames = None
    parts: dict[str, dict[str, int]] = {}
    for e in shards:
        p = parts.setdefault(f"{e['corruption']}/{e['severity']}", {"examples": 0, "bytes": 0})
        p["examples"] += e["rows"]
        p["bytes"] += e["bytes"]
    for key in sorted(set(parts) | set(by_part or ())):
        got = parts.get(key)
        if by_part is not None:
            said = by_part.get(key)
            if got is None:
                problems.append(f"counts.by_partition has {key} but no shard of it is listed")
            elif said is None:
                problems.append(f"shards of {key} are listed but counts.by_partition has no {key}")
            elif not isinstance(said, dict):
                problems.append(f"counts.by_partition[{key}] {shown(said)} is not an object")
            elif (said.get("examples"), said.get("bytes")) != (got["examples"], got["bytes"]):
                problems.append(f"counts.by_partition[{key}] says {said.get('examples')} examples / "
                                f"{said.get('bytes')} bytes, its shards hold {got['examples']} / {got['bytes']}")
        if got is not None and frames is not None and got["examples"] != frames:
            problems.append(f"partition {key} holds {got['examples']} examples, the manifest says {frames} frames")
    return problems


def verify_version(version_dir: str | Path, *, workers: int = 4) -> VerifyReport:
    """Re-check every shard listed in the manifest (size, sha256, Parquet row count) and every listed render
    (size, sha256)."""


    root = Path(version_dir)
    manifest = read_manifest(root)
    check_shard_entries(manifest, str(root / MANIFEST_NAME))
    report = VerifyReport()
    report.problems += name_problems(manifest)  # every reader refuses the version without them (`check_manifest`)
    if isinstance(manifest.get("partial"), dict):
        report.of_files = manifest["partial"].get("files_in_version")

    def check(entry: dict[str, Any]) -> str | None:
        rel = entry["path"]
        if unsafe_path_reason(rel):
            return f"{rel}: path escapes the version directory"
        path = root / rel
        if not path.is_file():
            return f"{rel}: missing"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{rel}: {size} bytes, manifest says {entry['bytes']}"
        if sha256_file(path) != entry["sha256"]:
            return f"{rel}: sha256 mismatch (file altered or corrupt)"
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as e:  # a file with the right hash can't fail here, but be loud if it does
            return f"{rel}: unreadable Parquet: {e}"
        if rows != entry["rows"]:
            return f"{rel}: {rows} rows, manifest says {entry['rows']}"
        return None

    def check_render(entry: Any) -> str | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int):
            return f"renders: malformed entry {str(entry)[:80]!r} (needs path, bytes and sha256)"
        rel = entry.get("path")
        if render_path_reason(rel):
            return f"{rel}: path escapes the version's renders/ directory"
        path = root / rel
        if path.is_symlink() or not path.is_file():
            return f"{rel}: missing" + (" (a symbolic link, not the build's file)" if path.is_symlink() else "")
        if path.stat().st_size != entry["bytes"]:
            return f"{rel}: {path.stat().st_size} bytes, manifest says {entry['bytes']}"
        if sha256_file(path) != entry["sha256"]:
            return f"{rel}: sha256 mismatch (file altered or corrupt)"
        return None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for problem in pool.map(check, manifest["shards"]):
            report.checked += 1
            if problem:
                report.problems.append(problem)
    renders = manifest.get("renders", [])
    if not isinstance(renders, list):
        report.problems.append("renders: not a list")
        renders = []
    for entry in renders:
        report.renders += 1
        if problem := check_render(entry):
            report.problems.append(problem)
    present = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    extra, report.warnings = check_file_set(manifest, present)
    report.problems += extra + check_counts(manifest)
    return report

"""Reusing an earlier version's unchanged partition files (`bench-build run --reuse`, publish, `diff`).

A partition file's bytes are a function of its partition fingerprint (`bench_build.build.shard.partition_fingerprint`:
stage, stage version, that severity's parameters, seed, source frames and their content, block, schema,
writer options, numeric profile — not the version). A new version of a benchmark whose recipe changed one
corruption has the same fingerprints for every other partition, so `run --reuse EARLIER` takes those files
from the earlier version (verified against the earlier manifest's sha256) and computes only the new ones.

Model: every version is self-contained. A reused file is a hard link (local), a server-side copy (same S3
endpoint) or a streamed copy into the new version's own directory; nothing refers to another version's
directory, so readers, `verify` and `pull` need no other version, and deleting an old version never breaks a
newer one. The ledger records reused files like built ones (with ``reused_from``), so a killed reuse build
resumes like any other.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.build.ledger import frame_identity, identity_digest
from bench_build.build.shard import build_columns, numeric_identity, partition_fingerprint
from bench_build.errors import BenchBuildError
from bench_build.format.reader import OPTIONAL_READ_KEYS, key_problems
from bench_build.format.schema import file_metadata
from bench_build.manifests.manifest import (
    MANIFEST_NAME,
    ManifestError,
    check_shard_entries,
    no_manifest_message,
    parse_manifest,
)
from bench_build.manifests.recipe import Recipe
from bench_build.plan.tasks import TaskSpec
from bench_build.runtime.numeric import build_profile, profile_differences
from bench_build.storage import LocalStore, StorageError, Store, open_store


class ReuseRefused(BenchBuildError, ValueError):
    """``--reuse`` names something that cannot be reused from (refused before any work: exit 2)."""


@dataclass
class EarlierVersion:
    store: Store
    manifest: dict[str, Any]
    where: str

    @property
    def label(self) -> str:
        return f"{self.manifest['dataset']} {self.manifest['version']}"

    def by_fingerprint(self) -> dict[str, dict[str, Any]]:
        return {s["partition_fingerprint"]: s for s in self.manifest["shards"] if s.get("partition_fingerprint")}


def open_earlier(where: str | Path, recipe: Recipe, *, endpoint_url: str | None = None,
                 profile: str | None = None) -> EarlierVersion:
    """The earlier version ``where`` (a version directory or URL) of ``recipe``'s benchmark, checked."""
    store = open_store(where, endpoint_url=endpoint_url, profile=profile)
    got = store.get(MANIFEST_NAME)
    if got is None:
        raise ReuseRefused(f"--reuse {where}: no {MANIFEST_NAME} there; name a finished version directory "
                           "(OUT/<benchmark>/<version>) or its URL")
    manifest = parse_manifest(got[0], store.key_url(MANIFEST_NAME))
    check_shard_entries(manifest, store.key_url(MANIFEST_NAME))  # each entry's fields are read below
    if manifest.get("dataset") != recipe.name:
        raise ReuseRefused(f"--reuse {where}: it is {manifest.get('dataset')!r}, not {recipe.name!r}; only "
                           "versions of the same benchmark share partitions")
    if manifest.get("version") == recipe.version:
        raise ReuseRefused(f"--reuse {where}: it is version {recipe.version} itself; name an earlier version")
    if not any(s.get("partition_fingerprint") for s in manifest.get("shards", [])):
        raise ReuseRefused(f"--reuse {where}: its manifest records no partition fingerprints (built by an older "
                           "bench-build); rebuild it, or build this version without --reuse")
    return EarlierVersion(store, manifest, str(where))


@dataclass
class ReusePlan:
    """Per task: the earlier files to take (ledger file entries) and the task reduced to what remains to build."""

    earlier: EarlierVersion
    reused: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # task name → file entries
    identities: dict[str, Any] = field(default_factory=dict)  # frame id → frame_identity
    remaining: dict[str, TaskSpec | None] = field(default_factory=dict)  # task name → reduced task (None: none)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)  # task name → the whole task (reused or not)
    not_reused: list[str] = field(default_factory=list)  # "<path>: why" of earlier files that failed their check

    @property
    def files(self) -> int:
        return sum(len(v) for v in self.reused.values())

    @property
    def bytes(self) -> int:
        return sum(f["bytes"] for v in self.reused.values() for f in v)


def plan_reuse(earlier: EarlierVersion, recipe: Recipe, src: Any, tasks: list[TaskSpec], *,
               encoding: str, numeric_profile: dict[str, Any] | None = None) -> ReusePlan:
    """Which files of ``tasks`` the earlier version already has: same partition fingerprint. Reads every frame's
    source files once (their sha256 is part of the fingerprint), as the workers would."""
    plan = ReusePlan(earlier)
    have = earlier.by_fingerprint()
    columns = build_columns(recipe, src)
    numeric = numeric_identity(numeric_profile if numeric_profile is not None else build_profile())
    digests: dict[str, str | None] = {}
    for t in tasks:
        for fid in t.frame_ids:
            if fid not in digests:
                plan.identities[fid] = frame_identity(src, fid)
                digests[fid] = identity_digest(plan.identities[fid])
        take, keep = [], []
        for c, s, rel in t.partitions(recipe):
            fp = partition_fingerprint(recipe, c, s, t.file_stem, t.frame_ids, [digests[f] for f in t.frame_ids],
                                       columns=columns, encoding=encoding, numeric=numeric)
            old = have.get(fp)
            if old is not None and old["path"] == rel:
                take.append({"path": rel, "corruption": c, "severity": s, "rows": old["rows"],
                             "bytes": old["bytes"], "sha256": old["sha256"], "seconds": 0.0,
                             "partition_fingerprint": fp, "reused_from": earlier.manifest["version"]})
            else:
                keep.append((c, s))
        if take:
            plan.tasks[t.name] = t
            plan.reused[t.name] = take
            plan.remaining[t.name] = replace(t, parts=tuple(keep)) if keep else None
    return plan


def place_files(plan: ReusePlan, task_name: str, store: Store) -> list[dict[str, Any]]:
    """Copy (link / server-side copy) the task's reused files into ``store``, each verified against the earlier
    manifest's sha256, and then against the rest of its entry (`placed_mismatch`: size, rows, the footer's partition
    fingerprint); a file already in place with the right size is kept (a resumed run), checked the same way.

    An earlier file that fails its check (damaged, altered or missing in the earlier version) is not reused: it
    leaves ``plan.reused`` and its partition joins the task's part still to compute (``plan.remaining``, which the
    caller reads after this call), so the task builds it like any new partition and the ledger records it as
    built; a note on stderr names it (as `publish` uploads a file whose store-side copy fails)."""
    out, failed = [], []
    for f in plan.reused.get(task_name, []):
        info = store.head(f["path"])
        how = "kept"
        try:
            if info is None or info.size != f["bytes"] or (isinstance(store, LocalStore)
                                                            and store.sha256(f["path"]) != f["sha256"]):
                how = store.copy_from(plan.earlier.store, f["path"], f["path"], sha256=f["sha256"])
            if wrong := placed_mismatch(store, f, plan.earlier.store.key_url(f["path"])):
                store.delete(f["path"])  # not this partition's file: never left under its name
                raise StorageError(wrong)
        except (StorageError, FileNotFoundError) as e:  # the earlier file: damaged, altered or gone
            why = str(e)
            plan.not_reused.append(f"{f['path']}: {why}")
            print(f"[bench-build] not reusing {f['path']} of {plan.earlier.label}: {why}; computing it instead",
                  file=sys.stderr, flush=True)
            failed.append((f["corruption"], f["severity"]))
            continue
        out.append({**f, "placed": how})
    if failed:
        task = plan.tasks[task_name]
        rest = plan.remaining.get(task_name)
        todo = set(failed) | set(rest.parts if rest is not None else ())
        plan.remaining[task_name] = replace(task, parts=tuple(p for p in task.parts if p in todo))
        plan.reused[task_name] = [f for f in plan.reused[task_name] if (f["corruption"], f["severity"]) not in todo]
    return out


def placed_mismatch(store: Store, f: dict[str, Any], where: str) -> str | None:
    """What the file just put in place at ``f["path"]`` (its sha256 is the earlier manifest's: checked by the copy)
    says against the rest of that manifest's entry, which no sha256 covers: its size, its row count, and the
    partition fingerprint in its footer, which must be the one this build computed (``f``'s). None if all agree.

    An entry edited after the build (a fingerprint set to another partition's, rows or bytes changed) would
    otherwise put another partition's bytes under this one's name, or a wrong count into the new manifest."""
    info = store.head(f["path"])
    size = None if info is None else info.size
    if size != f["bytes"]:
        return f"{where}: {size} bytes, its manifest lists {f['bytes']} (the manifest was altered)"
    try:
        with store.open_input(f["path"]) as fh:
            pf = pq.ParquetFile(fh)
            rows, meta = pf.metadata.num_rows, file_metadata(pf.schema_arrow)
    except (pa.ArrowException, OSError, ValueError) as e:
        return f"{where}: its Parquet footer cannot be read ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    if rows != f["rows"]:
        return f"{where}: {rows} rows, its manifest lists {f['rows']} (the manifest was altered)"
    if meta.get("partition_fingerprint") != f["partition_fingerprint"]:
        return (f"{where}: its footer's partition fingerprint is {str(meta.get('partition_fingerprint'))[:12]}…, not "
                f"the {f['partition_fingerprint'][:12]}… its manifest lists (another partition's file, or the "
                "manifest was altered)")
    return None


#: what `diff` reads from each manifest besides its shard entries, in the form of `READ_KEYS`: the title and notes
#: name the benchmark and version, the rows the partitions' stages and parameters and what else the builds were given
DIFF_KEYS: tuple[tuple[str, Any, str], ...] = (
    ("dataset", lambda v: isinstance(v, str), "a string"),
    ("version", lambda v: isinstance(v, str), "a string"),
)
DIFF_OPTIONAL_KEYS: tuple[tuple[str, Any, str], ...] = (
    *OPTIONAL_READ_KEYS,
    ("partitions", lambda v: isinstance(v, dict), "an object"),
    ("recipe", lambda v: isinstance(v, dict), "an object"),
    ("source_identity", lambda v: isinstance(v, dict), "an object"),
    ("source_identity.frames", lambda v: isinstance(v, dict), "an object"),
    ("numeric_profile", lambda v: isinstance(v, dict), "an object"),
)


def read_version_manifest(where: str | Path, *, endpoint_url: str | None = None,
                          profile: str | None = None) -> dict[str, Any]:
    """The manifest of the version at ``where`` (a directory or URL); a `ManifestError` naming it if none."""
    store = open_store(where, endpoint_url=endpoint_url, profile=profile)
    got = store.get(MANIFEST_NAME)
    if got is None:
        if isinstance(store, LocalStore):  # a file, a benchmark's folder, an unfinished build: said as such
            raise ManifestError(no_manifest_message(store.root))
        raise ManifestError(f"{store.key_url(MANIFEST_NAME)}: no manifest; name a finished version directory "
                            "(OUT/<benchmark>/<version>) or its URL")
    manifest = parse_manifest(got[0], store.key_url(MANIFEST_NAME))
    check_shard_entries(manifest, store.key_url(MANIFEST_NAME))  # `diff_versions` reads every entry's fields
    bad = key_problems(manifest, DIFF_KEYS) + key_problems(manifest, DIFF_OPTIONAL_KEYS, required=False)
    parts = manifest.get("partitions")
    if odd := [k for k, v in (parts.items() if isinstance(parts, dict) else ()) if not isinstance(v, dict)]:
        said = repr(parts[odd[0]])
        bad.append(f"partitions[{odd[0]!r}] {said if len(said) <= 60 else said[:57] + '…'} is not an object"
                   + (f" (and {len(odd) - 1} more)" if len(odd) > 1 else ""))
    if bad:
        raise ManifestError(f"{store.key_url(MANIFEST_NAME)}: {'; '.join(bad)} (the manifest was edited or cut "
                            "short: pull or build that version again)")
    return manifest


def _param_changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if a is None or b is None:
        return ""
    out = []
    if a.get("stage") != b.get("stage"):
        out.append(f"stage {a.get('stage')} → {b.get('stage')}")
    if a.get("stage_version") != b.get("stage_version"):
        out.append(f"stage_version {a.get('stage_version')} → {b.get('stage_version')}")
    if a.get("origin", "points") != b.get("origin", "points"):  # where the stage measures from (recipe `origin`)
        out.append(f"origin {a.get('origin', 'points')} → {b.get('origin', 'points')}")
    pa_, pb = a.get("params") or {}, b.get("params") or {}
    out += [f"{k} {pa_.get(k)} → {pb.get(k)}" for k in sorted(set(pa_) | set(pb)) if pa_.get(k) != pb.get(k)]
    return "; ".join(out)


def diff_versions(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per partition (``corruption/severity``) of two manifests: status, files, bytes and what differs.

    status: ``identical`` (every file of the partition has the same path and sha256 in both), ``reused`` (identical,
    and B took the files from A with `run --reuse`), ``changed``, ``added`` (only in B), ``removed`` (only in A).
    Files are compared by sha256, never by name or date: two independent builds of unchanged partitions are
    ``identical`` too."""
    def files(m: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for s in m.get("shards", []):
            out.setdefault(f"{s['corruption']}/{s['severity']}", {})[s["path"]] = s
        return out

    fa, fb = files(a), files(b)
    pa_, pb = a.get("partitions") or {}, b.get("partitions") or {}
    order = list(pb) + [k for k in pa_ if k not in pb]
    order += [k for k in [*fb, *fa] if k not in order]
    rows = []
    for key in dict.fromkeys(order):
        xa, xb = fa.get(key, {}), fb.get(key, {})
        if not xa:
            status = "added"
        elif not xb:
            status = "removed"
        elif set(xa) == set(xb) and all(xa[p]["sha256"] == xb[p]["sha256"] for p in xa):
            status = "reused" if all(xb[p].get("reused_from") == a.get("version") for p in xb) else "identical"
        else:
            status = "changed"
        same = sum(1 for p in xb if p in xa and xa[p]["sha256"] == xb[p]["sha256"])
        differs = _param_changes(pa_.get(key), pb.get(key))
        if status == "changed" and not differs:
            differs = _build_changes(a, b, xa, xb)
        rows.append({"partition": key, "status": status, "files": len(xb), "same_files": same,
                     "bytes": sum(s["bytes"] for s in xb.values()), "differs": differs})
    return rows


def _build_changes(a: dict[str, Any], b: dict[str, Any], xa: dict[str, Any], xb: dict[str, Any]) -> str:
    """Why a partition whose stage and parameters are the same has other bytes: what the two builds were given (what
    the partition fingerprint holds besides the partition's own stage and parameters)."""
    ra, rb = a.get("recipe") or {}, b.get("recipe") or {}
    out = [f"dataset {a.get('dataset')} → {b.get('dataset')}"] if a.get("dataset") != b.get("dataset") else []
    out += [f"{k} {ra.get(k)} → {rb.get(k)}" for k in ("seed", "source", "split") if ra.get(k) != rb.get(k)]
    out += [k.replace("_", " ") for k in ("source_options", "preprocess") if ra.get(k) != rb.get(k)]
    out += [f"{k} {a.get(k)} → {b.get(k)}" for k in ("frames", "frames_per_shard", "encoding", "schema_version")
            if a.get(k) != b.get(k)]
    ids_a, ids_b = (a.get("source_identity") or {}).get("frames") or {}, (b.get("source_identity") or {}).get(
        "frames") or {}
    if ids_a and ids_b and (moved := sum(1 for f in ids_a.keys() & ids_b.keys() if ids_a[f] != ids_b[f])):
        out.append(f"{moved} source frame(s) changed")
    if set(xa) != set(xb) and not out:
        out.append(f"files {len(xa)} → {len(xb)}")
    if (a.get("numeric_profile") and b.get("numeric_profile")
            and profile_differences(a["numeric_profile"], b["numeric_profile"])):
        out.append("numeric profile")
    if a.get("columns") and b.get("columns") and a["columns"] != b["columns"]:
        out.append("columns")
    return "; ".join(out) or "bytes (same parameters, frames and encoding)"


def diff_notes(a: dict[str, Any], b: dict[str, Any], *, same_place: bool = False, a_later: bool = False) -> list[str]:
    """One line each on what makes a `diff A B` read otherwise than "what changed from A to B": versions of
    different benchmarks (which share no partition: `run --reuse` refuses that pairing), the same version on both
    sides, A later than B (the rows then read backwards), and a partial pull on either side (its missing
    partitions show as removed / added). ``same_place``: A and B are the same directory or URL; ``a_later``: A's
    version orders after B's (the caller orders them: publish's `version_key`)."""
    notes = []
    va, vb = a.get("version"), b.get("version")
    if a.get("dataset") != b.get("dataset"):
        notes.append(f"A is {a.get('dataset')} and B is {b.get('dataset')}: versions of different benchmarks (their "
                     "keys and RNG streams differ, so no partition is shared; `run --reuse` refuses this pairing)")
    elif same_place:
        notes.append(f"A and B are the same version ({a.get('dataset')} {va}, the same place): every partition "
                     "compares with itself")
    elif va == vb:
        notes.append(f"A and B are both {a.get('dataset')} {va} (two copies or builds of the same version)")
    elif a_later:
        notes.append(f"A ({va}) is later than B ({vb}): the rows read from {va} to {vb} (\"added\": only in {vb}); "
                     f"pass the earlier version first for what {va} changed")
    for side, m, missing in (("A", a, "added"), ("B", b, "removed")):
        if part := m.get("partial"):
            picked = "; ".join(" ".join(f"{k}={v}" for k, v in sel.items() if v is not None) or "all"
                               for sel in part.get("selections", []))
            notes.append(f"{side} is a partial pull ({len(m.get('shards', []))} of {part.get('files_in_version')} "
                         f"files: {picked}): partitions it does not hold show as {missing}")
    return notes

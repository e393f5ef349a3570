"""The run ledger: which tasks of a build are done (with what bytes) or failed (with what error).

Layout under ``OUT/<benchmark>/<version>/_ledger/`` (a directory, or objects under an S3 prefix)::

    run.json                       fingerprint, recipe, frame list, shard count and task groups of this build
    shards/part-00003-of-00117.json         done: files (path, rows, bytes, sha256, seconds), run id
    shards/part-00004-of-00117.failed.json  failed: the error message (naming the bad file)
    shards/part-00003-of-00117-g002-of-025.json   the same, per task, when a block is split into task groups

One entry per task, named by `TaskSpec.name` (bench_build.plan.tasks): the block's name when a block is one
task, ``<block>-g<group>-of-<groups>`` when the build splits each block into task groups (full KITTI-C on a
cluster: 25 groups per block with the shipped table, each entry listing only its group's files).

Every ledger entry is written whole — locally to a temporary name then renamed, on S3 as one PUT —
so a kill at any moment leaves either the old entry or the new one. A task counts as done only if
its entry has the build's fingerprint, every file it lists is still there with the recorded size
and (with ``recheck="sha256"``, the default) sha256, and every source file its frames were read
from is unchanged: same set of files, same size and mtime, and (``recheck="sha256"``) same sha256.
The worker records each frame's source identity (`frame_identity`) as it reads the frame, so a
scan fixed after a build rebuilds exactly the tasks that read it.

An entry that cannot be read back (empty or cut short: not a JSON object, as a disk that filled up or a
copy that stopped can leave it) is only a lost cache of what its task's files prove: the task is
treated as not done and rebuilt (byte-identical, from the recipe and seed), and the run says so on
stderr, naming the entry. An unreadable ``run.json`` cannot be recovered that way (it records the
frame list and task split the done entries refer to): it is a `LedgerUnreadable` (exit 2) naming the
file and the remedy, ``--overwrite``. So is one edited by hand or cut short to a JSON object without a key
`run` reads (``fingerprint``; ``task_groups`` and ``numeric_profile`` where present) or with one of another
type (`run_problem`). The keys only `status` reads (``frames``, ``frames_per_shard``, ``recipe``) are checked
when `status` asks (``run_info(full=True)``): `run` writes them again from its own options when the
fingerprint is the build's. An entry of a task with a key its readers need missing or of another type
(``seconds`` a string, a file without ``rows``: `entry_problem`) is unreadable like a cut-short one: its task is
rebuilt.

A task has one entry, done or failed: `record_done` deletes the task's failed entry before it writes the done one
(a kill between the two leaves the task pending, never both). Ledgers of older bench-builds can hold both, left by
a rebuild that failed after its done entry had been found untrue (files or sources changed): the failed entry is
the later word on the task, so **a failed entry wins**. `bench-build status` shows the task failed, and `run`
builds it again, first deleting the done entry, as `check_done` answers "not done" for it.

Locally the entries are files under ``_ledger/shards/``; a file (or a broken link) where that folder or
``_ledger`` goes would make every entry unwritable (a failure could not be recorded, so the task would look
pending). `Ledger.refuse_blocked` names it: `run` calls it before any work, `status` before it reads entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench_build.errors import LedgerMismatch
from bench_build.manifests.manifest import LEDGER_DIR, sha256_file
from bench_build.storage import HASH_CHUNK, StorageError, Store, atomic_write_text, in_the_way, open_store

__all__ = ["HASH_CHUNK", "LEDGER_DIR", "Ledger", "LedgerMismatch", "LedgerUnreadable", "atomic_write_text",
           "entry_key", "sha256_file"]


def entry_key(shard: str, failed: bool = False) -> str:
    """A shard's ledger entry, relative to its version directory: done, or failed (error, kind, a bug's traceback)."""
    return f"{LEDGER_DIR}/shards/{shard}.failed.json" if failed else f"{LEDGER_DIR}/shards/{shard}.json"


def _kind(value: Any) -> str:
    """A JSON value's type in words, for a message naming a ledger key."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "a list of other values" if value else "an empty list"
    return {str: "a string", dict: "an object"}.get(type(value), "null")


def _count(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _groups(value: Any) -> bool:
    """``task_groups``: a list of groups, each a list of [corruption, severity] pairs."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(g, list) and g and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                          and _count(p[1]) for p in g) for g in value)


def _identity(value: Any) -> bool:
    """A frame's recorded source identity (`frame_identity`): null, or {file: {size, mtime_ns, sha256}}."""
    return value is None or (isinstance(value, dict) and all(
        isinstance(f, dict) and _count(f.get("size")) and _count(f.get("mtime_ns")) and isinstance(f.get("sha256"), str)
        for f in value.values()))


#: run.json's keys `run` reads (name, required, check, what it must be): a ledger from before task groups or
#: numeric profiles has no ``task_groups`` / ``numeric_profile`` (one task per block; no profile to compare)
RUN_KEYS = (("fingerprint", True, lambda v: isinstance(v, str), "a string"),
            ("task_groups", False, _groups, "a list of task groups, each a list of [corruption, severity] pairs"),
            ("numeric_profile", False, lambda v: isinstance(v, dict), "an object"))
#: and those only `status` reads (`run` writes them again from its own options)
STATUS_KEYS = (("frames", True, lambda v: _strings(v) and bool(v), "a list of frame ids"),
               ("frames_per_shard", True, lambda v: _count(v, 1), "a whole number ≥ 1"),
               ("recipe", True, lambda v: isinstance(v, dict), "an object"),
               ("recipe.corruptions", True, lambda v: isinstance(v, list), "a list"),
               ("recipe.severities", True, _count, "a whole number ≥ 0"))


def _problem(data: dict[str, Any], keys: tuple) -> str | None:
    """The first key of ``keys`` (dotted: a key of an object) that ``data`` lacks or holds with another type."""
    for name, required, check, wanted in keys:
        *parents, key = name.split(".")
        where = data
        for part in parents:
            where = where[part]  # checked before its keys (RUN_KEYS, STATUS_KEYS list an object first)
        if where.get(key) is None:  # an optional key may be absent or null
            if required:
                return f"no '{name}'" if key not in where else f"'{name}' is null, not {wanted}"
            continue
        if not check(where[key]):
            return f"'{name}' is {_kind(where[key])}, not {wanted}"
    return None


def run_problem(info: dict[str, Any], *, full: bool = False) -> str | None:
    """What makes a run.json unusable: a key `run` reads (with ``full``, also one `status` reads) missing or of
    another type; None when there is none."""
    return _problem(info, RUN_KEYS + (STATUS_KEYS if full else ()))


#: a done entry's keys its readers need (`status`, `check_done`, the manifest), and each file's
_DONE_KEYS = (("files", True, lambda v: isinstance(v, list) and all(isinstance(f, dict) for f in v),
               "a list of file objects"),
              ("seconds", True, _number, "a number"),
              ("frames", False, _strings, "a list of frame ids"),
              ("sources", False, lambda v: isinstance(v, dict) and all(map(_identity, v.values())),
               "an object of frames' source files (size, mtime_ns, sha256)"))
_FILE_KEYS = (("path", True, lambda v: isinstance(v, str) and bool(v), "a path"),
              ("corruption", True, lambda v: isinstance(v, str), "a string"),
              ("severity", True, _count, "a whole number"),
              ("rows", True, _count, "a whole number"),
              ("bytes", True, _count, "a whole number"),
              ("sha256", True, lambda v: isinstance(v, str), "a string"),
              ("seconds", True, _number, "a number"))
_FAILED_KEYS = (("error", True, lambda v: isinstance(v, str), "a string"),
                ("kind", False, lambda v: isinstance(v, str), "a string"))


def entry_problem(entry: dict[str, Any], failed: bool = False) -> str | None:
    """What makes a task's entry unusable (a key missing or of another type), None when there is none."""
    if failed:
        return _problem(entry, _FAILED_KEYS)
    if problem := _problem(entry, _DONE_KEYS):
        return problem
    for i, f in enumerate(entry["files"]):
        if problem := _problem(f, _FILE_KEYS):
            return problem.replace("'", f"'files[{i}].", 1)
    return None


class LedgerUnreadable(LedgerMismatch, ValueError):
    """A ledger file that is not the JSON object it should be (empty, truncated, not UTF-8)."""

    def __init__(self, url: str, problem: str, remedy: str = "") -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"ledger file {url} is unreadable ({problem})" + (f"; {remedy}" if remedy else ""))


# -- source identity -------------------------------------------------------------------------------
def frame_files(source: Any, frame_id: str) -> dict[str, Path] | None:
    """The source files ``frame_id`` is read from (those that exist), keyed by path relative to the
    source root; None when the reader cannot say (its frames then have no recorded identity)."""
    if hasattr(source, "frame_files"):
        files = list(source.frame_files(frame_id))
    elif hasattr(source, "paths"):
        files = list(source.paths(frame_id).values())
    else:
        return None
    root = getattr(source, "root", None)
    out = {}
    for f in files:
        f = Path(f)
        if f.is_file():
            rel = f.relative_to(root).as_posix() if root is not None and f.is_relative_to(root) else str(f)
            out[rel] = f
    return out


def frame_identity(source: Any, frame_id: str) -> dict[str, dict[str, Any]] | None:
    """{file: {size, mtime_ns, sha256}} of every source file of ``frame_id`` (None: reader cannot say)."""
    files = frame_files(source, frame_id)
    if files is None:
        return None
    out = {}
    for rel, path in sorted(files.items()):
        st = path.stat()
        out[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(path)}
    return out


def identity_digest(identity: dict[str, dict[str, Any]] | None) -> str | None:
    """Content digest of a frame's sources (paths, sizes, sha256 — not mtimes: copies of a dataset agree)."""
    if identity is None:
        return None
    rows = sorted((rel, v["size"], v["sha256"]) for rel, v in identity.items())
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def source_changed(source: Any, frame_id: str, recorded: dict[str, dict[str, Any]] | None,
                   recheck: str) -> str | None:
    """Why the source of ``frame_id`` differs from ``recorded`` (None if it does not, or is unknowable).

    ``recheck="size"``: the same files with the same size and mtime. ``recheck="sha256"``: the same files and sizes,
    and the same sha256 (re-hashed): a file touched or copied without its mtime, bytes unchanged, is not a change."""
    files = frame_files(source, frame_id)
    if files is None or recorded is None:
        return None
    if set(files) != set(recorded):
        added, gone = sorted(set(files) - set(recorded)), sorted(set(recorded) - set(files))
        return f"frame {frame_id}: source files changed (new: {added or '-'}, gone: {gone or '-'})"
    for rel, path in files.items():
        st, rec = os.stat(path), recorded[rel]
        if st.st_size != rec["size"]:
            return f"frame {frame_id}: {rel} changed since it was built (size {rec['size']} → {st.st_size})"
        if recheck == "size" and st.st_mtime_ns != rec["mtime_ns"]:
            return f"frame {frame_id}: {rel} changed since it was built (modified; --recheck size compares mtimes)"
        if recheck == "sha256" and sha256_file(path) != rec["sha256"]:
            return f"frame {frame_id}: {rel} content changed since it was built (sha256 differs)"
    return None


class Ledger:
    def __init__(self, root: str | Path | Store) -> None:
        self.store = open_store(root)  # the version directory (OUT/<benchmark>/<version>)
        self.root = self.store.root if hasattr(self.store, "root") else self.store.url
        self.unreadable: dict[str, str] = {}  # url → why, of the shard entries found unreadable (said once each)

    @property
    def dir(self) -> Path:
        return Path(self.root) / LEDGER_DIR

    def _entry(self, shard: str, failed: bool = False) -> str:
        return entry_key(shard, failed)

    def _read(self, key: str) -> dict[str, Any] | None:
        """The JSON object stored at ``key``, None if there is none; LedgerUnreadable if it is not one."""
        got = self.store.get(key)
        if got is None:
            return None
        try:
            data = json.loads(got[0])
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError: an empty or cut-short write
            raise LedgerUnreadable(self.store.key_url(key), str(e) or type(e).__name__) from None
        if not isinstance(data, dict):
            raise LedgerUnreadable(self.store.key_url(key), f"a JSON {type(data).__name__}, not an object")
        return data

    def _read_shard(self, key: str) -> dict[str, Any] | None:
        """A shard's entry; an unreadable one counts as absent (its shard is rebuilt), said once on stderr."""
        try:
            entry = self._read(key)
            if entry is not None and (problem := entry_problem(entry, failed=key.endswith(".failed.json"))):
                raise LedgerUnreadable(self.store.key_url(key), problem)
            return entry
        except LedgerUnreadable as e:
            if e.url not in self.unreadable:
                self.unreadable[e.url] = e.problem
                print(f"[bench-build] ledger entry {e.url} is unreadable ({e.problem}); its shard will be rebuilt",
                      file=sys.stderr, flush=True)
            return None

    # -- run ---------------------------------------------------------------------------------
    def run_info(self, *, full: bool = False) -> dict[str, Any] | None:
        """The build's run.json; LedgerUnreadable (a one-line error naming it, the key and the remedy) if it is
        damaged or a key `run` reads (``full``: or `status`) is missing or of another type (`run_problem`)."""
        key = f"{LEDGER_DIR}/run.json"
        try:
            info = self._read(key)
        except LedgerUnreadable as e:
            raise LedgerUnreadable(e.url, e.problem, "it records the build's recipe, frames and task split, so the "
                                   "build cannot resume: start this version over with `bench-build run … --overwrite`, "
                                   "or build into another --out") from None
        if info is not None and (problem := run_problem(info)):
            raise LedgerUnreadable(self.store.key_url(key), problem,
                                   "it records the build's fingerprint and task split, so the build cannot resume: "
                                   "start this version over with `bench-build run … --overwrite`, or build into "
                                   "another --out")
        if info is not None and full and (problem := run_problem(info, full=True)):
            raise LedgerUnreadable(self.store.key_url(key), problem,
                                   "`bench-build run` with this build's own options writes it again (its fingerprint "
                                   "names the build); or start the version over with `bench-build run … --overwrite`")
        return info

    def begin(self, info: dict[str, Any], *, overwrite: bool = False) -> None:
        """Record the build's identity; refuse to mix with a different build unless ``overwrite``."""
        try:
            old = self.run_info()
        except LedgerUnreadable:
            if not overwrite:
                raise
            old = None  # --overwrite starts over: the damaged run.json goes with the rest below
        if old is not None and old["fingerprint"] != info["fingerprint"]:
            if not overwrite:
                why = "recipe, stage versions, frames or shard size differ"
                if old.get("parquet_format") is None and info.get("parquet_format"):
                    why = ("it was written by an older bench-build, with other Parquet writer options: the same "
                           "examples would be other bytes")
                elif old.get("parquet_format") != info.get("parquet_format"):
                    why = (f"its Parquet writer options ({old['parquet_format']}) differ from this bench-build's "
                           f"({info['parquet_format']}): the same examples would be other bytes")
                raise LedgerMismatch(
                    f"{self.store.url} holds a build with fingerprint {old['fingerprint'][:12]} "
                    f"({why}; this run's is {info['fingerprint'][:12]}); "
                    "pass --overwrite to replace it, or choose another --out"
                )
            self.clear()
        elif old is None and overwrite:
            self.clear()
        self.store.write_text(f"{LEDGER_DIR}/run.json", json.dumps(info, indent=1, sort_keys=True, allow_nan=False))

    def clear(self) -> None:
        """Delete a previous build's data, manifest and ledger (for --overwrite)."""
        for sub in ("clean", "data", LEDGER_DIR, "validation", "renders"):
            self.store.delete_prefix(sub)
        for name in ("manifest.json", "README.md"):
            self.store.delete(name)

    def refuse_blocked(self) -> None:
        """StorageError (exit 2) naming what stands where the ledger's entry folder goes: a file or a broken link at
        ``_ledger/shards`` or ``_ledger`` (or above; local stores only: an object store has no folders)."""
        if not self.store.is_local:
            return
        shards = self.dir / "shards"
        if (p := in_the_way(shards)) is not None:
            kind = "a broken link" if p.is_symlink() else "a file"
            raise StorageError(f"{p} is {kind} where the ledger's folder {shards} must be (no task could be "
                               "recorded done or failed): move or remove it")

    # -- shards -------------------------------------------------------------------------------
    def record_done(self, shard: str, entry: dict[str, Any]) -> None:
        # the failed entry goes first: a kill between the two leaves neither (pending), never a done and a failed
        self.store.delete(self._entry(shard, failed=True))
        self.store.write_text(self._entry(shard), json.dumps({"status": "done", **entry}, indent=1, sort_keys=True,
                                                                        allow_nan=False))

    def forget_done(self, shard: str) -> None:
        """Delete ``shard``'s done entry: a run found it no longer true (a file of it changed or is gone, its sources
        changed) and builds the task again. Deleted before the task runs, so a rebuild that fails (or a run killed
        before it ends) leaves the task failed or pending, as `status` then says, never done with its old entry."""
        self.store.delete(self._entry(shard))

    def record_failed(self, shard: str, entry: dict[str, Any]) -> None:
        self.store.write_text(self._entry(shard, failed=True),
                              json.dumps({"status": "failed", **entry}, indent=1, sort_keys=True, allow_nan=False))

    def done_entry(self, shard: str) -> dict[str, Any] | None:
        return self._read_shard(self._entry(shard))

    def refresh_source_times(self, shard: str, source: Any, entry: dict[str, Any] | None = None) -> None:
        """Record the source files' mtimes of a done ``shard`` anew where they differ but the bytes were just
        re-hashed equal (``--recheck sha256``: a touched scan, a dataset copied without its mtimes), so the cheap
        size + mtime checks after it (the build's own completeness check, a later ``--recheck size``) agree.
        ``entry``: the shard's done entry, when the caller has just read it."""
        entry = entry if entry is not None else self.done_entry(shard)
        if entry is None or not entry.get("sources"):
            return
        changed = False
        for fid, recorded in entry["sources"].items():
            files = frame_files(source, fid)
            for rel, path in (files or {}).items():
                if recorded and rel in recorded and recorded[rel]["mtime_ns"] != (now := path.stat().st_mtime_ns):
                    recorded[rel]["mtime_ns"] = now
                    changed = True
        if changed:
            self.record_done(shard, entry)

    def failed_entry(self, shard: str) -> dict[str, Any] | None:
        return self._read_shard(self._entry(shard, failed=True))

    def object_sizes(self) -> dict[str, int]:
        """Size of every object of the version, from one listing: what `check_done` needs with
        ``recheck="size"`` (one LIST request per 1,000 objects on S3 instead of a HEAD per file)."""
        return {o.key: o.size for o in self.store.list()}

    def failed_keys(self) -> set[str]:
        """The keys of every failed entry, from one listing of the ledger's entry folder: what `check_done` needs
        to see the failed entries of a whole build without a stat (or an S3 HEAD) per task."""
        return {o.key for o in self.store.list(f"{LEDGER_DIR}/shards/") if o.key.endswith(".failed.json")}

    def files_problem(self, entry: dict[str, Any], sizes: dict[str, int] | None = None,
                      recheck: str = "size") -> str | None:
        """Why the files a done ``entry`` lists are not as it recorded them: one missing, of another size or (with
        ``recheck="sha256"``) other bytes; None when they are. ``sizes`` (`object_sizes`) replaces a HEAD per file."""
        for f in entry["files"]:
            if sizes is not None:
                size = sizes.get(f["path"])
            else:
                info = self.store.head(f["path"])
                size = None if info is None else info.size
            if size is None:
                return f"{f['path']} is missing"
            if size != f["bytes"]:
                return f"{f['path']} has {size} bytes, the ledger recorded {f['bytes']}"
            if recheck == "sha256" and self.store.sha256(f["path"]) != f["sha256"]:
                return f"{f['path']} does not match its recorded sha256"
        return None

    def check_done(self, shard: str, fingerprint: str, recheck: str = "sha256",
                   source: Any = None, sizes: dict[str, int] | None = None,
                   refresh_times: bool = False, failed_keys: set[str] | None = None) -> tuple[bool, str]:
        """Is ``shard`` done for this fingerprint with its files intact and, given ``source``, built from
        the source files as they are now? (ok, reason if not). ``sizes`` (`object_sizes`, taken after the
        files were written) replaces a HEAD per file; sha256 rechecks still read every file. ``refresh_times``
        (with ``recheck="sha256"``): a done shard whose source files were re-hashed equal but touched since gets
        their new mtimes recorded (`refresh_source_times`), from the entry this check already read. ``failed_keys``
        (`failed_keys`, or ``sizes``) replaces a look-up of the task's failed entry."""
        entry = self.done_entry(shard)
        if entry is None:
            return False, "not built"
        if entry.get("fingerprint") != fingerprint:
            return False, "built with another fingerprint"
        failed = self._entry(shard, failed=True)
        listed = failed_keys if failed_keys is not None else sizes
        if failed in listed if listed is not None else self.store.exists(failed):  # the later word (module docstring)
            return False, "its ledger also holds a failed entry (an older bench-build kept both after a failed rebuild)"
        if source is not None:
            recorded = entry.get("sources")
            if recorded is None:
                return False, "no source identity recorded (built by an older bench-build)"
            for fid in entry.get("frames", []):
                reason = source_changed(source, fid, recorded.get(fid), recheck)
                if reason:
                    return False, reason
        if why := self.files_problem(entry, sizes, recheck):
            return False, why
        if refresh_times and recheck == "sha256" and source is not None:
            self.refresh_source_times(shard, source, entry)
        return True, ""

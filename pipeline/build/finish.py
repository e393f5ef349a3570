"""A build's finish in the driver: the dataset card, its contact sheet, then ``manifest.json`` last."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from bench_build.build.ledger import Ledger, identity_digest
from bench_build.build.shard import error_path, os_error_kind, os_error_message, partition_table
from bench_build.format.schema import SCHEMA_VERSION, file_metadata
from bench_build.manifests.card import card_with_renders, render_card
from bench_build.manifests.card_sections import complete_card
from bench_build.manifests.manifest import MANIFEST_NAME, ManifestError, check_file_set, parse_manifest
from bench_build.manifests.recipe import Recipe
from bench_build.manifests.write import compose_manifest, manifest_shards, write_version_files
from bench_build.plan.tasks import BlockSpec, TaskSpec
from bench_build.render import import_drawing, write_contact_sheet  # matplotlib: only when a sheet is drawn
from bench_build.sources.demo.cache import is_demo_root
from bench_build.storage import Store, open_store

if TYPE_CHECKING:  # run.py imports this module
    from bench_build.build.run import BuildResult


def finish(recipe: Recipe, src: Any, frame_ids: list[str], fps: int, fingerprint: str, store: Store,
            version_dir: Path | str, tasks: list[TaskSpec], t0: float, ledger: Ledger, result: BuildResult, *,
            workers: int | None, address: str | None, stopping: Any = None,
            numeric_profile: dict[str, Any] | None = None, benchmark_split: str | None = None,
            after: Callable[..., dict[str, Any]] | None = None) -> BuildResult:
    """After the tasks: the manifest and the card (if every task is done), then ``after`` (the CLI's naturalness
    validation) if the recipe has ``[validate]``."""
    result.seconds = time.time() - t0
    complete = False
    if not result.failures:  # every recorded file still there with its size: one listing, not a HEAD per file
        sizes = ledger.object_sizes()
        changed = {}
        for t in tasks:
            ok, why = ledger.check_done(t.name, fingerprint, "size", src, sizes)
            if not ok:
                changed[t.name] = why
        complete = not changed
        if changed:  # recorded done, then changed under the run (a source file touched, a shard removed): said, exit 1
            name, why = next(iter(changed.items()))
            more = f" (and {len(changed) - 1} more task{'s' * (len(changed) > 2)})" if len(changed) > 1 else ""
            result.failures[MANIFEST_NAME] = (f"not written: after this run recorded {name}, {why}{more}; run the "
                                              "same command again: it re-checks and rebuilds only what changed")
            result.failure_kinds[MANIFEST_NAME] = "input"
    if complete and not result.shards_built and not (result.reused or {}).get("files"):
        # nothing computed or taken by this run: a version an earlier run finished keeps its bytes (manifest,
        # card, contact sheet), as published copies of it do; a re-run is not a new build
        result.manifest = unchanged_manifest(store, fingerprint, tasks, ledger)
        result.kept = result.manifest is not None
    if complete and not result.kept:
        t = time.time()
        try:
            described = {**src.describe(), **({"benchmark_split": benchmark_split} if benchmark_split else {})}
            result.manifest = write_manifest(store, recipe, described, tasks, ledger, fingerprint,
                                             fps, result.seconds, panels=result.sheet_panels,
                                             early_sheet=result.early_sheet,
                                             phases=result.phases, numeric_profile=numeric_profile)
        except OSError as e:  # every shard is written and kept: re-running writes only the manifest
            where = error_path(e) or store.key_url(MANIFEST_NAME)  # README.md, never its temp file
            result.failures[MANIFEST_NAME] = os_error_message(e, where)
            result.failure_kinds[MANIFEST_NAME] = os_error_kind(e, where)
        result.phases["manifest"] = round(time.time() - t - result.phases.get("contact_sheet", 0.0), 3)
    if complete and result.manifest is not None:  # Parquet files no task wrote: `verify` fails, glob readers read them
        result.strays = check_file_set(result.manifest, list(sizes))[0]
    if result.manifest is not None and recipe.validate is not None and after is not None:  # naturalness check

        if stopping is not None:  # validation may start a Ray of its own
            stopping.join()
        t = time.time()
        result.validation = after(version_dir, recipe, workers=workers, address=address)
        result.phases["validate"] = round(time.time() - t, 3)
    result.sheet_panels, result.early_sheet = {}, None  # pictures of one frame: not kept with the result
    return result



def unchanged_manifest(store: Store, fingerprint: str, tasks: list[TaskSpec], ledger: Ledger) -> dict[str, Any] | None:
    """The version's manifest as an earlier run wrote it, if it is that of this build: the same fingerprint and
    exactly the files (path, sha256) the ledger records; None otherwise (missing, damaged or another build's)."""
    got = store.get(MANIFEST_NAME)
    if got is None:
        return None
    try:
        manifest = parse_manifest(got[0], store.key_url(MANIFEST_NAME))
    except ManifestError:
        return None
    recorded = {(f["path"], f["sha256"]) for t in tasks for f in (ledger.done_entry(t.name) or {}).get("files", [])}
    listed = {(s.get("path"), s.get("sha256")) for s in manifest.get("shards", [])}
    if manifest.get("fingerprint") != fingerprint or listed != recorded:
        return None
    # the card and the renders it lists still there with their sizes (a deleted card is written again)
    for key, size in [("README.md", None), *((r.get("path"), r.get("bytes")) for r in manifest.get("renders", []))]:
        info = store.head(key) if key else None
        if info is None or (size is not None and info.size != size):
            return None
    return manifest


def write_manifest(version_dir: str | Path | Store, recipe: Recipe, source: dict,
                   specs: list[BlockSpec] | list[TaskSpec], ledger: Ledger, fingerprint: str, fps: int,
                   seconds: float, *, panels: dict | None = None, phases: dict[str, float] | None = None,
                   numeric_profile: dict[str, Any] | None = None,
                   early_sheet: EarlySheet | None = None) -> dict[str, Any]:
    """Write the dataset card, then ``manifest.json`` last: a manifest only ever lists finished shards.

    ``panels``: the contact sheet's panels as the build tasks painted them (else the sheet's frame is read
    back from the files); ``early_sheet``: the sheet already drawn from them while the other tasks ran (used
    when it shows what this manifest would draw); ``phases`` gets the seconds the contact sheet took here.

    Files are listed block by block in the recipe's partition order, whatever the tasks were, so the
    manifest does not depend on how blocks were split into tasks."""
    store = open_store(version_dir)
    files = []
    for spec in specs:
        entry = ledger.done_entry(spec.name)
        assert entry is not None
        files += [(spec.file_stem, f) for f in entry["files"]]
    shards, by_part = manifest_shards(recipe, files)
    meta: dict[str, Any] = {}
    if shards:
        with store.open_input(shards[0]["path"]) as f:
            meta = file_metadata(pq.read_schema(f))
    frame_digests = {}
    for spec in specs:
        recorded = (ledger.done_entry(spec.name) or {}).get("sources") or {}
        frame_digests.update({fid: identity_digest(recorded.get(fid)) for fid in spec.frame_ids})
    manifest = compose_manifest(
        recipe, source, fingerprint=fingerprint, fps=fps, seconds=seconds, numeric_profile=numeric_profile,
        schema_version=SCHEMA_VERSION, meta=meta, partitions=partition_table(recipe),
        shard_frames={spec.file_stem: list(spec.frame_ids) for spec in specs}, shards=shards, by_part=by_part,
        frame_digests=frame_digests, demo=is_demo(source))
    reused = "reused" in manifest
    validation = "validation/summary.md" if store.exists("validation/summary.md") else None
    card = complete_card(render_card(manifest, recipe, validation=validation), manifest, recipe)
    if reused:
        card = card.rstrip("\n") + "\n\n" + reuse_card_section(manifest) + "\n"
    t = time.time()
    sheet = early_sheet.take(store, manifest) if early_sheet is not None else None
    drawn = early_sheet.seconds if sheet is not None else None  # type: ignore[union-attr]
    if sheet is None:
        sheet = contact_sheet(store, manifest, panels)
    if phases is not None:  # the wait here (the part after the last task), and the drawing's own time
        phases["contact_sheet"] = round(time.time() - t, 3)
        phases["sheet_draw"] = round(phases["contact_sheet"] if drawn is None else drawn, 3)
    # what the build drew for its card, with checksums: publish and pull move exactly these (never whatever a
    # listing of renders/ holds), verify checks them; an empty list says "none", unlike an old build's absent key
    write_version_files(store, manifest, card_with_renders(card, sheet) if sheet else card,
                        renders=render_entries(store, sheet))
    return manifest


def reuse_card_section(manifest: dict[str, Any]) -> str:
    """The card's note on files taken from an earlier version (`run --reuse`): which, from which version."""
    r = manifest["reused"]
    parts = sorted({f"{s['corruption']}/{s['severity']}" for s in manifest["shards"] if s.get("reused_from")})
    built = sorted({f"{s['corruption']}/{s['severity']}" for s in manifest["shards"] if not s.get("reused_from")})
    return (f"## Reused partitions\n\n{r['files']} of {len(manifest['shards'])} files "
            f"({r['bytes'] / 1e6:.1f} MB) were taken unchanged from version {', '.join(r['from_versions'])} of "
            f"{manifest['dataset']}: their partition fingerprints (stage, version, parameters, seed, source, "
            f"writer) are equal, so their bytes are identical (each checked against that version's sha256). "
            f"Reused partitions: {', '.join(parts)}. Computed for this version: {', '.join(built) or 'none'}.")


def render_entries(store: Store, sheet: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The manifest's ``renders``: path, bytes and sha256 of the contact sheet as stored (read back)."""
    if not sheet:
        return []
    data = store.read_bytes(sheet["path"])
    return [{"path": sheet["path"], "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]


def is_demo(source: dict[str, Any]) -> bool:
    """Built from bench-build's generated demo data (its marker file in a source root)?"""

    return any(isinstance(v, str) and k.endswith("root") and Path(v).is_dir() and is_demo_root(v)
               for k, v in source.items())


def contact_sheet(store, manifest: dict[str, Any], panels: dict | None = None) -> dict[str, Any] | None:
    """Render the card's contact sheet into ``renders/``; a picture never fails a finished build."""

    try:
        return write_contact_sheet(store, manifest, panels=panels)
    except Exception as e:  # matplotlib, an odd frame: say so and keep the build
        warnings.warn(f"contact sheet not rendered: {type(e).__name__}: {e}", stacklevel=2)
        return None



class CapturedStore:
    """What `write_contact_sheet` puts, kept in memory: an early sheet is written only by a build that finishes."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes) -> None:
        self.data[key] = data


#: from this many cores up, `EarlySheet` imports the drawing libraries while Ray starts
IMPORT_EARLY_CORES = 4


class EarlySheet:
    """The contact sheet drawn on a thread while the build's other tasks run, as soon as the tasks of its frame
    (block 0) have painted every panel: the tiling (≈ 1 s on this project's machine) leaves the driver's serial
    finish. It is drawn from a preview of the manifest (the plan's partitions and blocks) and used by
    `write_manifest` only if the real manifest names the same frame and partitions, so the sheet's bytes are the
    ones the finish would draw; otherwise (a resumed or reusing build, whose panels never complete) the finish
    draws it as before."""

    def __init__(self, recipe: Recipe, tasks: list[TaskSpec]) -> None:
        blocks = {t.file_stem: list(t.frame_ids) for t in tasks}
        self.parts = {p for t in tasks for p in t.parts}
        first = min(blocks) if blocks else None
        self.preview = {"dataset": recipe.name, "version": recipe.version, "recipe": recipe.canonical(),
                        "shard_frames": blocks,
                        "shards": [{"corruption": c, "severity": s, "shard": first} for c, s in sorted(self.parts)]}
        self.store = CapturedStore()
        self.thread: threading.Thread | None = None
        self.sheet: dict[str, Any] | None = None
        self.seconds = 0.0
        # matplotlib's import (≈ 0.4 s CPU) while Ray starts: where every task ends at once (as many workers as
        # tasks) the sheet is drawn after the last one, and the import would be serial time. Only with cores to
        # spare: Ray's start keeps ≈ 1.1 cores busy (2.45 CPU-s in 2.15 s on 2 cores), and there the import
        # slowed it by as much as it saved at the end (finish 1.0 → 0.8 s, Ray start 2.2 → 2.45 s): there `poll`
        # imports once the first panels are in
        self.importing: threading.Thread | None = None
        if (os.cpu_count() or 1) >= IMPORT_EARLY_CORES:
            self._import_drawing()

    def poll(self, panels: dict) -> None:
        """Start drawing once ``panels`` covers every partition (called by the scheduling loop). With fewer cores,
        the drawing libraries are imported when block 0's first task has painted its panels: Ray has started by
        then, and what is imported while other tasks still run is not imported after the last one (2 demo frames
        in 2 tasks on 2 workers end together, and the whole drawing followed them)."""
        if self.importing is None and panels:
            self._import_drawing()
        if self.thread is None and self.parts and set(panels) == self.parts:
            # not a daemon: an interrupted run's interpreter waits for it at exit (≤ ≈ 1 s) instead of tearing it
            # down inside matplotlib's native code, which aborts the process (exit 134, not 130)
            self.thread = threading.Thread(target=self._draw, args=(dict(panels),), daemon=False,
                                           name="bench-build-contact-sheet")
            self.thread.start()

    def _import_drawing(self) -> None:
        self.importing = threading.Thread(target=import_drawing, name="bench-build-import-drawing")
        self.importing.start()

    def _draw(self, panels: dict) -> None:

        t = time.time()
        try:
            self.sheet = write_contact_sheet(self.store, self.preview, panels=panels)
        except Exception:  # the finish draws it instead (and warns if it fails there too)
            self.sheet = None
        self.seconds = time.time() - t

    def wait(self) -> None:
        """Until the drawing (if started) is over. `run_build` waits before it returns, built or not: a thread still
        in matplotlib's native code when the interpreter exits aborts the process (seen as exit 134 after a failed
        run, once Ray's stop no longer gave the thread a second)."""
        if self.importing is not None:
            self.importing.join()
        if self.thread is not None:
            self.thread.join()

    def take(self, store: Store, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """The early sheet written into ``store`` if it is the one ``manifest`` would draw, else None."""
        if self.thread is None:
            return None
        self.thread.join()
        sheet = self.sheet
        parts = {(s["corruption"], int(s["severity"])) for s in manifest.get("shards", [])}
        first = manifest["shards"][0]["shard"] if manifest.get("shards") else None
        frame = (manifest.get("shard_frames") or {}).get(first, [None])[0]
        if sheet is None or parts != self.parts or sheet.get("frame_id") != frame or \
                sheet["path"] not in self.store.data:
            return None
        store.put_bytes(sheet["path"], self.store.data[sheet["path"]])
        return sheet

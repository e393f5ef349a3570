"""Writing a version's manifest: the document every reader, publish and verify trusts, composed from what the
build recorded, and written last so that a manifest only ever lists finished files.

`manifest_shards` orders the recorded files (block by block, the recipe's partition order: the manifest does not
depend on how blocks were split into tasks), `compose_manifest` builds the document, `write_version_files` writes
the dataset card and then ``manifest.json``. The build (`build/finish.py`) gathers the inputs from its ledger.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from bench_build import __version__
from bench_build.manifests.manifest import MANIFEST_NAME, MANIFEST_VERSION
from bench_build.manifests.recipe import Recipe
from bench_build.storage import Store


def manifest_shards(recipe: Recipe, files: list[tuple[str, dict[str, Any]]]
                    ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The manifest's ``shards`` list and per-partition counts from (file stem, ledger file entry) pairs."""
    rank = {("clean", 0): 0} | {(c.name, sv): 1 + i * recipe.severities + sv
                                 for i, c in enumerate(recipe.corruptions) for sv in range(1, recipe.severities + 1)}
    files = sorted(files, key=lambda sf: (sf[0], rank.get((sf[1]["corruption"], sf[1]["severity"]), 0)))
    shards, by_part = [], {}
    for stem, f in files:
        shards.append({"path": f["path"], "corruption": f["corruption"], "severity": f["severity"],
                       "shard": stem, "rows": f["rows"], "bytes": f["bytes"], "sha256": f["sha256"],
                       **({"partition_fingerprint": f["partition_fingerprint"]} if "partition_fingerprint" in f
                          else {}),
                       **({"reused_from": f["reused_from"]} if "reused_from" in f else {})})
        part = by_part.setdefault(f"{f['corruption']}/{f['severity']}", {"examples": 0, "bytes": 0, "seconds": 0.0})
        part["examples"] += f["rows"]
        part["bytes"] += f["bytes"]
        part["seconds"] = round(part["seconds"] + f["seconds"], 4)
    return shards, by_part


def compose_manifest(recipe: Recipe, source: dict[str, Any], *, fingerprint: str, fps: int, seconds: float,
                     numeric_profile: dict[str, Any] | None, schema_version: int, meta: dict[str, Any],
                     partitions: dict[str, dict[str, Any]], shard_frames: dict[str, list[str]],
                     shards: list[dict[str, Any]], by_part: dict[str, dict[str, Any]],
                     frame_digests: dict[str, Any], demo: bool) -> dict[str, Any]:
    """The manifest of a finished build. ``meta``: the first data file's footer (fields, intensity scale,
    columns, encoding); ``frame_digests``: each frame's source identity digest (null where unknown); ``demo``: built
    from bench-build's generated demo data."""
    n_frames = sum(len(ids) for ids in shard_frames.values())
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "schema_version": schema_version,
        "dataset": recipe.name,
        "version": recipe.version,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 2),
        "code_version": __version__,
        # what every task computed under (each checked its own against it): platform, library versions, NumPy
        # SIMD dispatch, OpenBLAS core, and whether that is bench-build's pin or a user's override
        **({"numeric_profile": numeric_profile} if numeric_profile is not None else {}),
        "fingerprint": fingerprint,
        "recipe": recipe.canonical(),
        "source": {**{k: v for k, v in source.items() if k != "root"}, **({"demo": True} if demo else {})},
        "frames": n_frames,
        "frames_per_shard": fps,
        "fields": meta.get("fields"),
        "intensity_scale": meta.get("intensity_scale"),
        "columns": meta.get("columns", []) if shards else [],
        "encoding": meta.get("encoding", "full") if shards else "full",
        "partitions": partitions,
        # row r of every partition file of a shard is frame shard_frames[shard][r]: loaders index without a scan
        "shard_frames": shard_frames,
        "counts": {
            "examples_defined": recipe.examples_defined(n_frames),
            "examples_stored": sum(s["rows"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
            "by_partition": by_part,
        },
        "shards": shards,
        # what each frame was built from: sha256 over its source files' (path, size, sha256); null when the
        # reader cannot name a frame's files. A changed scan changes its digest (and is rebuilt by `run`).
        "source_identity": {
            "digest": hashlib.sha256(json.dumps(sorted(frame_digests.items())).encode()).hexdigest(),
            "frames": frame_digests,
        },
    }
    reused = [s for s in shards if s.get("reused_from")]
    if reused:  # provenance only: the files are the ones this version would have computed, byte for byte
        manifest["reused"] = {"from_versions": sorted({s["reused_from"] for s in reused}), "files": len(reused),
                              "bytes": sum(s["bytes"] for s in reused)}
    return manifest


def write_version_files(store: Store, manifest: dict[str, Any], card: str, *, renders: list[dict[str, Any]]) -> None:
    """The dataset card (README.md), then ``manifest.json`` — last: a manifest only ever lists finished files.
    ``renders``: the card's pictures with their checksums, listed in the manifest."""
    store.write_text("README.md", card)
    manifest["renders"] = renders
    store.write_text(MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False))

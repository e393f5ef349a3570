"""Writing small robo3d-nuscenes-c / robo3d-wod-c versions in the real row schema for the Det3D scoring tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench_build.format.schema import encode_rows, schema_with_metadata
from bench_build.manifests.manifest import MANIFEST_VERSION
from bench_build.stages.frame import Frame


def write_scene_version(root: Path, dataset: str, parts: dict[tuple[str, int], list[Frame]],
                        source: dict[str, Any], columns: tuple[str, ...] = ()) -> Path:
    """One shard per partition (frames as given), a manifest with ``source`` and Robo3D's severity names."""
    shards = []
    for (c, s), frames in parts.items():
        rel = f"data/corruption={c}/severity={s}/part-00000-of-00001.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        schema = schema_with_metadata({"fields": list(frames[0].fields), "intensity_scale": "unit"},
                                      columns=columns)
        batch = encode_rows([(f"{dataset}/{f.frame_id}/{c}/{s}", c, s, f) for f in frames], schema)
        pq.write_table(pa.Table.from_batches([batch], schema=schema), root / rel)
        shards.append({"path": rel, "corruption": c, "severity": s})
    (root / "manifest.json").write_text(json.dumps({
        "manifest_version": MANIFEST_VERSION, "dataset": dataset, "version": "0.1.0", "source": source,
        "recipe": {"name": dataset, "severity_names": ["light", "moderate", "heavy"]}, "shards": shards}))
    return root

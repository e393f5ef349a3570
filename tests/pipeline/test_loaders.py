"""The user's first call, one line per reader, against a demo build (layout v2): every row, clean included,
points as N×C, partition keys with one type each."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

STORED = 4 * (1 + 4 * 5)  # 4 frames × (clean + 4 corruptions × 5 severities)


def _manifest(v):
    return json.loads((v / "manifest.json").read_text())


def test_pandas_read_parquet_with_and_without_filters(mini_build):
    import pandas as pd

    df = pd.read_parquet(mini_build / "data")  # v1 raised "Unable to merge: … string vs dictionary"
    assert len(df) == STORED == _manifest(mini_build)["counts"]["examples_stored"]
    assert (df["corruption"] == "clean").sum() == 4
    assert sorted(df["corruption"].astype(str).unique()) == ["background", "beam_del", "clean", "gaussian_rad",
                                                           "translation"]
    assert sorted(int(s) for s in df["severity"].astype(str).unique()) == [0, 1, 2, 3, 4, 5]
    row = df.iloc[0]
    pts = np.stack(row["points"])  # an array of N length-C arrays: N×C with no metadata lookup
    assert pts.shape == (row["num_points"], 4) and pts.dtype == np.float32
    fog = pd.read_parquet(mini_build / "data", filters=[("corruption", "=", "beam_del"), ("severity", "=", 5)])
    assert len(fog) == 4 and set(fog["corruption"].astype(str)) == {"beam_del"}
    clean = pd.read_parquet(mini_build / "data", filters=[("corruption", "=", "clean")])
    assert len(clean) == 4 and set(clean["severity"].astype(str)) == {"0"}


def test_pyarrow_dataset_hive(mini_build):
    import pyarrow.dataset as pads

    t = pads.dataset(mini_build / "data", partitioning="hive").to_table()
    assert t.num_rows == STORED
    assert t.schema.field("corruption").type == pa.string() and t.schema.field("severity").type == pa.int32()
    assert t.schema.field("points").type == pa.list_(pa.list_(pa.float32(), 4))
    counts = t.group_by(["corruption", "severity"]).aggregate([("key", "count")]).to_pylist()
    assert {(r["corruption"], r["severity"]): r["key_count"] for r in counts} == {
        tuple([k.split("/")[0], int(k.split("/")[1])]): v["examples"]
        for k, v in _manifest(mini_build)["counts"]["by_partition"].items()}
    # the partition in the path agrees with the key in the row (the only two places it is written)
    keys = t["key"].to_pylist()
    assert all(k.split("/")[2:] == [c, str(s)] for k, c, s in
               zip(keys, t["corruption"].to_pylist(), t["severity"].to_pylist(), strict=True))


def test_duckdb_one_query_returns_clean_and_corrupted(mini_build):
    import duckdb

    rows = duckdb.sql(
        f"SELECT corruption, severity, typeof(severity) AS st, count(*) AS n, sum(len(points)) AS pts, "
        f"sum(num_points) AS np, min(len(points[1])) AS c FROM read_parquet('{mini_build}/data/**/*.parquet', "
        "hive_partitioning = true) GROUP BY ALL ORDER BY ALL").fetchall()
    assert len(rows) == 21 and sum(r[3] for r in rows) == STORED
    assert ("clean", 0) in {(r[0], r[1]) for r in rows}
    assert all(r[4] == r[5] and r[6] == 4 for r in rows)  # N rows of C = 4 values each


def test_hf_datasets_configs_from_the_card(mini_build, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    card = (mini_build / "README.md").read_text()
    assert card.startswith("---\n") and "\n---\n\n# mini-c 0.1.0" in card  # YAML header, then Markdown
    d = datasets.load_dataset(str(mini_build), "beam_del_5", split="train", cache_dir=str(tmp_path / "hf"))
    assert len(d) == 4 and sorted(d["frame_id"]) == ["000000", "000001", "000002", "000003"]
    assert all(k.split("/")[2:] == ["beam_del", "5"] for k in d["key"])
    x = d.with_format("numpy")[0]
    assert x["points"].shape == (x["num_points"], 4) and x["points"].dtype == np.float32
    clean = datasets.load_dataset(str(mini_build), "clean", split="train", cache_dir=str(tmp_path / "hf"))
    assert len(clean) == 4 and all(k.endswith("/clean/0") for k in clean["key"])
    names = datasets.get_dataset_config_names(str(mini_build))
    assert len(names) == 21 and "clean" in names and "translation_3" in names


def test_ray_data_read_parquet(mini_build):
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        batch = ray.data.read_parquet(str(mini_build / "data")).take_batch(STORED + 1, batch_format="pyarrow")
    finally:
        ray.shutdown()
    assert batch.num_rows == STORED
    assert batch.schema.field("points").type == pa.list_(pa.list_(pa.float32(), 4))
    assert sorted(set(zip(batch["corruption"].to_pylist(), map(str, batch["severity"].to_pylist()),
                          strict=True)))[:1] == [("background", "1")]
    assert batch["corruption"].to_pylist().count("clean") == 4

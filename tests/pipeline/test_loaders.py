"""The user's first call, one line per reader, against a demo build (layout v2): every row, clean included,
points as N×C, partition keys with one type each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

STORED = 4 * (1 + 4 * 5)  # 4 frames × (clean + 4 corruptions × 5 severities)
README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_line(call: str) -> str:
    """The line of README's "Load the data" block that makes ``call``: its comment names what the reader gives."""
    return next(line for line in README.read_text().splitlines() if call in line)


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
    assert "severity: int32" in _readme_line("pads.dataset(")
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


def test_hf_cache_never_serves_another_builds_rows(mini_build, tmp_path, monkeypatch):
    """Two builds of one version (here: the same folder name, one with a frame fewer in a partition, as a rebuild
    with other frames or --overwrite gives) read through one HF cache: each returns its own rows. ``datasets``
    keys its cache on the folder name, the config name and the YAML configs, not the files."""
    import shutil

    datasets = pytest.importorskip("datasets")
    from bench_build.manifests.card import card_with_header

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a, b = tmp_path / "a" / mini_build.name, tmp_path / "b" / mini_build.name
    shutil.copytree(mini_build, a)
    shutil.copytree(mini_build, b)
    m = _manifest(b)
    gone = next(s for s in m["shards"] if s["path"].startswith("data/corruption=beam_del/severity=5/"))
    (b / gone["path"]).unlink()
    m["shards"].remove(gone)
    m["counts"]["by_partition"]["beam_del/5"]["examples"] -= gone["rows"]
    (b / "manifest.json").write_text(json.dumps(m))
    for v, manifest in ((a, _manifest(a)), (b, m)):  # both headers written by one function, as two builds' are
        (v / "README.md").write_text(card_with_header((v / "README.md").read_text(), manifest))
    cache = str(tmp_path / "hf")
    first = datasets.load_dataset(str(a), "beam_del_5", split="train", cache_dir=cache)
    second = datasets.load_dataset(str(b), "beam_del_5", split="train", cache_dir=cache)
    assert len(first) == 4 and len(second) == 4 - gone["rows"], (len(first), len(second))
    assert first.cache_files[0]["filename"] != second.cache_files[0]["filename"]
    # an unchanged partition of the same build keeps one cache entry: the digest follows the files only
    again = datasets.load_dataset(str(a), "beam_del_5", split="train", cache_dir=cache)
    assert again.cache_files[0]["filename"] == first.cache_files[0]["filename"]


def test_the_cards_how_to_load_block_runs_in_the_version_folder(mini_build, tmp_path):
    """The card's snippet, verbatim, where a reader of the card runs it: in the downloaded version's folder."""
    import os
    import subprocess
    import sys

    pytest.importorskip("datasets")
    pytest.importorskip("duckdb")
    card = (mini_build / "README.md").read_text()
    block = card.split("## How to load", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "load_dataset(" in block and "read_parquet(" in block
    before = sorted(p.relative_to(mini_build) for p in mini_build.rglob("*"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
           "HF_HOME": str(tmp_path / "hfhome")}
    code = block + "\nassert len(df) and t.num_rows and len(d) == 4, (len(df), t.num_rows, len(d))\n"
    run = subprocess.run([sys.executable, "-c", code], cwd=mini_build, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.relative_to(mini_build) for p in mini_build.rglob("*")) == before  # read only


def test_ray_data_read_parquet(mini_build, no_shared_ray):  # a Ray of its own, as the README starts it
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        # the README's form: severity typed as the other readers give it (Ray's hive discovery yields strings)
        from ray.data.datasource import Partitioning

        typed = ray.data.read_parquet(str(mini_build / "data"),
                                      partitioning=Partitioning("hive", field_types={"severity": int}))
        batch = typed.take_batch(STORED + 1, batch_format="pyarrow")
    finally:
        ray.shutdown()
    assert batch.num_rows == STORED
    assert batch.schema.field("points").type == pa.list_(pa.list_(pa.float32(), 4))
    assert sorted(set(zip(batch["corruption"].to_pylist(), batch["severity"].to_pylist(), strict=True)))[:1] == [
        ("background", 1)]
    severities = batch["severity"]
    assert sorted(set(severities.to_pylist())) == list(range(6))
    # Ray types an int field int64, not int32 as pyarrow's hive discovery does: the README says which
    assert severities.type == pa.int64() and "severity: int64" in _readme_line("ray.data.read_parquet(")
    assert batch["corruption"].to_pylist().count("clean") == 4


# -- PyTorch ----------------------------------------------------------------------------------------------
def _all_keys(v) -> list[str]:
    import pyarrow.dataset as pads

    return pads.dataset(v / "data", partitioning="hive").to_table(columns=["key"])["key"].to_pylist()


def test_map_style_dataset_indexes_from_the_manifest_and_returns_writable_arrays(mini_build):
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset

    ds = PointCloudDataset(mini_build)
    assert len(ds) == STORED
    m = _manifest(mini_build)
    for i in (0, 1, 2, 41, 83):  # the index comes from the manifest alone: file i // 2, row i % 2 (2 frames/file)
        e = m["shards"][i // 2]
        assert ds[i]["key"] == f"mini-c/{m['shard_frames'][e['shard']][i % 2]}/{e['corruption']}/{e['severity']}"
    sel = PointCloudDataset(mini_build, corruption="translation", severity=[0, 5], frames=["000001", "000003"])
    assert sorted(x["key"] for x in sel) == ["mini-c/000001/clean/0", "mini-c/000001/translation/5",
                                             "mini-c/000003/clean/0", "mini-c/000003/translation/5"]
    ex = PointCloudDataset(mini_build, corruption="translation", severity=5, frames=["000001"])[0]
    ref = open_version(mini_build).example("000001", "translation", 5)
    np.testing.assert_array_equal(ex["points"], ref.points)
    assert ex["points"].flags.writeable and ex["points"].shape[1] == 4
    keep = np.array([c != "DontCare" for c in ref.boxes.cls])
    assert ex["gt_boxes"].shape == (keep.sum(), 7) and list(ex["gt_names"]) == list(ref.boxes.cls[keep])
    np.testing.assert_allclose(ex["gt_boxes"][:, :3], ref.boxes.center[keep], rtol=1e-6)
    np.testing.assert_allclose(ex["gt_boxes"][:, 6], ref.boxes.heading[keep], rtol=1e-6)
    with pytest.raises(KeyError, match="no corruption"):
        PointCloudDataset(mini_build, corruption="fog")
    with pytest.raises(KeyError, match="no split column"):
        PointCloudDataset(mini_build, split="test")


def test_an_example_is_the_callers_to_change_and_a_selection_names_what_the_version_lacks(mini_build):
    """In-place augmentation of one example never changes a later read; NumPy integers are integers; a severity,
    frame or value the version does not have is an error at the call, never a selection that is silently empty."""
    from bench_build.format.checked import NotInVersion
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset

    ds = PointCloudDataset(mini_build, corruption="beam_del", severity=np.int64(3))
    first = ds[0]["points"]
    before = first.copy()
    first[:, :3] = 0  # an augmentation in place
    again = ds[0]["points"]
    assert again is not first and np.array_equal(again, before)
    assert len(ds) == 4 and ds[-1]["key"] == ds[3]["key"]
    with pytest.raises(IndexError, match="index 4 of a dataset of 4 examples"):
        ds[4]
    v = open_version(mini_build)
    assert [e.key for e in v.examples("beam_del", np.int64(3), frames="000001")] == ["mini-c/000001/beam_del/3"]
    it = PointCloudIterableDataset(mini_build, corruption="beam_del", severity=np.int64(3), frames="000002")
    assert [x["key"] for x in it] == ["mini-c/000002/beam_del/3"]
    for kwargs, says in (({"severity": 9}, "no severity 9; it has 0 (clean) and 1…5"),
                         ({"severity": [0, -1]}, "no severity -1"),
                         ({"severity": "3"}, "severity must be an integer or integers, got '3'"),
                         ({"frames": ["999999"]}, "no frame '999999'; it has 4 frames: 000000, 000001, 000002, …"),
                         ({"frames": [1]}, "a frame id is a string (or give several in a list), got 1"),
                         ({"corruption": ["beam_del", "fog"]}, "no corruption 'fog'; it has clean, gaussian_rad"),
                         ({"corruption": "clean", "severity": 3}, "clean has only severity 0, not [3]"),
                         # one value that is not an integer: list() of it was a TypeError naming no argument
                         ({"severity": 3.0}, "severity must be an integer or integers, got 3.0"),
                         ({"severity": True}, "severity must be an integer or integers, got True"),
                         # an empty list was a dataset that is silently empty
                         ({"severity": []}, "an empty list of severities selects nothing; pass None for every "
                                            "severity"),
                         ({"corruption": []}, "an empty list of corruptions selects nothing; pass None for every "
                                              "corruption"),
                         ({"frames": ()}, "an empty list of frame ids selects nothing"),
                         ({"split": []}, "an empty list of splits selects nothing")):
        for make in (PointCloudDataset, PointCloudIterableDataset):
            with pytest.raises(NotInVersion, match=re.escape(says)):
                make(mini_build, **kwargs)
    with pytest.raises(NotInVersion, match=re.escape("no severity 9")):
        v.examples("beam_del", 9)
    with pytest.raises(NotInVersion, match="examples\\(\\) takes one corruption and one severity"):
        v.examples(["beam_del", "background"], 3)
    with pytest.raises(NotInVersion, match="a frame id is a string"):
        v.example(1, "beam_del", 3)
    with pytest.raises(NotInVersion, match="an empty list of frame ids selects nothing"):
        v.examples("beam_del", 3, frames=[])
    for bad in (None, ""):
        with pytest.raises(NotInVersion, match="open_version takes a version's directory or URL"):
            open_version(bad)  # type: ignore[arg-type]
    for rank, world in ((2, 2), (1, None), (None, 2), (0, 0)):
        with pytest.raises(ValueError, match="rank and world_size go together"):
            PointCloudIterableDataset(mini_build, rank=rank, world_size=world)


def test_iterable_dataset_refuses_a_rank_or_epoch_that_is_not_an_integer_at_the_call(mini_build):
    """``rank=0.5`` (or True, or a NumPy float) passed the range check and failed only at iteration, in a DataLoader
    worker, with a bare TypeError; ``set_epoch("a")`` was a bare ValueError from int(), and ``set_epoch(1.5)`` was
    epoch 1. Each is refused where it is given, in one line naming the argument."""
    from bench_build.loaders import PointCloudIterableDataset

    for rank, world in ((0.5, 2), (True, 2), (np.float64(1), 2), (0, 2.0), (0, True), ("0", 2)):
        with pytest.raises(ValueError, match=re.escape(f"rank and world_size go together, integers 0 ≤ rank < "
                                                       f"world_size; got rank={rank!r}, world_size={world!r}")):
            PointCloudIterableDataset(mini_build, severity=[0, 1], rank=rank, world_size=world)
    it = PointCloudIterableDataset(mini_build, severity=[0, 1], shuffle=True, rank=np.int64(1), world_size=np.int32(2))
    for epoch in ("a", 1.5, True, np.float32(2), -1, 2**63):
        for call in (it.set_epoch, lambda e: setattr(it, "epoch", e)):
            with pytest.raises(ValueError, match=re.escape(f"set_epoch: epoch must be an integer 0 ≤ epoch < 2**63, "
                                                           f"got {epoch!r}")):
                call(epoch)
    assert it.epoch == 0  # unchanged by the refused ones
    it.set_epoch(np.int64(2))
    keys = [x["key"] for x in it]
    assert it.epoch == 2 and len(keys) == len(set(keys)) == len(it) // 2  # rank 1 of 2: half the files


def test_iterable_dataset_refuses_a_seed_or_shuffle_buffer_that_is_not_a_count_at_the_call(mini_build, tmp_path):
    """``seed=1.5`` or ``-1`` was accepted and failed only at iteration, inside a DataLoader worker (NumPy's TypeError
    or ValueError naming no argument), and ``seed=True`` was seed 1; ``shuffle_buffer=0`` or ``-5`` quietly became 1
    and ``2.5`` a float limit. Each is refused at the call, one line naming the argument, before the version is
    opened; NumPy integers are integers."""
    from bench_build.loaders import PointCloudIterableDataset

    for seed in (1.5, -1, True, np.float64(2), "3", None, np.int64(-2)):
        with pytest.raises(ValueError, match=re.escape(f"seed must be an integer ≥ 0 (the shuffle's random seed), "
                                                       f"got {seed!r}")):
            PointCloudIterableDataset(mini_build, severity=[0, 1], shuffle=True, seed=seed)
    for size in (0, -5, 2.5, False, "8", np.float32(4)):
        with pytest.raises(ValueError, match=re.escape(f"shuffle_buffer must be an integer ≥ 1 (examples held to "
                                                       f"shuffle), got {size!r}")):
            PointCloudIterableDataset(mini_build, severity=[0, 1], shuffle=True, shuffle_buffer=size)
    with pytest.raises(ValueError, match=r"^seed must be"):  # the argument first: no version is opened for it
        PointCloudIterableDataset(tmp_path / "nothing-here", seed=-1)
    kw = {"severity": [0, 1], "shuffle": True, "shuffle_buffer": 3}
    it = PointCloudIterableDataset(mini_build, seed=np.int64(7), **kw)
    assert [x["key"] for x in it] == [x["key"] for x in PointCloudIterableDataset(mini_build, seed=7, **kw)]
    assert len({x["key"] for x in it}) == len(it)


def test_a_dataset_opened_by_a_relative_path_reads_the_same_version_from_another_working_directory(
        mini_build, tmp_path, monkeypatch):
    """A worker process that unpickles the dataset (a spawned DataLoader worker, a Ray Train worker, which runs in
    its own directory) or a later ``os.chdir`` opened the version again relative to the new working directory:
    "no such directory", or another folder of the same relative name."""
    import pickle

    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset

    monkeypatch.chdir(mini_build.parent.parent)
    rel = f"{mini_build.parent.name}/{mini_build.name}"
    made = [PointCloudDataset(rel, corruption="beam_del", severity=2),
            PointCloudIterableDataset(rel, corruption="beam_del", severity=2)]
    monkeypatch.chdir(tmp_path)
    for ds in made:
        for copy in (ds, pickle.loads(pickle.dumps(ds))):
            assert sorted(x["key"] for x in copy) == [f"mini-c/00000{i}/beam_del/2" for i in range(4)], type(ds)


@pytest.fixture(scope="module")
def partial_pull(mini_build, tmp_path_factory) -> Path:
    """The mini build published to a folder and pulled in part: beam_del 3 and translation 1…5 (two pulls into one
    OUT), without clean. Tests must not modify it."""
    from bench_build.publish import publish_version, pull_version

    tmp = tmp_path_factory.mktemp("partial")
    assert publish_version(str(mini_build), str(tmp / "pub"), progress=False).ok
    for c, s in (("beam_del", 3), ("translation", None)):
        assert pull_version(str(tmp / "pub" / "mini-c"), tmp / "out", corruption=c, severity=s, progress=False).ok
    return tmp / "out" / "mini-c" / "0.1.0"


def test_a_selection_of_partitions_a_partial_pull_lacks_names_them_and_the_pull_that_adds_them(partial_pull):
    """A partial pull's manifest lists only what it holds, but its recipe all the version's partitions: a corruption
    or severity it lacks gave an empty dataset (or, for a corruption held in part, only the severities held)."""
    from bench_build.format.checked import NotInVersion
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset

    add = f"bench-build pull <publication root>/mini-c --version 0.1.0 --out {partial_pull.parent.parent}"
    held = "it holds beam_del/3, translation/1–5"
    for kwargs, says in (({"corruption": "gaussian_rad"}, f"gaussian_rad/1–5 are not in this folder (a partial pull "
                                                          f"of mini-c 0.1.0); {held} (`{add} --corruption "
                                                          "gaussian_rad` adds them, or select what it holds)"),
                         ({"corruption": "beam_del"}, "beam_del/1–2, 4–5 are not in this folder"),
                         ({"severity": 0}, f"clean/0 is not in this folder (a partial pull of mini-c 0.1.0); {held} "
                                           f"(`{add} --corruption clean` adds it"),
                         ({"corruption": "translation", "severity": [0, 2]}, "clean/0 is not in this folder"),
                         ({"severity": 3}, f"gaussian_rad/3, background/3 are not in this folder (a partial pull of "
                                           f"mini-c 0.1.0); {held} (`{add} --severity 3` adds them")):
        for make in (PointCloudDataset, PointCloudIterableDataset):
            with pytest.raises(NotInVersion, match=re.escape(says)):
                make(partial_pull, **kwargs)
    v = open_version(partial_pull)
    with pytest.raises(NotInVersion, match=re.escape(f"gaussian_rad/2 is not in this folder (a partial pull of "
                                                     f"mini-c 0.1.0); {held} (`{add} --corruption gaussian_rad "
                                                     "--severity 2` adds it")):
        v.examples("gaussian_rad", 2)
    # what it holds reads as before: all of it, or a selection within it
    assert len(PointCloudDataset(partial_pull)) == 4 * 6
    assert len(PointCloudDataset(partial_pull, corruption=["beam_del", "translation"], severity=3)) == 8
    assert len(list(PointCloudIterableDataset(partial_pull, corruption="translation"))) == 20
    assert [e.key for e in v.examples("beam_del", 3, frames="000001")] == ["mini-c/000001/beam_del/3"]


def test_open_version_expands_the_home_directory(mini_build, monkeypatch):
    from bench_build.format.reader import open_version

    monkeypatch.setenv("HOME", str(mini_build.parent))
    assert open_version(f"~/{mini_build.name}").manifest == open_version(mini_build).manifest


@pytest.fixture(scope="module")
def object_build(tmp_path_factory, shared_ray) -> Path:
    """A modelnet40-e build of the demo objects, one shape per class and split (80 frames, 40 ``train/…`` and 40
    ``test/…``; clean + noise 1…3, whose examples alone carry the per-point ``sigma`` and ``mu``): the version
    directory. Tests must not modify it."""
    from bench_build.build.run import run_build
    from bench_build.sources.demo.objects import write_demo_objects

    tmp = tmp_path_factory.mktemp("object-build")
    root = write_demo_objects(tmp / "objects", modelnet={"train": 1, "test": 1}, scanobjectnn={}, shapenet={})
    res = run_build("modelnet40-e", source=str(root), out=tmp / "out", workers=2, frames_per_shard=16,
                    progress=False)
    assert res.ok, res.failures
    return res.version_dir


def test_a_split_the_selection_lacks_names_the_splits_it_has(object_build):
    """The split filter is checked like corruption, severity and frame: a split no selected example is in (a
    modelnet-c build is all ``test``) was a dataset that is silently empty; now a `NotInVersion` naming the
    splits there are."""
    from bench_build.format.checked import NotInVersion
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset

    for make in (PointCloudDataset, PointCloudIterableDataset):
        ds = make(object_build, severity=[0, 2], split="train")
        train = [x["key"] for x in ds]
        assert len(train) == 80 and all(k.split("/")[1] == "train" for k in train), make
        assert len(ds) == 80, make  # the iterable dataset counted the test split's 80 too
        both = make(object_build, severity=0, split=["train", "test"], frames=["test/00003", "train/00007"])
        assert sorted(x["split"] for x in both) == ["test", "train"], make
        for kwargs, says in (({"split": "validation"}, "no split 'validation'; it has test, train"),
                             ({"split": ["train", "val"]}, "no split 'val'; it has test, train"),
                             ({"split": 1}, "a split is a string (or give several in a list), got 1"),
                             ({"split": "train", "frames": ["test/00000", "test/00001"]},
                              "no selected frame is in split train (they are in test)")):
            with pytest.raises(NotInVersion, match=re.escape(says)):
                make(object_build, **kwargs)


def test_collate_keeps_a_per_point_column_that_some_examples_of_the_batch_lack(object_build):
    """ModelNet40-E's clean copy has no sigma/mu: a batch of severities 0 and 2 lost both columns for every
    example. They stay, NaN where an example has none, with ``has_<name>`` saying which examples have them."""
    import torch

    from bench_build.loaders import PointCloudDataset, collate_point_clouds

    clean, noisy = sorted(PointCloudDataset(object_build, severity=[0, 2], frames=["train/00000"]),
                          key=lambda x: x["severity"])
    assert "sigma" not in clean and "sigma" in noisy
    n = len(clean["points"])
    batch = collate_point_clouds([clean, noisy])
    for name in ("sigma", "mu"):
        col = batch[name]
        assert col.dtype == torch.float32 and col.shape == (n + len(noisy["points"]),)
        assert torch.isnan(col[:n]).all() and np.array_equal(col[n:].numpy(), noisy[name])
        assert batch[f"has_{name}"].tolist() == [False, True]
        assert torch.isnan(col[~batch[f"has_{name}"][batch["batch_index"]]]).all()  # per point, as documented
    both = collate_point_clouds([noisy, noisy])
    assert both["has_sigma"].tolist() == [True, True] and not torch.isnan(both["sigma"]).any()
    assert "sigma" not in collate_point_clouds([clean]) and "has_sigma" not in collate_point_clouds([clean])
    # an integer column is filled with 0
    labelled = {**clean, "semantic": np.arange(1, n + 1, dtype=np.uint32)}
    mixed = collate_point_clouds([noisy, labelled])
    assert mixed["has_semantic"].tolist() == [False, True]
    assert mixed["semantic"].numpy().tolist() == [0] * len(noisy["points"]) + list(range(1, n + 1))


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_dataloader_with_two_workers_sees_each_example_exactly_once(mini_build, kind):
    import torch
    from torch.utils.data import DataLoader

    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds

    cls = PointCloudDataset if kind == "map" else PointCloudIterableDataset
    ds = cls(mini_build, corruption=["beam_del", "background"], severity=[0, 2, 5])
    loader = DataLoader(ds, batch_size=3, num_workers=2, collate_fn=collate_point_clouds)
    keys, total_points = [], 0
    for batch in loader:
        b = len(batch["key"])
        assert batch["points"].shape == (int(batch["num_points"].sum()), 4)
        assert batch["batch_index"].shape == (batch["points"].shape[0],) and int(batch["batch_index"].max()) == b - 1
        assert batch["gt_boxes"].shape[:2] == (b, int(batch["num_boxes"].max()))
        assert isinstance(batch["severity"], torch.Tensor)
        keys += batch["key"]
        total_points += int(batch["num_points"].sum())
    expected = sorted(k for k in _all_keys(mini_build)
                      if k.split("/")[2] in ("beam_del", "background", "clean") and k.split("/")[3] in ("0", "2", "5"))
    assert len(expected) == 4 * (1 + 2 * 2)
    assert sorted(keys) == expected  # no duplicates, nothing missing


def test_the_iterable_dataset_s_length_counts_a_frame_filter(mini_build):
    """``len()`` of the iterable dataset is what a pass yields, with a frame filter too: it counted every row of the
    selected files (84 for one frame's 21), so a DataLoader's ``len()``, a progress bar's total and a scheduler's
    steps per epoch were 4 times too many."""
    from torch.utils.data import DataLoader

    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset, collate_point_clouds

    for kwargs, n in (({"frames": ["000001"]}, 21), ({"frames": ["000001", "000002"], "corruption": "beam_del"}, 10),
                      ({"severity": 0}, 4)):
        it = PointCloudIterableDataset(mini_build, **kwargs)
        assert len(it) == len(list(it)) == len(PointCloudDataset(mini_build, **kwargs)) == n, kwargs
    loader = DataLoader(PointCloudIterableDataset(mini_build, frames=["000001"]), batch_size=8,
                        collate_fn=collate_point_clouds)
    assert len(loader) == len(list(loader)) == 3


def test_iterable_dataset_splits_over_ranks_and_workers(mini_build):
    from torch.utils.data import DataLoader

    from bench_build.loaders import PointCloudIterableDataset

    seen = []
    for rank in range(2):
        ds = PointCloudIterableDataset(mini_build, severity=[0, 1], rank=rank, world_size=2, shuffle=True, seed=3)
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        seen += [x["key"] for x in loader]
    expected = sorted(k for k in _all_keys(mini_build) if k.split("/")[3] in ("0", "1"))
    assert sorted(seen) == expected and len(seen) == 4 * (1 + 4)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(mini_build, context):
    """Workers of ``persistent_workers=True`` keep their copy of the dataset across epochs: set_epoch did not reach
    them, and every epoch had epoch 0's order. Each epoch's order is now what a fresh loader gives at that epoch."""
    from torch.utils.data import DataLoader

    from bench_build.loaders import PointCloudIterableDataset

    def order(ds, **kw):
        return [x["key"] for x in DataLoader(ds, batch_size=None, num_workers=2, **kw)]

    kw = {"severity": [0, 1], "shuffle": True, "seed": 5, "shuffle_buffer": 4}
    it = PointCloudIterableDataset(mini_build, **kw)
    loader = DataLoader(it, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context=context)
    seen = []
    for epoch in range(3):
        it.set_epoch(epoch)
        seen.append([x["key"] for x in loader])
        fresh = PointCloudIterableDataset(mini_build, **kw)
        fresh.set_epoch(epoch)
        assert seen[-1] == order(fresh), epoch
    assert len({tuple(s) for s in seen}) == 3 and all(sorted(s) == sorted(seen[0]) for s in seen)
    assert it.epoch == 2


# -- s3:// in place -----------------------------------------------------------------------------------
def test_open_version_and_datasets_read_s3_in_place(mini_build, s3prefix, s3env):
    import pyarrow.dataset as pads
    from torch.utils.data import DataLoader

    from bench_build.format.reader import open_version
    from bench_build.format.remote_fs import s3_filesystem
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset
    from bench_build.publish import publish_version

    assert publish_version(mini_build, s3prefix, progress=False).ok
    url = f"{s3prefix}/mini-c/0.1.0"
    remote, local = open_version(url), open_version(mini_build)
    assert remote.manifest == local.manifest
    got = {ex.key: ex for ex in remote.examples(corruption="background", severity=5)}
    want = {ex.key: ex for ex in local.examples(corruption="background", severity=5)}
    assert sorted(got) == sorted(want) and len(got) == 4
    for k, ex in got.items():
        np.testing.assert_array_equal(ex.points, want[k].points)
        np.testing.assert_array_equal(ex.point_tag, want[k].point_tag)
    assert len(list(remote.examples(severity=0, frames=["000002"]))) == 1
    ds = PointCloudDataset(url, corruption="clean")
    assert len(ds) == 4 and ds[3]["points"].shape[1] == 4
    it = PointCloudIterableDataset(url, corruption="beam_del")
    keys = [x["key"] for x in DataLoader(it, batch_size=None, num_workers=2)]
    assert sorted(keys) == sorted(f"mini-c/{f}/beam_del/{s}" for f in ("000000", "000001", "000002", "000003")
                                  for s in range(1, 6))
    # plain pyarrow on the same filesystem (the AWS chain's credentials and endpoint)
    bucket_path = url.removeprefix("s3://")
    t = pads.dataset(f"{bucket_path}/data", filesystem=s3_filesystem(), partitioning="hive").to_table(
        columns=["key", "corruption", "severity"])
    assert t.num_rows == STORED
    with pytest.raises(ValueError, match="no manifest"):
        open_version(f"{s3prefix}/mini-c/9.9.9")


# -- integrity: what the datasets read is what the build wrote ---------------------------------------------
def test_both_datasets_fail_on_a_flipped_byte_and_read_it_with_verify_false(mini_build, tmp_path):
    import shutil

    from torch.utils.data import DataLoader

    from bench_build.format.checked import IntegrityError
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset
    from tests.pipeline.tamper import flip_file

    v = tmp_path / "v"
    shutil.copytree(mini_build, v, ignore=shutil.ignore_patterns("_ledger"))
    rel = next(s["path"] for s in _manifest(v)["shards"] if (s["corruption"], s["severity"]) == ("background", 2))
    flip_file(v / rel)
    pattern = rf"{rel}: a data page does not match its checksum"
    with pytest.raises(IntegrityError, match=pattern):
        list(PointCloudIterableDataset(v, corruption="background", severity=2))
    ds = PointCloudDataset(v, corruption="background", severity=2)
    with pytest.raises(IntegrityError, match=pattern):
        [ds[i] for i in range(len(ds))]
    with pytest.raises(IntegrityError, match=pattern):  # a DataLoader worker re-raises it, file name kept
        list(DataLoader(PointCloudIterableDataset(v, corruption="background", severity=2), batch_size=None,
                        num_workers=1))
    assert len(list(PointCloudIterableDataset(v, corruption="background", severity=2, verify=False))) == 4
    unverified = PointCloudDataset(v, corruption="background", severity=2, verify=False)
    assert len([unverified[i] for i in range(len(unverified))]) == 4


def test_a_damaged_footer_is_an_integrity_error_naming_the_file(mini_build, tmp_path):
    """The footer has no page checksum and a local file is not re-hashed on open: a column renamed in place (same
    size), or footer metadata that disagrees with the manifest, is an `IntegrityError` naming the file."""
    import shutil

    import pyarrow.parquet as pq

    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import open_version
    from bench_build.format.schema import METADATA_KEY

    v = tmp_path / "v"
    shutil.copytree(mini_build, v, ignore=shutil.ignore_patterns("_ledger"))
    entries = {(s["corruption"], s["severity"]): s for s in _manifest(v)["shards"]}
    renamed = v / entries[("background", 2)]["path"]
    data = renamed.read_bytes()
    assert data.count(b"boxes") >= 1
    renamed.write_bytes(data.replace(b"boxes", b"coxes", 1))  # the footer's column name, same size
    with pytest.raises(IntegrityError, match=re.escape(f"{entries[('background', 2)]['path']}: its columns are not "
                                                       "the version's (unexpected: ['coxes'], missing: ['boxes'])")):
        list(open_version(v).examples("background", 2))
    # footer metadata that disagrees with the manifest (the file rewritten, its manifest entry updated to match)
    entry = entries[("beam_del", 3)]
    table = pq.read_table(v / entry["path"])
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["intensity_scale"] = "byte"
    _rewrite(v, entry["path"], table.replace_schema_metadata({**table.schema.metadata,
                                                              METADATA_KEY: json.dumps(meta)}))
    with pytest.raises(IntegrityError, match=re.escape("its footer says intensity_scale 'byte', the manifest 'unit'")):
        list(open_version(v).examples("beam_del", 3))
    assert len(list(open_version(v, verify=False).examples("beam_del", 3))) == 4  # the trusted fast path reads it


def _rewrite(v: Path, rel: str, table: pa.Table) -> None:
    """Write ``table`` as the version's file ``rel`` and update its manifest entry to match (size and sha256 then
    pass: what is left to catch is in the file itself)."""
    import hashlib

    import pyarrow.parquet as pq

    pq.write_table(table, v / rel, row_group_size=2)
    manifest = _manifest(v)
    for s in manifest["shards"]:
        if s["path"] == rel:
            s["bytes"] = (v / rel).stat().st_size
            s["sha256"] = hashlib.sha256((v / rel).read_bytes()).hexdigest()
    (v / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("column, damaged", [
    ("key", pa.binary()),  # a string's converted type flipped off: every key read as bytes
    ("points", pa.list_(pa.list_(pa.float32()))),  # the stored Arrow schema's fixed size flipped: object arrays
    ("point_tag", pa.list_(pa.int32())),  # another integer width: tags as int32
])
def test_a_footer_declaring_another_column_type_is_an_integrity_error(mini_build, tmp_path, column, damaged):
    """A bit flipped in the footer can retype a column (its name, size and every page checksum unchanged): every
    reader refuses the file naming it and the column, never the same bytes decoded as other values."""
    import shutil

    import pyarrow.parquet as pq
    from torch.utils.data import DataLoader

    from bench_build.export import export_version
    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset

    v = tmp_path / "v"
    shutil.copytree(mini_build, v, ignore=shutil.ignore_patterns("_ledger"))
    rel = next(s["path"] for s in _manifest(v)["shards"] if (s["corruption"], s["severity"]) == ("background", 2))
    table = pq.read_table(v / rel)
    i = table.schema.get_field_index(column)
    _rewrite(v, rel, table.set_column(i, table.schema.field(i).with_type(damaged), table[column].cast(damaged)))
    said = re.escape(f"{rel}: its column {column} is ") + r"\S.*, the version's is "
    with pytest.raises(IntegrityError, match=said):
        list(open_version(v).examples("background", 2))
    with pytest.raises(IntegrityError, match=said):
        list(DataLoader(PointCloudIterableDataset(v, corruption="background", severity=2), batch_size=None))
    ds = PointCloudDataset(v, corruption="background", severity=2)
    with pytest.raises(IntegrityError, match=said):
        ds[0]
    with pytest.raises(IntegrityError, match=said):  # export's pre-flight: refused before anything is written
        export_version(v, tmp_path / "export", corruption="background", severity=2)
    assert not (tmp_path / "export").exists()
    assert len(list(open_version(v).examples("background", 3))) == 4  # the other files read as before


@pytest.mark.parametrize("verify", [True, False])
def test_a_footer_that_cannot_be_read_as_text_or_lacks_its_fields_is_an_integrity_error(mini_build, tmp_path, verify):
    """Footer damage that decoding trips over (a column name that is not UTF-8, bench_build metadata without the
    point fields or intensity scale every read takes from it) is an `IntegrityError` naming the file, also with
    ``verify=False``, not a UnicodeDecodeError or KeyError traceback from inside pyarrow or `rows_of`."""
    import shutil

    import pyarrow.parquet as pq

    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import open_version
    from bench_build.format.schema import METADATA_KEY
    from bench_build.loaders import PointCloudIterableDataset

    v = tmp_path / "v"
    shutil.copytree(mini_build, v, ignore=shutil.ignore_patterns("_ledger"))
    entries = {(s["corruption"], s["severity"]): s for s in _manifest(v)["shards"]}
    rel = entries[("background", 2)]["path"]
    data = (v / rel).read_bytes()
    (v / rel).write_bytes(data.replace(b"boxes", b"\xffoxes", 1))  # the footer's column name, same size
    with pytest.raises(IntegrityError, match=re.escape(f"{rel}: cannot be decoded ('utf-8' codec can't decode")):
        list(open_version(v, verify=verify).examples("background", 2))
    rel = entries[("beam_del", 3)]["path"]
    table = pq.read_table(v / rel)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    del meta["intensity_scale"]
    _rewrite(v, rel, table.replace_schema_metadata({**table.schema.metadata, METADATA_KEY: json.dumps(meta)}))
    said = re.escape(f"{rel}: its footer's bench_build metadata has no intensity_scale")
    with pytest.raises(IntegrityError, match=said):
        list(open_version(v, verify=verify).examples("beam_del", 3))
    with pytest.raises(IntegrityError, match=said):
        list(PointCloudIterableDataset(v, corruption="beam_del", severity=3, verify=verify))


def test_an_integer_width_no_writer_uses_is_an_integrity_error():
    """pyarrow's ArrowNotImplementedError for a footer declaring, say, a 128-bit integer (one flipped bit in the
    stored Arrow schema) names the file like every other undecodable byte."""
    from bench_build.format.checked import IntegrityError, read_error

    e = read_error(pa.ArrowNotImplementedError("Integers with more than 64 bits not implemented"), "v/data/f.parquet",
                   "v")
    assert isinstance(e, IntegrityError)
    assert str(e).startswith("v/data/f.parquet: cannot be decoded (Integers with more than 64 bits not implemented)")


def test_a_row_whose_lists_are_not_num_points_long_is_an_integrity_error(mini_build, tmp_path):
    """No checksum covers a data page's header: a bit flipped there can change how the page's list lengths
    decode while its CRC still passes (a row's point tags decoding shorter than its points). Every read checks
    each row's points, point tags and per-point labels against its num_points: a flip anywhere in the header of
    the point_tag chunk reads identical examples or is an error naming the file, never other data. Calibration
    matrices are checked for their lengths likewise."""
    import shutil

    import pyarrow.parquet as pq

    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import open_version
    from tests.pipeline.tamper import chunk_span

    v = tmp_path / "v"
    shutil.copytree(mini_build, v, ignore=shutil.ignore_patterns("_ledger"))
    rel = next(s["path"] for s in _manifest(v)["shards"] if (s["corruption"], s["severity"]) == ("background", 2))

    def read() -> list[tuple]:
        return [(ex.key, ex.points.tobytes(), ex.point_tag.tobytes())
                for ex in open_version(v).examples("background", 2)]

    intact, data = read(), (v / rel).read_bytes()
    start, _ = chunk_span(data, "point_tag.list.element")
    caught = []
    for at in range(start, start + 48):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[at] ^= 1 << bit
            (v / rel).write_bytes(damaged)
            try:
                assert read() == intact, f"byte {at - start} of the point_tag chunk, bit {bit}: other data, no error"
            except (IntegrityError, OSError) as e:  # pyarrow's OSError for a header it cannot parse names it too
                assert rel in str(e)
                caught.append(str(e))
    assert any("has num_points" in e for e in caught)  # the sweep reaches the lengths the check is for
    # the check itself: a row whose num_points disagrees with its lists (the manifest updated to match)
    table = pq.read_table(v / rel.replace("severity=2", "severity=3"))
    counts = table["num_points"].to_pylist()
    _rewrite(v, rel.replace("severity=2", "severity=3"),
             table.set_column(2, table.schema.field(2), pa.array([counts[0], counts[1] + 1], pa.int32())))
    with pytest.raises(IntegrityError, match=re.escape(f"row 1 (mini-c/{table['frame_id'][1]}/background/3) has "
                                                       f"num_points {counts[1] + 1} but points has {counts[1]}, "
                                                       f"point_tag has {counts[1]}")):
        list(open_version(v).examples("background", 3))
    # a calibration matrix of another length (the same damage in a calib chunk): not a ValueError from a reshape
    rel = rel.replace("severity=2", "severity=4")
    table = pq.read_table(v / rel)
    calib = table["calib"].to_pylist()
    calib[1]["P0"] = calib[1]["P0"][:8]
    i = table.schema.get_field_index("calib")
    _rewrite(v, rel, table.set_column(i, table.schema.field(i), pa.array(calib, table.schema.field(i).type)))
    with pytest.raises(IntegrityError, match=re.escape(f"{rel}: row 1 (mini-c/{table['frame_id'][1]}/background/4): "
                                                       "its calibration P0 has 8 values, not 12")):
        list(open_version(v).examples("background", 4))


def test_s3_reads_fail_on_a_changed_object_naming_it(mini_build, s3prefix, s3env):
    from bench_build.format.checked import IntegrityError
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset, PointCloudIterableDataset
    from bench_build.publish import publish_version
    from tests.pipeline.tamper import flipped

    assert publish_version(mini_build, s3prefix, progress=False).ok
    url = f"{s3prefix}/mini-c/0.1.0"
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = s3env.client()
    entries = {(s["corruption"], s["severity"]): s for s in _manifest(mini_build)["shards"]}

    def replace(entry, data, **metadata):
        key = f"{prefix}/{entry['path']}"
        meta = client.head_object(Bucket=bucket, Key=key)["Metadata"]  # at-rest damage keeps the upload's sha256
        client.put_object(Bucket=bucket, Key=key, Body=data, Metadata={**meta, **metadata})

    flip = entries[("gaussian_rad", 4)]
    replace(flip, flipped((mini_build / flip["path"]).read_bytes()))
    pattern = rf"{url}/{flip['path']}: a data page does not match its checksum"
    with pytest.raises(IntegrityError, match=pattern):
        list(open_version(url).examples("gaussian_rad", 4))
    with pytest.raises(IntegrityError, match=pattern):
        list(PointCloudIterableDataset(url, corruption="gaussian_rad", severity=4))
    ds = PointCloudDataset(url, corruption="gaussian_rad", severity=4)
    with pytest.raises(IntegrityError, match=pattern):
        [ds[i] for i in range(len(ds))]
    assert len(list(open_version(url, verify=False).examples("gaussian_rad", 4))) == 4
    # another size: one HEAD says so before any byte is read
    cut = entries[("gaussian_rad", 2)]
    replace(cut, (mini_build / cut["path"]).read_bytes()[:-5])
    with pytest.raises(IntegrityError, match=rf"{cut['path']}: {cut['bytes'] - 5} bytes, manifest says {cut['bytes']}"):
        list(open_version(url).examples("gaussian_rad", 2))
    # same size, re-uploaded by a tool that records its sha256 (as ours do): that record disagrees
    other = entries[("gaussian_rad", 3)]
    data = flipped((mini_build / other["path"]).read_bytes(), at=0.25)
    replace(other, data, sha256=__import__("hashlib").sha256(data).hexdigest())
    with pytest.raises(IntegrityError, match=rf"{other['path']}: uploaded with sha256 [0-9a-f]{{64}}, manifest says "
                                             rf"{other['sha256']}"):
        list(open_version(url).examples("gaussian_rad", 3))
    assert len(list(open_version(url).examples("gaussian_rad", 1))) == 4  # untouched objects still read


def test_open_version_with_rejected_credentials_says_so_in_one_line(mini_build, s3prefix, s3env, monkeypatch):
    from bench_build.format.reader import open_version
    from bench_build.format.remote_fs import s3_filesystem
    from bench_build.publish import publish_version
    from bench_build.storage import StorageError

    assert publish_version(mini_build, s3prefix, progress=False).ok
    url = f"{s3prefix}/mini-c/0.1.0"
    version = open_version(url, verify=False)  # opened with good credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-" + s3env.secret_key)
    version.fs = s3_filesystem()  # its files are then read through pyarrow with the rejected secret
    for attempt in (lambda: open_version(url), lambda: next(version.examples("clean"))):
        with pytest.raises(StorageError) as e:
            attempt()
        msg = str(e.value)
        assert "\n" not in msg and "rejected the credentials of the AWS chain" in msg and url in msg, msg
        assert s3env.secret_key not in msg and "ACCESS_DENIED" not in msg and "HeadObject" not in msg


def _edited(manifest: dict, key: str, value: object) -> dict:
    """A copy of ``manifest`` with the dotted ``key`` set to ``value`` (`DROP`: removed)."""
    out = json.loads(json.dumps(manifest))
    *parents, name = key.split(".")
    table = out
    for p in parents:
        table = table[p]
    if value is DROP:
        del table[name]
    else:
        table[name] = value
    return out


DROP = object()


@pytest.mark.parametrize(("key", "value", "said"), [
    ("recipe.severities", DROP, "no recipe.severities"),
    ("recipe.corruptions", DROP, "no recipe.corruptions"),
    ("fields", DROP, "no fields"),
    ("recipe", DROP, "no recipe"),
    ("recipe.severities", "5", "recipe.severities '5' is not an integer ≥ 0"),
    ("recipe.corruptions", [{"stage": "fog"}], "recipe.corruptions [{'stage': 'fog'}] is not a list of objects with a "
                                               "name"),
    ("fields", "xyzi", "fields 'xyzi' is not a list of point field names"),
    ("recipe", [], "recipe [] is not an object"),
])
def test_a_manifest_without_a_key_the_reader_needs_is_refused_in_one_line(mini_build, tmp_path, key, value, said):
    """A hand-edited local manifest without ``recipe.severities``, ``fields`` or another key the reader indexes
    opened, and the first selection or read stopped on a bare KeyError (TypeError for another kind of value).
    `open_version` now refuses it, one line naming the manifest file and the key; the loaders and export too."""
    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset
    from bench_build.manifests.manifest import ManifestError

    root = tmp_path / "v"
    root.mkdir()
    manifest = json.loads((mini_build / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps(_edited(manifest, key, value)))
    says = f"{root / 'manifest.json'}: {said}, which reading the version needs"
    for read in (open_version, lambda r: PointCloudDataset(r, severity=2)):
        with pytest.raises(ManifestError, match=re.escape(says)):
            read(root)
    res = CliRunner().invoke(app, ["export", str(root), str(tmp_path / "x"), "--corruption", "beam_del",
                                   "--severity", "2"])
    assert res.exit_code == 2 and "Traceback" not in res.output and not (tmp_path / "x").exists(), res.output
    assert ("no recipe table" if key == "recipe" else said) in " ".join(res.output.split()), res.output


@pytest.mark.parametrize(("key", "value", "said"), [
    ("shard_frames", [["000000"]], "shard_frames [['000000']] is not an object of file stem → list of frame ids"),
    ("shard_frames", {"part-00000": "000000"}, "shard_frames {'part-00000': '000000'} is not an object of file stem → "
                                               "list of frame ids"),
    ("shard_frames", {"part-00000": [0, 1]}, "shard_frames {'part-00000': [0, 1]} is not an object of file stem → "
                                             "list of frame ids"),
    ("columns", "split", "columns 'split' is not a list of column names"),
    ("columns", 5, "columns 5 is not a list of column names"),
    ("partial", ["beam_del"], "partial ['beam_del'] is not an object"),
    ("partial", {"selections": "beam_del"}, "partial.selections 'beam_del' is not a list of objects"),
    ("partial", {"selections": ["beam_del"]}, "partial.selections ['beam_del'] is not a list of objects"),
])
def test_an_optional_manifest_key_of_another_kind_is_refused_in_one_line(mini_build, tmp_path, key, value, said):
    """Keys the reader uses when a manifest has them (``shard_frames``, ``columns``, a partial pull's
    ``partial.selections``) were not checked: a hand-edited one opened, and a frame selection or a split filter
    stopped on a bare TypeError or AttributeError (``columns: "split"`` was refused as the unknown columns s, p, l,
    i, t). Present with another kind of value, each is refused on open like a missing required key: one line
    naming the manifest file and the key; the loaders and export too. Absent, they are not needed."""
    import shutil

    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudDataset
    from bench_build.manifests.manifest import ManifestError

    root = tmp_path / "v"
    shutil.copytree(mini_build, root)
    manifest = json.loads((mini_build / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps(_edited(manifest, key, value)))
    says = f"{root / 'manifest.json'}: {said}, which reading the version needs"
    for read in (open_version, lambda r: PointCloudDataset(r, severity=2, frames=["000001"])):
        with pytest.raises(ManifestError, match=re.escape(says)):
            read(root)
    res = CliRunner().invoke(app, ["export", str(root), str(tmp_path / "x"), "--corruption", "beam_del",
                                   "--severity", "2"])
    assert res.exit_code == 2 and "Traceback" not in res.output and not (tmp_path / "x").exists(), res.output
    assert said in " ".join(res.output.split()), res.output
    if key in manifest:  # absent, the version reads: a frame's rows found from the files' own frame_id column
        (root / "manifest.json").write_text(json.dumps(_edited(manifest, key, DROP)))
        got = [x["key"] for x in PointCloudDataset(root, corruption="beam_del", severity=2, frames=["000001"])]
        assert got == ["mini-c/000001/beam_del/2"]


@pytest.mark.parametrize(("change", "said"), [({"schema_version": 99}, "schema_version 99 was written by a newer"),
                                              ({"manifest_version": 3}, "manifest_version 3 was written by a newer"),
                                              ({"columns": ["weather_rate"]}, "weather_rate unknown to this")])
def test_a_version_from_a_newer_bench_build_is_refused_in_one_line(mini_build, tmp_path, change, said):
    """SCHEMA_VERSION was written everywhere and read nowhere: a version with a newer schema opened, and one with a
    column this bench-build does not know failed in `open_version` with a bare ValueError traceback."""
    from typer.testing import CliRunner

    from bench_build.cli import app
    from bench_build.format.reader import open_version
    from bench_build.manifests.manifest import ManifestError

    root = tmp_path / "v"
    root.mkdir()
    manifest = json.loads((mini_build / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, **change}))
    with pytest.raises(ManifestError, match=said) as e:
        open_version(root)
    assert "upgrade bench-build" in str(e.value)
    # verify checks bytes against the manifest, whatever its columns; a newer manifest or schema it refuses
    commands = [["export", str(root), str(tmp_path / "x"), "--all"]] + ([] if "columns" in change else [
        ["verify", str(root)]])
    for args in commands:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "newer" in res.output and "Traceback" not in res.output, (args, res.output)

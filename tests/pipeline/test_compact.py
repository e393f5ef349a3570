"""Compact encoding: references into the clean scan + changed rows, materialised byte-identically."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.format.compact import NO_REF, encode_refs, materialize
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import example_key, example_rng
from bench_build.stages.registry import get_stage
from tests.stages.conftest import make_scene


def test_refs_of_subsets_appends_and_changed_rows():
    rng = np.random.default_rng(0)
    clean = rng.normal(size=(1000, 4)).astype(np.float32)
    clean[10] = clean[20]  # duplicate rows: either index is the same bytes
    clean[30, 3] = np.float32(np.nan)
    clean[31, 0] = np.float32(-0.0)
    keep = np.sort(rng.choice(1000, 700, replace=False))
    moved = clean[keep].copy()
    moved[::50, 0] += 0.25  # 14 changed rows
    out = np.concatenate([moved, rng.normal(size=(5, 4)).astype(np.float32)])  # 5 appended
    ref, lit = encode_refs(out, clean)
    assert ref.dtype == np.int32 and len(ref) == len(out)
    assert (ref == NO_REF).sum() == len(lit) == 14 + 5
    np.testing.assert_array_equal(clean[ref[ref >= 0]].view(np.uint32), out[ref >= 0].view(np.uint32))
    back = materialize(ref, lit, clean)
    assert back.tobytes() == out.tobytes() and back.flags.writeable  # NaN payload and -0.0 included
    noisy = clean + np.float32(1e-3)  # every point changed: all literal
    ref, lit = encode_refs(noisy, clean)
    assert (ref == NO_REF).all() and materialize(ref, lit, clean).tobytes() == noisy.tobytes()
    with pytest.raises(ValueError, match="1000 points have no reference into the clean scan but the row stores 999"):
        materialize(ref, lit[:-1], clean)


@pytest.mark.parametrize("recipe", ["kitti-c", "robo3d-kitti-c"])
def test_every_corruption_materialises_byte_identically(recipe):
    """Every corruption of the LiDAR recipes at its strongest severity: encode against the clean scan, decode,
    compare bytes; and the subset/append/object corruptions really are stored mostly as references."""
    rec = load_recipe(recipe)
    frame = make_scene(5, n_ground=6000, n_per_car=300, with_ring=False)
    mostly_refs = {"beam_del", "layer_del", "cutout", "local_dec", "cutout_obj", "local_dec_obj", "translation",
                   "rotation", "scale", "shear", "ffd", "background", "beam_missing", "cross_sensor",
                   "incomplete_echo"}
    for c in rec.corruptions:
        s = rec.severities
        out = get_stage(c.stage).apply(frame, c.params_for(s), example_rng(rec.seed, example_key(rec.name, "f",
                                                                                                c.name, s)))
        ref, lit = encode_refs(out.points, frame.points)
        assert materialize(ref, lit, frame.points).tobytes() == out.points.tobytes(), c.name
        if c.name in mostly_refs:
            assert len(lit) < 0.5 * len(out.points), (c.name, len(lit), len(out.points))


@pytest.fixture(scope="module")
def compact_build(tmp_path_factory, demo_kitti_master, shared_ray):
    from bench_build.build.run import run_build
    from tests.conftest import SMALL_RECIPE

    tmp = tmp_path_factory.mktemp("compact")
    recipe = tmp / "mini-c.toml"
    recipe.write_text(SMALL_RECIPE)
    res = run_build(str(recipe), source=str(demo_kitti_master), out=tmp / "out", workers=2, max_frames=4,
                    frames_per_shard=2, progress=False, encoding="compact")
    assert res.ok
    return res.version_dir


def test_compact_build_reads_back_exactly_the_full_build(compact_build, mini_build, tmp_path):
    import json

    import pyarrow.parquet as pq

    from bench_build.export import export_version
    from bench_build.format.reader import open_version
    from bench_build.loaders import PointCloudIterableDataset

    full, comp = open_version(mini_build), open_version(compact_build)
    assert comp.manifest["encoding"] == "compact" and full.manifest["encoding"] == "full"
    assert comp.manifest["fingerprint"] != full.manifest["fingerprint"]  # never mixed on resume
    want = {ex.key: ex for ex in full.examples()}
    got = {ex.key: ex for ex in comp.examples()}
    assert sorted(got) == sorted(want) and len(got) == 84
    for k, ex in got.items():
        assert ex.points.tobytes() == want[k].points.tobytes(), k
        assert ex.point_tag.tobytes() == want[k].point_tag.tobytes(), k
    # frames filter and one-row-group reads materialise too
    one = comp.example("000002", "beam_del", 5)
    assert one.points.tobytes() == want["mini-c/000002/beam_del/5"].points.tobytes()
    loader = {x["key"]: x["points"] for x in PointCloudIterableDataset(compact_build, corruption="translation")}
    assert all(v.tobytes() == want[k].points.tobytes() for k, v in loader.items()) and len(loader) == 20
    assert export_version(compact_build, tmp_path / "c", corruption="background", severity=5).frames == 4
    assert export_version(mini_build, tmp_path / "f", corruption="background", severity=5).frames == 4
    for fid in ("000000", "000003"):
        rel = f"training/velodyne/{fid}.bin"
        assert (tmp_path / "c" / rel).read_bytes() == (tmp_path / "f" / rel).read_bytes()
    # smaller where it should be: subset/append/object partitions, not Gaussian noise (all points change)
    by = {k: v["bytes"] for k, v in comp.manifest["counts"]["by_partition"].items()}
    fb = {k: v["bytes"] for k, v in full.manifest["counts"]["by_partition"].items()}
    for part in ("beam_del/5", "translation/5", "background/5"):
        assert by[part] < 0.25 * fb[part], (part, by[part], fb[part])
    assert by["clean/0"] < 1.02 * fb["clean/0"]  # clean is stored in full either way
    meta = json.loads(pq.read_schema(compact_build / comp.manifest["shards"][-1]["path"]).metadata[b"bench_build"])
    assert meta["encoding"] == "compact"


def test_render_materialises_compact_rows(compact_build, mini_build):
    from bench_build.format.reader import open_version
    from bench_build.render import read_views
    from bench_build.storage import open_store

    parts = [("clean", 0), ("beam_del", 5), ("background", 5), ("translation", 3)]
    views = {}
    for v in (compact_build, mini_build):
        _, got = read_views(open_store(v), open_version(v).manifest, "000001", partitions=parts)
        views[v] = {(x.corruption, x.severity): x.points for x in got}
    assert len(views[compact_build]) == 4
    for part, pts in views[mini_build].items():
        np.testing.assert_array_equal(views[compact_build][part], pts)


def test_pull_materialize_gives_full_files_plain_readers_can_use(compact_build, mini_build, tmp_path):
    import pandas as pd

    from bench_build.format.reader import open_version
    from bench_build.manifests.manifest import read_manifest, verify_version
    from bench_build.publish import publish_version, pull_version

    pub = tmp_path / "pub"
    assert publish_version(compact_build, str(pub), progress=False).ok
    r = pull_version(str(pub / "mini-c"), tmp_path / "p", corruption="beam_del", severity=5, materialize=True,
                     progress=False)
    assert r.ok
    local = tmp_path / "p" / "mini-c" / "0.1.0"
    m = read_manifest(local)
    assert m["encoding"] == "full" and m["materialized"]["from_encoding"] == "compact"
    assert {s["corruption"] for s in m["shards"]} == {"beam_del", "clean"}  # clean came along: refs need it
    assert verify_version(local).ok  # the manifest lists the rewritten files' sizes and hashes
    df = pd.read_parquet(local / "data", filters=[("corruption", "=", "beam_del")])
    assert "point_ref" not in df.columns and len(df) == 4
    assert all(len(p) == n for p, n in zip(df["points"], df["num_points"], strict=True))  # full rows, as stored
    want = {ex.key: ex.points for ex in open_version(mini_build).examples(corruption="beam_del", severity=5)}
    got = {ex.key: ex.points for ex in open_version(local).examples(corruption="beam_del", severity=5)}
    assert got.keys() == want.keys() and all(got[k].tobytes() == want[k].tobytes() for k in want)


def test_pulls_into_a_materialized_copy_keep_its_files_and_its_encoding(compact_build, tmp_path):
    """A pull composing with an earlier --materialize pull: its rewritten files no longer had the published sha256,
    so every later pull downloaded them again, and one without --materialize put compact files (``point_ref``
    rows, which plain readers take for points) back where pandas had read full ones. They are now verified
    against the copy's own manifest and kept, and the pull materialises too, saying so."""
    import pandas as pd

    from bench_build.manifests.manifest import read_manifest, verify_version
    from bench_build.publish import publish_version, pull_version

    assert publish_version(compact_build, str(tmp_path / "pub"), progress=False).ok
    dataset, local = str(tmp_path / "pub" / "mini-c"), tmp_path / "p" / "mini-c" / "0.1.0"
    first = pull_version(dataset, tmp_path / "p", corruption="beam_del", severity=5, materialize=True, progress=False)
    assert first.ok and len(first.transferred) == 4  # beam_del 5 and the clean files its rows refer to
    for again in (False, True):
        r = pull_version(dataset, tmp_path / "p", corruption="translation", severity=2, materialize=again,
                         progress=False)
        assert r.ok
        # translation 2 comes down once; beam_del 5 (rewritten) and clean are the copy's, kept
        assert len(r.transferred) == (0 if again else 2) and len(r.skipped) == (6 if again else 4), r
        said = [n for n in r.notes if "holds files pulled with --materialize; this pull materialises too" in n]
        assert len(said) == (0 if again else 1), r.notes
        m = read_manifest(local)
        assert m["encoding"] == "full" and m["materialized"]["from_encoding"] == "compact"
        assert verify_version(local).ok
        df = pd.read_parquet(local / "data")
        assert "point_ref" not in df.columns and len(df) == 12  # clean, beam_del 5, translation 2: 4 frames each
    whole = pull_version(dataset, tmp_path / "p", progress=False)  # the rest, materialised like the rest
    assert whole.ok and len(whole.skipped) == 6 and len(whole.transferred) == 36
    m = read_manifest(local)
    assert "partial" not in m and m["encoding"] == "full" and verify_version(local).ok


def test_materialize_names_what_does_not_fit():
    clean = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match="point 1 refers to clean point 100000000, but the clean scan has 3 points"):
        materialize(np.array([0, 100000000], np.int32), np.zeros((0, 4), np.float32), clean)
    with pytest.raises(ValueError, match="1 points have no reference into the clean scan but the row stores 0 "
                                         "literal points"):
        materialize(np.array([0, NO_REF], np.int32), np.zeros((0, 4), np.float32), clean)


def test_a_changed_point_ref_is_caught_naming_file_row_and_key(compact_build, tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench_build.format.checked import IntegrityError
    from bench_build.format.compact_files import materialize_file
    from bench_build.format.reader import open_version, rows_of
    from bench_build.format.schema import decode_points, file_metadata
    from tests.pipeline.tamper import POINT_REF, flip_file

    v = tmp_path / "v"
    shutil.copytree(compact_build, v, ignore=shutil.ignore_patterns("_ledger"))
    entry = open_version(v).shards("beam_del", 5)[1]
    want = {ex.key: ex.points for ex in open_version(compact_build).read_file(entry)}
    flip_file(v / entry["path"], POINT_REF)  # same size; the page checksum catches it
    with pytest.raises(IntegrityError, match=rf"{entry['path']}: a data page does not match its checksum"):
        list(open_version(v).examples("beam_del", 5))
    with pytest.raises(IntegrityError, match=rf"{entry['path']}: a data page does not match its checksum"):
        materialize_file(v / entry["path"], v / open_version(v).shards("clean")[1]["path"])
    try:  # unverified, the changed references point at other clean points (or fail to materialise)
        got = {ex.key: ex.points for ex in open_version(v, verify=False).read_file(entry)}
        assert any(got[k].tobytes() != want[k].tobytes() for k in want)
    except IntegrityError as e:
        assert entry["path"] in str(e) and "row" in str(e)

    # a reference past the clean scan (a valid page holding a wrong value): file, row and key in the message
    pf = pq.ParquetFile(compact_build / entry["path"])
    table = pf.read()
    refs = decode_points(table["point_ref"].combine_chunks(), writable=True)
    row = next(i for i, r in enumerate(refs) if r is not None and len(r))
    refs[row][0] = 100_000_000
    ref_type = table.schema.field("point_ref").type
    bad = table.set_column(table.schema.get_field_index("point_ref"), "point_ref",
                           pa.array([None if r is None else r.tolist() for r in refs], ref_type))
    clean_entry = open_version(compact_build).shards("clean")[1]
    ct = pq.read_table(compact_build / clean_entry["path"], columns=["frame_id", "points"])
    clean = dict(zip(ct["frame_id"].to_pylist(), decode_points(ct["points"]), strict=True))
    key = table["key"][row].as_py()
    with pytest.raises(IntegrityError, match=rf"^{entry['path']}: row {row} \({key}\): point 0 refers to clean point "
                                             r"100000000, but the clean scan has \d+ points; the file changed"):
        list(rows_of(bad, file_metadata(pf.schema_arrow), "beam_del", 5, clean=clean, where=entry["path"]))

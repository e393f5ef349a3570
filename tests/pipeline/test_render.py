"""Rendering: rasters put points where they belong, every sheet panel shares the clean extent, a real
build's card embeds its contact sheet, and `bench-build render` validates what it is asked for."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.render import (
    PANEL_PX,
    SHEET_GAP_PX,
    TAG_COLORS,
    View,
    bev_raster,
    box_outlines,
    make_panel,
    object_raster,
    paint,
    scene_extent,
    sheet_image,
    sheet_layout,
    sheet_panels,
    sheet_title,
)
from stages.frame import Boxes, PointTag

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def test_paint_places_points_and_draws_later_keys_on_top():
    u = np.array([0.5, 9.5, 0.5, 20.0])
    v = np.array([0.5, 0.5, 0.5, 0.0])
    rgb = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]], float)
    img = paint(u, v, rgb, np.array([2.0, 0.0, 1.0, 0.0]), (0, 10, 0, 10), 10)
    # v = 0.5 is the bottom row; the red point (key 2) overwrites the blue one (key 1) at the same pixel
    assert img[9, 0].tolist() == [255, 0, 0] and img[9, 9].tolist() == [0, 255, 0]
    assert (img != 255).any(axis=2).sum() == 2  # the point at u = 20 is outside and dropped


def test_box_outlines_follow_heading():
    boxes = Boxes(center=np.array([[10.0, 0.0, -1.0], [0.0, 5.0, -1.0]]), dims=np.array([[4.0, 2.0, 1.5]] * 2),
                  heading=np.array([0.0, np.pi / 2]), cls=np.array(["Car", "Cyclist"], dtype=object),
                  truncated=np.zeros(2), occluded=np.zeros(2, np.int64), alpha=np.zeros(2), bbox2d=np.zeros((2, 4)))
    (c0, o0), (c1, o1) = box_outlines(boxes)
    assert c0 == "Car" and sorted(set(o0[:, 0].round(6))) == [8, 12] and sorted(set(o0[:, 1].round(6))) == [-1, 1]
    assert c1 == "Cyclist" and sorted(set(o1[:, 0].round(6))) == [-1, 1] and sorted(set(o1[:, 1].round(6))) == [3, 7]
    assert np.allclose(o0[0], o0[-1])  # closed


def test_object_three_views():
    pts = np.array([[0.5, 0.0, 0.0]])
    img = object_raster(View("clean", 0, pts, np.array([PointTag.SYNTHETIC]), None, True), 1.0, "tag", px=20)
    assert img.shape == (20, 60, 3)
    red = np.all(img == (np.array(TAG_COLORS[PointTag.SYNTHETIC]) * 255 + 0.5).astype(np.uint8), axis=2)
    # painted at half resolution (10 px) as 2×2 dots: top (x–y) and front (x–z): u = 0.5 → column 7 → 14–15,
    # v = 0 → row 5 → 10–11; side (y–z): the centre of the third view, columns 50–51
    assert red[10:12, 14:16].all() and red[10:12, 34:36].all() and red[10:12, 50:52].all() and red.sum() == 12


def test_sheet_panels_share_the_clean_extent():
    rng = np.random.default_rng(0)
    clean = rng.uniform(-20, 20, (500, 3))
    far = np.r_[clean, [[90.0, 90.0, 0.0]]]  # a corruption that adds a far point must not zoom out
    tags = np.zeros(len(far), np.uint8)
    boxes = Boxes(center=np.array([[0.0, 0.0, -1.0]]), dims=np.array([[4.0, 2.0, 1.5]]), heading=np.zeros(1),
                  cls=np.array(["Car"], dtype=object), truncated=np.zeros(1), occluded=np.zeros(1, np.int64),
                  alpha=np.zeros(1), bbox2d=np.zeros((1, 4)))
    views = [View("clean", 0, clean, tags[:500], boxes, False)]
    views += [View(c, s, far, tags, boxes, False) for c in ("fog", "snow") for s in (1, 2, 3)]
    panels = sheet_panels(views)
    x0, x1, y0, y1 = scene_extent(clean)
    assert x1 < 90
    expect = bev_raster(views[0], (x0, x1, y0, y1), "tag")
    for p in panels:  # every panel is painted with the clean extent: the far point falls outside
        np.testing.assert_array_equal(p.image, expect)
        # the box outline in pixels: x right from x0, y down from y1, px per metre = PANEL_PX / width
        (cls, o), = p.outlines
        k = PANEL_PX / (x1 - x0)
        assert cls == "Car" and np.allclose(o.min(0), [(-2 - x0) * k, (y1 - 1) * k])
        assert np.allclose(o.max(0), [(2 - x0) * k, (y1 + 1) * k])
    titles = [sheet_title(p, "000000", ["light", "moderate", "heavy"]) for p in panels]
    assert titles[:4] == ["clean · frame 000000", "fog 1 (light)", "fog 2 (moderate)", "fog 3 (heavy)"]
    corruptions, severities, cells = sheet_layout(panels)
    assert corruptions == ["fog", "snow"] and severities == [1, 2, 3]
    assert cells[("clean", 0)] == (0, 0) and cells[("snow", 3)] == (2, 2)
    bare = sheet_panels([View(v.corruption, v.severity, v.points, v.tags, None, False) for v in views])
    image = sheet_image(bare, frame_id="000000")  # tiles: snow 3 at row 2, column 2, ending the image
    x = SHEET_GAP_PX + 2 * (PANEL_PX + SHEET_GAP_PX)
    assert image.shape[1] == x + PANEL_PX + SHEET_GAP_PX
    np.testing.assert_array_equal(image[-PANEL_PX:, x:x + PANEL_PX], expect)
    boxed = sheet_image(panels, frame_id="000000")  # the outline is drawn in red over the same tile
    tile = boxed[-PANEL_PX:, x:x + PANEL_PX].astype(int)
    red = (tile[..., 0] - tile[..., 1] > 60) & (tile[..., 0] - tile[..., 2] > 60)
    rows, cols = np.nonzero(red)
    k = PANEL_PX / (x1 - x0)
    assert red.sum() > 20 and abs(cols.min() - (-2 - x0) * k) <= 2 and abs(cols.max() - (2 - x0) * k) <= 2
    assert abs(rows.min() - (y1 - 1) * k) <= 2 and abs(rows.max() - (y1 + 1) * k) <= 2


@pytest.fixture
def built(mini_build):
    return mini_build


def test_build_card_embeds_the_contact_sheet(built):
    sheet = built / "renders" / "contact_sheet.png"
    assert sheet.read_bytes().startswith(PNG)
    card = (built / "README.md").read_text()
    assert "## See the corruptions" in card and "](renders/contact_sheet.png)" in card
    assert "Frame `000000` under every corruption × severity (21 panels" in card  # clean + 4 × 5
    # the rest of the card (issue 14 deliverable 3): a demo build says so and claims no KITTI licence
    assert card.splitlines()[0].startswith("# mini-c 0.1.0 — demo build") or "\n# mini-c 0.1.0 — demo build" in card
    assert "- Source: generated demo data" in card and "inherits the licence of the source dataset" not in card
    assert "no real dataset's scans or labels are included" in card
    assert "| gaussian_rad | 4 | 4 | 4 | 4 | 4 |" in card and "| clean (severity 0) | 4 |" in card
    assert "## Intended use and limitations" in card and "This is a demo build" in card
    assert card.index("## See the corruptions") < card.index("## Counts per corruption × severity")
    assert "| beam_del | `beam_del` v1 | count_divisor=100 | count_divisor=30 |" in card


def test_render_cli(built, tmp_path):
    res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), "--frame", "000001"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "contact_sheet_000001.png").read_bytes().startswith(PNG)
    res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), "--corruption", "translation",
                              "--color-by", "height"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.glob("000000_translation_*.png")) == [
        f"000000_translation_{s}.png" for s in range(1, 6)]
    res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), "--severity", "2"])
    assert res.exit_code == 0 and len(list(tmp_path.glob("000000_*_2.png"))) == 4
    for args, msg in ((["--corruption", "fog"], "no corruption 'fog'"), (["--severity", "9"], "outside 0…5"),
                      (["--frame", "999999"], "'999999' is not in"), (["--color-by", "rainbow"], "--color-by")):
        res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), *args])
        assert res.exit_code == 2 and msg in res.output, (args, res.output)


def test_publish_and_pull_carry_the_renders(built, tmp_path):
    from pipeline.publish import publish_version, pull_version

    r = publish_version(str(built), str(tmp_path / "pub"), progress=False)
    assert r.ok
    published = tmp_path / "pub" / "mini-c" / "0.1.0" / "renders" / "contact_sheet.png"
    assert published.read_bytes() == (built / "renders" / "contact_sheet.png").read_bytes()
    p = pull_version(str(tmp_path / "pub" / "mini-c"), tmp_path / "local", progress=False)
    assert p.ok and (tmp_path / "local" / "mini-c" / "0.1.0" / "renders" / "contact_sheet.png").is_file()


def test_reads_layout_v2_points(tmp_path):
    """Layout v2 stores points as list<fixed_size_list<float32, C>> and keeps partition keys in the path only."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.render import read_views
    from pipeline.storage import LocalStore

    pts = [np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((2, 4), np.float32)]
    flat = pa.array(np.concatenate([p.ravel() for p in pts]))
    points = pa.ListArray.from_arrays(pa.array([0, 3, 5], pa.int32()), pa.FixedSizeListArray.from_arrays(flat, 4))
    tags = pa.ListArray.from_arrays(pa.array([0, 3, 5], pa.int32()), pa.array([0, 7, 7, 0, 0], pa.uint8()))
    rel = "data/corruption=clean/severity=0/part-00000-of-00001.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    pq.write_table(pa.table({"key": ["b/a/clean/0", "b/b/clean/0"], "frame_id": ["a", "b"], "points": points,
                             "point_tag": tags}), tmp_path / rel)
    manifest = {"shards": [{"path": rel, "corruption": "clean", "severity": 0}], "recipe": {"corruptions": []}}
    frame_id, views = read_views(LocalStore(tmp_path), manifest, "b")
    assert frame_id == "b" and len(views) == 1
    np.testing.assert_array_equal(views[0].points, np.ones((2, 3)))
    assert views[0].is_object  # no boxes, inside the unit cube: drawn as three views
    _, views = read_views(LocalStore(tmp_path), manifest)  # default: the first frame of the first shard
    np.testing.assert_array_equal(views[0].points, pts[0][:, :3])
    assert views[0].tags.tolist() == [0, 7, 7] and not views[0].is_object


def test_sheet_painted_by_the_tasks_equals_one_read_back_from_the_files(built, tmp_path):
    """The build's tasks paint the contact sheet from the frames in memory (float32 xyz, no copy); `render`
    reads the same examples back from the Parquet files (float64 xyz): the same picture, byte for byte."""
    res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), "--frame", "000000"])
    assert res.exit_code == 0, res.output
    from_files = (tmp_path / "contact_sheet_000000.png").read_bytes()
    assert from_files == (built / "renders" / "contact_sheet.png").read_bytes()


def test_paint_is_the_same_for_float32_and_float64_points_and_keeps_the_highest_key():
    """The z-buffer keeps, per pixel, the point with the highest key (the later one on equal keys), and computes
    positions in float64 whatever the input dtype."""
    rng = np.random.default_rng(0)
    xyz = rng.uniform(-40, 40, (20000, 3)).astype(np.float32)
    tags = rng.integers(0, 8, 20000).astype(np.uint8)
    extent = (-30.0, 30.0, -30.0, 30.0)
    a = make_panel(View("x", 1, xyz, tags, None, False), extent=extent).image
    b = make_panel(View("x", 1, xyz.astype(np.float64), tags, None, False), extent=extent).image
    assert np.array_equal(a, b)
    # reference: per pixel, the last of the points with the maximal key (a plain loop)
    px = a.shape[0]
    key = tags.astype(np.float64) * 100 + xyz[:, 2].astype(np.float64)
    best: dict[int, int] = {}
    for i in range(len(xyz)):
        u, v = float(xyz[i, 0]), float(xyz[i, 1])
        if not (u >= extent[0] and v <= extent[3]):
            continue
        iu, iv = int((u - extent[0]) * (px / 60.0)), int((extent[3] - v) * (px / 60.0))
        if iu < px and iv < px and (iv * px + iu not in best or key[i] >= key[best[iv * px + iu]]):
            best[iv * px + iu] = i
    lut = (np.array([TAG_COLORS.get(PointTag(t), (0, 0, 0)) if t in PointTag._value2member_map_ else (0, 0, 0)
                     for t in range(8)]) * 255 + 0.5).astype(np.uint8)
    expect = np.full((px * px, 3), 255, np.uint8)
    for p, i in best.items():
        expect[p] = lut[tags[i]]
    assert np.array_equal(a.reshape(-1, 3), expect) and len(best) > 1000

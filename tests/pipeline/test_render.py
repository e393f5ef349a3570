"""Rendering: rasters put points where they belong, every sheet panel shares the clean extent, a real
build's card embeds its contact sheet, and `bench-build render` validates what it is asked for."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.render import (
    PANEL_PX,
    SHEET_GAP_PX,
    SHEET_ROW_GAP_PX,
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
from bench_build.stages.frame import Boxes, PointTag

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
    # the tile as painted, but for its light frame and the metre scale bar drawn over its bottom right corner
    end = image.shape[0] - SHEET_GAP_PX  # the bottom margin
    np.testing.assert_array_equal(image[end - PANEL_PX + 3:end - 16, x + 3:x + PANEL_PX - 3], expect[3:-16, 3:-3])
    np.testing.assert_array_equal(image[end - 16:end - 3, x + 3:x + PANEL_PX // 2], expect[-16:-3, 3:PANEL_PX // 2])
    edge = image[end - PANEL_PX:end, x].astype(int)  # the frame: light grey down the left edge
    assert (np.abs(edge - 209).max(axis=1) <= 40).mean() > 0.9
    boxed = sheet_image(panels, frame_id="000000")  # the car's outline is drawn in cyan over the same tile
    tile = boxed[end - PANEL_PX:end, x:x + PANEL_PX].astype(int)
    cyan = (tile[..., 1] - tile[..., 0] > 120) & (tile[..., 2] - tile[..., 0] > 120)  # not the attenuated blue
    rows, cols = np.nonzero(cyan)
    k = PANEL_PX / (x1 - x0)
    assert cyan.sum() > 20 and abs(cols.min() - (-2 - x0) * k) <= 2 and abs(cols.max() - (2 - x0) * k) <= 2
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
    assert "Scene panels have a metre scale and, right of each, an inset" in card and "three sides" not in card
    # the rest of the card (issue 14 deliverable 3): a demo build says so and claims no KITTI licence
    assert card.splitlines()[0].startswith("# mini-c 0.1.0 — demo build") or "\n# mini-c 0.1.0 — demo build" in card
    assert "- Source: generated demo data" in card and "inherits the licence of the source dataset" not in card
    assert "no real dataset's scans or labels are included" in card
    assert "| gaussian_rad |  | 4 | 4 | 4 | 4 | 4 |" in card and "| clean | 4 |  |" in card
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
                      (["--frame", "999999"], f"'999999' is not in the requested partitions of {built}; its frames: "
                                              "000000"),
                      (["--color-by", "rainbow"], "--color-by"),
                      (["--corruption", "clean", "--severity", "3"], "clean has only severity 0, not 3")):
        res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path), *args])
        assert res.exit_code == 2 and msg in res.output, (args, res.output)
    assert not list(tmp_path.glob("*clean*"))  # clean 3 drew clean 0 under the name it was not asked for


def test_pngs_drawn_by_a_pool_of_processes_are_the_ones_drawn_one_by_one(built, tmp_path, monkeypatch):
    """`render --severity S` draws its PNGs (one per corruption) on a pool of processes where there are cores and
    PNGs enough: the same files, byte for byte, in the same order, as drawn one after the other."""
    import concurrent.futures

    from bench_build.render import figure
    from bench_build.render.figure import render_version

    pools: list[int] = []

    class Counted(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, processes, **kwargs):
            pools.append(processes)
            super().__init__(processes, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Counted)
    monkeypatch.setattr(figure, "usable_cores", lambda: 1)
    one = render_version(built, tmp_path / "one", severity=2)
    assert pools == [] and len(one) == 4
    monkeypatch.setattr(figure, "usable_cores", lambda: 2)
    monkeypatch.setattr(figure, "PNGS_PER_PROCESS", 1)
    pooled = render_version(built, tmp_path / "pool", severity=2)
    assert pools == [2]
    assert [p.name for p in pooled] == [p.name for p in one]
    assert [p.read_bytes() for p in pooled] == [p.read_bytes() for p in one]


def test_publish_and_pull_carry_the_renders(built, tmp_path):
    from bench_build.publish import publish_version, pull_version

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

    from bench_build.render import read_views
    from bench_build.storage import LocalStore

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


@pytest.mark.parametrize("frame", [None, "000001"])
def test_views_read_on_threads_equal_views_read_one_by_one(built, monkeypatch, frame):
    """`read_views` reads a local version's files on threads: the same frame, views and order as one thread."""
    import bench_build.render.read as read
    from bench_build.manifests.manifest import read_manifest
    from bench_build.storage import LocalStore

    manifest, store = read_manifest(built), LocalStore(built)
    fid, views = read.read_views(store, manifest, frame)
    monkeypatch.setattr(read, "READ_THREADS", 1)
    fid1, views1 = read.read_views(store, manifest, frame)
    assert fid == fid1 == (frame or "000000") and len(views) == len(views1) == len(manifest["shards"]) // 2
    for a, b in zip(views, views1, strict=True):
        assert (a.corruption, a.severity, a.is_object) == (b.corruption, b.severity, b.is_object)
        assert np.array_equal(a.points, b.points) and np.array_equal(a.tags, b.tags)


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


# ---- reading aids (issue 32, deliverable 7): scales, legends, zoom insets, labelled views, where render writes --

def _car_scene(rng, n_car: int = 400):
    """A ring of ground points and one car (4 × 2 m at x = 12) densely sampled: (points, boxes, car mask)."""
    ground = np.c_[rng.uniform(-30, 30, (3000, 2)), np.full(3000, -1.7)]
    car = np.c_[rng.uniform(10.2, 13.8, n_car), rng.uniform(-0.8, 0.8, n_car), rng.uniform(-1.5, 0.0, n_car)]
    boxes = Boxes(center=np.array([[12.0, 0.0, -0.8], [-15.0, 10.0, -0.9]]),
                  dims=np.array([[4.0, 2.0, 1.6], [0.8, 0.6, 1.8]]), heading=np.zeros(2),
                  cls=np.array(["Car", "Pedestrian"], dtype=object), truncated=np.zeros(2),
                  occluded=np.zeros(2, np.int64), alpha=np.zeros(2), bbox2d=np.zeros((2, 4)))
    pts = np.r_[ground, car]
    return pts, boxes, np.r_[np.zeros(len(ground), bool), np.ones(n_car, bool)]


def _colour_px(img: np.ndarray, rgb) -> int:
    return int(np.all(img == np.round(np.array(rgb) * 255).astype(np.uint8), axis=2).sum())


def test_zoom_inset_shows_object_level_changes_the_scene_view_cannot():
    """uniform_obj at severity 1 moves a car's points by centimetres: the whole-scene raster barely changes,
    the inset zoomed on the car marks every moved point black; deleted points (cutout_obj) show pink."""
    from bench_build.render import ZOOM_CHANGED, ZOOM_GONE, ZOOM_SAME, sheet_focus

    rng = np.random.default_rng(1)
    pts, boxes, car = _car_scene(rng)
    tags = np.zeros(len(pts), np.uint8)
    moved = pts.copy()
    moved[car] += rng.uniform(-0.02, 0.02, (car.sum(), 3))
    cut = np.delete(pts, np.flatnonzero(car)[:10], axis=0)
    views = [View("clean", 0, pts, tags, boxes, False), View("uniform_obj", 1, moved, tags, boxes, False),
             View("cutout_obj", 1, cut, tags[:len(cut)], boxes, False)]
    focus = sheet_focus(views[0], scene_extent(pts))
    assert focus is not None and focus.outline[0] == "Car"  # the best-sampled box, not the empty pedestrian
    x0, x1, y0, y1 = focus.extent
    assert x0 < 10 and x1 > 14 and y0 < -1 and y1 > 1 and x1 - x0 < 8
    clean, jittered, deleted = sheet_panels(views)
    assert clean.inset is not None and clean.inset.shape == jittered.inset.shape
    assert _colour_px(clean.inset, ZOOM_SAME) > 100
    assert _colour_px(clean.inset, ZOOM_CHANGED) == 0 and _colour_px(clean.inset, ZOOM_GONE) == 0
    assert _colour_px(jittered.inset, ZOOM_CHANGED) > 0.5 * _colour_px(clean.inset, ZOOM_SAME)
    assert _colour_px(deleted.inset, ZOOM_GONE) >= 36 and _colour_px(deleted.inset, ZOOM_CHANGED) == 0
    # the zoom enlarges: at the panel's scale the same change touches far fewer pixels than in the inset
    assert (clean.image != jittered.image).any(axis=2).sum() < (clean.inset != jittered.inset).any(axis=2).sum()
    # on the sheet: the inset beside its panel, with the clean box dashed and the moved one in colour
    image = sheet_image([clean, jittered], frame_id="f")
    assert _colour_px(image, ZOOM_CHANGED) >= _colour_px(jittered.inset, ZOOM_CHANGED)


def test_scale_bars_and_legend_of_a_scene_sheet():
    from bench_build.render import INSET_FRAC, INSET_GAP_PX, ZOOM_CHANGED, legend_entries, scale_bar_m, sheet_key

    assert [scale_bar_m(w) for w in (80, 60, 10, 3)] == [20, 10, 2, 0.5]
    rng = np.random.default_rng(2)
    pts, boxes, _ = _car_scene(rng)
    tags = np.zeros(len(pts), np.uint8)
    fog_tags = tags.copy()
    fog_tags[:50], fog_tags[50:60] = PointTag.SCATTER_FOG, PointTag.ATTENUATED
    panels = sheet_panels([View("clean", 0, pts, tags, boxes, False), View("fog", 1, pts, fog_tags, boxes, False)])
    key = sheet_key(panels)
    x0, x1, _, _ = panels[0].extent
    assert key.scale_m == scale_bar_m(x1 - x0) and key.zoom_scale_m is not None and key.colorbar is None
    labels = [e.label for e in key.legend]
    assert labels[:3] == ["unchanged", "attenuated", "weather scatter (fog/snow/rain)"]
    assert "crosstalk" not in labels and "Car" in labels and "Pedestrian" in labels and "Cyclist" not in labels
    assert "zoom: moved or added" in labels and "zoom: clean box" in labels
    # the scale bar: a black line of scale_m metres, 5 px above the bottom of the clean panel, at its right
    image = sheet_image(panels, frame_id="f")
    spx = key.scale_m * PANEL_PX / (x1 - x0)
    # of the clean panel (row 0; fog is row 1): the bottom margin, then one row of gap, title and panel above
    bottom = image.shape[0] - SHEET_GAP_PX - (PANEL_PX + SHEET_ROW_GAP_PX + 16)
    cell = PANEL_PX + INSET_GAP_PX + round(PANEL_PX * INSET_FRAC)  # the panel and its zoom's column
    x = (image.shape[1] - cell - 2 * SHEET_GAP_PX) // 2 + SHEET_GAP_PX  # one column: centred in the 420 px
    strip = image[bottom - 8:bottom - 2, x:x + PANEL_PX].min(axis=0)  # antialiased line
    black = np.flatnonzero(np.all(strip < 110, axis=1))
    assert abs(len(black) - spx) <= 3 and abs(black.max() - (PANEL_PX - 5)) <= 2
    # by height: a colour bar in metres instead of tag entries
    high = sheet_panels([View("clean", 0, pts, tags, boxes, False)], color_by="height")
    key = sheet_key(high, color_by="height")
    assert key.colorbar == ("height z (m)", -2.5, 1.5) and not any(e.kind == "points" and e.label == "unchanged"
                                                                    for e in key.legend)
    from matplotlib import colormaps

    header = sheet_image(high, frame_id="f", color_by="height")[:-(PANEL_PX + 16)]  # above the panel: the bar
    for k in (5, 80, 154):
        rgb = (np.array(colormaps["viridis"](k / 159)[:3]) * 255 + 0.5).astype(np.uint8)
        assert np.all(header == rgb, axis=2).sum() >= 5, k
    assert legend_entries([0, 2, 3, 4], [], zoom=False)[1].label == "weather scatter (fog/snow/rain)"  # once
    assert len(legend_entries([0, 2, 3, 4], [])) == 2 and ZOOM_CHANGED == (0.0, 0.0, 0.0)


def test_object_legend_lists_no_weather_and_views_are_labelled():
    from bench_build.render import sheet_key, view_figure

    rng = np.random.default_rng(3)
    pts = rng.uniform(-0.8, 0.8, (500, 3))
    tags = np.zeros(500, np.uint8)
    jit = tags.copy()
    jit[:100] = PointTag.JITTER
    views = [View("clean", 0, pts, tags, None, True), View("jitter", 1, pts, jit, None, True)]
    key = sheet_key(sheet_panels(views))
    assert [e.label for e in key.legend] == ["unchanged", "jittered"]  # no weather, no boxes, no zoom
    assert key.scale_m is None and key.zoom_scale_m is None
    key = sheet_key(sheet_panels(views, color_by="height"), color_by="height")
    assert key.colorbar == ("height z (shape units)", -1.0, 1.0)
    fig, entries = view_figure(views[1], frame_id="test/0", radius=1.0)
    assert [e.label for e in entries] == ["unchanged", "jittered"]
    axes = [a for a in fig.axes if a.get_title()]
    assert [a.get_title() for a in axes] == ["top view (x–y)", "front view (x–z)", "side view (y–z)"]
    assert [(a.get_xlabel(), a.get_ylabel()) for a in axes] == [
        ("x (shape units)", "y (shape units)"), ("x (shape units)", "z (shape units)"),
        ("y (shape units)", "z (shape units)")]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["unchanged", "jittered"]


def test_scene_figure_has_metric_axes_legend_and_colour_bar():
    from bench_build.render import sheet_focus, view_figure

    rng = np.random.default_rng(4)
    pts, boxes, _ = _car_scene(rng)
    view = View("translation", 1, pts, np.zeros(len(pts), np.uint8), boxes, False)
    extent = scene_extent(pts)
    fig, entries = view_figure(view, frame_id="000000", extent=extent, focus=sheet_focus(view, extent),
                               color_by="height")
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("x (m)", "y (m)")
    assert any("height z (m)" in (a.get_xlabel(), a.get_ylabel()) for a in fig.axes)  # the colour bar
    assert [a.get_title()[:6] for a in ax.child_axes] == ["zoom: "]  # the inset
    assert [e.label for e in entries if e.kind == "box"] == ["Car", "Pedestrian"]
    # the inset's scale bar and label lie on a white backing, above the raster (moved points are black)
    ins = ax.child_axes[0]
    (backing,) = [p for p in ins.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]
    (label,) = [t for t in ins.texts if t.get_text().endswith(" m")]
    (bar,) = [ln for ln in ins.lines if ln.get_color() == "black"]
    assert ins.images[0].get_zorder() < backing.get_zorder() < min(bar.get_zorder(), label.get_zorder())
    to_axes = ins.transData + ins.transAxes.inverted()
    box = backing.get_bbox()  # in the inset's axes fraction
    for xy in (*np.c_[bar.get_xdata(), bar.get_ydata()], label.get_position()):
        x, y = to_axes.transform(xy)
        assert box.x0 < x < box.x1 and box.y0 < y < box.y1, (xy, box)


def _apart_and_inside(fig, parts: dict) -> None:
    """Every bounding box of ``parts`` (name → renderer bbox) lies in the figure and overlaps no other."""
    names = list(parts)
    for i, a in enumerate(names):
        box = parts[a]
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, a
        for b in names[i + 1:]:
            assert not box.overlaps(parts[b]), (a, b)


@pytest.mark.parametrize("color_by", ["tag", "height"])
@pytest.mark.parametrize("shift", [(0.0, 0.0), (-24.0, -26.0), (14.0, 26.0), (-40.0, 24.0)])
def test_the_zoom_of_a_single_png_hides_none_of_the_scene_and_nothing_crosses_a_label(shift, color_by):
    """The inset sat in a corner of the scene, over a fifth of its points, and its title ("zoom: 6.5 m × 6.5 m")
    stood above it on the scene, drawn over by points and by the connector. Now it has a column of its own: the
    inset, its title, the legend, the colour bar and the scene (with its title, ticks and labels), as the
    renderer lays them out, overlap nothing and stay in the figure, and the connectors cross no text, wherever
    the zoomed object lies. The PNG is the same bytes each time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import ConnectionPatch

    from bench_build.render import save_png, sheet_focus, view_figure

    rng = np.random.default_rng(6)
    pts, boxes, car = _car_scene(rng)
    pts[car, :2] += shift
    boxes.center[0, :2] += shift
    view = View("translation", 1, pts, np.zeros(len(pts), np.uint8), boxes, False)
    extent = scene_extent(pts)
    fig, _ = view_figure(view, frame_id="000000", extent=extent, focus=sheet_focus(view, extent), color_by=color_by)
    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    (ins,) = ax.child_axes
    parts = {"scene": ax.get_tightbbox(r, bbox_extra_artists=[]), "zoom": ins.get_window_extent(r),
             "zoom title": ins.title.get_window_extent(r), "legend": fig.legends[0].get_window_extent(r)}
    if color_by == "height":
        (cax,) = [a for a in fig.axes if a.get_xlabel() == "height z (m)"]
        parts["colour bar"] = cax.get_tightbbox(r)
    _apart_and_inside(fig, parts)
    def shown(axis, labels):  # the tick labels drawn: those within the axis' limits
        lo, hi = sorted(axis.get_view_interval())
        return [t for t in labels if t.get_text() and lo <= t.get_position()[axis is axis.axes.yaxis] <= hi]

    texts = [ax.title, ax.xaxis.label, ax.yaxis.label, ins.title, *ins.texts, *fig.legends[0].get_texts(),
             fig.legends[0].get_title(), *shown(ax.xaxis, ax.get_xticklabels()),
             *shown(ax.yaxis, ax.get_yticklabels())]
    if color_by == "height":
        texts += [cax.xaxis.label, *shown(cax.xaxis, cax.get_xticklabels())]
    connectors = [a for a in ax.get_children() if isinstance(a, ConnectionPatch)]
    assert len(connectors) == 2
    for c in connectors:
        path = c.get_transform().transform_path(c.get_path())
        for t in texts:
            assert not path.intersects_bbox(t.get_window_extent(r)), t.get_text()
        for name in set(parts) - {"scene", "zoom"}:
            assert not path.intersects_bbox(parts[name]), name
    again, _ = view_figure(view, frame_id="000000", extent=extent, focus=sheet_focus(view, extent),
                           color_by=color_by)
    assert save_png(fig) == save_png(again)


@pytest.mark.parametrize("shift", [(0.0, 0.0), (-24.0, -26.0), (14.0, 26.0), (-40.0, 24.0)])
def test_the_zoom_of_the_sheet_hides_none_of_its_panel(shift):
    """The sheet's inset was pasted over a corner of each scene panel, a fifth of its points (on the demo frame,
    the bottom left of all 126 panels). It now has a column of its own right of its panel: wherever the zoomed
    object lies, the panel's pixels are those of its painted raster but for the frame, the box outlines, the
    zoom's window frame and the metre scale bar, and the inset, its scale bar and label lie beside the panel,
    between it and the next column."""
    from dataclasses import replace

    from bench_build.render import INSET_FRAC, INSET_GAP_PX

    rng = np.random.default_rng(5)
    pts, boxes, _ = _car_scene(rng)
    pts[:, :2] += shift
    boxes.center[:, :2] += shift
    clean, moved = sheet_panels([View("clean", 0, pts, np.zeros(len(pts), np.uint8), boxes, False),
                                 View("translation", 1, pts, np.zeros(len(pts), np.uint8), boxes, False)])
    assert clean.inset is not None
    bare = [replace(p, outlines=(), inset_outlines=()) for p in (clean, moved)]
    black, white = (sheet_image([replace(p, inset=np.full_like(p.inset, v)) for p in bare], frame_id="f")
                    for v in (0, 255))
    assert black.shape == white.shape
    side = round(PANEL_PX * INSET_FRAC)
    top = black.shape[0] - SHEET_GAP_PX - PANEL_PX  # the translation panel: row 1, column 0, ending the image
    grid = SHEET_GAP_PX + PANEL_PX + INSET_GAP_PX + side + SHEET_GAP_PX
    assert black.shape[1] == 420  # one column is narrower than the legend's minimum width: centred
    x = (420 - grid) // 2 + SHEET_GAP_PX
    rows, cols = np.nonzero((black != white).any(axis=2)[top:])  # the inset: where the insets differ
    ix = x + PANEL_PX + INSET_GAP_PX  # its column: right of the panel (its black frame drawn over its edge)
    assert rows.min() >= 0 and rows.max() < side and cols.min() >= ix and cols.max() < ix + side
    assert len(rows) > 0.9 * side * side
    panel = black[top:top + PANEL_PX, x:x + PANEL_PX]
    drawn = np.zeros((PANEL_PX, PANEL_PX), bool)  # what is drawn over the raster: frame, zoom window, scale bar
    drawn[:3], drawn[-3:], drawn[:, :3], drawn[:, -3:] = True, True, True, True
    drawn[-18:, PANEL_PX // 2:] = True
    (x0, x1), (y0, y1) = (np.clip(np.array(clean.zoom[:2]) - clean.extent[0], 0, None) * PANEL_PX
                          / (clean.extent[1] - clean.extent[0]),
                          np.clip(clean.extent[3] - np.array(clean.zoom[2:][::-1]), 0, None) * PANEL_PX
                          / (clean.extent[3] - clean.extent[2]))
    drawn[max(int(y0) - 2, 0):int(y1) + 3, max(int(x0) - 2, 0):int(x1) + 3] = True
    np.testing.assert_array_equal(panel[~drawn], moved.image[~drawn])
    below = black[top + side:top + PANEL_PX, x + PANEL_PX + INSET_GAP_PX:x + PANEL_PX + INSET_GAP_PX + side]
    assert np.all(below < 80, axis=2).sum() >= 20  # the zoom's scale bar and label, dark on the sheet's white


def test_render_writes_beside_the_user_not_into_the_build(built, tmp_path, monkeypatch):
    """Without --out, `render` writes ./renders-<benchmark>-<version>/ and says so; the version's own renders/
    (which publish uploads and the manifest lists) is left as the build wrote it."""
    before = sorted(p.name for p in (built / "renders").iterdir())
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["render", str(built), "--corruption", "translation", "--severity", "1"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "renders-mini-c-0.1.0"
    assert (out / "000000_translation_1.png").read_bytes().startswith(PNG)
    assert "no --out given" in res.output and "renders-mini-c-0.1.0" in res.output
    assert sorted(p.name for p in (built / "renders").iterdir()) == before == ["contact_sheet.png"]
    res = runner.invoke(app, ["render", "--help"], env={"COLUMNS": "200"})
    assert "./renders-<benchmark>-<version>" in res.output


def test_render_refuses_an_out_inside_the_version_and_names_what_it_cannot_write(built, tmp_path, monkeypatch):
    """`--out` inside the version (its renders/ or data/) put extra PNGs among the files its manifest lists; it is
    refused, nothing written. A PNG that cannot be written (no space, a folder that cannot be made) was an OSError
    traceback; it is one line naming the file, exit 2 when nothing was written, else 1 with what was written."""
    import errno

    import bench_build.render.figure as figure

    before = sorted(p.relative_to(built) for p in built.rglob("*"))
    for out in (built / "renders", built / "data" / "pngs", built):
        res = runner.invoke(app, ["render", str(built), "--out", str(out), "--frame", "000001"])
        assert res.exit_code == 2, res.output
        assert f"--out {out} is inside the version {built}" in " ".join(res.output.split()), res.output
    assert sorted(p.relative_to(built) for p in built.rglob("*")) == before
    real, calls = figure.atomic_write_with, []

    def disk_full_on(n):
        def write(path, put):
            calls.append(path)
            if len(calls) == n:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(path, put)
        return write

    for n, code in ((1, 2), (3, 1)):
        calls.clear()
        monkeypatch.setattr(figure, "atomic_write_with", disk_full_on(n))
        out = tmp_path / f"full{n}"
        res = runner.invoke(app, ["render", str(built), "--out", str(out), "--corruption", "translation"])
        assert res.exit_code == code, res.output
        lines = res.output.strip().splitlines()
        assert lines[-1] == (f"error: {out / '000000_translation_1.png'}: cannot write 000000_translation_1.png "
                             "there (No space left on device)").replace("_1.png", f"_{n}.png"), res.output
        assert sorted(p.name for p in out.glob("*")) == [f"000000_translation_{s}.png" for s in range(1, n)]
        assert lines[:-1] == [f"wrote {out / f'000000_translation_{s}.png'}" for s in range(1, n)], res.output


def test_render_of_a_damaged_page_is_one_line_naming_the_file(built, tmp_path):
    """render read the version's files with plain pyarrow: a flipped byte inside a data page drew other points.
    It reads with page checksums: the damage is one line naming the file, exit 2, no PNG."""
    import shutil

    from tests.pipeline.tamper import POINTS, flip_file

    version = tmp_path / "v"
    shutil.copytree(built, version)
    part = version / "data" / "corruption=translation" / "severity=1"
    path = next(part.glob("*.parquet"))
    flip_file(path, POINTS)
    res = runner.invoke(app, ["render", str(version), "--out", str(tmp_path / "png"), "--corruption", "translation",
                              "--severity", "1"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and out.startswith(f"error: {path}: a data page does not match its checksum"), out
    assert not (tmp_path / "png").exists()


def test_render_of_a_missing_or_replaced_file_is_one_line_naming_it(built, tmp_path):
    """A file the manifest lists that is gone was a FileNotFoundError traceback, and another partition's file put
    in its place (every page matching its own checksum) was drawn under this partition's name. Each file is
    checked against its manifest entry first: one line naming it, exit 2, no PNG."""
    import shutil

    version = tmp_path / "v"
    shutil.copytree(built, version)
    part = version / "data" / "corruption=translation"
    one, five = (next((part / f"severity={s}").glob("*.parquet")) for s in (1, 5))
    size = one.stat().st_size
    shutil.copyfile(five, one)
    assert one.stat().st_size != size
    cases = ((["--corruption", "translation", "--severity", "1"], f"{one}: {one.stat().st_size} bytes, manifest "
                                                                  f"says {size}; the file changed since the build"),
             ([], f"{one}: {one.stat().st_size} bytes, manifest says {size}"))
    for args, msg in cases:
        res = runner.invoke(app, ["render", str(version), "--out", str(tmp_path / "png"), *args])
        out = " ".join(res.output.split())
        assert res.exit_code == 2 and out.startswith(f"error: {msg}"), (args, out)
    five.unlink()
    res = runner.invoke(app, ["render", str(version), "--out", str(tmp_path / "png"), "--corruption", "translation",
                              "--severity", "5"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and out == (f"error: {five}: listed in the manifest but missing; re-pull the version "
                                          f"or run `bench-build verify {version}`"), out
    assert not (tmp_path / "png").exists()


@pytest.mark.parametrize(("edit", "says"), [
    (lambda m: m.pop("recipe"), "no recipe, which reading the version needs"),
    (lambda m: m["recipe"].__setitem__("corruptions", ["translation"]),
     "recipe.corruptions ['translation'] is not a list of objects with a name"),
    (lambda m: m["shards"][0].__setitem__("severity", "0"), "malformed shards entry 0"),
    (lambda m: m.__setitem__("version", "../../elsewhere"), "version '../../elsewhere' is not a safe name"),
])
def test_render_of_a_manifest_edited_by_hand_is_one_line(built, tmp_path, edit, says):
    """render read the manifest unchecked: without its recipe, or with a corruption that is not an object, it
    stopped on a KeyError or TypeError traceback; a shards entry with its severity as a string was drawn. It refuses
    what the reader refuses, in one line naming the manifest, exit 2, no PNG."""
    import json
    import shutil

    version = tmp_path / "v"
    shutil.copytree(built, version)
    manifest = json.loads((version / "manifest.json").read_text())
    edit(manifest)
    (version / "manifest.json").write_text(json.dumps(manifest))
    res = runner.invoke(app, ["render", str(version), "--out", str(tmp_path / "png")])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and out.startswith(f"error: {version / 'manifest.json'}: {says}"), out
    assert not (tmp_path / "png").exists()


def test_build_sheet_panels_carry_the_zoom(built):
    """The demo's first frame has cars: every panel of the build's sheet (painted by the tasks, equal to the
    read-back one byte for byte) has the zoom inset, and translation 1 differs from clean inside it."""
    from bench_build.manifests.manifest import read_manifest
    from bench_build.render import ZOOM_CHANGED, ZOOM_GONE, read_views
    from bench_build.storage import LocalStore

    _, views = read_views(LocalStore(built), read_manifest(built), None,
                          partitions=[("clean", 0), ("translation", 1)])
    clean, moved = sheet_panels(views)
    assert clean.inset is not None and moved.inset is not None
    assert _colour_px(clean.inset, ZOOM_CHANGED) == _colour_px(clean.inset, ZOOM_GONE) == 0
    assert _colour_px(moved.inset, ZOOM_CHANGED) > 0 and _colour_px(moved.inset, ZOOM_GONE) > 0


def test_panels_from_memory_equal_panels_from_the_files_float32_boxes():
    """The build paints from frames in memory (float64 boxes); `render` from the files (float32 boxes). The
    zoom magnifies a box edge ≈ 15×, so the panels must use the boxes as stored: both give the same panel."""
    import dataclasses

    from bench_build.render import sheet_focus

    rng = np.random.default_rng(5)
    pts, boxes, _ = _car_scene(rng)
    boxes = dataclasses.replace(boxes, center=boxes.center + 1e-3 / 3, heading=boxes.heading + 0.1 / 3)
    stored = dataclasses.replace(boxes, center=boxes.center.astype(np.float32).astype(np.float64),
                                 dims=boxes.dims.astype(np.float32).astype(np.float64),
                                 heading=boxes.heading.astype(np.float32).astype(np.float64))
    assert not np.array_equal(stored.center, boxes.center)
    tags = np.zeros(len(pts), np.uint8)
    extent = scene_extent(pts)
    a, b = (make_panel(View("translation", 1, pts, tags, bx, False), extent=extent,
                       focus=sheet_focus(View("clean", 0, pts, tags, bx, False), extent)) for bx in (boxes, stored))
    assert a.zoom == b.zoom
    for (ca, oa), (cb, ob) in zip(a.outlines + a.inset_outlines, b.outlines + b.inset_outlines, strict=True):
        assert ca == cb and np.array_equal(oa, ob)


@pytest.mark.parametrize(("cores", "early"), [(16, True), (2, False)])
def test_a_build_imports_the_drawing_libraries_while_ray_starts_only_with_cores_to_spare(cores, early):
    """`EarlySheet` imports matplotlib (≈ 0.4 s) as the build starts when the machine has cores Ray's start leaves
    idle, so a sheet drawn after the last task does not pay it then; on 2 cores it would slow Ray's start as much."""
    code = f"""
import os, sys
os.cpu_count = lambda: {cores}
from bench_build.build.finish import EarlySheet
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import BlockSpec, TaskSpec
recipe = load_recipe("kitti-c")
parts = tuple((c.name, s) for c in recipe.corruptions for s in range(1, recipe.severities + 1))
sheet = EarlySheet(recipe, [TaskSpec(BlockSpec(0, 1, ("000000",)), 0, 1, parts)])
sheet.wait()
print("matplotlib.backends.backend_agg" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(early)


def test_on_few_cores_the_drawing_libraries_are_imported_once_block_0s_first_task_is_in():
    """On 2 cores the import waits for Ray's start, but not for the last task: it starts when the first of block 0's
    tasks has returned its panels (2 demo frames in 2 tasks on 2 workers end together, and the import and the
    whole drawing came after both). No drawing starts before every panel is in."""
    code = """
import os, sys
os.cpu_count = lambda: 2
from bench_build.build.finish import EarlySheet
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.tasks import BlockSpec, TaskSpec
recipe = load_recipe("kitti-c")
parts = [(c.name, s) for c in recipe.corruptions for s in range(1, recipe.severities + 1)]
block = BlockSpec(0, 1, ("000000",))
sheet = EarlySheet(recipe, [TaskSpec(block, 0, 2, tuple(parts[:3])), TaskSpec(block, 1, 2, tuple(parts[3:]))])
print(sheet.importing is None)
sheet.poll({})
print(sheet.importing is None)
sheet.poll({p: None for p in parts[:3]})
sheet.wait()
print(sheet.thread is None, "matplotlib.backends.backend_agg" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "True"], out.stdout


def test_box_colours_are_not_point_colours_and_a_long_frame_id_fits_its_title():
    """A box drawn in a point tag's colour vanishes among those points (red car boxes among red synthetic
    points); a 32-character nuScenes token pushed the clean panel's title off its 240-pixel panel."""
    from matplotlib.colors import to_rgb

    from bench_build.render import BOX_COLORS, TAG_COLORS
    from bench_build.render.panels import Panel
    from bench_build.render.sheet import sheet_title

    tags = {tuple(round(x, 2) for x in c) for c in TAG_COLORS.values()}
    assert not {tuple(round(x, 2) for x in to_rgb(c)) for c in BOX_COLORS.values()} & tags
    token = "a0126864e3fb4bba8f0a1bd4ec6ecc38"
    title = sheet_title(Panel("clean", 0, np.zeros((1, 1, 3), np.uint8)), token)
    assert title == "clean · frame a0126864e3fb…" and len(title) <= 27


def test_the_docs_name_the_box_colours_drawn():
    """README's "See the corruptions" and the package docstring said red Car, blue Pedestrian, green Cyclist
    after the boxes had moved to colours no point tag uses: a reader looked for red boxes among red points."""
    import re
    from pathlib import Path

    from matplotlib.colors import to_rgb

    import bench_build.render
    from bench_build.render import BOX_COLORS, OTHER_BOX

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for where, text in (("README.md", readme), ("bench_build.render", bench_build.render.__doc__ or "")):
        said = re.search(r"(\w+) Car, (\w+) Pedestrian, (\w+) Cyclist", " ".join(text.split()))
        assert said, where
        for word, cls in zip(said.groups(), ("Car", "Pedestrian", "Cyclist"), strict=True):
            assert to_rgb(f"tab:{word}") == to_rgb(BOX_COLORS[cls]), (where, word, cls, BOX_COLORS[cls])
    grey = to_rgb(OTHER_BOX)
    assert "dark grey any other class" in bench_build.render.__doc__ and len(set(grey)) == 1 and grey[0] < 0.5


# ---- partial pulls (`pull --corruption … --severity …`): a folder holding some of a version's partitions ----------

def test_a_sheet_without_clean_has_no_zoom_and_no_empty_clean_row():
    """Without a clean view the first view stood in for clean: its zoom marked every point "as in clean" and the
    others' changes against it; and the sheet kept clean's row empty, one small panel under a blank area."""
    from bench_build.render import sheet_key

    rng = np.random.default_rng(6)
    pts, boxes, car = _car_scene(rng)
    tags = np.zeros(len(pts), np.uint8)
    moved = pts.copy()
    moved[car] += 0.5
    views = [View("translation", 1, moved, tags, boxes, False), View("translation", 2, pts, tags, boxes, False)]
    panels = sheet_panels(views)
    assert all(p.inset is None and p.zoom is None for p in panels)
    assert panels[0].extent == scene_extent(moved)  # the first view's extent, shared
    key = sheet_key(panels)
    assert key.zoom_scale_m is None and not any(e.label.startswith("zoom") for e in key.legend)
    assert sheet_layout(panels)[2] == {("translation", 1): (0, 0), ("translation", 2): (0, 1)}
    cell_h = PANEL_PX + SHEET_ROW_GAP_PX + 16
    plain = sheet_image(panels, frame_id="f")
    assert plain.shape[0] < 2 * cell_h  # the legend, then the one row of panels
    said = sheet_image(panels, frame_id="f", note="no clean partition in this folder (a partial pull), so no zoom "
                                                  "compares with it: pull --corruption clean to compare")
    assert said.shape[0] >= plain.shape[0] + 15 and said.shape[1] == plain.shape[1]  # the note: a line or more
    one = sheet_image(panels[:1], frame_id="f")  # narrower than the legend's minimum width: centred
    ink = np.flatnonzero((one[-SHEET_GAP_PX - PANEL_PX // 2] < 250).any(axis=1))
    assert one.shape[1] == 420 and abs(ink.min() - (one.shape[1] - 1 - ink.max())) <= 2, (ink.min(), ink.max())


@pytest.fixture(scope="module")
def partial_pulls(mini_build, tmp_path_factory):
    """The mini build published to a folder, then pulled in part: translation/1 alone, and translation/1 with
    clean (two pulls into one OUT compose)."""
    from bench_build.publish import publish_version, pull_version

    tmp = tmp_path_factory.mktemp("partial")
    assert publish_version(str(mini_build), str(tmp / "pub"), progress=False).ok
    for out, parts in (("alone", [("translation", 1)]), ("with-clean", [("translation", 1), ("clean", None)])):
        for c, s in parts:
            assert pull_version(str(tmp / "pub" / "mini-c"), tmp / out, corruption=c, severity=s, progress=False).ok
    return tmp / "alone" / "mini-c" / "0.1.0", tmp / "with-clean" / "mini-c" / "0.1.0"


def test_render_of_a_partial_pull_without_clean_compares_nothing_with_clean_and_says_why(partial_pulls, tmp_path,
                                                                                     monkeypatch):
    from PIL import Image

    import bench_build.render.figure as figure
    from bench_build.render import ZOOM_GONE

    alone, with_clean = partial_pulls
    drawn: list = []
    real = figure.view_figure
    monkeypatch.setattr(figure, "view_figure", lambda *a, **k: drawn.append(k) or real(*a, **k))
    args = ["--corruption", "translation", "--severity", "1"]
    res = runner.invoke(app, ["render", str(with_clean), "--out", str(tmp_path / "c"), *args])
    assert res.exit_code == 0 and "note:" not in res.output, res.output
    assert drawn[-1]["focus"] is not None and drawn[-1].get("note") is None
    compared = np.asarray(Image.open(tmp_path / "c" / "000000_translation_1.png").convert("RGB"))
    assert _colour_px(compared, ZOOM_GONE) > 0  # the zoom: the moved car's clean points are gone
    res = runner.invoke(app, ["render", str(alone), "--out", str(tmp_path / "a"), *args], terminal_width=400)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"note: no clean partition in {alone} (a partial pull of mini-c 0.1.0: it holds translation/1)" in out
    assert (f"`bench-build pull <publication root>/mini-c --version 0.1.0 --out {alone.parent.parent} --corruption "
            "clean` adds it") in out
    assert drawn[-1]["focus"] is None
    assert "no clean partition in this folder (a partial pull)" in (drawn[-1].get("note") or "")
    alone_png = np.asarray(Image.open(tmp_path / "a" / "000000_translation_1.png").convert("RGB"))
    assert _colour_px(alone_png, ZOOM_GONE) == 0
    # the contact sheet: one row (no empty clean row above it), the note drawn in it and said
    res = runner.invoke(app, ["render", str(alone), "--out", str(tmp_path / "a")], terminal_width=400)
    assert res.exit_code == 0 and "note: no clean partition in" in " ".join(res.output.split()), res.output
    sheet = np.asarray(Image.open(tmp_path / "a" / "contact_sheet_000000.png").convert("RGB"))
    assert sheet.shape[0] < 2 * (PANEL_PX + SHEET_ROW_GAP_PX + 16)


def test_render_names_the_partitions_a_partial_pull_lacks(partial_pulls, tmp_path):
    """A partition that is not in the folder was reported as "frame None is not in the requested partitions";
    it is named, with what the folder holds and the pull that adds it."""
    alone, _ = partial_pulls
    pull = f"bench-build pull <publication root>/mini-c --version 0.1.0 --out {alone.parent.parent}"
    for args, msg in (
            (["--corruption", "beam_del", "--severity", "1"],
             f"beam_del/1 is not in this folder ({alone}): a partial pull of mini-c 0.1.0; it holds translation/1 "
             f"(`{pull} --corruption beam_del --severity 1` adds it)"),
            (["--corruption", "beam_del", "--frame", "000001"],
             f"beam_del/1–5 are not in this folder ({alone})"),
            (["--corruption", "clean"], f"clean/0 is not in this folder ({alone})"),
            (["--severity", "2"], f"gaussian_rad/2, beam_del/2, background/2, translation/2 are not in this folder "
                                  f"({alone}): a partial pull of mini-c 0.1.0; it holds translation/1 (`{pull} "
                                  "--severity 2` adds them)")):
        res = runner.invoke(app, ["render", str(alone), "--out", str(tmp_path), *args], terminal_width=400)
        assert res.exit_code == 2 and msg in " ".join(res.output.split()), (args, res.output)
    res = runner.invoke(app, ["render", str(alone), "--out", str(tmp_path), "--corruption", "translation"],
                        terminal_width=400)  # what it holds is drawn, the rest named
    assert res.exit_code == 0 and (tmp_path / "000000_translation_1.png").is_file(), res.output
    assert f"note: left out: translation/2–5 are not in this folder ({alone})" in " ".join(res.output.split())


@pytest.fixture(scope="module")
def seg_build(tmp_path_factory, shared_ray):
    """A one-frame robo3d-semantickitti-c build of a coarse SemanticKITTI sequence (per-point labels)."""
    from bench_build.build.run import run_build
    from bench_build.sources.demo.semantickitti import write_semantickitti

    tmp = tmp_path_factory.mktemp("seg-build")
    src = write_semantickitti(tmp / "src", 1, azimuth_step_deg=0.36)
    res = run_build("robo3d-semantickitti-c", source=str(src), out=tmp / "out", workers=1, progress=False)
    assert res.ok
    return res.version_dir


def test_colour_by_semantic_class_shows_the_labels_each_corruption_carries(seg_build, built, tmp_path):
    """`--color-by semantic`: each point in the colour of its scored class (the recorded learning map), the
    legend naming the classes present; points a corruption adds are unlabelled (grey). A build without
    per-point labels is refused, naming the benchmarks that have them."""
    import json

    from PIL import Image

    from bench_build.render import legend_entries, read_views
    from bench_build.render.views import UNLABELLED_COLOR, semantic_classes, semantic_colors
    from bench_build.sources.semantickitti import LEARNING_MAP, TRAIN_CLASSES
    from bench_build.storage import LocalStore

    manifest = json.loads((seg_build / "manifest.json").read_text())
    lut, names = semantic_classes(manifest["source"])
    assert names == TRAIN_CLASSES and all(lut[k] == v for k, v in LEARNING_MAP.items())
    _, views = read_views(LocalStore(seg_build), manifest, semantic=(lut, names),
                          partitions=[("clean", 0), ("fog", 3)])
    clean, fog = views
    raw = np.fromfile(seg_build.parents[2] / "src/sequences/08/labels/000000.label", dtype="<u4") & 0xFFFF
    np.testing.assert_array_equal(clean.semantic, [LEARNING_MAP[int(r)] for r in raw])
    assert {names[c] for c in np.unique(clean.semantic)} >= {"car", "road", "sidewalk", "building"}
    scatter = fog.tags == PointTag.SCATTER_FOG
    assert scatter.any() and (fog.semantic[scatter] == 0).all()  # fog's added returns carry no class
    colors = semantic_colors(len(names))
    assert tuple(colors[0]) == UNLABELLED_COLOR and len({tuple(c) for c in colors[1:]}) == len(names) - 1
    entries = legend_entries([], [], color_by="semantic", semantic=[(1, "car"), (9, "road")])
    assert [(e.label, e.color) for e in entries] == [("car", tuple(colors[1])), ("road", tuple(colors[9]))]

    res = runner.invoke(app, ["render", str(seg_build), "--out", str(tmp_path), "--color-by", "semantic",
                              "--corruption", "clean"])
    assert res.exit_code == 0, res.output
    img = np.asarray(Image.open(next(tmp_path.glob("*_clean_0.png"))).convert("RGB"))
    assert _colour_px(img, colors[1]) > 20  # the car's points are drawn in the car's colour
    res = runner.invoke(app, ["render", str(seg_build), "--out", str(tmp_path / "s"), "--color-by", "semantic"])
    assert res.exit_code == 0, res.output
    sheet = np.asarray(Image.open(next((tmp_path / "s").glob("contact_sheet_*.png"))).convert("RGB"))
    assert _colour_px(sheet, colors[1]) > 20
    res = runner.invoke(app, ["render", str(built), "--out", str(tmp_path / "k"), "--color-by", "semantic"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "--color-by semantic needs per-point semantic labels" in said
    assert "robo3d-semantickitti-c" in said and not (tmp_path / "k").exists()


def test_a_scan_without_boxes_zooms_on_the_car_its_labels_find():
    """SemanticKITTI has no boxes: the zoom is on the car with the most points by instance id, or without ids on
    the largest 8-connected cluster of car-labelled points (not a smaller car, not a stray car point), its dashed
    box their bounding rectangle, so incomplete_echo's thinned car shows pink. Instance ids keep two cars parked
    nose to tail apart, where the cluster joins them. No labels, no car class or fewer than 5 car points: no
    zoom."""
    from bench_build.render import ZOOM_GONE, sheet_focus

    rng = np.random.default_rng(3)
    ground = np.c_[rng.uniform(-30, 30, (3000, 2)), np.full(3000, -1.7)]
    big = np.c_[rng.uniform(10.2, 13.8, 300), rng.uniform(-0.8, 0.8, 300), rng.uniform(-1.5, 0.0, 300)]
    small = np.c_[rng.uniform(-21, -19, 60), rng.uniform(5, 6, 60), rng.uniform(-1.5, 0.0, 60)]
    pts = np.r_[ground, big, small, [[25.0, 25.0, -1.0]]]
    sem = np.r_[np.full(3000, 2), np.ones(361, np.int64)]
    names = ("unlabeled", "car", "road")
    tags = np.zeros(len(pts), np.uint8)
    clean = View("clean", 0, pts, tags, None, False, sem, names)
    extent = scene_extent(pts)
    focus = sheet_focus(clean, extent)
    assert focus is not None and focus.of == "cluster:car" and focus.outline[0] == "car"
    lo, hi = big[:, :2].min(axis=0), big[:, :2].max(axis=0)
    np.testing.assert_allclose(focus.outline[1].min(axis=0), lo)
    np.testing.assert_allclose(focus.outline[1].max(axis=0), hi)
    x0, x1, y0, y1 = focus.extent
    assert x0 < lo[0] and x1 > hi[0] and y0 < lo[1] and y1 > hi[1] and x1 - x0 < 7
    thinned = np.delete(pts, np.arange(3000, 3300)[::2], axis=0)  # half the big car's points gone
    c, echo = sheet_panels([clean, View("incomplete_echo", 1, thinned, tags[:len(thinned)], None, False)])
    assert c.zoom_of == echo.zoom_of == "cluster:car" and echo.zoom == focus.extent
    assert _colour_px(c.inset, ZOOM_GONE) == 0 and _colour_px(echo.inset, ZOOM_GONE) > 100
    assert sheet_focus(View("clean", 0, pts, tags, None, False), extent) is None  # no labels
    assert sheet_focus(View("clean", 0, pts, tags, None, False, sem, ("unlabeled", "truck", "road")), extent) is None
    few = np.where(np.arange(len(pts)) < 3004, sem, 2)  # 4 car points
    assert sheet_focus(View("clean", 0, pts, tags, None, False, few, names), extent) is None
    # two cars 0.3 m apart (one cluster) with instance ids 7 (200 points, the rear) and 9 (100): the zoom is on car 7
    rear = np.c_[rng.uniform(10.0, 14.0, 200), rng.uniform(-0.8, 0.8, 200), np.full(200, -1.0)]
    front = np.c_[rng.uniform(14.3, 18.3, 100), rng.uniform(-0.8, 0.8, 100), np.full(100, -1.0)]
    pts2 = np.r_[ground, rear, front]
    sem2, ids = np.r_[np.full(3000, 2), np.ones(300, np.int64)], np.r_[np.zeros(3000), np.full(200, 7), np.full(100, 9)]
    t2 = np.zeros(len(pts2), np.uint8)
    joined = sheet_focus(View("clean", 0, pts2, t2, None, False, sem2, names), scene_extent(pts2))
    by_id = sheet_focus(View("clean", 0, pts2, t2, None, False, sem2, names, ids.astype(np.uint32)), scene_extent(pts2))
    assert joined.of == "cluster:car" and joined.outline[1][:, 0].max() > 18
    assert by_id.of == "instance:car" and by_id.outline[1][:, 0].max() < 14.01
    np.testing.assert_allclose(by_id.outline[1].min(axis=0), rear[:, :2].min(axis=0))


def test_a_segmentation_build_zooms_on_a_labelled_car_and_its_card_says_so(seg_build, tmp_path):
    """robo3d-semantickitti-c: the build's sheet (painted by its tasks from the frames' labels) has the car
    zoom, equals the one `render` reads back from the files, and the card says what the inset shows."""
    import json

    from PIL import Image

    from bench_build.render import ZOOM_GONE, read_views
    from bench_build.storage import LocalStore

    manifest = json.loads((seg_build / "manifest.json").read_text())
    _, views = read_views(LocalStore(seg_build), manifest, partitions=[("clean", 0), ("incomplete_echo", 3)])
    clean, echo = sheet_panels(views)
    assert clean.zoom_of == "instance:car" and _colour_px(echo.inset, ZOOM_GONE) > 20
    res = runner.invoke(app, ["render", str(seg_build), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    sheet = seg_build / "renders" / "contact_sheet.png"
    assert next(tmp_path.glob("contact_sheet_*.png")).read_bytes() == sheet.read_bytes()
    assert _colour_px(np.asarray(Image.open(sheet).convert("RGB")), ZOOM_GONE) > 100
    card = " ".join((seg_build / "README.md").read_text().split())
    assert ("an inset zoomed on the `car` with the most points, found by its semantic and instance labels since "
            "the scans have no boxes (grey unchanged, black moved or added, pink removed; dashed: its clean "
            "bounding box)") in card


def test_semantic_colours_differ_from_each_other_and_from_the_boxes_and_the_zoom():
    """tab20's cyan, olive and brown were semantic classes' colours (SemanticKITTI's road, Waymo's traffic light
    and bicyclist) and the Car, Pedestrian and Cyclist boxes' too, and tab20b's light reds sat beside tab20's: a
    road drawn in the Car box's colour, a sidewalk like a pole. Every class of the largest set (Waymo's 22) now
    differs from every other and from what else a semantic picture draws (box outlines, the zoom's points,
    unlabelled grey, the white background) by a ΔE a reader sees at a glance, and the palette is the same
    each time."""
    from bench_build.render.views import cielab, reserved_colors, semantic_colors
    from bench_build.sources.waymo import SEG_CLASSES

    colors = semantic_colors(len(SEG_CLASSES))
    lab = cielab(colors[1:])
    apart = np.linalg.norm(lab[:, None] - lab[None], axis=2) + np.eye(len(lab)) * 1e9
    assert apart.min() >= 20, apart.min()
    assert np.linalg.norm(lab[:, None] - cielab(reserved_colors())[None], axis=2).min() >= 20
    assert (cielab(colors[1:])[:, 0] <= 80).all()  # none too pale to see as one-pixel points on white
    assert np.array_equal(colors, semantic_colors(len(SEG_CLASSES)))


@pytest.mark.parametrize("n_classes, zoom", [(23, False), (23, True), (40, True)])
def test_a_long_semantic_legend_stays_in_the_figure_and_overlaps_nothing(n_classes, zoom):
    """By semantic class a scene's legend lists its classes, its boxes and the zoom's colours: Waymo's 23 with
    three box classes made ≈ 30 entries in one column, and without a zoom (a partial pull without clean) it ran
    over the note under it; more made it taller than the figure. It now takes as many rows as its column holds
    above the note, then further columns (the figure wider by what they need), and lists only the classes of
    the points drawn: the scene, the inset, its title, the legend and the note overlap nothing and stay in the
    figure, the same bytes each time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from bench_build.render import save_png, sheet_focus, view_figure

    rng = np.random.default_rng(7)
    pts, boxes, _ = _car_scene(rng)
    boxes = Boxes(center=np.r_[boxes.center, [[5.0, -12.0, -0.9], [-8.0, 6.0, -0.9]]],
                  dims=np.r_[boxes.dims, [[1.8, 0.6, 1.7], [6.0, 2.5, 2.5]]], heading=np.zeros(4),
                  cls=np.array(["Car", "Pedestrian", "Cyclist", "Vehicle"], dtype=object), truncated=np.zeros(4),
                  occluded=np.zeros(4, np.int64), alpha=np.zeros(4), bbox2d=np.zeros((4, 4)))
    names = (*(f"class_{i}" for i in range(n_classes)), "far_away")
    semantic = np.arange(len(pts)) % n_classes
    pts = np.r_[pts, [[500.0, 500.0, 0.0]]]  # the one point of "far_away" lies outside the picture
    semantic = np.r_[semantic, n_classes]
    view = View("fog", 3, pts, np.zeros(len(pts), np.uint8), boxes, False, semantic, names)
    extent = scene_extent(pts[:-1])
    focus = sheet_focus(view, extent) if zoom else None
    note = None if zoom else "no clean partition here: the zoom compares with clean, so there is none (pull clean)"
    fig, entries = view_figure(view, frame_id="000000", extent=extent, focus=focus, color_by="semantic", note=note)
    labels = [e.label for e in entries]
    assert labels[:n_classes] == list(names[:n_classes]) and "far_away" not in labels
    assert n_classes not in dict(make_panel(view, extent=extent, color_by="semantic").classes)  # nor the sheet's
    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    parts = {"scene": ax.get_tightbbox(r, bbox_extra_artists=[]), "legend": fig.legends[0].get_window_extent(r)}
    if zoom:
        (ins,) = ax.child_axes
        parts |= {"zoom": ins.get_window_extent(r), "zoom title": ins.title.get_window_extent(r)}
    else:
        (said,) = fig.texts
        parts["note"] = said.get_window_extent(r)
    _apart_and_inside(fig, parts)
    again, _ = view_figure(view, frame_id="000000", extent=extent, focus=focus, color_by="semantic", note=note)
    assert save_png(fig) == save_png(again)


def test_the_sheet_legend_follows_its_heading_without_a_gap():
    """The legend's first entry was placed 7 px per character of "colour: point tag · ", a guess that left a
    gap of ≈ 40 px after the heading; it is placed from the heading's measured width now."""
    rng = np.random.default_rng(2)
    pts, boxes, _ = _car_scene(rng)
    panels = sheet_panels([View("clean", 0, pts, np.zeros(len(pts), np.uint8), boxes, False)])
    image = sheet_image(panels, frame_id="f")
    ink = np.flatnonzero((image[2:16, :300] < 160).any(axis=(0, 2)))  # the legend's first line, its first 300 px
    gaps = np.diff(ink) - 1
    assert ink[0] < 12 and gaps.max() <= 14, gaps.max()  # letters, the heading's "·", then the first swatch


def test_boxes_of_nuscenes_and_waymo_take_the_colours_of_the_kitti_classes_they_are():
    """nuScenes' categories (`vehicle.car`, `human.pedestrian.adult`) and Waymo's `Vehicle` matched none of the
    colour table's KITTI names: every box of robo3d-nuscenes-c and every vehicle of robo3d-wod-c was drawn dark grey
    as "other classes". They take the colour of the class they are, and the legend names them as the data does."""
    from bench_build.render import BOX_COLORS, OTHER_BOX, legend_entries
    from bench_build.render.panels import box_color

    assert box_color("vehicle.car") == box_color("Vehicle") == box_color("Car") == BOX_COLORS["Car"]
    assert box_color("human.pedestrian.child") == box_color("Pedestrian") == BOX_COLORS["Pedestrian"]
    assert box_color("vehicle.bicycle") == box_color("Cyclist") == BOX_COLORS["Cyclist"]
    assert box_color("vehicle.truck") == box_color("Sign") == box_color("Van") == OTHER_BOX
    boxes = [(e.label, e.color) for e in legend_entries([], ["vehicle.car", "human.pedestrian.adult", "vehicle.truck",
                                                             "human.pedestrian.child", "movable_object.barrier"])]
    rgb = {name: tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)) for name, c in BOX_COLORS.items()}
    assert boxes == [("vehicle.car", rgb["Car"]), ("human.pedestrian.*", rgb["Pedestrian"]),
                     ("other classes", tuple(int(OTHER_BOX[i:i + 2], 16) / 255 for i in (1, 3, 5)))]
    assert [e.label for e in legend_entries([], ["Vehicle", "Pedestrian", "Sign"])] == [
        "Vehicle", "Pedestrian", "other classes"]
    assert [e.label for e in legend_entries([], ["Car", "Van", "DontCare"])] == ["Car", "other classes"]

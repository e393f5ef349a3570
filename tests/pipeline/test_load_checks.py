"""Refused at load, before any work (issue 29): unsafe names and oversized recipes, unsafe frame ids from a
split list or a source's listing, and a damaged ledger (an unreadable shard entry is rebuilt, an unreadable
run.json is a one-line error naming it and the remedy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.manifest import verify_version


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("edit", "message"), [
    (("[corruptions.beam_del]", '[corruptions."a/b"]'), "[corruptions] name 'a/b' contains '/'"),
    (("[corruptions.beam_del]", '[corruptions."../x"]'), "[corruptions] name '../x' contains '..'"),
    (("[corruptions.beam_del]", '[corruptions."a=b"]'), "[corruptions] name 'a=b' contains '='"),
    (("[corruptions.beam_del]", '[corruptions."a\\u001bb"]'), "name 'a\\x1bb' contains U+001B"),
    (("severities = 5", "severities = 10000"), "[benchmark] severities = 10000 is more than 20"),
    (("sigma = [0.04, 0.06, 0.08, 0.10, 0.12]",
      "sigma = [0.04, 0.06, 0.08, 0.10, 0.12]\n[corruptions.fog]\nstage = \"fog\"\nbeta = 0.01\n"
      f"table_alphas = [{', '.join(['0.01'] * 300)}]"),
     "corruption 'fog': parameter 'table_alphas' is a list of 300 values (at most 256)"),
])
def test_unsafe_or_oversized_recipe_exits_2_before_any_work(small_recipe, tmp_path, edit, message):
    small_recipe.write_text(small_recipe.read_text().replace(*edit))
    out = tmp_path / "o"
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--out", str(out), "--no-progress"])
    assert run.exit_code == 2, run.output
    flat = _flat(run.output)
    assert f"error: {small_recipe}:" in flat and message in flat, run.output
    assert not out.exists()  # refused before the output (or Ray) was touched


def test_unsafe_split_list_id_exits_2_naming_the_split_file(small_recipe, demo_kitti, tmp_path):
    listing = demo_kitti / "ImageSets" / "val.txt"
    listing.write_text("000000\n../../etc/passwd\n000001\n")
    out = tmp_path / "o"
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--split", "val",
                                   "--out", str(out), "--no-progress"])
    assert run.exit_code == 2, run.output
    assert f"error: {listing}: line 2: frame id '../../etc/passwd' contains '..'" in _flat(run.output), run.output
    assert not out.exists()
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--split", "../../val",
                                   "--out", str(out), "--no-progress"])
    assert run.exit_code == 2 and "ImageSets: split '../../val' contains '..'" in _flat(run.output), run.output
    listing.write_bytes(b"000000\n\xff\xfe\n")
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--split", "val",
                                   "--out", str(out), "--no-progress"])
    assert run.exit_code == 2 and f"{listing}: split list is not UTF-8 text" in _flat(run.output), run.output


def test_every_source_listing_is_checked(tmp_path):
    """Any source's ids (not only split lists) pass the frame-id rule before a build plans its shards."""
    from bench_build.sources import SourceError, checked_frame_ids

    class Listing:  # a reader whose ids come from its data (nuScenes tokens, Waymo file stems, …)
        kind = "stub"
        root = tmp_path

    ok = ["test/00001", "SN1/test/shapenet/02691156/abc"]
    assert checked_frame_ids(Listing(), ok) == ok
    for bad, why in (("a/../../x", "has a part '..'"), ("seg=1", "contains '='"), ("a\nb", "U+000A"),
                     (" ", "is only whitespace")):
        with pytest.raises(SourceError, match=rf"^{tmp_path}: frame id .* {__import__('re').escape(why)}"):
            checked_frame_ids(Listing(), [*ok, bad])


def test_unreadable_ledger_entries_are_rebuilt_and_a_bad_run_json_is_refused(small_recipe, demo_kitti, tmp_path,
                                                                             shared_ray, capfd):
    from bench_build.build.ledger import Ledger, LedgerUnreadable
    from bench_build.build.run import run_build

    out = tmp_path / "out"

    def build():
        return run_build(str(small_recipe), source=str(demo_kitti), out=out, max_frames=2, frames_per_shard=1,
                         progress=False)

    first = build()
    assert first.ok and sorted(first.shards_built) == ["part-00000-of-00002", "part-00001-of-00002"]
    version = Path(first.version_dir)
    data = {p: p.read_bytes() for p in (version / "data").rglob("*.parquet")}
    entries = version / "_ledger" / "shards"
    empty, cut = entries / "part-00000-of-00002.json", entries / "part-00001-of-00002.json"
    empty.write_text("")  # a write the disk filled up under
    cut.write_text(cut.read_text()[:40])  # a copy that stopped
    capfd.readouterr()

    second = build()
    err = _flat(capfd.readouterr().err)
    assert second.ok and sorted(second.shards_built) == ["part-00000-of-00002", "part-00001-of-00002"], second
    assert f"ledger entry {empty} is unreadable (Expecting value: line 1 column 1 (char 0)); its shard will be " \
           "rebuilt" in err, err
    assert f"ledger entry {cut} is unreadable (" in err, err
    assert {p: p.read_bytes() for p in (version / "data").rglob("*.parquet")} == data  # rebuilt byte-identical
    assert json.loads(empty.read_text())["status"] == "done" and verify_version(version).ok

    run_json = version / "_ledger" / "run.json"
    run_json.write_text(run_json.read_text()[:100])
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out),
                                   "--max-frames", "2", "--frames-per-shard", "1", "--no-progress"])
    assert run.exit_code == 2, run.output
    flat = _flat(run.output)
    assert f"error: ledger file {run_json} is unreadable (" in flat and "--overwrite" in flat, run.output
    assert {p: p.read_bytes() for p in (version / "data").rglob("*.parquet")} == data  # nothing touched
    status = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out)])
    assert status.exit_code == 2 and f"ledger file {run_json} is unreadable" in _flat(status.output), status.output
    # --overwrite starts over: begin() clears the damaged ledger instead of reading it
    ledger = Ledger(version)
    with pytest.raises(LedgerUnreadable):
        ledger.begin({"fingerprint": "x"})
    ledger.begin({"fingerprint": "x"}, overwrite=True)
    assert json.loads(run_json.read_text()) == {"fingerprint": "x"} and not (version / "data").exists()



# -- a split the source format does not have (`ReaderInfo.split_problem`) -------------------------------------------


@pytest.mark.parametrize(("source", "name", "takes"), [
    ("semantickitti", "SemanticKITTI", "val, train, test or sequence numbers like 08,09"),
    ("wads", "WADS", "all or sequence numbers like 11,36"),
    ("nuscenes", "nuScenes",
     "VERSION:SPLIT or a devkit split: mini_train, mini_val, test, train, train_detect, train_track, val"),
    ("modelnet40", "ModelNet40", "train, test or all"),
    ("scanobjectnn", "ScanObjectNN", "training, test or all"),
    ("shapenet", "ShapeNetCore", "train, val, test or all"),
])
def test_a_split_the_format_has_not_is_refused_naming_the_recipe_and_its_splits(tmp_path, monkeypatch, source, name,
                                                                                  takes):
    from bench_build.manifests.recipe import RecipeError, load_recipe
    from bench_build.sources import open_source

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "r.toml"
    path.write_text(f'[benchmark]\nname = "r"\nversion = "1"\nseed = 1\nsource = "{source}"\nsplit = "trainig"\n'
                    "severities = 0\n")
    with pytest.raises(RecipeError) as e:
        open_source(load_recipe(path), None)
    assert str(e.value) == f"{path}: [benchmark] split 'trainig' is not a {name} split (it takes {takes})"
    assert not (tmp_path / "cache").exists()  # refused before any demo data was generated


def test_3dos_takes_no_split(tmp_path, monkeypatch):
    from bench_build.manifests.recipe import RecipeError, builtin_recipes, load_recipe
    from bench_build.sources import open_source

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "r.toml"
    path.write_text(builtin_recipes()["3dos"].read_text().replace('source = "3dos"', 'source = "3dos"\nsplit = "test"'))
    with pytest.raises(RecipeError, match=r"\[benchmark\] split 'test' is not taken: 3DOS's tracks fix the split"):
        open_source(load_recipe(path), None)
    assert not (tmp_path / "cache").exists()


def test_a_kitti_split_is_one_of_the_datas_imagesets_lists(small_recipe, demo_kitti, tmp_path, monkeypatch):
    """KITTI's demo is read whole whatever the split, so `split = "trainig"` built every frame of it; on real data
    the typo failed only when the frames were listed, naming neither the recipe nor the lists there are."""
    import bench_build.sources as sources
    from bench_build.errors import UsageError
    from bench_build.manifests.recipe import load_recipe
    from bench_build.sources import open_source

    monkeypatch.setattr(sources, "ensure_demo_dataset", lambda *a, **k: demo_kitti)  # the demo: these frames
    text = small_recipe.read_text()
    small_recipe.write_text(text.replace('source = "kitti"\n', 'source = "kitti"\nsplit = "trainig"\n'))
    out = tmp_path / "o"
    run = CliRunner().invoke(app, ["run", str(small_recipe), "--out", str(out), "--no-progress"])
    assert run.exit_code == 2, run.output
    assert (f"error: {small_recipe}: [benchmark] split 'trainig' is not a KITTI split of {demo_kitti}: it takes "
            "training, testing or an ImageSets list (train, trainval, val)") in _flat(run.output), run.output
    assert not out.exists()
    small_recipe.write_text(text.replace('source = "kitti"\n', 'source = "kitti"\nsplit = "val"\n'))
    recipe = load_recipe(small_recipe)
    with pytest.raises(UsageError, match=r"^--split 'vall' is not a KITTI split of .*\(train, trainval, val\)$"):
        open_source(recipe, demo_kitti, split="vall")
    assert open_source(recipe, None).describe()["split"] == "training"  # the demo: every frame, as before
    listed = sorted((demo_kitti / "ImageSets" / "val.txt").read_text().split())
    assert open_source(recipe, demo_kitti).list_frames() == listed


# -- a run.json or task entry edited by hand, shard files deleted by hand ----------------------------------------------


def _copied_build(mini_build: Path, tmp_path: Path) -> Path:
    """A private copy of the finished 2-shard mini build: OUT (its version is OUT/mini-c/0.1.0)."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(mini_build, out / "mini-c" / "0.1.0")
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda info: {}, "no 'fingerprint'"),
    (lambda info: {**info, "fingerprint": None}, "'fingerprint' is null, not a string"),
    (lambda info: {**info, "frames": 4}, "'frames' is 4, not a list of frame ids"),
    (lambda info: {**info, "frames": "000000"}, "'frames' is a string, not a list of frame ids"),
    (lambda info: {k: v for k, v in info.items() if k != "frames_per_shard"}, "no 'frames_per_shard'"),
    (lambda info: {**info, "frames_per_shard": "2"}, "'frames_per_shard' is a string, not a whole number ≥ 1"),
    (lambda info: {**info, "frames_per_shard": 0}, "'frames_per_shard' is 0, not a whole number ≥ 1"),
    (lambda info: {k: v for k, v in info.items() if k != "recipe"}, "no 'recipe'"),
    (lambda info: {**info, "recipe": {**info["recipe"], "severities": "5"}},
     "'recipe.severities' is a string, not a whole number ≥ 0"),
    (lambda info: {**info, "task_groups": [["clean", 0]]},
     "'task_groups' is a list of other values, not a list of task groups, each a list of [corruption, severity] "
     "pairs"),
    (lambda info: {**info, "task_groups": {"0": []}}, "'task_groups' is an object, not a list of task groups"),
    (lambda info: {**info, "numeric_profile": "pinned"}, "'numeric_profile' is a string, not an object"),
])
def test_status_names_the_key_of_a_hand_edited_run_json(mini_build, small_recipe, tmp_path, edit, problem):
    """A run.json edited by hand or cut short to another JSON object (`{}`, `frames` a number or a string, no
    `recipe`, `task_groups` of another shape) gave a KeyError or TypeError traceback: one line naming the file
    and the key, exit 2, nothing written."""
    out = _copied_build(mini_build, tmp_path)
    run_json = out / "mini-c" / "0.1.0" / "_ledger" / "run.json"
    run_json.write_text(json.dumps(edit(json.loads(run_json.read_text()))))
    before = _tree(out)
    for args in (["status", str(small_recipe), "--out", str(out)], ["status", str(small_recipe), "--out", str(out),
                                                                     "--json"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and _flat(lines[0]).startswith(f"error: ledger file {run_json} is unreadable "
                                                              f"({problem}"), res.output
        assert "--overwrite" in lines[0]
    assert _tree(out) == before


@pytest.mark.parametrize(("edit", "written_again"), [
    (lambda info: {**info, "frames": 4}, True),  # only `status` reads it: `run` writes it from its own options
    (lambda info: {k: v for k, v in info.items() if k != "recipe"}, True),
    (lambda info: {k: v for k, v in info.items() if k != "fingerprint"}, False),  # what `run` reads: refused
    (lambda info: {**info, "task_groups": 7}, False),
    (lambda info: {**info, "numeric_profile": []}, False),
])
def test_run_on_a_hand_edited_run_json_resumes_or_refuses_naming_the_key(mini_build, small_recipe,
                                                                         demo_kitti_master, tmp_path, edit,
                                                                         written_again):
    """`run` crashed on a run.json whose fingerprint, task groups or numeric profile was missing or of another
    type (KeyError, TypeError, AttributeError). Those are refused in one line naming the key (exit 2, nothing
    written); a key only `status` reads is written again by `run`, whose fingerprint names the same build."""
    out = _copied_build(mini_build, tmp_path)
    run_json = out / "mini-c" / "0.1.0" / "_ledger" / "run.json"
    good = json.loads(run_json.read_text())
    run_json.write_text(json.dumps(edit(good)))
    before = _tree(out)
    res = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti_master), "--out", str(out),
                                   "--max-frames", "4", "--frames-per-shard", "2", "--no-progress"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    if written_again:
        assert res.exit_code == 0 and "nothing to build" in res.output, res.output
        assert json.loads(run_json.read_text()) == good
        assert CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out)]).exit_code == 0
    else:
        assert res.exit_code == 2, res.output
        assert f"error: ledger file {run_json} is unreadable (" in _flat(res.output), res.output
        assert _tree(out) == before


@pytest.mark.parametrize(("entry", "edit", "problem"), [
    ("part-00001-of-00002.json", lambda e: {**e, "seconds": "3.2"}, "'seconds' is a string, not a number"),
    ("part-00001-of-00002.json", lambda e: {k: v for k, v in e.items() if k != "seconds"}, "no 'seconds'"),
    ("part-00001-of-00002.json", lambda e: {**e, "files": [{k: v for k, v in f.items() if k != "rows"}
                                                           for f in e["files"]]}, "no 'files[0].rows'"),
    ("part-00001-of-00002.json", lambda e: {**e, "sources": {"000002": {"velodyne/000002.bin": 7}}},
     "'sources' is an object, not an object of frames' source files (size, mtime_ns, sha256)"),
    ("part-00001-of-00002.failed.json", lambda e: {"status": "failed", "kind": "input"}, "no 'error'"),
])
def test_a_hand_edited_task_entry_is_named_and_its_task_counted_pending(mini_build, small_recipe, tmp_path, entry,
                                                                        edit, problem):
    """A done entry whose `seconds` was a string (or a file without `rows`, a failed entry without `error`) gave a
    TypeError or KeyError traceback in `status`. Such an entry is unreadable like a cut-short one: `status` names
    it and the key on stderr and counts its task pending, as `run` builds it again."""
    out = _copied_build(mini_build, tmp_path)
    shards = out / "mini-c" / "0.1.0" / "_ledger" / "shards"
    done = json.loads((shards / "part-00001-of-00002.json").read_text())
    (shards / entry).write_text(json.dumps(edit(done)))
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out)])
    assert res.exit_code == 0, res.output
    flat = _flat(res.output)
    assert (f"[bench-build] ledger entry {shards / entry} is unreadable ({problem}); its shard will be rebuilt"
            in flat), res.output
    assert "1/2 shards done, 0 failed, 1 pending" in flat, res.output


def test_status_says_which_done_tasks_lost_their_files_from_one_listing(mini_build, small_recipe, tmp_path,
                                                                          monkeypatch):
    """`status` counted a task done from its ledger entry alone: with its shard files deleted by hand it still said
    "2/2 done", while `run` checks them and builds the task again. A file missing or of another size is now said,
    task by task, from one listing of the version (no HEAD, no read per file: on s3:// one LIST request per 1,000
    objects)."""
    from bench_build.storage.local import LocalStore

    out = _copied_build(mini_build, tmp_path)
    version = out / "mini-c" / "0.1.0"
    gone = "data/corruption=beam_del/severity=2/part-00001-of-00002.parquet"
    (version / gone).unlink()
    calls: list[str] = []
    for name in ("list", "head", "sha256", "get"):
        real = getattr(LocalStore, name)
        monkeypatch.setattr(LocalStore, name, lambda self, *a, _n=name, _r=real, **k: calls.append(_n) or
                            _r(self, *a, **k))
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [_flat(line) for line in res.output.strip().splitlines()]
    assert "1/2 shards done, 0 failed, 1 pending; 42/84 examples" in lines[0], res.output
    assert lines[1:] == [f"to rebuild part-00001-of-00002: recorded done, but {gone} is missing; `run` builds it "
                         "again"], res.output
    assert calls.count("list") == 1 and "head" not in calls and "sha256" not in calls, calls
    monkeypatch.undo()
    data = version / "data" / "corruption=clean" / "severity=0" / "part-00000-of-00002.parquet"
    data.write_bytes(data.read_bytes()[:-1])
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out), "--json"])
    st = json.loads(res.output)
    assert (st["done"], st["pending"]) == (0, 2), st
    assert st["rebuild"] == {"part-00000-of-00002": f"{data.relative_to(version).as_posix()} has "
                                                    f"{data.stat().st_size} bytes, the ledger recorded "
                                                    f"{data.stat().st_size + 1}",
                             "part-00001-of-00002": f"{gone} is missing"}


def test_status_recheck_sha256_finds_a_same_size_change_that_the_listing_cannot(mini_build, small_recipe,
                                                                               tmp_path):
    """A shard whose bytes changed but not its size passed `status` as done (its one listing sees sizes only),
    while `run` re-hashes it and builds the task again: `status --recheck sha256` re-hashes every done task's files
    as `run` does and counts that task to rebuild; the default stays the cheap listing."""
    out = _copied_build(mini_build, tmp_path)
    version = out / "mini-c" / "0.1.0"
    rel = "data/corruption=beam_del/severity=1/part-00001-of-00002.parquet"
    body = bytearray((version / rel).read_bytes())
    body[len(body) // 2] ^= 0xFF
    (version / rel).unlink()  # a new file: the build's may share its inode with the fixture's
    (version / rel).write_bytes(bytes(body))
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out)])
    assert res.exit_code == 0 and "2/2 shards done" in _flat(res.output), res.output
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out), "--recheck", "sha256"])
    lines = [_flat(line) for line in res.output.strip().splitlines()]
    assert res.exit_code == 0 and "1/2 shards done, 0 failed, 1 pending" in lines[0], res.output
    assert lines[1:] == [f"to rebuild part-00001-of-00002: recorded done, but {rel} does not match its recorded "
                         "sha256; `run` builds it again"], res.output
    res = CliRunner().invoke(app, ["status", str(small_recipe), "--out", str(out), "--recheck", "md5"])
    assert res.exit_code == 2 and "--recheck" in res.output, res.output

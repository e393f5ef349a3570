"""Publishing, listing, pulling and verifying versions on a real S3 server (SeaweedFS), and building to s3://."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.build.run import run_build
from bench_build.cli import app
from bench_build.manifests.manifest import read_manifest, stable_view, verify_version
from bench_build.publish import publish_version, pull_version, verify_remote

runner = CliRunner()
FRAMES = 4  # 4 shards of 1 frame × 21 partitions = 84 Parquet files


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench_build.cli", *args]


def data_files(version_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(version_dir).as_posix(): p.read_bytes()
            for p in sorted(version_dir.rglob("*.parquet")) if "_ledger" not in p.parts}


def remote_objects(server, url: str) -> dict[str, bytes]:
    """key (relative to ``url``) → bytes of every object under an s3:// URL."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client, out = server.client(), {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def remote_keys(server, url: str) -> list[str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client, keys = server.client(), []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        keys += [o["Key"][len(prefix) + 1:] for o in page.get("Contents", [])]
    return keys


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_kitti_master) -> Path:
    """A local build of the small recipe (the reference every s3 result is compared with)."""
    from tests.conftest import SMALL_RECIPE

    tmp = tmp_path_factory.mktemp("built")
    recipe = tmp / "mini-c.toml"
    recipe.write_text(SMALL_RECIPE)
    res = run_build(str(recipe), source=str(demo_kitti_master), out=tmp / "out", workers=2, max_frames=FRAMES,
                    frames_per_shard=1, progress=False)
    assert res.ok
    return res.version_dir


def test_publish_versions_pull_round_trip(built, s3prefix, s3env, tmp_path):
    out = runner.invoke(app, ["publish", str(built), "--to", s3prefix, "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "uploaded 84 files" in out.output and "MB/s), 0 already there" in out.output
    assert "1 render; latest = 0.1.0" in out.output
    version_url = f"{s3prefix}/mini-c/0.1.0"
    keys = remote_keys(s3env, version_url)
    assert "manifest.json" in keys and "README.md" in keys
    assert not [k for k in keys if k.startswith("_ledger") or k.startswith("_publishing")]
    assert len([k for k in keys if k.endswith(".parquet")]) == 84

    out = runner.invoke(app, ["versions", f"{s3prefix}/mini-c"])
    assert out.exit_code == 0, out.output
    assert "0.1.0" in out.output and "latest" in out.output

    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--version", "0.1.0", "--out", str(tmp_path / "p"),
                              "--no-progress"])
    assert out.exit_code == 0, out.output
    pulled = tmp_path / "p" / "mini-c" / "0.1.0"
    assert data_files(pulled) == data_files(built)
    assert (pulled / "manifest.json").read_bytes() == (built / "manifest.json").read_bytes()
    assert (pulled / "README.md").read_bytes() == (built / "README.md").read_bytes()
    assert verify_version(pulled).ok
    assert runner.invoke(app, ["verify", version_url, "--no-progress"]).exit_code == 0

    # a partial pull of one partition (latest by default) is a verifiable version of its own
    part = pull_version(f"{s3prefix}/mini-c", tmp_path / "part", corruption="beam_del", severity=3, progress=False)
    assert part.ok and len(part.transferred) == FRAMES
    pdir = tmp_path / "part" / "mini-c" / "0.1.0"
    assert sorted(data_files(pdir)) == [f"data/corruption=beam_del/severity=3/part-0000{i}-of-00004.parquet"
                                        for i in range(FRAMES)]
    assert read_manifest(pdir)["partial"]["selections"] == [{"corruption": "beam_del", "severity": 3}]
    assert verify_version(pdir).ok
    said = runner.invoke(app, ["verify", str(pdir)])  # says it checked a part of the version, not all of it
    total = len(read_manifest(built)["shards"])
    assert said.exit_code == 0 and f"OK: {FRAMES} files verified (a partial pull: {FRAMES} of the version's " \
        f"{total})" in said.output, said.output
    # a second partial pull composes with the first: one manifest of the union, every file verified
    (pdir / "data/corruption=beam_del/severity=3/part-00001-of-00004.parquet").write_bytes(b"damaged")
    clean = pull_version(f"{s3prefix}/mini-c", tmp_path / "part", corruption="clean", progress=False)
    assert clean.ok and len(clean.transferred) == FRAMES + 1 and len(clean.skipped) == FRAMES - 1  # + the damaged
    merged = read_manifest(pdir)
    assert merged["partial"]["selections"] == [{"corruption": "beam_del", "severity": 3},
                                               {"corruption": "clean", "severity": None}]
    assert len(merged["shards"]) == 2 * FRAMES and verify_version(pdir).ok
    assert set(merged["counts"]["by_partition"]) == {"beam_del/3", "clean/0"}
    from bench_build.format.reader import open_version

    ds = open_version(pdir)  # both partitions read, neither as 0 examples
    assert len(list(ds.examples(corruption="beam_del", severity=3))) == FRAMES
    assert len(list(ds.examples(severity=0))) == FRAMES
    header = (pdir / "README.md").read_text().split("\n---\n")[0]  # HF configs: only what this copy holds
    assert 'config_name: "clean"' in header and 'config_name: "beam_del_3"' in header
    assert 'config_name: "beam_del_2"' not in header
    # the card's own licence (a demo build's is not its source's) and a note that the copy is partial
    built_header = (built / "README.md").read_text().split("\n---\n")[0]
    licence = [line for line in built_header.splitlines() if line.startswith("license: ")]
    assert licence and licence[0] in header.splitlines()
    body = (pdir / "README.md").read_text().split("\n---\n", 1)[1]
    assert body.count("> **A partial pull.** This folder holds 8 of the version's 84 files (2 partitions: "
                      "beam_del/3, clean/0)") == 1, body[:600]
    # a partial pull is not the version: publishing it (to another root) would commit 8 of 84 files, immutably,
    # as mini-c 0.1.0 and mark it latest
    out = runner.invoke(app, ["publish", str(pdir), "--to", f"{s3prefix}-copy", "--no-progress"])
    assert out.exit_code == 2 and f"a partial pull ({2 * FRAMES} of the version's {total} files)" in " ".join(
        out.output.split()), out.output
    assert not remote_keys(s3env, f"{s3prefix}-copy/mini-c/0.1.0")
    # pulling again downloads nothing
    again = pull_version(f"{s3prefix}/mini-c", tmp_path / "p", version="0.1.0", progress=False)
    assert again.ok and not again.transferred and len(again.skipped) == 84


def test_second_publish_refused_and_concurrent_publishes_have_one_winner(built, s3prefix, s3env):
    first = publish_version(built, s3prefix, progress=False)
    assert first.ok and first.latest == "0.1.0"
    out = runner.invoke(app, ["publish", str(built), "--to", s3prefix, "--no-progress"])
    assert out.exit_code == 2 and "already published" in out.output and "immutable" in out.output

    target = f"{s3prefix}/race"
    procs = [subprocess.Popen(_cli("publish", str(built), "--to", target, "--no-progress"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env={**os.environ}) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stdout.read().decode()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(text for code, text in results if code)
    assert "already published" in loser or "concurrent" in loser, loser
    assert verify_remote(f"{target}/mini-c/0.1.0", progress=False).ok
    info = json.loads(runner.invoke(app, ["versions", f"{target}/mini-c", "--json"]).output)
    assert [v["version"] for v in info["versions"]] == ["0.1.0"] and info["latest"] == "0.1.0"


def test_killed_publish_resumes_with_only_the_remainder(built, s3prefix, s3env):
    version_url = f"{s3prefix}/mini-c/0.1.0"
    proc = subprocess.Popen(_cli("publish", str(built), "--to", s3prefix, "--jobs", "1", "--no-progress"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            # list while the publisher is stopped, so a slow listing on a busy machine cannot let it finish
            os.killpg(proc.pid, signal.SIGSTOP)
            if len([k for k in remote_keys(s3env, version_url) if k.endswith(".parquet")]) >= 10:
                break
            os.killpg(proc.pid, signal.SIGCONT)
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        else:
            pytest.fail("publish never uploaded a shard")
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    present = [k for k in remote_keys(s3env, version_url) if k.endswith(".parquet")]
    assert 10 <= len(present) < 84, "the kill should land mid-publish"
    assert "manifest.json" not in remote_keys(s3env, version_url)  # readers see no version yet
    # `versions` shows it as incomplete and says how to finish it (the publish README says how to give it up)
    listing = runner.invoke(app, ["versions", f"{s3prefix}/mini-c"])
    assert listing.exit_code == 0 and "mini-c: no complete version" in listing.output
    assert "0.1.0  (incomplete: no manifest yet" in listing.output and "publish it again to finish it" in listing.output
    assert json.loads(runner.invoke(app, ["versions", f"{s3prefix}/mini-c", "--json"]).output)["incomplete"] == [
        "0.1.0"]

    resumed = publish_version(built, s3prefix, progress=False)
    assert resumed.ok and resumed.latest == "0.1.0"
    assert sorted(resumed.skipped) == sorted(present)
    assert len(resumed.transferred) == 84 - len(present)
    sizes = {s["path"]: s["bytes"] for s in read_manifest(built)["shards"]}
    assert resumed.transferred_bytes == sum(sizes[p] for p in resumed.transferred)
    assert verify_remote(version_url, progress=False).ok
    objects = remote_objects(s3env, version_url)
    assert {k: v for k, v in objects.items() if k.endswith(".parquet")} == data_files(built)


def test_tampered_remote_shard_fails_verify_and_pull(built, s3prefix, s3env, tmp_path):
    assert publish_version(built, s3prefix, progress=False).ok
    victim = "data/corruption=translation/severity=4/part-00002-of-00004.parquet"
    bucket, _, prefix = s3prefix.removeprefix("s3://").partition("/")
    key = f"{prefix}/mini-c/0.1.0/{victim}"
    client = s3env.client()
    raw = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    raw[len(raw) // 2] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(raw))  # same size, different bytes

    out = runner.invoke(app, ["verify", f"{s3prefix}/mini-c/0.1.0", "--no-progress"])
    assert out.exit_code == 1 and victim in out.output and "sha256" in out.output, out.output
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path), "--no-progress"])
    assert out.exit_code == 1 and victim in out.output and "sha256" in out.output, out.output
    pulled = tmp_path / "mini-c" / "0.1.0"
    assert not (pulled / "manifest.json").exists() and not (pulled / victim).exists()
    assert not list(pulled.rglob("*.part"))


def test_a_pulled_file_that_does_not_match_names_sizes_only_when_they_differ(built, tmp_path):
    """A same-size altered file read "sha256 mismatch (3079738 bytes, manifest says 3079738)"."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    version = tmp_path / "pub" / "mini-c" / "0.1.0"
    same, longer = (e["path"] for e in read_manifest(version)["shards"][:2])
    for rel, change in ((same, lambda b: b[:-1] + bytes([b[-1] ^ 0xFF])), (longer, lambda b: b + b"x")):
        body = change((version / rel).read_bytes())
        (version / rel).unlink()  # a new file: the published one may share its inode with the build's
        (version / rel).write_bytes(body)
    size = (built / longer).stat().st_size
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress"])
    lines = out.output.splitlines()
    assert out.exit_code == 1, out.output
    assert f"BAD {same}: sha256 mismatch: the published object is altered or corrupt; not kept" in lines, lines
    assert f"BAD {longer}: {size + 1} bytes, manifest says {size}: the published object is altered or corrupt; " \
        "not kept" in lines, lines


def test_materialize_of_a_version_stored_in_full_says_so(built, tmp_path):
    """`pull --materialize` of a version that is not compact-encoded rewrote nothing and said nothing."""
    assert read_manifest(built).get("encoding", "full") == "full"
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress", "--materialize"])
    text = " ".join(out.output.split())
    assert out.exit_code == 0, out.output
    assert (f"note: {tmp_path / 'pub' / 'mini-c' / '0.1.0'}: stored in full encoding already; --materialize has "
            "nothing to rewrite") in text, text
    pulled = tmp_path / "o" / "mini-c" / "0.1.0"
    assert (pulled / "manifest.json").read_bytes() == (built / "manifest.json").read_bytes()


def test_a_partial_pull_checks_corruption_and_severity_each_on_its_own(built, tmp_path):
    """``--severity 0`` selects the clean copy whatever the corruption: a corruption the version lacks was not
    refused with it (``--corruption beam_dle --severity 0`` pulled clean, exit 0), nor was ``--corruption clean``
    with a severity no clean partition has. Both are refused naming the partitions there are, nothing written."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    dataset, out = str(tmp_path / "pub" / "mini-c"), tmp_path / "o"
    has = "it has clean; gaussian_rad 1–5; beam_del 1–5; background 1–5; translation 1–5"
    for args, says in ((["--corruption", "beam_dle", "--severity", "0"],
                        "no partition matches --corruption beam_dle --severity 0; "),
                       (["--corruption", "clean", "--severity", "3"],
                        "no partition matches --corruption clean --severity 3 (clean is severity 0 only); ")):
        res = runner.invoke(app, ["pull", dataset, "--out", str(out), "--no-progress", *args])
        text = " ".join(res.output.split())
        assert res.exit_code == 2 and says + has in text, text
        assert not out.exists(), args
    # severity 0 of a corruption the version has is its clean copy, as the loaders read it
    res = runner.invoke(app, ["pull", dataset, "--out", str(out), "--no-progress", "--corruption", "beam_del",
                              "--severity", "0"])
    assert res.exit_code == 0, res.output
    assert {s["corruption"] for s in read_manifest(out / "mini-c" / "0.1.0")["shards"]} == {"clean"}


def test_repeating_a_partial_pull_records_its_selection_once(built, tmp_path):
    """Each pull into a partial copy appended its selection to ``partial.selections``: the same pull run again
    listed it twice (and `diff`'s note of the copy with it). Each selection is kept once, in the order of its first
    pull, also where an earlier pull recorded one twice; `verify` and the card read the copy as before."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    dataset, pdir = str(tmp_path / "pub" / "mini-c"), tmp_path / "o" / "mini-c" / "0.1.0"
    beam, clean = {"corruption": "beam_del", "severity": 3}, {"corruption": "clean", "severity": None}
    for c, s in (("beam_del", 3), ("beam_del", 3), ("clean", None), ("beam_del", 3)):
        assert pull_version(dataset, tmp_path / "o", corruption=c, severity=s, progress=False).ok
    manifest = read_manifest(pdir)
    assert manifest["partial"]["selections"] == [beam, clean]
    # a copy whose manifest lists one twice (an earlier bench-build's pulls): the next pull lists it once
    manifest["partial"]["selections"] = [beam, clean, beam]
    (pdir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    again = pull_version(dataset, tmp_path / "o", corruption="clean", progress=False)
    assert again.ok and not again.transferred
    assert read_manifest(pdir)["partial"]["selections"] == [beam, clean]
    said = runner.invoke(app, ["verify", str(pdir)])
    assert said.exit_code == 0 and f"OK: {2 * FRAMES} files verified (a partial pull: {2 * FRAMES} of the version's " \
        "84)" in said.output, said.output
    body = (pdir / "README.md").read_text().split("\n---\n", 1)[1]
    assert body.count("> **A partial pull.** This folder holds 8 of the version's 84 files (2 partitions: "
                      "beam_del/3, clean/0)") == 1, body[:600]


@pytest.mark.parametrize(("key", "value", "said"), [
    ("selections", "beam_del", "partial.selections 'beam_del' is not a list of objects"),
    ("selections", [["beam_del", 3]], "partial.selections [['beam_del', 3]] is not a list of objects"),
    ("partial", ["beam_del"], "partial ['beam_del'] is not an object"),
    ("materialized", "yes", "materialized 'yes' is not an object"),
])
def test_a_pull_into_a_copy_whose_partial_entry_was_edited_is_refused_in_one_line(built, tmp_path, key, value, said):
    """A pull into a partial copy composes with its manifest's ``partial.selections``: a hand-edited one that is not
    a list was a bare TypeError (``"beam_del" + [...]``), a ``partial`` or ``materialized`` that is not an object a
    bare AttributeError, and a list of other values was written into the new manifest, which readers then refuse.
    Each is refused before the pull starts, one line naming the manifest and the key, exit 2, nothing written."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    dataset, out = str(tmp_path / "pub" / "mini-c"), tmp_path / "o"
    assert pull_version(dataset, out, corruption="beam_del", severity=3, progress=False).ok
    pdir = out / "mini-c" / "0.1.0"
    manifest = read_manifest(pdir)
    if key == "selections":
        manifest["partial"]["selections"] = value
    else:
        manifest[key] = value
    (pdir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))

    def files() -> dict[str, bytes]:
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
                if p.is_file() and p.name != ".bench-build.lock"}

    before = files()
    res = runner.invoke(app, ["pull", dataset, "--out", str(out), "--no-progress", "--corruption", "clean"])
    said_all = " ".join(res.output.split())
    assert res.exit_code == 2 and not isinstance(res.exception, (TypeError, AttributeError)), res.output
    assert f"{pdir / 'manifest.json'}: {said}, which a pull into this folder composes with" in said_all, res.output
    assert said_all.endswith("nothing was written") and files() == before


@pytest.mark.parametrize("edit", ["drop_path", "sha_number", "not_object"])
def test_a_pull_into_a_copy_whose_shard_entry_was_edited_is_refused_in_one_line(built, tmp_path, edit):
    """The union with an earlier pull reads each of its manifest's entries: one without a path was a bare KeyError
    there. Such a copy is refused before anything is downloaded, one line naming its manifest and the entry."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    dataset, out = str(tmp_path / "pub" / "mini-c"), tmp_path / "o"
    assert pull_version(dataset, out, corruption="beam_del", severity=3, progress=False).ok
    pdir = out / "mini-c" / "0.1.0"
    manifest = read_manifest(pdir)
    entry = manifest["shards"][0]
    if edit == "drop_path":
        del entry["path"]
    elif edit == "sha_number":
        entry["sha256"] = 7
    else:
        manifest["shards"][0] = entry["path"]
    (pdir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
              if p.is_file() and p.name != ".bench-build.lock"}
    res = runner.invoke(app, ["pull", dataset, "--out", str(out), "--no-progress", "--corruption", "clean"])
    said_all = " ".join(res.output.split())
    assert res.exit_code == 2 and not isinstance(res.exception, (KeyError, TypeError)), res.output
    assert f"{pdir / 'manifest.json'}: malformed shards entry 0" in said_all, res.output
    assert "a pull into this folder composes with it" in said_all and said_all.endswith("nothing was written")
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".bench-build.lock"} == before



@pytest.mark.parametrize(("edit", "says"), [
    (lambda m: m.pop("dataset"), "no dataset"),
    (lambda m: m.__setitem__("version", "../0.1.0"), "version '../0.1.0' is not a safe name"),
])
def test_verify_in_place_of_a_manifest_without_its_names_checks_the_rest(built, s3prefix, s3env, edit, says):
    """`verify` of a local version reports a manifest without its ``dataset`` (or with a ``version`` no reader
    opens) as one problem, exit 1, and checks every shard; in place on S3 the same manifest stopped it before the
    first shard with exit 2, the code for a version that could not be checked at all."""
    assert publish_version(built, s3prefix, progress=False).ok
    manifest = json.loads((built / "manifest.json").read_text())
    edit(manifest)
    bucket, _, prefix = s3prefix.removeprefix("s3://").partition("/")
    s3env.client().put_object(Bucket=bucket, Key=f"{prefix}/mini-c/0.1.0/manifest.json",
                              Body=json.dumps(manifest).encode())
    out = runner.invoke(app, ["verify", f"{s3prefix}/mini-c/0.1.0", "--no-progress"])
    lines = out.output.strip().splitlines()
    assert out.exit_code == 1 and len(lines) == 2 and lines[0].startswith(f"BAD {says}"), out.output
    assert lines[1] == f"1 problem; {len(manifest['shards'])} listed files checked", out.output


@pytest.mark.parametrize("bad_path", ["../../escaped.parquet", "/tmp/escaped.parquet", "s3://other/x.parquet",
                                      "data/../../escaped.parquet"])
def test_pull_refuses_manifest_paths_that_escape(built, s3prefix, s3env, tmp_path, bad_path):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["shards"][3]["path"] = bad_path
    bucket, _, prefix = s3prefix.removeprefix("s3://").partition("/")
    s3env.client().put_object(Bucket=bucket, Key=f"{prefix}/mini-c/0.1.0/manifest.json",
                              Body=json.dumps(manifest).encode())
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--version", "0.1.0", "--out", str(tmp_path / "o"),
                              "--no-progress"])
    assert out.exit_code == 2, out.output
    assert "escape" in out.output and bad_path in out.output
    assert not (tmp_path / "o").exists() and not list(tmp_path.parent.rglob("escaped.parquet"))
    out = runner.invoke(app, ["verify", f"{s3prefix}/mini-c/0.1.0", "--no-progress"])
    assert out.exit_code == 2 and "escape" in out.output


def test_wrong_credentials_fail_clearly_and_write_nothing(built, s3prefix, s3env, small_recipe, demo_kitti_master,
                                                          tmp_path, monkeypatch):
    wrong = "WRONG-" + s3env.secret_key[::-1]

    def check(code: int, text: str, what) -> None:
        assert code == 2, (what, text)
        assert "denied" in text and "credentials" in text, (what, text)
        assert wrong not in text and s3env.secret_key not in text, (what, text)

    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": wrong}
    for args in (["publish", str(built), "--to", s3prefix, "--no-progress"],  # whole processes: every log line
                 ["run", str(small_recipe), "--source", str(demo_kitti_master), "--out", s3prefix, "--max-frames",
                  "1", "--workers", "1", "--no-progress"]):
        proc = subprocess.run(_cli(*args), capture_output=True, text=True, env=env, timeout=120)
        check(proc.returncode, proc.stdout + proc.stderr, args)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    for args in (["versions", f"{s3prefix}/mini-c"],
                 ["pull", f"{s3prefix}/mini-c", "--version", "0.1.0", "--out", str(tmp_path / "o"), "--no-progress"],
                 ["verify", f"{s3prefix}/mini-c/0.1.0", "--no-progress"]):
        out = runner.invoke(app, args)
        check(out.exit_code, out.output, args)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3env.secret_key)
    assert remote_keys(s3env, s3prefix) == []
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["--endpoint-url", "AWS_ENDPOINT_URL"])
def test_an_endpoint_that_is_not_a_url_is_one_line_naming_where_it_was_set(built, s3prefix, s3env, tmp_path,
                                                                           monkeypatch, where):
    """An endpoint without a scheme (`--endpoint-url 127.0.0.1:9000`) was a botocore ValueError traceback."""
    flag = ["--endpoint-url", "127.0.0.1:9000"] if where == "--endpoint-url" else []
    if not flag:
        monkeypatch.setenv("AWS_ENDPOINT_URL", "127.0.0.1:9000")
    said = "--endpoint-url 127.0.0.1:9000" if flag else "AWS_ENDPOINT_URL=127.0.0.1:9000"
    for args in (["publish", str(built), "--to", s3prefix, "--no-progress"], ["versions", f"{s3prefix}/mini-c"],
                 ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path / "o"), "--no-progress"],
                 ["verify", f"{s3prefix}/mini-c/0.1.0", "--no-progress"]):
        out = runner.invoke(app, [*args, *flag])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, (args, out.output)
        assert " ".join(out.output.split()) == f"error: {said}: not a valid endpoint URL; expected " \
                                               "http(s)://host[:port]", (args, out.output)
    assert remote_keys(s3env, s3prefix) == []
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("where", ["--profile", "AWS_PROFILE"])
def test_an_unknown_profile_is_one_line_naming_the_flag_and_the_config_file(tmp_path, monkeypatch, where):
    """It read "AWS profile not found: The config profile (nope) could not be found", naming neither."""
    for name in ("config", "credentials"):
        (tmp_path / name).write_text("[default]\nregion = us-east-1\n" if name == "config" else "")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    args = ["--profile", "nope"] if where == "--profile" else []
    if where == "AWS_PROFILE":
        monkeypatch.setenv("AWS_PROFILE", "nope")
    for command in (["versions", "s3://bench/x/mini-c"], ["pull", "s3://bench/x/mini-c", "--out", str(tmp_path / "o")]):
        out = runner.invoke(app, [*command, *args])
        line = " ".join(out.output.split())
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        assert line.startswith(f"error: {where}{' ' if where == '--profile' else '='}nope: no such AWS profile in "
                               f"{tmp_path / 'config'} (nor in {tmp_path / 'credentials'})"), line
    assert not (tmp_path / "o").exists()


def _mid_upload(keys: list[str]) -> bool:
    """A shard is recorded and another one has some of its objects but no ledger entry: that shard's
    files are being written and uploaded right now."""
    recorded = {Path(k).stem for k in keys if k.startswith("_ledger/shards/") and not k.endswith(".failed.json")}
    started = {Path(k).stem.split("-of-")[0] for k in keys if k.endswith(".parquet")}
    return bool(recorded) and bool(started - {r.split("-of-")[0] for r in recorded})


def test_s3_build_resumes_after_sigkill_like_a_local_build(built, s3prefix, s3env, small_recipe, demo_kitti_master,
                                                          monkeypatch):
    """Uploads overlap compute (the default, set explicitly here): killed while a shard's files are uploading,
    the run leaves no recorded shard without all its objects, and resuming gives the clean build's bytes."""
    monkeypatch.setenv("BENCH_BUILD_OVERLAP_UPLOADS", "1")  # the subprocess, its Ray workers and the resume
    common = ["--source", str(demo_kitti_master), "--workers", "1", "--frames-per-shard", "1", "--max-frames",
              str(FRAMES), "--no-progress"]
    version_url = f"{s3prefix}/mini-c/0.1.0"
    proc = subprocess.Popen(_cli("run", str(small_recipe), "--out", s3prefix, *common), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            if _mid_upload(remote_keys(s3env, version_url)):
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        else:
            pytest.fail("build never got to a second shard's uploads")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its Ray workers and raylet die mid-build
    finally:
        proc.wait(timeout=30)
        time.sleep(1.0)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    after_kill = remote_objects(s3env, version_url)
    done_before = [k for k in after_kill if k.startswith("_ledger/shards/")]
    assert 1 <= len(done_before) < FRAMES, "the kill should land mid-build"
    assert "manifest.json" not in after_kill
    for k in done_before:  # every recorded shard has all its objects, whole (what resume trusts)
        for f in json.loads(after_kill[k])["files"]:
            assert f["path"] in after_kill, f"{k} recorded but {f['path']} missing"
            digest = hashlib.sha256(after_kill[f["path"]]).hexdigest()
            assert digest == f["sha256"], f"{k} recorded, {f['path']} partial"

    resumed = run_build(str(small_recipe), source=str(demo_kitti_master), out=s3prefix, workers=1,
                        max_frames=FRAMES, frames_per_shard=1, progress=False)
    assert resumed.ok and resumed.version_dir == version_url
    # No shard recorded before the kill is built again. A Ray worker outside the driver's process group can
    # still record the shard it was finishing after the listing above; the resume rightly skips that one too.
    done_names = {Path(k).stem for k in done_before}
    assert not done_names & set(resumed.shards_built)
    assert resumed.shards_skipped >= len(done_before)
    assert resumed.shards_skipped + len(resumed.shards_built) == resumed.shards_total
    objects = remote_objects(s3env, version_url)
    assert {k: v for k, v in objects.items() if k.endswith(".parquet")} == data_files(built)
    manifest = json.loads(objects["manifest.json"])
    assert stable_view(manifest) == stable_view(read_manifest(built))
    for name in ("manifest.json", "README.md"):  # no credential, endpoint or key id in what describes the data
        text = objects[name].decode()
        assert s3env.secret_key not in text and s3env.access_key not in text and s3env.endpoint not in text
    assert verify_remote(version_url, progress=False).ok
    out = runner.invoke(app, ["status", str(small_recipe), "--out", s3prefix])
    assert f"{FRAMES}/{FRAMES} shards done" in out.output and "manifest: yes" in out.output
    # the s3 build publishes like a local one (the ledger stays behind)
    target = f"{s3prefix}/published"
    assert publish_version(version_url, target, progress=False).ok
    assert not [k for k in remote_keys(s3env, f"{target}/mini-c/0.1.0") if k.startswith("_ledger")]


def _renders(version: Path) -> set[str]:
    """The card's pictures, published with it (nothing else beside the manifest's files and the card)."""
    return {p.relative_to(version).as_posix() for p in (version / "renders").rglob("*") if p.is_file()}


def _variant(built: Path, dest: Path, drop: str) -> Path:
    """A copy of the build whose manifest leaves out every file of shard ``drop``: same dataset and
    version, different content (what two builds racing to publish one version look like)."""
    import shutil

    shutil.copytree(built, dest, ignore=shutil.ignore_patterns("_ledger", ".*"))
    manifest = json.loads((dest / "manifest.json").read_text())
    for s in [s for s in manifest["shards"] if s["shard"] == drop]:
        (dest / s["path"]).unlink()
    manifest["shards"] = [s for s in manifest["shards"] if s["shard"] != drop]
    manifest["frames"] -= 1
    counts = manifest["counts"]
    counts["examples_stored"] = sum(s["rows"] for s in manifest["shards"])
    counts["bytes"] = sum(s["bytes"] for s in manifest["shards"])
    for key, part in counts["by_partition"].items():
        mine = [s for s in manifest["shards"] if f"{s['corruption']}/{s['severity']}" == key]
        part["examples"], part["bytes"] = sum(s["rows"] for s in mine), sum(s["bytes"] for s in mine)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return dest


def test_concurrent_publishes_of_different_content_leave_exactly_the_winners_files(built, s3prefix, s3env,
                                                                                    tmp_path):
    variants = [_variant(built, tmp_path / f"v{i}", f"part-{i:05d}-of-{FRAMES:05d}") for i in range(FRAMES)]
    procs = [subprocess.Popen(_cli("publish", str(v), "--to", s3prefix, "--no-progress", "--jobs", "2"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ})
             for v in variants]
    results = [(p.wait(timeout=180), p.stdout.read().decode()) for p in procs]
    codes = [code for code, _ in results]
    assert sorted(codes) == [0] + [2] * (FRAMES - 1), results
    for code, text in results:
        if code:
            assert "a concurrent publish of" in text or "already published" in text, text
    winner = variants[codes.index(0)]
    manifest = json.loads((winner / "manifest.json").read_text())
    keys = set(remote_keys(s3env, f"{s3prefix}/mini-c/0.1.0"))
    assert keys == {s["path"] for s in manifest["shards"]} | {"manifest.json", "README.md"} | _renders(winner)
    assert remote_objects(s3env, f"{s3prefix}/mini-c/0.1.0")["manifest.json"] == (winner / "manifest.json").read_bytes()
    assert verify_remote(f"{s3prefix}/mini-c/0.1.0", progress=False).ok
    assert not remote_keys(s3env, f"{s3prefix}/mini-c/_publishing")  # every lease was released

    # a later publish of other content is refused under the lease and writes nothing
    loser = variants[(codes.index(0) + 1) % FRAMES]
    again = subprocess.run(_cli("publish", str(loser), "--to", s3prefix, "--no-progress"), capture_output=True,
                           text=True, env={**os.environ}, timeout=120)
    assert again.returncode == 2 and "already published" in again.stderr
    assert set(remote_keys(s3env, f"{s3prefix}/mini-c/0.1.0")) == keys


def test_interrupted_publish_of_other_content_leaves_no_stray_in_the_committed_version(built, s3prefix, s3env,
                                                                                      tmp_path):
    """Shards an interrupted publish of *other* content left behind are removed before the commit."""
    from bench_build.storage import open_store

    dest = open_store(f"{s3prefix}/mini-c/0.1.0")
    dest.put_bytes("data/corruption=gone/severity=1/part-00000-of-00004.parquet", b"PAR1 stray")
    assert publish_version(built, s3prefix, progress=False).ok
    keys = set(remote_keys(s3env, f"{s3prefix}/mini-c/0.1.0"))
    assert keys == {s["path"] for s in read_manifest(built)["shards"]} | {"manifest.json", "README.md"} | \
        _renders(built)
    # verify in place lists what the manifest does not: a stray shard is an error, anything else a warning
    dest.put_bytes("data/corruption=gone/severity=1/part-00000-of-00004.parquet", b"PAR1 stray")
    dest.put_bytes("notes.txt", b"hello")
    report = verify_remote(f"{s3prefix}/mini-c/0.1.0", progress=False)
    assert report.problems == ["data/corruption=gone/severity=1/part-00000-of-00004.parquet: not listed in the "
                               "manifest (a stray shard: glob readers would read its rows)"]
    assert report.warnings == ["notes.txt: not listed in the manifest"]


def test_versions_flags_unsafe_manifests(built, s3prefix, s3env):
    from bench_build.storage import open_store

    assert publish_version(built, s3prefix, progress=False).ok
    evil = json.loads((built / "manifest.json").read_text())
    evil["version"] = "6.6.6"
    evil["shards"][0]["path"] = "../../../etc/passwd"
    open_store(f"{s3prefix}/mini-c/6.6.6").put_bytes("manifest.json", json.dumps(evil).encode())
    out = runner.invoke(app, ["versions", f"{s3prefix}/mini-c"])
    assert out.exit_code == 0, out.output
    flat = " ".join(out.output.split())
    assert "6.6.6 UNSAFE" in flat and "escape the version directory" in flat
    info = json.loads(runner.invoke(app, ["versions", f"{s3prefix}/mini-c", "--json"]).output)
    assert [v["version"] for v in info["versions"]] == ["0.1.0"]
    assert [u["version"] for u in info["unsafe"]] == ["6.6.6"]


def test_seaweed_restarts_on_its_existing_data_dir(tmp_path):
    from bench_build.storage.seaweed import SeaweedServer
    from tests.pipeline.conftest import ACCESS_KEY, SECRET_KEY

    server = SeaweedServer(tmp_path / "weed", ACCESS_KEY, SECRET_KEY, ("keep",))
    with server:
        server.client().put_object(Bucket="keep", Key="k", Body=b"v")
    with SeaweedServer(tmp_path / "weed", ACCESS_KEY, SECRET_KEY, ("keep",)) as again:  # bucket already exists
        assert again.client().get_object(Bucket="keep", Key="k")["Body"].read() == b"v"



def test_seaweed_refuses_a_disk_it_would_not_write_to(tmp_path, monkeypatch):
    """Below 1 % free, weed answers every PUT with a bare InternalError (seen with a full CI disk). The server and
    `s3-local` say so before starting, naming the folder, and make nothing."""
    from collections import namedtuple

    from bench_build.storage import seaweed
    from bench_build.storage.errors import StorageError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(seaweed.shutil, "disk_usage", lambda p: usage(100 << 30, (100 << 30) - (500 << 20), 500 << 20))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("started weed on a full disk"))
    with pytest.raises(StorageError, match=r"weed: its disk has 500 MiB free of 100\.0 GiB; .* below 1 % free"):
        seaweed.SeaweedServer(tmp_path / "weed", "k", "secret").start()
    assert not (tmp_path / "weed").exists()
    res = CliRunner().invoke(app, ["s3-local", "--dir", str(tmp_path / "s3")])
    assert res.exit_code == 2 and "1,088 MiB there: free some space" in " ".join(res.output.split())  # nothing made
    assert not (tmp_path / "s3").exists()
    monkeypatch.setattr(seaweed.shutil, "disk_usage", lambda p: usage(100 << 30, 0, 2 << 30))
    seaweed.check_free_space(tmp_path / "not" / "made" / "yet")  # enough: checked on the nearest folder that exists
    monkeypatch.setattr(seaweed.shutil, "disk_usage", lambda p: usage(40 << 20, 10 << 20, 30 << 20))
    seaweed.check_free_space(tmp_path)  # a small tmpfs mostly free: weed writes there (the margin is 5 % of it)

# -- issue 29: pull writes only what the manifest lists, under the version lock, staged ---------------------
EVIL_KEY = "renders/../../../../x"


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _put_remote(server, url: str, key: str, body: bytes) -> None:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    server.client().put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)


def test_pull_ignores_a_listed_key_that_escapes_and_writes_only_the_manifests_files(built, s3prefix, s3env,
                                                                                   tmp_path, monkeypatch):
    """A listing entry ``renders/../../../../x`` (AWS S3 accepts any key; SeaweedFS does not, so it is injected
    in-process, with its content) is never written: pull takes every path from the checked manifest."""
    from bench_build.storage import ObjectInfo, S3Store

    assert publish_version(built, s3prefix, progress=False).ok
    real_list, real_get = S3Store.list, S3Store.get

    def evil_list(self, prefix=""):
        yield from real_list(self, prefix)
        yield ObjectInfo(EVIL_KEY, 5)

    def evil_get(self, key):
        return (b"pwned", None) if ".." in key else real_get(self, key)

    monkeypatch.setattr(S3Store, "list", evil_list)
    monkeypatch.setattr(S3Store, "get", evil_get)
    out_dir = tmp_path / "nest" / "o"
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(out_dir), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert not (tmp_path / "nest" / "x").exists(), "a listed key escaped --out"
    assert "84 files verified, 1 render\n" in out.output and "render(s)" not in out.output
    pulled = out_dir / "mini-c" / "0.1.0"
    manifest = read_manifest(pulled)
    assert [r["path"] for r in manifest["renders"]] == ["renders/contact_sheet.png"]
    assert _files_under(tmp_path) == {f"nest/o/mini-c/0.1.0/{rel}" for rel in
                                      {s["path"] for s in manifest["shards"]} | {"renders/contact_sheet.png",
                                                                                "manifest.json", "README.md",
                                                                                ".bench-build.lock"}}
    assert (pulled / "renders/contact_sheet.png").read_bytes() == (built / "renders/contact_sheet.png").read_bytes()
    report = verify_version(pulled)
    assert report.ok and report.renders == 1 and report.checked == 84


@pytest.mark.parametrize("bad", [EVIL_KEY, "data/corruption=clean/severity=0/x.parquet", "/tmp/x.png"])
def test_pull_refuses_a_manifest_whose_render_paths_escape(built, s3prefix, s3env, tmp_path, bad):
    manifest = json.loads((built / "manifest.json").read_text())
    manifest["renders"][0]["path"] = bad
    _put_remote(s3env, f"{s3prefix}/mini-c/0.1.0", "manifest.json", json.dumps(manifest).encode())
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--version", "0.1.0", "--out", str(tmp_path / "o"),
                              "--no-progress"])
    assert out.exit_code == 2 and "render paths escape" in out.output and bad in out.output, out.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "x").exists()


def test_tampered_render_fails_verify_and_pull_naming_it(built, s3prefix, s3env, tmp_path):
    assert publish_version(built, s3prefix, progress=False).ok
    version_url = f"{s3prefix}/mini-c/0.1.0"
    sheet = bytearray((built / "renders/contact_sheet.png").read_bytes())
    sheet[len(sheet) // 2] ^= 0xFF
    _put_remote(s3env, version_url, "renders/contact_sheet.png", bytes(sheet))  # same size, other bytes
    out = runner.invoke(app, ["verify", version_url, "--no-progress"])
    assert out.exit_code == 1 and "renders/contact_sheet.png: sha256 mismatch" in out.output, out.output
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path), "--no-progress"])
    assert out.exit_code == 1 and "renders/contact_sheet.png: sha256 mismatch" in out.output, out.output
    pulled = tmp_path / "mini-c" / "0.1.0"
    # nothing moved into place: no manifest, no shard, no picture under a final name
    assert not [f for f in _files_under(pulled) if not f.startswith(("_pull/", "."))]
    assert all(f.endswith(".partial") for f in _files_under(pulled / "_pull"))


def _copy_build(built: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(built, dest, ignore=shutil.ignore_patterns("_ledger", ".*"))
    return dest


def test_a_new_version_copies_only_what_the_store_confirms_and_its_upload_rate_leaves_the_copies_out(
        built, s3prefix, s3env, tmp_path, monkeypatch, capsys):
    """The next version of a dataset (here the same files: a version-only bump) takes the published version's files
    by store-side copies. One of those was overwritten on the store (other bytes, its sha256 metadata kept): it is
    uploaded, not copied, and a note says so. The copies get their own progress line, and their time is not in
    the upload rate (a 1 s copy made the upload line and the summary's rate read ≈ 1 MB/s)."""
    from bench_build.storage import S3Store

    assert publish_version(built, s3prefix, progress=False).ok
    shard = read_manifest(built)["shards"][0]
    body = bytearray((built / shard["path"]).read_bytes())
    body[len(body) // 2] ^= 0xFF
    bucket, _, prefix = f"{s3prefix}/mini-c/0.1.0".removeprefix("s3://").partition("/")
    s3env.client().put_object(Bucket=bucket, Key=f"{prefix}/{shard['path']}", Body=bytes(body),
                              Metadata={"sha256": shard["sha256"]})
    real, slept = S3Store.copy_from, []

    def slow_copy(self, *args, **kwargs):
        if not slept:
            slept.append(time.sleep(1.0))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(S3Store, "copy_from", slow_copy)
    second = _copy_build(built, tmp_path / "v2")
    manifest = json.loads((second / "manifest.json").read_text())
    manifest["version"] = "0.2.0"
    (second / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    capsys.readouterr()
    report = publish_version(second, s3prefix, progress=True)
    assert report.ok and report.transferred == [shard["path"]] and len(report.copied) == 83, report
    assert report.renders == ["renders/contact_sheet.png"]
    assert [n for n in report.notes if n.startswith(f"{shard['path']}: not copied from {s3prefix}/mini-c/0.1.0 (")
            and "the copy was deleted" in n], report.notes
    assert verify_remote(f"{s3prefix}/mini-c/0.2.0", progress=False).ok
    assert report.upload_bytes == shard["bytes"] and 0 < report.upload_seconds < report.seconds - 1.0
    err = capsys.readouterr().err
    up = shard["bytes"] / 1e6
    copied = (sum(s["bytes"] for s in manifest["shards"]) + sum(r["bytes"] for r in manifest["renders"])) / 1e6 - up
    assert f"store-side copy mini-c 0.2.0: {copied:.1f}/{copied:.1f} MB" in err, err
    assert f"upload mini-c 0.2.0: {up:.1f}/{up:.1f} MB" in err, err


def test_copies_of_multipart_files_are_checked_against_the_version_s_own_files_not_read_back(
        built, s3prefix, s3env, tmp_path, monkeypatch):
    """Files over the multipart threshold (every full-size KITTI-C shard) carry only a checksum of their parts'
    checksums: the next version's copies are checked by that composite, computed from the files being published,
    and no byte of any copy comes down."""
    import bench_build.storage.s3 as storage_s3
    from bench_build.storage import S3Store, open_store

    monkeypatch.setattr(storage_s3, "MULTIPART_THRESHOLD", 1 << 10)  # every shard goes up in (one) part
    assert publish_version(built, s3prefix, progress=False).ok
    shard = read_manifest(built)["shards"][0]
    first = open_store(f"{s3prefix}/mini-c/0.1.0")
    assert first.head(shard["path"]).etag.strip('"').endswith("-1") and first.stored_sha256(shard["path"]) is None
    second = _copy_build(built, tmp_path / "v2")
    manifest = json.loads((second / "manifest.json").read_text())
    manifest["version"] = "0.2.0"
    (second / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))

    real = S3Store.iter_chunks

    def refuse(self, key, *args):
        raise AssertionError(f"{self.key_url(key)} was read back")

    monkeypatch.setattr(S3Store, "iter_chunks", refuse)
    report = publish_version(second, s3prefix, progress=False)
    assert report.ok and len(report.copied) == 84 and report.upload_bytes == 0 and not report.notes, report
    monkeypatch.setattr(S3Store, "iter_chunks", real)
    assert verify_remote(f"{s3prefix}/mini-c/0.2.0", progress=False).ok


@pytest.mark.parametrize("link", ["renders/creds.png", "data/elsewhere"])
def test_publish_refuses_a_symlink_in_the_version_before_uploading(built, tmp_path, link):
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = hunter2\n")
    version = _copy_build(built, tmp_path / "v")
    (version / link).symlink_to(secret if link.endswith(".png") else tmp_path)
    out = runner.invoke(app, ["publish", str(version), "--to", str(tmp_path / "pub"), "--no-progress"])
    assert out.exit_code == 2, out.output
    assert f"{version / link}: is a symbolic link" in out.output and "nothing was published" in out.output
    assert not (tmp_path / "pub").exists()


def test_old_manifest_without_renders_publishes_and_pulls_saying_so(built, tmp_path):
    version = _copy_build(built, tmp_path / "v")
    manifest = json.loads((version / "manifest.json").read_text())
    del manifest["renders"]
    (version / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    out = runner.invoke(app, ["publish", str(version), "--to", str(tmp_path / "pub"), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "lists no renders" in out.output and "0 renders; latest" in out.output
    assert not (tmp_path / "pub" / "mini-c" / "0.1.0" / "renders").exists()
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress"])
    assert out.exit_code == 0, out.output
    notes = [line for line in out.output.splitlines() if "lists no renders" in line]
    assert len(notes) == 1 and "not pulled" in notes[0], out.output
    assert verify_version(tmp_path / "o" / "mini-c" / "0.1.0").ok


def test_verify_checks_listed_renders_and_ignores_one_rendered_later(built, tmp_path):
    version = _copy_build(built, tmp_path / "v")
    (version / "renders" / "contact_sheet_000001.png").write_bytes(b"\x89PNG a user's later render")
    report = verify_version(version)
    assert report.ok and report.renders == 1 and not report.warnings
    replaced = b"\x89PNG replaced"
    (version / "renders" / "contact_sheet.png").write_bytes(replaced)
    report = verify_version(version)
    assert report.problems == [f"renders/contact_sheet.png: {len(replaced)} bytes, manifest says "
                               f"{read_manifest(version)['renders'][0]['bytes']}"]


def test_concurrent_partial_pulls_into_one_out_compose(built, s3prefix, s3env, tmp_path, monkeypatch):
    """Two partial pulls into one --out at once: the second waits for the first's lock, then composes with
    the manifest it wrote (before: the last manifest written won and verify saw stray shards)."""
    import threading

    from bench_build.storage import S3Store

    assert publish_version(built, s3prefix, progress=False).ok
    waited = threading.Event()
    real_download = S3Store.download_file

    def download(self, key, local, *, progress=None):
        # the lock holder downloads only once the other pull is seen waiting: the two certainly overlap
        assert waited.wait(timeout=60), "the second pull never waited for the first"
        return real_download(self, key, local, progress=progress)

    monkeypatch.setattr(S3Store, "download_file", download)
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def pull(corruption: str, severity: int | None) -> None:
        start.wait()
        try:
            results[corruption] = pull_version(f"{s3prefix}/mini-c", tmp_path, corruption=corruption,
                                               severity=severity, progress=False, jobs=2,
                                               on_wait=lambda msg: waited.set())
        except BaseException as e:  # reported below, in the test's thread
            results[corruption] = e

    threads = [threading.Thread(target=pull, args=a) for a in (("beam_del", 3), ("clean", None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert all(getattr(r, "ok", False) for r in results.values()), results
    pulled = tmp_path / "mini-c" / "0.1.0"
    manifest = read_manifest(pulled)
    assert sorted(manifest["partial"]["selections"], key=str) == sorted(
        [{"corruption": "beam_del", "severity": 3}, {"corruption": "clean", "severity": None}], key=str)
    assert len(manifest["shards"]) == 2 * FRAMES
    assert verify_version(pulled).ok
    assert not (pulled / "_pull").exists()


def test_failed_pull_puts_nothing_in_place_and_the_next_reuses_its_verified_files(built, s3prefix, s3env, tmp_path,
                                                                                  monkeypatch):
    from bench_build.storage import S3Store

    assert publish_version(built, s3prefix, progress=False).ok
    first = pull_version(f"{s3prefix}/mini-c", tmp_path, corruption="clean", progress=False)
    assert first.ok
    pulled = tmp_path / "mini-c" / "0.1.0"
    before = {rel: (pulled / rel).read_bytes() for rel in _files_under(pulled) if not rel.startswith(".")}
    real_download, calls = S3Store.download_file, []

    def flaky(self, key, local, *, progress=None):
        calls.append(key)
        if len(calls) == 6:
            raise RuntimeError("connection reset mid-pull")
        return real_download(self, key, local, progress=progress)

    monkeypatch.setattr(S3Store, "download_file", flaky)
    with pytest.raises(RuntimeError, match="connection reset"):
        pull_version(f"{s3prefix}/mini-c", tmp_path, progress=False, jobs=1)
    # the directory is what the first pull left: same files, same manifest, still verifying
    after = {rel: (pulled / rel).read_bytes() for rel in _files_under(pulled) if not rel.startswith((".", "_pull/"))}
    assert after == before and verify_version(pulled).ok
    staged = _files_under(pulled / "_pull")
    assert len(staged) == 5 and all(f.endswith(".parquet.partial") for f in staged)
    assert all("_pull" not in p.parts for p in tmp_path.rglob("*.parquet"))  # a glob never sees a staged file

    monkeypatch.setattr(S3Store, "download_file", real_download)
    again = pull_version(f"{s3prefix}/mini-c", tmp_path, progress=False)
    assert again.ok and len(again.skipped) == FRAMES + 5 and len(again.transferred) == 84 - FRAMES - 5
    assert (pulled / "manifest.json").read_bytes() == (built / "manifest.json").read_bytes()
    assert verify_version(pulled).ok and not (pulled / "_pull").exists()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
def test_os_error_during_pull_is_one_line_naming_the_file(built, s3prefix, s3env, tmp_path, monkeypatch, err):
    from bench_build.storage import S3Store

    assert publish_version(built, s3prefix, progress=False).ok
    real_download, calls = S3Store.download_file, []

    def failing(self, key, local, *, progress=None):
        calls.append(key)
        if len(calls) >= 3:
            raise OSError(err, os.strerror(err), str(local))
        return real_download(self, key, local, progress=progress)

    monkeypatch.setattr(S3Store, "download_file", failing)
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path), "--no-progress", "--jobs", "1"])
    assert out.exit_code == 1, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.output, out.output
    assert f"{os.strerror(err)}: {tmp_path / 'mini-c' / '0.1.0' / '_pull'}" in lines[0]
    assert ".parquet.partial" in lines[0] and "run the same pull again" in lines[0]
    pulled = tmp_path / "mini-c" / "0.1.0"
    assert not [f for f in _files_under(pulled) if not f.startswith(("_pull/", "."))]


def test_pull_into_a_regular_file_or_an_unwritable_dir_is_refused_in_one_line(built, s3prefix, s3env, tmp_path,
                                                                             monkeypatch):
    from bench_build.storage import LocalStore

    assert publish_version(built, s3prefix, progress=False).ok
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me")
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(a_file), "--no-progress"])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert f"--out {a_file}: not a directory" in out.output and a_file.read_text() == "keep me"

    def denied(self, purpose, *, force=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(self.root.parent))

    monkeypatch.setattr(LocalStore, "writer_lock", denied)
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path / "ro"), "--no-progress"])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert f"Permission denied: {tmp_path / 'ro' / 'mini-c'}" in out.output and "Traceback" not in out.output


@pytest.mark.parametrize("in_the_way", ["a parent of --out", "the dataset's folder", "the version's folder"])
def test_pull_names_the_file_in_the_way_of_the_version_folder(built, tmp_path, in_the_way):
    """A file where --out's parent, the dataset's or the version's folder must go: mkdir said "Not a directory:
    <out>/mini-c/0.1.0" or "File exists: …", naming the version folder instead of the file in the way."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    out, blocker = {"a parent of --out": (tmp_path / "a-file" / "sub", tmp_path / "a-file"),
                    "the dataset's folder": (tmp_path / "o", tmp_path / "o" / "mini-c"),
                    "the version's folder": (tmp_path / "o", tmp_path / "o" / "mini-c" / "0.1.0")}[in_the_way]
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("keep me")
    before = _files_under(tmp_path)
    res = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(out), "--no-progress"])
    line = " ".join(res.output.split())
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert f"--out {out}: {blocker} is a file, not " in line and "nothing was written" in line, line
    assert "Not a directory" not in line and "File exists" not in line, line
    assert _files_under(tmp_path) == before and blocker.read_text() == "keep me"


def test_an_interrupted_pull_names_the_folder_its_verified_downloads_wait_in(built, tmp_path, monkeypatch):
    """Ctrl-C during a pull printed ``<out>/<dataset>/<version>/_pull/``, placeholders and all."""
    from bench_build.storage import LocalStore

    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    real_download, calls = LocalStore.download_file, []

    def interrupted(self, key, local, *, progress=None):
        calls.append(key)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_download(self, key, local, progress=progress)

    monkeypatch.setattr(LocalStore, "download_file", interrupted)
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress", "--jobs", "1"])
    text = " ".join(out.output.split())
    assert out.exit_code == 130, out.output
    staging = tmp_path / "o" / "mini-c" / "0.1.0" / "_pull"
    assert f"interrupted: the files downloaded and verified so far wait in {staging}/" in text, text
    assert "<dataset>" not in text and len(_files_under(staging)) == 2


def _other_build_of_the_same_version(built: Path, out: Path) -> Path:
    """A copy of ``built`` under ``out`` holding other content under the same name: one of its files renamed (as
    a build with another shard size names its files) and its manifest saying so."""
    import shutil

    dest = out / built.parent.name / built.name
    shutil.copytree(built, dest)
    manifest = json.loads((dest / "manifest.json").read_bytes())
    entry = manifest["shards"][0]
    moved = entry["path"].replace("part-00000", "part-00099")
    (dest / entry["path"]).rename(dest / moved)
    entry["path"] = moved
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    assert verify_version(dest).ok
    return dest


@pytest.mark.parametrize("held", ["a local build", "a copy of another publication", "an unfinished build"])
def test_pull_refuses_a_version_folder_holding_other_content_and_writes_nothing(built, s3prefix, s3env, tmp_path,
                                                                                held):
    """Pulling over a local build (or a copy of another publication) of the same name replaced its manifest and
    left its other files in place, unlisted: `verify` failed on each of them and glob readers read both."""
    import shutil

    assert publish_version(built, s3prefix, progress=False).ok
    dest = _other_build_of_the_same_version(built, tmp_path / "out")
    if held == "a copy of another publication":
        shutil.rmtree(dest / "_ledger")
    elif held == "an unfinished build":
        (dest / "manifest.json").unlink()

    def tree() -> dict[str, bytes]:
        return {p.relative_to(dest).as_posix(): p.read_bytes() for p in sorted(dest.rglob("*"))
                if p.is_file() and p.name != ".bench-build.lock"}

    before = tree()
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path / "out"), "--no-progress"])
    line = " ".join(out.output.split())
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert f"{dest}: holds {held}" in line and "nothing was written" in line, line
    assert tree() == before
    assert not (dest / "_pull").exists()
    if held != "an unfinished build":
        assert verify_version(dest).ok


def test_disk_full_writing_the_manifest_moves_the_pulled_files_back_out_of_place(built, tmp_path, monkeypatch):
    import bench_build.publish.common as publish
    from bench_build.storage import LocalStore

    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    real_put = LocalStore.put_bytes

    def full(self, key, data, **kw):
        if key == "manifest.json" and "o" in self.root.parts:
            raise OSError(errno.ENOSPC, "No space left on device")  # a failed write(): no file named
        return real_put(self, key, data, **kw)

    monkeypatch.setattr(LocalStore, "put_bytes", full)
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress"])
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
    pulled = tmp_path / "o" / "mini-c" / "0.1.0"
    assert f"No space left on device: {pulled / 'manifest.json'}" in out.output
    assert not [f for f in _files_under(pulled) if f.endswith((".parquet", ".png"))]  # none left in place
    assert len(_files_under(pulled / publish.STAGING)) == 85  # 84 shards + the contact sheet, verified

    monkeypatch.setattr(LocalStore, "put_bytes", real_put)
    again = pull_version(str(tmp_path / "pub" / "mini-c"), tmp_path / "o", progress=False)
    assert again.ok and not again.transferred and len(again.skipped) == 84
    assert verify_version(pulled).ok and not (pulled / publish.STAGING).exists()


def test_pulled_files_are_synced_under_their_names_before_the_manifest(built, tmp_path, fs_events):
    """Each verified download moves from ``_pull/`` to its final name and that directory is fsynced before the
    manifest that lists it is written: after a power loss the manifest never names a file that is not there."""
    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    del fs_events.events[:]
    assert pull_version(str(tmp_path / "pub" / "mini-c"), tmp_path / "o", progress=False).ok
    pulled = tmp_path / "o" / "mini-c" / "0.1.0"
    manifest = read_manifest(pulled)
    listed = [e["path"] for e in manifest["shards"] + manifest["renders"]] + ["README.md"]
    assert len(listed) == 86
    not_durable = [rel for rel in listed if not fs_events.durable(pulled / rel, before=pulled / "manifest.json")]
    assert not not_durable, not_durable[:5]
    assert fs_events.durable(pulled / "manifest.json")


def test_pull_waits_for_a_run_holding_the_version_and_names_it(built, tmp_path):
    from bench_build.storage import LocalStore

    assert publish_version(built, str(tmp_path / "pub"), progress=False).ok
    dest = tmp_path / "o" / "mini-c" / "0.1.0"
    with LocalStore(dest).writer_lock("bench-build run"):
        out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                                  "--no-progress", "--wait", "0.5"])
    assert out.exit_code == 2, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 2 and "waiting up to 0.5 s" in lines[0] and "bench-build run" in lines[0], out.output
    assert "being written by another bench-build run" in lines[1] and "(waited 0.5 s)" in lines[1]
    assert _files_under(dest) == {".bench-build.lock"}
    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-c"), "--out", str(tmp_path / "o"),
                              "--no-progress"])
    assert out.exit_code == 0 and verify_version(dest).ok, out.output


def test_real_disk_full_during_pull_is_one_line_and_the_pull_resumes(built, s3prefix, s3env, small_fs):
    """A real full disk (1 MB tmpfs) under a pull from S3: boto's download, not a monkeypatch, hits ENOSPC."""
    assert publish_version(built, s3prefix, progress=False).ok
    args = _cli("pull", f"{s3prefix}/mini-c", "--out", str(small_fs), "--no-progress")
    run = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert f"No space left on device: {small_fs}/mini-c/0.1.0/_pull/" in run.stderr, run.stderr
    pulled = small_fs / "mini-c" / "0.1.0"
    assert not [f for f in _files_under(pulled) if not f.startswith(("_pull/", "."))]
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    again = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ})
    assert again.returncode == 0, again.stdout + again.stderr
    assert verify_version(pulled).ok and not (pulled / "_pull").exists()


def test_versions_shows_the_publish_time_and_labels_an_old_publish_build_time(built, s3prefix, s3env):
    """`versions` says when a version was published (recorded by publish outside the immutable version); a version
    published before that record existed shows its build time, labelled "built", never passed off as the publish."""
    created = read_manifest(built)["created"]
    before = datetime.now(UTC).replace(microsecond=0)
    assert runner.invoke(app, ["publish", str(built), "--to", s3prefix, "--no-progress"]).exit_code == 0
    after = datetime.now(UTC)
    out = runner.invoke(app, ["versions", f"{s3prefix}/mini-c", "--json"])
    assert out.exit_code == 0, out.output
    (v,) = json.loads(out.output)["versions"]
    assert v["created"] == created and before <= datetime.fromisoformat(v["published"]) <= after
    out = runner.invoke(app, ["versions", f"{s3prefix}/mini-c"])
    assert f"published {v['published']}" in out.output and created not in out.output

    bucket, prefix = s3prefix.removeprefix("s3://").split("/", 1)
    key = f"{prefix}/mini-c/_published/0.1.0.json"
    record = json.loads(s3env.client().get_object(Bucket=bucket, Key=key)["Body"].read())
    # a record for other content (another manifest) is not this version's publish time
    s3env.client().put_object(Bucket=bucket, Key=key, Body=json.dumps({**record, "manifest_sha256": "0" * 64}))
    assert json.loads(runner.invoke(app, ["versions", f"{s3prefix}/mini-c", "--json"]).output
                      )["versions"][0]["published"] is None
    s3env.client().delete_object(Bucket=bucket, Key=key)  # as published before the record existed
    out = runner.invoke(app, ["versions", f"{s3prefix}/mini-c"])
    assert out.exit_code == 0 and f"built {created}" in out.output and "published" not in out.output
    # re-running publish on the committed version (a kill between commit and record) fills the gap only
    assert runner.invoke(app, ["publish", str(built), "--to", s3prefix, "--no-progress"]).exit_code != 0
    refilled = json.loads(s3env.client().get_object(Bucket=bucket, Key=key)["Body"].read())
    assert refilled["manifest_sha256"] == record["manifest_sha256"]
    assert "published" in runner.invoke(app, ["versions", f"{s3prefix}/mini-c"]).output


def test_pull_without_a_version_says_whether_anything_is_published_there(tmp_path):
    """A mistyped dataset URL is not 'no latest pointer': it has nothing under it. A dataset whose publishes were
    all interrupted (no manifest) has no version to pass --version (that said 'pass --version (it has 0.1.0, 0.2.0)',
    which then failed); a dataset without the pointer lists its complete versions."""
    (tmp_path / "pub").mkdir()
    dataset = tmp_path / "pub" / "mini-c"

    def pull(*extra: str) -> str:
        out = runner.invoke(app, ["pull", str(dataset), "--out", str(tmp_path / "o"), "--no-progress", *extra])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        return " ".join(out.output.split())

    out = runner.invoke(app, ["pull", str(tmp_path / "pub" / "mini-d"), "--out", str(tmp_path / "o"), "--no-progress"])
    line = " ".join(out.output.split())
    nothing = (f"{tmp_path / 'pub' / 'mini-d'}: nothing published here (nothing under this URL); check the dataset "
               f"URL: `bench-build versions {tmp_path / 'pub'}` lists the datasets published there")
    assert out.exit_code == 2 and line == f"error: {nothing}", line
    # `versions` of it says the same, and lists nothing without failing ("no published version" before)
    out = runner.invoke(app, ["versions", str(tmp_path / "pub" / "mini-d")])
    assert out.exit_code == 0 and " ".join(out.output.split()) == nothing, out.output
    for v in ("0.1.0", "0.2.0", "_publishing"):
        (dataset / v).mkdir(parents=True)
        (dataset / v / "x").write_text("x")
    out = runner.invoke(app, ["versions", str(dataset)])
    assert out.exit_code == 0 and out.output.splitlines()[0] == f"{dataset}: no complete version", out.output
    line = pull()
    assert f"{dataset}: no complete version; 0.1.0, 0.2.0 are incomplete (no manifest" in line, line
    assert "`bench-build publish` of the version again completes it" in line and "--version" not in line, line
    line = pull("--version", "0.2.0")
    assert f"{dataset / '0.2.0'}: incomplete version (no manifest" in line and "publish` of it again" in line, line
    (dataset / "0.1.0" / "manifest.json").write_text("{}")
    assert "no latest pointer; pass --version (it has 0.1.0)" in pull()
    assert not (tmp_path / "o").exists()


def test_a_publish_killed_before_its_first_file_is_an_incomplete_version(tmp_path):
    """A publish killed after taking its lease and before its first file leaves only the lease folder
    (``_publishing/<version>/``, with the local lock file). `versions` and `pull` of the dataset said "nothing
    published here … check the dataset URL", though the URL is right: they name the version as incomplete."""
    dataset = tmp_path / "pub" / "mini-c"
    (dataset / "_publishing" / "0.2.0").mkdir(parents=True)
    (dataset / "_publishing" / "0.2.0" / ".bench-build.lock").write_text("")
    out = runner.invoke(app, ["versions", str(dataset)])
    assert out.exit_code == 0 and out.output.splitlines() == [
        f"{dataset}: no complete version",
        "0.2.0  (incomplete: no manifest yet — an interrupted or running publish; publish it again to finish it)"], \
        out.output
    out = runner.invoke(app, ["pull", str(dataset), "--out", str(tmp_path / "o"), "--no-progress"])
    line = " ".join(out.output.split())
    assert out.exit_code == 2 and f"{dataset}: no complete version; 0.2.0 is incomplete (no manifest" in line, line
    assert "nothing published here" not in line and not (tmp_path / "o").exists()
    # once the version has a folder of its own, the lease folder adds nothing (a finished local publish keeps it)
    (dataset / "0.2.0" / "data").mkdir(parents=True)
    info = json.loads(runner.invoke(app, ["versions", str(dataset), "--json"]).output)
    assert info["incomplete"] == ["0.2.0"], info


def test_a_publication_root_whose_datasets_have_only_unfinished_publishes_is_a_root(tmp_path):
    """Every dataset under a root with only interrupted publishes (version folders with data/ and no manifest, or
    only the publish lease folder): `versions ROOT` listed the datasets as incomplete versions ("publish it again
    to finish it") and `pull ROOT` called them versions. They are datasets; a dataset's own unfinished versions
    stay incomplete versions."""
    root = tmp_path / "pub"
    (root / "kitti-c" / "0.1.0" / "data" / "clean" / "0").mkdir(parents=True)
    (root / "kitti-c" / "0.1.0" / "data" / "clean" / "0" / "part-0.parquet").write_bytes(b"x")
    (root / "mini-c" / "_publishing" / "0.2.0").mkdir(parents=True)
    out = runner.invoke(app, ["versions", str(root)])
    assert out.exit_code == 0 and " ".join(out.output.split()) == (
        f"{root}: this is a publication root; datasets: kitti-c, mini-c (bench-build versions {root}/<dataset>)"), \
        out.output
    out = runner.invoke(app, ["pull", str(root), "--out", str(tmp_path / "o"), "--no-progress"])
    assert out.exit_code == 2 and "this is a publication root; datasets: kitti-c, mini-c" in out.output, out.output
    info = json.loads(runner.invoke(app, ["versions", str(root / "kitti-c"), "--json"]).output)
    assert info["datasets"] == [] and info["incomplete"] == ["0.1.0"], info
    assert not (tmp_path / "o").exists()


def test_pull_and_versions_of_a_version_url_or_a_publication_root_name_the_url_to_pass(built, s3prefix, s3env,
                                                                                      tmp_path):
    """The URL one level off: a version's own URL (the one `verify` takes) was read as a dataset whose versions are
    `data` and `renders` ('pass --version (it has data, renders)'; `versions` listed them as incomplete), and a
    publication root's datasets were offered as versions ('pass --version (it has mini-c)')."""
    assert publish_version(built, s3prefix, progress=False).ok
    version_url, dataset_url = f"{s3prefix}/mini-c/0.1.0", f"{s3prefix}/mini-c"
    is_version = f"{version_url}: this is a version (mini-c 0.1.0), not a dataset"
    for extra in ([], ["--version", "0.1.0"]):
        out = runner.invoke(app, ["pull", version_url, "--out", str(tmp_path / "o"), "--no-progress", *extra])
        line = " ".join(out.output.split())
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        assert is_version in line and f"bench-build pull {dataset_url} --version 0.1.0" in line, line
        out = runner.invoke(app, ["pull", s3prefix, "--out", str(tmp_path / "o"), "--no-progress", *extra])
        line = " ".join(out.output.split())
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        assert f"{s3prefix}: this is a publication root; datasets: mini-c (bench-build pull {s3prefix}/<dataset>)" \
            in line, line
    assert not (tmp_path / "o").exists()
    out = runner.invoke(app, ["versions", version_url])
    assert out.exit_code == 0 and " ".join(out.output.split()) == (
        f"{is_version} (bench-build versions {dataset_url})"), out.output
    out = runner.invoke(app, ["versions", version_url, "--json"])
    info = json.loads(out.output)
    assert info["is_version"] == {"dataset": "mini-c", "version": "0.1.0"} and info["incomplete"] == []
    assert json.loads(runner.invoke(app, ["versions", dataset_url, "--json"]).output)["is_version"] is None


def test_a_store_whose_disk_fills_during_publish_keeps_what_went_up_and_says_so(built, small_fs, monkeypatch):
    """A real SeaweedFS store on a small disk (a tmpfs) fills up midway through a publish: weed answers each
    later PUT with a bare InternalError. That was exit 2, the code for "nothing was written", with no word of the
    files already up; it is exit 1, one line saying how many are kept, that nothing was committed, and to re-run.
    Once the disk has room the same command uploads only the rest and commits."""
    from bench_build.storage.seaweed import SeaweedServer

    files = read_manifest(built)["shards"]
    total = sum(e["bytes"] for e in files)
    subprocess.run(["mount", "-o", f"remount,size={(total // 2 >> 20) + 8}m", str(small_fs)], check=True)
    with SeaweedServer(small_fs / "s3", "fullkey", "fullsecret-" + "0" * 20, ("full",)) as weed:
        for k in [k for k in os.environ if k.startswith("AWS_") and k != "AWS_CA_BUNDLE"]:
            monkeypatch.delenv(k)
        for k, v in {"AWS_ENDPOINT_URL": weed.endpoint, "AWS_ACCESS_KEY_ID": weed.access_key,
                     "AWS_SECRET_ACCESS_KEY": weed.secret_key, "AWS_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)
        args = ["publish", str(built), "--to", "s3://full/datasets", "--no-progress"]
        out = runner.invoke(app, args)
        said = " ".join(out.output.split())
        assert out.exit_code == 1 and said.startswith("error: s3://full/datasets/mini-c/0.1.0/data/"), out.output
        kept = int(said.split("; the ")[1].split(" file")[0])
        there = remote_keys(weed, "s3://full/datasets/mini-c/0.1.0")
        up = [k for k in there if k.startswith("data/")]
        assert 0 < kept == len([k for k in there if k.startswith(("data/", "renders/"))]), (kept, there, said)
        assert 0 < len(up) < len(files) and "manifest.json" not in there, there
        assert "kept on the store and nothing was committed" in said and "re-run the same command" in said
        subprocess.run(["mount", "-o", f"remount,size={(2 * total >> 20) + 32}m", str(small_fs)], check=True)
        out = runner.invoke(app, args)
        assert out.exit_code == 0 and f"{len(up)} already there" in " ".join(out.output.split()), out.output
        assert verify_remote("s3://full/datasets/mini-c/0.1.0", progress=False).ok


def test_a_manifest_the_store_kept_although_it_answered_an_error_is_a_committed_publish(built, tmp_path,
                                                                                       monkeypatch):
    """The commit is one PUT of the manifest; a store can fail to answer it and still keep it (a timeout after the
    write). That read "nothing was committed (no manifest…)" while `versions` listed the version as complete.
    publish now reads the manifest back: ours, byte for byte → the version is committed, `latest` moves and the
    report says what the store answered; unreadable (the store still fails) → it says it cannot tell, not that
    nothing was committed."""
    from bench_build.storage import LocalStore, StorageError

    real_put, real_get = LocalStore.put_bytes, LocalStore.get
    state = {"unreadable": False, "card_sent": False}

    def put_then_fail(self, key, data, **kw):
        state["card_sent"] |= key == "README.md"  # the step before the commit
        got = real_put(self, key, data, **kw)
        if key == "manifest.json":
            raise StorageError(f"{self.key_url(key)}: the store did not answer in time")
        return got

    def get(self, key):  # once the commit was tried, the manifest cannot be read while the store is "unreadable"
        if key == "manifest.json" and state["unreadable"] and state["card_sent"]:
            raise StorageError(f"{self.key_url(key)}: the store did not answer in time")
        return real_get(self, key)

    monkeypatch.setattr(LocalStore, "put_bytes", put_then_fail)
    monkeypatch.setattr(LocalStore, "get", get)
    out = runner.invoke(app, ["publish", str(built), "--to", str(tmp_path / "a"), "--no-progress"])
    said = " ".join(out.output.split())
    assert out.exit_code == 0 and "but kept it, byte for byte: the version is committed" in said, out.output
    assert "nothing was committed" not in said
    committed = tmp_path / "a" / "mini-c" / "0.1.0" / "manifest.json"
    assert committed.read_bytes() == (built / "manifest.json").read_bytes()
    info = json.loads(runner.invoke(app, ["versions", str(tmp_path / "a" / "mini-c"), "--json"]).output)
    assert info["latest"] == "0.1.0" and info["incomplete"] == [], info

    state.update(unreadable=True, card_sent=False)
    out = runner.invoke(app, ["publish", str(built), "--to", str(tmp_path / "b"), "--no-progress"])
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and "whether the manifest (the commit) went up cannot be told" in said, out.output
    assert "nothing was committed" not in said and "re-run the same command" in said

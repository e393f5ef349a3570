"""The lock (manifests/lock.txt): it agrees with pyproject.toml, the installers use it, and builds record it."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from bench_build.runtime.numeric import LOCKED_FOR_BYTES, lock_record, read_lock

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "manifests" / "lock.txt"


def _requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, items in project["optional-dependencies"].items():
        reqs += [(f"extra {extra}", Requirement(r)) for r in items]
    return [(where, r) for where, r in reqs if r.name != project["name"]]  # self-references: other extras


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_requirement_of_pyproject_is_locked_at_a_version_it_allows():
    lock = read_lock(LOCK.read_text())
    problems = []
    for where, req in _requirements():
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        version = lock.get(_canonical(req.name))
        if version is None:
            problems.append(f"{req} ({where}) is not in the lock")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req} ({where}): the lock has {version}")
    assert not problems, "manifests/lock.txt and pyproject.toml disagree (regenerate the lock):\n" + "\n".join(problems)


#: what `pip freeze` leaves out of the lock: the installer's own packages, which every environment already has
NOT_FROZEN = {"pip", "setuptools", "wheel"}


def test_every_package_installed_with_the_lock_is_in_it():
    """Constraints pin only what they list: a package pip installs that the lock lacks takes whatever version is
    newest that day. So every requirement is locked, from pyproject.toml's (every extra: `cluster` is the image's
    ray[default]) down through each one's own requirements, with the extras asked of it; followed as far as the
    packages are installed here (the image's own, such as ray[default]'s aiohttp, only need to be in the lock)."""
    from importlib import metadata

    lock = read_lock(LOCK.read_text())
    todo = _requirements()
    seen: set[tuple[str, frozenset[str]]] = set()
    missing = []
    while todo:
        where, req = todo.pop()
        name, extras = _canonical(req.name), frozenset(req.extras)
        if (name, extras) in seen or name in NOT_FROZEN:
            continue
        seen.add((name, extras))
        if name not in lock:
            missing.append(f"{req.name} (from {where})")
            continue
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own requirements cannot be read
        for text in requires:
            dep = Requirement(text)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((f"{req.name}{'[' + ','.join(sorted(extras)) + ']' if extras else ''}", dep))
    assert not missing, "not in manifests/lock.txt (regenerate it as its header says): " + ", ".join(sorted(missing))


def test_the_lock_decides_no_shard_byte():
    """The lock's sha256 is recorded in the manifest and the card, never in a shard: not in the numeric identity
    that each file's footer fingerprint hashes, nor among what a resumed build compares. A lock that pins more
    packages (the image's) changes a build's manifest and card, and no shard byte."""
    from bench_build.build.shard import numeric_identity, partition_fingerprint
    from bench_build.manifests.recipe import load_recipe
    from bench_build.runtime.numeric import build_profile, profile_differences

    profile = build_profile()
    other = {**profile, "lock": {**profile["lock"], "sha256": "0" * 64}}
    assert profile["lock"]["sha256"] == hashlib.sha256(LOCK.read_bytes()).hexdigest()
    assert numeric_identity(profile) == numeric_identity(other) and not profile_differences(profile, other)
    recipe = load_recipe("modelnet-c")
    a, b = (partition_fingerprint(recipe, "clean", 0, "part-00000-of-00001", ["f0"], [None], columns=["points"],
                                  encoding="full", numeric=numeric_identity(p)) for p in (profile, other))
    assert a == b


def test_every_package_that_decides_shard_bytes_is_locked():
    lock = read_lock(LOCK.read_text())
    assert not [n for n in LOCKED_FOR_BYTES if _canonical(n) not in lock]


def test_the_lock_is_exact_pins_only():
    with pytest.raises(ValueError, match="is not 'name==version'"):
        read_lock("numpy>=1.26\n")
    assert read_lock("# a comment\nNumPy==1.26.4  # trailing\n\nopen3d_cpu==0.19.0\n") == {"numpy": "1.26.4",
                                                                                         "open3d-cpu": "0.19.0"}


def test_ci_and_the_image_install_with_the_lock():
    assert "-c manifests/lock.txt" in (ROOT / ".ci" / "install").read_text()
    assert "-c manifests/lock.txt" in (ROOT / "deploy" / "Dockerfile").read_text()


def test_the_record_names_every_byte_relevant_package_installed_at_another_version(monkeypatch):
    from importlib import metadata

    real = metadata.version

    def fake(name: str) -> str:
        if name == "numpy":
            return "2.5.5"
        if name == "h5py":
            raise metadata.PackageNotFoundError(name)  # absent: computed nothing, so no difference
        return real(name)

    monkeypatch.setattr(metadata, "version", fake)
    rec = lock_record()
    assert rec["sha256"] == hashlib.sha256(LOCK.read_bytes()).hexdigest()
    lock = read_lock(LOCK.read_text())
    assert f"numpy 2.5.5 (lock: {lock['numpy']})" in rec["differs"] and not rec["matches"]
    assert not [d for d in rec["differs"] if d.startswith("h5py")]


def test_a_build_records_the_lock_in_its_manifest_and_card(mini_build):
    import json

    manifest = json.loads((mini_build / "manifest.json").read_text())
    rec = manifest["numeric_profile"]["lock"]
    assert rec["sha256"] == hashlib.sha256(LOCK.read_bytes()).hexdigest()
    assert rec["matches"] == (not rec["differs"])
    card = (mini_build / "README.md").read_text()
    assert f"`manifests/lock.txt` sha256 `{rec['sha256']}`" in card  # whole: a reader can check it

"""What a score says of a version folder that holds only part of its benchmark (`bench-build pull --corruption
… --severity …` writes such a folder: its manifest lists the pulled files and has a ``partial`` entry).

Per-partition metrics need only their partition; the means a paper reports need more: every one of them (CE,
mCE, RR, the bug rates' CR) compares with the clean partition, or the baseline table's corruptions. Without
them `score` still scores every partition it has, and says which means it left out, why, and the pull that
adds what they need.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench_build.manifests.manifest import read_manifest


def held_partitions(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    """The (corruption, severity) partitions whose files the folder holds, in manifest order."""
    return list(dict.fromkeys((s["corruption"], int(s["severity"])) for s in manifest.get("shards") or []))


def parts_text(parts: Iterable[tuple[str, int]], limit: int = 5) -> str:
    """Partitions in words, runs of severities joined: ``gaussian_rad/1–5, fog/2``; past ``limit`` corruptions,
    the first ones and the count."""
    by: dict[str, list[int]] = {}
    for c, s in parts:
        by.setdefault(c, []).append(int(s))
    out = []
    for c, sev in by.items():
        runs: list[list[int]] = []
        for s in sorted(set(sev)):
            if runs and s == runs[-1][-1] + 1:
                runs[-1].append(s)
            else:
                runs.append([s])
        out.append(f"{c}/" + ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs))
    if len(out) > limit:
        return ", ".join(out[:limit - 2]) + f", … ({sum(len(set(v)) for v in by.values())} partitions)"
    return ", ".join(out) or "nothing"


def pull_command(version_dir: str | Path, manifest: dict[str, Any], corruption: str | None) -> str:
    """The `bench-build pull` that adds ``corruption`` (None: every file) to the partial pull in
    ``version_dir``: a pull into the same OUT composes with the files already there."""
    root = Path(version_dir)
    dataset, version = manifest.get("dataset", "DATASET"), manifest.get("version", "VERSION")
    out = root.parent.parent if root.name == version and root.parent.name == dataset else "DIR"
    return (f"bench-build pull <publication root>/{dataset} --version {version} --out {out}"
            + ("" if corruption is None else f" --corruption {corruption}"))


def _partial(manifest: dict[str, Any]) -> str:
    return (f"a partial pull of {manifest.get('dataset')} {manifest.get('version')}: it holds "
            f"{parts_text(held_partitions(manifest))}")


def summary_note(version_dir: str | Path, parts: Iterable[tuple[str, int]], names: str,
                 reason: BaseException | str) -> str:
    """Why the summary (``names``: the means it would hold) was not computed: the version has no clean partition
    (and, for a partial pull, what it holds and the pull that adds it), or ``reason``, the metric's own."""
    manifest = read_manifest(Path(version_dir))
    partial = "partial" in manifest
    if ("clean", 0) not in set(parts):
        return (f"no {names}: they need the clean partition, which {version_dir} does not hold"
                + (f" ({_partial(manifest)}): `{pull_command(version_dir, manifest, 'clean')}` adds it"
                   if partial else ""))
    return (f"no {names}: {reason}" + (f" ({_partial(manifest)}; pull the whole version to compare: "
                                       f"`{pull_command(version_dir, manifest, None)}`)" if partial else ""))

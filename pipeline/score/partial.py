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
from bench_build.manifests.partial import held_partitions, parts_text, pull_command


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

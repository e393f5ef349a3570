"""What a version folder that holds part of its version says of itself: `bench-build pull --corruption …
--severity …` writes such a folder (its manifest lists the pulled files and has a ``partial`` entry). `render` and
`score` read a partial pull like a version and use these to say what it holds and the pull that adds the rest.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def held_partitions(manifest: dict[str, Any]) -> list[tuple[str, int]]:
    """The (corruption, severity) partitions whose files a version folder holds, in manifest order (a partial
    pull holds only the ones it pulled)."""
    return list(dict.fromkeys((s["corruption"], int(s["severity"])) for s in manifest.get("shards") or []))


def severities_by_corruption(parts: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Each corruption's severities, corruptions in first-seen order."""
    by: dict[str, list[int]] = {}
    for c, s in parts:
        by.setdefault(c, []).append(int(s))
    return by


def severity_runs(severities: Iterable[int]) -> str:
    """Severities in words, runs joined: ``1–3, 5``."""
    runs: list[list[int]] = []
    for s in sorted(set(severities)):
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def parts_text(parts: Iterable[tuple[str, int]], limit: int = 5) -> str:
    """Partitions in words, runs of severities joined: ``gaussian_rad/1–5, fog/2, clean/0``; past ``limit``
    corruptions, the first ones and the count (``gaussian_rad/2, fog/2, … (25 partitions)``)."""
    by = severities_by_corruption(parts)
    out = [f"{c}/{severity_runs(sev)}" for c, sev in by.items()]
    if len(out) > limit:
        return ", ".join(out[:limit - 2]) + f", … ({sum(len(set(v)) for v in by.values())} partitions)"
    return ", ".join(out) or "nothing"


def partial_of(manifest: dict[str, Any]) -> str | None:
    """``a partial pull of <dataset> <version>`` for a folder `bench-build pull --corruption/--severity` wrote,
    else None."""
    if "partial" not in manifest:
        return None
    return f"a partial pull of {manifest.get('dataset', 'the dataset')} {manifest.get('version', '')}".rstrip()


def pull_command(root: str | Path, manifest: dict[str, Any], corruption: str | None,
                 severity: int | None = None) -> str:
    """The `bench-build pull` that adds ``corruption``/``severity`` (None: every file) to the partial pull in
    ``root``: a pull into the same OUT composes with the files already there."""
    root = Path(root)
    dataset, version = manifest.get("dataset", "DATASET"), manifest.get("version", "VERSION")
    out = root.parent.parent if root.name == version and root.parent.name == dataset else "DIR"
    args = ("" if corruption is None else f" --corruption {corruption}") + \
        ("" if severity is None or corruption == "clean" else f" --severity {severity}")
    return f"bench-build pull <publication root>/{dataset} --version {version} --out {out}{args}"

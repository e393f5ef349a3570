"""Sections of the dataset card that do not depend on the layout: the compact parameter table, the
counts matrix, citations (BibTeX from ``citations.json``), intended use and limitations, the licence,
and what a build from generated demo data says about itself."""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import cache
from importlib import resources
from typing import Any

from bench_build.manifests.card import licence_text
from bench_build.manifests.recipe import Recipe, builtin_recipes, load_recipe
from bench_build.stages.registry import get_stage

DEMO_SOURCE = ("generated demo data (bench-build's synthetic ray-cast scenes and meshes written in the real "
               "source format): **not** the real dataset")
MAX_CELL = 160  # characters of one table cell before it is cut
MAX_LIST = 10  # values of a list parameter shown whole in the parameter table


@cache
def _citations() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("citations.json").read_text())


def is_demo(manifest: dict[str, Any]) -> bool:
    return bool((manifest.get("source") or {}).get("demo"))


def source_info(kind: str | None) -> dict[str, Any] | None:
    return _citations()["sources"].get(kind or "")


@cache
def _builtin_benchmarks() -> dict[str, str]:
    """Every benchmark name a built-in recipe builds (its own and its variants', ``kitti-c-text``) → the recipe."""
    out = {}
    for name in builtin_recipes():
        out[name] = name
        out.update({v.benchmark: name for v in load_recipe(name).variants.values()})
    return out


def benchmark_citations(dataset: str) -> list[dict[str, Any]]:
    """The papers whose benchmark ``dataset`` builds: a built-in recipe or one of its variants, cited by the
    entries whose ``match`` names the recipe or a prefix of it (``robo3d`` → the four ``robo3d-*``). A recipe of
    one's own cites none, whatever its name: ``kitti-c-plus`` does not follow Li et al.'s benchmark."""
    recipe = _builtin_benchmarks().get(dataset.lower())
    if recipe is None:
        return []
    return [entry for entry in _citations()["benchmarks"].values()
            if any(recipe == m or recipe.startswith(m + "-") for m in entry["match"])]


def citation_section(manifest: dict[str, Any]) -> list[str]:
    lines = ["## Citation", ""]
    papers = benchmark_citations(manifest["dataset"])
    src = source_info((manifest.get("source") or {}).get("kind"))
    if not papers and not src:
        return []
    if papers:
        lines += ["The benchmark this build follows:", ""]
        for p in papers:
            lines += ["```bibtex", p["bibtex"], "```", ""]
    if src and not is_demo(manifest):
        lines += [f"The source dataset ({src['name']}):", "", "```bibtex", src["bibtex"], "```", ""]
    return lines if len(lines) > 2 else []


def _short(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list | tuple):
        if any(isinstance(x, list | tuple | dict) for x in v):
            return f"({len(v)} values)"
        if len(v) > MAX_LIST:  # the first and the last, and how many (the manifest's `partitions` has them all)
            return "(" + ", ".join(_short(x) for x in v[:3]) + f", … {_short(v[-1])}; {len(v)} values)"
        return "(" + ", ".join(_short(x) for x in v) + ")"
    if isinstance(v, dict):
        return f"({len(v)} entries)"
    s = str(v)
    return s if len(s) <= 24 else s[:21] + "…"


def _cell(items: list[str]) -> str:
    text = "; ".join(items) or "—"
    text = text.replace("|", "\\|")
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


_UNUSED = object()  # a field left out of one severity's parameters (`Stage.unused_params`)


def parameter_table(recipe: Recipe) -> list[str]:
    """One compact row per corruption: the parameters that change with severity in one column per severity,
    the ones that do not once; ``None`` options and fields the mode never reads left out; notes as a list below
    the table."""
    sev = [str(s) + (f" ({recipe.severity_names[s - 1]})" if s <= len(recipe.severity_names) else "")
           for s in range(1, recipe.severities + 1)]
    lines = ["| corruption | stage | " + " | ".join(sev) + " | all severities |",
             "| --- | --- | " + " | ".join("---" for _ in sev) + " | --- |"]
    notes = []
    for c in recipe.corruptions:
        stage = get_stage(c.stage)
        # a field the severity's mode never reads is left out (fog's α when α is drawn from alpha_choices)
        per = [{k: v for k, v in asdict(p).items() if k not in stage.unused_params(p)} for p in c.params]
        keys = [k for k in asdict(c.params[0]) if any(d.get(k) not in (None, (), [], "", {}) for d in per)]
        varying = [k for k in keys if any(d.get(k, _UNUSED) != per[0].get(k, _UNUSED) for d in per)]
        fixed = [k for k in keys if k not in varying]
        cells = [_cell([f"{k}={_short(d[k])}" for k in varying if k in d]) for d in per]
        same = "; ".join(f"{k}={_short(per[0][k])}" for k in fixed).replace("|", "\\|")
        # a long list of fixed parameters goes below the table whole, rather than cut off in its cell
        long = len(same) > MAX_CELL
        where = " from the LiDAR" if c.origin == "lidar" else ""
        lines.append(f"| {c.name} | `{c.stage}` v{c.stage_version}{where} | " + " | ".join(cells)
                     + f" | {'below the table' if long else same or '—'} |")
        text = c.notes.strip() or stage.summary
        if text or long:
            notes.append(f"- **{c.name}**: " + (f"all severities: {same}. " if long else "") + text)
    return [*lines, "", *notes] if notes else lines


def counts_matrix(manifest: dict[str, Any], recipe: Recipe) -> list[str]:
    """Examples per corruption × severity (clean on its own row), and MB per corruption."""
    by = manifest["counts"]["by_partition"]
    sev = list(range(1, recipe.severities + 1))
    # severity 0 is a column of its own: the clean count under "1" read as a severity-1 count
    lines = ["| corruption | 0 (clean) | " + " | ".join(str(s) for s in sev) + " | MB |",
             "| --- | ---: | " + " | ".join("---:" for _ in sev) + " | ---: |"]
    clean = by.get("clean/0")
    if clean:
        lines.append(f"| clean | {clean['examples']:,} | " + " | ".join("" for _ in sev)
                     + f" | {clean['bytes'] / 1e6:,.1f} |")
    for c in recipe.corruptions:
        cells = [f"{by[f'{c.name}/{s}']['examples']:,}" if f"{c.name}/{s}" in by else "—" for s in sev]
        mb = sum(by[f"{c.name}/{s}"]["bytes"] for s in sev if f"{c.name}/{s}" in by) / 1e6
        lines.append(f"| {c.name} |  | " + " | ".join(cells) + f" | {mb:,.1f} |")
    lines += ["", f"`manifest.json` lists every file with its row count, size and sha256; `bench-build verify .` "
              f"re-checks them ({len(manifest['shards'])} files, {manifest['counts']['bytes'] / 1e6:,.1f} MB)."]
    return lines


def intended_use_section(manifest: dict[str, Any], recipe: Recipe) -> list[str]:
    use = ("measuring how a model trained on the clean source data degrades under each corruption and severity"
           if recipe.corruptions else
           "measuring how well a classifier trained on the known classes of a scenario tells known from unknown "
           "test shapes")
    lines = [
        "## Intended use and limitations",
        "",
        f"- **Intended use**: {use} (`bench-build score` computes the paper's metrics), and comparing models on the "
        "same examples. Every example is reproducible from its key and the recipe seed.",
        "- **Not intended** as training data for the evaluated models (that would measure augmentation, not "
        "robustness), nor as a stand-in for real adverse-weather or faulty-sensor recordings: the corruptions "
        "are simulations with the parameters above.",
        "- **Limitations**: simulated weather and sensor effects approximate the physics (see the corruption notes "
        "and the naturalness validation, when present); where the paper's text and its released generator "
        "differ, the default follows the generator and the notes say so; the released datasets used other "
        "random draws, so per-example values differ from theirs while the distributions match.",
    ]
    if is_demo(manifest):
        lines.append("- **This is a demo build**: its scans are generated by bench-build to exercise the pipeline; "
                     "numbers measured on it say nothing about real data.")
    return [*lines, ""]


def demo_licence_section(manifest: dict[str, Any]) -> list[str]:
    """A demo build's licence: bench-build's own (its data is generated); what a real build would inherit."""
    real = licence_text((manifest.get("source") or {}).get("kind"))
    text = ("Generated demo data: no real dataset's scans or labels are included; the demo data and this card "
            "are under bench-build's Apache-2.0 licence.")
    if real:
        text += f" (A build from the real source data inherits its licence — {real}.)"
    return ["## Licence", "", text, ""]


def title(manifest: dict[str, Any]) -> str:
    head = f"# {manifest['dataset']} {manifest['version']}"
    return head + " — demo build (generated data, not the real dataset)" if is_demo(manifest) else head


# ---- putting them into a rendered card -------------------------------------------------------------

def _section_span(card: str, heading: str) -> tuple[int, int] | None:
    """(start, end) of the ``## heading`` section (up to the next ``## `` heading or the end)."""
    marker = f"\n## {heading}"
    start = card.find(marker)
    if start < 0:
        return None
    nxt = card.find("\n## ", start + len(marker))
    return start + 1, (nxt + 1 if nxt >= 0 else len(card))


def replace_section(card: str, heading: str, lines: list[str], *, before: str | None = None) -> str:
    """``card`` with section ``heading`` replaced by ``lines``; if absent, inserted before section
    ``before`` (or appended)."""
    body = "\n".join(lines).rstrip("\n") + "\n\n"
    span = _section_span(card, heading)
    if span is None and before is not None:
        at = _section_span(card, before)
        if at is not None:
            return card[:at[0]] + body + card[at[0]:]
    if span is None:
        return card.rstrip("\n") + "\n\n" + body
    return card[:span[0]] + body + card[span[1]:]


def complete_card(card: str, manifest: dict[str, Any], recipe: Recipe) -> str:
    """The card with the compact parameter table, the counts matrix, intended use and limitations,
    citations and the licence; a demo build says so in its title, source line and licence."""
    demo = is_demo(manifest)
    lines = card.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"# {manifest['dataset']} {manifest['version']}"):
            lines[i] = title(manifest)
        elif demo and line.startswith("- Source: "):
            lines[i] = f"- Source: {DEMO_SOURCE}, " + line[len("- Source: "):]
        elif demo and line.startswith("license: "):  # the YAML header's licence id
            lines[i] = "license: apache-2.0"
    card = "\n".join(lines)
    if recipe.corruptions:
        card = replace_section(card, "Corruptions", ["## Corruptions", "",
                                                     "Parameters per severity (those equal at every severity in "
                                                     "the last column; the recipe has every value):", "",
                                                     *parameter_table(recipe)])
        span = next((h for h in ("Counts per corruption × severity", "Counts") if _section_span(card, h)), None)
        counts = ["## Counts per corruption × severity", "", *counts_matrix(manifest, recipe)]
        card = replace_section(card, span or "Counts per corruption × severity", counts, before="How to load")
    card = replace_section(card, "Intended use and limitations", intended_use_section(manifest, recipe),
                           before="How to load")
    if demo:
        card = replace_section(card, "Licence", demo_licence_section(manifest))
    cite = citation_section(manifest)
    if cite:
        card = replace_section(card, "Citation", cite, before="Licence")
    return card

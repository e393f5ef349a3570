"""Validation outputs: report.json, summary.md, tsne.png, training.png, pointnet.pt, features.npz,
the ``validation/summary.md`` index of every validated corruption, and the dataset card's link to it.
A corruption's report folder is written whole into a temp folder beside it and put in its place (`staged_dir`,
`replace_dir`), so a reader sees the old report or the new one, never a mix of their files; the index and the
card are each written to a temporary name and renamed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.manifests.card import card_with_validation
from bench_build.storage import atomic_write_with, remove_dead_temps, replace_dir, staged_dir
from bench_build.validate.realism_report import plot_realism, render_realism

#: Plot colours of the three groups (exact RGB, so a test can find them in the PNG).
GROUP_COLORS = {"real": "#d62728", "simulated": "#1f77b4", "clean": "#2ca02c"}
INDEX_NAME = "summary.md"




def _write_text(path: Path, text: str) -> None:
    atomic_write_with(path, lambda tmp: Path(tmp).write_text(text))


def group_labels(corruption: str, groups: dict[str, np.ndarray]) -> dict[str, str]:
    names = {"real": f"real {corruption}", "simulated": f"simulated {corruption}", "clean": "clean (build)"}
    return {g: f"{names[g]} (n={len(f)})" for g, f in groups.items()}


def plot_tsne(path: Path, corruption: str, emb_groups: dict[str, np.ndarray],
              perplexity: float | None = None) -> list[dict[str, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = group_labels(corruption, emb_groups)
    fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=100)
    for g, pts in emb_groups.items():
        ax.scatter(pts[:, 0], pts[:, 1], s=16, c=GROUP_COLORS[g], linewidths=0, label=labels[g])
    ax.set_title(f"t-SNE of PointNet global features — {corruption}"
                 + (f"\n(perplexity {perplexity:.3g})" if perplexity is not None else ""))
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    ax.legend(loc="best", frameon=True)
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
    return [{"group": g, "label": labels[g], "color": GROUP_COLORS[g], "n": len(p)} for g, p in emb_groups.items()]


def plot_training(path: Path, history: list[dict[str, float]], best_epoch: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ep = [h["epoch"] for h in history]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    for a in (a1, a2):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole: no 0.5 ticks on a short run
    a1.plot(ep, [h["train_loss"] for h in history], label="train")
    a1.plot(ep, [h["val_loss"] for h in history], label="val")
    a1.set_xlabel("epoch")
    a1.set_ylabel("cross-entropy")
    a2.plot(ep, [h["train_accuracy"] for h in history], label="train")
    a2.plot(ep, [h["val_accuracy"] for h in history], label="val")
    a2.set_xlabel("epoch")
    a2.set_ylabel("accuracy")
    a2.set_ylim(0, 1.02)
    for a in (a1, a2):
        a.axvline(best_epoch, color="grey", linestyle="--", label=f"best (epoch {best_epoch})")
        a.legend()
    fig.suptitle("PointNet weather classifier: real weather vs real clean")
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)


def _pct(v: float) -> str:
    return f"{100 * v:.2f} %"


def embedding_line(emb: dict[str, Any]) -> str:
    """What the features and the t-SNE map are made of: a reader comparing with the paper's plot needs the
    samples per group and the perplexity, which are otherwise only in report.json."""
    t = emb["tsne"]
    samples = ", ".join(f"{g} {n}" for g, n in emb["samples"].items())
    return (f"Features: {emb.get('features', 'PointNet global feature')}, {emb.get('dim', '?')} dimensions; "
            f"{sum(emb['samples'].values())} examples embedded ({samples}). t-SNE: perplexity "
            f"{t['perplexity']:.3g}, {t.get('init', 'pca')} initialisation, learning rate {t.get('learning_rate')}, "
            f"seed {t.get('random_state')}.")


def render_summary(report: dict[str, Any]) -> str:
    c = report["corruption"]
    acc, v = report["accuracy"], report["verdict"]
    tr, b = report["training"], report["build"]
    lines = [
        f"# Naturalness validation: {c}",
        "",
        f"**Verdict: {v['verdict']}** — {v['rule']}.",
        "",
        *[f"> **Caution:** {c}." for c in v.get("cautions", [])],
        *([""] if v.get("cautions") else []),
        f"{report['dataset']} {report['version']} (fingerprint `{report['fingerprint'][:16]}…`), "
        f"validated {report['created']} by bench-build {report['code_version']} in {report['seconds']} s.",
        "",
        "| check | result | |",
        "| --- | --- | --- |",
    ]
    undecided = v["verdict"] == "inconclusive"  # a failed gate: the checks decide nothing, so they get no tick
    for chk in v["gates"] + v["checks"]:
        mark = "✓" if chk["ok"] else "✗"
        if undecided and chk in v["checks"]:
            mark = "– (a gate failed)"
        lines.append(f"| {chk['name']} | {chk['detail']} | {mark} |")
    lines += [
        "",
        "## Classification (Table III protocol)",
        "",
        "| training data | scans (train / val) | val accuracy | test data | examples | accuracy on simulated |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| real {c}: `{report['real']['weather']['dir']}` ({report['real']['weather']['format']}) + real clean: "
        f"`{report['real']['clean']['dir']}` | {tr['train_scans']} / {tr['val_scans']} | {_pct(acc['val'])} | "
        f"build clean + {c} severities {b['severities']} | {acc['test']['examples']} | "
        f"**{_pct(acc['test']['simulated'])}** |",
        "",
        f"Train accuracy {_pct(acc['train'])} (best epoch {tr['best_epoch']} of {tr['epochs_run']}); "
        f"test accuracy on the build's clean frames {_pct(acc['test']['clean'])}, "
        f"overall {_pct(acc['test']['overall'])}; "
        "by severity: " + ", ".join(f"{s}: {_pct(a)}" for s, a in acc["test"]["simulated_by_severity"].items()) + ".",
        "",
        "## MMD between feature distributions (Table IV)",
        "",
    ]
    emb = report.get("embedding") or {}
    if emb.get("tsne"):
        lines += [embedding_line(emb), ""]
    for space, title in (("raw", "raw global features"), ("tsne", "2-D t-SNE features (the paper's setting)")):
        t = report["mmd"][space]
        lines += [f"{title}: RBF kernel, σ = {t['bandwidth']['sigma']:.4g} ({t['bandwidth']['rule']}), "
                  f"unbiased MMD², {t['permutations']} permutations.", "",
                  "| pair | MMD² | MMD | p-value | n |", "| --- | --- | --- | --- | --- |"]
        for pair, r in t["pairs"].items():
            a, bb = pair.split("|")
            lines.append(f"| {a} vs {bb} | {r['mmd2']:.4g} | {r['mmd']:.4g} | {r['p_value']:.3g} | "
                         f"{r['n_x']} / {r['n_y']} |")
        lines.append("")
    if report.get("realism"):

        lines += render_realism(report["realism"])
    lines += [
        "## Plots",
        "",
        "![t-SNE of the global features](tsne.png)",
        "",
        "![training curves](training.png)",
        "",
        "## Preprocessing",
        "",
        *[f"- {s}" for s in report["preprocessing"]["steps"]],
        f"- real {c}: intensity scale `{report['real']['weather']['intensity_scale']}` (observed max "
        f"{report['real']['weather']['intensity_observed']['max']:.4g}); real clean: "
        f"`{report['real']['clean']['intensity_scale']}`; build: `{b['intensity_scale']}`",
        "",
        f"Model: PointNet, shared MLP {report['model']['shared_mlp']}, max pool, FC {report['model']['fc']}, "
        f"batch norm, dropout {report['model']['dropout']}; checkpoint `pointnet.pt`. Full numbers: `report.json`.",
        "",
    ]
    return "\n".join(lines)


def render_index(version_dir: Path) -> str:
    lines = ["# Naturalness validation", "",
             "Weather classifier (PointNet) trained on real adverse-weather vs real clean scans, tested on the "
             "build's clean and simulated partitions; accuracy on simulated = naturalness (Li et al. §IV-A).", "",
             "| corruption | verdict | accuracy on simulated | MMD² real–sim | MMD² sim–clean | report |",
             "| --- | --- | --- | --- | --- | --- |"]
    for rp in sorted((version_dir / "validation").glob("*/report.json")):
        if rp.parent.name.startswith("."):  # a report still being written (`staged_dir`), or a killed run's
            continue
        r = json.loads(rp.read_text())
        pairs = r["mmd"]["raw"]["pairs"]
        # the accuracy means nothing when the classifier failed its gates: said in its cell
        said = r["verdict"]["verdict"] + (" (indicative only)" if r["verdict"].get("cautions") else "")
        acc = _pct(r["naturalness"]) + (" (classifier failed its gates)" if r["verdict"]["verdict"] == "inconclusive"
                                        else "")
        lines.append(f"| {r['corruption']} | {said} | {acc} | "
                     f"{pairs['real|simulated']['mmd2']:.4g} | {pairs['simulated|clean']['mmd2']:.4g} | "
                     f"[{r['corruption']}/summary.md]({r['corruption']}/summary.md) |")
    return "\n".join(lines) + "\n"


def write_outputs(version_dir: Path, out_dir: Path, report: dict[str, Any], train_res: Any,
                  groups: dict[str, np.ndarray], emb_groups: dict[str, np.ndarray],
                  realism_arrays: dict[str, Any] | None = None) -> None:
    """Write the report folder ``out_dir`` whole (a temp folder beside it, then `replace_dir`; a killed earlier
    run's temp folder is removed first), then the index and the card."""
    staged = staged_dir(out_dir)
    try:
        _write_report(staged, report, train_res, groups, emb_groups, realism_arrays)
        replace_dir(staged, out_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    for d in (version_dir, out_dir.parent):  # temps of an earlier validate (or run) killed on this host
        remove_dead_temps(d)
    _write_text(version_dir / "validation" / INDEX_NAME, render_index(version_dir))
    card = version_dir / "README.md"
    if card.is_file():
        _write_text(card, card_with_validation(card.read_text(), f"validation/{INDEX_NAME}"))


def _write_report(out_dir: Path, report: dict[str, Any], train_res: Any, groups: dict[str, np.ndarray],
                  emb_groups: dict[str, np.ndarray], realism_arrays: dict[str, Any] | None) -> None:
    """Every file of one corruption's report, into ``out_dir`` (the staged folder)."""
    import torch


    ckpt = {"state_dict": train_res.state_dict, "model": report["model"], "preprocessing": report["preprocessing"],
            "best_epoch": train_res.best_epoch, "val_accuracy": train_res.best_val_accuracy,
            "seed": report["config"]["seed"], "labels": {"0": "clean", "1": report["corruption"]}}
    atomic_write_with(out_dir / "pointnet.pt", lambda tmp: torch.save(ckpt, tmp))
    arrays = {f"features_{g}": f for g, f in groups.items()} | {f"tsne_{g}": e for g, e in emb_groups.items()}

    def save_arrays(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file, not a name: numpy would append .npz to the temp's name
            np.savez_compressed(f, **arrays)

    atomic_write_with(out_dir / "features.npz", save_arrays)
    legend = plot_tsne(out_dir / "tsne.png", report["corruption"], emb_groups,
                       (report.get("embedding") or {}).get("tsne", {}).get("perplexity"))
    plot_training(out_dir / "training.png", report["training"]["history"], train_res.best_epoch)
    report["plots"] = {"tsne": {"path": "tsne.png", "groups": legend}, "training": {"path": "training.png"}}
    report["files"] = {"report": "report.json", "summary": "summary.md", "tsne_plot": "tsne.png",
                       "training_plot": "training.png", "checkpoint": "pointnet.pt", "features": "features.npz"}
    realism = report.get("realism") or {}
    if realism_arrays is not None and "corruptions" in realism:

        for c in realism["corruptions"]:
            plot_realism(out_dir / f"realism_{c}.png", c, realism, realism_arrays)
            report["plots"][f"realism_{c}"] = {"path": f"realism_{c}.png"}
            report["files"][f"realism_plot_{c}"] = f"realism_{c}.png"
    _write_text(out_dir / "report.json", json.dumps(report, indent=1, sort_keys=True, default=_json_default))
    _write_text(out_dir / "summary.md", render_summary(report))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")

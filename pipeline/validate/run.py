"""`bench-build validate`: is a simulated corruption natural? (Li et al. §IV-A, Tables III–IV, App. B-A)

1. **Preflight** (`preflight`; no Ray, no torch): the version's manifest (a scene benchmark), the corruption and
   severities, the files it tests (checked against the manifest), the report folder, and the real-data directories
   (present, non-empty, of a known format) — every problem is reported before any training starts.
2. **Real data** (Ray tasks over chunks of files): real weather scans (label 1) and real clean scans
   (label 0) of the same sensor, preprocessed (`preprocess.Preprocess`), balanced, split 9:1.
3. **Train** PointNet deterministically, keep the best val-accuracy checkpoint (`train`).
4. **Test** (Ray tasks over the build's Parquet files): the build's clean partition and the
   corruption's partitions (sampled frames); accuracy on simulated = naturalness.
5. **Features**: global features of real weather / simulated / clean → t-SNE 2-D; MMD (RBF, median
   bandwidth shared per feature space, unbiased, permutation p-value) on raw and t-SNE features.
6. **Verdict** — "natural" only if accuracy on simulated ≥ the threshold *and* MMD(real, sim) <
   MMD(sim, clean); "inconclusive" when the classifier cannot separate real weather from real clean
   (val accuracy) or calls the build's clean frames weather; otherwise "not natural".
7. **Snow realism** (`realism`), when the real weather data is labelled WADS snow (``--real-format wads``):
   every snow-like corruption of the build against WADS's falling-snow points, per severity — share,
   range, elevation, relative intensity, density, Wasserstein / KS distances on what both sensors see.
8. **Outputs** in ``VERSION/validation/<corruption>/``: report.json, summary.md, tsne.png,
   training.png, realism_<corruption>.png (with WADS), pointnet.pt (best checkpoint), features.npz;
   ``validation/summary.md`` indexes every validated corruption and the dataset card links to it.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench_build import __version__
from bench_build.format.checked import IntegrityError
from bench_build.runtime.ray import init_ray, stop_ray
from bench_build.sources.base import SourceError
from bench_build.validate.config import ValidateConfig, ValidationError
from bench_build.validate.extract import (
    FORMATS,
    extract_partition_file,
    list_partition_frames,
    load_real_chunk,
)
from bench_build.validate.mmd import mmd_table
from bench_build.validate.pointnet import PointNetConfig
from bench_build.validate.preflight import preflight
from bench_build.validate.realism import MAX_SCANS, realism_report, snow_like_corruptions
from bench_build.validate.report import write_outputs
from bench_build.validate.train import (
    CLEAN_LABEL,
    WEATHER_LABEL,
    TrainConfig,
    cpu_training_estimate,
    evaluate,
    load_model,
    pick_device,
    split_train_val,
    train_classifier,
)


def _log_stderr(msg: str) -> None:
    print(f"[validate] {msg}", file=sys.stderr, flush=True)


def _subset(n: int, k: int | None, seed: int, salt: int) -> np.ndarray:
    """A sorted, seeded random subset of range(n) of size min(n, k)."""
    if k is None or k >= n:
        return np.arange(n)
    rng = np.random.default_rng(np.random.SeedSequence([seed, salt]))
    return np.sort(rng.choice(n, size=k, replace=False))


def _ray_results(refs: list, what: str) -> list[dict[str, Any]]:
    import ray

    out = ray.get(refs)
    for r in out:
        if "error" in r:
            raise ValidationError(f"{what}: {r['error']}")
    return out


def training_device_line(cfg: ValidateConfig, n_train: int, threads: int | None) -> str:
    """Where the classifier trains, and on a CPU how long that should take (said before it starts: at the paper's
    size a CPU needs hours, a GPU minutes)."""
    import torch


    device = pick_device(cfg.device)
    if device != "cpu":
        return f"device: {device} ({torch.cuda.get_device_name(0) if device.startswith('cuda') else device})"
    n_threads = threads or torch.get_num_threads()
    est = cpu_training_estimate(n_train, cfg.points, cfg.width, cfg.batch_size, cfg.epochs, n_threads)
    when = f"{est / 3600:.1f} h" if est >= 3600 else f"{est / 60:.1f} min" if est >= 60 else f"{est:.0f} s"
    hint = ("; a CUDA GPU does a paper-sized batch in ≈ 0.05 s instead of ≈ 17 s (install a CUDA build of torch)"
            if est >= 3600 else "")
    return (f"device: cpu ({n_threads} threads); estimated training time at most {when} for {cfg.epochs} epochs "
            f"of {n_train} scans × {cfg.points} points{hint}")


def _load_real(pre: dict[str, Any], cfg: ValidateConfig, log: Callable[[str], None]) -> dict[str, Any]:
    import ray


    task = ray.remote(num_cpus=1, max_retries=2)(load_real_chunk)
    prep = cfg.preprocess
    n_cpu = max(1, int(ray.cluster_resources().get("CPU", 1)))
    picked: dict[str, list[Path]] = {}
    for salt, role in enumerate(("weather", "clean")):
        files = pre["real"][role]["files"]
        picked[role] = [files[i] for i in _subset(len(files), cfg.max_real, cfg.seed, 100 + salt)]
    if cfg.balance:
        n = min(len(v) for v in picked.values())
        for salt, role in enumerate(("weather", "clean")):
            picked[role] = [picked[role][i] for i in _subset(len(picked[role]), n, cfg.seed, 200 + salt)]
    out: dict[str, Any] = {}
    for role in ("weather", "clean"):
        info = pre["real"][role]
        rels = [p.relative_to(info["dir"]).as_posix() for p in picked[role]]
        chunk = max(1, min(64, -(-len(rels) // (4 * n_cpu))))
        refs = [task.remote(info["format"], str(info["dir"]), rels[i:i + chunk], role, prep, cfg.seed,
                            cfg.real_duplicates)
                for i in range(0, len(rels), chunk)]
        res = _ray_results(refs, f"real {role} data for {cfg.corruption}")
        q = np.concatenate([r["intensity_q"] for r in res])
        out[role] = {"clouds": np.concatenate([r["clouds"] for r in res]), "ids": rels,
                     "intensity_observed": {"median_p50": float(np.median(q[:, 0])),
                                            "median_p99": float(np.median(q[:, 1])), "max": float(q[:, 2].max())}}
        log(f"real {role}: {len(rels)} of {len(info['files'])} {info['format']} scans from {info['dir']}")
    return out


def _frame_sample(pre: dict[str, Any], cfg: ValidateConfig) -> tuple[list[str] | None, int]:
    import ray


    task = ray.remote(num_cpus=1)(list_partition_frames)
    res = _ray_results([task.remote(str(p)) for p in pre["clean_files"]], "build clean partition")
    ids = sorted({f for r in res for f in r["frames"]})
    if cfg.sample is None or cfg.sample >= len(ids):
        return None, len(ids)
    return [ids[i] for i in _subset(len(ids), cfg.sample, cfg.seed, 300)], len(ids)


def _extract_build(pre: dict[str, Any], cfg: ValidateConfig, frames: list[str] | None, train_res) -> dict[str, Any]:
    import ray


    task = ray.remote(num_cpus=1, max_retries=2)(extract_partition_file)
    state_ref = ray.put({k: v.cpu() for k, v in train_res.state_dict.items()})
    prep = cfg.preprocess
    out = {}
    for group, files in (("clean", pre["clean_files"]), ("simulated", pre["sim_files"])):
        refs = [task.remote(str(p), frames, prep, cfg.seed, state_ref, train_res.model_cfg, cfg.batch_size)
                for p in files]
        res = [r for r in _ray_results(refs, f"build {group} partition") if r["frame_id"]]
        if not res:
            raise ValidationError(f"{pre['root']}: no {group} examples for the sampled frames")
        out[group] = {"frame_id": [f for r in res for f in r["frame_id"]],
                      "severity": np.array([s for r in res for s in r["severity"]]),
                      "logits": np.concatenate([r["logits"] for r in res]),
                      "features": np.concatenate([r["features"] for r in res])}
    return out


def _tsne(features: np.ndarray, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    from sklearn.manifold import TSNE

    n = len(features)
    perplexity = float(min(30.0, max(2.0, (n - 1) / 3.0)))
    params = {"n_components": 2, "perplexity": perplexity, "init": "pca", "learning_rate": "auto",
              "random_state": seed, "metric": "euclidean"}
    emb = TSNE(**params).fit_transform(features.astype(np.float64))
    return emb, params


def _realism(pre: dict[str, Any], cfg: ValidateConfig, frames: list[str] | None,
             log: Callable[[str], None]) -> dict[str, Any]:
    """The per-point snow realism section (`realism`), or why it was skipped."""

    version = pre["version"]
    names = snow_like_corruptions(version.manifest)
    if pre["real"]["weather"]["format"] != "wads":  # said in summary.md only when the validated corruption is snow
        return {"skipped": f"the real weather data ({pre['real']['weather']['format']}) has no per-point weather "
                           "labels; the realism report needs labelled real snow (--real-format wads)",
                "snow_like": cfg.corruption in names}
    if not names:
        return {"skipped": f"the build has no snow-like corruption (stages snow, snow_lisa); it has "
                           f"{', '.join(version.corruptions)}", "snow_like": True}

    # at most MAX_SCANS frames per severity, read only from the files that hold them (the manifest says which)
    shard_frames: dict[str, list[str]] = version.manifest.get("shard_frames", {})
    ids = sorted(set(frames) if frames is not None else {f for v in shard_frames.values() for f in v})
    picked = [ids[i] for i in _subset(len(ids), MAX_SCANS, cfg.seed, 900)]

    def holds(path: Any) -> bool:
        stem = Path(str(path)).name.split(".")[0]
        return stem not in shard_frames or not set(shard_frames[stem]).isdisjoint(picked)

    files = {c: [p for s in range(1, int(version.manifest["recipe"]["severities"]) + 1) for p in version.files(c, s)
                 if holds(p)] for c in names}
    log(f"snow realism: {', '.join(names)} vs WADS falling snow (label 110), {len(picked)} frames per severity")
    try:  # read here, not in tasks: a bad WADS scan or build file is one line naming it and what it was read for
        return realism_report(version.manifest, files, picked, pre["real"]["weather"]["dir"],
                              pre["real"]["weather"]["files"], cfg.real_duplicates, cfg.seed)
    except (SourceError, IntegrityError, OSError) as e:
        raise ValidationError(f"snow realism for {cfg.corruption}: {e}") from None


def verdict(acc_sim: float, acc_clean: float, val_acc: float, mmd: dict[str, dict[str, Any]],
            cfg: ValidateConfig) -> dict[str, Any]:
    """"natural" / "not natural" / "inconclusive", with every check that decided it."""
    checks = []
    spaces = ["raw", "tsne"] if cfg.verdict_space == "both" else [cfg.verdict_space]
    checks.append({"name": "accuracy on simulated", "ok": acc_sim >= cfg.accuracy_threshold,
                   "detail": f"{acc_sim:.1%} {'≥' if acc_sim >= cfg.accuracy_threshold else '<'} "
                             f"{cfg.accuracy_threshold:.0%}"})
    for space in spaces:
        rs = mmd[space]["pairs"]["real|simulated"]["mmd2"]
        sc = mmd[space]["pairs"]["simulated|clean"]["mmd2"]
        checks.append({"name": f"MMD² {space}: real–simulated < simulated–clean", "ok": rs < sc,
                       "detail": f"{rs:.4g} {'<' if rs < sc else '≥'} {sc:.4g}"})
    gates = [{"name": "classifier separates real weather from real clean (val accuracy)",
              "ok": val_acc >= cfg.min_val_accuracy, "detail": f"{val_acc:.1%} vs ≥ {cfg.min_val_accuracy:.0%}"},
             {"name": "classifier keeps the build's clean frames clean",
              "ok": acc_clean >= cfg.min_clean_accuracy,
              "detail": f"{acc_clean:.1%} vs ≥ {cfg.min_clean_accuracy:.0%}"}]
    if not all(g["ok"] for g in gates):
        v = "inconclusive"
    else:
        v = "natural" if all(c["ok"] for c in checks) else "not natural"
    rule = (f"natural iff accuracy on simulated ≥ {cfg.accuracy_threshold:.0%} and MMD²(real, simulated) < "
            f"MMD²(simulated, clean) on {' and '.join(spaces)} features; inconclusive if val accuracy < "
            f"{cfg.min_val_accuracy:.0%} or accuracy on the build's clean frames < {cfg.min_clean_accuracy:.0%}")
    return {"verdict": v, "rule": rule, "checks": checks, "gates": gates}


#: real scans per side below which a verdict is said to be indicative only (Li et al. train on thousands)
FEW_REAL_SCANS = 20


def cautions(real_scans: dict[str, int], val_scans: int, mmd: dict[str, dict[str, Any]],
             permutations: int) -> list[str]:
    """What limits how far the verdict can be trusted, in words the summaries print beside it: few real scans,
    a validation set too small to measure accuracy, permutation p-values at the smallest value they can take."""
    out = []
    if min(real_scans.values()) < FEW_REAL_SCANS:
        out.append(f"few real scans ({real_scans['weather']} weather, {real_scans['clean']} clean; fewer than "
                   f"{FEW_REAL_SCANS} a side): the accuracies and MMD below are indicative only")
    if val_scans < 10:
        out.append(f"the validation set has {val_scans} scan(s): its accuracy moves in steps of "
                   f"{100 / max(val_scans, 1):.0f} %")
    floor = 1 / (permutations + 1)
    at_floor = sorted({space for space, t in mmd.items() for r in t["pairs"].values() if r["p_value"] <= floor})
    if at_floor:
        out.append(f"some MMD p-values ({', '.join(at_floor)}) are {floor:.3g}, the smallest {permutations} "
                   "permutations can give: raise --permutations to tell smaller ones apart")
    return out


def run_validation(version_dir: str | Path, cfg: ValidateConfig, *, workers: int | None = None,
                   address: str | None = None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validate ``cfg.corruption`` of a built version; write the outputs and return the report."""

    log = log or _log_stderr
    t0 = time.time()
    pre = preflight(version_dir, cfg)  # raises before Ray or torch start

    missing = [m for m in ("torch", "sklearn", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValidationError(f"validation needs {', '.join(missing)}: pip install 'bench-build[validate]'")
    root: Path = pre["root"]
    started = init_ray(workers, address)
    try:
        real = _load_real(pre, cfg, log)
        x = np.concatenate([real["weather"]["clouds"], real["clean"]["clouds"]])
        y = np.concatenate([np.full(len(real["weather"]["clouds"]), WEATHER_LABEL),
                            np.full(len(real["clean"]["clouds"]), CLEAN_LABEL)]).astype(np.int64)
        counts = np.bincount(y, minlength=2)
        if min(counts) < 2:
            raise ValidationError(f"need at least 2 real scans of each kind; read {counts[WEATHER_LABEL]} of "
                                  f"{cfg.real_weather} and {counts[CLEAN_LABEL]} of {cfg.real_clean}")
        tr, va = split_train_val(y, 0.1, cfg.seed)
        model_cfg = PointNetConfig(width=cfg.width)
        tcfg = TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, patience=cfg.patience, seed=cfg.seed,
                           threads=cfg.threads or workers, device=cfg.device)
        log(f"training PointNet (width {cfg.width}, {cfg.points} points) on {len(tr)} scans, val {len(va)}")
        log(training_device_line(cfg, len(tr), tcfg.threads))
        res = train_classifier(x[tr], y[tr], x[va], y[va], model_cfg, tcfg, log=log)
        log(f"best epoch {res.best_epoch}: val accuracy {res.best_val_accuracy:.3f}")
        frames, n_frames = _frame_sample(pre, cfg)
        build = _extract_build(pre, cfg, frames, res)
    finally:
        if started:
            stop_ray()


    device = pick_device(cfg.device)
    real_logits, real_feats, _ = evaluate(load_model(res.state_dict, model_cfg, device),
                                          real["weather"]["clouds"], None, cfg.batch_size, device)
    del x
    pred_clean = build["clean"]["logits"].argmax(1)
    pred_sim = build["simulated"]["logits"].argmax(1)
    acc_clean = float((pred_clean == CLEAN_LABEL).mean())
    acc_sim = float((pred_sim == WEATHER_LABEL).mean())
    by_sev = {str(s): float((pred_sim[build["simulated"]["severity"] == s] == WEATHER_LABEL).mean())
              for s in pre["severities"]}
    n_test = len(pred_clean) + len(pred_sim)
    acc_test = float(((pred_clean == CLEAN_LABEL).sum() + (pred_sim == WEATHER_LABEL).sum()) / n_test)

    groups_full = {"real": real_feats, "simulated": build["simulated"]["features"], "clean": build["clean"]["features"]}
    groups = {g: f[_subset(len(f), cfg.max_embed, cfg.seed, 400 + i)] for i, (g, f) in enumerate(groups_full.items())}
    stacked = np.concatenate(list(groups.values()))
    labels = np.concatenate([np.full(len(f), g) for g, f in groups.items()])
    emb, tsne_params = _tsne(stacked, cfg.seed)
    emb_groups = {g: emb[labels == g] for g in groups}

    realism = _realism(pre, cfg, frames, log)

    mmd = {"raw": mmd_table(groups, permutations=cfg.permutations, seed=cfg.seed),
           "tsne": mmd_table(emb_groups, permutations=cfg.permutations, seed=cfg.seed)}
    decision = verdict(acc_sim, acc_clean, res.best_val_accuracy, mmd, cfg)
    decision["cautions"] = cautions({role: len(real[role]["ids"]) for role in ("weather", "clean")}, len(va),
                                    mmd, cfg.permutations)
    manifest = pre["version"].manifest
    report: dict[str, Any] = {
        "report_version": 1,
        "corruption": cfg.corruption,
        "dataset": manifest["dataset"], "version": manifest["version"], "fingerprint": manifest["fingerprint"],
        "created": datetime.now(UTC).isoformat(timespec="seconds"), "code_version": __version__,
        "seconds": None,
        "config": cfg.as_dict(),
        "seeds": {"validation": cfg.seed, "split": f"SeedSequence([{cfg.seed}, 91])", "torch": cfg.seed,
                  "preprocess": f"SeedSequence([{cfg.seed}, stable_hash(scan key)])", "tsne": cfg.seed,
                  "mmd_permutations": cfg.seed},
        "real": {role: {"dir": str(pre["real"][role]["dir"]), "format": pre["real"][role]["format"],
                        "intensity_scale": FORMATS[pre["real"][role]["format"]]["scale"],
                        "scans_found": len(pre["real"][role]["files"]), "scans_used": len(real[role]["ids"]),
                        "intensity_observed": real[role]["intensity_observed"]} for role in ("weather", "clean")},
        "build": {"frames_total": n_frames, "frames_sampled": n_frames if frames is None else len(frames),
                  "severities": list(pre["severities"]), "clean_examples": len(pred_clean),
                  "simulated_examples": len(pred_sim), "intensity_scale": manifest.get("intensity_scale")},
        "preprocessing": cfg.preprocess.describe(),
        "model": model_cfg.describe(),
        "training": {"train_scans": len(tr), "val_scans": len(va),
                     "train_weather": int((y[tr] == WEATHER_LABEL).sum()),
                     "val_weather": int((y[va] == WEATHER_LABEL).sum()),
                     "split": "9:1 stratified", "epochs": cfg.epochs, "epochs_run": len(res.history),
                     "batch_size": cfg.batch_size, "optimizer": "Adam lr 1e-3, weight decay 1e-4, StepLR(20, 0.7)",
                     "patience": cfg.patience, "stopped_early": res.stopped_early, "best_epoch": res.best_epoch,
                     "device": res.device, "seconds": round(res.seconds, 2),
                     "seconds_per_epoch": round(res.seconds_per_epoch, 4), "history": res.history},
        "accuracy": {"train": res.train_accuracy, "val": res.best_val_accuracy,
                     "test": {"clean": acc_clean, "simulated": acc_sim, "overall": acc_test,
                              "simulated_by_severity": by_sev, "examples": n_test},
                     "real_weather_recognised": float((real_logits.argmax(1) == WEATHER_LABEL).mean())},
        "naturalness": acc_sim,
        "embedding": {"samples": {g: len(f) for g, f in groups.items()}, "tsne": tsne_params,
                      "features": "max-pooled PointNet global feature", "dim": int(stacked.shape[1])},
        "mmd": mmd,
        "verdict": decision,
        "realism": {k: v for k, v in realism.items() if k != "_arrays"},
    }

    out_dir = root / "validation" / cfg.corruption
    report["seconds"] = round(time.time() - t0, 2)
    write_outputs(root, out_dir, report, res, groups, emb_groups, realism.get("_arrays"))
    log(f"{cfg.corruption}: {decision['verdict']} (accuracy on simulated {acc_sim:.1%}); report in {out_dir}")
    return report


def validate_version(version_dir: str | Path, configs: list[ValidateConfig], *, workers: int | None = None,
                     address: str | None = None, log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Preflight every config first (so no training starts if any input is bad), then validate each. A
    `ValidationError` of a later corruption carries the reports written before it as ``done`` (their folders
    stay): the caller says so, and does not claim that nothing was written."""
    for cfg in configs:
        preflight(version_dir, cfg)
    reports: list[dict[str, Any]] = []
    for cfg in configs:
        try:
            reports.append(run_validation(version_dir, cfg, workers=workers, address=address, log=log))
        except ValidationError as e:
            e.done = reports  # type: ignore[attr-defined]
            raise
    return reports

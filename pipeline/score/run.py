"""`bench-build score`: read a version's ground truth and a prediction file, compute its paper's metrics.

Which metrics a version gets follows from its dataset name (or ``metric=`` explicitly):

| metric        | datasets                       | needs                                   |
|---------------|--------------------------------|-----------------------------------------|
| ``kitti-c``   | kitti-c                        | KITTI result dirs                       |
| ``robo3d-det``| robo3d-kitti-c                 | KITTI result dirs                       |
| ``robo3d-seg``| robo3d-semantickitti-c, …      | ``labels`` per key (train ids)          |
| ``nuscenes-det`` | robo3d-nuscenes-c (boxes)   | nuScenes results JSON per partition     |
| ``wod-det``   | robo3d-wod-c (boxes)           | ``boxes``/``scores``/``types`` per key  |
| ``modelnet-c``| modelnet-c                     | ``probs`` or ``pred`` per key           |
| ``modelnet40-e`` | modelnet40-e                | ``probs`` per key                       |
| ``3dos``      | 3dos*                          | ``score`` per key                       |

**One unit: percent.** Every accuracy, AP, mIoU, NDS, mAPH, OA, CE/RCE/RR (and their means), ECE, AUROC, FPR95 and
bug rate is reported in percent (0–100; ModelNet-C's CE 1.000 is 100.0), in the table, the CSV and the JSON, as
most of the papers' tables are. The exceptions, said by `unit_of` and written beside every value: counts
(``N_det``, ``n``, ``n_known``, ``n_unknown``), Pearson correlations, and nuScenes' true-positive errors in the
devkit's own units (mATE m, mASE 1 − IoU, mAOE rad, mAVE m/s, mAAE 1 − accuracy). The metric modules compute in
their papers' own form (ModelNet-C/-E and 3DOS fractions, rounded as the authors' scripts round them), and
`score_version` converts once, so reference parity holds in both.

``kitti-c`` also gets Li et al.'s bug rates (`bug_rates`): BR per partition and class, CR against clean, mCR.
Prediction values are checked element by element (`validate`); predictions for examples of a split that is
not scored (train / val) are dropped with one note in ``ScoreReport.notes``. ``write`` emits strict JSON
(non-finite numbers as ``null``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.manifests.recipe import severity_names as names_of
from bench_build.score.bug_rates import BUGS, corruption_risk
from bench_build.score.detection import score_partitions, unread_folders, unread_note
from bench_build.score.kitti_c import kitti_c_metrics, overall_accuracy
from bench_build.score.modelnet40_e import modelnet40_e_metrics
from bench_build.score.modelnet_c import modelnet_c_metrics
from bench_build.score.open_set import open_set_metrics
from bench_build.score.partial import summary_note
from bench_build.score.predictions import PredictionError, check_keys, class_probs, read_predictions, scalar
from bench_build.score.robo3d import confusion, miou, robo3d_metrics
from bench_build.score.robo3d_det import scene_set, score_det3d, task_of
from bench_build.score.truth import Partition, iter_columns, manifest_of, object_truth
from bench_build.score.validate import ScoreError, fail, point_labels
from bench_build.sources.labels import scored_classes

PERCENT = "%"
#: nuScenes' true-positive errors: the devkit's units, not fractions of anything the papers put in percent
TP_ERROR_UNITS = {"mATE": "m", "mASE": "1 − IoU", "mAOE": "rad", "mAVE": "m/s", "mAAE": "1 − accuracy",
                  "trans_err": "m", "scale_err": "1 − IoU", "orient_err": "rad", "vel_err": "m/s",
                  "attr_err": "1 − accuracy"}
COUNTS = ("n", "n_known", "n_unknown", "N_det")


def unit_of(metric: str) -> str:
    """The unit of a `ScoreReport` row's metric: ``%`` unless it is a count, a correlation or a nuScenes TP error."""
    last = metric.rpartition("/")[2]
    if last in COUNTS:
        return "count"
    if last.startswith("pearson"):
        return "correlation"
    return TP_ERROR_UNITS.get(last, PERCENT)


def _scaled(v: Any, keep: tuple[str, ...], digits: int | None = None, key: str = "") -> Any:
    """``v`` × 100 for every number not under a key in ``keep`` (recursing into dicts); ``digits`` rounds, so a
    value the authors' script rounded to 3 decimals as a fraction stays exact (0.926 → 92.6, not 92.600…01)."""
    if isinstance(v, dict):
        return {k: _scaled(x, keep, digits, k) for k, x in v.items()}
    if key in keep or key.startswith("pearson") or isinstance(v, bool) or not isinstance(v, int | float):
        return v
    x = float(v) * 100
    return round(x, digits) if digits is not None and x == x else x


#: classes of a classification source, the default of ``--num-classes`` (ModelNet-C and ModelNet40-E: 40)
CLASS_COUNTS = {"modelnet40": 40, "modelnet40-off": 40, "scanobjectnn": 15}

METRICS = ("kitti-c", "robo3d-det", "robo3d-seg", "modelnet-c", "modelnet40-e", "3dos",
           "nuscenes-det", "wod-det")


def metric_for(dataset: str, source_kind: str | None = None) -> str:
    d = dataset.lower()
    if d.startswith("robo3d"):
        if "kitti-c" in d and "semantic" not in d:
            return "robo3d-det"
        return "robo3d-seg"
    if d.startswith("modelnet40-e"):
        return "modelnet40-e"
    if d.startswith("modelnet-c"):
        return "modelnet-c"
    if d.startswith("3dos"):
        return "3dos"
    if d.startswith("kitti-c") or source_kind == "kitti":
        return "kitti-c"
    raise ScoreError(f"no metric known for dataset {dataset!r}; pass one of {', '.join(METRICS)}")


@dataclass
class ScoreReport:
    dataset: str
    version: str
    metric: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # corruption, severity, name, value
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # said once, printed and written (e.g. ignored train keys)

    def add(self, corruption: str, severity: int | str, name: str, value: float) -> None:
        self.rows.append({"corruption": corruption, "severity": severity, "metric": name, "value": value,
                          "unit": unit_of(name)})

    def summary_rows(self) -> list[dict[str, Any]]:
        """The summary's numbers as rows, for the CSV: a paper's table needs the means, not only the partitions.

        A mean over corruptions is ``all,all,<metric>`` (``all,all,mCE``; KITTI-C ``all,all,Car/3d/mCE_AP``); one
        over a corruption's severities is ``<corruption>,all,<metric>`` (``fog,all,CE``); KITTI-C's CE per
        partition is ``<corruption>,<severity>,<cls>/<kind>/CE``. Values a partition row already carries (the
        clean accuracy, the bug rates of clean), strings, the unrounded twins of rounded means (``*_exact``, in the
        JSON) and the ground-truth counts are left out. ModelNet40-E's and 3DOS's summaries are their rows."""
        if self.metric in ("modelnet40-e", "3dos"):
            return []
        out: list[dict[str, Any]] = []

        def row(corruption: str, severity: Any, name: str, value: Any) -> None:
            if (isinstance(value, int | float) and not isinstance(value, bool)) or value is None:
                out.append({"corruption": corruption, "severity": severity, "metric": name, "value": value,
                            "unit": unit_of(name)})

        def walk(d: dict[str, Any], prefix: str) -> None:
            for k, v in d.items():
                if k in SUMMARY_ONLY_ELSEWHERE or k.endswith("_exact"):
                    continue
                if k == "per_corruption":
                    for c, per in v.items():
                        for name, x in per.items():
                            if name == "CE_by_severity":
                                for s, ce in x.items():
                                    row(c, s, f"{prefix}CE", ce)
                            elif not name.endswith("_exact"):
                                row(c, "all", prefix + name, x)
                elif isinstance(v, dict):
                    walk(v, "" if k == "bug_rates" else f"{prefix}{k}/")
                else:
                    row("all", "all", prefix + k, v)

        walk(self.summary, "")
        return out

    def write(self, out: str | Path) -> tuple[Path, Path]:
        """``<out>.csv`` (one row per corruption × severity × metric, then `summary_rows`: the means) and
        ``<out>.json`` (everything)."""
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        csv_path, json_path = out.with_suffix(".csv"), out.with_suffix(".json")
        with csv_path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["corruption", "severity", "metric", "value", "unit"])
            w.writeheader()
            w.writerows(_strict([*self.rows, *self.summary_rows()]))  # an undefined value (nan) is empty
        doc = {"dataset": self.dataset, "version": self.version, "metric": self.metric, "units": UNITS_NOTE,
               "summary": self.summary, "rows": self.rows, "notes": self.notes}
        # strict JSON: json.dumps writes NaN/Infinity literals for non-finite floats without calling `default`,
        # so they are replaced before, and allow_nan=False proves none is left
        json_path.write_text(json.dumps(_strict(doc), indent=1, allow_nan=False, default=str))
        return csv_path, json_path


#: summary keys the CSV's summary rows leave out: words, the clean accuracy and clean bug rates (a partition row has
#: them), ground-truth counts and the partial-version note (in the JSON and the printed notes)
SUMMARY_ONLY_ELSEWHERE = frozenset({"note", "accuracy", "baseline", "clean", "BR_clean", "ground_truth",
                                    "corruptions_scored", "corruptions"})

UNITS_NOTE = ("values in percent (0-100) unless the row's unit says otherwise: counts, correlations, "
              "nuScenes TP errors (m, rad, m/s, 1 - IoU, 1 - accuracy); the summary follows its rows' units")


def _strict(v: Any) -> Any:
    """``v`` with every non-finite float as None and NumPy scalars as Python ones (JSON ``null``, numbers)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return v if np.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_strict(x) for x in v]
    return v


#: the metrics that read class probabilities, and so ``num_classes``
CLASSIFICATION_METRICS = ("modelnet-c", "modelnet40-e")


def score_version(version_dir: str | Path, predictions: str | Path, *, metric: str | None = None,
                  classes: tuple[str, ...] = ("Car", "Pedestrian", "Cyclist"), num_classes: int | None = None,
                  ignore_label: int | None = 0, source_root: str | Path | None = None,
                  workers: int | None = None) -> ScoreReport:
    manifest = manifest_of(version_dir)
    dataset = manifest["dataset"]
    if not Path(predictions).exists():  # said as such, not as "predictions are a directory of …"
        raise PredictionError(f"{predictions}: no such file or directory")
    # ---- Robo3D nuScenes-C / WOD-C: detection or segmentation, from the predictions (bench_build.score.robo3d_det)

    if scene_set(dataset) is not None:
        metric = task_of(dataset, predictions, metric)
    # ----
    metric = metric or metric_for(dataset, manifest.get("source", {}).get("kind"))
    if metric not in METRICS:
        raise ScoreError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    if not manifest.get("shards"):  # else an empty report would read as a score
        raise ScoreError(f"{version_dir}: the version has no partitions: nothing to score")
    report = ScoreReport(dataset, manifest["version"], metric)
    if num_classes is not None and metric not in CLASSIFICATION_METRICS:  # said, not dropped without a word
        report.notes.append(f"--num-classes {num_classes} is not used: {metric} reads "
                            + ("one normality score per example" if metric == "3dos" else "labels or boxes")
                            + ", not class probabilities")

    severity_names = names_of(manifest)
    try:
        if metric in ("nuscenes-det", "wod-det"):

            score_det3d(report, version_dir, predictions, severity_names, source_root)
        elif metric in ("kitti-c", "robo3d-det"):
            _detection(report, version_dir, Path(predictions), severity_names, classes, workers)
        elif metric == "robo3d-seg":
            _segmentation(report, version_dir, predictions, dataset, ignore_label)
        else:
            _objects(report, version_dir, predictions, dataset, manifest, num_classes)
    except IsADirectoryError as e:
        # a folder where a prediction or result file goes (``preds.jsonl/``, ``clean/000000.txt/``), wherever a
        # reader opens it: bad input, and scoring writes nothing, so a refusal (exit 2), not the CLI's exit 1 for
        # a path of the wrong kind met after work may have begun
        if e.filename is None:
            raise
        raise PredictionError(f"{e.filename}: is a directory where a file was expected") from None
    return report


def _detection(report: ScoreReport, version_dir, pred_root: Path, severity_names, classes,
               workers: int | None = None) -> None:

    if not pred_root.is_dir():
        raise PredictionError(f"{pred_root}: detection predictions are a directory of KITTI result files "
                              "(<corruption>/<severity>/<frame>.txt)")
    if report.metric == "robo3d-det":
        classes = ("Car",)
    scored = score_partitions(version_dir, pred_root, severity_names=severity_names, classes=classes,
                              bugs=report.metric == "kitti-c", workers=workers)
    aps = {p: r.ap for p, r in scored.items()}
    for part, res in aps.items():
        for cls, by_metric in res.items():
            for m, by_diff in by_metric.items():
                for diff, v in by_diff.items():
                    for ap in ("AP_R40", "AP_R11"):
                        report.add(part.corruption, part.severity, f"{cls}/{m}/{diff}/{ap}", v[ap])
    if report.metric == "robo3d-det":
        acc = {(p.corruption, p.severity): r["Car"]["3d"]["moderate"]["AP_R40"] for p, r in aps.items()}
        report.summary = _robo3d_summary(acc, "kitti-c", version_dir)
        report.summary["accuracy"] = "Car moderate 3D AP (R40)"
        _unread(report, pred_root, scored, severity_names)
        _ground_truth_counts(report, aps, classes)
        return
    summary: dict[str, Any] = {}
    has_clean = any(p.corruption == "clean" for p in aps)
    for cls in classes:
        for m in ("3d", "bev"):
            oa = {(p.corruption, p.severity): overall_accuracy(r[cls][m]) for p, r in aps.items()}
            if has_clean:  # every mean compares with clean: without it (a partial pull) the partitions stand alone
                summary[f"{cls}/{m}"] = kitti_c_metrics(oa) if len(oa) > 1 else {"OA_clean": oa[("clean", 0)]}
            for (c, s), v in oa.items():
                report.add(c, s, f"{cls}/{m}/OA", v)
    if not has_clean:
        summary["note"] = summary_note(version_dir, [(p.corruption, p.severity) for p in aps],
                                       "CE, CE_AP, mCE_AP or bug-rate CR/mCR", "")
    report.summary = summary
    _coverage(report, version_dir, scored, pred_root, severity_names, has_clean)
    _ground_truth_counts(report, aps, classes)
    _bug_rates(report, {(p.corruption, p.severity): r.bugs for p, r in scored.items() if r.bugs is not None})


def _coverage(report: ScoreReport, version_dir, scored: dict[Any, Any], pred_root: Path, severity_names,
              has_clean: bool = True) -> None:
    """Say when the mean metrics average fewer corruptions than the benchmark defines (a partial pull), and which
    prediction folders no partition of the version reads (`unread_folders`: a typo there would be silently unscored)."""
    manifest = manifest_of(version_dir)
    defined = [c["name"] for c in manifest.get("recipe", {}).get("corruptions", [])]
    present = sorted({p.corruption for p in scored if p.corruption != "clean"})
    if defined and len(present) < len(defined):
        report.summary["corruptions_scored"] = {"scored": present, "defined": len(defined)}
        report.notes.append(f"{len(present)} of the benchmark's {len(defined)} corruptions are in this version "
                            f"({', '.join(present) or 'none'})" + (
                                ": the m-metrics average those only and are not the paper's figures (pull or build "
                                "the whole version to compare)" if has_clean else ""))
    _unread(report, pred_root, scored, severity_names)


def _unread(report: ScoreReport, pred_root: Path, scored: Iterable[Partition], severity_names) -> None:
    """Name the prediction folders and files no partition reads (`unread_folders`): a typo'd corruption, a severity
    the version lacks, a partition nested too deep or a result file beside a corruption's severity folders would
    otherwise be silently unscored."""
    if unread := unread_folders(pred_root, scored, severity_names):
        report.notes.append(unread_note(pred_root, unread))


def _ground_truth_counts(report: ScoreReport, aps: dict[Any, Any], classes: tuple[str, ...]) -> None:
    """Say how many ground-truth objects each class and difficulty has (in the clean partition, or the first), and
    where fewer than 40 cap AP_R40: the devkit samples recall at 40 points, so with n < 40 objects even perfect
    predictions score at most 100·(n − 1)/40 — a small build's AP is not comparable with a paper's."""
    if not aps:
        return
    part = next((p for p in aps if p.corruption == "clean"), next(iter(aps)))
    counts = {cls: {diff: int(v.get("num_gt", 0)) for diff, v in aps[part][cls]["3d"].items()} for cls in classes
              if cls in aps[part]}
    report.summary["ground_truth"] = counts
    report.notes.append("ground-truth objects (" + f"{part.corruption}/{part.severity}): " + "; ".join(
        f"{cls} " + ", ".join(f"{d} {n}" for d, n in by.items()) for cls, by in counts.items()))
    capped = [f"{cls} {d} ({n}: at most {100 * max(n - 1, 0) / 40:.1f})" for cls, by in counts.items()
              for d, n in by.items() if 0 < n < 40]
    if capped:
        report.notes.append("fewer than 40 ground-truth objects cap AP_R40 at 100·(n − 1)/40 even for perfect "
                            "predictions (the KITTI devkit's 40 recall points): " + ", ".join(capped)
                            + "; score a larger build to compare with published numbers")
    empty = [f"{cls} {d}" for cls, by in counts.items() for d, n in by.items() if n == 0]
    if empty:
        report.notes.append("no ground-truth objects, so AP is 0 whatever the predictions: " + ", ".join(empty))


def _bug_rates(report: ScoreReport, br: dict[tuple[str, int], dict[str, dict[str, float]]]) -> None:
    """Li et al.'s BR per partition and class (rows ``<cls>/BR_TD`` …, ``<cls>/N_det``), CR per corrupted
    partition (``<cls>/CR_TD`` …), and per corruption + mCR under ``summary["bug_rates"]``."""

    for (c, s), by_cls in br.items():
        for cls, v in by_cls.items():
            report.add(c, s, f"{cls}/N_det", v["N_det"])
            for b in BUGS:
                report.add(c, s, f"{cls}/BR_{b}", v[f"BR_{b}"])
    if ("clean", 0) not in br or len(br) < 2:
        return
    risk = corruption_risk(br)
    for cls in risk:  # a rate per detection is undefined where a class has none: say where, not just "nan"
        none = [f"{c}/{s}" for (c, s), by_cls in sorted(br.items()) if by_cls.get(cls, {}).get("N_det") == 0]
        if none:
            report.notes.append(f"{cls}: no detections in {len(none)} partition(s) ({', '.join(none[:4])}"
                                f"{', …' if len(none) > 4 else ''}): a bug rate is per detection (BR = N_bug / "
                                "N_det), so it is undefined there and the mCR it enters is nan")
    for cls, r in risk.items():
        for c, per in r["per_corruption"].items():
            for s, v in per["CR_by_severity"].items():
                for b in BUGS:
                    report.add(c, s, f"{cls}/CR_{b}", v[f"CR_{b}"])
    report.summary["bug_rates"] = risk


def _robo3d_summary(acc: dict[tuple[str, int], float], table: str, version_dir) -> dict[str, Any]:
    """mCE/mRR when the version has its clean partition and every corruption of the baseline table; otherwise
    the per-partition accuracies stand alone and the summary says why there is no mCE (and, for a partial pull,
    what adds the missing partitions)."""

    try:
        return robo3d_metrics(acc, table)
    except ScoreError as e:
        return {"clean": acc.get(("clean", 0)), "note": summary_note(version_dir, acc, "mCE/mRR", e)}


def _segmentation(report: ScoreReport, version_dir, predictions, dataset: str, ignore_label: int | None) -> None:

    preds = read_predictions(predictions)
    gts: dict[tuple[str, int], list[tuple[str, np.ndarray]]] = {}
    keys = []
    # raw ids → the classes the benchmark scores (`scored_classes`: SemanticKITTI's 19 and nuScenes-lidarseg's 16
    # train ids of the recorded learning map, WOD-C's recorded classes; 0 = ignored, as is a ground-truth id past them:
    # WOD-C's 23, 24, 25 of the points fog, snow or crosstalk create); a larger predicted label is no class
    classes = scored_classes(manifest_of(version_dir).get("source"))
    max_label = None if classes is None else len(classes.names) - 1
    ids = ("a train id 0…{max} of the benchmark's learning map" if classes is None or classes.mapped else
           f"a class id 0…{{max}} of the {len(classes.names)} classes the build records")
    for part, cols in iter_columns(version_dir, ["key", "semantic"]):
        if "semantic" not in cols:
            raise ScoreError(f"{version_dir}: no 'semantic' column: not a segmentation benchmark")
        for k, sem in zip(cols["key"], cols["semantic"], strict=True):
            if sem is None:
                raise ScoreError(f"{version_dir}: example {k} has no semantic labels")
            g = np.asarray(sem, np.int64) & 0xFFFF
            if classes is not None:
                g = classes.of(g)
            gts.setdefault((part.corruption, part.severity), []).append((k, g))
            keys.append(k)
    if not gts:
        raise ScoreError(f"{version_dir}: the version has no partitions")
    check_keys(predictions, preds, keys, report.dataset)
    num_classes = 1 + max(int(g.max(initial=0)) for v in gts.values() for _, g in v)

    # validated arrays are not kept: a full segmentation benchmark has billions of labels, already held once
    for k in keys:
        num_classes = max(num_classes, 1 + int(point_labels(predictions, preds, k, max_label, ids).max(initial=0)))
    acc = {}
    for part, items in gts.items():
        conf = np.zeros((num_classes, num_classes), np.int64)
        for k, g in items:
            p = np.asarray(preds[k]["labels"], np.int64)
            if len(p) != len(g):
                raise fail(predictions, preds, k, f"{len(p)} labels for {len(g)} points")
            conf += confusion(g, p, num_classes, ignore_label)
        acc[part] = miou(conf, ignore_label)[0]
        report.add(part[0], part[1], "mIoU", acc[part])
    table = "nuscenes-c-seg" if "nuscenes" in dataset else "semantickitti-c"
    report.summary = _robo3d_summary(acc, table, version_dir)


def _ignore_other_splits(report: ScoreReport, path, preds: dict[str, Any], other_split: dict[str, str],
                         test_keys: list[str]) -> None:
    """Predictions for the build's train / val examples are dropped with one note: only test is scored. A file of
    nothing else is refused as such (not as a file holding no predictions)."""
    ignored = [k for k in preds if k in other_split]
    if not ignored:
        return
    splits = sorted({other_split[k] for k in ignored})
    if len(ignored) == len(preds):
        raise PredictionError(f"{path}: all {len(ignored)} predictions are for {'/'.join(splits)} examples; only the "
                              f"test split is scored, and none of its {len(test_keys)} examples has one, e.g. "
                              f"{test_keys[0]}")
    for k in ignored:
        del preds[k]
    report.notes.append(f"{path}: {len(ignored)} predictions for {'/'.join(splits)} examples were ignored "
                        f"(only the test split is scored), e.g. {ignored[0]}")


def _check_class_count(version_dir, class_id: np.ndarray, k: int, num_classes: int | None, kind: str | None) -> None:
    """Refuse a class count below the ground truth's: probabilities of k classes can never name a class id ≥ k, so
    every such example would count as an error and the accuracy, ECE and OA would be wrong without a word."""
    top = int(class_id.max(initial=-1))
    if top < k:
        return
    said = f"--num-classes {num_classes}" if num_classes else f"the default class count {k} (source {kind!r})"
    raise ScoreError(f"{said}: the ground truth of {version_dir} has class ids up to {top}, so it has at least "
                     f"{top + 1} classes; give --num-classes the benchmark's class count")


def _inverted_score_note(report: ScoreReport, scenarios: list[dict[str, Any]]) -> None:
    """Say when every scenario ranks the unknown shapes above the known ones (AUROC < 50 against the union, or the one
    unknown set): the sign of an anomaly score (energy, a distance: higher = unknown), written where 3DOS reads a
    normality score, turns AUROC into 100 − AUROC, and no model is that consistently worse than chance."""
    aurocs = [(res.get("union") or next(iter(res.values())))["AUROC"] for res in scenarios if res]
    if aurocs and all(a < 50 for a in aurocs):
        report.notes.append(f"AUROC is below 50 in every scenario ({len(aurocs)}): 3DOS reads 'score' as a normality "
                            "score, higher = known (MSP, max logit, negative energy); an anomaly score (higher = "
                            "unknown: energy, a distance) must be negated, which turns each AUROC into 100 − AUROC")


def _flat_fpr95_note(report: ScoreReport, flats: list[tuple[str, float, float]]) -> None:
    """Say where FPR95 is a range: the ROC runs flat at exactly 95 % TPR, and 3D_OS's form (kept) takes its far end."""
    if flats:
        shown = "; ".join(f"{label} {100 * lo:.1f}–{100 * hi:.1f} %" for label, lo, hi in flats[:4])
        more = f" and {len(flats) - 4} more" if len(flats) > 4 else ""
        report.notes.append(f"FPR95 is a range where the ROC runs flat at exactly 95 % TPR ({shown}{more}): FPR95 is "
                            "its high end, as 3D_OS's evaluator computes it (np.interp on the ROC), kept for parity "
                            "with published numbers; the first threshold that accepts 95 % of the known shapes gives "
                            "the low end")


def _objects(report: ScoreReport, version_dir, predictions, dataset: str, manifest, num_classes) -> None:

    truth = object_truth(version_dir)
    if not truth.keys:  # only the test split is scored: without it the table would be empty, read as a score
        splits = sorted(set(truth.other_split.values()))
        holds = f"holds only the {', '.join(splits)} split{'s' * (len(splits) > 1)}" if splits else "has no examples"
        raise ScoreError(f"{version_dir}: no test examples to score: the version {holds}; score a build that holds "
                         "the test split")
    kind = (manifest.get("source") or {}).get("kind")
    k = num_classes or CLASS_COUNTS.get(kind, 40)
    if report.metric != "3dos":  # the option against the ground truth, before a (large) prediction file is read
        _check_class_count(version_dir, truth.class_id, k, num_classes, kind)
    preds = read_predictions(predictions)
    _ignore_other_splits(report, predictions, preds, truth.other_split, truth.keys)
    check_keys(predictions, preds, truth.keys, dataset)
    if report.metric == "3dos":
        if truth.known is None:
            raise ScoreError(f"{version_dir}: no 'known' column: not a 3DOS build")
        s = scalar(predictions, preds, truth.keys, "score")
        scenarios = truth.scenario or [None] * len(truth.keys)
        summary: dict[str, Any] = {}
        scored: list[dict[str, Any]] = []
        flats: list[tuple[str, float, float]] = []
        for sc in dict.fromkeys(scenarios):
            idx = [i for i, x in enumerate(scenarios) if x == sc]
            unknown: dict[str, list[float]] = {}
            for i in idx:
                if not truth.known[i]:
                    name = (truth.unknown_set[i] if truth.unknown_set else None) or "unknown"
                    unknown.setdefault(name, []).append(s[i])
            known_scores = [s[i] for i in idx if truth.known[i]]
            flat: dict[str, tuple[float, float]] = {}
            res = _scaled(open_set_metrics(known_scores, unknown, flat), COUNTS)
            scored.append(res)
            flats += [(name if sc is None else f"{sc}/{name}", lo, hi) for name, (lo, hi) in flat.items()]
            for name, v in res.items():
                label = name if sc is None else f"{sc}/{name}"
                report.add("clean", 0, f"{label}/AUROC", v["AUROC"])
                report.add("clean", 0, f"{label}/FPR95", v["FPR95"])
            if sc is None:
                summary = res
            else:
                summary[sc] = res
        report.summary = summary
        _inverted_score_note(report, scored)
        _flat_fpr95_note(report, flats)
        return
    probs = class_probs(predictions, preds, truth.keys, k, allow_pred=report.metric == "modelnet-c",
                        distribution=report.metric == "modelnet40-e", k_from="--num-classes" if num_classes else None)
    parts = [(p.corruption, p.severity) for p in truth.partition]
    groups: dict[tuple[str, int], list[int]] = {}
    for i, p in enumerate(parts):
        groups.setdefault(p, []).append(i)
    if report.metric == "modelnet-c":
        oa = {p: float(np.mean(probs[idx].argmax(1) == truth.class_id[idx])) for p, idx in groups.items()}
        for (c, s), v in oa.items():
            report.add(c, s, "OA", 100 * v)
        # eval.py's arithmetic on fractions rounded to 3 decimals, then percent with the same precision
        try:
            report.summary = _scaled(modelnet_c_metrics(oa), (), digits=1)
        except ScoreError as e:  # no clean partition or not every corruption (a partial pull): OA per partition
            report.summary = {"note": summary_note(version_dir, oa, "CE/RCE/mCE/RmCE/mOA", e)}
            if ("clean", 0) in oa:
                report.summary["OA_clean"] = round(100 * round(oa[("clean", 0)], 3), 1)
        return
    per = {f"{c}/{s}": modelnet40_e_metrics(probs[idx], truth.class_id[idx],
                                            None if truth.sigma_mean is None else truth.sigma_mean[idx])
           for (c, s), idx in groups.items()}
    noisy = [i for i, p in enumerate(parts) if p[0] != "clean"]
    if noisy:
        per["noisy (pooled)"] = modelnet40_e_metrics(probs[noisy], truth.class_id[noisy],
                                                     None if truth.sigma_mean is None else truth.sigma_mean[noisy])
    per = _scaled(per, COUNTS)
    for name, m in per.items():
        c, _, s = name.partition("/")
        for metric, v in m.items():
            if metric != "n":
                report.add(c, s or "all", metric, v)
    report.summary = per

"""ModelNet-C, Li et al. KITTI-C, Robo3D, ModelNet40-E and 3DOS metrics against hand-computed values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench_build.manifests.manifest import MANIFEST_VERSION
from bench_build.score.baselines import dgcnn_oa, load_baseline, robo3d_baseline
from bench_build.score.kitti_c import kitti_c_metrics
from bench_build.score.modelnet40_e import ece, error_auroc, modelnet40_e_metrics, pearson
from bench_build.score.modelnet_c import CORRUPTIONS, modelnet_c_metrics
from bench_build.score.open_set import open_set_metrics
from bench_build.score.rank import auroc, fpr_at_tpr, fpr_span_at_tpr
from bench_build.score.robo3d import confusion, miou, robo3d_metrics
from bench_build.score.run import ScoreReport
from bench_build.score.validate import ScoreError


def test_baseline_files_carry_values_and_citations():
    assert dgcnn_oa() == {"clean": 0.926, "scale": 0.906, "jitter": 0.684, "rotate": 0.785, "dropout_global": 0.752,
                          "dropout_local": 0.793, "add_global": 0.705, "add_local": 0.725}
    assert "Ren" in load_baseline("modelnet_c_dgcnn")["citation"]
    assert "@inproceedings{kong2023robo3d" in load_baseline("robo3d")["bibtex"]
    assert robo3d_baseline("kitti-c")["values"]["cross_sensor"] == 45.12
    with pytest.raises(ScoreError, match="no Robo3D baseline table"):
        robo3d_baseline("waymo")


def _mnc(oa_by_corruption: dict[str, list[float]], clean: float) -> dict:
    oa = {("clean", 0): clean}
    for c, levels in oa_by_corruption.items():
        oa.update({(c, s): v for s, v in enumerate(levels, 1)})
    return modelnet_c_metrics(oa)


def test_modelnet_c_dgcnn_itself_scores_one():
    base = dgcnn_oa()
    m = _mnc({c: [base[c]] * 5 for c in CORRUPTIONS}, 0.926)
    assert m["mCE"] == 1.0 and m["RmCE"] == 1.0 and m["OA_clean"] == 0.926
    assert m["mOA"] == round(sum(base[c] for c in CORRUPTIONS) / 7, 3)


def test_modelnet_c_hand_computed_with_eval_py_rounding():
    base = dgcnn_oa()
    levels = {c: [base[c]] * 5 for c in CORRUPTIONS}
    levels["scale"] = [0.92, 0.91, 0.90, 0.89, 0.88]  # mean 0.900
    levels["jitter"] = [0.8125] * 5  # mean 0.8125 → round half-even on the binary value → 0.812
    m = _mnc(levels, 0.93041)  # clean rounds to 0.930
    s, j = m["per_corruption"]["scale"], m["per_corruption"]["jitter"]
    assert s["OA"] == 0.9 and s["CE"] == round(0.1 / 0.094, 3) == 1.064
    assert s["RCE"] == round((0.930 - 0.900) / (0.926 - 0.906), 3) == 1.5
    assert j["OA"] == 0.812 and j["CE"] == round(0.188 / 0.316, 3) == 0.595
    assert j["RCE"] == round((0.930 - 0.812) / (0.926 - 0.684), 3) == 0.488
    # the other five: CE 1, RCE (0.930 − b)/(0.926 − b)
    rces = [round((0.930 - base[c]) / (0.926 - base[c]), 3) for c in CORRUPTIONS[2:]]
    assert m["mCE"] == round((1.064 + 0.595 + 5 * 1.0) / 7, 3) == 0.951
    assert m["RmCE"] == round((1.5 + 0.488 + sum(rces)) / 7, 3)
    # the recipe's names are accepted for eval.py's
    renamed = {("drop_global" if c == "dropout_global" else c, s): v
               for (c, s), v in {(c, s): base[c] for c in CORRUPTIONS for s in range(1, 6)}.items()}
    assert modelnet_c_metrics({("clean", 0): 0.926, **renamed})["mCE"] == 1.0


def test_modelnet_c_needs_every_corruption_and_level():
    base = dgcnn_oa()
    levels = {c: [base[c]] * 5 for c in CORRUPTIONS[:-1]}
    with pytest.raises(ValueError, match="missing add_local"):
        _mnc(levels, 0.9)
    levels["add_local"] = [0.7] * 4
    with pytest.raises(ValueError, match="need levels 1–5"):
        _mnc(levels, 0.9)


def test_kitti_c_ce_is_absolute_ap_drop():
    m = kitti_c_metrics({("clean", 0): 80.0, ("fog", 1): 70.0, ("fog", 2): 60.0, ("snow", 1): 79.0})
    assert m["per_corruption"]["fog"]["CE_AP"] == pytest.approx(15.0)
    assert m["per_corruption"]["snow"]["CE_AP"] == pytest.approx(1.0)
    assert m["mCE_AP"] == pytest.approx((10 + 20 + 1) / 3)
    assert m["per_corruption"]["fog"]["CE_by_severity"] == {1: 10.0, 2: 20.0}


ROBO3D = ("fog", "wet_ground", "snow", "motion_blur", "beam_missing", "crosstalk", "incomplete_echo", "cross_sensor")


def _robo(clean: float, per: list[float]) -> dict:
    acc = {("clean", 0): clean}
    for c, v in zip(ROBO3D, per, strict=True):
        acc.update({(c, s): v for s in (1, 2, 3)})
    return acc


def test_robo3d_reproduces_the_papers_second_row():
    # Robo3D Tab. 13 (AP) → Tab. 11 (CE) and Tab. 12 (RR), SECOND on KITTI-C, baseline CenterPoint
    m = robo3d_metrics(_robo(68.49, [53.24, 68.51, 54.92, 49.19, 54.14, 67.19, 59.25, 48.00]), "kitti-c")
    ces = [99.70, 100.64, 87.64, 97.60, 91.50, 96.50, 99.15, 94.75]
    rrs = [77.73, 100.03, 80.19, 71.82, 79.05, 98.10, 86.51, 70.08]
    for c, ce, rr in zip(ROBO3D, ces, rrs, strict=True):
        assert m["per_corruption"][c]["CE"] == pytest.approx(ce, abs=0.011)
        assert m["per_corruption"][c]["RR"] == pytest.approx(rr, abs=0.011)
    assert m["mCE"] == pytest.approx(95.93, abs=0.011) and m["mRR"] == pytest.approx(82.94, abs=0.011)
    # MinkUNet-34 on SemanticKITTI-C (Tab. 10 → Tab. 8/9: mCE 100.61, mRR 80.22)
    m = robo3d_metrics(_robo(63.78, [53.54, 54.27, 50.17, 33.80, 57.35, 58.38, 54.88, 46.95]), "semantickitti-c")
    assert m["mCE"] == pytest.approx(100.61, abs=0.011) and m["mRR"] == pytest.approx(80.22, abs=0.011)
    # the score CSV's summary rows: the paper's rounded means and per-corruption CE / RR, not the *_exact twins
    report = ScoreReport("robo3d-semantickitti-c", "1", "robo3d-seg", summary={**m, "accuracy": "mIoU"})
    rows = {(r["corruption"], r["severity"], r["metric"]): r["value"] for r in report.summary_rows()}
    assert rows[("all", "all", "mCE")] == m["mCE"] and rows[("all", "all", "mRR")] == m["mRR"]
    assert rows[("fog", "all", "CE")] == m["per_corruption"]["fog"]["CE"] and ("fog", "all", "acc") in rows
    assert len(rows) == 2 + 3 * len(ROBO3D)  # no clean (a partition row), baseline name, accuracy or *_exact


def test_robo3d_ce_sums_over_levels():
    acc = _robo(70.0, [60.0] * 8)
    acc[("fog", 1)], acc[("fog", 2)], acc[("fog", 3)] = 50.0, 60.0, 70.0  # Σ(1 − acc) = 1.2
    m = robo3d_metrics(acc, "kitti-c")
    assert m["per_corruption"]["fog"]["CE_exact"] == pytest.approx(100 * 1.2 / (3 * (1 - 0.531)))
    assert m["per_corruption"]["fog"]["RR_exact"] == pytest.approx(100 * 1.8 / (3 * 0.70))
    del acc[("snow", 2)]
    with pytest.raises(ValueError, match="different severity levels"):
        robo3d_metrics(acc, "kitti-c")


def test_robo3d_without_clean_accuracy_says_why_there_is_no_mrr():
    """A clean accuracy of 0 (a model that detects nothing, or predicts every point as ignored) made mRR nan,
    printed as "mRR nan" beside a valid mCE with exit 0 and no word why."""
    import io

    from rich.console import Console

    from bench_build.score.report import print_report

    m = robo3d_metrics(_robo(0.0, [0.0] * 8), "kitti-c")
    assert m["mCE"] > 0 and m["mRR_exact"] != m["mRR_exact"]
    assert m["note"].startswith("no RR/mRR (nan): the clean accuracy is 0 and RR divides by it")
    report = ScoreReport("robo3d-kitti-c", "1", "robo3d-det", summary=m)
    out = io.StringIO()
    print_report(report, Console(file=out))
    assert "note: no RR/mRR (nan): the clean accuracy is 0" in out.getvalue()
    assert "note" not in robo3d_metrics(_robo(68.49, [50.0] * 8), "kitti-c")


def test_only_what_the_metric_refuses_becomes_a_summary_note(monkeypatch, tmp_path):
    """A version the Robo3D means do not apply to gets a note in place of mCE/mRR (`ScoreError`); the notes caught
    every ValueError, so a bug in the metric's arithmetic read as "no mCE/mRR" and its traceback was lost."""
    import bench_build.score.robo3d_det as robo3d_det
    import bench_build.score.run as run
    from bench_build.score.truth import Partition

    (tmp_path / "manifest.json").write_text(json.dumps({"manifest_version": MANIFEST_VERSION, "dataset": "x"}))
    acc = _robo(70.0, [60.0] * 8)
    del acc[("snow", 2)]
    assert "different severity levels" in run._robo3d_summary(acc, "kitti-c", tmp_path)["note"]

    def bug(*a, **k):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(run, "robo3d_metrics", bug)
    with pytest.raises(ValueError, match="broadcast"):
        run._robo3d_summary(acc, "kitti-c", tmp_path)
    monkeypatch.setattr(robo3d_det, "robo3d_metrics", bug)
    monkeypatch.setattr(robo3d_det, "score_waymo", lambda *a: ({Partition("clean", 0): {"mAPH/L2": 60.0}}, []))
    with pytest.raises(ValueError, match="broadcast"):
        robo3d_det.score_det3d(ScoreReport("robo3d-wod-c", "1", "wod-det"), tmp_path, tmp_path, [], None)


def test_miou_hand_computed():
    gt = np.array([0, 1, 1, 2, 2, 2, 0])
    pred = np.array([0, 1, 2, 2, 2, 1, 2])
    conf = confusion(gt, pred, 3, ignore_label=0)  # the two label-0 points do not count
    value, iou = miou(conf, ignore_label=0)
    assert np.isnan(iou[0]) and iou[1] == pytest.approx(1 / 3) and iou[2] == pytest.approx(2 / 4)
    assert value == pytest.approx(100 * (1 / 3 + 1 / 2) / 2)


# ModelNet40-E: four examples chosen away from bin edges
PROBS = np.array([[0.88, 0.12], [0.62, 0.38], [0.33, 0.67], [0.56, 0.44]])
LABELS = np.array([0, 1, 1, 0])  # the second is wrong


def test_modelnet40_e_hand_computed():
    # bins: 0.88 → (0.8,0.9] acc 1; 0.62 and 0.67 → (0.6,0.7] acc 0.5, conf 0.645; 0.56 → (0.5,0.6] acc 1
    assert ece(PROBS, LABELS) == pytest.approx(0.12 / 4 + 2 / 4 * abs(0.645 - 0.5) + 0.44 / 4)
    # the error (uncertainty 0.38) ranks above 2 of the 3 correct ones (0.12, 0.33, 0.44)
    assert error_auroc(PROBS, LABELS) == pytest.approx(2 / 3)
    sigma = np.array([0.01, 0.03, 0.02, 0.04])
    unc = 1 - PROBS.max(1)
    r = np.corrcoef(sigma, unc)[0, 1]
    m = modelnet40_e_metrics(PROBS, LABELS, sigma)
    assert m["accuracy"] == 0.75
    assert m["pearson_all"] == pytest.approx(3 / 4 * r)  # the authors' mean of unbiased z-score products
    ok = LABELS == PROBS.argmax(1)
    assert m["pearson_correct"] == pytest.approx(2 / 3 * np.corrcoef(sigma[ok], unc[ok])[0, 1])
    assert np.isnan(pearson([1.0], [2.0])) and np.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert np.isnan(error_auroc(PROBS[[0, 2]], LABELS[[0, 2]]))  # no errors: undefined
    # the first bin is closed at 0: confidence exactly 0.1 falls in it
    assert ece(np.array([[0.1] * 10]), np.array([0])) == pytest.approx(abs(0.1 - 1.0))


def test_open_set_hand_computed():
    known = np.array([0.9, 0.8, 0.7, 0.6])
    m = open_set_metrics(known, {"A": np.array([0.6, 0.2]), "B": np.array([0.95, 0.1])})
    # A: known beat 0.6 three times and tie once (½), beat 0.2 four times → 7.5/8
    assert m["A"]["AUROC"] == pytest.approx(7.5 / 8)
    # ROC of A goes (fpr 0, tpr .75) → (.5, 1) in one step (the tie): at tpr .95, fpr = .8 · .5
    assert m["A"]["FPR95"] == pytest.approx(0.4)
    assert m["B"]["AUROC"] == pytest.approx(4 / 8) and m["B"]["FPR95"] == pytest.approx(0.5)
    assert m["union"]["AUROC"] == pytest.approx(11.5 / 16)
    assert m["union"]["FPR95"] == pytest.approx(0.25 + 0.8 * 0.25)
    assert m["union"]["n_unknown"] == 4 and m["A"]["n_known"] == 4


def test_rank_metrics_equal_sklearn():
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        y = rng.random(n) < 0.6
        if y.all() or not y.any():
            continue
        s = np.round(rng.normal(y * 0.7, 1.0), 1)  # rounding makes ties
        assert auroc(s, y) == pytest.approx(roc_auc_score(y, s))
        fpr, tpr, _ = roc_curve(y, s)
        assert fpr_at_tpr(s, y) == pytest.approx(np.interp(0.95, tpr, fpr))


def test_fpr95_on_a_flat_stretch_is_the_high_end_and_the_span_is_returned():
    from sklearn.metrics import roc_curve

    # 19 of 20 known shapes score 10: 95 % TPR is reached with no unknown accepted; the unknowns at 5…1 keep the ROC
    # flat at 95 % TPR up to FPR 5/6 before the last known shape (0) is accepted
    known = np.r_[np.full(19, 10.0), 0.0]
    unknown = np.array([5.0, 4.0, 3.0, 2.0, 1.0, -1.0])
    s, y = np.r_[known, unknown], np.r_[np.ones(20, bool), np.zeros(6, bool)]
    fpr, tpr, _ = roc_curve(y, s)
    assert fpr_at_tpr(s, y) == pytest.approx(np.interp(0.95, tpr, fpr)) == pytest.approx(5 / 6)  # parity kept
    assert fpr_span_at_tpr(s, y) == pytest.approx((0.0, 5 / 6))
    flat: dict = {}
    m = open_set_metrics(known, {"A": unknown, "B": np.array([20.0])}, flat)
    assert m["A"]["FPR95"] == pytest.approx(5 / 6) and flat["A"] == pytest.approx((0.0, 5 / 6))
    assert "B" not in flat  # B's ROC passes 95 % TPR on a slope: one value
    # not flat where the TPR steps over 95 % (10 known), nor where no unknown lies in the gap
    assert fpr_span_at_tpr(np.r_[known[:10], unknown], np.r_[np.ones(10, bool), np.zeros(6, bool)]) is None
    assert fpr_span_at_tpr(np.r_[known, -5.0], np.r_[np.ones(20, bool), False]) is None

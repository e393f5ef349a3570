"""Deterministic training of the weather classifier (the paper's protocol, Appendix B-A).

Real weather scans (label 1) and real clean scans (label 0) are split 9:1 into train / val,
stratified, with the validation seed. Adam (lr 1e-3, weight decay 1e-4, step decay ×0.7 every 20
epochs as in the PointNet reference), cross-entropy, batch 32, ``epochs`` epochs (paper: 80); the
checkpoint with the best val accuracy (ties: lower val loss) is kept; with ``patience`` set,
training stops after that many epochs without improvement (early stopping).

Determinism: ``torch.manual_seed(seed)``, ``torch.use_deterministic_algorithms(True)``, a fixed
number of intra-op threads, batches from a NumPy generator seeded with ``seed`` — the same inputs and
seed give the same weights and history on the same hardware and torch build.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench_build.validate.pointnet import PointNet, PointNetConfig

CLEAN_LABEL, WEATHER_LABEL = 0, 1


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 80
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    lr_step: int = 20
    lr_gamma: float = 0.7
    val_fraction: float = 0.1
    patience: int | None = None  # None: run every epoch, keep the best
    seed: int = 0
    threads: int | None = None  # torch intra-op threads (None: os.cpu_count())
    device: str = "auto"  # auto: cuda when available


@dataclass
class TrainResult:
    state_dict: dict[str, Any]
    model_cfg: PointNetConfig
    best_epoch: int
    best_val_accuracy: float
    train_accuracy: float  # of the best checkpoint, in eval mode
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    seconds_per_epoch: float = 0.0
    device: str = "cpu"
    stopped_early: bool = False


def split_train_val(labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of indices: ``val_fraction`` of each class (at least one) goes to val."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 9_1]))
    train, val = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(len(idx))]
        n_val = max(1, round(len(idx) * val_fraction)) if len(idx) > 1 else 0
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


#: measured training time of one batch at the paper's size (32 scans × 16,384 points, PointNet width 1): ≈ 17 s on
#: 2 CPU cores (`python -m bench_build.validate.bench`), 0.04–0.065 s on an H100
CPU_BATCH_SECONDS, CPU_BATCH_POINTS, CPU_BATCH_THREADS = 17.0, 32 * 16384, 2


def cpu_training_estimate(n_train: int, points: int, width: float, batch_size: int, epochs: int,
                          threads: int) -> float:
    """Seconds the training would take on ``threads`` CPU cores, scaled from `CPU_BATCH_SECONDS`: linear in the
    points seen, quadratic in the width (the shared MLP's layers are width × width), inverse in the threads. An
    upper estimate: early stopping (patience) may end it sooner."""
    per_point = CPU_BATCH_SECONDS / CPU_BATCH_POINTS * max(width, 0.125) ** 2
    batches = -(-n_train // batch_size) * epochs
    return batches * batch_size * points * per_point * CPU_BATCH_THREADS / max(1, threads)


def pick_device(name: str = "auto") -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


@contextlib.contextmanager
def deterministic_torch(seed: int, threads: int | None, device: str) -> Iterator[None]:
    """Seeded, deterministic torch for the duration of the block (global settings are restored)."""
    import torch

    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required for deterministic cuBLAS
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads or os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def _batches(n: int, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    order = rng.permutation(n) if rng is not None else np.arange(n)
    out = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if rng is not None and len(out) > 1 and len(out[-1]) == 1:
        out[-2] = np.concatenate([out[-2], out.pop()])  # BatchNorm cannot train on a batch of one
    return out


def evaluate(model, x: np.ndarray, y: np.ndarray | None, batch_size: int, device: str
             ) -> tuple[np.ndarray, np.ndarray, float]:
    """(logits, global features, mean loss or nan) of ``x`` in eval mode."""
    import torch
    import torch.nn.functional as F

    model.eval()
    logits, feats, loss_sum = [], [], 0.0
    with torch.no_grad():
        for idx in _batches(len(x), batch_size, None):
            xb = torch.from_numpy(x[idx]).to(device)
            out, g = model(xb)
            if y is not None:
                loss_sum += float(F.cross_entropy(out, torch.from_numpy(y[idx]).to(device), reduction="sum"))
            logits.append(out.cpu().numpy())
            feats.append(g.cpu().numpy())
    loss = loss_sum / len(x) if y is not None and len(x) else float("nan")
    return np.concatenate(logits), np.concatenate(feats), loss


def train_classifier(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                     model_cfg: PointNetConfig, cfg: TrainConfig,
                     log: Callable[[str], None] | None = None) -> TrainResult:
    import torch
    import torch.nn.functional as F

    device = pick_device(cfg.device)
    t0 = time.time()
    with deterministic_torch(cfg.seed, cfg.threads, device):
        model = PointNet(model_cfg).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, 1]))
        best: tuple[float, float] | None = None
        best_state, best_epoch, since_best, history = None, 0, 0, []
        stopped = False
        for epoch in range(1, cfg.epochs + 1):
            te = time.time()
            model.train()
            loss_sum, correct = 0.0, 0
            for idx in _batches(len(x_train), cfg.batch_size, rng):
                xb = torch.from_numpy(x_train[idx]).to(device)
                yb = torch.from_numpy(y_train[idx]).to(device)
                opt.zero_grad()
                out, _ = model(xb)
                loss = F.cross_entropy(out, yb)
                loss.backward()
                opt.step()
                loss_sum += float(loss.detach()) * len(idx)
                correct += int((out.argmax(1) == yb).sum())
            sched.step()
            v_logits, _, v_loss = evaluate(model, x_val, y_val, cfg.batch_size, device)
            v_acc = float((v_logits.argmax(1) == y_val).mean())
            rec = {"epoch": epoch, "train_loss": loss_sum / len(x_train), "train_accuracy": correct / len(x_train),
                   "val_loss": v_loss, "val_accuracy": v_acc, "seconds": time.time() - te}
            history.append(rec)
            if log:
                log(f"epoch {epoch}/{cfg.epochs}: train loss {rec['train_loss']:.4f} acc {rec['train_accuracy']:.3f}, "
                    f"val loss {v_loss:.4f} acc {v_acc:.3f}")
            score = (v_acc, -v_loss)
            if best is None or score > best:
                best, best_epoch, since_best = score, epoch, 0
                best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            else:
                since_best += 1
                if cfg.patience is not None and since_best >= cfg.patience:
                    stopped = True
                    break
        assert best_state is not None and best is not None
        model.load_state_dict(best_state)
        t_logits, _, _ = evaluate(model, x_train, y_train, cfg.batch_size, device)
    seconds = time.time() - t0
    return TrainResult(state_dict=best_state, model_cfg=model_cfg, best_epoch=best_epoch,
                       best_val_accuracy=best[0], train_accuracy=float((t_logits.argmax(1) == y_train).mean()),
                       history=history, seconds=seconds,
                       seconds_per_epoch=float(np.mean([h["seconds"] for h in history])), device=device,
                       stopped_early=stopped)


def load_model(state_dict: dict[str, Any], model_cfg: PointNetConfig, device: str = "cpu"):
    model = PointNet(model_cfg)
    model.load_state_dict(state_dict)
    return model.to(device).eval()

"""CPU cost of the naturalness validation: ``python -m bench_build.validate.bench``.

Prints the training time per epoch of the test configuration (measured: whole epochs) and of the
paper's configuration (measured: a few batches, extrapolated): Boreas snow, 24,292 scans split 9:1,
80 epochs, batch 32, full-width PointNet, 16,384 points per scan; plus the test-set inference over
14,962 KITTI examples and the preprocessing cost of one full-resolution scan.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from bench_build.sources.demo.kitti import generate_frame
from bench_build.validate.pointnet import PointNet, PointNetConfig
from bench_build.validate.preprocess import Preprocess
from bench_build.validate.train import TrainConfig, train_classifier

PAPER_SCANS = 24292  # Boreas snow + clean (Table III)
PAPER_TEST = 14962  # KITTI clean + simulated snow (Table III)
PAPER_EPOCHS = 80


def _timed_batches(model, opt, x, y, n: int, train: bool) -> float:
    import torch
    import torch.nn.functional as F

    times = []
    for i in range(n + 1):  # the first batch warms up (allocations, kernels) and is not counted
        t = time.perf_counter()
        if train:
            model.train()
            opt.zero_grad()
            out, _ = model(x)
            F.cross_entropy(out, y).backward()
            opt.step()
        else:
            model.eval()
            with torch.no_grad():
                model(x)
        if i:
            times.append(time.perf_counter() - t)
    return float(np.median(times))


def bench_paper(points: int, width: float, batch: int, batches: int, threads: int) -> dict[str, float]:
    import torch


    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model = PointNet(PointNetConfig(width=width))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, points, 4)
    y = torch.randint(0, 2, (batch,))
    t_train = _timed_batches(model, opt, x, y, batches, True)
    t_eval = _timed_batches(model, opt, x, y, batches, False)
    n_train = round(PAPER_SCANS * 0.9)
    epoch = math.ceil(n_train / batch) * t_train + math.ceil((PAPER_SCANS - n_train) / batch) * t_eval
    return {"train_batch_s": t_train, "eval_batch_s": t_eval, "epoch_s": epoch, "total_s": PAPER_EPOCHS * epoch,
            "test_inference_s": math.ceil(PAPER_TEST / batch) * t_eval,
            "memory_gb": PAPER_SCANS * points * 4 * 4 / 1e9}


def bench_test_config(threads: int, epochs: int = 3) -> dict[str, float]:

    rng = np.random.default_rng(0)
    x = rng.normal(size=(72, 512, 4)).astype(np.float32)
    y = np.repeat([0, 1], 36).astype(np.int64)
    res = train_classifier(x[:64], y[:64], x[64:], y[64:], PointNetConfig(width=0.125),
                           TrainConfig(epochs=epochs, batch_size=16, threads=threads))
    return {"epoch_s": float(np.median([h["seconds"] for h in res.history]))}


def bench_preprocess(points: int) -> float:

    frame = generate_frame(0)  # full resolution: ≈ 120k points, like a KITTI / STF scan
    prep = Preprocess(points=points)
    t = time.perf_counter()
    for i in range(5):
        prep.apply(frame.points, frame.fields, frame.intensity_scale, f"bench/{i}", 0)
    return (time.perf_counter() - t) / 5


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--points", type=int, default=16384)
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=3, help="timed batches of the paper configuration")
    args = ap.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, {args.threads} CPU thread(s), cuda available: {torch.cuda.is_available()}")
    t = bench_test_config(args.threads)
    print(f"test configuration (72 scans, 512 points, width 0.125, batch 16): {t['epoch_s']:.3f} s per epoch")
    p = bench_paper(args.points, args.width, args.batch, args.batches, args.threads)
    print(f"paper configuration (PointNet width {args.width:g}, {args.points} points, batch {args.batch}):")
    print(f"  train batch {p['train_batch_s']:.2f} s, eval batch {p['eval_batch_s']:.2f} s (median of {args.batches})")
    print(f"  extrapolated: {p['epoch_s'] / 3600:.2f} h per epoch over {PAPER_SCANS} Boreas scans (9:1), "
          f"{p['total_s'] / 3600:.0f} h for {PAPER_EPOCHS} epochs; test inference on {PAPER_TEST} KITTI examples "
          f"{p['test_inference_s'] / 60:.0f} min")
    print(f"  preprocessed real scans held in memory: {p['memory_gb']:.1f} GB (float32)")
    print(f"preprocessing one full-resolution scan (crop + sample {args.points}): "
          f"{1e3 * bench_preprocess(args.points):.1f} ms")


if __name__ == "__main__":
    main()

"""PointNet classifier (Qi et al., CVPR 2017) for the weather-vs-clean task, in PyTorch.

Architecture (``width = 1``, the classification network of the PointNet paper without the input and
feature transform nets — the vanilla variant of its ablation, Table 5, which the weather task does
not need: the corruption is a global property of the scan, not of its pose):

    input  B × 4 × N          (x, y, z, intensity after `Preprocess`)
    shared MLP (1×1 Conv1d + BatchNorm + ReLU): 64 → 64 → 64 → 128 → 1024
    max pool over the N points  → global feature, B × 1024   (used for t-SNE / MMD)
    FC 512 + BN + ReLU → FC 256 + BN + ReLU → Dropout(0.3) → FC 2 (clean, weather)

``width`` scales every hidden width (e.g. 0.125 → 8-8-8-16-128, FC 64-32; used by the tests and the
CPU benchmark's small configuration); the global feature has ``round(1024 × width)`` dimensions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

BASE_MLP = (64, 64, 64, 128, 1024)
BASE_FC = (512, 256)


@dataclass(frozen=True)
class PointNetConfig:
    in_channels: int = 4
    width: float = 1.0
    dropout: float = 0.3
    classes: int = 2

    @property
    def mlp(self) -> tuple[int, ...]:
        return tuple(max(2, round(c * self.width)) for c in BASE_MLP)

    @property
    def fc(self) -> tuple[int, ...]:
        return tuple(max(2, round(c * self.width)) for c in BASE_FC)

    @property
    def feature_dim(self) -> int:
        return self.mlp[-1]

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "shared_mlp": list(self.mlp), "fc": [*self.fc, self.classes],
                "global_feature": self.feature_dim, "pooling": "max", "batch_norm": True,
                "transform_nets": False}


class PointNet(nn.Module):
    def __init__(self, cfg: PointNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        c_in = cfg.in_channels
        for c in cfg.mlp:
            layers += [nn.Conv1d(c_in, c, 1), nn.BatchNorm1d(c), nn.ReLU()]
            c_in = c
        self.point_mlp = nn.Sequential(*layers)
        head: list[nn.Module] = []
        for c in cfg.fc:
            head += [nn.Linear(c_in, c), nn.BatchNorm1d(c), nn.ReLU()]
            c_in = c
        head += [nn.Dropout(cfg.dropout), nn.Linear(c_in, cfg.classes)]
        self.head = nn.Sequential(*head)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The max-pooled global feature of a batch ``B × N × C`` (points last-but-one, channels last)."""
        return self.point_mlp(x.transpose(1, 2)).amax(dim=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits B × classes, global features B × feature_dim) of a batch ``B × N × C``."""
        g = self.features(x)
        return self.head(g), g

"""Random rotation by small X-Y-Z Euler angles (ModelNet-C "Rotate", Ren et al. Appendix A).

Models a shape that is not aligned with the canonical pose. α, β, γ ~ U(−θ, θ) i.i.d. (one draw of
three), R = Rz(γ)·Ry(β)·Rx(α), applied to the N×3 row matrix as P·R (the released generator;
equivalently each point is multiplied by Rᵀ). θ = π/30, π/15, π/10, π/7.5, π/6, i.e. 6° … 30°.
The drawn angles are recorded in ``info.euler_deg``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ObjectRotateParams:
    max_angle_deg: float  # θ: each Euler angle ~ U(−θ, θ)


def euler_matrix(alpha: float, beta: float, gamma: float) -> np.ndarray:
    """Rz(γ)·Ry(β)·Rx(α) with standard right-handed rotation matrices."""
    ca, sa, cb, sb, cg, sg = np.cos(alpha), np.sin(alpha), np.cos(beta), np.sin(beta), np.cos(gamma), np.sin(gamma)
    rx = np.array([[1, 0, 0], [0, ca, -sa], [0, sa, ca]])
    ry = np.array([[cb, 0, sb], [0, 1, 0], [-sb, 0, cb]])
    rz = np.array([[cg, -sg, 0], [sg, cg, 0], [0, 0, 1]])
    return rz @ ry @ rx


@stage("object_rotate", params=ObjectRotateParams)
def object_rotate(frame: Frame, params: ObjectRotateParams, rng: np.random.Generator) -> Frame:
    if params.max_angle_deg < 0:
        raise ValueError(f"object_rotate: max_angle_deg must be ≥ 0, got {params.max_angle_deg}")
    theta = np.deg2rad(params.max_angle_deg)
    angles = rng.uniform(-theta, theta, 3)
    points = frame.points.copy()
    points[:, :3] = frame.xyz.astype(np.float64) @ euler_matrix(*angles)
    return frame.with_points(points).with_info(euler_deg=[float(a) for a in np.rad2deg(angles)])

"""Local density increase by quadratic surface fitting (KITTI-C `local_inc`, Li et al. Appendix C-A).

Models locally denser returns: ⌊N / d⌋ centres (d = 2000, 1500, 1000, 800, 600 at severities 1–5) are
drawn uniformly without replacement from the N points. For each centre's k = 100 nearest neighbours
(centre included) a quadratic surface is fitted and k new points ("as many as the neighbour points")
are sampled on it and appended.
Decisions the paper leaves open:
- Fit: in a local frame from the neighbourhood's PCA (origin at its mean; s, t along the largest and
  middle variance axes, height h along the smallest), h = c0 + c1 s + c2 t + c3 s² + c4 st + c5 t² by
  least squares (s, t rescaled to [−1, 1] for conditioning, with a 1e-9 relative ridge so degenerate,
  e.g. collinear, neighbourhoods still have a solution). All centres are solved at once (stacked normal
  equations).
- Sampling: (s, t) uniform in the neighbourhood's bounding rectangle in the (s, t) plane ("within the
  neighbourhood's extent"), h from the fitted polynomial.
- Attributes: each new point copies intensity, every extra column (e.g. ring) and every label column
  except ``point_tag`` from the nearest point (3D distance) of its own neighbourhood, as the authors'
  code does for intensity; ``point_tag`` is ``SYNTHETIC``. Originals keep their values and order.
- Neighbourhoods are all taken on the original scan; new points never seed other neighbourhoods.
- If N < k, a neighbourhood is the whole scan and k is clipped to N (N new points per centre).
  k = 0, count_divisor = inf, or a centre count that rounds to 0 return the input frame unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.frame import Frame, PointTag
from stages.geometry import random_neighbourhoods
from stages.registry import stage

_CHUNK_ELEMENTS = 4_000_000  # bound on the (centres × new × neighbours) distance block, ≈ 32 MB


@dataclass(frozen=True)
class LocalIncParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf adds nothing
    k: int = 100  # neighbourhood size, and number of points added per centre


def _monomials(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(s), s, t, s * s, s * t, t * t], axis=-1)


@stage("local_inc", params=LocalIncParams, version=2)  # v2: nearest-attribute search by matmul
def local_inc(frame: Frame, params: LocalIncParams, rng: np.random.Generator) -> Frame:
    try:
        nn = random_neighbourhoods(frame, params.count_divisor, params.k, rng)
    except ValueError as e:
        raise ValueError(f"local_inc: {e}") from None
    if nn is None:
        return frame
    n_centres, k = nn.shape

    # local PCA frame of every neighbourhood: columns of `axes` are (s, t, h) = largest → smallest variance
    nbr = frame.xyz[nn].astype(np.float64)  # (c, k, 3)
    mean = nbr.mean(axis=1, keepdims=True)
    q = nbr - mean
    cov = np.einsum("cki,ckj->cij", q, q) / k
    _, vecs = np.linalg.eigh(cov)  # ascending eigenvalues
    axes = vecs[:, :, ::-1]
    local = np.einsum("cki,cij->ckj", q, axes)
    s, t, h = local[..., 0], local[..., 1], local[..., 2]
    scale = np.maximum(np.abs(s).max(axis=1), np.abs(t).max(axis=1))
    scale = np.where(scale > 0, scale, 1.0)[:, None]

    # batched least squares on the normal equations (AᵀA + λI) c = Aᵀh
    a = _monomials(s / scale, t / scale)  # (c, k, 6)
    ata = np.einsum("cki,ckj->cij", a, a)
    ridge = 1e-9 * np.trace(ata, axis1=1, axis2=2) / 6 + 1e-12
    ata += ridge[:, None, None] * np.eye(6)
    coef = np.linalg.solve(ata, np.einsum("cki,ck->ci", a, h)[..., None])[..., 0]  # (c, 6)

    # k new points per centre, uniform over the (s, t) bounding rectangle, lifted onto the surface
    s_lo, s_hi = s.min(axis=1, keepdims=True), s.max(axis=1, keepdims=True)
    t_lo, t_hi = t.min(axis=1, keepdims=True), t.max(axis=1, keepdims=True)
    s_new = s_lo + rng.random((n_centres, k)) * (s_hi - s_lo)
    t_new = t_lo + rng.random((n_centres, k)) * (t_hi - t_lo)
    h_new = np.einsum("cki,ci->ck", _monomials(s_new / scale, t_new / scale), coef)
    local_new = np.stack([s_new, t_new, h_new], axis=-1)  # (c, k, 3)
    xyz_new = np.einsum("ckj,cij->cki", local_new, axes) + mean

    # attributes from the nearest original point of the same neighbourhood (chunked over centres):
    # argmin_j |new − old_j|² = argmin_j (|old_j|² − 2 new·old_j), one batched matmul per chunk
    src = np.empty((n_centres, k), dtype=np.int64)
    sq_old = np.einsum("ckj,ckj->ck", local, local)
    step = max(1, _CHUNK_ELEMENTS // (k * k))
    for lo in range(0, n_centres, step):
        sl = slice(lo, lo + step)
        d2 = sq_old[sl, None, :] - 2.0 * np.matmul(local_new[sl], local[sl].transpose(0, 2, 1))
        src[sl] = np.take_along_axis(nn[sl], d2.argmin(axis=2), axis=1)
    src = src.ravel()

    new = frame.points[src].astype(np.float64)
    new[:, :3] = xyz_new.reshape(-1, 3)
    labels = {name: col[src] for name, col in frame.labels.items() if name != "point_tag"}
    return frame.append(new.astype(np.float32), tag=PointTag.SYNTHETIC, **labels)

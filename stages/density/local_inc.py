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
The above is ``rule = "text"``.

``rule = "code"`` (default) follows the released generator behind the published numbers: each centre
is an independent uniform draw; its k nearest points are found on (x, y, z, intensity) together; the
axis of the neighbourhood's smallest extent (max − min among x, y, z) is the height, fitted by least
squares as h = w0 + w1 u + w2 v + w3 u² + w4 v² + w5 uv over the other two axes (u, v); the k new
points have u ~ N(mean, std) and v ~ N(mean, std) of the neighbours (population std) and h from the
fit; each copies intensity and the other attributes from its nearest neighbour (3D).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.geometry import check_rule, random_neighbourhoods
from bench_build.stages.kernels.neighbours import query_in_spatial_order
from bench_build.stages.registry import stage

_CHUNK_ELEMENTS = 4_000_000  # bound on the (centres × new × neighbours) distance block, ≈ 32 MB


@dataclass(frozen=True)
class LocalIncParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf adds nothing
    k: int = 100  # neighbourhood size, and number of points added per centre
    rule: str = "code"  # "code": Li et al.'s released generator; "text": Appendix C (see the module docstring)


def _monomials(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(s), s, t, s * s, s * t, t * t], axis=-1)


@stage("local_inc", params=LocalIncParams, version=4)  # v3: rule (code: released fit); v4: float32 nearest
def local_inc(frame: Frame, params: LocalIncParams, rng: np.random.Generator) -> Frame:
    check_rule(params.rule, "local_inc")
    if params.rule == "code":
        return _local_inc_code(frame, params, rng)
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


AXES = np.array([[1, 2, 0], [2, 0, 1], [0, 1, 2]])  # (u, v, h) axes when h is x, y, z (the released order)


def knn_with_intensity(frame: Frame, centres: np.ndarray, k: int) -> np.ndarray:
    """(c, k) indices of each centre's k nearest points in (x, y, z, intensity) space, nearest first.

    Exact, from the cached 3D KD-tree: the 4D distance is at least the 3D one, so once the k-th 4D
    distance among the 3D candidates is within the candidates' largest 3D distance, no point outside
    them can be closer; centres for which that does not hold are re-queried with more candidates.
    """
    n = len(frame)
    inten = frame.intensity  # float32: only the gathered values are widened (the same float64 values)
    out = np.empty((len(centres), k), dtype=np.int64)
    todo = np.arange(len(centres))
    kq = min(n, 2 * k)
    while todo.size:
        d3, cand = query_in_spatial_order(frame.kdtree, frame.xyz[centres[todo]].astype(np.float64), kq)
        d4 = d3 ** 2 + (inten[cand].astype(np.float64) - inten[centres[todo]].astype(np.float64)[:, None]) ** 2
        order = np.argsort(d4, axis=1, kind="stable")[:, :k]
        out[todo] = np.take_along_axis(cand, order, axis=1)
        kth = np.take_along_axis(d4, order[:, -1:], axis=1)[:, 0]
        ok = (kth <= d3[:, -1] ** 2) | (kq >= n)
        todo = todo[~ok]
        kq = min(n, kq * 2)
    return out


def _local_inc_code(frame: Frame, params: LocalIncParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"local_inc: count_divisor must be > 0, got {params.count_divisor}")
    if params.k < 0:
        raise ValueError(f"local_inc: k must be ≥ 0, got {params.k}")
    n = len(frame)
    n_centres = 0 if np.isinf(params.count_divisor) else int(n // params.count_divisor)
    k = min(params.k, n)
    if n_centres == 0 or k == 0:
        return frame
    centres = rng.integers(0, n, size=n_centres)
    nn = knn_with_intensity(frame, centres, k)
    nbr = frame.xyz[nn].astype(np.float64)  # (c, k, 3)
    h_axis = np.argmin(nbr.max(axis=1) - nbr.min(axis=1), axis=1)
    perm = AXES[h_axis]  # (c, 3): u, v, h
    local = np.take_along_axis(nbr, perm[:, None, :], axis=2)
    mean = local.mean(axis=1, keepdims=True)
    std = local.std(axis=1, keepdims=True)
    # the same least-squares fit as in raw coordinates (the quadratic model is closed under shifting and
    # scaling u, v), on centred and scaled ones for conditioning
    scale = np.where(std[..., :2] > 0, std[..., :2], 1.0)
    uv = (local[..., :2] - mean[..., :2]) / scale
    a = _monomials_code(uv[..., 0], uv[..., 1])
    ata = np.einsum("cki,ckj->cij", a, a)
    ata += (1e-12 * np.trace(ata, axis1=1, axis2=2) + 1e-300)[:, None, None] * np.eye(6)
    coef = np.linalg.solve(ata, np.einsum("cki,ck->ci", a, local[..., 2])[..., None])[..., 0]
    new_uv = rng.standard_normal((n_centres, k, 2))  # N(mean, std) in the scaled frame: N(0, std/scale)
    new_uv *= std[..., :2] / scale
    h_new = np.einsum("cki,ci->ck", _monomials_code(new_uv[..., 0], new_uv[..., 1]), coef)
    local_new = np.concatenate([new_uv * scale + mean[..., :2], h_new[..., None]], axis=2)
    xyz_new = np.take_along_axis(local_new, np.argsort(perm, axis=1)[:, None, :], axis=2)
    # attributes from the nearest neighbour (3D) of the same neighbourhood
    # relative to the centre (metres of offsets: float32 is ample, and halves the (c, k, k) block)
    rel = (nbr - nbr[:, :1]).astype(np.float32)
    d2 = np.einsum("ckj,ckj->ck", rel, rel)[:, None, :] - 2.0 * np.matmul(
        (xyz_new - nbr[:, :1]).astype(np.float32), rel.transpose(0, 2, 1))
    src = np.take_along_axis(nn, d2.argmin(axis=2), axis=1).ravel()
    new = frame.points[src].astype(np.float64)
    new[:, :3] = xyz_new.reshape(-1, 3)
    labels = {name: col[src] for name, col in frame.labels.items() if name != "point_tag"}
    return frame.append(new.astype(np.float32), tag=PointTag.SYNTHETIC, **labels)


def _monomials_code(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(u), u, v, u * u, v * v, u * v], axis=-1)

"""Per-box corruptions of driving scenes (KITTI-C object level, Li et al. Appendix C-B).

Each stage changes only the points inside a frame's 3D boxes (`Frame.box_points`) or the boxes themselves
(translation, rotation, scale, shear, FFD), and keeps the boxes' camera-side fields consistent
(`bench_build.stages.geometry.refresh_camera_fields`). Whole-scene corruptions are in `noise/`, `density/` and
`weather/`; corruptions of a single object shape (ModelNet) are in `whole_shape/`.
"""

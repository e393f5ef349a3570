"""Demo data and test fixtures, each written in its dataset's real on-disk layout: `kitti` (the ray-cast demo
street in KITTI layout, and the scene generator the others cast), `synthetic` (that scene cast with any
spinning LiDAR's beams), `semantickitti`, `nuscenes`, `waymo` (fixture writers of those formats), `objects`
(procedural meshes as ModelNet40 / ScanObjectNN / ShapeNetCore), `cache` (seed, demo marker, cache folder).

Readers import nothing from here; these writers import the readers' format constants."""

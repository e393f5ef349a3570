"""`bench-build export`: a built version as KITTI data roots that OpenPCDet's and mmdetection3d's KITTI
converters accept (``create_kitti_infos`` / ``tools/create_data.py kitti``).

One partition (``--corruption C --severity S``)::

    OUT/ImageSets/{train,val,test,trainval}.txt   the exported frame ids in --split's list (default: the
                                                  build's split, else ``val``), in no other of train/val/test;
                                                  trainval = train ∪ val (`image_sets`)
    OUT/training/velodyne/<id>.bin                float32 x, y, z, intensity
    OUT/training/label_2/<id>.txt                 the example's boxes (object-level corruptions: the
                                                  moved boxes), DontCare lines last as KITTI has them
    OUT/training/calib/<id>.txt                   P0–P3, R0_rect, Tr_velo_to_cam, Tr_imu_to_velo in
                                                  KITTI's line order (OpenPCDet reads lines by index)
    OUT/training/image_2 -> <source>/training/image_2   linked from --source (OpenPCDet asserts on it)
    OUT/training/planes  -> <source>/training/planes    linked when the source has it (optional)

``--all`` (default ``--layout robo3d``, the layout Robo3D's docs use, reusing the clean infos)::

    OUT/<benchmark>/clean/                        a full data root as above
    OUT/<benchmark>/<corruption>/<severity>/velodyne/<id>.bin
    OUT/<benchmark>/<corruption>/<severity>/label_2/<id>.txt   only where the corruption moved boxes

``<severity>`` is the recipe's severity name (light, moderate, heavy) or the number. With
``--all --layout kitti`` every partition is a full data root of its own; ``--layout`` without ``--all`` is refused.

Only builds of KITTI scans (recipe ``source = "kitti"``: kitti-c, robo3d-kitti-c) are exported; any other
benchmark is refused first (`check_source`).

Nothing is written until every file and link is decided and every precondition checked (`export_version`): OUT
must be new or empty (``--force``: replace only the export's own files and links), and is never --source, the
version, inside any version folder, or an output root of built versions or one of its benchmark folders; no path
the export writes may resolve into --source or the version. Every data root written holds ``BENCH_BUILD_EXPORT``
(`EXPORT_MARKER`); one that holds KITTI files without it is no export's, and is refused (`check_marked`). A refusal
writes nothing.
"""

from bench_build.export.errors import ExportError, ExportIncomplete
from bench_build.export.plan import ExportResult, check_partition, severity_dir
from bench_build.export.write import export_version

__all__ = ["ExportError", "ExportIncomplete", "ExportResult", "check_partition", "export_version", "severity_dir"]
